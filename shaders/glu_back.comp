#version 450
#extension GL_GOOGLE_include_directive : require
// out = act(gate) · up: dgate = dy · up · act'(gate), dup = dy · act(gate).
// Rows of gate/up (and their gradients) have their own stride so a fused
// [rows, 2F] gate_up tensor and its gradient work.
#include "common.glsl"
#include "activation.glsl"
#include "activation_back.glsl"
// VEC: four adjacent elements per invocation in 16-byte loads and stores
// (F, the row strides and every offset multiples of 4; n counts groups of 4).
layout(constant_id = 0) const uint VEC = 0;
// OUT16 (VEC only): dgate and dup are f16, each value clamped to ±65504 and
// packed as to_f16.comp does (the operands of the frozen projections' dx matmuls).
layout(constant_id = 1) const uint OUT16 = 0;
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 0) readonly buffer DY4 { vec4 dy4[]; };
layout(std430, binding = 1) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 2) readonly buffer U { float u[]; };
layout(std430, binding = 2) readonly buffer U4 { vec4 u4[]; };
layout(std430, binding = 3) buffer DG { float dg[]; };
layout(std430, binding = 3) buffer DG4 { vec4 dg4[]; };
layout(std430, binding = 4) buffer DU { float du[]; };
layout(std430, binding = 4) buffer DU4 { vec4 du4[]; };
layout(std430, binding = 3) buffer DG2 { uvec2 dg2[]; };
layout(std430, binding = 4) buffer DU2 { uvec2 du2[]; };
layout(push_constant) uniform P {
  uint n; uint F; uint dy_off; uint g_off; uint u_off; uint dg_off; uint du_off; uint g_stride; uint act;
} p;
void main() {
  uint i = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  if (VEC == 1u) {
    uint F4 = p.F / 4u, r = i / F4, f = (i % F4) * 4u;
    uint gi = r * p.g_stride + f;
    vec4 gv = g4[(p.g_off + gi) / 4u], uv = u4[(p.u_off + gi) / 4u], d = dy4[(p.dy_off + 4u * i) / 4u], a, ag;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      a[j] = hn_act(p.act, gv[j]);
      ag[j] = hn_act_grad(p.act, gv[j]);
    }
    vec4 vg = d * uv * ag, vu = d * a;
    if (OUT16 == 1u) {
      vg = clamp(vg, -65504.0, 65504.0);
      vu = clamp(vu, -65504.0, 65504.0);
      dg2[(p.dg_off + gi) / 4u] = uvec2(packHalf2x16(vg.xy), packHalf2x16(vg.zw));
      du2[(p.du_off + gi) / 4u] = uvec2(packHalf2x16(vu.xy), packHalf2x16(vu.zw));
    } else {
      dg4[(p.dg_off + gi) / 4u] = vg;
      du4[(p.du_off + gi) / 4u] = vu;
    }
    return;
  }
  uint r = i / p.F, f = i % p.F;
  uint gi = r * p.g_stride + f;
  float gv = g[p.g_off + gi], uv = u[p.u_off + gi], d = dy[p.dy_off + i];
  dg[p.dg_off + gi] = d * uv * hn_act_grad(p.act, gv);
  du[p.du_off + gi] = d * hn_act(p.act, gv);
}
