/* export-gguf: a model folder, with an optional LoRA adapter merged in,
 * written as a GGUF that llama.cpp loads: the keys its loader requires, the
 * tokenizer, special ids and chat template, and the tensors converted and
 * quantized as asked (norms and biases stay f32). */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

/* Output types of export-gguf. */
typedef enum {
  HN_GGUF_OUT_F32, HN_GGUF_OUT_F16, HN_GGUF_OUT_BF16, HN_GGUF_OUT_Q8_0, HN_GGUF_OUT_Q4_0,
  HN_GGUF_OUT_Q4_K_M, HN_GGUF_OUT_Q6_K,
} HnGgufOutType;

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k". */
gboolean hn_gguf_outtype_from_string (const char *s, HnGgufOutType *out, GError **error);
const char *hn_gguf_outtype_name (HnGgufOutType t);

/* Writes `model_dir` (+ `adapter_dir` merged, may be NULL) to `out_path`
 * atomically, and an Ollama Modelfile beside it (FILE.gguf -> FILE.Modelfile:
 * FROM, TEMPLATE translated from a known chat format, PARAMETER stop per
 * end-of-text token). */
gboolean hn_gguf_export (const char *model_dir, const char *adapter_dir, HnGgufOutType type, const char *out_path,
                         GError **error);

/* About the size of the file hn_gguf_export writes from `model_dir`: its
 * tensors in the types the export stores them as (the metadata and the
 * tokenizer not counted), or -1 with error when its config or weights
 * cannot be read or the architecture has no GGUF mapping. */
gint64 hn_gguf_export_estimate (const char *model_dir, HnGgufOutType type, GError **error);

/* A PEFT LoRA adapter as llama.cpp's adapter GGUF (general.type adapter,
 * for llama-cli --lora): `model_dir` gives the architecture and head counts
 * for the Q/K permutation of lora_b. */
gboolean hn_gguf_export_lora (const char *model_dir, const char *adapter_dir, const char *out_path, GError **error);

G_END_DECLS
