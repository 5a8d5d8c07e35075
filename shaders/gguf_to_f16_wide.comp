#version 450
#extension GL_GOOGLE_include_directive : require
// gguf_to_f16.comp's job (a frozen weight W [rows, cols] in ggml blocks to its
// f16 form [rows, cols]) for Q4_K, Q6_K and Q8_0, laid out for the memory
// system (issue 23: the unit-per-invocation kernel ran at 1.6 TB/s on the
// H200). A weight's rows are whole blocks and W starts its binding (offset 0,
// which is 256-byte aligned), so the tensor is one flat run of blocks and
// element e of the output is element e of that run.
//
// An item is a few quant bytes of one block; adjacent invocations take
// adjacent items, so adjacent invocations read adjacent bytes of a block and
// write adjacent outputs. Each item's f16 values go out as uvec4 stores of 8
// elements (uint stores when the output does not start on 16 bytes, Y16 = 0);
// every store instruction of a subgroup writes whole runs of 64 bytes or more.
//   Q4_K (144 bytes: 16-aligned): 16 items a block. Item i = 4p + q reads
//     qs bytes 32p + 8q .. +7 (one uvec2) and the block's 16-byte header (one
//     uvec4, the same address for the block's 16 invocations: one broadcast
//     load), decodes its two sub-blocks' scale and min (2p, 2p + 1) and writes
//     the 8 low nibbles (elements 64p + 8q ..) and the 8 high (64p + 32 + 8q ..).
//   Q6_K (210 bytes: only 2-aligned): 8 items a block. Item i = 4n + q takes
//     l = 8q .. 8q + 7 of half n: 8 bytes each of ql[l], ql[l + 32], qh[l] and
//     the half's 8 scales, read as 32-bit words (3 a run: a funnel shift when
//     the block is 2 bytes off a word), and writes elements 128n + l + 32m ..
//     for m = 0..3.
//   Q8_0 (34 bytes: 2-aligned): 4 items a block, 8 codes each (words as for
//     Q6_K) and d: elements 32 blk + 8i ...
// Each invocation takes ITEMS items, WG apart (item it + r·WG): all their
// loads first, then the arithmetic and stores, so that ITEMS loads are in
// flight at once. Arithmetic as ggml's dequantize_row_* (f32, same products
// and order), rounded to f16 and clamped to ±65504 as gguf_to_f16.comp does.
#include "common.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(constant_id = 1) const uint WG = 256;
layout(constant_id = 2) const uint ITEMS = 4;
layout(constant_id = 3) const uint Y16 = 1;
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) restrict readonly buffer W { uint qw[]; };
layout(std430, binding = 0) restrict readonly buffer W2 { uvec2 qw2[]; };
layout(std430, binding = 0) restrict readonly buffer W4 { uvec4 qw4[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { uint y[]; };
layout(std430, binding = 1) restrict writeonly buffer Y4 { uvec4 y4[]; };
layout(push_constant) uniform P {
  uint items;  // blocks * items a block
  uint y_off;  // word offset of the output (a multiple of 4 when Y16)
} p;

#define GG_Q8_0 4u
#define GG_Q4_K 5u
#define GG_Q6_K 7u

// The 8 bytes at even byte offset b: two words, or three and a funnel shift.
// The third word is read only when needed, so a run ending a block's last
// word never reads past it.
uvec2 ld8(uint b) {
  uint i = b >> 2, w0 = qw[i], w1 = qw[i + 1u];
  if ((b & 2u) == 0u) return uvec2(w0, w1);
  uint w2 = qw[i + 2u];
  return uvec2((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16));
}

float half_at(uint b) {
  uint w = qw[b >> 2];
  return unpackHalf2x16((b & 2u) != 0u ? w >> 16 : w).x;
}

uint pk(float a, float b) { return packHalf2x16(clamp(vec2(a, b), vec2(-65504.0), vec2(65504.0))); }

void store(uint idx, uvec4 v) {  // 8 elements at element 8 idx of the output
  if (Y16 != 0u) {
    y4[(p.y_off >> 2) + idx] = v;
  } else {
    uint o = p.y_off + 4u * idx;
    y[o] = v.x;
    y[o + 1u] = v.y;
    y[o + 2u] = v.z;
    y[o + 3u] = v.w;
  }
}

// byte j (0..7) of an 8-byte run
uint byte8(uvec2 v, uint j) { return ((j < 4u ? v.x : v.y) >> (8u * (j & 3u))) & 255u; }

void main() {
  uint base = hn_group_index() * (WG * ITEMS) + gl_LocalInvocationID.x, last = p.items - 1u;
  if (GT == GG_Q4_K) {
    uvec4 hd[ITEMS];
    uvec2 qs[ITEMS];
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = min(base + r * WG, last), blk = it >> 4, i = it & 15u;
      hd[r] = qw4[9u * blk];
      qs[r] = qw2[18u * blk + 2u + i];  // byte 16 + 8i = 16 + 32p + 8q
    }
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = base + r * WG;
      if (it > last) break;
      uint blk = it >> 4, i = it & 15u, pr = i >> 2, q = i & 3u, k = 16u * (pr & 1u);
      uvec4 h = hd[r];
      vec2 dm = unpackHalf2x16(h.x);
      // sub-blocks 2pr and 2pr + 1: bytes k / 8 and k / 8 + 1 of a scale word (ggml's get_scale_min_k4)
      uint sc0, mn0, sc1, mn1;
      if (pr < 2u) {
        sc0 = (h.y >> k) & 63u;
        mn0 = (h.z >> k) & 63u;
        sc1 = (h.y >> (k + 8u)) & 63u;
        mn1 = (h.z >> (k + 8u)) & 63u;
      } else {
        sc0 = ((h.w >> k) & 15u) | (((h.y >> (k + 6u)) & 3u) << 4);
        mn0 = ((h.w >> (k + 4u)) & 15u) | (((h.z >> (k + 6u)) & 3u) << 4);
        sc1 = ((h.w >> (k + 8u)) & 15u) | (((h.y >> (k + 14u)) & 3u) << 4);
        mn1 = ((h.w >> (k + 12u)) & 15u) | (((h.z >> (k + 14u)) & 3u) << 4);
      }
      float d1 = dm.x * float(sc0), m1 = dm.y * float(mn0), d2 = dm.x * float(sc1), m2 = dm.y * float(mn1);
      uvec2 v = qs[r];
      uvec4 lo, hi;
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint a = byte8(v, 2u * j), b = byte8(v, 2u * j + 1u);
        lo[j] = pk(d1 * float(a & 15u) - m1, d1 * float(b & 15u) - m1);
        hi[j] = pk(d2 * float(a >> 4) - m2, d2 * float(b >> 4) - m2);
      }
      store(32u * blk + 8u * pr + q, lo);
      store(32u * blk + 8u * pr + 4u + q, hi);
    }
  } else if (GT == GG_Q6_K) {
    uvec2 ql0[ITEMS], ql1[ITEMS], qh[ITEMS], scw[ITEMS];
    float dd[ITEMS];
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = min(base + r * WG, last), blk = it >> 3, i = it & 7u, n = i >> 2, l = 8u * (i & 3u);
      uint b = 210u * blk;
      ql0[r] = ld8(b + 64u * n + l);
      ql1[r] = ld8(b + 64u * n + 32u + l);
      qh[r] = ld8(b + 128u + 32u * n + l);
      scw[r] = ld8(b + 192u + 8u * n);
      dd[r] = half_at(b + 208u);
    }
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = base + r * WG;
      if (it > last) break;
      uint blk = it >> 3, i = it & 7u, n = i >> 2, q = i & 3u, is = q >> 1;
      // ggml: y[l + 32m] = d * sc[is + 2m] * q_m
      float s[4];
      [[unroll]] for (uint m = 0u; m < 4u; m++)
        s[m] = dd[r] * float(bitfieldExtract(int(byte8(scw[r], is + 2u * m)), 0, 8));
      uvec4 o[4];
      [[unroll]] for (uint w = 0u; w < 2u; w++) {
        uint a = ql0[r][w], b = ql1[r][w], h = qh[r][w];
        // four 6-bit codes a byte lane: low / high nibbles of ql with 2 bits of qh each
        uint c[4] = uint[4]((a & 0x0f0f0f0fu) | ((h & 0x03030303u) << 4),
                            (b & 0x0f0f0f0fu) | (((h >> 2) & 0x03030303u) << 4),
                            ((a >> 4) & 0x0f0f0f0fu) | (((h >> 4) & 0x03030303u) << 4),
                            ((b >> 4) & 0x0f0f0f0fu) | (((h >> 6) & 0x03030303u) << 4));
        [[unroll]] for (uint m = 0u; m < 4u; m++) {
          o[m][2u * w] = pk(s[m] * float(int(c[m] & 63u) - 32), s[m] * float(int((c[m] >> 8) & 63u) - 32));
          o[m][2u * w + 1u] = pk(s[m] * float(int((c[m] >> 16) & 63u) - 32), s[m] * float(int(c[m] >> 24) - 32));
        }
      }
      [[unroll]] for (uint m = 0u; m < 4u; m++) store(32u * blk + 16u * n + 4u * m + q, o[m]);
    }
  } else {  // Q8_0
    uvec2 qs[ITEMS];
    float dd[ITEMS];
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = min(base + r * WG, last), blk = it >> 2, i = it & 3u, b = 34u * blk;
      qs[r] = ld8(b + 2u + 8u * i);
      dd[r] = half_at(b);
    }
    [[unroll]] for (uint r = 0u; r < ITEMS; r++) {
      uint it = base + r * WG;
      if (it > last) break;
      float d = dd[r];
      uvec4 o;
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint w = qs[r][j >> 1], sh = 16u * (j & 1u);
        o[j] = pk(float(bitfieldExtract(int(w), int(sh), 8)) * d, float(bitfieldExtract(int(w), int(sh + 8u), 8)) * d);
      }
      store(it, o);
    }
  }
}
