#include "formats/gguf-hf.h"
#include "tensor/quant.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- architectures */

typedef HnGgufArch Arch;

static const Arch archs[] = {
  { "llama", "llama", TRUE, FALSE, FALSE, "silu" },
  { "mistral", "llama", TRUE, FALSE, FALSE, "silu" },
  { "qwen2", "qwen2", FALSE, FALSE, FALSE, "silu" },
  { "qwen3", "qwen3", FALSE, FALSE, FALSE, "silu" },
  { "gemma", "gemma", FALSE, TRUE, FALSE, "gelu_pytorch_tanh" },
  { "gemma2", "gemma2", FALSE, TRUE, TRUE, "gelu_pytorch_tanh" },
  { "gemma3_text", "gemma3", FALSE, TRUE, TRUE, "gelu_pytorch_tanh" },
  { "phi3", "phi3", FALSE, FALSE, FALSE, "silu" },
};

const HnGgufArch *
hn_gguf_arch_from_model_type (const char *model_type)
{
  for (guint i = 0; i < G_N_ELEMENTS (archs); i++)
    if (g_strcmp0 (archs[i].hf, model_type) == 0)
      return &archs[i];
  return NULL;
}

static const Arch *
arch_by_gguf (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (archs); i++)
    if (g_strcmp0 (archs[i].gguf, name) == 0)
      return &archs[i];
  return NULL;
}

static const char *const supported_list = "llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, phi3";

const char *
hn_gguf_supported_architectures (void)
{
  return supported_list;
}

/* Per-layer names: transformers suffix <-> llama.cpp suffix. */
typedef struct {
  const char *hf, *gguf;
} NamePair;

static const NamePair layer_names[] = {
  { "input_layernorm", "attn_norm" },
  { "self_attn.q_proj", "attn_q" },
  { "self_attn.k_proj", "attn_k" },
  { "self_attn.v_proj", "attn_v" },
  { "self_attn.o_proj", "attn_output" },
  { "self_attn.qkv_proj", "attn_qkv" },
  { "self_attn.q_norm", "attn_q_norm" },
  { "self_attn.k_norm", "attn_k_norm" },
  { "pre_feedforward_layernorm", "ffn_norm" },
  { "post_feedforward_layernorm", "post_ffw_norm" },
  { "mlp.gate_proj", "ffn_gate" },
  { "mlp.up_proj", "ffn_up" },
  { "mlp.gate_up_proj", "ffn_up" }, /* phi3: fused gate + up, llama.cpp splits it at load */
  { "mlp.down_proj", "ffn_down" },
};

/* The names outside the layers, the same in every family. */
static const NamePair top_names[] = {
  { "model.embed_tokens.weight", "token_embd.weight" },
  { "model.norm.weight", "output_norm.weight" },
  { "lm_head.weight", "output.weight" },
};

/* Splits a tensor name of one naming (from_hf: transformers', else GGUF's):
 * a name outside the layers gives its twin in the other naming in *top;
 * a layer's "<prefix>N.<module>.weight|bias" gives the module (returned,
 * owned), N in *layer and ".weight" or ".bias" in *suffix. NULL (and *top
 * NULL) when it is neither. */
static char *
split_name (const char *name, gboolean from_hf, const char **top, int *layer, const char **suffix)
{
  *top = NULL;
  for (guint i = 0; i < G_N_ELEMENTS (top_names); i++)
    if (g_str_equal (name, from_hf ? top_names[i].hf : top_names[i].gguf))
      {
        *top = from_hf ? top_names[i].gguf : top_names[i].hf;
        return NULL;
      }
  int consumed = 0;
  *layer = -1;
  if ((from_hf ? sscanf (name, "model.layers.%d.%n", layer, &consumed) : sscanf (name, "blk.%d.%n", layer, &consumed)) != 1
      || consumed == 0 || *layer < 0)
    return NULL;
  const char *rest = name + consumed;
  const char *dot = strrchr (rest, '.');
  if (!dot || (!g_str_equal (dot, ".weight") && !g_str_equal (dot, ".bias")))
    return NULL;
  *suffix = dot;
  return g_strndup (rest, (gsize) (dot - rest));
}

char *
hn_gguf_tensor_name_from_hf (const HnGgufArch *a, const char *name)
{
  const char *top = NULL, *dot = NULL;
  int layer = -1;
  g_autofree char *module = split_name (name, TRUE, &top, &layer, &dot);
  if (!module)
    return g_strdup (top);
  const char *g = NULL;
  if (g_str_equal (module, "post_attention_layernorm"))
    g = a->sandwich ? "post_attention_norm" : "ffn_norm";
  for (guint i = 0; !g && i < G_N_ELEMENTS (layer_names); i++)
    if (g_str_equal (module, layer_names[i].hf))
      g = layer_names[i].gguf;
  return g ? g_strdup_printf ("blk.%d.%s%s", layer, g, dot) : NULL;
}

static char *
gguf_to_hf_name (const Arch *a, const char *name)
{
  const char *top = NULL, *dot = NULL;
  int layer = -1;
  g_autofree char *module = split_name (name, FALSE, &top, &layer, &dot);
  if (!module)
    return g_strdup (top);
  const char *h = NULL;
  if (g_str_equal (module, "ffn_norm"))
    h = a->sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  else if (g_str_equal (module, "post_attention_norm"))
    h = a->sandwich ? "post_attention_layernorm" : NULL;
  else if (g_str_equal (module, "ffn_up"))
    h = g_str_equal (a->hf, "phi3") ? "mlp.gate_up_proj" : "mlp.up_proj";
  else
    for (guint i = 0; !h && i < G_N_ELEMENTS (layer_names); i++)
      if (g_str_equal (module, layer_names[i].gguf) && !g_str_equal (layer_names[i].hf, "pre_feedforward_layernorm"))
        h = layer_names[i].hf;
  return h ? g_strdup_printf ("model.layers.%d.%s%s", layer, h, dot) : NULL;
}

gboolean
hn_gguf_is_norm_weight (const char *hf_name)
{
  return strstr (hf_name, "norm.weight") != NULL;
}

void
hn_gguf_permute_qk_rows (float *w, gint64 rows, gint64 cols, int n_head, gboolean to_gguf)
{
  gint64 hd = rows / n_head, half = hd / 2;
  g_autofree float *tmp = g_new (float, (gsize) (hd * cols));
  for (int h = 0; h < n_head; h++)
    {
      float *head = w + (gsize) (h * hd * cols);
      for (gint64 j = 0; j < half; j++)
        for (int s = 0; s < 2; s++)
          {
            gint64 hf_row = s * half + j, gg_row = 2 * j + s;
            gint64 dst = to_gguf ? gg_row : hf_row, src = to_gguf ? hf_row : gg_row;
            memcpy (tmp + dst * cols, head + src * cols, (gsize) cols * sizeof (float));
          }
      memcpy (head, tmp, (gsize) (hd * cols) * sizeof (float));
    }
}

/* ---------------------------------------------------------------- import: path */

char *
hn_gguf_resolve_path (const char *path)
{
  if (!path)
    return NULL;
  if (g_str_has_suffix (path, ".gguf") && !g_file_test (path, G_FILE_TEST_IS_DIR))
    return g_strdup (path);
  if (!g_file_test (path, G_FILE_TEST_IS_DIR))
    return NULL;
  g_autofree char *cfg = g_build_filename (path, "config.json", NULL);
  if (g_file_test (cfg, G_FILE_TEST_EXISTS))
    return NULL;
  g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
  const char *n, *found = NULL;
  guint count = 0;
  while (d && (n = g_dir_read_name (d)))
    if (g_str_has_suffix (n, ".gguf"))
      {
        found = n;
        count++;
      }
  /* Several: hn_gguf_open on the folder gives the error naming them. */
  return count == 1 ? g_build_filename (path, found, NULL) : count > 1 ? g_strdup (path) : NULL;
}

/* ---------------------------------------------------------------- import: config */

static gint64
key_int (HnGguf *g, const char *arch, const char *key, gint64 dflt, gboolean *ok, GError **error)
{
  g_autofree char *k = g_strdup_printf ("%s.%s", arch, key);
  gint64 v = dflt;
  if (*ok && !hn_gguf_get_int (g, k, &v, error) && error && *error)
    *ok = FALSE;
  return v;
}

static double
key_float (HnGguf *g, const char *arch, const char *key, double dflt, gboolean *ok, GError **error)
{
  g_autofree char *k = g_strdup_printf ("%s.%s", arch, key);
  double v = dflt;
  if (*ok && !hn_gguf_get_float (g, k, &v, error) && error && *error)
    *ok = FALSE;
  return v;
}

static gboolean
require_key (HnGguf *g, const char *arch, const char *key, GError **error)
{
  g_autofree char *k = g_strdup_printf ("%s.%s", arch, key);
  if (hn_gguf_find (g, k))
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: metadata '%s' is missing", hn_gguf_get_path (g), k);
  return FALSE;
}

char *
hn_gguf_config_json (HnGguf *g, GError **error)
{
  const char *file = hn_gguf_get_path (g);
  const char *arch = hn_gguf_get_string (g, "general.architecture", error);
  if (!arch)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: metadata 'general.architecture' is missing", file);
      return NULL;
    }
  const char *type = hn_gguf_get_string (g, "general.type", NULL);
  if (type && g_str_equal (type, "adapter"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: a LoRA adapter GGUF, not a model", file);
      return NULL;
    }
  const Arch *a = arch_by_gguf (arch);
  if (!a)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: GGUF architecture '%s' is not supported; supported: %s",
                   file, arch, supported_list);
      return NULL;
    }
  const char *const required[] = { "embedding_length", "block_count", "feed_forward_length", "attention.head_count" };
  for (guint i = 0; i < G_N_ELEMENTS (required); i++)
    if (!require_key (g, arch, required[i], error))
      return NULL;
  gboolean ok = TRUE;
  gint64 hidden = key_int (g, arch, "embedding_length", 0, &ok, error);
  gint64 layers = key_int (g, arch, "block_count", 0, &ok, error);
  gint64 ffn = key_int (g, arch, "feed_forward_length", 0, &ok, error);
  gint64 heads = key_int (g, arch, "attention.head_count", 0, &ok, error);
  gint64 kv_heads = key_int (g, arch, "attention.head_count_kv", heads, &ok, error);
  gint64 ctx = key_int (g, arch, "context_length", 2048, &ok, error);
  gint64 head_dim = key_int (g, arch, "attention.key_length", heads > 0 ? hidden / heads : 0, &ok, error);
  double eps = key_float (g, arch, "attention.layer_norm_rms_epsilon", 1e-5, &ok, error);
  double theta = key_float (g, arch, "rope.freq_base", 10000.0, &ok, error);
  if (!ok)
    return NULL;
  if (hidden <= 0 || layers <= 0 || ffn <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0
      || head_dim <= 0 || ctx <= 0 || hidden > (1 << 20) || layers > 4096 || heads > 4096 || ffn > (1 << 24))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: implausible model geometry (%s.embedding_length %" G_GINT64_FORMAT
                   ", block_count %" G_GINT64_FORMAT ", head_count %" G_GINT64_FORMAT "/%" G_GINT64_FORMAT ")",
                   file, arch, hidden, layers, heads, kv_heads);
      return NULL;
    }
  const HnGgufTensor *emb = hn_gguf_find_tensor (g, "token_embd.weight");
  if (!emb || emb->n_dims != 2 || emb->ne[0] != hidden)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor 'token_embd.weight' is missing or not [%" G_GINT64_FORMAT
                   ", vocab]", file, hidden);
      return NULL;
    }

  /* A llama-architecture file with a sliding window is a mistral model (the
   * key is ours: llama.cpp's llama ignores it). */
  g_autofree char *swk = g_strdup_printf ("%s.attention.sliding_window", arch);
  gint64 window = 0;
  if (!hn_gguf_get_int (g, swk, &window, error) && error && *error)
    return NULL;
  if (g_str_equal (arch, "llama") && window > 0)
    a = hn_gguf_arch_from_model_type ("mistral");
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "model_type");
  json_builder_add_string_value (b, a->hf);
  json_builder_set_member_name (b, "architectures");
  json_builder_begin_array (b);
  json_builder_end_array (b);
#define SET_INT(k, v) (json_builder_set_member_name (b, k), json_builder_add_int_value (b, v))
#define SET_DBL(k, v) (json_builder_set_member_name (b, k), json_builder_add_double_value (b, v))
#define SET_BOOL(k, v) (json_builder_set_member_name (b, k), json_builder_add_boolean_value (b, v))
  SET_INT ("vocab_size", emb->ne[1]);
  SET_INT ("hidden_size", hidden);
  SET_INT ("intermediate_size", ffn);
  SET_INT ("num_hidden_layers", layers);
  SET_INT ("num_attention_heads", heads);
  SET_INT ("num_key_value_heads", kv_heads);
  SET_INT ("head_dim", head_dim);
  SET_INT ("max_position_embeddings", ctx);
  SET_DBL ("rms_norm_eps", eps);
  SET_DBL ("rope_theta", theta);
  json_builder_set_member_name (b, "hidden_act");
  json_builder_add_string_value (b, a->act);
  SET_BOOL ("tie_word_embeddings", hn_gguf_find_tensor (g, "output.weight") == NULL);
  json_builder_set_member_name (b, "torch_dtype");
  json_builder_add_string_value (b, "float32");
  gint64 id;
  if (hn_gguf_get_int (g, "tokenizer.ggml.bos_token_id", &id, NULL))
    SET_INT ("bos_token_id", id);
  if (hn_gguf_get_int (g, "tokenizer.ggml.eos_token_id", &id, NULL))
    SET_INT ("eos_token_id", id);
  if (hn_gguf_get_int (g, "tokenizer.ggml.padding_token_id", &id, NULL))
    SET_INT ("pad_token_id", id);

  if (g_str_equal (a->hf, "qwen2"))
    SET_BOOL ("attention_bias", hn_gguf_find_tensor (g, "blk.0.attn_q.bias") != NULL);
  if (g_str_equal (a->hf, "llama") || g_str_equal (a->hf, "qwen3"))
    SET_BOOL ("attention_bias", hn_gguf_find_tensor (g, "blk.0.attn_q.bias") != NULL);
  if (g_str_equal (a->hf, "mistral"))
    SET_INT ("sliding_window", window);
  if (g_str_equal (a->hf, "gemma2") || g_str_equal (a->hf, "gemma3_text"))
    {
      gint64 win = key_int (g, arch, "attention.sliding_window", 4096, &ok, error);
      double attn_cap = key_float (g, arch, "attn_logit_softcapping", 0.0, &ok, error);
      double final_cap = key_float (g, arch, "final_logit_softcapping", 0.0, &ok, error);
      double scale = key_float (g, arch, "attention.scale", 0.0, &ok, error);
      /* llama.cpp's layouts: gemma2 alternates (even layers slide), gemma3
       * has one global layer in every 6 unless the file says otherwise */
      gint64 pattern = key_int (g, arch, "attention.sliding_window_pattern",
                                g_str_equal (a->hf, "gemma2") ? 2 : 6, &ok, error);
      if (!ok)
        return NULL;
      if (pattern < 1 || !(scale >= 0) || !isfinite (scale))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s.attention.sliding_window_pattern or .scale is invalid",
                       file, arch);
          return NULL;
        }
      SET_INT ("sliding_window", win);
      SET_DBL ("query_pre_attn_scalar", scale > 0 ? 1.0 / (scale * scale) : (double) head_dim);
      if (attn_cap > 0)
        SET_DBL ("attn_logit_softcapping", attn_cap);
      if (final_cap > 0)
        SET_DBL ("final_logit_softcapping", final_cap);
      json_builder_set_member_name (b, "layer_types");
      json_builder_begin_array (b);
      for (gint64 i = 0; i < layers; i++)
        json_builder_add_string_value (b, (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention");
      json_builder_end_array (b);
      if (g_str_equal (a->hf, "gemma3_text"))
        SET_DBL ("rope_local_base_freq", 10000.0); /* llama.cpp's fixed local base */
    }

  /* RoPE scaling: llama.cpp keeps Llama 3's (and phi3's) as per-frequency
   * divisors in rope_freqs.weight, which is longrope's form in the engine. */
  const char *scaling = NULL;
  g_autofree char *sk = g_strdup_printf ("%s.rope.scaling.type", arch);
  scaling = hn_gguf_get_string (g, sk, NULL);
  double factor = key_float (g, arch, "rope.scaling.factor", 1.0, &ok, error);
  gint64 orig_ctx = key_int (g, arch, "rope.scaling.original_context_length", ctx, &ok, error);
  if (!ok)
    return NULL;
  const HnGgufTensor *freqs = hn_gguf_find_tensor (g, "rope_freqs.weight");
  if (freqs)
    {
      if (freqs->type != HN_GGML_F32 || freqs->n_dims != 1 || freqs->ne[0] != head_dim / 2)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor 'rope_freqs.weight' is not F32 [%" G_GINT64_FORMAT "]",
                       file, head_dim / 2);
          return NULL;
        }
      json_builder_set_member_name (b, "rope_scaling");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "rope_type");
      json_builder_add_string_value (b, "longrope");
      SET_DBL ("factor", 1.0);
      SET_DBL ("attention_factor", 1.0);
      SET_INT ("original_max_position_embeddings", ctx);
      for (int which = 0; which < 2; which++)
        {
          json_builder_set_member_name (b, which ? "long_factor" : "short_factor");
          json_builder_begin_array (b);
          for (gint64 i = 0; i < freqs->ne[0]; i++)
            {
              float f;
              memcpy (&f, (const guint8 *) freqs->data + 4 * i, 4);
              if (!(f > 0) || !isfinite (f))
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: rope_freqs.weight[%" G_GINT64_FORMAT "] is %g",
                               file, i, f);
                  return NULL;
                }
              json_builder_add_double_value (b, f);
            }
          json_builder_end_array (b);
        }
      json_builder_end_object (b);
    }
  else if (scaling && !g_str_equal (scaling, "none"))
    {
      if (!g_str_equal (scaling, "linear") && !g_str_equal (scaling, "yarn"))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: rope scaling type '%s' is not supported (linear, yarn "
                       "and rope_freqs are)", file, scaling);
          return NULL;
        }
      json_builder_set_member_name (b, "rope_scaling");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "rope_type");
      json_builder_add_string_value (b, scaling);
      SET_DBL ("factor", factor);
      if (g_str_equal (scaling, "yarn"))
        SET_INT ("original_max_position_embeddings", orig_ctx);
      json_builder_end_object (b);
    }
#undef SET_INT
#undef SET_DBL
#undef SET_BOOL
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  return json_generator_to_data (gen, NULL);
}

/* ---------------------------------------------------------------- import: tensors */

static gboolean
dequantize_all (void)
{
  const char *v = g_getenv ("HN_GGUF_DEQUANTIZE");
  return v && *v && !g_str_equal (v, "0");
}

/* hn_gguf_permute_qk_rows (GGUF to Hugging Face order) on rows of any bytes. */
static void
permute_rows_bytes (guint8 *w, gint64 rows, gsize row_bytes, int n_head)
{
  gint64 hd = rows / n_head, half = hd / 2;
  g_autofree guint8 *tmp = g_malloc ((gsize) hd * row_bytes);
  for (int h = 0; h < n_head; h++)
    {
      guint8 *head = w + (gsize) (h * hd) * row_bytes;
      for (gint64 j = 0; j < half; j++)
        for (int s = 0; s < 2; s++)
          memcpy (tmp + (gsize) (s * half + j) * row_bytes, head + (gsize) (2 * j + s) * row_bytes, row_bytes);
      memcpy (head, tmp, (gsize) hd * row_bytes);
    }
}

static void
gguf_unref (gpointer p)
{
  hn_gguf_free (p);
}

HnSafetensors *
hn_gguf_open_as_safetensors (const char *gguf_path, GError **error)
{
  HnGguf *g = hn_gguf_open (gguf_path, error);
  if (!g)
    return NULL;
  const char *file = hn_gguf_get_path (g);
  g_autoptr (HnSafetensors) st = hn_safetensors_new_in_memory (file, g, gguf_unref);
  const char *arch_name = hn_gguf_get_string (g, "general.architecture", error);
  const Arch *a = arch_name ? arch_by_gguf (arch_name) : NULL;
  if (!a)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: GGUF architecture '%s' is not supported; supported: %s",
                     file, arch_name ? arch_name : "(none)", supported_list);
      return NULL;
    }
  g_autofree char *hk = g_strdup_printf ("%s.attention.head_count", a->gguf);
  g_autofree char *kk = g_strdup_printf ("%s.attention.head_count_kv", a->gguf);
  gint64 heads = 0, kv_heads = 0;
  hn_gguf_get_int (g, hk, &heads, NULL);
  if (!hn_gguf_get_int (g, kk, &kv_heads, NULL))
    kv_heads = heads;
  hn_safetensors_set_metadata (st, "format", "pt");
  for (guint i = 0; i < hn_gguf_get_n_tensors (g); i++)
    {
      const HnGgufTensor *t = hn_gguf_get_tensor (g, i);
      if (g_str_equal (t->name, "rope_freqs.weight") || g_str_has_prefix (t->name, "rope_factors_"))
        continue; /* read into the config */
      g_autofree char *name = gguf_to_hf_name (a, t->name);
      if (!name)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor '%s' has no transformers counterpart for "
                       "architecture %s", file, t->name, a->gguf);
          return NULL;
        }
      if (t->n_dims > 2)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor '%s' has %u dimensions", file, t->name,
                       t->n_dims);
          return NULL;
        }
      gint64 shape[2] = { t->n_dims == 2 ? t->ne[1] : t->ne[0], t->ne[0] };
      guint ndim = t->n_dims;
      gboolean is_q = g_str_has_suffix (t->name, "attn_q.weight") || g_str_has_suffix (t->name, "attn_q.bias");
      gboolean is_k = g_str_has_suffix (t->name, "attn_k.weight") || g_str_has_suffix (t->name, "attn_k.bias");
      gboolean permute = a->permute_qk && (is_q || is_k);
      gboolean plus_one = a->norm_plus_one && hn_gguf_is_norm_weight (name);
      /* Float tensors that need no change are read in place (zero copy). */
      if (!permute && !plus_one && (t->type == HN_GGML_F32 || t->type == HN_GGML_F16 || t->type == HN_GGML_BF16))
        {
          HnStDtype dt = t->type == HN_GGML_F32 ? HN_ST_DTYPE_F32 : t->type == HN_GGML_F16 ? HN_ST_DTYPE_F16
                                                                                            : HN_ST_DTYPE_BF16;
          if (!hn_safetensors_add_in_memory (st, name, dt, ndim, shape, t->data, t->nbytes, NULL, error))
            return NULL;
          continue;
        }
      /* Quantized matrices of a type the device kernels read stay in their
       * blocks (the Q/K permutation moves whole rows); HN_GGUF_DEQUANTIZE=1
       * dequantizes them to f32 here instead (for comparisons). */
      HnDType qdt;
      if (ndim == 2 && !plus_one && hn_dtype_from_ggml_type (t->type, &qdt) && !dequantize_all ())
        {
          const void *data = t->data;
          guint8 *copy = NULL;
          if (permute)
            {
              int nh = (int) (is_q ? heads : kv_heads);
              if (nh <= 0 || shape[0] % (2 * nh) != 0)
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' has %" G_GINT64_FORMAT " rows, not "
                               "a multiple of 2 x %d heads", file, t->name, shape[0], nh);
                  return NULL;
                }
              copy = g_memdup2 (t->data, t->nbytes);
              permute_rows_bytes (copy, shape[0], hn_ggml_row_size (t->type, shape[1]), nh);
              data = copy;
            }
          if (!hn_safetensors_add_ggml_in_memory (st, name, t->type, ndim, shape, data, t->nbytes, copy, error))
            return NULL;
          continue;
        }
      if ((gsize) t->n_elements > G_MAXSIZE / 4)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' is too large", file, t->name);
          return NULL;
        }
      float *f = g_try_new (float, MAX (t->n_elements, 1));
      if (!f)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: no host memory to dequantize tensor '%s' (%"
                       G_GINT64_FORMAT " elements)", file, t->name, t->n_elements);
          return NULL;
        }
      if (!hn_gguf_tensor_to_f32 (g, t, f, error))
        {
          g_free (f);
          return NULL;
        }
      if (permute)
        {
          int nh = (int) (is_q ? heads : kv_heads);
          gint64 rows = shape[0], cols = ndim == 2 ? shape[1] : 1;
          if (ndim == 1)
            rows = shape[0];
          if (nh <= 0 || rows % (2 * nh) != 0)
            {
              g_free (f);
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' has %" G_GINT64_FORMAT " rows, not a "
                           "multiple of 2 x %d heads", file, t->name, rows, nh);
              return NULL;
            }
          hn_gguf_permute_qk_rows (f, rows, cols, nh, FALSE);
        }
      if (plus_one)
        for (gint64 e = 0; e < t->n_elements; e++)
          f[e] -= 1.0f;
      if (!hn_safetensors_add_in_memory (st, name, HN_ST_DTYPE_F32, ndim, shape, f, (gsize) t->n_elements * 4, f,
                                         error))
        return NULL;
    }
  return g_steal_pointer (&st);
}

