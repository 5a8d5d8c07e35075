/* Hierarchos through the job layer, as the CLI and the GUI run it: a fresh
 * model from a real tokenizer, a few training steps on real text, chat with
 * carried state, and a saved state that resumes to the same reply. */
#include "hierarchos/hierarchos.h"
#include "base/hn-error.h"
#include "jobs/job.h"
#include "jobs/memory-estimate.h"
#include "test-device.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

typedef struct {
  int metrics, turns;
  double last_loss;
  GString *cur;
  GPtrArray *replies;
  GPtrArray *logs;
} Events;

static void
on_event (HnJob *job, const HnJobEvent *ev, gpointer data)
{
  Events *e = data;
  switch (ev->type)
    {
    case HN_JOB_EVENT_METRIC:
      e->metrics++;
      g_assert_true (isfinite (ev->metric.loss));
      e->last_loss = ev->metric.loss;
      break;
    case HN_JOB_EVENT_TOKEN:
      g_string_append (e->cur, ev->token.text);
      break;
    case HN_JOB_EVENT_TURN_END:
      e->turns++;
      g_ptr_array_add (e->replies, g_strdup (e->cur->str));
      g_string_truncate (e->cur, 0);
      break;
    case HN_JOB_EVENT_LOG:
      g_ptr_array_add (e->logs, g_strdup (ev->log.message));
      break;
    default:
      break;
    }
}

static void
events_init (Events *e)
{
  memset (e, 0, sizeof *e);
  e->cur = g_string_new (NULL);
  e->replies = g_ptr_array_new_with_free_func (g_free);
  e->logs = g_ptr_array_new_with_free_func (g_free);
}

static void
events_clear (Events *e)
{
  g_string_free (e->cur, TRUE);
  g_ptr_array_unref (e->replies);
  g_ptr_array_unref (e->logs);
}

static gboolean
logs_contain (const Events *e, const char *what)
{
  for (guint i = 0; i < e->logs->len; i++)
    if (strstr (e->logs->pdata[i], what))
      return TRUE;
  return FALSE;
}

/* What --runtime auto (the default) picks on this machine: the CPU on a
 * CPU-type Vulkan device (lavapipe in CI) or with none, Vulkan on a GPU. */
static const char *
auto_runtime (void)
{
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (NULL);
  if (!ctx || g_strcmp0 (hn_vk_context_get_device_info (ctx)->type, "cpu") == 0)
    return "CPU (--runtime auto";
  return "Vulkan on";
}

static gboolean
run_job (const char *const *argv, const char *const *inputs, Events *e, GError **error)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) g_strv_length ((char **) argv), argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, on_event, e, NULL);
  for (int i = 0; inputs && inputs[i]; i++)
    hn_job_push_input (job, inputs[i]);
  hn_job_close_input (job);
  return hn_job_run_sync (job, error);
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

static GBytes *
file_bytes (const char *dir, const char *name)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_autoptr (GMappedFile) f = g_mapped_file_new (p, FALSE, NULL);
  g_assert_nonnull (f);
  return g_mapped_file_get_bytes (f);
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
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

/* Stops the run of `argv` after step 2, checks DONE names the checkpoint,
 * resumes from it and compares the weights with the uninterrupted run in
 * `full`. */
static void
check_stop_resume (const char *const *argv, const char *out_stop, const char *full)
{
  g_autoptr (GError) error = NULL;
  gsize n = 0;
  while (argv[n])
    n++;
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) n, argv, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_kind_can_save_and_stop (hn_job_spec_get_kind (spec)));
  g_autoptr (HnJob) job = hn_job_new (spec);
  StopSeen seen = { 0 };
  hn_job_set_event_func (job, stop_at_two, &seen, NULL);
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  g_autofree char *ck = g_build_filename (out_stop, "checkpoint-epoch-0-step-2", NULL);
  g_assert_cmpint (seen.last_step, ==, 2);
  g_assert_cmpstr (seen.resume_from, ==, ck);
  g_assert_false (hn_hier_is_model_dir (out_stop)); /* stopped: no final model yet */
  g_autoptr (GPtrArray) resume = g_ptr_array_new ();
  for (gsize i = 0; argv[i]; i++)
    g_ptr_array_add (resume, (gpointer) argv[i]);
  g_ptr_array_add (resume, (gpointer) "--resume-from-checkpoint");
  g_ptr_array_add (resume, ck);
  g_ptr_array_add (resume, NULL);
  Events e;
  events_init (&e);
  g_assert_true (run_job ((const char *const *) resume->pdata, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpint (e.metrics, ==, 1);
  events_clear (&e);
  g_autoptr (GBytes) w1 = file_bytes (full, "model.safetensors");
  g_autoptr (GBytes) w2 = file_bytes (out_stop, "model.safetensors");
  g_assert_true (g_bytes_equal (w1, w2));
  g_free (seen.resume_from);
}

static void
test_init_train_chat (void)
{
  hn_job_register_builtin_kinds ();
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_assert_nonnull (shared);
  g_autofree char *tok = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *text_src = g_build_filename (shared, "datasets", "tinyshakespeare.txt", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hier-jobs-XXXXXX", NULL);
  g_autofree char *model = g_build_filename (tmp, "model", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *text = g_build_filename (tmp, "text.txt", NULL);
  g_autofree char *sf = g_build_filename (tmp, "state.json", NULL);
  g_autofree char *sf1 = g_build_filename (tmp, "state1.json", NULL);
  g_autoptr (GError) error = NULL;

  /* a small slice of real text */
  g_autofree char *all = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (text_src, &all, &len, NULL));
  g_assert_true (g_file_set_contents (text, all, 6000, NULL));

  const char *const ov[] = { "persistent_dim=8", "ltm_slots=16", "ltm_key_dim=8", "ltm_val_dim=8", "ltm_topk=2",
                             "rwkv_head_size=8", "max_h_steps=3", "max_l_steps=2", NULL };
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tok, model, 16, ov, 7, &error);
  g_assert_no_error (error);
  g_assert_cmpint (m->V, ==, 512);
  g_assert_true (hn_hier_is_model_dir (model));

  Events e;
  events_init (&e);
  const char *const train[] = { "train", "--runtime", "cpu", "--model-path", model, "--train", text, "--out-dir", out, "--seq-len", "16",
                                "--training_chunk_size", "8", "--batch_size", "2", "--accumulation-steps", "1",
                                "--max-steps", "3", "--starting-lr", "3e-3", NULL };
  g_assert_true (run_job (train, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpint (e.metrics, ==, 3);
  g_assert_true (logs_contain (&e, "Hierarchos training runtime: CPU"));
  double cpu_loss = e.last_loss;
  g_assert_true (hn_hier_is_model_dir (out));
  g_autofree char *tj = g_build_filename (out, "tokenizer.json", NULL);
  g_assert_true (g_file_test (tj, G_FILE_TEST_EXISTS));
  events_clear (&e);

  /* "Stop and save" after step 2: DONE names the checkpoint, and resuming
   * from it ends with the weights of the run above. */
  g_autofree char *out_stop = g_build_filename (tmp, "out-stop", NULL);
  const char *const train_stop[] = { "train", "--runtime", "cpu", "--model-path", model, "--train", text, "--out-dir",
                                     out_stop, "--seq-len", "16", "--training_chunk_size", "8", "--batch_size", "2",
                                     "--accumulation-steps", "1", "--max-steps", "3", "--starting-lr", "3e-3", NULL };
  check_stop_resume (train_stop, out_stop, out);

  /* The same run on the Vulkan trainer: its own stop and resume is
   * bit-exact too, and its losses follow the CPU trainer's. */
  if (hn_test_have_vulkan ())
    {
      g_autofree char *out_vk = g_build_filename (tmp, "out-vk", NULL);
      g_autofree char *out_vk_stop = g_build_filename (tmp, "out-vk-stop", NULL);
      const char *const train_vk[] = { "train", "--runtime", "vulkan", "--model-path", model, "--train", text, "--out-dir",
                                       out_vk, "--seq-len", "16", "--training_chunk_size", "8", "--batch_size", "2",
                                       "--accumulation-steps", "1", "--max-steps", "3", "--starting-lr", "3e-3", NULL };
      const char *const train_vk_stop[] = { "train", "--runtime", "vulkan", "--model-path", model, "--train", text,
                                            "--out-dir", out_vk_stop, "--seq-len", "16", "--training_chunk_size", "8",
                                            "--batch_size", "2", "--accumulation-steps", "1", "--max-steps", "3",
                                            "--starting-lr", "3e-3", NULL };
      events_init (&e);
      g_assert_true (run_job (train_vk, NULL, &e, &error));
      g_assert_no_error (error);
      g_assert_cmpint (e.metrics, ==, 3);
      g_assert_true (logs_contain (&e, "Hierarchos training runtime: Vulkan"));
      g_assert_cmpfloat (fabs (e.last_loss - cpu_loss), <, 2e-3);
      events_clear (&e);
      check_stop_resume (train_vk_stop, out_vk_stop, out_vk);
    }

  /* No --runtime: auto, which trains on the CPU on a software Vulkan device
   * and says so (a 60-step run took 50 minutes on lavapipe, 39 s on the CPU). */
  {
    g_autofree char *out_auto = g_build_filename (tmp, "out-auto", NULL);
    const char *const train_auto[] = { "train", "--model-path", model, "--train", text, "--out-dir", out_auto,
                                       "--seq-len", "16", "--training_chunk_size", "8", "--batch_size", "2",
                                       "--max-steps", "1", NULL };
    events_init (&e);
    g_assert_true (run_job (train_auto, NULL, &e, &error));
    g_assert_no_error (error);
    g_autofree char *want = g_strconcat ("Hierarchos training runtime: ", auto_runtime (), NULL);
    if (!logs_contain (&e, want))
      g_error ("the log lacks '%s'", want);
    if (g_str_has_prefix (auto_runtime (), "CPU") && hn_test_have_vulkan ())
      g_assert_true (logs_contain (&e, "is a CPU-type (software) Vulkan device"));
    events_clear (&e);
  }

  /* A prompt/completion JSONL dataset through the dataset layer (loss on
   * completions only). */
  events_init (&e);
  g_autofree char *jl = g_build_filename (tmp, "pc.jsonl", NULL);
  GString *rows = g_string_new (NULL);
  for (int i = 0; i < 12; i++)
    g_string_append_printf (rows, "{\"prompt\": \"Who comes here? %d\", \"completion\": \" A friend, my lord.\"}\n", i);
  g_assert_true (g_file_set_contents (jl, rows->str, -1, NULL));
  g_string_free (rows, TRUE);
  g_autofree char *out_jl = g_build_filename (tmp, "out-jl", NULL);
  const char *const train_jl[] = { "train", "--runtime", "cpu", "--model-path", model, "--train", jl, "--out-dir", out_jl, "--seq-len", "16",
                                   "--training-chunk-size", "8", "--batch-size", "2", "--max-steps", "2", NULL };
  g_assert_true (run_job (train_jl, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpint (e.metrics, ==, 2);
  events_clear (&e);

  /* Session A: two turns with carried state, a /save between them. */
  events_init (&e);
  g_autofree char *save_cmd = g_strdup_printf ("/save %s", sf1);
  const char *const chat[] = { "chat", "--model-path", out, "--carry-chat-state", "--chat-state-file", sf,
                               "--max-new-tokens", "12", "--seed", "5", NULL };
  const char *const inputs_a[] = { "Hello there", save_cmd, "/status", "What news?", "/quit", "ignored", NULL };
  g_assert_true (run_job (chat, inputs_a, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpint (e.turns, ==, 4);
  g_assert_cmpuint (e.replies->len, ==, 4);
  g_assert_cmpstr (e.replies->pdata[0], !=, "");
  g_assert_true (g_file_test (sf, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (sf1, G_FILE_TEST_EXISTS));
  g_autofree char *reply_a = g_strdup (e.replies->pdata[3]);
  events_clear (&e);

  /* Session B resumes the state saved after turn 1: same seed, same reply. */
  events_init (&e);
  const char *const chat_b[] = { "chat", "--model-path", out, "--resume-chat-from-state-file", sf1,
                                 "--max-new-tokens", "12", "--seed", "5", NULL };
  const char *const inputs_b[] = { "What news?", NULL };
  g_assert_true (run_job (chat_b, inputs_b, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (e.replies->len, ==, 1);
  g_assert_cmpstr (e.replies->pdata[0], ==, reply_a);
  g_autofree char *want_rt = g_strconcat ("Hierarchos runtime: ", auto_runtime (), NULL);
  g_assert_true (logs_contain (&e, want_rt));
  events_clear (&e);

  /* generate: the Vulkan runtime with --runtime vulkan, the CPU runtime with
   * --runtime cpu, each named in the log; greedy continuations are identical. */
  char *gen_text[2] = { NULL, NULL };
  for (int i = 0; i < 2; i++)
    {
      events_init (&e);
      const char *const gen[] = { "generate", "--model-path", out, "--prompt", "First Citizen:", "--max-new-tokens", "16",
                                  "--runtime", i ? "cpu" : "vulkan", NULL };
      g_assert_true (run_job (gen, NULL, &e, &error));
      g_assert_no_error (error);
      g_assert_true (logs_contain (&e, i ? "Hierarchos runtime: CPU" : "Hierarchos runtime: Vulkan"));
      g_assert_cmpuint (strlen (e.cur->str), >, 1);
      gen_text[i] = g_strdup (e.cur->str);
      events_clear (&e);
    }
  g_assert_cmpstr (gen_text[0], ==, gen_text[1]);
  /* --device cpu is not a device: the error names --runtime cpu */
  events_init (&e);
  const char *const gen_bad[] = { "generate", "--model-path", out, "--prompt", "x", "--device", "cpu", NULL };
  g_assert_false (run_job (gen_bad, NULL, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "--runtime cpu"));
  g_clear_error (&error);
  events_clear (&e);
  g_free (gen_text[0]);
  g_free (gen_text[1]);

  /* A state from a model with another contract is refused. */
  g_autofree char *other = g_build_filename (tmp, "other", NULL);
  const char *const ov2[] = { "persistent_dim=8", "ltm_slots=16", "ltm_key_dim=8", "ltm_val_dim=8", "ltm_topk=2",
                              "rwkv_head_size=8", "max_h_steps=3", "max_l_steps=2", "h_stride=3", NULL };
  g_autoptr (HnHierModel) m2 = hn_hier_init_model_dir (tok, other, 16, ov2, 7, &error);
  g_assert_no_error (error);
  events_init (&e);
  const char *const chat_c[] = { "chat", "--model-path", other, "--resume-chat-from-state-file", sf1, NULL };
  g_assert_false (run_job (chat_c, inputs_b, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  events_clear (&e);
  /* a recurrent model has no attention cache to page */
  events_init (&e);
  const char *const chat_p[] = { "chat", "--model-path", out, "--cache-implementation", "paged", NULL };
  g_assert_false (run_job (chat_p, inputs_b, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "recurrent"));
  g_clear_error (&error);
  events_clear (&e);
  events_init (&e);
  const char *const gen_cb[] = { "generate", "--model-path", out, "--prompt", "a", "--continuous-batching", NULL };
  g_assert_false (run_job (gen_cb, NULL, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "recurrent"));
  g_clear_error (&error);
  events_clear (&e);

  /* Fine-tuning trains the default subset only (on the Vulkan trainer
   * where a device exists: the subset is the optimizer's, shared). */
  events_init (&e);
  g_autofree char *ft = g_build_filename (tmp, "ft", NULL);
  const char *rt = hn_test_have_vulkan () ? "vulkan" : "cpu";
  const char *const fine[] = { "finetune", "--runtime", rt, "--model-path", out, "--train", text, "--out-dir", ft, "--seq-len", "8",
                               "--training-chunk-size", "8", "--batch-size", "2", "--max-steps", "2", "--lr", "1e-2", NULL };
  g_assert_true (run_job (fine, NULL, &e, &error));
  g_assert_no_error (error);
  events_clear (&e);
  g_autoptr (HnHierModel) before = hn_hier_model_load (out, &error);
  g_autoptr (HnHierModel) after = hn_hier_model_load (ft, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < before->param_list->len; i++)
    {
      HnHierParam *p = before->param_list->pdata[i];
      gboolean same = memcmp (before->params + p->offset, after->params + p->offset, p->numel * 4) == 0;
      if (!p->finetune && strcmp (p->name, "memory_gate_warmup_step") != 0)
        g_assert_true (same);
    }
  g_assert_true (memcmp (hn_hier_model_data (before, "h_rnn.w2"), hn_hier_model_data (after, "h_rnn.w2"),
                         16 * sizeof (float)) != 0);
  rm_rf (tmp);
}

/* The memory estimate of Hierarchos jobs: host memory for training (the
 * CPU trainer; test-hierarchos.c holds it against a run), the Vulkan
 * runner's buffers for chat; --dry-run prints the same and runs nothing. */
static void
test_memory_estimate (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *tok = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hier-mem-XXXXXX", NULL);
  g_autofree char *model = g_build_filename (tmp, "model", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *text = g_build_filename (tmp, "text.txt", NULL);
  g_assert_true (g_file_set_contents (text, "To be, or not to be, that is the question.", -1, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tok, model, 16, NULL, 7, &error);
  g_assert_no_error (error);

  const char *const train[] = { "train", "--runtime", "cpu", "--model-path", model, "--train", text, "--out-dir", out, "--seq-len", "16",
                                "--training-chunk-size", "8", "--batch-size", "2", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) G_N_ELEMENTS (train) - 1, train, &error);
  g_assert_no_error (error);
  HnMemoryEstimate e;
  g_assert_true (hn_memory_estimate_for_spec (spec, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_true (e.host);
  g_assert_true (e.device_known); /* the host's memory */
  g_assert_cmpint (e.n_params, ==, (gint64) m->n_params);
  g_assert_cmpuint (e.weights, ==, 4 * m->n_params);
  g_assert_cmpuint (e.optimizer, ==, 8 * m->n_params);
  g_assert_cmpuint (e.gradients, ==, 4 * m->n_params * 3); /* the step's and one per row */
  g_assert_cmpuint (e.activations, >, 0);
  g_autofree char *summary = hn_memory_estimate_summary (&e);
  g_assert_nonnull (strstr (summary, "host memory"));
  guint64 total = e.total;
  hn_memory_estimate_clear (&e);

  /* a fresh model from the tokenizer: the geometry of the flags */
  const char *const fresh[] = { "train", "--runtime", "cpu", "--tokenizer-path", tok, "--context-dim", "16", "--train", text, "--out-dir",
                                out, "--seq-len", "16", "--training-chunk-size", "8", "--batch-size", "2", NULL };
  g_autoptr (HnJobSpec) fspec = hn_job_spec_new_from_argv ((int) G_N_ELEMENTS (fresh) - 1, fresh, &error);
  g_assert_no_error (error);
  g_assert_true (hn_memory_estimate_for_spec (fspec, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpint (e.n_params, ==, (gint64) m->n_params);
  hn_memory_estimate_clear (&e);

  /* chat: the Vulkan runner's parameters and work buffer (test-hierarchos-vk checks them) */
  const char *const chat[] = { "chat", "--runtime", "vulkan", "--model-path", model, NULL };
  g_autoptr (HnJobSpec) cspec = hn_job_spec_new_from_argv ((int) G_N_ELEMENTS (chat) - 1, chat, &error);
  g_assert_no_error (error);
  g_assert_true (hn_memory_estimate_for_spec (cspec, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_false (e.host);
  g_assert_cmpint (e.workload, ==, HN_MEMORY_GENERATE);
  g_assert_cmpuint (e.weights, ==, 4 * m->n_params);
  g_assert_cmpuint (e.activations, >, 0);
  hn_memory_estimate_clear (&e);

  /* --dry-run --json through the CLI */
  g_autofree char *cli = g_build_filename (g_getenv ("HN_BUILD_DIR"), "app", "cli", "hierarchos-native-cli", NULL);
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, cli);
  for (gsize i = 0; train[i]; i++)
    g_ptr_array_add (argv, (gpointer) train[i]);
  g_ptr_array_add (argv, (gpointer) "--dry-run");
  g_ptr_array_add (argv, (gpointer) "--json");
  g_ptr_array_add (argv, NULL);
  g_autofree char *so = NULL;
  int status = 0;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &so, NULL, &status, &error));
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, so, -1, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  g_assert_cmpstr (json_object_get_string_member (o, "memory"), ==, "host");
  g_assert_cmpint (json_object_get_int_member (o, "total_bytes"), ==, (gint64) total);
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
  rm_rf (tmp);
}

/* Non-finite numbers: a NaN weight is refused at load naming the file and the
 * tensor; logits that overflow with finite weights fail naming the model
 * folder and saying that its weights are finite (not "non-finite logit"
 * alone). */
static void
test_nonfinite (void)
{
  hn_job_register_builtin_kinds ();
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hier-jobs-XXXXXX", NULL);
  g_autofree char *nan_dir = g_build_filename (tmp, "nan", NULL);
  g_autofree char *big_dir = g_build_filename (tmp, "big", NULL);
  g_autoptr (GError) error = NULL;
  const char *const ov[] = { "persistent_dim=8", "ltm_slots=16", "ltm_key_dim=8", "ltm_val_dim=8", "ltm_topk=2",
                             "rwkv_head_size=8", "max_h_steps=3", "max_l_steps=2", NULL };
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tok, nan_dir, 16, ov, 7, &error);
  g_assert_no_error (error);
  HnHierParam *head = NULL, *victim = m->param_list->pdata[m->param_list->len / 2];
  for (guint i = 0; i < m->param_list->len; i++)
    if (g_str_equal (((HnHierParam *) m->param_list->pdata[i])->name, "lm_head.weight"))
      head = m->param_list->pdata[i];
  g_assert_nonnull (head);
  g_assert_true (victim != head);

  /* logits past the float range from finite weights */
  for (gsize j = 0; j < head->numel; j++)
    m->params[head->offset + j] = 3e38f;
  g_assert_cmpint (g_mkdir (big_dir, 0755), ==, 0);
  g_assert_true (hn_hier_model_save (m, big_dir, &error));
  g_assert_no_error (error);
  Events e;
  events_init (&e);
  const char *const chat_big[] = { "chat", "--model-path", big_dir, "--tokenizer-path", tok, "--runtime", "cpu",
                                   "--max-new-tokens", "2", NULL };
  const char *const inputs[] = { "Hello", NULL };
  g_assert_false (run_job (chat_big, inputs, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
  g_autofree char *weights = g_build_filename (big_dir, "model.safetensors", NULL);
  if (!strstr (error->message, "non-finite logit (NaN or Inf)") || !g_str_has_prefix (error->message, big_dir) ||
      !strstr (error->message, "are finite (checked at load)") || !strstr (error->message, weights))
    g_error ("unclear: %s", error->message);
  g_clear_error (&error);
  events_clear (&e);

  /* a NaN in one weight: refused at load, the file and the tensor named */
  m->params[victim->offset + victim->numel / 2] = NAN;
  g_assert_true (hn_hier_model_save (m, nan_dir, &error));
  g_assert_no_error (error);
  events_init (&e);
  const char *const chat_nan[] = { "chat", "--model-path", nan_dir, "--tokenizer-path", tok, "--runtime", "cpu",
                                   "--max-new-tokens", "2", NULL };
  g_assert_false (run_job (chat_nan, inputs, &e, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
  g_autofree char *nan_weights = g_build_filename (nan_dir, "model.safetensors", NULL);
  g_autofree char *named = g_strdup_printf ("%s: tensor '%s' contains non-finite values", nan_weights, victim->name);
  if (!strstr (error->message, named))
    g_error ("got '%s', want '%s'", error->message, named);
  g_clear_error (&error);
  events_clear (&e);
  rm_rf (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hierarchos/jobs/init-train-chat", test_init_train_chat);
  g_test_add_func ("/hierarchos/jobs/memory-estimate", test_memory_estimate);
  g_test_add_func ("/hierarchos/jobs/nonfinite", test_nonfinite);
  return g_test_run ();
}
