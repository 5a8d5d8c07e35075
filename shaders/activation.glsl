// Activations shared by unary.comp and glu.comp (numbers = HnActivation).
// Written for ~1e-7 relative error everywhere, including the tails, so the
// f32 ops match the CPU reference to 1e-5.

// erfc(x) for x >= 0 (Numerical Recipes erfcc: fractional error < 1.2e-7).
float hn_erfc_pos(float ax) {
  float t = 1.0 / (1.0 + 0.5 * ax);
  return t * exp(-ax * ax - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
         t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
         t * (-0.82215223 + t * 0.17087277)))))))));
}
float hn_gelu(float x) {
  float y = hn_erfc_pos(abs(x) * 0.70710678118654752);
  // 0.5x(1 + erf(x)): for x < 0 that is 0.5x·erfc(|x|/√2), without cancellation.
  return x >= 0.0 ? 0.5 * x * (2.0 - y) : 0.5 * x * y;
}
float hn_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
float hn_tanh(float x) {
  float ax = abs(x);
  if (ax < 0.3) {
    float x2 = x * x;
    return x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
  }
  float e = exp(-2.0 * min(ax, 20.0));
  float t = (1.0 - e) / (1.0 + e);
  return x < 0.0 ? -t : t;
}
float hn_act(uint act, float x) {
  if (act == 1u) return x * hn_sigmoid(x);
  if (act == 2u) return hn_gelu(x);
  // 0.5x(1 + tanh(z)) = x·sigmoid(2z): no cancellation for negative x.
  if (act == 3u) return x * hn_sigmoid(2.0 * 0.79788456080286536 * (x + 0.044715 * x * x * x));
  if (act == 4u) return max(x, 0.0);
  if (act == 5u) { float r = max(x, 0.0); return r * r; }
  if (act == 6u) return x * hn_sigmoid(1.702 * x);
  if (act == 7u) return hn_sigmoid(x);
  if (act == 8u) return hn_tanh(x);
  if (act == 9u) {
    // max(x, 0) + log1p(e^-|x|); log near 1 is not accurate enough on every device, so
    // log1p(u) is its series below u = 0.1 (8 terms: relative error < 1e-9)
    float u = exp(-abs(x));
    float l = u < 0.1 ? u * (1.0 + u * (-1.0 / 2.0 + u * (1.0 / 3.0 + u * (-1.0 / 4.0 + u * (1.0 / 5.0 +
                        u * (-1.0 / 6.0 + u * (1.0 / 7.0 + u * (-1.0 / 8.0))))))))
                      : log(1.0 + u);
    return max(x, 0.0) + l;
  }
  return x;
}
