#version 450
#extension GL_GOOGLE_include_directive : require
// Tensor-core matmul through VK_KHR_cooperative_matrix: same contract and
// push constants as matmul.comp (C[b] = alpha * A[b] · B[b] (+ bias) (+= C)),
// with both operands rounded to f16 in shared memory (clamped to ±65504; a
// bf16 or f32 B is converted too) and f32 accumulation in 16x16x16 tiles.
// Workgroup: BM x BN outputs as (BM / WM) x (BN / WN) subgroups, each owning
// a WM x WN block of (WM / 16) x (WN / 16) accumulators. BK = 32 per step:
// 4-element fragments (matmul_load.glsl) are prefetched into registers while
// the previous step multiplies, into double-buffered shared memory whose
// layout follows the operand's (k-major or m/n-major), so every store is one
// 8-byte vector and coopMatLoad does the transposing.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
layout(constant_id = 0) const uint BDT = 0;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint WM = 64;
layout(constant_id = 4) const uint WN = 32;
layout(constant_id = 5) const uint NT = 256;  // invocations = (BM / WM) * (BN / WN) * subgroup size
layout(local_size_x_id = 5) in;
layout(constant_id = 6) const uint A_MODE = 0;
layout(constant_id = 7) const uint B_MODE = 0;
layout(constant_id = 8) const uint C_VEC = 0;  // 1: C rows 16-byte aligned: full blocks store directly
// 1: fp16 autocast: operands rounded to f16 (±Inf past its range, not
// clamped) and each result (alpha · A·B + f16(bias)) rounded to f16 before
// it is stored or added to C (hn_round_f16, as matmul.comp's F16)
layout(constant_id = 9) const uint F16 = 0;
const uint BK = 32;
const uint TM = 16;
const uint TN = 16;
const uint TK = 16;
const uint CM = WM / TM;
const uint CN = WN / TN;
const uint NW = (BM / WM) * (BN / WN);  // subgroups

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { uint bw[]; };
layout(std430, binding = 1) readonly buffer B4 { uvec4 b4[]; };
layout(std430, binding = 1) readonly buffer B2 { uvec2 b2[]; };
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

#include "matmul_load.glsl"

// Shared tiles in f16vec4 units. k-major ([m][k], A_MODE 0/1) rows hold
// BK + 8 halves; m-major ([k][m], A_MODE 2) rows BM + 8 (the padding moves
// consecutive rows to other banks). Same for B with n.
const uint SAK = (BK + 8) / 4, SAM = (BM + 8) / 4;
const uint SBK = (BK + 8) / 4, SBN = (BN + 8) / 4;
const uint ASZ = A_MODE == 2 ? BK * SAM : BM * SAK;
const uint BSZ = B_MODE == 2 ? BK * SBN : BN * SBK;
const uint FA = BM * BK / 4, FB = BN * BK / 4;
const uint LA = (FA + NT - 1) / NT, LB = (FB + NT - 1) / NT;
shared f16vec4 sa[2 * ASZ];
shared f16vec4 sb[2 * BSZ];
shared float scratch[NW * TM * TN];  // one 16x16 output tile per subgroup

f16vec4 to_half(vec4 v) {
  if (F16 == 1u)
    return f16vec4(vec4(hn_round_f16(v.x), hn_round_f16(v.y), hn_round_f16(v.z), hn_round_f16(v.w)));
  return f16vec4(clamp(v, vec4(-65504.0), vec4(65504.0)));
}

void store_a(uint f, uint buf, vec4 v) {
  if (f >= FA) return;
  if (A_MODE == 2) {
    uint kk = f / (BM / 4), mm = (f % (BM / 4)) * 4;
    sa[buf * ASZ + kk * SAM + mm / 4] = to_half(v);
  } else {
    uint mm = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    sa[buf * ASZ + mm * SAK + kk / 4] = to_half(v);
  }
}

void store_b(uint f, uint buf, vec4 v) {
  if (f >= FB) return;
  if (B_MODE == 2) {
    uint kk = f / (BN / 4), nn = (f % (BN / 4)) * 4;
    sb[buf * BSZ + kk * SBN + nn / 4] = to_half(v);
  } else {
    uint nn = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    sb[buf * BSZ + nn * SBK + kk / 4] = to_half(v);
  }
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, batch = gl_WorkGroupID.z;
  uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint wr = sg / (BN / WN), wc = sg % (BN / WN);
  uint abase = p.a_off + batch * p.a_sb, bbase = p.b_off + batch * p.b_sb;

  coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> sums[CM * CN];
  [[unroll]] for (uint i = 0u; i < CM * CN; i++)
    sums[i] = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);
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
    [[unroll]] for (uint kk = 0u; kk < BK; kk += TK) {
      coopmat<float16_t, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> ca[CM];
      [[unroll]] for (uint i = 0u; i < CM; i++) {
        uint row = wr * WM + i * TM;
        if (A_MODE == 2)
          coopMatLoad(ca[i], sa, buf * ASZ + kk * SAM + row / 4, SAM, gl_CooperativeMatrixLayoutColumnMajor);
        else
          coopMatLoad(ca[i], sa, buf * ASZ + row * SAK + kk / 4, SAK, gl_CooperativeMatrixLayoutRowMajor);
      }
      [[unroll]] for (uint j = 0u; j < CN; j++) {
        coopmat<float16_t, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> cb;
        uint col = wc * WN + j * TN;
        if (B_MODE == 2)
          coopMatLoad(cb, sb, buf * BSZ + kk * SBN + col / 4, SBN, gl_CooperativeMatrixLayoutRowMajor);
        else
          coopMatLoad(cb, sb, buf * BSZ + col * SBK + kk / 4, SBK, gl_CooperativeMatrixLayoutColumnMajor);
        [[unroll]] for (uint i = 0u; i < CM; i++)
          sums[i * CN + j] = coopMatMulAdd(ca[i], cb, sums[i * CN + j]);
      }
    }
    if (more) {
      [[unroll]] for (uint l = 0u; l < LA; l++) store_a(tid + l * NT, buf ^ 1u, ra[l]);
      [[unroll]] for (uint l = 0u; l < LB; l++) store_b(tid + l * NT, buf ^ 1u, rb[l]);
    }
    barrier();
  }

  uint cbase = p.c_off + batch * p.c_sb;
  uint bm0 = m0 + wr * WM, bn0 = n0 + wc * WN;
  // A whole block inside C with nothing to add goes straight to memory.
  if (C_VEC == 1u && p.flags == 0u && bm0 + WM <= p.M && bn0 + WN <= p.N) {
    [[unroll]] for (uint i = 0u; i < CM; i++)
      [[unroll]] for (uint j = 0u; j < CN; j++) {
        coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> r = sums[i * CN + j] * p.alpha;
        if (F16 == 1u)
          for (int e = 0; e < r.length(); e++) r[e] = hn_round_f16(r[e]);
        coopMatStore(r, c, cbase + (bm0 + i * TM) * p.c_sm + bn0 + j * TN, p.c_sm, gl_CooperativeMatrixLayoutRowMajor);
      }
    return;
  }
  // Otherwise each 16x16 tile goes through this subgroup's scratch.
  [[unroll]] for (uint i = 0u; i < CM; i++)
    [[unroll]] for (uint j = 0u; j < CN; j++) {
      coopMatStore(sums[i * CN + j], scratch, sg * TM * TN, TN, gl_CooperativeMatrixLayoutRowMajor);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < TM * TN; e += gl_SubgroupSize) {
        uint gm = bm0 + i * TM + e / TN, gn = bn0 + j * TN + e % TN;
        if (gm >= p.M || gn >= p.N) continue;
        float v = p.alpha * scratch[sg * TM * TN + e];
        if ((p.flags & 2u) != 0u) v += F16 == 1u ? hn_round_f16(bias[p.bias_off + gn]) : bias[p.bias_off + gn];
        if (F16 == 1u) v = hn_round_f16(v);
        uint ci = cbase + gm * p.c_sm + gn;
        if ((p.flags & 1u) != 0u) v += c[ci];
        c[ci] = v;
      }
      subgroupBarrier();
    }
}
