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
  HnTensor *router, *router_b, **ewi, **ewo; /* switch_transformers' sparse MLP: [E, C] router, E experts */
  HnTensor *gn_w, *gn_b;   /* the global tokens' norm (longt5 global_input_layer_norm, pegasus_x global_self_attn_layer_norm) */
  float *grel;             /* longt5: global_relative_attention_bias [buckets, H] (host) or NULL */
} S2SLayer;

typedef struct {
  int n_layer, H, F;
  S2SLayer *l;
  HnTensor *emb_ln_w, *emb_ln_b, *final_w, *final_b;
  gboolean emb_ln_first;    /* blenderbot-small's decoder: layernorm_embedding before the positions are added */
} Stack;

/* How the encoder's self-attention sees its keys (seq2seq-long.c builds the masks and biases). */
typedef enum {
  S2S_ENC_FULL,       /* every token (t5, bart...) */
  S2S_ENC_LOCAL,      /* longt5 local: tokens within local_radius, relative buckets */
  S2S_ENC_TGLOBAL,    /* longt5 transient-global: local + one aggregate key per global_block_size tokens */
  S2S_ENC_PEGASUS_X,  /* global tokens + block-local tokens, blocks staggered every other layer */
  S2S_ENC_LED,        /* Longformer: tokens within attention_window / 2 (no global_attention_mask given) */
} S2SEncAttn;

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
  const char *pfx;                                /* BART names: "model." ("led." for led) */
  int n_pos_enc;                                  /* the encoder's positions (led has its own count) */
  int n_experts, expert_capacity;                 /* switch_transformers */
  int sparse_step[2];                             /* switch: every Nth layer (i % N == 1) of encoder, decoder is sparse */
  S2SEncAttn enc_attn;
  int local_radius, global_block;                 /* longt5 */
  int n_global, block_size;                       /* pegasus_x */
  gboolean stagger;                               /* pegasus_x: odd layers shift their blocks by half a block */
  int *led_window;                                /* led: [encoder layers] one-sided attention windows */
  int pad_multiple;                               /* led: the encoder pads to this multiple (max attention_window) */
  HnTensor *embed_global;                         /* pegasus_x [n_global, C] */
};

/* seq2seq-long.c: the configuration of the long-input encoders and switch's experts (FALSE with error
 * set on a bad value). */
gboolean hn_s2s_long_resolve (HnSeq2Seq *m, const HnModelConfig *cfg, GError **error);
/* The rows of the encoder stream for S tokens (pegasus_x's global tokens come first) and the keys of
 * its self-attention (longt5's transient-global aggregates come after the tokens). */
int hn_s2s_enc_rows (const HnSeq2Seq *m, int S);
int hn_s2s_enc_keys (const HnSeq2Seq *m, int S);
/* longt5: the global block of each token [S] (as transformers' _make_global_fixed_block_ids). */
int *hn_s2s_longt5_block_ids (const HnSeq2Seq *m, int S);
/* longt5: the encoder bias [H, S, keys] of every layer (local buckets, -inf outside the radius, then
 * the side buckets of the aggregates). */
float *hn_s2s_longt5_bias (const HnSeq2Seq *m, int S);
/* led / pegasus_x: the additive mask [rows, rows] of encoder layer il (0 or -inf). */
float *hn_s2s_enc_mask (const HnSeq2Seq *m, int il, int S);

G_END_DECLS
