#version 450
#extension GL_GOOGLE_include_directive : require
// Attention backward, pass 2, tiled (head dims <= 128): the math of
// attention_back_kv.comp for a block of BJ = 16 keys of one KV head per
// workgroup, walking the group's query heads and their queries in blocks
// of BQ = 8 staged in shared memory with pass 1's (lse, Δ). Invocation
// (r, c) = (tid / 8, tid % 8) forms p and ds of query c for key r; every
// invocation of row r then accumulates dk / dv dims c, c + 8, ...
#include "common.glsl"
#include "activation.glsl"
#include "attention_back.glsl"
#include "attention_rows.glsl"
layout(local_size_x = 128) in;
layout(std430, binding = 5) readonly buffer ST { float st[]; };
layout(std430, binding = 6) buffer DK { float dk[]; };
layout(std430, binding = 7) buffer DV { float dv[]; };

const uint BJ = 16u, BQ = 8u, DMAX = 128u;
// Rows as vec4, padded by one (the 8 rows read at once are 16 bytes apart
// in the banks); dims past D / Dv are zero.
const uint SD4 = DMAX / 4u + 1u;
shared vec4 ks[BJ * SD4];
shared vec4 vs[BJ * SD4];
shared vec4 qs[BQ * SD4];
shared vec4 gs[BQ * SD4];  // dO rows
shared float ps[BJ * (BQ + 1u)];
shared float dss[BJ * (BQ + 1u)];
shared float lse_s[BQ];
shared float del_s[BQ];

void main() {
  uint j0 = gl_WorkGroupID.x * BJ, kvh = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint tid = gl_LocalInvocationID.x, r = tid / 8u, c = tid % 8u;
  uint grp = p.H / p.KVH;
  uint j = j0 + r;
  bool live = j < p.S;
  HN_ROWS_LOAD(ks, BJ, p.D, jj, j0 + jj < p.S, k, p.k_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.D);
  HN_ROWS_LOAD(vs, BJ, p.Dv, jj, j0 + jj < p.S, v, p.v_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.Dv);
  float acc_k[DMAX / 8u], acc_v[DMAX / 8u];
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) { acc_k[i] = 0.0; acc_v[i] = 0.0; }
  // Causal: queries before position j0 see none of these keys.
  uint t_begin = p.causal != 0u ? uint(clamp(int(j0) - p.pos0, 0, int(p.T))) : 0u;
  for (uint hh = 0u; hh < grp; hh++) {
    uint h = kvh * grp + hh;
    float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;
    for (uint t0 = t_begin; t0 < p.T; t0 += BQ) {
      barrier();  // the previous block's rows are read
      HN_ROWS_LOAD(qs, BQ, p.D, ii, t0 + ii < p.T, q, p.q_off + ((b * p.T + t0 + ii) * p.H + h) * p.D);
      HN_ROWS_LOAD(gs, BQ, p.Dv, ii, t0 + ii < p.T, dout, p.do_off + ((b * p.T + t0 + ii) * p.H + h) * p.Dv);
      if (tid < BQ) {
        uint row = (b * p.T + min(t0 + tid, p.T - 1u)) * p.H + h;
        lse_s[tid] = st[p.st_off + 2u * row];
        del_s[tid] = st[p.st_off + 2u * row + 1u];
      }
      barrier();
      uint t = t0 + c;
      int pos = p.pos0 + int(t);
      float pv = 0.0, dsv = 0.0;
      if (live && t < p.T && !hn_att_hidden(j, pos)) {
        float dot = 0.0, dp = 0.0, th = 0.0;
        HN_ROWS_DOT(dot, qs, c, ks, r, p.D);
        float s = dot * p.scale;
        if (p.softcap > 0.0) { th = hn_tanh(s / p.softcap); s = p.softcap * th; }
        if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
        HN_ROWS_DOT(dp, gs, c, vs, r, p.Dv);
        pv = exp(s - lse_s[c]);
        dsv = pv * (dp - del_s[c]) * (1.0 - th * th) * p.scale;
      }
      ps[r * (BQ + 1u) + c] = pv;
      dss[r * (BQ + 1u) + c] = dsv;
      barrier();
      [[unroll]] for (uint ii = 0u; ii < BQ; ii++) {
        float wp = ps[r * (BQ + 1u) + ii], wd = dss[r * (BQ + 1u) + ii];
        [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
          uint d = c + i * 8u;
          if (d < p.Dv) acc_v[i] = fma(wp, gs[ii * SD4 + d / 4u][d % 4u], acc_v[i]);
          if (d < p.D) acc_k[i] = fma(wd, qs[ii * SD4 + d / 4u][d % 4u], acc_k[i]);
        }
      }
    }
  }
  if (!live) return;
  uint idx = (b * p.S + j) * p.KVH + kvh;
  uint dkb = p.g_off + idx * p.D, dvb = p.g2_off + idx * p.Dv;
  bool accumulate = (p.flags & 2u) != 0u;
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
    uint d = c + i * 8u;
    if (d < p.D) dk[dkb + d] = (accumulate ? dk[dkb + d] : 0.0) + acc_k[i];
    if (d < p.Dv) dv[dvb + d] = (accumulate ? dv[dvb + d] : 0.0) + acc_v[i];
  }
}
