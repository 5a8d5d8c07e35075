/* The backward of the Hierarchos NORM, DRIFT and EW ops
 * (engine/hierarchos/hierarchos-vk-back-misc.c): each reference against finite
 * differences of the forward reference, and each shader against its
 * reference, over every mode and flag the recorder uses. Two rows each:
 * row 1's predicate word is 0 (or 1 under HN_HIER_PRED_NOT), so that row
 * must be left untouched. */
#include "hier-back-check.h"
#include "test-device.h"
#include "base/hn-error.h"

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

/* The inference step's in-place forms are refused (the record fails before
 * it touches the command or the buffers). */
static void
test_in_place (void)
{
  g_autoptr (GError) error = NULL;
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  /* the cell's LN1: y (the new tm state) over prev (the old one) */
  op.u.norm = (HnHierNormPush) { 8, 0, 0, NONE, NONE, 8, 1e-5f, 0.7f, 6, 8, 16, NONE, { 0 }, 0, 80, 0 };
  g_assert_false (hn_hier_norm_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "NORM backward"));
  g_clear_error (&error);
  /* more mixes than coefficients */
  op.u.norm.y_off = 72;
  op.u.norm.n_mix = 7;
  g_assert_false (hn_hier_norm_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "7 mixes"));
  g_clear_error (&error);
  /* the refinement: d updated in place */
  op = (HnHierOp) { .kind = HN_HIER_OP_DRIFT };
  op.u.drift = (HnHierDriftPush) { 8, 0, 8, 16, 24, 0, 0.5f, 1.0f, 0.01f, HN_HIER_DRIFT_REFINE, 40, 4, 41, 48, 0 };
  g_assert_false (hn_hier_drift_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* a flag word over the predicate */
  op.u.drift.y_off = 32;
  op.u.drift.flag = 41;
  g_assert_false (hn_hier_drift_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* y over b */
  op = (HnHierOp) { .kind = HN_HIER_OP_EW };
  op.u.ew = (HnHierEwPush) { 8, HN_HIER_EW_AXPYS, 0, 0, 8, 16, 4, 0, 0, NONE, 0, 24, 0 };
  g_assert_false (hn_hier_ew_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* ---- against the CPU tape ----
 *
 * The same op built from the tape's nodes (hierarchos-runtime.c's way),
 * L = sum g * out run backward, against the reference on one row. Finite
 * differences cannot probe a clamp's edge: here a clamp bound is set to
 * one input's exact value, where the tape passes the gradient. */

typedef struct {
  HnHTape *t;
  HnVar loss;
  GPtrArray *grads; /* the leaves' gradients, freed with the rig */
} TapeRig;

static void
rig_init (TapeRig *g)
{
  g->t = hn_htape_new ();
  g->t->record_grads = TRUE;
  g->loss = -1;
  g->grads = g_ptr_array_new_with_free_func (g_free);
}

static void
rig_clear (TapeRig *g)
{
  hn_htape_free (g->t);
  g_ptr_array_unref (g->grads);
}

static HnVar
rig_leaf (TapeRig *g, float *val, int n)
{
  float *gr = g_new0 (float, n);
  g_ptr_array_add (g->grads, gr);
  return hn_htape_leaf (g->t, val, gr, n);
}

static float *
rig_grad (TapeRig *g, HnVar v)
{
  return hn_htape_node (g->t, v)->grad;
}

/* loss += sum g * out, with g random, also placed in gwk at off */
static void
rig_out (TapeRig *g, HierBackBench *b, float *gwk, HnVar out, guint32 off, int n)
{
  float *gv = gwk + off;
  for (int i = 0; i < n; i++)
    gv[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  HnVar l = hn_htape_sum (g->t, hn_htape_mul (g->t, out, hn_htape_const (g->t, gv, n)));
  g->loss = g->loss < 0 ? l : hn_htape_add (g->t, g->loss, l);
}

static void
rig_compare (const float *want, const float *got, int n, const char *what)
{
  for (int i = 0; i < n; i++)
    if (fabsf (got[i] - want[i]) > 1e-5f * (1.0f + fabsf (want[i])))
      g_error ("%s[%d]: reference %.8g, tape %.8g", what, i, got[i], want[i]);
}

static void
test_tape_norm (void)
{
  for (guint32 n_mix = 0; n_mix <= 6; n_mix += 3)
    {
      guint32 W = 37, rs = 13 * W + 8;
      HierBackBench *b = hier_back_bench_new (400 + n_mix, 12 * W, 1, rs);
      TapeRig g;
      rig_init (&g);
      float *gwk = g_new0 (float, rs), *gprm = g_new0 (float, 12 * W);
      HnVar x = rig_leaf (&g, b->wk, W), w = rig_leaf (&g, b->prm, W), bb = rig_leaf (&g, b->prm + W, W);
      HnVar prev = rig_leaf (&g, b->wk + W, W), c[6];
      HnVar xn = hn_htape_ln (g.t, x, w, bb, 1e-5f);
      float yclamp = fabsf (hn_htape_val (g.t, xn)[3]); /* element 3 on the edge */
      rig_out (&g, b, gwk, hn_htape_clamp (g.t, xn, yclamp), 2 * W, W);
      for (guint32 j = 0; j < n_mix; j++)
        {
          c[j] = rig_leaf (&g, b->prm + (2 + j) * W, W);
          rig_out (&g, b, gwk, hn_htape_mix (g.t, xn, prev, c[j]), 3 * W + j * W, W);
        }
      hn_htape_backward (g.t, g.loss, 1.0f);
      HnHierOp op = { .kind = HN_HIER_OP_NORM };
      op.u.norm = (HnHierNormPush) { W, 0, 0, 0, W, 2 * W, 1e-5f, yclamp, n_mix, W, 3 * W, NONE,
                                     { 2 * W, 3 * W, 4 * W, 5 * W, 6 * W, 7 * W }, 0, rs, 12 * W };
      hn_hier_norm_back_ref (&op, b->prm, b->wk, gprm, gwk);
      rig_compare (rig_grad (&g, x), gwk, W, "norm x");
      rig_compare (rig_grad (&g, w), gprm, W, "norm w");
      rig_compare (rig_grad (&g, bb), gprm + W, W, "norm b");
      if (n_mix)
        rig_compare (rig_grad (&g, prev), gwk + W, W, "norm prev");
      for (guint32 j = 0; j < n_mix; j++)
        rig_compare (rig_grad (&g, c[j]), gprm + (2 + j) * W, W, "norm c");
      rig_clear (&g);
      g_free (gwk);
      g_free (gprm);
      hier_back_bench_free (b);
    }
}

static void
test_tape_drift (void)
{
  for (guint32 mode = HN_HIER_DRIFT_START; mode <= HN_HIER_DRIFT_FINAL; mode++)
    {
      guint32 n = 37, rs = 5 * n + 8;
      HierBackBench *b = hier_back_bench_new (410 + mode, 4, 1, rs);
      TapeRig g;
      rig_init (&g);
      float *gwk = g_new0 (float, rs), gprm[4] = { 0 };
      float dnc = 0.3f * sqrtf ((float) n), dsc;
      HnVar d = rig_leaf (&g, b->wk, n), delta = rig_leaf (&g, b->wk + n, n), ctx = rig_leaf (&g, b->wk + 2 * n, n);
      HnVar x = d;
      if (mode == HN_HIER_DRIFT_START)
        x = hn_htape_l2clamp (g.t, d, dnc);
      else if (mode == HN_HIER_DRIFT_REFINE)
        x = hn_htape_add (g.t, d, delta);
      /* the start's clamp input comes from an l2clamp whose norm the tape
       * sums in double: no exact edge there, but a clamp that cuts */
      dsc = mode == HN_HIER_DRIFT_START ? 1.2f * dnc / sqrtf ((float) n) : fabsf (hn_htape_val (g.t, x)[3]);
      HnVar v = hn_htape_l2clamp (g.t, hn_htape_clamp (g.t, x, dsc), dnc);
      rig_out (&g, b, gwk, v, 4 * n, n);
      rig_out (&g, b, gwk, hn_htape_add (g.t, ctx, v), 3 * n, n);
      hn_htape_backward (g.t, g.loss, 1.0f);
      HnHierOp op = { .kind = HN_HIER_OP_DRIFT };
      op.u.drift = (HnHierDriftPush) { n, 0, n, 2 * n, 3 * n, 4 * n, dsc, dnc, 0.01f, mode, 5 * n, 4, NONE, rs, 4 };
      hn_hier_drift_back_ref (&op, b->prm, b->wk, gprm, gwk);
      rig_compare (rig_grad (&g, d), gwk, n, "drift d");
      rig_compare (rig_grad (&g, ctx), gwk + 2 * n, n, "drift ctx");
      if (mode == HN_HIER_DRIFT_REFINE)
        rig_compare (rig_grad (&g, delta), gwk + n, n, "drift delta");
      rig_clear (&g);
      g_free (gwk);
      hier_back_bench_free (b);
    }
}

static void
test_tape_ew (void)
{
  for (guint32 opcode = HN_HIER_EW_COPY; opcode <= HN_HIER_EW_AXPYS; opcode++)
    {
      guint32 n = 37, rs = 6 * n + 8;
      HierBackBench *b = hier_back_bench_new (420 + opcode, 4 * n, 1, rs);
      TapeRig g;
      rig_init (&g);
      float *gwk = g_new0 (float, rs), *gprm = g_new0 (float, 4 * n), f0 = 0.375f;
      /* a from the parameters (an embedding row), b and s from wk */
      HnVar a = rig_leaf (&g, b->prm + n, n), bv = rig_leaf (&g, b->wk + n, n), s = rig_leaf (&g, b->wk + 3 * n, 1);
      HnVar y = a;
      if (opcode == HN_HIER_EW_LERP)
        y = hn_htape_add (g.t, a, hn_htape_scale (g.t, hn_htape_sub (g.t, bv, a), f0));
      else if (opcode == HN_HIER_EW_AXPYS)
        y = hn_htape_add (g.t, a, hn_htape_muls (g.t, bv, s));
      float clamp = fabsf (hn_htape_val (g.t, y)[3]);
      rig_out (&g, b, gwk, hn_htape_clamp (g.t, y, clamp), 2 * n, n);
      hn_htape_backward (g.t, g.loss, 1.0f);
      HnHierOp op = { .kind = HN_HIER_OP_EW };
      op.u.ew = (HnHierEwPush) { n, opcode, n, 1, n, 3 * n, 2 * n, f0, clamp, NONE, 0, rs, 4 * n };
      hn_hier_ew_back_ref (&op, b->prm, b->wk, gprm, gwk);
      rig_compare (rig_grad (&g, a), gprm + n, n, "ew a");
      if (opcode != HN_HIER_EW_COPY)
        rig_compare (rig_grad (&g, bv), gwk + n, n, "ew b");
      if (opcode == HN_HIER_EW_AXPYS)
        rig_compare (rig_grad (&g, s), gwk + 3 * n, 1, "ew s");
      rig_clear (&g);
      g_free (gwk);
      g_free (gprm);
      hier_back_bench_free (b);
    }
}

/* ---- timing (-m perf) ----
 *
 * Median device time of each backward at the H200 model's sizes (width
 * 1024, 8 batch rows), from the dispatch timestamps. */

/* The forward, timed beside its backward. */
static gboolean
record_forward (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm, HnVkBuffer *gwk,
                GError **error)
{
  (void) gprm;
  (void) gwk;
  return hn_hier_op_record (cmd, op, prm, wk, error);
}

static double
time_rec (const HnHierOp *op, HnHierBackRecordFunc rec, gsize n_prm, guint32 rs, guint32 rows)
{
  g_autoptr (GError) error = NULL;
  HierBackBench *b = hier_back_bench_new (500, n_prm, rows, rs);
  gsize n_gp = n_prm * rows;
  g_autofree float *zeros = g_new0 (float, MAX (n_gp, b->n_wk));
  g_autoptr (HnVkBuffer) bp = hn_vk_buffer_new (ctx, n_prm * 4, "perf prm", &error);
  g_autoptr (HnVkBuffer) bw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf wk", &error);
  g_autoptr (HnVkBuffer) bgp = hn_vk_buffer_new (ctx, n_gp * 4, "perf gprm", &error);
  g_autoptr (HnVkBuffer) bgw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf gwk", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (bp, 0, b->prm, n_prm * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bw, 0, b->wk, b->n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgp, 0, zeros, n_gp * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgw, 0, zeros, b->n_wk * 4, &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (rec (cmd, op, bp, bw, bgp, bgw, &error) && hn_cmd_submit_wait (cmd, &error)); /* warm up */
  hn_cmd_set_profiling (cmd, TRUE);
  enum { RUNS = 21 };
  for (int i = 0; i < RUNS; i++)
    g_assert_true (rec (cmd, op, bp, bw, bgp, bgw, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  guint n = 0;
  const HnCmdProfileEntry *e = hn_cmd_get_profile (cmd, &n);
  double us[RUNS];
  g_assert_cmpuint (n, ==, RUNS);
  for (int i = 0; i < RUNS; i++)
    us[i] = e[i].microseconds;
  for (int i = 1; i < RUNS; i++)
    for (int j = i; j > 0 && us[j] < us[j - 1]; j--)
      {
        double t = us[j];
        us[j] = us[j - 1];
        us[j - 1] = t;
      }
  hier_back_bench_free (b);
  return us[RUNS / 2];
}

static void
time_back (const char *name, const HnHierOp *op, HnHierBackRecordFunc rec, gsize n_prm, guint32 rs, guint32 rows)
{
  double back = time_rec (op, rec, n_prm, rs, rows), fwd = time_rec (op, record_forward, n_prm, rs, rows);
  g_test_minimized_result (back, "%s: backward %.1f us, forward %.1f us (%u rows)", name, back, fwd, rows);
}

static void
test_perf (void)
{
  if (!ctx)
    {
      g_test_skip ("no Vulkan device");
      return;
    }
  guint32 W = 1024, R = 8, rs = 13 * W + 8;
  HnHierOp op = { .kind = HN_HIER_OP_NORM, .rows = R };
  op.u.norm = (HnHierNormPush) { W, 0, 0, 0, W, 2 * W, 1e-5f, 0.7f, 6, W, 3 * W, NONE,
                                 { 2 * W, 3 * W, 4 * W, 5 * W, 6 * W, 7 * W }, 0, rs, 12 * W };
  time_back ("norm (LN1, six mixes)", &op, hn_hier_norm_back_record, 12 * W, rs, R);
  op.u.norm.n_mix = 1;
  time_back ("norm (LN2, one mix)", &op, hn_hier_norm_back_record, 12 * W, rs, R);
  rs = 5 * W + 8;
  op = (HnHierOp) { .kind = HN_HIER_OP_DRIFT, .rows = R };
  op.u.drift = (HnHierDriftPush) { W, 0, W, 2 * W, 3 * W, 4 * W, 0.3f, 10.0f, 0.01f, HN_HIER_DRIFT_START, 5 * W, 4,
                                   NONE, rs, 4 };
  time_back ("drift (start)", &op, hn_hier_drift_back_record, 4, rs, R);
  op.u.drift.mode = HN_HIER_DRIFT_REFINE;
  time_back ("drift (refine)", &op, hn_hier_drift_back_record, 4, rs, R);
  /* the worker's state copy (4W + W * 64 words) and the gated residual */
  guint32 n = 4 * W + W * 64;
  rs = 2 * n + 8;
  op = (HnHierOp) { .kind = HN_HIER_OP_EW, .rows = R };
  op.u.ew = (HnHierEwPush) { n, HN_HIER_EW_COPY, 0, 0, NONE, NONE, n, 0, 0, NONE, 0, rs, 4 };
  time_back ("ew (copy, 69632)", &op, hn_hier_ew_back_record, 4, rs, R);
  rs = 6 * W + 8;
  op.u.ew = (HnHierEwPush) { W, HN_HIER_EW_AXPYS, 0, 0, W, 3 * W, 2 * W, 0, 0, NONE, 0, rs, 4 };
  time_back ("ew (axpys)", &op, hn_hier_ew_back_record, 4, rs, R);
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
  g_test_add_func ("/hierarchos-back-misc/in-place", test_in_place);
  g_test_add_func ("/hierarchos-back-misc/tape/norm", test_tape_norm);
  g_test_add_func ("/hierarchos-back-misc/tape/drift", test_tape_drift);
  g_test_add_func ("/hierarchos-back-misc/tape/ew", test_tape_ew);
  if (g_test_perf ())
    g_test_add_func ("/hierarchos-back-misc/perf", test_perf);
  int rc = g_test_run ();
  g_clear_pointer (&ctx, hn_vk_context_unref);
  return rc;
}
