// hier_matvec.comp for MVR_ROWS batch rows in one workgroup (the row count
// in flags >> 8, workgroup z = a group of MVR_ROWS rows): W [out,
// in] is read once for all the rows instead of once per row. Each output's
// sum runs in the same order as the one-row path (lane l adds the inputs
// i = l mod 16 in order, then the 16 lanes in order), so both give the same
// bits. Include after hier_mv.glsl and hier_mv_finish.glsl.
layout(constant_id = 0) const uint MVR_ROWS = 4u; // rows a workgroup (<= 16)
const uint MVR_TILE = 128u;

void hier_mv_rows_run() {
  uint t = gl_LocalInvocationID.x, r8 = t / TPR, l = t % TPR;
  uint o = hn_group_index() * ROWS + r8;
  uint n_rows = p.flags >> 8, r0 = gl_WorkGroupID.z * MVR_ROWS, nr = min(MVR_ROWS, n_rows - r0);
  float acc[16];
  [[unroll]] for (uint q = 0u; q < 16u; q++) acc[q] = 0.0;
  for (uint k0 = 0u; k0 < p.in_n; k0 += MVR_TILE) {
    uint kn = min(MVR_TILE, p.in_n - k0);
    // x of every row of the group: xs[q * MVR_TILE + i]
    for (uint e = t; e < nr * MVR_TILE; e += 128u) {
      uint q = e / MVR_TILE, i = e % MVR_TILE;
      rb = (r0 + q) * p.rs;
      xs[e] = i < kn ? xin(k0 + i) : 0.0;
    }
    barrier();
    if (o < p.out_n) {
      uint row = p.w_off + o * p.in_n + k0;
      for (uint i = l; i < kn; i += TPR) {
        float w = prm[row + i];
        [[unroll]] for (uint q = 0u; q < 16u; q++)
          if (q < nr) acc[q] += w * xs[q * MVR_TILE + i];
      }
    }
    barrier();
  }
  [[unroll]] for (uint q = 0u; q < 16u; q++) {
    if (q < nr) {
      part[t] = acc[q];
      barrier();
      rb = (r0 + q) * p.rs;
      if (l == 0u && o < p.out_n && !hier_skip(p.pred, rb)) {
        float s = 0.0;
        for (uint j = 0u; j < TPR; j++) s += part[t + j];
        finish(o, s);
      }
      barrier();
    }
  }
}
