// Shared by attention_back_cm2_q.comp and attention_back_cm2_kv.comp: the
// flash-attention backward on VK_NV_cooperative_matrix2 (FlashAttention-2's
// recomputation). P = exp(s - lse) is formed again from Q, K and the
// forward's per-row log-sum-exp; every product (S = Q·Kᵀ, dP = dO·Vᵀ,
// dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K) runs on the tensor cores with f16
// operands and f32 accumulation. The incoming gradient dO is scaled by a
// power of two before it is rounded to f16 (per row in the dQ pass, by the
// largest row of the KV head's queries in the dK/dV pass) and the results
// are scaled back exactly: an unscaled loss gradient (a mean over many
// tokens) would otherwise fall into f16's subnormals. Head dims D = Dv = HD
// (64 or 128), causal masking, sliding windows and GQA; no soft-cap, ALiBi,
// mask or sinks (those keep the exact kernels).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
layout(constant_id = 0) const uint HD = 64;
layout(constant_id = 1) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(local_size_x_id = 1) in;
const uint BR = 64u, BC = 64u;  // queries, keys per block
const uint TPR = NT / BR;       // invocations per row in the scalar parts

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer DO { float dout[]; };
layout(std430, binding = 4) readonly buffer O { float o[]; };
layout(std430, binding = 5) readonly buffer L { float lse[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint H; uint KVH; uint S;
  int pos0; uint window; uint causal; float scale;
  uint q_off; uint k_off; uint v_off; uint do_off; uint o_off; uint lse_off; uint st_off; uint g_off; uint g2_off;
  uint flags;  // 2 = accumulate into the gradients
} p;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Elem { float v; };

// Finite values past f16's range clamp; Inf and NaN stay (an overflow under
// fp16 autocast must reach the gradients, so the loss scaler skips the step).
float16_t dec_f32(const in F32Elem e, const in uint block[2], const in uint within[2]) {
  if (isinf(e.v) || isnan(e.v)) return float16_t(e.v);
  return float16_t(clamp(e.v, -65504.0, 65504.0));
}

// Key j hidden from the query at position pos.
bool hn_fa_hidden(uint j, int pos) {
  return (p.causal != 0u && int(j) > pos) || (p.window > 0u && int(j) <= pos - int(p.window));
}

// The power of two that brings m (> 0) into [1, 2); 1 for 0.
float hn_fa_pow2_scale(float m) {
  if (!(m > 0.0) || isinf(m)) return 1.0;
  return exp2(-floor(log2(m)));
}

#define FA_ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>
#define FA_A(R, C) coopmat<float16_t, gl_ScopeWorkgroup, R, C, gl_MatrixUseA>
#define FA_B(R, C) coopmat<float16_t, gl_ScopeWorkgroup, R, C, gl_MatrixUseB>
