/* The backward of the Hierarchos MATVEC op (hierarchos-vk-back-mv.c): the
 * CPU reference against the CPU tape's own backward of the same
 * composition and finite differences of the forward reference, and the
 * shaders against the reference, for every post, activation, layout,
 * x segment source, bias, residual and predicate form; 2 rows, the second
 * one's predicate off. */
#include "hier-back-check.h"
#include "test-device.h"
#include "base/hn-error.h"

#define NONE HN_HIER_NONE

/* prm: bias, an x segment, the gate logit, W. wk row: x segments 0 and 2,
 * residual, aux (deep embedding or control words in), y, y2, control
 * words out, the predicate word, the scratch. */
enum { MAX_OUT = 4200, MAX_IN = 3000, MAX_SCRATCH = 4400 };
enum { P_B = 0, P_X = MAX_OUT, P_LOGIT = P_X + MAX_IN, P_W = P_LOGIT + 8 };
enum { W_X0 = 0, W_X2 = MAX_IN, W_RES = 2 * MAX_IN, W_AUX = W_RES + MAX_OUT, W_Y = W_AUX + MAX_OUT };
enum { W_Y2 = W_Y + MAX_OUT, W_CTL = W_Y2 + MAX_OUT, W_PRED = W_CTL + 8, W_V = W_PRED + 8, W_BS = W_V + MAX_OUT };
enum { RS = W_BS + MAX_SCRATCH };

typedef struct {
  guint32 out, in, trans, post, act;
  gboolean segs, bias, res, y2, aux, not, keep;
  float scale, clamp, clamp2, f0, f1;
  guint32 flags, u0;
} Case;

static HnHierOp
case_op (const Case *c)
{
  HnHierOp op = { .kind = HN_HIER_OP_MATVEC, .rows = 2, .bs = W_BS };
  HnHierMatvecPush *p = &op.u.mv;
  g_assert_true (c->out <= MAX_OUT && c->in <= MAX_IN);
  p->out_n = c->out;
  p->in_n = c->in;
  p->trans = c->trans;
  p->post = c->post;
  p->act = c->act;
  p->w_off = P_W;
  p->x0 = p->x1 = p->x2 = W_X0;
  p->n0 = c->in;
  if (c->segs)
    {
      /* [wk : a third] ++ [prm : a third] ++ [wk : the rest] */
      p->n0 = c->in / 3;
      p->n1 = c->in / 3;
      p->x1 = P_X;
      p->x2 = W_X2;
      p->xsrc = 2;
    }
  p->b_off = c->bias ? P_B : NONE;
  p->res_off = c->res ? W_RES : NONE;
  p->y_off = W_Y;
  p->y2_off = c->y2 ? W_Y2 : NONE;
  p->aux = NONE;
  if (c->post == HN_HIER_POST_CM && c->aux)
    p->aux = W_AUX;
  else if (c->post == HN_HIER_POST_GATE)
    p->aux = P_LOGIT;
  else if (c->post == HN_HIER_POST_HALT)
    {
      p->aux = W_AUX;
      p->y2_off = W_CTL;
    }
  p->pred = c->not ? W_PRED | HN_HIER_PRED_NOT : W_PRED;
  p->flags = c->flags;
  p->u0 = c->u0;
  if (c->keep)
    {
      p->flags |= HN_HIER_MV_KEEP_V;
      p->u0 = W_V;
    }
  p->scale = c->scale;
  p->clamp = c->clamp;
  p->clamp2 = c->clamp2;
  p->f0 = c->f0;
  p->f1 = c->f1;
  p->rs = RS;
  p->ps = P_W + c->out * c->in;
  g_assert_cmpuint (hn_hier_mv_back_scratch (&op), <=, MAX_SCRATCH);
  return op;
}

static HierBackBench *
case_bench (const Case *c, guint64 seed)
{
  HierBackBench *b = hier_back_bench_new (seed, P_W + c->out * c->in, 2, RS);
  /* one row runs, the other does not: row 0 with the plain predicate,
   * row 1 with the negated one (its gradient slice is not the first) */
  b->wk[W_PRED] = 1.0f;
  b->wk[RS + W_PRED] = 0.0f;
  /* halting's control words in: survival, steps */
  for (guint32 r = 0; r < 2; r++)
    {
      b->wk[r * RS + W_AUX + 1] = 0.5f;
      b->wk[r * RS + W_AUX + 2] = 1.0f;
    }
  if (c->keep) /* the backward reads the v the forward kept */
    {
      HnHierOp op = case_op (c);
      hn_hier_op_ref (&op, b->prm, b->wk);
    }
  return b;
}

static void
assert_close (const char *what, gsize i, float got, float want)
{
  if (isnan (got) != isnan (want) || (!isnan (want) && fabsf (got - want) > 1e-5f * (1.0f + fabsf (want))))
    g_error ("%s[%" G_GSIZE_FORMAT "]: backward %.8g, tape %.8g", what, i, got, want);
}

static HnVar
tape_act (HnHTape *t, guint32 act, HnVar v)
{
  switch (act)
    {
    case 1: return hn_htape_silu (t, v);
    case 2: return hn_htape_gelu (t, v);
    case 4: return hn_htape_relu (t, v);
    case 5: return hn_htape_relusq (t, v);
    case 7: return hn_htape_sigmoid (t, v);
    case 8: return hn_htape_tanh (t, v);
    case HN_HIER_ACT_WDECAY: return hn_htape_wdecay (t, v);
    default: return v;
    }
}

/* The op as the CPU tape composes it (hierarchos-runtime.c), differentiated
 * by the tape, against the reference on the row that runs: the same rules,
 * so they agree to rounding, at the clamps' edges and with non-finite
 * values too. */
static void
tape_check (HierBackBench *b, const HnHierOp *op, const Case *c)
{
  const HnHierMatvecPush *p = &op->u.mv;
  guint32 row = c->not ? 1 : 0;
  gsize rb = (gsize) row * RS, gb = (gsize) row * p->ps;
  HnHTape *t = hn_htape_new ();
  t->record_grads = TRUE;
  float *tg = g_new0 (float, b->n_wk), *tgp = g_new0 (float, b->n_prm);
#define LEAF(from_prm, off, n)                                                                                     \
  ((from_prm) ? hn_htape_leaf (t, b->prm + (off), tgp + (off), (int) (n))                                            \
              : hn_htape_leaf (t, b->wk + rb + (off), tg + rb + (off), (int) (n)))
  HnVar seg[3];
  guint32 soff[3] = { p->x0, p->x1, p->x2 }, sn[3] = { p->n0, p->n1, p->in_n - p->n0 - p->n1 };
  int n_seg = 0;
  for (int k = 0; k < 3; k++)
    if (sn[k])
      seg[n_seg++] = LEAF ((p->xsrc >> k) & 1, soff[k], sn[k]);
  HnVar x = n_seg == 1 ? seg[0] : hn_htape_concat (t, n_seg, seg);
  HnVar W = LEAF (TRUE, p->w_off, p->out_n * p->in_n);
  HnVar bias = c->bias ? LEAF (TRUE, p->b_off, p->out_n) : -1;
  HnVar v = p->trans ? hn_htape_vecmat (t, x, W, (int) p->in_n, (int) p->out_n)
                     : hn_htape_linear (t, W, x, bias, (int) p->out_n, (int) p->in_n);
  if (p->trans && bias >= 0)
    v = hn_htape_add (t, bias, v);
  if (c->res)
    v = hn_htape_add (t, LEAF (FALSE, p->res_off, p->out_n), v);
  HnVar y = v, y2 = -1;
  switch (p->post)
    {
    case HN_HIER_POST_PLAIN:
      y = tape_act (t, p->act, v);
      if (p->scale != 1.0f)
        y = hn_htape_scale (t, y, p->scale);
      if (p->y2_off != NONE)
        y2 = hn_htape_clamp (t, y, p->clamp2);
      if (p->clamp > 0)
        y = hn_htape_clamp (t, y, p->clamp);
      break;
    case HN_HIER_POST_CM:
      y = hn_htape_relusq (t, p->clamp > 0 ? hn_htape_clamp (t, v, p->clamp) : v);
      if (p->aux != NONE)
        {
          HnVar de = LEAF (FALSE, p->aux, p->out_n);
          y = hn_htape_mul (t, y, p->f1 > 0 ? hn_htape_clamp (t, de, p->f1) : de);
          if (p->clamp > 0 && p->f1 > 0)
            y = hn_htape_clamp (t, y, p->clamp * p->clamp * p->f1);
        }
      break;
    case HN_HIER_POST_GATE:
      y = hn_htape_sigmoid (t, hn_htape_clamp (t, hn_htape_add (t, LEAF (TRUE, p->aux, 1), v), 50.0f));
      if (p->f1 > 0)
        y = hn_htape_addc (t, hn_htape_scale (t, y, 1.0f - p->f1), p->f1);
      break;
    default:
      y = hn_htape_clamp2 (t, hn_htape_sigmoid (t, hn_htape_clamp (t, v, p->f1)), 1e-6f, 1.0f - 1e-6f);
    }
#undef LEAF
  /* the forward agrees with the tape's; the same random output gradients */
  float *fw = g_memdup2 (b->wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (op, b->prm, fw);
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * b->rows);
  const struct { HnVar node; guint32 off; } outs[2] = { { y, p->y_off }, { y2, p->y2_off } };
  for (int o = 0; o < 2 && outs[o].node >= 0; o++)
    for (guint32 i = 0; i < p->out_n; i++)
      {
        assert_close ("forward", i, fw[rb + outs[o].off + i], hn_htape_val (t, outs[o].node)[i]);
        float gi = hier_back_urand (&b->rng, -1.0f, 1.0f);
        gwk[rb + outs[o].off + i] = gi;
        hn_htape_node (t, outs[o].node)->grad[i] = gi;
      }
  hn_htape_sweep (t);
  hn_hier_mv_back_ref (op, b->prm, b->wk, gprm, gwk);
  /* every input of the row (the outputs' own gradients aside) and the slice */
  for (gsize i = 0; i < RS; i++)
    if (!(i >= W_Y && i < W_CTL + 3))
      assert_close ("gwk", rb + i, gwk[rb + i], tg[rb + i]);
  for (gsize i = 0; i < b->n_prm; i++)
    assert_close ("gprm", i, gprm[gb + i], tgp[i]);
  hn_htape_free (t);
  g_free (fw);
  g_free (tg);
  g_free (tgp);
  g_free (gwk);
  g_free (gprm);
}

/* Finite differences of every input, then the shaders (when a device exists). */
static void
check_case (const Case *c, guint64 seed, HnVkContext *ctx)
{
  HnHierOp op = case_op (c);
  const HnHierMatvecPush *p = &op.u.mv;
  HierBackBench *b = case_bench (c, seed);
  HierRange outs[2] = { { W_Y, c->out, FALSE } };
  int n_outs = 1;
  if (c->post == HN_HIER_POST_PLAIN && c->y2)
    outs[n_outs++] = (HierRange) { W_Y2, c->out, FALSE };
  HierRange ins[8];
  int n_ins = 0;
  ins[n_ins++] = (HierRange) { P_W, c->out * c->in, TRUE };
  ins[n_ins++] = (HierRange) { p->x0, p->n0, FALSE };
  if (c->segs)
    {
      ins[n_ins++] = (HierRange) { p->x1, p->n1, TRUE };
      ins[n_ins++] = (HierRange) { p->x2, c->in - p->n0 - p->n1, FALSE };
    }
  if (c->bias)
    ins[n_ins++] = (HierRange) { P_B, c->out, TRUE };
  if (c->res)
    ins[n_ins++] = (HierRange) { W_RES, c->out, FALSE };
  if (c->post == HN_HIER_POST_CM && c->aux)
    ins[n_ins++] = (HierRange) { W_AUX, c->out, FALSE };
  if (c->post == HN_HIER_POST_GATE)
    ins[n_ins++] = (HierRange) { P_LOGIT, 1, TRUE };
  tape_check (b, &op, c);
  if (c->in * c->out <= 1000)
    hier_back_fd_check (b, &op, hn_hier_mv_back_ref, outs, n_outs, ins, n_ins, 1e-3f, 5e-3f);
  if (ctx)
    hier_back_dev_check (ctx, b, &op, hn_hier_mv_back_ref, hn_hier_mv_back_record, hn_hier_mv_back_scratch (&op),
                         1e-4f);
  hier_back_bench_free (b);
}

static const Case plain = { .out = 13, .in = 37, .segs = TRUE, .bias = TRUE, .res = TRUE, .y2 = TRUE,
                            .scale = 0.7f, .clamp = 0.4f, .clamp2 = 0.25f };

static void
test_plain (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  const guint32 acts[] = { 0, 1, 2, 7, 8, HN_HIER_ACT_WDECAY };
  for (guint32 trans = 0; trans < 2; trans++)
    for (gsize a = 0; a < G_N_ELEMENTS (acts); a++)
      {
        Case c = plain;
        c.trans = trans;
        c.act = acts[a];
        c.not = a % 2 == 1;
        c.keep = a % 3 == 2; /* gelu and w-decay read the v the forward kept */
        if (trans)
          {
            c.out = 19;
            c.in = 11;
          }
        check_case (&c, 11 + a + 100 * trans, ctx);
      }
  /* a direct Linear (no activation, clamp or y2: no dv pass) */
  for (guint32 trans = 0; trans < 2; trans++)
    {
      Case c = plain;
      c.trans = trans;
      c.clamp = 0.0f;
      c.y2 = FALSE;
      c.not = trans == 1;
      check_case (&c, 25 + trans, ctx);
    }
  /* no clamp, no y2, no bias, no residual, one segment, the other predicate form */
  for (guint32 trans = 0; trans < 2; trans++)
    {
      Case c = { .out = 9, .in = 14, .trans = trans, .act = 8, .scale = 1.0f, .not = TRUE };
      check_case (&c, 20 + trans, ctx);
    }
}

static void
test_cm (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  const Case cases[] = {
    { .out = 20, .in = 9, .post = HN_HIER_POST_CM, .aux = TRUE, .clamp = 1.0f, .f1 = 0.6f },
    { .out = 20, .in = 9, .post = HN_HIER_POST_CM, .aux = TRUE, .clamp = 1.0f, .f1 = 0.6f, .keep = TRUE, .res = TRUE },
    { .out = 20, .in = 9, .post = HN_HIER_POST_CM, .aux = TRUE, .segs = TRUE },
    { .out = 20, .in = 9, .post = HN_HIER_POST_CM, .clamp = 1.0f, .res = TRUE, .not = TRUE },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    check_case (&cases[i], 30 + i, ctx);
}

static void
test_gate (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  for (int floor = 0; floor < 2; floor++)
    {
      Case c = { .out = 1, .in = 23, .post = HN_HIER_POST_GATE, .bias = TRUE, .segs = floor == 1,
                 .f1 = floor ? 0.3f : 0.0f, .keep = floor == 1 };
      check_case (&c, 40 + floor, ctx);
    }
}

static void
test_halt (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  for (int first = 0; first < 2; first++)
    {
      Case c = { .out = 1, .in = 17, .post = HN_HIER_POST_HALT, .bias = TRUE, .flags = first ? 1 : 0, .u0 = 2,
                 .f0 = 0.5f, .f1 = 0.5f, .not = first == 0 };
      check_case (&c, 50 + first, ctx);
    }
}

/* The shaders past one workgroup and one x tile (too big for finite differences). */
static void
test_large (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  const Case cases[] = {
    { .out = 300, .in = 13, .act = 1, .scale = 1.0f, .bias = TRUE, .res = TRUE, .clamp = 2.0f },
    { .out = 3, .in = 2100, .segs = TRUE, .act = 2, .scale = 1.0f },
    { .out = 150, .in = 20, .trans = 1, .act = 7, .scale = 1.0f, .bias = TRUE, .segs = TRUE },
    { .out = 1, .in = 2300, .trans = 1, .scale = 1.0f },
    /* trans 0 past one chunk of outputs (partial sums of the input's
     * gradient): a direct Linear, and one with a dv pass */
    { .out = 4100, .in = 7, .bias = TRUE, .res = TRUE, .segs = TRUE, .scale = 0.5f },
    { .out = 2100, .in = 5, .act = 1, .clamp = 1.0f, .scale = 1.0f, .not = TRUE },
    { .out = 2100, .in = 5, .act = 8, .clamp = 0.5f, .scale = 1.0f, .bias = TRUE, .keep = TRUE },
    { .out = 200, .in = 40, .trans = 1, .act = 7, .scale = 1.0f, .res = TRUE, .keep = TRUE },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    check_case (&cases[i], 60 + i, ctx);
}

/* The reference's gradient slice after one backward from zero gradients,
 * with gradient 1 on y and 10 on y2. */
static float *
edge_grads (HierBackBench *b, const HnHierOp *op)
{
  float *gwk = g_new0 (float, b->n_wk), *gprm = g_new0 (float, b->n_prm * b->rows);
  for (guint32 o = 0; o < op->u.mv.out_n; o++)
    {
      gwk[W_Y + o] = 1.0f;
      gwk[W_Y2 + o] = 10.0f;
    }
  hn_hier_mv_back_ref (op, b->prm, b->wk, gprm, gwk);
  g_free (gwk);
  return gprm;
}

/* The tape's rules where finite differences cannot look: a clamp passes
 * the gradient at its edge and blocks it past it and at non-finite values;
 * the Linear skips an output whose gradient is 0 (a non-finite input then
 * leaves the weight's gradient finite), the vecmat does not. */
static void
test_edges (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  /* v = x W + b = 0.5, 0.25, 0.75, -0.5 against clamp 0.5 and clamp2 0.25 */
  Case c = { .out = 4, .in = 1, .bias = TRUE, .y2 = TRUE, .scale = 1.0f, .clamp = 0.5f, .clamp2 = 0.25f };
  HnHierOp op = case_op (&c);
  HierBackBench *b = case_bench (&c, 70);
  const float v[] = { 0.5f, 0.25f, 0.75f, -0.5f }, want[] = { 1, 11, 0, 1 };
  b->wk[W_X0] = 1.0f;
  for (int o = 0; o < 4; o++)
    {
      b->prm[P_W + o] = 1.0f;
      b->prm[P_B + o] = v[o] - 1.0f;
    }
  tape_check (b, &op, &c);
  float *g = edge_grads (b, &op);
  for (int o = 0; o < 4; o++)
    g_assert_cmpfloat (g[P_B + o], ==, want[o]);
  g_free (g);
  if (ctx) /* one term per sum: the shaders agree exactly */
    hier_back_dev_check (ctx, b, &op, hn_hier_mv_back_ref, hn_hier_mv_back_record, 4, 0.0f);
  hier_back_bench_free (b);

  /* x = [inf, 0.3] and an infinite weight: every v is non-finite */
  for (guint32 trans = 0; trans < 2; trans++)
    {
      c = (Case) { .out = 3, .in = 2, .trans = trans, .scale = 1.0f, .clamp = 0.5f };
      op = case_op (&c);
      b = case_bench (&c, 71);
      b->wk[W_X0] = INFINITY;
      b->prm[P_W + 3] = INFINITY;
      tape_check (b, &op, &c);
      g = edge_grads (b, &op);
      for (guint32 e = 0; e < 6; e++)
        if (trans == 0 || e == 3)
          g_assert_cmpfloat (g[P_W + e], ==, 0.0f);
        else /* vecmat: row 0 of M gets inf * 0 */
          g_assert_true (e < 3 ? isnan (g[P_W + e]) : g[P_W + e] == 0.0f);
      g_free (g);
      if (ctx)
        hier_back_dev_check (ctx, b, &op, hn_hier_mv_back_ref, hn_hier_mv_back_record, 3, 1e-4f);
      hier_back_bench_free (b);
    }

  /* halting: p = sigmoid(-20) is under 1e-6: clamped, no gradient */
  c = (Case) { .out = 1, .in = 1, .post = HN_HIER_POST_HALT, .bias = TRUE, .flags = 1, .f1 = 30.0f };
  op = case_op (&c);
  b = case_bench (&c, 72);
  b->wk[W_X0] = 1.0f;
  b->prm[P_W] = 1.0f;
  b->prm[P_B] = -21.0f;
  tape_check (b, &op, &c);
  g = edge_grads (b, &op);
  g_assert_cmpfloat (g[P_B], ==, 0.0f);
  g_free (g);
  if (ctx)
    hier_back_dev_check (ctx, b, &op, hn_hier_mv_back_ref, hn_hier_mv_back_record, 1, 0.0f);
  hier_back_bench_free (b);
}

/* What is not implemented fails closed. */
static void
test_unsupported (void)
{
  Case c = plain;
  c.act = 3; /* gelu-tanh: not used by Hierarchos */
  HnHierOp op = case_op (&c);
  g_autoptr (GError) error = NULL;
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "activation 3"));
  g_clear_error (&error);
  c = (Case) { .out = 2, .in = 5, .post = HN_HIER_POST_GATE };
  op = case_op (&c);
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  c = plain;
  op = case_op (&c);
  op.u.mv.x2 = op.u.mv.x0 + 1; /* overlaps segment 0 */
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_nonnull (strstr (error->message, "x segment 0 (wk 0..11) overlaps x segment 2"));
  g_clear_error (&error);
  /* the residual's gradient is added beside the input's: no overlap */
  op = case_op (&c);
  op.u.mv.res_off = op.u.mv.x2 + 3;
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_nonnull (strstr (error->message, "overlaps the residual"));
  g_clear_error (&error);
  /* the inference step's later halting steps write their control words
   * over their predicate: refused (the reference too) */
  c = (Case) { .out = 1, .in = 5, .post = HN_HIER_POST_HALT };
  op = case_op (&c);
  op.u.mv.y2_off = op.u.mv.aux;
  op.u.mv.pred = op.u.mv.aux;
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "inputs kept"));
  g_clear_error (&error);
  op.u.mv.pred = NONE; /* the first step: its words in are not read */
  HierBackBench *b = case_bench (&c, 80);
  float *g = edge_grads (b, &op);
  g_free (g);
  hier_back_bench_free (b);
  /* the kept v over an input */
  c = plain;
  c.keep = TRUE;
  op = case_op (&c);
  op.u.mv.u0 = op.u.mv.x2;
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_nonnull (strstr (error->message, "inputs kept"));
  g_clear_error (&error);
  /* a residual under the output */
  c = plain;
  op = case_op (&c);
  op.u.mv.res_off = op.u.mv.y_off + 2;
  g_assert_false (hn_hier_mv_back_record (NULL, &op, NULL, NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* ---- timing (-m perf) ----
 *
 * The best device time of the backward (all its dispatches) beside the
 * forward at the H200 model's sizes (width 1024), from the dispatch
 * timestamps. */

static double
time_op (HnVkContext *ctx, const HnHierOp *op, gboolean back)
{
  g_autoptr (GError) error = NULL;
  const HnHierMatvecPush *p = &op->u.mv;
  guint32 rows = MAX (op->rows, 1);
  HierBackBench *b = hier_back_bench_new (90, p->ps, rows, p->rs);
  gsize n_gp = (gsize) p->ps * rows;
  g_autofree float *zeros = g_new0 (float, MAX (n_gp, b->n_wk));
  for (guint32 r = 0; r < rows; r++)
    b->wk[(gsize) r * p->rs + p->pred] = 1.0f;
  g_autoptr (HnVkBuffer) bp = hn_vk_buffer_new (ctx, b->n_prm * 4, "perf prm", &error);
  g_autoptr (HnVkBuffer) bw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf wk", &error);
  g_autoptr (HnVkBuffer) bgp = hn_vk_buffer_new (ctx, n_gp * 4, "perf gprm", &error);
  g_autoptr (HnVkBuffer) bgw = hn_vk_buffer_new (ctx, b->n_wk * 4, "perf gwk", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (bp, 0, b->prm, b->n_prm * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bw, 0, b->wk, b->n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgp, 0, zeros, n_gp * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgw, 0, zeros, b->n_wk * 4, &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  double best = INFINITY;
  for (int run = -1; run < 9; run++) /* run -1 warms up */
    {
      hn_cmd_set_profiling (cmd, run >= 0);
      g_assert_true (back ? hn_hier_mv_back_record (cmd, op, bp, bw, bgp, bgw, &error)
                          : hn_hier_op_record (cmd, op, bp, bw, &error));
      g_assert_true (hn_cmd_submit_wait (cmd, &error));
      guint n = 0;
      const HnCmdProfileEntry *e = hn_cmd_get_profile (cmd, &n);
      double us = 0;
      for (guint i = 0; i < n; i++)
        us += e[i].microseconds;
      if (run >= 0)
        best = MIN (best, us);
    }
  hier_back_bench_free (b);
  return best;
}

static void
test_perf (gconstpointer data)
{
  HnVkContext *ctx = (HnVkContext *) data;
  const guint32 W = 1024, R = 4;
  const struct { const char *name; guint32 out, in, trans, act; float clamp; guint32 post; gboolean keep; } shapes[] = {
    { "key W x W (direct)", W, W, 0, 0, 0, HN_HIER_POST_PLAIN, FALSE },
    { "drift W x W, tanh, clamp", W, W, 0, 8, 1.0f, HN_HIER_POST_PLAIN, FALSE },
    { "drift W x W, tanh, clamp, v kept", W, W, 0, 8, 1.0f, HN_HIER_POST_PLAIN, TRUE },
    { "channel-mix key 4W x W", 4 * W, W, 0, 0, 1.0f, HN_HIER_POST_CM, FALSE },
    { "channel-mix key 4W x W, v kept", 4 * W, W, 0, 0, 1.0f, HN_HIER_POST_CM, TRUE },
    { "decay lora W -> 64, tanh", 64, W, 1, 8, 0, HN_HIER_POST_PLAIN, FALSE },
    { "decay lora 64 -> W, w-decay", W, 64, 1, HN_HIER_ACT_WDECAY, 0, HN_HIER_POST_PLAIN, FALSE },
    { "lm_head 4096 x W (direct)", 4096, W, 0, 0, 0, HN_HIER_POST_PLAIN, FALSE },
  };
  for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      HnHierOp op = { .kind = HN_HIER_OP_MATVEC, .rows = R, .bs = 17 * W + 8 };
      HnHierMatvecPush *p = &op.u.mv;
      *p = (HnHierMatvecPush) { .out_n = shapes[s].out, .in_n = shapes[s].in, .trans = shapes[s].trans };
      p->w_off = 0;
      p->b_off = p->res_off = p->y2_off = p->aux = NONE;
      p->x0 = p->x1 = p->x2 = 0;
      p->n0 = p->in_n;
      p->y_off = 4 * W;
      p->act = shapes[s].act;
      p->clamp = shapes[s].clamp;
      p->post = shapes[s].post;
      p->scale = 1.0f;
      if (p->post == HN_HIER_POST_CM)
        {
          p->aux = 8 * W;
          p->f1 = 1.0f;
        }
      p->pred = op.bs - 1;
      if (shapes[s].keep)
        {
          p->flags = HN_HIER_MV_KEEP_V;
          p->u0 = 12 * W;
        }
      p->ps = p->out_n * p->in_n;
      p->rs = op.bs + hn_hier_mv_back_scratch (&op);
      double fwd = time_op (ctx, &op, FALSE), back = time_op (ctx, &op, TRUE);
      g_test_minimized_result (back, "MATVEC %s: backward %.1f us, forward %.1f us (%u rows)", shapes[s].name, back,
                               fwd, R);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  /* finite differences always; the shaders too when a device opens */
  HnVkContext *ctx = NULL;
  if (hn_test_have_vulkan ())
    {
      g_autoptr (GError) error = NULL;
      ctx = hn_vk_context_get_default (&error);
      g_assert_no_error (error);
    }
  g_test_add_data_func ("/hierarchos-back-mv/plain", ctx, test_plain);
  g_test_add_data_func ("/hierarchos-back-mv/cm", ctx, test_cm);
  g_test_add_data_func ("/hierarchos-back-mv/gate", ctx, test_gate);
  g_test_add_data_func ("/hierarchos-back-mv/halt", ctx, test_halt);
  if (ctx)
    g_test_add_data_func ("/hierarchos-back-mv/large", ctx, test_large);
  g_test_add_data_func ("/hierarchos-back-mv/edges", ctx, test_edges);
  g_test_add_func ("/hierarchos-back-mv/unsupported", test_unsupported);
  if (ctx && g_test_perf ())
    g_test_add_data_func ("/hierarchos-back-mv/perf", ctx, test_perf);
  int rc = g_test_run ();
  if (ctx)
    hn_vk_context_unref (ctx);
  return rc;
}
