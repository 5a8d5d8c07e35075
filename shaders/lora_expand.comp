#version 450
#extension GL_GOOGLE_include_directive : require
// The rank-R expansion of a LoRA adapter: C(m, n) = alpha · Σ_{k<R} U(m, k)
// · W(k, n) (+= C when accumulating), all f32: y += u·Bᵀ in the forward
// (W(k, n) = B[n, k]), dx += du·A in the backward (W(k, n) = A[k, n]).
// Memory-bound on C, so each invocation owns 4 adjacent columns (one 16-byte
// load and store of C when VEC) and keeps their R weights in registers, for
// RM rows whose U values the workgroup stages in shared memory. The sums run
// in the order k = 0..R-1 with fused multiply-adds (as matmul.comp's).
#include "common.glsl"
layout(constant_id = 0) const uint R = 8;    // the rank (<= 32)
layout(constant_id = 1) const uint VEC = 0;  // 1: C rows and offset 16-byte aligned, N % 4 == 0
layout(local_size_x = 64) in;
const uint RM = 16u;

layout(std430, binding = 0) readonly buffer U { float u[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(std430, binding = 2) buffer C4 { vec4 c4[]; };
layout(push_constant) uniform P {
  uint M; uint N;
  uint u_off; uint u_sm;
  uint w_off; uint w_sk; uint w_sn;
  uint c_off; uint c_sm;
  float alpha; uint flags;  // 1 = accumulate
} p;

shared float us[RM * R];

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * 256u + 4u * tid, m0 = gl_WorkGroupID.y * RM;
  for (uint i = tid; i < RM * R; i += 64u) {
    uint m = m0 + i / R;
    us[i] = m < p.M ? u[p.u_off + m * p.u_sm + i % R] : 0.0;
  }
  vec4 wv[R];
  [[unroll]] for (uint k = 0u; k < R; k++) {
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      uint n = n0 + j;
      wv[k][j] = n < p.N ? w[p.w_off + k * p.w_sk + n * p.w_sn] : 0.0;
    }
  }
  barrier();
  if (n0 >= p.N) return;
  bool acc = (p.flags & 1u) != 0u;
  for (uint mm = 0u; mm < RM; mm++) {
    uint m = m0 + mm;
    if (m >= p.M) break;
    vec4 s = vec4(0.0);
    [[unroll]] for (uint k = 0u; k < R; k++) s = fma(vec4(us[mm * R + k]), wv[k], s);
    s *= p.alpha;
    uint ci = p.c_off + m * p.c_sm + n0;
    if (VEC == 1u) {
      c4[ci / 4u] = acc ? c4[ci / 4u] + s : s;
    } else {
      [[unroll]] for (uint j = 0u; j < 4u; j++)
        if (n0 + j < p.N) c[ci + j] = acc ? c[ci + j] + s[j] : s[j];
    }
  }
}
