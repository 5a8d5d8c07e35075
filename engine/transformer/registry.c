#include "transformer/registry.h"
#include "base/hn-error.h"

#include <json-glib/json-glib.h>
#include <string.h>

/* What the Vulkan transformer runs: each DEC family passes its parity fixture
 * (tests/engine/test-transformer-parity.c); training/LoRA bits come with the
 * training module. */
#define DEC (HN_TASK_LOGITS | HN_TASK_GENERATE)
/* + 4 AdamW steps matching PyTorch in test-train-parity (full; LoRA with the <fixture>_lora case) */
#define DEC_T (DEC | HN_TASK_TRAIN)
#define DEC_TL (DEC | HN_TASK_TRAIN | HN_TASK_LORA)
/* encoders: masked-LM logits (tests/engine/test-encdec-parity.c) */
#define ENC (HN_TASK_LOGITS)
#define ENC_Q (HN_QUIRK_LAYERNORM | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE | HN_QUIRK_LM_HEAD_BIAS)
/* encoder-decoders: logits given decoder ids, greedy and beam generation (test-encdec-parity.c) */
#define S2S (HN_TASK_LOGITS | HN_TASK_GENERATE)
#define S2S_Q (HN_QUIRK_LAYERNORM | HN_QUIRK_NO_ROPE | HN_QUIRK_LM_HEAD_BIAS)

static const char *const falcon_aliases[] = { "RefinedWeb", "RefinedWebModel", NULL };
static const char *const neox_aliases[] = { "gpt-neox", NULL };
static const char *const xlmr_aliases[] = { "xlm_roberta", NULL };
static const char *const gpt2_aliases[] = { "gpt-sw3", NULL };              /* GPT2LMHeadModel in the causal mapping */
static const char *const gemma3_aliases[] = { "gemma3", NULL };             /* the package: its text_config runs */
/* granite4_vision's text_config model_type: Granite4VisionTextModel is granite's math (embedding,
 * attention, residual multipliers and logits_scaling, same names and defaults) plus deepstack
 * injection of image features, which text alone never takes */
static const char *const granite_aliases[] = { "granite4_vision_text", NULL };

#define RMS_GATED (HN_QUIRK_GATED_MLP)
static const HnArchInfo archs[] = {
  { "llama", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC_TL, "llama" },
  { "mistral", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "mistral" },
  { "qwen2", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "qwen2" },
  { "qwen3", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_QK_NORM_HEAD, "silu", DEC_T,
    "qwen3" },
  { "gemma", NULL, "gemma", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_EMBED_SCALE_SQRT, "gelu_pytorch_tanh", DEC_T, "gemma" },
  { "gemma2", NULL, "gemma", HN_BLOCK_SANDWICH, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_SOFTCAP | HN_QUIRK_SLIDING_ALTERNATE,
    "gelu_pytorch_tanh", DEC, "gemma2" },
  { "phi3", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_PHI3,
    RMS_GATED | HN_QUIRK_FUSED_QKV | HN_QUIRK_FUSED_GATE_UP | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC_T, "phi3" },
  { "olmo", NULL, "olmo", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_PARAMS | HN_QUIRK_CLIP_QKV, "silu", DEC, "olmo" },
  { "olmo2", NULL, "olmo", HN_BLOCK_POST_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_QK_NORM_FULL, "silu", DEC,
    "olmo2" },
  { "granite", granite_aliases, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MULTIPLIERS, "silu",
    DEC, "granite" },
  { "cohere", NULL, "cohere", HN_BLOCK_PARALLEL, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_LOGIT_SCALE | HN_QUIRK_ROPE_INTERLEAVED, "silu",
    DEC, "cohere" },
  { "stablelm", NULL, "stablelm", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC, "stablelm" },
  { "phi", NULL, "phi", HN_BLOCK_PARALLEL, HN_NAMES_PHI,
    HN_QUIRK_LAYERNORM | HN_QUIRK_PARTIAL_ROTARY | HN_QUIRK_LM_HEAD_BIAS, "gelu_new", DEC, "phi" },
  { "starcoder2", NULL, "starcoder2", HN_BLOCK_PRE_NORM, HN_NAMES_STARCODER2, HN_QUIRK_LAYERNORM,
    "gelu_pytorch_tanh", DEC, "starcoder2" },
  { "gpt2", gpt2_aliases, "gpt2", HN_BLOCK_PRE_NORM, HN_NAMES_GPT2,
    HN_QUIRK_LAYERNORM | HN_QUIRK_CONV1D | HN_QUIRK_FUSED_QKV | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE, "gelu_new",
    DEC_TL, "gpt2" },
  { "gpt_neox", neox_aliases, "gpt_neox", HN_BLOCK_PARALLEL_2NORM, HN_NAMES_GPT_NEOX,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_PARTIAL_ROTARY, "gelu", DEC_T, "gpt_neox" },
  { "gptj", NULL, "gptj", HN_BLOCK_PARALLEL, HN_NAMES_GPTJ,
    HN_QUIRK_LAYERNORM | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY | HN_QUIRK_LM_HEAD_BIAS, "gelu_new", DEC,
    "gptj" },
  { "opt", NULL, "opt", HN_BLOCK_PRE_NORM, HN_NAMES_OPT, HN_QUIRK_LAYERNORM | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE,
    "relu", DEC, "opt" },
  { "bloom", NULL, "bloom", HN_BLOCK_PRE_NORM, HN_NAMES_BLOOM,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_ALIBI | HN_QUIRK_EMBED_NORM | HN_QUIRK_NO_ROPE, "gelu", DEC,
    "bloom" },
  { "falcon", falcon_aliases, "falcon", HN_BLOCK_PARALLEL, HN_NAMES_FALCON, HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV,
    "gelu", DEC, "falcon" },
  /* breadth (issue 11): dense decoders the same graph runs, each with its fixture */
  { "helium", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_ROPE_INTERLEAVED, "silu", DEC,
    "helium" },
  { "arcee", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, 0, "relu2", DEC, "arcee" },
  { "ernie4_5", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_ROPE_INTERLEAVED, "silu", DEC,
    "ernie4_5" },
  { "seed_oss", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "seed_oss" },
  { "smollm3", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "smollm3" },
  { "olmo3", NULL, "olmo", HN_BLOCK_POST_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_QK_NORM_FULL, "silu", DEC, "olmo3" },
  { "exaone4", NULL, "exaone", HN_BLOCK_POST_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_ROPE_SLIDING_ONLY, "silu", DEC, "exaone4" },
  { "gemma3_text", gemma3_aliases, "gemma", HN_BLOCK_SANDWICH, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_QK_NORM_HEAD, "gelu_pytorch_tanh", DEC,
    "gemma3_text" },
  /* Gemma 4 unified: gemma3's sandwich with plain-weight RMSNorms, per-layer head dims, proportional
   * partial rotary on the full-attention layers, weightless value norms and layer scalars
   * (transformer-config.c: gemma4_from_config) */
  { "gemma4_unified_text", NULL, "gemma", HN_BLOCK_SANDWICH, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_SOFTCAP, "gelu_pytorch_tanh", DEC,
    "gemma4_unified_text" },
  { "nemotron", NULL, "nemotron", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_PARTIAL_ROTARY, "relu2", DEC, "nemotron" },
  { "glm", NULL, "glm", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_FUSED_GATE_UP | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC, "glm" },
  { "glm4", NULL, "glm", HN_BLOCK_SANDWICH, HN_NAMES_GLM4,
    RMS_GATED | HN_QUIRK_FUSED_GATE_UP | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC, "glm4" },
  /* the text models of GLM-4.1V / 4.6V and GLM-OCR: GLM-4 layers; on text alone the three multimodal
   * rotary streams are equal, which is GLM-4's partial interleaved rotary. GLM-OCR drops the q/k/v biases */
  { "glm4v_text", NULL, "glm", HN_BLOCK_SANDWICH, HN_NAMES_GLM4,
    RMS_GATED | HN_QUIRK_FUSED_GATE_UP | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC, "glm4v_text" },
  { "glm_ocr_text", NULL, "glm", HN_BLOCK_SANDWICH, HN_NAMES_GLM4,
    RMS_GATED | HN_QUIRK_FUSED_GATE_UP | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC,
    "glm_ocr_text" },
  { "persimmon", NULL, "persimmon", HN_BLOCK_PRE_NORM, HN_NAMES_PERSIMMON,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_PARTIAL_ROTARY, "relu2", DEC,
    "persimmon" },
  { "gpt_bigcode", NULL, "gpt2", HN_BLOCK_PRE_NORM, HN_NAMES_BIGCODE,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE, "gelu_pytorch_tanh", DEC,
    "gpt_bigcode" },
  { "cohere2", NULL, "cohere", HN_BLOCK_PARALLEL, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_LOGIT_SCALE | HN_QUIRK_ROPE_INTERLEAVED |
      HN_QUIRK_ROPE_SLIDING_ONLY,
    "silu", DEC, "cohere2" },
  { "gpt_neo", NULL, "gpt_neo", HN_BLOCK_PRE_NORM, HN_NAMES_GPT_NEO,
    HN_QUIRK_LAYERNORM | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE, "gelu_new", DEC, "gpt_neo" },
  { "mpt", NULL, "mpt", HN_BLOCK_PRE_NORM, HN_NAMES_MPT,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_FUSED_QKV | HN_QUIRK_ALIBI | HN_QUIRK_NO_ROPE, "gelu", DEC,
    "mpt" },
  { "codegen", NULL, "gptj", HN_BLOCK_PARALLEL, HN_NAMES_CODEGEN,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_PARTIAL_ROTARY |
      HN_QUIRK_LM_HEAD_BIAS,
    "gelu_new", DEC, "codegen" },
  /* issue 25 */
  { "apertus", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_APERTUS, HN_QUIRK_QK_NORM_HEAD, "xielu", DEC, "apertus" },
  { "ministral", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "ministral" },
  { "ministral3", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "ministral3" },
  { "cwm", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "cwm" },
  { "vaultgemma", NULL, "gemma", HN_BLOCK_PRE_NORM, HN_NAMES_VAULTGEMMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_SOFTCAP | HN_QUIRK_SLIDING_ALTERNATE,
    "gelu_pytorch_tanh", DEC, "vaultgemma" },
  { "hunyuan_v1_dense", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_HUNYUAN, RMS_GATED, "silu", DEC,
    "hunyuan_v1_dense" },
  /* HunYuan-VL / HunyuanOCR's text model: hunyuan_v1_dense with its q/k norms always built (no
   * use_qk_norm); its multimodal rotary (mrope_section, any number of axes) turns text alone as the
   * 1-D rope does (transformer-config.c: mrope_text) */
  { "hunyuan_vl_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_HUNYUAN, RMS_GATED, "silu", DEC,
    "hunyuan_vl_text" },
  { "bitnet", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_BITNET, RMS_GATED, "relu2", DEC, "bitnet" },
  { "xglm", NULL, "xglm", HN_BLOCK_PRE_NORM, HN_NAMES_XGLM,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NO_ROPE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_SINUSOIDAL_POS, "gelu", DEC, "xglm" },
  { "biogpt", NULL, "xglm", HN_BLOCK_PRE_NORM, HN_NAMES_BIOGPT,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NO_ROPE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_LEARNED_POS, "gelu", DEC, "biogpt" },
  { "ctrl", NULL, "ctrl", HN_BLOCK_PRE_NORM, HN_NAMES_CTRL,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NO_ROPE | HN_QUIRK_EMBED_SCALE_SQRT | HN_QUIRK_SINUSOIDAL_POS | HN_QUIRK_LM_HEAD_BIAS,
    "relu", DEC, "ctrl" },
  { "openai-gpt", NULL, "gpt2", HN_BLOCK_POST_LN, HN_NAMES_OPENAI_GPT,
    HN_QUIRK_LAYERNORM | HN_QUIRK_CONV1D | HN_QUIRK_FUSED_QKV | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE, "gelu_new", DEC,
    "openai-gpt" },
  { "bert-generation", NULL, "bert", HN_BLOCK_POST_LN, HN_NAMES_BERT_GENERATION,
    HN_QUIRK_LAYERNORM | HN_QUIRK_LEARNED_POS | HN_QUIRK_NO_ROPE | HN_QUIRK_EMBED_NORM | HN_QUIRK_LM_HEAD_BIAS, "gelu",
    DEC, "bert-generation" },
  { "gpt_neox_japanese", NULL, "gpt_neox", HN_BLOCK_PRE_NORM, HN_NAMES_GPT_NEOX_JP,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_PARTIAL_ROTARY, "gelu", DEC, "gpt_neox_japanese" },
  { "diffllama", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_DIFFLLAMA, RMS_GATED, "silu", DEC, "diffllama" },
  { "modernbert-decoder", NULL, "modernbert", HN_BLOCK_PRE_NORM, HN_NAMES_MODERNBERT_DECODER,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_EMBED_NORM | HN_QUIRK_GATED_MLP | HN_QUIRK_FUSED_GATE_UP |
      HN_QUIRK_LM_HEAD_BIAS,
    "gelu", DEC, "modernbert-decoder" },
  /* issue 25: unmapped decoders */
  { "jais2", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, HN_QUIRK_LAYERNORM, "relu2", DEC, "jais2" },
  { "nanochat", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_NANOCHAT, HN_QUIRK_EMBED_NORM | HN_QUIRK_SOFTCAP, "relu2",
    DEC, "nanochat" },
  { "hyperclovax", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MULTIPLIERS, "silu", DEC,
    "hyperclovax" },
  { "granite_swa", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MULTIPLIERS, "silu", DEC,
    "granite_swa" },
  { "granitemoe_swa", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MULTIPLIERS | HN_QUIRK_MOE, "silu", DEC, "granitemoe_swa" },
  { "solar_open", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "solar_open" },
  { "minimax_m2", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_FULL,
    "silu", DEC, "minimax_m2" },
  { "aria_text", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "aria_text" },
  { "youtu", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "youtu" },
  { "exaone_moe", NULL, "exaone", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_ROPE_SLIDING_ONLY, "silu", DEC, "exaone_moe" },
  { "hy_v3", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD,
    "silu", DEC, "hy_v3" },
  { "mellum", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD,
    "silu", DEC, "mellum" },
  { "axk1", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC, "axk1" },
  { "afmoe", NULL, "deepseek", HN_BLOCK_SANDWICH, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_ROPE_SLIDING_ONLY, "silu", DEC, "afmoe" },
  { "cohere2_moe", NULL, "cohere", HN_BLOCK_PARALLEL, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_LOGIT_SCALE | HN_QUIRK_ROPE_INTERLEAVED |
      HN_QUIRK_ROPE_SLIDING_ONLY | HN_QUIRK_MOE,
    "silu", DEC, "cohere2_moe" },
  { "laguna", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD,
    "silu", DEC, "laguna" },
  { "mimo_v2_flash", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "mimo_v2_flash" },
  /* issue 25: text models built from their packages' pieces. muse_glimmer_text: gemma's (1 + w)
   * sandwich (post norms with post_norm_eps), weightless embedding and per-head q/k norms, a sigmoid
   * gate_proj on the attention output, NoPE where layer_rope_theta is 0, a plain-weight final norm,
   * logits * output_multiplier before the softcap (transformer-config.c: muse_glimmer_from_config).
   * step3p5: laguna's layout with (1 + w) norms, a sigmoid gate per head (g_proj [H, C]), DeepseekV3's
   * router with a shared expert, and SwiGLU clamps by layer (step3p5_from_config) */
  { "muse_glimmer_text", NULL, "gemma", HN_BLOCK_SANDWICH, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_EMBED_NORM | HN_QUIRK_SOFTCAP | HN_QUIRK_QK_NORM_HEAD, "silu", DEC,
    "muse_glimmer_text" },
  { "step3p5", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD, "silu", DEC, "step3p5" },
  /* issue 25: the text models of vision-language packages, text in and text out. Their multimodal
   * rotary (mrope_section) turns text alone as the 1-D rope does (transformer-config.c: mrope_text).
   * qwen2(_5)_vl_text is qwen2 (q/k/v biases), qwen3_vl_text qwen3 (per-head q/k RMSNorm),
   * qwen3_vl_moe_text qwen3_moe with its experts stacked (transformer-weights.c: take_moe);
   * paddleocr_vl_text is ernie4_5's layout but rotates halves (rotate_half), not pairs. */
  { "qwen2_vl_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "qwen2_vl_text" },
  { "qwen2_5_vl_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "qwen2_5_vl_text" },
  { "qwen3_vl_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_QK_NORM_HEAD, "silu", DEC,
    "qwen3_vl_text" },
  { "qwen3_vl_moe_text", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD, "silu", DEC, "qwen3_vl_moe_text" },
  { "paddleocr_vl_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC,
    "paddleocr_vl_text" },
  /* issue 25: more package text models, each run on its own transformers fixture. The omni thinkers'
   * text models: qwen2_5_omni_text is qwen2_5_vl_text's layers (q/k/v biases, chunked mrope),
   * qwen3_omni_moe_text qwen3_vl_moe_text's (its router honours norm_topk_prob). cosmos3_edge_text is
   * llama attention with arcee's ungated relu2 MLP under the names mlp.fc1 / fc2 (transformer-weights.c:
   * names_for) and qwen3_vl's interleaved mrope. deepseek_ocr2_text: llama attention (no MLA) with
   * DeepseekV2's softmax router (greedy or group-limited, scaled, not renormalised) and shared experts on
   * mlp_layer_types' sparse layers. ernie4_5_vl_moe_text: ernie4_5_moe's router and shared experts over
   * its text experts (mlp.text_moe; the vision experts run only on image tokens, never on text); its
   * rotary pre-permutes the frequencies by mrope_section, which text alone undoes to ernie's pairs. */
  { "qwen2_5_omni_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC,
    "qwen2_5_omni_text" },
  { "qwen3_omni_moe_text", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD, "silu", DEC, "qwen3_omni_moe_text" },
  { "cosmos3_edge_text", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, 0, "relu2", DEC, "cosmos3_edge_text" },
  { "deepseek_ocr2_text", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "deepseek_ocr2_text" },
  { "ernie4_5_vl_moe_text", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_ROPE_INTERLEAVED, "silu", DEC, "ernie4_5_vl_moe_text" },
  /* Emu3's text model (Emu3TextModel / Emu3ForCausalLM): llama's layers as they are (its decoder layer adds
   * a dropout on each residual branch, which inference never applies) */
  { "emu3_text_model", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "emu3_text_model" },
  /* Llama 3.2 Vision's text model on text alone: MllamaTextModel skips its cross_attention_layers when no
   * image states are given (their tensors are kept, not run); the others are llama's self-attention
   * layers; embed_tokens has 8 rows past the vocabulary (transformer-config.c: mllama_layers) */
  { "mllama_text_model", NULL, "llama", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC,
    "mllama_text_model" },
  /* chunked attention, NoPE layers with query temperature, experts scaled on their inputs */
  { "llama4_text", NULL, "llama4", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA4,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_ROPE_INTERLEAVED, "silu", DEC, "llama4_text" },
  /* routed mixture of experts (hn_op_moe_route picks k experts per token) */
  { "mixtral", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC_T, "mixtral" },
  { "olmoe", NULL, "olmoe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_FULL,
    "silu", DEC, "olmoe" },
  { "qwen3_moe", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD,
    "silu", DEC, "qwen3_moe" },
  { "qwen2_moe", NULL, "qwen_moe", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "qwen2_moe" },
  { "granitemoe", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MULTIPLIERS | HN_QUIRK_MOE,
    "silu", DEC, "granitemoe" },
  { "phimoe", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_MOE, "silu",
    DEC, "phimoe" },
  { "gpt_oss", NULL, "gpt_oss", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC, "gpt_oss" },
  { "dbrx", NULL, "dbrx", HN_BLOCK_PRE_NORM, HN_NAMES_DBRX,
    RMS_GATED | HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_FUSED_QKV | HN_QUIRK_CLIP_QKV | HN_QUIRK_MOE,
    "silu", DEC, "dbrx" },
  { "deepseek_v2", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "deepseek_v2" },
  { "deepseek_v3", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "deepseek_v3" },
  /* issue 25 */
  { "glm4_moe", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_PARTIAL_ROTARY,
    "silu", DEC, "glm4_moe" },
  /* GLM-4.5V's text model: glm4_moe without q/k norms, half-split partial rotary (text alone: equal
   * multimodal streams), experts stacked as gate_up_proj [E, 2F, C] / down_proj [E, C, F] */
  { "glm4v_moe_text", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_PARTIAL_ROTARY, "silu", DEC, "glm4v_moe_text" },
  { "dots1", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_HEAD,
    "silu", DEC, "dots1" },
  { "jetmoe", NULL, "jetmoe", HN_BLOCK_PRE_NORM, HN_NAMES_JETMOE, RMS_GATED | HN_QUIRK_MOE, "silu", DEC, "jetmoe" },
  { "granitemoeshared", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MULTIPLIERS | HN_QUIRK_MOE, "silu", DEC, "granitemoeshared" },
  { "flex_olmo", NULL, "olmoe", HN_BLOCK_POST_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_QK_NORM_FULL,
    "silu", DEC, "flex_olmo" },
  { "ernie4_5_moe", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA,
    RMS_GATED | HN_QUIRK_MOE | HN_QUIRK_ROPE_INTERLEAVED, "silu", DEC, "ernie4_5_moe" },
  { "hunyuan_v1_moe", NULL, "mixtral", HN_BLOCK_PRE_NORM, HN_NAMES_HUNYUAN, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "hunyuan_v1_moe" },
  /* issue 25: multi-head latent attention outside deepseek */
  { "minicpm3", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED, "silu", DEC, "minicpm3" },
  { "glm4_moe_lite", NULL, "deepseek", HN_BLOCK_PRE_NORM, HN_NAMES_LLAMA, RMS_GATED | HN_QUIRK_MOE, "silu", DEC,
    "glm4_moe_lite" },
  /* state-space decoders (ssm/mamba.c): logits and generation with a recurrent state per layer */
  { "mamba", NULL, "mamba", HN_BLOCK_MAMBA, HN_NAMES_MAMBA, HN_QUIRK_NO_ROPE, "silu", DEC, "mamba" },
  { "falcon_mamba", NULL, "mamba", HN_BLOCK_MAMBA, HN_NAMES_MAMBA, HN_QUIRK_NO_ROPE, "silu", DEC, "falcon_mamba" },
  { "mamba2", NULL, "mamba", HN_BLOCK_MAMBA, HN_NAMES_MAMBA2, HN_QUIRK_NO_ROPE, "silu", DEC, "mamba2" },
  /* RWKV-4: token-shift time mix (the WKV recurrence) and channel mix, same sessions as Mamba's */
  { "rwkv", NULL, "rwkv", HN_BLOCK_MAMBA, HN_NAMES_RWKV, HN_QUIRK_NO_ROPE | HN_QUIRK_LAYERNORM, "relu2", DEC, "rwkv" },
  /* hybrid decoders: attention + Mamba-2 layers, a KV cache and a recurrent state side by side */
  { "bamba", NULL, "bamba", HN_BLOCK_PRE_NORM, HN_NAMES_BAMBA, RMS_GATED, "silu", DEC, "bamba" },
  { "falcon_h1", NULL, "falcon_h1", HN_BLOCK_PRE_NORM, HN_NAMES_FALCON_H1, RMS_GATED, "silu", DEC, "falcon_h1" },
  { "jamba", NULL, "jamba", HN_BLOCK_PRE_NORM, HN_NAMES_JAMBA, RMS_GATED | HN_QUIRK_NO_ROPE | HN_QUIRK_MOE, "silu", DEC,
    "jamba" },
  { "granitemoehybrid", NULL, "granite", HN_BLOCK_PRE_NORM, HN_NAMES_GRANITEMOEHYBRID,
    RMS_GATED | HN_QUIRK_MULTIPLIERS | HN_QUIRK_MOE, "silu", DEC, "granitemoehybrid" },
  { "nemotron_h", NULL, "nemotron_h", HN_BLOCK_PRE_NORM, HN_NAMES_NEMOTRON_H, HN_QUIRK_NO_ROPE, "relu2", DEC,
    "nemotron_h" },
  /* attention layers and gated short causal convolutions (a carried conv state, no SSM) */
  /* gated attention layers (q_proj: query and a sigmoid output gate) and gated DeltaNet linear attention
   * (a conv state and a delta-rule state); (1 + w) RMSNorms */
  { "qwen3_next", NULL, "qwen3_next", HN_BLOCK_PRE_NORM, HN_NAMES_QWEN3_NEXT,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_MOE, "silu", DEC, "qwen3_next" },
  { "qwen3_5_text", NULL, "qwen3_next", HN_BLOCK_PRE_NORM, HN_NAMES_QWEN3_NEXT,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_QK_NORM_HEAD, "silu", DEC, "qwen3_5_text" },
  { "qwen3_5_moe_text", NULL, "qwen3_next", HN_BLOCK_PRE_NORM, HN_NAMES_QWEN3_NEXT,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_MOE, "silu", DEC, "qwen3_5_moe_text" },
  { "lfm2", NULL, "lfm2", HN_BLOCK_PRE_NORM, HN_NAMES_LFM2, RMS_GATED | HN_QUIRK_QK_NORM_HEAD, "silu", DEC, "lfm2" },
  { "lfm2_moe", NULL, "lfm2", HN_BLOCK_PRE_NORM, HN_NAMES_LFM2, RMS_GATED | HN_QUIRK_QK_NORM_HEAD | HN_QUIRK_MOE, "silu",
    DEC, "lfm2_moe" },
  /* Griffin: recurrent blocks (linear_y's gelu branch times the RG-LRU over a causal conv) and local
   * multi-query attention, (1 + w) RMSNorms, soft-capped logits */
  { "recurrent_gemma", NULL, "gemma", HN_BLOCK_PRE_NORM, HN_NAMES_RECURRENT_GEMMA,
    RMS_GATED | HN_QUIRK_NORM_PLUS_ONE | HN_QUIRK_PARTIAL_ROTARY, "gelu_pytorch_tanh", DEC, "recurrent_gemma" },
  /* encoders with their masked-LM head (encdec/encoder.c) */
  { "bert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC | HN_TASK_TRAIN, "bert" },
  { "roberta", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "roberta" },
  { "xlm-roberta", xlmr_aliases, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS,
    "gelu", ENC, "xlm-roberta" },
  { "distilbert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_DISTILBERT, ENC_Q, "gelu", ENC, "distilbert" },
  { "albert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_ALBERT, ENC_Q, "gelu_new", ENC, "albert" },
  { "electra", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_ELECTRA, ENC_Q, "gelu", ENC, "electra" },
  { "modernbert", NULL, "modernbert", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_MODERNBERT,
    HN_QUIRK_LAYERNORM | HN_QUIRK_NORM_NO_BIAS | HN_QUIRK_GATED_MLP | HN_QUIRK_SLIDING_ALTERNATE |
      HN_QUIRK_LM_HEAD_BIAS,
    "gelu", ENC, "modernbert" },
  /* issue 25 */
  { "camembert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "camembert" },
  { "data2vec-text", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu",
    ENC, "data2vec-text" },
  { "xlm-roberta-xl", NULL, "bert", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_XLMR_XL, ENC_Q | HN_QUIRK_PAD_POSITIONS,
    "gelu", ENC, "xlm-roberta-xl" },
  { "ernie", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC, "ernie" },
  { "megatron-bert", NULL, "bert", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_MEGATRON_BERT, ENC_Q, "gelu", ENC,
    "megatron-bert" },
  { "roformer", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_ROFORMER,
    HN_QUIRK_LAYERNORM | HN_QUIRK_ROPE_INTERLEAVED | HN_QUIRK_LM_HEAD_BIAS, "gelu", ENC, "roformer" },
  { "rembert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_REMBERT, ENC_Q, "gelu", ENC, "rembert" },
  { "esm", NULL, "bert", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_ESM, HN_QUIRK_LAYERNORM | HN_QUIRK_LM_HEAD_BIAS, "gelu", ENC,
    "esm" },
  { "xlm", NULL, "xlm", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_XLM, ENC_Q, "gelu", ENC, "xlm" },
  { "roberta-prelayernorm", NULL, "bert", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_ROBERTA_PRELN,
    ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC, "roberta-prelayernorm" },
  { "mpnet", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_MPNET, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "mpnet" },
  { "eurobert", NULL, "llama", HN_BLOCK_ENCODER_PRE_NORM, HN_NAMES_EUROBERT, RMS_GATED, "silu", ENC, "eurobert" },
  { "big_bird", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu_new", ENC, "big_bird" },
  { "nomic_bert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_NOMIC_BERT,
    HN_QUIRK_LAYERNORM | HN_QUIRK_FUSED_QKV | HN_QUIRK_GATED_MLP | HN_QUIRK_LM_HEAD_BIAS, "silu", ENC, "nomic_bert" },
  { "deberta-v2", NULL, "deberta", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_DEBERTA_V2, ENC_Q, "gelu", ENC,
    "deberta-v2" },
  { "deberta", NULL, "deberta", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_DEBERTA, ENC_Q, "gelu", ENC, "deberta" },
  { "mobilebert", NULL, "mobilebert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_MOBILEBERT, ENC_Q, "relu", ENC,
    "mobilebert" },
  { "ibert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "ibert" },
  { "tapas", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC, "tapas" },
  { "layoutlm", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC, "layoutlm" },
  { "xmod", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "xmod" },
  { "longformer", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu",
    ENC, "longformer" },
  { "roc_bert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC, "roc_bert" },
  { "luke", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q | HN_QUIRK_PAD_POSITIONS, "gelu", ENC,
    "luke" },
  { "fnet", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu_new", ENC, "fnet" },
  { "squeezebert", NULL, "bert", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_BERT, ENC_Q, "gelu", ENC, "squeezebert" },
  { "flaubert", NULL, "xlm", HN_BLOCK_ENCODER_POST_NORM, HN_NAMES_XLM, ENC_Q, "gelu", ENC, "flaubert" },
  /* encoder-decoders (encdec/seq2seq.c) */
  { "t5", NULL, "t5", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_T5, HN_QUIRK_NO_ROPE, "relu", S2S | HN_TASK_TRAIN, "t5" },
  { "mt5", NULL, "t5", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_T5, HN_QUIRK_NO_ROPE, "gelu_new", S2S, "mt5" },
  { "umt5", NULL, "t5", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_T5, HN_QUIRK_NO_ROPE | HN_QUIRK_REL_BIAS_PER_LAYER,
    "gelu_new", S2S, "umt5" },
  { "bart", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM,
    "gelu", S2S, "bart" },
  { "mbart", NULL, "bart", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM,
    "gelu", S2S, "mbart" },
  { "marian", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_SINUSOIDAL_POS, "gelu", S2S,
    "marian" },
  { "pegasus", NULL, "bart", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_SINUSOIDAL_POS, "gelu", S2S,
    "pegasus" },
  /* issue 25 */
  { "blenderbot", NULL, "bart", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_LEARNED_POS, "gelu", S2S,
    "blenderbot" },
  { "blenderbot-small", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART,
    S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM, "gelu", S2S, "blenderbot-small" },
  { "m2m_100", NULL, "bart", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_SINUSOIDAL_POS, "relu", S2S,
    "m2m_100" },
  { "plbart", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART,
    S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM, "gelu", S2S, "plbart" },
  { "mvp", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM,
    "gelu", S2S, "mvp" },
  { "longt5", NULL, "t5", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_T5, HN_QUIRK_NO_ROPE, "relu", S2S, "longt5" },
  { "led", NULL, "bart", HN_BLOCK_SEQ2SEQ_POST_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_LEARNED_POS | HN_QUIRK_EMBED_NORM,
    "gelu", S2S, "led" },
  { "pegasus_x", NULL, "bart", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_BART, S2S_Q | HN_QUIRK_SINUSOIDAL_POS, "gelu", S2S,
    "pegasus_x" },
  { "switch_transformers", NULL, "t5", HN_BLOCK_SEQ2SEQ_PRE_NORM, HN_NAMES_T5, HN_QUIRK_NO_ROPE | HN_QUIRK_MOE, "relu",
    S2S, "switch_transformers" },
};

/* Every other model_type of transformers 5.17's causal-LM, masked-LM and seq2seq-LM mappings
 * (tests/fixtures/parity/lm_model_types.json), refused by name with the reason; the registry test
 * checks that each listed type is registered or here. */
#define R_NOTEXT "not a text-only graph (speech, audio, image or multi-codebook model)"
/* shared by a text model_type of the LM mappings and its package (package_refusals) */
#define R_INKLING "short causal convolutions on q/k/v and sublayer inputs (a carried state) and learned relative-position logits are not built yet"
#define R_MINIMAX_M3 \
  "MiniMax M3's sparse attention layers (minimax_m3_sparse, from sparse_attention_freq: a lightning indexer keeps " \
  "each query's top key blocks) and its SwiGLU-OAI MLPs (gate and up clamped to swiglu_limit, sigmoid gain " \
  "swiglu_alpha, in the dense and shared-expert MLPs as well as the experts) are not built yet"
#define R_VOXTRAL_RT \
  "Voxtral Realtime's text layers scale each MLP input by 1 + ada_rms_norm(t_cond), a sinusoidal embedding of the " \
  "transcription delay that VoxtralRealtimeForConditionalGeneration passes in (its text model alone gets none), and " \
  "the package adds an audio frame's embedding to every token (its forward requires input_features)"
static const HnArchRefusal refusals[] = {
  { "axk2", "DeepSeek sparse attention (an indexer choosing keys) and low-rank gated RMSNorms are not built yet" },
  { "bigbird_pegasus", "block-sparse attention (BigBird) in the encoder-decoder is not built yet" },
  { "blt", "byte-latent patching (local encoder / decoder around a latent transformer) is not built yet" },
  { "cohere_compass_text", "no parity fixture: transformers 5.17 fails to build it as a causal LM (KeyError \"full_attention\"), so its modeling file is not mapped" },
  { "convbert", "span-based dynamic convolution heads are not built yet" },
  { "cpmant", "CPM-Ant's segment / relative-position layout is not built yet" },
  { "deepseek_v32", "DeepSeek sparse attention (an indexer choosing keys) is not built yet" },
  { "deepseek_v4", "hyper-connections (Sinkhorn-mixed residual streams), compressed sparse attention with an indexer and hash-routed experts are not built yet" },
  { "doge", "dynamic mask attention and cross-domain MoE (Doge) are not built yet" },
  { "encoder-decoder", "a composite of two separately configured models (EncoderDecoderModel); load its parts" },
  { "esmc", "ESM C's protein encoder is not built yet" },
  { "fsmt", "separate source and target vocabularies (FSMT) are not built yet" },
  { "funnel", "funnel pooling (sequence compression between blocks) is not built yet" },
  { "gemma3n", "Gemma 3n's AltUp, Laurel blocks and per-layer embeddings are not built yet" },
  { "gemma3n_text", "Gemma 3n's AltUp, Laurel blocks and per-layer embeddings are not built yet" },
  { "gemma4", "Gemma 4's per-layer embeddings (hidden_size_per_layer_input), K/V sharing across layers (num_kv_shared_layers), attention_k_eq_v and the MoE block (enable_moe_block) are not built yet" },
  { "gemma4_assistant", "Gemma4AssistantForCausalLM is its own class over an AutoConfig text_config (not Gemma4ForCausalLM, so not an alias of gemma4_text), and its modeling file is not among the sources read" },
  { "gemma4_text", "Gemma 4's per-layer embeddings (hidden_size_per_layer_input), K/V sharing across layers (num_kv_shared_layers), attention_k_eq_v and the MoE block (enable_moe_block) are not built yet" },
  { "gemma4_unified_assistant", "Gemma4UnifiedAssistantForCausalLM is its own class over an AutoConfig text_config (not Gemma4UnifiedForCausalLM, so not an alias of gemma4_unified_text), and its modeling file is not among the sources read" },
  { "git", R_NOTEXT " (GIT conditions on image features)" },
  { "glm_moe_dsa", "DeepSeek sparse attention (an indexer choosing keys) is not built yet" },
  { "hrm_text", "hierarchical recurrent reasoning modules are not built yet" },
  { "hy_v4", "hyper-connections and DeepSeek sparse attention (an indexer choosing keys) with learnable sinks are not built yet" },
  { "inkling_text", R_INKLING },
  { "jina_embeddings_v3", "task LoRA adapters inside an XLM-R encoder are not built yet" },
  { "kimi_linear", "linear-attention / gated delta-rule layers are not built yet (Kimi delta attention)" },
  { "longcat_flash", "LongCat-Flash layers (two attention and two MLP sublayers each, zero-computation experts) are not built yet" },
  { "minimax", "linear-attention / gated delta-rule layers are not built yet (lightning attention layers)" },
  { "minimax_m3_vl_text", R_MINIMAX_M3 },
  { "moshi", R_NOTEXT },
  { "mra", "multi-resolution approximate attention is not built yet" },
  { "musicgen", R_NOTEXT },
  { "musicgen_melody", R_NOTEXT },
  { "neomme", R_NOTEXT },
  { "nllb-moe", "encoder-decoder MoE layers with top-2 capacity routing are not built yet" },
  { "nystromformer", "Nystrom-approximated attention is not built yet" },
  { "olmo_hybrid", "linear-attention / gated delta-rule layers are not built yet (hybrid recurrent layers)" },
  { "perceiver", R_NOTEXT " (Perceiver IO latent cross-attention)" },
  { "phi4_multimodal", R_NOTEXT },
  { "prophetnet", "its decoder (a main stream plus ngram predicting streams attending over it, with relative-bucket "
                  "biases projected from each query's hidden state; the logits are the first predicting stream's) is "
                  "not built yet" },
  { "qwen4_exp", "hyper-connections, n-gram embeddings, gated DeltaNet linear-attention layers and indexer-sparse attention are not built yet" },
  { "qwen4_exp_text", "hyper-connections, n-gram embeddings, gated DeltaNet linear-attention layers and indexer-sparse attention are not built yet" },
  { "reformer", "LSH and chunked local attention with reversible layers are not built yet" },
  { "seamless_m4t", R_NOTEXT },
  { "seamless_m4t_v2", R_NOTEXT },
  { "t5gemma", "Gemma-2-style encoder-decoder layers (T5Gemma) are not built yet" },
  { "t5gemma2", "Gemma-3-style encoder-decoder layers (T5Gemma 2) are not built yet" },
  { "trocr", R_NOTEXT " (an OCR decoder over image features)" },
  { "voxtral_realtime", R_VOXTRAL_RT },
  { "whisper", R_NOTEXT },
  { "xlnet", "two-stream relative attention with memory is not built yet" },
  { "xlstm", "xLSTM (mLSTM / sLSTM) recurrences are not built yet" },
  { "yoso", "LSH-sampled (YOSO) attention is not built yet" },
  { "zamba", "its shared attention block over [hidden, embeddings] between Mamba layers is not built yet" },
  { "zamba2", "its shared attention blocks over [hidden, embeddings] with per-layer LoRA adapters are not built yet" },
  { "zaya", "ZAYA's compressed convolutional attention (causal q/k convolutions with a carried state, delayed values), MLP router and learned residual scales are not built yet" },
};

/* Multimodal packages whose text model runs here (registry.h): vision, audio and OCR packages alike,
 * text in and text out (the towers are kept in a checkpoint, not run). Layouts:
 * tests/fixtures/package-keys-transformers-5.17.json (aya_vision, idefics3 and smolvlm read off configs
 * with the overrides of list_package_keys.py; paddleocr_vl off the package's own language_model, as no
 * Auto class builds its text config alone). granite4_vision, hunyuan_vl and perception_lm could not be
 * listed (their default configs do not build on the meta device): their layout, model.language_model.X
 * beside a top-level lm_head.weight, is read from their 5.17 modeling files (self.model with
 * self.language_model inside, _tied_weights_keys naming model.language_model.embed_tokens).
 * emu3 and mllama were not in the listing's text types: Emu3ForConditionalGeneration keeps
 * self.model.text_model (model.text_model.X) beside lm_head, MllamaForConditionalGeneration
 * self.model.language_model beside lm_head (their 5.x modeling files and conversion_mapping.py, whose
 * renamings also read the hub's older text_model.model.X / language_model.model.X). modernvbert
 * (ModernVBertForMaskedLM, listed) keeps modernbert's masked-LM head outside its text model, as
 * projection_head and lm_head.
 * Issue 25: cosmos3_edge is listed (model.language_model. beside lm_head); ernie4_5_vl_moe is listed
 * with the prefix "model.language_" (the common prefix of its text tensors, all under
 * model.language_model.: Ernie4_5_VLMoeModel's self.language_model). The listing failed for
 * deepseek_ocr2 (its text config has no mlp_layer_types by default): DeepseekOcr2ForConditionalGeneration
 * keeps self.model.language_model beside lm_head (_tied_weights_keys names
 * model.language_model.embed_tokens). The omni thinkers failed to list too (no AutoModel for their text
 * config): Qwen2_5OmniThinkerForConditionalGeneration / Qwen3OmniMoeThinkerForConditionalGeneration keep
 * the text model as self.model (model.X) and self.lm_head beside self.audio_tower and self.visual
 * (HN_PACKAGE_THINKER); Qwen2_5OmniForConditionalGeneration / Qwen3OmniMoeForConditionalGeneration hold
 * self.thinker beside self.talker and self.token2wav / self.code2wav (HN_PACKAGE_OMNI, thinker.X), their
 * config thinker_config.text_config (formats/model-config.c follows it).
 * Left out:
 * - paligemma: PaliGemmaConfig sets text_config.use_bidirectional_attention True, so its Gemma
 *   attention is not causal (is_causal False); with input_ids alone the mask it passes is plain
 *   causal, but SDPA (the default) drops an unpadded causal mask and then attends the whole prompt
 *   both ways, while eager keeps it causal. Text alone is a prefix-LM prompt (bidirectional prefill,
 *   causal decoding), which is not built; positions count from 1, embeddings are Gemma's sqrt(hidden)
 *   scaled ones.
 * - florence2: its language model is BART (text alone: the encoder on the scaled shared embeddings,
 *   the decoder from text_config.decoder_start_token_id, lm_head without final_logits_bias), but the
 *   encoder-decoder loader (encdec/) does not read package layouts yet.
 * - colpali, colqwen2: retrieval models (ColPaliForRetrieval / ColQwen2ForRetrieval project the
 *   last hidden states to normalised multi-vector embeddings); no language-model head. */
#define PKG(p, t, l) { p, t, HN_PACKAGE_##l }
static const HnArchPackage packages[] = {
  PKG ("aria", "aria_text", LANGUAGE_MODEL),
  PKG ("audioflamingo3", "qwen2", LANGUAGE_MODEL),
  PKG ("aya_vision", "cohere2", LANGUAGE_MODEL),
  PKG ("blip-2", "opt", LANGUAGE_MODEL_V4),
  PKG ("cohere2_vision", "cohere2", LANGUAGE_MODEL),
  PKG ("cosmos3_edge", "cosmos3_edge_text", LANGUAGE_MODEL),
  PKG ("cosmos3_omni", "qwen3_vl_text", LANGUAGE_MODEL),
  PKG ("deepseek_ocr2", "deepseek_ocr2_text", LANGUAGE_MODEL),
  PKG ("deepseek_vl", "llama", LANGUAGE_MODEL),
  PKG ("deepseek_vl_hybrid", "llama", LANGUAGE_MODEL),
  PKG ("emu3", "emu3_text_model", TEXT_MODEL),
  PKG ("ernie4_5_vl_moe", "ernie4_5_vl_moe_text", LANGUAGE_MODEL),
  PKG ("exaone4_5", "exaone4", LANGUAGE_MODEL),
  PKG ("fast_vlm", "qwen2", LANGUAGE_MODEL),
  PKG ("fun_asr_nano", "qwen3", LANGUAGE_MODEL),
  PKG ("fuyu", "persimmon", LANGUAGE_MODEL),
  PKG ("gemma4_unified", "gemma4_unified_text", LANGUAGE_MODEL),
  PKG ("glm46v", "glm4v_text", LANGUAGE_MODEL),
  PKG ("glm4v", "glm4v_text", LANGUAGE_MODEL),
  PKG ("glm4v_moe", "glm4v_moe_text", LANGUAGE_MODEL),
  PKG ("glm_ocr", "glm_ocr_text", LANGUAGE_MODEL),
  PKG ("glmasr", "llama", LANGUAGE_MODEL),
  PKG ("glmga", "glm4v_text", LANGUAGE_MODEL),
  PKG ("got_ocr2", "qwen2", LANGUAGE_MODEL),
  PKG ("granite4_vision", "granite", LANGUAGE_MODEL),
  PKG ("granite_speech", "granite", LANGUAGE_MODEL),
  PKG ("granite_speech_plus", "granite", LANGUAGE_MODEL),
  PKG ("hunyuan_vl", "hunyuan_vl_text", LANGUAGE_MODEL),
  PKG ("idefics2", "mistral", TEXT_MODEL),
  PKG ("idefics3", "llama", TEXT_MODEL),
  PKG ("instructblip", "opt", LANGUAGE_MODEL_V4),
  PKG ("instructblipvideo", "opt", LANGUAGE_MODEL_V4),
  PKG ("internvl", "qwen2", LANGUAGE_MODEL),
  PKG ("janus", "llama", LANGUAGE_MODEL),
  PKG ("kimi_k25", "deepseek_v3", LANGUAGE_MODEL),
  PKG ("lfm2_vl", "lfm2", LANGUAGE_MODEL),
  PKG ("lighton_ocr", "qwen3", LANGUAGE_MODEL),
  PKG ("llama4", "llama4_text", LANGUAGE_MODEL_V4),
  PKG ("llava", "llama", LANGUAGE_MODEL),
  PKG ("llava_next", "llama", LANGUAGE_MODEL),
  PKG ("llava_next_video", "llama", LANGUAGE_MODEL),
  PKG ("llava_onevision", "qwen2", LANGUAGE_MODEL),
  PKG ("minicpmv4_6", "qwen3_5_text", LANGUAGE_MODEL),
  PKG ("mistral3", "mistral", LANGUAGE_MODEL),
  PKG ("mllama", "mllama_text_model", LANGUAGE_MODEL),
  PKG ("modernvbert", "modernbert", TEXT_MODEL_MLM),
  PKG ("muse_glimmer", "muse_glimmer_text", LANGUAGE_MODEL),
  PKG ("musicflamingo", "qwen2", LANGUAGE_MODEL),
  PKG ("ovis2", "qwen2", LANGUAGE_MODEL),
  PKG ("paddleocr_vl", "paddleocr_vl_text", LANGUAGE_MODEL),
  PKG ("perception_lm", "llama", LANGUAGE_MODEL),
  PKG ("pp_chart2table", "qwen2", LANGUAGE_MODEL),
  PKG ("qianfan_ocr", "qwen3", LANGUAGE_MODEL),
  PKG ("qwen2_5_omni", "qwen2_5_omni_text", OMNI),
  PKG ("qwen2_5_omni_thinker", "qwen2_5_omni_text", THINKER),
  PKG ("qwen2_5_vl", "qwen2_5_vl_text", LANGUAGE_MODEL),
  PKG ("qwen2_audio", "qwen2", LANGUAGE_MODEL),
  PKG ("qwen2_vl", "qwen2_vl_text", LANGUAGE_MODEL),
  PKG ("qwen3_5", "qwen3_5_text", LANGUAGE_MODEL),
  PKG ("qwen3_5_moe", "qwen3_5_moe_text", LANGUAGE_MODEL),
  PKG ("qwen3_asr", "qwen3", LANGUAGE_MODEL),
  PKG ("qwen3_omni_moe", "qwen3_omni_moe_text", OMNI),
  PKG ("qwen3_omni_moe_thinker", "qwen3_omni_moe_text", THINKER),
  PKG ("qwen3_vl", "qwen3_vl_text", LANGUAGE_MODEL),
  PKG ("qwen3_vl_moe", "qwen3_vl_moe_text", LANGUAGE_MODEL),
  PKG ("shieldgemma2", "gemma3_text", LANGUAGE_MODEL),
  PKG ("smolvlm", "llama", TEXT_MODEL),
  PKG ("step3p7", "step3p5", LANGUAGE_MODEL),
  PKG ("vibevoice", "qwen2", LANGUAGE_MODEL),
  PKG ("vibevoice_asr", "qwen2", LANGUAGE_MODEL),
  PKG ("video_llama_3", "qwen2", LANGUAGE_MODEL),
  PKG ("video_llava", "llama", LANGUAGE_MODEL),
  PKG ("vipllava", "llama", LANGUAGE_MODEL),
  PKG ("voxtral", "llama", LANGUAGE_MODEL),
};
#undef PKG

const HnArchPackage *
hn_arch_packages (gsize *n_out)
{
  *n_out = G_N_ELEMENTS (packages);
  return packages;
}

const HnArchPackage *
hn_arch_package_lookup (const char *package)
{
  for (gsize i = 0; package && i < G_N_ELEMENTS (packages); i++)
    if (strcmp (packages[i].package, package) == 0)
      return &packages[i];
  return NULL;
}

/* The text model's head of HN_PACKAGE_TEXT_MODEL_MLM: text name prefix -> package name prefix. */
static const char *const mlm_heads[][2] = { { "head.", "projection_head." }, { "decoder.", "lm_head." } };

char *
hn_arch_package_tensor_name (HnPackageLayout layout, const char *name)
{
  gboolean nested = g_str_has_prefix (name, "model.");
  switch (layout)
    {
    case HN_PACKAGE_LANGUAGE_MODEL:
      return nested ? g_strconcat ("model.language_model.", name + 6, NULL) : g_strdup (name);
    case HN_PACKAGE_TEXT_MODEL:
      return nested ? g_strconcat ("model.text_model.", name + 6, NULL) : g_strdup (name);
    case HN_PACKAGE_TEXT_MODEL_MLM:
      for (gsize i = 0; i < G_N_ELEMENTS (mlm_heads); i++)
        if (g_str_has_prefix (name, mlm_heads[i][0]))
          return g_strconcat (mlm_heads[i][1], name + strlen (mlm_heads[i][0]), NULL);
      return nested ? g_strconcat ("model.text_model.", name + 6, NULL) : g_strdup (name);
    case HN_PACKAGE_THINKER:
      return g_strdup (name);
    case HN_PACKAGE_OMNI:
      return g_strconcat ("thinker.", name, NULL);
    case HN_PACKAGE_LANGUAGE_MODEL_V4:
    default:
      return g_strconcat ("language_model.", name, NULL);
    }
}

char *
hn_arch_package_text_name (HnPackageLayout layout, const char *name)
{
  switch (layout)
    {
    case HN_PACKAGE_LANGUAGE_MODEL:
      if (g_str_has_prefix (name, "model.language_model."))
        return g_strconcat ("model.", name + strlen ("model.language_model."), NULL);
      return g_str_has_prefix (name, "lm_head.") ? g_strdup (name) : NULL;
    case HN_PACKAGE_TEXT_MODEL:
    case HN_PACKAGE_TEXT_MODEL_MLM:
      if (g_str_has_prefix (name, "model.text_model."))
        return g_strconcat ("model.", name + strlen ("model.text_model."), NULL);
      if (layout == HN_PACKAGE_TEXT_MODEL_MLM)
        {
          for (gsize i = 0; i < G_N_ELEMENTS (mlm_heads); i++)
            if (g_str_has_prefix (name, mlm_heads[i][1]))
              return g_strconcat (mlm_heads[i][0], name + strlen (mlm_heads[i][1]), NULL);
          return NULL;
        }
      return g_str_has_prefix (name, "lm_head.") ? g_strdup (name) : NULL;
    case HN_PACKAGE_THINKER:
    case HN_PACKAGE_OMNI:
      {
        /* the thinker's text model and head; its audio_tower and visual (and the omni model's talker,
         * token2wav / code2wav) are the package's */
        const char *t = layout == HN_PACKAGE_OMNI ? (g_str_has_prefix (name, "thinker.") ? name + 8 : NULL) : name;
        return t && (g_str_has_prefix (t, "model.") || g_str_has_prefix (t, "lm_head.")) ? g_strdup (t) : NULL;
      }
    case HN_PACKAGE_LANGUAGE_MODEL_V4:
    default:
      return g_str_has_prefix (name, "language_model.") ? g_strdup (name + strlen ("language_model.")) : NULL;
    }
}

/* Multimodal packages of transformers 5.17 whose text model does not run here (read off their 5.17
 * modeling and configuration files).
 * A load of one fails closed by the package's model_type whatever its text_config names (MiniMax M3's
 * checkpoints say minimax_m2, which MiniMaxM3VLConfig rebuilds as minimax_m3_vl_text), and by the text
 * model_type, which for most of them is outside the LM mappings that `refusals` covers. */
static const HnArchPackageRefusal package_refusals[] = {
  { "glm5_next", "glm5_next_text",
    "GLM-5 Next's text model interleaves Kimi delta attention (KDA: linear attention with short convolutions) "
    "with DeepSeek sparse attention (MLA without rotary, an indexer over pooled key groups) and carries hc_mult "
    "hyper-connection residual streams (Sinkhorn-mixed); none of these is built yet" },
  { "glm_image", "glm_image_text",
    "GLM-Image's autoregressive model (GLM-4 sandwich layers, half-split rotary) predicts image tokens: its "
    "lm_head has vision_vocab_size rows (the first ids of the vocabulary, VQ codes a diffusion decoder turns into "
    "pixels), generated at the 2-D rotary positions of a target image grid; a head narrower than the vocabulary "
    "and those positions are not built" },
  { "inkling_mm_model", "inkling_text", R_INKLING },
  { "minimax_m3_vl", "minimax_m3_vl_text", R_MINIMAX_M3 },
  { "voxtral_realtime", "voxtral_realtime_text", R_VOXTRAL_RT },
};

const HnArchPackageRefusal *
hn_arch_package_refusals (gsize *n_out)
{
  *n_out = G_N_ELEMENTS (package_refusals);
  return package_refusals;
}

/* The spelled aliases of `a` then the packages that carry it (new NULL-terminated array). */
static char **
all_aliases (const HnArchInfo *a)
{
  GPtrArray *v = g_ptr_array_new ();
  for (const char *const *al = a->aliases; al && *al; al++)
    g_ptr_array_add (v, g_strdup (*al));
  for (gsize i = 0; i < G_N_ELEMENTS (packages); i++)
    if (strcmp (packages[i].text_model_type, a->model_type) == 0)
      g_ptr_array_add (v, g_strdup (packages[i].package));
  g_ptr_array_add (v, NULL);
  return (char **) g_ptr_array_free (v, FALSE);
}

const HnArchRefusal *
hn_arch_refusals (gsize *n_out)
{
  *n_out = G_N_ELEMENTS (refusals);
  return refusals;
}

const char *
hn_arch_refusal_reason (const char *model_type)
{
  for (gsize i = 0; model_type && i < G_N_ELEMENTS (refusals); i++)
    if (strcmp (refusals[i].model_type, model_type) == 0)
      return refusals[i].reason;
  for (gsize i = 0; model_type && i < G_N_ELEMENTS (package_refusals); i++)
    if (strcmp (package_refusals[i].package, model_type) == 0 ||
        strcmp (package_refusals[i].text_model_type, model_type) == 0)
      return package_refusals[i].reason;
  return NULL;
}

const HnArchInfo *
hn_arch_list (gsize *n_out)
{
  *n_out = G_N_ELEMENTS (archs);
  return archs;
}

const HnArchInfo *
hn_arch_lookup (const char *model_type, GError **error)
{
  if (!model_type || !*model_type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "config.json has no model_type, so the architecture is unknown");
      return NULL;
    }
  for (gsize i = 0; i < G_N_ELEMENTS (archs); i++)
    {
      if (strcmp (archs[i].model_type, model_type) == 0)
        return &archs[i];
      for (const char *const *a = archs[i].aliases; a && *a; a++)
        if (strcmp (*a, model_type) == 0)
          return &archs[i];
    }
  for (gsize i = 0; i < G_N_ELEMENTS (packages); i++)
    if (strcmp (packages[i].package, model_type) == 0)
      return hn_arch_lookup (packages[i].text_model_type, error);
  const char *reason = hn_arch_refusal_reason (model_type);
  if (reason)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "model_type \"%s\" is not supported: %s", model_type, reason);
      return NULL;
    }
  g_autoptr (GString) known = g_string_new (NULL);
  for (gsize i = 0; i < G_N_ELEMENTS (archs); i++)
    g_string_append_printf (known, "%s%s", i ? ", " : "", archs[i].model_type);
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "model_type \"%s\" is not supported (supported: %s)", model_type,
               known->str);
  return NULL;
}

const char *
hn_task_name (HnTask task)
{
  switch (task)
    {
    case HN_TASK_LOGITS: return "logits";
    case HN_TASK_GENERATE: return "generate";
    case HN_TASK_TRAIN: return "train";
    case HN_TASK_LORA: return "lora";
    }
  return "?";
}

gboolean
hn_arch_require_task (const HnArchInfo *arch, HnTask task, GError **error)
{
  if (arch->tasks & task)
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "model_type \"%s\" does not support %s yet", arch->model_type,
               hn_task_name (task));
  return FALSE;
}

const char *
hn_block_kind_name (HnBlockKind kind)
{
  switch (kind)
    {
    case HN_BLOCK_PRE_NORM: return "pre-norm";
    case HN_BLOCK_PARALLEL: return "parallel";
    case HN_BLOCK_PARALLEL_2NORM: return "parallel-2norm";
    case HN_BLOCK_SANDWICH: return "sandwich";
    case HN_BLOCK_POST_NORM: return "post-norm";
    case HN_BLOCK_ENCODER_POST_NORM: return "encoder-post-norm";
    case HN_BLOCK_ENCODER_PRE_NORM: return "encoder-pre-norm";
    case HN_BLOCK_SEQ2SEQ_POST_NORM: return "seq2seq-post-norm";
    case HN_BLOCK_SEQ2SEQ_PRE_NORM: return "seq2seq-pre-norm";
    case HN_BLOCK_POST_LN: return "post-ln";
    case HN_BLOCK_MAMBA: return "mamba";
    }
  return "?";
}

gboolean
hn_arch_is_encoder (const HnArchInfo *arch)
{
  return arch->block == HN_BLOCK_ENCODER_POST_NORM || arch->block == HN_BLOCK_ENCODER_PRE_NORM;
}

gboolean
hn_arch_is_ssm (const HnArchInfo *arch)
{
  return arch->block == HN_BLOCK_MAMBA;
}

gboolean
hn_arch_is_hybrid (const HnArchInfo *arch)
{
  return arch->names == HN_NAMES_BAMBA || arch->names == HN_NAMES_NEMOTRON_H ||
         arch->names == HN_NAMES_GRANITEMOEHYBRID || arch->names == HN_NAMES_FALCON_H1 || arch->names == HN_NAMES_JAMBA ||
         arch->names == HN_NAMES_LFM2 || arch->names == HN_NAMES_QWEN3_NEXT ||
         arch->names == HN_NAMES_RECURRENT_GEMMA;
}

HnCacheKind
hn_arch_cache_kind (const HnArchInfo *arch)
{
  return hn_arch_is_ssm (arch) ? HN_CACHE_STATE : hn_arch_is_hybrid (arch) ? HN_CACHE_KV_AND_STATE : HN_CACHE_KV;
}

gboolean
hn_arch_is_seq2seq (const HnArchInfo *arch)
{
  return arch->block == HN_BLOCK_SEQ2SEQ_POST_NORM || arch->block == HN_BLOCK_SEQ2SEQ_PRE_NORM;
}

static const char *const quirk_names[] = {
  "layernorm", "norm-plus-one", "norm-no-params", "norm-no-bias", "embed-scale-sqrt", "multipliers", "logit-scale",
  "qk-norm-head", "qk-norm-full", "softcap", "sliding-alternate", "fused-qkv", "fused-gate-up", "conv1d",
  "learned-positions", "alibi", "rope-interleaved", "partial-rotary", "embed-norm", "clip-qkv", "lm-head-bias",
  "gated-mlp", "no-rope", "rope-sliding-only", "moe", "pad-positions", "sinusoidal-positions",
  "rel-bias-per-layer",
};

char *
hn_quirks_to_string (guint quirks)
{
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < G_N_ELEMENTS (quirk_names); i++)
    if (quirks & (1u << i))
      g_string_append_printf (s, "%s%s", s->len ? " " : "", quirk_names[i]);
  return g_string_free (s, FALSE);
}

guint
hn_arch_count_parity_verified (void)
{
  guint n = 0;
  for (gsize i = 0; i < G_N_ELEMENTS (archs); i++)
    if ((archs[i].tasks & HN_TASK_LOGITS) && archs[i].fixture)
      n++;
  return n;
}

char *
hn_arch_list_to_json (void)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (gsize i = 0; i < G_N_ELEMENTS (archs); i++)
    {
      const HnArchInfo *a = &archs[i];
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "model_type");
      json_builder_add_string_value (b, a->model_type);
      json_builder_set_member_name (b, "aliases");
      json_builder_begin_array (b);
      g_auto (GStrv) al = all_aliases (a);
      for (char **x = al; *x; x++)
        json_builder_add_string_value (b, *x);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "family");
      json_builder_add_string_value (b, a->family);
      json_builder_set_member_name (b, "block");
      json_builder_add_string_value (b, hn_block_kind_name (a->block));
      json_builder_set_member_name (b, "quirks");
      json_builder_begin_array (b);
      for (guint q = 0; q < G_N_ELEMENTS (quirk_names); q++)
        if (a->quirks & (1u << q))
          json_builder_add_string_value (b, quirk_names[q]);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "tasks");
      json_builder_begin_object (b);
      for (guint t = 0; t < 4; t++)
        {
          json_builder_set_member_name (b, hn_task_name ((HnTask) (1u << t)));
          json_builder_add_boolean_value (b, (a->tasks & (1u << t)) != 0);
        }
      json_builder_end_object (b);
      json_builder_set_member_name (b, "parity_fixture");
      if (a->fixture)
        json_builder_add_string_value (b, a->fixture);
      else
        json_builder_add_null_value (b);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  return json_generator_to_data (gen, NULL);
}

char *
hn_arch_list_to_markdown (void)
{
  GString *md = g_string_new ("# Supported architectures\n\n");
  g_string_append_printf (md,
                          "Generated from the registry (`engine/transformer/registry.c`) by `hierarchos-native-cli "
                          "architectures --markdown`. Parity-verified architectures: **%u** (a row claiming logits "
                          "names a transformers fixture in `tests/fixtures/parity/`, which the parity tests run).\n\n",
                          hn_arch_count_parity_verified ());
  g_string_append (md, "| model_type | family | block | logits | generate | train | LoRA | aliases | fixture |\n"
                       "|---|---|---|---|---|---|---|---|---|\n");
  for (gsize i = 0; i < G_N_ELEMENTS (archs); i++)
    {
      const HnArchInfo *a = &archs[i];
      g_auto (GStrv) al = all_aliases (a);
      g_autofree char *aliases = g_strjoinv (", ", al);
      g_string_append_printf (md, "| `%s` | %s | %s |", a->model_type, a->family, hn_block_kind_name (a->block));
      for (guint t = 0; t < 4; t++)
        g_string_append (md, a->tasks & (1u << t) ? " yes |" : " — |");
      g_string_append_printf (md, " %s | %s |\n", aliases, a->fixture ? a->fixture : "—");
    }
  g_string_append (md, "\nA task marked yes has passed against transformers: logits within 1e-4 and identical greedy "
                       "ids, losses after AdamW steps, PEFT adapters. Anything else fails closed with a message.\n");
  g_string_append_printf (md,
                          "\n## Refused model types\n\nThe other %u model_types of transformers 5.17's causal-LM, "
                          "masked-LM and seq2seq-LM mappings (`tests/fixtures/parity/lm_model_types.json`) fail "
                          "closed with this reason.\n\n| model_type | reason |\n|---|---|\n",
                          (guint) G_N_ELEMENTS (refusals));
  for (gsize i = 0; i < G_N_ELEMENTS (refusals); i++)
    g_string_append_printf (md, "| `%s` | %s |\n", refusals[i].model_type, refusals[i].reason);
  g_string_append (md, "\n## Refused multimodal packages\n\nA checkpoint of one of these packages fails closed "
                       "by the package's model_type, whatever its text_config names, and by its text model's.\n\n"
                       "| package | text model_type | reason |\n|---|---|---|\n");
  for (gsize i = 0; i < G_N_ELEMENTS (package_refusals); i++)
    g_string_append_printf (md, "| `%s` | `%s` | %s |\n", package_refusals[i].package,
                            package_refusals[i].text_model_type, package_refusals[i].reason);
  return g_string_free (md, FALSE);
}
