/* Internals shared by the transformer's files (config, weights, graph, KV cache). */
#pragma once
#include "io/model-config.h"
#include "io/safetensors.h"
#include "models/transformer.h"

G_BEGIN_DECLS

struct _HnTransformer {
  HnVkContext *ctx;
  char *dir;
  HnModelConfig *config;
  HnTransformerHParams hp;
  HnTransformerWeights w;
  GPtrArray *owned;      /* every HnTensor the model holds */
  guint64 weight_bytes;
  GArray *origins;       /* HnWeightOrigin, for writing weights back (training) */
};

/* transformer-config.c */
gboolean hn_transformer_hparams_resolve (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error);
void hn_transformer_hparams_clear (HnTransformerHParams *hp);

/* transformer-weights.c */
gboolean hn_transformer_weights_load (HnTransformer *model, HnSafetensors *st, GError **error);

/* transformer-graph.c: drops the tensor views a recording made (after its submit). */
void hn_transformer_acts_drop_views (HnTransformerActs *acts);

G_END_DECLS
