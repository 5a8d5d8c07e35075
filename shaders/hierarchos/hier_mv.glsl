// The Linear of hier_matvec.comp, shared with its backward
// (hier_matvec_back_dv.comp recomputes the pre-activation value v with the
// same summation order, so its clamp and activation decisions are the
// forward's). Include after hier.glsl and define finish(o, v) after it:
// hier_mv_run() calls it once per output o with v = (W x)[o] (not with
// HIER_MV_NO_RUN defined: only the push constants and x).
layout(local_size_x = 128) in;
layout(push_constant) uniform P {
  uint out_n; uint in_n; uint trans; uint w_off;
  uint b_off; uint res_off; uint y_off; uint y2_off;
  uint x0; uint n0; uint x1; uint n1;
  uint x2; uint xsrc; uint act; uint post;
  uint aux; uint pred; uint flags; uint u0;
  float scale; float clamp_v; float clamp2; float f0;
  float f1;
  uint rs; uint ps;
#ifdef HIER_BACK
  uint bs;    // the backward's scratch in the row's gwk
  uint phase; // hier_matvec_back.comp: which of its dispatches
#endif
} p;

const uint ROWS = 8u, TPR = 16u, TILE = 2048u;
shared float part[128];

// Segment s of x and where element i lives (bit s of xsrc: in prm).
uint xseg(uint i) { return i < p.n0 ? 0u : (i < p.n0 + p.n1 ? 1u : 2u); }
uint xidx(uint i, uint seg) {
  return seg == 0u ? p.x0 + i : (seg == 1u ? p.x1 + i - p.n0 : p.x2 + i - p.n0 - p.n1);
}

float xin(uint i) {
  uint seg = xseg(i), idx = xidx(i, seg);
  return ((p.xsrc >> seg) & 1u) != 0u ? prm[idx] : wk[rb + idx];
}

#ifndef HIER_MV_NO_RUN
shared float xs[TILE];

void finish(uint o, float v);

void hier_mv_run() {
  uint t = gl_LocalInvocationID.x;
  if (p.trans != 0u) {
    uint o = hn_group_index() * 128u + t;
    float acc = 0.0;
    for (uint k0 = 0u; k0 < p.in_n; k0 += TILE) {
      uint kn = min(TILE, p.in_n - k0);
      for (uint i = t; i < kn; i += 128u) xs[i] = xin(k0 + i);
      barrier();
      if (o < p.out_n)
        for (uint i = 0u; i < kn; i++) acc += xs[i] * prm[p.w_off + (k0 + i) * p.out_n + o];
      barrier();
    }
    if (o < p.out_n) finish(o, acc);
    return;
  }
  uint r = t / TPR, l = t % TPR;
  uint o = hn_group_index() * ROWS + r;
  float acc = 0.0;
  for (uint k0 = 0u; k0 < p.in_n; k0 += TILE) {
    uint kn = min(TILE, p.in_n - k0);
    for (uint i = t; i < kn; i += 128u) xs[i] = xin(k0 + i);
    barrier();
    if (o < p.out_n) {
      uint row = p.w_off + o * p.in_n + k0;
      for (uint i = l; i < kn; i += TPR) acc += prm[row + i] * xs[i];
    }
    barrier();
  }
  part[t] = acc;
  barrier();
  if (l == 0u && o < p.out_n) {
    float s = 0.0;
    for (uint j = 0u; j < TPR; j++) s += part[t + j];
    finish(o, s);
  }
}
#endif
