// Tile loaders shared by matmul.comp and matmul_coopmat.comp: fragment f
// of the BM x BK tile of A (BN x BK of B) at k0, 4 elements along the
// operand's contiguous direction, zero outside the matrix.
// Modes (A_MODE / B_MODE): 0 = any strides, element by element, fragments
// along k; 1 = contiguous along k; 2 = contiguous along m (n), each one
// vec4 (f32) or uvec2 (16-bit) load of a 4-aligned fragment.
// Needs BDT, BM, BN, BK, A_MODE, B_MODE, the push constants p and the
// buffers a, a4, bw, b4, b2.

vec4 load_b4(uint idx) {  // 4 elements of B from element idx (4-aligned)
  if (BDT == HN_DT_F32) return uintBitsToFloat(b4[idx >> 2]);
  uvec2 w = b2[idx >> 2];
  if (BDT == HN_DT_F16) return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  return uintBitsToFloat(uvec4(w.x << 16, w.x & 0xffff0000u, w.y << 16, w.y & 0xffff0000u));
}

// Fragment f of the A tile at k0.
vec4 fetch_a(uint f, uint m0, uint k0, uint abase) {
  vec4 v = vec4(0.0);
  if (A_MODE == 2) {
    uint kk = f / (BM / 4), mm = (f % (BM / 4)) * 4;
    uint gm = m0 + mm, gk = k0 + kk;
    if (gm < p.M && gk < p.K) v = a4[(abase + gk * p.a_sk + gm) >> 2];
  } else {
    uint mm = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    uint gm = m0 + mm, gk = k0 + kk;
    if (A_MODE == 1) {
      if (gm < p.M && gk < p.K) v = a4[(abase + gm * p.a_sm + gk) >> 2];
    } else if (gm < p.M) {
      [[unroll]] for (uint i = 0u; i < 4u; i++)
        if (gk + i < p.K) v[i] = a[abase + gm * p.a_sm + (gk + i) * p.a_sk];
    }
  }
  return v;
}

vec4 fetch_b(uint f, uint n0, uint k0, uint bbase) {
  vec4 v = vec4(0.0);
  if (B_MODE == 2) {
    uint kk = f / (BN / 4), nn = (f % (BN / 4)) * 4;
    uint gn = n0 + nn, gk = k0 + kk;
    if (gn < p.N && gk < p.K) v = load_b4(bbase + gk * p.b_sk + gn);
  } else {
    uint nn = f / (BK / 4), kk = (f % (BK / 4)) * 4;
    uint gn = n0 + nn, gk = k0 + kk;
    if (B_MODE == 1) {
      if (gn < p.N && gk < p.K) v = load_b4(bbase + gn * p.b_sn + gk);
    } else if (gn < p.N) {
      [[unroll]] for (uint i = 0u; i < 4u; i++)
        if (gk + i < p.K) { uint idx = bbase + gn * p.b_sn + (gk + i) * p.b_sk; v[i] = HN_LOAD(bw, BDT, idx); }
    }
  }
  return v;
}

