#version 450
#extension GL_GOOGLE_include_directive : require
// Register-blocked batched matmul: C[b] = alpha * A[b] · B[b] (+ bias[n])
// (+= C when accumulating). Strided operands cover x·Wᵀ (B(k, n) = W[n, k])
// and the transposed cases; B may be f32/f16/bf16 (spec constant 0), math
// is f32. With F16 (fp16 autocast on a device without cooperative matrices)
// both operands are rounded to f16 as they enter shared memory and each
// result (alpha · A·B + f16(bias)) is rounded to f16 before it is stored or
// added to C: the numbers of the tensor-core kernels, on any device.
// Workgroup: BM x BN outputs, BK deep; invocation (tx, ty) owns TM x TN of
// them as (TM / 4) x (TN / 4) blocks of 4 x 4, block i at row i * BM / (TM / 4)
// + ty * 4, so a warp's vec4 reads of shared memory are conflict-free.
// Loads (matmul_load.glsl): 4-element fragments, prefetched into registers
// while the previous tile is multiplied, into double-buffered shared memory
// (one barrier per BK step).
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 8;
layout(constant_id = 4) const uint TM = 8;
layout(constant_id = 5) const uint TN = 8;
layout(local_size_x_id = 6) in;  // = (BM / TM) * (BN / TN)
layout(constant_id = 7) const uint A_MODE = 0;
layout(constant_id = 8) const uint B_MODE = 0;
layout(constant_id = 9) const uint C_VEC = 0;  // 1: rows of C 4-aligned, vec4 stores
layout(constant_id = 10) const uint F16 = 0;   // 1: fp16 autocast (see above)
// 1: C is f16 (fp16 autocast, whose results are f16 values already: stored
// exactly, 4 halves per 8-byte store; C_VEC, no accumulate)
layout(constant_id = 11) const uint C16 = 0;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { uint bw[]; };
layout(std430, binding = 1) readonly buffer B4 { uvec4 b4[]; };
layout(std430, binding = 1) readonly buffer B2 { uvec2 b2[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(std430, binding = 3) buffer C4 { vec4 c4[]; };
layout(std430, binding = 3) buffer C2 { uvec2 c2[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint b_off; uint c_off; uint bias_off;
  uint a_sb; uint a_sm; uint a_sk;
  uint b_sb; uint b_sk; uint b_sn;
  uint c_sb; uint c_sm;
  float alpha; uint flags;  // 1 = accumulate, 2 = has bias
} p;

const uint NT = (BM / TM) * (BN / TN);
const uint PAD = 4;  // keeps the k-major scatter of k-contiguous fragments off one bank
const uint SA = BM + PAD, SB = BN + PAD;
const uint FA = BM * BK / 4, FB = BN * BK / 4;  // fragments per tile
const uint LA = (FA + NT - 1) / NT, LB = (FB + NT - 1) / NT;
const uint MG = TM / 4, NG = TN / 4;

// [buffer][k][m] and [buffer][k][n], as vec4 along m / n
shared vec4 As[2 * BK * SA / 4];
shared vec4 Bs[2 * BK * SB / 4];

#include "matmul_load.glsl"

vec4 round4(vec4 v) {
  return vec4(hn_round_f16(v.x), hn_round_f16(v.y), hn_round_f16(v.z), hn_round_f16(v.w));
}

void store_a(uint f, uint buf, vec4 v) {
  if (f >= FA) return;
  if (F16 == 1u) v = round4(v);
  if (A_MODE == 2) {
    uint kk = f / (BM / 4), mm = (f % (BM / 4)) * 4;
    As[((buf * BK + kk) * SA + mm) >> 2] = v;
  } else {
    uint mm = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint o = (buf * BK + kk + i) * SA + mm;
      As[o >> 2][o & 3u] = v[i];
    }
  }
}

void store_b(uint f, uint buf, vec4 v) {
  if (f >= FB) return;
  if (F16 == 1u) v = round4(v);
  if (B_MODE == 2) {
    uint kk = f / (BN / 4), nn = (f % (BN / 4)) * 4;
    Bs[((buf * BK + kk) * SB + nn) >> 2] = v;
  } else {
    uint nn = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
      uint o = (buf * BK + kk + i) * SB + nn;
      Bs[o >> 2][o & 3u] = v[i];
    }
  }
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, batch = gl_WorkGroupID.z;
  uint tx = tid % (BN / TN), ty = tid / (BN / TN);
  uint abase = p.a_off + batch * p.a_sb, bbase = p.b_off + batch * p.b_sb;

  vec4 acc[TM * NG];  // row r, column block j: acc[r * NG + j]
  [[unroll]] for (uint i = 0u; i < TM * NG; i++) acc[i] = vec4(0.0);
  vec4 ra[LA], rb[LB];

  uint ntiles = (p.K + BK - 1u) / BK;
  [[unroll]] for (uint l = 0u; l < LA; l++) ra[l] = fetch_a(tid + l * NT, m0, 0u, abase);
  [[unroll]] for (uint l = 0u; l < LB; l++) rb[l] = fetch_b(tid + l * NT, n0, 0u, bbase);
  [[unroll]] for (uint l = 0u; l < LA; l++) store_a(tid + l * NT, 0u, ra[l]);
  [[unroll]] for (uint l = 0u; l < LB; l++) store_b(tid + l * NT, 0u, rb[l]);
  barrier();

  for (uint t = 0u; t < ntiles; t++) {
    uint buf = t & 1u;
    bool more = t + 1u < ntiles;
    if (more) {
      uint k1 = (t + 1u) * BK;
      [[unroll]] for (uint l = 0u; l < LA; l++) ra[l] = fetch_a(tid + l * NT, m0, k1, abase);
      [[unroll]] for (uint l = 0u; l < LB; l++) rb[l] = fetch_b(tid + l * NT, n0, k1, bbase);
    }
    [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
      vec4 av[MG], bv[NG];
      [[unroll]] for (uint i = 0u; i < MG; i++) av[i] = As[((buf * BK + kk) * SA + i * (BM / MG) + ty * 4u) >> 2];
      [[unroll]] for (uint j = 0u; j < NG; j++) bv[j] = Bs[((buf * BK + kk) * SB + j * (BN / NG) + tx * 4u) >> 2];
      [[unroll]] for (uint i = 0u; i < MG; i++)
        [[unroll]] for (uint r = 0u; r < 4u; r++)
          [[unroll]] for (uint j = 0u; j < NG; j++)
            acc[(i * 4u + r) * NG + j] = fma(vec4(av[i][r]), bv[j], acc[(i * 4u + r) * NG + j]);
    }
    if (more) {
      [[unroll]] for (uint l = 0u; l < LA; l++) store_a(tid + l * NT, buf ^ 1u, ra[l]);
      [[unroll]] for (uint l = 0u; l < LB; l++) store_b(tid + l * NT, buf ^ 1u, rb[l]);
    }
    barrier();
  }

  uint cbase = p.c_off + batch * p.c_sb;
  [[unroll]] for (uint i = 0u; i < MG; i++)
    [[unroll]] for (uint r = 0u; r < 4u; r++) {
      uint gm = m0 + i * (BM / MG) + ty * 4u + r;
      if (gm >= p.M) continue;
      [[unroll]] for (uint j = 0u; j < NG; j++) {
        uint gn = n0 + j * (BN / NG) + tx * 4u;
        vec4 v = p.alpha * acc[(i * 4u + r) * NG + j];
        uint ci = cbase + gm * p.c_sm + gn;
        if (C_VEC == 1u && gn < p.N) {  // N % 4 == 0: all 4 in range
          if ((p.flags & 2u) != 0u) {
            vec4 bv = vec4(bias[p.bias_off + gn], bias[p.bias_off + gn + 1u], bias[p.bias_off + gn + 2u],
                           bias[p.bias_off + gn + 3u]);
            v += F16 == 1u ? round4(bv) : bv;
          }
          if (F16 == 1u) v = round4(v);
          if (C16 == 1u) {
            c2[ci >> 2] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
            continue;
          }
          if ((p.flags & 1u) != 0u) v += c4[ci >> 2];
          c4[ci >> 2] = v;
        } else if (C_VEC == 0u) {
          [[unroll]] for (uint e = 0u; e < 4u; e++) {
            if (gn + e >= p.N) continue;
            float s = v[e];
            if ((p.flags & 2u) != 0u) s += F16 == 1u ? hn_round_f16(bias[p.bias_off + gn + e]) : bias[p.bias_off + gn + e];
            if (F16 == 1u) s = hn_round_f16(s);
            if ((p.flags & 1u) != 0u) s += c[ci + e];
            c[ci + e] = s;
          }
        }
      }
    }
}
