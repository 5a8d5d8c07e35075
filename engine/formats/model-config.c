#include "formats/model-config.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/gguf-hf.h"

#include <math.h>
#include <string.h>

typedef struct {
  const char *file;
  JsonObject *o;
  GError *err; /* first problem; later reads are skipped */
} Ctx;

/* A member that is present and not null. */
static JsonNode *
member (Ctx *c, const char *key)
{
  if (c->err || !c->o)
    return NULL;
  JsonNode *n = json_object_get_member (c->o, key);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return NULL;
  return n;
}

static void
type_error (Ctx *c, const char *key, const char *want)
{
  if (!c->err)
    g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT, "%s: \"%s\" must be %s", c->file, key, want);
}

static gboolean
read_int (Ctx *c, const char *key, gint64 *out)
{
  JsonNode *n = member (c, key);
  if (!n)
    return FALSE;
  if (!hn_json_node_get_int (n, out))
    {
      type_error (c, key, "an integer");
      return FALSE;
    }
  return TRUE;
}

static gboolean
read_double (Ctx *c, const char *key, double *out)
{
  JsonNode *n = member (c, key);
  if (!n)
    return FALSE;
  if (!hn_json_node_get_double (n, out))
    {
      type_error (c, key, "a number");
      return FALSE;
    }
  return TRUE;
}

static gboolean
read_bool (Ctx *c, const char *key, int *out)
{
  JsonNode *n = member (c, key);
  if (!n)
    return FALSE;
  gboolean b;
  if (!hn_json_node_get_bool (n, &b))
    {
      type_error (c, key, "true or false");
      return FALSE;
    }
  *out = b ? 1 : 0;
  return TRUE;
}

static gboolean
read_string (Ctx *c, const char *key, char **out)
{
  JsonNode *n = member (c, key);
  if (!n)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      type_error (c, key, "a string");
      return FALSE;
    }
  g_free (*out);
  *out = g_strdup (json_node_get_string (n));
  return TRUE;
}

/* First alias present wins. Keys are NULL-terminated varargs. */
static void
int_alias (Ctx *c, gint64 *out, ...)
{
  va_list ap;
  va_start (ap, out);
  const char *k;
  while ((k = va_arg (ap, const char *)))
    if (read_int (c, k, out))
      break;
  va_end (ap);
}

static const char *
double_alias (Ctx *c, double *out, ...)
{
  va_list ap;
  va_start (ap, out);
  const char *k, *hit = NULL;
  while ((k = va_arg (ap, const char *)))
    if (read_double (c, k, out))
      {
        hit = k;
        break;
      }
  va_end (ap);
  return hit;
}

static void
bool_alias (Ctx *c, int *out, ...)
{
  va_list ap;
  va_start (ap, out);
  const char *k;
  while ((k = va_arg (ap, const char *)))
    if (read_bool (c, k, out))
      break;
  va_end (ap);
}

static void
string_alias (Ctx *c, char **out, ...)
{
  va_list ap;
  va_start (ap, out);
  const char *k;
  while ((k = va_arg (ap, const char *)))
    if (read_string (c, k, out))
      break;
  va_end (ap);
}

/* An int or a list of ints (eos_token_id). */
static void
read_int_list (Ctx *c, const char *key, gint64 **out, guint *n_out)
{
  JsonNode *n = member (c, key);
  if (!n)
    return;
  g_clear_pointer (out, g_free);
  *n_out = 0;
  gint64 v;
  if (hn_json_node_get_int (n, &v))
    {
      *out = g_new (gint64, 1);
      (*out)[0] = v;
      *n_out = 1;
      return;
    }
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      type_error (c, key, "an integer or a list of integers");
      return;
    }
  JsonArray *a = json_node_get_array (n);
  guint len = json_array_get_length (a);
  *out = g_new0 (gint64, MAX (len, 1));
  for (guint i = 0; i < len; i++)
    if (!hn_json_node_get_int (json_array_get_element (a, i), &(*out)[i]))
      {
        type_error (c, key, "an integer or a list of integers");
        return;
      }
  *n_out = len;
}

static void
read_double_list (Ctx *c, JsonObject *o, const char *key, double **out, guint *n_out)
{
  JsonNode *n = o ? json_object_get_member (o, key) : NULL;
  if (c->err || !n || JSON_NODE_HOLDS_NULL (n))
    return;
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      type_error (c, key, "a list of numbers");
      return;
    }
  JsonArray *a = json_node_get_array (n);
  guint len = json_array_get_length (a);
  g_free (*out);
  *out = g_new0 (double, MAX (len, 1));
  *n_out = len;
  for (guint i = 0; i < len; i++)
    if (!hn_json_node_get_double (json_array_get_element (a, i), &(*out)[i]))
      {
        type_error (c, key, "a list of numbers");
        return;
      }
}

static char **
read_string_list (Ctx *c, const char *key)
{
  JsonNode *n = member (c, key);
  if (!n)
    return NULL;
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      type_error (c, key, "a list of strings");
      return NULL;
    }
  JsonArray *a = json_node_get_array (n);
  guint len = json_array_get_length (a);
  char **v = g_new0 (char *, len + 1);
  for (guint i = 0; i < len; i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
        {
          g_strfreev (v);
          type_error (c, key, "a list of strings");
          return NULL;
        }
      v[i] = g_strdup (json_node_get_string (e));
    }
  return v;
}

static void
rope_init (HnRopeConfig *r)
{
  memset (r, 0, sizeof *r);
  r->theta = 10000.0;
  r->factor = 1.0;
  r->low_freq_factor = r->high_freq_factor = NAN;
  r->original_max_position_embeddings = HN_CONFIG_UNSET;
  r->beta_fast = r->beta_slow = r->attention_factor = r->mscale = r->mscale_all_dim = NAN;
  r->partial_rotary_factor = 1.0;
  r->truncate = HN_CONFIG_UNSET;
}

static void
rope_clear (HnRopeConfig *r)
{
  g_free (r->rope_type);
  g_free (r->short_factor);
  g_free (r->long_factor);
}

/* Reads the scaling fields shared by 4.x rope_scaling and 5.x rope_parameters. */
static void
rope_read_params (Ctx *c, JsonObject *po, HnRopeConfig *r)
{
  g_autofree char *where = g_strdup_printf ("%s: rope parameters", c->file);
  Ctx pc = { where, po, NULL };
  char *type = NULL;
  string_alias (&pc, &type, "rope_type", "type", NULL);
  if (type)
    {
      /* Early Phi-3 files call longrope "su"; transformers maps it too. */
      if (strcmp (type, "su") == 0)
        {
          g_free (type);
          type = g_strdup ("longrope");
        }
      g_free (r->rope_type);
      r->rope_type = type;
    }
  read_double (&pc, "rope_theta", &r->theta);
  read_double (&pc, "factor", &r->factor);
  read_double (&pc, "low_freq_factor", &r->low_freq_factor);
  read_double (&pc, "high_freq_factor", &r->high_freq_factor);
  read_int (&pc, "original_max_position_embeddings", &r->original_max_position_embeddings);
  read_double (&pc, "beta_fast", &r->beta_fast);
  read_double (&pc, "beta_slow", &r->beta_slow);
  read_double (&pc, "attention_factor", &r->attention_factor);
  read_double (&pc, "mscale", &r->mscale);
  read_double (&pc, "mscale_all_dim", &r->mscale_all_dim);
  read_double (&pc, "partial_rotary_factor", &r->partial_rotary_factor);
  read_bool (&pc, "truncate", &r->truncate);
  read_double_list (&pc, po, "short_factor", &r->short_factor, &r->n_short_factor);
  read_double_list (&pc, po, "long_factor", &r->long_factor, &r->n_long_factor);
  if (pc.err && !c->err)
    c->err = pc.err;
  else
    g_clear_error (&pc.err);
}

static void
parse_rope (Ctx *c, HnModelConfig *cfg)
{
  HnRopeConfig *r = &cfg->rope;
  rope_init (r);
  rope_init (&cfg->rope_sliding);
  /* 4.x: top-level theta and optional rope_scaling */
  double_alias (c, &r->theta, "rope_theta", "rotary_emb_base", "rope_embedding_base", NULL);
  double_alias (c, &r->partial_rotary_factor, "partial_rotary_factor", "rotary_pct", NULL);
  JsonNode *rs = member (c, "rope_scaling");
  if (rs)
    {
      if (!JSON_NODE_HOLDS_OBJECT (rs))
        type_error (c, "rope_scaling", "an object or null");
      else
        rope_read_params (c, json_node_get_object (rs), r);
    }
  double local_theta;
  if (read_double (c, "rope_local_base_freq", &local_theta))
    {
      cfg->has_rope_sliding = TRUE;
      cfg->rope_sliding.theta = local_theta;
      cfg->rope_sliding.partial_rotary_factor = r->partial_rotary_factor;
    }

  /* 5.x: rope_parameters, either one object or one per layer type (gemma3). */
  JsonNode *rp = member (c, "rope_parameters");
  if (rp)
    {
      if (!JSON_NODE_HOLDS_OBJECT (rp))
        type_error (c, "rope_parameters", "an object");
      else
        {
          JsonObject *po = json_node_get_object (rp);
          JsonNode *full = json_object_get_member (po, "full_attention");
          JsonNode *sliding = json_object_get_member (po, "sliding_attention");
          if ((full && JSON_NODE_HOLDS_OBJECT (full)) || (sliding && JSON_NODE_HOLDS_OBJECT (sliding)))
            {
              if (full && JSON_NODE_HOLDS_OBJECT (full))
                rope_read_params (c, json_node_get_object (full), r);
              if (sliding && JSON_NODE_HOLDS_OBJECT (sliding))
                {
                  cfg->has_rope_sliding = TRUE;
                  cfg->rope_sliding.partial_rotary_factor = r->partial_rotary_factor;
                  rope_read_params (c, json_node_get_object (sliding), &cfg->rope_sliding);
                  cfg->rope_sliding.from_rope_parameters = TRUE;
                }
            }
          else
            rope_read_params (c, po, r);
          r->from_rope_parameters = TRUE;
        }
    }
  if (!r->rope_type)
    r->rope_type = g_strdup ("default");
  if (cfg->has_rope_sliding && !cfg->rope_sliding.rope_type)
    cfg->rope_sliding.rope_type = g_strdup ("default");
  if (!c->err && (!(r->theta > 0) || !(r->factor > 0) || !(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1)))
    g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT,
                 "%s: rope parameters out of range (theta %g, factor %g, partial_rotary_factor %g)", c->file,
                 r->theta, r->factor, r->partial_rotary_factor);
}

/* The top-level (not *_config) members of `o` copied into `m`. */
static void
merge_plain_members (JsonObject *m, JsonObject *o)
{
  g_autoptr (GList) keys = json_object_get_members (o);
  for (GList *l = keys; l; l = l->next)
    {
      const char *k = l->data;
      if (g_str_has_suffix (k, "_config"))
        continue; /* text_config, vision_config, audio_config, quantization_config... */
      json_object_set_member (m, k, json_node_copy (json_object_get_member (o, k)));
    }
}

/* Multimodal: the text model's fields in text_config override the top level
 * (which still holds ids such as eos_token_id and tie_word_embeddings); a
 * package nested one level deeper (Qwen2.5-Omni / Qwen3-Omni-MoE:
 * thinker_config.text_config) takes the thinker's plain fields between the two. */
static JsonObject *
merge_text_config (JsonObject *outer, JsonObject *mid, JsonObject *text)
{
  JsonObject *m = json_object_new ();
  merge_plain_members (m, outer);
  if (mid)
    merge_plain_members (m, mid);
  g_autoptr (GList) tkeys = json_object_get_members (text);
  for (GList *l = tkeys; l; l = l->next)
    json_object_set_member (m, l->data, json_node_copy (json_object_get_member (text, l->data)));
  return m;
}

/* DBRX keeps its attention and MoE settings in attn_config / ffn_config: lift them to the
 * top-level names read below (a top-level key, as transformers 5 also writes some, wins). */
static JsonObject *
flatten_dbrx (JsonObject *outer)
{
  static const char *const lift[][3] = {
    { "attn_config", "kv_n_heads", "num_key_value_heads" },
    { "attn_config", "clip_qkv", "clip_qkv" },
    { "attn_config", "rope_theta", "rope_theta" },
    { "ffn_config", "ffn_hidden_size", "ffn_hidden_size" },
    { "ffn_config", "moe_num_experts", "moe_num_experts" },
    { "ffn_config", "moe_top_k", "moe_top_k" },
    { "ffn_config", "moe_jitter_eps", "moe_jitter_eps" },
    { "ffn_config", "moe_normalize_expert_weights", "moe_normalize_expert_weights" },
  };
  JsonObject *m = json_object_new ();
  g_autoptr (GList) keys = json_object_get_members (outer);
  for (GList *l = keys; l; l = l->next)
    json_object_set_member (m, l->data, json_node_copy (json_object_get_member (outer, l->data)));
  for (gsize i = 0; i < G_N_ELEMENTS (lift); i++)
    {
      JsonNode *sub = json_object_get_member (outer, lift[i][0]);
      JsonObject *so = sub && JSON_NODE_HOLDS_OBJECT (sub) ? json_node_get_object (sub) : NULL;
      JsonNode *v = so ? json_object_get_member (so, lift[i][1]) : NULL;
      if (v && !json_object_has_member (m, lift[i][2]))
        json_object_set_member (m, lift[i][2], json_node_copy (v));
    }
  /* ffn_act_fn is {"name": ...} */
  JsonNode *ffn = json_object_get_member (outer, "ffn_config");
  JsonNode *act = ffn && JSON_NODE_HOLDS_OBJECT (ffn) ? json_object_get_member (json_node_get_object (ffn), "ffn_act_fn")
                                                     : NULL;
  JsonNode *name = act && JSON_NODE_HOLDS_OBJECT (act) ? json_object_get_member (json_node_get_object (act), "name")
                                                      : NULL;
  if (name && !json_object_has_member (m, "hidden_act"))
    json_object_set_member (m, "hidden_act", json_node_copy (name));
  return m;
}

static void
parse_fields (Ctx *c, HnModelConfig *cfg)
{
  string_alias (c, &cfg->model_type, "model_type", NULL);
  if (!c->err && !cfg->model_type)
    g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT, "%s: no \"model_type\"; this is not a transformers config.json",
                 c->file);
  char **arch = read_string_list (c, "architectures");
  cfg->architectures = arch ? arch : g_new0 (char *, 1);

  int_alias (c, &cfg->vocab_size, "vocab_size", "padded_vocab_size", "n_vocab", NULL);
  int_alias (c, &cfg->hidden_size, "hidden_size", "n_embd", "d_model", "dim", "n_embed", "emb_dim", NULL);
  int_alias (c, &cfg->intermediate_size, "intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size",
             "hidden_dim", "dff", NULL);
  int_alias (c, &cfg->num_hidden_layers, "num_hidden_layers", "n_layer", "num_layers", "n_layers", NULL);
  int_alias (c, &cfg->num_attention_heads, "num_attention_heads", "n_head", "num_heads", "n_heads",
             "encoder_attention_heads", "attention_heads", "num_encoder_attention_heads", NULL);
  int_alias (c, &cfg->num_key_value_heads, "num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads",
             "multi_query_group_num", NULL);
  int mq = HN_CONFIG_UNSET;
  read_bool (c, "multi_query", &mq);
  bool_alias (c, &cfg->new_decoder_architecture, "new_decoder_architecture", NULL);
  /* Falcon-7B style: multi_query means one KV head unless the new decoder
   * architecture says how many. */
  if (mq == 1 && cfg->num_key_value_heads < 0 && cfg->new_decoder_architecture != 1)
    cfg->num_key_value_heads = 1;
  if (cfg->num_key_value_heads < 0)
    cfg->num_key_value_heads = cfg->num_attention_heads;
  int_alias (c, &cfg->head_dim, "head_dim", "d_kv", "attention_head_dim", NULL);
  if (cfg->head_dim < 0 && cfg->hidden_size > 0 && cfg->num_attention_heads > 0)
    cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;

  string_alias (c, &cfg->hidden_act, "hidden_activation", "hidden_act", "activation_function", "hidden_activation",
                "activation", NULL);
  string_alias (c, &cfg->feed_forward_proj, "feed_forward_proj", NULL);
  cfg->norm_eps_key = double_alias (c, &cfg->norm_eps, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
                                    "norm_epsilon", "layernorm_epsilon", "norm_eps", NULL);
  int_alias (c, &cfg->max_position_embeddings, "max_position_embeddings", "n_positions", "max_seq_len",
             "max_sequence_length", "seq_length", "n_ctx", NULL);

  parse_rope (c, cfg);
  int_alias (c, &cfg->rotary_dim, "rotary_dim", NULL);
  if (cfg->rotary_dim <= 0 && cfg->head_dim > 0)
    cfg->rotary_dim = (gint64) llround ((double) cfg->head_dim * cfg->rope.partial_rotary_factor);

  bool_alias (c, &cfg->tie_word_embeddings, "tie_word_embeddings", NULL);
  bool_alias (c, &cfg->attention_bias, "attention_bias", "qkv_bias", "use_qkv_bias", "bias", "use_bias", "add_bias_linear", NULL);
  bool_alias (c, &cfg->mlp_bias, "mlp_bias", NULL);
  int_alias (c, &cfg->sliding_window, "sliding_window", NULL);
  bool_alias (c, &cfg->use_sliding_window, "use_sliding_window", NULL);
  int_alias (c, &cfg->max_window_layers, "max_window_layers", NULL);
  cfg->layer_types = read_string_list (c, "layer_types");
  int_alias (c, &cfg->sliding_window_pattern, "sliding_window_pattern", NULL);

  double_alias (c, &cfg->attn_logit_softcapping, "attn_logit_softcapping", NULL);
  double_alias (c, &cfg->final_logit_softcapping, "final_logit_softcapping", NULL);
  double_alias (c, &cfg->query_pre_attn_scalar, "query_pre_attn_scalar", NULL);
  bool_alias (c, &cfg->use_qk_norm, "use_qk_norm", "qk_layernorm", NULL);
  double_alias (c, &cfg->logit_scale, "logit_scale", NULL);
  double_alias (c, &cfg->embedding_multiplier, "embedding_multiplier", NULL);
  double_alias (c, &cfg->attention_multiplier, "attention_multiplier", NULL);
  double_alias (c, &cfg->residual_multiplier, "residual_multiplier", NULL);
  double_alias (c, &cfg->logits_scaling, "logits_scaling", NULL);
  bool_alias (c, &cfg->use_parallel_residual, "use_parallel_residual", NULL);
  bool_alias (c, &cfg->parallel_attn, "parallel_attn", NULL);
  bool_alias (c, &cfg->alibi, "alibi", NULL);
  bool_alias (c, &cfg->scale_attn_weights, "scale_attn_weights", NULL);
  bool_alias (c, &cfg->scale_attn_by_inverse_layer_idx, "scale_attn_by_inverse_layer_idx", NULL);
  bool_alias (c, &cfg->reorder_and_upcast_attn, "reorder_and_upcast_attn", NULL);

  int_alias (c, &cfg->bos_token_id, "bos_token_id", NULL);
  int_alias (c, &cfg->pad_token_id, "pad_token_id", NULL);
  read_int_list (c, "eos_token_id", &cfg->eos_token_ids, &cfg->n_eos_token_ids);
  int_alias (c, &cfg->decoder_start_token_id, "decoder_start_token_id", NULL);
  string_alias (c, &cfg->dtype, "dtype", "torch_dtype", NULL);

  int_alias (c, &cfg->num_experts, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", NULL);
  int_alias (c, &cfg->num_experts_per_tok, "num_experts_per_tok", "moe_top_k", "top_k_experts", "moe_k", "moe_topk",
             NULL);
  bool_alias (c, &cfg->norm_topk_prob, "norm_topk_prob", NULL);
  /* ERNIE-4.5-VL lists [text experts, vision experts]: transformer-config.c reads the list */
  JsonNode *mis = member (c, "moe_intermediate_size");
  if (!mis || !JSON_NODE_HOLDS_ARRAY (mis))
    int_alias (c, &cfg->moe_intermediate_size, "moe_intermediate_size", NULL);
  int_alias (c, &cfg->shared_expert_intermediate_size, "shared_expert_intermediate_size", NULL);
  int_alias (c, &cfg->n_shared_experts, "n_shared_experts", "num_shared_experts", NULL);
  int_alias (c, &cfg->decoder_sparse_step, "decoder_sparse_step", NULL);
  int_alias (c, &cfg->first_k_dense_replace, "first_k_dense_replace", NULL);
  read_int_list (c, "mlp_only_layers", &cfg->mlp_only_layers, &cfg->n_mlp_only_layers);
  double_alias (c, &cfg->router_aux_loss_coef, "router_aux_loss_coef", NULL);
  double_alias (c, &cfg->routed_scaling_factor, "routed_scaling_factor", NULL);
  double_alias (c, &cfg->router_jitter_noise, "router_jitter_noise", NULL);
  string_alias (c, &cfg->scoring_func, "scoring_func", NULL);

  bool_alias (c, &cfg->is_encoder_decoder, "is_encoder_decoder", NULL);
  int_alias (c, &cfg->encoder_layers, "encoder_layers", NULL);
  int_alias (c, &cfg->decoder_layers, "decoder_layers", "num_decoder_layers", NULL);
  if (cfg->is_encoder_decoder == 1 && cfg->encoder_layers < 0)
    int_alias (c, &cfg->encoder_layers, "num_layers", NULL);
  int_alias (c, &cfg->encoder_attention_heads, "encoder_attention_heads", NULL);
  int_alias (c, &cfg->decoder_attention_heads, "decoder_attention_heads", NULL);
  int_alias (c, &cfg->encoder_ffn_dim, "encoder_ffn_dim", NULL);
  int_alias (c, &cfg->decoder_ffn_dim, "decoder_ffn_dim", NULL);
  int_alias (c, &cfg->relative_attention_num_buckets, "relative_attention_num_buckets", NULL);
  int_alias (c, &cfg->relative_attention_max_distance, "relative_attention_max_distance", NULL);
  bool_alias (c, &cfg->scale_embedding, "scale_embedding", NULL);
  if (cfg->num_hidden_layers < 0 && cfg->decoder_layers > 0 && cfg->is_encoder_decoder != 1)
    cfg->num_hidden_layers = cfg->decoder_layers;

  if (c->err)
    return;
  /* Sanity that the families rely on; a config failing these is broken. */
  struct { const char *name; gint64 v; } pos[] = {
    { "vocab_size", cfg->vocab_size }, { "hidden_size", cfg->hidden_size },
    { "num_hidden_layers", cfg->num_hidden_layers }, { "num_attention_heads", cfg->num_attention_heads },
  };
  for (guint i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v == 0 || pos[i].v < HN_CONFIG_UNSET)
      {
        g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT, "%s: \"%s\" is %" G_GINT64_FORMAT ", must be positive",
                     c->file, pos[i].name, pos[i].v);
        return;
      }
  /* The model code holds these in ints and allocates per layer, head and
   * expert before the weights are read: a value past these bounds (4294967808
   * would become 512, 1e9 layers a 1 GB allocation) is refused here. The
   * bounds are far beyond any released model. */
  struct { const char *name; gint64 v, max; } bounded[] = {
    { "vocab_size", cfg->vocab_size, 1 << 28 }, { "hidden_size", cfg->hidden_size, 1 << 20 },
    { "intermediate_size", cfg->intermediate_size, 1 << 22 }, { "num_hidden_layers", cfg->num_hidden_layers, 1024 },
    { "num_attention_heads", cfg->num_attention_heads, 4096 }, { "num_key_value_heads", cfg->num_key_value_heads, 4096 },
    { "head_dim", cfg->head_dim, 1 << 16 }, { "max_position_embeddings", cfg->max_position_embeddings, G_MAXINT32 },
    { "rotary_dim", cfg->rotary_dim, 1 << 16 }, { "sliding_window", cfg->sliding_window, G_MAXINT32 },
    { "max_window_layers", cfg->max_window_layers, G_MAXINT32 }, { "sliding_window_pattern", cfg->sliding_window_pattern, 1024 },
    { "bos_token_id", cfg->bos_token_id, G_MAXINT32 }, { "pad_token_id", cfg->pad_token_id, G_MAXINT32 },
    { "decoder_start_token_id", cfg->decoder_start_token_id, G_MAXINT32 }, { "num_experts", cfg->num_experts, 1 << 16 },
    { "num_experts_per_tok", cfg->num_experts_per_tok, 1 << 16 }, { "moe_intermediate_size", cfg->moe_intermediate_size, 1 << 22 },
    { "shared_expert_intermediate_size", cfg->shared_expert_intermediate_size, 1 << 22 },
    { "n_shared_experts", cfg->n_shared_experts, 1 << 16 }, { "decoder_sparse_step", cfg->decoder_sparse_step, 1024 },
    { "first_k_dense_replace", cfg->first_k_dense_replace, 1024 }, { "encoder_layers", cfg->encoder_layers, 1024 },
    { "decoder_layers", cfg->decoder_layers, 1024 }, { "encoder_attention_heads", cfg->encoder_attention_heads, 4096 },
    { "decoder_attention_heads", cfg->decoder_attention_heads, 4096 }, { "encoder_ffn_dim", cfg->encoder_ffn_dim, 1 << 22 },
    { "decoder_ffn_dim", cfg->decoder_ffn_dim, 1 << 22 },
    { "relative_attention_num_buckets", cfg->relative_attention_num_buckets, 1 << 16 },
    { "relative_attention_max_distance", cfg->relative_attention_max_distance, G_MAXINT32 },
  };
  for (guint i = 0; i < G_N_ELEMENTS (bounded); i++)
    if (bounded[i].v > bounded[i].max || bounded[i].v < G_MININT32)
      {
        g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT, "%s: \"%s\" is %" G_GINT64_FORMAT ", out of range (at most %"
                     G_GINT64_FORMAT ")", c->file, bounded[i].name, bounded[i].v, bounded[i].max);
        return;
      }
  if (cfg->num_key_value_heads > 0 && cfg->num_attention_heads > 0 &&
      cfg->num_attention_heads % cfg->num_key_value_heads != 0)
    g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT,
                 "%s: num_attention_heads %" G_GINT64_FORMAT " is not a multiple of num_key_value_heads %" G_GINT64_FORMAT,
                 c->file, cfg->num_attention_heads, cfg->num_key_value_heads);
}

static HnModelConfig *
config_new (const char *path)
{
  HnModelConfig *cfg = g_new0 (HnModelConfig, 1);
  cfg->path = g_strdup (path);
  gint64 *ints[] = {
    &cfg->vocab_size, &cfg->hidden_size, &cfg->intermediate_size, &cfg->num_hidden_layers,
    &cfg->num_attention_heads, &cfg->num_key_value_heads, &cfg->head_dim, &cfg->max_position_embeddings,
    &cfg->rotary_dim, &cfg->sliding_window, &cfg->max_window_layers, &cfg->sliding_window_pattern,
    &cfg->bos_token_id, &cfg->pad_token_id, &cfg->decoder_start_token_id, &cfg->num_experts,
    &cfg->num_experts_per_tok, &cfg->moe_intermediate_size, &cfg->shared_expert_intermediate_size,
    &cfg->n_shared_experts, &cfg->decoder_sparse_step, &cfg->first_k_dense_replace, &cfg->encoder_layers,
    &cfg->decoder_layers, &cfg->encoder_attention_heads, &cfg->decoder_attention_heads, &cfg->encoder_ffn_dim,
    &cfg->decoder_ffn_dim, &cfg->relative_attention_num_buckets, &cfg->relative_attention_max_distance,
  };
  for (guint i = 0; i < G_N_ELEMENTS (ints); i++)
    *ints[i] = HN_CONFIG_UNSET;
  int *tris[] = {
    &cfg->tie_word_embeddings, &cfg->attention_bias, &cfg->mlp_bias, &cfg->use_sliding_window, &cfg->use_qk_norm,
    &cfg->use_parallel_residual, &cfg->parallel_attn, &cfg->new_decoder_architecture, &cfg->alibi,
    &cfg->scale_attn_weights, &cfg->scale_attn_by_inverse_layer_idx, &cfg->reorder_and_upcast_attn,
    &cfg->norm_topk_prob, &cfg->is_encoder_decoder, &cfg->scale_embedding,
  };
  for (guint i = 0; i < G_N_ELEMENTS (tris); i++)
    *tris[i] = HN_CONFIG_UNSET;
  double *dbls[] = {
    &cfg->norm_eps, &cfg->attn_logit_softcapping, &cfg->final_logit_softcapping, &cfg->query_pre_attn_scalar,
    &cfg->logit_scale, &cfg->embedding_multiplier, &cfg->attention_multiplier, &cfg->residual_multiplier,
    &cfg->logits_scaling, &cfg->router_aux_loss_coef, &cfg->routed_scaling_factor, &cfg->router_jitter_noise,
  };
  for (guint i = 0; i < G_N_ELEMENTS (dbls); i++)
    *dbls[i] = NAN;
  rope_init (&cfg->rope);
  rope_init (&cfg->rope_sliding);
  return cfg;
}

void
hn_model_config_free (HnModelConfig *cfg)
{
  if (!cfg)
    return;
  g_free (cfg->path);
  g_free (cfg->model_type);
  g_free (cfg->outer_model_type);
  g_strfreev (cfg->architectures);
  g_free (cfg->hidden_act);
  rope_clear (&cfg->rope);
  rope_clear (&cfg->rope_sliding);
  g_strfreev (cfg->layer_types);
  g_free (cfg->eos_token_ids);
  g_free (cfg->dtype);
  g_free (cfg->mlp_only_layers);
  g_free (cfg->scoring_func);
  g_free (cfg->feed_forward_proj);
  if (cfg->raw)
    json_object_unref (cfg->raw);
  if (cfg->parser)
    g_object_unref (cfg->parser);
  g_free (cfg);
}

HnModelConfig *
hn_model_config_load_from_data (const char *data, gssize len, const char *name, GError **error)
{
  g_autoptr (HnModelConfig) cfg = config_new (name);
  cfg->parser = json_parser_new_immutable ();
  if (!hn_json_parser_load (cfg->parser, data, len, name, error))
    return NULL;
  JsonNode *root = json_parser_get_root (cfg->parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a JSON object", name);
      return NULL;
    }
  cfg->outer_raw = json_node_get_object (root);
  Ctx c = { name, cfg->outer_raw, NULL };
  read_string (&c, "model_type", &cfg->outer_model_type);
  JsonNode *tc = member (&c, "text_config");
  JsonObject *mid = NULL;
  JsonNode *th = member (&c, "thinker_config");
  if (!tc && th && JSON_NODE_HOLDS_OBJECT (th))
    {
      /* the omni packages keep their text model's config in thinker_config.text_config */
      Ctx tcx = { name, json_node_get_object (th), NULL };
      JsonNode *ttc = member (&tcx, "text_config");
      if (ttc && JSON_NODE_HOLDS_OBJECT (ttc))
        {
          mid = json_node_get_object (th);
          tc = ttc;
        }
    }
  if (tc && JSON_NODE_HOLDS_OBJECT (tc))
    {
      cfg->raw = merge_text_config (cfg->outer_raw, mid, json_node_get_object (tc));
      cfg->text_config_resolved = TRUE;
      g_info ("%s: multimodal config (%s): using its text_config; the vision tower is not run", name,
              cfg->outer_model_type ? cfg->outer_model_type : "?");
    }
  else if (g_strcmp0 (cfg->outer_model_type, "dbrx") == 0)
    cfg->raw = flatten_dbrx (cfg->outer_raw);
  else
    cfg->raw = json_object_ref (cfg->outer_raw);
  c.o = cfg->raw;
  parse_fields (&c, cfg);
  if (c.err)
    {
      g_propagate_error (error, c.err);
      return NULL;
    }
  /* A text_config without a model_type of its own inherits the outer one. */
  if (!cfg->outer_model_type)
    cfg->outer_model_type = g_strdup (cfg->model_type);
  /* The outer architectures name the multimodal class; the text model's are what we run. */
  return g_steal_pointer (&cfg);
}

HnModelConfig *
hn_model_config_load (const char *path, GError **error)
{
  /* A GGUF model: the config.json its metadata stands for. */
  g_autofree char *gguf = hn_gguf_resolve_path (path);
  if (gguf)
    {
      g_autoptr (HnGguf) g = hn_gguf_open (gguf, error);
      if (!g)
        return NULL;
      g_autofree char *json = hn_gguf_config_json (g, error);
      if (!json)
        return NULL;
      return hn_model_config_load_from_data (json, -1, hn_gguf_get_path (g), error);
    }
  g_autofree char *file = NULL;
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    file = g_build_filename (path, "config.json", NULL);
  else
    file = g_strdup (path);
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (file, HN_MAX_CONFIG_BYTES, "model config", &data, &len, error))
    return NULL;
  return hn_model_config_load_from_data (data, (gssize) len, file, error);
}

gboolean
hn_model_config_check_supported (const HnModelConfig *cfg, const char *const *supported, GError **error)
{
  for (const char *const *s = supported; s && *s; s++)
    if (g_strcmp0 (*s, cfg->model_type) == 0)
      return TRUE;
  g_autofree char *list = supported && supported[0] ? g_strjoinv (", ", (char **) supported) : g_strdup ("none");
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type '%s' is not supported; supported: %s",
               cfg->path, cfg->model_type, list);
  return FALSE;
}

JsonObject *
hn_model_config_get_raw (const HnModelConfig *cfg)
{
  return cfg->raw;
}

JsonObject *
hn_model_config_get_outer_raw (const HnModelConfig *cfg)
{
  return cfg->outer_raw;
}

gboolean
hn_model_config_get_int (const HnModelConfig *cfg, const char *key, gint64 *out, GError **error)
{
  Ctx c = { cfg->path, cfg->raw, NULL };
  gboolean ok = read_int (&c, key, out);
  if (c.err)
    g_propagate_error (error, c.err);
  return ok;
}

gboolean
hn_model_config_get_double (const HnModelConfig *cfg, const char *key, double *out, GError **error)
{
  Ctx c = { cfg->path, cfg->raw, NULL };
  gboolean ok = read_double (&c, key, out);
  if (c.err)
    g_propagate_error (error, c.err);
  return ok;
}

gboolean
hn_model_config_get_bool (const HnModelConfig *cfg, const char *key, gboolean *out, GError **error)
{
  Ctx c = { cfg->path, cfg->raw, NULL };
  int v = 0;
  gboolean ok = read_bool (&c, key, &v);
  if (c.err)
    g_propagate_error (error, c.err);
  if (ok)
    *out = v;
  return ok;
}

const char *
hn_model_config_get_string (const HnModelConfig *cfg, const char *key)
{
  JsonNode *n = json_object_get_member (cfg->raw, key);
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

gboolean
hn_model_config_is_eos (const HnModelConfig *cfg, gint64 id)
{
  for (guint i = 0; i < cfg->n_eos_token_ids; i++)
    if (cfg->eos_token_ids[i] == id)
      return TRUE;
  return FALSE;
}
