#version 450
#extension GL_GOOGLE_include_directive : require
// out[r, f] = act(gate[r, f]) * up[r, f]; rows of gate/up have their own
// stride so a fused [rows, 2F] gate_up tensor works.
#include "common.glsl"
#include "activation.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint n; uint F; uint g_off; uint u_off; uint o_off; uint g_stride; uint u_stride; uint act;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint r = i / p.F, f = i % p.F;
  o[p.o_off + i] = hn_act(p.act, g[p.g_off + r * p.g_stride + f]) * u[p.u_off + r * p.u_stride + f];
}
