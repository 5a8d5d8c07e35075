/* One RWKV-4 block (see rwkv-mixer.h). */
#include "recurrent/rwkv-mixer.h"

#include "tensor/hn-ops.h"
#include "recurrent/ops-ssm.h"

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

void
hn_rwkv_bufs_clear (HnRwkvBufs *b)
{
  HnTensor **all[] = { &b->n, &b->mk, &b->mv, &b->mr, &b->k, &b->v, &b->r, &b->y, &b->fk, &b->fr, &b->fv };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
}

guint64
hn_rwkv_bufs_bytes (const HnRwkvDims *d, gint64 max_tok)
{
  return sizeof (float) * (guint64) max_tok * (6 * (guint64) d->hidden + 4 * (guint64) d->att + d->ffn);
}

gboolean
hn_rwkv_bufs_init (HnRwkvBufs *b, HnVkContext *ctx, const HnRwkvDims *d, gint64 max_tok, GError **error)
{
  *b = (HnRwkvBufs) { 0 };
  gint64 T = max_tok;
#define NEW(f, name, d1) (b->f = hn_tensor_new_named (ctx, name, HN_DTYPE_F32, 2, (gint64[]) { T, d1 }, error))
  if (!NEW (n, "rwkv.normed", d->hidden) || !NEW (mk, "rwkv.mix_k", d->hidden) || !NEW (mv, "rwkv.mix_v", d->hidden) ||
      !NEW (mr, "rwkv.mix_r", d->hidden) || !NEW (k, "rwkv.k", d->att) || !NEW (v, "rwkv.v", d->att) ||
      !NEW (r, "rwkv.r", d->att) || !NEW (y, "rwkv.wkv", d->att) || !NEW (fk, "rwkv.ffn_k", d->ffn) ||
      !NEW (fr, "rwkv.ffn_r", d->hidden) || !NEW (fv, "rwkv.ffn_v", d->hidden))
    {
      hn_rwkv_bufs_clear (b);
      return FALSE;
    }
#undef NEW
  return TRUE;
}

/* The token-shift mixes of n [B, T, C] into outs[i] with weights mix[i], all reading the same shift
 * state: every mix but the last runs on a copy of it, the last updates it to n's last token. */
static gboolean
shift_mixes (HnCmd *cmd, HnScratch *sc, int n_mix, HnTensor *const *outs, HnTensor *const *mix, HnTensor *n,
             HnTensor *state, GError **error)
{
  for (int i = 0; i < n_mix; i++)
    {
      HnTensor *s = state;
      if (state && i + 1 < n_mix)
        {
          s = hn_scratch_new (sc, "rwkv.shift_copy", HN_DTYPE_F32, state->ndim, state->shape, error);
          CK (s && hn_op_copy (cmd, s, state, error));
        }
      CK (hn_op_conv1d_causal (cmd, outs[i], n, mix[i], NULL, s, HN_ACT_IDENTITY, error));
    }
  return TRUE;
}

gboolean
hn_rwkv_record (HnCmd *cmd, HnScratch *sc, const HnRwkvDims *d, const HnRwkvWeights *w, const HnRwkvBufs *buf, int B,
                int T, const HnRwkvState *st, HnTensor *x, GError **error)
{
  gint64 n = (gint64) B * T, C = d->hidden, A = d->att, F = d->ffn;
#define V2(t, d1) hn_scratch_prefix (sc, buf->t, 2, (gint64[]) { n, d1 }, error)
#define V3(t, d1) hn_scratch_prefix (sc, buf->t, 3, (gint64[]) { B, T, d1 }, error)
  HnTensor *nn = V2 (n, C), *n3 = V3 (n, C), *mk = V3 (mk, C), *mv = V3 (mv, C), *mr = V3 (mr, C);
  HnTensor *mk2 = V2 (mk, C), *mv2 = V2 (mv, C), *mr2 = V2 (mr, C);
  HnTensor *k = V2 (k, A), *v = V2 (v, A), *r = V2 (r, A), *y = V2 (y, A);
  HnTensor *k3 = V3 (k, A), *v3 = V3 (v, A), *y3 = V3 (y, A);
  HnTensor *fk = V2 (fk, F), *fr = V2 (fr, C), *fv = V2 (fv, C);
#undef V2
#undef V3
  CK (nn && n3 && mk && mv && mr && mk2 && mv2 && mr2 && k && v && r && y && k3 && v3 && y3 && fk && fr && fv);

  /* time mix */
  CK (hn_op_layernorm (cmd, nn, x, w->ln1_w, w->ln1_b, d->eps, error));
  HnTensor *aout[3] = { mk, mv, mr };
  CK (shift_mixes (cmd, sc, 3, aout, w->att_mix, n3, st ? st->att_shift : NULL, error));
  CK (hn_op_matmul (cmd, k, mk2, w->w_k, NULL, error));
  CK (hn_op_matmul (cmd, v, mv2, w->w_v, NULL, error));
  CK (hn_op_matmul (cmd, r, mr2, w->w_r, NULL, error));
  CK (hn_op_unary (cmd, r, r, HN_ACT_SIGMOID, error));
  CK (hn_op_wkv4 (cmd, y3, k3, v3, w->time_decay, w->time_first, st ? st->wkv : NULL, error));
  CK (hn_op_mul (cmd, y, y, r, error));
  CK (hn_op_matmul_add (cmd, x, y, w->w_o, NULL, 1.0f, error));

  /* channel mix */
  CK (hn_op_layernorm (cmd, nn, x, w->ln2_w, w->ln2_b, d->eps, error));
  HnTensor *fout[2] = { mk, mr };
  CK (shift_mixes (cmd, sc, 2, fout, w->ffn_mix, n3, st ? st->ffn_shift : NULL, error));
  CK (hn_op_matmul (cmd, fk, mk2, w->f_k, NULL, error));
  CK (hn_op_unary (cmd, fk, fk, HN_ACT_RELU2, error));
  CK (hn_op_matmul (cmd, fv, fk, w->f_v, NULL, error));
  CK (hn_op_matmul (cmd, fr, mr2, w->f_r, NULL, error));
  CK (hn_op_unary (cmd, fr, fr, HN_ACT_SIGMOID, error));
  CK (hn_op_mul (cmd, fv, fv, fr, error));
  return hn_op_add (cmd, x, x, fv, error);
}
