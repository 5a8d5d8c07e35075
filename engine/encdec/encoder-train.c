/* Masked-LM training of the post-norm encoders (bert family): a forward that
 * keeps every activation, the explicit backward of each op in reverse, and
 * torch.optim.AdamW on every weight, one recording and one submit per step.
 * The loss is transformers' BertForMaskedLM loss: cross-entropy of every
 * position whose label is not -100, averaged over those (no shift). */
#include "base/hn-error.h"
#include "encdec/encoder-private.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

typedef struct {
  HnTensor *q, *k, *v, *att, *opre, *x1, *u, *a, *dpre; /* saved activations of one layer step */
} StepActs;

struct _HnEncoderTrainer {
  HnEncoder *m;
  int B, T;
  GPtrArray *owned;        /* every activation made here */
  HnParamSet ps;
  HnTensor *ids, *pos, *tt, *targets, *row_scale, *loss, *mean;
  HnTensor *e_sum, *e_tmp, *e_ln; /* [N, E] */
  HnTensor **X;            /* [n_exec + 1] of [N, C]: the input of each step, then the output */
  StepActs *acts;          /* [n_exec] */
  HnTensor *tpre, *tact, *tln, *logits;
  /* gradients of activations (reused across layers) */
  HnTensor *dX, *dX2, *dtmp, *dq, *dk, *dv, *datt, *du, *da, *dt1, *dt2, *de, *de2, *stats;
  HnCmd *cmd;
  double grad_norm; /* of the last step, before clipping */
};

void
hn_encoder_trainer_free (HnEncoderTrainer *tr)
{
  if (!tr)
    return;
  g_clear_pointer (&tr->cmd, hn_cmd_free);
  hn_params_clear (&tr->ps);
  g_clear_pointer (&tr->owned, g_ptr_array_unref);
  g_free (tr->X);
  g_free (tr->acts);
  g_free (tr);
}

static HnTensor *
mk (HnEncoderTrainer *tr, const char *name, HnDType dt, gint64 rows, gint64 cols, GError **error)
{
  HnTensor *t = cols ? hn_tensor_new_named (tr->m->ctx, name, dt, 2, (gint64[]) { rows, cols }, error)
                     : hn_tensor_new_named (tr->m->ctx, name, dt, 1, (gint64[]) { rows }, error);
  if (t)
    g_ptr_array_add (tr->owned, t);
  return t;
}

static HnTensor *
G (HnEncoderTrainer *tr, HnTensor *param)
{
  return hn_params_grad (&tr->ps, param);
}

HnEncoderTrainer *
hn_encoder_trainer_new (HnEncoder *m, int B, int T, GError **error)
{
  if (m->pre_norm || m->gated || m->inv_freq_global || m->mobile || m->deberta || m->layer_local || m->xmod_lang ||
      m->derived || m->dft_cos)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training model_type \"%s\" is not supported yet",
                   m->arch->model_type);
      return NULL;
    }
  if (B < 1 || T < 1 || (gint64) B * T > (1 << 20))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "a batch of %d x %d tokens is out of range", B, T);
      return NULL;
    }
  g_autoptr (HnEncoderTrainer) tr = g_new0 (HnEncoderTrainer, 1);
  tr->m = m, tr->B = B, tr->T = T;
  tr->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  hn_params_init (&tr->ps);
  /* every weight of the model trains (the decoder is the word table, tied) */
  for (guint i = 0; i < m->owned->len; i++)
    if (!hn_params_add (&tr->ps, g_ptr_array_index (m->owned, i), error))
      return NULL;
  gint64 N = (gint64) B * T, C = m->C, E = m->E, F = m->F, V = m->vocab, HE = m->head_w->shape[0];
  tr->X = g_new0 (HnTensor *, m->n_exec + 1);
  tr->acts = g_new0 (StepActs, m->n_exec);
  gboolean ok = (tr->ids = mk (tr, "train.ids", HN_DTYPE_I32, N, 0, error)) &&
                (tr->pos = mk (tr, "train.pos", HN_DTYPE_I32, N, 0, error)) &&
                (tr->tt = mk (tr, "train.types", HN_DTYPE_I32, N, 0, error)) &&
                (tr->targets = mk (tr, "train.targets", HN_DTYPE_I32, N, 0, error)) &&
                (tr->row_scale = mk (tr, "train.row_scale", HN_DTYPE_F32, N, 0, error)) &&
                (tr->loss = mk (tr, "train.loss", HN_DTYPE_F32, N, 0, error)) &&
                (tr->mean = mk (tr, "train.mean", HN_DTYPE_F32, 1, 0, error)) &&
                (tr->e_sum = mk (tr, "train.e_sum", HN_DTYPE_F32, N, E, error)) &&
                (tr->e_tmp = mk (tr, "train.e_tmp", HN_DTYPE_F32, N, E, error)) &&
                (tr->e_ln = mk (tr, "train.e_ln", HN_DTYPE_F32, N, E, error)) &&
                (tr->tpre = mk (tr, "train.tpre", HN_DTYPE_F32, N, HE, error)) &&
                (tr->tact = mk (tr, "train.tact", HN_DTYPE_F32, N, HE, error)) &&
                (tr->tln = mk (tr, "train.tln", HN_DTYPE_F32, N, HE, error)) &&
                (tr->logits = mk (tr, "train.logits", HN_DTYPE_F32, N, V, error)) &&
                (tr->dX = mk (tr, "train.dX", HN_DTYPE_F32, N, C, error)) &&
                (tr->dX2 = mk (tr, "train.dX2", HN_DTYPE_F32, N, C, error)) &&
                (tr->dtmp = mk (tr, "train.dtmp", HN_DTYPE_F32, N, C, error)) &&
                (tr->dq = mk (tr, "train.dq", HN_DTYPE_F32, N, C, error)) &&
                (tr->dk = mk (tr, "train.dk", HN_DTYPE_F32, N, C, error)) &&
                (tr->dv = mk (tr, "train.dv", HN_DTYPE_F32, N, C, error)) &&
                (tr->datt = mk (tr, "train.datt", HN_DTYPE_F32, N, C, error)) &&
                (tr->du = mk (tr, "train.du", HN_DTYPE_F32, N, F, error)) &&
                (tr->da = mk (tr, "train.da", HN_DTYPE_F32, N, F, error)) &&
                (tr->dt1 = mk (tr, "train.dt1", HN_DTYPE_F32, N, HE, error)) &&
                (tr->dt2 = mk (tr, "train.dt2", HN_DTYPE_F32, N, HE, error)) &&
                (tr->de = mk (tr, "train.de", HN_DTYPE_F32, N, E, error)) &&
                (tr->de2 = mk (tr, "train.de2", HN_DTYPE_F32, N, E, error)) &&
                (tr->stats = mk (tr, "train.stats", HN_DTYPE_F32, 2 * N * m->H, 0, error));
  for (int l = 0; ok && l <= m->n_exec; l++)
    ok = (tr->X[l] = mk (tr, "train.x", HN_DTYPE_F32, N, C, error)) != NULL;
  for (int l = 0; ok && l < m->n_exec; l++)
    {
      StepActs *s = &tr->acts[l];
      ok = (s->q = mk (tr, "train.q", HN_DTYPE_F32, N, C, error)) && (s->k = mk (tr, "train.k", HN_DTYPE_F32, N, C, error)) &&
           (s->v = mk (tr, "train.v", HN_DTYPE_F32, N, C, error)) &&
           (s->att = mk (tr, "train.att", HN_DTYPE_F32, N, C, error)) &&
           (s->opre = mk (tr, "train.opre", HN_DTYPE_F32, N, C, error)) &&
           (s->x1 = mk (tr, "train.x1", HN_DTYPE_F32, N, C, error)) &&
           (s->u = mk (tr, "train.u", HN_DTYPE_F32, N, F, error)) && (s->a = mk (tr, "train.a", HN_DTYPE_F32, N, F, error)) &&
           (s->dpre = mk (tr, "train.dpre", HN_DTYPE_F32, N, C, error));
    }
  if (!ok || !(tr->cmd = hn_cmd_new (m->ctx, error)))
    return NULL;
  /* AdamW moments start at 0 */
  if (!hn_params_zero (&tr->ps, tr->cmd, TRUE, error) || !hn_cmd_submit_wait (tr->cmd, error))
    return NULL;
  return g_steal_pointer (&tr);
}

/* q/k/v/att [N, C] seen as [B, T, H, D]. */
static HnTensor *
heads (HnScratch *sc, HnEncoderTrainer *tr, HnTensor *t, GError **error)
{
  return hn_scratch_shape (sc, t, 4, (gint64[]) { tr->B, tr->T, tr->m->H, tr->m->D }, error);
}

static gboolean
forward (HnEncoderTrainer *tr, HnScratch *sc, HnAttentionParams *ap, GError **error)
{
  HnEncoder *m = tr->m;
  HnCmd *cmd = tr->cmd;
  CK (hn_op_embedding (cmd, tr->e_sum, m->word, tr->ids, error));
  CK (hn_op_embedding (cmd, tr->e_tmp, m->pos, tr->pos, error) && hn_op_add (cmd, tr->e_sum, tr->e_sum, tr->e_tmp, error));
  if (m->type)
    CK (hn_op_embedding (cmd, tr->e_tmp, m->type, tr->tt, error) &&
        hn_op_add (cmd, tr->e_sum, tr->e_sum, tr->e_tmp, error));
  if (m->proj_w)
    CK (hn_op_layernorm (cmd, tr->e_ln, tr->e_sum, m->emb_ln_w, m->emb_ln_b, m->eps, error) &&
        hn_op_matmul (cmd, tr->X[0], tr->e_ln, m->proj_w, m->proj_b, error));
  else
    CK (hn_op_layernorm (cmd, tr->X[0], tr->e_sum, m->emb_ln_w, m->emb_ln_b, m->eps, error));
  for (int l = 0; l < m->n_exec; l++)
    {
      const EncLayer *lw = &m->layers[m->order[l]];
      StepActs *s = &tr->acts[l];
      HnTensor *x = tr->X[l];
      HnTensor *q4 = heads (sc, tr, s->q, error), *k4 = heads (sc, tr, s->k, error), *v4 = heads (sc, tr, s->v, error);
      HnTensor *a4 = heads (sc, tr, s->att, error);
      CK (q4 && k4 && v4 && a4);
      CK (hn_op_matmul (cmd, s->q, x, lw->wq, lw->bq, error) && hn_op_matmul (cmd, s->k, x, lw->wk, lw->bk, error) &&
          hn_op_matmul (cmd, s->v, x, lw->wv, lw->bv, error) && hn_op_attention (cmd, a4, q4, k4, v4, ap, error));
      CK (hn_op_matmul (cmd, s->opre, s->att, lw->wo, lw->bo, error) && hn_op_add (cmd, s->opre, s->opre, x, error) &&
          hn_op_layernorm (cmd, s->x1, s->opre, lw->ln1_w, lw->ln1_b, m->eps, error));
      CK (hn_op_matmul (cmd, s->u, s->x1, lw->wi, lw->bi, error) && hn_op_unary (cmd, s->a, s->u, m->act, error) &&
          hn_op_matmul (cmd, s->dpre, s->a, lw->wd, lw->bd, error) && hn_op_add (cmd, s->dpre, s->dpre, s->x1, error) &&
          hn_op_layernorm (cmd, tr->X[l + 1], s->dpre, lw->ln2_w, lw->ln2_b, m->eps, error));
    }
  return hn_op_matmul (cmd, tr->tpre, tr->X[m->n_exec], m->head_w, m->head_b, error) &&
         hn_op_unary (cmd, tr->tact, tr->tpre, m->head_act, error) &&
         hn_op_layernorm (cmd, tr->tln, tr->tact, m->head_ln_w, m->head_ln_b, m->head_eps, error) &&
         hn_op_matmul (cmd, tr->logits, tr->tln, m->dec_w, m->dec_b, error) &&
         hn_op_cross_entropy (cmd, tr->loss, tr->mean, tr->logits, tr->targets, -100, error);
}

static gboolean
backward (HnEncoderTrainer *tr, HnScratch *sc, HnAttentionParams *ap, GError **error)
{
  HnEncoder *m = tr->m;
  HnCmd *cmd = tr->cmd;
  const HnBackFlags acc = HN_BACK_ACCUMULATE;
  /* head: logits = tln · wordᵀ + b, tln = LN(act(dense(x))) */
  CK (hn_op_cross_entropy_back (cmd, tr->logits, tr->logits, tr->targets, tr->row_scale, error));
  CK (hn_op_matmul_back (cmd, tr->dt2, G (tr, m->dec_w), G (tr, m->dec_b), tr->logits, tr->tln, m->dec_w, 0, error));
  CK (hn_op_layernorm_back (cmd, tr->dt1, G (tr, m->head_ln_w), G (tr, m->head_ln_b), tr->dt2, tr->tact, m->head_ln_w,
                            tr->stats, m->head_eps, 0, error));
  CK (hn_op_unary_back (cmd, tr->dt2, tr->dt1, tr->tpre, m->head_act, 0, error));
  CK (hn_op_matmul_back (cmd, tr->dX, G (tr, m->head_w), G (tr, m->head_b), tr->dt2, tr->X[m->n_exec], m->head_w, 0,
                         error));
  for (int l = m->n_exec - 1; l >= 0; l--)
    {
      const EncLayer *lw = &m->layers[m->order[l]];
      StepActs *s = &tr->acts[l];
      /* X[l+1] = LN2(d + x1), d = wd·act(wi·x1) */
      CK (hn_op_layernorm_back (cmd, tr->dtmp, G (tr, lw->ln2_w), G (tr, lw->ln2_b), tr->dX, s->dpre, lw->ln2_w,
                                tr->stats, m->eps, 0, error));
      CK (hn_op_matmul_back (cmd, tr->da, G (tr, lw->wd), G (tr, lw->bd), tr->dtmp, s->a, lw->wd, 0, error));
      CK (hn_op_unary_back (cmd, tr->du, tr->da, s->u, m->act, 0, error));
      CK (hn_op_copy (cmd, tr->dX2, tr->dtmp, error));
      CK (hn_op_matmul_back (cmd, tr->dX2, G (tr, lw->wi), G (tr, lw->bi), tr->du, s->x1, lw->wi, acc, error));
      /* x1 = LN1(o + X[l]), o = wo·attention(q, k, v) */
      CK (hn_op_layernorm_back (cmd, tr->dtmp, G (tr, lw->ln1_w), G (tr, lw->ln1_b), tr->dX2, s->opre, lw->ln1_w,
                                tr->stats, m->eps, 0, error));
      CK (hn_op_matmul_back (cmd, tr->datt, G (tr, lw->wo), G (tr, lw->bo), tr->dtmp, s->att, lw->wo, 0, error));
      HnTensor *dq4 = heads (sc, tr, tr->dq, error), *dk4 = heads (sc, tr, tr->dk, error);
      HnTensor *dv4 = heads (sc, tr, tr->dv, error), *da4 = heads (sc, tr, tr->datt, error);
      HnTensor *q4 = heads (sc, tr, s->q, error), *k4 = heads (sc, tr, s->k, error), *v4 = heads (sc, tr, s->v, error);
      CK (dq4 && dk4 && dv4 && da4 && q4 && k4 && v4);
      CK (hn_op_attention_back (cmd, dq4, dk4, dv4, da4, q4, k4, v4, tr->stats, ap, 0, error));
      CK (hn_op_copy (cmd, tr->dX, tr->dtmp, error));
      CK (hn_op_matmul_back (cmd, tr->dX, G (tr, lw->wq), G (tr, lw->bq), tr->dq, tr->X[l], lw->wq, acc, error) &&
          hn_op_matmul_back (cmd, tr->dX, G (tr, lw->wk), G (tr, lw->bk), tr->dk, tr->X[l], lw->wk, acc, error) &&
          hn_op_matmul_back (cmd, tr->dX, G (tr, lw->wv), G (tr, lw->bv), tr->dv, tr->X[l], lw->wv, acc, error));
    }
  /* embeddings: X[0] = (proj ∘) LN(word[ids] + pos[pos] + type[tt]) */
  HnTensor *dln = tr->dX;
  if (m->proj_w)
    {
      CK (hn_op_matmul_back (cmd, tr->de, G (tr, m->proj_w), G (tr, m->proj_b), tr->dX, tr->e_ln, m->proj_w, 0, error));
      dln = tr->de;
    }
  CK (hn_op_layernorm_back (cmd, tr->de2, G (tr, m->emb_ln_w), G (tr, m->emb_ln_b), dln, tr->e_sum, m->emb_ln_w,
                            tr->stats, m->eps, 0, error));
  CK (hn_op_embedding_back (cmd, G (tr, m->word), tr->de2, tr->ids, error) &&
      hn_op_embedding_back (cmd, G (tr, m->pos), tr->de2, tr->pos, error));
  if (m->type)
    CK (hn_op_embedding_back (cmd, G (tr, m->type), tr->de2, tr->tt, error));
  return TRUE;
}

gboolean
hn_encoder_trainer_step (HnEncoderTrainer *tr, const int32_t *ids, const int32_t *type_ids, const int32_t *labels,
                         const HnEncoderTrainStep *opt, double *loss, GError **error)
{
  HnEncoder *m = tr->m;
  int B = tr->B, T = tr->T, N = B * T;
  g_autofree int32_t *pos = g_new (int32_t, N);
  g_autofree int32_t *tt = g_new0 (int32_t, N);
  g_autofree float *scale = g_new0 (float, N);
  for (int b = 0; b < B; b++)
    {
      CK (hn_encoder_check_ids (m, ids + b * T, type_ids ? type_ids + b * T : NULL, T, error));
      hn_encoder_positions (m, ids + b * T, T, pos + b * T);
    }
  if (type_ids)
    memcpy (tt, type_ids, sizeof (int32_t) * (gsize) N);
  int n_valid = 0;
  for (int i = 0; i < N; i++)
    {
      if (labels[i] != -100 && (labels[i] < 0 || labels[i] >= m->vocab))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "label %d at %d is neither -100 nor a token id",
                       labels[i], i);
          return FALSE;
        }
      n_valid += labels[i] != -100;
    }
  if (!n_valid)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "every label of the batch is -100 (nothing to learn)");
      return FALSE;
    }
  for (int i = 0; i < N; i++)
    scale[i] = labels[i] != -100 ? 1.0f / (float) n_valid : 0.0f; /* d(mean)/d(loss_i) */
  CK (hn_tensor_upload_i32 (tr->ids, ids, (gsize) N, error) && hn_tensor_upload_i32 (tr->pos, pos, (gsize) N, error) &&
      hn_tensor_upload_i32 (tr->tt, tt, (gsize) N, error) && hn_tensor_upload_i32 (tr->targets, labels, (gsize) N, error) &&
      hn_tensor_upload_f32 (tr->row_scale, scale, (gsize) N, error));

  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  HnAttentionParams ap = { 0 };
  ap.scale = 1.0f / sqrtf ((float) m->D);
  HnAdamwScalars as;
  hn_adamw_scalars (&as, opt->step, opt->lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay);
  float clip = 1.0f;
  gboolean ok = hn_params_zero (&tr->ps, tr->cmd, FALSE, error) && forward (tr, &sc, &ap, error) &&
                backward (tr, &sc, &ap, error) &&
                hn_params_clip (&tr->ps, tr->cmd, opt->max_grad_norm, &tr->grad_norm, &clip, error) &&
                hn_params_adamw (&tr->ps, tr->cmd, &as, clip, error) && hn_cmd_submit_wait (tr->cmd, error);
  if (!ok)
    hn_cmd_reset (tr->cmd);
  hn_scratch_clear (&sc);
  float mean = 0;
  ok = ok && hn_tensor_download_f32 (tr->mean, &mean, 1, error);
  if (ok)
    *loss = mean;
  return ok;
}

HnTensor *const *
hn_encoder_get_weights (HnEncoder *m, guint *n)
{
  *n = m->owned->len;
  return (HnTensor *const *) m->owned->pdata;
}

double
hn_encoder_trainer_get_grad_norm (HnEncoderTrainer *tr)
{
  return tr->grad_norm;
}
