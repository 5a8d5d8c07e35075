/* Layout ops: permute/transpose, slice, concat (f32 and i32), views. */
#include "ops-test-common.h"

#include <string.h>

static void
run_permute (int nd, const gint64 *shape, const int *perm)
{
  g_autoptr(GError) error = NULL;
  gint64 n = 1, oshape[4];
  for (int i = 0; i < nd; i++)
    n *= shape[i];
  for (int i = 0; i < nd; i++)
    oshape[i] = shape[perm[i]];
  g_autofree float *x = hn_test_random (n, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, nd, shape, x);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, nd, oshape);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_permute (cmd, to, tx, perm, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, n);
  hn_ref_permute ((guint32 *) ref, (const guint32 *) x, nd, shape, perm);
  hn_test_assert_close ("permute", got, ref, n, 0, 0);
}

static void
test_permute (void)
{
  run_permute (2, (gint64[]) { 3, 5 }, (int[]) { 1, 0 });
  run_permute (3, (gint64[]) { 7, 4, 9 }, (int[]) { 1, 0, 2 });   /* [T, H, D] -> [H, T, D] */
  run_permute (3, (gint64[]) { 7, 4, 9 }, (int[]) { 2, 1, 0 });
  run_permute (4, (gint64[]) { 2, 3, 5, 7 }, (int[]) { 0, 2, 1, 3 });
  run_permute (4, (gint64[]) { 2, 3, 5, 7 }, (int[]) { 3, 2, 0, 1 });
  run_permute (1, (gint64[]) { 300 }, (int[]) { 0 });

  g_autoptr(GError) error = NULL;
  g_autofree float *x = hn_test_random (60, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 3, 4, 5 }, x);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 3, 5, 4 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_transpose (cmd, to, tx, 1, 2, &error));
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to);
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 5; c++)
        g_assert_cmpfloat (got[(a * 5 + c) * 4 + b], ==, x[(a * 4 + b) * 5 + c]);
  /* a wrong out shape is refused */
  g_assert_false (hn_op_transpose (cmd, tx, tx, 1, 2, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_slice_concat (void)
{
  g_autoptr(GError) error = NULL;
  gint64 A = 3, B = 7, C = 5;
  g_autofree float *x = hn_test_random (A * B * C, -1, 1);
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { A, B, C }, x);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  for (int dim = 0; dim < 3; dim++)
    {
      gint64 shape[3] = { A, B, C };
      gint64 start = 1, len = shape[dim] - 2;
      gint64 s1[3] = { A, B, C }, s2[3] = { A, B, C };
      s1[dim] = len;
      g_autoptr(HnTensor) part = hn_test_empty (HN_DTYPE_F32, 3, s1);
      g_assert_true (hn_op_slice (cmd, part, tx, dim, start, &error));
      g_assert_no_error (error);
      /* concat(slice(x, 0..start), rest) == x */
      s1[dim] = start;
      s2[dim] = shape[dim] - start;
      g_autoptr(HnTensor) head = hn_test_empty (HN_DTYPE_F32, 3, s1);
      g_autoptr(HnTensor) tail = hn_test_empty (HN_DTYPE_F32, 3, s2);
      g_autoptr(HnTensor) back = hn_test_empty (HN_DTYPE_F32, 3, shape);
      g_assert_true (hn_op_slice (cmd, head, tx, dim, 0, &error));
      g_assert_true (hn_op_slice (cmd, tail, tx, dim, start, &error));
      g_assert_true (hn_op_concat (cmd, back, head, tail, dim, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *gp = hn_test_download (part), *gb = hn_test_download (back);
      hn_test_assert_close ("concat(slices)", gb, x, A * B * C, 0, 0);
      gint64 idx = 0;
      for (gint64 a = 0; a < A; a++)
        for (gint64 b = 0; b < B; b++)
          for (gint64 c = 0; c < C; c++)
            {
              gint64 coord[3] = { a, b, c };
              if (coord[dim] < start || coord[dim] >= start + len)
                continue;
              g_assert_cmpfloat (gp[idx++], ==, x[(a * B + b) * C + c]);
            }
      g_assert_cmpint (idx, ==, part->n);
    }
  /* i32 works too; out of range fails */
  gint32 ids[6] = { 1, 2, 3, 4, 5, 6 }, got[4];
  g_autoptr(HnTensor) ti = hn_test_tensor_i32 (2, (gint64[]) { 2, 3 }, ids);
  g_autoptr(HnTensor) tj = hn_test_empty (HN_DTYPE_I32, 2, (gint64[]) { 2, 2 });
  g_assert_true (hn_op_slice (cmd, tj, ti, 1, 1, &error));
  hn_test_run (cmd);
  g_assert_true (hn_tensor_download_i32 (tj, got, 4, &error));
  g_assert_cmpint (got[0], ==, 2);
  g_assert_cmpint (got[3], ==, 6);
  g_assert_false (hn_op_slice (cmd, tj, ti, 1, 2, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_kv_cache_write (void)
{
  /* Appending K rows to a cache through a row view + copy, as decode does. */
  g_autoptr(GError) error = NULL;
  gint64 n_ctx = 16, KVH = 2, D = 4;
  g_autoptr(HnTensor) cache = hn_test_empty (HN_DTYPE_F16, 3, (gint64[]) { n_ctx, KVH, D });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_autofree float *k1 = hn_test_random (3 * KVH * D, -1, 1), *k2 = hn_test_random (KVH * D, -1, 1);
  g_autoptr(HnTensor) t1 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 3, KVH, D }, k1);
  g_autoptr(HnTensor) t2 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, KVH, D }, k2);
  g_autoptr(HnTensor) v1 = hn_tensor_view_rows (cache, 0, 3, &error);
  g_autoptr(HnTensor) v2 = hn_tensor_view_rows (cache, 3, 1, &error);
  g_assert_true (hn_op_copy (cmd, v1, t1, &error));
  g_assert_true (hn_op_copy (cmd, v2, t2, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (cache);
  for (int i = 0; i < 3 * KVH * D; i++)
    g_assert_cmpfloat (got[i], ==, hn_f16_to_f32 (hn_f32_to_f16 (k1[i])));
  for (int i = 0; i < KVH * D; i++)
    g_assert_cmpfloat (got[3 * KVH * D + i], ==, hn_f16_to_f32 (hn_f32_to_f16 (k2[i])));
}

static void
test_kv_store (void)
{
  /* k and v rows into f32 caches at a row given on the host, then at one read on the device */
  g_autoptr(GError) error = NULL;
  gint64 n_ctx = 9, W = 12;
  g_autofree float *zero = g_new0 (float, n_ctx * W);
  g_autoptr(HnTensor) kc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { n_ctx, W }, zero);
  g_autoptr(HnTensor) vc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { n_ctx, W }, zero);
  g_autofree float *k = hn_test_random (3 * W, -1, 1), *v = hn_test_random (3 * W, -1, 1);
  g_autoptr(HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 3, 3, 4 }, k);
  g_autoptr(HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 3, 3, 4 }, v);
  g_autoptr(HnTensor) k1 = hn_tensor_view_rows (tk, 2, 1, &error), v1 = hn_tensor_view_rows (tv, 2, 1, &error);
  gint32 row = 7;
  g_autoptr(HnTensor) trow = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &row);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_kv_store (cmd, kc, vc, tk, tv, 2, NULL, &error));
  g_assert_true (hn_op_kv_store (cmd, kc, vc, k1, v1, 0, trow, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *gk = hn_test_download (kc), *gv = hn_test_download (vc);
  for (gint64 r = 0; r < n_ctx; r++)
    for (gint64 c = 0; c < W; c++)
      {
        float wk = r >= 2 && r < 5 ? k[(r - 2) * W + c] : r == 7 ? k[2 * W + c] : 0.0f;
        float wv = r >= 2 && r < 5 ? v[(r - 2) * W + c] : r == 7 ? v[2 * W + c] : 0.0f;
        g_assert_cmpfloat (gk[r * W + c], ==, wk);
        g_assert_cmpfloat (gv[r * W + c], ==, wv);
      }
  /* values narrower than keys (MLA): [n_ctx, 12] keys, [n_ctx, 5] values */
  g_autofree float *v5 = hn_test_random (2 * 5, -1, 1), *z5 = g_new0 (float, n_ctx * 5);
  g_autoptr(HnTensor) vc5 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { n_ctx, 5 }, z5);
  g_autoptr(HnTensor) tv5 = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 2, 5 }, v5);
  g_autoptr(HnTensor) k2 = hn_tensor_view_rows (tk, 0, 2, &error);
  g_assert_true (hn_op_kv_store (cmd, kc, vc5, k2, tv5, 5, NULL, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *gk2 = hn_test_download (kc), *gv5 = hn_test_download (vc5);
  for (gint64 i = 0; i < 2 * W; i++)
    g_assert_cmpfloat (gk2[5 * W + i], ==, k[i]);
  for (gint64 i = 0; i < 2 * 5; i++)
    g_assert_cmpfloat (gv5[5 * 5 + i], ==, v5[i]);
  /* past the end on the host is an error; on the device the rows are dropped */
  g_assert_false (hn_op_kv_store (cmd, kc, vc, tk, tv, 7, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (hn_op_kv_store (cmd, kc, vc, tk, tv, 0, tk, &error)); /* row tensor must be i32 */
  g_assert_nonnull (error);
  hn_cmd_reset (cmd);
}

static void
test_replay (void)
{
  /* a reusable recording replayed: each run sees the previous one's writes */
  g_autoptr(GError) error = NULL;
  float x0[5] = { 1, 2, 3, 4, 5 }, one[5] = { 1, 1, 1, 1, 1 };
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 5 }, x0);
  g_autoptr(HnTensor) t1 = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 5 }, one);
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_cmd_replay (cmd, 1, &error)); /* nothing recorded */
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  hn_cmd_set_reusable (cmd);
  g_assert_true (hn_op_add (cmd, tx, tx, t1, &error));
  g_assert_true (hn_op_add (cmd, tx, tx, t1, &error));
  g_assert_true (hn_cmd_finish (cmd, &error));
  g_assert_true (hn_cmd_is_finished (cmd));
  g_assert_true (hn_cmd_replay (cmd, 1, &error));
  g_assert_true (hn_cmd_replay (cmd, 40, &error)); /* more than one submission batch */
  g_assert_no_error (error);
  g_autofree float *got = hn_test_download (tx);
  for (int i = 0; i < 5; i++)
    g_assert_cmpfloat (got[i], ==, x0[i] + 82.0f);
  /* submit_wait refuses a reusable recorder; reset drops the recording */
  g_assert_true (hn_op_add (cmd, tx, tx, t1, &error));
  g_assert_false (hn_cmd_submit_wait (cmd, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (hn_cmd_is_finished (cmd));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/permute", test_permute);
  g_test_add_func ("/ops/slice-concat", test_slice_concat);
  g_test_add_func ("/ops/kv-cache-write", test_kv_cache_write);
  g_test_add_func ("/ops/kv-store", test_kv_store);
  g_test_add_func ("/ops/replay", test_replay);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
