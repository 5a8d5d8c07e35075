/* Attention over a paged K/V cache (issue 10) and its CPU reference. */
#include "tensor/ops-private.h"
#include "tensor/hn-cpu-ref.h"

#include <math.h>
#include <string.h>

gboolean
hn_op_attention_paged (HnCmd *cmd, HnTensor *out, HnTensor *q, HnTensor *k, HnTensor *v,
                       const HnPagedAttentionParams *params, GError **error)
{
  const char *op = "attention_paged";
  if (!params || !params->page_table || !params->seq_lens)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "attention_paged: a page table and sequence lengths are required");
      return FALSE;
    }
  HnTensor *pt = params->page_table, *sl = params->seq_lens;
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, q, error) ||
      !hn_op_check_ctx (op, cmd, k, error) || !hn_op_check_ctx (op, cmd, v, error) ||
      !hn_op_check_ctx (op, cmd, pt, error) || !hn_op_check_ctx (op, cmd, sl, error))
    return FALSE;
  if (!hn_op_check_dtype (op, "q", q, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) ||
      !hn_op_check_float_storage (op, "k", k, error) || !hn_op_check_dtype (op, "v", v, k->dtype, error) ||
      !hn_op_check_dtype (op, "page_table", pt, HN_DTYPE_I32, error) ||
      !hn_op_check_dtype (op, "seq_lens", sl, HN_DTYPE_I32, error))
    return FALSE;
  if (q->ndim != 4 || out->ndim != 4 || k->ndim != 3 || v->ndim != 3 || pt->ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "attention_paged: q/out must be [B, T, H, D], k/v arenas [n_pages*%d, KVH, D], page_table [B, max_pages]",
                   HN_KV_PAGE_SIZE);
      return FALSE;
    }
  gint64 B = q->shape[0], T = q->shape[1], H = q->shape[2], D = q->shape[3];
  gint64 rows = k->shape[0], KVH = k->shape[1], Dv = v->shape[2];
  if (k->shape[2] != D || v->shape[0] != rows || v->shape[1] != KVH || rows % HN_KV_PAGE_SIZE != 0 ||
      out->shape[0] != B || out->shape[1] != T || out->shape[2] != H || out->shape[3] != Dv || H % KVH != 0 ||
      pt->shape[0] != B || sl->n != B)
    {
      g_autofree char *dq = hn_tensor_describe (q), *dk = hn_tensor_describe (k), *dv = hn_tensor_describe (v),
                      *dout = hn_tensor_describe (out), *dpt = hn_tensor_describe (pt);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "attention_paged: shapes do not fit (q %s, k %s, v %s, out %s, page_table %s; arena rows must be a "
                   "multiple of %d, heads a multiple of KV heads)", dq, dk, dv, dout, dpt, HN_KV_PAGE_SIZE);
      return FALSE;
    }
  if (D > 256 || Dv > 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "attention_paged: head dim %" G_GINT64_FORMAT " above 256",
                   MAX (D, Dv));
      return FALSE;
    }
  if (H > 65535 || T > 65535 || B > 65535 || params->window < 0 || params->window > G_MAXINT32 ||
      params->local_chunk < 0 || params->local_chunk > G_MAXINT32 || (params->window > 0 && params->local_chunk > 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "attention_paged: heads, queries or batch above 65535, or a bad window or local_chunk");
      return FALSE;
    }
  if (out->buf == q->buf && out->offset < q->offset + hn_tensor_nbytes (q) &&
      q->offset < out->offset + hn_tensor_nbytes (out) && out->offset != q->offset)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "attention_paged: out partly overlaps q");
      return FALSE;
    }
  HnTensor *sk = params->sinks;
  if (sk && (!hn_op_check_ctx (op, cmd, sk, error) || !hn_op_check_dtype (op, "sinks", sk, HN_DTYPE_F32, error) ||
             !hn_op_check_count (op, "sinks", sk, H, error)))
    return FALSE;
  struct {
    guint32 T, H, KVH, D, Dv, max_pages, window, causal;
    float scale, softcap;
    guint32 q_off, k_off, v_off, o_off, pt_off, sl_off, has_sinks, s_off;
  } pc = {
    (guint32) T, (guint32) H, (guint32) KVH, (guint32) D, (guint32) Dv, (guint32) pt->shape[1],
    /* the window word of hn_window_hides (common.glsl): bit 31 marks a local chunk */
    params->local_chunk > 0 ? 0x80000000u | (guint32) params->local_chunk : (guint32) params->window,
    params->causal ? 1u : 0u, params->scale != 0.0f ? params->scale : (float) (1.0 / sqrt ((double) D)), params->softcap,
    hn_eoff (q), hn_eoff (k), hn_eoff (v), hn_eoff (out), hn_eoff (pt), hn_eoff (sl), sk != NULL,
    sk ? hn_eoff (sk) : 0 };
  guint32 spec[1] = { hn_op_float_code (k->dtype) };
  HnVkBinding bd[7] = { hn_bind (q, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE),
                        hn_bind (pt, FALSE), hn_bind (sl, FALSE), hn_bind (out, TRUE), hn_bind (sk ? sk : q, FALSE) };
  return hn_cmd_dispatch (cmd, "attention_paged", spec, 1, bd, 7, &pc, sizeof pc, (guint32) H, (guint32) T,
                          (guint32) B, error);
}

void
hn_ref_attention_paged (float *out, const float *q, const float *k, const float *v, gint64 B, gint64 T, gint64 H,
                        gint64 KVH, gint64 D, gint64 Dv, const gint32 *page_table, gint64 max_pages,
                        const gint32 *seq_lens, const HnPagedAttentionParams *p, const float *sinks)
{
  /* gather each row's keys into a contiguous block, then the contiguous reference */
  for (gint64 b = 0; b < B; b++)
    {
      gint64 n = MAX (seq_lens[b], 0);
      g_autofree float *kc = g_new0 (float, MAX (n, 1) * KVH * D);
      g_autofree float *vc = g_new0 (float, MAX (n, 1) * KVH * Dv);
      for (gint64 j = 0; j < n; j++)
        {
          gint64 row = (gint64) page_table[b * max_pages + j / HN_KV_PAGE_SIZE] * HN_KV_PAGE_SIZE + j % HN_KV_PAGE_SIZE;
          memcpy (kc + j * KVH * D, k + row * KVH * D, sizeof (float) * (gsize) (KVH * D));
          memcpy (vc + j * KVH * Dv, v + row * KVH * Dv, sizeof (float) * (gsize) (KVH * Dv));
        }
      HnAttentionParams ap = { .scale = p->scale, .softcap = p->softcap, .causal = p->causal, .pos0 = n - T,
                               .n_kv = n, .window = p->window, .local_chunk = p->local_chunk, .sinks = p->sinks };
      if (n == 0)
        {
          memset (out + b * T * H * Dv, 0, sizeof (float) * (gsize) (T * H * Dv));
          continue;
        }
      hn_ref_attention (out + b * T * H * Dv, q + b * T * H * D, kc, vc, 1, T, H, KVH, D, Dv, n, &ap,
                        p->sinks ? sinks : NULL, NULL, 1, 1, 0);
    }
}

gboolean
hn_op_set_rows (HnCmd *cmd, HnTensor *dst, HnTensor *src, HnTensor *rows, GError **error)
{
  const char *op = "set_rows";
  if (!hn_op_check_ctx (op, cmd, dst, error) || !hn_op_check_ctx (op, cmd, src, error) ||
      !hn_op_check_ctx (op, cmd, rows, error) || !hn_op_check_dtype (op, "dst", dst, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "src", src, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "rows", rows, HN_DTYPE_I32, error))
    return FALSE;
  gint64 D = hn_tensor_cols (dst), R = hn_tensor_rows (dst);
  if (hn_tensor_cols (src) != D || hn_tensor_rows (src) != rows->n || R > G_MAXINT32 || src->n > G_MAXUINT32)
    {
      g_autofree char *dd = hn_tensor_describe (dst), *ds = hn_tensor_describe (src), *dr = hn_tensor_describe (rows);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "set_rows: shapes do not fit (dst %s, src %s, rows %s: src must be [n_rows, dst columns])", dd, ds,
                   dr);
      return FALSE;
    }
  if (dst->buf == src->buf && dst->offset < src->offset + hn_tensor_nbytes (src) &&
      src->offset < dst->offset + hn_tensor_nbytes (dst))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "set_rows: dst %s overlaps src %s", dst->name, src->name);
      return FALSE;
    }
  struct { guint32 n, D, R, s_off, i_off, o_off; } pc = {
    (guint32) src->n, (guint32) D, (guint32) R, hn_eoff (src), hn_eoff (rows), hn_eoff (dst) };
  HnVkBinding bd[3] = { hn_bind (src, FALSE), hn_bind (rows, FALSE), hn_bind (dst, TRUE) };
  return hn_op_dispatch_elems (cmd, "set_rows", NULL, 0, bd, 3, &pc, sizeof pc, (guint64) src->n, error);
}

void
hn_ref_set_rows (float *dst, const float *src, const gint32 *rows, gint64 n, gint64 D, gint64 R)
{
  for (gint64 r = 0; r < n; r++)
    if (rows[r] >= 0 && rows[r] < R)
      memcpy (dst + (gint64) rows[r] * D, src + r * D, sizeof (float) * (gsize) D);
}
