#version 450
#extension GL_GOOGLE_include_directive : require
// Tensor-core matmul through VK_KHR_cooperative_matrix: same contract and
// push constants as matmul.comp (C[b] = alpha * A[b] · B[b] (+ bias) (+= C)),
// with both operands rounded to f16 in shared memory (clamped to ±65504; a
// bf16 B is converted too) and f32 accumulation in 16x16x16 subgroup tiles.
// Workgroup: (BM / WM) x (BN / WN) subgroups, each owning a WM x WN block.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint WM = 32;
layout(constant_id = 4) const uint WN = 32;
layout(constant_id = 5) const uint NT = 128;  // invocations = (BM / WM) * (BN / WN) * subgroup size
layout(local_size_x_id = 5) in;
const uint BK = 32;
const uint TM = 16;
const uint TN = 16;
const uint TK = 16;
const uint SK = BK + 8;  // padded row stride of the f16 tiles
const uint SC = BN + 4;  // padded row stride of the f32 output tile
const uint CM = WM / TM;
const uint CN = WN / TN;

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

shared float16_t sa[BM * SK];  // [m][k]
shared float16_t sb[BN * SK];  // [n][k]
shared float sc[BM * SC];      // [m][n]

float16_t to_half(float v) {
  return float16_t(clamp(v, -65504.0, 65504.0));
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, batch = gl_WorkGroupID.z;
  uint sg = gl_SubgroupID;
  uint warp_r = sg / (BN / WN), warp_c = sg % (BN / WN);
  uint abase = p.a_off + batch * p.a_sb, bbase = p.b_off + batch * p.b_sb;

  coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> sums[CM * CN];
  [[unroll]] for (uint i = 0u; i < CM * CN; i++)
    sums[i] = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);

  for (uint k0 = 0u; k0 < p.K; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += NT) {
      uint mm = e / BK, kk = e % BK;
      uint gm = m0 + mm, gk = k0 + kk;
      sa[mm * SK + kk] = to_half((gm < p.M && gk < p.K) ? a[abase + gm * p.a_sm + gk * p.a_sk] : 0.0);
    }
    for (uint e = tid; e < BN * BK; e += NT) {
      uint nn = e / BK, kk = e % BK;
      uint gn = n0 + nn, gk = k0 + kk;
      float v = 0.0;
      if (gn < p.N && gk < p.K) { uint idx = bbase + gk * p.b_sk + gn * p.b_sn; v = HN_LOAD(bw, BDT, idx); }
      sb[nn * SK + kk] = to_half(v);
    }
    barrier();
    [[unroll]] for (uint kk = 0u; kk < BK; kk += TK) {
      coopmat<float16_t, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> ca[CM];
      [[unroll]] for (uint i = 0u; i < CM; i++)
        coopMatLoad(ca[i], sa, (warp_r * WM + i * TM) * SK + kk, SK, gl_CooperativeMatrixLayoutRowMajor);
      [[unroll]] for (uint j = 0u; j < CN; j++) {
        coopmat<float16_t, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> cb;
        coopMatLoad(cb, sb, (warp_c * WN + j * TN) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
        [[unroll]] for (uint i = 0u; i < CM; i++)
          sums[i * CN + j] = coopMatMulAdd(ca[i], cb, sums[i * CN + j]);
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < CM; i++)
    [[unroll]] for (uint j = 0u; j < CN; j++)
      coopMatStore(sums[i * CN + j], sc, (warp_r * WM + i * TM) * SC + warp_c * WN + j * TN, SC,
                   gl_CooperativeMatrixLayoutRowMajor);
  barrier();
  for (uint e = tid; e < BM * BN; e += NT) {
    uint mm = e / BN, nn = e % BN;
    uint gm = m0 + mm, gn = n0 + nn;
    if (gm >= p.M || gn >= p.N) continue;
    float v = p.alpha * sc[mm * SC + nn];
    if ((p.flags & 2u) != 0u) v += bias[p.bias_off + gn];
    uint ci = p.c_off + batch * p.c_sb + gm * p.c_sm + gn;
    if ((p.flags & 1u) != 0u) v += c[ci];
    c[ci] = v;
  }
}
