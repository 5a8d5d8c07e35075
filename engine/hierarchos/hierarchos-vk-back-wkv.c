/* The backward of the WKV and LTM ops (hierarchos-vk-private.h, "training:
 * the backward of each op"): CPU references and the recorders of their
 * shaders (shaders/hierarchos/hier_wkv_back.comp, hier_ltm_back.comp).
 *
 * The rules are the CPU tape's (hierarchos-tape.c), node for node:
 *   WKV = HT_MUL (k k_k) -> HT_HEADNORM -> kk; HT_ADDC/HT_MUL -> k2;
 *         HT_WKV -> S'; HT_WKVREAD -> y; HT_GN; HT_BONUS; HT_MUL (g);
 *         HT_CLAMP (S' -> S out, v -> v_first);
 *   LTM = HT_GATHER of ltm.vals rows (+ fast values, no gradient), HT_MULS
 *         by the gate. The picks are the forward's control words; q and
 *         the keys get no gradient (hard top-k, HIERARCHOS.md).
 * Both recompute what they need of the forward from its inputs (S', the
 * GroupNorm statistics), so they need no scratch. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"

#include <math.h>

/* What HT_CLAMP passes back: 1 inside [-m, m], 0 past it and for
 * non-finite values (a product, so a non-finite gradient stays NaN). */
static float
clamp_pass (float x, float m)
{
  return x >= -m && x <= m ? 1.0f : 0.0f;
}


/* n words of a row's work buffer at off */
typedef struct {
  guint32 off, n;
} Range;

/* The backward reads the forward's inputs again: FALSE, with an error
 * naming the op, when an output of the forward covered one of them (an
 * in-place forward, as inference records it). */
static gboolean
inputs_kept (const char *op, const Range *ins, int n_ins, const Range *outs, int n_outs, GError **error)
{
  for (int i = 0; i < n_ins; i++)
    for (int o = 0; o < n_outs; o++)
      if ((guint64) ins[i].off < (guint64) outs[o].off + outs[o].n &&
          (guint64) outs[o].off < (guint64) ins[i].off + ins[i].n)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "%s backward: the forward wrote its output at %u over its input at %u (in place); training "
                       "needs the inputs kept",
                       op, outs[o].off, ins[i].off);
          return FALSE;
        }
  return TRUE;
}

/* ---- WKV ---- */

guint32
hn_hier_wkv_back_scratch (const HnHierOp *op)
{
  (void) op;
  return 0;
}

/* One head of one row; S' and the statistics are recomputed exactly as the
 * forward (hierarchos-vk-ref.c ref_wkv) computes them. */
static void
wkv_back_head (const HnHierWkvPush *p, guint32 h, const float *prm, const float *wk, float *gprm, float *gwk)
{
  enum { M = HN_HIER_VK_MAX_HEAD };
  guint32 N = p->N, c0 = h * N;
  float kk[M], k2[M], km[M], dec[M], sa[M], y[M], gtt[M], gy[M], gsa[M];
  float gr[M], gk2[M], gv[M], ga[M], gkk[M];
  float G[M * M]; /* [i][j]: the gradient of S' (16 KiB) */
  const float *S = wk + p->s_off + (gsize) c0 * N;

  /* forward */
  float ss = 0;
  for (guint32 i = 0; i < N; i++)
    {
      kk[i] = wk[p->k_off + c0 + i] * prm[p->kk_p + c0 + i];
      ss += kk[i] * kk[i];
    }
  float d = sqrtf (ss);
  if (d < 1e-12f)
    d = 1e-12f;
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      float a = wk[p->a_off + c], w = wk[p->w_off + c];
      kk[i] /= d;
      km[i] = (a - 1.0f) * prm[p->ka_p + c] + 1.0f;
      k2[i] = wk[p->k_off + c] * km[i];
      float wc = isfinite (w) ? (w < -60.0f ? -60.0f : (w > 30.0f ? 30.0f : w)) : w;
      dec[i] = expf (-expf (wc));
    }
  float bonus = 0, mean = 0, var = 0;
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      const float *row = S + (gsize) i * N;
      float s = 0, acc = 0, vi = wk[p->v_off + c];
      for (guint32 j = 0; j < N; j++)
        s += row[j] * (-kk[j]);
      for (guint32 j = 0; j < N; j++)
        acc += (row[j] * dec[j] + s * (kk[j] * wk[p->a_off + c0 + j]) + vi * k2[j]) * wk[p->r_off + c0 + j];
      sa[i] = s;
      y[i] = acc;
      mean += acc;
      bonus += wk[p->r_off + c] * k2[i] * prm[p->rk_p + c];
    }
  mean /= (float) N;
  for (guint32 i = 0; i < N; i++)
    var += (y[i] - mean) * (y[i] - mean);
  float rstd = 1.0f / sqrtf (var / (float) N + p->eps);

  /* t = tt g; v_first = clamp (v); tt = GN (y) + bonus v (HT_BONUS) */
  float gs = 0, m1 = 0, m2 = 0;
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      float vi = wk[p->v_off + c], xh = (y[i] - mean) * rstd;
      float tt = xh * prm[p->lnw_p + c] + prm[p->lnb_p + c] + bonus * vi;
      float gt = gwk[p->t_off + c];
      gwk[p->g_off + c] += gt * tt;
      gtt[i] = gt * wk[p->g_off + c];
      gv[i] = gwk[p->vf_off + c] * clamp_pass (vi, p->sc) + gtt[i] * bonus;
      gs += gtt[i] * vi;
    }
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      float r = wk[p->r_off + c], rk = prm[p->rk_p + c];
      gr[i] = gs * k2[i] * rk;
      gk2[i] = gs * r * rk;
      gprm[p->rk_p + c] += gs * r * k2[i];
    }
  /* HT_GN with one group per head */
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      float xh = (y[i] - mean) * rstd, gx = gtt[i] * prm[p->lnw_p + c];
      m1 += gx;
      m2 += gx * xh;
      gprm[p->lnw_p + c] += gtt[i] * xh;
      gprm[p->lnb_p + c] += gtt[i];
    }
  m1 /= (float) N;
  m2 /= (float) N;
  for (guint32 i = 0; i < N; i++)
    {
      float xh = (y[i] - mean) * rstd, gx = gtt[i] * prm[p->lnw_p + c0 + i];
      gy[i] = rstd * (gx - m1 - xh * m2);
    }

  /* G = clamp'(S') g(S out) + gy r^T (HT_CLAMP, then HT_WKVREAD) */
  const float *r = wk + p->r_off + c0, *a = wk + p->a_off + c0, *v = wk + p->v_off + c0;
  for (guint32 i = 0; i < N; i++)
    for (guint32 j = 0; j < N; j++)
      {
        float s = S[i * N + j] * dec[j] + sa[i] * (kk[j] * a[j]) + v[i] * k2[j];
        float go = gwk[p->so_off + (gsize) (c0 + i) * N + j];
        G[i * N + j] = go * clamp_pass (s, p->sc) + gy[i] * r[j];
        gr[j] += gy[i] * s;
      }

  /* HT_WKV */
  for (guint32 i = 0; i < N; i++)
    {
      float s = 0;
      for (guint32 j = 0; j < N; j++)
        s += G[i * N + j] * kk[j] * a[j];
      gsa[i] = s;
    }
  for (guint32 j = 0; j < N; j++)
    {
      float gdecay = 0, gb = 0, gk = 0, gkk_sa = 0;
      for (guint32 i = 0; i < N; i++)
        {
          float g = G[i * N + j];
          gdecay += g * S[i * N + j];
          gb += g * sa[i];
          gk += g * v[i];
          gkk_sa += gsa[i] * S[i * N + j];
        }
      gkk[j] = gb * a[j] - gkk_sa;
      ga[j] = gb * kk[j];
      gk2[j] += gk;
      float w = wk[p->w_off + c0 + j];
      if (isfinite (w) && w >= -60.0f && w <= 30.0f)
        gwk[p->w_off + c0 + j] += gdecay * (-dec[j] * expf (w));
    }
  for (guint32 i = 0; i < N; i++)
    {
      float s = 0;
      for (guint32 j = 0; j < N; j++)
        s += G[i * N + j] * k2[j];
      gv[i] += s;
    }
  float *gS = gwk + p->s_off + (gsize) c0 * N;
  for (guint32 i = 0; i < N; i++)
    for (guint32 j = 0; j < N; j++)
      gS[i * N + j] += G[i * N + j] * dec[j] - gsa[i] * kk[j];

  /* k2 = k ((a - 1) k_a + 1); kk = HT_HEADNORM (k k_k) */
  float dot = 0;
  for (guint32 i = 0; i < N; i++)
    dot += kk[i] * gkk[i];
  for (guint32 i = 0; i < N; i++)
    {
      guint32 c = c0 + i;
      float k = wk[p->k_off + c], gm = gk2[i] * k;
      float gu = d > 1e-12f ? (gkk[i] - kk[i] * dot) / d : gkk[i] / d;
      gwk[p->k_off + c] += gk2[i] * km[i];
      gwk[p->k_off + c] += gu * prm[p->kk_p + c];
      gprm[p->kk_p + c] += gu * k;
      gprm[p->ka_p + c] += gm * (a[i] - 1.0f);
      gwk[p->a_off + c] += ga[i];
      gwk[p->a_off + c] += gm * prm[p->ka_p + c];
      gwk[p->r_off + c] += gr[i];
      gwk[p->v_off + c] += gv[i];
    }
}

static gboolean
wkv_check (const HnHierOp *op, GError **error)
{
  const HnHierWkvPush *p = &op->u.wkv;
  if (p->N == 0 || p->N > HN_HIER_VK_MAX_HEAD)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "WKV backward: head size %u is outside 1..%d", p->N,
                   HN_HIER_VK_MAX_HEAD);
      return FALSE;
    }
  guint32 W = p->N * op->groups, pred = p->pred & ~HN_HIER_PRED_NOT;
  const Range ins[] = { { p->r_off, W }, { p->k_off, W }, { p->v_off, W }, { p->a_off, W }, { p->g_off, W },
                        { p->w_off, W }, { p->s_off, W * p->N }, { pred, p->pred != HN_HIER_NONE } };
  const Range outs[] = { { p->so_off, W * p->N }, { p->vf_off, W }, { p->t_off, W } };
  return inputs_kept ("WKV", ins, G_N_ELEMENTS (ins), outs, G_N_ELEMENTS (outs), error);
}

void
hn_hier_wkv_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierWkvPush *p = &op->u.wkv;
  g_return_if_fail (wkv_check (op, NULL));
  for (guint32 r = 0; r < MAX (op->rows, 1); r++)
    {
      const float *w = wk + (gsize) r * p->rs;
      if (hn_hier_ref_skip (w, p->pred))
        continue;
      for (guint32 h = 0; h < op->groups; h++)
        wkv_back_head (p, h, prm, w, gprm + (gsize) r * p->ps, gwk + (gsize) r * p->rs);
    }
}

gboolean
hn_hier_wkv_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                         HnVkBuffer *gwk, GError **error)
{
  if (!wkv_check (op, error))
    return FALSE;
  return hn_hier_back_dispatch (cmd, "hier_wkv_back", &op->u.wkv, sizeof op->u.wkv, prm, wk, gprm, gwk, op->groups,
                                op->rows, error);
}

/* ---- LTM ---- */

guint32
hn_hier_ltm_back_scratch (const HnHierOp *op)
{
  (void) op;
  return 0;
}

static gboolean
ltm_check (const HnHierOp *op, GError **error)
{
  const HnHierLtmPush *p = &op->u.ltm;
  if (p->topk > HN_HIER_VK_MAX_TOPK)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "LTM backward: top-k %u is past %d", p->topk,
                   HN_HIER_VK_MAX_TOPK);
      return FALSE;
    }
  /* the picks are the forward's own output: only y may not cover them */
  guint32 pred = p->pred & ~HN_HIER_PRED_NOT;
  const Range ins[] = { { p->gate_off, 1 }, { p->fast_off, p->S * p->Vd }, { p->idx_off, p->topk },
                        { pred, p->pred != HN_HIER_NONE } };
  const Range outs[] = { { p->y_off, p->topk * p->Vd } };
  return inputs_kept ("LTM", ins, G_N_ELEMENTS (ins), outs, G_N_ELEMENTS (outs), error);
}

void
hn_hier_ltm_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierLtmPush *p = &op->u.ltm;
  g_return_if_fail (ltm_check (op, NULL));
  for (guint32 row = 0; row < MAX (op->rows, 1); row++)
    {
      const float *w = wk + (gsize) row * p->rs;
      float *gw = gwk + (gsize) row * p->rs, *gp = gprm + (gsize) row * p->ps;
      if (hn_hier_ref_skip (w, p->pred))
        continue;
      float gate = w[p->gate_off], gg = 0;
      for (guint32 r = 0; r < p->topk; r++)
        {
          /* -1: no slot (fewer slots than top-k); y's row is 0 */
          float pick = w[p->idx_off + r];
          if (!(pick >= 0.0f && pick < (float) p->S))
            continue;
          gsize at = (gsize) pick * p->Vd;
          for (guint32 c = 0; c < p->Vd; c++)
            {
              float gy = gw[p->y_off + r * p->Vd + c];
              gg += gy * (prm[p->vals_p + at + c] + w[p->fast_off + at + c]);
              gp[p->vals_p + at + c] += gy * gate;
            }
        }
      gw[p->gate_off] += gg;
    }
}

gboolean
hn_hier_ltm_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                         HnVkBuffer *gwk, GError **error)
{
  if (!ltm_check (op, error))
    return FALSE;
  return hn_hier_back_dispatch (cmd, "hier_ltm_back", &op->u.ltm, sizeof op->u.ltm, prm, wk, gprm, gwk, 1, op->rows,
                                error);
}
