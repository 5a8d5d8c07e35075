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
#include "matmul_coopmat.glsl"
