#version 450
#extension GL_GOOGLE_include_directive : require
// adamw.comp's update of an f32 parameter that also refreshes its f16 copy
// (the weight the tensor cores read under fp16 autocast): ph = f16(p) as
// fp16 autocast rounds it (hn_round_f16, as to_f16.comp mode 1). Two
// elements per invocation, one packed word of ph each (ph starts at an even
// element; the pad half of an odd count's last word is 0).
#include "common.glsl"
layout(local_size_x = 256) in;
// DYN = 1: clip, lr_wd, step_size and bc2_sqrt come from sc[p.s_off ..+ 4]
// instead of the push constants (an optimizer step recorded once and
// replayed with each step's values; hn_op_adamw_replayable).
layout(constant_id = 0) const uint DYN = 0;
layout(std430, binding = 5) readonly buffer S { float sc[]; };
layout(std430, binding = 0) buffer PW { float pw[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 2) buffer M { float m[]; };
layout(std430, binding = 3) buffer V { float v[]; };
layout(std430, binding = 4) writeonly buffer PH { uint ph[]; };
layout(push_constant) uniform P {
  uint n; uint p_off; uint g_off; uint m_off; uint v_off;
  float clip; float lr_wd; float one_m_beta1; float beta2; float one_m_beta2; float step_size; float bc2_sqrt; float eps;
  uint h_off;  // in words
  uint s_off;
} p;

float update(uint i) {
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
  float nw = w - step_size * (mi / denom);
  pw[p.p_off + i] = nw;
  return hn_round_f16(nw);
}

void main() {
  uint wi = hn_group_index() * 256u + gl_LocalInvocationID.x;
  uint i = 2u * wi;
  if (i >= p.n) return;
  float a = update(i);
  float b = i + 1u < p.n ? update(i + 1u) : 0.0;
  ph[p.h_off + wi] = packHalf2x16(vec2(a, b));
}
