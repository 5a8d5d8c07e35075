#version 450
#extension GL_GOOGLE_include_directive : require
// out = a (op) b with broadcasting: strides of 0 on broadcast dims.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint n; uint a_off; uint b_off; uint o_off; uint op;
  uint shape[4]; uint a_stride[4]; uint b_stride[4];
} p;
void main() {
  uint idx = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.n) return;
  uint r = idx, ia = p.a_off, ib = p.b_off;
  [[unroll]] for (int d = 3; d >= 0; d--) {
    uint c = r % p.shape[d];
    r /= p.shape[d];
    ia += c * p.a_stride[d];
    ib += c * p.b_stride[d];
  }
  float x = a[ia], y = b[ib], z;
  if (p.op == 0u) z = x + y;
  else if (p.op == 1u) z = x - y;
  else if (p.op == 2u) z = x * y;
  else z = x / y;
  o[p.o_off + idx] = z;
}
