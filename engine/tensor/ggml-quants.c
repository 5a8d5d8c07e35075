/* ggml tensor types: CPU reference (de)quantization. The arithmetic follows
 * ggml-quants.c operation by operation (same float expressions in the same
 * order, round-to-nearest-even halves) so that exported blocks are the bytes
 * llama-quantize writes and dequantized values are the values ggml computes. */
#include "tensor/ggml-quants.h"
#include "tensor/hn-tensor.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f

static const struct {
  const char *name;
  guint block, size;
} type_table[HN_GGML_N_TYPES] = {
  [HN_GGML_F32] = { "F32", 1, 4 },          [HN_GGML_F16] = { "F16", 1, 2 },
  [HN_GGML_Q4_0] = { "Q4_0", 32, 18 },      [HN_GGML_Q4_1] = { "Q4_1", 32, 20 },
  [HN_GGML_Q5_0] = { "Q5_0", 32, 22 },      [HN_GGML_Q5_1] = { "Q5_1", 32, 24 },
  [HN_GGML_Q8_0] = { "Q8_0", 32, 34 },      [HN_GGML_Q8_1] = { "Q8_1", 32, 36 },
  [HN_GGML_Q2_K] = { "Q2_K", 256, 84 },     [HN_GGML_Q3_K] = { "Q3_K", 256, 110 },
  [HN_GGML_Q4_K] = { "Q4_K", 256, 144 },    [HN_GGML_Q5_K] = { "Q5_K", 256, 176 },
  [HN_GGML_Q6_K] = { "Q6_K", 256, 210 },    [HN_GGML_Q8_K] = { "Q8_K", 256, 292 },
  [HN_GGML_IQ2_XXS] = { "IQ2_XXS", 256, 66 }, [HN_GGML_IQ2_XS] = { "IQ2_XS", 256, 74 },
  [HN_GGML_IQ3_XXS] = { "IQ3_XXS", 256, 98 }, [HN_GGML_IQ1_S] = { "IQ1_S", 256, 50 },
  [HN_GGML_IQ4_NL] = { "IQ4_NL", 32, 18 },  [HN_GGML_IQ3_S] = { "IQ3_S", 256, 110 },
  [HN_GGML_IQ2_S] = { "IQ2_S", 256, 82 },   [HN_GGML_IQ4_XS] = { "IQ4_XS", 256, 136 },
  [HN_GGML_I8] = { "I8", 1, 1 },            [HN_GGML_I16] = { "I16", 1, 2 },
  [HN_GGML_I32] = { "I32", 1, 4 },          [HN_GGML_I64] = { "I64", 1, 8 },
  [HN_GGML_F64] = { "F64", 1, 8 },          [HN_GGML_IQ1_M] = { "IQ1_M", 256, 56 },
  [HN_GGML_BF16] = { "BF16", 1, 2 },        [HN_GGML_TQ1_0] = { "TQ1_0", 256, 54 },
  [HN_GGML_TQ2_0] = { "TQ2_0", 256, 66 },   [HN_GGML_MXFP4] = { "MXFP4", 32, 17 },
};

gboolean
hn_ggml_type_is_known (guint32 code)
{
  return code < HN_GGML_N_TYPES && type_table[code].name != NULL;
}

const char *
hn_ggml_type_name (HnGgmlType t)
{
  return hn_ggml_type_is_known ((guint32) t) ? type_table[t].name : "?";
}

gboolean
hn_ggml_type_from_name (const char *name, HnGgmlType *out)
{
  for (guint i = 0; i < HN_GGML_N_TYPES; i++)
    if (type_table[i].name && g_ascii_strcasecmp (type_table[i].name, name) == 0)
      {
        *out = (HnGgmlType) i;
        return TRUE;
      }
  return FALSE;
}

guint
hn_ggml_block_size (HnGgmlType t)
{
  return hn_ggml_type_is_known ((guint32) t) ? type_table[t].block : 0;
}

guint
hn_ggml_type_size (HnGgmlType t)
{
  return hn_ggml_type_is_known ((guint32) t) ? type_table[t].size : 0;
}

gsize
hn_ggml_row_size (HnGgmlType t, gint64 n)
{
  guint b = hn_ggml_block_size (t);
  if (b == 0 || n < 0)
    return 0;
  return (gsize) (n / b) * hn_ggml_type_size (t);
}

/* ---------------------------------------------------------------- helpers */

static inline float
half (const guint8 *p)
{
  return hn_f16_to_f32 ((guint16) (p[0] | (p[1] << 8)));
}

static inline void
put_half (guint8 *p, float f)
{
  guint16 h = hn_f32_to_f16 (f);
  p[0] = (guint8) h;
  p[1] = (guint8) (h >> 8);
}

/* ggml's nearest_int: round to nearest even through the float mantissa. */
static inline int
nearest_int (float fval)
{
  float val = fval + 12582912.f;
  int i;
  memcpy (&i, &val, sizeof (int));
  return (i & 0x007fffff) - 0x00400000;
}

static inline void
get_scale_min_k4 (int j, const guint8 *q, guint8 *d, guint8 *m)
{
  if (j < 4)
    {
      *d = q[j] & 63;
      *m = q[j + 4] & 63;
    }
  else
    {
      *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* ---------------------------------------------------------------- dequantize */

static void
deq_q4_0 (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 18, y += 32)
    {
      const float d = half (x);
      for (int j = 0; j < 16; j++)
        {
          const int x0 = (x[2 + j] & 0x0F) - 8;
          const int x1 = (x[2 + j] >> 4) - 8;
          y[j] = x0 * d;
          y[j + 16] = x1 * d;
        }
    }
}

static void
deq_q4_1 (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 20, y += 32)
    {
      const float d = half (x), m = half (x + 2);
      for (int j = 0; j < 16; j++)
        {
          const int x0 = x[4 + j] & 0x0F;
          const int x1 = x[4 + j] >> 4;
          y[j] = x0 * d + m;
          y[j + 16] = x1 * d + m;
        }
    }
}

static void
deq_q5 (const guint8 *x, float *y, gint64 nb, gboolean with_min)
{
  const guint bs = with_min ? 24 : 22;
  for (gint64 i = 0; i < nb; i++, x += bs, y += 32)
    {
      const float d = half (x);
      const float m = with_min ? half (x + 2) : 0.0f;
      const guint8 *hp = x + (with_min ? 4 : 2);
      const guint32 qh = hp[0] | (hp[1] << 8) | (hp[2] << 16) | ((guint32) hp[3] << 24);
      const guint8 *qs = hp + 4;
      for (int j = 0; j < 16; j++)
        {
          const guint8 xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
          const guint8 xh_1 = ((qh >> (j + 12))) & 0x10;
          if (with_min)
            {
              const int x0 = (qs[j] & 0x0F) | xh_0;
              const int x1 = (qs[j] >> 4) | xh_1;
              y[j] = x0 * d + m;
              y[j + 16] = x1 * d + m;
            }
          else
            {
              const gint32 x0 = ((qs[j] & 0x0F) | xh_0) - 16;
              const gint32 x1 = ((qs[j] >> 4) | xh_1) - 16;
              y[j] = x0 * d;
              y[j + 16] = x1 * d;
            }
        }
    }
}

static void
deq_q8_0 (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 34, y += 32)
    {
      const float d = half (x);
      for (int j = 0; j < 32; j++)
        y[j] = (gint8) x[2 + j] * d;
    }
}

static void
deq_q4_k (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 144)
    {
      const float d = half (x), min = half (x + 2);
      const guint8 *scales = x + 4, *q = x + 16;
      int is = 0;
      guint8 sc, m;
      for (int j = 0; j < QK_K; j += 64)
        {
          get_scale_min_k4 (is + 0, scales, &sc, &m);
          const float d1 = d * sc, m1 = min * m;
          get_scale_min_k4 (is + 1, scales, &sc, &m);
          const float d2 = d * sc, m2 = min * m;
          for (int l = 0; l < 32; ++l)
            *y++ = d1 * (q[l] & 0xF) - m1;
          for (int l = 0; l < 32; ++l)
            *y++ = d2 * (q[l] >> 4) - m2;
          q += 32;
          is += 2;
        }
    }
}

static void
deq_q5_k (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 176)
    {
      const float d = half (x), min = half (x + 2);
      const guint8 *scales = x + 4, *qh = x + 16, *ql = x + 48;
      int is = 0;
      guint8 sc, m, u1 = 1, u2 = 2;
      for (int j = 0; j < QK_K; j += 64)
        {
          get_scale_min_k4 (is + 0, scales, &sc, &m);
          const float d1 = d * sc, m1 = min * m;
          get_scale_min_k4 (is + 1, scales, &sc, &m);
          const float d2 = d * sc, m2 = min * m;
          for (int l = 0; l < 32; ++l)
            *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
          for (int l = 0; l < 32; ++l)
            *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
          ql += 32;
          is += 2;
          u1 <<= 2;
          u2 <<= 2;
        }
    }
}

static void
deq_q6_k (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 210)
    {
      const float d = half (x + 208);
      const guint8 *ql = x, *qh = x + 128;
      const gint8 *sc = (const gint8 *) (x + 192);
      for (int n = 0; n < QK_K; n += 128)
        {
          for (int l = 0; l < 32; ++l)
            {
              int is = l / 16;
              const gint8 q1 = (gint8) ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
              const gint8 q2 = (gint8) ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
              const gint8 q3 = (gint8) ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
              const gint8 q4 = (gint8) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
              y[l + 0] = d * sc[is + 0] * q1;
              y[l + 32] = d * sc[is + 2] * q2;
              y[l + 64] = d * sc[is + 4] * q3;
              y[l + 96] = d * sc[is + 6] * q4;
            }
          y += 128;
          ql += 64;
          qh += 32;
          sc += 8;
        }
    }
}

static void
deq_q8_k (const guint8 *x, float *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 292, y += QK_K)
    {
      float d;
      memcpy (&d, x, 4);
      for (int j = 0; j < QK_K; j++)
        y[j] = d * (gint8) x[4 + j];
    }
}

gboolean
hn_ggml_can_dequantize (HnGgmlType t)
{
  switch (t)
    {
    case HN_GGML_F32: case HN_GGML_F16: case HN_GGML_BF16: case HN_GGML_F64:
    case HN_GGML_Q4_0: case HN_GGML_Q4_1: case HN_GGML_Q5_0: case HN_GGML_Q5_1: case HN_GGML_Q8_0:
    case HN_GGML_Q4_K: case HN_GGML_Q5_K: case HN_GGML_Q6_K: case HN_GGML_Q8_K:
      return TRUE;
    default:
      return FALSE;
    }
}

/* What hn_ggml_dequantize (quantize FALSE) and hn_ggml_quantize check first: a
 * type they convert, and a whole number of its blocks. */
static gboolean
check_conversion (HnGgmlType t, gint64 n, gboolean quantize, GError **error)
{
  if (quantize && !hn_ggml_can_quantize (t))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "no quantizer for tensor type %s (supported: F32 F16 BF16 "
                   "Q4_0 Q8_0 Q4_K Q6_K Q8_K)", hn_ggml_type_name (t));
      return FALSE;
    }
  if (!quantize && !hn_ggml_can_dequantize (t))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "tensor type %s cannot be dequantized here (supported: "
                   "F32 F16 BF16 F64 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K Q8_K)", hn_ggml_type_name (t));
      return FALSE;
    }
  const guint bs = hn_ggml_block_size (t);
  if (n < 0 || n % bs != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %" G_GINT64_FORMAT " elements is not a whole "
                   "number of %u-element blocks", hn_ggml_type_name (t), n, bs);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_ggml_dequantize (HnGgmlType t, const void *src, float *dst, gint64 n, GError **error)
{
  if (!check_conversion (t, n, FALSE, error))
    return FALSE;
  const guint bs = hn_ggml_block_size (t);
  const guint8 *x = src;
  const gint64 nb = n / bs;
  switch (t)
    {
    case HN_GGML_F32:
      memcpy (dst, src, (gsize) n * 4);
      break;
    case HN_GGML_F16:
      for (gint64 i = 0; i < n; i++)
        dst[i] = half (x + 2 * i);
      break;
    case HN_GGML_BF16:
      for (gint64 i = 0; i < n; i++)
        dst[i] = hn_bf16_to_f32 ((guint16) (x[2 * i] | (x[2 * i + 1] << 8)));
      break;
    case HN_GGML_F64:
      for (gint64 i = 0; i < n; i++)
        {
          double v;
          memcpy (&v, x + 8 * i, 8);
          dst[i] = (float) v;
        }
      break;
    case HN_GGML_Q4_0: deq_q4_0 (x, dst, nb); break;
    case HN_GGML_Q4_1: deq_q4_1 (x, dst, nb); break;
    case HN_GGML_Q5_0: deq_q5 (x, dst, nb, FALSE); break;
    case HN_GGML_Q5_1: deq_q5 (x, dst, nb, TRUE); break;
    case HN_GGML_Q8_0: deq_q8_0 (x, dst, nb); break;
    case HN_GGML_Q4_K: deq_q4_k (x, dst, nb); break;
    case HN_GGML_Q5_K: deq_q5_k (x, dst, nb); break;
    case HN_GGML_Q6_K: deq_q6_k (x, dst, nb); break;
    case HN_GGML_Q8_K: deq_q8_k (x, dst, nb); break;
    default:
      g_assert_not_reached ();
    }
  return TRUE;
}

/* ---------------------------------------------------------------- quantize */

static void
quant_q8_0 (const float *x, guint8 *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 32, y += 34)
    {
      float amax = 0.0f;
      for (int j = 0; j < 32; j++)
        amax = MAX (amax, fabsf (x[j]));
      const float d = amax / ((1 << 7) - 1);
      const float id = d ? 1.0f / d : 0.0f;
      put_half (y, d);
      for (int j = 0; j < 32; ++j)
        y[2 + j] = (guint8) (gint8) roundf (x[j] * id);
    }
}

static void
quant_q4_0 (const float *x, guint8 *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += 32, y += 18)
    {
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; j++)
        if (amax < fabsf (x[j]))
          {
            amax = fabsf (x[j]);
            max = x[j];
          }
      const float d = max / -8;
      const float id = d ? 1.0f / d : 0.0f;
      put_half (y, d);
      for (int j = 0; j < 16; ++j)
        {
          const float x0 = x[j] * id, x1 = x[16 + j] * id;
          const guint8 xi0 = MIN (15, (gint8) (x0 + 8.5f));
          const guint8 xi1 = MIN (15, (gint8) (x1 + 8.5f));
          y[2 + j] = xi0 | (guint8) (xi1 << 4);
        }
    }
}

/* ggml's make_qkx2_quants: a scale and a min for n values in [0, nmax],
 * searched over nstep candidate scales for the least weighted error. */
static float
make_qkx2_quants (int n, int nmax, const float *x, const float *weights, guint8 *L, float *the_min, guint8 *Laux,
                  float rmin, float rdelta, int nstep, gboolean use_mad)
{
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i)
    {
      if (x[i] < min)
        min = x[i];
      if (x[i] > max)
        max = x[i];
      float w = weights[i];
      sum_w += w;
      sum_x += w * x[i];
    }
  if (min > 0)
    min = 0;
  if (max == min)
    {
      for (int i = 0; i < n; ++i)
        L[i] = 0;
      *the_min = -min;
      return 0.f;
    }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i)
    {
      int l = nearest_int (iscale * (x[i] - min));
      L[i] = (guint8) MAX (0, MIN (nmax, l));
      float diff = scale * L[i] + min - x[i];
      diff = use_mad ? fabsf (diff) : diff * diff;
      best_error += weights[i] * diff;
    }
  if (nstep < 1)
    {
      *the_min = -min;
      return scale;
    }
  for (int is = 0; is <= nstep; ++is)
    {
      iscale = (rmin + rdelta * is + nmax) / (max - min);
      float sum_l = 0, sum_l2 = 0, sum_xl = 0;
      for (int i = 0; i < n; ++i)
        {
          int l = nearest_int (iscale * (x[i] - min));
          l = MAX (0, MIN (nmax, l));
          Laux[i] = (guint8) l;
          float w = weights[i];
          sum_l += w * l;
          sum_l2 += w * l * l;
          sum_xl += w * l * x[i];
        }
      float D = sum_w * sum_l2 - sum_l * sum_l;
      if (D > 0)
        {
          float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
          float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
          if (this_min > 0)
            {
              this_min = 0;
              this_scale = sum_xl / sum_l2;
            }
          float cur_error = 0;
          for (int i = 0; i < n; ++i)
            {
              float diff = this_scale * Laux[i] + this_min - x[i];
              diff = use_mad ? fabsf (diff) : diff * diff;
              cur_error += weights[i] * diff;
            }
          if (cur_error < best_error)
            {
              memcpy (L, Laux, (gsize) n);
              best_error = cur_error;
              scale = this_scale;
              min = this_min;
            }
        }
    }
  *the_min = -min;
  return scale;
}

/* ggml's make_qx_quants with rmse_type 1 and no weights (Q6_K's case):
 * symmetric levels in [-nmax, nmax), the scale refined over 18 tries. */
static float
make_qx_quants (int n, int nmax, const float *x, gint8 *L)
{
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    {
      float ax = fabsf (x[i]);
      if (ax > amax)
        {
          amax = ax;
          max = x[i];
        }
    }
  if (amax < GROUP_MAX_EPS)
    {
      for (int i = 0; i < n; ++i)
        L[i] = 0;
      return 0.f;
    }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i)
    {
      int l = nearest_int (iscale * x[i]);
      l = MAX (-nmax, MIN (nmax - 1, l));
      L[i] = (gint8) (l + nmax);
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is)
    {
      if (is == 0)
        continue;
      iscale = -(nmax + 0.1f * is) / max;
      sumlx = suml2 = 0;
      for (int i = 0; i < n; ++i)
        {
          int l = nearest_int (iscale * x[i]);
          l = MAX (-nmax, MIN (nmax - 1, l));
          float w = x[i] * x[i];
          sumlx += w * x[i] * l;
          suml2 += w * l * l;
        }
      if (suml2 > 0 && sumlx * sumlx > best * suml2)
        {
          for (int i = 0; i < n; ++i)
            {
              int l = nearest_int (iscale * x[i]);
              L[i] = (gint8) (nmax + MAX (-nmax, MIN (nmax - 1, l)));
            }
          scale = sumlx / suml2;
          best = scale * sumlx;
        }
    }
  return scale;
}

static void
quant_q4_k (const float *x, guint8 *y, gint64 nb)
{
  guint8 L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (gint64 i = 0; i < nb; i++, x += QK_K, y += 144)
    {
      guint8 *ysc = y + 4, *q = y + 16;
      float max_scale = 0, max_min = 0;
      for (int j = 0; j < QK_K / 32; ++j)
        {
          float sum_x2 = 0;
          for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
          float av_x = sqrtf (sum_x2 / 32);
          for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf (x[32 * j + l]);
          scales[j] = make_qkx2_quants (32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, FALSE);
          if (scales[j] > max_scale)
            max_scale = scales[j];
          if (mins[j] > max_min)
            max_min = mins[j];
        }
      float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
      float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
      memset (ysc, 0, 12);
      for (int j = 0; j < QK_K / 32; ++j)
        {
          guint8 ls = (guint8) nearest_int (inv_scale * scales[j]);
          guint8 lm = (guint8) nearest_int (inv_min * mins[j]);
          ls = MIN (63, ls);
          lm = MIN (63, lm);
          if (j < 4)
            {
              ysc[j] = ls;
              ysc[j + 4] = lm;
            }
          else
            {
              ysc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
              ysc[j - 4] |= ((ls >> 4) << 6);
              ysc[j - 0] |= ((lm >> 4) << 6);
            }
        }
      put_half (y, max_scale / 63.f);
      put_half (y + 2, max_min / 63.f);
      const float dd = half (y), dmin = half (y + 2);
      guint8 sc, m;
      for (int j = 0; j < QK_K / 32; ++j)
        {
          get_scale_min_k4 (j, ysc, &sc, &m);
          const float d = dd * sc;
          if (!d)
            continue;
          const float dm = dmin * m;
          for (int ii = 0; ii < 32; ++ii)
            {
              int l = nearest_int ((x[32 * j + ii] + dm) / d);
              L[32 * j + ii] = (guint8) MAX (0, MIN (15, l));
            }
        }
      for (int j = 0; j < QK_K; j += 64)
        {
          for (int l = 0; l < 32; ++l)
            q[l] = L[j + l] | (guint8) (L[j + l + 32] << 4);
          q += 32;
        }
    }
}

static void
quant_q6_k (const float *x, guint8 *y, gint64 nb)
{
  gint8 L[QK_K];
  float scales[QK_K / 16];
  for (gint64 i = 0; i < nb; i++, x += QK_K, y += 210)
    {
      guint8 *ql = y, *qh = y + 128;
      gint8 *ysc = (gint8 *) (y + 192);
      float max_scale = 0, max_abs_scale = 0;
      for (int ib = 0; ib < QK_K / 16; ++ib)
        {
          const float scale = make_qx_quants (16, 32, x + 16 * ib, L + 16 * ib);
          scales[ib] = scale;
          const float abs_scale = fabsf (scale);
          if (abs_scale > max_abs_scale)
            {
              max_abs_scale = abs_scale;
              max_scale = scale;
            }
        }
      if (max_abs_scale < GROUP_MAX_EPS)
        {
          memset (y, 0, 210);
          continue;
        }
      float iscale = -128.f / max_scale;
      put_half (y + 208, 1 / iscale);
      const float dd = half (y + 208);
      for (int ib = 0; ib < QK_K / 16; ++ib)
        ysc[ib] = (gint8) MIN (127, nearest_int (iscale * scales[ib]));
      for (int j = 0; j < QK_K / 16; ++j)
        {
          float d = dd * ysc[j];
          if (!d)
            continue;
          for (int ii = 0; ii < 16; ++ii)
            {
              int l = nearest_int (x[16 * j + ii] / d);
              l = MAX (-32, MIN (31, l));
              L[16 * j + ii] = (gint8) (l + 32);
            }
        }
      for (int j = 0; j < QK_K; j += 128)
        {
          for (int l = 0; l < 32; ++l)
            {
              const guint8 q1 = L[j + l + 0] & 0xF;
              const guint8 q2 = L[j + l + 32] & 0xF;
              const guint8 q3 = L[j + l + 64] & 0xF;
              const guint8 q4 = L[j + l + 96] & 0xF;
              ql[l + 0] = q1 | (guint8) (q3 << 4);
              ql[l + 32] = q2 | (guint8) (q4 << 4);
              qh[l] = (guint8) ((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4)
                                | ((L[j + l + 96] >> 4) << 6));
            }
          ql += 64;
          qh += 32;
        }
    }
}

/* ggml's quantize_row_q8_K_ref: the signed value of largest |x| maps to -127
 * (iscale = -127 / max, codes clamped to 127 above), d = 1 / iscale, bsums
 * the sums of each 16 codes; an all-zero block is zeros. */
static void
quant_q8_k (const float *x, guint8 *y, gint64 nb)
{
  for (gint64 i = 0; i < nb; i++, x += QK_K, y += 292)
    {
      float max = 0, amax = 0;
      for (int j = 0; j < QK_K; ++j)
        {
          const float ax = fabsf (x[j]);
          if (ax > amax)
            {
              amax = ax;
              max = x[j];
            }
        }
      if (!amax)
        {
          memset (y, 0, 292);
          continue;
        }
      const float iscale = -127.f / max;
      gint8 *qs = (gint8 *) (y + 4);
      for (int j = 0; j < QK_K; ++j)
        qs[j] = (gint8) MIN (127, nearest_int (iscale * x[j]));
      for (int j = 0; j < QK_K / 16; ++j)
        {
          int sum = 0;
          for (int ii = 0; ii < 16; ++ii)
            sum += qs[16 * j + ii];
          const gint16 s16 = (gint16) sum;
          memcpy (y + 260 + 2 * j, &s16, 2);
        }
      const float d = 1 / iscale;
      memcpy (y, &d, 4);
    }
}

gboolean
hn_ggml_can_quantize (HnGgmlType t)
{
  switch (t)
    {
    case HN_GGML_F32: case HN_GGML_F16: case HN_GGML_BF16:
    case HN_GGML_Q4_0: case HN_GGML_Q8_0: case HN_GGML_Q4_K: case HN_GGML_Q6_K: case HN_GGML_Q8_K:
      return TRUE;
    default:
      return FALSE;
    }
}

gboolean
hn_ggml_quantize (HnGgmlType t, const float *src, void *dst, gint64 n, GError **error)
{
  if (!check_conversion (t, n, TRUE, error))
    return FALSE;
  const guint bs = hn_ggml_block_size (t);
  guint8 *y = dst;
  switch (t)
    {
    case HN_GGML_F32:
      memcpy (dst, src, (gsize) n * 4);
      break;
    case HN_GGML_F16:
      for (gint64 i = 0; i < n; i++)
        put_half (y + 2 * i, src[i]);
      break;
    case HN_GGML_BF16:
      for (gint64 i = 0; i < n; i++)
        {
          guint16 h = hn_f32_to_bf16 (src[i]);
          y[2 * i] = (guint8) h;
          y[2 * i + 1] = (guint8) (h >> 8);
        }
      break;
    case HN_GGML_Q4_0: quant_q4_0 (src, y, n / bs); break;
    case HN_GGML_Q8_0: quant_q8_0 (src, y, n / bs); break;
    case HN_GGML_Q4_K: quant_q4_k (src, y, n / bs); break;
    case HN_GGML_Q6_K: quant_q6_k (src, y, n / bs); break;
    case HN_GGML_Q8_K: quant_q8_k (src, y, n / bs); break;
    default:
      g_assert_not_reached ();
    }
  return TRUE;
}
