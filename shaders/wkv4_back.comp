#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of RWKV-4's WKV recurrence from a fresh state (ops-ssm.h, hn_op_wkv4_back): one
// invocation per channel c, looping over the batch rows (dtime_decay / dtime_first sum over them)
// and over time. Each output y_t is a softmax-weighted mean of v_i (i <= t) with logits
// s_i = (t - 1 - i) w + k_i (i < t) and u + k_t (i = t), so its gradient is recomputed from those
// weights, max-subtracted as the forward is: O(T^2) per channel, stable for any keys.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Dy { float dy[]; };
layout(std430, binding = 1) readonly buffer K { float kk[]; };
layout(std430, binding = 2) readonly buffer V { float vv[]; };
layout(std430, binding = 3) readonly buffer Td { float td[]; };
layout(std430, binding = 4) readonly buffer Tf { float tf[]; };
layout(std430, binding = 5) buffer Dk { float dk[]; };
layout(std430, binding = 6) buffer Dv { float dv[]; };
layout(std430, binding = 7) buffer Dtd { float dtd[]; };
layout(std430, binding = 8) buffer Dtf { float dtf[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint A; uint dy_off; uint k_off; uint v_off; uint td_off; uint tf_off;
  uint dk_off; uint dv_off; uint dtd_off; uint dtf_off; uint flags;
} p;
// flags: 1 dk, 2 dv, 4 dtime_decay, 8 dtime_first, 16 accumulate into dk / dv
float logit(uint b, uint t, uint i, uint c, float w, float u) {
  float k = kk[p.k_off + (b * p.T + i) * p.A + c];
  return i == t ? u + k : float(t - 1u - i) * w + k;
}
void main() {
  uint c = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (c >= p.A) return;
  float w = -exp(td[p.td_off + c]), u = tf[p.tf_off + c];
  bool acc = (p.flags & 16u) != 0u;
  float gw = 0.0, gu = 0.0;
  for (uint b = 0u; b < p.B; b++) {
    for (uint i = 0u; i < p.T; i++) {
      uint j = (b * p.T + i) * p.A + c;
      if ((p.flags & 1u) != 0u && !acc) dk[p.dk_off + j] = 0.0;
      if ((p.flags & 2u) != 0u && !acc) dv[p.dv_off + j] = 0.0;
    }
    for (uint t = 0u; t < p.T; t++) {
      float g = dy[p.dy_off + (b * p.T + t) * p.A + c];
      float m = -1e38;
      for (uint i = 0u; i <= t; i++) m = max(m, logit(b, t, i, c, w, u));
      float z = 0.0, y = 0.0;
      for (uint i = 0u; i <= t; i++) {
        float e = exp(logit(b, t, i, c, w, u) - m);
        z += e;
        y += e * vv[p.v_off + (b * p.T + i) * p.A + c];
      }
      y /= z;
      for (uint i = 0u; i <= t; i++) {
        uint j = (b * p.T + i) * p.A + c;
        float pr = exp(logit(b, t, i, c, w, u) - m) / z;
        float gs = g * pr * (vv[p.v_off + j] - y);
        if ((p.flags & 1u) != 0u) dk[p.dk_off + j] += gs;
        if ((p.flags & 2u) != 0u) dv[p.dv_off + j] += g * pr;
        if (i == t) gu += gs; else gw += gs * float(t - 1u - i);
      }
    }
  }
  if ((p.flags & 4u) != 0u) dtd[p.dtd_off + c] += gw * w;
  if ((p.flags & 8u) != 0u) dtf[p.dtf_off + c] += gu;
}
