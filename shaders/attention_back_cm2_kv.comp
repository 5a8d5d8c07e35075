#version 450
#extension GL_GOOGLE_include_directive : require
// Flash-attention backward, pass 2 (see attention_back_cm2.glsl): one
// workgroup per block of BC keys of one KV head, walking the query blocks
// of the group's heads that can see them. Transposed products keep keys
// as rows: Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ·scale - lse), dV' += Pᵀ·(c·dO),
// dPᵀ' = V·(c·dO)ᵀ, dSᵀ' = Pᵀ ∘ (dPᵀ' - c·Δ), dK' += dSᵀ'·Q; then
// dV = dV' / c, dK = dK'·scale / c, with c the power of two of the largest
// max |dO| among those queries (pass 1 wrote Δ and the row maxima).
#include "attention_back_cm2.glsl"
layout(std430, binding = 6) readonly buffer ST { float st[]; };
layout(std430, binding = 7) buffer DK { float dk[]; };
layout(std430, binding = 8) buffer DV { float dv[]; };

shared float lse_s[BR];
shared float cdel_s[BR];  // c·Δ per query
shared float red_s[NT];

uint g_j0, g_t0;

float fa_pt(const in uint r, const in uint c, const in float s) {
  uint j = g_j0 + r, t = g_t0 + c;
  if (t >= p.T || j >= p.S || hn_fa_hidden(j, p.pos0 + int(t))) return 0.0;
  return exp(s * p.scale - lse_s[c]);
}
float fa_sub_delta_col(const in uint r, const in uint c, const in float x) { return x - cdel_s[c]; }

void main() {
  uint j0 = gl_WorkGroupID.x * BC, kvh = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  g_j0 = j0;
  uint tid = gl_LocalInvocationID.x;
  uint grp = p.H / p.KVH;

  // Queries that can see a key of [j0, j0 + BC): [t_begin, t_end).
  uint t_begin = p.causal != 0u ? uint(clamp(int(j0) - p.pos0, 0, int(p.T))) : 0u;
  uint t_end = p.T;
  if (p.window > 0u)
    t_end = uint(clamp(int(min(j0 + BC, p.S)) - 1 + int(p.window) - p.pos0, int(t_begin), int(p.T)));
  t_begin = t_begin / BR * BR;

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

  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lq = setTensorLayoutDimensionNV(lq, p.T, HD);
  lq = setTensorLayoutStrideNV(lq, p.H * HD, 1);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lkv = setTensorLayoutDimensionNV(lkv, p.S, HD);
  lkv = setTensorLayoutStrideNV(lkv, p.KVH * HD, 1);
  uint kbase = p.k_off + (b * p.S * p.KVH + kvh) * HD;
  uint vbase = p.v_off + (b * p.S * p.KVH + kvh) * HD;

  FA_A(BC, HD) km, vm;
  coopMatLoadTensorNV(km, k, kbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_f32);
  coopMatLoadTensorNV(vm, v, vbase, sliceTensorLayoutNV(lkv, j0, BC, 0, HD), dec_f32);
  FA_ACC(BC, HD) acc_k = FA_ACC(BC, HD)(0.0), acc_v = FA_ACC(BC, HD)(0.0);

  for (uint hh = 0u; hh < grp; hh++) {
    uint h = kvh * grp + hh;
    uint qbase = p.q_off + (b * p.T * p.H + h) * HD;
    uint dobase = p.do_off + (b * p.T * p.H + h) * HD;
    for (uint t0 = t_begin; t0 < t_end; t0 += BR) {
      barrier();  // the previous block's lse_s / cdel_s are read
      if (tid < BR) {
        uint t = t0 + tid;
        uint row = (b * p.T + min(t, p.T - 1u)) * p.H + h;
        lse_s[tid] = lse[p.lse_off + row];
        cdel_s[tid] = c * st[p.st_off + 2u * row];
      }
      g_t0 = t0;
      barrier();
      FA_B(HD, BR) qt;
      coopMatLoadTensorNV(qt, q, qbase, sliceTensorLayoutNV(lq, t0, BR, 0, HD), tr, dec_f32);
      FA_ACC(BC, BR) s = FA_ACC(BC, BR)(0.0);
      s = coopMatMulAdd(km, qt, s);
      coopMatPerElementNV(s, s, fa_pt);
      FA_A(BC, BR) pa = FA_A(BC, BR)(s);

      FA_ACC(BR, HD) g;
      coopMatLoadTensorNV(g, dout, dobase, sliceTensorLayoutNV(lq, t0, BR, 0, HD));
      g = g * c;
      FA_B(BR, HD) gb = FA_B(BR, HD)(g);
      acc_v = coopMatMulAdd(pa, gb, acc_v);

      FA_ACC(HD, BR) gtf;
      coopMatLoadTensorNV(gtf, dout, dobase, sliceTensorLayoutNV(lq, t0, BR, 0, HD), tr);
      gtf = gtf * c;
      FA_B(HD, BR) gt = FA_B(HD, BR)(gtf);
      FA_ACC(BC, BR) dp = FA_ACC(BC, BR)(0.0);
      dp = coopMatMulAdd(vm, gt, dp);
      coopMatPerElementNV(dp, dp, fa_sub_delta_col);
      dp = s * dp;
      FA_A(BC, BR) dsa = FA_A(BC, BR)(dp);
      FA_B(BR, HD) qm;
      coopMatLoadTensorNV(qm, q, qbase, sliceTensorLayoutNV(lq, t0, BR, 0, HD), dec_f32);
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
