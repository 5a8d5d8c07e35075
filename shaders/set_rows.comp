#version 450
#extension GL_GOOGLE_include_directive : require
// dst[rows[r], d] = src[r, d] (f32): the new keys/values of a step into their
// slots of a paged arena (issue 10). Rows outside dst are skipped.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) readonly buffer I { int rows[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint D; uint R; uint s_off; uint i_off; uint o_off; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint r = i / p.D, d = i % p.D;
  int row = rows[p.i_off + r];
  if (row < 0 || uint(row) >= p.R) return;
  o[p.o_off + uint(row) * p.D + d] = s[p.s_off + i];
}
