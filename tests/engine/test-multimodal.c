/* Multimodal packages whose text backbone we run (llava, qwen2_vl, gemma3,
 * mllama...): the llama fixture repackaged as a llava folder, in the
 * transformers 5 layout (model.language_model.X, lm_head) and the 4.x one
 * (language_model.model.X, language_model.lm_head), gives transformers'
 * llama logits; the vision tower is not run but survives a checkpoint
 * write; an unknown tensor inside the text model is still an error. */
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "encdec/encoder.h"
#include "formats/safetensors.h"
#include "transformer/transformer.h"
#include "parity-util.h"
#include "train/checkpoint.h"
#include "vk/hn-vk.h"

#include <glib/gstdio.h>
#include <string.h>

/* Writes DIR/config.json (llava around the fixture's config) and
 * DIR/model.safetensors (the fixture's tensors renamed, plus two tower
 * tensors and, if given, one stray tensor). */
static char *
make_llava (const char *fixture, gboolean v5, const char *stray)
{
  g_autofree char *cfg_path = g_build_filename (fixture, "config.json", NULL);
  g_autofree char *text_cfg = NULL;
  g_assert_true (g_file_get_contents (cfg_path, &text_cfg, NULL, NULL));
  char *dir = g_dir_make_tmp ("hn-llava-XXXXXX", NULL);
  g_autofree char *cfg = g_strdup_printf ("{\"model_type\": \"llava\", \"architectures\": [\"LlavaForConditionalGeneration\"], "
                                          "\"image_token_index\": 3, \"vision_config\": {\"model_type\": "
                                          "\"clip_vision_model\", \"hidden_size\": 16}, \"text_config\": %s}",
                                          text_cfg);
  g_autofree char *out_cfg = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (out_cfg, cfg, -1, NULL));

  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (fixture, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_autofree char *name = NULL;
      if (g_str_has_prefix (t->name, "model."))
        name = v5 ? g_strconcat ("model.language_model.", t->name + 6, NULL) : g_strconcat ("language_model.", t->name, NULL);
      else
        name = v5 ? g_strdup (t->name) : g_strconcat ("language_model.", t->name, NULL);
      g_assert_true (hn_safetensors_writer_add (w, name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE, &error));
    }
  float tower[16];
  for (int i = 0; i < 16; i++)
    tower[i] = (float) i;
  gint64 shape[] = { 4, 4 };
  const char *towers[] = { v5 ? "model.vision_tower.embeddings.weight" : "vision_tower.embeddings.weight",
                           v5 ? "model.multi_modal_projector.linear_1.weight" : "multi_modal_projector.linear_1.weight",
                           stray };
  for (guint i = 0; i < G_N_ELEMENTS (towers) && towers[i]; i++)
    g_assert_true (hn_safetensors_writer_add (w, towers[i], HN_ST_DTYPE_F32, 2, shape, tower, sizeof tower, FALSE, &error));
  g_autofree char *out_st = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, out_st, &error));
  g_assert_no_error (error);
  return dir;
}

static void
check_layout (gboolean v5)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *fixture = parity_fixture_dir ("llama");
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *exp = parity_load_expected (p, "llama");
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");

  g_autofree char *dir = make_llava (fixture, v5, NULL);
  HnTransformer *m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_autofree float *logits = g_new (float, (gsize) ids->len * hp->vocab);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (v5 ? "llava (5.x layout)" : "llava (4.x layout)", logits,
                         json_object_get_array_member (exp, "logits"), (gsize) ids->len * hp->vocab);

  /* the towers are written back untouched, under their own names */
  g_autofree char *out = g_dir_make_tmp ("hn-llava-out-XXXXXX", NULL);
  g_assert_true (hn_checkpoint_write_model (m, out, &error));
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) back = hn_safetensors_open (out, &error);
  g_assert_no_error (error);
  const HnSafetensorInfo *tw = hn_safetensors_lookup (back, v5 ? "model.vision_tower.embeddings.weight"
                                                                : "vision_tower.embeddings.weight");
  g_assert_nonnull (tw);
  g_assert_cmpfloat (((const float *) tw->data)[5], ==, 5.0f);
  g_assert_nonnull (hn_safetensors_lookup (back, v5 ? "model.language_model.layers.0.self_attn.q_proj.weight"
                                                    : "language_model.model.layers.0.self_attn.q_proj.weight"));
  hn_transformer_free (m);
  hn_folder_remove_tree (out);
  hn_folder_remove_tree (dir);

  /* a tensor inside the text model that the graph does not know still fails closed */
  g_autofree char *bad = make_llava (fixture, v5, v5 ? "model.language_model.layers.0.mystery.weight"
                                                     : "language_model.model.layers.0.mystery.weight");
  g_assert_null (hn_transformer_load (ctx, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "mystery"));
  hn_folder_remove_tree (bad);
}

static void test_v5 (void) { check_layout (TRUE); }
static void test_v4 (void) { check_layout (FALSE); }

/* Every package alias of the registry (hn_arch_packages): its text model's fixture repackaged in the
 * package's layout (hn_arch_package_tensor_name) under the package's model_type gives transformers'
 * logits of the text model. */

/* A folder with `package`'s config around `fixture`'s text config and the fixture's tensors renamed to
 * `layout`, plus a 4-value tensor `extra` when given. */
static char *
make_package (const char *package, HnPackageLayout layout, const char *fixture_name, const char *extra)
{
  GError *error = NULL;
  g_autofree char *fixture = parity_fixture_dir (fixture_name);
  g_autofree char *cfg_path = g_build_filename (fixture, "config.json", NULL);
  g_autofree char *text_cfg = NULL;
  g_assert_true (g_file_get_contents (cfg_path, &text_cfg, NULL, NULL));
  char *dir = g_dir_make_tmp ("hn-package-XXXXXX", NULL);
  /* the omni models nest their thinker's config: thinker_config.text_config beside the talker's */
  g_autofree char *cfg = layout == HN_PACKAGE_OMNI
                           ? g_strdup_printf ("{\"model_type\": \"%s\", \"enable_audio_output\": true, "
                                              "\"thinker_config\": {\"model_type\": \"%s_thinker\", "
                                              "\"audio_config\": {\"d_model\": 16}, \"vision_config\": "
                                              "{\"hidden_size\": 16}, \"text_config\": %s}, \"talker_config\": "
                                              "{\"hidden_size\": 16, \"vocab_size\": 64}}",
                                              package, package, text_cfg)
                           : g_strdup_printf ("{\"model_type\": \"%s\", \"vision_config\": {\"hidden_size\": 16}, "
                                              "\"text_config\": %s}", package, text_cfg);
  g_autofree char *out_cfg = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (out_cfg, cfg, -1, NULL));
  g_autoptr (HnSafetensors) st = hn_safetensors_open (fixture, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint t = 0; t < hn_safetensors_get_n_tensors (st); t++)
    {
      const HnSafetensorInfo *ti = hn_safetensors_get_nth (st, t);
      g_autofree char *name = hn_arch_package_tensor_name (layout, ti->name);
      g_assert_true (hn_safetensors_writer_add (w, name, ti->dtype, ti->ndim, ti->shape, ti->data, ti->nbytes, FALSE, &error));
    }
  static const float four[4] = { 1, 2, 3, 4 };
  if (extra)
    g_assert_true (hn_safetensors_writer_add (w, extra, HN_ST_DTYPE_F32, 1, (gint64[]) { 4 }, four, sizeof four, FALSE,
                                              &error));
  g_autofree char *out_st = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, out_st, &error));
  g_assert_no_error (error);
  return dir;
}

/* The logits of the package in `dir` against `fixture`'s transformers logits. */
static void
check_package_logits (HnVkContext *ctx, const char *dir, const char *fixture, const char *what)
{
  GError *error = NULL;
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *exp = parity_load_expected (p, fixture);
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  if (hn_arch_is_encoder (hn_arch_lookup (json_object_get_string_member (exp, "model_type"), NULL)))
    {
      /* a masked-LM package (modernvbert): the encoder's logits */
      g_autoptr (HnEncoder) e = hn_encoder_load (ctx, dir, &error);
      g_assert_no_error (error);
      int V = hn_encoder_get_vocab (e);
      g_autofree float *lg = g_new (float, (gsize) ids->len * V);
      g_assert_true (hn_encoder_logits (e, (const int32_t *) ids->data, NULL, (int) ids->len, lg, &error));
      g_assert_no_error (error);
      parity_compare_logits (what, lg, json_object_get_array_member (exp, "logits"), (gsize) ids->len * V);
      return;
    }
  HnTransformer *m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_autofree float *logits = g_new (float, (gsize) ids->len * hp->vocab);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (what, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * hp->vocab);
  hn_transformer_free (m);
}

/* m written back (hn_checkpoint_write_model) holds every tensor of src_dir under its own name, byte
 * for byte, and must_have (may be NULL) among them: the towers and unread layers copied, the text
 * model's tensors written from the device. */
static void
assert_rewrite_identical (HnTransformer *m, const char *src_dir, const char *must_have)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_dir_make_tmp ("hn-package-out-XXXXXX", NULL);
  gboolean wrote = hn_checkpoint_write_model (m, out, &error);
  g_assert_no_error (error);
  g_assert_true (wrote);
  g_autoptr (HnSafetensors) back = hn_safetensors_open (out, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) src = hn_safetensors_open (src_dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_safetensors_get_n_tensors (back), ==, hn_safetensors_get_n_tensors (src));
  for (guint t = 0; t < hn_safetensors_get_n_tensors (src); t++)
    {
      const HnSafetensorInfo *a = hn_safetensors_get_nth (src, t);
      const HnSafetensorInfo *b = hn_safetensors_lookup (back, a->name);
      g_assert_nonnull (b);
      g_assert_cmpuint (b->nbytes, ==, a->nbytes);
      g_assert_true (memcmp (a->data, b->data, a->nbytes) == 0);
    }
  if (must_have)
    g_assert_nonnull (hn_safetensors_lookup (back, must_have));
  hn_folder_remove_tree (out);
}


static void
test_packages (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  gsize n;
  const HnArchPackage *pk = hn_arch_packages (&n);
  g_assert_cmpuint (n, >=, 20);
  for (gsize i = 0; i < n; i++)
    {
      /* the package resolves to its text model's registry row */
      const HnArchInfo *arch = hn_arch_lookup (pk[i].package, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (arch->model_type, ==, pk[i].text_model_type);
      g_assert_nonnull (arch->fixture);
      g_autofree char *dir = make_package (pk[i].package, pk[i].layout, arch->fixture, NULL);
      g_autofree char *what = g_strdup_printf ("%s (%s)", pk[i].package, pk[i].text_model_type);
      check_package_logits (ctx, dir, arch->fixture, what);
      hn_folder_remove_tree (dir);
    }
}

/* granite4_vision's text_config names its own model_type, granite4_vision_text (Granite4VisionTextModel,
 * granite's math): the granite fixture under that name in the package layout gives granite's logits. */
static void
test_granite4_vision_text (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *dir = make_package ("granite4_vision", HN_PACKAGE_LANGUAGE_MODEL, "granite", NULL);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, cfg, &error));
  g_assert_no_error (error);
  JsonObject *tc = json_object_get_object_member (json_node_get_object (json_parser_get_root (p)), "text_config");
  g_assert_cmpstr (json_object_get_string_member (tc, "model_type"), ==, "granite");
  json_object_set_string_member (tc, "model_type", "granite4_vision_text");
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, json_parser_get_root (p));
  g_assert_true (json_generator_to_file (gen, cfg, &error));
  g_assert_no_error (error);
  check_package_logits (ctx, dir, "granite", "granite4_vision (text_config granite4_vision_text)");
  hn_folder_remove_tree (dir);
}

/* GLM-OCR and GLM-4.5V checkpoints carry a multi-token-prediction layer after the decoder layers
 * (layers.16, layers.46 of the real models), which transformers skips on load
 * (_keys_to_ignore_on_load_unexpected): it loads and is written back untouched; another layer past the
 * last still fails closed. */
static void
test_glm_mtp_layers (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  static const char *const cases[][3] = {
    { "glm_ocr", "glm_ocr_text", "model.language_model.layers.16.eh_proj.weight" },
    { "glm4v_moe", "glm4v_moe_text", "model.language_model.layers.46.eh_proj.weight" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *dir = make_package (cases[i][0], HN_PACKAGE_LANGUAGE_MODEL, cases[i][1], cases[i][2]);
      check_package_logits (ctx, dir, cases[i][1], cases[i][0]);
      HnTransformer *m = hn_transformer_load (ctx, dir, &error);
      g_assert_no_error (error);
      /* every tensor comes back as it went in: the MTP layer copied, the text model's (stacked experts
       * too) written from the device */
      assert_rewrite_identical (m, dir, cases[i][2]);
      hn_transformer_free (m);
      hn_folder_remove_tree (dir);

      g_autofree char *bad = make_package (cases[i][0], HN_PACKAGE_LANGUAGE_MODEL, cases[i][1],
                                           "model.language_model.layers.17.eh_proj.weight");
      g_assert_null (hn_transformer_load (ctx, bad, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, "layers.17"));
      g_clear_error (&error);
      hn_folder_remove_tree (bad);
    }
}

/* The omni packages keep the thinker's text model at model.X beside audio_tower and visual (a thinker
 * saved alone) or at thinker.model.X beside thinker.audio_tower, thinker.visual, the talker and
 * token2wav / code2wav (the omni model, config thinker_config.text_config): the towers load unrun and
 * come back unchanged in a written checkpoint; a tensor of the text model's that the graph does not
 * know fails closed in either layout. */
static void
test_omni_layouts (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  static const struct {
    const char *package, *text;
    HnPackageLayout layout;
    const char *tower, *stray;
  } cases[] = {
    { "qwen2_5_omni_thinker", "qwen2_5_omni_text", HN_PACKAGE_THINKER, "audio_tower.conv1.bias",
      "model.layers.0.mystery.weight" },
    { "qwen2_5_omni", "qwen2_5_omni_text", HN_PACKAGE_OMNI, "token2wav.code2wav_dit_model.time_embed.bias",
      "thinker.model.layers.0.mystery.weight" },
    { "qwen3_omni_moe_thinker", "qwen3_omni_moe_text", HN_PACKAGE_THINKER, "visual.patch_embed.proj.bias",
      "model.norm.mystery" },
    { "qwen3_omni_moe", "qwen3_omni_moe_text", HN_PACKAGE_OMNI, "talker.model.norm.weight",
      "thinker.model.layers.1.mlp.mystery" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const HnArchPackage *pk = hn_arch_package_lookup (cases[i].package);
      g_assert_nonnull (pk);
      g_assert_cmpint (pk->layout, ==, cases[i].layout);
      g_autofree char *dir = make_package (cases[i].package, cases[i].layout, cases[i].text, cases[i].tower);
      g_autofree char *what = g_strdup_printf ("%s (with %s)", cases[i].package, cases[i].tower);
      check_package_logits (ctx, dir, cases[i].text, what);
      HnTransformer *m = hn_transformer_load (ctx, dir, &error);
      g_assert_no_error (error);
      assert_rewrite_identical (m, dir, NULL);
      hn_transformer_free (m);
      hn_folder_remove_tree (dir);

      g_autofree char *bad = make_package (cases[i].package, cases[i].layout, cases[i].text, cases[i].stray);
      g_assert_null (hn_transformer_load (ctx, bad, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, "mystery"));
      g_clear_error (&error);
      hn_folder_remove_tree (bad);
    }
}

/* ERNIE-4.5-VL on text alone runs its text experts (mlp.text_moe): the vision experts (mlp.vision_moe)
 * load unrun and are written back unchanged. */
static void
test_ernie_vl_vision_experts (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *dir = make_package ("ernie4_5_vl_moe", HN_PACKAGE_LANGUAGE_MODEL, "ernie4_5_vl_moe_text", NULL);
  check_package_logits (ctx, dir, "ernie4_5_vl_moe_text", "ernie4_5_vl_moe (vision experts beside)");
  HnTransformer *m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autofree char *out = g_dir_make_tmp ("hn-ernie-out-XXXXXX", NULL);
  gboolean wrote = hn_checkpoint_write_model (m, out, &error);
  g_assert_no_error (error);
  g_assert_true (wrote);
  g_autoptr (HnSafetensors) back = hn_safetensors_open (out, &error);
  g_assert_no_error (error);
  const char *vn = "model.language_model.layers.1.mlp.vision_moe.experts.gate_up_proj";
  g_autoptr (HnSafetensors) src = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  const HnSafetensorInfo *a = hn_safetensors_lookup (src, vn), *b = hn_safetensors_lookup (back, vn);
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_cmpuint (a->nbytes, ==, b->nbytes);
  g_assert_true (memcmp (a->data, b->data, a->nbytes) == 0);
  hn_transformer_free (m);
  hn_folder_remove_tree (out);
  hn_folder_remove_tree (dir);
}

/* modernvbert keeps modernbert's masked-LM head outside its text model (projection_head, lm_head): the
 * vision tower loads as a tower, not run; a tensor inside the text model that modernbert does not have
 * still fails closed. */
static void
test_modernvbert_towers (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *dir = make_package ("modernvbert", HN_PACKAGE_TEXT_MODEL_MLM, "modernbert",
                                       "model.vision_model.embeddings.patch_embedding.bias");
  check_package_logits (ctx, dir, "modernbert", "modernvbert (with its vision tower)");
  hn_folder_remove_tree (dir);
  g_autofree char *bad = make_package ("modernvbert", HN_PACKAGE_TEXT_MODEL_MLM, "modernbert",
                                       "model.text_model.layers.0.mystery.weight");
  g_assert_null (hn_encoder_load (ctx, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "mystery"));
  hn_folder_remove_tree (bad);
}

/* mllama on text alone skips its cross-attention layers: their tensors (and embed_tokens' 8 rows past the
 * vocabulary) load unread and are written back unchanged, the self-attention layers under their own
 * checkpoint indices; a cross-attention layer 0 fails closed. */
static void
test_mllama_cross_attention_layers (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *src = parity_fixture_dir ("mllama_text_model");
  HnTransformer *m = hn_transformer_load (ctx, src, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) in = hn_safetensors_open (src, &error);
  g_assert_no_error (error);
  g_assert_nonnull (hn_safetensors_lookup (in, "model.layers.1.cross_attn.q_proj.weight"));
  assert_rewrite_identical (m, src, NULL);
  hn_transformer_free (m);

  /* cross_attention_layers [0, 1]: transformers would read positions off layer 0's empty cache */
  g_autofree char *dir = make_package ("mllama", HN_PACKAGE_LANGUAGE_MODEL, "mllama_text_model", NULL);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, cfg, &error));
  g_assert_no_error (error);
  JsonObject *tc = json_object_get_object_member (json_node_get_object (json_parser_get_root (p)), "text_config");
  JsonArray *cl = json_array_new ();
  json_array_add_int_element (cl, 0);
  json_array_add_int_element (cl, 1);
  json_object_set_array_member (tc, "cross_attention_layers", cl);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, json_parser_get_root (p));
  g_assert_true (json_generator_to_file (gen, cfg, &error));
  g_assert_no_error (error);
  g_assert_null (hn_transformer_load (ctx, dir, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "cross-attention layer 0"));
  hn_folder_remove_tree (dir);
}

/* The hub's Emu3 checkpoints nest an Emu3ForCausalLM: text_model.model.X, text_model.lm_head and the
 * VQ-VAE as vqmodel.X (transformers' conversion_mapping renames them to its 5.x layout on load). */
static void
test_emu3_hub_layout (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    {
      g_test_skip (error->message);
      return;
    }
  g_autofree char *dir = make_package ("emu3", HN_PACKAGE_LANGUAGE_MODEL_V4, "emu3_text_model", NULL);
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  {
    g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
    g_assert_no_error (error);
    g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
    for (guint t = 0; t < hn_safetensors_get_n_tensors (st); t++)
      {
        const HnSafetensorInfo *ti = hn_safetensors_get_nth (st, t);
        g_assert_true (g_str_has_prefix (ti->name, "language_model."));
        g_autofree char *name = g_strconcat ("text_model.", ti->name + strlen ("language_model."), NULL);
        g_assert_true (hn_safetensors_writer_add (w, name, ti->dtype, ti->ndim, ti->shape, ti->data, ti->nbytes, FALSE,
                                                  &error));
      }
    static const float four[4] = { 1, 2, 3, 4 };
    g_assert_true (hn_safetensors_writer_add (w, "vqmodel.quantize.embedding.weight", HN_ST_DTYPE_F32, 1,
                                              (gint64[]) { 4 }, four, sizeof four, FALSE, &error));
    g_assert_true (hn_safetensors_writer_write_file (w, path, &error));
    g_assert_no_error (error);
  }
  check_package_logits (ctx, dir, "emu3_text_model", "emu3 (the hub's text_model.model layout)");
  hn_folder_remove_tree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/multimodal/packages", test_packages);
  g_test_add_func ("/multimodal/glm-mtp-layers", test_glm_mtp_layers);
  g_test_add_func ("/multimodal/granite4-vision-text", test_granite4_vision_text);
  g_test_add_func ("/multimodal/modernvbert-towers", test_modernvbert_towers);
  g_test_add_func ("/multimodal/omni-layouts", test_omni_layouts);
  g_test_add_func ("/multimodal/ernie-vl-vision-experts", test_ernie_vl_vision_experts);
  g_test_add_func ("/multimodal/emu3-hub-layout", test_emu3_hub_layout);
  g_test_add_func ("/multimodal/mllama-cross-attention-layers", test_mllama_cross_attention_layers);
  g_test_add_func ("/multimodal/llava-v5-layout", test_v5);
  g_test_add_func ("/multimodal/llava-v4-layout", test_v4);
  return g_test_run ();
}
