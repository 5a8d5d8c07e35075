/* generation_config.json. */
#include "fuzz-common.h"
#include "formats/gen-config.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  fuzz_tmp_dir ();
  g_autoptr (GError) error = NULL;
  HnGenerationConfig *cfg = hn_generation_config_load_from_data ((const char *) data, (gssize) size,
                                                                 "generation_config.json", &error);
  if (!cfg)
    return 0;
  g_autoptr (GError) e2 = NULL;
  hn_generation_config_validate (cfg, &e2);
  hn_generation_config_is_eos (cfg, 2);
  HnGenerationConfig *copy = hn_generation_config_copy (cfg);
  hn_generation_config_free (copy);
  hn_generation_config_free (cfg);
  return 0;
}
