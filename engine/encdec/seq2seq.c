/* Encoder-decoders (see seq2seq.h). One graph for both families:
 * - T5 (t5, mt5, umt5): RMS norm without bias or mean, pre-norm, unscaled
 *   attention plus relative-position bias buckets (from the first layer of
 *   each stack, or every layer in umt5), relu or gated-gelu MLP, the decoder
 *   output scaled by d_model^-0.5 before a tied head; switch_transformers'
 *   top-1 experts every sparse_step layers; longt5's local / transient-global
 *   encoder attention (seq2seq-long.c).
 * - BART (bart, mbart, marian, pegasus): LayerNorm, biases, attention scaled
 *   by head_dim^-0.5, learned (offset 2) or sinusoidal positions, post-norm
 *   (bart, marian) or pre-norm with final norms (mbart, pegasus), optional
 *   layernorm_embedding, final_logits_bias; pegasus_x's global tokens and
 *   block-local encoder attention, led's sliding-window encoder attention
 *   (seq2seq-long.c).
 * A session holds the encoder's cross-attention keys/values (computed once)
 * and a self-attention KV cache per row; every buffer of the token loop is
 * allocated when the session is made. */
#include "base/hn-error.h"
#include "encdec/encdec-private.h"
#include "encdec/seq2seq-private.h"

#include <math.h>
#include <string.h>

const HnArchInfo *
hn_seq2seq_get_arch (HnSeq2Seq *m)
{
  return m->arch;
}

int
hn_seq2seq_get_vocab (HnSeq2Seq *m)
{
  return m->vocab;
}

int
hn_seq2seq_get_decoder_start (HnSeq2Seq *m)
{
  return m->dec_start;
}

guint64
hn_seq2seq_get_weight_bytes (HnSeq2Seq *m)
{
  return m->weight_bytes;
}

static void
stack_clear (Stack *s)
{
  for (int i = 0; s->l && i < s->n_layer; i++)
    {
      g_free (s->l[i].rel);
      g_free (s->l[i].grel);
      g_free (s->l[i].ewi);
      g_free (s->l[i].ewo);
    }
  g_free (s->l);
}

void
hn_seq2seq_free (HnSeq2Seq *m)
{
  if (!m)
    return;
  stack_clear (&m->enc);
  stack_clear (&m->dec);
  g_clear_pointer (&m->owned, g_ptr_array_unref);
  g_clear_pointer (&m->ctx, hn_vk_context_unref);
  g_free (m->led_window);
  g_free (m->dir);
  g_free (m);
}

/* ---------------------------------------------------------------- config */

static gboolean
bad_config (const HnModelConfig *cfg, const char *what, gint64 v, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s is missing or out of range (%" G_GINT64_FORMAT ")", cfg->path,
               what, v);
  return FALSE;
}

#define NEED(cfg, what, v)                                                                                            \
  do                                                                                                                   \
    {                                                                                                                  \
      if ((v) <= 0 || (v) >= (1 << 24))                                                                                \
        return bad_config (cfg, what, v, error);                                                                       \
    }                                                                                                                  \
  while (0)

static gboolean
resolve (HnSeq2Seq *m, const HnModelConfig *cfg, GError **error)
{
  m->t5 = m->arch->names == HN_NAMES_T5;
  m->pfx = "";
  m->pre_norm = m->arch->block == HN_BLOCK_SEQ2SEQ_PRE_NORM;
  m->bias_per_layer = (m->arch->quirks & HN_QUIRK_REL_BIAS_PER_LAYER) != 0;
  m->tied = cfg->tie_word_embeddings != FALSE;
  m->vocab = (int) cfg->vocab_size;
  m->C = (int) cfg->hidden_size;
  NEED (cfg, "vocab_size", m->vocab);
  NEED (cfg, "d_model", m->C);
  const char *act = cfg->hidden_act;
  if (m->t5)
    {
      /* feed_forward_proj "relu" | "gated-gelu" (gelu_new) | "gated-<act>" */
      const char *ff = cfg->feed_forward_proj ? cfg->feed_forward_proj : "relu";
      m->gated = g_str_has_prefix (ff, "gated-");
      act = m->gated ? ff + 6 : ff;
      if (strcmp (ff, "gated-gelu") == 0)
        act = "gelu_new";
      if (strcmp (m->arch->model_type, "switch_transformers") == 0)
        {
          /* its experts and dense layers are T5DenseActDense of dense_act_fn */
          const char *d = hn_model_config_get_string (cfg, "dense_act_fn");
          m->gated = FALSE;
          act = d ? d : "relu";
        }
      m->enc.n_layer = (int) cfg->num_hidden_layers;
      m->dec.n_layer = (int) (cfg->decoder_layers > 0 ? cfg->decoder_layers : cfg->num_hidden_layers);
      m->enc.H = m->dec.H = (int) cfg->num_attention_heads;
      m->enc.F = m->dec.F = (int) cfg->intermediate_size;
      m->D = (int) cfg->head_dim;
      m->eps = isnan (cfg->norm_eps) ? 1e-6f : (float) cfg->norm_eps;
      m->alpha = 1.0f; /* T5 does not scale its scores */
      m->embed_scale = 1.0f;
      m->buckets = (int) (cfg->relative_attention_num_buckets > 0 ? cfg->relative_attention_num_buckets : 32);
      m->max_distance = (int) (cfg->relative_attention_max_distance > 0 ? cfg->relative_attention_max_distance : 128);
      /* 5.17 saves scale_decoder_outputs for t5; otherwise t5 and umt5 scale when the head is tied, and
       * mt5 (whose 5.x config always says tied) never does */
      gboolean scale = strcmp (m->arch->model_type, "mt5") != 0 && cfg->tie_word_embeddings != FALSE;
      GError *e = NULL;
      if (!hn_model_config_get_bool (cfg, "scale_decoder_outputs", &scale, &e) && e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      m->lm_scale = scale ? 1.0f / sqrtf ((float) m->C) : 1.0f;
      CK (hn_s2s_long_resolve (m, cfg, error));
    }
  else
    {
      if (!act)
        act = m->arch->default_act;
      m->enc.n_layer = (int) cfg->encoder_layers;
      m->dec.n_layer = (int) cfg->decoder_layers;
      m->enc.H = (int) cfg->encoder_attention_heads;
      m->dec.H = (int) cfg->decoder_attention_heads;
      m->enc.F = (int) cfg->encoder_ffn_dim;
      m->dec.F = (int) cfg->decoder_ffn_dim;
      NEED (cfg, "encoder_attention_heads", m->enc.H);
      NEED (cfg, "decoder_attention_heads", m->dec.H);
      if (m->enc.H != m->dec.H)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "%s: encoder and decoder with different head counts (%d, %d) are not supported", cfg->path,
                       m->enc.H, m->dec.H);
          return FALSE;
        }
      if (m->C % m->enc.H)
        return bad_config (cfg, "d_model (a multiple of the heads)", m->C, error);
      m->D = m->C / m->enc.H;
      m->eps = 1e-5f; /* nn.LayerNorm's default */
      m->alpha = 1.0f / sqrtf ((float) m->D);
      m->embed_scale = cfg->scale_embedding == TRUE ? sqrtf ((float) m->C) : 1.0f;
      m->lm_scale = 1.0f;
      m->n_pos = (int) cfg->max_position_embeddings;
      CK (hn_s2s_long_resolve (m, cfg, error)); /* led: its own position counts */
      NEED (cfg, "max_position_embeddings", m->n_pos);
      if (!m->n_pos_enc)
        m->n_pos_enc = m->n_pos;
      m->pos_offset = (m->arch->quirks & HN_QUIRK_SINUSOIDAL_POS) ? 0 : 2; /* BartLearnedPositionalEmbedding */
      const char *mt = m->arch->model_type;
      m->pfx = strcmp (mt, "led") == 0 ? "led." : "model.";
      if (strcmp (mt, "blenderbot") == 0 || strcmp (mt, "blenderbot-small") == 0 || strcmp (mt, "led") == 0)
        m->pos_offset = 0; /* Blenderbot(Small)LearnedPositionalEmbedding, LEDLearnedPositionalEmbedding: no offset */
      if (strcmp (mt, "pegasus_x") == 0)
        m->fairseq_pos = TRUE; /* PegasusXSinusoidalPositionalEmbedding: sin | cos, computed, from position 0 */
      m->dec.emb_ln_first = strcmp (mt, "blenderbot-small") == 0;
      if (strcmp (mt, "m2m_100") == 0)
        {
          /* M2M100SinusoidalPositionalEmbedding: positions count from padding_idx + 1 (no pads in a
           * sequence given here) */
          m->fairseq_pos = TRUE;
          if (cfg->pad_token_id < 0 || cfg->pad_token_id >= m->vocab)
            return bad_config (cfg, "pad_token_id", cfg->pad_token_id, error);
          m->pos_offset = (int) cfg->pad_token_id + 1;
        }
      gint64 dv;
      if (hn_model_config_get_int (cfg, "decoder_vocab_size", &dv, NULL) && dv != m->vocab)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "%s: a decoder vocabulary (%" G_GINT64_FORMAT ") other than the encoder's (%d) is not supported",
                       cfg->path, dv, m->vocab);
          return FALSE;
        }
    }
  NEED (cfg, "encoder layers", m->enc.n_layer);
  NEED (cfg, "decoder layers", m->dec.n_layer);
  NEED (cfg, "attention heads", m->enc.H);
  NEED (cfg, "head dim", m->D);
  NEED (cfg, "encoder ffn dim", m->enc.F);
  NEED (cfg, "decoder ffn dim", m->dec.F);
  if (!hn_activation_from_string (act, &m->act))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: activation \"%s\" is not supported", cfg->path, act);
      return FALSE;
    }
  m->pad = (int) cfg->pad_token_id;
  m->dec_start = (int) cfg->decoder_start_token_id;
  if (m->dec_start < 0 || m->dec_start >= m->vocab)
    return bad_config (cfg, "decoder_start_token_id", cfg->decoder_start_token_id, error);
  return TRUE;
}

/* ---------------------------------------------------------------- weights */

static const char *const t5_names[] = { "q", "k", "v", "o" };
static const char *const bart_names[] = { "q_proj", "k_proj", "v_proj", "out_proj" };
static const char *const led_names[] = { "longformer_self_attn.query", "longformer_self_attn.key",
                                         "longformer_self_attn.value", "output" };

/* One attention block: T5 {q,k,v,o} without biases, BART {q,k,v,out}_proj with them (n: other names). */
static gboolean
take_attention (HnSeq2Seq *m, HnWLoader *L, const char *pfx, const char *const *n, HnTensor **w, GError **error)
{
  gint64 C = m->C, HD = (gint64) m->enc.H * m->D;
  if (!n)
    n = m->t5 ? t5_names : bart_names;
  for (int i = 0; i < 4; i++)
    CK (hn_wl_linear (L, pfx, n[i], i == 3 ? C : HD, i == 3 ? HD : C, &w[2 * i], &w[2 * i + 1], error));
  return TRUE;
}

static gboolean
take_layer (HnSeq2Seq *m, HnWLoader *L, Stack *st, int il, gboolean decoder, GError **error)
{
  S2SLayer *lw = &st->l[il];
  gint64 C = m->C, F = st->F;
  HnTensor *sa[8], *ca[8];
  if (m->t5)
    {
      g_autofree char *blk = g_strdup_printf ("%s.block.%d.layer.", decoder ? "decoder" : "encoder", il);
      g_autofree char *l0 = g_strdup_printf ("%s0.", blk), *l1 = g_strdup_printf ("%s1.", blk);
      g_autofree char *lf = g_strdup_printf ("%s%d.", blk, decoder ? 2 : 1);
      const char *kind = decoder                              ? "SelfAttention"
                         : m->enc_attn == S2S_ENC_TGLOBAL ? "TransientGlobalSelfAttention"
                         : m->enc_attn == S2S_ENC_LOCAL   ? "LocalSelfAttention"
                                                          : "SelfAttention";
      g_autofree char *sap = g_strdup_printf ("%s%s.", l0, kind);
      CK (hn_wl_norm (L, l0, "layer_norm", C, &lw->n1_w, NULL, error) && take_attention (m, L, sap, NULL, sa, error));
      if (!decoder && m->enc_attn == S2S_ENC_TGLOBAL)
        CK (hn_wl_norm (L, sap, "global_input_layer_norm", C, &lw->gn_w, NULL, error));
      g_autofree char *reln = g_strdup_printf ("%srelative_attention_bias.weight", sap);
      const HnSafetensorInfo *rt = (il == 0 || m->bias_per_layer) ? hn_wl_find (L, reln, TRUE, error) : NULL;
      if ((il == 0 || m->bias_per_layer) && !rt)
        return FALSE;
      if (rt)
        {
          if (rt->ndim != 2 || rt->shape[0] != m->buckets || rt->shape[1] != st->H)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [%d, %d] (relative_attention_num_buckets, heads)",
                           rt->file, rt->name, m->buckets, st->H);
              return FALSE;
            }
          CK ((lw->rel = hn_safetensor_info_dup_f32 (rt, error)));
          g_autofree char *greln = g_strdup_printf ("%sglobal_relative_attention_bias.weight", sap);
          const HnSafetensorInfo *gt = !decoder && m->enc_attn == S2S_ENC_TGLOBAL ? hn_wl_find (L, greln, TRUE, error) : NULL;
          if (!decoder && m->enc_attn == S2S_ENC_TGLOBAL && !gt)
            return FALSE;
          if (gt && (gt->ndim != 2 || gt->shape[0] != m->buckets || gt->shape[1] != st->H))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [%d, %d]", gt->file, gt->name, m->buckets,
                           st->H);
              return FALSE;
            }
          if (gt)
            CK ((lw->grel = hn_safetensor_info_dup_f32 (gt, error)));
        }
      if (decoder)
        {
          g_autofree char *cap = g_strdup_printf ("%sEncDecAttention.", l1);
          CK (hn_wl_norm (L, l1, "layer_norm", C, &lw->n2_w, NULL, error) &&
              take_attention (m, L, cap, NULL, ca, error));
        }
      CK (hn_wl_norm (L, lf, "layer_norm", C, &lw->n3_w, NULL, error));
      g_autofree char *ffp = g_strdup_printf ("%s%s.", lf, m->n_experts ? "mlp" : "DenseReluDense");
      int step = m->sparse_step[decoder];
      if (m->n_experts && step > 0 && (il % step == 1 || step == 1))
        {
          /* SwitchTransformersSparseMLP: router.classifier, experts.expert_<e>.{wi,wo} */
          CK (hn_wl_linear (L, ffp, "router.classifier", m->n_experts, C, &lw->router, &lw->router_b, error));
          lw->ewi = g_new0 (HnTensor *, m->n_experts);
          lw->ewo = g_new0 (HnTensor *, m->n_experts);
          for (int e = 0; e < m->n_experts; e++)
            {
              g_autofree char *wi = g_strdup_printf ("experts.expert_%d.wi", e);
              g_autofree char *wo = g_strdup_printf ("experts.expert_%d.wo", e);
              CK (hn_wl_linear (L, ffp, wi, F, C, &lw->ewi[e], NULL, error) &&
                  hn_wl_linear (L, ffp, wo, C, F, &lw->ewo[e], NULL, error));
            }
        }
      else if (m->gated)
        CK (hn_wl_linear (L, ffp, "wi_0", F, C, &lw->wg, NULL, error) &&
            hn_wl_linear (L, ffp, "wi_1", F, C, &lw->wi, &lw->bi, error));
      else
        CK (hn_wl_linear (L, ffp, "wi", F, C, &lw->wi, &lw->bi, error));
      if (!lw->router)
        CK (hn_wl_linear (L, ffp, "wo", C, F, &lw->wd, &lw->bd, error));
    }
  else
    {
      g_autofree char *pfx = g_strdup_printf ("%s%s.layers.%d.", m->pfx, decoder ? "decoder" : "encoder", il);
      g_autofree char *sap = g_strdup_printf ("%sself_attn.", pfx), *cap = g_strdup_printf ("%sencoder_attn.", pfx);
      gboolean led = !decoder && m->enc_attn == S2S_ENC_LED;
      CK (hn_wl_norm (L, pfx, "self_attn_layer_norm", C, &lw->n1_w, &lw->n1_b, error) &&
          take_attention (m, L, sap, led ? led_names : NULL, sa, error));
      if (led)
        {
          /* the projections of global-attention tokens: none without a global_attention_mask */
          static const char *const glob[] = { "query_global", "key_global", "value_global" };
          for (int i = 0; i < 3; i++)
            {
              g_autofree char *wn = g_strdup_printf ("%slongformer_self_attn.%s.weight", sap, glob[i]);
              g_autofree char *bn = g_strdup_printf ("%slongformer_self_attn.%s.bias", sap, glob[i]);
              CK (hn_wl_find (L, wn, TRUE, error));
              hn_wl_find (L, bn, FALSE, NULL);
            }
        }
      if (!decoder && m->enc_attn == S2S_ENC_PEGASUS_X)
        CK (hn_wl_norm (L, pfx, "global_self_attn_layer_norm", C, &lw->gn_w, &lw->gn_b, error));
      if (decoder)
        CK (hn_wl_norm (L, pfx, "encoder_attn_layer_norm", C, &lw->n2_w, &lw->n2_b, error) &&
            take_attention (m, L, cap, NULL, ca, error));
      CK (hn_wl_norm (L, pfx, "final_layer_norm", C, &lw->n3_w, &lw->n3_b, error) &&
          hn_wl_linear (L, pfx, "fc1", F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, pfx, "fc2", C, F, &lw->wd, &lw->bd, error));
    }
  lw->wq = sa[0], lw->bq = sa[1], lw->wk = sa[2], lw->bk = sa[3], lw->wv = sa[4], lw->bv = sa[5], lw->wo = sa[6],
  lw->bo = sa[7];
  if (decoder)
    lw->cq = ca[0], lw->cbq = ca[1], lw->ck = ca[2], lw->cbk = ca[3], lw->cv = ca[4], lw->cbv = ca[5], lw->co = ca[6],
    lw->cbo = ca[7];
  return TRUE;
}

/* Marian / Pegasus positions: sin of pos / 10000^(2i/C) in the first half, cos in the second. */
static float *
sinusoidal_table (int n_pos, int C)
{
  float *t = g_new (float, (gsize) n_pos * C);
  int half = C / 2 + C % 2;
  for (int p = 0; p < n_pos; p++)
    for (int j = 0; j < C; j++)
      {
        double angle = p / pow (10000.0, 2.0 * (j / 2) / C);
        if (j % 2 == 0)
          t[(gsize) p * C + j / 2] = (float) sin (angle);
        else
          t[(gsize) p * C + half + j / 2] = (float) cos (angle);
      }
  return t;
}

static gboolean
take_positions (HnSeq2Seq *m, HnWLoader *L, GError **error)
{
  gint64 C = m->C;
  if (m->fairseq_pos)
    {
      /* m2m_100's ids count from padding_idx + 1 and its table zeroes that row; pegasus_x's from 0 */
      gint64 rows = MAX (m->n_pos, m->n_pos_enc) + m->pos_offset;
      g_autofree float *t = hn_sinusoidal_table_fairseq ((int) rows, m->C, m->pos_offset ? m->pad : -1);
      m->pos = hn_wl_from_f32 (L, "sinusoidal_positions", 2, (gint64[]) { rows, C }, t, error);
      return m->pos != NULL;
    }
  if (m->arch->quirks & HN_QUIRK_SINUSOIDAL_POS)
    {
      /* pegasus saves the (fixed) table, marian does not; both stacks use the same one */
      const HnSafetensorInfo *e = hn_wl_find (L, "model.encoder.embed_positions.weight", FALSE, NULL);
      const HnSafetensorInfo *d = hn_wl_find (L, "model.decoder.embed_positions.weight", FALSE, NULL);
      if (e)
        return hn_wl_matrix (L, e->name, m->n_pos, C, TRUE, &m->pos, error) &&
               (!d || hn_wl_matrix (L, d->name, m->n_pos, C, TRUE, &m->dec_pos, error));
      g_autofree float *t = sinusoidal_table (m->n_pos, m->C);
      m->pos = hn_wl_from_f32 (L, "sinusoidal_positions", 2, (gint64[]) { m->n_pos, C }, t, error);
      return m->pos != NULL;
    }
  if (m->t5)
    return TRUE;
  g_autofree char *en = g_strdup_printf ("%sencoder.embed_positions.weight", m->pfx);
  g_autofree char *dn = g_strdup_printf ("%sdecoder.embed_positions.weight", m->pfx);
  return hn_wl_matrix (L, en, m->n_pos_enc + m->pos_offset, C, TRUE, &m->pos, error) &&
         hn_wl_matrix (L, dn, m->n_pos + m->pos_offset, C, TRUE, &m->dec_pos, error);
}

static gboolean
load_weights (gpointer model, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  HnSeq2Seq *m = model;
  gint64 C = m->C, V = m->vocab;
  g_autofree char *shared = g_strdup_printf ("%sshared.weight", m->pfx);
  g_autofree char *ee = g_strdup_printf ("%sencoder.embed_tokens.weight", m->pfx);
  g_autofree char *de = g_strdup_printf ("%sdecoder.embed_tokens.weight", m->pfx);
  CK (hn_wl_matrix (L, shared, V, C, TRUE, &m->shared, error));
  /* the stacks' embed_tokens are the shared table (tied) */
  hn_wl_find (L, ee, FALSE, NULL);
  hn_wl_find (L, de, FALSE, NULL);
  CK (take_positions (m, L, error));
  if (m->enc_attn == S2S_ENC_PEGASUS_X)
    CK (hn_wl_matrix (L, "model.encoder.embed_global.weight", m->n_global, C, TRUE, &m->embed_global, error));
  Stack *stacks[2] = { &m->enc, &m->dec };
  for (int s = 0; s < 2; s++)
    {
      Stack *st = stacks[s];
      const char *name = s ? "decoder" : "encoder";
      st->l = g_new0 (S2SLayer, st->n_layer);
      for (int il = 0; il < st->n_layer; il++)
        CK (take_layer (m, L, st, il, s == 1, error));
      g_autofree char *pfx = g_strdup_printf ("%s%s.", m->pfx, name);
      if (m->t5)
        CK (hn_wl_norm (L, pfx, "final_layer_norm", C, &st->final_w, NULL, error));
      else
        {
          g_autofree char *le = g_strdup_printf ("%slayernorm_embedding.weight", pfx);
          g_autofree char *ln = g_strdup_printf ("%slayer_norm.weight", pfx);
          if (hn_safetensors_lookup (L->st, le))
            CK (hn_wl_norm (L, pfx, "layernorm_embedding", C, &st->emb_ln_w, &st->emb_ln_b, error));
          if (m->pre_norm)
            CK (hn_wl_norm (L, pfx, "layer_norm", C, &st->final_w, &st->final_b, error));
          else if (hn_safetensors_lookup (L->st, ln))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                           "%s: %s: a final layer norm in a post-norm %s is not supported", m->dir, ln,
                           m->arch->model_type);
              return FALSE;
            }
        }
    }
  /* the head: the shared table when tied (the usual case), else the saved lm_head */
  m->lm_head = m->shared;
  if (hn_wl_find (L, "lm_head.weight", !m->tied, error))
    {
      if (!m->tied)
        CK (hn_wl_matrix (L, "lm_head.weight", V, C, TRUE, &m->lm_head, error));
    }
  else if (!m->tied)
    return FALSE;
  if (!m->t5)
    CK (hn_wl_vector (L, "final_logits_bias", V, FALSE, &m->logits_bias, error));
  return TRUE;
}

HnSeq2Seq *
hn_seq2seq_load (HnVkContext *ctx, const char *model_dir, GError **error)
{
  const HnArchInfo *arch;
  g_autoptr (HnModelConfig) cfg = hn_encdec_config_load (model_dir, TRUE, &arch, error);
  if (!cfg)
    return NULL;
  HnSeq2Seq *m = g_new0 (HnSeq2Seq, 1);
  m->ctx = hn_vk_context_ref (ctx);
  m->dir = g_strdup (model_dir);
  m->arch = arch;
  m->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  if (!resolve (m, cfg, error) ||
      !hn_wl_load_all (ctx, model_dir, arch, cfg, m->owned, load_weights, m, &m->weight_bytes, error))
    {
      hn_seq2seq_free (m);
      return NULL;
    }
  return m;
}

/* ---------------------------------------------------------------- recording pieces */

/* Flat f32 activations of one stack for up to `rows` tokens attending over up to `keys` keys. */
typedef struct {
  HnTensor *x, *h, *q, *k, *v, *att, *o, *g, *u, *a, *d, *bias_t, *bias;
  HnTensor *route, *route_w, *topi, *col, *eo; /* switch's routing [rows, E] (topi i32 [rows]), one expert's output */
  HnAttendWork aw;
} Work;

static gboolean
work_new (HnSeq2Seq *m, GPtrArray *keep, Work *w, gint64 rows, gint64 keys, gint64 F, GError **error)
{
  gint64 C = m->C, HD = (gint64) m->enc.H * m->D, H = m->enc.H;
  struct {
    HnTensor **t;
    gint64 n;
  } all[] = {
    { &w->x, rows * C }, { &w->h, rows * C }, { &w->q, rows * HD }, { &w->k, rows * HD }, { &w->v, rows * HD },
    { &w->att, rows * HD }, { &w->o, rows * C }, { &w->g, rows * F }, { &w->u, rows * F }, { &w->a, rows * F },
    { &w->d, rows * C }, { &w->bias_t, H * rows * keys }, { &w->bias, H * rows * keys }, { &w->aw.qh, rows * HD },
    { &w->aw.kh, keys * HD }, { &w->aw.vh, keys * HD }, { &w->aw.scores, H * rows * keys }, { &w->aw.oh, rows * HD },
    { &w->route, rows * m->n_experts }, { &w->route_w, rows * m->n_experts }, { &w->topi, rows * !!m->n_experts },
    { &w->col, rows * !!m->n_experts }, { &w->eo, rows * C * !!m->n_experts },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
    {
      if (!all[i].n)
        continue; /* switch's buffers in a model without experts */
      HnDType dt = all[i].t == &w->topi ? HN_DTYPE_I32 : HN_DTYPE_F32;
      *all[i].t = hn_tensor_new_named (m->ctx, "seq2seq.work", dt, 1, (gint64[]) { all[i].n }, error);
      if (!*all[i].t)
        return FALSE;
      g_ptr_array_add (keep, *all[i].t);
    }
  return TRUE;
}

static HnTensor *
as2 (HnScratch *sc, HnTensor *flat, gint64 r, gint64 c, GError **error)
{
  return hn_scratch_prefix (sc, flat, 2, (gint64[]) { r, c }, error);
}

static HnTensor *
as3 (HnScratch *sc, HnTensor *t, gint64 a, gint64 b, gint64 c, GError **error)
{
  return hn_scratch_prefix (sc, t, 3, (gint64[]) { a, b, c }, error);
}

static gboolean
norm (HnSeq2Seq *m, HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *w, HnTensor *b, GError **error)
{
  if (m->t5)
    return hn_op_rmsnorm (cmd, out, in, w, m->eps, HN_NORM_DEFAULT, error);
  return hn_op_layernorm (cmd, out, in, w, b, m->eps, error);
}

/* x = pre-norm ? x + r : norm(x + r) */
static gboolean
residual (HnSeq2Seq *m, HnCmd *cmd, HnTensor *x, HnTensor *r, HnTensor *w, HnTensor *b, GError **error)
{
  if (m->pre_norm)
    return hn_op_add (cmd, x, x, r, error);
  CK (hn_op_add (cmd, r, r, x, error));
  return norm (m, cmd, x, r, w, b, error);
}

/* The sublayer input: norm(x) before a pre-norm sublayer, x itself before a post-norm one. */
static HnTensor *
sub_in (HnSeq2Seq *m, HnCmd *cmd, HnTensor *x, HnTensor *h, HnTensor *w, HnTensor *b, GError **error)
{
  if (!m->pre_norm)
    return x;
  return norm (m, cmd, h, x, w, b, error) ? h : NULL;
}

static gboolean
dense_mlp (HnSeq2Seq *m, HnCmd *cmd, HnScratch *sc, Work *w, const S2SLayer *lw, HnTensor *in, HnTensor *out, gint64 N,
           gint64 F, GError **error)
{
  HnTensor *u = as2 (sc, w->u, N, F, error), *a = as2 (sc, w->a, N, F, error);
  CK (u && a);
  CK (hn_op_matmul (cmd, u, in, lw->wi, lw->bi, error));
  if (lw->wg)
    {
      HnTensor *g = as2 (sc, w->g, N, F, error);
      CK (g);
      CK (hn_op_matmul (cmd, g, in, lw->wg, NULL, error));
      CK (hn_op_glu (cmd, a, g, u, m->act, error));
    }
  else
    CK (hn_op_unary (cmd, a, u, m->act, error));
  return hn_op_matmul (cmd, out, a, lw->wd, lw->bd, error);
}

/* The MLP; switch's sparse layers: softmax router, each token through its top expert, times that
 * expert's probability (every expert runs on every token, weighted 0 where not chosen; no token is
 * dropped: see seq2seq-long.c). */
static gboolean
mlp (HnSeq2Seq *m, HnCmd *cmd, HnScratch *sc, Work *w, const S2SLayer *lw, HnTensor *in, HnTensor *out, gint64 N,
     gint64 F, GError **error)
{
  if (!lw->router)
    return dense_mlp (m, cmd, sc, w, lw, in, out, N, F, error);
  gint64 E = m->n_experts;
  HnTensor *route = as2 (sc, w->route, N, E, error), *rw = as2 (sc, w->route_w, N, E, error);
  HnTensor *topi = as2 (sc, w->topi, N, 1, error), *col = as2 (sc, w->col, N, 1, error);
  HnTensor *eo = as2 (sc, w->eo, N, m->C, error);
  CK (route && rw && topi && col && eo && hn_op_fill (cmd, out, 0.0f, error));
  if (m->expert_capacity < 1)
    return TRUE; /* every token is over capacity */
  HnMoeRouteParams rp = { .kind = HN_MOE_ROUTE_SOFTMAX_TOPK, .k = 1 };
  CK (hn_op_matmul (cmd, route, in, lw->router, lw->router_b, error) && hn_op_moe_route (cmd, rw, topi, route, &rp, error));
  for (gint64 e = 0; e < E; e++)
    {
      S2SLayer ex = { .wi = lw->ewi[e], .wd = lw->ewo[e] };
      CK (dense_mlp (m, cmd, sc, w, &ex, in, eo, N, F, error) && hn_op_slice (cmd, col, rw, 1, e, error) &&
          hn_op_mul (cmd, eo, eo, col, error) && hn_op_add (cmd, out, out, eo, error));
    }
  return TRUE;
}

/* Embeddings of ids at the given positions into x [N, C] (pe: a temporary of that shape). */
static gboolean
embed (HnSeq2Seq *m, HnCmd *cmd, HnTensor *x, HnTensor *pe, const Stack *st, HnTensor *pos_table, HnTensor *ids,
       HnTensor *pos, GError **error)
{
  CK (x && pe);
  CK (hn_op_embedding (cmd, x, m->shared, ids, error));
  if (m->embed_scale != 1.0f)
    CK (hn_op_scale (cmd, x, x, m->embed_scale, 0.0f, error));
  if (st->emb_ln_w && st->emb_ln_first)
    CK (norm (m, cmd, x, x, st->emb_ln_w, st->emb_ln_b, error));
  if (pos_table)
    {
      CK (hn_op_embedding (cmd, pe, pos_table, pos, error));
      CK (hn_op_add (cmd, x, x, pe, error));
    }
  if (st->emb_ln_w && !st->emb_ln_first)
    CK (norm (m, cmd, x, x, st->emb_ln_w, st->emb_ln_b, error));
  return TRUE;
}

/* T5 encoder bias [H, S, S] of one layer's table (bidirectional buckets). */
static float *
encoder_bias (HnSeq2Seq *m, const float *rel, gint64 S)
{
  int H = m->enc.H;
  float *b = g_new (float, (gsize) H * S * S);
  for (gint64 i = 0; i < S; i++)
    for (gint64 j = 0; j < S; j++)
      {
        int bk = hn_t5_relative_bucket ((int) (j - i), TRUE, m->buckets, m->max_distance);
        for (int h = 0; h < H; h++)
          b[((gsize) h * S + i) * S + j] = rel[bk * H + h];
      }
  return b;
}

/* ---------------------------------------------------------------- session */

typedef struct {
  HnSeq2Seq *m;
  int max_rows, max_ctx, max_tokens, n_src, n_rows;
  int *len;               /* [max_rows] tokens in each row's cache */
  GPtrArray *owned;       /* every device buffer of the session */
  HnTensor **kc, **vc;    /* [dec layers] of [max_rows, max_ctx, H*D] */
  HnTensor **ck, **cv;    /* [dec layers] of [n_src, H*D]: cross-attention keys/values */
  HnTensor **btab;        /* T5: [bias owners] of [max_ctx, H, max_ctx] decoder self-attention biases */
  HnTensor *tmp;          /* [max_rows, max_ctx, H*D] beam reordering */
  HnTensor *ids, *pos, *logits; /* i32 [max_tokens], i32 [max_tokens], f32 [max_tokens, V] */
  float *host_logits;     /* [max_tokens, V] */
  Work w;
  HnScratch sc;
  HnCmd *cmd;
} S2SSession;

static void
session_free (S2SSession *s)
{
  if (!s)
    return;
  for (int il = 0; s->ck && il < s->m->dec.n_layer; il++)
    {
      g_clear_pointer (&s->ck[il], hn_tensor_unref);
      g_clear_pointer (&s->cv[il], hn_tensor_unref);
    }
  g_free (s->kc);
  g_free (s->vc);
  g_free (s->ck);
  g_free (s->cv);
  g_free (s->btab);
  g_free (s->len);
  g_free (s->host_logits);
  hn_scratch_clear (&s->sc);
  g_clear_pointer (&s->cmd, hn_cmd_free);
  g_clear_pointer (&s->owned, g_ptr_array_unref);
  g_free (s);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (S2SSession, session_free)

static HnTensor *
sess_tensor (S2SSession *s, const char *name, HnDType dt, int ndim, const gint64 *shape, GError **error)
{
  HnTensor *t = hn_tensor_new_named (s->m->ctx, name, dt, ndim, shape, error);
  if (t)
    g_ptr_array_add (s->owned, t);
  return t;
}

static S2SSession *
session_new (HnSeq2Seq *m, int max_rows, int max_ctx, int max_tokens, GError **error)
{
  if (!m->t5 && max_ctx > m->n_pos)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%d decoder tokens exceed the %d positions of %s",
                   max_ctx, m->n_pos, m->arch->model_type);
      return NULL;
    }
  g_autoptr (S2SSession) s = g_new0 (S2SSession, 1);
  s->m = m;
  s->max_rows = max_rows, s->max_ctx = max_ctx, s->max_tokens = max_tokens;
  s->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  hn_scratch_init (&s->sc, m->ctx);
  s->len = g_new0 (int, max_rows);
  int L = m->dec.n_layer, H = m->dec.H;
  gint64 HD = (gint64) H * m->D, V = m->vocab;
  s->kc = g_new0 (HnTensor *, L);
  s->vc = g_new0 (HnTensor *, L);
  s->ck = g_new0 (HnTensor *, L);
  s->cv = g_new0 (HnTensor *, L);
  gint64 cshape[] = { max_rows, max_ctx, HD };
  for (int il = 0; il < L; il++)
    {
      if (!(s->kc[il] = sess_tensor (s, "seq2seq.k_cache", HN_DTYPE_F32, 3, cshape, error)) ||
          !(s->vc[il] = sess_tensor (s, "seq2seq.v_cache", HN_DTYPE_F32, 3, cshape, error)))
        return NULL;
    }
  if (!(s->tmp = sess_tensor (s, "seq2seq.reorder", HN_DTYPE_F32, 3, cshape, error)) ||
      !(s->ids = sess_tensor (s, "seq2seq.ids", HN_DTYPE_I32, 1, (gint64[]) { max_tokens }, error)) ||
      !(s->pos = sess_tensor (s, "seq2seq.pos", HN_DTYPE_I32, 1, (gint64[]) { max_tokens }, error)) ||
      !(s->logits = sess_tensor (s, "seq2seq.logits", HN_DTYPE_F32, 2, (gint64[]) { max_tokens, V }, error)) ||
      !work_new (m, s->owned, &s->w, max_tokens, max_ctx, m->dec.F, error) || !(s->cmd = hn_cmd_new (m->ctx, error)))
    return NULL;
  s->host_logits = g_new (float, (gsize) max_tokens * V);
  /* T5: decoder self-attention biases of every (query, key) position pair, causal buckets */
  if (m->t5)
    {
      int n_own = m->bias_per_layer ? L : 1;
      s->btab = g_new0 (HnTensor *, n_own);
      gint64 n = (gint64) max_ctx * H * max_ctx;
      g_autofree float *b = g_new (float, n);
      for (int o = 0; o < n_own; o++)
        {
          const float *rel = m->dec.l[o].rel;
          for (gint64 p = 0; p < max_ctx; p++)
            for (gint64 j = 0; j < max_ctx; j++)
              {
                int bk = hn_t5_relative_bucket ((int) (j - p), FALSE, m->buckets, m->max_distance);
                for (int h = 0; h < H; h++)
                  b[(p * H + h) * max_ctx + j] = rel[bk * H + h];
              }
          if (!(s->btab[o] = sess_tensor (s, "seq2seq.bias_table", HN_DTYPE_F32, 3, (gint64[]) { max_ctx, H, max_ctx },
                                          error)) ||
              !hn_tensor_upload_f32 (s->btab[o], b, (gsize) n, error))
            return NULL;
        }
    }
  /* unwritten cache rows are read (with zero weight) by the biased path: keep them finite */
  for (int il = 0; il < L; il++)
    if (!hn_op_fill (s->cmd, s->kc[il], 0.0f, error) || !hn_op_fill (s->cmd, s->vc[il], 0.0f, error))
      return NULL;
  if (!hn_cmd_submit_wait (s->cmd, error))
    return NULL;
  return g_steal_pointer (&s);
}

/* Device copy of host data, kept until the recording is submitted. */
static HnTensor *
keep_f32 (HnSeq2Seq *m, GPtrArray *keep, const char *name, int ndim, const gint64 *shape, const float *data,
          GError **error)
{
  HnTensor *t = hn_tensor_new_named (m->ctx, name, HN_DTYPE_F32, ndim, shape, error);
  if (!t)
    return NULL;
  g_ptr_array_add (keep, t);
  return hn_tensor_upload_f32 (t, data, (gsize) t->n, error) ? t : NULL;
}

/* The self-attention bias or mask of each encoder layer: T5's relative buckets (from the first
 * layer, or each in umt5), longt5's local / global biases, led's and pegasus_x's masks (one per
 * distinct window / block offset). bias[il] [H, S, keys] or mask[il] [rows, rows]. */
static gboolean
encoder_biases (HnSeq2Seq *m, GPtrArray *keep, int S, HnTensor **bias, HnTensor **mask, GError **error)
{
  gint64 H = m->enc.H, R = hn_s2s_enc_rows (m, S), K = hn_s2s_enc_keys (m, S);
  for (int il = 0; il < m->enc.n_layer; il++)
    {
      if (m->enc_attn == S2S_ENC_LED || m->enc_attn == S2S_ENC_PEGASUS_X)
        {
          for (int jl = 0; jl < il && !mask[il]; jl++)
            if (m->enc_attn == S2S_ENC_LED ? m->led_window[jl] == m->led_window[il] : jl % 2 == il % 2)
              mask[il] = mask[jl];
          g_autofree float *mk = mask[il] ? NULL : hn_s2s_enc_mask (m, il, S);
          if (mk)
            CK ((mask[il] = keep_f32 (m, keep, "enc.mask", 2, (gint64[]) { R, R }, mk, error)));
        }
      else if (m->t5 && il > 0 && !m->bias_per_layer)
        bias[il] = bias[0];
      else if (m->t5)
        {
          g_autofree float *b = m->enc_attn == S2S_ENC_FULL ? encoder_bias (m, m->enc.l[il].rel, S)
                                                             : hn_s2s_longt5_bias (m, S);
          CK ((bias[il] = keep_f32 (m, keep, "enc.bias", 3, (gint64[]) { H, S, K }, b, error)));
        }
    }
  return TRUE;
}

/* Runs the encoder over src and stores every decoder layer's cross-attention keys/values. */
static gboolean
session_encode (S2SSession *s, const int32_t *src, int n, GError **error)
{
  HnSeq2Seq *m = s->m;
  if (n <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no encoder input ids");
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    if (src[i] < 0 || src[i] >= m->vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "input id %d at position %d is outside the vocabulary (0..%d)", src[i], i, m->vocab - 1);
        return FALSE;
      }
  /* led runs its encoder padded to a multiple of the largest window (the padding is masked) */
  int n_padded = m->pad_multiple ? (n + m->pad_multiple - 1) / m->pad_multiple * m->pad_multiple : n;
  if (!m->t5 && n_padded > m->n_pos_enc)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%d encoder tokens%s exceed the %d positions of %s", n,
                   n_padded > n ? " (padded to a multiple of attention_window)" : "", m->n_pos_enc, m->arch->model_type);
      return FALSE;
    }
  /* the stream: R rows (pegasus_x's globals, then the S tokens) attending over K keys */
  gint64 S = n, C = m->C, H = m->enc.H, D = m->D, HD = H * D;
  gint64 R = hn_s2s_enc_rows (m, n), K = hn_s2s_enc_keys (m, n), G0 = R - S;
  gint64 GK = m->enc_attn == S2S_ENC_TGLOBAL ? K - S : 0; /* longt5 aggregate keys after the tokens */
  g_autoptr (GPtrArray) keep = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  Work w;
  CK (work_new (m, keep, &w, MAX (R, K), K, m->enc.F, error));
  HnTensor *ids = hn_tensor_new_named (m->ctx, "enc.ids", HN_DTYPE_I32, 1, (gint64[]) { S }, error);
  HnTensor *pos = ids ? hn_tensor_new_named (m->ctx, "enc.pos", HN_DTYPE_I32, 1, (gint64[]) { S }, error) : NULL;
  HnTensor *gids = pos && G0 ? hn_tensor_new_named (m->ctx, "enc.global_ids", HN_DTYPE_I32, 1, (gint64[]) { G0 }, error)
                             : NULL;
  HnTensor *made[] = { ids, pos, gids };
  for (gsize i = 0; i < G_N_ELEMENTS (made); i++)
    if (made[i])
      g_ptr_array_add (keep, made[i]);
  CK (pos && (!G0 || gids));
  g_autofree int32_t *p = g_new (int32_t, MAX (S, G0));
  for (int i = 0; i < n; i++)
    p[i] = i + m->pos_offset;
  CK (hn_tensor_upload_i32 (ids, src, (gsize) n, error) && hn_tensor_upload_i32 (pos, p, (gsize) n, error));
  for (int i = 0; i < G0; i++)
    p[i] = i;
  CK (!G0 || hn_tensor_upload_i32 (gids, p, (gsize) G0, error));
  g_autofree HnTensor **bias = g_new0 (HnTensor *, m->enc.n_layer), **mask = g_new0 (HnTensor *, m->enc.n_layer);
  CK (encoder_biases (m, keep, n, bias, mask, error));
  /* longt5 transient-global: which block each token adds into, one-hot [G, S] */
  HnTensor *onehot = NULL;
  if (GK)
    {
      g_autofree int *blk = hn_s2s_longt5_block_ids (m, n);
      g_autofree float *oh = g_new0 (float, (gsize) GK * S);
      for (int i = 0; i < n; i++)
        if (blk[i] >= 0)
          oh[(gsize) blk[i] * S + i] = 1.0f;
      CK ((onehot = keep_f32 (m, keep, "enc.blocks", 2, (gint64[]) { GK, S }, oh, error)));
    }
  /* cross-attention keys/values live as long as the session */
  for (int il = 0; il < m->dec.n_layer; il++)
    {
      g_clear_pointer (&s->ck[il], hn_tensor_unref);
      g_clear_pointer (&s->cv[il], hn_tensor_unref);
      s->ck[il] = hn_tensor_new_named (m->ctx, "seq2seq.cross_k", HN_DTYPE_F32, 2, (gint64[]) { S, HD }, error);
      s->cv[il] = s->ck[il] ? hn_tensor_new_named (m->ctx, "seq2seq.cross_v", HN_DTYPE_F32, 2, (gint64[]) { S, HD }, error)
                            : NULL;
      CK (s->cv[il]);
    }
  s->n_src = n;

  HnCmd *cmd = s->cmd;
  HnScratch *sc = &s->sc;
  HnTensor *x = as2 (sc, w.x, R, C, error), *h = as2 (sc, w.h, R, C, error), *o = as2 (sc, w.o, R, C, error);
  HnTensor *q = as2 (sc, w.q, R, HD, error), *k = as2 (sc, w.k, R, HD, error), *v = as2 (sc, w.v, R, HD, error);
  HnTensor *att = as2 (sc, w.att, R, HD, error), *d = as2 (sc, w.d, R, C, error);
  HnTensor *q3 = as3 (sc, w.q, R, H, D, error), *k3 = as3 (sc, w.k, K, H, D, error), *v3 = as3 (sc, w.v, K, H, D, error);
  HnTensor *att3 = as3 (sc, w.att, R, H, D, error);
  HnTensor *xt = x ? hn_scratch_rows (sc, x, G0, S, error) : NULL, *pe = as2 (sc, w.h, S, C, error);
  gboolean ok = x && h && o && q && k && v && att && d && q3 && k3 && v3 && att3 && xt && pe &&
                embed (m, cmd, xt, pe, &m->enc, m->pos, ids, pos, error);
  /* pegasus_x's global rows: embed_global, neither scaled nor positioned */
  HnTensor *xg = ok && G0 ? hn_scratch_rows (sc, x, 0, G0, error) : NULL, *hg = xg ? hn_scratch_rows (sc, h, 0, G0, error) : NULL;
  HnTensor *ht = ok && G0 ? hn_scratch_rows (sc, h, G0, S, error) : NULL;
  if (ok && G0)
    ok = xg && hg && ht && hn_op_embedding (cmd, xg, m->embed_global, gids, error);
  /* longt5's aggregates: [G, C] sums of the normed tokens of each block, their k/v after the tokens' */
  HnTensor *agg = ok && GK ? as2 (sc, w.d, GK, C, error) : NULL;
  HnTensor *kg = agg ? hn_scratch_rows (sc, as2 (sc, w.k, K, HD, error), S, GK, error) : NULL;
  HnTensor *vg = kg ? hn_scratch_rows (sc, as2 (sc, w.v, K, HD, error), S, GK, error) : NULL;
  ok = ok && (!GK || vg);
  for (int il = 0; ok && il < m->enc.n_layer; il++)
    {
      const S2SLayer *lw = &m->enc.l[il];
      HnTensor *in;
      if (G0) /* pegasus_x (pre-norm): the global rows have their own norm */
        in = norm (m, cmd, hg, xg, lw->gn_w, lw->gn_b, error) && norm (m, cmd, ht, xt, lw->n1_w, lw->n1_b, error) ? h : NULL;
      else
        in = sub_in (m, cmd, x, h, lw->n1_w, lw->n1_b, error);
      ok = in && hn_op_matmul (cmd, q, in, lw->wq, lw->bq, error) && hn_op_matmul (cmd, k, in, lw->wk, lw->bk, error) &&
           hn_op_matmul (cmd, v, in, lw->wv, lw->bv, error);
      if (ok && GK)
        ok = hn_op_bmm (cmd, agg, onehot, in, HN_MATMUL_DEFAULT, 1.0f, error) &&
             norm (m, cmd, agg, agg, lw->gn_w, NULL, error) && hn_op_matmul (cmd, kg, agg, lw->wk, lw->bk, error) &&
             hn_op_matmul (cmd, vg, agg, lw->wv, lw->bv, error);
      ok = ok && hn_encdec_attend (cmd, sc, &w.aw, att3, q3, k3, v3, m->alpha, bias[il], mask[il], FALSE, 0, error) &&
           hn_op_matmul (cmd, o, att, lw->wo, lw->bo, error) && residual (m, cmd, x, o, lw->n1_w, lw->n1_b, error);
      in = ok ? sub_in (m, cmd, x, h, lw->n3_w, lw->n3_b, error) : NULL;
      ok = in && mlp (m, cmd, sc, &w, lw, in, d, R, m->enc.F, error) && residual (m, cmd, x, d, lw->n3_w, lw->n3_b, error);
    }
  if (ok && m->enc.final_w)
    ok = norm (m, cmd, xt, xt, m->enc.final_w, m->enc.final_b, error);
  for (int il = 0; ok && il < m->dec.n_layer; il++)
    {
      const S2SLayer *lw = &m->dec.l[il];
      ok = hn_op_matmul (cmd, s->ck[il], xt, lw->ck, lw->cbk, error) &&
           hn_op_matmul (cmd, s->cv[il], xt, lw->cv, lw->cbv, error);
    }
  ok = ok && hn_cmd_submit_wait (cmd, error);
  if (!ok)
    hn_cmd_reset (cmd);
  hn_scratch_reset (sc);
  return ok;
}

/* Appends T tokens to each of B rows (rows[b], all holding pos0 tokens) and writes the logits of all
 * B*T new positions into s->host_logits (row-major by row, then token). */
static gboolean
session_decode (S2SSession *s, int B, const int *rows, const int32_t *ids, int T, GError **error)
{
  HnSeq2Seq *m = s->m;
  gint64 N = (gint64) B * T, C = m->C, H = m->dec.H, D = m->D, HD = H * D, V = m->vocab;
  int pos0 = s->len[rows[0]];
  for (int b = 0; b < B; b++)
    if (rows[b] < 0 || rows[b] >= s->n_rows || s->len[rows[b]] != pos0)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "seq2seq: rows must be in 0..%d and of equal length",
                     s->n_rows - 1);
        return FALSE;
      }
  if (N > s->max_tokens || pos0 + T > s->max_ctx || !s->ck[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "seq2seq: %d x %d tokens at position %d do not fit the session (%d tokens, context %d)%s", B, T, pos0,
                   s->max_tokens, s->max_ctx, s->ck[0] ? "" : " or nothing was encoded");
      return FALSE;
    }
  for (gint64 i = 0; i < N; i++)
    if (ids[i] < 0 || ids[i] >= V)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "decoder id %d is outside the vocabulary (0..%d)",
                     ids[i], m->vocab - 1);
        return FALSE;
      }
  g_autofree int32_t *p = g_new (int32_t, (gsize) B * (gsize) T);
  for (gint64 i = 0; i < N; i++)
    p[i] = pos0 + (int) (i % T) + m->pos_offset;
  HnScratch *sc = &s->sc;
  HnCmd *cmd = s->cmd;
  Work *w = &s->w;
  gint64 S = pos0 + T, n_ctx = s->max_ctx;
  HnTensor *ids_t = hn_scratch_rows (sc, s->ids, 0, N, error), *pos_t = hn_scratch_rows (sc, s->pos, 0, N, error);
  HnTensor *x = as2 (sc, w->x, N, C, error), *h = as2 (sc, w->h, N, C, error), *o = as2 (sc, w->o, N, C, error);
  HnTensor *q = as2 (sc, w->q, N, HD, error), *k = as2 (sc, w->k, N, HD, error), *v = as2 (sc, w->v, N, HD, error);
  HnTensor *att = as2 (sc, w->att, N, HD, error), *d = as2 (sc, w->d, N, C, error);
  HnTensor *q3 = as3 (sc, w->q, N, H, D, error), *att3 = as3 (sc, w->att, N, H, D, error);
  HnTensor *lg = hn_scratch_rows (sc, s->logits, 0, N, error);
  HnTensor *bias_t = m->t5 ? as3 (sc, w->bias_t, H, T, n_ctx, error) : NULL;
  HnTensor *bias = m->t5 ? as3 (sc, w->bias, H, T, S, error) : NULL;
  gboolean ok = ids_t && pos_t && x && h && o && q && k && v && att && d && q3 && att3 && lg && (!m->t5 || (bias_t && bias)) &&
                hn_tensor_upload_i32 (ids_t, ids, (gsize) N, error) && hn_tensor_upload_i32 (pos_t, p, (gsize) N, error) &&
                embed (m, cmd, x, h, &m->dec, m->dec_pos ? m->dec_pos : m->pos, ids_t, pos_t, error);
  static const int swap01[] = { 1, 0, 2 };
  for (int il = 0; ok && il < m->dec.n_layer; il++)
    {
      const S2SLayer *lw = &m->dec.l[il];
      if (m->t5 && (il == 0 || m->bias_per_layer))
        {
          /* bias [H, T, pos0 + T] for queries pos0.. from the table [query, H, key] */
          HnTensor *tab = hn_scratch_rows (sc, s->btab[m->bias_per_layer ? il : 0], pos0, T, error);
          ok = tab && hn_op_permute (cmd, bias_t, tab, swap01, error) && hn_op_slice (cmd, bias, bias_t, 2, 0, error);
        }
      HnTensor *in = ok ? sub_in (m, cmd, x, h, lw->n1_w, lw->n1_b, error) : NULL;
      ok = in && hn_op_matmul (cmd, q, in, lw->wq, lw->bq, error) && hn_op_matmul (cmd, k, in, lw->wk, lw->bk, error) &&
           hn_op_matmul (cmd, v, in, lw->wv, lw->bv, error);
      HnTensor *kf = ok ? hn_scratch_shape (sc, s->kc[il], 2, (gint64[]) { (gint64) s->max_rows * n_ctx, HD }, error) : NULL;
      HnTensor *vf = kf ? hn_scratch_shape (sc, s->vc[il], 2, (gint64[]) { (gint64) s->max_rows * n_ctx, HD }, error) : NULL;
      ok = vf != NULL;
      for (int b = 0; ok && b < B; b++)
        {
          gint64 r0 = (gint64) rows[b] * n_ctx;
          HnTensor *kd = hn_scratch_rows (sc, kf, r0 + pos0, T, error), *vd = hn_scratch_rows (sc, vf, r0 + pos0, T, error);
          HnTensor *ks = hn_scratch_rows (sc, k, (gint64) b * T, T, error), *vs = hn_scratch_rows (sc, v, (gint64) b * T, T, error);
          HnTensor *kr = hn_scratch_rows (sc, kf, r0, S, error), *vr = hn_scratch_rows (sc, vf, r0, S, error);
          HnTensor *qb = hn_scratch_rows (sc, q3, (gint64) b * T, T, error);
          HnTensor *ab = hn_scratch_rows (sc, att3, (gint64) b * T, T, error);
          HnTensor *kr3 = kr ? hn_scratch_shape (sc, kr, 3, (gint64[]) { S, H, D }, error) : NULL;
          HnTensor *vr3 = vr ? hn_scratch_shape (sc, vr, 3, (gint64[]) { S, H, D }, error) : NULL;
          ok = kd && vd && ks && vs && qb && ab && kr3 && vr3 && hn_op_copy (cmd, kd, ks, error) &&
               hn_op_copy (cmd, vd, vs, error) &&
               hn_encdec_attend (cmd, sc, &w->aw, ab, qb, kr3, vr3, m->alpha, bias, NULL, TRUE, pos0, error);
        }
      ok = ok && hn_op_matmul (cmd, o, att, lw->wo, lw->bo, error) && residual (m, cmd, x, o, lw->n1_w, lw->n1_b, error);
      /* cross-attention over the encoder output */
      HnTensor *ck3 = ok ? hn_scratch_shape (sc, s->ck[il], 3, (gint64[]) { s->n_src, H, D }, error) : NULL;
      HnTensor *cv3 = ck3 ? hn_scratch_shape (sc, s->cv[il], 3, (gint64[]) { s->n_src, H, D }, error) : NULL;
      in = cv3 ? sub_in (m, cmd, x, h, lw->n2_w, lw->n2_b, error) : NULL;
      ok = in && hn_op_matmul (cmd, q, in, lw->cq, lw->cbq, error) &&
           hn_encdec_attend (cmd, sc, &w->aw, att3, q3, ck3, cv3, m->alpha, NULL, NULL, FALSE, 0, error) &&
           hn_op_matmul (cmd, o, att, lw->co, lw->cbo, error) && residual (m, cmd, x, o, lw->n2_w, lw->n2_b, error);
      in = ok ? sub_in (m, cmd, x, h, lw->n3_w, lw->n3_b, error) : NULL;
      ok = in && mlp (m, cmd, sc, w, lw, in, d, N, m->dec.F, error) && residual (m, cmd, x, d, lw->n3_w, lw->n3_b, error);
    }
  if (ok && m->dec.final_w)
    ok = norm (m, cmd, x, x, m->dec.final_w, m->dec.final_b, error);
  if (ok && m->lm_scale != 1.0f)
    ok = hn_op_scale (cmd, x, x, m->lm_scale, 0.0f, error);
  ok = ok && hn_op_matmul (cmd, lg, x, m->lm_head, m->logits_bias, error) && hn_cmd_submit_wait (cmd, error);
  if (!ok)
    hn_cmd_reset (cmd);
  ok = ok && hn_tensor_download_f32 (lg, s->host_logits, (gsize) (N * V), error);
  hn_scratch_reset (sc); /* after the download: lg is one of its views */
  if (ok)
    for (int b = 0; b < B; b++)
      s->len[rows[b]] += T;
  return ok;
}

/* ---------------------------------------------------------------- HnLmOps */

static gboolean
ops_reset (gpointer self, int n_rows, GError **error)
{
  S2SSession *s = self;
  if (n_rows < 1 || n_rows > s->max_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "seq2seq: %d rows exceed the session's %d", n_rows,
                   s->max_rows);
      return FALSE;
    }
  s->n_rows = n_rows;
  memset (s->len, 0, sizeof (int) * (gsize) s->max_rows);
  return TRUE;
}

static gboolean
ops_prefill (gpointer self, int row, const int32_t *ids, int n, float *logits, GError **error)
{
  S2SSession *s = self;
  /* the decoder prompt (decoder_start_token_id) is short: one forward */
  CK (session_decode (s, 1, &row, ids, n, error));
  memcpy (logits, s->host_logits + (gsize) (n - 1) * s->m->vocab, sizeof (float) * (gsize) s->m->vocab);
  return TRUE;
}

static gboolean
ops_decode (gpointer self, int n, const int *rows, const int32_t *tokens, float *logits, GError **error)
{
  S2SSession *s = self;
  CK (session_decode (s, n, rows, tokens, 1, error));
  memcpy (logits, s->host_logits, sizeof (float) * (gsize) n * s->m->vocab);
  return TRUE;
}

static gboolean
ops_reorder (gpointer self, int n_rows, const int *src, GError **error)
{
  S2SSession *s = self;
  HnScratch *sc = &s->sc;
  gboolean ok = TRUE;
  g_autofree int *len = g_memdup2 (s->len, sizeof (int) * (gsize) s->max_rows);
  for (int r = 0; r < n_rows; r++)
    if (src[r] < 0 || src[r] >= s->n_rows)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "seq2seq: reorder source row %d is out of range", src[r]);
        return FALSE;
      }
  HnTensor *all_tmp = hn_scratch_rows (sc, s->tmp, 0, n_rows, error);
  ok = all_tmp != NULL;
  for (int il = 0; ok && il < s->m->dec.n_layer; il++)
    for (int kv = 0; ok && kv < 2; kv++)
      {
        HnTensor *cache = kv ? s->vc[il] : s->kc[il];
        for (int r = 0; ok && r < n_rows; r++)
          {
            HnTensor *from = hn_scratch_rows (sc, cache, src[r], 1, error), *to = hn_scratch_rows (sc, s->tmp, r, 1, error);
            ok = from && to && hn_op_copy (s->cmd, to, from, error);
          }
        HnTensor *dst = ok ? hn_scratch_rows (sc, cache, 0, n_rows, error) : NULL;
        ok = dst && hn_op_copy (s->cmd, dst, all_tmp, error);
      }
  ok = ok && hn_cmd_submit_wait (s->cmd, error);
  if (!ok)
    hn_cmd_reset (s->cmd);
  hn_scratch_reset (sc);
  for (int r = 0; ok && r < n_rows; r++)
    s->len[r] = len[src[r]];
  return ok;
}

static const HnLmOps s2s_ops = { ops_reset, ops_prefill, ops_decode, ops_reorder };

/* ---------------------------------------------------------------- entry points */

gboolean
hn_seq2seq_logits (HnSeq2Seq *m, const int32_t *src, int n_src, const int32_t *dec, int n_dec, float *logits,
                   GError **error)
{
  if (n_dec <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no decoder input ids");
      return FALSE;
    }
  g_autoptr (S2SSession) s = session_new (m, 1, n_dec, n_dec, error);
  int row = 0;
  CK (s && session_encode (s, src, n_src, error) && ops_reset (s, 1, error) &&
      session_decode (s, 1, &row, dec, n_dec, error));
  memcpy (logits, s->host_logits, sizeof (float) * (gsize) n_dec * m->vocab);
  return TRUE;
}

HnGenerateResult *
hn_seq2seq_generate (HnSeq2Seq *m, const HnGenerateOptions *opt, const int32_t *src, int n_src, HnDecodeFunc decode,
                     gpointer decode_data, HnTokenFunc on_token, gpointer token_data, GCancellable *cancellable,
                     GError **error)
{
  const int32_t start = m->dec_start;
  int max_len = hn_generate_options_max_length (opt, 1);
  if (max_len <= 1)
    max_len = 2; /* hn_generate_run reports the real problem */
  int rows = MAX (1, opt->num_beams);
  g_autoptr (S2SSession) s = session_new (m, rows, max_len, rows, error);
  if (!s || !session_encode (s, src, n_src, error))
    return NULL;
  HnGenerateModel gm = { &s2s_ops, s, m->vocab, decode, decode_data, on_token, token_data };
  return hn_generate_run (&gm, opt, &start, 1, cancellable, error);
}
