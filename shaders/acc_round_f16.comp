#version 450
#extension GL_GOOGLE_include_directive : require
// y[i] += f16(x[i]) for n elements, rounded as fp16 autocast rounds
// (hn_round_f16: ±Inf past the range): a weight gradient that fp16 autocast
// computes in f16, taken in f32 first (split over K) and rounded whole.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; uint x_off; uint y_off; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  y[p.y_off + i] += hn_round_f16(x[p.x_off + i]);
}
