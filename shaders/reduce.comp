#version 450
#extension GL_GOOGLE_include_directive : require
// Row reductions over the last dim: op 0 = sum, 1 = mean, 2 = max.
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint x_off; uint o_off; uint op; } p;
void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint base = p.x_off + row * p.cols;
  float r;
  if (p.op == 2u) {
    float m = HN_NEG_INF;
    for (uint c = t; c < p.cols; c += 256u) m = max(m, x[base + c]);
    r = hn_wg_max(m);
  } else {
    float s = 0.0;
    for (uint c = t; c < p.cols; c += 256u) s += x[base + c];
    r = hn_wg_sum(s);
    if (p.op == 1u) r /= float(p.cols);
  }
  if (t == 0u) o[p.o_off + row] = r;
}
