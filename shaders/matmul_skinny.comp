#version 450
#extension GL_GOOGLE_include_directive : require
// Matmuls with one small output dimension (the rank of a LoRA adapter):
// C(l, s) = alpha · Σ_k X(l, k) · W(k, s) (+= C when accumulating) for
// s < S <= 16, all f32 with general strides (the host maps C = A·B or its
// transpose onto X, W). The tiled kernel would give such a product a few
// workgroups walking all of K; here each workgroup owns a few l and reads
// X once, coalesced:
//   MODE 0 (X contiguous along k): 8 rows of l, 32 invocations along k per
//     row, W staged through shared memory in chunks of KC;
//   MODE 1 (X contiguous along l): 8 l (a 32-byte sector) by 32 slices of
//     k, so that a long K still meets 256 workgroups for 2048 l.
// Partial sums meet in shared memory. F16 (fp16 autocast): the operands
// rounded to f16 and each result alpha·Σ rounded to f16 before it is stored
// or added to C (hn_round_f16, as matmul.comp's F16).
#include "common.glsl"
layout(constant_id = 0) const uint S = 8;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint F16 = 0;

float rnd(float v) { return F16 == 1u ? hn_round_f16(v) : v; }
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint L; uint K;
  uint x_off; uint x_sl; uint x_sk;
  uint w_off; uint w_sk; uint w_ss;
  uint c_off; uint c_sl; uint c_ss;
  float alpha; uint flags;  // 1 = accumulate
} p;

const uint KC = 256u;
shared float ws[MODE == 0u ? KC * (S + 1u) : 1u];
shared float red[256u * S];

void main() {
  uint tid = gl_LocalInvocationID.x, hi = tid / 32u, lo = tid % 32u;
  float acc[S];
  [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = 0.0;
  uint l;
  if (MODE == 0u) {
    l = hn_group_index() * 8u + hi;
    bool live = l < p.L;
    for (uint k0 = 0u; k0 < p.K; k0 += KC) {
      barrier();
      for (uint i = tid; i < KC * S; i += 256u) {
        uint kk = i / S, s = i % S;
        ws[kk * (S + 1u) + s] = k0 + kk < p.K ? rnd(w[p.w_off + (k0 + kk) * p.w_sk + s * p.w_ss]) : 0.0;
      }
      barrier();
      if (live) {
        for (uint kk = lo; kk < KC && k0 + kk < p.K; kk += 32u) {
          float xv = rnd(x[p.x_off + l * p.x_sl + (k0 + kk) * p.x_sk]);
          [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = fma(xv, ws[kk * (S + 1u) + s], acc[s]);
        }
      }
    }
  } else {
    l = hn_group_index() * 8u + tid % 8u;
    if (l < p.L) {
      for (uint k = tid / 8u; k < p.K; k += 32u) {
        float xv = rnd(x[p.x_off + l * p.x_sl + k * p.x_sk]);
        [[unroll]] for (uint s = 0u; s < S; s++) acc[s] = fma(xv, rnd(w[p.w_off + k * p.w_sk + s * p.w_ss]), acc[s]);
      }
    }
  }
  [[unroll]] for (uint s = 0u; s < S; s++) red[tid * S + s] = acc[s];
  barrier();
  // MODE 0: row hi's 32 partials per s; MODE 1: l's 32 slices per s.
  if (MODE == 0u) {
    if (lo < S) {
      float sum = 0.0;
      for (uint j = 0u; j < 32u; j++) sum += red[(hi * 32u + j) * S + lo];
      uint row = hn_group_index() * 8u + hi;
      if (row < p.L) {
        uint ci = p.c_off + row * p.c_sl + lo * p.c_ss;
        c[ci] = ((p.flags & 1u) != 0u ? c[ci] : 0.0) + rnd(p.alpha * sum);
      }
    }
  } else {
    for (uint i = tid; i < 8u * S; i += 256u) {
      uint ll = i % 8u, s = i / 8u;
      float sum = 0.0;
      for (uint j = 0u; j < 32u; j++) sum += red[(j * 8u + ll) * S + s];
      uint row = hn_group_index() * 8u + ll;
      if (row < p.L) {
        uint ci = p.c_off + row * p.c_sl + s * p.c_ss;
        c[ci] = ((p.flags & 1u) != 0u ? c[ci] : 0.0) + rnd(p.alpha * sum);
      }
    }
  }
}
