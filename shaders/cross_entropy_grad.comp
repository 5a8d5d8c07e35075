#version 450
#extension GL_GOOGLE_include_directive : require
// cross_entropy.comp and cross_entropy_back.comp in one kernel, one
// workgroup per row: loss[r] = logsumexp(logits[r]) - logits[r, target[r]]
// (0 when ignored, NaN for a target outside [0, V)) and dlogits[r, :] =
// row_scale[r] · (softmax(logits[r]) - onehot(target[r])). The row is read
// twice instead of five times: once for its max and sum together (each
// invocation rescales its running sum when its max grows), once for the
// gradient. VEC: 16-byte loads (V % 4 == 0, offsets on 4 elements).
// F16: dlogits is f16 (4 halves, one 8-byte store per 4 columns, VEC only):
// 1 clamped to ±65504 and rounded as to_f16.comp's mode 0 does, for a matmul
// that reads f16 operands (the LM head's input gradient); 2 fp16 autocast's
// rounding (hn_round_f16: ±Inf past the range, so the loss scaler sees an
// overflow as PyTorch's f16 gradient shows it). Otherwise f32 and
// may be the logits (in place: each invocation reads a column before writing it).
// X16: the logits are f16 (the LM head's output stored as fp16 autocast keeps
// it; VEC only, 4 halves per 8-byte load).
#include "common.glsl"
#include "reduce.glsl"
layout(constant_id = 0) const uint VEC = 0;
layout(constant_id = 1) const uint F16 = 0;
layout(constant_id = 2) const uint X16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 0) buffer X4 { vec4 x4[]; };
layout(std430, binding = 0) buffer X2 { uvec2 xh2[]; };
layout(std430, binding = 0) buffer XH { uint xh[]; };

// 4 logits from column c (c % 4 == 0) of the row at element xb
vec4 logits4(uint xb, uint c) {
  if (X16 == 1u) {
    uvec2 w = xh2[(xb + c) / 4u];
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  }
  return x4[(xb + c) / 4u];
}

float logit(uint i) {
  if (X16 == 0u) return x[i];
  vec2 h = unpackHalf2x16(xh[i / 2u]);
  return i % 2u == 0u ? h.x : h.y;
}
layout(std430, binding = 1) readonly buffer T { int tgt[]; };
layout(std430, binding = 2) readonly buffer S { float rs[]; };
layout(std430, binding = 3) writeonly buffer L { float loss[]; };
layout(std430, binding = 4) buffer D { float dl[]; };
layout(std430, binding = 4) buffer D4 { vec4 dl4[]; };
layout(std430, binding = 4) buffer D2 { uvec2 dl2[]; };
layout(push_constant) uniform P {
  uint rows; uint V; uint x_off; uint t_off; uint s_off; uint l_off; uint d_off; int ignore_index;
} p;

// The gradient of 4 columns from c, where e = exp(logit - max) / sum.
vec4 grad4(vec4 e, uint c, int target, float f) {
  vec4 hot = vec4(equal(ivec4(c) + ivec4(0, 1, 2, 3), ivec4(target)));
  return f == 0.0 ? vec4(0.0) : f * (e - hot);
}

void main() {
  uint row = hn_group_index();
  if (row >= p.rows) return;
  uint t = gl_LocalInvocationID.x;
  int target = tgt[p.t_off + row];
  float f = rs[p.s_off + row];
  uint xb = p.x_off + row * p.V, db = p.d_off + row * p.V;
  bool ignored = target == p.ignore_index;
  float m = HN_NEG_INF, s = 0.0;
  // an ignored row of scale 0 needs no softmax: its loss and gradient are 0
  if (!(ignored && f == 0.0)) {
    if (VEC == 1u) {
      for (uint c = 4u * t; c < p.V; c += 1024u) {
        vec4 v = logits4(xb, c);
        float mn = max(m, max(max(v.x, v.y), max(v.z, v.w)));
        s = s * exp(m - mn) + dot(exp(v - mn), vec4(1.0));
        m = mn;
      }
    } else {
      for (uint c = t; c < p.V; c += 256u) {
        float v = x[xb + c];
        if (v > m) {
          s = s * exp(m - v) + 1.0;
          m = v;
        } else {
          s += exp(v - m);
        }
      }
    }
  }
  float mx = hn_wg_max(m);
  // an invocation without columns (or only -inf ones) adds nothing
  float se = hn_wg_sum(s == 0.0 ? 0.0 : s * exp(m - mx));
  if (t == 0u) {
    float l = 0.0;
    if (!ignored) {
      l = uintBitsToFloat(0x7fc00000u);
      if (target >= 0 && uint(target) < p.V) l = log(se) + mx - logit(xb + uint(target));
    }
    loss[p.l_off + row] = l;
  }
  // every invocation has read the target's logit before any writes it (in place)
  barrier();
  float inv = 1.0 / se;
  if (VEC == 1u) {
    for (uint c = 4u * t; c < p.V; c += 1024u) {
      vec4 g = grad4(exp(logits4(xb, c) - mx) * inv, c, target, f);
      if (F16 != 0u) {
        g = hn_f16_store(g, F16);
        dl2[(db + c) / 4u] = uvec2(packHalf2x16(g.xy), packHalf2x16(g.zw));
      } else {
        dl4[(db + c) / 4u] = g;
      }
    }
  } else {
    for (uint c = t; c < p.V; c += 256u) {
      float pr = exp(x[xb + c] - mx) * inv;
      dl[db + c] = f == 0.0 ? 0.0 : f * (pr - (int(c) == target ? 1.0 : 0.0));
    }
  }
}
