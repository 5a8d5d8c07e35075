/* GGUF: header, metadata, tensor infos and extents; small tensors dequantized. */
#include "fuzz-common.h"
#include "formats/gguf.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("model.gguf", data, size);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
  if (!g)
    return 0;
  for (guint i = 0; i < hn_gguf_get_n_tensors (g); i++)
    {
      const HnGgufTensor *t = hn_gguf_get_tensor (g, i);
      if (t->n_elements > 65536)
        continue;
      g_autofree float *dst = g_new (float, MAX (t->n_elements, 1));
      g_autoptr (GError) e2 = NULL;
      hn_gguf_tensor_to_f32 (g, t, dst, &e2);
    }
  for (guint i = 0; i < hn_gguf_get_n_kv (g); i++)
    {
      const HnGgufKv *kv = hn_gguf_get_kv (g, i);
      if (kv->type == HN_GGUF_ARRAY && kv->raw && kv->n > 0)
        {
          (void) hn_gguf_kv_array_int (kv, kv->n - 1);
          (void) hn_gguf_kv_array_float (kv, 0);
        }
    }
  gint64 v;
  g_autoptr (GError) e3 = NULL;
  (void) hn_gguf_get_int (g, "general.alignment", &v, &e3);
  return 0;
}
