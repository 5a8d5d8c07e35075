/* The Hierarchos job kinds (hierarchos-job.c, hierarchos-chat-job.c) and the
 * runtime a job runs on. The model itself is hierarchos/hierarchos.h. */
#pragma once
#include "hierarchos/hierarchos.h"
#include "jobs/job.h"

G_BEGIN_DECLS

/* --runtime: "cpu", "vulkan" (the chosen device: --device-index, else the
 * default one; none is an error that names --runtime cpu) or "auto" (the
 * default): Vulkan on a GPU, the CPU when the device is CPU-type (a software
 * rasterizer such as lavapipe: the CPU runtime is many times faster there)
 * or when there is no Vulkan device. Returns the device's context, NULL for
 * the CPU, and in *why the choice and its reason for the job log. */
gboolean hn_hier_runtime_choose (HnJobSpec *spec, HnVkContext **ctx, char **why, GError **error);

/* The runtime a job runs on: the Vulkan runner or the CPU runner, as
 * hn_hier_runtime_choose picks. Never silent: the job log says which runs. */
typedef struct {
  HnHierModel *m;
  HnHierRunner *cpu;
  HnHierVkRunner *vk;
  char *description; /* "Vulkan (NAME)" or "CPU" */
} HnHierExec;
gboolean hn_hier_exec_init (HnHierExec *x, HnJob *job, HnHierModel *m, GError **error);
void hn_hier_exec_clear (HnHierExec *x);
/* Feeds n tokens; the last token's logits [V] go to `last` (may be NULL). */
gboolean hn_hier_exec_feed (HnHierExec *x, HnHierState *s, const guint32 *tokens, gsize n, float *last,
                            GError **error);

/* The options of hierarchos-train and hierarchos-finetune, read once from
 * the spec (strings belong to the spec). `train` is the trainer's options
 * as far as the spec decides them: no data, no callbacks, no device yet. */
typedef struct {
  const char *kind;
  gboolean finetune;
  HnHierTrainOptions train;
  const char *optimizer, *precision;
  gboolean cpu;          /* --runtime cpu: the CPU tape instead of the Vulkan trainer */
  int device_index;      /* -1: the default device */
  gboolean device_index_set;
  /* a fresh model (hierarchos-train without a model): geometry, 0 = the contract's default */
  gint64 context_dim, h_hidden, l_hidden, rwkv_head_size, ltm_slots;
} HnHierJobOptions;

/* Reads every option of a hierarchos-train or hierarchos-finetune spec (no
 * file is opened). Fails only on a value that cannot be parsed. */
gboolean hn_hier_job_options_read (HnJobSpec *spec, HnHierJobOptions *o, GError **error);
/* What the trainers refuse before any work: no --out-dir, an optimizer
 * other than AdamW, a precision other than f32. */
gboolean hn_hier_job_options_check (const HnHierJobOptions *o, GError **error);

/* Run functions of the job kinds "hierarchos-train", "hierarchos-finetune"
 * and (for Hierarchos model folders) "chat". */
gboolean hn_hier_train_job_run (HnJob *job, GError **error);
/* The fresh model a training job without --model-path starts from: the
 * tokenizer at `tok_path` and the options' geometry, chunk size and seed. */
HnHierModel *hn_hier_fresh_model (const HnHierJobOptions *o, const char *tok_path, GError **error);
gboolean hn_hier_finetune_job_run (HnJob *job, GError **error);
gboolean hn_hier_chat_job_run (HnJob *job, GError **error);
/* `generate` with a Hierarchos model folder: continues each prompt from a
 * fresh state (transformer-generate hands Hierarchos folders over). */
gboolean hn_hier_generate_job_run (HnJob *job, GError **error);

G_END_DECLS
