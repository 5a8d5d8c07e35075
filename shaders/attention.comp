#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over a K/V cache, one workgroup per (head, query, batch), keys
// in blocks of 64 with an online softmax (flash-decoding style): each
// invocation scores one key of the block, then owns Dv/64 output dims.
// K/V dtype f32/f16/bf16 via spec constant 0. D, Dv <= 256.
// SPLIT (spec constant 1) = 1: split-K for decode; workgroup z is
// b * n_split + split and covers keys [split * chunk, + chunk); binding 5
// is then f32 scratch getting (max, sum, acc[Dv]) per (b, t, h, split),
// combined by attention_merge.comp.
// flags & 8: pos0 is read from binding 6 (i32) and n_kv = pos0 + T, so one
// recorded decode step serves every position.
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(constant_id = 1) const uint SPLIT = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 3) readonly buffer S { float slopes[]; };
layout(std430, binding = 4) readonly buffer Mk { float mask[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(std430, binding = 6) readonly buffer Dyn { int dyn[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint n_ctx; uint n_kv;
  int pos0; uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint s_off; uint m_off;
  uint flags;  // 1 = alibi slopes, 2 = mask, 4 = sinks (in the slopes binding), 8 = pos0 from binding 6
  uint mask_B; uint mask_T; uint mask_cols;
  uint chunk; uint n_split; uint dyn_off;
} p;

shared float qs[256];
shared float ps[64];
shared float red[64];

float wg_max64(float v) {
  uint t = gl_LocalInvocationID.x;
  red[t] = v; barrier();
  for (uint s = 32u; s > 0u; s >>= 1) { if (t < s) red[t] = max(red[t], red[t + s]); barrier(); }
  float r = red[0]; barrier(); return r;
}
float wg_sum64(float v) {
  uint t = gl_LocalInvocationID.x;
  red[t] = v; barrier();
  for (uint s = 32u; s > 0u; s >>= 1) { if (t < s) red[t] += red[t + s]; barrier(); }
  float r = red[0]; barrier(); return r;
}

void main() {
  uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint split = 0u;
  if (SPLIT != 0u) { split = b % p.n_split; b /= p.n_split; }
  uint tid = gl_LocalInvocationID.x;
  uint kvh = h / (p.H / p.KVH);
  int pos0 = p.pos0;
  uint n_kv = p.n_kv;
  if ((p.flags & 8u) != 0u) {
    pos0 = dyn[p.dyn_off];
    n_kv = uint(clamp(pos0 + int(p.T), 0, int(p.n_ctx)));
  }
  int pos = pos0 + int(t);
  uint qb = p.q_off + ((b * p.T + t) * p.H + h) * p.D;
  for (uint d = tid; d < p.D; d += 64u) qs[d] = q[qb + d];
  barrier();
  float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;  // binding 3: ALiBi slopes or sinks
  uint mrow = 0u;
  if ((p.flags & 2u) != 0u) {
    uint mb = p.mask_B == 1u ? 0u : b;
    uint mt = p.mask_T == 1u ? 0u : t;
    mrow = p.m_off + (mb * p.mask_T + mt) * p.mask_cols;
  }
  float m_run = HN_NEG_INF, l_run = 0.0;
  // A sink is one more score with no value: it starts the running softmax (once, in split 0).
  if ((p.flags & 4u) != 0u && split == 0u) { m_run = slopes[p.s_off + h]; l_run = 1.0; }
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  uint kv_row0 = b * p.n_ctx;
  // Keys past the causal limit never contribute: stop there.
  uint n_keys = n_kv;
  if (p.causal != 0u) n_keys = uint(clamp(pos + 1, 0, int(n_kv)));
  uint j_begin = 0u;
  if (SPLIT != 0u) { j_begin = split * p.chunk; n_keys = min(n_keys, j_begin + p.chunk); }
  for (uint j0 = j_begin; j0 < n_keys; j0 += 64u) {
    uint j = j0 + tid;
    float s = HN_NEG_INF;
    if (j < n_keys && !hn_window_hides(p.window, int(j), pos)) {
      uint kb = p.k_off + ((kv_row0 + j) * p.KVH + kvh) * p.D;
      float dot = 0.0;
      for (uint d = 0u; d < p.D; d++) dot = fma(qs[d], HN_LOAD(kw, KVDT, kb + d), dot);
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * hn_tanh(s / p.softcap);
      if ((p.flags & 1u) != 0u) s += slope * float(int(j) - pos);
      if ((p.flags & 2u) != 0u) s += mask[mrow + j];
    }
    float bm = wg_max64(s);
    float m_new = max(m_run, bm);
    if (m_new == HN_NEG_INF) continue;  // uniform: everything hidden so far
    float pj = s == HN_NEG_INF ? 0.0 : exp(s - m_new);
    ps[tid] = pj;
    float corr = m_run == HN_NEG_INF ? 0.0 : exp(m_run - m_new);
    l_run = l_run * corr + wg_sum64(pj);  // the sum's barriers also publish ps
    m_run = m_new;
    uint nj = min(64u, n_keys - j0);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint d = tid + i * 64u;
      if (d >= p.Dv) break;
      float a = acc[i] * corr;
      for (uint jj = 0u; jj < nj; jj++) {
        float pv = ps[jj];
        if (pv != 0.0) a = fma(pv, HN_LOAD(vw, KVDT, p.v_off + ((kv_row0 + j0 + jj) * p.KVH + kvh) * p.Dv + d), a);
      }
      acc[i] = a;
    }
    barrier();  // ps is rewritten by the next block
  }
  if (SPLIT != 0u) {
    uint sb = p.o_off + (((b * p.T + t) * p.H + h) * p.n_split + split) * (p.Dv + 2u);
    if (tid == 0u) { o[sb] = m_run; o[sb + 1u] = l_run; }
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint d = tid + i * 64u;
      if (d < p.Dv) o[sb + 2u + d] = acc[i];
    }
    return;
  }
  uint ob = p.o_off + ((b * p.T + t) * p.H + h) * p.Dv;
  float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  [[unroll]] for (uint i = 0u; i < 4u; i++) {
    uint d = tid + i * 64u;
    if (d < p.Dv) o[ob + d] = acc[i] * inv;
  }
}
