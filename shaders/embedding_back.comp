#version 450
#extension GL_GOOGLE_include_directive : require
// dtable[ids[n], c] += dy[n, c]: one invocation per column walks the tokens in
// order, so repeated ids never race and the sums are deterministic.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) buffer DT { float dt[]; };
layout(push_constant) uniform P { uint n; uint D; uint V; uint dy_off; uint id_off; uint dt_off; } p;
void main() {
  uint c = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (c >= p.D) return;
  for (uint i = 0u; i < p.n; i++) {
    int id = ids[p.id_off + i];
    if (id < 0 || uint(id) >= p.V) continue;
    dt[p.dt_off + uint(id) * p.D + c] += dy[p.dy_off + i * p.D + c];
  }
}
