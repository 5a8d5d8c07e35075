#version 450
#extension GL_GOOGLE_include_directive : require
// out[r, f] = act(gate[r, f]) * up[r, f]; rows of gate/up have their own
// stride so a fused [rows, 2F] gate_up tensor works. VEC 4: four
// consecutive f per invocation with 16-byte loads and stores (F, the strides
// and offsets multiples of 4; n and F then count groups of four).
// OUT16 1: out is f16 (the next matmul's operand for matmul_cm2.comp), each
// value clamped to ±65504 and packed as to_f16.comp does; with VEC 1 an
// invocation writes one pair (n counts pairs, o_off is even). 2: rounded as
// fp16 autocast rounds instead (hn_round_f16: ±Inf past the range).
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint VEC = 1;
layout(constant_id = 1) const uint OUT16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 0) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 1) readonly buffer U4 { vec4 u4[]; };
layout(std430, binding = 2) writeonly buffer O4 { vec4 o4[]; };
layout(std430, binding = 2) writeonly buffer O16 { uint o16[]; };
layout(std430, binding = 2) writeonly buffer O16x4 { uvec2 o16x4[]; };
layout(push_constant) uniform P {
  uint n; uint F; uint g_off; uint u_off; uint o_off; uint g_stride; uint u_stride; uint act;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  if (OUT16 != 0u && VEC == 1u) {
    vec2 v;
    for (uint j = 0u; j < 2u; j++) {
      uint e = 2u * i + j, r = e / p.F, f = e % p.F;
      v[j] = hn_act(p.act, g[p.g_off + r * p.g_stride + f]) * u[p.u_off + r * p.u_stride + f];
    }
    o16[p.o_off / 2u + i] = packHalf2x16(hn_f16_store(vec4(v, 0.0, 0.0), OUT16).xy);
    return;
  }
  uint r = i / p.F, f = i % p.F;
  if (VEC == 4u) {
    vec4 gv = g4[(p.g_off + r * p.g_stride) / 4u + f], uv = u4[(p.u_off + r * p.u_stride) / 4u + f];
    vec4 v = vec4(hn_act(p.act, gv.x), hn_act(p.act, gv.y), hn_act(p.act, gv.z), hn_act(p.act, gv.w)) * uv;
    if (OUT16 != 0u) {
      v = hn_f16_store(v, OUT16);
      o16x4[p.o_off / 4u + i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
    } else {
      o4[p.o_off / 4u + i] = v;
    }
  } else {
    o[p.o_off + i] = hn_act(p.act, g[p.g_off + r * p.g_stride + f]) * u[p.u_off + r * p.u_stride + f];
  }
}
