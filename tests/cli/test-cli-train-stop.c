/* The CLI's Ctrl-C on a training job is "Stop and save": the first SIGINT
 * writes a checkpoint of the step reached and the job ends successfully,
 * its DONE event naming the checkpoint to resume from. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* Runs argv (a training job with --json-events), sends SIGINT at the first
 * metric; returns the DONE event's resume_from and the last step. */
static char *
sigint_run (const char *const *argv, gint64 *last_step)
{
  g_autoptr (GError) error = NULL;
  GPid pid;
  int out_fd;
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid,
                                           NULL, &out_fd, NULL, &error));
  g_assert_no_error (error);
  FILE *f = fdopen (out_fd, "r");
  char line[65536];
  gboolean sent = FALSE;
  char *resume_from = NULL;
  *last_step = 0;
  while (fgets (line, sizeof line, f))
    {
      g_autoptr (JsonParser) p = json_parser_new ();
      if (!json_parser_load_from_data (p, line, -1, NULL) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
        continue;
      JsonObject *o = json_node_get_object (json_parser_get_root (p));
      const char *type = json_object_get_string_member_with_default (o, "event", "");
      if (g_str_equal (type, "metric"))
        {
          *last_step = json_object_get_int_member (o, "step");
          if (!sent)
            {
              kill (pid, SIGINT); /* Ctrl-C */
              sent = TRUE;
            }
        }
      if (g_str_equal (type, "done"))
        {
          g_assert_true (json_object_get_boolean_member (o, "ok"));
          resume_from = g_strdup (json_object_get_string_member_with_default (o, "resume_from", NULL));
        }
    }
  fclose (f);
  int status = 0;
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_spawn_close_pid (pid);
  g_assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
  g_assert_true (sent);
  g_assert_cmpint (*last_step, <, 500);
  g_assert_nonnull (resume_from);
  g_autofree char *state = g_build_filename (resume_from, "trainer_state.json", NULL);
  g_assert_true (g_file_test (state, G_FILE_TEST_IS_REGULAR));
  return resume_from;
}

static void
rm_rf (const char *tmp)
{
  g_autofree char *rm_argv = g_strdup_printf ("rm -rf %s", tmp);
  g_assert_true (g_spawn_command_line_sync (rm_argv, NULL, NULL, NULL, NULL));
}

static void
test_sigint_saves (gconstpointer hierarchos)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *cli = g_build_filename (g_getenv ("HN_BUILD_DIR"), "app", "cli", "hierarchos-native-cli", NULL);
  g_autofree char *model = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  g_autofree char *data = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  g_autofree char *tmp = g_dir_make_tmp ("hn-cli-stop-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  const char *argv[] = { cli, "transformer-finetune", "--model-path", model, "--train", data, "--out-dir", out,
                         "--max-steps", "500", "--batch-size", "2", "--seq-len", "16", "--json-events", NULL };
  /* a fresh tiny Hierarchos model from the same tokenizer, trained on the CPU */
  const char *hargv[] = { cli, "hierarchos-train", "--runtime", "cpu", "--tokenizer-path", model, "--context-dim", "16", "--train", data,
                          "--out-dir", out, "--max-steps", "500", "--batch-size", "2", "--seq-len", "16",
                          "--training-chunk-size", "8", "--json-events", NULL };
  gint64 last_step = 0;
  g_autofree char *resume_from = sigint_run (hierarchos ? hargv : argv, &last_step);
  g_autofree char *expect = g_strdup_printf ("%s/checkpoint-step-%" G_GINT64_FORMAT, out, last_step);
  g_autofree char *hsuffix = g_strdup_printf ("-step-%" G_GINT64_FORMAT, last_step);
  g_autofree char *hprefix = g_strdup_printf ("%s/checkpoint-epoch-", out);
  if (hierarchos)
    g_assert_true (g_str_has_prefix (resume_from, hprefix) && g_str_has_suffix (resume_from, hsuffix));
  else
    g_assert_cmpstr (resume_from, ==, expect);
  rm_rf (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/cli/train-sigint-saves", NULL, test_sigint_saves);
  g_test_add_data_func ("/cli/hierarchos-train-sigint-saves", GINT_TO_POINTER (1), test_sigint_saves);
  return g_test_run ();
}
