/* Ops: norms, softmax, rope, attention, losses and picks. */
#include "ops-private.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static gboolean scratch_disjoint (const char *op, HnTensor *sc, HnTensor *t, GError **error);

static gboolean
in_place_or_disjoint (const char *op, HnTensor *out, HnTensor *in, GError **error)
{
  if (out->buf == in->buf && out->offset != in->offset)
    {
      guint64 a0 = out->offset, a1 = a0 + hn_tensor_nbytes (out), b0 = in->offset, b1 = b0 + hn_tensor_nbytes (in);
      if (a0 < b1 && b0 < a1)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: output %s partly overlaps input %s", op,
                       out->name, in->name);
          return FALSE;
        }
    }
  return TRUE;
}

static gboolean
check_f32_same (const char *op, HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error)
{
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !hn_op_check_dtype (op, "in", in, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error))
    return FALSE;
  if (!hn_tensor_same_shape (out, in))
    {
      g_autofree char *di = hn_tensor_describe (in), *dout = hn_tensor_describe (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: out %s %s must have the shape of in %s %s", op,
                   out->name, dout, in->name, di);
      return FALSE;
    }
  return in_place_or_disjoint (op, out, in, error);
}

static gboolean
check_vec (const char *op, const char *role, HnCmd *cmd, HnTensor *t, gint64 n, GError **error)
{
  return !t || (hn_op_check_ctx (op, cmd, t, error) && hn_op_check_dtype (op, role, t, HN_DTYPE_F32, error) &&
                hn_op_check_count (op, role, t, n, error));
}

/* ------------------------------------------------------------ norms */

/* A norm's f16 out: the next matmul's operand; the shader's OUT16 (0 f32). */
static gboolean
check_norm_out16 (const char *op, HnCmd *cmd, HnTensor *out, HnTensor *x, guint32 *out16, GError **error)
{
  *out16 = 0;
  if (!out || out->dtype != HN_DTYPE_F16)
    return check_f32_same (op, cmd, out, x, error);
  /* as that matmul would round its own copy */
  *out16 = hn_op_f16_rounding (cmd);
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, x, error) ||
      !hn_op_check_dtype (op, "in", x, HN_DTYPE_F32, error))
    return FALSE;
  if (out->buf == x->buf && out->offset < x->offset + hn_tensor_nbytes (x) &&
      x->offset < out->offset + hn_tensor_nbytes (out))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: the f16 output %s overlaps input %s", op,
                   out->name, x->name);
      return FALSE;
    }
  if (!hn_tensor_same_shape (out, x) || hn_tensor_cols (x) % 2 != 0 || hn_eoff (out) % 2 != 0)
    {
      g_autofree char *dx = hn_tensor_describe (x), *dout = hn_tensor_describe (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: an f16 out %s %s needs the shape of in %s %s, an even last dim and an even offset", op,
                   out->name, dout, x->name, dx);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_rmsnorm (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, float eps, HnNormFlags flags, GError **error)
{
  const char *op = "rmsnorm";
  guint32 out16;
  if (!check_norm_out16 (op, cmd, out, x, &out16, error) || !check_vec (op, "weight", cmd, w, hn_tensor_cols (x), error))
    return FALSE;
  struct { guint32 rows, cols, x_off, w_off, o_off; float eps; guint32 flags; } pc = {
    (guint32) hn_tensor_rows (x), (guint32) hn_tensor_cols (x), hn_eoff (x), w ? hn_eoff (w) : 0, hn_eoff (out), eps,
    (guint32) (flags & 7) | (w ? 8u : 0u) };
  HnVkBinding bd[3] = { hn_bind (x, FALSE), hn_bind (w ? w : x, FALSE), hn_bind (out, TRUE) };
  guint32 spec[2] = { out16, hn_op_norm_sg_reduce (cmd) };
  return hn_op_dispatch_rows (cmd, "rmsnorm", spec, 2, bd, 3, &pc, sizeof pc, pc.rows, error);
}

gboolean
hn_op_layernorm (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, HnTensor *b, float eps, GError **error)
{
  const char *op = "layernorm";
  gint64 C = hn_tensor_cols (x);
  guint32 out16;
  if (!check_norm_out16 (op, cmd, out, x, &out16, error) || !check_vec (op, "weight", cmd, w, C, error) ||
      !check_vec (op, "bias", cmd, b, C, error))
    return FALSE;
  struct { guint32 rows, cols, x_off, w_off, b_off, o_off; float eps; guint32 flags; } pc = {
    (guint32) hn_tensor_rows (x), (guint32) C, hn_eoff (x), w ? hn_eoff (w) : 0, b ? hn_eoff (b) : 0, hn_eoff (out),
    eps, (w ? 1u : 0u) | (b ? 2u : 0u) };
  HnVkBinding bd[4] = { hn_bind (x, FALSE), hn_bind (w ? w : x, FALSE), hn_bind (b ? b : x, FALSE), hn_bind (out, TRUE) };
  guint32 spec[2] = { out16, hn_op_norm_sg_reduce (cmd) };
  return hn_op_dispatch_rows (cmd, "layernorm", spec, 2, bd, 4, &pc, sizeof pc, pc.rows, error);
}

/* ------------------------------------------------------------ softmax */

/* Mask [Bm, Tm, S] (or [Tm, S], [S]) against rows split in blocks of T. */
static gboolean
mask_geometry (const char *op, HnTensor *mask, gint64 rows, gint64 T, gint64 S, guint32 *mask_B, guint32 *mask_T,
               GError **error)
{
  if (!hn_op_check_dtype (op, "mask", mask, HN_DTYPE_F32, error))
    return FALSE;
  gint64 mcols = hn_tensor_cols (mask);
  gint64 mT = mask->ndim >= 2 ? mask->shape[mask->ndim - 2] : 1;
  gint64 mB = mask->n / (mcols * mT);
  if (mcols != S || (mT != 1 && mT != T) || rows % (mB * T) != 0)
    {
      g_autofree char *d = hn_tensor_describe (mask);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: mask %s %s must be [B, T or 1, %" G_GINT64_FORMAT "] with T = %" G_GINT64_FORMAT
                   " and B dividing the batch", op, mask->name, d, S, T);
      return FALSE;
    }
  *mask_B = (guint32) mB;
  *mask_T = (guint32) mT;
  return TRUE;
}

gboolean
hn_op_softmax (HnCmd *cmd, HnTensor *out, HnTensor *in, const HnSoftmaxParams *params, GError **error)
{
  const char *op = "softmax";
  static const HnSoftmaxParams defaults = { 0 };
  if (!params)
    params = &defaults;
  if (!check_f32_same (op, cmd, out, in, error) || !hn_op_check_ctx (op, cmd, params->mask, error))
    return FALSE;
  gint64 rows = hn_tensor_rows (in), S = hn_tensor_cols (in);
  gint64 T = in->ndim >= 2 ? in->shape[in->ndim - 2] : 1;
  guint32 mB = 1, mT = 1;
  if (params->mask && !mask_geometry (op, params->mask, rows, T, S, &mB, &mT, error))
    return FALSE;
  if (params->window < 0 || params->pos0 < 0 || params->pos0 > G_MAXINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "softmax: negative window or bad pos0");
      return FALSE;
    }
  struct {
    guint32 rows, cols, x_off, m_off, o_off, T;
    gint32 pos0;
    guint32 window, causal;
    float scale, softcap;
    guint32 has_mask, mask_rows_per_batch, mask_T;
  } pc = {
    (guint32) rows, (guint32) S, hn_eoff (in), params->mask ? hn_eoff (params->mask) : 0, hn_eoff (out), (guint32) T,
    (gint32) params->pos0, (guint32) params->window, params->causal ? 1u : 0u,
    params->scale != 0.0f ? params->scale : 1.0f, params->softcap,
    params->mask != NULL, (guint32) (rows / mB), mT };
  HnVkBinding bd[3] = { hn_bind (in, FALSE), hn_bind (params->mask ? params->mask : in, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_rows (cmd, "softmax", NULL, 0, bd, 3, &pc, sizeof pc, pc.rows, error);
}

/* ------------------------------------------------------------ rope */

gboolean
hn_op_rope (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *positions, HnTensor *inv_freq, int rot_dims,
            HnRopeStyle style, float attn_scale, GError **error)
{
  const char *op = "rope";
  if (!check_f32_same (op, cmd, out, x, error) || !hn_op_check_ctx (op, cmd, positions, error) ||
      !hn_op_check_ctx (op, cmd, inv_freq, error) ||
      !hn_op_check_dtype (op, "positions", positions, HN_DTYPE_I32, error))
    return FALSE;
  if (x->ndim < 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "rope: x %s must be [.., heads, head_dim]", x->name);
      return FALSE;
    }
  gint64 D = hn_tensor_cols (x), H = x->shape[x->ndim - 2], rows = hn_tensor_rows (x);
  if (rot_dims <= 0 || rot_dims > D || rot_dims % 2 != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "rope: rot_dims %d must be even and within head_dim %" G_GINT64_FORMAT, rot_dims, D);
      return FALSE;
    }
  if (!hn_op_check_count (op, "positions", positions, rows / H, error) ||
      !check_vec (op, "inv_freq", cmd, inv_freq, rot_dims / 2, error))
    return FALSE;
  if (style != HN_ROPE_NEOX && style != HN_ROPE_GPTJ)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "rope: unknown style %d", (int) style);
      return FALSE;
    }
  guint64 per_row = (guint64) (D - rot_dims / 2);
  struct { guint32 n, H, D, rot, x_off, p_off, f_off, o_off, style; float attn_scale; } pc = {
    (guint32) (rows * per_row), (guint32) H, (guint32) D, (guint32) rot_dims, hn_eoff (x), hn_eoff (positions),
    hn_eoff (inv_freq), hn_eoff (out), (guint32) style, attn_scale };
  HnVkBinding bd[4] = { hn_bind (x, FALSE), hn_bind (positions, FALSE), hn_bind (inv_freq, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "rope", NULL, 0, bd, 4, &pc, sizeof pc, pc.n, error);
}

gboolean
hn_op_rope_kv (HnCmd *cmd, HnTensor *q, HnTensor *k, HnTensor *v, HnTensor *positions, HnTensor *inv_freq,
               int rot_dims, HnRopeStyle style, float attn_scale, const HnKvDest *dest, GError **error)
{
  const char *op = "rope_kv";
  HnTensor *kc = dest->k_cache, *vc = dest->v_cache;
  HnTensor *all[8] = { q, k, v, positions, inv_freq, kc, vc, dest->dyn_row };
  for (int i = 0; i < 8; i++)
    if (!hn_op_check_ctx (op, cmd, all[i], error))
      return FALSE;
  if (!hn_op_check_dtype (op, "q", q, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "k", k, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "v", v, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "k_cache", kc, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "v_cache", vc, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "positions", positions, HN_DTYPE_I32, error) ||
      (dest->dyn_row && (!hn_op_check_dtype (op, "dyn_row", dest->dyn_row, HN_DTYPE_I32, error) ||
                         !hn_op_check_count (op, "dyn_row", dest->dyn_row, 1, error))))
    return FALSE;
  if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || q->shape[0] != k->shape[0] || v->shape[0] != k->shape[0] ||
      v->shape[1] != k->shape[1] || q->shape[2] != k->shape[2] || kc->ndim < 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "rope_kv: q, k, v (tensors %s, %s, %s) must be [T, H, D], [T, KVH, D], [T, KVH, Dv]", q->name,
                   k->name, v->name);
      return FALSE;
    }
  gint64 T = q->shape[0], H = q->shape[1], KVH = k->shape[1], D = q->shape[2], Dv = v->shape[2];
  gint64 seqs = MAX (dest->seqs, 1), n_ctx = kc->shape[0] / seqs, tr = T / seqs;
  if (kc->shape[0] % seqs != 0 || T % seqs != 0 || (seqs > 1 && dest->dyn_row) || kc->n != seqs * n_ctx * KVH * D ||
      vc->n != seqs * n_ctx * KVH * Dv || vc->shape[0] != seqs * n_ctx ||
      (!dest->dyn_row && (dest->row0 < 0 || dest->row0 + tr > n_ctx)))
    {
      g_autofree char *dk = hn_tensor_describe (kc), *dv = hn_tensor_describe (vc);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "rope_kv: caches %s %s, %s %s do not take %" G_GINT64_FORMAT " sequences of %" G_GINT64_FORMAT
                   " rows of %" G_GINT64_FORMAT " heads from row %" G_GINT64_FORMAT " (a replayed step: one sequence)",
                   kc->name, dk, vc->name, dv, seqs, tr, KVH, dest->row0);
      return FALSE;
    }
  if (rot_dims <= 0 || rot_dims > D || rot_dims % 2 != 0 || (style != HN_ROPE_NEOX && style != HN_ROPE_GPTJ))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "rope_kv: rot_dims %d must be even and within head_dim %" G_GINT64_FORMAT ", style NeoX or GPT-J",
                   rot_dims, D);
      return FALSE;
    }
  if (!hn_op_check_count (op, "positions", positions, T, error) ||
      !check_vec (op, "inv_freq", cmd, inv_freq, rot_dims / 2, error))
    return FALSE;
  HnTensor *srcs[3] = { q, k, v };
  for (int i = 0; i < 3; i++)
    if (!scratch_disjoint (op, kc, srcs[i], error) || !scratch_disjoint (op, vc, srcs[i], error))
      return FALSE;
  if (!scratch_disjoint (op, kc, vc, error))
    return FALSE;
  guint64 per_row = (guint64) (D - rot_dims / 2);
  /* HN_ROPE_KV_BY_PAIR=1: an invocation per (token, pair) for all heads (rope_kv.comp's PAIRS) */
  guint32 pairs = g_strcmp0 (g_getenv ("HN_ROPE_KV_BY_PAIR"), "1") == 0;
  guint64 n = (guint64) T * (pairs ? 1 : H + KVH) * per_row + (guint64) (T * KVH * Dv);
  struct {
    guint32 T, H, KVH, D, Dv, rot, q_off, k_off, v_off, p_off, f_off, kc_off, vc_off, style;
    float attn_scale;
    guint32 n_ctx, row0, dyn, dyn_off, tr;
  } pc = {
    (guint32) T, (guint32) H, (guint32) KVH, (guint32) D, (guint32) Dv, (guint32) rot_dims, hn_eoff (q), hn_eoff (k),
    hn_eoff (v), hn_eoff (positions), hn_eoff (inv_freq), hn_eoff (kc), hn_eoff (vc), (guint32) style, attn_scale,
    (guint32) n_ctx, dest->dyn_row ? 0 : (guint32) dest->row0, dest->dyn_row != NULL,
    dest->dyn_row ? hn_eoff (dest->dyn_row) : 0, (guint32) tr };
  HnVkBinding bd[8] = { hn_bind (q, TRUE), hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (positions, FALSE),
                        hn_bind (inv_freq, FALSE), hn_bind (kc, TRUE), hn_bind (vc, TRUE),
                        hn_bind (dest->dyn_row ? dest->dyn_row : positions, FALSE) };
  return hn_op_dispatch_elems (cmd, "rope_kv", &pairs, 1, bd, 8, &pc, sizeof pc, n, error);
}

/* ------------------------------------------------------------ attention */

float *
hn_sinusoidal_table_fairseq (int n_rows, int C, int padding_idx)
{
  float *t = g_new0 (float, (gsize) n_rows * C);
  int half = C / 2;
  /* in float32 as transformers computes it: exp(j * -step), times r, then sin / cos */
  float step = half > 1 ? (float) (log (10000.0) / (half - 1)) : 0.0f;
  for (int r = 0; r < n_rows; r++)
    for (int j = 0; j < half && r != padding_idx; j++)
      {
        float a = (float) r * expf ((float) j * -step);
        t[(gsize) r * C + j] = sinf (a);
        t[(gsize) r * C + half + j] = cosf (a);
      }
  return t;
}

void
hn_alibi_slopes (int n_heads, float max_bias, float *slopes)
{
  /* BLOOM / MPT: slopes are powers of 2^(-max_bias/n) for the closest power
   * of two n <= n_heads, then interleaved extra slopes for the rest. */
  if (max_bias <= 0)
    max_bias = 8.0f;
  int closest = 1;
  while (closest * 2 <= n_heads)
    closest *= 2;
  double base = pow (2.0, -(double) max_bias / closest);
  for (int i = 0; i < closest && i < n_heads; i++)
    slopes[i] = (float) pow (base, i + 1);
  if (closest < n_heads)
    {
      double extra = pow (2.0, -(double) max_bias / (2 * closest));
      for (int i = 0; i < n_heads - closest; i++)
        slopes[closest + i] = (float) pow (extra, 2 * i + 1);
    }
}

static gboolean
scratch_disjoint (const char *op, HnTensor *sc, HnTensor *t, GError **error)
{
  if (t && sc->buf == t->buf && sc->offset < t->offset + hn_tensor_nbytes (t) &&
      t->offset < sc->offset + hn_tensor_nbytes (sc))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: scratch %s overlaps tensor %s", op, sc->name,
                   t->name);
      return FALSE;
    }
  return TRUE;
}

/* The split-K decode kernel by KV head: attention_decode_tile.comp, or with HN_DECODE_ATTN=old
 * attention_decode.comp and its split plan (an A/B switch). */
static gboolean
decode_tile (void)
{
  return g_strcmp0 (g_getenv ("HN_DECODE_ATTN"), "old") != 0;
}

/* Split-K plan: enough workgroups to fill a large GPU (~256 of them) from
 * (head, query) pairs and key chunks of at least 64 keys (one block). */
static guint32
attention_n_split (gint64 B, gint64 T, gint64 H, gint64 n_kv, guint32 *chunk)
{
  *chunk = 0;
  if (T > 8 || n_kv <= 64)
    return 1;
  gint64 rows = B * T * H;
  gint64 blocks = (n_kv + 63) / 64;
  /* attention_decode_tile.comp: up to 2048 partial rows (one block of 64 keys per workgroup up to
   * 64 splits for 32 heads), at most 128 splits (its merge); attention_decode.comp: 256 rows, 64 */
  gboolean tile = decode_tile ();
  gint64 want = MAX (1, (tile ? 2048 : 256) / rows);
  gint64 n = MIN (MIN (want, blocks), tile ? 128 : 64);
  if (n < 2)
    return 1;
  gint64 c = ((blocks + n - 1) / n) * 64;
  *chunk = (guint32) c;
  return (guint32) ((n_kv + c - 1) / c);
}

gint64
hn_attention_scratch_size (gint64 B, gint64 T, gint64 H, gint64 Dv, gint64 n_kv)
{
  guint32 chunk;
  guint32 n = attention_n_split (B, T, H, n_kv, &chunk);
  return n < 2 ? 0 : B * T * H * (gint64) n * (Dv + 2);
}

/* t (f32, contiguous) as f16 into bytes [byte0, byte0 + bytes) of s
 * (to_f16.comp, mode 0: finite values clamped to ±65504). */
static gboolean
kv_to_f16 (HnCmd *cmd, HnTensor *t, HnVkBuffer *s, guint64 byte0, guint64 bytes, GError **error)
{
  return hn_record_to_f16 (cmd, "attention_kv_f16", t, s, byte0, bytes, 0, error);
}

/* The split hn_op_attention plans for B x T queries of H heads: n_split >= 2 when split-K runs. */
static guint32
attention_plan (const HnAttentionParams *params, gint64 B, gint64 T, gint64 H, gint64 Dv, gint64 n_ctx,
                guint32 *chunk)
{
  *chunk = 0;
  HnTensor *sc = params->scratch;
  if (!sc || g_getenv ("HN_NO_SPLITK") != NULL)
    return 1;
  gint64 n_kv = params->n_kv > 0 && !params->dyn_pos ? params->n_kv : n_ctx;
  guint32 n_split = attention_n_split (B, T, H, n_kv, chunk);
  /* The single pass is exact too: a scratch too small to split just keeps it. */
  if (n_split >= 2 && (sc->n < B * T * H * (gint64) n_split * (Dv + 2) || B * (gint64) n_split > 65535))
    n_split = 1;
  return n_split;
}

static gboolean
attention_by_kv_head (gint64 H, gint64 KVH)
{
  return H / KVH <= 8 && g_getenv ("HN_ATTN_DECODE_PER_HEAD") == NULL;
}

/* params->new_kv against the kernel that takes it (split-K by KV head, one query, f32 caches). */
static gboolean
check_new_kv (HnCmd *cmd, HnTensor *q, HnTensor *k, HnTensor *v, const HnAttentionParams *params, gboolean batched,
              guint32 n_split, GError **error)
{
  const char *op = "attention";
  const HnAttentionNewKv *nk = params->new_kv;
  gint64 H = q->shape[1], KVH = k->shape[1], D = q->shape[2], Dv = v->shape[2];
  if (batched || q->shape[0] != 1 || n_split < 2 || !attention_by_kv_head (H, KVH) || k->dtype != HN_DTYPE_F32 ||
      params->lse || g_getenv ("HN_NO_ATTN_ROPE_KV") != NULL)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "attention: the new key and value are written only by the split-K decode kernel (one query, "
                   "f32 caches, at most 8 query heads per KV head; see hn_attention_new_kv_ok)");
      return FALSE;
    }
  HnTensor *all[4] = { nk->k, nk->v, nk->positions, nk->inv_freq };
  for (int i = 0; i < 4; i++)
    if (!hn_op_check_ctx (op, cmd, all[i], error))
      return FALSE;
  if (!nk->k || !nk->v || !hn_op_check_dtype (op, "new k", nk->k, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "new v", nk->v, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "positions", nk->positions, HN_DTYPE_I32, error) ||
      !hn_op_check_count (op, "new k", nk->k, KVH * D, error) || !hn_op_check_count (op, "new v", nk->v, KVH * Dv, error) ||
      !hn_op_check_count (op, "positions", nk->positions, 1, error))
    return FALSE;
  if (nk->rot_dims <= 0 || nk->rot_dims > D || nk->rot_dims % 2 != 0 ||
      (nk->style != HN_ROPE_NEOX && nk->style != HN_ROPE_GPTJ))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "attention: rot_dims %d must be even and within head_dim %" G_GINT64_FORMAT ", style NeoX or GPT-J",
                   nk->rot_dims, D);
      return FALSE;
    }
  if (!check_vec (op, "inv_freq", cmd, nk->inv_freq, nk->rot_dims / 2, error))
    return FALSE;
  HnTensor *srcs[5] = { q, nk->k, nk->v, nk->positions, nk->inv_freq };
  for (int i = 0; i < 5; i++)
    if (!scratch_disjoint (op, k, srcs[i], error) || !scratch_disjoint (op, v, srcs[i], error))
      return FALSE;
  return scratch_disjoint (op, k, v, error);
}

gboolean
hn_attention_new_kv_ok (const HnAttentionParams *params, gint64 H, gint64 KVH, gint64 D, gint64 Dv, gint64 n_ctx,
                        HnDType kv_dtype)
{
  guint32 chunk;
  return params && kv_dtype == HN_DTYPE_F32 && KVH > 0 && H % KVH == 0 && attention_by_kv_head (H, KVH) &&
         D <= 256 && Dv <= 256 && !params->lse && g_getenv ("HN_NO_ATTN_ROPE_KV") == NULL &&
         attention_plan (params, 1, 1, H, Dv, n_ctx, &chunk) >= 2;
}

gboolean
hn_op_attention (HnCmd *cmd, HnTensor *out, HnTensor *q, HnTensor *k, HnTensor *v, const HnAttentionParams *params,
                 GError **error)
{
  const char *op = "attention";
  static const HnAttentionParams defaults = { 0 };
  if (!params)
    params = &defaults;
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, q, error) ||
      !hn_op_check_ctx (op, cmd, k, error) || !hn_op_check_ctx (op, cmd, v, error) ||
      !hn_op_check_ctx (op, cmd, params->mask, error) || !hn_op_check_ctx (op, cmd, params->alibi_slopes, error) ||
      !hn_op_check_ctx (op, cmd, params->dyn_pos, error))
    return FALSE;
  if (params->dyn_pos && (!hn_op_check_dtype (op, "dyn_pos", params->dyn_pos, HN_DTYPE_I32, error) ||
                          !hn_op_check_count (op, "dyn_pos", params->dyn_pos, 1, error)))
    return FALSE;
  if (!hn_op_check_dtype (op, "q", q, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) ||
      !hn_op_check_float_storage (op, "k", k, error) || !hn_op_check_dtype (op, "v", v, k->dtype, error))
    return FALSE;
  gboolean batched = q->ndim == 4;
  if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim || out->ndim != q->ndim)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "attention: q, k, v and out must all be [T, H, D] / [n_ctx, KVH, D] (or with a leading batch dim)");
      return FALSE;
    }
  int o = batched ? 1 : 0;
  gint64 B = batched ? q->shape[0] : 1;
  gint64 T = q->shape[o], H = q->shape[o + 1], D = q->shape[o + 2];
  gint64 n_ctx = k->shape[o], KVH = k->shape[o + 1], Dv = v->shape[o + 2];
  /* with dyn_pos the key count is only known on the device: plan (split, mask) for all of n_ctx */
  gint64 n_kv = params->n_kv > 0 && !params->dyn_pos ? params->n_kv : n_ctx;
  if ((batched && (k->shape[0] != B || v->shape[0] != B || out->shape[0] != B)) || k->shape[o + 2] != D ||
      v->shape[o] != n_ctx || v->shape[o + 1] != KVH || out->shape[o] != T || out->shape[o + 1] != H ||
      out->shape[o + 2] != Dv || H % KVH != 0 || n_kv > n_ctx)
    {
      g_autofree char *dq = hn_tensor_describe (q), *dk = hn_tensor_describe (k), *dv = hn_tensor_describe (v),
                      *dout = hn_tensor_describe (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "attention: shapes do not fit (q %s, k %s, v %s, out %s, n_kv %" G_GINT64_FORMAT
                   "; heads must be a multiple of KV heads)", dq, dk, dv, dout, n_kv);
      return FALSE;
    }
  if (D > 256 || Dv > 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "attention: head dim %" G_GINT64_FORMAT " above 256",
                   MAX (D, Dv));
      return FALSE;
    }
  if (H > 65535 || T > 65535 || B > 65535 || params->pos0 < 0 || params->pos0 > G_MAXINT32 || params->window < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "attention: heads, queries or batch above 65535, or bad pos0/window");
      return FALSE;
    }
  if (params->local_chunk < 0 || params->local_chunk > G_MAXINT32 || (params->local_chunk > 0 && params->window > 0) ||
      params->window > G_MAXINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "attention: a window or local_chunk outside 0..2^31, or both together");
      return FALSE;
    }
  if (params->local_chunk > 0 && params->lse)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "attention: local_chunk with the log-sum-exp output (the "
                                                          "flash kernel does not take chunked attention)");
      return FALSE;
    }
  if (!check_vec (op, "alibi_slopes", cmd, params->alibi_slopes, H, error) ||
      !check_vec (op, "sinks", cmd, params->sinks, H, error))
    return FALSE;
  if (params->alibi_slopes && params->sinks)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "attention: ALiBi slopes and sinks together");
      return FALSE;
    }
  HnTensor *per_head = params->alibi_slopes ? params->alibi_slopes : params->sinks;
  guint32 mB = 1, mT = 1, mcols = 0;
  if (params->mask)
    {
      if (!hn_op_check_dtype (op, "mask", params->mask, HN_DTYPE_F32, error))
        return FALSE;
      HnTensor *m = params->mask;
      mcols = (guint32) hn_tensor_cols (m);
      gint64 mt = m->ndim >= 2 ? m->shape[m->ndim - 2] : 1;
      gint64 mb = m->n / (mcols * mt);
      if (mcols < n_kv || (mt != 1 && mt != T) || (mb != 1 && mb != B))
        {
          g_autofree char *dm = hn_tensor_describe (m);
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "attention: mask %s %s must be [B or 1, T or 1, >= n_kv]", m->name, dm);
          return FALSE;
        }
      mB = (guint32) mb;
      mT = (guint32) mt;
    }
  if (!in_place_or_disjoint (op, out, q, error))
    return FALSE;
  struct {
    guint32 T, H, KVH, D, Dv, n_ctx, n_kv;
    gint32 pos0;
    guint32 window, causal;
    float scale, softcap;
    guint32 q_off, k_off, v_off, o_off, s_off, m_off, flags, mask_B, mask_T, mask_cols, chunk, n_split, dyn_off, lse_off;
  } pc = {
    (guint32) T, (guint32) H, (guint32) KVH, (guint32) D, (guint32) Dv, (guint32) n_ctx, (guint32) n_kv,
    (gint32) params->pos0,
    /* the kernels' window word (hn_window_hides in common.glsl): bit 31 marks a local chunk */
    params->local_chunk > 0 ? 0x80000000u | (guint32) params->local_chunk : (guint32) params->window,
    params->causal ? 1u : 0u, params->scale != 0.0f ? params->scale : (float) (1.0 / sqrt ((double) D)),
    params->softcap, hn_eoff (q), hn_eoff (k), hn_eoff (v), hn_eoff (out),
    per_head ? hn_eoff (per_head) : 0, params->mask ? hn_eoff (params->mask) : 0,
    (params->alibi_slopes ? 1u : 0u) | (params->mask ? 2u : 0u) | (params->sinks ? 4u : 0u) |
      (params->dyn_pos ? 8u : 0u), mB, mT, mcols, 0, 1, params->dyn_pos ? hn_eoff (params->dyn_pos) : 0, 0 };
  guint32 chunk = 0, n_split = 1;
  HnTensor *sc = params->scratch;
  if (sc && g_getenv ("HN_NO_SPLITK") == NULL)
    {
      if (!hn_op_check_ctx (op, cmd, sc, error) || !hn_op_check_dtype (op, "scratch", sc, HN_DTYPE_F32, error) ||
          !scratch_disjoint (op, sc, out, error) || !scratch_disjoint (op, sc, q, error) ||
          !scratch_disjoint (op, sc, k, error) || !scratch_disjoint (op, sc, v, error) ||
          !scratch_disjoint (op, sc, params->mask, error) || !scratch_disjoint (op, sc, per_head, error) ||
          !scratch_disjoint (op, sc, params->dyn_pos, error))
        return FALSE;
      n_split = attention_plan (params, B, T, H, Dv, n_ctx, &chunk);
    }
  const HnAttentionNewKv *nk = params->new_kv;
  if (nk && !check_new_kv (cmd, q, k, v, params, batched, n_split, error))
    return FALSE;
  guint32 spec[2] = { hn_op_float_code (k->dtype), n_split >= 2 ? 1u : 0u };
  HnVkBinding bd[7] = {
    hn_bind (q, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE),
    hn_bind (per_head ? per_head : q, FALSE), hn_bind (params->mask ? params->mask : q, FALSE),
    hn_bind (n_split >= 2 ? sc : out, TRUE), hn_bind (params->dyn_pos ? params->dyn_pos : q, FALSE) };
  /* Many queries in reduced precision on NVIDIA: flash attention on the
   * tensor cores (attention_cm2.comp), blocks of 64 queries and 64 keys;
   * with params->lse (training) always, writing the rows' log-sum-exp. */
  guint32 nt = 0;
  if (params->lse)
    {
      if (!params->reduced_precision || !hn_attention_flash_ok (hn_cmd_get_context (cmd), D, Dv, params) ||
          (params->n_kv > 0 && params->n_kv != n_ctx) || k->dtype != HN_DTYPE_F32)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "attention: the log-sum-exp output needs the flash kernel (reduced precision, f32 k/v, all of "
                       "n_ctx, and hn_attention_flash_ok)");
          return FALSE;
        }
      if (!hn_op_check_ctx (op, cmd, params->lse, error) || !hn_op_check_dtype (op, "lse", params->lse, HN_DTYPE_F32, error) ||
          !hn_op_check_count (op, "lse", params->lse, B * T * H, error) ||
          !scratch_disjoint (op, params->lse, out, error) || !scratch_disjoint (op, params->lse, q, error))
        return FALSE;
      n_split = 1;
      pc.flags |= 16u;
      pc.lse_off = hn_eoff (params->lse);
      bd[5] = hn_bind (out, TRUE);
      bd[6] = hn_bind (params->lse, TRUE);
    }
  /* (not with a local chunk: its mask is not in the flash kernels; the exact ones below take it) */
  if (params->reduced_precision && n_split < 2 && (T >= 16 || params->lse) && D == Dv && (D == 64 || D == 128) &&
      !params->dyn_pos && params->local_chunk == 0 && hn_vk_context_has_coopmat2 (hn_cmd_get_context (cmd), &nt) &&
      (params->lse || g_getenv ("HN_NO_ATTN_CM2") == NULL))
    {
      /* the softmax in the matrices (row reductions) where nothing per-head or masked is added */
      gboolean reg = hn_vk_context_has_coopmat2_reductions (hn_cmd_get_context (cmd)) && !per_head &&
                     !params->mask && g_getenv ("HN_ATTN_CM2_SHARED") == NULL;
      /* attention_cm2_reg: FAST (longest query blocks first, loads issued
       * early) and the tile BR x BC on NT invocations, unless
       * HN_ATTN_CM2_OLD=1 (64 x 64, as before); HN_ATTN_CM2_TILE=BR,BC,NT
       * (multiples of 16 up to 128, NT a size the device lists) to sweep */
      gboolean old = g_getenv ("HN_ATTN_CM2_OLD") != NULL;
      guint32 br = 64, bc = 64, tnt = nt, e[3];
      /* training's forward (the LSE out) on 128 invocations: gpt2-124m 8 x 1024, 3.54 against
       * 3.65 ms on 256 (2026-12-03h) */
      if (reg && !old && params->lse &&
          (hn_vk_context_get_device_info (hn_cmd_get_context (cmd))->nv2_invocations_listed & (128 / 32)))
        tnt = 128;
      const char *tile = g_getenv ("HN_ATTN_CM2_TILE");
      if (reg && !old && tile)
        {
          /* S = Q·Kᵀ is BR x BC over HD, O += P·V BR x HD over BC: both within the device's granularity */
          const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
          if (sscanf (tile, "%u,%u,%u", &e[0], &e[1], &e[2]) == 3 && e[0] <= 128 && e[1] <= 128 &&
              hn_vk_coopmat2_product_ok (info, e[2], e[0], e[1], (guint32) D) &&
              hn_vk_coopmat2_product_ok (info, e[2], e[0], (guint32) D, e[1]))
            br = e[0], bc = e[1], tnt = e[2];
          else
            {
              static gsize once = 0;
              hn_op_warn_tile_once (&once, "HN_ATTN_CM2_TILE", tile);
            }
        }
      /* HN_ATTN_CM2_EPI=callback: max and exp through coopMatPerElementNV (attention_cm2_reg's EPI_LOOP) */
      guint32 cspec[7] = { spec[0], (guint32) D, reg ? tnt : nt, br, bc, old ? 0u : 1u,
                           g_strcmp0 (g_getenv ("HN_ATTN_CM2_EPI"), "callback") != 0 };
      /* training (the log-sum-exp out), and prefill too unless
       * HN_ATTN_CM2_OLD=1 or HN_ATTN_CM2_KV16=0: f32 K and V become f16 in
       * the recorder's scratch first, clamped as the kernel's own f32 decode
       * does; each key block is then read as 16-bit operands without a
       * per-element decode (the kernel loads it once per query block) */
      gboolean kv16 = params->lse || (!old && g_strcmp0 (g_getenv ("HN_ATTN_CM2_KV16"), "0") != 0);
      if (kv16 && k->dtype == HN_DTYPE_F32 && v->dtype == HN_DTYPE_F32 && g_getenv ("HN_ATTN_CM2_F32_KV") == NULL)
        {
          guint64 kb = ((guint64) k->n * 2 + 255) & ~(guint64) 255, vb = ((guint64) v->n * 2 + 255) & ~(guint64) 255;
          HnVkBuffer *s = (kb + vb) / 2 <= G_MAXUINT32 ? hn_cmd_scratch (cmd, kb + vb, error) : NULL;
          if ((kb + vb) / 2 <= G_MAXUINT32)
            {
              if (!s || !kv_to_f16 (cmd, k, s, 0, kb, error) || !kv_to_f16 (cmd, v, s, kb, vb, error))
                return FALSE;
              bd[1] = (HnVkBinding) { s, 0, kb, FALSE };
              bd[2] = (HnVkBinding) { s, kb, vb, FALSE };
              pc.k_off = 0;
              pc.v_off = (guint32) (kb / 2);
              cspec[0] = hn_op_float_code (HN_DTYPE_F16);
            }
        }
      const char *sh = reg ? "attention_cm2_reg" : "attention_cm2";
      hn_cmd_set_label (cmd, sh);
      gboolean ok = hn_cmd_dispatch (cmd, sh, cspec, reg ? 7 : 3, bd, 7, &pc, sizeof pc,
                                     (guint32) ((T + br - 1) / br), (guint32) H, (guint32) B, error);
      hn_cmd_set_label (cmd, NULL);
      return ok;
    }
  /* Many queries (prefill, training): blocks of 16 queries share each key
   * block in shared memory (attention_prefill.comp, head dims <= 128; the
   * position always from the push constants). */
  if (n_split < 2 && T >= 16 && D <= 128 && Dv <= 128 && !params->dyn_pos && g_getenv ("HN_NO_ATTN_PREFILL") == NULL)
    {
      hn_cmd_set_label (cmd, "attention_prefill");
      gboolean ok = hn_cmd_dispatch (cmd, "attention_prefill", spec, 1, bd, 6, &pc, sizeof pc,
                                     (guint32) ((T + 15) / 16), (guint32) H, (guint32) B, error);
      hn_cmd_set_label (cmd, NULL);
      return ok;
    }
  if (n_split < 2)
    return hn_cmd_dispatch (cmd, "attention", spec, 2, bd, 7, &pc, sizeof pc, (guint32) H, (guint32) T, (guint32) B,
                            error);
  pc.chunk = chunk;
  pc.n_split = n_split;
  pc.o_off = hn_eoff (sc);
  /* Split-K by KV head when at most 8 query heads share one (attention_decode_tile.comp, or
   * attention_decode.comp with HN_DECODE_ATTN=old: each key and value row read once for the
   * group); else one workgroup per query head. */
  if (attention_by_kv_head (H, KVH))
    {
      guint32 epu = k->dtype == HN_DTYPE_F32 ? 4 : 8;
      /* the last split of each group merges them all (no attention_merge dispatch) with a counter */
      HnTensor *cnt = params->counters;
      gboolean merge = cnt && cnt->dtype == HN_DTYPE_I32 && cnt->n >= B * T * KVH &&
                       g_getenv ("HN_ATTN_SEPARATE_MERGE") == NULL;
      if (merge && (!hn_op_check_ctx (op, cmd, cnt, error) || !scratch_disjoint (op, cnt, out, error) ||
                    !scratch_disjoint (op, cnt, sc, error) || !scratch_disjoint (op, sc, out, error)))
        return FALSE;
      /* the register arrays sized to the group (a power of two) and to Dv */
      guint32 gmax = 1;
      while (gmax < (guint32) (H / KVH))
        gmax *= 2;
      /* loads in flight: 8 key chunks and 8 value rows (1 on a CPU device: no latency to hide, and
       * a small kernel to compile) */
      gboolean cpu = g_str_equal (hn_vk_context_get_device_info (hn_cmd_get_context (cmd))->type, "cpu");
      guint32 dspec[8] = { spec[0], D % epu == 0 && hn_eoff (k) % epu == 0 ? 1u : 0u, nk ? 1u : 0u, merge ? 1u : 0u,
                           gmax, (guint32) ((Dv + 63) / 64), cpu ? 1u : 8u, cpu ? 1u : 8u };
      struct {
        guint32 base[26];
        guint32 rope_rs;
        float rope_scale;
        guint32 kn_off, vn_off, p_off, f_off;
      } dpc;
      G_STATIC_ASSERT (sizeof pc == sizeof dpc.base);
      memcpy (dpc.base, &pc, sizeof pc);
      dpc.base[9] = merge ? hn_eoff (cnt) : 0;            /* the causal slot: the counters' offset */
      dpc.base[18] |= params->causal ? 32u : 0u;          /* flags: causal */
      dpc.base[25] = merge ? hn_eoff (out) : 0;           /* lse_off: the merged output's offset */
      dpc.rope_rs = nk ? (guint32) nk->rot_dims | ((guint32) nk->style << 16) : 0;
      dpc.rope_scale = nk ? nk->attn_scale : 1.0f;
      dpc.kn_off = nk ? hn_eoff (nk->k) : 0;
      dpc.vn_off = nk ? hn_eoff (nk->v) : 0;
      dpc.p_off = nk ? hn_eoff (nk->positions) : 0;
      dpc.f_off = nk ? hn_eoff (nk->inv_freq) : 0;
      HnVkBinding dbd[15] = { bd[0], bd[1], bd[2], bd[3], bd[4], bd[5], bd[6],
                              hn_bind (nk ? nk->k : q, FALSE), hn_bind (nk ? nk->v : q, FALSE),
                              hn_bind (nk ? nk->positions : q, FALSE), hn_bind (nk ? nk->inv_freq : q, FALSE),
                              hn_bind (k, nk != NULL), hn_bind (v, nk != NULL), hn_bind (merge ? cnt : q, merge),
                              hn_bind (merge ? out : q, merge) };
      /* attention_decode_tile.comp: the register arrays sized to the rows' 4-element chunks (a key row
       * over 4 invocations; the value row's chunks to a power of two, at least 2) */
      guint32 dvp = 2;
      while (dvp < (guint32) ((Dv + 3) / 4))
        dvp *= 2;
      guint32 tspec[7] = { spec[0], D % 4 == 0 && Dv % 4 == 0 && hn_eoff (k) % 4 == 0 && hn_eoff (v) % 4 == 0,
                           dspec[2], dspec[3], gmax, (guint32) ((D + 15) / 16), dvp };
      gboolean tile = decode_tile ();
      hn_cmd_set_label (cmd, nk ? "attention_decode_rope_kv" : "attention_decode");
      gboolean ok = hn_cmd_dispatch (cmd, tile ? "attention_decode_tile" : "attention_decode", tile ? tspec : dspec,
                                     tile ? 7 : 8, dbd, 15, &dpc, sizeof dpc, (guint32) KVH, (guint32) T,
                                     (guint32) B * n_split, error);
      hn_cmd_set_label (cmd, NULL);
      if (!ok || merge)
        return ok;
    }
  else if (!hn_cmd_dispatch (cmd, "attention", spec, 2, bd, 7, &pc, sizeof pc, (guint32) H, (guint32) T,
                             (guint32) B * n_split, error))
    return FALSE;
  struct { guint32 T, H, Dv, n_split, s_off, o_off; } mpc = {
    (guint32) T, (guint32) H, (guint32) Dv, n_split, hn_eoff (sc), hn_eoff (out) };
  HnVkBinding mbd[2] = { hn_bind (sc, FALSE), hn_bind (out, TRUE) };
  return hn_cmd_dispatch (cmd, "attention_merge", NULL, 0, mbd, 2, &mpc, sizeof mpc, (guint32) H, (guint32) T,
                          (guint32) B, error);
}

/* ------------------------------------------------------------ losses, picks */

gboolean
hn_op_cross_entropy (HnCmd *cmd, HnTensor *loss, HnTensor *mean, HnTensor *logits, HnTensor *targets,
                     gint32 ignore_index, GError **error)
{
  const char *op = "cross_entropy";
  if (!hn_op_check_ctx (op, cmd, loss, error) || !hn_op_check_ctx (op, cmd, logits, error) ||
      !hn_op_check_ctx (op, cmd, targets, error) || !hn_op_check_dtype (op, "logits", logits, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "targets", targets, HN_DTYPE_I32, error))
    return FALSE;
  gint64 N = hn_tensor_rows (logits), V = hn_tensor_cols (logits);
  if (!check_vec (op, "loss", cmd, loss, N, error) || !hn_op_check_count (op, "targets", targets, N, error) ||
      !check_vec (op, "mean", cmd, mean, 1, error))
    return FALSE;
  struct { guint32 rows, V, x_off, t_off, l_off; gint32 ignore; } pc = {
    (guint32) N, (guint32) V, hn_eoff (logits), hn_eoff (targets), hn_eoff (loss), ignore_index };
  HnVkBinding bd[3] = { hn_bind (logits, FALSE), hn_bind (targets, FALSE), hn_bind (loss, TRUE) };
  if (!hn_op_dispatch_rows (cmd, "cross_entropy", NULL, 0, bd, 3, &pc, sizeof pc, pc.rows, error))
    return FALSE;
  if (!mean)
    return TRUE;
  struct { guint32 rows, l_off, t_off, m_off; gint32 ignore; } pm = {
    (guint32) N, hn_eoff (loss), hn_eoff (targets), hn_eoff (mean), ignore_index };
  HnVkBinding bm[3] = { hn_bind (loss, FALSE), hn_bind (targets, FALSE), hn_bind (mean, TRUE) };
  return hn_cmd_dispatch (cmd, "cross_entropy_mean", NULL, 0, bm, 3, &pm, sizeof pm, 1, 1, 1, error);
}

gboolean
hn_op_topk (HnCmd *cmd, HnTensor *values, HnTensor *indices, HnTensor *in, int k, GError **error)
{
  const char *op = "topk";
  if (!hn_op_check_ctx (op, cmd, indices, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !hn_op_check_dtype (op, "in", in, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "indices", indices, HN_DTYPE_I32, error))
    return FALSE;
  gint64 rows = hn_tensor_rows (in), cols = hn_tensor_cols (in);
  if (k <= 0 || k > cols)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "topk: k = %d must be within 1..%" G_GINT64_FORMAT, k, cols);
      return FALSE;
    }
  if (!hn_op_check_count (op, "indices", indices, rows * k, error) ||
      !check_vec (op, "values", cmd, values, rows * k, error))
    return FALSE;
  struct { guint32 rows, cols, k, x_off, v_off, i_off, has_vals; } pc = {
    (guint32) rows, (guint32) cols, (guint32) k, hn_eoff (in), values ? hn_eoff (values) : 0, hn_eoff (indices),
    values != NULL };
  HnVkBinding bd[3] = { hn_bind (in, FALSE), hn_bind (values ? values : indices, TRUE), hn_bind (indices, TRUE) };
  return hn_op_dispatch_rows (cmd, "topk", NULL, 0, bd, 3, &pc, sizeof pc, pc.rows, error);
}

gboolean
hn_op_argmax_scratch (HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *scratch, GError **error)
{
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  /* One row (greedy decode): one workgroup of up to 1024 invocations with subgroup reductions. */
  if (hn_tensor_rows (in) != 1 || !info->subgroup_arithmetic || info->subgroup_size < 1)
    return hn_op_topk (cmd, NULL, out, in, 1, error);
  const char *op = "argmax";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !hn_op_check_dtype (op, "in", in, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_I32, error) ||
      !hn_op_check_count (op, "out", out, 1, error))
    return FALSE;
  /* at most 64 subgroups (the shader's shared arrays) */
  guint32 sg_min = info->min_subgroup_size ? MIN (info->min_subgroup_size, info->subgroup_size) : info->subgroup_size;
  guint32 wg = MIN (MIN (info->max_workgroup_invocations, 1024), 64 * sg_min);
  struct { guint32 cols, x_off, i_off, chunk, s_off, n_parts; } pc = { (guint32) in->n, hn_eoff (in), hn_eoff (out) };
  /* A long row with scratch: workgroups of 256 over chunks of 1024 columns, then one picks. */
  guint32 wp = MIN (wg, 256), chunk = 4 * wp;
  guint64 parts = ((guint64) in->n + chunk - 1) / chunk;
  if (scratch && parts >= 4 && (guint64) scratch->n >= 2 * parts && g_getenv ("HN_ARGMAX_ONE_GROUP") == NULL)
    {
      if (!hn_op_check_ctx (op, cmd, scratch, error) || !hn_op_check_dtype (op, "scratch", scratch, HN_DTYPE_F32, error) ||
          !scratch_disjoint (op, scratch, in, error) || !scratch_disjoint (op, scratch, out, error))
        return FALSE;
      pc.chunk = chunk;
      pc.s_off = hn_eoff (scratch);
      pc.n_parts = (guint32) parts;
      guint32 spec1[2] = { wp, 1 }, spec2[2] = { wp, 2 }, gx, gy;
      HnVkBinding bd[3] = { hn_bind (in, FALSE), hn_bind (out, TRUE), hn_bind (scratch, TRUE) };
      HnVkBinding bd2[3] = { hn_bind (in, FALSE), hn_bind (out, TRUE), hn_bind (scratch, FALSE) };
      hn_grid (parts, &gx, &gy);
      return hn_cmd_dispatch (cmd, "argmax", spec1, 2, bd, 3, &pc, sizeof pc, gx, gy, 1, error) &&
             hn_cmd_dispatch (cmd, "argmax", spec2, 2, bd2, 3, &pc, sizeof pc, 1, 1, 1, error);
    }
  guint32 spec[2] = { wg, 0 };
  HnVkBinding bd[3] = { hn_bind (in, FALSE), hn_bind (out, TRUE), hn_bind (in, FALSE) };
  return hn_cmd_dispatch (cmd, "argmax", spec, 2, bd, 3, &pc, sizeof pc, 1, 1, 1, error);
}

gboolean
hn_op_argmax (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error)
{
  return hn_op_argmax_scratch (cmd, out, in, NULL, error);
}

gboolean
hn_op_moe_route (HnCmd *cmd, HnTensor *weights, HnTensor *indices, HnTensor *logits, const HnMoeRouteParams *params,
                 GError **error)
{
  const char *op = "moe_route";
  if (!hn_op_check_ctx (op, cmd, weights, error) || !hn_op_check_ctx (op, cmd, logits, error) ||
      !hn_op_check_ctx (op, cmd, indices, error) || !hn_op_check_dtype (op, "indices", indices, HN_DTYPE_I32, error) ||
      !hn_op_check_dtype (op, "logits", logits, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "weights", weights, HN_DTYPE_F32, error))
    return FALSE;
  gint64 rows = hn_tensor_rows (logits), E = hn_tensor_cols (logits);
  int k = params->k;
  const char *bad = NULL;
  if (k < 1 || k > 32 || k > E)
    bad = "k must be within 1..min(32, experts)";
  else if (params->kind == HN_MOE_ROUTE_SPARSEMIXER && k != 2)
    bad = "the sparsemixer picks exactly 2 experts";
  else if (params->n_group > 1 &&
           (params->n_group > 32 || E % params->n_group != 0 || params->topk_group < 1 ||
            params->topk_group > params->n_group || (gint64) params->topk_group * (E / params->n_group) < k))
    bad = "n_group must divide the experts (at most 32 groups) and topk_group groups must hold k experts";
  if (bad)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "moe_route: %s (k %d, %" G_GINT64_FORMAT " experts)", bad,
                   k, E);
      return FALSE;
    }
  if (!hn_op_check_count (op, "weights", weights, rows * E, error) ||
      !hn_op_check_count (op, "indices", indices, rows * k, error) ||
      !check_vec (op, "bias", cmd, params->bias, E, error))
    return FALSE;
  if (weights->buf == logits->buf && weights->offset < logits->offset + hn_tensor_nbytes (logits) &&
      logits->offset < weights->offset + hn_tensor_nbytes (weights))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "moe_route: weights %s overlap logits %s", weights->name,
                   logits->name);
      return FALSE;
    }
  HnTensor *idx = indices;
  struct {
    guint32 rows, E, K, kind, l_off, b_off, w_off, i_off, has_bias, norm;
    float scale;
    guint32 n_group, topk_group, group_sum2;
    float eps, norm_min, norm_add;
  } pc = { (guint32) rows, (guint32) E, (guint32) k, (guint32) params->kind, hn_eoff (logits),
           params->bias ? hn_eoff (params->bias) : 0, hn_eoff (weights), hn_eoff (idx), params->bias != NULL,
           params->norm_topk != FALSE, params->scale != 0.0f ? params->scale : 1.0f,
           params->n_group > 1 ? (guint32) params->n_group : 1, (guint32) params->topk_group,
           params->group_sum2 != FALSE, params->jitter_eps, params->norm_min,
           params->norm_add > 0.0f ? params->norm_add : 1e-20f };
  HnVkBinding bd[4] = { hn_bind (logits, FALSE), hn_bind (params->bias ? params->bias : logits, FALSE),
                        hn_bind (weights, TRUE), hn_bind (idx, TRUE) };
  return hn_op_dispatch_rows (cmd, "moe_route", NULL, 0, bd, 4, &pc, sizeof pc, (guint64) (rows + 63) / 64, error);
}

/* Tiles of up to 8 slots of one expert: at most S / 8 + E of them, and at most S (none is empty). */
static gint64
moe_max_tiles (gint64 n_slots, gint64 n_experts)
{
  return MIN (n_slots, (n_slots + 7) / 8 + n_experts);
}

gint64
hn_moe_tiles_size (gint64 n_slots, gint64 n_experts)
{
  return 1 + 2 * moe_max_tiles (n_slots, n_experts);
}

gboolean
hn_op_moe_sort (HnCmd *cmd, HnTensor *offsets, HnTensor *order, HnTensor *tiles, HnTensor *ids, int n_experts,
                GError **error)
{
  const char *op = "moe_sort";
  if (!hn_op_check_ctx (op, cmd, tiles, error) || !hn_op_check_dtype (op, "tiles", tiles, HN_DTYPE_I32, error) ||
      !hn_op_check_ctx (op, cmd, offsets, error) || !hn_op_check_ctx (op, cmd, order, error) ||
      !hn_op_check_ctx (op, cmd, ids, error) || !hn_op_check_dtype (op, "offsets", offsets, HN_DTYPE_I32, error) ||
      !hn_op_check_dtype (op, "order", order, HN_DTYPE_I32, error) ||
      !hn_op_check_dtype (op, "ids", ids, HN_DTYPE_I32, error))
    return FALSE;
  if (n_experts < 1 || n_experts > 1024)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "moe_sort: %d experts (1..1024 are supported)", n_experts);
      return FALSE;
    }
  if (!hn_op_check_count (op, "offsets", offsets, n_experts + 1, error) ||
      !hn_op_check_count (op, "order", order, ids->n, error) ||
      !hn_op_check_count (op, "tiles", tiles, hn_moe_tiles_size (ids->n, n_experts), error))
    return FALSE;
  struct { guint32 S, E, i_off, f_off, o_off, t_off; } pc = { (guint32) ids->n, (guint32) n_experts, hn_eoff (ids),
                                                              hn_eoff (offsets), hn_eoff (order), hn_eoff (tiles) };
  HnVkBinding bd[4] = { hn_bind (ids, FALSE), hn_bind (offsets, TRUE), hn_bind (order, TRUE), hn_bind (tiles, TRUE) };
  return hn_cmd_dispatch (cmd, "moe_sort", NULL, 0, bd, 4, &pc, sizeof pc, 1, 1, 1, error);
}

gboolean
hn_op_moe_matmul (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *offsets, HnTensor *order,
                  HnTensor *tiles, int x_div, GError **error)
{
  const char *op = "moe_matmul";
  if (!hn_op_check_ctx (op, cmd, tiles, error) || !hn_op_check_dtype (op, "tiles", tiles, HN_DTYPE_I32, error) ||!hn_op_check_ctx (op, cmd, y, error) || !hn_op_check_ctx (op, cmd, x, error) ||
      !hn_op_check_ctx (op, cmd, w, error) || !hn_op_check_ctx (op, cmd, offsets, error) ||
      !hn_op_check_ctx (op, cmd, order, error) || !hn_op_check_dtype (op, "y", y, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error) || !hn_op_check_float_storage (op, "w", w, error) ||
      !hn_op_check_dtype (op, "offsets", offsets, HN_DTYPE_I32, error) ||
      !hn_op_check_dtype (op, "order", order, HN_DTYPE_I32, error))
    return FALSE;
  gint64 S = hn_tensor_rows (y), N = hn_tensor_cols (y), K = hn_tensor_cols (x), R = hn_tensor_rows (x);
  if (w->ndim != 3 || w->shape[1] != N || w->shape[2] != K || x_div < 1 || (S + x_div - 1) / x_div > R ||
      offsets->n != w->shape[0] + 1 || order->n != S || tiles->n != hn_moe_tiles_size (S, w->shape[0]) ||
      moe_max_tiles (S, w->shape[0]) > 65535)
    {
      g_autofree char *dy = hn_tensor_describe (y), *dx = hn_tensor_describe (x), *dw = hn_tensor_describe (w);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "moe_matmul: shapes do not fit (y %s, x %s, w %s, x_div %d; offsets must hold experts + 1, order "
                   "one entry per slot)",
                   dy, dx, dw, x_div);
      return FALSE;
    }
  gint64 E = w->shape[0];
  if (!check_vec (op, "bias", cmd, bias, E * N, error))
    return FALSE;
  struct { guint32 N, K, x_div, x_off, w_off, b_off, f_off, o_off, y_off, has_bias, t_off; } pc = {
    (guint32) N, (guint32) K, (guint32) x_div, hn_eoff (x), hn_eoff (w), bias ? hn_eoff (bias) : 0, hn_eoff (offsets),
    hn_eoff (order), hn_eoff (y), bias != NULL, hn_eoff (tiles) };
  guint32 spec[1] = { hn_op_float_code (w->dtype) };
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : x, FALSE),
                        hn_bind (offsets, FALSE), hn_bind (order, FALSE), hn_bind (tiles, FALSE), hn_bind (y, TRUE) };
  guint64 blocks = (guint64) (N + 3) / 4;
  if (blocks > 65535)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "moe_matmul: %" G_GINT64_FORMAT " output rows (at most %d)", N,
                   65535 * 4);
      return FALSE;
    }
  return hn_cmd_dispatch (cmd, "moe_matmul", spec, 1, bd, 7, &pc, sizeof pc, (guint32) blocks,
                          (guint32) moe_max_tiles (S, E), 1, error);
}

gboolean
hn_op_moe_combine (HnCmd *cmd, HnTensor *out, HnTensor *y, HnTensor *weights, HnTensor *ids, GError **error)
{
  const char *op = "moe_combine";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, y, error) ||
      !hn_op_check_ctx (op, cmd, weights, error) || !hn_op_check_ctx (op, cmd, ids, error) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "y", y, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "weights", weights, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "ids", ids, HN_DTYPE_I32, error))
    return FALSE;
  gint64 T = hn_tensor_rows (out), C = hn_tensor_cols (out), E = hn_tensor_cols (weights), k = hn_tensor_cols (ids);
  if (hn_tensor_rows (weights) != T || hn_tensor_rows (ids) != T || hn_tensor_rows (y) != T * k ||
      hn_tensor_cols (y) != C)
    {
      g_autofree char *d0 = hn_tensor_describe (out), *d1 = hn_tensor_describe (y), *d2 = hn_tensor_describe (weights),
                      *d3 = hn_tensor_describe (ids);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "moe_combine: shapes do not fit (out %s, y %s, weights %s, ids %s)", d0, d1, d2, d3);
      return FALSE;
    }
  struct { guint32 n, C, K, E, y_off, w_off, i_off, o_off; } pc = {
    (guint32) (T * C), (guint32) C, (guint32) k, (guint32) E, hn_eoff (y), hn_eoff (weights), hn_eoff (ids), hn_eoff (out) };
  HnVkBinding bd[4] = { hn_bind (y, FALSE), hn_bind (weights, FALSE), hn_bind (ids, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "moe_combine", NULL, 0, bd, 4, &pc, sizeof pc, pc.n, error);
}
