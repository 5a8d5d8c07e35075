// Shared by attention_back_cm2_q.comp and attention_back_cm2_kv.comp: the
// flash-attention backward on VK_NV_cooperative_matrix2 (FlashAttention-2's
// recomputation). attention_back_cm2_prep.comp first writes f16 copies of
// Q, K, V and of the incoming gradient dO (each row of dO scaled by r, the
// power of two that brings its largest |dO| into [1, 2): an unscaled loss
// gradient, a mean over many tokens, would otherwise fall into f16's
// subnormals), and per row r·Δ (Δ = dO·O) and max |dO|; both passes then read
// only 16-bit operands (no per-element decode in the loads).
// P = exp(s - lse) is formed again from Q, K and the forward's per-row
// log-sum-exp; every product (S = Q·Kᵀ, dP = dO·Vᵀ, dV += Pᵀ·dO,
// dK += dSᵀ·Q, dQ += dS·K) runs on the tensor cores with f16 operands and
// f32 accumulation; the results are scaled back exactly. Blocks that the
// causal mask or the window hide entirely are skipped, blocks that they do
// not touch skip the per-element mask test. Head dims D = Dv = HD (64 or
// 128), causal masking, sliding windows and GQA; no soft-cap, ALiBi, mask
// or sinks (those keep the exact kernels). BR queries by BC keys per block
// (specialization constants, the host picks them).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#include "common.glsl"
layout(constant_id = 0) const uint HD = 64;
layout(constant_id = 1) const uint NT = 256;  // the device's workgroup-scope invocation count
layout(constant_id = 2) const uint BR = 64;   // queries per block
layout(constant_id = 3) const uint BC = 64;   // keys per block
layout(local_size_x_id = 1) in;

// The f16 copies (attention_back_cm2_prep.comp), at element offsets q16,
// k16, v16 and do16 of one buffer.
layout(std430, binding = 0) readonly buffer H16 { float16_t h16[]; };
layout(std430, binding = 1) readonly buffer L { float lse[]; };
layout(std430, binding = 2) readonly buffer ST { float st[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint H; uint KVH; uint S;
  int pos0; uint window; uint causal; float scale;
  uint q16; uint k16; uint v16; uint do16; uint lse_off; uint st_off; uint g_off; uint g2_off;
  uint flags;  // 2 = accumulate into the gradients
} p;

const float LOG2E = 1.4426950408889634;

// Key j hidden from the query at position pos.
bool hn_fa_hidden(uint j, int pos) {
  return (p.causal != 0u && int(j) > pos) || (p.window > 0u && int(j) <= pos - int(p.window));
}

// Queries [t0, t0 + BR) and keys [j0, j0 + BC) all in range and every pair
// visible: the block needs no per-element mask.
bool hn_fa_block_full(uint t0, uint j0) {
  return t0 + BR <= p.T && j0 + BC <= p.S && (p.causal == 0u || int(j0 + BC - 1u) <= p.pos0 + int(t0)) &&
         (p.window == 0u || int(j0) > p.pos0 + int(t0 + BR - 1u) - int(p.window));
}

// The power of two that brings m (> 0) into [1, 2); 1 for 0.
float hn_fa_pow2_scale(float m) {
  if (!(m > 0.0) || isinf(m)) return 1.0;
  return exp2(min(-floor(log2(m)), 126.0));
}

#define FA_ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>
#define FA_A(R, C) coopmat<float16_t, gl_ScopeWorkgroup, R, C, gl_MatrixUseA>
#define FA_B(R, C) coopmat<float16_t, gl_ScopeWorkgroup, R, C, gl_MatrixUseB>
