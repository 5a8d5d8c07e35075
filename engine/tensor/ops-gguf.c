/* Kernels of weights kept in ggml's quantized blocks (a GGUF model loaded
 * without dequantizing, tensor/quant.h HN_DTYPE_GGML_*): the matrix-vector
 * kernel of decode (shaders/matvec_gguf.comp, with the fused RMSNorm, gated
 * MLP and residual add of matvec.comp) and the tiled matmul of prefill and
 * training (shaders/matmul_gguf.comp) and the embedding lookup
 * (shaders/embedding_gguf.comp). hn_op_matmul, hn_op_bmm, hn_op_embedding
 * and the hn_op_matvec_* ops come here for such a weight. */
#include "ops-private.h"
#include "tensor/ggml-quants.h"
#include "tensor/quant.h"

#include <stdio.h>

/* The shaders' GG_* code of a ggml dtype (shaders/gguf_dequant.glsl). */
static guint32
gg_code (HnDType dt)
{
  return (guint32) (dt - HN_DTYPE_GGML_Q4_0);
}

static gboolean
check_weight (const char *op, HnTensor *w, gint64 K, guint64 *row_bytes, GError **error)
{
  if (w->offset != 0 || w->ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: quantized weight %s must be a whole 2-D tensor", op,
                   w->name);
      return FALSE;
    }
  HnGgmlType g = hn_dtype_ggml_type (w->dtype);
  if (K % hn_ggml_block_size (g) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: weight %s (%s) has rows of %" G_GINT64_FORMAT
                   " elements, not a multiple of its block of %u", op, w->name, hn_dtype_name (w->dtype), K,
                   hn_ggml_block_size (g));
      return FALSE;
    }
  *row_bytes = hn_ggml_row_size (g, K);
  if (hn_tensor_nbytes (w) > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: quantized weight %s is over 4 GiB", op, w->name);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_matvec_gguf_dispatch (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *u,
                            HnTensor *bias_u, guint32 act, gboolean accumulate, float alpha, const HnMatvecNorm *norm,
                            GError **error)
{
  const char *op = u ? "matvec_glu" : "matvec";
  guint64 rb;
  gint64 N = w->shape[0], K = w->shape[1], M = hn_tensor_rows (x);
  if (!check_weight (op, w, K, &rb, error))
    return FALSE;
  if (u)
    {
      guint64 rbu;
      if (!check_weight (op, u, K, &rbu, error))
        return FALSE;
      if (u->dtype != w->dtype)
        return hn_op_check_dtype (op, "W_up", u, w->dtype, error);
    }
  HnTensor *g = norm ? norm->weight : NULL;
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  struct {
    guint32 M, N, K, x_off, row_bytes, bias_off, y_off, flags, bu_off, act;
    float alpha;
    guint32 g_off;
    float eps;
    guint32 nflags;
  } pc = {
    (guint32) M, (guint32) N, (guint32) K, hn_eoff (x), (guint32) rb, bias ? hn_eoff (bias) : 0, hn_eoff (y),
    (bias ? 1u : 0u) | (accumulate ? 2u : 0u) | (bias_u ? 4u : 0u), bias_u ? hn_eoff (bias_u) : 0, act, alpha,
    g ? hn_eoff (g) : 0, norm ? norm->eps : 0.0f, (norm && norm->plus_one ? 1u : 0u) | (g ? 2u : 0u) };
  /* Four subgroups a workgroup, one output row each at a time, 8 rows a
   * workgroup. HN_MATVEC_GGUF_TUNE="subgroups,rows" overrides (for tuning). */
  guint32 sg = MIN (info->subgroup_size, 128), n_sg = 4, rows = 8;
  const char *tune = g_getenv ("HN_MATVEC_GGUF_TUNE");
  guint32 t[2];
  if (tune && sscanf (tune, "%u,%u", &t[0], &t[1]) == 2 && t[0] >= 1 && t[0] * sg <= info->max_workgroup_invocations &&
      t[1] >= 1 && t[1] <= 64)
    {
      n_sg = t[0];
      rows = t[1];
    }
  gboolean xvec = hn_eoff (x) % 4 == 0;
  guint32 spec[7] = { gg_code (w->dtype), n_sg * sg, rows, xvec ? 1 : 0, M == 1 ? 1 : 8, u ? 1 : 0, norm ? 1 : 0 };
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : x, FALSE), hn_bind (y, TRUE),
                        hn_bind (u ? u : w, FALSE), hn_bind (bias_u ? bias_u : x, FALSE), hn_bind (g ? g : x, FALSE) };
  guint32 gx, gy;
  hn_grid (((guint64) N + rows - 1) / rows, &gx, &gy);
  hn_cmd_set_label (cmd, u ? "matvec_gguf_glu" : "matvec_gguf");
  gboolean ok = hn_cmd_dispatch (cmd, "matvec_gguf", spec, 7, bd, 7, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_matmul_gguf_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N,
                            guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n, float alpha,
                            gboolean accumulate, GError **error)
{
  guint64 rb;
  if (!check_weight ("matmul", w, w->shape[1], &rb, error))
    return FALSE;
  struct {
    guint32 M, N, K;
    guint32 a_off, a_sm, a_sk;
    guint32 c_off, c_sm, bias_off;
    guint32 flags;
    float alpha;
    guint32 w_rows, w_cols, w_row_is_n;
    guint32 row_bytes;
  } pc = { M, N, K, hn_eoff (a), a_sm, a_sk, hn_eoff (c), N, bias ? hn_eoff (bias) : 0,
           (accumulate ? 1u : 0u) | (bias ? 2u : 0u), alpha,
           (guint32) w->shape[0], (guint32) w->shape[1], w_row_is_n ? 1u : 0u, (guint32) rb };
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  guint32 bm = 64, bn = 64; /* 256 invocations, 8 KiB of shared memory */
  if (info->max_workgroup_invocations < 256)
    bm = bn = 32;
  guint32 spec[4] = { gg_code (w->dtype), bm, bn, (bm / 4) * (bn / 4) };
  HnVkBinding bd[4] = { hn_bind (a, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, "matmul_gguf");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_gguf", spec, 4, bd, 4, &pc, sizeof pc, (N + bn - 1) / bn,
                                 (M + bm - 1) / bm, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_embedding_gguf_dispatch (HnCmd *cmd, HnTensor *out, HnTensor *table, HnTensor *ids, GError **error)
{
  guint64 rb;
  if (!check_weight ("embedding", table, table->shape[1], &rb, error))
    return FALSE;
  struct { guint32 n, D, V, row_bytes, i_off, o_off; } pc = {
    (guint32) out->n, (guint32) table->shape[1], (guint32) table->shape[0], (guint32) rb, hn_eoff (ids), hn_eoff (out) };
  guint32 spec[1] = { gg_code (table->dtype) };
  HnVkBinding bd[3] = { hn_bind (table, FALSE), hn_bind (ids, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "embedding_gguf", spec, 1, bd, 3, &pc, sizeof pc, (guint64) out->n, error);
}
