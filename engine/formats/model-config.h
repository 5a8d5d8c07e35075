/* config.json of a Hugging Face model package, parsed into one typed struct.
 *
 * Both transformers 4.x spellings (rope_theta + rope_scaling, torch_dtype)
 * and 5.x (rope_parameters, dtype) are read, as are the per-family aliases
 * (n_embd/d_model, n_layer, n_head, n_inner, ffn_dim, ...). Multimodal
 * configs with a nested text_config are resolved to the text model (the
 * vision tower is not run; text_config_resolved says so).
 *
 * Unset values: integers are -1 (HN_CONFIG_UNSET), tri-state booleans are -1,
 * doubles are NAN unless a universal default exists (noted per field). The
 * family code (engine/transformer, engine/hierarchos) applies its own defaults for unset fields and
 * decides whether model_type is supported; hn_model_config_check_supported()
 * turns that decision into the user-facing error.
 *
 * Anything not typed here is in hn_model_config_get_raw(). */
#pragma once
#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define HN_CONFIG_UNSET (-1)

typedef struct {
  char *rope_type;            /* "default", "linear", "dynamic", "yarn", "longrope", "llama3", ... */
  double theta;               /* rope_theta / rotary_emb_base; 10000 when absent */
  double factor;              /* scaling factor; 1.0 when absent */
  double low_freq_factor;     /* llama3; NAN when absent */
  double high_freq_factor;    /* llama3; NAN when absent */
  gint64 original_max_position_embeddings; /* -1 when absent */
  double beta_fast;           /* yarn; NAN when absent (transformers default 32) */
  double beta_slow;           /* yarn; NAN when absent (transformers default 1) */
  double attention_factor;    /* yarn/longrope; NAN when absent */
  double mscale;              /* deepseek yarn; NAN when absent */
  double mscale_all_dim;      /* deepseek yarn; NAN when absent */
  double *short_factor;       /* longrope; n_short_factor values */
  guint n_short_factor;
  double *long_factor;
  guint n_long_factor;
  double partial_rotary_factor; /* fraction of head_dim rotated; 1.0 when absent */
  int truncate;               /* yarn (gpt-oss): tri-state */
  gboolean from_rope_parameters; /* TRUE when read from the 5.x rope_parameters */
} HnRopeConfig;

typedef struct {
  char *path;                 /* the config.json read */
  char *model_type;           /* of the text model when text_config was resolved */
  char *outer_model_type;     /* the top-level model_type (same unless multimodal) */
  char **architectures;       /* NULL-terminated, never NULL */
  gboolean text_config_resolved; /* multimodal: only the text model is used */

  gint64 vocab_size;
  gint64 hidden_size;         /* hidden_size | n_embd | d_model | dim */
  gint64 intermediate_size;   /* intermediate_size | n_inner | ffn_dim | d_ff | ffn_hidden_size */
  gint64 num_hidden_layers;   /* num_hidden_layers | n_layer | num_layers | n_layers */
  gint64 num_attention_heads; /* num_attention_heads | n_head | num_heads | n_heads */
  gint64 num_key_value_heads; /* num_key_value_heads | num_kv_heads | n_head_kv | multi_query(=1);
                               * defaults to num_attention_heads */
  gint64 head_dim;            /* head_dim | d_kv; defaults to hidden_size / num_attention_heads */
  char *hidden_act;           /* hidden_act | activation_function | hidden_activation | feed_forward_proj; may be NULL */

  double norm_eps;            /* rms_norm_eps | layer_norm_eps | layer_norm_epsilon | norm_epsilon | layernorm_epsilon; NAN */
  const char *norm_eps_key;   /* which key gave norm_eps (NULL when absent) */
  gint64 max_position_embeddings; /* max_position_embeddings | n_positions | n_ctx | max_seq_len | seq_length */

  HnRopeConfig rope;
  /* Layers with sliding-window attention may use their own RoPE (gemma3:
   * 4.x rope_local_base_freq, 5.x rope_parameters.sliding_attention). */
  HnRopeConfig rope_sliding;
  gboolean has_rope_sliding;
  gint64 rotary_dim;          /* explicit rotary_dim, or head_dim x partial_rotary_factor (rotary_pct) */

  int tie_word_embeddings;    /* tri-state; the family default applies when -1 */
  int attention_bias;         /* attention_bias | bias | qkv_bias; tri-state */
  int mlp_bias;               /* tri-state */
  gint64 sliding_window;      /* -1 when absent or null */
  int use_sliding_window;     /* tri-state */
  gint64 max_window_layers;
  char **layer_types;         /* NULL-terminated or NULL ("full_attention", "sliding_attention", ...) */
  gint64 sliding_window_pattern; /* gemma: every Nth layer is global; -1 */

  double attn_logit_softcapping;  /* NAN when absent or null */
  double final_logit_softcapping; /* NAN when absent or null */
  double query_pre_attn_scalar;   /* NAN */
  int use_qk_norm;                /* tri-state */
  double logit_scale;             /* cohere; NAN */
  double embedding_multiplier;    /* granite; NAN */
  double attention_multiplier;    /* granite; NAN */
  double residual_multiplier;     /* granite; NAN */
  double logits_scaling;          /* granite; NAN */
  int use_parallel_residual;      /* gpt-neox; tri-state */
  int parallel_attn;              /* falcon; tri-state */
  int new_decoder_architecture;   /* falcon; tri-state */
  int alibi;                      /* falcon/bloom/mpt; tri-state */
  int scale_attn_weights;         /* gpt2; tri-state */
  int scale_attn_by_inverse_layer_idx; /* gpt2; tri-state */
  int reorder_and_upcast_attn;    /* gpt2; tri-state */

  gint64 bos_token_id;
  gint64 pad_token_id;
  gint64 *eos_token_ids;          /* n_eos_token_ids values (int or list in the file) */
  guint n_eos_token_ids;
  gint64 decoder_start_token_id;
  char *dtype;                    /* dtype | torch_dtype ("float32", "bfloat16", ...); may be NULL */

  /* mixture of experts */
  gint64 num_experts;             /* num_local_experts | num_experts | n_routed_experts | moe_num_experts */
  gint64 num_experts_per_tok;     /* num_experts_per_tok | moe_top_k | top_k_experts */
  int norm_topk_prob;             /* tri-state */
  gint64 moe_intermediate_size;
  gint64 shared_expert_intermediate_size;
  gint64 n_shared_experts;
  gint64 decoder_sparse_step;
  gint64 first_k_dense_replace;
  gint64 *mlp_only_layers;
  guint n_mlp_only_layers;
  double router_aux_loss_coef;    /* NAN */
  double routed_scaling_factor;   /* NAN */
  double router_jitter_noise;     /* NAN */
  char *scoring_func;             /* "softmax"/"sigmoid"; may be NULL */

  /* encoder-decoder */
  int is_encoder_decoder;         /* tri-state */
  gint64 encoder_layers;          /* encoder_layers | num_layers (T5) */
  gint64 decoder_layers;          /* decoder_layers | num_decoder_layers */
  gint64 encoder_attention_heads;
  gint64 decoder_attention_heads;
  gint64 encoder_ffn_dim;
  gint64 decoder_ffn_dim;
  gint64 relative_attention_num_buckets;
  gint64 relative_attention_max_distance;
  char *feed_forward_proj;        /* T5 "relu" / "gated-gelu"; may be NULL */
  int scale_embedding;            /* tri-state */

  /* private */
  JsonParser *parser;
  JsonObject *raw;                /* the object the fields came from (text_config merged) */
  JsonObject *outer_raw;          /* the file's top-level object */
} HnModelConfig;

/* Parses `path`: a config.json file or a folder holding one. Any model_type
 * is accepted here; malformed JSON is HN_ERROR_CORRUPT naming file, line and
 * column; a missing file is HN_ERROR_NOT_FOUND. */
HnModelConfig *hn_model_config_load (const char *path, GError **error);
/* Same from memory; `name` is used in messages. */
HnModelConfig *hn_model_config_load_from_data (const char *data, gssize len, const char *name, GError **error);
void hn_model_config_free (HnModelConfig *cfg);

/* Fails with HN_ERROR_UNSUPPORTED "<file>: model_type 'x' is not supported;
 * supported: a, b, c" unless cfg->model_type is in `supported`
 * (NULL-terminated; the models registry provides it). */
gboolean hn_model_config_check_supported (const HnModelConfig *cfg, const char *const *supported, GError **error);

/* The JSON object the fields were read from (text_config merged over the top
 * level for multimodal configs), for model-specific extras. */
JsonObject *hn_model_config_get_raw (const HnModelConfig *cfg);
/* The file's top-level object. */
JsonObject *hn_model_config_get_outer_raw (const HnModelConfig *cfg);

/* Typed access to extras: TRUE and *out set when present with the right
 * type (integers accept integral doubles); FALSE when absent or null;
 * HN_ERROR_CORRUPT (and FALSE) when present with the wrong type. */
gboolean hn_model_config_get_int (const HnModelConfig *cfg, const char *key, gint64 *out, GError **error);
gboolean hn_model_config_get_double (const HnModelConfig *cfg, const char *key, double *out, GError **error);
gboolean hn_model_config_get_bool (const HnModelConfig *cfg, const char *key, gboolean *out, GError **error);
const char *hn_model_config_get_string (const HnModelConfig *cfg, const char *key);

/* TRUE when cfg lists `id` among its EOS ids. */
gboolean hn_model_config_is_eos (const HnModelConfig *cfg, gint64 id);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnModelConfig, hn_model_config_free)

G_END_DECLS
