/* How much device memory a job will need, before it starts: weights in
 * their stored dtype, gradients and optimizer state (full training or LoRA),
 * activations for batch x sequence length, the KV cache for generation —
 * set against the device's free memory (VK_EXT_memory_budget where the
 * driver has it).
 *
 * The figures mirror what the engine allocates (train-graph.c keeps every
 * activation of every layer; transformer-kv.c sizes a session for the
 * request), computed from config.json and the safetensors headers without
 * loading any weight, so the GUI can recompute them as settings change.
 * tests/engine/test-memory-estimate.c holds them within 20 % of the
 * measured peak.
 *
 * An estimate is advice: front ends warn when it does not fit and let the
 * user go on (a wrong estimate that blocks a run that fits is worse than
 * none). */
#pragma once
#include <json-glib/json-glib.h>

#include "formats/model-config.h"
#include "jobs/job-spec.h"
#include "tensor/hn-tensor.h"
#include "vk/hn-vk.h"

G_BEGIN_DECLS

typedef enum {
  HN_MEMORY_TRAIN,    /* every weight trained (f32), AdamW state */
  HN_MEMORY_LORA,     /* base frozen, adapter matrices trained */
  HN_MEMORY_GENERATE, /* inference with a KV cache */
  HN_MEMORY_HIER_TRAIN, /* Hierarchos training or fine-tuning on the CPU (host memory) */
} HnMemoryWorkload;

typedef struct {
  HnMemoryWorkload workload;
  int batch, seq_len;          /* training: rows x tokens of one micro-batch */
  int lora_r;                  /* LoRA rank */
  const char *lora_targets;    /* --lora-target-modules ("q_proj,v_proj", "all-linear", a regex) */
  int rows, context;           /* generation: sequences decoded together, prompt + new tokens */
  gboolean no_cache;           /* generation without a KV cache */
  gboolean checkpointing;      /* training: --gradient-checkpointing (one set of layer activations) */
  HnDType quant;               /* QLoRA: the layers' Linear weights packed (tensor/quant.h); 0 (F32) = as stored */
  gboolean fp16;               /* full training: --precision fp16 (f16 copies of the weights and the matmul inputs) */
} HnMemoryRequest;

typedef struct {
  HnMemoryWorkload workload;
  char *weights_dtype;         /* "f32", "bf16", "f16", "mixed", or the QLoRA packing ("nf4", ...) */
  gint64 n_params, n_trainable;
  guint64 weights, gradients, optimizer, activations, kv_cache;
  guint64 total;               /* the sum */
  guint64 f16_weight_ring;     /* part of activations: the ring of f16 forms of quantized weights that
                                  tensor-core matmuls read (0 once set_device saw a device without them) */
  gboolean host;               /* host memory (the Hierarchos CPU trainer), not device memory */
  gboolean recurrent_state;    /* a state-space decoder: kv_cache holds its conv + SSM states (no KV cache) */
  /* the device (when one was given) */
  char *device_name;
  gboolean device_known;
  gboolean free_from_budget;   /* free came from VK_EXT_memory_budget */
  guint64 device_total, device_free;
} HnMemoryEstimate;

void hn_memory_estimate_clear (HnMemoryEstimate *e);

/* The estimate for the model folder `model_dir` (config.json + safetensors
 * headers; no weights are read). */
gboolean hn_memory_estimate_model (const char *model_dir, const HnMemoryRequest *req, HnMemoryEstimate *out,
                                   GError **error);

/* The same from a parsed config and the weights' figures alone (a Hub model
 * before download: its file sizes and parameter count from the Hub's
 * details, its config.json fetched on its own). Weights count at their
 * stored size, vectors included, so this is a slight overestimate. */
gboolean hn_memory_estimate_config (HnModelConfig *cfg, gint64 n_params, guint64 weights_bytes, const char *dtype,
                                    const HnMemoryRequest *req, HnMemoryEstimate *out, GError **error);

/* An existing adapter (or LoRA checkpoint) folder brings its own rank and
 * target modules: sets them in `req` (the targets string goes to
 * *owned_targets, which the caller frees). */
gboolean hn_memory_request_use_adapter (HnMemoryRequest *req, const char *adapter_dir, char **owned_targets,
                                        GError **error);

/* Sets the device fields from a context's memory budget. */
void hn_memory_estimate_set_device (HnMemoryEstimate *e, HnVkContext *ctx);

/* The estimate of a job (transformer-train, transformer-finetune,
 * transformer-generate; hierarchos-train and hierarchos-finetune, which
 * train on the CPU and so need host memory; generate and chat with a
 * Hierarchos folder on the Vulkan runtime) from its spec; needs a local
 * --model-path (a Hub model is not downloaded for an estimate) or, for a
 * fresh Hierarchos model, a local --tokenizer-path. `ctx` may be NULL (no
 * device figures). */
gboolean hn_memory_estimate_for_spec (HnJobSpec *spec, HnVkContext *ctx, HnMemoryEstimate *out, GError **error);

/* TRUE when the device is known and total > free. */
gboolean hn_memory_estimate_exceeds (const HnMemoryEstimate *e);

/* {"workload", "weights_dtype", "params", "trainable_params", "weights_bytes",
 *  "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
 *  "total_bytes", "memory" ("device", or "host" for the CPU trainer), "device": {"name", "total_bytes", "free_bytes", "from_budget"},
 *  "fits"} — "device" and "fits" only when the device is known. */
JsonNode *hn_memory_estimate_to_json (const HnMemoryEstimate *e);
/* A few lines for a terminal or a tooltip. */
char *hn_memory_estimate_to_text (const HnMemoryEstimate *e);
/* One line: "About 1.2 GiB of device memory (weights 0.5 GiB, ...); 7.1 GiB free on X". */
char *hn_memory_estimate_summary (const HnMemoryEstimate *e);
/* What to change when it does not fit (batch size, sequence length, LoRA,
 * accumulation), for the workload; one sentence. */
const char *hn_memory_estimate_advice (HnMemoryWorkload workload);

/* Turns an HN_ERROR_OUT_OF_MEMORY (which already names the allocation,
 * needed and free) into one that also says what this job needs in all (when
 * `e` is not NULL) and what to change; other errors are left alone. `what`
 * describes the settings ("batch 4 x 256 tokens"). */
void hn_memory_estimate_explain_oom (GError **error, HnMemoryWorkload workload, const HnMemoryEstimate *e,
                                     const char *what);

G_END_DECLS
