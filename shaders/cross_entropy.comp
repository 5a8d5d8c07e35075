#version 450
#extension GL_GOOGLE_include_directive : require
// loss[r] = logsumexp(logits[r]) - logits[r, target[r]]; 0 when ignored,
// NaN for a target outside [0, V). One workgroup per row.
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { int tgt[]; };
layout(std430, binding = 2) writeonly buffer L { float loss[]; };
layout(push_constant) uniform P { uint rows; uint V; uint x_off; uint t_off; uint l_off; int ignore_index; } p;
void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  int target = tgt[p.t_off + row];
  if (target == p.ignore_index) {
    if (t == 0u) loss[p.l_off + row] = 0.0;
    return;
  }
  uint base = p.x_off + row * p.V;
  float m = HN_NEG_INF;
  for (uint c = t; c < p.V; c += 256u) m = max(m, x[base + c]);
  m = hn_wg_max(m);
  float s = 0.0;
  for (uint c = t; c < p.V; c += 256u) s += exp(x[base + c] - m);
  s = hn_wg_sum(s);
  if (t == 0u) {
    float l = uintBitsToFloat(0x7fc00000u);
    if (target >= 0 && uint(target) < p.V) l = log(s) + m - x[base + uint(target)];
    loss[p.l_off + row] = l;
  }
}
