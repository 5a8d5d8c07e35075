/* Hierarchos chat state files (versioned JSON with the packed cell layout,
 * identity checks, the ROSA automaton), restored into a tiny model's state.
 * HN_FUZZ_MAKE_SEED=FILE writes a valid state (after a few tokens) there. */
#include "fuzz-hier-common.h"

static HnHierModel *model;

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (!model)
    {
      model = fuzz_hier_tiny_model ();
      const char *seed = g_getenv ("HN_FUZZ_MAKE_SEED");
      if (seed)
        {
          g_autoptr (HnHierState) s = hn_hier_state_new (model);
          g_autoptr (HnHierRunner) r = hn_hier_runner_new (model);
          g_autofree float *logits = g_new (float, model->V);
          for (guint32 t = 1; t < 12; t++)
            if (!hn_hier_runner_step (r, s, t * 7 % (guint32) model->V, logits, NULL))
              g_error ("step failed");
          g_autoptr (GError) e = NULL;
          if (!hn_hier_state_save (model, s, seed, &e))
            g_error ("%s", e->message);
        }
    }
  g_autofree char *path = fuzz_write ("state.json", data, size);
  g_autoptr (HnHierState) s = hn_hier_state_new (model);
  g_autoptr (GError) error = NULL;
  if (hn_hier_state_load (model, s, path, &error))
    {
      /* A restored state must be usable. */
      g_autoptr (HnHierRunner) r = hn_hier_runner_new (model);
      g_autofree float *logits = g_new (float, model->V);
      g_autoptr (GError) e2 = NULL;
      hn_hier_runner_step (r, s, 3, logits, &e2);
    }
  return 0;
}
