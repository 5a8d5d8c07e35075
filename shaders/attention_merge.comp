#version 450
#extension GL_GOOGLE_include_directive : require
// Merge of split-K attention partials (attention.comp with SPLIT = 1): one
// workgroup per (head, query, batch) rescales each split's (max, sum,
// acc[Dv]) to the common max and normalises. A split that saw no visible
// key has max -inf and weight 0; no visible key at all gives 0 like the
// single-pass kernel.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer S { float sc[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint T; uint H; uint Dv; uint n_split; uint s_off; uint o_off; } p;

void main() {
  uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  uint tid = gl_LocalInvocationID.x;
  uint row = (b * p.T + t) * p.H + h;
  uint base = p.s_off + row * p.n_split * (p.Dv + 2u);
  float m = HN_NEG_INF;
  for (uint s = 0u; s < p.n_split; s++) m = max(m, sc[base + s * (p.Dv + 2u)]);
  float l = 0.0;
  if (m != HN_NEG_INF)
    for (uint s = 0u; s < p.n_split; s++) {
      float ms = sc[base + s * (p.Dv + 2u)];
      if (ms != HN_NEG_INF) l += sc[base + s * (p.Dv + 2u) + 1u] * exp(ms - m);
    }
  float inv = l > 0.0 ? 1.0 / l : 0.0;
  for (uint d = tid; d < p.Dv; d += 64u) {
    float a = 0.0;
    if (m != HN_NEG_INF)
      for (uint s = 0u; s < p.n_split; s++) {
        uint sb = base + s * (p.Dv + 2u);
        float ms = sc[sb];
        if (ms != HN_NEG_INF) a += sc[sb + 2u + d] * exp(ms - m);
      }
    o[p.o_off + row * p.Dv + d] = a * inv;
  }
}
