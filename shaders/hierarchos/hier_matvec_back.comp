#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of hier_matvec.comp (engine/hierarchos/hierarchos-vk-back-mv.c), the
// input and weight gradients from dv = dL/dv [out_n]: dv is in the scratch
// gwk[bs] (hier_matvec_back_dv.comp ran first) or, for a plain Linear with
// no activation or clamp ("direct"), scale * the output's gradient.
// phase 0, in workgroup order:
//   the input's gradient W^T dv into its segments (gwk, or gprm for a
//     segment read from prm); trans 0 with more than OC outputs: partial
//     sums per OC outputs into the scratch, summed by phase 1 in a fixed
//     order (no float atomics);
//   the weight's outer-product gradient into the row's gprm slice, a few
//     of the weight's rows a workgroup;
//   direct only: the bias's and the residual's gradients (dv itself).
// As the CPU tape's Linear, an output whose dv is 0 adds nothing (trans 0
// only; its vecmat has no such test).
#define HIER_BACK
#define HIER_MV_NO_RUN
#include "hier.glsl"
#include "hier_mv.glsl"

// trans 0: COLS columns of W per workgroup, LANES lanes over the outputs;
// trans 1: ROWS rows of M per workgroup, TPR lanes over each row.
// (8 columns: a warp reads 4 rows of 32 bytes, whole sectors; 16 lanes keep
// the serial loop short on the small matrices, which are latency-bound)
const uint COLS = 8u, LANES = 128u / COLS, OC = 2048u, GW_ELEMS = 1024u;

bool direct() { return p.post == 0u && p.act == 0u && !(p.clamp_v > 0.0) && p.y2_off == HIER_NONE; }
uint nchunks() { return p.trans != 0u ? 1u : (p.out_n + OC - 1u) / OC; }
uint xgroups() { return p.trans != 0u ? (p.in_n + ROWS - 1u) / ROWS : (p.in_n + COLS - 1u) / COLS * nchunks(); }
// the weight gradient's rows per workgroup (about GW_ELEMS elements) and groups
uint wrows() { return max(1u, GW_ELEMS / max(1u, p.trans != 0u ? p.out_n : p.in_n)); }
uint wgroups() {
  // flags bit 3 (HN_HIER_MV_NO_DW): the trainer adds the weight's gradient
  if ((p.flags & 8u) != 0u) return 0u;
  return ((p.trans != 0u ? p.in_n : p.out_n) + wrows() - 1u) / wrows();
}
// the partial sums' base in gwk
uint partials() { return rb + p.bs + (direct() ? 0u : p.out_n); }

float dvo(uint o) { return direct() ? gwk[rb + p.y_off + o] * p.scale : gwk[rb + p.bs + o]; }

void add_gx(uint i, uint gb, float s) {
  uint seg = xseg(i), idx = xidx(i, seg);
  if (((p.xsrc >> seg) & 1u) != 0u) gprm[gb + idx] += s;
  else gwk[rb + idx] += s;
}

void grad_x(uint g, uint t, uint gb) {
  float acc = 0.0;
  if (p.trans == 0u) {
    uint nc = nchunks(), c = g % nc, i = g / nc * COLS + t % COLS;
    uint o1 = min(p.out_n, (c + 1u) * OC);
    if (i < p.in_n)
      for (uint o = c * OC + t / COLS; o < o1; o += LANES) {
        float d = dvo(o);
        if (d != 0.0) acc += prm[p.w_off + o * p.in_n + i] * d;
      }
    part[t] = acc;
    barrier();
    if (t < COLS && i < p.in_n) {
      float s = 0.0;
      for (uint l = 0u; l < LANES; l++) s += part[t + l * COLS];
      if (nc == 1u) add_gx(i, gb, s);
      else gwk[partials() + c * p.in_n + i] = s;
    }
    return;
  }
  uint i = g * ROWS + t / TPR, l = t % TPR;
  if (i < p.in_n)
    for (uint j = l; j < p.out_n; j += TPR) acc += prm[p.w_off + i * p.out_n + j] * dvo(j);
  part[t] = acc;
  barrier();
  if (l == 0u && i < p.in_n) {
    float s = 0.0;
    for (uint j = 0u; j < TPR; j++) s += part[t + j];
    add_gx(i, gb, s);
  }
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint gb = gl_WorkGroupID.z * p.ps, t = gl_LocalInvocationID.x, g = hn_group_index();
  if (p.phase != 0u) {
    // the partial sums of the input's gradient, chunk by chunk
    uint i = g * 128u + t, nc = nchunks();
    if (i >= p.in_n) return;
    float s = 0.0;
    for (uint c = 0u; c < nc; c++) s += gwk[partials() + c * p.in_n + i];
    add_gx(i, gb, s);
    return;
  }
  uint G = xgroups();
  if (g < G) {
    grad_x(g, t, gb);
    return;
  }
  g -= G;
  uint GW = wgroups();
  if (g < GW) {
    // rows of the weight: trans 0 W's row o (dv[o] times x), trans 1 M's
    // row i (x[i] times dv); RPG rows a workgroup
    uint len = p.trans != 0u ? p.out_n : p.in_n, nrows = p.trans != 0u ? p.in_n : p.out_n;
    uint rpg = wrows(), r1 = min(nrows, (g + 1u) * rpg);
    for (uint r = g * rpg; r < r1; r++) {
      uint row = gb + p.w_off + r * len;
      if (p.trans == 0u) {
        float d = dvo(r);
        if (d != 0.0)
          for (uint i = t; i < len; i += 128u) gprm[row + i] += d * xin(i);
      } else {
        float xi = xin(r);
        for (uint j = t; j < len; j += 128u) gprm[row + j] += xi * dvo(j);
      }
    }
    return;
  }
  // (past these: the padding of a grid split over y)
  uint o = (g - GW) * 128u + t;
  if (!direct() || o >= p.out_n) return;
  float d = dvo(o);
  if (p.b_off != HIER_NONE) gprm[gb + p.b_off + o] += d;
  if (p.res_off != HIER_NONE) gwk[rb + p.res_off + o] += d;
}
