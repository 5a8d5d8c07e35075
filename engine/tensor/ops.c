/* Ops: matmul, elementwise, gather, layout and reductions. */
#include "ops-private.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <string.h>

gboolean
hn_op_check_ctx (const char *op, HnCmd *cmd, HnTensor *t, GError **error)
{
  if (t && t->ctx != hn_cmd_get_context (cmd))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: tensor %s belongs to another device", op, t->name);
      return FALSE;
    }
  return TRUE;
}

guint32
hn_op_f16_rounding (HnCmd *cmd)
{
  return hn_cmd_get_autocast (cmd) == HN_AUTOCAST_F16 ? 2 : 1;
}

gboolean
hn_op_check_dtype (const char *op, const char *role, HnTensor *t, HnDType want, GError **error)
{
  if (t->dtype != want)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s (tensor %s) is %s, %s is required", op, role,
                   t->name, hn_dtype_name (t->dtype), hn_dtype_name (want));
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_check_float_storage (const char *op, const char *role, HnTensor *t, GError **error)
{
  if (t->dtype != HN_DTYPE_F32 && t->dtype != HN_DTYPE_F16 && t->dtype != HN_DTYPE_BF16)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %s (tensor %s) is %s; f32, f16 or bf16 is supported", op,
                   role, t->name, hn_dtype_name (t->dtype));
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_check_count (const char *op, const char *role, HnTensor *t, gint64 n, GError **error)
{
  if (t->n != n)
    {
      g_autofree char *d = hn_tensor_describe (t);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s (tensor %s %s) must have %" G_GINT64_FORMAT
                   " elements", op, role, t->name, d, n);
      return FALSE;
    }
  return TRUE;
}

guint32
hn_op_float_code (HnDType dt)
{
  return dt == HN_DTYPE_F16 ? 1 : dt == HN_DTYPE_BF16 ? 2 : 0;
}

gboolean
hn_op_dispatch_rows (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec, const HnVkBinding *b,
                     guint nb, const void *push, guint push_size, guint64 rows, GError **error)
{
  guint32 gx, gy;
  hn_grid (rows, &gx, &gy);
  return hn_cmd_dispatch (cmd, shader, spec, n_spec, b, nb, push, push_size, gx, gy, 1, error);
}

gboolean
hn_op_dispatch_elems (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec, const HnVkBinding *b,
                      guint nb, const void *push, guint push_size, guint64 n, GError **error)
{
  return hn_op_dispatch_rows (cmd, shader, spec, n_spec, b, nb, push, push_size, (n + HN_WG - 1) / HN_WG, error);
}

static gboolean
overlaps (HnTensor *a, HnTensor *b)
{
  if (!a || !b || a->buf != b->buf)
    return FALSE;
  guint64 a0 = a->offset, a1 = a0 + hn_tensor_nbytes (a), b0 = b->offset, b1 = b0 + hn_tensor_nbytes (b);
  return a0 < b1 && b0 < a1;
}

static gboolean
check_no_overlap (const char *op, HnTensor *out, HnTensor *in, GError **error)
{
  if (overlaps (out, in))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: output %s overlaps input %s", op, out->name,
                   in->name);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------ matrix-vector */

gboolean
hn_op_matvec_available (HnCmd *cmd, gint64 M)
{
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  return M >= 1 && M <= 8 && info->subgroup_arithmetic && info->subgroup_size >= 1 && g_getenv ("HN_NO_MATVEC") == NULL;
}

/* One row of x with vector loads (matvec_wide.comp): the whole workgroup on each of a few rows,
 * K split over its invocations. Defaults: 256 invocations (fewer for a short K), 4 rows (2 gated
 * outputs, each two rows) per workgroup, up to 4 chunks of each row loaded before use.
 * HN_MATVEC_WIDE="invocations,rows,unroll" overrides (for tuning). */
static gboolean
dispatch_matvec_wide (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *u,
                      HnTensor *bias_u, guint32 act, gboolean accumulate, float alpha, const HnMatvecNorm *norm,
                      GError **error)
{
  HnTensor *g = norm ? norm->weight : NULL;
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  gint64 N = w->shape[0], K = w->shape[1];
  struct {
    guint32 N, K, x_off, w_off, bias_off, y_off, flags, u_off, bu_off, act;
    float alpha;
    guint32 g_off;
    float eps;
    guint32 nflags;
  } pc = {
    (guint32) N, (guint32) K, hn_eoff (x), hn_eoff (w), bias ? hn_eoff (bias) : 0, hn_eoff (y),
    (bias ? 1u : 0u) | (accumulate ? 2u : 0u) | (bias_u ? 4u : 0u), u ? hn_eoff (u) : 0,
    bias_u ? hn_eoff (bias_u) : 0, act, alpha, g ? hn_eoff (g) : 0, norm ? norm->eps : 0.0f,
    (norm && norm->plus_one ? 1u : 0u) | (g ? 2u : 0u) };
  guint32 sg = MAX (info->subgroup_size, 1), epu = w->dtype == HN_DTYPE_F32 ? 4 : 8;
  guint32 sg_min = info->min_subgroup_size ? MIN (info->min_subgroup_size, sg) : sg;
  guint32 ku = (guint32) (K / epu);
  guint32 wg = MIN (256, info->max_workgroup_invocations), rows = u ? 2 : 4;
  wg = MIN (wg, 64 * sg_min); /* the shader's reduction holds 64 subgroups */
  while (wg > sg && wg / 2 >= ku)
    wg /= 2;
  guint32 unroll = MIN (4, (ku + wg - 1) / wg);
  if (g_str_equal (info->type, "cpu"))
    unroll = 1; /* no memory latency to hide; keeps the kernel small to compile */
  const char *tune = g_getenv ("HN_MATVEC_WIDE");
  guint32 t[3];
  if (tune && sscanf (tune, "%u,%u,%u", &t[0], &t[1], &t[2]) == 3 && t[0] >= sg && t[0] % sg == 0 &&
      t[0] <= MIN (info->max_workgroup_invocations, 64 * sg_min) && t[1] >= 1 && t[1] <= 8 && t[2] >= 1 && t[2] <= 4)
    {
      wg = t[0]; rows = t[1]; unroll = t[2];
    }
  guint32 spec[6] = { hn_op_float_code (w->dtype), wg, rows, u ? 1 : 0, norm ? 1 : 0, MAX (unroll, 1) };
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : x, FALSE), hn_bind (y, TRUE),
                        hn_bind (u ? u : w, FALSE), hn_bind (bias_u ? bias_u : x, FALSE), hn_bind (g ? g : x, FALSE) };
  guint32 gx, gy;
  hn_grid (((guint64) N + rows - 1) / rows, &gx, &gy);
  hn_cmd_set_label (cmd, u ? "matvec_glu" : "matvec");
  gboolean ok = hn_cmd_dispatch (cmd, "matvec_wide", spec, 6, bd, 7, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

/* y = x·Wᵀ (+ bias), or act(x·Wᵀ + bias) * (x·Uᵀ + bias_u) with u; accumulate: y += alpha * that.
 * Shapes are checked by the callers. */
static gboolean
dispatch_matvec (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *u, HnTensor *bias_u,
                 guint32 act, gboolean accumulate, float alpha, const HnMatvecNorm *norm, GError **error)
{
  if (hn_dtype_is_ggml (w->dtype))
    return hn_op_matvec_gguf_dispatch (cmd, y, x, w, bias, u, bias_u, act, accumulate, alpha, norm, error);
  HnTensor *g = norm ? norm->weight : NULL;
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  gint64 N = w->shape[0], K = w->shape[1], M = hn_tensor_rows (x);
  struct {
    guint32 M, N, K, x_off, w_off, bias_off, y_off, flags, u_off, bu_off, act;
    float alpha;
    guint32 g_off;
    float eps;
    guint32 nflags;
  } pc = {
    (guint32) M, (guint32) N, (guint32) K, hn_eoff (x), hn_eoff (w), bias ? hn_eoff (bias) : 0, hn_eoff (y),
    (bias ? 1u : 0u) | (accumulate ? 2u : 0u) | (bias_u ? 4u : 0u), u ? hn_eoff (u) : 0,
    bias_u ? hn_eoff (bias_u) : 0, act, alpha, g ? hn_eoff (g) : 0, norm ? norm->eps : 0.0f,
    (norm && norm->plus_one ? 1u : 0u) | (g ? 2u : 0u) };
  /* Vector loads need 8-element aligned rows and offsets (16 bytes of
   * 16-bit weights or 32 of f32) and 4-aligned activation rows. */
  gboolean vec = K % 8 == 0 && hn_eoff (w) % 8 == 0 && hn_eoff (x) % 4 == 0 && (!u || hn_eoff (u) % 8 == 0) &&
                 (!g || hn_eoff (g) % 4 == 0);
  /* Four subgroups per workgroup, each taking two dot products at a time:
   * 8 rows (4 gated outputs) per workgroup, 4 loads per row in flight
   * (2 for several rows of x, whose accumulators take registers).
   * HN_MATVEC_TUNE="subgroups,rows,unroll" overrides (for tuning). */
  if (M == 1 && vec && g_getenv ("HN_MATVEC_NARROW") == NULL)
    return dispatch_matvec_wide (cmd, y, x, w, bias, u, bias_u, act, accumulate, alpha, norm, error);
  guint32 sg = MIN (info->subgroup_size, 128), n_sg = 4, rows = 8, unroll = M == 1 ? 4 : 2;
  if (g_str_equal (info->type, "cpu"))
    unroll = 1; /* no memory latency to hide; keeps the unrolled kernel small to compile */
  const char *tune = g_getenv ("HN_MATVEC_TUNE");
  guint32 t[3];
  if (tune && sscanf (tune, "%u,%u,%u", &t[0], &t[1], &t[2]) == 3 && t[0] >= 1 && t[0] * sg <= info->max_workgroup_invocations &&
      t[1] >= 2 && t[1] % 2 == 0 && t[2] >= 1 && t[2] <= 16)
    {
      n_sg = t[0]; rows = t[1]; unroll = t[2];
    }
  if (u)
    rows /= 2; /* one gated output per subgroup step */
  guint32 wg = n_sg * sg;
  guint32 spec[8] = { hn_op_float_code (w->dtype), wg, rows, vec ? 1 : 0, M == 1 ? 1 : 8, u ? 1 : 0, unroll,
                      norm ? 1 : 0 };
  HnVkBinding bd[7] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : x, FALSE), hn_bind (y, TRUE),
                        hn_bind (u ? u : w, FALSE), hn_bind (bias_u ? bias_u : x, FALSE), hn_bind (g ? g : x, FALSE) };
  guint32 gx, gy;
  hn_grid (((guint64) N + rows - 1) / rows, &gx, &gy);
  hn_cmd_set_label (cmd, u ? "matvec_glu" : "matvec");
  gboolean ok = hn_cmd_dispatch (cmd, "matvec", spec, 8, bd, 7, &pc, sizeof pc, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

static gboolean
check_linear (const char *op, HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, GError **error)
{
  if (!hn_op_check_ctx (op, cmd, y, error) || !hn_op_check_ctx (op, cmd, x, error) ||
      !hn_op_check_ctx (op, cmd, w, error) || !hn_op_check_ctx (op, cmd, bias, error))
    return FALSE;
  /* an f16 x only where matmul_cm2 reads it as it is, or under fp16 autocast
   * (training's f16 copies: the other kernels widen it, see dispatch_tiled) */
  if (x && x->dtype == HN_DTYPE_F16 && w && !hn_op_matmul_takes_f16 (cmd, w, hn_tensor_rows (x)) &&
      !hn_op_matmul_f16 (cmd, 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: x (tensor %s) is f16, which only the cooperative-matrix-2 kernel reads (weight %s %s, %" G_GINT64_FORMAT
                   " rows: not that kernel here)", op, x->name, w->name, hn_dtype_name (w->dtype), hn_tensor_rows (x));
      return FALSE;
    }
  /* an f16 y under fp16 autocast (its results are f16 values: stored as they are) */
  gboolean y16 = y && y->dtype == HN_DTYPE_F16 && hn_op_matmul_f16 (cmd, 0) && g_str_equal (op, "matmul");
  if (((!x || x->dtype != HN_DTYPE_F16) && !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error)) ||
      (!y16 && !hn_op_check_dtype (op, "y", y, HN_DTYPE_F32, error)) ||
      /* only hn_op_matmul has a kernel for quantized weights, and the matvec ops for GGUF blocks */
      (!(hn_dtype_is_quant (w->dtype) && g_str_equal (op, "matmul")) && !hn_dtype_is_ggml (w->dtype) &&
       !hn_op_check_float_storage (op, "W", w, error)) ||
      (bias && !hn_op_check_dtype (op, "bias", bias, HN_DTYPE_F32, error)))
    return FALSE;
  if (w->ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: W (tensor %s) must be 2-D [out, in]", op, w->name);
      return FALSE;
    }
  gint64 N = w->shape[0], K = w->shape[1], M = hn_tensor_rows (x);
  if (hn_tensor_cols (x) != K || hn_tensor_cols (y) != N || hn_tensor_rows (y) != M)
    {
      g_autofree char *dx = hn_tensor_describe (x), *dw = hn_tensor_describe (w), *dy = hn_tensor_describe (y);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: shapes do not fit y = x·Wᵀ: x %s %s, W %s %s, y %s %s", op, x->name, dx, w->name, dw, y->name, dy);
      return FALSE;
    }
  if (bias && bias->n != N)
    return hn_op_check_count (op, "bias", bias, N, error);
  return check_no_overlap (op, y, x, error) && check_no_overlap (op, y, w, error);
}

static gboolean
check_matvec_rows (const char *op, HnCmd *cmd, HnTensor *x, GError **error)
{
  if (!hn_op_matvec_available (cmd, hn_tensor_rows (x)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: x %s has %" G_GINT64_FORMAT " rows; the fused matrix-vector kernel takes 1..8 rows on a device "
                   "with subgroup arithmetic (see hn_op_matvec_available)", op, x->name, hn_tensor_rows (x));
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_matvec_add (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, float alpha, GError **error)
{
  const char *op = "matvec_add";
  if (!check_linear (op, cmd, y, x, w, bias, error) || !check_matvec_rows (op, cmd, x, error))
    return FALSE;
  return dispatch_matvec (cmd, y, x, w, bias, NULL, NULL, 0, TRUE, alpha, NULL, error);
}

static gboolean
check_norm (const char *op, HnCmd *cmd, HnTensor *x, const HnMatvecNorm *norm, GError **error)
{
  if (!norm || !norm->weight)
    return TRUE;
  return hn_op_check_ctx (op, cmd, norm->weight, error) &&
         hn_op_check_dtype (op, "norm weight", norm->weight, HN_DTYPE_F32, error) &&
         hn_op_check_count (op, "norm weight", norm->weight, hn_tensor_cols (x), error);
}

gboolean
hn_op_matvec_normed (HnCmd *cmd, HnTensor *y, HnTensor *x, const HnMatvecNorm *norm, HnTensor *w, HnTensor *bias,
                     GError **error)
{
  const char *op = "matvec_normed";
  if (!check_linear (op, cmd, y, x, w, bias, error) || !check_matvec_rows (op, cmd, x, error) ||
      !check_norm (op, cmd, x, norm, error))
    return FALSE;
  return dispatch_matvec (cmd, y, x, w, bias, NULL, NULL, 0, FALSE, 1.0f, norm, error);
}

gboolean
hn_op_matvec_glu (HnCmd *cmd, HnTensor *out, HnTensor *x, const HnMatvecNorm *norm, HnTensor *w_gate,
                  HnTensor *b_gate, HnTensor *w_up, HnTensor *b_up, HnActivation act, GError **error)
{
  const char *op = "matvec_glu";
  if (!check_linear (op, cmd, out, x, w_gate, b_gate, error) || !check_linear (op, cmd, out, x, w_up, b_up, error) ||
      !check_matvec_rows (op, cmd, x, error) || !check_norm (op, cmd, x, norm, error))
    return FALSE;
  if (w_up->dtype != w_gate->dtype)
    return hn_op_check_dtype (op, "W_up", w_up, w_gate->dtype, error);
  if ((guint) act > HN_ACT_TANH)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "matvec_glu: unknown activation %d", (int) act);
      return FALSE;
    }
  return dispatch_matvec (cmd, out, x, w_gate, b_gate, w_up, b_up, (guint32) act, FALSE, 1.0f, norm, error);
}

/* ------------------------------------------------------------ matmul */

typedef struct {
  guint32 M, N, K;
  guint32 a_off, b_off, c_off, bias_off;
  guint32 a_sb, a_sm, a_sk;
  guint32 b_sb, b_sk, b_sn;
  guint32 c_sb, c_sm;
  float alpha;
  guint32 flags;
} MatmulPush;

gboolean
hn_op_matmul_reduced_precision (HnVkContext *ctx, HnDType b_dtype, gint64 M, HnMatmulFlags flags)
{
  /* The matrix-vector path (M <= 8) is always exact f32. */
  return hn_vk_context_has_coopmat (ctx) && (b_dtype == HN_DTYPE_F16 || b_dtype == HN_DTYPE_BF16) && M > 8 &&
         !(flags & HN_MATMUL_EXACT) && g_getenv ("HN_MATMUL_EXACT") == NULL;
}

gboolean
hn_op_linear_reduced_precision (HnCmd *cmd, HnTensor *w, gint64 rows)
{
  return w && (hn_op_matmul_reduced_precision (hn_cmd_get_context (cmd), w->dtype, rows, 0) ||
               hn_quant_f16_form_taken (cmd, w, rows));
}

/* Whether x·Wᵀ with x of `rows` rows runs on matmul_cm2 with f16 operands (inference). */
static gboolean
cm2_linear (HnCmd *cmd, HnTensor *w, gint64 rows)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  if (w && hn_dtype_is_ggml (w->dtype)) /* through its f16 form */
    return !hn_op_matmul_f16 (cmd, 0) && !hn_op_matvec_available (cmd, rows) &&
           hn_vk_context_has_coopmat2 (ctx, NULL) && hn_quant_f16_form_taken (cmd, w, rows);
  return w && (w->dtype == HN_DTYPE_F16 || w->dtype == HN_DTYPE_BF16) && !hn_op_matmul_f16 (cmd, 0) &&
         !hn_op_matvec_available (cmd, rows) && hn_vk_context_has_coopmat2 (ctx, NULL) &&
         hn_op_matmul_reduced_precision (ctx, w->dtype, rows, 0);
}

gboolean
hn_op_matmul_takes_f16 (HnCmd *cmd, HnTensor *w, gint64 rows)
{
  return cm2_linear (cmd, w, rows) && g_getenv ("HN_NO_F16_ACTS") == NULL;
}

gboolean
hn_op_matmul_f16 (HnCmd *cmd, HnMatmulFlags flags)
{
  return !(flags & HN_MATMUL_EXACT) && ((flags & HN_MATMUL_F16) || hn_cmd_get_autocast (cmd) == HN_AUTOCAST_F16);
}

gboolean
hn_bf16_weights_as_f16 (HnVkContext *ctx)
{
  const char *v = g_getenv ("HN_BF16_AS_F16");
  return hn_vk_context_has_coopmat (ctx) && g_getenv ("HN_MATMUL_EXACT") == NULL && !(v && g_str_equal (v, "0"));
}

/* f32 bits -> f16 bits, round to nearest even (subnormals kept); only
 * called on values below 65520 in magnitude. */
static guint16
bits_to_f16 (guint32 u)
{
  guint16 sign = (guint16) ((u >> 16) & 0x8000);
  guint32 a = u & 0x7fffffffu;
  if (a < 0x38800000u)
    {
      if (a < 0x33000000u)
        return sign;
      guint32 e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
      guint32 q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1)))
        q++;
      return sign | (guint16) q;
    }
  guint32 r = a + 0xfffu + ((a >> 13) & 1);
  return sign | (guint16) ((r - 0x38000000u) >> 13);
}

gboolean
hn_bf16_to_f16_if_fits (const void *bf16, gsize n, guint16 **out)
{
  const guint16 *v = bf16;
  *out = NULL;
  for (gsize i = 0; i < n; i++)
    if (((v[i] >> 7) & 0xff) >= 143) /* |x| >= 65536, Inf or NaN */
      return FALSE;
  guint16 *h = g_try_new (guint16, MAX (n, 1));
  if (!h)
    return FALSE;
  for (gsize i = 0; i < n; i++)
    h[i] = bits_to_f16 ((guint32) v[i] << 16);
  *out = h;
  return TRUE;
}

/* Load mode of an operand whose element (r, k) is at off + r * sr + k * sk
 * (batch stride sb): 1 = contiguous along k, 2 = contiguous along r, each in
 * 4-element aligned fragments (R or K a multiple of 4), 0 = element by
 * element. The kernels read whole 4-element fragments in modes 1 and 2. */
static guint32
operand_mode (guint32 off, guint32 sb, guint32 sr, guint32 sk, guint32 R, guint32 K)
{
  if (off % 4 || sb % 4)
    return 0;
  if (sk == 1 && K % 4 == 0 && sr % 4 == 0)
    return 1;
  if (sr == 1 && R % 4 == 0 && sk % 4 == 0)
    return 2;
  return 0;
}

static gboolean
dispatch_labelled (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec, HnTensor *c, HnTensor *a,
                   HnTensor *b, HnTensor *bias, const MatmulPush *pc, guint32 bm, guint32 bn, guint32 batch,
                   GError **error)
{
  HnVkBinding bd[4] = { hn_bind (a, FALSE), hn_bind (b, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, shader);
  gboolean ok = hn_cmd_dispatch (cmd, shader, spec, n_spec, bd, 4, pc, sizeof *pc, (pc->N + bn - 1) / bn,
                                 (pc->M + bm - 1) / bm, batch, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

/* Shared memory of matmul_coopmat.comp for a BM x BN tile: two f16 tiles
 * of each operand (BK = 32, padded by 8 in the worse of its two layouts)
 * and a 16x16 f32 scratch tile per subgroup. */
static guint32
coopmat_shared_bytes (guint32 bm, guint32 bn, guint32 subgroups)
{
  guint32 a = MAX (bm * 40, 32 * (bm + 8)), b = MAX (bn * 40, 32 * (bn + 8));
  return 2 * 2 * (a + b) + subgroups * 16 * 16 * 4;
}

static gboolean
dispatch_coopmat (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnTensor *bias, const MatmulPush *pc,
                  guint32 batch, guint32 a_mode, guint32 b_mode, gboolean c_vec, gboolean f16, GError **error)
{
  const HnVkDeviceInfo *di = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  /* 128x128 tiles of 2x4 subgroups (64x32 each: 4x2 accumulators) when
   * there are enough of them to fill a big GPU twice over, else 64x64 tiles
   * of 2x2 subgroups of 32x32. HN_COOPMAT_TILE="BM,BN,WM,WN" overrides. */
  guint32 bm = 64, bn = 64, wm = 32, wn = 32;
  guint64 big_tiles = (guint64) ((pc->M + 127) / 128) * ((pc->N + 127) / 128) * batch;
  if (big_tiles >= 256 && 8 * di->subgroup_size <= di->max_workgroup_invocations &&
      coopmat_shared_bytes (128, 128, 8) <= di->max_shared_memory)
    {
      bm = bn = 128;
      wm = 64;
    }
  const char *tile = g_getenv ("HN_COOPMAT_TILE");
  guint32 t[4];
  if (tile && sscanf (tile, "%u,%u,%u,%u", &t[0], &t[1], &t[2], &t[3]) == 4 && t[2] && t[3] && t[2] % 16 == 0 &&
      t[3] % 16 == 0 && t[0] % t[2] == 0 && t[1] % t[3] == 0 &&
      (t[0] / t[2]) * (t[1] / t[3]) * di->subgroup_size <= di->max_workgroup_invocations &&
      coopmat_shared_bytes (t[0], t[1], (t[0] / t[2]) * (t[1] / t[3])) <= di->max_shared_memory)
    {
      bm = t[0]; bn = t[1]; wm = t[2]; wn = t[3];
    }
  guint32 threads = (bm / wm) * (bn / wn) * di->subgroup_size;
  guint32 spec[10] = { hn_op_float_code (b->dtype), bm, bn, wm, wn, threads, a_mode, b_mode, c_vec, f16 };
  return dispatch_labelled (cmd, "matmul_coopmat", spec, 10, c, a, b, bias, pc, bm, bn, batch, error);
}

/* matmul_cm2's push constants: the matmul ones and the split-K fields. */
typedef struct {
  MatmulPush mm;
  guint32 splits, k_split, c_ss;
  guint32 bias_sb; /* elements between the biases of a batch's products (hn_op_matmul_stacked) */
} Cm2Push;

static guint32
env_uint (const char *name, guint32 fallback)
{
  const char *v = g_getenv (name);
  if (!v || !*v)
    return fallback;
  char *end;
  guint64 x = g_ascii_strtoull (v, &end, 10);
  return *end || x > 1024 ? fallback : (guint32) x;
}

guint32
hn_to_f16_vec (guint32 x_off, guint32 y_word_off)
{
  return x_off % 4 == 0 && y_word_off % 2 == 0 && g_strcmp0 (g_getenv ("HN_TO_F16_VEC"), "0") != 0;
}

gboolean
hn_record_to_f16 (HnCmd *cmd, const char *label, HnTensor *t, HnVkBuffer *s, guint64 byte0, guint64 bytes,
                  guint32 mode, GError **error)
{
  /* every push constant: a word not pushed keeps an earlier dispatch's value */
  struct { guint32 n, x_off, y_off, mode; } cp = { (guint32) t->n, hn_eoff (t), (guint32) (byte0 / 4), mode };
  HnVkBinding cb[2] = { hn_bind (t, FALSE), { s, byte0, bytes, TRUE } };
  guint32 vec = hn_to_f16_vec (cp.x_off, cp.y_off), gx, gy;
  hn_grid (((guint64) t->n + (vec ? 1023 : 511)) / (vec ? 1024 : 512), &gx, &gy);
  hn_cmd_set_label (cmd, label);
  gboolean ok = hn_cmd_dispatch (cmd, "to_f16", &vec, 1, cb, 2, &cp, sizeof cp, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

guint32
hn_op_norm_sg_reduce (HnCmd *cmd)
{
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  guint32 sg = info->min_subgroup_size ? MIN (info->min_subgroup_size, info->subgroup_size) : info->subgroup_size;
  return info->subgroup_arithmetic && sg >= 4 && g_strcmp0 (g_getenv ("HN_NORM_SG_REDUCE"), "1") == 0;
}

void
hn_op_warn_tile_once (gsize *once, const char *var, const char *value)
{
  if (g_once_init_enter (once))
    {
      g_warning ("%s=%s: not a tile whose products fit the device's cooperative-matrix granularity "
                 "(doctor --json: cooperative_matrix_nv2_granularity_by_size); the default tile runs", var, value);
      g_once_init_leave (once, 1);
    }
}

gboolean
hn_cm2_tile_env (const char *name, guint32 *bm, guint32 *bn, guint32 *bk)
{
  const char *tile = g_getenv (name);
  guint32 e[3];
  if (!tile || sscanf (tile, "%u,%u,%u", &e[0], &e[1], &e[2]) != 3 || !e[0] || !e[1] || !e[2] || e[0] % 16 != 0 ||
      e[1] % 16 != 0 || e[2] % 16 != 0 || e[0] > 256 || e[1] > 256 || e[2] > 128)
    return FALSE;
  *bm = e[0];
  *bn = e[1];
  *bk = e[2];
  return TRUE;
}

/* Bytes of A's f16 copy at the start of the recorder's scratch. */
static guint64
cm2_a_bytes (HnTensor *a)
{
  return (((guint64) a->n + 1) / 2 * 4 + 255) & ~(guint64) 255;
}

/* A's f16 copy (to_f16.comp, clamped) at the start of the recorder's scratch: its binding. */
static gboolean
cm2_convert_a (HnCmd *cmd, HnTensor *a, HnVkBinding *out, GError **error)
{
  guint64 a_bytes = cm2_a_bytes (a);
  HnVkBuffer *s = hn_cmd_scratch (cmd, a_bytes, error);
  /* rounded as each matmul would round its own copy (fp16 autocast's way under it) */
  if (!s || !hn_record_to_f16 (cmd, "to_f16", a, s, 0, a_bytes, hn_op_matmul_f16 (cmd, 0), error))
    return FALSE;
  *out = (HnVkBinding) { s, 0, a_bytes, FALSE };
  return TRUE;
}

/* A made f16 in memory first (mode 2) unless it is above 128 Mi elements or
 * HN_CM2_AMODE picks an in-kernel conversion (see try_dispatch_cm2). */
static guint32
cm2_a_mode (HnTensor *a)
{
  const char *amode_env = g_getenv ("HN_CM2_AMODE");
  return amode_env && (amode_env[0] == '0' || amode_env[0] == '1') ? (guint32) (amode_env[0] - '0')
         : a->n > ((gint64) 128 << 20) ? 1u : 2u;
}

typedef struct {
  guint32 bm, bn, bk, nt, unroll, splits, k_split, swz;
} Cm2Tile;

/* matmul_cm2's tile, workgroup size and split of K for C[M, N] (batch of them) over K; see
 * try_dispatch_cm2. co_wgs: workgroups of the other GEMMs recorded with this one and no barrier
 * between them (hn_op_matmul_n), which fill the GPU beside it: no split-K for those. */
static Cm2Tile
cm2_pick (HnVkContext *ctx, guint32 M, guint32 N, guint32 K, guint32 batch, gboolean f16, gboolean linear,
          guint64 co_wgs)
{
  Cm2Tile t = { 64, 64, 64, 0, 8, 1, K, 0 };
  hn_vk_context_has_coopmat2 (ctx, &t.nt);
  guint32 listed = hn_vk_context_get_device_info (ctx)->nv2_invocations_listed;
#define CM2_TILES(bm_, bn_) ((guint64) ((M + (bm_) - 1) / (bm_)) * ((N + (bn_) - 1) / (bn_)) * batch)
  gboolean old = env_uint ("HN_CM2_POLICY", 1) == 0;
  if (linear && !old)
    {
      /* x·Wᵀ (A rows along K, W [N, K]): the table of the 2026-12-02 sweep
       * (docs/performance.md): 128x256 when those fill the GPU once, 128x128
       * when those do or K is long (split-K), else 64-row tiles on 128
       * invocations, 64x128 when those fill it */
      /* not under fp16 autocast, whose rounding epilogue runs slower on
       * 128x256 (gpt2-124m training step, 2026-12-03f: 8192 x 768 x 3072
       * 301 against 213 us on 128x128, the 8192 x 50304 x 768 LM head 6.5
       * against 4.6 ms) */
      /* ... but where both N and K are long, as without autocast (LoRA of llama-1b at fp16,
       * 2026-12-03k, on 128x128 against 128x256 without autocast: 2048 x 8192 x 2048 11.45 against
       * 10.0 ms per step, 2048 x 2048 x 2048 3.26 against 2.66, the 256 x 128256 x 2048 head
       * chunks 18.5 against 7.7; gpt2's N = 768 shapes stay on 128x128) */
      gboolean wide_ok = !f16 || (K >= 2048 && N >= 2048);
      if (CM2_TILES (128, 256) >= 128 && wide_ok)
        {
          t.bm = 128;
          t.bn = 256;
          if (CM2_TILES (128, 256) >= 512)
            t.swz = 8; /* 2048 x 8192 x 2048: 317 against 328 us */
        }
      else if (CM2_TILES (128, 128) >= 128 || (K >= 4096 && batch == 1))
        t.bm = t.bn = 128;
      else
        {
          if (CM2_TILES (64, 128) >= 128)
            t.bn = 128;
          if (listed & (128 / 32))
            t.nt = 128;
        }
    }
  else if (CM2_TILES (128, 128) >= 128 || (K >= 4096 && batch == 1))
    t.bm = t.bn = 128; /* a long K: fewer, larger tiles and split-K (512 x 2048 x 8192: 61 against 47 TFLOP/s) */
  /* many 128x128 tiles under fp16 autocast: the swizzled order (the LM head
   * 8192 x 50304 x 768 4.44 against 4.69 ms, its dW 2.92 against 2.98 ms, 2026-12-03h) */
  if (f16 && t.bm == 128 && t.bn == 128 && CM2_TILES (128, 128) >= 2048)
    t.swz = 8;
#undef CM2_TILES
  if (hn_cm2_tile_env ("HN_CM2_TILE", &t.bm, &t.bn, &t.bk))
    hn_vk_context_has_coopmat2 (ctx, &t.nt); /* the device's size unless HN_CM2_NT says */
  /* 8 BK steps per loop iteration, 4 when a short K has a multiple of 4 but
   * not of 8 (K 768: 12 steps; the remainder runs one step at a time:
   * 8192 x 768 x 768 96.6 against 99.2 us, 2026-12-03f) */
  guint32 steps = (K + t.bk - 1) / t.bk;
  t.unroll = MAX (env_uint ("HN_CM2_UNROLL", steps < 32 && steps % 8 && steps % 4 == 0 ? 4 : 8), 1);
  t.swz = env_uint ("HN_CM2_SWIZZLE", t.swz);
  /* HN_CM2_NT: another workgroup size the device lists for this shape */
  guint32 nt_env = env_uint ("HN_CM2_NT", 0);
  if (nt_env >= 32 && (nt_env & (nt_env - 1)) == 0 &&
      (hn_vk_context_get_device_info (ctx)->nv2_invocations_listed & (nt_env / 32)))
    t.nt = nt_env;
  /* split-K: only for a single matrix (the linear layers), each split a
   * whole number of unrolled K steps and at least two of them */
  guint64 tiles = (guint64) ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn) * batch;
  guint32 uk = t.bk * t.unroll, k_steps = (K + uk - 1) / uk;
  /* under fp16 autocast only with HN_CM2_SPLITK_F16=1 (an experiment: the
   * LM head's dX, 2048 x 768 x 50304 on 96 tiles) */
  gboolean split_ok = !f16 || env_uint ("HN_CM2_SPLITK_F16", 0) == 1;
  if (batch == 1 && tiles + co_wgs < 66 && split_ok)
    t.splits = (guint32) MIN ((128 + tiles - 1) / tiles, (guint64) MAX (k_steps / 2, 1));
  /* a long K on fewer tiles than a few waves of the multiprocessors (where
   * the device says how many; one 128x128 tile runs on each at a time): the
   * split with the least modelled time, waves x (K steps of the longest
   * split + 1 for its prologue and epilogue) + the partial sums' pass (the
   * weight gradients of gpt2-124m: 768 x 3072 x 8192 on 144 tiles is two
   * waves, the second 9 % full; under fp16 autocast too: matmul_splitk.comp
   * rounds the summed product as the one-pass epilogue does, checked by
   * test-ops-matmul with HN_CM2_SPLITK_F16=1 on the H200). H200, 2026-12-03k: those three weight
   * gradients 2915 + 2915 + 743 against 3938 + 3895 + 1008 us per step, the LM head's dX under fp16
   * 2048 x 768 x 50304 on 4 splits; the step 121.7k against 120.6k tok/s (two runs each).
   * HN_CM2_WAVES=0: off. */
  guint32 sms = hn_vk_context_get_device_info (ctx)->multiprocessors;
  if (sms && batch == 1 && co_wgs == 0 && K >= 4096 && t.bm * t.bn >= 128 * 128 &&
      tiles < 4 * (guint64) sms &&
      env_uint ("HN_CM2_WAVES", 1) == 1)
    {
      double best = G_MAXDOUBLE;
      for (guint32 sp = 1; sp <= 8 && sp <= MAX (k_steps / 2, 1); sp++)
        {
          guint32 per = (k_steps + sp - 1) / sp, real = (k_steps + per - 1) / per; /* no empty split */
          guint64 waves = (tiles * real + sms - 1) / sms;
          double cost = (double) waves * (per + 1) + (real > 1 ? 1.0 + 0.25 * real : 0.0);
          if (cost < best * 0.95)
            {
              best = cost;
              t.splits = real;
            }
        }
    }
  guint32 forced = env_uint ("HN_CM2_SPLITK", 0);
  if (forced && batch == 1 && split_ok)
    t.splits = MIN (forced, MAX (k_steps, 1));
  t.k_split = (k_steps + t.splits - 1) / t.splits * uk;
  if (t.splits > 1)
    t.splits = (K + t.k_split - 1) / t.k_split; /* no empty split */
  return t;
}

/* HN_GEMM_KHR16=1 (an experiment beside matmul_cm2): x·Wᵀ with both operands
 * f16 in memory, whole tiles, no epilogue, through matmul_khr16.comp (KHR
 * cooperative matrix, operands staged in shared memory by the kernel).
 * HN_KHR16_TILE="BM,BN,BK,WM,WN" (default 128,128,32,64,64). Returns TRUE
 * when it took the product (*ok then says whether recording it worked). */
static gboolean
try_dispatch_khr16 (HnCmd *cmd, const HnVkBinding *bd, const MatmulPush *mm, const MatmulPush *pc, guint32 batch,
                    gboolean f16, guint32 bdt, guint32 amode, guint32 a_t, guint32 b_t, guint32 aligned, gboolean *ok,
                    GError **error)
{
  if (g_strcmp0 (g_getenv ("HN_GEMM_KHR16"), "1") != 0)
    return FALSE;
  guint32 t[5] = { 128, 128, 32, 64, 64 };
  const char *tile = g_getenv ("HN_KHR16_TILE");
  if (tile && sscanf (tile, "%u,%u,%u,%u,%u", &t[0], &t[1], &t[2], &t[3], &t[4]) != 5)
    return FALSE;
  const HnVkDeviceInfo *di = hn_vk_context_get_device_info (hn_cmd_get_context (cmd));
  if (!t[0] || !t[1] || t[2] % 16 || !t[3] || !t[4] || t[3] % 16 || t[4] % 16 || t[0] % t[3] || t[1] % t[4])
    return FALSE;
  guint32 nt = (t[0] / t[3]) * (t[1] / t[4]) * di->subgroup_size;
  if (nt > di->max_workgroup_invocations || 2 * (t[0] + t[1]) * (t[2] + 8) * 2 > di->max_shared_memory)
    return FALSE;
  if (batch != 1 || f16 || bdt != hn_op_float_code (HN_DTYPE_F16) || amode != 2 || a_t || b_t || !aligned ||
      mm->alpha != 1.0f || mm->flags || pc->M % t[0] || pc->N % t[1] || pc->K % t[2] || mm->c_off % 4 ||
      mm->c_sm % 4)
    return FALSE;
  struct { guint32 M, N, K, a_off, a_sm, b_off, b_sn, c_off, c_sm; } kp = {
    pc->M, pc->N, pc->K, mm->a_off, mm->a_sm, mm->b_off, mm->b_sn, mm->c_off, mm->c_sm };
  guint32 spec[6] = { t[0], t[1], t[2], t[3], t[4], nt };
  HnVkBinding kb[3] = { bd[0], bd[1], bd[3] };
  hn_cmd_set_label (cmd, "matmul_khr16");
  *ok = hn_cmd_dispatch (cmd, "matmul_khr16", spec, 6, kb, 3, &kp, sizeof kp, pc->N / t[1], pc->M / t[0], 1, error);
  hn_cmd_set_label (cmd, NULL);
  return TRUE;
}

/* Workgroups of matmul_cm2 for C[M, N] = x·Wᵀ (no split-K counted). */
static guint64
cm2_wgs (HnVkContext *ctx, guint32 M, guint32 N, guint32 K)
{
  Cm2Tile t = cm2_pick (ctx, M, N, K, 1, FALSE, TRUE, G_MAXUINT32);
  return (guint64) ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn);
}

/* The VK_NV_cooperative_matrix2 kernel (matmul_cm2.comp) when the device
 * has it and each operand is contiguous along one of its two dimensions
 * (the tensor layouts take one stride). Tiles by shape (cm2_pick): for
 * x·Wᵀ 128x256 when those fill the GPU once (walked in groups of 8 tile rows
 * on grids of 512 or more), 128x128 when those do or K is long (split-K then
 * fills it), else 64x128 or 64x64 on 128 invocations (the 2026-12-02 sweep:
 * 512 x 2048 x 2048 33.5 us against 37.4 on 64x64 with 256; 2048 rows 2-4 %
 * faster on 128x256); other layouts (bmm) 128x128 or 64x64 as before. BK 64,
 * 8 BK steps per loop iteration (unrolling 1 / 4 / 8 steps gave 174 / 229 /
 * 244 TFLOP/s on 8192³). A multiprocessor count is
 * not reported by Vulkan, so "fill" means 128 tiles (the H200 has 132
 * multiprocessors). When the tiles fill fewer than half of them (66), K is
 * split across workgroups (split-K: partial products in the recorder's
 * scratch, summed with the epilogue by matmul_splitk.comp; never under fp16
 * autocast, whose epilogue rounds each whole result).
 * HN_CM2_TILE="BM,BN,BK", HN_CM2_UNROLL=n (BK steps per loop iteration),
 * HN_CM2_SPLITK=n (1: never split), HN_CM2_NT=n (a workgroup size the device
 * lists), HN_CM2_SWIZZLE=n (tile rows per group, 0: none) override;
 * HN_CM2_POLICY=0 takes the previous table (128x128 or 64x64, 256 invocations).
 * a16: NULL, or A's f16 copy already made by cm2_convert_a (several
 * matmuls of one input share it). co_wgs: see
 * cm2_pick. b2: NULL, or the up projection of a gated MLP whose gate is b
 * (hn_op_matmul_glu: c is then f16, act(A·b) * (A·b2); pc->bias_off holds
 * b2's offset; no bias, split-K, alpha or accumulate). */
static gboolean
try_dispatch_cm2 (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnTensor *bias, const MatmulPush *pc,
                  guint32 batch, guint32 bias_sb, gboolean f16, const HnVkBinding *a16, guint64 co_wgs, HnTensor *b2,
                  guint32 act, gboolean *done, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  guint32 nt = 0;
  *done = FALSE;
  if (!hn_vk_context_has_coopmat2 (ctx, &nt))
    return TRUE;
  guint32 a_t, b_t;
  if (pc->a_sk == 1)
    a_t = 0;
  else if (pc->a_sm == 1)
    a_t = 1;
  else
    return TRUE;
  if (pc->b_sk == 1)
    b_t = 0;
  else if (pc->b_sn == 1)
    b_t = 1;
  else
    return TRUE;
  Cm2Tile tl = cm2_pick (ctx, pc->M, pc->N, pc->K, batch, f16, a_t == 0 && b_t == 0, b2 ? G_MAXUINT32 : co_wgs);
  guint32 bm = tl.bm, bn = tl.bn, bk = tl.bk, unroll = tl.unroll, splits = tl.splits, k_split = tl.k_split;
  nt = tl.nt;
  if (b2 && bm * bn > 128 * 128)
    bn = 128 * 128 / bm; /* two accumulators: as many registers as one 128x256 tile */
  /* an f16 C (fp16 autocast's f16 result stored as it is): whole K, stored by the kernel itself */
  gboolean c16 = c->dtype == HN_DTYPE_F16 && !b2;
  if (b2 || c16)
    {
      splits = 1;
      k_split = pc->K;
    }
  /* A to f16 first (to_f16.comp into the recorder's scratch): the kernel
   * then streams 16-bit operands only, half A's bytes. An A above 128 Mi
   * elements (the logits gradient of a 128k vocabulary) is converted inside
   * the kernel instead, by a decode function (8192³: 70 against 76 TFLOP/s),
   * so the copy never adds more than 256 MiB to a step's peak. HN_CM2_AMODE=0|1
   * picks an in-kernel conversion always (see matmul_cm2.comp). An f32 B
   * (fp16 autocast only) is copied the same way, into the same scratch after
   * A's copy, or decoded in the kernel when it is that large. */
  gint64 big_operand = (gint64) 128 << 20;
  /* an f16 A (rmsnorm's or glu's f16 output) is read as it is */
  gboolean a_is16 = a->dtype == HN_DTYPE_F16;
  guint32 amode = a_is16 ? 2u : cm2_a_mode (a);
  gboolean b_copy = b->dtype == HN_DTYPE_F32 && b->n <= big_operand;
  guint32 bdt = b_copy ? hn_op_float_code (HN_DTYPE_F16) : hn_op_float_code (b->dtype);
  guint32 swz = tl.swz;
  /* HN_CM2_EPI=callback: the per-element epilogue through coopMatPerElementNV (matmul_cm2.comp's EPI_LOOP) */
  guint32 epi_loop = g_strcmp0 (g_getenv ("HN_CM2_EPI"), "callback") != 0;
  /* the epilogue and fp16 autocast's rounding through conversion instructions where the device rounds
   * them to nearest even and keeps f16 subnormals (matmul_cm2.comp's HN_RTE); HN_CM2_RTE=0: the
   * integer rounding and per-element loops everywhere */
  gboolean rte = hn_vk_context_get_device_info (ctx)->f16_rte && env_uint ("HN_CM2_RTE", 1) == 1;
  /* ... which reads a bias under autocast as an f16 copy, rounded by to_f16.comp into the scratch
   * after B's copy (a few hundred bytes) */
  gboolean bias_copy = rte && epi_loop && f16 && bias && !b2 && splits == 1;
  guint32 spec[16] = { bdt, bm, bn, bk, nt, a_t, b_t, amode, 0, f16, unroll, swz, b2 != NULL, b2 ? act : 1, epi_loop,
                       c16 };
  Cm2Push p2 = { *pc, 1, pc->K, 0, bias_sb };
  HnVkBinding bd[5] = { hn_bind (a, FALSE), hn_bind (b, FALSE), hn_bind (bias ? bias : a, FALSE), hn_bind (c, TRUE),
                        hn_bind (b2 ? b2 : b, FALSE) };
  /* the scratch: A's f16 copy, B's, then the partial products (256-byte aligned) */
  guint64 a_bytes = amode == 2 && !a_is16 ? cm2_a_bytes (a) : 0;
  guint64 b_bytes = b_copy ? ((guint64) b->n + 1) / 2 * 4 : 0;
  guint64 bias_byte0 = a_bytes + ((b_bytes + 255) & ~(guint64) 255);
  guint64 bias_bytes = bias_copy ? ((guint64) bias->n + 1) / 2 * 4 : 0;
  guint64 p_off = bias_byte0 + ((bias_bytes + 255) & ~(guint64) 255);
  guint64 p_bytes = splits > 1 ? (guint64) splits * pc->M * pc->N * 4 : 0;
  HnVkBuffer *s = NULL;
  gboolean ok_khr16 = FALSE;
  if ((a_bytes && !a16) || b_bytes || bias_bytes || p_bytes)
    if (!(s = hn_cmd_scratch (cmd, p_off + p_bytes, error)))
      return FALSE;
  if (amode == 2 && !a_is16)
    {
      if (a16)
        bd[0] = *a16;
      else
        {
          if (!hn_record_to_f16 (cmd, "to_f16", a, s, 0, a_bytes, f16, error))
            return FALSE;
          bd[0] = (HnVkBinding) { s, 0, a_bytes, FALSE };
        }
      p2.mm.a_off -= hn_eoff (a);
    }
  if (b_bytes)
    {
      if (!hn_record_to_f16 (cmd, "to_f16", b, s, a_bytes, b_bytes, f16, error))
        return FALSE;
      p2.mm.b_off = p2.mm.b_off - hn_eoff (b) + (guint32) (a_bytes / 2);
      bd[1] = (HnVkBinding) { s, a_bytes, b_bytes, FALSE };
    }
  if (bias_bytes)
    {
      if (!hn_record_to_f16 (cmd, "to_f16", bias, s, bias_byte0, bias_bytes, TRUE, error))
        return FALSE;
      p2.mm.bias_off = p2.mm.bias_off - hn_eoff (bias) + (guint32) (bias_byte0 / 2);
      bd[2] = (HnVkBinding) { s, bias_byte0, bias_bytes, FALSE };
    }
  if (splits > 1)
    {
      /* partial products [splits, M, N] with no epilogue */
      p2.splits = splits;
      p2.k_split = k_split;
      p2.c_ss = pc->M * pc->N;
      p2.mm.c_off = (guint32) (p_off / 4);
      p2.mm.c_sb = 0;
      p2.mm.c_sm = pc->N;
      p2.mm.alpha = 1.0f;
      p2.mm.flags = 0;
      bd[3] = (HnVkBinding) { s, p_off, p_bytes, TRUE };
    }
  /* 16-byte aligned rows (8 halves of A's f16 copy, 4 floats of an f32 A,
   * 8 halves of a 16-bit B, 4 floats of an f32 one): the kernel may then
   * load 16 bytes at a time */
  guint32 aal = spec[7] == 2 ? 8 : 4, bal = bdt == hn_op_float_code (HN_DTYPE_F32) ? 4 : 8;
  guint32 a_st = a_t ? p2.mm.a_sk : p2.mm.a_sm, b_st = b_t ? p2.mm.b_sk : p2.mm.b_sn;
  spec[8] = p2.mm.a_off % aal == 0 && p2.mm.a_sb % aal == 0 && a_st % aal == 0 && p2.mm.b_off % bal == 0 &&
            p2.mm.b_sb % bal == 0 && b_st % bal == 0 && (!b2 || p2.mm.bias_off % bal == 0);
  *done = TRUE;
  if (!b2 && !c16 && splits == 1 &&
      try_dispatch_khr16 (cmd, bd, &p2.mm, pc, batch, f16, bdt, spec[7], a_t, b_t, spec[8], &ok_khr16, error))
    return ok_khr16;
  /* HN_PROFILE_SHAPES=1: the label names the shape, layout and tile (a
   * profile's per-shape breakdown) */
  g_autofree char *label = g_getenv ("HN_PROFILE_SHAPES")
                             ? g_strdup_printf ("%s %ux%ux%u%s%s b%u %ux%u/%u s%u", b2 ? "matmul_cm2_glu" : "matmul_cm2",
                                                pc->M, pc->N, pc->K, a_t ? " At" : "", b_t ? " Bt" : "", batch, bm,
                                                bn, nt, splits)
                             : NULL;
  hn_cmd_set_label (cmd, label ? label : b2 ? "matmul_cm2_glu" : "matmul_cm2");
  const char *shader = rte ? "matmul_cm2_rte" : "matmul_cm2";
  gboolean ok = hn_cmd_dispatch (cmd, shader, spec, 16, bd, 5, &p2, sizeof p2, (pc->N + bn - 1) / bn,
                                 (pc->M + bm - 1) / bm, batch * splits, error);
  hn_cmd_set_label (cmd, NULL);
  if (!ok || splits == 1)
    return ok;
  struct {
    guint32 M, N, splits, part_off, c_off, c_sm, bias_off;
    float alpha;
    guint32 flags;
  } rp = { pc->M, pc->N, splits, (guint32) (p_off / 4), pc->c_off, pc->c_sm, pc->bias_off, pc->alpha, pc->flags };
  guint32 vec_spec[2] = { pc->N % 4 == 0 ? 4 : 1, f16 }, gx, gy;
  guint32 vec = vec_spec[0];
  HnVkBinding rb[3] = { { s, p_off, p_bytes, FALSE }, hn_bind (bias ? bias : c, FALSE), hn_bind (c, TRUE) };
  hn_grid (((guint64) pc->M * (pc->N / vec) + 255) / 256, &gx, &gy);
  hn_cmd_set_label (cmd, "matmul_splitk");
  ok = hn_cmd_dispatch (cmd, "matmul_splitk", vec_spec, 2, rb, 3, &rp, sizeof rp, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

typedef struct {
  guint32 L, K, x_off, x_sl, x_sk, w_off, w_sk, w_ss, c_off, c_sl, c_ss;
  float alpha;
  guint32 flags;
} SkinnyPush;

/* One output dimension of at most 16 (a LoRA adapter's rank) over a long K,
 * f32, no batch or bias: matmul_skinny.comp, 8 rows per workgroup (the tiled
 * kernel would run a handful of workgroups down all of K), with fp16
 * autocast's rounding when f16. Sets *done when it took the product. */
static gboolean
try_dispatch_skinny (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnTensor *bias, const MatmulPush *pc,
                     guint32 batch, gboolean f16, gboolean *done, GError **error)
{
  *done = FALSE;
  if (bias || batch != 1 || a->dtype != HN_DTYPE_F32 || b->dtype != HN_DTYPE_F32 || pc->K < 64 ||
      (pc->N > 16 && pc->M > 16) || g_getenv ("HN_NO_MATMUL_SKINNY") != NULL)
    return TRUE;
  SkinnyPush sp;
  guint32 S;
  HnTensor *xt, *wt;
  if (pc->N <= 16 && pc->N <= pc->M)
    {
      /* C(m, n): l = m over A's rows, s = n over B's columns */
      S = pc->N;
      sp = (SkinnyPush) { pc->M, pc->K, pc->a_off, pc->a_sm, pc->a_sk, pc->b_off, pc->b_sk, pc->b_sn, pc->c_off,
                           pc->c_sm, 1, pc->alpha, pc->flags & 1u };
      xt = a;
      wt = b;
    }
  else
    {
      /* Cᵀ(n, m) = Σ B(k, n)·A(m, k): l = n over B's columns, s = m */
      S = pc->M;
      sp = (SkinnyPush) { pc->N, pc->K, pc->b_off, pc->b_sn, pc->b_sk, pc->a_off, pc->a_sk, pc->a_sm, pc->c_off, 1,
                           pc->c_sm, pc->alpha, pc->flags & 1u };
      xt = b;
      wt = a;
    }
  guint32 mode = sp.x_sk != 1 && sp.x_sl == 1 ? 1 : 0;
  guint32 spec[3] = { S, mode, f16 };
  guint32 gx, gy;
  hn_grid ((guint64) (sp.L + 7) / 8, &gx, &gy);
  HnVkBinding bd[3] = { hn_bind (xt, FALSE), hn_bind (wt, FALSE), hn_bind (c, TRUE) };
  hn_cmd_set_label (cmd, "matmul_skinny");
  gboolean ok = hn_cmd_dispatch (cmd, "matmul_skinny", spec, 3, bd, 3, &sp, sizeof sp, gx, gy, 1, error);
  hn_cmd_set_label (cmd, NULL);
  *done = ok;
  return ok;
}

static gboolean
dispatch_tiled (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnTensor *bias, const MatmulPush *pc,
                guint32 batch, HnMatmulFlags flags, const HnVkBinding *a16, guint64 co_wgs, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  /* fp16 autocast: the tensor cores whatever B's dtype and M (the skinny
   * kernel takes its products with the same rounding) */
  gboolean f16 = hn_op_matmul_f16 (cmd, flags);
  /* an f16 C (hn_op_matmul under fp16 autocast): matmul_cm2 or the scalar kernel, which store it */
  gboolean c16 = c->dtype == HN_DTYPE_F16;
  gboolean skinny = FALSE;
  if (!c16 && !try_dispatch_skinny (cmd, c, a, b, bias, pc, batch, f16, &skinny, error))
    return FALSE;
  if (skinny)
    return TRUE;
  gboolean tensor = f16 ? hn_vk_context_has_coopmat (ctx) : hn_op_matmul_reduced_precision (ctx, b->dtype, pc->M, flags);
  if (tensor)
    {
      gboolean done;
      if (!try_dispatch_cm2 (cmd, c, a, b, bias, pc, batch, 0, f16, a16, co_wgs, NULL, 0, &done, error))
        return FALSE;
      if (done)
        return TRUE;
    }
  gboolean c_vec = pc->c_off % 4 == 0 && pc->c_sb % 4 == 0 && pc->c_sm % 4 == 0 && pc->N % 4 == 0;
  if (c16 && (tensor || !c_vec))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "matmul: an f16 output (%s) needs the cooperative-matrix-2 kernel or the scalar one with rows of "
                   "4-element multiples", c->name);
      return FALSE;
    }
  HnTensor wide;
  MatmulPush pw;
  if (a->dtype == HN_DTYPE_F16)
    {
      /* an f16 A (a training activation's f16 copy) on the kernels that read
       * f32: widened into the recorder's scratch first (exact; only devices
       * without cooperative matrix 2, e.g. lavapipe, take this) */
      guint64 bytes = (guint64) a->n * sizeof (float);
      HnVkBuffer *s = hn_cmd_scratch (cmd, bytes, error);
      if (!s)
        return FALSE;
      struct { guint32 n, in_off, out_off, in_dt, out_dt; } cp = {
        (guint32) a->n, hn_eoff (a), 0, hn_op_float_code (HN_DTYPE_F16), hn_op_float_code (HN_DTYPE_F32) };
      HnVkBinding cb[2] = { hn_bind (a, FALSE), { s, 0, bytes, TRUE } };
      if (!hn_op_dispatch_elems (cmd, "copy", NULL, 0, cb, 2, &cp, sizeof cp, (guint64) a->n, error))
        return FALSE;
      wide = *a;
      wide.buf = s;
      wide.offset = 0;
      wide.dtype = HN_DTYPE_F32;
      pw = *pc;
      pw.a_off -= hn_eoff (a);
      a = &wide;
      pc = &pw;
    }
  guint32 a_mode = operand_mode (pc->a_off, pc->a_sb, pc->a_sm, pc->a_sk, pc->M, pc->K);
  guint32 b_mode = operand_mode (pc->b_off, pc->b_sb, pc->b_sn, pc->b_sk, pc->N, pc->K);
  if (tensor)
    return dispatch_coopmat (cmd, c, a, b, bias, pc, batch, a_mode, b_mode, c_vec, f16, error);
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
  /* Tiles: 128x128x16 with 8x8 per invocation on GPUs when there are enough
   * such tiles to fill the device (40 TFLOP/s on the H200 against 35 with
   * BK 8), 64x64x16 with 4x4 otherwise (and on CPU devices), 32x32x8 on
   * devices with small workgroups or shared memory.
   * HN_MATMUL_TILE="BM,BN,BK,TM,TN" overrides (for tuning and tests). */
  guint32 bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;
  gboolean gpu = !g_str_equal (info->type, "cpu");
  guint64 big_tiles = (guint64) ((pc->M + 127) / 128) * ((pc->N + 127) / 128) * batch;
  if (gpu && big_tiles >= 128 && info->max_workgroup_invocations >= 256 && info->max_shared_memory >= 2 * 8 * 264 * 4)
    {
      bm = bn = 128;
      bk = info->max_shared_memory >= 2 * 16 * 264 * 4 ? 16 : 8;
      tm = tn = 8;
    }
  if (info->max_workgroup_invocations < 256 || info->max_shared_memory < 2 * 16 * 136 * 4)
    {
      bm = bn = 32; /* 64 invocations, 4.5 KiB of shared memory */
      bk = 8;
    }
  const char *tile = g_getenv ("HN_MATMUL_TILE");
  guint32 t[5];
  if (tile && sscanf (tile, "%u,%u,%u,%u,%u", &t[0], &t[1], &t[2], &t[3], &t[4]) == 5 && t[3] && t[4] &&
      t[3] % 4 == 0 && t[4] % 4 == 0 && t[2] % 4 == 0 && t[2] && t[0] % t[3] == 0 && t[1] % t[4] == 0 &&
      (t[0] / t[3]) * (t[1] / t[4]) <= info->max_workgroup_invocations && t[3] * t[4] <= 64 &&
      2 * t[2] * (t[0] + t[1] + 8) * 4 <= info->max_shared_memory)
    {
      bm = t[0]; bn = t[1]; bk = t[2]; tm = t[3]; tn = t[4];
    }
  guint32 threads = (bm / tm) * (bn / tn);
  guint32 spec[12] = { hn_op_float_code (b->dtype), bm, bn, bk, tm, tn, threads, a_mode, b_mode, c_vec, f16, c16 };
  return dispatch_labelled (cmd, "matmul", spec, 12, c, a, b, bias, pc, bm, bn, batch, error);
}

/* y (+)= alpha · x·Wᵀ + bias on whichever kernel fits; a16: NULL or x's f16
 * copy, co_wgs the other GEMMs' workgroups (hn_op_matmul_n). */
static gboolean
linear (HnCmd *cmd, const char *op, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, float alpha,
        gboolean accumulate, const HnVkBinding *a16, guint64 co_wgs, GError **error)
{
  if (!check_linear (op, cmd, y, x, w, bias, error))
    return FALSE;
  if (y->dtype == HN_DTYPE_F16 && (accumulate || hn_dtype_is_ggml (w->dtype) || hn_dtype_is_quant (w->dtype)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: an f16 output (%s) takes a product of a float weight, not accumulated", op, y->name);
      return FALSE;
    }
  if (x->dtype == HN_DTYPE_F16 && (hn_dtype_is_ggml (w->dtype) || hn_dtype_is_quant (w->dtype)) &&
      !hn_quant_f16_form_taken (cmd, w, hn_tensor_rows (x)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: an f16 x (%s) with the quantized weight %s", op, x->name,
                   w->name);
      return FALSE;
    }
  /* GGUF blocks: their matrix-vector kernel for a few rows (decode) */
  if (hn_dtype_is_ggml (w->dtype) && hn_op_matvec_available (cmd, hn_tensor_rows (x)))
    return dispatch_matvec (cmd, y, x, w, bias, NULL, NULL, 0, accumulate, alpha, NULL, error);
  if (hn_dtype_is_quant (w->dtype))
    /* a frozen quantized weight (QLoRA): its own kernel, never the matrix-vector one */
    return hn_op_matmul_quant_dispatch (cmd, y, x, w, bias, (guint32) hn_tensor_rows (x), (guint32) w->shape[0],
                                        (guint32) w->shape[1], (guint32) w->shape[1], 1, TRUE, alpha, accumulate,
                                        HN_MATMUL_DEFAULT, error);
  gint64 N = w->shape[0], K = w->shape[1], M = hn_tensor_rows (x);
  if (!hn_op_matmul_f16 (cmd, 0) && x->dtype == HN_DTYPE_F32 && hn_op_matvec_available (cmd, M))
    return dispatch_matvec (cmd, y, x, w, bias, NULL, NULL, 0, accumulate, alpha, NULL, error);
  MatmulPush pc = {
    (guint32) M, (guint32) N, (guint32) K, hn_eoff (x), hn_eoff (w), hn_eoff (y), bias ? hn_eoff (bias) : 0,
    0, (guint32) K, 1,           /* A(m, k) = x[m * K + k] */
    0, 1, (guint32) K,           /* B(k, n) = W[n * K + k] */
    0, (guint32) N,
    alpha, (bias ? 2u : 0u) | (accumulate ? 1u : 0u) };
  return dispatch_tiled (cmd, y, x, w, bias, &pc, 1, HN_MATMUL_DEFAULT, a16, co_wgs, error);
}

gboolean
hn_op_matmul (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, GError **error)
{
  return linear (cmd, "matmul", y, x, w, bias, 1.0f, FALSE, NULL, 0, error);
}

gboolean
hn_op_matmul_add (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, float alpha, GError **error)
{
  if (bias && alpha != 1.0f && w && !hn_op_matvec_available (cmd, hn_tensor_rows (x)))
    {
      /* the tiled kernels add the bias after alpha */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "matmul_add: a bias with alpha %g needs the matrix-vector kernel (at most 8 rows of x %s)", alpha,
                   x ? x->name : "?");
      return FALSE;
    }
  return linear (cmd, "matmul_add", y, x, w, bias, alpha, TRUE, NULL, 0, error);
}

gboolean
hn_op_matmul_n (HnCmd *cmd, guint n, HnTensor *const *y, HnTensor *x, HnTensor *const *w, HnTensor *const *bias,
                GError **error)
{
  /* one f16 copy of x when every weight takes the cooperative-matrix-2 kernel from it */
  gboolean share = n > 1 && x && x->dtype == HN_DTYPE_F32 && !hn_op_matvec_available (cmd, hn_tensor_rows (x)) &&
                   hn_vk_context_has_coopmat2 (hn_cmd_get_context (cmd), NULL) && cm2_a_mode (x) == 2;
  for (guint i = 0; share && i < n; i++)
    share = w[i] && !hn_dtype_is_quant (w[i]->dtype) &&
            hn_op_matmul_reduced_precision (hn_cmd_get_context (cmd), w[i]->dtype, hn_tensor_rows (x), 0) &&
            check_linear ("matmul_n", cmd, y[i], x, w[i], bias ? bias[i] : NULL, error);
  if (error && *error)
    return FALSE;
  HnVkBinding a16;
  if (share && !cm2_convert_a (cmd, x, &a16, error))
    return FALSE;
  /* the GEMMs run side by side: each one's split-K sees the others' workgroups */
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  gboolean side = n > 1 && x && cm2_linear (cmd, w[0], hn_tensor_rows (x)) &&
                  g_getenv ("HN_CM2_NO_COSCHED") == NULL;
  guint64 all = 0;
  for (guint i = 0; side && i < n; i++)
    all += w[i] && w[i]->ndim == 2 ? cm2_wgs (ctx, (guint32) hn_tensor_rows (x), (guint32) w[i]->shape[0],
                                              (guint32) w[i]->shape[1]) : 0;
  for (guint i = 0; i < n; i++)
    {
      guint64 co = side && w[i] && w[i]->ndim == 2 ? all - cm2_wgs (ctx, (guint32) hn_tensor_rows (x), (guint32) w[i]->shape[0],
                                                                    (guint32) w[i]->shape[1]) : 0;
      if (!linear (cmd, "matmul", y[i], x, w[i], bias ? bias[i] : NULL, 1.0f, FALSE, share ? &a16 : NULL, co, error))
        return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_matmul_stacked (HnCmd *cmd, guint n, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, GError **error)
{
  const char *op = "matmul_stacked";
  if (!hn_op_check_ctx (op, cmd, y, error) || !hn_op_check_ctx (op, cmd, x, error) ||
      !hn_op_check_ctx (op, cmd, w, error) || !hn_op_check_ctx (op, cmd, bias, error))
    return FALSE;
  gint64 M = hn_tensor_rows (x), K = hn_tensor_cols (x), N = w->ndim == 2 ? w->shape[0] / MAX (n, 1) : 0;
  if (n == 0 || w->ndim != 2 || w->shape[0] != (gint64) n * N || w->shape[1] != K || hn_tensor_rows (y) != (gint64) n * M ||
      hn_tensor_cols (y) != N || (bias && bias->n != (gint64) n * N))
    {
      g_autofree char *dx = hn_tensor_describe (x), *dw = hn_tensor_describe (w), *dy = hn_tensor_describe (y);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: shapes do not fit %u stacked products y[i] = x·W[i]ᵀ: x %s %s, W %s %s, y %s %s", op, n, x->name,
                   dx, w->name, dw, y->name, dy);
      return FALSE;
    }
  /* one matmul_cm2 dispatch, the products as a batch that shares x (its tiles fill the GPU n times
   * over: gpt2's q, k and v, 8192 x 768 x 768 each, are 384 tiles of 128 x 128 alone) */
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  gboolean f16 = hn_op_matmul_f16 (cmd, 0);
  if ((x->dtype != HN_DTYPE_F16 && !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error)) ||
      !hn_op_check_dtype (op, "y", y, HN_DTYPE_F32, error) || !hn_op_check_float_storage (op, "W", w, error) ||
      (bias && !hn_op_check_dtype (op, "bias", bias, HN_DTYPE_F32, error)) || !check_no_overlap (op, y, x, error) ||
      !check_no_overlap (op, y, w, error))
    return FALSE;
  if (hn_vk_context_has_coopmat2 (ctx, NULL) &&
      (f16 || (hn_op_matmul_reduced_precision (ctx, w->dtype, M, 0) && !hn_op_matvec_available (cmd, M))) &&
      g_getenv ("HN_NO_MATMUL_STACKED") == NULL)
    {
      MatmulPush pc = {
        (guint32) M, (guint32) N, (guint32) K, hn_eoff (x), hn_eoff (w), hn_eoff (y), bias ? hn_eoff (bias) : 0,
        0, (guint32) K, 1,                 /* A(m, k) = x[m * K + k], the same for every product */
        (guint32) (N * K), 1, (guint32) K, /* B_i(k, n) = W[(i * N + n) * K + k] */
        (guint32) (M * N), (guint32) N,
        1.0f, bias ? 2u : 0u };
      gboolean done;
      if (!try_dispatch_cm2 (cmd, y, x, w, bias, &pc, n, (guint32) N, f16, NULL, 0, NULL, 0, &done, error))
        return FALSE;
      if (done)
        return TRUE;
    }
  /* elsewhere one product at a time, on row views */
  for (guint i = 0; i < n; i++)
    {
      g_autoptr (HnTensor) yi = hn_tensor_view_rows (y, (gint64) i * M, M, error);
      g_autoptr (HnTensor) wi = yi ? hn_tensor_view_rows (w, (gint64) i * N, N, error) : NULL;
      g_autoptr (HnTensor) bi = wi && bias ? hn_tensor_view_rows (bias, (gint64) i * N, N, error) : NULL;
      if (!wi || (bias && !bi) || !linear (cmd, op, yi, x, wi, bi, 1.0f, FALSE, NULL, 0, error))
        return FALSE;
    }
  return TRUE;
}

gboolean
hn_op_matmul_glu_available (HnCmd *cmd, HnTensor *w_gate, HnTensor *w_up, gint64 rows)
{
  /* ggml blocks of either type (Q4_K_M files mix them): both through their f16 forms */
  return w_gate && w_up &&
         (w_gate->dtype == w_up->dtype || (hn_dtype_is_ggml (w_gate->dtype) && hn_dtype_is_ggml (w_up->dtype))) &&
         hn_tensor_same_shape (w_gate, w_up) && w_gate->ndim == 2 && cm2_linear (cmd, w_gate, rows) &&
         cm2_linear (cmd, w_up, rows) && g_getenv ("HN_NO_CM2_GLU") == NULL;
}

gboolean
hn_op_matmul_glu (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w_gate, HnTensor *w_up, HnActivation act,
                  GError **error)
{
  const char *op = "matmul_glu";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, x, error) ||
      !hn_op_check_ctx (op, cmd, w_gate, error) || !hn_op_check_ctx (op, cmd, w_up, error))
    return FALSE;
  gint64 M = hn_tensor_rows (x);
  if (!hn_op_matmul_glu_available (cmd, w_gate, w_up, M))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: gate %s and up %s with %" G_GINT64_FORMAT " rows need the cooperative-matrix-2 kernel "
                   "(f16/bf16 weights of one shape, more than 8 rows)", op, w_gate->name, w_up->name, M);
      return FALSE;
    }
  if (!hn_op_check_dtype (op, "out", out, HN_DTYPE_F16, error) ||
      (x->dtype != HN_DTYPE_F16 && !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error)))
    return FALSE;
  gint64 F = w_gate->shape[0], K = w_gate->shape[1];
  if (hn_tensor_cols (x) != K || hn_tensor_cols (out) != F || hn_tensor_rows (out) != M)
    {
      g_autofree char *dx = hn_tensor_describe (x), *dw = hn_tensor_describe (w_gate), *dy = hn_tensor_describe (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: shapes do not fit out = act(x·Wgᵀ)·(x·Wuᵀ): x %s, W %s, out %s",
                   op, dx, dw, dy);
      return FALSE;
    }
  if (!check_no_overlap (op, out, x, error))
    return FALSE;
  if (hn_dtype_is_ggml (w_gate->dtype))
    {
      /* both f16 forms live at once: two slots of the weight scratch ring */
      g_autoptr (HnTensor) g16 = hn_quant_f16_form (cmd, w_gate, error);
      g_autoptr (HnTensor) u16 = g16 ? hn_quant_f16_form (cmd, w_up, error) : NULL;
      return u16 && hn_op_matmul_glu (cmd, out, x, g16, u16, act, error);
    }
  MatmulPush pc = {
    (guint32) M, (guint32) F, (guint32) K, hn_eoff (x), hn_eoff (w_gate), hn_eoff (out), hn_eoff (w_up),
    0, (guint32) K, 1,
    0, 1, (guint32) K,
    0, (guint32) F,
    1.0f, 0 };
  gboolean done = FALSE;
  if (!try_dispatch_cm2 (cmd, out, x, w_gate, NULL, &pc, 1, 0, FALSE, NULL, 0, w_up, (guint32) act, &done, error))
    return FALSE;
  if (!done)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: the cooperative-matrix-2 kernel did not take it", op);
      return FALSE;
    }
  return TRUE;
}

static void
batch_dims (HnTensor *t, gint64 *batch, gint64 *r, gint64 *c)
{
  *c = t->shape[t->ndim - 1];
  *r = t->ndim >= 2 ? t->shape[t->ndim - 2] : 1;
  *batch = t->n / (*r * *c);
}

gboolean
hn_op_bmm (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnMatmulFlags flags, float alpha, GError **error)
{
  const char *op = "bmm";
  if (!hn_op_check_ctx (op, cmd, c, error) || !hn_op_check_ctx (op, cmd, a, error) ||
      !hn_op_check_ctx (op, cmd, b, error))
    return FALSE;
  /* an f16 C under fp16 autocast (its values are f16), not accumulated into */
  gboolean c16 = c->dtype == HN_DTYPE_F16 && hn_op_matmul_f16 (cmd, flags) && !(flags & HN_MATMUL_ACCUMULATE) &&
                 !hn_dtype_is_quant (b->dtype);
  if ((a->dtype != HN_DTYPE_F16 && !hn_op_check_dtype (op, "A", a, HN_DTYPE_F32, error)) ||
      (!c16 && !hn_op_check_dtype (op, "C", c, HN_DTYPE_F32, error)) ||
      (!hn_dtype_is_quant (b->dtype) && !hn_op_check_float_storage (op, "B", b, error)))
    return FALSE;
  gint64 ba, ar, ac, bb, br, bc, bcc, cr, cc;
  batch_dims (a, &ba, &ar, &ac);
  batch_dims (b, &bb, &br, &bc);
  batch_dims (c, &bcc, &cr, &cc);
  gboolean ta = (flags & HN_MATMUL_TRANS_A) != 0, tb = (flags & HN_MATMUL_TRANS_B) != 0;
  gint64 M = ta ? ac : ar, K = ta ? ar : ac;
  gint64 Kb = tb ? bc : br, N = tb ? br : bc;
  if (K != Kb || cr != M || cc != N || (ba != 1 && ba != bcc) || (bb != 1 && bb != bcc))
    {
      g_autofree char *da = hn_tensor_describe (a), *db = hn_tensor_describe (b), *dc = hn_tensor_describe (c);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "bmm: shapes do not fit C = op(A)·op(B)%s%s: A %s %s, B %s %s, C %s %s",
                   ta ? " (A transposed)" : "", tb ? " (B transposed)" : "", a->name, da, b->name, db, c->name, dc);
      return FALSE;
    }
  if (bcc > 65535)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "bmm: batch %" G_GINT64_FORMAT " is above 65535", bcc);
      return FALSE;
    }
  if (!check_no_overlap (op, c, a, error) || !check_no_overlap (op, c, b, error))
    return FALSE;
  if (hn_dtype_is_quant (b->dtype))
    {
      /* B is a frozen quantized weight W [rows, cols]: stored [N, K] with TRANS_B, else [K, N] */
      if (bcc != 1 || a->dtype != HN_DTYPE_F32)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "bmm: a quantized B (%s) takes no batch and an f32 A",
                       b->name);
          return FALSE;
        }
      return hn_op_matmul_quant_dispatch (cmd, c, a, b, NULL, (guint32) M, (guint32) N, (guint32) K,
                                          ta ? 1 : (guint32) ac, ta ? (guint32) ac : 1, tb, alpha,
                                          (flags & HN_MATMUL_ACCUMULATE) != 0, flags, error);
    }
  MatmulPush pc = {
    (guint32) M, (guint32) N, (guint32) K, hn_eoff (a), hn_eoff (b), hn_eoff (c), 0,
    ba == 1 ? 0 : (guint32) (ar * ac), ta ? 1 : (guint32) ac, ta ? (guint32) ac : 1,
    bb == 1 ? 0 : (guint32) (br * bc), tb ? 1 : (guint32) bc, tb ? (guint32) bc : 1,
    (guint32) (M * N), (guint32) N,
    alpha, (flags & HN_MATMUL_ACCUMULATE) ? 1u : 0u };
  return dispatch_tiled (cmd, c, a, b, NULL, &pc, (guint32) bcc, flags, NULL, 0, error);
}

/* ------------------------------------------------------------ elementwise */

gboolean
hn_op_binary (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, HnBinaryOp bop, GError **error)
{
  const char *op = "binary";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, a, error) ||
      !hn_op_check_ctx (op, cmd, b, error))
    return FALSE;
  /* an f16 b: same shape and 4-element alignment as a and out (the flat vec4 path) */
  guint32 b16 = b->dtype == HN_DTYPE_F16;
  if (!hn_op_check_dtype (op, "a", a, HN_DTYPE_F32, error) ||
      (!b16 && !hn_op_check_dtype (op, "b", b, HN_DTYPE_F32, error)) ||
      !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error))
    return FALSE;
  /* Right-align to 4 dims. */
  gint64 sa[4], sb[4], so[4];
  for (int i = 0; i < 4; i++)
    {
      int ia = i - (4 - a->ndim), ib = i - (4 - b->ndim), io = i - (4 - out->ndim);
      sa[i] = ia >= 0 ? a->shape[ia] : 1;
      sb[i] = ib >= 0 ? b->shape[ib] : 1;
      so[i] = io >= 0 ? out->shape[io] : 1;
    }
  struct { guint32 n, a_off, b_off, o_off, op, shape[4], as[4], bs[4]; } pc = {
    (guint32) out->n, hn_eoff (a), hn_eoff (b), hn_eoff (out), (guint32) bop };
  guint32 stride_a = 1, stride_b = 1;
  for (int i = 3; i >= 0; i--)
    {
      gint64 want = MAX (sa[i], sb[i]);
      if ((sa[i] != 1 && sa[i] != want) || (sb[i] != 1 && sb[i] != want) || so[i] != want)
        {
          g_autofree char *da = hn_tensor_describe (a), *db = hn_tensor_describe (b), *dout = hn_tensor_describe (out);
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "binary op: %s %s and %s %s do not broadcast to out %s %s", a->name, da, b->name, db, out->name,
                       dout);
          return FALSE;
        }
      pc.shape[i] = (guint32) want;
      pc.as[i] = sa[i] == 1 ? 0 : stride_a;
      pc.bs[i] = sb[i] == 1 ? 0 : stride_b;
      stride_a *= (guint32) sa[i];
      stride_b *= (guint32) sb[i];
    }
  /* In place is fine only when out is exactly an operand (same offset). */
  if ((overlaps (out, a) && (out->offset != a->offset || out->n != a->n)) ||
      (overlaps (out, b) && (b16 || out->offset != b->offset || out->n != b->n)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "binary op: output %s partly overlaps an input",
                   out->name);
      return FALSE;
    }
  HnVkBinding bd[3] = { hn_bind (a, FALSE), hn_bind (b, FALSE), hn_bind (out, TRUE) };
  /* no broadcast (a residual add): element i of each, four at a time where they align */
  guint32 flat = a->n == out->n && b->n == out->n;
  if (flat && (pc.n | pc.a_off | pc.b_off | pc.o_off) % 4 == 0)
    flat = 2;
  if (b16 && flat != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "binary op: an f16 b (%s) needs a's shape and offsets and a size on 4 elements", b->name);
      return FALSE;
    }
  guint32 spec[2] = { flat, b16 };
  return hn_op_dispatch_elems (cmd, "binary", spec, 2, bd, 3, &pc, sizeof pc,
                               flat == 2 ? (guint64) out->n / 4 : (guint64) out->n, error);
}

gboolean
hn_op_add (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, GError **error)
{
  return hn_op_binary (cmd, out, a, b, HN_BINARY_ADD, error);
}

gboolean
hn_op_mul (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, GError **error)
{
  return hn_op_binary (cmd, out, a, b, HN_BINARY_MUL, error);
}

static gboolean
unary_dispatch (const char *op, HnCmd *cmd, HnTensor *out, HnTensor *in, guint32 act, float scale, float offset,
                GError **error)
{
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error))
    return FALSE;
  if (!hn_op_check_dtype (op, "in", in, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) ||
      !hn_op_check_count (op, "out", out, in->n, error))
    return FALSE;
  if (overlaps (out, in) && out->offset != in->offset)
    return check_no_overlap (op, out, in, error);
  struct { guint32 n, in_off, out_off, act; float scale, offset; } pc = {
    (guint32) in->n, hn_eoff (in), hn_eoff (out), act, scale, offset };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_elems (cmd, "unary", NULL, 0, bd, 2, &pc, sizeof pc, (guint64) in->n, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_scale (HnCmd *cmd, HnTensor *out, HnTensor *in, float scale, float offset, GError **error)
{
  return unary_dispatch ("scale", cmd, out, in, HN_ACT_IDENTITY, scale, offset, error);
}

gboolean
hn_op_clamp (HnCmd *cmd, HnTensor *out, HnTensor *in, float lo, float hi, GError **error)
{
  if (!(lo <= hi))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "clamp: lower bound %g above upper bound %g", lo, hi);
      return FALSE;
    }
  return unary_dispatch ("clamp", cmd, out, in, 100, lo, hi, error);
}

gboolean
hn_op_unary (HnCmd *cmd, HnTensor *out, HnTensor *in, HnActivation act, GError **error)
{
  if ((guint) act > HN_ACT_SOFTPLUS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "unary: unknown activation %d", (int) act);
      return FALSE;
    }
  return unary_dispatch (hn_activation_name (act), cmd, out, in, act, 1.0f, 0.0f, error);
}

static const struct { const char *name; HnActivation act; } act_names[] = {
  { "identity", HN_ACT_IDENTITY }, { "linear", HN_ACT_IDENTITY },
  { "silu", HN_ACT_SILU }, { "swish", HN_ACT_SILU },
  { "gelu", HN_ACT_GELU },
  { "gelu_tanh", HN_ACT_GELU_TANH }, { "gelu_new", HN_ACT_GELU_TANH }, { "gelu_pytorch_tanh", HN_ACT_GELU_TANH },
  { "gelu_fast", HN_ACT_GELU_TANH },
  { "relu", HN_ACT_RELU }, { "relu2", HN_ACT_RELU2 }, { "quick_gelu", HN_ACT_QUICK_GELU },
  { "sigmoid", HN_ACT_SIGMOID }, { "tanh", HN_ACT_TANH },
};

gboolean
hn_activation_from_string (const char *name, HnActivation *out)
{
  for (guint i = 0; name && i < G_N_ELEMENTS (act_names); i++)
    if (g_ascii_strcasecmp (name, act_names[i].name) == 0)
      {
        *out = act_names[i].act;
        return TRUE;
      }
  return FALSE;
}

const char *
hn_activation_name (HnActivation act)
{
  if (act == HN_ACT_SOFTPLUS) /* not in act_names: no hidden_act maps to it */
    return "softplus";
  for (guint i = 0; i < G_N_ELEMENTS (act_names); i++)
    if (act_names[i].act == act)
      return act_names[i].name;
  return "?";
}

gboolean
hn_op_glu (HnCmd *cmd, HnTensor *out, HnTensor *gate, HnTensor *up, HnActivation act, GError **error)
{
  const char *op = "glu";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, gate, error) ||
      !hn_op_check_ctx (op, cmd, up, error))
    return FALSE;
  /* an f16 out: the down projection's operand (hn_op_matmul_takes_f16), clamped to ±65504 (under
   * fp16 autocast rounded as autocast rounds) */
  gboolean out16 = out->dtype == HN_DTYPE_F16;
  if (!hn_op_check_dtype (op, "gate", gate, HN_DTYPE_F32, error) ||
      (!out16 && !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error)) ||
      (up && !hn_op_check_dtype (op, "up", up, HN_DTYPE_F32, error)))
    return FALSE;
  gint64 F = hn_tensor_cols (out), rows = hn_tensor_rows (out);
  gint64 gstride = up ? F : 2 * F;
  if (hn_tensor_cols (gate) != gstride || hn_tensor_rows (gate) != rows ||
      (up && (hn_tensor_cols (up) != F || hn_tensor_rows (up) != rows)))
    {
      g_autofree char *dg = hn_tensor_describe (gate), *dout = hn_tensor_describe (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "glu: gate %s %s does not fit out %s %s%s", gate->name, dg, out->name, dout,
                   up ? "" : " (fused gate_up must have twice out's last dim)");
      return FALSE;
    }
  if (!check_no_overlap (op, out, gate, error) || (up && !check_no_overlap (op, out, up, error)))
    return FALSE;
  HnTensor *u = up ? up : gate;
  struct { guint32 n, F, g_off, u_off, o_off, g_stride, u_stride, act; } pc = {
    (guint32) out->n, (guint32) F, hn_eoff (gate), hn_eoff (u) + (up ? 0 : (guint32) F), hn_eoff (out),
    (guint32) gstride, (guint32) gstride, (guint32) act };
  HnVkBinding bd[3] = { hn_bind (gate, FALSE), hn_bind (u, FALSE), hn_bind (out, TRUE) };
  /* four elements per invocation when every row starts 16-byte aligned */
  guint32 vec = F % 4 == 0 && pc.g_off % 4 == 0 && pc.u_off % 4 == 0 && pc.o_off % 4 == 0 && gstride % 4 == 0 ? 4 : 1;
  if (out16 && vec == 1 && (out->n % 2 != 0 || pc.o_off % 2 != 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "glu: an f16 out %s needs an even element count and an even offset", out->name);
      return FALSE;
    }
  pc.n /= vec;
  pc.F /= vec;
  if (out16 && vec == 1)
    pc.n /= 2; /* one pair per invocation */
  /* as the down projection would round its own copy: autocast's rounding under fp16 autocast, else clamped */
  guint32 spec[2] = { vec, out16 ? hn_op_f16_rounding (cmd) : 0u };
  return hn_op_dispatch_elems (cmd, "glu", spec, 2, bd, 3, &pc, sizeof pc, (guint64) pc.n, error);
}

gboolean
hn_op_fill (HnCmd *cmd, HnTensor *out, float value, GError **error)
{
  if (!hn_op_check_ctx ("fill", cmd, out, error))
    return FALSE;
  guint32 bits;
  if (out->dtype == HN_DTYPE_F32)
    memcpy (&bits, &value, 4);
  else if (out->dtype == HN_DTYPE_I32)
    {
      gint32 v = (gint32) value;
      memcpy (&bits, &v, 4);
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "fill: tensor %s is %s; f32 or i32 is supported", out->name,
                   hn_dtype_name (out->dtype));
      return FALSE;
    }
  struct { guint32 n, off, value; } pc = { (guint32) out->n, hn_eoff (out), bits };
  HnVkBinding bd[1] = { hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "fill", NULL, 0, bd, 1, &pc, sizeof pc, (guint64) out->n, error);
}

/* ------------------------------------------------------------ gather */

gboolean
hn_op_embedding (HnCmd *cmd, HnTensor *out, HnTensor *table, HnTensor *ids, GError **error)
{
  const char *op = "embedding";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, table, error) ||
      !hn_op_check_ctx (op, cmd, ids, error))
    return FALSE;
  if (!hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "ids", ids, HN_DTYPE_I32, error) ||
      (!hn_dtype_is_ggml (table->dtype) && !hn_op_check_float_storage (op, "table", table, error)))
    return FALSE;
  if (table->ndim != 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "embedding: table %s must be 2-D [vocab, dim]", table->name);
      return FALSE;
    }
  gint64 V = table->shape[0], D = table->shape[1];
  if (!hn_op_check_count (op, "out", out, ids->n * D, error) || !check_no_overlap (op, out, table, error))
    return FALSE;
  if (hn_dtype_is_ggml (table->dtype))
    return hn_op_embedding_gguf_dispatch (cmd, out, table, ids, error);
  struct { guint32 n, D, V, t_off, i_off, o_off; } pc = {
    (guint32) out->n, (guint32) D, (guint32) V, hn_eoff (table), hn_eoff (ids), hn_eoff (out) };
  guint32 spec[1] = { hn_op_float_code (table->dtype) };
  HnVkBinding bd[3] = { hn_bind (table, FALSE), hn_bind (ids, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "embedding", spec, 1, bd, 3, &pc, sizeof pc, (guint64) out->n, error);
}

/* ------------------------------------------------------------ layout */

gboolean
hn_op_copy (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error)
{
  const char *op = "copy";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !hn_op_check_count (op, "out", out, in->n, error) || !check_no_overlap (op, out, in, error))
    return FALSE;
  gboolean in_f = in->dtype == HN_DTYPE_F32 || in->dtype == HN_DTYPE_F16 || in->dtype == HN_DTYPE_BF16;
  gboolean out_f = out->dtype == HN_DTYPE_F32 || out->dtype == HN_DTYPE_F16 || out->dtype == HN_DTYPE_BF16;
  guint32 in_dt = hn_op_float_code (in->dtype), out_dt = hn_op_float_code (out->dtype);
  if (in->dtype == HN_DTYPE_I32 && out->dtype == HN_DTYPE_I32)
    in_dt = out_dt = 0; /* raw 32-bit words */
  else if (!(in_f && out_f))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "copy: %s -> %s (tensors %s -> %s) is not supported",
                   hn_dtype_name (in->dtype), hn_dtype_name (out->dtype), in->name, out->name);
      return FALSE;
    }
  if (out_dt != 0 && (hn_eoff (out) & 1))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "copy: 16-bit output %s starts at an odd element; views of 16-bit tensors must start at even elements",
                   out->name);
      return FALSE;
    }
  struct { guint32 n, in_off, out_off, in_dt, out_dt; } pc = { (guint32) in->n, hn_eoff (in), hn_eoff (out), in_dt, out_dt };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  guint64 invocations = out_dt == 0 ? (guint64) in->n : ((guint64) in->n + 1) / 2;
  return hn_op_dispatch_elems (cmd, "copy", NULL, 0, bd, 2, &pc, sizeof pc, invocations, error);
}

gboolean
hn_op_kv_store (HnCmd *cmd, HnTensor *k_cache, HnTensor *v_cache, HnTensor *k, HnTensor *v, gint64 row0,
                HnTensor *dyn_row, GError **error)
{
  const char *op = "kv_store";
  HnTensor *all[5] = { k_cache, v_cache, k, v, dyn_row };
  for (int i = 0; i < 5; i++)
    if (!hn_op_check_ctx (op, cmd, all[i], error))
      return FALSE;
  if (!hn_op_check_dtype (op, "k_cache", k_cache, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "v_cache", v_cache, HN_DTYPE_F32, error) ||
      !hn_op_check_dtype (op, "k", k, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "v", v, HN_DTYPE_F32, error) ||
      (dyn_row && (!hn_op_check_dtype (op, "dyn_row", dyn_row, HN_DTYPE_I32, error) ||
                   !hn_op_check_count (op, "dyn_row", dyn_row, 1, error))))
    return FALSE;
  gint64 n_ctx = k_cache->shape[0], Wk = k_cache->n / n_ctx, T = Wk > 0 ? k->n / Wk : 0;
  gint64 Wv = v_cache->shape[0] == n_ctx ? v_cache->n / n_ctx : 0, W = MAX (Wk, Wv);
  if (Wv < 1 || v_cache->n != n_ctx * Wv || T * Wk != k->n || v->n != T * Wv || T < 1 ||
      (!dyn_row && (row0 < 0 || row0 + T > n_ctx)))
    {
      g_autofree char *dc = hn_tensor_describe (k_cache), *dk = hn_tensor_describe (k);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "kv_store: k %s %s and v do not fit rows from %" G_GINT64_FORMAT " of cache %s %s (and its v twin)",
                   k->name, dk, row0, k_cache->name, dc);
      return FALSE;
    }
  if (!check_no_overlap (op, k_cache, k, error) || !check_no_overlap (op, k_cache, v, error) ||
      !check_no_overlap (op, v_cache, k, error) || !check_no_overlap (op, v_cache, v, error) ||
      !check_no_overlap (op, k_cache, v_cache, error))
    return FALSE;
  struct { guint32 n, W, n_ctx, row0, dyn, dyn_off, k_off, v_off, kc_off, vc_off, Wk, Wv; } pc = {
    (guint32) (T * W), (guint32) W, (guint32) n_ctx, dyn_row ? 0 : (guint32) row0, dyn_row != NULL,
    dyn_row ? hn_eoff (dyn_row) : 0, hn_eoff (k), hn_eoff (v), hn_eoff (k_cache), hn_eoff (v_cache), (guint32) Wk,
    (guint32) Wv };
  HnVkBinding bd[5] = { hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (k_cache, TRUE), hn_bind (v_cache, TRUE),
                        hn_bind (dyn_row ? dyn_row : k, FALSE) };
  return hn_op_dispatch_elems (cmd, "kv_store", NULL, 0, bd, 5, &pc, sizeof pc, (guint64) pc.n, error);
}

typedef struct {
  guint32 n, in_off, out_off;
  guint32 shape[4], in_stride[4], out_stride[4];
} StridedPush;

static gboolean
check_word_dtype (const char *op, HnTensor *t, GError **error)
{
  if (t->dtype != HN_DTYPE_F32 && t->dtype != HN_DTYPE_I32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s is %s; f32 or i32 is supported", op, t->name,
                   hn_dtype_name (t->dtype));
      return FALSE;
    }
  return TRUE;
}

/* Contiguous strides of t, right-aligned to 4 dims. */
static void
contiguous_strides (HnTensor *t, guint32 shape[4], guint32 stride[4])
{
  guint32 s = 1;
  for (int i = 3; i >= 0; i--)
    {
      int d = i - (4 - t->ndim);
      shape[i] = d >= 0 ? (guint32) t->shape[d] : 1;
      stride[i] = s;
      s *= shape[i];
    }
}

static gboolean
strided_dispatch (HnCmd *cmd, HnTensor *out, HnTensor *in, StridedPush *pc, GError **error)
{
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_elems (cmd, "copy_strided", NULL, 0, bd, 2, pc, sizeof *pc, pc->n, error);
}

gboolean
hn_op_permute (HnCmd *cmd, HnTensor *out, HnTensor *in, const int *perm, GError **error)
{
  const char *op = "permute";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !check_word_dtype (op, in, error) || !hn_op_check_dtype (op, "out", out, in->dtype, error) ||
      !check_no_overlap (op, out, in, error))
    return FALSE;
  int nd = in->ndim;
  guint seen = 0;
  for (int i = 0; i < nd; i++)
    {
      if (perm[i] < 0 || perm[i] >= nd || (seen & (1u << perm[i])) || out->ndim != nd ||
          out->shape[i] != in->shape[perm[i]])
        {
          g_autofree char *di = hn_tensor_describe (in), *dout = hn_tensor_describe (out);
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "permute: bad permutation or out shape (in %s %s, out %s %s)", in->name, di, out->name, dout);
          return FALSE;
        }
      seen |= 1u << perm[i];
    }
  guint32 in_shape[4], in_stride[4], out_shape[4], out_stride[4];
  contiguous_strides (in, in_shape, in_stride);
  contiguous_strides (out, out_shape, out_stride);
  StridedPush pc = { (guint32) in->n, hn_eoff (in), hn_eoff (out) };
  /* Walk out's index space: out dim i reads in dim perm[i]. */
  for (int i = 0; i < 4; i++)
    {
      int od = i - (4 - nd);
      pc.shape[i] = out_shape[i];
      pc.out_stride[i] = out_stride[i];
      pc.in_stride[i] = od >= 0 ? in_stride[perm[od] + (4 - nd)] : 0;
    }
  return strided_dispatch (cmd, out, in, &pc, error);
}

gboolean
hn_op_transpose (HnCmd *cmd, HnTensor *out, HnTensor *in, int dim0, int dim1, GError **error)
{
  int perm[HN_MAX_DIMS] = { 0, 1, 2, 3 };
  if (dim0 < 0 || dim1 < 0 || dim0 >= in->ndim || dim1 >= in->ndim)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "transpose: dims %d, %d of %d-D tensor %s", dim0, dim1,
                   in->ndim, in->name);
      return FALSE;
    }
  perm[dim0] = dim1;
  perm[dim1] = dim0;
  return hn_op_permute (cmd, out, in, perm, error);
}

/* Copies `in` into the region of `out` that starts at `start` along `dim`
 * (out_is_big) or copies the region of `in` at `start` into `out`. */
static gboolean
slice_copy (const char *op, HnCmd *cmd, HnTensor *out, HnTensor *in, int dim, gint64 start, gboolean into_out,
            GError **error)
{
  HnTensor *small = into_out ? in : out, *big = into_out ? out : in;
  if (dim < 0 || dim >= big->ndim || small->ndim != big->ndim)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dim %d does not fit tensors %s and %s", op, dim,
                   in->name, out->name);
      return FALSE;
    }
  for (int i = 0; i < big->ndim; i++)
    if ((i == dim && (start < 0 || start + small->shape[i] > big->shape[i])) || (i != dim && small->shape[i] != big->shape[i]))
      {
        g_autofree char *ds = hn_tensor_describe (small), *db = hn_tensor_describe (big);
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "%s: %s %s does not fit at %" G_GINT64_FORMAT " along dim %d of %s %s", op, small->name, ds,
                     start, dim, big->name, db);
        return FALSE;
      }
  guint32 s_shape[4], s_stride[4], b_shape[4], b_stride[4];
  contiguous_strides (small, s_shape, s_stride);
  contiguous_strides (big, b_shape, b_stride);
  int d4 = dim + (4 - big->ndim);
  guint32 big_off = hn_eoff (big) + (guint32) start * b_stride[d4];
  StridedPush pc = { (guint32) small->n, into_out ? hn_eoff (in) : big_off, into_out ? big_off : hn_eoff (out) };
  for (int i = 0; i < 4; i++)
    {
      pc.shape[i] = s_shape[i];
      pc.in_stride[i] = into_out ? s_stride[i] : b_stride[i];
      pc.out_stride[i] = into_out ? b_stride[i] : s_stride[i];
    }
  return strided_dispatch (cmd, out, in, &pc, error);
}

gboolean
hn_op_slice (HnCmd *cmd, HnTensor *out, HnTensor *in, int dim, gint64 start, GError **error)
{
  const char *op = "slice";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !check_word_dtype (op, in, error) || !hn_op_check_dtype (op, "out", out, in->dtype, error) ||
      !check_no_overlap (op, out, in, error))
    return FALSE;
  return slice_copy (op, cmd, out, in, dim, start, FALSE, error);
}

gboolean
hn_op_concat (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, int dim, GError **error)
{
  const char *op = "concat";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, a, error) ||
      !hn_op_check_ctx (op, cmd, b, error) || !check_word_dtype (op, out, error) ||
      !hn_op_check_dtype (op, "a", a, out->dtype, error) || !hn_op_check_dtype (op, "b", b, out->dtype, error) ||
      !check_no_overlap (op, out, a, error) || !check_no_overlap (op, out, b, error))
    return FALSE;
  if (dim < 0 || dim >= out->ndim || a->shape[dim] + b->shape[dim] != out->shape[dim])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "concat: %s and %s do not add up to %s along dim %d",
                   a->name, b->name, out->name, dim);
      return FALSE;
    }
  return slice_copy (op, cmd, out, a, dim, 0, TRUE, error) &&
         slice_copy (op, cmd, out, b, dim, a->shape[dim], TRUE, error);
}

/* ------------------------------------------------------------ reductions */

gboolean
hn_op_reduce (HnCmd *cmd, HnTensor *out, HnTensor *in, HnReduceOp rop, GError **error)
{
  const char *op = "reduce";
  if (!hn_op_check_ctx (op, cmd, out, error) || !hn_op_check_ctx (op, cmd, in, error) ||
      !hn_op_check_dtype (op, "in", in, HN_DTYPE_F32, error) || !hn_op_check_dtype (op, "out", out, HN_DTYPE_F32, error) ||
      !hn_op_check_count (op, "out", out, hn_tensor_rows (in), error) || !check_no_overlap (op, out, in, error))
    return FALSE;
  struct { guint32 rows, cols, x_off, o_off, op; } pc = {
    (guint32) hn_tensor_rows (in), (guint32) hn_tensor_cols (in), hn_eoff (in), hn_eoff (out), (guint32) rop };
  HnVkBinding bd[2] = { hn_bind (in, FALSE), hn_bind (out, TRUE) };
  return hn_op_dispatch_rows (cmd, "reduce", NULL, 0, bd, 2, &pc, sizeof pc, pc.rows, error);
}

gboolean
hn_op_tensor_core_peak (HnCmd *cmd, HnTensor *out, guint32 workgroups, guint32 iters, double *flops, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  const HnVkDeviceInfo *di = hn_vk_context_get_device_info (ctx);
  if (!hn_vk_context_has_coopmat (ctx))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "mma-peak: %s has no cooperative matrix", di->name);
      return FALSE;
    }
  guint32 nt = 256;
  while (nt > di->max_workgroup_invocations && nt > di->subgroup_size)
    nt /= 2;
  guint32 subgroups = MAX (nt / MAX (di->subgroup_size, 1), 1);
  if ((guint64) out->n < (guint64) workgroups * subgroups * 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mma-peak: the output holds %" G_GINT64_FORMAT " floats",
                   out->n);
      return FALSE;
    }
  guint32 spec[2] = { nt, iters };
  float x = 0.001f;
  HnVkBinding b = hn_bind (out, TRUE);
  *flops = (double) workgroups * subgroups * iters * 8 * 2.0 * 16 * 16 * 16;
  return hn_cmd_dispatch (cmd, "mma_peak", spec, 2, &b, 1, &x, sizeof x, workgroups, 1, 1, error);
}

gboolean
hn_op_tensor_core_peak_cm2 (HnCmd *cmd, HnTensor *out, guint32 workgroups, guint32 iters, guint32 bm, guint32 bn,
                            guint32 bk, gboolean shared, double *flops, GError **error)
{
  HnVkContext *ctx = hn_cmd_get_context (cmd);
  guint32 nt = 0;
  if (!hn_vk_context_has_coopmat2 (ctx, &nt))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "mma-peak-cm2: %s has no VK_NV_cooperative_matrix2",
                   hn_vk_context_get_device_info (ctx)->name);
      return FALSE;
    }
  if (bm % 16 || bn % 16 || bk % 16 || bm == 0 || bn == 0 || bk == 0 || (gsize) (bm + bn) * bk * 2 > 48 * 1024)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mma-peak-cm2: tile %ux%ux%u is not multiples of 16 "
                   "within 48 KiB of shared memory", bm, bn, bk);
      return FALSE;
    }
  guint32 spec[6] = { nt, iters, bm, bn, bk, shared ? 1 : 0 };
  float x = 0.001f;
  HnVkBinding b = hn_bind (out, TRUE);
  *flops = (double) workgroups * iters * 2.0 * bm * bn * bk;
  return hn_cmd_dispatch (cmd, "mma_peak_cm2", spec, 6, &b, 1, &x, sizeof x, workgroups, 1, 1, error);
}
