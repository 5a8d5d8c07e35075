/* RoPE (styles, partial rotary, scaling variants on the host) and attention
 * over a K/V cache (causal, GQA/MQA, sliding window, ALiBi, soft-capping,
 * masks, decode with a partly filled cache, f16/bf16 caches, batches). */
#include "ops-test-common.h"
#include "tensor/cpu-ref-back.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

static void
run_rope (gint64 T, gint64 H, gint64 D, int rot, HnRopeStyle style, float attn_scale, gboolean in_place)
{
  g_autoptr(GError) error = NULL;
  gint64 n = T * H * D;
  g_autofree float *x = hn_test_random (n, -2, 2);
  g_autofree float *inv = g_new (float, rot / 2);
  g_assert_true (hn_rope_compute_inv_freq (10000.0, rot, 2048, NULL, 0, inv, NULL, &error));
  gint32 *pos = g_new (gint32, T);
  for (gint64 t = 0; t < T; t++)
    pos[t] = (gint32) (t * 37 % 200 + (t == 1 ? 1500 : 0)); /* unordered, one large position */
  g_autoptr(HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { T, H, D }, x);
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { T }, pos);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { rot / 2 }, inv);
  g_autoptr(HnTensor) to = in_place ? hn_tensor_ref (tx) : hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { T, H, D });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rope (cmd, to, tx, tp, tf, rot, style, attn_scale, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, n);
  hn_ref_rope (ref, x, T * H, H, D, pos, inv, rot, style, attn_scale);
  /* angles up to ~1700 rad: the f32 angle is shared, cos/sin of it differ by ~1e-7 */
  hn_test_assert_close ("rope", got, ref, n, 1e-5, 2e-6);
  g_free (pos);
}

static void
test_rope (void)
{
  run_rope (1, 1, 2, 2, HN_ROPE_NEOX, 1.0f, FALSE);
  run_rope (5, 3, 64, 64, HN_ROPE_NEOX, 1.0f, FALSE);
  run_rope (7, 2, 64, 64, HN_ROPE_GPTJ, 1.0f, TRUE);
  run_rope (4, 5, 80, 32, HN_ROPE_NEOX, 1.0f, FALSE);   /* partial rotary (phi) */
  run_rope (3, 4, 64, 16, HN_ROPE_GPTJ, 1.2f, TRUE);    /* partial, GPT-J, scaled */
  run_rope (300, 1, 6, 4, HN_ROPE_NEOX, 1.0f, FALSE);
}

/* rope of q in place, of k into a cache, v copied into a cache, from row0 (host or device); seqs
 * sequences of T tokens, each into its own cache of n_ctx rows (a batched prefill) */
static void
run_rope_kv_seqs (gint64 seqs, gint64 Ts, gint64 H, gint64 KVH, gint64 D, int rot, HnRopeStyle style, gboolean dyn)
{
  g_autoptr(GError) error = NULL;
  gint64 T = seqs * Ts, n_ctx = Ts + 5, row0 = 3;
  g_autofree float *q = hn_test_random (T * H * D, -2, 2), *k = hn_test_random (T * KVH * D, -2, 2);
  g_autofree float *v = hn_test_random (T * KVH * D, -2, 2), *zero = g_new0 (float, seqs * n_ctx * KVH * D);
  g_autofree float *inv = g_new (float, rot / 2);
  g_assert_true (hn_rope_compute_inv_freq (10000.0, rot, 2048, NULL, 0, inv, NULL, &error));
  g_autofree gint32 *pos = g_new (gint32, T);
  for (gint64 t = 0; t < T; t++)
    pos[t] = (gint32) (row0 + t % Ts + 40 + 7 * (t / Ts));
  gint32 r0 = (gint32) row0;
  g_autoptr(HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { T, H, D }, q);
  g_autoptr(HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { T, KVH, D }, k);
  g_autoptr(HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { T, KVH, D }, v);
  g_autoptr(HnTensor) kc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { seqs * n_ctx, KVH * D }, zero);
  g_autoptr(HnTensor) vc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { seqs * n_ctx, KVH * D }, zero);
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { T }, pos);
  g_autoptr(HnTensor) tr = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &r0);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { rot / 2 }, inv);
  HnKvDest dest = { kc, vc, dyn ? 0 : row0, dyn ? tr : NULL, seqs };
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rope_kv (cmd, tq, tk, tv, tp, tf, rot, style, 1.0f, &dest, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *gq = hn_test_download (tq), *gk = hn_test_download (kc), *gv = hn_test_download (vc);
  g_autofree float *rq = g_new (float, T * H * D), *rk = g_new (float, T * KVH * D);
  hn_ref_rope (rq, q, T * H, H, D, pos, inv, rot, style, 1.0f);
  hn_ref_rope (rk, k, T * KVH, KVH, D, pos, inv, rot, style, 1.0f);
  hn_test_assert_close ("rope_kv q", gq, rq, T * H * D, 1e-5, 2e-6);
  gint64 per = Ts * KVH * D;
  for (gint64 sq = 0; sq < seqs; sq++)
    {
      gint64 c0 = (sq * n_ctx + row0) * KVH * D;
      hn_test_assert_close ("rope_kv k", gk + c0, rk + sq * per, per, 1e-5, 2e-6);
      hn_test_assert_close ("rope_kv v", gv + c0, v + sq * per, per, 0, 0);
      for (gint64 i = 0; i < row0 * KVH * D; i++) /* rows before row0 and after the new ones untouched */
        g_assert_cmpfloat (gk[sq * n_ctx * KVH * D + i] + gv[sq * n_ctx * KVH * D + i], ==, 0.0f);
      for (gint64 i = c0 + per; i < (sq + 1) * n_ctx * KVH * D; i++)
        g_assert_cmpfloat (gk[i] + gv[i], ==, 0.0f);
    }
}

static void
run_rope_kv (gint64 T, gint64 H, gint64 KVH, gint64 D, int rot, HnRopeStyle style, gboolean dyn)
{
  run_rope_kv_seqs (1, T, H, KVH, D, rot, style, dyn);
}

static void
test_rope_kv (void)
{
  run_rope_kv (1, 4, 2, 64, 64, HN_ROPE_NEOX, TRUE);
  run_rope_kv (3, 2, 1, 80, 32, HN_ROPE_NEOX, FALSE); /* partial rotary */
  run_rope_kv (2, 3, 3, 16, 16, HN_ROPE_GPTJ, TRUE);
  run_rope_kv_seqs (3, 5, 4, 2, 64, 64, HN_ROPE_NEOX, FALSE); /* a batched prefill: each sequence its cache */
  run_rope_kv_seqs (4, 1, 2, 1, 80, 32, HN_ROPE_GPTJ, FALSE);
  /* errors: rows past the cache (host row), bad positions */
  g_autoptr(GError) error = NULL;
  g_autofree float *z = g_new0 (float, 64);
  g_autoptr(HnTensor) q = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 2, 2, 4 }, z);
  g_autoptr(HnTensor) kc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 3, 8 }, z);
  g_autoptr(HnTensor) vc = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 3, 8 }, z);
  g_autoptr(HnTensor) k = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 2, 2, 4 }, z);
  g_autoptr(HnTensor) v = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 2, 2, 4 }, z);
  gint32 pos[2] = { 0, 1 };
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { 2 }, pos);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 2 }, z);
  HnKvDest dest = { kc, vc, 2, NULL };
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_rope_kv (cmd, q, k, v, tp, tf, 4, HN_ROPE_NEOX, 1.0f, &dest, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  dest.row0 = 0;
  g_assert_false (hn_op_rope_kv (cmd, q, k, v, tf, tf, 4, HN_ROPE_NEOX, 1.0f, &dest, &error));
  g_assert_nonnull (error);
}

/* One decode query with the new key/value written by the attention itself (params.new_kv) against
 * hn_op_rope_kv then the same split-K attention: the output and both caches' rows. */
static void
run_attention_new_kv (gint64 H, gint64 KVH, gint64 D, gint64 Dv, int rot, HnRopeStyle style, gint64 n_ctx, gint32 row,
                      gboolean dyn, gboolean sinks)
{
  g_autoptr(GError) error = NULL;
  g_autofree float *q = hn_test_random (H * D, -1, 1), *kn = hn_test_random (KVH * D, -1, 1);
  g_autofree float *vn = hn_test_random (KVH * Dv, -1, 1), *kc = hn_test_random (n_ctx * KVH * D, -1, 1);
  g_autofree float *vc = hn_test_random (n_ctx * KVH * Dv, -1, 1), *inv = hn_test_random (rot / 2, 0.001, 1);
  g_autofree float *sk = hn_test_random (H, -1, 1);
  gint32 pos = row + 3; /* the rope position need not be the row */
  g_autoptr(HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, H, D }, q);
  g_autoptr(HnTensor) tq2 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, H, D }, q);
  g_autoptr(HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, KVH, D }, kn);
  g_autoptr(HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, KVH, Dv }, vn);
  g_autoptr(HnTensor) kc1 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, D }, kc);
  g_autoptr(HnTensor) vc1 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, Dv }, vc);
  g_autoptr(HnTensor) kc2 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, D }, kc);
  g_autoptr(HnTensor) vc2 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, Dv }, vc);
  g_autoptr(HnTensor) kf = hn_tensor_reshape (kc1, 2, (gint64[]) { n_ctx, KVH * D }, &error);
  g_autoptr(HnTensor) vf = hn_tensor_reshape (vc1, 2, (gint64[]) { n_ctx, KVH * Dv }, &error);
  g_assert_no_error (error);
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &pos);
  g_autoptr(HnTensor) tr = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &row);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { rot / 2 }, inv);
  g_autoptr(HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, sk);
  gint64 nsc = hn_attention_scratch_size (1, 1, H, Dv, n_ctx);
  g_assert_cmpint (nsc, >, 0);
  g_autoptr(HnTensor) sc1 = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { nsc });
  g_autoptr(HnTensor) sc2 = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { nsc });
  g_autoptr(HnTensor) o1 = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, H, Dv });
  g_autoptr(HnTensor) o2 = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, H, Dv });
  HnAttentionParams p = { .causal = TRUE, .pos0 = row, .n_kv = row + 1, .sinks = sinks ? ts : NULL };
  if (dyn)
    p.dyn_pos = tr;
  HnAttentionParams p1 = p, p2 = p;
  p1.scratch = sc1;
  p2.scratch = sc2;
  HnAttentionNewKv nk = { tk, tv, tp, tf, rot, style, 0.9f };
  p2.new_kv = &nk;
  g_assert_true (hn_attention_new_kv_ok (&p2, H, KVH, D, Dv, n_ctx, HN_DTYPE_F32));
  HnKvDest dest = { kf, vf, row, dyn ? tr : NULL };
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rope_kv (cmd, tq, tk, tv, tp, tf, rot, style, 0.9f, &dest, &error));
  g_assert_true (hn_op_attention (cmd, o1, tq, kc1, vc1, &p1, &error));
  g_assert_true (hn_op_attention (cmd, o2, tq2, kc2, vc2, &p2, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *r1 = hn_test_download (o1), *r2 = hn_test_download (o2);
  g_autofree float *k1 = hn_test_download (kc1), *k2 = hn_test_download (kc2);
  g_autofree float *v1 = hn_test_download (vc1), *v2 = hn_test_download (vc2), *q2 = hn_test_download (tq2);
  g_autofree char *what = g_strdup_printf ("attention new_kv H=%" G_GINT64_FORMAT " KVH=%" G_GINT64_FORMAT
                                           " D=%" G_GINT64_FORMAT " rot=%d style=%d row=%d%s", H, KVH, D, rot,
                                           (int) style, row, dyn ? " dyn" : "");
  hn_test_assert_close (what, r2, r1, H * Dv, 1e-5, 1e-5);
  hn_test_assert_close (what, k2, k1, n_ctx * KVH * D, 1e-6, 1e-6);
  hn_test_assert_close (what, v2, v1, n_ctx * KVH * Dv, 0, 0);
  hn_test_assert_close (what, q2, q, H * D, 0, 0); /* q is left as it is */
}

static void
test_attention_new_kv (void)
{
  run_attention_new_kv (8, 2, 64, 64, 64, HN_ROPE_NEOX, 200, 150, TRUE, FALSE);   /* GQA 4, several splits */
  run_attention_new_kv (3, 3, 40, 24, 24, HN_ROPE_GPTJ, 130, 64, FALSE, TRUE);   /* partial rotary, sinks */
  run_attention_new_kv (8, 1, 16, 16, 16, HN_ROPE_NEOX, 300, 299, TRUE, FALSE);  /* MQA, the last row */
  /* a kernel that cannot take it fails closed: no scratch (one pass) */
  g_autoptr(GError) error = NULL;
  g_autofree float *z = g_new0 (float, 4 * 100 * 16);
  g_autoptr(HnTensor) q = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, 4, 16 }, z);
  g_autoptr(HnTensor) kc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 100, 2, 16 }, z);
  g_autoptr(HnTensor) vc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 100, 2, 16 }, z);
  g_autoptr(HnTensor) kn = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, 2, 16 }, z);
  g_autoptr(HnTensor) o = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, 4, 16 });
  gint32 pos = 90;
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &pos);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { 8 }, z);
  HnAttentionNewKv nk = { kn, kn, tp, tf, 16, HN_ROPE_NEOX, 1.0f };
  HnAttentionParams p = { .causal = TRUE, .pos0 = 90, .n_kv = 91, .new_kv = &nk };
  g_assert_false (hn_attention_new_kv_ok (&p, 4, 2, 16, 16, 100, HN_DTYPE_F32));
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_attention (cmd, o, q, kc, vc, &p, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  hn_cmd_reset (cmd);
}

/* The decode step as a replayed graph runs it: one query at device position row over a cache of
 * n_ctx rows (the split plan from n_ctx, rows past the key garbage), the merge in the dispatch
 * (counters), with new_kv the rope and both cache writes in it too; against the CPU reference of
 * hn_ref_rope then hn_ref_attention over the cache with the new row in place. */
static void
run_attention_decode (gint64 H, gint64 KVH, gint64 D, gint64 n_keys, gint64 n_ctx, gboolean fused, gint64 chunk)
{
  g_autoptr(GError) error = NULL;
  gint32 row = (gint32) (n_keys - 1), pos = row + 3;
  int rot = (int) D;
  g_autofree float *q = hn_test_random (H * D, -1, 1), *kn = hn_test_random (KVH * D, -1, 1);
  g_autofree float *vn = hn_test_random (KVH * D, -1, 1), *kc = hn_test_random (n_ctx * KVH * D, -1, 1);
  g_autofree float *vc = hn_test_random (n_ctx * KVH * D, -1, 1), *inv = hn_test_random (rot / 2, 0.001, 1);
  for (gint64 i = n_keys * KVH * D; i < n_ctx * KVH * D; i++)
    kc[i] = 1e30f;
  g_autoptr(HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, H, D }, q);
  g_autoptr(HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, KVH, D }, kn);
  g_autoptr(HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, KVH, D }, vn);
  g_autoptr(HnTensor) tp = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &pos);
  g_autoptr(HnTensor) tr = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &row);
  g_autoptr(HnTensor) tf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { rot / 2 }, inv);
  /* the reference: q and the new key rotated, the new row in the cache */
  g_autofree float *rq = g_new (float, H * D), *rk = g_new (float, KVH * D), *ref = g_new (float, H * D);
  hn_ref_rope (rq, q, H, H, D, &pos, inv, rot, HN_ROPE_NEOX, 0.9f);
  hn_ref_rope (rk, kn, KVH, KVH, D, &pos, inv, rot, HN_ROPE_NEOX, 0.9f);
  if (!fused)
    {
      memcpy (kc + row * KVH * D, rk, sizeof (float) * KVH * D);
      memcpy (vc + row * KVH * D, vn, sizeof (float) * KVH * D);
    }
  g_autoptr(HnTensor) tq2 = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { 1, H, D }, fused ? q : rq);
  g_autoptr(HnTensor) tkc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, D }, kc);
  g_autoptr(HnTensor) tvc = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { n_ctx, KVH, D }, vc);
  gint64 nsc = hn_attention_scratch_size (1, 1, H, D, n_ctx);
  g_assert_cmpint (nsc, >, 0);
  g_autoptr(HnTensor) tsc = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { nsc });
  g_autofree gint32 *zeros = g_new0 (gint32, KVH);
  g_autoptr(HnTensor) tcnt = hn_test_tensor_i32 (1, (gint64[]) { KVH }, zeros);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, H, D });
  HnAttentionNewKv nk = { tk, tv, tp, tf, rot, HN_ROPE_NEOX, 0.9f };
  HnAttentionParams p = { .causal = TRUE, .scratch = tsc, .counters = tcnt, .dyn_pos = tr, .new_kv = fused ? &nk : NULL,
                          .local_chunk = chunk };
  if (fused)
    g_assert_true (hn_attention_new_kv_ok (&p, H, KVH, D, D, n_ctx, HN_DTYPE_F32));
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_attention (cmd, to, tq2, tkc, tvc, &p, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to);
  if (fused)
    {
      memcpy (kc + row * KVH * D, rk, sizeof (float) * KVH * D);
      memcpy (vc + row * KVH * D, vn, sizeof (float) * KVH * D);
    }
  HnAttentionParams pr = { .causal = TRUE, .pos0 = row, .n_kv = n_keys, .local_chunk = chunk };
  hn_ref_attention (ref, rq, kc, vc, 1, 1, H, KVH, D, D, n_ctx, &pr, NULL, NULL, 1, 1, 0);
  g_autofree char *what = g_strdup_printf ("attention decode H%" G_GINT64_FORMAT " KVH%" G_GINT64_FORMAT
                                           " D%" G_GINT64_FORMAT " keys %" G_GINT64_FORMAT " n_ctx %" G_GINT64_FORMAT
                                           "%s", H, KVH, D, n_keys, n_ctx, fused ? " rope+kv" : "");
  hn_test_assert_close (what, got, ref, H * D, 1e-5, 2e-6);
  if (fused)
    {
      g_autofree float *gk = hn_test_download (tkc), *gv = hn_test_download (tvc);
      hn_test_assert_close (what, gk, kc, n_ctx * KVH * D, 1e-5, 2e-6);
      hn_test_assert_close (what, gv, vc, n_ctx * KVH * D, 0, 0);
    }
  g_autofree gint32 *cnt = g_new (gint32, KVH);
  g_assert_true (hn_tensor_download_i32 (tcnt, cnt, (gsize) KVH, &error));
  for (gint64 i = 0; i < KVH; i++)
    g_assert_cmpint (cnt[i], ==, 0);
}

/* Context lengths 1, 7, 129, 300 in a cache of 333 rows, GQA ratios 1 and 4, head dims 64 and
 * 128 (fused; some without new_kv too), and a long cache (several blocks per split); /ops/attention
 * has the 16-bit caches, masks, windows, soft-caps, ALiBi and sinks of the same kernel. */
static void
test_attention_decode (void)
{
  const gint64 keys[] = { 1, 7, 129, 300 };
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    for (int g = 1; g <= 4; g += 3)
      for (gint64 D = 64; D <= 128; D *= 2)
        {
          run_attention_decode (2 * g, 2, D, keys[i], 333, TRUE, 0);
          if (i % 2 == 1 && (g == 1) == (D == 64))
            run_attention_decode (2 * g, 2, D, keys[i], 333, FALSE, 0);
        }
  run_attention_decode (32, 8, 64, 2100, 4500, TRUE, 0);
  /* chunked attention (the query's block of keys only): inside the first chunk, past it, fused or not */
  run_attention_decode (8, 2, 64, 7, 333, TRUE, 4);
  run_attention_decode (8, 2, 64, 300, 333, TRUE, 128);
  run_attention_decode (2, 2, 128, 129, 333, FALSE, 64);
  run_attention_decode (32, 8, 64, 2100, 4500, TRUE, 1024);
}

/* float results of double math: equal to rounding */
#define ASSERT_F32(a, b) g_assert_cmpfloat_with_epsilon ((a), (b), fabs ((double) (b)) * 2e-7)

static void
test_rope_scaling (void)
{
  /* Values from transformers' ROPE_INIT_FUNCTIONS (computed by hand from the
   * same formulas, checked against known model values). */
  g_autoptr(GError) error = NULL;
  float inv[64], attn;

  /* default */
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 128, 4096, NULL, 0, inv, &attn, &error));
  g_assert_cmpfloat_with_epsilon (inv[0], 1.0, 1e-7);
  ASSERT_F32 (inv[1], pow (10000.0, -2.0 / 128));
  g_assert_cmpfloat (attn, ==, 1.0f);

  /* linear */
  HnRopeScaling lin = { .type = HN_ROPE_SCALING_LINEAR, .factor = 4.0 };
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 128, 4096, &lin, 0, inv, &attn, &error));
  ASSERT_F32 (inv[1], pow (10000.0, -2.0 / 128) / 4);

  /* dynamic NTK: no change up to max_position_embeddings, larger base beyond */
  HnRopeScaling dyn = { .type = HN_ROPE_SCALING_DYNAMIC, .factor = 2.0 };
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 128, 4096, &dyn, 100, inv, &attn, &error));
  ASSERT_F32 (inv[1], pow (10000.0, -2.0 / 128));
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 128, 4096, &dyn, 8192, inv, &attn, &error));
  double b = 10000.0 * pow (2.0 * 8192 / 4096 - 1.0, 128.0 / 126);
  ASSERT_F32 (inv[1], pow (b, -2.0 / 128));

  /* llama3 (Llama 3.1: factor 8, low 1, high 4, original 8192, theta 500000) */
  HnRopeScaling l3 = { .type = HN_ROPE_SCALING_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                       .original_max_position_embeddings = 8192 };
  g_assert_true (hn_rope_compute_inv_freq (500000.0, 128, 131072, &l3, 0, inv, &attn, &error));
  g_assert_cmpfloat_with_epsilon (inv[0], 1.0, 1e-7);                         /* high frequency: unchanged */
  double f63 = pow (500000.0, -126.0 / 128);
  ASSERT_F32 (inv[63], f63 / 8);                   /* low frequency: / factor */
  for (int i = 0; i < 64; i++)
    {
      double f = pow (500000.0, -2.0 * i / 128), wl = 2 * G_PI / f;
      if (wl >= 8192 / 4.0 && wl <= 8192 / 1.0)
        {
          double s = (8192 / wl - 1.0) / 3.0, want = (1 - s) * f / 8 + s * f;
          g_assert_cmpfloat_with_epsilon (inv[i], want, want * 1e-6);
        }
    }

  /* yarn (Qwen-style factor 4, original 32768, theta 1e6): attention factor 0.1 ln 4 + 1 */
  HnRopeScaling yarn = { .type = HN_ROPE_SCALING_YARN, .factor = 4.0, .original_max_position_embeddings = 32768 };
  g_assert_true (hn_rope_compute_inv_freq (1000000.0, 128, 131072, &yarn, 0, inv, &attn, &error));
  g_assert_cmpfloat_with_epsilon (attn, 0.1 * log (4.0) + 1.0, 1e-6);
  g_assert_cmpfloat_with_epsilon (inv[0], 1.0, 1e-7);                         /* extrapolated */
  ASSERT_F32 (inv[63], pow (1e6, -126.0 / 128) / 4); /* interpolated */
  /* monotone decreasing */
  for (int i = 1; i < 64; i++)
    g_assert_cmpfloat (inv[i], <, inv[i - 1]);
  /* DeepSeek-style mscale / mscale_all_dim */
  HnRopeScaling yarn2 = yarn;
  yarn2.mscale = 1.0;
  yarn2.mscale_all_dim = 1.0;
  g_assert_true (hn_rope_compute_inv_freq (1000000.0, 128, 131072, &yarn2, 0, inv, &attn, &error));
  g_assert_cmpfloat_with_epsilon (attn, 1.0, 1e-7);

  /* longrope (Phi-3): short factors below the original length, long above */
  double sf[4] = { 1.0, 1.1, 1.2, 1.3 }, lf[4] = { 2.0, 3.0, 4.0, 5.0 };
  HnRopeScaling lr = { .type = HN_ROPE_SCALING_LONGROPE, .short_factor = sf, .long_factor = lf, .n_factors = 4,
                       .original_max_position_embeddings = 4096 };
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 8, 131072, &lr, 100, inv, &attn, &error));
  ASSERT_F32 (inv[1], 1.0 / (1.1 * pow (10000.0, 2.0 / 8)));
  g_assert_cmpfloat_with_epsilon (attn, sqrt (1 + log (32.0) / log (4096.0)), 1e-6);
  g_assert_true (hn_rope_compute_inv_freq (10000.0, 8, 131072, &lr, 5000, inv, &attn, &error));
  ASSERT_F32 (inv[3], 1.0 / (5.0 * pow (10000.0, 6.0 / 8)));

  /* invalid input fails closed */
  HnRopeScaling bad = { .type = HN_ROPE_SCALING_LONGROPE, .short_factor = sf, .long_factor = lf, .n_factors = 3,
                        .original_max_position_embeddings = 4096 };
  g_assert_false (hn_rope_compute_inv_freq (10000.0, 8, 131072, &bad, 0, inv, &attn, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (hn_rope_compute_inv_freq (10000.0, 7, 2048, NULL, 0, inv, &attn, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
round_f16 (float *v, gint64 n)
{
  for (gint64 i = 0; i < n; i++)
    v[i] = hn_f16_to_f32 (hn_f32_to_f16 (CLAMP (v[i], -65504.0f, 65504.0f)));
}

typedef struct {
  gint64 B, T, H, KVH, D, Dv, n_ctx;
  HnAttentionParams p;
  int alibi;      /* 1 ALiBi slopes, 2 attention sinks (gpt_oss) */
  int mask_kind;  /* 0 none, 1 [T, n_kv], 2 [B, 1, n_kv] padding */
  HnDType kv_dtype;
} AttnCase;

/* with_scratch: also pass split-K scratch when the shape splits; returns
 * whether it did. dyn: pos0 from a device tensor (a replayed decode step),
 * for causal cases whose n_kv is pos0 + T. */
static gboolean
run_attention (const AttnCase *c, gboolean with_scratch, gboolean dyn)
{
  g_autoptr(GError) error = NULL;
  gint64 B = c->B, T = c->T, H = c->H, KVH = c->KVH, D = c->D, Dv = c->Dv, n_ctx = c->n_ctx;
  gint64 n_kv = c->p.n_kv > 0 ? c->p.n_kv : n_ctx;
  gboolean batched = B > 1;
  g_autofree float *q = hn_test_random (B * T * H * D, -1, 1);
  g_autofree float *k = hn_test_random (B * n_ctx * KVH * D, -1, 1);
  g_autofree float *v = hn_test_random (B * n_ctx * KVH * Dv, -1, 1);
  /* garbage past n_kv must not matter */
  for (gint64 b = 0; b < B; b++)
    for (gint64 j = n_kv; j < n_ctx; j++)
      for (gint64 i = 0; i < KVH * D; i++)
        k[(b * n_ctx + j) * KVH * D + i] = 1e30f;
  gint64 sq[4] = { B, T, H, D }, sk[4] = { B, n_ctx, KVH, D }, sv[4] = { B, n_ctx, KVH, Dv }, so[4] = { B, T, H, Dv };
  int nd = batched ? 4 : 3, o = batched ? 0 : 1;
  g_autoptr(HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, nd, sq + o, q);
  g_autoptr(HnTensor) tk = hn_test_tensor (c->kv_dtype, nd, sk + o, k);
  g_autoptr(HnTensor) tv = hn_test_tensor (c->kv_dtype, nd, sv + o, v);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, nd, so + o);
  HnAttentionParams p = c->p;
  g_autofree float *slopes = NULL, *mask = NULL;
  g_autoptr(HnTensor) ts = NULL, tm = NULL;
  gint64 mB = 1, mT = 1, mcols = n_kv + 3;
  if (c->alibi == 1)
    {
      slopes = g_new (float, H);
      hn_alibi_slopes ((int) H, 8.0f, slopes);
      ts = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, slopes);
      p.alibi_slopes = ts;
    }
  else if (c->alibi == 2)
    {
      slopes = hn_test_random (H, -2, 2);
      ts = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, slopes);
      p.sinks = ts;
    }
  if (c->mask_kind == 1)
    {
      mT = T;
      mask = hn_test_random (T * mcols, -2, 2);
      for (gint64 i = 0; i < T * mcols; i += 4)
        mask[i] = -INFINITY;
      tm = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { T, mcols }, mask);
    }
  else if (c->mask_kind == 2)
    {
      mB = B;
      mask = g_new0 (float, B * mcols);
      for (gint64 b = 0; b < B; b++)
        for (gint64 j = 0; j < b; j++)
          mask[b * mcols + j] = -INFINITY;
      tm = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, 1, mcols }, mask);
    }
  p.mask = tm;
  g_autoptr(HnTensor) tsc = NULL;
  gint64 nsc = with_scratch ? hn_attention_scratch_size (B, T, H, Dv, n_kv) : 0;
  if (nsc > 0)
    {
      tsc = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { nsc });
      p.scratch = tsc;
    }
  g_autoptr(HnTensor) tdyn = NULL;
  HnAttentionParams pd = p;
  if (dyn)
    {
      gint32 pos0 = (gint32) p.pos0;
      tdyn = hn_test_tensor_i32 (1, (gint64[]) { 1 }, &pos0);
      pd.dyn_pos = tdyn;
      pd.pos0 = 0; /* ignored: the device value counts */
      pd.n_kv = 0;
      if (tsc && hn_attention_scratch_size (B, T, H, Dv, n_ctx) > nsc)
        {
          /* planned for n_ctx keys: a bigger scratch */
          g_clear_pointer (&tsc, hn_tensor_unref);
          nsc = hn_attention_scratch_size (B, T, H, Dv, n_ctx);
          tsc = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { nsc });
          pd.scratch = tsc;
        }
    }
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_attention (cmd, to, tq, tk, tv, &pd, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *got = hn_test_download (to), *ref = g_new (float, B * T * H * Dv);
  if (p.reduced_precision)
    {
      /* the tensor-core path feeds q, k, v to the multiplier as f16: so does
       * the reference (the probabilities' rounding is in the tolerance) */
      round_f16 (q, B * T * H * D);
      round_f16 (k, B * n_ctx * KVH * D);
      round_f16 (v, B * n_ctx * KVH * Dv);
    }
  hn_ref_attention (ref, q, k, v, B, T, H, KVH, D, Dv, n_ctx, &p, slopes, mask, mB, mT, mcols);
  g_autofree char *what = g_strdup_printf ("attention B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " H%" G_GINT64_FORMAT
                                           " KVH%" G_GINT64_FORMAT " D%" G_GINT64_FORMAT " n_kv %" G_GINT64_FORMAT "%s%s",
                                           B, T, H, KVH, D, n_kv, nsc > 0 ? " split-K" : "", dyn ? " device pos0" : "");
  /* outputs are convex combinations of v in [-1, 1]; f16 probabilities
   * (11 significant bits) move them by a few 1e-4 */
  if (p.reduced_precision)
    hn_test_assert_close (what, got, ref, B * T * H * Dv, 4e-3, 2e-3);
  else
    hn_test_assert_close (what, got, ref, B * T * H * Dv, 1e-5, 2e-6);
  if (tsc)
    {
      /* the merge in the attention dispatch itself (counters): twice, the counters left zero */
      g_autofree gint32 *zeros = g_new0 (gint32, B * T * KVH + 3);
      g_autoptr(HnTensor) tcnt = hn_test_tensor_i32 (1, (gint64[]) { B * T * KVH + 3 }, zeros);
      g_autoptr(HnTensor) to2 = hn_test_empty (HN_DTYPE_F32, nd, so + o);
      g_autoptr(HnTensor) to3 = hn_test_empty (HN_DTYPE_F32, nd, so + o);
      HnAttentionParams pc = pd;
      pc.counters = tcnt;
      g_autoptr(HnCmd) c2 = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_attention (c2, to2, tq, tk, tv, &pc, &error));
      g_assert_true (hn_op_attention (c2, to3, tq, tk, tv, &pc, &error));
      g_assert_no_error (error);
      hn_test_run (c2);
      g_autofree float *got2 = hn_test_download (to2), *got3 = hn_test_download (to3);
      g_autofree char *w2 = g_strdup_printf ("%s merged in the dispatch", what);
      hn_test_assert_close (w2, got2, got, B * T * H * Dv, 1e-6, 1e-7);
      hn_test_assert_close (w2, got3, got, B * T * H * Dv, 1e-6, 1e-7);
      g_autofree gint32 *cnt = g_new (gint32, B * T * KVH + 3);
      g_assert_true (hn_tensor_download_i32 (tcnt, cnt, (gsize) (B * T * KVH + 3), &error));
      for (gint64 i = 0; i < B * T * KVH + 3; i++)
        g_assert_cmpint (cnt[i], ==, 0);
    }
  return nsc > 0;
}

/* Reduced-precision prefill (the flash-attention kernel on NVIDIA's
 * cooperative matrix 2; elsewhere the exact kernels, which pass too): several
 * query and key blocks, GQA, chunked prefill after a past, window + soft-cap +
 * ALiBi, masks, sinks, batch, f16/bf16 caches, head dims 64 and 128, keys
 * past n_kv that are garbage. */
static void
test_attention_f16 (void)
{
  AttnCase cases[] = {
    { 1, 70, 4, 2, 64, 64, 70, { .causal = TRUE }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 20, 2, 1, 64, 64, 50, { .causal = TRUE, .pos0 = 30 }, FALSE, 0, HN_DTYPE_BF16 },
    { 1, 150, 3, 3, 64, 64, 190, { .causal = TRUE, .pos0 = 20, .n_kv = 170, .window = 37, .softcap = 3.0f }, TRUE, 0,
      HN_DTYPE_F32 },
    { 1, 18, 2, 2, 64, 64, 21, { .n_kv = 21 }, FALSE, 1, HN_DTYPE_F16 },
    { 2, 17, 2, 1, 128, 128, 17, { .causal = TRUE }, FALSE, 2, HN_DTYPE_F32 },
    { 1, 100, 4, 2, 64, 64, 100, { .causal = TRUE, .window = 7 }, 2, 0, HN_DTYPE_F32 },
    { 2, 130, 8, 2, 128, 128, 130, { .causal = TRUE, .scale = 0.2f }, FALSE, 0, HN_DTYPE_F32 },
    /* a local chunk: the exact kernels, not the flash one */
    { 1, 70, 4, 2, 64, 64, 70, { .causal = TRUE, .local_chunk = 16 }, FALSE, 0, HN_DTYPE_F32 },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      AttnCase c = cases[i];
      c.p.reduced_precision = TRUE;
      run_attention (&c, FALSE, FALSE);
    }
}

static void
test_attention (void)
{
  AttnCase cases[] = {
    /* prefill, causal, MHA */
    { 1, 5, 2, 2, 16, 16, 5, { .causal = TRUE }, FALSE, 0, HN_DTYPE_F32 },
    /* GQA, more keys than one block of 64, odd head dim */
    { 1, 70, 4, 2, 33, 33, 70, { .causal = TRUE }, FALSE, 0, HN_DTYPE_F32 },
    /* decode: one query at the end of a partly filled cache, MQA */
    { 1, 1, 8, 1, 64, 64, 200, { .causal = TRUE, .pos0 = 130, .n_kv = 131 }, FALSE, 0, HN_DTYPE_F32 },
    /* chunked prefill after a past of 10, sliding window, scale override */
    { 1, 6, 2, 1, 8, 8, 32, { .causal = TRUE, .pos0 = 10, .n_kv = 16, .window = 4, .scale = 0.3f }, FALSE, 0, HN_DTYPE_F32 },
    /* soft-capping (Gemma 2), non-causal, Dv != D */
    { 1, 7, 3, 3, 12, 20, 9, { .softcap = 5.0f, .scale = 2.0f }, FALSE, 0, HN_DTYPE_F32 },
    /* ALiBi */
    { 1, 9, 6, 6, 16, 16, 9, { .causal = TRUE }, TRUE, 0, HN_DTYPE_F32 },
    /* additive mask [T, n_kv + 3] */
    { 1, 4, 2, 2, 8, 8, 10, { .n_kv = 10 }, FALSE, 1, HN_DTYPE_F32 },
    /* batch with left-padding masks, causal */
    { 3, 5, 4, 2, 16, 16, 5, { .causal = TRUE }, FALSE, 2, HN_DTYPE_F32 },
    /* f16 / bf16 caches, head dim 256 */
    { 1, 3, 2, 1, 256, 256, 67, { .causal = TRUE, .pos0 = 64, .n_kv = 67 }, FALSE, 0, HN_DTYPE_F16 },
    { 2, 2, 4, 4, 64, 64, 100, { .causal = TRUE, .pos0 = 98 }, FALSE, 0, HN_DTYPE_BF16 },
    /* split-K decode shapes: odd key counts over several chunks, GQA,
     * sliding window + soft-cap + ALiBi, masks, batch, bf16 */
    { 1, 1, 4, 2, 40, 40, 333, { .causal = TRUE, .pos0 = 330, .n_kv = 331 }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 2, 6, 3, 16, 24, 300, { .causal = TRUE, .pos0 = 255, .window = 97, .softcap = 3.0f }, TRUE, 1, HN_DTYPE_F32 },
    { 3, 1, 2, 1, 32, 32, 197, { .causal = TRUE, .pos0 = 196 }, FALSE, 2, HN_DTYPE_BF16 },
    { 1, 1, 2, 2, 64, 64, 129, { .scale = 0.5f }, TRUE, 1, HN_DTYPE_F16 },
    /* attention sinks: prefill with a sliding window, split-K decode, batch */
    { 1, 9, 4, 2, 8, 8, 9, { .causal = TRUE, .window = 4 }, 2, 0, HN_DTYPE_F32 },
    { 1, 1, 4, 2, 16, 16, 300, { .causal = TRUE, .pos0 = 290, .n_kv = 291 }, 2, 0, HN_DTYPE_F32 },
    { 2, 3, 2, 1, 16, 8, 12, { .causal = TRUE, .pos0 = 9 }, 2, 0, HN_DTYPE_F32 },
    /* prefill kernel (T >= 16): several query and key blocks, GQA, chunked
     * prefill after a past, window + soft-cap + ALiBi, masks, sinks, batch,
     * f16/bf16 caches, Dv != D, head dim 128; above 128 the per-query kernel */
    { 1, 37, 4, 2, 33, 33, 37, { .causal = TRUE }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 20, 2, 1, 64, 64, 50, { .causal = TRUE, .pos0 = 30 }, FALSE, 0, HN_DTYPE_BF16 },
    { 1, 24, 3, 3, 16, 24, 40, { .causal = TRUE, .pos0 = 16, .window = 9, .softcap = 3.0f }, TRUE, 0, HN_DTYPE_F32 },
    { 1, 18, 2, 2, 8, 8, 21, { .n_kv = 21 }, FALSE, 1, HN_DTYPE_F16 },
    { 2, 17, 2, 1, 128, 128, 17, { .causal = TRUE }, FALSE, 2, HN_DTYPE_F32 },
    { 1, 33, 4, 2, 16, 16, 33, { .causal = TRUE, .window = 7 }, 2, 0, HN_DTYPE_F32 },
    { 1, 16, 2, 2, 160, 160, 16, { .causal = TRUE }, FALSE, 0, HN_DTYPE_F32 },
    /* Llama 4's chunked attention (keys only from the query's block of local_chunk positions): the
     * per-query kernel, the prefill kernel after a past, split-K decode by head and by KV head */
    { 1, 11, 4, 2, 8, 8, 11, { .causal = TRUE, .local_chunk = 4 }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 37, 4, 2, 16, 16, 37, { .causal = TRUE, .local_chunk = 8 }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 20, 2, 1, 64, 64, 50, { .causal = TRUE, .pos0 = 30, .local_chunk = 16 }, FALSE, 0, HN_DTYPE_F32 },
    { 1, 1, 4, 2, 40, 40, 333, { .causal = TRUE, .pos0 = 330, .n_kv = 331, .local_chunk = 256 }, FALSE, 0,
      HN_DTYPE_F32 },
    { 1, 1, 16, 1, 32, 32, 300, { .causal = TRUE, .pos0 = 299, .n_kv = 300, .local_chunk = 100 }, FALSE, 0,
      HN_DTYPE_F32 },
    { 1, 2, 8, 2, 64, 64, 300, { .causal = TRUE, .pos0 = 298, .local_chunk = 64 }, 2, 0, HN_DTYPE_F32 },
  };
  guint n_split = 0, n_dyn = 0;
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const AttnCase *c = &cases[i];
      run_attention (c, FALSE, FALSE);
      n_split += run_attention (c, TRUE, FALSE);
      gint64 n_kv = c->p.n_kv > 0 ? c->p.n_kv : c->n_ctx;
      if (c->p.causal && c->mask_kind == 0 && c->p.pos0 + c->T == n_kv)
        {
          run_attention (c, FALSE, TRUE);
          run_attention (c, TRUE, TRUE);
          n_dyn++;
        }
    }
  g_assert_cmpuint (n_split, >=, 5);
  g_assert_cmpuint (n_dyn, >=, 4);
}

static void
test_attention_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnTensor) q = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 2, 3, 8 });
  g_autoptr(HnTensor) k = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 4, 2, 8 });
  g_autoptr(HnTensor) o = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 2, 3, 8 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  /* 3 heads over 2 KV heads */
  g_assert_false (hn_op_attention (cmd, o, q, k, k, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_autoptr(HnTensor) q2 = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 2, 4, 8 });
  g_autoptr(HnTensor) o2 = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 2, 4, 8 });
  HnAttentionParams p = { .n_kv = 5 };
  g_assert_false (hn_op_attention (cmd, o2, q2, k, k, &p, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_autoptr(HnTensor) qb = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, 2, 300 });
  g_autoptr(HnTensor) kb = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 2, 2, 300 });
  g_autoptr(HnTensor) ob = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { 1, 2, 300 });
  g_assert_false (hn_op_attention (cmd, ob, qb, kb, kb, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
}

typedef struct {
  int B, T, S, H, KVH, D;
  gboolean causal;
  gint64 pos0, window;
  float dscale; /* dO's magnitude: a loss gradient of a mean over many tokens is ~1e-6 */
} FlashCase;

/* Relative error against the reference, in units of its largest entry. */
static void
flash_close (const char *what, const FlashCase *c, const float *got, const float *want, gint64 n)
{
  double mx = hn_test_max_abs (want, n), worst = 0;
  for (gint64 i = 0; i < n; i++)
    worst = MAX (worst, fabs ((double) got[i] - want[i]));
  g_test_message ("flash %s B%d T%d S%d H%d KVH%d D%d%s window %" G_GINT64_FORMAT ": max error %.3g of max %.3g",
                  what, c->B, c->T, c->S, c->H, c->KVH, c->D, c->causal ? " causal" : "", c->window, worst, mx);
  /* f16 operands (q, k, v, P, dS and the scaled dO: 11 significant bits)
   * over sums of up to a few hundred terms: ~1e-3 of the largest entry;
   * 1e-2 leaves room, and a wrong mask or scale is off by O(1) */
  hn_test_assert_close (what, got, want, n, 1e-2, 1e-2 * mx);
}

static void
run_flash (const FlashCase *c)
{
  g_autoptr(GError) error = NULL;
  gint64 nq = (gint64) c->B * c->T * c->H * c->D, nk = (gint64) c->B * c->S * c->KVH * c->D;
  gint64 rows = (gint64) c->B * c->T * c->H;
  g_autofree float *q = hn_test_random (nq, -1.5, 1.5), *k = hn_test_random (nk, -1.5, 1.5);
  g_autofree float *v = hn_test_random (nk, -1, 1), *dout = hn_test_random (nq, -1, 1);
  for (gint64 i = 0; i < nq; i++)
    dout[i] *= c->dscale * (1.0f + (float) (i / (c->H * c->D) % 7)); /* rows of different sizes */
  gint64 sq[4] = { c->B, c->T, c->H, c->D }, sk[4] = { c->B, c->S, c->KVH, c->D };
  g_autoptr(HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 4, sq, q), tk = hn_test_tensor (HN_DTYPE_F32, 4, sk, k);
  g_autoptr(HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 4, sk, v), tdo = hn_test_tensor (HN_DTYPE_F32, 4, sq, dout);
  g_autoptr(HnTensor) to = hn_test_empty (HN_DTYPE_F32, 4, sq), tdq = hn_test_empty (HN_DTYPE_F32, 4, sq);
  g_autoptr(HnTensor) tdk = hn_test_empty (HN_DTYPE_F32, 4, sk), tdv = hn_test_empty (HN_DTYPE_F32, 4, sk);
  g_autoptr(HnTensor) tl = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { rows });
  g_autoptr(HnTensor) st = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 2 * rows });
  HnAttentionParams p = { .causal = c->causal, .pos0 = c->pos0, .window = c->window, .reduced_precision = TRUE,
                          .lse = tl };
  g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_attention (cmd, to, tq, tk, tv, &p, &error));
  g_assert_no_error (error);
  g_assert_true (hn_op_attention_back_flash (cmd, tdq, tdk, tdv, tdo, tq, tk, tv, to, tl, st, &p, 0, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  /* the tensor cores see q, k, v as f16: so does the reference */
  round_f16 (q, nq);
  round_f16 (k, nk);
  round_f16 (v, nk);
  HnRefAttnShape rs = { c->B, c->T, c->S, c->H, c->KVH, c->D, c->D, 0, 0, c->causal, c->pos0, c->window, NULL };
  g_autofree float *out = g_new (float, nq), *dq = g_new (float, nq), *dk = g_new (float, nk), *dv = g_new (float, nk);
  hn_ref_attention_fwd (&rs, q, k, v, out);
  hn_ref_attention_back (&rs, q, k, v, dout, dq, dk, dv);
  g_autofree float *got_o = hn_test_download (to), *got_dq = hn_test_download (tdq);
  g_autofree float *got_dk = hn_test_download (tdk), *got_dv = hn_test_download (tdv);
  flash_close ("out", c, got_o, out, nq);
  flash_close ("dq", c, got_dq, dq, nq);
  flash_close ("dk", c, got_dk, dk, nk);
  flash_close ("dv", c, got_dv, dv, nk);

  /* accumulate: a second backward adds the same gradients */
  g_autoptr(HnCmd) cmd2 = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_attention_back_flash (cmd2, tdq, tdk, tdv, tdo, tq, tk, tv, to, tl, st, &p, HN_BACK_ACCUMULATE,
                                             &error));
  hn_test_run (cmd2);
  g_autofree float *acc_dk = hn_test_download (tdk);
  for (gint64 i = 0; i < nk; i++)
    dk[i] *= 2.0f;
  flash_close ("dk accumulated", c, acc_dk, dk, nk);
}

/* The flash-attention forward (with the row log-sum-exp) and backward on
 * the tensor cores against the exact CPU reference: odd sequence lengths,
 * several query and key blocks, GQA, causal and not, sliding windows, a
 * past (pos0), batch > 1, head dims 64 and 128, dO as small as a mean loss
 * gives. Without cooperative matrix 2 (lavapipe) both fail closed. */
static void
test_attention_flash (void)
{
  g_autoptr(GError) error = NULL;
  HnAttentionParams p0 = { .causal = TRUE };
  if (!hn_attention_flash_ok (hn_test_ctx (), 64, 64, &p0))
    {
      g_autoptr(HnTensor) q = hn_test_empty (HN_DTYPE_F32, 4, (gint64[]) { 1, 20, 2, 64 });
      g_autoptr(HnTensor) o = hn_test_empty (HN_DTYPE_F32, 4, (gint64[]) { 1, 20, 2, 64 });
      g_autoptr(HnTensor) l = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 40 });
      g_autoptr(HnTensor) st = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 80 });
      HnAttentionParams p = { .causal = TRUE, .reduced_precision = TRUE, .lse = l };
      g_autoptr(HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_false (hn_op_attention (cmd, o, q, q, q, &p, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_clear_error (&error);
      g_assert_false (hn_op_attention_back_flash (cmd, o, o, o, o, q, q, q, o, l, st, &p, 0, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_test_message ("no cooperative matrix 2 here: the flash kernels fail closed (checked on the H200)");
      return;
    }
  FlashCase cases[] = {
    { 1, 70, 70, 4, 2, 64, TRUE, 0, 0, 1.0f },
    { 2, 130, 130, 4, 1, 128, TRUE, 0, 0, 1e-6f },
    { 3, 77, 77, 2, 2, 64, FALSE, 0, 0, 1.0f },
    { 2, 200, 200, 8, 2, 64, TRUE, 0, 37, 1e-3f },
    { 1, 40, 70, 2, 1, 64, TRUE, 30, 0, 1.0f },
    { 2, 17, 17, 2, 1, 128, TRUE, 0, 0, 1.0f },
    { 1, 5, 5, 3, 3, 64, TRUE, 0, 0, 1.0f },
    { 1, 512, 512, 4, 1, 64, TRUE, 0, 0, 2e-7f },
    { 2, 257, 257, 2, 2, 128, TRUE, 0, 100, 1.0f },
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    run_flash (&cases[i]);
  /* soft-cap and ALiBi stay on the exact kernels */
  HnAttentionParams ps = { .causal = TRUE, .softcap = 5.0f };
  g_assert_false (hn_attention_flash_ok (hn_test_ctx (), 64, 64, &ps));
  g_assert_false (hn_attention_flash_ok (hn_test_ctx (), 96, 96, &p0));
}

/* rope_kv with an invocation per (token, pair) for all heads (HN_ROPE_KV_BY_PAIR=1) */
static void
test_rope_kv_by_pair (void)
{
  g_setenv ("HN_ROPE_KV_BY_PAIR", "1", TRUE);
  test_rope_kv ();
  g_unsetenv ("HN_ROPE_KV_BY_PAIR");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/rope", test_rope);
  g_test_add_func ("/ops/rope-scaling", test_rope_scaling);
  g_test_add_func ("/ops/rope-kv", test_rope_kv);
  g_test_add_func ("/ops/rope-kv-by-pair", test_rope_kv_by_pair);
  g_test_add_func ("/ops/attention", test_attention);
  g_test_add_func ("/ops/attention-f16", test_attention_f16);
  g_test_add_func ("/ops/attention-errors", test_attention_errors);
  g_test_add_func ("/ops/attention-new-kv", test_attention_new_kv);
  g_test_add_func ("/ops/attention-decode", test_attention_decode);
  g_test_add_func ("/ops/attention-flash", test_attention_flash);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
