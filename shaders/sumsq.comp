#version 450
#extension GL_GOOGLE_include_directive : require
// Partial sums of squares: out[o_off + wg] = Σ x² over the workgroup's 4096
// elements (the host adds the partials in double: the global grad norm).
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint x_off; uint o_off; } p;
void main() {
  uint wg = hn_group_index();
  uint base = wg * 4096u;
  if (base >= p.n) return;  // whole workgroup: uniform
  float s = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < 4096u; i += 256u) {
    uint j = base + i;
    if (j < p.n) { float v = x[p.x_off + j]; s += v * v; }
  }
  s = hn_wg_sum(s);
  if (gl_LocalInvocationID.x == 0u) o[p.o_off + wg] = s;
}
