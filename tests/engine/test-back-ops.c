/* Every backward op and optimizer update on the device (lavapipe in CI)
 * against its CPU reference (cpu-ref-back.h), on small random shapes with
 * odd sizes. */
#include <math.h>
#include <string.h>

#include "base/hn-error.h"
#include "tensor/cpu-ref-back.h"
#include "ops-test-common.h"
#include "tensor/hn-cpu-ref.h"
#include "tensor/ops-back.h"

static HnVkContext *ctx;

static float *
rnd (gint64 n, float scale)
{
  float *a = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    a[i] = (float) g_test_rand_double_range (-scale, scale);
  return a;
}

static HnTensor *
tens (int ndim, const gint64 *shape, const float *data)
{
  g_autoptr (GError) error = NULL;
  HnTensor *t = hn_tensor_new (ctx, HN_DTYPE_F32, ndim, shape, &error);
  g_assert_no_error (error);
  if (data)
    {
      hn_tensor_upload_f32 (t, data, t->n, &error);
      g_assert_no_error (error);
    }
  else
    {
      g_autofree float *z = g_new0 (float, t->n);
      hn_tensor_upload_f32 (t, z, t->n, &error);
      g_assert_no_error (error);
    }
  return t;
}

static HnTensor *
tens_i32 (gint64 n, const gint32 *data)
{
  g_autoptr (GError) error = NULL;
  HnTensor *t = hn_tensor_new_1d (ctx, HN_DTYPE_I32, n, &error);
  g_assert_no_error (error);
  hn_tensor_upload_i32 (t, data, n, &error);
  g_assert_no_error (error);
  return t;
}

static float *
down (HnTensor *t)
{
  g_autoptr (GError) error = NULL;
  float *d = g_new (float, t->n);
  hn_tensor_download_f32 (t, d, t->n, &error);
  g_assert_no_error (error);
  return d;
}

/* The same sums in the same order by another kernel: equal to rounding (GPU
 * compilers may contract multiply-adds differently in the two kernels). */
static void
assert_same_sums (const char *what, const float *got, const float *want, gint64 n)
{
  for (gint64 i = 0; i < n; i++)
    if (!(fabs ((double) got[i] - want[i]) <= 1e-6 + 1e-6 * fabs (want[i])))
      g_error ("%s[%" G_GINT64_FORMAT "]: got %.9g, want %.9g", what, i, got[i], want[i]);
}

static void
close_enough (const char *what, HnTensor *t, const float *want, double rtol, double atol)
{
  g_autofree float *got = down (t);
  double worst = 0;
  for (gint64 i = 0; i < t->n; i++)
    {
      double err = fabs ((double) got[i] - want[i]);
      worst = MAX (worst, err);
      if (!(err <= atol + rtol * fabs (want[i])))
        g_error ("%s[%" G_GINT64_FORMAT "]: got %.7g, want %.7g", what, i, got[i], want[i]);
    }
  g_test_message ("%s: max abs error %.3g over %" G_GINT64_FORMAT, what, worst, t->n);
}

static void
run (HnCmd *cmd)
{
  g_autoptr (GError) error = NULL;
  hn_cmd_submit_wait (cmd, &error);
  g_assert_no_error (error);
}

static void
test_matmul_back (void)
{
  g_autoptr (GError) error = NULL;
  gint64 M = 13, N = 7, K = 9;
  g_autofree float *dy = rnd (M * N, 1), *x = rnd (M * K, 1), *w = rnd (N * K, 1);
  g_autofree float *dw0 = rnd (N * K, 1), *db0 = rnd (N, 1);
  g_autofree float *dx = g_new0 (float, M * K);
  g_autofree float *dw = g_memdup2 (dw0, sizeof (float) * N * K), *db = g_memdup2 (db0, sizeof (float) * N);
  hn_ref_matmul_back (dy, x, w, M, N, K, dx, dw, db);
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { M, N }, dy), tx = tens (2, (gint64[]) { M, K }, x);
  g_autoptr (HnTensor) tw = tens (2, (gint64[]) { N, K }, w), tdx = tens (2, (gint64[]) { M, K }, NULL);
  g_autoptr (HnTensor) tdw = tens (2, (gint64[]) { N, K }, dw0), tdb = tens (1, (gint64[]) { N }, db0);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_matmul_back (cmd, tdx, tdw, tdb, tdy, tx, tw, 0, &error));
  g_assert_no_error (error);
  run (cmd);
  close_enough ("matmul dx", tdx, dx, 1e-5, 1e-5);
  close_enough ("matmul dw (accumulated)", tdw, dw, 1e-5, 1e-5);
  close_enough ("matmul db (accumulated)", tdb, db, 1e-5, 1e-5);
  /* accumulate into dx */
  g_assert_true (hn_op_matmul_back (cmd, tdx, NULL, NULL, tdy, tx, tw, HN_BACK_ACCUMULATE, &error));
  run (cmd);
  for (gint64 i = 0; i < M * K; i++)
    dx[i] *= 2;
  close_enough ("matmul dx (accumulated)", tdx, dx, 1e-5, 1e-5);
}

/* The LoRA rank expansion (lora_expand.comp): c (+)= alpha·u·W with W(k, n)
 * = w[n, k] (w_trans) or w[k, n]; odd N (the per-element store) and N % 4
 * == 0 (the 16-byte one), more rows than one workgroup's 16 and columns
 * past one workgroup's 256, ranks 1, 8 and 32. */
static void
run_lora_expand (gint64 M, gint64 N, gint64 R, gboolean w_trans, gboolean acc)
{
  g_autoptr (GError) error = NULL;
  g_autofree float *u = rnd (M * R, 1), *w = rnd (N * R, 1), *c0 = rnd (M * N, 1);
  g_autofree float *want = g_new (float, M * N);
  float alpha = 0.75f;
  for (gint64 m = 0; m < M; m++)
    for (gint64 n = 0; n < N; n++)
      {
        double s = 0;
        for (gint64 k = 0; k < R; k++)
          s += (double) u[m * R + k] * w[w_trans ? n * R + k : k * N + n];
        want[m * N + n] = (float) ((acc ? c0[m * N + n] : 0.0) + alpha * s);
      }
  g_autoptr (HnTensor) tu = tens (2, (gint64[]) { M, R }, u), tc = tens (2, (gint64[]) { M, N }, c0);
  g_autoptr (HnTensor) tw = w_trans ? tens (2, (gint64[]) { N, R }, w) : tens (2, (gint64[]) { R, N }, w);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_lora_expand (cmd, tc, tu, tw, w_trans, alpha, acc, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("lora_expand %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " r%" G_GINT64_FORMAT
                                           "%s%s", M, N, R, w_trans ? " w_trans" : "", acc ? " +=" : "");
  close_enough (what, tc, want, 1e-5, 1e-5);
}

/* hn_op_lora_expand_n: three adapters into one c give what three calls give
 * (the first accumulating only when asked, the others always): the same sums
 * in the same order, to rounding (the NVIDIA compiler contracts the two
 * kernels' multiply-adds differently, so the bits may differ there) */
static void
run_lora_expand_n (gint64 M, gint64 N, gint64 R, gboolean w_trans, gboolean acc)
{
  g_autoptr (GError) error = NULL;
  g_autofree float *c0 = rnd (M * N, 1);
  g_autoptr (HnTensor) ta = tens (2, (gint64[]) { M, N }, c0), tb = tens (2, (gint64[]) { M, N }, c0);
  HnTensor *tu[3], *tw[3];
  for (int j = 0; j < 3; j++)
    {
      g_autofree float *u = rnd (M * R, 1), *w = rnd (N * R, 1);
      tu[j] = tens (2, (gint64[]) { M, R }, u);
      tw[j] = w_trans ? tens (2, (gint64[]) { N, R }, w) : tens (2, (gint64[]) { R, N }, w);
    }
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  for (int j = 0; j < 3; j++)
    g_assert_true (hn_op_lora_expand (cmd, ta, tu[j], tw[j], w_trans, 0.75f, acc || j > 0, &error));
  g_assert_true (hn_op_lora_expand_n (cmd, 3, tb, tu, tw, w_trans, 0.75f, acc, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree float *a = down (ta);
  g_autofree char *what = g_strdup_printf ("lora_expand_n %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " r%" G_GINT64_FORMAT,
                                           M, N, R);
  close_enough (what, tb, a, 1e-6, 1e-6);
  for (int j = 0; j < 3; j++)
    {
      hn_tensor_unref (tu[j]);
      hn_tensor_unref (tw[j]);
    }
}

static void
test_lora_expand (void)
{
  run_lora_expand (37, 300, 8, TRUE, TRUE);
  run_lora_expand (37, 300, 8, FALSE, FALSE);
  run_lora_expand (20, 515, 1, FALSE, TRUE);
  run_lora_expand (5, 7, 32, TRUE, FALSE);
  run_lora_expand (17, 64, 16, FALSE, TRUE);
  run_lora_expand_n (37, 300, 8, FALSE, TRUE);
  run_lora_expand_n (37, 300, 8, TRUE, FALSE);
  run_lora_expand_n (20, 515, 3, FALSE, FALSE);
  /* a rank past 32 or shapes that do not fit fail */
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) u = tens (2, (gint64[]) { 4, 33 }, NULL), w = tens (2, (gint64[]) { 33, 6 }, NULL);
  g_autoptr (HnTensor) c = tens (2, (gint64[]) { 4, 6 }, NULL), c2 = tens (2, (gint64[]) { 5, 6 }, NULL);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_false (hn_op_lora_expand (cmd, c, u, w, FALSE, 1.0f, FALSE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (hn_op_lora_expand (cmd, c2, u, w, FALSE, 1.0f, FALSE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* The LoRA down-projections (lora_rows.comp: c (+)= alpha·x·W, W(k, s) =
 * w[s, k] or w[k, s]) and weight gradients (lora_cols.comp: C(l, s) (+)=
 * alpha·Σ_k x[k, l]·w[k, s], c [L, r] or [r, L]) against double sums: K a
 * multiple of 4 (the 16-byte loads) and not, ranks 1 to 16, more rows than
 * one workgroup's and more k than one chunk. */
static void
run_lora_rows (gint64 M, gint64 K, gint64 R, gboolean w_trans, gboolean acc)
{
  g_autoptr (GError) error = NULL;
  g_autofree float *x = rnd (M * K, 1), *w = rnd (K * R, 1), *c0 = rnd (M * R, 1), *want = g_new (float, M * R);
  float alpha = 1.5f;
  for (gint64 m = 0; m < M; m++)
    for (gint64 r = 0; r < R; r++)
      {
        double sum = 0;
        for (gint64 k = 0; k < K; k++)
          sum += (double) x[m * K + k] * w[w_trans ? r * K + k : k * R + r];
        want[m * R + r] = (float) ((acc ? c0[m * R + r] : 0.0) + alpha * sum);
      }
  g_autoptr (HnTensor) tx = tens (2, (gint64[]) { M, K }, x), tc = tens (2, (gint64[]) { M, R }, c0);
  g_autoptr (HnTensor) tw = w_trans ? tens (2, (gint64[]) { R, K }, w) : tens (2, (gint64[]) { K, R }, w);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_lora_rows (cmd, tc, tx, tw, w_trans, alpha, acc, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("lora_rows %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " r%" G_GINT64_FORMAT
                                           "%s%s", M, K, R, w_trans ? " w_trans" : "", acc ? " +=" : "");
  close_enough (what, tc, want, 1e-4, 1e-4);
}

/* hn_op_lora_rows_n: three adapters of one x give the bits of three
 * hn_op_lora_rows calls on one row per subgroup, and so do 2 and 4 rows per
 * subgroup (M not a multiple of their blocks) */
static float *
lora_rows_bits (int n, HnTensor **tw, HnTensor *tx, const float *c0, gint64 M, gint64 R, gboolean w_trans,
                gboolean acc, int rb)
{
  g_autoptr (GError) error = NULL;
  char v[2] = { (char) ('0' + rb), 0 };
  g_setenv ("HN_LORA_ROWS_RB", v, TRUE);
  HnTensor *tc[3];
  for (int j = 0; j < 3; j++)
    tc[j] = tens (2, (gint64[]) { M, R }, c0 + j * M * R);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  if (n == 3)
    g_assert_true (hn_op_lora_rows_n (cmd, 3, tc, tx, tw, w_trans, 1.5f, acc, &error));
  else
    for (int j = 0; j < 3; j++)
      g_assert_true (hn_op_lora_rows (cmd, tc[j], tx, tw[j], w_trans, 1.5f, acc, &error));
  g_assert_no_error (error);
  run (cmd);
  float *out = g_new (float, 3 * M * R);
  for (int j = 0; j < 3; j++)
    {
      hn_tensor_download_f32 (tc[j], out + j * M * R, M * R, &error);
      g_assert_no_error (error);
      hn_tensor_unref (tc[j]);
    }
  g_unsetenv ("HN_LORA_ROWS_RB");
  return out;
}

static void
run_lora_rows_n (gint64 M, gint64 K, gint64 R, gboolean w_trans, gboolean acc)
{
  g_autofree float *x = rnd (M * K, 1), *c0 = rnd (3 * M * R, 1);
  g_autoptr (HnTensor) tx = tens (2, (gint64[]) { M, K }, x);
  HnTensor *tw[3];
  for (int j = 0; j < 3; j++)
    {
      g_autofree float *w = rnd (K * R, 1);
      tw[j] = w_trans ? tens (2, (gint64[]) { R, K }, w) : tens (2, (gint64[]) { K, R }, w);
    }
  g_autofree float *want = lora_rows_bits (1, tw, tx, c0, M, R, w_trans, acc, 1);
  /* three at once on 1 and 4 rows per subgroup, one on 2 (the default at 2048 rows) */
  static const int runs[3][2] = { { 3, 1 }, { 3, 4 }, { 1, 2 } };
  for (int i = 0; i < 3; i++)
    {
      g_autofree float *got = lora_rows_bits (runs[i][0], tw, tx, c0, M, R, w_trans, acc, runs[i][1]);
      assert_same_sums ("lora_rows_n", got, want, 3 * M * R);
    }
  for (int j = 0; j < 3; j++)
    hn_tensor_unref (tw[j]);
}

static void
run_lora_cols (gint64 K, gint64 L, gint64 R, gboolean c_trans, gboolean acc)
{
  g_autoptr (GError) error = NULL;
  g_autofree float *x = rnd (K * L, 1), *w = rnd (K * R, 1), *c0 = rnd (L * R, 1), *want = g_new (float, L * R);
  float alpha = 0.5f;
  for (gint64 l = 0; l < L; l++)
    for (gint64 r = 0; r < R; r++)
      {
        double sum = 0;
        for (gint64 k = 0; k < K; k++)
          sum += (double) x[k * L + l] * w[k * R + r];
        gint64 ci = c_trans ? r * L + l : l * R + r;
        want[ci] = (float) ((acc ? c0[ci] : 0.0) + alpha * sum);
      }
  g_autoptr (HnTensor) tx = tens (2, (gint64[]) { K, L }, x), tw = tens (2, (gint64[]) { K, R }, w);
  g_autoptr (HnTensor) tc = c_trans ? tens (2, (gint64[]) { R, L }, c0) : tens (2, (gint64[]) { L, R }, c0);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_lora_cols (cmd, tc, tx, tw, c_trans, alpha, acc, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("lora_cols %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " r%" G_GINT64_FORMAT
                                           "%s%s", K, L, R, c_trans ? " c_trans" : "", acc ? " +=" : "");
  close_enough (what, tc, want, 1e-4, 1e-4);
}

/* hn_op_lora_cols_n: three adapters of one x give the bits of three calls
 * (and a rank too large for one dispatch of three takes three) */
static void
run_lora_cols_n (gint64 K, gint64 L, gint64 R, gboolean c_trans, gboolean acc)
{
  g_autoptr (GError) error = NULL;
  g_autofree float *x = rnd (K * L, 1);
  g_autoptr (HnTensor) tx = tens (2, (gint64[]) { K, L }, x);
  HnTensor *tw[3], *ta[3], *tb[3];
  for (int j = 0; j < 3; j++)
    {
      g_autofree float *w = rnd (K * R, 1), *c0 = rnd (L * R, 1);
      tw[j] = tens (2, (gint64[]) { K, R }, w);
      ta[j] = c_trans ? tens (2, (gint64[]) { R, L }, c0) : tens (2, (gint64[]) { L, R }, c0);
      tb[j] = c_trans ? tens (2, (gint64[]) { R, L }, c0) : tens (2, (gint64[]) { L, R }, c0);
    }
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  for (int j = 0; j < 3; j++)
    g_assert_true (hn_op_lora_cols (cmd, ta[j], tx, tw[j], c_trans, 0.5f, acc, &error));
  run (cmd);
  g_autoptr (HnCmd) cmd2 = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_lora_cols_n (cmd2, 3, tb, tx, tw, c_trans, 0.5f, acc, &error));
  g_assert_no_error (error);
  run (cmd2);
  for (int j = 0; j < 3; j++)
    {
      g_autofree float *a = down (ta[j]), *b = down (tb[j]);
      assert_same_sums ("lora_cols_n", b, a, L * R);
      hn_tensor_unref (tw[j]);
      hn_tensor_unref (ta[j]);
      hn_tensor_unref (tb[j]);
    }
}

static void
test_lora_down (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnCmd) cmd0 = hn_cmd_new (ctx, &error);
  if (!hn_op_lora_down_available (cmd0, 8))
    {
      g_autoptr (HnTensor) x = tens (2, (gint64[]) { 4, 8 }, NULL), w = tens (2, (gint64[]) { 2, 8 }, NULL);
      g_autoptr (HnTensor) c = tens (2, (gint64[]) { 4, 2 }, NULL);
      g_assert_false (hn_op_lora_rows (cmd0, c, x, w, TRUE, 1.0f, FALSE, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_test_message ("no subgroup arithmetic: the LoRA kernels fail closed");
      return;
    }
  run_lora_rows (37, 300, 8, TRUE, FALSE);
  run_lora_rows (37, 300, 8, FALSE, TRUE);
  run_lora_rows (9, 1030, 16, TRUE, TRUE);
  run_lora_rows (21, 77, 3, FALSE, FALSE);
  run_lora_rows (5, 77, 1, TRUE, TRUE);
  /* small ranks: lavapipe compiles each unrolled variant slowly */
  run_lora_rows_n (37, 300, 4, TRUE, FALSE);
  run_lora_rows_n (37, 300, 4, FALSE, TRUE);
  run_lora_rows_n (23, 77, 3, TRUE, TRUE);
  run_lora_cols (300, 37, 8, FALSE, TRUE);
  run_lora_cols (300, 37, 8, TRUE, FALSE);
  run_lora_cols (1500, 600, 16, TRUE, TRUE);
  run_lora_cols (7, 9, 3, FALSE, FALSE);
  run_lora_cols_n (300, 37, 8, TRUE, TRUE);
  run_lora_cols_n (1500, 300, 5, FALSE, FALSE);
  run_lora_cols_n (40, 9, 16, TRUE, FALSE);
  /* a rank past 16 fails */
  g_autoptr (HnTensor) x = tens (2, (gint64[]) { 4, 8 }, NULL), w = tens (2, (gint64[]) { 17, 8 }, NULL);
  g_autoptr (HnTensor) c = tens (2, (gint64[]) { 4, 17 }, NULL);
  g_assert_false (hn_op_lora_rows (cmd0, c, x, w, TRUE, 1.0f, FALSE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
}

static HnTensor *
tens16 (int ndim, const gint64 *shape, const float *data, float *rounded)
{
  g_autoptr (GError) error = NULL;
  HnTensor *t = hn_tensor_new (ctx, HN_DTYPE_F16, ndim, shape, &error);
  g_assert_no_error (error);
  g_autofree guint16 *h = g_new0 (guint16, t->n);
  for (gint64 i = 0; data && i < t->n; i++)
    {
      h[i] = hn_f32_to_f16 (data[i]);
      rounded[i] = hn_f16_to_f32 (h[i]);
    }
  hn_tensor_upload_raw (t, h, sizeof (guint16) * (gsize) t->n, &error);
  g_assert_no_error (error);
  return t;
}

static float
r16 (double v)
{
  return hn_f16_to_f32 (hn_f32_to_f16 ((float) v));
}

/* The LoRA ops under fp16 autocast (LoRA at --precision fp16): each output
 * is alpha·Σ of the f16-rounded operands, rounded to f16, added to c when
 * accumulating. Against double sums of the rounded operands: every output
 * within one f16 step of the rounded reference plus the error bound of an
 * f32 sum of k terms (k·2⁻²⁴·Σ|terms|: a sum that cancels to near zero
 * keeps the f32 error of its large terms), and at most 2 % of them not
 * equal to it (f32 sums in another order move a result across a rounding
 * boundary rarely; operands left unrounded move about a quarter). */
static void
check_autocast (const char *what, HnTensor *t, const float *c0, const double *exact, const double *magnitude,
                gint64 k, gint64 n, gboolean acc)
{
  g_autofree float *got = down (t);
  gint64 differ = 0;
  for (gint64 i = 0; i < n; i++)
    {
      float want = r16 (exact[i]);
      float term = acc ? got[i] - c0[i] : got[i];
      double step = fabs (r16 (fabs (want) * (1 + 1.0 / 1024)) - fabs (want)) + 1e-7 + k * 0x1p-24 * magnitude[i];
      if (!acc)
        g_assert_cmpfloat (r16 (got[i]), ==, got[i]); /* the product itself was rounded */
      if (fabs (term - want) > 1.01 * step + (acc ? 1e-6 * fabs (c0[i]) : 0))
        g_error ("%s: element %" G_GINT64_FORMAT " is %.9g, want %.9g (one f16 step %.3g)", what, i, term, want, step);
      differ += fabs (term - want) > (acc ? 1e-6 * fabs (c0[i]) + 1e-9 : 0);
    }
  if (differ > n / 50)
    g_error ("%s: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " outputs not the rounded reference", what, differ, n);
}

/* out[i, j] = alpha · Σ_k f16(a[i·ai + k·ak]) · f16(b[k·bk + j·bj]) in double,
 * for I x J outputs; mag the same sum of absolute terms. */
static void
rounded_products (double *out, double *mag, gint64 I, gint64 J, gint64 K, const float *a, gint64 ai, gint64 ak,
                  const float *b, gint64 bk, gint64 bj, double alpha)
{
  for (gint64 i = 0; i < I; i++)
    for (gint64 j = 0; j < J; j++)
      {
        double s = 0, m = 0;
        for (gint64 k = 0; k < K; k++)
          {
            double term = (double) r16 (a[i * ai + k * ak]) * r16 (b[k * bk + j * bj]);
            s += term;
            m += fabs (term);
          }
        out[i * J + j] = alpha * s;
        mag[i * J + j] = fabs (alpha) * m;
      }
}

static void
test_lora_autocast (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  gint64 M = 37, K = 300, N = 300, R = 8;
  g_autofree float *x = rnd (M * K, 1), *a = rnd (R * K, 1), *b = rnd (N * R, 1), *u = rnd (M * R, 1);
  g_autofree float *c0u = rnd (M * R, 1), *c0y = rnd (M * N, 1), *c0a = rnd (R * K, 1);
  g_autofree double *eu = g_new (double, M * R), *ey = g_new (double, M * N), *ea = g_new (double, R * K);
  g_autofree double *mu = g_new (double, M * R), *my = g_new (double, M * N), *ma = g_new (double, R * K);
  float alpha = 1.5f;
  /* rows: u = alpha·x·Aᵀ; expand: y += alpha·u·Bᵀ; cols: dA += alpha·uᵀ·x */
  rounded_products (eu, mu, M, R, K, x, K, 1, a, 1, K, alpha);
  rounded_products (ey, my, M, N, R, u, R, 1, b, 1, R, alpha);
  rounded_products (ea, ma, R, K, M, u, 1, R, x, K, 1, alpha);
  g_autoptr (HnTensor) tx = tens (2, (gint64[]) { M, K }, x), ta = tens (2, (gint64[]) { R, K }, a);
  g_autoptr (HnTensor) tb = tens (2, (gint64[]) { N, R }, b), tu = tens (2, (gint64[]) { M, R }, u);
  g_autoptr (HnTensor) tcu = tens (2, (gint64[]) { M, R }, c0u), tcy = tens (2, (gint64[]) { M, N }, c0y);
  g_autoptr (HnTensor) tca = tens (2, (gint64[]) { R, K }, c0a);
  if (hn_op_lora_down_available (cmd, R))
    {
      g_assert_true (hn_op_lora_rows (cmd, tcu, tx, ta, TRUE, alpha, FALSE, &error));
      g_assert_true (hn_op_lora_cols (cmd, tca, tx, tu, TRUE, alpha, TRUE, &error));
    }
  g_assert_true (hn_op_lora_expand (cmd, tcy, tu, tb, TRUE, alpha, TRUE, &error));
  g_assert_no_error (error);
  run (cmd);
  if (hn_op_lora_down_available (cmd, R))
    {
      check_autocast ("lora_rows fp16", tcu, c0u, eu, mu, K, M * R, FALSE);
      check_autocast ("lora_cols fp16 +=", tca, c0a, ea, ma, M, R * K, TRUE);
    }
  check_autocast ("lora_expand fp16 +=", tcy, c0y, ey, my, R, M * N, TRUE);
}

/* lora_rows under fp16 autocast reading W's f16 copies (the default) against
 * rounding W on every load (HN_LORA_W16=0): the same bits, for three adapters
 * of one x (16-byte loads), one adapter whose W is a row view at an odd
 * offset (scalar loads) and the du = dy·B form. */
static void
test_lora_rows_w16 (void)
{
  {
    g_autoptr (GError) error = NULL;
    g_autoptr (HnCmd) probe = hn_cmd_new (ctx, &error);
    g_assert_no_error (error);
    if (!hn_op_lora_down_available (probe, 8))
      return;
  }
  const struct { gint64 M, K, R; gboolean w_trans; int n; gint64 row0; } cases[] = {
    { 37, 300, 8, TRUE, 3, 0 }, { 21, 77, 3, TRUE, 1, 1 }, { 37, 300, 8, FALSE, 1, 2 } };
  for (gsize ci = 0; ci < G_N_ELEMENTS (cases); ci++)
    {
      gint64 M = cases[ci].M, K = cases[ci].K, R = cases[ci].R, row0 = cases[ci].row0;
      gboolean wt = cases[ci].w_trans;
      gint64 wr = wt ? R : K, wc = wt ? K : R;
      g_autofree float *x = rnd (M * K, 1), *w = rnd (3 * (wr + row0) * wc, 1), *c0 = rnd (3 * M * R, 1);
      g_autoptr (HnTensor) tx = tens (2, (gint64[]) { M, K }, x);
      HnTensor *whole[3], *tw[3];
      for (int j = 0; j < 3; j++)
        {
          g_autoptr (GError) error = NULL;
          whole[j] = tens (2, (gint64[]) { wr + row0, wc }, w + j * (wr + row0) * wc);
          tw[j] = hn_tensor_view_rows (whole[j], row0, wr, &error);
          g_assert_no_error (error);
        }
      HnTensor *tc[2][3];
      for (int way = 0; way < 2; way++)
        {
          g_autoptr (GError) error = NULL;
          g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
          hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
          if (way == 1)
            g_setenv ("HN_LORA_W16", "0", TRUE);
          for (int j = 0; j < 3; j++)
            tc[way][j] = tens (2, (gint64[]) { M, R }, c0 + j * M * R);
          int n = cases[ci].n;
          g_assert_true (hn_op_lora_rows_n (cmd, n, tc[way], tx, tw, wt, 1.5f, TRUE, &error));
          g_unsetenv ("HN_LORA_W16");
          g_assert_no_error (error);
          run (cmd);
        }
      for (int j = 0; j < cases[ci].n; j++)
        g_free (hn_test_same_bytes (tc[0][j], tc[1][j]));
      for (int j = 0; j < 3; j++)
        {
          hn_tensor_unref (tc[0][j]);
          hn_tensor_unref (tc[1][j]);
          hn_tensor_unref (tw[j]);
          hn_tensor_unref (whole[j]);
        }
    }
}

/* hn_op_matmul_back_f16_act (the activation's gradient formed where dy is
 * rounded to f16) against hn_op_unary_back then hn_op_matmul_back_f16: dx,
 * dw, db and the f16 dy copy the same bits, with and without a bias. */
static void
test_matmul_back_f16_act (void)
{
  g_autoptr (GError) error = NULL;
  gint64 M = 300, N = 50, K = 24;
  g_autofree float *dy = rnd (M * N, 1), *y = rnd (M * N, 3), *x = rnd (M * K, 1), *w = rnd (N * K, 1);
  g_autofree float *dw0 = rnd (N * K, 1), *db0 = rnd (N, 1), *xr = g_new (float, M * K), *wr = g_new (float, N * K);
  for (gint64 i = 0; i < M * N; i++)
    {
      y[i] = r16 (y[i]); /* f16 values, so that an f16 y or dy (fused 2, 3) holds the same */
      dy[i] = r16 (dy[i]);
    }
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { M, N }, dy), ty = tens (2, (gint64[]) { M, N }, y);
  g_autoptr (HnTensor) ty16 = tens16 (2, (gint64[]) { M, N }, y, y), tdy16 = tens16 (2, (gint64[]) { M, N }, dy, dy);
  g_autoptr (HnTensor) tx = tens16 (2, (gint64[]) { M, K }, x, xr), tw = tens16 (2, (gint64[]) { N, K }, w, wr);
  g_autoptr (HnTensor) dup = tens (2, (gint64[]) { M, N }, NULL);
  g_assert_false (hn_op_matmul_back_f16_act_ok (tdy, ty, NULL)); /* needs the f16 copy */
  for (int bias = 0; bias < 2; bias++)
    {
      float *got[4][4];
      for (int fused = 0; fused < 4; fused++) /* apart, fused, from an f16 y, from an f16 y and dy into an f16 dx */
        {
          g_autoptr (HnTensor) tdx = fused == 3 ? tens16 (2, (gint64[]) { M, K }, NULL, NULL)
                                                : tens (2, (gint64[]) { M, K }, NULL);
          g_autoptr (HnTensor) tdw = tens (2, (gint64[]) { N, K }, dw0), tdb = tens (1, (gint64[]) { N }, db0);
          g_autoptr (HnTensor) dy16 = tens16 (1, (gint64[]) { M * N }, NULL, NULL);
          g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
          hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
          HnTensor *db = bias ? tdb : NULL;
          if (fused)
            {
              HnTensor *act_x = fused >= 2 ? ty16 : ty, *d = fused == 3 ? tdy16 : tdy;
              g_assert_true (hn_op_matmul_back_f16_act_ok (d, act_x, dy16));
              g_assert_true (hn_op_matmul_back_f16_act (cmd, tdx, tdw, db, d, act_x, HN_ACT_GELU_TANH, dy16, tx,
                                                        tw, NULL, 0, &error));
            }
          else
            {
              g_assert_true (hn_op_unary_back (cmd, dup, tdy, ty, HN_ACT_GELU_TANH, 0, &error));
              g_assert_true (hn_op_matmul_back_f16 (cmd, tdx, tdw, db, dup, dy16, tx, tw, NULL, 0, &error));
            }
          g_assert_no_error (error);
          run (cmd);
          got[fused][0] = down (tdx);
          got[fused][1] = down (tdw);
          got[fused][2] = down (tdb);
          got[fused][3] = g_new (float, M * N / 2);
          g_assert_true (hn_tensor_download_raw (dy16, got[fused][3], sizeof (guint16) * M * N, &error));
        }
      gint64 n[4] = { M * K, N * K, N, M * N / 2 };
      for (int k = 0; k < 4; k++)
        {
          g_assert_cmpmem (got[0][k], sizeof (float) * n[k], got[1][k], sizeof (float) * n[k]);
          g_assert_cmpmem (got[0][k], sizeof (float) * n[k], got[2][k], sizeof (float) * n[k]);
          g_assert_cmpmem (got[0][k], sizeof (float) * n[k], got[3][k], sizeof (float) * n[k]);
          for (int f = 0; f < 4; f++)
            g_free (got[f][k]);
        }
    }
  /* the activation's f16 copy from an f16 input: the bits the f32 input of the same values gives */
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_autoptr (HnTensor) of32 = tens16 (2, (gint64[]) { M, N }, NULL, NULL);
  g_autoptr (HnTensor) of16 = tens16 (2, (gint64[]) { M, N }, NULL, NULL);
  g_assert_true (hn_op_unary_f16 (cmd, of32, ty, HN_ACT_GELU_TANH, &error));
  g_assert_true (hn_op_unary_f16 (cmd, of16, ty16, HN_ACT_GELU_TANH, &error));
  g_assert_no_error (error);
  run (cmd);
  g_free (hn_test_same_bytes (of32, of16));
}

/* hn_op_cast_f16_cols_bias (a projection's dy into columns of the stacked
 * f16 dy, its bias gradient from the same read) against hn_op_cast_f16_cols
 * and hn_op_bias_back under autocast: the same bits; refused off autocast. */
static void
test_cast_f16_cols_bias (void)
{
  g_autoptr (GError) error = NULL;
  gint64 M = 1000, N = 70, ld = 200, c0 = 36;
  g_autofree float *dy = rnd (M * N, 2), *db0 = rnd (N, 1);
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { M, N }, dy);
  guint16 *out[2];
  float *db[2];
  for (int fused = 0; fused < 2; fused++)
    {
      g_autoptr (HnTensor) t16 = tens16 (2, (gint64[]) { M, ld }, NULL, NULL), tdb = tens (1, (gint64[]) { N }, db0);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
      if (fused)
        g_assert_true (hn_op_cast_f16_cols_bias (cmd, t16, c0, tdy, tdb, &error));
      else
        g_assert_true (hn_op_cast_f16_cols (cmd, t16, c0, tdy, &error) && hn_op_bias_back (cmd, tdb, tdy, &error));
      g_assert_no_error (error);
      run (cmd);
      out[fused] = g_new (guint16, M * ld);
      g_assert_true (hn_tensor_download_raw (t16, out[fused], sizeof (guint16) * M * ld, &error));
      db[fused] = down (tdb);
    }
  g_assert_cmpmem (out[0], sizeof (guint16) * M * ld, out[1], sizeof (guint16) * M * ld);
  g_assert_cmpmem (db[0], sizeof (float) * N, db[1], sizeof (float) * N);
  for (int k = 0; k < 2; k++)
    {
      g_free (out[k]);
      g_free (db[k]);
    }
  g_autoptr (HnTensor) t16 = tens16 (2, (gint64[]) { M, ld }, NULL, NULL), tdb = tens (1, (gint64[]) { N }, db0);
  g_autoptr (HnCmd) plain = hn_cmd_new (ctx, &error);
  g_assert_false (hn_op_cast_f16_cols_bias (plain, t16, c0, tdy, tdb, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* The fp16 autocast backward from f16 operands (training's f16 copies), with
 * dw's product whole and split over a long K (dw_tmp), against the products
 * of the f16-rounded operands with f16-rounded results. */
static void
test_matmul_back_f16 (void)
{
  g_autoptr (GError) error = NULL;
  gint64 M = 4099, N = 24, K = 40; /* 4099: the last chunk of 64 rows is a partial one */
  g_autofree float *dy = rnd (M * N, 1), *x = rnd (M * K, 1), *w = rnd (N * K, 1);
  g_autofree float *xr = g_new (float, M * K), *wr = g_new (float, N * K), *dyr = g_new (float, M * N);
  g_autofree float *dw0 = rnd (N * K, 1), *db0 = rnd (N, 1);
  for (gint64 i = 0; i < M * N; i++)
    dyr[i] = r16 (dy[i]);
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { M, N }, dy);
  g_autoptr (HnTensor) tx = tens16 (2, (gint64[]) { M, K }, x, xr), tw = tens16 (2, (gint64[]) { N, K }, w, wr);
  g_autoptr (HnTensor) dy16 = tens16 (1, (gint64[]) { M * N + 6 }, NULL, NULL);
  g_autoptr (HnTensor) tmp = tens (1, (gint64[]) { N * K }, NULL);
  g_autofree float *dx = g_new0 (float, M * K), *dw = g_memdup2 (dw0, sizeof (float) * N * K);
  g_autofree float *db = g_memdup2 (db0, sizeof (float) * N);
  for (gint64 m = 0; m < M; m++)
    for (gint64 k = 0; k < K; k++)
      {
        double sum = 0;
        for (gint64 n = 0; n < N; n++)
          sum += (double) dyr[m * N + n] * wr[n * K + k];
        dx[m * K + k] = r16 (sum);
      }
  for (gint64 n = 0; n < N; n++)
    {
      double sb = 0;
      for (gint64 m = 0; m < M; m++)
        sb += dy[m * N + n];
      db[n] += r16 (sb);
      for (gint64 k = 0; k < K; k++)
        {
          double sum = 0;
          for (gint64 m = 0; m < M; m++)
            sum += (double) dyr[m * N + n] * xr[m * K + k];
          dw[n * K + k] += r16 (sum);
        }
    }
  /* the bias gradient and dy's f16 copy from one read of dy (bias_back_f16.comp), then apart
   * (HN_BIAS_BACK_F16=0: to_f16 and bias_back): the same bits */
  g_autofree float *db_fused = NULL;
  g_autofree guint16 *dy16_fused = g_new (guint16, dy16->n), *dy16_apart = g_new (guint16, dy16->n);
  for (int split = 0; split < 2; split++)
    {
      g_autoptr (HnTensor) tdx = tens (2, (gint64[]) { M, K }, NULL);
      g_autoptr (HnTensor) tdw = tens (2, (gint64[]) { N, K }, dw0), tdb = tens (1, (gint64[]) { N }, db0);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
      if (split)
        g_setenv ("HN_BIAS_BACK_F16", "0", TRUE);
      g_assert_true (hn_op_matmul_back_f16 (cmd, tdx, tdw, tdb, tdy, dy16, tx, tw, split ? tmp : NULL, 0, &error));
      g_unsetenv ("HN_BIAS_BACK_F16");
      g_assert_no_error (error);
      run (cmd);
      /* results rounded to f16 (half an ulp: 2^-11), sums in another order */
      close_enough ("f16 matmul dx", tdx, dx, 2e-3, 1e-3);
      close_enough (split ? "f16 matmul dw (split)" : "f16 matmul dw", tdw, dw, 2e-3, 2e-3);
      close_enough ("f16 matmul db", tdb, db, 2e-3, 2e-3);
      g_assert_true (hn_tensor_download_raw (dy16, split ? dy16_apart : dy16_fused, sizeof (guint16) * dy16->n, &error));
      if (!split)
        db_fused = down (tdb);
      else
        {
          g_autofree float *db_apart = down (tdb);
          g_assert_cmpmem (db_fused, sizeof (float) * N, db_apart, sizeof (float) * N);
          g_assert_cmpmem (dy16_fused, sizeof (guint16) * M * N, dy16_apart, sizeof (guint16) * M * N);
        }
    }
  /* the f16 operands' kernel only under autocast */
  g_autoptr (HnCmd) plain = hn_cmd_new (ctx, &error);
  g_assert_false (hn_op_matmul_back_f16 (plain, NULL, tmp, NULL, tdy, dy16, tx, tw, NULL, 0, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
run_norm_rows (gboolean layer, gboolean plus_one, gint64 rows)
{
  g_autoptr (GError) error = NULL;
  gint64 cols = 300; /* > 256: several column groups; rows: one or many chunks of 64 */
  g_autofree float *dy = rnd (rows * cols, 1), *x = rnd (rows * cols, 2), *w = rnd (cols, 1);
  g_autofree float *dx = g_new0 (float, rows * cols), *dw = g_new0 (float, cols), *db = g_new0 (float, cols);
  if (layer)
    hn_ref_layernorm_back (dy, x, w, rows, cols, 1e-5f, dx, dw, db);
  else
    hn_ref_rmsnorm_back (dy, x, w, rows, cols, 1e-6f, plus_one, dx, dw);
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { rows, cols }, dy), tx = tens (2, (gint64[]) { rows, cols }, x);
  g_autoptr (HnTensor) tw = tens (1, (gint64[]) { cols }, w), tdw = tens (1, (gint64[]) { cols }, NULL);
  g_autoptr (HnTensor) tdb = tens (1, (gint64[]) { cols }, NULL), tdx = tens (2, (gint64[]) { rows, cols }, NULL);
  g_autoptr (HnTensor) st = tens (1, (gint64[]) { 2 * rows }, NULL);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  if (layer)
    g_assert_true (hn_op_layernorm_back (cmd, tdx, tdw, tdb, tdy, tx, tw, st, 1e-5f, 0, &error));
  else
    g_assert_true (hn_op_rmsnorm_back (cmd, tdx, tdw, tdy, tx, tw, st, 1e-6f,
                                       plus_one ? HN_NORM_WEIGHT_PLUS_ONE : 0, 0, &error));
  g_assert_no_error (error);
  run (cmd);
  close_enough ("norm dx", tdx, dx, 1e-4, 1e-5);
  /* sums of rows of O(1) terms in another order: f32's error grows with the row count */
  double atol = rows > 100 ? 4e-4 : 1e-5;
  close_enough ("norm dw", tdw, dw, 1e-4, atol);
  if (layer)
    close_enough ("norm db", tdb, db, 1e-4, atol);
}

static void
run_norm (gboolean layer, gboolean plus_one)
{
  /* the row sums by workgroup trees, then by subgroup reductions (HN_NORM_SG_REDUCE=1) */
  for (int sg = 0; sg < 2; sg++)
    {
      if (sg)
        g_setenv ("HN_NORM_SG_REDUCE", "1", TRUE);
      run_norm_rows (layer, plus_one, 70);
      run_norm_rows (layer, plus_one, 64 * 41 + 13);
      g_unsetenv ("HN_NORM_SG_REDUCE");
    }
}

static void test_rmsnorm_back (void) { run_norm (FALSE, FALSE); run_norm (FALSE, TRUE); }
static void test_layernorm_back (void) { run_norm (TRUE, FALSE); }

/* F = 101: one element per invocation; F = 100: glu_back's 16-byte path */
static void
run_activations_back (gint64 F)
{
  g_autoptr (GError) error = NULL;
  gint64 rows = 3, n = rows * F;
  for (int act = HN_ACT_IDENTITY; act <= HN_ACT_TANH; act++)
    {
      g_autofree float *dy = rnd (n, 1), *g = rnd (2 * n, 4), *u = rnd (n, 1);
      g_autofree float *dx = g_new (float, n), *dgate = g_new (float, n), *dup = g_new (float, n);
      hn_ref_unary_back (dy, g, n, act, dx);
      hn_ref_glu_back (dy, g, u, n, act, dgate, dup);
      g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { rows, F }, dy), tg = tens (2, (gint64[]) { rows, F }, g);
      g_autoptr (HnTensor) tu = tens (2, (gint64[]) { rows, F }, u), tdx = tens (2, (gint64[]) { rows, F }, NULL);
      g_autoptr (HnTensor) tdg = tens (2, (gint64[]) { rows, F }, NULL), tdu = tens (2, (gint64[]) { rows, F }, NULL);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_unary_back (cmd, tdx, tdy, tg, act, 0, &error));
      g_assert_true (hn_op_glu_back (cmd, tdg, tdu, tdy, tg, tu, act, &error));
      g_assert_no_error (error);
      run (cmd);
      g_autofree char *what = g_strdup_printf ("activation %d", act);
      close_enough (what, tdx, dx, 1e-4, 1e-5);
      close_enough (what, tdg, dgate, 1e-4, 1e-5);
      close_enough (what, tdu, dup, 1e-4, 1e-5);
      if (F % 4 == 0)
        {
          /* f16 gradients: the f32 ones, rounded once */
          g_autoptr (HnTensor) tg16 = hn_tensor_new (ctx, HN_DTYPE_F16, 2, (gint64[]) { rows, F }, &error);
          g_autoptr (HnTensor) tu16 = hn_tensor_new (ctx, HN_DTYPE_F16, 2, (gint64[]) { rows, F }, &error);
          g_assert_true (hn_op_glu_back (cmd, tg16, tu16, tdy, tg, tu, act, &error));
          g_assert_no_error (error);
          run (cmd);
          g_autofree float *wg = down (tdg), *wu = down (tdu);
          for (gint64 i = 0; i < n; i++)
            {
              wg[i] = hn_f16_to_f32 (hn_f32_to_f16 (wg[i]));
              wu[i] = hn_f16_to_f32 (hn_f32_to_f16 (wu[i]));
            }
          close_enough ("glu_back f16 dgate", tg16, wg, 1e-3, 1e-7);
          close_enough ("glu_back f16 dup", tu16, wu, 1e-3, 1e-7);
        }

      /* fused gate_up [rows, 2F]: gate half then up half */
      g_autofree float *fused = g_new (float, 2 * n);
      for (gint64 r = 0; r < rows; r++)
        {
          memcpy (fused + r * 2 * F, g + r * F, sizeof (float) * F);
          memcpy (fused + r * 2 * F + F, u + r * F, sizeof (float) * F);
        }
      g_autoptr (HnTensor) tf = tens (2, (gint64[]) { rows, 2 * F }, fused);
      g_autoptr (HnTensor) tdf = tens (2, (gint64[]) { rows, 2 * F }, NULL);
      g_assert_true (hn_op_glu_back (cmd, tdf, NULL, tdy, tf, NULL, act, &error));
      run (cmd);
      g_autofree float *df = down (tdf);
      for (gint64 r = 0; r < rows; r++)
        for (gint64 f = 0; f < F; f++)
          {
            g_assert_cmpfloat_with_epsilon (df[r * 2 * F + f], dgate[r * F + f], 1e-5 + 1e-4 * fabsf (dgate[r * F + f]));
            g_assert_cmpfloat_with_epsilon (df[r * 2 * F + F + f], dup[r * F + f], 1e-5 + 1e-4 * fabsf (dup[r * F + f]));
          }
    }
}

static void
test_activations_back (void)
{
  run_activations_back (101);
  run_activations_back (100);
}

static void
test_embedding_back (void)
{
  g_autoptr (GError) error = NULL;
  gint64 n = 11, D = 70, V = 9;
  gint32 ids[11] = { 3, 0, 8, 3, 3, 1, 8, 2, 0, 7, 5 };
  g_autofree float *dy = rnd (n * D, 1), *dt0 = rnd (V * D, 1);
  g_autofree float *dt = g_memdup2 (dt0, sizeof (float) * V * D);
  hn_ref_embedding_back (dy, ids, n, D, V, dt);
  g_autoptr (HnTensor) tdy = tens (2, (gint64[]) { n, D }, dy), tdt = tens (2, (gint64[]) { V, D }, dt0);
  g_autoptr (HnTensor) tid = tens_i32 (n, ids);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_embedding_back (cmd, tdt, tdy, tid, &error));
  run (cmd);
  close_enough ("embedding dtable", tdt, dt, 1e-5, 1e-5);

  /* grouped on the host: more columns than a workgroup, repeated ids, ids
   * outside the table left out; the same bits as the per-column kernel */
  gint64 n2 = 600, D2 = 300, V2 = 37;
  g_autofree gint32 *ids2 = g_new (gint32, n2);
  for (gint64 i = 0; i < n2; i++)
    ids2[i] = i % 97 == 5 ? -1 : i % 89 == 3 ? (gint32) V2 : g_test_rand_int_range (0, (gint32) V2 - 5);
  g_autofree gint32 *grp = g_new0 (gint32, HN_EMBEDDING_GROUPS_LEN (n2));
  guint G = hn_embedding_groups (ids2, n2, V2, grp);
  g_assert_cmpuint (G, <=, V2 - 5);
  g_assert_cmpint (grp[0], ==, G);
  g_assert_cmpint (grp[1 + G], ==, n2 - (n2 + 91) / 97 - (n2 + 85) / 89);
  g_autofree float *dy2 = rnd (n2 * D2, 1), *t0 = rnd (V2 * D2, 1);
  g_autofree float *want = g_memdup2 (t0, sizeof (float) * V2 * D2);
  g_autoptr (HnTensor) tdy2 = tens (2, (gint64[]) { n2, D2 }, dy2), ta = tens (2, (gint64[]) { V2, D2 }, t0);
  g_autoptr (HnTensor) tb = tens (2, (gint64[]) { V2, D2 }, t0), tid2 = tens_i32 (n2, ids2);
  g_autoptr (HnTensor) tg = tens_i32 (HN_EMBEDDING_GROUPS_LEN (n2), grp);
  g_assert_true (hn_op_embedding_back (cmd, ta, tdy2, tid2, &error));
  g_assert_true (hn_op_embedding_back_grouped (cmd, tb, tdy2, tg, &error));
  g_assert_no_error (error);
  run (cmd);
  for (gint64 i = 0; i < n2; i++)
    if (ids2[i] >= 0 && ids2[i] < V2)
      for (gint64 c = 0; c < D2; c++)
        want[ids2[i] * D2 + c] += dy2[i * D2 + c];
  g_autofree float *a = down (ta), *b = down (tb);
  g_assert_cmpmem (a, sizeof (float) * V2 * D2, b, sizeof (float) * V2 * D2);
  close_enough ("embedding dtable (grouped)", tb, want, 0, 0);
}

static void
test_cross_entropy_back (void)
{
  g_autoptr (GError) error = NULL;
  gint64 N = 6, V = 517;
  gint32 tg[6] = { 5, -100, 0, 516, 44, -100 };
  float w[6] = { 1, 1, 2, 0.5f, 1, 1 };
  g_autofree float *lg = rnd (N * V, 4), *dl = g_new (float, N * V);
  double loss = hn_ref_cross_entropy_loss (lg, tg, w, N, V, -100, 0.7f, dl);
  g_assert_true (isfinite (loss));
  /* row scales as the trainer computes them on the host */
  double wsum = 0;
  for (int i = 0; i < N; i++)
    wsum += tg[i] != -100 ? w[i] : 0;
  float rs[6];
  for (int i = 0; i < N; i++)
    rs[i] = tg[i] != -100 ? (float) (0.7 * w[i] / wsum) : 0.0f;
  g_autoptr (HnTensor) tl = tens (2, (gint64[]) { N, V }, lg), trs = tens (1, (gint64[]) { N }, rs);
  g_autoptr (HnTensor) tt = tens_i32 (N, tg);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_cross_entropy_back (cmd, tl, tl, tt, trs, &error)); /* in place */
  run (cmd);
  close_enough ("cross-entropy dlogits (in place)", tl, dl, 1e-4, 1e-7);
}

/* hn_op_cross_entropy_grad against the reference loss and gradient: in
 * place on a V of 517 (the scalar loads), out of place on a V of 1024 (16-byte
 * loads), and its f16 gradient (as the f32 one, rounded once) */
static void
test_cross_entropy_grad (void)
{
  g_autoptr (GError) error = NULL;
  gint64 N = 6;
  gint32 tg[6] = { 5, -100, 0, 516, 44, 1023 };
  float w[6] = { 1, 1, 2, 0.5f, 1, 1 };
  for (int pass = 0; pass < 3; pass++)
    {
      gint64 V = pass == 0 ? 517 : 1024;
      tg[5] = pass == 0 ? -100 : 1023;
      g_autofree float *lg = rnd (N * V, 4), *dl = g_new (float, N * V), *lref = g_new (float, N);
      /* a large logit: the running max of its invocation grows late */
      lg[3 * V + V - 2] = 30.0f;
      hn_ref_cross_entropy (lref, NULL, lg, tg, N, V, -100);
      g_assert_true (isfinite (hn_ref_cross_entropy_loss (lg, tg, w, N, V, -100, 0.7f, dl)));
      double wsum = 0;
      for (int i = 0; i < N; i++)
        wsum += tg[i] != -100 ? w[i] : 0;
      float rs[6];
      for (int i = 0; i < N; i++)
        rs[i] = tg[i] != -100 ? (float) (0.7 * w[i] / wsum) : 0.0f;
      g_autoptr (HnTensor) tl = tens (2, (gint64[]) { N, V }, lg), trs = tens (1, (gint64[]) { N }, rs);
      g_autoptr (HnTensor) tt = tens_i32 (N, tg), tloss = tens (1, (gint64[]) { N }, NULL);
      g_autoptr (HnTensor) out = pass == 0 ? hn_tensor_ref (tl)
                                 : hn_tensor_new (ctx, pass == 1 ? HN_DTYPE_F32 : HN_DTYPE_F16, 2,
                                                  (gint64[]) { N, V }, &error);
      g_assert_no_error (error);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_cross_entropy_grad (cmd, tloss, out, tl, tt, trs, -100, &error));
      g_assert_no_error (error);
      run (cmd);
      close_enough ("cross-entropy-grad loss", tloss, lref, 1e-5, 1e-6);
      if (pass == 2)
        for (gint64 i = 0; i < N * V; i++)
          dl[i] = hn_f16_to_f32 (hn_f32_to_f16 (dl[i]));
      close_enough (pass == 0 ? "cross-entropy-grad dlogits (in place)" : "cross-entropy-grad dlogits", out, dl,
                    pass == 2 ? 2e-3 : 1e-4, 1e-7);
    }
  /* f16 logits (the LM head's output stored f16 under fp16 autocast) against the same values in
   * f32: the same loss and gradient bits, f16 gradient under autocast and f32 without */
  {
    gint64 V = 1024;
    tg[5] = 1023;
    g_autofree float *lg = rnd (N * V, 6);
    lg[2 * V + 7] = 1e6f; /* Inf in f16: the loss of its row as the f32 Inf gives it */
    for (gint64 i = 0; i < N * V; i++)
      lg[i] = hn_f16_to_f32 (hn_f32_to_f16 (lg[i]));
    float rs[6] = { 0.1f, 0, 0.2f, 0.3f, 0.05f, 0.15f };
    g_autoptr (HnTensor) l32 = tens (2, (gint64[]) { N, V }, lg), l16 = tens16 (2, (gint64[]) { N, V }, lg, lg);
    g_autoptr (HnTensor) trs = tens (1, (gint64[]) { N }, rs), tt = tens_i32 (N, tg);
    for (int autocast = 0; autocast < 2; autocast++)
      {
        HnDType ddt = autocast ? HN_DTYPE_F16 : HN_DTYPE_F32;
        g_autoptr (HnTensor) d32 = hn_tensor_new (ctx, ddt, 2, (gint64[]) { N, V }, &error);
        g_autoptr (HnTensor) d16 = hn_tensor_new (ctx, ddt, 2, (gint64[]) { N, V }, &error);
        g_autoptr (HnTensor) ls32 = tens (1, (gint64[]) { N }, NULL), ls16 = tens (1, (gint64[]) { N }, NULL);
        g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
        hn_cmd_set_autocast (cmd, autocast ? HN_AUTOCAST_F16 : HN_AUTOCAST_NONE);
        g_assert_true (hn_op_cross_entropy_grad (cmd, ls32, d32, l32, tt, trs, -100, &error));
        g_assert_true (hn_op_cross_entropy_grad (cmd, ls16, d16, l16, tt, trs, -100, &error));
        g_assert_no_error (error);
        run (cmd);
        gsize db = (autocast ? 2 : 4) * (gsize) N * V;
        g_autofree guint8 *a = g_malloc (db), *b = g_malloc (db);
        g_autofree float *la = down (ls32), *lb = down (ls16);
        g_assert_true (hn_tensor_download_raw (d32, a, db, &error) && hn_tensor_download_raw (d16, b, db, &error));
        g_assert_cmpmem (a, db, b, db);
        g_assert_cmpmem (la, sizeof (float) * N, lb, sizeof (float) * N);
      }
  }
  /* an f16 gradient needs 4-element rows; an f16 one cannot be in place */
  g_autoptr (HnTensor) tl = tens (2, (gint64[]) { 2, 517 }, NULL), tt = tens_i32 (2, (gint32[]) { 0, 1 });
  g_autoptr (HnTensor) trs = tens (1, (gint64[]) { 2 }, NULL), tloss = tens (1, (gint64[]) { 2 }, NULL);
  g_autoptr (HnTensor) o16 = hn_tensor_new (ctx, HN_DTYPE_F16, 2, (gint64[]) { 2, 517 }, &error);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_false (hn_op_cross_entropy_grad (cmd, tloss, o16, tl, tt, trs, -100, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_rope_back (void)
{
  g_autoptr (GError) error = NULL;
  gint64 T = 7;
  int H = 3, D = 12, rot = 8;
  gint32 pos[7], neg[7];
  for (int i = 0; i < T; i++)
    {
      pos[i] = 2 + 3 * i;
      neg[i] = -pos[i];
    }
  float inv[4];
  for (int i = 0; i < rot / 2; i++)
    inv[i] = powf (10000.0f, -2.0f * i / rot);
  for (int style = HN_ROPE_NEOX; style <= HN_ROPE_GPTJ; style++)
    {
      g_autofree float *dy = rnd (T * H * D, 1), *dx = g_new (float, T * H * D);
      hn_ref_rope_back (dy, pos, inv, T, H, D, rot, style, 1.25f, dx);
      g_autoptr (HnTensor) tdy = tens (3, (gint64[]) { T, H, D }, dy), tdx = tens (3, (gint64[]) { T, H, D }, NULL);
      g_autoptr (HnTensor) tneg = tens_i32 (T, neg), tinv = tens (1, (gint64[]) { rot / 2 }, inv);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_rope_back (cmd, tdx, tdy, tneg, tinv, rot, style, 1.25f, &error));
      run (cmd);
      close_enough ("rope dx", tdx, dx, 1e-4, 1e-5);
    }
}

static void
run_attention (int B, int T, int H, int KVH, int D, gboolean causal, float softcap, gint64 window, gboolean alibi)
{
  g_autoptr (GError) error = NULL;
  float slopes[8] = { 0.5f, 0.25f, 0.125f, 0.0625f, 0.03f, 0.02f, 0.01f, 0.005f };
  HnRefAttnShape s = { B, T, T, H, KVH, D, D, 0, softcap, causal, 0, window, alibi ? slopes : NULL };
  gint64 nq = (gint64) B * T * H * D, nk = (gint64) B * T * KVH * D;
  g_autofree float *q = rnd (nq, 1.5f), *k = rnd (nk, 1.5f), *v = rnd (nk, 1), *dout = rnd (nq, 1);
  g_autofree float *dq = g_new (float, nq), *dk = g_new (float, nk), *dv = g_new (float, nk);
  hn_ref_attention_back (&s, q, k, v, dout, dq, dk, dv);
  g_autoptr (HnTensor) tq = tens (4, (gint64[]) { B, T, H, D }, q), tk = tens (4, (gint64[]) { B, T, KVH, D }, k);
  g_autoptr (HnTensor) tv = tens (4, (gint64[]) { B, T, KVH, D }, v), tdo = tens (4, (gint64[]) { B, T, H, D }, dout);
  g_autoptr (HnTensor) tdq = tens (4, (gint64[]) { B, T, H, D }, NULL), tdk = tens (4, (gint64[]) { B, T, KVH, D }, NULL);
  g_autoptr (HnTensor) tdv = tens (4, (gint64[]) { B, T, KVH, D }, NULL);
  g_autoptr (HnTensor) st = tens (1, (gint64[]) { 2 * B * T * H }, NULL);
  g_autoptr (HnTensor) tsl = tens (1, (gint64[]) { H }, slopes);
  HnAttentionParams p = { 0 };
  p.causal = causal;
  p.softcap = softcap;
  p.window = window;
  p.alibi_slopes = alibi ? tsl : NULL;
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_attention_back (cmd, tdq, tdk, tdv, tdo, tq, tk, tv, st, &p, 0, &error));
  g_assert_no_error (error);
  run (cmd);
  close_enough ("attention dq", tdq, dq, 1e-4, 1e-5);
  close_enough ("attention dk", tdk, dk, 1e-4, 1e-5);
  close_enough ("attention dv", tdv, dv, 1e-4, 1e-5);
}

static void
test_attention_back (void)
{
  run_attention (2, 9, 4, 2, 8, TRUE, 0, 0, FALSE);
  run_attention (1, 5, 3, 3, 6, FALSE, 0, 0, FALSE);
  run_attention (2, 7, 4, 1, 8, TRUE, 2.0f, 3, TRUE);
  /* several query and key blocks of the tiled kernels; head dim 130: the per-row kernels */
  run_attention (1, 37, 4, 2, 16, TRUE, 0, 0, FALSE);
  run_attention (2, 20, 2, 2, 33, FALSE, 3.0f, 0, TRUE);
  run_attention (1, 40, 2, 1, 8, TRUE, 0, 11, FALSE);
  run_attention (1, 6, 2, 2, 130, TRUE, 0, 0, FALSE);
}

static void
test_adamw_sgd (void)
{
  g_autoptr (GError) error = NULL;
  gint64 n = 5000; /* > one workgroup row of 4096 for sumsq */
  g_autofree float *p = rnd (n, 1), *g = rnd (n, 1), *m = rnd (n, 0.1f), *v = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    v[i] = (float) g_test_rand_double_range (0, 0.01);
  g_autoptr (HnTensor) tp = tens (1, (gint64[]) { n }, p), tg = tens (1, (gint64[]) { n }, g);
  g_autoptr (HnTensor) tm = tens (1, (gint64[]) { n }, m), tv = tens (1, (gint64[]) { n }, v);
  g_autoptr (HnTensor) parts = tens (1, (gint64[]) { 8 }, NULL);
  HnAdamwScalars s;
  hn_adamw_scalars (&s, 3, 0.01, 0.9, 0.999, 1e-8, 0.1);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_cmpuint (hn_sumsq_n_partials (n), ==, 2);
  g_assert_true (hn_op_sumsq_partials (cmd, parts, 3, tg, &error));
  g_assert_true (hn_op_adamw (cmd, tp, tg, tm, tv, &s, 0.5f, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree float *gs = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    gs[i] = g[i] * 0.5f;
  hn_adamw_step_cpu (p, gs, m, v, n, 3, 0.01, 0.9, 0.999, 1e-8, 0.1);
  close_enough ("adamw param", tp, p, 1e-6, 1e-7);
  close_enough ("adamw m", tm, m, 1e-6, 1e-8);
  close_enough ("adamw v", tv, v, 1e-6, 1e-9);
  g_autofree float *pp = down (parts);
  g_assert_cmpfloat_with_epsilon ((double) pp[3] + pp[4], hn_ref_sumsq (g, n), 1e-3);
  g_assert_cmpfloat (pp[5], ==, 0.0f);

  /* the f16 copy beside the update (an odd count: the last word's pad half),
   * and the cast it is made with first */
  gint64 n2 = 1001;
  g_autofree float *p2 = rnd (n2, 1), *big = g_new (float, n2);
  for (gint64 i = 0; i < n2; i++)
    big[i] = i == 7 ? 70000.0f : i == 8 ? -1e6f : p2[i];
  g_autoptr (HnTensor) tp2 = tens (1, (gint64[]) { n2 }, p2), tq2 = tens (1, (gint64[]) { n2 }, p2);
  g_autoptr (HnTensor) tbig = tens (1, (gint64[]) { n2 }, big);
  g_autoptr (HnTensor) tg2 = tens (1, (gint64[]) { n2 }, g), tm2 = tens (1, (gint64[]) { n2 }, m);
  g_autoptr (HnTensor) tv2 = tens (1, (gint64[]) { n2 }, v), tm3 = tens (1, (gint64[]) { n2 }, m);
  g_autoptr (HnTensor) tv3 = tens (1, (gint64[]) { n2 }, v);
  g_autoptr (HnTensor) h16 = tens16 (1, (gint64[]) { n2 }, NULL, NULL), c16 = tens16 (1, (gint64[]) { n2 }, NULL, NULL);
  g_assert_true (hn_op_cast_f16 (cmd, c16, tbig, &error));
  g_assert_true (hn_op_adamw (cmd, tp2, tg2, tm2, tv2, &s, 0.5f, &error));
  g_assert_true (hn_op_adamw_f16 (cmd, tq2, h16, tg2, tm3, tv3, &s, 0.5f, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree float *a2 = down (tp2);
  close_enough ("adamw_f16 param", tq2, a2, 1e-6, 1e-7);
  g_autofree float *m2 = down (tm2);
  close_enough ("adamw_f16 m", tm3, m2, 0, 0);
  g_autofree guint16 *hb = g_new (guint16, n2), *cb = g_new (guint16, n2);
  hn_tensor_download_raw (h16, hb, sizeof (guint16) * n2, &error);
  hn_tensor_download_raw (c16, cb, sizeof (guint16) * n2, &error);
  g_assert_no_error (error);
  g_autofree float *q2 = down (tq2);
  for (gint64 i = 0; i < n2; i++)
    {
      g_assert_cmpuint (hb[i], ==, hn_f32_to_f16 (q2[i]));
      if (i == 7 || i == 8)
        g_assert_true (isinf (hn_f16_to_f32 (cb[i])) && (hn_f16_to_f32 (cb[i]) < 0) == (i == 8));
      else
        g_assert_cmpuint (cb[i], ==, hn_f32_to_f16 (big[i]));
    }

  g_autoptr (HnTensor) tb = tens (1, (gint64[]) { n }, NULL);
  g_autofree float *buf = g_new0 (float, n);
  for (int step = 0; step < 2; step++)
    {
      g_assert_true (hn_op_sgd (cmd, tp, tg, tb, 0.1f, 0.9f, 0.01f, step == 0, 1.0f, &error));
      run (cmd);
      hn_sgd_step_cpu (p, g, buf, n, step == 0, 0.1, 0.9, 0.01);
    }
  close_enough ("sgd param", tp, p, 1e-6, 1e-6);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      return 77; /* skipped */
    }
  g_test_add_func ("/back-ops/matmul", test_matmul_back);
  g_test_add_func ("/back-ops/lora-expand", test_lora_expand);
  g_test_add_func ("/back-ops/lora-down", test_lora_down);
  g_test_add_func ("/back-ops/matmul-f16", test_matmul_back_f16);
  g_test_add_func ("/back-ops/lora-autocast", test_lora_autocast);
  g_test_add_func ("/back-ops/lora-rows-w16", test_lora_rows_w16);
  g_test_add_func ("/back-ops/matmul-f16-act", test_matmul_back_f16_act);
  g_test_add_func ("/back-ops/cast-f16-cols-bias", test_cast_f16_cols_bias);
  g_test_add_func ("/back-ops/rmsnorm", test_rmsnorm_back);
  g_test_add_func ("/back-ops/layernorm", test_layernorm_back);
  g_test_add_func ("/back-ops/activations", test_activations_back);
  g_test_add_func ("/back-ops/embedding", test_embedding_back);
  g_test_add_func ("/back-ops/cross-entropy", test_cross_entropy_back);
  g_test_add_func ("/back-ops/cross-entropy-grad", test_cross_entropy_grad);
  g_test_add_func ("/back-ops/rope", test_rope_back);
  g_test_add_func ("/back-ops/attention", test_attention_back);
  g_test_add_func ("/back-ops/adamw-sgd", test_adamw_sgd);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
