#version 450
#extension GL_GOOGLE_include_directive : require
// LayerNorm over the last dim, one workgroup per row; two-pass variance.
// flags: 1 = has weight, 2 = has bias.
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint x_off; uint w_off; uint b_off; uint o_off; float eps; uint flags; } p;
void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint base = p.x_off + row * p.cols;
  float s = 0.0;
  for (uint c = t; c < p.cols; c += 256u) s += x[base + c];
  float mean = hn_wg_sum(s) / float(p.cols);
  float v = 0.0;
  for (uint c = t; c < p.cols; c += 256u) { float d = x[base + c] - mean; v += d * d; }
  float inv = 1.0 / sqrt(hn_wg_sum(v) / float(p.cols) + p.eps);
  for (uint c = t; c < p.cols; c += 256u) {
    float y = (x[base + c] - mean) * inv;
    if ((p.flags & 1u) != 0u) y *= w[p.w_off + c];
    if ((p.flags & 2u) != 0u) y += b[p.b_off + c];
    o[p.o_off + row * p.cols + c] = y;
  }
}
