/* CPU references of the Hierarchos Vulkan ops (shaders/hier_*.comp): each
 * interprets the same push constants as its shader, in plain C. */
#include "hierarchos/hierarchos-vk-private.h"

#include <math.h>
#include <string.h>

#define NONE HN_HIER_NONE

static float
rclamp (float x, float m)
{
  return isfinite (x) ? (x < -m ? -m : (x > m ? m : x)) : x;
}

static float
rsigmoid (float x)
{
  if (x >= 0)
    return 1.0f / (1.0f + expf (-x));
  float e = expf (x);
  return e / (1.0f + e);
}

static float
ract (guint32 act, float x)
{
  switch (act)
    {
    case 1: return x * rsigmoid (x);
    case 2: return 0.5f * x * (1.0f + erff (x * (float) M_SQRT1_2));
    case 5: return x > 0 ? x * x : 0.0f;
    case 4: return x > 0 ? x : 0.0f;
    case 7: return rsigmoid (x);
    case 8: return tanhf (x);
    case HN_HIER_ACT_WDECAY:
      {
        float u = -x, sp = u > 20.0f ? u : (u < -20.0f ? expf (u) : log1pf (expf (u)));
        return -sp - 0.5f;
      }
    default: return x;
    }
}

guint32
hn_hier_op_groups (const HnHierOp *op)
{
  switch (op->kind)
    {
    case HN_HIER_OP_MATVEC:
      return op->u.mv.trans ? (op->u.mv.out_n + 127) / 128 : (op->u.mv.out_n + 7) / 8;
    case HN_HIER_OP_WKV:
      return op->groups;
    case HN_HIER_OP_EW:
      return (op->u.ew.n + 255) / 256;
    default:
      return 1;
    }
}

static gboolean
skip (const float *wk, guint32 pred)
{
  if (pred == NONE)
    return FALSE;
  float w = wk[pred & ~HN_HIER_PRED_NOT];
  return (pred & HN_HIER_PRED_NOT) ? w != 0.0f : w == 0.0f;
}

static void
matvec_finish (const HnHierMatvecPush *p, const float *prm, float *wk, guint32 o, float v)
{
  if (p->b_off != NONE)
    v += prm[p->b_off + o];
  if (p->res_off != NONE)
    v += wk[p->res_off + o];
  if ((p->flags & HN_HIER_MV_KEEP_V) && p->post != HN_HIER_POST_HALT)
    wk[p->u0 + o] = v;
  switch (p->post)
    {
    case HN_HIER_POST_PLAIN:
      v = p->scale * ract (p->act, v);
      wk[p->y_off + o] = p->clamp > 0 ? rclamp (v, p->clamp) : v;
      if (p->y2_off != NONE)
        wk[p->y2_off + o] = rclamp (v, p->clamp2);
      break;
    case HN_HIER_POST_CM:
      {
        if (p->clamp > 0)
          v = rclamp (v, p->clamp);
        float f = v > 0 ? v * v : 0.0f;
        if (p->aux != NONE)
          {
            float d = wk[p->aux + o];
            if (p->f1 > 0)
              d = rclamp (d, p->f1);
            f *= d;
            if (p->clamp > 0 && p->f1 > 0)
              f = rclamp (f, p->clamp * p->clamp * p->f1);
          }
        wk[p->y_off + o] = f;
      }
      break;
    case HN_HIER_POST_GATE:
      {
        float g = rsigmoid (rclamp (prm[p->aux] + v, 50.0f));
        if (p->f1 > 0)
          g = g * (1.0f - p->f1) + p->f1;
        wk[p->y_off + o] = g;
      }
      break;
    default:
      {
        float pr = rsigmoid (rclamp (v, p->f1));
        if (isfinite (pr))
          pr = pr < 1e-6f ? 1e-6f : (pr > 1.0f - 1e-6f ? 1.0f - 1e-6f : pr);
        wk[p->y_off + o] = pr;
        gboolean first = (p->flags & 1) != 0;
        float surv = first ? 1.0f - pr : wk[p->aux + 1] * (1.0f - pr);
        float steps = first ? 1.0f : wk[p->aux + 2] + 1.0f;
        gboolean halted = steps >= (float) p->u0 && (1.0f - surv) >= p->f0;
        wk[p->y2_off] = halted ? 0.0f : 1.0f;
        wk[p->y2_off + 1] = surv;
        wk[p->y2_off + 2] = steps;
      }
    }
}

static float
matvec_x (const HnHierMatvecPush *p, const float *prm, const float *wk, guint32 i)
{
  guint seg = i < p->n0 ? 0 : (i < p->n0 + p->n1 ? 1 : 2);
  guint32 idx = seg == 0 ? p->x0 + i : seg == 1 ? p->x1 + i - p->n0 : p->x2 + i - p->n0 - p->n1;
  return (p->xsrc >> seg) & 1 ? prm[idx] : wk[idx];
}

static void
ref_matvec (const HnHierMatvecPush *p, const float *prm, float *wk)
{
  /* Inputs first: the output may overwrite them (never in the step, but
   * the shader reads every input before any write too). */
  float *x = g_new (float, MAX (p->in_n, 1));
  for (guint32 i = 0; i < p->in_n; i++)
    x[i] = matvec_x (p, prm, wk, i);
  float *acc = g_new0 (float, MAX (p->out_n, 1));
  for (guint32 o = 0; o < p->out_n; o++)
    for (guint32 i = 0; i < p->in_n; i++)
      acc[o] += x[i] * (p->trans ? prm[p->w_off + (gsize) i * p->out_n + o] : prm[p->w_off + (gsize) o * p->in_n + i]);
  for (guint32 o = 0; o < p->out_n; o++)
    matvec_finish (p, prm, wk, o, acc[o]);
  g_free (acc);
  g_free (x);
}

static void
ref_norm (const HnHierNormPush *p, const float *prm, float *wk)
{
  guint32 xo = p->x_off + ((p->xsrc & 2) ? (guint32) wk[p->xi] * p->width : 0);
  const float *x = (p->xsrc & 1) ? prm + xo : wk + xo;
  float *xv = g_new (float, p->width);
  memcpy (xv, x, p->width * sizeof (float));
  float mean = 0, var = 0;
  for (guint32 c = 0; c < p->width; c++)
    mean += xv[c];
  mean /= (float) p->width;
  for (guint32 c = 0; c < p->width; c++)
    var += (xv[c] - mean) * (xv[c] - mean);
  float rstd = 1.0f / sqrtf (var / (float) p->width + p->eps);
  for (guint32 c = 0; c < p->width; c++)
    {
      float xn = (xv[c] - mean) * rstd;
      if (p->w_off != NONE)
        xn *= prm[p->w_off + c];
      if (p->b_off != NONE)
        xn += prm[p->b_off + c];
      float prev = p->n_mix ? wk[p->prev_off + c] : 0.0f;
      for (guint32 j = 0; j < p->n_mix; j++)
        wk[p->mix_off + j * p->width + c] = xn + (prev - xn) * prm[p->c[j] + c];
      if (p->y_off != NONE)
        wk[p->y_off + c] = p->yclamp > 0 ? rclamp (xn, p->yclamp) : xn;
    }
  g_free (xv);
}

static void
ref_wkv (const HnHierWkvPush *p, guint32 heads, const float *prm, float *wk)
{
  guint32 N = p->N;
  float kk[HN_HIER_VK_MAX_HEAD], k2[HN_HIER_VK_MAX_HEAD], dec[HN_HIER_VK_MAX_HEAD], y[HN_HIER_VK_MAX_HEAD];
  for (guint32 h = 0; h < heads; h++)
    {
      float ss = 0;
      for (guint32 i = 0; i < N; i++)
        {
          guint32 c = h * N + i;
          kk[i] = wk[p->k_off + c] * prm[p->kk_p + c];
          ss += kk[i] * kk[i];
        }
      float d = sqrtf (ss);
      if (d < 1e-12f)
        d = 1e-12f;
      for (guint32 i = 0; i < N; i++)
        {
          guint32 c = h * N + i;
          float a = wk[p->a_off + c], w = wk[p->w_off + c];
          kk[i] /= d;
          k2[i] = wk[p->k_off + c] * ((a - 1.0f) * prm[p->ka_p + c] + 1.0f);
          float wc = isfinite (w) ? (w < -60.0f ? -60.0f : (w > 30.0f ? 30.0f : w)) : w;
          dec[i] = expf (-expf (wc));
        }
      float bonus = 0, mean = 0, var = 0;
      for (guint32 i = 0; i < N; i++)
        {
          guint32 c = h * N + i;
          const float *row = wk + p->s_off + (gsize) c * N;
          float *orow = wk + p->so_off + (gsize) c * N;
          float sa = 0, acc = 0, vi = wk[p->v_off + c];
          for (guint32 j = 0; j < N; j++)
            sa += row[j] * (-kk[j]);
          for (guint32 j = 0; j < N; j++)
            {
              float s = row[j] * dec[j] + sa * (kk[j] * wk[p->a_off + h * N + j]) + vi * k2[j];
              acc += s * wk[p->r_off + h * N + j];
              orow[j] = rclamp (s, p->sc);
            }
          y[i] = acc;
          mean += acc;
          bonus += wk[p->r_off + c] * k2[i] * prm[p->rk_p + c];
        }
      mean /= (float) N;
      for (guint32 i = 0; i < N; i++)
        var += (y[i] - mean) * (y[i] - mean);
      float rstd = 1.0f / sqrtf (var / (float) N + p->eps);
      for (guint32 i = 0; i < N; i++)
        {
          guint32 c = h * N + i;
          float vi = wk[p->v_off + c];
          float t = (y[i] - mean) * rstd * prm[p->lnw_p + c] + prm[p->lnb_p + c];
          t += bonus * vi;
          wk[p->t_off + c] = t * wk[p->g_off + c];
          wk[p->vf_off + c] = rclamp (vi, p->sc);
        }
    }
}

static void
ref_ltm (const HnHierLtmPush *p, const float *prm, float *wk)
{
  float scale = 1.0f / sqrtf ((float) p->K);
  float *sc = g_new (float, MAX (p->S, 1));
  for (guint32 s = 0; s < p->S; s++)
    {
      float d = 0;
      for (guint32 i = 0; i < p->K; i++)
        d += wk[p->q_off + i] * prm[p->keys_p + s * p->K + i];
      d *= scale;
      sc[s] = isnan (d) ? -INFINITY : d;
    }
  guint32 n = MIN (p->S, p->topk);
  int picks[HN_HIER_VK_MAX_TOPK];
  for (guint32 r = 0; r < n; r++)
    {
      int best = -1;
      for (guint32 s = 0; s < p->S; s++)
        {
          gboolean taken = FALSE;
          for (guint32 q = 0; q < r; q++)
            taken = taken || picks[q] == (int) s;
          if (!taken && (best < 0 || sc[s] > sc[best]))
            best = (int) s;
        }
      picks[r] = best;
    }
  float gate = wk[p->gate_off];
  for (guint32 r = 0; r < p->topk; r++)
    {
      for (guint32 c = 0; c < p->Vd; c++)
        {
          float y = 0;
          if (r < n)
            {
              gsize row = (gsize) picks[r] * p->Vd + c;
              y = (prm[p->vals_p + row] + wk[p->fast_off + row]) * gate;
            }
          wk[p->y_off + r * p->Vd + c] = y;
        }
      wk[p->idx_off + r] = r < n ? (float) picks[r] : -1.0f;
    }
  g_free (sc);
}

static void
l2clamp (float *v, guint32 n, float m)
{
  float ss = 0;
  for (guint32 c = 0; c < n; c++)
    ss += v[c] * v[c];
  float norm = sqrtf (ss);
  float scale = m > 0 ? MIN (1.0f, m / (norm + 1e-6f)) : 1.0f;
  if (scale < 1.0f)
    for (guint32 c = 0; c < n; c++)
      v[c] *= scale;
}

static void
ref_drift (const HnHierDriftPush *p, float *wk)
{
  float *v = g_new (float, MAX (p->n, 1));
  float ma = 0;
  for (guint32 c = 0; c < p->n; c++)
    {
      float x = wk[p->d_off + c];
      if (p->mode == HN_HIER_DRIFT_REFINE)
        {
          ma += fabsf (wk[p->delta_off + c]);
          x += wk[p->delta_off + c];
        }
      v[c] = p->mode == HN_HIER_DRIFT_START ? x : rclamp (x, p->dsc);
    }
  if (p->mode == HN_HIER_DRIFT_START)
    {
      l2clamp (v, p->n, p->dnc);
      for (guint32 c = 0; c < p->n; c++)
        v[c] = rclamp (v[c], p->dsc);
    }
  l2clamp (v, p->n, p->dnc);
  for (guint32 c = 0; c < p->n; c++)
    {
      wk[p->y_off + c] = v[c];
      if (p->cd_off != NONE)
        wk[p->cd_off + c] = wk[p->ctx_off + c] + v[c];
    }
  if (p->mode == HN_HIER_DRIFT_START)
    {
      wk[p->flag] = 1.0f;
      for (guint32 i = 1; i < p->nflag; i++)
        wk[p->flag + i] = 0.0f;
    }
  if (p->mode == HN_HIER_DRIFT_REFINE)
    wk[p->flag] = ma / (float) p->n < p->atol ? 0.0f : 1.0f;
  g_free (v);
}

static void
ref_ew (const HnHierEwPush *p, const float *prm, float *wk)
{
  guint32 ao = p->a_off + ((p->asrc & 2) ? (guint32) wk[p->xi] * p->n : 0);
  for (guint32 i = 0; i < p->n; i++)
    {
      float a = (p->asrc & 1) ? prm[ao + i] : wk[ao + i];
      float y = a;
      if (p->op == HN_HIER_EW_LERP)
        y = a + (wk[p->b_off + i] - a) * p->f0;
      else if (p->op == HN_HIER_EW_AXPYS)
        y = a + wk[p->b_off + i] * wk[p->s_off];
      wk[p->y_off + i] = p->clamp > 0 ? rclamp (y, p->clamp) : y;
    }
}

static guint32
op_pred (const HnHierOp *op)
{
  switch (op->kind)
    {
    case HN_HIER_OP_MATVEC: return op->u.mv.pred;
    case HN_HIER_OP_NORM: return op->u.norm.pred;
    case HN_HIER_OP_WKV: return op->u.wkv.pred;
    case HN_HIER_OP_LTM: return op->u.ltm.pred;
    case HN_HIER_OP_DRIFT: return op->u.drift.pred;
    case HN_HIER_OP_EW: return op->u.ew.pred;
    default: g_assert_not_reached ();
    }
}

guint32
hn_hier_op_rs (const HnHierOp *op)
{
  switch (op->kind)
    {
    case HN_HIER_OP_MATVEC: return op->u.mv.rs;
    case HN_HIER_OP_NORM: return op->u.norm.rs;
    case HN_HIER_OP_WKV: return op->u.wkv.rs;
    case HN_HIER_OP_LTM: return op->u.ltm.rs;
    case HN_HIER_OP_DRIFT: return op->u.drift.rs;
    case HN_HIER_OP_EW: return op->u.ew.rs;
    default: g_assert_not_reached ();
    }
}

static void ref_one (const HnHierOp *op, const float *prm, float *wk);

void
hn_hier_op_ref (const HnHierOp *op, const float *prm, float *wk)
{
  guint32 rows = MAX (op->rows, 1), rs = hn_hier_op_rs (op);
  for (guint32 r = 0; r < rows; r++)
    ref_one (op, prm, wk + (gsize) r * rs);
}

static void
ref_one (const HnHierOp *op, const float *prm, float *wk)
{
  if (skip (wk, op_pred (op)))
    return;
  switch (op->kind)
    {
    case HN_HIER_OP_MATVEC: ref_matvec (&op->u.mv, prm, wk); break;
    case HN_HIER_OP_NORM: ref_norm (&op->u.norm, prm, wk); break;
    case HN_HIER_OP_WKV: ref_wkv (&op->u.wkv, op->groups, prm, wk); break;
    case HN_HIER_OP_LTM: ref_ltm (&op->u.ltm, prm, wk); break;
    case HN_HIER_OP_DRIFT: ref_drift (&op->u.drift, wk); break;
    case HN_HIER_OP_EW: ref_ew (&op->u.ew, prm, wk); break;
    default: g_assert_not_reached ();
    }
}

/* The references' scalar rules, for the backward references. */
gboolean
hn_hier_ref_skip (const float *wk, guint32 pred)
{
  return skip (wk, pred);
}

float
hn_hier_ref_clamp (float x, float m)
{
  return rclamp (x, m);
}

float
hn_hier_ref_sigmoid (float x)
{
  return rsigmoid (x);
}

float
hn_hier_ref_act (guint32 act, float x)
{
  return ract (act, x);
}
