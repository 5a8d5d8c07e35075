/* Paged K/V attention (issue 10): hn_op_attention_paged against its CPU
 * reference and against the contiguous hn_op_attention on the same keys,
 * with pages scattered over the arena and rows of different lengths. */
#include "ops-test-common.h"

#include <string.h>

static void
run_paged (gint64 B, gint64 T, gint64 H, gint64 KVH, gint64 D, const gint32 *lens, gboolean causal, gint64 window,
           float softcap, gboolean with_sinks, gint64 chunk)
{
  g_autoptr (GError) error = NULL;
  const gint64 P = HN_KV_PAGE_SIZE;
  gint64 max_pages = 0, total_pages = 0;
  for (gint64 b = 0; b < B; b++)
    {
      gint64 np = (lens[b] + P - 1) / P;
      max_pages = MAX (max_pages, np);
      total_pages += np;
    }
  total_pages += 3; /* unused pages in the arena */
  max_pages = MAX (max_pages, 1);
  /* a permutation of the physical pages, handed out in order */
  g_autofree gint32 *perm = g_new (gint32, total_pages);
  for (gint64 i = 0; i < total_pages; i++)
    perm[i] = (gint32) i;
  for (gint64 i = total_pages - 1; i > 0; i--)
    {
      gint64 j = g_test_rand_int_range (0, (gint32) i + 1);
      gint32 t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  g_autofree gint32 *pt = g_new0 (gint32, B * max_pages);
  gint64 next = 0;
  for (gint64 b = 0; b < B; b++)
    for (gint64 p = 0; p < (lens[b] + P - 1) / P; p++)
      pt[b * max_pages + p] = perm[next++];
  gint64 rows = total_pages * P;
  g_autofree float *q = hn_test_random (B * T * H * D, -1, 1);
  g_autofree float *k = hn_test_random (rows * KVH * D, -1, 1);
  g_autofree float *v = hn_test_random (rows * KVH * D, -1, 1);
  g_autoptr (HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 4, (gint64[]) { B, T, H, D }, q);
  g_autoptr (HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { rows, KVH, D }, k);
  g_autoptr (HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { rows, KVH, D }, v);
  g_autoptr (HnTensor) tpt = hn_test_tensor_i32 (2, (gint64[]) { B, max_pages }, pt);
  g_autoptr (HnTensor) tsl = hn_test_tensor_i32 (1, (gint64[]) { B }, lens);
  g_autoptr (HnTensor) to = hn_test_empty (HN_DTYPE_F32, 4, (gint64[]) { B, T, H, D });
  g_autofree float *sk = with_sinks ? hn_test_random (H, -2, 2) : NULL;
  g_autoptr (HnTensor) tsk = with_sinks ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, sk) : NULL;
  HnPagedAttentionParams pp = { .causal = causal, .window = window, .softcap = softcap, .page_table = tpt,
                                .seq_lens = tsl, .sinks = tsk, .local_chunk = chunk };
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_attention_paged (cmd, to, tq, tk, tv, &pp, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  gint64 n = B * T * H * D;
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, n);
  hn_ref_attention_paged (ref, q, k, v, B, T, H, KVH, D, D, pt, max_pages, lens, &pp, sk);
  hn_test_assert_close ("attention_paged vs cpu", got, ref, n, 1e-4, 1e-5);

  /* the contiguous op on each row's gathered keys gives the same result */
  for (gint64 b = 0; b < B; b++)
    {
      gint64 nk = lens[b];
      if (nk < T)
        continue;
      g_autofree float *kc = g_new (float, nk * KVH * D), *vc = g_new (float, nk * KVH * D);
      for (gint64 j = 0; j < nk; j++)
        {
          gint64 row = (gint64) pt[b * max_pages + j / P] * P + j % P;
          memcpy (kc + j * KVH * D, k + row * KVH * D, sizeof (float) * (gsize) (KVH * D));
          memcpy (vc + j * KVH * D, v + row * KVH * D, sizeof (float) * (gsize) (KVH * D));
        }
      g_autoptr (HnTensor) cq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { T, H, D }, q + b * T * H * D);
      g_autoptr (HnTensor) ck = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { nk, KVH, D }, kc);
      g_autoptr (HnTensor) cv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { nk, KVH, D }, vc);
      g_autoptr (HnTensor) co = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { T, H, D });
      HnAttentionParams ap = { .causal = causal, .window = window, .softcap = softcap, .pos0 = nk - T, .n_kv = nk,
                               .sinks = tsk, .local_chunk = chunk };
      g_autoptr (HnCmd) c2 = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_attention (c2, co, cq, ck, cv, &ap, &error));
      g_assert_no_error (error);
      hn_test_run (c2);
      g_autofree float *cont = hn_test_download (co);
      hn_test_assert_close ("attention_paged vs contiguous", got + b * T * H * D, cont, T * H * D, 1e-5, 1e-6);
    }
}

static void
test_paged_decode (void)
{
  /* one query per row, rows of different lengths (partial last pages, > 64 keys) */
  run_paged (4, 1, 4, 2, 16, (gint32[]) { 1, 17, 40, 100 }, TRUE, 0, 0, FALSE, 0);
  run_paged (3, 1, 2, 1, 64, (gint32[]) { 16, 32, 5 }, TRUE, 0, 0, FALSE, 0);
}

static void
test_paged_prefill (void)
{
  /* several causal queries, GQA, sliding window and soft-capping */
  run_paged (2, 5, 4, 2, 8, (gint32[]) { 5, 37 }, TRUE, 0, 0, FALSE, 0);
  run_paged (2, 3, 2, 2, 8, (gint32[]) { 20, 70 }, TRUE, 8, 0, FALSE, 0);
  run_paged (1, 4, 3, 1, 8, (gint32[]) { 33 }, TRUE, 0, 5.0f, FALSE, 0);
  run_paged (2, 2, 2, 2, 8, (gint32[]) { 18, 3 }, FALSE, 0, 0, FALSE, 0);
  /* attention sinks (gpt_oss): decode and a sliding-window prefill */
  run_paged (3, 1, 4, 2, 16, (gint32[]) { 1, 20, 70 }, TRUE, 0, 0, TRUE, 0);
  run_paged (2, 4, 4, 2, 8, (gint32[]) { 9, 40 }, TRUE, 4, 0, TRUE, 0);
  /* Llama 4's chunked attention: keys of the query's own block of 8 (or 16) positions only */
  run_paged (2, 5, 4, 2, 8, (gint32[]) { 5, 37 }, TRUE, 0, 0, FALSE, 8);
  run_paged (3, 1, 4, 2, 16, (gint32[]) { 1, 20, 70 }, TRUE, 0, 0, FALSE, 16);
}

static void
test_paged_errors (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) q = hn_test_empty (HN_DTYPE_F32, 4, (gint64[]) { 1, 1, 2, 8 });
  g_autoptr (HnTensor) k = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 20, 2, 8 }); /* not whole pages */
  g_autoptr (HnTensor) o = hn_test_empty (HN_DTYPE_F32, 4, (gint64[]) { 1, 1, 2, 8 });
  g_autoptr (HnTensor) pt = hn_test_tensor_i32 (2, (gint64[]) { 1, 2 }, (gint32[]) { 0, 1 });
  g_autoptr (HnTensor) sl = hn_test_tensor_i32 (1, (gint64[]) { 1 }, (gint32[]) { 3 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnPagedAttentionParams pp = { .causal = TRUE, .page_table = pt, .seq_lens = sl };
  g_assert_false (hn_op_attention_paged (cmd, o, q, k, k, &pp, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  HnPagedAttentionParams none = { .causal = TRUE };
  g_assert_false (hn_op_attention_paged (cmd, o, q, k, k, &none, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* the new rows of a step scattered into an arena: odd widths, untouched rows keep their values,
 * out-of-range slots are skipped */
static void
test_set_rows (void)
{
  g_autoptr (GError) error = NULL;
  const gint64 R = 37, D = 19, n = 6;
  g_autofree float *dst = hn_test_random (R * D, -1, 1), *src = hn_test_random (n * D, -1, 1);
  gint32 rows[6] = { 5, 36, 0, 17, -1, 40 };
  g_autoptr (HnTensor) td = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { R, D }, dst);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { n, D }, src);
  g_autoptr (HnTensor) ti = hn_test_tensor_i32 (1, (gint64[]) { n }, rows);
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_set_rows (cmd, td, ts, ti, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (td);
  hn_ref_set_rows (dst, src, rows, n, D, R);
  hn_test_assert_close ("set_rows vs cpu", got, dst, R * D, 0, 0);
  g_assert_cmpfloat (got[5 * D + 3], ==, src[0 * D + 3]);
  g_autoptr (HnTensor) bad = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { n, D + 1 });
  g_assert_false (hn_op_set_rows (cmd, td, bad, ti, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/paged/attention-decode", test_paged_decode);
  g_test_add_func ("/paged/attention-prefill", test_paged_prefill);
  g_test_add_func ("/paged/attention-errors", test_paged_errors);
  g_test_add_func ("/paged/set-rows", test_set_rows);
  return g_test_run ();
}
