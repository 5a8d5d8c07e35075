#version 450
#extension GL_GOOGLE_include_directive : require
// Groups the routed slots by expert (one workgroup): ids [S] (slot s = token
// · k + j) -> offs [E + 1] (the slots of expert e are order[offs[e] ..
// offs[e + 1])) and order [S]. The order within an expert follows the
// atomics; every slot is computed on its own, so results do not depend on it.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
layout(std430, binding = 1) writeonly buffer Offs { int offs[]; };
layout(std430, binding = 2) writeonly buffer Order { int order[]; };
layout(push_constant) uniform P { uint S; uint E; uint i_off; uint f_off; uint o_off; } p;
shared uint cnt[1024];

void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint e = tid; e < p.E; e += 256u) cnt[e] = 0u;
  barrier();
  for (uint s = tid; s < p.S; s += 256u) atomicAdd(cnt[uint(ids[p.i_off + s])], 1u);
  barrier();
  if (tid == 0u) {
    uint run = 0u;
    for (uint e = 0u; e < p.E; e++) {
      uint c = cnt[e];
      offs[p.f_off + e] = int(run);
      cnt[e] = run;  // now the next free position of expert e
      run += c;
    }
    offs[p.f_off + p.E] = int(run);
  }
  barrier();
  for (uint s = tid; s < p.S; s += 256u) {
    uint pos = atomicAdd(cnt[uint(ids[p.i_off + s])], 1u);
    order[p.o_off + pos] = int(s);
  }
}
