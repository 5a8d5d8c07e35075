/* The architecture registry: config.json's model_type (and its aliases) ->
 * a block family, a weight-naming scheme and static quirk flags, with the
 * tasks each architecture supports. Config-dependent details (parallel
 * residual switches, partial rotary, sliding windows...) are resolved from
 * config.json by the transformer loader; the registry holds what the
 * model_type alone decides. Hierarchos is registered by its own module. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

/* How a decoder layer wires norms, attention, MLP and residuals. */
typedef enum {
  HN_BLOCK_PRE_NORM,      /* x += attn(norm1(x)); x += mlp(norm2(x))  (llama, gpt2, bloom...) */
  HN_BLOCK_PARALLEL,      /* x += attn(n(x)) + mlp(n(x)) with one norm (gptj, phi, cohere, falcon) */
  HN_BLOCK_PARALLEL_2NORM,/* x += attn(n1(x)) + mlp(n2(x))   (gpt_neox, falcon new arch) */
  HN_BLOCK_SANDWICH,      /* pre and post norms around both sublayers (gemma2) */
  HN_BLOCK_POST_NORM,     /* x += norm(attn(x)); x += norm(mlp(x))  (olmo2) */
  /* not decoders: encdec/encoder.h and encdec/seq2seq.h run these */
  HN_BLOCK_ENCODER_POST_NORM, /* bidirectional, x = norm(x + attn(x)); x = norm(x + mlp(x)) (bert) */
  HN_BLOCK_ENCODER_PRE_NORM,  /* bidirectional, x += attn(norm(x)); x += mlp(norm(x)) (modernbert) */
  HN_BLOCK_SEQ2SEQ_POST_NORM, /* encoder-decoder, post-norm sublayers (bart, marian) */
  HN_BLOCK_SEQ2SEQ_PRE_NORM,  /* encoder-decoder, pre-norm sublayers and final norms (t5, mbart, pegasus) */
  HN_BLOCK_POST_LN,           /* decoder, x = norm1(x + attn(x)); x = norm2(x + mlp(x)), no final norm (openai-gpt) */
  /* state-space decoders: ssm/mamba.h runs these (a recurrent state per layer, no attention) */
  HN_BLOCK_MAMBA,             /* x += mixer(rmsnorm(x)), the Mamba selective-scan mixer (mamba, falcon_mamba, mamba2) */
} HnBlockKind;

/* Where the weights live in the checkpoint and how they are laid out. */
typedef enum {
  HN_NAMES_LLAMA,      /* model.layers.N.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj */
  HN_NAMES_PHI3,       /* self_attn.qkv_proj, mlp.gate_up_proj (fused) */
  HN_NAMES_GPT2,       /* transformer.h.N.attn.c_attn (Conv1D [in,out]), mlp.c_fc/c_proj */
  HN_NAMES_GPT_NEOX,   /* gpt_neox.layers.N.attention.query_key_value (per-head interleaved) */
  HN_NAMES_GPTJ,       /* transformer.h.N.attn.{q,k,v,out}_proj, mlp.fc_in/fc_out */
  HN_NAMES_BLOOM,      /* transformer.h.N.self_attention.query_key_value (per-head interleaved) */
  HN_NAMES_FALCON,     /* transformer.h.N.self_attention.query_key_value (grouped), dense_h_to_4h */
  HN_NAMES_OPT,        /* model.decoder.layers.N.self_attn.{q,k,v,out}_proj, fc1/fc2 */
  HN_NAMES_PHI,        /* model.layers.N.self_attn.{q,k,v}_proj + dense, mlp.fc1/fc2 */
  HN_NAMES_STARCODER2, /* model.layers.N.self_attn.*_proj, mlp.c_fc/c_proj */
  HN_NAMES_PERSIMMON,  /* model.layers.N.self_attn.query_key_value (per-head), q/k_layernorm, dense_h_to_4h */
  HN_NAMES_BIGCODE,    /* gpt2 names with Linear weights; c_attn rows q, k, v (multi-query) */
  HN_NAMES_GLM4,       /* llama names + post_self_attn_layernorm / post_mlp_layernorm, fused gate_up */
  HN_NAMES_GPT_NEO,    /* transformer.h.N.attn.attention.{q,k,v,out}_proj, mlp.c_fc/c_proj (Linear) */
  HN_NAMES_MPT,        /* transformer.blocks.N.attn.Wqkv, norm_1/norm_2, ffn.up_proj/down_proj */
  HN_NAMES_DBRX,       /* transformer.blocks.N.norm_attn_norm.{norm_1,attn.Wqkv,norm_2}, ffn.experts.mlp.w1/v1/w2 */
  HN_NAMES_CODEGEN,    /* transformer.h.N.attn.qkv_proj in 4 model-parallel chunks of (q, v, k) */
  HN_NAMES_APERTUS,    /* llama names, attention_layernorm / feedforward_layernorm, mlp.act_fn.alpha_p/alpha_n */
  HN_NAMES_VAULTGEMMA, /* llama names, pre_feedforward_layernorm (no post norms) */
  HN_NAMES_HUNYUAN,    /* llama names, self_attn.query_layernorm / key_layernorm (after the rotary) */
  HN_NAMES_BITNET,     /* llama names + self_attn.attn_sub_norm, mlp.ffn_sub_norm */
  HN_NAMES_NANOCHAT,   /* llama attention names, weightless norms, mlp.fc1/fc2 */
  HN_NAMES_XGLM,       /* model.layers.N.self_attn.*_proj, self_attn_layer_norm, fc1/fc2, model.layer_norm */
  HN_NAMES_BIOGPT,     /* biogpt.layers.N.self_attn.*_proj, fc1/fc2, biogpt.layer_norm, output_projection */
  HN_NAMES_CTRL,       /* transformer.h.N.multi_head_attention.W{q,k,v}/dense, ffn.0/ffn.2, layernorm1/2 */
  HN_NAMES_OPENAI_GPT, /* transformer.h.N.attn.c_attn (Conv1D), ln_1/ln_2 after each sublayer, no final norm */
  HN_NAMES_GPT_NEOX_JP,/* gpt_neox_japanese.layers.N.attention.query_key_value, attention.dense_bias */
  HN_NAMES_BERT_GENERATION, /* bert.encoder.layer.N (bert names, causal), bert.embeddings.LayerNorm, lm_head.bias */
  HN_NAMES_BERT,       /* <base>.encoder.layer.N.attention.self.{query,key,value}, cls/lm_head (bert, roberta) */
  HN_NAMES_DISTILBERT, /* distilbert.transformer.layer.N.attention.{q,k,v,out}_lin, ffn.lin1/lin2 */
  HN_NAMES_ALBERT,     /* albert.encoder.albert_layer_groups.G.albert_layers.J (shared layers) */
  HN_NAMES_ELECTRA,    /* bert names under electra., embeddings_project, generator_predictions */
  HN_NAMES_MODERNBERT, /* model.layers.N.attn.Wqkv/Wo, mlp.Wi/Wo, head, decoder */
  HN_NAMES_MEGATRON_BERT, /* bert names, pre-norm: attention.ln, ln, bert.encoder.ln; no embedding norm */
  HN_NAMES_XLMR_XL,    /* roberta names, pre-norm: attention.self_attn_layer_norm, LayerNorm, encoder.LayerNorm */
  HN_NAMES_ROFORMER,   /* bert names under roformer., rotary (no position table), embeddings_project */
  HN_NAMES_REMBERT,    /* bert names under rembert., embedding_hidden_mapping_in, an untied narrower head */
  HN_NAMES_ESM,        /* esm.encoder.layer.N, pre-norm (LayerNorm gamma/beta), rotary, emb_layer_norm_after */
  HN_NAMES_XLM,        /* transformer.attentions.N.q_lin, layer_norm1.N, ffns.N.lin1, pred_layer.proj */
  HN_NAMES_ROBERTA_PRELN, /* roberta names under roberta_prelayernorm., attention / intermediate LayerNorm first */
  HN_NAMES_MPNET,      /* mpnet.encoder.layer.N.attention.attn.{q,k,v,o}, one relative_attention_bias table */
  HN_NAMES_EUROBERT,   /* llama names (RMSNorm, grouped K/V, rotary, gated MLP), bidirectional, lm_head */
  HN_NAMES_DEBERTA,    /* deberta.encoder.layer.N.attention.self.in_proj (per-head q|k|v), q_bias, pos_proj */
  HN_NAMES_DEBERTA_V2, /* deberta.encoder.layer.N.attention.self.{query,key,value}_proj, pos_{key,query}_proj */
  HN_NAMES_MOBILEBERT, /* mobilebert.encoder.layer.N.bottleneck.{input,attention}, ffn.J, output.bottleneck */
  HN_NAMES_NOMIC_BERT, /* nomic_bert.encoder.layers.N.attn.Wqkv/out_proj, mlp.fc11/fc12/fc2, norm1/norm2, emb_ln */
  HN_NAMES_T5,         /* {encoder,decoder}.block.N.layer.M.{SelfAttention,EncDecAttention,DenseReluDense} */
  HN_NAMES_BART,       /* model.{encoder,decoder}.layers.N.{self_attn,encoder_attn}.*_proj, fc1/fc2 */
  HN_NAMES_MAMBA,      /* backbone.layers.N.mixer.{in_proj,conv1d,x_proj,dt_proj,out_proj,A_log,D}, backbone.norm_f */
  HN_NAMES_MAMBA2,     /* backbone.layers.N.mixer.{in_proj,conv1d,dt_bias,A_log,D,norm,out_proj} (Mamba-2) */
  HN_NAMES_RWKV,       /* rwkv.blocks.N.{pre_ln,ln1,ln2,attention.*,feed_forward.*}, rwkv.ln_out, head (RWKV-4) */
  HN_NAMES_MODERNBERT_DECODER, /* model.layers.N.attn.{q,k,v}_proj/Wo, mlp.Wi/Wo, lm_head.dense/norm, decoder */
  HN_NAMES_DIFFLLAMA,  /* llama names + self_attn.lambda_{q,k}{1,2} (differential attention) */
  HN_NAMES_JETMOE,     /* llama norms, self_attention.{kv_proj,experts.*} (routed q/o), mlp.{router.layer,input_linear,...} */
  HN_NAMES_LLAMA4,     /* llama attention names, feed_forward.{gate,up,down}_proj or .{router,experts,shared_expert} */
  /* hybrid decoders (attention layers and Mamba-2 layers, transformer/transformer-graph.c) */
  HN_NAMES_BAMBA,      /* llama names + pre_ff_layernorm, feed_forward.*, mamba.* (Mamba-2), final_layernorm */
  HN_NAMES_GRANITEMOEHYBRID, /* llama names (granitemoe's MoE, shared_mlp) + mamba.* (Mamba-2) by layer_types */
  HN_NAMES_FALCON_H1,  /* bamba's names; attention and mamba.* (Mamba-2) in every layer */
  HN_NAMES_JAMBA,      /* bamba's names, mamba.* a Mamba (v1) mixer with dt/b/c_layernorm, feed_forward.experts.N */
  HN_NAMES_NEMOTRON_H, /* backbone.embeddings, backbone.layers.N.{norm, mixer.*} (one mixer per layer), backbone.norm_f */
  HN_NAMES_LFM2,       /* model.layers.N.{operator_norm, ffn_norm, self_attn.*, conv.* (short convolution),
                        * feed_forward.w1/w3/w2}, model.embedding_norm (the final norm) */
  HN_NAMES_QWEN3_NEXT, /* llama names (q_proj rows query | gate per head) + linear_attn.* (gated DeltaNet:
                        * qwen3_next in_proj_qkvz / in_proj_ba, qwen3_5 in_proj_qkv / _z / _b / _a) */
  HN_NAMES_RECURRENT_GEMMA, /* model.layers.N.{temporal_pre_norm, temporal_block.* (attention or the recurrent
                             * block: linear_x/y/out, conv_1d, rg_lru.*), channel_pre_norm, mlp_block.*},
                             * model.final_norm */
} HnNameScheme;

/* Static quirks of an architecture (what model_type alone implies). */
typedef enum {
  HN_QUIRK_LAYERNORM = 1u << 0,       /* LayerNorm (with bias unless NORM_NO_BIAS) instead of RMSNorm */
  HN_QUIRK_NORM_PLUS_ONE = 1u << 1,   /* RMSNorm scales by (1 + w) (gemma) */
  HN_QUIRK_NORM_NO_PARAMS = 1u << 2,  /* LayerNorm without weight and bias (olmo) */
  HN_QUIRK_NORM_NO_BIAS = 1u << 3,    /* LayerNorm with weight only (cohere, olmo-style) */
  HN_QUIRK_EMBED_SCALE_SQRT = 1u << 4,/* embeddings * sqrt(hidden) (gemma, gemma2) */
  HN_QUIRK_MULTIPLIERS = 1u << 5,     /* granite: embedding/residual/attention multipliers, logits_scaling */
  HN_QUIRK_LOGIT_SCALE = 1u << 6,     /* cohere: logits * logit_scale */
  HN_QUIRK_QK_NORM_HEAD = 1u << 7,    /* q/k RMSNorm per head (qwen3) */
  HN_QUIRK_QK_NORM_FULL = 1u << 8,    /* q/k RMSNorm over the whole projection (olmo2) */
  HN_QUIRK_SOFTCAP = 1u << 9,         /* attention and final logit soft-capping (gemma2) */
  HN_QUIRK_SLIDING_ALTERNATE = 1u << 10, /* sliding window on every other layer (gemma2) */
  HN_QUIRK_FUSED_QKV = 1u << 11,      /* one q/k/v projection in the checkpoint */
  HN_QUIRK_FUSED_GATE_UP = 1u << 12,  /* one gate/up projection (phi3) */
  HN_QUIRK_CONV1D = 1u << 13,         /* weights stored [in, out] (gpt2 Conv1D) */
  HN_QUIRK_LEARNED_POS = 1u << 14,    /* learned absolute positions (gpt2, opt) */
  HN_QUIRK_ALIBI = 1u << 15,          /* ALiBi biases instead of RoPE (bloom, falcon with alibi) */
  HN_QUIRK_ROPE_INTERLEAVED = 1u << 16, /* GPT-J style rotary on adjacent pairs */
  HN_QUIRK_PARTIAL_ROTARY = 1u << 17, /* rotary on the first part of each head only */
  HN_QUIRK_EMBED_NORM = 1u << 18,     /* LayerNorm right after the embeddings (bloom) */
  HN_QUIRK_CLIP_QKV = 1u << 19,       /* clamp q/k/v to +-clip_qkv (olmo) */
  HN_QUIRK_LM_HEAD_BIAS = 1u << 20,   /* lm_head has a bias (phi) */
  HN_QUIRK_GATED_MLP = 1u << 21,      /* act(gate(x)) * up(x) */
  HN_QUIRK_NO_ROPE = 1u << 22,        /* no rotary embedding (gpt2, opt, bloom) */
  HN_QUIRK_ROPE_SLIDING_ONLY = 1u << 23, /* with a sliding window, full-attention layers have no RoPE
                                          * (cohere2, exaone4) */
  HN_QUIRK_MOE = 1u << 24,            /* routed mixture-of-experts MLP (mixtral, qwen2/3_moe, olmoe) */
  HN_QUIRK_PAD_POSITIONS = 1u << 25,  /* positions count from padding_idx + 1, pads sit at padding_idx (roberta) */
  HN_QUIRK_SINUSOIDAL_POS = 1u << 26, /* fixed sinusoidal positions (marian, pegasus) */
  HN_QUIRK_REL_BIAS_PER_LAYER = 1u << 27, /* T5 relative-position bias in every layer, not only the first (umt5) */
} HnQuirk;

typedef enum {
  HN_TASK_LOGITS = 1u << 0,
  HN_TASK_GENERATE = 1u << 1,
  HN_TASK_TRAIN = 1u << 2,
  HN_TASK_LORA = 1u << 3,
} HnTask;

typedef struct {
  const char *model_type;
  const char *const *aliases; /* NULL-terminated, may be NULL */
  const char *family;         /* display family ("llama", "gpt2", ...) */
  HnBlockKind block;          /* the default wiring; config.json may switch it (see loader) */
  HnNameScheme names;
  guint quirks;               /* HnQuirk bits */
  const char *default_act;    /* hidden_act when config.json has none */
  guint tasks;                /* HnTask bits this build runs */
  const char *fixture;        /* parity case in tests/fixtures/parity, or NULL */
} HnArchInfo;

/* A model_type of transformers' LM mappings that this build refuses, and why. */
typedef struct {
  const char *model_type;
  const char *reason;
} HnArchRefusal;

/* The refused model_types (sorted by name); *n_out receives the count. */
const HnArchRefusal *hn_arch_refusals (gsize *n_out);
/* Why `model_type` is refused (hn_arch_refusals, or a refused package or its text model:
 * hn_arch_package_refusals), or NULL when it is in neither list. */
const char *hn_arch_refusal_reason (const char *model_type);

/* A multimodal package of transformers whose text_config is a registered model_type: the loader runs
 * its text model (the towers are kept, not run), so the package's model_type is an alias of the text
 * one. `layout` is where the package keeps the text model's tensors (read off transformers 5.17's
 * models by tests/fixtures/list_package_keys.py: tests/fixtures/package-keys-transformers-5.17.json). */
typedef enum {
  HN_PACKAGE_LANGUAGE_MODEL,    /* model.language_model.X, lm_head (transformers 5) */
  HN_PACKAGE_LANGUAGE_MODEL_V4, /* language_model.model.X, language_model.lm_head (a nested CausalLM) */
  HN_PACKAGE_TEXT_MODEL,        /* model.text_model.X, lm_head (idefics2, emu3) */
  HN_PACKAGE_TEXT_MODEL_MLM,    /* model.text_model.X and a masked-LM head of its own: the text model's
                                 * head.X as projection_head.X, decoder.X as lm_head.X (modernvbert) */
  HN_PACKAGE_THINKER,           /* model.X, lm_head beside audio_tower / visual (an omni thinker alone) */
  HN_PACKAGE_OMNI,              /* thinker.model.X, thinker.lm_head beside thinker.audio_tower,
                                 * thinker.visual, talker and token2wav / code2wav (the omni model) */
} HnPackageLayout;

typedef struct {
  const char *package;         /* the package's model_type */
  const char *text_model_type; /* its text_config's model_type (registered) */
  HnPackageLayout layout;
} HnArchPackage;

/* The package aliases, sorted by package; *n_out receives the count. */
const HnArchPackage *hn_arch_packages (gsize *n_out);
/* The package row of model_type `package`, or NULL. */
const HnArchPackage *hn_arch_package_lookup (const char *package);
/* Where a package of `layout` keeps the text checkpoint's tensor `text_name` (new string). */
char *hn_arch_package_tensor_name (HnPackageLayout layout, const char *text_name);
/* The text checkpoint's name of the package's tensor `name`, or NULL when it is not the text model's
 * (a tower or projector of the package). */
char *hn_arch_package_text_name (HnPackageLayout layout, const char *name);

/* A multimodal package whose text model does not run here, refused by its name and by its text
 * model's: for the text model_types that transformers builds only inside their package (so outside
 * the LM mappings that hn_arch_refusals covers), this is where a load finds its reason. */
typedef struct {
  const char *package;         /* the package's model_type */
  const char *text_model_type; /* its text_config's model_type */
  const char *reason;
} HnArchPackageRefusal;

/* The refused packages, sorted by package; *n_out receives the count. */
const HnArchPackageRefusal *hn_arch_package_refusals (gsize *n_out);

/* All registered architectures, in table order; *n_out receives the count. */
const HnArchInfo *hn_arch_list (gsize *n_out);

/* Finds model_type or an alias (case-sensitive like transformers). Fails
 * closed with HN_ERROR_UNSUPPORTED naming the type and the reason for a
 * refused one (hn_arch_refusals), or listing what is known. */
const HnArchInfo *hn_arch_lookup (const char *model_type, GError **error);

/* Fails with HN_ERROR_UNSUPPORTED when `arch` does not support `task`. */
gboolean hn_arch_require_task (const HnArchInfo *arch, HnTask task, GError **error);

const char *hn_block_kind_name (HnBlockKind kind);
/* Encoders with a masked-LM head (encdec/encoder.h) and encoder-decoders (encdec/seq2seq.h). */
gboolean hn_arch_is_encoder (const HnArchInfo *arch);
gboolean hn_arch_is_seq2seq (const HnArchInfo *arch);
/* State-space decoders (ssm/mamba.h): generation carries a recurrent state per layer, not a KV cache. */
gboolean hn_arch_is_ssm (const HnArchInfo *arch);
/* Hybrid decoders: attention layers (KV cache) and Mamba-2 layers (a recurrent state) in one
 * transformer graph, as config.json's layer pattern says. */
gboolean hn_arch_is_hybrid (const HnArchInfo *arch);
/* What a model keeps per sequence while generating: a KV cache, a recurrent state per layer, or both
 * (hybrids: a KV cache for the attention layers, a state for the others). */
typedef enum { HN_CACHE_KV, HN_CACHE_STATE, HN_CACHE_KV_AND_STATE } HnCacheKind;
HnCacheKind hn_arch_cache_kind (const HnArchInfo *arch);
const char *hn_task_name (HnTask task);
/* Space-separated quirk names of `quirks` (new string). */
char *hn_quirks_to_string (guint quirks);

/* Architectures whose logits are parity-verified: rows claiming logits with a fixture (the parity test
 * runs every such fixture, so a row cannot claim support without passing it). */
guint hn_arch_count_parity_verified (void);

/* The registry as JSON: [{"model_type", "aliases", "family", "block", "quirks",
 * "tasks": {"logits": bool, ...}, "parity_fixture"}...]. */
char *hn_arch_list_to_json (void);

/* The same as a Markdown page (the generated docs page architectures.md):
 * the parity-verified count and one table row per model_type. */
char *hn_arch_list_to_markdown (void);

G_END_DECLS
