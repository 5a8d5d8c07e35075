/* The Hierarchos job kinds (hierarchos-job.c, hierarchos-chat-job.c) and the
 * runtime a job runs on. The model itself is hierarchos/hierarchos.h. */
#pragma once
#include "hierarchos/hierarchos.h"
#include "jobs/job.h"

G_BEGIN_DECLS

/* Where a Hierarchos job runs: --runtime and --device-index as given. */
typedef struct {
  const char *runtime;         /* "auto" (the default), "vulkan" or "cpu" */
  gboolean runtime_given;
  int device_index;            /* -1: the default device */
  gboolean device_index_given;
} HnHierRuntimeOptions;
void hn_hier_runtime_options_read (HnJobSpec *spec, HnHierRuntimeOptions *o);

/* --runtime: "cpu", "vulkan" (the chosen device: --device-index, else the
 * default one; none is an error that names --runtime cpu) or "auto" (the
 * default): Vulkan on a GPU, the CPU when the device is CPU-type (a software
 * rasterizer such as lavapipe: the CPU runtime is many times faster there)
 * or when there is no Vulkan device. Returns the device's context, NULL for
 * the CPU, and in *why the choice and its reason for the job log. */
gboolean hn_hier_runtime_choose (const HnHierRuntimeOptions *o, HnVkContext **ctx, char **why, GError **error);

/* The runtime a job runs on: the Vulkan runner or the CPU runner, as
 * hn_hier_runtime_choose picks. Never silent: the job log says which runs. */
typedef struct {
  HnHierModel *m;
  HnHierRunner *cpu;
  HnHierVkRunner *vk;
  char *description; /* "Vulkan (NAME)" or "CPU" */
  char *model_dir;   /* named in numeric errors */
} HnHierExec;
gboolean hn_hier_exec_init (HnHierExec *x, HnJob *job, HnHierModel *m, const char *model_dir,
                            const HnHierRuntimeOptions *rt, GError **error);
void hn_hier_exec_clear (HnHierExec *x);
/* Feeds n tokens; the last token's logits [V] go to `last` (may be NULL). A
 * non-finite logit fails (HN_ERROR_NUMERIC) naming the model folder, and
 * saying that its weights are finite (they are checked at load). */
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
  HnHierRuntimeOptions runtime;
  gboolean cpu;          /* --runtime cpu: the CPU tape instead of the Vulkan trainer */
  gboolean model_given;  /* --model-path or --hf-model: not a fresh model */
  gboolean overwrite_output_dir;
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
/* The options of chat and transformer-generate on a Hierarchos model folder,
 * read once from the spec (strings belong to the spec). */
typedef struct {
  const char *model_dir;       /* --model-path; chat resolves --hf-model when it is NULL */
  const char *tokenizer_path;  /* --tokenizer-path, or NULL: the model's (chat also --hf-tokenizer) */
  HnHierRuntimeOptions runtime;
  HnHierSampling sampling;     /* temperature 0 without --do-sample (greedy) */
  gint64 max_new_tokens;
  guint64 seed;
  const char *const *stop;     /* never NULL */
  /* chat */
  gboolean carry_state, raw_prompt;
  const char *state_file, *resume_state_file;
  /* generate */
  const char *const *prompts, *const *input_ids; /* never NULL */
  const char *prompt_file;
  /* what only the Transformer kinds implement: the first such option given (its flag) or NULL;
   * chat: --cache-implementation paged, --lora-adapter-path; generate: beams or several sequences */
  const char *unsupported;
  gboolean paged_cache, lora_adapter, beams;
} HnHierRunOptions;

/* Reads every option of a chat or transformer-generate spec that a Hierarchos
 * run uses (no file is opened). */
void hn_hier_run_options_read (HnJobSpec *spec, HnHierRunOptions *o);

/* `generate` with a Hierarchos model folder: continues each prompt from a
 * fresh state (transformer-generate hands Hierarchos folders over). */
gboolean hn_hier_generate_job_run (HnJob *job, GError **error);

G_END_DECLS
