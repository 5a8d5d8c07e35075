/* Training of the T5 family (seq2seq.h): a forward over B rows of S encoder
 * and T decoder tokens that keeps every activation, the explicit backward of
 * each op in reverse and torch.optim.AdamW on every weight, the relative
 * position tables included. The loss is transformers' T5 loss: decoder input
 * = labels shifted right after decoder_start_token_id (-100 -> pad), mean
 * cross-entropy over the labels that are not -100.
 *
 * Attention with the relative-position bias runs per row through batched
 * matmuls over the heads (scores [H, T, S]), so its backward is written out:
 * dS = P · (dP - Σ_j dP·P); the bias table's gradient gathers dS by bucket
 * with the embedding backward. */
#include "base/hn-error.h"
#include "encdec/seq2seq-private.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

typedef struct {
  HnTensor *qh, *kh, *vh, *p; /* [H, T, D], [H, S, D], [H, S, D], probabilities [H, T, S] */
} RowAtt;

typedef struct {
  HnTensor *x_in, *h1, *q, *k, *v, *att; /* self-attention (att [N, HD] before o) */
  RowAtt *ra;                            /* [B] */
  HnTensor *x_mid, *h2, *cq, *ck, *cv, *catt; /* cross-attention (decoder) */
  HnTensor *x_ffn, *h3, *g, *u, *a;      /* MLP */
} LayerActs;

typedef struct {
  int n_tok, n_keys;     /* T (queries per row) and S (keys per row) of its self-attention */
  LayerActs *la;         /* [n_layer] */
  HnTensor *ids, *x, *x_final; /* i32 [N]; the residual stream [N, C]; its value before the final norm */
  HnTensor *out;         /* final-normed output [N, C] */
  HnTensor *buckets;     /* i32 [T * S]: the bucket of each (query, key) */
  HnTensor *bias;        /* [H, T, S] */
  HnTensor *bias_tmp;    /* [T * S, H] */
  HnTensor *table;       /* [buckets, H]: layer 0's relative_attention_bias on the device (trained) */
} StackActs;

struct _HnSeq2SeqTrainer {
  HnSeq2Seq *m;
  int B, S, T;
  GPtrArray *owned;
  HnParamSet ps;
  StackActs enc, dec;
  HnTensor *targets, *row_scale, *loss, *mean, *logits;
  /* activation gradients (reused) */
  HnTensor *dX, *dtmp, *dh, *dq, *dk, *dv, *datt, *dg, *du, *da, *denc, *dbias, *dbias_t;
  HnTensor *w_doh, *w_dp, *w_pd, *w_dqh, *w_dkh, *w_dvh, *w_r; /* per-row biased-attention scratch */
  HnTensor *stats;
  HnCmd *cmd;
  double grad_norm; /* of the last step, before clipping */
};

void
hn_seq2seq_trainer_free (HnSeq2SeqTrainer *tr)
{
  if (!tr)
    return;
  g_clear_pointer (&tr->cmd, hn_cmd_free);
  hn_params_clear (&tr->ps);
  g_clear_pointer (&tr->owned, g_ptr_array_unref);
  StackActs *st[2] = { &tr->enc, &tr->dec };
  for (int s = 0; s < 2; s++)
    {
      int L = s ? tr->m->dec.n_layer : tr->m->enc.n_layer;
      for (int l = 0; st[s]->la && l < L; l++)
        g_free (st[s]->la[l].ra);
      g_free (st[s]->la);
    }
  g_free (tr);
}

static HnTensor *
mk (HnSeq2SeqTrainer *tr, HnDType dt, int ndim, const gint64 *shape, GError **error)
{
  HnTensor *t = hn_tensor_new_named (tr->m->ctx, "seq2seq.train", dt, ndim, shape, error);
  if (t)
    g_ptr_array_add (tr->owned, t);
  return t;
}

static HnTensor *
mk2 (HnSeq2SeqTrainer *tr, gint64 r, gint64 c, GError **error)
{
  return mk (tr, HN_DTYPE_F32, 2, (gint64[]) { r, c }, error);
}

static HnTensor *
mk3 (HnSeq2SeqTrainer *tr, gint64 a, gint64 b, gint64 c, GError **error)
{
  return mk (tr, HN_DTYPE_F32, 3, (gint64[]) { a, b, c }, error);
}

static HnTensor *
G (HnSeq2SeqTrainer *tr, HnTensor *param)
{
  return hn_params_grad (&tr->ps, param);
}

static gboolean
stack_acts_new (HnSeq2SeqTrainer *tr, StackActs *sa, const Stack *st, gboolean decoder, const char *table_name,
                GError **error)
{
  HnSeq2Seq *m = tr->m;
  int B = tr->B, T = decoder ? tr->T : tr->S, S = T;
  gint64 N = (gint64) B * T, C = m->C, H = st->H, D = m->D, HD = H * D, F = st->F, NE = (gint64) B * tr->S;
  sa->n_tok = T, sa->n_keys = S;
  sa->la = g_new0 (LayerActs, st->n_layer);
  CK ((sa->ids = mk (tr, HN_DTYPE_I32, 1, (gint64[]) { N }, error)) && (sa->x = mk2 (tr, N, C, error)) &&
      (sa->x_final = mk2 (tr, N, C, error)) && (sa->out = mk2 (tr, N, C, error)) &&
      (sa->buckets = mk (tr, HN_DTYPE_I32, 1, (gint64[]) { (gint64) T * S }, error)) &&
      (sa->bias = mk3 (tr, H, T, S, error)) && (sa->bias_tmp = mk2 (tr, (gint64) T * S, H, error)));
  /* layer 0's table as a trained device parameter */
  g_autofree float *rel = g_memdup2 (st->l[0].rel, sizeof (float) * (gsize) m->buckets * H);
  CK ((sa->table = hn_tensor_new_named (m->ctx, table_name, HN_DTYPE_F32, 2, (gint64[]) { m->buckets, H }, error)));
  g_ptr_array_add (tr->owned, sa->table);
  CK (hn_tensor_upload_f32 (sa->table, rel, (gsize) m->buckets * H, error) && hn_params_add (&tr->ps, sa->table, error));
  g_autofree int32_t *bk = g_new (int32_t, T * S);
  for (int i = 0; i < T; i++)
    for (int j = 0; j < S; j++)
      bk[i * S + j] = hn_t5_relative_bucket (j - i, !decoder, m->buckets, m->max_distance);
  CK (hn_tensor_upload_i32 (sa->buckets, bk, (gsize) T * S, error));
  for (int l = 0; l < st->n_layer; l++)
    {
      LayerActs *a = &sa->la[l];
      CK ((a->x_in = mk2 (tr, N, C, error)) && (a->h1 = mk2 (tr, N, C, error)) && (a->q = mk2 (tr, N, HD, error)) &&
          (a->k = mk2 (tr, N, HD, error)) && (a->v = mk2 (tr, N, HD, error)) && (a->att = mk2 (tr, N, HD, error)) &&
          (a->x_ffn = mk2 (tr, N, C, error)) && (a->h3 = mk2 (tr, N, C, error)) && (a->u = mk2 (tr, N, F, error)) &&
          (a->a = mk2 (tr, N, F, error)) && (!m->gated || (a->g = mk2 (tr, N, F, error))));
      if (decoder)
        CK ((a->x_mid = mk2 (tr, N, C, error)) && (a->h2 = mk2 (tr, N, C, error)) && (a->cq = mk2 (tr, N, HD, error)) &&
            (a->ck = mk2 (tr, NE, HD, error)) && (a->cv = mk2 (tr, NE, HD, error)) &&
            (a->catt = mk2 (tr, N, HD, error)));
      a->ra = g_new0 (RowAtt, B);
      for (int b = 0; b < B; b++)
        CK ((a->ra[b].qh = mk3 (tr, H, T, D, error)) && (a->ra[b].kh = mk3 (tr, H, S, D, error)) &&
            (a->ra[b].vh = mk3 (tr, H, S, D, error)) && (a->ra[b].p = mk3 (tr, H, T, S, error)));
    }
  return TRUE;
}

HnSeq2SeqTrainer *
hn_seq2seq_trainer_new (HnSeq2Seq *m, int B, int S, int T, GError **error)
{
  if (m->n_experts || m->enc_attn != S2S_ENC_FULL)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training model_type \"%s\" is not supported: %s have no backward yet",
                   m->arch->model_type, m->n_experts ? "switch experts" : "long-input encoder attention masks");
      return NULL;
    }
  if (!m->t5 || m->bias_per_layer)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training model_type \"%s\" is not supported yet (t5 and mt5 are)",
                   m->arch->model_type);
      return NULL;
    }
  if (B < 1 || S < 1 || T < 1 || (gint64) B * MAX (S, T) > (1 << 16))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "a batch of %d rows of %d + %d tokens is out of range",
                   B, S, T);
      return NULL;
    }
  g_autoptr (HnSeq2SeqTrainer) tr = g_new0 (HnSeq2SeqTrainer, 1);
  tr->m = m, tr->B = B, tr->S = S, tr->T = T;
  tr->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  hn_params_init (&tr->ps);
  for (guint i = 0; i < m->owned->len; i++)
    if (!hn_params_add (&tr->ps, g_ptr_array_index (m->owned, i), error))
      return NULL;
  int H = m->enc.H, MX = MAX (S, T);
  gint64 C = m->C, HD = (gint64) H * m->D, F = MAX (m->enc.F, m->dec.F), NM = (gint64) B * MX, V = m->vocab;
  if (!stack_acts_new (tr, &tr->enc, &m->enc, FALSE, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                       error) ||
      !stack_acts_new (tr, &tr->dec, &m->dec, TRUE, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                       error))
    return NULL;
  if (!(tr->targets = mk (tr, HN_DTYPE_I32, 1, (gint64[]) { (gint64) B * T }, error)) ||
      !(tr->row_scale = mk (tr, HN_DTYPE_F32, 1, (gint64[]) { (gint64) B * T }, error)) ||
      !(tr->loss = mk (tr, HN_DTYPE_F32, 1, (gint64[]) { (gint64) B * T }, error)) ||
      !(tr->mean = mk (tr, HN_DTYPE_F32, 1, (gint64[]) { 1 }, error)) ||
      !(tr->logits = mk2 (tr, (gint64) B * T, V, error)) || !(tr->dX = mk2 (tr, NM, C, error)) ||
      !(tr->dtmp = mk2 (tr, NM, C, error)) || !(tr->dh = mk2 (tr, NM, C, error)) || !(tr->dq = mk2 (tr, NM, HD, error)) ||
      !(tr->dk = mk2 (tr, NM, HD, error)) || !(tr->dv = mk2 (tr, NM, HD, error)) ||
      !(tr->datt = mk2 (tr, NM, HD, error)) || !(tr->dg = mk2 (tr, NM, F, error)) || !(tr->du = mk2 (tr, NM, F, error)) ||
      !(tr->da = mk2 (tr, NM, F, error)) || !(tr->denc = mk2 (tr, (gint64) B * S, C, error)) ||
      !(tr->dbias = mk3 (tr, H, MX, MX, error)) || !(tr->dbias_t = mk2 (tr, (gint64) MX * MX, H, error)) ||
      !(tr->w_doh = mk3 (tr, H, MX, m->D, error)) || !(tr->w_dp = mk3 (tr, H, MX, MX, error)) ||
      !(tr->w_pd = mk3 (tr, H, MX, MX, error)) ||
      !(tr->w_dqh = mk3 (tr, H, MX, m->D, error)) || !(tr->w_dkh = mk3 (tr, H, MX, m->D, error)) ||
      !(tr->w_dvh = mk3 (tr, H, MX, m->D, error)) || !(tr->w_r = mk2 (tr, (gint64) H * MX, 1, error)) ||
      !(tr->stats = mk (tr, HN_DTYPE_F32, 1, (gint64[]) { 2 * NM * H }, error)) || !(tr->cmd = hn_cmd_new (m->ctx, error)))
    return NULL;
  if (!hn_params_zero (&tr->ps, tr->cmd, TRUE, error) || !hn_cmd_submit_wait (tr->cmd, error))
    return NULL;
  return g_steal_pointer (&tr);
}

/* ---------------------------------------------------------------- pieces */

static HnTensor *
rows (HnScratch *sc, HnTensor *t, gint64 r0, gint64 n, GError **error)
{
  return hn_scratch_rows (sc, t, r0, n, error);
}

static HnTensor *
shape3 (HnScratch *sc, HnTensor *t, gint64 a, gint64 b, gint64 c, GError **error)
{
  return hn_scratch_shape (sc, t, 3, (gint64[]) { a, b, c }, error);
}

static HnTensor *
prefix (HnScratch *sc, HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  return hn_scratch_prefix (sc, t, ndim, shape, error);
}

static const int swap01[] = { 1, 0, 2 };

/* Self-attention with the stack's bias of every row: att [N, HD] from q, k, v [N, HD]. */
static gboolean
biased_attention (HnSeq2SeqTrainer *tr, HnScratch *sc, StackActs *sa, LayerActs *a, gboolean causal, GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  gint64 T = sa->n_tok, S = sa->n_keys, H = m->enc.H, D = m->D;
  for (int b = 0; b < tr->B; b++)
    {
      RowAtt *r = &a->ra[b];
      HnTensor *q = shape3 (sc, rows (sc, a->q, b * T, T, error), T, H, D, error);
      HnTensor *k = shape3 (sc, rows (sc, a->k, b * S, S, error), S, H, D, error);
      HnTensor *v = shape3 (sc, rows (sc, a->v, b * S, S, error), S, H, D, error);
      HnTensor *o = shape3 (sc, rows (sc, a->att, b * T, T, error), T, H, D, error);
      HnTensor *oh = prefix (sc, tr->w_doh, 3, (gint64[]) { H, T, D }, error);
      CK (q && k && v && o && oh);
      HnSoftmaxParams sp = { 0 };
      sp.causal = causal;
      sp.mask = sa->bias;
      CK (hn_op_permute (cmd, r->qh, q, swap01, error) && hn_op_permute (cmd, r->kh, k, swap01, error) &&
          hn_op_permute (cmd, r->vh, v, swap01, error) &&
          hn_op_bmm (cmd, r->p, r->qh, r->kh, HN_MATMUL_TRANS_B, m->alpha, error) &&
          hn_op_softmax (cmd, r->p, r->p, &sp, error) && hn_op_bmm (cmd, oh, r->p, r->vh, HN_MATMUL_DEFAULT, 1.0f, error) &&
          hn_op_permute (cmd, o, oh, swap01, error));
    }
  return TRUE;
}

/* Backward of biased_attention: datt [N, HD] -> dq, dk, dv [N, HD]; the scores' gradient adds into dbias. */
static gboolean
biased_attention_back (HnSeq2SeqTrainer *tr, HnScratch *sc, StackActs *sa, LayerActs *a, HnTensor *dbias,
                       GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  gint64 T = sa->n_tok, S = sa->n_keys, H = m->enc.H, D = m->D;
  for (int b = 0; b < tr->B; b++)
    {
      RowAtt *r = &a->ra[b];
      HnTensor *dout = shape3 (sc, rows (sc, tr->datt, b * T, T, error), T, H, D, error);
      HnTensor *dq = shape3 (sc, rows (sc, tr->dq, b * T, T, error), T, H, D, error);
      HnTensor *dk = shape3 (sc, rows (sc, tr->dk, b * S, S, error), S, H, D, error);
      HnTensor *dv = shape3 (sc, rows (sc, tr->dv, b * S, S, error), S, H, D, error);
      HnTensor *doh = prefix (sc, tr->w_doh, 3, (gint64[]) { H, T, D }, error);
      HnTensor *dp = prefix (sc, tr->w_dp, 3, (gint64[]) { H, T, S }, error);
      HnTensor *dqh = prefix (sc, tr->w_dqh, 3, (gint64[]) { H, T, D }, error);
      HnTensor *dkh = prefix (sc, tr->w_dkh, 3, (gint64[]) { H, S, D }, error);
      HnTensor *dvh = prefix (sc, tr->w_dvh, 3, (gint64[]) { H, S, D }, error);
      HnTensor *rs = prefix (sc, tr->w_r, 3, (gint64[]) { H, T, 1 }, error);
      CK (dout && dq && dk && dv && doh && dp && dqh && dkh && dvh && rs);
      CK (hn_op_permute (cmd, doh, dout, swap01, error) &&
          hn_op_bmm (cmd, dp, doh, r->vh, HN_MATMUL_TRANS_B, 1.0f, error) &&   /* dP = dO·Vᵀ */
          hn_op_bmm (cmd, dvh, r->p, doh, HN_MATMUL_TRANS_A, 1.0f, error));   /* dV = Pᵀ·dO */
      /* dS = P · (dP - Σ_j P·dP) */
      HnTensor *pd = prefix (sc, tr->w_pd, 3, (gint64[]) { H, T, S }, error);
      CK (pd);
      CK (hn_op_mul (cmd, pd, dp, r->p, error) && hn_op_reduce (cmd, rs, pd, HN_REDUCE_SUM, error) &&
          hn_op_binary (cmd, dp, dp, rs, HN_BINARY_SUB, error) && hn_op_mul (cmd, dp, dp, r->p, error));
      CK (hn_op_add (cmd, dbias, dbias, dp, error));
      CK (hn_op_bmm (cmd, dqh, dp, r->kh, HN_MATMUL_DEFAULT, m->alpha, error) &&
          hn_op_bmm (cmd, dkh, dp, r->qh, HN_MATMUL_TRANS_A, m->alpha, error) &&
          hn_op_permute (cmd, dq, dqh, swap01, error) && hn_op_permute (cmd, dk, dkh, swap01, error) &&
          hn_op_permute (cmd, dv, dvh, swap01, error));
    }
  return TRUE;
}

static gboolean
rms (HnSeq2Seq *m, HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *w, GError **error)
{
  return hn_op_rmsnorm (cmd, out, in, w, m->eps, HN_NORM_DEFAULT, error);
}

/* x += mlp(rms(x)); d is [N, C] scratch */
static gboolean
mlp_forward (HnSeq2SeqTrainer *tr, const S2SLayer *lw, LayerActs *a, HnTensor *x, HnTensor *d, GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  CK (hn_op_copy (cmd, a->x_ffn, x, error) && rms (m, cmd, a->h3, x, lw->n3_w, error) &&
      hn_op_matmul (cmd, a->u, a->h3, lw->wi, lw->bi, error));
  if (lw->wg)
    CK (hn_op_matmul (cmd, a->g, a->h3, lw->wg, NULL, error) && hn_op_glu (cmd, a->a, a->g, a->u, m->act, error));
  else
    CK (hn_op_unary (cmd, a->a, a->u, m->act, error));
  CK (hn_op_matmul (cmd, d, a->a, lw->wd, lw->bd, error));
  return hn_op_add (cmd, x, x, d, error);
}

/* The stream's gradient dX through x += mlp(rms(x)). */
static gboolean
mlp_backward (HnSeq2SeqTrainer *tr, const S2SLayer *lw, LayerActs *a, HnTensor *dX, HnTensor *dh, HnTensor *dtmp,
              HnTensor *da, HnTensor *du, HnTensor *dg, GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  CK (hn_op_matmul_back (cmd, da, G (tr, lw->wd), G (tr, lw->bd), dX, a->a, lw->wd, 0, error));
  if (lw->wg)
    {
      CK (hn_op_glu_back (cmd, dg, du, da, a->g, a->u, m->act, error));
      CK (hn_op_matmul_back (cmd, dh, G (tr, lw->wg), NULL, dg, a->h3, lw->wg, 0, error) &&
          hn_op_matmul_back (cmd, dh, G (tr, lw->wi), G (tr, lw->bi), du, a->h3, lw->wi, HN_BACK_ACCUMULATE, error));
    }
  else
    CK (hn_op_unary_back (cmd, du, da, a->u, m->act, 0, error) &&
        hn_op_matmul_back (cmd, dh, G (tr, lw->wi), G (tr, lw->bi), du, a->h3, lw->wi, 0, error));
  CK (hn_op_rmsnorm_back (cmd, dtmp, G (tr, lw->n3_w), dh, a->x_ffn, lw->n3_w, tr->stats, m->eps, HN_NORM_DEFAULT, 0,
                          error));
  return hn_op_add (cmd, dX, dX, dtmp, error);
}

/* The bias [H, T, S] of a stack from its device table. */
static gboolean
make_bias (HnSeq2SeqTrainer *tr, HnScratch *sc, StackActs *sa, GError **error)
{
  HnTensor *bt = shape3 (sc, sa->bias_tmp, sa->n_tok, sa->n_keys, tr->m->enc.H, error);
  static const int to_hts[] = { 2, 0, 1 };
  return bt && hn_op_embedding (tr->cmd, sa->bias_tmp, sa->table, sa->buckets, error) &&
         hn_op_permute (tr->cmd, sa->bias, bt, to_hts, error);
}

/* dtable += dS gathered by bucket, from dbias [H, T, S]. */
static gboolean
bias_back (HnSeq2SeqTrainer *tr, HnScratch *sc, StackActs *sa, HnTensor *dbias, GError **error)
{
  gint64 T = sa->n_tok, S = sa->n_keys, H = tr->m->enc.H;
  static const int to_tsh[] = { 1, 2, 0 };
  HnTensor *dt = prefix (sc, tr->dbias_t, 3, (gint64[]) { T, S, H }, error);
  HnTensor *dt2 = dt ? prefix (sc, tr->dbias_t, 2, (gint64[]) { T * S, H }, error) : NULL;
  return dt2 && hn_op_permute (tr->cmd, dt, dbias, to_tsh, error) &&
         hn_op_embedding_back (tr->cmd, G (tr, sa->table), dt2, sa->buckets, error);
}

/* ---------------------------------------------------------------- forward / backward */

static gboolean
forward (HnSeq2SeqTrainer *tr, HnScratch *sc, GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  int B = tr->B;
  gint64 NE = (gint64) B * tr->S, ND = (gint64) B * tr->T, H = m->enc.H, D = m->D;
  StackActs *E = &tr->enc, *Dd = &tr->dec;
  HnTensor *hE = rows (sc, tr->dh, 0, NE, error), *hD = rows (sc, tr->dh, 0, ND, error); /* sublayer outputs */
  CK (hE && hD);
  /* encoder */
  CK (hn_op_embedding (cmd, E->x, m->shared, E->ids, error) && make_bias (tr, sc, E, error));
  for (int l = 0; l < m->enc.n_layer; l++)
    {
      const S2SLayer *lw = &m->enc.l[l];
      LayerActs *a = &E->la[l];
      CK (hn_op_copy (cmd, a->x_in, E->x, error) && rms (m, cmd, a->h1, E->x, lw->n1_w, error) &&
          hn_op_matmul (cmd, a->q, a->h1, lw->wq, NULL, error) && hn_op_matmul (cmd, a->k, a->h1, lw->wk, NULL, error) &&
          hn_op_matmul (cmd, a->v, a->h1, lw->wv, NULL, error) && biased_attention (tr, sc, E, a, FALSE, error) &&
          hn_op_matmul (cmd, hE, a->att, lw->wo, NULL, error) && hn_op_add (cmd, E->x, E->x, hE, error) &&
          mlp_forward (tr, lw, a, E->x, hE, error));
    }
  CK (hn_op_copy (cmd, E->x_final, E->x, error) && rms (m, cmd, E->out, E->x, m->enc.final_w, error));
  /* decoder */
  CK (hn_op_embedding (cmd, Dd->x, m->shared, Dd->ids, error) && make_bias (tr, sc, Dd, error));
  for (int l = 0; l < m->dec.n_layer; l++)
    {
      const S2SLayer *lw = &m->dec.l[l];
      LayerActs *a = &Dd->la[l];
      CK (hn_op_copy (cmd, a->x_in, Dd->x, error) && rms (m, cmd, a->h1, Dd->x, lw->n1_w, error) &&
          hn_op_matmul (cmd, a->q, a->h1, lw->wq, NULL, error) && hn_op_matmul (cmd, a->k, a->h1, lw->wk, NULL, error) &&
          hn_op_matmul (cmd, a->v, a->h1, lw->wv, NULL, error) && biased_attention (tr, sc, Dd, a, TRUE, error) &&
          hn_op_matmul (cmd, hD, a->att, lw->wo, NULL, error) && hn_op_add (cmd, Dd->x, Dd->x, hD, error));
      /* cross-attention over this row's encoder output */
      HnTensor *q4 = hn_scratch_shape (sc, a->cq, 4, (gint64[]) { B, tr->T, H, D }, error);
      HnTensor *k4 = hn_scratch_shape (sc, a->ck, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *v4 = hn_scratch_shape (sc, a->cv, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *o4 = hn_scratch_shape (sc, a->catt, 4, (gint64[]) { B, tr->T, H, D }, error);
      CK (q4 && k4 && v4 && o4);
      HnAttentionParams ap = { 0 };
      ap.scale = m->alpha;
      CK (hn_op_copy (cmd, a->x_mid, Dd->x, error) && rms (m, cmd, a->h2, Dd->x, lw->n2_w, error) &&
          hn_op_matmul (cmd, a->cq, a->h2, lw->cq, NULL, error) && hn_op_matmul (cmd, a->ck, E->out, lw->ck, NULL, error) &&
          hn_op_matmul (cmd, a->cv, E->out, lw->cv, NULL, error) && hn_op_attention (cmd, o4, q4, k4, v4, &ap, error) &&
          hn_op_matmul (cmd, hD, a->catt, lw->co, NULL, error) && hn_op_add (cmd, Dd->x, Dd->x, hD, error) &&
          mlp_forward (tr, lw, a, Dd->x, hD, error));
    }
  CK (hn_op_copy (cmd, Dd->x_final, Dd->x, error) && rms (m, cmd, Dd->out, Dd->x, m->dec.final_w, error));
  if (m->lm_scale != 1.0f)
    CK (hn_op_scale (cmd, Dd->out, Dd->out, m->lm_scale, 0.0f, error));
  return hn_op_matmul (cmd, tr->logits, Dd->out, m->lm_head, NULL, error) &&
         hn_op_cross_entropy (cmd, tr->loss, tr->mean, tr->logits, tr->targets, -100, error);
}

static gboolean
backward (HnSeq2SeqTrainer *tr, HnScratch *sc, GError **error)
{
  HnSeq2Seq *m = tr->m;
  HnCmd *cmd = tr->cmd;
  int B = tr->B;
  gint64 NE = (gint64) B * tr->S, ND = (gint64) B * tr->T, H = m->enc.H, D = m->D, C = m->C, HD = H * D;
  StackActs *E = &tr->enc, *Dd = &tr->dec;
  /* views of the shared gradient buffers at each stack's row count */
  HnTensor *dXd = rows (sc, tr->dX, 0, ND, error), *dtd = rows (sc, tr->dtmp, 0, ND, error);
  HnTensor *dhd = rows (sc, tr->dh, 0, ND, error), *dqd = rows (sc, tr->dq, 0, ND, error);
  HnTensor *dad = rows (sc, tr->datt, 0, ND, error), *dgd = rows (sc, tr->dg, 0, ND, error);
  HnTensor *dud = rows (sc, tr->du, 0, ND, error), *dAd = rows (sc, tr->da, 0, ND, error);
  HnTensor *dkE = rows (sc, tr->dk, 0, NE, error), *dvE = rows (sc, tr->dv, 0, NE, error);
  HnTensor *dbd = prefix (sc, tr->dbias, 3, (gint64[]) { H, tr->T, tr->T }, error);
  CK (dXd && dtd && dhd && dqd && dad && dgd && dud && dAd && dkE && dvE && dbd);
  /* head: logits = (scale · rms(x)) · sharedᵀ */
  CK (hn_op_cross_entropy_back (cmd, tr->logits, tr->logits, tr->targets, tr->row_scale, error) &&
      hn_op_matmul_back (cmd, dhd, G (tr, m->lm_head), NULL, tr->logits, Dd->out, m->lm_head, 0, error));
  if (m->lm_scale != 1.0f)
    CK (hn_op_scale (cmd, dhd, dhd, m->lm_scale, 0.0f, error));
  CK (hn_op_rmsnorm_back (cmd, dXd, G (tr, m->dec.final_w), dhd, Dd->x_final, m->dec.final_w, tr->stats, m->eps,
                          HN_NORM_DEFAULT, 0, error));
  CK (hn_op_fill (cmd, tr->denc, 0.0f, error) && hn_op_fill (cmd, dbd, 0.0f, error));
  for (int l = m->dec.n_layer - 1; l >= 0; l--)
    {
      const S2SLayer *lw = &m->dec.l[l];
      LayerActs *a = &Dd->la[l];
      CK (mlp_backward (tr, lw, a, dXd, dhd, dtd, dAd, dud, dgd, error));
      /* cross-attention */
      HnTensor *q4 = hn_scratch_shape (sc, a->cq, 4, (gint64[]) { B, tr->T, H, D }, error);
      HnTensor *k4 = hn_scratch_shape (sc, a->ck, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *v4 = hn_scratch_shape (sc, a->cv, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *dq4 = hn_scratch_shape (sc, dqd, 4, (gint64[]) { B, tr->T, H, D }, error);
      HnTensor *dk4 = hn_scratch_shape (sc, dkE, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *dv4 = hn_scratch_shape (sc, dvE, 4, (gint64[]) { B, tr->S, H, D }, error);
      HnTensor *do4 = hn_scratch_shape (sc, dad, 4, (gint64[]) { B, tr->T, H, D }, error);
      CK (q4 && k4 && v4 && dq4 && dk4 && dv4 && do4);
      HnAttentionParams ap = { 0 };
      ap.scale = m->alpha;
      CK (hn_op_matmul_back (cmd, dad, G (tr, lw->co), NULL, dXd, a->catt, lw->co, 0, error) &&
          hn_op_attention_back (cmd, dq4, dk4, dv4, do4, q4, k4, v4, tr->stats, &ap, 0, error) &&
          hn_op_matmul_back (cmd, tr->denc, G (tr, lw->ck), NULL, dkE, E->out, lw->ck, HN_BACK_ACCUMULATE, error) &&
          hn_op_matmul_back (cmd, tr->denc, G (tr, lw->cv), NULL, dvE, E->out, lw->cv, HN_BACK_ACCUMULATE, error) &&
          hn_op_matmul_back (cmd, dhd, G (tr, lw->cq), NULL, dqd, a->h2, lw->cq, 0, error) &&
          hn_op_rmsnorm_back (cmd, dtd, G (tr, lw->n2_w), dhd, a->x_mid, lw->n2_w, tr->stats, m->eps, HN_NORM_DEFAULT, 0,
                              error) &&
          hn_op_add (cmd, dXd, dXd, dtd, error));
      /* self-attention with the causal bias */
      HnTensor *dkd = rows (sc, tr->dk, 0, ND, error), *dvd = rows (sc, tr->dv, 0, ND, error);
      CK (dkd && dvd);
      CK (hn_op_matmul_back (cmd, dad, G (tr, lw->wo), NULL, dXd, a->att, lw->wo, 0, error) &&
          biased_attention_back (tr, sc, Dd, a, dbd, error) &&
          hn_op_matmul_back (cmd, dhd, G (tr, lw->wq), NULL, dqd, a->h1, lw->wq, 0, error) &&
          hn_op_matmul_back (cmd, dhd, G (tr, lw->wk), NULL, dkd, a->h1, lw->wk, HN_BACK_ACCUMULATE, error) &&
          hn_op_matmul_back (cmd, dhd, G (tr, lw->wv), NULL, dvd, a->h1, lw->wv, HN_BACK_ACCUMULATE, error) &&
          hn_op_rmsnorm_back (cmd, dtd, G (tr, lw->n1_w), dhd, a->x_in, lw->n1_w, tr->stats, m->eps, HN_NORM_DEFAULT, 0,
                              error) &&
          hn_op_add (cmd, dXd, dXd, dtd, error));
    }
  CK (bias_back (tr, sc, Dd, dbd, error) && hn_op_embedding_back (cmd, G (tr, m->shared), dXd, Dd->ids, error));

  /* encoder: its output's gradient came from every cross-attention */
  HnTensor *dXe = rows (sc, tr->dX, 0, NE, error), *dte = rows (sc, tr->dtmp, 0, NE, error);
  HnTensor *dhe = rows (sc, tr->dh, 0, NE, error), *dqe = rows (sc, tr->dq, 0, NE, error);
  HnTensor *dae = rows (sc, tr->datt, 0, NE, error), *dge = rows (sc, tr->dg, 0, NE, error);
  HnTensor *due = rows (sc, tr->du, 0, NE, error), *dAe = rows (sc, tr->da, 0, NE, error);
  HnTensor *dbe = prefix (sc, tr->dbias, 3, (gint64[]) { H, tr->S, tr->S }, error);
  CK (dXe && dte && dhe && dqe && dae && dge && due && dAe && dbe);
  CK (hn_op_rmsnorm_back (cmd, dXe, G (tr, m->enc.final_w), tr->denc, E->x_final, m->enc.final_w, tr->stats, m->eps,
                          HN_NORM_DEFAULT, 0, error) &&
      hn_op_fill (cmd, dbe, 0.0f, error));
  for (int l = m->enc.n_layer - 1; l >= 0; l--)
    {
      const S2SLayer *lw = &m->enc.l[l];
      LayerActs *a = &E->la[l];
      CK (mlp_backward (tr, lw, a, dXe, dhe, dte, dAe, due, dge, error));
      CK (hn_op_matmul_back (cmd, dae, G (tr, lw->wo), NULL, dXe, a->att, lw->wo, 0, error) &&
          biased_attention_back (tr, sc, E, a, dbe, error) &&
          hn_op_matmul_back (cmd, dhe, G (tr, lw->wq), NULL, dqe, a->h1, lw->wq, 0, error) &&
          hn_op_matmul_back (cmd, dhe, G (tr, lw->wk), NULL, dkE, a->h1, lw->wk, HN_BACK_ACCUMULATE, error) &&
          hn_op_matmul_back (cmd, dhe, G (tr, lw->wv), NULL, dvE, a->h1, lw->wv, HN_BACK_ACCUMULATE, error) &&
          hn_op_rmsnorm_back (cmd, dte, G (tr, lw->n1_w), dhe, a->x_in, lw->n1_w, tr->stats, m->eps, HN_NORM_DEFAULT, 0,
                              error) &&
          hn_op_add (cmd, dXe, dXe, dte, error));
    }
  (void) C, (void) HD;
  return bias_back (tr, sc, E, dbe, error) && hn_op_embedding_back (cmd, G (tr, m->shared), dXe, E->ids, error);
}

gboolean
hn_seq2seq_trainer_step (HnSeq2SeqTrainer *tr, const int32_t *src, const int32_t *labels, const HnSeq2SeqTrainStep *opt,
                         double *loss, GError **error)
{
  HnSeq2Seq *m = tr->m;
  int B = tr->B, S = tr->S, T = tr->T;
  int pad = m->pad >= 0 ? m->pad : 0;
  g_autofree int32_t *dec = g_new (int32_t, B * T);
  g_autofree float *scale = g_new0 (float, B * T);
  int n_valid = 0;
  for (int i = 0; i < B * S; i++)
    if (src[i] < 0 || src[i] >= m->vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "input id %d at %d is outside the vocabulary", src[i], i);
        return FALSE;
      }
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      {
        int32_t l = labels[b * T + t];
        if (l != -100 && (l < 0 || l >= m->vocab))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "label %d is neither -100 nor a token id", l);
            return FALSE;
          }
        n_valid += l != -100;
        /* shift right: the decoder sees decoder_start, then the labels (-100 as pad) */
        int32_t prev = t == 0 ? m->dec_start : labels[b * T + t - 1];
        dec[b * T + t] = prev == -100 ? pad : prev;
      }
  if (!n_valid)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "every label of the batch is -100 (nothing to learn)");
      return FALSE;
    }
  for (int i = 0; i < B * T; i++)
    scale[i] = labels[i] != -100 ? 1.0f / (float) n_valid : 0.0f;
  CK (hn_tensor_upload_i32 (tr->enc.ids, src, (gsize) B * S, error) &&
      hn_tensor_upload_i32 (tr->dec.ids, dec, (gsize) B * T, error) &&
      hn_tensor_upload_i32 (tr->targets, labels, (gsize) B * T, error) &&
      hn_tensor_upload_f32 (tr->row_scale, scale, (gsize) B * T, error));
  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  HnAdamwScalars as;
  hn_adamw_scalars (&as, opt->step, opt->lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay);
  float clip = 1.0f;
  gboolean ok = hn_params_zero (&tr->ps, tr->cmd, FALSE, error) && forward (tr, &sc, error) &&
                backward (tr, &sc, error) &&
                hn_params_clip (&tr->ps, tr->cmd, opt->max_grad_norm, &tr->grad_norm, &clip, error) &&
                hn_params_adamw (&tr->ps, tr->cmd, &as, clip, error) && hn_cmd_submit_wait (tr->cmd, error);
  if (!ok)
    hn_cmd_reset (tr->cmd);
  hn_scratch_clear (&sc);
  float mean = 0;
  ok = ok && hn_tensor_download_f32 (tr->mean, &mean, 1, error);
  /* the host copies of the bias tables follow the trained ones (generation reads them) */
  ok = ok && hn_tensor_download_f32 (tr->enc.table, m->enc.l[0].rel, (gsize) tr->enc.table->n, error) &&
       hn_tensor_download_f32 (tr->dec.table, m->dec.l[0].rel, (gsize) tr->dec.table->n, error);
  if (ok)
    *loss = mean;
  return ok;
}

HnTensor *
hn_seq2seq_trainer_get_bias_table (HnSeq2SeqTrainer *tr, gboolean decoder)
{
  return decoder ? tr->dec.table : tr->enc.table;
}

HnTensor *const *
hn_seq2seq_get_weights (HnSeq2Seq *m, guint *n)
{
  *n = m->owned->len;
  return (HnTensor *const *) m->owned->pdata;
}

double
hn_seq2seq_trainer_get_grad_norm (HnSeq2SeqTrainer *tr)
{
  return tr->grad_norm;
}
