/* Job spec <-> argv round trips, parse errors, validation, and the job runner
 * (registry, events, cancellation, input queue). */
#include "job-cli.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* Sets every option of the spec to a valid value different from its default. */
static void
fill_non_default (HnJobSpec *spec)
{
  guint n;
  const HnOptionInfo *opts = hn_job_spec_get_options (spec, &n);
  for (guint i = 0; i < n; i++)
    {
      const HnOptionInfo *o = &opts[i];
      switch (o->type)
        {
        case HN_OPTION_STRING:
          hn_job_spec_set_string (spec, o->name,
                                  o->hint == HN_OPTION_HINT_DEVICES ? "0,1" : "a value with spaces/and 'quotes'");
          break;
        case HN_OPTION_CHOICE:
          {
            g_auto (GStrv) choices = g_strsplit (o->choices, " ", -1);
            const char *cur = hn_job_spec_get_string (spec, o->name);
            const char *pick = g_strcmp0 (choices[0], cur) != 0 ? choices[0] : choices[1];
            g_assert_nonnull (pick);
            hn_job_spec_set_string (spec, o->name, pick);
          }
          break;
        case HN_OPTION_INT:
          {
            gint64 d = hn_job_spec_get_int (spec, o->name);
            gint64 v = d + 1;
            if (o->min <= o->max && (double) v > o->max)
              v = d - 1;
            if (o->min <= o->max && (double) v < o->min) /* a kind without a default ("seq-len=") reads 0 */
              v = (gint64) o->min;
            hn_job_spec_set_int (spec, o->name, v);
          }
          break;
        case HN_OPTION_DOUBLE:
          {
            double d = hn_job_spec_get_double (spec, o->name);
            double v = (o->min <= o->max) ? o->min + (o->max - o->min) * 0.37 : d + 0.25;
            if (v == d)
              v = (o->min + v) / 2;
            hn_job_spec_set_double (spec, o->name, v);
          }
          break;
        case HN_OPTION_BOOL:
          hn_job_spec_set_bool (spec, o->name, !hn_job_spec_get_bool (spec, o->name));
          break;
        case HN_OPTION_STRINGV:
          {
            const char *v[] = { "first item", "--second", NULL };
            hn_job_spec_set_strv (spec, o->name, v);
          }
          break;
        }
      g_assert_true (hn_job_spec_is_set (spec, o->name));
      g_autoptr (GError) error = NULL;
      if (!hn_job_spec_check_option (spec, o->name, &error))
        g_error ("%s --%s: %s", hn_job_spec_get_kind (spec), o->name, error->message);
    }
}

static HnJobSpec *
round_trip (HnJobSpec *spec, HnArgvFlags flags)
{
  g_auto (GStrv) argv = hn_job_spec_to_argv (spec, flags);
  g_autoptr (GError) error = NULL;
  HnJobSpec *back = hn_job_spec_new_from_argv ((int) g_strv_length (argv), (const char *const *) argv, &error);
  g_assert_no_error (error);
  return back;
}

static void
test_round_trip_all_kinds (void)
{
  /* the job kinds and the CLI commands that take their options from the same table */
  const HnJobKindInfo *tables[] = { hn_job_kind_table, hn_command_table };
  for (guint t = 0; t < G_N_ELEMENTS (tables); t++)
  for (const HnJobKindInfo *k = tables[t]; k->name; k++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (HnJobSpec) spec = hn_job_spec_new (k->name, &error);
      g_assert_no_error (error);

      /* all defaults: argv is just the kind */
      g_auto (GStrv) bare = hn_job_spec_to_argv (spec, HN_ARGV_DEFAULT);
      g_assert_cmpuint (g_strv_length (bare), ==, 1);
      g_assert_cmpstr (bare[0], ==, k->name);
      g_autoptr (HnJobSpec) bare_back = round_trip (spec, HN_ARGV_DEFAULT);
      g_assert_true (hn_job_spec_equal (spec, bare_back));

      fill_non_default (spec);
      g_autoptr (HnJobSpec) back = round_trip (spec, HN_ARGV_UNMASKED);
      if (!hn_job_spec_equal (spec, back))
        {
          g_autofree char *a = hn_job_spec_to_command_line (spec, HN_ARGV_UNMASKED);
          g_autofree char *b = hn_job_spec_to_command_line (back, HN_ARGV_UNMASKED);
          g_error ("round trip of %s differs:\n%s\n%s", k->name, a, b);
        }
      /* and through the shell-quoted line */
      g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_UNMASKED | HN_ARGV_WITH_PROGRAM);
      g_auto (GStrv) parsed = NULL;
      int argc = 0;
      g_assert_true (g_shell_parse_argv (line, &argc, &parsed, NULL));
      g_assert_cmpstr (parsed[0], ==, HN_CLI_PROGRAM);
      g_autoptr (HnJobSpec) back2 = hn_job_spec_new_from_argv (argc - 1, (const char *const *) parsed + 1, &error);
      g_assert_no_error (error);
      g_assert_true (hn_job_spec_equal (spec, back2));
    }
}

/* The paged cache and continuous batching, as the Generate page sets them, survive the
 * preview -> CLI parser round trip. */
static void
test_round_trip_batching (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-generate", NULL);
  hn_job_spec_set_string (spec, "model-path", "/m");
  const char *prompts[] = { "Once upon a time", "The dog", NULL };
  hn_job_spec_set_strv (spec, "prompt", prompts);
  hn_job_spec_set_string (spec, "cache-implementation", "paged");
  hn_job_spec_set_bool (spec, "continuous-batching", TRUE);
  hn_job_spec_set_int (spec, "continuous-batch-max-requests", 16);
  g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_WITH_PROGRAM);
  g_assert_nonnull (strstr (line, "--prompt 'Once upon a time' --prompt 'The dog'"));
  g_assert_nonnull (strstr (line, "--cache-implementation paged --continuous-batching --continuous-batch-max-requests 16"));
  g_auto (GStrv) argv = NULL;
  int argc = 0;
  g_assert_true (g_shell_parse_argv (line, &argc, &argv, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) back = hn_job_spec_new_from_argv (argc - 1, (const char *const *) argv + 1, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_spec_equal (spec, back));
  g_assert_cmpint (hn_job_spec_get_int (back, "continuous-batch-max-requests"), ==, 16);
}

static void
test_secret_masked (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("pull", NULL);
  hn_job_spec_set_string (spec, "repo", "org/model");
  hn_job_spec_set_string (spec, "hf-token", "hf_supersecret");
  g_autofree char *preview = hn_job_spec_to_command_line (spec, HN_ARGV_WITH_PROGRAM);
  g_assert_null (strstr (preview, "supersecret"));
  g_assert_nonnull (strstr (preview, "--hf-token '" HN_JOB_SPEC_MASK "'"));
  g_assert_true (g_str_has_prefix (preview, "hierarchos-native-cli pull --repo org/model"));
  g_auto (GStrv) real = hn_job_spec_to_argv (spec, HN_ARGV_UNMASKED);
  g_autofree char *joined = g_strjoinv (" ", real);
  g_assert_nonnull (strstr (joined, "--hf-token hf_supersecret"));
}

static HnJobSpec *
parse (const char *line, GError **error)
{
  g_auto (GStrv) argv = NULL;
  int argc = 0;
  g_assert_true (g_shell_parse_argv (line, &argc, &argv, NULL));
  return hn_job_spec_new_from_argv (argc, (const char *const *) argv, error);
}

static void
test_aliases_and_defaults (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = parse ("lora --model_path m --batch_size 8 --learning-rate 1e-3 "
                                      "--gradient_accumulation_steps=4 --no-shuffle --train=d.jsonl", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_job_spec_get_kind (spec), ==, "transformer-finetune");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "model-path"), ==, "m");
  g_assert_cmpint (hn_job_spec_get_int (spec, "batch-size"), ==, 8);
  g_assert_cmpfloat (hn_job_spec_get_double (spec, "lr"), ==, 1e-3);
  g_assert_cmpint (hn_job_spec_get_int (spec, "grad-accum"), ==, 4);
  g_assert_true (hn_job_spec_get_bool (spec, "no-shuffle"));
  g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_DEFAULT);
  g_assert_cmpstr (line, ==, "transformer-finetune --model-path m --train d.jsonl --batch-size 8 "
                             "--grad-accum 4 --lr 0.001 --no-shuffle");

  /* kind-specific defaults */
  g_autoptr (HnJobSpec) lora = hn_job_spec_new ("transformer-finetune", NULL);
  g_assert_cmpfloat (hn_job_spec_get_double (lora, "lr"), ==, 2e-4);
  g_autoptr (HnJobSpec) full = hn_job_spec_new ("transformer-train", NULL);
  g_assert_cmpfloat (hn_job_spec_get_double (full, "lr"), ==, 5e-5);
  g_autoptr (HnJobSpec) chat = hn_job_spec_new ("chat", NULL);
  g_assert_true (hn_job_spec_get_bool (chat, "do-sample"));
  hn_job_spec_set_bool (chat, "do-sample", FALSE);
  g_auto (GStrv) cargv = hn_job_spec_to_argv (chat, HN_ARGV_DEFAULT);
  g_assert_cmpstr (cargv[1], ==, "--do-sample=false");
  g_autoptr (HnJobSpec) hier = parse ("train --tokenizer-path t --train x --out-dir o --starting-lr 3e-4 "
                                      "--batch_size 2 --accumulation-steps 3 --training-chunk-size 64", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_job_spec_get_kind (hier), ==, "hierarchos-train");
  g_assert_cmpfloat (hn_job_spec_get_double (hier, "lr"), ==, 3e-4);
  g_assert_cmpint (hn_job_spec_get_int (hier, "seed"), ==, 1337);
  g_assert_true (hn_job_spec_validate (hier, &error));

  /* setting the default value unsets; MODEL_DEFAULT options stay set */
  hn_job_spec_set_int (full, "batch-size", 4);
  g_assert_false (hn_job_spec_is_set (full, "batch-size"));
  g_autoptr (HnJobSpec) gen = hn_job_spec_new ("generate", NULL);
  hn_job_spec_set_double (gen, "temperature", 1.0);
  g_assert_true (hn_job_spec_is_set (gen, "temperature"));
  g_auto (GStrv) gargv = hn_job_spec_to_argv (gen, HN_ARGV_DEFAULT);
  g_assert_cmpstr (gargv[1], ==, "--temperature");
  g_assert_cmpstr (gargv[2], ==, "1");

  /* repeatable, negative numbers, a value that starts with "--" */
  g_autoptr (HnJobSpec) rep = parse ("generate --model-path m --prompt 'Once upon' --prompt '--dash' "
                                     "--device-index -1 --seed 7", &error);
  g_assert_no_error (error);
  const char *const *prompts = hn_job_spec_get_strv (rep, "prompt");
  g_assert_cmpuint (g_strv_length ((char **) prompts), ==, 2);
  g_assert_cmpstr (prompts[1], ==, "--dash");
  g_assert_false (hn_job_spec_is_set (rep, "device-index"));
}

static void
expect_error (const char *line, const char *fragment)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = parse (line, &error);
  g_assert_null (spec);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  if (!strstr (error->message, fragment))
    g_error ("'%s': message '%s' lacks '%s'", line, error->message, fragment);
}

static void
test_parse_errors (void)
{
  expect_error ("generate --bogus 1", "unknown option --bogus for transformer-generate");
  expect_error ("generate --batch-size 2", "unknown option --batch-size");
  expect_error ("transformer-train --batch-size x", "--batch-size: 'x' is not a whole number");
  expect_error ("transformer-train --batch-size 0", "--batch-size: 0 is out of range: it must be at least 1 and at most 65536");
  expect_error ("transformer-train --lr 0", "--lr: 0 is out of range: it must be greater than 0 and at most 10");
  expect_error ("transformer-train --lr nan", "--lr: 'nan' is not a finite number");
  expect_error ("transformer-train --max-steps -5", "it must be at least 0");
  expect_error ("transformer-train --lr-scheduler wavy", "--lr-scheduler: 'wavy' is not one of constant linear cosine");
  expect_error ("transformer-train --lr", "--lr needs a value");
  expect_error ("transformer-train --lr --epochs 2", "--lr needs a value");
  expect_error ("transformer-train --no-shuffle=maybe", "--no-shuffle: 'maybe' is not true or false");
  expect_error ("transformer-train stray", "unexpected argument 'stray'");
  expect_error ("nonsense", "unknown job kind 'nonsense'");
  /* one value given twice: an error, never the last silently */
  expect_error ("transformer-train --lr 1e-3 --lr 1e-4", "--lr is given twice; it takes one value");
  expect_error ("generate --model-path a --model a", "--model-path is given twice"); /* an alias is the same option */
  expect_error ("transformer-train --no-shuffle --no-shuffle=false", "--no-shuffle is given twice");
}

/* --prompt and --input-ids repeat: each is one request. */
static void
test_repeatable (void)
{
  const char *argv[] = { "generate", "--input-ids", "1,2", "--prompt", "a, b", "--input-ids", "1", "--prompt", "c", NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  const char *const *ids = hn_job_spec_get_strv (spec, "input-ids");
  g_assert_cmpuint (g_strv_length ((char **) ids), ==, 2);
  g_assert_cmpstr (ids[0], ==, "1,2");
  g_assert_cmpstr (ids[1], ==, "1");
  const char *const *prompts = hn_job_spec_get_strv (spec, "prompt");
  g_assert_cmpuint (g_strv_length ((char **) prompts), ==, 2);
  g_assert_cmpstr (prompts[0], ==, "a, b");
  /* and back to argv, one flag per item */
  g_auto (GStrv) back = hn_job_spec_to_argv (spec, 0);
  g_autofree char *line = g_strjoinv (" ", back);
  g_assert_nonnull (strstr (line, "--input-ids 1,2 --input-ids 1"));
}

static void
test_validate (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-train", NULL);
  g_assert_false (hn_job_spec_validate (spec, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (error->message, ==, "transformer-train needs --model-path or --hf-model");
  g_clear_error (&error);
  hn_job_spec_set_string (spec, "model-path", "m");
  hn_job_spec_set_string (spec, "hf-model", "org/m");
  g_assert_false (hn_job_spec_validate (spec, &error));
  g_assert_cmpstr (error->message, ==, "transformer-train takes only one of --model-path or --hf-model");
  g_clear_error (&error);
  hn_job_spec_set_string (spec, "hf-model", NULL);
  hn_job_spec_set_string (spec, "train", "d.txt");
  hn_job_spec_set_string (spec, "out-dir", "out");
  g_assert_true (hn_job_spec_validate (spec, &error));
  g_assert_no_error (error);
  /* a GUI may hold an out-of-range value: validate names it */
  hn_job_spec_set_double (spec, "eval-split", 0.9);
  g_assert_false (hn_job_spec_validate (spec, &error));
  g_assert_cmpstr (error->message, ==, "--eval-split: 0.9 is out of range: it must be at least 0 and at most 0.5");
}

/* --device-indices: several devices (training replicas, pipeline stages) */
static void
test_device_indices (void)
{
  g_autoptr (GError) error = NULL;
  const char *argv[] = { "transformer-train", "--model-path", "m", "--train", "d.txt", "--out-dir", "o",
                         "--device-indices", "0,1", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_spec_validate (spec, &error));
  g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_DEFAULT);
  g_assert_nonnull (strstr (line, " --device-indices 0,1"));
  g_autoptr (HnJobSpec) back = round_trip (spec, HN_ARGV_DEFAULT);
  g_assert_true (hn_job_spec_equal (spec, back));
  g_autoptr (GArray) devs = hn_job_spec_get_devices (spec, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (devs->len, ==, 2);
  g_assert_cmpint (g_array_index (devs, int, 0), ==, 0);
  g_assert_cmpint (g_array_index (devs, int, 1), ==, 1);
  /* the same device twice (two logical devices) is allowed; spaces are fine */
  hn_job_spec_set_string (spec, "device-indices", "0, 0");
  g_autoptr (GArray) twice = hn_job_spec_get_devices (spec, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (twice->len, ==, 2);
  /* without the flag: the one --device-index (default -1, the best device) */
  hn_job_spec_unset (spec, "device-indices");
  g_autoptr (GArray) one = hn_job_spec_get_devices (spec, &error);
  g_assert_cmpuint (one->len, ==, 1);
  g_assert_cmpint (g_array_index (one, int, 0), ==, -1);
  /* bad lists name the flag; both flags at once is an error */
  const char *bad[] = { "0,x", "", ",", "-1", "2000", NULL };
  for (int i = 0; bad[i]; i++)
    {
      g_autoptr (GError) e = NULL;
      hn_job_spec_set_string (spec, "device-indices", bad[i]);
      if (!hn_job_spec_is_set (spec, "device-indices"))
        continue; /* "" unsets */
      g_assert_false (hn_job_spec_check_option (spec, "device-indices", &e));
      g_assert_error (e, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
      g_assert_true (g_str_has_prefix (e->message, "--device-indices"));
    }
  hn_job_spec_set_string (spec, "device-indices", "0,1");
  hn_job_spec_set_int (spec, "device-index", 0);
  g_assert_null (hn_job_spec_get_devices (spec, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* the generate kind takes it (pipeline); the alias --devices parses */
  const char *gen[] = { "generate", "--model-path", "m", "--prompt", "x", "--devices", "1,0", NULL };
  g_autoptr (HnJobSpec) g = hn_job_spec_new_from_argv (G_N_ELEMENTS (gen) - 1, gen, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_job_spec_get_string (g, "device-indices"), ==, "1,0");
}

static void
on_changed (HnJobSpec *spec, const char *name, gpointer user_data)
{
  GPtrArray *seen = user_data;
  g_ptr_array_add (seen, g_strdup (name));
}

static void
test_changed_signal (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-train", NULL);
  g_autoptr (GPtrArray) all = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) lr_only = g_ptr_array_new_with_free_func (g_free);
  g_signal_connect (spec, "changed", G_CALLBACK (on_changed), all);
  g_signal_connect (spec, "changed::lr", G_CALLBACK (on_changed), lr_only);
  hn_job_spec_set_double (spec, "lr", 1e-4);
  hn_job_spec_set_double (spec, "lr", 1e-4); /* no change, no signal */
  hn_job_spec_set_int (spec, "epochs", 3);
  hn_job_spec_unset (spec, "lr");
  g_assert_cmpuint (all->len, ==, 3);
  g_assert_cmpuint (lr_only->len, ==, 2);
  g_assert_cmpstr (g_ptr_array_index (all, 1), ==, "epochs");
  g_autofree char *text = hn_job_spec_value_to_string (spec, "lr");
  g_assert_cmpstr (text, ==, "5e-05");
  g_autoptr (HnJobSpec) copy = hn_job_spec_copy (spec);
  g_assert_true (hn_job_spec_equal (spec, copy));
  hn_job_spec_set_int (copy, "epochs", 4);
  g_assert_false (hn_job_spec_equal (spec, copy));
}

/* ---- runner ------------------------------------------------------------ */

typedef struct {
  GMutex lock;
  GPtrArray *events; /* HnJobEvent copies */
  GThread *thread;   /* the thread events arrived on */
  GMainLoop *loop;
  gboolean finished;
  GError *error;
} Collector;

static void
collect (HnJob *job, const HnJobEvent *event, gpointer user_data)
{
  Collector *c = user_data;
  g_mutex_lock (&c->lock);
  g_ptr_array_add (c->events, hn_job_event_copy (event));
  c->thread = g_thread_self ();
  g_mutex_unlock (&c->lock);
}

static void
collector_init (Collector *c)
{
  memset (c, 0, sizeof *c);
  g_mutex_init (&c->lock);
  c->events = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_job_event_free);
  c->loop = g_main_loop_new (NULL, FALSE);
}

static void
collector_clear (Collector *c)
{
  g_ptr_array_unref (c->events);
  g_main_loop_unref (c->loop);
  g_clear_error (&c->error);
  g_mutex_clear (&c->lock);
}

static void
on_finished (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Collector *c = user_data;
  hn_job_run_finish (HN_JOB (source), result, &c->error);
  c->finished = TRUE;
  g_main_loop_quit (c->loop);
}

/* A small kind for the runner tests: counts steps, emits every event type,
 * and stops when cancelled. Registered under "pull" (any table kind works). */
static gboolean
counting_run (HnJob *job, GError **error)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  const char *const *include = hn_job_spec_get_strv (spec, "include");
  gint64 steps = include[0] ? g_ascii_strtoll (include[0], NULL, 10) : 5;
  hn_job_log (job, HN_LOG_INFO, "counting to %" G_GINT64_FORMAT, steps);
  for (gint64 s = 1; s <= steps; s++)
    {
      if (!hn_job_check_cancelled (job, error))
        return FALSE;
      HnJobMetric m;
      hn_job_metric_init (&m);
      m.step = s;
      m.loss = 10.0 / (double) s;
      hn_job_emit_metric (job, &m);
      hn_job_emit_token (job, 0, (gint32) s, "x");
      hn_job_emit_progress (job, HN_PROGRESS_STEPS, s, steps, s * 10);
      g_usleep (2000);
    }
  hn_job_set_output_path (job, "/tmp/out");
  return TRUE;
}

static void
test_runner_events (void)
{
  hn_job_register_kind ("pull", counting_run);
  g_assert_true (hn_job_kind_is_registered ("pull"));
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("pull", NULL);
  hn_job_spec_set_string (spec, "repo", "org/x");
  Collector c;
  collector_init (&c);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, collect, &c, NULL);
  hn_job_run_async (job, NULL, on_finished, &c);
  g_main_loop_run (c.loop);
  g_assert_no_error (c.error);
  g_assert_false (hn_job_is_running (job));
  g_assert_true (c.thread != g_thread_self ()); /* events come from the pool */
  g_assert_cmpuint (c.events->len, ==, 1 + 5 * 3 + 1);
  HnJobEvent *first = g_ptr_array_index (c.events, 0);
  g_assert_cmpint (first->type, ==, HN_JOB_EVENT_LOG);
  g_assert_cmpstr (first->log.message, ==, "counting to 5");
  HnJobEvent *metric = g_ptr_array_index (c.events, 4);
  g_assert_cmpint (metric->type, ==, HN_JOB_EVENT_METRIC);
  g_assert_cmpint (metric->metric.step, ==, 2);
  g_assert_cmpfloat (metric->metric.loss, ==, 5.0);
  g_assert_true (isnan (metric->metric.lr));
  HnJobEvent *last = g_ptr_array_index (c.events, c.events->len - 1);
  g_assert_cmpint (last->type, ==, HN_JOB_EVENT_DONE);
  g_assert_true (last->done.ok);
  g_assert_cmpstr (last->done.output_path, ==, "/tmp/out");
  g_autofree char *json = hn_job_event_to_json (metric);
  g_assert_nonnull (strstr (json, "\"event\":\"metric\""));
  g_assert_nonnull (strstr (json, "\"loss\":5"));
  g_assert_null (strstr (json, "\"lr\""));
  g_autofree char *done_json = hn_job_event_to_json (last);
  g_assert_nonnull (strstr (done_json, "\"ok\":true"));
  collector_clear (&c);
}

static void
test_runner_unregistered (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("evaluate", NULL);
  hn_job_spec_set_string (spec, "model-path", "m");
  hn_job_spec_set_string (spec, "text-file", "t.txt");
  g_assert_false (hn_job_kind_is_registered ("evaluate"));
  Collector c;
  collector_init (&c);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, collect, &c, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_false (hn_job_run_sync (job, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_cmpstr (error->message, ==, "the job kind 'evaluate' is not implemented in this build");
  g_assert_cmpuint (c.events->len, ==, 1);
  HnJobEvent *done = g_ptr_array_index (c.events, 0);
  g_assert_false (done->done.ok);
  g_assert_cmpint (done->done.error_code, ==, HN_ERROR_UNSUPPORTED);
  collector_clear (&c);
}

static void
test_runner_invalid_spec (void)
{
  hn_job_register_kind ("pull", counting_run);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("pull", NULL); /* no --repo */
  g_autoptr (HnJob) job = hn_job_new (spec);
  g_autoptr (GError) error = NULL;
  g_assert_false (hn_job_run_sync (job, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (error->message, ==, "pull needs --repo");
}

static gboolean
cancel_soon (gpointer data)
{
  hn_job_cancel (HN_JOB (data));
  return G_SOURCE_REMOVE;
}

static void
test_runner_cancel (void)
{
  hn_job_register_kind ("pull", counting_run);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("pull", NULL);
  hn_job_spec_set_string (spec, "repo", "org/x");
  const char *steps[] = { "100000", NULL };
  hn_job_spec_set_strv (spec, "include", steps);
  Collector c;
  collector_init (&c);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, collect, &c, NULL);
  g_autoptr (GCancellable) outer = g_cancellable_new ();
  hn_job_run_async (job, outer, on_finished, &c);
  g_timeout_add (50, cancel_soon, job);
  gint64 t0 = g_get_monotonic_time ();
  g_main_loop_run (c.loop);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 5 * G_USEC_PER_SEC);
  g_assert_error (c.error, HN_ERROR, HN_ERROR_CANCELLED);
  HnJobEvent *last = g_ptr_array_index (c.events, c.events->len - 1);
  g_assert_cmpint (last->type, ==, HN_JOB_EVENT_DONE);
  g_assert_true (last->done.cancelled);
  g_assert_false (last->done.ok);
  collector_clear (&c);

  /* the caller's cancellable reaches the job too */
  Collector c2;
  collector_init (&c2);
  g_autoptr (HnJob) job2 = hn_job_new (spec);
  hn_job_set_event_func (job2, collect, &c2, NULL);
  g_autoptr (GCancellable) outer2 = g_cancellable_new ();
  hn_job_run_async (job2, outer2, on_finished, &c2);
  g_cancellable_cancel (outer2);
  g_main_loop_run (c2.loop);
  g_assert_error (c2.error, HN_ERROR, HN_ERROR_CANCELLED);
  collector_clear (&c2);
}

static gboolean
echo_run (HnJob *job, GError **error)
{
  char *text;
  while ((text = hn_job_pop_input (job, error)))
    {
      g_autofree char *upper = g_ascii_strup (text, -1);
      hn_job_emit_token (job, 0, 0, upper);
      hn_job_emit_turn_end (job, 1);
      g_free (text);
    }
  return error == NULL || *error == NULL;
}

static void
test_runner_input (void)
{
  hn_job_register_kind ("chat", echo_run);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("chat", NULL);
  hn_job_spec_set_string (spec, "model-path", "m");
  Collector c;
  collector_init (&c);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, collect, &c, NULL);
  hn_job_push_input (job, "hello");
  hn_job_push_input (job, "world");
  hn_job_close_input (job);
  hn_job_run_async (job, NULL, on_finished, &c);
  g_main_loop_run (c.loop);
  g_assert_no_error (c.error);
  g_assert_cmpuint (c.events->len, ==, 5);
  HnJobEvent *t = g_ptr_array_index (c.events, 2);
  g_assert_cmpstr (t->token.text, ==, "WORLD");
  collector_clear (&c);
}

/* A conversation that waits for input until it is closed or cancelled, then
 * takes a while to let go (as freeing a model and its device does). */
static gint lingered;

static gboolean
linger_run (HnJob *job, GError **error)
{
  g_autofree char *in = hn_job_pop_input (job, error);
  g_usleep (200 * 1000);
  g_atomic_int_inc (&lingered);
  return in != NULL || !error || !*error;
}

/* hn_job_cancel_all and hn_job_wait_all (what the app does at exit): open
 * jobs are still there until cancelled, and the wait covers their threads'
 * whole way out. */
static void
test_runner_end_all (void)
{
  hn_job_register_kind ("chat", linger_run);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("chat", NULL);
  hn_job_spec_set_string (spec, "model-path", "m");
  g_autoptr (HnJob) a = hn_job_new (spec);
  g_autoptr (HnJob) b = hn_job_new (spec);
  g_atomic_int_set (&lingered, 0);
  hn_job_run_async (a, NULL, NULL, NULL);
  hn_job_run_async (b, NULL, NULL, NULL);
  g_assert_true (hn_job_wait_all (0) == FALSE);
  g_assert_false (hn_job_wait_all (100)); /* both wait for input */
  hn_job_cancel_all ();
  g_assert_true (hn_job_wait_all (10000));
  g_assert_false (hn_job_is_running (a));
  g_assert_false (hn_job_is_running (b));
  g_assert_cmpint (g_atomic_int_get (&lingered), ==, 2);
  g_assert_true (g_cancellable_is_cancelled (hn_job_get_cancellable (a)));
  g_assert_true (hn_job_wait_all (0)); /* nothing left */
}

static void
test_help (void)
{
  /* --help is generated from the table and printed without running anything */
  g_autofree char *path = g_build_filename (g_get_tmp_dir (), "hn-help-XXXXXX", NULL);
  int fd = g_mkstemp (path);
  FILE *f = fdopen (fd, "w+");
  hn_job_spec_print_help (hn_job_kind_lookup ("finetune-lora"), f);
  fclose (f);
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_unlink (path);
  g_assert_nonnull (strstr (text, "Usage: hierarchos-native-cli transformer-finetune [OPTIONS...]"));
  g_assert_nonnull (strstr (text, "--lr LR"));
  g_assert_nonnull (strstr (text, "(default 0.0002)"));
  g_assert_nonnull (strstr (text, "--json-events"));
  int status = -1;
  char *argv[] = { (char *) "lora", (char *) "--bogus", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_cli_parse ("lora", 2, argv, NULL, &status);
  g_assert_null (spec);
  g_assert_cmpint (status, ==, 2);
}

/* The CLI commands (hn_command_table): no job kind of that name, their own
 * one-letter flags, a repeated option named as typed, required groups, and
 * an option without a default keeping 0. */
static void
test_commands (void)
{
  g_assert_null (hn_job_kind_lookup ("tokenize"));
  g_assert_nonnull (hn_command_lookup ("tokenize"));
  g_assert_null (hn_command_lookup ("transformer-generate"));
  g_autoptr (GError) error = NULL;
  const char *ok[] = { "tokenize", "-t", "/tok", "-d", "1,2", "--skip_special_tokens", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (ok) - 1, ok, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_spec_is_command (spec));
  g_assert_true (hn_job_spec_validate (spec, &error));
  g_assert_cmpstr (hn_job_spec_get_string (spec, "tokenizer-path"), ==, "/tok");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "decode"), ==, "1,2");
  g_assert_true (hn_job_spec_get_bool (spec, "skip-special-tokens"));
  /* -tVALUE, and a one-letter flag of another command is no flag here */
  const char *glued[] = { "tokenize", "-t/tok", "--text", "x", NULL };
  g_autoptr (HnJobSpec) g = hn_job_spec_new_from_argv (G_N_ELEMENTS (glued) - 1, glued, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_job_spec_get_string (g, "tokenizer-path"), ==, "/tok");
  const char *other[] = { "tokenize", "-o", "x", NULL };
  g_assert_null (hn_job_spec_new_from_argv (G_N_ELEMENTS (other) - 1, other, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  const char *twice[] = { "tokenize", "-t", "/a", "--tokenizer", "/b", NULL };
  g_assert_null (hn_job_spec_new_from_argv (G_N_ELEMENTS (twice) - 1, twice, &error));
  g_assert_nonnull (strstr (error->message, "--tokenizer-path is given twice"));
  g_clear_error (&error);
  const char *none[] = { "tokenize", "-t", "/a", NULL };
  g_autoptr (HnJobSpec) n = hn_job_spec_new_from_argv (G_N_ELEMENTS (none) - 1, none, &error);
  g_assert_no_error (error);
  g_assert_false (hn_job_spec_validate (n, &error));
  g_assert_nonnull (strstr (error->message, "tokenize needs --text, --input-file or --decode"));
  g_clear_error (&error);
  /* 0 of an option without a default is a value, not "unset" */
  const char *zero[] = { "hierarchos-init", "-t", "/tok", "-o", "/out", "--persistent_dim", "0", NULL };
  g_autoptr (HnJobSpec) z = hn_job_spec_new_from_argv (G_N_ELEMENTS (zero) - 1, zero, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_spec_is_set (z, "persistent-dim"));
  g_assert_cmpint (hn_job_spec_get_int (z, "persistent-dim"), ==, 0);
  g_assert_cmpint (hn_job_spec_get_int (z, "seed"), ==, 1337);
  /* the help: one-letter flags, no job-only lines */
  g_autofree char *path = g_build_filename (g_get_tmp_dir (), "hn-cmd-help-XXXXXX", NULL);
  int fd = g_mkstemp (path);
  FILE *f = fdopen (fd, "w");
  hn_job_spec_print_help (hn_command_lookup ("tokenize"), f);
  fclose (f);
  g_autofree char *help = NULL;
  g_assert_true (g_file_get_contents (path, &help, NULL, NULL));
  g_unlink (path);
  g_assert_nonnull (strstr (help, "-t, --tokenizer-path PATH"));
  g_assert_nonnull (strstr (help, "--input-file FILE"));
  g_assert_null (strstr (help, "--json-events"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/jobs/spec/round-trip", test_round_trip_all_kinds);
  g_test_add_func ("/jobs/spec/round-trip-batching", test_round_trip_batching);
  g_test_add_func ("/jobs/spec/secret-masked", test_secret_masked);
  g_test_add_func ("/jobs/spec/aliases-defaults", test_aliases_and_defaults);
  g_test_add_func ("/jobs/spec/parse-errors", test_parse_errors);
  g_test_add_func ("/jobs/spec/repeatable", test_repeatable);
  g_test_add_func ("/jobs/spec/validate", test_validate);
  g_test_add_func ("/jobs/spec/device-indices", test_device_indices);
  g_test_add_func ("/jobs/spec/changed-signal", test_changed_signal);
  g_test_add_func ("/jobs/spec/help", test_help);
  g_test_add_func ("/jobs/spec/commands", test_commands);
  g_test_add_func ("/jobs/runner/events", test_runner_events);
  g_test_add_func ("/jobs/runner/unregistered", test_runner_unregistered);
  g_test_add_func ("/jobs/runner/invalid-spec", test_runner_invalid_spec);
  g_test_add_func ("/jobs/runner/cancel", test_runner_cancel);
  g_test_add_func ("/jobs/runner/input", test_runner_input);
  g_test_add_func ("/jobs/runner/end-all", test_runner_end_all);
  return g_test_run ();
}
