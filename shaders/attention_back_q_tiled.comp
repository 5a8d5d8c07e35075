#version 450
#extension GL_GOOGLE_include_directive : require
// Attention backward, pass 1, tiled (head dims <= 128): the math of
// attention_back_q.comp for a block of BQ = 16 queries of one head per
// workgroup, keys in blocks of BJ = 8 staged in shared memory. Invocation
// (r, c) = (tid / 8, tid % 8) forms score and dp = dO·v of key c for query
// r; every invocation of row r then reads the row's 8 values, so the
// running (max, sum, Σ e·dp) and, in the second walk over the keys, dq
// dims c, c + 8, ... need no reduction of their own.
#include "common.glsl"
#include "activation.glsl"
#include "attention_back.glsl"
#include "attention_rows.glsl"
layout(local_size_x = 128) in;
layout(std430, binding = 5) writeonly buffer ST { float st[]; };
layout(std430, binding = 6) buffer DQ { float dq[]; };

const uint BQ = 16u, BJ = 8u, DMAX = 128u;
// Rows as vec4, padded by one (the 8 rows read at once are 16 bytes apart
// in the banks); dims past D / Dv are zero.
const uint SD4 = DMAX / 4u + 1u;
shared vec4 qs[BQ * SD4];
shared vec4 gs[BQ * SD4];  // dO rows
shared vec4 ks[BJ * SD4];
shared vec4 vs[BJ * SD4];
shared float ss[BQ * (BJ + 1u)];
shared float ds_[BQ * (BJ + 1u)];

void load_keys(uint b, uint kvh, uint j0, uint n_keys) {
  HN_ROWS_LOAD(ks, BJ, p.D, jj, j0 + jj < n_keys, k, p.k_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.D);
  HN_ROWS_LOAD(vs, BJ, p.Dv, jj, j0 + jj < n_keys, v, p.v_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.Dv);
}

void main() {
  uint qb0 = gl_WorkGroupID.x * BQ, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint tid = gl_LocalInvocationID.x, r = tid / 8u, c = tid % 8u;
  uint kvh = h / (p.H / p.KVH);
  uint t = qb0 + r;
  bool live = t < p.T;
  int pos = p.pos0 + int(t);
  uint row = (b * p.T + t) * p.H + h;
  HN_ROWS_LOAD(qs, BQ, p.D, rr, qb0 + rr < p.T, q, p.q_off + ((b * p.T + qb0 + rr) * p.H + h) * p.D);
  HN_ROWS_LOAD(gs, BQ, p.Dv, rr, qb0 + rr < p.T, dout, p.do_off + ((b * p.T + qb0 + rr) * p.H + h) * p.Dv);
  float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;
  uint n_keys = p.S;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BQ, p.T)), 0, int(p.S)));

  // Walk 1: log-sum-exp of the scores and Δ = Σ p·dp.
  float m = HN_NEG_INF, l = 0.0, dl = 0.0;
  for (uint j0 = 0u; j0 < n_keys; j0 += BJ) {
    barrier();
    load_keys(b, kvh, j0, n_keys);
    barrier();
    uint j = j0 + c;
    float s = HN_NEG_INF, dp = 0.0;
    if (live && j < n_keys && !hn_att_hidden(j, pos)) {
      float dot = 0.0;
      HN_ROWS_DOT(dot, qs, r, ks, c, p.D);
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * hn_tanh(s / p.softcap);
      if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
      HN_ROWS_DOT(dp, gs, r, vs, c, p.Dv);
    }
    ss[r * (BJ + 1u) + c] = s;
    ds_[r * (BJ + 1u) + c] = dp;
    barrier();
    [[unroll]] for (uint jj = 0u; jj < BJ; jj++) {
      float sj = ss[r * (BJ + 1u) + jj], dpj = ds_[r * (BJ + 1u) + jj];
      if (sj == HN_NEG_INF) continue;
      if (sj > m) {
        float f = exp(m - sj);
        l = l * f + 1.0;
        dl = dl * f + dpj;
        m = sj;
      } else {
        float e = exp(sj - m);
        l += e;
        dl = fma(e, dpj, dl);
      }
    }
  }
  float lse = l > 0.0 ? m + log(l) : 0.0;
  float delta = l > 0.0 ? dl / l : 0.0;

  // Walk 2: dq = Σ_j p_j (dp_j - Δ) · cap'_j · scale · k_j.
  float acc[DMAX / 8u];
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) acc[i] = 0.0;
  for (uint j0 = 0u; j0 < n_keys; j0 += BJ) {
    barrier();
    load_keys(b, kvh, j0, n_keys);
    barrier();
    uint j = j0 + c;
    float dsv = 0.0;
    if (live && j < n_keys && !hn_att_hidden(j, pos)) {
      float dot = 0.0, dp = 0.0, th = 0.0;
      HN_ROWS_DOT(dot, qs, r, ks, c, p.D);
      float s = dot * p.scale;
      if (p.softcap > 0.0) { th = hn_tanh(s / p.softcap); s = p.softcap * th; }
      if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
      HN_ROWS_DOT(dp, gs, r, vs, c, p.Dv);
      dsv = exp(s - lse) * (dp - delta) * (1.0 - th * th) * p.scale;
    }
    ds_[r * (BJ + 1u) + c] = dsv;
    barrier();
    [[unroll]] for (uint jj = 0u; jj < BJ; jj++) {
      float w = ds_[r * (BJ + 1u) + jj];
      [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
        uint d = c + i * 8u;
        if (d < p.D) acc[i] = fma(w, ks[jj * SD4 + d / 4u][d % 4u], acc[i]);
      }
    }
  }
  if (!live) return;
  uint gb = p.g_off + row * p.D;
  bool accumulate = (p.flags & 2u) != 0u;
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
    uint d = c + i * 8u;
    if (d < p.D) dq[gb + d] = (accumulate ? dq[gb + d] : 0.0) + acc[i];
  }
  if (c == 0u) {
    st[p.st_off + 2u * row] = lse;
    st[p.st_off + 2u * row + 1u] = delta;
  }
}
