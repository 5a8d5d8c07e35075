#version 450
#extension GL_GOOGLE_include_directive : require
// The gated delta rule (ops-delta.h, hn_op_gated_delta_rule): one invocation
// per (batch row, value head, value column j), a sequential loop over time
// with column j of the state S (KD values, a specialization constant) in
// registers. Per token: S *= exp(g); m = Sᵀk̂; S += k̂ · β (v_j - m); y_j = Sᵀq̂.
// The columns never meet, so no invocation waits for another; each reads its
// token's q and k whole for their norms (cached: a workgroup shares them).
#include "common.glsl"
#include "ssm.glsl"
layout(constant_id = 0) const uint KD = 16;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer A { float av[]; };
layout(std430, binding = 2) readonly buffer Bt { float bv[]; };
layout(std430, binding = 3) readonly buffer AL { float alog[]; };
layout(std430, binding = 4) readonly buffer DB { float dtb[]; };
layout(std430, binding = 5) buffer S { float st[]; };
layout(std430, binding = 6) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint nb; uint T; uint HK; uint HV; uint DV; uint qkv_off; uint a_off; uint b_off; uint al_off; uint dtb_off;
  uint s_off; uint y_off; uint flags; float scale;
} p;
#define DR_STATE 1u
#define DR_DT_BIAS 2u
#define DR_L2 4u
void main() {
  uint g = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (g >= p.nb * p.HV * p.DV) return;
  uint j = g % p.DV, h = (g / p.DV) % p.HV, b = g / (p.DV * p.HV);
  uint hk = h / (p.HV / p.HK), CD = 2u * p.HK * KD + p.HV * p.DV;
  bool has_state = (p.flags & DR_STATE) != 0u, l2 = (p.flags & DR_L2) != 0u;
  uint s0 = p.s_off + (b * p.HV + h) * KD * p.DV + j;
  float s[KD];
  [[unroll]] for (uint i = 0u; i < KD; i++) s[i] = has_state ? st[s0 + i * p.DV] : 0.0;
  float A = -exp(alog[p.al_off + h]);
  float bias = (p.flags & DR_DT_BIAS) != 0u ? dtb[p.dtb_off + h] : 0.0;
  for (uint t = 0u; t < p.T; t++) {
    uint bt = b * p.T + t;
    uint qo = p.qkv_off + bt * CD + hk * KD, ko = qo + p.HK * KD;
    float rq = 1.0, rk = 1.0;
    if (l2) {
      float sq = 0.0, sk = 0.0;
      [[unroll]] for (uint i = 0u; i < KD; i++) {
        float qi = qkv[qo + i], ki = qkv[ko + i];
        sq += qi * qi;
        sk += ki * ki;
      }
      rq = inversesqrt(sq + 1e-6);
      rk = inversesqrt(sk + 1e-6);
    }
    rq *= p.scale;
    float decay = exp(A * hn_softplus(av[p.a_off + bt * p.HV + h] + bias));
    float beta = 1.0 / (1.0 + exp(-bv[p.b_off + bt * p.HV + h]));
    float m = 0.0;
    [[unroll]] for (uint i = 0u; i < KD; i++) {
      s[i] *= decay;
      m += s[i] * qkv[ko + i];
    }
    float delta = beta * (qkv[p.qkv_off + bt * CD + 2u * p.HK * KD + h * p.DV + j] - m * rk) * rk;
    float o = 0.0;
    [[unroll]] for (uint i = 0u; i < KD; i++) {
      s[i] += qkv[ko + i] * delta;
      o += s[i] * qkv[qo + i];
    }
    y[p.y_off + bt * p.HV * p.DV + h * p.DV + j] = o * rq;
  }
  if (has_state) {
    [[unroll]] for (uint i = 0u; i < KD; i++) st[s0 + i * p.DV] = s[i];
  }
}
