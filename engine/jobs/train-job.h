/* The training loop behind the "transformer-train" (all weights) and
 * "transformer-finetune" (LoRA) job kinds: data, schedule, accumulation,
 * clipping, metrics per optimizer step, checkpoints and exact resume.
 *
 * Metrics: one METRIC event per optimizer step; `loss` of step k is the loss
 * of the forward pass(es) before update k (mean over the step's target
 * tokens, as transformers computes it with gradient accumulation), `lr` the
 * learning rate update k used, `grad_norm` the global norm before clipping.
 * With --metrics-file F the same figures go to F as JSON lines.
 *
 * Output: OUT/checkpoint-step-N/ every --save-steps N steps and the final
 * model (or adapter) in OUT/ (see checkpoint.h for the layout).
 * --resume-from-checkpoint DIR continues bit for bit: N steps straight give
 * the same weights as k steps, a resume, and N - k steps. */
#pragma once
#include "jobs/job.h"
#include "jobs/memory-estimate.h"
#include "tensor/hn-tensor.h"
#include "tensor/optim.h"
#include "train/lora.h"

G_BEGIN_DECLS

/* The options of both kinds, read once from the spec. The paths the Hub may
 * provide (model, tokenizer, data) are set by the run function, which
 * resolves --hf-* first; hn_train_job_options_read leaves them NULL. */
typedef struct {
  gboolean lora;     /* transformer-finetune */
  char *model_dir, *tok_path, *data_path;
  char *out_dir, *resume, *metrics_file, *adapter_path, *eval_file;
  char *lora_targets; /* --lora-target-modules as given (lcfg holds them parsed) */
  char *precision;
  gboolean fp16;     /* --precision fp16 (or bf16, which runs as fp16): autocast + dynamic loss scaling */
  gint64 epochs, max_steps, batch, seq_len, accum, save_steps;
  GArray *devices;   /* int: one replica per entry */
  double eval_split, stop_at_loss, mlm_probability;
  gint64 eval_steps, patience;
  guint64 seed;
  gboolean shuffle, no_dropout, checkpointing;
  gboolean tok_from_model; /* tok_path is the model folder (no --tokenizer-path given) */
  HnDType quant;     /* QLoRA: the base's Linear weights packed into this (HN_DTYPE_F32 = as stored) */
  gboolean overwrite;      /* --overwrite-output-dir */
  HnOptimConfig oc;
  HnLrSchedule sched;
  HnLoraConfig lcfg;
} HnTrainJobOptions;

/* Reads every option of a transformer-train or transformer-finetune spec
 * (no file is opened, nothing is downloaded). Fails only on a spec value
 * that cannot be parsed (device list, optimizer, schedule, LoRA targets). */
gboolean hn_train_job_options_read (HnJobSpec *spec, HnTrainJobOptions *o, GError **error);
/* The combinations the trainers refuse (precision, --eval-file with
 * --eval-split, patience without evaluation, LoRA dropout, no --out-dir). */
gboolean hn_train_job_options_check (const HnTrainJobOptions *o, GError **error);
void hn_train_job_options_clear (HnTrainJobOptions *o);
/* --quantization / --load-in-4bit / --load-in-8bit / --double-quant of a
 * transformer-finetune spec as a weight dtype (HN_DTYPE_F32 = none; q4_k is
 * HN_DTYPE_GGML_Q4_K; contradictory spellings refused by name). */
gboolean hn_train_quant_read (HnJobSpec *spec, HnDType *quant, GError **error);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (HnTrainJobOptions, hn_train_job_options_clear)
/* What the memory estimate needs to know about a run with these options:
 * each of the o->devices replicas holds the whole model and its share of
 * the batch; an existing adapter (--resume-from-checkpoint, else
 * --lora-adapter-path) brings its own rank and targets (*owned_targets,
 * which the caller frees). */
gboolean hn_train_job_memory_request (const HnTrainJobOptions *o, HnMemoryRequest *req, char **owned_targets,
                                      GError **error);

/* Run function of both kinds (registered in job-builtin.c). */
gboolean hn_train_job_run (HnJob *job, GError **error);

/* merge-lora: a base model plus a PEFT adapter into a merged HF model folder. */
/* out_dir is replaced as a whole; it may not be the model's or the
 * adapter's folder (or hold one), nor an existing folder or link unless
 * `overwrite` (--overwrite-output-dir); `notes` (may be NULL) gets what that
 * replaces, for the log. */
gboolean hn_merge_lora_run (const char *model_dir, const char *adapter_dir, const char *out_dir, gboolean overwrite,
                            GPtrArray *notes, GError **error);

G_END_DECLS
