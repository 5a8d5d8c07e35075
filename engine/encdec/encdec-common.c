/* Shared pieces of the encoder and encoder-decoder graphs (see encdec-private.h). */
#include "base/hn-error.h"
#include "encdec/encdec-private.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- loader */

void
hn_wl_init (HnWLoader *L, HnVkContext *ctx, const char *dir, HnSafetensors *st, GPtrArray *owned)
{
  *L = (HnWLoader) { ctx, dir, st, g_hash_table_new (g_str_hash, g_str_equal), owned, 0 };
}

void
hn_wl_clear (HnWLoader *L)
{
  g_clear_pointer (&L->used, g_hash_table_unref);
}

static const HnSafetensorInfo *
lookup (HnWLoader *L, const char *name)
{
  if (!L->pkg)
    return hn_safetensors_lookup (L->st, name);
  g_autofree char *pn = hn_arch_package_tensor_name (L->pkg->layout, name);
  return hn_safetensors_lookup (L->st, pn);
}

gboolean
hn_wl_has (HnWLoader *L, const char *name)
{
  return lookup (L, name) != NULL;
}

const HnSafetensorInfo *
hn_wl_find (HnWLoader *L, const char *name, gboolean required, GError **error)
{
  const HnSafetensorInfo *t = lookup (L, name);
  if (t)
    g_hash_table_add (L->used, (gpointer) t->name);
  else if (required)
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the checkpoint has no tensor %s", L->dir, name);
  return t;
}

static gboolean
dtype_of (const HnSafetensorInfo *t, HnDType *out, GError **error)
{
  switch (t->dtype)
    {
    case HN_ST_DTYPE_F32: *out = HN_DTYPE_F32; return TRUE;
    case HN_ST_DTYPE_F16: *out = HN_DTYPE_F16; return TRUE;
    case HN_ST_DTYPE_BF16: *out = HN_DTYPE_BF16; return TRUE;
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: tensor %s has dtype %s; only F32, F16 and BF16 weights are supported", t->file, t->name,
                   hn_st_dtype_name (t->dtype));
      return FALSE;
    }
}

static gboolean
shape_is (const HnSafetensorInfo *t, gint64 rows, gint64 cols, GError **error)
{
  if (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
    return TRUE;
  g_autoptr (GString) got = g_string_new ("[");
  for (guint i = 0; i < t->ndim; i++)
    g_string_append_printf (got, "%s%" G_GINT64_FORMAT, i ? ", " : "", t->shape[i]);
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
               "%s: tensor %s has shape %s], config.json implies [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", t->file,
               t->name, got->str, rows, cols);
  return FALSE;
}

static HnTensor *
upload (HnWLoader *L, const char *name, HnDType dt, int ndim, const gint64 *shape, const void *data, gsize nbytes,
        GError **error)
{
  HnTensor *t = hn_tensor_new_named (L->ctx, name, dt, ndim, shape, error);
  if (!t)
    return NULL;
  if (!hn_tensor_upload_raw (t, data, nbytes, error))
    {
      hn_tensor_unref (t);
      return NULL;
    }
  g_ptr_array_add (L->owned, t);
  L->bytes += nbytes;
  return t;
}

gboolean
hn_wl_matrix_rows (HnWLoader *L, const char *name, gint64 total_rows, gint64 row0, gint64 rows, gint64 cols,
                   HnTensor **out, GError **error)
{
  const HnSafetensorInfo *t = hn_wl_find (L, name, TRUE, error);
  HnDType dt;
  if (!t || !dtype_of (t, &dt, error) || !shape_is (t, total_rows, cols, error))
    return FALSE;
  gsize row_bytes = hn_st_dtype_size (t->dtype) * (gsize) cols;
  g_autofree void *copy = g_memdup2 ((const guint8 *) t->data + (gsize) row0 * row_bytes, (gsize) rows * row_bytes);
  *out = upload (L, name, dt, 2, (gint64[]) { rows, cols }, copy, (gsize) rows * row_bytes, error);
  return *out != NULL;
}

gboolean
hn_wl_matrix (HnWLoader *L, const char *name, gint64 rows, gint64 cols, gboolean required, HnTensor **out,
              GError **error)
{
  *out = NULL;
  if (!hn_safetensors_lookup (L->st, name) && !required)
    return TRUE;
  return hn_wl_matrix_rows (L, name, rows, 0, rows, cols, out, error);
}

float *
hn_wl_host_matrix (HnWLoader *L, const char *name, gint64 rows, gint64 cols, GError **error)
{
  const HnSafetensorInfo *t = hn_wl_find (L, name, TRUE, error);
  if (!t)
    return NULL;
  if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s should be [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
                   t->file, t->name, rows, cols);
      return NULL;
    }
  return hn_safetensor_info_dup_f32 (t, error);
}

gboolean
hn_wl_vector (HnWLoader *L, const char *name, gint64 n, gboolean required, HnTensor **out, GError **error)
{
  *out = NULL;
  const HnSafetensorInfo *t = hn_wl_find (L, name, required, error);
  if (!t)
    return !required;
  gboolean ok = (t->ndim == 1 && t->shape[0] == n) || (t->ndim == 2 && t->shape[0] == 1 && t->shape[1] == n);
  if (!ok)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s should hold %" G_GINT64_FORMAT " values (config.json)",
                   t->file, t->name, n);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *out = upload (L, name, HN_DTYPE_F32, 1, (gint64[]) { n }, f, sizeof (float) * (gsize) n, error);
  return *out != NULL;
}

gboolean
hn_wl_linear (HnWLoader *L, const char *pfx, const char *part, gint64 rows, gint64 cols, HnTensor **w, HnTensor **b,
              GError **error)
{
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, part);
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, part);
  return hn_wl_matrix (L, wn, rows, cols, TRUE, w, error) && (!b || hn_wl_vector (L, bn, rows, FALSE, b, error));
}

gboolean
hn_wl_norm (HnWLoader *L, const char *pfx, const char *part, gint64 n, HnTensor **w, HnTensor **b, GError **error)
{
  g_autofree char *wn = g_strdup_printf ("%s%s.weight", pfx, part);
  g_autofree char *bn = g_strdup_printf ("%s%s.bias", pfx, part);
  g_autofree char *gn = g_strdup_printf ("%s%s.gamma", pfx, part);
  if (!hn_safetensors_lookup (L->st, wn) && hn_safetensors_lookup (L->st, gn))
    {
      /* the old LayerNorm spelling (esm's layers): gamma / beta */
      g_autofree char *be = g_strdup_printf ("%s%s.beta", pfx, part);
      return hn_wl_vector (L, gn, n, TRUE, w, error) && (!b || hn_wl_vector (L, be, n, FALSE, b, error));
    }
  return hn_wl_vector (L, wn, n, TRUE, w, error) && (!b || hn_wl_vector (L, bn, n, FALSE, b, error));
}

HnTensor *
hn_wl_from_f32 (HnWLoader *L, const char *name, int ndim, const gint64 *shape, const float *data, GError **error)
{
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  return upload (L, name, HN_DTYPE_F32, ndim, shape, data, sizeof (float) * (gsize) n, error);
}

gboolean
hn_wl_check_all_used (HnWLoader *L, const char *model_type, GError **error)
{
  guint n = hn_safetensors_get_n_tensors (L->st), n_towers = 0;
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (L->st, i);
      if (g_hash_table_contains (L->used, t->name) || g_str_has_suffix (t->name, "position_ids"))
        continue; /* position_ids: a buffer some exporters save */
      g_autofree char *text = L->pkg ? hn_arch_package_text_name (L->pkg->layout, t->name) : NULL;
      if (L->pkg && !text)
        {
          n_towers++; /* the package's vision tower or projector: not run */
          continue;
        }
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: tensor %s is not part of the %s graph (an unsupported feature of this checkpoint)", t->file,
                   t->name, model_type);
      return FALSE;
    }
  if (n_towers)
    g_info ("%s: %s package: %u tensors of its non-text towers are not run", L->dir, L->pkg->package, n_towers);
  return TRUE;
}

HnModelConfig *
hn_encdec_config_load (const char *model_dir, gboolean seq2seq, const HnArchInfo **arch, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg || !(*arch = hn_arch_lookup (cfg->model_type, error)))
    return NULL;
  if (seq2seq ? !hn_arch_is_seq2seq (*arch) : !hn_arch_is_encoder (*arch))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is not an %s", cfg->path,
                   (*arch)->model_type, seq2seq ? "encoder-decoder" : "encoder");
      return NULL;
    }
  return g_steal_pointer (&cfg);
}

gboolean
hn_wl_load_all (HnVkContext *ctx, const char *model_dir, const HnArchInfo *arch, const HnModelConfig *cfg,
                GPtrArray *owned, HnWLoadFunc load, gpointer model, guint64 *bytes, GError **error)
{
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  if (!st)
    return FALSE;
  HnWLoader L;
  hn_wl_init (&L, ctx, model_dir, st, owned);
  /* a registered package of this text model keeps it under its own names (hn_arch_packages) */
  const HnArchPackage *pkg = cfg->text_config_resolved ? hn_arch_package_lookup (cfg->outer_model_type) : NULL;
  if (pkg && strcmp (pkg->text_model_type, arch->model_type) == 0)
    L.pkg = pkg;
  gboolean ok = load (model, &L, cfg, error) && hn_wl_check_all_used (&L, arch->model_type, error);
  *bytes = L.bytes;
  hn_wl_clear (&L);
  return ok;
}

/* ---------------------------------------------------------------- trained parameters */

void
hn_params_init (HnParamSet *ps)
{
  ps->params = g_ptr_array_new ();
  ps->grads = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  ps->m1 = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  ps->m2 = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  ps->grad = g_hash_table_new (NULL, NULL);
}

void
hn_params_clear (HnParamSet *ps)
{
  g_clear_pointer (&ps->params, g_ptr_array_unref);
  g_clear_pointer (&ps->grads, g_ptr_array_unref);
  g_clear_pointer (&ps->m1, g_ptr_array_unref);
  g_clear_pointer (&ps->m2, g_ptr_array_unref);
  g_clear_pointer (&ps->grad, g_hash_table_unref);
  g_clear_pointer (&ps->partials, hn_tensor_unref);
}

gboolean
hn_params_add (HnParamSet *ps, HnTensor *p, GError **error)
{
  if (p->dtype != HN_DTYPE_F32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training needs f32 weights; %s is %s", p->name,
                   hn_dtype_name (p->dtype));
      return FALSE;
    }
  HnTensor *t[3];
  for (int i = 0; i < 3; i++)
    if (!(t[i] = hn_tensor_new_named (p->ctx, i ? "adamw.moment" : "grad", HN_DTYPE_F32, p->ndim, p->shape, error)))
      {
        for (int j = 0; j < i; j++)
          hn_tensor_unref (t[j]);
        return FALSE;
      }
  g_ptr_array_add (ps->params, p);
  g_ptr_array_add (ps->grads, t[0]);
  g_ptr_array_add (ps->m1, t[1]);
  g_ptr_array_add (ps->m2, t[2]);
  g_hash_table_insert (ps->grad, p, t[0]);
  return TRUE;
}

HnTensor *
hn_params_grad (HnParamSet *ps, HnTensor *p)
{
  return p ? g_hash_table_lookup (ps->grad, p) : NULL;
}

gboolean
hn_params_zero (HnParamSet *ps, HnCmd *cmd, gboolean moments, GError **error)
{
  for (guint i = 0; i < ps->params->len; i++)
    {
      if (moments)
        CK (hn_op_fill (cmd, ps->m1->pdata[i], 0.0f, error) && hn_op_fill (cmd, ps->m2->pdata[i], 0.0f, error));
      else
        CK (hn_op_fill (cmd, ps->grads->pdata[i], 0.0f, error));
    }
  return TRUE;
}

gboolean
hn_params_adamw (HnParamSet *ps, HnCmd *cmd, const HnAdamwScalars *s, float clip, GError **error)
{
  for (guint i = 0; i < ps->params->len; i++)
    CK (hn_op_adamw (cmd, ps->params->pdata[i], ps->grads->pdata[i], ps->m1->pdata[i], ps->m2->pdata[i], s, clip,
                     error));
  return TRUE;
}

gboolean
hn_params_grad_norm (HnParamSet *ps, HnCmd *cmd, double *norm, GError **error)
{
  guint n = 0;
  for (guint i = 0; i < ps->grads->len; i++)
    n += hn_sumsq_n_partials (((HnTensor *) ps->grads->pdata[i])->n);
  if (!ps->partials &&
      !(ps->partials = hn_tensor_new_named (((HnTensor *) ps->params->pdata[0])->ctx, "grad.sumsq", HN_DTYPE_F32, 1, (gint64[]) { n }, error)))
    return FALSE;
  guint off = 0;
  for (guint i = 0; i < ps->grads->len; i++)
    {
      HnTensor *g = ps->grads->pdata[i];
      CK (hn_op_sumsq_partials (cmd, ps->partials, off, g, error));
      off += hn_sumsq_n_partials (g->n);
    }
  CK (hn_cmd_submit_wait (cmd, error));
  g_autofree float *parts = g_new (float, n);
  CK (hn_tensor_download_f32 (ps->partials, parts, n, error));
  double s = 0;
  for (guint i = 0; i < n; i++)
    s += parts[i];
  *norm = sqrt (s);
  return TRUE;
}

gboolean
hn_params_clip (HnParamSet *ps, HnCmd *cmd, double max_norm, double *norm, float *clip, GError **error)
{
  *clip = 1.0f;
  CK (hn_params_grad_norm (ps, cmd, norm, error));
  if (!isfinite (*norm))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "the gradient norm is not finite");
      return FALSE;
    }
  if (max_norm > 0)
    *clip = hn_clip_coef (*norm, max_norm);
  return TRUE;
}

/* ---------------------------------------------------------------- attention */

gboolean
hn_encdec_attend (HnCmd *cmd, HnScratch *sc, const HnAttendWork *w, HnTensor *out, HnTensor *q, HnTensor *k,
                  HnTensor *v, float alpha, HnTensor *bias, HnTensor *mask, gboolean causal, gint64 pos0,
                  GError **error)
{
  gint64 T = q->shape[0], H = q->shape[1], D = q->shape[2], S = k->shape[0];
  if (!bias)
    {
      HnAttentionParams ap = { 0 };
      ap.scale = alpha;
      ap.causal = causal;
      ap.pos0 = pos0;
      ap.n_kv = S;
      ap.mask = mask;
      return hn_op_attention (cmd, out, q, k, v, &ap, error);
    }
  /* per-head additive bias: scores [H, T, S] through batched matmuls */
  static const int swap01[] = { 1, 0, 2 };
  HnTensor *qh = hn_scratch_prefix (sc, w->qh, 3, (gint64[]) { H, T, D }, error);
  HnTensor *kh = qh ? hn_scratch_prefix (sc, w->kh, 3, (gint64[]) { H, S, D }, error) : NULL;
  HnTensor *vh = kh ? hn_scratch_prefix (sc, w->vh, 3, (gint64[]) { H, S, D }, error) : NULL;
  HnTensor *sc3 = vh ? hn_scratch_prefix (sc, w->scores, 3, (gint64[]) { H, T, S }, error) : NULL;
  HnTensor *oh = sc3 ? hn_scratch_prefix (sc, w->oh, 3, (gint64[]) { H, T, D }, error) : NULL;
  CK (oh);
  CK (hn_op_permute (cmd, qh, q, swap01, error));
  CK (hn_op_permute (cmd, kh, k, swap01, error));
  CK (hn_op_permute (cmd, vh, v, swap01, error));
  CK (hn_op_bmm (cmd, sc3, qh, kh, HN_MATMUL_TRANS_B, alpha, error));
  HnSoftmaxParams sp = { 0 };
  sp.causal = causal;
  sp.pos0 = pos0;
  sp.mask = bias;
  CK (hn_op_softmax (cmd, sc3, sc3, &sp, error));
  CK (hn_op_bmm (cmd, oh, sc3, vh, HN_MATMUL_DEFAULT, 1.0f, error));
  return hn_op_permute (cmd, out, oh, swap01, error);
}

int
hn_t5_relative_bucket (int rel, gboolean bidirectional, int num_buckets, int max_distance)
{
  int bucket = 0;
  if (bidirectional)
    {
      num_buckets /= 2;
      if (rel > 0)
        bucket += num_buckets;
      rel = ABS (rel);
    }
  else
    rel = rel < 0 ? -rel : 0;
  int max_exact = num_buckets / 2;
  if (rel < max_exact)
    return bucket + rel;
  /* f32 like torch: log(rel / max_exact) / log(max_distance / max_exact) * (num_buckets - max_exact) */
  float a = logf ((float) rel / (float) max_exact);
  float b = (float) log ((double) max_distance / (double) max_exact);
  int large = max_exact + (int) (a / b * (float) (num_buckets - max_exact));
  return bucket + MIN (large, num_buckets - 1);
}
