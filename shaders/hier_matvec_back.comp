#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of hier_matvec.comp, part 2 (after hier_matvec_back_dv.comp put
// dv [out_n] at gwk[bs]): the first xgroups() workgroups add the input's
// gradient to its segments (gwk, or gprm for a segment read from prm), the
// rest one element each of the weight's outer-product gradient into the
// row's gprm slice. As the CPU tape's Linear, an output whose dv is 0
// adds nothing (trans 0 only; its vecmat has no such test).
#define HIER_BACK
#define HIER_MV_NO_RUN
#include "hier.glsl"
#include "hier_mv.glsl"

// trans 0: 32 columns of W per workgroup, 4 lanes over the outputs;
// trans 1: ROWS rows of M per workgroup, TPR lanes over each row.
const uint COLS = 32u, LANES = 128u / COLS;

uint xgroups() { return p.trans != 0u ? (p.in_n + ROWS - 1u) / ROWS : (p.in_n + COLS - 1u) / COLS; }

void add_gx(uint i, uint gb, float s) {
  uint seg = xseg(i), idx = xidx(i, seg);
  if (((p.xsrc >> seg) & 1u) != 0u) gprm[gb + idx] += s;
  else gwk[rb + idx] += s;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint gb = gl_WorkGroupID.z * p.ps, t = gl_LocalInvocationID.x, g = hn_group_index(), dv = rb + p.bs;
  uint G = xgroups();
  if (g < G) {
    float acc = 0.0;
    if (p.trans == 0u) {
      uint i = g * COLS + t % COLS;
      if (i < p.in_n)
        for (uint o = t / COLS; o < p.out_n; o += LANES) {
          float d = gwk[dv + o];
          if (d != 0.0) acc += prm[p.w_off + o * p.in_n + i] * d;
        }
      part[t] = acc;
      barrier();
      if (t < COLS && i < p.in_n) {
        float s = 0.0;
        for (uint l = 0u; l < LANES; l++) s += part[t + l * COLS];
        add_gx(i, gb, s);
      }
    } else {
      uint i = g * ROWS + t / TPR, l = t % TPR;
      if (i < p.in_n)
        for (uint j = l; j < p.out_n; j += TPR) acc += prm[p.w_off + i * p.out_n + j] * gwk[dv + j];
      part[t] = acc;
      barrier();
      if (l == 0u && i < p.in_n) {
        float s = 0.0;
        for (uint j = 0u; j < TPR; j++) s += part[t + j];
        add_gx(i, gb, s);
      }
    }
    return;
  }
  uint e = (g - G) * 128u + t;
  if (e >= p.out_n * p.in_n) return;
  if (p.trans == 0u) {
    float d = gwk[dv + e / p.in_n];
    if (d != 0.0) gprm[gb + p.w_off + e] += d * xin(e % p.in_n);
  } else {
    gprm[gb + p.w_off + e] += xin(e / p.out_n) * gwk[dv + e % p.out_n];
  }
}
