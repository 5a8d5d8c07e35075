/* The gated delta rule (ops-delta.h), forward and backward. */
#include "recurrent/ops-delta.h"
#include "tensor/hn-op-kit.h"

#include <math.h>

#define DR_STATE 1u
#define DR_DT_BIAS 2u
#define DR_L2 4u
#define DR_GRAD_A_LOG 8u
#define DR_GRAD_DT_BIAS 16u

static gboolean
f32_count (const char *op, const char *role, HnCmd *cmd, HnTensor *t, gint64 n, GError **error)
{
  return !t || (hn_op_check_ctx (op, cmd, t, error) && hn_op_check_dtype (op, role, t, HN_DTYPE_F32, error) &&
                hn_op_check_count (op, role, t, n, error));
}

/* The layout: qkv [B, T, CD] or [T, CD]; *nb, *T from it. */
static gboolean
delta_check (const char *op, HnCmd *cmd, HnTensor *qkv, HnTensor *a, HnTensor *b, HnTensor *A_log,
             const HnDeltaRuleParams *p, gint64 *nb, gint64 *T, GError **error)
{
  gint64 HK = p->n_k_heads, HV = p->n_v_heads, DK = p->k_dim, DV = p->v_dim;
  if (!qkv || !a || !b || !A_log)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: qkv, a, b and A_log are required", op);
      return FALSE;
    }
  if (HK < 1 || HV < 1 || HV % HK || DK < 1 || DK > HN_DELTA_MAX_KEY_DIM || DV < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: %" G_GINT64_FORMAT " key heads of %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
                   " value heads of %" G_GINT64_FORMAT " (value heads a multiple of key heads, key heads of 1..%d)",
                   op, HK, DK, HV, DV, HN_DELTA_MAX_KEY_DIM);
      return FALSE;
    }
  gint64 CD = 2 * HK * DK + HV * DV;
  if (!hn_op_check_ctx (op, cmd, qkv, error) || !hn_op_check_dtype (op, "qkv", qkv, HN_DTYPE_F32, error))
    return FALSE;
  if ((qkv->ndim != 2 && qkv->ndim != 3) || qkv->shape[qkv->ndim - 1] != CD)
    {
      g_autofree char *d = hn_tensor_describe (qkv);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: qkv %s %s must be [B, T, %" G_GINT64_FORMAT "]",
                   op, qkv->name, d, CD);
      return FALSE;
    }
  *nb = qkv->ndim == 3 ? qkv->shape[0] : 1;
  *T = qkv->shape[qkv->ndim - 2];
  gint64 n = *nb * *T;
  if (n * CD > G_MAXUINT32 || *T < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: %" G_GINT64_FORMAT " tokens of %" G_GINT64_FORMAT
                   " do not fit the kernel's 32-bit indices", op, n, CD);
      return FALSE;
    }
  return f32_count (op, "a", cmd, a, n * HV, error) && f32_count (op, "b", cmd, b, n * HV, error) &&
         f32_count (op, "A_log", cmd, A_log, HV, error) && f32_count (op, "dt_bias", cmd, p->dt_bias, HV, error) &&
         f32_count (op, "state", cmd, p->state, *nb * HV * DK * DV, error);
}

static float
scale_of (const HnDeltaRuleParams *p)
{
  return p->scale > 0 ? p->scale : (float) (1.0 / sqrt ((double) p->k_dim));
}

gboolean
hn_op_gated_delta_rule (HnCmd *cmd, HnTensor *y, HnTensor *qkv, HnTensor *a, HnTensor *b, HnTensor *A_log,
                        const HnDeltaRuleParams *p, GError **error)
{
  const char *op = "gated_delta_rule";
  gint64 nb, T;
  if (!delta_check (op, cmd, qkv, a, b, A_log, p, &nb, &T, error) ||
      !f32_count (op, "y", cmd, y, nb * T * p->n_v_heads * p->v_dim, error) || !y)
    return FALSE;
  guint32 flags = (p->state ? DR_STATE : 0) | (p->dt_bias ? DR_DT_BIAS : 0) | (p->qk_l2norm ? DR_L2 : 0);
  struct {
    guint32 nb, T, HK, HV, DV, qkv_off, a_off, b_off, al_off, dtb_off, s_off, y_off, flags;
    float scale;
  } pc = { (guint32) nb, (guint32) T, (guint32) p->n_k_heads, (guint32) p->n_v_heads, (guint32) p->v_dim,
           hn_eoff (qkv), hn_eoff (a), hn_eoff (b), hn_eoff (A_log), p->dt_bias ? hn_eoff (p->dt_bias) : 0,
           p->state ? hn_eoff (p->state) : 0, hn_eoff (y), flags, scale_of (p) };
  HnVkBinding bd[7] = { hn_bind (qkv, FALSE), hn_bind (a, FALSE), hn_bind (b, FALSE), hn_bind (A_log, FALSE),
                        hn_bind (p->dt_bias ? p->dt_bias : A_log, FALSE), hn_bind (p->state ? p->state : y, p->state != NULL),
                        hn_bind (y, TRUE) };
  guint32 spec[1] = { (guint32) p->k_dim };
  gint64 cols = nb * p->n_v_heads * p->v_dim;
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "gated_delta_rule", spec, 1, bd, 7, &pc, sizeof pc, (guint64) ((cols + 63) / 64),
                                     error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

gint64
hn_gated_delta_rule_back_scratch (const HnDeltaRuleParams *p, gint64 T)
{
  return (gint64) p->n_k_heads * T * p->k_dim;
}

gboolean
hn_op_gated_delta_rule_back (HnCmd *cmd, HnTensor *dqkv, HnTensor *da, HnTensor *db, HnTensor *dA_log,
                             HnTensor *ddt_bias, HnTensor *dy, HnTensor *qkv, HnTensor *a, HnTensor *b,
                             HnTensor *A_log, const HnDeltaRuleParams *p, HnTensor *scratch, GError **error)
{
  const char *op = "gated_delta_rule_back";
  gint64 nb, T;
  if (!delta_check (op, cmd, qkv, a, b, A_log, p, &nb, &T, error))
    return FALSE;
  if (p->state)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: the backward runs from a zero state (no carried state)",
                   op);
      return FALSE;
    }
  if (!dqkv || !da || !db || !dy || !scratch || (ddt_bias && !p->dt_bias))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: dy, dqkv, da, db and scratch are required (ddt_bias needs dt_bias)", op);
      return FALSE;
    }
  gint64 n = nb * T, HV = p->n_v_heads;
  if (!f32_count (op, "dy", cmd, dy, n * HV * p->v_dim, error) || !f32_count (op, "dqkv", cmd, dqkv, qkv->n, error) ||
      !f32_count (op, "da", cmd, da, n * HV, error) || !f32_count (op, "db", cmd, db, n * HV, error) ||
      !f32_count (op, "dA_log", cmd, dA_log, HV, error) || !f32_count (op, "ddt_bias", cmd, ddt_bias, HV, error) ||
      !hn_op_check_ctx (op, cmd, scratch, error) || !hn_op_check_dtype (op, "scratch", scratch, HN_DTYPE_F32, error))
    return FALSE;
  gint64 need = hn_gated_delta_rule_back_scratch (p, T);
  if (scratch->n < need)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: scratch %s has %" G_GINT64_FORMAT " elements, %" G_GINT64_FORMAT " needed", op, scratch->name,
                   scratch->n, need);
      return FALSE;
    }
  guint32 flags = (p->dt_bias ? DR_DT_BIAS : 0) | (p->qk_l2norm ? DR_L2 : 0) | (dA_log ? DR_GRAD_A_LOG : 0) |
                  (ddt_bias ? DR_GRAD_DT_BIAS : 0);
  struct {
    guint32 nb, T, HK, HV, DV, dy_off, qkv_off, a_off, b_off, al_off, dtb_off, sc_off, dqkv_off, da_off, db_off,
      dal_off, ddtb_off, flags;
    float scale;
  } pc = { (guint32) nb, (guint32) T, (guint32) p->n_k_heads, (guint32) HV, (guint32) p->v_dim, hn_eoff (dy),
           hn_eoff (qkv), hn_eoff (a), hn_eoff (b), hn_eoff (A_log), p->dt_bias ? hn_eoff (p->dt_bias) : 0,
           hn_eoff (scratch), hn_eoff (dqkv), hn_eoff (da), hn_eoff (db), dA_log ? hn_eoff (dA_log) : 0,
           ddt_bias ? hn_eoff (ddt_bias) : 0, flags, scale_of (p) };
  HnVkBinding bd[12] = { hn_bind (dy, FALSE), hn_bind (qkv, FALSE), hn_bind (a, FALSE), hn_bind (b, FALSE),
                         hn_bind (A_log, FALSE), hn_bind (p->dt_bias ? p->dt_bias : A_log, FALSE),
                         hn_bind (scratch, TRUE), hn_bind (dqkv, TRUE), hn_bind (da, TRUE), hn_bind (db, TRUE),
                         hn_bind (dA_log ? dA_log : da, dA_log != NULL),
                         hn_bind (ddt_bias ? ddt_bias : db, ddt_bias != NULL) };
  guint32 spec[1] = { (guint32) p->k_dim };
  hn_cmd_set_label (cmd, op);
  gboolean ok = hn_op_dispatch_rows (cmd, "gated_delta_rule_back", spec, 1, bd, 12, &pc, sizeof pc,
                                     (guint64) ((p->n_k_heads + 63) / 64), error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}
