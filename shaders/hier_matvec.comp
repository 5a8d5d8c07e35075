#version 450
#extension GL_GOOGLE_include_directive : require
// One Linear of the Hierarchos step: y[o] = post(W x + b + res).
// trans 0: W [out, in] row-major, ROWS outputs per workgroup, the threads of
// a row stride over `in` and reduce in shared memory. trans 1: x @ M with M
// [in, out] (the low-rank matrices), one output per thread summed in the
// CPU tape's order. x is the concatenation of up to three segments
// ([x0 : n0] ++ [x1 : n1] ++ [x2 : in - n0 - n1]); bit s of xsrc reads
// segment s from the parameters instead of the work buffer. Staged through
// shared memory in tiles.
// post 0: y = clamp(scale * act(v)) (clamp <= 0: none), and y2 (if set) =
//   the same value clamped to clamp2 (a cell output and its state copy);
// post 1 (channel mix): relu(clamp(v, clamp))^2 * clamp(work[aux + o], f1),
//   then clamped to clamp^2 * f1;
// post 2 (memory gate, out 1): F(sigmoid(clamp(prm[aux] + v, 50))) with
//   the warm-up floor f1: F(g) = f1 + (1 - f1) g;
// post 3 (halting, out 1): p = clamp(sigmoid(clamp(v, f1)), 1e-6, 1 - 1e-6);
//   control words [active, survival, steps] read at aux and written at
//   y2_off (the same offset in place); flags bit 0 = first step. Halts (active = 0) once steps >= u0 (min_h_steps) and
//   1 - survival >= f0 (h_halt_thresh).
// flags bit 1 (training, posts 0-2): v = W x + b + res also to work[u0 + o]
//   (the backward reads it instead of W).
#include "hier.glsl"
#include "hier_mv.glsl"

void finish(uint o, float v) {
  if (p.b_off != HIER_NONE) v += prm[p.b_off + o];
  if (p.res_off != HIER_NONE) v += wk[rb + p.res_off + o];
  if ((p.flags & 2u) != 0u && p.post != 3u) wk[rb + p.u0 + o] = v;
  if (p.post == 0u) {
    v = p.scale * hier_act(p.act, v);
    wk[rb + p.y_off + o] = p.clamp_v > 0.0 ? hier_clamp(v, p.clamp_v) : v;
    if (p.y2_off != HIER_NONE) wk[rb + p.y2_off + o] = hier_clamp(v, p.clamp2);
  } else if (p.post == 1u) {
    if (p.clamp_v > 0.0) v = hier_clamp(v, p.clamp_v);
    float f = v > 0.0 ? v * v : 0.0;
    if (p.aux != HIER_NONE) {
      float d = wk[rb + p.aux + o];
      if (p.f1 > 0.0) d = hier_clamp(d, p.f1);
      f *= d;
      if (p.clamp_v > 0.0 && p.f1 > 0.0) f = hier_clamp(f, p.clamp_v * p.clamp_v * p.f1);
    }
    wk[rb + p.y_off + o] = f;
  } else if (p.post == 2u) {
    float g = hier_sigmoid(hier_clamp(prm[p.aux] + v, 50.0));
    if (p.f1 > 0.0) g = g * (1.0 - p.f1) + p.f1;
    wk[rb + p.y_off + o] = g;
  } else {
    float pr = hier_sigmoid(hier_clamp(v, p.f1));
    if (!(isnan(pr) || isinf(pr))) pr = clamp(pr, 1e-6, 1.0 - 1e-6);
    wk[rb + p.y_off + o] = pr;
    float surv = (p.flags & 1u) != 0u ? 1.0 - pr : wk[rb + p.aux + 1u] * (1.0 - pr);
    float steps = (p.flags & 1u) != 0u ? 1.0 : wk[rb + p.aux + 2u] + 1.0;
    bool halted = steps >= float(p.u0) && (1.0 - surv) >= p.f0;
    wk[rb + p.y2_off] = halted ? 0.0 : 1.0;
    wk[rb + p.y2_off + 1u] = surv;
    wk[rb + p.y2_off + 2u] = steps;
  }
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  hier_mv_run();
}
