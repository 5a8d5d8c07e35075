#version 450
#extension GL_GOOGLE_include_directive : require
// The RWKV-7 time-mix core of one cell, one workgroup per head (head size
// N <= 64), thread i owning row i of the head's N x N state:
//   kk = L2norm(k * k_k) (eps 1e-12), k2 = k * (1 + (a - 1) * k_a);
//   sa_i = sum_j S_ij (-kk_j); S_ij = S_ij exp(-exp(clamp(w_j, -60, 30)))
//     + sa_i kk_j a_j + v_i k2_j; y_i = sum_j S_ij r_j (unclamped S);
//   t = GroupNorm_head(y; ln_x, eps) + (sum r k2 r_k) v, times g.
// S is read at s_off and written at so_off (the same offset in place),
// clamped to +-sc (recurrent_state_clamp), and the
// cell's v_first state gets clamp(v, sc).
#include "hier.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  uint N; uint r_off; uint k_off; uint v_off;
  uint a_off; uint g_off; uint w_off; uint kk_p;
  uint ka_p; uint rk_p; uint lnw_p; uint lnb_p;
  uint s_off; uint vf_off; uint t_off; float sc;
  float eps; uint pred; uint so_off;
  uint rs; uint ps;
} p;

shared float kk[64], k2[64], dec[64], aa[64], rr[64], red[64];

float head_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  [[unroll]] for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    barrier();
  }
  float r = red[0];
  barrier();
  return r;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint i = gl_LocalInvocationID.x, h = gl_WorkGroupID.x;
  bool on = i < p.N;
  uint c = h * p.N + i;
  float kkv = on ? wk[rb + p.k_off + c] * prm[p.kk_p + c] : 0.0;
  float d = max(sqrt(head_sum(kkv * kkv)), 1e-12);
  float y = 0.0, vi = 0.0, bon = 0.0;
  if (on) {
    float a = wk[rb + p.a_off + c], kv = wk[rb + p.k_off + c], w = wk[rb + p.w_off + c];
    kk[i] = kkv / d;
    k2[i] = kv * ((a - 1.0) * prm[p.ka_p + c] + 1.0);
    float wc = (isnan(w) || isinf(w)) ? w : clamp(w, -60.0, 30.0);
    dec[i] = exp(-exp(wc));
    aa[i] = a;
    rr[i] = wk[rb + p.r_off + c];
    vi = wk[rb + p.v_off + c];
  }
  barrier();
  if (on) {
    uint base = rb + p.s_off + (h * p.N + i) * p.N, obase = rb + p.so_off + (h * p.N + i) * p.N;
    float sa = 0.0;
    for (uint j = 0u; j < p.N; j++) sa += wk[base + j] * (-kk[j]);
    for (uint j = 0u; j < p.N; j++) {
      float s = wk[base + j] * dec[j] + sa * (kk[j] * aa[j]) + vi * k2[j];
      y += s * rr[j];
      wk[obase + j] = hier_clamp(s, p.sc);
    }
    bon = rr[i] * k2[i] * prm[p.rk_p + c];
  }
  float mean = head_sum(on ? y : 0.0) / float(p.N);
  float dv = on ? y - mean : 0.0;
  float rstd = 1.0 / sqrt(head_sum(dv * dv) / float(p.N) + p.eps);
  float bonus = head_sum(bon);
  if (on) {
    float tt = dv * rstd * prm[p.lnw_p + c] + prm[p.lnb_p + c];
    tt += bonus * vi;
    wk[rb + p.t_off + c] = tt * wk[rb + p.g_off + c];
    wk[rb + p.vf_off + c] = hier_clamp(vi, p.sc);
  }
}
