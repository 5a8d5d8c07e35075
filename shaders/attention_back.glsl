// Shared by attention_back_q.comp and attention_back_kv.comp: the score of
// query row (b, t, h) against key j exactly as attention.comp forms it.
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer DO { float dout[]; };
layout(std430, binding = 4) readonly buffer SL { float slopes[]; };
layout(push_constant) uniform P {
  uint B; uint T; uint H; uint KVH; uint D; uint Dv; uint S;
  int pos0; uint window; uint causal; float scale; float softcap;
  uint q_off; uint k_off; uint v_off; uint do_off; uint s_off; uint st_off; uint g_off; uint g2_off;
  uint flags;  // 1 = alibi slopes, 2 = accumulate into the gradients
} p;

bool hn_att_hidden(uint j, int pos) {
  return (p.causal != 0u && int(j) > pos) || (p.window > 0u && int(j) <= pos - int(p.window));
}

// Returns the score; *th gets tanh(raw / softcap) for the softcap derivative.
float hn_att_score(uint qb, uint kb, uint h, uint j, int pos, out float th) {
  float dot = 0.0;
  for (uint d = 0u; d < p.D; d++) dot = fma(q[qb + d], k[kb + d], dot);
  float s = dot * p.scale;
  th = 0.0;
  if (p.softcap > 0.0) { th = hn_tanh(s / p.softcap); s = p.softcap * th; }
  if ((p.flags & 1u) != 0u) s += slopes[p.s_off + h] * float(int(j) - pos);
  return s;
}
