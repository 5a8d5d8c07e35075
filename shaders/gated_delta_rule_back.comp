#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of the gated delta rule from a zero state
// (hn_op_gated_delta_rule_back): one invocation per key head, looping over the
// batch rows, the value heads that share the key head and their value
// columns, so the sums over columns and heads (dq, dk, dg, dβ, dA_log,
// ddt_bias) need no atomics. A column's forward runs first and keeps its
// states over time in scratch (T · KD per key head); the reverse pass then
// carries dL/dS of the column in registers. dq̂ and dk̂ gather in dqkv's q and
// k parts and dg, dβ in da and db before the norms' and the gates' chain
// rules turn them into the gradients of the inputs.
#include "common.glsl"
#include "ssm.glsl"
layout(constant_id = 0) const uint KD = 16;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 2) readonly buffer A { float av[]; };
layout(std430, binding = 3) readonly buffer Bt { float bv[]; };
layout(std430, binding = 4) readonly buffer AL { float alog[]; };
layout(std430, binding = 5) readonly buffer DB { float dtb[]; };
layout(std430, binding = 6) buffer SC { float sc[]; };
layout(std430, binding = 7) buffer DQKV { float dqkv[]; };
layout(std430, binding = 8) buffer DA { float da[]; };
layout(std430, binding = 9) buffer DBt { float dbv[]; };
layout(std430, binding = 10) buffer DAL { float dal[]; };
layout(std430, binding = 11) buffer DDTB { float ddtb[]; };
layout(push_constant) uniform P {
  uint nb; uint T; uint HK; uint HV; uint DV; uint dy_off; uint qkv_off; uint a_off; uint b_off; uint al_off;
  uint dtb_off; uint sc_off; uint dqkv_off; uint da_off; uint db_off; uint dal_off; uint ddtb_off; uint flags;
  float scale;
} p;
#define DR_DT_BIAS 2u
#define DR_L2 4u
#define DR_GRAD_A_LOG 8u
#define DR_GRAD_DT_BIAS 16u
float inv_norm(uint o) {
  if ((p.flags & DR_L2) == 0u) return 1.0;
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < KD; i++) s += qkv[o + i] * qkv[o + i];
  return inversesqrt(s + 1e-6);
}
void main() {
  uint hk = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (hk >= p.HK) return;
  uint rep = p.HV / p.HK, CD = 2u * p.HK * KD + p.HV * p.DV, sc0 = p.sc_off + hk * p.T * KD;
  float sv[KD], gs[KD];
  for (uint b = 0u; b < p.nb; b++) {
    for (uint t = 0u; t < p.T; t++) {
      uint o = p.dqkv_off + (b * p.T + t) * CD + hk * KD;
      [[unroll]] for (uint i = 0u; i < KD; i++) {
        dqkv[o + i] = 0.0;
        dqkv[o + p.HK * KD + i] = 0.0;
      }
    }
    for (uint r = 0u; r < rep; r++) {
      uint h = hk * rep + r;
      float A = -exp(alog[p.al_off + h]);
      float bias = (p.flags & DR_DT_BIAS) != 0u ? dtb[p.dtb_off + h] : 0.0;
      for (uint j = 0u; j < p.DV; j++) {
        // the column's forward, its states into scratch
        [[unroll]] for (uint i = 0u; i < KD; i++) sv[i] = 0.0;
        for (uint t = 0u; t < p.T; t++) {
          uint bt = b * p.T + t, ko = p.qkv_off + bt * CD + p.HK * KD + hk * KD;
          float rk = inv_norm(ko);
          float decay = exp(A * hn_softplus(av[p.a_off + bt * p.HV + h] + bias));
          float beta = 1.0 / (1.0 + exp(-bv[p.b_off + bt * p.HV + h]));
          float m = 0.0;
          [[unroll]] for (uint i = 0u; i < KD; i++) {
            sv[i] *= decay;
            m += sv[i] * qkv[ko + i];
          }
          float delta = beta * (qkv[p.qkv_off + bt * CD + 2u * p.HK * KD + h * p.DV + j] - m * rk) * rk;
          [[unroll]] for (uint i = 0u; i < KD; i++) {
            sv[i] += qkv[ko + i] * delta;
            sc[sc0 + t * KD + i] = sv[i];
          }
        }
        // the reverse pass: gs = dL/dS of the column
        [[unroll]] for (uint i = 0u; i < KD; i++) gs[i] = 0.0;
        for (uint tt = p.T; tt > 0u; tt--) {
          uint t = tt - 1u, bt = b * p.T + t;
          uint qo = p.qkv_off + bt * CD + hk * KD, ko = qo + p.HK * KD;
          uint dqo = p.dqkv_off + bt * CD + hk * KD, dko = dqo + p.HK * KD;
          float rq = inv_norm(qo) * p.scale, rk = inv_norm(ko);
          float decay = exp(A * hn_softplus(av[p.a_off + bt * p.HV + h] + bias));
          float beta = 1.0 / (1.0 + exp(-bv[p.b_off + bt * p.HV + h]));
          float go = dy[p.dy_off + bt * p.HV * p.DV + h * p.DV + j];
          float v = qkv[p.qkv_off + bt * CD + 2u * p.HK * KD + h * p.DV + j];
          float m = 0.0, dd = 0.0;
          [[unroll]] for (uint i = 0u; i < KD; i++) {
            float prev = t > 0u ? sc[sc0 + (t - 1u) * KD + i] : 0.0;
            sv[i] = decay * prev;  // S' (the decayed state before the update)
            m += sv[i] * qkv[ko + i] * rk;
            gs[i] += qkv[qo + i] * rq * go;
            dqkv[dqo + i] += sc[sc0 + t * KD + i] * go;
            dd += gs[i] * qkv[ko + i] * rk;
          }
          float delta = beta * (v - m), dm = -beta * dd, dalpha = 0.0;
          [[unroll]] for (uint i = 0u; i < KD; i++) {
            dqkv[dko + i] += gs[i] * delta + sv[i] * dm;
            gs[i] += qkv[ko + i] * rk * dm;
            dalpha += gs[i] * sv[i];  // Σ G' · S' = α Σ G' · S_prev
            gs[i] *= decay;
          }
          dqkv[p.dqkv_off + bt * CD + 2u * p.HK * KD + h * p.DV + j] = beta * dd;
          uint gi = bt * p.HV + h;
          float dg = dalpha, dbeta = (v - m) * dd;  // d g = dα · α
          da[p.da_off + gi] = j == 0u ? dg : da[p.da_off + gi] + dg;
          dbv[p.db_off + gi] = j == 0u ? dbeta : dbv[p.db_off + gi] + dbeta;
        }
      }
      // the gates: g = A · softplus(x), x = a + dt_bias; β = sigmoid(b)
      float gA = 0.0, gb = 0.0;
      for (uint t = 0u; t < p.T; t++) {
        uint gi = (b * p.T + t) * p.HV + h;
        float x = av[p.a_off + gi] + bias, dg = da[p.da_off + gi];
        float dx = dg * A * (x > 20.0 ? 1.0 : 1.0 / (1.0 + exp(-x)));
        gA += dg * A * hn_softplus(x);
        gb += dx;
        da[p.da_off + gi] = dx;
        float beta = 1.0 / (1.0 + exp(-bv[p.b_off + gi]));
        dbv[p.db_off + gi] *= beta * (1.0 - beta);
      }
      if ((p.flags & DR_GRAD_A_LOG) != 0u) dal[p.dal_off + h] += gA;
      if ((p.flags & DR_GRAD_DT_BIAS) != 0u) ddtb[p.ddtb_off + h] += gb;
    }
    // the scale and the L2 norms: dx = r (du - u (u · du)), u = x · r
    for (uint t = 0u; t < p.T; t++) {
      uint bt = b * p.T + t;
      for (uint w = 0u; w < 2u; w++) {
        uint xo = p.qkv_off + bt * CD + w * p.HK * KD + hk * KD, go = p.dqkv_off + bt * CD + w * p.HK * KD + hk * KD;
        float r = inv_norm(xo), s = w == 0u ? p.scale : 1.0, dot = 0.0;
        [[unroll]] for (uint i = 0u; i < KD; i++) dot += qkv[xo + i] * r * dqkv[go + i] * s;
        if ((p.flags & DR_L2) == 0u) dot = 0.0;
        [[unroll]] for (uint i = 0u; i < KD; i++) dqkv[go + i] = r * (dqkv[go + i] * s - qkv[xo + i] * r * dot);
      }
    }
  }
}
