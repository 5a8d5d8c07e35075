#version 450
#extension GL_GOOGLE_include_directive : require
// out = a (op) b with broadcasting: strides of 0 on broadcast dims.
// FLAT 1: no broadcast, element i of each (the index arithmetic skipped);
// 2: the same four elements at a time (n and the offsets multiples of 4).
// B16 (FLAT 2 only): b is f16 (a residual branch's output stored f16 under
// fp16 autocast; its values widen exactly).
#include "common.glsl"
layout(constant_id = 0) const uint FLAT = 0;
layout(constant_id = 1) const uint B16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 1) readonly buffer BH { uvec2 bh[]; };
layout(std430, binding = 2) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform P {
  uint n; uint a_off; uint b_off; uint o_off; uint op;
  uint shape[4]; uint a_stride[4]; uint b_stride[4];
} p;
vec4 apply(vec4 x, vec4 y) {
  if (p.op == 0u) return x + y;
  if (p.op == 1u) return x - y;
  if (p.op == 2u) return x * y;
  return x / y;
}
void main() {
  uint idx = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (FLAT == 2u) {
    if (idx >= p.n / 4u) return;
    uvec2 h = B16 == 1u ? bh[p.b_off / 4u + idx] : uvec2(0u);
    vec4 b = B16 == 1u ? vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y)) : b4[p.b_off / 4u + idx];
    o4[p.o_off / 4u + idx] = apply(a4[p.a_off / 4u + idx], b);
    return;
  }
  if (idx >= p.n) return;
  uint ia = p.a_off + idx, ib = p.b_off + idx;
  if (FLAT == 0u) {
    uint r = idx;
    ia = p.a_off;
    ib = p.b_off;
    [[unroll]] for (int d = 3; d >= 0; d--) {
      uint c = r % p.shape[d];
      r /= p.shape[d];
      ia += c * p.a_stride[d];
      ib += c * p.b_stride[d];
    }
  }
  o[p.o_off + idx] = apply(vec4(a[ia]), vec4(b[ib])).x;
}
