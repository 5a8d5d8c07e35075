/* config.json (4.x and 5.x spellings, aliases, text_config) and
 * generation_config.json with its precedence. */
#include "formats/model-config.h"
#include "formats/gen-config.h"
#include "formats/safetensors.h"
#include "base/hn-error.h"
#include "transformer/registry.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnModelConfig *
load_str (const char *json)
{
  g_autoptr (GError) error = NULL;
  HnModelConfig *cfg = hn_model_config_load_from_data (json, -1, "test/config.json", &error);
  g_assert_no_error (error);
  g_assert_nonnull (cfg);
  return cfg;
}

static void
expect_error (const char *json, int code, const char *want)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data (json, -1, "test/config.json", &error);
  g_assert_null (cfg);
  g_assert_error (error, HN_ERROR, code);
  if (g_test_verbose ())
    g_printerr ("  %s\n", error->message);
  g_assert_nonnull (strstr (error->message, want));
}

static void
test_stories260k (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *dir = g_build_filename (shared ? shared : "../shared", "models", "stories260K", NULL);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("stories260K not available");
      return;
    }
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (cfg->model_type, ==, "llama");
  g_assert_cmpstr (cfg->architectures[0], ==, "LlamaForCausalLM");
  g_assert_null (cfg->architectures[1]);
  g_assert_false (cfg->text_config_resolved);
  g_assert_cmpint (cfg->vocab_size, ==, 512);
  g_assert_cmpint (cfg->hidden_size, ==, 64);
  g_assert_cmpint (cfg->intermediate_size, ==, 172);
  g_assert_cmpint (cfg->num_hidden_layers, ==, 5);
  g_assert_cmpint (cfg->num_attention_heads, ==, 8);
  g_assert_cmpint (cfg->num_key_value_heads, ==, 4);
  g_assert_cmpint (cfg->head_dim, ==, 8);
  g_assert_cmpint (cfg->rotary_dim, ==, 8);
  g_assert_cmpint (cfg->max_position_embeddings, ==, 512);
  g_assert_cmpfloat (cfg->norm_eps, ==, 1e-5);
  g_assert_cmpstr (cfg->norm_eps_key, ==, "rms_norm_eps");
  g_assert_cmpfloat (cfg->rope.theta, ==, 10000.0);
  g_assert_cmpstr (cfg->rope.rope_type, ==, "default");
  g_assert_cmpfloat (cfg->rope.factor, ==, 1.0);
  g_assert_false (cfg->rope.from_rope_parameters);
  g_assert_cmpstr (cfg->hidden_act, ==, "silu");
  g_assert_cmpint (cfg->tie_word_embeddings, ==, 1);
  g_assert_cmpint (cfg->attention_bias, ==, HN_CONFIG_UNSET);
  g_assert_cmpint (cfg->bos_token_id, ==, 1);
  g_assert_cmpuint (cfg->n_eos_token_ids, ==, 1);
  g_assert_cmpint (cfg->eos_token_ids[0], ==, 2);
  g_assert_true (hn_model_config_is_eos (cfg, 2));
  g_assert_cmpint (cfg->pad_token_id, ==, HN_CONFIG_UNSET);
  g_assert_cmpstr (cfg->dtype, ==, "float32");
  g_assert_cmpint (cfg->sliding_window, ==, HN_CONFIG_UNSET);
  g_assert_true (isnan (cfg->final_logit_softcapping));
  g_assert_cmpint (cfg->num_experts, ==, HN_CONFIG_UNSET);
  gint64 v = 0;
  g_assert_true (hn_model_config_get_int (cfg, "vocab_size", &v, &error));
  g_assert_cmpint (v, ==, 512);
  g_assert_false (hn_model_config_get_int (cfg, "no_such_key", &v, &error));
  g_assert_no_error (error);
  g_assert_false (hn_model_config_get_int (cfg, "hidden_act", &v, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_clear_error (&error);

  /* The registry decides support; the error lists what is supported. */
  const char *const ok[] = { "gpt2", "llama", "qwen2", NULL };
  const char *const other[] = { "gpt2", "qwen2", NULL };
  g_assert_true (hn_model_config_check_supported (cfg, ok, &error));
  g_assert_false (hn_model_config_check_supported (cfg, other, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "model_type 'llama' is not supported; supported: gpt2, qwen2"));
  g_assert_nonnull (strstr (error->message, "config.json"));
}

/* Llama 3.1 in the 4.x spelling and in the 5.x spelling: same result. */
static const char *llama31_v4 =
  "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":128256,"
  "\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
  "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"max_position_embeddings\":131072,"
  "\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
  "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"torch_dtype\":\"bfloat16\","
  "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"tie_word_embeddings\":false,"
  "\"attention_bias\":false,\"mlp_bias\":false,\"hidden_act\":\"silu\"}";
static const char *llama31_v5 =
  "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":128256,"
  "\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
  "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"max_position_embeddings\":131072,"
  "\"rope_parameters\":{\"rope_theta\":500000.0,\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
  "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"dtype\":\"bfloat16\","
  "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"tie_word_embeddings\":false,"
  "\"attention_bias\":false,\"mlp_bias\":false,\"hidden_act\":\"silu\"}";

static void
check_llama31 (const HnModelConfig *c)
{
  g_assert_cmpstr (c->rope.rope_type, ==, "llama3");
  g_assert_cmpfloat (c->rope.theta, ==, 500000.0);
  g_assert_cmpfloat (c->rope.factor, ==, 8.0);
  g_assert_cmpfloat (c->rope.low_freq_factor, ==, 1.0);
  g_assert_cmpfloat (c->rope.high_freq_factor, ==, 4.0);
  g_assert_cmpint (c->rope.original_max_position_embeddings, ==, 8192);
  g_assert_true (isnan (c->rope.beta_fast));
  g_assert_cmpstr (c->dtype, ==, "bfloat16");
  g_assert_cmpint (c->num_key_value_heads, ==, 8);
  g_assert_cmpint (c->head_dim, ==, 128);
  g_assert_cmpuint (c->n_eos_token_ids, ==, 3);
  g_assert_cmpint (c->eos_token_ids[2], ==, 128009);
  g_assert_cmpint (c->tie_word_embeddings, ==, 0);
  g_assert_cmpint (c->attention_bias, ==, 0);
  g_assert_cmpint (c->mlp_bias, ==, 0);
}

static void
test_rope_spellings (void)
{
  g_autoptr (HnModelConfig) a = load_str (llama31_v4);
  g_autoptr (HnModelConfig) b = load_str (llama31_v5);
  check_llama31 (a);
  check_llama31 (b);
  g_assert_false (a->rope.from_rope_parameters);
  g_assert_true (b->rope.from_rope_parameters);

  /* yarn (Qwen) in rope_scaling with the old "type" key */
  g_autoptr (HnModelConfig) y = load_str (
    "{\"model_type\":\"qwen2\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"rope_theta\":1000000,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,"
    "\"original_max_position_embeddings\":32768,\"beta_fast\":32,\"beta_slow\":1,\"attention_factor\":1.1},"
    "\"sliding_window\":null,\"use_sliding_window\":false,\"max_window_layers\":28}");
  g_assert_cmpstr (y->rope.rope_type, ==, "yarn");
  g_assert_cmpfloat (y->rope.theta, ==, 1e6);
  g_assert_cmpfloat (y->rope.factor, ==, 4.0);
  g_assert_cmpfloat (y->rope.beta_fast, ==, 32.0);
  g_assert_cmpfloat (y->rope.beta_slow, ==, 1.0);
  g_assert_cmpfloat (y->rope.attention_factor, ==, 1.1);
  g_assert_cmpint (y->sliding_window, ==, HN_CONFIG_UNSET);
  g_assert_cmpint (y->use_sliding_window, ==, 0);
  g_assert_cmpint (y->max_window_layers, ==, 28);

  /* longrope (Phi-3, old "su" name) with per-dimension factors */
  g_autoptr (HnModelConfig) p = load_str (
    "{\"model_type\":\"phi3\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"partial_rotary_factor\":0.5,\"rope_scaling\":{\"type\":\"su\","
    "\"short_factor\":[1.0,1.5],\"long_factor\":[2,3.5]},\"original_max_position_embeddings\":4096}");
  g_assert_cmpstr (p->rope.rope_type, ==, "longrope");
  g_assert_cmpuint (p->rope.n_short_factor, ==, 2);
  g_assert_cmpfloat (p->rope.short_factor[1], ==, 1.5);
  g_assert_cmpuint (p->rope.n_long_factor, ==, 2);
  g_assert_cmpfloat (p->rope.long_factor[1], ==, 3.5);
  g_assert_cmpfloat (p->rope.partial_rotary_factor, ==, 0.5);
  g_assert_cmpint (p->head_dim, ==, 4);
  g_assert_cmpint (p->rotary_dim, ==, 2);

  /* 5.x: partial_rotary_factor inside rope_parameters */
  g_autoptr (HnModelConfig) q = load_str (
    "{\"model_type\":\"stablelm\",\"vocab_size\":10,\"hidden_size\":64,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000,"
    "\"partial_rotary_factor\":0.25}}");
  g_assert_cmpfloat (q->rope.partial_rotary_factor, ==, 0.25);
  g_assert_cmpint (q->rotary_dim, ==, 8);

  /* gpt-neox: rotary_pct + rotary_emb_base; gpt-j: rotary_dim */
  g_autoptr (HnModelConfig) n = load_str (
    "{\"model_type\":\"gpt_neox\",\"vocab_size\":10,\"hidden_size\":64,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":4,\"rotary_pct\":0.25,\"rotary_emb_base\":10000,\"use_parallel_residual\":true,"
    "\"layer_norm_eps\":1e-5,\"hidden_act\":\"gelu\"}");
  g_assert_cmpint (n->rotary_dim, ==, 4);
  g_assert_cmpint (n->use_parallel_residual, ==, 1);
  g_assert_cmpstr (n->norm_eps_key, ==, "layer_norm_eps");
  g_autoptr (HnModelConfig) j = load_str (
    "{\"model_type\":\"gptj\",\"vocab_size\":10,\"n_embd\":64,\"n_layer\":1,\"n_head\":4,\"rotary_dim\":8}");
  g_assert_cmpint (j->rotary_dim, ==, 8);

  /* Gemma 3: a second RoPE for sliding layers, in both spellings */
  g_autoptr (HnModelConfig) g4 = load_str (
    "{\"model_type\":\"gemma3_text\",\"vocab_size\":10,\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":256,\"rope_theta\":1000000,"
    "\"rope_local_base_freq\":10000,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8.0},"
    "\"sliding_window\":512,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
    "\"query_pre_attn_scalar\":256,\"final_logit_softcapping\":null,\"attn_logit_softcapping\":null,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\"}");
  g_autoptr (HnModelConfig) g5 = load_str (
    "{\"model_type\":\"gemma3_text\",\"vocab_size\":10,\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":256,\"rope_parameters\":{"
    "\"full_attention\":{\"rope_type\":\"linear\",\"factor\":8.0,\"rope_theta\":1000000},"
    "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000}},"
    "\"sliding_window\":512,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
    "\"query_pre_attn_scalar\":256,\"hidden_activation\":\"gelu_pytorch_tanh\"}");
  HnModelConfig *gs[] = { g4, g5 };
  for (int i = 0; i < 2; i++)
    {
      HnModelConfig *g = gs[i];
      g_assert_cmpstr (g->rope.rope_type, ==, "linear");
      g_assert_cmpfloat (g->rope.theta, ==, 1e6);
      g_assert_cmpfloat (g->rope.factor, ==, 8.0);
      g_assert_true (g->has_rope_sliding);
      g_assert_cmpfloat (g->rope_sliding.theta, ==, 10000.0);
      g_assert_cmpstr (g->rope_sliding.rope_type, ==, "default");
      g_assert_cmpfloat (g->rope_sliding.factor, ==, 1.0);
      g_assert_cmpint (g->head_dim, ==, 256);
      g_assert_cmpint (g->sliding_window, ==, 512);
      g_assert_cmpstr (g->layer_types[0], ==, "sliding_attention");
      g_assert_cmpstr (g->layer_types[1], ==, "full_attention");
      g_assert_null (g->layer_types[2]);
      g_assert_cmpfloat (g->query_pre_attn_scalar, ==, 256.0);
      g_assert_true (isnan (g->final_logit_softcapping));
      g_assert_cmpstr (g->hidden_act, ==, "gelu_pytorch_tanh");
    }
}

static void
test_aliases (void)
{
  /* GPT-2 spelling */
  g_autoptr (HnModelConfig) g = load_str (
    "{\"model_type\":\"gpt2\",\"vocab_size\":50257,\"n_embd\":768,\"n_layer\":12,\"n_head\":12,"
    "\"n_positions\":1024,\"n_ctx\":1024,\"n_inner\":null,\"layer_norm_epsilon\":1e-05,"
    "\"activation_function\":\"gelu_new\",\"scale_attn_weights\":true,\"bos_token_id\":50256,\"eos_token_id\":50256}");
  g_assert_cmpint (g->hidden_size, ==, 768);
  g_assert_cmpint (g->num_hidden_layers, ==, 12);
  g_assert_cmpint (g->num_attention_heads, ==, 12);
  g_assert_cmpint (g->num_key_value_heads, ==, 12);
  g_assert_cmpint (g->intermediate_size, ==, HN_CONFIG_UNSET); /* null: the family uses 4 x n_embd */
  g_assert_cmpint (g->max_position_embeddings, ==, 1024);
  g_assert_cmpfloat (g->norm_eps, ==, 1e-5);
  g_assert_cmpstr (g->norm_eps_key, ==, "layer_norm_epsilon");
  g_assert_cmpstr (g->hidden_act, ==, "gelu_new");
  g_assert_cmpint (g->scale_attn_weights, ==, 1);
  g_assert_cmpint (g->tie_word_embeddings, ==, HN_CONFIG_UNSET);

  /* Falcon: multi_query -> one KV head; new decoder architecture -> num_kv_heads */
  g_autoptr (HnModelConfig) f = load_str (
    "{\"model_type\":\"falcon\",\"vocab_size\":65024,\"hidden_size\":4544,\"num_hidden_layers\":32,"
    "\"num_attention_heads\":71,\"multi_query\":true,\"parallel_attn\":true,\"alibi\":false,\"bias\":false,"
    "\"new_decoder_architecture\":false}");
  g_assert_cmpint (f->num_key_value_heads, ==, 1);
  g_assert_cmpint (f->parallel_attn, ==, 1);
  g_assert_cmpint (f->alibi, ==, 0);
  g_assert_cmpint (f->attention_bias, ==, 0);
  g_autoptr (HnModelConfig) f2 = load_str (
    "{\"model_type\":\"falcon\",\"vocab_size\":65024,\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":8,\"num_kv_heads\":2,\"multi_query\":true,\"new_decoder_architecture\":true}");
  g_assert_cmpint (f2->num_key_value_heads, ==, 2);
  g_assert_cmpint (f2->new_decoder_architecture, ==, 1);

  /* Mixtral MoE + granite multipliers + soft-capping */
  g_autoptr (HnModelConfig) m = load_str (
    "{\"model_type\":\"mixtral\",\"vocab_size\":32000,\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":8,\"num_local_experts\":8,\"num_experts_per_tok\":2,\"router_aux_loss_coef\":0.02,"
    "\"sliding_window\":4096,\"embedding_multiplier\":12.0,\"attention_multiplier\":0.0078125,"
    "\"residual_multiplier\":0.22,\"logits_scaling\":8,\"attn_logit_softcapping\":50.0,"
    "\"final_logit_softcapping\":30.0,\"norm_topk_prob\":true,\"moe_intermediate_size\":128,"
    "\"shared_expert_intermediate_size\":256,\"mlp_only_layers\":[0],\"logit_scale\":0.0625,\"use_qk_norm\":true}");
  g_assert_cmpint (m->num_experts, ==, 8);
  g_assert_cmpint (m->num_experts_per_tok, ==, 2);
  g_assert_cmpfloat (m->router_aux_loss_coef, ==, 0.02);
  g_assert_cmpint (m->norm_topk_prob, ==, 1);
  g_assert_cmpint (m->moe_intermediate_size, ==, 128);
  g_assert_cmpint (m->shared_expert_intermediate_size, ==, 256);
  g_assert_cmpuint (m->n_mlp_only_layers, ==, 1);
  g_assert_cmpint (m->sliding_window, ==, 4096);
  g_assert_cmpfloat (m->embedding_multiplier, ==, 12.0);
  g_assert_cmpfloat (m->attention_multiplier, ==, 0.0078125);
  g_assert_cmpfloat (m->residual_multiplier, ==, 0.22);
  g_assert_cmpfloat (m->logits_scaling, ==, 8.0);
  g_assert_cmpfloat (m->attn_logit_softcapping, ==, 50.0);
  g_assert_cmpfloat (m->final_logit_softcapping, ==, 30.0);
  g_assert_cmpfloat (m->logit_scale, ==, 0.0625);
  g_assert_cmpint (m->use_qk_norm, ==, 1);

  /* T5: encoder-decoder fields */
  g_autoptr (HnModelConfig) t = load_str (
    "{\"model_type\":\"t5\",\"vocab_size\":32128,\"d_model\":512,\"d_kv\":64,\"d_ff\":2048,\"num_layers\":6,"
    "\"num_decoder_layers\":6,\"num_heads\":8,\"relative_attention_num_buckets\":32,"
    "\"relative_attention_max_distance\":128,\"is_encoder_decoder\":true,\"feed_forward_proj\":\"relu\","
    "\"decoder_start_token_id\":0,\"pad_token_id\":0,\"eos_token_id\":1,\"layer_norm_epsilon\":1e-06}");
  g_assert_cmpint (t->hidden_size, ==, 512);
  g_assert_cmpint (t->head_dim, ==, 64);
  g_assert_cmpint (t->intermediate_size, ==, 2048);
  g_assert_cmpint (t->encoder_layers, ==, 6);
  g_assert_cmpint (t->decoder_layers, ==, 6);
  g_assert_cmpint (t->num_attention_heads, ==, 8);
  g_assert_cmpint (t->relative_attention_num_buckets, ==, 32);
  g_assert_cmpint (t->relative_attention_max_distance, ==, 128);
  g_assert_cmpint (t->is_encoder_decoder, ==, 1);
  g_assert_cmpint (t->decoder_start_token_id, ==, 0);
  g_assert_cmpstr (t->feed_forward_proj, ==, "relu");

  /* BART: encoder/decoder layer counts and ffn dims */
  g_autoptr (HnModelConfig) b = load_str (
    "{\"model_type\":\"bart\",\"vocab_size\":50265,\"d_model\":768,\"encoder_layers\":6,\"decoder_layers\":6,"
    "\"encoder_attention_heads\":12,\"decoder_attention_heads\":12,\"encoder_ffn_dim\":3072,"
    "\"decoder_ffn_dim\":3072,\"is_encoder_decoder\":true,\"num_hidden_layers\":6,\"scale_embedding\":false,"
    "\"activation_function\":\"gelu\",\"max_position_embeddings\":1024}");
  g_assert_cmpint (b->encoder_ffn_dim, ==, 3072);
  g_assert_cmpint (b->decoder_attention_heads, ==, 12);
  g_assert_cmpint (b->num_attention_heads, ==, 12);
  g_assert_cmpint (b->scale_embedding, ==, 0);
}

static void
test_text_config (void)
{
  /* Gemma 3 multimodal: text fields nested, ids at the top. */
  g_autoptr (HnModelConfig) c = load_str (
    "{\"model_type\":\"gemma3\",\"architectures\":[\"Gemma3ForConditionalGeneration\"],"
    "\"eos_token_id\":[1,106],\"image_token_index\":262144,\"mm_tokens_per_image\":256,"
    "\"text_config\":{\"model_type\":\"gemma3_text\",\"vocab_size\":262208,\"hidden_size\":2560,"
    "\"intermediate_size\":10240,\"num_hidden_layers\":34,\"num_attention_heads\":8,\"num_key_value_heads\":4,"
    "\"head_dim\":256,\"rope_theta\":1000000.0,\"rms_norm_eps\":1e-06,\"sliding_window\":1024},"
    "\"vision_config\":{\"model_type\":\"siglip_vision_model\",\"hidden_size\":1152,\"num_hidden_layers\":27},"
    "\"torch_dtype\":\"bfloat16\"}");
  g_assert_true (c->text_config_resolved);
  g_assert_cmpstr (c->model_type, ==, "gemma3_text");
  g_assert_cmpstr (c->outer_model_type, ==, "gemma3");
  g_assert_cmpint (c->hidden_size, ==, 2560); /* not the vision tower's 1152 */
  g_assert_cmpint (c->num_hidden_layers, ==, 34);
  g_assert_cmpint (c->vocab_size, ==, 262208);
  g_assert_cmpint (c->num_key_value_heads, ==, 4);
  g_assert_cmpfloat (c->rope.theta, ==, 1e6);
  g_assert_cmpuint (c->n_eos_token_ids, ==, 2);
  g_assert_cmpint (c->eos_token_ids[1], ==, 106);
  g_assert_cmpstr (c->dtype, ==, "bfloat16");
  g_assert_cmpstr (c->architectures[0], ==, "Gemma3ForConditionalGeneration");
  gint64 v;
  g_assert_true (hn_model_config_get_int (c, "mm_tokens_per_image", &v, NULL));
  g_assert_cmpint (v, ==, 256);
  g_assert_null (json_object_get_member (hn_model_config_get_raw (c), "vision_config"));
  g_assert_nonnull (json_object_get_member (hn_model_config_get_outer_raw (c), "vision_config"));

  /* A text_config without its own model_type keeps the outer one. */
  g_autoptr (HnModelConfig) d = load_str (
    "{\"model_type\":\"llava\",\"text_config\":{\"vocab_size\":32064,\"hidden_size\":64,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4}}");
  g_assert_cmpstr (d->model_type, ==, "llava");
  g_assert_cmpint (d->hidden_size, ==, 64);
}

static void
test_errors (void)
{
  /* malformed JSON: file, line and column */
  g_autofree char *dir = g_dir_make_tmp ("hn-cfg-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (path, "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 12,,\n}\n", -1, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (dir, &error);
  g_assert_null (cfg);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_autofree char *want = g_strdup_printf ("%s:3:", path);
  g_assert_true (g_str_has_prefix (error->message, want));
  g_assert_nonnull (strstr (error->message, "Parse error"));
  g_clear_error (&error);
  g_unlink (path);
  g_assert_null (hn_model_config_load (dir, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_rmdir (dir);

  expect_error ("[1,2]", HN_ERROR_CORRUPT, "not a JSON object");
  expect_error ("{\"vocab_size\":3}", HN_ERROR_CORRUPT, "no \"model_type\"");
  expect_error ("{\"model_type\":\"llama\",\"hidden_size\":\"big\"}", HN_ERROR_CORRUPT,
                "test/config.json: \"hidden_size\" must be an integer");
  expect_error ("{\"model_type\":\"llama\",\"hidden_size\":64.5}", HN_ERROR_CORRUPT, "\"hidden_size\" must be an integer");
  expect_error ("{\"model_type\":\"llama\",\"tie_word_embeddings\":\"yes\"}", HN_ERROR_CORRUPT,
                "\"tie_word_embeddings\" must be true or false");
  expect_error ("{\"model_type\":\"llama\",\"eos_token_id\":[1,\"x\"]}", HN_ERROR_CORRUPT, "\"eos_token_id\"");
  expect_error ("{\"model_type\":\"llama\",\"rope_scaling\":{\"factor\":\"x\"}}", HN_ERROR_CORRUPT,
                "test/config.json: rope parameters: \"factor\" must be a number");
  expect_error ("{\"model_type\":\"llama\",\"rope_theta\":-1}", HN_ERROR_CORRUPT, "rope parameters out of range");
  expect_error ("{\"model_type\":\"llama\",\"num_attention_heads\":6,\"num_key_value_heads\":4}", HN_ERROR_CORRUPT,
                "not a multiple of num_key_value_heads");
  expect_error ("{\"model_type\":\"llama\",\"hidden_size\":0}", HN_ERROR_CORRUPT, "\"hidden_size\" is 0");
}

/* ---- generation config ---- */

static void
test_generation_config (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) mc = load_str (llama31_v4);
  g_autofree char *dir = g_dir_make_tmp ("hn-gen-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "generation_config.json", NULL);

  /* No generation_config.json: defaults + model ids. */
  g_autoptr (HnGenerationConfig) a = hn_generation_config_resolve (dir, mc, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (a->do_sample, ==, 0);
  g_assert_cmpfloat (a->temperature, ==, 1.0);
  g_assert_cmpint (a->top_k, ==, 50);
  g_assert_cmpfloat (a->top_p, ==, 1.0);
  g_assert_cmpint (a->max_length, ==, 20);
  g_assert_cmpint (a->max_new_tokens, ==, -1);
  g_assert_cmpint (a->num_beams, ==, 1);
  g_assert_cmpint (a->use_cache, ==, 1);
  g_assert_cmpint (a->early_stopping, ==, HN_EARLY_STOPPING_FALSE);
  g_assert_cmpuint (a->n_eos_token_ids, ==, 3);
  g_assert_cmpint (a->bos_token_id, ==, 128000);

  /* The file overrides the model; explicit options override the file. */
  g_assert_true (g_file_set_contents (path,
    "{\"do_sample\":true,\"temperature\":0.6,\"top_p\":0.9,\"eos_token_id\":[128001,128009],"
    "\"bad_words_ids\":[[5],[6,7]],\"suppress_tokens\":[3],\"early_stopping\":\"never\",\"num_beams\":4,"
    "\"cache_implementation\":\"static\",\"transformers_version\":\"4.45.0\",\"pad_token_id\":128004}", -1, NULL));
  g_autoptr (HnGenerationConfig) ex = hn_generation_config_new ();
  ex->temperature = 0.2;
  ex->max_new_tokens = 64;
  g_autoptr (HnGenerationConfig) b = hn_generation_config_resolve (dir, mc, ex, &error);
  g_assert_no_error (error);
  g_assert_cmpint (b->do_sample, ==, 1);
  g_assert_cmpfloat (b->temperature, ==, 0.2);
  g_assert_cmpfloat (b->top_p, ==, 0.9);
  g_assert_cmpint (b->top_k, ==, 50);
  g_assert_cmpint (b->max_new_tokens, ==, 64);
  g_assert_cmpuint (b->n_eos_token_ids, ==, 2);
  g_assert_true (hn_generation_config_is_eos (b, 128009));
  g_assert_false (hn_generation_config_is_eos (b, 128008));
  g_assert_cmpint (b->pad_token_id, ==, 128004);
  g_assert_cmpint (b->bos_token_id, ==, 128000);
  g_assert_cmpint (b->early_stopping, ==, HN_EARLY_STOPPING_NEVER);
  g_assert_cmpint (b->num_beams, ==, 4);
  g_assert_cmpstr (b->cache_implementation, ==, "static");
  g_assert_cmpuint (b->bad_words_ids->len, ==, 2);
  GArray *bw = b->bad_words_ids->pdata[1];
  g_assert_cmpuint (bw->len, ==, 2);
  g_assert_cmpint (g_array_index (bw, gint64, 1), ==, 7);
  g_assert_cmpuint (b->n_suppress_tokens, ==, 1);

  /* copy is deep */
  g_autoptr (HnGenerationConfig) c = hn_generation_config_copy (b);
  g_assert_cmpuint (c->bad_words_ids->len, ==, 2);
  g_assert_true (c->eos_token_ids != b->eos_token_ids);

  /* explicit values are validated */
  ex->top_p = 1.5;
  g_assert_null (hn_generation_config_resolve (dir, mc, ex, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "top_p"));
  g_clear_error (&error);

  /* a bad file names itself and the key */
  g_assert_true (g_file_set_contents (path, "{\"temperature\":\"hot\"}", -1, NULL));
  g_assert_null (hn_generation_config_resolve (dir, mc, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "generation_config.json: \"temperature\" must be a number"));
  g_clear_error (&error);
  /* counts are range-checked as written: -1 is not "unset", 2^40 is not 0 */
  const char *counts[][2] = {
    { "{\"max_length\": -1}", "\"max_length\" is -1, out of range" },
    { "{\"max_new_tokens\": 1099511627776}", "\"max_new_tokens\" is 1099511627776, out of range" },
    { "{\"num_beams\": -2}", "\"num_beams\" is -2, out of range" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (counts); i++)
    {
      g_assert_true (g_file_set_contents (path, counts[i][0], -1, NULL));
      g_assert_null (hn_generation_config_resolve (dir, mc, NULL, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
      if (!strstr (error->message, counts[i][1]))
        g_error ("%s: got '%s'", counts[i][0], error->message);
      g_clear_error (&error);
    }
  g_assert_true (g_file_set_contents (path, "{\"temperature\": 0.5\n \"top_k\": 3}", -1, NULL));
  g_assert_null (hn_generation_config_load (dir, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "generation_config.json:1:19: Parse error"));
  g_clear_error (&error);
  g_unlink (path);
  g_assert_null (hn_generation_config_load (dir, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_clear_error (&error);
  g_rmdir (dir);

  /* 4.x configs may carry generation keys themselves */
  g_autoptr (HnModelConfig) old = load_str (
    "{\"model_type\":\"gpt2\",\"vocab_size\":10,\"n_embd\":8,\"n_layer\":1,\"n_head\":2,"
    "\"task_specific_params\":{},\"max_length\":50,\"do_sample\":true,\"eos_token_id\":9}");
  g_autoptr (HnGenerationConfig) d = hn_generation_config_resolve (NULL, old, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (d->max_length, ==, 50);
  g_assert_cmpint (d->do_sample, ==, 1);
  g_assert_true (hn_generation_config_is_eos (d, 9));
}

/* Every config transformers 5.17 wrote for the parity fixtures loads, with
 * its generation_config.json, and its weights open. */
static void
test_parity_fixtures (void)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  g_autofree char *root = g_build_filename (src ? src : ".", "tests", "fixtures", "parity", NULL);
  g_autoptr (GDir) d = g_dir_open (root, 0, NULL);
  if (!d)
    {
      g_test_skip ("parity fixtures not available");
      return;
    }
  const char *n;
  guint count = 0;
  while ((n = g_dir_read_name (d)))
    {
      g_autofree char *dir = g_build_filename (root, n, NULL);
      g_autofree char *cfgp = g_build_filename (dir, "config.json", NULL);
      if (!g_file_test (cfgp, G_FILE_TEST_IS_REGULAR))
        continue;
      g_autoptr (GError) error = NULL;
      g_autoptr (HnModelConfig) cfg = hn_model_config_load (dir, &error);
      if (error)
        g_error ("%s: %s", n, error->message);
      g_assert_nonnull (cfg->model_type);
      /* fixtures kept for families still refused (t5gemma: encoder / decoder sub-configs) only load */
      const HnArchInfo *arch = hn_arch_lookup (cfg->model_type, NULL);
      if (!arch && hn_arch_refusal_reason (cfg->model_type))
        continue;
      g_assert_cmpint (cfg->hidden_size, >, 0);
      g_assert_cmpint (cfg->vocab_size, >, 0);
      /* state-space decoders (mamba, falcon_mamba) have no attention heads */
      if (!arch || !hn_arch_is_ssm (arch) || g_str_equal (cfg->model_type, "mamba2"))
        {
          g_assert_cmpint (cfg->num_attention_heads, >, 0);
          g_assert_cmpint (cfg->head_dim, >, 0);
        }
      g_autoptr (HnGenerationConfig) gen = hn_generation_config_resolve (dir, cfg, NULL, &error);
      if (error)
        g_error ("%s: %s", n, error->message);
      g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
      if (error)
        g_error ("%s: %s", n, error->message);
      g_assert_cmpuint (hn_safetensors_get_n_tensors (st), >, 0);
      count++;
    }
  g_assert_cmpuint (count, >=, 60);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/config/stories260k", test_stories260k);
  g_test_add_func ("/config/rope-spellings", test_rope_spellings);
  g_test_add_func ("/config/aliases", test_aliases);
  g_test_add_func ("/config/text-config", test_text_config);
  g_test_add_func ("/config/errors", test_errors);
  g_test_add_func ("/config/generation-config", test_generation_config);
  g_test_add_func ("/config/parity-fixtures", test_parity_fixtures);
  return g_test_run ();
}
