#version 450
#extension GL_GOOGLE_include_directive : require
// y[r·ld + c0 + c] = f16(x[r·cols + c]) for a [rows, cols] f32 tensor into a
// column block of a wider f16 matrix (row stride ld), rounded as fp16
// autocast rounds (hn_round_f16, as to_f16.comp mode 1): the gradients of
// q, k and v side by side, for one matmul against the stacked weights.
// One invocation per packed word (cols, c0, ld and y_off even).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { uint y[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint x_off; uint y_off; uint ld; uint c0; } p;
void main() {
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x, half_cols = p.cols / 2u;
  if (w >= p.rows * half_cols) return;
  uint r = w / half_cols, c = 2u * (w % half_cols);
  uint i = p.x_off + r * p.cols + c;
  y[(p.y_off + r * p.ld + p.c0 + c) / 2u] = packHalf2x16(vec2(hn_round_f16(x[i]), hn_round_f16(x[i + 1u])));
}
