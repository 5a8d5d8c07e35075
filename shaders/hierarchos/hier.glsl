// Shared by the Hierarchos coherent-v9 step shaders (hier_*.comp, driven by
// engine/hierarchos/hierarchos-vk.c). Every shader binds the model's parameters
// (one f32 block) at binding 0 and the runner's work buffer (state, scratch,
// control words, logits) at binding 1; push constants carry element offsets.
// A dispatch with a predicate (`pred` != HIER_NONE) does nothing when the
// control word work[pred] is 0 (with HIER_PRED_NOT set in pred: when it is
// not 0): that is how the halting and refinement loops are decided on the
// GPU without a host round trip. Batch rows: gl_WorkGroupID.z is the row,
// whose part of the work buffer starts at z * rs (push field `rs`);
// offsets in the push constants are relative to it.
// The math mirrors the CPU tape (engine/hierarchos/hierarchos-tape.c) op for op,
// including its clamps that pass non-finite values through unchanged.
#include "common.glsl"
#include "activation.glsl"
layout(std430, binding = 0) readonly buffer Params { float prm[]; };
#ifdef HIER_BACK
// The backward ops (hier_*_back.comp): the forward's values are read-only;
// gradients go to gwk (laid out like wk) and gprm (one slice of the
// parameters' size per row, at z * ps).
layout(std430, binding = 1) readonly buffer Work { float wk[]; };
layout(std430, binding = 2) buffer GParams { float gprm[]; };
layout(std430, binding = 3) buffer GWork { float gwk[]; };
#else
layout(std430, binding = 1) buffer Work { float wk[]; };
#endif

uint rb; // the row's base in wk (set first thing in main)

const uint HIER_NONE = 0xffffffffu;

const uint HIER_PRED_NOT = 0x80000000u;

bool hier_skip(uint pred, uint rb) {
  if (pred == HIER_NONE) return false;
  float w = wk[rb + (pred & ~HIER_PRED_NOT)];
  return (pred & HIER_PRED_NOT) != 0u ? w != 0.0 : w == 0.0;
}

float hier_clamp(float x, float m) {
  return (isnan(x) || isinf(x)) ? x : clamp(x, -m, m);
}

float hier_sigmoid(float x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  float e = exp(x);
  return e / (1.0 + e);
}

// act codes: HnActivation (activation.glsl), 9 = w decay -softplus(-x) - 0.5.
float hier_act(uint act, float x) {
  if (act == 7u) return hier_sigmoid(x);
  if (act == 1u) return x * hier_sigmoid(x);
  if (act == 9u) {
    float u = -x;
    float sp = u;
    if (u < -20.0) sp = exp(u);
    else if (u <= 20.0) {
      // log1p(e) without losing small e: log(z) * e / (z - 1), z = 1 + e
      float e = exp(u), z = 1.0 + e;
      sp = z == 1.0 ? e : log(z) * e / (z - 1.0);
    }
    return -sp - 0.5;
  }
  return hn_act(act, x);
}
