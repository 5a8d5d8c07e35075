/* Evaluation during training on the demo model (stories260K): the eval loss
 * in metrics events and --metrics-file equals the loss of the written model
 * on the eval data computed independently (host cross-entropy over
 * hn_transformer_logits); early stopping stops after `patience` evaluations
 * without improvement; --stop-at-loss stops at the threshold; bad
 * combinations are refused; the early-stopping state is in the checkpoint. */
#include "train/checkpoint.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "jobs/job.h"
#include "test-device.h"
#include "transformer/transformer.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static char *tmp_root, *model, *train_txt, *eval_txt;

typedef struct {
  GArray *loss, *eval_loss; /* double, per metric event */
  gint64 last_step;
} Seen;

static void
on_event (HnJob *job, const HnJobEvent *e, gpointer data)
{
  Seen *s = data;
  if (e->type != HN_JOB_EVENT_METRIC)
    return;
  g_array_append_val (s->loss, e->metric.loss);
  g_array_append_val (s->eval_loss, e->metric.eval_loss);
  s->last_step = e->metric.step;
}

static gboolean
run (const char *const *extra, Seen *seen, const char *out, GError **error)
{
  g_autoptr (GPtrArray) a = g_ptr_array_new ();
  const char *common[] = { "transformer-train", "--model-path", model, "--train", train_txt, "--out-dir", out,
                           "--batch-size", "2", "--seq-len", "16", "--seed", "5", NULL };
  for (int i = 0; common[i]; i++)
    g_ptr_array_add (a, (gpointer) common[i]);
  for (int i = 0; extra[i]; i++)
    g_ptr_array_add (a, (gpointer) extra[i]);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) a->len, (const char *const *) a->pdata, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  seen->loss = g_array_new (FALSE, FALSE, sizeof (double));
  seen->eval_loss = g_array_new (FALSE, FALSE, sizeof (double));
  hn_job_set_event_func (job, on_event, seen, NULL);
  return hn_job_run_sync (job, error);
}

static void
seen_clear (Seen *s)
{
  g_clear_pointer (&s->loss, g_array_unref);
  g_clear_pointer (&s->eval_loss, g_array_unref);
}

/* Mean cross-entropy per target token of `dir`'s model over the examples
 * of the eval file, as the dataset makes them for --seq-len 16. */
static double
reference_eval_loss (const char *dir)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (model, &error);
  g_assert_no_error (error);
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 16;
  g_autoptr (HnDataset) ds = hn_dataset_load (eval_txt, tok, &o, &error);
  g_assert_no_error (error);
  int V = hn_transformer_get_hparams (m)->vocab;
  double sum = 0, n = 0;
  for (gsize k = 0; k < hn_dataset_get_n_examples (ds); k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      int T = (int) e.n_tokens - 1;
      g_autofree float *logits = g_new (float, (gsize) T * V);
      g_assert_true (hn_transformer_logits (m, e.ids, T, logits, &error));
      for (int t = 0; t < T; t++)
        {
          int32_t y = e.labels[t + 1];
          if (y == -100)
            continue;
          const float *l = logits + (gsize) t * V;
          double mx = l[0], z = 0;
          for (int v = 1; v < V; v++)
            mx = MAX (mx, l[v]);
          for (int v = 0; v < V; v++)
            z += exp (l[v] - mx);
          sum += log (z) + mx - l[y];
          n += 1;
        }
    }
  g_assert_cmpfloat (n, >, 0);
  return sum / n;
}

static void
test_eval_loss_matches (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "eval", NULL);
  g_autofree char *metrics = g_build_filename (tmp_root, "eval-metrics.jsonl", NULL);
  const char *extra[] = { "--eval-file", eval_txt, "--eval-steps", "2", "--max-steps", "3", "--lr", "3e-3",
                          "--metrics-file", metrics, NULL };
  Seen s = { 0 };
  g_assert_true (run (extra, &s, out, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (s.eval_loss->len, ==, 3);
  /* evaluated at step 2 and after the last step, not at step 1 */
  g_assert_false (isfinite (g_array_index (s.eval_loss, double, 0)));
  g_assert_true (isfinite (g_array_index (s.eval_loss, double, 1)));
  double last = g_array_index (s.eval_loss, double, 2);
  double ref = reference_eval_loss (out);
  g_test_message ("eval loss %.6f, reference %.6f", last, ref);
  g_assert_cmpfloat (fabs (last - ref), <, 1e-4);
  /* the same figure in the metrics file */
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (metrics, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (g_strstrip (text), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 3);
  g_assert_null (strstr (lines[0], "eval_loss"));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, lines[2], -1, &error));
  double file_eval = json_object_get_double_member (json_node_get_object (json_parser_get_root (p)), "eval_loss");
  g_assert_cmpfloat (fabs (file_eval - last), <, 1e-12);
  seen_clear (&s);
}

static void
test_early_stopping (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "early", NULL);
  /* a learning rate too small to move an f32 weight: the eval loss never improves */
  const char *extra[] = { "--eval-file", eval_txt, "--eval-steps", "1", "--max-steps", "10", "--lr", "1e-12",
                          "--lr-scheduler", "constant", "--early-stopping-patience", "2", "--save-steps", "1", NULL };
  Seen s = { 0 };
  g_assert_true (run (extra, &s, out, &error));
  g_assert_no_error (error);
  /* step 1 sets the best, steps 2 and 3 do not improve: stop after step 3 */
  g_assert_cmpint (s.last_step, ==, 3);
  g_autofree char *final_cfg = g_build_filename (out, "config.json", NULL);
  g_assert_true (g_file_test (final_cfg, G_FILE_TEST_EXISTS));
  g_autofree char *state = g_build_filename (out, "checkpoint-step-2", "trainer_state.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (state, &text, NULL, NULL));
  g_assert_nonnull (strstr (text, "\"best_eval_loss\": "));
  g_assert_nonnull (strstr (text, "\"evals_since_best\": 1"));
  seen_clear (&s);
}

static void
test_stop_at_loss (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "stop", NULL);
  const char *extra[] = { "--max-steps", "10", "--stop-at-loss", "100", NULL };
  Seen s = { 0 };
  g_assert_true (run (extra, &s, out, &error));
  g_assert_no_error (error);
  g_assert_cmpint (s.last_step, ==, 1);
  seen_clear (&s);
  /* with an eval split it watches the eval loss: far below any loss, it never stops early */
  const char *extra2[] = { "--max-steps", "2", "--stop-at-loss", "0.001", "--eval-split", "0.01", "--eval-steps", "1",
                           NULL };
  Seen s2 = { 0 };
  g_autofree char *out2 = g_build_filename (tmp_root, "stop-eval", NULL); /* a new folder: out holds the first run */
  g_assert_true (run (extra2, &s2, out2, &error));
  g_assert_no_error (error);
  g_assert_cmpint (s2.last_step, ==, 2);
  g_assert_true (isfinite (g_array_index (s2.eval_loss, double, 0)));
  seen_clear (&s2);
}

static void
test_refused (void)
{
  g_autofree char *out = g_build_filename (tmp_root, "bad", NULL);
  const char *both[] = { "--eval-file", eval_txt, "--eval-split", "0.1", NULL };
  const char *no_eval[] = { "--early-stopping-patience", "3", NULL };
  const char *const *cases[] = { both, no_eval };
  const char *says[] = { "not both", "--eval-split" };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr (GError) error = NULL;
      Seen s = { 0 };
      g_assert_false (run (cases[i], &s, out, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, says[i]));
      seen_clear (&s);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  if (!hn_test_have_vulkan ())
    return 77;
  model = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  train_txt = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  tmp_root = g_dir_make_tmp ("hn-train-eval-XXXXXX", NULL);
  eval_txt = g_build_filename (tmp_root, "eval.txt", NULL);
  g_assert_true (g_file_set_contents (eval_txt, "Once upon a time there was a little girl named Lily. She liked to "
                                      "play in the park with her dog.", -1, NULL));
  g_test_add_func ("/train-eval/loss-matches", test_eval_loss_matches);
  g_test_add_func ("/train-eval/early-stopping", test_early_stopping);
  g_test_add_func ("/train-eval/stop-at-loss", test_stop_at_loss);
  g_test_add_func ("/train-eval/refused", test_refused);
  int rc = g_test_run ();
  hn_folder_remove_tree (tmp_root);
  g_free (tmp_root);
  g_free (model);
  g_free (train_txt);
  g_free (eval_txt);
  return rc;
}
