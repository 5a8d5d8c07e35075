/* Internals shared by the encoder's forward (encoder.c) and its training graph (encoder-train.c). */
#pragma once
#include "encdec/encdec-private.h"
#include "encdec/encoder.h"

G_BEGIN_DECLS

typedef struct _HnMobileBert HnMobileBert;
typedef struct _HnDeberta HnDeberta;

typedef struct {
  HnTensor *ln1_w, *ln1_b;   /* post-norm: after attention; pre-norm: before it (NULL: identity) */
  HnTensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
  HnTensor *ln2_w, *ln2_b;   /* post-norm: after the MLP; pre-norm: before it */
  HnTensor *wi, *bi, *wd, *bd; /* wi [F, C] (gated: [2F, C], act on the first half) */
  HnTensor *ad1_w, *ad1_b, *ad2_w, *ad2_b, *adln_w, *adln_b; /* xmod: the language adapter [C/r, C], [C, C/r] */
} EncLayer;

struct _HnEncoder {
  HnVkContext *ctx;
  char *dir;
  const HnArchInfo *arch;
  GPtrArray *owned;
  guint64 weight_bytes;
  int vocab, E, C, H, D, F, n_layer, type_vocab, n_pos;
  int pad_positions;        /* roberta: padding_idx, positions count from padding_idx + 1; -1 otherwise */
  float eps, head_eps;
  HnActivation act, head_act;
  gboolean pre_norm, gated;
  /* embeddings [vocab, E], [n_pos, E], [type_vocab, E], their norm, the E -> C projection */
  HnTensor *word, *pos, *type, *emb_ln_w, *emb_ln_b, *proj_w, *proj_b;
  EncLayer *layers;         /* [n_unique] */
  int n_unique;
  int *order;               /* [n_exec]: which layer runs at each step (albert shares them) */
  int n_exec;
  HnTensor *final_w, *final_b;
  HnTensor *head_w, *head_b, *head_ln_w, *head_ln_b, *dec_w, *dec_b; /* dec_w [vocab, E or C] */
  /* modernbert */
  HnTensor *inv_freq_global, *inv_freq_local;
  float rope_scale_global, rope_scale_local;
  guint8 *layer_local;      /* [n_exec] */
  HnRopeStyle rope_style;   /* modernbert: neox halves; roformer: interleaved pairs */
  gboolean rope_value;      /* roformer rotary_value: v rotates too */
  double rope_theta;        /* esm */
  int head_width;           /* rembert output_embedding_size */
  float *rel;               /* mpnet: relative_attention_bias [buckets, H] (host), shared by every layer */
  gboolean rms;             /* eurobert: RMSNorm (weight only) instead of LayerNorm */
  int buckets;
  int max_full_tokens;      /* big_bird block_sparse: the longest input it runs as full attention (0 = any) */
  int local_window;         /* keys within |i - j| <= local_window */
  HnMobileBert *mobile;     /* mobilebert: its bottleneck layers (encoder-mobilebert.c); NULL otherwise */
  HnTensor *dft_cos, *dft_sin; /* fnet: the DFT over hidden units [C, C] */
  HnTensor *word_in;        /* roc_bert concat_input: the mapped input table [vocab, C] (the decoder keeps word) */
  gboolean derived;         /* a table here is computed from the checkpoint's (not one to train and save) */
  char *xmod_lang;          /* xmod: the default language, whose adapters run */
  gboolean xmod_adapter_ln, xmod_reuse_ln, xmod_ln_before;
  HnDeberta *deberta;       /* deberta, deberta-v2: relative attention (encoder-deberta.c); NULL otherwise */
};

/* The position ids of one sequence (roberta's count non-pad tokens from padding_idx + 1). */
void hn_encoder_positions (HnEncoder *m, const int32_t *ids, int n, int32_t *pos);
/* Ids inside the vocabulary, token types inside type_vocab_size, positions inside the table. */
gboolean hn_encoder_check_ids (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, GError **error);

/* mobilebert (encoder-mobilebert.c): its weights into m->mobile, its whole forward, its free */
gboolean hn_mobilebert_load (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error);
gboolean hn_mobilebert_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits,
                               GError **error);
void hn_mobilebert_free (HnMobileBert *mb);
/* deberta, deberta-v2 (encoder-deberta.c): the same three */
gboolean hn_deberta_load (HnEncoder *m, HnWLoader *L, const HnModelConfig *cfg, GError **error);
gboolean hn_deberta_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits,
                            GError **error);
void hn_deberta_free (HnDeberta *d);

/* config.json's boolean / integer `key`, `dflt` when absent (encoder.c). */
gboolean hn_encoder_cfg_bool (const HnModelConfig *cfg, const char *key, gboolean dflt, gboolean *out, GError **error);
gboolean hn_encoder_cfg_int (const HnModelConfig *cfg, const char *key, gint64 dflt, gint64 *out, GError **error);

G_END_DECLS
