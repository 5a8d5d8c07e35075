/* Device memory a job will need (memory-estimate.h). Every formula names the
 * allocation it mirrors, so a change there shows up here in review. */
#include "jobs/memory-estimate.h"

#include <glib/gi18n-lib.h>
#include <string.h>

#include "base/hn-error.h"
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "vk/hn-vk.h"
#include "tokenizer/tokenizer.h"
#include "jobs/hierarchos-job.h"
#include "jobs/train-job.h"
#include "jobs/generate-job.h"
#include "ssm/mamba.h"
#include "train/train-graph.h"
#include "train/lora.h"
#include "transformer/transformer.h"
#include "tensor/quant.h"

#define F32 4ull

void
hn_memory_estimate_clear (HnMemoryEstimate *e)
{
  g_clear_pointer (&e->weights_dtype, g_free);
  g_clear_pointer (&e->device_name, g_free);
}

/* A layer's Linear weight, which QLoRA packs (the loader's take_linear):
 * not the embeddings, the output head, routers or MoE experts. */
static gboolean
is_layer_linear (const HnSafetensorInfo *t)
{
  return t->ndim == 2 && g_str_has_suffix (t->name, ".weight") && !strstr (t->name, "embed") &&
         !strstr (t->name, "wte") && !strstr (t->name, "wpe") && !strstr (t->name, "lm_head") &&
         !strstr (t->name, "experts") && !strstr (t->name, "router") && !strstr (t->name, ".gate.weight") &&
         !strstr (t->name, "norm");
}

/* Weights as the loader keeps them: matrices in their stored dtype (the
 * layers' Linears packed with `quant`), vectors (norms, biases) as f32. Sets
 * *fused_gate_up when the MLP's gate and up come as one tensor (phi3), which
 * doubles the gate activations. *max_quant gets the elements of the largest
 * packed matrix or matrix of ggml blocks (a GGUF file's). */
static gboolean
weight_bytes (const char *model_dir, HnDType quant, HnMemoryEstimate *e, gboolean *fused_gate_up, gint64 *max_quant,
              GError **error)
{
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  if (!st)
    return FALSE;
  guint64 by_dtype[3] = { 0 }; /* f32, f16, bf16 matrices */
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      e->n_params += t->n_elements;
      if (strstr (t->name, "gate_up_proj"))
        *fused_gate_up = TRUE;
      if (t->ndim < 2)
        {
          e->weights += F32 * (guint64) t->n_elements;
          continue;
        }
      if (hn_dtype_is_quant (quant) && is_layer_linear (t))
        {
          e->weights += hn_quant_nbytes (quant, t->shape[0], t->shape[1]);
          *max_quant = MAX (*max_quant, (gint64) t->n_elements);
          continue;
        }
      e->weights += t->nbytes;
      if (t->dtype == HN_ST_DTYPE_GGML)
        {
          *max_quant = MAX (*max_quant, (gint64) t->n_elements);
          continue;
        }
      int k = t->dtype == HN_ST_DTYPE_F16 ? 1 : t->dtype == HN_ST_DTYPE_BF16 ? 2 : 0;
      by_dtype[k] += t->nbytes;
    }
  static const char *const names[] = { "f32", "f16", "bf16" };
  int n_kinds = 0, which = 0;
  for (int k = 0; k < 3; k++)
    if (by_dtype[k])
      n_kinds++, which = k;
  e->weights_dtype = g_strdup (n_kinds > 1 ? "mixed" : names[which]);
  return TRUE;
}

/* The LoRA sites the config adapts, from the family's module map: trainable
 * elements (A [r, in] + B [out, r]) and the number of sites (each saves
 * u = x·Aᵀ [N, r] and its gradient). */
static gboolean
lora_sites (const HnTransformerHParams *hp, gboolean fused_gate_up, int r, const char *targets, gint64 *n_elems,
            gint64 *n_sites, GError **error)
{
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  const char *prefix;
  const HnLoraModuleMap *map;
  guint n_map;
  gboolean ok = hn_lora_config_set_targets (&cfg, targets ? targets : "q_proj,v_proj", error) &&
                hn_lora_module_map (hp, &prefix, &map, &n_map, error);
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 F = hp->ffn;
  for (int il = 0; ok && il < hp->n_layer; il++)
    for (guint mi = 0; mi < n_map; mi++)
      {
        g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
        if (!hn_lora_config_matches (&cfg, path))
          continue;
        gint64 in = 0, out = 0;
        for (int k = 0; k < map[mi].n; k++)
          switch (map[mi].proj[k])
            {
            case HN_LORA_PROJ_Q: in = C, out += qd; break;
            case HN_LORA_PROJ_K: in = C, out += kvd; break;
            case HN_LORA_PROJ_V: in = C, out += kvd; break;
            case HN_LORA_PROJ_O: in = qd, out += C; break;
            case HN_LORA_PROJ_GATE:
              if (!hp->gated)
                continue;
              in = C, out += fused_gate_up ? 2 * F : F;
              break;
            case HN_LORA_PROJ_UP: in = C, out += F; break;
            case HN_LORA_PROJ_DOWN: in = F, out += C; break;
            default: break;
            }
        if (in == 0)
          continue;
        *n_elems += (gint64) r * (in + out);
        (*n_sites)++;
      }
  hn_lora_config_clear (&cfg);
  return ok;
}

/* train-graph.c's hn_train_graph_new: inputs, saved activations of every
 * layer (of one layer with checkpointing: the layers share one set), the
 * head, the backward scratch (all f32 [N, ...]). */
static guint64
train_activations (const HnTransformerHParams *hp, gboolean fused_gate_up, gint64 N, gboolean checkpointing,
                   gboolean lora)
{
  gint64 C = hp->hidden, H = hp->n_head, qd = H * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 F = hp->ffn, Fg = fused_gate_up ? 2 * F : F, V = hp->vocab, L = hp->n_layer;
  gint64 Fgate = hp->gated ? Fg : 0; /* the gate's activation and gradient (gated MLPs only) */
  gint64 per_layer = 3 * C + 2 * qd + 2 * kvd + Fgate + 2 * F; /* h, h2, x_mid, q, att, k, v, gate, up, act */
  if (hp->qk_norm_head)
    per_layer += qd + kvd;
  if (hp->rope)
    per_layer += qd + kvd;
  gint64 cols = 6                                  /* ids, pos, neg_pos, targets, row_scale, loss_rows */
                + (L + 1) * C                      /* residual stream */
                + (checkpointing ? 1 : L) * per_layer + 4 * C /* o, mlp, pos_embed, final */
                + 3 * C + 3 * qd + 3 * kvd + Fgate + 2 * F /* backward scratch */
                + 2 + 4 * H                        /* norm and attention statistics */
                + (checkpointing ? 1 : L) * H;     /* each layer's log-sum-exp for the flash backward
                                                    * (on cooperative-matrix-2 devices; 4 MB at llama-1b) */
  /* the logits of one chunk of the head's rows */
  return F32 * (guint64) (N * cols + hn_train_graph_head_rows (N, V, lora) * V);
}

/* The columns of [N, ...] that layers past the first share instead of
 * saving their own (hn_train_graph_shares; without checkpointing). targets
 * NULL: full training. */
static gint64
shared_cols (const HnTransformerHParams *hp, const char *targets)
{
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 total = 0;
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  const char *prefix = NULL;
  const HnLoraModuleMap *map = NULL;
  guint n_map = 0;
  gboolean lora = targets && hn_lora_config_set_targets (&cfg, targets, NULL) &&
                  hn_lora_module_map (hp, &prefix, &map, &n_map, NULL);
  for (int il = 1; il < hp->n_layer; il++)
    {
      if (hp->rope && !hp->qk_norm_head)
        total += qd + kvd;
      if (!lora)
        continue;
      guint adapted = 0;
      for (guint mi = 0; mi < n_map; mi++)
        {
          g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
          if (hn_lora_config_matches (&cfg, path))
            for (int k = 0; k < map[mi].n; k++)
              adapted |= 1u << map[mi].proj[k];
        }
      if (!(adapted & (1u << HN_LORA_PROJ_DOWN)))
        total += hp->ffn;
      if (!(adapted & ((1u << HN_LORA_PROJ_GATE) | (1u << HN_LORA_PROJ_UP))))
        total += C;
    }
  hn_lora_config_clear (&cfg);
  return total;
}

/* train-graph.c's f16ops (full training under --precision fp16): each layer's
 * f16 copies of its matmuls' inputs (h, att, h2, act), the final norm's,
 * dy's f16 scratch and the f32 weight-gradient scratch of the split dw. */
static guint64
train_f16_activations (const HnTransformerHParams *hp, gboolean fused_gate_up, gint64 N, gboolean checkpointing)
{
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 F = hp->ffn, Fg = fused_gate_up ? 2 * F : F;
  gint64 per_layer = C + qd + (hp->block != HN_BLOCK_PARALLEL ? C : 0) + F;
  gint64 widest = MAX (MAX (C, qd + 2 * kvd), Fg), V = hp->vocab;
  gint64 dy16 = MAX (N * widest, MIN (N, 2048) * V); /* train-graph.c's lm_rows () rows of the logits' gradient */
  return 2 * (guint64) (N * ((checkpointing ? 1 : hp->n_layer) * per_layer + C) + dy16) +
         F32 * (guint64) MAX (MAX (C, qd) * MAX (C, qd), V * C);
}

/* transformer-kv.c's session: chunked-prefill activations (the
 * HnTransformerActs of transformer-graph.c) and the K/V caches. */
static void
generate_memory (const HnTransformerHParams *hp, gboolean fused_gate_up, const HnMemoryRequest *req,
                 HnMemoryEstimate *e)
{
  gint64 rows = MAX (1, req->rows), ctx = MAX (1, req->context);
  gint64 T = MAX (MIN (ctx, 512), rows); /* PREFILL_CHUNK */
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 Fu = MAX (hp->ffn, MAX (hp->moe_ffn, hp->shared_ffn));
  gint64 Fg = MAX (hp->ffn * (fused_gate_up ? 2 : 1), Fu);
  gint64 cols = 2 + 5 * C + 2 * qd + 2 * kvd + Fg + 2 * Fu;
  if (hp->n_experts > 0)
    cols += 2 * hp->n_experts + 2 * hp->n_experts_used + 1 + C;
  e->activations = F32 * (guint64) (T * cols + rows * (C + hp->vocab));
  /* [rows, ctx, KVH, D] K and V per layer; a second set to reorder beams */
  e->kv_cache = 2 * F32 * (guint64) hp->n_layer * (guint64) (rows * ctx * kvd) * (rows > 1 ? 2 : 1);
}

/* Everything past the weights: gradients, optimizer state, activations and
 * the KV cache of the workload (out->n_params, weights and weights_dtype are
 * already set). */
/* A state-space decoder (ssm/mamba.h): generation holds each row's conv + SSM states (a fixed size,
 * whatever the context) and the activations of a 512-token chunk; its training is not built. */
static gboolean
estimate_ssm (HnModelConfig *cfg, const HnMemoryRequest *req, HnMemoryEstimate *out, GError **error)
{
  HnMambaHParams h;
  if (!hn_mamba_hparams_resolve (&h, cfg, error))
    return FALSE;
  if (req->workload != HN_MEMORY_GENERATE)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: model_type \"%s\" is a state-space decoder: its training and LoRA are not built yet", cfg->path,
                   cfg->model_type);
      return FALSE;
    }
  gint64 rows = MAX (1, req->rows), T = MAX (MIN (MAX (1, req->context), 512), rows);
  gint64 GN = (gint64) (h.mamba2 ? h.n_groups : 1) * h.state;
  gint64 cols = h.rwkv ? 8 * (gint64) h.hidden + 4 * (gint64) h.att_size + h.ffn_size /* rwkv-mixer.h's buffers */
                       : 2 * (gint64) h.hidden + 7 * (gint64) h.inner + h.dt_rank + 4 * GN + 1;
  out->activations = F32 * (guint64) (T * cols + rows * (h.hidden + h.vocab));
  /* a second copy of every state to reorder beams */
  out->kv_cache = hn_mamba_hparams_state_bytes (&h) * (guint64) rows * (rows > 1 ? 2 : 1);
  out->recurrent_state = TRUE;
  out->total = out->weights + out->activations + out->kv_cache;
  return TRUE;
}

static gboolean
estimate_rest (HnModelConfig *cfg, gboolean fused_gate_up, const HnMemoryRequest *req, HnMemoryEstimate *out,
               GError **error)
{
  const HnArchInfo *arch = cfg->model_type ? hn_arch_lookup (cfg->model_type, NULL) : NULL;
  if (arch && hn_arch_is_ssm (arch))
    return estimate_ssm (cfg, req, out, error);
  HnTransformerHParams hp = { 0 };
  if (!hn_transformer_hparams_resolve (&hp, cfg, error))
    {
      hn_transformer_hparams_clear (&hp);
      return FALSE;
    }
  gboolean ok = TRUE;
  gint64 N = (gint64) MAX (1, req->batch) * MAX (1, req->seq_len);
  if (req->workload == HN_MEMORY_TRAIN)
    {
      /* every weight is a parameter: gradient, AdamW m and v, all f32 */
      out->n_trainable = out->n_params;
      out->gradients = F32 * (guint64) out->n_params;
      out->optimizer = 2 * F32 * (guint64) out->n_params;
      out->activations = train_activations (&hp, fused_gate_up, N, req->checkpointing, FALSE) -
                         (req->checkpointing ? 0 : F32 * (guint64) (N * shared_cols (&hp, NULL)));
      if (req->fp16 && hp.n_experts == 0)
        {
          /* the f16 copies of the matmul weights (the projections and the LM head) and of the matmul inputs */
          gint64 C = hp.hidden, qd = (gint64) hp.n_head * hp.head_dim, kvd = (gint64) hp.n_kv_head * hp.head_dim;
          gint64 per_layer = 2 * C * qd + 2 * C * kvd + (hp.gated ? 3 : 2) * C * (gint64) hp.ffn;
          out->weights += 2 * (guint64) (hp.n_layer * per_layer + (gint64) hp.vocab * C);
          out->activations += train_f16_activations (&hp, fused_gate_up, N, req->checkpointing);
          /* the activation is kept only as its f16 copy; without a gate the up projection as f16 too */
          out->activations -= (F32 + (hp.gated ? 0 : 2)) * (guint64) (N * hp.ffn * (req->checkpointing ? 1 : hp.n_layer));
          if (!hp.gated && hp.ffn % 2 == 0) /* the up projection's f32 gradient is never made */
            out->activations -= F32 * (guint64) N * hp.ffn;
          if (!hp.gated && hp.ffn % 4 == 0) /* and the gradient of the activation's output is f16 */
            out->activations -= 2 * (guint64) N * hp.ffn;
          /* the attention's and the MLP's outputs ([N, C] each) stored f16 */
          if (hp.hidden % 4 == 0)
            out->activations -= 2 * 2 * (guint64) N * hp.hidden;
          /* an unchunked head's logits stored f16 (train-graph.c's ce_in_back; a head bias, which the
           * config does not tell, would keep them f32) */
          if (hn_train_graph_head_rows (N, hp.vocab, FALSE) >= N && hp.vocab % 4 == 0 && hp.logits_scale == 1.0f)
            out->activations -= 2 * (guint64) N * hp.vocab;
        }
    }
  else if (req->workload == HN_MEMORY_LORA)
    {
      gint64 n = 0, sites = 0;
      ok = lora_sites (&hp, fused_gate_up, MAX (1, req->lora_r), req->lora_targets, &n, &sites, error);
      out->n_trainable = n;
      out->weights += F32 * (guint64) n; /* the adapter matrices on the device */
      out->gradients = F32 * (guint64) n;
      out->optimizer = 2 * F32 * (guint64) n;
      out->activations = train_activations (&hp, fused_gate_up, N, req->checkpointing, TRUE) + 2 * F32 * (guint64) (sites * N * req->lora_r) -
                         (req->checkpointing ? 0
                                             : F32 * (guint64) (N * shared_cols (&hp, req->lora_targets ? req->lora_targets : "q_proj,v_proj")));
    }
  else
    generate_memory (&hp, fused_gate_up, req, out);
  hn_transformer_hparams_clear (&hp);
  out->total = out->weights + out->gradients + out->optimizer + out->activations + out->kv_cache;
  return ok;
}

gboolean
hn_memory_estimate_model (const char *model_dir, const HnMemoryRequest *req, HnMemoryEstimate *out, GError **error)
{
  memset (out, 0, sizeof *out);
  out->workload = req->workload;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return FALSE;
  gboolean fused_gate_up = FALSE;
  HnDType quant = req->workload == HN_MEMORY_LORA ? req->quant : HN_DTYPE_F32;
  gint64 max_quant = 0;
  if (!weight_bytes (model_dir, quant, out, &fused_gate_up, &max_quant, error) ||
      !estimate_rest (cfg, fused_gate_up, req, out, error))
    {
      hn_memory_estimate_clear (out);
      return FALSE;
    }
  /* the recorder's weight scratch: a ring of HN_WEIGHT_SCRATCH_SLOTS of the
   * largest quantized matrix in f16 (its f16 form for the tensor-core matmul,
   * tensor/ops-quant.c; up to 128 Mi elements), packed (QLoRA) or ggml blocks
   * (a GGUF model's prefill); hn_memory_estimate_set_device drops it for a
   * device without those matmuls */
  out->f16_weight_ring = HN_WEIGHT_SCRATCH_SLOTS * 2 * (guint64) (max_quant <= ((gint64) 128 << 20) ? max_quant : 0);
  out->activations += out->f16_weight_ring;
  out->total += out->f16_weight_ring;
  if (hn_dtype_is_quant (quant))
    {
      g_free (out->weights_dtype);
      out->weights_dtype = g_strdup (hn_dtype_name (quant));
    }
  return TRUE;
}

gboolean
hn_memory_estimate_config (HnModelConfig *cfg, gint64 n_params, guint64 weights_bytes, const char *dtype,
                           const HnMemoryRequest *req, HnMemoryEstimate *out, GError **error)
{
  memset (out, 0, sizeof *out);
  out->workload = req->workload;
  out->n_params = n_params;
  out->weights = weights_bytes;
  out->weights_dtype = g_strdup (dtype ? dtype : "mixed");
  /* phi3 checkpoints fuse gate and up (the one family that does) */
  gboolean fused = cfg->model_type && strcmp (cfg->model_type, "phi3") == 0;
  if (!estimate_rest (cfg, fused, req, out, error))
    {
      hn_memory_estimate_clear (out);
      return FALSE;
    }
  return TRUE;
}

/* The host's memory from /proc/meminfo (MemTotal, MemAvailable). */
static void
set_host_memory (HnMemoryEstimate *e)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents ("/proc/meminfo", &text, NULL, NULL))
    return;
  guint64 total = 0, avail = 0;
  for (char *line = text; line && *line; line = strchr (line, '\n') ? strchr (line, '\n') + 1 : NULL)
    {
      if (g_str_has_prefix (line, "MemTotal:"))
        total = g_ascii_strtoull (line + 9, NULL, 10) * 1024;
      else if (g_str_has_prefix (line, "MemAvailable:"))
        avail = g_ascii_strtoull (line + 13, NULL, 10) * 1024;
    }
  if (!total || !avail)
    return;
  g_free (e->device_name);
  e->device_name = g_strdup (_("this computer's memory"));
  e->device_known = TRUE;
  e->device_total = total;
  e->device_free = avail;
  e->free_from_budget = FALSE;
}

void
hn_memory_estimate_set_device (HnMemoryEstimate *e, HnVkContext *ctx)
{
  if (e->host)
    {
      set_host_memory (e);
      return;
    }
  if (e->f16_weight_ring && !hn_vk_context_has_coopmat2 (ctx, NULL))
    {
      e->activations -= e->f16_weight_ring;
      e->total -= e->f16_weight_ring;
      e->f16_weight_ring = 0;
    }
  HnVkMemoryBudget b;
  hn_vk_context_get_memory_budget (ctx, &b);
  g_free (e->device_name);
  e->device_name = g_strdup (hn_vk_context_get_device_info (ctx)->name);
  e->device_known = TRUE;
  e->device_total = b.total;
  e->device_free = b.free;
  e->free_from_budget = b.from_budget;
}

gboolean
hn_memory_estimate_exceeds (const HnMemoryEstimate *e)
{
  return e->device_known && e->total > e->device_free;
}

/* Tokens of the longest prompt (0 when there is none or no tokenizer). */
static gint64
longest_prompt (const HnGenerateJobOptions *o, const char *model_dir)
{
  gint64 longest_ids = 0;
  for (const char *const *ids = o->input_ids; ids && *ids; ids++)
    {
      g_auto (GStrv) parts = g_strsplit (*ids, ",", -1);
      longest_ids = MAX (longest_ids, (gint64) g_strv_length (parts));
    }
  if (longest_ids)
    return longest_ids;
  const char *const *prompts = o->prompts;
  if (!prompts[0])
    return 0;
  const char *tok_dir = o->tokenizer_path;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tok_dir ? tok_dir : model_dir, NULL);
  gint64 best = 0;
  for (const char *const *p = prompts; tok && *p; p++)
    {
      g_autoptr (GArray) t = g_array_new (FALSE, FALSE, sizeof (int32_t));
      if (hn_tokenizer_encode (tok, *p, -1, TRUE, t, NULL))
        best = MAX (best, (gint64) t->len);
    }
  return best;
}

gboolean
hn_memory_request_use_adapter (HnMemoryRequest *req, const char *adapter_dir, char **owned_targets, GError **error)
{
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  gboolean ok = hn_lora_config_load (&cfg, adapter_dir, error);
  if (ok)
    {
      req->lora_r = cfg.r;
      g_free (*owned_targets);
      *owned_targets = cfg.all_linear ? g_strdup ("all-linear")
                       : cfg.target_modules ? g_strjoinv (",", cfg.target_modules) : NULL;
      if (*owned_targets)
        req->lora_targets = *owned_targets;
    }
  hn_lora_config_clear (&cfg);
  return ok;
}

/* Whether the job runs on the CPU (--runtime cpu, or auto on a CPU-type device
 * or without one); an unusable --runtime vulkan counts as Vulkan, whose path
 * then reports the device error. */
static gboolean
hier_on_cpu (const HnHierRuntimeOptions *rt)
{
  g_autoptr (HnVkContext) ctx = NULL;
  g_autofree char *why = NULL;
  return hn_hier_runtime_choose (rt, &ctx, &why, NULL) && !ctx;
}

/* Hierarchos: training on the CPU tape (hn_hier_train_memory gives what it
 * allocates) or on the Vulkan trainer (its device buffers: weights, one
 * parameter-gradient slice and two work buffers per row of the step);
 * generation and chat on the Vulkan runner's two buffers. */
static gboolean
hierarchos_estimate (HnJobSpec *spec, HnMemoryEstimate *out, GError **error)
{
  const char *kind = hn_job_spec_get_kind (spec);
  gboolean training = g_str_has_prefix (kind, "hierarchos-");
  HnHierJobOptions jo = { 0 }; /* the options the training run reads */
  HnHierRunOptions ro = { 0 }; /* those chat and generate read */
  if (training && !hn_hier_job_options_read (spec, &jo, error))
    return FALSE;
  if (!training)
    hn_hier_run_options_read (spec, &ro);
  const HnHierRuntimeOptions *rt = training ? &jo.runtime : &ro.runtime;
  const char *dir = training ? jo.train.resume_from : ro.model_dir;
  if (!dir)
    dir = hn_job_spec_get_string (spec, "model-path");
  const char *tok = training ? (hn_job_spec_lookup (spec, "tokenizer-path") ? hn_job_spec_get_string (spec, "tokenizer-path") : NULL)
                             : ro.tokenizer_path;
  g_autoptr (HnHierModel) m = NULL;
  if (dir)
    m = hn_hier_model_load (dir, error);
  else if (g_str_equal (kind, "hierarchos-train") && tok)
    m = hn_hier_fresh_model (&jo, tok, error);
  else
    g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                 "the memory estimate needs a local --model-path%s", training ? " (or --tokenizer-path for a fresh model)" : "");
  if (!m)
    return FALSE;
  memset (out, 0, sizeof *out);
  out->weights_dtype = g_strdup ("f32");
  out->n_params = (gint64) m->n_params;
  if (!training)
    {
      if (hier_on_cpu (rt))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "no memory estimate for the CPU Hierarchos runtime yet");
          return FALSE;
        }
      guint64 dev = 0;
      if (!hn_hier_vk_device_bytes (m, &dev, error))
        return FALSE;
      out->workload = HN_MEMORY_GENERATE;
      out->weights = F32 * m->n_params;
      out->activations = dev - out->weights; /* the work buffer: state, scratch, logits */
      out->total = dev;
      return TRUE;
    }
  if (!hier_on_cpu (rt))
    {
      gint64 chunk = jo.train.chunk_size;
      guint64 rows = (guint64) jo.train.batch_size * (guint64) jo.train.accumulation_steps;
      HnHierVkRunner *r = hn_hier_vk_trainer_layout (m, 1, chunk > 0 ? (int) chunk : (int) m->cfg.training_chunk_size, error);
      if (!r)
        return FALSE;
      guint64 row = hn_hier_vk_trainer_row_floats (r);
      hn_hier_vk_runner_free (r);
      out->workload = HN_MEMORY_HIER_TRAIN;
      out->n_trainable = (gint64) m->n_params;
      out->weights = F32 * m->n_params;
      out->gradients = F32 * m->n_params * rows;
      out->activations = F32 * 2 * row * rows;
      out->total = out->weights + out->gradients + out->activations;
      return TRUE;
    }
  HnHierTrainMemory hm;
  if (!hn_hier_train_memory (m, &jo.train, &hm, error))
    return FALSE;
  out->workload = HN_MEMORY_HIER_TRAIN;
  out->host = TRUE;
  out->n_trainable = hm.trainable;
  out->weights = hm.params;
  out->gradients = hm.grads;
  out->optimizer = hm.optimizer;
  out->activations = hm.tapes;
  out->total = hm.params + hm.grads + hm.optimizer + hm.tapes;
  return TRUE;
}

gboolean
hn_memory_estimate_for_spec (HnJobSpec *spec, HnVkContext *ctx, HnMemoryEstimate *out, GError **error)
{
  const char *kind = hn_job_spec_get_kind (spec);
  const char *model = hn_job_spec_lookup (spec, "model-path") ? hn_job_spec_get_string (spec, "model-path") : NULL;
  if (g_str_has_prefix (kind, "hierarchos-") ||
      ((g_str_equal (kind, "chat") || g_str_equal (kind, "transformer-generate")) && model &&
       hn_hier_is_model_dir (model)))
    {
      gboolean ok = hierarchos_estimate (spec, out, error);
      if (ok && (ctx || out->host))
        hn_memory_estimate_set_device (out, ctx);
      return ok;
    }
  HnMemoryRequest req = { 0 };
  if (g_str_equal (kind, "transformer-train"))
    req.workload = HN_MEMORY_TRAIN;
  else if (g_str_equal (kind, "transformer-finetune"))
    req.workload = HN_MEMORY_LORA;
  else if (g_str_equal (kind, "transformer-generate"))
    req.workload = HN_MEMORY_GENERATE;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "no memory estimate for %s jobs yet", kind);
      return FALSE;
    }
  const char *model_dir = hn_job_spec_get_string (spec, "model-path");
  if (!model_dir)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   hn_job_spec_is_set (spec, "hf-model")
                     ? "the memory estimate reads a local model folder: pull the Hub model first and pass --model-path"
                     : "the memory estimate needs --model-path");
      return FALSE;
    }
  g_autofree char *adapter_targets = NULL;
  g_auto (HnTrainJobOptions) train = { 0 }; /* req.lora_targets points into it */
  if (req.workload == HN_MEMORY_GENERATE)
    {
      /* the options the generate run reads: beams, batched requests, prompts and new tokens */
      g_auto (HnGenerateJobOptions) go = { 0 };
      if (!hn_generate_job_options_read (spec, &go, error))
        return FALSE;
      int rows = go.policy.value.num_beams;
      if (go.policy.continuous_batching)
        rows = MAX (rows, go.batch_max_requests);
      req.rows = rows;
      req.context = (int) (longest_prompt (&go, model_dir) + go.policy.value.max_new_tokens);
    }
  else
    {
      /* the options the training run reads, and the request it makes of them */
      if (!hn_train_job_options_read (spec, &train, error) ||
          !hn_train_job_memory_request (&train, &req, &adapter_targets, error))
        return FALSE;
    }
  gboolean ok = hn_memory_estimate_model (model_dir, &req, out, error);
  if (ok && ctx)
    hn_memory_estimate_set_device (out, ctx);
  return ok;
}

static const char *
workload_name (HnMemoryWorkload w)
{
  static const char *const names[] = { "train", "lora", "generate", "hierarchos-train" };
  return names[w];
}

JsonNode *
hn_memory_estimate_to_json (const HnMemoryEstimate *e)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define MEMBER_INT(k, v) (json_builder_set_member_name (b, k), json_builder_add_int_value (b, (gint64) (v)))
  json_builder_set_member_name (b, "workload");
  json_builder_add_string_value (b, workload_name (e->workload));
  json_builder_set_member_name (b, "weights_dtype");
  json_builder_add_string_value (b, e->weights_dtype);
  MEMBER_INT ("params", e->n_params);
  MEMBER_INT ("trainable_params", e->n_trainable);
  MEMBER_INT ("weights_bytes", e->weights);
  MEMBER_INT ("gradients_bytes", e->gradients);
  MEMBER_INT ("optimizer_bytes", e->optimizer);
  MEMBER_INT ("activations_bytes", e->activations);
  MEMBER_INT ("kv_cache_bytes", e->kv_cache);
  MEMBER_INT ("f16_weight_ring_bytes", e->f16_weight_ring);
  if (e->recurrent_state)
    {
      /* kv_cache_bytes is a state-space decoder's conv + SSM states */
      json_builder_set_member_name (b, "recurrent_state");
      json_builder_add_boolean_value (b, TRUE);
    }
  MEMBER_INT ("total_bytes", e->total);
  json_builder_set_member_name (b, "memory");
  json_builder_add_string_value (b, e->host ? "host" : "device");
  if (e->device_known)
    {
      json_builder_set_member_name (b, "device");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "name");
      json_builder_add_string_value (b, e->device_name);
      MEMBER_INT ("total_bytes", e->device_total);
      MEMBER_INT ("free_bytes", e->device_free);
      json_builder_set_member_name (b, "from_budget");
      json_builder_add_boolean_value (b, e->free_from_budget);
      json_builder_end_object (b);
      json_builder_set_member_name (b, "fits");
      json_builder_add_boolean_value (b, !hn_memory_estimate_exceeds (e));
    }
#undef MEMBER_INT
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

static void
row (GString *s, const char *label, guint64 bytes)
{
  g_autofree char *v = g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
  g_string_append_printf (s, "  %-22s %12s\n", label, v);
}

char *
hn_memory_estimate_to_text (const HnMemoryEstimate *e)
{
  GString *s = g_string_new (NULL);
  static const char *const titles[] = { N_("full training"), N_("LoRA fine-tuning"), N_("generation"),
                                        N_("Hierarchos training") };
  g_string_append_printf (s, _("Memory estimate (%s):\n"), _(titles[e->workload]));
  if (e->host)
    g_string_append (s, _("  host memory: Hierarchos trains on the CPU\n"));
  g_autofree char *wl = g_strdup_printf (_("weights (%s)"), e->weights_dtype);
  row (s, wl, e->weights);
  if (e->workload != HN_MEMORY_GENERATE)
    {
      row (s, _("gradients"), e->gradients);
      row (s, _("optimizer state"), e->optimizer);
    }
  row (s, _("activations"), e->activations);
  if (e->workload == HN_MEMORY_GENERATE)
    row (s, e->recurrent_state ? _("recurrent state (conv + SSM, no KV cache)") : _("KV cache"), e->kv_cache);
  row (s, _("total"), e->total);
  if (e->device_known)
    {
      g_autofree char *f = g_format_size_full (e->device_free, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *t = g_format_size_full (e->device_total, G_FORMAT_SIZE_IEC_UNITS);
      g_string_append_printf (s, _("  device: %s, %s free of %s%s\n"), e->device_name, f, t,
                              e->free_from_budget ? " (VK_EXT_memory_budget)" : "");
      if (hn_memory_estimate_exceeds (e))
        g_string_append_printf (s, _("  does not fit: %s\n"), _(hn_memory_estimate_advice (e->workload)));
      else
        g_string_append (s, _("  fits\n"));
    }
  return g_string_free (s, FALSE);
}

char *
hn_memory_estimate_summary (const HnMemoryEstimate *e)
{
  g_autofree char *tot = g_format_size_full (e->total, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *w = g_format_size_full (e->weights, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *a = g_format_size_full (e->activations + e->kv_cache, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *o = g_format_size_full (e->gradients + e->optimizer, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *head = e->workload == HN_MEMORY_GENERATE
                            ? g_strdup_printf (_("About %s of device memory (weights %s, activations and KV cache %s)"),
                                               tot, w, a)
                          : e->host
                            ? g_strdup_printf (_("About %s of host memory, training on the CPU (weights %s, gradients "
                                                 "and optimizer %s, activations %s)"), tot, w, o, a)
                            : g_strdup_printf (_("About %s of device memory (weights %s, gradients and optimizer %s, "
                                                 "activations %s)"), tot, w, o, a);
  if (!e->device_known)
    return g_steal_pointer (&head);
  g_autofree char *f = g_format_size_full (e->device_free, G_FORMAT_SIZE_IEC_UNITS);
  return g_strdup_printf (_("%s; %s free on %s"), head, f, e->device_name);
}

const char *
hn_memory_estimate_advice (HnMemoryWorkload workload)
{
  switch (workload)
    {
    case HN_MEMORY_TRAIN:
      return N_("lower --batch-size or --seq-len (raise --grad-accum to keep the effective batch), "
                "or fine-tune with LoRA (transformer-finetune) instead of training every weight");
    case HN_MEMORY_LORA:
      return N_("lower --batch-size or --seq-len (raise --grad-accum to keep the effective batch), "
                "or a smaller --lora-r or fewer --lora-target-modules");
    case HN_MEMORY_HIER_TRAIN:
      return N_("lower --batch-size or --grad-accum (each row of a step keeps its own gradient, and on Vulkan "
                "its own work buffers) or --training-chunk-size (one chunk's activations per row on Vulkan, per "
                "worker thread on the CPU tape)");
    case HN_MEMORY_GENERATE:
    default:
      return N_("lower --max-new-tokens or --num-beams, or use a smaller model");
    }
}

void
hn_memory_estimate_explain_oom (GError **error, HnMemoryWorkload workload, const HnMemoryEstimate *e,
                                const char *what)
{
  if (!error || !*error || !g_error_matches (*error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY))
    return;
  GString *s = g_string_new ((*error)->message);
  if (e)
    {
      g_autofree char *tot = g_format_size_full (e->total, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *w = g_format_size_full (e->weights, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *o = g_format_size_full (e->gradients + e->optimizer, G_FORMAT_SIZE_IEC_UNITS);
      g_autofree char *a = g_format_size_full (e->activations + e->kv_cache, G_FORMAT_SIZE_IEC_UNITS);
      g_string_append_printf (s, ". This job needs about %s (weights %s, gradients and optimizer %s, activations %s%s%s)",
                              tot, w, o, a, what ? " for " : "", what ? what : "");
    }
  g_string_append_printf (s, ". To fit: %s", hn_memory_estimate_advice (workload));
  g_autoptr (GError) old = g_steal_pointer (error);
  g_set_error_literal (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, s->str);
  g_string_free (s, TRUE);
}
