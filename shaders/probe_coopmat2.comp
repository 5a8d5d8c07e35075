#version 450
// Build-time probe: compiles only with a glslang that knows VK_NV_cooperative_matrix2
// (workgroup-scope matrices and tensor addressing).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 256) in;
void main() {
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> l = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  coopmat<float, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseAccumulator> c = coopmat<float, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseAccumulator>(0.0);
}
