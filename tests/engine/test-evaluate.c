/* evaluate: perplexity against an independent loop over hn_transformer_logits,
 * hand-counted windows and -100 labels, a JSONL file and a LoRA adapter (B = 0
 * keeps the base model's figure). Model: stories260K. */
#include "base/hn-error.h"
#include "tokenizer/tokenizer.h"
#include "train/evaluate.h"
#include "train/lora.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>

static const char text[] =
  "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. "
  "One day the sun was hot and the dog was tired, so they sat under a big tree and ate an apple.";

static char *
model_dir (void)
{
  return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
}

/* The straightforward loop: probabilities by softmax, -log p, window by window. */
static double
reference_mean_nll (HnTransformer *m, const int32_t *ids, int n, int window, guint64 *count)
{
  int vocab = hn_transformer_get_hparams (m)->vocab;
  double total = 0;
  *count = 0;
  for (int s = 0; s < n; s += window)
    {
      int len = MIN (window, n - s);
      if (len < 2)
        break;
      g_autofree float *lg = g_new (float, (gsize) len * vocab);
      g_autoptr (GError) error = NULL;
      g_assert_true (hn_transformer_logits (m, ids + s, len, lg, &error));
      g_assert_no_error (error);
      for (int i = 0; i + 1 < len; i++)
        {
          double z = 0;
          for (int v = 0; v < vocab; v++)
            z += exp ((double) lg[(gsize) i * vocab + v]);
          total += -log (exp ((double) lg[(gsize) i * vocab + ids[s + i + 1]]) / z);
          (*count)++;
        }
    }
  return total / (double) *count;
}

static void
test_text_matches_reference (void)
{
  g_autofree char *dir = model_dir ();
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_assert_true (hn_tokenizer_encode (tok, text, -1, TRUE, ids, &error));
  g_assert_cmpint (g_array_index (ids, int32_t, 0), ==, 1); /* BOS added as the tokenizer config says */
  g_autoptr (HnVkContext) vk = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (vk, dir, &error);
  g_assert_no_error (error);
  const int window = 16;
  guint64 ref_count = 0;
  double ref = reference_mean_nll (m, (const int32_t *) ids->data, (int) ids->len, window, &ref_count);

  g_autofree char *tmp = g_dir_make_tmp ("hn-eval-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *path = g_build_filename (tmp, "story.txt", NULL);
  g_assert_true (g_file_set_contents (path, text, -1, &error));
  HnEvalOptions opts;
  hn_eval_options_init (&opts);
  opts.model_dir = dir;
  opts.text_file = path;
  opts.seq_len = window;
  HnEvalResult res;
  g_assert_true (hn_evaluate_run (&opts, &res, NULL, &error));
  g_assert_no_error (error);
  g_test_message ("stories260K: mean_nll %.6f ppl %.4f over %" G_GUINT64_FORMAT " tokens (reference %.6f)",
                  res.mean_nll, res.perplexity, res.tokens, ref);
  g_assert_cmpuint (res.tokens, ==, ref_count);
  /* tokens - windows predicted: every window loses its first token */
  g_assert_cmpuint (res.tokens, ==, ids->len - (ids->len + window - 1) / window);
  g_assert_cmpfloat (fabs (res.mean_nll - ref), <, 1e-6 * MAX (1.0, ref));
  g_assert_cmpfloat (fabs (res.perplexity - exp (ref)), <, 1e-5 * exp (ref));
  /* a trained model beats the uniform guess (ln 512) on its own kind of text */
  g_assert_cmpfloat (res.mean_nll, <, log (512.0));

  /* The full context as the window: one pass, a different (longer-context) figure. */
  opts.seq_len = 0;
  HnEvalResult full;
  g_assert_true (hn_evaluate_run (&opts, &full, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (full.windows, ==, 1);
  g_assert_cmpuint (full.tokens, ==, ids->len - 1);

  /* A LoRA adapter whose B is zero leaves the model as it is. */
  {
    HnLoraConfig cfg;
    hn_lora_config_init (&cfg);
    cfg.r = 2;
    cfg.alpha = 4;
    g_assert_true (hn_lora_config_set_targets (&cfg, "q_proj,v_proj", &error));
    g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_new (&cfg);
    hn_lora_config_clear (&cfg);
    for (int l = 0; l < 5; l++)
      {
        g_autofree char *q = g_strdup_printf ("model.layers.%d.self_attn.q_proj", l);
        g_autofree char *v = g_strdup_printf ("model.layers.%d.self_attn.v_proj", l);
        hn_lora_adapter_add (ad, q, 64, 64, 1);
        hn_lora_adapter_add (ad, v, 64, 32, 2);
      }
    g_autofree char *ad_dir = g_build_filename (tmp, "adapter", NULL);
    g_assert_true (hn_lora_adapter_save (ad, ad_dir, &error));
    g_assert_no_error (error);
    opts.seq_len = window;
    opts.lora_adapter_dir = ad_dir;
    HnEvalResult with;
    g_assert_true (hn_evaluate_run (&opts, &with, NULL, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (with.tokens, ==, res.tokens);
    g_assert_cmpfloat (fabs (with.mean_nll - res.mean_nll), <, 1e-5);
    /* a non-zero B changes the figure */
    for (guint i = 0; i < ad->modules->len; i++)
      {
        HnLoraModule *mod = g_ptr_array_index (ad->modules, i);
        for (int k = 0; k < mod->out * mod->r; k++)
          mod->b[k] = 0.5f;
      }
    g_assert_true (hn_lora_adapter_save (ad, ad_dir, &error));
    HnEvalResult changed;
    g_assert_true (hn_evaluate_run (&opts, &changed, NULL, &error));
    g_assert_no_error (error);
    g_assert_cmpfloat (fabs (changed.mean_nll - res.mean_nll), >, 1e-3);
    g_autofree char *f1 = g_build_filename (ad_dir, "adapter_config.json", NULL);
    g_autofree char *f2 = g_build_filename (ad_dir, "adapter_model.safetensors", NULL);
    g_remove (f1);
    g_remove (f2);
    g_rmdir (ad_dir);
  }
  g_remove (path);
  g_rmdir (tmp);
}

/* The perplexity transformers 5.17 computes on the stories260K model
 * (tests/fixtures/tokref: model(ids, labels=ids).loss on AutoTokenizer's ids
 * of the whole file, one window): the same token count and within 1e-4. */
static void
test_matches_transformers (void)
{
  g_autofree char *dir = model_dir ();
  g_autofree char *fx = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "tokref", NULL);
  g_autofree char *ref = g_build_filename (fx, "tok_reference.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (parser, ref, &error));
  g_assert_no_error (error);
  JsonObject *stories = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), "stories");
  g_autoptr (GList) names = json_object_get_members (stories);
  g_assert_cmpuint (g_list_length (names), >=, 2);
  for (GList *l = names; l; l = l->next)
    {
      JsonObject *st = json_object_get_object_member (stories, l->data);
      g_autofree char *path = g_build_filename (fx, l->data, NULL);
      HnEvalOptions opts;
      hn_eval_options_init (&opts);
      opts.model_dir = dir;
      opts.text_file = path;
      HnEvalResult res;
      g_assert_true (hn_evaluate_run (&opts, &res, NULL, &error));
      g_assert_no_error (error);
      double want = json_object_get_double_member (st, "perplexity");
      g_test_message ("%s: perplexity %.6f over %" G_GUINT64_FORMAT " tokens; transformers %.6f over %" G_GINT64_FORMAT,
                      (const char *) l->data, res.perplexity, res.tokens, want,
                      json_object_get_int_member (st, "predicted_tokens"));
      g_assert_cmpuint (res.tokens, ==, (guint64) json_object_get_int_member (st, "predicted_tokens"));
      g_assert_cmpfloat (fabs (res.perplexity - want), <, 1e-4 * want);
    }
}

/* Hand-checked: 10 ids in windows of 4 -> [0,4) [4,8) [8,10): 3 + 3 + 1 predictions;
 * with labels, only the non -100 targets (not at a window's first position) count,
 * and each equals -log softmax of the previous position's logits. */
static void
test_windows_and_labels (void)
{
  g_autofree char *dir = model_dir ();
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) vk = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (vk, dir, &error);
  g_assert_no_error (error);
  const int32_t ids[10] = { 1, 403, 407, 261, 378, 436, 259, 481, 262, 446 };
  HnEvalResult r = { 0 };
  g_assert_true (hn_evaluate_sequence (m, ids, NULL, 10, 4, &r, NULL, &error));
  g_assert_cmpuint (r.tokens, ==, 7);
  g_assert_cmpuint (r.windows, ==, 3);

  /* only target 2 (predicted from ids[0..1]) and target 6 (from ids[4..5]); label 4 is
   * at a window start and not predicted */
  const int32_t labels[10] = { -100, -100, 407, -100, 378, -100, 259, -100, -100, -100 };
  HnEvalResult l = { 0 };
  g_assert_true (hn_evaluate_sequence (m, ids, labels, 10, 4, &l, NULL, &error));
  g_assert_cmpuint (l.tokens, ==, 2);
  g_assert_cmpuint (l.windows, ==, 2); /* the last window has nothing to predict: skipped */
  int vocab = hn_transformer_get_hparams (m)->vocab;
  g_autofree float *lg = g_new (float, 4 * vocab);
  double want = 0;
  g_assert_true (hn_transformer_logits (m, ids, 4, lg, &error));
  {
    double z = 0;
    for (int v = 0; v < vocab; v++)
      z += exp (lg[1 * vocab + v]);
    want += log (z) - lg[1 * vocab + 407];
  }
  g_assert_true (hn_transformer_logits (m, ids + 4, 4, lg, &error));
  {
    double z = 0;
    for (int v = 0; v < vocab; v++)
      z += exp (lg[1 * vocab + v]);
    want += log (z) - lg[1 * vocab + 259];
  }
  g_assert_cmpfloat (fabs (l.nll_sum - want), <, 1e-4);
  g_assert_true (hn_eval_result_finish (&l, &error));
  g_assert_cmpfloat (fabs (l.perplexity - exp (want / 2)), <, 1e-3);

  /* nothing to predict is an error, not a perplexity of 1 */
  HnEvalResult none = { 0 };
  g_assert_true (hn_evaluate_sequence (m, ids, NULL, 1, 4, &none, NULL, &error));
  g_assert_false (hn_eval_result_finish (&none, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* JSONL prompt/completion rows: only completion tokens are scored. */
static void
test_jsonl (void)
{
  g_autofree char *dir = model_dir ();
  g_autoptr (GError) error = NULL;
  g_autofree char *tmp = g_dir_make_tmp ("hn-eval-XXXXXX", &error);
  g_autofree char *path = g_build_filename (tmp, "rows.jsonl", NULL);
  const char *rows = "{\"prompt\": \"Once upon a time\", \"completion\": \" there was a dog.\"}\n"
                     "{\"prompt\": \"Lily said\", \"completion\": \" hello to the cat.\"}\n";
  g_assert_true (g_file_set_contents (path, rows, -1, &error));
  HnEvalOptions opts;
  hn_eval_options_init (&opts);
  opts.model_dir = dir;
  opts.eval_file = path;
  HnEvalResult res;
  g_assert_true (hn_evaluate_run (&opts, &res, NULL, &error));
  g_assert_no_error (error);
  g_test_message ("jsonl: mean_nll %.6f over %" G_GUINT64_FORMAT " tokens", res.mean_nll, res.tokens);
  g_assert_cmpuint (res.windows, ==, 2);
  g_assert_cmpuint (res.tokens, >, 4);
  g_assert_cmpuint (res.tokens, <, 30); /* prompts are not scored */
  g_assert_true (isfinite (res.perplexity) && res.perplexity > 1);
  /* both a text and an eval file: refused */
  opts.text_file = path;
  g_assert_false (hn_evaluate_run (&opts, &res, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_remove (path);
  g_rmdir (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/evaluate/text-matches-reference", test_text_matches_reference);
  g_test_add_func ("/evaluate/windows-and-labels", test_windows_and_labels);
  g_test_add_func ("/evaluate/matches-transformers", test_matches_transformers);
  g_test_add_func ("/evaluate/jsonl", test_jsonl);
  return g_test_run ();
}
