/* SentencePiece tokenizer.model (protobuf): the whole input is the model. */
#include "fuzz-tokenizer-common.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("tokenizer.model", data, size);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (path, &error);
  if (tok)
    fuzz_tokenizer_exercise (tok);
  return 0;
}
