/* Matmuls with a quantized frozen weight (tensor/quant.h): the kernel
 * dequantizes W tile by tile. hn_op_matmul and hn_op_bmm come here when W / B
 * has a quantized dtype. On a VK_NV_cooperative_matrix2 device that is
 * shaders/matmul_quant_cm2.comp (tensor cores, W decoded as the driver loads
 * each tile, f16 operands and f32 accumulation, as the bf16 weights' path
 * does); elsewhere, for M <= 8, with HN_MATMUL_EXACT, or when a row of W is
 * not whole blocks, shaders/matmul_quant.comp (f32 throughout). With the
 * tensor cores and at least 64 rows of A the product goes through W's f16
 * form instead (see f16_form): quant_to_f16.comp, then matmul_cm2. */
#include "ops-private.h"
#include <stdio.h>

#include "tensor/quant.h"

typedef struct {
  guint32 M, N, K;
  guint32 a_off, a_sm, a_sk;
  guint32 c_off, c_sm, bias_off;
  guint32 flags;
  float alpha;
  guint32 w_rows, w_cols, w_row_is_n;
  guint32 scale_w, scale2_w, offset_w, table_w;
} QuantPush;

typedef struct {
  guint32 M, N, K;
  guint32 a_off, a_sm, a_sk;
  guint32 c_off, c_sm, bias_off;
  guint32 flags;
  float alpha;
  guint32 w_rows, w_cols, w_bpr;
  guint32 scale_w, scale2_w, offset_w, table_w;
} QuantCm2Push;

/* Tiles as matmul_cm2's (llama.cpp's rule): 128x256 when such tiles fill the
 * GPU twice, 128x128 when they fill it once, else 64x64; BK 64 (one NF4 block
 * of a row). HN_QCM2_TILE="BM,BN,BK" overrides. A becomes f16 first
 * (to_f16.comp into the recorder's scratch) unless it is above 128 Mi
 * elements (or HN_QCM2_A_F32 is set), when a decode function converts it in
 * the kernel. */
gboolean
hn_quant_matmul_tensor_cores (HnVkContext *ctx, HnDType dt, gint64 M, gint64 w_cols, guint flags)
{
  if (hn_dtype_is_ggml (dt))
    return hn_gguf_matmul_tensor_cores (ctx, dt, M, w_cols, flags);
  gint64 qb = dt == HN_DTYPE_Q8 ? 4 : HN_NF4_BLOCK;
  return hn_dtype_is_quant (dt) && !hn_dtype_is_ggml (dt) && hn_vk_context_has_coopmat2 (ctx, NULL) && M > 8 && w_cols % qb == 0 &&
         !(flags & HN_MATMUL_EXACT) && g_getenv ("HN_MATMUL_EXACT") == NULL;
}

static gboolean
try_dispatch_cm2 (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, const QuantPush *q,
                  guint32 qdt, HnMatmulFlags flags, gboolean *done, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  guint32 nt = 0;
  *done = FALSE;
  guint32 qb = qdt == 2 ? 4 : HN_NF4_BLOCK;
  if (!hn_quant_matmul_tensor_cores (ctx, w->dtype, q->M, q->w_cols, flags) || (q->a_sk != 1 && q->a_sm != 1))
    return TRUE;
  hn_vk_context_has_coopmat2 (ctx, &nt);
  guint32 a_t = q->a_sk == 1 ? 0 : 1;
  guint64 big = (guint64) ((q->M + 127) / 128) * ((q->N + 255) / 256);
  guint64 mid = (guint64) ((q->M + 127) / 128) * ((q->N + 127) / 128);
  guint32 bm = 64, bn = 64, bk = 64;
  if (big >= 256)
    bm = 128, bn = 256;
  else if (mid >= 128)
    bm = bn = 128;
  hn_cm2_tile_env ("HN_QCM2_TILE", &bm, &bn, &bk);
  gboolean a_f16 = a->n <= ((gint64) 128 << 20) && g_getenv ("HN_QCM2_A_F32") == NULL; /* the variable: tests */
  QuantCm2Push pc = { q->M, q->N, q->K, q->a_off, q->a_sm, q->a_sk, q->c_off, q->c_sm, q->bias_off, q->flags,
                      q->alpha, q->w_rows, q->w_cols, q->w_cols / qb, q->scale_w, q->scale2_w, q->offset_w,
                      q->table_w };
  HnVkBinding bd[4] = { hn_bind (a, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE) };
  if (a_f16)
    {
      guint64 bytes = ((guint64) a->n + 1) / 2 * 4;
      HnVkBuffer *s = hn_cmd_scratch (cmd, bytes, error);
      if (!s || !hn_record_to_f16 (cmd, "to_f16", a, s, 0, bytes, 0, error))
        return FALSE;
      pc.a_off -= hn_eoff (a);
      bd[0] = (HnVkBinding) { s, 0, bytes, FALSE };
    }
  guint32 spec[8] = { qdt, bm, bn, bk, nt, a_t, q->w_row_is_n, a_f16 ? 1u : 0u };
  *done = TRUE;
  hn_cmd_set_label (cmd, "matmul_quant_cm2");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_quant_cm2", spec, 8, bd, 4, &pc, sizeof pc, (q->N + bn - 1) / bn,
                                 (q->M + bm - 1) / bm, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

typedef struct {
  guint32 n8, cols, y_off, scale_w, scale2_w, offset_w, table_w;
} ToF16Push;

gboolean
hn_op_quant_to_f16 (HnCmd *cmd, HnTensor *out, HnTensor *w, GError **error)
{
  const char *op = "quant_to_f16";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, w, error) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error))
    return FALSE;
  if (hn_dtype_is_ggml (w->dtype))
    return hn_op_gguf_to_f16 (cmd, out, w, error);
  if (!hn_dtype_is_quant (w->dtype) || w->ndim != 2 || w->offset != 0 ||
      out->n != w->n || w->n % 8 != 0 || out->offset % 4 != 0 || (w->dtype != HN_DTYPE_Q8 && w->shape[1] % HN_NF4_BLOCK))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "quant_to_f16: %s must be a whole NF4 or int8 weight of whole blocks a row, a multiple of 8 "
                   "elements, as many as %s has",
                   w->name, out->name);
      return FALSE;
    }
  HnQuantLayout L;
  hn_quant_layout (w->dtype, w->shape[0], w->shape[1], &L);
  if (L.table + 256 > G_MAXUINT32 || out->offset / 4 + (guint64) w->n / 2 > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "quant_to_f16: weight %s is too large", w->name);
      return FALSE;
    }
  ToF16Push pc = { (guint32) (w->n / 8), (guint32) w->shape[1], (guint32) (out->offset / 4), (guint32) L.scale,
                   (guint32) L.scale2, (guint32) L.offset, (guint32) L.table };
  guint32 qdt = w->dtype == HN_DTYPE_NF4 ? 0 : w->dtype == HN_DTYPE_NF4_DQ ? 1 : 2;
  HnVkBinding bd[2] = { hn_bind (w, FALSE), hn_bind (out, TRUE) };
  guint32 gx, gy;
  hn_grid (((guint64) pc.n8 + 255) / 256, &gx, &gy);
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_cmd_dispatch (cmd, op, &qdt, 1, bd, 2, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

/* The product through W's f16 form: W dequantized whole (quant_to_f16.comp)
 * into the recorder's weight scratch, then the 16-bit weights' matmul
 * (matmul_cm2.comp on the tensor cores, A made f16 there). The same f16
 * operands and f32 accumulation as matmul_quant_cm2.comp, whose decode
 * function dequantizes inside the tile loads; this runs at the speed of a
 * bf16 weight (llama-1b QLoRA 4 x 512: the decode kernel's step was 4x the
 * bf16 LoRA step). It is bitsandbytes' own way (dequantize_4bit into a
 * temporary, then the GEMM): one matrix at a time is in 16 bits, never the
 * model; the scratch holds the largest (Llama-3-8B: 14336 x 4096, 117 MB)
 * and the hazard tracking orders its reuse. Taken for M >= 64 rows of A
 * (below that the decode kernel's extra work is smaller than the copy) and
 * W up to 128 Mi elements (larger ones keep the decode kernel, so the
 * scratch never adds more than 256 MiB). HN_QUANT_F16=0 keeps the decode
 * kernel always (a comparison aid; test-quant runs both); HN_QUANT_F16=1
 * takes the f16 form for any M on any device (tests: elsewhere the 16-bit
 * weights' kernel is the scalar one, f32 math on W's f16 values). Never
 * with HN_MATMUL_EXACT. */
static gboolean
f16_form (HnCmd *cmd, HnTensor *w, guint32 M, HnMatmulFlags flags)
{
  const char *e = g_getenv ("HN_QUANT_F16");
  if ((e && e[0] == '0') || (flags & HN_MATMUL_EXACT) || g_getenv ("HN_MATMUL_EXACT") != NULL || w->n % 8 != 0 ||
      w->n > ((gint64) 128 << 20) ||
      (w->dtype != HN_DTYPE_Q8 && !hn_dtype_is_ggml (w->dtype) && w->shape[1] % HN_NF4_BLOCK != 0))
    return FALSE;
  if (e && e[0] == '1')
    return TRUE;
  /* ggml blocks too: on the H200 (8B Q4_K_M prefill 512) the f16 form ran
   * 5.06k tok/s with the first gguf_to_f16, matmul_gguf_cm2.comp's decode
   * inside the tile loads 2.91k (build-aux/perf/h200-2026-12-02f-*) */
  return M >= 64 && hn_quant_matmul_tensor_cores (hn_cmd_get_context (cmd), w->dtype, M, w->shape[1], flags);
}

gboolean
hn_quant_f16_form_taken (HnCmd *cmd, HnTensor *w, gint64 rows)
{
  return w && hn_dtype_is_ggml (w->dtype) && rows > 0 && rows <= G_MAXUINT32 &&
         f16_form (cmd, w, (guint32) rows, HN_MATMUL_DEFAULT);
}

HnTensor *
hn_quant_f16_form (HnCmd *cmd, HnTensor *w, GError **error)
{
  HnVkBuffer *s = hn_cmd_scratch_weight (cmd, (guint64) w->n * 2, error);
  if (!s)
    return NULL;
  g_autofree char *name = g_strconcat (w->name, " (f16 form)", NULL);
  HnTensor *w16 = hn_tensor_new_in_buffer (hn_cmd_get_context (cmd), s, 0, name, HN_DTYPE_F16, 2, w->shape, error);
  if (w16 && !hn_op_quant_to_f16 (cmd, w16, w, error))
    g_clear_pointer (&w16, hn_tensor_unref);
  return w16;
}

static gboolean
dispatch_f16_form (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N,
                   guint32 K, guint32 a_sk, gboolean w_row_is_n, float alpha, gboolean accumulate,
                   HnMatmulFlags flags, gboolean *done, GError **error)
{
  *done = FALSE;
  /* a bias only in the forward (x·Wᵀ + b, alpha 1, A not transposed) */
  if (bias && (!w_row_is_n || a_sk != 1 || alpha != 1.0f))
    return TRUE;
  gboolean ta = a_sk != 1;
  g_autoptr (HnTensor) a2 = hn_tensor_reshape (a, 2, ta ? (gint64[]) { K, M } : (gint64[]) { M, K }, error);
  g_autoptr (HnTensor) c2 = a2 ? hn_tensor_reshape (c, 2, (gint64[]) { M, N }, error) : NULL;
  g_autoptr (HnTensor) w16 = c2 ? hn_quant_f16_form (cmd, w, error) : NULL;
  if (!w16)
    return FALSE;
  *done = TRUE;
  if (bias)
    return accumulate ? hn_op_matmul_add (cmd, c2, a2, w16, bias, 1.0f, error)
                      : hn_op_matmul (cmd, c2, a2, w16, bias, error);
  HnMatmulFlags mf = (flags & ~(HnMatmulFlags) (HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B | HN_MATMUL_ACCUMULATE)) |
                     (ta ? HN_MATMUL_TRANS_A : 0) | (w_row_is_n ? HN_MATMUL_TRANS_B : 0) |
                     (accumulate ? HN_MATMUL_ACCUMULATE : 0);
  return hn_op_bmm (cmd, c2, a2, w16, mf, alpha, error);
}

gboolean
hn_op_matmul_quant_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N,
                             guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n, float alpha,
                             gboolean accumulate, HnMatmulFlags flags, GError **error)
{
  if (hn_dtype_is_ggml (w->dtype))
    {
      /* ggml blocks: W's f16 form when asked (gguf_to_f16_wide.comp for
       * Q4_K, Q6_K and Q8_0, gguf_to_f16.comp for the rest), else the
       * GGUF kernels (tensor cores decoding the blocks, or f32) */
      gboolean done = FALSE;
      if (f16_form (cmd, w, M, flags) &&
          !dispatch_f16_form (cmd, c, a, w, bias, M, N, K, a_sk, w_row_is_n, alpha, accumulate, flags, &done, error))
        return FALSE;
      if (done)
        return TRUE;
      return hn_op_matmul_gguf_dispatch (cmd, c, a, w, bias, M, N, K, a_sm, a_sk, w_row_is_n, alpha, accumulate,
                                         flags, error);
    }
  if (w->offset != 0 || w->ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "matmul: quantized weight %s must be a whole 2-D tensor",
                   w->name);
      return FALSE;
    }
  HnQuantLayout L;
  hn_quant_layout (w->dtype, w->shape[0], w->shape[1], &L);
  if (L.table + 256 > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "matmul: quantized weight %s is too large", w->name);
      return FALSE;
    }
  QuantPush pc = {
    M, N, K, hn_eoff (a), a_sm, a_sk, hn_eoff (c), N, bias ? hn_eoff (bias) : 0,
    (accumulate ? 1u : 0u) | (bias ? 2u : 0u), alpha,
    (guint32) w->shape[0], (guint32) w->shape[1], w_row_is_n ? 1u : 0u,
    (guint32) L.scale, (guint32) L.scale2, (guint32) L.offset, (guint32) L.table };
  guint32 qdt = w->dtype == HN_DTYPE_NF4 ? 0 : w->dtype == HN_DTYPE_NF4_DQ ? 1 : 2;
  gboolean done = FALSE;
  if (f16_form (cmd, w, M, flags) &&
      !dispatch_f16_form (cmd, c, a, w, bias, M, N, K, a_sk, w_row_is_n, alpha, accumulate, flags, &done, error))
    return FALSE;
  if (done)
    return TRUE;
  if (!try_dispatch_cm2 (cmd, c, a, w, bias, &pc, qdt, flags, &done, error))
    return FALSE;
  if (done)
    return TRUE;
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  guint32 bm = 64, bn = 64; /* 256 invocations, 8 KiB of shared memory */
  if (info->max_workgroup_invocations < 256)
    bm = bn = 32;
  guint32 spec[4] = { qdt, bm, bn, (bm / 4) * (bn / 4) };
  HnVkBinding bd[4] = { hn_bind (a, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, "matmul_quant");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_quant", spec, 4, bd, 4, &pc, sizeof pc, (N + bn - 1) / bn,
                                 (M + bm - 1) / bm, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}
