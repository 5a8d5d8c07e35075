/* DebertaForMaskedLM and DebertaV2ForMaskedLM (hn_encoder_load picks them by
 * their name scheme): bert's post-norm layers and legacy head around
 * disentangled attention. Each head's scores add content-to-position (query
 * i against the projected relative embedding of i - j) and position-to-
 * content (key j against it) terms to q·k, all over sqrt(D · 3):
 *
 *   s[h,i,j] = (q_i·k_j + q_i·pk[idx(i,j)] + k_j·pq[idx(i,j)]) / sqrt(3 D)
 *   idx(i,j) = clamp(b(i - j) + span, 0, 2 span - 1)
 *
 * with b v2's log buckets (span position_buckets) or the identity (deberta,
 * and v2 without buckets: span max_relative_positions; deberta's window of
 * min(N, span) rows around the middle of the table picks the same rows). The two [H, N, 2 span] products are
 * gathered into one [H, N, N] bias through an index table built on the host.
 * Built for relative attention with both c2p and p2c, separate position
 * projections, position-biased input and no token types; another switch
 * fails closed naming it. */
#include "base/hn-error.h"
#include "encdec/encdec-private.h"
#include "encdec/encoder-private.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

typedef struct {
  HnTensor *pk_w, *pk_b; /* c2p: the relative embeddings' key projection [C, C] (deberta: no bias) */
  HnTensor *pq_w, *pq_b; /* p2c: their query projection [C, C] */
} DebLayer;

struct _HnDeberta {
  gboolean v2;
  int span;         /* attention span: idx in [0, 2 span) */
  int buckets, max_rel; /* v2 log buckets (buckets > 0) up to max_rel */
  HnTensor *rel;    /* encoder.rel_embeddings [2 span, C] */
  DebLayer *layers; /* [n_layer] */
};

void
hn_deberta_free (HnDeberta *d)
{
  if (!d)
    return;
  g_free (d->layers);
  g_free (d);
}

static gboolean
refuse (const HnModelConfig *cfg, const char *mt, const char *what, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s with %s is not built yet", cfg->path, mt, what);
  return FALSE;
}

/* pos_att_type: a list, or the older "c2p|p2c" string; both terms must be there. */
static gboolean
check_pos_att_type (const HnModelConfig *cfg, const char *mt, GError **error)
{
  JsonObject *o = hn_model_config_get_raw (cfg);
  JsonNode *n = o ? json_object_get_member (o, "pos_att_type") : NULL;
  gboolean c2p = FALSE, p2c = FALSE, other = FALSE;
  g_auto (GStrv) parts = NULL;
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING)
    parts = g_strsplit (json_node_get_string (n), "|", -1);
  else if (n && JSON_NODE_HOLDS_ARRAY (n))
    {
      JsonArray *a = json_node_get_array (n);
      parts = g_new0 (char *, json_array_get_length (a) + 1);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          parts[i] = g_strdup (JSON_NODE_HOLDS_VALUE (e) && json_node_get_value_type (e) == G_TYPE_STRING
                                 ? json_node_get_string (e) : "?");
        }
    }
  for (char **p = parts; p && *p; p++)
    {
      g_autofree char *t = g_ascii_strdown (g_strstrip (*p), -1);
      if (strcmp (t, "c2p") == 0)
        c2p = TRUE;
      else if (strcmp (t, "p2c") == 0)
        p2c = TRUE;
      else if (*t)
        other = TRUE;
    }
  if (!c2p || !p2c || other)
    return refuse (cfg, mt, "pos_att_type other than [c2p, p2c]", error);
  return TRUE;
}

/* The configuration switches this graph is built for. */
static gboolean
check_switches (HnEncoder *m, const HnModelConfig *cfg, gboolean v2, GError **error)
{
  const char *mt = m->arch->model_type;
  static const struct {
    const char *key;
    gboolean dflt, want, v2_only, v1_only;
  } sw[] = {
    { "relative_attention", FALSE, TRUE, FALSE, FALSE },
    { "position_biased_input", TRUE, TRUE, FALSE, FALSE },
    { "legacy", TRUE, TRUE, FALSE, FALSE },
    { "share_att_key", FALSE, FALSE, TRUE, FALSE },
    { "talking_head", FALSE, FALSE, FALSE, TRUE },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (sw); i++)
    {
      if ((sw[i].v2_only && !v2) || (sw[i].v1_only && v2))
        continue;
      gboolean v;
      CK (hn_encoder_cfg_bool (cfg, sw[i].key, sw[i].dflt, &v, error));
      if (v != sw[i].want)
        {
          g_autofree char *what = g_strdup_printf ("%s %s", sw[i].key, v ? "true" : "false");
          return refuse (cfg, mt, what, error);
        }
    }
  CK (check_pos_att_type (cfg, mt, error));
  gint64 conv, head;
  CK (hn_encoder_cfg_int (cfg, "conv_kernel_size", 0, &conv, error) && hn_encoder_cfg_int (cfg, "attention_head_size", m->D, &head, error));
  if (conv > 0)
    return refuse (cfg, mt, "conv_kernel_size > 0 (the first layer's convolution)", error);
  if (head != m->D)
    return refuse (cfg, mt, "attention_head_size other than hidden_size / heads", error);
  const char *norm = hn_model_config_get_string (cfg, "norm_rel_ebd");
  if (norm && g_ascii_strcasecmp (norm, "none") != 0)
    return refuse (cfg, mt, "norm_rel_ebd (normed relative embeddings)", error);
  if (m->type_vocab > 0)
    return refuse (cfg, mt, "token type embeddings (type_vocab_size > 0)", error);
  if (m->E != m->C)
    return refuse (cfg, mt, "embedding_size other than hidden_size", error);
  return TRUE;
}

/* deberta's in_proj [3C, C] holds each head's q, k and v rows in turn: rows [h·3D + w·D, +D) of part w. */
static gboolean
split_in_proj (HnWLoader *L, const char *name, gint64 C, gint64 H, HnTensor **w3[3], GError **error)
{
  g_autofree float *src = hn_wl_host_matrix (L, name, 3 * C, C, error);
  CK (src);
  gint64 D = C / H;
  g_autofree float *part = g_new (float, (gsize) (C * C));
  for (int w = 0; w < 3; w++)
    {
      for (gint64 h = 0; h < H; h++)
        memcpy (part + h * D * C, src + (h * 3 * D + w * D) * C, sizeof (float) * (gsize) (D * C));
      CK ((*w3[w] = hn_wl_from_f32 (L, name, 2, (gint64[]) { C, C }, part, error)));
    }
  return TRUE;
}

gboolean
hn_deberta_load (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  gboolean v2 = m->arch->names == HN_NAMES_DEBERTA_V2;
  CK (check_switches (m, cfg, v2, error));
  gint64 C = m->C, F = m->F, V = m->vocab;
  gint64 max_rel, buckets = -1;
  CK (hn_encoder_cfg_int (cfg, "max_relative_positions", -1, &max_rel, error));
  if (v2)
    CK (hn_encoder_cfg_int (cfg, "position_buckets", -1, &buckets, error));
  if (max_rel < 1)
    max_rel = cfg->max_position_embeddings;
  HnDeberta *d = m->deberta = g_new0 (HnDeberta, 1);
  d->v2 = v2;
  d->max_rel = (int) MIN (max_rel, 1 << 20);
  d->buckets = (int) MIN (buckets, 1 << 20);
  d->span = d->buckets > 0 ? d->buckets : d->max_rel;
  if (d->max_rel < 1 || (d->buckets > 0 && (d->buckets < 2 || d->max_rel < 2)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: max_relative_positions %d / position_buckets %d are out of "
                   "range", cfg->path, d->max_rel, d->buckets);
      return FALSE;
    }

  CK (hn_wl_matrix (L, "deberta.embeddings.word_embeddings.weight", V, C, TRUE, &m->word, error));
  const HnSafetensorInfo *pt = hn_wl_find (L, "deberta.embeddings.position_embeddings.weight", TRUE, error);
  CK (pt);
  if (pt->ndim == 2 && pt->shape[0] >= 1)
    m->n_pos = (int) pt->shape[0];
  CK (hn_wl_matrix (L, pt->name, m->n_pos, C, TRUE, &m->pos, error) &&
      hn_wl_norm (L, "deberta.embeddings.", "LayerNorm", C, &m->emb_ln_w, &m->emb_ln_b, error) &&
      hn_wl_matrix (L, "deberta.encoder.rel_embeddings.weight", 2 * (gint64) d->span, C, TRUE, &d->rel, error));

  m->layers = g_new0 (EncLayer, m->n_unique);
  d->layers = g_new0 (DebLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      DebLayer *dl = &d->layers[i];
      g_autofree char *p = g_strdup_printf ("deberta.encoder.layer.%d.", i);
      if (v2)
        CK (hn_wl_linear (L, p, "attention.self.query_proj", C, C, &lw->wq, &lw->bq, error) &&
            hn_wl_linear (L, p, "attention.self.key_proj", C, C, &lw->wk, &lw->bk, error) &&
            hn_wl_linear (L, p, "attention.self.value_proj", C, C, &lw->wv, &lw->bv, error) &&
            hn_wl_linear (L, p, "attention.self.pos_key_proj", C, C, &dl->pk_w, &dl->pk_b, error) &&
            hn_wl_linear (L, p, "attention.self.pos_query_proj", C, C, &dl->pq_w, &dl->pq_b, error));
      else
        {
          g_autofree char *in = g_strdup_printf ("%sattention.self.in_proj.weight", p);
          g_autofree char *qb = g_strdup_printf ("%sattention.self.q_bias", p);
          g_autofree char *vb = g_strdup_printf ("%sattention.self.v_bias", p);
          HnTensor **w3[3] = { &lw->wq, &lw->wk, &lw->wv };
          CK (split_in_proj (L, in, C, m->H, w3, error) && hn_wl_vector (L, qb, C, TRUE, &lw->bq, error) &&
              hn_wl_vector (L, vb, C, TRUE, &lw->bv, error) &&
              hn_wl_linear (L, p, "attention.self.pos_proj", C, C, &dl->pk_w, NULL, error) &&
              hn_wl_linear (L, p, "attention.self.pos_q_proj", C, C, &dl->pq_w, &dl->pq_b, error));
        }
      CK (hn_wl_linear (L, p, "attention.output.dense", C, C, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, p, "attention.output.LayerNorm", C, &lw->ln1_w, &lw->ln1_b, error) &&
          hn_wl_linear (L, p, "intermediate.dense", F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, p, "output.dense", C, F, &lw->wd, &lw->bd, error) &&
          hn_wl_norm (L, p, "output.LayerNorm", C, &lw->ln2_w, &lw->ln2_b, error));
    }
  /* the legacy head: transform, then the decoder tied to the word embeddings */
  CK (hn_wl_linear (L, "cls.predictions.", "transform.dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, "cls.predictions.", "transform.LayerNorm", C, &m->head_ln_w, &m->head_ln_b, error));
  hn_wl_find (L, "cls.predictions.decoder.weight", FALSE, NULL);
  m->dec_w = m->word;
  CK (hn_wl_vector (L, "cls.predictions.bias", V, TRUE, &m->dec_b, error));
  hn_wl_find (L, "cls.predictions.decoder.bias", FALSE, NULL); /* the same bias, tied */
  return TRUE;
}

/* ---------------------------------------------------------------- forward */

/* DeBERTa-v2's make_log_bucket_position (f32 logs, as torch computes them). */
static int
log_bucket (int rel, int bucket_size, int max_position)
{
  int mid = bucket_size / 2;
  int abs_pos = rel < mid && rel > -mid ? mid - 1 : ABS (rel);
  if (abs_pos <= mid)
    return rel;
  float lp = ceilf (logf ((float) abs_pos / (float) mid) / logf ((float) ((double) (max_position - 1) / mid)) *
                    (float) (mid - 1)) + (float) mid;
  return (int) (rel < 0 ? -lp : lp);
}

/* The score bias's gather indices [2][H, N, N] into the flattened [H, N, 2 span] c2p and p2c products
 * (c2p: query i's row, p2c: key j's, both at idx(i, j)). */
static int32_t *
gather_ids (const HnEncoder *m, int n)
{
  const HnDeberta *d = m->deberta;
  gint64 H = m->H, N = n, R = 2 * (gint64) d->span;
  int32_t *ids = g_new (int32_t, (gsize) (2 * H * N * N));
  for (gint64 i = 0; i < N; i++)
    for (gint64 j = 0; j < N; j++)
      {
        int rel = (int) (i - j);
        if (d->buckets > 0)
          rel = log_bucket (rel, d->buckets, d->max_rel);
        gint64 idx = CLAMP (rel + d->span, 0, R - 1);
        for (gint64 h = 0; h < H; h++)
          {
            ids[(h * N + i) * N + j] = (int32_t) ((h * N + i) * R + idx);         /* q_i against pk[idx] */
            ids[H * N * N + (h * N + i) * N + j] = (int32_t) ((h * N + j) * R + idx); /* k_j against pq[idx] */
          }
      }
  return ids;
}

static HnTensor *
linear (HnCmd *cmd, HnScratch *sc, const char *name, HnTensor *x, HnTensor *w, HnTensor *b, GError **error)
{
  HnTensor *y = hn_scratch_new (sc, name, HN_DTYPE_F32, 2, (gint64[]) { x->shape[0], w->shape[0] }, error);
  return y && hn_op_matmul (cmd, y, x, w, b, error) ? y : NULL;
}

/* [rows, H·D] -> a new head-major [H, rows, D] */
static HnTensor *
heads (HnCmd *cmd, HnScratch *sc, HnTensor *x, gint64 H, gint64 D, GError **error)
{
  static const int swap01[] = { 1, 0, 2 };
  gint64 rows = x->shape[0];
  HnTensor *x3 = hn_scratch_shape (sc, x, 3, (gint64[]) { rows, H, D }, error);
  HnTensor *h = x3 ? hn_scratch_new (sc, "deb.heads", HN_DTYPE_F32, 3, (gint64[]) { H, rows, D }, error) : NULL;
  return h && hn_op_permute (cmd, h, x3, swap01, error) ? h : NULL;
}

static gboolean
record_attention (HnEncoder *m, HnCmd *cmd, HnScratch *sc, const EncLayer *lw, const DebLayer *dl, HnTensor *x,
                  HnTensor *const *gather, HnTensor *out, GError **error)
{
  const HnDeberta *d = m->deberta;
  gint64 N = x->shape[0], H = m->H, D = m->D, R = 2 * (gint64) d->span;
  float alpha = 1.0f / sqrtf ((float) D * 3.0f);
  HnTensor *q = linear (cmd, sc, "deb.q", x, lw->wq, lw->bq, error);
  HnTensor *k = q ? linear (cmd, sc, "deb.k", x, lw->wk, lw->bk, error) : NULL;
  HnTensor *v = k ? linear (cmd, sc, "deb.v", x, lw->wv, lw->bv, error) : NULL;
  HnTensor *pk = v ? linear (cmd, sc, "deb.pk", d->rel, dl->pk_w, dl->pk_b, error) : NULL;
  HnTensor *pq = pk ? linear (cmd, sc, "deb.pq", d->rel, dl->pq_w, dl->pq_b, error) : NULL;
  CK (pq);
  HnTensor *qh = heads (cmd, sc, q, H, D, error), *kh = qh ? heads (cmd, sc, k, H, D, error) : NULL;
  HnTensor *vh = kh ? heads (cmd, sc, v, H, D, error) : NULL, *pkh = vh ? heads (cmd, sc, pk, H, D, error) : NULL;
  HnTensor *pqh = pkh ? heads (cmd, sc, pq, H, D, error) : NULL;
  CK (pqh);
  /* c2p [H, N, 2 span] = q·pkᵀ, p2c = k·pqᵀ, gathered into one [H, N, N] bias */
  HnTensor *c2p = hn_scratch_new (sc, "deb.c2p", HN_DTYPE_F32, 3, (gint64[]) { H, N, R }, error);
  HnTensor *p2c = c2p ? hn_scratch_new (sc, "deb.p2c", HN_DTYPE_F32, 3, (gint64[]) { H, N, R }, error) : NULL;
  CK (p2c && hn_op_bmm (cmd, c2p, qh, pkh, HN_MATMUL_TRANS_B, alpha, error) &&
      hn_op_bmm (cmd, p2c, kh, pqh, HN_MATMUL_TRANS_B, alpha, error));
  gint64 HNN = H * N * N, tab[] = { H * N * R, 1 };
  HnTensor *bias = hn_scratch_new (sc, "deb.bias", HN_DTYPE_F32, 2, (gint64[]) { HNN, 1 }, error);
  HnTensor *b2 = bias ? hn_scratch_new (sc, "deb.bias2", HN_DTYPE_F32, 2, (gint64[]) { HNN, 1 }, error) : NULL;
  HnTensor *c2p_t = b2 ? hn_scratch_shape (sc, c2p, 2, tab, error) : NULL;
  HnTensor *p2c_t = c2p_t ? hn_scratch_shape (sc, p2c, 2, tab, error) : NULL;
  CK (p2c_t && hn_op_embedding (cmd, bias, c2p_t, gather[0], error) &&
      hn_op_embedding (cmd, b2, p2c_t, gather[1], error) &&
      hn_op_add (cmd, bias, bias, b2, error));
  HnTensor *bias3 = hn_scratch_shape (sc, bias, 3, (gint64[]) { H, N, N }, error);
  HnTensor *s = bias3 ? hn_scratch_new (sc, "deb.scores", HN_DTYPE_F32, 3, (gint64[]) { H, N, N }, error) : NULL;
  HnTensor *oh = s ? hn_scratch_new (sc, "deb.oh", HN_DTYPE_F32, 3, (gint64[]) { H, N, D }, error) : NULL;
  CK (oh && hn_op_bmm (cmd, s, qh, kh, HN_MATMUL_TRANS_B, alpha, error));
  HnSoftmaxParams sp = { 0 };
  sp.mask = bias3;
  static const int swap01[] = { 1, 0, 2 };
  HnTensor *out3 = hn_scratch_shape (sc, out, 3, (gint64[]) { N, H, D }, error);
  return out3 && hn_op_softmax (cmd, s, s, &sp, error) && hn_op_bmm (cmd, oh, s, vh, HN_MATMUL_DEFAULT, 1.0f, error) &&
         hn_op_permute (cmd, out3, oh, swap01, error);
}

static gboolean
record_layer (HnEncoder *m, HnCmd *cmd, HnScratch *sc, int l, HnTensor *x, HnTensor *const *gather,
              GError **error)
{
  const EncLayer *lw = &m->layers[l];
  gint64 N = x->shape[0], C = m->C;
  HnTensor *att = hn_scratch_new (sc, "deb.att", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error);
  CK (att && record_attention (m, cmd, sc, lw, &m->deberta->layers[l], x, gather, att, error));
  HnTensor *o = linear (cmd, sc, "deb.o", att, lw->wo, lw->bo, error);
  CK (o && hn_op_add (cmd, o, o, x, error) && hn_op_layernorm (cmd, x, o, lw->ln1_w, lw->ln1_b, m->eps, error));
  HnTensor *u = linear (cmd, sc, "deb.up", x, lw->wi, lw->bi, error);
  CK (u && hn_op_unary (cmd, u, u, m->act, error));
  HnTensor *dn = linear (cmd, sc, "deb.down", u, lw->wd, lw->bd, error);
  return dn && hn_op_add (cmd, dn, dn, x, error) && hn_op_layernorm (cmd, x, dn, lw->ln2_w, lw->ln2_b, m->eps, error);
}

gboolean
hn_deberta_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits, GError **error)
{
  CK (hn_encoder_check_ids (m, ids, type_ids, n, error));
  gint64 N = n, C = m->C, H = m->H;
  g_autofree int32_t *pos = g_new (int32_t, n);
  hn_encoder_positions (m, ids, n, pos);
  g_autofree int32_t *gi = gather_ids (m, n);
  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  g_autoptr (HnCmd) cmd = hn_cmd_new (m->ctx, error);
  HnTensor *ids_t = NULL, *pos_t = NULL, *g_t[2] = { NULL }, *x = NULL, *e = NULL, *t = NULL, *lg = NULL;
  gsize HNN = (gsize) (H * N * N);
  gboolean ok = cmd && (ids_t = hn_scratch_new (&sc, "deb.ids", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) &&
                (pos_t = hn_scratch_new (&sc, "deb.pos", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) &&
                hn_tensor_upload_i32 (ids_t, ids, (gsize) n, error) &&
                hn_tensor_upload_i32 (pos_t, pos, (gsize) n, error);
  for (int i = 0; ok && i < 2; i++)
    ok = (g_t[i] = hn_scratch_new (&sc, "deb.gather", HN_DTYPE_I32, 1, (gint64[]) { (gint64) HNN }, error)) &&
         hn_tensor_upload_i32 (g_t[i], gi + i * HNN, HNN, error);
  /* embeddings: word + position, LayerNorm (the all-ones mask leaves them as they are) */
  ok = ok && (x = hn_scratch_new (&sc, "deb.x", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
       (e = hn_scratch_new (&sc, "deb.e", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
       hn_op_embedding (cmd, x, m->word, ids_t, error) && hn_op_embedding (cmd, e, m->pos, pos_t, error) &&
       hn_op_add (cmd, x, x, e, error) && hn_op_layernorm (cmd, x, x, m->emb_ln_w, m->emb_ln_b, m->eps, error);
  for (int l = 0; ok && l < m->n_exec; l++)
    ok = record_layer (m, cmd, &sc, m->order[l], x, g_t, error);
  ok = ok && (t = linear (cmd, &sc, "deb.head", x, m->head_w, m->head_b, error)) &&
       hn_op_unary (cmd, t, t, m->head_act, error) &&
       hn_op_layernorm (cmd, t, t, m->head_ln_w, m->head_ln_b, m->head_eps, error) &&
       (lg = hn_scratch_new (&sc, "deb.logits", HN_DTYPE_F32, 2, (gint64[]) { N, m->vocab }, error)) &&
       hn_op_matmul (cmd, lg, t, m->dec_w, m->dec_b, error) && hn_cmd_submit_wait (cmd, error) &&
       hn_tensor_download_f32 (lg, logits, (gsize) N * m->vocab, error);
  hn_scratch_clear (&sc);
  return ok;
}
