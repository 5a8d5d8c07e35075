#version 450
#extension GL_GOOGLE_include_directive : require
// The backward of hier_norm.comp (one workgroup per row; the tape's rules,
// engine/hierarchos/hierarchos-vk-back-misc.c): the gradient reaching xn is
// y's (through its clamp) plus sum_j mix_j's * (1 - c_j); prev gets
// sum_j mix_j's * c_j, c_j gets mix_j's * (prev - xn), w and b the affine's,
// and x rstd (gh - mean(gh) - xh mean(gh xh)), gh = g * w (into gprm for
// an x read from the parameters). The mean and rstd are recomputed as the
// forward did; the second pass recomputes g instead of keeping it.
#define HIER_BACK
#include "hier.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint width; uint x_off; uint xsrc; uint w_off;
  uint b_off; uint y_off; float eps; float yclamp;
  uint n_mix; uint prev_off; uint mix_off; uint pred;
  uint c0; uint c1; uint c2; uint c3; uint c4; uint c5; uint xi;
  uint rs; uint ps;
} p;

uint xo, gb; // x's offset; the row's gradient slice
float xat(uint c) { return (p.xsrc & 1u) != 0u ? prm[xo + c] : wk[rb + xo + c]; }

uint coeff(uint j) {
  return j == 0u ? p.c0 : j == 1u ? p.c1 : j == 2u ? p.c2 : j == 3u ? p.c3 : j == 4u ? p.c4 : p.c5;
}

float dclamp(float x, float m) { return (x >= -m && x <= m) ? 1.0 : 0.0; }

// The gradient reaching xn[c]; with `add`, prev and the c_j get theirs.
float gxn(uint c, float xn, bool add) {
  float g = 0.0;
  if (p.y_off != HIER_NONE) {
    float gy = gwk[rb + p.y_off + c];
    g = p.yclamp > 0.0 ? gy * dclamp(xn, p.yclamp) : gy;
  }
  if (p.n_mix > 0u) {
    float prev = wk[rb + p.prev_off + c], gp = 0.0;
    for (uint j = 0u; j < p.n_mix; j++) {
      float gm = gwk[rb + p.mix_off + j * p.width + c], cj = prm[coeff(j) + c];
      g += gm * (1.0 - cj);
      gp += gm * cj;
      if (add) gprm[gb + coeff(j) + c] += gm * (prev - xn);
    }
    if (add) gwk[rb + p.prev_off + c] += gp;
  }
  return g;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  gb = gl_WorkGroupID.z * p.ps;
  xo = p.x_off + ((p.xsrc & 2u) != 0u ? uint(wk[rb + p.xi]) * p.width : 0u);
  uint t = gl_LocalInvocationID.x;
  float s = 0.0;
  for (uint c = t; c < p.width; c += 256u) s += xat(c);
  float mean = hn_wg_sum(s) / float(p.width);
  float v = 0.0;
  for (uint c = t; c < p.width; c += 256u) { float d = xat(c) - mean; v += d * d; }
  float rstd = 1.0 / sqrt(hn_wg_sum(v) / float(p.width) + p.eps);
  bool aw = p.w_off != HIER_NONE, ab = p.b_off != HIER_NONE;
  float m1 = 0.0, m2 = 0.0;
  for (uint c = t; c < p.width; c += 256u) {
    float xh = (xat(c) - mean) * rstd, xn = xh, w = aw ? prm[p.w_off + c] : 1.0;
    if (aw) xn *= w;
    if (ab) xn += prm[p.b_off + c];
    float g = gxn(c, xn, true);
    if (aw) gprm[gb + p.w_off + c] += g * xh;
    if (ab) gprm[gb + p.b_off + c] += g;
    m1 += g * w;
    m2 += g * w * xh;
  }
  m1 = hn_wg_sum(m1) / float(p.width);
  m2 = hn_wg_sum(m2) / float(p.width);
  for (uint c = t; c < p.width; c += 256u) {
    float xh = (xat(c) - mean) * rstd, xn = xh, w = aw ? prm[p.w_off + c] : 1.0;
    if (aw) xn *= w;
    if (ab) xn += prm[p.b_off + c];
    float dx = rstd * (gxn(c, xn, false) * w - m1 - xh * m2);
    if ((p.xsrc & 1u) != 0u) gprm[gb + xo + c] += dx;
    else gwk[rb + xo + c] += dx;
  }
}
