/* Weight-name mapping and validation per family: checkpoint tensors ->
 * HnTransformerWeights in one canonical layout. Matrices keep their stored
 * dtype (f32/f16/bf16); fused q/k/v and gate/up tensors are split by rows,
 * GPT-2's Conv1D [in, out] weights are transposed to [out, in]; vectors
 * (norms, biases) become f32. Every tensor of the checkpoint must be used:
 * one the graph does not know is an error naming it, so a model with a
 * feature we do not build never runs silently wrong. */
#include "base/hn-error.h"
#include "transformer/transformer-private.h"
#include "tensor/quant.h"
#include "tensor/ggml-quants.h"

#include <math.h>
#include <string.h>

typedef enum {
  QKV_SEPARATE,
  QKV_CONCAT,       /* rows: q (H*D), k (KVH*D), v (KVH*D) — phi3, falcon multi-query */
  QKV_CONV1D,       /* gpt2: Conv1D [C, 3C], columns q, k, v */
  QKV_HEAD_SPLIT,   /* rows [H, 3, D] — gpt_neox, bloom, falcon (old, not multi-query) */
  QKV_GROUPED,      /* rows [KVH, H/KVH + 2, D] — falcon new_decoder_architecture */
  QKV_CODEGEN,      /* rows [4, 3, H*D/4] in the order q, v, k — codegen's model-parallel layout */
} QkvLayout;

typedef struct {
  const char *embed, *pos, *embed_norm;
  const char *layer; /* prefix before the layer number */
  const char *ln1, *ln2, *post_attn, *post_ffn;
  const char *q, *k, *v, *qkv, *o;
  const char *q_norm, *k_norm;
  const char *gate, *up, *gate_up, *down;
  const char *final_norm, *lm_head;
  QkvLayout qkv_layout;
  gboolean conv1d;        /* every matrix is Conv1D (gpt2) */
  gboolean llama_overlay; /* scheme_names only: a row put over llama's names */
} Names;

typedef struct {
  HnTransformer *m;
  HnSafetensors *st;
  GHashTable *used; /* tensor name -> TRUE */
  gboolean linear;  /* the matrix being taken is a layer's Linear weight (quantized with m->quant) */
  float scale;      /* uploads are multiplied by this (falcon_h1's muP multipliers folded in; else 1) */
} Loader;

static gboolean
st_to_dtype (const HnSafetensorInfo *t, HnDType *out, GError **error)
{
  switch (t->dtype)
    {
    case HN_ST_DTYPE_F32: *out = HN_DTYPE_F32; return TRUE;
    case HN_ST_DTYPE_F16: *out = HN_DTYPE_F16; return TRUE;
    case HN_ST_DTYPE_BF16: *out = HN_DTYPE_BF16; return TRUE;
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s has dtype %s; only F32, F16 and BF16 weights are supported",
                   t->file, t->name, hn_st_dtype_name (t->dtype));
      return FALSE;
    }
}

static const HnSafetensorInfo *
find (Loader *L, const char *name)
{
  const HnSafetensorInfo *t = hn_safetensors_lookup (L->st, name);
  if (!t && g_str_has_prefix (name, "model."))
    t = hn_safetensors_lookup (L->st, name + 6); /* a bare base model saved without its prefix */
  const HnArchPackage *pkg = L->m->config->text_config_resolved
                               ? hn_arch_package_lookup (L->m->config->outer_model_type)
                               : NULL;
  if (!t && pkg && (pkg->layout == HN_PACKAGE_THINKER || pkg->layout == HN_PACKAGE_OMNI))
    {
      /* the omni packages: the thinker's text model at model.X (thinker.model.X in the omni model) */
      g_autofree char *pn = hn_arch_package_tensor_name (pkg->layout, name);
      t = hn_safetensors_lookup (L->st, pn);
    }
  if (!t && L->m->config->text_config_resolved)
    {
      /* A multimodal package (llava, qwen2_vl, gemma3, mllama...) keeps its text
       * model under a prefix: transformers 5 writes model.language_model.X with
       * a top-level lm_head, 4.x wrote language_model.model.X and
       * language_model.lm_head. */
      g_autofree char *v4 = g_strconcat ("language_model.", name, NULL);
      if (g_str_has_prefix (name, "model."))
        {
          g_autofree char *v5 = g_strconcat ("model.language_model.", name + 6, NULL);
          t = hn_safetensors_lookup (L->st, v5);
        }
      if (!t)
        t = hn_safetensors_lookup (L->st, v4);
      if (!t && g_str_has_prefix (name, "model."))
        {
          /* idefics2 names its text model text_model */
          g_autofree char *tm = g_strconcat ("model.text_model.", name + 6, NULL);
          t = hn_safetensors_lookup (L->st, tm);
        }
      if (!t)
        {
          /* the hub's Emu3 checkpoints: a nested Emu3ForCausalLM, text_model.model.X and text_model.lm_head
           * (transformers' conversion_mapping renames them on load) */
          g_autofree char *v4t = g_strconcat ("text_model.", name, NULL);
          t = hn_safetensors_lookup (L->st, v4t);
        }
    }
  return t;
}

/* The vision tower, projector and other towers of a multimodal package: not
 * run, not an error, and kept as they are when a checkpoint is written (the
 * checkpoint writer copies every tensor the graph did not take). */
static gboolean
is_other_tower (const HnModelConfig *c, const char *name)
{
  const HnArchPackage *pkg = c->text_config_resolved ? hn_arch_package_lookup (c->outer_model_type) : NULL;
  if (pkg && (pkg->layout == HN_PACKAGE_THINKER || pkg->layout == HN_PACKAGE_OMNI))
    {
      /* a thinker's text model sits at model.X: anything else there is not a tower */
      g_autofree char *text = hn_arch_package_text_name (pkg->layout, name);
      return text == NULL;
    }
  return c->text_config_resolved && !g_str_has_prefix (name, "model.language_model.") &&
         !g_str_has_prefix (name, "model.text_model.") && !g_str_has_prefix (name, "language_model.") &&
         !g_str_has_prefix (name, "text_model.") && !g_str_has_prefix (name, "lm_head.");
}

/* The checkpoint layer of `name` (under N->layer, in a text checkpoint or any package layout find()
 * reads), or -1. */
static int layer_of (const Names *N, const char *name);

static int
text_layer_of (const Names *N, const char *name)
{
  static const char *const nests[][2] = {
    { "model.language_model.", "model." }, { "model.text_model.", "model." },
    { "language_model.", "" },             { "text_model.", "" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (nests); i++)
    if (g_str_has_prefix (name, nests[i][0]))
      {
        g_autofree char *t = g_strconcat (nests[i][1], name + strlen (nests[i][0]), NULL);
        return layer_of (N, t);
      }
  return layer_of (N, name);
}

/* A checkpoint layer the graph does not run (hp.layer_src leaves it out: mllama's cross-attention
 * layers on text alone). */
static gboolean
is_skipped_layer (const HnTransformerHParams *hp, int src)
{
  if (!hp->layer_src || src < 0 || src >= hp->src_n_layer)
    return FALSE;
  for (int i = 0; i < hp->n_layer; i++)
    if (hp->layer_src[i] == src)
      return FALSE;
  return TRUE;
}

/* Tensors transformers skips on load (_keys_to_ignore_on_load_unexpected, searched as regexes) when the
 * model has no module for them: the multi-token-prediction layers GLM checkpoints carry after the
 * last decoder layer (Qwen3-Next / Qwen3.5: mtp.*), which the logits never see. They are kept on export
 * like the towers. */
static gboolean
ignored_on_load (const char *model_type, const char *name)
{
  static const struct {
    const char *model_type, *pattern;
  } keys[] = {
    { "glm_ocr_text", "model\\.language_model\\.layers\\.16" }, /* GlmOcrPreTrainedModel */
    { "glm4_moe", "model\\.layers\\.(46|92)" },                    /* Glm4MoePreTrainedModel */
    { "glm4v_moe_text", "model\\.layers\\.(46|92)" },              /* Glm4vMoePreTrainedModel inherits it */
    { "qwen3_next", "^mtp\\." },                                   /* Qwen3NextPreTrainedModel: ^mtp.* */
    { "qwen3_5_text", "^mtp\\." },                                 /* Qwen3_5PreTrainedModel */
    { "qwen3_5_moe_text", "^mtp\\." },                             /* Qwen3_5MoePreTrainedModel */
    /* not a load-time skip: Ernie4_5_VLMoeMoeBlock runs its vision experts on image tokens only */
    { "ernie4_5_vl_moe_text", "\\.mlp\\.vision_moe\\." },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (keys); i++)
    if (strcmp (keys[i].model_type, model_type) == 0 && g_regex_match_simple (keys[i].pattern, name, 0, 0))
      return TRUE;
  return FALSE;
}

static gboolean
check_shape (const HnSafetensorInfo *t, int ndim, const gint64 *shape, GError **error)
{
  gboolean ok = (int) t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    ok = t->shape[i] == shape[i];
  if (!ok)
    {
      g_autoptr (GString) want = g_string_new ("[");
      g_autoptr (GString) got = g_string_new ("[");
      for (int i = 0; i < ndim; i++)
        g_string_append_printf (want, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
      for (guint i = 0; i < t->ndim; i++)
        g_string_append_printf (got, "%s%" G_GINT64_FORMAT, i ? ", " : "", t->shape[i]);
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s has shape %s], config.json implies %s]", t->file,
                   t->name, got->str, want->str);
      return FALSE;
    }
  return TRUE;
}

/* NaN/Inf values of a weight in the upload format: all exponent bits set.
 * One pass over bytes that are being copied anyway. */
static guint64
count_nonfinite (HnDType dtype, const void *data, gsize nbytes)
{
  guint64 n = 0;
  if (dtype == HN_DTYPE_F32)
    {
      const guint32 *v = data;
      for (gsize i = 0; i < nbytes / 4; i++)
        n += (v[i] & 0x7f800000u) == 0x7f800000u;
    }
  else if (dtype == HN_DTYPE_F16 || dtype == HN_DTYPE_BF16)
    {
      const guint16 *v = data;
      guint16 mask = dtype == HN_DTYPE_F16 ? 0x7c00 : 0x7f80;
      for (gsize i = 0; i < nbytes / 2; i++)
        n += (v[i] & mask) == mask;
    }
  return n;
}

/* data · s as a new copy of the same dtype (f32, f16 or bf16). */
static void *
scaled_copy (HnDType dtype, const void *data, gsize nbytes, float s)
{
  void *out = g_memdup2 (data, nbytes);
  if (dtype == HN_DTYPE_F32)
    for (gsize i = 0; i < nbytes / 4; i++)
      ((float *) out)[i] *= s;
  else if (dtype == HN_DTYPE_F16)
    for (gsize i = 0; i < nbytes / 2; i++)
      ((guint16 *) out)[i] = hn_f32_to_f16 (hn_f16_to_f32 (((guint16 *) out)[i]) * s);
  else
    for (gsize i = 0; i < nbytes / 2; i++)
      ((guint16 *) out)[i] = hn_f32_to_bf16 (hn_bf16_to_f32 (((guint16 *) out)[i]) * s);
  return out;
}

static HnTensor *
upload (Loader *L, const char *name, HnDType dtype, int ndim, const gint64 *shape, const void *data, gsize nbytes,
        GError **error)
{
  g_autofree void *scaled = NULL;
  if (L->scale != 1.0f)
    {
      if (dtype != HN_DTYPE_F32 && dtype != HN_DTYPE_F16 && dtype != HN_DTYPE_BF16)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s carries a multiplier, which a %s weight cannot "
                       "take", L->m->dir, name, hn_dtype_name (dtype));
          return NULL;
        }
      data = scaled = scaled_copy (dtype, data, nbytes, L->scale);
    }
  guint64 bad = count_nonfinite (dtype, data, nbytes);
  if (bad && !L->m->nonfinite_tensor)
    {
      L->m->nonfinite_tensor = g_strdup (name);
      L->m->nonfinite_values = bad;
      g_message ("%s: weight %s holds %" G_GUINT64_FORMAT " NaN/Inf values: the model's outputs will not be numbers",
                 L->m->dir, name, bad);
    }
  if (L->linear && ndim == 2 && hn_dtype_is_quant (L->m->quant))
    {
      /* QLoRA: packed on the host block by block, only the packed bytes go to the device */
      if (!hn_quant_shape_ok (L->m->quant, shape[1]))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "%s: --quantization %s packs rows of whole %u-element blocks, and %s has %" G_GINT64_FORMAT
                       " columns (use nf4 or int8)",
                       L->m->dir, hn_quant_dtype_name (L->m->quant),
                       hn_ggml_block_size (hn_dtype_ggml_type (L->m->quant)), name, shape[1]);
          return NULL;
        }
      guint64 qn = hn_quant_nbytes (L->m->quant, shape[0], shape[1]);
      g_autofree guint8 *packed = g_try_malloc (qn);
      if (!packed)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: no host memory to quantize %s", L->m->dir, name);
          return NULL;
        }
      hn_quant_pack (L->m->quant, data, dtype, shape[0], shape[1], packed);
      HnTensor *q = hn_tensor_new_quant (L->m->ctx, name, L->m->quant, shape[0], shape[1], packed, error);
      if (q)
        {
          g_ptr_array_add (L->m->owned, q);
          L->m->weight_bytes += qn;
        }
      return q;
    }
  g_autofree guint16 *as_f16 = NULL;
  if (dtype == HN_DTYPE_BF16 && L->linear && ndim == 2 && hn_bf16_weights_as_f16 (L->m->ctx))
    {
      if (!hn_bf16_to_f16_if_fits (data, nbytes / 2, &as_f16))
        g_message ("%s: weight %s has values beyond the f16 range (±65504): kept in bf16, its matmuls clamp",
                   L->m->dir, name);
      else
        {
          dtype = HN_DTYPE_F16;
          data = as_f16;
        }
    }
  HnTensor *t = hn_tensor_new_named (L->m->ctx, name, dtype, ndim, shape, error);
  if (!t)
    return NULL;
  if (!hn_tensor_upload_raw (t, data, nbytes, error))
    {
      hn_tensor_unref (t);
      return NULL;
    }
  g_ptr_array_add (L->m->owned, t);
  L->m->weight_bytes += nbytes;
  return t;
}

/* Records where a device weight came from (hn_transformer_get_weight_origins). */
static void
note_origin (Loader *L, HnTensor *t, const HnSafetensorInfo *src, gboolean transposed, gint64 row0,
             const gint64 *rows)
{
  if (!t)
    return;
  if (!L->m->origins)
    L->m->origins = g_array_new (FALSE, TRUE, sizeof (HnWeightOrigin));
  HnWeightOrigin o = { t, g_strdup (src->name), transposed, row0,
                       rows ? g_memdup2 (rows, sizeof (gint64) * (gsize) t->shape[0]) : NULL };
  g_array_append_val (L->m->origins, o);
}

/* Rows `idx` (all rows when NULL) of a GGUF tensor of ggml blocks: with
 * `keep`, a type the kernels read (matmul, matrix-vector, embedding) stays in
 * its blocks on the device; other types are dequantized to f32. */
static HnTensor *
upload_ggml (Loader *L, const HnSafetensorInfo *t, const char *name, const gint64 *idx, gint64 n_rows, gint64 cols,
             gboolean keep, GError **error)
{
  HnGgmlType g = (HnGgmlType) t->ggml_type;
  gsize rs = hn_ggml_row_size (g, cols);
  HnDType dt;
  if (keep && hn_dtype_from_ggml_type (g, &dt))
    {
      guint64 qn = hn_quant_nbytes (dt, n_rows, cols);
      g_autofree guint8 *packed = g_try_malloc0 (qn);
      if (!packed)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: no host memory for %s", L->m->dir, name);
          return NULL;
        }
      for (gint64 r = 0; r < n_rows; r++)
        memcpy (packed + (gsize) r * rs, (const guint8 *) t->data + (gsize) (idx ? idx[r] : r) * rs, rs);
      HnTensor *q = hn_tensor_new_quant (L->m->ctx, name, dt, n_rows, cols, packed, error);
      if (q)
        {
          g_ptr_array_add (L->m->owned, q);
          L->m->weight_bytes += qn;
        }
      return q;
    }
  g_autofree float *f = g_try_new (float, (gsize) (n_rows * cols));
  if (!f)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: no host memory to dequantize %s", L->m->dir, name);
      return NULL;
    }
  for (gint64 r = 0; r < n_rows; r++)
    if (!hn_ggml_dequantize (g, (const guint8 *) t->data + (gsize) (idx ? idx[r] : r) * rs, f + r * cols, cols, error))
      return NULL;
  gboolean linear = L->linear;
  L->linear = FALSE; /* already quantized: never packed again */
  HnTensor *out = upload (L, name, HN_DTYPE_F32, 2, (gint64[]) { n_rows, cols }, f, sizeof (float) * (gsize) (n_rows * cols),
                          error);
  L->linear = linear;
  return out;
}

/* A matrix [rows, cols] in its stored dtype. */
static gboolean
take_matrix (Loader *L, const char *name, gint64 rows, gint64 cols, gboolean required, HnTensor **out,
             GError **error)
{
  *out = NULL;
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      if (required)
        g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return !required;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  HnDType dt;
  if (t->dtype == HN_ST_DTYPE_GGML)
    {
      if (!check_shape (t, 2, (gint64[]) { rows, cols }, error))
        return FALSE;
      *out = upload_ggml (L, t, name, NULL, rows, cols, TRUE, error);
      note_origin (L, *out, t, FALSE, 0, NULL);
      return *out != NULL;
    }
  if (!st_to_dtype (t, &dt, error) || !check_shape (t, 2, (gint64[]) { rows, cols }, error))
    return FALSE;
  g_autofree void *copy = g_memdup2 (t->data, t->nbytes); /* mapping may be unaligned */
  *out = upload (L, name, dt, 2, (gint64[]) { rows, cols }, copy, t->nbytes, error);
  note_origin (L, *out, t, FALSE, 0, NULL);
  return *out != NULL;
}

/* Rows of a stored matrix picked by `idx` (n_idx rows of `cols`), same dtype. */
static HnTensor *
gather_rows (Loader *L, const HnSafetensorInfo *t, const char *name, const gint64 *idx, gint64 n_idx, gint64 cols,
             GError **error)
{
  HnDType dt;
  if (t->dtype == HN_ST_DTYPE_GGML && t->ndim == 2)
    {
      HnTensor *out = upload_ggml (L, t, name, idx, n_idx, cols, TRUE, error);
      note_origin (L, out, t, FALSE, 0, idx);
      return out;
    }
  if (!st_to_dtype (t, &dt, error))
    return NULL;
  gsize es = hn_st_dtype_size (t->dtype);
  gsize row_bytes = es * (gsize) cols;
  g_autofree guint8 *buf = g_malloc ((gsize) n_idx * row_bytes);
  for (gint64 r = 0; r < n_idx; r++)
    memcpy (buf + (gsize) r * row_bytes, (const guint8 *) t->data + (gsize) idx[r] * row_bytes, row_bytes);
  HnTensor *out = t->ndim == 1 ? upload (L, name, dt, 1, (gint64[]) { n_idx }, buf, (gsize) n_idx * row_bytes, error)
                                : upload (L, name, dt, 2, (gint64[]) { n_idx, cols }, buf, (gsize) n_idx * row_bytes, error);
  note_origin (L, out, t, FALSE, 0, idx);
  return out;
}

/* A stored [in, out] Conv1D weight transposed to [out, in] on the host (same dtype). */
static guint8 *
transpose_host (const HnSafetensorInfo *t)
{
  gint64 in = t->shape[0], out = t->shape[1];
  gsize es = hn_st_dtype_size (t->dtype);
  guint8 *buf = g_malloc (t->nbytes);
  const guint8 *src = t->data;
  for (gint64 i = 0; i < in; i++)
    for (gint64 o = 0; o < out; o++)
      memcpy (buf + ((gsize) o * in + i) * es, src + ((gsize) i * out + o) * es, es);
  return buf;
}

static HnTensor *
transpose_conv1d (Loader *L, const HnSafetensorInfo *t, const char *name, GError **error)
{
  HnDType dt;
  if (!st_to_dtype (t, &dt, error))
    return NULL;
  g_autofree guint8 *buf = transpose_host (t);
  HnTensor *out = upload (L, name, dt, 2, (gint64[]) { t->shape[1], t->shape[0] }, buf, t->nbytes, error);
  note_origin (L, out, t, TRUE, 0, NULL);
  return out;
}

/* A Conv1D weight stored [in, out]; returned as [out, in]. */
static gboolean
take_conv1d (Loader *L, const char *name, gint64 in, gint64 out_dim, HnTensor **out, GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if (!check_shape (t, 2, (gint64[]) { in, out_dim }, error))
    return FALSE;
  *out = transpose_conv1d (L, t, name, error);
  return *out != NULL;
}

/* A vector [n] (ndim 1) or a one-row matrix [1, n] (ndim 2) converted to an f32 vector [n]
 * (norm weights, biases). */
static gboolean
take_vector_of (Loader *L, const char *name, int ndim, gint64 n, gboolean required, HnTensor **out, GError **error)
{
  *out = NULL;
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      if (required)
        g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return !required;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if (!check_shape (t, ndim, ndim == 1 ? (gint64[]) { n } : (gint64[]) { 1, n }, error))
    return FALSE;
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *out = upload (L, name, HN_DTYPE_F32, 1, (gint64[]) { n }, f, sizeof (float) * (gsize) n, error);
  note_origin (L, *out, t, FALSE, 0, NULL);
  return *out != NULL;
}

static gboolean
take_vector (Loader *L, const char *name, gint64 n, gboolean required, HnTensor **out, GError **error)
{
  return take_vector_of (L, name, 1, n, required, out, error);
}

/* f32 vector from host floats (split fused biases). */
static HnTensor *
vector_from_f32 (Loader *L, const char *name, const float *v, gint64 n, GError **error)
{
  return upload (L, name, HN_DTYPE_F32, 1, (gint64[]) { n }, v, sizeof (float) * (gsize) n, error);
}

/* Row indices of q, k and v inside a fused projection. */
static void
qkv_rows (const HnTransformerHParams *hp, QkvLayout layout, gint64 *qi, gint64 *ki, gint64 *vi)
{
  int H = hp->n_head, KVH = hp->n_kv_head, D = hp->head_dim;
  switch (layout)
    {
    case QKV_HEAD_SPLIT:
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++)
          {
            qi[h * D + d] = (gint64) h * 3 * D + d;
            ki[h * D + d] = (gint64) h * 3 * D + D + d;
            vi[h * D + d] = (gint64) h * 3 * D + 2 * D + d;
          }
      break;
    case QKV_GROUPED:
      {
        int qpk = H / KVH;
        for (int g = 0; g < KVH; g++)
          {
            gint64 base = (gint64) g * (qpk + 2) * D;
            for (int j = 0; j < qpk; j++)
              for (int d = 0; d < D; d++)
                qi[(g * qpk + j) * D + d] = base + (gint64) j * D + d;
            for (int d = 0; d < D; d++)
              {
                ki[g * D + d] = base + (gint64) qpk * D + d;
                vi[g * D + d] = base + (gint64) (qpk + 1) * D + d;
              }
          }
      }
      break;
    case QKV_CODEGEN:
      {
        gint64 ld = (gint64) H * D / 4;
        for (int c = 0; c < 4; c++)
          for (gint64 j = 0; j < ld; j++)
            {
              qi[c * ld + j] = c * 3 * ld + j;
              vi[c * ld + j] = c * 3 * ld + ld + j;
              ki[c * ld + j] = c * 3 * ld + 2 * ld + j;
            }
      }
      break;
    default: /* concatenated */
      for (gint64 i = 0; i < (gint64) H * D; i++)
        qi[i] = i;
      for (gint64 i = 0; i < (gint64) KVH * D; i++)
        {
          ki[i] = (gint64) H * D + i;
          vi[i] = (gint64) (H + KVH) * D + i;
        }
      break;
    }
}

static gboolean
take_fused_qkv (Loader *L, const Names *N, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 total = qd + 2 * kvd;
  g_autofree char *wname = g_strdup_printf ("%s%s.weight", pfx, N->qkv);
  g_autofree char *bname = g_strdup_printf ("%s%s.bias", pfx, N->qkv);
  const HnSafetensorInfo *w = find (L, wname);
  if (!w)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, wname);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) w->name);
  g_autofree gint64 *qi = g_new (gint64, qd);
  g_autofree gint64 *ki = g_new (gint64, kvd);
  g_autofree gint64 *vi = g_new (gint64, kvd);
  qkv_rows (hp, N->qkv_layout, qi, ki, vi);
  g_autofree char *qn = g_strdup_printf ("%sq (from %s)", pfx, N->qkv);
  g_autofree char *kn = g_strdup_printf ("%sk (from %s)", pfx, N->qkv);
  g_autofree char *vn = g_strdup_printf ("%sv (from %s)", pfx, N->qkv);
  if (N->qkv_layout == QKV_CONV1D)
    {
      if (!check_shape (w, 2, (gint64[]) { C, total }, error))
        return FALSE;
      HnDType dt;
      if (!st_to_dtype (w, &dt, error))
        return FALSE;
      gsize es = hn_st_dtype_size (w->dtype);
      g_autofree guint8 *host = transpose_host (w); /* [3C, C]: q rows, k rows, v rows */
      L->linear = TRUE;
      lw->wq = upload (L, qn, dt, 2, (gint64[]) { qd, C }, host, (gsize) (qd * C) * es, error);
      lw->wk = lw->wq ? upload (L, kn, dt, 2, (gint64[]) { kvd, C }, host + (gsize) (qd * C) * es, (gsize) (kvd * C) * es, error) : NULL;
      lw->wv = lw->wk ? upload (L, vn, dt, 2, (gint64[]) { kvd, C }, host + (gsize) ((qd + kvd) * C) * es, (gsize) (kvd * C) * es, error) : NULL;
      L->linear = FALSE;
      if (!lw->wv)
        return FALSE;
      note_origin (L, lw->wq, w, TRUE, 0, NULL);
      note_origin (L, lw->wk, w, TRUE, qd, NULL);
      note_origin (L, lw->wv, w, TRUE, qd + kvd, NULL);
    }
  else
    {
      if (!check_shape (w, 2, (gint64[]) { total, C }, error))
        return FALSE;
      L->linear = TRUE;
      gboolean ok = (lw->wq = gather_rows (L, w, qn, qi, qd, C, error)) && (lw->wk = gather_rows (L, w, kn, ki, kvd, C, error)) &&
                    (lw->wv = gather_rows (L, w, vn, vi, kvd, C, error));
      L->linear = FALSE;
      if (!ok)
        return FALSE;
    }
  const HnSafetensorInfo *b = find (L, bname);
  if (b)
    {
      g_hash_table_add (L->used, (gpointer) b->name);
      if (!check_shape (b, 1, (gint64[]) { total }, error))
        return FALSE;
      g_autofree float *f = hn_safetensor_info_dup_f32 (b, error);
      if (!f)
        return FALSE;
      g_autofree float *bq = g_new (float, qd);
      g_autofree float *bk = g_new (float, kvd);
      g_autofree float *bv = g_new (float, kvd);
      if (N->qkv_layout == QKV_CONV1D)
        {
          memcpy (bq, f, sizeof (float) * qd);
          memcpy (bk, f + qd, sizeof (float) * kvd);
          memcpy (bv, f + qd + kvd, sizeof (float) * kvd);
        }
      else
        {
          for (gint64 i = 0; i < qd; i++)
            bq[i] = f[qi[i]];
          for (gint64 i = 0; i < kvd; i++)
            {
              bk[i] = f[ki[i]];
              bv[i] = f[vi[i]];
            }
        }
      /* names of their own: the trainer keys parameters (and their AdamW moments) by name */
      g_autofree char *bqn = g_strdup_printf ("%sq bias (from %s)", pfx, N->qkv);
      g_autofree char *bkn = g_strdup_printf ("%sk bias (from %s)", pfx, N->qkv);
      g_autofree char *bvn = g_strdup_printf ("%sv bias (from %s)", pfx, N->qkv);
      if (!(lw->bq = vector_from_f32 (L, bqn, bq, qd, error)) || !(lw->bk = vector_from_f32 (L, bkn, bk, kvd, error)) ||
          !(lw->bv = vector_from_f32 (L, bvn, bv, kvd, error)))
        return FALSE;
      gboolean contiguous = N->qkv_layout == QKV_CONV1D;
      note_origin (L, lw->bq, b, FALSE, 0, contiguous ? NULL : qi);
      note_origin (L, lw->bk, b, FALSE, qd, contiguous ? NULL : ki);
      note_origin (L, lw->bv, b, FALSE, qd + kvd, contiguous ? NULL : vi);
    }
  return TRUE;
}

/* Linear weight [rows, cols] plus optional bias, Conv1D-aware. */
static gboolean
take_linear (Loader *L, const Names *N, const char *pfx, const char *part, gint64 rows, gint64 cols, HnTensor **w,
             HnTensor **b, GError **error)
{
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, part);
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, part);
  L->linear = TRUE;
  gboolean ok = N->conv1d ? take_conv1d (L, wn, cols, rows, w, error) : take_matrix (L, wn, rows, cols, TRUE, w, error);
  L->linear = FALSE;
  return ok && take_vector (L, bn, rows, FALSE, b, error);
}

static gboolean
take_norm (Loader *L, const char *pfx, const char *part, gint64 n, gboolean params, HnTensor **w, HnTensor **b,
           GError **error)
{
  if (!part)
    return TRUE;
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, part);
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, part);
  const HnTransformerHParams *hp = &L->m->hp;
  const HnSafetensorInfo *t = find (L, wn);
  if (t && hp->layernorm && hp->norm_plus_one)
    {
      /* LayerNorm1p (nemotron) scales by 1 + w: fold the one into the stored weight */
      g_hash_table_add (L->used, (gpointer) t->name);
      if (!check_shape (t, 1, (gint64[]) { n }, error))
        return FALSE;
      g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
      if (!f)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        f[i] += 1.0f;
      if (!(*w = vector_from_f32 (L, wn, f, n, error)))
        return FALSE;
    }
  else if (!take_vector (L, wn, n, params, w, error))
    return FALSE;
  HnTensor *dummy = NULL;
  return take_vector (L, bn, n, FALSE, b ? b : &dummy, error);
}

/* One projection (gate, up or down) of every expert of a layer, gathered on the host as
 * [E, rows, cols] in the checkpoint's dtype, then uploaded as one stacked tensor (the sparse
 * path's moe_matmul reads it; each expert is a view of it) or, when the stack does not fit one
 * device buffer, as one tensor per expert (the dense path). */
typedef struct {
  gint64 E, rows, cols;
  HnStDtype st_dt;
  gboolean have_dt;
  guint8 *data;
  const HnSafetensorInfo **src; /* [E]: where expert e's rows came from */
  gint64 **src_rows;            /* [E][rows]: their rows in the source seen as 2-D (owned) */
} Slab;

static void
slab_init (Slab *sl, gint64 E, gint64 rows, gint64 cols)
{
  memset (sl, 0, sizeof *sl);
  sl->E = E;
  sl->rows = rows;
  sl->cols = cols;
  sl->src = g_new0 (const HnSafetensorInfo *, E);
  sl->src_rows = g_new0 (gint64 *, E);
}

static void
slab_clear (Slab *sl)
{
  for (gint64 e = 0; e < sl->E; e++)
    g_free (sl->src_rows[e]);
  g_free (sl->src_rows);
  g_free (sl->src);
  g_free (sl->data);
}

/* Expert e's slab: rows idx[r] (of cols elements) of src seen as [src rows, cols], or with
 * `transposed` (gpt_oss stores x @ W) column idx[r] of the [cols, b] matrix at element offset
 * base, i.e. row r of its transpose. */
static gboolean
slab_put (Loader *L, Slab *sl, gint64 e, const HnSafetensorInfo *t, gsize base, const gint64 *idx,
          gboolean transposed, gint64 b, GError **error)
{
  HnDType dt;
  if (!st_to_dtype (t, &dt, error))
    return FALSE;
  if (sl->have_dt && t->dtype != sl->st_dt)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s is %s while the other experts are %s",
                   t->file, t->name, hn_st_dtype_name (t->dtype), hn_st_dtype_name (sl->st_dt));
      return FALSE;
    }
  gsize es = hn_st_dtype_size (t->dtype);
  if (!sl->have_dt)
    {
      sl->st_dt = t->dtype;
      sl->have_dt = TRUE;
      sl->data = g_malloc ((gsize) (sl->E * sl->rows * sl->cols) * es);
    }
  guint8 *dst = sl->data + (gsize) (e * sl->rows * sl->cols) * es;
  const guint8 *src = (const guint8 *) t->data + base * es;
  for (gint64 r = 0; r < sl->rows; r++)
    {
      if (!transposed)
        memcpy (dst + (gsize) (r * sl->cols) * es, src + (gsize) (idx[r] * sl->cols) * es, (gsize) sl->cols * es);
      else
        for (gint64 c = 0; c < sl->cols; c++)
          memcpy (dst + (gsize) (r * sl->cols + c) * es, src + (gsize) (c * b + idx[r]) * es, es);
    }
  sl->src[e] = t;
  if (!transposed)
    {
      sl->src_rows[e] = g_new (gint64, (gsize) sl->rows);
      for (gint64 r = 0; r < sl->rows; r++)
        sl->src_rows[e][r] = (gint64) (base / (gsize) sl->cols) + idx[r];
    }
  (void) L;
  return TRUE;
}

static HnTensor *
keep_view (Loader *L, HnTensor *v)
{
  if (v)
    g_ptr_array_add (L->m->owned, v);
  return v;
}

/* Uploads a slab: *stack = [E, rows, cols] with out[e * stride] = views of it, or, when it does not
 * fit one buffer, *stack = NULL and one tensor per expert. */
static gboolean
slab_upload (Loader *L, Slab *sl, const char *name, HnTensor **stack, HnTensor **out, int stride, GError **error)
{
  HnDType dt;
  gsize es = hn_st_dtype_size (sl->st_dt);
  gsize expert_bytes = (gsize) (sl->rows * sl->cols) * es;
  *stack = NULL;
  if (!sl->src[0] || !st_to_dtype (sl->src[0], &dt, error))
    return FALSE;
  if ((guint64) expert_bytes * (guint64) sl->E <= hn_vk_context_max_buffer_size (L->m->ctx))
    {
      g_autofree char *sn = g_strdup_printf ("%s (stacked)", name);
      *stack = upload (L, sn, dt, 3, (gint64[]) { sl->E, sl->rows, sl->cols }, sl->data, expert_bytes * (gsize) sl->E,
                       error);
      if (!*stack)
        return FALSE;
    }
  for (gint64 e = 0; e < sl->E; e++)
    {
      g_autofree char *en = g_strdup_printf ("%s (expert %" G_GINT64_FORMAT ")", name, e);
      HnTensor *t;
      if (*stack)
        {
          HnTensor *row = keep_view (L, hn_tensor_view_rows (*stack, e, 1, error));
          t = row ? keep_view (L, hn_tensor_reshape (row, 2, (gint64[]) { sl->rows, sl->cols }, error)) : NULL;
        }
      else
        t = upload (L, en, dt, 2, (gint64[]) { sl->rows, sl->cols }, sl->data + (gsize) e * expert_bytes, expert_bytes,
                    error);
      if (!t)
        return FALSE;
      if (sl->src_rows[e]) /* a transposed slice (gpt_oss) has no row mapping to write back through */
        note_origin (L, t, sl->src[e], FALSE, 0, sl->src_rows[e]);
      out[e * stride] = t;
    }
  return TRUE;
}

static const HnSafetensorInfo *
take_stacked (Loader *L, const char *name, gint64 E, gint64 a, gint64 b, GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return NULL;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  return check_shape (t, 3, (gint64[]) { E, a, b }, error) ? t : NULL;
}

/* A stacked [E, a, b] tensor, or its per-expert transpose [E, b, a] (*transposed): transformers'
 * Transpose(1, 2, check_dims=True) turns a checkpoint tensor only when its shape is not the
 * module's, so a square one is read as [E, a, b] here too. */
static const HnSafetensorInfo *
take_stacked_either (Loader *L, const char *name, gint64 E, gint64 a, gint64 b, gboolean *transposed, GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  *transposed = FALSE;
  if (t && t->ndim == 3 && t->shape[0] == E && t->shape[1] == b && t->shape[2] == a && a != b)
    {
      g_hash_table_add (L->used, (gpointer) t->name);
      *transposed = TRUE;
      return t;
    }
  return take_stacked (L, name, E, a, b, error);
}

/* gpt_oss expert biases gate_up [E, 2F] (interleaved) and down [E, C] -> stacked f32 [E, F], [E, F],
 * [E, C] with per-expert views. */
static gboolean
take_oss_biases (Loader *L, const char *pfx, HnLayerWeights *lw, const gint64 *gi, const gint64 *ui, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, E = hp->n_experts, F = hp->moe_ffn;
  g_autofree char *gbn = g_strdup_printf ("%smlp.experts.gate_up_proj_bias", pfx);
  g_autofree char *dbn = g_strdup_printf ("%smlp.experts.down_proj_bias", pfx);
  const HnSafetensorInfo *gb = find (L, gbn), *dbt = find (L, dbn);
  if (!gb || !dbt)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir,
                   gb ? dbn : gbn);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) gb->name);
  g_hash_table_add (L->used, (gpointer) dbt->name);
  g_autofree float *gub = NULL, *db = NULL;
  if (!check_shape (gb, 2, (gint64[]) { E, 2 * F }, error) || !check_shape (dbt, 2, (gint64[]) { E, C }, error) ||
      !(gub = hn_safetensor_info_dup_f32 (gb, error)) || !(db = hn_safetensor_info_dup_f32 (dbt, error)))
    return FALSE;
  g_autofree float *bg = g_new (float, E * F), *bu = g_new (float, E * F);
  for (gint64 e = 0; e < E; e++)
    for (gint64 f = 0; f < F; f++)
      {
        bg[e * F + f] = gub[e * 2 * F + gi[f]];
        bu[e * F + f] = gub[e * 2 * F + ui[f]];
      }
  const float *host[3] = { bg, bu, db };
  gint64 n[3] = { F, F, C };
  const char *nm[3] = { gbn, gbn, dbn };
  lw->expert_biases = g_new0 (HnTensor *, 3 * E);
  for (int j = 0; j < 3; j++)
    {
      g_autofree char *sn = g_strdup_printf ("%s (%s, stacked)", nm[j], j == 0 ? "gate" : j == 1 ? "up" : "down");
      lw->expert_bias_stack[j] =
        upload (L, sn, HN_DTYPE_F32, 2, (gint64[]) { E, n[j] }, host[j], sizeof (float) * (gsize) (E * n[j]), error);
      if (!lw->expert_bias_stack[j])
        return FALSE;
      for (gint64 e = 0; e < E; e++)
        {
          HnTensor *row = keep_view (L, hn_tensor_view_rows (lw->expert_bias_stack[j], e, 1, error));
          HnTensor *v = row ? keep_view (L, hn_tensor_reshape (row, 1, (gint64[]) { n[j] }, error)) : NULL;
          if (!v)
            return FALSE;
          lw->expert_biases[3 * e + j] = v;
        }
    }
  return TRUE;
}

/* Router, experts and the shared expert (qwen2_moe: sigmoid-gated; deepseek: plain) of one MoE layer.
 * Experts come per expert (mixtral w1/w3/w2, the others gate/up/down_proj) or stacked: granitemoe
 * input_linear [E, 2F, C] (gate rows, then up rows) and output_linear [E, C, F]; gpt_oss gate_up_proj
 * [E, C, 2F] (gate and up interleaved by column) and down_proj [E, F, C], with biases; dbrx
 * ffn.experts.mlp.w1 (gate), v1 (up) and w2 (down, applied as x @ W) each [E * F, C]. */
static gboolean
take_moe (Loader *L, const Names *N, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  const char *mt = hp->arch->model_type;
  gint64 C = hp->hidden, E = hp->n_experts, Fe = hp->moe_ffn;
  /* minimax_m2: mixtral's names, the v3 router's choice bias beside them */
  gboolean minimax = strcmp (mt, "minimax_m2") == 0;
  gboolean mixtral = strcmp (mt, "mixtral") == 0 || strcmp (mt, "phimoe") == 0 || minimax;
  gboolean granite = g_str_has_prefix (mt, "granitemoe"), oss = strcmp (mt, "gpt_oss") == 0;
  gboolean nh = strcmp (mt, "nemotron_h") == 0; /* MLP experts (up, down) under the layer's mixer */
  gboolean v3_router = hn_transformer_moe_v3_router (mt) || nh;
  gboolean deepseek = g_str_has_prefix (mt, "deepseek_v") || strcmp (mt, "deepseek_ocr2_text") == 0 || v3_router;
  gboolean dbrx = strcmp (mt, "dbrx") == 0;
  gboolean ernie = strcmp (mt, "ernie4_5_moe") == 0, hunyuan = strcmp (mt, "hunyuan_v1_moe") == 0;
  gboolean jet = strcmp (mt, "jetmoe") == 0, jamba = strcmp (mt, "jamba") == 0; /* granitemoe's stacked experts under mlp., plus mlp.bias */
  /* aria_text: experts.fc1 [E, C, 2F] (x @ W: gate columns, then up) and fc2 [E, F, C], as gpt_oss
   * stores them but not interleaved; router mlp.router, mlp.shared_experts without a gate */
  gboolean aria = strcmp (mt, "aria_text") == 0;
  /* llama4_text: feed_forward.router, experts.gate_up_proj [E, C, 2F] (x @ W: gate columns, then up) and
   * down_proj [E, F, C] as aria's, an ungated feed_forward.shared_expert */
  gboolean l4 = strcmp (mt, "llama4_text") == 0;
  gboolean granite_swa = strcmp (mt, "granitemoe_swa") == 0; /* router.weight, experts.gate_up_proj / down_proj */
  /* qwen3_vl_moe_text: Qwen3VLMoeTextExperts holds gate_up_proj [E, 2F, C] (gate rows, then up) and
   * down_proj [E, C, F]; its checkpoints store the transposes ([E, C, 2F], [E, F, C]), which
   * transformers' conversion mapping for qwen3_vl_moe transposes on load */
  gboolean qvl = strcmp (mt, "qwen3_vl_moe_text") == 0;
  /* glm4v_moe_text: DeepseekV3's stacked experts, mlp.experts.gate_up_proj [E, 2F, C] (gate rows, then up)
   * and down_proj [E, C, F], as transformers 5 saves them; per expert as the hub's checkpoints keep them */
  /* qwen3_omni_moe_text and deepseek_ocr2_text keep the same stacked layout (per expert in the hub's
   * checkpoints). ernie4_5_vl_moe_text: its text experts under mlp.text_moe (gate with moe_statics,
   * experts stacked as those), ernie4_5_moe's shared experts beside them */
  gboolean ernie_vl = strcmp (mt, "ernie4_5_vl_moe_text") == 0;
  /* lfm2_moe: feed_forward.gate, feed_forward.expert_bias, mixtral's expert names */
  gboolean lfm2 = strcmp (mt, "lfm2_moe") == 0;
  const char *blk = mixtral || granite ? "block_sparse_moe"
                    : dbrx              ? "ffn"
                    : jamba || lfm2 || l4 ? "feed_forward"
                    : nh                ? "mixer"
                    : ernie_vl          ? "mlp.text_moe"
                                        : "mlp";
  /* step3p5: Step3p7Experts, the same stacked layout (always stacked) */
  gboolean step3p5 = strcmp (mt, "step3p5") == 0;
  static const char *const stacked_types[] = { "glm4v_moe_text", "qwen3_omni_moe_text", "deepseek_ocr2_text",
                                               "ernie4_5_vl_moe_text", "step3p5", NULL };
  g_autofree char *glmv_gu = g_strv_contains (stacked_types, mt)
                               ? g_strdup_printf ("%s%s.experts.gate_up_proj", pfx, blk)
                               : NULL;
  gboolean stacked_v3 = glmv_gu && (ernie_vl || step3p5 || find (L, glmv_gu));
  /* hy_v3 and afmoe: mlp.router.gate, mlp.expert_bias; hy_v3: mlp.shared_mlp */
  gboolean hy3 = strcmp (mt, "hy_v3") == 0, afmoe = strcmp (mt, "afmoe") == 0;
  g_autofree char *rn = g_strdup_printf ("%s%s.%s.weight", pfx, blk,
                                         granite_swa                 ? "router"
                                         : granite || dbrx || jet    ? "router.layer"
                                         : oss || aria || jamba || l4 ? "router"
                                         : hunyuan                   ? "gate.wg"
                                         : hy3 || afmoe              ? "router.gate"
                                                                     : "gate");
  if (!take_matrix (L, rn, E, C, TRUE, &lw->router, error))
    return FALSE;
  if (oss)
    {
      g_autofree char *rb = g_strdup_printf ("%smlp.router.bias", pfx);
      if (!take_vector (L, rb, E, TRUE, &lw->router_b, error))
        return FALSE;
    }
  if (v3_router && !hp->moe_no_route_bias)
    {
      g_autofree char *cb = g_strdup_printf (minimax                              ? "%sblock_sparse_moe.e_score_correction_bias"
                                             : lfm2                                ? "%sfeed_forward.expert_bias"
                                             : hy3 || afmoe                        ? "%smlp.expert_bias"
                                             : strcmp (mt, "laguna") == 0          ? "%smlp.experts.e_score_correction_bias"
                                             : strcmp (mt, "exaone_moe") == 0 ? "%smlp.e_score_correction_bias"
                                             : nh                                  ? "%smixer.gate.e_score_correction_bias"
                                                                                   : "%smlp.gate.e_score_correction_bias",
                                             pfx);
      if (!take_vector (L, cb, E, TRUE, &lw->route_bias, error))
        return FALSE;
    }
  if (ernie || ernie_vl)
    {
      /* Ernie4_5_MoeStatics: e_score_correction_bias [1, E] (one expert group) */
      g_autofree char *cb = g_strdup_printf (ernie_vl ? "%smlp.text_moe.gate.moe_statics.e_score_correction_bias"
                                                      : "%smlp.moe_statics.e_score_correction_bias",
                                             pfx);
      if (!take_vector_of (L, cb, 2, E, TRUE, &lw->route_bias, error))
        return FALSE;
    }

  Slab sl[3];
  slab_init (&sl[0], E, Fe, C);
  slab_init (&sl[1], E, Fe, C);
  slab_init (&sl[2], E, C, Fe);
  g_autofree gint64 *gi = g_new (gint64, Fe), *ui = g_new (gint64, Fe), *ident = g_new (gint64, MAX (C, Fe));
  for (gint64 f = 0; f < Fe; f++)
    {
      gi[f] = oss ? 2 * f : f;
      ui[f] = oss ? 2 * f + 1 : Fe + f;
    }
  gboolean tr = oss || aria || l4; /* stored [in, out] */
  for (gint64 r = 0; r < MAX (C, Fe); r++)
    ident[r] = r;
  gboolean ok = TRUE;
  g_autofree char *names[3] = { NULL, NULL, NULL };
  if (jet)
    {
      g_autofree char *bn = g_strdup_printf ("%smlp.bias", pfx);
      if (!take_vector (L, bn, C, TRUE, &lw->moe_bias, error))
        return FALSE;
    }
  if (granite || oss || jet || aria || qvl || stacked_v3 || l4)
    {
      /* granitemoe_swa: input_linear's layout [E, 2F, C] under the name experts.gate_up_proj */
      names[0] = stacked_v3 ? g_strdup (glmv_gu)
                 : g_strdup_printf (oss || qvl ? "%smlp.experts.gate_up_proj"
                                  : l4                     ? "%sfeed_forward.experts.gate_up_proj"
                                  : aria        ? "%smlp.experts.fc1.weight"
                                  : granite_swa ? "%sblock_sparse_moe.experts.gate_up_proj"
                                  : jet         ? "%smlp.input_linear.weight"
                                                : "%sblock_sparse_moe.input_linear.weight",
                                  pfx);
      names[2] = stacked_v3 ? g_strdup_printf ("%s%s.experts.down_proj", pfx, blk)
                 : g_strdup_printf (oss || qvl ? "%smlp.experts.down_proj"
                                  : l4                     ? "%sfeed_forward.experts.down_proj"
                                  : aria        ? "%smlp.experts.fc2.weight"
                                  : granite_swa ? "%sblock_sparse_moe.experts.down_proj"
                                  : jet         ? "%smlp.output_linear.weight"
                                                : "%sblock_sparse_moe.output_linear.weight",
                                  pfx);
      names[1] = g_strdup (names[0]);
      gboolean tr_gu = tr, tr_d = tr;
      const HnSafetensorInfo *gu = qvl  ? take_stacked_either (L, names[0], E, 2 * Fe, C, &tr_gu, error)
                                   : tr ? take_stacked (L, names[0], E, C, 2 * Fe, error)
                                        : take_stacked (L, names[0], E, 2 * Fe, C, error);
      const HnSafetensorInfo *d = !gu  ? NULL
                                  : qvl ? take_stacked_either (L, names[2], E, C, Fe, &tr_d, error)
                                  : tr  ? take_stacked (L, names[2], E, Fe, C, error)
                                        : take_stacked (L, names[2], E, C, Fe, error);
      ok = d != NULL;
      for (gint64 e = 0; ok && e < E; e++)
        ok = slab_put (L, &sl[0], e, gu, (gsize) (e * 2 * Fe * C), gi, tr_gu, 2 * Fe, error) &&
             slab_put (L, &sl[1], e, gu, (gsize) (e * 2 * Fe * C), ui, tr_gu, 2 * Fe, error) &&
             slab_put (L, &sl[2], e, d, (gsize) (e * C * Fe), ident, tr_d, C, error);
      ok = ok && (!oss || take_oss_biases (L, pfx, lw, gi, ui, error));
    }
  else if (dbrx)
    {
      const char *parts[3] = { "w1", "v1", "w2" };
      const HnSafetensorInfo *t[3] = { NULL, NULL, NULL };
      for (int j = 0; ok && j < 3; j++)
        {
          names[j] = g_strdup_printf ("%sffn.experts.mlp.%s", pfx, parts[j]);
          t[j] = find (L, names[j]);
          if (!t[j])
            {
              g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir,
                           names[j]);
              ok = FALSE;
              break;
            }
          g_hash_table_add (L->used, (gpointer) t[j]->name);
          ok = check_shape (t[j], 2, (gint64[]) { E * Fe, C }, error);
        }
      /* expert e owns rows e·F .. e·F + F; its down projection is the transpose of its w2 rows */
      for (gint64 e = 0; ok && e < E; e++)
        ok = slab_put (L, &sl[0], e, t[0], (gsize) (e * Fe * C), ident, FALSE, 0, error) &&
             slab_put (L, &sl[1], e, t[1], (gsize) (e * Fe * C), ident, FALSE, 0, error) &&
             slab_put (L, &sl[2], e, t[2], (gsize) (e * Fe * C), ident, TRUE, C, error);
    }
  else
    {
      /* mixtral, lfm2_moe: w1 = gate, w3 = up, w2 = down */
      gboolean w123 = mixtral || lfm2;
      const char *parts[3] = { w123 ? "w1" : "gate_proj", w123 ? "w3" : "up_proj", w123 ? "w2" : "down_proj" };
      for (int j = nh ? 1 : 0; j < 3; j++)
        names[j] = g_strdup_printf ("%s%s.experts.*.%s.weight", pfx, blk, parts[j]);
      for (gint64 e = 0; ok && e < E; e++)
        for (int j = nh ? 1 : 0; ok && j < 3; j++)
          {
            g_autofree char *wn = g_strdup_printf ("%s%s.experts.%" G_GINT64_FORMAT ".%s.weight", pfx, blk, e, parts[j]);
            const HnSafetensorInfo *t = find (L, wn);
            if (!t)
              {
                g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, wn);
                ok = FALSE;
                break;
              }
            g_hash_table_add (L->used, (gpointer) t->name);
            ok = check_shape (t, 2, (gint64[]) { sl[j].rows, sl[j].cols }, error) &&
                 slab_put (L, &sl[j], e, t, 0, ident, FALSE, 0, error);
          }
    }
  lw->experts = g_new0 (HnTensor *, 3 * (gsize) MAX (E, 1)); /* E > 0 here; the cast keeps GCC from a negative size */
  for (int j = nh ? 1 : 0; ok && j < 3; j++)
    ok = slab_upload (L, &sl[j], names[j], &lw->expert_stack[j], &lw->experts[j], 3, error);
  for (int j = 0; j < 3; j++)
    slab_clear (&sl[j]);
  if (!ok)
    return FALSE;
  if (hp->shared_ffn > 0 && granite)
    {
      /* granitemoeshared: shared_mlp.input_linear [2Fs, C] = gate rows, then up rows */
      gint64 Fs = hp->shared_ffn;
      g_autofree char *in = g_strdup_printf ("%sshared_mlp.input_linear.weight", pfx);
      g_autofree char *on = g_strdup_printf ("%sshared_mlp.output_linear.weight", pfx);
      const HnSafetensorInfo *t = find (L, in);
      if (!t)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, in);
          return FALSE;
        }
      g_hash_table_add (L->used, (gpointer) t->name);
      if (!check_shape (t, 2, (gint64[]) { 2 * Fs, C }, error))
        return FALSE;
      g_autofree gint64 *gr = g_new (gint64, Fs), *ur = g_new (gint64, Fs);
      for (gint64 f = 0; f < Fs; f++)
        {
          gr[f] = f;
          ur[f] = Fs + f;
        }
      g_autofree char *gn = g_strdup_printf ("%s (gate rows)", in), *un = g_strdup_printf ("%s (up rows)", in);
      return (lw->w_gate = gather_rows (L, t, gn, gr, Fs, C, error)) &&
             (lw->w_up = gather_rows (L, t, un, ur, Fs, C, error)) &&
             take_matrix (L, on, C, Fs, TRUE, &lw->w_down, error);
    }
  if (hp->shared_ffn > 0)
    {
      gint64 Fs = hp->shared_ffn;
      gboolean cohere = strcmp (mt, "cohere2_moe") == 0, laguna = strcmp (mt, "laguna") == 0;
      const char *sh = l4                                                 ? "feed_forward.shared_expert"
                       : nh                                               ? "mixer.shared_experts"
                       : hy3 || hunyuan                                   ? "mlp.shared_mlp"
                       : (deepseek && !laguna) || ernie || ernie_vl || aria || cohere ? "mlp.shared_experts"
                                                                          : "mlp.shared_expert";
      g_autofree char *gp = g_strdup_printf ("%s.gate_proj", sh);
      g_autofree char *up = g_strdup_printf ("%s.up_proj", sh);
      g_autofree char *dp = g_strdup_printf ("%s.down_proj", sh);
      if ((!nh && !take_linear (L, N, pfx, gp, Fs, C, &lw->w_gate, &lw->b_gate, error)) ||
          !take_linear (L, N, pfx, up, Fs, C, &lw->w_up, &lw->b_up, error) ||
          !take_linear (L, N, pfx, dp, C, Fs, &lw->w_down, &lw->b_down, error))
        return FALSE;
      g_autofree char *gn = g_strdup_printf ("%smlp.shared_expert_gate.weight", pfx);
      /* only qwen2_moe gates its shared expert */
      if (!deepseek && !ernie && !ernie_vl && !hunyuan && !aria && !cohere && !l4 &&
          !take_matrix (L, gn, 1, C, TRUE, &lw->shared_expert_gate, error))
        return FALSE;
    }
  return TRUE;
}

/* DeepSeek MLA projections: q (optionally through the q LoRA and its norm) with each head's rows
 * reordered to [rope | nope], the latent and rotary rows of kv_a_proj_with_mqa, and kv_b_proj split
 * into per-head key (nope) and value rows. */
static gboolean
take_mla (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, H = hp->n_head, D = hp->head_dim, dn = hp->qk_nope_dim, dr = D - dn;
  gint64 dv = hp->v_head_dim, kvr = hp->kv_lora_rank, qr = hp->q_lora_rank;
  g_autofree gint64 *qi = g_new (gint64, H * D);
  for (gint64 h = 0; h < H; h++)
    for (gint64 j = 0; j < D; j++)
      qi[h * D + j] = h * D + (j < dr ? dn + j : j - dr);
  g_autofree char *qn = g_strdup_printf ("%sself_attn.%s.weight", pfx, qr > 0 ? "q_b_proj" : "q_proj");
  const HnSafetensorInfo *q = find (L, qn);
  if (!q)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, qn);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) q->name);
  if (!check_shape (q, 2, (gint64[]) { H * D, qr > 0 ? qr : C }, error) ||
      !(lw->wq = gather_rows (L, q, qn, qi, H * D, qr > 0 ? qr : C, error)))
    return FALSE;
  if (qr > 0)
    {
      g_autofree char *an = g_strdup_printf ("%sself_attn.q_a_proj.weight", pfx);
      g_autofree char *nn = g_strdup_printf ("%sself_attn.q_a_layernorm.weight", pfx);
      if (!take_matrix (L, an, qr, C, TRUE, &lw->wq_a, error) || !take_vector (L, nn, qr, TRUE, &lw->q_a_norm_w, error))
        return FALSE;
    }
  g_autofree char *kan = g_strdup_printf ("%sself_attn.kv_a_proj_with_mqa.weight", pfx);
  g_autofree char *knn = g_strdup_printf ("%sself_attn.kv_a_layernorm.weight", pfx);
  g_autofree char *kbn = g_strdup_printf ("%sself_attn.kv_b_proj.weight", pfx);
  const HnSafetensorInfo *ka = find (L, kan), *kb = find (L, kbn);
  if (!ka || !kb)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, ka ? kbn : kan);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) ka->name);
  g_hash_table_add (L->used, (gpointer) kb->name);
  if (!check_shape (ka, 2, (gint64[]) { kvr + dr, C }, error) ||
      !check_shape (kb, 2, (gint64[]) { H * (dn + dv), kvr }, error) ||
      !take_vector (L, knn, kvr, TRUE, &lw->kv_a_norm_w, error))
    return FALSE;
  g_autofree gint64 *ai = g_new (gint64, kvr + dr), *ki = g_new (gint64, H * dn), *vi = g_new (gint64, H * dv);
  for (gint64 r = 0; r < kvr + dr; r++)
    ai[r] = r;
  for (gint64 h = 0; h < H; h++)
    {
      for (gint64 j = 0; j < dn; j++)
        ki[h * dn + j] = h * (dn + dv) + j;
      for (gint64 j = 0; j < dv; j++)
        vi[h * dv + j] = h * (dn + dv) + dn + j;
    }
  g_autofree char *lat = g_strdup_printf ("%s (latent rows)", kan);
  g_autofree char *rot = g_strdup_printf ("%s (rotary rows)", kan);
  g_autofree char *kk = g_strdup_printf ("%s (key rows)", kbn);
  g_autofree char *vv = g_strdup_printf ("%s (value rows)", kbn);
  return (lw->wkv_a = gather_rows (L, ka, lat, ai, kvr, C, error)) &&
         (lw->wk_rope = gather_rows (L, ka, rot, ai + kvr, dr, C, error)) &&
         (lw->wk_nope = gather_rows (L, kb, kk, ki, H * dn, kvr, error)) &&
         (lw->wv_b = gather_rows (L, kb, vv, vi, H * dv, kvr, error));
}

/* Rows [r0, r0 + n) of stored matrix t [*, cols] (same dtype), named after their part. */
static HnTensor *
row_block (Loader *L, const HnSafetensorInfo *t, const char *part, gint64 r0, gint64 n, gint64 cols, GError **error)
{
  g_autofree gint64 *idx = g_new (gint64, n);
  for (gint64 r = 0; r < n; r++)
    idx[r] = r0 + r;
  g_autofree char *name = g_strdup_printf ("%s (%s rows)", t->name, part);
  return gather_rows (L, t, name, idx, n, cols, error);
}

/* f32 copy of checkpoint tensor `name` holding n values (NULL + no error when absent and optional). */
static float *
take_f32 (Loader *L, const char *name, gint64 n, gboolean required, GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      if (required)
        g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return NULL;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if ((gint64) t->n_elements != n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s holds %" G_GINT64_FORMAT " values, config.json "
                   "implies %" G_GINT64_FORMAT, t->file, t->name, (gint64) t->n_elements, n);
      return NULL;
    }
  return hn_safetensor_info_dup_f32 (t, error);
}

/* f32 rows [r0, r0 + n) of host values f [*, cols] ([n] when cols == 1). */
static HnTensor *
f32_block (Loader *L, const char *name, const float *f, gint64 r0, gint64 n, gint64 cols, GError **error)
{
  gsize bytes = sizeof (float) * (gsize) (n * cols);
  return cols == 1 ? upload (L, name, HN_DTYPE_F32, 1, (gint64[]) { n }, f + r0, bytes, error)
                   : upload (L, name, HN_DTYPE_F32, 2, (gint64[]) { n, cols }, f + r0 * cols, bytes, error);
}

/* A hybrid's Mamba-2 mixer under pfx (in_proj rows z, x, B, C, dt; conv1d channels x, B, C). */
static gboolean
take_mamba2 (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  const HnMamba2Dims *d = &hp->ssm;
  HnMamba2Weights *w = &lw->m2;
  gint64 C = hp->hidden, I = d->inner, GN = (gint64) d->n_groups * d->state, H = d->n_heads, K = hp->ssm_conv_kernel;
  gint64 CD = I + 2 * GN, R = I + CD + H;
  gint64 r0[5] = { 0, I, 2 * I, 2 * I + GN, 2 * I + 2 * GN }, rn[5] = { I, I, GN, GN, H };
  static const char *const parts[5] = { "z", "x", "B", "C", "dt" };
  HnTensor **ws[5] = { &w->w_z, &w->w_x, &w->w_B, &w->w_C, &w->w_dt };
  HnTensor **bs[5] = { &w->b_z, &w->b_x, &w->b_B, &w->b_C, &w->b_dt };
  g_autofree char *ipw = g_strdup_printf ("%sin_proj.weight", pfx);
  const HnSafetensorInfo *t = find (L, ipw);
  if (!t)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, ipw);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if (t->dtype == HN_ST_DTYPE_GGML || !check_shape (t, 2, (gint64[]) { R, C }, error))
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: a GGUF-packed %s is not built", L->m->dir, ipw);
      return FALSE;
    }
  /* falcon_h1: (in_proj(h · ssm_in) + b) · mup[part], its out_proj · ssm_out */
  gboolean fh1 = hp->arch->names == HN_NAMES_FALCON_H1;
  for (int k = 0; k < 5; k++)
    {
      L->scale = fh1 ? hp->mup.ssm_in * hp->mup.ssm[k] : 1.0f;
      *ws[k] = row_block (L, t, parts[k], r0[k], rn[k], C, error);
      L->scale = 1.0f;
      if (!*ws[k])
        return FALSE;
    }
  GError *e = NULL;
  g_autofree char *ipb = g_strdup_printf ("%sin_proj.bias", pfx);
  g_autofree float *bias = take_f32 (L, ipb, R, FALSE, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  for (int k = 0; bias && k < 5; k++)
    {
      L->scale = fh1 ? hp->mup.ssm[k] : 1.0f;
      *bs[k] = f32_block (L, ipb, bias, r0[k], rn[k], 1, error);
      L->scale = 1.0f;
      if (!*bs[k])
        return FALSE;
    }
  /* conv1d [CD, 1, K] over the x, B and C channels */
  g_autofree char *cwn = g_strdup_printf ("%sconv1d.weight", pfx);
  g_autofree char *cbn = g_strdup_printf ("%sconv1d.bias", pfx);
  g_autofree float *cw = take_f32 (L, cwn, CD * K, TRUE, error);
  if (!cw)
    return FALSE;
  g_autofree float *cb = take_f32 (L, cbn, CD, FALSE, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  gint64 c0[3] = { 0, I, I + GN }, cn[3] = { I, GN, GN };
  HnTensor **cws[3] = { &w->conv_w, &w->conv_wB, &w->conv_wC }, **cbs[3] = { &w->conv_b, &w->conv_bB, &w->conv_bC };
  for (int k = 0; k < 3; k++)
    if (!(*cws[k] = f32_block (L, cwn, cw, c0[k], cn[k], K, error)) ||
        (cb && !(*cbs[k] = f32_block (L, cbn, cb, c0[k], cn[k], 1, error))))
      return FALSE;
  g_autofree char *dtb = g_strdup_printf ("%sdt_bias", pfx);
  g_autofree char *al = g_strdup_printf ("%sA_log", pfx);
  g_autofree char *dd = g_strdup_printf ("%sD", pfx);
  g_autofree char *nw = g_strdup_printf ("%snorm.weight", pfx);
  g_autofree char *ow = g_strdup_printf ("%sout_proj.weight", pfx);
  g_autofree char *ob = g_strdup_printf ("%sout_proj.bias", pfx);
  if (!take_vector (L, dtb, H, TRUE, &w->dt_bias, error) || !take_vector (L, al, H, TRUE, &w->A_log, error) ||
      !take_vector (L, dd, H, TRUE, &w->D, error) || !take_vector (L, nw, I, TRUE, &w->norm_w, error))
    return FALSE;
  L->scale = fh1 ? hp->mup.ssm_out : 1.0f;
  gboolean ok = take_matrix (L, ow, C, I, TRUE, &w->out_w, error) && take_vector (L, ob, C, FALSE, &w->out_b, error);
  L->scale = 1.0f;
  return ok;
}

/* jamba's Mamba (v1) mixer under pfx: in_proj rows x, z; x_proj rows dt, B, C; the dt, B and C norms. */
static gboolean
take_mamba1 (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  const HnMamba1Dims *d = &hp->ssm1;
  HnMamba1Weights *w = &lw->m1;
  gint64 C = hp->hidden, I = d->inner, N = d->state, Rk = d->dt_rank, K = hp->ssm_conv_kernel;
  g_autofree char *ipw = g_strdup_printf ("%sin_proj.weight", pfx), *xpw = g_strdup_printf ("%sx_proj.weight", pfx);
  const HnSafetensorInfo *ip = find (L, ipw), *xp = find (L, xpw);
  if (!ip || !xp)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir,
                   ip ? xpw : ipw);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) ip->name);
  g_hash_table_add (L->used, (gpointer) xp->name);
  if (!check_shape (ip, 2, (gint64[]) { 2 * I, C }, error) || !check_shape (xp, 2, (gint64[]) { Rk + 2 * N, I }, error) ||
      !(w->w_x = row_block (L, ip, "x", 0, I, C, error)) || !(w->w_z = row_block (L, ip, "z", I, I, C, error)) ||
      !(w->w_dtl = row_block (L, xp, "dt", 0, Rk, I, error)) || !(w->w_B = row_block (L, xp, "B", Rk, N, I, error)) ||
      !(w->w_C = row_block (L, xp, "C", Rk + N, N, I, error)))
    return FALSE;
  GError *e = NULL;
  g_autofree char *ipb = g_strdup_printf ("%sin_proj.bias", pfx);
  g_autofree float *bias = take_f32 (L, ipb, 2 * I, FALSE, &e);
  g_autofree char *cwn = g_strdup_printf ("%sconv1d.weight", pfx), *cbn = g_strdup_printf ("%sconv1d.bias", pfx);
  g_autofree float *cw = e ? NULL : take_f32 (L, cwn, I * K, TRUE, &e);
  g_autofree float *cb = e ? NULL : take_f32 (L, cbn, I, FALSE, &e);
  g_autofree char *al = g_strdup_printf ("%sA_log", pfx);
  g_autofree float *A = e ? NULL : take_f32 (L, al, I * N, TRUE, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  if ((bias && (!(w->b_x = f32_block (L, ipb, bias, 0, I, 1, error)) ||
                !(w->b_z = f32_block (L, ipb, bias, I, I, 1, error)))) ||
      !(w->conv_w = f32_block (L, cwn, cw, 0, I, K, error)) || (cb && !(w->conv_b = f32_block (L, cbn, cb, 0, I, 1, error))) ||
      !(w->A_log = f32_block (L, al, A, 0, I, N, error)))
    return FALSE;
  g_autofree char *dw = g_strdup_printf ("%sdt_proj.weight", pfx), *db = g_strdup_printf ("%sdt_proj.bias", pfx);
  g_autofree char *dd = g_strdup_printf ("%sD", pfx);
  g_autofree char *ow = g_strdup_printf ("%sout_proj.weight", pfx), *ob = g_strdup_printf ("%sout_proj.bias", pfx);
  g_autofree char *dn = g_strdup_printf ("%sdt_layernorm.weight", pfx);
  g_autofree char *bn = g_strdup_printf ("%sb_layernorm.weight", pfx), *cn = g_strdup_printf ("%sc_layernorm.weight", pfx);
  return take_matrix (L, dw, I, Rk, TRUE, &w->dt_w, error) && take_vector (L, db, I, FALSE, &w->dt_b, error) &&
         take_vector (L, dd, I, TRUE, &w->D, error) && take_matrix (L, ow, C, I, TRUE, &w->out_w, error) &&
         take_vector (L, ob, C, FALSE, &w->out_b, error) && take_vector (L, dn, Rk, TRUE, &w->dt_norm_w, error) &&
         take_vector (L, bn, N, TRUE, &w->B_norm_w, error) && take_vector (L, cn, N, TRUE, &w->C_norm_w, error);
}

/* lfm2's short convolution under pfx: in_proj rows B, C, x; conv.weight [W, 1, K]; out_proj (each with a
 * bias when conv_bias). */
static gboolean
take_shortconv (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnShortConvDims *d = &L->m->hp.sconv;
  HnShortConvWeights *w = &lw->sconv;
  gint64 W = d->width, K = d->kernel;
  g_autofree char *ipw = g_strdup_printf ("%sin_proj.weight", pfx);
  const HnSafetensorInfo *ip = find (L, ipw);
  if (!ip)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, ipw);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) ip->name);
  if (ip->dtype == HN_ST_DTYPE_GGML || !check_shape (ip, 2, (gint64[]) { 3 * W, W }, error))
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: a GGUF-packed %s is not built", L->m->dir, ipw);
      return FALSE;
    }
  static const char *const parts[3] = { "B", "C", "x" };
  HnTensor **ws[3] = { &w->w_B, &w->w_C, &w->w_x }, **bs[3] = { &w->b_B, &w->b_C, &w->b_x };
  for (int k = 0; k < 3; k++)
    if (!(*ws[k] = row_block (L, ip, parts[k], k * W, W, W, error)))
      return FALSE;
  GError *e = NULL;
  g_autofree char *ipb = g_strdup_printf ("%sin_proj.bias", pfx);
  g_autofree char *cwn = g_strdup_printf ("%sconv.weight", pfx), *cbn = g_strdup_printf ("%sconv.bias", pfx);
  /* without conv_bias a stored bias is left unread, so the load fails naming it */
  g_autofree float *bias = d->bias ? take_f32 (L, ipb, 3 * W, TRUE, &e) : NULL;
  g_autofree float *cw = e ? NULL : take_f32 (L, cwn, W * K, TRUE, &e);
  g_autofree float *cb = e || !d->bias ? NULL : take_f32 (L, cbn, W, TRUE, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  for (int k = 0; bias && k < 3; k++)
    if (!(*bs[k] = f32_block (L, ipb, bias, k * W, W, 1, error)))
      return FALSE;
  if (!(w->conv_w = f32_block (L, cwn, cw, 0, W, K, error)) || (cb && !(w->conv_b = f32_block (L, cbn, cb, 0, W, 1, error))))
    return FALSE;
  g_autofree char *ow = g_strdup_printf ("%sout_proj.weight", pfx), *ob = g_strdup_printf ("%sout_proj.bias", pfx);
  return take_matrix (L, ow, W, W, TRUE, &w->out_w, error) &&
         (!d->bias || take_vector (L, ob, W, TRUE, &w->out_b, error));
}

/* Griffin's recurrent block under pfx (temporal_block.): linear_y, linear_x, linear_out with biases;
 * conv_1d.weight [L, 1, K] and its bias; rg_lru.{input,recurrent}_gate_weight [heads, L/heads, L/heads]
 * (x · W per block, baddbmm) expanded to dense [L, L] rows (out = h·bw + j, in = h·bw + i: W[h, i, j]),
 * their biases [heads, L/heads]; rg_lru.recurrent_param [L]. */
static gboolean
take_rglru (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnRglruDims *d = &L->m->hp.rglru;
  HnRglruWeights *w = &lw->rglru;
  gint64 C = d->width, R = d->lru, K = d->kernel, NH = d->heads, bw = R / NH;
  g_autofree char *yw = g_strdup_printf ("%slinear_y.weight", pfx), *yb = g_strdup_printf ("%slinear_y.bias", pfx);
  g_autofree char *xw = g_strdup_printf ("%slinear_x.weight", pfx), *xb = g_strdup_printf ("%slinear_x.bias", pfx);
  g_autofree char *ow = g_strdup_printf ("%slinear_out.weight", pfx), *ob = g_strdup_printf ("%slinear_out.bias", pfx);
  if (!take_matrix (L, yw, R, C, TRUE, &w->w_y, error) || !take_vector (L, yb, R, FALSE, &w->b_y, error) ||
      !take_matrix (L, xw, R, C, TRUE, &w->w_x, error) || !take_vector (L, xb, R, FALSE, &w->b_x, error) ||
      !take_matrix (L, ow, C, R, TRUE, &w->out_w, error) || !take_vector (L, ob, C, FALSE, &w->out_b, error))
    return FALSE;
  g_autofree char *cwn = g_strdup_printf ("%sconv_1d.weight", pfx), *cbn = g_strdup_printf ("%sconv_1d.bias", pfx);
  g_autofree char *lam = g_strdup_printf ("%srg_lru.recurrent_param", pfx);
  const char *gate[2] = { "input_gate", "recurrent_gate" };
  HnTensor **gw[2] = { &w->w_gi, &w->w_ga }, **gb[2] = { &w->b_gi, &w->b_ga };
  GError *e = NULL;
  g_autofree float *cw = take_f32 (L, cwn, R * K, TRUE, &e);
  g_autofree float *cb = e ? NULL : take_f32 (L, cbn, R, FALSE, &e);
  g_autofree float *lv = e ? NULL : take_f32 (L, lam, R, TRUE, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  if (!(w->conv_w = f32_block (L, cwn, cw, 0, R, K, error)) || (cb && !(w->conv_b = f32_block (L, cbn, cb, 0, R, 1, error))) ||
      !(w->lambda = f32_block (L, lam, lv, 0, R, 1, error)))
    return FALSE;
  for (int g = 0; g < 2; g++)
    {
      g_autofree char *wn = g_strdup_printf ("%srg_lru.%s_weight", pfx, gate[g]);
      g_autofree char *bn = g_strdup_printf ("%srg_lru.%s_bias", pfx, gate[g]);
      g_autofree float *blk = take_f32 (L, wn, NH * bw * bw, TRUE, &e);
      g_autofree float *bias = e ? NULL : take_f32 (L, bn, R, TRUE, &e);
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      g_autofree float *dense = g_new0 (float, R * R); /* [out, in] */
      for (gint64 h = 0; h < NH; h++)
        for (gint64 i = 0; i < bw; i++)
          for (gint64 j = 0; j < bw; j++)
            dense[(h * bw + j) * R + h * bw + i] = blk[(h * bw + i) * bw + j];
      if (!(*gw[g] = f32_block (L, wn, dense, 0, R, R, error)) || !(*gb[g] = f32_block (L, bn, bias, 0, R, 1, error)))
        return FALSE;
    }
  return TRUE;
}

/* Rows of stored matrix `name` [rows, cols] picked by idx (n of them), marked used. */
static HnTensor *
pick_rows (Loader *L, const char *name, gint64 rows, gint64 cols, const char *part, const gint64 *idx, gint64 n,
           GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return NULL;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if (t->dtype == HN_ST_DTYPE_GGML || !check_shape (t, 2, (gint64[]) { rows, cols }, error))
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: a GGUF-packed %s is not built", L->m->dir, name);
      return NULL;
    }
  g_autofree char *nm = g_strdup_printf ("%s (%s rows)", name, part);
  return gather_rows (L, t, nm, idx, n, cols, error);
}

/* A gated DeltaNet layer under pfx (linear_attn.): qwen3_5's in_proj_qkv / in_proj_z / in_proj_b /
 * in_proj_a, or qwen3_next's in_proj_qkvz [per key head: q, k, v (HV/HK heads), z] and in_proj_ba [per key
 * head: b, a (HV/HK each)] regrouped as fix_query_key_value_ordering does; conv1d.weight [CD, 1, K]. */
static gboolean
take_deltanet (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnDeltaNetDims *d = &L->m->hp.dnet;
  HnDeltaNetWeights *w = &lw->dnet;
  gint64 C = d->width, HK = d->n_k_heads, HV = d->n_v_heads, DK = d->k_dim, DV = d->v_dim, K = d->kernel;
  gint64 KD = HK * DK, VD = HV * DV, CD = 2 * KD + VD, rep = HV / HK;
  g_autofree char *qkvz = g_strdup_printf ("%sin_proj_qkvz.weight", pfx), *ba = g_strdup_printf ("%sin_proj_ba.weight", pfx);
  if (find (L, qkvz))
    {
      gint64 per = 2 * DK + 2 * rep * DV, per_ba = 2 * rep; /* one key head's rows */
      g_autofree gint64 *iq = g_new (gint64, CD), *iz = g_new (gint64, VD), *ib = g_new (gint64, HV), *ia = g_new (gint64, HV);
      for (gint64 h = 0; h < HK; h++)
        {
          for (gint64 i = 0; i < DK; i++)
            {
              iq[h * DK + i] = h * per + i;           /* q */
              iq[KD + h * DK + i] = h * per + DK + i; /* k */
            }
          for (gint64 i = 0; i < rep * DV; i++)
            {
              iq[2 * KD + h * rep * DV + i] = h * per + 2 * DK + i;   /* v of the key head's value heads */
              iz[h * rep * DV + i] = h * per + 2 * DK + rep * DV + i; /* z */
            }
          for (gint64 r = 0; r < rep; r++)
            {
              ib[h * rep + r] = h * per_ba + r;
              ia[h * rep + r] = h * per_ba + rep + r;
            }
        }
      if (!(w->w_qkv = pick_rows (L, qkvz, HK * per, C, "q, k, v", iq, CD, error)) ||
          !(w->w_z = pick_rows (L, qkvz, HK * per, C, "z", iz, VD, error)) ||
          !(w->w_b = pick_rows (L, ba, HK * per_ba, C, "b", ib, HV, error)) ||
          !(w->w_a = pick_rows (L, ba, HK * per_ba, C, "a", ia, HV, error)))
        return FALSE;
    }
  else
    {
      g_autofree char *qn = g_strdup_printf ("%sin_proj_qkv.weight", pfx), *zn = g_strdup_printf ("%sin_proj_z.weight", pfx);
      g_autofree char *bn = g_strdup_printf ("%sin_proj_b.weight", pfx), *an = g_strdup_printf ("%sin_proj_a.weight", pfx);
      if (!take_matrix (L, qn, CD, C, TRUE, &w->w_qkv, error) || !take_matrix (L, zn, VD, C, TRUE, &w->w_z, error) ||
          !take_matrix (L, bn, HV, C, TRUE, &w->w_b, error) || !take_matrix (L, an, HV, C, TRUE, &w->w_a, error))
        return FALSE;
    }
  g_autofree char *cwn = g_strdup_printf ("%sconv1d.weight", pfx), *cbn = g_strdup_printf ("%sconv1d.bias", pfx);
  if (find (L, cbn))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: a conv1d bias (%s) in gated DeltaNet is not built",
                   L->m->dir, cbn);
      return FALSE;
    }
  g_autofree float *cw = take_f32 (L, cwn, CD * K, TRUE, error);
  if (!cw || !(w->conv_w = f32_block (L, cwn, cw, 0, CD, K, error)))
    return FALSE;
  g_autofree char *al = g_strdup_printf ("%sA_log", pfx), *dtb = g_strdup_printf ("%sdt_bias", pfx);
  g_autofree char *nw = g_strdup_printf ("%snorm.weight", pfx), *ow = g_strdup_printf ("%sout_proj.weight", pfx);
  return take_vector (L, al, HV, TRUE, &w->A_log, error) && take_vector (L, dtb, HV, TRUE, &w->dt_bias, error) &&
         take_vector (L, nw, DV, TRUE, &w->norm_w, error) && take_matrix (L, ow, C, VD, TRUE, &w->out_w, error);
}

/* falcon_h1's attention with its multipliers folded in: q, v · attention_in, k · attention_in ·
 * key_multiplier, o · attention_out (its bias too). */
static gboolean
take_falcon_h1_attention (Loader *L, const Names *N, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  const char *parts[4] = { N->q, N->k, N->v, N->o };
  gint64 rows[4] = { qd, kvd, kvd, C }, cols[4] = { C, C, C, qd };
  float sc[4] = { hp->mup.attn_in, hp->mup.attn_in * hp->mup.key, hp->mup.attn_in, hp->mup.attn_out };
  HnTensor **ws[4] = { &lw->wq, &lw->wk, &lw->wv, &lw->wo }, **bs[4] = { &lw->bq, &lw->bk, &lw->bv, &lw->bo };
  for (int k = 0; k < 4; k++)
    {
      L->scale = sc[k];
      gboolean ok = take_linear (L, N, pfx, parts[k], rows[k], cols[k], ws[k], bs[k], error);
      L->scale = 1.0f;
      if (!ok)
        return FALSE;
    }
  if ((lw->bq || lw->bk || lw->bv) && (hp->mup.attn_in != 1.0f))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: falcon_h1 q/k/v biases with an attention_in_multiplier "
                   "other than 1 are not built", L->m->dir);
      return FALSE;
    }
  return TRUE;
}

/* The weight names of each decoder scheme. A row with `llama_overlay` set
 * describes a scheme that is llama's names, after the config's changes
 * (llama_config), with these names put over them: NONE there means the
 * scheme has no such tensor. Every other row is used as it stands (falcon's
 * norms then follow its block). */
#define NONE "-"
static const Names scheme_names[] = {
  [HN_NAMES_LLAMA] = {
    .embed = "model.embed_tokens", .layer = "model.layers.",
    .ln1 = "input_layernorm", .ln2 = "post_attention_layernorm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.o_proj",
    .gate = "mlp.gate_proj", .up = "mlp.up_proj", .down = "mlp.down_proj",
    .final_norm = "model.norm", .lm_head = "lm_head" },
  [HN_NAMES_PHI3] = { .llama_overlay = TRUE,
    .q = NONE, .k = NONE, .v = NONE, .qkv = "self_attn.qkv_proj", .qkv_layout = QKV_CONCAT,
    .gate = NONE, .up = NONE, .gate_up = "mlp.gate_up_proj" },
  [HN_NAMES_STARCODER2] = { .llama_overlay = TRUE,
    .gate = NONE, .up = "mlp.c_fc", .down = "mlp.c_proj" },
  [HN_NAMES_PHI] = { .llama_overlay = TRUE,
    .o = "self_attn.dense", .gate = NONE, .up = "mlp.fc1", .down = "mlp.fc2",
    .final_norm = "model.final_layernorm" },
  [HN_NAMES_APERTUS] = { .llama_overlay = TRUE,
    .ln1 = "attention_layernorm", .ln2 = "feedforward_layernorm" },
  [HN_NAMES_VAULTGEMMA] = { .llama_overlay = TRUE, .ln2 = "pre_feedforward_layernorm" },
  [HN_NAMES_LLAMA4] = { .llama_overlay = TRUE,
    .gate = "feed_forward.gate_proj", .up = "feed_forward.up_proj", .down = "feed_forward.down_proj" },
  [HN_NAMES_HUNYUAN] = { .llama_overlay = TRUE }, /* q/k norm names: llama_config */
  /* the hub's backbone.* names, which transformers' save_pretrained writes back */
  [HN_NAMES_NEMOTRON_H] = { .llama_overlay = TRUE, .embed = "backbone.embeddings", .layer = "backbone.layers.",
    .ln1 = "norm", .ln2 = NONE,
    .q = "mixer.q_proj", .k = "mixer.k_proj", .v = "mixer.v_proj", .o = "mixer.o_proj", .gate = NONE,
    .up = "mixer.up_proj", .down = "mixer.down_proj", .final_norm = "backbone.norm_f" },
  [HN_NAMES_GRANITEMOEHYBRID] = { .llama_overlay = TRUE },
  [HN_NAMES_QWEN3_NEXT] = { .llama_overlay = TRUE },
  [HN_NAMES_RECURRENT_GEMMA] = { .llama_overlay = TRUE, .ln1 = "temporal_pre_norm", .ln2 = "channel_pre_norm",
    .q = "temporal_block.q_proj", .k = "temporal_block.k_proj", .v = "temporal_block.v_proj",
    .o = "temporal_block.o_proj", .gate = "mlp_block.gate_proj", .up = "mlp_block.up_proj",
    .down = "mlp_block.down_proj", .final_norm = "model.final_norm" },
  [HN_NAMES_LFM2] = { .llama_overlay = TRUE, .ln1 = "operator_norm", .ln2 = "ffn_norm", .o = "self_attn.out_proj",
    .q_norm = "self_attn.q_layernorm", .k_norm = "self_attn.k_layernorm", .gate = "feed_forward.w1",
    .up = "feed_forward.w3", .down = "feed_forward.w2", .final_norm = "model.embedding_norm" },
  [HN_NAMES_JAMBA] = { .llama_overlay = TRUE, .ln2 = "pre_ff_layernorm", .gate = "feed_forward.gate_proj",
    .up = "feed_forward.up_proj", .down = "feed_forward.down_proj", .final_norm = "model.final_layernorm" },
  [HN_NAMES_FALCON_H1] = { .llama_overlay = TRUE, .ln2 = "pre_ff_layernorm", .gate = "feed_forward.gate_proj",
    .up = "feed_forward.up_proj", .down = "feed_forward.down_proj", .final_norm = "model.final_layernorm" },
  [HN_NAMES_BAMBA] = { .llama_overlay = TRUE, .ln2 = "pre_ff_layernorm", .gate = "feed_forward.gate_proj",
    .up = "feed_forward.up_proj", .down = "feed_forward.down_proj", .final_norm = "model.final_layernorm" },
  [HN_NAMES_BITNET] = { .llama_overlay = TRUE },  /* sub-norms: hn_transformer_weights_load */
  [HN_NAMES_DIFFLLAMA] = { .llama_overlay = TRUE }, /* values and lambdas: take_diff_attn */
  [HN_NAMES_JETMOE] = { .llama_overlay = TRUE }, /* attention: take_moa; the MLP experts: take_moe */
  [HN_NAMES_MODERNBERT_DECODER] = { .llama_overlay = TRUE, /* the head's dense and norm: take_head */
    .embed = "model.embeddings.tok_embeddings", .embed_norm = "model.embeddings.norm",
    .ln1 = "attn_norm", .ln2 = "mlp_norm",
    .q = "attn.q_proj", .k = "attn.k_proj", .v = "attn.v_proj", .o = "attn.Wo",
    .gate_up = "mlp.Wi", .down = "mlp.Wo", .final_norm = "model.final_norm", .lm_head = "decoder" },
  [HN_NAMES_NANOCHAT] = { .llama_overlay = TRUE, /* every norm (q/k too) is a weightless RMSNorm */
    .ln1 = NONE, .ln2 = NONE, .q_norm = NONE, .k_norm = NONE, .final_norm = NONE,
    .gate = NONE, .up = "mlp.fc1", .down = "mlp.fc2" },
  [HN_NAMES_XGLM] = {
    .embed = "model.embed_tokens", .layer = "model.layers.",
    .ln1 = "self_attn_layer_norm", .ln2 = "final_layer_norm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.out_proj",
    .up = "fc1", .down = "fc2", .final_norm = "model.layer_norm", .lm_head = "lm_head" },
  [HN_NAMES_BIOGPT] = {
    .embed = "biogpt.embed_tokens", .pos = "biogpt.embed_positions", .layer = "biogpt.layers.",
    .ln1 = "self_attn_layer_norm", .ln2 = "final_layer_norm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.out_proj",
    .up = "fc1", .down = "fc2", .final_norm = "biogpt.layer_norm", .lm_head = "output_projection" },
  [HN_NAMES_CTRL] = {
    .embed = "transformer.w", .layer = "transformer.h.",
    .ln1 = "layernorm1", .ln2 = "layernorm2",
    .q = "multi_head_attention.Wq", .k = "multi_head_attention.Wk", .v = "multi_head_attention.Wv",
    .o = "multi_head_attention.dense", .up = "ffn.0", .down = "ffn.2",
    .final_norm = "transformer.layernorm", .lm_head = "lm_head" },
  [HN_NAMES_OPENAI_GPT] = {
    .embed = "transformer.tokens_embed", .pos = "transformer.positions_embed", .layer = "transformer.h.",
    .ln1 = "ln_1", .ln2 = "ln_2",
    .qkv = "attn.c_attn", .qkv_layout = QKV_CONV1D, .o = "attn.c_proj",
    .up = "mlp.c_fc", .down = "mlp.c_proj", .lm_head = "lm_head", .conv1d = TRUE },
  [HN_NAMES_GPT_NEOX_JP] = { /* attention.dense has no bias; attention.dense_bias is added after it */
    .embed = "gpt_neox_japanese.embed_in", .layer = "gpt_neox_japanese.layers.",
    .ln1 = "input_layernorm", .ln2 = "post_attention_layernorm",
    .qkv = "attention.query_key_value", .qkv_layout = QKV_HEAD_SPLIT, .o = "attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
    .final_norm = "gpt_neox_japanese.final_layer_norm", .lm_head = "embed_out" },
  [HN_NAMES_BERT_GENERATION] = { /* BertGenerationDecoder: post-LN bert layers, causal; the head tied with a bias */
    .embed = "bert.embeddings.word_embeddings", .pos = "bert.embeddings.position_embeddings",
    .embed_norm = "bert.embeddings.LayerNorm", .layer = "bert.encoder.layer.",
    .ln1 = "attention.output.LayerNorm", .ln2 = "output.LayerNorm",
    .q = "attention.self.query", .k = "attention.self.key", .v = "attention.self.value",
    .o = "attention.output.dense", .up = "intermediate.dense", .down = "output.dense", .lm_head = "lm_head" },
  [HN_NAMES_GLM4] = { .llama_overlay = TRUE,
    .post_attn = "post_self_attn_layernorm", .ln2 = "post_attention_layernorm",
    .post_ffn = "post_mlp_layernorm" },
  [HN_NAMES_PERSIMMON] = { .llama_overlay = TRUE,
    .q = NONE, .k = NONE, .v = NONE, .qkv = "self_attn.query_key_value", .qkv_layout = QKV_HEAD_SPLIT,
    .o = "self_attn.dense", .q_norm = "self_attn.q_layernorm", .k_norm = "self_attn.k_layernorm",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h", .final_norm = "model.final_layernorm" },
  [HN_NAMES_GPT2] = {
    .embed = "transformer.wte", .pos = "transformer.wpe", .layer = "transformer.h.",
    .ln1 = "ln_1", .ln2 = "ln_2",
    .qkv = "attn.c_attn", .qkv_layout = QKV_CONV1D, .o = "attn.c_proj",
    .up = "mlp.c_fc", .down = "mlp.c_proj",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head", .conv1d = TRUE },
  [HN_NAMES_BIGCODE] = { /* gpt2's names with Linear weights, c_attn rows q, k, v */
    .embed = "transformer.wte", .pos = "transformer.wpe", .layer = "transformer.h.",
    .ln1 = "ln_1", .ln2 = "ln_2",
    .qkv = "attn.c_attn", .qkv_layout = QKV_CONCAT, .o = "attn.c_proj",
    .up = "mlp.c_fc", .down = "mlp.c_proj",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
  [HN_NAMES_GPT_NEO] = {
    .embed = "transformer.wte", .pos = "transformer.wpe", .layer = "transformer.h.",
    .ln1 = "ln_1", .ln2 = "ln_2",
    .q = "attn.attention.q_proj", .k = "attn.attention.k_proj", .v = "attn.attention.v_proj",
    .o = "attn.attention.out_proj", .up = "mlp.c_fc", .down = "mlp.c_proj",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
  [HN_NAMES_MPT] = {
    .embed = "transformer.wte", .layer = "transformer.blocks.",
    .ln1 = "norm_1", .ln2 = "norm_2",
    .qkv = "attn.Wqkv", .qkv_layout = QKV_CONCAT, .o = "attn.out_proj",
    .up = "ffn.up_proj", .down = "ffn.down_proj",
    .final_norm = "transformer.norm_f", .lm_head = "lm_head" },
  [HN_NAMES_DBRX] = { /* the experts: take_moe */
    .embed = "transformer.wte", .layer = "transformer.blocks.",
    .ln1 = "norm_attn_norm.norm_1", .ln2 = "norm_attn_norm.norm_2",
    .qkv = "norm_attn_norm.attn.Wqkv", .qkv_layout = QKV_CONCAT, .o = "norm_attn_norm.attn.out_proj",
    .final_norm = "transformer.norm_f", .lm_head = "lm_head" },
  [HN_NAMES_CODEGEN] = {
    .embed = "transformer.wte", .layer = "transformer.h.",
    .ln1 = "ln_1",
    .qkv = "attn.qkv_proj", .qkv_layout = QKV_CODEGEN, .o = "attn.out_proj",
    .up = "mlp.fc_in", .down = "mlp.fc_out",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
  [HN_NAMES_GPT_NEOX] = {
    .embed = "gpt_neox.embed_in", .layer = "gpt_neox.layers.",
    .ln1 = "input_layernorm", .ln2 = "post_attention_layernorm",
    .qkv = "attention.query_key_value", .qkv_layout = QKV_HEAD_SPLIT, .o = "attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
    .final_norm = "gpt_neox.final_layer_norm", .lm_head = "embed_out" },
  [HN_NAMES_GPTJ] = {
    .embed = "transformer.wte", .layer = "transformer.h.",
    .ln1 = "ln_1",
    .q = "attn.q_proj", .k = "attn.k_proj", .v = "attn.v_proj", .o = "attn.out_proj",
    .up = "mlp.fc_in", .down = "mlp.fc_out",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
  [HN_NAMES_OPT] = {
    .embed = "model.decoder.embed_tokens", .pos = "model.decoder.embed_positions",
    .layer = "model.decoder.layers.",
    .ln1 = "self_attn_layer_norm", .ln2 = "final_layer_norm",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.out_proj",
    .up = "fc1", .down = "fc2",
    .final_norm = "model.decoder.final_layer_norm", .lm_head = "lm_head" },
  [HN_NAMES_BLOOM] = {
    .embed = "transformer.word_embeddings", .embed_norm = "transformer.word_embeddings_layernorm",
    .layer = "transformer.h.",
    .ln1 = "input_layernorm", .ln2 = "post_attention_layernorm",
    .qkv = "self_attention.query_key_value", .qkv_layout = QKV_HEAD_SPLIT, .o = "self_attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
  [HN_NAMES_FALCON] = { /* norms: falcon_norms; the qkv layout: hn_transformer_weights_load */
    .embed = "transformer.word_embeddings", .layer = "transformer.h.",
    .qkv = "self_attention.query_key_value", .o = "self_attention.dense",
    .up = "mlp.dense_h_to_4h", .down = "mlp.dense_4h_to_h",
    .final_norm = "transformer.ln_f", .lm_head = "lm_head" },
};

/* What the config changes in llama's names: q/k norms, the norms of the
 * block kind, no gate without gating, a fused gate_up. */
static void
llama_config (const HnTransformerHParams *hp, Names *N)
{
  if (hp->qk_norm_head || hp->qk_norm_full)
    {
      gboolean hy = hp->arch->names == HN_NAMES_HUNYUAN;
      N->q_norm = hy ? "self_attn.query_layernorm" : "self_attn.q_norm";
      N->k_norm = hy ? "self_attn.key_layernorm" : "self_attn.k_norm";
    }
  if (hp->block == HN_BLOCK_SANDWICH)
    {
      N->post_attn = "post_attention_layernorm";
      N->ln2 = "pre_feedforward_layernorm";
      N->post_ffn = "post_feedforward_layernorm";
    }
  if (hp->block == HN_BLOCK_POST_NORM)
    {
      N->ln1 = N->ln2 = NULL;
      N->post_attn = "post_attention_layernorm";
      N->post_ffn = "post_feedforward_layernorm";
    }
  if (hp->block == HN_BLOCK_PARALLEL)
    N->ln2 = NULL;
  if (!hp->gated)
    N->gate = NULL;
  if (hp->arch->quirks & HN_QUIRK_FUSED_GATE_UP)
    {
      N->gate = N->up = NULL;
      N->gate_up = "mlp.gate_up_proj";
    }
}

static void
put (const char **name, const char *over)
{
  if (over)
    *name = strcmp (over, NONE) == 0 ? NULL : over;
}

static void
overlay (Names *N, const Names *o)
{
  put (&N->embed, o->embed);
  put (&N->pos, o->pos);
  put (&N->embed_norm, o->embed_norm);
  put (&N->layer, o->layer);
  put (&N->ln1, o->ln1);
  put (&N->ln2, o->ln2);
  put (&N->post_attn, o->post_attn);
  put (&N->post_ffn, o->post_ffn);
  put (&N->q, o->q);
  put (&N->k, o->k);
  put (&N->v, o->v);
  put (&N->qkv, o->qkv);
  put (&N->o, o->o);
  put (&N->q_norm, o->q_norm);
  put (&N->k_norm, o->k_norm);
  put (&N->gate, o->gate);
  put (&N->up, o->up);
  put (&N->gate_up, o->gate_up);
  put (&N->down, o->down);
  put (&N->final_norm, o->final_norm);
  put (&N->lm_head, o->lm_head);
  if (o->qkv_layout != QKV_SEPARATE)
    N->qkv_layout = o->qkv_layout;
}

static void
names_for (const HnTransformerHParams *hp, Names *N)
{
  HnNameScheme ns = hp->arch->names;
  /* encoders and encoder-decoders are refused by hn_transformer_hparams_resolve */
  g_assert ((gsize) ns < G_N_ELEMENTS (scheme_names) && (scheme_names[ns].layer || scheme_names[ns].llama_overlay));
  const Names *row = &scheme_names[ns];
  if (ns == HN_NAMES_LLAMA || row->llama_overlay)
    {
      *N = scheme_names[HN_NAMES_LLAMA];
      llama_config (hp, N);
      if (row->llama_overlay)
        overlay (N, row);
    }
  else
    *N = *row;
  if (strcmp (hp->arch->model_type, "cosmos3_edge_text") == 0)
    {
      /* Cosmos3EdgeTextMLP (CLIPMLP's layout): fc2(relu2(fc1(x))) */
      N->up = "mlp.fc1";
      N->down = "mlp.fc2";
    }
  if (strcmp (hp->arch->model_type, "afmoe") == 0)
    {
      /* AfmoeDecoderLayer: post_attention_layernorm on the attention output, pre/post_mlp_layernorm */
      N->ln2 = "pre_mlp_layernorm";
      N->post_ffn = "post_mlp_layernorm";
    }
  if (strcmp (hp->arch->model_type, "muse_glimmer_text") == 0)
    N->q_norm = N->k_norm = NULL; /* MuseGlimmerTextAttention.qk_norm has no weight */
  if (strcmp (hp->arch->model_type, "hyperclovax") == 0 && hp->block == HN_BLOCK_SANDWICH)
    {
      /* HyperCLOVAXDecoderLayer: post_norm1 / post_norm2 after the sublayers, llama's pre-norms */
      N->post_attn = "post_norm1";
      N->ln2 = "post_attention_layernorm";
      N->post_ffn = "post_norm2";
    }
  if (ns == HN_NAMES_FALCON)
    {
      if (hp->block == HN_BLOCK_PARALLEL_2NORM)
        {
          N->ln1 = "ln_attn";
          N->ln2 = "ln_mlp";
        }
      else
        {
          N->ln1 = "input_layernorm";
          N->ln2 = hp->block == HN_BLOCK_PRE_NORM ? "post_attention_layernorm" : NULL;
        }
    }
}

/* TRUE when checkpoint tensor `name` lies under `prefix` (which ends in
 * "."), also in a bare base model saved without the "model." prefix. */
static gboolean
under (const char *name, const char *prefix)
{
  return g_str_has_prefix (name, prefix) || (g_str_has_prefix (prefix, "model.") && g_str_has_prefix (name, prefix + 6));
}

/* A pipeline stage leaves out the tensors another stage loads: they count
 * as understood here (that stage validates them). */
static void
skip_prefix (Loader *L, const char *prefix)
{
  guint n = hn_safetensors_get_n_tensors (L->st);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (L->st, i);
      if (under (t->name, prefix))
        g_hash_table_add (L->used, (gpointer) t->name);
    }
}

static void
skip_module (Loader *L, const char *module)
{
  if (!module)
    return;
  g_autofree char *p = g_strdup_printf ("%s.", module);
  skip_prefix (L, p);
}

/* The layer a tensor belongs to, or -1. */
static int
layer_of (const Names *N, const char *name)
{
  const char *rest = NULL;
  if (g_str_has_prefix (name, N->layer))
    rest = name + strlen (N->layer);
  else if (g_str_has_prefix (N->layer, "model.") && g_str_has_prefix (name, N->layer + 6))
    rest = name + strlen (N->layer) - 6;
  if (!rest || !g_ascii_isdigit (*rest))
    return -1;
  char *end = NULL;
  guint64 v = g_ascii_strtoull (rest, &end, 10);
  return end && *end == '.' && v < G_MAXINT ? (int) v : -1;
}

/* The final norm and the LM head (the last stage's weights). */
static gboolean
take_head (Loader *L, const Names *N, gint64 C, gint64 V, gboolean params, const char *lmw, const char *lmb,
           GError **error)
{
  HnTransformerWeights *W = &L->m->w;
  if (!take_norm (L, "", N->final_norm, C, params, &W->final_norm_w, &W->final_norm_b, error))
    return FALSE;
  if (L->m->hp.tie_embeddings)
    {
      W->lm_head = W->tok_embed;
      const HnSafetensorInfo *t = find (L, lmw);
      if (t) /* transformers ties it anyway; a stale copy is not used */
        g_hash_table_add (L->used, (gpointer) t->name);
    }
  else if (!take_matrix (L, lmw, V, C, TRUE, &W->lm_head, error))
    return FALSE;
  if (L->m->hp.head_transform &&
      (!take_linear (L, N, "", "lm_head.dense", C, C, &W->head_dense_w, &W->head_dense_b, error) ||
       !take_norm (L, "", "lm_head.norm", C, TRUE, &W->head_norm_w, &W->head_norm_b, error)))
    return FALSE;
  return take_vector (L, lmb, V, FALSE, &W->lm_head_b, error);
}

void
hn_transformer_weights_measure (const HnTransformerHParams *hp, HnSafetensors *st, guint64 *layer_bytes,
                                guint64 *embed_bytes, guint64 *head_bytes)
{
  Names N;
  names_for (hp, &N);
  g_autofree char *embed = g_strdup_printf ("%s.", N.embed);
  g_autofree char *lm = g_strdup_printf ("%s.", N.lm_head);
  g_autofree char *fnorm = g_strdup_printf ("%s.", N.final_norm);
  memset (layer_bytes, 0, sizeof (guint64) * (gsize) hp->n_layer);
  *embed_bytes = *head_bytes = 0;
  guint n = hn_safetensors_get_n_tensors (st);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      int il = layer_of (&N, t->name);
      if (hp->layer_src && il >= 0)
        {
          int src = il;
          il = -1;
          for (int k = 0; k < hp->n_layer; k++)
            if (hp->layer_src[k] == src)
              il = k;
          if (il < 0 && src < hp->src_n_layer)
            continue; /* a layer not run, not loaded */
        }
      if (il >= 0 && il < hp->n_layer)
        layer_bytes[il] += t->nbytes;
      else if (under (t->name, lm) || under (t->name, fnorm))
        *head_bytes += hp->tie_embeddings && under (t->name, lm) ? 0 : t->nbytes;
      else
        {
          *embed_bytes += t->nbytes;
          if (hp->tie_embeddings && under (t->name, embed))
            *head_bytes += t->nbytes; /* the last stage holds its own copy as the head */
        }
    }
}

/* One scalar of the checkpoint (shape [] or [1]) on the host. */
static gboolean
take_scalar (Loader *L, const char *name, float *out, GError **error)
{
  const HnSafetensorInfo *t = find (L, name);
  if (!t)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, name);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) t->name);
  if (t->n_elements != 1 || t->ndim > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s must hold one value", t->file, t->name);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *out = f[0];
  return TRUE;
}

static double
softplus (double x)
{
  return x > 20 ? x : log1p (exp (x));
}

/* XIELUActivation's parameters: alpha_p / alpha_n (softplus-parametrised), beta and eps buffers.
 * The graph takes min(x, 0) where transformers takes min(x, eps): the same within |eps| · alpha_n,
 * so an eps further from 0 than 1e-5 is refused. */
static gboolean
take_xielu (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  float ap, an, beta, eps;
  g_autofree char *np = g_strdup_printf ("%smlp.act_fn.alpha_p", pfx);
  g_autofree char *nn = g_strdup_printf ("%smlp.act_fn.alpha_n", pfx);
  g_autofree char *nb = g_strdup_printf ("%smlp.act_fn.beta", pfx);
  g_autofree char *ne = g_strdup_printf ("%smlp.act_fn.eps", pfx);
  if (!take_scalar (L, np, &ap, error) || !take_scalar (L, nn, &an, error) || !take_scalar (L, nb, &beta, error) ||
      !take_scalar (L, ne, &eps, error))
    return FALSE;
  if (!(fabsf (eps) <= 1e-5f))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: xIELU eps %g (%s) is not supported (only |eps| <= 1e-5)",
                   L->m->dir, eps, ne);
      return FALSE;
    }
  lw->xielu[0] = (float) softplus (ap);
  lw->xielu[1] = (float) (beta + softplus (an));
  lw->xielu[2] = beta;
  return TRUE;
}

/* A stacked [E, a, b] checkpoint tensor uploaded as it is (its dtype). */
static HnTensor *
take_stack_3d (Loader *L, const char *name, gint64 E, gint64 a, gint64 b, GError **error)
{
  const HnSafetensorInfo *t = take_stacked (L, name, E, a, b, error);
  HnDType dt;
  if (!t || !st_to_dtype (t, &dt, error))
    return NULL;
  g_autofree void *copy = g_memdup2 (t->data, t->nbytes); /* mapping may be unaligned */
  HnTensor *out = upload (L, name, dt, 3, (gint64[]) { E, a, b }, copy, t->nbytes, error);
  note_origin (L, out, t, FALSE, 0, NULL);
  return out;
}

/* JetMoE's attention: kv_proj [2 * KVH * D, C] (k rows, then v rows) and the attention experts
 * (JetMoeMoA: router, input_linear, output_linear, bias). */
static gboolean
take_moa (Loader *L, const char *pfx, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, E = hp->n_experts, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  g_autofree char *kvn = g_strdup_printf ("%sself_attention.kv_proj.weight", pfx);
  g_autofree char *rn = g_strdup_printf ("%sself_attention.experts.router.layer.weight", pfx);
  g_autofree char *in = g_strdup_printf ("%sself_attention.experts.input_linear.weight", pfx);
  g_autofree char *on = g_strdup_printf ("%sself_attention.experts.output_linear.weight", pfx);
  g_autofree char *bn = g_strdup_printf ("%sself_attention.experts.bias", pfx);
  const HnSafetensorInfo *kv = find (L, kvn);
  if (!kv)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, kvn);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) kv->name);
  if (!check_shape (kv, 2, (gint64[]) { 2 * kvd, C }, error))
    return FALSE;
  g_autofree gint64 *kr = g_new (gint64, kvd), *vr = g_new (gint64, kvd);
  for (gint64 r = 0; r < kvd; r++)
    {
      kr[r] = r;
      vr[r] = kvd + r;
    }
  g_autofree char *kn = g_strdup_printf ("%s (k rows)", kvn), *vn = g_strdup_printf ("%s (v rows)", kvn);
  L->linear = TRUE;
  gboolean ok = (lw->wk = gather_rows (L, kv, kn, kr, kvd, C, error)) && (lw->wv = gather_rows (L, kv, vn, vr, kvd, C, error));
  L->linear = FALSE;
  return ok && take_matrix (L, rn, E, C, TRUE, &lw->moa_router, error) &&
         (lw->moa_in = take_stack_3d (L, in, E, kvd, C, error)) &&
         (lw->moa_out = take_stack_3d (L, on, E, C, kvd, error)) && take_vector (L, bn, C, TRUE, &lw->moa_bias, error);
}

/* DiffLlama: v_proj with each KV head j's rows holding the values of KV heads a = j mod KVH/2 and
 * a + KVH/2 (one head when KVH is 1) side by side (hp.diff_attn), and the layer's lambda from
 * lambda_q1/k1/q2/k2 with lambda_init = 0.8 - 0.6 exp(-0.3 layer). */
static gboolean
take_diff_attn (Loader *L, const Names *N, const char *pfx, int layer, HnLayerWeights *lw, GError **error)
{
  const HnTransformerHParams *hp = &L->m->hp;
  gint64 C = hp->hidden, KVH = hp->n_kv_head, D = hp->head_dim, half = KVH > 1 ? KVH / 2 : 0;
  g_autofree gint64 *rows = g_new (gint64, KVH * 2 * D);
  for (gint64 j = 0; j < KVH; j++)
    for (gint64 s = 0; s < 2; s++)
      for (gint64 d = 0; d < D; d++)
        rows[(j * 2 + s) * D + d] = ((half ? j % half : 0) + s * half) * D + d;
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, N->v);
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, N->v);
  const HnSafetensorInfo *w = find (L, wn), *b = find (L, bn);
  if (!w)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, wn);
      return FALSE;
    }
  g_hash_table_add (L->used, (gpointer) w->name);
  if (!check_shape (w, 2, (gint64[]) { KVH * D, C }, error))
    return FALSE;
  L->linear = TRUE;
  lw->wv = gather_rows (L, w, wn, rows, KVH * 2 * D, C, error);
  L->linear = FALSE;
  if (!lw->wv)
    return FALSE;
  if (b)
    {
      g_hash_table_add (L->used, (gpointer) b->name);
      if (!check_shape (b, 1, (gint64[]) { KVH * D }, error))
        return FALSE;
      g_autofree float *f = hn_safetensor_info_dup_f32 (b, error);
      if (!f)
        return FALSE;
      g_autofree float *bv = g_new (float, KVH * 2 * D);
      for (gint64 r = 0; r < KVH * 2 * D; r++)
        bv[r] = f[rows[r]];
      if (!(lw->bv = vector_from_f32 (L, bn, bv, KVH * 2 * D, error)))
        return FALSE;
      note_origin (L, lw->bv, b, FALSE, 0, rows);
    }
  static const char *const parts[4] = { "lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2" };
  float *lam[4] = { NULL, NULL, NULL, NULL };
  gboolean ok = TRUE;
  for (int i = 0; ok && i < 4; i++)
    {
      g_autofree char *ln = g_strdup_printf ("%sself_attn.%s", pfx, parts[i]);
      const HnSafetensorInfo *t = find (L, ln);
      if (!t)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->m->dir, ln);
          ok = FALSE;
          break;
        }
      g_hash_table_add (L->used, (gpointer) t->name);
      ok = check_shape (t, 1, (gint64[]) { D }, error) && (lam[i] = hn_safetensor_info_dup_f32 (t, error)) != NULL;
    }
  if (ok)
    {
      /* transformers sums the products in float32 and takes exp in float32 */
      float s1 = 0.0f, s2 = 0.0f;
      for (gint64 d = 0; d < D; d++)
        {
          s1 += lam[0][d] * lam[1][d];
          s2 += lam[2][d] * lam[3][d];
        }
      lw->diff_lambda_init = (float) (0.8 - 0.6 * exp (-0.3 * layer));
      lw->diff_lambda = expf (s1) - expf (s2) + lw->diff_lambda_init;
    }
  for (int i = 0; i < 4; i++)
    g_free (lam[i]);
  return ok;
}

gboolean
hn_transformer_weights_load (HnTransformer *m, HnSafetensors *st, GError **error)
{
  HnTransformerHParams *hp = &m->hp;
  HnTransformerWeights *W = &m->w;
  Names N;
  names_for (hp, &N);
  if (hp->arch->names == HN_NAMES_FALCON)
    {
      gboolean nda = m->config->new_decoder_architecture == TRUE;
      gboolean mq = hp->n_kv_head == 1;
      N.qkv_layout = nda ? QKV_GROUPED : (mq ? QKV_CONCAT : QKV_HEAD_SPLIT);
    }
  g_autoptr (GHashTable) used = g_hash_table_new (g_str_hash, g_str_equal);
  Loader L = { m, st, used, FALSE, 1.0f };
  gint64 C = hp->hidden, F = hp->ffn, V = hp->vocab;
  gint64 qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gboolean params = !(hp->arch->quirks & HN_QUIRK_NORM_NO_PARAMS);

  gboolean first = m->layer0 == 0, last = m->layer1 == hp->n_layer;
  g_autofree char *emb = g_strdup_printf ("%s.weight", N.embed);
  if ((first || (last && hp->tie_embeddings)) && hp->embed_rows > V)
    {
      /* mllama: the first V rows are the text tokens' (the others, image tokens', stay in the checkpoint) */
      g_autofree gint64 *rows = g_new (gint64, V);
      for (gint64 r = 0; r < V; r++)
        rows[r] = r;
      if (!(W->tok_embed = pick_rows (&L, emb, hp->embed_rows, C, "text", rows, V, error)))
        return FALSE;
    }
  else if (first || (last && hp->tie_embeddings))
    {
      if (!take_matrix (&L, emb, V, C, TRUE, &W->tok_embed, error))
        return FALSE;
    }
  else
    skip_module (&L, N.embed);
  if (N.pos && !first)
    skip_module (&L, N.pos);
  else if (N.pos)
    {
      g_autofree char *pn = g_strdup_printf ("%s.weight", N.pos);
      const HnSafetensorInfo *t = find (&L, pn);
      if (!t || t->ndim != 2)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no 2-D tensor %s", m->dir, pn);
          return FALSE;
        }
      if (!take_matrix (&L, pn, t->shape[0], C, TRUE, &W->pos_embed, error))
        return FALSE;
    }
  if (first && (hp->arch->names == HN_NAMES_XGLM || hp->arch->names == HN_NAMES_CTRL))
    {
      /* fixed sinusoidal tables: xglm fairseq's from row 2 (padding_idx row zero), ctrl sin | cos of
       * pos / 10000^(2i/C) in float32 */
      gint64 rows = hp->max_positions + hp->pos_offset;
      g_autofree float *t = NULL;
      if (hp->arch->names == HN_NAMES_XGLM)
        t = hn_sinusoidal_table_fairseq ((int) rows, (int) C, hp->pad_token_id >= 0 ? hp->pad_token_id : -1);
      else
        {
          t = g_new (float, (gsize) (rows * C));
          gint64 half = C / 2;
          for (gint64 p = 0; p < rows; p++)
            for (gint64 j = 0; j < half; j++)
              {
                float rate = 1.0f / powf (10000.0f, (float) (2 * j) / (float) C);
                float a = (float) p * rate;
                t[p * C + j] = sinf (a);
                t[p * C + half + j] = cosf (a);
              }
        }
      if (!(W->pos_embed = vector_from_f32 (&L, "sinusoidal_positions", t, rows * C, error)))
        return FALSE;
      HnTensor *pe = hn_tensor_reshape (W->pos_embed, 2, (gint64[]) { rows, C }, error);
      if (!pe)
        return FALSE;
      g_ptr_array_add (m->owned, pe);
      W->pos_embed = pe;
    }
  if (N.embed_norm && !first)
    skip_module (&L, N.embed_norm);
  else if (N.embed_norm && !take_norm (&L, "", N.embed_norm, C, TRUE, &W->embed_norm_w, &W->embed_norm_b, error))
    return FALSE;

  W->layers = g_new0 (HnLayerWeights, hp->n_layer);
  for (int i = 0; i < hp->n_layer; i++)
    {
      HnLayerWeights *lw = &W->layers[i];
      lw->layer_scalar = 1.0f;
      lw->glu_limit = hp->layer_glu_limit ? hp->layer_glu_limit[i] : 0.0f;
      lw->expert_glu_limit = hp->layer_expert_glu_limit ? hp->layer_expert_glu_limit[i] : 0.0f;
      g_autofree char *pfx = g_strdup_printf ("%s%d.", N.layer, hp->layer_src ? hp->layer_src[i] : i);
      if (i < m->layer0 || i >= m->layer1)
        {
          skip_prefix (&L, pfx); /* another stage's layer */
          continue;
        }
      const char *ln1 = hp->no_first_attn_norm && i == 0 ? NULL : N.ln1; /* modernbert-decoder: Identity */
      if (!take_norm (&L, pfx, ln1, C, params, &lw->ln1_w, &lw->ln1_b, error) ||
          !take_norm (&L, pfx, N.ln2, C, params, &lw->ln2_w, &lw->ln2_b, error) ||
          !take_norm (&L, pfx, N.post_attn, C, TRUE, &lw->post_attn_w, NULL, error) ||
          !take_norm (&L, pfx, N.post_ffn, C, TRUE, &lw->post_ffn_w, NULL, error))
        return FALSE;
      HnMixerKind mixer = hp->layer_mixer ? hp->layer_mixer[i] : HN_MIXER_ATTENTION;
      /* laguna varies the query heads, mimo_v2_flash the K/V heads by layer */
      gint64 D_l = hn_transformer_layer_head_dim (hp, i), Dv_l = hn_transformer_layer_v_head_dim (hp, i);
      gint64 qd_l = (gint64) hn_transformer_layer_heads (hp, i) * D_l;
      gint64 kvh_l = hn_transformer_layer_kv_heads (hp, i);
      g_autofree char *lsn = g_strdup_printf ("%slayer_scalar", pfx);
      if (hp->layer_scalars && !take_scalar (&L, lsn, &lw->layer_scalar, error))
        return FALSE;
      if (mixer == HN_MIXER_MAMBA2 || mixer == HN_MIXER_PARALLEL)
        {
          /* bamba: mamba.*; nemotron_h: the layer's one mixer */
          g_autofree char *mp = g_strdup_printf ("%s%s", pfx, hp->arch->names == HN_NAMES_NEMOTRON_H ? "mixer." : "mamba.");
          if (!take_mamba2 (&L, mp, lw, error))
            return FALSE;
        }
      if (mixer == HN_MIXER_MAMBA1)
        {
          g_autofree char *mp = g_strdup_printf ("%smamba.", pfx);
          if (!take_mamba1 (&L, mp, lw, error))
            return FALSE;
        }
      else if (mixer == HN_MIXER_DELTANET)
        {
          g_autofree char *dp = g_strdup_printf ("%slinear_attn.", pfx);
          if (!take_deltanet (&L, dp, lw, error))
            return FALSE;
        }
      else if (mixer == HN_MIXER_RGLRU)
        {
          g_autofree char *rp = g_strdup_printf ("%stemporal_block.", pfx);
          if (!take_rglru (&L, rp, lw, error))
            return FALSE;
        }
      else if (mixer == HN_MIXER_SHORTCONV)
        {
          g_autofree char *cp = g_strdup_printf ("%sconv.", pfx);
          if (!take_shortconv (&L, cp, lw, error))
            return FALSE;
        }
      else if (mixer == HN_MIXER_NONE)
        {
          /* an MLP-only layer: its one norm is the MLP's */
          lw->ln2_w = lw->ln1_w;
          lw->ln1_w = NULL;
        }
      else if (mixer == HN_MIXER_PARALLEL)
        {
          if (!take_falcon_h1_attention (&L, &N, pfx, lw, error))
            return FALSE;
        }
      else if (mixer == HN_MIXER_ATTENTION)
        {
          if (hp->mla)
            {
              if (!take_mla (&L, pfx, lw, error))
                return FALSE;
            }
          else if (hp->moa)
            {
              if (!take_moa (&L, pfx, lw, error))
                return FALSE;
            }
          else if (N.qkv)
            {
              if (!take_fused_qkv (&L, &N, pfx, lw, error))
                return FALSE;
            }
          else if (hp->arch->names == HN_NAMES_QWEN3_NEXT)
            {
              /* q_proj [H, 2 · D]: each head's query rows, then its output gate's */
              gint64 H = hn_transformer_layer_heads (hp, i), D = hp->head_dim;
              g_autofree gint64 *iq = g_new (gint64, H * D), *ig = g_new (gint64, H * D);
              for (gint64 h = 0; h < H; h++)
                for (gint64 e = 0; e < D; e++)
                  {
                    iq[h * D + e] = h * 2 * D + e;
                    ig[h * D + e] = h * 2 * D + D + e;
                  }
              g_autofree char *qn = g_strdup_printf ("%sself_attn.q_proj.weight", pfx);
              if (!(lw->wq = pick_rows (&L, qn, 2 * H * D, C, "query", iq, H * D, error)) ||
                  !(lw->attn_gate = pick_rows (&L, qn, 2 * H * D, C, "gate", ig, H * D, error)) ||
                  !take_linear (&L, &N, pfx, N.k, kvh_l * hp->head_dim, C, &lw->wk, &lw->bk, error) ||
                  !take_linear (&L, &N, pfx, N.v, kvh_l * hp->v_head_dim, C, &lw->wv, &lw->bv, error))
                return FALSE;
            }
          else if (!take_linear (&L, &N, pfx, N.q, qd_l, C, &lw->wq, &lw->bq, error) ||
                   !take_linear (&L, &N, pfx, N.k, kvh_l * D_l, C, &lw->wk, &lw->bk, error) ||
                   (hp->diff_attn ? !take_diff_attn (&L, &N, pfx, i, lw, error)
                                  : !take_linear (&L, &N, pfx, N.v, kvh_l * Dv_l, C, &lw->wv, &lw->bv, error)))
            return FALSE;
          /* diffllama: o_proj reads the H/2 combined head pairs of 2 * head_dim */
          gint64 o_in = hp->diff_attn ? qd : (gint64) hn_transformer_layer_heads (hp, i) * Dv_l;
          if (!hp->moa && !take_linear (&L, &N, pfx, N.o, C, o_in, &lw->wo, &lw->bo, error))
            return FALSE;
          g_autofree char *dbn = g_strdup_printf ("%sattention.dense_bias", pfx);
          /* gpt_neox_japanese: the last layer's attention.dense_bias (use_bias) is added after the dense */
          if (hp->arch->names == HN_NAMES_GPT_NEOX_JP && !lw->bo && !take_vector (&L, dbn, C, FALSE, &lw->bo, error))
            return FALSE;
          gboolean g_proj = strcmp (hp->arch->model_type, "laguna") == 0 || strcmp (hp->arch->model_type, "step3p5") == 0;
          g_autofree char *agn = g_strdup_printf ("%sself_attn.%s.weight", pfx, g_proj ? "g_proj" : "gate_proj");
          gint64 ag_rows = hp->attn_gate_per_head ? hn_transformer_layer_heads (hp, i) : qd_l; /* step3p5: one per head */
          if (hp->attn_gate_act != HN_ACT_IDENTITY && !lw->attn_gate &&
              !take_matrix (&L, agn, ag_rows, C, TRUE, &lw->attn_gate, error))
            return FALSE;
          g_autofree char *sk = g_strdup_printf ("%sself_attn.sinks", pfx);
          if (hp->attn_sinks && !take_vector (&L, sk, hp->n_head, TRUE, &lw->sinks, error))
            return FALSE;
          g_autofree char *sb = g_strdup_printf ("%sself_attn.attention_sink_bias", pfx);
          if (strcmp (hp->arch->model_type, "mimo_v2_flash") == 0 && hp->layer_sliding[i] && /* its sliding layers' sinks */
              !take_vector (&L, sb, hp->n_head, TRUE, &lw->sinks, error))
            return FALSE;
          if (N.q_norm)
            {
              gint64 qn = hp->qk_norm_head ? D_l : qd, kn = hp->qk_norm_head ? D_l : kvd;
              if (!take_norm (&L, pfx, N.q_norm, qn, TRUE, &lw->q_norm_w, &lw->q_norm_b, error) ||
                  !take_norm (&L, pfx, N.k_norm, kn, TRUE, &lw->k_norm_w, &lw->k_norm_b, error))
                return FALSE;
            }
        }
      if (hp->layer_ffn && !hp->layer_ffn[i])
        continue; /* a hybrid's mixer-only layer */
      if (hn_transformer_layer_is_moe (hp, i) && !(hp->layer_ffn && hp->layer_ffn[i] == 2))
        {
          /* axk1: post_mlp_layernorm on the MoE block's output (dense layers have none) */
          if (strcmp (hp->arch->model_type, "axk1") == 0 &&
              !take_norm (&L, pfx, "post_mlp_layernorm", C, TRUE, &lw->post_ffn_w, NULL, error))
            return FALSE;
          if (!take_moe (&L, &N, pfx, lw, error))
            return FALSE;
          continue;
        }
      if (N.gate_up)
        {
          g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, N.gate_up);
          const HnSafetensorInfo *gu = find (&L, wn);
          L.linear = TRUE;
          gboolean ok;
          if (gu && gu->dtype == HN_ST_DTYPE_GGML)
            {
              /* GGUF blocks have no row views: gate and up as two weights (the same gated MLP) */
              g_hash_table_add (L.used, (gpointer) gu->name);
              g_autofree gint64 *rows_g = g_new (gint64, F), *rows_u = g_new (gint64, F);
              for (gint64 r = 0; r < F; r++)
                {
                  rows_g[r] = r;
                  rows_u[r] = F + r;
                }
              g_autofree char *gn = g_strdup_printf ("%sgate (from %s)", pfx, N.gate_up);
              g_autofree char *un = g_strdup_printf ("%sup (from %s)", pfx, N.gate_up);
              ok = check_shape (gu, 2, (gint64[]) { 2 * F, C }, error) &&
                   (lw->w_gate = gather_rows (&L, gu, gn, rows_g, F, C, error)) &&
                   (lw->w_up = gather_rows (&L, gu, un, rows_u, F, C, error));
            }
          else
            ok = take_matrix (&L, wn, 2 * F, C, TRUE, &lw->w_gate, error); /* [2F, C]: gate rows, then up rows */
          L.linear = FALSE;
          if (!ok)
            return FALSE;
        }
      else if (N.gate)
        {
          L.scale = hp->arch->names == HN_NAMES_FALCON_H1 ? hp->mup.gate : 1.0f; /* act(gate(h) · gate_multiplier) */
          gboolean ok = take_linear (&L, &N, pfx, N.gate, F, C, &lw->w_gate, &lw->b_gate, error);
          L.scale = 1.0f;
          if (!ok)
            return FALSE;
        }
      if (N.up && !take_linear (&L, &N, pfx, N.up, F, C, &lw->w_up, &lw->b_up, error))
        return FALSE;
      L.scale = hp->arch->names == HN_NAMES_FALCON_H1 ? hp->mup.down : 1.0f;
      gboolean down_ok = take_linear (&L, &N, pfx, N.down, C, F, &lw->w_down, &lw->b_down, error);
      L.scale = 1.0f;
      if (!down_ok)
        return FALSE;
      if (hp->xielu && !take_xielu (&L, pfx, lw, error))
        return FALSE;
      if (hp->sub_norms && (!take_norm (&L, pfx, "self_attn.attn_sub_norm", C, TRUE, &lw->attn_sub_w, NULL, error) ||
                            !take_norm (&L, pfx, "mlp.ffn_sub_norm", F, TRUE, &lw->ffn_sub_w, NULL, error)))
        return FALSE;
    }
  g_autofree char *lmw = g_strdup_printf ("%s.weight", N.lm_head);
  g_autofree char *lmb = g_strdup_printf ("%s.bias", N.lm_head);
  if (!last)
    {
      skip_module (&L, N.final_norm);
      skip_module (&L, N.lm_head);
      skip_module (&L, hp->head_transform ? "lm_head" : NULL);
    }
  else if (!take_head (&L, &N, C, V, params, lmw, lmb, error))
    return FALSE;

  /* everything in the checkpoint must have been understood */
  guint n = hn_safetensors_get_n_tensors (st), n_towers = 0, n_ignored = 0, n_skipped = 0;
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      if (g_hash_table_contains (used, t->name))
        continue;
      if (is_other_tower (m->config, t->name))
        {
          n_towers++;
          continue;
        }
      if (ignored_on_load (hp->arch->model_type, t->name))
        {
          n_ignored++;
          continue;
        }
      if (is_skipped_layer (hp, text_layer_of (&N, t->name)))
        {
          n_skipped++;
          continue;
        }
      if (g_str_has_suffix (t->name, "rotary_emb.inv_freq") || g_str_has_suffix (t->name, ".attn.bias") ||
          g_str_has_suffix (t->name, ".attn.masked_bias") || g_str_has_suffix (t->name, ".masked_bias"))
        continue; /* buffers some exporters save; recomputed here */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: tensor %s is not part of the %s graph (an unsupported feature of this checkpoint)", t->file,
                   t->name, hp->arch->model_type);
      return FALSE;
    }

  if (n_towers)
    g_info ("%s: %s package: %u tensors of its non-text towers are not run (kept on export)", m->dir,
            m->config->outer_model_type, n_towers);
  if (n_ignored)
    g_info ("%s: %u tensors of multi-token-prediction layers (or vision experts) are not run on text (kept on "
            "export)", m->dir, n_ignored);
  if (n_skipped)
    g_info ("%s: %u tensors of the cross-attention layers are not run on text alone (kept on export)", m->dir,
            n_skipped);

  /* rotary frequencies and ALiBi slopes */
  if (hp->rope)
    {
      int half = hp->rot_dims / 2;
      g_autofree float *inv = g_new (float, MAX (hp->rot_dims, hp->local_rot_dims) / 2);
      if (!hn_rope_compute_inv_freq (hp->rope_theta, hp->rot_dims, hp->max_positions,
                                     hp->rope_scaling.type == HN_ROPE_SCALING_NONE ? NULL : &hp->rope_scaling, 0, inv,
                                     &W->rope_attn_scale, error))
        return FALSE;
      for (int i = 0; hp->rope_reversed && i < half; i++)
        inv[i] = -inv[i];
      for (int i = 0; hp->rope_prop_angles > 0 && i < half; i++) /* gemma4 "proportional" */
        inv[i] = i < hp->rope_prop_angles ? 1.0f / powf ((float) hp->rope_theta, (float) (2 * i) / (float) hp->rot_dims)
                                          : 0.0f;
      if (!(W->inv_freq = vector_from_f32 (&L, "rope.inv_freq", inv, half, error)))
        return FALSE;
      if (hp->local_rope)
        {
          if (!hn_rope_compute_inv_freq (hp->local_rope_theta, hp->local_rot_dims, hp->max_positions,
                                         hp->local_rope_scaling.type == HN_ROPE_SCALING_NONE ? NULL
                                                                                             : &hp->local_rope_scaling,
                                         0, inv, &W->rope_attn_scale_local, error))
            return FALSE;
          if (!(W->inv_freq_local = vector_from_f32 (&L, "rope.inv_freq_local", inv, hp->local_rot_dims / 2, error)))
            return FALSE;
        }
    }
  if (hp->attn_temp_floor > 0)
    {
      /* Llama4TextAttention's temperature of the NoPE layers' queries at each position (f32 math as there) */
      gint64 np = hp->ctx_limit;
      g_autofree float *tt = g_new (float, np);
      for (gint64 p = 0; p < np; p++)
        tt[p] = log1pf (floorf (((float) p + 1.0f) / hp->attn_temp_floor)) * hp->attn_temp_scale + 1.0f;
      if (!(W->attn_temp = upload (&L, "attn.temperature", HN_DTYPE_F32, 2, (gint64[]) { np, 1 }, tt,
                                   sizeof (float) * (gsize) np, error)))
        return FALSE;
    }
  if (hp->alibi)
    {
      g_autofree float *sl = g_new (float, hp->n_head);
      hn_alibi_slopes (hp->n_head, 8.0f, sl);
      if (!(W->alibi_slopes = vector_from_f32 (&L, "alibi.slopes", sl, hp->n_head, error)))
        return FALSE;
    }
  return TRUE;
}
