/* Shared by the Hierarchos tests (header only). */
#pragma once
#include "models/hierarchos-private.h"
#include "generate/sampler.h"

/* Adds N(0, scale^2) noise to every trainable tensor, so the zero-
 * initialised matrices (adapters, low-rank factors) are non-trivial and
 * every path carries values and gradients. */
static inline void
hier_test_perturb (HnHierModel *m, guint64 seed, float scale)
{
  HnRng rng;
  hn_rng_seed (&rng, seed);
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      if (!p->trainable)
        continue;
      for (gsize j = 0; j < p->numel; j++)
        m->params[p->offset + j] += (float) (scale * hn_hier_rng_normal (&rng));
    }
}
