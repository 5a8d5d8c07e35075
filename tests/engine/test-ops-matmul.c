/* matmul (x·Wᵀ, tiled and matrix-vector paths, f32/f16/bf16 weights, bias)
 * and batched matmul with transposes, broadcasting and accumulation. */
#include "ops-test-common.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

/* Tolerance for a dot product of length K: 1e-5 relative to the sum of the
 * absolute terms (what f32 accumulation in another order can change). */
/* What the tensor-core path feeds the multiplier: f16, clamped. */
static float *
round_f16_copy (const float *v, gint64 n)
{
  float *r = g_new (float, MAX (n, 1));
  for (gint64 i = 0; i < n; i++)
    r[i] = hn_f16_to_f32 (hn_f32_to_f16 (CLAMP (v[i], -65504.0f, 65504.0f)));
  return r;
}

static void
check_matmul (const char *what, const float *got, const float *x, const float *w, const float *bias, const float *ref,
              gint64 M, gint64 N, gint64 K, double rtol)
{
  g_autofree float *absref = g_new (float, M * N);
  g_autofree float *ax = g_new (float, M * K), *aw = g_new (float, N * K), *ab = NULL;
  for (gint64 i = 0; i < M * K; i++)
    ax[i] = fabsf (x[i]);
  for (gint64 i = 0; i < N * K; i++)
    aw[i] = fabsf (w[i]);
  if (bias)
    {
      ab = g_new (float, N);
      for (gint64 i = 0; i < N; i++)
        ab[i] = fabsf (bias[i]);
    }
  hn_ref_matmul (absref, ax, aw, ab, M, N, K);
  for (gint64 i = 0; i < M * N; i++)
    {
      double err = fabs ((double) got[i] - ref[i]);
      if (!(err <= rtol * absref[i] + 1e-30))
        {
          g_test_fail_printf ("%s: element %" G_GINT64_FORMAT " (m %" G_GINT64_FORMAT ", n %" G_GINT64_FORMAT
                              ") is %.9g, reference %.9g", what, i, i / N, i % N, got[i], ref[i]);
          return;
        }
    }
}

static void
run_matmul (HnDType wdt, gint64 M, gint64 N, gint64 K, gboolean with_bias, gboolean three_d)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random (M * K, -1, 1), *w = hn_test_random (N * K, -1, 1);
  g_autofree float *b = with_bias ? hn_test_random (N, -1, 1) : NULL;
  g_autoptr(HnTensor) tx = three_d && M % 2 == 0 ? hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 2, M / 2, K }, x)
                                                 : hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, w);
  g_autoptr(HnTensor) tb = b ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b) : NULL;
  g_autoptr(HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_matmul (cmd, ty, tx, tw, tb, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (ty);
  g_autofree float *ref = g_new (float, M * N);
  /* On the tensor-core path both operands are rounded to f16: the reference
   * gets the same inputs, and the accumulation tolerance is wider. */
  gboolean rp = hn_op_matmul_reduced_precision (ctx, wdt, M, 0);
  g_autofree float *xr = rp ? round_f16_copy (x, M * K) : g_memdup2 (x, sizeof (float) * M * K);
  g_autofree float *wr = rp ? round_f16_copy (w, N * K) : g_memdup2 (w, sizeof (float) * N * K);
  hn_ref_matmul (ref, xr, wr, b, M, N, K);
  g_autofree char *what = g_strdup_printf ("matmul %s M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%" G_GINT64_FORMAT "%s",
                                           hn_dtype_name (wdt), M, N, K, rp ? " (tensor cores)" : "");
  check_matmul (what, got, xr, wr, b, ref, M, N, K, rp ? 2e-4 : 1e-5);
}

static void
test_matmul_f32 (void)
{
  /* odd sizes, sizes above one 64x64 tile, the matrix-vector path (M <= 8) */
  run_matmul (HN_DTYPE_F32, 1, 1, 1, FALSE, FALSE);
  run_matmul (HN_DTYPE_F32, 1, 37, 129, TRUE, FALSE);
  run_matmul (HN_DTYPE_F32, 5, 70, 33, FALSE, FALSE);
  run_matmul (HN_DTYPE_F32, 8, 3, 300, TRUE, FALSE);
  run_matmul (HN_DTYPE_F32, 9, 65, 17, TRUE, FALSE);
  run_matmul (HN_DTYPE_F32, 67, 131, 45, TRUE, TRUE);
  run_matmul (HN_DTYPE_F32, 130, 64, 64, FALSE, TRUE);
  run_matmul (HN_DTYPE_F32, 33, 7, 250, FALSE, FALSE);
  /* K a multiple of 8: the vectorised matrix-vector path */
  run_matmul (HN_DTYPE_F32, 1, 67, 64, TRUE, FALSE);
  run_matmul (HN_DTYPE_F32, 6, 5, 520, FALSE, TRUE);
  /* tall (>= 16384 rows, not a multiple of 8): 8 rows per workgroup */
  run_matmul (HN_DTYPE_F32, 1, 16389, 16, TRUE, FALSE);
  run_matmul (HN_DTYPE_F32, 3, 16387, 24, FALSE, FALSE);
}

static void
test_matmul_f16_bf16 (void)
{
  /* weights are rounded to 16 bits on upload and the reference uses the
   * rounded values, so the f32-accumulation tolerance still holds */
  for (int d = 0; d < 2; d++)
    {
      HnDType dt = d ? HN_DTYPE_BF16 : HN_DTYPE_F16;
      run_matmul (dt, 1, 41, 77, TRUE, FALSE);
      run_matmul (dt, 3, 16, 31, FALSE, FALSE);
      run_matmul (dt, 71, 67, 35, TRUE, TRUE);
      run_matmul (dt, 12, 5, 1, FALSE, FALSE);
      run_matmul (dt, 1, 131, 256, TRUE, FALSE);
      run_matmul (dt, 7, 9, 8, FALSE, FALSE);
      run_matmul (dt, 2, 3, 1024, TRUE, TRUE);
      run_matmul (dt, 1, 16389, 64, FALSE, FALSE);
      run_matmul (dt, 2, 16387, 16, TRUE, FALSE);
      run_matmul (dt, 200, 130, 96, TRUE, TRUE);
      run_matmul (dt, 136, 132, 64, FALSE, FALSE); /* whole aligned blocks: direct stores on tensor cores */
      /* several tiles of each size, K not a multiple of 64 (the clamped
       * edges of the cooperative-matrix-2 kernel), and K a multiple of 64 */
      run_matmul (dt, 257, 515, 130, TRUE, TRUE);
      run_matmul (dt, 256, 512, 192, FALSE, FALSE);
      run_matmul (dt, 129, 40, 1000, TRUE, FALSE);
    }
}

/* The fused decode kernels: y += alpha·(x·Wᵀ + b) and act(x·Gᵀ + bg)·(x·Uᵀ + bu). */
static void
run_matvec_fused (HnDType wdt, gint64 M, gint64 N, gint64 K, gboolean with_bias)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  if (!hn_op_matvec_available (cmd, M))
    return;
  g_autofree float *x = hn_test_random (M * K, -1, 1), *w = hn_test_random (N * K, -1, 1);
  g_autofree float *u = hn_test_random (N * K, -1, 1), *y0 = hn_test_random (M * N, -1, 1);
  g_autofree float *b = with_bias ? hn_test_random (N, -1, 1) : NULL, *bu = with_bias ? hn_test_random (N, -1, 1) : NULL;
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, w);
  g_autoptr(HnTensor) tu = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, u);
  g_autoptr(HnTensor) tb = b ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b) : NULL;
  g_autoptr(HnTensor) tbu = bu ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, bu) : NULL;
  g_autoptr(HnTensor) ty = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, N }, y0);
  g_autoptr(HnTensor) tg = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_assert_true (hn_op_matvec_add (cmd, ty, tx, tw, tb, 0.75f, &error));
  g_assert_true (hn_op_matvec_glu (cmd, tg, tx, NULL, tw, tb, tu, tbu, HN_ACT_SILU, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *gy = hn_test_download (ty), *gg = hn_test_download (tg);
  g_autofree float *rw = g_new (float, M * N), *ru = g_new (float, M * N), *ref = g_new (float, M * N);
  hn_ref_matmul (rw, x, w, b, M, N, K);
  hn_ref_matmul (ru, x, u, bu, M, N, K);
  for (gint64 i = 0; i < M * N; i++)
    ref[i] = y0[i] + 0.75f * rw[i];
  g_autofree char *what = g_strdup_printf ("matvec %s M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%" G_GINT64_FORMAT,
                                           hn_dtype_name (wdt), M, N, K);
  /* dot products of K terms in [-1, 1]: 1e-5 relative to K */
  hn_test_assert_close (what, gy, ref, M * N, 1e-5, 1e-5 * K);
  hn_ref_glu (ref, rw, ru, M, N, HN_ACT_SILU);
  g_autofree char *wg = g_strdup_printf ("%s glu", what);
  hn_test_assert_close (wg, gg, ref, M * N, 1e-5, 1e-5 * K * (1 + K));

  /* with the RMSNorm inside (weight, 1 + weight, none) against rmsnorm then matmul */
  for (int f = 0; f < 3; f++)
    {
      g_autofree float *gn = hn_test_random (K, 0.5, 1.5);
      g_autoptr(HnTensor) tgn = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { K }, gn);
      HnMatvecNorm nrm = { f == 2 ? NULL : tgn, 1e-5f, f == 1 };
      g_autoptr(HnTensor) tn = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
      g_autoptr(HnTensor) tng = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
      g_autoptr(HnCmd) c2 = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_matvec_normed (c2, tn, tx, &nrm, tw, tb, &error));
      g_assert_true (hn_op_matvec_glu (c2, tng, tx, &nrm, tw, tb, tu, tbu, HN_ACT_SILU, &error));
      g_assert_no_error (error);
      hn_test_run (c2);
      g_autofree float *gnorm = hn_test_download (tn), *gnglu = hn_test_download (tng);
      g_autofree float *xn = g_new (float, M * K);
      hn_ref_rmsnorm (xn, x, nrm.weight ? gn : NULL, M, K, 1e-5f, f == 1 ? HN_NORM_WEIGHT_PLUS_ONE : HN_NORM_DEFAULT);
      double scale = 2.5 * hn_test_max_abs (xn, M * K) * K; /* bound of |terms| summed */
      hn_ref_matmul (rw, xn, w, b, M, N, K);
      hn_ref_matmul (ru, xn, u, bu, M, N, K);
      g_autofree char *wn = g_strdup_printf ("%s normed %d", what, f);
      hn_test_assert_close (wn, gnorm, rw, M * N, 1e-5, 1e-6 * scale);
      hn_ref_glu (ref, rw, ru, M, N, HN_ACT_SILU);
      g_autofree char *wng = g_strdup_printf ("%s normed glu %d", what, f);
      hn_test_assert_close (wng, gnglu, ref, M * N, 1e-5, 1e-6 * scale * (1 + scale));
    }
}

static void
test_matvec_fused (void)
{
  /* each case compiles its own kernels on lavapipe: few, covering vector and scalar loads, M = 1
   * and M > 1, each weight dtype */
  run_matvec_fused (HN_DTYPE_BF16, 1, 37, 64, TRUE);   /* vector loads, odd N */
  run_matvec_fused (HN_DTYPE_BF16, 3, 20, 56, TRUE);   /* M > 1 */
  run_matvec_fused (HN_DTYPE_BF16, 8, 5, 33, FALSE);   /* scalar path (K odd) */
  run_matvec_fused (HN_DTYPE_F16, 1, 9, 1000, FALSE);  /* several unrolled chunks */
  run_matvec_fused (HN_DTYPE_F32, 1, 3, 7, TRUE);
  run_matvec_fused (HN_DTYPE_F32, 2, 11, 48, FALSE);
  /* one row with vector loads (matvec_wide.comp): f32 over several chunks per invocation and a
   * partial last workgroup; then an odd row count with 3 chunks in flight and a masked tail */
  run_matvec_fused (HN_DTYPE_F32, 1, 13, 2056, TRUE);
  g_setenv ("HN_MATVEC_WIDE", "32,3,3", TRUE);
  run_matvec_fused (HN_DTYPE_BF16, 1, 10, 1000, TRUE);
  g_unsetenv ("HN_MATVEC_WIDE");
  /* errors: too many rows, mismatched dtypes */
  g_autoptr(GError) error = NULL;
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_autofree float *x = hn_test_random (9 * 8, -1, 1), *w = hn_test_random (4 * 8, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 9, 8 }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 4, 8 }, w);
  g_autoptr(HnTensor) th = hn_test_tensor (HN_DTYPE_BF16, 2, (gint64[]) { 4, 8 }, w);
  g_autoptr(HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 9, 4 });
  g_assert_false (hn_op_matvec_add (cmd, ty, tx, tw, NULL, 1.0f, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_autoptr(HnTensor) x1 = hn_tensor_view_rows (tx, 0, 1, &error);
  g_autoptr(HnTensor) y1 = hn_tensor_view_rows (ty, 0, 1, &error);
  g_assert_false (hn_op_matvec_glu (cmd, y1, x1, NULL, tw, NULL, th, NULL, HN_ACT_SILU, &error));
  g_assert_nonnull (error);
  hn_cmd_reset (cmd);
}

static void
test_matmul_errors (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autoptr(HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 8 });
  g_autoptr(HnTensor) w = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 5, 7 });
  g_autoptr(HnTensor) y = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 5 });
  g_autoptr(HnTensor) wi = hn_test_empty (HN_DTYPE_I32, 2, (gint64[]) { 5, 8 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  hn_tensor_set_name (w, "blk.0.ffn_up");
  g_assert_false (hn_op_matmul (cmd, y, x, w, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "blk.0.ffn_up"));
  g_clear_error (&error);
  g_assert_false (hn_op_matmul (cmd, y, x, wi, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_false (hn_op_matmul (cmd, x, x, w, NULL, &error));
  g_assert_nonnull (error);
  g_assert_cmpuint (hn_cmd_get_n_dispatches (cmd), ==, 0);
}

static void
run_bmm (gint64 batch, gint64 a_batch, gint64 b_batch, gint64 M, gint64 N, gint64 K, HnMatmulFlags flags, float alpha,
         HnDType bdt)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  gboolean ta = flags & HN_MATMUL_TRANS_A, tb = flags & HN_MATMUL_TRANS_B;
  g_autofree float *a = hn_test_random (a_batch * M * K, -1, 1), *b = hn_test_random (b_batch * K * N, -1, 1);
  g_autofree float *c0 = hn_test_random (batch * M * N, -1, 1);
  g_autoptr(HnTensor) ta_t = a_batch == 1 ? hn_test_tensor (HN_DTYPE_F32, 2, ta ? (gint64[]) { K, M } : (gint64[]) { M, K }, a)
                                          : hn_test_tensor (HN_DTYPE_F32, 3, ta ? (gint64[]) { a_batch, K, M } : (gint64[]) { a_batch, M, K }, a);
  g_autoptr(HnTensor) tb_t = b_batch == 1 ? hn_test_tensor (bdt, 2, tb ? (gint64[]) { N, K } : (gint64[]) { K, N }, b)
                                          : hn_test_tensor (bdt, 3, tb ? (gint64[]) { b_batch, N, K } : (gint64[]) { b_batch, K, N }, b);
  g_autoptr(HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { batch, M, N }, c0);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_bmm (cmd, tc, ta_t, tb_t, flags, alpha, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (tc);
  g_autofree float *ref = g_memdup2 (c0, sizeof (float) * batch * M * N);
  gboolean rp = hn_op_matmul_reduced_precision (ctx, bdt, M, flags);
  if (rp)
    {
      float *ar = round_f16_copy (a, a_batch * M * K), *br = round_f16_copy (b, b_batch * K * N);
      memcpy (a, ar, sizeof (float) * a_batch * M * K);
      memcpy (b, br, sizeof (float) * b_batch * K * N);
      g_free (ar);
      g_free (br);
    }
  hn_ref_bmm (ref, a, b, batch, a_batch, b_batch, M, N, K, flags, alpha);
  /* tolerance: 1e-5 of the sum of absolute terms (inputs are in [-1, 1]) */
  g_autofree float *absa = g_new (float, a_batch * M * K), *absb = g_new (float, b_batch * K * N);
  for (gint64 i = 0; i < a_batch * M * K; i++)
    absa[i] = fabsf (a[i]);
  for (gint64 i = 0; i < b_batch * K * N; i++)
    absb[i] = fabsf (b[i]);
  g_autofree float *absref = g_new0 (float, batch * M * N);
  hn_ref_bmm (absref, absa, absb, batch, a_batch, b_batch, M, N, K, flags & ~HN_MATMUL_ACCUMULATE, fabsf (alpha));
  for (gint64 i = 0; i < batch * M * N; i++)
    {
      double tol = (rp ? 2e-4 : 1e-5) * (absref[i] + ((flags & HN_MATMUL_ACCUMULATE) ? fabsf (c0[i]) : 0)) + 1e-30;
      if (!(fabs ((double) got[i] - ref[i]) <= tol))
        {
          g_test_fail_printf ("bmm batch %" G_GINT64_FORMAT " M %" G_GINT64_FORMAT " N %" G_GINT64_FORMAT
                              " K %" G_GINT64_FORMAT " flags %d: element %" G_GINT64_FORMAT " is %.9g, reference %.9g",
                              batch, M, N, K, flags, i, got[i], ref[i]);
          return;
        }
    }
}

static void
test_bmm (void)
{
  run_bmm (1, 1, 1, 7, 9, 11, 0, 1.0f, HN_DTYPE_F32);
  run_bmm (3, 3, 3, 17, 70, 5, HN_MATMUL_TRANS_B, 0.125f, HN_DTYPE_F32);     /* q·kᵀ */
  run_bmm (4, 4, 4, 66, 13, 67, 0, 1.0f, HN_DTYPE_F32);                      /* p·v */
  run_bmm (2, 2, 2, 9, 33, 65, HN_MATMUL_TRANS_A, 1.0f, HN_DTYPE_F32);       /* dW = dyᵀ·x */
  run_bmm (2, 2, 2, 31, 3, 8, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B, -2.0f, HN_DTYPE_F32);
  run_bmm (5, 5, 1, 6, 7, 8, HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F32);         /* broadcast B */
  run_bmm (3, 1, 3, 6, 7, 8, 0, 1.0f, HN_DTYPE_F32);                         /* broadcast A */
  run_bmm (2, 2, 2, 19, 21, 23, HN_MATMUL_ACCUMULATE, 0.5f, HN_DTYPE_F32);
  run_bmm (2, 2, 2, 19, 21, 23, HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_BF16);
  run_bmm (1, 1, 1, 70, 3, 9, 0, 1.0f, HN_DTYPE_F16);
  run_bmm (3, 3, 1, 100, 70, 40, HN_MATMUL_TRANS_B, 0.5f, HN_DTYPE_BF16);
  run_bmm (2, 2, 2, 100, 70, 40, HN_MATMUL_TRANS_B | HN_MATMUL_EXACT, 1.0f, HN_DTYPE_F16);
  /* 4-aligned shapes: the vector-load modes of each operand layout */
  run_bmm (2, 2, 2, 68, 72, 36, HN_MATMUL_TRANS_A, 1.0f, HN_DTYPE_F32);      /* A and B contiguous along m, n */
  run_bmm (1, 1, 1, 140, 136, 44, 0, 0.5f, HN_DTYPE_F32);                    /* A along k, B along n */
  run_bmm (2, 2, 2, 20, 24, 16, HN_MATMUL_ACCUMULATE | HN_MATMUL_TRANS_B, 0.5f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 36, 40, 20, 0, 1.0f, HN_DTYPE_BF16);
  run_bmm (1, 1, 1, 36, 40, 20, HN_MATMUL_EXACT, 1.0f, HN_DTYPE_F16);
  run_bmm (2, 2, 2, 68, 72, 36, HN_MATMUL_TRANS_A, 1.0f, HN_DTYPE_BF16);
  run_bmm (1, 1, 1, 132, 136, 48, HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F16);
  /* larger, with batch strides, every operand layout, accumulation and
   * alpha: the cooperative-matrix-2 kernel's tensor layouts and views */
  run_bmm (3, 3, 3, 70, 90, 100, HN_MATMUL_ACCUMULATE | HN_MATMUL_TRANS_B, 0.5f, HN_DTYPE_F16);
  run_bmm (2, 2, 2, 130, 66, 72, HN_MATMUL_TRANS_A, 1.0f, HN_DTYPE_BF16);
  run_bmm (2, 1, 2, 65, 130, 70, 0, 1.0f, HN_DTYPE_F16);
  run_bmm (2, 2, 1, 150, 77, 129, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B | HN_MATMUL_ACCUMULATE, -1.0f, HN_DTYPE_BF16);
  /* one output dimension <= 16 over a long K (matmul_skinny.comp): the LoRA
   * products u = x·Aᵀ, du = dy·B, dB += dyᵀ·u, dA += duᵀ·x, odd sizes, a K
   * past one staged chunk, both operand orientations, alpha, accumulation */
  run_bmm (1, 1, 1, 301, 8, 600, HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 203, 5, 333, HN_MATMUL_ACCUMULATE, 0.5f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 130, 8, 517, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 8, 190, 700, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, -1.0f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 16, 77, 64, 0, 2.0f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 3, 45, 99, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F32);
  run_bmm (1, 1, 1, 90, 16, 257, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F32);
}

/* fp16 autocast (HN_AUTOCAST_F16 / HN_MATMUL_F16): operands rounded to f16
 * (Inf past the range), f32 accumulation, each result alpha·A·B + f16(bias)
 * rounded to f16 before it is stored or added to C. */
static float
round16 (float v)
{
  return hn_f16_to_f32 (hn_f32_to_f16 (v));
}

static void
run_autocast (gint64 batch, gint64 M, gint64 N, gint64 K, HnMatmulFlags flags, HnDType bdt, gboolean linear)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  gboolean ta = flags & HN_MATMUL_TRANS_A, tb = flags & HN_MATMUL_TRANS_B, acc = flags & HN_MATMUL_ACCUMULATE;
  g_autofree float *a = hn_test_random (batch * M * K, -2, 2), *b = hn_test_random (batch * K * N, -2, 2);
  g_autofree float *c0 = hn_test_random (batch * M * N, -1, 1), *bias = hn_test_random (N, -1, 1);
  /* B as the device holds it (a 16-bit B is rounded on upload) */
  for (gint64 i = 0; i < batch * K * N; i++)
    b[i] = bdt == HN_DTYPE_F16 ? round16 (b[i]) : bdt == HN_DTYPE_BF16 ? hn_bf16_to_f32 (hn_f32_to_bf16 (b[i])) : b[i];
  g_autoptr(HnTensor) tA = hn_test_tensor (HN_DTYPE_F32, 3, ta ? (gint64[]) { batch, K, M } : (gint64[]) { batch, M, K }, a);
  g_autoptr(HnTensor) tB = linear ? hn_test_tensor (bdt, 2, (gint64[]) { N, K }, b)
                                  : hn_test_tensor (bdt, 3, tb ? (gint64[]) { batch, N, K } : (gint64[]) { batch, K, N }, b);
  g_autoptr(HnTensor) tbias = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, bias);
  g_autoptr(HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { batch, M, N }, c0);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  float alpha = linear ? 1.0f : 0.5f;
  if (linear)
    {
      /* hn_op_matmul under the recorder's mode: x·Wᵀ + bias, never the matrix-vector kernel */
      hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
      g_assert_true (hn_op_matmul_f16 (cmd, 0));
      g_assert_false (hn_op_matmul_f16 (cmd, HN_MATMUL_EXACT));
      g_assert_true (hn_op_matmul (cmd, tc, tA, tB, tbias, &error));
      flags = HN_MATMUL_TRANS_B;
      tb = TRUE;
      acc = FALSE;
    }
  else
    g_assert_true (hn_op_bmm (cmd, tc, tA, tB, flags | HN_MATMUL_F16, alpha, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (tc);
  for (gint64 i = 0; i < batch * M * K; i++)
    a[i] = round16 (a[i]);
  for (gint64 i = 0; i < batch * K * N; i++)
    b[i] = round16 (b[i]);
  g_autofree float *ref = g_new0 (float, batch * M * N);
  hn_ref_bmm (ref, a, b, batch, batch, linear ? 1 : batch, M, N, K, flags & ~HN_MATMUL_ACCUMULATE, alpha);
  g_autofree char *what = g_strdup_printf ("autocast %s batch %" G_GINT64_FORMAT " M %" G_GINT64_FORMAT " N %"
                                           G_GINT64_FORMAT " K %" G_GINT64_FORMAT " flags %d%s%s", hn_dtype_name (bdt),
                                           batch, M, N, K, flags, linear ? " (matmul + bias)" : "",
                                           hn_vk_context_has_coopmat (ctx) ? " (tensor cores)" : "");
  for (gint64 i = 0; i < batch * M * N; i++)
    {
      float r = ref[i] + (linear ? round16 (bias[i % N]) : 0.0f);
      float r16 = round16 (r);
      /* the stored result is an f16 value (before the add to C) */
      float v = acc ? got[i] - c0[i] : got[i];
      /* f32 sums in another order may land on the neighbouring f16 value */
      double tol = fabs (r) * (1.0 / 1024) + 1e-4 * K;
      if (!(fabs ((double) v - r16) <= tol) || (!acc && round16 (got[i]) != got[i]))
        {
          g_test_fail_printf ("%s: element %" G_GINT64_FORMAT " is %.9g, reference %.9g (f16 %.9g)", what, i, v, r, r16);
          return;
        }
    }
}

/* Values whose f16 rounding decides the answer: 1 + 2^-12 is 1 in f16, so
 * a sum of 64 of them times 0.5 is 32, not 32.0078 (f32); 300 · 300 is past
 * the f16 range (Inf, what the loss scaler looks for); 1e-8 is below half the
 * smallest f16 subnormal (0). */
static void
test_autocast_exact (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  gint64 M = 20, N = 24, K = 64;
  g_autofree float *a = g_new (float, M * K), *b = g_new (float, K * N);
  for (gint64 i = 0; i < M * K; i++)
    a[i] = 1.0f + 1.0f / 4096;
  for (gint64 i = 0; i < K * N; i++)
    b[i] = 0.5f;
  a[0] = 300.0f;         /* row 0: 300 · 300 at k 0 overflows */
  b[0] = 300.0f;         /* (column 0 only) */
  a[K] = 1e-8f;          /* row 1, k 0: becomes 0 */
  a[3 * K] = 70000.0f;   /* row 3, k 0: an operand past the range is Inf, not clamped */
  for (int mode = 0; mode < 2; mode++)
    {
      g_autoptr(HnTensor) tA = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, a);
      g_autoptr(HnTensor) tB = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { K, N }, b);
      g_autoptr(HnTensor) tc = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
      g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_bmm (cmd, tc, tA, tB, mode ? HN_MATMUL_F16 : 0, 1.0f, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (tc);
      if (mode == 0)
        {
          /* f32: the exact sums */
          g_assert_cmpfloat_with_epsilon (got[0], 90000.0f + 63 * (1.0f + 1.0f / 4096) * 150.0f / 300.0f, 0.05f);
          g_assert_cmpfloat_with_epsilon (got[2 * N + 1], 64 * (1.0f + 1.0f / 4096) * 0.5f, 1e-4f);
          continue;
        }
      g_assert_true (isinf (got[0]) && got[0] > 0);
      /* row 0, column 1: 300 · 0.5 + 63 · 0.5 = 181.5 */
      g_assert_cmpfloat (got[1], ==, 181.5f);
      /* row 1: 1e-8 → 0, 63 · 0.5 (column 1) */
      g_assert_cmpfloat (got[N + 1], ==, 31.5f);
      g_assert_true (isinf (got[3 * N + 1]) && got[3 * N + 1] > 0);
      g_assert_cmpfloat (got[2 * N + 1], ==, 32.0f);
      g_assert_cmpfloat (got[(M - 1) * N + N - 1], ==, 32.0f);
    }
  /* a Linear's bias gradient under autocast is an f16 column sum (added to
   * db in f32): 1 + 2^-12 becomes 1, 40000 + 40000 Inf; exact without */
  float dy[6] = { 1.0f, 40000.0f, 0.0f, 1.0f / 4096, 40000.0f, 0.0f }, db0[3] = { 0.5f, 0.5f, 0.5f };
  for (int mode = 0; mode < 2; mode++)
    {
      g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 2, 3 }, dy);
      g_autoptr (HnTensor) tdb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 3 }, db0);
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      hn_cmd_set_autocast (cmd, mode ? HN_AUTOCAST_F16 : HN_AUTOCAST_NONE);
      g_assert_true (hn_op_bias_back (cmd, tdb, tdy, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *db = hn_test_download (tdb);
      g_assert_cmpfloat (db[0], ==, mode ? 1.5f : 1.5f + 1.0f / 4096);
      if (mode)
        g_assert_true (isinf (db[1]));
      else
        g_assert_cmpfloat (db[1], ==, 80000.5f);
      g_assert_cmpfloat (db[2], ==, 0.5f);
    }
}

static void
test_autocast (void)
{
  /* each layout of the training graph's matmuls (x·Wᵀ + bias; dx = dy·W;
   * dW += dyᵀ·x), f32 / f16 / bf16 B, edges, accumulation */
  run_autocast (1, 37, 45, 29, 0, HN_DTYPE_F32, TRUE);
  run_autocast (1, 130, 68, 72, 0, HN_DTYPE_F32, TRUE);
  run_autocast (1, 5, 7, 40, 0, HN_DTYPE_F32, TRUE);       /* M <= 8: still the tiled kernels */
  run_autocast (1, 66, 40, 36, 0, HN_DTYPE_F32, FALSE);    /* dx = dy · W */
  run_autocast (1, 40, 36, 70, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, HN_DTYPE_F32, FALSE); /* dW += dyᵀ·x */
  run_autocast (2, 33, 17, 19, HN_MATMUL_TRANS_B, HN_DTYPE_F16, FALSE);
  run_autocast (2, 20, 24, 48, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B, HN_DTYPE_BF16, FALSE);
  run_autocast (1, 136, 132, 64, HN_MATMUL_TRANS_B, HN_DTYPE_F32, FALSE);
  run_autocast (1, 29, 31, 33, 0, HN_DTYPE_BF16, TRUE);
  /* a LoRA rank (one output dimension <= 16, long K): the skinny kernel */
  run_autocast (1, 100, 8, 200, 0, HN_DTYPE_F32, FALSE);
  run_autocast (1, 8, 64, 300, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, HN_DTYPE_F32, FALSE);
}

/* The cooperative-matrix-2 kernel's variants, forced through its overrides
 * (on other devices the same cases run the other kernels): split-K (the
 * partial products summed with bias, alpha and accumulation by
 * matmul_splitk.comp; the last split shorter, K not a multiple of the tile;
 * transposed operands), the unrolled K loop with a remainder, and split-K
 * chosen by itself for a grid that fills few multiprocessors. */
static void
test_matmul_cm2_variants (void)
{
  g_setenv ("HN_CM2_SPLITK", "3", TRUE);
  run_matmul (HN_DTYPE_F16, 70, 67, 1000, TRUE, FALSE);
  run_matmul (HN_DTYPE_BF16, 64, 128, 1536, TRUE, TRUE);
  run_bmm (1, 1, 1, 70, 90, 700, HN_MATMUL_ACCUMULATE | HN_MATMUL_TRANS_B, 0.5f, HN_DTYPE_F16);
  run_bmm (1, 1, 1, 130, 66, 650, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B | HN_MATMUL_ACCUMULATE, -1.0f, HN_DTYPE_BF16);
  run_bmm (1, 1, 1, 65, 130, 600, HN_MATMUL_TRANS_A, 1.0f, HN_DTYPE_F16);
  run_bmm (2, 2, 2, 33, 40, 300, HN_MATMUL_TRANS_B, 1.0f, HN_DTYPE_F16); /* batched: never split */
  g_unsetenv ("HN_CM2_SPLITK");
  g_setenv ("HN_CM2_UNROLL", "2", TRUE);
  run_matmul (HN_DTYPE_F16, 128, 128, 320, FALSE, FALSE); /* 5 steps of 64: 2 unrolled pairs + 1 */
  run_matmul (HN_DTYPE_BF16, 136, 132, 448, TRUE, FALSE);
  g_unsetenv ("HN_CM2_UNROLL");
  /* K 4096: 128x128 tiles, four of them, split by itself */
  run_matmul (HN_DTYPE_BF16, 256, 200, 4096, TRUE, FALSE);
  /* one 64x64 tile, K 2048: split by itself */
  run_matmul (HN_DTYPE_F16, 64, 64, 2048, TRUE, FALSE);
  run_matmul (HN_DTYPE_BF16, 40, 24, 4099, FALSE, FALSE);
}

/* y += alpha · x·Wᵀ + bias (hn_op_matmul_add: the residual add in the
 * epilogue) and the Linear layers of one input (hn_op_matmul_n: one f16 copy
 * of x on the cooperative-matrix-2 path), against the CPU reference. */
static void
run_matmul_add (HnDType wdt, gint64 M, gint64 N, gint64 K, gboolean with_bias, float alpha)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random (M * K, -1, 1), *w = hn_test_random (N * K, -1, 1);
  g_autofree float *y0 = hn_test_random (M * N, -1, 1), *b = with_bias ? hn_test_random (N, -1, 1) : NULL;
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, w);
  g_autoptr(HnTensor) tb = b ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b) : NULL;
  g_autoptr(HnTensor) ty = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, N }, y0);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_matmul_add (cmd, ty, tx, tw, tb, alpha, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (ty);
  gboolean rp = hn_op_matmul_reduced_precision (ctx, wdt, M, 0);
  g_autofree float *xr = rp ? round_f16_copy (x, M * K) : g_memdup2 (x, sizeof (float) * M * K);
  g_autofree float *wr = rp ? round_f16_copy (w, N * K) : g_memdup2 (w, sizeof (float) * N * K);
  g_autofree float *ref = g_new (float, M * N);
  hn_ref_matmul (ref, xr, wr, NULL, M, N, K);
  /* the matrix-vector kernel scales the bias with alpha; the tiled ones take alpha 1 with a bias */
  float bs = hn_op_matvec_available (cmd, M) ? alpha : 1.0f;
  for (gint64 i = 0; i < M * N; i++)
    ref[i] = y0[i] + alpha * ref[i] + (b ? bs * b[i % N] : 0.0f);
  /* the tolerance of x·Wᵀ, scaled, plus the rounding of the add */
  g_autofree float *sw = g_new (float, N * K);
  for (gint64 i = 0; i < N * K; i++)
    sw[i] = fabsf (alpha) * wr[i];
  g_autofree float *ys = g_new (float, M * N);
  for (gint64 i = 0; i < M * N; i++)
    ys[i] = ref[i];
  g_autofree char *what = g_strdup_printf ("matmul_add %s M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%" G_GINT64_FORMAT
                                           " alpha %g", hn_dtype_name (wdt), M, N, K, alpha);
  for (gint64 i = 0; i < M * N; i++)
    {
      double absterm = 0;
      for (gint64 k = 0; k < K; k++)
        absterm += fabs ((double) xr[(i / N) * K + k] * sw[(i % N) * K + k]);
      double tol = (rp ? 2e-4 : 1e-5) * absterm + 1e-6 * (fabs (y0[i]) + (b ? fabs (b[i % N]) : 0) + 1);
      if (!(fabs ((double) got[i] - ref[i]) <= tol))
        {
          g_test_fail_printf ("%s: element %" G_GINT64_FORMAT " is %.9g, reference %.9g", what, i, got[i], ref[i]);
          return;
        }
    }
}

static void
test_matmul_add_n (void)
{
  run_matmul_add (HN_DTYPE_F32, 70, 33, 45, TRUE, 1.0f);
  run_matmul_add (HN_DTYPE_F32, 3, 40, 64, TRUE, 0.5f);     /* matrix-vector: bias scaled with alpha */
  run_matmul_add (HN_DTYPE_BF16, 136, 132, 64, FALSE, 0.5f);
  run_matmul_add (HN_DTYPE_F16, 129, 257, 100, TRUE, 1.0f);
  g_setenv ("HN_CM2_SPLITK", "2", TRUE);
  run_matmul_add (HN_DTYPE_F16, 66, 70, 700, TRUE, 1.0f);  /* split-K: the add in the sum's epilogue */
  g_unsetenv ("HN_CM2_SPLITK");
  {
    /* a bias with alpha != 1 on the tiled kernels: refused */
    g_autoptr(GError) error = NULL;
    g_autoptr(HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 20, 8 });
    g_autoptr(HnTensor) w = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 8 });
    g_autoptr(HnTensor) b = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 4 });
    g_autoptr(HnTensor) y = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 20, 4 });
    g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
    g_assert_false (hn_op_matmul_add (cmd, y, x, w, b, 0.5f, &error));
    g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
    g_assert_cmpuint (hn_cmd_get_n_dispatches (cmd), ==, 0);
  }
  /* three Linear layers of one input (q, k, v shapes: two narrower), some with a bias */
  for (int d = 0; d < 2; d++)
    {
      HnDType dt = d ? HN_DTYPE_BF16 : HN_DTYPE_F16;
      const gint64 M = 130, K = 96;
      static const gint64 Ns[3] = { 128, 40, 40 };
      g_autoptr(GError) error = NULL;
      HnVkContext *ctx = hn_test_ctx ();
      g_autofree float *x = hn_test_random (M * K, -1, 1);
      g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
      float *w[3], *b[3];
      HnTensor *tw[3], *tb[3], *ty[3];
      for (int i = 0; i < 3; i++)
        {
          w[i] = hn_test_random (Ns[i] * K, -1, 1);
          b[i] = i == 1 ? NULL : hn_test_random (Ns[i], -1, 1);
          tw[i] = hn_test_tensor (dt, 2, (gint64[]) { Ns[i], K }, w[i]);
          tb[i] = b[i] ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { Ns[i] }, b[i]) : NULL;
          ty[i] = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, Ns[i] });
        }
      g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_matmul_n (cmd, 3, ty, tx, tw, tb, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      gboolean rp = hn_op_matmul_reduced_precision (ctx, dt, M, 0);
      g_autofree float *xr = rp ? round_f16_copy (x, M * K) : g_memdup2 (x, sizeof (float) * M * K);
      for (int i = 0; i < 3; i++)
        {
          g_autofree float *got = hn_test_download (ty[i]);
          g_autofree float *wr = rp ? round_f16_copy (w[i], Ns[i] * K) : g_memdup2 (w[i], sizeof (float) * Ns[i] * K);
          g_autofree float *ref = g_new (float, (gsize) M * (gsize) Ns[i]);
          hn_ref_matmul (ref, xr, wr, b[i], M, Ns[i], K);
          g_autofree char *what = g_strdup_printf ("matmul_n %s output %d", hn_dtype_name (dt), i);
          check_matmul (what, got, xr, wr, b[i], ref, M, Ns[i], K, rp ? 2e-4 : 1e-5);
          g_free (w[i]);
          g_free (b[i]);
          hn_tensor_unref (tw[i]);
          g_clear_pointer (&tb[i], hn_tensor_unref);
          hn_tensor_unref (ty[i]);
        }
    }
}

/* x as an f16 tensor (rmsnorm's or glu's f16 output in prefill): matmul_cm2
 * reads it as it is, and the result equals that of the same values in an f32
 * x (which is copied to f16 first) bit for bit, and the CPU reference within
 * the tensor-core tolerance. mode 0: hn_op_matmul, 1: hn_op_matmul_add (alpha
 * 0.5 and a y to add to), 2: hn_op_matmul_n over three weights. row0: x is
 * a view from that row (an offset that breaks the 16-byte alignment when
 * row0 * K is not a multiple of 8). Where the kernel does not take an f16 x
 * (no cooperative matrix 2, as lavapipe) the call is refused. */
static void
run_matmul_f16x (HnDType wdt, gint64 M, gint64 N, gint64 K, gint64 row0, gboolean with_bias, int mode)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random ((row0 + M) * K, -1, 1), *y0 = hn_test_random (M * N, -1, 1);
  g_autoptr(HnTensor) tx16 = hn_test_tensor (HN_DTYPE_F16, 2, (gint64[]) { row0 + M, K }, x); /* x now f16 values */
  g_autoptr(HnTensor) tx32 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { row0 + M, K }, x);
  g_autoptr(HnTensor) v16 = hn_tensor_view_rows (tx16, row0, M, &error);
  g_autoptr(HnTensor) v32 = hn_tensor_view_rows (tx32, row0, M, &error);
  g_assert_no_error (error);
  int nw = mode == 2 ? 3 : 1, ncheck = nw;
  const gint64 Ns[3] = { N, N / 2 + 1, 64 };
  float *w[3] = { NULL }, *b[3] = { NULL };
  HnTensor *tw[3] = { NULL }, *tb[3] = { NULL }, *y16[3] = { NULL }, *y32[3] = { NULL };
  for (int i = 0; i < nw; i++)
    {
      w[i] = hn_test_random (Ns[i] * K, -1, 1);
      b[i] = with_bias && i != 1 ? hn_test_random (Ns[i], -1, 1) : NULL;
      tw[i] = hn_test_tensor (wdt, 2, (gint64[]) { Ns[i], K }, w[i]);
      tb[i] = b[i] ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { Ns[i] }, b[i]) : NULL;
      y16[i] = mode == 1 ? hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, Ns[i] }, y0)
                         : hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, Ns[i] });
      y32[i] = mode == 1 ? hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, Ns[i] }, y0)
                         : hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, Ns[i] });
    }
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_autofree char *what = g_strdup_printf ("f16 x: mode %d %s M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT
                                           " K=%" G_GINT64_FORMAT " from row %" G_GINT64_FORMAT, mode,
                                           hn_dtype_name (wdt), M, N, K, row0);
  gboolean cm2 = hn_op_matmul_takes_f16 (cmd, tw[0], M);
  if (!cm2 && !hn_op_matmul (cmd, y16[0], v16, tw[0], tb[0], &error))
    {
      /* refused where no kernel reads an f16 x as it is */
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_cmpuint (hn_cmd_get_n_dispatches (cmd), ==, 0);
      g_clear_error (&error);
      ncheck = 0;
    }
  else if (!cm2)
    {
      /* or taken another way (widened to f32): then as exact as the f32 x */
      g_assert_true (hn_op_matmul (cmd, y32[0], v32, tw[0], tb[0], &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      ncheck = 1;
    }
  else
    for (int pass = 0; pass < 2; pass++)
      {
        HnTensor *xv = pass ? v16 : v32, **yy = pass ? y16 : y32;
        gboolean ok = mode == 0   ? hn_op_matmul (cmd, yy[0], xv, tw[0], tb[0], &error)
                      : mode == 1 ? hn_op_matmul_add (cmd, yy[0], xv, tw[0], tb[0], with_bias ? 1.0f : 0.5f, &error)
                                  : hn_op_matmul_n (cmd, 3, yy, xv, tw, tb, &error);
        g_assert_no_error (error);
        g_assert_true (ok);
        hn_test_run (cmd);
      }
  for (int i = 0; i < ncheck; i++)
    {
      g_autofree float *g16 = hn_test_download (y16[i]), *g32 = hn_test_download (y32[i]);
      for (gint64 e = 0; e < M * Ns[i]; e++)
        if (memcmp (&g16[e], &g32[e], sizeof (float)) != 0)
          {
            g_test_fail_printf ("%s output %d: element %" G_GINT64_FORMAT " is %.9g, with an f32 x %.9g", what, i, e,
                                g16[e], g32[e]);
            break;
          }
      if (mode != 1 && cm2)
        {
          /* and the reference (x already f16 values) */
          g_autofree float *wr = round_f16_copy (w[i], Ns[i] * K), *ref = g_new (float, M * Ns[i]);
          hn_ref_matmul (ref, x + row0 * K, wr, b[i], M, Ns[i], K);
          check_matmul (what, g16, x + row0 * K, wr, b[i], ref, M, Ns[i], K, 2e-4);
        }
    }
  for (int i = 0; i < nw; i++)
    {
      g_free (w[i]);
      g_free (b[i]);
      hn_tensor_unref (tw[i]);
      g_clear_pointer (&tb[i], hn_tensor_unref);
      hn_tensor_unref (y16[i]);
      hn_tensor_unref (y32[i]);
    }
}

/* The gate and up projections in one pass (hn_op_matmul_glu): out f16 =
 * act(x·Wgᵀ) * (x·Wuᵀ), against the reference on the f16-rounded operands;
 * x f32 or an f16 view from row0. Refused where the kernel is missing. */
static void
run_matmul_glu (HnDType wdt, gint64 M, gint64 F, gint64 K, gboolean x16, gint64 row0, HnActivation act)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random ((row0 + M) * K, -1, 1), *wg = hn_test_random (F * K, -1, 1),
                   *wu = hn_test_random (F * K, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (x16 ? HN_DTYPE_F16 : HN_DTYPE_F32, 2, (gint64[]) { row0 + M, K }, x);
  g_autoptr(HnTensor) xv = hn_tensor_view_rows (tx, row0, M, &error);
  g_autoptr(HnTensor) tg = hn_test_tensor (wdt, 2, (gint64[]) { F, K }, wg);
  g_autoptr(HnTensor) tu = hn_test_tensor (wdt, 2, (gint64[]) { F, K }, wu);
  g_autoptr(HnTensor) out = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { M, F });
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  if (!hn_op_matmul_glu_available (cmd, tg, tu, M))
    {
      g_assert_false (hn_op_matmul_glu (cmd, out, xv, tg, tu, act, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_cmpuint (hn_cmd_get_n_dispatches (cmd), ==, 0);
      return;
    }
  g_assert_true (hn_op_matmul_glu (cmd, out, xv, tg, tu, act, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (out);
  g_autofree float *xr = round_f16_copy (x + row0 * K, M * K), *gr = round_f16_copy (wg, F * K),
                   *ur = round_f16_copy (wu, F * K);
  g_autofree char *what = g_strdup_printf ("matmul_glu %s %s M=%" G_GINT64_FORMAT " F=%" G_GINT64_FORMAT
                                           " K=%" G_GINT64_FORMAT "%s", hn_dtype_name (wdt),
                                           hn_activation_name (act), M, F, K, x16 ? " (f16 x)" : "");
  for (gint64 m = 0; m < M; m++)
    for (gint64 f = 0; f < F; f++)
      {
        double g = 0, u = 0, ag = 0, au = 0;
        for (gint64 k = 0; k < K; k++)
          {
            double xv_ = xr[m * K + k];
            g += xv_ * gr[f * K + k];
            u += xv_ * ur[f * K + k];
            ag += fabs (xv_ * gr[f * K + k]);
            au += fabs (xv_ * ur[f * K + k]);
          }
        double a = hn_ref_activation (act, g), want = CLAMP (a * u, -65504.0, 65504.0);
        /* the f32 sums' error (2e-4 of the absolute terms, act' <= 1.2), then f16 rounding */
        double tol = 1.2 * fabs (u) * 2e-4 * ag + fabs (a) * 2e-4 * au + 1e-3 * fabs (want) + 1e-6;
        if (!(fabs (got[m * F + f] - want) <= tol))
          {
            g_test_fail_printf ("%s: element (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ") is %.9g, reference %.9g",
                                what, m, f, got[m * F + f], want);
            return;
          }
      }
}

static char *env_push (const char *name, const char *value);
static void env_pop (const char *name, char *old);

static void
test_matmul_glu (void)
{
  gboolean cm2 = hn_vk_context_has_coopmat2 (hn_test_ctx (), NULL);
  run_matmul_glu (HN_DTYPE_F16, 70, 67, 1000, FALSE, 0, HN_ACT_SILU);
  run_matmul_glu (HN_DTYPE_BF16, 130, 200, 520, TRUE, 1, HN_ACT_GELU_TANH);
  if (cm2)
    {
      /* a 128x256 pick: two 128x128 accumulators */
      char *old = env_push ("HN_CM2_TILE", "128,256,64");
      run_matmul_glu (HN_DTYPE_F16, 136, 260, 520, TRUE, 0, HN_ACT_SILU);
      env_pop ("HN_CM2_TILE", old);
      old = env_push ("HN_CM2_SPLITK", "3"); /* ignored: never split */
      run_matmul_glu (HN_DTYPE_F16, 66, 70, 1100, FALSE, 0, HN_ACT_GELU);
      env_pop ("HN_CM2_SPLITK", old);
    }
  /* the gate and up must be alike */
  g_autoptr(GError) error = NULL;
  g_autoptr(HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 20, 8 });
  g_autoptr(HnTensor) wg = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 4, 8 });
  g_autoptr(HnTensor) wu = hn_test_empty (HN_DTYPE_BF16, 2, (gint64[]) { 4, 8 });
  g_autoptr(HnTensor) out = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 20, 4 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_matmul_glu (cmd, out, x, wg, wu, HN_ACT_SILU, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
}

/* Sets an environment override for a few calls; env_pop puts back what was
 * there (device-check runs this test under its own HN_CM2_* settings). */
static char *
env_push (const char *name, const char *value)
{
  char *old = g_strdup (g_getenv (name));
  g_setenv (name, value, TRUE);
  return old;
}

static void
env_pop (const char *name, char *old)
{
  if (old)
    g_setenv (name, old, TRUE);
  else
    g_unsetenv (name);
  g_free (old);
}

/* The tile table on odd shapes through the f16-x path (the test shapes pick
 * 64x64 and 64x128 on 128 invocations), and the overrides the table does not
 * reach here: 128x256, split-K, the grouped tile order, 256 invocations.
 * Kept to few kernel variants: each is a pipeline compiled on the device. */
static void
test_matmul_f16x (void)
{
  gboolean cm2 = hn_vk_context_has_coopmat2 (hn_test_ctx (), NULL);
  run_matmul_f16x (HN_DTYPE_F16, 70, 67, 1000, 0, TRUE, 0);
  run_matmul_f16x (HN_DTYPE_BF16, 130, 257, 2050, 1, FALSE, 0); /* offset 2050 halves: unaligned */
  run_matmul_f16x (HN_DTYPE_F16, 136, 132, 448, 2, TRUE, 1);
  run_matmul_f16x (HN_DTYPE_BF16, 96, 80, 200, 0, TRUE, 2);
  /* 153 tiles of 64x128, K 130: clamped, unaligned rows */
  run_matmul_f16x (HN_DTYPE_F16, 520, 2050, 130, 1, TRUE, 0);
  run_matmul (HN_DTYPE_BF16, 520, 2050, 130, FALSE, FALSE);
  /* a long K split by itself */
  run_matmul_f16x (HN_DTYPE_BF16, 64, 200, 4100, 0, TRUE, 0);
  if (!cm2)
    return;
  char *old = env_push ("HN_CM2_TILE", "128,256,64");
  run_matmul_f16x (HN_DTYPE_F16, 129, 257, 330, 0, TRUE, 0);
  run_matmul_f16x (HN_DTYPE_F16, 200, 130, 520, 3, FALSE, 1);
  run_bmm (1, 1, 1, 130, 66, 650, HN_MATMUL_TRANS_A | HN_MATMUL_TRANS_B | HN_MATMUL_ACCUMULATE, -1.0f, HN_DTYPE_F16);
  env_pop ("HN_CM2_TILE", old);
  /* split-K with an f16 x: the partials' sum adds into y */
  old = env_push ("HN_CM2_SPLITK", "3");
  run_matmul_f16x (HN_DTYPE_F16, 66, 70, 1100, 1, TRUE, 1);
  env_pop ("HN_CM2_SPLITK", old);
  /* groups of 3 tile rows (9 and 5 rows: a short last group), split-K too */
  old = env_push ("HN_CM2_SWIZZLE", "3");
  run_matmul (HN_DTYPE_F16, 520, 300, 200, TRUE, FALSE);
  run_matmul_f16x (HN_DTYPE_F16, 130, 200, 4100, 0, FALSE, 0);
  env_pop ("HN_CM2_SWIZZLE", old);
  /* 64-row tiles on the device's 256 invocations */
  old = env_push ("HN_CM2_NT", "256");
  run_matmul_f16x (HN_DTYPE_F16, 70, 67, 1000, 0, TRUE, 0);
  env_pop ("HN_CM2_NT", old);
}

/* An f16 y under fp16 autocast: the f32 y's values (f16 already) bit for bit, ±Inf past the range
 * included, with a bias and across tiles; refused off autocast, accumulating, or unaligned. */
static void
run_matmul_f16_out (gint64 M, gint64 N, gint64 K, HnDType wdt)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *x = hn_test_random (M * K, -2, 2), *w = hn_test_random (N * K, -1, 1), *b = hn_test_random (N, -1, 1);
  for (gint64 k = 0; k < K; k++)
    w[5 * K + k] = x[k] < 0 ? -2000.0f : 2000.0f; /* row 0, column 5: past the f16 range (Inf under autocast) */
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, w);
  g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b);
  g_autoptr(HnTensor) y32 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr(HnTensor) y16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { M, N });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_matmul (cmd, y16, tx, tw, tb, &error)); /* not under autocast */
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  g_assert_false (hn_op_matmul_add (cmd, y16, tx, tw, NULL, 1.0f, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  g_assert_true (hn_op_matmul (cmd, y32, tx, tw, tb, &error));
  g_assert_true (hn_op_matmul (cmd, y16, tx, tw, tb, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *g32 = hn_test_download (y32);
  g_autofree guint16 *g16 = g_new (guint16, M * N);
  g_assert_true (hn_tensor_download_raw (y16, g16, sizeof (guint16) * M * N, &error));
  for (gint64 i = 0; i < M * N; i++)
    if (g16[i] != hn_f32_to_f16 (g32[i]))
      g_error ("f16 out %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ": element %" G_GINT64_FORMAT
               " is 0x%04x, the f32 result %.9g", M, N, K, i, g16[i], g32[i]);
  g_assert_cmpuint (g16[5] & 0x7fff, ==, 0x7c00);
}

static void
test_matmul_f16_out (void)
{
  run_matmul_f16_out (70, 132, 200, HN_DTYPE_F16);
  run_matmul_f16_out (300, 516, 96, HN_DTYPE_BF16);
  /* N not a multiple of 4: the scalar kernel refuses, matmul_cm2 stores it */
  g_autoptr(GError) error = NULL;
  g_autoptr(HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 9, 16 });
  g_autoptr(HnTensor) w = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 10, 16 });
  g_autoptr(HnTensor) y = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 9, 10 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  gboolean ok = hn_op_matmul (cmd, y, x, w, NULL, &error);
  if (hn_vk_context_has_coopmat2 (hn_test_ctx (), NULL))
    g_assert_true (ok);
  else
    g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  hn_cmd_reset (cmd);
}

/* bf16 weights stored as f16 (hn_bf16_to_f16_if_fits): rounding to nearest
 * even, subnormals, and the values that do not fit. */
static void
test_bf16_as_f16 (void)
{
  /* bf16 bits -> the f16 bits expected */
  static const guint16 in[] = { 0x0000, 0x8000, 0x3f80, 0xbf80, 0x477f, 0xc77f, 0x3c00, 0x3800,
                                0x3880, 0x3400, 0x3300, 0x3301, 0x33c0, 0x3f81, 0x0001 };
  static const guint16 want[] = { 0x0000, 0x8000, 0x3c00, 0xbc00, 0x7bf8, 0xfbf8, 0x2000, 0x0200,
                                  0x0400, 0x0002, 0x0000, 0x0001, 0x0002, 0x3c08, 0x0000 };
  g_autofree guint16 *out = NULL;
  g_assert_true (hn_bf16_to_f16_if_fits (in, G_N_ELEMENTS (in), &out));
  for (guint i = 0; i < G_N_ELEMENTS (in); i++)
    if (out[i] != want[i])
      g_test_fail_printf ("bf16 0x%04x became f16 0x%04x, want 0x%04x", in[i], out[i], want[i]);
  /* 65536, -Inf, NaN: not in range, nothing allocated */
  static const guint16 big[][2] = { { 0x3f80, 0x4780 }, { 0xff80, 0 }, { 0, 0x7fc0 } };
  for (guint i = 0; i < G_N_ELEMENTS (big); i++)
    {
      guint16 *o = (guint16 *) big; /* any non-NULL pointer: must be set to NULL */
      g_assert_false (hn_bf16_to_f16_if_fits (big[i], 2, &o));
      g_assert_null (o);
    }
}

/* fp16 autocast's rounding bit for bit, on results whose f32 sums are exact
 * (so the order of accumulation cannot matter): ties to even (2049 → 2048,
 * 2051 → 2052, 1 + 2^-11 → 1), the edge of the range (65519 → 65504, 65520
 * → Inf), ties on the subnormal grid (1.5 and 2.5 · 2^-24 → 2^-23), and a
 * bias rounded to f16 before it is added (1024 + f16(0.5 + 2^-13) is the
 * tie 1024.5 → 1024; unrounded it would be 1025), into an f16 and an f32 y,
 * each way matmul_cm2 rounds (HN_CM2_RTE: conversion instructions or
 * integer arithmetic). A bf16 B takes 65536 (Inf as an f16 operand). */
static void
run_matmul_f16_rounding (HnDType wdt)
{
  enum { NC = 8 };
  const float big = wdt == HN_DTYPE_BF16 ? 65536.0f : 65504.0f;
  const float t[NC] = { 2048, 2048, big, big, 0, 0, 1024, 1 };
  const float u[NC] = { 1, 3, 16, 15, 0, 0, 0, 1.0f / 2048 };
  const float w[NC] = { 0, 0, 0, 0, 1.5f / 4096, 2.5f / 4096, 0, 0 };
  const float bias_of[NC] = { 0, 0, 0, 0, 0, 0, 0.5f + 1.0f / 8192, 0 };
  const float s_of[4] = { 1, -1, 2, -0.5f };
  gint64 M = 200, N = 136, K = 64;
  g_autofree float *a = g_new0 (float, M * K), *b = g_new0 (float, N * K), *bias = g_new0 (float, N);
  for (gint64 m = 0; m < M; m++)
    {
      a[m * K] = s_of[m % 4];
      a[m * K + 1] = 1;
      a[m * K + 2] = 1.0f / 4096;
    }
  for (gint64 n = 0; n < N; n++)
    {
      b[n * K] = t[n % NC];
      b[n * K + 1] = u[n % NC];
      b[n * K + 2] = w[n % NC];
      bias[n] = bias_of[n % NC];
    }
  for (int rte = 0; rte < 2; rte++)
    {
      char *old = env_push ("HN_CM2_RTE", rte ? "1" : "0");
      g_autoptr(GError) error = NULL;
      g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, a);
      g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { N, K }, b);
      g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, bias);
      g_autoptr(HnTensor) y32 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
      g_autoptr(HnTensor) y16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { M, N });
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
      g_assert_true (hn_op_matmul (cmd, y32, tx, tw, tb, &error));
      gboolean has16 = hn_op_matmul (cmd, y16, tx, tw, tb, &error);
      if (!has16)
        {
          /* an f16 y with N = 136 (a multiple of 4) is the scalar kernel's too */
          g_test_fail_printf ("f16 y: %s", error->message);
          env_pop ("HN_CM2_RTE", old);
          return;
        }
      hn_test_run (cmd);
      env_pop ("HN_CM2_RTE", old);
      g_autofree float *g32 = hn_test_download (y32);
      g_autofree guint16 *g16 = g_new (guint16, M * N);
      g_assert_true (hn_tensor_download_raw (y16, g16, sizeof (guint16) * M * N, &error));
      for (gint64 m = 0; m < M; m++)
        for (gint64 n = 0; n < N; n++)
          {
            double s = s_of[m % 4], tt = wdt == HN_DTYPE_BF16 && t[n % NC] >= 65536.0f ? INFINITY : t[n % NC];
            double v = s * tt + u[n % NC] + w[n % NC] / 4096.0 + hn_f16_to_f32 (hn_f32_to_f16 (bias[n]));
            guint16 want = hn_f32_to_f16 ((float) v);
            gint64 i = m * N + n;
            if (g16[i] != want || hn_f32_to_f16 (g32[i]) != want || hn_f16_to_f32 (want) != g32[i])
              {
                g_test_fail_printf ("%s B, HN_CM2_RTE=%d: (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ") = %.9g rounds "
                                    "to f16 0x%04x; f16 y 0x%04x, f32 y %.9g", hn_dtype_name (wdt), rte, m, n, v, want,
                                    g16[i], g32[i]);
                return;
              }
          }
    }
}

static void
test_matmul_f16_rounding (void)
{
  run_matmul_f16_rounding (HN_DTYPE_F16);
  run_matmul_f16_rounding (HN_DTYPE_BF16);
}

/* hn_op_matmul_stacked against the same products one at a time (hn_op_matmul on the blocks), bit
 * for bit: f32 and f16 weights, with and without biases, off and under fp16 autocast, tiles on the
 * edges (M, N not multiples of the tiles). On matmul_cm2 the products run as one batch. */
static void
run_matmul_stacked (HnDType wdt, gint64 M, gint64 N, gint64 K, gboolean with_bias, gboolean autocast)
{
  g_autoptr(GError) error = NULL;
  const guint n = 3;
  g_autofree float *x = hn_test_random (M * K, -2, 2), *w = hn_test_random (n * N * K, -1, 1),
                   *b = hn_test_random (n * N, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (wdt, 2, (gint64[]) { n * N, K }, w);
  g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { n * N }, b);
  g_autoptr(HnTensor) ys = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { n * M, N });
  g_autoptr(HnTensor) y1 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { n * M, N });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  if (autocast)
    hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  g_assert_true (hn_op_matmul_stacked (cmd, n, ys, tx, tw, with_bias ? tb : NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(HnTensor) yi = hn_tensor_view_rows (y1, i * M, M, &error);
      g_autoptr(HnTensor) wi = hn_tensor_view_rows (tw, i * N, N, &error);
      g_autoptr(HnTensor) bi = hn_tensor_view_rows (tb, i * N, N, &error);
      g_assert_true (hn_op_matmul (cmd, yi, tx, wi, with_bias ? bi : NULL, &error));
      g_assert_no_error (error);
    }
  hn_test_run (cmd);
  g_autofree float *gs = hn_test_download (ys), *g1 = hn_test_download (y1);
  for (gint64 i = 0; i < n * M * N; i++)
    if (memcmp (&gs[i], &g1[i], sizeof (float)) != 0)
      {
        g_test_fail_printf ("stacked %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " bias %d autocast %d: "
                            "element %" G_GINT64_FORMAT " is %.9g, one at a time %.9g", hn_dtype_name (wdt), M, N, K,
                            with_bias, autocast, i, gs[i], g1[i]);
        return;
      }
  /* shapes that do not stack: refused by name */
  g_assert_false (hn_op_matmul_stacked (cmd, 2, ys, tx, tw, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  hn_cmd_reset (cmd);
}

static void
test_matmul_stacked (void)
{
  run_matmul_stacked (HN_DTYPE_F32, 70, 40, 96, TRUE, FALSE);
  run_matmul_stacked (HN_DTYPE_F16, 200, 136, 128, TRUE, TRUE);
  run_matmul_stacked (HN_DTYPE_F16, 130, 64, 70, FALSE, TRUE);
  run_matmul_stacked (HN_DTYPE_BF16, 300, 200, 64, TRUE, FALSE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/matmul/f32", test_matmul_f32);
  g_test_add_func ("/ops/matmul/f16-bf16", test_matmul_f16_bf16);
  g_test_add_func ("/ops/matmul/errors", test_matmul_errors);
  g_test_add_func ("/ops/matvec/fused", test_matvec_fused);
  g_test_add_func ("/ops/bmm", test_bmm);
  g_test_add_func ("/ops/matmul/autocast", test_autocast);
  g_test_add_func ("/ops/matmul/autocast-exact", test_autocast_exact);
  g_test_add_func ("/ops/matmul/cm2-variants", test_matmul_cm2_variants);
  g_test_add_func ("/ops/matmul/bf16-as-f16", test_bf16_as_f16);
  g_test_add_func ("/ops/matmul/add-n", test_matmul_add_n);
  g_test_add_func ("/ops/matmul/f16-x", test_matmul_f16x);
  g_test_add_func ("/ops/matmul/f16-out", test_matmul_f16_out);
  g_test_add_func ("/ops/matmul/glu", test_matmul_glu);
  g_test_add_func ("/ops/matmul/f16-rounding", test_matmul_f16_rounding);
  g_test_add_func ("/ops/matmul/stacked", test_matmul_stacked);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
