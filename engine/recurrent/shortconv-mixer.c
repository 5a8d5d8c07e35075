/* LFM2's gated short convolution (see shortconv-mixer.h). */
#include "recurrent/shortconv-mixer.h"

#include "base/hn-error.h"
#include "recurrent/ops-ssm.h"

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

void
hn_shortconv_bufs_clear (HnShortConvBufs *b)
{
  g_clear_pointer (&b->b, hn_tensor_unref);
  g_clear_pointer (&b->c, hn_tensor_unref);
  g_clear_pointer (&b->x, hn_tensor_unref);
}

gboolean
hn_shortconv_bufs_init (HnShortConvBufs *b, HnVkContext *ctx, const HnShortConvDims *d, gint64 max_tok,
                        GError **error)
{
  *b = (HnShortConvBufs) { 0 };
  gint64 shape[2] = { max_tok, d->width };
  if (!(b->b = hn_tensor_new_named (ctx, "shortconv.B", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->c = hn_tensor_new_named (ctx, "shortconv.C", HN_DTYPE_F32, 2, shape, error)) ||
      !(b->x = hn_tensor_new_named (ctx, "shortconv.x", HN_DTYPE_F32, 2, shape, error)))
    {
      hn_shortconv_bufs_clear (b);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_shortconv_record (HnCmd *cmd, HnScratch *sc, const HnShortConvDims *d, const HnShortConvWeights *w,
                     const HnShortConvBufs *buf, int B, int T, HnTensor *state, HnTensor *out, HnTensor *in,
                     float scale, GError **error)
{
  gint64 n = (gint64) B * T, W = d->width;
  if (scale != 1.0f && w->out_b)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "a short-convolution out_proj bias with a residual multiplier other than 1 is not built");
      return FALSE;
    }
  HnTensor *b2 = hn_scratch_prefix (sc, buf->b, 2, (gint64[]) { n, W }, error);
  HnTensor *c2 = hn_scratch_prefix (sc, buf->c, 2, (gint64[]) { n, W }, error);
  HnTensor *x2 = hn_scratch_prefix (sc, buf->x, 2, (gint64[]) { n, W }, error);
  HnTensor *b3 = hn_scratch_prefix (sc, buf->b, 3, (gint64[]) { B, T, W }, error);
  HnTensor *x3 = hn_scratch_prefix (sc, buf->x, 3, (gint64[]) { B, T, W }, error);
  CK (b2 && c2 && x2 && b3 && x3);
  HnTensor *ys[3] = { b2, c2, x2 }, *ws[3] = { w->w_B, w->w_C, w->w_x }, *bs[3] = { w->b_B, w->b_C, w->b_x };
  CK (hn_op_matmul_n (cmd, 3, ys, in, ws, bs, error));
  CK (hn_op_mul (cmd, b2, b2, x2, error));
  /* x is spent: the conv writes its output there (it must not overlap its input B · x) */
  CK (hn_op_conv1d_causal (cmd, x3, b3, w->conv_w, w->conv_b, state, HN_ACT_IDENTITY, error));
  CK (hn_op_mul (cmd, c2, c2, x2, error));
  return hn_op_matmul_add (cmd, out, c2, w->out_w, w->out_b, scale, error);
}
