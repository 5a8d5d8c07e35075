#version 450
#extension GL_GOOGLE_include_directive : require
// dx = dy · act'(x) (flags 1: dx += instead of =).
#include "common.glsl"
#include "activation.glsl"
#include "activation_back.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer DX { float dx[]; };
layout(push_constant) uniform P { uint n; uint dy_off; uint x_off; uint dx_off; uint act; uint flags; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  float g = dy[p.dy_off + i] * hn_act_grad(p.act, x[p.x_off + i]);
  if ((p.flags & 1u) != 0u) g += dx[p.dx_off + i];
  dx[p.dx_off + i] = g;
}
