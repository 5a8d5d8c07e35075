#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of conv1d_causal from a zero state (hn_op_conv1d_causal_back): one
// invocation per channel c, looping over the batch rows and time, so dw[c, :]
// and dbias[c] accumulate without atomics. g[t] = dy[t] · act'(pre[t]) is
// recomputed for the K outputs each input feeds.
#include "common.glsl"
#include "activation.glsl"
#include "activation_back.glsl"
layout(constant_id = 0) const uint K = 4;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) readonly buffer Bi { float bias[]; };
layout(std430, binding = 4) buffer DX { float dx[]; };
layout(std430, binding = 5) buffer DW { float dw[]; };
layout(std430, binding = 6) buffer DB { float db[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint C; uint dy_off; uint x_off; uint w_off; uint b_off; uint dx_off; uint dw_off; uint db_off;
  uint flags; uint act;
} p;
// flags: 1 bias, 2 dx, 4 dx accumulate, 8 dw, 16 dbias
float xin(uint b, int j, uint c) { return j < 0 || j >= int(p.T) ? 0.0 : x[p.x_off + (b * p.T + uint(j)) * p.C + c]; }
void main() {
  uint c = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (c >= p.C) return;
  float wk[K];
  [[unroll]] for (uint k = 0u; k < K; k++) wk[k] = w[p.w_off + c * K + k];
  float bv = (p.flags & 1u) != 0u ? bias[p.b_off + c] : 0.0;
  float gw[K];
  [[unroll]] for (uint k = 0u; k < K; k++) gw[k] = 0.0;
  float gb = 0.0;
  for (uint b = 0u; b < p.B; b++) {
    for (uint s = 0u; s < p.T; s++) {
      // g at t = s: this output's own gradient (for dw, db), then dx[s] from outputs s .. s + K - 1
      float acc = 0.0;
      [[unroll]] for (uint k = 0u; k < K; k++) {
        uint t = s + K - 1u - k;
        if (t >= p.T) continue;
        float pre = bv;
        [[unroll]] for (uint q = 0u; q < K; q++) pre += wk[q] * xin(b, int(t + q) - int(K - 1u), c);
        float g = dy[p.dy_off + (b * p.T + t) * p.C + c] * hn_act_grad(p.act, pre);
        acc += g * wk[k];
        if (k == K - 1u) {
          // t == s
          gb += g;
          [[unroll]] for (uint q = 0u; q < K; q++) gw[q] += g * xin(b, int(s + q) - int(K - 1u), c);
        }
      }
      if ((p.flags & 2u) != 0u) {
        uint i = p.dx_off + (b * p.T + s) * p.C + c;
        dx[i] = (p.flags & 4u) != 0u ? dx[i] + acc : acc;
      }
    }
  }
  if ((p.flags & 8u) != 0u) {
    [[unroll]] for (uint k = 0u; k < K; k++) dw[p.dw_off + c * K + k] += gw[k];
  }
  if ((p.flags & 16u) != 0u) db[p.db_off + c] += gb;
}
