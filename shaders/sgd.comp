#version 450
#extension GL_GOOGLE_include_directive : require
// torch.optim.SGD: g = clip·g + wd·p; momentum buffer b = first ? g : μ·b + g; p -= lr·b.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer PW { float pw[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) buffer B { float b[]; };
layout(push_constant) uniform P {
  uint n; uint p_off; uint g_off; uint b_off; float clip; float lr; float wd; float momentum; uint first;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  float w = pw[p.p_off + i];
  float gi = g[p.g_off + i] * p.clip + p.wd * w;
  if (p.momentum != 0.0) {
    float bi = p.first != 0u ? gi : p.momentum * b[p.b_off + i] + gi;
    b[p.b_off + i] = bi;
    gi = bi;
  }
  pw[p.p_off + i] = w - p.lr * gi;
}
