#version 450
#extension GL_GOOGLE_include_directive : require
// LayerNorm of the Hierarchos step (one workgroup, biased two-pass variance,
// optional affine) with the cell's token-shift mixes fused in:
//   xn = LN(x) [* w] [+ b]; y = clamp(xn, yclamp) (y_off may be prev_off:
//   the cell's shift state is updated in place); for j < n_mix:
//   mix[j, c] = xn + (prev - xn) * prm[c_j + c].
// bit 0 of xsrc reads x from the parameters (an embedding row); bit 1 picks
// that row as work[xi] of a [*, width] matrix at x_off.
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

uint xo;
float xat(uint c) { return (p.xsrc & 1u) != 0u ? prm[xo + c] : wk[rb + xo + c]; }

uint coeff(uint j) {
  return j == 0u ? p.c0 : j == 1u ? p.c1 : j == 2u ? p.c2 : j == 3u ? p.c3 : j == 4u ? p.c4 : p.c5;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  xo = p.x_off + ((p.xsrc & 2u) != 0u ? uint(wk[rb + p.xi]) * p.width : 0u);
  uint t = gl_LocalInvocationID.x;
  float s = 0.0;
  for (uint c = t; c < p.width; c += 256u) s += xat(c);
  float mean = hn_wg_sum(s) / float(p.width);
  float v = 0.0;
  for (uint c = t; c < p.width; c += 256u) { float d = xat(c) - mean; v += d * d; }
  float rstd = 1.0 / sqrt(hn_wg_sum(v) / float(p.width) + p.eps);
  for (uint c = t; c < p.width; c += 256u) {
    float xn = (xat(c) - mean) * rstd;
    if (p.w_off != HIER_NONE) xn *= prm[p.w_off + c];
    if (p.b_off != HIER_NONE) xn += prm[p.b_off + c];
    float prev = p.n_mix > 0u ? wk[rb + p.prev_off + c] : 0.0;
    for (uint j = 0u; j < p.n_mix; j++) wk[rb + p.mix_off + j * p.width + c] = xn + (prev - xn) * prm[coeff(j) + c];
    if (p.y_off != HIER_NONE) wk[rb + p.y_off + c] = p.yclamp > 0.0 ? hier_clamp(xn, p.yclamp) : xn;
  }
}
