#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise steps of the Hierarchos token step, then clamp (when > 0):
//   op 0: y = a (bit 0 of asrc: a from the parameters, e.g. an embedding row;
//     bit 1: the row work[xi] of a [*, n] parameter matrix at a_off);
//   op 1: y = a + (b - a) * f0 (the sliding context);
//   op 2: y = a + b * work[s_off] (a gated residual).
#include "hier.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint n; uint op; uint a_off; uint asrc;
  uint b_off; uint s_off; uint y_off; float f0;
  float clamp_v; uint pred; uint xi;
  uint rs; uint ps;
} p;

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint ao = p.a_off + ((p.asrc & 2u) != 0u ? uint(wk[rb + p.xi]) * p.n : 0u);
  float a = (p.asrc & 1u) != 0u ? prm[ao + i] : wk[rb + ao + i];
  float y = a;
  if (p.op == 1u) y = a + (wk[rb + p.b_off + i] - a) * p.f0;
  else if (p.op == 2u) y = a + wk[rb + p.b_off + i] * wk[rb + p.s_off];
  wk[rb + p.y_off + i] = p.clamp_v > 0.0 ? hier_clamp(y, p.clamp_v) : y;
}
