#version 450
#extension GL_GOOGLE_include_directive : require
// Attention for many queries (prefill): same contract and push constants as
// attention.comp (single pass), one workgroup per block of BQ = 16 queries
// of one head, keys in blocks of BJ = 16 staged in shared memory (f32) and
// shared by the block's queries, with an online softmax per query.
// Invocation (r, c) = (tid / 8, tid % 8) scores keys c, c + 8 of query r,
// then every invocation of row r reads the row's 16 scores and accumulates
// output dims c, c + 8, ... (so no reduction needs a barrier of its own).
// D, Dv <= 128 (the host uses attention.comp above that).
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 3) readonly buffer S { float slopes[]; };
layout(std430, binding = 4) readonly buffer Mk { float mask[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint n_ctx; uint n_kv;
  int pos0; uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint s_off; uint m_off;
  uint flags;  // 1 = alibi slopes, 2 = mask, 4 = sinks (in the slopes binding)
  uint mask_B; uint mask_T; uint mask_cols;
  uint chunk; uint n_split;
} p;

const uint BQ = 16u, BJ = 16u, DMAX = 128u;
// q and k rows as vec4, padded by one: the 8 invocations of a row read 8
// different keys 16 bytes apart in the banks. Dims past D are zero.
const uint SD4 = DMAX / 4u + 1u;
shared vec4 qs[BQ * SD4];
shared vec4 ks[BJ * SD4];
shared float vs[BJ * DMAX];
shared float ss[BQ * (BJ + 1u)];

void main() {
  uint qb0 = gl_WorkGroupID.x * BQ, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint tid = gl_LocalInvocationID.x, r = tid / 8u, c = tid % 8u;
  uint kvh = h / (p.H / p.KVH);
  uint t = qb0 + r;
  bool live = t < p.T;
  int pos = p.pos0 + int(t);
  uint D4 = (p.D + 3u) / 4u;
  for (uint e = tid; e < BQ * D4; e += 128u) {
    uint rr = e / D4, d = (e % D4) * 4u;
    vec4 v4 = vec4(0.0);
    if (qb0 + rr < p.T) {
      uint base = p.q_off + ((b * p.T + qb0 + rr) * p.H + h) * p.D;
      [[unroll]] for (uint i = 0u; i < 4u; i++) if (d + i < p.D) v4[i] = q[base + d + i];
    }
    qs[rr * SD4 + d / 4u] = v4;
  }
  float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;
  uint mrow = 0u;
  if ((p.flags & 2u) != 0u) {
    uint mb = p.mask_B == 1u ? 0u : b;
    uint mt = p.mask_T == 1u ? 0u : min(t, p.T - 1u);
    mrow = p.m_off + (mb * p.mask_T + mt) * p.mask_cols;
  }
  float m_run = HN_NEG_INF, l_run = 0.0;
  if ((p.flags & 4u) != 0u) { m_run = slopes[p.s_off + h]; l_run = 1.0; }
  float acc[DMAX / 8u];
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) acc[i] = 0.0;
  uint kv_row0 = b * p.n_ctx;
  // The block's last query bounds the keys it can see.
  uint n_keys = p.n_kv;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BQ, p.T)), 0, int(p.n_kv)));
  for (uint j0 = 0u; j0 < n_keys; j0 += BJ) {
    barrier();  // the previous block's ks / vs / ss are read
    for (uint e = tid; e < BJ * D4; e += 128u) {
      uint jj = e / D4, d = (e % D4) * 4u, j = j0 + jj;
      vec4 v4 = vec4(0.0);
      if (j < n_keys) {
        uint base = p.k_off + ((kv_row0 + j) * p.KVH + kvh) * p.D;
        [[unroll]] for (uint i = 0u; i < 4u; i++) if (d + i < p.D) v4[i] = HN_LOAD(kw, KVDT, base + d + i);
      }
      ks[jj * SD4 + d / 4u] = v4;
    }
    for (uint e = tid; e < BJ * p.Dv; e += 128u) {
      uint jj = e / p.Dv, d = e % p.Dv, j = j0 + jj;
      vs[jj * DMAX + d] = j < n_keys ? HN_LOAD(vw, KVDT, p.v_off + ((kv_row0 + j) * p.KVH + kvh) * p.Dv + d) : 0.0;
    }
    barrier();
    [[unroll]] for (uint u = 0u; u < 2u; u++) {
      uint jj = c + u * 8u, j = j0 + jj;
      float s = HN_NEG_INF;
      bool visible = live && j < n_keys && !(p.causal != 0u && int(j) > pos) &&
                     !hn_window_hides(p.window, int(j), pos);
      if (visible) {
        vec4 d4 = vec4(0.0);
        for (uint d = 0u; d < D4; d++) d4 = fma(qs[r * SD4 + d], ks[jj * SD4 + d], d4);
        s = (d4.x + d4.y + d4.z + d4.w) * p.scale;
        if (p.softcap > 0.0) s = p.softcap * hn_tanh(s / p.softcap);
        if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
        if ((p.flags & 2u) != 0u) s += mask[mrow + j];
      }
      ss[r * (BJ + 1u) + jj] = s;
    }
    barrier();
    float bm = HN_NEG_INF;
    [[unroll]] for (uint jj = 0u; jj < BJ; jj++) bm = max(bm, ss[r * (BJ + 1u) + jj]);
    float m_new = max(m_run, bm);
    if (m_new != HN_NEG_INF) {  // else this row sees nothing yet
      float corr = m_run == HN_NEG_INF ? 0.0 : exp(m_run - m_new);
      l_run *= corr;
      [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) acc[i] *= corr;
      [[unroll]] for (uint jj = 0u; jj < BJ; jj++) {
        float sj = ss[r * (BJ + 1u) + jj];
        float pj = sj == HN_NEG_INF ? 0.0 : exp(sj - m_new);
        l_run += pj;
        [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
          uint d = c + i * 8u;
          if (d < p.Dv) acc[i] = fma(pj, vs[jj * DMAX + d], acc[i]);
        }
      }
      m_run = m_new;
    }
  }
  if (!live) return;
  uint ob = p.o_off + ((b * p.T + t) * p.H + h) * p.Dv;
  float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  [[unroll]] for (uint i = 0u; i < DMAX / 8u; i++) {
    uint d = c + i * 8u;
    if (d < p.Dv) o[ob + d] = acc[i] * inv;
  }
}
