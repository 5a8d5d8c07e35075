/* safetensors: header JSON, offsets, dtypes, shapes; small tensors converted. */
#include "fuzz-common.h"
#include "formats/safetensors.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("model.safetensors", data, size);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
  if (!st)
    return 0;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *info = hn_safetensors_get_nth (st, i);
      if (info->n_elements > 4096)
        continue;
      g_autofree float *dst = g_new (float, MAX (info->n_elements, 1));
      g_autoptr (GError) e2 = NULL;
      hn_safetensor_info_to_f32 (info, dst, &e2);
    }
  (void) hn_safetensors_get_metadata (st, "format");
  return 0;
}
