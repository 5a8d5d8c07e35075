#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary embedding of q (in place) and of the new keys, written straight into
// the f32 K cache, with the new values copied into the V cache: the decode
// step's rope + rope + cache writes in one dispatch. Invocations cover three
// ranges: q (row, k) pairs as rope.comp, then k (row, k) pairs, then v
// elements. Cache rows are row0 + t (dyn = 1: row0 read from binding 7);
// rows at or past n_ctx are dropped. tr: tokens per sequence; the T tokens
// are T / tr sequences whose caches follow one another (n_ctx rows each),
// token t going to sequence t / tr at row row0 + t % tr (a batched prefill).
// PAIRS = 1: the first range is (t, kk) instead, an invocation rotating pair
// kk of every q head and k head of token t (cos and sin formed once for
// them all, not once per head; host: HN_ROPE_KV_BY_PAIR=1 until measured).
#include "common.glsl"
layout(constant_id = 0) const uint PAIRS = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer Pos { int pos[]; };
layout(std430, binding = 4) readonly buffer F { float inv_freq[]; };
layout(std430, binding = 5) writeonly buffer Kc { float kc[]; };
layout(std430, binding = 6) writeonly buffer Vc { float vc[]; };
layout(std430, binding = 7) readonly buffer Dyn { int dyn[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint rot; uint q_off; uint k_off; uint v_off; uint p_off; uint f_off;
  uint kc_off; uint vc_off; uint style; float attn_scale; uint n_ctx; uint row0; uint dyn; uint dyn_off; uint tr;
} p;

// token t's cache row, counted from the first sequence's row 0; -1: dropped
int cache_row(int row0, uint t) {
  int r = row0 + int(t % p.tr);
  return r < 0 || r >= int(p.n_ctx) ? -1 : int(t / p.tr * p.n_ctx) + r;
}

// cos, sin of position * inv_freq[k] (Cody-Waite reduction as rope.comp)
vec2 rot_cs(uint t, uint kk) {
  float ang = float(pos[p.p_off + t]) * inv_freq[p.f_off + kk];
  float r0 = round(ang * 0.15915494309189535);
  float r = (ang - r0 * 6.28125) - r0 * 1.9353071795864769253e-3;
  return vec2(cos(r), sin(r)) * p.attn_scale;
}

// pair kk (< rot / 2) of the head whose D elements start at src rotated by
// cs, or element kk + rot / 2 (kk past the rotated pairs) passed through; q
// in place (dst unused), k into the cache at dst
void rope_one(bool is_q, uint src, uint dst, uint kk, uint half_rot, vec2 cs) {
  if (kk >= half_rot) {
    if (!is_q) kc[dst + kk + half_rot] = k[src + kk + half_rot];
    return;
  }
  uint a = p.style == 0u ? kk : 2u * kk;
  uint b = p.style == 0u ? kk + half_rot : 2u * kk + 1u;
  float xa = is_q ? q[src + a] : k[src + a], xb = is_q ? q[src + b] : k[src + b];
  float ya = xa * cs.x - xb * cs.y, yb = xb * cs.x + xa * cs.y;
  if (is_q) { q[src + a] = ya; q[src + b] = yb; }
  else { kc[dst + a] = ya; kc[dst + b] = yb; }
}

// element j of the new values (token j / (KVH * Dv)) into its cache row
void copy_v(int row0, uint j) {
  int crow = cache_row(row0, j / (p.KVH * p.Dv));
  if (crow >= 0) vc[p.vc_off + uint(crow) * p.KVH * p.Dv + j % (p.KVH * p.Dv)] = v[p.v_off + j];
}

void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  uint half_rot = p.rot / 2u, per_row = p.D - half_rot;
  if (PAIRS == 1u) {
    uint np = p.T * per_row, nv = p.T * p.KVH * p.Dv;
    if (i >= np + nv) return;
    int row0 = p.dyn != 0u ? dyn[p.dyn_off] : int(p.row0);
    if (i < np) {
      uint t = i / per_row, kk = i % per_row;
      vec2 cs = kk < half_rot ? rot_cs(t, kk) : vec2(1.0, 0.0);
      for (uint h = 0u; h < p.H; h++) {
        uint src = p.q_off + (t * p.H + h) * p.D;
        rope_one(true, src, src, kk, half_rot, cs);
      }
      int crow = cache_row(row0, t);
      if (crow < 0) return;
      for (uint h = 0u; h < p.KVH; h++)
        rope_one(false, p.k_off + (t * p.KVH + h) * p.D, p.kc_off + (uint(crow) * p.KVH + h) * p.D, kk, half_rot, cs);
      return;
    }
    copy_v(row0, i - np);
    return;
  }
  uint nq = p.T * p.H * per_row, nk = p.T * p.KVH * per_row, nv = p.T * p.KVH * p.Dv;
  if (i >= nq + nk + nv) return;
  int row0 = p.dyn != 0u ? dyn[p.dyn_off] : int(p.row0);
  if (i < nq + nk) {
    bool is_q = i < nq;
    uint j = is_q ? i : i - nq;
    uint row = j / per_row, kk = j % per_row;
    uint heads = is_q ? p.H : p.KVH;
    uint t = row / heads;
    int crow = cache_row(row0, t);
    if (!is_q && crow < 0) return;
    uint src = (is_q ? p.q_off : p.k_off) + row * p.D;
    // destination: q in place, k into its cache row ([n_ctx, KVH * D])
    uint dst = is_q ? src : p.kc_off + uint(crow) * p.KVH * p.D + (row % p.KVH) * p.D;
    rope_one(is_q, src, dst, kk, half_rot, kk < half_rot ? rot_cs(t, kk) : vec2(1.0, 0.0));
    return;
  }
  copy_v(row0, i - nq - nk);
}
