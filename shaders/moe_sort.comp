#version 450
#extension GL_GOOGLE_include_directive : require
// Groups the routed slots by expert (one workgroup): ids [S] (slot s = token
// · k + j) -> offs [E + 1] (the slots of expert e are order[offs[e] ..
// offs[e + 1])), order [S], and the work list of moe_matmul: tiles[0] = the
// number of tiles, then (expert, first position) per tile of up to 8 of one
// expert's slots (at most min(S, S / 8 + E) tiles). The order within an expert
// follows the atomics; every slot is computed on its own, so results do not
// depend on it.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
layout(std430, binding = 1) writeonly buffer Offs { int offs[]; };
layout(std430, binding = 2) writeonly buffer Order { int order[]; };
layout(std430, binding = 3) writeonly buffer Tiles { int tiles[]; };
layout(push_constant) uniform P { uint S; uint E; uint i_off; uint f_off; uint o_off; uint t_off; } p;
shared uint cnt[1024];

void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint e = tid; e < p.E; e += 256u) cnt[e] = 0u;
  barrier();
  for (uint s = tid; s < p.S; s += 256u) atomicAdd(cnt[uint(ids[p.i_off + s])], 1u);
  barrier();
  if (tid == 0u) {
    uint run = 0u, nt = 0u;
    for (uint e = 0u; e < p.E; e++) {
      uint c = cnt[e];
      offs[p.f_off + e] = int(run);
      for (uint b = 0u; b < c; b += 8u) {
        tiles[p.t_off + 1u + 2u * nt] = int(e);
        tiles[p.t_off + 2u + 2u * nt] = int(run + b);
        nt++;
      }
      cnt[e] = run;  // now the next free position of expert e
      run += c;
    }
    offs[p.f_off + p.E] = int(run);
    tiles[p.t_off] = int(nt);
  }
  barrier();
  for (uint s = tid; s < p.S; s += 256u) {
    uint pos = atomicAdd(cnt[uint(ids[p.i_off + s])], 1u);
    order[p.o_off + pos] = int(s);
  }
}
