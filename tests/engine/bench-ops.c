/* hn-bench-ops: times the core kernels with GPU timestamps and prints one
 * JSON object per case (shape, microseconds per call, TFLOP/s or GB/s).
 * Not a test: build-aux/device-check runs it on the accelerator machine, and
 * on a CPU device (lavapipe) it shrinks the shapes so it stays quick.
 *
 *   hn-bench-ops [--iterations N] [--filter SUBSTRING] [--variants "ENV=V ENV=V;ENV=V;..."]
 *
 * --variants times each wanted matmul and tensor-core attention case under
 * every ';'-separated group of environment settings (tile and kernel
 * overrides such as HN_CM2_TILE, HN_CM2_NT, HN_ATTN_CM2_TILE) in turn,
 * --reps times (2), with a longer warm-up, and prints the best time of each
 * group, tagged with it.
 */
#include "tensor/hn-ops.h"
#include "tensor/ops-back.h"
#include "base/hn-error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int iterations = 10;
static int reps = 2;
static int warmup_ms = 0;
static char *filter = NULL;
static char *variants = NULL;
static const char *variant_tag = NULL;
static gboolean small;

static HnTensor *
random_tensor (HnVkContext *ctx, HnDType dt, int nd, const gint64 *shape)
{
  g_autoptr (GError) error = NULL;
  HnTensor *t = hn_tensor_new (ctx, dt, nd, shape, &error);
  if (!t)
    g_error ("%s", error->message);
  float *v = g_new (float, t->n);
  guint32 r = 42; /* an LCG: the 8192-square cases hold 64 Mi values */
  for (gint64 i = 0; i < t->n; i++)
    {
      r = r * 1664525u + 1013904223u;
      v[i] = (float) ((r >> 8) * (2.0 / 16777216.0) - 1.0);
    }
  if (dt == HN_DTYPE_I32)
    {
      gint32 *iv = g_new (gint32, t->n);
      for (gint64 i = 0; i < t->n; i++)
        iv[i] = (gint32) (i % 7);
      hn_tensor_upload_i32 (t, iv, t->n, &error);
      g_free (iv);
    }
  else
    hn_tensor_upload_f32 (t, v, t->n, &error);
  g_free (v);
  if (error)
    g_error ("%s", error->message);
  return t;
}

typedef gboolean (*RecordFn) (HnCmd *cmd, gpointer data, GError **error);

/* Records `iterations` calls in one submit (after one warm-up submit) and
 * returns the median per-call time from the dispatch timestamps. */
static double
time_op (HnVkContext *ctx, RecordFn fn, gpointer data)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  /* with --variants, a longer warm-up: the GPU's clocks drop while the host compiles pipelines;
   * --warmup-ms: repeated until that much time went by */
  gint64 w0 = g_get_monotonic_time ();
  do
    {
      for (int i = 0; i < (variants ? 3 * iterations : 1); i++)
        if (!fn (cmd, data, &error))
          g_error ("%s", error->message);
      if (!hn_cmd_submit_wait (cmd, &error))
        g_error ("%s", error->message);
    }
  while (g_get_monotonic_time () - w0 < (gint64) warmup_ms * 1000);
  hn_cmd_set_profiling (cmd, TRUE);
  guint per_call = 0;
  for (int i = 0; i < iterations; i++)
    {
      guint before = hn_cmd_get_n_dispatches (cmd);
      if (!fn (cmd, data, &error))
        g_error ("%s", error->message);
      per_call = hn_cmd_get_n_dispatches (cmd) - before;
    }
  gint64 t0 = g_get_monotonic_time ();
  if (!hn_cmd_submit_wait (cmd, &error))
    g_error ("%s", error->message);
  gint64 t1 = g_get_monotonic_time ();
  guint n = 0;
  const HnCmdProfileEntry *e = hn_cmd_get_profile (cmd, &n);
  if (n == 0 || per_call == 0)
    return (double) (t1 - t0) / iterations; /* no timestamps: wall clock */
  g_autofree double *calls = g_new0 (double, iterations);
  for (guint i = 0; i < n; i++)
    calls[MIN (i / per_call, (guint) iterations - 1)] += e[i].microseconds;
  for (int i = 1; i < iterations; i++) /* insertion sort for the median */
    for (int j = i; j > 0 && calls[j] < calls[j - 1]; j--)
      {
        double tmp = calls[j];
        calls[j] = calls[j - 1];
        calls[j - 1] = tmp;
      }
  return calls[iterations / 2];
}

static void
report (const char *name, const char *shape, double us, double flops, double bytes)
{
  printf ("{\"case\": \"%s\", \"shape\": \"%s\", \"us\": %.2f", name, shape, us);
  if (variant_tag)
    printf (", \"variant\": \"%s\"", variant_tag);
  if (flops > 0)
    printf (", \"tflops\": %.3f", flops / us / 1e6);
  if (bytes > 0)
    printf (", \"gbps\": %.1f", bytes / us / 1e3);
  printf ("}\n");
  fflush (stdout);
}

static gboolean
wanted (const char *name)
{
  return !filter || strstr (name, filter);
}

typedef struct { HnTensor *y, *x, *w; } MatmulData;

static gboolean
rec_matmul (HnCmd *cmd, gpointer p, GError **error)
{
  MatmulData *d = p;
  return hn_op_matmul (cmd, d->y, d->x, d->w, NULL, error);
}

/* Sets (or unsets) the ENV=VALUE settings of one --variants group. */
static void
set_group (const char *group, gboolean set)
{
  g_auto (GStrv) sets = g_strsplit (group, " ", -1);
  for (guint k = 0; sets[k]; k++)
    {
      char *eq = strchr (sets[k], '=');
      if (!eq)
        continue;
      *eq = 0;
      if (set)
        g_setenv (sets[k], eq + 1, TRUE);
      else
        g_unsetenv (sets[k]);
    }
}

/* Times one case, or with --variants each group in turn, twice, reporting
 * the best of the two (drifts of the clocks hit all alike). */
static void
report_variants (HnVkContext *ctx, const char *name, const char *shape, RecordFn fn, gpointer data, double flops,
                 double bytes)
{
  if (!variants)
    {
      report (name, shape, time_op (ctx, fn, data), flops, bytes);
      return;
    }
  g_auto (GStrv) groups = g_strsplit (variants, ";", -1);
  guint ng = g_strv_length (groups);
  g_autofree double *best = g_new (double, MAX (ng, 1));
  for (int rep = 0; rep < MAX (reps, 1); rep++)
    for (guint gi = 0; gi < ng; gi++)
      {
        set_group (groups[gi], TRUE);
        double us = time_op (ctx, fn, data);
        set_group (groups[gi], FALSE);
        best[gi] = rep == 0 ? us : MIN (best[gi], us);
      }
  for (guint gi = 0; gi < ng; gi++)
    {
      variant_tag = groups[gi];
      report (name, shape, best[gi], flops, 0);
    }
  variant_tag = NULL;
}

/* With --variants the same operands serve every group: made once. */
static GHashTable *operand_cache;

static HnTensor *
operand (HnVkContext *ctx, char role, HnDType dt, gint64 rows, gint64 cols)
{
  if (!variants)
    return random_tensor (ctx, dt, 2, (gint64[]) { rows, cols });
  if (!operand_cache)
    operand_cache = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, (GDestroyNotify) hn_tensor_unref);
  g_autofree char *key = g_strdup_printf ("%c%d/%" G_GINT64_FORMAT "/%" G_GINT64_FORMAT, role, (int) dt, rows, cols);
  HnTensor *t = g_hash_table_lookup (operand_cache, key);
  if (!t)
    {
      t = random_tensor (ctx, dt, 2, (gint64[]) { rows, cols });
      g_hash_table_insert (operand_cache, g_steal_pointer (&key), t);
    }
  return hn_tensor_ref (t);
}

static void
bench_matmul (HnVkContext *ctx, const char *name, HnDType wdt, gint64 M, gint64 N, gint64 K)
{
  if (!wanted (name))
    return;
  MatmulData d = {
    operand (ctx, 'y', HN_DTYPE_F32, M, N),
    operand (ctx, 'x', HN_DTYPE_F32, M, K),
    operand (ctx, 'w', wdt, N, K) };
  g_autofree char *shape = g_strdup_printf ("M%" G_GINT64_FORMAT " N%" G_GINT64_FORMAT " K%" G_GINT64_FORMAT " W %s",
                                            M, N, K, hn_dtype_name (wdt));
  double bytes = (double) N * K * hn_dtype_size (wdt) + 4.0 * (M * K + M * N);
  report_variants (ctx, name, shape, rec_matmul, &d, 2.0 * M * N * K, M <= 8 ? bytes : 0);
  hn_tensor_unref (d.y);
  hn_tensor_unref (d.x);
  hn_tensor_unref (d.w);
}

/* A gated MLP's gate/up half at llama-1b's shapes from an f16 input: fused
 * (hn_op_matmul_glu, f16 out) or apart (two GEMMs into f32, then glu writing
 * f16), as prefill runs it. */
typedef struct { HnTensor *x, *wg, *wu, *g, *u, *act; gboolean fused; } MlpData;

static gboolean
rec_mlp (HnCmd *cmd, gpointer p, GError **error)
{
  MlpData *d = p;
  if (d->fused)
    return hn_op_matmul_glu (cmd, d->act, d->x, d->wg, d->wu, HN_ACT_SILU, error);
  HnTensor *ys[2] = { d->g, d->u }, *ws[2] = { d->wg, d->wu };
  return hn_op_matmul_n (cmd, 2, ys, d->x, ws, NULL, error) && hn_op_glu (cmd, d->act, d->g, d->u, HN_ACT_SILU, error);
}

static void
bench_mlp (HnVkContext *ctx, const char *name, gint64 M, gint64 F, gint64 K, gboolean fused)
{
  if (!wanted (name))
    return;
  g_autoptr (GError) error = NULL;
  g_autoptr (HnCmd) probe = hn_cmd_new (ctx, &error);
  MlpData d = { random_tensor (ctx, HN_DTYPE_F16, 2, (gint64[]) { M, K }), random_tensor (ctx, HN_DTYPE_F16, 2, (gint64[]) { F, K }),
                random_tensor (ctx, HN_DTYPE_F16, 2, (gint64[]) { F, K }), NULL, NULL,
                hn_tensor_new (ctx, HN_DTYPE_F16, 2, (gint64[]) { M, F }, &error), fused };
  if (!fused)
    {
      d.g = hn_tensor_new (ctx, HN_DTYPE_F32, 2, (gint64[]) { M, F }, &error);
      d.u = hn_tensor_new (ctx, HN_DTYPE_F32, 2, (gint64[]) { M, F }, &error);
    }
  if (error)
    g_error ("%s", error->message);
  if (probe && hn_op_matmul_glu_available (probe, d.wg, d.wu, M) && hn_op_matmul_takes_f16 (probe, d.wg, M))
    {
      g_autofree char *shape = g_strdup_printf ("M%" G_GINT64_FORMAT " 2 x N%" G_GINT64_FORMAT " K%" G_GINT64_FORMAT " W f16",
                                                M, F, K);
      report (name, shape, time_op (ctx, rec_mlp, &d), 4.0 * M * F * K, 0);
    }
  HnTensor *all[] = { d.x, d.wg, d.wu, d.g, d.u, d.act };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    if (all[i])
      hn_tensor_unref (all[i]);
}

typedef struct { HnTensor *y, *x, *g, *u; } GluData;

static gboolean
rec_matvec_glu (HnCmd *cmd, gpointer p, GError **error)
{
  GluData *d = p;
  return hn_op_matvec_glu (cmd, d->y, d->x, NULL, d->g, NULL, d->u, NULL, HN_ACT_SILU, error);
}

/* The decode MLP's gate+up+SiLU in one kernel: two [F, K] matrices read. */
static void
bench_matvec_glu (HnVkContext *ctx, const char *name, HnDType wdt, gint64 F, gint64 K)
{
  if (!wanted (name))
    return;
  GluData d = {
    random_tensor (ctx, HN_DTYPE_F32, 2, (gint64[]) { 1, F }), random_tensor (ctx, HN_DTYPE_F32, 2, (gint64[]) { 1, K }),
    random_tensor (ctx, wdt, 2, (gint64[]) { F, K }), random_tensor (ctx, wdt, 2, (gint64[]) { F, K }) };
  double us = time_op (ctx, rec_matvec_glu, &d);
  g_autofree char *shape = g_strdup_printf ("2 x N%" G_GINT64_FORMAT " K%" G_GINT64_FORMAT " W %s", F, K,
                                            hn_dtype_name (wdt));
  report (name, shape, us, 4.0 * F * K, 2.0 * F * K * hn_dtype_size (wdt));
  hn_tensor_unref (d.y);
  hn_tensor_unref (d.x);
  hn_tensor_unref (d.g);
  hn_tensor_unref (d.u);
}

typedef struct { HnTensor *o, *x; } ArgmaxData;

static gboolean
rec_argmax (HnCmd *cmd, gpointer p, GError **error)
{
  ArgmaxData *d = p;
  return hn_op_argmax (cmd, d->o, d->x, error);
}

static void
bench_argmax (HnVkContext *ctx, const char *name, gint64 cols)
{
  if (!wanted (name))
    return;
  ArgmaxData d = { random_tensor (ctx, HN_DTYPE_I32, 1, (gint64[]) { 1 }),
                   random_tensor (ctx, HN_DTYPE_F32, 2, (gint64[]) { 1, cols }) };
  double us = time_op (ctx, rec_argmax, &d);
  g_autofree char *shape = g_strdup_printf ("1x%" G_GINT64_FORMAT, cols);
  report (name, shape, us, 0, 4.0 * cols);
  hn_tensor_unref (d.o);
  hn_tensor_unref (d.x);
}

typedef struct { HnTensor *o, *q, *k, *v; HnAttentionParams p; } AttnData;

static gboolean
rec_attn (HnCmd *cmd, gpointer p, GError **error)
{
  AttnData *d = p;
  return hn_op_attention (cmd, d->o, d->q, d->k, d->v, &d->p, error);
}

static void
bench_attention (HnVkContext *ctx, const char *name, gint64 T, gint64 H, gint64 KVH, gint64 D, gint64 n_kv, HnDType kvdt,
                 gboolean split)
{
  if (!wanted (name))
    return;
  gint64 nsc = split ? hn_attention_scratch_size (1, T, H, D, n_kv) : 0;
  HnTensor *sc = nsc > 0 ? random_tensor (ctx, HN_DTYPE_F32, 1, (gint64[]) { nsc }) : NULL;
  AttnData d = {
    random_tensor (ctx, HN_DTYPE_F32, 3, (gint64[]) { T, H, D }),
    random_tensor (ctx, HN_DTYPE_F32, 3, (gint64[]) { T, H, D }),
    random_tensor (ctx, kvdt, 3, (gint64[]) { n_kv, KVH, D }),
    random_tensor (ctx, kvdt, 3, (gint64[]) { n_kv, KVH, D }),
    { .causal = TRUE, .pos0 = n_kv - T, .n_kv = n_kv, .scratch = sc } };
  double us = time_op (ctx, rec_attn, &d);
  if (sc)
    hn_tensor_unref (sc);
  g_autofree char *shape = g_strdup_printf ("T%" G_GINT64_FORMAT " H%" G_GINT64_FORMAT " KVH%" G_GINT64_FORMAT
                                            " D%" G_GINT64_FORMAT " n_kv %" G_GINT64_FORMAT " %s",
                                            T, H, KVH, D, n_kv, hn_dtype_name (kvdt));
  double flops = 4.0 * T * H * D * (double) n_kv / (T > 1 ? 2 : 1);
  double bytes = 2.0 * n_kv * KVH * D * hn_dtype_size (kvdt);
  report (name, shape, us, flops, T == 1 ? bytes : 0);
  hn_tensor_unref (d.o);
  hn_tensor_unref (d.q);
  hn_tensor_unref (d.k);
  hn_tensor_unref (d.v);
}

/* Prefill attention as a 16-bit model runs it (reduced precision: the
 * tensor-core flash kernel on cooperative matrix 2, else the scalar one),
 * causal, [B, T, H, D] queries over f32 [B, T, KVH, D] keys and values. */
static void
bench_prefill_attention (HnVkContext *ctx, const char *name, gint64 B, gint64 T, gint64 H, gint64 KVH, gint64 D)
{
  if (!wanted (name))
    return;
  gint64 sq[4] = { B, T, H, D }, sk[4] = { B, T, KVH, D };
  AttnData d = { random_tensor (ctx, HN_DTYPE_F32, 4, sq), random_tensor (ctx, HN_DTYPE_F32, 4, sq),
                 random_tensor (ctx, HN_DTYPE_F32, 4, sk), random_tensor (ctx, HN_DTYPE_F32, 4, sk),
                 { .causal = TRUE, .reduced_precision = TRUE } };
  g_autofree char *shape = g_strdup_printf ("B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " H%" G_GINT64_FORMAT
                                            " KVH%" G_GINT64_FORMAT " D%" G_GINT64_FORMAT " causal",
                                            B, T, H, KVH, D);
  report_variants (ctx, name, shape, rec_attn, &d, 4.0 * B * T * T * H * D / 2, 0);
  hn_tensor_unref (d.o);
  hn_tensor_unref (d.q);
  hn_tensor_unref (d.k);
  hn_tensor_unref (d.v);
}

/* Training attention on the tensor cores (hn_attention_flash_ok): the
 * forward with the row log-sum-exp, and the flash backward
 * (hn_op_attention_back_flash), causal, [B, T, H, D] with GQA; TFLOP/s
 * counts the causal half (the backward's five products as 2.5 forwards). */
typedef struct { HnTensor *o, *q, *k, *v, *lse, *st, *dq, *dk, *dv, *dout; HnAttentionParams p; } TrainAttnData;

static gboolean
rec_train_attn_fwd (HnCmd *cmd, gpointer p, GError **error)
{
  TrainAttnData *d = p;
  return hn_op_attention (cmd, d->o, d->q, d->k, d->v, &d->p, error);
}

static gboolean
rec_train_attn_back (HnCmd *cmd, gpointer p, GError **error)
{
  TrainAttnData *d = p;
  return hn_op_attention_back_flash (cmd, d->dq, d->dk, d->dv, d->dout, d->q, d->k, d->v, d->o, d->lse, d->st, &d->p, 0,
                                     error);
}

static void
bench_train_attention (HnVkContext *ctx, const char *name, gint64 B, gint64 T, gint64 H, gint64 KVH, gint64 D)
{
  if (!wanted (name))
    return;
  HnAttentionParams p0 = { .causal = TRUE };
  if (!hn_attention_flash_ok (ctx, D, D, &p0))
    return;
  gint64 sq[4] = { B, T, H, D }, sk[4] = { B, T, KVH, D };
  TrainAttnData d = {
    random_tensor (ctx, HN_DTYPE_F32, 4, sq), random_tensor (ctx, HN_DTYPE_F32, 4, sq),
    random_tensor (ctx, HN_DTYPE_F32, 4, sk), random_tensor (ctx, HN_DTYPE_F32, 4, sk),
    random_tensor (ctx, HN_DTYPE_F32, 1, (gint64[]) { B * T * H }),
    random_tensor (ctx, HN_DTYPE_F32, 1, (gint64[]) { 2 * B * T * H }),
    random_tensor (ctx, HN_DTYPE_F32, 4, sq), random_tensor (ctx, HN_DTYPE_F32, 4, sk),
    random_tensor (ctx, HN_DTYPE_F32, 4, sk), random_tensor (ctx, HN_DTYPE_F32, 4, sq), { 0 } };
  d.p = (HnAttentionParams) { .causal = TRUE, .reduced_precision = TRUE, .lse = d.lse };
  g_autofree char *shape = g_strdup_printf ("B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " H%" G_GINT64_FORMAT
                                            " KVH%" G_GINT64_FORMAT " D%" G_GINT64_FORMAT " causal",
                                            B, T, H, KVH, D);
  double flops = 4.0 * B * T * T * H * D / 2;
  g_autofree char *fname = g_strdup_printf ("%s-fwd", name), *bname = g_strdup_printf ("%s-back", name);
  report_variants (ctx, fname, shape, rec_train_attn_fwd, &d, flops, 0);
  report_variants (ctx, bname, shape, rec_train_attn_back, &d, 2.5 * flops, 0);
  HnTensor **all[] = { &d.o, &d.q, &d.k, &d.v, &d.lse, &d.st, &d.dq, &d.dk, &d.dv, &d.dout };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    hn_tensor_unref (*all[i]);
}

typedef struct { HnTensor *o, *x, *w; } RowData;

static gboolean
rec_rmsnorm (HnCmd *cmd, gpointer p, GError **error)
{
  RowData *d = p;
  return hn_op_rmsnorm (cmd, d->o, d->x, d->w, 1e-5f, 0, error);
}

static gboolean
rec_softmax (HnCmd *cmd, gpointer p, GError **error)
{
  RowData *d = p;
  return hn_op_softmax (cmd, d->o, d->x, NULL, error);
}

static gboolean
rec_copy (HnCmd *cmd, gpointer p, GError **error)
{
  RowData *d = p;
  return hn_op_copy (cmd, d->o, d->x, error);
}

static void
bench_rows (HnVkContext *ctx, const char *name, RecordFn fn, gint64 rows, gint64 cols)
{
  if (!wanted (name))
    return;
  RowData d = {
    random_tensor (ctx, HN_DTYPE_F32, 2, (gint64[]) { rows, cols }),
    random_tensor (ctx, HN_DTYPE_F32, 2, (gint64[]) { rows, cols }),
    random_tensor (ctx, HN_DTYPE_F32, 1, (gint64[]) { cols }) };
  double us = time_op (ctx, fn, &d);
  g_autofree char *shape = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, rows, cols);
  report (name, shape, us, 0, 8.0 * rows * cols);
  hn_tensor_unref (d.o);
  hn_tensor_unref (d.x);
  hn_tensor_unref (d.w);
}

static void
run_cases (HnVkContext *ctx, gint64 s)
{
  /* Llama-3.2-1B-like shapes: hidden 2048, inter 8192, vocab 128256 */
  bench_matmul (ctx, "matmul-f32-square", HN_DTYPE_F32, 4096 / s, 4096 / s, 4096 / s);
  bench_matmul (ctx, "matmul-bf16-prefill", HN_DTYPE_BF16, 512 / s, 8192 / s, 2048 / s);
  bench_matmul (ctx, "matmul-f16-prefill", HN_DTYPE_F16, 512 / s, 8192 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-ffn", HN_DTYPE_BF16, 1, 8192 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-lmhead", HN_DTYPE_BF16, 1, 128256 / s, 2048 / s);
  bench_matmul (ctx, "matvec-f32-ffn", HN_DTYPE_F32, 1, 8192 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-batch4", HN_DTYPE_BF16, 4, 8192 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-q", HN_DTYPE_BF16, 1, 2048 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-kv", HN_DTYPE_BF16, 1, 512 / s, 2048 / s);
  bench_matmul (ctx, "matvec-bf16-down", HN_DTYPE_BF16, 1, 2048 / s, 8192 / s);
  bench_matvec_glu (ctx, "matvec-bf16-glu", HN_DTYPE_BF16, 8192 / s, 2048 / s);
  bench_argmax (ctx, "argmax-vocab", 128256 / s);
  bench_attention (ctx, "attention-decode-f16", 1, 32, 8, 64, 4096 / s, HN_DTYPE_F16, FALSE);
  bench_attention (ctx, "attention-decode-f32", 1, 32, 8, 64, 4096 / s, HN_DTYPE_F32, FALSE);
  bench_attention (ctx, "attention-decode-split-f32", 1, 32, 8, 64, 4096 / s, HN_DTYPE_F32, TRUE);
  bench_attention (ctx, "attention-decode-split-256", 1, 32, 8, 64, 256, HN_DTYPE_F32, TRUE);
  bench_attention (ctx, "attention-decode-split-256-d128", 1, 32, 8, 128, 256, HN_DTYPE_F32, TRUE); /* llama-3-8b */
  bench_attention (ctx, "attention-prefill", 512 / s, 32, 8, 64, 512 / s, HN_DTYPE_F32, FALSE);
  bench_prefill_attention (ctx, "attention-prefill-16bit-b1", 1, 512 / s, 32, 8, 64);
  bench_prefill_attention (ctx, "attention-prefill-16bit-b4", 4, 512 / s, 32, 8, 64);
  /* training attention (cooperative matrix 2 only): the LoRA row's llama-1b
   * 4 x 512 and the gpt2-124m 8 x 1024 training shapes */
  bench_train_attention (ctx, "attention-train-llama1b", 4, 512, 32, 8, 64);
  bench_train_attention (ctx, "attention-train-gpt2", 8, 1024, 12, 12, 64);
  bench_rows (ctx, "rmsnorm", rec_rmsnorm, 2048 / s, 2048);
  bench_rows (ctx, "softmax", rec_softmax, 2048 / s, 4096);
  bench_rows (ctx, "copy", rec_copy, 8192 / s, 8192 / s);
  /* the tensor-core GEMM: 8192³ and the llama-1b prefill projections at
   * 512 and 2048 rows (q/o, k/v, gate/up, down) */
  bench_matmul (ctx, "cm2-gemm-f16-8192", HN_DTYPE_F16, 8192 / s, 8192 / s, 8192 / s);
  if (!variants) /* bf16 weights are stored f16 on these devices (hn_bf16_weights_as_f16) */
    bench_matmul (ctx, "cm2-gemm-bf16-8192", HN_DTYPE_BF16, 8192 / s, 8192 / s, 8192 / s);
  static const gint64 proj[][2] = { { 2048, 2048 }, { 512, 2048 }, { 8192, 2048 }, { 2048, 8192 } };
  static const char *const pname[] = { "q", "kv", "up", "down" };
  for (guint rows = 512; rows <= 2048; rows *= 4)
    for (guint i = 0; i < G_N_ELEMENTS (proj); i++)
      {
        g_autofree char *name = g_strdup_printf ("cm2-proj-%u-%s", rows, pname[i]);
        bench_matmul (ctx, name, HN_DTYPE_F16, rows / s, proj[i][0] / s, proj[i][1] / s);
      }
  for (guint rows = 512; rows <= 2048; rows *= 4)
    for (int fused = 1; fused >= 0; fused--)
      {
        g_autofree char *name = g_strdup_printf ("cm2-mlp-%u-%s", rows, fused ? "fused" : "apart");
        bench_mlp (ctx, name, rows / s, 8192 / s, 2048 / s, fused);
      }
}

int
main (int argc, char **argv)
{
  GOptionEntry entries[] = {
    { "iterations", 'n', 0, G_OPTION_ARG_INT, &iterations, "Timed calls per case (default 10)", "N" },
    { "reps", 0, 0, G_OPTION_ARG_INT, &reps, "With --variants: rounds over the groups, the best kept (default 2)", "N" },
    { "warmup-ms", 0, 0, G_OPTION_ARG_INT, &warmup_ms, "Warm up each case at least this long (default 0)", "MS" },
    { "filter", 'f', 0, G_OPTION_ARG_STRING, &filter, "Only cases whose name contains this", "TEXT" },
    { "variants", 0, 0, G_OPTION_ARG_STRING, &variants, "Run the cases under each ';'-separated group of ENV=VALUE settings", "LIST" },
    { NULL },
  };
  g_autoptr (GOptionContext) octx = g_option_context_new ("- time the core Vulkan kernels");
  g_option_context_add_main_entries (octx, entries, NULL);
  g_autoptr (GError) error = NULL;
  if (!g_option_context_parse (octx, &argc, &argv, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 2;
    }
  iterations = CLAMP (iterations, 1, 1000);
  g_autoptr (HnVkContext) ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 1;
    }
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
  small = g_str_equal (info->type, "cpu");
  fprintf (stderr, "device: %s%s\n", info->name, small ? " (CPU device: small shapes)" : "");
  gint64 s = small ? 8 : 1; /* shrink factor */

  run_cases (ctx, s);
  HnVkMemoryStats st;
  hn_vk_context_get_memory_stats (ctx, &st);
  fprintf (stderr, "peak allocated %" G_GUINT64_FORMAT " bytes\n", st.peak_allocated_bytes);
  g_clear_pointer (&operand_cache, g_hash_table_unref);
  g_free (filter);
  g_free (variants);
  return 0;
}
