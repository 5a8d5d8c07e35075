/* `devices [--json]`: the Vulkan devices the GUI's picker shows. */
#include "cli.h"
#include "base/hn-error.h"
#include "vk/hn-vk.h"

#include <stdio.h>

int hn_cmd_devices (int argc, char **argv);

int
hn_cmd_devices (int argc, char **argv)
{
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print every device's full report as a JSON array", NULL },
    { NULL },
  };
  g_autoptr (GOptionContext) octx = g_option_context_new ("- list the Vulkan devices");
  g_option_context_set_description (octx,
    "A device is chosen with --device (or HN_DEVICE) by its index, its UUID or part of its name.\n");
  g_option_context_add_main_entries (octx, entries, NULL);
  GError *error = NULL;
  if (!hn_cli_check_repeats (entries, argc, argv, &error) || !g_option_context_parse (octx, &argc, &argv, &error))
    return hn_cli_fail (error);
  if (argc > 1)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "unexpected argument '%s'", argv[1]));
  g_autoptr (GPtrArray) list = hn_vk_list_devices (&error);
  if (!list)
    return hn_cli_fail (error);
  if (json)
    {
      g_autoptr (JsonArray) arr = json_array_new ();
      for (guint i = 0; i < list->len; i++)
        json_array_add_element (arr, hn_vk_device_info_to_json (list->pdata[i]));
      g_autoptr (JsonNode) root = json_node_new (JSON_NODE_ARRAY);
      json_node_set_array (root, arr);
      g_autofree char *s = json_to_string (root, TRUE);
      printf ("%s\n", s);
      return 0;
    }
  printf ("%-5s %-40s %-10s %-10s %-8s %s\n", "INDEX", "NAME", "TYPE", "MEMORY", "VULKAN", "UUID");
  for (guint i = 0; i < list->len; i++)
    {
      const HnVkDeviceInfo *d = list->pdata[i];
      g_autofree char *mem = g_format_size_full (hn_vk_device_info_local_bytes (d), G_FORMAT_SIZE_IEC_UNITS);
      printf ("%-5d %-40s %-10s %-10s %-8s %s\n", d->index, d->name, d->type, mem, d->api_version, d->uuid);
    }
  return 0;
}
