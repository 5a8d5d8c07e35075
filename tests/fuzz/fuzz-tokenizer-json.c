/* tokenizer.json (every model/normalizer/pre-tokenizer/post-processor/decoder
 * kind); an optional tokenizer_config.json after a NUL byte. */
#include "fuzz-tokenizer-common.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const uint8_t *parts[2];
  size_t lens[2];
  guint n = fuzz_split (data, size, parts, lens, 2);
  fuzz_write_part ("tokenizer.json", 0, n, parts, lens);
  fuzz_write_part ("tokenizer_config.json", 1, n, parts, lens);
  g_autofree char *path = g_build_filename (fuzz_tmp_dir (), "tokenizer.json", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (path, &error);
  if (tok)
    fuzz_tokenizer_exercise (tok);
  return 0;
}
