/* export-gguf and a GGUF as --model-path, through the real CLI: the export
 * of stories260K generates what the model folder generates, the Modelfile
 * lies beside it, and bad requests fail with a message. */
#include "cli-util.h"
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

static char *tmp_dir;

/* The generated text is all of stdout (the statistics go to stderr). */
static char *
generated_text (const char *out)
{
  return g_strdup (out);
}

static void
test_export_generate (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *gguf = g_build_filename (tmp_dir, "stories-q8_0.gguf", NULL);
  int status;
  g_autofree char *err = NULL, *err2 = NULL, *err3 = NULL;
  g_autofree char *out = cli_run (&status, &err, "export-gguf", "--model-path", model, "--outtype", "q8_0", "--out", gguf,
                                  NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("export-gguf failed: %s", err);
  g_assert_true (g_file_test (gguf, G_FILE_TEST_IS_REGULAR));
  g_autofree char *mf = g_build_filename (tmp_dir, "stories-q8_0.Modelfile", NULL);
  g_autofree char *mf_text = NULL;
  g_assert_true (g_file_get_contents (mf, &mf_text, NULL, NULL));
  g_assert_nonnull (strstr (mf_text, "FROM ./stories-q8_0.gguf\n"));
  g_assert_nonnull (strstr (mf_text, "PARAMETER stop \"</s>\"\n"));

  g_autofree char *a = cli_run (&status, &err2, "generate", "--model-path", model, "--prompt", "Once upon a time",
                                "--max-new-tokens", "24", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autofree char *b = cli_run (&status, &err3, "generate", "--model-path", gguf, "--prompt", "Once upon a time",
                                "--max-new-tokens", "24", NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("generate from the GGUF failed: %s", err3);
  g_autofree char *ta = generated_text (a), *tb = generated_text (b);
  g_assert_cmpstr (tb, ==, ta);
  g_assert_cmpuint (strlen (ta), >, 20);
  g_unlink (mf);
  g_unlink (gguf);
}

static void
test_errors (void)
{
  g_autofree char *model = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *gguf = g_build_filename (tmp_dir, "x.gguf", NULL);
  int status;
  g_autofree char *err = NULL, *err2 = NULL, *err3 = NULL;
  g_autofree char *o1 = cli_run (&status, &err, "export-gguf", "--model-path", model, "--outtype", "q3_k", "--out", gguf,
                                 NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "q4_k_m"));
  g_autofree char *o2 = cli_run (&status, &err2, "export-gguf", "--model-path", model, NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err2, "--out"));
  /* a damaged GGUF is an error naming the file */
  g_assert_true (g_file_set_contents (gguf, "GGUF\3\0\0\0\1\0\0\0\0\0\0\0", 16, NULL));
  g_autofree char *o3 = cli_run (&status, &err3, "generate", "--model-path", gguf, "--prompt", "x", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err3, "x.gguf"));
  g_unlink (gguf);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmp_dir = g_dir_make_tmp ("hn-cli-gguf-XXXXXX", NULL);
  g_test_add_func ("/cli/gguf/export-generate", test_export_generate);
  g_test_add_func ("/cli/gguf/errors", test_errors);
  int rc = g_test_run ();
  g_rmdir (tmp_dir);
  g_free (tmp_dir);
  return rc;
}
