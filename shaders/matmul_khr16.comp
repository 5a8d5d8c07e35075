#version 450
#extension GL_GOOGLE_include_directive : require
// Tensor-core C = A · Bᵀ through VK_KHR_cooperative_matrix from 16-bit
// operands in memory: A f16 [M, K] (rows a_sm halves apart), B f16 [N, K]
// (a linear layer's weight, rows b_sn apart), C f32 [M, N] (rows c_sm
// apart). Only whole tiles (the host checks M % BM, N % BN, K % BK and that
// offsets and strides are multiples of 8 halves), no bias, alpha 1.
// Each workgroup stages BM x BK of A and BN x BK of B through two
// shared-memory buffers (rows padded by 8 halves so that the 16-byte rows of
// one fragment load fall in different banks); the next step's operands are
// read into registers with 16-byte loads while this step multiplies, so one
// barrier per step. Subgroups own WM x WN blocks of 16x16 accumulators.
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(constant_id = 0) const uint BM = 128;
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 2) const uint BK = 32;
layout(constant_id = 3) const uint WM = 64;
layout(constant_id = 4) const uint WN = 64;
layout(constant_id = 5) const uint NT = 128;  // (BM / WM) * (BN / WN) * subgroup size
layout(local_size_x_id = 5) in;
const uint T = 16;
const uint CM = WM / T, CN = WN / T;

layout(std430, binding = 0) readonly buffer A { uvec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { uvec4 b4[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint a_sm;  // halves
  uint b_off; uint b_sn;
  uint c_off; uint c_sm;  // floats
} p;

// f16vec4 units: a row of BK halves plus 8 of padding
const uint SR = (BK + 8u) / 4u;
const uint ASZ = BM * SR, BSZ = BN * SR;
const uint V = BK / 8u;  // 16-byte vectors per tile row
const uint LA = (BM * V + NT - 1u) / NT, LB = (BN * V + NT - 1u) / NT;
shared f16vec4 sa[2u * ASZ];
shared f16vec4 sb[2u * BSZ];

void put(const uint f, const uint rows, const uint base, const uvec4 v, const bool is_a) {
  if (f >= rows * V) return;
  uint r = f / V, col = (f % V) * 2u;
  f16vec4 lo = f16vec4(unpackFloat2x16(v.x), unpackFloat2x16(v.y));
  f16vec4 hi = f16vec4(unpackFloat2x16(v.z), unpackFloat2x16(v.w));
  if (is_a) { sa[base + r * SR + col] = lo; sa[base + r * SR + col + 1u] = hi; }
  else { sb[base + r * SR + col] = lo; sb[base + r * SR + col + 1u] = hi; }
}

uvec4 fetch(const uint f, const uint rows, const uint row0, const uint stride8, const uint base8, const uint k8, const bool is_a) {
  if (f >= rows * V) return uvec4(0u);
  uint r = f / V, col = f % V;
  uint i = base8 + (row0 + r) * stride8 + k8 + col;
  return is_a ? a4[i] : b4[i];
}

void main() {
  uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  uint wr = sg / (BN / WN), wc = sg % (BN / WN);
  uint as8 = p.a_sm / 8u, bs8 = p.b_sn / 8u, ab8 = p.a_off / 8u, bb8 = p.b_off / 8u;

  coopmat<float, gl_ScopeSubgroup, T, T, gl_MatrixUseAccumulator> acc[CM * CN];
  [[unroll]] for (uint i = 0u; i < CM * CN; i++)
    acc[i] = coopmat<float, gl_ScopeSubgroup, T, T, gl_MatrixUseAccumulator>(0.0);

  uvec4 ra[LA], rb[LB];
  [[unroll]] for (uint l = 0u; l < LA; l++) ra[l] = fetch(tid + l * NT, BM, m0, as8, ab8, 0u, true);
  [[unroll]] for (uint l = 0u; l < LB; l++) rb[l] = fetch(tid + l * NT, BN, n0, bs8, bb8, 0u, false);
  [[unroll]] for (uint l = 0u; l < LA; l++) put(tid + l * NT, BM, 0u, ra[l], true);
  [[unroll]] for (uint l = 0u; l < LB; l++) put(tid + l * NT, BN, 0u, rb[l], false);
  barrier();

  uint steps = p.K / BK;
  for (uint t = 0u; t < steps; t++) {
    uint buf = t & 1u;
    bool more = t + 1u < steps;
    if (more) {
      uint k8 = (t + 1u) * V;
      [[unroll]] for (uint l = 0u; l < LA; l++) ra[l] = fetch(tid + l * NT, BM, m0, as8, ab8, k8, true);
      [[unroll]] for (uint l = 0u; l < LB; l++) rb[l] = fetch(tid + l * NT, BN, n0, bs8, bb8, k8, false);
    }
    [[unroll]] for (uint kk = 0u; kk < BK; kk += T) {
      coopmat<float16_t, gl_ScopeSubgroup, T, T, gl_MatrixUseA> fa[CM];
      coopmat<float16_t, gl_ScopeSubgroup, T, T, gl_MatrixUseB> fb[CN];
      [[unroll]] for (uint i = 0u; i < CM; i++)
        coopMatLoad(fa[i], sa, buf * ASZ + (wr * WM + i * T) * SR + kk / 4u, SR, gl_CooperativeMatrixLayoutRowMajor);
      [[unroll]] for (uint j = 0u; j < CN; j++)
        coopMatLoad(fb[j], sb, buf * BSZ + (wc * WN + j * T) * SR + kk / 4u, SR, gl_CooperativeMatrixLayoutColumnMajor);
      [[unroll]] for (uint i = 0u; i < CM; i++)
        [[unroll]] for (uint j = 0u; j < CN; j++)
          acc[i * CN + j] = coopMatMulAdd(fa[i], fb[j], acc[i * CN + j]);
    }
    if (more) {
      [[unroll]] for (uint l = 0u; l < LA; l++) put(tid + l * NT, BM, (buf ^ 1u) * ASZ, ra[l], true);
      [[unroll]] for (uint l = 0u; l < LB; l++) put(tid + l * NT, BN, (buf ^ 1u) * BSZ, rb[l], false);
    }
    barrier();
  }

  [[unroll]] for (uint i = 0u; i < CM; i++)
    [[unroll]] for (uint j = 0u; j < CN; j++) {
      uint r = m0 + wr * WM + i * T, col = n0 + wc * WN + j * T;
      coopMatStore(acc[i * CN + j], c, p.c_off + r * p.c_sm + col, p.c_sm, gl_CooperativeMatrixLayoutRowMajor);
    }
}
