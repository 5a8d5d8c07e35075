/* Encoders with a masked-LM head (see encoder.h). One graph for the BERT
 * family (post-norm blocks, learned absolute positions, token types) and
 * ModernBERT (pre-norm, rope, alternating local/global attention, gated
 * GeLU); the name scheme of the registry row picks the checkpoint names. */
#include "base/hn-error.h"
#include "encdec/encdec-private.h"
#include "encdec/encoder-private.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

const HnArchInfo *
hn_encoder_get_arch (HnEncoder *m)
{
  return m->arch;
}

int
hn_encoder_get_vocab (HnEncoder *m)
{
  return m->vocab;
}

int
hn_encoder_get_type_vocab (HnEncoder *m)
{
  return m->type ? m->type_vocab : 0;
}

guint64
hn_encoder_get_weight_bytes (HnEncoder *m)
{
  return m->weight_bytes;
}

void
hn_encoder_free (HnEncoder *m)
{
  if (!m)
    return;
  g_clear_pointer (&m->owned, g_ptr_array_unref);
  g_free (m->layers);
  g_free (m->order);
  g_free (m->layer_local);
  g_free (m->rel);
  g_free (m->xmod_lang);
  hn_mobilebert_free (m->mobile);
  hn_deberta_free (m->deberta);
  g_clear_pointer (&m->ctx, hn_vk_context_unref);
  g_free (m->dir);
  g_free (m);
}

/* ---------------------------------------------------------------- config */

static gint64
cfg_int (const HnModelConfig *cfg, const char *key, gint64 dflt, GError **error)
{
  gint64 v;
  GError *e = NULL;
  if (hn_model_config_get_int (cfg, key, &v, &e))
    return v;
  if (e)
    g_propagate_error (error, e);
  return dflt;
}

static gboolean
act_of (const char *file, const char *key, const char *name, HnActivation *out, GError **error)
{
  if (hn_activation_from_string (name, out))
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s \"%s\" is not a supported activation", file, key, name);
  return FALSE;
}

static gboolean
positive (const HnModelConfig *cfg, const char *what, gint64 v, GError **error)
{
  if (v > 0 && v < (1 << 24))
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s is missing or out of range (%" G_GINT64_FORMAT ")", cfg->path,
               what, v);
  return FALSE;
}

/* A boolean / integer of config.json, `dflt` when absent; a value of the wrong type is an error. */
gboolean
hn_encoder_cfg_bool (const HnModelConfig *cfg, const char *key, gboolean dflt, gboolean *out, GError **error)
{
  GError *e = NULL;
  *out = dflt;
  if (!hn_model_config_get_bool (cfg, key, out, &e) && e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_encoder_cfg_int (const HnModelConfig *cfg, const char *key, gint64 dflt, gint64 *out, GError **error)
{
  GError *e = NULL;
  if (hn_model_config_get_int (cfg, key, out, &e))
    return TRUE;
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  *out = dflt;
  return TRUE;
}

static gboolean
refuse_switch (const HnModelConfig *cfg, const char *mt, const char *what, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s %s is not supported", cfg->path, mt, what);
  return FALSE;
}

/* The switches of the bert variants that run this graph: ibert (float mode only), xmod (its default
 * language's adapter, post-norm), longformer (one sliding window for every layer, no global tokens). */
static gboolean
resolve_variants (HnEncoder *m, const HnModelConfig *cfg, GError **error)
{
  const char *mt = m->arch->model_type;
  gboolean on;
  if (strcmp (mt, "ibert") == 0)
    {
      CK (hn_encoder_cfg_bool (cfg, "quant_mode", FALSE, &on, error));
      if (on)
        return refuse_switch (cfg, mt, "quant_mode true (integer-only kernels)", error);
    }
  else if (strcmp (mt, "xmod") == 0)
    {
      CK (hn_encoder_cfg_bool (cfg, "pre_norm", FALSE, &on, error));
      if (on)
        return refuse_switch (cfg, mt, "pre_norm true", error);
      CK (hn_encoder_cfg_bool (cfg, "adapter_layer_norm", FALSE, &m->xmod_adapter_ln, error) &&
          hn_encoder_cfg_bool (cfg, "adapter_reuse_layer_norm", TRUE, &m->xmod_reuse_ln, error) &&
          hn_encoder_cfg_bool (cfg, "ln_before_adapter", TRUE, &m->xmod_ln_before, error));
      const char *lang = hn_model_config_get_string (cfg, "default_language");
      JsonNode *ln = json_object_get_member (hn_model_config_get_raw (cfg), "languages");
      if (!lang || !ln || !JSON_NODE_HOLDS_ARRAY (ln))
        return refuse_switch (cfg, mt, "without default_language and languages (a language per input)", error);
      JsonArray *la = json_node_get_array (ln);
      for (guint i = 0; i < json_array_get_length (la); i++)
        {
          const char *l = json_node_get_string (json_array_get_element (la, i));
          if (l && strcmp (l, lang) == 0)
            m->xmod_lang = g_strdup (lang);
        }
      if (!m->xmod_lang)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: xmod default_language \"%s\" is not in languages",
                       cfg->path, lang);
          return FALSE;
        }
    }
  else if (strcmp (mt, "longformer") == 0)
    {
      /* LongformerSelfAttention without a global_attention_mask: each token sees attention_window / 2
       * tokens each side; transformers pads to a multiple of the window with masked keys, which
       * changes no unpadded row, so a dense -inf mask outside the window gives the same softmax */
      JsonNode *aw = json_object_get_member (hn_model_config_get_raw (cfg), "attention_window");
      gint64 w = 512;
      for (int il = 0; il < m->n_layer; il++)
        {
          gint64 wi = w;
          if (aw && JSON_NODE_HOLDS_ARRAY (aw))
            {
              JsonArray *a = json_node_get_array (aw);
              if ((int) json_array_get_length (a) != m->n_layer)
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                               "%s: attention_window should hold one window per layer", cfg->path);
                  return FALSE;
                }
              wi = json_array_get_int_element (a, il);
            }
          else if (aw && JSON_NODE_HOLDS_VALUE (aw))
            wi = json_node_get_int (aw);
          if (wi <= 0 || wi % 2 || wi >= (1 << 24))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: attention_window %" G_GINT64_FORMAT
                           " is not positive and even", cfg->path, wi);
              return FALSE;
            }
          if (il > 0 && wi != w)
            return refuse_switch (cfg, mt, "attention_window differing between layers", error);
          w = wi;
        }
      m->layer_local = g_new (guint8, m->n_exec);
      memset (m->layer_local, 1, (gsize) m->n_exec);
      m->local_window = (int) (w / 2);
    }
  return TRUE;
}

static gboolean
resolve (HnEncoder *m, const HnModelConfig *cfg, GError **error)
{
  HnNameScheme ns = m->arch->names;
  GError *e = NULL;
  m->vocab = (int) cfg->vocab_size;
  m->C = (int) cfg->hidden_size;
  m->n_layer = (int) cfg->num_hidden_layers;
  m->H = (int) cfg->num_attention_heads;
  if (strcmp (m->arch->model_type, "fnet") == 0 && m->H <= 0)
    m->H = 1; /* no attention: one "head" of the whole width */
  m->F = (int) (ns == HN_NAMES_DISTILBERT ? cfg_int (cfg, "hidden_dim", -1, &e) : cfg->intermediate_size);
  m->E = (int) cfg_int (cfg, ns == HN_NAMES_REMBERT ? "input_embedding_size" : "embedding_size", m->C, &e);
  m->head_width = (int) cfg_int (cfg, "output_embedding_size", m->C, &e);
  if (ns == HN_NAMES_XLM && m->F <= 0)
    m->F = 4 * m->C; /* XLM's TransformerFFN: 4 * emb_dim */
  m->type_vocab = (int) cfg_int (cfg, "type_vocab_size", 2, &e);
  m->n_pos = (int) cfg->max_position_embeddings;
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  CK (positive (cfg, "vocab_size", m->vocab, error) && positive (cfg, "hidden_size", m->C, error) &&
      positive (cfg, "num_hidden_layers", m->n_layer, error) && positive (cfg, "num_attention_heads", m->H, error) &&
      positive (cfg, "intermediate_size", m->F, error) && positive (cfg, "embedding_size", m->E, error));
  if (m->C % m->H)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: hidden_size %d is not a multiple of num_attention_heads %d",
                   cfg->path, m->C, m->H);
      return FALSE;
    }
  m->D = m->C / m->H;
  m->pre_norm = m->arch->block == HN_BLOCK_ENCODER_PRE_NORM;
  m->gated = (m->arch->quirks & HN_QUIRK_GATED_MLP) != 0;
  m->pad_positions = -1;
  if (m->arch->quirks & HN_QUIRK_PAD_POSITIONS)
    m->pad_positions = cfg->pad_token_id >= 0 ? (int) cfg->pad_token_id : 1;

  /* norms: bert-style layer_norm_eps (1e-12), distilbert fixed 1e-12, modernbert norm_eps (1e-5) */
  double eps = cfg->norm_eps;
  if (ns == HN_NAMES_MODERNBERT)
    {
      eps = 1e-5;
      if (!hn_model_config_get_double (cfg, "norm_eps", &eps, error) && error && *error)
        return FALSE;
    }
  else if (ns == HN_NAMES_EUROBERT)
    eps = isnan (eps) ? 1e-5 : eps;
  else if (ns == HN_NAMES_DISTILBERT || isnan (eps))
    eps = 1e-12;
  m->eps = m->head_eps = (float) eps;

  const char *act = ns == HN_NAMES_DISTILBERT ? hn_model_config_get_string (cfg, "activation") : cfg->hidden_act;
  if (!act)
    act = m->arch->default_act;
  CK (act_of (cfg->path, "hidden_act", act, &m->act, error));
  /* the masked-LM head's activation: roberta and electra's generator use gelu whatever hidden_act says */
  const char *head_act = act;
  if (ns == HN_NAMES_ELECTRA || (ns != HN_NAMES_MODERNBERT && m->pad_positions >= 0))
    head_act = "gelu";
  else if (ns == HN_NAMES_MODERNBERT)
    {
      head_act = hn_model_config_get_string (cfg, "classifier_activation");
      if (!head_act)
        head_act = "gelu";
    }
  CK (act_of (cfg->path, "the head's activation", head_act, &m->head_act, error));

  if (ns == HN_NAMES_ALBERT)
    {
      gint64 groups = cfg_int (cfg, "num_hidden_groups", 1, &e), inner = cfg_int (cfg, "inner_group_num", 1, &e);
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      if (groups < 1 || inner < 1 || groups > m->n_layer || inner > 64)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: num_hidden_groups %" G_GINT64_FORMAT
                       " / inner_group_num %" G_GINT64_FORMAT " do not fit %d layers", cfg->path, groups, inner,
                       m->n_layer);
          return FALSE;
        }
      /* AlbertTransformer: layer i runs group i / (L / groups), each group all its inner layers */
      m->n_unique = (int) (groups * inner);
      m->n_exec = m->n_layer * (int) inner;
      m->order = g_new (int, m->n_exec);
      for (int i = 0; i < m->n_layer; i++)
        {
          int g = (int) (i / ((double) m->n_layer / (double) groups));
          for (int j = 0; j < inner; j++)
            m->order[i * inner + j] = g * (int) inner + j;
        }
    }
  else
    {
      m->n_unique = m->n_exec = m->n_layer;
      m->order = g_new (int, m->n_exec);
      for (int i = 0; i < m->n_exec; i++)
        m->order[i] = i;
    }

  if (ns == HN_NAMES_ESM || ns == HN_NAMES_XLM)
    {
      /* esm: rotary, no token dropout, no embedding norm; xlm: one language, learned positions, bidirectional */
      static const char *const esm_off[] = { "token_dropout", "emb_layer_norm_before", NULL };
      /* flaubert: XLM's layers, post-norm unless pre_norm */
      static const char *const xlm_off[] = { "sinusoidal_embeddings", "causal", "asm", "pre_norm", NULL };
      for (const char *const *k = ns == HN_NAMES_ESM ? esm_off : xlm_off; *k; k++)
        {
          gboolean on = FALSE;
          GError *be = NULL;
          if (!hn_model_config_get_bool (cfg, *k, &on, &be) && be)
            {
              g_propagate_error (error, be);
              return FALSE;
            }
          if (on)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s %s is not supported", cfg->path,
                           m->arch->model_type, *k);
              return FALSE;
            }
        }
      const char *pe = hn_model_config_get_string (cfg, "position_embedding_type");
      if (ns == HN_NAMES_ESM && pe && strcmp (pe, "rotary") != 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: esm position_embedding_type \"%s\" is not supported",
                       cfg->path, pe);
          return FALSE;
        }
      if (ns == HN_NAMES_XLM)
        {
          gboolean lang = TRUE, gelu = TRUE;
          gint64 n_langs = cfg_int (cfg, "n_langs", 1, &e);
          GError *be = NULL;
          if ((!hn_model_config_get_bool (cfg, "use_lang_emb", &lang, &be) && be) ||
              (!hn_model_config_get_bool (cfg, "gelu_activation", &gelu, &be) && be) || e)
            {
              g_propagate_error (error, be ? be : e);
              return FALSE;
            }
          if (lang && n_langs > 1)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: xlm language embeddings (n_langs %" G_GINT64_FORMAT
                           ") are not supported", cfg->path, n_langs);
              return FALSE;
            }
          m->act = gelu ? HN_ACT_GELU : HN_ACT_RELU;
        }
      if (ns == HN_NAMES_ESM)
        {
          m->head_act = HN_ACT_GELU;
          m->rope_theta = 10000.0;
          (void) hn_model_config_get_double (cfg, "rope_theta", &m->rope_theta, NULL);
          if (cfg->rope.from_rope_parameters && cfg->rope.theta > 0)
            m->rope_theta = cfg->rope.theta;
        }
    }
  if (ns == HN_NAMES_ROFORMER)
    {
      gboolean rv = FALSE;
      GError *re = NULL;
      if (!hn_model_config_get_bool (cfg, "rotary_value", &rv, &re) && re)
        {
          g_propagate_error (error, re);
          return FALSE;
        }
      m->rope_value = rv;
    }
  const char *attn_type = hn_model_config_get_string (cfg, "attention_type");
  if (strcmp (m->arch->model_type, "big_bird") == 0 && attn_type && strcmp (attn_type, "original_full") != 0)
    {
      /* BigBirdModel runs block_sparse as full attention when the input is at most
       * (5 + 2 * num_random_blocks) * block_size tokens; the sparse pattern itself is not built */
      gint64 bs = cfg_int (cfg, "block_size", 64, &e), nr = cfg_int (cfg, "num_random_blocks", 3, &e);
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      if (strcmp (attn_type, "block_sparse") != 0 || bs < 1 || nr < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: big_bird attention_type \"%s\" is not supported",
                       cfg->path, attn_type);
          return FALSE;
        }
      m->max_full_tokens = (int) ((5 + 2 * nr) * bs);
    }
  if (ns == HN_NAMES_MODERNBERT)
    {
      gint64 every = cfg_int (cfg, "global_attn_every_n_layers", 1, &e);
      gint64 local = cfg_int (cfg, "local_attention", -1, &e);
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      m->layer_local = g_new0 (guint8, m->n_exec);
      for (int i = 0; i < m->n_exec; i++)
        {
          if (cfg->layer_types && g_strv_length (cfg->layer_types) == (guint) m->n_exec)
            m->layer_local[i] = strcmp (cfg->layer_types[i], "sliding_attention") == 0;
          else
            m->layer_local[i] = every > 0 && i % every != 0;
          if (m->layer_local[i] && local < 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: local attention layers need local_attention",
                           cfg->path);
              return FALSE;
            }
        }
      m->local_window = (int) (local / 2);
    }
  return resolve_variants (m, cfg, error);
}

/* ---------------------------------------------------------------- weights */

typedef struct {
  const char *emb;   /* embeddings prefix */
  const char *layer; /* before the layer number */
  const char *q, *k, *v, *o, *ln1, *up, *down, *ln2;
  const char *proj;  /* E -> C projection or NULL */
} EncNames;

static void
names_for (HnNameScheme ns, EncNames *N, const char *base)
{
  memset (N, 0, sizeof *N);
  static char emb[64], layer[96];
  switch (ns)
    {
    case HN_NAMES_DISTILBERT:
      *N = (EncNames) { "distilbert.embeddings.", "distilbert.transformer.layer.", "attention.q_lin",
                        "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm", "ffn.lin1",
                        "ffn.lin2", "output_layer_norm", NULL };
      return;
    case HN_NAMES_ALBERT:
      *N = (EncNames) { "albert.embeddings.", "albert.encoder.albert_layer_groups.",
                        "attention.query", "attention.key", "attention.value", "attention.dense",
                        "attention.LayerNorm", "ffn", "ffn_output", "full_layer_layer_norm",
                        "albert.encoder.embedding_hidden_mapping_in" };
      return;
    case HN_NAMES_ESM:
      *N = (EncNames) { "esm.embeddings.", "esm.encoder.layer.", "attention.self.query", "attention.self.key",
                        "attention.self.value", "attention.output.dense", "attention.LayerNorm", "intermediate.dense",
                        "output.dense", "LayerNorm", NULL };
      return;
    case HN_NAMES_ROBERTA_PRELN:
    case HN_NAMES_MPNET:
      g_snprintf (emb, sizeof emb, "%s.embeddings.", base);
      g_snprintf (layer, sizeof layer, "%s.encoder.layer.", base);
      if (ns == HN_NAMES_MPNET)
        *N = (EncNames) { emb, layer, "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o",
                          "attention.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm", NULL };
      else
        *N = (EncNames) { emb, layer, "attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense", "attention.LayerNorm", "intermediate.dense", "output.dense",
                          "intermediate.LayerNorm", NULL };
      return;
    case HN_NAMES_MEGATRON_BERT:
    case HN_NAMES_XLMR_XL:
      g_snprintf (emb, sizeof emb, "%s.embeddings.", base);
      g_snprintf (layer, sizeof layer, "%s.encoder.layer.", base);
      if (ns == HN_NAMES_MEGATRON_BERT)
        *N = (EncNames) { emb, layer, "attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense", "attention.ln", "intermediate.dense", "output.dense", "ln", NULL };
      else
        *N = (EncNames) { emb, layer, "attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense", "attention.self_attn_layer_norm", "intermediate.dense",
                          "output.dense", "LayerNorm", NULL };
      return;
    default:
      g_snprintf (emb, sizeof emb, "%s.embeddings.", base);
      g_snprintf (layer, sizeof layer, "%s.encoder.layer.", base);
      *N = (EncNames) { emb, layer, "attention.self.query", "attention.self.key", "attention.self.value",
                        "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                        "output.LayerNorm",
                        ns == HN_NAMES_ELECTRA ? "electra.embeddings_project"
                        : ns == HN_NAMES_ROFORMER ? "roformer.embeddings_project"
                        : ns == HN_NAMES_REMBERT ? "rembert.encoder.embedding_hidden_mapping_in" : NULL };
      return;
    }
}


/* Token types whose other inputs this API leaves at 0, folded into one table [type_vocab, E]:
 * tapas sums row 0 of each of its token_type_embeddings_<i> (the table structure; with every id 0
 * all tokens share one cell, so positions stay 0..n-1) into a single-row table; layoutlm adds the
 * embeddings of bounding box (0, 0, 0, 0) (x and y twice, height and width once) to each type. */
static gboolean
load_fixed_types (HnEncoder *m, HnWLoader *L, const char *emb, GError **error)
{
  gint64 E = m->E;
  gboolean tapas = strcmp (m->arch->model_type, "tapas") == 0;
  g_autofree float *row = g_new0 (float, (gsize) E);
  g_autofree float *tab = NULL;
  if (tapas)
    {
      int k = 0;
      for (;; k++)
        {
          g_autofree char *n = g_strdup_printf ("%stoken_type_embeddings_%d.weight", emb, k);
          const HnSafetensorInfo *t = hn_wl_find (L, n, k == 0, error);
          if (!t)
            break;
          if (t->ndim != 2 || t->shape[1] != E || t->shape[0] < 1)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [types, %" G_GINT64_FORMAT "]",
                           t->file, t->name, E);
              return FALSE;
            }
          g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
          CK (f);
          for (gint64 j = 0; j < E; j++)
            row[j] += f[j];
        }
      CK (k > 0);
      m->type_vocab = 1;
      tab = g_steal_pointer (&row);
    }
  else
    {
      static const struct { const char *name; float times; } box[] = {
        { "x_position_embeddings", 2 }, { "y_position_embeddings", 2 }, { "h_position_embeddings", 1 },
        { "w_position_embeddings", 1 } };
      for (gsize i = 0; i < G_N_ELEMENTS (box); i++)
        {
          g_autofree char *n = g_strdup_printf ("%s%s.weight", emb, box[i].name);
          const HnSafetensorInfo *t = hn_wl_find (L, n, TRUE, error);
          CK (t);
          if (t->ndim != 2 || t->shape[1] != E || t->shape[0] < 1)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [positions, %" G_GINT64_FORMAT "]",
                           t->file, t->name, E);
              return FALSE;
            }
          g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
          CK (f);
          for (gint64 j = 0; j < E; j++)
            row[j] += box[i].times * f[j];
        }
      g_autofree char *tn = g_strdup_printf ("%stoken_type_embeddings.weight", emb);
      CK ((tab = hn_wl_host_matrix (L, tn, m->type_vocab, E, error)));
      for (gint64 t = 0; t < m->type_vocab; t++)
        for (gint64 j = 0; j < E; j++)
          tab[t * E + j] += row[j];
    }
  g_autofree char *nm = g_strdup_printf ("%stoken_types", emb);
  m->derived = TRUE;
  return (m->type = hn_wl_from_f32 (L, nm, 2, (gint64[]) { m->type_vocab, E }, tab, error)) != NULL;
}

/* RoCBert: the shape and pronunciation ids this API leaves at 0. Without concat_input they are not
 * read (transformers adds them only when given); with it, map_inputs_layer(cat(word, shape[0],
 * pronunciation[0])) replaces the word embedding, folded here into one input table [vocab, C]
 * (the decoder stays tied to the stored word embeddings). */
static gboolean
load_rocbert_inputs (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, const char *emb, GError **error)
{
  gint64 C = m->C, V = m->vocab;
  g_autofree char *mw = g_strdup_printf ("%smap_inputs_layer.weight", emb);
  g_autofree char *mb = g_strdup_printf ("%smap_inputs_layer.bias", emb);
  g_autofree char *sn = g_strdup_printf ("%sshape_embed.weight", emb);
  g_autofree char *pn = g_strdup_printf ("%spronunciation_embed.weight", emb);
  const HnSafetensorInfo *map = hn_wl_find (L, mw, FALSE, NULL);
  gboolean concat, shape, pron;
  CK (hn_encoder_cfg_bool (cfg, "concat_input", TRUE, &concat, error) && hn_encoder_cfg_bool (cfg, "enable_shape", TRUE, &shape, error) &&
      hn_encoder_cfg_bool (cfg, "enable_pronunciation", TRUE, &pron, error));
  const HnSafetensorInfo *st = hn_wl_find (L, sn, FALSE, NULL), *pt = hn_wl_find (L, pn, FALSE, NULL);
  if (!concat)
    {
      if (map)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s without concat_input", L->dir, mw);
          return FALSE;
        }
      return TRUE;
    }
  const HnSafetensorInfo *parts[2] = { shape ? st : NULL, pron ? pt : NULL };
  if ((shape && !st) || (pron && !pt) || !map)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: roc_bert concat_input needs %s, %s and %s", L->dir, mw, sn,
                   pn);
      return FALSE;
    }
  gint64 in = C;
  for (int i = 0; i < 2; i++)
    if (parts[i])
      {
        if (parts[i]->ndim != 2 || parts[i]->shape[0] < 1)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [ids, dim]", parts[i]->file,
                         parts[i]->name);
            return FALSE;
          }
        in += parts[i]->shape[1];
      }
  g_autofree float *w = hn_wl_host_matrix (L, mw, C, in, error);
  CK (w);
  g_autofree float *b = NULL;
  const HnSafetensorInfo *bt = hn_wl_find (L, mb, FALSE, NULL);
  if (bt && (bt->n_elements != C || !(b = hn_safetensor_info_dup_f32 (bt, error))))
    {
      if (!*error)
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should hold %" G_GINT64_FORMAT " values", bt->file,
                     bt->name, C);
      return FALSE;
    }
  /* the constant part: bias + the columns of shape[0] and pronunciation[0] (cat order: word, shape, pronunciation) */
  g_autofree double *cst = g_new0 (double, (gsize) C);
  gint64 col = C;
  for (int i = 0; i < 2; i++)
    if (parts[i])
      {
        g_autofree float *f = hn_safetensor_info_dup_f32 (parts[i], error);
        CK (f);
        gint64 dim = parts[i]->shape[1];
        for (gint64 r = 0; r < C; r++)
          for (gint64 j = 0; j < dim; j++)
            cst[r] += (double) w[r * in + col + j] * f[j];
        col += dim;
      }
  g_autofree char *wn = g_strdup_printf ("%sword_embeddings.weight", emb);
  g_autofree float *word = hn_wl_host_matrix (L, wn, V, C, error);
  CK (word);
  g_autofree float *tab = g_new (float, (gsize) (V * C));
  for (gint64 v = 0; v < V; v++)
    for (gint64 r = 0; r < C; r++)
      {
        double acc = cst[r] + (b ? b[r] : 0.0);
        for (gint64 j = 0; j < C; j++)
          acc += (double) w[r * in + j] * word[v * C + j];
        tab[v * C + r] = (float) acc;
      }
  m->derived = TRUE;
  return (m->word_in = hn_wl_from_f32 (L, mw, 2, (gint64[]) { V, C }, tab, error)) != NULL;
}

/* Marks as read the stored tensors a variant leaves unused: names containing one of `parts`, or
 * ending in one with `suffix`. */
static void
skip_tensors (HnWLoader *L, const char *const *parts, gsize n_parts, gboolean suffix)
{
  for (guint i = 0; i < hn_safetensors_get_n_tensors (L->st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (L->st, i);
      for (gsize j = 0; j < n_parts; j++)
        if (suffix ? g_str_has_suffix (t->name, parts[j]) : strstr (t->name, parts[j]) != NULL)
          hn_wl_find (L, t->name, FALSE, NULL);
    }
}

/* LUKE with words only: no entity ids, so the entity embeddings, the entity-aware attention's extra
 * queries and the entity prediction head are not run. */
static const char *const luke_entity_parts[] = { "entity_embeddings.", "entity_predictions.", ".w2e_query.",
                                                 ".e2w_query.", ".e2e_query." };
/* I-BERT in float mode: the integer copies, scales and activation ranges its quantisation modules
 * keep as buffers are not read. */
static const char *const ibert_buffers[] = { ".weight_integer", ".bias_integer", ".fc_scaling_factor",
                                             ".weight_scaling_factor", ".act_scaling_factor", ".x_min", ".x_max",
                                             ".shift" };

/* X-MOD: the default language's adapter of one layer; the other languages' are not read. */
static gboolean
load_xmod_adapter (HnEncoder *m, HnWLoader *L, const char *pfx, EncLayer *lw, GError **error)
{
  gint64 C = m->C;
  g_autofree char *ap = g_strdup_printf ("%soutput.adapter_modules.%s.", pfx, m->xmod_lang);
  g_autofree char *d1 = g_strdup_printf ("%sdense1.weight", ap);
  const HnSafetensorInfo *t = hn_wl_find (L, d1, TRUE, error);
  CK (t);
  if (t->ndim != 2 || t->shape[1] != C || t->shape[0] < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [bottleneck, %" G_GINT64_FORMAT "]", t->file,
                   t->name, C);
      return FALSE;
    }
  gint64 B = t->shape[0];
  CK (hn_wl_linear (L, ap, "dense1", B, C, &lw->ad1_w, &lw->ad1_b, error) &&
      hn_wl_linear (L, ap, "dense2", C, B, &lw->ad2_w, &lw->ad2_b, error));
  if (m->xmod_adapter_ln)
    {
      g_autofree char *op = g_strdup_printf ("%soutput.", pfx);
      CK (hn_wl_norm (L, op, "adapter_layer_norm", C, &lw->adln_w, &lw->adln_b, error));
    }
  g_autofree char *others = g_strdup_printf ("%soutput.adapter_modules.", pfx);
  for (guint i = 0; i < hn_safetensors_get_n_tensors (L->st); i++)
    {
      const HnSafetensorInfo *o = hn_safetensors_get_nth (L->st, i);
      if (g_str_has_prefix (o->name, others))
        hn_wl_find (L, o->name, FALSE, NULL);
    }
  return TRUE;
}

static gboolean
load_bert_like (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  HnNameScheme ns = m->arch->names;
  const char *base = ns == HN_NAMES_ELECTRA ? "electra"
                   : hn_safetensors_lookup (L->st, "roberta.embeddings.word_embeddings.weight") ? "roberta"
                   : "bert";
  if ((ns == HN_NAMES_BERT || ns == HN_NAMES_XLMR_XL) && m->pad_positions >= 0)
    base = "roberta";
  /* the base model's attribute in each *ForMaskedLM */
  static const char *const bases[][2] = { { "data2vec-text", "data2vec_text" }, { "ernie", "ernie" },
                                          { "roformer", "roformer" }, { "rembert", "rembert" }, { "esm", "esm" },
                                          { "roberta-prelayernorm", "roberta_prelayernorm" }, { "mpnet", "mpnet" },
                                          { "ibert", "ibert" }, { "tapas", "tapas" }, { "layoutlm", "layoutlm" },
                                          { "longformer", "longformer" }, { "roc_bert", "roc_bert" },
                                          { "luke", "luke" } };
  for (gsize i = 0; i < G_N_ELEMENTS (bases); i++)
    if (strcmp (m->arch->model_type, bases[i][0]) == 0)
      base = bases[i][1];
  gboolean pre = ns == HN_NAMES_MEGATRON_BERT || ns == HN_NAMES_XLMR_XL || ns == HN_NAMES_ESM ||
                 ns == HN_NAMES_ROBERTA_PRELN;
  EncNames N;
  names_for (ns, &N, base);
  gint64 C = m->C, E = m->E, F = m->F;
  g_autofree char *wn = g_strdup_printf ("%sword_embeddings.weight", N.emb);
  g_autofree char *pn = g_strdup_printf ("%sposition_embeddings.weight", N.emb);
  g_autofree char *tn = g_strdup_printf ("%stoken_type_embeddings.weight", N.emb);
  CK (hn_wl_matrix (L, wn, m->vocab, E, TRUE, &m->word, error));
  if (ns == HN_NAMES_ROFORMER || ns == HN_NAMES_ESM)
    {
      /* RoFormer: no position table, rotary q/k (and v with rotary_value) on pairs of each head; the
       * sinusoidal table it saves is recomputed. ESM: rotate_half rotary, its inv_freq buffers too */
      gboolean esm = ns == HN_NAMES_ESM;
      if (esm)
        {
          hn_wl_find (L, "esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq", FALSE, NULL);
          for (int i = 0; i < m->n_layer; i++)
            {
              g_autofree char *fn = g_strdup_printf ("esm.encoder.layer.%d.attention.self.rotary_embeddings.inv_freq", i);
              hn_wl_find (L, fn, FALSE, NULL);
            }
          hn_wl_find (L, "esm.contact_head.regression.weight", FALSE, NULL); /* contact prediction: not run */
          hn_wl_find (L, "esm.contact_head.regression.bias", FALSE, NULL);
        }
      else
        hn_wl_find (L, "roformer.encoder.embed_positions.weight", FALSE, NULL);
      g_autofree float *inv = g_new (float, m->D / 2);
      float sc;
      CK (hn_rope_compute_inv_freq (esm ? m->rope_theta : 10000.0, m->D, m->n_pos, NULL, 0, inv, &sc, error));
      CK ((m->inv_freq_global = hn_wl_from_f32 (L, "rope.encoder", 1, (gint64[]) { m->D / 2 }, inv, error)));
      m->rope_scale_global = sc;
      m->rope_style = esm ? HN_ROPE_NEOX : HN_ROPE_GPTJ;
    }
  else
    {
      const HnSafetensorInfo *pt = hn_wl_find (L, pn, TRUE, error);
      CK (pt);
      if (pt->ndim != 2 || pt->shape[0] < 1)
        return hn_wl_matrix (L, pn, m->n_pos, E, TRUE, &m->pos, error); /* reports the shape */
      m->n_pos = (int) pt->shape[0];
      CK (hn_wl_matrix (L, pn, m->n_pos, E, TRUE, &m->pos, error));
    }
  if (strcmp (m->arch->model_type, "tapas") == 0 || strcmp (m->arch->model_type, "layoutlm") == 0)
    CK (load_fixed_types (m, L, N.emb, error));
  else if (ns != HN_NAMES_DISTILBERT && ns != HN_NAMES_ESM && ns != HN_NAMES_MPNET)
    CK (hn_wl_matrix (L, tn, m->type_vocab, E, TRUE, &m->type, error));
  if (!pre || ns == HN_NAMES_ROBERTA_PRELN) /* megatron-bert, xlm-roberta-xl and esm embeddings have no norm */
    CK (hn_wl_norm (L, N.emb, "LayerNorm", E, &m->emb_ln_w, &m->emb_ln_b, error));
  if (N.proj && ns == HN_NAMES_ROFORMER && E == C)
    N.proj = NULL; /* RoFormerModel projects only an embedding_size other than hidden_size */
  if (N.proj)
    {
      CK (hn_wl_linear (L, "", N.proj, C, E, &m->proj_w, &m->proj_b, error));
    }
  else if (E != C)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: embedding_size %d differs from hidden_size %d", m->dir,
                   m->E, m->C);
      return FALSE;
    }
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int u = 0; u < m->n_unique; u++)
    {
      EncLayer *lw = &m->layers[u];
      g_autofree char *pfx = NULL;
      if (ns == HN_NAMES_ALBERT)
        {
          /* unique layer u = group * inner + j; groups are numbered, inner layers too */
          int inner = m->n_exec / m->n_layer;
          pfx = g_strdup_printf ("%s%d.albert_layers.%d.", N.layer, u / inner, u % inner);
        }
      else
        pfx = g_strdup_printf ("%s%d.", N.layer, u);
      CK (hn_wl_linear (L, pfx, N.q, C, C, &lw->wq, &lw->bq, error) &&
          hn_wl_linear (L, pfx, N.k, C, C, &lw->wk, &lw->bk, error) &&
          hn_wl_linear (L, pfx, N.v, C, C, &lw->wv, &lw->bv, error) &&
          hn_wl_linear (L, pfx, N.o, C, C, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, pfx, N.ln1, C, &lw->ln1_w, &lw->ln1_b, error) &&
          hn_wl_linear (L, pfx, N.up, F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, pfx, N.down, C, F, &lw->wd, &lw->bd, error) &&
          hn_wl_norm (L, pfx, N.ln2, C, &lw->ln2_w, &lw->ln2_b, error));
      if (m->xmod_lang)
        CK (load_xmod_adapter (m, L, pfx, lw, error));
      if (strcmp (m->arch->model_type, "longformer") == 0)
        for (int j = 0; j < 3; j++)
          {
            /* the global projections: no token is global without a global_attention_mask */
            static const char *const g[] = { "query_global", "key_global", "value_global" };
            g_autofree char *gw = g_strdup_printf ("%sattention.self.%s.weight", pfx, g[j]);
            g_autofree char *gb = g_strdup_printf ("%sattention.self.%s.bias", pfx, g[j]);
            hn_wl_find (L, gw, FALSE, NULL);
            hn_wl_find (L, gb, FALSE, NULL);
          }
    }
  if (strcmp (m->arch->model_type, "ibert") == 0)
    skip_tensors (L, ibert_buffers, G_N_ELEMENTS (ibert_buffers), TRUE);
  if (pre)
    {
      /* the final norm: under the encoder, or the model (roberta_prelayernorm.LayerNorm) */
      g_autofree char *fp = g_strdup_printf (ns == HN_NAMES_ROBERTA_PRELN ? "%s." : "%s.encoder.", base);
      const char *fnn = ns == HN_NAMES_MEGATRON_BERT ? "ln" : ns == HN_NAMES_ESM ? "emb_layer_norm_after" : "LayerNorm";
      CK (hn_wl_norm (L, fp, fnn, C, &m->final_w, &m->final_b, error));
    }
  if (ns == HN_NAMES_MPNET)
    {
      /* MPNetEncoder: one table of bidirectional T5 buckets (max distance 128) added in every layer */
      const HnSafetensorInfo *rt = hn_wl_find (L, "mpnet.encoder.relative_attention_bias.weight", TRUE, error);
      CK (rt);
      if (rt->ndim != 2 || rt->shape[1] != m->H || rt->shape[0] < 2 || rt->shape[0] > 1024)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [buckets, %d]", rt->file, rt->name, m->H);
          return FALSE;
        }
      m->buckets = (int) rt->shape[0];
      CK ((m->rel = hn_safetensor_info_dup_f32 (rt, error)));
    }
  if (strcmp (m->arch->model_type, "roc_bert") == 0)
    CK (load_rocbert_inputs (m, L, cfg, N.emb, error));
  if (strcmp (m->arch->model_type, "luke") == 0)
    skip_tensors (L, luke_entity_parts, G_N_ELEMENTS (luke_entity_parts), FALSE);
  if (strcmp (m->arch->model_type, "big_bird") == 0 || strcmp (m->arch->model_type, "layoutlm") == 0 ||
      strcmp (m->arch->model_type, "luke") == 0)
    {
      /* BigBirdForMaskedLM and LayoutLMForMaskedLM keep the pooler; the masked-LM head does not read it */
      g_autofree char *pw = g_strdup_printf ("%s.pooler.weight", base), *pb = g_strdup_printf ("%s.pooler.bias", base);
      g_autofree char *pdw = g_strdup_printf ("%s.pooler.dense.weight", base);
      g_autofree char *pdb = g_strdup_printf ("%s.pooler.dense.bias", base);
      hn_wl_find (L, pw, FALSE, NULL);
      hn_wl_find (L, pb, FALSE, NULL);
      hn_wl_find (L, pdw, FALSE, NULL);
      hn_wl_find (L, pdb, FALSE, NULL);
    }
  /* the head: transform (dense, act, norm), then the decoder tied to the word embeddings */
  const char *hp, *dense, *norm, *dec, *bias;
  gint64 HE = C; /* the head's output width */
  switch (ns)
    {
    case HN_NAMES_DISTILBERT:
      hp = "", dense = "vocab_transform", norm = "vocab_layer_norm", dec = "vocab_projector", bias = "vocab_projector.bias";
      break;
    case HN_NAMES_ALBERT:
      hp = "predictions.", dense = "dense", norm = "LayerNorm", dec = "decoder", bias = "bias", HE = E;
      break;
    case HN_NAMES_ELECTRA:
      hp = "generator_predictions.", dense = "dense", norm = "LayerNorm", dec = "../generator_lm_head",
      bias = "../generator_lm_head.bias", HE = E;
      break;
    case HN_NAMES_REMBERT: /* RemBertLMPredictionHead: output_embedding_size wide, its own decoder */
      hp = "cls.predictions.", dense = "dense", norm = "LayerNorm", dec = "decoder", bias = "decoder.bias";
      HE = m->head_width;
      break;
    default:
      if (m->pad_positions >= 0 || ns == HN_NAMES_ESM)
        hp = "lm_head.", dense = "dense", norm = "layer_norm", dec = "decoder", bias = "bias";
      else
        hp = "cls.predictions.", dense = "transform.dense", norm = "transform.LayerNorm", dec = "decoder",
        bias = "bias";
      break;
    }
  CK (hn_wl_linear (L, hp, dense, HE, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, hp, norm, HE, &m->head_ln_w, &m->head_ln_b, error));
  /* "../x" names a tensor outside the head's prefix (electra) */
  g_autofree char *decw = g_str_has_prefix (dec, "../") ? g_strdup_printf ("%s.weight", dec + 3)
                                                         : g_strdup_printf ("%s%s.weight", hp, dec);
  g_autofree char *decb = g_str_has_prefix (dec, "../") ? g_strdup_printf ("%s.bias", dec + 3)
                                                         : g_strdup_printf ("%s%s.bias", hp, dec);
  g_autofree char *biasn = g_str_has_prefix (bias, "../") ? g_strdup (bias + 3) : g_strdup_printf ("%s%s", hp, bias);
  /* rembert's decoder is its own; so is luke's (its checkpoint stores lm_head.decoder apart from the
   * word embeddings) */
  if (ns == HN_NAMES_REMBERT || strcmp (m->arch->model_type, "luke") == 0)
    CK (hn_wl_matrix (L, decw, m->vocab, HE, TRUE, &m->dec_w, error));
  else
    {
      hn_wl_find (L, decw, FALSE, NULL); /* tied: transformers uses the word embeddings */
      m->dec_w = m->word;
    }
  CK (hn_wl_vector (L, biasn, m->vocab, FALSE, &m->dec_b, error));
  if (!m->dec_b)
    CK (hn_wl_vector (L, decb, m->vocab, TRUE, &m->dec_b, error));
  else
    hn_wl_find (L, decb, FALSE, NULL); /* the same bias, tied */
  return TRUE;
}

static gboolean
load_modernbert (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  gint64 C = m->C, F = m->F;
  CK (hn_wl_matrix (L, "model.embeddings.tok_embeddings.weight", m->vocab, C, TRUE, &m->word, error) &&
      hn_wl_norm (L, "model.embeddings.", "norm", C, &m->emb_ln_w, &m->emb_ln_b, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *pfx = g_strdup_printf ("model.layers.%d.", i);
      g_autofree char *an = g_strdup_printf ("%sattn_norm.weight", pfx);
      if (hn_wl_has (L, an)) /* layer 0 has none (identity) */
        CK (hn_wl_norm (L, pfx, "attn_norm", C, &lw->ln1_w, &lw->ln1_b, error));
      g_autofree char *qkv = g_strdup_printf ("%sattn.Wqkv.weight", pfx);
      g_autofree char *qkvb = g_strdup_printf ("%sattn.Wqkv.bias", pfx);
      CK (hn_wl_matrix_rows (L, qkv, 3 * C, 0, C, C, &lw->wq, error) &&
          hn_wl_matrix_rows (L, qkv, 3 * C, C, C, C, &lw->wk, error) &&
          hn_wl_matrix_rows (L, qkv, 3 * C, 2 * C, C, C, &lw->wv, error));
      const HnSafetensorInfo *bt = hn_wl_find (L, qkvb, FALSE, NULL);
      if (bt)
        {
          g_autofree float *b = hn_safetensor_info_dup_f32 (bt, error);
          CK (b);
          if (bt->n_elements != 3 * C)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should hold %" G_GINT64_FORMAT " values",
                           bt->file, bt->name, 3 * C);
              return FALSE;
            }
          CK ((lw->bq = hn_wl_from_f32 (L, "bq", 1, (gint64[]) { C }, b, error)) &&
              (lw->bk = hn_wl_from_f32 (L, "bk", 1, (gint64[]) { C }, b + C, error)) &&
              (lw->bv = hn_wl_from_f32 (L, "bv", 1, (gint64[]) { C }, b + 2 * C, error)));
        }
      CK (hn_wl_linear (L, pfx, "attn.Wo", C, C, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, pfx, "mlp_norm", C, &lw->ln2_w, &lw->ln2_b, error) &&
          hn_wl_linear (L, pfx, "mlp.Wi", 2 * F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, pfx, "mlp.Wo", C, F, &lw->wd, &lw->bd, error));
    }
  CK (hn_wl_norm (L, "model.", "final_norm", C, &m->final_w, &m->final_b, error) &&
      hn_wl_linear (L, "head.", "dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, "head.", "norm", C, &m->head_ln_w, &m->head_ln_b, error));
  if (cfg->tie_word_embeddings == FALSE) /* ModernBertConfig ties by default */
    CK (hn_wl_matrix (L, "decoder.weight", m->vocab, C, TRUE, &m->dec_w, error));
  else
    {
      hn_wl_find (L, "decoder.weight", FALSE, NULL); /* tied to the token embeddings */
      m->dec_w = m->word;
    }
  CK (hn_wl_vector (L, "decoder.bias", m->vocab, FALSE, &m->dec_b, error));

  /* rope: 5.x rope_parameters per layer type, 4.x global_rope_theta / local_rope_theta */
  double tg = cfg->rope.from_rope_parameters ? cfg->rope.theta : 160000.0;
  double tl = cfg->has_rope_sliding ? cfg->rope_sliding.theta : 10000.0;
  (void) (hn_model_config_get_double (cfg, "global_rope_theta", &tg, NULL));
  (void) (hn_model_config_get_double (cfg, "local_rope_theta", &tl, NULL));
  g_autofree float *inv = g_new (float, m->D / 2);
  CK (hn_rope_compute_inv_freq (tg, m->D, m->n_pos, NULL, 0, inv, &m->rope_scale_global, error));
  CK ((m->inv_freq_global = hn_wl_from_f32 (L, "rope.global", 1, (gint64[]) { m->D / 2 }, inv, error)));
  CK (hn_rope_compute_inv_freq (tl, m->D, m->n_pos, NULL, 0, inv, &m->rope_scale_local, error));
  CK ((m->inv_freq_local = hn_wl_from_f32 (L, "rope.local", 1, (gint64[]) { m->D / 2 }, inv, error)));
  return TRUE;
}

/* XLMWithLMHeadModel: post-norm layers named by their position in per-kind lists; the head is
 * pred_layer.proj, tied to the embeddings (no transform). */
static gboolean
load_xlm (HnEncoder *m, HnWLoader *L, GError **error)
{
  gint64 C = m->C, F = m->F;
  CK (hn_wl_matrix (L, "transformer.embeddings.weight", m->vocab, C, TRUE, &m->word, error));
  const HnSafetensorInfo *pt = hn_wl_find (L, "transformer.position_embeddings.weight", TRUE, error);
  CK (pt);
  if (pt->ndim == 2 && pt->shape[0] >= 1)
    m->n_pos = (int) pt->shape[0];
  CK (hn_wl_matrix (L, pt->name, m->n_pos, C, TRUE, &m->pos, error) &&
      hn_wl_norm (L, "transformer.", "layer_norm_emb", C, &m->emb_ln_w, &m->emb_ln_b, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *ap = g_strdup_printf ("transformer.attentions.%d.", i);
      g_autofree char *fp = g_strdup_printf ("transformer.ffns.%d.", i);
      g_autofree char *n1 = g_strdup_printf ("layer_norm1.%d", i), *n2 = g_strdup_printf ("layer_norm2.%d", i);
      CK (hn_wl_linear (L, ap, "q_lin", C, C, &lw->wq, &lw->bq, error) &&
          hn_wl_linear (L, ap, "k_lin", C, C, &lw->wk, &lw->bk, error) &&
          hn_wl_linear (L, ap, "v_lin", C, C, &lw->wv, &lw->bv, error) &&
          hn_wl_linear (L, ap, "out_lin", C, C, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, "transformer.", n1, C, &lw->ln1_w, &lw->ln1_b, error) &&
          hn_wl_linear (L, fp, "lin1", F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, fp, "lin2", C, F, &lw->wd, &lw->bd, error) &&
          hn_wl_norm (L, "transformer.", n2, C, &lw->ln2_w, &lw->ln2_b, error));
    }
  hn_wl_find (L, "pred_layer.proj.weight", FALSE, NULL); /* tied to the embeddings */
  m->dec_w = m->word;
  return hn_wl_vector (L, "pred_layer.proj.bias", m->vocab, TRUE, &m->dec_b, error);
}

/* EuroBertForMaskedLM: llama layers (RMSNorm, grouped K/V, rotary, SiLU-gated MLP) attending both
 * ways, the final norm and lm_head. Grouped keys/values are expanded to one per query head and
 * gate / up stacked into one [2F, C] matrix at load (f32). */
static gboolean
load_eurobert (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  gint64 C = m->C, F = m->F, H = m->H, D = m->D;
  gint64 KVH = cfg->num_key_value_heads > 0 ? cfg->num_key_value_heads : H;
  if (H % KVH || (cfg->head_dim > 0 && cfg->head_dim != D))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: eurobert with %d heads over %" G_GINT64_FORMAT
                   " key/value heads or head_dim other than hidden_size / heads is not supported", cfg->path, m->H, KVH);
      return FALSE;
    }
  gint64 rep = H / KVH;
  m->rms = TRUE;
  CK (hn_wl_matrix (L, "model.embed_tokens.weight", m->vocab, C, TRUE, &m->word, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *pfx = g_strdup_printf ("model.layers.%d.", i);
      CK (hn_wl_norm (L, pfx, "input_layernorm", C, &lw->ln1_w, NULL, error) &&
          hn_wl_linear (L, pfx, "self_attn.q_proj", H * D, C, &lw->wq, &lw->bq, error) &&
          hn_wl_linear (L, pfx, "self_attn.o_proj", C, H * D, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, pfx, "post_attention_layernorm", C, &lw->ln2_w, NULL, error) &&
          hn_wl_linear (L, pfx, "mlp.down_proj", C, F, &lw->wd, &lw->bd, error));
      HnTensor **kv[2] = { &lw->wk, &lw->wv };
      const char *kvn[2] = { "self_attn.k_proj", "self_attn.v_proj" };
      for (int j = 0; j < 2; j++)
        {
          g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, kvn[j]);
          g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, kvn[j]);
          if (hn_safetensors_lookup (L->st, bn))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: eurobert k/v biases are not supported", m->dir);
              return FALSE;
            }
          g_autofree float *src = hn_wl_host_matrix (L, wn, KVH * D, C, error);
          CK (src);
          g_autofree float *ex = g_new (float, (gsize) (H * D * C));
          for (gint64 h = 0; h < H; h++) /* repeat_kv: query head h reads key/value head h / rep */
            memcpy (ex + h * D * C, src + (h / rep) * D * C, sizeof (float) * (gsize) (D * C));
          CK ((*kv[j] = hn_wl_from_f32 (L, wn, 2, (gint64[]) { H * D, C }, ex, error)));
        }
      g_autofree char *gn = g_strdup_printf ("%smlp.gate_proj.weight", pfx);
      g_autofree char *un = g_strdup_printf ("%smlp.up_proj.weight", pfx);
      g_autofree float *g = hn_wl_host_matrix (L, gn, F, C, error);
      g_autofree float *u = g ? hn_wl_host_matrix (L, un, F, C, error) : NULL;
      CK (u);
      g_autofree float *gu = g_new (float, (gsize) (2 * F * C));
      memcpy (gu, g, sizeof (float) * (gsize) (F * C));
      memcpy (gu + F * C, u, sizeof (float) * (gsize) (F * C));
      CK ((lw->wi = hn_wl_from_f32 (L, gn, 2, (gint64[]) { 2 * F, C }, gu, error)));
    }
  CK (hn_wl_norm (L, "model.", "norm", C, &m->final_w, NULL, error));
  if (cfg->tie_word_embeddings == TRUE)
    {
      hn_wl_find (L, "lm_head.weight", FALSE, NULL);
      m->dec_w = m->word;
    }
  else
    CK (hn_wl_matrix (L, "lm_head.weight", m->vocab, C, TRUE, &m->dec_w, error));
  CK (hn_wl_vector (L, "lm_head.bias", m->vocab, FALSE, &m->dec_b, error));
  double theta = cfg->rope.theta > 0 ? cfg->rope.theta : 10000.0;
  if (cfg->rope.rope_type && strcmp (cfg->rope.rope_type, "default") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: eurobert rope type \"%s\" is not supported", cfg->path,
                   cfg->rope.rope_type);
      return FALSE;
    }
  g_autofree float *inv = g_new (float, D / 2);
  CK (hn_rope_compute_inv_freq (theta, (int) D, m->n_pos, NULL, 0, inv, &m->rope_scale_global, error));
  CK ((m->inv_freq_global = hn_wl_from_f32 (L, "rope.eurobert", 1, (gint64[]) { D / 2 }, inv, error)));
  m->rope_style = HN_ROPE_NEOX;
  return TRUE;
}

/* NomicBertForMaskedLM as transformers saves it (the original nomic names): word and token-type
 * embeddings with emb_ln, post-norm layers with a fused Wqkv, rotary q/k on whole heads (neox
 * halves), a SwiGLU MLP (fc12 the gate, fc11 the up projection) and no biases (a stored one is left
 * over, an error); the bert head with hidden_act, tied to the word embeddings. Gate and up are
 * stacked into one [2F, C] matrix (f32). */
static gboolean
load_nomic (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  gint64 C = m->C, F = m->F, D = m->D;
  if ((cfg->head_dim > 0 && cfg->head_dim != D) || (cfg->rotary_dim > 0 && cfg->rotary_dim != D))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: nomic_bert with head_dim %" G_GINT64_FORMAT
                   " / rotary_dim %" G_GINT64_FORMAT " other than hidden_size / heads (%" G_GINT64_FORMAT
                   ") is not supported", cfg->path, cfg->head_dim, cfg->rotary_dim, D);
      return FALSE;
    }
  if (cfg->rope.rope_type && strcmp (cfg->rope.rope_type, "default") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: nomic_bert rope type \"%s\" is not supported",
                   cfg->path, cfg->rope.rope_type);
      return FALSE;
    }
  CK (hn_wl_matrix (L, "nomic_bert.embeddings.word_embeddings.weight", m->vocab, C, TRUE, &m->word, error) &&
      hn_wl_matrix (L, "nomic_bert.embeddings.token_type_embeddings.weight", m->type_vocab, C, TRUE, &m->type,
                    error) &&
      hn_wl_norm (L, "nomic_bert.", "emb_ln", C, &m->emb_ln_w, &m->emb_ln_b, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *pfx = g_strdup_printf ("nomic_bert.encoder.layers.%d.", i);
      g_autofree char *qkv = g_strdup_printf ("%sattn.Wqkv.weight", pfx);
      CK (hn_wl_matrix_rows (L, qkv, 3 * C, 0, C, C, &lw->wq, error) &&
          hn_wl_matrix_rows (L, qkv, 3 * C, C, C, C, &lw->wk, error) &&
          hn_wl_matrix_rows (L, qkv, 3 * C, 2 * C, C, C, &lw->wv, error) &&
          hn_wl_linear (L, pfx, "attn.out_proj", C, C, &lw->wo, NULL, error) &&
          hn_wl_norm (L, pfx, "norm1", C, &lw->ln1_w, &lw->ln1_b, error) &&
          hn_wl_linear (L, pfx, "mlp.fc2", C, F, &lw->wd, NULL, error) &&
          hn_wl_norm (L, pfx, "norm2", C, &lw->ln2_w, &lw->ln2_b, error));
      g_autofree char *gn = g_strdup_printf ("%smlp.fc12.weight", pfx);
      g_autofree char *un = g_strdup_printf ("%smlp.fc11.weight", pfx);
      g_autofree float *g = hn_wl_host_matrix (L, gn, F, C, error);
      g_autofree float *u = g ? hn_wl_host_matrix (L, un, F, C, error) : NULL;
      CK (u);
      g_autofree float *gu = g_new (float, (gsize) (2 * F * C));
      memcpy (gu, g, sizeof (float) * (gsize) (F * C));
      memcpy (gu + F * C, u, sizeof (float) * (gsize) (F * C));
      CK ((lw->wi = hn_wl_from_f32 (L, gn, 2, (gint64[]) { 2 * F, C }, gu, error)));
    }
  CK (hn_wl_linear (L, "cls.predictions.transform.", "dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, "cls.predictions.transform.", "layer_norm", C, &m->head_ln_w, &m->head_ln_b, error));
  hn_wl_find (L, "cls.predictions.decoder.weight", FALSE, NULL); /* tied to the word embeddings */
  m->dec_w = m->word;
  CK (hn_wl_vector (L, "cls.predictions.bias", m->vocab, TRUE, &m->dec_b, error));
  hn_wl_find (L, "cls.predictions.decoder.bias", FALSE, NULL); /* the same bias, tied */
  g_autofree float *inv = g_new (float, D / 2);
  CK (hn_rope_compute_inv_freq (cfg->rope.theta > 0 ? cfg->rope.theta : 10000.0, (int) D, m->n_pos, NULL, 0, inv,
                                &m->rope_scale_global, error));
  CK ((m->inv_freq_global = hn_wl_from_f32 (L, "rope.nomic_bert", 1, (gint64[]) { D / 2 }, inv, error)));
  m->rope_style = HN_ROPE_NEOX;
  return TRUE;
}

/* A grouped 1x1 Conv1d "<pfx><part>.weight" [cout, cin / groups, 1] as the block-diagonal Linear
 * [cout, cin] it is (group g maps input channels g * cin / groups.. to its cout / groups outputs),
 * with its bias. */
static gboolean
grouped_linear (HnWLoader *L, const char *pfx, const char *part, gint64 cout, gint64 cin, HnTensor **w, HnTensor **b,
                GError **error)
{
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, part);
  const HnSafetensorInfo *t = hn_wl_find (L, wn, TRUE, error);
  CK (t);
  gint64 per = t->ndim == 3 ? t->shape[1] : 0;
  if (t->ndim != 3 || t->shape[0] != cout || t->shape[2] != 1 || per < 1 || cin % per || cout % (cin / per))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be a grouped 1x1 convolution [%" G_GINT64_FORMAT
                   ", %" G_GINT64_FORMAT " / groups, 1]", t->file, t->name, cout, cin);
      return FALSE;
    }
  gint64 groups = cin / per, out_per = cout / groups;
  g_autofree float *src = hn_safetensor_info_dup_f32 (t, error);
  CK (src);
  g_autofree float *dense = g_new0 (float, (gsize) (cout * cin));
  for (gint64 o = 0; o < cout; o++)
    memcpy (dense + o * cin + (o / out_per) * per, src + o * per, sizeof (float) * (gsize) per);
  CK ((*w = hn_wl_from_f32 (L, wn, 2, (gint64[]) { cout, cin }, dense, error)));
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, part);
  return hn_wl_vector (L, bn, cout, FALSE, b, error);
}

/* SqueezeBertForMaskedLM: bert embeddings and post-norm layers whose q/k/v, attention output, and
 * MLP are grouped 1x1 convolutions over the [C, N] layout (block-diagonal Linear maps here; the head
 * split of the channels is bert's), the bert head tied to the word embeddings. */
static gboolean
load_squeezebert (HnEncoder *m, HnWLoader *L, GError **error)
{
  gint64 C = m->C, F = m->F;
  if (m->E != C)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: squeezebert embedding_size %d differs from hidden_size %d",
                   m->dir, m->E, m->C);
      return FALSE;
    }
  const HnSafetensorInfo *pt = hn_wl_find (L, "transformer.embeddings.position_embeddings.weight", TRUE, error);
  CK (pt);
  if (pt->ndim == 2 && pt->shape[0] >= 1)
    m->n_pos = (int) pt->shape[0];
  CK (hn_wl_matrix (L, "transformer.embeddings.word_embeddings.weight", m->vocab, C, TRUE, &m->word, error) &&
      hn_wl_matrix (L, pt->name, m->n_pos, C, TRUE, &m->pos, error) &&
      hn_wl_matrix (L, "transformer.embeddings.token_type_embeddings.weight", m->type_vocab, C, TRUE, &m->type,
                    error) &&
      hn_wl_norm (L, "transformer.embeddings.", "LayerNorm", C, &m->emb_ln_w, &m->emb_ln_b, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *pfx = g_strdup_printf ("transformer.encoder.layers.%d.", i);
      CK (grouped_linear (L, pfx, "attention.query", C, C, &lw->wq, &lw->bq, error) &&
          grouped_linear (L, pfx, "attention.key", C, C, &lw->wk, &lw->bk, error) &&
          grouped_linear (L, pfx, "attention.value", C, C, &lw->wv, &lw->bv, error) &&
          grouped_linear (L, pfx, "post_attention.conv1d", C, C, &lw->wo, &lw->bo, error) &&
          hn_wl_norm (L, pfx, "post_attention.layernorm", C, &lw->ln1_w, &lw->ln1_b, error) &&
          grouped_linear (L, pfx, "intermediate.conv1d", F, C, &lw->wi, &lw->bi, error) &&
          grouped_linear (L, pfx, "output.conv1d", C, F, &lw->wd, &lw->bd, error) &&
          hn_wl_norm (L, pfx, "output.layernorm", C, &lw->ln2_w, &lw->ln2_b, error));
    }
  hn_wl_find (L, "transformer.pooler.dense.weight", FALSE, NULL); /* the pooler: not read by the head */
  hn_wl_find (L, "transformer.pooler.dense.bias", FALSE, NULL);
  CK (hn_wl_linear (L, "cls.predictions.transform.", "dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, "cls.predictions.transform.", "LayerNorm", C, &m->head_ln_w, &m->head_ln_b, error));
  hn_wl_find (L, "cls.predictions.decoder.weight", FALSE, NULL); /* tied to the word embeddings */
  m->dec_w = m->word;
  CK (hn_wl_vector (L, "cls.predictions.bias", m->vocab, TRUE, &m->dec_b, error));
  hn_wl_find (L, "cls.predictions.decoder.bias", FALSE, NULL); /* the same bias, tied */
  m->derived = TRUE;
  return TRUE;
}

/* cos and sin of the DFT of size n, [n, n] row-major: t[j * n + k] = cos / sin (2 pi j k / n) */
static void
dft_tables (gint64 n, float *c, float *sn)
{
  for (gint64 j = 0; j < n; j++)
    for (gint64 k = 0; k < n; k++)
      {
        double a = 2.0 * G_PI * (double) ((j * k) % n) / (double) n;
        c[j * n + k] = (float) cos (a);
        sn[j * n + k] = (float) sin (a);
      }
}

/* FNetForMaskedLM: bert embeddings with a projection after their norm; each layer replaces
 * attention by the real part of the 2-D DFT over tokens and hidden units (torch.fft.fftn), which is
 * cos_N X cos_C - sin_N X sin_C, then the residual norm and the bert MLP; the bert head, tied. */
static gboolean
load_fnet (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  gint64 C = m->C, F = m->F;
  gboolean tpu;
  CK (hn_encoder_cfg_bool (cfg, "use_tpu_fourier_optimizations", FALSE, &tpu, error));
  if (tpu)
    return refuse_switch (cfg, "fnet", "use_tpu_fourier_optimizations true (inputs padded to tpu_short_seq_length)",
                          error);
  const HnSafetensorInfo *pt = hn_wl_find (L, "fnet.embeddings.position_embeddings.weight", TRUE, error);
  CK (pt);
  if (pt->ndim == 2 && pt->shape[0] >= 1)
    m->n_pos = (int) pt->shape[0];
  CK (hn_wl_matrix (L, "fnet.embeddings.word_embeddings.weight", m->vocab, C, TRUE, &m->word, error) &&
      hn_wl_matrix (L, pt->name, m->n_pos, C, TRUE, &m->pos, error) &&
      hn_wl_matrix (L, "fnet.embeddings.token_type_embeddings.weight", m->type_vocab, C, TRUE, &m->type, error) &&
      hn_wl_norm (L, "fnet.embeddings.", "LayerNorm", C, &m->emb_ln_w, &m->emb_ln_b, error) &&
      hn_wl_linear (L, "fnet.embeddings.", "projection", C, C, &m->proj_w, &m->proj_b, error));
  m->layers = g_new0 (EncLayer, m->n_unique);
  for (int i = 0; i < m->n_unique; i++)
    {
      EncLayer *lw = &m->layers[i];
      g_autofree char *pfx = g_strdup_printf ("fnet.encoder.layer.%d.", i);
      CK (hn_wl_norm (L, pfx, "fourier.output.LayerNorm", C, &lw->ln1_w, &lw->ln1_b, error) &&
          hn_wl_linear (L, pfx, "intermediate.dense", F, C, &lw->wi, &lw->bi, error) &&
          hn_wl_linear (L, pfx, "output.dense", C, F, &lw->wd, &lw->bd, error) &&
          hn_wl_norm (L, pfx, "output.LayerNorm", C, &lw->ln2_w, &lw->ln2_b, error));
    }
  hn_wl_find (L, "fnet.pooler.dense.weight", FALSE, NULL); /* the pooler: not read by the head */
  hn_wl_find (L, "fnet.pooler.dense.bias", FALSE, NULL);
  CK (hn_wl_linear (L, "cls.predictions.transform.", "dense", C, C, &m->head_w, &m->head_b, error) &&
      hn_wl_norm (L, "cls.predictions.transform.", "LayerNorm", C, &m->head_ln_w, &m->head_ln_b, error));
  hn_wl_find (L, "cls.predictions.decoder.weight", FALSE, NULL); /* tied to the word embeddings */
  m->dec_w = m->word;
  CK (hn_wl_vector (L, "cls.predictions.bias", m->vocab, TRUE, &m->dec_b, error));
  hn_wl_find (L, "cls.predictions.decoder.bias", FALSE, NULL); /* the same bias, tied */
  g_autofree float *c = g_new (float, (gsize) (C * C)), *sn = g_new (float, (gsize) (C * C));
  dft_tables (C, c, sn);
  return (m->dft_cos = hn_wl_from_f32 (L, "fnet.dft_cos", 2, (gint64[]) { C, C }, c, error)) &&
         (m->dft_sin = hn_wl_from_f32 (L, "fnet.dft_sin", 2, (gint64[]) { C, C }, sn, error));
}

static gboolean
load_weights (gpointer model, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  HnEncoder *m = model;
  if (m->arch->names == HN_NAMES_NOMIC_BERT)
    return load_nomic (m, L, cfg, error);
  if (m->arch->names == HN_NAMES_MOBILEBERT)
    return hn_mobilebert_load (m, L, cfg, error);
  if (m->arch->names == HN_NAMES_DEBERTA || m->arch->names == HN_NAMES_DEBERTA_V2)
    return hn_deberta_load (m, L, cfg, error);
  if (m->arch->names == HN_NAMES_EUROBERT)
    return load_eurobert (m, L, cfg, error);
  if (m->arch->names == HN_NAMES_XLM)
    return load_xlm (m, L, error);
  if (strcmp (m->arch->model_type, "fnet") == 0)
    return load_fnet (m, L, cfg, error);
  if (strcmp (m->arch->model_type, "squeezebert") == 0)
    return load_squeezebert (m, L, error);
  return m->arch->names == HN_NAMES_MODERNBERT ? load_modernbert (m, L, cfg, error) : load_bert_like (m, L, cfg, error);
}

HnEncoder *
hn_encoder_load (HnVkContext *ctx, const char *model_dir, GError **error)
{
  const HnArchInfo *arch;
  g_autoptr (HnModelConfig) cfg = hn_encdec_config_load (model_dir, FALSE, &arch, error);
  if (!cfg)
    return NULL;
  HnEncoder *m = g_new0 (HnEncoder, 1);
  m->ctx = hn_vk_context_ref (ctx);
  m->dir = g_strdup (model_dir);
  m->arch = arch;
  m->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  if (!resolve (m, cfg, error) ||
      !hn_wl_load_all (ctx, model_dir, arch, cfg, m->owned, load_weights, m, &m->weight_bytes, error))
    {
      hn_encoder_free (m);
      return NULL;
    }
  return m;
}

/* ---------------------------------------------------------------- forward */

static gboolean
linear (HnCmd *cmd, HnScratch *sc, HnTensor **out, const char *name, HnTensor *x, HnTensor *w, HnTensor *b,
        GError **error)
{
  *out = hn_scratch_new (sc, name, HN_DTYPE_F32, 2, (gint64[]) { x->shape[0], w->shape[0] }, error);
  return *out && hn_op_matmul (cmd, *out, x, w, b, error);
}

/* The encoder's norm: LayerNorm, or RMSNorm (eurobert). */
static gboolean
enc_norm (HnEncoder *m, HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *w, HnTensor *b, float eps, GError **error)
{
  if (m->rms)
    return hn_op_rmsnorm (cmd, out, in, w, eps, HN_NORM_DEFAULT, error);
  return hn_op_layernorm (cmd, out, in, w, b, eps, error);
}

/* XmodOutput.lang_adapter on h [N, C] in place: its norm (adapter_layer_norm, or the output's
 * LayerNorm reused), the bottleneck dense1 -> act -> dense2, and the residual from before or after
 * that norm (ln_before_adapter). */
static gboolean
record_adapter (HnEncoder *m, HnCmd *cmd, HnScratch *sc, const EncLayer *lw, HnTensor *h, GError **error)
{
  gint64 N = h->shape[0], C = m->C;
  HnTensor *n = h, *a1, *a2;
  if (m->xmod_adapter_ln || m->xmod_reuse_ln)
    {
      CK ((n = hn_scratch_new (sc, "enc.adapter_in", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)));
      CK (hn_op_layernorm (cmd, n, h, lw->adln_w ? lw->adln_w : lw->ln2_w, lw->adln_w ? lw->adln_b : lw->ln2_b,
                           m->eps, error));
    }
  CK (linear (cmd, sc, &a1, "enc.adapter1", n, lw->ad1_w, lw->ad1_b, error) &&
      hn_op_unary (cmd, a1, a1, m->act, error) &&
      linear (cmd, sc, &a2, "enc.adapter2", a1, lw->ad2_w, lw->ad2_b, error));
  return hn_op_add (cmd, h, a2, m->xmod_ln_before ? n : h, error);
}

static gboolean record_mlp (HnEncoder *m, HnCmd *cmd, HnScratch *sc, const EncLayer *lw, HnTensor *x, GError **error);

/* dft_n: fnet's cos and sin DFT tables of the n tokens [n, n] (NULL otherwise) */
static gboolean
record_layer (HnEncoder *m, HnCmd *cmd, HnScratch *sc, int step, HnTensor *x, HnTensor *pos, HnTensor *local_mask,
              HnTensor *rel_bias, const HnAttendWork *aw, HnTensor *const *dft_n, GError **error)
{
  const EncLayer *lw = &m->layers[m->order[step]];
  gint64 N = x->shape[0], C = m->C, H = m->H, D = m->D;
  if (m->dft_cos)
    {
      HnTensor *y1, *y2, *f;
      CK ((y1 = hn_scratch_new (sc, "enc.dft1", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
          (y2 = hn_scratch_new (sc, "enc.dft2", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)) &&
          (f = hn_scratch_new (sc, "enc.fourier", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)));
      CK (hn_op_bmm (cmd, y1, x, m->dft_cos, HN_MATMUL_EXACT, 1.0f, error) &&
          hn_op_bmm (cmd, y2, x, m->dft_sin, HN_MATMUL_EXACT, 1.0f, error) &&
          hn_op_bmm (cmd, f, dft_n[0], y1, HN_MATMUL_EXACT, 1.0f, error) &&
          hn_op_bmm (cmd, f, dft_n[1], y2, HN_MATMUL_EXACT | HN_MATMUL_ACCUMULATE, -1.0f, error) &&
          hn_op_add (cmd, f, f, x, error) && hn_op_layernorm (cmd, x, f, lw->ln1_w, lw->ln1_b, m->eps, error));
      return record_mlp (m, cmd, sc, lw, x, error);
    }
  HnTensor *h = x;
  if (m->pre_norm && lw->ln1_w)
    {
      CK ((h = hn_scratch_new (sc, "enc.h", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)));
      CK (enc_norm (m, cmd, h, x, lw->ln1_w, lw->ln1_b, m->eps, error));
    }
  HnTensor *q, *k, *v, *att, *o;
  CK (linear (cmd, sc, &q, "enc.q", h, lw->wq, lw->bq, error) && linear (cmd, sc, &k, "enc.k", h, lw->wk, lw->bk, error) &&
      linear (cmd, sc, &v, "enc.v", h, lw->wv, lw->bv, error));
  gint64 s3[] = { N, H, D };
  HnTensor *q3 = hn_scratch_shape (sc, q, 3, s3, error), *k3 = hn_scratch_shape (sc, k, 3, s3, error);
  HnTensor *v3 = hn_scratch_shape (sc, v, 3, s3, error);
  CK ((att = hn_scratch_new (sc, "enc.att", HN_DTYPE_F32, 3, s3, error)) && q3 && k3 && v3);
  gboolean local = m->layer_local && m->layer_local[step];
  HnTensor *mask = local ? local_mask : NULL;
  if (m->inv_freq_global)
    {
      HnTensor *inv = local ? m->inv_freq_local : m->inv_freq_global;
      float rs = local ? m->rope_scale_local : m->rope_scale_global;
      CK (hn_op_rope (cmd, q3, q3, pos, inv, (int) D, m->rope_style, rs, error));
      CK (hn_op_rope (cmd, k3, k3, pos, inv, (int) D, m->rope_style, rs, error));
      if (m->rope_value)
        CK (hn_op_rope (cmd, v3, v3, pos, inv, (int) D, m->rope_style, rs, error));
    }
  CK (hn_encdec_attend (cmd, sc, rel_bias ? aw : NULL, att, q3, k3, v3, 1.0f / sqrtf ((float) D), rel_bias, mask,
                        FALSE, 0, error));
  HnTensor *att2 = hn_scratch_shape (sc, att, 2, (gint64[]) { N, C }, error);
  CK (att2 && linear (cmd, sc, &o, "enc.o", att2, lw->wo, lw->bo, error));
  if (m->pre_norm)
    CK (hn_op_add (cmd, x, x, o, error));
  else
    CK (hn_op_add (cmd, o, o, x, error) && hn_op_layernorm (cmd, x, o, lw->ln1_w, lw->ln1_b, m->eps, error));

  return record_mlp (m, cmd, sc, lw, x, error);
}

/* The MLP sublayer with its residual and norm, on x [N, C] in place. */
static gboolean
record_mlp (HnEncoder *m, HnCmd *cmd, HnScratch *sc, const EncLayer *lw, HnTensor *x, GError **error)
{
  gint64 N = x->shape[0], C = m->C;
  HnTensor *in = x;
  if (m->pre_norm)
    {
      CK ((in = hn_scratch_new (sc, "enc.h2", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error)));
      CK (enc_norm (m, cmd, in, x, lw->ln2_w, lw->ln2_b, m->eps, error));
    }
  HnTensor *u, *a, *d;
  CK (linear (cmd, sc, &u, "enc.up", in, lw->wi, lw->bi, error));
  CK ((a = hn_scratch_new (sc, "enc.act", HN_DTYPE_F32, 2, (gint64[]) { N, m->F }, error)));
  if (m->gated)
    CK (hn_op_glu (cmd, a, u, NULL, m->act, error));
  else
    CK (hn_op_unary (cmd, a, u, m->act, error));
  CK (linear (cmd, sc, &d, "enc.down", a, lw->wd, lw->bd, error));
  if (m->pre_norm)
    return hn_op_add (cmd, x, x, d, error);
  CK (hn_op_add (cmd, d, d, x, error));
  if (lw->ad1_w)
    CK (record_adapter (m, cmd, sc, lw, d, error));
  return hn_op_layernorm (cmd, x, d, lw->ln2_w, lw->ln2_b, m->eps, error);
}

void
hn_encoder_positions (HnEncoder *m, const int32_t *ids, int n, int32_t *pos)
{
  for (int i = 0, seen = 0; i < n; i++)
    {
      if (m->pad_positions >= 0) /* roberta: non-pad tokens count from padding_idx + 1 */
        pos[i] = ids[i] == m->pad_positions ? m->pad_positions : m->pad_positions + ++seen;
      else
        pos[i] = i;
    }
}

gboolean
hn_encoder_check_ids (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, GError **error)
{
  if (n <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no input ids");
      return FALSE;
    }
  if (type_ids && !m->type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "model_type \"%s\" takes no token type ids",
                   m->arch->model_type);
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    {
      if (ids[i] < 0 || ids[i] >= m->vocab)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "input id %d at position %d is outside the vocabulary (0..%d)", ids[i], i, m->vocab - 1);
          return FALSE;
        }
      if (type_ids && (type_ids[i] < 0 || type_ids[i] >= m->type_vocab))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "token type id %d at position %d is outside 0..%d (type_vocab_size)", type_ids[i], i,
                       m->type_vocab - 1);
          return FALSE;
        }
    }
  if (m->max_full_tokens > 0 && n > m->max_full_tokens)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%d tokens need big_bird's block-sparse attention (not built; full attention runs up to %d)", n,
                   m->max_full_tokens);
      return FALSE;
    }
  int last_pos = m->pad_positions >= 0 ? m->pad_positions + n : n - 1;
  if (m->pos && last_pos >= m->n_pos)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%d tokens exceed the %d learned positions", n,
                   m->pad_positions >= 0 ? m->n_pos - m->pad_positions - 1 : m->n_pos);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_encoder_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits, GError **error)
{
  if (m->mobile)
    return hn_mobilebert_logits (m, ids, type_ids, n, logits, error);
  if (m->deberta)
    return hn_deberta_logits (m, ids, type_ids, n, logits, error);
  CK (hn_encoder_check_ids (m, ids, type_ids, n, error));
  gint64 N = n, C = m->C, E = m->E;
  /* host inputs: positions, token types (0 unless given), local mask */
  g_autofree int32_t *pos = g_new (int32_t, n);
  g_autofree int32_t *tt = g_new0 (int32_t, n);
  hn_encoder_positions (m, ids, n, pos);
  if (type_ids)
    memcpy (tt, type_ids, sizeof (int32_t) * (gsize) n);
  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  g_autoptr (HnCmd) cmd = hn_cmd_new (m->ctx, error);
  HnTensor *ids_t = cmd ? hn_scratch_new (&sc, "enc.ids", HN_DTYPE_I32, 1, (gint64[]) { N }, error) : NULL;
  HnTensor *pos_t = ids_t ? hn_scratch_new (&sc, "enc.pos", HN_DTYPE_I32, 1, (gint64[]) { N }, error) : NULL;
  HnTensor *tt_t = pos_t ? hn_scratch_new (&sc, "enc.types", HN_DTYPE_I32, 1, (gint64[]) { N }, error) : NULL;
  HnTensor *e = tt_t ? hn_scratch_new (&sc, "enc.emb", HN_DTYPE_F32, 2, (gint64[]) { N, E }, error) : NULL;
  HnTensor *e2 = e ? hn_scratch_new (&sc, "enc.emb2", HN_DTYPE_F32, 2, (gint64[]) { N, E }, error) : NULL;
  HnTensor *x = e2 ? hn_scratch_new (&sc, "enc.x", HN_DTYPE_F32, 2, (gint64[]) { N, C }, error) : NULL;
  HnTensor *lg = x ? hn_scratch_new (&sc, "enc.logits", HN_DTYPE_F32, 2, (gint64[]) { N, m->vocab }, error) : NULL;
  HnTensor *mask = NULL;
  gboolean ok = lg && hn_tensor_upload_i32 (ids_t, ids, (gsize) n, error) &&
                hn_tensor_upload_i32 (pos_t, pos, (gsize) n, error) && hn_tensor_upload_i32 (tt_t, tt, (gsize) n, error);
  if (ok && m->layer_local)
    {
      g_autofree float *mk = g_new (float, (gsize) N * N);
      for (gint64 i = 0; i < N; i++)
        for (gint64 j = 0; j < N; j++)
          mk[i * N + j] = ABS (i - j) <= m->local_window ? 0.0f : -INFINITY;
      ok = (mask = hn_scratch_new (&sc, "enc.local_mask", HN_DTYPE_F32, 2, (gint64[]) { N, N }, error)) &&
           hn_tensor_upload_f32 (mask, mk, (gsize) (N * N), error);
    }
  /* embeddings */
  ok = ok && hn_op_embedding (cmd, e, m->word_in ? m->word_in : m->word, ids_t, error);
  if (ok && m->pos)
    ok = hn_op_embedding (cmd, e2, m->pos, pos_t, error) && hn_op_add (cmd, e, e, e2, error);
  if (ok && m->type)
    ok = hn_op_embedding (cmd, e2, m->type, tt_t, error) && hn_op_add (cmd, e, e, e2, error);
  if (m->emb_ln_w)
    ok = ok && hn_op_layernorm (cmd, m->proj_w ? e : x, e, m->emb_ln_w, m->emb_ln_b, m->eps, error);
  else if (!m->proj_w) /* megatron-bert, xlm-roberta-xl: no embedding norm */
    ok = ok && hn_op_copy (cmd, x, e, error);
  if (ok && m->proj_w)
    ok = hn_op_matmul (cmd, x, e, m->proj_w, m->proj_b, error);
  HnTensor *rel_bias = NULL;
  HnAttendWork aw = { 0 };
  if (ok && m->rel)
    {
      /* mpnet: the [H, N, N] bias of the (key - query) buckets, and the biased attention's buffers */
      gint64 H = m->H, HD = (gint64) m->H * m->D;
      g_autofree float *bias = g_new (float, (gsize) (H * N * N));
      for (gint64 i = 0; i < N; i++)
        for (gint64 j = 0; j < N; j++)
          {
            int bk = hn_t5_relative_bucket ((int) (j - i), TRUE, m->buckets, 128);
            for (gint64 h = 0; h < H; h++)
              bias[(h * N + i) * N + j] = m->rel[bk * H + h];
          }
      ok = (rel_bias = hn_scratch_new (&sc, "enc.rel_bias", HN_DTYPE_F32, 3, (gint64[]) { H, N, N }, error)) &&
           hn_tensor_upload_f32 (rel_bias, bias, (gsize) (H * N * N), error) &&
           (aw.qh = hn_scratch_new (&sc, "enc.qh", HN_DTYPE_F32, 1, (gint64[]) { N * HD }, error)) &&
           (aw.kh = hn_scratch_new (&sc, "enc.kh", HN_DTYPE_F32, 1, (gint64[]) { N * HD }, error)) &&
           (aw.vh = hn_scratch_new (&sc, "enc.vh", HN_DTYPE_F32, 1, (gint64[]) { N * HD }, error)) &&
           (aw.oh = hn_scratch_new (&sc, "enc.oh", HN_DTYPE_F32, 1, (gint64[]) { N * HD }, error)) &&
           (aw.scores = hn_scratch_new (&sc, "enc.scores", HN_DTYPE_F32, 1, (gint64[]) { H * N * N }, error));
    }
  HnTensor *dft_n[2] = { NULL, NULL };
  if (ok && m->dft_cos)
    {
      g_autofree float *c = g_new (float, (gsize) (N * N)), *sn = g_new (float, (gsize) (N * N));
      dft_tables (N, c, sn);
      ok = (dft_n[0] = hn_scratch_new (&sc, "enc.dft_cos", HN_DTYPE_F32, 2, (gint64[]) { N, N }, error)) &&
           (dft_n[1] = hn_scratch_new (&sc, "enc.dft_sin", HN_DTYPE_F32, 2, (gint64[]) { N, N }, error)) &&
           hn_tensor_upload_f32 (dft_n[0], c, (gsize) (N * N), error) &&
           hn_tensor_upload_f32 (dft_n[1], sn, (gsize) (N * N), error);
    }
  for (int s = 0; ok && s < m->n_exec; s++)
    ok = record_layer (m, cmd, &sc, s, x, pos_t, mask, rel_bias, &aw, dft_n, error);
  if (ok && m->final_w)
    ok = enc_norm (m, cmd, x, x, m->final_w, m->final_b, m->eps, error);
  /* head */
  HnTensor *t = x; /* xlm: no transform before the decoder */
  if (m->head_w)
    ok = ok && linear (cmd, &sc, &t, "enc.head", x, m->head_w, m->head_b, error) &&
         hn_op_unary (cmd, t, t, m->head_act, error) &&
         hn_op_layernorm (cmd, t, t, m->head_ln_w, m->head_ln_b, m->head_eps, error);
  ok = ok && hn_op_matmul (cmd, lg, t, m->dec_w, m->dec_b, error) && hn_cmd_submit_wait (cmd, error) &&
       hn_tensor_download_f32 (lg, logits, (gsize) N * m->vocab, error);
  hn_scratch_clear (&sc);
  return ok;
}
