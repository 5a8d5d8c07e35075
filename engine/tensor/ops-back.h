/* Backward ops and optimizer updates on the device, one per forward op the
 * Transformer families use (shaders/<op>_back.comp). Same conventions as
 * hn-ops.h: they check their tensors, record dispatches into `cmd` and never
 * allocate; every one has a CPU reference in cpu-ref-back.h and a test
 * against it on lavapipe (tests/engine/test-back-ops.c).
 *
 * Gradients of parameters (dw, db, dtable) always ACCUMULATE (+=), so tied
 * weights and micro-batches add up; gradients of activations are written,
 * or added with HN_BACK_ACCUMULATE (a residual branch adding into the
 * stream's gradient). A NULL gradient tensor is not computed. */
#pragma once
#include "tensor/hn-ops.h"
#include "tensor/optim.h"

G_BEGIN_DECLS

typedef enum {
  HN_BACK_DEFAULT = 0,
  HN_BACK_ACCUMULATE = 1 << 0, /* dx += instead of dx = */
} HnBackFlags;

/* y[M, N] = x[M, K] · W[N, K]ᵀ + b: dx (=/+=) dy · W; dW += dyᵀ · x; db += Σ_rows dy.
 * dy/x/dx may have leading dims (M = rows). W and dW f32. */
gboolean hn_op_matmul_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x,
                            HnTensor *w, HnBackFlags flags, GError **error);

/* db[N] += Σ_rows dy[rows, N]. */
gboolean hn_op_bias_back (HnCmd *cmd, HnTensor *db, HnTensor *dy, GError **error);

/* RMSNorm / LayerNorm backward. stats is f32 scratch of 2·rows elements
 * (the row means and reciprocal deviations, recomputed here). w/dw, b/db may
 * be NULL. flags of the forward: HN_NORM_WEIGHT_PLUS_ONE (rmsnorm). */
gboolean hn_op_rmsnorm_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *dy, HnTensor *x, HnTensor *w,
                             HnTensor *stats, float eps, HnNormFlags norm_flags, HnBackFlags flags, GError **error);
gboolean hn_op_layernorm_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *x,
                               HnTensor *w, HnTensor *stats, float eps, HnBackFlags flags, GError **error);

/* y = act(x): dx (=/+=) dy · act'(x). */
gboolean hn_op_unary_back (HnCmd *cmd, HnTensor *dx, HnTensor *dy, HnTensor *x, HnActivation act, HnBackFlags flags,
                           GError **error);

/* y = act(gate) · up: writes dgate and dup. With up == NULL gate is the fused
 * [rows, 2F] gate_up tensor and dgate its [rows, 2F] gradient (dup NULL).
 * dgate and dup may both be f16 (separate gate and up, F % 4 == 0, offsets on
 * 4 elements): rounded as a matmul's f16 copy of them would be (±65504). */
gboolean hn_op_glu_back (HnCmd *cmd, HnTensor *dgate, HnTensor *dup, HnTensor *dy, HnTensor *gate, HnTensor *up,
                         HnActivation act, GError **error);

/* dtable[ids[n], :] += dy[n, :] (f32 table gradient [V, D]). */
gboolean hn_op_embedding_back (HnCmd *cmd, HnTensor *dtable, HnTensor *dy, HnTensor *ids, GError **error);

/* The ids ids[0..n) grouped by value for hn_op_embedding_back_grouped, ids
 * outside 0..V-1 left out: out (HN_EMBEDDING_GROUPS_LEN (n) entries) gets G,
 * then from out + 1 the G + 1 group starts, from out + n + 2 the G group ids
 * (ascending) and from out + 2n + 2 the tokens of each group in order: where
 * each part starts depends on n only, so a recorded backward replays with
 * the next batch's groups. Returns G. */
#define HN_EMBEDDING_GROUPS_LEN(n) (3 * (n) + 2)
guint hn_embedding_groups (const gint32 *ids, gint64 n, gint64 V, gint32 *out);

/* hn_op_embedding_back with the ids grouped on the host (groups: an i32
 * tensor holding hn_embedding_groups' output for the n rows of dy): one
 * workgroup per distinct id (G read from groups on the device) reads whole
 * rows of dy; the same sums, bit for bit, in the same order. */
gboolean hn_op_embedding_back_grouped (HnCmd *cmd, HnTensor *dtable, HnTensor *dy, HnTensor *groups, GError **error);

/* dlogits[n, :] = row_scale[n] · (softmax(logits[n]) - onehot(targets[n])).
 * row_scale f32 [N] holds dloss·w_n/Σw (0 for ignored rows). dlogits may be
 * logits (in place). */
gboolean hn_op_cross_entropy_back (HnCmd *cmd, HnTensor *dlogits, HnTensor *logits, HnTensor *targets,
                                   HnTensor *row_scale, GError **error);

/* hn_op_cross_entropy (no mean) and hn_op_cross_entropy_back in one kernel
 * that reads the logits twice instead of five times (cross_entropy_grad.comp;
 * the max and the sum of a row in one pass). dlogits: f32 (may be logits, in
 * place), or f16 rounded as a matmul's f16 copy of its operand would be
 * (clamped to ±65504, or ±Inf past the range under fp16 autocast; V % 4 == 0
 * and 4-element aligned offsets). logits f32, or f16 (an LM head's output
 * under fp16 autocast; the same alignment, not in place). */
gboolean hn_op_cross_entropy_grad (HnCmd *cmd, HnTensor *loss, HnTensor *dlogits, HnTensor *logits, HnTensor *targets,
                                   HnTensor *row_scale, gint32 ignore_index, GError **error);

/* RoPE backward: the rotation by the opposite angle, i.e. hn_op_rope with
 * negated positions (neg_positions i32 = -positions). */
gboolean hn_op_rope_back (HnCmd *cmd, HnTensor *dx, HnTensor *dy, HnTensor *neg_positions, HnTensor *inv_freq,
                          int rot_dims, HnRopeStyle style, float attn_scale, GError **error);

/* Attention backward for a full (non-cached) K/V, f32: q/dq/dout [B, T, H, D|Dv],
 * k/dk [B, S, KVH, D], v/dv [B, S, KVH, Dv] (3-D without B). stats is f32
 * scratch of 2·B·T·H elements. Honours scale, softcap, causal, pos0,
 * window and alibi_slopes; a mask fails with HN_ERROR_UNSUPPORTED. */
gboolean hn_op_attention_back (HnCmd *cmd, HnTensor *dq, HnTensor *dk, HnTensor *dv, HnTensor *dout, HnTensor *q,
                               HnTensor *k, HnTensor *v, HnTensor *stats, const HnAttentionParams *params,
                               HnBackFlags flags, GError **error);

/* TRUE when the flash-attention backward (hn_op_attention_back_flash) and
 * the forward that saves the log-sum-exp (hn_op_attention with reduced_precision
 * and params->lse) run on this context for these shapes: VK_NV_cooperative_matrix2
 * (tensor cores), D = Dv = 64 or 128, a full K/V (n_kv 0 or n_ctx), causal or
 * not, sliding window, GQA; no soft-cap, ALiBi, mask, sinks or device pos0;
 * HN_NO_FLASH_ATTN unset. Otherwise the exact kernels are the path. */
gboolean hn_attention_flash_ok (HnVkContext *ctx, gint64 D, gint64 Dv, const HnAttentionParams *params);

/* Attention backward on the tensor cores (FlashAttention-2: P recomputed
 * from q, k and the forward's log-sum-exp; f16 operands, f32 accumulation;
 * fully masked blocks skipped). Tensors as hn_op_attention_back, plus out
 * (the forward's output, [B, T, H, D]) and lse (f32 [B·T·H], written by the
 * forward with params->lse); stats is f32 scratch of 2·B·T·H elements. Only
 * where hn_attention_flash_ok() holds (else HN_ERROR_UNSUPPORTED).
 * Tolerance: the products see q, k, v, P and dS rounded to f16 (dO scaled by
 * a power of two first so that it does not underflow), as fp16 autocast
 * does; relative errors of ~1e-3 against the exact f32 backward. */
gboolean hn_op_attention_back_flash (HnCmd *cmd, HnTensor *dq, HnTensor *dk, HnTensor *dv, HnTensor *dout,
                                     HnTensor *q, HnTensor *k, HnTensor *v, HnTensor *out, HnTensor *lse,
                                     HnTensor *stats, const HnAttentionParams *params, HnBackFlags flags,
                                     GError **error);

/* The rank-r expansion of a LoRA adapter, exact f32: c[M, N] (+= with
 * accumulate) alpha · u·W with u [M, r] and W(k, n) = w[n, k] when w_trans
 * (w [N, r]: the forward's y += u·Bᵀ), else w[k, n] (w [r, N]: the
 * backward's dx += du·A); 1 <= r <= 32, rows contiguous (lora_expand.comp,
 * memory-bound on c, where the tiled matmul kernels would run a K of r).
 * Under fp16 autocast (hn_cmd_set_autocast) these LoRA ops round as
 * hn_op_bmm does there: operands to f16, each alpha·product to f16 before
 * it joins c, f32 sums. */
gboolean hn_op_lora_expand (HnCmd *cmd, HnTensor *c, HnTensor *u, HnTensor *w, gboolean w_trans, float alpha,
                            gboolean accumulate, GError **error);
/* hn_op_lora_expand for n (1..3) adapters into one c (c (+)= alpha · Σ_j
 * u_j·W_j, one rank): c read and written once (the q, k and v adapters'
 * dx); the same bits as n accumulating calls. */
gboolean hn_op_lora_expand_n (HnCmd *cmd, int n, HnTensor *c, HnTensor **u, HnTensor **w, gboolean w_trans,
                              float alpha, gboolean accumulate, GError **error);

/* A LoRA adapter's down-projections and weight gradients, exact f32, on
 * kernels that read the long operand once (lora_rows.comp, lora_cols.comp):
 * rows: c[M, r] (+)= alpha · x[M, K]·W with W(k, s) = w[s, k] (w_trans, w
 * [r, K]: u = s·x·Aᵀ) or w[k, s] (w [K, r]: du = s·dy·B); cols: C(l, s) (+)=
 * alpha · Σ_k x[k, l]·w[k, s] with x [K, L], w [K, r], C = c[l, s] (c [L, r]:
 * dB += dyᵀ·u) or c[s, l] (c_trans, c [r, L]: dA += duᵀ·x), its partial sums
 * in the recorder's scratch. Where hn_op_lora_down_available (subgroup
 * arithmetic, 1 <= r <= 16); rows contiguous. */
gboolean hn_op_lora_down_available (HnCmd *cmd, gint64 r);
gboolean hn_op_lora_rows (HnCmd *cmd, HnTensor *c, HnTensor *x, HnTensor *w, gboolean w_trans, float alpha,
                          gboolean accumulate, GError **error);
gboolean hn_op_lora_cols (HnCmd *cmd, HnTensor *c, HnTensor *x, HnTensor *w, gboolean c_trans, float alpha,
                          gboolean accumulate, GError **error);
/* hn_op_lora_rows for n (1..3) adapters of one input x (c[j] (+)= alpha ·
 * x·W_j, one rank): x read once for all (the q, k and v down-projections);
 * the same sums as n calls. */
/* hn_op_lora_cols for n (1..3) adapters of one x (C_j (+)= alpha · Σ_k
 * x[k, l]·w_j[k, s], one rank): x read once for all where n·r <= 32 (the
 * q, k and v adapters' dA), else one call each; the same sums as n calls. */
gboolean hn_op_lora_cols_n (HnCmd *cmd, int n, HnTensor **c, HnTensor *x, HnTensor **w, gboolean c_trans, float alpha,
                            gboolean accumulate, GError **error);
gboolean hn_op_lora_rows_n (HnCmd *cmd, int n, HnTensor **c, HnTensor *x, HnTensor **w, gboolean w_trans, float alpha,
                            gboolean accumulate, GError **error);

/* out (f16) = in (f32) rounded as fp16 autocast rounds (±Inf past the
 * range): the f16 copy of a matmul operand that the tensor cores read.
 * out must start at an even element. */
gboolean hn_op_cast_f16 (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error);

/* out (f16) = act(in) rounded as hn_op_cast_f16 rounds (an activation under
 * fp16 autocast written only as its f16 copy); in f32, or f16 (the f16 up
 * projection). out (and an f16 in) must start at an even element. */
gboolean hn_op_unary_f16 (HnCmd *cmd, HnTensor *out, HnTensor *in, HnActivation act, GError **error);

/* hn_op_adamw that also writes param16 (f16, param's element count, starting
 * at an even element) = the updated param rounded as hn_op_cast_f16 rounds:
 * the f16 weight copy fp16 autocast training keeps beside its f32 master. */
gboolean hn_op_adamw_f16 (HnCmd *cmd, HnTensor *param, HnTensor *param16, HnTensor *grad, HnTensor *m, HnTensor *v,
                          const HnAdamwScalars *s, float clip, GError **error);

/* hn_op_matmul_back under fp16 autocast from f16 operands: x16 (f16 [M, K],
 * the forward's input as the forward's matmul read it) and w16 (f16 [N, K]);
 * dy (f32 [M, N]) is rounded into dy16 (f16 scratch of M·N elements or more,
 * shared by dx's and dw's products) unless dy16 is NULL (then the kernel
 * reads the f32 dy itself: a very large dy, the logits'). db from the f32 dy.
 * dw_tmp: NULL or f32 scratch; when it holds N·K elements and dw's product
 * has too few output tiles to fill the GPU over a long K (a square weight's
 * gradient over thousands of tokens), dyᵀ·x is taken there in f32 first (the
 * kernel then splits K across workgroups) and added to dw rounded to f16 as
 * a whole, which is what autocast computes.
 * Needs the cooperative-matrix-2 kernel (HN_ERROR_UNSUPPORTED elsewhere). */
gboolean hn_op_matmul_back_f16 (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy, HnTensor *dy16,
                                HnTensor *x16, HnTensor *w16, HnTensor *dw_tmp, HnBackFlags flags, GError **error);
/* hn_op_matmul_back_f16 of a Linear whose output y = act_x (f32, or f16 as
 * fp16 training stores it) feeds an activation, dy being the gradient of
 * act(y): the Linear's own output
 * gradient dy·act'(act_x) (hn_op_unary_back's product, the same bits) is
 * formed in the pass that rounds it into dy16 and takes db, so it is never
 * stored in f32. Needs hn_op_matmul_back_f16_act_ok (HN_ACT_BACK_FUSED=0:
 * never ok, the two passes apart). */
gboolean hn_op_matmul_back_f16_act_ok (HnTensor *dy, HnTensor *act_x, HnTensor *dy16);
gboolean hn_op_matmul_back_f16_act (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *db, HnTensor *dy,
                                    HnTensor *act_x, HnActivation act, HnTensor *dy16, HnTensor *x16, HnTensor *w16,
                                    HnTensor *dw_tmp, HnBackFlags flags, GError **error);

/* y (f32) += x (f32, y's element count) rounded to f16 as hn_op_cast_f16
 * rounds: a product taken in f32 that fp16 autocast computes in f16, added
 * to its f32 gradient. */
gboolean hn_op_add_rounded_f16 (HnCmd *cmd, HnTensor *y, HnTensor *x, GError **error);

/* out[:, c0 : c0 + cols] = in (f32 [rows, cols]) rounded as hn_op_cast_f16
 * rounds, out an f16 [rows, ld] matrix (cols, c0, ld and out's first element
 * even): several matmul operands side by side in one. */
gboolean hn_op_cast_f16_cols (HnCmd *cmd, HnTensor *out, gint64 c0, HnTensor *in, GError **error);
/* hn_op_cast_f16_cols under fp16 autocast that also adds in's column sums to
 * db (f32, in's column count) as hn_op_bias_back does there: the same bits
 * from one read of in (a projection's f16 dy copy and its bias gradient). */
gboolean hn_op_cast_f16_cols_bias (HnCmd *cmd, HnTensor *out, gint64 c0, HnTensor *in, HnTensor *db, GError **error);

/* One AdamW update of param (f32, same element count as grad/m/v, any
 * shape); the gradient is multiplied by clip first. */
gboolean hn_op_adamw (HnCmd *cmd, HnTensor *param, HnTensor *grad, HnTensor *m, HnTensor *v,
                      const HnAdamwScalars *s, float clip, GError **error);

/* hn_op_adamw (param16 NULL) or hn_op_adamw_f16 for a recording replayed
 * once per step (hn_cmd_replay): what changes between steps, the clip
 * factor, lr_wd, step_size and bc2_sqrt, is read when the recording runs
 * from scalars' elements 4·index .. 4·index + 3 (hn_adamw_replay_values
 * writes them); s gives the rest (β1, β2, eps). */
gboolean hn_op_adamw_replayable (HnCmd *cmd, HnTensor *param, HnTensor *param16, HnTensor *grad, HnTensor *m,
                                 HnTensor *v, const HnAdamwScalars *s, HnTensor *scalars, guint index,
                                 GError **error);
void hn_adamw_replay_values (float out[4], const HnAdamwScalars *s, float clip);

/* One torch.optim.SGD update; buf (momentum) may be NULL when momentum is 0. */
gboolean hn_op_sgd (HnCmd *cmd, HnTensor *param, HnTensor *grad, HnTensor *buf, float lr, float momentum,
                    float weight_decay, gboolean first, float clip, GError **error);

/* Partial sums of squares of x into out[out_off, out_off + n_partials):
 * the host adds them in double for the global gradient norm. */
guint hn_sumsq_n_partials (gint64 n);
gboolean hn_op_sumsq_partials (HnCmd *cmd, HnTensor *out, guint out_off, HnTensor *x, GError **error);

G_END_DECLS
