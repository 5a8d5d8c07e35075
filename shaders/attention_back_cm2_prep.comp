#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention backward, pass 0 (see attention_back_cm2.glsl): the f16
// operands of the two passes and the per-row statistics. Rows [0, rows_q)
// are query rows (b, t, h): r·Δ (Δ = Σ dO·O) and max |dO| into st, Q and r·dO
// (r the power of two that brings max |dO| into [1, 2)) as f16; rows
// [rows_q, rows_q + rows_kv) are key rows (b, j, kvh): K and V as f16.
// Finite values past f16's range clamp; Inf and NaN stay (an overflow under
// fp16 autocast must reach the gradients, so the loss scaler skips the
// step). TPR invocations per row, 256 / TPR rows per workgroup.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
layout(constant_id = 0) const uint HD = 64;
layout(local_size_x = 256) in;
const uint TPR = 16u, RPW = 256u / TPR;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer DO { float dout[]; };
layout(std430, binding = 4) readonly buffer O { float o[]; };
layout(std430, binding = 5) writeonly buffer ST { float st[]; };
layout(std430, binding = 6) writeonly buffer H16 { float16_t h16[]; };
layout(push_constant) uniform P {
  uint rows_q; uint rows_kv;
  uint q_off; uint k_off; uint v_off; uint do_off; uint o_off; uint st_off;
  uint q16; uint k16; uint v16; uint do16;
} p;

float16_t to_h(float x) {
  if (isinf(x) || isnan(x)) return float16_t(x);
  return float16_t(clamp(x, -65504.0, 65504.0));
}

float pow2_scale(float m) {
  if (!(m > 0.0) || isinf(m)) return 1.0;
  return exp2(min(-floor(log2(m)), 126.0));
}

void main() {
  uint row = hn_group_index() * RPW + gl_LocalInvocationID.x / TPR, part = gl_LocalInvocationID.x % TPR;
  if (row < p.rows_q) {
    uint gb = p.do_off + row * HD, ob = p.o_off + row * HD, qb = p.q_off + row * HD, hb = row * HD;
    float g[HD / TPR];
    float dl = 0.0, mx = 0.0;
    [[unroll]] for (uint i = 0u; i < HD / TPR; i++) {
      uint d = part + i * TPR;
      g[i] = dout[gb + d];
      dl = fma(g[i], o[ob + d], dl);
      mx = max(mx, abs(g[i]));
      h16[p.q16 + hb + d] = to_h(q[qb + d]);
    }
    [[unroll]] for (uint w = 1u; w < TPR; w *= 2u) {
      dl += subgroupShuffleXor(dl, w);
      mx = max(mx, subgroupShuffleXor(mx, w));
    }
    float r = pow2_scale(mx);
    [[unroll]] for (uint i = 0u; i < HD / TPR; i++) h16[p.do16 + hb + part + i * TPR] = float16_t(r * g[i]);
    if (part == 0u) {
      st[p.st_off + 2u * row] = r * dl;
      st[p.st_off + 2u * row + 1u] = mx;
    }
  } else if (row < p.rows_q + p.rows_kv) {
    uint kr = row - p.rows_q;
    [[unroll]] for (uint i = 0u; i < HD / TPR; i++) {
      uint d = part + i * TPR;
      h16[p.k16 + kr * HD + d] = to_h(k[p.k_off + kr * HD + d]);
      h16[p.v16 + kr * HD + d] = to_h(v[p.v_off + kr * HD + d]);
    }
  }
}
