#version 450
#extension GL_GOOGLE_include_directive : require
// Index of the largest value of one row (first on ties, NaN skipped; a row
// with nothing above -inf gives 0), by one workgroup: each invocation
// scans a strided slice, then subgroup and shared-memory reductions. For the
// greedy decode step, whose logits never leave the device.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer I { int idx[]; };
layout(push_constant) uniform P { uint cols; uint x_off; uint i_off; } p;
shared float sv[64];
shared uint si[64];

void main() {
  uint t = gl_LocalInvocationID.x;
  float bv = HN_NEG_INF;
  uint bi = 0xffffffffu;
  for (uint c = t; c < p.cols; c += WG) {
    float v = x[p.x_off + c];
    if (v > bv) { bv = v; bi = c; }  // c grows: the first maximum of this slice is kept
  }
  // subgroup: the largest value, then the lowest index holding it
  float m = subgroupMax(bv);
  uint mi = subgroupMin(bv == m ? bi : 0xffffffffu);
  if (subgroupElect()) { sv[gl_SubgroupID] = m; si[gl_SubgroupID] = mi; }
  barrier();
  if (t == 0u) {
    float best = HN_NEG_INF;
    uint besti = 0xffffffffu;
    for (uint g = 0u; g < gl_NumSubgroups; g++)
      if (sv[g] > best || (sv[g] == best && si[g] < besti)) { best = sv[g]; besti = si[g]; }
    idx[p.i_off] = besti == 0xffffffffu ? 0 : int(besti);
  }
}
