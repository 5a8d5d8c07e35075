#version 450
#extension GL_GOOGLE_include_directive : require
// y[m, n] = x[m, :] · W[n, :] (+ bias[n]) for a few rows m < M <= MMAX <= 8
// (decode). One subgroup per pair of dot products, no shared memory and no
// barrier: lanes stride over K, subgroupAdd reduces, lane 0 writes. A
// workgroup covers ROWS outputs; its subgroups take them in turn, so any
// subgroup size is correct (the host sizes WG from the reported one).
// W is f32/f16/bf16 (spec constant 0).
// VEC = 1: K, the row starts and offsets are multiples of 8 elements, and W
// is read as uvec4 (8 halves or 4 floats per load), UNROLL loads per row in
// flight per lane (spec constant 6), for full bandwidth.
// GATED = 1: binding 4 is a second matrix U [N, K] (+ bias binding 5) and
// y[m, n] = act(x·W[n] + b) * (x·U[n] + bu) (SwiGLU/GeGLU without the gate
// and up outputs). flags: 1 bias, 2 accumulate (y = y + alpha * result,
// the residual add), 4 bias of U.
// NORM = 1: x is RMS-normalised on the fly (the decode step's pre-norm):
// x̂ = x / sqrt(mean(x²) + eps) · g (binding 6; nflags 1 = 1 + g, 2 = has g),
// each workgroup reducing x itself; y = rstd · (W · (x ⊙ g)) + bias.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint WG = 128;
layout(constant_id = 2) const uint ROWS = 8;
layout(constant_id = 3) const uint VEC = 0;
layout(constant_id = 4) const uint MMAX = 8;
layout(constant_id = 5) const uint GATED = 0;
layout(constant_id = 6) const uint UNROLL = 4;
layout(constant_id = 7) const uint NORM = 0;
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { uint ww[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer U { uint uw[]; };
layout(std430, binding = 4) readonly buffer U4 { uvec4 u4[]; };
layout(std430, binding = 5) readonly buffer BiasU { float bias_u[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(std430, binding = 6) readonly buffer G4 { vec4 g4[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K; uint x_off; uint w_off; uint bias_off; uint y_off; uint flags;
  uint u_off; uint bu_off; uint act; float alpha;
  uint g_off; float eps; uint nflags;
} p;
shared float nred[8 * 64];  // [m][subgroup] partial sums of squares
shared float rstd_s[8];

vec4 gain4(uint e) {  // norm weights of elements e..e+3
  if ((p.nflags & 2u) == 0u) return vec4(1.0);
  vec4 gv = g4[(p.g_off + e) / 4u];
  return (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
}
float gain(uint e) {
  if ((p.nflags & 2u) == 0u) return 1.0;
  float gv = g[p.g_off + e];
  return (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
}

// 8 (16-bit) or 4 (f32) weights of one uvec4 against x from vec4 index xb.
// e: element index of the first weight within the row (for the norm gains)
float dotu(uvec4 w, uint xb, uint e) {
  if (BDT == HN_DT_F32) return dot(uintBitsToFloat(w), NORM != 0u ? x4[xb] * gain4(e) : x4[xb]);
  vec4 xa = x4[xb], xc = x4[xb + 1u];
  if (NORM != 0u) { xa *= gain4(e); xc *= gain4(e + 4u); }
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
  uint n0 = hn_group_index() * ROWS;
  if (n0 >= p.N) return;
  uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
  if (NORM != 0u) {
    // every workgroup reduces the (few, short) rows of x itself: no separate norm pass
    for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      float ss = 0.0;
      for (uint k = gl_LocalInvocationID.x; k < p.K; k += WG) { float v = x[p.x_off + m * p.K + k]; ss += v * v; }
      ss = subgroupAdd(ss);
      if (subgroupElect()) nred[m * 64u + gl_SubgroupID] = ss;
    }
    barrier();
    if (gl_LocalInvocationID.x < p.M) {
      uint m = gl_LocalInvocationID.x;
      float ss = 0.0;
      for (uint sg = 0u; sg < gl_NumSubgroups; sg++) ss += nred[m * 64u + sg];
      rstd_s[m] = 1.0 / sqrt(ss / float(p.K) + p.eps);
    }
    barrier();
  }
  // per subgroup step: two dot products, rows (n, n + 1) of W, or row n of W and of U
  uint per = GATED != 0u ? 1u : 2u;
  for (uint r = gl_SubgroupID * per; r < ROWS; r += gl_NumSubgroups * per) {
    uint n = n0 + r;
    if (n >= p.N) break;  // uniform in the subgroup
    uint nb = GATED != 0u ? n : min(n + 1u, p.N - 1u);  // a row past N re-reads the last; dropped below
    float acc_a[8], acc_b[8];
    [[unroll]] for (uint m = 0u; m < MMAX; m++) { acc_a[m] = 0.0; acc_b[m] = 0.0; }
    if (VEC != 0u) {
      uint epu = BDT == HN_DT_F32 ? 4u : 8u;  // elements per uvec4
      uint KU = p.K / epu;
      uint ra = (p.w_off + n * p.K) / epu;
      uint rb = GATED != 0u ? (p.u_off + n * p.K) / epu : (p.w_off + nb * p.K) / epu;
      for (uint k0 = lane; k0 < KU; k0 += UNROLL * sgs) {
        uvec4 wa[UNROLL], wb[UNROLL];
        // all loads first, so UNROLL * 2 of them are in flight per lane
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
          uint k = k0 + u * sgs;
          wa[u] = k < KU ? w4[ra + k] : uvec4(0u);
          if (GATED != 0u) wb[u] = k < KU ? u4[rb + k] : uvec4(0u);
          else wb[u] = k < KU ? w4[rb + k] : uvec4(0u);
        }
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
          uint k = k0 + u * sgs;
          if (k < KU)
            [[unroll]] for (uint m = 0u; m < MMAX; m++) {
              if (m >= p.M) break;
              uint xb = (p.x_off + m * p.K) / 4u + k * (epu / 4u);
              acc_a[m] += dotu(wa[u], xb, k * epu);
              acc_b[m] += dotu(wb[u], xb, k * epu);
            }
        }
      }
    } else {
      uint ra = p.w_off + n * p.K;
      uint rb = GATED != 0u ? p.u_off + n * p.K : p.w_off + nb * p.K;
      for (uint k = lane; k < p.K; k += sgs) {
        float wa = HN_LOAD(ww, BDT, ra + k);
        float wb = GATED != 0u ? HN_LOAD(uw, BDT, rb + k) : HN_LOAD(ww, BDT, rb + k);
        [[unroll]] for (uint m = 0u; m < MMAX; m++) {
          if (m >= p.M) break;
          float xv = x[p.x_off + m * p.K + k];
          if (NORM != 0u) xv *= gain(k);
          acc_a[m] = fma(xv, wa, acc_a[m]);
          acc_b[m] = fma(xv, wb, acc_b[m]);
        }
      }
    }
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      float sa = subgroupAdd(acc_a[m]), sb = subgroupAdd(acc_b[m]);
      if (NORM != 0u) { sa *= rstd_s[m]; sb *= rstd_s[m]; }
      if (lane == 0u) {
        float res_a, res_b = 0.0;
        bool has_b = false;
        if (GATED != 0u) {
          float g = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
          float v = sb + ((p.flags & 4u) != 0u ? bias_u[p.bu_off + n] : 0.0);
          res_a = hn_act(p.act, g) * v;
        } else {
          res_a = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
          has_b = n + 1u < p.N && r + 1u < ROWS;
          if (has_b) res_b = sb + ((p.flags & 1u) != 0u ? bias[p.bias_off + n + 1u] : 0.0);
        }
        uint yi = p.y_off + m * p.N + n;
        if ((p.flags & 2u) != 0u) {
          y[yi] = y[yi] + p.alpha * res_a;
          if (has_b) y[yi + 1u] = y[yi + 1u] + p.alpha * res_b;
        } else {
          y[yi] = res_a;
          if (has_b) y[yi + 1u] = res_b;
        }
      }
    }
  }
}
