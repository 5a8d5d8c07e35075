#version 450
#extension GL_GOOGLE_include_directive : require
// Split-K decode attention by KV head: one workgroup of 64 per (KV head,
// query, batch x split) takes the G = H / KVH query heads that share the KV
// head (G <= 8), so each key and value row is read once for all of them.
// Keys in blocks of 64: each invocation scores one key against the G
// queries (vector loads of the key row), one barrier publishes the scores,
// then each invocation owns output dims d = tid, tid + 64, ... of all G
// heads and walks the block's keys itself (every invocation recomputes the
// block maxima and the exponentials from shared memory, so no reduction
// and no further barrier), the running softmax carried across blocks.
// Writes (max, sum, acc[Dv]) per (b, t, h, split) for attention_merge.comp,
// in attention.comp's split layout; same push constants and bindings.
// K/V dtype f32/f16/bf16 (spec constant 0). VEC (spec constant 1): D, the
// offsets and rows in multiples of 4 (f32) or 8 (16-bit) elements, key
// rows read as uvec4.
// ROPE (spec constant 2) = 1: the decode step's rope and cache writes too
// (one query, f32 caches): q is rotated as it is read (q itself is left as
// it is), and the workgroup whose split holds the new key row (pos0) rotates
// the new key (binding 7) and copies the new value (binding 8) into the
// caches (bindings 11, 12: the same tensors as 1 and 2), scoring that row
// from shared memory. Positions binding 9, inverse frequencies binding 10;
// the same math as rope_kv.comp.
// MERGE (spec constant 3) = 1: the last workgroup of each (KV head, query,
// batch) to finish (a counter per group, binding 13, zero before and left
// zero) merges the splits as attention_merge.comp does into binding 14.
// Push constants as attention.comp's, except: causal is flags & 32, the
// causal slot holds the counters' offset and lse_off the output's.
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(constant_id = 1) const uint VEC = 0;
layout(constant_id = 2) const uint ROPE = 0;
layout(constant_id = 3) const uint MERGE = 0;
layout(constant_id = 4) const uint GMAX = 8;  // >= G (host: the next power of two), <= 8
layout(constant_id = 5) const uint NI = 4;    // output dims per invocation and head: ceil(Dv / 64), <= 4
layout(constant_id = 6) const uint KB = 8;    // key loads (uvec4) in flight per invocation
layout(constant_id = 7) const uint VB = 8;    // value rows loaded before use
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 1) readonly buffer K4 { uvec4 kw4[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 3) readonly buffer S { float slopes[]; };
layout(std430, binding = 4) readonly buffer Mk { float mask[]; };
layout(std430, binding = 5) coherent buffer O { float o[]; };
layout(std430, binding = 6) readonly buffer Dyn { int dyn[]; };
layout(std430, binding = 7) readonly buffer KN { float kn[]; };
layout(std430, binding = 8) readonly buffer VN { float vn[]; };
layout(std430, binding = 9) readonly buffer Pos { int rpos[]; };
layout(std430, binding = 10) readonly buffer F { float inv_freq[]; };
layout(std430, binding = 11) writeonly buffer Kc { float kc[]; };
layout(std430, binding = 12) writeonly buffer Vc { float vc[]; };
layout(std430, binding = 13) coherent buffer Cnt { uint cnt[]; };
layout(std430, binding = 14) writeonly buffer Out { float outv[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint n_ctx; uint n_kv;
  int pos0; uint window; uint cnt_off; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint s_off; uint m_off;
  uint flags;  // 1 = alibi slopes, 2 = mask, 4 = sinks (in the slopes binding), 8 = pos0 from binding 6, 32 = causal
  uint mask_B; uint mask_T; uint mask_cols;
  uint chunk; uint n_split; uint dyn_off; uint out_off;
  uint rope_rs;  // rot_dims | style << 16 (0 NeoX, 1 GPT-J)
  float rope_scale; uint kn_off; uint vn_off; uint p_off; uint f_off;
} p;

shared float qs[8 * 256];  // [g][d]
shared float sc[8 * 64];   // [g][key of the block]
shared float knew[256], vnew[256];
shared bool last_s;

// cos, sin of the position times inv_freq[kk] (Cody-Waite reduction as rope.comp)
vec2 rot_cs(uint kk) {
  float ang = float(rpos[p.p_off]) * inv_freq[p.f_off + kk];
  float r0 = round(ang * 0.15915494309189535);
  float r = (ang - r0 * 6.28125) - r0 * 1.9353071795864769253e-3;
  return vec2(cos(r), sin(r)) * p.rope_scale;
}

// element d of a rotated head whose elements are BUF[base + e]: ya = xa c - xb s, yb = xb c + xa s
#define ROTATED(BUF, base, d, out) {                                                    \
    uint rot_ = p.rope_rs & 0xffffu, half_ = rot_ / 2u;                              \
    float v_ = BUF[(base) + (d)];                                                      \
    if ((d) < rot_) {                                                                \
      bool first_; uint kk_, partner_;                                               \
      if ((p.rope_rs >> 16) == 0u) {                                                 \
        first_ = (d) < half_; kk_ = first_ ? (d) : (d) - half_;                      \
        partner_ = first_ ? (d) + half_ : (d) - half_;                               \
      } else {                                                                       \
        first_ = ((d) & 1u) == 0u; kk_ = (d) / 2u; partner_ = (d) ^ 1u;              \
      }                                                                              \
      float o_ = BUF[(base) + partner_];                                               \
      vec2 cs_ = rot_cs(kk_);                                                        \
      v_ = first_ ? v_ * cs_.x - o_ * cs_.y : v_ * cs_.x + o_ * cs_.y;               \
    }                                                                                \
    out = v_;                                                                        \
  }

// 8 (16-bit) or 4 (f32) key elements of one uvec4 against q of head g from element d
float dotk(uvec4 w, uint g, uint d) {
  uint b = g * 256u + d;
  if (KVDT == HN_DT_F32) {
    vec4 kv = uintBitsToFloat(w);
    return dot(kv, vec4(qs[b], qs[b + 1u], qs[b + 2u], qs[b + 3u]));
  }
  vec4 lo, hi;
  if (KVDT == HN_DT_F16) {
    lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
  } else {
    lo = vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u),
              uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u));
    hi = vec4(uintBitsToFloat(w.z << 16), uintBitsToFloat(w.z & 0xffff0000u),
              uintBitsToFloat(w.w << 16), uintBitsToFloat(w.w & 0xffff0000u));
  }
  return dot(lo, vec4(qs[b], qs[b + 1u], qs[b + 2u], qs[b + 3u])) +
         dot(hi, vec4(qs[b + 4u], qs[b + 5u], qs[b + 6u], qs[b + 7u]));
}

void main() {
  uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint split = b % p.n_split;
  b /= p.n_split;
  uint tid = gl_LocalInvocationID.x;
  uint G = p.H / p.KVH;
  int pos0 = p.pos0;
  uint n_kv = p.n_kv;
  if ((p.flags & 8u) != 0u) {
    pos0 = dyn[p.dyn_off];
    n_kv = uint(clamp(pos0 + int(p.T), 0, int(p.n_ctx)));
  }
  int pos = pos0 + int(t);
  uint h0 = kvh * G;  // first query head of the group
  uint qb = p.q_off + ((b * p.T + t) * p.H + h0) * p.D;
  if (ROPE != 0u) {
    for (uint i = tid; i < G * p.D; i += 64u) {
      uint g = i / p.D, d = i % p.D;
      float v;
      ROTATED(q, qb + g * p.D, d, v);
      qs[g * 256u + d] = v;
    }
  } else {
    for (uint i = tid; i < G * p.D; i += 64u) qs[(i / p.D) * 256u + i % p.D] = q[qb + i];
  }
  // ROPE: the split holding the new row writes it into the caches and keeps it in shared memory
  uint row = uint(pos0);
  bool new_here = ROPE != 0u && pos0 >= 0 && row < p.n_ctx && row / p.chunk == split;
  if (new_here) {
    uint kb = p.kn_off + kvh * p.D;
    for (uint d = tid; d < p.D; d += 64u) {
      float v;
      ROTATED(kn, kb, d, v);
      knew[d] = v;
      kc[p.k_off + (row * p.KVH + kvh) * p.D + d] = v;
    }
    for (uint d = tid; d < p.Dv; d += 64u) {
      float v = vn[p.vn_off + kvh * p.Dv + d];
      vnew[d] = v;
      vc[p.v_off + (row * p.KVH + kvh) * p.Dv + d] = v;
    }
  }
  uint mrow = 0u;
  if ((p.flags & 2u) != 0u) {
    uint mb = p.mask_B == 1u ? 0u : b;
    uint mt = p.mask_T == 1u ? 0u : t;
    mrow = p.m_off + (mb * p.mask_T + mt) * p.mask_cols;
  }
  float m_run[GMAX], l_run[GMAX], acc[NI][GMAX];
  [[unroll]] for (uint g = 0u; g < GMAX; g++) {
    m_run[g] = HN_NEG_INF;
    l_run[g] = 0.0;
    // A sink is one more score with no value: it starts the running softmax (once, in split 0).
    if (g < G && (p.flags & 4u) != 0u && split == 0u) { m_run[g] = slopes[p.s_off + h0 + g]; l_run[g] = 1.0; }
    [[unroll]] for (uint i = 0u; i < NI; i++) acc[i][g] = 0.0;
  }
  uint kv_row0 = b * p.n_ctx;
  // Keys past the causal limit never contribute: stop there.
  uint n_keys = n_kv;
  if ((p.flags & 32u) != 0u) n_keys = uint(clamp(pos + 1, 0, int(n_kv)));
  uint j_begin = split * p.chunk;
  n_keys = min(n_keys, j_begin + p.chunk);
  barrier();  // qs
  for (uint j0 = j_begin; j0 < n_keys; j0 += 64u) {
    uint j = j0 + tid;
    float s[GMAX];
    [[unroll]] for (uint g = 0u; g < GMAX; g++) s[g] = 0.0;
    bool vis = j < n_keys && !hn_window_hides(p.window, int(j), pos);
    if (vis && new_here && j == row) {
      for (uint d = 0u; d < p.D; d++) {
        float kv = knew[d];
        [[unroll]] for (uint g = 0u; g < GMAX; g++)
          if (g < G) s[g] = fma(qs[g * 256u + d], kv, s[g]);
      }
    } else if (vis) {
      uint kb = p.k_off + ((kv_row0 + j) * p.KVH + kvh) * p.D;
      if (VEC != 0u) {
        // KB loads of the row in flight, then their dot products
        uint epu = KVDT == HN_DT_F32 ? 4u : 8u;
        for (uint d0 = 0u; d0 < p.D; d0 += KB * epu) {
          uvec4 w[KB];
          [[unroll]] for (uint u = 0u; u < KB; u++) {
            uint d = d0 + u * epu;
            w[u] = d < p.D ? kw4[(kb + d) / epu] : uvec4(0u);
          }
          [[unroll]] for (uint u = 0u; u < KB; u++) {
            uint d = d0 + u * epu;
            if (d < p.D)
              [[unroll]] for (uint g = 0u; g < GMAX; g++)
                if (g < G) s[g] += dotk(w[u], g, d);
          }
        }
      } else {
        for (uint d = 0u; d < p.D; d++) {
          float kv = HN_LOAD(kw, KVDT, kb + d);
          [[unroll]] for (uint g = 0u; g < GMAX; g++)
            if (g < G) s[g] = fma(qs[g * 256u + d], kv, s[g]);
        }
      }
    }
    [[unroll]] for (uint g = 0u; g < GMAX; g++) {
      if (g >= G) break;
      float v = HN_NEG_INF;
      if (vis) {
        v = s[g] * p.scale;
        if (p.softcap > 0.0) v = p.softcap * hn_tanh(v / p.softcap);
        if ((p.flags & 1u) != 0u) v += slopes[p.s_off + h0 + g] * float(int(j) - pos);
        if ((p.flags & 2u) != 0u) v += mask[mrow + j];
      }
      sc[g * 64u + tid] = v;
    }
    barrier();
    uint nj = min(64u, n_keys - j0);
    float m_new[GMAX], corr[GMAX];
    [[unroll]] for (uint g = 0u; g < GMAX; g++) {
      m_new[g] = m_run[g];
      corr[g] = 1.0;
      if (g >= G) continue;
      float bm = HN_NEG_INF;
      for (uint jj = 0u; jj < nj; jj++) bm = max(bm, sc[g * 64u + jj]);
      m_new[g] = max(m_run[g], bm);
      corr[g] = m_run[g] == HN_NEG_INF ? (m_new[g] == HN_NEG_INF ? 1.0 : 0.0) : exp(m_run[g] - m_new[g]);
      l_run[g] *= corr[g];
      [[unroll]] for (uint i = 0u; i < NI; i++) acc[i][g] *= corr[g];
    }
    uint vrow = p.v_off + ((kv_row0 + j0) * p.KVH + kvh) * p.Dv;
    uint vstride = p.KVH * p.Dv;
    // VB keys' values loaded before use (the loads of a key are independent of the others)
    for (uint j8 = 0u; j8 < nj; j8 += VB) {
      float vv[VB][NI];
      [[unroll]] for (uint u = 0u; u < VB; u++)
        [[unroll]] for (uint i = 0u; i < NI; i++) {
          uint d = tid + i * 64u;
          bool nv = new_here && j0 + j8 + u == row;
          vv[u][i] = d < p.Dv && j8 + u < nj ? (nv ? vnew[d] : HN_LOAD(vw, KVDT, vrow + (j8 + u) * vstride + d)) : 0.0;
        }
      [[unroll]] for (uint u = 0u; u < VB; u++) {
        if (j8 + u >= nj) break;
        [[unroll]] for (uint g = 0u; g < GMAX; g++) {
          if (g >= G) break;
          float sv = sc[g * 64u + j8 + u];
          float pj = sv == HN_NEG_INF ? 0.0 : exp(sv - m_new[g]);
          l_run[g] += pj;
          [[unroll]] for (uint i = 0u; i < NI; i++) acc[i][g] = fma(pj, vv[u][i], acc[i][g]);
        }
      }
    }
    [[unroll]] for (uint g = 0u; g < GMAX; g++) m_run[g] = m_new[g];
    barrier();  // sc is rewritten by the next block
  }
  [[unroll]] for (uint g = 0u; g < GMAX; g++) {
    if (g >= G) break;
    uint sb = p.o_off + (((b * p.T + t) * p.H + h0 + g) * p.n_split + split) * (p.Dv + 2u);
    if (tid == 0u) { o[sb] = m_run[g]; o[sb + 1u] = l_run[g]; }
    [[unroll]] for (uint i = 0u; i < NI; i++) {
      uint d = tid + i * 64u;
      if (d < p.Dv) o[sb + 2u + d] = acc[i][g];
    }
  }
  if (MERGE == 0u) return;
  // the last split of this group to finish merges all of them
  memoryBarrierBuffer();
  barrier();
  uint ci = p.cnt_off + (b * p.T + t) * p.KVH + kvh;
  if (tid == 0u) last_s = atomicAdd(cnt[ci], 1u) == p.n_split - 1u;
  barrier();
  if (!last_s) return;
  memoryBarrierBuffer();
  for (uint g = 0u; g < G; g++) {
    uint hrow = (b * p.T + t) * p.H + h0 + g;
    uint base = p.o_off + hrow * p.n_split * (p.Dv + 2u);
    float m = HN_NEG_INF;
    for (uint s2 = 0u; s2 < p.n_split; s2++) m = max(m, o[base + s2 * (p.Dv + 2u)]);
    float l = 0.0;
    if (m != HN_NEG_INF)
      for (uint s2 = 0u; s2 < p.n_split; s2++) {
        float ms = o[base + s2 * (p.Dv + 2u)];
        if (ms != HN_NEG_INF) l += o[base + s2 * (p.Dv + 2u) + 1u] * exp(ms - m);
      }
    float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint d = tid; d < p.Dv; d += 64u) {
      float a = 0.0;
      if (m != HN_NEG_INF)
        for (uint s2 = 0u; s2 < p.n_split; s2++) {
          uint sb = base + s2 * (p.Dv + 2u);
          float ms = o[sb];
          if (ms != HN_NEG_INF) a += o[sb + 2u + d] * exp(ms - m);
        }
      outv[p.out_off + hrow * p.Dv + d] = a * inv;
    }
  }
  if (tid == 0u) cnt[ci] = 0u;  // ready for the next dispatch
}
