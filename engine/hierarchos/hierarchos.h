/* Hierarchos coherent-v9: the project's recurrent hierarchical language model.
 *
 * The architecture contract (every geometry, clamp and objective setting,
 * hashed), fresh initialisation, the pure-C CPU runtime (one token step), the
 * chat state files and the CPU trainer. engine/hierarchos/HIERARCHOS.md documents
 * the equations' sources and every choice the public sources left open. */
#pragma once
#include <glib.h>
#include <gio/gio.h>
#include "base/rng.h"
#include "vk/hn-vk.h"

G_BEGIN_DECLS

#define HN_HIER_FORMAT_VERSION 1
#define HN_HIER_REVISION "coherent-v9"
#define HN_HIER_CONFIG_FILE "config.json"
#define HN_HIER_WEIGHTS_FILE "model.safetensors"

/* ---- The architecture contract (hierarchos-config.c) ------------------- */

/* Every field of the coherent-v9 contract. Fields that only shape the
 * objective are here too: they are part of the learned function's identity. */
typedef struct {
  /* geometry */
  gint64 vocab_size, context_dim, persistent_dim, ltm_slots, ltm_key_dim, ltm_val_dim, ltm_topk;
  gint64 h_hidden, l_hidden, rwkv_head_size, h_rwkv_head_size, l_rwkv_head_size, rwkv_n_layer_hint;
  gint64 h_stride, max_h_steps, max_l_steps, min_h_steps, token_adapter_rank, rosa_max_context;
  gint64 core_recurrence_version, detach_every_n_steps; /* detach: 0 = null (never) */
  gint64 reference_chunk_len, training_chunk_size, memory_gate_warmup_steps;
  gint64 ltm_value_alignment_stride, ltm_value_alignment_min_updates;
  /* semantics (strings) */
  char *architecture_revision, *drift_recurrence_mode, *rwkv_state_readout_mode;
  char *manager_state_commit_mode, *manager_compute_mode, *commitment_cost_mode;
  char *inference_recurrence_mode, *deepembed_mode, *rosa_embedding_mode, *ltm_training_mode;
  char *ltm_time_feature_mode, *ponder_objective;
  /* numbers */
  double h_halt_thresh, act_depth_temperature, l_conv_atol, commitment_threshold, drift_delta_scale;
  double halt_logit_clamp, recurrent_state_clamp, context_state_clamp, drift_state_clamp;
  double drift_norm_clamp, activation_clamp, rwkv_channel_mix_key_clamp;
  double rwkv_channel_mix_deepembed_clamp, inference_logit_clamp;
  double ltm_lr, ltm_momentum, ltm_weight_decay, ltm_forget_rate, ltm_score_grad_scale;
  double memory_gate_warmup_floor, ponder_target_scale, ponder_huber_beta, ponder_loss_weight;
  double commitment_loss_weight, max_commitment_cost_for_backward, max_ponder_cost_for_backward;
  double z_loss_weight, ltm_value_alignment_weight, ltm_value_alignment_ready_threshold;
  double ltm_value_alignment_ema_decay, ltm_value_writer_max_norm;
  /* flags */
  gboolean full_sample_bptt, inference_logit_parity, use_deepembed, use_rosa, memory_token_routers;
  gboolean enforce_rosa_max_context, rosa_zero_no_prediction, isolate_batch_ltm;
  gboolean allow_untrained_hebbian_writer, adaptive_ponder, encourage_thinking;
} HnHierConfig;

/* Fills every field with the coherent-v9 defaults for `context_dim` and
 * `vocab_size` (h_hidden = l_hidden = context_dim, token_adapter_rank =
 * min(64, C), commitment_threshold = 0.1 / C, head size 64 or C when smaller). */
void hn_hier_config_init_defaults (HnHierConfig *cfg, gint64 vocab_size, gint64 context_dim);
void hn_hier_config_clear (HnHierConfig *cfg);
void hn_hier_config_copy (HnHierConfig *dst, const HnHierConfig *src);
/* Recomputes width-dependent defaults after a geometry flag changed
 * (h_hidden, head sizes, rank, commitment threshold). */
void hn_hier_config_derive (HnHierConfig *cfg);

/* Rejects anything this runtime does not implement, naming the field. */
gboolean hn_hier_config_validate (const HnHierConfig *cfg, GError **error);

/* The canonical contract: JSON with sorted keys, "," and ":" separators,
 * ASCII only, Python float repr — byte-identical to the PyTorch project's
 * json.dumps(sort_keys=True, separators=(",", ":")). */
char *hn_hier_config_canonical_json (const HnHierConfig *cfg);
/* sha256 hex of the canonical contract. */
char *hn_hier_config_sha256 (const HnHierConfig *cfg);

/* config.json: {"model_type":"hierarchos","format_version":1,
 * "architecture_revision":..., "architecture_contract":{...},
 * "architecture_contract_sha256":...}. Loading checks the version, every
 * field's type and range, the sha256, and what the runtime implements. */
gboolean hn_hier_config_load (HnHierConfig *cfg, const char *path, GError **error);
gboolean hn_hier_config_save (const HnHierConfig *cfg, const char *path, GError **error);

/* Sets one contract field from its name and a textual value (used by CLI
 * geometry/clamp flags). Unknown names and bad values are errors. */
gboolean hn_hier_config_set (HnHierConfig *cfg, const char *name, const char *value, GError **error);

/* Python-compatible float repr (shortest round-trip, "1e-05", "50.0"). */
char *hn_hier_python_float_repr (double v);

/* ---- Normal samples from the engine PRNG (generate/sampler.h) -------- */

/* N(0, 1) by Box-Muller from two hn_rng_uniform draws. */
double hn_hier_rng_normal (HnRng *rng);

/* ---- The model: parameters in one fp32 block ---------------------------- */

typedef struct {
  char *name;
  gint64 shape[2];
  int ndim;
  gsize offset, numel; /* into HnHierModel.params */
  int init;            /* hierarchos-init.c rule */
  float init_a;        /* rule argument (gain, value, bound) */
  gboolean trainable;  /* FALSE for buffers (fast_vals, warm-up step) */
  gboolean finetune;   /* in the default fine-tune subset */
  gboolean decay;      /* AdamW weight decay applies (2-D weights) */
} HnHierParam;

typedef struct _HnHierModel HnHierModel;
struct _HnHierModel {
  HnHierConfig cfg;
  char *contract_sha256;
  GPtrArray *param_list; /* HnHierParam* in a fixed order */
  GHashTable *by_name;   /* name -> HnHierParam* */
  float *params;         /* all tensors, contiguous */
  gsize n_params;
  /* derived geometry */
  int C, H, L, P, S, K, Vd, topk, V, rank, rw, ra, rg, rwl, ral, rgl;
};

/* Builds the parameter table for a validated config and allocates zeroed
 * storage. */
HnHierModel *hn_hier_model_new (const HnHierConfig *cfg, GError **error);
void hn_hier_model_free (HnHierModel *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnHierModel, hn_hier_model_free)

HnHierParam *hn_hier_model_param (HnHierModel *m, const char *name);
float *hn_hier_model_data (HnHierModel *m, const char *name);

/* Applies the documented init rules with a seed. */
void hn_hier_model_init_weights (HnHierModel *m, guint64 seed);

/* model.safetensors (fp32, metadata format "pt", "architecture_revision",
 * "architecture_contract_sha256") + config.json in `dir`. */
gboolean hn_hier_model_save (HnHierModel *m, const char *dir, GError **error);
/* Loads config.json + model.safetensors from `dir`, checking every tensor's
 * name, dtype, shape and the weights' contract hash against the config. */
HnHierModel *hn_hier_model_load (const char *dir, GError **error);

/* Fresh model folder: config + weights + the tokenizer files copied from
 * `tokenizer_dir` (tokenizer.json, tokenizer_config.json, vocab.json,
 * merges.txt, tokenizer.model, special_tokens_map.json when present). */
gboolean hn_hier_copy_tokenizer_files (const char *tokenizer_dir, const char *out_dir, GError **error);

/* ---- ROSA suffix automaton (hierarchos-rosa.c) ------------------------- */

typedef struct {
  GArray *next_sym;   /* per transition: symbol (guint32) */
  GArray *next_dst;   /* per transition: target (gint32) */
  GArray *next_link;  /* per transition: next transition of the same state, -1 ends */
  GArray *head;       /* per state: first transition, -1 none */
  GArray *link;       /* per state: suffix link (-1 root) */
  GArray *len;        /* per state: length */
  GArray *endpos;     /* per state: last end position (-1 none) */
  GArray *tokens;     /* guint32 token history since the last reset */
  gint32 last;
} HnHierRosa;

void hn_hier_rosa_init (HnHierRosa *r);
void hn_hier_rosa_clear (HnHierRosa *r);
void hn_hier_rosa_reset (HnHierRosa *r);
void hn_hier_rosa_copy (HnHierRosa *dst, const HnHierRosa *src);
/* Consumes `token` (resetting first when max_context > 0 and the history
 * reached it) and returns the predicted next token, or -1 for none. */
gint64 hn_hier_rosa_predict_and_push (HnHierRosa *r, guint32 token, gsize max_context);

/* ---- Runtime state and the CPU step (hierarchos-runtime.c) ------------- */

typedef struct {
  float *tm, *cm, *vfirst, *out; /* [W] */
  float *S;                      /* [W / N, N, N] */
} HnHierCellState;

typedef struct {
  HnHierCellState h, l;
  float *prev_context, *target_context, *final_drift; /* [C] */
  float *fast_vals;                                   /* [S * Vd] */
  HnHierRosa rosa;
  GArray *history; /* guint32 */
  gint64 position;
} HnHierState;

HnHierState *hn_hier_state_new (const HnHierModel *m);
void hn_hier_state_free (HnHierState *s);
void hn_hier_state_reset (const HnHierModel *m, HnHierState *s);
void hn_hier_state_copy (const HnHierModel *m, HnHierState *dst, const HnHierState *src);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnHierState, hn_hier_state_free)

typedef struct _HnHierRunner HnHierRunner;
/* The CPU inference runtime: scratch space for one token step. */
HnHierRunner *hn_hier_runner_new (HnHierModel *m);
void hn_hier_runner_free (HnHierRunner *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnHierRunner, hn_hier_runner_free)
/* One token: advances `state` and writes logits [V] for the next token.
 * A non-finite logit is an HN_ERROR_NUMERIC error. */
gboolean hn_hier_runner_step (HnHierRunner *r, HnHierState *state, guint32 token, float *logits,
                              GError **error);

/* ---- The Vulkan runtime (hierarchos-vk.c) ----------------------------- */

/* The token step as compute shaders: the parameters live on the device, a
 * chunk of up to 64 tokens runs in one submission (halting and refinement
 * loops decided on the GPU), the state is uploaded before and downloaded
 * after each call, so HnHierState stays the one source of truth (state
 * files, /status) for both runtimes. Matches hn_hier_runner_step within
 * float rounding. */
typedef struct _HnHierVkRunner HnHierVkRunner;
/* Fails with HN_ERROR_UNSUPPORTED (naming the setting) for geometries past
 * the shaders' limits: head size 64, 4096 LTM slots, top-k 64, width 4096. */
HnHierVkRunner *hn_hier_vk_runner_new (HnHierModel *m, HnVkContext *ctx, GError **error);
void hn_hier_vk_runner_free (HnHierVkRunner *r);
/* Device bytes a runner for `m` allocates (parameters + work buffer). */
gboolean hn_hier_vk_device_bytes (HnHierModel *m, guint64 *bytes, GError **error);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnHierVkRunner, hn_hier_vk_runner_free)
/* The Vulkan trainer's sizes (the memory estimate, the training job): a
 * trainer's layout without buffers, and its floats per row. */
HnHierVkRunner *hn_hier_vk_trainer_layout (HnHierModel *m, int rows, int chunk, GError **error);
gsize hn_hier_vk_trainer_row_floats (HnHierVkRunner *r);
/* How many of `want` rows one trainer program can hold on ctx's device
 * (0 with an error when not even one fits); row_floats (may be NULL): the
 * work buffer's floats per row. */
int hn_hier_vk_train_rows (HnHierModel *m, HnVkContext *ctx, int chunk, int want, gsize *row_floats, GError **error);
/* Copies m->params to the device again (after the host weights changed). */
gboolean hn_hier_vk_runner_upload_params (HnHierVkRunner *r, GError **error);
/* Runs n tokens from `state` (advanced in place, like n calls of
 * hn_hier_runner_step): logits [n, V] and/or the last token's logits [V]
 * (either may be NULL). On error the state is unchanged. */
gboolean hn_hier_vk_runner_steps (HnHierVkRunner *r, HnHierState *state, const guint32 *tokens, gsize n,
                                  float *logits, float *last, GError **error);

/* ---- Chat state files (hierarchos-state.c) ----------------------------- */

#define HN_HIER_STATE_KIND "hierarchos_runtime_state_interchange"
#define HN_HIER_STATE_SCHEMA 1
/* Versioned JSON with model identity (revision + contract sha256) and the
 * packed [1, W, 4 + N] cell layout; restore checks identity, shapes, token
 * ranges and the automaton's consistency. */
gboolean hn_hier_state_save (const HnHierModel *m, const HnHierState *s, const char *path, GError **error);
gboolean hn_hier_state_load (const HnHierModel *m, HnHierState *s, const char *path, GError **error);

/* ---- Sampling (hierarchos-sample.c) ------------------------------------ */

typedef struct {
  double temperature, top_p, repetition_penalty;
  int top_k;
} HnHierSampling;
void hn_hier_sampling_defaults (HnHierSampling *s);
/* Samples from logits (modified in place); temperature <= 0 means greedy.
 * The repetition penalty applies to every token in `history`. */
guint32 hn_hier_sample (const HnHierSampling *s, float *logits, int V, const GArray *history,
                        HnRng *rng);

/* ---- Training (hierarchos-train.c) ------------------------------------- */

typedef void (*HnHierMetricFunc) (const char *json_line, gpointer user_data);

/* Host bytes of the CPU trainer (it trains on the CPU, not on the GPU). */
typedef struct {
  guint64 params;     /* the fp32 weights (the master copy the optimizer updates) */
  guint64 grads;      /* the step's gradient and one per row of the step (batch x accumulation) */
  guint64 optimizer;  /* AdamW first and second moments */
  guint64 tapes;      /* per worker thread: the tape of one training chunk */
  gint64 trainable;   /* elements the optimizer updates (moments are kept for all) */
  int threads;
} HnHierTrainMemory;

typedef struct {
  const char *out_dir;
  const char *resume_from;        /* a checkpoint folder, or NULL */
  const char *tokenizer_dir;      /* copied into checkpoints, may be NULL */
  const char *metrics_file;       /* JSON lines, may be NULL */
  const char *trainable;          /* comma list of name prefixes, or NULL */
  gboolean finetune;              /* default trainable subset */
  const guint32 *tokens;          /* the tokenized corpus */
  const float *token_weights;     /* weight of predicting each token (0 = masked), or NULL */
  const gint32 *token_labels;     /* the label at each position when it differs from the token, or NULL */
  gsize n_tokens;
  gboolean separate_rows;         /* tokens hold rows of max_length + 1 (one example each) instead of
                                     one stream cut into windows overlapping by one token */
  int batch_size, accumulation_steps, chunk_size, max_length, epochs;
  gint64 max_steps, save_steps, warmup_steps;
  double lr, min_lr, weight_decay, grad_clip, beta1, beta2, eps;
  guint64 seed;
  int threads;
  gboolean no_shuffle;            /* rows in file order every epoch */
  int lr_schedule;                /* HnLrScheduleKind (tensor/optim.h); default cosine */
  gboolean quiet;
  HnHierMetricFunc on_metric;
  gpointer on_metric_data;
  GCancellable *cancellable;
  /* "Stop and save" (polled between steps, may be NULL): when it returns
   * TRUE the trainer writes a checkpoint of the step reached (as for
   * save_steps), stores its folder in *stopped_at (g_free; the resumed
   * checkpoint when no step ran since, NULL when none) and returns TRUE
   * without writing the final model. */
  gboolean (*stop_requested) (gpointer data);
  gpointer stop_data;
  char **stopped_at;
  HnHierTrainMemory *measured;    /* may be NULL: receives what the run allocated */
  HnVkContext *vk_ctx;            /* train on this Vulkan device (NULL: the CPU tape) */
  int vk_rows;                    /* rows per Vulkan program (0: the whole step, as memory allows) */
} HnHierTrainOptions;

void hn_hier_train_options_defaults (HnHierTrainOptions *o);
/* Runs the CPU trainer: returns the final mean loss of the last step in
 * *final_loss when not NULL. Writes OUT/checkpoint-epoch-E-step-S/ every
 * save_steps and the final model into OUT/. */
gboolean hn_hier_train (HnHierModel *m, const HnHierTrainOptions *o, double *final_loss, GError **error);
/* What hn_hier_train will allocate for `o` (batch, accumulation, chunk and
 * thread count; no data needed): the tape size comes from taping one
 * training chunk of `m` forward and backward on a fixed token sequence, so
 * it follows the model's geometry exactly (ponder depth depends on the
 * data, so the real tape may differ a little). */
gboolean hn_hier_train_memory (HnHierModel *m, const HnHierTrainOptions *o, HnHierTrainMemory *out, GError **error);

/* ---- Model folders (hierarchos-folder.c) ---------------------------- */

/* TRUE when `dir` holds a Hierarchos config.json (model_type "hierarchos"). */
gboolean hn_hier_is_model_dir (const char *dir);

/* Fresh model folder from a tokenizer: config (defaults for the tokenizer's
 * vocabulary and `cfg_overrides` NAME=VALUE contract settings applied in
 * order), initialised weights, tokenizer files. Returns the model. */
HnHierModel *hn_hier_init_model_dir (const char *tokenizer_path, const char *out_dir, gint64 context_dim,
                                     const char *const *cfg_overrides, guint64 seed, GError **error);

/* Reads plain text files into one token stream, each file tokenized whole
 * with the tokenizer's special tokens (BOS) as its post-processor says.
 * (JSONL/Parquet go through data/dataset.h in the train job.) */
GArray *hn_hier_load_training_tokens (const char *const *files, const char *tokenizer_path, GError **error);

G_END_DECLS
