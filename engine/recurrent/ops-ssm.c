/* The state-space ops (ops-ssm.h): causal depthwise conv1d with a carried
 * state and Mamba's selective scan, forward and backward. */
#include "recurrent/ops-ssm.h"
#include "tensor/hn-op-kit.h"

/* [B, T, C] or [T, C] (B = 1). */
static gboolean
btc_of (const char *op, const char *role, HnTensor *t, gint64 *B, gint64 *T, gint64 *C, GError **error)
{
  if (t->ndim == 3)
    {
      *B = t->shape[0];
      *T = t->shape[1];
      *C = t->shape[2];
      return TRUE;
    }
  if (t->ndim == 2)
    {
      *B = 1;
      *T = t->shape[0];
      *C = t->shape[1];
      return TRUE;
    }
  g_autofree char *d = hn_tensor_describe (t);
  g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s %s must be [B, T, C] or [T, C]", op, role, d);
  return FALSE;
}

static gboolean
f32_count (const char *op, const char *role, HnCmd *cmd, HnTensor *t, gint64 n, GError **error)
{
  return !t || (hn_op_check_ctx (op, cmd, t, error) && hn_op_check_dtype (op, role, t, HN_DTYPE_F32, error) &&
                hn_op_check_count (op, role, t, n, error));
}

static gboolean
fits_u32 (const char *op, gint64 n, GError **error)
{
  if (n >= 0 && n <= G_MAXUINT32)
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %" G_GINT64_FORMAT " elements do not fit the kernel's 32-bit indices",
               op, n);
  return FALSE;
}

gboolean
hn_op_conv1d_causal (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *state,
                     HnActivation act, GError **error)
{
  const char *op = "conv1d_causal";
  gint64 B, T, C;
  if (!hn_op_check_ctx (op, cmd, x, error) || !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error) ||
      !btc_of (op, "x", x, &B, &T, &C, error))
    return FALSE;
  if (!hn_op_check_ctx (op, cmd, w, error) || !hn_op_check_dtype (op, "weight", w, HN_DTYPE_F32, error))
    return FALSE;
  gint64 K = w->n / MAX (C, 1);
  if (C < 1 || K < 1 || K > HN_CONV1D_MAX_KERNEL || K * C != w->n)
    {
      g_autofree char *d = hn_tensor_describe (w);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: weight %s %s must be [C = %" G_GINT64_FORMAT ", K] with 1 <= K <= %d", op, w->name, d, C,
                   HN_CONV1D_MAX_KERNEL);
      return FALSE;
    }
  if (!f32_count (op, "out", cmd, out, x->n, error) || !f32_count (op, "bias", cmd, bias, C, error) ||
      !f32_count (op, "state", cmd, state, B * (K - 1) * C, error) || !fits_u32 (op, x->n, error))
    return FALSE;
  if (state && K < 2)
    state = NULL; /* nothing to carry */
  if (out->buf == x->buf && out->offset < x->offset + hn_tensor_nbytes (x) &&
      x->offset < out->offset + hn_tensor_nbytes (out))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: out %s overlaps x %s", op, out->name, x->name);
      return FALSE;
    }
  struct { guint32 B, T, C, x_off, w_off, b_off, s_off, o_off, has_bias, has_state, act; } pc = {
    (guint32) B, (guint32) T, (guint32) C, hn_eoff (x), hn_eoff (w), bias ? hn_eoff (bias) : 0,
    state ? hn_eoff (state) : 0, hn_eoff (out), bias != NULL, state != NULL, (guint32) act };
  HnVkBinding bd[5] = { hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : w, FALSE),
                        hn_bind (state ? state : out, state != NULL), hn_bind (out, TRUE) };
  guint32 spec[1] = { (guint32) K };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "conv1d_causal", spec, 1, bd, 5, &pc, sizeof pc, (guint64) ((B * C + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_conv1d_causal_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *dbias, HnTensor *dy, HnTensor *x,
                          HnTensor *w, HnTensor *bias, HnActivation act, HnBackFlags flags, GError **error)
{
  const char *op = "conv1d_causal_back";
  gint64 B, T, C;
  if (!hn_op_check_ctx (op, cmd, x, error) || !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error) ||
      !btc_of (op, "x", x, &B, &T, &C, error) || !f32_count (op, "weight", cmd, w, w ? w->n : 0, error))
    return FALSE;
  gint64 K = w->n / MAX (C, 1);
  if (C < 1 || K < 1 || K > HN_CONV1D_MAX_KERNEL || K * C != w->n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: weight %s must be [C, K], 1 <= K <= %d", op,
                   w->name, HN_CONV1D_MAX_KERNEL);
      return FALSE;
    }
  if (!f32_count (op, "dy", cmd, dy, x->n, error) || !f32_count (op, "dx", cmd, dx, x->n, error) ||
      !f32_count (op, "dw", cmd, dw, w->n, error) || !f32_count (op, "bias", cmd, bias, C, error) ||
      !f32_count (op, "dbias", cmd, dbias, C, error) || !fits_u32 (op, x->n, error))
    return FALSE;
  guint32 fl = (bias ? 1u : 0u) | (dx ? 2u : 0u) | ((flags & HN_BACK_ACCUMULATE) ? 4u : 0u) | (dw ? 8u : 0u) |
               (dbias ? 16u : 0u);
  struct { guint32 B, T, C, dy_off, x_off, w_off, b_off, dx_off, dw_off, db_off, flags, act; } pc = {
    (guint32) B, (guint32) T, (guint32) C, hn_eoff (dy), hn_eoff (x), hn_eoff (w), bias ? hn_eoff (bias) : 0,
    dx ? hn_eoff (dx) : 0, dw ? hn_eoff (dw) : 0, dbias ? hn_eoff (dbias) : 0, fl, (guint32) act };
  HnVkBinding bd[7] = { hn_bind (dy, FALSE), hn_bind (x, FALSE), hn_bind (w, FALSE), hn_bind (bias ? bias : w, FALSE),
                        hn_bind (dx ? dx : dy, dx != NULL), hn_bind (dw ? dw : dy, dw != NULL),
                        hn_bind (dbias ? dbias : dy, dbias != NULL) };
  guint32 spec[1] = { (guint32) K };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "conv1d_causal_back", spec, 1, bd, 7, &pc, sizeof pc, (guint64) ((C + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

#define SSM_D 1u
#define SSM_Z 2u
#define SSM_DT_BIAS 4u
#define SSM_STATE 8u
#define SSM_SOFTPLUS 16u
#define SSM_A_HEAD 32u
#define SSM_LIMIT 64u

/* The scan's layout, from x, B and A_log (HnSsmScanParams). */
typedef struct {
  gint64 nb, T, I, N, hd, H, G;
  gboolean a_head;
} ScanShape;

static gboolean
scan_check (const char *op, HnCmd *cmd, HnTensor *x, HnTensor *dt, HnTensor *A_log, HnTensor *Bm, HnTensor *Cm,
            const HnSsmScanParams *p, ScanShape *s, GError **error)
{
  if (!hn_op_check_ctx (op, cmd, x, error) || !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error) ||
      !btc_of (op, "x", x, &s->nb, &s->T, &s->I, error) || !f32_count (op, "A_log", cmd, A_log, A_log ? A_log->n : 0, error) ||
      !f32_count (op, "B", cmd, Bm, Bm ? Bm->n : 0, error))
    return FALSE;
  s->hd = p->head_dim > 1 ? p->head_dim : 1;
  s->G = p->n_groups > 1 ? p->n_groups : 1;
  s->H = s->I / s->hd;
  if (s->I < 1 || s->T < 1 || s->I % s->hd || s->H % s->G)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: %" G_GINT64_FORMAT " channels do not split into heads of %" G_GINT64_FORMAT " in %" G_GINT64_FORMAT
                   " groups", op, s->I, s->hd, s->G);
      return FALSE;
    }
  gint64 btg = s->nb * s->T * s->G;
  s->N = Bm->n / MAX (btg, 1);
  if (s->N < 1 || s->N > HN_SSM_MAX_STATE || s->N * btg != Bm->n)
    {
      g_autofree char *d = hn_tensor_describe (Bm);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: B %s %s must be [B, T, G = %" G_GINT64_FORMAT ", N] with 1 <= N <= %d", op, Bm->name, d, s->G,
                   HN_SSM_MAX_STATE);
      return FALSE;
    }
  s->a_head = A_log->n == s->H && s->hd > 1;
  if (!s->a_head && A_log->n != s->H * s->N)
    {
      g_autofree char *d = hn_tensor_describe (A_log);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: A_log %s %s must be [H = %" G_GINT64_FORMAT ", N = %" G_GINT64_FORMAT "]%s", op, A_log->name, d,
                   s->H, s->N, s->hd > 1 ? " or [H]" : "");
      return FALSE;
    }
  return f32_count (op, "dt", cmd, dt, s->nb * s->T * s->H, error) && f32_count (op, "C", cmd, Cm, Bm->n, error) &&
         f32_count (op, "D", cmd, p->D, s->H, error) && f32_count (op, "z", cmd, p->z, x->n, error) &&
         f32_count (op, "dt_bias", cmd, p->dt_bias, s->H, error) &&
         f32_count (op, "state", cmd, p->state, s->nb * s->I * s->N, error) && fits_u32 (op, x->n * s->N * 3, error);
}

static guint32
scan_flags (const HnSsmScanParams *p, const ScanShape *s)
{
  return (p->D ? SSM_D : 0) | (p->z ? SSM_Z : 0) | (p->dt_bias ? SSM_DT_BIAS : 0) | (p->state ? SSM_STATE : 0) |
         (p->dt_softplus ? SSM_SOFTPLUS : 0) | (s->a_head ? SSM_A_HEAD : 0) | (p->dt_limit ? SSM_LIMIT : 0);
}

gboolean
hn_op_ssm_scan (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *dt, HnTensor *A_log, HnTensor *Bm, HnTensor *Cm,
                const HnSsmScanParams *p, GError **error)
{
  const char *op = "ssm_scan";
  ScanShape s;
  if (!scan_check (op, cmd, x, dt, A_log, Bm, Cm, p, &s, error) || !f32_count (op, "y", cmd, y, x->n, error))
    return FALSE;
  struct {
    guint32 nb, T, I, x_off, dt_off, a_off, b_off, c_off, d_off, z_off, dtb_off, s_off, y_off, flags, hd, G;
    float dt_min, dt_max;
  } pc = { (guint32) s.nb, (guint32) s.T, (guint32) s.I, hn_eoff (x), hn_eoff (dt), hn_eoff (A_log), hn_eoff (Bm),
           hn_eoff (Cm), p->D ? hn_eoff (p->D) : 0, p->z ? hn_eoff (p->z) : 0, p->dt_bias ? hn_eoff (p->dt_bias) : 0,
           p->state ? hn_eoff (p->state) : 0, hn_eoff (y), scan_flags (p, &s), (guint32) s.hd, (guint32) s.G,
           p->dt_min, p->dt_max };
  HnVkBinding bd[10] = { hn_bind (x, FALSE), hn_bind (dt, FALSE), hn_bind (A_log, FALSE), hn_bind (Bm, FALSE),
                         hn_bind (Cm, FALSE), hn_bind (p->D ? p->D : x, FALSE), hn_bind (p->z ? p->z : x, FALSE),
                         hn_bind (p->dt_bias ? p->dt_bias : x, FALSE),
                         hn_bind (p->state ? p->state : y, p->state != NULL), hn_bind (y, TRUE) };
  guint32 spec[1] = { (guint32) s.N };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "ssm_scan", spec, 1, bd, 10, &pc, sizeof pc, (guint64) ((s.nb * s.I + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gint64
hn_ssm_scan_back_scratch (gint64 B, gint64 T, gint64 I, gint64 N)
{
  return 3 * B * T * I * N;
}

/* Elements [off, off + n) of a tensor as [rows, cols]. */
static HnTensor *
scratch_part (HnTensor *s, gint64 off, gint64 rows, gint64 cols, GError **error)
{
  g_autoptr (HnTensor) flat = hn_tensor_reshape (s, 1, (gint64[]) { s->n }, error);
  if (!flat)
    return NULL;
  g_autoptr (HnTensor) part = hn_tensor_view_rows (flat, off, rows * cols, error);
  if (!part)
    return NULL;
  return hn_tensor_reshape (part, 2, (gint64[]) { rows, cols }, error);
}

gboolean
hn_op_ssm_scan_back (HnCmd *cmd, HnTensor *dx, HnTensor *ddt, HnTensor *dA_log, HnTensor *dB, HnTensor *dC,
                     HnTensor *dD, HnTensor *dz, HnTensor *ddt_bias, HnTensor *dy, HnTensor *x, HnTensor *dt,
                     HnTensor *A_log, HnTensor *Bm, HnTensor *Cm, const HnSsmScanParams *p, HnTensor *scratch,
                     GError **error)
{
  const char *op = "ssm_scan_back";
  ScanShape s;
  if (!scan_check (op, cmd, x, dt, A_log, Bm, Cm, p, &s, error))
    return FALSE;
  if (p->state)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: the backward runs from a zero state (no carried state)",
                   op);
      return FALSE;
    }
  if (!dx || !ddt || !dB || !dC || !dA_log || !dy || !scratch)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dy, dx, ddt, dA_log, dB, dC and scratch are required",
                   op);
      return FALSE;
    }
  if ((dz && !p->z) || (dD && !p->D) || (ddt_bias && !p->dt_bias))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dz / dD / ddt_bias without z / D / dt_bias", op);
      return FALSE;
    }
  gint64 need = hn_ssm_scan_back_scratch (s.nb, s.T, s.I, s.N);
  if (!f32_count (op, "dy", cmd, dy, x->n, error) || !f32_count (op, "dx", cmd, dx, x->n, error) ||
      !f32_count (op, "ddt", cmd, ddt, dt->n, error) || !f32_count (op, "dA_log", cmd, dA_log, A_log->n, error) ||
      !f32_count (op, "dB", cmd, dB, Bm->n, error) || !f32_count (op, "dC", cmd, dC, Bm->n, error) ||
      !f32_count (op, "dD", cmd, dD, s.H, error) || !f32_count (op, "dz", cmd, dz, x->n, error) ||
      !f32_count (op, "ddt_bias", cmd, ddt_bias, s.H, error) || !hn_op_check_ctx (op, cmd, scratch, error) ||
      !hn_op_check_dtype (op, "scratch", scratch, HN_DTYPE_F32, error))
    return FALSE;
  if (scratch->n < need)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: scratch %s has %" G_GINT64_FORMAT " elements, %" G_GINT64_FORMAT " needed", op, scratch->name,
                   scratch->n, need);
      return FALSE;
    }
  guint32 grads = (dz ? 1u : 0u) | (dD ? 2u : 0u) | (ddt_bias ? 4u : 0u);
  struct {
    guint32 nb, T, I, dy_off, x_off, dt_off, a_off, b_off, c_off, d_off, z_off, dtb_off, sc_off, dx_off, ddt_off,
      da_off, ddv_off, dz_off, ddtb_off, flags, grads, hd, G;
    float dt_min, dt_max;
  } pc = { (guint32) s.nb, (guint32) s.T, (guint32) s.I, hn_eoff (dy), hn_eoff (x), hn_eoff (dt), hn_eoff (A_log),
           hn_eoff (Bm), hn_eoff (Cm), p->D ? hn_eoff (p->D) : 0, p->z ? hn_eoff (p->z) : 0,
           p->dt_bias ? hn_eoff (p->dt_bias) : 0, hn_eoff (scratch), hn_eoff (dx), hn_eoff (ddt), hn_eoff (dA_log),
           dD ? hn_eoff (dD) : 0, dz ? hn_eoff (dz) : 0, ddt_bias ? hn_eoff (ddt_bias) : 0, scan_flags (p, &s), grads,
           (guint32) s.hd, (guint32) s.G, p->dt_min, p->dt_max };
  HnVkBinding bd[16] = {
    hn_bind (dy, FALSE), hn_bind (x, FALSE), hn_bind (dt, FALSE), hn_bind (A_log, FALSE), hn_bind (Bm, FALSE),
    hn_bind (Cm, FALSE), hn_bind (p->D ? p->D : x, FALSE), hn_bind (p->z ? p->z : x, FALSE),
    hn_bind (p->dt_bias ? p->dt_bias : x, FALSE), hn_bind (scratch, TRUE), hn_bind (dx, TRUE), hn_bind (ddt, TRUE),
    hn_bind (dA_log, TRUE), hn_bind (dD ? dD : dx, dD != NULL), hn_bind (dz ? dz : dx, dz != NULL),
    hn_bind (ddt_bias ? ddt_bias : dx, ddt_bias != NULL) };
  guint32 spec[1] = { (guint32) s.N };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "ssm_scan_back", spec, 1, bd, 16, &pc, sizeof pc, (guint64) ((s.H + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  if (!ok)
    return FALSE;
  /* dB, dC = the per-channel parts summed over each group's channels */
  gint64 part = s.nb * s.T * s.I * s.N, rows = Bm->n, cols = s.I / s.G;
  g_autoptr (HnTensor) pb = scratch_part (scratch, part, rows, cols, error);
  g_autoptr (HnTensor) pcn = pb ? scratch_part (scratch, 2 * part, rows, cols, error) : NULL;
  if (!pcn)
    return FALSE;
  return hn_op_reduce (cmd, dB, pb, HN_REDUCE_SUM, error) && hn_op_reduce (cmd, dC, pcn, HN_REDUCE_SUM, error);
}

gboolean
hn_op_wkv4 (HnCmd *cmd, HnTensor *y, HnTensor *k, HnTensor *v, HnTensor *time_decay, HnTensor *time_first,
            HnTensor *state, GError **error)
{
  const char *op = "wkv4";
  gint64 B, T, A;
  if (!hn_op_check_ctx (op, cmd, k, error) || !hn_op_check_dtype (op, "k", k, HN_DTYPE_F32, error) ||
      !btc_of (op, "k", k, &B, &T, &A, error))
    return FALSE;
  if (!f32_count (op, "v", cmd, v, k->n, error) || !f32_count (op, "y", cmd, y, k->n, error) ||
      !f32_count (op, "time_decay", cmd, time_decay, A, error) ||
      !f32_count (op, "time_first", cmd, time_first, A, error) || !f32_count (op, "state", cmd, state, B * 3 * A, error) ||
      !fits_u32 (op, k->n, error))
    return FALSE;
  if (!y || !v || !time_decay || !time_first)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: y, v, time_decay and time_first are required", op);
      return FALSE;
    }
  HnTensor *ins[2] = { k, v };
  for (int j = 0; j < 2; j++)
    if (y->buf == ins[j]->buf && y->offset < ins[j]->offset + hn_tensor_nbytes (ins[j]) &&
        ins[j]->offset < y->offset + hn_tensor_nbytes (y))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: y %s overlaps %s", op, y->name, ins[j]->name);
        return FALSE;
      }
  struct { guint32 B, T, A, k_off, v_off, td_off, tf_off, s_off, y_off, has_state; } pc = {
    (guint32) B, (guint32) T, (guint32) A, hn_eoff (k), hn_eoff (v), hn_eoff (time_decay), hn_eoff (time_first),
    state ? hn_eoff (state) : 0, hn_eoff (y), state != NULL };
  HnVkBinding bd[6] = { hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (time_decay, FALSE),
                        hn_bind (time_first, FALSE), hn_bind (state ? state : y, state != NULL), hn_bind (y, TRUE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "wkv4", NULL, 0, bd, 6, &pc, sizeof pc, (guint64) ((B * A + 63) / 64), error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_wkv4_back (HnCmd *cmd, HnTensor *dk, HnTensor *dv, HnTensor *dtime_decay, HnTensor *dtime_first, HnTensor *dy,
                 HnTensor *k, HnTensor *v, HnTensor *time_decay, HnTensor *time_first, HnBackFlags flags,
                 GError **error)
{
  const char *op = "wkv4_back";
  gint64 B, T, A;
  if (!hn_op_check_ctx (op, cmd, k, error) || !hn_op_check_dtype (op, "k", k, HN_DTYPE_F32, error) ||
      !btc_of (op, "k", k, &B, &T, &A, error))
    return FALSE;
  if (!dy || !v || !time_decay || !time_first)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dy, v, time_decay and time_first are required", op);
      return FALSE;
    }
  if (!f32_count (op, "dy", cmd, dy, k->n, error) || !f32_count (op, "v", cmd, v, k->n, error) ||
      !f32_count (op, "dk", cmd, dk, k->n, error) || !f32_count (op, "dv", cmd, dv, k->n, error) ||
      !f32_count (op, "time_decay", cmd, time_decay, A, error) ||
      !f32_count (op, "time_first", cmd, time_first, A, error) ||
      !f32_count (op, "dtime_decay", cmd, dtime_decay, A, error) ||
      !f32_count (op, "dtime_first", cmd, dtime_first, A, error) || !fits_u32 (op, k->n, error))
    return FALSE;
  guint32 fl = (dk ? 1u : 0u) | (dv ? 2u : 0u) | (dtime_decay ? 4u : 0u) | (dtime_first ? 8u : 0u) |
               ((flags & HN_BACK_ACCUMULATE) ? 16u : 0u);
  struct { guint32 B, T, A, dy_off, k_off, v_off, td_off, tf_off, dk_off, dv_off, dtd_off, dtf_off, flags; } pc = {
    (guint32) B, (guint32) T, (guint32) A, hn_eoff (dy), hn_eoff (k), hn_eoff (v), hn_eoff (time_decay),
    hn_eoff (time_first), dk ? hn_eoff (dk) : 0, dv ? hn_eoff (dv) : 0, dtime_decay ? hn_eoff (dtime_decay) : 0,
    dtime_first ? hn_eoff (dtime_first) : 0, fl };
  HnVkBinding bd[9] = { hn_bind (dy, FALSE), hn_bind (k, FALSE), hn_bind (v, FALSE), hn_bind (time_decay, FALSE),
                        hn_bind (time_first, FALSE), hn_bind (dk ? dk : dy, dk != NULL),
                        hn_bind (dv ? dv : dy, dv != NULL), hn_bind (dtime_decay ? dtime_decay : dy, dtime_decay != NULL),
                        hn_bind (dtime_first ? dtime_first : dy, dtime_first != NULL) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "wkv4_back", NULL, 0, bd, 9, &pc, sizeof pc, (guint64) ((A + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}
