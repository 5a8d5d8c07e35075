#include "cli.h"
#include "base/hn-error.h"

#include <locale.h>
#include <stdio.h>
#include <string.h>

int
hn_cli_fail (GError *error)
{
  fprintf (stderr, "error: %s\n", error ? error->message : "unknown error");
  g_clear_error (&error);
  return 1;
}

HnJobSpec *
hn_cli_parse_command (const char *name, int argc, char **argv, int *exit_status)
{
  const HnJobKindInfo *info = hn_command_lookup (name);
  g_return_val_if_fail (info != NULL, NULL);
  *exit_status = 2;
  g_autoptr (GPtrArray) args = g_ptr_array_new ();
  g_ptr_array_add (args, (gpointer) info->name);
  for (int i = 1; i < argc; i++)
    {
      if (strcmp (argv[i], "--help") == 0 || strcmp (argv[i], "-h") == 0)
        {
          hn_job_spec_print_help (info, stdout);
          *exit_status = 0;
          return NULL;
        }
      g_ptr_array_add (args, argv[i]);
    }
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) args->len, (const char *const *) args->pdata, &error);
  if (!spec || !hn_job_spec_validate (spec, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return NULL;
    }
  *exit_status = 0;
  return g_steal_pointer (&spec);
}

static const HnCliCommand *
find_command (const char *name)
{
  for (const HnCliCommand *c = hn_cli_commands; c->name; c++)
    {
      if (strcmp (c->name, name) == 0)
        return c;
      for (const char *const *a = c->aliases; a && *a; a++)
        if (strcmp (*a, name) == 0)
          return c;
    }
  return NULL;
}

static void
print_usage (FILE *f)
{
  fprintf (f, "Usage: hierarchos-native-cli COMMAND [OPTIONS...]\n\n"
              "Train, fine-tune and run Transformer and Hierarchos models on any Vulkan GPU.\n\n"
              "Commands:\n");
  for (const HnCliCommand *c = hn_cli_commands; c->name; c++)
    fprintf (f, "  %-22s %s\n", c->name, c->summary);
  fprintf (f, "\nRun 'hierarchos-native-cli COMMAND --help' for the options of a command.\n"
              "Options:\n  -h, --help             Show this help\n  --version              Show the version\n");
}

int
hn_cli_main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  setlocale (LC_NUMERIC, "C"); /* numbers in JSON and flags use '.' */
  if (argc < 2)
    {
      print_usage (stderr);
      return 2;
    }
  if (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0 || strcmp (argv[1], "help") == 0)
    {
      print_usage (stdout);
      return 0;
    }
  if (strcmp (argv[1], "--version") == 0)
    {
      printf ("hierarchos-native-cli %s\n", HN_VERSION);
      return 0;
    }
  const HnCliCommand *cmd = find_command (argv[1]);
  if (!cmd)
    {
      fprintf (stderr, "error: unknown command '%s'\n\n", argv[1]);
      print_usage (stderr);
      return 2;
    }
  return cmd->run (argc - 1, argv + 1);
}
