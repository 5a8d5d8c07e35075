#version 450
#extension GL_GOOGLE_include_directive : require
// Routed expert matmul: y[s, n] = x[s / x_div, :] · W[e, n, :] (+ bias[e, n])
// for the slots s of expert e only (offs/order/tiles from moe_sort.comp), so
// the weights of experts no token chose are never read. Workgroup (x, y) =
// (block of ROWS outputs n, entry y of the tile list: up to 8 slots of one
// expert; entries past the list's length exit):
// invocations stride over K, then a shared-memory tree sums their parts
// (no subgroup features needed). W [E, N, K] is f32/f16/bf16 (spec constant 0).
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { uint ww[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) readonly buffer Offs { int offs[]; };
layout(std430, binding = 4) readonly buffer Order { int order[]; };
layout(std430, binding = 5) readonly buffer Tiles { int tiles[]; };
layout(std430, binding = 6) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint N; uint K; uint x_div; uint x_off; uint w_off; uint b_off; uint f_off; uint o_off; uint y_off; uint has_bias;
  uint t_off;
} p;
const uint ROWS = 4u;
shared float part[ROWS * 8u * 64u];  // [ROWS][slots <= 8][invocations]

void main() {
  uint n0 = gl_WorkGroupID.x * ROWS, ti = gl_WorkGroupID.y;
  if (int(ti) >= tiles[p.t_off] || n0 >= p.N) return;  // uniform: past the work list
  uint e = uint(tiles[p.t_off + 1u + 2u * ti]);
  int begin = tiles[p.t_off + 2u + 2u * ti];
  int end = min(begin + 8, offs[p.f_off + e + 1u]);
  uint M = uint(end - begin), tid = gl_LocalInvocationID.x;
  uint slot[8], xrow[8];
  [[unroll]] for (uint m = 0u; m < 8u; m++) {
    slot[m] = m < M ? uint(order[p.o_off + uint(begin) + m]) : 0u;
    xrow[m] = p.x_off + (slot[m] / p.x_div) * p.K;
  }
  float acc[ROWS * 8u];
  [[unroll]] for (uint i = 0u; i < ROWS * 8u; i++) acc[i] = 0.0;
  [[unroll]] for (uint r = 0u; r < ROWS; r++) {
    uint n = n0 + r;
    if (n >= p.N) break;
    uint wrow = p.w_off + (e * p.N + n) * p.K;
    for (uint k = tid; k < p.K; k += 64u) {
      float w = HN_LOAD(ww, BDT, wrow + k);
      [[unroll]] for (uint m = 0u; m < 8u; m++)
        if (m < M) acc[r * 8u + m] = fma(x[xrow[m] + k], w, acc[r * 8u + m]);
    }
  }
  [[unroll]] for (uint i = 0u; i < ROWS * 8u; i++) part[i * 64u + tid] = acc[i];
  barrier();
  for (uint st = 32u; st > 0u; st >>= 1) {
    if (tid < st)
      [[unroll]] for (uint i = 0u; i < ROWS * 8u; i++) part[i * 64u + tid] += part[i * 64u + tid + st];
    barrier();
  }
  if (tid < ROWS * M) {
    uint r = tid / M, m = tid % M, n = n0 + r;
    if (n < p.N) {
      float s = part[(r * 8u + m) * 64u];
      if (p.has_bias != 0u) s += bias[p.b_off + e * p.N + n];
      y[p.y_off + slot[m] * p.N + n] = s;
    }
  }
}
