#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary embedding. One invocation per (row, k), k < D - rot/2: k < rot/2
// rotates pair k (both elements, so out may alias x), otherwise it copies the
// pass-through element k + rot/2. style 0 = NeoX rotate-half (k, k + rot/2),
// 1 = GPT-J interleaved (2k, 2k + 1).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer F { float inv_freq[]; };
layout(std430, binding = 3) buffer O { float o[]; };
layout(push_constant) uniform P {
  uint n; uint H; uint D; uint rot; uint x_off; uint p_off; uint f_off; uint o_off; uint style; float attn_scale;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint half_rot = p.rot / 2u;
  uint per_row = p.D - half_rot;
  uint row = i / per_row, k = i % per_row;
  uint xb = p.x_off + row * p.D, ob = p.o_off + row * p.D;
  if (k >= half_rot) {
    uint d = k + half_rot;
    o[ob + d] = x[xb + d];
    return;
  }
  float position = float(pos[p.p_off + row / p.H]);
  float ang = position * inv_freq[p.f_off + k];
  // Cody-Waite reduction to [-pi, pi]: GPU sin/cos are only accurate there.
  float q = round(ang * 0.15915494309189535);
  float r = (ang - q * 6.28125) - q * 1.9353071795864769253e-3;
  float c = cos(r) * p.attn_scale, s = sin(r) * p.attn_scale;
  uint a = p.style == 0u ? k : 2u * k;
  uint b = p.style == 0u ? k + half_rot : 2u * k + 1u;
  float xa = x[xb + a], xbv = x[xb + b];
  o[ob + a] = xa * c - xbv * s;
  o[ob + b] = xbv * c + xa * s;
}
