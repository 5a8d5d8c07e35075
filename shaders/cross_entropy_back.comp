#version 450
#extension GL_GOOGLE_include_directive : require
// dlogits[n, :] = row_scale[n] · (softmax(logits[n, :]) - onehot(targets[n]))
// one workgroup per row; row_scale is 0 for ignored rows (the host folds the
// loss weights and the 1/Σw of the mean into it). May run in place
// (dlogits == logits): each invocation reads a column before writing it.
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer T { int tg[]; };
layout(std430, binding = 2) readonly buffer S { float rs[]; };
layout(std430, binding = 3) buffer D { float dl[]; };
layout(push_constant) uniform P { uint rows; uint V; uint l_off; uint t_off; uint s_off; uint d_off; } p;
void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  uint lb = p.l_off + row * p.V, db = p.d_off + row * p.V;
  float f = rs[p.s_off + row];
  int target = tg[p.t_off + row];
  float mx = HN_NEG_INF;
  for (uint c = t; c < p.V; c += 256u) mx = max(mx, lg[lb + c]);
  mx = hn_wg_max(mx);
  float se = 0.0;
  for (uint c = t; c < p.V; c += 256u) se += exp(lg[lb + c] - mx);
  se = hn_wg_sum(se);
  float inv = 1.0 / se;
  for (uint c = t; c < p.V; c += 256u) {
    float pr = exp(lg[lb + c] - mx) * inv;
    dl[db + c] = f == 0.0 ? 0.0 : f * (pr - (int(c) == target ? 1.0 : 0.0));
  }
}
