// Shared by ssm_scan.comp and ssm_scan_back.comp (flags of their push constants).
#define HN_SSM_D 1u
#define HN_SSM_Z 2u
#define HN_SSM_DT_BIAS 4u
#define HN_SSM_STATE 8u
#define HN_SSM_SOFTPLUS 16u
#define HN_SSM_A_HEAD 32u
#define HN_SSM_LIMIT 64u
// torch's softplus (threshold 20); log1p(e) as log(u)·e/(u - 1), u = 1 + e, keeps
// its relative accuracy for small e (very negative v).
float hn_softplus(float v) {
  if (v > 20.0) return v;
  float e = exp(v), u = 1.0 + e;
  return u == 1.0 ? e : log(u) * e / (u - 1.0);
}
// delta from the raw dt (+ bias): softplus, then the clamp; *dd = d delta / d raw
float hn_ssm_delta(float raw, uint flags, float lo, float hi, out float dd) {
  float d = raw;
  dd = 1.0;
  if ((flags & HN_SSM_SOFTPLUS) != 0u) {
    dd = raw <= 20.0 ? 1.0 / (1.0 + exp(-raw)) : 1.0;
    d = hn_softplus(raw);
  }
  if ((flags & HN_SSM_LIMIT) != 0u && (d < lo || d > hi)) {
    d = d < lo ? lo : hi;
    dd = 0.0;
  }
  return d;
}
