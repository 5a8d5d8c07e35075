#version 450
#extension GL_GOOGLE_include_directive : require
// Causal depthwise conv1d with a carried state (ops-ssm.h, hn_op_conv1d_causal):
// one invocation per (b, c), a sequential loop over time; the K - 1 previous
// inputs live in registers (K is a specialization constant) and go back into
// the state after the last step.
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint K = 4;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer Bi { float bias[]; };
layout(std430, binding = 3) buffer S { float st[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint C; uint x_off; uint w_off; uint b_off; uint s_off; uint o_off; uint has_bias; uint has_state; uint act;
} p;
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.B * p.C) return;
  uint b = g / p.C, c = g % p.C;
  float wk[K];
  float win[K];
  [[unroll]] for (uint k = 0u; k < K; k++) {
    wk[k] = w[p.w_off + c * K + k];
    win[k] = 0.0;
  }
  if (p.has_state != 0u) {
    [[unroll]] for (uint r = 0u; r + 1u < K; r++) win[r] = st[p.s_off + (b * (K - 1u) + r) * p.C + c];
  }
  float bv = p.has_bias != 0u ? bias[p.b_off + c] : 0.0;
  for (uint t = 0u; t < p.T; t++) {
    uint idx = (b * p.T + t) * p.C + c;
    win[K - 1u] = x[p.x_off + idx];
    float s = bv;
    [[unroll]] for (uint k = 0u; k < K; k++) s += wk[k] * win[k];
    o[p.o_off + idx] = hn_act(p.act, s);
    [[unroll]] for (uint k = 0u; k + 1u < K; k++) win[k] = win[k + 1u];
  }
  if (p.has_state != 0u) {
    [[unroll]] for (uint r = 0u; r + 1u < K; r++) st[p.s_off + (b * (K - 1u) + r) * p.C + c] = win[r];
  }
}
