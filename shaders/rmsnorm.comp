#version 450
#extension GL_GOOGLE_include_directive : require
// RMSNorm over the last dim, one workgroup per row.
// flags: 1 = weight plus one (Gemma), 2 = round x̂ to bf16, 4 = round x̂ to f16, 8 = has weight.
// OUT16 1: out is f16 (a matmul operand for matmul_cm2.comp), each value
// clamped to ±65504 and packed two to a word as to_f16.comp does (cols and
// o_off even); 2: rounded as fp16 autocast rounds instead (to_f16.comp's
// mode 1: ±Inf past its range).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define HN_SUBGROUP_REDUCE
#include "common.glsl"
// 1: the row sums by subgroup reductions (hn_wg_sum_sg; host: HN_NORM_SG_REDUCE=1)
layout(constant_id = 1) const uint SGRED = 0;
#include "reduce.glsl"
layout(constant_id = 0) const uint OUT16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 2) writeonly buffer O16 { uint o16[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint x_off; uint w_off; uint o_off; float eps; uint flags; } p;
float normed(uint base, uint c, float inv) {
  float y = x[base + c] * inv;
  if ((p.flags & 2u) != 0u) y = uintBitsToFloat(hn_to_bf16(y) << 16);
  if ((p.flags & 4u) != 0u) y = unpackHalf2x16(hn_to_f16(y)).x;
  if ((p.flags & 8u) != 0u) {
    float g = w[p.w_off + c];
    y *= (p.flags & 1u) != 0u ? 1.0 + g : g;
  }
  return y;
}

void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint base = p.x_off + row * p.cols;
  float ss = 0.0;
  for (uint c = t; c < p.cols; c += 256u) { float v = x[base + c]; ss += v * v; }
  ss = hn_wg_sum_sg(ss);
  float inv = 1.0 / sqrt(ss / float(p.cols) + p.eps);
  if (OUT16 != 0u) {
    for (uint c2 = t; c2 < p.cols / 2u; c2 += 256u) {
      vec2 y = vec2(normed(base, 2u * c2, inv), normed(base, 2u * c2 + 1u, inv));
      y = hn_f16_store(vec4(y, 0.0, 0.0), OUT16).xy;
      o16[(p.o_off + row * p.cols) / 2u + c2] = packHalf2x16(y);
    }
    return;
  }
  for (uint c = t; c < p.cols; c += 256u)
    o[p.o_off + row * p.cols + c] = normed(base, c, inv);
}
