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
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("architectures", argc, argv, &status);
  if (!spec)
    return status;
  gboolean json = hn_job_spec_get_bool (spec, "json"), count = hn_job_spec_get_bool (spec, "count"),
           markdown = hn_job_spec_get_bool (spec, "markdown");
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
