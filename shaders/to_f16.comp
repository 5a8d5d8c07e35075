#version 450
#extension GL_GOOGLE_include_directive : require
// y = f16(x) for n f32 elements from x_off into y from word y_off: the f16
// copy of a matmul operand that the tensor cores read (matmul_cm2.comp).
// mode 0 clamps to ±65504 first (inference); mode 1 rounds as fp16 autocast
// does (hn_round_f16: ±Inf past the range, so the loss scaler sees an
// overflow). Two elements per invocation, one packed word out (y holds
// (n + 1) / 2 words).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; uint x_off; uint y_off; uint mode; } p;

float prep(float v) {
  return p.mode == 1u ? hn_round_f16(v) : clamp(v, -65504.0, 65504.0);
}

void main() {
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x;
  uint i = 2u * w;
  if (i >= p.n) return;
  float a = prep(x[p.x_off + i]);
  float b = i + 1u < p.n ? prep(x[p.x_off + i + 1u]) : 0.0;
  y[p.y_off + w] = packHalf2x16(vec2(a, b));
}
