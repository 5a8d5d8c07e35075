#version 450
#extension GL_GOOGLE_include_directive : require
// out[t, c] = sum over j < k of weights[t, ids[t, j]] · y[t · k + j, c]: the
// routed experts' outputs of each token, weighted (moe_route's dense weights).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) readonly buffer Ids { int ids[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint C; uint K; uint E; uint y_off; uint w_off; uint i_off; uint o_off; } p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint t = i / p.C, c = i % p.C;
  float s = 0.0;
  for (uint j = 0u; j < p.K; j++) {
    uint slot = t * p.K + j;
    s = fma(w[p.w_off + t * p.E + uint(ids[p.i_off + slot])], y[p.y_off + slot * p.C + c], s);
  }
  o[p.o_off + i] = s;
}
