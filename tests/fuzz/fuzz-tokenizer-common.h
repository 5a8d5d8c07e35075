/* Exercises a loaded tokenizer: encode (with special tokens), decode, and
 * the streaming decoder over the ids. */
#pragma once
#include "fuzz-common.h"
#include "tokenizer/tokenizer.h"

static inline void
fuzz_tokenizer_exercise (HnTokenizer *tok)
{
  static const char *texts[] = { "Hello world! <s> 12345 \xc3\xa9t\xc3\xa9  \n\tcaf\xc3\xa9", "", " ", "\xe4\xbd\xa0\xe5\xa5\xbd" };
  for (gsize t = 0; t < G_N_ELEMENTS (texts); t++)
    {
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_autoptr (GError) error = NULL;
      if (!hn_tokenizer_encode (tok, texts[t], -1, TRUE, ids, &error))
        continue;
      g_autoptr (GError) e2 = NULL;
      g_free (hn_tokenizer_decode (tok, (const int32_t *) ids->data, ids->len, FALSE, &e2));
      g_autoptr (HnTokenDecoder) dec = hn_token_decoder_new (tok, TRUE);
      for (guint i = 0; i < ids->len; i++)
        {
          g_autoptr (GError) e3 = NULL;
          g_free (hn_token_decoder_push (dec, g_array_index (ids, int32_t, i), &e3));
        }
      g_free (hn_token_decoder_flush (dec));
    }
  /* Ids out of range must be an error, not a read past the vocabulary. */
  int32_t odd[] = { -1, 0, 1, 255, 1 << 30 };
  g_autoptr (GError) e4 = NULL;
  g_free (hn_tokenizer_decode (tok, odd, G_N_ELEMENTS (odd), TRUE, &e4));
  hn_tokenizer_is_eos (tok, 0);
  hn_tokenizer_is_special (tok, 1);
}
