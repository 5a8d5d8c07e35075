#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention backward, pass 2 (see attention_back_cm2.glsl): one
// workgroup per block of BC keys of one KV head, walking the query blocks
// of the group's heads that can see them. Transposed products keep keys
// as rows: Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ·scale - lse); with the f16 copy of r·dO
// (a power of two r per query, from pass 0) and f = c / r per query (c the
// power of two of the largest max |dO| among the block's queries, so f <= 1):
// dV' += (Pᵀ ∘ f)·(r·dO), dPᵀ' = V·(r·dO)ᵀ, dSᵀ' = Pᵀ ∘ (dPᵀ' - r·Δ) ∘ f,
// dK' += dSᵀ'·Q; then dV = dV' / c, dK = dK'·scale / c. (A query of a
// walked block outside c's range sees none of the keys: P = 0 there, and f
// is capped at 1 so nothing overflows.)
#include "attention_back_cm2.glsl"
layout(std430, binding = 3) buffer DK { float dk[]; };
layout(std430, binding = 4) buffer DV { float dv[]; };

shared float lse_s[BR];   // lse·log2(e) per query
shared float rdel_s[BR];  // r·Δ per query
shared float f_s[BR];     // min(c / r, 1) per query (0 for a row of zeros)
shared float red_s[NT];

uint g_j0, g_t0;
float g_sl2;

float fa_pt(const in uint r, const in uint c, const in float s) {
  uint j = g_j0 + r, t = g_t0 + c;
  if (t >= p.T || j >= p.S || hn_fa_hidden(j, p.pos0 + int(t))) return 0.0;
  return exp2(s * g_sl2 - lse_s[c]);
}
float fa_pt_full(const in uint r, const in uint c, const in float s) { return exp2(s * g_sl2 - lse_s[c]); }
float fa_col_f(const in uint r, const in uint c, const in float x) { return x * f_s[c]; }
float fa_ds_col(const in uint r, const in uint c, const in float x) { return (x - rdel_s[c]) * f_s[c]; }

void main() {
  uint j0 = gl_WorkGroupID.x * BC, kvh = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  g_j0 = j0;
  g_sl2 = p.scale * LOG2E;
  uint tid = gl_LocalInvocationID.x;
  uint grp = p.H / p.KVH;

  // Queries that can see a key of [j0, j0 + BC): [t_begin, t_end).
  uint t_begin = p.causal != 0u ? uint(clamp(int(j0) - p.pos0, 0, int(p.T))) : 0u;
  uint t_end = p.T;
  if (p.window > 0u)
    t_end = uint(clamp(int(min(j0 + BC, p.S)) - 1 + int(p.window) - p.pos0, int(t_begin), int(p.T)));

  // c from the largest row of dO among them.
  float mx = 0.0;
  for (uint i = tid; i < grp * (t_end - t_begin); i += NT) {
    uint hh = i / (t_end - t_begin), t = t_begin + i % (t_end - t_begin);
    mx = max(mx, st[p.st_off + 2u * ((b * p.T + t) * p.H + kvh * grp + hh) + 1u]);
  }
  red_s[tid] = mx;
  barrier();
  for (uint w = NT / 2u; w > 0u; w /= 2u) {
    if (tid < w) red_s[tid] = max(red_s[tid], red_s[tid + w]);
    barrier();
  }
  float c = hn_fa_pow2_scale(red_s[0]);
  t_begin = t_begin / BR * BR;

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lq = setTensorLayoutDimensionNV(lq, p.T, HD);
  lq = setTensorLayoutStrideNV(lq, p.H * HD, 1);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lkv = setTensorLayoutDimensionNV(lkv, p.S, HD);
  lkv = setTensorLayoutStrideNV(lkv, p.KVH * HD, 1);
  uint kvrow = (b * p.S * p.KVH + kvh) * HD;

  FA_A(BC, HD) km, vm;
  coopMatLoadTensorNV(km, h16, p.k16 + kvrow, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
  coopMatLoadTensorNV(vm, h16, p.v16 + kvrow, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
  FA_ACC(BC, HD) acc_k = FA_ACC(BC, HD)(0.0), acc_v = FA_ACC(BC, HD)(0.0);

  for (uint hh = 0u; hh < grp; hh++) {
    uint h = kvh * grp + hh;
    uint qrow = (b * p.T * p.H + h) * HD;
    for (uint t0 = t_begin; t0 < t_end; t0 += BR) {
      barrier();  // the previous block's lse_s / rdel_s / f_s are read
      for (uint i = tid; i < BR; i += NT) {
        uint t = t0 + i;
        uint row = (b * p.T + min(t, p.T - 1u)) * p.H + h;
        float m = st[p.st_off + 2u * row + 1u], rr = hn_fa_pow2_scale(m);
        lse_s[i] = lse[p.lse_off + row] * LOG2E;
        rdel_s[i] = st[p.st_off + 2u * row];
        f_s[i] = t < p.T && (m > 0.0 || isnan(m)) ? min(c / rr, 1.0) : 0.0;
      }
      g_t0 = t0;
      barrier();
      FA_B(HD, BR) qt;
      coopMatLoadTensorNV(qt, h16, p.q16 + qrow, sliceTensorLayoutNV(lq, t0, BR, 0, HD), tr);
      FA_ACC(BC, BR) s = FA_ACC(BC, BR)(0.0);
      s = coopMatMulAdd(km, qt, s);
      if (hn_fa_block_full(t0, j0)) coopMatPerElementNV(s, s, fa_pt_full);
      else coopMatPerElementNV(s, s, fa_pt);
      FA_ACC(BC, BR) pf;
      coopMatPerElementNV(pf, s, fa_col_f);
      FA_A(BC, BR) pa = FA_A(BC, BR)(pf);

      FA_B(BR, HD) g;
      coopMatLoadTensorNV(g, h16, p.do16 + qrow, sliceTensorLayoutNV(lq, t0, BR, 0, HD));
      acc_v = coopMatMulAdd(pa, g, acc_v);

      FA_B(HD, BR) gt;
      coopMatLoadTensorNV(gt, h16, p.do16 + qrow, sliceTensorLayoutNV(lq, t0, BR, 0, HD), tr);
      FA_ACC(BC, BR) dp = FA_ACC(BC, BR)(0.0);
      dp = coopMatMulAdd(vm, gt, dp);
      coopMatPerElementNV(dp, dp, fa_ds_col);
      dp = s * dp;
      FA_A(BC, BR) dsa = FA_A(BC, BR)(dp);
      FA_B(BR, HD) qm;
      coopMatLoadTensorNV(qm, h16, p.q16 + qrow, sliceTensorLayoutNV(lq, t0, BR, 0, HD));
      acc_k = coopMatMulAdd(dsa, qm, acc_k);
    }
  }

  acc_k = acc_k * (p.scale / c);
  acc_v = acc_v * (1.0 / c);
  uint gbase = (b * p.S * p.KVH + kvh) * HD;
  if ((p.flags & 2u) != 0u) {
    FA_ACC(BC, HD) old;
    coopMatLoadTensorNV(old, dk, p.g_off + gbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
    acc_k = acc_k + old;
    coopMatLoadTensorNV(old, dv, p.g2_off + gbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
    acc_v = acc_v + old;
  }
  coopMatStoreTensorNV(acc_k, dk, p.g_off + gbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
  coopMatStoreTensorNV(acc_v, dv, p.g2_off + gbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
}
