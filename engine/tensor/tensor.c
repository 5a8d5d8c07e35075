/* Tensors: shape bookkeeping, views and host transfers. */
#include "tensor/hn-tensor.h"
#include "base/hn-error.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

const char *
hn_dtype_name (HnDType dtype)
{
  switch (dtype)
    {
    case HN_DTYPE_F32: return "f32";
    case HN_DTYPE_F16: return "f16";
    case HN_DTYPE_BF16: return "bf16";
    case HN_DTYPE_I32: return "i32";
    case HN_DTYPE_U8: return "u8";
    case HN_DTYPE_I8: return "i8";
    case HN_DTYPE_NF4: return "nf4";
    case HN_DTYPE_NF4_DQ: return "nf4 (double-quantized)";
    case HN_DTYPE_Q8: return "int8 (per channel)";
    case HN_DTYPE_GGML_Q4_0: return "q4_0";
    case HN_DTYPE_GGML_Q4_1: return "q4_1";
    case HN_DTYPE_GGML_Q5_0: return "q5_0";
    case HN_DTYPE_GGML_Q5_1: return "q5_1";
    case HN_DTYPE_GGML_Q8_0: return "q8_0";
    case HN_DTYPE_GGML_Q4_K: return "q4_k";
    case HN_DTYPE_GGML_Q5_K: return "q5_k";
    case HN_DTYPE_GGML_Q6_K: return "q6_k";
    case HN_DTYPE_GGML_Q8_K: return "q8_k";
    default: return "?";
    }
}

gsize
hn_dtype_size (HnDType dtype)
{
  switch (dtype)
    {
    case HN_DTYPE_F32:
    case HN_DTYPE_I32: return 4;
    case HN_DTYPE_F16:
    case HN_DTYPE_BF16: return 2;
    case HN_DTYPE_U8:
    case HN_DTYPE_I8: return 1;
    default: return 0;
    }
}

gboolean
hn_dtype_from_string (const char *s, HnDType *out)
{
  static const struct { const char *name; HnDType dt; } map[] = {
    { "f32", HN_DTYPE_F32 }, { "float32", HN_DTYPE_F32 }, { "float", HN_DTYPE_F32 },
    { "f16", HN_DTYPE_F16 }, { "float16", HN_DTYPE_F16 }, { "half", HN_DTYPE_F16 },
    { "bf16", HN_DTYPE_BF16 }, { "bfloat16", HN_DTYPE_BF16 },
    { "i32", HN_DTYPE_I32 }, { "int32", HN_DTYPE_I32 },
    { "u8", HN_DTYPE_U8 }, { "uint8", HN_DTYPE_U8 },
    { "i8", HN_DTYPE_I8 }, { "int8", HN_DTYPE_I8 },
  };
  for (guint i = 0; s && i < G_N_ELEMENTS (map); i++)
    if (g_ascii_strcasecmp (s, map[i].name) == 0)
      {
        *out = map[i].dt;
        return TRUE;
      }
  return FALSE;
}

static gboolean
check_shape (const char *name, int ndim, const gint64 *shape, gint64 *n_out, GError **error)
{
  if (ndim < 1 || ndim > HN_MAX_DIMS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor %s: %d dims (1 to %d are supported)", name,
                   ndim, HN_MAX_DIMS);
      return FALSE;
    }
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    {
      /* Element indices are 32-bit in the shaders. */
      if (shape[i] <= 0 || shape[i] > G_MAXUINT32 || n > G_MAXUINT32 / shape[i])
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "tensor %s: dim %d is %" G_GINT64_FORMAT " (dims must be positive and the tensor below 2^32 elements)",
                       name, i, shape[i]);
          return FALSE;
        }
      n *= shape[i];
    }
  *n_out = n;
  return TRUE;
}

HnTensor *
hn_tensor_new_named (HnVkContext *ctx, const char *name, HnDType dtype, int ndim, const gint64 *shape, GError **error)
{
  if (!name)
    name = "(unnamed)";
  gint64 n;
  if (!check_shape (name, ndim, shape, &n, error))
    return NULL;
  if (hn_dtype_is_quant (dtype) && ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor %s: a %s tensor must be 2-D", name,
                   hn_dtype_name (dtype));
      return NULL;
    }
  if (hn_dtype_size (dtype) == 0 && !hn_dtype_is_quant (dtype))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor %s: unknown dtype %d", name, (int) dtype);
      return NULL;
    }
  g_autofree char *what = g_strdup_printf ("tensor %s", name);
  guint64 bytes = hn_dtype_is_quant (dtype) ? hn_quant_nbytes (dtype, shape[0], shape[1])
                                            : (guint64) n * hn_dtype_size (dtype);
  HnVkBuffer *buf = hn_vk_buffer_new (ctx, bytes, what, error);
  if (!buf)
    return NULL;
  HnTensor *t = g_new0 (HnTensor, 1);
  t->refcount = 1;
  t->ctx = hn_vk_context_ref (ctx);
  t->buf = buf;
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < HN_MAX_DIMS; i++)
    t->shape[i] = i < ndim ? shape[i] : 1;
  t->n = n;
  t->name = g_strdup (name);
  return t;
}

HnTensor *
hn_tensor_new_in_buffer (HnVkContext *ctx, HnVkBuffer *buf, guint64 offset, const char *name, HnDType dtype, int ndim,
                         const gint64 *shape, GError **error)
{
  if (!name)
    name = "(unnamed)";
  gint64 n;
  if (!check_shape (name, ndim, shape, &n, error))
    return NULL;
  if (hn_dtype_is_quant (dtype) || hn_dtype_size (dtype) == 0 || offset % 4 ||
      offset + (guint64) n * hn_dtype_size (dtype) > hn_vk_buffer_get_size (buf))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "tensor %s: %" G_GINT64_FORMAT " elements of %s do not fit its buffer from byte %" G_GUINT64_FORMAT,
                   name, n, hn_dtype_name (dtype), offset);
      return NULL;
    }
  HnTensor *t = g_new0 (HnTensor, 1);
  t->refcount = 1;
  t->ctx = hn_vk_context_ref (ctx);
  t->buf = hn_vk_buffer_ref (buf);
  t->offset = offset;
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < HN_MAX_DIMS; i++)
    t->shape[i] = i < ndim ? shape[i] : 1;
  t->n = n;
  t->name = g_strdup (name);
  return t;
}

HnTensor *
hn_tensor_new (HnVkContext *ctx, HnDType dtype, int ndim, const gint64 *shape, GError **error)
{
  return hn_tensor_new_named (ctx, NULL, dtype, ndim, shape, error);
}

HnTensor *
hn_tensor_new_1d (HnVkContext *ctx, HnDType dtype, gint64 d0, GError **error)
{
  return hn_tensor_new (ctx, dtype, 1, (gint64[]) { d0 }, error);
}

HnTensor *
hn_tensor_new_2d (HnVkContext *ctx, HnDType dtype, gint64 d0, gint64 d1, GError **error)
{
  return hn_tensor_new (ctx, dtype, 2, (gint64[]) { d0, d1 }, error);
}

HnTensor *
hn_tensor_new_3d (HnVkContext *ctx, HnDType dtype, gint64 d0, gint64 d1, gint64 d2, GError **error)
{
  return hn_tensor_new (ctx, dtype, 3, (gint64[]) { d0, d1, d2 }, error);
}

HnTensor *
hn_tensor_ref (HnTensor *t)
{
  g_atomic_int_inc (&t->refcount);
  return t;
}

void
hn_tensor_unref (HnTensor *t)
{
  if (!t || !g_atomic_int_dec_and_test (&t->refcount))
    return;
  hn_vk_buffer_unref (t->buf);
  hn_vk_context_unref (t->ctx);
  g_free (t->name);
  g_free (t);
}

void
hn_tensor_set_name (HnTensor *t, const char *name)
{
  g_free (t->name);
  t->name = g_strdup (name ? name : "(unnamed)");
}

static HnTensor *
view_new (HnTensor *t, guint64 offset, int ndim, const gint64 *shape, gint64 n, const char *suffix)
{
  HnTensor *v = g_new0 (HnTensor, 1);
  v->refcount = 1;
  v->ctx = hn_vk_context_ref (t->ctx);
  v->buf = hn_vk_buffer_ref (t->buf);
  v->offset = offset;
  v->dtype = t->dtype;
  v->ndim = ndim;
  for (int i = 0; i < HN_MAX_DIMS; i++)
    v->shape[i] = i < ndim ? shape[i] : 1;
  v->n = n;
  v->name = g_strconcat (t->name, suffix, NULL);
  return v;
}

HnTensor *
hn_tensor_view_rows (HnTensor *t, gint64 row0, gint64 n_rows, GError **error)
{
  if (hn_dtype_is_quant (t->dtype))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "tensor %s: views of a %s tensor are not supported", t->name,
                   hn_dtype_name (t->dtype));
      return NULL;
    }
  if (row0 < 0 || n_rows <= 0 || row0 + n_rows > t->shape[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "tensor %s: rows [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ") are outside its %" G_GINT64_FORMAT
                   " rows", t->name, row0, row0 + n_rows, t->shape[0]);
      return NULL;
    }
  gint64 row_elems = t->n / t->shape[0];
  gint64 shape[HN_MAX_DIMS];
  memcpy (shape, t->shape, sizeof shape);
  shape[0] = n_rows;
  g_autofree char *suffix = g_strdup_printf ("[%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT "]", row0, row0 + n_rows);
  return view_new (t, t->offset + (guint64) (row0 * row_elems) * hn_dtype_size (t->dtype), t->ndim, shape,
                   n_rows * row_elems, suffix);
}

HnTensor *
hn_tensor_reshape (HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  gint64 n;
  if (hn_dtype_is_quant (t->dtype))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "tensor %s: a %s tensor cannot be reshaped", t->name,
                   hn_dtype_name (t->dtype));
      return NULL;
    }
  if (!check_shape (t->name, ndim, shape, &n, error))
    return NULL;
  if (n != t->n)
    {
      g_autofree char *d = hn_tensor_describe (t);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "tensor %s %s cannot be reshaped to %" G_GINT64_FORMAT " elements", t->name, d, n);
      return NULL;
    }
  return view_new (t, t->offset, ndim, shape, n, "");
}

gint64
hn_tensor_cols (const HnTensor *t)
{
  return t->shape[t->ndim - 1];
}

gint64
hn_tensor_rows (const HnTensor *t)
{
  return t->n / hn_tensor_cols (t);
}

guint64
hn_tensor_nbytes (const HnTensor *t)
{
  if (hn_dtype_is_quant (t->dtype))
    return hn_quant_nbytes (t->dtype, t->shape[0], t->shape[1]);
  return (guint64) t->n * hn_dtype_size (t->dtype);
}

char *
hn_tensor_describe (const HnTensor *t)
{
  GString *s = g_string_new ("[");
  for (int i = 0; i < t->ndim; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "", t->shape[i]);
  g_string_append_printf (s, "] %s", hn_dtype_name (t->dtype));
  return g_string_free (s, FALSE);
}

gboolean
hn_tensor_same_shape (const HnTensor *a, const HnTensor *b)
{
  if (a->ndim != b->ndim)
    return FALSE;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i])
      return FALSE;
  return TRUE;
}

/* ---------------------------------------------------------------- conversions */

guint16
hn_f32_to_bf16 (float f)
{
  guint32 u;
  memcpy (&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (guint16) ((u >> 16) | 0x40u);
  return (guint16) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float
hn_bf16_to_f32 (guint16 h)
{
  guint32 u = (guint32) h << 16;
  float f;
  memcpy (&f, &u, 4);
  return f;
}

guint16
hn_f32_to_f16 (float f)
{
  guint32 x;
  memcpy (&x, &f, 4);
  guint32 sign = (x >> 16) & 0x8000u;
  guint32 ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u)
    return (guint16) (sign | 0x7e00u); /* NaN */
  if (ax >= 0x477ff000u)
    return (guint16) (sign | 0x7c00u); /* overflow (>= 65520 rounds to inf) */
  if (ax < 0x38800000u)
    {
      /* subnormal or zero: value * 2^24 rounded to nearest even */
      if (ax < 0x33000000u)
        return (guint16) sign;
      guint32 e = ax >> 23;
      guint32 m = (ax & 0x7fffffu) | 0x800000u;
      guint32 shift = 126 - e; /* value * 2^24 = m * 2^(e - 126) */
      guint32 r = m >> shift;
      guint32 rem = m & ((1u << shift) - 1);
      guint32 half = 1u << (shift - 1);
      if (rem > half || (rem == half && (r & 1u)))
        r++;
      return (guint16) (sign | r);
    }
  guint32 r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
  guint32 h = r >> 13;
  guint32 rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    h++;
  return (guint16) (sign | h);
}

float
hn_f16_to_f32 (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000u) << 16;
  guint32 e = (h >> 10) & 0x1fu;
  guint32 m = h & 0x3ffu;
  guint32 u;
  if (e == 0)
    {
      if (m == 0)
        u = sign;
      else
        {
          float f = ldexpf ((float) m, -24);
          memcpy (&u, &f, 4);
          u |= sign;
        }
    }
  else if (e == 31)
    u = sign | 0x7f800000u | (m << 13);
  else
    u = sign | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy (&f, &u, 4);
  return f;
}

/* ---------------------------------------------------------------- transfers */

static gboolean
check_count (HnTensor *t, gsize n, const char *what, GError **error)
{
  if ((gint64) n != t->n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s of tensor %s: %" G_GSIZE_FORMAT " elements given, the tensor has %" G_GINT64_FORMAT, what,
                   t->name, n, t->n);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_tensor_upload_raw (HnTensor *t, const void *data, gsize n_bytes, GError **error)
{
  if (n_bytes != hn_tensor_nbytes (t))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "upload to tensor %s: %" G_GSIZE_FORMAT " bytes given, it holds %" G_GUINT64_FORMAT, t->name,
                   n_bytes, hn_tensor_nbytes (t));
      return FALSE;
    }
  return hn_vk_buffer_upload (t->buf, t->offset, data, n_bytes, error);
}

gboolean
hn_tensor_download_raw (HnTensor *t, void *data, gsize n_bytes, GError **error)
{
  if (n_bytes != hn_tensor_nbytes (t))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "download of tensor %s: %" G_GSIZE_FORMAT " bytes asked, it holds %" G_GUINT64_FORMAT, t->name,
                   n_bytes, hn_tensor_nbytes (t));
      return FALSE;
    }
  return hn_vk_buffer_download (t->buf, t->offset, data, n_bytes, error);
}

gboolean
hn_tensor_upload_f32 (HnTensor *t, const float *data, gsize n, GError **error)
{
  if (!check_count (t, n, "upload", error))
    return FALSE;
  switch (t->dtype)
    {
    case HN_DTYPE_F32:
      return hn_tensor_upload_raw (t, data, n * 4, error);
    case HN_DTYPE_F16:
    case HN_DTYPE_BF16:
      {
        g_autofree guint16 *h = g_new (guint16, n);
        for (gsize i = 0; i < n; i++)
          h[i] = t->dtype == HN_DTYPE_F16 ? hn_f32_to_f16 (data[i]) : hn_f32_to_bf16 (data[i]);
        return hn_tensor_upload_raw (t, h, n * 2, error);
      }
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "upload of f32 values to %s tensor %s is not supported",
                   hn_dtype_name (t->dtype), t->name);
      return FALSE;
    }
}

gboolean
hn_tensor_download_f32 (HnTensor *t, float *data, gsize n, GError **error)
{
  if (!check_count (t, n, "download", error))
    return FALSE;
  switch (t->dtype)
    {
    case HN_DTYPE_F32:
      return hn_tensor_download_raw (t, data, n * 4, error);
    case HN_DTYPE_F16:
    case HN_DTYPE_BF16:
      {
        g_autofree guint16 *h = g_new (guint16, n);
        if (!hn_tensor_download_raw (t, h, n * 2, error))
          return FALSE;
        for (gsize i = 0; i < n; i++)
          data[i] = t->dtype == HN_DTYPE_F16 ? hn_f16_to_f32 (h[i]) : hn_bf16_to_f32 (h[i]);
        return TRUE;
      }
    case HN_DTYPE_I32:
      {
        g_autofree gint32 *v = g_new (gint32, n);
        if (!hn_tensor_download_raw (t, v, n * 4, error))
          return FALSE;
        for (gsize i = 0; i < n; i++)
          data[i] = (float) v[i];
        return TRUE;
      }
    case HN_DTYPE_U8:
    case HN_DTYPE_I8:
      {
        g_autofree guint8 *v = g_new (guint8, n);
        if (!hn_tensor_download_raw (t, v, n, error))
          return FALSE;
        for (gsize i = 0; i < n; i++)
          data[i] = t->dtype == HN_DTYPE_U8 ? (float) v[i] : (float) (gint8) v[i];
        return TRUE;
      }
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "download of %s tensor %s as f32 is not supported",
                   hn_dtype_name (t->dtype), t->name);
      return FALSE;
    }
}

gboolean
hn_tensor_upload_i32 (HnTensor *t, const gint32 *data, gsize n, GError **error)
{
  if (!check_count (t, n, "upload", error))
    return FALSE;
  if (t->dtype != HN_DTYPE_I32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "upload of i32 values to %s tensor %s",
                   hn_dtype_name (t->dtype), t->name);
      return FALSE;
    }
  return hn_tensor_upload_raw (t, data, n * 4, error);
}

gboolean
hn_tensor_download_i32 (HnTensor *t, gint32 *data, gsize n, GError **error)
{
  if (!check_count (t, n, "download", error))
    return FALSE;
  if (t->dtype != HN_DTYPE_I32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "download of %s tensor %s as i32",
                   hn_dtype_name (t->dtype), t->name);
      return FALSE;
    }
  return hn_tensor_download_raw (t, data, n * 4, error);
}
