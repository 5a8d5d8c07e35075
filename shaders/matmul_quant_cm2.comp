#version 450
#extension GL_GOOGLE_include_directive : require
// The tensor-core form of matmul_quant.comp through VK_NV_cooperative_matrix2:
// C = alpha * A · B (+ bias[n]) (+= C) with B a frozen quantized weight W
// [w_rows, w_cols] (engine/tensor/quant.h has the layouts). W is dequantized
// by a decode function as the driver loads each tile: the tensor layout over
// W carries the block size (64 codes of NF4, 4 bytes of int8) and the
// callback gets a reference to the block plus its coordinates, from which it
// finds the block's absmax (or the row's scale). No full-precision copy of W
// exists anywhere. B(k, n) = W[n, k] when W_ROW_IS_N (y = x·Wᵀ, the forward:
// W's rows loaded transposed) and W[k, n] otherwise (dx = dy·W, the input
// gradient). The layout over W is the same either way: blocks run along W's
// rows. A as f16 (a copy made by to_f16.comp, or f32 converted by a decode
// function), W's values rounded to f16 (clamped to ±65504), f32 accumulation.
// Needs w_cols a multiple of the block (64 for NF4, 4 for int8): the host
// checks it and takes matmul_quant.comp otherwise.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#include "common.glsl"
layout(constant_id = 0) const uint QDT = 0;  // 0 = NF4, 1 = NF4 with double-quantized absmax, 2 = int8 per row
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 64;
layout(constant_id = 4) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(local_size_x_id = 4) in;
// 0: A(m, k) at m * a_sm + k; 1: at k * a_sk + m.
layout(constant_id = 5) const uint A_T = 0;
// 1: B(k, n) = W[n, k]; 0: B(k, n) = W[k, n].
layout(constant_id = 6) const uint W_ROW_IS_N = 1;
// 1: A is f16 in memory (to_f16.comp's copy); 0: f32, converted by a decode function.
layout(constant_id = 7) const uint A_F16 = 1;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer Ah { float16_t ah16[]; };
struct Nf4Block { uint qs[8]; };  // 64 codes, two a byte, element 2i in the high nibble
layout(std430, binding = 1) readonly buffer Wn { Nf4Block wn[]; };
layout(std430, binding = 1) readonly buffer Wq { uint qw[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint a_sm; uint a_sk;
  uint c_off; uint c_sm; uint bias_off;
  uint flags;  // 1 = accumulate, 2 = has bias
  float alpha;
  uint w_rows; uint w_cols; uint w_bpr;  // blocks a row of W: w_cols / 64 (NF4) or / 4 (int8)
  uint scale_w; uint scale2_w; uint offset_w; uint table_w;  // word offsets of the sections
} p;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Nf4Ref { uint qs[8]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Q8Ref { uint v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Elem { float v; };

const float NF4[16] = float[16](
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
  -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
  0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);
shared float nf4_sh[16];  // the code table, indexed per element (a constant array would serialize)

float wf(uint word) { return uintBitsToFloat(qw[word]); }

// blk: the block's indices (row of W, block along the row: column / 64, as
// the H200's driver passes them, test-quant's tensor-core cases check it);
// within: (0, element in the block).
float16_t decode_nf4(const in Nf4Ref bl, const in uint blk[2], const in uint within[2]) {
  uint e = within[1];
  uint code = (bl.qs[e >> 3] >> (((e & 7u) >> 1) * 8u + ((e & 1u) == 0u ? 4u : 0u))) & 15u;
  uint b = blk[0] * p.w_bpr + blk[1];
  float absmax;
  if (QDT == 0u) {
    absmax = wf(p.scale_w + b);
  } else {
    uint q = (qw[p.scale_w + (b >> 2)] >> ((b & 3u) * 8u)) & 255u;
    absmax = wf(p.table_w + q) * wf(p.scale2_w + (b >> 8)) + wf(p.offset_w);
  }
  return float16_t(clamp(nf4_sh[code] * absmax, -65504.0, 65504.0));
}

float16_t decode_q8(const in Q8Ref bl, const in uint blk[2], const in uint within[2]) {
  int q = bitfieldExtract(int(bl.v), int(within[1] * 8u), 8);
  return float16_t(clamp(float(q) * wf(p.scale_w + blk[0]), -65504.0, 65504.0));
}

float16_t decode_f32(const in F32Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(clamp(e.v, -65504.0, 65504.0));
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

#define LOAD_A(la, k0) {                                                                                  \
    if (A_F16 == 1u) {                                                                                   \
      if (A_T == 0u) coopMatLoadTensorNV(ah, ah16, p.a_off, sliceTensorLayoutNV(la, m0, BM, k0, BK));   \
      else coopMatLoadTensorNV(ah, ah16, p.a_off, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr);         \
    } else {                                                                                             \
      if (A_T == 0u) coopMatLoadTensorNV(ah, a, p.a_off, sliceTensorLayoutNV(la, m0, BM, k0, BK), decode_f32); \
      else coopMatLoadTensorNV(ah, a, p.a_off, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr, decode_f32); \
    }                                                                                                    \
  }

#define LOAD_B(lw, k0) {                                                                                  \
    if (QDT == 2u) {                                                                                     \
      if (W_ROW_IS_N == 1u) coopMatLoadTensorNV(bm, qw, 0, sliceTensorLayoutNV(lw, n0, BN, k0, BK), tr, decode_q8); \
      else coopMatLoadTensorNV(bm, qw, 0, sliceTensorLayoutNV(lw, k0, BK, n0, BN), decode_q8);          \
    } else {                                                                                             \
      if (W_ROW_IS_N == 1u) coopMatLoadTensorNV(bm, wn, 0, sliceTensorLayoutNV(lw, n0, BN, k0, BK), tr, decode_nf4); \
      else coopMatLoadTensorNV(bm, wn, 0, sliceTensorLayoutNV(lw, k0, BK, n0, BN), decode_nf4);         \
    }                                                                                                    \
  }

void main() {
  if (gl_LocalInvocationID.x < 16u) nf4_sh[gl_LocalInvocationID.x] = NF4[gl_LocalInvocationID.x];
  barrier();
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  uint a_d0 = A_T == 0u ? p.M : p.K, a_d1 = A_T == 0u ? p.K : p.M, a_st = A_T == 0u ? p.a_sm : p.a_sk;
  uint qb = QDT == 2u ? 4u : 64u;
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

  ACC sum = ACC(0.0);
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
