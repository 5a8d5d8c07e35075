#version 450
#extension GL_GOOGLE_include_directive : require
// A Linear's backward under fp16 autocast from one read of dy [rows, cols]:
// the f16 copy of dy the tensor cores read (fp16 autocast's rounding,
// hn_round_f16, bit for bit to_f16.comp's mode 1) and the first pass of the
// bias gradient's column sums. Workgroup (x, y) takes 512 columns of rows
// [y·R, (y + 1)·R), two adjacent columns per invocation (one packed f16 word
// per row), each column's rows summed in the order norm_back_params.comp sums
// them (8 rows' loads issued together); the partial sums go where that kernel
// puts db's, part[(chunks + y)·cols + c], for norm_back_params_sum.comp.
// cols, dy_off and y_off (in halves) even. ACT_BACK = 1: the Linear feeds an
// activation and dy is the gradient of act(y): its own gradient dy·act'(x)
// (x = binding 3, y before the activation; unary_back.comp's product, the
// same bits) is what gets rounded and summed, in the same read.
#include "common.glsl"
#include "activation.glsl"
#include "activation_back.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint ACT_BACK = 0;
layout(constant_id = 1) const uint ACT = 0;  // HnActivation
layout(constant_id = 2) const uint X16 = 0;  // ACT_BACK's x is f16 (x_off even)
layout(constant_id = 3) const uint DY16 = 0; // dy is f16 (an autocast product stored f16)
layout(std430, binding = 0) readonly buffer DY { vec2 dy2[]; };
layout(std430, binding = 0) readonly buffer DYH { uint dyh[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y16[]; };
layout(std430, binding = 2) writeonly buffer PART { float part[]; };
layout(std430, binding = 3) readonly buffer X { vec2 x2[]; };
layout(std430, binding = 3) readonly buffer XH { uint xh[]; };
// y_ld: y's row stride in halves (cols, or wider when dy goes into columns of
// a wider f16 matrix; even).
layout(push_constant) uniform P { uint rows; uint cols; uint dy_off; uint y_off; uint part_off; uint R; uint x_off; uint y_ld; } p;

uint half2(vec2 v) {
  return packHalf2x16(vec2(hn_round_f16(v.x), hn_round_f16(v.y)));
}

// element pair (r, c), c even
vec2 grad(uint r, uint c) {
  uint e = (p.dy_off + r * p.cols + c) / 2u;
  vec2 g = DY16 == 1u ? unpackHalf2x16(dyh[e]) : dy2[e];
  if (ACT_BACK == 1u) {
    vec2 x = X16 == 1u ? unpackHalf2x16(xh[(p.x_off + r * p.cols + c) / 2u]) : x2[(p.x_off + r * p.cols + c) / 2u];
    g = vec2(g.x * hn_act_grad(ACT, x.x), g.y * hn_act_grad(ACT, x.y));
  }
  return g;
}

void main() {
  uint c = 2u * (gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x), y = gl_WorkGroupID.y;
  if (c >= p.cols) return;
  uint chunks = gl_NumWorkGroups.y, r = y * p.R, r1 = min(p.rows, (y + 1u) * p.R);
  vec2 sb = vec2(0.0);
  for (; r + 8u <= r1; r += 8u) {
    vec2 g[8];
    [[unroll]] for (uint j = 0u; j < 8u; j++) g[j] = grad(r + j, c);
    [[unroll]] for (uint j = 0u; j < 8u; j++) y16[(p.y_off + (r + j) * p.y_ld + c) / 2u] = half2(g[j]);
    [[unroll]] for (uint j = 0u; j < 8u; j++) sb += g[j];
  }
  for (; r < r1; r++) {
    vec2 g = grad(r, c);
    y16[(p.y_off + r * p.y_ld + c) / 2u] = half2(g);
    sb += g;
  }
  part[p.part_off + (chunks + y) * p.cols + c] = sb.x;
  part[p.part_off + (chunks + y) * p.cols + c + 1u] = sb.y;
}
