#version 450
#extension GL_GOOGLE_include_directive : require
// Mixture-of-experts routing, one invocation per token (E is small: a
// serial pass per row is cheaper than a reduction tree). The router scores
// are written into the weights row first, which then serves as scratch;
// the row ends with the k chosen weights and zeros elsewhere, and idx gets
// the k chosen experts. Kinds (engine/tensor/hn-ops.h HnMoeRouteKind):
// 0 softmax then top-k, 1 top-k of the logits then softmax over those k,
// 2 sigmoid then top-k by score + correction bias (grouped), 3 phimoe's
// sparsemixer (k = 2, inference). Ties go to the lower expert index.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) buffer W { float w[]; };
layout(std430, binding = 3) writeonly buffer I { int idx[]; };
layout(push_constant) uniform P {
  uint rows; uint E; uint K; uint kind; uint l_off; uint b_off; uint w_off; uint i_off;
  uint has_bias; uint norm; float scale; uint n_group; uint topk_group; uint group_sum2; float eps; float norm_min;
  float norm_add;
} p;

const uint MAX_K = 32u;

float score_at(uint base, uint e) { return w[base + e]; }

// The value experts are chosen by: score (+ correction bias), 0 outside the kept groups.
float choice(uint base, uint e, uint groups) {
  float c = w[base + e] + (p.has_bias != 0u ? bias[p.b_off + e] : 0.0);
  if (p.n_group > 1u) {
    uint g = e / (p.E / p.n_group);
    if ((groups & (1u << g)) == 0u) c = 0.0;
  }
  return c;
}

void main() {
  uint row = hn_group_index() * 64u + gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  uint lb = p.l_off + row * p.E, base = p.w_off + row * p.E;

  // scores
  float mx = HN_NEG_INF;
  for (uint e = 0u; e < p.E; e++) mx = max(mx, lg[lb + e]);
  float sum = 0.0;
  if (p.kind == 0u)
    for (uint e = 0u; e < p.E; e++) sum += exp(lg[lb + e] - mx);
  for (uint e = 0u; e < p.E; e++) {
    float l = lg[lb + e];
    w[base + e] = p.kind == 0u ? exp(l - mx) / sum : p.kind == 2u ? 1.0 / (1.0 + exp(-l)) : l;
  }

  uint sel[MAX_K];
  float val[MAX_K];
  if (p.kind == 3u) {
    // sparsemixer: each pick's weight is its softmax over the experts within
    // 2·eps (relative) of it, the first pick excluded from the second round
    int first = -1;
    for (uint j = 0u; j < 2u; j++) {
      float m = HN_NEG_INF;
      int bi = -1;
      for (uint e = 0u; e < p.E; e++)
        if (int(e) != first && (bi < 0 || score_at(base, e) > m)) { m = score_at(base, e); bi = int(e); }
      float s = 0.0;
      for (uint e = 0u; e < p.E; e++) {
        if (int(e) == first) continue;
        float v = score_at(base, e);
        if (!((m - v) / max(abs(v), m) > 2.0 * p.eps)) s += exp(v - m);
      }
      sel[j] = uint(bi);
      val[j] = 1.0 / s;
      first = bi;
    }
  } else {
    // groups to keep (deepseek): by their best score, or the sum of their two best
    uint groups = 0xffffffffu;
    if (p.n_group > 1u) {
      uint gs = p.E / p.n_group;
      float gsc[32];
      for (uint g = 0u; g < p.n_group; g++) {
        float b1 = HN_NEG_INF, b2 = HN_NEG_INF;
        for (uint e = g * gs; e < (g + 1u) * gs; e++) {
          float c = w[base + e] + (p.has_bias != 0u ? bias[p.b_off + e] : 0.0);
          if (c > b1) { b2 = b1; b1 = c; } else if (c > b2) b2 = c;
        }
        gsc[g] = p.group_sum2 != 0u ? b1 + b2 : b1;
      }
      groups = 0u;
      for (uint j = 0u; j < p.topk_group; j++) {
        int bg = -1;
        for (uint g = 0u; g < p.n_group; g++)
          if ((groups & (1u << g)) == 0u && (bg < 0 || gsc[g] > gsc[bg])) bg = int(g);
        groups |= 1u << uint(bg);
      }
    }
    // top-k by the choice value
    for (uint j = 0u; j < p.K; j++) {
      float bv = HN_NEG_INF;
      int bi = -1;
      for (uint e = 0u; e < p.E; e++) {
        bool taken = false;
        for (uint q = 0u; q < j; q++) taken = taken || sel[q] == e;
        if (taken) continue;
        float c = choice(base, e, groups);
        if (bi < 0 || c > bv) { bv = c; bi = int(e); }
      }
      sel[j] = uint(bi);
      val[j] = score_at(base, uint(bi));
    }
    if (p.kind == 1u) {  // softmax over the k logits (the first is the largest)
      float v0 = val[0], s = 0.0;
      for (uint j = 0u; j < p.K; j++) s += exp(val[j] - v0);
      for (uint j = 0u; j < p.K; j++) val[j] = exp(val[j] - v0) / s;
    } else if (p.norm != 0u) {
      float s = 0.0;
      for (uint j = 0u; j < p.K; j++) s += val[j];
      if (p.kind == 2u) s += p.norm_add;
      if (p.norm_min > 0.0) s = max(s, p.norm_min);
      for (uint j = 0u; j < p.K; j++) val[j] /= s;
    }
  }
  for (uint e = 0u; e < p.E; e++) w[base + e] = 0.0;
  for (uint j = 0u; j < p.K; j++) {
    w[base + sel[j]] = val[j] * p.scale;
    idx[p.i_off + row * p.K + j] = int(sel[j]);
  }
}
