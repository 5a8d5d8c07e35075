/* The architecture registry: lookups, aliases, fail-closed errors, JSON. */
#include "transformer/registry.h"
#include "transformer/transformer.h"
#include "base/hn-error.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static void
test_lookup (void)
{
  GError *error = NULL;
  const HnArchInfo *a = hn_arch_lookup ("llama", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (a->family, ==, "llama");
  g_assert_cmpint (a->names, ==, HN_NAMES_LLAMA);
  const HnArchInfo *f = hn_arch_lookup ("RefinedWebModel", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (f->model_type, ==, "falcon");
  const HnArchInfo *g = hn_arch_lookup ("gemma2", &error);
  g_assert_no_error (error);
  g_assert_true (g->quirks & HN_QUIRK_SOFTCAP);
  g_assert_true (g->quirks & HN_QUIRK_NORM_PLUS_ONE);
  g_assert_cmpint (g->block, ==, HN_BLOCK_SANDWICH);
  /* encoders and encoder-decoders are their own kinds */
  const HnArchInfo *x = hn_arch_lookup ("xlm_roberta", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (x->model_type, ==, "xlm-roberta");
  g_assert_true (hn_arch_is_encoder (x) && !hn_arch_is_seq2seq (x));
  const HnArchInfo *t = hn_arch_lookup ("umt5", &error);
  g_assert_no_error (error);
  g_assert_true (hn_arch_is_seq2seq (t) && !hn_arch_is_encoder (t));
  g_assert_true (t->quirks & HN_QUIRK_REL_BIAS_PER_LAYER);
  g_assert_false (hn_arch_is_encoder (a) || hn_arch_is_seq2seq (a));
}

static void
test_unknown (void)
{
  GError *error = NULL;
  /* a refused type names itself and its reason */
  g_assert_null (hn_arch_lookup ("reformer", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "\"reformer\""));
  g_assert_nonnull (strstr (error->message, "LSH"));
  g_clear_error (&error);
  /* an unknown one lists what is known */
  g_assert_null (hn_arch_lookup ("no-such-model", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "\"no-such-model\""));
  g_assert_nonnull (strstr (error->message, "llama"));
  g_clear_error (&error);
  g_assert_null (hn_arch_lookup (NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
}

static void
test_tasks (void)
{
  gsize n;
  const HnArchInfo *a = hn_arch_list (&n);
  g_assert_cmpuint (n, >=, 20);
  for (gsize i = 0; i < n; i++)
    {
      GError *error = NULL;
      gboolean ok = hn_arch_require_task (&a[i], HN_TASK_TRAIN, &error);
      if (!ok)
        {
          g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
          g_assert_nonnull (strstr (error->message, a[i].model_type));
          g_clear_error (&error);
        }
      /* model types are unique, aliases do not shadow them */
      for (gsize j = i + 1; j < n; j++)
        g_assert_cmpstr (a[i].model_type, !=, a[j].model_type);
    }
}

static void
test_json (void)
{
  g_autofree char *s = hn_arch_list_to_json ();
  g_autoptr (JsonParser) p = json_parser_new ();
  GError *error = NULL;
  g_assert_true (json_parser_load_from_data (p, s, -1, &error));
  JsonArray *arr = json_node_get_array (json_parser_get_root (p));
  gsize n;
  hn_arch_list (&n);
  g_assert_cmpuint (json_array_get_length (arr), ==, n);
  JsonObject *o = json_array_get_object_element (arr, 0);
  g_assert_cmpstr (json_object_get_string_member (o, "model_type"), ==, "llama");
  g_assert_true (json_object_has_member (json_object_get_object_member (o, "tasks"), "generate"));
}

/* The generated docs page: the count and one row per registry entry. */
static void
test_markdown (void)
{
  g_autofree char *md = hn_arch_list_to_markdown ();
  g_autofree char *count = g_strdup_printf ("Parity-verified architectures: **%u**", hn_arch_count_parity_verified ());
  g_assert_nonnull (strstr (md, count));
  gsize n;
  const HnArchInfo *a = hn_arch_list (&n);
  for (gsize i = 0; i < n; i++)
    {
      g_autofree char *row = g_strdup_printf ("\n| `%s` | %s |", a[i].model_type, a[i].family);
      g_assert_nonnull (strstr (md, row));
    }
  const char *refused = strstr (md, "\n## Refused model types");
  g_assert_nonnull (refused);
  guint rows = 0;
  for (const char *p = md; (p = strstr (p, "\n| `")) && p < refused; p++)
    rows++;
  g_assert_cmpuint (rows, ==, n);
  gsize n_ref;
  const HnArchRefusal *r = hn_arch_refusals (&n_ref);
  for (gsize i = 0; i < n_ref; i++)
    {
      g_autofree char *row = g_strdup_printf ("\n| `%s` | %s |", r[i].model_type, r[i].reason);
      g_assert_nonnull (strstr (refused, row));
    }
}

/* The README states the count; it must be the one the registry computes. */
static void
test_readme_count (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "README.md", NULL);
  g_autofree char *text = NULL;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, &error));
  g_autofree char *want = g_strdup_printf ("Parity-verified architectures: **%u**", hn_arch_count_parity_verified ());
  if (!strstr (text, want))
    g_test_message ("README.md must say \"%s\"", want);
  g_assert_nonnull (strstr (text, want));
}

/* Every model_type of transformers' causal-LM, masked-LM and seq2seq-LM mappings (listed on the
 * device by tests/fixtures/list_lm_types.py) is registered with a parity fixture that exists, or
 * refused by name with a reason; the refusal list holds nothing else. */
static void
test_lm_mappings (void)
{
  g_autofree char *path =
    g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "lm_model_types.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  GError *error = NULL;
  g_assert_true (json_parser_load_from_file (p, path, &error));
  g_assert_no_error (error);
  JsonArray *types = json_object_get_array_member (json_node_get_object (json_parser_get_root (p)), "model_types");
  guint n_types = json_array_get_length (types), n_verified = 0, n_refused = 0;
  g_assert_cmpuint (n_types, >, 200);
  g_autoptr (GHashTable) listed = g_hash_table_new (g_str_hash, g_str_equal);
  for (guint i = 0; i < n_types; i++)
    {
      const char *mt = json_array_get_string_element (types, i);
      g_hash_table_add (listed, (gpointer) mt);
      const char *reason = hn_arch_refusal_reason (mt);
      const HnArchInfo *a = hn_arch_lookup (mt, &error);
      if (a)
        {
          if (reason || !(a->tasks & HN_TASK_LOGITS) || !a->fixture)
            g_test_message ("%s: registered but refused or without a verified fixture", mt);
          g_assert_null (reason);
          g_assert_true (a->tasks & HN_TASK_LOGITS);
          g_assert_nonnull (a->fixture);
          g_autofree char *exp = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity",
                                                   a->fixture, "expected.json", NULL);
          g_assert_true (g_file_test (exp, G_FILE_TEST_EXISTS));
          n_verified++;
          continue;
        }
      if (!reason)
        g_test_message ("%s: neither registered nor refused by name", mt);
      g_assert_nonnull (reason);
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, reason));
      g_clear_error (&error);
      n_refused++;
    }
  gsize n_ref;
  const HnArchRefusal *r = hn_arch_refusals (&n_ref);
  for (gsize i = 0; i < n_ref; i++)
    {
      g_assert_true (g_hash_table_contains (listed, r[i].model_type));
      g_assert_true (strlen (r[i].reason) > 10);
      if (i > 0)
        g_assert_cmpstr (r[i - 1].model_type, <, r[i].model_type);
    }
  g_assert_cmpuint (n_refused, ==, n_ref);
  g_test_message ("%u listed model_types: %u verified, %u refused by name", n_types, n_verified, n_refused);
}

/* The refused multimodal packages: none is a package alias, each is sorted, refused by its name and
 * by its text model's (a text model of the LM mappings in `refusals` with the same reason), listed on
 * the docs page; a checkpoint of one fails closed even when its text_config names a registered model
 * (MiniMax M3's says minimax_m2). */
static void
test_package_refusals (void)
{
  gsize n, n_pk;
  const HnArchPackageRefusal *r = hn_arch_package_refusals (&n);
  const HnArchPackage *pk = hn_arch_packages (&n_pk);
  g_assert_cmpuint (n, >=, 5);
  g_autofree char *md = hn_arch_list_to_markdown ();
  const char *section = strstr (md, "\n## Refused multimodal packages");
  g_assert_nonnull (section);
  for (gsize i = 0; i < n; i++)
    {
      if (i > 0)
        g_assert_cmpstr (r[i - 1].package, <, r[i].package);
      for (gsize j = 0; j < n_pk; j++)
        g_assert_cmpstr (pk[j].package, !=, r[i].package);
      g_assert_true (strlen (r[i].reason) > 10);
      const char *both[] = { r[i].package, r[i].text_model_type };
      for (guint k = 0; k < G_N_ELEMENTS (both); k++)
        {
          GError *error = NULL;
          g_assert_cmpstr (hn_arch_refusal_reason (both[k]), ==, r[i].reason);
          g_assert_null (hn_arch_lookup (both[k], &error));
          g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
          g_assert_nonnull (strstr (error->message, r[i].reason));
          g_clear_error (&error);
        }
      g_autofree char *row = g_strdup_printf ("\n| `%s` | `%s` | %s |", r[i].package, r[i].text_model_type, r[i].reason);
      g_assert_nonnull (strstr (section, row));
    }

  GError *error = NULL;
  static const char json[] = "{\"model_type\": \"minimax_m3_vl\", \"text_config\": {\"model_type\": \"minimax_m2\", "
                             "\"vocab_size\": 128, \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
                             "\"intermediate_size\": 32, \"num_local_experts\": 4, \"num_experts_per_tok\": 2}}";
  g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data (json, -1, "config.json", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (cfg->model_type, ==, "minimax_m2");
  HnTransformerHParams hp;
  g_assert_false (hn_transformer_hparams_resolve (&hp, cfg, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "\"minimax_m3_vl\""));
  g_assert_nonnull (strstr (error->message, "lightning indexer"));
  g_clear_error (&error);
}

/* llama4_text's per-layer wiring from Llama4TextConfig: explicit lists, the config class's defaults
 * (every 4th layer NoPE, chunked = rotary, MoE every interleave_moe_layer_step-th) and what fails
 * closed. */
static gboolean
llama4_resolve (HnTransformerHParams *hp, const char *extra, GError **error)
{
  g_autofree char *json = g_strdup_printf ("{\"model_type\": \"llama4_text\", \"vocab_size\": 128, \"hidden_size\": 32, "
                                           "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
                                           "\"intermediate_size\": 32, \"intermediate_size_mlp\": 64, "
                                           "\"num_local_experts\": 4, \"num_experts_per_tok\": 1, "
                                           "\"max_position_embeddings\": 64%s}", extra);
  g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data (json, -1, "config.json", error);
  g_assert_nonnull (cfg);
  gboolean ok = hn_transformer_hparams_resolve (hp, cfg, error);
  return ok;
}

static void
test_llama4_config (void)
{
  GError *error = NULL;
  HnTransformerHParams hp;
  g_assert_true (llama4_resolve (&hp, ", \"num_hidden_layers\": 2, \"no_rope_layers\": [1, 0], \"moe_layers\": [1], "
                                      "\"attention_chunk_size\": 4, \"floor_scale\": 4, \"attn_scale\": 0.5, "
                                      "\"layer_types\": [\"chunked_attention\", \"full_attention\"]", &error));
  g_assert_no_error (error);
  g_assert_cmpint (hp.layer_rope[0], ==, 1);
  g_assert_cmpint (hp.layer_rope[1], ==, 0);
  g_assert_cmpint (hp.layer_chunked[0], ==, 1);
  g_assert_cmpint (hp.layer_chunked[1], ==, 0);
  g_assert_cmpint (hp.local_chunk, ==, 4);
  g_assert_cmpint (hp.layer_ffn[0], ==, 2);
  g_assert_cmpint (hp.layer_ffn[1], ==, 1);
  g_assert_cmpint (hp.ffn, ==, 64);
  g_assert_cmpint (hp.moe_ffn, ==, 32);
  g_assert_cmpint (hp.shared_ffn, ==, 32);
  g_assert_true (hp.qk_l2_norm && hp.moe_scale_input && hp.rope_style == HN_ROPE_GPTJ);
  g_assert_cmpfloat (hp.attn_temp_floor, ==, 4.0f);
  g_assert_cmpfloat (hp.attn_temp_scale, ==, 0.5f);
  hn_transformer_hparams_clear (&hp);

  /* defaults: NoPE every 4th layer, chunked where rotary, MoE on layers 1, 3, 5, 7; no temperature or
   * q/k norms when switched off */
  g_assert_true (llama4_resolve (&hp, ", \"num_hidden_layers\": 8, \"interleave_moe_layer_step\": 2, "
                                      "\"attn_temperature_tuning\": false, \"use_qk_norm\": false", &error));
  g_assert_no_error (error);
  for (int i = 0; i < 8; i++)
    {
      g_assert_cmpint (hp.layer_rope[i], ==, (i + 1) % 4 != 0);
      g_assert_cmpint (hp.layer_chunked[i], ==, hp.layer_rope[i]);
      g_assert_cmpint (hp.layer_ffn[i], ==, i % 2 ? 1 : 2);
    }
  g_assert_cmpint (hp.local_chunk, ==, 8192);
  g_assert_false (hp.qk_l2_norm);
  g_assert_cmpfloat (hp.attn_temp_floor, ==, 0.0f);
  hn_transformer_hparams_clear (&hp);

  /* fail closed, naming what */
  static const char *const bad[][2] = {
    { ", \"num_hidden_layers\": 2, \"sliding_window\": 4", "sliding window" },
    { ", \"num_hidden_layers\": 2, \"layer_types\": [\"sliding_attention\", \"full_attention\"]", "sliding_attention" },
    { ", \"num_hidden_layers\": 2, \"moe_layers\": [2]", "moe_layers" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_false (llama4_resolve (&hp, bad[i][0], &error));
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, bad[i][1]));
      g_clear_error (&error);
      hn_transformer_hparams_clear (&hp);
    }
}

/* A config of model_type `mt` (4 layers, 4 heads of 8, 2 K/V heads) with `extra` members, resolved. */
static gboolean
tiny_resolve (HnTransformerHParams *hp, const char *mt, const char *extra, GError **error)
{
  g_autofree char *json = g_strdup_printf ("{\"model_type\": \"%s\", \"vocab_size\": 128, \"hidden_size\": 32, "
                                           "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
                                           "\"num_key_value_heads\": 2, \"head_dim\": 8, \"intermediate_size\": 64, "
                                           "\"max_position_embeddings\": 64%s}", mt, extra);
  g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data (json, -1, "config.json", error);
  g_assert_nonnull (cfg);
  return hn_transformer_hparams_resolve (hp, cfg, error);
}

/* muse_glimmer_text without layer_types / layer_rope_theta / sliding_window: MuseGlimmerTextConfig's
 * defaults (every 4th layer from the last NoPE and full, the others sliding over 2048); the scales it
 * reads. step3p5: heads from per_layer_config or num_sliding_attention_heads, the SwiGLU limits, the
 * sparse layers of moe_layers_enum, and what fails closed. */
static void
test_muse_step_config (void)
{
  GError *error = NULL;
  HnTransformerHParams hp;
  g_assert_true (tiny_resolve (&hp, "muse_glimmer_text", ", \"qk_scale_factor\": 2.0, \"output_multiplier\": 0.5", &error));
  g_assert_no_error (error);
  g_assert_cmpint (hp.sliding_window, ==, 2048);
  for (int i = 0; i < 4; i++)
    {
      g_assert_cmpint (hp.layer_sliding[i], ==, i != 3);
      g_assert_cmpint (hp.layer_rope[i], ==, i != 3);
    }
  g_assert_cmpfloat_with_epsilon (hp.attn_scale, 2.0 / sqrt (8.0), 1e-6);
  g_assert_cmpfloat_with_epsilon (hp.logits_scale, 0.5, 1e-6);
  g_assert_cmpfloat_with_epsilon (hp.final_softcap, 20.0, 1e-6);
  g_assert_cmpfloat_with_epsilon (hp.post_norm_eps, 1e-8, 1e-12);
  g_assert_true (hp.final_norm_plain && hp.norm_plus_one && hp.embed_norm && hp.qk_norm_head);
  hn_transformer_hparams_clear (&hp);
  /* a nonzero base other than rope_theta: the model would rotate by rope_theta; refused */
  g_assert_false (tiny_resolve (&hp, "muse_glimmer_text", ", \"layer_rope_theta\": [10000.0, 0, 5000.0, 0]", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  hn_transformer_hparams_clear (&hp);

  const char *moe = ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                    "\"share_expert_dim\": 16, \"sliding_window\": 4, \"layer_types\": [\"full_attention\", "
                    "\"sliding_attention\", \"sliding_attention\", \"full_attention\"]";
  g_autofree char *a = g_strdup_printf ("%s, \"num_sliding_attention_heads\": 8, \"moe_layers_enum\": \"2,3,4\", "
                                        "\"swiglu_limits\": [null, 0, 0, 7], \"swiglu_limits_shared\": [0, 16, 0, 0.5]",
                                        moe);
  g_assert_true (tiny_resolve (&hp, "step3p5", a, &error));
  g_assert_no_error (error);
  g_assert_cmpint (hp.n_head, ==, 8);
  g_assert_cmpint (hp.layer_n_head[0], ==, 4);
  g_assert_cmpint (hp.layer_n_head[1], ==, 8);
  g_assert_cmpint (hp.moe_first_dense, ==, 2);
  g_assert_cmpint (hp.shared_ffn, ==, 16);
  g_assert_true (hp.attn_gate_per_head && hp.moe_norm_topk && hp.moe_route == HN_MOE_ROUTE_SIGMOID_TOPK);
  g_assert_cmpfloat (hp.layer_expert_glu_limit[0], ==, 0.0f);
  g_assert_cmpfloat (hp.layer_expert_glu_limit[3], ==, 7.0f);
  g_assert_cmpfloat (hp.layer_glu_limit[1], ==, 16.0f);
  hn_transformer_hparams_clear (&hp);
  g_autofree char *b = g_strdup_printf ("%s, \"per_layer_config\": {\"2\": {\"num_attention_heads\": 6}}", moe);
  g_assert_true (tiny_resolve (&hp, "step3p5", b, &error)); /* as saved: it wins over the sliding rule */
  g_assert_no_error (error);
  g_assert_cmpint (hp.layer_n_head[1], ==, 4);
  g_assert_cmpint (hp.layer_n_head[2], ==, 6);
  g_assert_cmpint (hp.moe_first_dense, ==, 3); /* Step3p7TextConfig's default: layers 3 on */
  hn_transformer_hparams_clear (&hp);
  static const char *const bad[] = {
    ", \"gating\": \"per-element\"", ", \"gating\": false", ", \"use_bidirectional_attention\": true",
    ", \"per_layer_config\": {\"1\": {\"head_dim\": 16}}", ", \"moe_layers_enum\": \"1,3\"",
  };
  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *c = g_strdup_printf ("%s%s", moe, bad[i]);
      g_assert_false (tiny_resolve (&hp, "step3p5", c, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_clear_error (&error);
      hn_transformer_hparams_clear (&hp);
    }
  g_autofree char *d = g_strdup_printf ("%s, \"swiglu_limits\": [0, 0, 7]", moe);
  g_assert_false (tiny_resolve (&hp, "step3p5", d, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_clear_error (&error);
  hn_transformer_hparams_clear (&hp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/registry/lookup", test_lookup);
  g_test_add_func ("/registry/unknown", test_unknown);
  g_test_add_func ("/registry/tasks", test_tasks);
  g_test_add_func ("/registry/json", test_json);
  g_test_add_func ("/registry/readme-count", test_readme_count);
  g_test_add_func ("/registry/markdown", test_markdown);
  g_test_add_func ("/registry/llama4-config", test_llama4_config);
  g_test_add_func ("/registry/muse-step-config", test_muse_step_config);
  g_test_add_func ("/registry/lm-mappings", test_lm_mappings);
  g_test_add_func ("/registry/package-refusals", test_package_refusals);
  return g_test_run ();
}
