#version 450
#extension GL_GOOGLE_include_directive : require
// Attention backward, pass 1: one invocation per query row (b, t, h).
// Recomputes the row's softmax (no probabilities are stored), then
//   dq = Σ_j p_j (dp_j - Δ) · cap'_j · scale · k_j,  dp_j = dO·v_j,  Δ = Σ_j p_j dp_j,
// and stores (lse, Δ) per row for pass 2 (attention_back_kv.comp).
#include "common.glsl"
#include "activation.glsl"
#include "attention_back.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 5) writeonly buffer ST { float st[]; };
layout(std430, binding = 6) buffer DQ { float dq[]; };
void main() {
  uint row = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (row >= p.B * p.T * p.H) return;
  uint h = row % p.H, t = (row / p.H) % p.T, b = row / (p.H * p.T);
  uint kvh = h / (p.H / p.KVH);
  int pos = p.pos0 + int(t);
  uint qb = p.q_off + row * p.D, ob = p.do_off + row * p.Dv;
  float m = HN_NEG_INF, l = 0.0, th;
  for (uint j = 0u; j < p.S; j++) {
    if (hn_att_hidden(j, pos)) continue;
    float s = hn_att_score(qb, p.k_off + ((b * p.S + j) * p.KVH + kvh) * p.D, h, j, pos, th);
    if (s > m) { l = l * exp(m - s) + 1.0; m = s; } else l += exp(s - m);
  }
  float lse = l > 0.0 ? m + log(l) : 0.0;
  float delta = 0.0;
  for (uint j = 0u; j < p.S; j++) {
    if (hn_att_hidden(j, pos)) continue;
    float pj = exp(hn_att_score(qb, p.k_off + ((b * p.S + j) * p.KVH + kvh) * p.D, h, j, pos, th) - lse);
    uint vb = p.v_off + ((b * p.S + j) * p.KVH + kvh) * p.Dv;
    float dp = 0.0;
    for (uint d = 0u; d < p.Dv; d++) dp = fma(dout[ob + d], v[vb + d], dp);
    delta += pj * dp;
  }
  uint gb = p.g_off + row * p.D;
  bool acc = (p.flags & 2u) != 0u;
  for (uint d = 0u; d < p.D; d++) if (!acc) dq[gb + d] = 0.0;
  for (uint j = 0u; j < p.S; j++) {
    if (hn_att_hidden(j, pos)) continue;
    uint kb = p.k_off + ((b * p.S + j) * p.KVH + kvh) * p.D;
    float pj = exp(hn_att_score(qb, kb, h, j, pos, th) - lse);
    uint vb = p.v_off + ((b * p.S + j) * p.KVH + kvh) * p.Dv;
    float dp = 0.0;
    for (uint d = 0u; d < p.Dv; d++) dp = fma(dout[ob + d], v[vb + d], dp);
    float ds = pj * (dp - delta) * (1.0 - th * th) * p.scale;
    for (uint d = 0u; d < p.D; d++) dq[gb + d] += ds * k[kb + d];
  }
  st[p.st_off + 2u * row] = lse;
  st[p.st_off + 2u * row + 1u] = delta;
}
