#version 450
#extension GL_GOOGLE_include_directive : require
// LayerNorm over the last dim, one workgroup per row; two-pass variance.
// flags: 1 = has weight, 2 = has bias. OUT16 as rmsnorm.comp's (1: f16 out
// clamped to ±65504, 2: rounded as fp16 autocast rounds; cols and o_off even).
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
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer O16 { uint o16[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint x_off; uint w_off; uint b_off; uint o_off; float eps; uint flags; } p;
float normed(uint base, uint c, float mean, float inv) {
  float y = (x[base + c] - mean) * inv;
  if ((p.flags & 1u) != 0u) y *= w[p.w_off + c];
  if ((p.flags & 2u) != 0u) y += b[p.b_off + c];
  return y;
}

void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint base = p.x_off + row * p.cols;
  float s = 0.0;
  for (uint c = t; c < p.cols; c += 256u) s += x[base + c];
  float mean = hn_wg_sum_sg(s) / float(p.cols);
  float v = 0.0;
  for (uint c = t; c < p.cols; c += 256u) { float d = x[base + c] - mean; v += d * d; }
  float inv = 1.0 / sqrt(hn_wg_sum_sg(v) / float(p.cols) + p.eps);
  if (OUT16 != 0u) {
    for (uint c2 = t; c2 < p.cols / 2u; c2 += 256u) {
      vec2 y = vec2(normed(base, 2u * c2, mean, inv), normed(base, 2u * c2 + 1u, mean, inv));
      y = hn_f16_store(vec4(y, 0.0, 0.0), OUT16).xy;
      o16[(p.o_off + row * p.cols) / 2u + c2] = packHalf2x16(y);
    }
    return;
  }
  for (uint c = t; c < p.cols; c += 256u)
    o[p.o_off + row * p.cols + c] = normed(base, c, mean, inv);
}
