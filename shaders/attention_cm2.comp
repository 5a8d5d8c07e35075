#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention forward for many queries on VK_NV_cooperative_matrix2:
// same contract and push constants as attention_prefill.comp. One workgroup
// per block of BR queries of one head; keys in blocks of BC. The two
// products run on the tensor cores with f16 operands (q, k, v clamped to
// ±65504 and rounded, as PyTorch's fp16 autocast feeds them) and f32
// accumulation: S = Q·Kᵀ, then O += P·V. The online softmax between them
// (masking, soft-capping, ALiBi, sinks, the running max and sum) is scalar
// f32 over S in shared memory, four invocations per query row. Key blocks
// past the block's last query (causal) or before its first query's window
// are skipped. Head dims D = Dv = HD (64 or 128). With flags & 16 the
// row's log-sum-exp of its (scaled, masked) scores goes to binding 6 for
// the flash-attention backward (attention_back_cm2_*.comp).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(constant_id = 1) const uint HD = 64;
layout(constant_id = 2) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(local_size_x_id = 2) in;
const uint BR = 64u, BC = 64u;
const uint TPR = NT / BR;       // invocations per query row (4 at 256)
const uint CPT = BC / TPR;      // score columns per invocation

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float kf[]; };
layout(std430, binding = 1) readonly buffer Kh { float16_t kh[]; };
layout(std430, binding = 1) readonly buffer Kb { uint16_t kb[]; };
layout(std430, binding = 2) readonly buffer V { float vf[]; };
layout(std430, binding = 2) readonly buffer Vh { float16_t vh[]; };
layout(std430, binding = 2) readonly buffer Vb { uint16_t vb[]; };
layout(std430, binding = 3) readonly buffer S { float slopes[]; };
layout(std430, binding = 4) readonly buffer Mk { float mask[]; };
layout(std430, binding = 5) buffer O { float o[]; };
layout(std430, binding = 6) writeonly buffer L { float lse[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint n_ctx; uint n_kv;
  int pos0; uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint s_off; uint m_off;
  uint flags;  // 1 = alibi slopes, 2 = mask, 4 = sinks (in the slopes binding), 16 = write the LSE
  uint mask_B; uint mask_T; uint mask_cols;
  uint chunk; uint n_split; uint dyn_off; uint lse_off;
} p;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Elem { float v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16Elem { float16_t v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer Bf16Elem { uint16_t v; };

float16_t dec_f32(const in F32Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(clamp(e.v, -65504.0, 65504.0));
}
float16_t dec_bf16(const in Bf16Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(clamp(uintBitsToFloat(uint(e.v) << 16), -65504.0, 65504.0));
}

shared float ss[BR * BC];          // this key block's scores
shared float16_t sp[BR * BC];      // its probabilities, the A operand of P·V
shared float rowf[BR];             // per row: the rescale of O (then 1 / l)

float scale_rows(const in uint r, const in uint c, const in float v) { return v * rowf[r]; }

#define SQ coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>
#define OA coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator>

void main() {
  uint qb0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint tid = gl_LocalInvocationID.x, r = tid / TPR, part = tid % TPR;
  uint kvh = h / (p.H / p.KVH);
  uint t = qb0 + r;
  bool live = t < p.T;
  int pos = p.pos0 + int(t);

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  // q rows of head h: [T, D] with rows H * D apart; k, v: [n_kv, D] rows KVH * D apart.
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lq = setTensorLayoutDimensionNV(lq, p.T, HD);
  lq = setTensorLayoutStrideNV(lq, p.H * HD, 1);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lkv = setTensorLayoutDimensionNV(lkv, p.n_kv, HD);
  lkv = setTensorLayoutStrideNV(lkv, p.KVH * HD, 1);
  uint qbase = p.q_off + (b * p.T * p.H + h) * HD;
  uint kbase = p.k_off + (b * p.n_ctx * p.KVH + kvh) * HD;
  uint vbase = p.v_off + (b * p.n_ctx * p.KVH + kvh) * HD;

  coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseA> qm;
  coopMatLoadTensorNV(qm, q, qbase, sliceTensorLayoutNV(lq, qb0, BR, 0, HD), dec_f32);
  OA acc = OA(0.0);

  float slope = (p.flags & 1u) != 0u ? slopes[p.s_off + h] : 0.0;
  uint mrow = 0u;
  if ((p.flags & 2u) != 0u) {
    uint mb = p.mask_B == 1u ? 0u : b;
    uint mt = p.mask_T == 1u ? 0u : min(t, p.T - 1u);
    mrow = p.m_off + (mb * p.mask_T + mt) * p.mask_cols;
  }
  float m_run = HN_NEG_INF, l_run = 0.0;
  if ((p.flags & 4u) != 0u) { m_run = slopes[p.s_off + h]; l_run = 1.0; }

  // Keys any query of the block can see: [j_lo, n_keys).
  uint n_keys = p.n_kv;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BR, p.T)), 0, int(p.n_kv)));
  uint j_lo = 0u;
  if (p.window > 0u) j_lo = uint(clamp(p.pos0 + int(qb0) - int(p.window) + 1, 0, int(n_keys))) / BC * BC;

  for (uint j0 = j_lo; j0 < n_keys; j0 += BC) {
    coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> km;
    if (KVDT == HN_DT_F32) coopMatLoadTensorNV(km, kf, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_f32);
    else if (KVDT == HN_DT_F16) coopMatLoadTensorNV(km, kh, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr);
    else coopMatLoadTensorNV(km, kb, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_bf16);
    SQ s = SQ(0.0);
    s = coopMatMulAdd(qm, km, s);
    coopMatStore(s, ss, 0, BC, gl_CooperativeMatrixLayoutRowMajor);
    barrier();

    // The row's scores, masked; the running max and sum over TPR invocations.
    float sv[CPT];
    float bm = HN_NEG_INF;
    [[unroll]] for (uint i = 0u; i < CPT; i++) {
      uint c = part * CPT + i, j = j0 + c;
      float x = HN_NEG_INF;
      bool visible = live && j < n_keys && !(p.causal != 0u && int(j) > pos) &&
                     !(p.window > 0u && int(j) <= pos - int(p.window));
      if (visible) {
        x = ss[r * BC + c] * p.scale;
        if (p.softcap > 0.0) x = p.softcap * hn_tanh(x / p.softcap);
        if ((p.flags & 1u) != 0u) x += slope * float(int(j) - pos);
        if ((p.flags & 2u) != 0u) x += mask[mrow + j];
      }
      sv[i] = x;
      bm = max(bm, x);
    }
    [[unroll]] for (uint w = 1u; w < TPR; w *= 2u) bm = max(bm, subgroupShuffleXor(bm, w));
    float m_new = max(m_run, bm);
    float corr = 1.0, lsum = 0.0;
    if (m_new != HN_NEG_INF) {
      corr = m_run == HN_NEG_INF ? 0.0 : exp(m_run - m_new);
      [[unroll]] for (uint i = 0u; i < CPT; i++) {
        float pj = sv[i] == HN_NEG_INF ? 0.0 : exp(sv[i] - m_new);
        lsum += pj;
        sp[r * BC + part * CPT + i] = float16_t(pj);
      }
      m_run = m_new;
    } else {
      [[unroll]] for (uint i = 0u; i < CPT; i++) sp[r * BC + part * CPT + i] = float16_t(0.0);
    }
    [[unroll]] for (uint w = 1u; w < TPR; w *= 2u) lsum += subgroupShuffleXor(lsum, w);
    l_run = l_run * corr + lsum;
    if (part == 0u) rowf[r] = corr;
    barrier();

    coopMatPerElementNV(acc, acc, scale_rows);
    coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pm;
    coopMatLoad(pm, sp, 0, BC, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vm;
    if (KVDT == HN_DT_F32) coopMatLoadTensorNV(vm, vf, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_f32);
    else if (KVDT == HN_DT_F16) coopMatLoadTensorNV(vm, vh, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
    else coopMatLoadTensorNV(vm, vb, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_bf16);
    acc = coopMatMulAdd(pm, vm, acc);
    barrier();  // ss, sp and rowf are written again by the next block
  }

  if (part == 0u) rowf[r] = l_run > 0.0 ? 1.0 / l_run : 0.0;
  if (part == 0u && live && (p.flags & 16u) != 0u)
    lse[p.lse_off + (b * p.T + t) * p.H + h] = l_run > 0.0 ? m_run + log(l_run) : 0.0;
  barrier();
  coopMatPerElementNV(acc, acc, scale_rows);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lo = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lo = setTensorLayoutDimensionNV(lo, p.T, HD);
  lo = setTensorLayoutStrideNV(lo, p.H * HD, 1);
  coopMatStoreTensorNV(acc, o, p.o_off + (b * p.T * p.H + h) * HD, sliceTensorLayoutNV(lo, qb0, BR, 0, HD));
}
