/* The Mamba (v1) mixer (see mamba1-mixer.h). */
#include "recurrent/mamba1-mixer.h"

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
hn_mamba1_bufs_clear (HnMamba1Bufs *b)
{
  HnTensor **all[] = { &b->x, &b->z, &b->xc, &b->dtl, &b->B, &b->C, &b->dt, &b->y };
  for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
}

gboolean
hn_mamba1_bufs_init (HnMamba1Bufs *b, HnVkContext *ctx, const HnMamba1Dims *d, gint64 max_tok, GError **error)
{
  *b = (HnMamba1Bufs) { 0 };
  gint64 I = d->inner;
#define NEW(f, name, w) (b->f = hn_tensor_new_named (ctx, name, HN_DTYPE_F32, 2, (gint64[]) { max_tok, w }, error))
  if (!NEW (x, "mamba.xin", I) || !NEW (z, "mamba.z", I) || !NEW (xc, "mamba.xc", I) ||
      !NEW (dtl, "mamba.dt_low", d->dt_rank) || !NEW (B, "mamba.B", d->state) || !NEW (C, "mamba.C", d->state) ||
      !NEW (dt, "mamba.dt", I) || !NEW (y, "mamba.y", I))
    {
      hn_mamba1_bufs_clear (b);
      return FALSE;
    }
#undef NEW
  return TRUE;
}

gboolean
hn_mamba1_record (HnCmd *cmd, HnScratch *sc, const HnMamba1Dims *d, const HnMamba1Weights *w, const HnMamba1Bufs *buf,
                  int B, int T, const HnSsmState *st, HnTensor *out, HnTensor *in, float scale, GError **error)
{
  gint64 n = (gint64) B * T, I = d->inner, N = d->state;
  if (scale != 1.0f && w->out_b)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "a Mamba out_proj bias with a residual multiplier other than 1 is not built");
      return FALSE;
    }
#define V2(t, d1) hn_scratch_prefix (sc, buf->t, 2, (gint64[]) { n, d1 }, error)
#define V3(t, d2) hn_scratch_prefix (sc, buf->t, 3, (gint64[]) { B, T, d2 }, error)
  HnTensor *xin = V3 (x, I), *z = V3 (z, I), *xc = V3 (xc, I), *dt = V3 (dt, I), *y = V3 (y, I);
  HnTensor *Bm = V3 (B, N), *Cm = V3 (C, N), *dtl = V2 (dtl, d->dt_rank);
  HnTensor *xin2 = V2 (x, I), *z2 = V2 (z, I), *xc2 = V2 (xc, I), *y2 = V2 (y, I), *Bm2 = V2 (B, N), *Cm2 = V2 (C, N);
  HnTensor *dt2 = V2 (dt, I);
#undef V2
#undef V3
  CK (xin && z && xc && dt && y && Bm && Cm && dtl && xin2 && z2 && xc2 && y2 && Bm2 && Cm2 && dt2);
  HnTensor *ys[2] = { xin2, z2 }, *ws[2] = { w->w_x, w->w_z }, *bs[2] = { w->b_x, w->b_z };
  CK (hn_op_matmul_n (cmd, 2, ys, in, ws, bs, error));
  CK (hn_op_conv1d_causal (cmd, xc, xin, w->conv_w, w->conv_b, st ? st->conv : NULL, HN_ACT_SILU, error));
  HnTensor *ps[3] = { dtl, Bm2, Cm2 }, *pw[3] = { w->w_dtl, w->w_B, w->w_C }, *pb[3] = { NULL, NULL, NULL };
  CK (hn_op_matmul_n (cmd, 3, ps, xc2, pw, pb, error));
  if (d->bc_dt_norm)
    {
      CK (hn_op_rmsnorm (cmd, dtl, dtl, w->dt_norm_w, d->norm_eps, HN_NORM_DEFAULT, error));
      CK (hn_op_rmsnorm (cmd, Bm2, Bm2, w->B_norm_w, d->norm_eps, HN_NORM_DEFAULT, error));
      CK (hn_op_rmsnorm (cmd, Cm2, Cm2, w->C_norm_w, d->norm_eps, HN_NORM_DEFAULT, error));
    }
  CK (hn_op_matmul (cmd, dt2, dtl, w->dt_w, w->dt_b, error));
  HnSsmScanParams sp = { NULL, w->D, z, st ? st->ssm : NULL, TRUE };
  CK (hn_op_ssm_scan (cmd, y, xc, dt, w->A_log, Bm, Cm, &sp, error));
  return hn_op_matmul_add (cmd, out, y2, w->out_w, w->out_b, scale, error);
}
