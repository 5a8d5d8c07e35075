/* MobileBertForMaskedLM (hn_encoder_load picks it by its name scheme): a
 * 3-gram embedding transform, layers that attend and run their MLPs in a
 * narrow bottleneck between two projections of the wide hidden state, NoNorm
 * (x·w + b) in place of LayerNorm, extra stacked FFNs before the last MLP,
 * and a head whose decoder is the word embeddings widened by a dense block.
 * Built for the published configuration (google/mobilebert-uncased): shared
 * query/key bottleneck, values from the wide state, no_norm, trigram input;
 * any other switch fails closed naming it. */
#include "base/hn-error.h"
#include "encdec/encdec-private.h"
#include "encdec/encoder-private.h"

#include <math.h>
#include <string.h>

typedef struct {
  HnTensor *w, *b;   /* intermediate.dense [F, T] */
  HnTensor *wo, *bo; /* output.dense [T, F] */
  HnTensor *nw, *nb; /* output.LayerNorm: NoNorm [T] */
} MobFfn;

typedef struct {
  HnTensor *in_w, *in_b, *in_nw, *in_nb;     /* bottleneck.input: [I, C], NoNorm [I] (the residual) */
  HnTensor *qk_w, *qk_b, *qk_nw, *qk_nb;     /* bottleneck.attention: [I, C], NoNorm [I] (query/key input) */
  HnTensor *wq, *bq, *wk, *bk, *wv, *bv;     /* [T, I], [T, I], [T, C] */
  HnTensor *wo, *bo, *ao_nw, *ao_nb;         /* attention.output: [T, T], NoNorm [T] */
  MobFfn *ffn;                               /* [n_ffn]: the stacked FFNs, then the layer's own MLP */
  HnTensor *ob_w, *ob_b, *ob_nw, *ob_nb;     /* output.bottleneck: [C, T], NoNorm [C] */
} MobLayer;

struct _HnMobileBert {
  int T, I, n_ffn; /* true_hidden_size, intra_bottleneck_size, num_feedforward_networks */
  int n_layer;
  HnTensor *emb_w, *emb_b; /* embedding_transformation [C, 3E] */
  MobLayer *layers;
};

void
hn_mobilebert_free (HnMobileBert *mb)
{
  if (!mb)
    return;
  for (int i = 0; mb->layers && i < mb->n_layer; i++)
    g_free (mb->layers[i].ffn);
  g_free (mb->layers);
  g_free (mb);
}

/* The configuration switches this graph is built for; anything else is refused by name. */
static gboolean
check_switches (const HnModelConfig *cfg, GError **error)
{
  static const struct {
    const char *key;
    gboolean dflt, want;
  } sw[] = {
    { "trigram_input", TRUE, TRUE },
    { "use_bottleneck", TRUE, TRUE },
    { "key_query_shared_bottleneck", TRUE, TRUE },
    { "use_bottleneck_attention", FALSE, FALSE },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (sw); i++)
    {
      gboolean v;
      CK (hn_encoder_cfg_bool (cfg, sw[i].key, sw[i].dflt, &v, error));
      if (v != sw[i].want)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: mobilebert with %s %s is not built yet", cfg->path,
                       sw[i].key, v ? "true" : "false");
          return FALSE;
        }
    }
  const char *nt = hn_model_config_get_string (cfg, "normalization_type");
  if (nt && strcmp (nt, "no_norm") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: mobilebert normalization_type \"%s\" is not built yet (only no_norm)", cfg->path, nt);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_mobilebert_load (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  CK (check_switches (cfg, error));
  gint64 T, I, n_ffn;
  CK (hn_encoder_cfg_int (cfg, "true_hidden_size", 128, &T, error) && hn_encoder_cfg_int (cfg, "intra_bottleneck_size", 128, &I, error) &&
      hn_encoder_cfg_int (cfg, "num_feedforward_networks", 4, &n_ffn, error));
  gint64 C = m->C, E = m->E, F = m->F, V = m->vocab;
  /* the attention residual adds the input bottleneck to a [T] result, so the two widths must agree */
  if (T < 1 || T > C || T % m->H || I != T || n_ffn < 1 || n_ffn > 64 || E > C)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: mobilebert true_hidden_size %" G_GINT64_FORMAT ", intra_bottleneck_size %" G_GINT64_FORMAT
                   ", num_feedforward_networks %" G_GINT64_FORMAT ", embedding_size %d do not fit hidden_size %d"
                   " and %d heads", cfg->path, T, I, n_ffn, m->E, m->C, m->H);
      return FALSE;
    }
  HnMobileBert *mb = m->mobile = g_new0 (HnMobileBert, 1);
  mb->T = (int) T, mb->I = (int) I, mb->n_ffn = (int) n_ffn;
  mb->n_layer = m->n_layer;
  m->D = (int) (T / m->H);

  const char *ep = "mobilebert.embeddings.";
  CK (hn_wl_matrix (L, "mobilebert.embeddings.word_embeddings.weight", V, E, TRUE, &m->word, error));
  const HnSafetensorInfo *pt = hn_wl_find (L, "mobilebert.embeddings.position_embeddings.weight", TRUE, error);
  CK (pt);
  if (pt->ndim == 2 && pt->shape[0] >= 1)
    m->n_pos = (int) pt->shape[0];
  CK (hn_wl_matrix (L, pt->name, m->n_pos, C, TRUE, &m->pos, error) &&
      hn_wl_matrix (L, "mobilebert.embeddings.token_type_embeddings.weight", m->type_vocab, C, TRUE, &m->type,
                    error) &&
      hn_wl_linear (L, ep, "embedding_transformation", C, 3 * E, &mb->emb_w, &mb->emb_b, error) &&
      hn_wl_norm (L, ep, "LayerNorm", C, &m->emb_ln_w, &m->emb_ln_b, error));

  mb->layers = g_new0 (MobLayer, m->n_layer);
  for (int i = 0; i < m->n_layer; i++)
    {
      MobLayer *lw = &mb->layers[i];
      g_autofree char *p = g_strdup_printf ("mobilebert.encoder.layer.%d.", i);
      CK (hn_wl_linear (L, p, "bottleneck.input.dense", I, C, &lw->in_w, &lw->in_b, error) &&
          hn_wl_norm (L, p, "bottleneck.input.LayerNorm", I, &lw->in_nw, &lw->in_nb, error) &&
          hn_wl_linear (L, p, "bottleneck.attention.dense", I, C, &lw->qk_w, &lw->qk_b, error) &&
          hn_wl_norm (L, p, "bottleneck.attention.LayerNorm", I, &lw->qk_nw, &lw->qk_nb, error) &&
          hn_wl_linear (L, p, "attention.self.query", T, I, &lw->wq, &lw->bq, error) &&
          hn_wl_linear (L, p, "attention.self.key", T, I, &lw->wk, &lw->bk, error) &&
          hn_wl_linear (L, p, "attention.self.value", T, C, &lw->wv, &lw->bv, error) &&
          hn_wl_linear (L, p, "attention.output.dense", T, T, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, p, "attention.output.LayerNorm", T, &lw->ao_nw, &lw->ao_nb, error) &&
          hn_wl_linear (L, p, "output.bottleneck.dense", C, T, &lw->ob_w, &lw->ob_b, error) &&
          hn_wl_norm (L, p, "output.bottleneck.LayerNorm", C, &lw->ob_nw, &lw->ob_nb, error));
      lw->ffn = g_new0 (MobFfn, n_ffn);
      for (int j = 0; j < n_ffn; j++)
        {
          /* ffn.0 .. ffn.{n-2} run first; the layer's own intermediate / output is the last */
          MobFfn *f = &lw->ffn[j];
          g_autofree char *fp = j < n_ffn - 1 ? g_strdup_printf ("%sffn.%d.", p, j) : g_strdup (p);
          CK (hn_wl_linear (L, fp, "intermediate.dense", F, T, &f->w, &f->b, error) &&
              hn_wl_linear (L, fp, "output.dense", T, F, &f->wo, &f->bo, error) &&
              hn_wl_norm (L, fp, "output.LayerNorm", T, &f->nw, &f->nb, error));
        }
    }

  /* the head: transform (dense, act, LayerNorm), then [word embeddings | dense] as one [V, C] decoder */
  const char *hp = "cls.predictions.";
  CK (hn_wl_linear (L, hp, "transform.dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, hp, "transform.LayerNorm", C, &m->head_ln_w, &m->head_ln_b, error));
  g_autofree float *word = NULL;
  if (cfg->tie_word_embeddings == FALSE)
    word = hn_wl_host_matrix (L, "cls.predictions.decoder.weight", V, E, error);
  else
    {
      hn_wl_find (L, "cls.predictions.decoder.weight", FALSE, NULL); /* tied to the word embeddings */
      word = hn_wl_host_matrix (L, "mobilebert.embeddings.word_embeddings.weight", V, E, error);
    }
  CK (word);
  g_autofree float *extra = E < C ? hn_wl_host_matrix (L, "cls.predictions.dense.weight", C - E, V, error) : NULL;
  CK (E == C || extra);
  g_autofree float *dec = g_new (float, (gsize) (V * C));
  for (gint64 v = 0; v < V; v++)
    {
      memcpy (dec + v * C, word + v * E, sizeof (float) * (gsize) E);
      for (gint64 c = 0; c < C - E; c++)
        dec[v * C + E + c] = extra[c * V + v];
    }
  CK ((m->dec_w = hn_wl_from_f32 (L, "mobilebert.decoder", 2, (gint64[]) { V, C }, dec, error)));
  CK (hn_wl_vector (L, "cls.predictions.bias", V, TRUE, &m->dec_b, error));
  hn_wl_find (L, "cls.predictions.decoder.bias", FALSE, NULL); /* the same bias, tied */
  return TRUE;
}

/* ---------------------------------------------------------------- forward */

static HnTensor *
linear (HnCmd *cmd, HnScratch *sc, const char *name, HnTensor *x, HnTensor *w, HnTensor *b, GError **error)
{
  HnTensor *y = hn_scratch_new (sc, name, HN_DTYPE_F32, 2, (gint64[]) { x->shape[0], w->shape[0] }, error);
  return y && hn_op_matmul (cmd, y, x, w, b, error) ? y : NULL;
}

/* MobileBERT's NoNorm: out = x · w + b (elementwise over the last dim). */
static gboolean
no_norm (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, HnTensor *b, GError **error)
{
  return hn_op_mul (cmd, out, x, w, error) && hn_op_add (cmd, out, out, b, error);
}

/* NoNorm(x·wᵀ + b + residual) in a new [N, rows of w] temporary. */
static HnTensor *
dense_add_norm (HnCmd *cmd, HnScratch *sc, const char *name, HnTensor *x, HnTensor *w, HnTensor *b,
                HnTensor *residual, HnTensor *nw, HnTensor *nb, GError **error)
{
  HnTensor *y = linear (cmd, sc, name, x, w, b, error);
  return y && hn_op_add (cmd, y, y, residual, error) && no_norm (cmd, y, y, nw, nb, error) ? y : NULL;
}

static gboolean
record_layer (HnEncoder *m, HnCmd *cmd, HnScratch *sc, const MobLayer *lw, HnTensor *x, GError **error)
{
  const HnMobileBert *mb = m->mobile;
  gint64 N = x->shape[0], H = m->H, D = m->D;
  /* the bottlenecks: the residual of the attention, and the shared query/key input */
  HnTensor *li = linear (cmd, sc, "mob.li", x, lw->in_w, lw->in_b, error);
  CK (li && no_norm (cmd, li, li, lw->in_nw, lw->in_nb, error));
  HnTensor *qk = linear (cmd, sc, "mob.qk", x, lw->qk_w, lw->qk_b, error);
  CK (qk && no_norm (cmd, qk, qk, lw->qk_nw, lw->qk_nb, error));
  HnTensor *q = linear (cmd, sc, "mob.q", qk, lw->wq, lw->bq, error);
  HnTensor *k = q ? linear (cmd, sc, "mob.k", qk, lw->wk, lw->bk, error) : NULL;
  HnTensor *v = k ? linear (cmd, sc, "mob.v", x, lw->wv, lw->bv, error) : NULL; /* values from the wide state */
  CK (v);
  gint64 s3[] = { N, H, D };
  HnTensor *q3 = hn_scratch_shape (sc, q, 3, s3, error), *k3 = hn_scratch_shape (sc, k, 3, s3, error);
  HnTensor *v3 = hn_scratch_shape (sc, v, 3, s3, error);
  HnTensor *att = hn_scratch_new (sc, "mob.att", HN_DTYPE_F32, 3, s3, error);
  CK (q3 && k3 && v3 && att);
  CK (hn_encdec_attend (cmd, sc, NULL, att, q3, k3, v3, 1.0f / sqrtf ((float) D), NULL, NULL, FALSE, 0, error));
  HnTensor *att2 = hn_scratch_shape (sc, att, 2, (gint64[]) { N, mb->T }, error);
  CK (att2);
  HnTensor *a = dense_add_norm (cmd, sc, "mob.ao", att2, lw->wo, lw->bo, li, lw->ao_nw, lw->ao_nb, error);
  CK (a);
  /* the stacked FFNs, the last one the layer's own MLP: a = NoNorm(down(act(up(a))) + a) */
  for (int j = 0; j < mb->n_ffn; j++)
    {
      const MobFfn *f = &lw->ffn[j];
      HnTensor *h = linear (cmd, sc, "mob.up", a, f->w, f->b, error);
      CK (h && hn_op_unary (cmd, h, h, m->act, error));
      CK ((a = dense_add_norm (cmd, sc, "mob.down", h, f->wo, f->bo, a, f->nw, f->nb, error)));
    }
  /* back to the wide state, with the layer's input as the residual */
  HnTensor *y = dense_add_norm (cmd, sc, "mob.ob", a, lw->ob_w, lw->ob_b, x, lw->ob_nw, lw->ob_nb, error);
  return y && hn_op_copy (cmd, x, y, error);
}

gboolean
hn_mobilebert_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits,
                      GError **error)
{
  CK (hn_encoder_check_ids (m, ids, type_ids, n, error));
  const HnMobileBert *mb = m->mobile;
  gint64 N = n, C = m->C, E = m->E;
  /* host inputs: the ids of the next and previous tokens (-1 past either end: a zero row), positions, types */
  g_autofree int32_t *next = g_new (int32_t, n), *prev = g_new (int32_t, n);
  g_autofree int32_t *pos = g_new (int32_t, n), *tt = g_new0 (int32_t, n);
  for (int i = 0; i < n; i++)
    {
      next[i] = i + 1 < n ? ids[i + 1] : -1;
      prev[i] = i > 0 ? ids[i - 1] : -1;
    }
  hn_encoder_positions (m, ids, n, pos);
  if (type_ids)
    memcpy (tt, type_ids, sizeof (int32_t) * (gsize) n);
  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  g_autoptr (HnCmd) cmd = hn_cmd_new (m->ctx, error);
  gboolean ok = cmd != NULL;
  const int32_t *host[] = { next, ids, prev, pos, tt };
  HnTensor *in[5] = { NULL };
  for (int i = 0; ok && i < 5; i++)
    ok = (in[i] = hn_scratch_new (&sc, "mob.ids", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) &&
         hn_tensor_upload_i32 (in[i], host[i], (gsize) n, error);
  /* the 3-gram: [next | this | previous] token embeddings [N, 3E], then embedding_transformation */
  HnTensor *g[3] = { NULL }, *g2 = NULL, *g3 = NULL, *x = NULL, *e = NULL;
  for (int i = 0; ok && i < 3; i++)
    ok = (g[i] = hn_scratch_new (&sc, "mob.gram", HN_DTYPE_F32, 2, (gint64[]) { N, E }, error)) &&
         hn_op_embedding (cmd, g[i], m->word, in[i], error);
  ok = ok && (g2 = hn_scratch_new (&sc, "mob.gram2", HN_DTYPE_F32, 2, (gint64[]) { N, 2 * E }, error)) &&
       (g3 = hn_scratch_new (&sc, "mob.gram3", HN_DTYPE_F32, 2, (gint64[]) { N, 3 * E }, error)) &&
       hn_op_concat (cmd, g2, g[0], g[1], 1, error) && hn_op_concat (cmd, g3, g2, g[2], 1, error) &&
       (x = hn_scratch_new (&sc, "mob.x", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
       (e = hn_scratch_new (&sc, "mob.emb", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
       hn_op_matmul (cmd, x, g3, mb->emb_w, mb->emb_b, error) && hn_op_embedding (cmd, e, m->pos, in[3], error) &&
       hn_op_add (cmd, x, x, e, error) && hn_op_embedding (cmd, e, m->type, in[4], error) &&
       hn_op_add (cmd, x, x, e, error) && no_norm (cmd, x, x, m->emb_ln_w, m->emb_ln_b, error);
  for (int l = 0; ok && l < m->n_layer; l++)
    ok = record_layer (m, cmd, &sc, &mb->layers[l], x, error);
  HnTensor *t = NULL, *lg = NULL;
  ok = ok && (t = linear (cmd, &sc, "mob.head", x, m->head_w, m->head_b, error)) &&
       hn_op_unary (cmd, t, t, m->head_act, error) &&
       hn_op_layernorm (cmd, t, t, m->head_ln_w, m->head_ln_b, m->head_eps, error) &&
       (lg = hn_scratch_new (&sc, "mob.logits", HN_DTYPE_F32, 2, (gint64[]) { N, m->vocab }, error)) &&
       hn_op_matmul (cmd, lg, t, m->dec_w, m->dec_b, error) && hn_cmd_submit_wait (cmd, error) &&
       hn_tensor_download_f32 (lg, logits, (gsize) N * m->vocab, error);
  hn_scratch_clear (&sc);
  return ok;
}
