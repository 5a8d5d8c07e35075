#version 450
#extension GL_GOOGLE_include_directive : require
// y (f16) = act(x) rounded as fp16 autocast rounds (hn_round_f16): an MLP's
// activation under --precision fp16, written only as the f16 copy its down
// projection reads (autocast runs it on the f16 up projection and stores
// f16). Two elements per invocation, one packed word (y starts at an even
// element; the pad half of an odd count's last word is 0).
// X16: x is f16 too (the up projection stored f16; in_off even), one word a pair.
// VEC (with X16; n, in_off a multiple of 8, out_off of 4 words): eight
// elements per invocation, 16-byte loads and stores (a word per invocation
// left gpt2's 8192 x 3072 activation at half the memory's rate).
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint X16 = 0;
layout(constant_id = 1) const uint VEC = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 0) readonly buffer InH { uint xh[]; };
layout(std430, binding = 0) readonly buffer InH4 { uvec4 xh4[]; };
layout(std430, binding = 1) writeonly buffer Out { uint y[]; };
layout(std430, binding = 1) writeonly buffer Out4 { uvec4 y4[]; };
layout(push_constant) uniform P { uint n; uint in_off; uint out_off; uint act; } p;
void main() {
  if (VEC == 1u) {
    uint q = hn_group_index() * 256u + gl_LocalInvocationID.x;
    if (8u * q >= p.n) return;
    uvec4 v = xh4[p.in_off / 8u + q], r;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
      vec2 e = unpackHalf2x16(v[k]);
      r[k] = packHalf2x16(vec2(hn_round_f16(hn_act(p.act, e.x)), hn_round_f16(hn_act(p.act, e.y))));
    }
    y4[p.out_off / 4u + q] = r;
    return;
  }
  uint w = hn_group_index() * 256u + gl_LocalInvocationID.x, i = 2u * w;
  if (i >= p.n) return;
  vec2 v = X16 == 1u ? unpackHalf2x16(xh[(p.in_off + i) / 2u])
                     : vec2(x[p.in_off + i], i + 1u < p.n ? x[p.in_off + i + 1u] : 0.0);
  float a = hn_round_f16(hn_act(p.act, v.x));
  float b = i + 1u < p.n ? hn_round_f16(hn_act(p.act, v.y)) : 0.0;
  y[p.out_off + w] = packHalf2x16(vec2(a, b));
}
