#version 450
#extension GL_GOOGLE_include_directive : require
// Decode (one row of x) y[n] = x · W[n, :] (+ bias) with W [N, K] in Q4_K or
// Q6_K blocks, through integer dot products: the workgroup first quantizes x
// (RMS-normalised's gain applied when NORM) into shared memory as 8-bit codes,
// 32 to a scale that is a power of two (so the codes are exact functions of x
// and a CPU reference reproduces them bit for bit); then each lane dots whole
// 4-byte groups of W's codes with 4-byte groups of x's codes (dotPacked4x8EXT
// with HN_IDOT, the same sum by hand otherwise) and applies both scales to the
// integer sums. Against matvec_gguf.comp this replaces four int-to-float
// conversions and four fused multiply-adds per four weights with one
// instruction, and x's 4 bytes an element read by every row with one byte read
// from shared memory. The result is x̂ · W with x̂ the quantized x (llama.cpp's
// decode does the same with its q8_1 blocks); tests/engine/test-quant.c holds
// the CPU reference (q8_quantize).
// Options as matvec_gguf.comp's (engine/tensor/ops-gguf.c): GATED = 1 (U,
// act(x·W + b) * (x·U + bu)), NORM = 1 (x times the norm's gain is quantized;
// the row's 1 / rms scales the sums), flags 1 bias, 2 accumulate, 4 bias of U.
// Lanes (Q4_K): a block's 8 lanes take 16-byte runs of its 128 code bytes,
// lane t bytes 16t .. 16t + 15: sub-block 2i (i = t / 2) in the low nibbles,
// 2i + 1 in the high ones, 16 elements each. Q6_K: lane t takes half t / 4,
// columns 8 (t & 3) .. + 8 of it: four runs of 8 elements, one scale each.
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifdef HN_IDOT
#extension GL_EXT_integer_dot_product : require
#endif
#include "common.glsl"
#include "activation.glsl"
layout(constant_id = 0) const uint GT = 5;  // GG_Q4_K 5, GG_Q6_K 7
layout(constant_id = 1) const uint WG = 128;
layout(constant_id = 2) const uint NSG = 4;  // row groups a workgroup
layout(constant_id = 3) const uint KMAX = 256;  // K (shared memory size)
layout(constant_id = 4) const uint GATED = 0;
layout(constant_id = 5) const uint NORM = 0;
layout(constant_id = 6) const uint NR = 1;
layout(constant_id = 7) const uint XVEC = 0;  // x starts on a 4-element boundary (vec4 loads)  // rows a subgroup (2 NR <= 4 when GATED)
layout(local_size_x_id = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer W { uint qw[]; };
layout(std430, binding = 1) readonly buffer W4 { uvec4 qw4[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer U { uint qu[]; };
layout(std430, binding = 4) readonly buffer U4 { uvec4 qu4[]; };
layout(std430, binding = 5) readonly buffer BiasU { float bias_u[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(push_constant) uniform P {
  uint M; uint N; uint K; uint x_off; uint row_bytes; uint bias_off; uint y_off; uint flags;
  uint bu_off; uint act; float alpha;
  uint g_off; float eps; uint nflags;
} p;
shared uint xq[KMAX / 4];  // x's codes, 4 to a word (two's complement bytes)
shared float xd[KMAX / 32];  // their scales
shared float xs4[KMAX / 4];  // scale × the sum of 4 codes (the Q4_K mins' term)
shared float amax4[KMAX / 4];  // largest |x| of each 4 (quantize_x)
shared float nred[64];
shared float rstd_s;

#define GG_Q4_K 5u
#define GG_Q6_K 7u
const uint BLK_BYTES = GT == GG_Q4_K ? 144u : 210u;

int dp4(uint a, uint b) {
#ifdef HN_IDOT
  return dotPacked4x8EXT(int(a), int(b));
#else
  ivec4 va = ivec4(int(a) << 24, int(a) << 16, int(a) << 8, int(a)) >> 24;
  ivec4 vb = ivec4(int(b) << 24, int(b) << 16, int(b) << 8, int(b)) >> 24;
  return va.x * vb.x + va.y * vb.y + va.z * vb.z + va.w * vb.w;
#endif
}

uint wd(uint which, uint i) { return which == 0u ? qw[i] : qu[i]; }
uvec4 wd4(uint which, uint i) { return which == 0u ? qw4[i] : qu4[i]; }
float half_at(uint which, uint b) {
  uint v = wd(which, b >> 2);
  return unpackHalf2x16((b & 2u) != 0u ? v >> 16 : v).x;
}
// 8 bytes at even byte offset b (Q6_K blocks are 2-byte aligned)
uvec2 ld8(uint which, uint b) {
  uint i = b >> 2, w0 = wd(which, i), w1 = wd(which, i + 1u);
  if ((b & 2u) == 0u) return uvec2(w0, w1);
  uint w2 = wd(which, i + 2u);
  return uvec2((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16));
}

// x's 4-element group i (the norm's gain applied when NORM)
vec4 xin4(uint i) {
  uint k = 4u * i;
  vec4 v = XVEC != 0u ? x4[(p.x_off >> 2) + i] : vec4(x[p.x_off + k], x[p.x_off + k + 1u], x[p.x_off + k + 2u], x[p.x_off + k + 3u]);
  if (NORM != 0u && (p.nflags & 2u) != 0u) {
    vec4 gv = vec4(g[p.g_off + k], g[p.g_off + k + 1u], g[p.g_off + k + 2u], g[p.g_off + k + 3u]);
    v *= (p.nflags & 1u) != 0u ? gv + 1.0 : gv;
  }
  return v;
}

// x into codes, 32-element block b with the scale 2^e, the smallest power of
// two with |x| / 2^e <= 127.5 for the block's largest |x| (codes rounded to
// even, clamped to ±127); the scaling is exact, so the codes are exact. Each
// invocation takes 4-element groups (coalesced loads): their largest |x| to
// shared memory, then, once every group's is there, its codes and sum.
const uint GPT = (KMAX / 4u + WG - 1u) / WG;  // groups an invocation
void quantize_x(uint tid) {
  vec4 v[GPT];
  [[unroll]] for (uint it = 0u; it < GPT; it++) {
    uint i = tid + it * WG;
    v[it] = i < KMAX / 4u ? xin4(i) : vec4(0.0);
    vec4 a = abs(v[it]);
    if (i < KMAX / 4u) amax4[i] = max(max(a.x, a.y), max(a.z, a.w));
  }
  barrier();
  [[unroll]] for (uint it = 0u; it < GPT; it++) {
    uint i = tid + it * WG;
    if (i >= KMAX / 4u) break;
    uint b = i >> 3;
    float amax = 0.0;
    [[unroll]] for (uint e = 0u; e < 8u; e++) amax = max(amax, amax4[8u * b + e]);
    int ex;
    frexp(amax, ex);  // amax = m 2^ex, m in [0.5, 1)
    int es = ex - 7;  // amax / 2^es = 128 m in [64, 128)
    if (ldexp(amax, -es) > 127.5) es += 1;
    ivec4 c = clamp(ivec4(roundEven(v[it] * ldexp(1.0, -es))), ivec4(-127), ivec4(127));
    float d = ldexp(1.0, es);
    xq[i] = (uint(c.x) & 255u) | ((uint(c.y) & 255u) << 8) | ((uint(c.z) & 255u) << 16) | (uint(c.w) << 24);
    xs4[i] = d * float(c.x + c.y + c.z + c.w);
    if ((i & 7u) == 0u) xd[b] = d;
  }
}

const uint NW = NR * (GATED != 0u ? 2u : 1u);

// chunk c of the row (block c / 8, lane-part c % 8) for the NW rows
void chunk_dot(uint wh[4], uint rb[4], uint c, inout float acc[4]) {
  uint blk = c >> 3, t = c & 7u, k0 = blk * 256u;
  if (GT == GG_Q4_K) {
    uint i = t >> 1, hh = t & 1u, sh = 16u * (i & 1u);
    uint e_lo = k0 + 64u * i + 16u * hh, e_hi = e_lo + 32u;  // first elements of the two runs
    uint xl[4], xh[4];
    [[unroll]] for (uint w = 0u; w < 4u; w++) {
      xl[w] = xq[(e_lo >> 2) + w];
      xh[w] = xq[(e_hi >> 2) + w];
    }
    float dl = xd[e_lo >> 5], dh = xd[e_hi >> 5];
    float sl = xs4[e_lo >> 2] + xs4[(e_lo >> 2) + 1u] + xs4[(e_lo >> 2) + 2u] + xs4[(e_lo >> 2) + 3u];
    float shs = xs4[e_hi >> 2] + xs4[(e_hi >> 2) + 1u] + xs4[(e_hi >> 2) + 2u] + xs4[(e_hi >> 2) + 3u];
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b4 = (rb[j] + blk * BLK_BYTES) >> 4;
      uvec4 h = wd4(wh[j], b4);
      uvec4 q = wd4(wh[j], b4 + 1u + t);
      vec2 dm = unpackHalf2x16(h.x);
      uint scw = i < 2u ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
      uint mnw = i < 2u ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
      int il = 0, ih = 0;
      [[unroll]] for (uint w = 0u; w < 4u; w++) {
        il += dp4(q[w] & 0x0f0f0f0fu, xl[w]);
        ih += dp4((q[w] >> 4) & 0x0f0f0f0fu, xh[w]);
      }
      // w = d sc q - dmin mn: Σ x̂ w = d sc dx Σ qx q - dmin mn dx Σ qx
      acc[j] += dm.x * (float((scw >> sh) & 255u) * dl * float(il) + float((scw >> (sh + 8u)) & 255u) * dh * float(ih)) -
                dm.y * (float((mnw >> sh) & 255u) * sl + float((mnw >> (sh + 8u)) & 255u) * shs);
    }
  } else {
    uint hf = t >> 2, col = 8u * (t & 3u), is = 8u * ((t & 3u) >> 1);
    uint xv[4][2];
    int xsum[4];
    float dx[4];
    [[unroll]] for (uint r = 0u; r < 4u; r++) {
      uint e = k0 + 128u * hf + 32u * r + col;
      xv[r][0] = xq[e >> 2];
      xv[r][1] = xq[(e >> 2) + 1u];
      xsum[r] = dp4(xv[r][0], 0x01010101u) + dp4(xv[r][1], 0x01010101u);
      dx[r] = xd[e >> 5];
    }
    [[unroll]] for (uint j = 0u; j < NW; j++) {
      uint b = rb[j] + blk * BLK_BYTES;
      float d = half_at(wh[j], b + 208u);
      uvec2 A = ld8(wh[j], b + 64u * hf + col), B = ld8(wh[j], b + 64u * hf + 32u + col);
      uvec2 H = ld8(wh[j], b + 128u + 32u * hf + col), S = ld8(wh[j], b + 192u + 8u * hf);
      float sum = 0.0;
      [[unroll]] for (uint r = 0u; r < 4u; r++) {
        int s = 0;
        [[unroll]] for (uint e = 0u; e < 2u; e++) {
          // codes stored + 32, 6 bits each (so also valid signed bytes)
          uint cw = r == 0u ? (A[e] & 0x0f0f0f0fu) | ((H[e] << 4) & 0x30303030u)
                  : r == 1u ? (B[e] & 0x0f0f0f0fu) | ((H[e] << 2) & 0x30303030u)
                  : r == 2u ? ((A[e] >> 4) & 0x0f0f0f0fu) | (H[e] & 0x30303030u)
                            : ((B[e] >> 4) & 0x0f0f0f0fu) | ((H[e] >> 2) & 0x30303030u);
          s += dp4(cw, xv[r][e]);
        }
        float sc = float(bitfieldExtract(int(r < 2u ? S.x : S.y), int(is + 16u * (r & 1u)), 8));
        sum += sc * dx[r] * float(s - 32 * xsum[r]);
      }
      acc[j] += d * sum;
    }
  }
}

void main() {
  uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, tid = gl_LocalInvocationID.x;
  if (NORM != 0u) {
    float ss = 0.0;
    for (uint k = tid; k < p.K; k += WG) { float v = x[p.x_off + k]; ss += v * v; }
    ss = subgroupAdd(ss);
    if (subgroupElect()) nred[gl_SubgroupID] = ss;
    barrier();
    if (tid == 0u) {
      float t = 0.0;
      for (uint sg = 0u; sg < gl_NumSubgroups; sg++) t += nred[sg];
      rstd_s = 1.0 / sqrt(t / float(p.K) + p.eps);
    }
  }
  quantize_x(tid);
  barrier();
  uint chunks = (p.K / 256u) * 8u;
  for (uint grp = gl_SubgroupID; grp < NSG; grp += gl_NumSubgroups) {
    uint n0 = (hn_group_index() * NSG + grp) * NR;
    if (n0 >= p.N) break;  // uniform in the subgroup
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    uint wh[4], rb[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      wh[j] = j < NR ? 0u : 1u;
      rb[j] = min(n0 + j % NR, p.N - 1u) * p.row_bytes;  // a clamped row is computed and dropped
    }
    for (uint c = lane; c < chunks; c += sgs) chunk_dot(wh, rb, c, acc);
    [[unroll]] for (uint r = 0u; r < NR; r++) {
      uint n = n0 + r;
      float sa = subgroupAdd(acc[r]);
      float sb = GATED != 0u ? subgroupAdd(acc[NR + r]) : 0.0;
      if (NORM != 0u) { sa *= rstd_s; sb *= rstd_s; }
      if (lane == 0u && n < p.N) {
        float res;
        if (GATED != 0u) {
          float gv = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
          float v = sb + ((p.flags & 4u) != 0u ? bias_u[p.bu_off + n] : 0.0);
          res = hn_act(p.act, gv) * v;
        } else {
          res = sa + ((p.flags & 1u) != 0u ? bias[p.bias_off + n] : 0.0);
        }
        uint yi = p.y_off + n;
        y[yi] = (p.flags & 2u) != 0u ? y[yi] + p.alpha * res : res;
      }
    }
  }
}
