/* Packing, unpacking and the CPU reference of quantized weights (quant.h). */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#include "base/hn-error.h"
#include "tensor/ggml-quants.h"

const float hn_nf4_code[16] = {
  -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
  -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
  0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

static int
cmp_float (const void *a, const void *b)
{
  float x = *(const float *) a, y = *(const float *) b;
  return (x > y) - (x < y);
}

void
hn_quant_dynamic_map (float out[256])
{
  /* 7 exponent bits: for i = 0..6, 2^i means of linspace(0.1, 1, 2^i + 1)
   * scaled by 10^(i - 6), both signs; then 0 and 1 */
  int k = 0;
  for (int i = 0; i < 7; i++)
    {
      int n = (1 << i) + 1;
      double step = 0.9 / (n - 1), scale = pow (10.0, i - 6);
      for (int j = 0; j + 1 < n; j++)
        {
          float lo = (float) (0.1 + step * j), hi = (float) (0.1 + step * (j + 1));
          float mean = (lo + hi) / 2.0f;
          out[k++] = (float) (scale * mean);
          out[k++] = (float) (-scale * mean);
        }
    }
  out[k++] = 0.0f;
  out[k++] = 1.0f;
  g_assert (k == 256);
  qsort (out, 256, sizeof (float), cmp_float);
}

gboolean
hn_dtype_is_quant (HnDType dt)
{
  return dt == HN_DTYPE_NF4 || dt == HN_DTYPE_NF4_DQ || dt == HN_DTYPE_Q8 || hn_dtype_is_ggml (dt);
}

static const struct {
  HnDType dt;
  HnGgmlType g;
} ggml_map[] = {
  { HN_DTYPE_GGML_Q4_0, HN_GGML_Q4_0 }, { HN_DTYPE_GGML_Q4_1, HN_GGML_Q4_1 }, { HN_DTYPE_GGML_Q5_0, HN_GGML_Q5_0 },
  { HN_DTYPE_GGML_Q5_1, HN_GGML_Q5_1 }, { HN_DTYPE_GGML_Q8_0, HN_GGML_Q8_0 }, { HN_DTYPE_GGML_Q4_K, HN_GGML_Q4_K },
  { HN_DTYPE_GGML_Q5_K, HN_GGML_Q5_K }, { HN_DTYPE_GGML_Q6_K, HN_GGML_Q6_K },
  { HN_DTYPE_GGML_Q8_K, HN_GGML_Q8_K },
};

gboolean
hn_dtype_is_ggml (HnDType dt)
{
  return dt >= HN_DTYPE_GGML_Q4_0 && dt <= HN_DTYPE_GGML_Q8_K;
}

guint32
hn_dtype_ggml_type (HnDType dt)
{
  for (guint i = 0; i < G_N_ELEMENTS (ggml_map); i++)
    if (ggml_map[i].dt == dt)
      return ggml_map[i].g;
  g_return_val_if_reached (HN_GGML_F32);
}

gboolean
hn_dtype_from_ggml_type (guint32 ggml_type, HnDType *out)
{
  for (guint i = 0; i < G_N_ELEMENTS (ggml_map); i++)
    if ((guint32) ggml_map[i].g == ggml_type)
      {
        *out = ggml_map[i].dt;
        return TRUE;
      }
  return FALSE;
}

gboolean
hn_quant_shape_ok (HnDType dt, gint64 cols)
{
  if (!hn_dtype_is_ggml (dt))
    return hn_dtype_is_quant (dt);
  return cols > 0 && cols % hn_ggml_block_size (hn_dtype_ggml_type (dt)) == 0;
}

gboolean
hn_quant_dtype_from_string (const char *s, gboolean double_quant, HnDType *out, GError **error)
{
  if (!s || g_str_equal (s, "none"))
    *out = HN_DTYPE_F32; /* no quantization */
  else if (g_str_equal (s, "nf4"))
    *out = double_quant ? HN_DTYPE_NF4_DQ : HN_DTYPE_NF4;
  else if (g_str_equal (s, "int8"))
    *out = HN_DTYPE_Q8;
  else if (g_str_equal (s, "q4_k"))
    *out = HN_DTYPE_GGML_Q4_K; /* a GGUF's ggml blocks stay as they are; other Linear weights are packed so */
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--quantization %s: use nf4, int8, q4_k or none", s);
      return FALSE;
    }
  if (double_quant && *out != HN_DTYPE_NF4_DQ)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--double-quant quantizes NF4 block scales: it needs --quantization nf4");
      return FALSE;
    }
  return TRUE;
}

const char *
hn_quant_dtype_name (HnDType dt)
{
  return dt == HN_DTYPE_NF4 ? "nf4" : dt == HN_DTYPE_NF4_DQ ? "nf4-dq" : dt == HN_DTYPE_Q8 ? "int8"
         : dt == HN_DTYPE_GGML_Q4_K ? "q4_k" : "none";
}

static guint64
words (guint64 bytes)
{
  return (bytes + 3) / 4;
}

void
hn_quant_layout (HnDType dt, gint64 rows, gint64 cols, HnQuantLayout *L)
{
  guint64 n = (guint64) rows * (guint64) cols, nb = (n + HN_NF4_BLOCK - 1) / HN_NF4_BLOCK;
  memset (L, 0, sizeof *L);
  if (hn_dtype_is_ggml (dt))
    return; /* rows of blocks: no sections */
  if (dt == HN_DTYPE_Q8)
    {
      L->scale = words (n);
      L->scale2 = L->offset = L->table = L->scale + (guint64) rows;
      return;
    }
  L->scale = words ((n + 1) / 2);
  if (dt == HN_DTYPE_NF4)
    {
      L->scale2 = L->offset = L->table = L->scale + nb;
      return;
    }
  L->scale2 = L->scale + words (nb);
  L->offset = L->scale2 + (nb + HN_NF4_DQ_BLOCK - 1) / HN_NF4_DQ_BLOCK;
  L->table = L->offset + 1;
}

guint64
hn_quant_nbytes (HnDType dt, gint64 rows, gint64 cols)
{
  if (hn_dtype_is_ggml (dt))
    return words ((guint64) rows * hn_ggml_row_size (hn_dtype_ggml_type (dt), cols)) * 4;
  HnQuantLayout L;
  hn_quant_layout (dt, rows, cols, &L);
  return 4 * (L.table + (dt == HN_DTYPE_NF4_DQ ? 256 : 0));
}

/* Elements [i0, i0 + m) of src as f32 (bf16 inline: the per-element call
 * was most of a Llama-3-8B shape's packing time). */
static inline void
src_block (const void *src, HnDType dt, guint64 i0, guint64 m, float *v)
{
  if (dt == HN_DTYPE_BF16)
    {
      const guint16 *h = (const guint16 *) src + i0;
      for (guint64 j = 0; j < m; j++)
        {
          guint32 u = (guint32) h[j] << 16;
          memcpy (&v[j], &u, 4);
        }
    }
  else if (dt == HN_DTYPE_F16)
    for (guint64 j = 0; j < m; j++)
      v[j] = hn_f16_to_f32 (((const guint16 *) src)[i0 + j]);
  else
    memcpy (v, (const float *) src + i0, m * sizeof (float));
}

/* The 15 midpoints between consecutive NF4 values, as bitsandbytes' decision tree compares them. */
static void
nf4_midpoints (float mid[15])
{
  for (int i = 0; i < 15; i++)
    mid[i] = (hn_nf4_code[i] + hn_nf4_code[i + 1]) / 2.0f;
}

/* Index of the nearest NF4 value: the count of midpoints below x (a binary
 * search of the sorted midpoints; a NaN counts none). */
static inline guint8
nf4_nearest (const float mid[15], float x)
{
  guint c = x > mid[7] ? 8 : 0;
  c += x > mid[c + 3] ? 4 : 0;
  c += x > mid[c + 1] ? 2 : 0;
  c += x > mid[c] ? 1 : 0;
  return (guint8) c;
}

static guint8
table_nearest (const float *table, float x)
{
  int best = 0;
  float bd = fabsf (x - table[0]);
  for (int i = 1; i < 256; i++)
    if (fabsf (x - table[i]) < bd)
      bd = fabsf (x - table[i]), best = i;
  return (guint8) best;
}

static float *
section (guint8 *base, guint64 word)
{
  return (float *) (base + 4 * word);
}

/* One thread's share of hn_quant_pack: Q8 rows [lo, hi) or NF4 blocks [lo, hi). */
typedef struct {
  HnDType dt, src_dt;
  const void *src;
  gint64 rows, cols;
  guint8 *out;
  float *absmax;
  guint64 lo, hi;
} PackPart;

static gpointer
pack_part (gpointer data)
{
  const PackPart *P = data;
  const void *src = P->src;
  HnDType src_dt = P->src_dt;
  guint8 *out = P->out;
  if (hn_dtype_is_ggml (P->dt))
    {
      /* rows [lo, hi) with ggml's reference quantizer */
      HnGgmlType g = hn_dtype_ggml_type (P->dt);
      gsize rs = hn_ggml_row_size (g, P->cols);
      g_autofree float *row = g_new (float, MAX (P->cols, 1));
      for (gint64 r = (gint64) P->lo; r < (gint64) P->hi; r++)
        {
          src_block (src, src_dt, (guint64) r * P->cols, (guint64) P->cols, row);
          g_autoptr (GError) error = NULL;
          if (!hn_ggml_quantize (g, row, out + (gsize) r * rs, P->cols, &error))
            g_error ("hn_quant_pack: %s", error->message); /* callers check hn_ggml_can_quantize */
        }
      return NULL;
    }
  if (P->dt == HN_DTYPE_Q8)
    {
      HnQuantLayout L;
      hn_quant_layout (P->dt, P->rows, P->cols, &L);
      float *scale = section (out, L.scale);
      gint64 cols = P->cols;
      g_autofree float *v = g_new (float, MAX (cols, 1));
      for (gint64 r = (gint64) P->lo; r < (gint64) P->hi; r++)
        {
          src_block (src, src_dt, (guint64) r * cols, (guint64) cols, v);
          float amax = 0;
          for (gint64 c = 0; c < cols; c++)
            amax = fmaxf (amax, fabsf (v[c]));
          scale[r] = amax / 127.0f;
          gint8 *q = (gint8 *) out + (guint64) r * cols;
          for (gint64 c = 0; c < cols; c++)
            {
              float x = amax > 0 ? rintf (v[c] * (127.0f / amax)) : 0.0f;
              q[c] = (gint8) CLAMP (x, -127.0f, 127.0f);
            }
        }
      return NULL;
    }
  guint64 n = (guint64) P->rows * (guint64) P->cols;
  float mid[15], v[HN_NF4_BLOCK];
  nf4_midpoints (mid);
  for (guint64 b = P->lo; b < P->hi; b++)
    {
      guint64 i0 = b * HN_NF4_BLOCK, m = MIN (n - i0, (guint64) HN_NF4_BLOCK);
      src_block (src, src_dt, i0, m, v);
      float amax = 0;
      for (guint64 j = 0; j < m; j++)
        amax = fmaxf (amax, fabsf (v[j]));
      P->absmax[b] = amax;
      float inv = amax > 0 ? 1.0f / amax : 0.0f; /* an all-zero block: code 7 (0.0) */
      guint8 *q = out + i0 / 2; /* a block starts on a byte: element 2i in the high nibble */
      for (guint64 j = 0; j + 1 < m; j += 2)
        q[j / 2] = (guint8) (nf4_nearest (mid, v[j] * inv) << 4 | nf4_nearest (mid, v[j + 1] * inv));
      if (m & 1)
        q[m / 2] = (guint8) (nf4_nearest (mid, v[m - 1] * inv) << 4);
    }
  return NULL;
}

/* Runs pack_part over [0, total) in up to one thread per processor (a
 * Llama-3-8B shape is 7.5 G weights: about a minute on one core). Parts
 * split at whole NF4 blocks (32 bytes of codes), so they share no byte. */
static void
pack_parallel (PackPart *proto, guint64 total, guint64 elems_per_unit)
{
  guint nt = (guint) MIN ((guint64) g_get_num_processors (), 32);
  if (total * elems_per_unit < ((guint64) 1 << 20) || nt < 2)
    nt = 1;
  PackPart parts[32];
  GThread *th[32] = { NULL };
  guint64 per = (total + nt - 1) / nt;
  per += per & 1;
  for (guint t = 0; t < nt; t++)
    {
      parts[t] = *proto;
      parts[t].lo = MIN (total, t * per);
      parts[t].hi = MIN (total, (t + 1) * per);
      if (t > 0)
        th[t] = g_thread_try_new ("hn-quant", pack_part, &parts[t], NULL);
    }
  pack_part (&parts[0]);
  for (guint t = 1; t < nt; t++)
    {
      if (th[t])
        g_thread_join (th[t]);
      else
        pack_part (&parts[t]);
    }
}

void
hn_quant_pack (HnDType dt, const void *src, HnDType src_dt, gint64 rows, gint64 cols, guint8 *out)
{
  guint64 n = (guint64) rows * (guint64) cols;
  HnQuantLayout L;
  hn_quant_layout (dt, rows, cols, &L);
  memset (out, 0, hn_quant_nbytes (dt, rows, cols));
  PackPart proto = { dt, src_dt, src, rows, cols, out, NULL, 0, 0 };
  if (hn_dtype_is_ggml (dt) || dt == HN_DTYPE_Q8)
    {
      pack_parallel (&proto, (guint64) rows, (guint64) cols);
      return;
    }
  guint64 nb = (n + HN_NF4_BLOCK - 1) / HN_NF4_BLOCK;
  g_autofree float *absmax = g_new (float, nb);
  proto.absmax = absmax;
  pack_parallel (&proto, nb, HN_NF4_BLOCK);
  if (dt == HN_DTYPE_NF4)
    {
      memcpy (section (out, L.scale), absmax, nb * sizeof (float));
      return;
    }
  /* double quantization: absmax - mean, 8-bit in blocks of 256 */
  double sum = 0;
  for (guint64 b = 0; b < nb; b++)
    sum += absmax[b];
  float offset = (float) (sum / (double) nb);
  float *table = section (out, L.table), *absmax2 = section (out, L.scale2);
  hn_quant_dynamic_map (table);
  *section (out, L.offset) = offset;
  guint8 *qabs = out + 4 * L.scale;
  for (guint64 b2 = 0; b2 * HN_NF4_DQ_BLOCK < nb; b2++)
    {
      guint64 j0 = b2 * HN_NF4_DQ_BLOCK, j1 = MIN (nb, j0 + HN_NF4_DQ_BLOCK);
      float amax = 0;
      for (guint64 j = j0; j < j1; j++)
        amax = fmaxf (amax, fabsf (absmax[j] - offset));
      absmax2[b2] = amax;
      float inv = amax > 0 ? 1.0f / amax : 0.0f;
      for (guint64 j = j0; j < j1; j++)
        qabs[j] = table_nearest (table, (absmax[j] - offset) * inv);
    }
}

float
hn_quant_get (HnDType dt, const guint8 *q, gint64 rows, gint64 cols, gint64 idx)
{
  HnQuantLayout L;
  hn_quant_layout (dt, rows, cols, &L);
  const float *f = (const float *) q;
  if (hn_dtype_is_ggml (dt))
    {
      HnGgmlType g = hn_dtype_ggml_type (dt);
      guint bs = hn_ggml_block_size (g);
      gint64 r = idx / cols, c = idx % cols;
      float v[256];
      hn_ggml_dequantize (g, q + (gsize) r * hn_ggml_row_size (g, cols) + (gsize) (c / bs) * hn_ggml_type_size (g), v, bs,
                          NULL);
      return v[c % bs];
    }
  if (dt == HN_DTYPE_Q8)
    return (float) ((const gint8 *) q)[idx] * f[L.scale + (guint64) (idx / cols)];
  guint8 byte = q[idx / 2];
  float code = hn_nf4_code[(idx & 1) ? byte & 15 : byte >> 4];
  guint64 b = (guint64) idx / HN_NF4_BLOCK;
  float absmax;
  if (dt == HN_DTYPE_NF4)
    absmax = f[L.scale + b];
  else
    absmax = f[L.table + q[4 * L.scale + b]] * f[L.scale2 + b / HN_NF4_DQ_BLOCK] + f[L.offset];
  return code * absmax;
}

void
hn_quant_unpack_rows (HnDType dt, const guint8 *q, gint64 rows, gint64 cols, gint64 row0, gint64 n_rows, float *out)
{
  if (hn_dtype_is_ggml (dt))
    {
      HnGgmlType g = hn_dtype_ggml_type (dt);
      gsize rs = hn_ggml_row_size (g, cols);
      for (gint64 r = 0; r < n_rows; r++)
        hn_ggml_dequantize (g, q + (gsize) (row0 + r) * rs, out + r * cols, cols, NULL);
      return;
    }
  for (gint64 r = 0; r < n_rows; r++)
    for (gint64 c = 0; c < cols; c++)
      out[r * cols + c] = hn_quant_get (dt, q, rows, cols, (row0 + r) * cols + c);
}

HnTensor *
hn_tensor_new_quant (HnVkContext *ctx, const char *name, HnDType dt, gint64 rows, gint64 cols, const guint8 *packed,
                     GError **error)
{
  HnTensor *t = hn_tensor_new_named (ctx, name, dt, 2, (gint64[]) { rows, cols }, error);
  if (t && !hn_tensor_upload_raw (t, packed, hn_quant_nbytes (dt, rows, cols), error))
    g_clear_pointer (&t, hn_tensor_unref);
  return t;
}

void
hn_cpu_matmul_quant (float *y, const float *x, HnDType dt, const guint8 *w, const float *bias, gint64 M, gint64 N,
                     gint64 K)
{
  g_autofree float *row = g_new (float, K);
  for (gint64 n = 0; n < N; n++)
    {
      hn_quant_unpack_rows (dt, w, N, K, n, 1, row);
      for (gint64 m = 0; m < M; m++)
        {
          double s = bias ? bias[n] : 0.0;
          for (gint64 k = 0; k < K; k++)
            s += (double) x[m * K + k] * row[k];
          y[m * N + n] = (float) s;
        }
    }
}

void
hn_cpu_matmul_quant_dx (float *dx, const float *dy, HnDType dt, const guint8 *w, gint64 M, gint64 N, gint64 K)
{
  g_autofree double *acc = g_new0 (double, M * K);
  g_autofree float *row = g_new (float, K);
  for (gint64 n = 0; n < N; n++)
    {
      hn_quant_unpack_rows (dt, w, N, K, n, 1, row);
      for (gint64 m = 0; m < M; m++)
        for (gint64 k = 0; k < K; k++)
          acc[m * K + k] += (double) dy[m * N + n] * row[k];
    }
  for (gint64 i = 0; i < M * K; i++)
    dx[i] = (float) acc[i];
}
