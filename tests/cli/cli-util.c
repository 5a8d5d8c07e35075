#include "cli-util.h"

char *
cli_run_env (int *status, char **err, const char *const *envp, ...)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_autofree char *exe = g_build_filename (g_getenv ("HN_BUILD_DIR"), "app", "cli", "hierarchos-native-cli", NULL);
  g_ptr_array_add (argv, exe);
  va_list ap;
  va_start (ap, envp);
  for (const char *a; (a = va_arg (ap, const char *));)
    g_ptr_array_add (argv, (gpointer) a);
  va_end (ap);
  g_ptr_array_add (argv, NULL);
  char *out = NULL;
  g_autoptr (GError) error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, (char **) envp, G_SPAWN_DEFAULT, NULL, NULL, &out, err,
                               status, &error));
  g_assert_no_error (error);
  return out;
}
