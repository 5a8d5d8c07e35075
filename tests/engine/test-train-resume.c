/* The trainer as a job on the real stories260K model: exact resume (N steps
 * straight == k steps + resume + N-k steps, bit for bit), checkpoint layout,
 * metrics file, LoRA fine-tuning output loadable as a PEFT adapter, and
 * merge-lora. Tiny batches keep it to seconds on lavapipe. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "formats/safetensors.h"
#include "jobs/job.h"
#include "test-device.h"
#include "train/lora.h"
#include "train/checkpoint.h"
#include "jobs/train-job.h"

static char *tmp_root;
static char *text_path;

static char *
stories (void)
{
  return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
}

static gboolean
run_job (const char *const *argv, GError **error)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (g_strv_length ((char **) argv), argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  return hn_job_run_sync (job, error);
}

static GBytes *
file_bytes (const char *dir, const char *name)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (p, &data, &len, NULL));
  return g_bytes_new_take (g_steal_pointer (&data), len);
}

static void
train_args (GPtrArray *a, const char *kind, const char *out, const char *steps)
{
  g_autofree char *model = stories ();
  const char *common[] = { kind, "--model-path", model, "--train", text_path, "--out-dir", out, "--max-steps", steps,
                           "--batch-size", "2", "--seq-len", "16", "--lr", "3e-3", "--lr-scheduler", "cosine",
                           "--warmup-steps", "1", "--weight-decay", "0.1", "--max-grad-norm", "1.0", "--seed", "7",
                           NULL };
  for (int i = 0; common[i]; i++)
    g_ptr_array_add (a, g_strdup (common[i]));
}

static void
test_resume_exact (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *straight = g_build_filename (tmp_root, "straight", NULL);
  g_autofree char *part = g_build_filename (tmp_root, "part", NULL);
  g_autofree char *resumed = g_build_filename (tmp_root, "resumed", NULL);
  g_autofree char *metrics = g_build_filename (tmp_root, "metrics.jsonl", NULL);

  g_autoptr (GPtrArray) a1 = g_ptr_array_new_with_free_func (g_free);
  train_args (a1, "transformer-train", straight, "4");
  g_ptr_array_add (a1, g_strdup ("--metrics-file"));
  g_ptr_array_add (a1, g_strdup (metrics));
  g_ptr_array_add (a1, NULL);
  g_assert_true (run_job ((const char *const *) a1->pdata, &error));
  g_assert_no_error (error);

  /* 2 steps with a checkpoint every 2, then resume from it for the rest */
  g_autoptr (GPtrArray) a2 = g_ptr_array_new_with_free_func (g_free);
  train_args (a2, "transformer-train", part, "4");
  const char *more[] = { "--save-steps", "2", NULL };
  for (int i = 0; more[i]; i++)
    g_ptr_array_add (a2, g_strdup (more[i]));
  g_ptr_array_add (a2, NULL);
  /* stop after the checkpoint: cancel is asynchronous, so instead run a
   * 4-step job and resume from its step-2 checkpoint into another folder */
  g_assert_true (run_job ((const char *const *) a2->pdata, &error));
  g_assert_no_error (error);
  g_autofree char *ck = g_build_filename (part, "checkpoint-step-2", NULL);
  g_assert_true (g_file_test (ck, G_FILE_TEST_IS_DIR));
  const char *expected_files[] = { "config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors",
                                   "trainer_state.json", NULL };
  for (int i = 0; expected_files[i]; i++)
    {
      g_autofree char *p = g_build_filename (ck, expected_files[i], NULL);
      g_assert_true (g_file_test (p, G_FILE_TEST_IS_REGULAR));
    }
  g_autoptr (GPtrArray) a3 = g_ptr_array_new_with_free_func (g_free);
  train_args (a3, "transformer-train", resumed, "4");
  g_ptr_array_add (a3, g_strdup ("--resume-from-checkpoint"));
  g_ptr_array_add (a3, g_strdup (ck));
  g_ptr_array_add (a3, NULL);
  g_assert_true (run_job ((const char *const *) a3->pdata, &error));
  g_assert_no_error (error);

  g_autoptr (GBytes) w1 = file_bytes (straight, "model.safetensors");
  g_autoptr (GBytes) w2 = file_bytes (part, "model.safetensors");
  g_autoptr (GBytes) w3 = file_bytes (resumed, "model.safetensors");
  g_assert_true (g_bytes_equal (w1, w2));
  g_assert_true (g_bytes_equal (w1, w3)); /* 2 + resume + 2 == 4 straight, bit for bit */
  /* and training changed the weights */
  g_autofree char *orig = stories ();
  g_autoptr (GBytes) w0 = file_bytes (orig, "model.safetensors");
  g_assert_false (g_bytes_equal (w0, w1));

  /* metrics: 4 JSON lines with the documented keys, finite, loss of step 1 > 0 */
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (metrics, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (g_strstrip (text), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 4);
  for (int i = 0; i < 4; i++)
    {
      g_autoptr (JsonParser) p = json_parser_new ();
      g_assert_true (json_parser_load_from_data (p, lines[i], -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (p));
      g_assert_cmpint (json_object_get_int_member (o, "step"), ==, i + 1);
      const char *keys[] = { "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", NULL };
      for (int k = 0; keys[k]; k++)
        g_assert_true (isfinite (json_object_get_double_member (o, keys[k])));
      if (i == 0)
        g_assert_cmpfloat (json_object_get_double_member (o, "lr"), ==, 0.0); /* warm-up starts at 0 */
    }

  /* the trainer state of the checkpoint */
  HnTrainerState st = { 0 };
  g_assert_true (hn_trainer_state_read (&st, ck, &error));
  g_assert_cmpint (st.global_step, ==, 2);
  g_assert_cmpint (st.total_steps, ==, 4);
  hn_trainer_state_clear (&st);
}

typedef struct {
  char *resume_from;
  gint64 last_step;
} StopSeen;

static void
stop_at_two (HnJob *job, const HnJobEvent *e, gpointer data)
{
  StopSeen *s = data;
  if (e->type == HN_JOB_EVENT_METRIC)
    {
      s->last_step = e->metric.step;
      if (e->metric.step == 2)
        hn_job_request_save_and_stop (job); /* the "Stop and save" button / the first Ctrl-C */
    }
  if (e->type == HN_JOB_EVENT_DONE && e->done.ok)
    s->resume_from = g_strdup (e->done.resume_from);
}

/* "Stop and save" writes a checkpoint of the step reached and ends
 * successfully with it as resume_from; resuming from it finishes the run
 * with the weights of a run never stopped. */
static void
test_stop_and_save (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *straight = g_build_filename (tmp_root, "stop-straight", NULL);
  g_autofree char *stopped = g_build_filename (tmp_root, "stopped", NULL);
  g_autoptr (GPtrArray) a1 = g_ptr_array_new_with_free_func (g_free);
  train_args (a1, "transformer-train", straight, "4");
  g_ptr_array_add (a1, NULL);
  g_assert_true (run_job ((const char *const *) a1->pdata, &error));
  g_assert_no_error (error);

  g_autoptr (GPtrArray) a2 = g_ptr_array_new_with_free_func (g_free);
  train_args (a2, "transformer-train", stopped, "4");
  g_ptr_array_add (a2, NULL);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) a2->len - 1, (const char *const *) a2->pdata, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job = hn_job_new (spec);
  StopSeen seen = { 0 };
  hn_job_set_event_func (job, stop_at_two, &seen, NULL);
  g_assert_true (hn_job_kind_can_save_and_stop ("transformer-train"));
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  g_autofree char *ck = g_build_filename (stopped, "checkpoint-step-2", NULL);
  g_assert_cmpint (seen.last_step, ==, 2);
  g_assert_cmpstr (seen.resume_from, ==, ck);
  g_autofree char *final_model = g_build_filename (stopped, "model.safetensors", NULL);
  g_assert_false (g_file_test (final_model, G_FILE_TEST_EXISTS)); /* stopped: no final model yet */

  g_autoptr (GPtrArray) a3 = g_ptr_array_new_with_free_func (g_free);
  train_args (a3, "transformer-train", stopped, "4");
  g_ptr_array_add (a3, g_strdup ("--resume-from-checkpoint"));
  g_ptr_array_add (a3, g_strdup (ck));
  g_ptr_array_add (a3, NULL);
  g_assert_true (run_job ((const char *const *) a3->pdata, &error));
  g_assert_no_error (error);
  g_autoptr (GBytes) w1 = file_bytes (straight, "model.safetensors");
  g_autoptr (GBytes) w2 = file_bytes (stopped, "model.safetensors");
  g_assert_true (g_bytes_equal (w1, w2));
  g_free (seen.resume_from);
}

static void
test_resume_mismatch (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *ck = g_build_filename (tmp_root, "part", "checkpoint-step-2", NULL);
  g_autofree char *out = g_build_filename (tmp_root, "mismatch", NULL);
  g_autoptr (GPtrArray) a = g_ptr_array_new_with_free_func (g_free);
  train_args (a, "transformer-train", out, "4");
  const char *more[] = { "--resume-from-checkpoint", ck, "--batch-size", "3", NULL };
  for (int i = 0; more[i]; i++)
    g_ptr_array_add (a, g_strdup (more[i]));
  g_ptr_array_add (a, NULL);
  g_assert_false (run_job ((const char *const *) a->pdata, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "batch"));
}

static void
test_lora_finetune_and_merge (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "lora", NULL);
  g_autoptr (GPtrArray) a = g_ptr_array_new_with_free_func (g_free);
  train_args (a, "transformer-finetune", out, "3");
  const char *more[] = { "--lora-r", "4", "--lora-alpha", "8", "--lora-target-modules", "q_proj,v_proj,down_proj",
                         "--save-steps", "2", NULL };
  for (int i = 0; more[i]; i++)
    g_ptr_array_add (a, g_strdup (more[i]));
  g_ptr_array_add (a, NULL);
  g_assert_true (run_job ((const char *const *) a->pdata, &error));
  g_assert_no_error (error);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (out, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ad->modules->len, ==, 15); /* 5 layers x 3 modules */
  g_assert_cmpint (ad->config.r, ==, 4);
  HnLoraModule *m = hn_lora_adapter_lookup (ad, "model.layers.4.mlp.down_proj");
  g_assert_nonnull (m);
  double bsum = 0;
  for (int i = 0; i < m->out * m->r; i++)
    bsum += fabs (m->b[i]);
  g_assert_cmpfloat (bsum, >, 0.0); /* B moved away from its zero init */
  g_autofree char *ck = g_build_filename (out, "checkpoint-step-2", NULL);
  g_autofree char *ck_opt = g_build_filename (ck, "optimizer.safetensors", NULL);
  g_assert_true (g_file_test (ck_opt, G_FILE_TEST_IS_REGULAR));
  g_autoptr (HnLoraAdapter) ck_ad = hn_lora_adapter_load (ck, &error);
  g_assert_no_error (error);

  g_autofree char *merged = g_build_filename (tmp_root, "merged", NULL);
  g_autofree char *model = stories ();
  g_assert_true (hn_merge_lora_run (model, out, merged, FALSE, NULL, &error));
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (merged, &error);
  g_assert_no_error (error);
  g_assert_nonnull (hn_safetensors_lookup (st, "model.layers.4.mlp.down_proj.weight"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  if (!hn_test_have_vulkan ())
    return 77;
  g_autoptr (GError) error = NULL;
  tmp_root = g_dir_make_tmp ("hn-train-XXXXXX", &error);
  g_assert_no_error (error);
  text_path = hn_test_write_text_head (tmp_root, 3000);
  g_test_add_func ("/train/resume-exact", test_resume_exact);
  g_test_add_func ("/train/resume-mismatch", test_resume_mismatch);
  g_test_add_func ("/train/stop-and-save", test_stop_and_save);
  g_test_add_func ("/train/lora-finetune-merge", test_lora_finetune_and_merge);
  int rc = g_test_run ();
  hn_folder_remove_tree (tmp_root);
  g_free (tmp_root);
  g_free (text_path);
  return rc;
}
