/* Row ops: RMSNorm, LayerNorm, softmax (masks, window, soft-cap), reductions,
 * cross-entropy, argmax/top-k. */
#include "ops-test-common.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

static void
run_rmsnorm (gint64 rows, gint64 cols, gboolean weight, HnNormFlags flags)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *x = hn_test_random (rows * cols, -3, 3), *w = hn_test_random (cols, -1.5, 1.5);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, cols }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { cols }, w);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, cols });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rmsnorm (cmd, to, tx, weight ? tw : NULL, 1e-6f, flags, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, rows * cols);
  hn_ref_rmsnorm (ref, x, weight ? w : NULL, rows, cols, 1e-6f, flags);
  /* With rounding to bf16/f16, a 1-ulp difference of x̂ before rounding
   * can flip the rounded value: allow one 16-bit ulp there. */
  double rtol = (flags & HN_NORM_ROUND_BF16) ? 1.0 / 128 : (flags & HN_NORM_ROUND_F16) ? 1.0 / 1024 : 1e-5;
  g_autofree char *what = g_strdup_printf ("rmsnorm %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " flags %d", rows, cols, flags);
  hn_test_assert_close (what, got, ref, rows * cols, rtol, 1e-6);
}

static void
test_rmsnorm (void)
{
  run_rmsnorm (1, 1, TRUE, 0);
  run_rmsnorm (7, 257, TRUE, 0);
  run_rmsnorm (3, 1000, FALSE, 0);
  run_rmsnorm (70, 64, TRUE, HN_NORM_WEIGHT_PLUS_ONE);
  run_rmsnorm (5, 300, TRUE, HN_NORM_ROUND_BF16);
  run_rmsnorm (5, 300, TRUE, HN_NORM_ROUND_F16 | HN_NORM_WEIGHT_PLUS_ONE);

  /* in place, per-head ([T, H, D] with w [D]) */
  g_autoptr(GError) error = NULL;
  g_autofree float *x = hn_test_random (4 * 3 * 8, -2, 2), *w = hn_test_random (8, 0, 2), *ref = g_new (float, 96);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 4, 3, 8 }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 8 }, w);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rmsnorm (cmd, tx, tx, tw, 1e-5f, 0, &error));
  hn_test_run (cmd);
  hn_ref_rmsnorm (ref, x, w, 12, 8, 1e-5f, 0);
  g_autofree float *got = hn_test_download (tx);
  hn_test_assert_close ("rmsnorm per head in place", got, ref, 96, 1e-5, 1e-6);
  g_autoptr(HnTensor) bad = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 7 });
  g_assert_false (hn_op_rmsnorm (cmd, tx, tx, bad, 1e-5f, 0, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* an f16 out (a matmul operand): the f32 result rounded to f16, clamped to ±65504; an odd
   * last dim and the input itself are refused */
  const gint64 R = 5, C = 600;
  g_autofree float *x2 = hn_test_random (R * C, -2, 2), *w2 = hn_test_random (C, -1, 1);
  w2[3] = 2e5f;
  g_autoptr(HnTensor) tx2 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { R, C }, x2);
  g_autoptr(HnTensor) tw2 = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, w2);
  g_autoptr(HnTensor) o32 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { R, C });
  g_autoptr(HnTensor) o16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { R, C });
  g_assert_true (hn_op_rmsnorm (cmd, o32, tx2, tw2, 1e-5f, HN_NORM_WEIGHT_PLUS_ONE, &error));
  g_assert_true (hn_op_rmsnorm (cmd, o16, tx2, tw2, 1e-5f, HN_NORM_WEIGHT_PLUS_ONE, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *g32 = hn_test_download (o32), *g16 = hn_test_download (o16);
  for (gint64 i = 0; i < R * C; i++)
    {
      float want = hn_f16_to_f32 (hn_f32_to_f16 (CLAMP (g32[i], -65504.0f, 65504.0f)));
      if (!(fabsf (g16[i] - want) <= fabsf (want) * 1e-3f + 1e-7f))
        {
          g_test_fail_printf ("rmsnorm f16: element %" G_GINT64_FORMAT " is %.9g, want %.9g", i, g16[i], want);
          break;
        }
      if (i % C == 3 && fabsf (g32[i]) > 65504.0f && fabsf (g16[i]) != 65504.0f)
        g_test_fail_printf ("rmsnorm f16: element %" G_GINT64_FORMAT " is %.9g, not clamped", i, g16[i]);
    }
  g_autoptr(HnTensor) x3 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 2, 7 });
  g_autoptr(HnTensor) o3 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 2, 7 });
  g_assert_false (hn_op_rmsnorm (cmd, o3, x3, NULL, 1e-5f, 0, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_layernorm (void)
{
  g_autoptr(GError) error = NULL;
  struct { gint64 rows, cols; gboolean w, b; } cases[] = {
    { 1, 1, TRUE, TRUE }, { 9, 255, TRUE, TRUE }, { 4, 768, TRUE, FALSE }, { 33, 31, FALSE, FALSE }, { 2, 600, FALSE, TRUE } };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      gint64 rows = cases[i].rows, cols = cases[i].cols;
      g_autofree float *x = hn_test_random (rows * cols, -3, 5), *w = hn_test_random (cols, -1, 1),
                       *b = hn_test_random (cols, -1, 1);
      g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, cols }, x);
      g_autoptr(HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { cols }, w);
      g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { cols }, b);
      g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, cols });
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_layernorm (cmd, to, tx, cases[i].w ? tw : NULL, cases[i].b ? tb : NULL, 1e-5f, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (to), *ref = g_new (float, rows * cols);
      hn_ref_layernorm (ref, x, cases[i].w ? w : NULL, cases[i].b ? b : NULL, rows, cols, 1e-5f);
      hn_test_assert_close ("layernorm", got, ref, rows * cols, 1e-5, 1e-5);
    }
}

/* Both norms writing f16 straight away (what the matmul after them reads): under fp16 autocast
 * the bits hn_op_cast_f16 makes of the f32 result (±Inf past the range: column 3's weight), else
 * that result clamped to ±65504 and rounded. */
static void
test_norm_f16_out (void)
{
  g_autoptr(GError) error = NULL;
  const gint64 R = 7, C = 768;
  g_autofree float *x = hn_test_random (R * C, -3, 3), *w = hn_test_random (C, -1, 1), *b = hn_test_random (C, -1, 1);
  w[3] = 3e5f;
  for (gint64 r = 0; r < R; r++)
    x[r * C + 3] = 2.9f; /* about 1.7 once normed: past the f16 range times w[3] */
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { R, C }, x);
  g_autoptr(HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, w);
  g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, b);
  for (int layer = 0; layer < 2; layer++)
    for (int autocast = 0; autocast < 2; autocast++)
      {
        g_autoptr(HnTensor) o32 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { R, C });
        g_autoptr(HnTensor) o16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { R, C });
        g_autoptr(HnTensor) want16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { R, C });
        g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
        hn_cmd_set_autocast (cmd, autocast ? HN_AUTOCAST_F16 : HN_AUTOCAST_NONE);
        for (int k = 0; k < 2; k++)
          g_assert_true (layer ? hn_op_layernorm (cmd, k ? o16 : o32, tx, tw, tb, 1e-5f, &error)
                               : hn_op_rmsnorm (cmd, k ? o16 : o32, tx, tw, 1e-5f, 0, &error));
        if (autocast)
          g_assert_true (hn_op_cast_f16 (cmd, want16, o32, &error));
        g_assert_no_error (error);
        hn_test_run (cmd);
        g_autofree guint16 *got = g_new (guint16, R * C), *want = g_new (guint16, R * C);
        g_assert_true (hn_tensor_download_raw (o16, got, sizeof (guint16) * R * C, &error));
        if (autocast)
          g_assert_true (hn_tensor_download_raw (want16, want, sizeof (guint16) * R * C, &error));
        else
          {
            g_autofree float *g32 = hn_test_download (o32);
            for (gint64 i = 0; i < R * C; i++)
              want[i] = hn_f32_to_f16 (CLAMP (g32[i], -65504.0f, 65504.0f));
          }
        g_assert_cmpmem (got, sizeof (guint16) * R * C, want, sizeof (guint16) * R * C);
        /* column 3 is past the f16 range: ±Inf under autocast, ±65504 otherwise */
        for (gint64 r = 0; r < R; r++)
          g_assert_cmpuint (got[r * C + 3] & 0x7fff, ==, autocast ? 0x7c00 : 0x7bff);
      }
}

/* the norms with their row sums by subgroup reductions (HN_NORM_SG_REDUCE=1) */
static void
test_norm_subgroup_sums (void)
{
  g_setenv ("HN_NORM_SG_REDUCE", "1", TRUE);
  test_rmsnorm ();
  test_layernorm ();
  test_norm_f16_out ();
  g_unsetenv ("HN_NORM_SG_REDUCE");
}

static void
run_softmax (int ndim, const gint64 *shape, HnSoftmaxParams p, int mask_kind)
{
  g_autoptr(GError) error = NULL;
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  gint64 S = shape[ndim - 1], T = ndim >= 2 ? shape[ndim - 2] : 1, rows = n / S;
  g_autofree float *x = hn_test_random (n, -6, 6);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, ndim, shape, x);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, ndim, shape);
  /* mask kinds: 0 none, 1 [T, S] with -inf holes, 2 padding [B, 1, S] */
  gint64 mB = 1, mT = 1;
  g_autofree float *mask = NULL;
  g_autoptr(HnTensor) tm = NULL;
  if (mask_kind == 1)
    {
      mT = T;
      mask = hn_test_random (T * S, -1, 1);
      for (gint64 i = 0; i < T * S; i += 3)
        mask[i] = -INFINITY;
      tm = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { T, S }, mask);
    }
  else if (mask_kind == 2)
    {
      mB = shape[0];
      mask = g_new0 (float, mB * S);
      for (gint64 b = 0; b < mB; b++)
        for (gint64 s = 0; s < b % S; s++)
          mask[b * S + s] = -INFINITY; /* left padding of b tokens */
      tm = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { mB, 1, S }, mask);
    }
  p.mask = tm;
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_softmax (cmd, to, tx, &p, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, n);
  hn_ref_softmax (ref, x, rows, S, T, &p, mask, mB, mT);
  hn_test_assert_close ("softmax", got, ref, n, 1e-5, 1e-7);
}

static void
test_softmax (void)
{
  run_softmax (1, (gint64[]) { 1 }, (HnSoftmaxParams) { 0 }, 0);
  run_softmax (2, (gint64[]) { 5, 1000 }, (HnSoftmaxParams) { 0 }, 0);
  run_softmax (2, (gint64[]) { 3, 7 }, (HnSoftmaxParams) { .scale = 0.3f }, 0);
  /* attention-shaped [B, H, T, S] with causal masking and a past of 4 */
  run_softmax (4, (gint64[]) { 2, 3, 5, 9 }, (HnSoftmaxParams) { .causal = TRUE, .pos0 = 4, .scale = 0.5f }, 0);
  run_softmax (3, (gint64[]) { 2, 9, 9 }, (HnSoftmaxParams) { .causal = TRUE, .window = 3 }, 0);
  run_softmax (3, (gint64[]) { 2, 6, 300 }, (HnSoftmaxParams) { .softcap = 2.0f, .scale = 1.5f }, 0);
  run_softmax (3, (gint64[]) { 3, 6, 11 }, (HnSoftmaxParams) { 0 }, 1);
  run_softmax (4, (gint64[]) { 4, 2, 3, 6 }, (HnSoftmaxParams) { .causal = TRUE, .pos0 = 3 }, 2);
  /* a fully hidden row gives zeros: causal with pos0 < 0 is refused, so use a window of 1 with a hole */
  g_autoptr(GError) error = NULL;
  float x[4] = { 1, 2, 3, 4 }, mask[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 4 }, x);
  g_autoptr(HnTensor) tm = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 4 }, mask);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnSoftmaxParams p = { .mask = tm };
  g_assert_true (hn_op_softmax (cmd, tx, tx, &p, &error));
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (tx);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (got[i], ==, 0.0f);
}

static void
test_reduce (void)
{
  g_autoptr(GError) error = NULL;
  gint64 rows = 13, cols = 517;
  g_autofree float *x = hn_test_random (rows * cols, -2, 3);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, rows, cols }, x);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 1, rows });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  for (int op = HN_REDUCE_SUM; op <= HN_REDUCE_MAX; op++)
    {
      g_assert_true (hn_op_reduce (cmd, to, tx, op, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (to), *ref = g_new (float, rows);
      hn_ref_reduce (ref, x, rows, cols, op);
      /* sums: 1e-5 of the sum of |x| (at most 3 * cols) */
      hn_test_assert_close ("reduce", got, ref, rows, 1e-5, op == HN_REDUCE_MAX ? 0 : 1e-5 * 3 * cols / (op == HN_REDUCE_MEAN ? cols : 1));
    }
}

static void
test_cross_entropy (void)
{
  g_autoptr(GError) error = NULL;
  gint64 N = 11, V = 1003;
  g_autofree float *logits = hn_test_random (N * V, -10, 10);
  gint32 targets[11];
  for (int i = 0; i < N; i++)
    targets[i] = g_test_rand_int_range (0, (gint32) V);
  targets[2] = -100;
  targets[7] = -100;
  targets[9] = (gint32) V - 1;
  g_autoptr(HnTensor) tl = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { N, V }, logits);
  g_autoptr(HnTensor) tt = hn_test_tensor_i32 (1, (gint64[]) { N }, targets);
  g_autoptr(HnTensor) loss = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { N });
  g_autoptr(HnTensor) mean = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 1 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_cross_entropy (cmd, loss, mean, tl, tt, -100, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (loss), *gm = hn_test_download (mean), *ref = g_new (float, N);
  float rmean;
  hn_ref_cross_entropy (ref, &rmean, logits, targets, N, V, -100);
  hn_test_assert_close ("cross-entropy", got, ref, N, 1e-5, 1e-6);
  hn_test_assert_close ("cross-entropy mean", gm, &rmean, 1, 1e-5, 1e-6);
  g_assert_cmpfloat (got[2], ==, 0.0f);

  /* all ignored: mean 0 */
  gint32 all_ignored[11];
  for (int i = 0; i < N; i++)
    all_ignored[i] = -100;
  g_assert_true (hn_tensor_upload_i32 (tt, all_ignored, N, &error));
  g_assert_true (hn_op_cross_entropy (cmd, loss, mean, tl, tt, -100, &error));
  hn_test_run (cmd);
  g_autofree float *gm2 = hn_test_download (mean);
  g_assert_cmpfloat (gm2[0], ==, 0.0f);
}

static void
test_topk (void)
{
  g_autoptr(GError) error = NULL;
  gint64 rows = 5, cols = 1300;
  g_autofree float *x = hn_test_random (rows * cols, -5, 5);
  /* ties and a NaN */
  x[10] = x[20] = x[1000] = 7.0f;
  x[cols + 3] = NAN;
  x[2 * cols + 5] = INFINITY;
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, cols }, x);
  for (int k = 1; k <= 40; k += 13)
    {
      g_autoptr(HnTensor) tv = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, k });
      g_autoptr(HnTensor) ti = hn_test_empty (HN_DTYPE_I32, 2, (gint64[]) { rows, k });
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_topk (cmd, tv, ti, tx, k, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *gv = hn_test_download (tv), *rv = g_new (float, rows * k);
      g_autofree gint32 *gi = g_new (gint32, rows * k), *ri = g_new (gint32, rows * k);
      g_assert_true (hn_tensor_download_i32 (ti, gi, rows * k, &error));
      hn_ref_topk (rv, ri, x, rows, cols, k);
      for (gint64 i = 0; i < rows * k; i++)
        if (gi[i] != ri[i] || gv[i] != rv[i])
          {
            g_test_fail_printf ("topk k=%d: entry %" G_GINT64_FORMAT " is (%d, %g), reference (%d, %g)", k, i, gi[i], gv[i],
                                ri[i], rv[i]);
            break;
          }
    }
  g_autoptr(HnTensor) am = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { rows });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_argmax (cmd, am, tx, &error));
  hn_test_run (cmd);
  gint32 got[5], ri[5];
  g_assert_true (hn_tensor_download_i32 (am, got, rows, &error));
  hn_ref_topk (NULL, ri, x, rows, cols, 1);
  for (int i = 0; i < rows; i++)
    g_assert_cmpint (got[i], ==, ri[i]);
  g_assert_cmpint (got[0], ==, 10);                 /* first of the ties */
  g_assert_cmpint (got[2], ==, 5);                  /* +inf */
  /* one row (the greedy decode step's kernel), each of the rows above and a long one */
  for (int r = 0; r < rows; r++)
    {
      g_autoptr(HnTensor) row = hn_tensor_view_rows (tx, r, 1, &error);
      g_autoptr(HnTensor) one = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { 1 });
      g_autoptr(HnCmd) c1 = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_argmax (c1, one, row, &error));
      hn_test_run (c1);
      gint32 g1;
      g_assert_true (hn_tensor_download_i32 (one, &g1, 1, &error));
      g_assert_cmpint (g1, ==, ri[r]);
    }
  gint64 n = 150001;
  g_autofree float *big = hn_test_random (n, -3, 3);
  big[n - 2] = big[77777] = 9.0f;
  g_autoptr(HnTensor) tbig = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 1, n }, big);
  g_autoptr(HnTensor) one = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { 1 });
  g_autoptr(HnCmd) c2 = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_argmax (c2, one, tbig, &error));
  hn_test_run (c2);
  gint32 g2;
  g_assert_true (hn_tensor_download_i32 (one, &g2, 1, &error));
  g_assert_cmpint (g2, ==, 77777);
  /* the same over many workgroups (scratch): ties in other chunks, NaN skipped, all -inf gives 0 */
  g_autoptr(HnTensor) tsc = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 2 * ((n + 1023) / 1024) });
  big[3] = NAN;
  big[80000] = 9.0f;
  g_autoptr(HnTensor) tbig2 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 1, n }, big);
  g_autofree float *ninf = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    ninf[i] = -INFINITY;
  g_autoptr(HnTensor) tninf = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 1, n }, ninf);
  g_autoptr(HnTensor) picks = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { 2 });
  g_autoptr(HnTensor) p0 = hn_tensor_view_rows (picks, 0, 1, &error), p1 = hn_tensor_view_rows (picks, 1, 1, &error);
  g_autoptr(HnCmd) c3 = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_argmax_scratch (c3, p0, tbig2, tsc, &error));
  g_assert_true (hn_op_argmax_scratch (c3, p1, tninf, tsc, &error));
  g_assert_no_error (error);
  hn_test_run (c3);
  gint32 g3[2];
  g_assert_true (hn_tensor_download_i32 (picks, g3, 2, &error));
  g_assert_cmpint (g3[0], ==, 77777);
  g_assert_cmpint (g3[1], ==, 0);
}

/* Every routing kind against the CPU reference, odd sizes, groups, a correction bias and a clamped sum. */
static void
test_moe_route (void)
{
  g_autoptr(GError) error = NULL;
  struct { HnMoeRouteKind kind; gint64 E; int k; gboolean norm; float scale; int n_group, topk_group; gboolean sum2; gboolean bias; float norm_min, norm_add; } cases[] = {
    { HN_MOE_ROUTE_SOFTMAX_TOPK, 8, 2, TRUE, 0, 0, 0, FALSE, FALSE },
    { HN_MOE_ROUTE_SOFTMAX_TOPK, 7, 3, FALSE, 2.5f, 0, 0, FALSE, FALSE },
    { HN_MOE_ROUTE_SOFTMAX_TOPK, 12, 3, FALSE, 1.0f, 4, 2, FALSE, FALSE },
    { HN_MOE_ROUTE_TOPK_SOFTMAX, 5, 2, FALSE, 0, 0, 0, FALSE, FALSE },
    { HN_MOE_ROUTE_SIGMOID_TOPK, 16, 4, TRUE, 2.5f, 4, 2, TRUE, TRUE },
    { HN_MOE_ROUTE_SIGMOID_TOPK, 6, 2, FALSE, 1.0f, 0, 0, FALSE, TRUE },
    /* lfm2_moe: a constant added to the renormalising sum (large here so that it shows) */
    { HN_MOE_ROUTE_SIGMOID_TOPK, 6, 2, TRUE, 1.0f, 0, 0, FALSE, TRUE, 0, 0.5f },
    { HN_MOE_ROUTE_SPARSEMIXER, 9, 2, FALSE, 0, 0, 0, FALSE, FALSE },
    /* ernie4_5_moe: softmax, biased choice, sum clamped (0.9 makes the clamp bite on many rows) */
    { HN_MOE_ROUTE_SOFTMAX_TOPK, 6, 2, TRUE, 0, 0, 0, FALSE, TRUE, 1e-12f },
    { HN_MOE_ROUTE_SOFTMAX_TOPK, 6, 2, TRUE, 0, 0, 0, FALSE, TRUE, 0.9f },
  };
  gint64 rows = 70;
  for (gsize c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      gint64 E = cases[c].E;
      int k = cases[c].k;
      g_autofree float *x = hn_test_random (rows * E, -3, 3);
      x[E + 1] = x[E + 2]; /* a tie */
      g_autofree float *b = hn_test_random (E, -0.5, 0.5);
      g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, E }, x);
      g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { E }, b);
      g_autoptr(HnTensor) tw = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, E });
      g_autoptr(HnTensor) ti = hn_test_empty (HN_DTYPE_I32, 2, (gint64[]) { rows, k });
      HnMoeRouteParams p = { cases[c].kind, k, cases[c].norm, cases[c].scale, cases[c].n_group, cases[c].topk_group,
                             cases[c].sum2, 0.05f, cases[c].bias ? tb : NULL, cases[c].norm_min, cases[c].norm_add };
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_moe_route (cmd, tw, ti, tx, &p, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *gw = hn_test_download (tw), *rw = g_new (float, rows * E);
      g_autofree gint32 *gi = g_new (gint32, rows * k), *ri = g_new (gint32, rows * k);
      g_assert_true (hn_tensor_download_i32 (ti, gi, rows * k, &error));
      hn_ref_moe_route (rw, ri, x, rows, E, &p, cases[c].bias ? b : NULL);
      g_assert_cmpmem (gi, sizeof (gint32) * rows * k, ri, sizeof (gint32) * rows * k);
      hn_test_assert_close ("moe_route", gw, rw, rows * E, 1e-5, 1e-6);
    }
  /* what the kinds cannot do is refused */
  g_autoptr(HnTensor) tx = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 6 });
  g_autoptr(HnTensor) tw = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 6 });
  g_autoptr(HnTensor) ti = hn_test_empty (HN_DTYPE_I32, 2, (gint64[]) { 3, 3 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnMoeRouteParams sm = { HN_MOE_ROUTE_SPARSEMIXER, 3, FALSE, 0, 0, 0, FALSE, 0.01f, NULL };
  g_assert_false (hn_op_moe_route (cmd, tw, ti, tx, &sm, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  HnMoeRouteParams gr = { HN_MOE_ROUTE_SOFTMAX_TOPK, 3, FALSE, 0, 4, 1, FALSE, 0, NULL };
  g_assert_false (hn_op_moe_route (cmd, tw, ti, tx, &gr, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* Sparse expert execution: moe_sort groups slots by expert, moe_matmul runs only the chosen
 * experts (f32/f16/bf16 weights, token and slot rows, with and without bias), moe_combine sums. */
static void
test_moe_sparse (void)
{
  g_autoptr(GError) error = NULL;
  struct { gint64 T, E, N, K; int k; HnDType dt; gboolean bias; } cases[] = {
    { 1, 8, 37, 24, 2, HN_DTYPE_F32, FALSE },   /* decode: two experts read */
    { 13, 5, 70, 33, 3, HN_DTYPE_F16, TRUE },   /* more slots per expert than one tile of 8 */
    { 40, 16, 9, 64, 4, HN_DTYPE_BF16, TRUE },
  };
  for (gsize c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      gint64 T = cases[c].T, E = cases[c].E, N = cases[c].N, K = cases[c].K, k = cases[c].k, S = T * k;
      g_autofree gint32 *ids = g_new (gint32, S);
      for (gint64 t = 0; t < T; t++)
        for (gint64 j = 0; j < k; j++)
          ids[t * k + j] = (gint32) ((t * 7 + j * 3 + (t % 3)) % E); /* distinct per token, uneven per expert */
      g_autofree float *x = hn_test_random (T * K, -1, 1), *xs = hn_test_random (S * K, -1, 1);
      g_autofree float *w = hn_test_random (E * N * K, -1, 1), *b = hn_test_random (E * N, -1, 1);
      g_autofree float *dw = hn_test_random (T * E, 0, 1);
      g_autoptr(HnTensor) tids = hn_test_tensor_i32 (2, (gint64[]) { T, k }, ids);
      g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { T, K }, x);
      g_autoptr(HnTensor) txs = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { S, K }, xs);
      g_autoptr(HnTensor) tw = hn_test_tensor (cases[c].dt, 3, (gint64[]) { E, N, K }, w);
      g_autoptr(HnTensor) tb = cases[c].bias ? hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { E, N }, b) : NULL;
      g_autoptr(HnTensor) twt = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { T, E }, dw);
      g_autoptr(HnTensor) toffs = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { E + 1 });
      g_autoptr(HnTensor) torder = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { S });
      gint64 nt = hn_moe_tiles_size (S, E);
      g_autoptr(HnTensor) ttiles = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { nt });
      g_autoptr(HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { S, N });
      g_autoptr(HnTensor) tys = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { S, N });
      g_autoptr(HnTensor) tout = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { T, N });
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_moe_sort (cmd, toffs, torder, ttiles, tids, (int) E, &error));
      g_assert_true (hn_op_moe_matmul (cmd, ty, tx, tw, tb, toffs, torder, ttiles, (int) k, &error));
      g_assert_true (hn_op_moe_matmul (cmd, tys, txs, tw, tb, toffs, torder, ttiles, 1, &error));
      g_assert_true (hn_op_moe_combine (cmd, tout, ty, twt, tids, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      /* offsets and order group the slots by expert */
      g_autofree gint32 *offs = g_new (gint32, E + 1), *order = g_new (gint32, S);
      g_assert_true (hn_tensor_download_i32 (toffs, offs, E + 1, &error));
      g_assert_true (hn_tensor_download_i32 (torder, order, S, &error));
      g_assert_cmpint (offs[0], ==, 0);
      g_assert_cmpint (offs[E], ==, S);
      /* the work list covers every slot once, in tiles of up to 8 of one expert */
      g_autofree gint32 *tl = g_new (gint32, nt);
      g_assert_true (hn_tensor_download_i32 (ttiles, tl, nt, &error));
      gint64 covered = 0;
      for (gint32 t = 0; t < tl[0]; t++)
        {
          gint32 e = tl[1 + 2 * t], row0 = tl[2 + 2 * t];
          g_assert_true (row0 >= offs[e] && row0 < offs[e + 1]);
          covered += MIN (8, offs[e + 1] - row0);
        }
      g_assert_cmpint (covered, ==, S);
      g_autofree gboolean *seen = g_new0 (gboolean, S);
      for (gint64 e = 0; e < E; e++)
        for (gint32 i = offs[e]; i < offs[e + 1]; i++)
          {
            g_assert_cmpint (ids[order[i]], ==, e);
            g_assert_false (seen[order[i]]);
            seen[order[i]] = TRUE;
          }
      g_autofree float *ry = g_new (float, S * N), *rys = g_new (float, S * N), *rout = g_new (float, T * N);
      hn_ref_moe_matmul (ry, x, w, tb ? b : NULL, ids, S, N, K, (int) k);
      hn_ref_moe_matmul (rys, xs, w, tb ? b : NULL, ids, S, N, K, 1);
      hn_ref_moe_combine (rout, ry, dw, ids, T, N, E, (int) k);
      g_autofree float *gy = hn_test_download (ty), *gys = hn_test_download (tys), *gout = hn_test_download (tout);
      hn_test_assert_close ("moe_matmul (token rows)", gy, ry, S * N, 1e-5, 1e-5);
      hn_test_assert_close ("moe_matmul (slot rows)", gys, rys, S * N, 1e-5, 1e-5);
      hn_test_assert_close ("moe_combine", gout, rout, T * N, 1e-5, 1e-5);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/rmsnorm", test_rmsnorm);
  g_test_add_func ("/ops/layernorm", test_layernorm);
  g_test_add_func ("/ops/norm-f16-out", test_norm_f16_out);
  g_test_add_func ("/ops/norm-subgroup-sums", test_norm_subgroup_sums);
  g_test_add_func ("/ops/softmax", test_softmax);
  g_test_add_func ("/ops/reduce", test_reduce);
  g_test_add_func ("/ops/cross-entropy", test_cross_entropy);
  g_test_add_func ("/ops/topk", test_topk);
  g_test_add_func ("/ops/moe-route", test_moe_route);
  g_test_add_func ("/ops/moe-sparse", test_moe_sparse);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
