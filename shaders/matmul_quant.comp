#version 450
#extension GL_GOOGLE_include_directive : require
// C = alpha * A · B (+ bias[n]) (+= C when accumulating) with B a frozen
// quantized weight W [w_rows, w_cols] (engine/tensor/quant.h has the
// layouts), dequantized as each BK x BN tile is loaded into shared memory:
// no full-precision copy of W exists anywhere. B(k, n) = W[n, k] when
// w_row_is_n (y = x·Wᵀ, the forward) and W[k, n] otherwise (dx = dy·W, the
// backward). A and C f32 with any strides; math f32.
// Workgroup: BM x BN outputs, each invocation 4 x 4 of them, BK = 16 deep.
#include "common.glsl"
layout(constant_id = 0) const uint QDT = 0;  // 0 = NF4, 1 = NF4 with double-quantized absmax, 2 = int8 per row
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(local_size_x_id = 3) in;  // = (BM / 4) * (BN / 4)
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer W { uint qw[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K;
  uint a_off; uint a_sm; uint a_sk;
  uint c_off; uint c_sm; uint bias_off;
  uint flags;  // 1 = accumulate, 2 = has bias
  float alpha;
  uint w_rows; uint w_cols; uint w_row_is_n;
  uint scale_w; uint scale2_w; uint offset_w; uint table_w;  // word offsets of the sections
} p;

const uint BK = 16;
const uint NT = (BM / 4) * (BN / 4);
const float NF4[16] = float[16](
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
  -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
  0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);

shared float As[BK * BM];  // [k][m]
shared float Bs[BK * BN];  // [k][n]

float wf(uint word) { return uintBitsToFloat(qw[word]); }

// W[r, col], dequantized.
float dequant(uint r, uint col) {
  uint idx = r * p.w_cols + col;
  if (QDT == 2u) {
    int q = bitfieldExtract(int(qw[idx >> 2]), int((idx & 3u) * 8u), 8);
    return float(q) * wf(p.scale_w + r);
  }
  uint word = qw[idx >> 3], e = idx & 7u;
  uint code = (word >> ((e >> 1) * 8u + ((e & 1u) == 0u ? 4u : 0u))) & 15u;
  uint b = idx >> 6;
  float absmax;
  if (QDT == 0u) {
    absmax = wf(p.scale_w + b);
  } else {
    uint q = (qw[p.scale_w + (b >> 2)] >> ((b & 3u) * 8u)) & 255u;
    absmax = wf(p.table_w + q) * wf(p.scale2_w + (b >> 8)) + wf(p.offset_w);
  }
  return NF4[code] * absmax;
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  uint tx = tid % (BN / 4), ty = tid / (BN / 4);
  float acc[16];
  [[unroll]] for (uint i = 0u; i < 16u; i++) acc[i] = 0.0;

  for (uint k0 = 0u; k0 < p.K; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += NT) {  // k fastest: rows of A are contiguous along k
      uint mm = e / BK, kk = e % BK, gm = m0 + mm, gk = k0 + kk;
      As[kk * BM + mm] = (gm < p.M && gk < p.K) ? a[p.a_off + gm * p.a_sm + gk * p.a_sk] : 0.0;
    }
    for (uint e = tid; e < BN * BK; e += NT) {  // along W's rows: k fastest for x·Wᵀ, n for dy·W
      uint nn, kk;
      if (p.w_row_is_n != 0u) { nn = e / BK; kk = e % BK; } else { kk = e / BN; nn = e % BN; }
      uint gn = n0 + nn, gk = k0 + kk;
      float v = 0.0;
      if (gn < p.N && gk < p.K) v = p.w_row_is_n != 0u ? dequant(gn, gk) : dequant(gk, gn);
      Bs[kk * BN + nn] = v;
    }
    barrier();
    [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
      vec4 av = vec4(As[kk * BM + ty * 4u], As[kk * BM + ty * 4u + 1u], As[kk * BM + ty * 4u + 2u],
                     As[kk * BM + ty * 4u + 3u]);
      vec4 bv = vec4(Bs[kk * BN + tx * 4u], Bs[kk * BN + tx * 4u + 1u], Bs[kk * BN + tx * 4u + 2u],
                     Bs[kk * BN + tx * 4u + 3u]);
      [[unroll]] for (uint r = 0u; r < 4u; r++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[r * 4u + j] = fma(av[r], bv[j], acc[r * 4u + j]);
    }
    barrier();
  }

  [[unroll]] for (uint r = 0u; r < 4u; r++) {
    uint gm = m0 + ty * 4u + r;
    if (gm >= p.M) continue;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      uint gn = n0 + tx * 4u + j;
      if (gn >= p.N) continue;
      float s = p.alpha * acc[r * 4u + j];
      if ((p.flags & 2u) != 0u) s += bias[p.bias_off + gn];
      uint ci = p.c_off + gm * p.c_sm + gn;
      if ((p.flags & 1u) != 0u) s += c[ci];
      c[ci] = s;
    }
  }
}
