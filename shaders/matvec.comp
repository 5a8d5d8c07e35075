#version 450
#extension GL_GOOGLE_include_directive : require
// y[m, n] = x[m, :] · W[n, :] (+ bias[n]) for a few rows m < M <= 8 (decode):
// each workgroup computes ROWS outputs n (over a 2-D grid of workgroups);
// invocations stride over K and reduce with subgroup adds, then across
// subgroups in shared memory. W is f32/f16/bf16 (spec constant 0).
// VEC = 1: K, the row starts and offsets are multiples of 8 elements, and W
// is read as uvec4 (8 halves or 4 floats per load) for full bandwidth.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint WG = 128;
layout(constant_id = 2) const uint ROWS = 2;
layout(constant_id = 3) const uint VEC = 0;
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { uint ww[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint M; uint N; uint K; uint x_off; uint w_off; uint bias_off; uint y_off; uint has_bias; } p;
shared float part[8 * 8 * 64];  // [ROWS <= 8][M <= 8][subgroups <= 64]

float dot8(uvec4 w, vec4 xa, vec4 xb) {
  if (BDT == HN_DT_F16) {
    vec2 a = unpackHalf2x16(w.x), b = unpackHalf2x16(w.y), c = unpackHalf2x16(w.z), d = unpackHalf2x16(w.w);
    return dot(vec4(a, b), xa) + dot(vec4(c, d), xb);
  }
  // bf16: low half = element 2i, high half = element 2i + 1
  vec4 lo = vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u),
                 uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u));
  vec4 hi = vec4(uintBitsToFloat(w.z << 16), uintBitsToFloat(w.z & 0xffff0000u),
                 uintBitsToFloat(w.w << 16), uintBitsToFloat(w.w & 0xffff0000u));
  return dot(lo, xa) + dot(hi, xb);
}

void main() {
  uint n0 = hn_group_index() * ROWS;
  if (n0 >= p.N) return;
  uint tid = gl_LocalInvocationID.x;
  float acc[8 * 8];
  [[unroll]] for (uint i = 0u; i < ROWS * 8u; i++) acc[i] = 0.0;
  if (VEC != 0u) {
    // k outer, rows inner: each invocation issues the loads of all ROWS
    // rows back to back, so enough memory traffic is in flight for tall
    // matrices (LM head). Rows past N re-read the last row; their sums are
    // dropped below.
    uint wrow[8];
    [[unroll]] for (uint r = 0u; r < ROWS; r++) wrow[r] = min(n0 + r, p.N - 1u) * p.K;
    if (BDT == HN_DT_F32) {
      for (uint k4 = tid; k4 < p.K / 4u; k4 += WG) {
        vec4 w[8];
        [[unroll]] for (uint r = 0u; r < ROWS; r++) w[r] = uintBitsToFloat(w4[((p.w_off + wrow[r]) >> 2) + k4]);
        [[unroll]] for (uint m = 0u; m < 8u; m++)
          if (m < p.M) {
            vec4 xv = x4[((p.x_off + m * p.K) >> 2) + k4];
            [[unroll]] for (uint r = 0u; r < ROWS; r++) acc[r * 8u + m] += dot(w[r], xv);
          }
      }
    } else {
      for (uint k8 = tid; k8 < p.K / 8u; k8 += WG) {
        uvec4 w[8];
        [[unroll]] for (uint r = 0u; r < ROWS; r++) w[r] = w4[((p.w_off + wrow[r]) >> 3) + k8];
        [[unroll]] for (uint m = 0u; m < 8u; m++)
          if (m < p.M) {
            uint xb = ((p.x_off + m * p.K) >> 2) + 2u * k8;
            vec4 xa = x4[xb], xc = x4[xb + 1u];
            [[unroll]] for (uint r = 0u; r < ROWS; r++) acc[r * 8u + m] += dot8(w[r], xa, xc);
          }
      }
    }
  } else {
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
      uint n = n0 + r;
      if (n >= p.N) break;
      uint wrow = p.w_off + n * p.K;
      for (uint k = tid; k < p.K; k += WG) {
        float w = HN_LOAD(ww, BDT, wrow + k);
        [[unroll]] for (uint m = 0u; m < 8u; m++)
          if (m < p.M) acc[r * 8u + m] = fma(x[p.x_off + m * p.K + k], w, acc[r * 8u + m]);
      }
    }
  }
  uint n_sg = gl_NumSubgroups;
  [[unroll]] for (uint r = 0u; r < ROWS; r++)
    [[unroll]] for (uint m = 0u; m < 8u; m++) {
      if (m >= p.M) break;
      float s = subgroupAdd(acc[r * 8u + m]);
      if (subgroupElect()) part[(r * 8u + m) * 64u + gl_SubgroupID] = s;
    }
  barrier();
  if (tid < ROWS * p.M) {
    uint r = tid / p.M, m = tid % p.M, n = n0 + r;
    if (n < p.N) {
      float s = 0.0;
      for (uint g = 0u; g < n_sg; g++) s += part[(r * 8u + m) * 64u + g];
      if (p.has_bias != 0u) s += bias[p.bias_off + n];
      y[p.y_off + m * p.N + n] = s;
    }
  }
}
