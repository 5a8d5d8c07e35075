/* Helpers shared by the op files. */
#pragma once
#include "tensor/hn-op-kit.h"

/* ops-quant.c: whether x·Wᵀ with x of `rows` rows goes through W's f16 form
 * (W in ggml blocks on the tensor cores, see f16_form there): the caller may
 * then hand it an f16 x, as to a 16-bit weight. */
gboolean hn_quant_f16_form_taken (HnCmd *cmd, HnTensor *w, gint64 rows);
/* W's f16 form in the next slot of the recorder's weight scratch ring. */
HnTensor *hn_quant_f16_form (HnCmd *cmd, HnTensor *w, GError **error);
/* ops-quant.c: C[M, N] (=, or += with accumulate) alpha·A·B (+ bias) with B
 * the quantized W: B(k, n) = W[n, k] when w_row_is_n, else W[k, n]; A(m, k)
 * at a_off + m·a_sm + k·a_sk; C rows of N. flags: HN_MATMUL_EXACT keeps the f32
 * kernel (never the tensor-core one). */
gboolean hn_op_matmul_quant_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M,
                                      guint32 N, guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n,
                                      float alpha, gboolean accumulate, HnMatmulFlags flags, GError **error);

/* ops.c: one f16 copy by to_f16.comp, recorded under label: the n elements of
 * t into bytes [byte0, byte0 + bytes) of s (mode 0 clamps to ±65504, 1 rounds
 * as autocast). */
gboolean hn_record_to_f16 (HnCmd *cmd, const char *label, HnTensor *t, HnVkBuffer *s, guint64 byte0, guint64 bytes,
                           guint32 mode, GError **error);
/* ops.c: to_f16.comp's VEC for an input at element x_off and an output at
 * word y_word_off: four elements per invocation where both allow it
 * (HN_TO_F16_VEC=0: two, as before; the same bits). */
guint32 hn_to_f16_vec (guint32 x_off, guint32 y_word_off);

/* ops.c: 1 where the norm kernels (rmsnorm, layernorm, norm_back) take their row sums
 * by subgroup reductions (their SGRED): HN_NORM_SG_REDUCE=1 on a device with
 * subgroup arithmetic and subgroups of at least 4 (opt-in until measured). */
guint32 hn_op_norm_sg_reduce (HnCmd *cmd);

/* A tile from the environment (var=value) that the device cannot run: a
 * warning, once per *once, saying the default tile runs instead. */
void hn_op_warn_tile_once (gsize *once, const char *var, const char *value);

/* ops.c: a "BM,BN,BK" tile override for the cooperative-matrix-2 kernels read
 * from the environment variable name: TRUE and the three set when it holds
 * multiples of 16 within 256 x 256 x 128, else FALSE and nothing changed. */
gboolean hn_cm2_tile_env (const char *name, guint32 *bm, guint32 *bn, guint32 *bk);

/* ops-gguf.c: the kernels of a weight in ggml blocks (HN_DTYPE_GGML_*).
 * matvec: y[M, N] = x·Wᵀ (+ bias), or act(x·Wᵀ + bias) · (x·Uᵀ + bias_u)
 * with u, optionally RMS-normalising x on the fly (norm), accumulate: y +=
 * alpha · that; M <= 8 rows (hn_op_matvec_available). matmul: as
 * hn_op_matmul_quant_dispatch. Shapes are checked by the callers. */
gboolean hn_op_matvec_gguf_dispatch (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *u,
                                     HnTensor *bias_u, guint32 act, gboolean accumulate, float alpha,
                                     const HnMatvecNorm *norm, GError **error);
/* out (f16, as many elements, from a word) = W dequantized: W's f16 form
 * (hn_op_quant_to_f16 comes here for a weight in ggml blocks). */
gboolean hn_op_gguf_to_f16 (HnCmd *cmd, HnTensor *out, HnTensor *w, GError **error);
/* out[n, :] = table[ids[n], :] dequantized (shapes checked by hn_op_embedding). */
gboolean hn_op_embedding_gguf_dispatch (HnCmd *cmd, HnTensor *out, HnTensor *table, HnTensor *ids, GError **error);
gboolean hn_op_matmul_gguf_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M,
                                     guint32 N, guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n,
                                     float alpha, gboolean accumulate, HnMatmulFlags flags, GError **error);
