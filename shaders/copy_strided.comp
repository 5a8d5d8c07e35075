#version 450
#extension GL_GOOGLE_include_directive : require
// 4-D strided copy of 32-bit elements: out[o] = in[i] where the index is
// walked over `shape` (outermost first) with separate strides for each side.
// Serves permute/transpose, slice and concat.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer In { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint y[]; };
layout(push_constant) uniform P {
  uint n; uint in_off; uint out_off;
  uint shape[4]; uint in_stride[4]; uint out_stride[4];
} p;
void main() {
  uint idx = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.n) return;
  uint r = idx, ii = p.in_off, oo = p.out_off;
  [[unroll]] for (int d = 3; d >= 0; d--) {
    uint c = r % p.shape[d];
    r /= p.shape[d];
    ii += c * p.in_stride[d];
    oo += c * p.out_stride[d];
  }
  y[oo] = x[ii];
}
