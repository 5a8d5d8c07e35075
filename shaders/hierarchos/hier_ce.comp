#version 450
#extension GL_GOOGLE_include_directive : require
// The Hierarchos trainer's cross-entropy + z-loss over one token's logits
// (workgroup x = token, z = row, each row at z * rs of wk and gwk), as the
// CPU tape's HT_CE: lse = max + log(sum exp(z - max)), ce = lse - z[label];
// stats [lse, ce, non-finite logits] to wk[stats + 3 t]; with the
// coefficient c = wk[coef + t] (the loss seed times the position's weight,
// 0: no loss here) the logits' gradient
//   gwk[logits + t V + i] = c (p_i (1 + 2 zw lse) - [i == label]).
#include "common.glsl"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Work { float wk[]; };
layout(std430, binding = 1) buffer GWork { float gwk[]; };
layout(push_constant) uniform P {
  uint V; uint logits; uint label; uint coef;
  uint stats; uint rs; float zw;
} p;

void main() {
  uint t = gl_WorkGroupID.x, l = gl_LocalInvocationID.x, rb = gl_WorkGroupID.z * p.rs;
  uint z0 = rb + p.logits + t * p.V;
  float mx = -1.0 / 0.0, bad = 0.0;
  for (uint i = l; i < p.V; i += 256u) {
    float z = wk[z0 + i];
    if (isnan(z) || isinf(z)) bad += 1.0;
    mx = max(mx, z);
  }
  mx = hn_wg_max(mx);
  bad = hn_wg_sum(bad);
  float s = 0.0;
  for (uint i = l; i < p.V; i += 256u) s += exp(wk[z0 + i] - mx);
  s = hn_wg_sum(s);
  float lse = mx + log(s);
  int lab = int(wk[rb + p.label + t]);
  float c = wk[rb + p.coef + t];
  if (l == 0u) {
    wk[rb + p.stats + 3u * t] = lse;
    wk[rb + p.stats + 3u * t + 1u] = lab >= 0 ? lse - wk[z0 + uint(lab)] : 0.0;
    wk[rb + p.stats + 3u * t + 2u] = bad;
  }
  if (c == 0.0) return;
  float k = 1.0 + 2.0 * p.zw * lse;
  for (uint i = l; i < p.V; i += 256u) {
    float pr = exp(wk[z0 + i] - lse);
    gwk[z0 + i] = c * (pr * k - (int(i) == lab ? 1.0 : 0.0));
  }
}
