#version 450
#extension GL_GOOGLE_include_directive : require
// Backward of hier_matvec.comp, part 1 (engine/hierarchos/hierarchos-vk-back-mv.c):
// recomputes v = W x + b + res exactly as the forward did (or reads it
// where the forward kept it: flags HN_HIER_MV_KEEP_V) and writes
// dv = dL/dv to the scratch gwk[bs + o], from the gradients of the outputs
// (y, and y2 for post 0). The per-output inputs get theirs here too:
// the bias (gprm), the residual (gwk), channel mix's deep embedding aux
// (gwk) and the gate's logit prm[aux] (gprm, out_n = 1). The derivatives
// are the CPU tape's (hierarchos-tape.c): a clamp passes the gradient
// inside [-m, m] (edges included) and blocks it outside and at non-finite
// values.
#define HIER_BACK
#include "hier.glsl"
#include "hier_mv.glsl"

float inside(float x, float lo, float hi) { return x >= lo && x <= hi ? 1.0 : 0.0; }

// d act(v) / dv, a = act(v).
float act_d(uint act, float v, float a) {
  if (act == 1u) {
    float s = hier_sigmoid(v);
    return s + v * s * (1.0 - s);
  }
  if (act == 2u) {
    float y = hn_erfc_pos(abs(v) * 0.70710678118654752);
    float cdf = v >= 0.0 ? 1.0 - 0.5 * y : 0.5 * y;
    return cdf + v * exp(-0.5 * v * v) * 0.3989422804014327;
  }
  if (act == 4u) return v > 0.0 ? 1.0 : 0.0;
  if (act == 5u) return v > 0.0 ? 2.0 * v : 0.0;
  if (act == 7u) return a * (1.0 - a);
  if (act == 8u) return 1.0 - a * a;
  if (act == 9u) {
    float u = -v;
    return u > 20.0 ? 1.0 : (u < -20.0 ? exp(u) : hier_sigmoid(u));
  }
  return 1.0;
}

// v = W x + b + res of output o
void back_out(uint o, float v) {
  uint gb = gl_WorkGroupID.z * p.ps;
  float g = gwk[rb + p.y_off + o], dv;
  if (p.post == 0u) {
    float a = hier_act(p.act, v), z = p.scale * a;
    if (p.clamp_v > 0.0) g *= inside(z, -p.clamp_v, p.clamp_v);
    if (p.y2_off != HIER_NONE) g += gwk[rb + p.y2_off + o] * inside(z, -p.clamp2, p.clamp2);
    dv = g * p.scale * act_d(p.act, v, a);
  } else if (p.post == 1u) {
    float k = v, pass = 1.0;
    if (p.clamp_v > 0.0) {
      pass = inside(v, -p.clamp_v, p.clamp_v);
      k = hier_clamp(v, p.clamp_v);
    }
    float f = k > 0.0 ? k * k : 0.0;
    if (p.aux != HIER_NONE) {
      float d0 = wk[rb + p.aux + o], d = d0, dpass = 1.0;
      if (p.f1 > 0.0) {
        dpass = inside(d0, -p.f1, p.f1);
        d = hier_clamp(d0, p.f1);
      }
      if (p.clamp_v > 0.0 && p.f1 > 0.0) {
        float m = p.clamp_v * p.clamp_v * p.f1;
        g *= inside(f * d, -m, m);
      }
      gwk[rb + p.aux + o] += g * f * dpass;
      g *= d;
    }
    dv = g * (k > 0.0 ? 2.0 * k : 0.0) * pass;
  } else if (p.post == 2u) {
    float z = prm[p.aux] + v, s = hier_sigmoid(hier_clamp(z, 50.0));
    if (p.f1 > 0.0) g *= 1.0 - p.f1;
    dv = g * (s * (1.0 - s)) * inside(z, -50.0, 50.0);
    gprm[gb + p.aux] += dv;
  } else {
    // halting: the probability's gradient only; the control words get none
    float s = hier_sigmoid(hier_clamp(v, p.f1));
    g *= inside(s, 1e-6, 1.0 - 1e-6);
    dv = g * (s * (1.0 - s)) * inside(v, -p.f1, p.f1);
  }
  gwk[rb + p.bs + o] = dv;
  if (p.b_off != HIER_NONE) gprm[gb + p.b_off + o] += dv;
  if (p.res_off != HIER_NONE) gwk[rb + p.res_off + o] += dv;
}

void finish(uint o, float v) {
  if (p.b_off != HIER_NONE) v += prm[p.b_off + o];
  if (p.res_off != HIER_NONE) v += wk[rb + p.res_off + o];
  back_out(o, v);
}

void main() {
  rb = gl_WorkGroupID.z * p.rs;
  if (hier_skip(p.pred, rb)) return;
  if ((p.flags & 2u) != 0u && p.post != 3u) {
    // the forward kept v: one output a thread
    uint o = hn_group_index() * 128u + gl_LocalInvocationID.x;
    if (o < p.out_n) back_out(o, wk[rb + p.u0 + o]);
    return;
  }
  hier_mv_run();
}
