/* The backward of the Hierarchos NORM, DRIFT and EW ops
 * (hierarchos-vk-private.h, "training: the backward of each op"): CPU
 * references and their recorders (shaders/hier_{norm,drift,ew}_back.comp).
 *
 * The rules are the CPU tape's (hierarchos-tape.c): a clamp passes the
 * gradient where its input lies in [-m, m] and nothing elsewhere (a
 * non-finite input included: g * 0); l2clamp passes it unchanged when its
 * factor is 1, else s (g - x (x . g) / (|x| (|x| + 1e-6))); LayerNorm's is
 * rstd (gx - mean(gx) - xh mean(gx xh)) with gx = g * w. The forward's
 * values (means, norms, clamp inputs) are recomputed from wk the way the
 * forward computed them, so no scratch is needed. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

#define NONE HN_HIER_NONE


/* The tape's clamp derivative: 1 inside [-m, m], 0 outside or non-finite. */
static float
dclamp (float x, float m)
{
  return (x >= -m && x <= m) ? 1.0f : 0.0f;
}

/* Runs one row's backward for every row whose forward predicate held. */
typedef void (*RowFunc) (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);

static void
each_row (const HnHierOp *op, guint32 pred, guint32 rs, guint32 ps, RowFunc row, const float *prm, const float *wk,
          float *gprm, float *gwk)
{
  for (guint32 r = 0; r < MAX (op->rows, 1); r++)
    {
      const float *w = wk + (gsize) r * rs;
      if (!hn_hier_ref_skip (w, pred))
        row (op, prm, w, gprm + (gsize) r * ps, gwk + (gsize) r * rs);
    }
}

/* A range of one row's work buffer: n words at off (n = 0: none). */
typedef struct {
  guint32 off, n;
} Span;

#define SPAN_IF(cond, off, n) ((cond) ? (Span) { (off), (n) } : (Span) { 0, 0 })
#define PRED_SPAN(pred) SPAN_IF ((pred) != NONE, (pred) & ~HN_HIER_PRED_NOT, 1)

/* The backward recomputes the forward's values from its inputs (and reads
 * its control words): FALSE, with an error naming the op, when one of the
 * forward's outputs covers one of them (an in-place forward, as in
 * inference; a training program keeps every value). */
static gboolean
inputs_kept (const char *what, const Span *ins, int n_ins, const Span *outs, int n_outs, GError **error)
{
  for (int i = 0; i < n_ins; i++)
    for (int o = 0; o < n_outs; o++)
      if (ins[i].n && outs[o].n && (guint64) ins[i].off < (guint64) outs[o].off + outs[o].n &&
          (guint64) outs[o].off < (guint64) ins[i].off + ins[i].n)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "%s backward: the forward wrote its output at %u..%u over what the backward reads at %u..%u; "
                       "training needs the forward's inputs kept",
                       what, outs[o].off, outs[o].off + outs[o].n - 1, ins[i].off, ins[i].off + ins[i].n - 1);
          return FALSE;
        }
  return TRUE;
}

/* ---- NORM ---- */

/* Also refuses more mixes than the push constants hold coefficients for. */
static gboolean
norm_kept (const HnHierNormPush *p, GError **error)
{
  if (p->n_mix > G_N_ELEMENTS (p->c))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "NORM backward: %u mixes, at most %u", p->n_mix,
                   (guint) G_N_ELEMENTS (p->c));
      return FALSE;
    }
  /* an indexed wk row is only known at run time: its word is checked */
  Span ins[4] = { SPAN_IF (!(p->xsrc & 1) && !(p->xsrc & 2), p->x_off, p->width), SPAN_IF (p->n_mix, p->prev_off, p->width),
                  SPAN_IF (p->xsrc & 2, p->xi, 1), PRED_SPAN (p->pred) };
  Span outs[2] = { SPAN_IF (p->y_off != NONE, p->y_off, p->width), SPAN_IF (p->n_mix, p->mix_off, p->n_mix * p->width) };
  return inputs_kept ("NORM", ins, 4, outs, 2, error);
}

guint32
hn_hier_norm_back_scratch (const HnHierOp *op)
{
  (void) op;
  return 0;
}

/* The gradient reaching xn[c] from y (through its clamp) and the mixes;
 * with gprm/gwk set, the mixes' other inputs (prev, c_j) get theirs. */
static float
norm_gxn (const HnHierNormPush *p, const float *prm, const float *wk, const float *gwk_in, float *gprm, float *gwk,
          guint32 c, float xn)
{
  float g = 0;
  if (p->y_off != NONE)
    {
      float gy = gwk_in[p->y_off + c];
      g = p->yclamp > 0 ? gy * dclamp (xn, p->yclamp) : gy;
    }
  if (p->n_mix)
    {
      float prev = wk[p->prev_off + c], gp = 0;
      for (guint32 j = 0; j < p->n_mix; j++)
        {
          float gm = gwk_in[p->mix_off + j * p->width + c], cj = prm[p->c[j] + c];
          g += gm * (1.0f - cj);
          gp += gm * cj;
          if (gprm)
            gprm[p->c[j] + c] += gm * (prev - xn);
        }
      if (gwk)
        gwk[p->prev_off + c] += gp;
    }
  return g;
}

static void
norm_back_row (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierNormPush *p = &op->u.norm;
  guint32 W = p->width;
  guint32 xo = p->x_off + ((p->xsrc & 2) ? (guint32) wk[p->xi] * W : 0);
  const float *x = (p->xsrc & 1) ? prm + xo : wk + xo;
  float *gx = (p->xsrc & 1) ? gprm + xo : gwk + xo;
  float mean = 0, var = 0;
  for (guint32 c = 0; c < W; c++)
    mean += x[c];
  mean /= (float) W;
  for (guint32 c = 0; c < W; c++)
    var += (x[c] - mean) * (x[c] - mean);
  float rstd = 1.0f / sqrtf (var / (float) W + p->eps);
  /* the gradient of xh (the normalised x, before the affine) */
  float *gh = g_new (float, MAX (W, 1));
  float m1 = 0, m2 = 0;
  for (guint32 c = 0; c < W; c++)
    {
      float xh = (x[c] - mean) * rstd, xn = xh, w = 1.0f;
      if (p->w_off != NONE)
        xn *= (w = prm[p->w_off + c]);
      if (p->b_off != NONE)
        xn += prm[p->b_off + c];
      float g = norm_gxn (p, prm, wk, gwk, gprm, gwk, c, xn);
      if (p->w_off != NONE)
        gprm[p->w_off + c] += g * xh;
      if (p->b_off != NONE)
        gprm[p->b_off + c] += g;
      gh[c] = g * w;
      m1 += gh[c];
      m2 += gh[c] * xh;
    }
  m1 /= (float) W;
  m2 /= (float) W;
  for (guint32 c = 0; c < W; c++)
    {
      float xh = (x[c] - mean) * rstd;
      gx[c] += rstd * (gh[c] - m1 - xh * m2);
    }
  g_free (gh);
}

void
hn_hier_norm_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierNormPush *p = &op->u.norm;
  g_return_if_fail (norm_kept (p, NULL));
  each_row (op, p->pred, p->rs, p->ps, norm_back_row, prm, wk, gprm, gwk);
}

gboolean
hn_hier_norm_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                          HnVkBuffer *gwk, GError **error)
{
  if (!norm_kept (&op->u.norm, error))
    return FALSE;
  return hn_hier_back_dispatch (cmd, "hier_norm_back", &op->u.norm, sizeof (HnHierNormPush), prm, wk, gprm, gwk, 1,
                                op->rows, error);
}

/* ---- DRIFT ---- */

static gboolean
drift_kept (const HnHierDriftPush *p, GError **error)
{
  Span ins[4] = { { p->d_off, p->n }, SPAN_IF (p->mode == HN_HIER_DRIFT_REFINE, p->delta_off, p->n),
                  SPAN_IF (p->cd_off != NONE, p->ctx_off, p->n), PRED_SPAN (p->pred) };
  guint32 n_flags = p->mode == HN_HIER_DRIFT_START ? MAX (p->nflag, 1) : p->mode == HN_HIER_DRIFT_REFINE ? 1 : 0;
  Span outs[3] = { { p->y_off, p->n }, SPAN_IF (p->cd_off != NONE, p->cd_off, p->n), { p->flag, n_flags } };
  return inputs_kept ("DRIFT", ins, 4, outs, 3, error);
}

guint32
hn_hier_drift_back_scratch (const HnHierOp *op)
{
  (void) op;
  return 0;
}

/* l2clamp's factor and the norm it came from, summed like the forward. The
 * tape's rule: a NaN norm gives a NaN factor (so the gradient is NaN). */
static float
l2_factor (const float *v, guint32 n, float m, float *norm)
{
  float ss = 0;
  for (guint32 c = 0; c < n; c++)
    ss += v[c] * v[c];
  *norm = sqrtf (ss);
  if (!(m > 0))
    return 1.0f;
  float s = m / (*norm + 1e-6f);
  return s > 1.0f ? 1.0f : s;
}

/* g (the output's gradient) becomes the input's, in place. */
static void
l2clamp_back (const float *x, float *g, guint32 n, float s, float norm)
{
  if (s >= 1.0f)
    return;
  float dot = 0;
  for (guint32 c = 0; c < n; c++)
    dot += x[c] * g[c];
  float k = s / (norm * (norm + 1e-6f));
  for (guint32 c = 0; c < n; c++)
    g[c] = s * g[c] - k * x[c] * dot;
}

static void
drift_back_row (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierDriftPush *p = &op->u.drift;
  (void) prm;
  (void) gprm;
  guint32 n = p->n;
  const float *d = wk + p->d_off;
  float *x = g_new (float, MAX (n, 1)), *u = g_new (float, MAX (n, 1)), *g = g_new (float, MAX (n, 1));
  float s1 = 1.0f, n1 = 0;
  if (p->mode == HN_HIER_DRIFT_START)
    s1 = l2_factor (d, n, p->dnc, &n1);
  for (guint32 c = 0; c < n; c++)
    {
      if (p->mode == HN_HIER_DRIFT_START)
        x[c] = s1 < 1.0f ? d[c] * s1 : d[c];
      else if (p->mode == HN_HIER_DRIFT_REFINE)
        x[c] = d[c] + wk[p->delta_off + c];
      else
        x[c] = d[c];
      u[c] = hn_hier_ref_clamp (x[c], p->dsc);
      g[c] = gwk[p->y_off + c];
      if (p->cd_off != NONE)
        {
          g[c] += gwk[p->cd_off + c];
          gwk[p->ctx_off + c] += gwk[p->cd_off + c];
        }
    }
  float n2 = 0, s2 = l2_factor (u, n, p->dnc, &n2);
  l2clamp_back (u, g, n, s2, n2);
  for (guint32 c = 0; c < n; c++)
    g[c] *= dclamp (x[c], p->dsc);
  if (p->mode == HN_HIER_DRIFT_START)
    l2clamp_back (d, g, n, s1, n1);
  for (guint32 c = 0; c < n; c++)
    {
      gwk[p->d_off + c] += g[c];
      if (p->mode == HN_HIER_DRIFT_REFINE)
        gwk[p->delta_off + c] += g[c];
    }
  g_free (x);
  g_free (u);
  g_free (g);
}

void
hn_hier_drift_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierDriftPush *p = &op->u.drift;
  g_return_if_fail (drift_kept (p, NULL));
  each_row (op, p->pred, p->rs, p->ps, drift_back_row, prm, wk, gprm, gwk);
}

gboolean
hn_hier_drift_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                           HnVkBuffer *gwk, GError **error)
{
  if (!drift_kept (&op->u.drift, error))
    return FALSE;
  return hn_hier_back_dispatch (cmd, "hier_drift_back", &op->u.drift, sizeof (HnHierDriftPush), prm, wk, gprm, gwk,
                                1, op->rows, error);
}

/* ---- EW ---- */

static gboolean
ew_kept (const HnHierEwPush *p, GError **error)
{
  Span ins[5] = { SPAN_IF (!(p->asrc & 1) && !(p->asrc & 2), p->a_off, p->n),
                  SPAN_IF (p->op != HN_HIER_EW_COPY, p->b_off, p->n), SPAN_IF (p->op == HN_HIER_EW_AXPYS, p->s_off, 1),
                  SPAN_IF (p->asrc & 2, p->xi, 1), PRED_SPAN (p->pred) };
  Span outs[1] = { { p->y_off, p->n } };
  return inputs_kept ("EW", ins, 5, outs, 1, error);
}

guint32
hn_hier_ew_back_scratch (const HnHierOp *op)
{
  (void) op;
  return 0;
}

static void
ew_back_row (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierEwPush *p = &op->u.ew;
  guint32 ao = p->a_off + ((p->asrc & 2) ? (guint32) wk[p->xi] * p->n : 0);
  float *ga = (p->asrc & 1) ? gprm + ao : gwk + ao;
  float gs = 0;
  for (guint32 i = 0; i < p->n; i++)
    {
      float a = (p->asrc & 1) ? prm[ao + i] : wk[ao + i], y = a;
      if (p->op == HN_HIER_EW_LERP)
        y = a + (wk[p->b_off + i] - a) * p->f0;
      else if (p->op == HN_HIER_EW_AXPYS)
        y = a + wk[p->b_off + i] * wk[p->s_off];
      float g = gwk[p->y_off + i];
      if (p->clamp > 0)
        g *= dclamp (y, p->clamp);
      switch (p->op)
        {
        case HN_HIER_EW_LERP:
          ga[i] += g * (1.0f - p->f0);
          gwk[p->b_off + i] += g * p->f0;
          break;
        case HN_HIER_EW_AXPYS:
          ga[i] += g;
          gwk[p->b_off + i] += g * wk[p->s_off];
          gs += g * wk[p->b_off + i];
          break;
        default:
          ga[i] += g;
        }
    }
  if (p->op == HN_HIER_EW_AXPYS)
    gwk[p->s_off] += gs;
}

void
hn_hier_ew_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierEwPush *p = &op->u.ew;
  g_return_if_fail (ew_kept (p, NULL));
  each_row (op, p->pred, p->rs, p->ps, ew_back_row, prm, wk, gprm, gwk);
}

gboolean
hn_hier_ew_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                        HnVkBuffer *gwk, GError **error)
{
  if (!ew_kept (&op->u.ew, error))
    return FALSE;
  return hn_hier_back_dispatch (cmd, "hier_ew_back", &op->u.ew, sizeof (HnHierEwPush), prm, wk, gprm, gwk,
                                (op->u.ew.n + 255) / 256, op->rows, error);
}
