#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of the selective scan from a zero state (hn_op_ssm_scan_back): one
// invocation per channel i, looping over the batch rows, so dA_log[i, :],
// dD[i] and ddt_bias[i] accumulate without atomics. The forward runs first
// and keeps every state in scratch (hs [B, T, I, N]); the reverse pass writes
// this channel's parts of dB and dC ([B, T, N, I] each, summed over i by a
// reduction afterwards).
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
layout(std430, binding = 11) writeonly buffer DDT { float ddt[]; };
layout(std430, binding = 12) buffer DA { float da[]; };
layout(std430, binding = 13) buffer DDV { float ddv[]; };
layout(std430, binding = 14) writeonly buffer DZ { float dz[]; };
layout(std430, binding = 15) buffer DDTB { float ddtb[]; };
layout(push_constant) uniform P {
  uint nb; uint T; uint I; uint dy_off; uint x_off; uint dt_off; uint a_off; uint b_off; uint c_off; uint d_off;
  uint z_off; uint dtb_off; uint sc_off; uint dx_off; uint ddt_off; uint da_off; uint ddv_off; uint dz_off;
  uint ddtb_off; uint flags; uint grads;
} p;
// grads: 1 dz, 2 dD, 4 ddt_bias
void main() {
  uint i = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (i >= p.I) return;
  uint BTIN = p.nb * p.T * p.I * NS;
  float a[NS], gh[NS], gA[NS];
  [[unroll]] for (uint n = 0u; n < NS; n++) {
    a[n] = -exp(alog[p.a_off + i * NS + n]);
    gA[n] = 0.0;
  }
  float Dv = (p.flags & HN_SSM_D) != 0u ? dd[p.d_off + i] : 0.0;
  float bias = (p.flags & HN_SSM_DT_BIAS) != 0u ? dtb[p.dtb_off + i] : 0.0;
  float gD = 0.0, gbias = 0.0;
  bool softplus = (p.flags & HN_SSM_SOFTPLUS) != 0u;
  for (uint b = 0u; b < p.nb; b++) {
    [[unroll]] for (uint n = 0u; n < NS; n++) gh[n] = 0.0;  // the running state of the forward
    for (uint t = 0u; t < p.T; t++) {
      uint ti = (b * p.T + t) * p.I + i, tn = (b * p.T + t) * NS;
      float d = dt[p.dt_off + ti] + bias;
      if (softplus) d = hn_softplus(d);
      float du = d * x[p.x_off + ti];
      [[unroll]] for (uint n = 0u; n < NS; n++) {
        gh[n] = exp(d * a[n]) * gh[n] + du * bm[p.b_off + tn + n];
        sc[p.sc_off + ti * NS + n] = gh[n];
      }
    }
    [[unroll]] for (uint n = 0u; n < NS; n++) gh[n] = 0.0;  // now dL/dh
    for (uint tt = p.T; tt > 0u; tt--) {
      uint t = tt - 1u;
      uint ti = (b * p.T + t) * p.I + i, tn = (b * p.T + t) * NS;
      float raw = dt[p.dt_off + ti] + bias;
      float d = softplus ? hn_softplus(raw) : raw;
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
        uint pi = ((b * p.T + t) * NS + n) * p.I + i;
        sc[p.sc_off + BTIN * 2u + pi] = g * hcur;  // dC part
        gh[n] += g * cm[p.c_off + tn + n];
        gdelta += gh[n] * (prev * a[n] * e + bv * u);
        gA[n] += gh[n] * prev * d * e * a[n];
        sc[p.sc_off + BTIN + pi] = gh[n] * d * u;  // dB part
        gu += gh[n] * d * bv;
        gh[n] *= e;
      }
      float gdt = gdelta * (softplus && raw <= 20.0 ? 1.0 / (1.0 + exp(-raw)) : 1.0);
      gbias += gdt;
      ddt[p.ddt_off + ti] = gdt;
      dx[p.dx_off + ti] = gu;
    }
  }
  [[unroll]] for (uint n = 0u; n < NS; n++) da[p.da_off + i * NS + n] += gA[n];
  if ((p.grads & 2u) != 0u) ddv[p.ddv_off + i] += gD;
  if ((p.grads & 4u) != 0u) ddtb[p.ddtb_off + i] += gbias;
}
