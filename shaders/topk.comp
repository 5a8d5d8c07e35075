#version 450
#extension GL_GOOGLE_include_directive : require
// The k largest values per row, descending, lower index first on ties; k
// passes, each picking the best element ordered after the previous pick.
// NaNs are skipped; missing picks get index -1 and value NaN.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer V { float vals[]; };
layout(std430, binding = 2) writeonly buffer I { int idx[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint k; uint x_off; uint v_off; uint i_off; uint has_vals; } p;
shared float sv[256];
shared int si[256];

bool better(float v, int i, float bv, int bi) {
  return bi < 0 || v > bv || (v == bv && i < bi);
}

void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint base = p.x_off + row * p.cols;
  float pv = 1.0 / 0.0;
  int pi = -1;
  for (uint j = 0u; j < p.k; j++) {
    float bv = HN_NEG_INF;
    int bi = -1;
    for (uint c = t; c < p.cols; c += 256u) {
      float v = x[base + c];
      if (isnan(v)) continue;
      bool eligible = v < pv || (v == pv && int(c) > pi);
      if (eligible && better(v, int(c), bv, bi)) { bv = v; bi = int(c); }
    }
    sv[t] = bv; si[t] = bi;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
      if (t < s && si[t + s] >= 0 && better(sv[t + s], si[t + s], sv[t], si[t])) { sv[t] = sv[t + s]; si[t] = si[t + s]; }
      barrier();
    }
    pv = sv[0]; pi = si[0];
    barrier();
    if (t == 0u) {
      idx[p.i_off + row * p.k + j] = pi;
      if (p.has_vals != 0u) vals[p.v_off + row * p.k + j] = pi >= 0 ? pv : uintBitsToFloat(0x7fc00000u);
    }
    if (pi < 0) { pv = HN_NEG_INF; }
  }
}
