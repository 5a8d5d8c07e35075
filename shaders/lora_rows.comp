#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// A LoRA down-projection, one output row per subgroup: C(l, s) = alpha ·
// Σ_k X[l, k] · W(k, s) (+= C when accumulating) for s < S, all f32, with
// W(k, s) = w[s, k] (WT = 1: u = s·x·Aᵀ) or w[k, s] (WT = 0: du = s·dy·B).
// Memory-bound on X, which is read once: lanes stride over k four at a time
// (16-byte loads of X and W when VEC), four strides in flight, subgroupAdd
// reduces and lane 0 writes the S results; W (K·S floats) stays in the
// caches. Four rows per workgroup (of four subgroups as the device reports
// them; any actual subgroup count is correct).
#include "common.glsl"
layout(constant_id = 0) const uint S = 8;
layout(constant_id = 1) const uint WT = 1;
layout(constant_id = 2) const uint VEC = 0;  // X rows, W and their offsets 16-byte aligned (and S % 4 == 0 when WT = 0)
layout(local_size_x_id = 3) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer W4 { vec4 w4[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint L; uint K;
  uint x_off; uint x_sl;
  uint w_off;
  uint c_off; uint c_sl;
  float alpha; uint flags;  // 1 = accumulate
} p;

float wat(uint k, uint s) { return w[p.w_off + (WT == 1u ? s * p.K + k : k * S + s)]; }

void main() {
  uint lane = gl_SubgroupInvocationID, n = gl_SubgroupSize, l0 = hn_group_index() * 4u;
  // four rows per workgroup, taken by its subgroups in turn (any subgroup count)
  for (uint l = l0 + gl_SubgroupID; l < min(l0 + 4u, p.L); l += gl_NumSubgroups) {
    float acc[S];
    [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = 0.0;
    uint xb = p.x_off + l * p.x_sl;
    if (VEC == 1u) {
      for (uint k0 = 4u * lane; k0 < p.K; k0 += 16u * n) {
        vec4 xv[4];
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
          uint k = k0 + 4u * n * u;
          xv[u] = k < p.K ? x4[(xb + k) / 4u] : vec4(0.0);
        }
        [[unroll]] for (uint u = 0u; u < 4u; u++) {
          uint k = k0 + 4u * n * u;
          if (k >= p.K) break;
          if (WT == 1u) {
            [[unroll]] for (uint s = 0u; s < S; s++) acc[s] += dot(xv[u], w4[(p.w_off + s * p.K + k) / 4u]);
          } else {
            [[unroll]] for (uint j = 0u; j < 4u; j++)
              [[unroll]] for (uint s4 = 0u; s4 < S / 4u; s4++) {
                vec4 wv = w4[(p.w_off + (k + j) * S) / 4u + s4];
                [[unroll]] for (uint q = 0u; q < 4u; q++) acc[4u * s4 + q] = fma(xv[u][j], wv[q], acc[4u * s4 + q]);
              }
          }
        }
      }
    } else {
      for (uint k = lane; k < p.K; k += n) {
        float xv = x[xb + k];
        [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = fma(xv, wat(k, s), acc[s]);
      }
    }
    [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = subgroupAdd(acc[s]);
    if (lane == 0u) {
      bool a = (p.flags & 1u) != 0u;
      [[unroll]] for (uint s = 0u; s < S; s++) {
        uint ci = p.c_off + l * p.c_sl + s;
        c[ci] = (a ? c[ci] : 0.0) + p.alpha * acc[s];
      }
    }
  }
}
