/* The engine's seeded PRNG (see rng.h). */
#include "base/rng.h"

static guint64
splitmix64 (guint64 *x)
{
  guint64 z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void
hn_rng_seed (HnRng *rng, guint64 seed)
{
  guint64 x = seed;
  for (int i = 0; i < 4; i++)
    rng->s[i] = splitmix64 (&x);
}

static inline guint64
rotl (guint64 x, int k)
{
  return (x << k) | (x >> (64 - k));
}

guint64
hn_rng_next (HnRng *rng)
{
  guint64 *s = rng->s;
  guint64 result = rotl (s[1] * 5, 7) * 9;
  guint64 t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl (s[3], 45);
  return result;
}

double
hn_rng_uniform (HnRng *rng)
{
  return (double) (hn_rng_next (rng) >> 11) * 0x1.0p-53;
}
