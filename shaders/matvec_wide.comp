#version 450
#extension GL_GOOGLE_include_directive : require
// y[n] = x · W[n, :] (+ bias[n]) for one row of x (decode), the whole
// workgroup on each of its R rows: every invocation takes uvec4 chunks
// k = tid, tid + WG, ... of all R rows (UNROLL chunks per row in flight), so
// a row of K = 2048 16-bit weights is one 16-byte load per invocation and
// short-wide matrices (few rows, long K) still fill the GPU; subgroupAdd,
// then one shared-memory step and one barrier reduce. Needs K, the row
// starts and offsets in multiples of 8 elements (uvec4 loads: 8 halves or
// 4 floats) and x 4-aligned (matvec.comp takes the rest, and M > 1).
// W is f32/f16/bf16 (spec constant 0).
// GATED = 1: binding 4 is a second matrix U [N, K] (+ bias binding 5) and
// y[n] = act(x·W[n] + b) * (x·U[n] + bu) (SwiGLU/GeGLU without the gate and
// up outputs). flags: 1 bias, 2 accumulate (y = y + alpha * result, the
// residual add), 4 bias of U.
// NORM = 1: x is RMS-normalised on the fly (the decode step's pre-norm):
// x̂ = x / sqrt(mean(x²) + eps) · g (binding 6; nflags 1 = 1 + g, 2 = has g);
// the sum of squares is one more accumulator of the same loop (every
// invocation reads its chunks of x once), so the norm costs no extra pass.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint WG = 256;
layout(constant_id = 2) const uint R = 4;       // output rows per workgroup, <= 8
layout(constant_id = 3) const uint GATED = 0;
layout(constant_id = 4) const uint NORM = 0;
layout(constant_id = 5) const uint UNROLL = 1;  // chunks per row loaded before use, <= 4
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer U4 { uvec4 u4[]; };
layout(std430, binding = 5) readonly buffer BiasU { float bias_u[]; };
layout(std430, binding = 6) readonly buffer G4 { vec4 g4[]; };
layout(push_constant) uniform P {
  uint N; uint K; uint x_off; uint w_off; uint bias_off; uint y_off; uint flags;
  uint u_off; uint bu_off; uint act; float alpha;
  uint g_off; float eps; uint nflags;
} p;
// [slot][subgroup]: slots 0..R-1 rows of W, R..2R-1 rows of U, 2R the sum of squares
shared float red[17 * 64];

vec4 gain4(uint e) {  // norm weights of elements e..e+3
  if ((p.nflags & 2u) == 0u) return vec4(1.0);
  vec4 gv = g4[(p.g_off + e) / 4u];
  return (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
}

// 8 (16-bit: against xa, xc) or 4 (f32: against xa) weights of one uvec4
float dotu(uvec4 w, vec4 xa, vec4 xc) {
  if (BDT == HN_DT_F32) return dot(uintBitsToFloat(w), xa);
  if (BDT == HN_DT_F16) {
    vec2 a = unpackHalf2x16(w.x), b = unpackHalf2x16(w.y), c = unpackHalf2x16(w.z), d = unpackHalf2x16(w.w);
    return dot(vec4(a, b), xa) + dot(vec4(c, d), xc);
  }
  // bf16: low half = element 2i, high half = element 2i + 1
  vec4 lo = vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u),
                 uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u));
  vec4 hi = vec4(uintBitsToFloat(w.z << 16), uintBitsToFloat(w.z & 0xffff0000u),
                 uintBitsToFloat(w.w << 16), uintBitsToFloat(w.w & 0xffff0000u));
  return dot(lo, xa) + dot(hi, xc);
}

void main() {
  uint n0 = hn_group_index() * R;
  if (n0 >= p.N) return;  // uniform in the workgroup
  uint tid = gl_LocalInvocationID.x;
  uint epu = BDT == HN_DT_F32 ? 4u : 8u;  // elements per uvec4
  uint KU = p.K / epu;
  uint ra[8], rb[8];
  float acc_a[8], acc_b[8];
  [[unroll]] for (uint r = 0u; r < R; r++) {
    uint n = min(n0 + r, p.N - 1u);  // a row past N re-reads the last; not written
    ra[r] = (p.w_off + n * p.K) / epu;
    rb[r] = (p.u_off + n * p.K) / epu;
    acc_a[r] = 0.0;
    acc_b[r] = 0.0;
  }
  float ss = 0.0;
  uint xb0 = p.x_off / 4u;
  for (uint k0 = tid; k0 < KU; k0 += UNROLL * WG) {
    uvec4 wa[UNROLL * R], wb[UNROLL * R];  // [u * R + r]
    // all loads first, so UNROLL * R (x 2 gated) of them are in flight per invocation
    [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
      uint k = k0 + u * WG;
      [[unroll]] for (uint r = 0u; r < R; r++) {
        wa[u * R + r] = k < KU ? w4[ra[r] + k] : uvec4(0u);
        if (GATED != 0u) wb[u * R + r] = k < KU ? u4[rb[r] + k] : uvec4(0u);
      }
    }
    [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
      uint k = k0 + u * WG;
      if (k < KU) {
        uint e = k * epu;  // first element of the chunk
        vec4 xa = x4[xb0 + e / 4u], xc = BDT == HN_DT_F32 ? vec4(0.0) : x4[xb0 + e / 4u + 1u];
        if (NORM != 0u) {
          ss += dot(xa, xa) + dot(xc, xc);
          xa *= gain4(e);
          if (BDT != HN_DT_F32) xc *= gain4(e + 4u);
        }
        [[unroll]] for (uint r = 0u; r < R; r++) {
          acc_a[r] += dotu(wa[u * R + r], xa, xc);
          if (GATED != 0u) acc_b[r] += dotu(wb[u * R + r], xa, xc);
        }
      }
    }
  }
  uint sg = gl_SubgroupID;
  [[unroll]] for (uint r = 0u; r < R; r++) {
    float sa = subgroupAdd(acc_a[r]);
    if (subgroupElect()) red[r * 64u + sg] = sa;
    if (GATED != 0u) {
      float sb = subgroupAdd(acc_b[r]);
      if (subgroupElect()) red[(R + r) * 64u + sg] = sb;
    }
  }
  if (NORM != 0u) {
    float st = subgroupAdd(ss);
    if (subgroupElect()) red[2u * R * 64u + sg] = st;
  }
  barrier();
  if (tid >= R) return;
  uint r = tid, n = n0 + r;
  if (n >= p.N) return;
  float sa = 0.0, sb = 0.0, st = 0.0;
  for (uint s = 0u; s < gl_NumSubgroups; s++) {
    sa += red[r * 64u + s];
    if (GATED != 0u) sb += red[(R + r) * 64u + s];
    if (NORM != 0u) st += red[2u * R * 64u + s];
  }
  if (NORM != 0u) {
    float rstd = 1.0 / sqrt(st / float(p.K) + p.eps);
    sa *= rstd;
    sb *= rstd;
  }
  float res;
  if (GATED != 0u) {
    float g = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
    float v = sb + ((p.flags & 4u) != 0u ? bias_u[p.bu_off + n] : 0.0);
    res = hn_act(p.act, g) * v;
  } else {
    res = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
  }
  uint yi = p.y_off + n;
  y[yi] = (p.flags & 2u) != 0u ? y[yi] + p.alpha * res : res;
}
