#version 450
#extension GL_GOOGLE_include_directive : require
// The tensor-core form of matmul_gguf.comp through VK_NV_cooperative_matrix2
// (the structure of matmul_quant_cm2.comp): C = alpha * A · B (+ bias[n])
// (+= C) with B a frozen weight W [w_rows, w_cols] in ggml blocks (GT, the
// GG_* codes of shaders/gguf_dequant.glsl); the weights stay in their blocks,
// no dequantized copy exists. The forward (SHB) dequantizes each tile of W
// into shared memory, 32 elements of a row per invocation at a time, and loads
// the matrix from there; otherwise the tensor layout over W carries the block
// (1 x 32 or 1 x 256 elements) and a decode function per type turns an
// element of a block into f16 as the driver loads each tile.
// B(k, n) = W[n, k] when W_ROW_IS_N (y = x·Wᵀ, prefill) and W[k, n]
// otherwise (dx = dy·W). A as f16 (to_f16.comp's copy), f32 accumulation.
// Blocks are declared with 16-bit members (every ggml block is 2-byte
// aligned: 18, 20, 22, 24, 34, 144, 176, 210 bytes; Q8_K's 292 with its f32
// d first are 4-byte aligned), so the device needs 16-bit storage. The decode
// arithmetic is ggml's dequantize_row_* in f32, rounded to f16 once.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#include "common.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 64;
layout(constant_id = 4) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(local_size_x_id = 4) in;
// 0: A(m, k) at m * a_sm + k; 1: at k * a_sk + m.
layout(constant_id = 5) const uint A_T = 0;
// 1: B(k, n) = W[n, k]; 0: B(k, n) = W[k, n].
layout(constant_id = 6) const uint W_ROW_IS_N = 1;
// 1 (with W_ROW_IS_N): the workgroup dequantizes each BK x BN tile of B into
// shared memory, 32 elements of a row at a time (gg_unit of gguf_dequant.glsl:
// a block's scales decoded once), and the matrix loads from there; 0: the
// driver calls a decode function per element as it loads the tile.
layout(constant_id = 7) const uint SHB = 0;

struct BQ4_0 { float16_t d; uint16_t qs[8]; };
struct BQ4_1 { float16_t d; float16_t m; uint16_t qs[8]; };
struct BQ5_0 { float16_t d; uint16_t qh[2]; uint16_t qs[8]; };
struct BQ5_1 { float16_t d; float16_t m; uint16_t qh[2]; uint16_t qs[8]; };
struct BQ8_0 { float16_t d; uint16_t qs[16]; };
struct BQ4_K { float16_t d; float16_t dmin; uint16_t sc[6]; uint16_t qs[64]; };
struct BQ5_K { float16_t d; float16_t dmin; uint16_t sc[6]; uint16_t qh[16]; uint16_t qs[64]; };
struct BQ6_K { uint16_t ql[64]; uint16_t qh[32]; uint16_t sc[8]; float16_t d; };
struct BQ8_K { float d; uint16_t qs[128]; uint16_t bsums[16]; };

layout(std430, binding = 0) readonly buffer Ah { float16_t ah16[]; };
layout(std430, binding = 1) readonly buffer W40 { BQ4_0 w40[]; };
layout(std430, binding = 1) readonly buffer W41 { BQ4_1 w41[]; };
layout(std430, binding = 1) readonly buffer W50 { BQ5_0 w50[]; };
layout(std430, binding = 1) readonly buffer W51 { BQ5_1 w51[]; };
layout(std430, binding = 1) readonly buffer W80 { BQ8_0 w80[]; };
layout(std430, binding = 1) readonly buffer W4K { BQ4_K w4k[]; };
layout(std430, binding = 1) readonly buffer W5K { BQ5_K w5k[]; };
layout(std430, binding = 1) readonly buffer W6K { BQ6_K w6k[]; };
layout(std430, binding = 1) readonly buffer W8K { BQ8_K w8k[]; };
layout(std430, binding = 1) readonly buffer WU { uint wu[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint a_sm; uint a_sk;
  uint c_off; uint c_sm; uint bias_off;
  uint flags;  // 1 = accumulate, 2 = has bias
  float alpha;
  uint w_rows; uint w_cols; uint w_bpr;  // blocks a row of W
  uint row_bytes;
} p;

uint gg_word(uint which, uint i) { return wu[i]; }
#include "gguf_dequant.glsl"
shared float16_t bsh[SHB != 0u ? BK * BN : 1];  // [k][n]: B's tile

layout(buffer_reference, std430, buffer_reference_align = 2) buffer R40 { BQ4_0 b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R41 { BQ4_1 b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R50 { BQ5_0 b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R51 { BQ5_1 b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R80 { BQ8_0 b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R4K { BQ4_K b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R5K { BQ5_K b; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer R6K { BQ6_K b; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer R8K { BQ8_K b; };

float16_t to_h(float v) { return float16_t(clamp(v, -65504.0, 65504.0)); }
// byte i of an array of 16-bit words
#define BYTE(arr, i) ((uint(arr[(i) >> 1]) >> (((i) & 1u) * 8u)) & 255u)

// within[1]: the element in the block (0 .. 31 or 0 .. 255)
float16_t dq40(const in R40 r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], q = BYTE(r.b.qs, e & 15u);
  return to_h(float(int(e < 16u ? q & 15u : q >> 4) - 8) * float(r.b.d));
}
float16_t dq41(const in R41 r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], q = BYTE(r.b.qs, e & 15u);
  return to_h(float(e < 16u ? q & 15u : q >> 4) * float(r.b.d) + float(r.b.m));
}
float16_t dq50(const in R50 r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], q = BYTE(r.b.qs, e & 15u), qh = uint(r.b.qh[0]) | (uint(r.b.qh[1]) << 16);
  uint x = (e < 16u ? q & 15u : q >> 4) | (((qh >> e) & 1u) << 4);
  return to_h(float(int(x) - 16) * float(r.b.d));
}
float16_t dq51(const in R51 r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], q = BYTE(r.b.qs, e & 15u), qh = uint(r.b.qh[0]) | (uint(r.b.qh[1]) << 16);
  uint x = (e < 16u ? q & 15u : q >> 4) | (((qh >> e) & 1u) << 4);
  return to_h(float(x) * float(r.b.d) + float(r.b.m));
}
float16_t dq80(const in R80 r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1];
  return to_h(float(bitfieldExtract(int(BYTE(r.b.qs, e)), 0, 8)) * float(r.b.d));
}
// 6-bit scale and min of sub-block j (ggml's get_scale_min_k4), reading only
// the bytes it needs
#define SCALE_MIN(sc, j, s, m) {                                                  \
    if (j < 4u) {                                                                 \
      s = BYTE(sc, j) & 63u;                                                      \
      m = BYTE(sc, j + 4u) & 63u;                                                 \
    } else {                                                                      \
      uint a_ = BYTE(sc, j + 4u);                                                 \
      s = (a_ & 15u) | ((BYTE(sc, j - 4u) >> 6) << 4);                            \
      m = (a_ >> 4) | ((BYTE(sc, j) >> 6) << 4);                                  \
    }                                                                             \
  }
float16_t dq4k(const in R4K r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], j = e >> 5, s, m;
  SCALE_MIN(r.b.sc, j, s, m)
  uint q = (BYTE(r.b.qs, 32u * (j >> 1) + (e & 31u)) >> ((j & 1u) * 4u)) & 15u;
  float d1 = float(r.b.d) * float(s), m1 = float(r.b.dmin) * float(m);
  return to_h(d1 * float(q) - m1);
}
float16_t dq5k(const in R5K r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1], j = e >> 5, s, m;
  SCALE_MIN(r.b.sc, j, s, m)
  uint q = (BYTE(r.b.qs, 32u * (j >> 1) + (e & 31u)) >> ((j & 1u) * 4u)) & 15u;
  q += ((BYTE(r.b.qh, e & 31u) >> j) & 1u) << 4;
  float d1 = float(r.b.d) * float(s), m1 = float(r.b.dmin) * float(m);
  return to_h(d1 * float(q) - m1);
}
float16_t dq6k(const in R6K r, const in uint blk[2], const in uint within[2]) {
  // element 128 hf + 32 qq + l: ql byte 64 hf + 32 (qq & 1) + l (nibble qq >> 1),
  // qh byte 32 hf + l (bits 2 qq), scale 8 hf + 2 qq + l / 16
  uint e = within[1], hf = e >> 7, qq = (e >> 5) & 3u, l = e & 31u;
  uint lo = (BYTE(r.b.ql, 64u * hf + 32u * (qq & 1u) + l) >> ((qq >> 1) * 4u)) & 15u;
  uint hi = (BYTE(r.b.qh, 32u * hf + l) >> (2u * qq)) & 3u;
  int sc = bitfieldExtract(int(BYTE(r.b.sc, 8u * hf + 2u * qq + (l >> 4))), 0, 8);
  return to_h(float(r.b.d) * float(sc) * float(int(lo | (hi << 4)) - 32));
}

float16_t dq8k(const in R8K r, const in uint blk[2], const in uint within[2]) {
  uint e = within[1];
  return to_h(r.b.d * float(bitfieldExtract(int(BYTE(r.b.qs, e)), 0, 8)));
}

float epilogue(const in uint r, const in uint col, const in float v, const in uint n0) {
  float x = v * p.alpha;
  uint gn = n0 + col;
  if ((p.flags & 2u) != 0u && gn < p.N) x += bias[p.bias_off + gn];
  return x;
}

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

#define LOAD_A(la, k0) {                                                                                \
    if (A_T == 0u) coopMatLoadTensorNV(ah, ah16, p.a_off, sliceTensorLayoutNV(la, m0, BM, k0, BK));   \
    else coopMatLoadTensorNV(ah, ah16, p.a_off, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr);         \
  }
#define LOAD_B1(lw, k0, buf, fn) {                                                                      \
    if (W_ROW_IS_N == 1u) coopMatLoadTensorNV(bm, buf, 0, sliceTensorLayoutNV(lw, n0, BN, k0, BK), tr, fn); \
    else coopMatLoadTensorNV(bm, buf, 0, sliceTensorLayoutNV(lw, k0, BK, n0, BN), fn);                 \
  }
#define LOAD_B(lw, k0) {                                     \
    if (GT == GG_Q4_0) LOAD_B1(lw, k0, w40, dq40)            \
    else if (GT == GG_Q4_1) LOAD_B1(lw, k0, w41, dq41)       \
    else if (GT == GG_Q5_0) LOAD_B1(lw, k0, w50, dq50)       \
    else if (GT == GG_Q5_1) LOAD_B1(lw, k0, w51, dq51)       \
    else if (GT == GG_Q8_0) LOAD_B1(lw, k0, w80, dq80)       \
    else if (GT == GG_Q4_K) LOAD_B1(lw, k0, w4k, dq4k)       \
    else if (GT == GG_Q5_K) LOAD_B1(lw, k0, w5k, dq5k)       \
    else if (GT == GG_Q6_K) LOAD_B1(lw, k0, w6k, dq6k)       \
    else LOAD_B1(lw, k0, w8k, dq8k)                          \
  }

void main() {
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  uint a_d0 = A_T == 0u ? p.M : p.K, a_d1 = A_T == 0u ? p.K : p.M, a_st = A_T == 0u ? p.a_sm : p.a_sk;
  uint qb = gg_block();
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

  ACC sum = ACC(0.0);
  if (SHB != 0u && W_ROW_IS_N == 1u) {
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    la = setTensorLayoutDimensionNV(la, a_d0, a_d1);
    la = setTensorLayoutStrideNV(la, a_st, 1);
    const uint PPR = BK / 32u;  // 32-element pieces a row of the tile
    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
      barrier();  // the previous tile is consumed
      for (uint pc = gl_LocalInvocationID.x; pc < BN * PPR; pc += NT) {
        uint nn = pc % BN, part = pc / BN, gn = n0 + nn, kk = k0 + 32u * part;
        float w[32];
        if (gn < p.N && kk < p.K) {
          gg_unit(0u, gn * p.row_bytes, kk >> 5, w);
        } else {
          [[unroll]] for (uint i = 0u; i < 32u; i++) w[i] = 0.0;
        }
        [[unroll]] for (uint i = 0u; i < 32u; i++) bsh[(32u * part + i) * BN + nn] = to_h(w[i]);
      }
      barrier();
      MA ah;
      MB bm;
      LOAD_A(la, k0)
      coopMatLoad(bm, bsh, 0, BN, gl_CooperativeMatrixLayoutRowMajor);
      sum = coopMatMulAdd(ah, bm, sum);
    }
  } else {
    bool inside = m0 + BM <= p.M && n0 + BN <= p.N && p.K % BK == 0u;
    if (inside) {
      tensorLayoutNV<2> la = createTensorLayoutNV(2);
      la = setTensorLayoutDimensionNV(la, a_d0, a_d1);
      la = setTensorLayoutStrideNV(la, a_st, 1);
      tensorLayoutNV<2> lw = createTensorLayoutNV(2);
      lw = setTensorLayoutBlockSizeNV(lw, 1, qb);
      lw = setTensorLayoutDimensionNV(lw, p.w_rows, p.w_cols);
      lw = setTensorLayoutStrideNV(lw, p.w_bpr, 1);
      for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        MA ah;
        MB bm;
        LOAD_A(la, k0)
        LOAD_B(lw, k0)
        sum = coopMatMulAdd(ah, bm, sum);
      }
    } else {
      tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
      la = setTensorLayoutDimensionNV(la, a_d0, a_d1);
      la = setTensorLayoutStrideNV(la, a_st, 1);
      tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lw =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
      lw = setTensorLayoutBlockSizeNV(lw, 1, qb);
      lw = setTensorLayoutDimensionNV(lw, p.w_rows, p.w_cols);
      lw = setTensorLayoutStrideNV(lw, p.w_bpr, 1);
      for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        MA ah;
        MB bm;
        LOAD_A(la, k0)
        LOAD_B(lw, k0)
        sum = coopMatMulAdd(ah, bm, sum);
      }
    }
  }

  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
    createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lc = setTensorLayoutDimensionNV(lc, p.M, p.N);
  lc = setTensorLayoutStrideNV(lc, p.c_sm, 1);
  if (p.alpha != 1.0 || (p.flags & 2u) != 0u)
    coopMatPerElementNV(sum, sum, epilogue, n0);
  if ((p.flags & 1u) != 0u) {
    ACC old;
    coopMatLoadTensorNV(old, c, p.c_off, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    sum = sum + old;
  }
  coopMatStoreTensorNV(sum, c, p.c_off, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
}
