/* Hierarchos config.json (the architecture contract): load, validate, build
 * a model when it is small. */
#include "fuzz-hier-common.h"

#include <string.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("config.json", data, size);
  HnHierConfig c;
  memset (&c, 0, sizeof c);
  g_autoptr (GError) error = NULL;
  if (hn_hier_config_load (&c, path, &error))
    {
      g_autoptr (GError) e2 = NULL;
      if (hn_hier_config_validate (&c, &e2))
        {
          g_free (hn_hier_config_sha256 (&c));
          g_free (hn_hier_config_canonical_json (&c));
        }
    }
  hn_hier_config_clear (&c);
  return 0;
}
