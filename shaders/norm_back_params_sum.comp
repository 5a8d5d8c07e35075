#version 450
#extension GL_GOOGLE_include_directive : require
// Second pass of norm_back_params.comp: dw[c] += Σ_y part[y·cols + c] (flag 1),
// db[c] += Σ_y part[(chunks + y)·cols + c] (flag 2); flag 4 rounds the db sum
// to f16 first (a Linear's bias gradient under fp16 autocast, which PyTorch
// computes in f16: Inf past its range). A workgroup takes 64 columns with 4
// lanes each: lane l sums chunks l, l + 4, ... in order, 8 loads at a time,
// and the 4 lane sums are added in lane order (deterministic).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer PART { float part[]; };
layout(std430, binding = 1) buffer DW { float dw[]; };
layout(std430, binding = 2) buffer DB { float db[]; };
layout(push_constant) uniform P { uint cols; uint chunks; uint part_off; uint dw_off; uint db_off; uint flags; } p;
shared float sw_l[256];
shared float sb_l[256];

void main() {
  uint tid = gl_LocalInvocationID.x, lane = tid / 64u, c = hn_group_index() * 64u + tid % 64u;
  bool want_w = (p.flags & 1u) != 0u, want_b = (p.flags & 2u) != 0u;
  float sw = 0.0, sb = 0.0;
  if (c < p.cols) {
    uint y = lane;
    for (; y + 28u < p.chunks; y += 32u) {
      float a[8], b[8];
      [[unroll]] for (uint j = 0u; j < 8u; j++) {
        a[j] = want_w ? part[p.part_off + (y + 4u * j) * p.cols + c] : 0.0;
        b[j] = want_b ? part[p.part_off + (p.chunks + y + 4u * j) * p.cols + c] : 0.0;
      }
      [[unroll]] for (uint j = 0u; j < 8u; j++) { sw += a[j]; sb += b[j]; }
    }
    for (; y < p.chunks; y += 4u) {
      if (want_w) sw += part[p.part_off + y * p.cols + c];
      if (want_b) sb += part[p.part_off + (p.chunks + y) * p.cols + c];
    }
  }
  sw_l[tid] = sw;
  sb_l[tid] = sb;
  barrier();
  if (lane != 0u || c >= p.cols) return;
  for (uint l = 1u; l < 4u; l++) {
    sw += sw_l[l * 64u + tid];
    sb += sb_l[l * 64u + tid];
  }
  if (want_w) dw[p.dw_off + c] += sw;
  if (want_b) db[p.db_off + c] += (p.flags & 4u) != 0u ? hn_round_f16(sb) : sb;
}
