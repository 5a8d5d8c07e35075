#version 450
#extension GL_GOOGLE_include_directive : require
// The worker's drift (one workgroup, width n <= 4096):
//   mode 0 (start): d = l2clamp(clamp(l2clamp(d_in, dnc), dsc), dnc);
//     the refinement loop's predicates work[flag + i], i < nflag, become
//     1, 0, 0, ... (iteration i runs while its word is 1);
//   mode 1 (refine): d = l2clamp(clamp(d + delta, dsc), dnc), in place;
//     work[flag] (the next iteration's word) = 0 once mean |delta| < atol;
//   mode 2 (final): d = l2clamp(clamp(d, dsc), dnc).
// l2clamp(v, m) scales v by min(1, m / (|v| + 1e-6)) when m > 0. When
// cd_off is set, cd = ctx + d (the worker's input half).
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

shared float vs[4096];

// Scales vs[] in place by l2clamp's factor.
void l2clamp_shared(float m) {
  uint t = gl_LocalInvocationID.x;
  float ss = 0.0;
  for (uint c = t; c < p.n; c += 256u) ss += vs[c] * vs[c];
  float norm = sqrt(hn_wg_sum(ss));
  float scale = m > 0.0 ? min(1.0, m / (norm + 1e-6)) : 1.0;
  if (scale < 1.0)
    for (uint c = t; c < p.n; c += 256u) vs[c] *= scale;
  barrier();
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint t = gl_LocalInvocationID.x;
  float ma = 0.0;
  for (uint c = t; c < p.n; c += 256u) {
    float v = wk[rb + p.d_off + c];
    if (p.mode == 1u) {
      float dl = wk[rb + p.delta_off + c];
      ma += abs(dl);
      v += dl;
    }
    vs[c] = p.mode == 0u ? v : hier_clamp(v, p.dsc);
  }
  barrier();
  if (p.mode == 0u) {
    l2clamp_shared(p.dnc);
    for (uint c = t; c < p.n; c += 256u) vs[c] = hier_clamp(vs[c], p.dsc);
    barrier();
  }
  l2clamp_shared(p.dnc);
  float total = hn_wg_sum(ma);
  for (uint c = t; c < p.n; c += 256u) {
    wk[rb + p.y_off + c] = vs[c];
    if (p.cd_off != HIER_NONE) wk[rb + p.cd_off + c] = wk[rb + p.ctx_off + c] + vs[c];
  }
  if (t == 0u) {
    if (p.mode == 0u) {
      wk[rb + p.flag] = 1.0;
      for (uint i = 1u; i < p.nflag; i++) wk[rb + p.flag + i] = 0.0;
    }
    if (p.mode == 1u) wk[rb + p.flag] = total / float(p.n) < p.atol ? 0.0 : 1.0;
  }
}
