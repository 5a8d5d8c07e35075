#version 450
#extension GL_GOOGLE_include_directive : require
// The Vulkan trainer's weight gradients (engine/hierarchos/hierarchos-vk-train.c):
// for one weight, the inputs x and the pre-activation gradients dv of its
// uses in a chunk, gathered into the rows of X [U, in] and DV [U, out] in
// the row's gwk (workgroup x = use, z = batch row), for dW += DV^T X. A
// use whose predicate was off in this row gets zero rows. The table holds
// per use: x0 n0 x1 n1 x2 xsrc dv_off direct scale pred (10 words).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Params { float prm[]; };
layout(std430, binding = 1) readonly buffer Work { float wk[]; };
layout(std430, binding = 2) buffer GWork { float gwk[]; };
layout(std430, binding = 3) readonly buffer Table { uint tab[]; };
layout(push_constant) uniform P {
  uint base; uint in_n; uint out_n; uint rs;
  uint xo; uint dvo;
} p;

const uint HIER_NONE = 0xffffffffu, HIER_PRED_NOT = 0x80000000u;

void main() {
  uint u = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, rb = gl_WorkGroupID.z * p.rs;
  uint e = p.base + u * 10u;
  uint x0 = tab[e], n0 = tab[e + 1u], x1 = tab[e + 2u], n1 = tab[e + 3u], x2 = tab[e + 4u], xsrc = tab[e + 5u];
  uint dv_off = tab[e + 6u], direct = tab[e + 7u], pred = tab[e + 9u];
  float scale = uintBitsToFloat(tab[e + 8u]);
  bool off = false;
  if (pred != HIER_NONE) {
    float w = wk[rb + (pred & ~HIER_PRED_NOT)];
    off = (pred & HIER_PRED_NOT) != 0u ? w != 0.0 : w == 0.0;
  }
  uint X = rb + p.xo + u * p.in_n, D = rb + p.dvo + u * p.out_n;
  for (uint i = t; i < p.in_n; i += 256u) {
    uint seg = i < n0 ? 0u : (i < n0 + n1 ? 1u : 2u);
    uint idx = seg == 0u ? x0 + i : (seg == 1u ? x1 + i - n0 : x2 + i - n0 - n1);
    float x = ((xsrc >> seg) & 1u) != 0u ? prm[idx] : wk[rb + idx];
    gwk[X + i] = off ? 0.0 : x;
  }
  for (uint o = t; o < p.out_n; o += 256u)
    gwk[D + o] = off ? 0.0 : (direct != 0u ? gwk[rb + dv_off + o] * scale : gwk[rb + dv_off + o]);
}
