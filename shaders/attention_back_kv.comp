#version 450
#extension GL_GOOGLE_include_directive : require
// Attention backward, pass 2: one invocation per key row (b, j, kv head),
// walking the query heads of its group and every query in order:
//   dv_j = Σ p · dO,   dk_j = Σ p (dp - Δ) · cap' · scale · q
// with p = exp(score - lse) from pass 1's stats. No atomics, deterministic.
#include "common.glsl"
#include "activation.glsl"
#include "attention_back.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 5) readonly buffer ST { float st[]; };
layout(std430, binding = 6) buffer DK { float dk[]; };
layout(std430, binding = 7) buffer DV { float dv[]; };
void main() {
  uint idx = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (idx >= p.B * p.S * p.KVH) return;
  uint kvh = idx % p.KVH, j = (idx / p.KVH) % p.S, b = idx / (p.KVH * p.S);
  uint grp = p.H / p.KVH;
  uint kb = p.k_off + idx * p.D, vb = p.v_off + idx * p.Dv;
  uint dkb = p.g_off + idx * p.D, dvb = p.g2_off + idx * p.Dv;
  if ((p.flags & 2u) == 0u) {
    for (uint d = 0u; d < p.D; d++) dk[dkb + d] = 0.0;
    for (uint d = 0u; d < p.Dv; d++) dv[dvb + d] = 0.0;
  }
  float th;
  for (uint t = 0u; t < p.T; t++) {
    int pos = p.pos0 + int(t);
    if (hn_att_hidden(j, pos)) continue;
    for (uint hh = 0u; hh < grp; hh++) {
      uint h = kvh * grp + hh;
      uint row = (b * p.T + t) * p.H + h;
      uint qb = p.q_off + row * p.D, ob = p.do_off + row * p.Dv;
      float pj = exp(hn_att_score(qb, kb, h, j, pos, th) - st[p.st_off + 2u * row]);
      float dp = 0.0;
      for (uint d = 0u; d < p.Dv; d++) {
        float g = dout[ob + d];
        dp = fma(g, v[vb + d], dp);
        dv[dvb + d] += pj * g;
      }
      float ds = pj * (dp - st[p.st_off + 2u * row + 1u]) * (1.0 - th * th) * p.scale;
      for (uint d = 0u; d < p.D; d++) dk[dkb + d] += ds * q[qb + d];
    }
  }
}
