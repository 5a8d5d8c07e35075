/* The RG-LRU (ops-rglru.h): forward with a carried state, and backward. */
#include "recurrent/ops-rglru.h"
#include "tensor/hn-op-kit.h"

static gboolean
f32_count (const char *op, const char *role, HnCmd *cmd, HnTensor *t, gint64 n, GError **error)
{
  return !t || (hn_op_check_ctx (op, cmd, t, error) && hn_op_check_dtype (op, role, t, HN_DTYPE_F32, error) &&
                hn_op_check_count (op, role, t, n, error));
}

/* x [B, T, C] or [T, C] (B = 1); every other activation the same count. */
static gboolean
btc (const char *op, HnCmd *cmd, HnTensor *x, HnTensor *lambda, gint64 *B, gint64 *T, gint64 *C, GError **error)
{
  if (!hn_op_check_ctx (op, cmd, x, error) || !hn_op_check_dtype (op, "x", x, HN_DTYPE_F32, error))
    return FALSE;
  if (x->ndim != 2 && x->ndim != 3)
    {
      g_autofree char *d = hn_tensor_describe (x);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: x %s must be [B, T, C] or [T, C]", op, d);
      return FALSE;
    }
  *B = x->ndim == 3 ? x->shape[0] : 1;
  *T = x->shape[x->ndim - 2];
  *C = x->shape[x->ndim - 1];
  if (!lambda)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: no recurrent_param (Λ)", op);
      return FALSE;
    }
  if (x->n > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: %" G_GINT64_FORMAT " elements do not fit the kernel's 32-bit indices", op, x->n);
      return FALSE;
    }
  return f32_count (op, "recurrent_param", cmd, lambda, *C, error);
}

gboolean
hn_op_rglru (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *gx, HnTensor *ga, HnTensor *lambda, HnTensor *state,
             gboolean reset, GError **error)
{
  const char *op = "rglru";
  gint64 B, T, C;
  if (!btc (op, cmd, x, lambda, &B, &T, &C, error) || !gx || !ga || !y)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: y, x and both gates are required", op);
      return FALSE;
    }
  if (!f32_count (op, "input gate", cmd, gx, x->n, error) || !f32_count (op, "recurrence gate", cmd, ga, x->n, error) ||
      !f32_count (op, "y", cmd, y, x->n, error) || !f32_count (op, "state", cmd, state, B * C, error))
    return FALSE;
  struct { guint32 B, T, C, x_off, gx_off, ga_off, l_off, s_off, y_off, has_state, reset; } pc = {
    (guint32) B, (guint32) T, (guint32) C, hn_eoff (x), hn_eoff (gx), hn_eoff (ga), hn_eoff (lambda),
    state ? hn_eoff (state) : 0, hn_eoff (y), state != NULL, reset != FALSE };
  /* y may be x: both bound read-write then */
  gboolean alias = y->buf == x->buf;
  HnVkBinding bd[6] = { hn_bind (x, alias), hn_bind (gx, FALSE), hn_bind (ga, FALSE), hn_bind (lambda, FALSE),
                        hn_bind (state ? state : y, TRUE), hn_bind (y, TRUE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "rglru", NULL, 0, bd, 6, &pc, sizeof pc, (guint64) ((B * C + 63) / 64), error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gboolean
hn_op_rglru_back (HnCmd *cmd, HnTensor *dx, HnTensor *dgx, HnTensor *dga, HnTensor *dlambda, HnTensor *dy,
                  HnTensor *x, HnTensor *gx, HnTensor *ga, HnTensor *lambda, GError **error)
{
  const char *op = "rglru_back";
  gint64 B, T, C;
  if (!btc (op, cmd, x, lambda, &B, &T, &C, error))
    return FALSE;
  if (!dx || !dgx || !dga || !dy || !gx || !ga)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: dx, dgx, dga, dy, x and both gates are required", op);
      return FALSE;
    }
  if (!f32_count (op, "dy", cmd, dy, x->n, error) || !f32_count (op, "input gate", cmd, gx, x->n, error) ||
      !f32_count (op, "recurrence gate", cmd, ga, x->n, error) || !f32_count (op, "dx", cmd, dx, x->n, error) ||
      !f32_count (op, "dgx", cmd, dgx, x->n, error) || !f32_count (op, "dga", cmd, dga, x->n, error) ||
      !f32_count (op, "dlambda", cmd, dlambda, C, error))
    return FALSE;
  struct { guint32 B, T, C, dy_off, x_off, gx_off, ga_off, l_off, dx_off, dgx_off, dga_off, dl_off, has_dl; } pc = {
    (guint32) B, (guint32) T, (guint32) C, hn_eoff (dy), hn_eoff (x), hn_eoff (gx), hn_eoff (ga), hn_eoff (lambda),
    hn_eoff (dx), hn_eoff (dgx), hn_eoff (dga), dlambda ? hn_eoff (dlambda) : 0, dlambda != NULL };
  HnVkBinding bd[9] = { hn_bind (dy, FALSE), hn_bind (x, FALSE), hn_bind (gx, FALSE), hn_bind (ga, FALSE),
                        hn_bind (lambda, FALSE), hn_bind (dx, TRUE), hn_bind (dgx, TRUE), hn_bind (dga, TRUE),
                        hn_bind (dlambda ? dlambda : dx, TRUE) };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "rglru_back", NULL, 0, bd, 9, &pc, sizeof pc, (guint64) ((C + 63) / 64), error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}
