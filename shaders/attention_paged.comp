#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over a paged K/V cache (issue 10): the same online-softmax scheme
// as attention.comp, but key j of row b lives in physical row
// page_table[b][j / 16] * 16 + j % 16 of the arena, and each row has its own
// length (seq_lens[b]; its T queries are the last T positions).
// K/V dtype f32/f16/bf16 via spec constant 0. D, Dv <= 256.
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 3) readonly buffer PT { int page_table[]; };
layout(std430, binding = 4) readonly buffer SL { int seq_lens[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(std430, binding = 6) readonly buffer Sk { float sinks[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint max_pages;
  uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint pt_off; uint sl_off;
  uint has_sinks; uint s_off;
} p;

const uint PAGE = 16u;

shared float qs[256];
shared float ps[64];
shared uint prow[64];
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
  uint tid = gl_LocalInvocationID.x;
  uint kvh = h / (p.H / p.KVH);
  int n_kv = seq_lens[p.sl_off + b];
  int pos = n_kv - int(p.T) + int(t);
  uint ptb = p.pt_off + b * p.max_pages;
  uint qb = p.q_off + ((b * p.T + t) * p.H + h) * p.D;
  for (uint d = tid; d < p.D; d += 64u) qs[d] = q[qb + d];
  barrier();
  float m_run = HN_NEG_INF, l_run = 0.0;
  // A sink (gpt_oss) is one more score with no value: it starts the running softmax.
  if (p.has_sinks != 0u) { m_run = sinks[p.s_off + h]; l_run = 1.0; }
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  uint n_keys = uint(max(n_kv, 0));
  if (p.causal != 0u) n_keys = uint(clamp(pos + 1, 0, max(n_kv, 0)));
  for (uint j0 = 0u; j0 < n_keys; j0 += 64u) {
    uint j = j0 + tid;
    float s = HN_NEG_INF;
    uint row = 0u;
    if (j < n_keys) row = uint(page_table[ptb + j / PAGE]) * PAGE + j % PAGE;
    prow[tid] = row;
    if (j < n_keys && !hn_window_hides(p.window, int(j), pos)) {
      uint kb = p.k_off + (row * p.KVH + kvh) * p.D;
      float dot = 0.0;
      for (uint d = 0u; d < p.D; d++) dot = fma(qs[d], HN_LOAD(kw, KVDT, kb + d), dot);
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * hn_tanh(s / p.softcap);
    }
    float bm = wg_max64(s);
    float m_new = max(m_run, bm);
    if (m_new == HN_NEG_INF) continue;  // uniform: everything hidden so far
    float pj = s == HN_NEG_INF ? 0.0 : exp(s - m_new);
    ps[tid] = pj;
    float corr = m_run == HN_NEG_INF ? 0.0 : exp(m_run - m_new);
    l_run = l_run * corr + wg_sum64(pj);  // the sum's barriers also publish ps and prow
    m_run = m_new;
    uint nj = min(64u, n_keys - j0);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint d = tid + i * 64u;
      if (d >= p.Dv) break;
      float a = acc[i] * corr;
      for (uint jj = 0u; jj < nj; jj++) {
        float pv = ps[jj];
        if (pv != 0.0) a = fma(pv, HN_LOAD(vw, KVDT, p.v_off + (prow[jj] * p.KVH + kvh) * p.Dv + d), a);
      }
      acc[i] = a;
    }
    barrier();  // ps and prow are rewritten by the next block
  }
  uint ob = p.o_off + ((b * p.T + t) * p.H + h) * p.Dv;
  float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  [[unroll]] for (uint i = 0u; i < 4u; i++) {
    uint d = tid + i * 64u;
    if (d < p.Dv) o[ob + d] = acc[i] * inv;
  }
}
