#version 450
#extension GL_GOOGLE_include_directive : require
// y = f16(clamp(x, ±65504)) for n f32 elements from x_off: the f16 copy of a
// matmul operand that the tensor cores read (matmul_cm2.comp). Two elements
// per invocation, one packed word out (y holds (n + 1) / 2 words).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; uint x_off; } p;

void main() {
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x;
  uint i = 2u * w;
  if (i >= p.n) return;
  float a = clamp(x[p.x_off + i], -65504.0, 65504.0);
  float b = i + 1u < p.n ? clamp(x[p.x_off + i + 1u], -65504.0, 65504.0) : 0.0;
  y[w] = packHalf2x16(vec2(a, b));
}
