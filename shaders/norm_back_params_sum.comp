#version 450
#extension GL_GOOGLE_include_directive : require
// Second pass of norm_back_params.comp: dw[c] += Σ_y part[y·cols + c] (flag 1),
// db[c] += Σ_y part[(chunks + y)·cols + c] (flag 2), chunks in order; flag 4
// rounds the db sum to f16 first (a Linear's bias gradient under fp16
// autocast, which PyTorch computes in f16: Inf past its range).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer PART { float part[]; };
layout(std430, binding = 1) buffer DW { float dw[]; };
layout(std430, binding = 2) buffer DB { float db[]; };
layout(push_constant) uniform P { uint cols; uint chunks; uint part_off; uint dw_off; uint db_off; uint flags; } p;

void main() {
  uint c = hn_group_index() * 256u + gl_LocalInvocationID.x;
  if (c >= p.cols) return;
  float sw = 0.0, sb = 0.0;
  for (uint y = 0u; y < p.chunks; y++) {
    if ((p.flags & 1u) != 0u) sw += part[p.part_off + y * p.cols + c];
    if ((p.flags & 2u) != 0u) sb += part[p.part_off + (p.chunks + y) * p.cols + c];
  }
  if ((p.flags & 1u) != 0u) dw[p.dw_off + c] += sw;
  if ((p.flags & 2u) != 0u) db[p.db_off + c] += (p.flags & 4u) != 0u ? hn_round_f16(sb) : sb;
}
