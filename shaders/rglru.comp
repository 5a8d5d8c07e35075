#version 450
#extension GL_GOOGLE_include_directive : require
// The RG-LRU forward with a carried state (ops-rglru.h, hn_op_rglru): one
// invocation per (b, c), a sequential loop over time carrying h.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer GX { float gx[]; };
layout(std430, binding = 2) readonly buffer GA { float ga[]; };
layout(std430, binding = 3) readonly buffer L { float lam[]; };
layout(std430, binding = 4) buffer S { float st[]; };
layout(std430, binding = 5) buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint C; uint x_off; uint gx_off; uint ga_off; uint l_off; uint s_off; uint y_off; uint has_state; uint reset;
} p;
float sigm(float v) { return 1.0 / (1.0 + exp(-v)); }
// 1 - exp(v) for v <= 0 without the cancellation near 0 (a close to 1)
float one_minus_exp(float v) { return v > -0.01 ? -v * (1.0 + v * (0.5 + v / 6.0)) : 1.0 - exp(v); }
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.B * p.C) return;
  uint b = g / p.C, c = g % p.C;
  float lv = lam[p.l_off + c];
  float sp = lv > 20.0 ? lv : log(1.0 + exp(lv));
  float h = p.has_state != 0u ? st[p.s_off + b * p.C + c] : 0.0;
  for (uint t = 0u; t < p.T; t++) {
    uint i = (b * p.T + t) * p.C + c;
    float u = x[p.x_off + i] * sigm(gx[p.gx_off + i]);
    float la = -8.0 * sigm(ga[p.ga_off + i]) * sp;
    if (p.reset != 0u && t == 0u)
      h = u;
    else
      h = exp(la) * h + sqrt(one_minus_exp(2.0 * la)) * u;
    y[p.y_off + i] = h;
  }
  if (p.has_state != 0u) st[p.s_off + b * p.C + c] = h;
}
