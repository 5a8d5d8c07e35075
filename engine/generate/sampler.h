/* The engine's own seeded PRNG (xoshiro256** seeded through splitmix64) and
 * categorical sampling from processed scores. Sampling is reproducible for a
 * given seed on every machine; it does not reproduce torch's random stream. */
#pragma once
#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef struct {
  guint64 s[4];
} HnRng;

void hn_rng_seed (HnRng *rng, guint64 seed);
guint64 hn_rng_next (HnRng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double hn_rng_uniform (HnRng *rng);

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
