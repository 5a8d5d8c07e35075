#version 450
// The tensor cores' ceiling through VK_KHR_cooperative_matrix: every
// subgroup multiplies register-resident 16x16 f16 tiles into CHAINS
// independent f32 accumulators ITERS times, with no memory traffic in the
// loop (benchmark --workload mma-peak). What a GEMM kernel can reach at best.
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITERS = 1024;
const uint CHAINS = 8;
layout(std430, binding = 0) buffer O { float o[]; };
layout(push_constant) uniform P { float x; } p;

void main() {
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a =
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>(float16_t(p.x));
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b =
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>(float16_t(p.x * 0.5));
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[CHAINS];
  [[unroll]] for (uint j = 0u; j < CHAINS; j++)
    acc[j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(float(j));
  for (uint i = 0u; i < ITERS; i++)
    [[unroll]] for (uint j = 0u; j < CHAINS; j++)
      acc[j] = coopMatMulAdd(a, b, acc[j]);
  for (uint j = 1u; j < CHAINS; j++)
    acc[0] = acc[0] + acc[j];
  uint wg = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  coopMatStore(acc[0], o, wg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
}
