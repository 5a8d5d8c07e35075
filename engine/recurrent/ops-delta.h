/* The gated delta rule (issue 25): the linear-attention recurrence of gated
 * DeltaNet (transformers' Qwen3NextGatedDeltaNet: torch_recurrent_gated_delta_rule,
 * and torch_chunk_gated_delta_rule, which computes the same sums in chunks),
 * forward and backward, with CPU references (cpu-ref-delta.c). Conventions of
 * ops-ssm.h: activations f32, ops record dispatches and never allocate,
 * gradients of parameters accumulate (+=), gradients of activations are written.
 *
 * Per batch row b and value head h (key head h / (HV / HK): the key heads
 * repeated as transformers' repeat_interleave does), with S the state [DK, DV]:
 *   q̂ = q / sqrt(Σ q² + 1e-6) · scale,  k̂ = k / sqrt(Σ k² + 1e-6)   (qk_l2norm; else q · scale, k)
 *   g = -exp(A_log[h]) · softplus(a[b, t, h] + dt_bias[h]),  β = sigmoid(b[b, t, h])
 *   S = exp(g) · S;  S += k̂ ⊗ β (v - Sᵀ k̂);  y = Sᵀ q̂
 * qkv [B, T, 2·HK·DK + HV·DV] (or [T, ·]): q, k then v, each head's values
 * contiguous (the conv's output, transformers' mixed_qkv); a, b [B, T, HV];
 * y [B, T, HV·DV]; A_log, dt_bias f32 [HV]; state f32 [B, HV, DK, DV] (the
 * recurrent_state layout): the state before these tokens (zeros when NULL),
 * replaced in place by the state after the last one.
 *
 * Shaders (gated_delta_rule*.comp): the forward runs one invocation per
 * (row, value head, value column), the column of S (DK values, a
 * specialization constant) in registers; the columns do not interact. */
#pragma once
#include "tensor/hn-ops.h"
#include "tensor/ops-back.h"

G_BEGIN_DECLS

/* The largest key head size (DK) the shaders take. */
#define HN_DELTA_MAX_KEY_DIM 256

typedef struct {
  HnTensor *dt_bias; /* nullable */
  HnTensor *state;   /* nullable */
  int n_k_heads, n_v_heads, k_dim, v_dim;
  gboolean qk_l2norm;
  float scale; /* q's multiplier (after the norm); 0: 1 / sqrt(k_dim) */
} HnDeltaRuleParams;

gboolean hn_op_gated_delta_rule (HnCmd *cmd, HnTensor *y, HnTensor *qkv, HnTensor *a, HnTensor *b, HnTensor *A_log,
                                 const HnDeltaRuleParams *p, GError **error);

/* Backward from a zero state (p->state must be NULL): dqkv, da, db written; dA_log and ddt_bias
 * (needs p->dt_bias) accumulated, both nullable. scratch: f32 of at least
 * hn_gated_delta_rule_back_scratch elements (one key head's column of states over time at a
 * time). */
gint64 hn_gated_delta_rule_back_scratch (const HnDeltaRuleParams *p, gint64 T);
gboolean hn_op_gated_delta_rule_back (HnCmd *cmd, HnTensor *dqkv, HnTensor *da, HnTensor *db, HnTensor *dA_log,
                                      HnTensor *ddt_bias, HnTensor *dy, HnTensor *qkv, HnTensor *a, HnTensor *b,
                                      HnTensor *A_log, const HnDeltaRuleParams *p, HnTensor *scratch, GError **error);

/* ------------------------------------------------------------ CPU references (double sums) */

typedef struct {
  const float *dt_bias; /* nullable */
  float *state;         /* nullable, [B, HV, DK, DV], updated in place */
  int n_k_heads, n_v_heads, k_dim, v_dim;
  gboolean qk_l2norm;
  float scale;
} HnRefDeltaRule;

void hn_ref_gated_delta_rule (float *y, const float *qkv, const float *a, const float *b, const float *A_log,
                              gint64 B, gint64 T, const HnRefDeltaRule *p);
/* From a zero state (p->state ignored): dqkv, da, db written; dA_log, ddt_bias accumulated (nullable). */
void hn_ref_gated_delta_rule_back (const float *dy, const float *qkv, const float *a, const float *b,
                                   const float *A_log, gint64 B, gint64 T, const HnRefDeltaRule *p, float *dqkv,
                                   float *da, float *db, float *dA_log, float *ddt_bias);

G_END_DECLS
