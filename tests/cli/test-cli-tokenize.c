/* Runs `hierarchos-native-cli tokenize` as a user would and checks what it prints. */
#include "cli-util.h"

#include <glib/gstdio.h>
#include <glib.h>
#include <string.h>

static void
test_round_trip (void)
{
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  int status;
  g_autofree char *err = NULL, *err2 = NULL;
  g_autofree char *out = cli_run (&status, &err, "tokenize", "--tokenizer", tok, "--text", "Once upon a time, Lily smiled.",
                                  "--add-special-tokens", "--json", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_true (g_str_has_prefix (out, "{\"ids\": [1, "));
  /* feed the ids back through --decode */
  const char *b = strchr (out, '['), *e = strchr (out, ']');
  g_assert_true (b && e && e > b);
  g_autofree char *ids = g_strndup (b + 1, e - b - 1);
  g_autofree char *text = cli_run (&status, &err2, "tokenize", "--tokenizer", tok, "--decode", ids, "--skip-special-tokens", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_cmpstr (text, ==, "Once upon a time, Lily smiled.\n");
}

static void
test_errors (void)
{
  int status;
  g_autofree char *err = NULL, *err2 = NULL, *err3 = NULL;
  g_autofree char *out = cli_run (&status, &err, "tokenize", "--tokenizer", "/nonexistent/tok", "--text", "x", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "/nonexistent/tok"));
  g_autofree char *out2 = cli_run (&status, &err2, "tokenize", "--text", "x", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err2, "--tokenizer"));
  g_autofree char *out3 = cli_run (&status, &err3, "tokenize", "--help", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (out3, "--input-file"));
  /* an option of one value given twice is refused, not the last silently taken */
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  g_autofree char *err4 = NULL, *err5 = NULL;
  g_autofree char *out4 = cli_run (&status, &err4, "tokenize", "--tokenizer", tok, "--text", "a", "--text=b", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err4, "--text is given twice"));
  /* a value that looks like the flag is a value, and -t is --tokenizer */
  g_autofree char *out5 = cli_run (&status, &err5, "tokenize", "-t", tok, "--tokenizer", tok, "--text", "--text", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err5, "--tokenizer-path is given twice"));
}

/* ids typed by hand that are no token are an error, not dropped; a NUL
 * byte in the input is named as one, not as invalid UTF-8 */
static void
test_unknown_id_and_nul (void)
{
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  int status;
  g_autofree char *err = NULL, *err2 = NULL;
  g_autofree char *out = cli_run (&status, &err, "tokenize", "--tokenizer", tok, "--decode", "1,2,99999", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "token id 99999 is not in the vocabulary"));
  g_autofree char *dir = g_dir_make_tmp ("hn-cli-tok-XXXXXX", NULL);
  g_autofree char *f = g_build_filename (dir, "nul.txt", NULL);
  g_assert_true (g_file_set_contents (f, "ab\0c", 4, NULL));
  g_autofree char *out2 = cli_run (&status, &err2, "tokenize", "--tokenizer", tok, "--input-file", f, NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err2, "a NUL byte at byte 2"));
  g_unlink (f);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/tokenize/round-trip", test_round_trip);
  g_test_add_func ("/cli/tokenize/errors", test_errors);
  g_test_add_func ("/cli/tokenize/unknown-id-and-nul", test_unknown_id_and_nul);
  return g_test_run ();
}
