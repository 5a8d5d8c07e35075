/* CPU references of the backward ops (see cpu-ref-back.h). */
#include "tensor/cpu-ref-back.h"

#include <math.h>
#include <string.h>

void
hn_ref_matmul_back (const float *dy, const float *x, const float *w, gint64 M, gint64 N, gint64 K, float *dx,
                    float *dw, float *db)
{
  if (dx)
    for (gint64 m = 0; m < M; m++)
      for (gint64 k = 0; k < K; k++)
        {
          double s = 0;
          for (gint64 n = 0; n < N; n++)
            s += (double) dy[m * N + n] * w[n * K + k];
          dx[m * K + k] = (float) s;
        }
  if (dw)
    for (gint64 n = 0; n < N; n++)
      for (gint64 k = 0; k < K; k++)
        {
          double s = 0;
          for (gint64 m = 0; m < M; m++)
            s += (double) dy[m * N + n] * x[m * K + k];
          dw[n * K + k] += (float) s;
        }
  if (db)
    for (gint64 n = 0; n < N; n++)
      {
        double s = 0;
        for (gint64 m = 0; m < M; m++)
          s += dy[m * N + n];
        db[n] += (float) s;
      }
}

void
hn_ref_rmsnorm_back (const float *dy, const float *x, const float *w, gint64 rows, gint64 cols, float eps,
                     gboolean plus_one, float *dx, float *dw)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *xr = x + r * cols, *dyr = dy + r * cols;
      double ss = 0;
      for (gint64 c = 0; c < cols; c++)
        ss += (double) xr[c] * xr[c];
      float inv = 1.0f / sqrtf ((float) (ss / cols) + eps);
      /* g = dy · w' ; dx = inv · (g - x̂ · mean(g · x̂)) */
      double dot = 0;
      for (gint64 c = 0; c < cols; c++)
        {
          float wc = w ? (plus_one ? 1.0f + w[c] : w[c]) : 1.0f;
          dot += (double) dyr[c] * wc * xr[c] * inv;
        }
      float mdot = (float) (dot / cols);
      for (gint64 c = 0; c < cols; c++)
        {
          float wc = w ? (plus_one ? 1.0f + w[c] : w[c]) : 1.0f;
          float xh = xr[c] * inv;
          if (dx)
            dx[r * cols + c] = inv * (dyr[c] * wc - xh * mdot);
          if (dw && w)
            dw[c] += dyr[c] * xh;
        }
    }
}

void
hn_ref_layernorm_back (const float *dy, const float *x, const float *w, gint64 rows, gint64 cols, float eps,
                       float *dx, float *dw, float *db)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *xr = x + r * cols, *dyr = dy + r * cols;
      double mean = 0, var = 0;
      for (gint64 c = 0; c < cols; c++)
        mean += xr[c];
      mean /= cols;
      for (gint64 c = 0; c < cols; c++)
        var += (xr[c] - mean) * (xr[c] - mean);
      var /= cols;
      float inv = 1.0f / sqrtf ((float) var + eps);
      double sg = 0, sgx = 0;
      for (gint64 c = 0; c < cols; c++)
        {
          float g = dyr[c] * (w ? w[c] : 1.0f);
          float xh = (float) (xr[c] - mean) * inv;
          sg += g;
          sgx += (double) g * xh;
        }
      float mg = (float) (sg / cols), mgx = (float) (sgx / cols);
      for (gint64 c = 0; c < cols; c++)
        {
          float g = dyr[c] * (w ? w[c] : 1.0f);
          float xh = (float) (xr[c] - mean) * inv;
          if (dx)
            dx[r * cols + c] = inv * (g - mg - xh * mgx);
          if (dw && w)
            dw[c] += dyr[c] * xh;
          if (db)
            db[c] += dyr[c];
        }
    }
}

static void
rope_apply (const float *x, const gint32 *positions, const float *inv_freq, gint64 n_tok, int n_head,
            int head_dim, int rot_dims, HnRopeStyle style, float attn_scale, float sign, float *y)
{
  int half = rot_dims / 2;
  for (gint64 t = 0; t < n_tok; t++)
    for (int h = 0; h < n_head; h++)
      {
        const float *xr = x + (t * n_head + h) * head_dim;
        float *yr = y + (t * n_head + h) * head_dim;
        float tmp[512];
        float *out = head_dim <= 512 ? tmp : yr; /* allow y == x */
        for (int i = 0; i < half; i++)
          {
            float ang = (float) positions[t] * inv_freq[i];
            float c = cosf (ang) * attn_scale, s = sign * sinf (ang) * attn_scale;
            int i0 = style == HN_ROPE_GPTJ ? 2 * i : i;
            int i1 = style == HN_ROPE_GPTJ ? 2 * i + 1 : i + half;
            float a = xr[i0], b = xr[i1];
            out[i0] = a * c - b * s;
            out[i1] = b * c + a * s;
          }
        for (int i = rot_dims; i < head_dim; i++)
          out[i] = xr[i];
        if (out != yr)
          memcpy (yr, out, sizeof (float) * head_dim);
      }
}

void
hn_ref_rope_fwd (const float *x, const gint32 *positions, const float *inv_freq, gint64 n_tok, int n_head,
                 int head_dim, int rot_dims, HnRopeStyle style, float attn_scale, float *y)
{
  rope_apply (x, positions, inv_freq, n_tok, n_head, head_dim, rot_dims, style, attn_scale, 1.0f, y);
}

void
hn_ref_rope_back (const float *dy, const gint32 *positions, const float *inv_freq, gint64 n_tok, int n_head,
                  int head_dim, int rot_dims, HnRopeStyle style, float attn_scale, float *dx)
{
  rope_apply (dy, positions, inv_freq, n_tok, n_head, head_dim, rot_dims, style, attn_scale, -1.0f, dx);
}

void
hn_ref_softmax_back (const float *dy, const float *y, const float *x, gint64 rows, gint64 cols, float scale,
                     float softcap, float *dx)
{
  if (scale == 0.0f)
    scale = 1.0f;
  for (gint64 r = 0; r < rows; r++)
    {
      const float *yr = y + r * cols, *dyr = dy + r * cols;
      double dot = 0;
      for (gint64 c = 0; c < cols; c++)
        dot += (double) dyr[c] * yr[c];
      for (gint64 c = 0; c < cols; c++)
        {
          float g = yr[c] * (dyr[c] - (float) dot) * scale;
          if (softcap > 0.0f)
            {
              float t = tanhf (x[r * cols + c] * scale / softcap);
              g *= 1.0f - t * t;
            }
          dx[r * cols + c] = g;
        }
    }
}

/* Scores of query (b, t, h) against every key; hidden keys get -inf. Also
 * returns the raw pre-cap scaled score for the softcap derivative. */
static void
attn_row_probs (const HnRefAttnShape *s, const float *q, const float *k, int b, int t, int h, float *p,
                float *tanh_out)
{
  int D = s->head_dim, S = s->n_kv, kvh = h / (s->n_head / s->n_kv_head);
  float scale = s->scale != 0.0f ? s->scale : 1.0f / sqrtf ((float) D);
  const float *qr = q + (((gint64) b * s->n_q + t) * s->n_head + h) * D;
  gint64 p_pos = s->pos0 + t;
  float mx = -INFINITY;
  for (int j = 0; j < S; j++)
    {
      gboolean hidden = (s->causal && j > p_pos) || (s->window > 0 && j <= p_pos - s->window);
      if (hidden)
        {
          p[j] = -INFINITY;
          if (tanh_out)
            tanh_out[j] = 0;
          continue;
        }
      const float *kr = k + (((gint64) b * S + j) * s->n_kv_head + kvh) * D;
      double dot = 0;
      for (int d = 0; d < D; d++)
        dot += (double) qr[d] * kr[d];
      float sc = (float) dot * scale;
      if (s->softcap > 0.0f)
        {
          float th = tanhf (sc / s->softcap);
          if (tanh_out)
            tanh_out[j] = th;
          sc = s->softcap * th;
        }
      if (s->alibi_slopes)
        sc += s->alibi_slopes[h] * (float) (j - p_pos);
      p[j] = sc;
      mx = MAX (mx, sc);
    }
  double sum = 0;
  for (int j = 0; j < S; j++)
    {
      p[j] = isinf (p[j]) ? 0.0f : expf (p[j] - mx);
      sum += p[j];
    }
  for (int j = 0; j < S; j++)
    p[j] = sum > 0 ? (float) (p[j] / sum) : 0.0f;
}

void
hn_ref_attention_fwd (const HnRefAttnShape *s, const float *q, const float *k, const float *v, float *out)
{
  int S = s->n_kv, Dv = s->v_dim, grp = s->n_head / s->n_kv_head;
  g_autofree float *p = g_new (float, S);
  for (int b = 0; b < s->batch; b++)
    for (int t = 0; t < s->n_q; t++)
      for (int h = 0; h < s->n_head; h++)
        {
          attn_row_probs (s, q, k, b, t, h, p, NULL);
          float *o = out + (((gint64) b * s->n_q + t) * s->n_head + h) * Dv;
          for (int d = 0; d < Dv; d++)
            {
              double acc = 0;
              for (int j = 0; j < S; j++)
                acc += (double) p[j] * v[(((gint64) b * S + j) * s->n_kv_head + h / grp) * Dv + d];
              o[d] = (float) acc;
            }
        }
}

void
hn_ref_attention_back (const HnRefAttnShape *s, const float *q, const float *k, const float *v, const float *dout,
                       float *dq, float *dk, float *dv)
{
  int S = s->n_kv, D = s->head_dim, Dv = s->v_dim, grp = s->n_head / s->n_kv_head;
  float scale = s->scale != 0.0f ? s->scale : 1.0f / sqrtf ((float) D);
  g_autofree float *p = g_new (float, S);
  g_autofree float *th = g_new (float, S);
  g_autofree float *dp = g_new (float, S);
  if (dk)
    memset (dk, 0, sizeof (float) * (gsize) s->batch * S * s->n_kv_head * D);
  if (dv)
    memset (dv, 0, sizeof (float) * (gsize) s->batch * S * s->n_kv_head * Dv);
  for (int b = 0; b < s->batch; b++)
    for (int t = 0; t < s->n_q; t++)
      for (int h = 0; h < s->n_head; h++)
        {
          int kvh = h / grp;
          attn_row_probs (s, q, k, b, t, h, p, th);
          const float *dor = dout + (((gint64) b * s->n_q + t) * s->n_head + h) * Dv;
          const float *qr = q + (((gint64) b * s->n_q + t) * s->n_head + h) * D;
          double dot = 0;
          for (int j = 0; j < S; j++)
            {
              const float *vr = v + (((gint64) b * S + j) * s->n_kv_head + kvh) * Dv;
              double a = 0;
              for (int d = 0; d < Dv; d++)
                a += (double) dor[d] * vr[d];
              dp[j] = (float) a;
              dot += a * p[j];
              if (dv)
                for (int d = 0; d < Dv; d++)
                  dv[(((gint64) b * S + j) * s->n_kv_head + kvh) * Dv + d] += p[j] * dor[d];
            }
          float *dqr = dq ? dq + (((gint64) b * s->n_q + t) * s->n_head + h) * D : NULL;
          if (dqr)
            memset (dqr, 0, sizeof (float) * D);
          for (int j = 0; j < S; j++)
            {
              float ds = p[j] * (dp[j] - (float) dot);
              if (ds == 0.0f)
                continue;
              if (s->softcap > 0.0f)
                ds *= 1.0f - th[j] * th[j];
              ds *= scale;
              const float *kr = k + (((gint64) b * S + j) * s->n_kv_head + kvh) * D;
              if (dqr)
                for (int d = 0; d < D; d++)
                  dqr[d] += ds * kr[d];
              if (dk)
                for (int d = 0; d < D; d++)
                  dk[(((gint64) b * S + j) * s->n_kv_head + kvh) * D + d] += ds * qr[d];
            }
        }
}

float
hn_ref_act (HnActivation act, float x)
{
  switch (act)
    {
    case HN_ACT_SILU: return x / (1.0f + expf (-x));
    case HN_ACT_GELU: return 0.5f * x * (1.0f + erff (x * (float) M_SQRT1_2));
    case HN_ACT_GELU_TANH:
      {
        const float k = 0.7978845608028654f;
        return 0.5f * x * (1.0f + tanhf (k * (x + 0.044715f * x * x * x)));
      }
    case HN_ACT_RELU: return x > 0 ? x : 0;
    case HN_ACT_RELU2: return x > 0 ? x * x : 0;
    case HN_ACT_QUICK_GELU: return x / (1.0f + expf (-1.702f * x));
    case HN_ACT_SIGMOID: return 1.0f / (1.0f + expf (-x));
    case HN_ACT_TANH: return tanhf (x);
    case HN_ACT_IDENTITY:
    default: return x;
    }
}

float
hn_ref_act_grad (HnActivation act, float x)
{
  switch (act)
    {
    case HN_ACT_SILU:
      {
        float sg = 1.0f / (1.0f + expf (-x));
        return sg * (1.0f + x * (1.0f - sg));
      }
    case HN_ACT_GELU:
      {
        float cdf = 0.5f * (1.0f + erff (x * (float) M_SQRT1_2));
        float pdf = expf (-0.5f * x * x) * 0.3989422804014327f;
        return cdf + x * pdf;
      }
    case HN_ACT_GELU_TANH:
      {
        const float k = 0.7978845608028654f;
        float u = k * (x + 0.044715f * x * x * x);
        float t = tanhf (u);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
      }
    case HN_ACT_RELU: return x > 0 ? 1.0f : 0.0f;
    case HN_ACT_RELU2: return x > 0 ? 2.0f * x : 0.0f;
    case HN_ACT_QUICK_GELU:
      {
        float sg = 1.0f / (1.0f + expf (-1.702f * x));
        return sg + 1.702f * x * sg * (1.0f - sg);
      }
    case HN_ACT_SIGMOID:
      {
        float sg = 1.0f / (1.0f + expf (-x));
        return sg * (1.0f - sg);
      }
    case HN_ACT_TANH:
      {
        float t = tanhf (x);
        return 1.0f - t * t;
      }
    case HN_ACT_IDENTITY:
    default: return 1.0f;
    }
}

void
hn_ref_unary_back (const float *dy, const float *x, gint64 n, HnActivation act, float *dx)
{
  for (gint64 i = 0; i < n; i++)
    dx[i] = dy[i] * hn_ref_act_grad (act, x[i]);
}

void
hn_ref_glu_back (const float *dy, const float *gate, const float *up, gint64 n, HnActivation act, float *dgate,
                 float *dup)
{
  for (gint64 i = 0; i < n; i++)
    {
      if (dgate)
        dgate[i] = dy[i] * up[i] * hn_ref_act_grad (act, gate[i]);
      if (dup)
        dup[i] = dy[i] * hn_ref_act (act, gate[i]);
    }
}

void
hn_ref_embedding_back (const float *dy, const gint32 *ids, gint64 n, gint64 dim, gint64 vocab, float *dtable)
{
  for (gint64 i = 0; i < n; i++)
    {
      if (ids[i] < 0 || ids[i] >= vocab)
        continue;
      for (gint64 c = 0; c < dim; c++)
        dtable[(gint64) ids[i] * dim + c] += dy[i * dim + c];
    }
}

double
hn_ref_cross_entropy_loss (const float *logits, const gint32 *targets, const float *weights, gint64 n,
                           gint64 vocab, gint32 ignore_index, float dloss, float *dlogits)
{
  double wsum = 0, lsum = 0;
  for (gint64 i = 0; i < n; i++)
    if (targets[i] != ignore_index)
      wsum += weights ? weights[i] : 1.0;
  for (gint64 i = 0; i < n; i++)
    {
      const float *lr = logits + i * vocab;
      float *dr = dlogits ? dlogits + i * vocab : NULL;
      if (targets[i] == ignore_index || wsum == 0)
        {
          if (dr)
            memset (dr, 0, sizeof (float) * vocab);
          continue;
        }
      if (targets[i] < 0 || targets[i] >= vocab)
        {
          lsum = NAN;
          if (dr)
            for (gint64 c = 0; c < vocab; c++)
              dr[c] = NAN;
          continue;
        }
      float mx = -INFINITY;
      for (gint64 c = 0; c < vocab; c++)
        mx = MAX (mx, lr[c]);
      double se = 0;
      for (gint64 c = 0; c < vocab; c++)
        se += exp ((double) lr[c] - mx);
      double lse = mx + log (se);
      double wi = weights ? weights[i] : 1.0;
      lsum += wi * (lse - lr[targets[i]]);
      if (dr)
        {
          float f = (float) (dloss * wi / wsum);
          for (gint64 c = 0; c < vocab; c++)
            {
              float pc = (float) exp ((double) lr[c] - lse);
              dr[c] = f * (pc - (c == targets[i] ? 1.0f : 0.0f));
            }
        }
    }
  return wsum > 0 ? lsum / wsum : 0.0;
}

double
hn_ref_sumsq (const float *x, gint64 n)
{
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) x[i] * x[i];
  return s;
}
