/* CPU references of the forward ops: plain loops in double precision over
 * host float arrays, the ground truth for the GPU op tests (and for model
 * tests elsewhere). Shapes and semantics are exactly those of the
 * hn_op_* function of the same name in hn-ops.h; 16-bit storage is passed
 * here already widened to float. */
#pragma once
#include "tensor/hn-ops.h"

G_BEGIN_DECLS

double hn_ref_activation (HnActivation act, double x);

/* y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]) */
void hn_ref_matmul (float *y, const float *x, const float *w, const float *bias, gint64 M, gint64 N, gint64 K);

/* c[batch, M, N] (=|+=) alpha · op(a) · op(b); a_batch / b_batch are 1 (broadcast) or batch. */
void hn_ref_bmm (float *c, const float *a, const float *b, gint64 batch, gint64 a_batch, gint64 b_batch, gint64 M,
                 gint64 N, gint64 K, HnMatmulFlags flags, float alpha);

/* Shapes are right-aligned 4-D (unused leading dims 1). */
void hn_ref_binary (float *out, const float *a, const gint64 a_shape[4], const float *b, const gint64 b_shape[4],
                    const gint64 out_shape[4], HnBinaryOp op);

void hn_ref_unary (float *out, const float *in, gint64 n, HnActivation act);
void hn_ref_scale (float *out, const float *in, gint64 n, float scale, float offset);
void hn_ref_clamp (float *out, const float *in, gint64 n, float lo, float hi);
/* up == NULL: gate is [rows, 2F] (gate half, then up half). */
void hn_ref_glu (float *out, const float *gate, const float *up, gint64 rows, gint64 F, HnActivation act);

void hn_ref_embedding (float *out, const float *table, gint64 V, gint64 D, const gint32 *ids, gint64 n);

void hn_ref_rmsnorm (float *out, const float *x, const float *w, gint64 rows, gint64 cols, float eps, HnNormFlags flags);
void hn_ref_layernorm (float *out, const float *x, const float *w, const float *b, gint64 rows, gint64 cols, float eps);

/* T = rows per [T, S] block; mask [mask_B, mask_T, S] or NULL. */
void hn_ref_softmax (float *out, const float *in, gint64 rows, gint64 cols, gint64 T, const HnSoftmaxParams *p,
                     const float *mask, gint64 mask_B, gint64 mask_T);

/* x [rows, D] where rows = tokens * H; positions [tokens]. */
void hn_ref_rope (float *out, const float *x, gint64 rows, gint64 H, gint64 D, const gint32 *positions,
                  const float *inv_freq, int rot_dims, HnRopeStyle style, float attn_scale);

/* q/out [B, T, H, D|Dv], k/v [B, n_ctx, KVH, D|Dv]; p->mask, p->alibi_slopes and p->sinks
 * are ignored: pass their host copies as mask/slopes (slopes holds the sinks when p->sinks is set). */
void hn_ref_attention (float *out, const float *q, const float *k, const float *v, gint64 B, gint64 T, gint64 H,
                       gint64 KVH, gint64 D, gint64 Dv, gint64 n_ctx, const HnAttentionParams *p,
                       const float *slopes, const float *mask, gint64 mask_B, gint64 mask_T, gint64 mask_cols);

/* hn_op_attention_paged on the host: q/out [B, T, H, D|Dv], k/v arenas
 * [n_pages * HN_KV_PAGE_SIZE, KVH, D|Dv], page_table [B, max_pages], seq_lens [B]. */
void hn_ref_attention_paged (float *out, const float *q, const float *k, const float *v, gint64 B, gint64 T, gint64 H,
                             gint64 KVH, gint64 D, gint64 Dv, const gint32 *page_table, gint64 max_pages,
                             const gint32 *seq_lens, const HnPagedAttentionParams *p, const float *sinks);

/* hn_op_set_rows on the host: dst [R, D], src [n, D], rows [n]. */
void hn_ref_set_rows (float *dst, const float *src, const gint32 *rows, gint64 n, gint64 D, gint64 R);

void hn_ref_cross_entropy (float *loss, float *mean, const float *logits, const gint32 *targets, gint64 N, gint64 V,
                           gint32 ignore_index);

void hn_ref_topk (float *values, gint32 *indices, const float *in, gint64 rows, gint64 cols, int k);
void hn_ref_moe_route (float *weights, gint32 *indices, const float *logits, gint64 rows, gint64 E,
                       const HnMoeRouteParams *params, const float *bias);
/* moe_matmul + moe_combine on the host from the routing alone: out[t] = sum_j
 * weights[t, ids[t, j]] · down_e(act(gate_e(x_t)) · up_e(x_t)) is what the graph builds; these
 * two give y [S, N] = x[s / x_div] · w[ids[s]]ᵀ (+ bias) and the weighted sum. */
void hn_ref_moe_matmul (float *y, const float *x, const float *w, const float *bias, const gint32 *ids, gint64 S,
                        gint64 N, gint64 K, int x_div);
void hn_ref_moe_combine (float *out, const float *y, const float *weights, const gint32 *ids, gint64 T, gint64 C,
                         gint64 E, int k);

void hn_ref_reduce (float *out, const float *in, gint64 rows, gint64 cols, HnReduceOp op);

/* out.shape[i] = shape[perm[i]] (32-bit elements). */
void hn_ref_permute (guint32 *out, const guint32 *in, int ndim, const gint64 *shape, const int *perm);

G_END_DECLS
