/* config.json of a Transformers model. */
#include "fuzz-common.h"
#include "formats/model-config.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  fuzz_tmp_dir ();
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data ((const char *) data, (gssize) size, "config.json", &error);
  if (!cfg)
    return 0;
  gint64 v;
  double d;
  gboolean b;
  const char *keys[] = { "hidden_size", "num_attention_heads", "rope_theta", "tie_word_embeddings", "eos_token_id", "rope_scaling" };
  for (gsize i = 0; i < G_N_ELEMENTS (keys); i++)
    {
      g_autoptr (GError) e1 = NULL, e2 = NULL, e3 = NULL;
      hn_model_config_get_int (cfg, keys[i], &v, &e1);
      hn_model_config_get_double (cfg, keys[i], &d, &e2);
      hn_model_config_get_bool (cfg, keys[i], &b, &e3);
    }
  hn_model_config_is_eos (cfg, 2);
  return 0;
}
