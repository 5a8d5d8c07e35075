/* CPU references of the state-space ops (ops-ssm.h): plain loops with double
 * sums, the ground truth for the shaders; tests/engine/test-ops-ssm.c checks
 * the backward ones against finite differences of the forward ones. */
#include "recurrent/ops-ssm.h"
#include "tensor/cpu-ref-back.h"
#include "tensor/hn-cpu-ref.h"

#include <math.h>
#include <string.h>

/* P[q] of concat(state, x) for one (b, c): q < K - 1 reads the state. */
static double
conv_p (const float *x, const float *state, gint64 b, gint64 T, gint64 C, gint64 K, gint64 c, gint64 q)
{
  gint64 j = q - (K - 1);
  if (j >= 0)
    return x[(b * T + j) * C + c];
  return state ? state[(b * (K - 1) + q) * C + c] : 0.0;
}

static double
conv_pre (const float *x, const float *w, const float *bias, const float *state, gint64 b, gint64 T, gint64 C,
          gint64 K, gint64 c, gint64 t)
{
  double s = bias ? bias[c] : 0.0;
  for (gint64 k = 0; k < K; k++)
    s += (double) w[c * K + k] * conv_p (x, state, b, T, C, K, c, t + k);
  return s;
}

void
hn_ref_conv1d_causal (float *out, const float *x, const float *w, const float *bias, float *state, gint64 B, gint64 T,
                      gint64 C, gint64 K, HnActivation act)
{
  for (gint64 b = 0; b < B; b++)
    for (gint64 t = 0; t < T; t++)
      for (gint64 c = 0; c < C; c++)
        out[(b * T + t) * C + c] = (float) hn_ref_activation (act, conv_pre (x, w, bias, state, b, T, C, K, c, t));
  if (!state || K < 2)
    return;
  g_autofree float *next = g_new (float, B * (K - 1) * C);
  for (gint64 b = 0; b < B; b++)
    for (gint64 r = 0; r < K - 1; r++)
      for (gint64 c = 0; c < C; c++)
        next[(b * (K - 1) + r) * C + c] = (float) conv_p (x, state, b, T, C, K, c, T + r);
  memcpy (state, next, sizeof (float) * B * (K - 1) * C);
}

void
hn_ref_conv1d_causal_back (const float *dy, const float *x, const float *w, const float *bias, gint64 B, gint64 T,
                           gint64 C, gint64 K, HnActivation act, float *dx, float *dw, float *dbias)
{
  g_autofree double *g = g_new (double, T);
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < C; c++)
      {
        for (gint64 t = 0; t < T; t++)
          {
            double pre = conv_pre (x, w, bias, NULL, b, T, C, K, c, t);
            g[t] = dy[(b * T + t) * C + c] * (double) hn_ref_act_grad (act, (float) pre);
            if (dbias)
              dbias[c] += (float) g[t];
            for (gint64 k = 0; dw && k < K; k++)
              dw[c * K + k] += (float) (g[t] * conv_p (x, NULL, b, T, C, K, c, t + k));
          }
        for (gint64 s = 0; dx && s < T; s++)
          {
            /* x[s] is P[s + K - 1], used by out[t] with t + k = s + K - 1 */
            double acc = 0;
            for (gint64 k = 0; k < K; k++)
              {
                gint64 t = s + K - 1 - k;
                if (t < T)
                  acc += g[t] * w[c * K + k];
              }
            dx[(b * T + s) * C + c] = (float) acc;
          }
      }
}

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

/* The layout of one channel: head, group and where its dt, A, B/C rows sit. */
typedef struct {
  gint64 hd, H, G, hpg, N;
} ScanGeo;

static ScanGeo
scan_geo (gint64 I, gint64 N, const HnRefSsmScan *p)
{
  ScanGeo g;
  g.hd = p->head_dim > 1 ? p->head_dim : 1;
  g.H = I / g.hd;
  g.G = p->n_groups > 1 ? p->n_groups : 1;
  g.hpg = g.H / g.G;
  g.N = N;
  return g;
}

static double
a_of (const float *A_log, const ScanGeo *g, const HnRefSsmScan *p, gint64 h, gint64 n)
{
  return -exp ((double) (p->a_per_head ? A_log[h] : A_log[h * g->N + n]));
}

/* delta from the raw dt (+ bias): softplus, clamp; *dd = d delta / d raw */
static double
delta_of (double raw, const HnRefSsmScan *p, double *dd)
{
  double d = raw, g = 1.0;
  if (p->dt_softplus)
    {
      g = raw <= 20.0 ? sigmoid_d (raw) : 1.0;
      d = softplus_t (raw);
    }
  if (p->dt_limit && (d < p->dt_min || d > p->dt_max))
    {
      d = d < p->dt_min ? p->dt_min : p->dt_max;
      g = 0.0;
    }
  if (dd)
    *dd = g;
  return d;
}

void
hn_ref_ssm_scan (float *y, const float *x, const float *dt, const float *A_log, const float *B, const float *C,
                 gint64 nb, gint64 T, gint64 I, gint64 N, const HnRefSsmScan *p)
{
  ScanGeo g = scan_geo (I, N, p);
  g_autofree double *h = g_new (double, N);
  for (gint64 b = 0; b < nb; b++)
    for (gint64 i = 0; i < I; i++)
      {
        gint64 hh = i / g.hd, gg = hh / g.hpg;
        for (gint64 n = 0; n < N; n++)
          h[n] = p->state ? p->state[(b * I + i) * N + n] : 0.0;
        for (gint64 t = 0; t < T; t++)
          {
            gint64 ti = (b * T + t) * I + i, th = (b * T + t) * g.H + hh, tn = ((b * T + t) * g.G + gg) * N;
            double d = delta_of (dt[th] + (p->dt_bias ? p->dt_bias[hh] : 0.0), p, NULL);
            double u = x[ti], acc = 0;
            for (gint64 n = 0; n < N; n++)
              {
                h[n] = exp (d * a_of (A_log, &g, p, hh, n)) * h[n] + d * B[tn + n] * u;
                acc += h[n] * C[tn + n];
              }
            if (p->D)
              acc += p->D[hh] * u;
            if (p->z)
              acc *= p->z[ti] * sigmoid_d (p->z[ti]);
            y[ti] = (float) acc;
          }
        for (gint64 n = 0; p->state && n < N; n++)
          p->state[(b * I + i) * N + n] = (float) h[n];
      }
}

void
hn_ref_ssm_scan_back (const float *dy, const float *x, const float *dt, const float *A_log, const float *B,
                      const float *C, gint64 nb, gint64 T, gint64 I, gint64 N, const HnRefSsmScan *p, float *dx,
                      float *ddt, float *dA_log, float *dB, float *dC, float *dD, float *dz, float *ddt_bias)
{
  ScanGeo g = scan_geo (I, N, p);
  gint64 nbg = nb * T * g.G * N;
  g_autofree double *hs = g_new (double, T * N), *gh = g_new (double, N), *delta = g_new (double, T);
  g_autofree double *ddr = g_new (double, T);
  g_autofree double *dBs = g_new0 (double, nbg), *dCs = g_new0 (double, nbg), *ddts = g_new0 (double, nb * T * g.H);
  for (gint64 b = 0; b < nb; b++)
    for (gint64 i = 0; i < I; i++)
      {
        gint64 hh = i / g.hd, gg = hh / g.hpg;
        /* the forward, keeping every state */
        for (gint64 t = 0; t < T; t++)
          {
            gint64 ti = (b * T + t) * I + i, th = (b * T + t) * g.H + hh, tn = ((b * T + t) * g.G + gg) * N;
            delta[t] = delta_of (dt[th] + (p->dt_bias ? p->dt_bias[hh] : 0.0), p, &ddr[t]);
            for (gint64 n = 0; n < N; n++)
              {
                double prev = t > 0 ? hs[(t - 1) * N + n] : 0.0;
                hs[t * N + n] = exp (delta[t] * a_of (A_log, &g, p, hh, n)) * prev + delta[t] * B[tn + n] * x[ti];
              }
          }
        for (gint64 n = 0; n < N; n++)
          gh[n] = 0;
        for (gint64 t = T - 1; t >= 0; t--)
          {
            gint64 ti = (b * T + t) * I + i, th = (b * T + t) * g.H + hh, tn = ((b * T + t) * g.G + gg) * N;
            double u = x[ti], d = delta[t], Dv = p->D ? p->D[hh] : 0.0;
            double yc = Dv * u;
            for (gint64 n = 0; n < N; n++)
              yc += hs[t * N + n] * C[tn + n];
            double gy = dy[ti];
            if (p->z)
              {
                double zz = p->z[ti], s = sigmoid_d (zz);
                if (dz)
                  dz[ti] = (float) (gy * yc * s * (1.0 + zz * (1.0 - s)));
                gy *= zz * s;
              }
            if (dD && p->D)
              dD[hh] += (float) (gy * u);
            double du = gy * Dv, ddelta = 0;
            for (gint64 n = 0; n < N; n++)
              {
                double a = a_of (A_log, &g, p, hh, n), e = exp (d * a);
                double prev = t > 0 ? hs[(t - 1) * N + n] : 0.0;
                dCs[tn + n] += gy * hs[t * N + n];
                gh[n] += gy * C[tn + n];
                ddelta += gh[n] * (prev * a * e + B[tn + n] * u);
                dA_log[p->a_per_head ? hh : hh * N + n] += (float) (gh[n] * prev * d * e * a);
                dBs[tn + n] += gh[n] * d * u;
                du += gh[n] * d * B[tn + n];
                gh[n] *= e;
              }
            double gdt = ddelta * ddr[t];
            ddts[th] += gdt;
            if (ddt_bias && p->dt_bias)
              ddt_bias[hh] += (float) gdt;
            dx[ti] = (float) du;
          }
      }
  for (gint64 q = 0; q < nbg; q++)
    {
      dB[q] = (float) dBs[q];
      dC[q] = (float) dCs[q];
    }
  for (gint64 q = 0; q < nb * T * g.H; q++)
    ddt[q] = (float) ddts[q];
}

/* ---------------------------------------------------------------- RWKV-4 WKV */

void
hn_ref_wkv4 (float *y, const float *k, const float *v, const float *time_decay, const float *time_first,
             float *state, gint64 B, gint64 T, gint64 A)
{
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < A; c++)
      {
        float num = 0.0f, den = 0.0f, mx = HN_WKV4_MAX_INIT;
        if (state)
          {
            num = state[(b * 3 + 0) * A + c];
            den = state[(b * 3 + 1) * A + c];
            mx = state[(b * 3 + 2) * A + c];
          }
        float w = -expf (time_decay[c]), u = time_first[c];
        for (gint64 t = 0; t < T; t++)
          {
            gint64 i = (b * T + t) * A + c;
            float kt = k[i], vt = v[i];
            float q = fmaxf (mx, kt + u);
            float e1 = expf (mx - q), e2 = expf (kt + u - q);
            y[i] = (e1 * num + e2 * vt) / (e1 * den + e2);
            q = fmaxf (mx + w, kt);
            e1 = expf (mx + w - q);
            e2 = expf (kt - q);
            num = e1 * num + e2 * vt;
            den = e1 * den + e2;
            mx = q;
          }
        if (state)
          {
            state[(b * 3 + 0) * A + c] = num;
            state[(b * 3 + 1) * A + c] = den;
            state[(b * 3 + 2) * A + c] = mx;
          }
      }
}

/* With a_t = Σ_{i<=t} e^{(t-i)w + k_i} v_i and b_t the same without v (a_{-1} = b_{-1} = 0):
 * y_t = (a_{t-1} + E_t v_t) / (b_{t-1} + E_t), E_t = e^{u + k_t}. Reverse mode over t, carrying
 * the gradients of a_t and b_t. */
void
hn_ref_wkv4_back (const float *dy, const float *k, const float *v, const float *time_decay, const float *time_first,
                  gint64 B, gint64 T, gint64 A, float *dk, float *dv, float *dtime_decay, float *dtime_first)
{
  g_autofree double *a = g_new (double, T + 1), *bb = g_new (double, T + 1);
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < A; c++)
      {
        double w = -exp ((double) time_decay[c]), ew = exp (w), u = time_first[c];
        a[0] = bb[0] = 0.0; /* a[t + 1] = a_t */
        for (gint64 t = 0; t < T; t++)
          {
            gint64 i = (b * T + t) * A + c;
            double ek = exp ((double) k[i]);
            a[t + 1] = ew * a[t] + ek * v[i];
            bb[t + 1] = ew * bb[t] + ek;
          }
        double ga = 0.0, gb = 0.0, gw = 0.0, gu = 0.0;
        for (gint64 t = T - 1; t >= 0; t--)
          {
            gint64 i = (b * T + t) * A + c;
            double E = exp (u + k[i]), ek = exp ((double) k[i]), vt = v[i], g = dy[i];
            double D = bb[t] + E, y = (a[t] + E * vt) / D;
            /* a_t, b_t = ew · (a, b)_{t-1} + e^{k_t} (v_t, 1): their gradients ga, gb (from later steps) */
            double gk = ek * (vt * ga + gb), gv = ek * ga;
            gw += ew * (a[t] * ga + bb[t] * gb);
            /* y_t */
            double gE = g * (vt - y) / D;
            gk += gE * E;
            gu += gE * E;
            gv += g * E / D;
            if (dk)
              dk[i] = (float) gk;
            if (dv)
              dv[i] = (float) gv;
            ga = ew * ga + g / D;
            gb = ew * gb - g * y / D;
          }
        if (dtime_decay)
          dtime_decay[c] += (float) (gw * w); /* dw/dtime_decay = -exp(time_decay) = w */
        if (dtime_first)
          dtime_first[c] += (float) gu;
      }
}
