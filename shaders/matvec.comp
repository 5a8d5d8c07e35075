#version 450
#extension GL_GOOGLE_include_directive : require
// y[m, n] = x[m, :] · W[n, :] (+ bias[n]) for a few rows m < M <= 8 (decode):
// one workgroup per output n (over a 2-D grid), invocations stride over K
// and reduce with subgroup adds, then across subgroups in shared memory.
// W is f32/f16/bf16 (spec constant 0).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(local_size_x_id = 1) in;
layout(constant_id = 1) const uint WG = 128;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { uint ww[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint M; uint N; uint K; uint x_off; uint w_off; uint bias_off; uint y_off; uint has_bias; } p;
shared float part[8 * 64];
void main() {
  uint n = hn_group_index();
  if (n >= p.N) return;
  uint tid = gl_LocalInvocationID.x;
  float acc[8];
  [[unroll]] for (uint m = 0u; m < 8u; m++) acc[m] = 0.0;
  uint wrow = p.w_off + n * p.K;
  for (uint k = tid; k < p.K; k += WG) {
    float w = HN_LOAD(ww, BDT, wrow + k);
    [[unroll]] for (uint m = 0u; m < 8u; m++)
      if (m < p.M) acc[m] = fma(x[p.x_off + m * p.K + k], w, acc[m]);
  }
  uint n_sg = (WG + gl_SubgroupSize - 1u) / gl_SubgroupSize;
  [[unroll]] for (uint m = 0u; m < 8u; m++) {
    if (m >= p.M) break;
    float s = subgroupAdd(acc[m]);
    if (subgroupElect()) part[m * 64u + gl_SubgroupID] = s;
  }
  barrier();
  if (tid < p.M) {
    float s = 0.0;
    for (uint g = 0u; g < n_sg; g++) s += part[tid * 64u + g];
    if (p.has_bias != 0u) s += bias[p.bias_off + n];
    y[p.y_off + tid * p.N + n] = s;
  }
}
