/* Internals shared by the transformer's files (config, weights, graph, KV cache). */
#pragma once
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "transformer/transformer.h"

G_BEGIN_DECLS

struct _HnTransformer {
  HnVkContext *ctx;
  char *dir;
  HnModelConfig *config;
  HnTransformerHParams hp;
  HnTransformerWeights w;
  GPtrArray *owned;      /* every HnTensor the model holds */
  guint64 weight_bytes;
  char *nonfinite_tensor;   /* the first weight holding NaN/Inf, or NULL */
  guint64 nonfinite_values; /* its NaN/Inf values */
  GArray *origins;       /* HnWeightOrigin, for writing weights back (training) */
  HnDType quant;         /* the layers' Linear weights packed into this (tensor/quant.h); F32 = as stored */
  /* Layer-split (pipeline) inference: this model holds layers [layer0, layer1)
   * (embeddings when layer0 == 0, final norm and head when layer1 == n_layer)
   * and `next` the following stage on another device; a whole model is one
   * stage [0, n_layer) with next == NULL. */
  int layer0, layer1;
  HnTransformer *next;
};

/* transformer-config.c: families routing as DeepseekV3TopkRouter (sigmoid scores, a choice bias,
 * group-limited top-k, shared experts) */
gboolean hn_transformer_moe_v3_router (const char *model_type);

/* Query heads of layer il (laguna varies them). */
static inline int
hn_transformer_layer_heads (const HnTransformerHParams *hp, int il)
{
  return hp->layer_n_head ? hp->layer_n_head[il] : hp->n_head;
}

/* K/V heads of layer il (mimo_v2_flash varies them). */
static inline int
hn_transformer_layer_kv_heads (const HnTransformerHParams *hp, int il)
{
  return hp->layer_n_kv_head ? hp->layer_n_kv_head[il] : hp->n_kv_head;
}

/* transformer-weights.c */
gboolean hn_transformer_weights_load (HnTransformer *model, HnSafetensors *st, GError **error);
/* Bytes of the checkpoint's tensors by layer: layer_bytes [n_layer], the
 * embeddings (first stage) and the final norm + head (last stage; the
 * embedding matrix again when tied). */
void hn_transformer_weights_measure (const HnTransformerHParams *hp, HnSafetensors *st, guint64 *layer_bytes,
                                     guint64 *embed_bytes, guint64 *head_bytes);

G_END_DECLS
