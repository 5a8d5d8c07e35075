/* Griffin's recurrent block (see rglru-mixer.h). */
#include "recurrent/rglru-mixer.h"

#include "base/hn-error.h"
#include "recurrent/ops-rglru.h"
#include "recurrent/ops-ssm.h"

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

void
hn_rglru_bufs_clear (HnRglruBufs *b)
{
  HnTensor **all[] = { &b->y, &b->x, &b->xc, &b->gi, &b->ga };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
}

gboolean
hn_rglru_bufs_init (HnRglruBufs *b, HnVkContext *ctx, const HnRglruDims *d, gint64 max_tok, GError **error)
{
  *b = (HnRglruBufs) { 0 };
  gint64 shape[2] = { max_tok, d->lru };
  if (!(b->y = hn_tensor_new_named (ctx, "rglru.y", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->x = hn_tensor_new_named (ctx, "rglru.x", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->xc = hn_tensor_new_named (ctx, "rglru.x_conv", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->gi = hn_tensor_new_named (ctx, "rglru.input_gate", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->ga = hn_tensor_new_named (ctx, "rglru.recurrent_gate", HN_DTYPE_F32, 2, shape, error)))
    {
      hn_rglru_bufs_clear (b);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_rglru_record (HnCmd *cmd, HnScratch *sc, const HnRglruDims *d, const HnRglruWeights *w, const HnRglruBufs *buf,
                 int B, int T, int pos0, HnTensor *conv, HnTensor *h, HnTensor *out, HnTensor *in, float scale,
                 GError **error)
{
  gint64 n = (gint64) B * T, L = d->lru;
  if (scale != 1.0f)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "a recurrent block with a residual multiplier other than 1 is not built");
      return FALSE;
    }
  HnTensor *y2 = hn_scratch_prefix (sc, buf->y, 2, (gint64[]) { n, L }, error);
  HnTensor *x2 = hn_scratch_prefix (sc, buf->x, 2, (gint64[]) { n, L }, error);
  HnTensor *x3 = hn_scratch_prefix (sc, buf->x, 3, (gint64[]) { B, T, L }, error);
  HnTensor *c2 = hn_scratch_prefix (sc, buf->xc, 2, (gint64[]) { n, L }, error);
  HnTensor *c3 = hn_scratch_prefix (sc, buf->xc, 3, (gint64[]) { B, T, L }, error);
  HnTensor *gi2 = hn_scratch_prefix (sc, buf->gi, 2, (gint64[]) { n, L }, error);
  HnTensor *gi3 = hn_scratch_prefix (sc, buf->gi, 3, (gint64[]) { B, T, L }, error);
  HnTensor *ga2 = hn_scratch_prefix (sc, buf->ga, 2, (gint64[]) { n, L }, error);
  HnTensor *ga3 = hn_scratch_prefix (sc, buf->ga, 3, (gint64[]) { B, T, L }, error);
  CK (y2 && x2 && x3 && c2 && c3 && gi2 && gi3 && ga2 && ga3);
  HnTensor *ys[2] = { y2, x2 }, *ws[2] = { w->w_y, w->w_x }, *bs[2] = { w->b_y, w->b_x };
  CK (hn_op_matmul_n (cmd, 2, ys, in, ws, bs, error));
  CK (hn_op_conv1d_causal (cmd, c3, x3, w->conv_w, w->conv_b, conv, HN_ACT_IDENTITY, error));
  HnTensor *gs[2] = { gi2, ga2 }, *gw[2] = { w->w_gi, w->w_ga }, *gb[2] = { w->b_gi, w->b_ga };
  CK (hn_op_matmul_n (cmd, 2, gs, c2, gw, gb, error));
  /* the x branch is spent: the recurrence writes there */
  CK (hn_op_rglru (cmd, x3, c3, gi3, ga3, w->lambda, h, pos0 == 0, error));
  CK (hn_op_glu (cmd, c2, y2, x2, HN_ACT_GELU_TANH, error));
  return hn_op_matmul_add (cmd, out, c2, w->out_w, w->out_b, scale, error);
}
