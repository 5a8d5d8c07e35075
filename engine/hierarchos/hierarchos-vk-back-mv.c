/* The backward of the Hierarchos MATVEC op (hierarchos-vk-private.h's
 * contract): y = post(W x + b + res) for the four posts, W [out, in]
 * (trans 0) or M [in, out] (trans 1), x up to three segments from wk or
 * prm. The derivatives are the CPU tape's (hierarchos-tape.c) node for
 * node: a clamp passes the gradient inside [-m, m] (edges included) and
 * blocks it outside and at non-finite values; the Linear skips outputs
 * whose gradient is 0, the vecmat does not.
 *
 * Dispatches: hier_matvec_back_dv recomputes v as the forward did (or,
 * where the forward kept it, HN_HIER_MV_KEEP_V, reads it: one output a
 * thread, W not read) and writes dv to the scratch, plus the per-output
 * inputs' gradients (bias, residual, channel mix's deep embedding, the
 * gate logit); then hier_matvec_back adds the input's gradient W^T dv and
 * the weight's outer product dv x^T. A plain Linear without activation or
 * clamp has no dv pass (dv = scale * dL/dy: one dispatch, W read once;
 * hier_matvec_back adds the bias's and residual's gradients too). Past
 * MV_BACK_OC outputs (trans 0) a last dispatch sums W^T dv's partial sums. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"

#include <math.h>

#define NONE HN_HIER_NONE
#define FAIL(code, ...) (g_set_error (error, HN_ERROR, code, __VA_ARGS__), FALSE)

/* The backward shaders' push constants: the forward's plus the scratch
 * and which of hier_matvec_back's dispatches. */
typedef struct {
  HnHierMatvecPush mv;
  guint32 bs, phase;
} MvBackPush;

/* Workgroup geometry of hier_matvec_back.comp. */
#define MV_BACK_COLS 8u
#define MV_BACK_ROWS 8u
#define MV_BACK_OC 2048u
#define MV_BACK_GW 1024u

/* The forward kept v (HN_HIER_MV_KEEP_V): the dv pass reads it. */
static gboolean
mv_kept_v (const HnHierMatvecPush *p)
{
  return (p->flags & HN_HIER_MV_KEEP_V) && p->post != HN_HIER_POST_HALT;
}

/* A plain Linear without activation or clamp: dv is scale * dL/dy, so the
 * dv pass (a second read of W) is left out. */
static gboolean
mv_direct (const HnHierMatvecPush *p)
{
  return p->post == HN_HIER_POST_PLAIN && p->act == 0 && !(p->clamp > 0) && p->y2_off == NONE;
}

gboolean
hn_hier_mv_back_direct (const HnHierMatvecPush *p)
{
  return mv_direct (p);
}

/* trans 0: the input's gradient is summed per MV_BACK_OC outputs, then the
 * partial sums (in the scratch) in a third dispatch. */
static guint32
mv_chunks (const HnHierMatvecPush *p)
{
  return p->trans ? 1 : (p->out_n + MV_BACK_OC - 1) / MV_BACK_OC;
}

guint32
hn_hier_mv_back_scratch (const HnHierOp *op)
{
  const HnHierMatvecPush *p = &op->u.mv;
  guint32 nc = mv_chunks (p);
  return (mv_direct (p) ? 0 : p->out_n) + (nc > 1 ? nc * p->in_n : 0);
}

static gboolean
overlaps (guint32 a, guint32 na, guint32 b, guint32 nb)
{
  return na && nb && (guint64) a < (guint64) b + nb && (guint64) b < (guint64) a + na;
}

/* What the backward implements; the rest fails closed. */
static gboolean
mv_back_supported (const HnHierMatvecPush *p, GError **error)
{
  if (p->post > HN_HIER_POST_HALT)
    return FAIL (HN_ERROR_UNSUPPORTED, "MATVEC backward: unknown post %u", p->post);
  if (p->post == HN_HIER_POST_PLAIN)
    switch (p->act)
      {
      case 0: case 1: case 2: case 4: case 5: case 7: case 8: case HN_HIER_ACT_WDECAY: break;
      default: return FAIL (HN_ERROR_UNSUPPORTED, "MATVEC backward: activation %u not implemented", p->act);
      }
  /* one gate logit / one set of control words: a single output */
  if ((p->post == HN_HIER_POST_GATE || p->post == HN_HIER_POST_HALT) && p->out_n != 1)
    return FAIL (HN_ERROR_UNSUPPORTED, "MATVEC backward: post %u needs out_n 1, not %u", p->post, p->out_n);
  if (p->n0 + p->n1 > p->in_n)
    return FAIL (HN_ERROR_INVALID_ARGUMENT, "MATVEC backward: segments %u + %u > in %u", p->n0, p->n1, p->in_n);
  /* the shaders add each input element's gradient from one thread, some
   * inputs in the same dispatch: the inputs of one buffer must not
   * overlap */
  static const char *const names[] = { "x segment 0", "x segment 1", "x segment 2", "the residual",
                                       "the deep embedding", "the weight", "the bias", "the gate logit" };
  guint32 n[3] = { p->n0, p->n1, p->in_n - p->n0 - p->n1 };
  guint32 ins_off[8] = { p->x0, p->x1, p->x2, p->res_off, p->aux, p->w_off, p->b_off, p->aux };
  guint32 ins_n[8] = { n[0], n[1], n[2], p->res_off != NONE ? p->out_n : 0,
                       p->post == HN_HIER_POST_CM && p->aux != NONE ? p->out_n : 0, p->out_n * p->in_n,
                       p->b_off != NONE ? p->out_n : 0, p->post == HN_HIER_POST_GATE };
  gboolean ins_prm[8] = { (p->xsrc & 1) != 0, (p->xsrc & 2) != 0, (p->xsrc & 4) != 0, FALSE, FALSE, TRUE, TRUE, TRUE };
  for (int a = 0; a < 8; a++)
    for (int b = a + 1; b < 8; b++)
      if (ins_prm[a] == ins_prm[b] && overlaps (ins_off[a], ins_n[a], ins_off[b], ins_n[b]))
        return FAIL (HN_ERROR_UNSUPPORTED, "MATVEC backward: %s (%s %u..%u) overlaps %s (%u..%u)", names[a],
                     ins_prm[a] ? "prm" : "wk", ins_off[a], ins_off[a] + ins_n[a] - 1, names[b], ins_off[b],
                     ins_off[b] + ins_n[b] - 1);
  /* v is recomputed from the inputs and the predicate reread: an in-place
   * forward (the inference step's halting words over its predicate) is
   * refused; a training program keeps every value */
  guint32 out_off[3] = { p->y_off, p->y2_off, p->u0 };
  guint32 out_n[3] = { p->out_n,
                       p->y2_off == NONE              ? 0
                       : p->post == HN_HIER_POST_HALT  ? 3
                       : p->post == HN_HIER_POST_PLAIN ? p->out_n
                                                       : 0,
                       mv_kept_v (p) ? p->out_n : 0 };
  guint32 pred = p->pred & ~HN_HIER_PRED_NOT;
  for (int i = 0; i < 9; i++)
    for (int o = 0; o < 3; o++)
      {
        guint32 at = i < 8 ? ins_off[i] : pred, len = i < 8 ? (ins_prm[i] ? 0 : ins_n[i]) : p->pred != NONE;
        if (overlaps (at, len, out_off[o], out_n[o]))
          return FAIL (HN_ERROR_INVALID_ARGUMENT,
                       "MATVEC backward: the forward wrote its output at %u..%u over what the backward reads at "
                       "%u..%u; training needs the forward's inputs kept",
                       out_off[o], out_off[o] + out_n[o] - 1, at, at + len - 1);
      }
  return TRUE;
}

static float
inside (float x, float lo, float hi)
{
  return x >= lo && x <= hi ? 1.0f : 0.0f;
}

/* d act(v) / dv (the tape's), y = act(v). */
static float
act_d (guint32 act, float v, float y)
{
  switch (act)
    {
    case 1:
      {
        float s = hn_hier_ref_sigmoid (v);
        return s + v * s * (1 - s);
      }
    case 2: return 0.5f * (1.0f + erff (v * (float) M_SQRT1_2)) + v * expf (-0.5f * v * v) * 0.3989422804014327f;
    case 4: return v > 0 ? 1.0f : 0.0f;
    case 5: return v > 0 ? 2 * v : 0.0f;
    case 7: return y * (1 - y);
    case 8: return 1 - y * y;
    case HN_HIER_ACT_WDECAY:
      {
        float u = -v;
        return u > 20.0f ? 1.0f : (u < -20.0f ? expf (u) : hn_hier_ref_sigmoid (u));
      }
    default: return 1.0f;
    }
}

/* dL/dv of output o (v = W x + b + res); adds the deep embedding's and the
 * gate logit's gradients. */
static float
mv_dv (const HnHierMatvecPush *p, const float *prm, const float *wk, float *gprm, float *gwk, guint32 o, float v)
{
  float g = gwk[p->y_off + o];
  switch (p->post)
    {
    case HN_HIER_POST_PLAIN:
      {
        float y = hn_hier_ref_act (p->act, v), z = p->scale * y;
        if (p->clamp > 0)
          g *= inside (z, -p->clamp, p->clamp);
        if (p->y2_off != NONE)
          g += gwk[p->y2_off + o] * inside (z, -p->clamp2, p->clamp2);
        return g * p->scale * act_d (p->act, v, y);
      }
    case HN_HIER_POST_CM:
      {
        float k = v, pass = 1.0f;
        if (p->clamp > 0)
          {
            pass = inside (v, -p->clamp, p->clamp);
            k = hn_hier_ref_clamp (v, p->clamp);
          }
        float f = k > 0 ? k * k : 0.0f;
        if (p->aux != NONE)
          {
            float d0 = wk[p->aux + o], d = d0, dpass = 1.0f;
            if (p->f1 > 0)
              {
                dpass = inside (d0, -p->f1, p->f1);
                d = hn_hier_ref_clamp (d0, p->f1);
              }
            if (p->clamp > 0 && p->f1 > 0)
              {
                float m = p->clamp * p->clamp * p->f1;
                g *= inside (f * d, -m, m);
              }
            gwk[p->aux + o] += g * f * dpass;
            g *= d;
          }
        return g * (k > 0 ? 2 * k : 0.0f) * pass;
      }
    case HN_HIER_POST_GATE:
      {
        float z = prm[p->aux] + v, s = hn_hier_ref_sigmoid (hn_hier_ref_clamp (z, 50.0f));
        if (p->f1 > 0)
          g *= 1.0f - p->f1;
        float dz = g * (s * (1 - s)) * inside (z, -50.0f, 50.0f);
        gprm[p->aux] += dz;
        return dz;
      }
    default:
      {
        /* halting: the probability's gradient; the control words get none */
        float s = hn_hier_ref_sigmoid (hn_hier_ref_clamp (v, p->f1));
        g *= inside (s, 1e-6f, 1.0f - 1e-6f);
        return g * (s * (1 - s)) * inside (v, -p->f1, p->f1);
      }
    }
}

static float
mv_x (const HnHierMatvecPush *p, const float *prm, const float *wk, guint32 i, float **grad, float *gprm, float *gwk)
{
  guint seg = i < p->n0 ? 0 : (i < p->n0 + p->n1 ? 1 : 2);
  guint32 idx = seg == 0 ? p->x0 + i : seg == 1 ? p->x1 + i - p->n0 : p->x2 + i - p->n0 - p->n1;
  gboolean from_prm = (p->xsrc >> seg) & 1;
  *grad = from_prm ? gprm + idx : gwk + idx;
  return from_prm ? prm[idx] : wk[idx];
}

/* One row: wk, gwk and gprm are the row's. */
static void
mv_back_row (const HnHierMatvecPush *p, const float *prm, const float *wk, float *gprm, float *gwk, guint32 bs)
{
  gboolean no_dw = (p->flags & HN_HIER_MV_NO_DW) != 0;
  guint32 in = p->in_n, out = p->out_n;
  float *x = g_new (float, MAX (in, 1)), **gx = g_new (float *, MAX (in, 1));
  float *dv = g_new0 (float, MAX (out, 1));
  for (guint32 i = 0; i < in; i++)
    x[i] = mv_x (p, prm, wk, i, &gx[i], gprm, gwk);
  /* v as the forward's reference sums it, or as the forward kept it */
  gboolean kept = mv_kept_v (p);
  for (guint32 o = 0; o < out && !kept; o++)
    for (guint32 i = 0; i < in; i++)
      dv[o] += x[i] * (p->trans ? prm[p->w_off + (gsize) i * out + o] : prm[p->w_off + (gsize) o * in + i]);
  for (guint32 o = 0; o < out; o++)
    {
      float v = kept ? wk[p->u0 + o] : dv[o];
      if (!kept && p->b_off != NONE)
        v += prm[p->b_off + o];
      if (!kept && p->res_off != NONE)
        v += wk[p->res_off + o];
      dv[o] = mv_dv (p, prm, wk, gprm, gwk, o, v);
      if (no_dw && !mv_direct (p))
        gwk[bs + o] = dv[o]; /* kept for the trainer's weight gradient, as the shader */
      if (p->b_off != NONE)
        gprm[p->b_off + o] += dv[o];
      if (p->res_off != NONE)
        gwk[p->res_off + o] += dv[o];
    }
  /* HN_HIER_MV_NO_DW: the weight's gradient is the trainer's (W^T dv only) */
  float *gw = gprm + p->w_off;
  if (p->trans)
    for (guint32 i = 0; i < in; i++)
      {
        float s = 0;
        for (guint32 j = 0; j < out; j++)
          {
            s += prm[p->w_off + (gsize) i * out + j] * dv[j];
            if (!no_dw)
              gw[(gsize) i * out + j] += x[i] * dv[j];
          }
        *gx[i] += s;
      }
  else
    {
      /* W^T dv summed, then added (as the shader) */
      float *s = g_new0 (float, MAX (in, 1));
      for (guint32 o = 0; o < out; o++)
        {
          if (dv[o] == 0.0f)
            continue;
          for (guint32 i = 0; i < in; i++)
            {
              s[i] += prm[p->w_off + (gsize) o * in + i] * dv[o];
              if (!no_dw)
                gw[(gsize) o * in + i] += dv[o] * x[i];
            }
        }
      for (guint32 i = 0; i < in; i++)
        *gx[i] += s[i];
      g_free (s);
    }
  g_free (x);
  g_free (gx);
  g_free (dv);
}

void
hn_hier_mv_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk)
{
  const HnHierMatvecPush *p = &op->u.mv;
  g_autoptr (GError) error = NULL;
  if (!mv_back_supported (p, &error))
    {
      g_critical ("%s", error->message);
      return;
    }
  for (guint32 r = 0; r < MAX (op->rows, 1); r++)
    {
      gsize w = (gsize) r * p->rs;
      if (!hn_hier_ref_skip (wk + w, p->pred))
        mv_back_row (p, prm, wk + w, gprm + (gsize) r * p->ps, gwk + w, op->bs);
    }
}

gboolean
hn_hier_mv_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                        HnVkBuffer *gwk, GError **error)
{
  const HnHierMatvecPush *p = &op->u.mv;
  if (!mv_back_supported (p, error))
    return FALSE;
  MvBackPush push = { *p, op->bs, 0 };
  guint32 rows = MAX (op->rows, 1);
  guint32 dv_groups = mv_kept_v (p) ? (p->out_n + 127) / 128 : hn_hier_op_groups (op);
  if (!mv_direct (p) && !hn_hier_back_dispatch (cmd, "hier_matvec_back_dv", &push, sizeof push, prm, wk, gprm, gwk,
                                                 dv_groups, rows, error))
    return FALSE;
  guint64 xg = p->trans ? (p->in_n + MV_BACK_ROWS - 1) / MV_BACK_ROWS
                        : (guint64) (p->in_n + MV_BACK_COLS - 1) / MV_BACK_COLS * mv_chunks (p);
  guint32 len = p->trans ? p->out_n : p->in_n, nrows = p->trans ? p->in_n : p->out_n;
  guint32 rpg = MAX (1, MV_BACK_GW / MAX (len, 1));
  guint64 wg = (p->flags & HN_HIER_MV_NO_DW) ? 0 : ((guint64) nrows + rpg - 1) / rpg;
  guint64 bg = mv_direct (p) ? (p->out_n + 127) / 128 : 0;
  if ((guint64) p->out_n * p->in_n > G_MAXUINT32 || xg + wg + bg > G_MAXUINT32 / 2)
    return FAIL (HN_ERROR_UNSUPPORTED, "MATVEC backward: %u x %u weight too large", p->out_n, p->in_n);
  if (!hn_hier_back_dispatch (cmd, "hier_matvec_back", &push, sizeof push, prm, wk, gprm, gwk, (guint32) (xg + wg + bg),
                              rows, error))
    return FALSE;
  if (mv_chunks (p) == 1)
    return TRUE;
  push.phase = 1;
  return hn_hier_back_dispatch (cmd, "hier_matvec_back", &push, sizeof push, prm, wk, gprm, gwk,
                                (p->in_n + 127) / 128, rows, error);
}
