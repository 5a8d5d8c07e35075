#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention backward, pass 1 (see attention_back_cm2.glsl): one
// workgroup per block of BR queries of one head, over the key blocks the
// rows can see: S = Q·Kᵀ, P = exp(S·scale - lse), dP' = (r·dO)·Vᵀ,
// dS' = P ∘ (dP' - r·Δ) and dQ' += dS'·K; finally dQ = dQ'·scale / r.
#include "attention_back_cm2.glsl"
layout(std430, binding = 3) buffer DQ { float dq[]; };

shared float lse_s[BR];   // lse·log2(e)
shared float rdel_s[BR];  // r·Δ
shared float out_s[BR];   // scale / r

uint g_qb0;
float g_sl2;  // scale·log2(e)

float fa_p(const in uint r, const in uint c, const in float s, const in uint j0) {
  uint t = g_qb0 + r, j = j0 + c;
  if (t >= p.T || j >= p.S || hn_fa_hidden(j, p.pos0 + int(t))) return 0.0;
  return exp2(s * g_sl2 - lse_s[r]);
}
float fa_p_full(const in uint r, const in uint c, const in float s) { return exp2(s * g_sl2 - lse_s[r]); }
float fa_sub_delta(const in uint r, const in uint c, const in float x) { return x - rdel_s[r]; }
float fa_row_out(const in uint r, const in uint c, const in float x) { return x * out_s[r]; }

void main() {
  uint qb0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  g_qb0 = qb0;
  g_sl2 = p.scale * LOG2E;
  uint kvh = h / (p.H / p.KVH);
  for (uint r = gl_LocalInvocationID.x; r < BR; r += NT) {
    uint t = qb0 + r;
    uint row = (b * p.T + min(t, p.T - 1u)) * p.H + h;
    float rr = hn_fa_pow2_scale(st[p.st_off + 2u * row + 1u]);
    lse_s[r] = t < p.T ? lse[p.lse_off + row] * LOG2E : 0.0;
    rdel_s[r] = st[p.st_off + 2u * row];
    out_s[r] = p.scale / rr;
  }
  barrier();

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lq = setTensorLayoutDimensionNV(lq, p.T, HD);
  lq = setTensorLayoutStrideNV(lq, p.H * HD, 1);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lkv = setTensorLayoutDimensionNV(lkv, p.S, HD);
  lkv = setTensorLayoutStrideNV(lkv, p.KVH * HD, 1);
  uint qrow = (b * p.T * p.H + h) * HD;
  uint kvrow = (b * p.S * p.KVH + kvh) * HD;

  FA_A(BR, HD) qm, gm;
  coopMatLoadTensorNV(qm, h16, p.q16 + qrow, sliceTensorLayoutNV(lq, qb0, BR, 0, HD));
  coopMatLoadTensorNV(gm, h16, p.do16 + qrow, sliceTensorLayoutNV(lq, qb0, BR, 0, HD));
  FA_ACC(BR, HD) acc = FA_ACC(BR, HD)(0.0);

  // Keys any query of the block can see: [j_lo, n_keys).
  uint n_keys = p.S;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BR, p.T)), 0, int(p.S)));
  uint j_lo = 0u;
  if (p.window > 0u) j_lo = uint(clamp(p.pos0 + int(qb0) - int(p.window) + 1, 0, int(n_keys))) / BC * BC;

  for (uint j0 = j_lo; j0 < n_keys; j0 += BC) {
    FA_B(HD, BC) kt;
    coopMatLoadTensorNV(kt, h16, p.k16 + kvrow, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr);
    FA_ACC(BR, BC) s = FA_ACC(BR, BC)(0.0);
    s = coopMatMulAdd(qm, kt, s);
    if (hn_fa_block_full(qb0, j0)) coopMatPerElementNV(s, s, fa_p_full);
    else coopMatPerElementNV(s, s, fa_p, j0);
    FA_B(HD, BC) vt;
    coopMatLoadTensorNV(vt, h16, p.v16 + kvrow, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr);
    FA_ACC(BR, BC) dp = FA_ACC(BR, BC)(0.0);
    dp = coopMatMulAdd(gm, vt, dp);
    coopMatPerElementNV(dp, dp, fa_sub_delta);
    dp = s * dp;
    FA_A(BR, BC) dsm = FA_A(BR, BC)(dp);
    FA_B(BC, HD) km;
    coopMatLoadTensorNV(km, h16, p.k16 + kvrow, sliceTensorLayoutNV(lkv, j0, BC, 0, HD));
    acc = coopMatMulAdd(dsm, km, acc);
  }

  coopMatPerElementNV(acc, acc, fa_row_out);
  uint gbase = p.g_off + (b * p.T * p.H + h) * HD;
  if ((p.flags & 2u) != 0u) {
    FA_ACC(BR, HD) old;
    coopMatLoadTensorNV(old, dq, gbase, sliceTensorLayoutNV(lq, qb0, BR, 0, HD));
    acc = acc + old;
  }
  coopMatStoreTensorNV(acc, dq, gbase, sliceTensorLayoutNV(lq, qb0, BR, 0, HD));
}
