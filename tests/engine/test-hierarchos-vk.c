/* The Hierarchos Vulkan runtime: each hier_* shader against its CPU
 * reference on random inputs, the recorded program (run through the
 * references) against the CPU tape runtime, and the Vulkan forward against
 * the CPU runtime over 256 tokens of real text. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"
#include "hier-test-util.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <string.h>

#define NONE HN_HIER_NONE

static HnVkContext *
context_or_skip (void)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    g_test_skip_printf ("no Vulkan device: %s", error->message);
  return ctx;
}

/* ---- ops against their references ---- */

typedef struct {
  HnVkContext *ctx;
  HnRng rng;
  gsize n_prm, n_wk;
  float *prm, *wk, *wk_ref;
} OpBench;

static float
urand (HnRng *rng, float lo, float hi)
{
  return lo + (hi - lo) * (float) hn_rng_uniform (rng);
}

static void
bench_fill (OpBench *b)
{
  for (gsize i = 0; i < b->n_prm; i++)
    b->prm[i] = urand (&b->rng, -1.0f, 1.0f);
  for (gsize i = 0; i < b->n_wk; i++)
    b->wk[i] = urand (&b->rng, -1.0f, 1.0f);
}

/* Runs op on the device and the reference on copies; compares the whole
 * work buffer with a tolerance relative to each value's scale. */
static void
bench_check (OpBench *b, const HnHierOp *op, float tol)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkBuffer) prm = hn_vk_buffer_new (b->ctx, b->n_prm * sizeof (float), "test prm", &error);
  g_assert_no_error (error);
  g_autoptr (HnVkBuffer) wk = hn_vk_buffer_new (b->ctx, b->n_wk * sizeof (float), "test wk", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (prm, 0, b->prm, b->n_prm * sizeof (float), &error));
  g_assert_true (hn_vk_buffer_upload (wk, 0, b->wk, b->n_wk * sizeof (float), &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (b->ctx, &error);
  g_assert_no_error (error);
  g_assert_true (hn_hier_op_record (cmd, op, prm, wk, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_autofree float *got = g_new (float, b->n_wk);
  g_assert_true (hn_vk_buffer_download (wk, 0, got, b->n_wk * sizeof (float), &error));
  memcpy (b->wk_ref, b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (op, b->prm, b->wk_ref);
  gsize changed = 0;
  for (gsize i = 0; i < b->n_wk; i++)
    {
      float want = b->wk_ref[i];
      if (want != b->wk[i])
        changed++;
      if (isnan (want))
        {
          g_assert_true (isnan (got[i]));
          continue;
        }
      if (fabsf (got[i] - want) > tol * (1.0f + fabsf (want)))
        g_error ("op %d: work[%" G_GSIZE_FORMAT "] = %.8g, reference %.8g", op->kind, i, got[i], want);
    }
  /* the reference did something (a test that compares unchanged buffers
   * proves nothing) */
  g_assert_cmpuint (changed, >, 0);
}

static OpBench *
bench_new (HnVkContext *ctx, guint64 seed)
{
  OpBench *b = g_new0 (OpBench, 1);
  b->ctx = ctx;
  hn_rng_seed (&b->rng, seed);
  b->n_prm = 1 << 16;
  b->n_wk = 1 << 16;
  b->prm = g_new (float, b->n_prm);
  b->wk = g_new (float, b->n_wk);
  b->wk_ref = g_new (float, b->n_wk);
  bench_fill (b);
  return b;
}

static void
bench_free (OpBench *b)
{
  g_free (b->prm);
  g_free (b->wk);
  g_free (b->wk_ref);
  g_free (b);
}

static HnHierMatvecPush
mv (guint32 out, guint32 in, guint32 trans)
{
  HnHierMatvecPush p = { 0 };
  p.out_n = out;
  p.in_n = in;
  p.trans = trans;
  p.w_off = 17;
  p.b_off = p.res_off = p.y2_off = p.aux = p.pred = NONE;
  p.x0 = 3;
  p.n0 = in;
  p.x1 = p.x2 = 3;
  p.y_off = 40000;
  p.scale = 1.0f;
  return p;
}

static void
test_op_matvec (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  OpBench *b = bench_new (ctx, 1);
  HnHierOp op = { .kind = HN_HIER_OP_MATVEC };
  /* plain, odd shapes, both layouts */
  const guint32 shapes[][2] = { { 1, 1 }, { 7, 13 }, { 33, 129 }, { 130, 37 }, { 9, 2500 }, { 300, 64 } };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    for (guint32 trans = 0; trans < 2; trans++)
      {
        op.u.mv = mv (shapes[s][0], shapes[s][1], trans);
        bench_check (b, &op, 1e-5f);
      }
  /* three segments (one from the parameters), bias, residual, activations, clamps, y2 */
  const guint32 acts[] = { 0, 1, 2, 7, 8, HN_HIER_ACT_WDECAY };
  for (gsize a = 0; a < G_N_ELEMENTS (acts); a++)
    {
      HnHierMatvecPush p = mv (45, 50, a % 2);
      p.n0 = 20;
      p.x1 = 900;
      p.n1 = 11;
      p.x2 = 1200;
      p.xsrc = 2;
      p.b_off = 5000;
      p.res_off = 7000;
      p.act = acts[a];
      p.scale = 1.5f;
      p.clamp = 0.8f;
      p.y2_off = 41000;
      p.clamp2 = 0.3f;
      if (a == 2) /* training: v kept for the backward too */
        {
          p.flags = HN_HIER_MV_KEEP_V;
          p.u0 = 42000;
        }
      op.u.mv = p;
      bench_check (b, &op, 1e-5f);
    }
  /* channel mix, v kept */
  HnHierMatvecPush p = mv (64, 16, 0);
  p.post = HN_HIER_POST_CM;
  p.clamp = 1.2f;
  p.aux = 8000;
  p.f1 = 0.5f;
  p.flags = HN_HIER_MV_KEEP_V;
  p.u0 = 42000;
  op.u.mv = p;
  bench_check (b, &op, 1e-5f);
  /* memory gate with a floor */
  p = mv (1, 24, 0);
  p.b_off = 300;
  p.post = HN_HIER_POST_GATE;
  p.aux = 301;
  p.f1 = 0.25f;
  op.u.mv = p;
  bench_check (b, &op, 1e-5f);
  /* halting: first step, then a later step that halts */
  p = mv (1, 24, 0);
  p.b_off = 300;
  p.post = HN_HIER_POST_HALT;
  p.aux = 9000;
  p.y2_off = 9100; /* the control words out (in place in inference) */
  p.flags = 1;
  p.u0 = 1;
  p.f0 = 0.9f;
  p.f1 = 30.0f;
  op.u.mv = p;
  bench_check (b, &op, 1e-5f);
  b->wk[9001] = 0.05f; /* survival */
  b->wk[9002] = 2.0f;
  p.flags = 0;
  op.u.mv = p;
  bench_check (b, &op, 1e-5f);
  /* predicate off: nothing happens on either side */
  b->wk[10] = 0.0f;
  op.u.mv = mv (5, 5, 0);
  op.u.mv.pred = 10;
  g_autofree float *before = g_memdup2 (b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (&op, b->prm, b->wk);
  g_assert_cmpmem (before, b->n_wk * sizeof (float), b->wk, b->n_wk * sizeof (float));
  bench_free (b);
}

static void
test_op_norm (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  OpBench *b = bench_new (ctx, 2);
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  const guint32 widths[] = { 1, 7, 37, 300, 513 };
  for (gsize w = 0; w < G_N_ELEMENTS (widths); w++)
    {
      guint32 W = widths[w];
      /* plain LN from the parameters, no affine */
      op.u.norm = (HnHierNormPush) { W, 100, 1, NONE, NONE, 20000, 1e-5f, 0, 0, 0, 0, NONE, { 0 } };
      bench_check (b, &op, 1e-5f);
      /* affine, clamp, six mixes, y in place over prev */
      op.u.norm = (HnHierNormPush) { W, 100, 0, 3000, 4000, 30000, 1e-5f, 0.7f, 6, 30000, 40000, NONE,
                                     { 5000, 6000, 7000, 8000, 9000, 10000 } };
      bench_check (b, &op, 1e-5f);
    }
  bench_free (b);
}

static void
test_op_wkv (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  OpBench *b = bench_new (ctx, 3);
  HnHierOp op = { .kind = HN_HIER_OP_WKV };
  const guint32 shapes[][2] = { { 8, 2 }, { 5, 3 }, { 64, 2 }, { 17, 1 } };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      guint32 N = shapes[s][0];
      op.groups = shapes[s][1];
      /* w in a range where the decay is neither 0 nor 1 */
      for (guint32 i = 0; i < N * op.groups; i++)
        b->wk[600 + i] = urand (&b->rng, -4.0f, 1.0f);
      op.u.wkv = (HnHierWkvPush) { N, 100, 200, 300, 400, 500, 600, 1000, 2000, 3000, 4000, 5000,
                                   20000, 30000, 31000, 0.9f, 64e-5f, NONE, 20000 };
      bench_check (b, &op, 2e-5f);
    }
  bench_free (b);
}

static void
test_op_ltm (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  OpBench *b = bench_new (ctx, 4);
  HnHierOp op = { .kind = HN_HIER_OP_LTM };
  const guint32 shapes[][4] = { { 16, 8, 8, 2 }, { 300, 5, 7, 4 }, { 3, 4, 6, 5 }, { 1030, 16, 9, 3 } };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      op.u.ltm = (HnHierLtmPush) { shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 100, 30000,
                                   20000, 10, 50, 40000, 41000, NONE };
      bench_check (b, &op, 1e-5f);
    }
  /* ties go to the lower slot: two equal keys */
  memcpy (b->prm + 100 + 5 * 8, b->prm + 100 + 2 * 8, 8 * sizeof (float));
  op.u.ltm = (HnHierLtmPush) { 16, 8, 8, 2, 100, 30000, 20000, 10, 50, 40000, 41000, NONE };
  bench_check (b, &op, 1e-5f);
  bench_free (b);
}

static void
test_op_drift_ew (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  OpBench *b = bench_new (ctx, 5);
  HnHierOp op = { .kind = HN_HIER_OP_DRIFT };
  const guint32 widths[] = { 3, 16, 300, 700 };
  for (gsize w = 0; w < G_N_ELEMENTS (widths); w++)
    for (guint32 mode = 0; mode < 3; mode++)
      {
        /* dnc small enough that the norm clamp acts */
        op.u.drift = (HnHierDriftPush) { widths[w], 1000, 3000, 5000, 7000, 9000, 0.6f, 2.0f, 1e-4f, mode, 12000, 4, NONE };
        bench_check (b, &op, 1e-5f);
      }
  /* convergence: a tiny delta clears the next iteration's word */
  for (guint32 i = 0; i < 16; i++)
    b->wk[3000 + i] = 1e-6f;
  op.u.drift = (HnHierDriftPush) { 16, 1000, 3000, 5000, 7000, 9000, 0.6f, 2.0f, 1e-4f, HN_HIER_DRIFT_REFINE, 12000, 4, NONE };
  bench_check (b, &op, 1e-5f);
  memcpy (b->wk_ref, b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (&op, b->prm, b->wk_ref);
  g_assert_cmpfloat (b->wk_ref[12000], ==, 0.0f);

  op.kind = HN_HIER_OP_EW;
  for (guint32 o = 0; o < 3; o++)
    {
      op.u.ew = (HnHierEwPush) { 777, o, 100, o == 0, 2000, 3000, 20000, 0.3f, o == 1 ? 0.5f : 0.0f, NONE };
      bench_check (b, &op, 1e-6f);
    }
  bench_free (b);
}

/* The Linear over many rows (hier_matvec_rows, W read once per workgroup
 * of HN_HIER_MV_ROWS rows: main sets 4) gives the same bits as the same op
 * run row by row, including the epilogue and a row whose predicate is off. */
static void
test_op_matvec_rows (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  g_autoptr (GError) error = NULL;
  const guint32 rows = 19, rs = 4096, out = 37, in = 300;
  gsize n_prm = 1 << 16, n_wk = (gsize) rows * rs;
  HnRng rng;
  hn_rng_seed (&rng, 5);
  g_autofree float *prm = g_new (float, n_prm), *wk = g_new (float, n_wk);
  for (gsize i = 0; i < n_prm; i++)
    prm[i] = urand (&rng, -1.0f, 1.0f);
  for (gsize i = 0; i < n_wk; i++)
    wk[i] = urand (&rng, -1.0f, 1.0f);
  for (guint32 r = 0; r < rows; r++)
    wk[(gsize) r * rs + 10] = r == 7 ? 0.0f : 1.0f; /* row 7 predicated off */
  HnHierOp op = { .kind = HN_HIER_OP_MATVEC };
  op.u.mv = mv (out, in, 0);
  op.u.mv.x0 = 100;
  op.u.mv.y_off = 1000;
  op.u.mv.b_off = 50000;
  op.u.mv.res_off = 2000;
  op.u.mv.act = 8;
  op.u.mv.clamp = 0.9f;
  op.u.mv.pred = 10;
  op.u.mv.rs = rs;
  g_autoptr (HnVkBuffer) bp = hn_vk_buffer_new (ctx, n_prm * 4, "prm", &error);
  g_autoptr (HnVkBuffer) b1 = hn_vk_buffer_new (ctx, n_wk * 4, "rows", &error);
  g_autoptr (HnVkBuffer) b2 = hn_vk_buffer_new (ctx, n_wk * 4, "row by row", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (bp, 0, prm, n_prm * 4, &error));
  g_assert_true (hn_vk_buffer_upload (b1, 0, wk, n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_upload (b2, 0, wk, n_wk * 4, &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  op.rows = rows;
  g_assert_true (hn_hier_op_record (cmd, &op, bp, b1, &error));
  op.rows = 1;
  for (guint32 r = 0; r < rows; r++)
    {
      /* one row at a time: the same offsets, shifted by the row's base */
      HnHierOp one = op;
      guint32 base = r * rs;
      one.u.mv.x0 += base;
      one.u.mv.x1 += base;
      one.u.mv.x2 += base;
      one.u.mv.y_off += base;
      one.u.mv.res_off += base;
      one.u.mv.pred += base;
      g_assert_true (hn_hier_op_record (cmd, &one, bp, b2, &error));
    }
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_autofree float *got = g_new (float, n_wk), *want = g_new (float, n_wk);
  g_assert_true (hn_vk_buffer_download (b1, 0, got, n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_download (b2, 0, want, n_wk * 4, &error));
  g_assert_cmpmem (got, n_wk * 4, want, n_wk * 4);
  g_assert_cmpfloat (got[7 * rs + 1000], ==, wk[7 * rs + 1000]); /* the row that did not run */
  g_assert_cmpfloat (got[1000], !=, wk[1000]);
}

/* ---- whole step ---- */

static HnHierModel *
model_for (gint64 vocab, gint64 C, guint64 seed, float perturb)
{
  HnHierConfig c;
  hier_test_tiny_config (&c, vocab, C);
  c.ltm_slots = 32;
  c.ltm_topk = 3;
  c.rosa_max_context = 96;
  HnHierModel *m = hier_test_model (&c, seed);
  if (perturb > 0)
    hier_test_perturb (m, seed + 1, perturb);
  return m;
}

/* 256 tokens of tinyshakespeare through the stories260K tokenizer. */
static GArray *
real_tokens (int *vocab)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_assert_nonnull (shared);
  g_autofree char *tp = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *text_path = g_build_filename (shared, "datasets", "tinyshakespeare.txt", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tp, &error);
  g_assert_no_error (error);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (text_path, &text, &len, &error));
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_assert_true (hn_tokenizer_encode (tok, text, MIN (len, 4000), TRUE, ids, &error));
  g_assert_cmpuint (ids->len, >=, 256);
  g_array_set_size (ids, 256);
  *vocab = hn_tokenizer_get_vocab_size (tok);
  return ids;
}

/* Runs the tokens through the CPU runtime and through `vk` (the chunked
 * runner: 256 tokens = 4 chunks, so the state also crosses chunks) and
 * returns the largest logit difference; the states must agree as well. */
static float
compare_runtimes (HnHierModel *m, HnHierVkRunner *vk, const GArray *ids)
{
  g_autoptr (GError) error = NULL;
  gsize n = ids->len, V = (gsize) m->V;
  g_autoptr (HnHierRunner) cpu = hn_hier_runner_new (m);
  g_autoptr (HnHierState) s_cpu = hn_hier_state_new (m);
  g_autoptr (HnHierState) s_vk = hn_hier_state_new (m);
  g_autofree float *want = g_new (float, n * V);
  g_autofree float *got = g_new (float, n * V);
  g_autofree float *last = g_new (float, V);
  for (gsize t = 0; t < n; t++)
    g_assert_true (hn_hier_runner_step (cpu, s_cpu, (guint32) g_array_index (ids, int32_t, t), want + t * V, &error));
  /* the first token alone, then the rest in one call */
  g_assert_true (hn_hier_vk_runner_steps (vk, s_vk, (const guint32 *) ids->data, 1, got, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (hn_hier_vk_runner_steps (vk, s_vk, (const guint32 *) ids->data + 1, n - 1, got + V, last, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (last, V * sizeof (float), got + (n - 1) * V, V * sizeof (float));
  float worst = 0;
  for (gsize i = 0; i < n * V; i++)
    worst = MAX (worst, fabsf (got[i] - want[i]));
  g_assert_cmpint (s_vk->position, ==, s_cpu->position);
  g_assert_cmpuint (s_vk->history->len, ==, s_cpu->history->len);
  g_assert_cmpuint (s_vk->rosa.tokens->len, ==, s_cpu->rosa.tokens->len);
  float sworst = 0;
  for (int i = 0; i < m->C; i++)
    sworst = MAX (sworst, fabsf (s_vk->target_context[i] - s_cpu->target_context[i]));
  for (gsize i = 0; i < (gsize) m->L * (gsize) m->cfg.l_rwkv_head_size; i++)
    sworst = MAX (sworst, fabsf (s_vk->l.S[i] - s_cpu->l.S[i]));
  g_assert_cmpfloat (sworst, <, 1e-4);
  return worst;
}

static void
test_program_reference (void)
{
  /* The recorded program, run through the CPU references: checks the
   * recording (op order, offsets, predicates) without a device. */
  int V;
  g_autoptr (GArray) ids = real_tokens (&V);
  g_autoptr (HnHierModel) m = model_for (V, 16, 11, 0.05f);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierVkRunner) r = hn_hier_vk_runner_new_reference (m, &error);
  g_assert_no_error (error);
  float worst = compare_runtimes (m, r, ids);
  g_test_message ("reference program vs CPU runtime: max |logit diff| %.3g", worst);
  g_assert_cmpfloat (worst, <, 1e-4);
}

static void
test_vulkan_parity (void)
{
  g_autoptr (HnVkContext) ctx = context_or_skip ();
  if (!ctx)
    return;
  int V;
  g_autoptr (GArray) ids = real_tokens (&V);
  /* Fresh, and every path non-trivial. A larger perturbation (0.05 at this
   * width) makes the recurrence chaotic: rounding differences then grow
   * even between two CPU summation orders, so no runtime could agree. */
  const float perturbs[] = { 0.0f, 0.02f };
  for (gsize i = 0; i < G_N_ELEMENTS (perturbs); i++)
    {
      g_autoptr (HnHierModel) m = model_for (V, 32, 7, perturbs[i]);
      g_autoptr (GError) error = NULL;
      HnVkMemoryStats before, after;
      hn_vk_context_get_memory_stats (ctx, &before);
      g_autoptr (HnHierVkRunner) r = hn_hier_vk_runner_new (m, ctx, &error);
      g_assert_no_error (error);
      /* the memory estimate's figure is what the runner allocates */
      hn_vk_context_get_memory_stats (ctx, &after);
      guint64 est = 0;
      g_assert_true (hn_hier_vk_device_bytes (m, &est, &error));
      guint64 got = after.allocated_bytes - before.allocated_bytes;
      g_test_message ("Vulkan runner: estimate %" G_GUINT64_FORMAT " bytes, allocated %" G_GUINT64_FORMAT, est, got);
      g_assert_cmpfloat (fabs ((double) est - (double) got), <=, 0.2 * (double) got);
      float worst = compare_runtimes (m, r, ids);
      g_test_message ("Vulkan vs CPU runtime (perturb %.2f): max |logit diff| over 256 tokens %.3g", perturbs[i], worst);
      g_assert_cmpfloat (worst, <, 1e-4);
    }
}

static void
test_limits (void)
{
  /* geometries past the shaders' limits fail closed, naming the setting */
  HnHierConfig c;
  hn_hier_config_init_defaults (&c, 40, 256);
  c.rwkv_head_size = 128;
  hn_hier_config_derive (&c);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierModel) m = hn_hier_model_new (&c, &error);
  hn_hier_config_clear (&c);
  g_assert_no_error (error);
  g_autoptr (HnHierVkRunner) r = hn_hier_vk_runner_new_reference (m, &error);
  g_assert_null (r);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "rwkv_head_size"));
}

int
main (int argc, char **argv)
{
  /* the batched Linear is opt-in (slower on the H200): the rows test runs it */
  g_setenv ("HN_HIER_MV_ROWS", "4", FALSE);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hierarchos-vk/op/matvec", test_op_matvec);
  g_test_add_func ("/hierarchos-vk/op/matvec-rows", test_op_matvec_rows);
  g_test_add_func ("/hierarchos-vk/op/norm", test_op_norm);
  g_test_add_func ("/hierarchos-vk/op/wkv", test_op_wkv);
  g_test_add_func ("/hierarchos-vk/op/ltm", test_op_ltm);
  g_test_add_func ("/hierarchos-vk/op/drift-ew", test_op_drift_ew);
  g_test_add_func ("/hierarchos-vk/program-reference", test_program_reference);
  g_test_add_func ("/hierarchos-vk/parity", test_vulkan_parity);
  g_test_add_func ("/hierarchos-vk/limits", test_limits);
  return g_test_run ();
}
