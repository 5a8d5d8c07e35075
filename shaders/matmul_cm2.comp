#version 450
#extension GL_GOOGLE_include_directive : require
// Tensor-core matmul through VK_NV_cooperative_matrix2 (NVIDIA): same
// contract and push constants as matmul.comp (C[b] = alpha * A[b] · B[b]
// (+ bias) (+= C)). The whole workgroup owns one BM x BN f32 accumulator;
// the driver stages the operands through shared memory itself. Operands go
// in as f16 (A, f32 in memory, clamped to ±65504 and rounded, usually by a
// copy to_f16.comp made first; an f16 B directly, a bf16 B through a decode
// function that clamps and rounds the same way), with f32 accumulation. Loads are tensor-addressed: a transposed view reads an
// operand stored the other way round, and clamp-mode layouts (zero outside
// the matrix) take the tiles on the edges and a K that is not a multiple of
// BK, so no separate edge kernel exists. Tiles fully inside the matrix run
// on unclamped layouts (no bounds checks).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#ifdef HN_RTE
// matmul_cm2_rte (the host takes it where the device can round 16-bit
// conversions to nearest even and keep f16 subnormals): a conversion to f16
// then gives hn_round_f16's result (the same ties, ±Inf past the range,
// the subnormal grid) in one instruction, so fp16 autocast's operand and
// result rounding and the bias need no loop over the accumulator's elements
// (the epilogue is then matrix arithmetic and conversions only).
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(capabilities = [4467], 4462, 16);  // RoundingModeRTE, 16-bit
spirv_execution_mode(capabilities = [4464], 4459, 16);  // DenormPreserve, 16-bit
const bool RTE = true;
#else
const bool RTE = false;
#endif
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint BDT = 1;  // HN_DT_F16 or HN_DT_BF16
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 64;
layout(constant_id = 4) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(local_size_x_id = 4) in;
// 0: A(m, k) at m * a_sm + k (rows along k); 1: at k * a_sk + m.
layout(constant_id = 5) const uint A_T = 0;
// 0: B(k, n) at n * b_sn + k (a [N, K] weight); 1: at k * b_sk + n.
layout(constant_id = 6) const uint B_T = 0;
// How A becomes f16 (the same numbers each way; the host picks the fastest):
// 0: an f32 load into an accumulator and a conversion; 1: a decode
// function; 2: A is already f16 in memory (to_f16.comp made the copy).
layout(constant_id = 7) const uint A_MODE = 2;
// 1: the host checked that the operands' offsets and row strides are
// multiples of 16 bytes; masking them here lets the compiler prove it and use
// 16-byte loads on the unclamped path (as llama.cpp does).
layout(constant_id = 8) const uint ALIGNED = 0;
// 1: fp16 autocast (--precision fp16 training): operands are rounded to f16
// (hn_round_f16: ±Inf past its range, where inference clamps to ±65504), an
// f32 B too (BDT = HN_DT_F32, through decode_f32), and each result
// (alpha · A·B + f16(bias)) is rounded to f16 before it is stored or added
// to C, as PyTorch's fp16 autocast stores a matmul's output.
layout(constant_id = 9) const uint F16 = 0;
// BK steps per iteration of the K loop on the unclamped path (unrolled, so
// the driver can issue the next step's loads before this step's multiply,
// as llama.cpp's kernel does with 8).
layout(constant_id = 10) const uint UNROLL = 1;
// > 1: workgroups walk the tiles in groups of SWZ tile rows, column by
// column inside a group (the linear workgroup id remapped), so that the
// workgroups resident at one time share operand tiles in L2.
layout(constant_id = 11) const uint SWZ = 0;
// 1: a gated MLP's gate and up projections in one pass: B is the gate's
// weight, binding 4 the up one's (same dtype and layout), and each element
// of C becomes act(x·Wgᵀ) * (x·Wuᵀ), clamped to ±65504 and stored f16 (the
// down projection's operand): C is then an f16 [M, N] at c_off halves, rows
// c_sm apart. No bias, alpha 1, no accumulate, no split-K. ACT: HnActivation.
layout(constant_id = 12) const uint GLU = 0;
layout(constant_id = 13) const uint ACT = 1;
// 1: an epilogue that treats every element alike (alpha, fp16 autocast's
// rounding, the gated product; no bias) loops over this invocation's own
// elements of the accumulators instead of coopMatPerElementNV, which hands
// each element its row and column (HN_CM2_EPI=callback: 0, for A/B).
layout(constant_id = 14) const uint EPI_LOOP = 1;
// 1: C is f16 [M, N] at c_off halves (fp16 autocast, whose results are f16
// values already: stored exactly, as the gated epilogue stores); no
// accumulate, no split-K.
layout(constant_id = 15) const uint C_F16 = 0;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer Ah { float16_t ah16[]; };
layout(std430, binding = 1) readonly buffer Bh { float16_t bh[]; };
layout(std430, binding = 1) readonly buffer Bb { uint16_t bb[]; };
layout(std430, binding = 1) readonly buffer Bf { float bf[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) readonly buffer Bias16 { float16_t bias16[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(std430, binding = 3) buffer C16 { float16_t c16[]; };
layout(std430, binding = 4) readonly buffer B2h { float16_t b2h[]; };
layout(std430, binding = 4) readonly buffer B2b { uint16_t b2b[]; };
layout(std430, binding = 4) readonly buffer B2f { float b2f[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint b_off; uint c_off; uint bias_off;
  uint a_sb; uint a_sm; uint a_sk;
  uint b_sb; uint b_sk; uint b_sn;
  uint c_sb; uint c_sm;
  float alpha; uint flags;  // 1 = accumulate, 2 = has bias
  // split-K: workgroup z = batch * splits + split reads K [split * k_split,
  // min(K, (split + 1) * k_split)) and stores its partial product at
  // c_off + split * c_ss (matmul_splitk.comp sums them); splits 1: whole K.
  uint splits; uint k_split; uint c_ss;
  uint bias_sb;  // elements between the biases of the batch's products (hn_op_matmul_stacked)
} p;

layout(buffer_reference, std430, buffer_reference_align = 2) buffer Bf16Elem { uint16_t v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Elem { float v; };

// (its every use feeds a further f16 conversion, so under RTE a compiler that
// folds the round trip float(float16_t(x)) to x still gives the same f16)
float to_f16_range(float x) {
  if (F16 == 1u) return RTE ? float(float16_t(x)) : hn_round_f16(x);
  return clamp(x, -65504.0, 65504.0);
}

float16_t decode_bf16(const in Bf16Elem e, const in uint block[2], const in uint within[2]) {
  float v = uintBitsToFloat(uint(e.v) << 16);
  // (under RTE a conversion rounds as hn_round_f16: the tied LM head, which
  // stays bf16, ran its fp16 LoRA chunks 3.4x faster so, H100 2026-12-07e)
  if (RTE && F16 == 1u) return float16_t(v);
  return float16_t(to_f16_range(v));
}

float16_t decode_f32(const in F32Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(to_f16_range(e.v));
}

uint g_bias_base;  // this product's bias (p.bias_off + batch * p.bias_sb)

// alpha and the bias, element (r, col) of the tile whose first column is n0.
float epilogue(const in uint r, const in uint col, const in float v, const in uint n0) {
  float x = v * p.alpha;
  uint gn = n0 + col;
  if ((p.flags & 2u) != 0u && gn < p.N) x += F16 == 1u ? hn_round_f16(bias[g_bias_base + gn]) : bias[g_bias_base + gn];
  return F16 == 1u ? hn_round_f16(x) : x;
}

// the gated epilogue: act(gate) * up, in f16 range
float glu_elem(const in uint r, const in uint col, const in float g, const in float u) {
  return clamp(hn_act(ACT, g) * u, -65504.0, 65504.0);
}

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define ACC16 coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAF coopmat<float, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseAccumulator>
#define MB coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

// One BK step at k0 through layouts la / lb (clamped or not).
#define STEP(la, lb, k0, abase, bbase) {                                                              \
    MA ah;                                                                              \
    if (A_MODE == 2u) {                                                                 \
      if (A_T == 0u) coopMatLoadTensorNV(ah, ah16, abase, sliceTensorLayoutNV(la, m0, BM, k0, BK)); \
      else coopMatLoadTensorNV(ah, ah16, abase, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr); \
    } else if (A_MODE == 1u) {                                                          \
      if (A_T == 0u) coopMatLoadTensorNV(ah, a, abase, sliceTensorLayoutNV(la, m0, BM, k0, BK), decode_f32); \
      else coopMatLoadTensorNV(ah, a, abase, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr, decode_f32); \
    } else {                                                                            \
      MAF af;                                                                           \
      if (A_T == 0u) coopMatLoadTensorNV(af, a, abase, sliceTensorLayoutNV(la, m0, BM, k0, BK)); \
      else coopMatLoadTensorNV(af, a, abase, sliceTensorLayoutNV(la, k0, BK, m0, BM), tr); \
      if (!RTE || F16 == 0u)                                                            \
        [[unroll]] for (int i = 0; i < af.length(); i++) af[i] = to_f16_range(af[i]);   \
      ah = MA(af);                                                                      \
    }                                                                                   \
    MB bm;                                                                              \
    LOADB(bm, bh, bb, bf, bbase, lb, k0)                                                \
    sum = coopMatMulAdd(ah, bm, sum);                                                   \
    if (GLU == 1u) {                                                                    \
      MB bm2;                                                                           \
      LOADB(bm2, b2h, b2b, b2f, b2base, lb, k0)                                         \
      sum2 = coopMatMulAdd(ah, bm2, sum2);                                              \
    }                                                                                   \
  }

// B's tile at k0 from the buffer views h (f16), b (bf16), f (f32) of one binding
#define LOADB(m, h, b, f, base, lb, k0)                                                 \
    if (BDT == HN_DT_F16) {                                                             \
      if (B_T == 0u) coopMatLoadTensorNV(m, h, base, sliceTensorLayoutNV(lb, n0, BN, k0, BK), tr); \
      else coopMatLoadTensorNV(m, h, base, sliceTensorLayoutNV(lb, k0, BK, n0, BN)); \
    } else if (BDT == HN_DT_F32) {                                                      \
      if (B_T == 0u) coopMatLoadTensorNV(m, f, base, sliceTensorLayoutNV(lb, n0, BN, k0, BK), tr, decode_f32); \
      else coopMatLoadTensorNV(m, f, base, sliceTensorLayoutNV(lb, k0, BK, n0, BN), decode_f32); \
    } else {                                                                            \
      if (B_T == 0u) coopMatLoadTensorNV(m, b, base, sliceTensorLayoutNV(lb, n0, BN, k0, BK), tr, decode_bf16); \
      else coopMatLoadTensorNV(m, b, base, sliceTensorLayoutNV(lb, k0, BK, n0, BN), decode_bf16); \
    }

void main() {
  uint tn = gl_WorkGroupID.x, tm = gl_WorkGroupID.y;
  if (SWZ > 1u) {
    uint gx = gl_NumWorkGroups.x, lin = gl_WorkGroupID.y * gx + gl_WorkGroupID.x;
    uint first = lin / (SWZ * gx) * SWZ, rows = min(gl_NumWorkGroups.y - first, SWZ);
    uint w = lin - first * gx;
    tm = first + w % rows;
    tn = w / rows;
  }
  uint n0 = tn * BN, m0 = tm * BM;
  uint batch = gl_WorkGroupID.z / p.splits, split = gl_WorkGroupID.z % p.splits;
  uint abase = p.a_off + batch * p.a_sb, bbase = p.b_off + batch * p.b_sb;
  uint cbase = p.c_off + batch * p.c_sb + split * p.c_ss;
  g_bias_base = p.bias_off + batch * p.bias_sb;
  // this workgroup's K range; the layouts end at k_end, so a clamped load
  // past it reads zeros
  uint k_begin = split * p.k_split, k_end = min(p.K, k_begin + p.k_split);

  // A as stored: [M, K] (A_T 0) or [K, M]; B as stored: [N, K] (B_T 0) or [K, N].
  uint a_d0 = A_T == 0u ? p.M : k_end, a_d1 = A_T == 0u ? k_end : p.M, a_st = A_T == 0u ? p.a_sm : p.a_sk;
  uint b_d0 = B_T == 0u ? p.N : k_end, b_d1 = B_T == 0u ? k_end : p.N, b_st = B_T == 0u ? p.b_sn : p.b_sk;
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

  ACC sum = ACC(0.0), sum2 = ACC(0.0);
  // GLU: the up projection's weight from element bias_off of binding 4
  uint b2base = GLU == 1u ? p.bias_off : 0u;
  // p.k_split is a multiple of BK * UNROLL whenever splits > 1 (the host sees to it)
  bool inside = m0 + BM <= p.M && n0 + BN <= p.N && (k_end - k_begin) % BK == 0u;
  if (inside) {
    uint am = ALIGNED == 1u ? (A_MODE == 2u ? ~7u : ~3u) : ~0u;
    uint bmk = ALIGNED == 1u ? (BDT == HN_DT_F32 ? ~3u : ~7u) : ~0u;
    uint abase_al = abase & am, bbase_al = bbase & bmk;
    b2base &= bmk;
    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    tensorLayoutNV<2> lb = createTensorLayoutNV(2);
    la = setTensorLayoutDimensionNV(la, a_d0, a_d1);
    la = setTensorLayoutStrideNV(la, a_st & am, 1);
    lb = setTensorLayoutDimensionNV(lb, b_d0, b_d1);
    lb = setTensorLayoutStrideNV(lb, b_st & bmk, 1);
    // (a multiple of BK: masking tells the compiler so when BK is a power of two)
    uint k0 = ALIGNED == 1u && (BK & (BK - 1u)) == 0u ? k_begin & ~(BK - 1u) : k_begin;
    const uint UK = BK * UNROLL;
    for (; k0 + UK <= k_end;) {
      [[unroll]] for (uint j = 0u; j < UNROLL; j++) {
        STEP(la, lb, k0, abase_al, bbase_al)
        k0 += BK;
      }
    }
    for (; k0 < k_end; k0 += BK)
      STEP(la, lb, k0, abase_al, bbase_al)
  } else {
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    la = setTensorLayoutDimensionNV(la, a_d0, a_d1);
    la = setTensorLayoutStrideNV(la, a_st, 1);
    lb = setTensorLayoutDimensionNV(lb, b_d0, b_d1);
    lb = setTensorLayoutStrideNV(lb, b_st, 1);
    for (uint k0 = k_begin; k0 < k_end; k0 += BK)
      STEP(la, lb, k0, abase, bbase)
  }

  // C: [M, N] rows c_sm apart; the clamped layout drops stores outside.
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
    createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lc = setTensorLayoutDimensionNV(lc, p.M, p.N);
  lc = setTensorLayoutStrideNV(lc, p.c_sm, 1);
  if (GLU == 1u) {
    if (EPI_LOOP == 1u) {
      // sum and sum2 share one type, so element i of each is the same (row, column)
      [[unroll]] for (int i = 0; i < sum.length(); i++) sum[i] = clamp(hn_act(ACT, sum[i]) * sum2[i], -65504.0, 65504.0);
    } else
      coopMatPerElementNV(sum, sum, glu_elem, sum2);
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h = coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(sum);
    coopMatStoreTensorNV(h, c16, cbase, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    return;
  }
  // a split's partial product stays unrounded: matmul_splitk.comp rounds the
  // sum (rounding each partial too lost the low bits of a cancelling sum:
  // test-back-ops /back-ops/matmul-f16 on the H200, 2026-12-03l)
  if (RTE && EPI_LOOP == 1u) {
    // alpha · A·B + bias (f16(bias) under autocast), rounded by the f16
    // store's conversion. The bias as a matrix: a layout whose rows are 0
    // elements apart reads element n0 + c of it for every row of the tile;
    // under autocast the host hands an f16 copy of it (to_f16.comp's
    // rounding), which widens exactly. (A conversion to f16 and back, here
    // or on an f32 C, is folded away by NVIDIA's compiler: the values came
    // out unrounded, H100 2026-12-07e; so an f32 C keeps the integer rounding.)
    if (p.alpha != 1.0) sum = sum * p.alpha;
    if ((p.flags & 2u) != 0u) {
      tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lbias =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
      lbias = setTensorLayoutDimensionNV(lbias, p.M, p.N);
      lbias = setTensorLayoutStrideNV(lbias, 0, 1);
      ACC bmat;
      if (F16 == 1u) {
        ACC16 b16;
        coopMatLoadTensorNV(b16, bias16, g_bias_base, sliceTensorLayoutNV(lbias, m0, BM, n0, BN));
        bmat = ACC(b16);
      } else
        coopMatLoadTensorNV(bmat, bias, g_bias_base, sliceTensorLayoutNV(lbias, m0, BM, n0, BN));
      sum = sum + bmat;
    }
    if (F16 == 1u && p.splits == 1u && C_F16 == 0u)
      [[unroll]] for (int i = 0; i < sum.length(); i++) sum[i] = hn_round_f16(sum[i]);
  } else if ((F16 == 1u && p.splits == 1u) || p.alpha != 1.0 || (p.flags & 2u) != 0u) {
    if (EPI_LOOP == 1u && (p.flags & 2u) == 0u) {
      bool rnd = F16 == 1u && p.splits == 1u;
      [[unroll]] for (int i = 0; i < sum.length(); i++) {
        float x = sum[i] * p.alpha;
        sum[i] = rnd ? hn_round_f16(x) : x;
      }
    } else
      coopMatPerElementNV(sum, sum, epilogue, n0);
  }
  if (C_F16 == 1u) {
    ACC16 h = ACC16(sum);
    coopMatStoreTensorNV(h, c16, cbase, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    return;
  }
  if ((p.flags & 1u) != 0u) {
    ACC old;
    coopMatLoadTensorNV(old, c, cbase, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    sum = sum + old;
  }
  coopMatStoreTensorNV(sum, c, cbase, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
}
