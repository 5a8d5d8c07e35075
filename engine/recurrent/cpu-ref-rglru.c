/* CPU references of the RG-LRU (ops-rglru.h), in double. */
#include <math.h>

#include "recurrent/ops-rglru.h"

static double
sigm (double v)
{
  return 1.0 / (1.0 + exp (-v));
}

static double
softplus20 (double v)
{
  return v > 20.0 ? v : log1p (exp (v)); /* torch's softplus, threshold 20 */
}

void
hn_ref_rglru (float *y, const float *x, const float *gx, const float *ga, const float *lambda, float *state,
              gboolean reset, gint64 B, gint64 T, gint64 C)
{
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < C; c++)
      {
        double h = state ? state[b * C + c] : 0.0, sp = softplus20 (lambda[c]);
        for (gint64 t = 0; t < T; t++)
          {
            gint64 i = (b * T + t) * C + c;
            double u = x[i] * sigm (gx[i]), la = -8.0 * sigm (ga[i]) * sp;
            if (reset && t == 0)
              h = u;
            else
              h = exp (la) * h + sqrt (1.0 - exp (2.0 * la)) * u;
            y[i] = (float) h;
          }
        if (state)
          state[b * C + c] = (float) h;
      }
}

void
hn_ref_rglru_back (const float *dy, const float *x, const float *gx, const float *ga, const float *lambda,
                   gint64 B, gint64 T, gint64 C, float *dx, float *dgx, float *dga, float *dlambda)
{
  g_autofree double *hs = g_new (double, T);
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < C; c++)
      {
        double sp = softplus20 (lambda[c]), sg = sigm (lambda[c]), h = 0.0, dl = 0.0;
        for (gint64 t = 0; t < T; t++) /* the states, recomputed */
          {
            gint64 i = (b * T + t) * C + c;
            double u = x[i] * sigm (gx[i]), la = -8.0 * sigm (ga[i]) * sp;
            h = t == 0 ? u : exp (la) * h + sqrt (1.0 - exp (2.0 * la)) * u;
            hs[t] = h;
          }
        double g = 0.0; /* dL/dh_t, carried backward */
        for (gint64 t = T - 1; t >= 0; t--)
          {
            gint64 i = (b * T + t) * C + c;
            double gi = sigm (gx[i]), gr = sigm (ga[i]), la = -8.0 * gr * sp, a = exp (la);
            g += dy[i];
            double m = 1.0, dla = 0.0;
            if (t > 0)
              {
                double z = 1.0 - a * a;
                m = sqrt (z);
                /* d h / d log a: a · h_{t-1} + x · i · dm/dz · dz/dlog a, dz/dlog a = -2a² */
                dla = g * (a * hs[t - 1] + x[i] * gi * (-2.0 * a * a) / sqrt (fmax (4.0 * z, 1e-6)));
              }
            dx[i] = (float) (g * gi * m);
            dgx[i] = (float) (g * x[i] * m * gi * (1.0 - gi));
            dga[i] = (float) (dla * -8.0 * sp * gr * (1.0 - gr));
            dl += dla * -8.0 * gr * sg;
            g = t > 0 ? g * a : 0.0;
          }
        if (dlambda)
          dlambda[c] += (float) dl;
      }
}
