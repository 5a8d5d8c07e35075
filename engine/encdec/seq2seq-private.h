/* Internals shared by the encoder-decoder forward (seq2seq.c) and its training graph (seq2seq-train.c). */
#pragma once
#include "encdec/encdec-private.h"
#include "encdec/seq2seq.h"

G_BEGIN_DECLS

typedef struct {
  HnTensor *n1_w, *n1_b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;         /* self-attention */
  HnTensor *n2_w, *n2_b, *cq, *cbq, *ck, *cbk, *cv, *cbv, *co, *cbo;     /* cross-attention (decoder) */
  HnTensor *n3_w, *n3_b, *wg, *wi, *bi, *wd, *bd;                        /* MLP: wg gate (gated), wi up / fc1 */
  float *rel;                                                            /* T5 bias [buckets, H] (host) or NULL */
} S2SLayer;

typedef struct {
  int n_layer, H, F;
  S2SLayer *l;
  HnTensor *emb_ln_w, *emb_ln_b, *final_w, *final_b;
  gboolean emb_ln_first;    /* blenderbot-small's decoder: layernorm_embedding before the positions are added */
} Stack;

struct _HnSeq2Seq {
  HnVkContext *ctx;
  char *dir;
  const HnArchInfo *arch;
  GPtrArray *owned;
  guint64 weight_bytes;
  int vocab, C, D, n_pos, pos_offset, dec_start, pad, buckets, max_distance;
  gboolean t5, pre_norm, gated, bias_per_layer, tied;
  gboolean fairseq_pos;     /* m2m_100: fixed sinusoidal table (sin | cos, 10000^(-j/(half-1))), ids from pad + 1 */
  HnActivation act;
  float eps, alpha, embed_scale, lm_scale;
  HnTensor *shared, *pos, *lm_head, *logits_bias; /* pos [n_pos, C]: learned or sinusoidal, shared by both stacks */
  HnTensor *dec_pos;                              /* the decoder's own learned table (bart) */
  Stack enc, dec;
};

G_END_DECLS
