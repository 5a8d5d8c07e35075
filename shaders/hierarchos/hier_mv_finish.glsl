// The epilogue of hier_matvec.comp (every post), shared with
// hier_matvec_rows.comp. Include after hier_mv.glsl.
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
