#version 450
#extension GL_GOOGLE_include_directive : require
// C = alpha * A · B (+ bias[n]) (+= C when accumulating) with B a frozen
// weight W [w_rows, w_cols] in ggml blocks (GT, shaders/gguf_dequant.glsl),
// dequantized element by element as each BK x BN tile is loaded into shared
// memory (prefill and training with a quantized GGUF base; decode takes
// matvec_gguf.comp). B(k, n) = W[n, k] when w_row_is_n (y = x·Wᵀ) and
// W[k, n] otherwise (dx = dy·W). A and C f32 with any strides; math f32.
// Workgroup: BM x BN outputs, each invocation 4 x 4 of them, BK = 16 deep.
#include "common.glsl"
layout(constant_id = 0) const uint GT = 0;
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
  uint row_bytes;
} p;

const uint BK = 16;
const uint NT = (BM / 4) * (BN / 4);

shared float As[BK * BM];  // [k][m]
shared float Bs[BK * BN];  // [k][n]

uint gg_word(uint which, uint i) { return qw[i]; }
#include "gguf_dequant.glsl"

float dequant(uint r, uint col) { return gg_elem(0u, r * p.row_bytes, col); }

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
