// Rows staged in shared memory as vec4 (row stride SD4), for the tiled
// attention backward shaders.
// HN_ROWS_LOAD: `rows` rows of n floats, row rr from src[(base) + d] when
// `valid` (both may use rr), zero-padded to a multiple of 4.
#define HN_ROWS_LOAD(dst, rows, n, rr, valid, src, base) \
  for (uint e_ = gl_LocalInvocationID.x; e_ < (rows) * (((n) + 3u) / 4u); e_ += 128u) { \
    uint rr = e_ / (((n) + 3u) / 4u), d_ = (e_ % (((n) + 3u) / 4u)) * 4u; \
    vec4 v_ = vec4(0.0); \
    if (valid) { \
      [[unroll]] for (uint i_ = 0u; i_ < 4u; i_++) \
        if (d_ + i_ < (n)) { uint d = d_ + i_; v_[i_] = src[(base) + d]; } \
    } \
    dst[rr * SD4 + d_ / 4u] = v_; \
  }
// HN_ROWS_DOT: out = the dot product of row ia of a and row ib of b over n dims.
#define HN_ROWS_DOT(out, a, ia, b, ib, n) { \
    vec4 s_ = vec4(0.0); \
    for (uint d_ = 0u; d_ < ((n) + 3u) / 4u; d_++) s_ = fma(a[(ia) * SD4 + d_], b[(ib) * SD4 + d_], s_); \
    out = s_.x + s_.y + s_.z + s_.w; \
  }
