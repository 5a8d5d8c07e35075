/* Shared by the Hierarchos tests (header only). */
#pragma once
#include "hierarchos/hierarchos-private.h"
#include "base/rng.h"

/* The tests' tiny geometry (vocab V, width C): small LTM and heads, 3
 * ponder and refinement steps, pondering every other token. Callers adjust
 * fields, then hn_hier_config_derive. */
static inline void
hier_test_tiny_config (HnHierConfig *c, gint64 vocab, gint64 C)
{
  hn_hier_config_init_defaults (c, vocab, C);
  c->persistent_dim = 8;
  c->ltm_slots = 16;
  c->ltm_key_dim = 8;
  c->ltm_val_dim = 8;
  c->ltm_topk = 2;
  c->rwkv_head_size = 8;
  c->h_stride = 2;
  c->max_h_steps = 3;
  c->max_l_steps = 3;
  c->rosa_max_context = 24;
}

/* A model of the derived config c (cleared) with the documented init. */
static inline HnHierModel *
hier_test_model (HnHierConfig *c, guint64 seed)
{
  hn_hier_config_derive (c);
  g_autoptr (GError) error = NULL;
  HnHierModel *m = hn_hier_model_new (c, &error);
  g_assert_no_error (error);
  hn_hier_config_clear (c);
  hn_hier_model_init_weights (m, seed);
  return m;
}

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
