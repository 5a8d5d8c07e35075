#version 450
#extension GL_GOOGLE_include_directive : require
// Column sums for parameter gradients: dw[c] += Σ_r dy[r,c]·(x[r,c] - mean_r)·rstd_r
// (flag 1), db[c] += Σ_r dy[r,c] (flag 2). A plain bias gradient is flag 2 alone;
// flag 4 rounds that sum to f16 first (a Linear's bias gradient under fp16
// autocast, which PyTorch computes in f16: Inf past its range).
// A workgroup owns 8 columns; its 32 lanes per column sum rows lane, lane + 32,
// ... in order and lane 0 adds the 32 partials in order (deterministic).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer ST { float st[]; };
layout(std430, binding = 3) buffer DW { float dw[]; };
layout(std430, binding = 4) buffer DB { float db[]; };
layout(push_constant) uniform P {
  uint rows; uint cols; uint dy_off; uint x_off; uint st_off; uint dw_off; uint db_off; uint flags;
} p;
shared float pw[256];
shared float pb[256];

void main() {
  uint tid = gl_LocalInvocationID.x, lane = tid / 8u;
  uint c = hn_group_index() * 8u + tid % 8u;
  float sw = 0.0, sb = 0.0;
  if (c < p.cols) {
    for (uint r = lane; r < p.rows; r += 32u) {
      float g = dy[p.dy_off + r * p.cols + c];
      if ((p.flags & 1u) != 0u)
        sw += g * (x[p.x_off + r * p.cols + c] - st[p.st_off + 2u * r]) * st[p.st_off + 2u * r + 1u];
      sb += g;
    }
  }
  pw[tid] = sw;
  pb[tid] = sb;
  barrier();
  if (lane != 0u || c >= p.cols) return;
  for (uint l = 1u; l < 32u; l++) {
    sw += pw[l * 8u + tid];
    sb += pb[l * 8u + tid];
  }
  if ((p.flags & 1u) != 0u) dw[p.dw_off + c] += sw;
  if ((p.flags & 2u) != 0u) db[p.db_off + c] += (p.flags & 4u) != 0u ? hn_round_f16(sb) : sb;
}
