#version 450
#extension GL_GOOGLE_include_directive : require
// The backward of hier_ltm.comp (reference: hn_hier_ltm_back_ref in
// engine/hierarchos/hierarchos-vk-back-wkv.c), one workgroup per row: for the
// forward's picks (work[idx_off + r], -1 for none) the picked ltm.vals rows
// get gy * gate, the gate gets sum gy * (vals + fast) by a fixed-order
// shared-memory reduction. The fast values, q and the keys get none.
#define HIER_BACK
#include "hier.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint S; uint K; uint Vd; uint topk;
  uint keys_p; uint vals_p; uint fast_off; uint q_off;
  uint gate_off; uint y_off; uint idx_off; uint pred;
  uint rs; uint ps;
} p;

shared float red[256];

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint gb = gl_WorkGroupID.z * p.ps, t = gl_LocalInvocationID.x;
  float gate = wk[rb + p.gate_off], acc = 0.0;
  for (uint e = t; e < p.topk * p.Vd; e += 256u) {
    uint r = e / p.Vd, c = e % p.Vd;
    float pick = wk[rb + p.idx_off + r];
    if (!(pick >= 0.0 && pick < float(p.S))) continue;
    uint at = uint(pick) * p.Vd + c;
    float g = gwk[rb + p.y_off + e];
    acc += g * (prm[p.vals_p + at] + wk[rb + p.fast_off + at]);
    gprm[gb + p.vals_p + at] += g * gate;
  }
  red[t] = acc;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (t < w) red[t] += red[t + w];
    barrier();
  }
  if (t == 0u) gwk[rb + p.gate_off] += red[0];
}
