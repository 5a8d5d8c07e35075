#include "generate/sampler.h"

#include <math.h>

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
