#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention backward, pass 1 (see attention_back_cm2.glsl): one
// workgroup per block of BR queries of one head. First, per row, Δ = dO·O
// and max |dO| (written to stats for pass 2) and the row's power-of-two
// scale r; then, over the key blocks the rows can see, S = Q·Kᵀ,
// P = exp(S·scale - lse), dP' = (r·dO)·Vᵀ, dS' = P ∘ (dP' - r·Δ) and
// dQ' += dS'·K; finally dQ = dQ'·scale / r.
#include "attention_back_cm2.glsl"
layout(std430, binding = 6) writeonly buffer ST { float st[]; };
layout(std430, binding = 7) buffer DQ { float dq[]; };

shared float lse_s[BR];
shared float rdel_s[BR];  // r·Δ
shared float rs_s[BR];    // r
shared float out_s[BR];   // scale / r

uint g_qb0;

float fa_p(const in uint r, const in uint c, const in float s, const in uint j0) {
  uint t = g_qb0 + r, j = j0 + c;
  if (t >= p.T || j >= p.S || hn_fa_hidden(j, p.pos0 + int(t))) return 0.0;
  return exp(s * p.scale - lse_s[r]);
}
float fa_sub_delta(const in uint r, const in uint c, const in float x) { return x - rdel_s[r]; }
float fa_row_scale(const in uint r, const in uint c, const in float x) { return x * rs_s[r]; }
float fa_row_out(const in uint r, const in uint c, const in float x) { return x * out_s[r]; }

void main() {
  uint qb0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  g_qb0 = qb0;
  uint tid = gl_LocalInvocationID.x, r = tid / TPR, part = tid % TPR;
  uint kvh = h / (p.H / p.KVH);
  uint t = qb0 + r;
  bool live = t < p.T;
  uint row = (b * p.T + t) * p.H + h;

  // Δ = Σ dO·O and max |dO| over the row, TPR invocations per row.
  float dl = 0.0, mx = 0.0;
  if (live) {
    uint ob = p.o_off + row * HD, gb = p.do_off + row * HD;
    for (uint d = part; d < HD; d += TPR) {
      float g = dout[gb + d];
      dl = fma(g, o[ob + d], dl);
      mx = max(mx, abs(g));
    }
  }
  [[unroll]] for (uint w = 1u; w < TPR; w *= 2u) {
    dl += subgroupShuffleXor(dl, w);
    mx = max(mx, subgroupShuffleXor(mx, w));
  }
  if (part == 0u) {
    float rr = hn_fa_pow2_scale(mx);
    lse_s[r] = live ? lse[p.lse_off + row] : 0.0;
    rdel_s[r] = rr * dl;
    rs_s[r] = rr;
    out_s[r] = p.scale / rr;
    if (live) {
      st[p.st_off + 2u * row] = dl;
      st[p.st_off + 2u * row + 1u] = mx;
    }
  }
  barrier();

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lq = setTensorLayoutDimensionNV(lq, p.T, HD);
  lq = setTensorLayoutStrideNV(lq, p.H * HD, 1);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lkv = setTensorLayoutDimensionNV(lkv, p.S, HD);
  lkv = setTensorLayoutStrideNV(lkv, p.KVH * HD, 1);
  uint qbase = p.q_off + (b * p.T * p.H + h) * HD;
  uint dobase = p.do_off + (b * p.T * p.H + h) * HD;
  uint kbase = p.k_off + (b * p.S * p.KVH + kvh) * HD;
  uint vbase = p.v_off + (b * p.S * p.KVH + kvh) * HD;

  FA_A(BR, HD) qm;
  coopMatLoadTensorNV(qm, q, qbase, sliceTensorLayoutNV(lq, qb0, BR, 0, HD), dec_f32);
  FA_ACC(BR, HD) gacc;
  coopMatLoadTensorNV(gacc, dout, dobase, sliceTensorLayoutNV(lq, qb0, BR, 0, HD));
  coopMatPerElementNV(gacc, gacc, fa_row_scale);
  FA_A(BR, HD) gm = FA_A(BR, HD)(gacc);
  FA_ACC(BR, HD) acc = FA_ACC(BR, HD)(0.0);

  // Keys any query of the block can see: [j_lo, n_keys).
  uint n_keys = p.S;
  if (p.causal != 0u) n_keys = uint(clamp(p.pos0 + int(min(qb0 + BR, p.T)), 0, int(p.S)));
  uint j_lo = 0u;
  if (p.window > 0u) j_lo = uint(clamp(p.pos0 + int(qb0) - int(p.window) + 1, 0, int(n_keys))) / BC * BC;

  for (uint j0 = j_lo; j0 < n_keys; j0 += BC) {
    FA_B(HD, BC) kt;
    coopMatLoadTensorNV(kt, k, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_f32);
    FA_ACC(BR, BC) s = FA_ACC(BR, BC)(0.0);
    s = coopMatMulAdd(qm, kt, s);
    coopMatPerElementNV(s, s, fa_p, j0);
    FA_B(HD, BC) vt;
    coopMatLoadTensorNV(vt, v, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), tr, dec_f32);
    FA_ACC(BR, BC) dp = FA_ACC(BR, BC)(0.0);
    dp = coopMatMulAdd(gm, vt, dp);
    coopMatPerElementNV(dp, dp, fa_sub_delta);
    dp = s * dp;
    FA_A(BR, BC) dsm = FA_A(BR, BC)(dp);
    FA_B(BC, HD) km;
    coopMatLoadTensorNV(km, k, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_f32);
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
