#version 450
#extension GL_GOOGLE_include_directive : require
// Softmax over the last dim with scale, soft-capping, causal/sliding-window
// masks and an additive mask; one workgroup per row. A row with every
// column hidden becomes zeros.
#include "common.glsl"
#include "activation.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer M { float m[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
  uint rows; uint cols; uint x_off; uint m_off; uint o_off;
  uint T; int pos0; uint window; uint causal; float scale; float softcap;
  uint has_mask; uint mask_rows_per_batch; uint mask_T;
} p;

float value(uint row, uint c, int pos) {
  float v = x[p.x_off + row * p.cols + c] * p.scale;
  if (p.softcap > 0.0) v = p.softcap * hn_tanh(v / p.softcap);
  if (p.causal != 0u && int(c) > pos) return HN_NEG_INF;
  if (p.window > 0u && int(c) <= pos - int(p.window)) return HN_NEG_INF;
  if (p.has_mask != 0u) {
    uint mb = row / p.mask_rows_per_batch;
    uint mt = p.mask_T == 1u ? 0u : row % p.T;
    v += m[p.m_off + (mb * p.mask_T + mt) * p.cols + c];
  }
  return v;
}

void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  int pos = p.pos0 + int(row % p.T);
  float mx = HN_NEG_INF;
  for (uint c = t; c < p.cols; c += 256u) mx = max(mx, value(row, c, pos));
  mx = hn_wg_max(mx);
  float s = 0.0;
  if (mx > HN_NEG_INF)
    for (uint c = t; c < p.cols; c += 256u) s += exp(value(row, c, pos) - mx);
  s = hn_wg_sum(s);
  float inv = s > 0.0 ? 1.0 / s : 0.0;
  for (uint c = t; c < p.cols; c += 256u) {
    float v = mx > HN_NEG_INF ? exp(value(row, c, pos) - mx) * inv : 0.0;
    o[p.o_off + row * p.cols + c] = v;
  }
}
