/* config.json -> HnTransformerHParams: the registry's static quirks plus the
 * switches config.json carries, with each family's transformers defaults.
 * Any option that changes the graph in a way we do not build fails closed
 * with a message naming the option. */
#include "base/hn-error.h"
#include "transformer/transformer-private.h"
#include "recurrent/ops-delta.h"
#include "recurrent/ops-ssm.h"

#include <math.h>
#include <string.h>

static gboolean
unsupported (GError **error, const HnModelConfig *cfg, const char *what)
{
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s (model_type %s) is not supported", cfg->path, what,
               cfg->model_type);
  return FALSE;
}

static gboolean
raw_bool (const HnModelConfig *cfg, const char *key, gboolean dflt, gboolean *out, GError **error)
{
  gboolean v;
  GError *e = NULL;
  if (hn_model_config_get_bool (cfg, key, &v, &e))
    *out = v;
  else if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  else
    *out = dflt;
  return TRUE;
}

/* The text models of the Qwen vision-language packages and PaddleOCR-VL's rotate with multimodal
 * rope (mrope): the head's frequency pairs fall into temporal / height / width sections
 * (rope_parameters.mrope_section; qwen3_vl interleaves them, mrope_interleaved), each pair turned
 * by the position of its own stream. Text alone gives the three streams one position per token
 * (get_rope_index / get_mrope_position_ids expand a text run's positions to 3 equal rows, the text
 * model expands its arange to 3 without position_ids), so every pair turns by the token's position
 * with its 1-D frequency: the ordinary rotation this graph runs. Only image / video positions
 * (not taken here) would tell the sections apart. */
static gboolean
mrope_text (const char *model_type)
{
  static const char *const t[] = { "qwen2_vl_text",        "qwen2_5_vl_text",      "qwen3_vl_text",
                                   "qwen3_vl_moe_text",    "paddleocr_vl_text",    "hunyuan_vl_text",
                                   "qwen2_5_omni_text",    "qwen3_omni_moe_text",  "cosmos3_edge_text",
                                   "ernie4_5_vl_moe_text", NULL };
  return g_strv_contains (t, model_type);
}

/* mrope_section as these modeling files read it: three non-negative sizes. The chunked layout
 * (qwen2_vl, qwen2_5_vl, paddleocr_vl: cos.split(mrope_section * 2)) must cover the rotary dims
 * exactly, as torch.split requires; qwen3_vl always interleaves (apply_interleaved_mrope, whatever
 * mrope_interleaved says), indexing strided slices, so any sizes run. HunYuan-VL takes any number
 * of axes (3 or 4 in its configs; xdrope_section is its config class's old name) summing to half
 * the head, which HunYuanVLTextConfig checks and its recomposition_frequencies splits by. */
static gboolean
mrope_check (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  gboolean hy = strcmp (hp->arch->model_type, "hunyuan_vl_text") == 0;
  JsonObject *rp = NULL;
  const char *key = NULL;
  for (int j = 0; j < 2 && !rp; j++)
    {
      JsonNode *n = raw ? json_object_get_member (raw, j ? "rope_scaling" : "rope_parameters") : NULL;
      rp = n && JSON_NODE_HOLDS_OBJECT (n) ? json_node_get_object (n) : NULL;
      key = rp && json_object_has_member (rp, "mrope_section")                ? "mrope_section"
            : rp && hy && json_object_has_member (rp, "xdrope_section") ? "xdrope_section"
                                                                              : NULL;
      if (!key)
        rp = NULL;
    }
  if (!rp)
    return TRUE; /* no sections (qwen3_vl's default [24, 20, 20]): text alone turns the same either way */
  JsonNode *sn = json_object_get_member (rp, key);
  JsonArray *sec = JSON_NODE_HOLDS_ARRAY (sn) ? json_node_get_array (sn) : NULL;
  gint64 sum = 0;
  for (guint i = 0; sec && i < json_array_get_length (sec); i++)
    {
      JsonNode *e = json_array_get_element (sec, i);
      gint64 v = JSON_NODE_HOLDS_VALUE (e) && json_node_get_value_type (e) == G_TYPE_INT64 ? json_node_get_int (e) : -1;
      if (v < 0)
        sec = NULL;
      else
        sum += v;
    }
  if (!sec || (hy ? json_array_get_length (sec) == 0 : json_array_get_length (sec) != 3))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must list %s non-negative sizes", cfg->path, key,
                   hy ? "one or more" : "three");
      return FALSE;
    }
  /* Qwen3-Omni-MoE's thinker interleaves as qwen3_vl does; Cosmos3-Edge's config class requires the
   * sum (its rotary is qwen3_vl's); ERNIE-4.5-VL splits the frequencies by the sections, h and w
   * pairwise (torch.stack needs them equal) */
  const char *mt = hp->arch->model_type;
  if (!g_str_has_prefix (mt, "qwen3_vl") && strcmp (mt, "qwen3_omni_moe_text") != 0 && 2 * sum != hp->rot_dims)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: %s sums to %" G_GINT64_FORMAT " frequency pairs for %d rotary dims", cfg->path, key, sum,
                   hp->rot_dims);
      return FALSE;
    }
  if (strcmp (mt, "ernie4_5_vl_moe_text") == 0 &&
      json_array_get_int_element (sec, 0) != json_array_get_int_element (sec, 1))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must give its first two (h, w) sections equal sizes",
                   cfg->path, key);
      return FALSE;
    }
  return TRUE;
}

/* The rotary base of a config class whose default is not 10000 (default_theta), when config.json
 * names none (neither rope_theta nor rope_parameters.rope_theta); 0 when the reader's default holds. */
static double
family_default_theta (const HnModelConfig *cfg, const char *model_type)
{
  static const struct {
    const char *model_type;
    double theta;
  } t[] = {
    { "qwen2_5_omni_text", 1e6 },    /* Qwen2_5OmniTextConfig */
    { "qwen3_omni_moe_text", 1e6 },  /* Qwen3OmniMoeTextConfig */
    { "cosmos3_edge_text", 1e8 },    /* Cosmos3EdgeTextConfig */
    { "ernie4_5_vl_moe_text", 5e5 }, /* Ernie4_5_VLMoeTextConfig */
  };
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *rt = raw ? json_object_get_member (raw, "rope_theta") : NULL;
  JsonNode *rp = raw ? json_object_get_member (raw, "rope_parameters") : NULL;
  JsonObject *po = rp && JSON_NODE_HOLDS_OBJECT (rp) ? json_node_get_object (rp) : NULL;
  JsonNode *pt = po ? json_object_get_member (po, "rope_theta") : NULL;
  if ((rt && !JSON_NODE_HOLDS_NULL (rt)) || (pt && !JSON_NODE_HOLDS_NULL (pt)))
    return 0;
  for (gsize i = 0; i < G_N_ELEMENTS (t); i++)
    if (strcmp (t[i].model_type, model_type) == 0)
      return t[i].theta;
  return 0;
}

/* Whether config.json names the rotary fraction itself (top level, in rope_parameters or in
 * rope_scaling), rather than leaving the config class's default. */
static gboolean
partial_rotary_given (const HnModelConfig *cfg)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  if (!raw)
    return FALSE;
  static const char *const top[] = { "partial_rotary_factor", "rotary_pct", "rotary_dim" };
  for (gsize i = 0; i < G_N_ELEMENTS (top); i++)
    if (json_object_has_member (raw, top[i]))
      return TRUE;
  static const char *const nested[] = { "rope_parameters", "rope_scaling" };
  for (gsize i = 0; i < G_N_ELEMENTS (nested); i++)
    {
      JsonNode *n = json_object_get_member (raw, nested[i]);
      if (n && JSON_NODE_HOLDS_OBJECT (n) && json_object_has_member (json_node_get_object (n), "partial_rotary_factor"))
        return TRUE;
    }
  return FALSE;
}

/* Cosmos3EdgeTextConfig and Ernie4_5_VLMoeTextRotaryEmbedding raise on any rope_type but "default". */
static gboolean
default_rope_only (const char *model_type)
{
  return strcmp (model_type, "cosmos3_edge_text") == 0 || strcmp (model_type, "ernie4_5_vl_moe_text") == 0;
}

static gboolean
rope_scaling_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, const HnRopeConfig *r,
                          HnRopeScaling *s, double *theta, GError **error)
{
  memset (s, 0, sizeof *s);
  *theta = r->theta > 0 ? r->theta : 10000.0;
  const char *t = r->rope_type ? r->rope_type : "default";
  if (strcmp (t, "default") != 0 && default_rope_only (hp->arch->model_type))
    {
      g_autofree char *what = g_strdup_printf ("rope type \"%s\" (its rotary takes \"default\" only)", t);
      return unsupported (error, cfg, what);
    }
  if (strcmp (t, "default") == 0)
    s->type = HN_ROPE_SCALING_NONE;
  else if (strcmp (t, "mrope") == 0 && mrope_text (hp->arch->model_type) &&
           strcmp (hp->arch->model_type, "hunyuan_vl_text") != 0 && !default_rope_only (hp->arch->model_type))
    s->type = HN_ROPE_SCALING_NONE; /* their config classes rename the legacy "mrope" type "default" */
  else if (strcmp (t, "linear") == 0)
    s->type = HN_ROPE_SCALING_LINEAR;
  else if (strcmp (t, "dynamic") == 0)
    s->type = HN_ROPE_SCALING_DYNAMIC;
  else if (strcmp (t, "llama3") == 0)
    s->type = HN_ROPE_SCALING_LLAMA3;
  else if (strcmp (t, "yarn") == 0)
    s->type = HN_ROPE_SCALING_YARN;
  else if (strcmp (t, "longrope") == 0)
    s->type = HN_ROPE_SCALING_LONGROPE;
  else
    {
      g_autofree char *what = g_strdup_printf ("rope type \"%s\"", t);
      return unsupported (error, cfg, what);
    }
  if (s->type == HN_ROPE_SCALING_DYNAMIC)
    /* dynamic NTK changes the frequencies with the sequence length while the
     * cache holds keys rotated with older ones; not built yet */
    return unsupported (error, cfg, "rope type \"dynamic\"");
  s->factor = r->factor > 0 ? r->factor : 1.0;
  s->original_max_position_embeddings = r->original_max_position_embeddings > 0 ? r->original_max_position_embeddings : 0;
  s->low_freq_factor = isnan (r->low_freq_factor) ? 1.0 : r->low_freq_factor;
  s->high_freq_factor = isnan (r->high_freq_factor) ? 4.0 : r->high_freq_factor;
  s->beta_fast = isnan (r->beta_fast) ? 0.0 : r->beta_fast;
  s->beta_slow = isnan (r->beta_slow) ? 0.0 : r->beta_slow;
  s->attention_factor = isnan (r->attention_factor) ? 0.0 : r->attention_factor;
  s->mscale = isnan (r->mscale) ? 0.0 : r->mscale;
  s->mscale_all_dim = isnan (r->mscale_all_dim) ? 0.0 : r->mscale_all_dim;
  s->yarn_no_truncate = r->truncate == 0; /* gpt_oss: "truncate": false keeps the fractional correction range */
  if (s->type == HN_ROPE_SCALING_LONGROPE && s == &hp->rope_scaling)
    {
      hp->rope_short_factor = g_memdup2 (r->short_factor, sizeof (double) * r->n_short_factor);
      hp->rope_long_factor = g_memdup2 (r->long_factor, sizeof (double) * r->n_long_factor);
      s->short_factor = hp->rope_short_factor;
      s->long_factor = hp->rope_long_factor;
      s->n_factors = MIN (r->n_short_factor, r->n_long_factor);
    }
  return TRUE;
}

static gboolean
activation (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  const char *name = NULL;
  if ((hp->arch->quirks & HN_QUIRK_NORM_PLUS_ONE) || g_str_has_prefix (hp->arch->model_type, "gemma4"))
    /* gemma: hidden_activation wins over hidden_act */
    name = hn_model_config_get_string (cfg, "hidden_activation");
  if (hp->arch->names == HN_NAMES_NEMOTRON_H) /* its MLPs' activation; mamba_hidden_act is the mixers' */
    name = hn_model_config_get_string (cfg, "mlp_hidden_act");
  if (!name)
    name = cfg->hidden_act;
  if (!name || strcmp (hp->arch->model_type, "lfm2") == 0) /* Lfm2MLP: silu(w1(x)) * w3(x), whatever hidden_act says */
    name = hp->arch->default_act;
  if (strcmp (hp->arch->model_type, "lfm2_moe") == 0 && strcmp (name, "silu") != 0)
    return unsupported (error, cfg, "hidden_act other than silu (its dense layers' Lfm2MoeMLP is silu, the experts "
                                    "hidden_act)");
  if (strcmp (name, "xielu") == 0 && hp->arch->names == HN_NAMES_APERTUS && !hp->gated)
    {
      /* XIELUActivation with the layer's learned alpha_p / alpha_n (transformer-graph.c: xielu) */
      hp->xielu = TRUE;
      hp->act = HN_ACT_IDENTITY;
      return TRUE;
    }
  if (hp->arch->names == HN_NAMES_OPENAI_GPT)
    {
      /* OpenAIGPTConfig.afn; its ACT_FNS maps "gelu" to gelu_new */
      const char *afn = hn_model_config_get_string (cfg, "afn");
      name = !afn || strcmp (afn, "gelu") == 0 ? "gelu_new" : afn;
    }
  if (strcmp (hp->arch->model_type, "bloom") == 0 && strcmp (name, "gelu") == 0)
    name = "gelu_new"; /* bloom_gelu_forward is the tanh approximation */
  if (!hn_activation_from_string (name, &hp->act))
    {
      g_autofree char *what = g_strdup_printf ("activation \"%s\"", name);
      return unsupported (error, cfg, what);
    }
  return TRUE;
}

static gboolean
get_int (const HnModelConfig *cfg, const char *key, gint64 dflt, gint64 *out, GError **error)
{
  GError *e = NULL;
  *out = dflt;
  if (!hn_model_config_get_int (cfg, key, out, &e) && e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  return TRUE;
}

static gboolean
get_double (const HnModelConfig *cfg, const char *key, double dflt, double *out, GError **error)
{
  GError *e = NULL;
  *out = dflt;
  if (!hn_model_config_get_double (cfg, key, out, &e) && e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  return TRUE;
}

/* DbrxFFN divides the top-k softmax weights by their moe_normalize_expert_weights-norm (default 1,
 * null = none). Only p = 1 (a sum, what the released models use) is built. */
static gboolean
dbrx_norm_topk (const HnModelConfig *cfg, gboolean *norm, GError **error)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *n = raw ? json_object_get_member (raw, "moe_normalize_expert_weights") : NULL;
  *norm = !n || !JSON_NODE_HOLDS_NULL (n);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  double p;
  if (!get_double (cfg, "moe_normalize_expert_weights", 1.0, &p, error))
    return FALSE;
  if (p != 1.0)
    return unsupported (error, cfg, "ffn_config.moe_normalize_expert_weights other than 1 (a p-norm of the top-k weights)");
  return TRUE;
}

/* The sliding layers' own partial rotary (laguna, step3p5: rope_parameters.sliding_attention's
 * partial_rotary_factor, 1 where it is left out; their rotary classes read each type's alone). */
static gboolean
sliding_rot_dims (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  if (!hp->local_rope)
    return TRUE;
  JsonObject *rp = raw && json_object_has_member (raw, "rope_parameters") &&
                       JSON_NODE_HOLDS_OBJECT (json_object_get_member (raw, "rope_parameters"))
                     ? json_object_get_object_member (raw, "rope_parameters")
                     : NULL;
  JsonObject *sl = rp && json_object_has_member (rp, "sliding_attention") &&
                       JSON_NODE_HOLDS_OBJECT (json_object_get_member (rp, "sliding_attention"))
                     ? json_object_get_object_member (rp, "sliding_attention")
                     : NULL;
  double f = sl && json_object_has_member (sl, "partial_rotary_factor")
               ? json_object_get_double_member (sl, "partial_rotary_factor")
               : 1.0;
  int rd = (int) lround (hp->head_dim * f);
  if (!(f > 0 && f <= 1) || rd <= 0 || rd % 2)
    return unsupported (error, cfg, "a sliding partial_rotary_factor that gives odd or no rotary dims");
  hp->local_rot_dims = rd;
  return TRUE;
}

/* Laguna: query heads per layer, attention out *= softplus(g_proj) per element, the sliding layers'
 * own partial rotary (1 where their rope_parameters leave it out). */
static gboolean
laguna_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  const char *gating = hn_model_config_get_string (cfg, "gating");
  if (!gating || strcmp (gating, "per-element") != 0)
    return unsupported (error, cfg, "gating other than per-element (a per-head softplus gate)");
  hp->attn_gate_act = HN_ACT_SOFTPLUS;
  JsonNode *hn = raw ? json_object_get_member (raw, "num_attention_heads_per_layer") : NULL;
  if (hn && JSON_NODE_HOLDS_ARRAY (hn))
    {
      JsonArray *arr = json_node_get_array (hn);
      if (json_array_get_length (arr) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: num_attention_heads_per_layer has %u entries for %d layers",
                       cfg->path, json_array_get_length (arr), hp->n_layer);
          return FALSE;
        }
      hp->layer_n_head = g_new (int, hp->n_layer);
      hp->n_head = 0;
      for (int i = 0; i < hp->n_layer; i++)
        {
          gint64 h = json_array_get_int_element (arr, (guint) i);
          if (h <= 0 || h > 4096 || h % hp->n_kv_head != 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                           "%s: num_attention_heads_per_layer[%d] = %" G_GINT64_FORMAT
                           " is not a positive multiple of num_key_value_heads %d",
                           cfg->path, i, h, hp->n_kv_head);
              return FALSE;
            }
          hp->layer_n_head[i] = (int) h;
          hp->n_head = MAX (hp->n_head, (int) h);
        }
    }
  return sliding_rot_dims (hp, cfg, raw, error);
}

/* A per-layer list of numbers or nulls (step3p5's swiglu_limits): NULL when config.json lacks it,
 * n_layer floats with null and 0 as 0 (no clamp) otherwise. */
static gboolean
layer_limits (const HnModelConfig *cfg, JsonObject *raw, const char *key, int n_layer, float **out, GError **error)
{
  *out = NULL;
  JsonNode *n = raw ? json_object_get_member (raw, key) : NULL;
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return TRUE;
  JsonArray *arr = JSON_NODE_HOLDS_ARRAY (n) ? json_node_get_array (n) : NULL;
  if (!arr || json_array_get_length (arr) != (guint) n_layer)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must list one limit (a number or null) for each of %d layers",
                   cfg->path, key, n_layer);
      return FALSE;
    }
  g_autofree float *v = g_new0 (float, n_layer);
  for (int i = 0; i < n_layer; i++)
    {
      JsonNode *e = json_array_get_element (arr, (guint) i);
      if (JSON_NODE_HOLDS_NULL (e))
        continue;
      GType t = JSON_NODE_HOLDS_VALUE (e) ? json_node_get_value_type (e) : G_TYPE_INVALID;
      double d = t == G_TYPE_INT64 ? (double) json_node_get_int (e) : t == G_TYPE_DOUBLE ? json_node_get_double (e) : -1;
      if (!(d >= 0) || !isfinite (d))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s[%d] is not a non-negative number or null", cfg->path,
                       key, i);
          return FALSE;
        }
      v[i] = (float) d;
    }
  *out = g_steal_pointer (&v);
  return TRUE;
}

/* Muse Glimmer's text model (MuseGlimmerTextModel in MuseGlimmerForConditionalGeneration): gemma's
 * sandwich of (1 + w) norms whose post-sublayer pair takes post_norm_eps, a weightless RMSNorm of the
 * embeddings, weightless per-head q/k norms (every layer, NoPE ones too) with q * qk_scale_factor on
 * top of 1/sqrt(head_dim), attention out *= sigmoid(gate_proj), a plain-weight final norm, and
 * logits * output_multiplier before the tanh softcap. layer_rope_theta 0 is NoPE (the resolve above;
 * the model reads only whether an entry is 0, rotating every other layer by rope_theta); left out,
 * MuseGlimmerTextConfig makes every fourth layer from the last NoPE and full attention, the others
 * sliding. */
static gboolean
muse_glimmer_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  double pe, qs, om, cap;
  if (!get_double (cfg, "post_norm_eps", 1e-8, &pe, error) || !get_double (cfg, "qk_scale_factor", 3.87, &qs, error) ||
      !get_double (cfg, "output_multiplier", 0.19611613513818404, &om, error) ||
      !get_double (cfg, "final_logit_softcapping", 20.0, &cap, error))
    return FALSE;
  if (!(pe > 0) || !(qs > 0) || !isfinite (om) || !(cap >= 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: post_norm_eps and qk_scale_factor must be positive, output_multiplier finite and "
                   "final_logit_softcapping not negative", cfg->path);
      return FALSE;
    }
  if (isnan (cfg->norm_eps))
    hp->norm_eps = 1e-5f; /* MuseGlimmerTextConfig.rms_norm_eps */
  hp->post_norm_eps = (float) pe;
  hp->attn_scale = (float) (qs / sqrt ((double) hp->head_dim));
  hp->logits_scale = (float) om;
  hp->final_softcap = (float) cap;
  hp->attn_gate_act = HN_ACT_SIGMOID;
  hp->final_norm_plain = TRUE;
  gboolean window_default = !(raw && json_object_has_member (raw, "sliding_window")) && hp->sliding_window == 0;
  if (window_default)
    hp->sliding_window = 2048; /* the config class's default */
  for (int i = 0; i < hp->n_layer; i++)
    {
      gboolean every4 = (hp->n_layer - 1 - i) % 4 == 0;
      if (!cfg->layer_types)
        hp->layer_sliding[i] = hp->sliding_window > 0 && !every4;
      else if (window_default) /* the resolve above read layer_types only with a window */
        {
          const char *t = i < (int) g_strv_length (cfg->layer_types) ? cfg->layer_types[i] : NULL;
          if (!t || (strcmp (t, "sliding_attention") != 0 && strcmp (t, "full_attention") != 0))
            return unsupported (error, cfg, "layer_types other than one sliding_attention or full_attention a layer");
          hp->layer_sliding[i] = strcmp (t, "sliding_attention") == 0;
        }
      if (hp->rope && !(raw && json_object_has_member (raw, "layer_rope_theta")))
        hp->layer_rope[i] = !every4;
    }
  return TRUE;
}

/* Step 3.5's text model (Step3p7TextModel, step3p5): laguna's layout with (1 + w) norms throughout,
 * query heads by layer (per_layer_config, which Step3p7TextConfig fills from num_sliding_attention_heads
 * for the sliding layers), attention out *= sigmoid(g_proj), one value per head, and the SwiGLU clamps
 * of swiglu_limits (routed experts) and swiglu_limits_shared (the shared expert and the dense MLP). */
static gboolean
step3p5_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  /* Step3p7Attention: gating true or "per-head" gives g_proj one row per head; any other value a row per
   * element, which its gate_states.unsqueeze(-1) cannot broadcast over the heads */
  JsonNode *gn = raw ? json_object_get_member (raw, "gating") : NULL;
  gboolean per_head = !gn || (JSON_NODE_HOLDS_VALUE (gn) && json_node_get_value_type (gn) == G_TYPE_BOOLEAN &&
                              json_node_get_boolean (gn)) ||
                      g_strcmp0 (hn_model_config_get_string (cfg, "gating"), "per-head") == 0;
  if (!per_head)
    return unsupported (error, cfg, "gating other than true or \"per-head\" (a per-element gate, which "
                                    "transformers' Step3p7Attention cannot apply)");
  gboolean bidir;
  if (!raw_bool (cfg, "use_bidirectional_attention", FALSE, &bidir, error))
    return FALSE;
  if (bidir)
    return unsupported (error, cfg, "use_bidirectional_attention");
  hp->attn_gate_act = HN_ACT_SIGMOID;
  hp->attn_gate_per_head = TRUE;

  /* query heads: per_layer_config {layer: {"num_attention_heads": h}} (as saved), else
   * num_sliding_attention_heads on the sliding layers */
  gint64 sliding_heads;
  if (!get_int (cfg, "num_sliding_attention_heads", hp->n_head, &sliding_heads, error))
    return FALSE;
  JsonNode *pn = raw ? json_object_get_member (raw, "per_layer_config") : NULL;
  JsonObject *plc = pn && JSON_NODE_HOLDS_OBJECT (pn) ? json_node_get_object (pn) : NULL;
  if (pn && !JSON_NODE_HOLDS_NULL (pn) && !plc)
    return unsupported (error, cfg, "a per_layer_config that is not an object keyed by layer");
  int base = hp->n_head;
  hp->layer_n_head = g_new (int, hp->n_layer);
  for (int i = 0; i < hp->n_layer; i++)
    {
      gint64 h = hp->layer_sliding[i] ? sliding_heads : base;
      if (plc)
        {
          g_autofree char *key = g_strdup_printf ("%d", i);
          JsonNode *ln = json_object_get_member (plc, key);
          JsonObject *lo = ln && JSON_NODE_HOLDS_OBJECT (ln) ? json_node_get_object (ln) : NULL;
          h = base;
          if (ln && !lo)
            return unsupported (error, cfg, "a per_layer_config entry that is not an object");
          g_autoptr (GList) keys = lo ? json_object_get_members (lo) : NULL;
          for (GList *l = keys; l; l = l->next)
            if (strcmp (l->data, "num_attention_heads") != 0)
              {
                g_autofree char *what = g_strdup_printf ("per_layer_config overriding %s", (const char *) l->data);
                return unsupported (error, cfg, what);
              }
          if (lo && json_object_has_member (lo, "num_attention_heads"))
            h = json_object_get_int_member (lo, "num_attention_heads");
        }
      if (h <= 0 || h > 4096 || h % hp->n_kv_head != 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "%s: layer %d has %" G_GINT64_FORMAT " query heads, not a positive multiple of "
                       "num_key_value_heads %d", cfg->path, i, h, hp->n_kv_head);
          return FALSE;
        }
      hp->layer_n_head[i] = (int) h;
      hp->n_head = MAX (hp->n_head, (int) h);
    }
  if (!layer_limits (cfg, raw, "swiglu_limits", hp->n_layer, &hp->layer_expert_glu_limit, error) ||
      !layer_limits (cfg, raw, "swiglu_limits_shared", hp->n_layer, &hp->layer_glu_limit, error))
    return FALSE;
  return sliding_rot_dims (hp, cfg, raw, error);
}

gboolean
hn_transformer_moe_v3_router (const char *model_type)
{
  static const char *const v3[] = { "deepseek_v3", "glm4_moe",   "dots1", "solar_open",
                                    "minimax_m2",  "exaone_moe", "hy_v3", "axk1",
                                    "afmoe",       "laguna",     "mimo_v2_flash", "glm4_moe_lite",
                                    "glm4v_moe_text", "lfm2_moe", "step3p5", NULL };
  return g_strv_contains (v3, model_type);
}

/* Step3p7SparseMoeBlock: DeepseekV3's sigmoid router (correction bias for the choice, renormalised
 * top-k, moe_router_scaling_factor) plus one ungated shared expert of share_expert_dim. Without
 * mlp_layer_types the sparse layers are the hub configs' moe_layers_enum (indices, maybe past the last
 * layer for the MTP layers), else layers 3 on, as Step3p7TextConfig derives them. */
static gboolean
step3p5_moe (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  gint64 sh;
  if (!get_int (cfg, "share_expert_dim", 1280, &sh, error))
    return FALSE;
  if (sh <= 0 || sh > G_MAXINT32)
    return unsupported (error, cfg, "share_expert_dim outside 1..2^31");
  hp->shared_ffn = (int) sh;
  hp->moe_norm_topk = TRUE;
  /* Step3p7Experts reads num_local_experts, which attribute_map sends to n_routed_experts (moe_num_experts
   * in hub configs); a num_local_experts field beside it is not what runs */
  gint64 ne;
  if (!get_int (cfg, "moe_num_experts", hp->n_experts, &ne, error) || !get_int (cfg, "n_routed_experts", ne, &ne, error))
    return FALSE;
  if (ne < hp->n_experts_used || ne > (1 << 16))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: n_routed_experts %" G_GINT64_FORMAT
                   " is below num_experts_per_tok or above 65536", cfg->path, ne);
      return FALSE;
    }
  hp->n_experts = (int) ne;
  hp->moe_first_dense = MIN (3, hp->n_layer);
  JsonNode *en = raw ? json_object_get_member (raw, "moe_layers_enum") : NULL;
  if (!en || JSON_NODE_HOLDS_NULL (en) || (raw && json_object_has_member (raw, "mlp_layer_types")))
    return TRUE;
  g_autofree guint8 *sparse = g_new0 (guint8, hp->n_layer);
  g_auto (GStrv) items = NULL;
  if (JSON_NODE_HOLDS_VALUE (en) && json_node_get_value_type (en) == G_TYPE_STRING)
    items = g_strsplit (json_node_get_string (en), ",", -1);
  else if (JSON_NODE_HOLDS_ARRAY (en))
    {
      JsonArray *a = json_node_get_array (en);
      items = g_new0 (char *, json_array_get_length (a) + 1);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          items[i] = JSON_NODE_HOLDS_VALUE (e) && json_node_get_value_type (e) == G_TYPE_INT64
                       ? g_strdup_printf ("%" G_GINT64_FORMAT, json_node_get_int (e))
                       : g_strdup (JSON_NODE_HOLDS_VALUE (e) && json_node_get_value_type (e) == G_TYPE_STRING
                                     ? json_node_get_string (e)
                                     : "?");
        }
    }
  for (int i = 0; items && items[i]; i++)
    {
      g_strstrip (items[i]);
      if (!*items[i])
        continue;
      char *end;
      gint64 v = g_ascii_strtoll (items[i], &end, 10);
      if (*end || v < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: moe_layers_enum holds \"%s\", not a layer index",
                       cfg->path, items[i]);
          return FALSE;
        }
      if (v < hp->n_layer)
        sparse[v] = 1;
    }
  if (!items)
    return unsupported (error, cfg, "a moe_layers_enum that is neither a string nor a list");
  int k = 0;
  while (k < hp->n_layer && !sparse[k])
    k++;
  for (int i = k; i < hp->n_layer; i++)
    if (!sparse[i])
      return unsupported (error, cfg, "moe_layers_enum other than dense layers followed by sparse ones");
  hp->moe_first_dense = k;
  return TRUE;
}

/* The routed MLP of each MoE family as its transformers modeling file builds it. */
static gboolean
moe_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  const char *mt = hp->arch->model_type;
  gboolean nh = strcmp (mt, "nemotron_h") == 0; /* NemotronHMoE: DeepseekV3MoE with MLP experts */
  gboolean v3_router = hn_transformer_moe_v3_router (mt) || nh;
  gboolean ocr2 = strcmp (mt, "deepseek_ocr2_text") == 0;
  gboolean deepseek = g_str_has_prefix (mt, "deepseek_v") || ocr2 || v3_router;
  gboolean hunyuan = strcmp (mt, "hunyuan_v1_moe") == 0;
  JsonObject *raw = hn_model_config_get_raw (cfg);
  if (hunyuan && raw)
    for (int j = 0; j < 2; j++)
      {
        JsonNode *n = json_object_get_member (raw, j ? "moe_topk" : "num_experts");
        if (n && JSON_NODE_HOLDS_ARRAY (n))
          return unsupported (error, cfg, "per-layer num_experts / moe_topk lists");
      }
  if (strcmp (mt, "granitemoehybrid") == 0 && cfg->num_experts <= 0)
    return unsupported (error, cfg, "num_local_experts 0 (the shared MLP alone)");
  gboolean aria = strcmp (mt, "aria_text") == 0;
  gint64 topk = cfg->num_experts_per_tok;
  if (aria && !get_int (cfg, "moe_topk", 2, &topk, error)) /* AriaTextConfig's name for it */
    return FALSE;
  if (cfg->num_experts <= 0 || topk <= 0 || topk > cfg->num_experts || topk > 32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: num_experts (%" G_GINT64_FORMAT ") and num_experts_per_tok (%" G_GINT64_FORMAT
                   ") must be positive with top-k <= experts and <= 32",
                   cfg->path, cfg->num_experts, topk);
      return FALSE;
    }
  hp->n_experts = (int) cfg->num_experts;
  hp->n_experts_used = (int) topk;
  hp->moe_ffn = cfg->moe_intermediate_size > 0 ? (int) cfg->moe_intermediate_size : ocr2 ? 1407 : hp->ffn;
  hp->shared_ffn = cfg->shared_expert_intermediate_size > 0 ? (int) cfg->shared_expert_intermediate_size : 0;
  hp->moe_scale = 1.0f;
  hp->moe_route = HN_MOE_ROUTE_SOFTMAX_TOPK;
  /* mixtral, phimoe, minimax_m2, hy_v3, afmoe and laguna always renormalise; qwen/olmoe/deepseek_v3 say
   * so in norm_topk_prob */
  gboolean norm_topk = strcmp (mt, "mixtral") == 0 || strcmp (mt, "minimax_m2") == 0 || strcmp (mt, "hy_v3") == 0 ||
                       strcmp (mt, "afmoe") == 0 || strcmp (mt, "laguna") == 0 || strcmp (mt, "step3p5") == 0;
  if (strcmp (mt, "qwen3_vl_moe_text") == 0)
    norm_topk = TRUE; /* Qwen3VLMoeTextTopKRouter renormalises whatever norm_topk_prob says */
  else if (strcmp (mt, "qwen3_omni_moe_text") == 0)
    {
      /* Qwen3OmniMoeThinkerTextTopKRouter renormalises when norm_topk_prob (default true) */
      if (!raw_bool (cfg, "norm_topk_prob", TRUE, &norm_topk, error))
        return FALSE;
    }
  else if (strcmp (mt, "dbrx") == 0)
    {
      if (!dbrx_norm_topk (cfg, &norm_topk, error))
        return FALSE;
    }
  /* DeepseekOcr2TextTopkRouter, as DeepseekV2's, never renormalises (no norm_topk_prob) */
  else if (strcmp (mt, "deepseek_v2") != 0 && strcmp (mt, "deepseek_ocr2_text") != 0 &&
           !raw_bool (cfg, "norm_topk_prob", norm_topk, &norm_topk, error))
    return FALSE;
  if (strcmp (mt, "lfm2_moe") == 0 && !raw_bool (cfg, "norm_topk_prob", TRUE, &norm_topk, error))
    return FALSE; /* Lfm2MoeConfig's default */
  hp->moe_norm_topk = norm_topk;
  double jitter;
  if (!get_double (cfg, "router_jitter_noise", 0.0, &jitter, error) ||
      !raw_bool (cfg, "output_router_logits", FALSE, &hp->moe_aux_loss, error))
    return FALSE;
  hp->moe_train_jitter = strcmp (mt, "phimoe") == 0 ? 0.0f : (float) jitter; /* phimoe's is the sparsemixer eps */
  if (g_str_has_prefix (mt, "granitemoe") || strcmp (mt, "gpt_oss") == 0 || strcmp (mt, "jetmoe") == 0 || aria)
    hp->moe_route = HN_MOE_ROUTE_TOPK_SOFTMAX;
  if (strcmp (mt, "cohere2_moe") == 0)
    {
      /* Cohere2MoeSparseMoeBlock: softmax over the top-k logits; experts and shared experts are
       * intermediate_size wide, the dense prefix layers prefix_dense_intermediate_size */
      const char *sel = hn_model_config_get_string (cfg, "expert_selection_fn");
      const char *comb = hn_model_config_get_string (cfg, "shared_expert_combination_strategy");
      gint64 n_sh, dense_ffn;
      if (sel && strcmp (sel, "softmax") != 0)
        return unsupported (error, cfg, "expert_selection_fn other than softmax");
      if (comb && strcmp (comb, "sum") != 0 && strcmp (comb, "average") != 0)
        return unsupported (error, cfg, "shared_expert_combination_strategy other than sum and average");
      if (!get_int (cfg, "num_shared_experts", 0, &n_sh, error) ||
          !get_int (cfg, "prefix_dense_intermediate_size", hp->ffn, &dense_ffn, error))
        return FALSE;
      hp->moe_route = HN_MOE_ROUTE_TOPK_SOFTMAX;
      hp->moe_ffn = hp->ffn;
      hp->shared_ffn = n_sh > 0 ? (int) (n_sh * hp->ffn) : 0;
      hp->moe_shared_mean = hp->shared_ffn > 0 && comb && strcmp (comb, "average") == 0;
      if (dense_ffn <= 0 || dense_ffn > G_MAXINT32)
        return unsupported (error, cfg, "prefix_dense_intermediate_size outside 1..2^31");
      hp->ffn = (int) dense_ffn;
    }
  if (aria)
    {
      /* AriaSharedExpertsMLP: intermediate_size * moe_num_shared_experts, added unweighted */
      gint64 n_sh;
      if (!get_int (cfg, "moe_num_shared_experts", 2, &n_sh, error))
        return FALSE;
      hp->shared_ffn = n_sh > 0 ? (int) (n_sh * hp->ffn) : 0;
    }
  if (strcmp (mt, "granitemoeshared") == 0 || strcmp (mt, "granitemoe_swa") == 0 ||
      strcmp (mt, "granitemoehybrid") == 0)
    {
      /* GraniteMoeSharedMLP: input_linear [2 * shared_intermediate_size, C] (gate, up), added unweighted */
      gint64 sh;
      if (!get_int (cfg, "shared_intermediate_size", 0, &sh, error))
        return FALSE;
      hp->shared_ffn = sh > 0 ? (int) sh : 0;
    }
  if (strcmp (mt, "gpt_oss") == 0)
    hp->moe_swiglu_limit = 7.0f; /* GptOssExperts: limit 7, alpha 1.702 (= quick_gelu) */
  if (strcmp (mt, "phimoe") == 0)
    {
      double eps;
      if (!get_double (cfg, "router_jitter_noise", 0.01, &eps, error))
        return FALSE;
      if (hp->n_experts_used != 2)
        return unsupported (error, cfg, "a sparsemixer router with num_experts_per_tok other than 2");
      hp->moe_route = HN_MOE_ROUTE_SPARSEMIXER;
      hp->moe_jitter_eps = (float) eps;
    }
  if (deepseek)
    {
      gint64 n_shared, first_dense, n_group, topk_group;
      double scale;
      if (!get_int (cfg, "n_shared_experts", ocr2 ? 2 : 0, &n_shared, error) ||
          (n_shared <= 0 && !get_int (cfg, "num_shared_experts", 0, &n_shared, error)) || /* exaone_moe, hy_v3 */
          !get_int (cfg, "first_k_dense_replace", 0, &first_dense, error) ||
          !get_int (cfg, "n_group", 1, &n_group, error) || !get_int (cfg, "topk_group", 1, &topk_group, error) ||
          !get_double (cfg, "routed_scaling_factor", 1.0, &scale, error) ||
          (strcmp (mt, "hy_v3") == 0 && !get_double (cfg, "router_scaling_factor", 1.0, &scale, error)) ||
          (strcmp (mt, "afmoe") == 0 && (!get_double (cfg, "route_scale", 1.0, &scale, error) ||
                                         !get_int (cfg, "num_dense_layers", 1, &first_dense, error))) ||
          (strcmp (mt, "laguna") == 0 && !get_double (cfg, "moe_routed_scaling_factor", 1.0, &scale, error)) ||
          (strcmp (mt, "step3p5") == 0 && !get_double (cfg, "moe_router_scaling_factor", 1.0, &scale, error)) ||
          (strcmp (mt, "lfm2_moe") == 0 && !get_int (cfg, "num_dense_layers", 2, &first_dense, error)))
        return FALSE;
      hp->shared_ffn = n_shared > 0 ? (int) (n_shared * hp->moe_ffn) : 0;
      if (nh)
        {
          gint64 sh;
          JsonNode *lat = raw ? json_object_get_member (raw, "moe_latent_size") : NULL;
          if (lat && !JSON_NODE_HOLDS_NULL (lat))
            return unsupported (error, cfg, "moe_latent_size (the experts' latent projections)");
          if (!get_int (cfg, "moe_shared_expert_intermediate_size", 7688, &sh, error))
            return FALSE;
          hp->shared_ffn = n_shared > 0 ? (int) sh : 0; /* NemotronHMLP of moe_shared_expert_intermediate_size */
        }
      hp->moe_first_dense = (int) CLAMP (first_dense, 0, hp->n_layer);
      hp->moe_scale = (float) scale;
      gboolean grouped;
      if (v3_router)
        {
          hp->moe_route = HN_MOE_ROUTE_SIGMOID_TOPK;
          grouped = TRUE; /* DeepseekV3TopkRouter always limits the choice to topk_group groups */
        }
      else
        {
          const char *method = hn_model_config_get_string (cfg, "topk_method");
          if (method && strcmp (method, "greedy") != 0 && strcmp (method, "group_limited_greedy") != 0)
            {
              g_autofree char *what = g_strdup_printf ("topk_method \"%s\"", method);
              return unsupported (error, cfg, what);
            }
          grouped = method && strcmp (method, "group_limited_greedy") == 0;
          JsonNode *ng = raw ? json_object_get_member (raw, "n_group") : NULL;
          JsonNode *tg = raw ? json_object_get_member (raw, "topk_group") : NULL;
          if (ocr2 && grouped && (!ng || JSON_NODE_HOLDS_NULL (ng) || !tg || JSON_NODE_HOLDS_NULL (tg)))
            return unsupported (error, cfg, "topk_method group_limited_greedy without n_group and topk_group "
                                            "(DeepseekOcr2TextConfig leaves them null)");
        }
      if (grouped && n_group > 1)
        {
          if (n_group > 32 || hp->n_experts % n_group != 0 || topk_group < 1 || topk_group > n_group ||
              topk_group * (hp->n_experts / n_group) < hp->n_experts_used)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                           "%s: n_group %" G_GINT64_FORMAT " / topk_group %" G_GINT64_FORMAT
                           " do not split %d experts into at most 32 groups holding num_experts_per_tok",
                           cfg->path, n_group, topk_group, hp->n_experts);
              return FALSE;
            }
          hp->moe_n_group = (int) n_group;
          hp->moe_topk_group = (int) topk_group;
        }
    }
  if (strcmp (mt, "lfm2_moe") == 0)
    {
      /* Lfm2MoeSparseMoeBlock: sigmoid scores, the top k of score + expert_bias (use_expert_bias), the
       * chosen scores over their sum + 1e-6, times routed_scaling_factor; no expert groups, no shared
       * expert; layers below num_dense_layers keep Lfm2MoeMLP */
      gboolean eb;
      if (!raw_bool (cfg, "use_expert_bias", TRUE, &eb, error))
        return FALSE;
      hp->moe_no_route_bias = !eb;
      hp->moe_norm_add = 1e-6f;
      hp->moe_n_group = hp->moe_topk_group = 0;
      hp->shared_ffn = 0;
    }
  hp->moe_last_layer = hp->n_layer - 1;
  hp->moe_layer_interval = 1;
  if (strcmp (mt, "ernie4_5_moe") == 0)
    {
      /* Ernie4_5_MoeSparseMoeBlock: softmax probabilities, the k best of probability + moe_statics
       * bias, the chosen (unbiased) probabilities over their sum clamped to moe_norm_min, plus the
       * shared experts (moe_num_shared_experts · moe_intermediate_size) unweighted. Layers
       * start..end with (i + 1) % interval == 0 are MoE, the others keep the intermediate_size MLP
       * (the config class already turned an end of -1 into the last layer). */
      gint64 n_shared, start, end, interval;
      double norm_min;
      if (!get_int (cfg, "moe_num_shared_experts", 2, &n_shared, error) ||
          !get_int (cfg, "moe_layer_start_index", 1, &start, error) ||
          !get_int (cfg, "moe_layer_end_index", hp->n_layer - 1, &end, error) ||
          !get_int (cfg, "moe_layer_interval", 1, &interval, error) ||
          !get_double (cfg, "moe_norm_min", 1e-12, &norm_min, error))
        return FALSE;
      if (interval < 1 || n_shared < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "%s: moe_layer_interval must be positive and moe_num_shared_experts not negative", cfg->path);
          return FALSE;
        }
      hp->moe_norm_topk = TRUE;
      hp->moe_norm_min = (float) norm_min;
      hp->shared_ffn = (int) (n_shared * hp->moe_ffn);
      hp->moe_first_dense = (int) CLAMP (start, 0, hp->n_layer);
      hp->moe_last_layer = (int) CLAMP (end, -1, hp->n_layer - 1);
      hp->moe_layer_interval = (int) MIN (interval, hp->n_layer + 1);
    }
  if (strcmp (mt, "ernie4_5_vl_moe_text") == 0)
    {
      /* Ernie4_5_VLMoeMoeBlock on text alone: text_moe (ernie4_5_moe's router: softmax, the k best of
       * probability + moe_statics bias, the unbiased ones over their sum clamped to moe_norm_min) of
       * moe_intermediate_size[0], plus moe_num_shared_experts · moe_intermediate_size[0] shared
       * experts; mlp_layer_types (default: the first layer dense, then sparse) places them */
      JsonNode *mis = raw ? json_object_get_member (raw, "moe_intermediate_size") : NULL;
      gint64 text_ffn = 1536, n_shared;
      double norm_min;
      if (mis && !JSON_NODE_HOLDS_NULL (mis))
        {
          JsonArray *ma = JSON_NODE_HOLDS_ARRAY (mis) ? json_node_get_array (mis) : NULL;
          JsonNode *e0 = ma && json_array_get_length (ma) == 2 ? json_array_get_element (ma, 0) : NULL;
          if (!e0 || !JSON_NODE_HOLDS_VALUE (e0) || json_node_get_value_type (e0) != G_TYPE_INT64)
            return unsupported (error, cfg, "moe_intermediate_size other than a [text, vision] list of two sizes");
          text_ffn = json_node_get_int (e0);
        }
      if (!get_int (cfg, "moe_num_shared_experts", 2, &n_shared, error) ||
          !get_double (cfg, "moe_norm_min", 1e-12, &norm_min, error))
        return FALSE;
      if (text_ffn < 1 || text_ffn > (1 << 22) || n_shared < 0 || n_shared > 64)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "%s: moe_intermediate_size[0] must be positive and moe_num_shared_experts in 0..64", cfg->path);
          return FALSE;
        }
      hp->moe_ffn = (int) text_ffn;
      hp->moe_norm_topk = TRUE;
      hp->moe_norm_min = (float) norm_min;
      hp->shared_ffn = (int) (n_shared * text_ffn);
      hp->moe_first_dense = MIN (1, hp->n_layer);
    }
  if (hunyuan)
    {
      /* HunYuanMoEV1Moe: softmax, top-k, renormalised; its experts and the shared_mlp (always there,
       * unweighted) are MLPs of intermediate_size: moe_intermediate_size, num_shared_expert and
       * moe_drop_tokens are not read by the modeling file */
      hp->moe_norm_topk = TRUE;
      hp->moe_ffn = hp->ffn;
      hp->shared_ffn = hp->ffn;
    }
  /* mlp_layer_types (exaone_moe, hy_v3, mellum): dense layers, then sparse ones, is what is built;
   * hy_v3 without it keeps the first layer dense */
  JsonObject *mraw = hn_model_config_get_raw (cfg);
  JsonNode *mlt = mraw ? json_object_get_member (mraw, "mlp_layer_types") : NULL;
  if (ocr2 && (!mlt || !JSON_NODE_HOLDS_ARRAY (mlt)))
    return unsupported (error, cfg, "a config without mlp_layer_types (DeepseekOcr2TextConfig has no default)");
  if (strcmp (mt, "hy_v3") == 0 || strcmp (mt, "laguna") == 0 || strcmp (mt, "mimo_v2_flash") == 0)
    hp->moe_first_dense = MIN (1, hp->n_layer);
  if (strcmp (mt, "laguna") == 0)
    {
      /* LagunaSparseMoeBlock: an ungated shared expert of shared_expert_intermediate_size */
      double cap;
      gboolean on_input;
      if (!get_double (cfg, "moe_router_logit_softcapping", 0.0, &cap, error) ||
          !raw_bool (cfg, "moe_apply_router_weight_on_input", FALSE, &on_input, error))
        return FALSE;
      if (cap != 0.0 || on_input)
        return unsupported (error, cfg, "moe_router_logit_softcapping or moe_apply_router_weight_on_input");
      hp->shared_ffn = cfg->shared_expert_intermediate_size > 0 ? (int) cfg->shared_expert_intermediate_size : 0;
    }
  if (strcmp (mt, "step3p5") == 0 && !step3p5_moe (hp, cfg, mraw, error))
    return FALSE;
  if (mlt && JSON_NODE_HOLDS_ARRAY (mlt))
    {
      JsonArray *arr = json_node_get_array (mlt);
      if (json_array_get_length (arr) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: mlp_layer_types has %u entries for %d layers", cfg->path,
                       json_array_get_length (arr), hp->n_layer);
          return FALSE;
        }
      int k = 0;
      while (k < hp->n_layer && g_strcmp0 (json_array_get_string_element (arr, (guint) k), "dense") == 0)
        k++;
      for (int i = k; i < hp->n_layer; i++)
        if (g_strcmp0 (json_array_get_string_element (arr, (guint) i), "sparse") != 0)
          return unsupported (error, cfg, "mlp_layer_types other than dense layers followed by sparse ones");
      hp->moe_first_dense = k;
    }
  /* qwen2/3_moe can keep dense MLPs on some layers; only the all-sparse layout is run */
  gint64 step;
  if (!get_int (cfg, "decoder_sparse_step", 1, &step, error))
    return FALSE;
  JsonNode *mol = raw ? json_object_get_member (raw, "mlp_only_layers") : NULL;
  gboolean dense_layers = mol && JSON_NODE_HOLDS_ARRAY (mol) && json_array_get_length (json_node_get_array (mol)) > 0;
  if (step != 1 || dense_layers)
    return unsupported (error, cfg, "decoder_sparse_step other than 1 or mlp_only_layers (mixed dense/MoE layers)");
  return TRUE;
}

/* DeepSeek's multi-head latent attention: per-head keys [rope | nope] (the device order), values of
 * v_head_dim, one rotary key shared by all heads. */
static gboolean
mla_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  gint64 q_rank, kv_rank, nope, rope, v;
  if (!get_int (cfg, "q_lora_rank", 0, &q_rank, error) || !get_int (cfg, "kv_lora_rank", 0, &kv_rank, error) ||
      !get_int (cfg, "qk_nope_head_dim", 0, &nope, error) || !get_int (cfg, "qk_rope_head_dim", 0, &rope, error) ||
      !get_int (cfg, "v_head_dim", strcmp (hp->arch->model_type, "minicpm3") == 0 ? hp->hidden / hp->n_head : 0, &v,
                error)) /* MiniCPM3Config: hidden_size // num_attention_heads when unset */
    return FALSE;
  if (kv_rank <= 0 || nope <= 0 || rope <= 0 || rope % 2 || v <= 0 || nope + rope > 256 || v > 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim (even) and v_head_dim must be positive, "
                   "head dims at most 256",
                   cfg->path);
      return FALSE;
    }
  /* youtu (a dense MLP) and axk1 run DeepseekV3Attention */
  static const char *const v3_attn[] = { "deepseek_v3", "youtu", "axk1", NULL };
  const char *mt = hp->arch->model_type;
  gboolean v3 = g_strv_contains (v3_attn, mt);
  /* MiniCPM3Attention and Glm4MoeLiteAttention: DeepSeek's MLA with yarn_apply_mscale (the mscale
   * term for any scaled rope type) and latent norms of RMSNorm's default eps */
  gboolean minicpm3 = strcmp (mt, "minicpm3") == 0, glm_lite = strcmp (mt, "glm4_moe_lite") == 0;
  double scale = 1.0 / sqrt ((double) (nope + rope));
  if (hp->rope_scaling.type != HN_ROPE_SCALING_NONE)
    {
      /* DeepseekV3Attention: with a scaled rope the softmax scale is multiplied by
       * yarn_get_mscale(factor, mscale_all_dim)^2 (the rope's own attention factor is the
       * mscale / mscale_all_dim ratio, as hn_rope_compute_inv_freq computes it). transformers'
       * deepseek_v2 has no such term and no fixture shows which one a v2 checkpoint needs. */
      if (!minicpm3 && !glm_lite && (!v3 || hp->rope_scaling.type != HN_ROPE_SCALING_YARN))
        return unsupported (error, cfg, "rope scaling other than yarn on deepseek_v3 multi-head latent attention");
      double f = hp->rope_scaling.factor, mad = hp->rope_scaling.mscale_all_dim;
      if (mad > 0 && f > 1)
        {
          double m = 0.1 * mad * log (f) + 1.0;
          scale *= m * m;
        }
    }
  if (glm_lite && cfg->rope.partial_rotary_factor != 1.0)
    return unsupported (error, cfg, "partial_rotary_factor other than 1 on the rotary key of latent attention");
  hp->mla = TRUE;
  hp->q_lora_rank = (int) MAX (q_rank, 0);
  hp->kv_lora_rank = (int) kv_rank;
  hp->qk_nope_dim = (int) nope;
  hp->v_head_dim = (int) v;
  hp->head_dim = (int) (nope + rope);
  hp->rot_dims = (int) rope;
  hp->n_kv_head = hp->n_head; /* keys and values are expanded per head from the latent */
  hp->mla_norm_eps = minicpm3 || glm_lite ? 1e-6f : hp->norm_eps;
  /* deepseek_v2 rotates complex pairs; v3 and glm4_moe_lite do when rope_interleave (default);
   * minicpm3 rotates halves */
  gboolean interleave = !minicpm3;
  if ((v3 || glm_lite) && !raw_bool (cfg, "rope_interleave", TRUE, &interleave, error))
    return FALSE;
  hp->rope_style = interleave ? HN_ROPE_GPTJ : HN_ROPE_NEOX;
  hp->attn_scale = (float) scale;
  return TRUE;
}

/* A hybrid's layer list: layers_block_type / layer_types names (old and new spellings) or nemotron_h's
 * hybrid_override_pattern string (M = Mamba-2, * = attention, - = MLP, E = MoE). */
static guint
hybrid_layers (const HnModelConfig *cfg, JsonArray **list, const char **pat)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  static const char *const keys[] = { "layers_block_type", "layer_types" };
  *list = NULL;
  for (gsize k = 0; raw && !*list && k < G_N_ELEMENTS (keys); k++)
    if (json_object_has_member (raw, keys[k]) && JSON_NODE_HOLDS_ARRAY (json_object_get_member (raw, keys[k])))
      *list = json_object_get_array_member (raw, keys[k]);
  *pat = hn_model_config_get_string (cfg, "hybrid_override_pattern");
  return *list ? json_array_get_length (*list) : *pat ? (guint) strlen (*pat) : 0;
}

/* nemotron_h: one mixer per layer (its MLP layers are layers of their own); granitemoehybrid: a mixer
 * and the MLP in every layer. */
/* Whether nemotron_h's layer list holds a MoE layer. */
static gboolean
nemotron_h_has_moe (const HnModelConfig *cfg)
{
  JsonArray *list;
  const char *pat;
  guint n = hybrid_layers (cfg, &list, &pat);
  for (guint i = 0; i < n; i++)
    if (list ? g_strcmp0 (json_array_get_string_element (list, i), "moe") == 0 : pat[i] == 'E')
      return TRUE;
  return FALSE;
}

static gboolean
hybrid_pattern (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  gboolean nh = hp->arch->names == HN_NAMES_NEMOTRON_H;
  JsonArray *list;
  const char *pat;
  guint n = hybrid_layers (cfg, &list, &pat); /* nemotron_h: hp->n_layer is its length */
  if (n != (guint) hp->n_layer || (!nh && !list))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the layer pattern (layers_block_type, layer_types or "
                   "hybrid_override_pattern) has %u entries for %d layers", cfg->path, n, hp->n_layer);
      return FALSE;
    }
  for (int i = 0; i < hp->n_layer; i++)
    {
      const char *t = list ? json_array_get_string_element (list, (guint) i) : NULL;
      char c = list ? 0 : pat[i];
      hp->layer_ffn[i] = !nh;
      if (c == 'M' || (t && (g_str_equal (t, "mamba") || g_str_equal (t, "linear_attention"))))
        hp->layer_mixer[i] = HN_MIXER_MAMBA2;
      else if (c == '*' || (t && (g_str_equal (t, "attention") || g_str_equal (t, "full_attention"))))
        hp->layer_mixer[i] = HN_MIXER_ATTENTION;
      else if (nh && (c == '-' || (t && g_str_equal (t, "mlp"))))
        hp->layer_mixer[i] = HN_MIXER_NONE, hp->layer_ffn[i] = hp->n_experts > 0 ? 2 : 1; /* its dense MLP */
      else if (nh && (c == 'E' || (t && g_str_equal (t, "moe"))))
        hp->layer_mixer[i] = HN_MIXER_NONE, hp->layer_ffn[i] = 1; /* its routed experts */
      else
        {
          g_autofree char *what = g_strdup_printf ("layer type \"%s\"", t ? t : (char[]) { c, 0 });
          return unsupported (error, cfg, what);
        }
    }
  return TRUE;
}

/* A multiplier of config.json (default 1). */
static gboolean
mup_double (const HnModelConfig *cfg, const char *key, float *out, GError **error)
{
  double v;
  if (!get_double (cfg, key, 1.0, &v, error))
    return FALSE;
  *out = (float) v;
  return TRUE;
}

/* falcon_h1: its muP multipliers (FalconH1Model, FalconH1DecoderLayer, FalconH1Mixer's mup_vector,
 * FalconH1Attention's key_multiplier, FalconH1MLP's mlp_multipliers) and its gated norm's options. */
static gboolean
falcon_h1_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  float emb, lm;
  if (!mup_double (cfg, "embedding_multiplier", &emb, error) || !mup_double (cfg, "lm_head_multiplier", &lm, error) ||
      !mup_double (cfg, "ssm_in_multiplier", &hp->mup.ssm_in, error) ||
      !mup_double (cfg, "ssm_out_multiplier", &hp->mup.ssm_out, error) ||
      !mup_double (cfg, "attention_in_multiplier", &hp->mup.attn_in, error) ||
      !mup_double (cfg, "attention_out_multiplier", &hp->mup.attn_out, error) ||
      !mup_double (cfg, "key_multiplier", &hp->mup.key, error))
    return FALSE;
  hp->embed_scale = emb;
  hp->logits_scale = lm;
  JsonObject *raw = hn_model_config_get_raw (cfg);
  float mlp[2];
  struct { const char *key; guint n; float *out; } lists[2] = { { "ssm_multipliers", 5, hp->mup.ssm },
                                                                { "mlp_multipliers", 2, mlp } };
  for (int k = 0; k < 2; k++)
    {
      for (guint j = 0; j < lists[k].n; j++)
        lists[k].out[j] = 1.0f;
      JsonNode *n = raw ? json_object_get_member (raw, lists[k].key) : NULL;
      if (!n || JSON_NODE_HOLDS_NULL (n))
        continue;
      if (!JSON_NODE_HOLDS_ARRAY (n) || json_array_get_length (json_node_get_array (n)) != lists[k].n)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must be a list of %u numbers", cfg->path, lists[k].key,
                       lists[k].n);
          return FALSE;
        }
      for (guint j = 0; j < lists[k].n; j++)
        lists[k].out[j] = (float) json_array_get_double_element (json_node_get_array (n), j);
    }
  hp->mup.gate = mlp[0];
  hp->mup.down = mlp[1];
  gboolean rms, before;
  if (!raw_bool (cfg, "mamba_rms_norm", FALSE, &rms, error) ||
      !raw_bool (cfg, "mamba_norm_before_gate", TRUE, &before, error))
    return FALSE;
  if (!rms || before)
    return unsupported (error, cfg, !rms ? "mamba_rms_norm false (the mixer without its gated norm)"
                                         : "mamba_norm_before_gate true (the gate after the norm)");
  return TRUE;
}

/* jamba: attention where i % attn_layer_period == attn_layer_offset (Mamba elsewhere), the routed MoE
 * where i % expert_layer_period == expert_layer_offset (with num_experts > 1; the dense MLP elsewhere),
 * and its Mamba (v1) mixers (JambaMambaMixer: dt, B and C RMS-normed with weights). */
static gboolean
jamba_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  gint64 ap, ao, ep, eo, state, conv, expand, rank;
  if (!get_int (cfg, "attn_layer_period", 8, &ap, error) || !get_int (cfg, "attn_layer_offset", 4, &ao, error) ||
      !get_int (cfg, "expert_layer_period", 2, &ep, error) || !get_int (cfg, "expert_layer_offset", 1, &eo, error) ||
      !get_int (cfg, "mamba_d_state", 16, &state, error) || !get_int (cfg, "mamba_d_conv", 4, &conv, error) ||
      !get_int (cfg, "mamba_expand", 2, &expand, error))
    return FALSE;
  const char *rs = hn_model_config_get_string (cfg, "mamba_dt_rank");
  if (rs && g_str_equal (rs, "auto"))
    rank = (hp->hidden + 15) / 16;
  else if (!get_int (cfg, "mamba_dt_rank", (hp->hidden + 15) / 16, &rank, error))
    return FALSE;
  if (ap < 1 || ep < 1 || state < 1 || state > HN_SSM_MAX_STATE || conv < 1 || conv > HN_CONV1D_MAX_KERNEL || rank < 1 ||
      expand < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: attn_layer_period %" G_GINT64_FORMAT ", expert_layer_period %"
                   G_GINT64_FORMAT ", mamba_d_state %" G_GINT64_FORMAT " (1..%d), mamba_d_conv %" G_GINT64_FORMAT
                   " (1..%d) or mamba_dt_rank %" G_GINT64_FORMAT " is outside what the graph takes",
                   cfg->path, ap, ep, state, HN_SSM_MAX_STATE, conv, HN_CONV1D_MAX_KERNEL, rank);
      return FALSE;
    }
  gboolean moe = hp->n_experts > 1;
  for (int i = 0; i < hp->n_layer; i++)
    {
      hp->layer_mixer[i] = i % ap == ao ? HN_MIXER_ATTENTION : HN_MIXER_MAMBA1;
      hp->layer_ffn[i] = moe && i % ep == eo ? 1 : 2;
    }
  if (!moe && hp->n_experts == 1)
    return unsupported (error, cfg, "num_experts 1 (its one expert under feed_forward.experts.0)");
  hp->ssm1 = (HnMamba1Dims) { (int) (expand * hp->hidden), (int) state, (int) rank, TRUE, hp->norm_eps };
  hp->ssm_conv_kernel = (int) conv;
  return TRUE;
}

/* lfm2 (Lfm2Config / Lfm2Model): layer_types "full_attention" / "conv" (or full_attn_idxs, every layer
 * attention when neither is set), short convolutions of conv_L_cache with conv_bias, the MLP sized by
 * block_auto_adjust_ff_dim, and the config class's readings of the original keys (block_ff_dim,
 * tie_embedding, theta). lfm2_moe (Lfm2MoeConfig): layer_types required, the dense layers'
 * intermediate_size as it stands, tie_embedding; its experts: moe_from_config. */
static gboolean
lfm2_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  gboolean moe = strcmp (hp->arch->model_type, "lfm2_moe") == 0;
  JsonNode *fa = raw ? json_object_get_member (raw, "full_attn_idxs") : NULL;
  if (cfg->layer_types)
    {
      if (g_strv_length (cfg->layer_types) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: layer_types has %u entries for %d layers", cfg->path,
                       g_strv_length (cfg->layer_types), hp->n_layer);
          return FALSE;
        }
      for (int i = 0; i < hp->n_layer; i++)
        {
          const char *t = cfg->layer_types[i];
          if (g_str_equal (t, "full_attention"))
            hp->layer_mixer[i] = HN_MIXER_ATTENTION;
          else if (g_str_equal (t, "conv"))
            hp->layer_mixer[i] = HN_MIXER_SHORTCONV;
          else
            {
              g_autofree char *what = g_strdup_printf ("layer type \"%s\"", t);
              return unsupported (error, cfg, what);
            }
        }
    }
  else if (moe)
    return unsupported (error, cfg, "a config without layer_types (Lfm2MoeConfig reads no full_attn_idxs)");
  else if (fa && JSON_NODE_HOLDS_ARRAY (fa))
    {
      memset (hp->layer_mixer, HN_MIXER_SHORTCONV, (gsize) hp->n_layer);
      JsonArray *arr = json_node_get_array (fa);
      for (guint i = 0; i < json_array_get_length (arr); i++)
        {
          gint64 l = json_array_get_int_element (arr, i);
          if (l >= 0 && l < hp->n_layer) /* Lfm2Config: a layer is attention when its index is listed */
            hp->layer_mixer[l] = HN_MIXER_ATTENTION;
        }
    }
  else if (fa && !JSON_NODE_HOLDS_NULL (fa))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: full_attn_idxs must be a list of layers", cfg->path);
      return FALSE;
    }
  else
    memset (hp->layer_mixer, HN_MIXER_ATTENTION, (gsize) hp->n_layer);
  gint64 kernel, ff, multiple;
  gboolean bias, adjust;
  double mult, eps;
  JsonNode *mn = raw ? json_object_get_member (raw, "block_ffn_dim_multiplier") : NULL;
  gboolean has_mult = !mn || !JSON_NODE_HOLDS_NULL (mn); /* null: no multiplier and no rounding */
  if (!get_int (cfg, "conv_L_cache", 3, &kernel, error) || !raw_bool (cfg, "conv_bias", FALSE, &bias, error) ||
      !get_int (cfg, moe ? "intermediate_size" : "block_ff_dim", hp->ffn, &ff, error) ||
      !raw_bool (cfg, "block_auto_adjust_ff_dim", TRUE, &adjust, error) ||
      !get_double (cfg, "block_ffn_dim_multiplier", 1.0, &mult, error) ||
      !get_int (cfg, "block_multiple_of", 256, &multiple, error) || !get_double (cfg, "norm_eps", 1e-5, &eps, error))
    return FALSE;
  if (kernel < 1 || kernel > HN_CONV1D_MAX_KERNEL)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: conv_L_cache %" G_GINT64_FORMAT " is outside 1..%d",
                   cfg->path, kernel, HN_CONV1D_MAX_KERNEL);
      return FALSE;
    }
  if (!moe && adjust)
    {
      /* Lfm2MLP: int(2 * ff / 3), then int(multiplier * ff) rounded up to block_multiple_of */
      ff = (gint64) (2.0 * (double) ff / 3.0);
      if (has_mult)
        {
          if (multiple < 1)
            return unsupported (error, cfg, "block_multiple_of below 1");
          ff = (gint64) (mult * (double) ff);
          ff = multiple * ((ff + multiple - 1) / multiple);
        }
    }
  if (ff < 1 || ff > G_MAXINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the feed-forward width %" G_GINT64_FORMAT
                   " (intermediate_size, block_* sizing) is not positive", cfg->path, ff);
      return FALSE;
    }
  hp->ffn = (int) ff;
  hp->norm_eps = (float) eps; /* Lfm2RMSNorm's eps, q/k norms too */
  hp->sconv = (HnShortConvDims) { hp->hidden, (int) kernel, bias };
  hp->ssm_conv_kernel = (int) kernel;
  gboolean tie;
  if (!raw_bool (cfg, "tie_embedding", hp->tie_embeddings, &tie, error))
    return FALSE;
  hp->tie_embeddings = tie;
  /* the rotary base: rope_parameters / rope_theta, else (lfm2) the original key theta, else 1e6 (the
   * config reader's default is 10000) */
  JsonNode *rt = raw ? json_object_get_member (raw, "rope_theta") : NULL;
  JsonNode *rp = raw ? json_object_get_member (raw, "rope_parameters") : NULL;
  JsonObject *po = rp && JSON_NODE_HOLDS_OBJECT (rp) ? json_node_get_object (rp) : NULL;
  JsonNode *pf = po ? json_object_get_member (po, "full_attention") : NULL;
  if (pf && JSON_NODE_HOLDS_OBJECT (pf))
    po = json_node_get_object (pf);
  JsonNode *pt = po ? json_object_get_member (po, "rope_theta") : NULL;
  if ((!rt || JSON_NODE_HOLDS_NULL (rt)) && (!pt || JSON_NODE_HOLDS_NULL (pt)))
    {
      hp->rope_theta = 1000000.0;
      if (!moe && !get_double (cfg, "theta", 1000000.0, &hp->rope_theta, error))
        return FALSE;
    }
  memset (hp->layer_ffn, 1, (gsize) hp->n_layer);
  return TRUE;
}

/* qwen3_next / qwen3_5(_moe)_text (Qwen3NextConfig): layer_types "linear_attention" (gated DeltaNet of
 * linear_num_{key,value}_heads x linear_{key,value}_head_dim, conv linear_conv_kernel_dim) and
 * "full_attention" (gated attention: q_proj gives each head's query and output gate, sigmoid'ed). */
static gboolean
deltanet_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  if (!cfg->layer_types || g_strv_length (cfg->layer_types) != (guint) hp->n_layer)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: layer_types must list the %d layers", cfg->path,
                   hp->n_layer);
      return FALSE;
    }
  for (int i = 0; i < hp->n_layer; i++)
    {
      const char *t = cfg->layer_types[i];
      if (g_str_equal (t, "full_attention"))
        hp->layer_mixer[i] = HN_MIXER_ATTENTION;
      else if (g_str_equal (t, "linear_attention"))
        hp->layer_mixer[i] = HN_MIXER_DELTANET;
      else
        {
          g_autofree char *what = g_strdup_printf ("layer type \"%s\"", t);
          return unsupported (error, cfg, what);
        }
    }
  gint64 kernel, hk, hv, dk, dv;
  if (!get_int (cfg, "linear_conv_kernel_dim", 4, &kernel, error) ||
      !get_int (cfg, "linear_num_key_heads", 16, &hk, error) || !get_int (cfg, "linear_num_value_heads", 32, &hv, error) ||
      !get_int (cfg, "linear_key_head_dim", 128, &dk, error) || !get_int (cfg, "linear_value_head_dim", 128, &dv, error))
    return FALSE;
  if (kernel < 1 || kernel > HN_CONV1D_MAX_KERNEL)
    return unsupported (error, cfg, "a linear_conv_kernel_dim outside the conv kernel's 1..16");
  if (hk < 1 || hv < 1 || hv % hk || dk < 1 || dk > HN_DELTA_MAX_KEY_DIM || dv < 1 || hv * dv > G_MAXINT32)
    return unsupported (error, cfg, "linear attention heads (value heads a multiple of key heads, key heads of 1..256)");
  hp->dnet = (HnDeltaNetDims) { hp->hidden, (int) hk, (int) hv, (int) dk, (int) dv, (int) kernel, hp->norm_eps };
  hp->ssm_conv_kernel = (int) kernel;
  hp->attn_gate_act = HN_ACT_SIGMOID; /* Qwen3NextAttention: o_proj(attn · sigmoid(gate)) */
  return TRUE;
}

/* recurrent_gemma (RecurrentGemmaConfig): block_types cycled over the layers ("recurrent": Griffin's
 * recurrent block of lru_width with a conv1d_width conv, "attention": multi-query local attention over
 * attention_window_size positions, partial_rotary_factor of each head turned), the MLP's
 * intermediate_size // 2, tanh(logits / logits_soft_cap) · cap, and the embeddings scaled by
 * sqrt(hidden_size) rounded to bfloat16 (RecurrentGemmaModel's normalizer buffer is bf16). */
static gboolean
rglru_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *bt = raw ? json_object_get_member (raw, "block_types") : NULL;
  JsonArray *arr = bt && JSON_NODE_HOLDS_ARRAY (bt) ? json_node_get_array (bt) : NULL;
  guint nb = arr ? json_array_get_length (arr) : 0;
  static const char *const dflt[3] = { "recurrent", "recurrent", "attention" }; /* the config class's */
  if (bt && !JSON_NODE_HOLDS_NULL (bt) && nb == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: block_types must be a non-empty list", cfg->path);
      return FALSE;
    }
  for (int i = 0; i < hp->n_layer; i++)
    {
      const char *t = arr ? json_array_get_string_element (arr, (guint) i % nb) : dflt[i % 3];
      if (t && g_str_equal (t, "recurrent"))
        hp->layer_mixer[i] = HN_MIXER_RGLRU;
      else if (t && g_str_equal (t, "attention"))
        hp->layer_mixer[i] = HN_MIXER_ATTENTION;
      else
        {
          g_autofree char *what = g_strdup_printf ("block type \"%s\"", t ? t : "(not a string)");
          return unsupported (error, cfg, what);
        }
    }
  gint64 lru, conv, window, ff;
  double cap;
  if (!get_int (cfg, "lru_width", hp->hidden, &lru, error) || !get_int (cfg, "conv1d_width", 4, &conv, error) ||
      !get_int (cfg, "attention_window_size", 2048, &window, error) ||
      !get_int (cfg, "intermediate_size", 3 * 2560, &ff, error) ||
      !get_double (cfg, "logits_soft_cap", 30.0, &cap, error))
    return FALSE;
  if (conv < 1 || conv > HN_CONV1D_MAX_KERNEL)
    return unsupported (error, cfg, "a conv1d_width outside the conv kernel's 1..16");
  if (lru < 1 || lru > G_MAXINT32 || lru % hp->n_head)
    return unsupported (error, cfg, "an lru_width that is not a multiple of num_attention_heads");
  if (window < 1 || window > G_MAXINT32 || ff / 2 < 1 || ff / 2 > G_MAXINT32 || !(cap > 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: attention_window_size, intermediate_size // 2 and "
                   "logits_soft_cap must be positive", cfg->path);
      return FALSE;
    }
  /* RecurrentGemmaSdpaAttention: torch.chunk(q, int(1 / partial_rotary_factor)) turns the first chunk */
  double prf = cfg->rope.partial_rotary_factor;
  int chunks = prf > 0 ? (int) (1.0 / prf) : 0;
  int rd = (int) (hp->head_dim * prf);
  if (chunks < 1 || hp->head_dim % chunks || rd != hp->head_dim / chunks || rd % 2)
    return unsupported (error, cfg, "a partial_rotary_factor whose rotary chunk is not head_dim · factor, even");
  hp->rot_dims = rd;
  hp->rglru = (HnRglruDims) { hp->hidden, (int) lru, (int) conv, hp->n_head };
  hp->ssm_conv_kernel = (int) conv;
  hp->ffn = (int) (ff / 2);
  hp->final_softcap = (float) cap;
  hp->sliding_window = (int) window;
  for (int i = 0; i < hp->n_layer; i++)
    hp->layer_sliding[i] = hp->layer_mixer[i] == HN_MIXER_ATTENTION;
  /* sqrt(hidden) as a bfloat16 (round to nearest even), then back to float */
  union { float f; guint32 u; } v = { .f = sqrtf ((float) hp->hidden) };
  v.u = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) & 0xffff0000u;
  hp->embed_scale = v.f;
  return TRUE;
}

/* A hybrid's layer pattern and Mamba-2 mixers (bamba: attn_layer_indices, mamba_*; nemotron_h: its
 * pattern, mamba_num_heads / mamba_head_dim, n_groups, ssm_state_size, conv_kernel). */
static gboolean
hybrid_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  gboolean nh = hp->arch->names == HN_NAMES_NEMOTRON_H;
  hp->layer_mixer = g_new (guint8, hp->n_layer);
  memset (hp->layer_mixer, HN_MIXER_MAMBA2, (gsize) hp->n_layer);
  hp->layer_ffn = g_new (guint8, hp->n_layer);
  memset (hp->layer_ffn, 1, (gsize) hp->n_layer);
  JsonObject *raw = hn_model_config_get_raw (cfg);
  gboolean bamba = hp->arch->names == HN_NAMES_BAMBA, fh1 = hp->arch->names == HN_NAMES_FALCON_H1;
  JsonNode *ai = raw && bamba ? json_object_get_member (raw, "attn_layer_indices") : NULL;
  if (hp->arch->names == HN_NAMES_JAMBA)
    return jamba_from_config (hp, cfg, error);
  if (hp->arch->names == HN_NAMES_LFM2)
    return lfm2_from_config (hp, cfg, error);
  if (hp->arch->names == HN_NAMES_QWEN3_NEXT)
    return deltanet_from_config (hp, cfg, error);
  if (hp->arch->names == HN_NAMES_RECURRENT_GEMMA)
    return rglru_from_config (hp, cfg, error);
  if (fh1)
    memset (hp->layer_mixer, HN_MIXER_PARALLEL, (gsize) hp->n_layer);
  else if (!bamba && !hybrid_pattern (hp, cfg, error))
    return FALSE;
  if (fh1 && !falcon_h1_from_config (hp, cfg, error))
    return FALSE;
  if (hp->arch->names == HN_NAMES_GRANITEMOEHYBRID)
    {
      /* position_embedding_type "nope": attention without rotary */
      const char *pe = hn_model_config_get_string (cfg, "position_embedding_type");
      if (pe && g_str_equal (pe, "nope"))
        memset (hp->layer_rope, 0, (gsize) hp->n_layer);
      else if (pe && !g_str_equal (pe, "rope"))
        return unsupported (error, cfg, "a position_embedding_type other than rope or nope");
    }
  if (ai && JSON_NODE_HOLDS_ARRAY (ai))
    {
      JsonArray *arr = json_node_get_array (ai);
      for (guint i = 0; i < json_array_get_length (arr); i++)
        {
          gint64 l = json_array_get_int_element (arr, i);
          if (l < 0 || l >= hp->n_layer)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: attn_layer_indices holds layer %" G_GINT64_FORMAT
                           " of %d", cfg->path, l, hp->n_layer);
              return FALSE;
            }
          hp->layer_mixer[l] = HN_MIXER_ATTENTION;
        }
    }
  else if (ai && !JSON_NODE_HOLDS_NULL (ai))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: attn_layer_indices must be a list of layers", cfg->path);
      return FALSE;
    }
  gint64 heads, hd, groups, state, conv, expand = 2;
  if (!get_int (cfg, nh ? "mamba_num_heads" : "mamba_n_heads", 128, &heads, error) ||
      !get_int (cfg, nh ? "n_groups" : "mamba_n_groups", nh ? 8 : 1, &groups, error) ||
      !get_int (cfg, nh ? "ssm_state_size" : "mamba_d_state", nh ? 128 : 256, &state, error) ||
      !get_int (cfg, nh ? "conv_kernel" : "mamba_d_conv", 4, &conv, error) ||
      (!nh && !get_int (cfg, "mamba_expand", 2, &expand, error)))
    return FALSE;
  gint64 inner = expand * hp->hidden, d_ssm = 0;
  if (fh1 && !get_int (cfg, "mamba_d_ssm", 0, &d_ssm, error))
    return FALSE;
  if (d_ssm > 0)
    inner = d_ssm; /* FalconH1Mixer: mamba_d_ssm when set */
  const char *hds = nh ? NULL : hn_model_config_get_string (cfg, "mamba_d_head");
  if (nh)
    {
      /* NemotronHMamba2Mixer: intermediate_size = mamba_num_heads · mamba_head_dim */
      if (!get_int (cfg, "mamba_head_dim", 64, &hd, error))
        return FALSE;
      inner = heads * hd;
    }
  else if (hds && g_str_equal (hds, "auto"))
    hd = heads > 0 ? inner / heads : 0;
  else if (!get_int (cfg, "mamba_d_head", heads > 0 ? inner / heads : 0, &hd, error))
    return FALSE;
  if (heads < 1 || groups < 1 || hd < 1 || heads * hd != inner || heads % groups || state < 1 ||
      state > HN_SSM_MAX_STATE || conv < 1 || conv > HN_CONV1D_MAX_KERNEL)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: %" G_GINT64_FORMAT " Mamba-2 heads of %" G_GINT64_FORMAT " channels (%" G_GINT64_FORMAT
                   " in all) in %" G_GINT64_FORMAT " groups, state size %" G_GINT64_FORMAT " (1..%d) and conv width %"
                   G_GINT64_FORMAT " (1..%d) do not fit the kernels",
                   cfg->path, heads, hd, inner, groups, state, HN_SSM_MAX_STATE, conv, HN_CONV1D_MAX_KERNEL);
      return FALSE;
    }
  hp->ssm = (HnMamba2Dims) { .inner = (int) inner, .state = (int) state, .n_heads = (int) heads, .head_dim = (int) hd,
                             .n_groups = (int) groups, .norm_eps = hp->norm_eps,
                             .norm_groups = nh || fh1 ? (int) groups : 1 };
  hp->ssm_conv_kernel = (int) conv;
  const char *mact = nh ? hn_model_config_get_string (cfg, "mamba_hidden_act") : NULL;
  if (nh ? mact && !g_str_equal (mact, "silu") : hp->act != HN_ACT_SILU)
    return unsupported (error, cfg, "a Mamba-2 mixer with an activation other than silu");
  return hn_mamba2_dt_limit_from_config (cfg, &hp->ssm, error);
}

/* A per-layer list of Llama4TextConfig (no_rope_layers, moe_layers): the array at key, or NULL when
 * absent or null; anything else is an error naming the key. */
static gboolean
llama4_list (const HnModelConfig *cfg, const char *key, JsonArray **out, GError **error)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *n = raw ? json_object_get_member (raw, key) : NULL;
  *out = n && JSON_NODE_HOLDS_ARRAY (n) ? json_node_get_array (n) : NULL;
  if (n && !*out && !JSON_NODE_HOLDS_NULL (n))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must be a list", cfg->path, key);
      return FALSE;
    }
  return TRUE;
}

/* Llama4TextModel as transformers builds it: NoPE layers (no_rope_layers 0; default every
 * no_rope_layer_interval-th), chunked attention on layer_types "chunked_attention" (default the rotary
 * layers) within attention_chunk_size, weightless q/k norms after the rotation (use_qk_norm), query
 * temperature on NoPE layers (attn_temperature_tuning, floor_scale, attn_scale), MoE on moe_layers
 * (default every interleave_moe_layer_step-th) with intermediate_size experts and shared expert and
 * intermediate_size_mlp dense MLPs elsewhere. */
static gboolean
llama4_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonArray *nr, *ml;
  gint64 interval, chunk, floor_scale, step, mlp;
  double temp_scale;
  gboolean qk_norm;
  if (!llama4_list (cfg, "no_rope_layers", &nr, error) || !llama4_list (cfg, "moe_layers", &ml, error) ||
      !get_int (cfg, "no_rope_layer_interval", 4, &interval, error) ||
      !get_int (cfg, "attention_chunk_size", 8192, &chunk, error) ||
      !get_int (cfg, "floor_scale", 8192, &floor_scale, error) ||
      !get_double (cfg, "attn_scale", 0.1, &temp_scale, error) ||
      !get_int (cfg, "interleave_moe_layer_step", 1, &step, error) ||
      !get_int (cfg, "intermediate_size_mlp", 16384, &mlp, error) ||
      !raw_bool (cfg, "use_qk_norm", TRUE, &qk_norm, error))
    return FALSE;
  /* attn_temperature_tuning: a bool (older configs wrote an int, nonzero = on) */
  JsonNode *tt = raw ? json_object_get_member (raw, "attn_temperature_tuning") : NULL;
  gboolean temp = TRUE;
  if (tt && JSON_NODE_HOLDS_VALUE (tt))
    temp = json_node_get_value_type (tt) == G_TYPE_BOOLEAN ? json_node_get_boolean (tt)
                                                            : json_node_get_double (tt) != 0;
  if (!hp->rope)
    return unsupported (error, cfg, "llama4_text without rotary layers");
  if (!nr)
    {
      if (interval < 1)
        return unsupported (error, cfg, "no_rope_layer_interval below 1");
      for (int i = 0; i < hp->n_layer; i++)
        hp->layer_rope[i] = (i + 1) % interval != 0; /* Llama4TextConfig's default list */
    }
  /* chunked layers: layer_types, else the rotary ones (Llama4TextConfig's default) */
  hp->layer_chunked = g_new0 (guint8, hp->n_layer);
  for (int i = 0; i < hp->n_layer; i++)
    {
      const char *t = cfg->layer_types ? cfg->layer_types[i] : NULL;
      if (cfg->layer_types && (int) g_strv_length (cfg->layer_types) != hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: layer_types has %u entries for %d layers", cfg->path,
                       g_strv_length (cfg->layer_types), hp->n_layer);
          return FALSE;
        }
      if (t && strcmp (t, "chunked_attention") != 0 && strcmp (t, "full_attention") != 0)
        {
          g_autofree char *what = g_strdup_printf ("layer type \"%s\"", t);
          return unsupported (error, cfg, what);
        }
      hp->layer_chunked[i] = t ? strcmp (t, "chunked_attention") == 0 : hp->layer_rope[i];
    }
  JsonNode *cn = raw ? json_object_get_member (raw, "attention_chunk_size") : NULL;
  if (cn && JSON_NODE_HOLDS_NULL (cn))
    memset (hp->layer_chunked, 0, (gsize) hp->n_layer); /* no chunk size: plain causal masks */
  else if (chunk < 1 || chunk > G_MAXINT32)
    return unsupported (error, cfg, "attention_chunk_size outside 1..2^31");
  hp->local_chunk = (int) chunk;
  if (hp->sliding_window > 0)
    return unsupported (error, cfg, "a sliding window with chunked attention");
  hp->qk_l2_norm = qk_norm;
  if (temp)
    {
      if (floor_scale < 1)
        return unsupported (error, cfg, "floor_scale below 1 with attn_temperature_tuning");
      hp->attn_temp_floor = (float) floor_scale;
      hp->attn_temp_scale = (float) temp_scale;
      /* the scale of every position is a table (transformer-weights.c): longer contexts fail closed */
      hp->ctx_limit = MIN (hp->max_positions, 1 << 22);
    }
  /* Llama4TextMoe: sigmoid of the top-k logits on the experts' inputs, an unweighted shared expert of
   * intermediate_size (experts too); the other layers an intermediate_size_mlp MLP */
  if (mlp < 1 || mlp > G_MAXINT32 || step < 1)
    return unsupported (error, cfg, "intermediate_size_mlp or interleave_moe_layer_step below 1");
  hp->moe_route = HN_MOE_ROUTE_SIGMOID_TOPK;
  hp->moe_norm_topk = FALSE;
  hp->moe_scale_input = TRUE;
  hp->moe_ffn = hp->ffn;
  hp->shared_ffn = hp->ffn;
  hp->ffn = (int) mlp;
  hp->layer_ffn = g_new (guint8, hp->n_layer);
  memset (hp->layer_ffn, 2, (gsize) hp->n_layer);
  for (int i = step - 1; !ml && i < hp->n_layer; i += (int) step)
    hp->layer_ffn[i] = 1;
  for (guint j = 0; ml && j < json_array_get_length (ml); j++)
    {
      gint64 l = json_array_get_int_element (ml, j);
      if (l < 0 || l >= hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: moe_layers holds layer %" G_GINT64_FORMAT " of %d",
                       cfg->path, l, hp->n_layer);
          return FALSE;
        }
      hp->layer_ffn[l] = 1;
    }
  return TRUE;
}


/* Gemma4TextConfig / Gemma4UnifiedTextConfig: per_layer_config head dims and K/V heads (else
 * global_head_dim and num_global_key_value_heads on the full-attention layers, as __post_init__
 * fills them), q/k RMSNorms with their weight and a weightless one on the values, attention
 * scale 1, a scalar on each layer's output; sliding layers rotate with their own rope_parameters,
 * full ones with "proportional" rotary: rotate_half over the whole head with the first
 * int(partial_rotary_factor * head_dim // 2) frequencies base^(-2i/head_dim), the rest 0. */
static gboolean
gemma4_from_config (HnTransformerHParams *hp, const HnModelConfig *cfg, JsonObject *raw, GError **error)
{
  const char *bidi = hn_model_config_get_string (cfg, "use_bidirectional_attention");
  if (bidi && strcmp (bidi, "all") == 0)
    return unsupported (error, cfg, "use_bidirectional_attention \"all\" (non-causal attention)");
  /* (Gemma4UnifiedTextConfig has no per-layer embeddings or experts: hidden_size_per_layer_input and
   * enable_moe_block are not read there; use_double_wide_mlp widens only K/V-sharing layers) */
  gboolean k_eq_v;
  gint64 shared;
  if (!raw_bool (cfg, "attention_k_eq_v", FALSE, &k_eq_v, error) ||
      !get_int (cfg, "num_kv_shared_layers", 0, &shared, error))
    return FALSE;
  if (shared != 0)
    return unsupported (error, cfg, "num_kv_shared_layers (layers reading another layer's K/V)");
  if (k_eq_v)
    return unsupported (error, cfg, "attention_k_eq_v (values from k_proj on the full-attention layers)");
  hp->v_norm = TRUE;
  hp->layer_scalars = TRUE;
  hp->attn_scale = 1.0f;
  hp->layer_head_dim = g_new (int, hp->n_layer);
  hp->layer_n_kv_head = g_new (int, hp->n_layer);
  int base_d = hp->head_dim, base_kv = hp->n_kv_head;
  JsonNode *pn = raw ? json_object_get_member (raw, "per_layer_config") : NULL;
  JsonObject *plc = pn && JSON_NODE_HOLDS_OBJECT (pn) ? json_node_get_object (pn) : NULL;
  gint64 gd;
  if (!get_int (cfg, "global_head_dim", 512, &gd, error))
    return FALSE;
  hp->head_dim = 0;
  hp->n_kv_head = 0;
  hp->local_rot_dims = 0;
  int full_d = 0;
  for (int i = 0; i < hp->n_layer; i++)
    {
      gint64 d = base_d, kv = base_kv;
      if (plc)
        {
          g_autofree char *key = g_strdup_printf ("%d", i);
          JsonNode *en = json_object_get_member (plc, key);
          if (en && JSON_NODE_HOLDS_OBJECT (en))
            {
              JsonObject *e = json_node_get_object (en);
              g_autoptr (GList) members = json_object_get_members (e);
              for (GList *l = members; l; l = l->next)
                if (strcmp (l->data, "head_dim") != 0 && strcmp (l->data, "num_key_value_heads") != 0)
                  {
                    g_autofree char *what = g_strdup_printf ("per_layer_config.%s.%s", key, (const char *) l->data);
                    return unsupported (error, cfg, what);
                  }
              if (json_object_has_member (e, "head_dim"))
                d = json_object_get_int_member (e, "head_dim");
              if (json_object_has_member (e, "num_key_value_heads"))
                kv = json_object_get_int_member (e, "num_key_value_heads");
            }
        }
      else if (!hp->layer_sliding[i])
        {
          d = gd;
          kv = base_kv; /* num_global_key_value_heads counts with attention_k_eq_v only */
        }
      if (d <= 0 || d > 1024 || d % 2 || kv <= 0 || hp->n_head % kv)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "%s: layer %d's head_dim %" G_GINT64_FORMAT " or num_key_value_heads %" G_GINT64_FORMAT
                       " does not fit %d query heads", cfg->path, i, d, kv, hp->n_head);
          return FALSE;
        }
      hp->layer_head_dim[i] = (int) d;
      hp->layer_n_kv_head[i] = (int) kv;
      hp->head_dim = MAX (hp->head_dim, (int) d);
      hp->n_kv_head = MAX (hp->n_kv_head, (int) kv);
      /* one rotary table per layer type: the layers of a type share their head dim */
      int *td = hp->layer_sliding[i] ? &hp->local_rot_dims : &full_d;
      if (*td && *td != d)
        return unsupported (error, cfg, "layers of one type with different head dims");
      *td = (int) d;
    }
  hp->v_head_dim = hp->head_dim;
  if (hp->rope)
    {
      if (!hp->local_rot_dims)
        hp->local_rot_dims = full_d;
      const char *t = cfg->rope.rope_type ? cfg->rope.rope_type : "default";
      if (strcmp (t, "proportional") != 0 && strcmp (t, "default") != 0)
        {
          g_autofree char *what = g_strdup_printf ("full-attention rope type \"%s\"", t);
          return unsupported (error, cfg, what);
        }
      if (cfg->rope.factor != 1.0)
        return unsupported (error, cfg, "a rope factor on the full-attention layers");
      hp->rope_theta = cfg->rope.theta > 0 ? cfg->rope.theta : 10000.0;
      hp->rot_dims = full_d > 0 ? full_d : hp->head_dim;
      hp->rope_prop_angles = strcmp (t, "proportional") == 0
                               ? (int) floor (cfg->rope.partial_rotary_factor * hp->rot_dims / 2.0)
                               : hp->rot_dims / 2;
      if (strcmp (t, "default") == 0 && cfg->rope.partial_rotary_factor != 1.0)
        return unsupported (error, cfg, "partial_rotary_factor with the default rope type");
      if (!hp->local_rope)
        hp->local_rot_dims = hp->rot_dims;
      /* the sliding layers' "default" rotary turns the whole head (a partial_rotary_factor is not read there) */
      if (hp->local_rope && hp->local_rope_scaling.type != HN_ROPE_SCALING_NONE)
        return unsupported (error, cfg, "a sliding-layer rope type other than default");
    }
  return TRUE;
}

/* MllamaTextModel on text alone skips each of its cross_attention_layers (no cross_attention_states and
 * nothing of that layer cached): the model is its self-attention layers in order, llama's. A listed index
 * outside the layers matches none, as in transformers. Layer 0 as a cross-attention layer is refused:
 * transformers then reads the positions (get_seq_length) and the mask size off that layer's cache, which
 * stays empty. embed_tokens holds vocab_size + 8 rows (image tokens), lm_head vocab_size: tying them is
 * refused. */
static gboolean
mllama_layers (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  static const int dflt[] = { 3, 8, 13, 18, 23, 28, 33, 38 }; /* MllamaTextConfig's default */
  JsonObject *raw = hn_model_config_get_raw (cfg);
  JsonNode *node = raw ? json_object_get_member (raw, "cross_attention_layers") : NULL;
  int total = hp->n_layer;
  g_autofree guint8 *cross = g_new0 (guint8, total);
  if (node && JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *a = json_node_get_array (node);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: cross_attention_layers must list layer indices",
                           cfg->path);
              return FALSE;
            }
          gint64 v = json_node_get_int (e);
          if (v >= 0 && v < total)
            cross[v] = 1;
        }
    }
  else if (node && !JSON_NODE_HOLDS_NULL (node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: cross_attention_layers must be a list", cfg->path);
      return FALSE;
    }
  else
    for (gsize i = 0; i < G_N_ELEMENTS (dflt); i++)
      if (dflt[i] < total)
        cross[dflt[i]] = 1;
  if (cross[0])
    return unsupported (error, cfg, "a cross-attention layer 0 (transformers reads positions off its empty cache)");
  if (cfg->tie_word_embeddings == TRUE)
    return unsupported (error, cfg, "tie_word_embeddings with embed_tokens of vocab_size + 8 rows");
  hp->layer_src = g_new (int, total);
  hp->n_layer = 0;
  for (int i = 0; i < total; i++)
    if (!cross[i])
      hp->layer_src[hp->n_layer++] = i;
  hp->src_n_layer = total;
  hp->embed_rows = hp->vocab + 8;
  return TRUE;
}

gboolean
hn_transformer_hparams_resolve (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error)
{
  memset (hp, 0, sizeof *hp);
  /* a refused package fails closed whatever its text_config names (MiniMax M3's says minimax_m2) */
  const HnArchPackageRefusal *pr = NULL;
  gsize n_pr = 0;
  if (cfg->text_config_resolved && cfg->outer_model_type)
    for (const HnArchPackageRefusal *r = hn_arch_package_refusals (&n_pr); n_pr > 0; r++, n_pr--)
      if (strcmp (r->package, cfg->outer_model_type) == 0)
        pr = r;
  if (pr)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is not supported: %s", cfg->path,
                   pr->package, pr->reason);
      return FALSE;
    }
  const HnArchInfo *a = hn_arch_lookup (cfg->model_type, error);
  if (!a)
    return FALSE;
  if (hn_arch_is_encoder (a) || hn_arch_is_seq2seq (a))
    {
      /* a different graph (encdec/encoder.h, encdec/seq2seq.h); callers that take any model dispatch first */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is %s, not a decoder-only model",
                   cfg->path, a->model_type, hn_arch_is_encoder (a) ? "an encoder (masked LM)" : "an encoder-decoder");
      return FALSE;
    }
  if (hn_arch_is_ssm (a))
    {
      /* ssm/mamba.h runs it (a recurrent state per layer instead of attention and a KV cache) */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: model_type \"%s\" is a state-space decoder (Mamba): it runs through its own graph, not the "
                   "attention decoder's", cfg->path, a->model_type);
      return FALSE;
    }
  hp->arch = a;
  hp->block = a->block;
  const char *mt = a->model_type;
  guint q = a->quirks;

  /* nemotron_h: the layer list decides the depth (num_hidden_layers is deprecated there) */
  JsonArray *nh_list;
  const char *nh_pat;
  gint64 n_layer = a->names == HN_NAMES_NEMOTRON_H ? hybrid_layers (cfg, &nh_list, &nh_pat) : cfg->num_hidden_layers;
  if (cfg->vocab_size <= 0 || cfg->hidden_size <= 0 || n_layer <= 0 || cfg->num_attention_heads <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive",
                   cfg->path);
      return FALSE;
    }
  hp->vocab = (int) cfg->vocab_size;
  hp->hidden = (int) cfg->hidden_size;
  hp->n_layer = (int) n_layer;
  if (strcmp (mt, "mllama_text_model") == 0 && !mllama_layers (hp, cfg, error))
    return FALSE;
  hp->n_head = (int) cfg->num_attention_heads;
  hp->n_kv_head = cfg->num_key_value_heads > 0 ? (int) cfg->num_key_value_heads : hp->n_head;
  hp->head_dim = cfg->head_dim > 0 ? (int) cfg->head_dim : hp->hidden / hp->n_head;
  if (strcmp (mt, "deepseek_ocr2_text") == 0)
    {
      /* DeepseekOcr2TextConfig sets head_dim = hidden_size // num_attention_heads whatever config.json says */
      if (hp->hidden % hp->n_head != 0)
        return unsupported (error, cfg, "hidden_size not a multiple of num_attention_heads");
      hp->head_dim = hp->hidden / hp->n_head;
    }
  hp->ffn = cfg->intermediate_size > 0 ? (int) cfg->intermediate_size : 4 * hp->hidden;
  gboolean jet = strcmp (mt, "jetmoe") == 0;
  if (jet)
    {
      /* JetMoeAttention: heads of kv_channels; k routed experts of num_key_value_heads query heads each */
      gint64 kvc;
      if (!get_int (cfg, "kv_channels", 128, &kvc, error))
        return FALSE;
      if (kvc <= 0 || kvc > 256 || cfg->num_experts_per_tok <= 0 ||
          hp->n_head != hp->n_kv_head * cfg->num_experts_per_tok)
        return unsupported (error, cfg, "kv_channels outside 1..256 or num_attention_heads other than "
                                        "num_key_value_heads * num_experts_per_tok");
      hp->head_dim = (int) kvc;
      hp->moa = TRUE;
    }
  /* Glm4vTextAttention's heads are hidden_size / num_attention_heads whatever head_dim says, while its
   * rotary reads head_dim: a config where they differ has no single reading */
  if (strcmp (mt, "glm4v_text") == 0 && hp->head_dim * hp->n_head != hp->hidden)
    return unsupported (error, cfg, "head_dim other than hidden_size / num_attention_heads");
  hp->max_positions = cfg->max_position_embeddings > 0 ? (int) cfg->max_position_embeddings : 2048;
  if (strcmp (mt, "falcon") == 0 && cfg->new_decoder_architecture != TRUE)
    {
      /* FalconAttention: num_kv_heads only counts with the new architecture; otherwise
       * multi_query means one K/V head and its absence one per query head */
      gboolean mq;
      if (!raw_bool (cfg, "multi_query", TRUE, &mq, error))
        return FALSE;
      hp->n_kv_head = mq ? 1 : hp->n_head;
    }
  if (strcmp (mt, "codegen") == 0 && (hp->n_head * hp->head_dim) % 4 != 0)
    return unsupported (error, cfg, "a width that does not split into codegen's 4 model-parallel chunks");
  if (strcmp (mt, "persimmon") == 0)
    hp->n_kv_head = hp->n_head; /* PersimmonAttention has no grouped K/V (num_key_value_heads is ignored) */
  if (strcmp (mt, "falcon") == 0 && cfg->intermediate_size <= 0)
    hp->ffn = 4 * hp->hidden; /* falcon: ffn_hidden_size defaults to 4 * hidden */
  if (hp->n_head % hp->n_kv_head != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                   cfg->path, hp->n_head, hp->n_kv_head);
      return FALSE;
    }

  /* norms */
  hp->layernorm = (q & HN_QUIRK_LAYERNORM) != 0;
  hp->norm_plus_one = (q & HN_QUIRK_NORM_PLUS_ONE) != 0;
  if (q & HN_QUIRK_NORM_NO_PARAMS)
    hp->norm_eps = 1e-5f; /* OlmoLayerNorm hard-codes it */
  else if (!isnan (cfg->norm_eps))
    hp->norm_eps = (float) cfg->norm_eps;
  else
    hp->norm_eps = hp->layernorm ? 1e-5f : 1e-6f;

  /* mlp */
  hp->gated = (q & HN_QUIRK_GATED_MLP) != 0;
  if (!activation (hp, cfg, error))
    return FALSE;

  /* positions */
  hp->rope = !(q & HN_QUIRK_NO_ROPE);
  hp->alibi = (q & HN_QUIRK_ALIBI) != 0;
  hp->learned_pos = (q & HN_QUIRK_LEARNED_POS) != 0;
  if (strcmp (mt, "opt") == 0)
    hp->pos_offset = 2;
  if (strcmp (mt, "falcon") == 0 && cfg->alibi == TRUE)
    {
      hp->alibi = TRUE;
      hp->rope = FALSE;
    }
  hp->rope_style = (q & HN_QUIRK_ROPE_INTERLEAVED) ? HN_ROPE_GPTJ : HN_ROPE_NEOX;
  hp->rot_dims = hp->head_dim;
  if (cfg->rotary_dim > 0 && !jet) /* config.json's head_dim (hidden / heads) is not jetmoe's */
    hp->rot_dims = (int) cfg->rotary_dim;
  else if (strcmp (mt, "stablelm") == 0 && cfg->rope.partial_rotary_factor == 1.0)
    hp->rot_dims = hp->head_dim / 4; /* stablelm's default partial_rotary_factor is 0.25 */
  /* Glm4Config and Glm4MoeConfig (Glm4vMoeTextConfig inherits it) default partial_rotary_factor to 0.5 */
  static const char *const half_rotary[] = { "glm4", "glm4_moe", "glm4v_moe_text", NULL };
  if (g_strv_contains (half_rotary, mt) && !partial_rotary_given (cfg))
    hp->rot_dims = hp->head_dim / 2;
  if (hp->rope && (hp->rot_dims <= 0 || hp->rot_dims > hp->head_dim || hp->rot_dims % 2))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: rotary dims %d do not fit head_dim %d", cfg->path,
                   hp->rot_dims, hp->head_dim);
      return FALSE;
    }
  /* gemma4's full-attention rotary ("proportional") is resolved with its per-layer head dims below */
  gboolean g4 = g_str_has_prefix (mt, "gemma4");
  if (hp->rope && !g4 && !rope_scaling_from_config (hp, cfg, &cfg->rope, &hp->rope_scaling, &hp->rope_theta, error))
    return FALSE;
  double dtheta = family_default_theta (cfg, mt);
  if (dtheta > 0)
    hp->rope_theta = dtheta;
  if (mrope_text (mt) && !mrope_check (hp, cfg, hn_model_config_get_raw (cfg), error))
    return FALSE;
  if (hp->rope && cfg->has_rope_sliding)
    {
      if (!rope_scaling_from_config (hp, cfg, &cfg->rope_sliding, &hp->local_rope_scaling, &hp->local_rope_theta, error))
        return FALSE;
      if (hp->local_rope_scaling.type == HN_ROPE_SCALING_LONGROPE)
        return unsupported (error, cfg, "longrope on sliding layers");
      hp->local_rope = TRUE;
    }
  hp->local_rot_dims = hp->rot_dims;

  /* attention */
  if (!isnan (cfg->query_pre_attn_scalar) && cfg->query_pre_attn_scalar > 0)
    hp->attn_scale = (float) (1.0 / sqrt (cfg->query_pre_attn_scalar));
  if ((q & HN_QUIRK_MULTIPLIERS) && !isnan (cfg->attention_multiplier))
    hp->attn_scale = (float) cfg->attention_multiplier;
  if ((q & HN_QUIRK_SOFTCAP))
    {
      hp->attn_softcap = isnan (cfg->attn_logit_softcapping) ? 0.0f : (float) cfg->attn_logit_softcapping;
      hp->final_softcap = isnan (cfg->final_logit_softcapping) ? 0.0f : (float) cfg->final_logit_softcapping;
    }
  else if (!isnan (cfg->attn_logit_softcapping) || !isnan (cfg->final_logit_softcapping))
    return unsupported (error, cfg, "logit soft-capping");
  hp->qk_norm_head = (q & HN_QUIRK_QK_NORM_HEAD) != 0;
  hp->qk_norm_full = (q & HN_QUIRK_QK_NORM_FULL) != 0;

  /* sliding windows: layer_types when given, else the family's rule */
  hp->layer_sliding = g_new0 (guint8, hp->n_layer);
  gint64 window = cfg->sliding_window;
  if (strcmp (mt, "modernbert-decoder") == 0 && window <= 0)
    {
      /* ModernBertDecoderConfig: sliding_window = local_attention // 2 */
      gint64 local;
      if (!get_int (cfg, "local_attention", 128, &local, error))
        return FALSE;
      window = local > 0 ? local / 2 : -1;
    }
  gboolean sw_on = window > 0;
  /* Qwen2VLTextConfig / Qwen2_5_VLTextConfig keep qwen2's rule; qwen3_vl's text models build a
   * causal mask alone (no sliding_window reaches their attention) */
  gboolean qwen2_rule = strcmp (mt, "qwen2") == 0 || strcmp (mt, "qwen3") == 0 || strcmp (mt, "qwen2_vl_text") == 0 ||
                        strcmp (mt, "qwen2_5_vl_text") == 0 || strcmp (mt, "qwen2_5_omni_text") == 0;
  if (qwen2_rule)
    sw_on = sw_on && cfg->use_sliding_window == TRUE;
  /* attention modules that take no sliding window whatever config.json says (Qwen3OmniMoeThinkerTextAttention
   * sets None; Cosmos3-Edge's llama attention, DeepSeek-OCR-2's and ERNIE-4.5-VL's have none) */
  static const char *const no_window[] = { "qwen3_omni_moe_text", "cosmos3_edge_text", "deepseek_ocr2_text",
                                           "ernie4_5_vl_moe_text", NULL };
  if (g_str_has_prefix (mt, "qwen3_vl") || g_strv_contains (no_window, mt))
    sw_on = FALSE;
  if (sw_on)
    {
      hp->sliding_window = (int) window;
      if (cfg->layer_types)
        {
          int n = (int) g_strv_length (cfg->layer_types);
          if (n != hp->n_layer)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: layer_types has %d entries for %d layers",
                           cfg->path, n, hp->n_layer);
              return FALSE;
            }
          for (int i = 0; i < n; i++)
            {
              if (strcmp (cfg->layer_types[i], "sliding_attention") == 0)
                hp->layer_sliding[i] = 1;
              else if (strcmp (cfg->layer_types[i], "full_attention") != 0)
                {
                  g_autofree char *what = g_strdup_printf ("layer type \"%s\"", cfg->layer_types[i]);
                  return unsupported (error, cfg, what);
                }
            }
        }
      else if (q & HN_QUIRK_SLIDING_ALTERNATE)
        for (int i = 0; i < hp->n_layer; i++)
          hp->layer_sliding[i] = (i + 1) % 2; /* gemma2: even layers slide */
      else if (strcmp (mt, "granite_swa") == 0 || strcmp (mt, "granitemoe_swa") == 0)
        for (int i = 0; i < hp->n_layer; i++)
          hp->layer_sliding[i] = i % 4 != 0; /* every fourth layer attends to everything */
      else if (qwen2_rule)
        for (int i = 0; i < hp->n_layer; i++)
          hp->layer_sliding[i] = cfg->max_window_layers < 0 || i >= cfg->max_window_layers;
      else
        memset (hp->layer_sliding, 1, (gsize) hp->n_layer);
    }

  if (strcmp (mt, "gpt_neo") == 0)
    {
      /* GPTNeoSelfAttention does not scale the scores; "local" layers see window_size keys */
      hp->attn_scale = 1.0f;
      JsonObject *r = hn_model_config_get_raw (cfg);
      gint64 win = 256;
      GError *we = NULL;
      if (!hn_model_config_get_int (cfg, "window_size", &win, &we) && we)
        {
          g_propagate_error (error, we);
          return FALSE;
        }
      JsonArray *al = r && json_object_has_member (r, "attention_layers") &&
                              JSON_NODE_HOLDS_ARRAY (json_object_get_member (r, "attention_layers"))
                        ? json_object_get_array_member (r, "attention_layers")
                        : NULL;
      if (!al || json_array_get_length (al) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: attention_layers must list one type per layer", cfg->path);
          return FALSE;
        }
      hp->sliding_window = (int) win;
      for (int i = 0; i < hp->n_layer; i++)
        {
          const char *t = json_array_get_string_element (al, (guint) i);
          if (!t || (strcmp (t, "local") != 0 && strcmp (t, "global") != 0))
            return unsupported (error, cfg, "an attention layer type other than global/local");
          hp->layer_sliding[i] = strcmp (t, "local") == 0;
        }
    }
  if (strcmp (mt, "mpt") == 0)
    {
      JsonObject *r = hn_model_config_get_raw (cfg);
      JsonObject *ac = r && json_object_has_member (r, "attn_config") &&
                               JSON_NODE_HOLDS_OBJECT (json_object_get_member (r, "attn_config"))
                         ? json_object_get_object_member (r, "attn_config")
                         : NULL;
      if (ac)
        {
          static const char *const off[] = { "qk_ln", "prefix_lm", "attn_uses_sequence_id", NULL };
          for (const char *const *k = off; *k; k++)
            if (json_object_has_member (ac, *k) && JSON_NODE_HOLDS_VALUE (json_object_get_member (ac, *k)) &&
                json_object_get_boolean_member (ac, *k))
              return unsupported (error, cfg, *k);
          if (json_object_has_member (ac, "clip_qkv") && !JSON_NODE_HOLDS_NULL (json_object_get_member (ac, "clip_qkv")))
            return unsupported (error, cfg, "attn_config.clip_qkv");
          if (json_object_has_member (ac, "alibi") && !json_object_get_boolean_member (ac, "alibi"))
            return unsupported (error, cfg, "MPT without ALiBi (learned positions)");
          if (json_object_has_member (ac, "softmax_scale") &&
              JSON_NODE_HOLDS_VALUE (json_object_get_member (ac, "softmax_scale")))
            hp->attn_scale = (float) json_object_get_double_member (ac, "softmax_scale");
          if (json_object_has_member (ac, "alibi_bias_max") &&
              json_object_get_double_member (ac, "alibi_bias_max") != 8.0)
            return unsupported (error, cfg, "attn_config.alibi_bias_max other than 8");
        }
      gboolean no_bias;
      if (!raw_bool (cfg, "no_bias", TRUE, &no_bias, error))
        return FALSE;
      (void) no_bias; /* biases are loaded when the checkpoint has them */
    }

  /* which layers rotate: all, or as no_rope_layers / the sliding layers say */
  hp->layer_rope = g_new (guint8, hp->n_layer);
  memset (hp->layer_rope, hp->rope ? 1 : 0, (gsize) hp->n_layer);
  if (hp->rope && (q & HN_QUIRK_ROPE_SLIDING_ONLY) && hp->sliding_window > 0)
    memcpy (hp->layer_rope, hp->layer_sliding, (gsize) hp->n_layer);
  JsonObject *raw = hn_model_config_get_raw (cfg);
  if (hp->rope && raw && json_object_has_member (raw, "no_rope_layers") &&
      JSON_NODE_HOLDS_ARRAY (json_object_get_member (raw, "no_rope_layers")))
    {
      JsonArray *nr = json_object_get_array_member (raw, "no_rope_layers");
      if (json_array_get_length (nr) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: no_rope_layers has %u entries for %d layers", cfg->path,
                       json_array_get_length (nr), hp->n_layer);
          return FALSE;
        }
      for (int i = 0; i < hp->n_layer; i++)
        hp->layer_rope[i] = json_array_get_int_element (nr, (guint) i) != 0; /* 1 = this layer rotates */
    }

  if (hp->rope && raw && json_object_has_member (raw, "layer_rope_theta") &&
      JSON_NODE_HOLDS_ARRAY (json_object_get_member (raw, "layer_rope_theta")))
    {
      /* granite_swa: a rotary base per layer, 0 = no rotary (NoPE); one base is built */
      JsonArray *lt = json_object_get_array_member (raw, "layer_rope_theta");
      if (json_array_get_length (lt) != (guint) hp->n_layer)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: layer_rope_theta has %u entries for %d layers",
                       cfg->path, json_array_get_length (lt), hp->n_layer);
          return FALSE;
        }
      for (int i = 0; i < hp->n_layer; i++)
        {
          double th = json_array_get_double_element (lt, (guint) i);
          if (th != 0.0 && th != hp->rope_theta)
            return unsupported (error, cfg, "layer_rope_theta with a base other than 0 and rope_theta");
          hp->layer_rope[i] = th != 0.0;
        }
    }

  /* scalars */
  hp->embed_scale = 1.0f;
  hp->residual_scale = 1.0f;
  hp->logits_scale = 1.0f;
  if (q & HN_QUIRK_EMBED_SCALE_SQRT)
    hp->embed_scale = sqrtf ((float) hp->hidden);
  if (q & HN_QUIRK_MULTIPLIERS)
    {
      if (!isnan (cfg->embedding_multiplier))
        hp->embed_scale = (float) cfg->embedding_multiplier;
      if (!isnan (cfg->residual_multiplier))
        hp->residual_scale = (float) cfg->residual_multiplier;
      if (!isnan (cfg->logits_scaling))
        hp->logits_scale = (float) (1.0 / cfg->logits_scaling);
    }
  if ((q & HN_QUIRK_LOGIT_SCALE) && !isnan (cfg->logit_scale))
    hp->logits_scale = (float) cfg->logit_scale;
  hp->embed_norm = (q & HN_QUIRK_EMBED_NORM) != 0;

  /* tied embeddings: the family's transformers default when config.json is silent */
  static const char *const tie_by_default[] = { "gemma", "gemma2", "gemma3_text", "cohere", "cohere2", "starcoder2",
                                                "gpt2", "gpt_bigcode", "gpt_neo", "mpt", "opt", "bloom", "falcon", "smollm3",
                                                "vaultgemma", "xglm", "biogpt", "ctrl", "openai-gpt", "bert-generation",
                                                "modernbert-decoder", "jetmoe", "youtu", "cohere2_moe", "minicpm3", "lfm2",
                                                "lfm2_moe", "qwen2_5_omni_text", "ernie4_5_vl_moe_text", NULL };
  gboolean tie_default = g_strv_contains (tie_by_default, mt);
  hp->tie_embeddings = cfg->tie_word_embeddings < 0 ? tie_default : cfg->tie_word_embeddings == TRUE;

  /* family switches that change the wiring */
  if (strcmp (mt, "gpt_neox") == 0 && cfg->use_parallel_residual == FALSE)
    hp->block = HN_BLOCK_PRE_NORM;
  if (strcmp (mt, "cohere2_moe") == 0)
    {
      /* RMSNorm when rms_norm_eps is set, else cohere's LayerNorm (layer_norm_eps) */
      JsonNode *rn = raw ? json_object_get_member (raw, "rms_norm_eps") : NULL;
      double eps;
      gboolean rms = rn && !JSON_NODE_HOLDS_NULL (rn);
      if (!get_double (cfg, rms ? "rms_norm_eps" : "layer_norm_eps", 1e-5, &eps, error))
        return FALSE;
      hp->layernorm = !rms;
      hp->norm_eps = (float) eps;
    }
  if (strcmp (mt, "afmoe") == 0)
    {
      /* AfmoeModel: embeddings * sqrt(hidden) when mup_enabled; attention out *= sigmoid(gate_proj) */
      gboolean mup;
      if (!raw_bool (cfg, "mup_enabled", FALSE, &mup, error))
        return FALSE;
      if (mup)
        hp->embed_scale = sqrtf ((float) hp->hidden);
      hp->attn_gate_act = HN_ACT_SIGMOID;
    }
  if (strcmp (mt, "laguna") == 0 && !laguna_from_config (hp, cfg, raw, error))
    return FALSE;
  if (strcmp (mt, "muse_glimmer_text") == 0 && !muse_glimmer_from_config (hp, cfg, raw, error))
    return FALSE;
  if (strcmp (mt, "step3p5") == 0 && !step3p5_from_config (hp, cfg, raw, error))
    return FALSE;
  if (strcmp (mt, "hyperclovax") == 0)
    {
      /* peri-layer norms (use_post_norm) after each sublayer; logits_scaling multiplies */
      gboolean post;
      if (!raw_bool (cfg, "use_post_norm", FALSE, &post, error))
        return FALSE;
      hp->block = post ? HN_BLOCK_SANDWICH : HN_BLOCK_PRE_NORM;
      if (!isnan (cfg->logits_scaling))
        hp->logits_scale = (float) cfg->logits_scaling;
    }
  if (strcmp (mt, "stablelm") == 0 && cfg->use_parallel_residual == TRUE)
    hp->block = HN_BLOCK_PARALLEL;
  if (strcmp (mt, "falcon") == 0)
    {
      if (cfg->new_decoder_architecture == TRUE)
        {
          gint64 n_ln = 2;
          GError *e = NULL;
          if (!hn_model_config_get_int (cfg, "num_ln_in_parallel_attn", &n_ln, &e) && e)
            {
              g_propagate_error (error, e);
              return FALSE;
            }
          hp->block = n_ln == 1 ? HN_BLOCK_PARALLEL : HN_BLOCK_PARALLEL_2NORM;
        }
      else if (cfg->parallel_attn == FALSE)
        hp->block = HN_BLOCK_PRE_NORM;
    }
  if (strcmp (mt, "gpt2") == 0)
    {
      if (cfg->scale_attn_by_inverse_layer_idx == TRUE)
        return unsupported (error, cfg, "scale_attn_by_inverse_layer_idx");
      if (cfg->scale_attn_weights == FALSE)
        hp->attn_scale = 1.0f;
    }
  if (strcmp (mt, "opt") == 0)
    {
      gboolean before;
      gint64 proj = -1;
      GError *e = NULL;
      if (!raw_bool (cfg, "do_layer_norm_before", TRUE, &before, error))
        return FALSE;
      if (!before)
        return unsupported (error, cfg, "do_layer_norm_before=false (post-norm OPT)");
      if (hn_model_config_get_int (cfg, "word_embed_proj_dim", &proj, &e) && proj != hp->hidden)
        return unsupported (error, cfg, "word_embed_proj_dim different from hidden_size");
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
    }
  if (strcmp (mt, "bloom") == 0)
    {
      gboolean post;
      if (!raw_bool (cfg, "apply_residual_connection_post_layernorm", FALSE, &post, error))
        return FALSE;
      if (post)
        return unsupported (error, cfg, "apply_residual_connection_post_layernorm");
    }
  if (strcmp (mt, "stablelm") == 0 || strcmp (mt, "phi") == 0)
    {
      gboolean qkln;
      if (!raw_bool (cfg, "qk_layernorm", FALSE, &qkln, error))
        return FALSE;
      if (qkln)
        return unsupported (error, cfg, "qk_layernorm");
    }
  if (strcmp (mt, "cohere") == 0 && cfg->use_qk_norm == TRUE)
    return unsupported (error, cfg, "use_qk_norm");
  /* nemotron_h writes its MoE settings whatever its layers are: they count where a layer is "moe" */
  if ((cfg->num_experts > 0 && (a->names != HN_NAMES_NEMOTRON_H || nemotron_h_has_moe (cfg))) || (q & HN_QUIRK_MOE))
    {
      if (!(q & HN_QUIRK_MOE) && a->names != HN_NAMES_NEMOTRON_H)
        return unsupported (error, cfg, "mixture-of-experts layers");
      if (!moe_from_config (hp, cfg, error))
        return FALSE;
    }
  if (strcmp (mt, "llama4_text") == 0 && !llama4_from_config (hp, cfg, error))
    return FALSE;
  if (strcmp (mt, "deepseek_v2") == 0 || strcmp (mt, "deepseek_v3") == 0 || strcmp (mt, "youtu") == 0 ||
      strcmp (mt, "axk1") == 0 || strcmp (mt, "minicpm3") == 0 || strcmp (mt, "glm4_moe_lite") == 0)
    {
      if (!mla_from_config (hp, cfg, error))
        return FALSE;
    }
  hp->v_head_dim = hp->mla ? hp->v_head_dim : hp->head_dim;
  hp->v_scale = 1.0f;
  if (strcmp (mt, "mimo_v2_flash") == 0)
    {
      /* MiMoV2FlashAttention: values of v_head_dim scaled by attention_value_scale; sliding layers have
       * twice the K/V heads and attention sinks */
      gint64 dv;
      double vs;
      if (!get_int (cfg, "v_head_dim", hp->head_dim, &dv, error) ||
          !get_double (cfg, "attention_value_scale", 0.707, &vs, error))
        return FALSE;
      if (dv <= 0 || dv > 256)
        return unsupported (error, cfg, "v_head_dim outside 1..256");
      hp->v_head_dim = (int) dv;
      hp->v_scale = (float) vs;
      hp->layer_n_kv_head = g_new (int, hp->n_layer);
      int base = hp->n_kv_head;
      for (int i = 0; i < hp->n_layer; i++)
        {
          hp->layer_n_kv_head[i] = hp->layer_sliding[i] ? 2 * base : base;
          hp->n_kv_head = MAX (hp->n_kv_head, hp->layer_n_kv_head[i]);
          if (hp->n_head % hp->layer_n_kv_head[i] != 0)
            return unsupported (error, cfg, "a sliding layer whose doubled K/V heads do not divide the query heads");
        }
    }
  if (a->names == HN_NAMES_DIFFLLAMA)
    {
      /* DiffLlamaAttention pairs head h with head h + H/2; the value layout above needs whole KV heads
       * on each side of that split */
      if (hp->n_head % 2 || (hp->n_kv_head > 1 && hp->n_kv_head % 2) || 2 * hp->head_dim > 256)
        return unsupported (error, cfg, "differential attention with an odd head count, an odd KV head count "
                                        "above 1, or head_dim above 128");
      hp->diff_attn = TRUE;
      hp->v_head_dim = 2 * hp->head_dim;
      hp->attn_scale = (float) (1.0 / sqrt ((double) hp->head_dim)); /* of the query's head_dim, not the values' */
    }
  if (strcmp (mt, "cohere2_moe") == 0)
    {
      /* Cohere2MoeAttention.force_rope: the dense prefix layers rotate when
       * prefix_dense_sliding_window_pattern is 1 */
      gint64 pattern;
      if (!get_int (cfg, "prefix_dense_sliding_window_pattern", 1, &pattern, error))
        return FALSE;
      for (int i = 0; hp->rope && pattern == 1 && i < hp->moe_first_dense; i++)
        hp->layer_rope[i] = 1;
    }
  gboolean granite_swa = strcmp (mt, "granite_swa") == 0 || strcmp (mt, "granitemoe_swa") == 0;
  hp->attn_sinks = strcmp (mt, "gpt_oss") == 0 || granite_swa;
  double clip = NAN;
  GError *ce = NULL;
  if (hn_model_config_get_double (cfg, "clip_qkv", &clip, &ce))
    {
      if (!(q & HN_QUIRK_CLIP_QKV))
        return unsupported (error, cfg, "clip_qkv");
      if (!(clip > 0))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: clip_qkv must be positive", cfg->path);
          return FALSE;
        }
      hp->clip_qkv = (float) clip;
    }
  else if (ce)
    {
      g_propagate_error (error, ce);
      return FALSE;
    }

  /* issue 25 families */
  HnNameScheme ns = a->names;
  if (ns == HN_NAMES_HUNYUAN || strcmp (mt, "glm4_moe") == 0)
    {
      /* q/k RMSNorm per head when use_qk_norm (hunyuan: on the rotated heads) */
      gboolean qkn;
      if (!raw_bool (cfg, "use_qk_norm", ns == HN_NAMES_HUNYUAN, &qkn, error))
        return FALSE;
      if (strcmp (mt, "hunyuan_vl_text") == 0)
        qkn = TRUE; /* HunYuanVLDenseV1Attention builds them whatever use_qk_norm says */
      hp->qk_norm_head = qkn;
      hp->qk_norm_after_rope = qkn && ns == HN_NAMES_HUNYUAN;
    }
  hp->sub_norms = ns == HN_NAMES_BITNET;
  if (strcmp (mt, "minicpm3") == 0)
    {
      /* MiniCPM3: embeddings * scale_emb, each residual branch * scale_depth / sqrt(layers), the
       * final hidden states / (hidden / dim_model_base) before the head; a null scale_depth or
       * dim_model_base is MiniCPM3Config's no-op value */
      JsonNode *dn = raw ? json_object_get_member (raw, "scale_depth") : NULL;
      JsonNode *bn = raw ? json_object_get_member (raw, "dim_model_base") : NULL;
      double emb, depth, base;
      if (!get_double (cfg, "scale_emb", 12.0, &emb, error) ||
          !get_double (cfg, "scale_depth", dn && JSON_NODE_HOLDS_NULL (dn) ? sqrt (hp->n_layer) : 1.4, &depth, error) ||
          !get_double (cfg, "dim_model_base", bn && JSON_NODE_HOLDS_NULL (bn) ? hp->hidden : 256.0, &base, error))
        return FALSE;
      if (!(base > 0))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: dim_model_base must be positive", cfg->path);
          return FALSE;
        }
      hp->embed_scale = (float) emb;
      hp->residual_scale = (float) (depth / sqrt (hp->n_layer));
      hp->logits_scale = (float) (base / hp->hidden);
    }
  if (jet)
    {
      /* JetMoeRMSNorm's default eps (1e-6) in the layers; rms_norm_eps only in the final norm */
      hp->final_norm_eps = hp->norm_eps;
      hp->norm_eps = 1e-6f;
    }
  if (ns == HN_NAMES_MODERNBERT_DECODER)
    {
      /* ModernBertDecoderLayer 0 has no attn_norm; ModernBertDecoderPredictionHead runs
       * norm(act(dense(x))) between the final norm and the (tied) decoder */
      if (!cfg->layer_types)
        return unsupported (error, cfg, "a config without layer_types (the global/local layer pattern)");
      const char *ca = hn_model_config_get_string (cfg, "classifier_activation");
      if (!hn_activation_from_string (ca ? ca : "gelu", &hp->head_act))
        return unsupported (error, cfg, "classifier_activation");
      hp->no_first_attn_norm = TRUE;
      hp->head_transform = TRUE;
    }
  if (ns == HN_NAMES_NANOCHAT)
    {
      /* NanoChatAttention: weightless RMSNorm of q and k after the rotary */
      hp->qk_norm_head = TRUE;
      hp->qk_norm_after_rope = TRUE;
      hp->rope_reversed = TRUE;
    }
  JsonObject *rp_raw = raw && json_object_has_member (raw, "rope_parameters") &&
                           JSON_NODE_HOLDS_OBJECT (json_object_get_member (raw, "rope_parameters"))
                         ? json_object_get_object_member (raw, "rope_parameters")
                         : NULL;
  if (rp_raw && json_object_has_member (rp_raw, "llama_4_scaling_beta") &&
      JSON_NODE_HOLDS_VALUE (json_object_get_member (rp_raw, "llama_4_scaling_beta")) &&
      json_object_get_double_member (rp_raw, "llama_4_scaling_beta") != 0.0)
    {
      /* Ministral3: queries scale by 1 + beta * log(1 + floor(pos / original_max_position_embeddings)),
       * 1 below original_max_position_embeddings; past it the scaling is not built */
      int orig = hp->rope_scaling.original_max_position_embeddings;
      if (strcmp (mt, "ministral3") != 0 || orig <= 0)
        return unsupported (error, cfg, "rope_parameters.llama_4_scaling_beta");
      hp->ctx_limit = orig;
    }
  if (ns == HN_NAMES_XGLM || ns == HN_NAMES_BIOGPT)
    {
      /* embeddings * sqrt(d_model) unless scale_embedding is false; positions start at 2 */
      if (cfg->scale_embedding == FALSE)
        hp->embed_scale = 1.0f;
      hp->pos_offset = 2;
      hp->learned_pos = TRUE; /* xglm: a fixed sinusoidal table, computed at load */
    }
  if (ns == HN_NAMES_CTRL)
    hp->learned_pos = TRUE; /* a fixed sinusoidal table, computed at load */
  if (ns == HN_NAMES_GPT_NEOX_JP)
    {
      gint64 mult;
      if (!get_int (cfg, "intermediate_multiple_size", 4, &mult, error))
        return FALSE;
      if (mult < 1 || mult > 64)
        return unsupported (error, cfg, "intermediate_multiple_size outside 1..64");
      hp->ffn = (int) (mult * hp->hidden);
    }

  if (hn_arch_is_hybrid (a) && !hybrid_from_config (hp, cfg, error))
    return FALSE;
  if (g4 && !gemma4_from_config (hp, cfg, raw, error))
    return FALSE;

  /* ids */
  hp->bos_token_id = (int) cfg->bos_token_id;
  hp->pad_token_id = (int) cfg->pad_token_id;
  hp->eos_token_ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint i = 0; i < cfg->n_eos_token_ids; i++)
    {
      int32_t e = (int32_t) cfg->eos_token_ids[i];
      g_array_append_val (hp->eos_token_ids, e);
    }
  return TRUE;
}

void
hn_transformer_hparams_clear (HnTransformerHParams *hp)
{
  g_clear_pointer (&hp->layer_sliding, g_free);
  g_clear_pointer (&hp->layer_src, g_free);
  g_clear_pointer (&hp->layer_n_head, g_free);
  g_clear_pointer (&hp->layer_n_kv_head, g_free);
  g_clear_pointer (&hp->layer_head_dim, g_free);
  g_clear_pointer (&hp->layer_rope, g_free);
  g_clear_pointer (&hp->layer_mixer, g_free);
  g_clear_pointer (&hp->layer_ffn, g_free);
  g_clear_pointer (&hp->layer_chunked, g_free);
  g_clear_pointer (&hp->layer_glu_limit, g_free);
  g_clear_pointer (&hp->layer_expert_glu_limit, g_free);
  g_clear_pointer (&hp->rope_short_factor, g_free);
  g_clear_pointer (&hp->rope_long_factor, g_free);
  g_clear_pointer (&hp->eos_token_ids, g_array_unref);
}
