// ggml's quantized blocks (engine/tensor/ggml-quants.h has the layouts),
// read from uint words: the includer defines `uint gg_word(uint which, uint i)`
// (word i of weight buffer `which`, a literal so the branch folds away) and
// the spec constant GT (the GG_* code below). Byte offsets are relative to
// the buffer; every half and 32-bit field of a block is 2-byte aligned (Q8_K's
// 292-byte blocks, f32 d first, are 4-byte aligned).
// Arithmetic follows ggml's dequantize_row_* (same products, same order).
#define GG_Q4_0 0u
#define GG_Q4_1 1u
#define GG_Q5_0 2u
#define GG_Q5_1 3u
#define GG_Q8_0 4u
#define GG_Q4_K 5u
#define GG_Q5_K 6u
#define GG_Q6_K 7u
#define GG_Q8_K 8u

// bytes per block; elements per block
uint gg_type_size() {
  return GT == GG_Q4_0 ? 18u : GT == GG_Q4_1 ? 20u : GT == GG_Q5_0 ? 22u : GT == GG_Q5_1 ? 24u :
         GT == GG_Q8_0 ? 34u : GT == GG_Q4_K ? 144u : GT == GG_Q5_K ? 176u : GT == GG_Q6_K ? 210u : 292u;
}
uint gg_block() { return GT >= GG_Q4_K ? 256u : 32u; }

uint gg_u8(uint which, uint b) { return (gg_word(which, b >> 2) >> ((b & 3u) * 8u)) & 255u; }
uint gg_u16(uint which, uint b) {
  uint w = gg_word(which, b >> 2);
  return (b & 2u) != 0u ? w >> 16 : w & 0xffffu;
}
// 4 bytes at an even offset
uint gg_u32(uint which, uint b) {
  uint i = b >> 2;
  if ((b & 2u) == 0u) return gg_word(which, i);
  return (gg_word(which, i) >> 16) | (gg_word(which, i + 1u) << 16);
}
float gg_half(uint which, uint b) { return unpackHalf2x16(gg_u16(which, b)).x; }

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (scales at byte sb)
void gg_scale_min(uint which, uint sb, uint j, out float sc, out float mn) {
  if (j < 4u) {
    sc = float(gg_u8(which, sb + j) & 63u);
    mn = float(gg_u8(which, sb + j + 4u) & 63u);
  } else {
    uint a = gg_u8(which, sb + j + 4u), lo = gg_u8(which, sb + j - 4u), hi = gg_u8(which, sb + j);
    sc = float((a & 15u) | ((lo >> 6) << 4));
    mn = float((a >> 4) | ((hi >> 6) << 4));
  }
}

// The 32 weights of unit u (32 consecutive elements: a block of the 32-element
// types, sub-block u & 7 of block u >> 3 of the K types) of the row at byte rb.
void gg_unit(uint which, uint rb, uint u, out float w[32]) {
  if (GT == GG_Q8_0) {
    uint b = rb + u * 34u;
    float d = gg_half(which, b);
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
      uint v = gg_u32(which, b + 2u + 4u * i);
      [[unroll]] for (uint j = 0u; j < 4u; j++) w[4u * i + j] = float(bitfieldExtract(int(v), int(8u * j), 8)) * d;
    }
  } else if (GT == GG_Q4_0 || GT == GG_Q4_1) {
    uint b = rb + u * (GT == GG_Q4_0 ? 18u : 20u);
    float d = gg_half(which, b), m = GT == GG_Q4_1 ? gg_half(which, b + 2u) : 0.0;
    uint qs = b + (GT == GG_Q4_0 ? 2u : 4u);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint v = gg_u32(which, qs + 4u * i);
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint q = (v >> (8u * j)) & 255u;
        if (GT == GG_Q4_0) {
          w[4u * i + j] = float(int(q & 15u) - 8) * d;
          w[16u + 4u * i + j] = float(int(q >> 4) - 8) * d;
        } else {
          w[4u * i + j] = float(q & 15u) * d + m;
          w[16u + 4u * i + j] = float(q >> 4) * d + m;
        }
      }
    }
  } else if (GT == GG_Q5_0 || GT == GG_Q5_1) {
    uint b = rb + u * (GT == GG_Q5_0 ? 22u : 24u);
    float d = gg_half(which, b), m = GT == GG_Q5_1 ? gg_half(which, b + 2u) : 0.0;
    uint hb = b + (GT == GG_Q5_0 ? 2u : 4u);
    uint qh = gg_u32(which, hb);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint v = gg_u32(which, hb + 4u + 4u * i);
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint l = 4u * i + j, q = (v >> (8u * j)) & 255u;
        uint x0 = (q & 15u) | (((qh >> l) << 4) & 16u), x1 = (q >> 4) | ((qh >> (l + 12u)) & 16u);
        if (GT == GG_Q5_0) {
          w[l] = float(int(x0) - 16) * d;
          w[l + 16u] = float(int(x1) - 16) * d;
        } else {
          w[l] = float(x0) * d + m;
          w[l + 16u] = float(x1) * d + m;
        }
      }
    }
  } else if (GT == GG_Q4_K || GT == GG_Q5_K) {
    uint s = u & 7u, b = rb + (u >> 3) * (GT == GG_Q4_K ? 144u : 176u);
    float d = gg_half(which, b), dmin = gg_half(which, b + 2u), sc, mn;
    gg_scale_min(which, b + 4u, s, sc, mn);
    float d1 = d * sc, m1 = dmin * mn;
    uint qs = b + (GT == GG_Q4_K ? 16u : 48u) + 32u * (s >> 1), sh = (s & 1u) * 4u;
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
      uint v = gg_u32(which, qs + 4u * i);
      uint h = GT == GG_Q5_K ? gg_u32(which, b + 16u + 4u * i) : 0u;
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint q = (v >> (8u * j + sh)) & 15u;
        if (GT == GG_Q5_K) q += ((h >> (8u * j + s)) & 1u) * 16u;
        w[4u * i + j] = d1 * float(q) - m1;
      }
    }
  } else if (GT == GG_Q8_K) {
    // f32 d, then codes: sub-block s is bytes 4 + 32 s .. of the block
    uint b = rb + (u >> 3) * 292u, qs = b + 4u + 32u * (u & 7u);
    float d = uintBitsToFloat(gg_u32(which, b));
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
      uint v = gg_u32(which, qs + 4u * i);
      [[unroll]] for (uint j = 0u; j < 4u; j++) w[4u * i + j] = d * float(bitfieldExtract(int(v), int(8u * j), 8));
    }
  } else {  // Q6_K
    uint s = u & 7u, b = rb + (u >> 3) * 210u, hf = s >> 2, qq = s & 3u;
    float d = gg_half(which, b + 208u);
    uint ql = b + 64u * hf + (qq & 1u) * 32u, shl = (qq >> 1) * 4u, qh = b + 128u + 32u * hf, shh = 2u * qq;
    uint scb = b + 192u + 8u * hf + 2u * qq;
    float sc0 = d * float(bitfieldExtract(int(gg_u8(which, scb)), 0, 8));
    float sc1 = d * float(bitfieldExtract(int(gg_u8(which, scb + 1u)), 0, 8));
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
      uint vl = gg_u32(which, ql + 4u * i), vh = gg_u32(which, qh + 4u * i);
      [[unroll]] for (uint j = 0u; j < 4u; j++) {
        int q = int(((vl >> (8u * j + shl)) & 15u) | (((vh >> (8u * j + shh)) & 3u) << 4)) - 32;
        w[4u * i + j] = (i < 4u ? sc0 : sc1) * float(q);
      }
    }
  }
}

// One element: column c of the row at byte rb (the tiled matmul's loads).
float gg_elem(uint which, uint rb, uint c) {
  uint u = c >> 5, l = c & 31u;
  if (GT == GG_Q8_0) {
    uint b = rb + u * 34u;
    return float(bitfieldExtract(int(gg_u8(which, b + 2u + l)), 0, 8)) * gg_half(which, b);
  }
  if (GT <= GG_Q5_1) {
    uint b = rb + u * gg_type_size();
    float d = gg_half(which, b), m = (GT == GG_Q4_1 || GT == GG_Q5_1) ? gg_half(which, b + 2u) : 0.0;
    uint hb = b + ((GT == GG_Q4_0 || GT == GG_Q5_0) ? 2u : 4u);
    uint qb = hb + ((GT == GG_Q5_0 || GT == GG_Q5_1) ? 4u : 0u);
    uint q = gg_u8(which, qb + (l & 15u));
    uint x = l < 16u ? q & 15u : q >> 4;
    if (GT == GG_Q5_0 || GT == GG_Q5_1) {
      uint qh = gg_u32(which, hb);
      x |= ((qh >> l) & 1u) << 4;
    }
    if (GT == GG_Q4_0) return float(int(x) - 8) * d;
    if (GT == GG_Q5_0) return float(int(x) - 16) * d;
    return float(x) * d + m;
  }
  if (GT == GG_Q8_K) {
    uint b = rb + (u >> 3) * 292u;
    return uintBitsToFloat(gg_u32(which, b)) * float(bitfieldExtract(int(gg_u8(which, b + 4u + c % 256u)), 0, 8));
  }
  uint s = u & 7u;
  if (GT == GG_Q6_K) {
    uint b = rb + (u >> 3) * 210u, hf = s >> 2, qq = s & 3u;
    float d = gg_half(which, b + 208u);
    uint vl = gg_u8(which, b + 64u * hf + (qq & 1u) * 32u + l), vh = gg_u8(which, b + 128u + 32u * hf + l);
    int q = int(((vl >> ((qq >> 1) * 4u)) & 15u) | (((vh >> (2u * qq)) & 3u) << 4)) - 32;
    float sc = d * float(bitfieldExtract(int(gg_u8(which, b + 192u + 8u * hf + 2u * qq + (l >> 4))), 0, 8));
    return sc * float(q);
  }
  uint b = rb + (u >> 3) * (GT == GG_Q4_K ? 144u : 176u);
  float d = gg_half(which, b), dmin = gg_half(which, b + 2u), sc, mn;
  gg_scale_min(which, b + 4u, s, sc, mn);
  uint q = (gg_u8(which, b + (GT == GG_Q4_K ? 16u : 48u) + 32u * (s >> 1) + l) >> ((s & 1u) * 4u)) & 15u;
  if (GT == GG_Q5_K) q += ((gg_u8(which, b + 16u + l) >> s) & 1u) * 16u;
  return d * sc * float(q) - dmin * mn;
}
