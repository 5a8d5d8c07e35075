/* The transformer-generate job end to end, as the CLI and the GUI run it:
 * argv -> spec -> job -> streamed TOKEN events and the output JSON. */
#include "hn-error.h"
#include "jobs/job.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

typedef struct {
  GString *text;
  int n_tokens;
  int n_progress;
  gboolean done_ok;
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
    }
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
test_fail_closed (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  const char *paged[] = { "generate", "--model-path", model, "--input-ids", "1", "--cache-implementation", "paged", NULL };
  Events ev = { g_string_new (NULL) };
  g_assert_false (run (paged, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "paged"));
  g_clear_error (&error);
  /* an architecture without a graph (dbrx has no parity fixture) names itself */
  g_autofree char *moe = g_dir_make_tmp ("hn-genjob-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *cfg = g_build_filename (moe, "config.json", NULL);
  g_assert_true (g_file_set_contents (cfg, "{\"model_type\":\"dbrx\",\"vocab_size\":16,\"d_model\":8}", -1, &error));
  const char *m[] = { "generate", "--model-path", moe, "--input-ids", "5,6", NULL };
  g_assert_false (run (m, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "dbrx"));
  g_clear_error (&error);
  g_assert_cmpint (g_remove (cfg), ==, 0);
  g_assert_cmpint (g_rmdir (moe), ==, 0);
  const char *bad[] = { "generate", "--model-path", model, "--input-ids", "1,x", NULL };
  g_assert_false (run (bad, &ev, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_string_free (ev.text, TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  g_test_add_func ("/generate-job/stories260K", test_stories);
  g_test_add_func ("/generate-job/prompt-and-policies", test_prompt_and_policies);
  g_test_add_func ("/generate-job/fail-closed", test_fail_closed);
  return g_test_run ();
}
