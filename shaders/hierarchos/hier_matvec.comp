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
// hier_matvec_rows.comp runs the same op (trans 0) for many rows at once.
#include "hier.glsl"
#include "hier_mv.glsl"

#include "hier_mv_finish.glsl"

// trans 1 here (x @ M, M [in, out]): 16 outputs a workgroup, 8 lanes of an
// output splitting the inputs (lane l adds i = l mod 8 in order, then the
// lanes add in order): an eighth of the serial loop of hier_mv_run's one
// output a thread, for the cell's short low-rank matrices.
void trans_split() {
  uint t = gl_LocalInvocationID.x, l = t % 8u;
  uint o = hn_group_index() * 16u + t / 8u;
  float acc = 0.0;
  for (uint k0 = 0u; k0 < p.in_n; k0 += TILE) {
    uint kn = min(TILE, p.in_n - k0);
    for (uint i = t; i < kn; i += 128u) xs[i] = xin(k0 + i);
    barrier();
    if (o < p.out_n)
      for (uint i = l; i < kn; i += 8u) acc += xs[i] * prm[p.w_off + (k0 + i) * p.out_n + o];
    barrier();
  }
  part[t] = acc;
  barrier();
  if (l == 0u && o < p.out_n) {
    float s = 0.0;
    for (uint j = 0u; j < 8u; j++) s += part[t + j];
    finish(o, s);
  }
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  if (p.trans != 0u) {
    trans_split();
    return;
  }
  hier_mv_run();
}
