// Derivatives of the activations in activation.glsl (numbers = HnActivation).
float hn_act_grad(uint act, float x) {
  if (act == 1u) { float s = hn_sigmoid(x); return s * (1.0 + x * (1.0 - s)); }
  if (act == 2u) {
    float y = hn_erfc_pos(abs(x) * 0.70710678118654752);
    float cdf = x >= 0.0 ? 1.0 - 0.5 * y : 0.5 * y;
    return cdf + x * exp(-0.5 * x * x) * 0.39894228040143268;
  }
  if (act == 3u) {
    const float k = 0.79788456080286536;
    float t = hn_tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
  }
  if (act == 4u) return x > 0.0 ? 1.0 : 0.0;
  if (act == 5u) return x > 0.0 ? 2.0 * x : 0.0;
  if (act == 6u) { float s = hn_sigmoid(1.702 * x); return s + 1.702 * x * s * (1.0 - s); }
  if (act == 7u) { float s = hn_sigmoid(x); return s * (1.0 - s); }
  if (act == 8u) { float t = hn_tanh(x); return 1.0 - t * t; }
  return 1.0;
}
