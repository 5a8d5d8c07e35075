#version 450
#extension GL_GOOGLE_include_directive : require
// y = f16(x) for n f32 elements from x_off into y from word y_off: the f16
// copy of a matmul operand that the tensor cores read (matmul_cm2.comp).
// mode 0 clamps to ±65504 first (inference); mode 1 rounds as fp16 autocast
// does (hn_round_f16: ±Inf past the range, so the loss scaler sees an
// overflow). Two elements per invocation, one packed word out (y holds
// (n + 1) / 2 words); VEC 1: four, one 16-byte load and one 8-byte store
// (x_off % 4 == 0, y_off even), the last partial group as pairs.
#include "common.glsl"
layout(constant_id = 0) const uint VEC = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(std430, binding = 1) writeonly buffer Y2 { uvec2 y2[]; };
layout(push_constant) uniform P { uint n; uint x_off; uint y_off; uint mode; } p;

float prep(float v) {
  return p.mode == 1u ? hn_round_f16(v) : clamp(v, -65504.0, 65504.0);
}

void pair(uint w) {
  uint i = 2u * w;
  if (i >= p.n) return;
  float a = prep(x[p.x_off + i]);
  float b = i + 1u < p.n ? prep(x[p.x_off + i + 1u]) : 0.0;
  y[p.y_off + w] = packHalf2x16(vec2(a, b));
}

void main() {
  uint t = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (VEC == 0u) {
    pair(t);
    return;
  }
  uint i = 4u * t;
  if (i + 4u <= p.n) {
    vec4 v = x4[(p.x_off + i) / 4u];
    y2[(p.y_off + 2u * t) / 2u] = uvec2(packHalf2x16(vec2(prep(v.x), prep(v.y))), packHalf2x16(vec2(prep(v.z), prep(v.w))));
  } else {
    pair(2u * t);
    pair(2u * t + 1u);
  }
}
