/* `devices [--json]`: the Vulkan devices the GUI's picker shows. */
#include "cli.h"
#include "base/hn-error.h"
#include "vk/hn-vk.h"

#include <stdio.h>

int hn_cmd_devices (int argc, char **argv);

int
hn_cmd_devices (int argc, char **argv)
{
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("devices", argc, argv, &status);
  if (!spec)
    return status;
  gboolean json = hn_job_spec_get_bool (spec, "json");
  GError *error = NULL;
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
