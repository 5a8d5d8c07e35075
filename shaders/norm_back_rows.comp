#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// RMSNorm / LayerNorm backward in one pass over the rows (norm_back.comp and
// the first pass of its parameter sums, norm_back_params.comp, fused): one
// row per subgroup at a time, lane l holding columns l, l + S, ... (S the
// subgroup size) in registers, so x and dy are read once and the row sums
// are subgroup reductions (norm_back.comp: four workgroup reductions per
// row, behind barriers). Workgroup y takes rows [y·R, (y + 1)·R); each lane
// adds its columns' dy·x̂ and dy over the rows its subgroup took, the
// subgroups' sums are added in subgroup order in shared memory, and the
// chunk's partial sums go to part[y·cols + c] (dw) and
// part[(chunks + y)·cols + c] (db) for norm_back_params_sum.comp, as
// norm_back_params.comp leaves them. Also stores (mean, rstd) per row.
// flags: 1 = weight plus one, 8 = has weight, 16 = layernorm (subtract the
// mean), 32 = accumulate into dx, 64 = dw partials, 128 = db partials.
#include "common.glsl"
layout(local_size_x = 256) in;
// columns per lane: at least ceil(cols / the smallest subgroup size)
layout(constant_id = 0) const uint PER = 24;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) buffer DX { float dx[]; };
layout(std430, binding = 4) writeonly buffer ST { float st[]; };
layout(std430, binding = 5) writeonly buffer PART { float part[]; };
layout(push_constant) uniform P {
  uint rows; uint cols; uint dy_off; uint x_off; uint w_off; uint dx_off; uint st_off; float eps; uint flags;
  uint R; uint part_off; uint chunks;
} p;
shared float s_w[1024];
shared float s_b[1024];

float wv(uint c) {
  if ((p.flags & 8u) == 0u) return 1.0;
  float g = w[p.w_off + c];
  return (p.flags & 1u) != 0u ? 1.0 + g : g;
}

void main() {
  uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  uint y = hn_group_index(), chunks = p.chunks;
  if (y >= chunks) return;  // the grid's padding (whole workgroups)
  uint r0 = y * p.R, r1 = min(p.rows, r0 + p.R);
  bool layer = (p.flags & 16u) != 0u, acc = (p.flags & 32u) != 0u;
  bool want_w = (p.flags & 64u) != 0u, want_b = (p.flags & 128u) != 0u;
  float n = float(p.cols);
  float pw[PER], pb[PER], xv[PER], gv[PER];
  [[unroll]] for (uint k = 0u; k < PER; k++) { pw[k] = 0.0; pb[k] = 0.0; }

  for (uint row = r0 + sg; row < r1; row += nsg) {
    uint xb = p.x_off + row * p.cols, db = p.dy_off + row * p.cols;
    float s = 0.0;
    [[unroll]] for (uint k = 0u; k < PER; k++) {
      uint c = lane + k * S;
      xv[k] = c < p.cols ? x[xb + c] : 0.0;
      gv[k] = c < p.cols ? dy[db + c] : 0.0;
      s += xv[k];
    }
    float mean = layer ? subgroupAdd(s) / n : 0.0;
    float ss = 0.0;
    [[unroll]] for (uint k = 0u; k < PER; k++) {
      float v = lane + k * S < p.cols ? xv[k] - mean : 0.0;
      ss += v * v;
    }
    float inv = 1.0 / sqrt(subgroupAdd(ss) / n + p.eps);
    vec2 sums = vec2(0.0);
    [[unroll]] for (uint k = 0u; k < PER; k++) {
      uint c = lane + k * S;
      if (c < p.cols) {
        float xh = (xv[k] - mean) * inv;
        float g = gv[k] * wv(c);
        sums += vec2(g, g * xh);
        pw[k] += gv[k] * xh;
        pb[k] += gv[k];
      }
    }
    sums = subgroupAdd(sums);
    float mg = layer ? sums.x / n : 0.0, mgx = sums.y / n;
    [[unroll]] for (uint k = 0u; k < PER; k++) {
      uint c = lane + k * S;
      if (c < p.cols) {
        float xh = (xv[k] - mean) * inv;
        float r = inv * (gv[k] * wv(c) - mg - xh * mgx);
        uint o = p.dx_off + row * p.cols + c;
        if (acc) r += dx[o];
        dx[o] = r;
      }
    }
    if (lane == 0u) { st[p.st_off + 2u * row] = mean; st[p.st_off + 2u * row + 1u] = inv; }
  }

  if (!want_w && !want_b) return;
  // the subgroups' column sums added in subgroup order (deterministic)
  for (uint i = 0u; i < nsg; i++) {
    if (sg == i) {
      [[unroll]] for (uint k = 0u; k < PER; k++) {
        uint c = lane + k * S;
        if (c < p.cols) {
          s_w[c] = i == 0u ? pw[k] : s_w[c] + pw[k];
          s_b[c] = i == 0u ? pb[k] : s_b[c] + pb[k];
        }
      }
    }
    barrier();
  }
  for (uint c = gl_LocalInvocationID.x; c < p.cols; c += 256u) {
    if (want_w) part[p.part_off + y * p.cols + c] = s_w[c];
    if (want_b) part[p.part_off + (chunks + y) * p.cols + c] = s_b[c];
  }
}
