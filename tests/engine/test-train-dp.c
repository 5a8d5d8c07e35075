/* Data-parallel training on two logical devices (two VkDevice on the same
 * GPU, or lavapipe in CI) with the real stories260K model: after every step
 * the replicas hold identical weights, and the loss and gradient norm equal
 * the one-device run with the same global batch (1e-5); the same for LoRA;
 * as a job (--device-indices) with evaluation, a checkpoint and an exact
 * resume. */
#include <math.h>
#include <string.h>

#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "jobs/job.h"
#include "test-device.h"
#include "train/checkpoint.h"
#include "train/data-parallel.h"
#include "jobs/train-job.h"

#define BATCH 4
#define SEQ 16
#define ACCUM 2
#define STEPS 3

static char *tmp_root;
static char *text_path;

static char *
stories (void)
{
  return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
}

/* Deterministic batches: [ACCUM, BATCH, SEQ] ids, some labels ignored; every
 * step trains on the same ones, so the loss has to fall. */
static void
make_batches (gint32 *inputs, gint32 *targets, int vocab)
{
  guint32 s = 12345;
  for (int i = 0; i < ACCUM * BATCH * SEQ; i++)
    {
      s = s * 1664525u + 1013904223u;
      inputs[i] = (gint32) ((s >> 8) % (guint32) vocab);
      s = s * 1664525u + 1013904223u;
      targets[i] = (s >> 8) % 7 == 0 ? -100 : (gint32) ((s >> 8) % (guint32) vocab);
    }
}

typedef struct {
  double loss[STEPS], norm[STEPS];
} Trace;

/* Trains STEPS AdamW steps on `n` devices (all the best one); with LoRA when `lora`. */
static void
train_trace (guint n, gboolean lora, Trace *tr)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *model_dir = stories ();
  int devices[2] = { -1, -1 };
  g_autoptr (HnLoraAdapter) adapter = NULL;
  g_autoptr (GPtrArray) ctxs = hn_vk_contexts_new (devices, n, &error);
  g_assert_no_error (error);
  g_autoptr (HnDataParallel) dp = hn_data_parallel_new ((HnVkContext *const *) ctxs->pdata, n, model_dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_data_parallel_get_n_replicas (dp), ==, n);
  if (lora)
    {
      HnLoraConfig cfg;
      hn_lora_config_init (&cfg);
      cfg.r = 4;
      cfg.alpha = 8;
      g_assert_true (hn_lora_config_set_targets (&cfg, "q_proj,v_proj", &error));
      adapter = hn_lora_adapter_new (&cfg);
      GArray *cands = hn_train_graph_lora_candidates (hn_data_parallel_get_model (dp, 0), &cfg, &error);
      g_assert_no_error (error);
      for (guint i = 0; i < cands->len; i++)
        {
          HnLoraCandidate *c = &g_array_index (cands, HnLoraCandidate, i);
          HnLoraModule *m = hn_lora_adapter_add (adapter, c->path, c->in, c->out, 7);
          for (int k = 0; k < m->out * m->r; k++) /* non-zero B, so A gets gradients from step 1 */
            m->b[k] = 0.01f * (float) ((k % 5) - 2);
        }
      hn_lora_candidates_free (cands);
      hn_lora_config_clear (&cfg);
    }
  g_assert_true (hn_data_parallel_setup (dp, BATCH, SEQ, adapter, &error));
  g_assert_no_error (error);
  int vocab = hn_transformer_get_hparams (hn_data_parallel_get_model (dp, 0))->vocab;
  gint64 per_step = ACCUM * BATCH * SEQ;
  g_autofree gint32 *inputs = g_new (gint32, per_step), *targets = g_new (gint32, per_step);
  make_batches (inputs, targets, vocab);
  HnOptimConfig oc;
  hn_optim_config_init (&oc, HN_OPTIM_ADAMW);
  oc.lr = 3e-3;
  oc.weight_decay = 0.1;
  oc.max_grad_norm = 0.5; /* small enough to clip: the coefficient comes from the global norm */
  for (int step = 0; step < STEPS; step++)
    {
      const gint32 *in = inputs, *tg = targets;
      double w_total = 0;
      for (gint64 i = 0; i < per_step; i++)
        w_total += tg[i] != -100;
      g_assert_true (hn_data_parallel_gradients (dp, in, tg, NULL, ACCUM, w_total, &tr->loss[step], &error));
      g_assert_no_error (error);
      g_assert_true (hn_data_parallel_grad_norm (dp, &tr->norm[step], &error));
      g_assert_no_error (error);
      float clip = hn_clip_coef (tr->norm[step], oc.max_grad_norm);
      g_assert_true (hn_data_parallel_optimizer_step (dp, &oc, step + 1, oc.lr, clip, &error));
      g_assert_no_error (error);
      /* identical weights after every step */
      g_assert_true (hn_data_parallel_replicas_identical (dp, &error));
      g_assert_no_error (error);
    }
}

static void
compare_traces (const Trace *one, const Trace *two)
{
  for (int s = 0; s < STEPS; s++)
    {
      g_test_message ("step %d: loss %.9f vs %.9f, norm %.9f vs %.9f", s + 1, one->loss[s], two->loss[s], one->norm[s],
                      two->norm[s]);
      g_assert_cmpfloat (fabs (one->loss[s] - two->loss[s]), <=, 1e-5);
      g_assert_cmpfloat (fabs (one->norm[s] - two->norm[s]), <=, 1e-5 * MAX (1.0, one->norm[s]));
    }
  g_assert_cmpfloat (one->loss[STEPS - 1], <, one->loss[0]); /* and it trained */
}

static void
test_full_training (void)
{
  Trace one, two;
  train_trace (1, FALSE, &one);
  train_trace (2, FALSE, &two);
  compare_traces (&one, &two);
}

static void
test_lora (void)
{
  Trace one, two;
  train_trace (1, TRUE, &one);
  train_trace (2, TRUE, &two);
  compare_traces (&one, &two);
}

static void
test_uneven_batch (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *model_dir = stories ();
  int devices[2] = { -1, -1 };
  g_autoptr (GPtrArray) ctxs = hn_vk_contexts_new (devices, 2, &error);
  g_assert_no_error (error);
  g_autoptr (HnDataParallel) dp = hn_data_parallel_new ((HnVkContext *const *) ctxs->pdata, 2, model_dir, &error);
  g_assert_no_error (error);
  g_assert_false (hn_data_parallel_setup (dp, 3, SEQ, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "evenly"));
}

/* ---------------------------------------------------------------- as a job */

static gboolean
run_job (GPtrArray *args, GError **error)
{
  g_ptr_array_add (args, NULL);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (args->len - 1, (const char *const *) args->pdata, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  return hn_job_run_sync (job, error);
}

static GPtrArray *
train_args (const char *out, const char *devices_flag, const char *devices)
{
  g_autofree char *model = stories ();
  GPtrArray *a = g_ptr_array_new_with_free_func (g_free);
  const char *common[] = { "transformer-train", "--model-path", model, "--train", text_path, "--out-dir", out,
                           "--max-steps", "4", "--batch-size", "4", "--seq-len", "16", "--lr", "3e-3",
                           "--lr-scheduler", "cosine", "--warmup-steps", "1", "--seed", "7", "--eval-split", "0.2",
                           "--eval-steps", "2", devices_flag, devices, NULL };
  for (int i = 0; common[i]; i++)
    g_ptr_array_add (a, g_strdup (common[i]));
  return a;
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

/* loss of every step; eval_loss where the step evaluated (NAN elsewhere) */
static void
read_losses (const char *path, double *loss, double *eval_loss, int n)
{
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (g_strstrip (text), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, (guint) n);
  for (int i = 0; i < n; i++)
    {
      g_autoptr (JsonParser) p = json_parser_new ();
      g_assert_true (json_parser_load_from_data (p, lines[i], -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (p));
      loss[i] = json_object_get_double_member (o, "loss");
      eval_loss[i] = json_object_has_member (o, "eval_loss") ? json_object_get_double_member (o, "eval_loss") : NAN;
    }
}

static void
test_job_resume (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *one = g_build_filename (tmp_root, "one", NULL);
  g_autofree char *two = g_build_filename (tmp_root, "two", NULL);
  g_autofree char *resumed = g_build_filename (tmp_root, "resumed", NULL);
  g_autofree char *m1 = g_build_filename (tmp_root, "m1.jsonl", NULL);
  g_autofree char *m2 = g_build_filename (tmp_root, "m2.jsonl", NULL);

  g_autoptr (GPtrArray) a1 = train_args (one, "--device-index", "0");
  g_ptr_array_add (a1, g_strdup ("--metrics-file"));
  g_ptr_array_add (a1, g_strdup (m1));
  g_assert_true (run_job (a1, &error));
  g_assert_no_error (error);

  g_autoptr (GPtrArray) a2 = train_args (two, "--device-indices", "0,0");
  const char *more[] = { "--metrics-file", m2, "--save-steps", "2", NULL };
  for (int i = 0; more[i]; i++)
    g_ptr_array_add (a2, g_strdup (more[i]));
  g_assert_true (run_job (a2, &error));
  g_assert_no_error (error);
  double l1[4], l2[4], e1[4], e2[4];
  read_losses (m1, l1, e1, 4);
  read_losses (m2, l2, e2, 4);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (fabs (l1[i] - l2[i]), <=, 1e-5);
  /* evaluation runs on replica 0, its share of the batch at a time: the same mean */
  g_assert_true (isfinite (e1[1]) && isfinite (e1[3]));
  for (int i = 0; i < 4; i++)
    g_assert_true (isfinite (e1[i]) ? fabs (e1[i] - e2[i]) <= 1e-5 : !isfinite (e2[i]));

  /* resume the two-device run from its step-2 checkpoint (written from replica 0) */
  g_autofree char *ck = g_build_filename (two, "checkpoint-step-2", NULL);
  g_autoptr (GPtrArray) a3 = train_args (resumed, "--device-indices", "0,0");
  g_ptr_array_add (a3, g_strdup ("--resume-from-checkpoint"));
  g_ptr_array_add (a3, g_strdup (ck));
  g_assert_true (run_job (a3, &error));
  g_assert_no_error (error);
  g_autoptr (GBytes) w2 = file_bytes (two, "model.safetensors");
  g_autoptr (GBytes) w3 = file_bytes (resumed, "model.safetensors");
  g_assert_true (g_bytes_equal (w2, w3));

  /* a malformed list and both flags at once are errors naming the flag */
  g_autoptr (GPtrArray) bad = train_args (resumed, "--device-indices", "0,x");
  g_assert_false (run_job (bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "--device-indices"));
  g_clear_error (&error);
  g_autoptr (GPtrArray) both = train_args (resumed, "--device-indices", "0,0");
  g_ptr_array_add (both, g_strdup ("--device-index"));
  g_ptr_array_add (both, g_strdup ("0"));
  g_assert_false (run_job (both, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  if (!hn_test_have_vulkan ())
    return 77;
  g_autoptr (GError) error = NULL;
  tmp_root = g_dir_make_tmp ("hn-train-dp-XXXXXX", &error);
  g_assert_no_error (error);
  text_path = hn_test_write_text_head (tmp_root, 3000);
  g_test_add_func ("/train-dp/full", test_full_training);
  g_test_add_func ("/train-dp/lora", test_lora);
  g_test_add_func ("/train-dp/uneven-batch", test_uneven_batch);
  g_test_add_func ("/train-dp/job-resume", test_job_resume);
  int rc = g_test_run ();
  hn_folder_remove_tree (tmp_root);
  g_free (tmp_root);
  g_free (text_path);
  return rc;
}
