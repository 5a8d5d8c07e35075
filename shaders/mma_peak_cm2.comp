#version 450
// The tensor cores' ceiling through VK_NV_cooperative_matrix2's
// workgroup-scope matrices (benchmark --workload mma-peak, its workgroup_scope
// rows): the whole
// workgroup multiply-adds a BM x BK by BK x BN f16 pair into one BM x BN f32
// accumulator ITERS times. SHARED = 0: operands built from constants, no
// memory traffic; 1: loaded from shared memory every step (a GEMM's inner
// loop without its global loads). Whether the driver can reach more than
// subgroup-scope matrices do (mma_peak.comp) decides what matmul_cm2 can.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITERS = 256;
layout(constant_id = 2) const uint BM = 128;
layout(constant_id = 3) const uint BN = 128;
layout(constant_id = 4) const uint BK = 32;
layout(constant_id = 5) const uint SHARED = 0;
layout(std430, binding = 0) buffer O { float o[]; };
layout(push_constant) uniform P { float x; } p;

shared float16_t sa[BM * BK];
shared float16_t sb[BK * BN];

void main() {
  coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a =
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(float16_t(p.x));
  coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b =
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>(float16_t(p.x * 0.5));
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  if (SHARED != 0u) {
    for (uint i = gl_LocalInvocationID.x; i < BM * BK; i += gl_WorkGroupSize.x)
      sa[i] = float16_t(p.x * float(i & 7u));
    for (uint i = gl_LocalInvocationID.x; i < BK * BN; i += gl_WorkGroupSize.x)
      sb[i] = float16_t(p.x * float(i & 3u));
    barrier();
  }
  for (uint i = 0u; i < ITERS; i++) {
    if (SHARED != 0u) {
      // the same tile each step, reloaded (its values do not matter)
      coopMatLoad(a, sa, 0, BK, gl_CooperativeMatrixLayoutRowMajor);
      coopMatLoad(b, sb, 0, BN, gl_CooperativeMatrixLayoutRowMajor);
    }
    acc = coopMatMulAdd(a, b, acc);
  }
  // Never true (x > 0), but the compiler cannot know: the product stays live.
  if (p.x < 0.0)
    coopMatStore(acc, o, gl_WorkGroupID.x * BM * BN, BN, gl_CooperativeMatrixLayoutRowMajor);
}
