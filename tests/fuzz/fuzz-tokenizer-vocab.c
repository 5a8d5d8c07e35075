/* The slow formats: GPT-2 vocab.json NUL merges.txt [NUL tokenizer_config.json],
 * or, when the input starts with "[BERT]\n", a BERT vocab.txt (the rest). */
#include "fuzz-tokenizer-common.h"

#include <string.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = NULL;
  static const char bert[] = "[BERT]\n";
  g_autofree char *vj = g_build_filename (fuzz_tmp_dir (), "vocab.json", NULL);
  g_autofree char *vt = g_build_filename (fuzz_tmp_dir (), "vocab.txt", NULL);
  g_unlink (vj);
  g_unlink (vt);
  if (size >= strlen (bert) && memcmp (data, bert, strlen (bert)) == 0)
    path = fuzz_write ("vocab.txt", data + strlen (bert), size - strlen (bert));
  else
    {
      const uint8_t *parts[3];
      size_t lens[3];
      guint n = fuzz_split (data, size, parts, lens, 3);
      fuzz_write_part ("vocab.json", 0, n, parts, lens);
      fuzz_write_part ("merges.txt", 1, n, parts, lens);
      fuzz_write_part ("tokenizer_config.json", 2, n, parts, lens);
      path = g_strdup (fuzz_tmp_dir ());
    }
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (path, &error);
  if (tok)
    fuzz_tokenizer_exercise (tok);
  return 0;
}
