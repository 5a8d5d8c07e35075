#include "ops-test-common.h"

#include <math.h>

static HnVkContext *test_ctx;

HnVkContext *
hn_test_ctx (void)
{
  if (!test_ctx)
    {
      g_autoptr(GError) error = NULL;
      test_ctx = hn_vk_context_new (-1, &error);
      g_assert_no_error (error);
      g_assert_nonnull (test_ctx);
    }
  return test_ctx;
}

void
hn_test_free_ctx (void)
{
  g_clear_pointer (&test_ctx, hn_vk_context_unref);
}

float *
hn_test_random (gint64 n, double lo, double hi)
{
  float *v = g_new (float, MAX (n, 1));
  for (gint64 i = 0; i < n; i++)
    v[i] = (float) g_test_rand_double_range (lo, hi);
  return v;
}

HnTensor *
hn_test_empty (HnDType dtype, int ndim, const gint64 *shape)
{
  g_autoptr(GError) error = NULL;
  HnTensor *t = hn_tensor_new (hn_test_ctx (), dtype, ndim, shape, &error);
  g_assert_no_error (error);
  return t;
}

HnTensor *
hn_test_tensor (HnDType dtype, int ndim, const gint64 *shape, float *data)
{
  g_autoptr(GError) error = NULL;
  HnTensor *t = hn_test_empty (dtype, ndim, shape);
  for (gint64 i = 0; i < t->n; i++)
    {
      if (dtype == HN_DTYPE_F16)
        data[i] = hn_f16_to_f32 (hn_f32_to_f16 (data[i]));
      else if (dtype == HN_DTYPE_BF16)
        data[i] = hn_bf16_to_f32 (hn_f32_to_bf16 (data[i]));
    }
  g_assert_true (hn_tensor_upload_f32 (t, data, (gsize) t->n, &error));
  g_assert_no_error (error);
  return t;
}

HnTensor *
hn_test_tensor_i32 (int ndim, const gint64 *shape, const gint32 *data)
{
  g_autoptr(GError) error = NULL;
  HnTensor *t = hn_test_empty (HN_DTYPE_I32, ndim, shape);
  g_assert_true (hn_tensor_upload_i32 (t, data, (gsize) t->n, &error));
  g_assert_no_error (error);
  return t;
}

float *
hn_test_download (HnTensor *t)
{
  g_autoptr(GError) error = NULL;
  float *v = g_new (float, t->n);
  g_assert_true (hn_tensor_download_f32 (t, v, (gsize) t->n, &error));
  g_assert_no_error (error);
  return v;
}

guint8 *
hn_test_same_bytes (HnTensor *a, HnTensor *b)
{
  g_autoptr(GError) error = NULL;
  gsize n = hn_tensor_nbytes (a);
  g_assert_cmpuint (hn_tensor_nbytes (b), ==, n);
  guint8 *x = g_malloc (n);
  g_autofree guint8 *y = g_malloc (n);
  g_assert_true (hn_tensor_download_raw (a, x, n, &error) && hn_tensor_download_raw (b, y, n, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (x, n, y, n);
  return x;
}

void
hn_test_run (HnCmd *cmd)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_assert_no_error (error);
}

double
hn_test_max_abs (const float *x, gint64 n)
{
  double m = 0;
  for (gint64 i = 0; i < n; i++)
    m = MAX (m, fabs (x[i]));
  return m;
}

void
hn_test_assert_close (const char *what, const float *got, const float *want, gint64 n, double rtol, double atol)
{
  double worst = 0;
  gint64 worst_i = -1;
  for (gint64 i = 0; i < n; i++)
    {
      if (isnan (want[i]) && isnan (got[i]))
        continue;
      double err = fabs ((double) got[i] - want[i]);
      double lim = atol + rtol * fabs (want[i]);
      if (!(err <= lim))
        {
          g_test_message ("%s: element %" G_GINT64_FORMAT " is %.9g, reference %.9g (error %.3g > %.3g)", what, i,
                          got[i], want[i], err, lim);
          g_test_fail_printf ("%s: element %" G_GINT64_FORMAT " is %.9g, reference %.9g", what, i, got[i], want[i]);
          return;
        }
      if (err > worst)
        {
          worst = err;
          worst_i = i;
        }
    }
  if (g_test_verbose () && worst_i >= 0)
    g_test_message ("%s: max error %.3g at %" G_GINT64_FORMAT, what, worst, worst_i);
}
