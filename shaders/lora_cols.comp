#version 450
#extension GL_GOOGLE_include_directive : require
// LoRA adapters' weight gradients: C_j(l, s) (+)= alpha · Σ_k X[k, l] ·
// W_j[k, s] over a long k (the tokens) for NW pairs (W_j, C_j) of one X
// (the q, k and v adapters' dA: X read once), all f32: dB += dyᵀ·u
// (C = c[l, s], CT = 0) and dA += duᵀ·x (C = c[s, l], CT = 1). Two passes:
//   MODE 0: workgroup (l block of 256, k chunk of KC rows): each invocation
//     owns one l (coalesced rows of X), the chunk's W rows staged in shared
//     memory; its sums go to part[j, chunk, s, l];
//   MODE 1: one invocation per (j, s, l): the chunks' partial sums, in chunk
//     order, then C_j. The same sums for any NW.
// F16 = 1 is fp16 autocast (as matmul.comp's F16): X and W rounded to f16
// as loaded, alpha·Σ rounded to f16 before it joins C.
#include "common.glsl"
layout(constant_id = 0) const uint S = 8;   // <= 16
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint CT = 0;
layout(constant_id = 3) const uint NW = 1;  // 1..3, NW · S <= 32 (the shared W rows)
layout(constant_id = 4) const uint F16 = 0;
layout(local_size_x = 256) in;
const uint KC_MAX = 256u;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer PART { float part[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(std430, binding = 4) readonly buffer W1 { float w1[]; };
layout(std430, binding = 5) buffer C1 { float c1[]; };
layout(std430, binding = 6) readonly buffer W2 { float w2[]; };
layout(std430, binding = 7) buffer C2 { float c2[]; };
layout(push_constant) uniform P {
  uint L; uint K; uint kc; uint chunks;
  uint x_off; uint x_sk;
  uint w_off; uint part_off;
  uint c_off;
  float alpha; uint flags;  // 1 = accumulate
  uint w_off1; uint c_off1; uint w_off2; uint c_off2;
} p;

shared float ws[MODE == 0u ? NW * KC_MAX * S : 1u];

float r16(float v) { return F16 == 1u ? hn_round_f16(v) : v; }
float wat(uint j, uint i) { return r16(j == 0u ? w[p.w_off + i] : j == 1u ? w1[p.w_off1 + i] : w2[p.w_off2 + i]); }

void main() {
  uint tid = gl_LocalInvocationID.x;
  if (MODE == 0u) {
    uint l = gl_WorkGroupID.x * 256u + tid, chunk = gl_WorkGroupID.y;
    uint k0 = chunk * p.kc, nk = min(p.kc, p.K - k0);
    [[unroll]] for (uint j = 0u; j < NW; j++)
      for (uint i = tid; i < nk * S; i += 256u) ws[j * KC_MAX * S + i] = wat(j, k0 * S + i);
    barrier();
    if (l >= p.L) return;
    float acc[NW * S];
    [[unroll]] for (uint i = 0u; i < NW * S; i++) acc[i] = 0.0;
    uint xb = p.x_off + k0 * p.x_sk + l;
    uint kk = 0u;
    for (; kk + 4u <= nk; kk += 4u) {
      float xv[4];
      [[unroll]] for (uint u = 0u; u < 4u; u++) xv[u] = r16(x[xb + (kk + u) * p.x_sk]);
      [[unroll]] for (uint u = 0u; u < 4u; u++)
        [[unroll]] for (uint j = 0u; j < NW; j++)
          [[unroll]] for (uint s = 0u; s < S; s++)
            acc[j * S + s] = fma(xv[u], ws[j * KC_MAX * S + (kk + u) * S + s], acc[j * S + s]);
    }
    for (; kk < nk; kk++) {
      float xv = r16(x[xb + kk * p.x_sk]);
      [[unroll]] for (uint j = 0u; j < NW; j++)
        [[unroll]] for (uint s = 0u; s < S; s++)
          acc[j * S + s] = fma(xv, ws[j * KC_MAX * S + kk * S + s], acc[j * S + s]);
    }
    [[unroll]] for (uint j = 0u; j < NW; j++)
      [[unroll]] for (uint s = 0u; s < S; s++)
        part[p.part_off + ((j * p.chunks + chunk) * S + s) * p.L + l] = acc[j * S + s];
  } else {
    uint i = hn_group_index() * 256u + tid;
    if (i >= NW * p.L * S) return;
    uint j = i / (p.L * S), r = i % (p.L * S);
    uint s = r / p.L, l = r % p.L;
    float sum = 0.0;
    for (uint ch = 0u; ch < p.chunks; ch++) sum += part[p.part_off + ((j * p.chunks + ch) * S + s) * p.L + l];
    uint co = CT == 1u ? s * p.L + l : l * S + s;
    bool a = (p.flags & 1u) != 0u;
    float v = r16(p.alpha * sum);
    if (j == 0u) { uint ci = p.c_off + co; c[ci] = (a ? c[ci] : 0.0) + v; }
    else if (j == 1u) { uint ci = p.c_off1 + co; c1[ci] = (a ? c1[ci] : 0.0) + v; }
    else { uint ci = p.c_off2 + co; c2[ci] = (a ? c2[ci] : 0.0) + v; }
  }
}
