#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of the selective scan from a zero state (hn_op_ssm_scan_back): one
// invocation per head (a channel for Mamba, head_dim channels for Mamba-2),
// looping over the batch rows and the head's channels, so dA_log, dD,
// ddt_bias and ddt of the head accumulate without atomics. The forward of a
// channel runs first and keeps every state in scratch (hs [B, T, I, N]); the
// reverse pass writes the channel's parts of dB and dC ([B, T, G, N, I / G]
// each, summed over the group's channels by a reduction afterwards).
#include "common.glsl"
#include "ssm.glsl"
layout(constant_id = 0) const uint NS = 16;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer DT { float dt[]; };
layout(std430, binding = 3) readonly buffer AL { float alog[]; };
layout(std430, binding = 4) readonly buffer BM { float bm[]; };
layout(std430, binding = 5) readonly buffer CM { float cm[]; };
layout(std430, binding = 6) readonly buffer DD { float dd[]; };
layout(std430, binding = 7) readonly buffer Z { float z[]; };
layout(std430, binding = 8) readonly buffer DTB { float dtb[]; };
layout(std430, binding = 9) buffer SC { float sc[]; };
layout(std430, binding = 10) writeonly buffer DX { float dx[]; };
layout(std430, binding = 11) buffer DDT { float ddt[]; };
layout(std430, binding = 12) buffer DA { float da[]; };
layout(std430, binding = 13) buffer DDV { float ddv[]; };
layout(std430, binding = 14) writeonly buffer DZ { float dz[]; };
layout(std430, binding = 15) buffer DDTB { float ddtb[]; };
layout(push_constant) uniform P {
  uint nb; uint T; uint I; uint dy_off; uint x_off; uint dt_off; uint a_off; uint b_off; uint c_off; uint d_off;
  uint z_off; uint dtb_off; uint sc_off; uint dx_off; uint ddt_off; uint da_off; uint ddv_off; uint dz_off;
  uint ddtb_off; uint flags; uint grads; uint hd; uint G; float dt_min; float dt_max;
} p;
// grads: 1 dz, 2 dD, 4 ddt_bias
void main() {
  uint H = p.I / p.hd;
  uint hh = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (hh >= H) return;
  uint gg = hh / (H / p.G), cpg = p.I / p.G;  // the group, its channels
  uint BTIN = p.nb * p.T * p.I * NS;
  bool ahead = (p.flags & HN_SSM_A_HEAD) != 0u;
  float a[NS], gh[NS], gA[NS];
  [[unroll]] for (uint n = 0u; n < NS; n++) {
    a[n] = -exp(alog[p.a_off + (ahead ? hh : hh * NS + n)]);
    gA[n] = 0.0;
  }
  float Dv = (p.flags & HN_SSM_D) != 0u ? dd[p.d_off + hh] : 0.0;
  float bias = (p.flags & HN_SSM_DT_BIAS) != 0u ? dtb[p.dtb_off + hh] : 0.0;
  float gD = 0.0, gbias = 0.0;
  for (uint b = 0u; b < p.nb; b++) {
    for (uint q = 0u; q < p.hd; q++) {
      uint i = hh * p.hd + q;
      [[unroll]] for (uint n = 0u; n < NS; n++) gh[n] = 0.0;  // the running state of the forward
      for (uint t = 0u; t < p.T; t++) {
        uint ti = (b * p.T + t) * p.I + i, tn = ((b * p.T + t) * p.G + gg) * NS;
        float ddr;
        float d = hn_ssm_delta(dt[p.dt_off + (b * p.T + t) * H + hh] + bias, p.flags, p.dt_min, p.dt_max, ddr);
        float du = d * x[p.x_off + ti];
        [[unroll]] for (uint n = 0u; n < NS; n++) {
          gh[n] = exp(d * a[n]) * gh[n] + du * bm[p.b_off + tn + n];
          sc[p.sc_off + ti * NS + n] = gh[n];
        }
      }
      [[unroll]] for (uint n = 0u; n < NS; n++) gh[n] = 0.0;  // now dL/dh
      for (uint tt = p.T; tt > 0u; tt--) {
        uint t = tt - 1u;
        uint ti = (b * p.T + t) * p.I + i, tn = ((b * p.T + t) * p.G + gg) * NS, th = (b * p.T + t) * H + hh;
        float ddr;
        float d = hn_ssm_delta(dt[p.dt_off + th] + bias, p.flags, p.dt_min, p.dt_max, ddr);
        float u = x[p.x_off + ti];
        float g = dy[p.dy_off + ti];
        if ((p.flags & HN_SSM_Z) != 0u) {
          float yc = Dv * u;
          [[unroll]] for (uint n = 0u; n < NS; n++) yc += sc[p.sc_off + ti * NS + n] * cm[p.c_off + tn + n];
          float zz = z[p.z_off + ti], s = 1.0 / (1.0 + exp(-zz));
          if ((p.grads & 1u) != 0u) dz[p.dz_off + ti] = g * yc * s * (1.0 + zz * (1.0 - s));
          g *= zz * s;
        }
        gD += g * u;
        float gu = g * Dv, gdelta = 0.0;
        [[unroll]] for (uint n = 0u; n < NS; n++) {
          float e = exp(d * a[n]);
          float hcur = sc[p.sc_off + ti * NS + n];
          float prev = t > 0u ? sc[p.sc_off + (ti - p.I) * NS + n] : 0.0;
          float bv = bm[p.b_off + tn + n];
          uint pi = (tn + n) * cpg + (i - gg * cpg);
          sc[p.sc_off + BTIN * 2u + pi] = g * hcur;  // dC part
          gh[n] += g * cm[p.c_off + tn + n];
          gdelta += gh[n] * (prev * a[n] * e + bv * u);
          gA[n] += gh[n] * prev * d * e * a[n];
          sc[p.sc_off + BTIN + pi] = gh[n] * d * u;  // dB part
          gu += gh[n] * d * bv;
          gh[n] *= e;
        }
        float gdt = gdelta * ddr;
        gbias += gdt;
        ddt[p.ddt_off + th] = q == 0u ? gdt : ddt[p.ddt_off + th] + gdt;
        dx[p.dx_off + ti] = gu;
      }
    }
  }
  if (ahead) {
    float s = 0.0;
    [[unroll]] for (uint n = 0u; n < NS; n++) s += gA[n];
    da[p.da_off + hh] += s;
  } else {
    [[unroll]] for (uint n = 0u; n < NS; n++) da[p.da_off + hh * NS + n] += gA[n];
  }
  if ((p.grads & 2u) != 0u) ddv[p.ddv_off + hh] += gD;
  if ((p.grads & 4u) != 0u) ddtb[p.ddtb_off + hh] += gbias;
}
