#include "generate/sampler.h"

#include <math.h>

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

int
hn_argmax (const float *scores, int n)
{
  int best = -1;
  float bv = -INFINITY;
  for (int i = 0; i < n; i++)
    if (best < 0 || scores[i] > bv)
      {
        if (isnan (scores[i]))
          continue;
        best = i;
        bv = scores[i];
      }
  return best;
}

static int
draw (HnRng *rng, const float *scores, const guint8 *taken, int n)
{
  float mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if ((!taken || !taken[i]) && scores[i] > mx)
      mx = scores[i];
  if (mx == -INFINITY || isnan (mx))
    return -1;
  double sum = 0.0;
  for (int i = 0; i < n; i++)
    if ((!taken || !taken[i]) && scores[i] > -INFINITY)
      sum += exp ((double) scores[i] - mx);
  double u = hn_rng_uniform (rng) * sum;
  int last = -1;
  for (int i = 0; i < n; i++)
    {
      if ((taken && taken[i]) || !(scores[i] > -INFINITY))
        continue;
      double p = exp ((double) scores[i] - mx);
      last = i;
      if (u < p)
        return i;
      u -= p;
    }
  return last; /* rounding left u past the end */
}

int
hn_sample_categorical (HnRng *rng, const float *scores, int n)
{
  return draw (rng, scores, NULL, n);
}

int
hn_sample_without_replacement (HnRng *rng, const float *scores, int n, int k, int *out)
{
  g_autofree guint8 *taken = g_malloc0 ((gsize) n);
  int got = 0;
  while (got < k)
    {
      int i = draw (rng, scores, taken, n);
      if (i < 0)
        break;
      taken[i] = 1;
      out[got++] = i;
    }
  return got;
}
