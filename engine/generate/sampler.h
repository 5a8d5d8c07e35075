/* Categorical sampling from processed scores with the engine's own PRNG
 * (base/rng.h). Sampling is reproducible for a given seed on every machine;
 * it does not reproduce torch's random stream. */
#pragma once
#include <glib.h>
#include <stdint.h>

#include "base/rng.h"

G_BEGIN_DECLS

/* Draws one index from softmax(scores) (entries at -inf have probability 0).
 * Returns -1 when every entry is -inf or NaN. */
int hn_sample_categorical (HnRng *rng, const float *scores, int n);

/* Draws k distinct indices without replacement from softmax(scores), in draw
 * order (torch.multinomial(replacement=False) semantics). Returns how many
 * were drawn (fewer than k when fewer entries have non-zero probability). */
int hn_sample_without_replacement (HnRng *rng, const float *scores, int n, int k, int *out);

/* Index of the largest score; the first one on ties (torch.argmax). */
int hn_argmax (const float *scores, int n);

G_END_DECLS
