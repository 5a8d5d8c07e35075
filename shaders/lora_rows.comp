#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// LoRA down-projections, RB output rows per subgroup: C_j(l, s) = alpha ·
// Σ_k X[l, k] · W_j(k, s) (+= C_j when accumulating) for s < S and each of
// the NW pairs (W_j, C_j) (the q, k and v adapters of one input: X read
// once for all), all f32, with W(k, s) = w[s, k] (WT = 1: u = s·x·Aᵀ) or
// w[k, s] (WT = 0: du = s·dy·B).
// Memory-bound on X, which is read once: lanes stride over k four at a time
// (16-byte loads of X and W when VEC), four strides in flight, subgroupAdd
// reduces and lane 0 writes the results; W (K·S floats) stays in the caches,
// and each load of it serves RB rows. The sums run in the same order for
// any RB and NW. F16 = 1 is fp16 autocast (as matmul.comp's F16): X and W
// rounded to f16 as loaded, each product alpha·Σ rounded to f16 before it
// joins C. Four subgroups' rows per workgroup (of four subgroups as
// the device reports them; any actual subgroup count is correct).
#include "common.glsl"
layout(constant_id = 0) const uint S = 8;
layout(constant_id = 1) const uint WT = 1;
layout(constant_id = 2) const uint VEC = 0;  // X rows, W and their offsets 16-byte aligned (and S % 4 == 0 when WT = 0)
layout(local_size_x_id = 3) in;
layout(constant_id = 4) const uint NW = 1;   // 1..3
layout(constant_id = 5) const uint RB = 1;   // 1..4
layout(constant_id = 6) const uint F16 = 0;
// 1 (with F16): the W bindings hold W already rounded, as f16 (the op's
// copy, made once per call): every workgroup reads all of W, and rounding it
// on each load was most of the kernel's time (9.3 of 104 ms of an fp16 LoRA
// step of llama-1b, H100 2026-12-07a). Read as words, so no 16-bit storage.
layout(constant_id = 7) const uint WH = 0;
const uint NA = RB * NW * S;                  // accumulators: [row][pair][s]

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W0 { float w0[]; };
layout(std430, binding = 1) readonly buffer W04 { vec4 w04[]; };
layout(std430, binding = 2) buffer C0 { float c0[]; };
layout(std430, binding = 3) readonly buffer W1 { float w1[]; };
layout(std430, binding = 3) readonly buffer W14 { vec4 w14[]; };
layout(std430, binding = 4) buffer C1 { float c1[]; };
layout(std430, binding = 5) readonly buffer W2 { float w2[]; };
layout(std430, binding = 5) readonly buffer W24 { vec4 w24[]; };
layout(std430, binding = 6) buffer C2 { float c2[]; };
layout(std430, binding = 1) readonly buffer W0h { uint w0h[]; };
layout(std430, binding = 1) readonly buffer W04h { uvec2 w04h[]; };
layout(std430, binding = 3) readonly buffer W1h { uint w1h[]; };
layout(std430, binding = 3) readonly buffer W14h { uvec2 w14h[]; };
layout(std430, binding = 5) readonly buffer W2h { uint w2h[]; };
layout(std430, binding = 5) readonly buffer W24h { uvec2 w24h[]; };
layout(push_constant) uniform P {
  uint L; uint K;
  uint x_off; uint x_sl;
  uint w_off;
  uint c_off; uint c_sl;
  float alpha; uint flags;  // 1 = accumulate
  uint w_off1; uint c_off1; uint w_off2; uint c_off2;
} p;

float r16(float v) { return F16 == 1u ? hn_round_f16(v) : v; }
vec4 r16(vec4 v) { return F16 == 1u ? vec4(hn_round_f16(v.x), hn_round_f16(v.y), hn_round_f16(v.z), hn_round_f16(v.w)) : v; }

uint woff(uint j) { return j == 0u ? p.w_off : j == 1u ? p.w_off1 : p.w_off2; }
float wld(uint j, uint i) {
  if (WH == 1u) return hn_half_of(j == 0u ? w0h[i >> 1] : j == 1u ? w1h[i >> 1] : w2h[i >> 1], i);
  return r16(j == 0u ? w0[i] : j == 1u ? w1[i] : w2[i]);
}
vec4 wld4(uint j, uint i) {
  if (WH == 1u) {
    uvec2 h = j == 0u ? w04h[i] : j == 1u ? w14h[i] : w24h[i];
    return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
  }
  return r16(j == 0u ? w04[i] : j == 1u ? w14[i] : w24[i]);
}
float wat(uint j, uint k, uint s) { return wld(j, woff(j) + (WT == 1u ? s * p.K + k : k * S + s)); }

void cstore(uint j, uint l, uint s, float sum) {
  bool a = (p.flags & 1u) != 0u;
  float v = r16(p.alpha * sum);
  if (j == 0u) { uint ci = p.c_off + l * p.c_sl + s; c0[ci] = (a ? c0[ci] : 0.0) + v; }
  else if (j == 1u) { uint ci = p.c_off1 + l * p.c_sl + s; c1[ci] = (a ? c1[ci] : 0.0) + v; }
  else { uint ci = p.c_off2 + l * p.c_sl + s; c2[ci] = (a ? c2[ci] : 0.0) + v; }
}

void main() {
  uint lane = gl_SubgroupInvocationID, n = gl_SubgroupSize, l0 = hn_group_index() * 4u * RB;
  // four subgroups' row blocks per workgroup, taken by its subgroups in turn (any subgroup count)
  for (uint lb = l0 + gl_SubgroupID * RB; lb < min(l0 + 4u * RB, p.L); lb += gl_NumSubgroups * RB) {
    float acc[NA];
    [[unroll]] for (uint i = 0u; i < NA; i++) acc[i] = 0.0;
    if (VEC == 1u) {
      for (uint k0 = 4u * lane; k0 < p.K; k0 += 16u * n) {
        vec4 xv[4 * RB];
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
          uint k = k0 + 4u * n * u;
          [[unroll]] for (uint r = 0u; r < RB; r++)
            xv[u * RB + r] = k < p.K && lb + r < p.L ? r16(x4[(p.x_off + (lb + r) * p.x_sl + k) / 4u]) : vec4(0.0);
        }
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
          uint k = k0 + 4u * n * u;
          if (k >= p.K) break;
          [[unroll]] for (uint j = 0u; j < NW; j++) {
            uint wo = woff(j);
            if (WT == 1u) {
              [[unroll]] for (uint s = 0u; s < S; s++) {
                vec4 wv = wld4(j, (wo + s * p.K + k) / 4u);
                [[unroll]] for (uint r = 0u; r < RB; r++) acc[(r * NW + j) * S + s] += dot(xv[u * RB + r], wv);
              }
            } else {
              [[unroll]] for (uint q = 0u; q < 4u; q++)
                [[unroll]] for (uint s4 = 0u; s4 < S / 4u; s4++) {
                  vec4 wv = wld4(j, (wo + (k + q) * S) / 4u + s4);
                  [[unroll]] for (uint r = 0u; r < RB; r++)
                    [[unroll]] for (uint e = 0u; e < 4u; e++) {
                      uint ai = (r * NW + j) * S + 4u * s4 + e;
                      acc[ai] = fma(xv[u * RB + r][q], wv[e], acc[ai]);
                    }
                }
            }
          }
        }
      }
    } else {
      for (uint k = lane; k < p.K; k += n) {
        float xv[RB];
        [[unroll]] for (uint r = 0u; r < RB; r++) xv[r] = lb + r < p.L ? r16(x[p.x_off + (lb + r) * p.x_sl + k]) : 0.0;
        [[unroll]] for (uint j = 0u; j < NW; j++)
          [[unroll]] for (uint s = 0u; s < S; s++) {
            float wv = wat(j, k, s);
            [[unroll]] for (uint r = 0u; r < RB; r++) acc[(r * NW + j) * S + s] = fma(xv[r], wv, acc[(r * NW + j) * S + s]);
          }
      }
    }
    [[unroll]] for (uint i = 0u; i < NA; i++) acc[i] = subgroupAdd(acc[i]);
    if (lane == 0u) {
      [[unroll]] for (uint r = 0u; r < RB; r++) {
        if (lb + r >= p.L) break;
        [[unroll]] for (uint j = 0u; j < NW; j++)
          [[unroll]] for (uint s = 0u; s < S; s++) cstore(j, lb + r, s, acc[(r * NW + j) * S + s]);
      }
    }
  }
}
