#version 450
#extension GL_GOOGLE_include_directive : require
// A LoRA adapter's weight gradient: C(l, s) (+)= alpha · Σ_k X[k, l] ·
// W[k, s] over a long k (the tokens), all f32: dB += dyᵀ·u (C = c[l, s],
// CT = 0) and dA += duᵀ·x (C = c[s, l], CT = 1). Two passes:
//   MODE 0: workgroup (l block of 256, k chunk of KC rows): each invocation
//     owns one l (coalesced rows of X), the chunk's W rows staged in shared
//     memory; its S sums go to part[chunk, s, l];
//   MODE 1: one invocation per (s, l): the chunks' partial sums, in chunk
//     order, then C.
#include "common.glsl"
layout(constant_id = 0) const uint S = 8;   // <= 16
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint CT = 0;
layout(local_size_x = 256) in;
const uint KC_MAX = 256u;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer PART { float part[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint L; uint K; uint kc; uint chunks;
  uint x_off; uint x_sk;
  uint w_off; uint part_off;
  uint c_off;
  float alpha; uint flags;  // 1 = accumulate
} p;

shared float ws[MODE == 0u ? KC_MAX * S : 1u];

void main() {
  uint tid = gl_LocalInvocationID.x;
  if (MODE == 0u) {
    uint l = gl_WorkGroupID.x * 256u + tid, chunk = gl_WorkGroupID.y;
    uint k0 = chunk * p.kc, nk = min(p.kc, p.K - k0);
    for (uint i = tid; i < nk * S; i += 256u) ws[i] = w[p.w_off + k0 * S + i];
    barrier();
    if (l >= p.L) return;
    float acc[S];
    [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = 0.0;
    uint xb = p.x_off + k0 * p.x_sk + l;
    uint kk = 0u;
    for (; kk + 4u <= nk; kk += 4u) {
      float xv[4];
      [[unroll]] for (uint u = 0u; u < 4u; u++) xv[u] = x[xb + (kk + u) * p.x_sk];
      [[unroll]] for (uint u = 0u; u < 4u; u++)
        [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = fma(xv[u], ws[(kk + u) * S + s], acc[s]);
    }
    for (; kk < nk; kk++) {
      float xv = x[xb + kk * p.x_sk];
      [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = fma(xv, ws[kk * S + s], acc[s]);
    }
    [[unroll]] for (uint s = 0u; s < S; s++) part[p.part_off + (chunk * S + s) * p.L + l] = acc[s];
  } else {
    uint i = hn_group_index() * 256u + tid;
    if (i >= p.L * S) return;
    uint s = i / p.L, l = i % p.L;
    float sum = 0.0;
    for (uint ch = 0u; ch < p.chunks; ch++) sum += part[p.part_off + (ch * S + s) * p.L + l];
    uint ci = p.c_off + (CT == 1u ? s * p.L + l : l * S + s);
    c[ci] = ((p.flags & 1u) != 0u ? c[ci] : 0.0) + p.alpha * sum;
  }
}
