/* Matmuls with a quantized frozen weight (tensor/quant.h): the kernel
 * (shaders/matmul_quant.comp) dequantizes W tile by tile. hn_op_matmul and
 * hn_op_bmm come here when W / B has a quantized dtype. */
#include "ops-private.h"
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

gboolean
hn_op_matmul_quant_dispatch (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *w, HnTensor *bias, guint32 M, guint32 N,
                             guint32 K, guint32 a_sm, guint32 a_sk, gboolean w_row_is_n, float alpha,
                             gboolean accumulate, GError **error)
{
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
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  guint32 bm = 64, bn = 64; /* 256 invocations, 8 KiB of shared memory */
  if (info->max_workgroup_invocations < 256)
    bm = bn = 32;
  guint32 qdt = w->dtype == HN_DTYPE_NF4 ? 0 : w->dtype == HN_DTYPE_NF4_DQ ? 1 : 2;
  guint32 spec[4] = { qdt, bm, bn, (bm / 4) * (bn / 4) };
  HnVkBinding bd[4] = { hn_bind (a, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, "matmul_quant");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_quant", spec, 4, bd, 4, &pc, sizeof pc, (N + bn - 1) / bn,
                                 (M + bm - 1) / bm, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}
