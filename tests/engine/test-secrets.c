/* Hub tokens never show: not in command previews, not in the CLI's output
 * (--json-events, progress, errors, debug logs), not in metrics or the files
 * a training run writes. Each check also proves the token was really given
 * (the fake Hub saw it), so the absence means something. */
#define _GNU_SOURCE /* memmem */
#include "jobs/job-spec.h"
#include "hierarchos/hierarchos.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <libsoup/soup.h>
#include <string.h>

#define SECRET "hf_SeCrEtT0kenNeverPrinted42"

static GMutex lock;
static char *endpoint;
static guint n_auth; /* requests that carried the token */

static void
handler (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  const char *auth = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Authorization");
  g_mutex_lock (&lock);
  if (auth && strstr (auth, SECRET))
    n_auth++;
  g_mutex_unlock (&lock);
  /* A gated repo: the client must report it without echoing the token. */
  soup_server_message_set_status (msg, 401, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_STATIC,
                                    "{\"error\":\"Invalid credentials in Authorization header\"}", 54);
}

static gpointer
server_thread (gpointer data)
{
  GMainContext *ctx = g_main_context_new ();
  g_main_context_push_thread_default (ctx);
  SoupServer *server = soup_server_new (NULL, NULL);
  soup_server_add_handler (server, NULL, handler, NULL, NULL);
  g_autoptr (GError) error = NULL;
  if (!soup_server_listen_local (server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error))
    g_error ("%s", error->message);
  GSList *uris = soup_server_get_uris (server);
  char *s = g_uri_to_string (uris->data);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  if (g_str_has_suffix (s, "/"))
    s[strlen (s) - 1] = 0;
  g_mutex_lock (&lock);
  endpoint = s;
  g_mutex_unlock (&lock);
  for (;;)
    g_main_context_iteration (ctx, TRUE);
  return NULL;
}

static const char *
fake_hub (void)
{
  static gsize once;
  if (g_once_init_enter (&once))
    {
      g_thread_unref (g_thread_new ("fake-hub", server_thread, NULL));
      for (;;)
        {
          g_mutex_lock (&lock);
          gboolean ready = endpoint != NULL;
          g_mutex_unlock (&lock);
          if (ready)
            break;
          g_usleep (1000);
        }
      g_once_init_leave (&once, 1);
    }
  return endpoint;
}

static guint
auth_count (void)
{
  g_mutex_lock (&lock);
  guint n = n_auth;
  g_mutex_unlock (&lock);
  return n;
}

static void
test_preview (void)
{
  const char *argv[] = { "pull", "--repo", "org/gated", "--hf-token", SECRET, NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (5, argv, &error);
  g_assert_no_error (error);
  g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_WITH_PROGRAM);
  g_assert_null (strstr (line, SECRET));
  g_assert_nonnull (strstr (line, HN_JOB_SPEC_MASK));
  g_auto (GStrv) av = hn_job_spec_to_argv (spec, HN_ARGV_DEFAULT);
  for (int i = 0; av[i]; i++)
    g_assert_null (strstr (av[i], SECRET));
  /* Only the argv for execution carries it. */
  g_autofree char *exec = hn_job_spec_to_command_line (spec, HN_ARGV_UNMASKED);
  g_assert_nonnull (strstr (exec, SECRET));
  /* --flag=value spelling too. */
  const char *argv2[] = { "pull", "--repo", "org/gated", "--hf_token=" SECRET, NULL };
  g_autoptr (HnJobSpec) spec2 = hn_job_spec_new_from_argv (4, argv2, &error);
  g_assert_no_error (error);
  g_autofree char *line2 = hn_job_spec_to_command_line (spec2, HN_ARGV_DEFAULT);
  g_assert_null (strstr (line2, SECRET));
}

/* Runs the CLI; returns stdout + stderr. */
static char *
run_cli (const char *const *args, const char *const *extra_env, int *status)
{
  const char *build = g_getenv ("HN_BUILD_DIR");
  g_autofree char *cli = g_build_filename (build, "app", "cli", "hierarchos-native-cli", NULL);
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_ptr_array_add (argv, cli);
  for (int i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, NULL);
  g_auto (GStrv) env = g_get_environ ();
  env = g_environ_unsetenv (env, "HF_TOKEN");
  env = g_environ_unsetenv (env, "HUGGING_FACE_HUB_TOKEN");
  env = g_environ_unsetenv (env, "HF_HUB_OFFLINE");
  env = g_environ_setenv (env, "G_MESSAGES_DEBUG", "all", TRUE);
  for (int i = 0; extra_env && extra_env[i]; i += 2)
    env = g_environ_setenv (env, extra_env[i], extra_env[i + 1], TRUE);
  g_autofree char *out = NULL, *err = NULL;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, env, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, status,
                               &error));
  g_assert_no_error (error);
  return g_strconcat (out, "\n--- stderr ---\n", err, NULL);
}

static void
test_cli_hub (void)
{
  if (!g_getenv ("HN_BUILD_DIR"))
    {
      g_test_skip ("HN_BUILD_DIR not set");
      return;
    }
  g_autofree char *tmp = g_dir_make_tmp ("secrets-XXXXXX", NULL);
  const char *ep = fake_hub ();
  const char *env[] = { "HF_ENDPOINT", ep, "HF_HUB_CACHE", tmp, "HF_HOME", tmp, NULL };
  /* The token as a flag, with JSON events, and from the environment. */
  const char *a1[] = { "pull", "--repo", "org/gated", "--hf-token", SECRET, "--json-events", NULL };
  const char *a2[] = { "pull", "--repo", "org/gated", NULL };
  const char *const *runs[] = { a1, a2 };
  for (gsize r = 0; r < G_N_ELEMENTS (runs); r++)
    {
      const char *env2[] = { "HF_ENDPOINT", ep, "HF_HUB_CACHE", tmp, "HF_HOME", tmp, "HF_TOKEN", SECRET, NULL };
      guint before = auth_count ();
      int status = 0;
      g_autofree char *all = run_cli (runs[r], r == 1 ? env2 : env, &status);
      g_test_message ("run %zu (exit %d):\n%s", r, status, all);
      g_assert_cmpuint (auth_count (), >, before);   /* the token went to the Hub */
      g_assert_false (g_spawn_check_wait_status (status, NULL));
      g_assert_nonnull (strstr (all, "org/gated"));   /* the error names the repo */
      g_assert_null (strstr (all, SECRET));
      g_assert_null (strstr (all, "SeCrEtT0ken"));
    }
  g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", tmp);
  g_assert_cmpint (system (cmd), ==, 0);
}

static gboolean
tree_contains (const char *path, const char *needle)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *f;
      while (d && (f = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, f, NULL);
          if (tree_contains (p, needle))
            return TRUE;
        }
      return FALSE;
    }
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!g_file_get_contents (path, &data, &len, NULL))
    return FALSE;
  return memmem (data, len, needle, strlen (needle)) != NULL;
}

/* A training run given a token: metrics events, the metrics file and every
 * file in the output folder are free of it. */
static void
test_training_outputs (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  if (!g_getenv ("HN_BUILD_DIR") || !shared)
    {
      g_test_skip ("HN_BUILD_DIR / HN_SHARED_DIR not set");
      return;
    }
  g_autofree char *tokdir = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("secrets-train-XXXXXX", NULL);
  g_autofree char *model = g_build_filename (tmp, "model", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *text = g_build_filename (tmp, "text.txt", NULL);
  g_autofree char *metrics = g_build_filename (tmp, "metrics.jsonl", NULL);
  g_autoptr (GError) error = NULL;
  GString *t = g_string_new (NULL);
  for (int i = 0; i < 20; i++)
    g_string_append_printf (t, "Once upon a time there was a little dog number %d. ", i);
  g_assert_true (g_file_set_contents (text, t->str, (gssize) t->len, NULL));
  g_string_free (t, TRUE);
  const char *const ov[] = { "persistent_dim=8", "ltm_slots=16", "ltm_key_dim=8", "ltm_val_dim=8", "ltm_topk=2",
                             "rwkv_head_size=8", "max_h_steps=3", "max_l_steps=2", NULL };
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tokdir, model, 16, ov, 7, &error);
  g_assert_no_error (error);
  const char *args[] = { "train", "--model-path", model, "--train", text, "--out-dir", out, "--seq-len", "16",
                         "--training-chunk-size", "8", "--batch-size", "1", "--max-steps", "2", "--save-steps", "1",
                         "--metrics-file", metrics, "--hf-token", SECRET, "--json-events", NULL };
  int status = 0;
  g_autofree char *all = run_cli (args, NULL, &status);
  g_test_message ("%s", all);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (all, "\"loss\""));  /* metrics events were printed */
  g_assert_null (strstr (all, SECRET));
  g_assert_true (g_file_test (metrics, G_FILE_TEST_IS_REGULAR));
  g_assert_false (tree_contains (tmp, SECRET));
  g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", tmp);
  g_assert_cmpint (system (cmd), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/secrets/preview", test_preview);
  g_test_add_func ("/secrets/cli-hub", test_cli_hub);
  g_test_add_func ("/secrets/training-outputs", test_training_outputs);
  return g_test_run ();
}
