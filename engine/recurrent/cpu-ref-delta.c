/* CPU references of the gated delta rule (ops-delta.h): plain loops with
 * double sums, the ground truth for the shaders; tests/engine/test-ops-ssm.c
 * checks the backward against finite differences of the forward. */
#include "recurrent/ops-delta.h"

#include <math.h>
#include <string.h>

#define L2_EPS 1e-6

typedef struct {
  gint64 HK, HV, DK, DV, CD, rep;
  double scale;
} Dims;

static Dims
dims_of (const HnRefDeltaRule *p)
{
  Dims d = { p->n_k_heads, p->n_v_heads, p->k_dim, p->v_dim, 0, 0, p->scale };
  d.CD = 2 * d.HK * d.DK + d.HV * d.DV;
  d.rep = d.HV / d.HK;
  if (!(d.scale > 0))
    d.scale = 1.0 / sqrt ((double) d.DK);
  return d;
}

/* torch's softplus (threshold 20) */
static double
softplus_t (double v)
{
  return v > 20.0 ? v : log1p (exp (v));
}

static double
sigmoid_d (double v)
{
  return 1.0 / (1.0 + exp (-v));
}

/* q̂ (with the scale) and k̂ of row bt, key head hk; *rq, *rk the inverse norms (1 without the norm). */
static void
qk_of (const float *qkv, const Dims *d, gboolean l2, gint64 bt, gint64 hk, double *q, double *k, double *rq, double *rk)
{
  const float *qs = qkv + bt * d->CD + hk * d->DK, *ks = qkv + bt * d->CD + d->HK * d->DK + hk * d->DK;
  double sq = 0, sk = 0;
  for (gint64 i = 0; i < d->DK; i++)
    {
      sq += (double) qs[i] * qs[i];
      sk += (double) ks[i] * ks[i];
    }
  *rq = l2 ? 1.0 / sqrt (sq + L2_EPS) : 1.0;
  *rk = l2 ? 1.0 / sqrt (sk + L2_EPS) : 1.0;
  for (gint64 i = 0; i < d->DK; i++)
    {
      q[i] = qs[i] * *rq * d->scale;
      k[i] = ks[i] * *rk;
    }
}

/* g and β of row bt, value head h; *dg_dx = d g / d (a + dt_bias). */
static void
gates_of (const float *a, const float *b, const float *A_log, const float *dt_bias, const Dims *d, gint64 bt, gint64 h,
          double *g, double *beta, double *dg_dx)
{
  double x = (double) a[bt * d->HV + h] + (dt_bias ? dt_bias[h] : 0.0), A = exp ((double) A_log[h]);
  *g = -A * softplus_t (x);
  *dg_dx = -A * (x > 20.0 ? 1.0 : sigmoid_d (x));
  *beta = sigmoid_d (b[bt * d->HV + h]);
}

void
hn_ref_gated_delta_rule (float *y, const float *qkv, const float *a, const float *b, const float *A_log, gint64 B,
                         gint64 T, const HnRefDeltaRule *p)
{
  Dims d = dims_of (p);
  g_autofree double *S = g_new (double, d.DK * d.DV), *q = g_new (double, d.DK), *k = g_new (double, d.DK);
  for (gint64 bb = 0; bb < B; bb++)
    for (gint64 h = 0; h < d.HV; h++)
      {
        float *st = p->state ? p->state + (bb * d.HV + h) * d.DK * d.DV : NULL;
        for (gint64 i = 0; i < d.DK * d.DV; i++)
          S[i] = st ? st[i] : 0.0;
        for (gint64 t = 0; t < T; t++)
          {
            gint64 bt = bb * T + t;
            double rq, rk, g, beta, dgx;
            qk_of (qkv, &d, p->qk_l2norm, bt, h / d.rep, q, k, &rq, &rk);
            gates_of (a, b, A_log, p->dt_bias, &d, bt, h, &g, &beta, &dgx);
            double alpha = exp (g);
            const float *v = qkv + bt * d.CD + 2 * d.HK * d.DK + h * d.DV;
            for (gint64 j = 0; j < d.DV; j++)
              {
                double m = 0, o = 0;
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    S[i * d.DV + j] *= alpha;
                    m += S[i * d.DV + j] * k[i];
                  }
                double delta = beta * (v[j] - m);
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    S[i * d.DV + j] += k[i] * delta;
                    o += S[i * d.DV + j] * q[i];
                  }
                y[bt * d.HV * d.DV + h * d.DV + j] = (float) o;
              }
          }
        for (gint64 i = 0; st && i < d.DK * d.DV; i++)
          st[i] = (float) S[i];
      }
}

/* du (the gradient of the normalised vector u = x · r) -> dx = r (du - u (u · du)); without the norm dx = du. */
static void
norm_back (const float *x, double r, gboolean l2, const double *du, float *dx, gint64 n)
{
  double dot = 0;
  for (gint64 i = 0; l2 && i < n; i++)
    dot += x[i] * r * du[i];
  for (gint64 i = 0; i < n; i++)
    dx[i] = (float) (l2 ? r * (du[i] - x[i] * r * dot) : du[i]);
}

void
hn_ref_gated_delta_rule_back (const float *dy, const float *qkv, const float *a, const float *b, const float *A_log,
                              gint64 B, gint64 T, const HnRefDeltaRule *p, float *dqkv, float *da, float *db,
                              float *dA_log, float *ddt_bias)
{
  Dims d = dims_of (p);
  gint64 KV = d.DK * d.DV;
  g_autofree double *Sh = g_new (double, (T + 1) * KV), *G = g_new (double, KV);
  g_autofree double *qs = g_new (double, T * d.DK), *ks = g_new (double, T * d.DK);
  g_autofree double *dq = g_new (double, B * T * d.HK * d.DK), *dk = g_new (double, B * T * d.HK * d.DK);
  memset (dq, 0, sizeof (double) * B * T * d.HK * d.DK);
  memset (dk, 0, sizeof (double) * B * T * d.HK * d.DK);
  for (gint64 bb = 0; bb < B; bb++)
    for (gint64 h = 0; h < d.HV; h++)
      {
        gint64 hk = h / d.rep;
        /* the forward, keeping every state: Sh[t + 1] after step t, Sh[0] zero */
        memset (Sh, 0, sizeof (double) * KV);
        for (gint64 t = 0; t < T; t++)
          {
            gint64 bt = bb * T + t;
            double rq, rk, g, beta, dgx;
            qk_of (qkv, &d, p->qk_l2norm, bt, hk, qs + t * d.DK, ks + t * d.DK, &rq, &rk);
            gates_of (a, b, A_log, p->dt_bias, &d, bt, h, &g, &beta, &dgx);
            double alpha = exp (g), *S = Sh + (t + 1) * KV;
            const double *k = ks + t * d.DK;
            const float *v = qkv + bt * d.CD + 2 * d.HK * d.DK + h * d.DV;
            for (gint64 j = 0; j < d.DV; j++)
              {
                double m = 0;
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    S[i * d.DV + j] = alpha * Sh[t * KV + i * d.DV + j];
                    m += S[i * d.DV + j] * k[i];
                  }
                double delta = beta * (v[j] - m);
                for (gint64 i = 0; i < d.DK; i++)
                  S[i * d.DV + j] += k[i] * delta;
              }
          }
        memset (G, 0, sizeof (double) * KV);
        for (gint64 t = T - 1; t >= 0; t--)
          {
            gint64 bt = bb * T + t;
            double rq, rk, g, beta, dgx;
            gates_of (a, b, A_log, p->dt_bias, &d, bt, h, &g, &beta, &dgx);
            double alpha = exp (g), dbeta = 0, dalpha = 0;
            const double *q = qs + t * d.DK, *k = ks + t * d.DK, *S = Sh + (t + 1) * KV, *Sp = Sh + t * KV;
            (void) rq, (void) rk;
            const float *v = qkv + bt * d.CD + 2 * d.HK * d.DK + h * d.DV;
            const float *go = dy + bt * d.HV * d.DV + h * d.DV;
            double *dqa = dq + (bt * d.HK + hk) * d.DK, *dka = dk + (bt * d.HK + hk) * d.DK;
            float *dv = dqkv + bt * d.CD + 2 * d.HK * d.DK + h * d.DV;
            for (gint64 j = 0; j < d.DV; j++)
              {
                double m = 0, ddelta = 0;
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    G[i * d.DV + j] += q[i] * go[j];
                    dqa[i] += S[i * d.DV + j] * go[j];
                    m += alpha * Sp[i * d.DV + j] * k[i];
                  }
                double delta = beta * (v[j] - m);
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    ddelta += G[i * d.DV + j] * k[i];
                    dka[i] += G[i * d.DV + j] * delta;
                  }
                dv[j] = (float) (beta * ddelta);
                dbeta += (v[j] - m) * ddelta;
                double dm = -beta * ddelta;
                for (gint64 i = 0; i < d.DK; i++)
                  {
                    dka[i] += alpha * Sp[i * d.DV + j] * dm;
                    G[i * d.DV + j] += k[i] * dm;
                  }
              }
            for (gint64 i = 0; i < KV; i++)
              {
                dalpha += G[i] * Sp[i];
                G[i] *= alpha;
              }
            double dg = dalpha * alpha, bs = beta;
            da[bt * d.HV + h] = (float) (dg * dgx);
            db[bt * d.HV + h] = (float) (dbeta * bs * (1.0 - bs));
            if (dA_log)
              dA_log[h] += (float) (dg * g);
            if (ddt_bias)
              ddt_bias[h] += (float) (dg * dgx);
          }
      }
  /* through the scale and the L2 norms of q and k */
  g_autofree double *du = g_new (double, d.DK);
  for (gint64 bt = 0; bt < B * T; bt++)
    for (gint64 hk = 0; hk < d.HK; hk++)
      {
        double q[HN_DELTA_MAX_KEY_DIM], k[HN_DELTA_MAX_KEY_DIM], rq, rk;
        g_assert (d.DK <= HN_DELTA_MAX_KEY_DIM);
        qk_of (qkv, &d, p->qk_l2norm, bt, hk, q, k, &rq, &rk);
        const float *qx = qkv + bt * d.CD + hk * d.DK, *kx = qkv + bt * d.CD + d.HK * d.DK + hk * d.DK;
        for (gint64 i = 0; i < d.DK; i++)
          du[i] = dq[(bt * d.HK + hk) * d.DK + i] * d.scale;
        norm_back (qx, rq, p->qk_l2norm, du, dqkv + bt * d.CD + hk * d.DK, d.DK);
        norm_back (kx, rk, p->qk_l2norm, dk + (bt * d.HK + hk) * d.DK, dqkv + bt * d.CD + d.HK * d.DK + hk * d.DK, d.DK);
      }
}
