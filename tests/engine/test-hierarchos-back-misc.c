/* The backward of the Hierarchos NORM, DRIFT and EW ops
 * (engine/models/hierarchos-vk-back-misc.c): each reference against finite
 * differences of the forward reference, and each shader against its
 * reference, over every mode and flag the recorder uses. Two rows each:
 * row 1's predicate word is 0 (or 1 under HN_HIER_PRED_NOT), so that row
 * must be left untouched. */
#include "hier-back-check.h"
#include "test-device.h"

#define NONE HN_HIER_NONE

static HnVkContext *ctx; /* NULL: no Vulkan device, finite differences only */

#define FD_EPS 1e-3f
#define FD_TOL 2e-3f
#define DEV_TOL 1e-5f

/* Sets each row's predicate word so row 0 runs and row 1 is skipped. */
static void
set_pred (HierBackBench *b, guint32 pred)
{
  if (pred == NONE)
    return;
  gboolean neg = (pred & HN_HIER_PRED_NOT) != 0;
  guint32 at = pred & ~HN_HIER_PRED_NOT;
  for (guint32 r = 0; r < b->rows; r++)
    b->wk[(gsize) r * b->rs + at] = (r == 0) != neg ? 1.0f : 0.0f;
}

static void
check (HierBackBench *b, const HnHierOp *op, HnHierBackRefFunc ref, HnHierBackRecordFunc rec, guint32 scratch,
       const HierRange *outs, int n_outs, const HierRange *ins, int n_ins, gboolean fd)
{
  if (fd)
    hier_back_fd_check (b, op, ref, outs, n_outs, ins, n_ins, FD_EPS, FD_TOL);
  if (ctx)
    hier_back_dev_check (ctx, b, op, ref, rec, scratch, DEV_TOL);
}

/* ---- NORM ---- */

/* wk row: x [W], prev [W], y [W], mix [6W], xi, pred, a wk matrix [3W];
 * prm: w, b, c0..c5 [W each], an embedding matrix [4W]. */
static void
norm_case (guint64 seed, guint32 W, guint32 xsrc, gboolean affine, float yclamp, guint32 n_mix, gboolean y,
           guint32 pred_flags, gboolean fd)
{
  guint32 rs = 13 * W + 8, xi = 9 * W, pw = 9 * W + 1;
  HierBackBench *b = hier_back_bench_new (seed, 12 * W, 2, rs);
  guint32 pred = pred_flags == NONE ? NONE : pw | pred_flags;
  set_pred (b, pred);
  /* indexed rows: a different one per batch row */
  for (guint32 r = 0; r < 2; r++)
    b->wk[(gsize) r * rs + xi] = (float) (r + 1);
  guint32 x_off = (xsrc & 2) ? ((xsrc & 1) ? 8 * W : 10 * W) : ((xsrc & 1) ? 9 * W : 0);
  HnHierOp op = { .kind = HN_HIER_OP_NORM, .rows = 2 };
  op.u.norm = (HnHierNormPush) { W, x_off, xsrc, affine ? 0 : NONE, affine ? W : NONE, y ? 2 * W : NONE, 1e-5f, yclamp,
                                 n_mix, W, 3 * W, pred, { 2 * W, 3 * W, 4 * W, 5 * W, 6 * W, 7 * W }, xi, rs, 12 * W };
  HierRange outs[2] = { { 2 * W, W, FALSE }, { 3 * W, n_mix * W, FALSE } };
  HierRange ins[4];
  int n_ins = 0;
  /* x: the whole source matrix for an indexed row (other rows get nothing) */
  ins[n_ins++] = (xsrc & 2) ? (HierRange) { x_off, 3 * W, (xsrc & 1) != 0 } : (HierRange) { x_off, W, (xsrc & 1) != 0 };
  if (affine)
    ins[n_ins++] = (HierRange) { 0, 2 * W, TRUE };
  if (n_mix)
    {
      ins[n_ins++] = (HierRange) { W, W, FALSE };
      ins[n_ins++] = (HierRange) { 2 * W, n_mix * W, TRUE };
    }
  check (b, &op, hn_hier_norm_back_ref, hn_hier_norm_back_record, hn_hier_norm_back_scratch (&op),
         y ? outs : outs + 1, y ? 2 : 1, ins, n_ins, fd);
  hier_back_bench_free (b);
}

static void
test_norm (void)
{
  const guint32 widths[] = { 7, 37, 300, 513 };
  for (gsize i = 0; i < G_N_ELEMENTS (widths); i++)
    {
      guint32 W = widths[i];
      gboolean fd = W < 100;
      /* the embedding LN: wk x, no affine, no clamp (ehat) */
      norm_case (10 + i, W, 0, FALSE, 0, 0, TRUE, NONE, fd);
      /* the ROSA LN of an embedding row, plain and indexed */
      norm_case (20 + i, W, 1, FALSE, 0, 0, TRUE, 0, fd);
      norm_case (30 + i, W, 3, FALSE, 0, 0, TRUE, HN_HIER_PRED_NOT, fd);
      /* an indexed row of a wk matrix */
      norm_case (40 + i, W, 2, TRUE, 0, 0, TRUE, NONE, fd);
      /* the cell's LN1: affine, clamped state, six mixes; LN2: one mix */
      norm_case (50 + i, W, 0, TRUE, 0.7f, 6, TRUE, 0, fd);
      norm_case (60 + i, W, 0, TRUE, 0.7f, 1, TRUE, HN_HIER_PRED_NOT, fd);
      /* mixes only (no y), and the output LN: affine and clamp */
      norm_case (70 + i, W, 1, TRUE, 0, 3, FALSE, 0, fd);
      norm_case (80 + i, W, 0, TRUE, 0.9f, 0, TRUE, NONE, fd);
    }
}

/* ---- DRIFT ---- */

/* wk row: d, delta, ctx, cd, y [n each], flags [4], pred. */
static void
drift_case (guint64 seed, guint32 n, guint32 mode, float dsc, float dnc, gboolean cd, guint32 pred_flags, gboolean fd)
{
  guint32 rs = 5 * n + 8, pw = 5 * n + 4;
  HierBackBench *b = hier_back_bench_new (seed, 4, 2, rs);
  guint32 pred = pred_flags == NONE ? NONE : pw | pred_flags;
  set_pred (b, pred);
  HnHierOp op = { .kind = HN_HIER_OP_DRIFT, .rows = 2 };
  op.u.drift = (HnHierDriftPush) { n, 0, n, 2 * n, cd ? 3 * n : NONE, 4 * n, dsc, dnc, 0.01f, mode, 5 * n, 4, pred,
                                   rs, 4 };
  HierRange outs[2] = { { 4 * n, n, FALSE }, { 3 * n, n, FALSE } };
  HierRange ins[3] = { { 0, n, FALSE }, { 2 * n, n, FALSE }, { n, n, FALSE } };
  int n_ins = 1 + (cd ? 1 : 0);
  if (mode == HN_HIER_DRIFT_REFINE)
    ins[n_ins++] = ins[2];
  check (b, &op, hn_hier_drift_back_ref, hn_hier_drift_back_record, hn_hier_drift_back_scratch (&op), outs,
         cd ? 2 : 1, ins, n_ins, fd);
  hier_back_bench_free (b);
}

static void
test_drift (void)
{
  const guint32 widths[] = { 37, 300, 1000 };
  for (gsize i = 0; i < G_N_ELEMENTS (widths); i++)
    {
      guint32 n = widths[i];
      gboolean fd = n < 100;
      /* the norm clamp active (|d| ~ sqrt(n / 3) > dnc), the element clamp
       * on some elements; the start's clamp must cut the norm (else its
       * second l2clamp sits on its edge) */
      float dnc = 0.3f * sqrtf ((float) n), dsc = 0.7f, dsc0 = 1.2f * dnc / sqrtf ((float) n);
      drift_case (100 + i, n, HN_HIER_DRIFT_START, dsc0, dnc, TRUE, NONE, fd);
      drift_case (110 + i, n, HN_HIER_DRIFT_START, 0.5f, 0, TRUE, 0, fd);
      drift_case (120 + i, n, HN_HIER_DRIFT_REFINE, dsc, dnc, TRUE, 0, fd);
      drift_case (130 + i, n, HN_HIER_DRIFT_REFINE, dsc, 4.0f * dnc, TRUE, HN_HIER_PRED_NOT, fd);
      drift_case (140 + i, n, HN_HIER_DRIFT_FINAL, dsc, dnc, FALSE, NONE, fd);
      drift_case (150 + i, n, HN_HIER_DRIFT_FINAL, 2.0f, dnc, TRUE, 0, fd);
    }
}

/* ---- EW ---- */

/* wk row: a, b, y [n each], s, xi, pred, a wk matrix [3n]; prm: a matrix [4n]. */
static void
ew_case (guint64 seed, guint32 n, guint32 opcode, guint32 asrc, float f0, float clamp, guint32 pred_flags,
         gboolean fd)
{
  guint32 rs = 6 * n + 8, s = 3 * n, xi = 3 * n + 1, pw = 3 * n + 2;
  HierBackBench *b = hier_back_bench_new (seed, 4 * n, 2, rs);
  guint32 pred = pred_flags == NONE ? NONE : pw | pred_flags;
  set_pred (b, pred);
  for (guint32 r = 0; r < 2; r++)
    b->wk[(gsize) r * rs + xi] = (float) (2 - r);
  guint32 a_off = (asrc & 2) ? ((asrc & 1) ? 0 : 3 * n + 8) : ((asrc & 1) ? n : 0);
  HnHierOp op = { .kind = HN_HIER_OP_EW, .rows = 2 };
  op.u.ew = (HnHierEwPush) { n, opcode, a_off, asrc, n, s, 2 * n, f0, clamp, pred, xi, rs, 4 * n };
  HierRange outs[1] = { { 2 * n, n, FALSE } };
  HierRange ins[3];
  int n_ins = 0;
  ins[n_ins++] = (HierRange) { a_off, (asrc & 2) ? 3 * n : n, (asrc & 1) != 0 };
  if (opcode != HN_HIER_EW_COPY)
    ins[n_ins++] = (HierRange) { n, n, FALSE };
  if (opcode == HN_HIER_EW_AXPYS)
    ins[n_ins++] = (HierRange) { s, 1, FALSE };
  check (b, &op, hn_hier_ew_back_ref, hn_hier_ew_back_record, hn_hier_ew_back_scratch (&op), outs, 1, ins, n_ins,
         fd);
  hier_back_bench_free (b);
}

static void
test_ew (void)
{
  const guint32 widths[] = { 37, 300, 700 };
  for (gsize i = 0; i < G_N_ELEMENTS (widths); i++)
    {
      guint32 n = widths[i];
      gboolean fd = n < 100;
      /* copies: the embedding row (plain and indexed), a wk row, a wk matrix row */
      ew_case (200 + i, n, HN_HIER_EW_COPY, 1, 0, 0, NONE, fd);
      ew_case (210 + i, n, HN_HIER_EW_COPY, 3, 0, 0.5f, 0, fd);
      ew_case (220 + i, n, HN_HIER_EW_COPY, 0, 0, 0.5f, HN_HIER_PRED_NOT, fd);
      ew_case (230 + i, n, HN_HIER_EW_COPY, 2, 0, 0, 0, fd);
      /* the sliding context, clamped and not */
      ew_case (240 + i, n, HN_HIER_EW_LERP, 0, 0.375f, 0.6f, NONE, fd);
      ew_case (250 + i, n, HN_HIER_EW_LERP, 1, 0.75f, 0, 0, fd);
      /* the gated residual (ROSA), and clamped from an embedding row */
      ew_case (260 + i, n, HN_HIER_EW_AXPYS, 0, 0, 0, NONE, fd);
      ew_case (270 + i, n, HN_HIER_EW_AXPYS, 3, 0, 0.7f, HN_HIER_PRED_NOT, fd);
    }
}

/* The tape's clamp rule at non-finite inputs: the forward passes them, the
 * backward passes nothing (g * 0). */
static void
test_nonfinite (void)
{
  guint32 n = 5, rs = 6 * n + 8;
  HierBackBench *b = hier_back_bench_new (300, 4 * n, 1, rs);
  b->wk[0] = INFINITY;
  b->wk[1] = NAN;
  b->wk[2] = 0.25f;
  HnHierOp op = { .kind = HN_HIER_OP_EW, .rows = 1 };
  op.u.ew = (HnHierEwPush) { n, HN_HIER_EW_COPY, 0, 0, n, 3 * n, 2 * n, 0, 0.5f, NONE, 0, rs, 4 * n };
  float *gwk = g_new0 (float, rs), *gprm = g_new0 (float, 4 * n);
  for (guint32 i = 0; i < n; i++)
    gwk[2 * n + i] = 1.0f;
  hn_hier_ew_back_ref (&op, b->prm, b->wk, gprm, gwk);
  g_assert_cmpfloat (gwk[0], ==, 0.0f);
  g_assert_cmpfloat (gwk[1], ==, 0.0f);
  g_assert_cmpfloat (gwk[2], ==, 1.0f);
  if (ctx)
    hier_back_dev_check (ctx, b, &op, hn_hier_ew_back_ref, hn_hier_ew_back_record, 0, DEV_TOL);
  g_free (gwk);
  g_free (gprm);
  hier_back_bench_free (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  if (hn_test_have_vulkan ())
    {
      ctx = hn_vk_context_get_default (&error);
      g_assert_no_error (error);
    }
  else
    g_printerr ("the shader checks are skipped; the references are checked\n");
  g_test_add_func ("/hierarchos-back-misc/norm", test_norm);
  g_test_add_func ("/hierarchos-back-misc/drift", test_drift);
  g_test_add_func ("/hierarchos-back-misc/ew", test_ew);
  g_test_add_func ("/hierarchos-back-misc/nonfinite", test_nonfinite);
  int rc = g_test_run ();
  g_clear_pointer (&ctx, hn_vk_context_unref);
  return rc;
}
