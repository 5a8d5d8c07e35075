/* The engine's own seeded PRNG: xoshiro256** seeded through splitmix64, the
 * same stream for a given seed on every machine (sampling, data shuffles,
 * weight init, masking). It does not reproduce torch's random stream. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  guint64 s[4];
} HnRng;

void hn_rng_seed (HnRng *rng, guint64 seed);
guint64 hn_rng_next (HnRng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double hn_rng_uniform (HnRng *rng);

G_END_DECLS
