/* PEFT adapter files: load the parity fixtures peft wrote, save and reload,
 * target matching, init, merge-lora against the formula. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "train/lora.h"
#include "transformer/transformer.h"
#include <json-glib/json-glib.h>
#include "parity-util.h"

static char *
fixture (const char *rel)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", rel, NULL);
}

static void
test_load_peft_fixture (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = fixture ("llama_lora/adapter_init");
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpint (ad->config.r, ==, 4);
  g_assert_cmpfloat (ad->config.alpha, ==, 8);
  g_assert_cmpfloat (hn_lora_config_scaling (&ad->config), ==, 2.0);
  g_assert_cmpuint (ad->modules->len, ==, 4);
  HnLoraModule *m = hn_lora_adapter_lookup (ad, "model.layers.1.self_attn.v_proj");
  g_assert_nonnull (m);
  g_assert_cmpint (m->in, ==, 32);
  g_assert_cmpint (m->out, ==, 16);
  g_assert_true (hn_lora_config_matches (&ad->config, "model.layers.0.self_attn.q_proj"));
  g_assert_false (hn_lora_config_matches (&ad->config, "model.layers.0.self_attn.k_proj"));
  g_assert_false (hn_lora_config_matches (&ad->config, "model.layers.0.self_attn.xq_proj"));

  g_autofree char *gdir = fixture ("gpt2_lora/adapter_init");
  g_autoptr (HnLoraAdapter) g2 = hn_lora_adapter_load (gdir, &error);
  g_assert_no_error (error);
  g_assert_true (g2->config.fan_in_fan_out);
  m = hn_lora_adapter_lookup (g2, "transformer.h.0.attn.c_attn");
  g_assert_nonnull (m);
  g_assert_cmpint (m->out, ==, 96);
}

static void
test_save_reload (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = fixture ("llama_lora/adapter_final");
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (dir, &error);
  g_assert_no_error (error);
  g_autofree char *tmp = g_dir_make_tmp ("hn-lora-XXXXXX", &error);
  g_autofree char *out = g_build_filename (tmp, "adapter", NULL);
  g_assert_true (hn_lora_adapter_save (ad, out, &error));
  g_assert_no_error (error);
  g_autoptr (HnLoraAdapter) back = hn_lora_adapter_load (out, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (back->modules->len, ==, ad->modules->len);
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *a = g_ptr_array_index (ad->modules, i), *b = g_ptr_array_index (back->modules, i);
      g_assert_cmpstr (a->module, ==, b->module);
      g_assert_cmpint (memcmp (a->a, b->a, sizeof (float) * a->r * a->in), ==, 0);
      g_assert_cmpint (memcmp (a->b, b->b, sizeof (float) * a->out * a->r), ==, 0);
    }
  g_assert_cmpfloat (back->config.alpha, ==, 8);
  /* the tensor names are PEFT's */
  g_autofree char *st_path = g_build_filename (out, "adapter_model.safetensors", NULL);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (st_path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (hn_safetensors_lookup (st, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  g_assert_nonnull (hn_safetensors_lookup (st, "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"));
  g_autofree char *cfg = g_build_filename (out, "adapter_config.json", NULL);
  g_autofree char *cfg_path2 = g_build_filename (out, "adapter_model.safetensors", NULL);
  g_remove (cfg);
  g_remove (cfg_path2);
  g_rmdir (out);
  g_rmdir (tmp);
}

static void
test_targets_and_init (void)
{
  g_autoptr (GError) error = NULL;
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  g_assert_true (hn_lora_config_set_targets (&cfg, "q_proj, o_proj", &error));
  g_assert_true (hn_lora_config_matches (&cfg, "model.layers.3.self_attn.o_proj"));
  g_assert_false (hn_lora_config_matches (&cfg, "model.layers.3.self_attn.v_proj"));
  g_assert_true (hn_lora_config_set_targets (&cfg, "all-linear", &error));
  g_assert_true (hn_lora_config_matches (&cfg, "model.layers.3.mlp.down_proj"));
  g_assert_false (hn_lora_config_matches (&cfg, "lm_head"));
  g_assert_true (hn_lora_config_set_targets (&cfg, ".*layers\\.1\\..*(q|v)_proj", &error));
  g_assert_true (hn_lora_config_matches (&cfg, "model.layers.1.self_attn.v_proj"));
  g_assert_false (hn_lora_config_matches (&cfg, "model.layers.0.self_attn.v_proj"));
  g_assert_false (hn_lora_config_set_targets (&cfg, "(unclosed", &error));
  g_clear_error (&error);
  g_assert_false (hn_lora_config_set_targets (&cfg, " , ", &error));
  g_clear_error (&error);
  cfg.use_rslora = TRUE;
  cfg.r = 16;
  cfg.alpha = 8;
  g_assert_cmpfloat (hn_lora_config_scaling (&cfg), ==, 2.0);
  g_assert_true (hn_lora_config_set_targets (&cfg, "q_proj", &error));

  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_new (&cfg);
  HnLoraModule *m = hn_lora_adapter_add (ad, "model.layers.0.self_attn.q_proj", 64, 32, 42);
  double bound = 1.0 / 8.0, mean = 0;
  for (int i = 0; i < m->r * m->in; i++)
    {
      g_assert_cmpfloat (fabs (m->a[i]), <=, bound);
      mean += m->a[i];
    }
  g_assert_cmpfloat (fabs (mean / (m->r * m->in)), <, 0.01);
  for (int i = 0; i < m->out * m->r; i++)
    g_assert_cmpfloat (m->b[i], ==, 0.0f);
  HnLoraModule *m2 = hn_lora_adapter_add (ad, "model.layers.0.self_attn.q_proj.x", 64, 32, 42);
  g_assert_cmpfloat (m->a[0], !=, m2->a[0]);
  hn_lora_config_clear (&cfg);
}

static void
test_bad_config (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *tmp = g_dir_make_tmp ("hn-lora-XXXXXX", &error);
  g_autofree char *cfg = g_build_filename (tmp, "adapter_config.json", NULL);
  const char *dora = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"use_dora\": true}";
  g_file_set_contents (cfg, dora, -1, NULL);
  g_assert_null (hn_lora_adapter_load (tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "use_dora"));
  g_clear_error (&error);
  const char *ia3 = "{\"peft_type\": \"IA3\"}";
  g_file_set_contents (cfg, ia3, -1, NULL);
  g_assert_null (hn_lora_adapter_load (tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  const char *ok = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}";
  g_file_set_contents (cfg, ok, -1, NULL);
  g_assert_null (hn_lora_adapter_load (tmp, &error)); /* no weights */
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_remove (cfg);
  g_rmdir (tmp);
}

static void
check_merge (const char *base, const char *adapter, const char *weight, const char *module, gboolean conv1d)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *model_dir = fixture (base), *ad_dir = fixture (adapter);
  g_autofree char *tmp = g_dir_make_tmp ("hn-merge-XXXXXX", &error);
  g_assert_true (hn_lora_merge_model (model_dir, ad_dir, tmp, &error));
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) a = hn_safetensors_open (model_dir, &error);
  g_autoptr (HnSafetensors) b = hn_safetensors_open (tmp, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_safetensors_get_n_tensors (a), ==, hn_safetensors_get_n_tensors (b));
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (ad_dir, &error);
  HnLoraModule *m = hn_lora_adapter_lookup (ad, module);
  g_assert_nonnull (m);
  g_autofree float *w0 = hn_safetensor_info_dup_f32 (hn_safetensors_lookup (a, weight), &error);
  g_autofree float *w1 = hn_safetensor_info_dup_f32 (hn_safetensors_lookup (b, weight), &error);
  g_assert_no_error (error);
  double s = hn_lora_config_scaling (&ad->config);
  for (int o = 0; o < m->out; o++)
    for (int k = 0; k < m->in; k++)
      {
        double d = 0;
        for (int r = 0; r < m->r; r++)
          d += (double) m->b[o * m->r + r] * m->a[r * m->in + k];
        gsize idx = conv1d ? (gsize) k * m->out + o : (gsize) o * m->in + k;
        g_assert_cmpfloat_with_epsilon (w1[idx], w0[idx] + s * d, 1e-5);
      }
  g_autofree char *cfgp = g_build_filename (tmp, "config.json", NULL);
  g_assert_true (g_file_test (cfgp, G_FILE_TEST_EXISTS));
  g_autoptr (GDir) d = g_dir_open (tmp, 0, NULL);
  const char *name;
  while ((name = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (tmp, name, NULL);
      g_remove (p);
    }
  g_rmdir (tmp);
}

static void
test_merge (void)
{
  check_merge ("llama", "llama_lora/adapter_final", "model.layers.1.self_attn.v_proj.weight",
               "model.layers.1.self_attn.v_proj", FALSE);
  check_merge ("gpt2", "gpt2_lora/adapter_final", "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn",
               TRUE);
  /* an adapter for modules the model lacks fails */
  g_autoptr (GError) error = NULL;
  g_autofree char *model_dir = fixture ("gpt2"), *ad_dir = fixture ("llama_lora/adapter_init");
  g_autofree char *tmp = g_dir_make_tmp ("hn-merge-XXXXXX", &error);
  g_assert_false (hn_lora_merge_model (model_dir, ad_dir, tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_rmdir (tmp);
}

/* src's safetensors file `name` rewritten into dst as F32, element 3 of
 * tensor `poison` set to NaN */
static void
copy_with_nan (const char *src, const char *dst, const char *name, const char *poison)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *sp = g_build_filename (src, name, NULL), *dp = g_build_filename (dst, name, NULL);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (sp, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  gboolean found = FALSE;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      float *f = hn_safetensor_info_dup_f32 (t, &error);
      g_assert_no_error (error);
      if (g_str_equal (t->name, poison))
        {
          f[3] = NAN;
          found = TRUE;
        }
      g_assert_true (hn_safetensors_writer_add (w, t->name, HN_ST_DTYPE_F32, t->ndim, t->shape, f,
                                                (gsize) t->n_elements * 4, TRUE, &error));
      g_free (f);
    }
  g_assert_true (found);
  g_assert_true (hn_safetensors_writer_write_file (w, dp, &error));
  g_assert_no_error (error);
}

static void
rm_dir (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  for (const char *n; d && (n = g_dir_read_name (d));)
    {
      g_autofree char *p = g_build_filename (dir, n, NULL);
      g_remove (p);
    }
  g_rmdir (dir);
}

/* An adapter's tensors must be modules its own target_modules names: PEFT
 * would drop the others (with target_modules matching none, the whole
 * adapter), so applying them silently differs from PEFT. */
static void
test_targets_match_tensors (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *src = fixture ("llama_lora/adapter_final");
  g_autofree char *tmp = g_dir_make_tmp ("hn-lora-XXXXXX", &error);
  parity_copy_file (src, tmp, "adapter_model.safetensors", NULL, NULL);
  const char *none = "[\n    \"k_proj\",\n    \"o_proj\"\n  ]";
  parity_copy_file (src, tmp, "adapter_config.json", "[\n    \"q_proj\",\n    \"v_proj\"\n  ]", none);
  g_assert_null (hn_lora_adapter_load (tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "match none of the adapter's 4 modules"));
  g_assert_nonnull (strstr (error->message, "k_proj, o_proj"));
  g_clear_error (&error);
  parity_copy_file (src, tmp, "adapter_config.json", "[\n    \"q_proj\",\n    \"v_proj\"\n  ]", "[\"q_proj\"]");
  g_assert_null (hn_lora_adapter_load (tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "v_proj, which target_modules (q_proj) does not name"));
  g_clear_error (&error);
  /* the regex form PEFT also takes */
  parity_copy_file (src, tmp, "adapter_config.json", "[\n    \"q_proj\",\n    \"v_proj\"\n  ]",
             "\"model\\\\.layers\\\\.\\\\d+\\\\.self_attn\\\\.(q|v)_proj\"");
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (tmp, &error);
  g_assert_no_error (error);
  rm_dir (tmp);
}

/* NaN in an adapter is refused at load, naming the tensor; merge-lora never
 * writes a NaN weight, whether from the base model or from the merge. */
static void
test_nan_refused (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *src = fixture ("llama_lora/adapter_final");
  g_autofree char *tmp = g_dir_make_tmp ("hn-lora-XXXXXX", &error);
  parity_copy_file (src, tmp, "adapter_config.json", NULL, NULL);
  const char *bt = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight";
  copy_with_nan (src, tmp, "adapter_model.safetensors", bt);
  g_assert_null (hn_lora_adapter_load (tmp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
  g_assert_nonnull (strstr (error->message, bt));
  g_assert_nonnull (strstr (error->message, "adapter_model.safetensors"));
  g_clear_error (&error);
  rm_dir (tmp);

  const char *poison[] = { "model.embed_tokens.weight", "model.layers.1.self_attn.v_proj.weight" };
  g_autofree char *base = fixture ("llama");
  for (int i = 0; i < 2; i++)
    {
      g_autofree char *mdir = g_dir_make_tmp ("hn-lora-XXXXXX", &error);
      parity_copy_file (base, mdir, "config.json", NULL, NULL);
      copy_with_nan (base, mdir, "model.safetensors", poison[i]);
      g_autofree char *out = g_dir_make_tmp ("hn-merge-XXXXXX", &error);
      g_assert_false (hn_lora_merge_model (mdir, src, out, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
      g_assert_nonnull (strstr (error->message, poison[i]));
      g_clear_error (&error);
      g_autofree char *w = g_build_filename (out, "model.safetensors", NULL);
      g_assert_false (g_file_test (w, G_FILE_TEST_EXISTS));
      rm_dir (out);
      rm_dir (mdir);
    }
}

/* peft's logits with the initial adapter (lora_B non-zero) of llama_lora and
 * gpt2_lora, from the model with the adapter attached. */
static void
check_attach (const char *base, const char *lora_case)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_test_skip ("no Vulkan device");
      return;
    }
  g_autofree char *model_dir = fixture (base);
  g_autofree char *init_rel = g_strdup_printf ("%s/adapter_init", lora_case);
  g_autofree char *ad_dir = fixture (init_rel);
  g_autofree char *exp_rel = g_strdup_printf ("%s/expected.json", lora_case);
  g_autofree char *exp_path = fixture (exp_rel);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, exp_path, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  JsonArray *ids = json_object_get_array_member (o, "input_ids");
  int n = (int) json_array_get_length (ids);
  g_autofree gint32 *in = g_new (gint32, n);
  for (int i = 0; i < n; i++)
    in[i] = (gint32) json_array_get_int_element (ids, i);
  JsonArray *want = json_object_get_array_member (o, "logits_adapter_init");

  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, model_dir, &error);
  g_assert_no_error (error);
  int V = hn_transformer_get_hparams (m)->vocab;
  g_assert_cmpuint (json_array_get_length (want), ==, (guint) (n * V));
  g_autofree float *before = g_new (float, (gsize) n * V), *after = g_new (float, (gsize) n * V);
  g_assert_true (hn_transformer_logits (m, in, n, before, &error));
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (ad_dir, &error);
  g_assert_no_error (error);
  g_assert_true (hn_lora_attach (m, ad, &error));
  g_assert_no_error (error);
  g_assert_true (hn_transformer_logits (m, in, n, after, &error));
  double worst = 0, moved = 0;
  for (int i = 0; i < n * V; i++)
    {
      worst = MAX (worst, fabs (after[i] - json_array_get_double_element (want, i)));
      moved = MAX (moved, fabs (after[i] - before[i]));
    }
  g_test_message ("%s: attached adapter logits within %.3g of peft's (the adapter moved them by %.3g)", lora_case,
                  worst, moved);
  g_assert_cmpfloat (worst, <, 1e-4);
  g_assert_cmpfloat (moved, >, 1e-2);
}

static void
test_attach (void)
{
  check_attach ("llama", "llama_lora");
  check_attach ("gpt2", "gpt2_lora");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/lora/load-peft-fixture", test_load_peft_fixture);
  g_test_add_func ("/lora/save-reload", test_save_reload);
  g_test_add_func ("/lora/targets-init", test_targets_and_init);
  g_test_add_func ("/lora/bad-config", test_bad_config);
  g_test_add_func ("/lora/merge", test_merge);
  g_test_add_func ("/lora/targets-match-tensors", test_targets_match_tensors);
  g_test_add_func ("/lora/nan-refused", test_nan_refused);
  g_test_add_func ("/lora/attach-generation", test_attach);
  return g_test_run ();
}
