#version 450
#extension GL_GOOGLE_include_directive : require
// The read-only LTM read of the Hierarchos step (one workgroup): score_s =
// q . keys_s / sqrt(K) for S <= 4096 slots (NaN counts as -inf), the top-k
// slots by score (lower slot first on ties), then
//   y[r, :] = (vals[idx_r] + fast[idx_r]) * gate, zero rows past min(S, k).
// The picked slots go to work[idx_off + r] as floats (-1 for none).
#include "hier.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint S; uint K; uint Vd; uint topk;
  uint keys_p; uint vals_p; uint fast_off; uint q_off;
  uint gate_off; uint y_off; uint idx_off; uint pred;
  uint rs; uint ps;
} p;

shared float sc[4096];
shared float bv[256];
shared int bi[256];
shared int picks[64];

bool better(float v, int i, float ov, int oi) {
  return oi < 0 || (i >= 0 && (v > ov || (v == ov && i < oi)));
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  uint t = gl_LocalInvocationID.x;
  float scale = 1.0 / sqrt(float(p.K));
  for (uint s = t; s < p.S; s += 256u) {
    float d = 0.0;
    for (uint i = 0u; i < p.K; i++) d += wk[rb + p.q_off + i] * prm[p.keys_p + s * p.K + i];
    d *= scale;
    sc[s] = isnan(d) ? HN_NEG_INF : d;
  }
  barrier();
  uint n = min(p.S, p.topk);
  for (uint r = 0u; r < n; r++) {
    float v = 0.0;
    int best = -1;
    for (uint s = t; s < p.S; s += 256u) {
      bool taken = false;
      for (uint q = 0u; q < r; q++) taken = taken || picks[q] == int(s);
      if (!taken && better(sc[s], int(s), v, best)) { v = sc[s]; best = int(s); }
    }
    bv[t] = v;
    bi[t] = best;
    barrier();
    for (uint w = 128u; w > 0u; w >>= 1) {
      if (t < w && better(bv[t + w], bi[t + w], bv[t], bi[t])) { bv[t] = bv[t + w]; bi[t] = bi[t + w]; }
      barrier();
    }
    if (t == 0u) picks[r] = bi[0];
    barrier();
  }
  float gate = wk[rb + p.gate_off];
  for (uint e = t; e < p.topk * p.Vd; e += 256u) {
    uint r = e / p.Vd, c = e % p.Vd;
    float y = 0.0;
    if (r < n) {
      uint row = uint(picks[r]) * p.Vd + c;
      y = (prm[p.vals_p + row] + wk[rb + p.fast_off + row]) * gate;
    }
    wk[rb + p.y_off + e] = y;
  }
  if (t < p.topk) wk[rb + p.idx_off + t] = t < n ? float(picks[t]) : -1.0;
}
