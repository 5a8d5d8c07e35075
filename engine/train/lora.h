/* LoRA adapters in PEFT's file format, so peft.PeftModel.from_pretrained
 * loads what we write and we load what peft writes:
 *
 *   DIR/adapter_config.json        peft_type "LORA", r, lora_alpha, target_modules,
 *                                  lora_dropout, use_rslora, fan_in_fan_out, bias, task_type
 *   DIR/adapter_model.safetensors  base_model.model.<module>.lora_A.weight  [r, in]
 *                                  base_model.model.<module>.lora_B.weight  [out, r]
 *
 * <module> is the Hugging Face module path of the adapted Linear (or GPT-2
 * Conv1D), e.g. "model.layers.0.self_attn.q_proj". The adapted layer
 * computes y = base(x) + scaling · (x · Aᵀ) · Bᵀ with scaling = alpha / r
 * (rsLoRA: alpha / sqrt(r)). A module's `in`/`out` are those of the layer as
 * a Linear (for a Conv1D weight stored [in, out], fan_in_fan_out is true).
 *
 * Matrices are host f32 arrays here; the trainer uploads them and writes them
 * back. merge-lora works on host tensors too (no device needed). */
#pragma once
#include <glib.h>

#include "transformer/transformer.h"

G_BEGIN_DECLS

typedef struct {
  int r;
  double alpha;
  double dropout;
  gboolean use_rslora;
  gboolean fan_in_fan_out;
  char **target_modules;      /* names ("q_proj") matched against the module path's last parts */
  char *target_regex;         /* PEFT's string form: a regex that must match the whole path; or NULL */
  gboolean all_linear;        /* "all-linear": every Linear but the output head */
  char *base_model_name_or_path;
  char *task_type;            /* "CAUSAL_LM" */
} HnLoraConfig;

void hn_lora_config_init (HnLoraConfig *cfg);
void hn_lora_config_clear (HnLoraConfig *cfg);
/* scaling = alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT's rule). */
double hn_lora_config_scaling (const HnLoraConfig *cfg);
/* Parses --lora-target-modules: "q_proj,v_proj", "all-linear", or a regex
 * (anything with regex characters is taken as PEFT's string form). */
gboolean hn_lora_config_set_targets (HnLoraConfig *cfg, const char *spec, GError **error);
/* TRUE when PEFT would adapt the module at `module_path` (a Linear). */
gboolean hn_lora_config_matches (const HnLoraConfig *cfg, const char *module_path);

/* Reads DIR/adapter_config.json; fails closed (HN_ERROR_UNSUPPORTED) on PEFT
 * features we do not implement (DoRA, rank/alpha patterns, lora bias,
 * modules_to_save, layer subsets...), naming the field. */
gboolean hn_lora_config_load (HnLoraConfig *cfg, const char *dir, GError **error);

typedef struct {
  char *module;   /* HF module path */
  int in, out, r;
  float *a;       /* [r, in] */
  float *b;       /* [out, r] */
} HnLoraModule;

typedef struct {
  HnLoraConfig config;
  GPtrArray *modules;  /* HnLoraModule*, sorted by module path */
} HnLoraAdapter;

HnLoraAdapter *hn_lora_adapter_new (const HnLoraConfig *config);
void hn_lora_adapter_free (HnLoraAdapter *ad);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnLoraAdapter, hn_lora_adapter_free)

/* Adds a module initialised as PEFT does by default: A ~ kaiming_uniform(a =
 * sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)) from a seeded generator, B = 0 (so
 * the adapter starts as the identity). */
HnLoraModule *hn_lora_adapter_add (HnLoraAdapter *ad, const char *module, int in, int out, guint64 seed);
HnLoraModule *hn_lora_adapter_lookup (HnLoraAdapter *ad, const char *module);

/* Loads DIR (adapter_config.json + adapter_model.safetensors; tensors of any
 * float dtype, names with or without the ".default" adapter name). Every
 * tensor must pair up and agree with r. */
HnLoraAdapter *hn_lora_adapter_load (const char *dir, GError **error);
/* Writes DIR atomically (created): both files, F32 tensors, PEFT's names. */
gboolean hn_lora_adapter_save (HnLoraAdapter *ad, const char *dir, GError **error);

/* The PEFT tensor names of a module. */
char *hn_lora_tensor_name (const char *module, gboolean is_b);

/* Adds scaling · B·A to the weight of every adapted module of the model in
 * `model_dir` (W [out, in], or its transpose for a Conv1D stored [in, out]),
 * and writes the merged model to `out_dir` as a Hugging Face folder
 * (model.safetensors in the model's dtype, config.json, generation config and
 * tokenizer files copied). A module whose weight is missing is an error. */
gboolean hn_lora_merge_model (const char *model_dir, const char *adapter_dir, const char *out_dir, GError **error);

/* Copies config.json, generation_config.json and the tokenizer files that
 * exist in `src_dir` into `dst_dir` (atomic writes); shared with the trainer's
 * checkpoints. */
gboolean hn_model_copy_side_files (const char *src_dir, const char *dst_dir, GError **error);

/* ---- adapters on a loaded Transformer ---- */

/* Canonical projections of a layer (HnLayerWeights). */
typedef enum {
  HN_LORA_PROJ_Q, HN_LORA_PROJ_K, HN_LORA_PROJ_V, HN_LORA_PROJ_O,
  HN_LORA_PROJ_GATE, HN_LORA_PROJ_UP, HN_LORA_PROJ_DOWN, HN_LORA_N_PROJ
} HnLoraProj;

/* A checkpoint module (suffix after "<prefix><layer>.") and the projections
 * it covers: one, or q/k/v of a fused qkv module (B's rows split in order). */
typedef struct {
  const char *module;
  int n;
  HnLoraProj proj[3];
} HnLoraModuleMap;

/* The module names of a family: prefix ("model.layers.") and table. Fails
 * closed (HN_ERROR_UNSUPPORTED) for a family whose names are not mapped, or
 * whose fused projections are interleaved (gpt_neox, bloom, falcon). */
gboolean hn_lora_module_map (const HnTransformerHParams *hp, const char **prefix, const HnLoraModuleMap **map,
                             guint *n_map, GError **error);
HnTensor *hn_lora_proj_weight (const HnLayerWeights *lw, HnLoraProj proj);

/* Attaches an adapter to a loaded model for generation: adds scaling·B·A to
 * the adapted projections' weights in device memory (in their stored dtype);
 * the files on disk are not touched. Every adapter module must be a
 * projection of the model with matching shapes. */
gboolean hn_lora_attach (HnTransformer *model, HnLoraAdapter *ad, GError **error);

G_END_DECLS
