/* export-gguf: a model folder (plus a merged LoRA adapter) written as a
 * GGUF llama.cpp loads. Here, above formats/ tokenizer/ and transformer/,
 * because it needs all three (the GGUF mapping, the tokenizer's keys, the
 * LoRA merge). */
#include "train/gguf-export.h"
#include "formats/gguf-hf.h"
#include "formats/model-config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "train/lora.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>



static const struct {
  const char *name;
  HnGgufOutType t;
  guint32 file_type; /* llama_ftype */
} outtypes[] = {
  { "f32", HN_GGUF_OUT_F32, 0 },   { "f16", HN_GGUF_OUT_F16, 1 },       { "bf16", HN_GGUF_OUT_BF16, 32 },
  { "q8_0", HN_GGUF_OUT_Q8_0, 7 }, { "q4_0", HN_GGUF_OUT_Q4_0, 2 },     { "q4_k_m", HN_GGUF_OUT_Q4_K_M, 15 },
  { "q6_k", HN_GGUF_OUT_Q6_K, 18 },
};

gboolean
hn_gguf_outtype_from_string (const char *s, HnGgufOutType *out, GError **error)
{
  for (guint i = 0; i < G_N_ELEMENTS (outtypes); i++)
    if (s && g_ascii_strcasecmp (s, outtypes[i].name) == 0)
      {
        *out = outtypes[i].t;
        return TRUE;
      }
  g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--outtype '%s' is not one of f32, f16, bf16, q8_0, q4_0, "
               "q4_k_m, q6_k", s ? s : "");
  return FALSE;
}

const char *
hn_gguf_outtype_name (HnGgufOutType t)
{
  for (guint i = 0; i < G_N_ELEMENTS (outtypes); i++)
    if (outtypes[i].t == t)
      return outtypes[i].name;
  return "?";
}


static guint32
outtype_file_type (HnGgufOutType t)
{
  for (guint i = 0; i < G_N_ELEMENTS (outtypes); i++)
    if (outtypes[i].t == t)
      return outtypes[i].file_type;
  return 0;
}

/* llama.cpp's use_more_bits: the layers Q4_K_M gives Q6_K for attn_v and ffn_down. */
static gboolean
use_more_bits (int i, int n)
{
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The stored type of a 2-D weight; rows that do not divide into the
 * type's blocks fall back (K-quants to Q8_0, then to F16) as llama.cpp's
 * converters do to types that fit. */
static HnGgmlType
weight_type (HnGgufOutType out, const char *gguf_name, gboolean is_output, int layer, int n_layer, gint64 row)
{
  HnGgmlType t;
  switch (out)
    {
    case HN_GGUF_OUT_F32: return HN_GGML_F32;
    case HN_GGUF_OUT_F16: return HN_GGML_F16;
    case HN_GGUF_OUT_BF16: return HN_GGML_BF16;
    case HN_GGUF_OUT_Q8_0: t = HN_GGML_Q8_0; break;
    case HN_GGUF_OUT_Q4_0: t = HN_GGML_Q4_0; break;
    case HN_GGUF_OUT_Q6_K: t = HN_GGML_Q6_K; break;
    case HN_GGUF_OUT_Q4_K_M:
    default:
      if (is_output)
        t = HN_GGML_Q6_K;
      else if ((strstr (gguf_name, "attn_v.") || strstr (gguf_name, "ffn_down.")) && use_more_bits (layer, n_layer))
        t = HN_GGML_Q6_K;
      else
        t = HN_GGML_Q4_K;
      break;
    }
  if (row % hn_ggml_block_size (t) == 0)
    return t;
  if (row % 32 == 0)
    return HN_GGML_Q8_0;
  return HN_GGML_F16;
}

typedef struct {
  HnGgufWriter *w;
  HnModelConfig *cfg;
  const HnGgufArch *a;
  HnGgufOutType out;
  int n_layer, heads, kv_heads;
  gboolean tied;
} Export;

/* The type tensor t is stored as under its llama.cpp name gname: a matrix
 * by weight_type, norms and biases f32 as in llama.cpp's converter. */
static HnGgmlType
stored_type (const Export *x, const HnSafetensorInfo *t, const char *gname)
{
  if (t->ndim != 2)
    return HN_GGML_F32;
  int layer = -1;
  sscanf (gname, "blk.%d.", &layer);
  gboolean is_output = g_str_equal (gname, "output.weight") || (x->tied && g_str_equal (gname, "token_embd.weight"));
  return weight_type (x->out, gname, is_output, layer, x->n_layer, t->shape[1]);
}

/* Whether the head is the embedding table (llama.cpp then reads token_embd as output). */
static gboolean
head_tied (const HnModelConfig *cfg, HnSafetensors *st, const HnGgufArch *a)
{
  return cfg->tie_word_embeddings == 1 ||
         (cfg->tie_word_embeddings == -1 && (!hn_safetensors_lookup (st, "lm_head.weight") || a->norm_plus_one));
}

static gboolean
export_tensor (Export *x, const HnSafetensorInfo *t, GError **error)
{
  if (g_str_has_suffix (t->name, "rotary_emb.inv_freq"))
    return TRUE;
  g_autofree char *gname = hn_gguf_tensor_name_from_hf (x->a, t->name);
  if (!gname)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s has no llama.cpp name for architecture %s",
                   t->file, t->name, x->a->gguf);
      return FALSE;
    }
  if (x->tied && g_str_equal (gname, "output.weight"))
    return TRUE; /* tied: llama.cpp reads token_embd as the head */
  if (t->ndim < 1 || t->ndim > 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s has %u dimensions", t->file, t->name, t->ndim);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  gint64 rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
  gboolean is_q = strstr (gname, ".attn_q.") != NULL, is_k = strstr (gname, ".attn_k.") != NULL;
  if (x->a->permute_qk && (is_q || is_k))
    {
      int nh = is_q ? x->heads : x->kv_heads;
      gint64 prow = t->ndim == 2 ? rows : cols, pcol = t->ndim == 2 ? cols : 1;
      if (prow % (2 * nh) != 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s has %" G_GINT64_FORMAT " rows, not a multiple of 2 x %d "
                       "heads", t->file, t->name, prow, nh);
          return FALSE;
        }
      hn_gguf_permute_qk_rows (f, prow, pcol, nh, TRUE);
    }
  if (x->a->norm_plus_one && hn_gguf_is_norm_weight (t->name))
    for (gint64 e = 0; e < t->n_elements; e++)
      f[e] += 1.0f;
  gint64 ne[2] = { cols, rows };
  HnGgmlType type = stored_type (x, t, gname);
  gsize nbytes = hn_ggml_row_size (type, cols) * (gsize) rows;
  void *q = g_try_malloc (MAX (nbytes, 1));
  if (!q)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "no host memory for tensor %s", gname);
      return FALSE;
    }
  if (!hn_ggml_quantize (type, f, q, t->n_elements, error))
    {
      g_free (q);
      return FALSE;
    }
  return hn_gguf_writer_add_tensor_take (x->w, gname, type, t->ndim, ne, q, nbytes, error);
}

/* Llama 3 rope scaling as llama.cpp's converter writes it: rope_freqs.weight,
 * the divisor of each frequency. */
static gboolean
export_rope_freqs (Export *x, int head_dim, GError **error)
{
  const HnRopeConfig *r = &x->cfg->rope;
  if (!r->rope_type || g_str_equal (r->rope_type, "default"))
    return TRUE;
  if (g_str_equal (r->rope_type, "linear") && g_str_equal (x->a->gguf, "gemma3"))
    return TRUE; /* written as rope.scaling.* keys */
  if (!g_str_equal (r->rope_type, "llama3"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: rope scaling '%s' cannot be exported to GGUF (llama3 and "
                   "gemma3 linear can)", x->cfg->path, r->rope_type);
      return FALSE;
    }
  double factor = r->factor > 0 ? r->factor : 8.0;
  double lo = isnan (r->low_freq_factor) ? 1.0 : r->low_freq_factor;
  double hi = isnan (r->high_freq_factor) ? 4.0 : r->high_freq_factor;
  double old_ctx = r->original_max_position_embeddings > 0 ? (double) r->original_max_position_embeddings : 8192.0;
  double lo_wl = old_ctx / lo, hi_wl = old_ctx / hi;
  int n = head_dim / 2;
  float *fr = g_new (float, n);
  for (int i = 0; i < n; i++)
    {
      /* torch computes the frequencies in float32 */
      float freq = (float) (1.0 / pow (r->theta, (double) (float) (2 * i) / head_dim));
      double wl = 2 * G_PI / freq;
      if (wl < hi_wl)
        fr[i] = 1.0f;
      else if (wl > lo_wl)
        fr[i] = (float) factor;
      else
        {
          double smooth = (old_ctx / wl - lo) / (hi - lo);
          fr[i] = (float) (1 / ((1 - smooth) / factor + smooth));
        }
    }
  gint64 ne[1] = { n };
  return hn_gguf_writer_add_tensor_take (x->w, "rope_freqs.weight", HN_GGML_F32, 1, ne, fr, (gsize) n * 4, error);
}

static gboolean
export_dir (const char *model_dir, const char *tok_dir, HnGgufOutType out, const char *out_path, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return FALSE;
  const HnGgufArch *a = hn_gguf_arch_from_model_type (cfg->model_type);
  if (!a)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type '%s' cannot be exported to GGUF; supported: %s",
                   cfg->path, cfg->model_type ? cfg->model_type : "(none)", hn_gguf_supported_architectures ());
      return FALSE;
    }
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  if (!st)
    return FALSE;
  g_autoptr (GError) tok_error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tok_dir, &tok_error);
  if (!tok && !g_error_matches (tok_error, HN_ERROR, HN_ERROR_NOT_FOUND))
    {
      g_propagate_error (error, g_steal_pointer (&tok_error));
      return FALSE;
    }
  g_autoptr (HnGgufWriter) w = hn_gguf_writer_new ();
  Export x = { w, cfg, a, out, (int) cfg->num_hidden_layers, (int) cfg->num_attention_heads,
               (int) cfg->num_key_value_heads, FALSE };
  x.tied = head_tied (cfg, st, a);
  if (cfg->hidden_size <= 0 || x.n_layer <= 0 || x.heads <= 0 || cfg->intermediate_size <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: hidden_size, num_hidden_layers, num_attention_heads and "
                   "intermediate_size are needed", cfg->path);
      return FALSE;
    }
  if (x.kv_heads <= 0)
    x.kv_heads = x.heads;
  int head_dim = cfg->head_dim > 0 ? (int) cfg->head_dim : (int) (cfg->hidden_size / x.heads);
  const char *ar = a->gguf;
  g_autofree char *name = g_path_get_basename (model_dir);
#define K(suffix) (g_snprintf (key, sizeof key, "%s.%s", ar, suffix), key)
  char key[128];
  hn_gguf_writer_set_string (w, "general.architecture", ar);
  hn_gguf_writer_set_string (w, "general.type", "model");
  hn_gguf_writer_set_string (w, "general.name", name);
  hn_gguf_writer_set_u32 (w, "general.file_type", outtype_file_type (out));
  hn_gguf_writer_set_u32 (w, "general.quantization_version", 2);
  hn_gguf_writer_set_u32 (w, K ("context_length"),
                          (guint32) (cfg->max_position_embeddings > 0 ? cfg->max_position_embeddings : 2048));
  hn_gguf_writer_set_u32 (w, K ("embedding_length"), (guint32) cfg->hidden_size);
  hn_gguf_writer_set_u32 (w, K ("block_count"), (guint32) x.n_layer);
  hn_gguf_writer_set_u32 (w, K ("feed_forward_length"), (guint32) cfg->intermediate_size);
  hn_gguf_writer_set_u32 (w, K ("attention.head_count"), (guint32) x.heads);
  hn_gguf_writer_set_u32 (w, K ("attention.head_count_kv"), (guint32) x.kv_heads);
  hn_gguf_writer_set_u32 (w, K ("attention.key_length"), (guint32) head_dim);
  hn_gguf_writer_set_u32 (w, K ("attention.value_length"), (guint32) head_dim);
  hn_gguf_writer_set_u32 (w, K ("rope.dimension_count"), (guint32) (cfg->rotary_dim > 0 ? cfg->rotary_dim : head_dim));
  hn_gguf_writer_set_f32 (w, K ("rope.freq_base"), (float) cfg->rope.theta);
  hn_gguf_writer_set_f32 (w, K ("attention.layer_norm_rms_epsilon"),
                          (float) (isnan (cfg->norm_eps) ? 1e-6 : cfg->norm_eps));
  hn_gguf_writer_set_u32 (w, K ("vocab_size"), (guint32) cfg->vocab_size);
  gboolean sw = cfg->sliding_window > 0
                && (!g_str_has_prefix (cfg->model_type, "qwen") || cfg->use_sliding_window == TRUE);
  if (sw && (g_str_equal (ar, "llama") || g_str_has_prefix (ar, "qwen")))
    hn_gguf_writer_set_u32 (w, K ("attention.sliding_window"), (guint32) cfg->sliding_window);
  if (g_str_equal (ar, "gemma2") || g_str_equal (ar, "gemma3"))
    {
      if (cfg->sliding_window > 0)
        hn_gguf_writer_set_u32 (w, K ("attention.sliding_window"), (guint32) cfg->sliding_window);
      if (!isnan (cfg->query_pre_attn_scalar) && cfg->query_pre_attn_scalar > 0)
        hn_gguf_writer_set_f32 (w, K ("attention.scale"), (float) (1.0 / sqrt (cfg->query_pre_attn_scalar)));
      /* the period of the global layers (llama.cpp assumes 2 and 6) */
      guint32 pattern = g_str_equal (ar, "gemma2") ? 2 : 6;
      if (cfg->layer_types && cfg->layer_types[0])
        {
          guint nl = g_strv_length (cfg->layer_types);
          for (pattern = 1; pattern <= nl; pattern++)
            {
              gboolean fits = TRUE;
              for (guint i = 0; i < nl && fits; i++)
                fits = g_str_equal (cfg->layer_types[i], (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention");
              if (fits)
                break;
            }
          if (pattern > nl)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: layer_types is not a repeating sliding/global "
                           "pattern GGUF can describe", cfg->path);
              return FALSE;
            }
        }
      else if (cfg->sliding_window_pattern > 0)
        pattern = (guint32) cfg->sliding_window_pattern;
      hn_gguf_writer_set_u32 (w, K ("attention.sliding_window_pattern"), pattern);
      if (!isnan (cfg->attn_logit_softcapping))
        hn_gguf_writer_set_f32 (w, K ("attn_logit_softcapping"), (float) cfg->attn_logit_softcapping);
      if (!isnan (cfg->final_logit_softcapping))
        hn_gguf_writer_set_f32 (w, K ("final_logit_softcapping"), (float) cfg->final_logit_softcapping);
      if (cfg->rope.rope_type && g_str_equal (cfg->rope.rope_type, "linear"))
        {
          hn_gguf_writer_set_string (w, K ("rope.scaling.type"), "linear");
          hn_gguf_writer_set_f32 (w, K ("rope.scaling.factor"), (float) cfg->rope.factor);
        }
    }
#undef K
  if (tok)
    {
      if (!hn_tokenizer_write_gguf (tok, w, (int32_t) cfg->vocab_size, error))
        return FALSE;
    }
  else
    hn_gguf_writer_set_string (w, "tokenizer.ggml.model", "none");
  if (!export_rope_freqs (&x, head_dim, error))
    return FALSE;
  /* llama.cpp's order: embeddings, then layer by layer, then the head. */
  guint n = hn_safetensors_get_n_tensors (st);
  g_autoptr (GPtrArray) order = g_ptr_array_new ();
  for (guint i = 0; i < n; i++)
    g_ptr_array_add (order, (gpointer) hn_safetensors_get_nth (st, i));
  for (guint i = 0; i < order->len; i++)
    {
      const HnSafetensorInfo *t = order->pdata[i];
      if (!export_tensor (&x, t, error))
        return FALSE;
    }
  if (!hn_gguf_writer_write (w, out_path, error))
    return FALSE;
  return TRUE;
}

/* ---------------------------------------------------------------- LoRA adapter */

/* llama.cpp's adapter GGUF (convert_lora_to_gguf.py): general.type
 * "adapter", adapter.type "lora", adapter.lora.alpha, and per adapted
 * weight W two tensors W.lora_a [r, in] and W.lora_b [out, r] (ggml ne
 * [in, r] and [r, out]); llama.cpp adds (alpha / r) * B A. B's rows get the
 * Q/K permutation of W. */
gboolean
hn_gguf_export_lora (const char *model_dir, const char *adapter_dir, const char *out_path, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return FALSE;
  const HnGgufArch *a = hn_gguf_arch_from_model_type (cfg->model_type);
  if (!a)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type '%s' cannot be exported to GGUF; supported: %s",
                   cfg->path, cfg->model_type ? cfg->model_type : "(none)", hn_gguf_supported_architectures ());
      return FALSE;
    }
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (adapter_dir, error);
  if (!ad)
    return FALSE;
  if (ad->config.fan_in_fan_out)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: fan_in_fan_out adapters (GPT-2 Conv1D) have no llama.cpp "
                   "form", adapter_dir);
      return FALSE;
    }
  g_autoptr (HnGgufWriter) w = hn_gguf_writer_new ();
  hn_gguf_writer_set_string (w, "general.architecture", a->gguf);
  hn_gguf_writer_set_string (w, "general.type", "adapter");
  hn_gguf_writer_set_string (w, "adapter.type", "lora");
  /* llama.cpp scales by alpha / r; rsLoRA's alpha / sqrt(r) needs alpha x sqrt(r) there */
  int r = ad->modules->len ? ((HnLoraModule *) ad->modules->pdata[0])->r : ad->config.r;
  double alpha = ad->config.use_rslora ? ad->config.alpha * sqrt ((double) r) : ad->config.alpha;
  hn_gguf_writer_set_f32 (w, "adapter.lora.alpha", (float) alpha);
  int heads = (int) cfg->num_attention_heads, kv_heads = cfg->num_key_value_heads > 0 ? (int) cfg->num_key_value_heads
                                                                                     : heads;
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = ad->modules->pdata[i];
      if (m->r != r)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: modules of different ranks (%d and %d)", adapter_dir,
                       r, m->r);
          return FALSE;
        }
      g_autofree char *hf = g_str_has_prefix (m->module, "model.") ? g_strconcat (m->module, ".weight", NULL)
                                                                    : g_strconcat ("model.", m->module, ".weight", NULL);
      g_autofree char *gname = hn_gguf_tensor_name_from_hf (a, hf);
      if (!gname)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: adapted module %s has no llama.cpp name", adapter_dir,
                       m->module);
          return FALSE;
        }
      float *b = g_memdup2 (m->b, sizeof (float) * (gsize) m->out * m->r);
      gboolean is_q = strstr (gname, ".attn_q.") != NULL, is_k = strstr (gname, ".attn_k.") != NULL;
      if (a->permute_qk && (is_q || is_k))
        hn_gguf_permute_qk_rows (b, m->out, m->r, is_q ? heads : kv_heads, TRUE);
      gint64 ne_a[2] = { m->in, m->r }, ne_b[2] = { m->r, m->out };
      g_autofree char *na = g_strconcat (gname, ".lora_a", NULL);
      g_autofree char *nb = g_strconcat (gname, ".lora_b", NULL);
      if (!hn_gguf_writer_add_tensor (w, na, HN_GGML_F32, 2, ne_a, m->a, sizeof (float) * (gsize) m->r * m->in, TRUE,
                                      error)
          || !hn_gguf_writer_add_tensor_take (w, nb, HN_GGML_F32, 2, ne_b, b, sizeof (float) * (gsize) m->out * m->r,
                                              error))
        return FALSE;
    }
  return hn_gguf_writer_write (w, out_path, error);
}

/* ---------------------------------------------------------------- Ollama Modelfile */

/* Ollama's Go templates for the chat formats we can recognise in a Jinja
 * chat template (by their marker tokens). NULL: no translation. */
static const char *
ollama_template (const char *jinja)
{
  if (!jinja)
    return NULL;
  if (strstr (jinja, "<|start_header_id|>"))
    return "{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
           "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
           "{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n";
  if (strstr (jinja, "<|im_start|>"))
    return "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
           "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";
  if (strstr (jinja, "<start_of_turn>"))
    return "{{- range .Messages }}<start_of_turn>{{ if eq .Role \"assistant\" }}model{{ else }}{{ .Role }}{{ end }}\n"
           "{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n";
  if (strstr (jinja, "<|assistant|>") && strstr (jinja, "<|end|>"))
    return "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n";
  if (strstr (jinja, "[INST]"))
    return "{{- range .Messages }}{{ if eq .Role \"user\" }}[INST] {{ .Content }} [/INST]{{ else }}{{ .Content }}</s>"
           "{{ end }}{{ end }}";
  return NULL;
}

/* FILE.gguf -> FILE.Modelfile beside it: FROM, TEMPLATE (translated when
 * the chat format is known), PARAMETER stop for every end-of-text token. */
static gboolean
write_modelfile (const char *model_dir, const char *out_path, GError **error)
{
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (model_dir, NULL);
  g_autofree char *base = g_path_get_basename (out_path);
  g_autofree char *stem = g_str_has_suffix (base, ".gguf") ? g_strndup (base, strlen (base) - 5) : g_strdup (base);
  g_autofree char *dir = g_path_get_dirname (out_path);
  g_autofree char *mf_name = g_strconcat (stem, ".Modelfile", NULL);
  g_autofree char *mf = g_build_filename (dir, mf_name, NULL);
  g_autoptr (GString) s = g_string_new (NULL);
  g_string_append_printf (s, "# ollama create %s -f %s\nFROM ./%s\n", stem, mf_name, base);
  const char *jinja = tok ? hn_tokenizer_get_chat_template (tok) : NULL;
  const char *tmpl = ollama_template (jinja);
  if (tmpl)
    g_string_append_printf (s, "TEMPLATE \"\"\"%s\"\"\"\n", tmpl);
  else if (jinja)
    g_string_append (s, "# the chat template has no known Ollama translation: Ollama reads the GGUF's own\n");
  gsize n_eos = 0;
  const int32_t *eos = tok ? hn_tokenizer_get_eos_ids (tok, &n_eos) : NULL;
  for (gsize i = 0; i < n_eos; i++)
    {
      const char *t = hn_tokenizer_id_to_token (tok, eos[i]);
      if (t && !strchr (t, '"'))
        g_string_append_printf (s, "PARAMETER stop \"%s\"\n", t);
    }
  return hn_write_file_atomic (mf, s->str, s->len, error);
}

static void
rm_tree (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *n;
      while (d && (n = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, n, NULL);
          rm_tree (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

gint64
hn_gguf_export_estimate (const char *model_dir, HnGgufOutType type, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return -1;
  const HnGgufArch *a = hn_gguf_arch_from_model_type (cfg->model_type);
  if (!a)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type '%s' cannot be exported to GGUF",
                   cfg->path, cfg->model_type ? cfg->model_type : "(none)");
      return -1;
    }
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  if (!st)
    return -1;
  Export x = { NULL, cfg, a, type, (int) cfg->num_hidden_layers, 0, 0, head_tied (cfg, st, a) };
  gint64 bytes = 0;
  /* the tensors as export_tensor stores them (the metadata and tokenizer not counted) */
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_autofree char *gname = hn_gguf_tensor_name_from_hf (a, t->name);
      if (!gname || g_str_has_suffix (t->name, "rotary_emb.inv_freq") || t->ndim < 1 || t->ndim > 2 ||
          (x.tied && g_str_equal (gname, "output.weight")))
        continue;
      gint64 rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
      bytes += (gint64) hn_ggml_row_size (stored_type (&x, t, gname), cols) * rows;
    }
  return bytes;
}

gboolean
hn_gguf_export (const char *model_dir, const char *adapter_dir, HnGgufOutType type, const char *out_path,
                GError **error)
{
  if (!adapter_dir)
    return export_dir (model_dir, model_dir, type, out_path, error) && write_modelfile (model_dir, out_path, error);
  /* Merge into a scratch folder next to the output, export, remove it. */
  g_autofree char *parent = g_path_get_dirname (out_path);
  g_autofree char *tmpl = g_build_filename (parent, ".hn-merge-XXXXXX", NULL);
  if (!g_mkdtemp (tmpl))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create a scratch folder in %s: %s", parent, g_strerror (errno));
      return FALSE;
    }
  gboolean ok = hn_lora_merge_model (model_dir, adapter_dir, tmpl, error);
  /* A GGUF base (LoRA fine-tuned on it) has no config.json to copy: write
   * the one its metadata stands for. The tokenizer is read from the base. */
  g_autofree char *gguf = hn_gguf_resolve_path (model_dir);
  if (ok && gguf)
    {
      g_autoptr (HnGguf) g = hn_gguf_open (gguf, error);
      g_autofree char *json = g ? hn_gguf_config_json (g, error) : NULL;
      g_autofree char *cfg = g_build_filename (tmpl, "config.json", NULL);
      ok = json && hn_write_file_atomic (cfg, json, strlen (json), error);
    }
  ok = ok && export_dir (tmpl, model_dir, type, out_path, error) && write_modelfile (model_dir, out_path, error);
  rm_tree (tmpl);
  return ok;
}
