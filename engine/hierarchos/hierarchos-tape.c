/* The CPU tape: each op computes its forward at once and, when gradients are
 * recorded, remembers its inputs so hn_htape_backward can apply the op's
 * explicit backward rule in reverse order. Values live in an arena that is
 * reset per inference token or per training chunk. */
#include "hierarchos/hierarchos-private.h"

#include <math.h>
#include <string.h>

#define BLOCK_FLOATS ((gsize) 1 << 22)

HnHTape *
hn_htape_new (void)
{
  HnHTape *t = g_new0 (HnHTape, 1);
  t->nodes = g_array_sized_new (FALSE, FALSE, sizeof (HnHTapeNode), 4096);
  t->blocks = g_ptr_array_new_with_free_func (g_free);
  t->block_sizes = g_array_new (FALSE, FALSE, sizeof (gsize));
  return t;
}

void
hn_htape_free (HnHTape *t)
{
  if (!t)
    return;
  g_array_unref (t->nodes);
  g_ptr_array_unref (t->blocks);
  g_array_unref (t->block_sizes);
  g_free (t);
}

void
hn_htape_reset (HnHTape *t)
{
  /* Blocks stay allocated: the next token or chunk reuses them without
   * touching the allocator (or faulting pages in again). */
  t->peak_nodes = MAX (t->peak_nodes, t->nodes->len);
  g_array_set_size (t->nodes, 0);
  t->cur = 0;
  t->block_used = 0;
  t->n_params = 0;
}

guint64
hn_htape_bytes (const HnHTape *t)
{
  guint64 b = (guint64) MAX (t->peak_nodes, t->nodes->len) * sizeof (HnHTapeNode);
  for (guint i = 0; i < t->block_sizes->len; i++)
    b += g_array_index (t->block_sizes, gsize, i) * sizeof (float);
  return b;
}

float *
hn_htape_alloc (HnHTape *t, gsize n)
{
  n = (n + 7) & ~(gsize) 7; /* keep 32-byte alignment */
  while (t->cur < t->blocks->len && t->block_used + n > g_array_index (t->block_sizes, gsize, t->cur))
    {
      t->cur++;
      t->block_used = 0;
    }
  if (t->cur >= t->blocks->len)
    {
      gsize sz = MAX (BLOCK_FLOATS, n);
      g_ptr_array_add (t->blocks, g_malloc (sz * sizeof (float)));
      g_array_append_val (t->block_sizes, sz);
      t->cur = t->blocks->len - 1;
      t->block_used = 0;
    }
  float *p = (float *) t->blocks->pdata[t->cur] + t->block_used;
  t->block_used += n;
  return p;
}

static float *
alloc0 (HnHTape *t, gsize n)
{
  float *p = hn_htape_alloc (t, n);
  memset (p, 0, n * sizeof (float));
  return p;
}

static HnVar
new_node (HnHTape *t, int op, int n, HnVar a, HnVar b, HnVar c, HnVar d)
{
  HnHTapeNode nd;
  memset (&nd, 0, sizeof nd);
  nd.op = op;
  nd.n = n;
  nd.in[0] = a;
  nd.in[1] = b;
  nd.in[2] = c;
  nd.in[3] = d;
  nd.val = hn_htape_alloc (t, (gsize) MAX (n, 1));
  gboolean rg = FALSE;
  if (t->record_grads)
    for (int i = 0; i < 4; i++)
      if (nd.in[i] >= 0 && hn_htape_node (t, nd.in[i])->grad)
        rg = TRUE;
  if (rg)
    nd.grad = alloc0 (t, (gsize) MAX (n, 1));
  g_array_append_val (t->nodes, nd);
  return (HnVar) t->nodes->len - 1;
}

HnVar
hn_htape_leaf (HnHTape *t, float *val, float *grad, int n)
{
  HnHTapeNode nd;
  memset (&nd, 0, sizeof nd);
  nd.op = HT_LEAF;
  nd.n = n;
  nd.in[0] = nd.in[1] = nd.in[2] = nd.in[3] = -1;
  nd.val = val;
  nd.grad = t->record_grads ? grad : NULL;
  g_array_append_val (t->nodes, nd);
  return (HnVar) t->nodes->len - 1;
}

HnVar
hn_htape_const (HnHTape *t, const float *val, int n)
{
  float *p = hn_htape_alloc (t, (gsize) MAX (n, 1));
  memcpy (p, val, (gsize) n * sizeof (float));
  return hn_htape_leaf (t, p, NULL, n);
}

HnVar
hn_htape_zeros (HnHTape *t, int n)
{
  return hn_htape_leaf (t, alloc0 (t, (gsize) MAX (n, 1)), NULL, n);
}

#define N(v) hn_htape_node (t, v)
#define V(v) (N (v)->val)

static inline float
sigmoidf_stable (float x)
{
  if (x >= 0)
    return 1.0f / (1.0f + expf (-x));
  float e = expf (x);
  return e / (1.0f + e);
}

static inline float
fclampf (float x, float m)
{
  if (!isfinite (x))
    return x;
  return x < -m ? -m : (x > m ? m : x);
}

HnVar
hn_htape_linear (HnHTape *t, HnVar W, HnVar x, HnVar b, int out, int in)
{
  g_assert (N (W)->n == out * in && N (x)->n == in && (b < 0 || N (b)->n == out));
  HnVar y = new_node (t, HT_LINEAR, out, W, x, b, -1);
  N (y)->ia[0] = out;
  N (y)->ia[1] = in;
  const float *w = V (W), *xv = V (x), *bv = b >= 0 ? V (b) : NULL;
  float *yv = V (y);
  for (int o = 0; o < out; o++)
    {
      const float *row = w + (gsize) o * in;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int i = 0;
      for (; i + 4 <= in; i += 4)
        {
          s0 += row[i] * xv[i];
          s1 += row[i + 1] * xv[i + 1];
          s2 += row[i + 2] * xv[i + 2];
          s3 += row[i + 3] * xv[i + 3];
        }
      float s = (s0 + s1) + (s2 + s3);
      for (; i < in; i++)
        s += row[i] * xv[i];
      yv[o] = s + (bv ? bv[o] : 0.0f);
    }
  return y;
}

HnVar
hn_htape_vecmat (HnHTape *t, HnVar x, HnVar M, int in, int out)
{
  g_assert (N (M)->n == out * in && N (x)->n == in);
  HnVar y = new_node (t, HT_VECMAT, out, x, M, -1, -1);
  N (y)->ia[0] = in;
  N (y)->ia[1] = out;
  const float *xv = V (x), *m = V (M);
  float *yv = V (y);
  memset (yv, 0, (gsize) out * sizeof (float));
  for (int i = 0; i < in; i++)
    {
      const float *row = m + (gsize) i * out;
      float s = xv[i];
      for (int j = 0; j < out; j++)
        yv[j] += s * row[j];
    }
  return y;
}

HnVar
hn_htape_row (HnHTape *t, HnVar W, int row, int cols)
{
  HnVar y = new_node (t, HT_ROW, cols, W, -1, -1, -1);
  N (y)->ia[0] = row;
  memcpy (V (y), V (W) + (gsize) row * cols, (gsize) cols * sizeof (float));
  return y;
}

static HnVar
binary (HnHTape *t, int op, HnVar a, HnVar b)
{
  int n = N (a)->n;
  g_assert (N (b)->n == n);
  HnVar y = new_node (t, op, n, a, b, -1, -1);
  const float *av = V (a), *bv = V (b);
  float *yv = V (y);
  for (int i = 0; i < n; i++)
    yv[i] = op == HT_ADD ? av[i] + bv[i] : op == HT_SUB ? av[i] - bv[i] : av[i] * bv[i];
  return y;
}

HnVar hn_htape_add (HnHTape *t, HnVar a, HnVar b) { return binary (t, HT_ADD, a, b); }
HnVar hn_htape_sub (HnHTape *t, HnVar a, HnVar b) { return binary (t, HT_SUB, a, b); }
HnVar hn_htape_mul (HnHTape *t, HnVar a, HnVar b) { return binary (t, HT_MUL, a, b); }

static HnVar
unary (HnHTape *t, int op, HnVar x, float p0, float p1)
{
  int n = N (x)->n;
  HnVar y = new_node (t, op, n, x, -1, -1, -1);
  N (y)->fa[0] = p0;
  N (y)->fa[1] = p1;
  const float *xv = V (x);
  float *yv = V (y);
  for (int i = 0; i < n; i++)
    {
      float v = xv[i], r = 0;
      switch (op)
        {
        case HT_SCALE: r = v * p0; break;
        case HT_ADDC: r = v + p0; break;
        case HT_GELU: r = 0.5f * v * (1.0f + erff (v * (float) M_SQRT1_2)); break;
        case HT_SILU: r = v * sigmoidf_stable (v); break;
        case HT_SIGMOID: r = sigmoidf_stable (v); break;
        case HT_TANH: r = tanhf (v); break;
        case HT_RELUSQ: r = v > 0 ? v * v : 0.0f; break;
        case HT_RELU: r = v > 0 ? v : 0.0f; break;
        case HT_WDECAY:
          {
            float u = -v, sp = u > 20.0f ? u : (u < -20.0f ? expf (u) : log1pf (expf (u)));
            r = -sp - 0.5f;
          }
          break;
        case HT_CLAMP: r = fclampf (v, p0); break;
        case HT_CLAMP2: r = isfinite (v) ? (v < p0 ? p0 : (v > p1 ? p1 : v)) : v; break;
        case HT_MINC: r = v < p0 ? v : p0; break;
        default: g_assert_not_reached ();
        }
      yv[i] = r;
    }
  return y;
}

HnVar hn_htape_scale (HnHTape *t, HnVar a, float s) { return unary (t, HT_SCALE, a, s, 0); }
HnVar hn_htape_addc (HnHTape *t, HnVar a, float c) { return unary (t, HT_ADDC, a, c, 0); }
HnVar hn_htape_gelu (HnHTape *t, HnVar x) { return unary (t, HT_GELU, x, 0, 0); }
HnVar hn_htape_silu (HnHTape *t, HnVar x) { return unary (t, HT_SILU, x, 0, 0); }
HnVar hn_htape_sigmoid (HnHTape *t, HnVar x) { return unary (t, HT_SIGMOID, x, 0, 0); }
HnVar hn_htape_tanh (HnHTape *t, HnVar x) { return unary (t, HT_TANH, x, 0, 0); }
HnVar hn_htape_relusq (HnHTape *t, HnVar x) { return unary (t, HT_RELUSQ, x, 0, 0); }
HnVar hn_htape_relu (HnHTape *t, HnVar x) { return unary (t, HT_RELU, x, 0, 0); }
HnVar hn_htape_wdecay (HnHTape *t, HnVar x) { return unary (t, HT_WDECAY, x, 0, 0); }
HnVar hn_htape_clamp (HnHTape *t, HnVar x, float m) { return unary (t, HT_CLAMP, x, m, 0); }
HnVar hn_htape_clamp2 (HnHTape *t, HnVar x, float lo, float hi) { return unary (t, HT_CLAMP2, x, lo, hi); }
HnVar hn_htape_minc (HnHTape *t, HnVar x, float c) { return unary (t, HT_MINC, x, c, 0); }

HnVar
hn_htape_muls (HnHTape *t, HnVar a, HnVar s1)
{
  g_assert (N (s1)->n == 1);
  int n = N (a)->n;
  HnVar y = new_node (t, HT_MULS, n, a, s1, -1, -1);
  float s = V (s1)[0];
  for (int i = 0; i < n; i++)
    V (y)[i] = V (a)[i] * s;
  return y;
}

HnVar
hn_htape_concat (HnHTape *t, int n_in, const HnVar *in)
{
  g_assert (n_in >= 1 && n_in <= 4);
  int n = 0;
  for (int i = 0; i < n_in; i++)
    n += N (in[i])->n;
  HnVar y = new_node (t, HT_CONCAT, n, in[0], n_in > 1 ? in[1] : -1, n_in > 2 ? in[2] : -1, n_in > 3 ? in[3] : -1);
  float *yv = V (y);
  for (int i = 0; i < n_in; i++)
    {
      memcpy (yv, V (in[i]), (gsize) N (in[i])->n * sizeof (float));
      yv += N (in[i])->n;
    }
  return y;
}

/* LayerNorm / GroupNorm share one kernel: `groups` normalised slices. */
static void
norm_forward (const float *x, float *y, float *stats, int n, int groups, const float *w, const float *b, float eps)
{
  int width = n / groups;
  for (int g = 0; g < groups; g++)
    {
      const float *xs = x + g * width;
      float mean = 0, var = 0;
      for (int i = 0; i < width; i++)
        mean += xs[i];
      mean /= (float) width;
      for (int i = 0; i < width; i++)
        {
          float d = xs[i] - mean;
          var += d * d;
        }
      var /= (float) width;
      float rstd = 1.0f / sqrtf (var + eps);
      stats[2 * g] = mean;
      stats[2 * g + 1] = rstd;
      for (int i = 0; i < width; i++)
        {
          int j = g * width + i;
          float v = (xs[i] - mean) * rstd;
          if (w)
            v *= w[j];
          if (b)
            v += b[j];
          y[j] = v;
        }
    }
}

static HnVar
norm_op (HnHTape *t, int op, HnVar x, HnVar w, HnVar b, int groups, float eps)
{
  int n = N (x)->n;
  g_assert (n % groups == 0);
  HnVar y = new_node (t, op, n, x, w, b, -1);
  HnHTapeNode *nd = N (y);
  nd->ia[0] = groups;
  nd->fa[0] = eps;
  nd->aux = hn_htape_alloc (t, (gsize) 2 * groups);
  norm_forward (V (x), V (y), N (y)->aux, n, groups, w >= 0 ? V (w) : NULL, b >= 0 ? V (b) : NULL, eps);
  return y;
}

HnVar hn_htape_ln (HnHTape *t, HnVar x, HnVar w, HnVar b, float eps) { return norm_op (t, HT_LN, x, w, b, 1, eps); }
HnVar hn_htape_gn (HnHTape *t, HnVar x, HnVar w, HnVar b, int groups, float eps) { return norm_op (t, HT_GN, x, w, b, groups, eps); }

HnVar
hn_htape_l2clamp (HnHTape *t, HnVar x, float m)
{
  int n = N (x)->n;
  HnVar y = new_node (t, HT_L2CLAMP, n, x, -1, -1, -1);
  const float *xv = V (x);
  float *yv = V (y);
  double ss = 0;
  for (int i = 0; i < n; i++)
    ss += (double) xv[i] * (double) xv[i];
  float norm = (float) sqrt (ss);
  float scale = 1.0f;
  if (m > 0)
    {
      scale = m / (norm + 1e-6f);
      if (scale > 1.0f)
        scale = 1.0f;
    }
  N (y)->fa[0] = scale;
  N (y)->fa[1] = norm;
  for (int i = 0; i < n; i++)
    yv[i] = scale < 1.0f ? xv[i] * scale : xv[i];
  return y;
}

HnVar
hn_htape_mix (HnHTape *t, HnVar xn, HnVar prev, HnVar coeff)
{
  int n = N (xn)->n;
  HnVar y = new_node (t, HT_MIX, n, xn, prev, coeff, -1);
  const float *a = V (xn), *p = V (prev), *c = V (coeff);
  for (int i = 0; i < n; i++)
    V (y)[i] = a[i] + (p[i] - a[i]) * c[i];
  return y;
}

HnVar
hn_htape_headnorm (HnHTape *t, HnVar k, int heads)
{
  int n = N (k)->n, hs = n / heads;
  HnVar y = new_node (t, HT_HEADNORM, n, k, -1, -1, -1);
  N (y)->ia[0] = heads;
  N (y)->aux = hn_htape_alloc (t, (gsize) heads);
  for (int h = 0; h < heads; h++)
    {
      const float *kv = V (k) + h * hs;
      float ss = 0;
      for (int i = 0; i < hs; i++)
        ss += kv[i] * kv[i];
      float d = sqrtf (ss);
      if (d < 1e-12f)
        d = 1e-12f;
      N (y)->aux[h] = d;
      for (int i = 0; i < hs; i++)
        V (y)[h * hs + i] = kv[i] / d;
    }
  return y;
}

static inline float
wclamp (float w)
{
  return isfinite (w) ? (w < -60.0f ? -60.0f : (w > 30.0f ? 30.0f : w)) : w;
}

HnVar
hn_htape_wkv (HnHTape *t, HnVar S, HnVar w, HnVar k, HnVar v, HnVar kk, HnVar a, int heads, int Nh)
{
  /* A sixth input does not fit the four slots: w and a travel in iaux. */
  int W = heads * Nh;
  g_assert (N (S)->n == W * Nh);
  HnVar y = new_node (t, HT_WKV, W * Nh, S, k, v, kk);
  HnHTapeNode *nd = N (y);
  nd->ia[0] = heads;
  nd->ia[1] = Nh;
  nd->ia[2] = w;
  nd->ia[3] = a;
  if (t->record_grads && !nd->grad && (N (w)->grad || N (a)->grad))
    nd->grad = alloc0 (t, (gsize) W * Nh);
  /* saved: sa [W], decay [W] */
  nd->aux = hn_htape_alloc (t, (gsize) 2 * W);
  float *sa = nd->aux, *decay = nd->aux + W;
  const float *Sv = V (S), *wv = V (w), *kv = V (k), *vv = V (v), *kkv = V (kk), *av = V (a);
  float *out = V (y);
  for (int j = 0; j < W; j++)
    decay[j] = expf (-expf (wclamp (wv[j])));
  for (int h = 0; h < heads; h++)
    {
      int c0 = h * Nh;
      const float *S0 = Sv + (gsize) h * Nh * Nh;
      float *O0 = out + (gsize) h * Nh * Nh;
      for (int i = 0; i < Nh; i++)
        {
          float s = 0;
          for (int j = 0; j < Nh; j++)
            s += S0[i * Nh + j] * (-kkv[c0 + j]);
          sa[c0 + i] = s;
        }
      for (int i = 0; i < Nh; i++)
        for (int j = 0; j < Nh; j++)
          O0[i * Nh + j] = S0[i * Nh + j] * decay[c0 + j] + sa[c0 + i] * (kkv[c0 + j] * av[c0 + j]) +
                           vv[c0 + i] * kv[c0 + j];
    }
  return y;
}

HnVar
hn_htape_wkvread (HnHTape *t, HnVar S, HnVar r, int heads, int Nh)
{
  int W = heads * Nh;
  HnVar y = new_node (t, HT_WKVREAD, W, S, r, -1, -1);
  N (y)->ia[0] = heads;
  N (y)->ia[1] = Nh;
  const float *Sv = V (S), *rv = V (r);
  for (int h = 0; h < heads; h++)
    for (int i = 0; i < Nh; i++)
      {
        const float *row = Sv + (gsize) h * Nh * Nh + (gsize) i * Nh;
        float s = 0;
        for (int j = 0; j < Nh; j++)
          s += row[j] * rv[h * Nh + j];
        V (y)[h * Nh + i] = s;
      }
  return y;
}

HnVar
hn_htape_bonus (HnHTape *t, HnVar x, HnVar r, HnVar k, HnVar rk, HnVar v, int heads)
{
  /* v rides in ia[1] (five inputs). */
  int n = N (x)->n, hs = n / heads;
  HnVar y = new_node (t, HT_BONUS, n, x, r, k, rk);
  HnHTapeNode *nd = N (y);
  nd->ia[0] = heads;
  nd->ia[1] = v;
  if (t->record_grads && !nd->grad && N (v)->grad)
    nd->grad = alloc0 (t, (gsize) n);
  nd->aux = hn_htape_alloc (t, (gsize) heads);
  for (int h = 0; h < heads; h++)
    {
      float s = 0;
      for (int i = h * hs; i < (h + 1) * hs; i++)
        s += V (r)[i] * V (k)[i] * V (rk)[i];
      N (y)->aux[h] = s;
      for (int i = h * hs; i < (h + 1) * hs; i++)
        V (y)[i] = V (x)[i] + s * V (v)[i];
    }
  return y;
}

HnVar
hn_htape_gather (HnHTape *t, HnVar M, const float *fast, const int *idx, int n_idx, int k, int cols)
{
  HnVar y = new_node (t, HT_GATHER, k * cols, M, -1, -1, -1);
  HnHTapeNode *nd = N (y);
  nd->ia[0] = n_idx;
  nd->ia[1] = cols;
  nd->iaux = (int *) hn_htape_alloc (t, (gsize) MAX (n_idx, 1));
  memcpy (nd->iaux, idx, (gsize) n_idx * sizeof (int));
  float *yv = V (y);
  memset (yv, 0, (gsize) k * cols * sizeof (float));
  for (int r = 0; r < n_idx; r++)
    {
      const float *src = V (M) + (gsize) idx[r] * cols;
      const float *fs = fast ? fast + (gsize) idx[r] * cols : NULL;
      for (int c = 0; c < cols; c++)
        yv[r * cols + c] = src[c] + (fs ? fs[c] : 0.0f);
    }
  return y;
}

HnVar
hn_htape_meansq (HnHTape *t, HnVar x)
{
  HnVar y = new_node (t, HT_MEANSQ, 1, x, -1, -1, -1);
  int n = N (x)->n;
  float s = 0;
  for (int i = 0; i < n; i++)
    s += V (x)[i] * V (x)[i];
  V (y)[0] = s / (float) n;
  return y;
}

HnVar
hn_htape_sum (HnHTape *t, HnVar x)
{
  HnVar y = new_node (t, HT_SUM, 1, x, -1, -1, -1);
  float s = 0;
  for (int i = 0; i < N (x)->n; i++)
    s += V (x)[i];
  V (y)[0] = s;
  return y;
}

HnVar
hn_htape_ce (HnHTape *t, HnVar logits, int target, float zw, float weight, float *ce_out)
{
  int n = N (logits)->n;
  g_assert (target >= 0 && target < n);
  HnVar y = new_node (t, HT_CE, 1, logits, -1, -1, -1);
  const float *z = V (logits);
  float mx = z[0];
  for (int i = 1; i < n; i++)
    mx = z[i] > mx ? z[i] : mx;
  double s = 0;
  for (int i = 0; i < n; i++)
    s += exp ((double) z[i] - mx);
  float lse = mx + (float) log (s);
  float ce = lse - z[target];
  N (y)->ia[0] = target;
  N (y)->fa[0] = zw;
  N (y)->fa[1] = lse;
  N (y)->fa[2] = weight;
  V (y)[0] = weight * (ce + zw * lse * lse);
  if (ce_out)
    *ce_out = ce;
  return y;
}

HnVar
hn_htape_smoothl1 (HnHTape *t, HnVar x, float target, float beta)
{
  HnVar y = new_node (t, HT_SMOOTHL1, 1, x, -1, -1, -1);
  N (y)->fa[0] = target;
  N (y)->fa[1] = beta;
  float d = V (x)[0] - target, ad = fabsf (d);
  V (y)[0] = ad < beta ? 0.5f * d * d / beta : ad - 0.5f * beta;
  return y;
}

HnVar
hn_htape_straight (HnHTape *t, HnVar soft, float hard)
{
  HnVar y = new_node (t, HT_STRAIGHT, 1, soft, -1, -1, -1);
  V (y)[0] = hard;
  return y;
}

/* ---- backward ---- */

static void
backward_node (HnHTape *t, HnHTapeNode *nd)
{
  const float *gy = nd->grad;
  int n = nd->n;
  HnHTapeNode *A = nd->in[0] >= 0 ? N (nd->in[0]) : NULL;
  HnHTapeNode *B = nd->in[1] >= 0 ? N (nd->in[1]) : NULL;
  HnHTapeNode *Cn = nd->in[2] >= 0 ? N (nd->in[2]) : NULL;
  HnHTapeNode *D = nd->in[3] >= 0 ? N (nd->in[3]) : NULL;
  switch (nd->op)
    {
    case HT_LEAF:
      break;
    case HT_LINEAR:
      {
        int out = nd->ia[0], in = nd->ia[1];
        HnHTapeNode *Wn = A, *X = B;
        for (int o = 0; o < out; o++)
          {
            float g = gy[o];
            if (g == 0.0f)
              continue;
            const float *row = Wn->val + (gsize) o * in;
            if (X->grad)
              for (int i = 0; i < in; i++)
                X->grad[i] += row[i] * g;
            if (Wn->grad)
              {
                float *gw = Wn->grad + (gsize) o * in;
                for (int i = 0; i < in; i++)
                  gw[i] += g * X->val[i];
              }
          }
        if (Cn && Cn->grad)
          for (int o = 0; o < out; o++)
            Cn->grad[o] += gy[o];
      }
      break;
    case HT_VECMAT:
      {
        int in = nd->ia[0], out = nd->ia[1];
        HnHTapeNode *X = A, *M = B;
        for (int i = 0; i < in; i++)
          {
            const float *row = M->val + (gsize) i * out;
            if (X->grad)
              {
                float s = 0;
                for (int j = 0; j < out; j++)
                  s += row[j] * gy[j];
                X->grad[i] += s;
              }
            if (M->grad)
              {
                float *gm = M->grad + (gsize) i * out;
                float xi = X->val[i];
                for (int j = 0; j < out; j++)
                  gm[j] += xi * gy[j];
              }
          }
      }
      break;
    case HT_ROW:
      if (A->grad)
        {
          float *g = A->grad + (gsize) nd->ia[0] * n;
          for (int i = 0; i < n; i++)
            g[i] += gy[i];
        }
      break;
    case HT_ADD:
    case HT_SUB:
      if (A->grad)
        for (int i = 0; i < n; i++)
          A->grad[i] += gy[i];
      if (B->grad)
        for (int i = 0; i < n; i++)
          B->grad[i] += nd->op == HT_ADD ? gy[i] : -gy[i];
      break;
    case HT_MUL:
      if (A->grad)
        for (int i = 0; i < n; i++)
          A->grad[i] += gy[i] * B->val[i];
      if (B->grad)
        for (int i = 0; i < n; i++)
          B->grad[i] += gy[i] * A->val[i];
      break;
    case HT_MULS:
      {
        float s = B->val[0], gs = 0;
        for (int i = 0; i < n; i++)
          {
            if (A->grad)
              A->grad[i] += gy[i] * s;
            gs += gy[i] * A->val[i];
          }
        if (B->grad)
          B->grad[0] += gs;
      }
      break;
    case HT_CONCAT:
      {
        int off = 0;
        for (int k = 0; k < 4 && nd->in[k] >= 0; k++)
          {
            HnHTapeNode *X = N (nd->in[k]);
            if (X->grad)
              for (int i = 0; i < X->n; i++)
                X->grad[i] += gy[off + i];
            off += X->n;
          }
      }
      break;
    case HT_LN:
    case HT_GN:
      {
        int groups = nd->ia[0], width = n / groups;
        const float *x = A->val, *w = B ? B->val : NULL;
        for (int g = 0; g < groups; g++)
          {
            float mean = nd->aux[2 * g], rstd = nd->aux[2 * g + 1];
            float m1 = 0, m2 = 0;
            for (int i = 0; i < width; i++)
              {
                int j = g * width + i;
                float xh = (x[j] - mean) * rstd;
                float gx = gy[j] * (w ? w[j] : 1.0f);
                m1 += gx;
                m2 += gx * xh;
                if (B && B->grad)
                  B->grad[j] += gy[j] * xh;
                if (Cn && Cn->grad)
                  Cn->grad[j] += gy[j];
              }
            m1 /= (float) width;
            m2 /= (float) width;
            if (A->grad)
              for (int i = 0; i < width; i++)
                {
                  int j = g * width + i;
                  float xh = (x[j] - mean) * rstd;
                  float gx = gy[j] * (w ? w[j] : 1.0f);
                  A->grad[j] += rstd * (gx - m1 - xh * m2);
                }
          }
      }
      break;
    case HT_SCALE:
    case HT_ADDC:
    case HT_GELU:
    case HT_SILU:
    case HT_SIGMOID:
    case HT_TANH:
    case HT_RELUSQ:
    case HT_RELU:
    case HT_WDECAY:
    case HT_CLAMP:
    case HT_CLAMP2:
    case HT_MINC:
      if (A->grad)
        for (int i = 0; i < n; i++)
          {
            float x = A->val[i], y = nd->val[i], d = 0;
            switch (nd->op)
              {
              case HT_SCALE: d = nd->fa[0]; break;
              case HT_ADDC: d = 1; break;
              case HT_GELU:
                d = 0.5f * (1.0f + erff (x * (float) M_SQRT1_2)) + x * expf (-0.5f * x * x) * 0.3989422804014327f;
                break;
              case HT_SILU:
                {
                  float s = sigmoidf_stable (x);
                  d = s + x * s * (1 - s);
                }
                break;
              case HT_SIGMOID: d = y * (1 - y); break;
              case HT_TANH: d = 1 - y * y; break;
              case HT_RELUSQ: d = x > 0 ? 2 * x : 0; break;
              case HT_RELU: d = x > 0 ? 1 : 0; break;
              case HT_WDECAY:
                {
                  float u = -x;
                  d = u > 20.0f ? 1.0f : (u < -20.0f ? expf (u) : sigmoidf_stable (u));
                }
                break;
              case HT_CLAMP: d = (x >= -nd->fa[0] && x <= nd->fa[0]) ? 1 : 0; break;
              case HT_CLAMP2: d = (x >= nd->fa[0] && x <= nd->fa[1]) ? 1 : 0; break;
              case HT_MINC: d = x <= nd->fa[0] ? 1 : 0; break;
              default: break;
              }
            A->grad[i] += gy[i] * d;
          }
      break;
    case HT_L2CLAMP:
      if (A->grad)
        {
          float s = nd->fa[0], norm = nd->fa[1];
          if (s >= 1.0f)
            for (int i = 0; i < n; i++)
              A->grad[i] += gy[i];
          else
            {
              /* y = m x / (|x| + e): dy = s (I - x x^T / (|x| (|x| + e))) */
              float dot = 0;
              for (int i = 0; i < n; i++)
                dot += A->val[i] * gy[i];
              float c = s / (norm * (norm + 1e-6f));
              for (int i = 0; i < n; i++)
                A->grad[i] += s * gy[i] - c * A->val[i] * dot;
            }
        }
      break;
    case HT_MIX:
      for (int i = 0; i < n; i++)
        {
          float c = Cn->val[i];
          if (A->grad)
            A->grad[i] += gy[i] * (1 - c);
          if (B->grad)
            B->grad[i] += gy[i] * c;
          if (Cn->grad)
            Cn->grad[i] += gy[i] * (B->val[i] - A->val[i]);
        }
      break;
    case HT_HEADNORM:
      if (A->grad)
        {
          int heads = nd->ia[0], hs = n / heads;
          for (int h = 0; h < heads; h++)
            {
              float d = nd->aux[h];
              const float *y = nd->val + h * hs;
              const float *g = gy + h * hs;
              if (d > 1e-12f)
                {
                  float dot = 0;
                  for (int i = 0; i < hs; i++)
                    dot += y[i] * g[i];
                  for (int i = 0; i < hs; i++)
                    A->grad[h * hs + i] += (g[i] - y[i] * dot) / d;
                }
              else
                for (int i = 0; i < hs; i++)
                  A->grad[h * hs + i] += g[i] / d;
            }
        }
      break;
    case HT_WKV:
      {
        int heads = nd->ia[0], Nh = nd->ia[1], W = heads * Nh;
        HnHTapeNode *S = A, *K = B, *Vn = Cn, *KK = D, *Wn = N (nd->ia[2]), *An = N (nd->ia[3]);
        const float *sa = nd->aux, *decay = nd->aux + W;
        for (int h = 0; h < heads; h++)
          {
            int c0 = h * Nh;
            const float *S0 = S->val + (gsize) h * Nh * Nh;
            const float *G = gy + (gsize) h * Nh * Nh;
            float gsa[Nh];
            for (int i = 0; i < Nh; i++)
              {
                float s = 0;
                for (int j = 0; j < Nh; j++)
                  s += G[i * Nh + j] * KK->val[c0 + j] * An->val[c0 + j];
                gsa[i] = s;
              }
            for (int j = 0; j < Nh; j++)
              {
                float gdecay = 0, gb = 0, gk = 0, gkk_sa = 0;
                for (int i = 0; i < Nh; i++)
                  {
                    float g = G[i * Nh + j];
                    gdecay += g * S0[i * Nh + j];
                    gb += g * sa[c0 + i];
                    gk += g * Vn->val[c0 + i];
                    gkk_sa += gsa[i] * S0[i * Nh + j];
                  }
                float kkj = KK->val[c0 + j], aj = An->val[c0 + j];
                if (KK->grad)
                  KK->grad[c0 + j] += gb * aj - gkk_sa;
                if (An->grad)
                  An->grad[c0 + j] += gb * kkj;
                if (K->grad)
                  K->grad[c0 + j] += gk;
                if (Wn->grad)
                  {
                    float w = Wn->val[c0 + j];
                    if (isfinite (w) && w >= -60.0f && w <= 30.0f)
                      Wn->grad[c0 + j] += gdecay * (-decay[c0 + j] * expf (w));
                  }
              }
            if (Vn->grad)
              for (int i = 0; i < Nh; i++)
                {
                  float s = 0;
                  for (int j = 0; j < Nh; j++)
                    s += G[i * Nh + j] * K->val[c0 + j];
                  Vn->grad[c0 + i] += s;
                }
            if (S->grad)
              {
                float *GS = S->grad + (gsize) h * Nh * Nh;
                for (int i = 0; i < Nh; i++)
                  for (int j = 0; j < Nh; j++)
                    GS[i * Nh + j] += G[i * Nh + j] * decay[c0 + j] - gsa[i] * KK->val[c0 + j];
              }
          }
      }
      break;
    case HT_WKVREAD:
      {
        int heads = nd->ia[0], Nh = nd->ia[1];
        for (int h = 0; h < heads; h++)
          for (int i = 0; i < Nh; i++)
            {
              float g = gy[h * Nh + i];
              const float *row = A->val + (gsize) h * Nh * Nh + (gsize) i * Nh;
              if (A->grad)
                {
                  float *grow = A->grad + (gsize) h * Nh * Nh + (gsize) i * Nh;
                  for (int j = 0; j < Nh; j++)
                    grow[j] += g * B->val[h * Nh + j];
                }
              if (B->grad)
                for (int j = 0; j < Nh; j++)
                  B->grad[h * Nh + j] += g * row[j];
            }
      }
      break;
    case HT_BONUS:
      {
        int heads = nd->ia[0], hs = n / heads;
        HnHTapeNode *R = B, *K = Cn, *RK = D, *Vn = N (nd->ia[1]);
        for (int h = 0; h < heads; h++)
          {
            float s = nd->aux[h], gs = 0;
            for (int i = h * hs; i < (h + 1) * hs; i++)
              {
                if (A->grad)
                  A->grad[i] += gy[i];
                if (Vn->grad)
                  Vn->grad[i] += gy[i] * s;
                gs += gy[i] * Vn->val[i];
              }
            for (int i = h * hs; i < (h + 1) * hs; i++)
              {
                if (R->grad)
                  R->grad[i] += gs * K->val[i] * RK->val[i];
                if (K->grad)
                  K->grad[i] += gs * R->val[i] * RK->val[i];
                if (RK->grad)
                  RK->grad[i] += gs * R->val[i] * K->val[i];
              }
          }
      }
      break;
    case HT_GATHER:
      if (A->grad)
        {
          int n_idx = nd->ia[0], cols = nd->ia[1];
          for (int r = 0; r < n_idx; r++)
            {
              float *g = A->grad + (gsize) nd->iaux[r] * cols;
              for (int c = 0; c < cols; c++)
                g[c] += gy[r * cols + c];
            }
        }
      break;
    case HT_MEANSQ:
      if (A->grad)
        for (int i = 0; i < A->n; i++)
          A->grad[i] += gy[0] * 2.0f * A->val[i] / (float) A->n;
      break;
    case HT_SUM:
      if (A->grad)
        for (int i = 0; i < A->n; i++)
          A->grad[i] += gy[0];
      break;
    case HT_CE:
      if (A->grad)
        {
          int target = nd->ia[0];
          float zw = nd->fa[0], lse = nd->fa[1], wgt = nd->fa[2];
          for (int i = 0; i < A->n; i++)
            {
              float p = expf (A->val[i] - lse);
              A->grad[i] += gy[0] * wgt * (p * (1.0f + 2.0f * zw * lse) - (i == target ? 1.0f : 0.0f));
            }
        }
      break;
    case HT_SMOOTHL1:
      if (A->grad)
        {
          float d = A->val[0] - nd->fa[0], beta = nd->fa[1];
          A->grad[0] += gy[0] * (fabsf (d) < beta ? d / beta : (d > 0 ? 1.0f : -1.0f));
        }
      break;
    case HT_STRAIGHT:
      if (A->grad)
        A->grad[0] += gy[0];
      break;
    default:
      g_assert_not_reached ();
    }
}

void
hn_htape_backward (HnHTape *t, HnVar root, float seed)
{
  HnHTapeNode *r = N (root);
  if (!r->grad)
    return;
  r->grad[0] += seed;
  for (HnVar v = root; v >= 0; v--)
    {
      HnHTapeNode *nd = N (v);
      if (nd->grad && nd->op != HT_LEAF)
        backward_node (t, nd);
    }
}

void
hn_htape_seed (HnHTape *t, HnVar v, float g)
{
  if (N (v)->grad)
    N (v)->grad[0] += g;
}

void
hn_htape_sweep (HnHTape *t)
{
  for (HnVar v = (HnVar) t->nodes->len - 1; v >= 0; v--)
    {
      HnHTapeNode *nd = N (v);
      if (nd->grad && nd->op != HT_LEAF)
        backward_node (t, nd);
    }
}
