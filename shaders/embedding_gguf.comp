#version 450
#extension GL_GOOGLE_include_directive : require
// out[n, d] = table[ids[n], d] with the table [V, D] in ggml blocks (GT,
// shaders/gguf_dequant.glsl): a GGUF model's token embedding stays quantized.
#include "common.glsl"
layout(constant_id = 0) const uint GT = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer T { uint qw[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint D; uint V; uint row_bytes; uint i_off; uint o_off; } p;

uint gg_word(uint which, uint i) { return qw[i]; }
#include "gguf_dequant.glsl"

void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  uint r = i / p.D, d = i % p.D;
  int id = ids[p.i_off + r];
  float v = 0.0;
  if (id >= 0 && uint(id) < p.V) v = gg_elem(0u, uint(id) * p.row_bytes, d);
  o[p.o_off + i] = v;
}
