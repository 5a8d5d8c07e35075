/* Elementwise ops: binary with broadcasting, scale, activations, gated
 * activations, fill, dtype-converting copy, embedding gather. */
#include "ops-test-common.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

static void
run_binary (int nda, const gint64 *sa, int ndb, const gint64 *sb, int ndo, const gint64 *so, HnBinaryOp op)
{
  g_autoptr(GError) error = NULL;
  gint64 na = 1, nb = 1, no = 1;
  gint64 a4[4] = { 1, 1, 1, 1 }, b4[4] = { 1, 1, 1, 1 }, o4[4] = { 1, 1, 1, 1 };
  for (int i = 0; i < nda; i++)
    na *= (a4[4 - nda + i] = sa[i]);
  for (int i = 0; i < ndb; i++)
    nb *= (b4[4 - ndb + i] = sb[i]);
  for (int i = 0; i < ndo; i++)
    no *= (o4[4 - ndo + i] = so[i]);
  g_autofree float *a = hn_test_random (na, -2, 2), *b = hn_test_random (nb, 0.5, 2);
  g_autoptr(HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, nda, sa, a);
  g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, ndb, sb, b);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, ndo, so);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_binary (cmd, to, ta, tb, op, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, no);
  hn_ref_binary (ref, a, a4, b, b4, o4, op);
  hn_test_assert_close ("binary", got, ref, no, 1e-6, 0);
}

/* An f16 b (a residual branch stored f16): the sum with its values in f32, bit for bit; only
 * without broadcast */
static void
test_binary_f16 (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *x = hn_test_random (2400, -2, 2), *y = hn_test_random (2400, -2, 2);
  for (int i = 0; i < 2400; i++)
    y[i] = hn_f16_to_f32 (hn_f32_to_f16 (y[i]));
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 300, 8 }, x);
  g_autoptr(HnTensor) y16 = hn_test_tensor (HN_DTYPE_F16, 2, (gint64[]) { 300, 8 }, y);
  g_autoptr(HnTensor) y32 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 300, 8 }, y);
  g_autoptr(HnTensor) o16 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 300, 8 });
  g_autoptr(HnTensor) o32 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 300, 8 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_add (cmd, o16, tx, y16, &error));
  g_assert_true (hn_op_add (cmd, o32, tx, y32, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *a = hn_test_download (o16), *b = hn_test_download (o32);
  g_assert_cmpmem (a, sizeof (float) * 2400, b, sizeof (float) * 2400);
  g_autoptr(HnTensor) row16 = hn_test_tensor (HN_DTYPE_F16, 1, (gint64[]) { 8 }, y);
  g_assert_false (hn_op_add (cmd, o16, tx, row16, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_binary (void)
{
  run_binary (2, (gint64[]) { 3, 5 }, 2, (gint64[]) { 3, 5 }, 2, (gint64[]) { 3, 5 }, HN_BINARY_ADD);
  run_binary (2, (gint64[]) { 300, 7 }, 1, (gint64[]) { 7 }, 2, (gint64[]) { 300, 7 }, HN_BINARY_ADD);    /* bias */
  run_binary (3, (gint64[]) { 4, 1, 9 }, 2, (gint64[]) { 5, 1 }, 3, (gint64[]) { 4, 5, 9 }, HN_BINARY_MUL);
  run_binary (4, (gint64[]) { 2, 3, 4, 5 }, 4, (gint64[]) { 2, 1, 4, 1 }, 4, (gint64[]) { 2, 3, 4, 5 }, HN_BINARY_SUB);
  run_binary (1, (gint64[]) { 1 }, 2, (gint64[]) { 17, 13 }, 2, (gint64[]) { 17, 13 }, HN_BINARY_DIV);
  run_binary (1, (gint64[]) { 70001 }, 1, (gint64[]) { 70001 }, 1, (gint64[]) { 70001 }, HN_BINARY_MUL);

  /* four elements at a time (same shapes of 4-element sizes) */
  run_binary (2, (gint64[]) { 300, 8 }, 2, (gint64[]) { 300, 8 }, 2, (gint64[]) { 300, 8 }, HN_BINARY_SUB);
  test_binary_f16 ();

  /* in place, and a bad broadcast */
  g_autoptr(GError) error = NULL;
  g_autofree float *a = hn_test_random (12, -1, 1), *b = hn_test_random (4, -1, 1), *ref = g_new (float, 12);
  g_autoptr(HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 3, 4 }, a);
  g_autoptr(HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 4 }, b);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_add (cmd, ta, ta, tb, &error));
  hn_test_run (cmd);
  hn_ref_binary (ref, a, (gint64[]) { 1, 1, 3, 4 }, b, (gint64[]) { 1, 1, 1, 4 }, (gint64[]) { 1, 1, 3, 4 }, HN_BINARY_ADD);
  g_autofree float *got = hn_test_download (ta);
  hn_test_assert_close ("add in place", got, ref, 12, 1e-6, 0);
  g_autoptr(HnTensor) tc = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 3 });
  g_assert_false (hn_op_add (cmd, ta, ta, tc, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_unary (void)
{
  g_autoptr(GError) error = NULL;
  gint64 n = 1000;
  g_autofree float *x = hn_test_random (n, -8, 8);
  /* exact points where tails and small-|x| branches matter */
  float special[] = { 0.0f, -0.0f, 1e-4f, -1e-4f, 0.29f, -0.31f, -12.0f, 12.0f, -30.0f, 30.0f, 3.5f, -3.5f };
  memcpy (x, special, sizeof special);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 40, 25 }, x);
  g_autoptr(HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 40, 25 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  for (int act = HN_ACT_IDENTITY; act <= HN_ACT_SOFTPLUS; act++)
    {
      g_assert_true (hn_op_unary (cmd, ty, tx, act, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (ty), *ref = g_new (float, n);
      hn_ref_unary (ref, x, n, act);
      /* 1e-5 relative; absolute floor far below any value of interest */
      hn_test_assert_close (hn_activation_name (act), got, ref, n, 1e-5, 1e-30 + 1e-6 * 1e-6);
    }
  HnActivation a;
  g_assert_true (hn_activation_from_string ("gelu_pytorch_tanh", &a));
  g_assert_cmpint (a, ==, HN_ACT_GELU_TANH);
  g_assert_true (hn_activation_from_string ("swish", &a));
  g_assert_cmpint (a, ==, HN_ACT_SILU);
  g_assert_false (hn_activation_from_string ("nope", &a));
  g_assert_false (hn_activation_from_string ("softplus", &a)); /* unary only, not an MLP activation */

  /* scale */
  g_assert_true (hn_op_scale (cmd, ty, tx, -0.75f, 2.5f, &error));
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (ty), *ref = g_new (float, n);
  hn_ref_scale (ref, x, n, -0.75f, 2.5f);
  hn_test_assert_close ("scale", got, ref, n, 1e-6, 1e-6);

  /* clamp, in place */
  g_autoptr(HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { n }, x);
  g_assert_true (hn_op_clamp (cmd, tc, tc, -1.5f, 2.25f, &error));
  hn_test_run (cmd);
  g_autofree float *gc = hn_test_download (tc), *rc = g_new (float, n);
  hn_ref_clamp (rc, x, n, -1.5f, 2.25f);
  hn_test_assert_close ("clamp", gc, rc, n, 0, 0);
  g_assert_false (hn_op_clamp (cmd, tc, tc, 1.0f, 0.0f, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* F 301: one element per invocation; F 300: four (rows 16-byte aligned) */
static void
run_glu (gint64 F)
{
  g_autoptr(GError) error = NULL;
  gint64 rows = 7;
  g_autofree float *g = hn_test_random (rows * F, -5, 5), *u = hn_test_random (rows * F, -2, 2);
  g_autofree float *gu = hn_test_random (rows * 2 * F, -5, 5);
  g_autoptr(HnTensor) tg = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, g);
  g_autoptr(HnTensor) tu = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, u);
  g_autoptr(HnTensor) tgu = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, 2 * F }, gu);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, F });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnActivation acts[] = { HN_ACT_SILU, HN_ACT_GELU, HN_ACT_GELU_TANH, HN_ACT_RELU };
  for (guint i = 0; i < G_N_ELEMENTS (acts); i++)
    for (int fused = 0; fused < 2; fused++)
      {
        g_assert_true (hn_op_glu (cmd, to, fused ? tgu : tg, fused ? NULL : tu, acts[i], &error));
        g_assert_no_error (error);
        hn_test_run (cmd);
        g_autofree float *got = hn_test_download (to), *ref = g_new (float, rows * F);
        hn_ref_glu (ref, fused ? gu : g, fused ? NULL : u, rows, F, acts[i]);
        g_autofree char *what = g_strdup_printf ("glu %s%s F %" G_GINT64_FORMAT, hn_activation_name (acts[i]), fused ? " fused" : "", F);
        hn_test_assert_close (what, got, ref, rows * F, 1e-5, 1e-12);
      }
  g_assert_false (hn_op_glu (cmd, to, tg, NULL, HN_ACT_SILU, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* glu writing f16 (the down projection's operand): the f32 result rounded
 * to f16 and clamped to ±65504; F 300: four per invocation, F 301 over 8
 * rows: pairs that straddle rows; an odd element count is refused. */
static void
run_glu16 (gint64 rows, gint64 F)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *g = hn_test_random (rows * F, -5, 5), *u = hn_test_random (rows * F, -2, 2);
  g[1] = 400.0f; /* silu(400) * u: past 65504 once scaled */
  u[1] = 300.0f;
  g[2] = -400.0f;
  u[2] = -0.5f;
  g_autoptr(HnTensor) tg = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, g);
  g_autoptr(HnTensor) tu = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, u);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, F });
  g_autoptr(HnTensor) t16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { rows, F });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_glu (cmd, to, tg, tu, HN_ACT_SILU, &error));
  g_assert_true (hn_op_glu (cmd, t16, tg, tu, HN_ACT_SILU, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got32 = hn_test_download (to), *got16 = hn_test_download (t16);
  for (gint64 i = 0; i < rows * F; i++)
    {
      float want = hn_f16_to_f32 (hn_f32_to_f16 (CLAMP (got32[i], -65504.0f, 65504.0f)));
      /* one f16 step either way: the device's rounding of a tie may differ */
      if (!(fabsf (got16[i] - want) <= fabsf (want) * 1e-3f + 1e-7f))
        {
          g_test_fail_printf ("glu f16 F %" G_GINT64_FORMAT ": element %" G_GINT64_FORMAT " is %.9g, want %.9g", F, i,
                              got16[i], want);
          return;
        }
    }
  g_assert_cmpfloat (got16[1], ==, 65504.0f);
  g_autoptr(HnTensor) odd = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 7, 301 });
  g_autoptr(HnTensor) og = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 7, 301 });
  g_assert_false (hn_op_glu (cmd, odd, og, og, HN_ACT_SILU, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* Under fp16 autocast an f16 glu out is the f32 result rounded as autocast rounds: hn_op_cast_f16's
 * copy of it, bit for bit (Inf past the range where inference clamps), four and two at a time. */
static void
run_glu16_autocast (gint64 rows, gint64 F)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *g = hn_test_random (rows * F, -5, 5), *u = hn_test_random (rows * F, -2, 2);
  g[1] = 400.0f;
  u[1] = 300.0f;
  g_autoptr(HnTensor) tg = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, g);
  g_autoptr(HnTensor) tu = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { rows, F }, u);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { rows, F });
  g_autoptr(HnTensor) t16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { rows, F });
  g_autoptr(HnTensor) want16 = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { rows, F });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  g_assert_true (hn_op_glu (cmd, to, tg, tu, HN_ACT_SILU, &error));
  g_assert_true (hn_op_glu (cmd, t16, tg, tu, HN_ACT_SILU, &error));
  g_assert_true (hn_op_cast_f16 (cmd, want16, to, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree guint16 *a = (guint16 *) hn_test_same_bytes (t16, want16);
  g_assert_cmpuint (a[1], ==, 0x7c00);
}

static void
test_glu (void)
{
  run_glu (301);
  run_glu (300);
  run_glu16 (7, 300);
  run_glu16 (8, 301);
  run_glu16_autocast (7, 300);
  run_glu16_autocast (8, 302);
}

static void
test_fill_copy (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_autoptr(HnTensor) ti = hn_test_empty (HN_DTYPE_I32, 1, (gint64[]) { 5 });
  g_assert_true (hn_op_fill (cmd, ti, -7.0f, &error));
  hn_test_run (cmd);
  gint32 iv[5];
  g_assert_true (hn_tensor_download_i32 (ti, iv, 5, &error));
  g_assert_cmpint (iv[4], ==, -7);

  /* every conversion between f32, f16 and bf16, odd counts, into a view at an even offset */
  HnDType dts[] = { HN_DTYPE_F32, HN_DTYPE_F16, HN_DTYPE_BF16 };
  gint64 n = 333;
  for (guint i = 0; i < 3; i++)
    for (guint o = 0; o < 3; o++)
      {
        g_autofree float *x = hn_test_random (n, -100, 100);
        g_autoptr(HnTensor) tin = hn_test_tensor (dts[i], 1, (gint64[]) { n }, x);
        g_autoptr(HnTensor) big = hn_test_empty (dts[o], 2, (gint64[]) { 3, n + 1 });
        g_autofree float *sentinel = g_new0 (float, 3 * (n + 1));
        for (gint64 k = 0; k < 3 * (n + 1); k++)
          sentinel[k] = 42.0f;
        g_assert_true (hn_tensor_upload_f32 (big, sentinel, 3 * (n + 1), &error));
        g_autoptr(HnTensor) row = hn_tensor_view_rows (big, 1, 1, &error);
        g_autoptr(HnTensor) dst = hn_tensor_reshape (row, 1, (gint64[]) { n + 1 }, &error);
        g_autoptr(HnTensor) out = hn_tensor_view_rows (dst, 0, n, &error);
        g_assert_no_error (error);
        g_assert_true (hn_op_copy (cmd, out, tin, &error));
        g_assert_no_error (error);
        hn_test_run (cmd);
        g_autofree float *all = hn_test_download (big);
        for (gint64 k = 0; k < 3 * (n + 1); k++)
          {
            gint64 r = k / (n + 1), c = k % (n + 1);
            float want = 42.0f;
            if (r == 1 && c < n)
              want = dts[o] == HN_DTYPE_F16 ? hn_f16_to_f32 (hn_f32_to_f16 (x[c]))
                   : dts[o] == HN_DTYPE_BF16 ? hn_bf16_to_f32 (hn_f32_to_bf16 (x[c])) : x[c];
            if (all[k] != want)
              {
                g_test_fail_printf ("copy %s -> %s: element %" G_GINT64_FORMAT " is %g, want %g",
                                    hn_dtype_name (dts[i]), hn_dtype_name (dts[o]), k, all[k], want);
                return;
              }
          }
      }
}

static void
test_embedding (void)
{
  g_autoptr(GError) error = NULL;
  gint64 V = 50, D = 37, N = 13;
  HnDType dts[] = { HN_DTYPE_F32, HN_DTYPE_F16, HN_DTYPE_BF16 };
  for (guint d = 0; d < 3; d++)
    {
      g_autofree float *table = hn_test_random (V * D, -1, 1);
      gint32 ids[13];
      for (int i = 0; i < N; i++)
        ids[i] = g_test_rand_int_range (0, (gint32) V);
      ids[3] = -1;          /* out of range -> zeros */
      ids[4] = (gint32) V;
      ids[5] = (gint32) V - 1;
      g_autoptr(HnTensor) tt = hn_test_tensor (dts[d], 2, (gint64[]) { V, D }, table);
      g_autoptr(HnTensor) tid = hn_test_tensor_i32 (1, (gint64[]) { N }, ids);
      g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { N, D });
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_embedding (cmd, to, tt, tid, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (to), *ref = g_new (float, N * D);
      hn_ref_embedding (ref, table, V, D, ids, N);
      hn_test_assert_close ("embedding", got, ref, N * D, 0, 0);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/binary", test_binary);
  g_test_add_func ("/ops/unary", test_unary);
  g_test_add_func ("/ops/glu", test_glu);
  g_test_add_func ("/ops/fill-copy", test_fill_copy);
  g_test_add_func ("/ops/embedding", test_embedding);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
