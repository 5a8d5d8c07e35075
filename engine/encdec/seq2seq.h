/* Hugging Face encoder-decoders on Vulkan: t5, mt5, umt5 (relative position
 * buckets, RMS norm, gated-gelu), switch_transformers (top-1 experts), longt5
 * (local / transient-global encoder), bart, mbart, marian, pegasus and their
 * kin (learned or sinusoidal positions, post- or pre-norm LayerNorm,
 * final_logits_bias), pegasus_x (global tokens, block-local encoder) and led
 * (sliding-window encoder).
 *
 *   g_autoptr (HnSeq2Seq) m = hn_seq2seq_load (ctx, "model-dir", &error);
 *   hn_seq2seq_logits (m, src, n_src, dec_ids, n_dec, logits, &error);   // [n_dec, vocab]
 *   r = hn_seq2seq_generate (m, &options, src, n_src, ...);               // greedy, sampling or beams
 *
 * Generation runs the encoder once, computes every layer's cross-attention
 * keys/values once, and decodes with a self-attention KV cache per row. */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

#include "generate/generate.h"
#include "transformer/registry.h"
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

typedef struct _HnSeq2Seq HnSeq2Seq;

HnSeq2Seq *hn_seq2seq_load (HnVkContext *ctx, const char *model_dir, GError **error);
void hn_seq2seq_free (HnSeq2Seq *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnSeq2Seq, hn_seq2seq_free)

const HnArchInfo *hn_seq2seq_get_arch (HnSeq2Seq *m);
int hn_seq2seq_get_vocab (HnSeq2Seq *m);
/* config.json's decoder_start_token_id: the first decoder token of every generation. */
int hn_seq2seq_get_decoder_start (HnSeq2Seq *m);
guint64 hn_seq2seq_get_weight_bytes (HnSeq2Seq *m);

/* Logits [n_dec, vocab] of the decoder given its input ids (teacher forcing) and the encoder ids
 * (attention masks all ones). */
gboolean hn_seq2seq_logits (HnSeq2Seq *m, const int32_t *src, int n_src, const int32_t *dec, int n_dec, float *logits,
                            GError **error);

/* Generates from the encoder input `src`; the decoder starts from decoder_start_token_id, which the
 * returned sequences do not include. */
HnGenerateResult *hn_seq2seq_generate (HnSeq2Seq *m, const HnGenerateOptions *opt, const int32_t *src, int n_src,
                                       HnDecodeFunc decode, gpointer decode_data, HnTokenFunc on_token,
                                       gpointer token_data, GCancellable *cancellable, GError **error);

/* ---- training (t5, mt5) */

typedef struct _HnSeq2SeqTrainer HnSeq2SeqTrainer;

/* torch.optim.AdamW settings of one step (step counts from 1). */
typedef struct {
  gint64 step;
  double lr, beta1, beta2, eps, weight_decay;
  double max_grad_norm; /* > 0: clip the gradients to this total norm first (torch's clip_grad_norm_) */
} HnSeq2SeqTrainStep;

/* A trainer for B rows of S encoder and T decoder tokens; every weight (f32) trains, the relative
 * position tables included. Other families (switch's experts and the long-input encoders among them)
 * fail with HN_ERROR_UNSUPPORTED naming the model_type. */
HnSeq2SeqTrainer *hn_seq2seq_trainer_new (HnSeq2Seq *m, int B, int S, int T, GError **error);
void hn_seq2seq_trainer_free (HnSeq2SeqTrainer *tr);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnSeq2SeqTrainer, hn_seq2seq_trainer_free)
/* One forward, backward and AdamW update: src [B*S] encoder ids, labels [B*T] (-100: ignored; the
 * decoder input is them shifted right after decoder_start_token_id). *loss is the loss before it. */
gboolean hn_seq2seq_trainer_step (HnSeq2SeqTrainer *tr, const int32_t *src, const int32_t *labels,
                                  const HnSeq2SeqTrainStep *opt, double *loss, GError **error);
/* The total gradient norm of the last step, before clipping. */
double hn_seq2seq_trainer_get_grad_norm (HnSeq2SeqTrainer *tr);
/* The trained relative_attention_bias table [buckets, heads] of the encoder's or decoder's first layer. */
HnTensor *hn_seq2seq_trainer_get_bias_table (HnSeq2SeqTrainer *tr, gboolean decoder);
/* Every device weight of the model in load order (the bias tables live on the host: see above). */
HnTensor *const *hn_seq2seq_get_weights (HnSeq2Seq *m, guint *n);

G_END_DECLS
