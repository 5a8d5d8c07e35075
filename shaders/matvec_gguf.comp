#version 450
#extension GL_GOOGLE_include_directive : require
// y[m, n] = x[m, :] · W[n, :] (+ bias[n]) for a few rows m < M <= MMAX <= 8
// (decode) with W [N, K] in ggml blocks (GT, the GG_* codes of
// shaders/gguf_dequant.glsl): the weights stay quantized in memory.
// A row is cut into chunks: a quarter of a 256-element block of the K types
// (Q4_K/Q5_K: 64 elements from 32 bytes of nibbles, read as two 16-byte
// loads, plus the block's 16-byte header of scales; Q6_K: four runs of 16
// from 48 bytes; Q8_K: eight runs of 4 codes), a whole block of the
// 32-element types. The lanes of a
// subgroup take consecutive chunks, so a subgroup reads a contiguous stretch
// of the row; each lane decodes its block's scales once, dots the raw codes
// with x and applies the scale (and min) to the sums; subgroupAdd reduces.
// Each subgroup takes NR rows at once (their loads in flight together), a
// workgroup NSG row groups. Blocks of the K types are 16-byte aligned (144 and
// 176 bytes; rows start on 16 bytes) and read through uvec4; Q8_K (292
// bytes) is 4-byte aligned and read as words; Q6_K (210 bytes) and the
// 32-element types are 2-byte aligned and read as words shifted into place. QL = 1 gives Q4_K and Q6_K chunk_dot_ql's wider loads
// and conversion-free decoding instead. The same options as matvec.comp (engine/tensor/ops.c
// dispatch_matvec):
// GATED = 1: binding 4 is U [N, K] (same type) and y = act(x·W[n] + b) * (x·U[n] + bu);
// flags 1 bias, 2 accumulate (y += alpha * result), 4 bias of U;
// NORM = 1: x is RMS-normalised on the fly (gain binding 6, nflags 1 = 1 + g, 2 = has g).
// XVEC = 1: x rows (and the gain) start on 4-element boundaries (vec4 loads).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(constant_id = 1) const uint WG = 128;
layout(constant_id = 2) const uint NSG = 4;  // row groups a workgroup
layout(constant_id = 3) const uint XVEC = 0;
layout(constant_id = 4) const uint MMAX = 8;
layout(constant_id = 5) const uint GATED = 0;
layout(constant_id = 6) const uint NORM = 0;
layout(constant_id = 7) const uint NR = 1;  // rows a subgroup: NR (2 NR when GATED) <= 4
layout(constant_id = 8) const uint UNR = 1;  // chunks a lane takes at once: 1 or 2
layout(constant_id = 9) const uint QL = 0;  // Q4_K / Q6_K: chunk_dot_ql's layout
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { uint qw[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 qw4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer U { uint qu[]; };
layout(std430, binding = 4) readonly buffer U4 { uvec4 qu4[]; };
layout(std430, binding = 5) readonly buffer BiasU { float bias_u[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(std430, binding = 6) readonly buffer G4 { vec4 g4[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K; uint x_off; uint row_bytes; uint bias_off; uint y_off; uint flags;
  uint bu_off; uint act; float alpha;
  uint g_off; float eps; uint nflags;
} p;
shared float nred[8 * 64];  // [m][subgroup] partial sums of squares
shared float rstd_s[8];

#define GG_Q4_0 0u
#define GG_Q4_1 1u
#define GG_Q5_0 2u
#define GG_Q5_1 3u
#define GG_Q8_0 4u
#define GG_Q4_K 5u
#define GG_Q5_K 6u
#define GG_Q6_K 7u
#define GG_Q8_K 8u
const bool KTYPE = GT >= GG_Q4_K;
const uint BLK_BYTES = GT == GG_Q4_0 ? 18u : GT == GG_Q4_1 ? 20u : GT == GG_Q5_0 ? 22u : GT == GG_Q5_1 ? 24u :
                       GT == GG_Q8_0 ? 34u : GT == GG_Q4_K ? 144u : GT == GG_Q5_K ? 176u : GT == GG_Q6_K ? 210u : 292u;
const uint BLK_ELEMS = KTYPE ? 256u : 32u;
const uint CHUNKS = KTYPE ? 8u : 4u;  // chunks (lanes) a block

uint wd(uint which, uint i) { return which == 0u ? qw[i] : qu[i]; }
uvec4 wd4(uint which, uint i) { return which == 0u ? qw4[i] : qu4[i]; }
// the half at even byte offset b
float half_at(uint which, uint b) {
  uint v = wd(which, b >> 2);
  return unpackHalf2x16((b & 2u) != 0u ? v >> 16 : v).x;
}
// 4 bytes at even byte offset b
uint ld4(uint which, uint b) {
  uint i = b >> 2;
  if ((b & 2u) == 0u) return wd(which, i);
  return (wd(which, i) >> 16) | (wd(which, i + 1u) << 16);
}
// 16 bytes at even byte offset b (five words when it is not 4-byte aligned)
uvec4 ld16(uint which, uint b) {
  uint i = b >> 2;
  uvec4 v = uvec4(wd(which, i), wd(which, i + 1u), wd(which, i + 2u), wd(which, i + 3u));
  if ((b & 2u) == 0u) return v;
  uint e = wd(which, i + 4u);
  return uvec4((v.x >> 16) | (v.y << 16), (v.y >> 16) | (v.z << 16), (v.z >> 16) | (v.w << 16), (v.w >> 16) | (e << 16));
}

// the 4 bytes of a word as floats
vec4 u8x4(uint v) { return vec4(uvec4(v, v >> 8, v >> 16, v >> 24) & 255u); }
vec4 s8x4(uint v) { return vec4(ivec4(int(v) << 24, int(v) << 16, int(v) << 8, int(v)) >> 24); }

float gain(uint e) {
  if ((p.nflags & 2u) == 0u) return 1.0;
  float gv = g[p.g_off + e];
  return (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
}
// x[m, k .. k + 4), times the norm's gain when NORM (k a multiple of 4)
vec4 xq(uint m, uint k) {
  uint base = p.x_off + m * p.K + k;
  vec4 v = XVEC != 0u ? x4[base >> 2] : vec4(x[base], x[base + 1u], x[base + 2u], x[base + 3u]);
  if (NORM != 0u && (p.nflags & 2u) != 0u) {
    vec4 gv = XVEC != 0u ? g4[(p.g_off + k) >> 2] : vec4(gain(k), gain(k + 1u), gain(k + 2u), gain(k + 3u));
    if (XVEC != 0u && (p.nflags & 1u) != 0u) gv += 1.0;
    v *= gv;
  }
  return v;
}

// NW weight rows (row j: buffer wh[j], at byte rb[j]) against the same x:
// acc[j][m] += x[m, chunk c] · row j's chunk c. x is loaded once for all rows.
// Chunk t of a block takes words t, t + LPB, ... of its codes, so the LPB
// lanes of a block read contiguous words of W and contiguous runs of x.
const uint NW = NR * (GATED != 0u ? 2u : 1u);
void chunk_dot(uint wh[4], uint rb[4], uint c, inout float acc[4][8]) {
  uint blk = c / CHUNKS, t = c % CHUNKS, k0 = blk * BLK_ELEMS;
  if (GT == GG_Q4_K || GT == GG_Q5_K) {
    // header: d, dmin, 12 bytes of 6-bit scales and mins of the 8 sub-blocks.
    // Lane t: code word 8i + t (bytes 32i + 4t ..) for i = 0..3, whose low
    // nibbles are elements 64i + 4t .. of sub-block 2i, high ones 64i + 32 + 4t ..
    uint lw[4][4], uw[4][4];
    float dd[4][8], mm[4][8];
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      uvec4 h = wd4(wh[j], b >> 4);
      vec2 dm = unpackHalf2x16(h.x);
      uint sc[2] = uint[2](h.y & 0x3f3f3f3fu, (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u));
      uint mn[2] = uint[2](h.z & 0x3f3f3f3fu, ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u));
      [[unroll]] for (uint s = 0u; s < 8u; s++) {
        dd[j][s] = dm.x * float((sc[s >> 2] >> ((s & 3u) * 8u)) & 255u);
        mm[j][s] = dm.y * float((mn[s >> 2] >> ((s & 3u) * 8u)) & 255u);
      }
      uint qb = (b + (GT == GG_Q4_K ? 16u : 48u)) >> 2;
      uint hq = GT == GG_Q5_K ? wd(wh[j], ((b + 16u) >> 2) + t) : 0u;  // qh bytes 4t .. 4t + 3
      [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint q = wd(wh[j], qb + 8u * i + t);
        lw[j][i] = q & 0x0f0f0f0fu;
        uw[j][i] = (q >> 4) & 0x0f0f0f0fu;
        if (GT == GG_Q5_K) {
          lw[j][i] |= ((hq >> (2u * i)) & 0x01010101u) << 4;
          uw[j][i] |= ((hq >> (2u * i + 1u)) & 0x01010101u) << 4;
        }
      }
    }
    uint kx = k0 + 4u * t;
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      [[unroll]] for (uint i = 0u; i < 4u; i++) {
        vec4 xa = xq(m, kx + 64u * i), xb = xq(m, kx + 64u * i + 32u);
        float sx0 = dot(xa, vec4(1.0)), sx1 = dot(xb, vec4(1.0));
        [[unroll]] for (uint j = 0u; j < NW; j++)
          acc[j][m] += dd[j][2u * i] * dot(xa, u8x4(lw[j][i])) - mm[j][2u * i] * sx0 +
                       dd[j][2u * i + 1u] * dot(xb, u8x4(uw[j][i])) - mm[j][2u * i + 1u] * sx1;
      }
    }
  } else if (GT == GG_Q6_K) {
    // half hf of the block, columns l = 4t .. 4t + 3: ql bytes l and l + 32 and
    // qh byte l give elements 128 hf + l + 32 r (r = 0..3), scale 8 hf + l / 16 + 2 r
    uint cw[4][8];
    float sc[4][8];
    uint is = t >> 2;
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      float d = half_at(wh[j], b + 208u);
      [[unroll]] for (uint hf = 0u; hf < 2u; hf++) {
        uint A = ld4(wh[j], b + 64u * hf + 4u * t), B = ld4(wh[j], b + 64u * hf + 32u + 4u * t);
        uint H = ld4(wh[j], b + 128u + 32u * hf + 4u * t);
        uint s0 = ld4(wh[j], b + 192u + 8u * hf), s1 = ld4(wh[j], b + 196u + 8u * hf);
        cw[j][4u * hf] = (A & 0x0f0f0f0fu) | ((H << 4) & 0x30303030u);
        cw[j][4u * hf + 1u] = (B & 0x0f0f0f0fu) | ((H << 2) & 0x30303030u);
        cw[j][4u * hf + 2u] = ((A >> 4) & 0x0f0f0f0fu) | (H & 0x30303030u);
        cw[j][4u * hf + 3u] = ((B >> 4) & 0x0f0f0f0fu) | ((H >> 2) & 0x30303030u);
        sc[j][4u * hf] = d * float(bitfieldExtract(int(s0), int(8u * is), 8));
        sc[j][4u * hf + 1u] = d * float(bitfieldExtract(int(s0), int(8u * is + 16u), 8));
        sc[j][4u * hf + 2u] = d * float(bitfieldExtract(int(s1), int(8u * is), 8));
        sc[j][4u * hf + 3u] = d * float(bitfieldExtract(int(s1), int(8u * is + 16u), 8));
      }
    }
    uint kx = k0 + 4u * t;
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      [[unroll]] for (uint r = 0u; r < 8u; r++) {  // r = 4 hf + run
        vec4 xv = xq(m, kx + 128u * (r >> 2) + 32u * (r & 3u));
        float sx = 32.0 * dot(xv, vec4(1.0));  // codes are stored + 32
        [[unroll]] for (uint j = 0u; j < NW; j++) acc[j][m] += sc[j][r] * (dot(xv, u8x4(cw[j][r])) - sx);
      }
    }
  } else if (GT == GG_Q8_K) {
    // f32 d, then 64 code words: lane t takes words t + 8i (elements 32i + 4t ..)
    uint qv[4][8];
    float d[4];
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint w0 = (rb[j] + blk * BLK_BYTES) >> 2;
      d[j] = uintBitsToFloat(wd(wh[j], w0));
      [[unroll]] for (uint i = 0u; i < 8u; i++) qv[j][i] = wd(wh[j], w0 + 1u + 8u * i + t);
    }
    uint kx = k0 + 4u * t;
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      float s[4] = float[4](0.0, 0.0, 0.0, 0.0);
      [[unroll]] for (uint i = 0u; i < 8u; i++) {
        vec4 xv = xq(m, kx + 32u * i);
        [[unroll]] for (uint j = 0u; j < NW; j++) s[j] += dot(xv, s8x4(qv[j][i]));
      }
      [[unroll]] for (uint j = 0u; j < NW; j++) acc[j][m] += d[j] * s[j];
    }
  } else if (GT == GG_Q8_0) {
    // lane t: code words t and t + 4 (elements 4t .. and 16 + 4t ..)
    uint qv[4][2];
    float d[4];
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      d[j] = half_at(wh[j], b);
      qv[j][0] = ld4(wh[j], b + 2u + 4u * t);
      qv[j][1] = ld4(wh[j], b + 18u + 4u * t);
    }
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      vec4 xa = xq(m, k0 + 4u * t), xb = xq(m, k0 + 16u + 4u * t);
      [[unroll]] for (uint j = 0u; j < NW; j++)
        acc[j][m] += d[j] * (dot(xa, s8x4(qv[j][0])) + dot(xb, s8x4(qv[j][1])));
    }
  } else {
    // Q4_0 / Q4_1 / Q5_0 / Q5_1, lane t: code word t, whose low nibbles are
    // elements 4t .. 4t + 3, high ones 16 + 4t ..; Q5 adds bits 4t .. and
    // 16 + 4t .. of qh as the fifth bit
    const bool has_m = GT == GG_Q4_1 || GT == GG_Q5_1, five = GT == GG_Q5_0 || GT == GG_Q5_1;
    const float off = GT == GG_Q4_0 ? 8.0 : GT == GG_Q5_0 ? 16.0 : 0.0;
    uint lw[4], uw[4];
    float d[4], mn[4];
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      d[j] = half_at(wh[j], b);
      mn[j] = has_m ? half_at(wh[j], b + 2u) : 0.0;
      uint hb = b + (has_m ? 4u : 2u);
      uint qh = five ? ld4(wh[j], hb) : 0u;
      uint q = ld4(wh[j], hb + (five ? 4u : 0u) + 4u * t);
      lw[j] = q & 0x0f0f0f0fu;
      uw[j] = (q >> 4) & 0x0f0f0f0fu;
      if (five) {
        uint bl = (qh >> (4u * t)) & 15u, bu = (qh >> (16u + 4u * t)) & 15u;  // one bit an element
        lw[j] |= ((bl & 1u) | ((bl & 2u) << 7) | ((bl & 4u) << 14) | ((bl & 8u) << 21)) << 4;
        uw[j] |= ((bu & 1u) | ((bu & 2u) << 7) | ((bu & 4u) << 14) | ((bu & 8u) << 21)) << 4;
      }
    }
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      vec4 xa = xq(m, k0 + 4u * t), xb = xq(m, k0 + 16u + 4u * t);
      float sx = dot(xa, vec4(1.0)) + dot(xb, vec4(1.0));
      // w = d (q - off) (+ mn): Σ x w = d (Σ x q - off Σ x) + mn Σ x
      [[unroll]] for (uint j = 0u; j < NW; j++)
        acc[j][m] += d[j] * (dot(xa, u8x4(lw[j])) + dot(xb, u8x4(uw[j])) - off * sx) + mn[j] * sx;
    }
  }
}

// Codes without int-to-float conversions (quarter rate): a code at bits p ..
// of a word, masked into the mantissa of 1.0 (p + width <= 23), is the float
// 1 + code 2^(p - 23) exactly, and minus 1 (exact) code 2^(p - 23); x is
// scaled by 2^(23 - p) (exact), shared by the rows. Each word gives its four
// codes of one kind at such positions straight or shifted right once.
float f23(uint v) { return uintBitsToFloat(v | 0x3f800000u) - 1.0; }
// 8 bytes at even byte offset b (a third word only when it is not 4-byte aligned)
uvec2 ld8(uint which, uint b) {
  uint i = b >> 2, w0 = wd(which, i), w1 = wd(which, i + 1u);
  if ((b & 2u) == 0u) return uvec2(w0, w1);
  uint w2 = wd(which, i + 2u);
  return uvec2((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16));
}

// QL = 1 (Q4_K, Q6_K): chunk_dot's contract, 32 elements a lane in fewer,
// wider loads and cheaper conversions. Q4_K: lane t of a block reads one
// 16-byte run of codes (bytes 16t .. of qs: 16 elements of sub-block 2i in
// the low nibbles, 16 of sub-block 2i + 1 in the high ones, i = t / 2) and
// the block's header, decoding only its two scales and mins. Q6_K: lane t
// takes half hf = t / 4 and columns 8 (t & 3) .. + 8 of it, four runs r of 8
// elements (128 hf + 32 r + column) from 8 bytes each of ql (two) and qh.
void chunk_dot_ql(uint wh[4], uint rb[4], uint c, inout float acc[4][8]) {
  uint blk = c / CHUNKS, t = c % CHUNKS, k0 = blk * BLK_ELEMS;
  if (GT == GG_Q4_K) {
    uvec4 q[4];
    float a0[4], b0[4], a1[4], b1[4];
    uint i = t >> 1, sh = 16u * (i & 1u);
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b4 = (rb[j] + blk * BLK_BYTES) >> 4;
      uvec4 h = wd4(wh[j], b4);
      q[j] = wd4(wh[j], b4 + 1u + t);
      vec2 dm = unpackHalf2x16(h.x);
      uint scw = i < 2u ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
      uint mnw = i < 2u ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
      // w = d sc q - dmin mn: Σ x w = d sc Σ x q - dmin mn Σ x
      a0[j] = dm.x * float((scw >> sh) & 255u);
      a1[j] = dm.x * float((scw >> (sh + 8u)) & 255u);
      b0[j] = dm.y * float((mnw >> sh) & 255u);
      b1[j] = dm.y * float((mnw >> (sh + 8u)) & 255u);
    }
    // low nibbles of bytes 0, 1, 2 at bits 0, 8, 16 of v, of byte 3 at 12 of
    // v >> 12; high nibbles of bytes 0, 1 at 4, 12 of v, of 2, 3 at 8, 16 of v >> 12
    const vec4 LS = vec4(8388608.0, 32768.0, 128.0, 2048.0), HS = vec4(524288.0, 2048.0, 32768.0, 128.0);
    uint kx = k0 + 64u * i + 16u * (t & 1u);
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      vec4 xa[4], xb[4];
      float sa = 0.0, sb = 0.0;
      [[unroll]] for (uint e = 0u; e < 4u; e++) {
        xa[e] = xq(m, kx + 4u * e);
        xb[e] = xq(m, kx + 32u + 4u * e);
        sa += dot(xa[e], vec4(1.0));
        sb += dot(xb[e], vec4(1.0));
        xa[e] *= LS;
        xb[e] *= HS;
      }
      [[unroll]] for (uint j = 0u; j < NW; j++) {
        float dl = 0.0, dh = 0.0;
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
          uint v = q[j][e], v2 = v >> 12;
          dl += dot(xa[e], vec4(f23(v & 0xfu), f23(v & 0xf00u), f23(v & 0xf0000u), f23(v2 & 0xf000u)));
          dh += dot(xb[e], vec4(f23(v & 0xf0u), f23(v & 0xf000u), f23(v2 & 0xf00u), f23(v2 & 0xf0000u)));
        }
        acc[j][m] += a0[j] * dl - b0[j] * sa + a1[j] * dh - b1[j] * sb;
      }
    }
  } else if (GT == GG_Q6_K) {
    uint cw[4][4][2];  // [j][r][word]: 6-bit codes (stored + 32) in byte lanes
    float sc[4][4];  // [j][r]: d scale
    uint hf = t >> 2, col = 8u * (t & 3u), is = 8u * ((t & 3u) >> 1);
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      float d = half_at(wh[j], b + 208u);
      uvec2 A = ld8(wh[j], b + 64u * hf + col), B = ld8(wh[j], b + 64u * hf + 32u + col);
      uvec2 H = ld8(wh[j], b + 128u + 32u * hf + col), S = ld8(wh[j], b + 192u + 8u * hf);
      [[unroll]] for (uint e = 0u; e < 2u; e++) {
        cw[j][0][e] = (A[e] & 0x0f0f0f0fu) | ((H[e] << 4) & 0x30303030u);
        cw[j][1][e] = (B[e] & 0x0f0f0f0fu) | ((H[e] << 2) & 0x30303030u);
        cw[j][2][e] = ((A[e] >> 4) & 0x0f0f0f0fu) | (H[e] & 0x30303030u);
        cw[j][3][e] = ((B[e] >> 4) & 0x0f0f0f0fu) | ((H[e] >> 2) & 0x30303030u);
      }
      // scale 8 hf + col / 16 + 2 r: byte is / 8 + 2 r of S
      [[unroll]] for (uint r = 0u; r < 4u; r++)
        sc[j][r] = d * float(bitfieldExtract(int(r < 2u ? S.x : S.y), int(is + 16u * (r & 1u)), 8));
    }
    // the codes of bytes 0, 1, 2 at bits 0, 8, 16 of a word, of byte 3 at 8 of it >> 16
    const vec4 XS = vec4(8388608.0, 32768.0, 128.0, 32768.0);
    uint kx = k0 + 128u * hf + col;
    [[unroll]] for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      [[unroll]] for (uint r = 0u; r < 4u; r++) {
        vec4 x0 = xq(m, kx + 32u * r), x1 = xq(m, kx + 32u * r + 4u);
        float sx = 32.0 * (dot(x0, vec4(1.0)) + dot(x1, vec4(1.0)));  // codes are stored + 32
        x0 *= XS;
        x1 *= XS;
        [[unroll]] for (uint j = 0u; j < NW; j++) {
          uint v = cw[j][r][0], u = cw[j][r][1];
          vec4 c0 = vec4(f23(v & 0x3fu), f23(v & 0x3f00u), f23(v & 0x3f0000u), f23((v >> 16) & 0x3f00u));
          vec4 c1 = vec4(f23(u & 0x3fu), f23(u & 0x3f00u), f23(u & 0x3f0000u), f23((u >> 16) & 0x3f00u));
          acc[j][m] += sc[j][r] * (dot(x0, c0) + dot(x1, c1) - sx);
        }
      }
    }
  }
}

void main() {
  uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
  if (NORM != 0u) {
    for (uint m = 0u; m < MMAX; m++) {
      if (m >= p.M) break;
      float ss = 0.0;
      for (uint k = gl_LocalInvocationID.x; k < p.K; k += WG) { float v = x[p.x_off + m * p.K + k]; ss += v * v; }
      ss = subgroupAdd(ss);
      if (subgroupElect()) nred[m * 64u + gl_SubgroupID] = ss;
    }
    barrier();
    if (gl_LocalInvocationID.x < p.M) {
      uint m = gl_LocalInvocationID.x;
      float ss = 0.0;
      for (uint sg = 0u; sg < gl_NumSubgroups; sg++) ss += nred[m * 64u + sg];
      rstd_s[m] = 1.0 / sqrt(ss / float(p.K) + p.eps);
    }
    barrier();
  }
  uint chunks = (p.K / BLK_ELEMS) * CHUNKS;
  for (uint grp = gl_SubgroupID; grp < NSG; grp += gl_NumSubgroups) {
    uint n0 = (hn_group_index() * NSG + grp) * NR;
    if (n0 >= p.N) break;  // uniform in the subgroup
    float acc[4][8];  // [j][m]: rows n0 .. n0 + NR of W, then those of U
    uint wh[4], rb[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      [[unroll]] for (uint m = 0u; m < 8u; m++) acc[j][m] = 0.0;
      wh[j] = j < NR ? 0u : 1u;
      rb[j] = min(n0 + j % NR, p.N - 1u) * p.row_bytes;  // a clamped row is computed and dropped
    }
    if (UNR == 2u) {
      // two chunks an iteration, the second clamped (and its sums dropped)
      // past the row's end, so both chunks' loads are in flight together
      for (uint c = lane; c < chunks; c += 2u * sgs) {
        float acc2[4][8];
        [[unroll]] for (uint j = 0u; j < 4u; j++)
          [[unroll]] for (uint m = 0u; m < 8u; m++) acc2[j][m] = 0.0;
        uint c2 = c + sgs;
        if (QL != 0u) {
          chunk_dot_ql(wh, rb, c, acc);
          chunk_dot_ql(wh, rb, min(c2, chunks - 1u), acc2);
        } else {
          chunk_dot(wh, rb, c, acc);
          chunk_dot(wh, rb, min(c2, chunks - 1u), acc2);
        }
        float v = c2 < chunks ? 1.0 : 0.0;
        [[unroll]] for (uint j = 0u; j < NW; j++)
          [[unroll]] for (uint m = 0u; m < MMAX; m++) acc[j][m] += v * acc2[j][m];
      }
    } else {
      for (uint c = lane; c < chunks; c += sgs) {
        if (QL != 0u) chunk_dot_ql(wh, rb, c, acc);
        else chunk_dot(wh, rb, c, acc);
      }
    }
    [[unroll]] for (uint r = 0u; r < NR; r++) {
      uint n = n0 + r;
      [[unroll]] for (uint m = 0u; m < MMAX; m++) {
        if (m >= p.M) break;
        float sa = subgroupAdd(acc[r][m]);
        float sb = GATED != 0u ? subgroupAdd(acc[NR + r][m]) : 0.0;
        if (NORM != 0u) { sa *= rstd_s[m]; sb *= rstd_s[m]; }
        if (lane == 0u && n < p.N) {
          float res;
          if (GATED != 0u) {
            float gv = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
            float v = sb + ((p.flags & 4u) != 0u ? bias_u[p.bu_off + n] : 0.0);
            res = hn_act(p.act, gv) * v;
          } else {
            res = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
          }
          uint yi = p.y_off + m * p.N + n;
          y[yi] = (p.flags & 2u) != 0u ? y[yi] + p.alpha * res : res;
        }
      }
    }
  }
}
