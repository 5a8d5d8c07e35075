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

G_BEGIN_DECLS

/* Run function of both kinds (registered in job-builtin.c). */
gboolean hn_train_job_run (HnJob *job, GError **error);

/* merge-lora: a base model plus a PEFT adapter into a merged HF model folder. */
gboolean hn_merge_lora_run (const char *model_dir, const char *adapter_dir, const char *out_dir, GError **error);

G_END_DECLS
