/* Checkpoints: OUT/checkpoint-step-N/ is a normal Hugging Face package
 * (config.json, model.safetensors under the checkpoint's own tensor names and
 * layouts, generation config and tokenizer files copied), or for LoRA a PEFT
 * adapter folder, plus sidecars that make resuming exact:
 *
 *   optimizer.safetensors   F32 "<param>.exp_avg" / "<param>.exp_avg_sq" per trained tensor
 *   trainer_state.json      global_step, epoch, data cursor, seed, schedule, optimizer and
 *                           batch settings, the base's quantization (QLoRA), the metrics so far
 *
 * A checkpoint is written into a hidden temporary folder next to it and
 * renamed into place, so a job killed mid-write leaves the previous
 * checkpoint intact and no half-written one under the final name
 * (base/hn-folder.h). */
#pragma once
#include "data/dataset.h"
#include "transformer/transformer.h"
#include "train/train-graph.h"

G_BEGIN_DECLS

/* Writes the model's current device weights into dir/model.safetensors with
 * the tensor names, layouts and dtypes of the checkpoint it was loaded from
 * (tensors the model does not hold are copied as they were), plus the side
 * files (config.json, tokenizer...) of that folder. */
gboolean hn_checkpoint_write_model (HnTransformer *model, const char *dir, GError **error);
/* The same from src_dir's checkpoint and the device weights that came from it (orig). */
gboolean hn_checkpoint_write_weights (const char *src_dir, const HnWeightOrigin *orig, guint n_orig, const char *dir,
                                      GError **error);
/* The same for weights named after their checkpoint tensor (the encoder and encoder-decoder
 * loaders), tensors of one name being consecutive row blocks of it in order; a weight whose
 * name is no checkpoint tensor (rope tables) is not written. */
gboolean hn_checkpoint_write_named (const char *src_dir, HnTensor *const *weights, guint n, const char *dir,
                                    GError **error);

gboolean hn_checkpoint_write_optimizer (HnTrainGraph *g, const char *dir, GError **error);
/* Every trained tensor's state must be present with its shape. */
gboolean hn_checkpoint_read_optimizer (HnTrainGraph *g, const char *dir, GError **error);

typedef struct {
  gint64 global_step;        /* optimizer updates done */
  HnDatasetCursor cursor;    /* where the next batch starts */
  guint64 seed;
  gint64 total_steps;
  gint64 warmup_steps;
  char *lr_scheduler;
  char *optimizer;
  double lr, weight_decay, beta1, beta2, eps, max_grad_norm;
  gint64 batch_size, seq_len, grad_accum;
  gboolean lora;
  char *quantization;        /* the frozen base's: "none", "nf4", "nf4-dq", "int8" (hn_quant_dtype_name) */
  double elapsed_s;          /* training time before this checkpoint */
  double tokens_seen;
  double best_eval_loss;     /* lowest eval loss so far, NAN before the first evaluation */
  gint64 evals_since_best;   /* evaluations since it (early stopping's patience count) */
  gint64 optimizer_steps;    /* updates that ran (global_step less the fp16 steps skipped on overflow) */
  char *precision;           /* "fp32" or "fp16" (NULL: fp32, a checkpoint from before --precision fp16) */
  double loss_scale;         /* fp16: the loss scaler's scale and growth tracker (0 otherwise) */
  gint64 loss_scale_growth_tracker;
} HnTrainerState;

void hn_trainer_state_clear (HnTrainerState *st);
gboolean hn_trainer_state_write (const HnTrainerState *st, const char *dir, GError **error);
gboolean hn_trainer_state_read (HnTrainerState *st, const char *dir, GError **error);

G_END_DECLS
