#version 450
#extension GL_GOOGLE_include_directive : require
// out = act(gate) · up: dgate = dy · up · act'(gate), dup = dy · act(gate).
// Rows of gate/up (and their gradients) have their own stride so a fused
// [rows, 2F] gate_up tensor and its gradient work.
#include "common.glsl"
#include "activation.glsl"
#include "activation_back.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) readonly buffer U { float u[]; };
layout(std430, binding = 3) buffer DG { float dg[]; };
layout(std430, binding = 4) buffer DU { float du[]; };
layout(push_constant) uniform P {
  uint n; uint F; uint dy_off; uint g_off; uint u_off; uint dg_off; uint du_off; uint g_stride; uint act;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint r = i / p.F, f = i % p.F;
  uint gi = r * p.g_stride + f;
  float gv = g[p.g_off + gi], uv = u[p.u_off + gi], d = dy[p.dy_off + i];
  dg[p.dg_off + gi] = d * uv * hn_act_grad(p.act, gv);
  du[p.du_off + gi] = d * hn_act(p.act, gv);
}
