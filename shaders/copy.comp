#version 450
#extension GL_GOOGLE_include_directive : require
// Contiguous copy with dtype conversion (f32/f16/bf16, or raw 32-bit words).
// One invocation per output word: for 16-bit outputs a word holds two
// elements (out_off must be even), so no two invocations share a word.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer In { uint x[]; };
layout(std430, binding = 1) buffer Out { uint y[]; };
layout(push_constant) uniform P { uint n; uint in_off; uint out_off; uint in_dt; uint out_dt; } p;
void main() {
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (p.out_dt == HN_DT_F32) {
    if (w >= p.n) return;
    uint i = p.in_off + w;
    y[p.out_off + w] = p.in_dt == HN_DT_F32 ? x[i] : floatBitsToUint(HN_LOAD(x, p.in_dt, i));
    return;
  }
  uint e0 = 2u * w;
  if (e0 >= p.n) return;
  uint word_index = (p.out_off >> 1) + w;
  uint lo, hi;
  float f0 = HN_LOAD(x, p.in_dt, p.in_off + e0);
  lo = p.out_dt == HN_DT_F16 ? hn_to_f16(f0) : hn_to_bf16(f0);
  if (e0 + 1u < p.n) {
    float f1 = HN_LOAD(x, p.in_dt, p.in_off + e0 + 1u);
    hi = p.out_dt == HN_DT_F16 ? hn_to_f16(f1) : hn_to_bf16(f1);
  } else {
    hi = y[word_index] >> 16;  // keep the neighbour's half
  }
  y[word_index] = lo | (hi << 16);
}
