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
layout(local_size_x = 128) in;
layout(std430, binding = 5) readonly buffer ST { float st[]; };
layout(std430, binding = 6) buffer DK { float dk[]; };
layout(std430, binding = 7) buffer DV { float dv[]; };

const uint BJ = 16u, BQ = 8u, DMAX = 128u, SD = DMAX + 1u;
shared float ks[BJ * SD];
shared float vs[BJ * SD];
shared float qs[BQ * SD];
shared float gs[BQ * SD];  // dO rows
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
  for (uint e = tid; e < BJ * p.D; e += 128u) {
    uint jj = e / p.D, d = e % p.D;
    ks[jj * SD + d] = j0 + jj < p.S ? k[p.k_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.D + d] : 0.0;
  }
  for (uint e = tid; e < BJ * p.Dv; e += 128u) {
    uint jj = e / p.Dv, d = e % p.Dv;
    vs[jj * SD + d] = j0 + jj < p.S ? v[p.v_off + ((b * p.S + j0 + jj) * p.KVH + kvh) * p.Dv + d] : 0.0;
  }
  float acc_k[DMAX / 8u], acc_v[DMAX / 8u];
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) { acc_k[i] = 0.0; acc_v[i] = 0.0; }
  // Causal: queries before position j0 see none of these keys.
  uint t_begin = p.causal != 0u ? uint(clamp(int(j0) - p.pos0, 0, int(p.T))) : 0u;
  for (uint hh = 0u; hh < grp; hh++) {
    uint h = kvh * grp + hh;
    float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;
    for (uint t0 = t_begin; t0 < p.T; t0 += BQ) {
      barrier();  // the previous block's rows are read
      for (uint e = tid; e < BQ * p.D; e += 128u) {
        uint ii = e / p.D, d = e % p.D;
        qs[ii * SD + d] = t0 + ii < p.T ? q[p.q_off + ((b * p.T + t0 + ii) * p.H + h) * p.D + d] : 0.0;
      }
      for (uint e = tid; e < BQ * p.Dv; e += 128u) {
        uint ii = e / p.Dv, d = e % p.Dv;
        gs[ii * SD + d] = t0 + ii < p.T ? dout[p.do_off + ((b * p.T + t0 + ii) * p.H + h) * p.Dv + d] : 0.0;
      }
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
        for (uint d = 0u; d < p.D; d++) dot = fma(qs[c * SD + d], ks[r * SD + d], dot);
        float s = dot * p.scale;
        if (p.softcap > 0.0) { th = hn_tanh(s / p.softcap); s = p.softcap * th; }
        if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
        for (uint d = 0u; d < p.Dv; d++) dp = fma(gs[c * SD + d], vs[r * SD + d], dp);
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
          if (d < p.Dv) acc_v[i] = fma(wp, gs[ii * SD + d], acc_v[i]);
          if (d < p.D) acc_k[i] = fma(wd, qs[ii * SD + d], acc_k[i]);
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
