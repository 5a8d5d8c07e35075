#version 450
#extension GL_GOOGLE_include_directive : require
// One torch.optim.AdamW update of a parameter range (see engine/tensor/optim.h):
//   g *= clip;  p *= 1 - lr·wd;  m = m + (1-β1)(g - m);  v = β2·v + (1-β2)·g²
//   p -= step_size · m / (sqrt(v) / sqrt(1-β2^t) + eps)
// The parameter may be f32 (updated in place), or the update goes to an f32
// master copy (binding 0) when the model stores f16/bf16 (the trainer then
// copies master -> storage).
#include "common.glsl"
layout(local_size_x = 256) in;
// DYN = 1: clip, lr_wd, step_size and bc2_sqrt come from sc[p.s_off ..+ 4]
// instead of the push constants (an optimizer step recorded once and
// replayed with each step's values; hn_op_adamw_replayable).
layout(constant_id = 0) const uint DYN = 0;
layout(std430, binding = 4) readonly buffer S { float sc[]; };
layout(std430, binding = 0) buffer PW { float pw[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) buffer M { float m[]; };
layout(std430, binding = 3) buffer V { float v[]; };
layout(push_constant) uniform P {
  uint n; uint p_off; uint g_off; uint m_off; uint v_off;
  float clip; float lr_wd; float one_m_beta1; float beta2; float one_m_beta2; float step_size; float bc2_sqrt; float eps;
  uint h_off;  // adamw_f16.comp's f16 copy (the same push constants; unused here)
  uint s_off;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  float clip = DYN != 0u ? sc[p.s_off] : p.clip, lr_wd = DYN != 0u ? sc[p.s_off + 1u] : p.lr_wd;
  float step_size = DYN != 0u ? sc[p.s_off + 2u] : p.step_size, bc2_sqrt = DYN != 0u ? sc[p.s_off + 3u] : p.bc2_sqrt;
  float gi = g[p.g_off + i] * clip;
  float w = pw[p.p_off + i] * lr_wd;
  float mi = m[p.m_off + i];
  mi = mi + p.one_m_beta1 * (gi - mi);
  float vi = v[p.v_off + i] * p.beta2 + p.one_m_beta2 * gi * gi;
  m[p.m_off + i] = mi;
  v[p.v_off + i] = vi;
  float denom = sqrt(vi) / bc2_sqrt + p.eps;
  pw[p.p_off + i] = w - step_size * (mi / denom);
}
