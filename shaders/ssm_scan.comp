#version 450
#extension GL_GOOGLE_include_directive : require
// Mamba's selective scan and Mamba-2's SSD recurrence (ops-ssm.h,
// hn_op_ssm_scan): one invocation per (batch row, channel), a sequential loop
// over time with the NS state values (a specialization constant) in
// registers. Channel i belongs to head i / hd (its dt, dt_bias, D, A) and
// group head / (H / G) (its B and C).
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
  uint dtb_off; uint s_off; uint y_off; uint flags; uint hd; uint G; float dt_min; float dt_max;
} p;
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.nb * p.I) return;
  uint b = g / p.I, i = g % p.I;
  uint H = p.I / p.hd, hh = i / p.hd, gg = hh / (H / p.G);
  float h[NS], a[NS];
  [[unroll]] for (uint n = 0u; n < NS; n++) {
    a[n] = -exp(alog[p.a_off + ((p.flags & HN_SSM_A_HEAD) != 0u ? hh : hh * NS + n)]);
    h[n] = (p.flags & HN_SSM_STATE) != 0u ? st[p.s_off + g * NS + n] : 0.0;
  }
  float Dv = (p.flags & HN_SSM_D) != 0u ? dd[p.d_off + hh] : 0.0;
  float bias = (p.flags & HN_SSM_DT_BIAS) != 0u ? dtb[p.dtb_off + hh] : 0.0;
  for (uint t = 0u; t < p.T; t++) {
    uint ti = (b * p.T + t) * p.I + i, tn = ((b * p.T + t) * p.G + gg) * NS;
    float ddr;
    float d = hn_ssm_delta(dt[p.dt_off + (b * p.T + t) * H + hh] + bias, p.flags, p.dt_min, p.dt_max, ddr);
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
