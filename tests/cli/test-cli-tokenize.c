/* Runs `hierarchos-native-cli tokenize` as a user would and checks what it prints. */
#include <glib.h>
#include <string.h>

static char *
run_cli (int *status, char **err, ...)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_autofree char *exe = g_build_filename (g_getenv ("HN_BUILD_DIR"), "app", "cli", "hierarchos-native-cli", NULL);
  g_ptr_array_add (argv, exe);
  va_list ap;
  va_start (ap, err);
  for (const char *a; (a = va_arg (ap, const char *));)
    g_ptr_array_add (argv, (gpointer) a);
  va_end (ap);
  g_ptr_array_add (argv, NULL);
  char *out = NULL;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, err, status, &error));
  g_assert_no_error (error);
  return out;
}

static void
test_round_trip (void)
{
  g_autofree char *tok = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  int status;
  g_autofree char *err = NULL, *err2 = NULL;
  g_autofree char *out = run_cli (&status, &err, "tokenize", "--tokenizer", tok, "--text", "Once upon a time, Lily smiled.",
                                  "--add-special-tokens", "--json", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_true (g_str_has_prefix (out, "{\"ids\": [1, "));
  /* feed the ids back through --decode */
  const char *b = strchr (out, '['), *e = strchr (out, ']');
  g_assert_true (b && e && e > b);
  g_autofree char *ids = g_strndup (b + 1, e - b - 1);
  g_autofree char *text = run_cli (&status, &err2, "tokenize", "--tokenizer", tok, "--decode", ids, "--skip-special-tokens", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_cmpstr (text, ==, "Once upon a time, Lily smiled.\n");
}

static void
test_errors (void)
{
  int status;
  g_autofree char *err = NULL, *err2 = NULL, *err3 = NULL;
  g_autofree char *out = run_cli (&status, &err, "tokenize", "--tokenizer", "/nonexistent/tok", "--text", "x", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "/nonexistent/tok"));
  g_autofree char *out2 = run_cli (&status, &err2, "tokenize", "--text", "x", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err2, "--tokenizer"));
  g_autofree char *out3 = run_cli (&status, &err3, "tokenize", "--help", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (out3, "--input-file"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/tokenize/round-trip", test_round_trip);
  g_test_add_func ("/cli/tokenize/errors", test_errors);
  return g_test_run ();
}
