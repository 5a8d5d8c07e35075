#version 450
#extension GL_GOOGLE_include_directive : require
// The backward of hier_wkv.comp (CPU reference and the tape rules it
// follows: engine/hierarchos/hierarchos-vk-back-wkv.c). One workgroup per head
// and row: 4 lanes of 64 threads, thread (lane, i) on channel i of the
// head. Every lane computes the channel's scalars; lane 0 alone writes the
// per-channel gradients. The forward is recomputed from its inputs (S' and
// the GroupNorm statistics, in the forward's order of operations so the
// clamp masks agree). The head's N x N block lives in shared memory (first
// S, then in place the gradient G of S'), so every global access to the
// state walks it along its rows (coalesced). A sum over a row or a column
// of the block is split into 4 quarters, one per lane, added in a fixed
// order: no atomics, the same bits every run.
#define HIER_BACK
#include "hier.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint N; uint r_off; uint k_off; uint v_off;
  uint a_off; uint g_off; uint w_off; uint kk_p;
  uint ka_p; uint rk_p; uint lnw_p; uint lnb_p;
  uint s_off; uint vf_off; uint t_off; float sc;
  float eps; uint pred; uint so_off;
  uint rs; uint ps;
} p;

const uint GS = 65u; // X's row stride: padded so row and column walks hit distinct banks

shared float kk[64], k2[64], dec[64], aa[64], rr[64], vv[64], sa[64], gy[64], gsa[64], red[64];
shared float X[64 * GS];
shared float part[4][4][64]; // [quantity][lane][channel]: the lanes' quarter sums

uint i, lane;

// The sum over the head of lane 0's v (every thread gets it).
float head_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  if (t < 64u) red[t] = v;
  barrier();
  [[unroll]] for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    barrier();
  }
  float r = red[0];
  barrier();
  return r;
}

// The four lanes' quarter sums of quantity k for this channel, in lane
// order; call after a barrier that follows the writes.
float quarters(uint k) {
  return ((part[k][0][i] + part[k][1][i]) + part[k][2][i]) + part[k][3][i];
}

// HT_CLAMP's derivative: 1 inside [-m, m], 0 outside and for NaN.
float clamp_pass(float x, float m) {
  return !isnan(x) && x >= -m && x <= m ? 1.0 : 0.0;
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint gb = gl_WorkGroupID.z * p.ps, h = gl_WorkGroupID.x, N = p.N;
  i = gl_LocalInvocationID.x & 63u;
  lane = gl_LocalInvocationID.x >> 6;
  bool on = i < N, own = on && lane == 0u;
  uint c = h * N + i;
  // this lane's quarter of a row or a column: [q0, q1)
  uint Q = (N + 3u) / 4u, q0 = min(lane * Q, N), q1 = min(q0 + Q, N);

  // ---- forward ----
  float kv = on ? wk[rb + p.k_off + c] : 0.0, kkp = on ? prm[p.kk_p + c] : 0.0;
  float u = kv * kkp;
  float d = max(sqrt(head_sum(u * u)), 1e-12);
  float av = 0.0, wv = 0.0, vi = 0.0, ri = 0.0, km = 0.0, kki = 0.0, k2i = 0.0, deci = 0.0;
  if (on) {
    av = wk[rb + p.a_off + c];
    wv = wk[rb + p.w_off + c];
    vi = wk[rb + p.v_off + c];
    ri = wk[rb + p.r_off + c];
    kki = u / d;
    km = (av - 1.0) * prm[p.ka_p + c] + 1.0;
    k2i = kv * km;
    float wc = (isnan(wv) || isinf(wv)) ? wv : clamp(wv, -60.0, 30.0);
    deci = exp(-exp(wc));
  }
  if (own) { kk[i] = kki; k2[i] = k2i; dec[i] = deci; aa[i] = av; rr[i] = ri; vv[i] = vi; }
  // the head's state block, [q][j] at X[q * GS + j]
  uint blk = rb + p.s_off + h * N * N, oblk = rb + p.so_off + h * N * N;
  for (uint e = gl_LocalInvocationID.x; e < N * N; e += 256u) X[(e / N) * GS + e % N] = wk[blk + e];
  barrier();
  // row i: sa = S (-kk), then y = S' r
  float acc = 0.0;
  if (on)
    for (uint j = q0; j < q1; j++) acc += X[i * GS + j] * (-kk[j]);
  part[0][lane][i] = acc;
  barrier();
  float sai = quarters(0u);
  acc = 0.0;
  if (on)
    for (uint j = q0; j < q1; j++) acc += (X[i * GS + j] * dec[j] + sai * (kk[j] * aa[j]) + vi * k2[j]) * rr[j];
  part[1][lane][i] = acc;
  barrier();
  float y = on ? quarters(1u) : 0.0;
  float mean = head_sum(y) / float(N);
  float dv = on ? y - mean : 0.0;
  float rstd = 1.0 / sqrt(head_sum(dv * dv) / float(N) + p.eps);
  float rk = on ? prm[p.rk_p + c] : 0.0;
  float bonus = head_sum(ri * k2i * rk);

  // ---- t = tt g, v_first = clamp(v), tt = GN(y) + bonus v ----
  float xh = dv * rstd, lw = on ? prm[p.lnw_p + c] : 0.0, gtt = 0.0, gv = 0.0;
  if (on) {
    float tt = xh * lw + prm[p.lnb_p + c] + bonus * vi;
    float gt = gwk[rb + p.t_off + c];
    gtt = gt * wk[rb + p.g_off + c];
    gv = gwk[rb + p.vf_off + c] * clamp_pass(vi, p.sc) + gtt * bonus;
    if (own) gwk[rb + p.g_off + c] += gt * tt;
  }
  float gs = head_sum(gtt * vi);
  float gx = gtt * lw;
  float m1 = head_sum(gx) / float(N);
  float m2 = head_sum(gx * xh) / float(N);
  float gr = gs * k2i * rk, gk2 = gs * ri * rk;
  if (own) {
    gprm[gb + p.rk_p + c] += gs * ri * k2i;
    gprm[gb + p.lnw_p + c] += gtt * xh;
    gprm[gb + p.lnb_p + c] += gtt;
    gy[i] = rstd * (gx - m1 - xh * m2);
    sa[i] = sai;
  }
  barrier();

  // ---- column i: G = clamp'(S') g(S out) + gy r^T in place of S; the
  // column sums that need no row sum of G ----
  float kka = kki * av, gdecay = 0.0, gbb = 0.0, gk = 0.0, grr = 0.0;
  if (on)
    for (uint q = q0; q < q1; q++) {
      float s0 = X[q * GS + i];
      float s = s0 * deci + sa[q] * kka + vv[q] * k2i;
      float g = gwk[oblk + q * N + i] * clamp_pass(s, p.sc) + gy[q] * ri;
      X[q * GS + i] = g;
      gdecay += g * s0;
      gbb += g * sa[q];
      gk += g * vv[q];
      grr += gy[q] * s;
    }
  part[0][lane][i] = gdecay;
  part[1][lane][i] = gbb;
  part[2][lane][i] = gk;
  part[3][lane][i] = grr;
  barrier();
  gdecay = quarters(0u);
  gbb = quarters(1u);
  gr += quarters(3u);
  gk2 += quarters(2u);
  barrier();

  // ---- row i: the row sums of G ----
  float gsai = 0.0, gvs = 0.0;
  if (on)
    for (uint j = q0; j < q1; j++) {
      float g = X[i * GS + j];
      gsai += g * kk[j] * aa[j];
      gvs += g * k2[j];
    }
  part[0][lane][i] = gsai;
  part[1][lane][i] = gvs;
  barrier();
  if (own) gsa[i] = quarters(0u);
  gv += quarters(1u);
  barrier();

  // ---- column i: the state's gradient, kk's and a's ----
  float gkks = 0.0;
  if (on)
    for (uint q = q0; q < q1; q++) {
      uint at = blk + q * N + i;
      gkks += gsa[q] * wk[at];
      gwk[at] += X[q * GS + i] * deci - gsa[q] * kki;
    }
  part[0][lane][i] = gkks;
  barrier();
  float gkk = 0.0, ga = 0.0;
  if (on) {
    gkk = gbb * av - quarters(0u);
    ga = gbb * kki;
    if (own && !isnan(wv) && !isinf(wv) && wv >= -60.0 && wv <= 30.0)
      gwk[rb + p.w_off + c] += gdecay * (-deci * exp(wv));
  }

  // ---- k2 = k ((a - 1) k_a + 1); kk = headnorm(k k_k) ----
  float dot = head_sum(kki * gkk);
  if (own) {
    float gm = gk2 * kv, ka = prm[p.ka_p + c];
    float gu = d > 1e-12 ? (gkk - kki * dot) / d : gkk / d;
    gwk[rb + p.k_off + c] += gk2 * km;
    gwk[rb + p.k_off + c] += gu * kkp;
    gprm[gb + p.kk_p + c] += gu * kv;
    gprm[gb + p.ka_p + c] += gm * (av - 1.0);
    gwk[rb + p.a_off + c] += ga;
    gwk[rb + p.a_off + c] += gm * ka;
    gwk[rb + p.r_off + c] += gr;
    gwk[rb + p.v_off + c] += gv;
  }
}
