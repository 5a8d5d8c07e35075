/* Masked-LM masking as transformers' DataCollatorForLanguageModeling (mlm=True)
 * applies it: every token that is not special is chosen with probability p
 * (mlm_probability, 0.15); a chosen token becomes the mask token with 80 %
 * probability, a uniformly random id in [0, vocab) with 10 %, and stays as it
 * is with 10 %. labels hold the original id where a token was chosen and -100
 * elsewhere. The draws come from the engine's seeded HnRng, so a seed gives
 * the same masks on every machine (not torch's random stream).
 *
 *   HnMlmMasking mm;
 *   hn_mlm_masking_init (&mm, tok, model_vocab, 0.15, &error);
 *   hn_mlm_mask (&mm, &rng, ids, labels, n);   // ids rewritten in place
 *   hn_mlm_masking_clear (&mm); */
#pragma once
#include <glib.h>
#include <stdint.h>

#include "base/rng.h"
#include "tokenizer/tokenizer.h"

G_BEGIN_DECLS

typedef struct {
  double probability;
  int32_t mask_id;
  int32_t vocab;    /* random replacements are drawn from [0, vocab) */
  guint8 *special;  /* [vocab]: 1 = never chosen (ids outside [0, vocab) are never chosen either) */
} HnMlmMasking;

/* The tokenizer's mask token (tokenizer_config.json's mask_token, else "[MASK]" or "<mask>") and
 * special tokens; vocab is min(len(tokenizer), model_vocab). A tokenizer without a mask token is
 * HN_ERROR_UNSUPPORTED naming it. */
gboolean hn_mlm_masking_init (HnMlmMasking *mm, HnTokenizer *tok, int32_t model_vocab, double probability,
                              GError **error);
void hn_mlm_masking_clear (HnMlmMasking *mm);
/* Masks ids [n] in place and writes labels [n]; returns how many tokens were chosen. */
gsize hn_mlm_mask (const HnMlmMasking *mm, HnRng *rng, int32_t *ids, int32_t *labels, gsize n);

G_END_DECLS
