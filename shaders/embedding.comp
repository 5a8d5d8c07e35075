#version 450
#extension GL_GOOGLE_include_directive : require
// out[n, d] = table[ids[n], d] (table f32/f16/bf16 via spec constant 0).
#include "common.glsl"
layout(constant_id = 0) const uint DT = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer T { uint tw[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint D; uint V; uint t_off; uint i_off; uint o_off; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint r = i / p.D, d = i % p.D;
  int id = ids[p.i_off + r];
  float v = 0.0;
  if (id >= 0 && uint(id) < p.V) {
    uint e = p.t_off + uint(id) * p.D + d;
    v = HN_LOAD(tw, DT, e);
  }
  o[p.o_off + i] = v;
}
