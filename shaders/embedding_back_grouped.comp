#version 450
#extension GL_GOOGLE_include_directive : require
// dtable[id, c] += Σ dy[t, c] over the tokens t of each id, the ids grouped on
// the host (hn_embedding_groups): g holds G, then from 1 the group starts
// [G + 1], from n + 2 the group ids [G] and from 2n + 2 the tokens grouped by
// id, in token order within a group (n: dy's rows, the most groups there are).
// One workgroup per group walks its tokens in order, so the sums are the
// same bits as embedding_back.comp's (one invocation per column walking every
// token) with the rows read whole instead of one column per invocation.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer GR { int g[]; };
layout(std430, binding = 2) buffer DT { float dt[]; };
layout(push_constant) uniform P { uint n; uint D; uint dy_off; uint g_off; uint dt_off; } p;
void main() {
  uint gi = hn_group_index();
  if (gi >= uint(g[p.g_off])) return;
  uint s0 = uint(g[p.g_off + 1u + gi]), s1 = uint(g[p.g_off + 2u + gi]);
  uint id = uint(g[p.g_off + p.n + 2u + gi]);
  uint tok0 = p.g_off + 2u * p.n + 2u;
  for (uint c = gl_LocalInvocationID.x; c < p.D; c += 256u) {
    float acc = dt[p.dt_off + id * p.D + c];
    for (uint j = s0; j < s1; j++)
      acc += dy[p.dy_off + uint(g[tok0 + j]) * p.D + c];
    dt[p.dt_off + id * p.D + c] = acc;
  }
}
