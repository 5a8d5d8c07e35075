/* The backward of the Hierarchos WKV and LTM ops (hierarchos-vk-back-wkv.c):
 * the CPU references against central differences of the forward references
 * and against the CPU tape's own backward of the same composition (always),
 * and the shaders against the references (when a Vulkan device opens). Two
 * batch rows each, one of them skipped by its predicate. */
#include "hier-back-check.h"
#include "base/hn-error.h"

#define NONE HN_HIER_NONE

static HnVkContext *ctx; /* NULL: no device, the shader checks are skipped */

/* Row 0 runs and row 1 is skipped under `pred` (a word at 0 of each row);
 * NONE runs both. */
static void
set_pred (HierBackBench *b, guint32 pred)
{
  gboolean neg = pred != NONE && (pred & HN_HIER_PRED_NOT);
  for (guint32 r = 0; r < b->rows; r++)
    b->wk[(gsize) r * b->rs] = (r == 0) != neg ? 1.0f : 0.0f;
}

/* ---- WKV ---- */

/* One row: [pred, pad][r k v a g w: W each][S: W N][S out][v_first][t] */
typedef struct {
  guint32 N, heads, W, r, k, v, a, g, w, S, so, vf, t, rs;
} WkvLayout;

static WkvLayout
wkv_layout (guint32 N, guint32 heads)
{
  WkvLayout l = { N, heads, N * heads };
  guint32 at = 2;
  guint32 *vec[] = { &l.r, &l.k, &l.v, &l.a, &l.g, &l.w };
  for (gsize i = 0; i < G_N_ELEMENTS (vec); i++, at += l.W)
    *vec[i] = at;
  l.S = at;
  l.so = l.S + l.W * N;
  l.vf = l.so + l.W * N;
  l.t = l.vf + l.W;
  l.rs = l.t + l.W + 3;
  return l;
}

/* prm: [pad 3][k_k][k_a][r_k][ln_x.weight][ln_x.bias][pad 2], one gradient
 * slice of that size per row */
static guint32
wkv_n_prm (const WkvLayout *l)
{
  return 3 + 5 * l->W + 2;
}

static HnHierOp
wkv_op (const WkvLayout *l, guint32 rows, float sc, guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_WKV, .groups = l->heads, .rows = rows };
  guint32 W = l->W;
  op.u.wkv = (HnHierWkvPush) { l->N, l->r, l->k, l->v, l->a, l->g, l->w, 3, 3 + W, 3 + 2 * W, 3 + 3 * W, 3 + 4 * W,
                               l->S, l->vf, l->t, sc, 64e-5f, pred, l->so, l->rs, wkv_n_prm (l) };
  return op;
}

static HierBackBench *
wkv_bench (guint64 seed, const WkvLayout *l, guint32 rows)
{
  HierBackBench *b = hier_back_bench_new (seed, wkv_n_prm (l), rows, l->rs);
  /* w as the decay projection leaves it: decays well inside (0, 1) */
  for (guint32 r = 0; r < rows; r++)
    for (guint32 i = 0; i < l->W; i++)
      b->wk[(gsize) r * l->rs + l->w + i] = hier_back_urand (&b->rng, -3.0f, 0.5f);
  return b;
}

/* A state clamp that acts on some of row 0's S' and v but has none of
 * them within `margin` of its edge (finite differences must not cross it). */
static float
wkv_pick_clamp (HierBackBench *b, const HnHierOp *op, const WkvLayout *l, float margin)
{
  HnHierOp big = *op;
  big.u.wkv.sc = 1e30f;
  float *w = g_memdup2 (b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (&big, b->prm, w);
  float found = 0;
  for (float sc = 0.2f; sc < 0.95f && !found; sc += 0.0037f)
    {
      guint near = 0, s_out = 0, v_out = 0;
      for (guint32 i = 0; i < l->W * l->N; i++)
        {
          near += fabsf (fabsf (w[l->so + i]) - sc) <= margin;
          s_out += fabsf (w[l->so + i]) > sc;
        }
      for (guint32 i = 0; i < l->W; i++)
        {
          near += fabsf (fabsf (w[l->v + i]) - sc) <= margin;
          v_out += fabsf (w[l->v + i]) > sc;
        }
      if (!near && s_out && v_out)
        found = sc;
    }
  g_free (w);
  if (!found)
    g_error ("no state clamp away from the values");
  return found;
}

static void
wkv_fd (HierBackBench *b, const HnHierOp *op, const WkvLayout *l, guint32 s_rows)
{
  guint32 W = l->W;
  const HierRange outs[] = { { l->so, W * l->N, FALSE }, { l->vf, W, FALSE }, { l->t, W, FALSE } };
  /* the state: the first s_rows rows of every head's N x N block */
  HierRange ins[6 + 5 + HN_HIER_VK_MAX_HEAD];
  int n = 0;
  guint32 vec[] = { l->r, l->k, l->v, l->a, l->g, l->w };
  for (gsize i = 0; i < G_N_ELEMENTS (vec); i++)
    ins[n++] = (HierRange) { vec[i], W, FALSE };
  for (guint32 p = 0; p < 5; p++)
    ins[n++] = (HierRange) { 3 + p * W, W, TRUE };
  for (guint32 h = 0; h < l->heads; h++)
    ins[n++] = (HierRange) { l->S + h * l->N * l->N, s_rows * l->N, FALSE };
  hn_hier_op_ref (op, b->prm, b->wk);
  hier_back_fd_check (b, op, hn_hier_wkv_back_ref, outs, G_N_ELEMENTS (outs), ins, n, 3e-3f, 1e-3f);
}

static void
wkv_dev (HierBackBench *b, const HnHierOp *op)
{
  if (ctx)
    hier_back_dev_check (ctx, b, op, hn_hier_wkv_back_ref, hn_hier_wkv_back_record, 0, 2e-5f);
}

static void
test_wkv_shapes (void)
{
  /* odd head sizes and counts, one head of the largest size */
  const guint32 shapes[][3] = { { 5, 3, 5 }, { 8, 2, 8 }, { 1, 4, 1 }, { 64, 1, 2 } };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      WkvLayout l = wkv_layout (shapes[s][0], shapes[s][1]);
      HierBackBench *b = wkv_bench (10 + s, &l, 2);
      HnHierOp op = wkv_op (&l, 2, 1e4f, NONE);
      wkv_fd (b, &op, &l, shapes[s][2]);
      wkv_dev (b, &op);
      hier_back_bench_free (b);
    }
}

static void
test_wkv_clamp_pred (void)
{
  /* the state clamp acting on part of S' and v, under both predicate
   * senses: row 1 is skipped and gets nothing */
  const guint32 preds[] = { 0, HN_HIER_PRED_NOT };
  for (gsize k = 0; k < G_N_ELEMENTS (preds); k++)
    {
      WkvLayout l = wkv_layout (7, 2);
      HierBackBench *b = wkv_bench (20 + k, &l, 2);
      set_pred (b, preds[k]);
      HnHierOp op = wkv_op (&l, 2, 0, preds[k]);
      op.u.wkv.sc = wkv_pick_clamp (b, &op, &l, 2e-2f);
      wkv_fd (b, &op, &l, 7);
      wkv_dev (b, &op);

      /* the skipped row's gradients stay as they were, bit for bit */
      float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * 2);
      for (gsize i = 0; i < b->n_wk; i++)
        gwk[i] = 1.0f;
      hn_hier_wkv_back_ref (&op, b->prm, b->wk, gprm, gwk);
      for (guint32 i = 0; i < l.rs; i++)
        g_assert_cmpfloat (gwk[l.rs + i], ==, 1.0f);
      for (gsize i = 0; i < b->n_prm; i++)
        g_assert_cmpfloat (gprm[b->n_prm + i], ==, 0.0f);
      g_free (gwk);
      g_free (gprm);
      hier_back_bench_free (b);
    }
}

static void
test_wkv_edges (void)
{
  WkvLayout l = wkv_layout (6, 3);
  HierBackBench *b = wkv_bench (30, &l, 2);
  /* w past its clamp [-60, 30] on both sides: no decay gradient there */
  b->wk[l.w + 1] = 35.0f;
  b->wk[l.w + 8] = -70.0f;
  b->wk[l.rs + l.w + 4] = 31.0f;
  HnHierOp op = wkv_op (&l, 2, 1e4f, NONE);
  wkv_fd (b, &op, &l, 6);
  wkv_dev (b, &op);
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * 2);
  for (guint32 i = 0; i < l.W; i++)
    gwk[l.t + i] = 1.0f;
  hn_hier_wkv_back_ref (&op, b->prm, b->wk, gprm, gwk);
  g_assert_cmpfloat (gwk[l.w + 1], ==, 0.0f);
  g_assert_cmpfloat (gwk[l.w + 8], ==, 0.0f);
  g_assert_cmpfloat (gwk[l.w + 2], !=, 0.0f);

  /* a head whose k k_k is 0 (the L2 norm's 1e-12 floor) and a state with
   * an infinity (NaN gradients where the tape has them): shader against
   * the reference only, finite differences mean nothing there */
  for (guint32 i = 0; i < l.N; i++)
    b->wk[l.k + l.N + i] = 0.0f;
  b->wk[l.rs + l.S + 2 * l.N * l.N + 3] = INFINITY;
  wkv_dev (b, &op);
  g_free (gwk);
  g_free (gprm);
  hier_back_bench_free (b);
}

/* Both gradients agree (rounding apart), NaN where the other is NaN. */
static void
assert_close (const char *what, guint32 i, float got, float want, float tol)
{
  if (isnan (got) != isnan (want) || (!isnan (want) && fabsf (got - want) > tol * (1.0f + fabsf (want))))
    g_error ("%s[%u]: backward %.8g, tape %.8g", what, i, got, want);
}

/* The tape's own composition of the op (hierarchos-runtime.c cell_step),
 * differentiated by the tape, against the reference on one row: the same
 * rules, so they agree to rounding, at the clamps' edges and with
 * non-finite values too. gso_inf puts an infinity into the gradient of a
 * clamped state element (the tape's 0 * inf = NaN must come out). */
static void
wkv_tape_check (HierBackBench *b, const HnHierOp *op, const WkvLayout *l, gboolean gso_inf)
{
  const HnHierWkvPush *p = &op->u.wkv;
  guint32 W = l->W, N = l->N, SN = W * N;
  int heads = (int) l->heads;
  HnHTape *t = hn_htape_new ();
  t->record_grads = TRUE;
  float *tg = g_new0 (float, b->n_wk), *tgp = g_new0 (float, b->n_prm);
#define WK(off, n) hn_htape_leaf (t, b->wk + (off), tg + (off), (int) (n))
#define PRM(off) hn_htape_leaf (t, b->prm + (off), tgp + (off), (int) W)
  HnVar r = WK (p->r_off, W), k = WK (p->k_off, W), v = WK (p->v_off, W), a = WK (p->a_off, W);
  HnVar g = WK (p->g_off, W), w = WK (p->w_off, W), S = WK (p->s_off, SN);
  HnVar kkp = PRM (p->kk_p), ka = PRM (p->ka_p), rk = PRM (p->rk_p), lnw = PRM (p->lnw_p), lnb = PRM (p->lnb_p);
#undef WK
#undef PRM
  HnVar kk = hn_htape_headnorm (t, hn_htape_mul (t, k, kkp), heads);
  HnVar k2 = hn_htape_mul (t, k, hn_htape_addc (t, hn_htape_mul (t, hn_htape_addc (t, a, -1.0f), ka), 1.0f));
  HnVar S2 = hn_htape_wkv (t, S, w, k2, v, kk, a, heads, (int) N);
  HnVar y = hn_htape_wkvread (t, S2, r, heads, (int) N);
  HnVar tt = hn_htape_gn (t, y, lnw, lnb, heads, p->eps);
  tt = hn_htape_mul (t, hn_htape_bonus (t, tt, r, k2, rk, v, heads), g);
  HnVar vf = hn_htape_clamp (t, v, p->sc), so = hn_htape_clamp (t, S2, p->sc);

  /* the forward agrees with the tape's */
  float *fw = g_memdup2 (b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (op, b->prm, fw);
  const struct { HnVar node; guint32 off, n; } outs[] = { { tt, p->t_off, W }, { vf, p->vf_off, W }, { so, p->so_off, SN } };
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm);
  guint32 clamped = 0;
  for (gsize o = 0; o < G_N_ELEMENTS (outs); o++)
    for (guint32 i = 0; i < outs[o].n; i++)
      {
        assert_close ("forward", i, fw[outs[o].off + i], hn_htape_val (t, outs[o].node)[i], 1e-6f);
        float gi = hier_back_urand (&b->rng, -1.0f, 1.0f);
        if (gso_inf && outs[o].node == so && !clamped && fabsf (hn_htape_val (t, S2)[i]) > p->sc)
          gi = INFINITY, clamped++;
        gwk[outs[o].off + i] = gi;
        hn_htape_node (t, outs[o].node)->grad[i] = gi;
      }
  g_assert_true (!gso_inf || clamped);
  hn_htape_sweep (t);
  hn_hier_wkv_back_ref (op, b->prm, b->wk, gprm, gwk);
  const guint32 wins[][2] = { { p->r_off, W }, { p->k_off, W }, { p->v_off, W }, { p->a_off, W },
                              { p->g_off, W }, { p->w_off, W }, { p->s_off, SN } };
  for (gsize q = 0; q < G_N_ELEMENTS (wins); q++)
    for (guint32 i = 0; i < wins[q][1]; i++)
      assert_close ("wk input", wins[q][0] + i, gwk[wins[q][0] + i], tg[wins[q][0] + i], 1e-5f);
  for (gsize i = 0; i < b->n_prm; i++)
    assert_close ("prm", (guint32) i, gprm[i], tgp[i], 1e-5f);
  hn_htape_free (t);
  g_free (fw);
  g_free (tg);
  g_free (tgp);
  g_free (gwk);
  g_free (gprm);
}

static void
test_wkv_tape (void)
{
  const guint32 shapes[][2] = { { 5, 3 }, { 64, 2 } };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      WkvLayout l = wkv_layout (shapes[s][0], shapes[s][1]);
      HierBackBench *b = wkv_bench (50 + s, &l, 1);
      HnHierOp op = wkv_op (&l, 1, 0.8f, NONE);
      guint32 N = l.N;
      float *wk = b->wk;
      /* v on the clamp's edges (HT_CLAMP passes them) and past it */
      wk[l.v] = 0.8f;
      wk[l.v + 1] = -0.8f;
      wk[l.v + 2] = 0.9f;
      /* w on its clamp's edges [-60, 30] (gradient) and infinite (none) */
      wk[l.w] = 30.0f;
      wk[l.w + 1] = -60.0f;
      wk[l.w + N] = INFINITY;
      /* column 1 of head 1: a = 0, k_a = 1 (k2 = 0) and w = -inf (decay
       * exactly 1), so S' = S there: rows 0 and 1 exactly on the edges */
      wk[l.a + N + 1] = 0.0f;
      b->prm[op.u.wkv.ka_p + N + 1] = 1.0f;
      wk[l.w + N + 1] = -INFINITY;
      wk[l.S + N * N + 1] = 0.8f;
      wk[l.S + N * N + N + 1] = -0.8f;
      wkv_tape_check (b, &op, &l, FALSE);
      wkv_tape_check (b, &op, &l, TRUE);
      /* the w gradient at -60 is tiny but there */
      float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm);
      for (guint32 i = 0; i < l.W; i++)
        gwk[l.t + i] = 1.0f;
      hn_hier_wkv_back_ref (&op, b->prm, b->wk, gprm, gwk);
      g_assert_cmpfloat (gwk[l.w + 1], !=, 0.0f);
      g_assert_cmpfloat (gwk[l.w + N], ==, 0.0f);
      g_free (gwk);
      g_free (gprm);
      wkv_dev (b, &op);
      hier_back_bench_free (b);
    }
}

/* ---- LTM ---- */

/* One row: [pred, pad][q: K][gate][fast: S Vd][y: topk Vd][picks: topk];
 * prm: [pad 3][keys: S K][vals: S Vd][pad 2] (= ps). */
static HnHierOp
ltm_op (guint32 S, guint32 K, guint32 Vd, guint32 topk, guint32 rows, guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_LTM, .rows = rows };
  guint32 q = 2, gate = q + K, fast = gate + 1, y = fast + S * Vd, idx = y + topk * Vd;
  op.u.ltm = (HnHierLtmPush) { S, K, Vd, topk, 3, 3 + S * K, fast, q, gate, y, idx, pred, idx + topk + 1,
                               3 + S * K + S * Vd + 2 };
  return op;
}

/* The tape's gather of ltm.vals rows (plus the fast values) times the gate
 * (hierarchos-runtime.c forward_step, step 4) against the reference. */
static void
ltm_tape_check (HierBackBench *b, const HnHierOp *op)
{
  const HnHierLtmPush *p = &op->u.ltm;
  HnHTape *t = hn_htape_new ();
  t->record_grads = TRUE;
  float *tg = g_new0 (float, b->n_wk), *tgp = g_new0 (float, b->n_prm);
  int idx[HN_HIER_VK_MAX_TOPK], n_idx = 0;
  while (n_idx < (int) p->topk && b->wk[p->idx_off + n_idx] >= 0)
    {
      idx[n_idx] = (int) b->wk[p->idx_off + n_idx];
      n_idx++;
    }
  g_assert_cmpint (n_idx, ==, MIN (p->S, p->topk));
  HnVar vals = hn_htape_leaf (t, b->prm + p->vals_p, tgp + p->vals_p, (int) (p->S * p->Vd));
  HnVar gate = hn_htape_leaf (t, b->wk + p->gate_off, tg + p->gate_off, 1);
  HnVar y = hn_htape_gather (t, vals, b->wk + p->fast_off, idx, n_idx, (int) p->topk, (int) p->Vd);
  y = hn_htape_muls (t, y, gate);
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm);
  for (guint32 i = 0; i < p->topk * p->Vd; i++)
    {
      assert_close ("forward", i, b->wk[p->y_off + i], hn_htape_val (t, y)[i], 1e-6f);
      gwk[p->y_off + i] = hn_htape_node (t, y)->grad[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
    }
  hn_htape_sweep (t);
  hn_hier_ltm_back_ref (op, b->prm, b->wk, gprm, gwk);
  assert_close ("gate", 0, gwk[p->gate_off], tg[p->gate_off], 1e-5f);
  for (gsize i = 0; i < b->n_prm; i++)
    assert_close ("prm", (guint32) i, gprm[i], tgp[i], 1e-5f);
  hn_htape_free (t);
  g_free (tg);
  g_free (tgp);
  g_free (gwk);
  g_free (gprm);
}

static void
test_ltm (void)
{
  /* fewer slots than top-k; top-k Vd past one workgroup's 256 threads */
  const guint32 shapes[][4] = { { 13, 5, 3, 4 }, { 3, 4, 6, 5 }, { 40, 7, 37, 9 } };
  const guint32 preds[] = { NONE, 0, HN_HIER_PRED_NOT };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    for (gsize k = 0; k < G_N_ELEMENTS (preds); k++)
      {
        guint32 S = shapes[s][0], K = shapes[s][1], Vd = shapes[s][2], topk = shapes[s][3];
        HnHierOp op = ltm_op (S, K, Vd, topk, 2, preds[k]);
        const HnHierLtmPush *p = &op.u.ltm;
        HierBackBench *b = hier_back_bench_new (40 + 3 * s + k, p->ps, 2, p->rs);
        set_pred (b, preds[k]);
        /* the forward writes the picks the backward reads */
        hn_hier_op_ref (&op, b->prm, b->wk);
        const HierRange outs[] = { { p->y_off, topk * Vd, FALSE } };
        const HierRange ins[] = { { p->vals_p, S * Vd, TRUE }, { p->gate_off, 1, FALSE } };
        hier_back_fd_check (b, &op, hn_hier_ltm_back_ref, outs, 1, ins, 2, 1e-3f, 1e-3f);
        if (preds[k] == NONE)
          {
            HierBackBench one = *b;
            one.rows = 1;
            ltm_tape_check (&one, &op);
          }
        if (ctx)
          hier_back_dev_check (ctx, b, &op, hn_hier_ltm_back_ref, hn_hier_ltm_back_record, 0, 1e-5f);

        /* nothing reaches q, the fast values or the keys */
        float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * 2);
        for (guint32 i = 0; i < topk * Vd; i++)
          gwk[p->y_off + i] = gwk[p->rs + p->y_off + i] = 1.0f;
        hn_hier_ltm_back_ref (&op, b->prm, b->wk, gprm, gwk);
        for (guint32 r = 0; r < 2; r++)
          {
            for (guint32 i = 0; i < K; i++)
              g_assert_cmpfloat (gwk[r * p->rs + p->q_off + i], ==, 0.0f);
            for (guint32 i = 0; i < S * Vd; i++)
              g_assert_cmpfloat (gwk[r * p->rs + p->fast_off + i], ==, 0.0f);
            for (guint32 i = 0; i < S * K; i++)
              g_assert_cmpfloat (gprm[r * p->ps + p->keys_p + i], ==, 0.0f);
          }
        g_assert_cmpfloat (gwk[p->gate_off], !=, 0.0f);
        g_free (gwk);
        g_free (gprm);
        hier_back_bench_free (b);
      }
}

/* A forward that wrote over an input the backward reads again cannot be
 * differentiated: the recorder says so before it records anything (so no
 * device is needed here). */
static void
expect_refused (HnHierOp *op, HnHierBackRecordFunc rec)
{
  g_autoptr (GError) error = NULL;
  g_assert_false (rec (NULL, op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "in place"));
}

static void
test_in_place (void)
{
  WkvLayout l = wkv_layout (4, 2);
  HnHierOp op = wkv_op (&l, 1, 1.0f, NONE);
  op.u.wkv.so_off = op.u.wkv.s_off; /* inference's in-place state */
  expect_refused (&op, hn_hier_wkv_back_record);
  op = wkv_op (&l, 1, 1.0f, NONE);
  op.u.wkv.t_off = op.u.wkv.r_off + 3;
  expect_refused (&op, hn_hier_wkv_back_record);
  op = ltm_op (8, 4, 3, 2, 1, NONE);
  op.u.ltm.y_off = op.u.ltm.fast_off + 5;
  expect_refused (&op, hn_hier_ltm_back_record);
}

/* ---- timing (-m perf only) ---- */

/* Seconds per dispatch of `rec` (or the forward when rec is NULL), n of
 * them recorded into one submit. */
static double
time_dispatches (HierBackBench *b, const HnHierOp *op, HnHierBackRecordFunc rec, int n)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkBuffer) bp = hn_vk_buffer_new (ctx, b->n_prm * 4, "perf prm", &error);
  g_autoptr (HnVkBuffer) bw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf wk", &error);
  g_autoptr (HnVkBuffer) bgp = hn_vk_buffer_new (ctx, b->n_prm * b->rows * 4, "perf gprm", &error);
  g_autoptr (HnVkBuffer) bgw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf gwk", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (bp, 0, b->prm, b->n_prm * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bw, 0, b->wk, b->n_wk * 4, &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  double best = INFINITY;
  for (int rep = 0; rep < 3; rep++)
    {
      gint64 t0 = g_get_monotonic_time ();
      for (int i = 0; i < n; i++)
        g_assert_true (rec ? rec (cmd, op, bp, bw, bgp, bgw, &error) : hn_hier_op_record (cmd, op, bp, bw, &error));
      g_assert_true (hn_cmd_submit_wait (cmd, &error));
      best = MIN (best, (double) (g_get_monotonic_time () - t0) / 1e6 / n);
    }
  return best;
}

static void
test_perf (void)
{
  if (!ctx)
    {
      g_test_skip ("no Vulkan device");
      return;
    }
  /* a wide cell: 16 heads of 64, 4 batch rows */
  WkvLayout l = wkv_layout (64, 16);
  HierBackBench *b = wkv_bench (60, &l, 4);
  HnHierOp op = wkv_op (&l, 4, 1.0f, NONE);
  double fwd = time_dispatches (b, &op, NULL, 20), back = time_dispatches (b, &op, hn_hier_wkv_back_record, 20);
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * 4);
  gint64 t0 = g_get_monotonic_time ();
  hn_hier_wkv_back_ref (&op, b->prm, b->wk, gprm, gwk);
  double ref = (double) (g_get_monotonic_time () - t0) / 1e6;
  g_test_minimized_result (back, "WKV W=1024 N=64 rows=4: forward %.3f ms, backward %.3f ms, CPU reference %.3f ms",
                           fwd * 1e3, back * 1e3, ref * 1e3);
  g_free (gwk);
  g_free (gprm);
  hier_back_bench_free (b);

  /* the default LTM: 1024 slots of 128, top 4 */
  HnHierOp lop = ltm_op (1024, 128, 128, 4, 4, NONE);
  b = hier_back_bench_new (61, lop.u.ltm.ps, 4, lop.u.ltm.rs);
  hn_hier_op_ref (&lop, b->prm, b->wk);
  fwd = time_dispatches (b, &lop, NULL, 20);
  back = time_dispatches (b, &lop, hn_hier_ltm_back_record, 20);
  g_test_minimized_result (back, "LTM S=1024 K=Vd=128 topk=4 rows=4: forward %.3f ms, backward %.3f ms", fwd * 1e3,
                           back * 1e3);
  hier_back_bench_free (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    g_printerr ("no Vulkan device (%s): the shader checks are skipped\n", error->message);
  g_test_add_func ("/hierarchos-back/wkv/shapes", test_wkv_shapes);
  g_test_add_func ("/hierarchos-back/wkv/clamp-pred", test_wkv_clamp_pred);
  g_test_add_func ("/hierarchos-back/wkv/edges", test_wkv_edges);
  g_test_add_func ("/hierarchos-back/wkv/tape", test_wkv_tape);
  g_test_add_func ("/hierarchos-back/ltm", test_ltm);
  g_test_add_func ("/hierarchos-back/in-place", test_in_place);
  if (g_test_perf ())
    g_test_add_func ("/hierarchos-back/perf", test_perf);
  int rc = g_test_run ();
  if (ctx)
    hn_vk_context_unref (ctx);
  return rc;
}
