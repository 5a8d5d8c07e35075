/* Every backward CPU reference against central finite differences of its
 * forward, on small random shapes with odd sizes. The loss is Σ y·r for a
 * random r, so dy = r. */
#include <math.h>
#include <string.h>

#include "tensor/cpu-ref-back.h"

static guint32 rng_state = 12345;

static float
frand (void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return ((rng_state >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static float *
rand_array (gint64 n, float scale)
{
  float *a = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    a[i] = frand () * scale;
  return a;
}

typedef double (*LossFn) (gpointer data);

/* Compares analytic[i] with the finite difference of fn w.r.t. x[i]. */
static void
check_fd (const char *what, LossFn fn, gpointer data, float *x, gint64 n, const float *analytic)
{
  const float h = 1e-2f;
  double max_err = 0;
  for (gint64 i = 0; i < n; i++)
    {
      float saved = x[i];
      x[i] = saved + h;
      double lp = fn (data);
      x[i] = saved - h;
      double lm = fn (data);
      x[i] = saved;
      double num = (lp - lm) / (2.0 * h);
      double err = fabs (num - analytic[i]) / MAX (1.0, fabs (num));
      max_err = MAX (max_err, err);
      if (err > 5e-3)
        g_error ("%s: element %" G_GINT64_FORMAT ": analytic %.6g, numeric %.6g", what, i, analytic[i], num);
    }
  g_test_message ("%s: max relative error %.3g over %" G_GINT64_FORMAT " elements", what, max_err, n);
}

static double
dot (const float *a, const float *b, gint64 n)
{
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) a[i] * b[i];
  return s;
}

/* ------------------------------------------------------------ matmul */

typedef struct {
  gint64 M, N, K;
  float *x, *w, *b, *r;
} MatmulCase;

static double
matmul_loss (gpointer data)
{
  MatmulCase *c = data;
  double s = 0;
  for (gint64 m = 0; m < c->M; m++)
    for (gint64 n = 0; n < c->N; n++)
      {
        double y = c->b[n];
        for (gint64 k = 0; k < c->K; k++)
          y += (double) c->x[m * c->K + k] * c->w[n * c->K + k];
        s += y * c->r[m * c->N + n];
      }
  return s;
}

static void
test_matmul_back (void)
{
  MatmulCase c = { 5, 7, 3, NULL, NULL, NULL, NULL };
  c.x = rand_array (c.M * c.K, 1);
  c.w = rand_array (c.N * c.K, 1);
  c.b = rand_array (c.N, 1);
  c.r = rand_array (c.M * c.N, 1);
  g_autofree float *dx = g_new0 (float, c.M * c.K);
  g_autofree float *dw = g_new0 (float, c.N * c.K);
  g_autofree float *db = g_new0 (float, c.N);
  hn_ref_matmul_back (c.r, c.x, c.w, c.M, c.N, c.K, dx, dw, db);
  check_fd ("matmul dx", matmul_loss, &c, c.x, c.M * c.K, dx);
  check_fd ("matmul dw", matmul_loss, &c, c.w, c.N * c.K, dw);
  check_fd ("matmul db", matmul_loss, &c, c.b, c.N, db);
  /* parameter gradients accumulate */
  hn_ref_matmul_back (c.r, c.x, c.w, c.M, c.N, c.K, NULL, dw, NULL);
  g_autofree float *dw1 = g_new0 (float, c.N * c.K);
  hn_ref_matmul_back (c.r, c.x, c.w, c.M, c.N, c.K, NULL, dw1, NULL);
  for (gint64 i = 0; i < c.N * c.K; i++)
    g_assert_cmpfloat_with_epsilon (dw[i], 2 * dw1[i], 1e-5);
  g_free (c.x); g_free (c.w); g_free (c.b); g_free (c.r);
}

/* ------------------------------------------------------------ norms */

typedef struct {
  gint64 rows, cols;
  float eps;
  gboolean plus_one, layer;
  float *x, *w, *b, *r;
} NormCase;

static double
norm_loss (gpointer data)
{
  NormCase *c = data;
  double s = 0;
  for (gint64 r = 0; r < c->rows; r++)
    {
      const float *xr = c->x + r * c->cols;
      double mean = 0, ss = 0;
      if (c->layer)
        {
          for (gint64 i = 0; i < c->cols; i++)
            mean += xr[i];
          mean /= c->cols;
        }
      for (gint64 i = 0; i < c->cols; i++)
        ss += (xr[i] - mean) * (xr[i] - mean);
      double inv = 1.0 / sqrt (ss / c->cols + c->eps);
      for (gint64 i = 0; i < c->cols; i++)
        {
          double w = c->plus_one ? 1.0 + c->w[i] : c->w[i];
          double y = (xr[i] - mean) * inv * w + (c->layer ? c->b[i] : 0.0);
          s += y * c->r[r * c->cols + i];
        }
    }
  return s;
}

static void
run_norm (gboolean layer, gboolean plus_one)
{
  NormCase c = { 3, 13, 1e-5f, plus_one, layer, NULL, NULL, NULL, NULL };
  c.x = rand_array (c.rows * c.cols, 2);
  c.w = rand_array (c.cols, 1);
  c.b = rand_array (c.cols, 1);
  c.r = rand_array (c.rows * c.cols, 1);
  g_autofree float *dx = g_new0 (float, c.rows * c.cols);
  g_autofree float *dw = g_new0 (float, c.cols);
  g_autofree float *db = g_new0 (float, c.cols);
  if (layer)
    hn_ref_layernorm_back (c.r, c.x, c.w, c.rows, c.cols, c.eps, dx, dw, db);
  else
    hn_ref_rmsnorm_back (c.r, c.x, c.w, c.rows, c.cols, c.eps, plus_one, dx, dw);
  check_fd (layer ? "layernorm dx" : "rmsnorm dx", norm_loss, &c, c.x, c.rows * c.cols, dx);
  check_fd (layer ? "layernorm dw" : "rmsnorm dw", norm_loss, &c, c.w, c.cols, dw);
  if (layer)
    check_fd ("layernorm db", norm_loss, &c, c.b, c.cols, db);
  g_free (c.x); g_free (c.w); g_free (c.b); g_free (c.r);
}

static void test_rmsnorm_back (void) { run_norm (FALSE, FALSE); }
static void test_rmsnorm_plus_one_back (void) { run_norm (FALSE, TRUE); }
static void test_layernorm_back (void) { run_norm (TRUE, FALSE); }

/* ------------------------------------------------------------ rope */

typedef struct {
  gint64 n_tok;
  int H, D, rot;
  HnRopeStyle style;
  float scale;
  gint32 *pos;
  float *inv_freq, *x, *r, *y;
} RopeCase;

static double
rope_loss (gpointer data)
{
  RopeCase *c = data;
  hn_ref_rope_fwd (c->x, c->pos, c->inv_freq, c->n_tok, c->H, c->D, c->rot, c->style, c->scale, c->y);
  return dot (c->y, c->r, c->n_tok * c->H * c->D);
}

static void
run_rope (HnRopeStyle style, int rot)
{
  RopeCase c = { 5, 3, 10, rot, style, 1.3f, NULL, NULL, NULL, NULL, NULL };
  gint64 n = c.n_tok * c.H * c.D;
  c.pos = g_new (gint32, c.n_tok);
  for (int i = 0; i < c.n_tok; i++)
    c.pos[i] = 3 + 2 * i;
  c.inv_freq = g_new (float, rot / 2);
  for (int i = 0; i < rot / 2; i++)
    c.inv_freq[i] = powf (10000.0f, -2.0f * i / rot);
  c.x = rand_array (n, 1);
  c.r = rand_array (n, 1);
  c.y = g_new (float, n);
  g_autofree float *dx = g_new0 (float, n);
  hn_ref_rope_back (c.r, c.pos, c.inv_freq, c.n_tok, c.H, c.D, c.rot, style, c.scale, dx);
  check_fd ("rope dx", rope_loss, &c, c.x, n, dx);
  g_free (c.pos); g_free (c.inv_freq); g_free (c.x); g_free (c.r); g_free (c.y);
}

static void test_rope_neox_back (void) { run_rope (HN_ROPE_NEOX, 10); run_rope (HN_ROPE_NEOX, 4); }
static void test_rope_gptj_back (void) { run_rope (HN_ROPE_GPTJ, 6); }

/* ------------------------------------------------------------ softmax */

typedef struct {
  gint64 rows, cols;
  float scale, softcap;
  float *x, *r, *y;
} SoftmaxCase;

static void
softmax_fwd (SoftmaxCase *c)
{
  for (gint64 r = 0; r < c->rows; r++)
    {
      double mx = -INFINITY, sum = 0;
      g_autofree double *z = g_new (double, c->cols);
      for (gint64 i = 0; i < c->cols; i++)
        {
          z[i] = c->x[r * c->cols + i] * c->scale;
          if (c->softcap > 0)
            z[i] = c->softcap * tanh (z[i] / c->softcap);
          mx = MAX (mx, z[i]);
        }
      for (gint64 i = 0; i < c->cols; i++)
        sum += exp (z[i] - mx);
      for (gint64 i = 0; i < c->cols; i++)
        c->y[r * c->cols + i] = (float) (exp (z[i] - mx) / sum);
    }
}

static double
softmax_loss (gpointer data)
{
  SoftmaxCase *c = data;
  softmax_fwd (c);
  return dot (c->y, c->r, c->rows * c->cols);
}

static void
run_softmax (float softcap)
{
  SoftmaxCase c = { 4, 9, 0.7f, softcap, NULL, NULL, NULL };
  gint64 n = c.rows * c.cols;
  c.x = rand_array (n, 3);
  c.r = rand_array (n, 1);
  c.y = g_new (float, n);
  softmax_fwd (&c);
  g_autofree float *y = g_memdup2 (c.y, sizeof (float) * n);
  g_autofree float *dx = g_new0 (float, n);
  hn_ref_softmax_back (c.r, y, c.x, c.rows, c.cols, c.scale, c.softcap, dx);
  check_fd ("softmax dx", softmax_loss, &c, c.x, n, dx);
  g_free (c.x); g_free (c.r); g_free (c.y);
}

static void test_softmax_back (void) { run_softmax (0); run_softmax (1.5f); }

/* ------------------------------------------------------------ attention */

typedef struct {
  HnRefAttnShape s;
  float *q, *k, *v, *r, *out;
} AttnCase;

static double
attn_loss (gpointer data)
{
  AttnCase *c = data;
  hn_ref_attention_fwd (&c->s, c->q, c->k, c->v, c->out);
  return dot (c->out, c->r, (gint64) c->s.batch * c->s.n_q * c->s.n_head * c->s.v_dim);
}

static void
run_attention (gboolean causal, float softcap, gint64 window, gboolean alibi)
{
  float slopes[4] = { 0.5f, 0.25f, 0.125f, 0.0625f };
  AttnCase c = { { 2, 5, 5, 4, 2, 6, 6, 0, softcap, causal, 0, window, alibi ? slopes : NULL },
                 NULL, NULL, NULL, NULL, NULL };
  HnRefAttnShape *s = &c.s;
  gint64 nq = (gint64) s->batch * s->n_q * s->n_head * s->head_dim;
  gint64 nk = (gint64) s->batch * s->n_kv * s->n_kv_head * s->head_dim;
  gint64 no = (gint64) s->batch * s->n_q * s->n_head * s->v_dim;
  c.q = rand_array (nq, 1.5f);
  c.k = rand_array (nk, 1.5f);
  c.v = rand_array (nk, 1);
  c.r = rand_array (no, 1);
  c.out = g_new (float, no);
  g_autofree float *dq = g_new0 (float, nq);
  g_autofree float *dk = g_new0 (float, nk);
  g_autofree float *dv = g_new0 (float, nk);
  hn_ref_attention_back (s, c.q, c.k, c.v, c.r, dq, dk, dv);
  check_fd ("attention dq", attn_loss, &c, c.q, nq, dq);
  check_fd ("attention dk", attn_loss, &c, c.k, nk, dk);
  check_fd ("attention dv", attn_loss, &c, c.v, nk, dv);
  g_free (c.q); g_free (c.k); g_free (c.v); g_free (c.r); g_free (c.out);
}

static void test_attention_back (void) { run_attention (TRUE, 0, 0, FALSE); run_attention (FALSE, 0, 0, FALSE); }
static void test_attention_variants_back (void) { run_attention (TRUE, 2.0f, 3, FALSE); run_attention (TRUE, 0, 0, TRUE); }

/* ------------------------------------------------------------ activations */

typedef struct {
  HnActivation act;
  gboolean glu;
  gint64 n;
  float *x, *up, *r;
} ActCase;

static double
act_loss (gpointer data)
{
  ActCase *c = data;
  double s = 0;
  for (gint64 i = 0; i < c->n; i++)
    s += (double) hn_ref_act (c->act, c->x[i]) * (c->glu ? c->up[i] : 1.0f) * c->r[i];
  return s;
}

static void
test_activation_back (void)
{
  const HnActivation acts[] = { HN_ACT_IDENTITY, HN_ACT_SILU, HN_ACT_GELU, HN_ACT_GELU_TANH, HN_ACT_RELU,
                                HN_ACT_RELU2, HN_ACT_QUICK_GELU, HN_ACT_SIGMOID, HN_ACT_TANH };
  for (guint a = 0; a < G_N_ELEMENTS (acts); a++)
    for (int glu = 0; glu < 2; glu++)
      {
        ActCase c = { acts[a], glu, 23, NULL, NULL, NULL };
        c.x = rand_array (c.n, 3);
        /* keep relu-like kinks away from the finite-difference step */
        for (gint64 i = 0; i < c.n; i++)
          if (fabsf (c.x[i]) < 0.05f)
            c.x[i] = 0.5f;
        c.up = rand_array (c.n, 1);
        c.r = rand_array (c.n, 1);
        g_autofree float *dx = g_new0 (float, c.n);
        g_autofree float *dup = g_new0 (float, c.n);
        g_autofree char *what = g_strdup_printf ("%sactivation %d dx", glu ? "glu " : "", (int) c.act);
        if (glu)
          {
            hn_ref_glu_back (c.r, c.x, c.up, c.n, c.act, dx, dup);
            check_fd (what, act_loss, &c, c.up, c.n, dup);
          }
        else
          hn_ref_unary_back (c.r, c.x, c.n, c.act, dx);
        check_fd (what, act_loss, &c, c.x, c.n, dx);
        g_free (c.x); g_free (c.up); g_free (c.r);
      }
}

/* ------------------------------------------------------------ embedding, CE */

typedef struct {
  gint64 n, dim, vocab;
  gint32 *ids;
  float *table, *r;
} EmbCase;

static double
emb_loss (gpointer data)
{
  EmbCase *c = data;
  double s = 0;
  for (gint64 i = 0; i < c->n; i++)
    for (gint64 d = 0; d < c->dim; d++)
      s += (double) c->table[c->ids[i] * c->dim + d] * c->r[i * c->dim + d];
  return s;
}

static void
test_embedding_back (void)
{
  EmbCase c = { 7, 5, 6, NULL, NULL, NULL };
  gint32 ids[7] = { 1, 3, 1, 0, 5, 3, 3 };
  c.ids = ids;
  c.table = rand_array (c.vocab * c.dim, 1);
  c.r = rand_array (c.n * c.dim, 1);
  g_autofree float *dt = g_new0 (float, c.vocab * c.dim);
  hn_ref_embedding_back (c.r, c.ids, c.n, c.dim, c.vocab, dt);
  check_fd ("embedding dtable", emb_loss, &c, c.table, c.vocab * c.dim, dt);
  g_free (c.table); g_free (c.r);
}

typedef struct {
  gint64 n, vocab;
  gint32 *targets;
  float *weights, *logits;
} CeCase;

static double
ce_loss (gpointer data)
{
  CeCase *c = data;
  return hn_ref_cross_entropy_loss (c->logits, c->targets, c->weights, c->n, c->vocab, -100, 1.0f, NULL);
}

static void
test_cross_entropy_back (void)
{
  gint32 targets[6] = { 2, -100, 0, 7, -100, 4 };
  float weights[6] = { 1.0f, 3.0f, 0.5f, 2.0f, 1.0f, 1.0f };
  CeCase c = { 6, 9, targets, NULL, NULL };
  c.logits = rand_array (c.n * c.vocab, 3);
  g_autofree float *dl = g_new0 (float, c.n * c.vocab);
  for (int w = 0; w < 2; w++)
    {
      c.weights = w ? weights : NULL;
      double loss = hn_ref_cross_entropy_loss (c.logits, targets, c.weights, c.n, c.vocab, -100, 1.0f, dl);
      g_assert_true (isfinite (loss) && loss > 0);
      check_fd (w ? "weighted cross-entropy" : "cross-entropy", ce_loss, &c, c.logits, c.n * c.vocab, dl);
      /* ignored rows have no gradient */
      for (gint64 v = 0; v < c.vocab; v++)
        g_assert_cmpfloat (dl[1 * c.vocab + v], ==, 0.0f);
    }
  /* mean over the counted rows: with unit weights equals the plain mean */
  gint32 all_ignored[2] = { -100, -100 };
  g_assert_cmpfloat (hn_ref_cross_entropy_loss (c.logits, all_ignored, NULL, 2, c.vocab, -100, 1.0f, NULL), ==, 0.0);
  gint32 bad[1] = { 99 };
  g_assert_true (isnan (hn_ref_cross_entropy_loss (c.logits, bad, NULL, 1, c.vocab, -100, 1.0f, NULL)));
  g_free (c.logits);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/back-cpu/matmul", test_matmul_back);
  g_test_add_func ("/back-cpu/rmsnorm", test_rmsnorm_back);
  g_test_add_func ("/back-cpu/rmsnorm-plus-one", test_rmsnorm_plus_one_back);
  g_test_add_func ("/back-cpu/layernorm", test_layernorm_back);
  g_test_add_func ("/back-cpu/rope-neox", test_rope_neox_back);
  g_test_add_func ("/back-cpu/rope-gptj", test_rope_gptj_back);
  g_test_add_func ("/back-cpu/softmax", test_softmax_back);
  g_test_add_func ("/back-cpu/attention", test_attention_back);
  g_test_add_func ("/back-cpu/attention-variants", test_attention_variants_back);
  g_test_add_func ("/back-cpu/activations", test_activation_back);
  g_test_add_func ("/back-cpu/embedding", test_embedding_back);
  g_test_add_func ("/back-cpu/cross-entropy", test_cross_entropy_back);
  return g_test_run ();
}
