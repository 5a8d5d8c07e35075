#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_coopmat.comp with its 128x128 tile (2x4 subgroups of 64x32) as
// literals instead of specialisation constants: the same kernel, kept to
// measure what the driver makes of either form (HN_COOPMAT_FIXED=1).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define HN_COOPMAT_FIXED 1
#include "matmul_coopmat.glsl"
