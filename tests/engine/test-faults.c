/* Fault injection: nothing a full disk, a cancel, a SIGKILL or a failed
 * Vulkan allocation does may cost the user their work or crash the app.
 * Hooks: hn_fault_* (engine/base/hn-util.h). */
#include "jobs/job.h"
#include "jobs/job-spec.h"
#include "hierarchos/hierarchos-private.h"
#include "transformer/transformer.h"
#include "vk/hn-vk.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

static void
tiny_config (HnHierConfig *c)
{
  hn_hier_config_init_defaults (c, 40, 16);
  c->persistent_dim = 8;
  c->ltm_slots = 16;
  c->ltm_key_dim = 8;
  c->ltm_val_dim = 8;
  c->ltm_topk = 2;
  c->rwkv_head_size = 8;
  c->h_stride = 2;
  c->max_h_steps = 3;
  c->max_l_steps = 3;
  c->rosa_max_context = 24;
  hn_hier_config_derive (c);
}

static HnHierModel *
tiny_model (guint64 seed)
{
  HnHierConfig c;
  tiny_config (&c);
  g_autoptr (GError) error = NULL;
  HnHierModel *m = hn_hier_model_new (&c, &error);
  g_assert_no_error (error);
  hn_hier_config_clear (&c);
  hn_hier_model_init_weights (m, seed);
  return m;
}

static guint32 *
toy_corpus (gsize n)
{
  guint32 *t = g_new (guint32, n);
  for (gsize i = 0; i < n; i++)
    t[i] = (guint32) ((i * 7 + i / 5) % 40);
  return t;
}

static void
train_opts (HnHierTrainOptions *o, const char *out, const guint32 *tok, gsize n)
{
  hn_hier_train_options_defaults (o);
  o->out_dir = out;
  o->tokens = tok;
  o->n_tokens = n;
  o->batch_size = 2;
  o->accumulation_steps = 1;
  o->chunk_size = 8;
  o->max_length = 16;
  o->lr = 3e-3;
  o->min_lr = 1e-4;
  o->warmup_steps = 2;
  o->seed = 11;
  o->threads = 1;
  o->quiet = TRUE;
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *f;
      while (d && (f = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, f, NULL);
          rm_rf (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

static guint64
dir_bytes (const char *dir)
{
  guint64 total = 0;
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *f;
  while (d && (f = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (dir, f, NULL);
      GStatBuf st;
      if (g_stat (p, &st) == 0)
        total += (guint64) st.st_size;
    }
  return total;
}

/* The disk fills while the second checkpoint is written: training fails
 * with an I/O error naming the file, the first checkpoint is intact (a run
 * resumes from it), and no half-written checkpoint looks complete. */
static void
test_disk_full_checkpoint (void)
{
  gsize n = 16 * 8 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autofree char *d1 = g_dir_make_tmp ("faults-a-XXXXXX", NULL);
  g_autofree char *d2 = g_dir_make_tmp ("faults-b-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  HnHierTrainOptions o;

  /* How many bytes one checkpoint takes. */
  g_autoptr (HnHierModel) a = tiny_model (3);
  train_opts (&o, d1, tok, n);
  o.max_steps = 2; /* the last step writes the final model, not a checkpoint */
  o.save_steps = 1;
  g_assert_true (hn_hier_train (a, &o, NULL, &error));
  g_assert_no_error (error);
  g_autofree char *ck1a = g_build_filename (d1, "checkpoint-epoch-0-step-1", NULL);
  guint64 one = dir_bytes (ck1a);
  g_assert_cmpuint (one, >, 1000);

  /* Room for the first checkpoint and half of the second. */
  g_autoptr (HnHierModel) b = tiny_model (3);
  train_opts (&o, d2, tok, n);
  o.max_steps = 3;
  o.save_steps = 1;
  hn_fault_set_write_budget ((gint64) (one + one / 2));
  gboolean ok = hn_hier_train (b, &o, NULL, &error);
  hn_fault_set_write_budget (-1);
  g_assert_false (ok);
  g_assert_error (error, HN_ERROR, HN_ERROR_IO);
  g_test_message ("disk full: %s", error->message);
  g_assert_nonnull (strstr (error->message, g_strerror (ENOSPC)));
  g_assert_nonnull (strstr (error->message, d2));                /* names the file */
  g_clear_error (&error);
  g_autofree char *ck1 = g_build_filename (d2, "checkpoint-epoch-0-step-1", NULL);
  g_autofree char *ck2 = g_build_filename (d2, "checkpoint-epoch-0-step-2", NULL);
  g_assert_true (g_file_test (ck1, G_FILE_TEST_IS_DIR));
  g_assert_false (g_file_test (ck2, G_FILE_TEST_EXISTS));
  /* No temporary file of an atomic write is left in the intact checkpoint. */
  g_autoptr (GDir) dir = g_dir_open (ck1, 0, NULL);
  const char *f;
  while ((f = g_dir_read_name (dir)))
    g_assert_null (strstr (f, ".tmp-"));
  g_assert_cmpuint (dir_bytes (ck1), ==, one);

  /* The intact checkpoint resumes. */
  g_autoptr (HnHierModel) c = hn_hier_model_load (ck1, &error);
  g_assert_no_error (error);
  g_autofree char *d3 = g_dir_make_tmp ("faults-c-XXXXXX", NULL);
  train_opts (&o, d3, tok, n);
  o.max_steps = 3;
  o.resume_from = ck1;
  g_assert_true (hn_hier_train (c, &o, NULL, &error));
  g_assert_no_error (error);
  rm_rf (d1);
  rm_rf (d2);
  rm_rf (d3);
}

typedef struct {
  GCancellable *c;
  int stop, n;
} StopAt;

static void
stop_at_metric (const char *json_line, gpointer data)
{
  StopAt *s = data;
  if (++s->n == s->stop)
    g_cancellable_cancel (s->c);
}

/* Cancelled at random steps and resumed each time from the newest
 * checkpoint, training ends with the same weights as one straight run. */
static void
test_cancel_resume_random (void)
{
  const gint64 total = 7;
  gsize n = 16 * 10 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autoptr (GError) error = NULL;
  HnHierTrainOptions o;
  g_autofree char *d0 = g_dir_make_tmp ("faults-straight-XXXXXX", NULL);
  g_autoptr (HnHierModel) straight = tiny_model (17);
  train_opts (&o, d0, tok, n);
  o.max_steps = total;
  g_assert_true (hn_hier_train (straight, &o, NULL, &error));
  g_assert_no_error (error);

  GRand *rng = g_rand_new_with_seed ((guint32) g_test_rand_int ());
  g_autofree char *dir = g_dir_make_tmp ("faults-cancel-XXXXXX", NULL);
  g_autoptr (HnHierModel) m = tiny_model (17);
  g_autofree char *resume = NULL;
  gint64 done = 0;
  int interruptions = 0;
  while (TRUE)
    {
      g_autofree char *out = g_strdup_printf ("%s/run%d", dir, interruptions);
      train_opts (&o, out, tok, n);
      o.max_steps = total;
      o.save_steps = 1;
      o.resume_from = resume;
      /* Cancel 1..3 steps after the resume point, unless that is the end. */
      StopAt stop = { g_cancellable_new (), (int) g_rand_int_range (rng, 1, 4), 0 };
      gboolean cancel = done + stop.stop < total && interruptions < 4;
      if (cancel)
        {
          o.cancellable = stop.c;
          o.on_metric = stop_at_metric;
          o.on_metric_data = &stop;
        }
      gboolean ok = hn_hier_train (m, &o, NULL, &error);
      g_object_unref (stop.c);
      if (!cancel)
        {
          g_assert_no_error (error);
          g_assert_true (ok);
          break;
        }
      g_assert_error (error, HN_ERROR, HN_ERROR_CANCELLED);
      g_clear_error (&error);
      done += stop.stop;
      interruptions++;
      g_test_message ("cancelled at step %" G_GINT64_FORMAT, done);
      /* The newest checkpoint is the one of the cancelled step. */
      g_autoptr (GDir) d = g_dir_open (out, 0, NULL);
      const char *f;
      g_autofree char *suffix = g_strdup_printf ("-step-%" G_GINT64_FORMAT, done);
      g_clear_pointer (&resume, g_free);
      while (d && (f = g_dir_read_name (d)))
        if (g_str_has_prefix (f, "checkpoint-") && g_str_has_suffix (f, suffix))
          resume = g_build_filename (out, f, NULL);
      g_assert_nonnull (resume);
      hn_hier_model_free (m);
      m = hn_hier_model_load (resume, &error);
      g_assert_no_error (error);
    }
  g_assert_cmpint (interruptions, >=, 1);
  g_assert_cmpmem (straight->params, straight->n_params * 4, m->params, m->n_params * 4);
  g_rand_free (rng);
  rm_rf (d0);
  rm_rf (dir);
}

/* The CLI is killed with SIGKILL while it saves checkpoints: every
 * checkpoint folder left is complete, and training resumes from the newest. */
static void
test_sigkill_during_save (void)
{
  const char *build = g_getenv ("HN_BUILD_DIR");
  const char *shared = g_getenv ("HN_SHARED_DIR");
  if (!build || !shared)
    {
      g_test_skip ("HN_BUILD_DIR / HN_SHARED_DIR not set");
      return;
    }
  g_autofree char *cli = g_build_filename (build, "app", "cli", "hierarchos-native-cli", NULL);
  g_autofree char *tokdir = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("faults-kill-XXXXXX", NULL);
  g_autofree char *model = g_build_filename (tmp, "model", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *text = g_build_filename (tmp, "text.txt", NULL);
  g_autoptr (GError) error = NULL;
  GString *t = g_string_new (NULL);
  for (int i = 0; i < 60; i++)
    g_string_append_printf (t, "Once upon a time there was a little cat number %d who liked to play. ", i);
  g_assert_true (g_file_set_contents (text, t->str, (gssize) t->len, NULL));
  g_string_free (t, TRUE);
  const char *const ov[] = { "persistent_dim=8", "ltm_slots=16", "ltm_key_dim=8", "ltm_val_dim=8", "ltm_topk=2",
                             "rwkv_head_size=8", "max_h_steps=3", "max_l_steps=2", NULL };
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tokdir, model, 16, ov, 7, &error);
  g_assert_no_error (error);

  const char *argv[] = { cli, "train", "--runtime", "cpu", "--model-path", model, "--train", text, "--out-dir", out, "--seq-len", "16",
                         "--training-chunk-size", "8", "--batch-size", "1", "--max-steps", "400", "--save-steps", "1",
                         "--lr", "1e-3", NULL };
  /* Kill it at a random moment after the first checkpoints appear. */
  GPid pid;
  g_assert_true (g_spawn_async (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                                NULL, NULL, &pid, &error));
  g_assert_no_error (error);
  int wait_ms = g_test_rand_int_range (0, 400);
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  g_autofree char *first = g_build_filename (out, "checkpoint-epoch-0-step-2", NULL);
  while (!g_file_test (first, G_FILE_TEST_IS_DIR) && g_get_monotonic_time () < deadline)
    g_usleep (5000);
  g_usleep ((gulong) wait_ms * 1000);
  kill (pid, SIGKILL);
  int status = 0;
  waitpid (pid, &status, 0);
  g_spawn_close_pid (pid);
  g_assert_true (WIFSIGNALED (status));

  /* Every visible checkpoint is complete; find the newest. */
  g_autoptr (GDir) d = g_dir_open (out, 0, &error);
  g_assert_no_error (error);
  const char *f;
  gint64 best = -1;
  g_autofree char *newest = NULL;
  int n_ck = 0;
  while ((f = g_dir_read_name (d)))
    {
      if (!g_str_has_prefix (f, "checkpoint-"))
        continue;
      n_ck++;
      g_autofree char *p = g_build_filename (out, f, NULL);
      g_autoptr (HnHierModel) cm = hn_hier_model_load (p, &error);
      g_assert_no_error (error);
      g_autofree char *ts = g_build_filename (p, "trainer_state.json", NULL);
      g_autofree char *op = g_build_filename (p, "optimizer.safetensors", NULL);
      g_assert_true (g_file_test (ts, G_FILE_TEST_IS_REGULAR));
      g_assert_true (g_file_test (op, G_FILE_TEST_IS_REGULAR));
      const char *s = strstr (f, "-step-");
      gint64 step = g_ascii_strtoll (s + 6, NULL, 10);
      if (step > best)
        {
          best = step;
          g_free (newest);
          newest = g_strdup (p);
        }
    }
  g_test_message ("killed after %d ms: %d checkpoints, newest %s", wait_ms, n_ck, newest);
  g_assert_nonnull (newest);
  /* Resume from it for two more steps. */
  g_autofree char *steps = g_strdup_printf ("%" G_GINT64_FORMAT, best + 2);
  g_autofree char *out2 = g_build_filename (tmp, "out2", NULL);
  const char *argv2[] = { cli, "train", "--runtime", "cpu", "--model-path", model, "--train", text, "--out-dir", out2, "--seq-len", "16",
                          "--training-chunk-size", "8", "--batch-size", "1", "--max-steps", steps,
                          "--lr", "1e-3", "--resume-from-checkpoint", newest, NULL };
  int wstatus = 0;
  g_autofree char *err_out = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv2, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err_out,
                               &wstatus, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (wstatus, NULL))
    g_error ("resume failed: %s", err_out);
  g_assert_true (hn_hier_is_model_dir (out2));
  rm_rf (tmp);
}

/* A Vulkan allocation fails: a clear out-of-memory error naming the
 * allocation, no memory held afterwards, and the context stays usable. */
static void
test_vk_alloc_fails (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_autofree char *why = g_strdup_printf ("no Vulkan device: %s", error->message);
      g_test_skip (why);
      return;
    }
  HnVkMemoryStats before, after;
  hn_vk_context_get_memory_stats (ctx, &before);
  /* A large request (a new block) and a small one: fail the first allocation. */
  hn_fault_set_vk_alloc (1);
  HnVkBuffer *big = hn_vk_buffer_new (ctx, 64 << 20, "tensor model.embed_tokens.weight", &error);
  g_assert_null (big);
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "model.embed_tokens.weight"));
  g_assert_nonnull (strstr (error->message, "out of GPU memory allocating"));
  g_clear_error (&error);
  hn_vk_context_get_memory_stats (ctx, &after);
  g_assert_cmpuint (after.reserved_bytes, ==, before.reserved_bytes);
  g_assert_cmpuint (after.allocated_bytes, ==, before.allocated_bytes);
  g_assert_cmpuint (after.n_blocks, ==, before.n_blocks);
  hn_fault_set_vk_alloc (1);
  HnVkBuffer *small = hn_vk_buffer_new (ctx, 4096, "scratch", &error);
  g_assert_null (small);
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_clear_error (&error);
  hn_vk_context_get_memory_stats (ctx, &after);
  g_assert_cmpuint (after.reserved_bytes, ==, before.reserved_bytes);
  /* The next allocations work and round-trip data. */
  g_autoptr (HnVkBuffer) ok = hn_vk_buffer_new (ctx, 4096, "scratch", &error);
  g_assert_no_error (error);
  float in[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
  g_assert_true (hn_vk_buffer_upload (ok, 0, in, sizeof in, &error));
  g_assert_true (hn_vk_buffer_download (ok, 0, back, sizeof back, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (in, sizeof in, back, sizeof back);
}

/* A model bigger than the device is refused before any upload, with the
 * numbers; the same model loads once it fits. */
static void
test_model_too_big (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_autofree char *why = g_strdup_printf ("no Vulkan device: %s", error->message);
      g_test_skip (why);
      return;
    }
  g_autofree char *dir = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  HnVkMemoryStats before, after;
  hn_vk_context_get_memory_stats (ctx, &before);
  hn_vk_context_set_memory_limit (ctx, 64 << 10);
  g_assert_cmpuint (hn_vk_context_get_capacity (ctx), ==, 64 << 10);
  HnTransformer *m = hn_transformer_load (ctx, dir, &error);
  g_assert_null (m);
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, dir));
  g_assert_nonnull (strstr (error->message, "weights alone need"));
  g_assert_nonnull (strstr (error->message, "65536 bytes"));
  g_clear_error (&error);
  hn_vk_context_get_memory_stats (ctx, &after);
  g_assert_cmpuint (after.allocated_bytes, ==, before.allocated_bytes);
  hn_vk_context_set_memory_limit (ctx, 0);
  m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  hn_transformer_free (m);
}

static gboolean
run_train_job (const char *const *argv, GError **error)
{
  hn_job_register_builtin_kinds ();
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (g_strv_length ((char **) argv), argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  return hn_job_run_sync (job, error);
}

static GBytes *
read_bytes (const char *dir, const char *name)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (p, &data, &len, NULL));
  return g_bytes_new_take (g_steal_pointer (&data), len);
}

/* Out of device memory in a LoRA job (a device limit below what the job
 * needs, then a failed vkAllocateMemory): the error names the allocation,
 * needed and free, and what to change; the checkpoint of the run before is
 * untouched, and the next run on the same process resumes from it. */
static void
test_train_out_of_memory (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  g_autofree char *data = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("faults-oom-XXXXXX", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *ck = g_build_filename (out, "checkpoint-step-2", NULL);
  g_autoptr (GError) error = NULL;
  const char *first[] = { "transformer-finetune", "--model-path", model, "--train", data, "--out-dir", out,
                          "--max-steps", "2", "--save-steps", "2", "--batch-size", "2", "--seq-len", "16", NULL };
  if (!run_train_job (first, &error) && g_error_matches (error, HN_ERROR, HN_ERROR_NO_DEVICE))
    {
      g_test_skip (error->message);
      rm_rf (tmp);
      return;
    }
  g_assert_no_error (error);
  g_autoptr (GBytes) before = read_bytes (ck, "adapter_model.safetensors");
  g_autoptr (GBytes) state_before = read_bytes (ck, "trainer_state.json");

  const char *resume[] = { "transformer-finetune", "--model-path", model, "--train", data, "--out-dir", out,
                           "--max-steps", "4", "--save-steps", "2", "--batch-size", "2", "--seq-len", "16",
                           "--resume-from-checkpoint", ck, NULL };
  /* 1: the weights fit, the activations do not */
  g_setenv ("HN_VK_MEMORY_LIMIT", "1500K", TRUE);
  g_assert_false (run_train_job (resume, &error));
  g_unsetenv ("HN_VK_MEMORY_LIMIT");
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_test_message ("%s", error->message);
  static const char *const says[] = { "out of GPU memory allocating tensor train.", "needed", "free of",
                                      "This job needs about", "batch 2 x 16 tokens", "--batch-size", "--seq-len",
                                      "--grad-accum", "--lora-r", NULL };
  for (int i = 0; says[i]; i++)
    g_assert_nonnull (strstr (error->message, says[i]));
  g_clear_error (&error);
  /* 2: the driver refuses the first block (the fault hook) */
  hn_fault_set_vk_alloc (1);
  g_assert_false (run_train_job (resume, &error));
  hn_fault_set_vk_alloc (0);
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "tensor "));
  g_assert_nonnull (strstr (error->message, "To fit:"));
  g_clear_error (&error);

  /* the checkpoint is as it was, and resuming from it works */
  g_autoptr (GBytes) after = read_bytes (ck, "adapter_model.safetensors");
  g_autoptr (GBytes) state_after = read_bytes (ck, "trainer_state.json");
  g_assert_true (g_bytes_equal (before, after));
  g_assert_true (g_bytes_equal (state_before, state_after));
  g_assert_true (run_train_job (resume, &error));
  g_assert_no_error (error);
  g_autofree char *ck4 = g_build_filename (out, "checkpoint-step-4", NULL);
  g_assert_true (g_file_test (ck4, G_FILE_TEST_IS_DIR));
  rm_rf (tmp);
}

/* Absurd hyperparameters are refused with the allowed range, before any
 * work starts. */
static void
test_absurd_hyperparameters (void)
{
  static const char *const bad[][2] = {
    { "--lr", "1e9" }, { "--lr", "-1" }, { "--batch-size", "0" }, { "--batch-size", "100000000" },
    { "--max-steps", "-5" }, { "--seq-len", "0" }, { "--epochs", "-1" }, { "--weight-decay", "nan" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      const char *argv[] = { "train", "--model-path", "/nonexistent", "--train", "/nonexistent.jsonl", "--out-dir",
                             "/tmp/x", bad[i][0], bad[i][1], NULL };
      g_autoptr (GError) error = NULL;
      g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (9, argv, &error);
      if (spec)
        g_assert_false (hn_job_spec_validate (spec, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
      g_test_message ("%s %s: %s", bad[i][0], bad[i][1], error->message);
      g_assert_nonnull (strstr (error->message, bad[i][0]));
      g_assert_true (strstr (error->message, "must be") || strstr (error->message, "not a finite number"));
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/faults/disk-full-checkpoint", test_disk_full_checkpoint);
  g_test_add_func ("/faults/cancel-resume-random", test_cancel_resume_random);
  g_test_add_func ("/faults/sigkill-during-save", test_sigkill_during_save);
  g_test_add_func ("/faults/vk-alloc-fails", test_vk_alloc_fails);
  g_test_add_func ("/faults/train-out-of-memory", test_train_out_of_memory);
  g_test_add_func ("/limits/absurd-hyperparameters", test_absurd_hyperparameters);
  g_test_add_func ("/limits/model-too-big", test_model_too_big);
  return g_test_run ();
}
