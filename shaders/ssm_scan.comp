#version 450
#extension GL_GOOGLE_include_directive : require
// Mamba's selective scan (ops-ssm.h, hn_op_ssm_scan): one invocation per
// (batch row, channel), a sequential loop over time with the NS state values
// (a specialization constant) in registers.
#include "common.glsl"
#include "ssm.glsl"
layout(constant_id = 0) const uint NS = 16;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer DT { float dt[]; };
layout(std430, binding = 2) readonly buffer AL { float alog[]; };
layout(std430, binding = 3) readonly buffer BM { float bm[]; };
layout(std430, binding = 4) readonly buffer CM { float cm[]; };
layout(std430, binding = 5) readonly buffer DD { float dd[]; };
layout(std430, binding = 6) readonly buffer Z { float z[]; };
layout(std430, binding = 7) readonly buffer DB { float dtb[]; };
layout(std430, binding = 8) buffer S { float st[]; };
layout(std430, binding = 9) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint nb; uint T; uint I; uint x_off; uint dt_off; uint a_off; uint b_off; uint c_off; uint d_off; uint z_off;
  uint dtb_off; uint s_off; uint y_off; uint flags;
} p;
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.nb * p.I) return;
  uint b = g / p.I, i = g % p.I;
  float h[NS], a[NS];
  [[unroll]] for (uint n = 0u; n < NS; n++) {
    a[n] = -exp(alog[p.a_off + i * NS + n]);
    h[n] = (p.flags & HN_SSM_STATE) != 0u ? st[p.s_off + g * NS + n] : 0.0;
  }
  float Dv = (p.flags & HN_SSM_D) != 0u ? dd[p.d_off + i] : 0.0;
  float bias = (p.flags & HN_SSM_DT_BIAS) != 0u ? dtb[p.dtb_off + i] : 0.0;
  for (uint t = 0u; t < p.T; t++) {
    uint ti = (b * p.T + t) * p.I + i, tn = (b * p.T + t) * NS;
    float d = dt[p.dt_off + ti] + bias;
    if ((p.flags & HN_SSM_SOFTPLUS) != 0u) d = hn_softplus(d);
    float u = x[p.x_off + ti];
    float du = d * u, acc = Dv * u;
    [[unroll]] for (uint n = 0u; n < NS; n++) {
      h[n] = exp(d * a[n]) * h[n] + du * bm[p.b_off + tn + n];
      acc += h[n] * cm[p.c_off + tn + n];
    }
    if ((p.flags & HN_SSM_Z) != 0u) {
      float zz = z[p.z_off + ti];
      acc *= zz / (1.0 + exp(-zz));
    }
    y[p.y_off + ti] = acc;
  }
  if ((p.flags & HN_SSM_STATE) != 0u) {
    [[unroll]] for (uint n = 0u; n < NS; n++) st[p.s_off + g * NS + n] = h[n];
  }
}
