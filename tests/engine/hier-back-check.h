/* Checks for the backward of one Hierarchos op (hierarchos-vk-private.h):
 * the CPU reference against central differences of the forward reference,
 * and the shader against the CPU reference. Header-only, shared by the
 * test-hierarchos-back-*.c tests. */
#pragma once
#include "hierarchos/hierarchos-vk-private.h"
#include "base/rng.h"

#include <math.h>
#include <string.h>

/* A range of one row's values: n floats at off in wk (prm FALSE) or prm. */
typedef struct {
  guint32 off, n;
  gboolean prm;
} HierRange;

typedef struct {
  float *prm, *wk;
  gsize n_prm, n_wk; /* n_wk covers every row */
  guint32 rows, rs, ps; /* ps = n_prm: one gradient slice per row */
  HnRng rng;
} HierBackBench;

static inline float
hier_back_urand (HnRng *rng, float lo, float hi)
{
  return lo + (hi - lo) * (float) hn_rng_uniform (rng);
}

/* Buffers filled with U(-1, 1); rows of rs floats each (rows >= 1). */
static inline HierBackBench *
hier_back_bench_new (guint64 seed, gsize n_prm, guint32 rows, guint32 rs)
{
  HierBackBench *b = g_new0 (HierBackBench, 1);
  hn_rng_seed (&b->rng, seed);
  b->n_prm = n_prm;
  b->rows = MAX (rows, 1);
  b->rs = rs;
  b->ps = (guint32) n_prm;
  b->n_wk = (gsize) b->rows * rs;
  b->prm = g_new (float, n_prm);
  b->wk = g_new (float, b->n_wk);
  for (gsize i = 0; i < n_prm; i++)
    b->prm[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  for (gsize i = 0; i < b->n_wk; i++)
    b->wk[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  return b;
}

static inline void
hier_back_bench_free (HierBackBench *b)
{
  g_free (b->prm);
  g_free (b->wk);
  g_free (b);
}

/* L = sum over rows and outs of g * out, with the forward reference run on
 * copies of the bench's buffers (prm perturbed by the caller). */
static inline double
hier_back_loss (const HierBackBench *b, const HnHierOp *op, const float *prm, const float *wk, const float *g,
                const HierRange *outs, int n_outs)
{
  float *w = g_memdup2 (wk, b->n_wk * sizeof (float));
  hn_hier_op_ref (op, prm, w);
  double L = 0;
  gsize gi = 0;
  for (guint32 r = 0; r < b->rows; r++)
    for (int o = 0; o < n_outs; o++)
      for (guint32 i = 0; i < outs[o].n; i++)
        L += (double) g[gi++] * w[(gsize) r * b->rs + outs[o].off + i];
  g_free (w);
  return L;
}

/* Central differences (step eps) of L against the backward reference for
 * every element of `ins` in every row (a prm input: the sum of the rows'
 * slices). Fails on |fd - analytic| > tol * (1 + |fd|). An op that reads a
 * control word must keep it unchanged by the perturbation (the caller picks
 * inputs away from clamp edges and halting thresholds). */
static inline void
hier_back_fd_check (HierBackBench *b, const HnHierOp *op, HnHierBackRefFunc back, const HierRange *outs, int n_outs,
                    const HierRange *ins, int n_ins, float eps, float tol)
{
  gsize n_g = 0;
  for (int o = 0; o < n_outs; o++)
    n_g += outs[o].n;
  n_g *= b->rows;
  float *g = g_new (float, MAX (n_g, 1));
  for (gsize i = 0; i < n_g; i++)
    g[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  float *gwk = g_new0 (float, b->n_wk);
  float *gprm = g_new0 (float, b->n_prm * b->rows);
  gsize gi = 0;
  for (guint32 r = 0; r < b->rows; r++)
    for (int o = 0; o < n_outs; o++)
      for (guint32 i = 0; i < outs[o].n; i++)
        gwk[(gsize) r * b->rs + outs[o].off + i] = g[gi++];
  back (op, b->prm, b->wk, gprm, gwk);
  /* the outputs' gradients may have been changed: compare inputs only, and
   * inputs must not overlap outputs */
  float *pp = g_memdup2 (b->prm, b->n_prm * sizeof (float));
  float *ww = g_memdup2 (b->wk, b->n_wk * sizeof (float));
  guint checked = 0;
  for (int k = 0; k < n_ins; k++)
    for (guint32 r = 0; r < (ins[k].prm ? 1u : b->rows); r++)
      for (guint32 i = 0; i < ins[k].n; i++)
        {
          gsize at = ins[k].prm ? ins[k].off + i : (gsize) r * b->rs + ins[k].off + i;
          float *buf = ins[k].prm ? pp : ww;
          float keep = buf[at];
          buf[at] = keep + eps;
          double lp = hier_back_loss (b, op, pp, ww, g, outs, n_outs);
          buf[at] = keep - eps;
          double lm = hier_back_loss (b, op, pp, ww, g, outs, n_outs);
          buf[at] = keep;
          double fd = (lp - lm) / (2.0 * eps), an = 0;
          if (ins[k].prm)
            for (guint32 q = 0; q < b->rows; q++)
              an += gprm[(gsize) q * b->ps + at];
          else
            an = gwk[at];
          if (fabs (fd - an) > tol * (1.0 + fabs (fd)))
            g_error ("op %d backward: input range %d (%s+%u) row %u element %u: analytic %.8g, finite difference %.8g",
                     op->kind, k, ins[k].prm ? "prm" : "wk", ins[k].off, r, i, an, fd);
          checked++;
        }
  g_assert_cmpuint (checked, >, 0);
  g_free (pp);
  g_free (ww);
  g_free (g);
  g_free (gwk);
  g_free (gprm);
}

/* The shader against the reference: both start from the same random
 * gradient buffers (so accumulation, not overwriting, is checked) and must
 * agree on every gradient outside the scratch [op->bs, op->bs + scratch)
 * of each row, within tol * (1 + |ref|). */
static inline void
hier_back_dev_check (HnVkContext *ctx, HierBackBench *b, const HnHierOp *op, HnHierBackRefFunc ref,
                     HnHierBackRecordFunc rec, guint32 scratch, float tol)
{
  g_autoptr (GError) error = NULL;
  gsize n_gp = b->n_prm * b->rows;
  float *gwk = g_new (float, b->n_wk), *gprm = g_new (float, n_gp);
  for (gsize i = 0; i < b->n_wk; i++)
    gwk[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  for (gsize i = 0; i < n_gp; i++)
    gprm[i] = hier_back_urand (&b->rng, -1.0f, 1.0f);
  HnVkBuffer *bp = hn_vk_buffer_new (ctx, b->n_prm * 4, "test prm", &error);
  HnVkBuffer *bw = hn_vk_buffer_new (ctx, b->n_wk * 4, "test wk", &error);
  HnVkBuffer *bgp = hn_vk_buffer_new (ctx, n_gp * 4, "test gprm", &error);
  HnVkBuffer *bgw = hn_vk_buffer_new (ctx, b->n_wk * 4, "test gwk", &error);
  g_assert_no_error (error);
  g_assert_true (hn_vk_buffer_upload (bp, 0, b->prm, b->n_prm * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bw, 0, b->wk, b->n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgp, 0, gprm, n_gp * 4, &error));
  g_assert_true (hn_vk_buffer_upload (bgw, 0, gwk, b->n_wk * 4, &error));
  HnCmd *cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  g_assert_true (rec (cmd, op, bp, bw, bgp, bgw, &error));
  g_assert_no_error (error);
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  float *got_w = g_new (float, b->n_wk), *got_p = g_new (float, n_gp);
  g_assert_true (hn_vk_buffer_download (bgw, 0, got_w, b->n_wk * 4, &error));
  g_assert_true (hn_vk_buffer_download (bgp, 0, got_p, n_gp * 4, &error));
  ref (op, b->prm, b->wk, gprm, gwk);
  gsize changed = 0;
  for (gsize i = 0; i < b->n_wk; i++)
    {
      gsize in_row = b->rs ? i % b->rs : i;
      if (scratch && in_row >= op->bs && in_row < (gsize) op->bs + scratch)
        continue;
      if (fabsf (got_w[i] - gwk[i]) > tol * (1.0f + fabsf (gwk[i])) || isnan (got_w[i]) != isnan (gwk[i]))
        g_error ("op %d backward: gwk[%" G_GSIZE_FORMAT "] = %.8g, reference %.8g", op->kind, i, got_w[i], gwk[i]);
    }
  for (gsize i = 0; i < n_gp; i++)
    {
      if (gprm[i] != got_p[i])
        changed++;
      if (fabsf (got_p[i] - gprm[i]) > tol * (1.0f + fabsf (gprm[i])) || isnan (got_p[i]) != isnan (gprm[i]))
        g_error ("op %d backward: gprm[%" G_GSIZE_FORMAT "] = %.8g, reference %.8g", op->kind, i, got_p[i], gprm[i]);
    }
  (void) changed;
  hn_cmd_free (cmd);
  hn_vk_buffer_unref (bp);
  hn_vk_buffer_unref (bw);
  hn_vk_buffer_unref (bgp);
  hn_vk_buffer_unref (bgw);
  g_free (gwk);
  g_free (gprm);
  g_free (got_w);
  g_free (got_p);
}
