#version 450
#extension GL_GOOGLE_include_directive : require
// The backward of hier_ew.comp (the tape's rules,
// engine/hierarchos/hierarchos-vk-back-misc.c): with g = gy through the clamp,
// copy: a += g; lerp: a += g (1 - f0), b += g f0; axpys: a += g,
// b += g s, and s += sum_i g_i b_i, summed by workgroup 0 alone over the
// whole row (no atomics: the same bits every run). a's gradient goes to
// gprm when a is read from the parameters.
#define HIER_BACK
#include "hier.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint n; uint op; uint a_off; uint asrc;
  uint b_off; uint s_off; uint y_off; float f0;
  float clamp_v; uint pred; uint xi;
  uint rs; uint ps;
} p;

uint ao;

float dclamp(float x, float m) { return (x >= -m && x <= m) ? 1.0 : 0.0; }

// y's gradient through the clamp (y recomputed as the forward did).
float gy(uint i) {
  float g = gwk[rb + p.y_off + i];
  if (p.clamp_v > 0.0) {
    float a = (p.asrc & 1u) != 0u ? prm[ao + i] : wk[rb + ao + i], y = a;
    if (p.op == 1u) y = a + (wk[rb + p.b_off + i] - a) * p.f0;
    else if (p.op == 2u) y = a + wk[rb + p.b_off + i] * wk[rb + p.s_off];
    g *= dclamp(y, p.clamp_v);
  }
  return g;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint gb = gl_WorkGroupID.z * p.ps;
  ao = p.a_off + ((p.asrc & 2u) != 0u ? uint(wk[rb + p.xi]) * p.n : 0u);
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i < p.n) {
    float g = gy(i), ga = g;
    if (p.op == 1u) {
      ga = g * (1.0 - p.f0);
      gwk[rb + p.b_off + i] += g * p.f0;
    } else if (p.op == 2u) {
      gwk[rb + p.b_off + i] += g * wk[rb + p.s_off];
    }
    if ((p.asrc & 1u) != 0u) gprm[gb + ao + i] += ga;
    else gwk[rb + ao + i] += ga;
  }
  if (p.op == 2u && hn_group_index() == 0u) {
    float s = 0.0;
    for (uint j = gl_LocalInvocationID.x; j < p.n; j += 256u) s += gy(j) * wk[rb + p.b_off + j];
    s = hn_wg_sum(s);
    if (gl_LocalInvocationID.x == 0u) gwk[rb + p.s_off] += s;
  }
}
