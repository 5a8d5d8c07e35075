#version 450
#extension GL_GOOGLE_include_directive : require
// mean = sum(loss[r] for non-ignored r) / count (0 when none); one workgroup.
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { float loss[]; };
layout(std430, binding = 1) readonly buffer T { int tgt[]; };
layout(std430, binding = 2) writeonly buffer M { float mean[]; };
layout(push_constant) uniform P { uint rows; uint l_off; uint t_off; uint m_off; int ignore_index; } p;
void main() {
  uint t = gl_LocalInvocationID.x;
  float s = 0.0, n = 0.0;
  for (uint r = t; r < p.rows; r += 256u)
    if (tgt[p.t_off + r] != p.ignore_index) { s += loss[p.l_off + r]; n += 1.0; }
  s = hn_wg_sum(s);
  n = hn_wg_sum(n);
  if (t == 0u) mean[p.m_off] = n > 0.0 ? s / n : 0.0;
}
