/* The transformer-generate job end to end, as the CLI and the GUI run it:
 * argv -> spec -> job -> streamed TOKEN events and the output JSON. */
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "jobs/job.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "parity-util.h"

typedef struct {
  GString *text;
  int n_tokens;
  int n_progress;
  gboolean done_ok;
  GString *logs;
  GString *per_seq[4];  /* text by sequence */
} Events;

static void
on_event (HnJob *job, const HnJobEvent *e, gpointer data)
{
  Events *ev = data;
  if (e->type == HN_JOB_EVENT_TOKEN)
    {
      g_string_append (ev->text, e->token.text);
      if (e->token.token_id >= 0)
        ev->n_tokens++;
      if (e->token.sequence < G_N_ELEMENTS (ev->per_seq))
        {
          if (!ev->per_seq[e->token.sequence])
            ev->per_seq[e->token.sequence] = g_string_new (NULL);
          g_string_append (ev->per_seq[e->token.sequence], e->token.text);
        }
    }
  else if (e->type == HN_JOB_EVENT_LOG && ev->logs)
    g_string_append_printf (ev->logs, "%s\n", e->log.message);
  else if (e->type == HN_JOB_EVENT_PROGRESS)
    ev->n_progress++;
  else if (e->type == HN_JOB_EVENT_DONE)
    ev->done_ok = e->done.ok;
}

static gboolean
run (const char *const *argv, Events *ev, GError **error)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) g_strv_length ((char **) argv), argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, on_event, ev, NULL);
  return hn_job_run_sync (job, error);
}

static void
test_stories (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hn-gen-XXXXXX", NULL);
  g_autofree char *out = g_build_filename (tmp, "out.json", NULL);
  const char *argv[] = { "generate", "--model-path", model, "--input-ids", "1", "--max-new-tokens", "20",
                         "--output-json", out, NULL };
  Events ev = { g_string_new (NULL) };
  GError *error = NULL;
  g_assert_true (run (argv, &ev, &error));
  g_assert_no_error (error);
  g_assert_true (ev.done_ok);
  g_assert_cmpint (ev.n_tokens, ==, 20);
  g_assert_cmpint (ev.n_progress, >=, 1);
  g_assert_true (g_str_has_prefix (ev.text->str, "Once upon a time, there was a little girl named Lily"));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, out, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  JsonArray *seqs = json_object_get_array_member (o, "sequences");
  g_assert_cmpuint (json_array_get_length (seqs), ==, 1);
  g_assert_cmpuint (json_array_get_length (json_array_get_array_element (seqs, 0)), ==, 20);
  const char *text = json_array_get_string_element (json_object_get_array_member (o, "texts"), 0);
  g_assert_true (g_str_has_prefix (text, "Once upon a time, there was a little girl named Lily"));
  g_string_free (ev.text, TRUE);
  g_unlink (out);
  g_rmdir (tmp);
}

static void
test_prompt_and_policies (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  /* a text prompt (tokenizer), a stop string, no cache */
  const char *argv[] = { "generate", "--model-path", model, "--prompt", "Once upon a time", "--max-new-tokens", "40",
                         "--stop", "Lily", "--no-use-cache", NULL };
  Events ev = { g_string_new (NULL) };
  GError *error = NULL;
  g_assert_true (run (argv, &ev, &error));
  g_assert_no_error (error);
  g_assert_true (g_str_has_prefix (ev.text->str, ", there was a little girl named Lily"));
  g_assert_cmpint (ev.n_tokens, <, 40);
  g_string_free (ev.text, TRUE);

  /* seeded sampling is reproducible */
  const char *sargv[] = { "generate", "--model-path", model, "--input-ids", "1", "--max-new-tokens", "12",
                          "--do-sample", "--temperature", "1.5", "--top-k", "20", "--seed", "5", NULL };
  Events a = { g_string_new (NULL) }, b = { g_string_new (NULL) };
  g_assert_true (run (sargv, &a, &error));
  g_assert_true (run (sargv, &b, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (a.text->str, ==, b.text->str);
  g_string_free (a.text, TRUE);
  g_string_free (b.text, TRUE);
}

static void
events_clear (Events *ev)
{
  g_string_free (ev->text, TRUE);
  if (ev->logs)
    g_string_free (ev->logs, TRUE);
  for (gsize i = 0; i < G_N_ELEMENTS (ev->per_seq); i++)
    if (ev->per_seq[i])
      g_string_free (ev->per_seq[i], TRUE);
  memset (ev, 0, sizeof *ev);
}

static JsonObject *
load_object (JsonParser *p, const char *path)
{
  GError *error = NULL;
  g_assert_true (json_parser_load_from_file (p, path, &error));
  g_assert_no_error (error);
  return json_node_get_object (json_parser_get_root (p));
}

static char *
write_tmp (const char *dir, const char *name, const char *text)
{
  char *path = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  return path;
}

/* --continuous-batching: every prompt's ids equal its own run on the contiguous cache, with
 * prompts of different lengths that end at different times (EOS 426 is a token the stories
 * repeat), printed per request in prompt order; a pool of 3 pages makes requests wait. */
static void
test_continuous_batching (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hn-cb-XXXXXX", NULL);
  g_autofree char *seq_out = g_build_filename (tmp, "seq.json", NULL);
  g_autofree char *cb_out = g_build_filename (tmp, "cb.json", NULL);
  g_autofree char *pf = write_tmp (tmp, "prompts.txt", "Lily\nThe dog was very\n");
  GError *error = NULL;
  const char *seq[] = { "generate", "--model-path", model, "--prompt", "Once upon a time", "--prompt-file", pf,
                        "--prompt", "One day, a big", "--max-new-tokens", "24", "--eos-token-id", "426",
                        "--output-json", seq_out, NULL };
  Events a = { g_string_new (NULL) };
  g_assert_true (run (seq, &a, &error));
  g_assert_no_error (error);
  const char *cb[] = { "generate", "--model-path", model, "--prompt", "Once upon a time", "--prompt-file", pf,
                       "--prompt", "One day, a big", "--max-new-tokens", "24", "--eos-token-id", "426",
                       "--continuous-batching", "--continuous-batch-max-requests", "2", "--output-json", cb_out, NULL };
  Events b = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (cb, &b, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (b.logs->str, "KV cache: paged"));
  g_assert_nonnull (strstr (b.logs->str, "up to 2 requests at once"));
  g_autoptr (JsonParser) pa = json_parser_new (), pb = json_parser_new ();
  JsonObject *oa = load_object (pa, seq_out), *ob = load_object (pb, cb_out);
  JsonArray *sa = json_object_get_array_member (oa, "sequences"), *sb = json_object_get_array_member (ob, "sequences");
  JsonArray *ta = json_object_get_array_member (oa, "texts");
  g_assert_cmpuint (json_array_get_length (sa), ==, 4);
  g_assert_cmpuint (json_array_get_length (sb), ==, 4);
  gboolean lengths_differ = FALSE;
  for (guint i = 0; i < 4; i++)
    {
      JsonArray *x = json_array_get_array_element (sa, i), *y = json_array_get_array_element (sb, i);
      g_assert_cmpuint (json_array_get_length (x), ==, json_array_get_length (y));
      for (guint j = 0; j < json_array_get_length (x); j++)
        g_assert_cmpint (json_array_get_int_element (x, j), ==, json_array_get_int_element (y, j));
      lengths_differ = lengths_differ || json_array_get_length (x) != json_array_get_length (json_array_get_array_element (sa, 0));
      /* printed per request: its text, then a newline */
      g_autofree char *want = g_strconcat (json_array_get_string_element (ta, i), "\n", NULL);
      g_assert_nonnull (b.per_seq[i]);
      g_assert_cmpstr (b.per_seq[i]->str, ==, want);
    }
  g_assert_true (lengths_differ); /* the requests ended at different times */
  JsonObject *stats = json_object_get_object_member (ob, "continuous_batching");
  g_assert_cmpint (json_object_get_int_member (stats, "max_active"), ==, 2);
  events_clear (&a);
  events_clear (&b);

  /* out of pages: 3 pages, requests of 2 pages each: one runs at a time and the rest wait (--json prints the result) */
  g_autofree char *gc = write_tmp (tmp, "gc.json", "{\"continuous_batching_config\": {\"block_size\": 16, "
                                                   "\"num_blocks\": 3, \"scheduler_type\": \"fifo\"}}");
  const char *tight[] = { "generate", "--model-path", model, "--prompt", "Once upon a time", "--prompt-file", pf,
                          "--max-new-tokens", "24", "--eos-token-id", "426", "--generation-config", gc, "--json", NULL };
  Events c = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (tight, &c, &error)); /* the explicit file opts in to batching */
  g_assert_no_error (error);
  g_autoptr (JsonParser) pc = json_parser_new ();
  g_assert_true (json_parser_load_from_data (pc, c.text->str, -1, &error));
  g_assert_no_error (error);
  JsonObject *oc = json_node_get_object (json_parser_get_root (pc));
  JsonObject *sc = json_object_get_object_member (oc, "continuous_batching");
  g_assert_cmpint (json_object_get_int_member (sc, "page_waits"), >, 0);
  g_assert_cmpint (json_object_get_int_member (sc, "max_active"), ==, 1);
  JsonArray *sq = json_object_get_array_member (oc, "sequences");
  g_assert_cmpuint (json_array_get_length (sq), ==, 3);
  static const guint same_prompt[3] = { 0, 2, 3 }; /* --prompt first, then the prompt file */
  for (guint i = 0; i < 3; i++)
    {
      JsonArray *x = json_array_get_array_element (sa, same_prompt[i]), *y = json_array_get_array_element (sq, i);
      g_assert_cmpuint (json_array_get_length (x), ==, json_array_get_length (y));
      for (guint j = 0; j < json_array_get_length (x); j++)
        g_assert_cmpint (json_array_get_int_element (x, j), ==, json_array_get_int_element (y, j));
    }
  events_clear (&c);

  /* --input-ids repeats like --prompt: each is a request */
  const char *ids[] = { "generate", "--model-path", model, "--input-ids", "1", "--input-ids", "1,403,407", "--input-ids",
                        "1,338", "--max-new-tokens", "6", "--continuous-batching", "--json", NULL };
  Events d = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (ids, &d, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (d.logs->str, "continuous batching: 3 requests"));
  g_autoptr (JsonParser) pd = json_parser_new ();
  g_assert_true (json_parser_load_from_data (pd, d.text->str, -1, &error));
  g_assert_no_error (error);
  JsonArray *sd = json_object_get_array_member (json_node_get_object (json_parser_get_root (pd)), "sequences");
  g_assert_cmpuint (json_array_get_length (sd), ==, 3);
  events_clear (&d);
  g_unlink (seq_out);
  g_unlink (cb_out);
  g_unlink (gc);
  g_unlink (pf);
  g_rmdir (tmp);
}

/* eos/pad ids outside the vocabulary (tiny test models on the Hub name GPT-2's 50256 with a
 * few hundred tokens): generation runs, as in transformers, never stopping on them, and the
 * log warns once; chat the same. */
static void
test_special_ids_outside_vocab (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hn-oov-XXXXXX", NULL);
  static const char *const files[] = { "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *from = g_build_filename (model, files[i], NULL), *to = g_build_filename (tmp, files[i], NULL);
      g_assert_cmpint (symlink (from, to), ==, 0);
    }
  g_autofree char *cfg_src = g_build_filename (model, "config.json", NULL);
  g_autofree char *cfg = NULL;
  g_assert_true (g_file_get_contents (cfg_src, &cfg, NULL, NULL));
  g_auto (GStrv) parts = g_strsplit (cfg, "\"eos_token_id\": 2", 2);
  g_assert_nonnull (parts[1]);
  g_autofree char *edited = g_strjoinv ("\"eos_token_id\": 50256, \"pad_token_id\": 600", parts);
  g_autofree char *cfg_path = write_tmp (tmp, "config.json", edited);
  GError *error = NULL;
  const char *argv[] = { "generate", "--model-path", tmp, "--input-ids", "1", "--max-new-tokens", "12", NULL };
  Events ev = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (argv, &ev, &error));
  g_assert_no_error (error);
  g_assert_cmpint (ev.n_tokens, ==, 12);
  g_assert_true (g_str_has_prefix (ev.text->str, "Once upon a time"));
  const char *needle = "eos_token_id 50256, pad_token_id 600 outside the vocabulary (0..511): ignored";
  const char *w = strstr (ev.logs->str, needle);
  g_assert_nonnull (w);
  g_assert_null (strstr (w + strlen (needle), "outside the vocabulary")); /* once */
  events_clear (&ev);

  const char *chat[] = { "chat", "--model-path", tmp, "--raw-prompt", "--do-sample=false", "--max-new-tokens", "5", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) g_strv_length ((char **) chat), chat, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job = hn_job_new (spec);
  Events ce = { g_string_new (NULL), .logs = g_string_new (NULL) };
  hn_job_set_event_func (job, on_event, &ce, NULL);
  hn_job_push_input (job, "Once upon a time");
  hn_job_close_input (job);
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (ce.logs->str, "eos_token_id 50256, pad_token_id 600 outside the vocabulary"));
  events_clear (&ce);

  /* a negative pad id (and eos id) in generation_config.json is ignored the same way, with the
   * same single warning, not silently */
  g_autofree char *gc_path = write_tmp (tmp, "generation_config.json", "{\"pad_token_id\": -3, \"eos_token_id\": [-5, 2]}");
  Events nv = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (argv, &nv, &error));
  g_assert_no_error (error);
  g_assert_true (g_str_has_prefix (nv.text->str, "Once upon a time"));
  const char *neg = "eos_token_id -5, pad_token_id -3 outside the vocabulary (0..511): ignored";
  const char *nw = strstr (nv.logs->str, neg);
  g_assert_nonnull (nw);
  g_assert_null (strstr (nw + strlen (neg), "outside the vocabulary"));
  events_clear (&nv);
  g_unlink (gc_path);
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *to = g_build_filename (tmp, files[i], NULL);
      g_unlink (to);
    }
  g_unlink (cfg_path);
  g_rmdir (tmp);
}

/* A downloaded model cannot opt the user in to the paged cache or batching; a named file can.
 * Bad scheduler settings and impossible combinations fail with a message. */
static void
test_paged_opt_in (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hn-paged-XXXXXX", NULL);
  g_autofree char *pkg = g_build_filename (tmp, "pkg", NULL);
  g_assert_cmpint (g_mkdir (pkg, 0700), ==, 0);
  static const char *const files[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *from = g_build_filename (model, files[i], NULL), *to = g_build_filename (pkg, files[i], NULL);
      g_assert_cmpint (symlink (from, to), ==, 0);
    }
  g_autofree char *own = write_tmp (pkg, "generation_config.json",
                                    "{\"cache_implementation\": \"paged\", \"continuous_batching_config\": "
                                    "{\"block_size\": 256, \"use_cuda_graph\": true}}");
  GError *error = NULL;
  const char *def[] = { "generate", "--model-path", pkg, "--input-ids", "1", "--max-new-tokens", "3", NULL };
  Events ev = { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (def, &ev, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (ev.logs->str, "KV cache: contiguous"));
  g_assert_nonnull (strstr (ev.logs->str, "ignored"));
  events_clear (&ev);

  g_autofree char *mine = write_tmp (tmp, "mine.json", "{\"cache_implementation\": \"paged\"}");
  const char *opt[] = { "generate", "--model-path", pkg, "--input-ids", "1", "--max-new-tokens", "3",
                        "--generation-config", mine, NULL };
  ev = (Events) { g_string_new (NULL), .logs = g_string_new (NULL) };
  g_assert_true (run (opt, &ev, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (ev.logs->str, "KV cache: paged"));
  events_clear (&ev);

  /* block_size other than 16 and unknown knobs are errors naming the file */
  struct { const char *json, *needle; } bad[] = {
    { "{\"continuous_batching_config\": {\"block_size\": 32}}", "block_size 32" },
    { "{\"continuous_batching_config\": {\"use_cuda_graph\": true}}", "use_cuda_graph" },
    { "{\"continuous_batching_config\": {\"scheduler_type\": \"prefill_first\"}}", "fifo" },
    { "{\"continuous_batching_config\": {\"num_blocks\": 0}}", "num_blocks" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *f = write_tmp (tmp, "bad.json", bad[i].json);
      const char *argv[] = { "generate", "--model-path", model, "--input-ids", "1", "--continuous-batching",
                             "--generation-config", f, NULL };
      ev = (Events) { g_string_new (NULL) };
      g_assert_false (run (argv, &ev, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, bad[i].needle));
      g_assert_nonnull (strstr (error->message, "bad.json"));
      g_clear_error (&error);
      events_clear (&ev);
      g_unlink (f);
    }
  /* batching needs the paged cache, and serves one greedy or sampled sequence per request */
  const char *contig[] = { "generate", "--model-path", model, "--input-ids", "1", "--continuous-batching",
                           "--cache-implementation", "contiguous", NULL };
  const char *beams[] = { "generate", "--model-path", model, "--input-ids", "1", "--continuous-batching",
                          "--num-beams", "2", NULL };
  ev = (Events) { g_string_new (NULL) };
  g_assert_false (run (contig, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (run (beams, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "num_beams 2"));
  g_clear_error (&error);
  /* a graph without pageable attention (ALiBi) fails closed */
  g_autofree char *bloom = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "bloom", NULL);
  const char *alibi[] = { "generate", "--model-path", bloom, "--input-ids", "5,6", "--cache-implementation", "paged", NULL };
  g_assert_false (run (alibi, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "ALiBi"));
  g_clear_error (&error);
  events_clear (&ev);
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *to = g_build_filename (pkg, files[i], NULL);
      g_unlink (to);
    }
  g_unlink (own);
  g_unlink (mine);
  g_rmdir (pkg);
  g_rmdir (tmp);
}

static void
test_fail_closed (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  Events ev = { g_string_new (NULL) };
  /* an architecture without a graph names itself */
  g_autofree char *moe = g_dir_make_tmp ("hn-genjob-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *cfg = g_build_filename (moe, "config.json", NULL);
  g_assert_true (g_file_set_contents (cfg, "{\"model_type\":\"zamba2\",\"vocab_size\":16,\"d_model\":8}", -1, &error));
  const char *m[] = { "generate", "--model-path", moe, "--input-ids", "5,6", NULL };
  g_assert_false (run (m, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "zamba2"));
  g_clear_error (&error);
  /* a state-space decoder carries a recurrent state: a KV-cache mode fails closed by name */
  g_autofree char *mamba = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "mamba", NULL);
  const char *paged[] = { "generate", "--model-path", mamba, "--input-ids", "5,6", "--cache-implementation", "paged",
                          "--max-new-tokens", "2", NULL };
  g_assert_false (run (paged, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "state-space"));
  g_clear_error (&error);
  const char *ok[] = { "generate", "--model-path", mamba, "--input-ids", "5,6", "--max-new-tokens", "3", NULL };
  g_assert_true (run (ok, &ev, &error));
  g_assert_no_error (error);
  g_assert_cmpint (g_remove (cfg), ==, 0);
  g_assert_cmpint (g_rmdir (moe), ==, 0);
  const char *bad[] = { "generate", "--model-path", model, "--input-ids", "1,x", NULL };
  g_assert_false (run (bad, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_string_free (ev.text, TRUE);
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

/* Results that looked right but were not: generation past
 * max_position_embeddings warns (as transformers does); NaN logits name the
 * tensor that holds NaN. */
static void
test_silent_results (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  g_autofree char *short_ctx = g_dir_make_tmp ("hn-genjob-XXXXXX", NULL);
  parity_copy_file (model, short_ctx, "config.json", "\"max_position_embeddings\": 512", "\"max_position_embeddings\": 6");
  parity_copy_file (model, short_ctx, "model.safetensors", NULL, NULL);
  Events ev = { g_string_new (NULL), 0, 0, FALSE, g_string_new (NULL) };
  const char *past[] = { "generate", "--model-path", short_ctx, "--input-ids", "1,2,3", "--max-new-tokens", "6", NULL };
  g_assert_true (run (past, &ev, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (ev.logs->str, "may reach 9 tokens, past the model's max_position_embeddings (6)"));
  g_string_truncate (ev.logs, 0);
  const char *within[] = { "generate", "--model-path", short_ctx, "--input-ids", "1,2", "--max-new-tokens", "4", NULL };
  g_assert_true (run (within, &ev, &error));
  g_assert_null (strstr (ev.logs->str, "max_position_embeddings"));
  /* chat: the first turn fits, the conversation passes the limit in the second; warned once */
  {
    parity_copy_file (model, short_ctx, "tokenizer.json", NULL, NULL);
    parity_copy_file (model, short_ctx, "tokenizer_config.json", NULL, NULL);
    const char *chat[] = { "chat", "--model-path", short_ctx, "--raw-prompt", "--do-sample=false", "--max-new-tokens",
                           "2", NULL };
    g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) g_strv_length ((char **) chat), chat, &error);
    g_assert_no_error (error);
    g_autoptr (HnJob) job = hn_job_new (spec);
    Events ce = { g_string_new (NULL), .logs = g_string_new (NULL) };
    hn_job_set_event_func (job, on_event, &ce, NULL);
    hn_job_push_input (job, "Once");
    hn_job_push_input (job, "upon");
    hn_job_push_input (job, "a");
    hn_job_close_input (job);
    gboolean ran = hn_job_run_sync (job, &error);
    g_assert_no_error (error);
    g_assert_true (ran);
    const char *w = strstr (ce.logs->str, "the conversation may reach ");
    if (!w || !strstr (w, "past the model's max_position_embeddings (6)"))
      g_error ("no warning in: %s", ce.logs->str);
    g_assert_null (strstr (w + 1, "the conversation may reach ")); /* once */
    events_clear (&ce);
    /* the first turn alone (BOS, "Once" and 2 new tokens) is within: no warning */
    g_autoptr (HnJob) one = hn_job_new (spec);
    Events oe = { g_string_new (NULL), .logs = g_string_new (NULL) };
    hn_job_set_event_func (one, on_event, &oe, NULL);
    hn_job_push_input (one, "Once");
    hn_job_close_input (one);
    g_assert_true (hn_job_run_sync (one, &error));
    g_assert_no_error (error);
    g_assert_true (oe.text->len > 0);
    g_assert_null (strstr (oe.logs->str, "max_position_embeddings"));
    events_clear (&oe);
  }
  rm_dir (short_ctx);

  /* a NaN in one weight: the error names it and its file */
  const char *poison = "model.layers.0.mlp.gate_proj.weight";
  g_autofree char *nan_dir = g_dir_make_tmp ("hn-genjob-XXXXXX", NULL);
  parity_copy_file (model, nan_dir, "config.json", NULL, NULL);
  g_autofree char *src = g_build_filename (model, "model.safetensors", NULL);
  g_autofree char *dst = g_build_filename (nan_dir, "model.safetensors", NULL);
  {
    g_autoptr (HnSafetensors) st = hn_safetensors_open (src, &error);
    g_assert_no_error (error);
    g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
    for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
      {
        const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
        float *f = hn_safetensor_info_dup_f32 (t, &error);
        g_assert_no_error (error);
        if (g_str_equal (t->name, poison))
          f[0] = NAN;
        g_assert_true (hn_safetensors_writer_add (w, t->name, HN_ST_DTYPE_F32, t->ndim, t->shape, f,
                                                  (gsize) t->n_elements * 4, TRUE, &error));
        g_free (f);
      }
    g_assert_true (hn_safetensors_writer_write_file (w, dst, &error));
    g_assert_no_error (error);
  }
  const char *nan_run[] = { "generate", "--model-path", nan_dir, "--input-ids", "1,2,3", "--max-new-tokens", "2", NULL };
  g_assert_false (run (nan_run, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
  g_assert_nonnull (strstr (error->message, "NaN logits"));
  g_assert_nonnull (strstr (error->message, poison));
  g_assert_nonnull (strstr (error->message, "model.safetensors"));
  g_clear_error (&error);
  rm_dir (nan_dir);
  g_string_free (ev.text, TRUE);
  g_string_free (ev.logs, TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  g_test_add_func ("/generate-job/stories260K", test_stories);
  g_test_add_func ("/generate-job/prompt-and-policies", test_prompt_and_policies);
  g_test_add_func ("/generate-job/continuous-batching", test_continuous_batching);
  g_test_add_func ("/generate-job/paged-opt-in", test_paged_opt_in);
  g_test_add_func ("/generate-job/fail-closed", test_fail_closed);
  g_test_add_func ("/generate-job/special-ids-outside-vocab", test_special_ids_outside_vocab);
  g_test_add_func ("/generate-job/silent-results", test_silent_results);
  return g_test_run ();
}
