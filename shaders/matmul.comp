#version 450
#extension GL_GOOGLE_include_directive : require
// Tiled batched matmul: C[b] = alpha * A[b] · B[b] (+ bias[n]) (+= C when
// accumulating). Strided operands cover x·Wᵀ (B(k, n) = W[n, k]) and the
// transposed cases; B may be f32/f16/bf16 (spec constant 0), math is f32.
// Tiles: BM x BN outputs per workgroup, BK deep, each invocation TM x TN.
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;
layout(local_size_x_id = 6) in;  // = (BM / TM) * (BN / TN)
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { uint bw[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint b_off; uint c_off; uint bias_off;
  uint a_sb; uint a_sm; uint a_sk;
  uint b_sb; uint b_sk; uint b_sn;
  uint c_sb; uint c_sm;
  float alpha; uint flags;  // 1 = accumulate, 2 = has bias
} p;

// +1 padding: the loaders write along k, which would otherwise hit one bank.
shared float As[BK * (BM + 1)];
shared float Bs[BK * (BN + 1)];

void main() {
  const uint NT = (BM / TM) * (BN / TN);
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, batch = gl_WorkGroupID.z;
  uint tx = tid % (BN / TN), ty = tid / (BN / TN);
  float acc[TM * TN];
  [[unroll]] for (uint i = 0u; i < TM * TN; i++) acc[i] = 0.0;
  uint abase = p.a_off + batch * p.a_sb, bbase = p.b_off + batch * p.b_sb;

  for (uint k0 = 0u; k0 < p.K; k0 += BK) {
    for (uint e = tid; e < BK * BM; e += NT) {
      uint mm = e / BK, kk = e % BK;
      uint gm = m0 + mm, gk = k0 + kk;
      As[kk * (BM + 1u) + mm] = (gm < p.M && gk < p.K) ? a[abase + gm * p.a_sm + gk * p.a_sk] : 0.0;
    }
    for (uint e = tid; e < BK * BN; e += NT) {
      uint nn = e / BK, kk = e % BK;
      uint gn = n0 + nn, gk = k0 + kk;
      float v = 0.0;
      if (gn < p.N && gk < p.K) { uint idx = bbase + gk * p.b_sk + gn * p.b_sn; v = HN_LOAD(bw, BDT, idx); }
      Bs[kk * (BN + 1u) + nn] = v;
    }
    barrier();
    [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
      float ar[TM], br[TN];
      [[unroll]] for (uint i = 0u; i < TM; i++) ar[i] = As[kk * (BM + 1u) + ty * TM + i];
      [[unroll]] for (uint j = 0u; j < TN; j++) br[j] = Bs[kk * (BN + 1u) + tx * TN + j];
      [[unroll]] for (uint i = 0u; i < TM; i++)
        [[unroll]] for (uint j = 0u; j < TN; j++) acc[i * TN + j] = fma(ar[i], br[j], acc[i * TN + j]);
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < TM; i++) {
    uint gm = m0 + ty * TM + i;
    if (gm >= p.M) continue;
    [[unroll]] for (uint j = 0u; j < TN; j++) {
      uint gn = n0 + tx * TN + j;
      if (gn >= p.N) continue;
      float v = p.alpha * acc[i * TN + j];
      if ((p.flags & 2u) != 0u) v += bias[p.bias_off + gn];
      uint ci = p.c_off + batch * p.c_sb + gm * p.c_sm + gn;
      if ((p.flags & 1u) != 0u) v += c[ci];
      c[ci] = v;
    }
  }
}
