#version 450
#extension GL_GOOGLE_include_directive : require
// The RG-LRU backward from position 0 (ops-rglru.h, hn_op_rglru_back): one
// invocation per channel, looping over the rows; the forward's states go
// into dx first, then a reverse loop reads h_{t-1} there before it writes
// dx[t] (so no scratch is needed).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer GX { float gx[]; };
layout(std430, binding = 3) readonly buffer GA { float ga[]; };
layout(std430, binding = 4) readonly buffer L { float lam[]; };
layout(std430, binding = 5) buffer DX { float dx[]; };
layout(std430, binding = 6) writeonly buffer DGX { float dgx[]; };
layout(std430, binding = 7) writeonly buffer DGA { float dga[]; };
layout(std430, binding = 8) buffer DL { float dl[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint C; uint dy_off; uint x_off; uint gx_off; uint ga_off; uint l_off; uint dx_off; uint dgx_off;
  uint dga_off; uint dl_off; uint has_dl;
} p;
float sigm(float v) { return 1.0 / (1.0 + exp(-v)); }
// 1 - exp(v) for v <= 0 without the cancellation near 0 (a close to 1)
float one_minus_exp(float v) { return v > -0.01 ? -v * (1.0 + v * (0.5 + v / 6.0)) : 1.0 - exp(v); }
void main() {
  uint c = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (c >= p.C) return;
  float lv = lam[p.l_off + c];
  float sp = lv > 20.0 ? lv : log(1.0 + exp(lv)), sg = sigm(lv);
  float dlam = 0.0;
  for (uint b = 0u; b < p.B; b++) {
    float h = 0.0;
    for (uint t = 0u; t < p.T; t++) {
      uint i = (b * p.T + t) * p.C + c;
      float u = x[p.x_off + i] * sigm(gx[p.gx_off + i]);
      float la = -8.0 * sigm(ga[p.ga_off + i]) * sp;
      h = t == 0u ? u : exp(la) * h + sqrt(one_minus_exp(2.0 * la)) * u;
      dx[p.dx_off + i] = h;
    }
    float g = 0.0;
    for (uint tt = p.T; tt > 0u; tt--) {
      uint t = tt - 1u;
      uint i = (b * p.T + t) * p.C + c;
      float xv = x[p.x_off + i];
      float gi = sigm(gx[p.gx_off + i]), gr = sigm(ga[p.ga_off + i]);
      float la = -8.0 * gr * sp, a = exp(la);
      g += dy[p.dy_off + i];
      float m = 1.0, dla = 0.0;
      if (t > 0u) {
        float z = one_minus_exp(2.0 * la);
        m = sqrt(z);
        float hp = dx[p.dx_off + i - p.C];
        dla = g * (a * hp + xv * gi * (-2.0 * a * a) / sqrt(max(4.0 * z, 1e-6)));
      }
      dx[p.dx_off + i] = g * gi * m;
      dgx[p.dgx_off + i] = g * xv * m * gi * (1.0 - gi);
      dga[p.dga_off + i] = dla * -8.0 * sp * gr * (1.0 - gr);
      dlam += dla * -8.0 * gr * sg;
      g = t > 0u ? g * a : 0.0;
    }
  }
  if (p.has_dl != 0u) dl[p.dl_off + c] += dlam;
}
