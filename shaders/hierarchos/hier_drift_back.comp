#version 450
#extension GL_GOOGLE_include_directive : require
// The backward of hier_drift.comp (one workgroup per row; the tape's rules,
// engine/hierarchos/hierarchos-vk-back-misc.c). With x the clamp's input
// (start: l2clamp(d_in), refine: d + delta, final: d) and u = clamp(x):
// g = gy + gcd (ctx gets gcd), back through l2clamp(u) and the clamp, then
// (start) through l2clamp(d_in); refine gives d and delta the same. Every
// value is recomputed from wk per pass with the forward's own sums, so the
// factors (and the l2clamps' on/off) are the forward's bits.
#define HIER_BACK
#include "hier.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint n; uint d_off; uint delta_off; uint ctx_off;
  uint cd_off; uint y_off; float dsc; float dnc;
  float atol; uint mode; uint flag; uint nflag;
  uint pred;
  uint rs; uint ps;
} p;

float s1, n1, s2, n2, dot2; // the two l2clamps' factors and norms; u . g

float dclamp(float x, float m) { return (x >= -m && x <= m) ? 1.0 : 0.0; }

// The tape's factor: a NaN norm gives a NaN factor.
float l2_factor(float norm) {
  if (!(p.dnc > 0.0)) return 1.0;
  float s = p.dnc / (norm + 1e-6);
  return s > 1.0 ? 1.0 : s;
}

float xat(uint c) {
  float d = wk[rb + p.d_off + c];
  if (p.mode == 0u) return s1 < 1.0 ? d * s1 : d;
  if (p.mode == 1u) return d + wk[rb + p.delta_off + c];
  return d;
}

float gout(uint c) {
  float g = gwk[rb + p.y_off + c];
  if (p.cd_off != HIER_NONE) g += gwk[rb + p.cd_off + c];
  return g;
}

// The gradient of x[c] (through the last l2clamp and the clamp).
float gx(uint c) {
  float x = xat(c), u = hier_clamp(x, p.dsc), g = gout(c);
  if (s2 < 1.0) g = s2 * g - s2 / (n2 * (n2 + 1e-6)) * u * dot2;
  return g * dclamp(x, p.dsc);
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint t = gl_LocalInvocationID.x;
  s1 = 1.0;
  n1 = 0.0;
  if (p.mode == 0u) {
    float ss = 0.0;
    for (uint c = t; c < p.n; c += 256u) { float d = wk[rb + p.d_off + c]; ss += d * d; }
    n1 = sqrt(hn_wg_sum(ss));
    s1 = l2_factor(n1);
  }
  float ss = 0.0, dt = 0.0;
  for (uint c = t; c < p.n; c += 256u) {
    float u = hier_clamp(xat(c), p.dsc);
    ss += u * u;
    dt += u * gout(c);
  }
  n2 = sqrt(hn_wg_sum(ss));
  s2 = l2_factor(n2);
  dot2 = hn_wg_sum(dt);
  float dot1 = 0.0;
  if (p.mode == 0u && s1 < 1.0) {
    float d1 = 0.0;
    for (uint c = t; c < p.n; c += 256u) d1 += wk[rb + p.d_off + c] * gx(c);
    dot1 = hn_wg_sum(d1);
  }
  for (uint c = t; c < p.n; c += 256u) {
    float g = gx(c);
    if (p.mode == 0u && s1 < 1.0) g = s1 * g - s1 / (n1 * (n1 + 1e-6)) * wk[rb + p.d_off + c] * dot1;
    gwk[rb + p.d_off + c] += g;
    if (p.mode == 1u) gwk[rb + p.delta_off + c] += g;
    if (p.cd_off != HIER_NONE) gwk[rb + p.ctx_off + c] += gwk[rb + p.cd_off + c];
  }
}
