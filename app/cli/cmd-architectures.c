/* `architectures [--json|--markdown|--count]`: the model types this build knows, with family,
 * block wiring, quirks and supported tasks, straight from the registry. */
#include "cli.h"
#include "transformer/registry.h"
#include "base/hn-error.h"

#include <stdio.h>

int hn_cmd_architectures (int argc, char **argv);

int
hn_cmd_architectures (int argc, char **argv)
{
  gboolean json = FALSE, count = FALSE, markdown = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the registry as JSON", NULL },
    { "count", 0, 0, G_OPTION_ARG_NONE, &count, "Print the number of parity-verified architectures", NULL },
    { "markdown", 0, 0, G_OPTION_ARG_NONE, &markdown, "Print the registry as a Markdown page", NULL },
    { NULL },
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- list supported model architectures");
  g_option_context_add_main_entries (ctx, entries, NULL);
  GError *error = NULL;
  if (!hn_cli_check_repeats (entries, argc, argv, &error) || !g_option_context_parse (ctx, &argc, &argv, &error))
    return hn_cli_fail (error);
  if (argc > 1)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "unexpected argument '%s'", argv[1]));
  if (count)
    {
      printf ("%u\n", hn_arch_count_parity_verified ());
      return 0;
    }
  if (markdown)
    {
      g_autofree char *s = hn_arch_list_to_markdown ();
      fputs (s, stdout);
      return 0;
    }
  if (json)
    {
      g_autofree char *s = hn_arch_list_to_json ();
      printf ("%s\n", s);
      return 0;
    }
  gsize n;
  const HnArchInfo *a = hn_arch_list (&n);
  printf ("%-12s %-11s %-15s %-7s %-9s %-6s %-5s %s\n", "MODEL_TYPE", "FAMILY", "BLOCK", "LOGITS", "GENERATE",
          "TRAIN", "LORA", "ALIASES");
  for (gsize i = 0; i < n; i++)
    {
      g_autofree char *aliases = a[i].aliases ? g_strjoinv (",", (char **) a[i].aliases) : g_strdup ("-");
      printf ("%-12s %-11s %-15s %-7s %-9s %-6s %-5s %s\n", a[i].model_type, a[i].family,
              hn_block_kind_name (a[i].block), a[i].tasks & HN_TASK_LOGITS ? "yes" : "no",
              a[i].tasks & HN_TASK_GENERATE ? "yes" : "no", a[i].tasks & HN_TASK_TRAIN ? "yes" : "no",
              a[i].tasks & HN_TASK_LORA ? "yes" : "no", aliases);
    }
  return 0;
}
