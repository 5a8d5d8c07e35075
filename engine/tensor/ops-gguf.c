/* Kernels of weights kept in ggml's quantized blocks (a GGUF model loaded
 * without dequantizing, tensor/quant.h HN_DTYPE_GGML_*): the matrix-vector
 * kernel of decode (shaders/matvec_gguf.comp, with the fused RMSNorm, gated
 * MLP and residual add of matvec.comp), the matmul of prefill and training
 * (shaders/matmul_gguf_cm2.comp on tensor cores where the device has
 * VK_NV_cooperative_matrix2, shaders/matmul_gguf.comp elsewhere, f32) and the
 * embedding lookup
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

/* shared memory of matvec_gguf_q8.comp for K: codes, largest |x| and sums of each 4, scales,
 * the norm's partials */
static guint64
q8_shared_bytes (gint64 K)
{
  return 3 * (guint64) K + (guint64) K / 8 + 64 * 4 + 4;
}

gboolean
hn_gguf_matvec_q8 (HnVkContext *ctx, HnDType dt, gint64 M, gint64 K)
{
  const char *env = g_getenv ("HN_MATVEC_GGUF_Q8");
  return M == 1 && (dt == HN_DTYPE_GGML_Q4_K || dt == HN_DTYPE_GGML_Q6_K) && K % 256 == 0 &&
         q8_shared_bytes (K) <= hn_vk_context_get_device_info (ctx)->max_shared_memory && !(env && env[0] == '0');
}

/* One row of x through the integer-dot kernel (hn_gguf_matvec_q8). Sixteen
 * subgroups a workgroup (each workgroup quantizes x again: more rows share
 * that), two rows a subgroup (of W and of U each when gated): on the H200
 * (8B Q4_K_M decode) 227.6 tok/s, against 171.8 with 8 x 2, 193.0 with
 * 16 x 1 and 112.4 with 4 x 2 (build-aux/perf/h200-2026-12-02f-*).
 * HN_MATVEC_GGUF_TUNE="subgroups,rows" as for matvec_gguf. */
static gboolean
dispatch_q8 (HnCmd *cmd, HnTensor *w, HnTensor *u, gint64 N, gint64 K, const HnVkBinding bd[7], const void *pc,
             gsize pc_size, gboolean norm, gboolean xvec, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
  guint32 sg = MIN (info->subgroup_size, 128), n_sg = MAX (1, MIN (16, info->max_workgroup_invocations / sg)), nr = 2;
  const char *tune = g_getenv ("HN_MATVEC_GGUF_TUNE");
  guint32 t[2] = { 0, 0 };
  if (tune && sscanf (tune, "%u,%u", &t[0], &t[1]) == 2 && t[0] >= 1 && t[0] * sg <= info->max_workgroup_invocations &&
      t[0] <= 64 && t[1] >= 1 && t[1] <= (u ? 2u : 4u))
    {
      n_sg = t[0];
      nr = t[1];
    }
  guint32 rows = n_sg * nr;
  guint32 spec[8] = { gg_code (w->dtype), n_sg * sg, n_sg, (guint32) K, u ? 1 : 0, norm ? 1 : 0, nr, xvec ? 1 : 0 };
  guint32 gx, gy;
  hn_grid (((guint64) N + rows - 1) / rows, &gx, &gy);
  hn_cmd_set_label (cmd, u ? "matvec_gguf_q8_glu" : "matvec_gguf_q8");
  gboolean ok = hn_cmd_dispatch (cmd, hn_vk_context_has_int_dot (ctx) ? "matvec_gguf_q8i" : "matvec_gguf_q8", spec,
                                 8, bd, 7, pc, pc_size, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
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
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
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
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : x, FALSE), hn_bind (y, TRUE),
                        hn_bind (u ? u : w, FALSE), hn_bind (bias_u ? bias_u : x, FALSE), hn_bind (g ? g : x, FALSE) };
  if (hn_gguf_matvec_q8 (ctx, w->dtype, M, K))
    return dispatch_q8 (cmd, w, u, N, K, bd, &pc, sizeof pc, norm != NULL, hn_eoff (x) % 4 == 0, error);
  /* Four subgroups a workgroup; each subgroup takes two rows of W at once
   * (their loads in flight together, x read once for both): two of a plain
   * matrix of 4096 rows or more, one row of W and U each when gated, one
   * row of the narrower plain matrices (k/v projections), which would
   * otherwise leave SMs idle. HN_MATVEC_GGUF_TUNE="subgroups,rows[,chunks]"
   * overrides (rows a subgroup: 1..4, 1..2 gated; chunks a lane takes at
   * once: 1 or 2; for tuning). */
  guint32 sg = MIN (info->subgroup_size, 128), n_sg = 4, nr = (!u && N >= 4096) ? 2 : 1, unr = 1;
  const char *tune = g_getenv ("HN_MATVEC_GGUF_TUNE");
  guint32 t[3] = { 0, 0, 1 };
  if (tune && sscanf (tune, "%u,%u,%u", &t[0], &t[1], &t[2]) >= 2 && t[0] >= 1 &&
      t[0] * sg <= info->max_workgroup_invocations && t[0] <= 64 && t[1] >= 1 && t[1] <= (u ? 2u : 4u) &&
      (t[2] == 1 || t[2] == 2))
    {
      n_sg = t[0];
      nr = t[1];
      unr = t[2];
    }
  guint32 rows = n_sg * nr;
  gboolean xvec = hn_eoff (x) % 4 == 0 && (!g || hn_eoff (g) % 4 == 0);
  /* HN_MATVEC_GGUF_QL=1: Q4_K and Q6_K through chunk_dot_ql's 16-byte loads and conversion-free
   * decode. Off by default: on the H200 (8B Q4_K_M, build-aux/perf/h200-2026-12-02e-gguf-*, in git history) it ran
   * 144.6 tok/s against the older layout's 155.2 (156.1 with HN_MATVEC_GGUF_TUNE=4,2,2). */
  const char *ql_env = g_getenv ("HN_MATVEC_GGUF_QL");
  gboolean ql = (w->dtype == HN_DTYPE_GGML_Q4_K || w->dtype == HN_DTYPE_GGML_Q6_K) && ql_env && ql_env[0] == '1';
  guint32 spec[10] = { gg_code (w->dtype), n_sg * sg, n_sg, xvec ? 1 : 0, M == 1 ? 1 : 8, u ? 1 : 0, norm ? 1 : 0,
                       nr, unr, ql ? 1 : 0 };
  guint32 gx, gy;
  hn_grid (((guint64) N + rows - 1) / rows, &gx, &gy);
  hn_cmd_set_label (cmd, u ? "matvec_gguf_glu" : "matvec_gguf");
  gboolean ok = hn_cmd_dispatch (cmd, "matvec_gguf", spec, 10, bd, 7, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_gguf_matmul_tensor_cores (HnVkContext *ctx, HnDType dt, gint64 M, gint64 w_cols, guint flags)
{
  return hn_dtype_is_ggml (dt) && hn_vk_context_has_coopmat2 (ctx, NULL) &&
         hn_vk_context_get_device_info (ctx)->storage16 && M > 8 &&
         w_cols % hn_ggml_block_size (hn_dtype_ggml_type (dt)) == 0 && !(flags & HN_MATMUL_EXACT) &&
         g_getenv ("HN_MATMUL_EXACT") == NULL;
}

/* The tensor-core kernel (matmul_gguf_cm2.comp): A to f16 first (to_f16.comp
 * into the recorder's scratch, clamped to ±65504), W decoded from its blocks
 * by the driver's tile loads. Tiles as matmul_quant_cm2's: 128x256 when such
 * tiles fill the GPU twice, 128x128 when they fill it once, else 64x64; BK 64.
 * HN_GGUF_CM2_TILE="BM,BN,BK" overrides (for tuning). */
static gboolean
dispatch_cm2 (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N, guint32 K,
              guint32 a_sm, guint32 a_sk, gboolean w_row_is_n, float alpha, gboolean accumulate, guint64 rb,
              GError **error)
{
  guint32 nt = 0;
  hn_vk_context_has_coopmat2 (hn_cmd_get_context (cmd), &nt);
  guint64 big = (guint64) ((M + 127) / 128) * ((N + 255) / 256), mid = (guint64) ((M + 127) / 128) * ((N + 127) / 128);
  guint32 bm = 64, bn = 64, bk = 64;
  if (big >= 256)
    bm = 128, bn = 256;
  else if (mid >= 128)
    bm = bn = 128;
  hn_cm2_tile_env ("HN_GGUF_CM2_TILE", &bm, &bn, &bk);
  guint64 a_bytes = (((guint64) a->n + 1) / 2 * 4 + 255) & ~(guint64) 255;
  HnVkBuffer *s = hn_cmd_scratch (cmd, a_bytes, error);
  if (!s || !hn_record_to_f16 (cmd, "to_f16", a, s, 0, a_bytes, 0, error))
    return FALSE;
  guint32 bs = hn_ggml_block_size (hn_dtype_ggml_type (w->dtype));
  struct {
    guint32 M, N, K;
    guint32 a_off, a_sm, a_sk;
    guint32 c_off, c_sm, bias_off;
    guint32 flags;
    float alpha;
    guint32 w_rows, w_cols, w_bpr, row_bytes;
  } pc = { M, N, K, 0, a_sm, a_sk, hn_eoff (c), N, bias ? hn_eoff (bias) : 0,
           (accumulate ? 1u : 0u) | (bias ? 2u : 0u), alpha,
           (guint32) w->shape[0], (guint32) w->shape[1], (guint32) (w->shape[1] / bs), (guint32) rb };
  /* The forward dequantizes B's tiles into shared memory (a block's scales
   * decoded once for 32 elements) when the tile fits; HN_GGUF_CM2_SHB=0
   * takes the per-element decode functions instead (for comparisons). */
  const char *shb_env = g_getenv ("HN_GGUF_CM2_SHB");
  gboolean shb = w_row_is_n && bk % 32 == 0 && (guint64) bk * bn * 2 <= 49152 && !(shb_env && shb_env[0] == '0');
  guint32 spec[8] = { gg_code (w->dtype), bm, bn, bk, nt, a_sk == 1 ? 0u : 1u, w_row_is_n ? 1u : 0u, shb ? 1u : 0u };
  HnVkBinding bd[4] = { { s, 0, a_bytes, FALSE }, hn_bind (w, FALSE), hn_bind (bias ? bias : a, FALSE),
                        hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, "matmul_gguf_cm2");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_gguf_cm2", spec, 8, bd, 4, &pc, sizeof pc, (N + bn - 1) / bn,
                                 (M + bm - 1) / bm, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_matmul_gguf_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N,
                            guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n, float alpha,
                            gboolean accumulate, HnMatmulFlags flags, GError **error)
{
  guint64 rb;
  if (!check_weight ("matmul", w, w->shape[1], &rb, error))
    return FALSE;
  if (hn_gguf_matmul_tensor_cores (hn_cmd_get_context (cmd), w->dtype, M, w->shape[1], flags) &&
      (a_sk == 1 || a_sm == 1))
    return dispatch_cm2 (cmd, c, a, w, bias, M, N, K, a_sm, a_sk, w_row_is_n, alpha, accumulate, rb, error);
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

/* Whether quant_to_f16 of dt takes gguf_to_f16_wide.comp (Q4_K, Q6_K and
 * Q8_0: Q4_K_M and Q8_0 files) rather than gguf_to_f16.comp; on the H200 the
 * latter ran 1.6 TB/s (issue 23). HN_GGUF_TO_F16_OLD=1 keeps the older kernel
 * for every type (comparisons; test-quant runs both). */
static gboolean
gguf_to_f16_wide (HnDType dt)
{
  const char *old = g_getenv ("HN_GGUF_TO_F16_OLD");
  return (dt == HN_DTYPE_GGML_Q4_K || dt == HN_DTYPE_GGML_Q6_K || dt == HN_DTYPE_GGML_Q8_0) &&
         !(old && old[0] != '\0' && old[0] != '0');
}

gboolean
hn_op_gguf_to_f16 (HnCmd *cmd, HnTensor *out, HnTensor *w, GError **error)
{
  guint64 rb;
  if (!check_weight ("quant_to_f16", w, w->shape[1], &rb, error))
    return FALSE;
  guint64 units = (guint64) w->n / 32;
  if (out->n != w->n || out->offset % 4 != 0 || out->offset / 4 + units * 16 > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "quant_to_f16: %s must have as many elements as %s and start on a word", out->name, w->name);
      return FALSE;
    }
  HnVkBinding bd[2] = { hn_bind (w, FALSE), hn_bind (out, TRUE) };
  guint32 gx, gy;
  if (units == 0)
    return TRUE;
  if (gguf_to_f16_wide (w->dtype))
    {
      /* gguf_to_f16_wide.comp: items of 8 (Q8_0) or 16 (Q4_K) quant bytes, or
       * of 8 bytes each of ql, ql + 32 and qh (Q6_K), in adjacent invocations;
       * ITEMS of them an invocation, WG apart. HN_GGUF_TO_F16_TUNE="wg,items"
       * overrides the 256 x 4 (for tuning). */
      const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
      guint32 per_block = w->dtype == HN_DTYPE_GGML_Q4_K ? 16 : w->dtype == HN_DTYPE_GGML_Q6_K ? 8 : 4;
      guint32 bs = hn_ggml_block_size (hn_dtype_ggml_type (w->dtype));
      guint32 wg = MIN (256, info->max_workgroup_invocations), items = 4, t[2];
      const char *tune = g_getenv ("HN_GGUF_TO_F16_TUNE");
      if (tune && sscanf (tune, "%u,%u", &t[0], &t[1]) == 2 && t[0] >= 1 && t[0] <= info->max_workgroup_invocations &&
          t[1] >= 1 && t[1] <= 16)
        {
          wg = t[0];
          items = t[1];
        }
      guint64 n_items = (guint64) w->n / bs * per_block;
      struct { guint32 items, y_off; } pc = { (guint32) n_items, (guint32) (out->offset / 4) };
      guint32 spec[4] = { gg_code (w->dtype), wg, items, out->offset % 16 == 0 ? 1u : 0u };
      hn_grid ((n_items + (guint64) wg * items - 1) / ((guint64) wg * items), &gx, &gy);
      hn_cmd_set_label (cmd, "gguf_to_f16_wide");
      gboolean ok = hn_cmd_dispatch (cmd, "gguf_to_f16_wide", spec, 4, bd, 2, &pc, sizeof pc, gx, gy, 1, error);
      hn_cmd_set_label (cmd, NULL);
      return ok;
    }
  struct { guint32 units, upr, row_bytes, y_off; } pc = { (guint32) units, (guint32) (w->shape[1] / 32), (guint32) rb,
                                                          (guint32) (out->offset / 4) };
  guint32 spec[1] = { gg_code (w->dtype) };
  hn_grid ((units + 255) / 256, &gx, &gy);
  hn_cmd_set_label (cmd, "gguf_to_f16");
  gboolean ok = hn_cmd_dispatch (cmd, "gguf_to_f16", spec, 1, bd, 2, &pc, sizeof pc, gx, gy, 1, error);
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
