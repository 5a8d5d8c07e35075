#version 450
#extension GL_GOOGLE_include_directive : require
// The rank-R expansion of LoRA adapters: C(m, n) = alpha · Σ_j Σ_{k<R}
// U_j(m, k) · W_j(k, n) (+= C when accumulating) over NW pairs (U_j, W_j),
// all f32: y += u·Bᵀ in the forward (W(k, n) = B[n, k]), dx += du·A in the
// backward (W(k, n) = A[k, n]; the q, k and v adapters of one input at once).
// Memory-bound on C, so each invocation owns 4 adjacent columns (one 16-byte
// load and store of C when VEC) and keeps their R weights in registers, for
// RM rows whose U values the workgroup stages in shared memory. The sums run
// in the order k = 0..R-1 with fused multiply-adds (as matmul.comp's), and
// the pairs' terms join C in turn, as NW calls of one pair would. F16 = 1
// is fp16 autocast (as matmul.comp's F16): U and W rounded to f16 as loaded,
// each pair's alpha·Σ rounded to f16 before it joins C.
#include "common.glsl"
layout(constant_id = 0) const uint R = 8;    // the rank (<= 32)
layout(constant_id = 1) const uint VEC = 0;  // 1: C rows and offset 16-byte aligned, N % 4 == 0
layout(constant_id = 2) const uint NW = 1;   // 1..3
layout(constant_id = 3) const uint F16 = 0;
layout(local_size_x = 64) in;
const uint RM = 16u;

layout(std430, binding = 0) readonly buffer U { float u[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(std430, binding = 2) buffer C4 { vec4 c4[]; };
layout(std430, binding = 3) readonly buffer U1 { float u1[]; };
layout(std430, binding = 4) readonly buffer W1 { float w1[]; };
layout(std430, binding = 5) readonly buffer U2 { float u2[]; };
layout(std430, binding = 6) readonly buffer W2 { float w2[]; };
layout(push_constant) uniform P {
  uint M; uint N;
  uint u_off; uint u_sm;
  uint w_off; uint w_sk; uint w_sn;
  uint c_off; uint c_sm;
  float alpha; uint flags;  // 1 = accumulate
  uint u_off1; uint w_off1; uint u_off2; uint w_off2;
} p;

shared float us[NW * RM * R];

float r16(float v) { return F16 == 1u ? hn_round_f16(v) : v; }
float uat(uint j, uint i) { return r16(j == 0u ? u[p.u_off + i] : j == 1u ? u1[p.u_off1 + i] : u2[p.u_off2 + i]); }
float wat(uint j, uint i) { return r16(j == 0u ? w[p.w_off + i] : j == 1u ? w1[p.w_off1 + i] : w2[p.w_off2 + i]); }

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * 256u + 4u * tid, m0 = gl_WorkGroupID.y * RM;
  [[unroll]] for (uint j = 0u; j < NW; j++)
    for (uint i = tid; i < RM * R; i += 64u) {
      uint m = m0 + i / R;
      us[j * RM * R + i] = m < p.M ? uat(j, m * p.u_sm + i % R) : 0.0;
    }
  vec4 wv[NW * R];
  [[unroll]] for (uint j = 0u; j < NW; j++)
    [[unroll]] for (uint k = 0u; k < R; k++) {
      [[unroll]] for (uint e = 0u; e < 4u; e++) {
        uint n = n0 + e;
        wv[j * R + k][e] = n < p.N ? wat(j, k * p.w_sk + n * p.w_sn) : 0.0;
      }
    }
  barrier();
  if (n0 >= p.N) return;
  bool acc = (p.flags & 1u) != 0u;
  for (uint mm = 0u; mm < RM; mm++) {
    uint m = m0 + mm;
    if (m >= p.M) break;
    uint ci = p.c_off + m * p.c_sm + n0;
    vec4 cv = vec4(0.0);
    if (acc) {
      if (VEC == 1u) {
        cv = c4[ci / 4u];
      } else {
        [[unroll]] for (uint e = 0u; e < 4u; e++)
          if (n0 + e < p.N) cv[e] = c[ci + e];
      }
    }
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      vec4 s = vec4(0.0);
      [[unroll]] for (uint k = 0u; k < R; k++) s = fma(vec4(us[(j * RM + mm) * R + k]), wv[j * R + k], s);
      s *= p.alpha;
      if (F16 == 1u) s = vec4(hn_round_f16(s.x), hn_round_f16(s.y), hn_round_f16(s.z), hn_round_f16(s.w));
      // the first term replaces C when not accumulating, as one call's store would
      cv = acc || j > 0u ? cv + s : s;
    }
    if (VEC == 1u) {
      c4[ci / 4u] = cv;
    } else {
      [[unroll]] for (uint e = 0u; e < 4u; e++)
        if (n0 + e < p.N) c[ci + e] = cv[e];
    }
  }
}
