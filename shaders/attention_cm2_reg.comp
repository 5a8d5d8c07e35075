#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention forward on VK_NV_cooperative_matrix2 with the online
// softmax in the matrices themselves (no shared-memory round trip of the
// scores): same contract, bindings and push constants as attention_cm2.comp,
// for what it covers without ALiBi, a mask or sinks (soft-cap, causal,
// windows, GQA, the log-sum-exp output). Per key block: S = Q·Kᵀ, masked
// and scaled element by element; the row maxima by a row reduction (smeared
// over the row), P = exp(S - M), the row sums as P·1 on the tensor cores
// (with the same f16 P that multiplies V), O rescaled by exp(M_old - M) and
// O += P·V. Masked scores are -FLT_MAX/2, not -inf, so a block where a row
// sees nothing yet gives exp(0) terms that the first visible key's rescale
// (exp(-FLT_MAX/2 - m) = 0) wipes out; every live row sees at least one key.
// With FAST (the default; 0 under HN_ATTN_CM2_OLD=1): the query blocks run
// longest first (causal: the last block sees the most keys) with the heads of
// one KV head side by side (their K/V tiles shared in L2), each tile's V load
// issued with its K·Q product and the next K tile's while the softmax runs
// (the loads' latency hidden, not waited on in turn), and key blocks that no
// row masks only scaled. BR x BC (the tile) from HN_ATTN_CM2_TILE.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint KVDT = 0;
layout(constant_id = 1) const uint HD = 64;
layout(constant_id = 2) const uint NT = 256;
layout(local_size_x_id = 2) in;
layout(constant_id = 3) const uint BR = 64;
layout(constant_id = 4) const uint BC = 64;
layout(constant_id = 5) const uint FAST = 1;
// 1: the element-wise steps that need no row or column (max, exp) loop over
// this invocation's own elements (matrices of one type share the mapping)
// instead of coopMatPerElementNV; 0 under HN_ATTN_CM2_EPI=callback (A/B)
layout(constant_id = 6) const uint EPI_LOOP = 1;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float kf[]; };
layout(std430, binding = 1) readonly buffer Kh { float16_t kh[]; };
layout(std430, binding = 1) readonly buffer Kb { uint16_t kb[]; };
layout(std430, binding = 2) readonly buffer V { float vf[]; };
layout(std430, binding = 2) readonly buffer Vh { float16_t vh[]; };
layout(std430, binding = 2) readonly buffer Vb { uint16_t vb[]; };
layout(std430, binding = 5) buffer O { float o[]; };
layout(std430, binding = 6) writeonly buffer L { float lse[]; };
layout(push_constant) uniform P {
  uint T; uint H; uint KVH; uint D; uint Dv; uint n_ctx; uint n_kv;
  int pos0; uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint o_off; uint s_off; uint m_off;
  uint flags;  // 16 = write the LSE (ALiBi, mask and sinks are attention_cm2.comp's)
  uint mask_B; uint mask_T; uint mask_cols;
  uint chunk; uint n_split; uint dyn_off; uint lse_off;
} p;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Elem { float v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer Bf16Elem { uint16_t v; };

float16_t dec_f32(const in F32Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(clamp(e.v, -65504.0, 65504.0));
}
float16_t dec_bf16(const in Bf16Elem e, const in uint block[2], const in uint within[2]) {
  return float16_t(clamp(uintBitsToFloat(uint(e.v) << 16), -65504.0, 65504.0));
}

const float NEG_BIG = -1.7014117e38;  // -FLT_MAX / 2
uint g_qb0, g_j0, g_n_keys;

float fa_score(const in uint r, const in uint c, const in float s) {
  uint t = g_qb0 + r, j = g_j0 + c;
  int pos = p.pos0 + int(t);
  if (t >= p.T || j >= g_n_keys || (p.causal != 0u && int(j) > pos) || (p.window > 0u && int(j) <= pos - int(p.window)))
    return NEG_BIG;
  float x = s * p.scale;
  if (p.softcap > 0.0) x = p.softcap * hn_tanh(x / p.softcap);
  return x;
}
float fa_max(const in float a, const in float b) { return max(a, b); }
float fa_smear(const in float a, const in float b) { return a; }
float fa_exp(const in uint r, const in uint c, const in float x) { return exp(x); }
float fa_max2(const in uint r, const in uint c, const in float a, const in float b) { return max(a, b); }
float fa_store_lse(const in uint r, const in uint c, const in float l, const in float m, const in uint base) {
  uint t = g_qb0 + r;
  if (c == 0u && t < p.T) lse[base + t * p.H] = l > 0.0 ? m + log(l) : 0.0;
  return l;
}

#define KV_LAYOUT tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
void load_k(out coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> km, const in uint kbase, const in KV_LAYOUT lkv,
            const in tensorViewNV<2, false, 1, 0> tr, const in uint j0) {
  if (KVDT == HN_DT_F32) coopMatLoadTensorNV(km, kf, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_f32);
  else if (KVDT == HN_DT_F16) coopMatLoadTensorNV(km, kh, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr);
  else coopMatLoadTensorNV(km, kb, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_bf16);
}
void load_v(out coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vm, const in uint vbase, const in KV_LAYOUT lkv,
            const in uint j0) {
  if (KVDT == HN_DT_F32) coopMatLoadTensorNV(vm, vf, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_f32);
  else if (KVDT == HN_DT_F16) coopMatLoadTensorNV(vm, vh, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
  else coopMatLoadTensorNV(vm, vb, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_bf16);
}

#define ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>

void main() {
  uint qb0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  if (FAST != 0u) {
    // the same grid renumbered: workgroups launch in x-then-y order, so the
    // first ones take every head's last (causal: longest) query block
    uint lin = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    qb0 = (gl_NumWorkGroups.x - 1u - lin / p.H) * BR;
    h = lin % p.H;
  }
  g_qb0 = qb0;
  uint kvh = h / (p.H / p.KVH);

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
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
  ACC(BR, HD) acc = ACC(BR, HD)(0.0);
  ACC(BR, BC) m_run = ACC(BR, BC)(NEG_BIG), l_run = ACC(BR, BC)(0.0);
  coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones = coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);

  uint n_keys = p.n_kv;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BR, p.T)), 0, int(p.n_kv)));
  g_n_keys = n_keys;
  uint j_lo = 0u;
  if (p.window > 0u) j_lo = uint(clamp(p.pos0 + int(qb0) - int(p.window) + 1, 0, int(n_keys))) / BC * BC;

  coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> km;
  coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vm;
  if (FAST != 0u) load_k(km, kbase, lkv, tr, j_lo);
  // the first key block past every row's causal reach (FAST: blocks before it
  // and at or after j_full need no mask when no window, and all rows live)
  uint j_full = p.pos0 + int(qb0) + 1 > 0 ? uint(p.pos0 + int(qb0) + 1) : 0u;
  bool maskless = p.window == 0u && qb0 + BR <= p.T && p.softcap <= 0.0;

  for (uint j0 = j_lo; j0 < n_keys; j0 += BC) {
    g_j0 = j0;
    if (FAST != 0u) load_v(vm, vbase, lkv, j0);
    else load_k(km, kbase, lkv, tr, j0);
    ACC(BR, BC) s = ACC(BR, BC)(0.0);
    s = coopMatMulAdd(qm, km, s);
    // the next K tile in flight while this one's softmax runs (the clamped
    // layout reads zeros past n_kv; the last one is never used)
    if (FAST != 0u && j0 + BC < n_keys) load_k(km, kbase, lkv, tr, j0 + BC);
    if (FAST != 0u && maskless && (p.causal == 0u || j0 + BC <= j_full) && j0 + BC <= n_keys) s = s * p.scale;
    else coopMatPerElementNV(s, s, fa_score);
    ACC(BR, BC) rmax, m_new, pmat, corr;
    coopMatReduceNV(rmax, s, gl_CooperativeMatrixReduceRowNV, fa_max);
    if (EPI_LOOP == 1u) {
      m_new = rmax;
      [[unroll]] for (int i = 0; i < m_new.length(); i++) m_new[i] = max(m_new[i], m_run[i]);
      pmat = s - m_new;
      corr = m_run - m_new;
      [[unroll]] for (int i = 0; i < pmat.length(); i++) {
        pmat[i] = exp(pmat[i]);
        corr[i] = exp(corr[i]);
      }
    } else {
      coopMatPerElementNV(m_new, rmax, fa_max2, m_run);
      coopMatPerElementNV(pmat, s - m_new, fa_exp);
      coopMatPerElementNV(corr, m_run - m_new, fa_exp);
    }
    m_run = m_new;
    coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa = coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(pmat);
    ACC(BR, BC) rsum = ACC(BR, BC)(0.0);
    rsum = coopMatMulAdd(pa, ones, rsum);
    l_run = corr * l_run + rsum;
    ACC(BR, HD) corr_o;
    coopMatReduceNV(corr_o, corr, gl_CooperativeMatrixReduceRowNV, fa_smear);
    acc = acc * corr_o;
    if (FAST == 0u) load_v(vm, vbase, lkv, j0);
    acc = coopMatMulAdd(pa, vm, acc);
  }

  if ((p.flags & 16u) != 0u) coopMatPerElementNV(l_run, l_run, fa_store_lse, m_run, p.lse_off + b * p.T * p.H + h);
  ACC(BR, HD) l_o;
  coopMatReduceNV(l_o, l_run, gl_CooperativeMatrixReduceRowNV, fa_smear);
  [[unroll]] for (int i = 0; i < l_o.length(); i++) l_o[i] = l_o[i] > 0.0 ? 1.0 / l_o[i] : 0.0;
  acc = acc * l_o;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lo = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lo = setTensorLayoutDimensionNV(lo, p.T, HD);
  lo = setTensorLayoutStrideNV(lo, p.H * HD, 1);
  coopMatStoreTensorNV(acc, o, p.o_off + (b * p.T * p.H + h) * HD, sliceTensorLayoutNV(lo, qb0, BR, 0, HD));
}
