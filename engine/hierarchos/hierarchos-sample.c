/* Sampling for Hierarchos chat and generation with the engine's
 * transformers-exact logits processors (see hierarchos.h). */
#include "hierarchos/hierarchos-private.h"
#include "generate/logits-process.h"
#include "generate/sampler.h"

void
hn_hier_sampling_defaults (HnHierSampling *s)
{
  s->temperature = 0.7;
  s->top_k = 40;
  s->top_p = 0.9;
  s->repetition_penalty = 1.2;
}

guint32
hn_hier_sample (const HnHierSampling *s, float *logits, int V, const GArray *history, HnRng *rng)
{
  if (s->repetition_penalty != 1.0 && history && history->len)
    {
      g_autofree int32_t *ids = g_new (int32_t, history->len);
      for (guint i = 0; i < history->len; i++)
        ids[i] = (int32_t) g_array_index (history, guint32, i);
      hn_logits_repetition_penalty (logits, V, ids, (int) history->len, s->repetition_penalty);
    }
  if (s->temperature <= 0)
    return (guint32) hn_argmax (logits, V);
  hn_logits_temperature (logits, V, s->temperature);
  if (s->top_k > 0)
    hn_logits_top_k (logits, V, s->top_k, 1);
  if (s->top_p < 1.0)
    hn_logits_top_p (logits, V, s->top_p, 1);
  int id = hn_sample_categorical (rng, logits, V);
  return id < 0 ? (guint32) hn_argmax (logits, V) : (guint32) id;
}
