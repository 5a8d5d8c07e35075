#version 450
#extension GL_GOOGLE_include_directive : require
// The sum of a split-K matmul's partial products (matmul_cm2.comp with
// splits > 1 writes split s of C at part_off + s * M * N in a scratch
// buffer): C[m, n] = alpha * sum_s P[s, m, n] (+ bias[n]) (+ C[m, n]), the
// same epilogue the one-pass kernel applies (F16: fp16 autocast's, the bias
// and the sum rounded to f16 before C adds them). Four columns per invocation
// when N is a multiple of 4 (VEC), else one.
#include "common.glsl"
layout(constant_id = 0) const uint VEC = 1;
layout(constant_id = 1) const uint F16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer P4 { vec4 part4[]; };
layout(std430, binding = 0) readonly buffer P1 { float part[]; };
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform Push {
  uint M; uint N; uint splits; uint part_off;
  uint c_off; uint c_sm; uint bias_off;
  float alpha; uint flags;  // 1 = accumulate, 2 = has bias
} p;

void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;  // in units of VEC columns
  uint nv = p.N / VEC;
  if (i >= p.M * nv) return;
  uint m = i / nv, n = (i % nv) * VEC;
  uint mn = p.M * p.N;
  vec4 s = vec4(0.0);
  if (VEC == 4u) {
    for (uint k = 0u; k < p.splits; k++) s += part4[(p.part_off + k * mn + m * p.N + n) / 4u];
  } else {
    for (uint k = 0u; k < p.splits; k++) s.x += part[p.part_off + k * mn + m * p.N + n];
  }
  [[unroll]] for (uint j = 0u; j < VEC; j++) {
    float x = s[j] * p.alpha;
    if ((p.flags & 2u) != 0u) x += F16 == 1u ? hn_round_f16(bias[p.bias_off + n + j]) : bias[p.bias_off + n + j];
    if (F16 == 1u) x = hn_round_f16(x);
    uint ci = p.c_off + m * p.c_sm + n + j;
    if ((p.flags & 1u) != 0u) x += c[ci];
    c[ci] = x;
  }
}
