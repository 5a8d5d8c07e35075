#version 450
#extension GL_GOOGLE_include_directive : require
// RWKV-4's WKV recurrence (ops-ssm.h, hn_op_wkv4): one invocation per (b, c),
// a sequential loop over time; the scaled state (num, den, mx) lives in
// registers and goes back into the state buffer after the last step.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float kk[]; };
layout(std430, binding = 1) readonly buffer V { float vv[]; };
layout(std430, binding = 2) readonly buffer Td { float td[]; };
layout(std430, binding = 3) readonly buffer Tf { float tf[]; };
layout(std430, binding = 4) buffer S { float st[]; };
layout(std430, binding = 5) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint A; uint k_off; uint v_off; uint td_off; uint tf_off; uint s_off; uint y_off; uint has_state;
} p;
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.B * p.A) return;
  uint b = g / p.A, c = g % p.A;
  float num = 0.0, den = 0.0, mx = -1e38;
  uint s0 = p.s_off + b * 3u * p.A + c;
  if (p.has_state != 0u) {
    num = st[s0];
    den = st[s0 + p.A];
    mx = st[s0 + 2u * p.A];
  }
  float w = -exp(td[p.td_off + c]), u = tf[p.tf_off + c];
  for (uint t = 0u; t < p.T; t++) {
    uint i = (b * p.T + t) * p.A + c;
    float kt = kk[p.k_off + i], vt = vv[p.v_off + i];
    float q = max(mx, kt + u);
    float e1 = exp(mx - q), e2 = exp(kt + u - q);
    y[p.y_off + i] = (e1 * num + e2 * vt) / (e1 * den + e2);
    q = max(mx + w, kt);
    e1 = exp(mx + w - q);
    e2 = exp(kt - q);
    num = e1 * num + e2 * vt;
    den = e1 * den + e2;
    mx = q;
  }
  if (p.has_state != 0u) {
    st[s0] = num;
    st[s0 + p.A] = den;
    st[s0 + 2u * p.A] = mx;
  }
}
