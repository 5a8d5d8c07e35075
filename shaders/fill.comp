#version 450
#extension GL_GOOGLE_include_directive : require
// out[off + i] = value (raw 32-bit pattern: f32 or i32).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Out { uint y[]; };
layout(push_constant) uniform P { uint n; uint off; uint value; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i < p.n) y[p.off + i] = p.value;
}
