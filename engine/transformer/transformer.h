/* Hugging Face decoder-only Transformers on Vulkan: one config-driven graph
 * for every registered family (transformer/registry.h), weights kept in their
 * stored dtype (f32/f16/bf16) on the device.
 *
 *   g_autoptr (HnTransformer) m = hn_transformer_load (ctx, "model-dir", &error);
 *   hn_transformer_logits (m, ids, n, logits, &error);            // [n, vocab]
 *
 *   g_autoptr (HnTransformerSession) s =
 *     hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, n_rows, max_ctx, &error);
 *   HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, vocab, ... };
 *   hn_generate_run (&gm, &options, prompt, n_prompt, cancellable, &error);
 *
 * Building blocks for training and other graphs: a forward records into an
 * HnCmd through hn_transformer_record_embed / _record_layer / _record_head on
 * an HnTransformerActs (every intermediate activation of every layer stays
 * addressable there, so a backward pass can read them). */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

#include "formats/model-config.h"
#include "generate/generate.h"
#include "recurrent/mamba1-mixer.h"
#include "recurrent/mamba2-mixer.h"
#include "transformer/registry.h"
#include "recurrent/shortconv-mixer.h"
#include "recurrent/deltanet-mixer.h"
#include "recurrent/rglru-mixer.h"
#include "tensor/hn-ops.h"

G_BEGIN_DECLS

/* What mixes the tokens in a layer of a hybrid decoder (hn_arch_is_hybrid): attention with its KV
 * cache, or a Mamba mixer or short convolution with its recurrent state. */
typedef enum {
  HN_MIXER_ATTENTION,
  HN_MIXER_MAMBA2,
  HN_MIXER_NONE,     /* an MLP-only layer (nemotron_h "-") */
  HN_MIXER_PARALLEL, /* attention and a Mamba-2 mixer side by side on the same normed input (falcon_h1) */
  HN_MIXER_MAMBA1,   /* a Mamba (v1) mixer (jamba) */
  HN_MIXER_SHORTCONV, /* a gated short causal convolution (lfm2), carrying a conv state only */
  HN_MIXER_DELTANET,  /* gated DeltaNet linear attention (qwen3_next, qwen3_5): a conv state and a delta-rule state */
  HN_MIXER_RGLRU,     /* Griffin's recurrent block (recurrent_gemma): a conv state and the RG-LRU's h */
} HnMixerKind;

/* Everything the graph needs, resolved from config.json + the registry. */
typedef struct {
  const HnArchInfo *arch;
  HnBlockKind block;
  int vocab, hidden, n_layer, n_head, n_kv_head, head_dim, ffn;
  int *layer_n_head;     /* laguna: query heads of each layer (owned; n_head is their maximum), NULL = n_head */
  int *layer_n_kv_head;  /* mimo_v2_flash: K/V heads of each layer (owned; n_kv_head is their maximum) */
  float v_scale;         /* mimo_v2_flash attention_value_scale: values * v_scale before the cache, else 1 */
  /* gemma4: per_layer_config head dims (owned; head_dim is their maximum, values have the same), a
   * weightless RMSNorm of the values per head (v_norm) and each layer's output scale (layer_scalar,
   * HnLayerWeights.layer_scalar) */
  int *layer_head_dim;
  gboolean v_norm;
  gboolean layer_scalars;
  int rope_prop_angles;  /* gemma4 "proportional" rotary: > 0 = inv_freq[i] = 0 from i = this on */
  /* mllama_text_model on text alone: the checkpoint layer of each layer (owned [n_layer]; NULL = layer i
   * is checkpoint layer i) out of the checkpoint's src_n_layer; the others (its cross-attention layers)
   * are kept in the checkpoint, not run */
  int *layer_src;
  int src_n_layer;
  int embed_rows;        /* > vocab: rows of the stored token embeddings (mllama: vocab + 8), 0 = vocab */
  int max_positions;
  int ctx_limit;         /* > 0: longer contexts fail closed (ministral3's llama-4 query scaling starts there) */
  /* norms */
  gboolean layernorm;    /* LayerNorm, else RMSNorm */
  gboolean norm_plus_one;
  float norm_eps;
  /* mlp */
  HnActivation act;
  gboolean gated;
  gboolean xielu;        /* apertus: act is xIELU with per-layer alphas (HnLayerWeights.xielu) */
  /* positions */
  gboolean rope;
  HnRopeStyle rope_style;
  int rot_dims;
  double rope_theta;
  HnRopeScaling rope_scaling;
  double *rope_short_factor, *rope_long_factor; /* owned, longrope */
  gboolean learned_pos;
  int pos_offset;        /* OPT's learned positions start at 2 */
  gboolean alibi;
  /* attention */
  float attn_scale;      /* 0 = 1/sqrt(head_dim) */
  float attn_softcap;    /* 0 = off */
  float final_softcap;
  int sliding_window;    /* 0 = none */
  guint8 *layer_sliding; /* [n_layer]: 1 where the window applies (owned) */
  guint8 *layer_rope;    /* [n_layer]: 1 where RoPE applies (owned; smollm3, cohere2 and exaone4 skip some) */
  gboolean local_rope;   /* sliding layers use their own RoPE (gemma3: rope_local_base_freq) */
  int local_rot_dims;    /* their rotary dims (laguna: their own partial_rotary_factor), else rot_dims */
  double local_rope_theta;
  HnRopeScaling local_rope_scaling;
  gboolean qk_norm_head, qk_norm_full;
  gboolean qk_norm_after_rope; /* hunyuan: q/k norms on the rotated heads */
  gboolean sub_norms;    /* bitnet: RMSNorm before o_proj (attn_sub_norm) and before down_proj (ffn_sub_norm) */
  gboolean rope_reversed; /* nanochat: rotate_half is (x2, -x1), a rotation by -pos·freq */
  HnActivation attn_gate_act; /* attention output *= act(self_attn gate projection of the normed input):
                               * afmoe sigmoid, laguna softplus; IDENTITY = no gate */
  gboolean attn_gate_per_head; /* step3p5: the gate projection gives one value per head ([H, C]), which
                                * multiplies all of that head's output */
  float post_norm_eps;   /* > 0: the eps of the sandwich's post-sublayer norms (muse_glimmer_text) */
  gboolean final_norm_plain; /* the final RMSNorm scales by w while the layers' scale by 1 + w (muse_glimmer_text) */
  /* step3p5's SwiGLU clamp, act = min(silu(g), L) · clamp(u, −L, L), per layer (owned [n_layer]; NULL
   * or 0 = none): layer_glu_limit on the dense MLP and the shared expert, layer_expert_glu_limit on the
   * routed experts */
  float *layer_glu_limit, *layer_expert_glu_limit;
  float clip_qkv;        /* > 0: clamp q, k, v to +-clip_qkv (olmo) */
  /* scalars */
  float embed_scale;     /* 1 unless gemma (sqrt(hidden)) or granite (embedding_multiplier) */
  float residual_scale;  /* granite residual_multiplier, else 1 */
  float logits_scale;    /* cohere logit_scale, 1 / granite logits_scaling, else 1 */
  gboolean tie_embeddings;
  gboolean embed_norm;   /* bloom word_embeddings_layernorm */
  gboolean no_first_attn_norm; /* modernbert-decoder: layer 0's attention reads the embeddings as they are */
  gboolean head_transform;     /* modernbert-decoder: norm(act(dense(x))) between the final norm and the head */
  HnActivation head_act;
  /* routed mixture of experts (HN_QUIRK_MOE): router -> hn_op_moe_route -> weighted experts */
  int n_experts, n_experts_used; /* 0 = dense MLP */
  int moe_ffn;                   /* expert intermediate size */
  int shared_ffn;                /* shared expert (qwen2_moe: sigmoid-gated; deepseek: plain), 0 = none */
  gboolean moe_norm_topk;        /* renormalise the top-k weights to sum to 1 */
  HnMoeRouteKind moe_route;
  float moe_scale;               /* deepseek routed_scaling_factor (1 elsewhere) */
  int moe_n_group, moe_topk_group; /* deepseek grouped choice (0 = none) */
  float moe_jitter_eps;          /* phimoe sparsemixer router_jitter_noise */
  int moe_first_dense;           /* deepseek first_k_dense_replace: layers below it keep a dense MLP */
  int moe_last_layer, moe_layer_interval; /* ernie4_5_moe: MoE on layers first..last where (i + 1) % interval == 0 */
  float moe_norm_min;            /* ernie4_5_moe: the renormalising sum is clamped to at least this */
  float moe_norm_add;            /* lfm2_moe: the sigmoid router's renormalising sum + this (1e-6); 0 = 1e-20 */
  gboolean moe_no_route_bias;    /* lfm2_moe without use_expert_bias: the sigmoid router chooses by score alone */
  float moe_swiglu_limit;        /* gpt_oss: > 0 = (clamp(up, ±limit) + 1) · quick_gelu(min(gate, limit)) */
  float moe_train_jitter;        /* router_jitter_noise of the mixtral-style routers (training only) */
  gboolean moe_aux_loss;         /* output_router_logits: the training loss adds the load-balancing term */
  gboolean moe_shared_mean;      /* cohere2_moe "average": (routed + shared) / 2 */
  gboolean moe_scale_input;      /* llama4_text: the k largest router logits' sigmoids scale the chosen experts'
                                  * inputs (expert(s · x)), whose outputs are summed unweighted */
  /* llama4_text attention: layers with layer_chunked[il] see only keys of the query's own block of
   * local_chunk positions (attention_chunk_size); rotary layers norm q and k per head after the
   * rotation without a weight (qk_l2_norm, eps norm_eps); NoPE layers multiply the queries at
   * position p by 1 + attn_temp_scale · log1p(floor((p + 1) / attn_temp_floor)) when attn_temp_floor > 0 */
  int local_chunk;
  guint8 *layer_chunked;         /* [n_layer] (owned), NULL = no chunked layer */
  gboolean qk_l2_norm;
  float attn_temp_floor, attn_temp_scale;
  /* multi-head latent attention (deepseek): head_dim = qk_nope_dim + qk_rope_dim (rope dims first
   * on the device: q rows are reordered per head at load), v_head_dim for values */
  gboolean mla;
  int q_lora_rank, kv_lora_rank, qk_nope_dim, v_head_dim; /* v_head_dim == head_dim unless MLA */
  float mla_norm_eps;            /* eps of the q_a / kv_a latent norms */
  gboolean attn_sinks;           /* gpt_oss: a learned per-head logit in every softmax denominator */
  /* differential attention (diffllama): v_head_dim = 2 * head_dim, each cache row of KV head j holding
   * the values of heads j mod KVH/2 and j mod KVH/2 + KVH/2 (transformers' value cat + repeat), so
   * head h's output is [A_h V_h' | A_h V_h'+H/2] with h' = h mod H/2; then
   * (1 - lambda_init) · rmsnorm(out[h'] - lambda · out[h' + H/2]) per head pair, before o_proj */
  gboolean diff_attn;
  /* mixture of attention heads (jetmoe): each token's k routed experts project its queries (KVH heads
   * each, expert slot j's heads at device heads i·k + j so that head g reads KV head g / k as
   * transformers' tiled K/V repeat has it) and their own output projections, weighted and summed */
  gboolean moa;
  float final_norm_eps;          /* > 0: the final norm's eps when the layers' differ (jetmoe) */
  /* hybrid decoders: the mixer of each layer (owned [n_layer] HnMixerKind; NULL = attention in every
   * layer) and the Mamba-2 mixers' dimensions and conv width */
  guint8 *layer_mixer;
  guint8 *layer_ffn;     /* [n_layer]: 1 where the layer has its MLP (the routed MoE with n_experts), 2 a
                          * dense MLP in a model with experts (jamba), 0 none (owned; NULL = every layer 1) */
  HnMamba2Dims ssm;
  HnMamba1Dims ssm1;     /* jamba's Mamba (v1) mixers */
  HnShortConvDims sconv; /* lfm2's short convolutions (kernel = ssm_conv_kernel) */
  HnDeltaNetDims dnet;   /* qwen3_next / qwen3_5's gated DeltaNet layers (kernel = ssm_conv_kernel) */
  HnRglruDims rglru;     /* recurrent_gemma's recurrent blocks (kernel = ssm_conv_kernel) */
  int ssm_conv_kernel;
  /* falcon_h1's muP multipliers, folded into the weights at load (1 elsewhere): the mixer's input and
   * output, its in_proj parts z, x, B, C, dt; attention's input, keys and output; the MLP's gate and
   * down projections */
  struct {
    float ssm_in, ssm_out, ssm[5], attn_in, key, attn_out, gate, down;
  } mup;
  /* ids */
  int bos_token_id, pad_token_id;
  GArray *eos_token_ids; /* int32_t */
} HnTransformerHParams;

typedef struct _HnTransformer HnTransformer;

/* Head dim (keys, values and queries) of layer il (gemma4 varies it). */
static inline int
hn_transformer_layer_head_dim (const HnTransformerHParams *hp, int il)
{
  return hp->layer_head_dim ? hp->layer_head_dim[il] : hp->head_dim;
}

static inline int
hn_transformer_layer_v_head_dim (const HnTransformerHParams *hp, int il)
{
  return hp->layer_head_dim ? hp->layer_head_dim[il] : hp->v_head_dim;
}

/* Whether layer i has routed experts (the others keep the dense MLP). */
static inline gboolean
hn_transformer_layer_is_moe (const HnTransformerHParams *hp, int i)
{
  return hp->n_experts > 0 && i >= hp->moe_first_dense && i <= hp->moe_last_layer &&
         (i + 1) % hp->moe_layer_interval == 0;
}

/* The hyper-parameters a model of `cfg` would have, without loading weights
 * (memory estimates, benchmarks); errors name the config key. Clear with
 * hn_transformer_hparams_clear (also after a failed resolve). */
gboolean hn_transformer_hparams_resolve (HnTransformerHParams *hp, const HnModelConfig *cfg, GError **error);
void hn_transformer_hparams_clear (HnTransformerHParams *hp);

/* Loads config.json and the safetensors weights of `model_dir`, validates
 * every tensor against the family's expected names and shapes (an unknown or
 * missing tensor is an error naming it) and uploads them. */
HnTransformer *hn_transformer_load (HnVkContext *ctx, const char *model_dir, GError **error);
/* QLoRA: as hn_transformer_load, with every Linear weight of the layers (not
 * the embeddings, the output head or MoE experts) packed at load into
 * `quant` (HN_DTYPE_NF4, HN_DTYPE_NF4_DQ or HN_DTYPE_Q8, tensor/quant.h;
 * HN_DTYPE_F32 = as stored). Such a model is for LoRA training: only the
 * matmul kernels read those weights (generation refuses them by name). */
HnTransformer *hn_transformer_load_quantized (HnVkContext *ctx, const char *model_dir, HnDType quant, GError **error);
void hn_transformer_free (HnTransformer *model);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTransformer, hn_transformer_free)

/* Layer-split (pipeline) inference for a model larger than one device:
 * stage d holds layers first_layer[d] .. first_layer[d + 1] - 1 on
 * ctxs[d] (stage 0 also the embeddings, the last stage the final norm and
 * head), split by the devices' device-local memory. The returned model is
 * stage 0, chained to the others; generation sessions run the stages in turn
 * and copy the [tokens, hidden] activations across at each boundary. Only
 * generation uses a split model (training, full logits and LoRA attach
 * refuse it). One context = hn_transformer_load. */
HnTransformer *hn_transformer_load_split (HnVkContext *const *ctxs, guint n_devices, const char *model_dir,
                                          GError **error);
/* The split plan: capacity [n_devices] bytes (0 = unknown), first_layer
 * [n_devices + 1], stage_bytes [n_devices] the checkpoint bytes each stage
 * holds. A stage that does not fit its device is HN_ERROR_OUT_OF_MEMORY. */
gboolean hn_transformer_plan_split (const char *model_dir, const guint64 *capacity, guint n_devices,
                                    int *first_layer, guint64 *stage_bytes, GError **error);
/* Stages of a (split) model: 1 for a whole model. */
guint hn_transformer_get_n_stages (HnTransformer *model);
HnTransformer *hn_transformer_get_stage (HnTransformer *model, guint i, int *layer0, int *layer1);
/* Fails (HN_ERROR_UNSUPPORTED, naming `what`) for a split model. */
gboolean hn_transformer_require_whole (HnTransformer *model, const char *what, GError **error);

const HnTransformerHParams *hn_transformer_get_hparams (HnTransformer *model);
HnVkContext *hn_transformer_get_context (HnTransformer *model);
/* Bytes of weights on the device (all devices of a split model). */
guint64 hn_transformer_get_weight_bytes (HnTransformer *model);

/* Logits of every position of one sequence, without a cache: logits [n, vocab]. */
gboolean hn_transformer_logits (HnTransformer *model, const int32_t *ids, int n, float *logits, GError **error);

/* ---- generation sessions (KV cache) ---- */

typedef enum {
  HN_KV_CACHE_CONTIGUOUS, /* one [max_ctx] K/V block per row and layer (default) */
  HN_KV_CACHE_NONE,       /* recompute the whole prefix every step (transformers use_cache=False) */
  HN_KV_CACHE_PAGED,      /* 16-token pages in one arena per layer, page tables per row, a free list */
} HnKvCacheMode;

/* Parses "dynamic"/"static"/"contiguous" (contiguous), "none"/"off", "paged";
 * transformers' other names fail with a message naming them. */
gboolean hn_kv_cache_mode_from_string (const char *s, HnKvCacheMode *out, GError **error);
const char *hn_kv_cache_mode_name (HnKvCacheMode mode);

typedef struct _HnTransformerSession HnTransformerSession;

/* A session for up to `max_rows` sequences (beams) of up to `max_ctx` tokens.
 * Every device buffer is allocated here; the token loop allocates nothing. */
HnTransformerSession *hn_transformer_session_new (HnTransformer *model, HnKvCacheMode mode, int max_rows,
                                                  int max_ctx, GError **error);
/* A paged session whose rows share a pool of n_pages pages of HN_KV_PAGE_SIZE tokens (the
 * plain constructor gives every row max_ctx tokens' worth). A forward that needs a page when
 * none is free fails with HN_ERROR_OUT_OF_MEMORY; HnLmOps.release returns a row's pages. */
HnTransformerSession *hn_transformer_session_new_paged (HnTransformer *model, int max_rows, int max_ctx, int n_pages,
                                                        GError **error);
/* Fails (HN_ERROR_UNSUPPORTED, naming the reason) when the model's attention cannot read a
 * paged cache (ALiBi, head dims above 256). */
gboolean hn_transformer_check_pageable (HnTransformer *model, GError **error);
/* Paged sessions: pages in the pool, and those no row holds (0 for other modes). */
int hn_transformer_session_get_n_pages (HnTransformerSession *s);
int hn_transformer_session_get_free_pages (HnTransformerSession *s);
void hn_transformer_session_free (HnTransformerSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTransformerSession, hn_transformer_session_free)
/* The HnLmOps to drive a session from hn_generate_run (self = the session). */
const HnLmOps *hn_transformer_session_lm_ops (void);
/* Prompts are run through the model in chunks of at most this many tokens (default 512, which
 * bounds the activations for long contexts); 1..the session's activation rows. */
gboolean hn_transformer_session_set_prefill_chunk (HnTransformerSession *s, int n_tokens, GError **error);
/* Device bytes of the session's caches and scratch. */
guint64 hn_transformer_session_get_bytes (HnTransformerSession *s);
/* Greedy decoding on the device (a one-row session with a contiguous cache): feeds `token` to
 * row 0, then its own picks, n_new steps replayed from one recorded step with only the picks
 * coming back (out[n_new]); the same ids as argmax over each step's logits. Row 0 then holds the
 * token and out[0..n_new-1) (out[n_new-1] is not fed yet). */
gboolean hn_transformer_session_decode_greedy (HnTransformerSession *s, int32_t token, int n_new, int32_t *out,
                                               GError **error);
/* Per-dispatch timestamps for the session's decode steps (re-records them); the entries of the
 * last step run, or NULL. */
void hn_transformer_session_set_profiling (HnTransformerSession *s, gboolean enabled);
const HnCmdProfileEntry *hn_transformer_session_get_profile (HnTransformerSession *s, guint *n_entries);

/* Generation with a session sized for the request (num_beams rows, prompt + new tokens). */
HnGenerateResult *hn_transformer_generate (HnTransformer *model, HnKvCacheMode mode, const HnGenerateOptions *opt,
                                           const int32_t *prompt, int n_prompt, HnDecodeFunc decode,
                                           gpointer decode_data, HnTokenFunc on_token, gpointer token_data,
                                           GCancellable *cancellable, GError **error);

/* ---- building blocks (training reuses these) ---- */

/* Per-layer device weights in the canonical layout (fused checkpoint tensors
 * split, Conv1D transposed); NULL where the family has none. */
typedef struct {
  HnTensor *ln1_w, *ln1_b, *ln2_w, *ln2_b;       /* input / post-attention norms */
  HnTensor *post_attn_w, *post_ffn_w;             /* gemma2 sandwich, olmo2 post-norms */
  HnTensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
  HnTensor *q_norm_w, *q_norm_b, *k_norm_w, *k_norm_b;
  HnTensor *w_gate, *b_gate, *w_up, *b_up, *w_down, *b_down; /* non-gated: up = fc1, down = fc2;
                                                              * MoE: the shared expert or NULL */
  HnTensor *router;              /* MoE: [n_experts, C] */
  HnTensor **experts;            /* MoE: [3 * n_experts] gate, up, down of each expert (owned array) */
  HnTensor *expert_stack[3];     /* MoE: gate, up [E, F, C] and down [E, C, F] of all experts (experts[] are
                                  * views of them), or NULL when a stack exceeds one device buffer */
  HnTensor **expert_biases;      /* gpt_oss: [3 * n_experts] gate, up, down biases (owned array) or NULL */
  HnTensor *expert_bias_stack[3]; /* gpt_oss: [E, F], [E, F], [E, C] (expert_biases are views of them) */
  HnTensor *router_b;            /* gpt_oss router bias [n_experts] */
  HnTensor *route_bias;          /* deepseek_v3 e_score_correction_bias [n_experts] (choice only) */
  HnTensor *shared_expert_gate;  /* qwen2_moe: [1, C] */
  HnTensor *sinks;               /* gpt_oss attention sinks [n_head] */
  /* MLA (deepseek): wq is q_proj or q_b_proj (rows reordered, rope dims first per head) */
  HnTensor *wq_a, *q_a_norm_w;   /* q_lora: [q_lora_rank, C], [q_lora_rank] */
  HnTensor *wkv_a, *kv_a_norm_w; /* kv_a_proj_with_mqa latent rows [kv_lora_rank, C], its norm */
  HnTensor *wk_rope;             /* kv_a_proj_with_mqa rope rows [qk_rope_dim, C] (one key shared by all heads) */
  HnTensor *wk_nope;             /* kv_b_proj key rows [H * qk_nope_dim, kv_lora_rank] */
  HnTensor *wv_b;                /* kv_b_proj value rows [H * v_head_dim, kv_lora_rank] */
  HnTensor *attn_sub_w, *ffn_sub_w; /* bitnet sub-norms */
  HnTensor *attn_gate;           /* afmoe gate_proj, laguna g_proj [H * D, C], step3p5 g_proj [H, C]
                                  * (hp->attn_gate_act, hp->attn_gate_per_head) */
  float glu_limit, expert_glu_limit; /* step3p5: hp->layer_glu_limit / layer_expert_glu_limit of this layer */
  float layer_scalar;            /* gemma4: the layer's output *= this (1 elsewhere) */
  float xielu[3];                /* xIELU (apertus): softplus(alpha_p), beta + softplus(alpha_n), beta */
  float diff_lambda, diff_lambda_init; /* diffllama: exp(q1·k1) - exp(q2·k2) + lambda_init, lambda_init */
  HnTensor *moa_router;          /* jetmoe attention experts: router [E, C] */
  HnTensor *moa_in, *moa_out;    /* query projections [E, KVH * D, C], output projections [E, C, KVH * D] */
  HnTensor *moa_bias;            /* [C], added to the experts' weighted sum */
  HnTensor *moe_bias;            /* jetmoe: [C], added to the routed MLP experts' weighted sum */
  HnMamba2Weights m2;            /* a hybrid's Mamba-2 layer (the attention weights stay NULL) */
  HnMamba1Weights m1;            /* a hybrid's Mamba (v1) layer */
  HnShortConvWeights sconv;      /* a hybrid's short-convolution layer (lfm2) */
  HnDeltaNetWeights dnet;        /* a hybrid's gated DeltaNet layer (qwen3_next, qwen3_5) */
  HnRglruWeights rglru;          /* a hybrid's recurrent block (recurrent_gemma) */
} HnLayerWeights;

typedef struct {
  HnTensor *tok_embed;          /* [vocab, hidden] */
  HnTensor *pos_embed;          /* [positions, hidden] or NULL */
  HnTensor *embed_norm_w, *embed_norm_b;
  HnLayerWeights *layers;       /* [n_layer] */
  HnTensor *final_norm_w, *final_norm_b;
  HnTensor *lm_head;            /* [vocab, hidden]; == tok_embed when tied */
  HnTensor *lm_head_b;
  HnTensor *head_dense_w, *head_dense_b, *head_norm_w, *head_norm_b; /* hp.head_transform */
  HnTensor *inv_freq;           /* f32 [rot_dims / 2] */
  HnTensor *inv_freq_local;     /* f32 [rot_dims / 2] for sliding layers, or NULL */
  float rope_attn_scale_local;
  HnTensor *alibi_slopes;       /* f32 [n_head] */
  float rope_attn_scale;
  HnTensor *attn_temp;          /* f32 [positions, 1]: hp.attn_temp_floor's query scale of each position, or NULL */
} HnTransformerWeights;

const HnTransformerWeights *hn_transformer_get_weights (HnTransformer *model);

/* Where each device weight came from in the checkpoint, so training can write
 * weights back under their Hugging Face names and layouts: device rows r come
 * from source rows rows[r] (or row0 + r when rows is NULL) of the checkpoint
 * tensor `src`, of the transposed source when `transposed` (GPT-2 Conv1D).
 * Tensors not from the checkpoint (rope inv_freq, ALiBi slopes) have none. */
typedef struct {
  HnTensor *t;
  char *src;
  gboolean transposed;
  gint64 row0;
  gint64 *rows;  /* [t->shape[0]] or NULL */
} HnWeightOrigin;

const HnWeightOrigin *hn_transformer_get_weight_origins (HnTransformer *model, guint *n_origins);
/* The folder the model was loaded from. */
const char *hn_transformer_get_dir (HnTransformer *model);
/* Weights are scanned as they are uploaded: the first tensor holding NaN or
 * Inf values (and how many it holds), or NULL when all are finite. Loading
 * says so with g_message; training refuses such a model. */
const char *hn_transformer_get_nonfinite_weight (HnTransformer *model, guint64 *n_values);

/* Activations of one forward over T tokens of B rows (all [B*T, ...]). */
typedef struct {
  int max_tokens;              /* capacity B*T */
  HnTensor *ids;               /* i32 [N] */
  HnTensor *pos;               /* i32 [N] */
  HnTensor *x;                 /* [N, C] residual stream */
  HnTensor *h;                 /* [N, C] normed input */
  HnTensor *q;                 /* [N, H*D] */
  HnTensor *k, *v;             /* [N, KVH*D] (no-cache staging / training) */
  HnTensor *att;               /* [N, H*D] attention output (pre o_proj) */
  HnTensor *o;                 /* [N, C] */
  HnTensor *h2;                /* [N, C] */
  HnTensor *gate, *up;         /* [N, F] */
  HnTensor *act;               /* [N, F] */
  HnTensor *mlp;               /* [N, C] */
  HnTensor *last;              /* [B, C] final-normed last rows */
  HnTensor *logits;            /* [max_tokens, V] (row capacity of the head) */
  HnTensor *att_scratch;       /* f32 split-K attention partials for decode (NULL when it would not split) */
  HnTensor *att_count;         /* i32 zeros: the split-K attention's merge counters (with att_scratch) */
  HnTensor *pick_scratch;      /* f32 [2048]: the greedy pick's per-workgroup partials (hn_op_argmax_scratch) */
} HnTransformerActs;

HnTransformerActs *hn_transformer_acts_new (HnTransformer *model, int max_tokens, int max_logit_rows,
                                            GError **error);
void hn_transformer_acts_free (HnTransformerActs *acts);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTransformerActs, hn_transformer_acts_free)
/* Drops the tensor views a recording made in acts (call after its submit). */
void hn_transformer_acts_drop_views (HnTransformerActs *acts);

/* K/V storage one layer reads: k/v [B, n_ctx, KVH, D] (B rows), or with a page table the
 * layer's paged arenas k/v [n_pages * HN_KV_PAGE_SIZE, KVH, D] shared by every row. */
typedef struct {
  HnTensor *k, *v;
  HnTensor *page_table; /* paged: i32 [B, max_pages]; NULL = contiguous */
  HnTensor *seq_lens;   /* paged: i32 [B], each row's length with the new tokens */
  HnTensor *slots;      /* paged: i32 [B * T], the arena row of each new token */
  HnSsmState ssm;       /* a hybrid's state layer: the B rows' conv and SSM states (k, v NULL; a short
                         * convolution has the conv state only) */
} HnLayerKv;

/* Records embeddings (+ positions, embed norm/scale) of acts->ids/pos for N tokens into acts->x. */
gboolean hn_transformer_record_embed (HnTransformer *model, HnCmd *cmd, HnTransformerActs *acts, int n_tokens,
                                      GError **error);
/* Records layer `il` for B rows of T new tokens each, at positions pos0..pos0+T (same for every
 * row); K/V of the new tokens are written into kv at [row, pos0..pos0+T). With a paged kv the
 * rows may have different lengths (kv->seq_lens; pos0 is unused): the new K/V go to kv->slots. */
gboolean hn_transformer_record_layer (HnTransformer *model, HnCmd *cmd, HnTransformerActs *acts, int il,
                                      const HnLayerKv *kv, int n_rows, int n_tokens, int pos0, GError **error);
/* Whether a forward of n_tokens submits each layer once it is recorded (hn_cmd_flush), so the
 * device works while the host records the next: from 64 tokens (a prefill; shorter ones, decode,
 * are cheaper whole); HN_PREFILL_FLUSH=0: never. */
gboolean hn_transformer_flush_layers (int n_tokens);
/* Records the final norm and lm_head for rows [row0, row0 + n) of acts->x into acts->logits[0..n). */
gboolean hn_transformer_record_head (HnTransformer *model, HnCmd *cmd, HnTransformerActs *acts, int row0, int n,
                                     GError **error);

/* The i32 state a replayed decode step reads and advances (HN_STEP_*: element indices; the
 * produced tokens follow from HN_STEP_TOKENS). */
enum {
  HN_STEP_TOKEN = 0,  /* the token fed to the step; the step leaves its greedy pick here */
  HN_STEP_POS = 1,    /* its position (+ the learned-position offset) */
  HN_STEP_ROW = 2,    /* its cache row (tokens already in the cache) */
  HN_STEP_COUNT = 3,  /* tokens picked so far */
  HN_STEP_TOKENS = 4, /* the picks, in order */
};

/* Records one decode step of one sequence (B = T = 1) that takes token, position and cache row
 * from `state` (i32 [HN_STEP_TOKENS + cap]) on the device, so the recording can be replayed for
 * every token (hn_cmd_set_reusable / hn_cmd_replay): embedding, every layer (K/V written at the
 * row), the head into acts->logits[0], the greedy pick (first maximum) into state[HN_STEP_TOKEN]
 * and state[HN_STEP_TOKENS + count] (while count < cap), then position, row and count + 1.
 * Needs an f32 KV cache. */
gboolean hn_transformer_record_step (HnTransformer *model, HnCmd *cmd, HnTransformerActs *acts,
                                     const HnLayerKv *kv, HnTensor *state, GError **error);

G_END_DECLS
