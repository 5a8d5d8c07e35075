/* CPU references (see hn-cpu-ref.h): straightforward, double accumulation. */
#include "tensor/hn-cpu-ref.h"

#include <math.h>
#include <string.h>

double
hn_ref_activation (HnActivation act, double x)
{
  switch (act)
    {
    case HN_ACT_SILU: return x / (1.0 + exp (-x));
    case HN_ACT_GELU: return 0.5 * x * erfc (-x / sqrt (2.0));
    case HN_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh (sqrt (2.0 / G_PI) * (x + 0.044715 * x * x * x)));
    case HN_ACT_RELU: return x > 0 ? x : 0;
    case HN_ACT_RELU2: return x > 0 ? x * x : 0;
    case HN_ACT_QUICK_GELU: return x / (1.0 + exp (-1.702 * x));
    case HN_ACT_SIGMOID: return 1.0 / (1.0 + exp (-x));
    case HN_ACT_TANH: return tanh (x);
    case HN_ACT_SOFTPLUS: return (x > 0 ? x : 0) + log1p (exp (-fabs (x)));
    case HN_ACT_IDENTITY:
    default: return x;
    }
}

void
hn_ref_matmul (float *y, const float *x, const float *w, const float *bias, gint64 M, gint64 N, gint64 K)
{
  for (gint64 m = 0; m < M; m++)
    for (gint64 n = 0; n < N; n++)
      {
        double s = 0;
        for (gint64 k = 0; k < K; k++)
          s += (double) x[m * K + k] * w[n * K + k];
        y[m * N + n] = (float) (s + (bias ? bias[n] : 0));
      }
}

void
hn_ref_bmm (float *c, const float *a, const float *b, gint64 batch, gint64 a_batch, gint64 b_batch, gint64 M,
            gint64 N, gint64 K, HnMatmulFlags flags, float alpha)
{
  gboolean ta = flags & HN_MATMUL_TRANS_A, tb = flags & HN_MATMUL_TRANS_B;
  for (gint64 bi = 0; bi < batch; bi++)
    {
      const float *A = a + (a_batch == 1 ? 0 : bi * M * K);
      const float *B = b + (b_batch == 1 ? 0 : bi * K * N);
      float *C = c + bi * M * N;
      for (gint64 m = 0; m < M; m++)
        for (gint64 n = 0; n < N; n++)
          {
            double s = 0;
            for (gint64 k = 0; k < K; k++)
              s += (double) (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
            double v = alpha * s;
            if (flags & HN_MATMUL_ACCUMULATE)
              v += C[m * N + n];
            C[m * N + n] = (float) v;
          }
    }
}

void
hn_ref_binary (float *out, const float *a, const gint64 as[4], const float *b, const gint64 bs[4], const gint64 os[4],
               HnBinaryOp op)
{
  gint64 n = os[0] * os[1] * os[2] * os[3];
  for (gint64 i = 0; i < n; i++)
    {
      gint64 idx[4], r = i;
      for (int d = 3; d >= 0; d--)
        {
          idx[d] = r % os[d];
          r /= os[d];
        }
      gint64 ia = 0, ib = 0;
      for (int d = 0; d < 4; d++)
        {
          ia = ia * as[d] + (as[d] == 1 ? 0 : idx[d]);
          ib = ib * bs[d] + (bs[d] == 1 ? 0 : idx[d]);
        }
      double x = a[ia], y = b[ib], z;
      switch (op)
        {
        case HN_BINARY_ADD: z = x + y; break;
        case HN_BINARY_SUB: z = x - y; break;
        case HN_BINARY_MUL: z = x * y; break;
        default: z = x / y; break;
        }
      out[i] = (float) z;
    }
}

void
hn_ref_unary (float *out, const float *in, gint64 n, HnActivation act)
{
  for (gint64 i = 0; i < n; i++)
    out[i] = (float) hn_ref_activation (act, in[i]);
}

void
hn_ref_scale (float *out, const float *in, gint64 n, float scale, float offset)
{
  for (gint64 i = 0; i < n; i++)
    out[i] = (float) ((double) in[i] * scale + offset);
}

void
hn_ref_clamp (float *out, const float *in, gint64 n, float lo, float hi)
{
  for (gint64 i = 0; i < n; i++)
    out[i] = in[i] < lo ? lo : in[i] > hi ? hi : in[i];
}

void
hn_ref_glu (float *out, const float *gate, const float *up, gint64 rows, gint64 F, HnActivation act)
{
  for (gint64 r = 0; r < rows; r++)
    for (gint64 f = 0; f < F; f++)
      {
        double g = up ? gate[r * F + f] : gate[r * 2 * F + f];
        double u = up ? up[r * F + f] : gate[r * 2 * F + F + f];
        out[r * F + f] = (float) (hn_ref_activation (act, g) * u);
      }
}

void
hn_ref_embedding (float *out, const float *table, gint64 V, gint64 D, const gint32 *ids, gint64 n)
{
  for (gint64 i = 0; i < n; i++)
    for (gint64 d = 0; d < D; d++)
      out[i * D + d] = ids[i] >= 0 && ids[i] < V ? table[(gint64) ids[i] * D + d] : 0.0f;
}

static float
round_bf16 (float f)
{
  return hn_bf16_to_f32 (hn_f32_to_bf16 (f));
}

static float
round_f16 (float f)
{
  return hn_f16_to_f32 (hn_f32_to_f16 (f));
}

void
hn_ref_rmsnorm (float *out, const float *x, const float *w, gint64 rows, gint64 cols, float eps, HnNormFlags flags)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *xr = x + r * cols;
      double ss = 0;
      for (gint64 c = 0; c < cols; c++)
        ss += (double) xr[c] * xr[c];
      double inv = 1.0 / sqrt (ss / cols + eps);
      for (gint64 c = 0; c < cols; c++)
        {
          double y = xr[c] * inv;
          if (flags & HN_NORM_ROUND_BF16)
            y = round_bf16 ((float) y);
          if (flags & HN_NORM_ROUND_F16)
            y = round_f16 ((float) y);
          if (w)
            y *= (flags & HN_NORM_WEIGHT_PLUS_ONE) ? 1.0 + w[c] : w[c];
          out[r * cols + c] = (float) y;
        }
    }
}

void
hn_ref_layernorm (float *out, const float *x, const float *w, const float *b, gint64 rows, gint64 cols, float eps)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *xr = x + r * cols;
      double mean = 0, var = 0;
      for (gint64 c = 0; c < cols; c++)
        mean += xr[c];
      mean /= cols;
      for (gint64 c = 0; c < cols; c++)
        var += (xr[c] - mean) * (xr[c] - mean);
      double inv = 1.0 / sqrt (var / cols + eps);
      for (gint64 c = 0; c < cols; c++)
        {
          double y = (xr[c] - mean) * inv;
          if (w)
            y *= w[c];
          if (b)
            y += b[c];
          out[r * cols + c] = (float) y;
        }
    }
}

void
hn_ref_softmax (float *out, const float *in, gint64 rows, gint64 cols, gint64 T, const HnSoftmaxParams *p,
                const float *mask, gint64 mask_B, gint64 mask_T)
{
  double scale = p->scale != 0 ? p->scale : 1.0;
  g_autofree double *v = g_new (double, cols);
  for (gint64 r = 0; r < rows; r++)
    {
      gint64 pos = p->pos0 + r % T;
      double mx = -INFINITY;
      for (gint64 c = 0; c < cols; c++)
        {
          double x = in[r * cols + c] * scale;
          if (p->softcap > 0)
            x = p->softcap * tanh (x / p->softcap);
          if ((p->causal && c > pos) || (p->window > 0 && c <= pos - p->window))
            x = -INFINITY;
          else if (mask)
            {
              gint64 mb = r / (rows / mask_B), mt = mask_T == 1 ? 0 : r % T;
              x += mask[(mb * mask_T + mt) * cols + c];
            }
          v[c] = x;
          mx = MAX (mx, x);
        }
      double s = 0;
      for (gint64 c = 0; c < cols; c++)
        s += mx == -INFINITY ? 0 : exp (v[c] - mx);
      for (gint64 c = 0; c < cols; c++)
        out[r * cols + c] = mx == -INFINITY || s == 0 ? 0.0f : (float) (exp (v[c] - mx) / s);
    }
}

void
hn_ref_rope (float *out, const float *x, gint64 rows, gint64 H, gint64 D, const gint32 *positions,
             const float *inv_freq, int rot, HnRopeStyle style, float attn_scale)
{
  int half = rot / 2;
  for (gint64 r = 0; r < rows; r++)
    {
      const float *xr = x + r * D;
      float *orow = out + r * D;
      for (gint64 d = rot; d < D; d++)
        orow[d] = xr[d];
      for (int i = 0; i < half; i++)
        {
          /* the angle is an f32 product, as in transformers */
          float ang = (float) positions[r / H] * inv_freq[i];
          double c = cos ((double) ang) * attn_scale, s = sin ((double) ang) * attn_scale;
          int a = style == HN_ROPE_NEOX ? i : 2 * i, b = style == HN_ROPE_NEOX ? i + half : 2 * i + 1;
          double xa = xr[a], xb = xr[b];
          orow[a] = (float) (xa * c - xb * s);
          orow[b] = (float) (xb * c + xa * s);
        }
    }
}

void
hn_ref_attention (float *out, const float *q, const float *k, const float *v, gint64 B, gint64 T, gint64 H,
                  gint64 KVH, gint64 D, gint64 Dv, gint64 n_ctx, const HnAttentionParams *p, const float *slopes,
                  const float *mask, gint64 mask_B, gint64 mask_T, gint64 mask_cols)
{
  gint64 n_kv = p->n_kv > 0 ? p->n_kv : n_ctx;
  double scale = p->scale != 0 ? p->scale : 1.0 / sqrt ((double) D);
  g_autofree double *s = g_new (double, MAX (n_kv, 1));
  for (gint64 b = 0; b < B; b++)
    for (gint64 t = 0; t < T; t++)
      for (gint64 h = 0; h < H; h++)
        {
          gint64 kvh = h / (H / KVH), pos = p->pos0 + t;
          const float *qr = q + ((b * T + t) * H + h) * D;
          double mx = -INFINITY;
          for (gint64 j = 0; j < n_kv; j++)
            {
              if ((p->causal && j > pos) || (p->window > 0 && j <= pos - p->window) ||
                  (p->local_chunk > 0 && j < pos - pos % p->local_chunk))
                {
                  s[j] = -INFINITY;
                  continue;
                }
              const float *kr = k + ((b * n_ctx + j) * KVH + kvh) * D;
              double dot = 0;
              for (gint64 d = 0; d < D; d++)
                dot += (double) qr[d] * kr[d];
              double x = dot * scale;
              if (p->softcap > 0)
                x = p->softcap * tanh (x / p->softcap);
              if (slopes && !p->sinks)
                x += slopes[h] * (double) (j - pos);
              if (mask)
                x += mask[((mask_B == 1 ? 0 : b) * mask_T + (mask_T == 1 ? 0 : t)) * mask_cols + j];
              s[j] = x;
              mx = MAX (mx, x);
            }
          double sink = p->sinks && slopes ? slopes[h] : -INFINITY; /* one more score that adds no value */
          mx = MAX (mx, sink);
          double sum = sink == -INFINITY ? 0 : exp (sink - mx);
          for (gint64 j = 0; j < n_kv; j++)
            {
              s[j] = mx == -INFINITY || s[j] == -INFINITY ? 0 : exp (s[j] - mx);
              sum += s[j];
            }
          float *orow = out + ((b * T + t) * H + h) * Dv;
          for (gint64 d = 0; d < Dv; d++)
            {
              double acc = 0;
              for (gint64 j = 0; j < n_kv; j++)
                acc += s[j] * v[((b * n_ctx + j) * KVH + kvh) * Dv + d];
              orow[d] = sum > 0 ? (float) (acc / sum) : 0.0f;
            }
        }
}

void
hn_ref_cross_entropy (float *loss, float *mean, const float *logits, const gint32 *targets, gint64 N, gint64 V,
                      gint32 ignore_index)
{
  double total = 0;
  gint64 count = 0;
  for (gint64 r = 0; r < N; r++)
    {
      if (targets[r] == ignore_index)
        {
          loss[r] = 0;
          continue;
        }
      const float *x = logits + r * V;
      double mx = -INFINITY, s = 0;
      for (gint64 c = 0; c < V; c++)
        mx = MAX (mx, x[c]);
      for (gint64 c = 0; c < V; c++)
        s += exp (x[c] - mx);
      double l = targets[r] >= 0 && targets[r] < V ? log (s) + mx - x[targets[r]] : NAN;
      loss[r] = (float) l;
      total += l;
      count++;
    }
  if (mean)
    *mean = count ? (float) (total / count) : 0.0f;
}

void
hn_ref_topk (float *values, gint32 *indices, const float *in, gint64 rows, gint64 cols, int k)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *x = in + r * cols;
      float pv = INFINITY;
      gint64 pi = -1;
      for (int j = 0; j < k; j++)
        {
          gint64 bi = -1;
          float bv = -INFINITY;
          for (gint64 c = 0; c < cols; c++)
            {
              float v = x[c];
              if (isnan (v))
                continue;
              gboolean eligible = v < pv || (v == pv && c > pi);
              if (eligible && (bi < 0 || v > bv))
                {
                  bv = v;
                  bi = c;
                }
            }
          indices[r * k + j] = (gint32) bi;
          if (values)
            values[r * k + j] = bi >= 0 ? bv : NAN;
          pv = bi >= 0 ? bv : -INFINITY;
          pi = bi;
        }
    }
}

void
hn_ref_reduce (float *out, const float *in, gint64 rows, gint64 cols, HnReduceOp op)
{
  for (gint64 r = 0; r < rows; r++)
    {
      const float *x = in + r * cols;
      double acc = op == HN_REDUCE_MAX ? -INFINITY : 0;
      for (gint64 c = 0; c < cols; c++)
        acc = op == HN_REDUCE_MAX ? MAX (acc, x[c]) : acc + x[c];
      out[r] = (float) (op == HN_REDUCE_MEAN ? acc / cols : acc);
    }
}

void
hn_ref_permute (guint32 *out, const guint32 *in, int ndim, const gint64 *shape, const int *perm)
{
  gint64 n = 1, in_stride[HN_MAX_DIMS], out_shape[HN_MAX_DIMS];
  for (int i = ndim - 1; i >= 0; i--)
    {
      in_stride[i] = n;
      n *= shape[i];
    }
  for (int i = 0; i < ndim; i++)
    out_shape[i] = shape[perm[i]];
  for (gint64 o = 0; o < n; o++)
    {
      gint64 r = o, src = 0;
      for (int i = ndim - 1; i >= 0; i--)
        {
          gint64 c = r % out_shape[i];
          r /= out_shape[i];
          src += c * in_stride[perm[i]];
        }
      out[o] = in[src];
    }
}

void
hn_ref_moe_route (float *weights, gint32 *indices, const float *logits, gint64 rows, gint64 E,
                  const HnMoeRouteParams *p, const float *bias)
{
  int K = p->k;
  float scale = p->scale != 0.0f ? p->scale : 1.0f;
  g_autofree float *s = g_new (float, E);
  for (gint64 r = 0; r < rows; r++)
    {
      const float *l = logits + r * E;
      float mx = -INFINITY, sum = 0.0f;
      for (gint64 e = 0; e < E; e++)
        mx = MAX (mx, l[e]);
      for (gint64 e = 0; e < E; e++)
        sum += p->kind == HN_MOE_ROUTE_SOFTMAX_TOPK ? expf (l[e] - mx) : 0.0f;
      for (gint64 e = 0; e < E; e++)
        s[e] = p->kind == HN_MOE_ROUTE_SOFTMAX_TOPK   ? expf (l[e] - mx) / sum
               : p->kind == HN_MOE_ROUTE_SIGMOID_TOPK ? 1.0f / (1.0f + expf (-l[e]))
                                                      : l[e];
      gint64 sel[32];
      float val[32];
      if (p->kind == HN_MOE_ROUTE_SPARSEMIXER)
        {
          gint64 first = -1;
          for (int j = 0; j < 2; j++)
            {
              float m = -INFINITY;
              gint64 bi = -1;
              for (gint64 e = 0; e < E; e++)
                if (e != first && (bi < 0 || s[e] > m))
                  {
                    m = s[e];
                    bi = e;
                  }
              float t = 0.0f;
              for (gint64 e = 0; e < E; e++)
                if (e != first && !((m - s[e]) / MAX (fabsf (s[e]), m) > 2.0f * p->jitter_eps))
                  t += expf (s[e] - m);
              sel[j] = bi;
              val[j] = 1.0f / t;
              first = bi;
            }
        }
      else
        {
          guint32 groups = 0xffffffffu;
          gint64 gs = p->n_group > 1 ? E / p->n_group : E;
          if (p->n_group > 1)
            {
              float gsc[32];
              for (int g = 0; g < p->n_group; g++)
                {
                  float b1 = -INFINITY, b2 = -INFINITY;
                  for (gint64 e = g * gs; e < (g + 1) * gs; e++)
                    {
                      float c = s[e] + (bias ? bias[e] : 0.0f);
                      if (c > b1)
                        {
                          b2 = b1;
                          b1 = c;
                        }
                      else if (c > b2)
                        b2 = c;
                    }
                  gsc[g] = p->group_sum2 ? b1 + b2 : b1;
                }
              groups = 0;
              for (int j = 0; j < p->topk_group; j++)
                {
                  int bg = -1;
                  for (int g = 0; g < p->n_group; g++)
                    if (!(groups & (1u << g)) && (bg < 0 || gsc[g] > gsc[bg]))
                      bg = g;
                  groups |= 1u << bg;
                }
            }
          for (int j = 0; j < K; j++)
            {
              float bv = -INFINITY;
              gint64 bi = -1;
              for (gint64 e = 0; e < E; e++)
                {
                  gboolean taken = FALSE;
                  for (int q = 0; q < j; q++)
                    taken = taken || sel[q] == e;
                  if (taken)
                    continue;
                  float c = s[e] + (bias ? bias[e] : 0.0f);
                  if (p->n_group > 1 && !(groups & (1u << (e / gs))))
                    c = 0.0f;
                  if (bi < 0 || c > bv)
                    {
                      bv = c;
                      bi = e;
                    }
                }
              sel[j] = bi;
              val[j] = s[bi];
            }
          if (p->kind == HN_MOE_ROUTE_TOPK_SOFTMAX)
            {
              float v0 = val[0], t = 0.0f;
              for (int j = 0; j < K; j++)
                t += expf (val[j] - v0);
              for (int j = 0; j < K; j++)
                val[j] = expf (val[j] - v0) / t;
            }
          else if (p->norm_topk)
            {
              float t = 0.0f;
              for (int j = 0; j < K; j++)
                t += val[j];
              if (p->kind == HN_MOE_ROUTE_SIGMOID_TOPK)
                t += p->norm_add > 0.0f ? p->norm_add : 1e-20f;
              if (p->norm_min > 0.0f)
                t = MAX (t, p->norm_min);
              for (int j = 0; j < K; j++)
                val[j] /= t;
            }
        }
      float *w = weights + r * E;
      for (gint64 e = 0; e < E; e++)
        w[e] = 0.0f;
      for (int j = 0; j < K; j++)
        {
          w[sel[j]] = val[j] * scale;
          indices[r * K + j] = (gint32) sel[j];
        }
    }
}

void
hn_ref_moe_matmul (float *y, const float *x, const float *w, const float *bias, const gint32 *ids, gint64 S, gint64 N,
                   gint64 K, int x_div)
{
  for (gint64 s = 0; s < S; s++)
    {
      gint64 e = ids[s];
      const float *xr = x + (s / x_div) * K;
      for (gint64 n = 0; n < N; n++)
        {
          double acc = 0;
          const float *wr = w + (e * N + n) * K;
          for (gint64 k = 0; k < K; k++)
            acc += (double) xr[k] * wr[k];
          y[s * N + n] = (float) acc + (bias ? bias[e * N + n] : 0.0f);
        }
    }
}

void
hn_ref_moe_combine (float *out, const float *y, const float *weights, const gint32 *ids, gint64 T, gint64 C, gint64 E,
                    int k)
{
  for (gint64 t = 0; t < T; t++)
    for (gint64 c = 0; c < C; c++)
      {
        double acc = 0;
        for (int j = 0; j < k; j++)
          acc += (double) weights[t * E + ids[t * k + j]] * y[(t * k + j) * C + c];
        out[t * C + c] = (float) acc;
      }
}
