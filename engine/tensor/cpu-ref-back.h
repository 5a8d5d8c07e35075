/* CPU references of the backward ops: plain loops in f32 with f64 sums where
 * a row is reduced, written for clarity. They are what the backward shaders
 * (shaders/<op>_back.comp) are tested against, and each is checked against
 * finite differences of its forward in tests/engine/test-back-cpu.c.
 *
 * Conventions: shapes as the forward ops in hn-ops.h. Gradients of
 * activations (dx, dq, ...) are OVERWRITTEN; gradients of parameters (dw,
 * db, dtable) are ACCUMULATED (+=), because a parameter may be used several
 * times in a step (tied embeddings, micro-batches). Any output pointer may be
 * NULL when that gradient is not wanted. */
#pragma once
#include <glib.h>

#include "tensor/hn-ops.h"

G_BEGIN_DECLS

/* y[M, N] = x[M, K] · W[N, K]^T + b[N]:
 * dx = dy · W;  dW += dyᵀ · x;  db += Σ_rows dy. */
void hn_ref_matmul_back (const float *dy, const float *x, const float *w, gint64 M, gint64 N, gint64 K,
                         float *dx, float *dw, float *db);

/* y = x / sqrt(mean(x²) + eps) · w (or · (1 + w) with plus_one; w may be NULL). */
void hn_ref_rmsnorm_back (const float *dy, const float *x, const float *w, gint64 rows, gint64 cols, float eps,
                          gboolean plus_one, float *dx, float *dw);

/* y = (x - mean) / sqrt(var + eps) · w + b (w, b may be NULL). */
void hn_ref_layernorm_back (const float *dy, const float *x, const float *w, gint64 rows, gint64 cols,
                            float eps, float *dx, float *dw, float *db);

/* The rotation of hn_op_rope is orthogonal (times attn_scale), so its
 * backward is the rotation by the opposite angle: x [n_tok, H, D]. */
void hn_ref_rope_back (const float *dy, const gint32 *positions, const float *inv_freq, gint64 n_tok, int n_head,
                       int head_dim, int rot_dims, HnRopeStyle style, float attn_scale, float *dx);
/* The forward, used by the references and the tests. */
void hn_ref_rope_fwd (const float *x, const gint32 *positions, const float *inv_freq, gint64 n_tok, int n_head,
                      int head_dim, int rot_dims, HnRopeStyle style, float attn_scale, float *y);

/* y = softmax(softcap(scale · x)) per row (masked columns have y = 0):
 * dx = scale · cap'(·) · y · (dy - Σ dy·y). x is needed only with softcap. */
void hn_ref_softmax_back (const float *dy, const float *y, const float *x, gint64 rows, gint64 cols, float scale,
                          float softcap, float *dx);

/* Attention as hn_op_attention with a full (non-cached) K/V:
 * q [B, T, H, D], k [B, S, KVH, D], v [B, S, KVH, Dv], dout [B, T, H, Dv].
 * Honours scale, softcap, causal, pos0, window and alibi_slopes (host array
 * [H] here); a params->mask is not supported by the reference. dk/dv are
 * summed over the query heads sharing a KV head (GQA). */
typedef struct {
  int batch, n_q, n_kv, n_head, n_kv_head, head_dim, v_dim;
  float scale;            /* 0 = 1/sqrt(head_dim) */
  float softcap;
  gboolean causal;
  gint64 pos0, window;
  const float *alibi_slopes; /* [n_head] or NULL */
} HnRefAttnShape;

void hn_ref_attention_fwd (const HnRefAttnShape *s, const float *q, const float *k, const float *v, float *out);
void hn_ref_attention_back (const HnRefAttnShape *s, const float *q, const float *k, const float *v,
                            const float *dout, float *dq, float *dk, float *dv);

/* Elementwise activations (forward and derivative). */
float hn_ref_act (HnActivation act, float x);
float hn_ref_act_grad (HnActivation act, float x);
/* y = act(x): dx = dy · act'(x). */
void hn_ref_unary_back (const float *dy, const float *x, gint64 n, HnActivation act, float *dx);
/* y = act(gate) · up: dgate = dy · up · act'(gate), dup = dy · act(gate). */
void hn_ref_glu_back (const float *dy, const float *gate, const float *up, gint64 n, HnActivation act,
                      float *dgate, float *dup);

/* y[n, :] = table[ids[n], :]: dtable[ids[n], :] += dy[n, :] in order of n
 * (ids outside [0, vocab) contribute nothing, as the forward yields zeros). */
void hn_ref_embedding_back (const float *dy, const gint32 *ids, gint64 n, gint64 dim, gint64 vocab,
                            float *dtable);

/* Weighted mean token cross-entropy, the loss transformers computes:
 *   loss = Σ_n w_n·(lse(logits_n) - logits_n[t_n]) / Σ_n w_n over rows whose
 * target is not ignore_index (w = 1 when weights is NULL; loss 0 when no row
 * counts). Returns the loss; with dlogits, writes dloss · ∂loss/∂logits
 * (zero rows for ignored targets). A target outside [0, vocab) that is not
 * ignore_index yields NaN. */
double hn_ref_cross_entropy_loss (const float *logits, const gint32 *targets, const float *weights, gint64 n,
                                  gint64 vocab, gint32 ignore_index, float dloss, float *dlogits);

/* Sum of squares of n values (f64 accumulation), for the global grad norm. */
double hn_ref_sumsq (const float *x, gint64 n);

G_END_DECLS
