#version 450
#extension GL_GOOGLE_include_directive : require
// Column sums for parameter gradients, first of two passes:
// dw[c] += Σ_r dy[r,c]·(x[r,c] - mean_r)·rstd_r (flag 1), db[c] += Σ_r dy[r,c]
// (flag 2). Workgroup (x, y) takes 256 columns of rows [y·R, (y + 1)·R), one
// invocation per column walking its rows in order (whole rows read at a
// time, 8 rows' loads issued together), and writes its partial sums to
// part[y·cols + c] (dw) and part[(chunks + y)·cols + c] (db);
// norm_back_params_sum.comp adds the chunks in order (deterministic).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer ST { float st[]; };
layout(std430, binding = 3) writeonly buffer PART { float part[]; };
layout(push_constant) uniform P {
  uint rows; uint cols; uint dy_off; uint x_off; uint st_off; uint part_off; uint R; uint flags;
} p;

void main() {
  uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x, y = gl_WorkGroupID.y;
  if (c >= p.cols) return;
  uint chunks = gl_NumWorkGroups.y, r = y * p.R, r1 = min(p.rows, (y + 1u) * p.R);
  bool want_w = (p.flags & 1u) != 0u;
  float sw = 0.0, sb = 0.0;
  for (; r + 8u <= r1; r += 8u) {
    float g[8], t[8];
    [[unroll]] for (uint j = 0u; j < 8u; j++) g[j] = dy[p.dy_off + (r + j) * p.cols + c];
    if (want_w) {
      [[unroll]] for (uint j = 0u; j < 8u; j++)
        t[j] = (x[p.x_off + (r + j) * p.cols + c] - st[p.st_off + 2u * (r + j)]) * st[p.st_off + 2u * (r + j) + 1u];
      [[unroll]] for (uint j = 0u; j < 8u; j++) sw += g[j] * t[j];
    }
    [[unroll]] for (uint j = 0u; j < 8u; j++) sb += g[j];
  }
  for (; r < r1; r++) {
    float g = dy[p.dy_off + r * p.cols + c];
    if (want_w)
      sw += g * ((x[p.x_off + r * p.cols + c] - st[p.st_off + 2u * r]) * st[p.st_off + 2u * r + 1u]);
    sb += g;
  }
  if (want_w) part[p.part_off + y * p.cols + c] = sw;
  if ((p.flags & 2u) != 0u) part[p.part_off + (chunks + y) * p.cols + c] = sb;
}
