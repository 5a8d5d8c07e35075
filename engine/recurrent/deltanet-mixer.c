/* Gated DeltaNet's token mixer (see deltanet-mixer.h). */
#include "recurrent/deltanet-mixer.h"

#include "base/hn-error.h"
#include "recurrent/ops-delta.h"
#include "recurrent/ops-ssm.h"

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

void
hn_deltanet_bufs_clear (HnDeltaNetBufs *b)
{
  HnTensor **all[] = { &b->qkv, &b->qkvc, &b->z, &b->y, &b->b, &b->a };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
}

gboolean
hn_deltanet_bufs_init (HnDeltaNetBufs *b, HnVkContext *ctx, const HnDeltaNetDims *d, gint64 max_tok, GError **error)
{
  *b = (HnDeltaNetBufs) { 0 };
  gint64 CD = hn_deltanet_conv_dim (d), VD = (gint64) d->n_v_heads * d->v_dim;
  if (!(b->qkv = hn_tensor_new_named (ctx, "deltanet.qkv", HN_DTYPE_F32, 2, (gint64[]) { max_tok, CD }, error)) ||
      !(b->qkvc = hn_tensor_new_named (ctx, "deltanet.qkv_conv", HN_DTYPE_F32, 2, (gint64[]) { max_tok, CD }, error)) ||
      !(b->z = hn_tensor_new_named (ctx, "deltanet.z", HN_DTYPE_F32, 2, (gint64[]) { max_tok, VD }, error)) ||
      !(b->y = hn_tensor_new_named (ctx, "deltanet.y", HN_DTYPE_F32, 2, (gint64[]) { max_tok, VD }, error)) ||
      !(b->b = hn_tensor_new_named (ctx, "deltanet.b", HN_DTYPE_F32, 2, (gint64[]) { max_tok, d->n_v_heads }, error)) ||
      !(b->a = hn_tensor_new_named (ctx, "deltanet.a", HN_DTYPE_F32, 2, (gint64[]) { max_tok, d->n_v_heads }, error)))
    {
      hn_deltanet_bufs_clear (b);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_deltanet_record (HnCmd *cmd, HnScratch *sc, const HnDeltaNetDims *d, const HnDeltaNetWeights *w,
                    const HnDeltaNetBufs *buf, int B, int T, HnTensor *conv, HnTensor *state, HnTensor *out,
                    HnTensor *in, float scale, GError **error)
{
  gint64 n = (gint64) B * T, CD = hn_deltanet_conv_dim (d), HV = d->n_v_heads, VD = HV * d->v_dim;
  HnTensor *qkv2 = hn_scratch_prefix (sc, buf->qkv, 2, (gint64[]) { n, CD }, error);
  HnTensor *qkv3 = hn_scratch_prefix (sc, buf->qkv, 3, (gint64[]) { B, T, CD }, error);
  HnTensor *qc3 = hn_scratch_prefix (sc, buf->qkvc, 3, (gint64[]) { B, T, CD }, error);
  HnTensor *z2 = hn_scratch_prefix (sc, buf->z, 2, (gint64[]) { n, VD }, error);
  HnTensor *y2 = hn_scratch_prefix (sc, buf->y, 2, (gint64[]) { n, VD }, error);
  HnTensor *y3 = hn_scratch_prefix (sc, buf->y, 3, (gint64[]) { B, T, VD }, error);
  HnTensor *yh = hn_scratch_prefix (sc, buf->y, 2, (gint64[]) { n * HV, d->v_dim }, error);
  HnTensor *b2 = hn_scratch_prefix (sc, buf->b, 2, (gint64[]) { n, HV }, error);
  HnTensor *a2 = hn_scratch_prefix (sc, buf->a, 2, (gint64[]) { n, HV }, error);
  /* the gated norm's output goes to the projections' buffer, spent once the conv ran (CD >= HV·DV) */
  HnTensor *g2 = hn_scratch_prefix (sc, buf->qkv, 2, (gint64[]) { n, VD }, error);
  CK (qkv2 && qkv3 && qc3 && z2 && y2 && y3 && yh && b2 && a2 && g2);
  HnTensor *ys[4] = { qkv2, z2, b2, a2 }, *ws[4] = { w->w_qkv, w->w_z, w->w_b, w->w_a }, *bs[4] = { NULL };
  CK (hn_op_matmul_n (cmd, 4, ys, in, ws, bs, error));
  CK (hn_op_conv1d_causal (cmd, qc3, qkv3, w->conv_w, NULL, conv, HN_ACT_SILU, error));
  HnDeltaRuleParams p = { w->dt_bias, state, d->n_k_heads, d->n_v_heads, d->k_dim, d->v_dim, TRUE, 0.0f };
  CK (hn_op_gated_delta_rule (cmd, y3, qc3, a2, b2, w->A_log, &p, error));
  /* RMSNormGated: weight · rmsnorm(y) per value head, then · silu(z) */
  CK (hn_op_rmsnorm (cmd, yh, yh, w->norm_w, d->norm_eps, HN_NORM_DEFAULT, error));
  CK (hn_op_glu (cmd, g2, z2, y2, HN_ACT_SILU, error));
  return hn_op_matmul_add (cmd, out, g2, w->out_w, NULL, scale, error);
}
