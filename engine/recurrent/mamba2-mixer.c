/* The Mamba-2 mixer (see mamba2-mixer.h). */
#include "recurrent/mamba2-mixer.h"

#include "base/hn-error.h"
#include "recurrent/ops-ssm.h"

#include <math.h>

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

void
hn_mamba2_bufs_clear (HnMamba2Bufs *b)
{
  HnTensor **all[] = { &b->z, &b->x, &b->xc, &b->y, &b->g, &b->B, &b->C, &b->Bc, &b->Cc, &b->dt };
  for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
}

gboolean
hn_mamba2_bufs_init (HnMamba2Bufs *b, HnVkContext *ctx, const HnMamba2Dims *d, gint64 max_tok, GError **error)
{
  *b = (HnMamba2Bufs) { 0 };
  gint64 I = d->inner, GN = (gint64) d->n_groups * d->state;
#define NEW(f, name, w) (b->f = hn_tensor_new_named (ctx, name, HN_DTYPE_F32, 2, (gint64[]) { max_tok, w }, error))
  if (!NEW (z, "mamba2.z", I) || !NEW (x, "mamba2.x", I) || !NEW (xc, "mamba2.x_conv", I) || !NEW (y, "mamba2.y", I) ||
      !NEW (g, "mamba2.gated", I) || !NEW (B, "mamba2.B", GN) || !NEW (C, "mamba2.C", GN) ||
      !NEW (Bc, "mamba2.B_conv", GN) || !NEW (Cc, "mamba2.C_conv", GN) || !NEW (dt, "mamba2.dt", d->n_heads))
    {
      hn_mamba2_bufs_clear (b);
      return FALSE;
    }
#undef NEW
  return TRUE;
}

gboolean
hn_mamba2_record (HnCmd *cmd, HnScratch *sc, const HnMamba2Dims *d, const HnMamba2Weights *w, const HnMamba2Bufs *buf,
                  int B, int T, const HnSsmState *st, HnTensor *out, HnTensor *in, float scale, GError **error)
{
  gint64 n = (gint64) B * T, GN = (gint64) d->n_groups * d->state;
  if (scale != 1.0f && w->out_b)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "a Mamba-2 out_proj bias with a residual multiplier other than 1 is not built");
      return FALSE;
    }
#define P2(t, d1) hn_scratch_prefix (sc, buf->t, 2, (gint64[]) { n, d1 }, error)
#define P3(t, d2) hn_scratch_prefix (sc, buf->t, 3, (gint64[]) { B, T, d2 }, error)
  HnTensor *z = P2 (z, d->inner), *xs = P2 (x, d->inner), *Bs = P2 (B, GN), *Cs = P2 (C, GN);
  HnTensor *dt = P2 (dt, d->n_heads), *y2 = P2 (y, d->inner), *g = P2 (g, d->inner);
  HnTensor *xs3 = P3 (x, d->inner), *xc3 = P3 (xc, d->inner), *Bs3 = P3 (B, GN), *Cs3 = P3 (C, GN);
  HnTensor *Bc3 = P3 (Bc, GN), *Cc3 = P3 (Cc, GN), *y3 = P3 (y, d->inner), *dt3 = P3 (dt, d->n_heads);
#undef P2
#undef P3
  HnTensor *Bc4 = Bc3 ? hn_scratch_shape (sc, Bc3, 4, (gint64[]) { B, T, d->n_groups, d->state }, error) : NULL;
  HnTensor *Cc4 = Cc3 ? hn_scratch_shape (sc, Cc3, 4, (gint64[]) { B, T, d->n_groups, d->state }, error) : NULL;
  CK (z && xs && Bs && Cs && dt && y2 && g && xs3 && xc3 && Bs3 && Cs3 && Bc4 && Cc4 && y3 && dt3);
  HnTensor *ys[5] = { z, xs, Bs, Cs, dt }, *ws[5] = { w->w_z, w->w_x, w->w_B, w->w_C, w->w_dt };
  HnTensor *bs[5] = { w->b_z, w->b_x, w->b_B, w->b_C, w->b_dt };
  CK (hn_op_matmul_n (cmd, 5, ys, in, ws, bs, error));
  CK (hn_op_conv1d_causal (cmd, xc3, xs3, w->conv_w, w->conv_b, st ? st->conv : NULL, HN_ACT_SILU, error));
  CK (hn_op_conv1d_causal (cmd, Bc3, Bs3, w->conv_wB, w->conv_bB, st ? st->convB : NULL, HN_ACT_SILU, error));
  CK (hn_op_conv1d_causal (cmd, Cc3, Cs3, w->conv_wC, w->conv_bC, st ? st->convC : NULL, HN_ACT_SILU, error));
  HnSsmScanParams sp = { w->dt_bias, w->D, NULL, st ? st->ssm : NULL, TRUE, d->head_dim, d->n_groups, d->dt_limit,
                         d->dt_min, d->dt_max };
  CK (hn_op_ssm_scan (cmd, y3, xc3, dt3, w->A_log, Bc4, Cc4, &sp, error));
  /* MambaRMSNormGated: weight · rmsnorm(y · silu(z)) */
  CK (hn_op_glu (cmd, g, z, y2, HN_ACT_SILU, error));
  if (d->norm_groups > 1)
    {
      /* Zamba2RMSNormGated with group_size I / groups: each group normalised, then the weight */
      HnTensor *g3 = hn_scratch_shape (sc, g, 3, (gint64[]) { n, d->norm_groups, d->inner / d->norm_groups }, error);
      CK (g3);
      CK (hn_op_rmsnorm (cmd, g3, g3, NULL, d->norm_eps, HN_NORM_DEFAULT, error));
      CK (hn_op_mul (cmd, g, g, w->norm_w, error));
    }
  else
    CK (hn_op_rmsnorm (cmd, g, g, w->norm_w, d->norm_eps, HN_NORM_DEFAULT, error));
  return hn_op_matmul_add (cmd, out, g, w->out_w, w->out_b, scale, error);
}

gboolean
hn_mamba2_dt_limit_from_config (const HnModelConfig *cfg, HnMamba2Dims *d, GError **error)
{
  /* time_step_limit: [lo, hi]; transformers 5 writes inf as {"__float__": "Infinity"} */
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *lim = raw ? json_object_get_member (raw, "time_step_limit") : NULL;
  double v[2] = { 0.0, INFINITY };
  if (lim && JSON_NODE_HOLDS_ARRAY (lim) && json_array_get_length (json_node_get_array (lim)) == 2)
    for (guint k = 0; k < 2; k++)
      {
        JsonNode *el = json_array_get_element (json_node_get_array (lim), k);
        if (JSON_NODE_HOLDS_VALUE (el))
          v[k] = json_node_get_double (el);
        else if (JSON_NODE_HOLDS_OBJECT (el) && json_object_has_member (json_node_get_object (el), "__float__"))
          {
            const char *f = json_object_get_string_member (json_node_get_object (el), "__float__");
            v[k] = f && g_str_equal (f, "-Infinity") ? -INFINITY : f && g_str_equal (f, "Infinity") ? INFINITY : NAN;
          }
        else
          v[k] = NAN;
      }
  else if (lim && !JSON_NODE_HOLDS_NULL (lim))
    v[0] = NAN;
  if (isnan (v[0]) || isnan (v[1]))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: time_step_limit must be [min, max]", cfg->path);
      return FALSE;
    }
  /* softplus is positive: (<= 0, inf) clamps nothing */
  d->dt_limit = v[0] > 0.0 || isfinite (v[1]);
  d->dt_min = (float) v[0];
  d->dt_max = isfinite (v[1]) ? (float) v[1] : G_MAXFLOAT;
  return TRUE;
}
