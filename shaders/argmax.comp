#version 450
#extension GL_GOOGLE_include_directive : require
// Index of the largest value of one row (first on ties, NaN skipped; a row
// with nothing above -inf gives 0), by one workgroup: each invocation
// scans a strided slice, then subgroup and shared-memory reductions. For the
// greedy decode step, whose logits never leave the device.
// MODE (spec constant 1) 1: workgroup g scans only columns [g * chunk,
// + chunk) and writes its (value, index) pair to binding 2 (f32 pairs, the
// index as bits; index ~0 for nothing above -inf); MODE 2: one workgroup
// picks among the n_parts pairs of binding 2 (lowest index on ties) into
// the output. Together the same pick as MODE 0 over many workgroups.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint MODE = 0;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer I { int idx[]; };
layout(std430, binding = 2) buffer S { float sv_part[]; };
layout(std430, binding = 2) buffer SI { uint si_part[]; };
layout(push_constant) uniform P { uint cols; uint x_off; uint i_off; uint chunk; uint s_off; uint n_parts; } p;
shared float sv[64];
shared uint si[64];

void main() {
  uint t = gl_LocalInvocationID.x;
  float bv = HN_NEG_INF;
  uint bi = 0xffffffffu;
  if (MODE == 2u) {
    for (uint g = t; g < p.n_parts; g += WG) {
      float v = sv_part[p.s_off + 2u * g];
      uint i = si_part[p.s_off + 2u * g + 1u];
      if (i != 0xffffffffu && (v > bv || (v == bv && i < bi))) { bv = v; bi = i; }
    }
  } else {
    uint c0 = MODE == 1u ? hn_group_index() * p.chunk : 0u;
    uint c1 = MODE == 1u ? min(c0 + p.chunk, p.cols) : p.cols;
    for (uint c = c0 + t; c < c1; c += WG) {
      float v = x[p.x_off + c];
      if (v > bv) { bv = v; bi = c; }  // c grows: the first maximum of this slice is kept
    }
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
      if (si[g] != 0xffffffffu && (sv[g] > best || (sv[g] == best && si[g] < besti))) { best = sv[g]; besti = si[g]; }
    if (MODE == 1u) {
      uint o = p.s_off + 2u * hn_group_index();
      sv_part[o] = best;
      si_part[o + 1u] = besti;
    } else {
      idx[p.i_off] = besti == 0xffffffffu ? 0 : int(besti);
    }
  }
}
