#version 450
#extension GL_GOOGLE_include_directive : require
// y[m, n] = x[m, :] · W[n, :] (+ bias[n]) for a few rows m < M <= MMAX <= 8
// (decode) with W [N, K] in ggml blocks (GT, shaders/gguf_dequant.glsl): the
// weights stay quantized in memory and each lane dequantizes whole 32-element
// units into registers. One subgroup per output row: lanes stride over the
// row's units, subgroupAdd reduces, lane 0 writes; a workgroup covers ROWS
// rows. The same options as matvec.comp (engine/tensor/ops.c dispatch_matvec):
// GATED = 1: binding 4 is U [N, K] (same type) and y = act(x·W[n] + b) * (x·U[n] + bu);
// flags 1 bias, 2 accumulate (y += alpha * result), 4 bias of U;
// NORM = 1: x is RMS-normalised on the fly (gain binding 6, nflags 1 = 1 + g, 2 = has g).
// XVEC = 1: x rows start on 4-element boundaries (vec4 loads).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(constant_id = 1) const uint WG = 128;
layout(constant_id = 2) const uint ROWS = 8;
layout(constant_id = 3) const uint XVEC = 0;
layout(constant_id = 4) const uint MMAX = 8;
layout(constant_id = 5) const uint GATED = 0;
layout(constant_id = 6) const uint NORM = 0;
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { uint qw[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer U { uint qu[]; };
layout(std430, binding = 5) readonly buffer BiasU { float bias_u[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K; uint x_off; uint row_bytes; uint bias_off; uint y_off; uint flags;
  uint bu_off; uint act; float alpha;
  uint g_off; float eps; uint nflags;
} p;
shared float nred[8 * 64];  // [m][subgroup] partial sums of squares
shared float rstd_s[8];

uint gg_word(uint which, uint i) { return which == 0u ? qw[i] : qu[i]; }
#include "gguf_dequant.glsl"

float gain(uint e) {
  if ((p.nflags & 2u) == 0u) return 1.0;
  float gv = g[p.g_off + e];
  return (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
}

// x[m, k0 + 4i .. k0 + 4i + 4)
vec4 xq(uint m, uint k0, uint i) {
  uint base = p.x_off + m * p.K + k0 + 4u * i;
  if (XVEC != 0u) return x4[base / 4u];
  return vec4(x[base], x[base + 1u], x[base + 2u], x[base + 3u]);
}

void main() {
  uint n0 = hn_group_index() * ROWS;
  if (n0 >= p.N) return;
  uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
  if (NORM != 0u) {
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
  uint units = p.K / 32u;
  for (uint r = gl_SubgroupID; r < ROWS; r += gl_NumSubgroups) {
    uint n = n0 + r;
    if (n >= p.N) break;  // uniform in the subgroup
    uint rb = n * p.row_bytes;
    float acc_a[8], acc_b[8];
    [[unroll]] for (uint m = 0u; m < MMAX; m++) { acc_a[m] = 0.0; acc_b[m] = 0.0; }
    for (uint u = lane; u < units; u += sgs) {
      float wa[32], wb[32];
      gg_unit(0u, rb, u, wa);
      if (GATED != 0u) gg_unit(1u, rb, u, wb);
      if (NORM != 0u)  // the norm gains scale x; applied to the weights once for all rows of x
        [[unroll]] for (uint i = 0u; i < 32u; i++) {
          float gv = gain(u * 32u + i);
          wa[i] *= gv;
          if (GATED != 0u) wb[i] *= gv;
        }
      [[unroll]] for (uint m = 0u; m < MMAX; m++) {
        if (m >= p.M) break;
        float sa = 0.0, sb = 0.0;
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
          vec4 xv = xq(m, u * 32u, i);
          sa += dot(xv, vec4(wa[4u * i], wa[4u * i + 1u], wa[4u * i + 2u], wa[4u * i + 3u]));
          if (GATED != 0u) sb += dot(xv, vec4(wb[4u * i], wb[4u * i + 1u], wb[4u * i + 2u], wb[4u * i + 3u]));
        }
        acc_a[m] += sa;
        acc_b[m] += sb;
      }
    }
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      float sa = subgroupAdd(acc_a[m]);
      float sb = GATED != 0u ? subgroupAdd(acc_b[m]) : 0.0;
      if (NORM != 0u) { sa *= rstd_s[m]; sb *= rstd_s[m]; }
      if (lane == 0u) {
        float res;
        if (GATED != 0u) {
          float gv = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
          float v = sb + ((p.flags & 4u) != 0u ? bias_u[p.bu_off + n] : 0.0);
          res = hn_act(p.act, gv) * v;
        } else {
          res = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
        }
        uint yi = p.y_off + m * p.N + n;
        y[yi] = (p.flags & 2u) != 0u ? y[yi] + p.alpha * res : res;
      }
    }
  }
}
