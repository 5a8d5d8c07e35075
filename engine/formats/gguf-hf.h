/* GGUF <-> Hugging Face: the mapping llama.cpp's convert_hf_to_gguf.py
 * applies, in both directions, for the architectures we run (llama incl.
 * mistral and Llama 3 rope scaling, qwen2, qwen3, gemma, gemma2, gemma3,
 * phi3).
 *
 * Import: a GGUF model reads as the checkpoint it came from, so every
 * loader that takes a model folder takes a .gguf too: config.json from the
 * `<arch>.*` keys, tensors under their transformers names and layouts (the
 * Q/K row permutation of llama undone, gemma's norm +1 taken off; the
 * matrices in a GPU block type kept in their ggml blocks, other quantized
 * tensors dequantized to f32 at load), and the tokenizer from tokenizer.ggml.*.
 *
 * Export (train/gguf-export.h) uses the same tables the other way. */
#pragma once
#include <glib.h>

#include "formats/gguf.h"
#include "formats/safetensors.h"

G_BEGIN_DECLS

/* The .gguf file `path` stands for: `path` itself when it ends in .gguf,
 * the one .gguf of a folder without config.json (NULL when there are none
 * or several: the caller's own error then names the folder), else NULL. */
char *hn_gguf_resolve_path (const char *path);

/* config.json text for the GGUF's model (HN_ERROR_UNSUPPORTED for another
 * architecture, naming it and the supported ones). */
char *hn_gguf_config_json (HnGguf *g, GError **error);
/* The tensors under transformers names (keeps its own reference to the
 * file's mapping). */
HnSafetensors *hn_gguf_open_as_safetensors (const char *gguf_path, GError **error);

/* The mapping, shared with export (train/gguf-export.c). */
typedef struct {
  const char *hf;         /* model_type */
  const char *gguf;       /* general.architecture */
  gboolean permute_qk;    /* llama.cpp rotates adjacent pairs: q/k rows reordered */
  gboolean norm_plus_one; /* gemma: the file holds 1 + w for every norm weight */
  gboolean sandwich;      /* gemma2/3: post_attention_layernorm is a post-norm */
  const char *act;
} HnGgufArch;

/* NULL for a model_type with no GGUF form. */
const HnGgufArch *hn_gguf_arch_from_model_type (const char *model_type);
const char *hn_gguf_supported_architectures (void);
/* transformers tensor name -> llama.cpp's, NULL when it has none. */
char *hn_gguf_tensor_name_from_hf (const HnGgufArch *a, const char *hf_name);
gboolean hn_gguf_is_norm_weight (const char *hf_name);
/* llama.cpp's permute of q/k rows [n_head x head_dim, cols]: per head, row
 * (half, j) <-> (j, half); to_gguf applies it, otherwise it is undone. */
void hn_gguf_permute_qk_rows (float *w, gint64 rows, gint64 cols, int n_head, gboolean to_gguf);

G_END_DECLS
