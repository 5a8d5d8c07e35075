#version 450
#extension GL_GOOGLE_include_directive : require
// Split-K decode attention by KV head, built for latency: one workgroup of
// 128 per (KV head, query, batch x split) takes the G = H / KVH query heads
// that share the KV head (G <= 8), over blocks of 64 keys of its split.
// attention_decode.comp walks the block's values one key after another in
// every invocation (64 dependent load rounds per block) and merges the
// splits with loops of dependent loads; here every load of a block is
// issued at once (the first block's before q is read and rotated, the next
// one's at the end of a block) and the rest is arithmetic on registers and
// shared memory:
//  - scores: 4 invocations per key, each a quarter of the row as 4-element
//    loads (all its chunks of the block's two halves in flight), the 4
//    partial dots summed through shared memory;
//  - values: invocation = (key lane, 4 output dims); each lane runs its own
//    online softmax over its keys (the values loaded before the scores are
//    final), and the lanes are combined once per split in shared memory;
//  - the merge (MERGE = 1, the last active split of the group to finish)
//    reads every split's max and sum in parallel and sums the partial rows
//    with independent loads.
// Splits past the last visible key do nothing (with MERGE) or write an
// empty partial (max -inf) for attention_merge.comp.
// Same bindings and push constants as attention_decode.comp (ROPE, MERGE,
// the new row, sinks, ALiBi, mask, softcap, window), same partial layout.
// Spec constants: 0 KVDT (f32/f16/bf16), 1 VEC (D, Dv and the K/V offsets
// multiples of 4: rows read as uvec4 (f32) or uvec2 (16-bit)), 2 ROPE,
// 3 MERGE, 4 GMAX (>= G, a power of two <= 8), 5 CPL (4-element chunks of
// a key row per invocation: ceil(D / 16)), 6 DVP (ceil(Dv / 4) rounded up
// to a power of two, <= 64).
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(constant_id = 1) const uint VEC = 0;
layout(constant_id = 2) const uint ROPE = 0;
layout(constant_id = 3) const uint MERGE = 0;
layout(constant_id = 4) const uint GMAX = 8;
layout(constant_id = 5) const uint CPL = 4;
layout(constant_id = 6) const uint DVP = 16;
const uint VL = 128u / DVP;       // key lanes of the value phase
const uint KPL = 64u / VL;        // keys per lane and block
const uint VBN = KPL < 16u ? KPL : 16u;  // value rows loaded at once
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 1) readonly buffer K4 { uvec4 kw4[]; };
layout(std430, binding = 1) readonly buffer K2 { uvec2 kw2[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 2) readonly buffer V4 { uvec4 vw4[]; };
layout(std430, binding = 2) readonly buffer V2 { uvec2 vw2[]; };
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

shared vec4 qs[8 * 64];           // [g][4-element chunk of D]
shared float red[64 * 8 * 4];     // [key][g][lane]: partial dots
shared float sc[8 * 64];          // [g][key of the block]
shared vec4 accs[128 * 8];        // [key lane][g][chunk of Dv]
shared vec2 mls[64 * 8];          // [key lane][g]: (max, sum)
shared float knew[256];
shared float gm[8], gl[8];        // merge: per head the max and 1 / sum
shared bool last_s;

vec2 rot_cs(uint kk) {
  float ang = float(rpos[p.p_off]) * inv_freq[p.f_off + kk];
  float r0 = round(ang * 0.15915494309189535);
  float r = (ang - r0 * 6.28125) - r0 * 1.9353071795864769253e-3;
  return vec2(cos(r), sin(r)) * p.rope_scale;
}

// element d of a rotated head whose elements are BUF[base + e] (as attention_decode.comp)
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

vec4 unpack16(uvec2 w) {
  if (KVDT == HN_DT_F16) return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  return vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u),
              uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u));
}

// elements e .. e + 3 of K (IS_K) or V, those from `lim` on as 0
vec4 load4(bool is_k, uint e, uint lim) {
  if (VEC != 0u) {
    if (KVDT == HN_DT_F32) return uintBitsToFloat(is_k ? kw4[e / 4u] : vw4[e / 4u]);
    return unpack16(is_k ? kw2[e / 4u] : vw2[e / 4u]);
  }
  vec4 r = vec4(0.0);
  [[unroll]] for (uint i = 0u; i < 4u; i++)
    if (e + i < lim) r[i] = is_k ? HN_LOAD(kw, KVDT, e + i) : HN_LOAD(vw, KVDT, e + i);
  return r;
}

// value chunk c (4 elements) of key j of the block at vbase; the new row (ROPE) from binding 8,
// since the cache row is written by this dispatch
vec4 vload(uint vbase, uint jj, uint c, bool newrow) {
  if (ROPE != 0u && newrow) {
    vec4 r = vec4(0.0);
    uint kvh = gl_WorkGroupID.x;
    [[unroll]] for (uint i = 0u; i < 4u; i++)
      if (4u * c + i < p.Dv) r[i] = vn[p.vn_off + kvh * p.Dv + 4u * c + i];
    return r;
  }
  uint rb = vbase + jj * p.KVH * p.Dv;
  return load4(false, rb + 4u * c, rb + p.Dv);
}

// the K and V registers of the block from key J0: kr[h][i] = chunk lane + 4i of key J0 + 32h + kk,
// vr[u] = chunk vc4 of key J0 + kl + u VL (the first VBN of the lane's keys)
#define LOAD_BLOCK(J0) {                                                                          \
    uint kb_ = p.k_off + ((kv_row0 + (J0)) * p.KVH + kvh) * p.D;                                  \
    uint vb_ = p.v_off + ((kv_row0 + (J0)) * p.KVH + kvh) * p.Dv;                                 \
    [[unroll]] for (uint h = 0u; h < 2u; h++) {                                                   \
      uint jj_ = h * 32u + kk, rb_ = kb_ + jj_ * kstride;                                         \
      [[unroll]] for (uint i = 0u; i < CPL; i++) {                                                \
        uint c = lane + 4u * i;                                                                   \
        kr[h][i] = (J0) + jj_ < j_end && c < DC ? load4(true, rb_ + 4u * c, rb_ + p.D) : vec4(0.0); \
      }                                                                                           \
    }                                                                                             \
    [[unroll]] for (uint u = 0u; u < VBN; u++) {                                                  \
      uint j = (J0) + kl + u * VL;                                                                \
      vr[u] = vown && j < j_end ? vload(vb_, j - (J0), vc4, new_here && j == row) : vec4(0.0);    \
    }                                                                                             \
  }

void main() {
  uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint split = b % p.n_split;
  b /= p.n_split;
  uint tid = gl_LocalInvocationID.x;
  uint G = p.H / p.KVH;
  uint h0 = kvh * G;
  int pos0 = p.pos0;
  uint n_kv = p.n_kv;
  if ((p.flags & 8u) != 0u) {
    pos0 = dyn[p.dyn_off];
    n_kv = uint(clamp(pos0 + int(p.T), 0, int(p.n_ctx)));
  }
  int pos = pos0 + int(t);
  uint n_keys = n_kv;
  if ((p.flags & 32u) != 0u) n_keys = uint(clamp(pos + 1, 0, int(n_kv)));
  // the splits holding keys (at least one, which writes the output)
  uint n_act = max((n_keys + p.chunk - 1u) / p.chunk, 1u);
  uint rowg = (b * p.T + t) * p.H + h0;  // first (b, t, head) row of the group
  if (split >= n_act) {
    if (MERGE == 0u && tid < G) o[p.o_off + ((rowg + tid) * p.n_split + split) * (p.Dv + 2u)] = HN_NEG_INF;
    return;
  }
  uint DC = (p.D + 3u) / 4u, DVC = (p.Dv + 3u) / 4u;
  uint row = uint(pos0);
  bool new_here = ROPE != 0u && pos0 >= 0 && row < p.n_ctx && row / p.chunk == split;
  // score phase: key kk (+ 32) of the block, chunks lane, lane + 4, ...
  uint lane = tid & 3u, kk = tid >> 2;
  // value phase: key lane kl (keys kl, kl + VL, ...), output chunk vc4
  uint vc4 = tid % DVP, kl = tid / DVP;
  bool vown = vc4 < DVC;
  uint kv_row0 = b * p.n_ctx;
  uint j_begin = split * p.chunk;
  uint j_end = min(n_keys, j_begin + p.chunk);
  uint kstride = p.KVH * p.D;
  // the first block's loads go out before q is read and rotated
  vec4 kr[2][CPL], vr[VBN];
  if (j_begin < j_end) LOAD_BLOCK(j_begin);
  uint qb = p.q_off + (b * p.T + t) * p.H * p.D + h0 * p.D;
  for (uint i = tid; i < G * p.D; i += 128u) {
    uint g = i / p.D, d = i % p.D;
    float v;
    if (ROPE != 0u) { ROTATED(q, qb + g * p.D, d, v); } else v = q[qb + i];
    qs[g * 64u + d / 4u][d % 4u] = v;
  }
  // zero the tail of the last chunk so 4-element dots need no bound
  if (tid < G && p.D % 4u != 0u)
    for (uint d = p.D; d < DC * 4u; d++) qs[tid * 64u + d / 4u][d % 4u] = 0.0;
  if (new_here) {
    uint kb = p.kn_off + kvh * p.D;
    for (uint d = tid; d < p.D; d += 128u) {
      float v;
      ROTATED(kn, kb, d, v);
      knew[d] = v;
      kc[p.k_off + (row * p.KVH + kvh) * p.D + d] = v;
    }
    for (uint d = tid; d < p.Dv; d += 128u) vc[p.v_off + (row * p.KVH + kvh) * p.Dv + d] = vn[p.vn_off + kvh * p.Dv + d];
  }
  uint mrow = 0u;
  if ((p.flags & 2u) != 0u) {
    uint mb = p.mask_B == 1u ? 0u : b;
    uint mt = p.mask_T == 1u ? 0u : t;
    mrow = p.m_off + (mb * p.mask_T + mt) * p.mask_cols;
  }
  float m_loc[GMAX], l_loc[GMAX];
  vec4 acc[GMAX];
  [[unroll]] for (uint g = 0u; g < GMAX; g++) {
    m_loc[g] = HN_NEG_INF;
    l_loc[g] = 0.0;
    acc[g] = vec4(0.0);
    // a sink: one more score with no value, once per head (split 0, key lane 0)
    if (g < G && (p.flags & 4u) != 0u && split == 0u && kl == 0u) { m_loc[g] = slopes[p.s_off + h0 + g]; l_loc[g] = 1.0; }
  }
  for (uint j0 = j_begin; j0 < j_end; j0 += 64u) {
    uint vbase = p.v_off + ((kv_row0 + j0) * p.KVH + kvh) * p.Dv;
    if (j0 == j_begin) barrier();  // qs, knew
    [[unroll]] for (uint h = 0u; h < 2u; h++)
      [[unroll]] for (uint g = 0u; g < GMAX; g++) {
        if (g >= G) break;
        float s = 0.0;
        [[unroll]] for (uint i = 0u; i < CPL; i++) {
          uint c = lane + 4u * i;
          if (c < DC) s += dot(kr[h][i], qs[g * 64u + c]);
        }
        red[((h * 32u + kk) * 8u + g) * 4u + lane] = s;
      }
    barrier();
    for (uint i = tid; i < G * 64u; i += 128u) {
      uint g = i / 64u, jj = i % 64u, j = j0 + jj;
      float v = HN_NEG_INF;
      if (j < j_end && !hn_window_hides(p.window, int(j), pos)) {
        uint r = (jj * 8u + g) * 4u;
        float s = (red[r] + red[r + 1u]) + (red[r + 2u] + red[r + 3u]);
        if (new_here && j == row) {
          s = 0.0;
          for (uint d = 0u; d < p.D; d++) s = fma(qs[g * 64u + d / 4u][d % 4u], knew[d], s);
        }
        v = s * p.scale;
        if (p.softcap > 0.0) v = p.softcap * hn_tanh(v / p.softcap);
        if ((p.flags & 1u) != 0u) v += slopes[p.s_off + h0 + g] * float(int(j) - pos);
        if ((p.flags & 2u) != 0u) v += mask[mrow + j];
      }
      sc[g * 64u + jj] = v;
    }
    barrier();
    for (uint u0 = 0u; u0 < KPL; u0 += VBN) {
      if (u0 > 0u)
        [[unroll]] for (uint u = 0u; u < VBN; u++) {
          uint j = j0 + kl + (u0 + u) * VL;
          vr[u] = vown && j < j_end ? vload(vbase, j - j0, vc4, new_here && j == row) : vec4(0.0);
        }
      [[unroll]] for (uint g = 0u; g < GMAX; g++) {
        if (g >= G) break;
        float bm = HN_NEG_INF;
        [[unroll]] for (uint u = 0u; u < VBN; u++) bm = max(bm, sc[g * 64u + kl + (u0 + u) * VL]);
        if (bm == HN_NEG_INF) continue;
        float mn = max(m_loc[g], bm);
        float corr = m_loc[g] == HN_NEG_INF ? 0.0 : exp(m_loc[g] - mn);
        l_loc[g] *= corr;
        acc[g] *= corr;
        [[unroll]] for (uint u = 0u; u < VBN; u++) {
          float sv = sc[g * 64u + kl + (u0 + u) * VL];
          float pj = sv == HN_NEG_INF ? 0.0 : exp(sv - mn);
          l_loc[g] += pj;
          acc[g] = fma(vec4(pj), vr[u], acc[g]);
        }
        m_loc[g] = mn;
      }
    }
    barrier();  // red and sc are rewritten by the next block
    if (j0 + 64u < j_end) LOAD_BLOCK(j0 + 64u);
  }
  // combine the key lanes: (max, sum, acc) of lane kl at mls[kl][g], accs[kl][g][chunk]
  [[unroll]] for (uint g = 0u; g < GMAX; g++) {
    if (g >= G) break;
    if (vc4 == 0u) mls[kl * 8u + g] = vec2(m_loc[g], l_loc[g]);
    accs[(kl * 8u + g) * DVP + vc4] = acc[g];
  }
  barrier();
  for (uint i = tid; i < G * DVC; i += 128u) {
    uint g = i / DVC, c = i % DVC;
    float m = HN_NEG_INF;
    [[unroll]] for (uint l = 0u; l < VL; l++) m = max(m, mls[l * 8u + g].x);
    float lsum = 0.0;
    vec4 a = vec4(0.0);
    if (m != HN_NEG_INF)
      [[unroll]] for (uint l = 0u; l < VL; l++) {
        vec2 ml = mls[l * 8u + g];
        float w = ml.x == HN_NEG_INF ? 0.0 : exp(ml.x - m);
        lsum += ml.y * w;
        a = fma(vec4(w), accs[(l * 8u + g) * DVP + c], a);
      }
    uint sb = p.o_off + ((rowg + g) * p.n_split + split) * (p.Dv + 2u);
    if (c == 0u) { o[sb] = m; o[sb + 1u] = lsum; }
    [[unroll]] for (uint e = 0u; e < 4u; e++)
      if (4u * c + e < p.Dv) o[sb + 2u + 4u * c + e] = a[e];
  }
  if (MERGE == 0u) return;
  // the last active split of this group to finish merges them
  memoryBarrierBuffer();
  barrier();
  uint ci = p.cnt_off + (b * p.T + t) * p.KVH + kvh;
  if (tid == 0u) last_s = atomicAdd(cnt[ci], 1u) == n_act - 1u;
  barrier();
  if (!last_s) return;
  memoryBarrierBuffer();
  uint ps = p.Dv + 2u;
  // every split's (max, sum) at once into accs[g][split] (n_act <= 128 by the host's plan)
  for (uint i = tid; i < G * n_act; i += 128u) {
    uint g = i / n_act, s2 = i % n_act;
    uint sb = p.o_off + ((rowg + g) * p.n_split + s2) * ps;
    accs[g * 128u + s2] = vec4(o[sb], o[sb + 1u], 0.0, 0.0);
  }
  barrier();
  if (tid < G) {
    float m = HN_NEG_INF;
    for (uint s2 = 0u; s2 < n_act; s2++) m = max(m, accs[tid * 128u + s2].x);
    float l = 0.0;
    if (m != HN_NEG_INF)
      for (uint s2 = 0u; s2 < n_act; s2++) {
        vec4 e = accs[tid * 128u + s2];
        if (e.x != HN_NEG_INF) l += e.y * exp(e.x - m);
      }
    gm[tid] = m;
    gl[tid] = l > 0.0 ? 1.0 / l : 0.0;
  }
  barrier();
  for (uint i = tid; i < G * n_act; i += 128u) {
    uint g = i / n_act, s2 = i % n_act;
    float ms = accs[g * 128u + s2].x;
    accs[g * 128u + s2].z = ms == HN_NEG_INF ? 0.0 : exp(ms - gm[g]) * gl[g];
  }
  barrier();
  // the output rows: independent loads of every split's partial chunk
  for (uint i = tid; i < G * DVC; i += 128u) {
    uint g = i / DVC, c = i % DVC;
    vec4 a = vec4(0.0);
    for (uint s2 = 0u; s2 < n_act; s2++) {
      float w = accs[g * 128u + s2].z;
      if (w == 0.0) continue;
      uint sb = p.o_off + ((rowg + g) * p.n_split + s2) * ps + 2u + 4u * c;
      [[unroll]] for (uint e = 0u; e < 4u; e++)
        if (4u * c + e < p.Dv) a[e] = fma(w, o[sb + e], a[e]);
    }
    [[unroll]] for (uint e = 0u; e < 4u; e++)
      if (4u * c + e < p.Dv) outv[p.out_off + (rowg + g) * p.Dv + 4u * c + e] = a[e];
  }
  if (tid == 0u) cnt[ci] = 0u;  // ready for the next dispatch
}
