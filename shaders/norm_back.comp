#version 450
#extension GL_GOOGLE_include_directive : require
// RMSNorm / LayerNorm backward for x, one workgroup per row. Also stores the
// row's (mean, rstd) into stats[2 * row] for norm_back_params.comp.
// flags: 1 = weight plus one, 8 = has weight, 16 = layernorm (subtract the
// mean), 32 = accumulate into dx.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define HN_SUBGROUP_REDUCE
#include "common.glsl"
// 1: the row sums by subgroup reductions (hn_wg_sum_sg; host: HN_NORM_SG_REDUCE=1)
layout(constant_id = 0) const uint SGRED = 0;
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) buffer DX { float dx[]; };
layout(std430, binding = 4) writeonly buffer ST { float st[]; };
layout(push_constant) uniform P {
  uint rows; uint cols; uint dy_off; uint x_off; uint w_off; uint dx_off; uint st_off; float eps; uint flags;
} p;
float wv(uint c) {
  if ((p.flags & 8u) == 0u) return 1.0;
  float g = w[p.w_off + c];
  return (p.flags & 1u) != 0u ? 1.0 + g : g;
}
void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint xb = p.x_off + row * p.cols, db = p.dy_off + row * p.cols;
  bool layer = (p.flags & 16u) != 0u;
  float mean = 0.0;
  if (layer) {
    float s = 0.0;
    for (uint c = t; c < p.cols; c += 256u) s += x[xb + c];
    mean = hn_wg_sum_sg(s) / float(p.cols);
  }
  float ss = 0.0;
  for (uint c = t; c < p.cols; c += 256u) { float v = x[xb + c] - mean; ss += v * v; }
  ss = hn_wg_sum_sg(ss);
  float inv = 1.0 / sqrt(ss / float(p.cols) + p.eps);
  float sg = 0.0, sgx = 0.0;
  for (uint c = t; c < p.cols; c += 256u) {
    float g = dy[db + c] * wv(c);
    sg += g;
    sgx += g * (x[xb + c] - mean) * inv;
  }
  float mg = layer ? hn_wg_sum_sg(sg) / float(p.cols) : 0.0;
  float mgx = hn_wg_sum_sg(sgx) / float(p.cols);
  for (uint c = t; c < p.cols; c += 256u) {
    float g = dy[db + c] * wv(c);
    float xh = (x[xb + c] - mean) * inv;
    float r = inv * (g - mg - xh * mgx);
    uint o = p.dx_off + row * p.cols + c;
    if ((p.flags & 32u) != 0u) r += dx[o];
    dx[o] = r;
  }
  if (t == 0u) { st[p.st_off + 2u * row] = mean; st[p.st_off + 2u * row + 1u] = inv; }
}
