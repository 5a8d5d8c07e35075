#version 450
#extension GL_GOOGLE_include_directive : require
// out = act(in * scale + offset) (act 0 = identity: a plain scale);
// act 100 = clamp(in, scale, offset) (lower and upper bound).
#include "common.glsl"
#include "activation.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint n; uint in_off; uint out_off; uint act; float scale; float offset; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  if (p.act == 100u) { y[p.out_off + i] = clamp(x[p.in_off + i], p.scale, p.offset); return; }
  y[p.out_off + i] = hn_act(p.act, x[p.in_off + i] * p.scale + p.offset);
}
