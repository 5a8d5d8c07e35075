/* A tiny Hierarchos model (as tests/engine/test-hierarchos.c makes) for the
 * targets that load files belonging to a model. */
#pragma once
#include "fuzz-common.h"
#include "hierarchos/hierarchos-private.h"

static inline HnHierModel *
fuzz_hier_tiny_model (void)
{
  HnHierConfig c;
  hn_hier_config_init_defaults (&c, 40, 16);
  c.persistent_dim = 8;
  c.ltm_slots = 16;
  c.ltm_key_dim = 8;
  c.ltm_val_dim = 8;
  c.ltm_topk = 2;
  c.rwkv_head_size = 8;
  c.h_stride = 2;
  c.max_h_steps = 3;
  c.max_l_steps = 3;
  c.rosa_max_context = 24;
  hn_hier_config_derive (&c);
  g_autoptr (GError) error = NULL;
  HnHierModel *m = hn_hier_model_new (&c, &error);
  if (!m)
    g_error ("tiny model: %s", error->message);
  hn_hier_config_clear (&c);
  hn_hier_model_init_weights (m, 5);
  return m;
}
