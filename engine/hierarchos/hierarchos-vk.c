/* The Vulkan runtime of Hierarchos coherent-v9: the token step of
 * hierarchos-runtime.c recorded as a program of hier_* ops
 * (hierarchos-vk-private.h), a whole chunk of tokens in one submission.
 *
 * What the host knows before the chunk runs is decided on the host: the
 * tokens, their positions (which tokens ponder, the sliding-context alpha)
 * and the ROSA predictions (the suffix automaton runs over the token
 * history on the host). What depends on the data is decided on the GPU: the
 * manager's ponder steps and the worker's refinement steps are recorded up
 * to their maximum counts, each predicated on a control word in the work
 * buffer that the halting / convergence ops clear. So no token needs a host
 * round trip.
 *
 * Every value gets its own slot (nothing is overwritten), so the same
 * program is the training forward (hierarchos-vk-train.c runs the backward
 * of each op after it); the rows of a batch run in one program; a chunk's
 * program is recorded once and replayed while its ops repeat. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"
#include "tensor/hn-ops.h"
#include "tensor/ops-back.h"

#include <math.h>
#include <string.h>

#define NONE HN_HIER_NONE
#define HN_HIER_VK_CHUNK 64 /* tokens per submission (logits rows kept) */
#define HN_HIER_MV_ROWS_DEFAULT 1 /* fastest on the H200 (build-aux/perf, 2026-12-01) */

static const char *const op_shader[HN_HIER_N_OPS] = {
  "hier_matvec", "hier_norm", "hier_wkv", "hier_ltm", "hier_drift", "hier_ew",
};
static const guint op_push_size[HN_HIER_N_OPS] = {
  sizeof (HnHierMatvecPush), sizeof (HnHierNormPush), sizeof (HnHierWkvPush),
  sizeof (HnHierLtmPush),    sizeof (HnHierDriftPush), sizeof (HnHierEwPush),
};

/* Batch rows per workgroup of a Linear over several rows (HN_HIER_MV_ROWS,
 * 1..16; 1: one workgroup per row). More rows read W fewer times but give
 * the GPU fewer workgroups: on the H200 one row a workgroup is fastest
 * (a step's GPU time 459 ms, against 495/510/538/614 for 2/4/8/16), so the
 * batched kernel is opt-in for devices where W's bandwidth dominates. */
static guint32
mv_rows_per_group (void)
{
  static guint32 per = 0;
  if (!per)
    {
      const char *e = g_getenv ("HN_HIER_MV_ROWS");
      per = e ? (guint32) CLAMP (g_ascii_strtoll (e, NULL, 10), 1, 16) : HN_HIER_MV_ROWS_DEFAULT;
    }
  return per;
}

gboolean
hn_hier_op_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, GError **error)
{
  /* Every op may read anything in the work buffer: one barrier per op
   * (the step is a chain of dependent ops anyway). */
  HnVkBinding b[2] = { { prm, 0, 0, FALSE }, { wk, 0, 0, TRUE } };
  guint32 g = hn_hier_op_groups (op), gx = g, gy = 1, gz = MAX (op->rows, 1);
  if (g > 65535)
    {
      gx = 65535;
      gy = (g + 65534) / 65535;
    }
  if (op->kind == HN_HIER_OP_MATVEC && op->u.mv.trans)
    {
      /* hier_matvec.comp's trans path: 16 outputs a workgroup */
      g = (op->u.mv.out_n + 15) / 16;
      gx = MIN (g, 65535u);
      gy = (g + gx - 1) / gx;
    }
  guint32 per = mv_rows_per_group ();
  if (op->kind == HN_HIER_OP_MATVEC && !op->u.mv.trans && gz > 1 && per > 1)
    {
      /* a Linear over several rows: `per` rows a workgroup read W once */
      HnHierMatvecPush mp = op->u.mv;
      mp.flags |= 4u | (gz << 8);
      return hn_cmd_dispatch (cmd, "hier_matvec_rows", &per, 1, b, 2, &mp, sizeof mp, gx, gy, (gz + per - 1) / per,
                              error);
    }
  return hn_cmd_dispatch (cmd, op_shader[op->kind], NULL, 0, b, 2, &op->u, op_push_size[op->kind], gx, gy, gz, error);
}

gboolean
hn_hier_back_dispatch (HnCmd *cmd, const char *shader, const void *push, guint push_size, HnVkBuffer *prm,
                       HnVkBuffer *wk, HnVkBuffer *gprm, HnVkBuffer *gwk, guint32 gx, guint32 rows, GError **error)
{
  HnVkBinding b[4] = { { prm, 0, 0, FALSE }, { wk, 0, 0, FALSE }, { gprm, 0, 0, TRUE }, { gwk, 0, 0, TRUE } };
  guint32 gy = 1;
  if (gx > 65535)
    {
      gy = (gx + 65534) / 65535;
      gx = 65535;
    }
  return hn_cmd_dispatch (cmd, shader, NULL, 0, b, 4, push, push_size, gx, gy, MAX (rows, 1), error);
}

/* ---- layout ---- */

static guint32
poff (HnHierModel *m, const char *name)
{
  HnHierParam *p = hn_hier_model_param (m, name);
  g_assert (p != NULL);
  return (guint32) p->offset;
}

static guint32
coff (HnHierModel *m, const char *pre, const char *name)
{
  g_autofree char *n = g_strdup_printf ("%s.%s", pre, name);
  return poff (m, n);
}

static void
cell_prm (HnHierModel *m, const char *pre, int W, int N, int rw, int ra, int rg, HnHierCellPrm *c)
{
  c->W = (guint32) W;
  c->N = (guint32) N;
  c->rw = (guint32) rw;
  c->ra = (guint32) ra;
  c->rg = (guint32) rg;
#define F(field, name) c->field = coff (m, pre, name)
  F (x_r, "x_r"); F (x_w, "x_w"); F (x_k, "x_k"); F (x_v, "x_v"); F (x_a, "x_a"); F (x_g, "x_g");
  F (w1, "w1"); F (w2, "w2"); F (w0, "w0"); F (a1, "a1"); F (a2, "a2"); F (a0, "a0");
  F (g1, "g1"); F (g2, "g2"); F (k_k, "k_k"); F (k_a, "k_a"); F (r_k, "r_k"); F (x_k_cm, "x_k_cm");
  F (ln1w, "ln1.weight"); F (ln1b, "ln1.bias"); F (ln2w, "ln2.weight"); F (ln2b, "ln2.bias");
  F (lnxw, "ln_x.weight"); F (lnxb, "ln_x.bias"); F (rec, "receptance.weight"); F (key, "key.weight");
  F (val, "value.weight"); F (out, "output.weight"); F (kcm, "key_cm.weight"); F (vcm, "value_cm.weight");
#undef F
}

static guint32
take (gsize *cursor, gsize n)
{
  guint32 at = (guint32) *cursor;
  *cursor += n;
  return at;
}

static void
cell_off (gsize *cur, int W, int N, HnHierCellOff *c)
{
  c->tm = take (cur, W);
  c->cm = take (cur, W);
  c->vf = take (cur, W);
  c->out = take (cur, W);
  c->S = take (cur, (gsize) W * N);
  c->size = (guint32) (4 * W + W * N);
}

static gboolean
check_limits (HnHierModel *m, GError **error)
{
  const HnHierConfig *cfg = &m->cfg;
  const char *what = NULL;
  gint64 v = 0, lim = 0;
  if (cfg->h_rwkv_head_size > HN_HIER_VK_MAX_HEAD)
    what = "h_rwkv_head_size", v = cfg->h_rwkv_head_size, lim = HN_HIER_VK_MAX_HEAD;
  else if (cfg->l_rwkv_head_size > HN_HIER_VK_MAX_HEAD)
    what = "l_rwkv_head_size", v = cfg->l_rwkv_head_size, lim = HN_HIER_VK_MAX_HEAD;
  else if (m->S > HN_HIER_VK_MAX_SLOTS)
    what = "ltm_slots", v = m->S, lim = HN_HIER_VK_MAX_SLOTS;
  else if (m->topk > HN_HIER_VK_MAX_TOPK)
    what = "ltm_topk", v = m->topk, lim = HN_HIER_VK_MAX_TOPK;
  else if (m->C > HN_HIER_VK_MAX_DRIFT)
    what = "context_dim", v = m->C, lim = HN_HIER_VK_MAX_DRIFT;
  else if (cfg->max_l_steps + 1 > HN_HIER_MAX_STEPS || cfg->max_h_steps > HN_HIER_MAX_STEPS)
    what = "max_h_steps/max_l_steps", v = MAX (cfg->max_l_steps + 1, cfg->max_h_steps), lim = HN_HIER_MAX_STEPS;
  if (what)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "the Vulkan Hierarchos runtime supports %s up to %" G_GINT64_FORMAT " (this model has %" G_GINT64_FORMAT
                   "); use the CPU runtime (--runtime cpu)", what, lim, v);
      return FALSE;
    }
  return TRUE;
}

static void param_offsets (HnHierVkRunner *r);
static void profile_print (HnHierVkRunner *r);
static void program_free (gpointer data);
static void record_token (HnHierVkRunner *r, int t, gint64 pos, int rosa, gboolean detach);
static void record_state_out (HnHierVkRunner *r);

/* The fixed part of a row, then the activation region sized by recording a
 * worst-case chunk (from position 0: the most pondering tokens; every ROSA
 * op present; the detaching copies), then the backward's scratch. */
static void
layout (HnHierVkRunner *r)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  int Nh = (int) cfg->h_rwkv_head_size, Nl = (int) cfg->l_rwkv_head_size;
  gsize T = r->T, max_h = (gsize) cfg->max_h_steps, nl = (gsize) cfg->max_l_steps + 1;
  gsize cur = 0;
  cell_off (&cur, m->H, Nh, &r->sin.h);
  cell_off (&cur, m->L, Nl, &r->sin.l);
  r->sin.prev = take (&cur, m->C);
  r->sin.target = take (&cur, m->C);
  r->sin.fdrift = take (&cur, m->C);
  r->state_n = (guint32) cur;
  r->sout = take (&cur, r->state_n);
  r->fast = take (&cur, (gsize) m->S * m->Vd);
  r->tok = take (&cur, T);
  r->rtok = take (&cur, T);
  r->ron = take (&cur, T);
  r->hp = take (&cur, T * max_h);
  r->ctl = take (&cur, T * 3);
  r->flags = take (&cur, T * nl);
  r->dd = take (&cur, T * nl * m->C);
  r->lab = take (&cur, T);
  r->coef = take (&cur, T);
  r->stats = take (&cur, 3 * T);
  cur = (cur + 63) & ~(gsize) 63;
  r->fnr = take (&cur, T * m->C);
  cur = (cur + 63) & ~(gsize) 63;
  r->logits = take (&cur, T * m->V);
  r->act = (guint32) cur;

  /* a dry run of the recorder measures the activation region */
  param_offsets (r);
  r->act_n = G_MAXUINT32 - r->act;
  r->cur = 0;
  r->vs = r->sin;
  r->rows = 1;
  gint64 dn = cfg->detach_every_n_steps;
  for (int t = 0; t < (int) T; t++)
    record_token (r, t, t, 1, dn > 0 && t > 0 && t % dn == 0);
  record_state_out (r);
  r->act_n = r->cur;
  cur += r->act_n;
  r->bs_n = r->gath_n = 0;
  if (r->train)
    {
      for (guint i = 0; i < r->prog->len; i++)
        r->bs_n = MAX (r->bs_n, hn_hier_op_back_scratch (&g_array_index (r->prog, HnHierOp, i)));
      g_autoptr (GPtrArray) uses = hn_hier_vk_weight_uses (r);
      r->gath_n = (guint32) hn_hier_vk_gather_floats (uses);
    }
  g_array_set_size (r->prog, 0);
  r->bs = take (&cur, r->bs_n);
  cur = (cur + 63) & ~(gsize) 63;
  r->gath = take (&cur, r->gath_n);
  r->rs = (cur + 63) & ~(gsize) 63;
}

static void
param_offsets (HnHierVkRunner *r)
{
  HnHierModel *m = r->m;
  cell_prm (m, "h_rnn", m->H, (int) m->cfg.h_rwkv_head_size, m->rw, m->ra, m->rg, &r->hpm);
  cell_prm (m, "l_rnn", m->L, (int) m->cfg.l_rwkv_head_size, m->rwl, m->ral, m->rgl, &r->lpm);
#define P(field, name) r->field = poff (m, name)
  P (lm_head, "lm_head.weight");
  P (hde_down, "h_deepembed_adapter.down.weight"); P (hde_up, "h_deepembed_adapter.up.weight");
  P (hde_bias, "h_deepembed_adapter.bias");
  P (lde_down, "l_deepembed_adapter.down.weight"); P (lde_up, "l_deepembed_adapter.up.weight");
  P (lde_bias, "l_deepembed_adapter.bias");
  P (ra_down, "rosa_adapter.down.weight"); P (ra_up, "rosa_adapter.up.weight"); P (ra_bias, "rosa_adapter.bias");
  P (rosa_gate_logit, "rosa_gate_logit"); P (rosa_router_w, "rosa_router.weight"); P (rosa_router_b, "rosa_router.bias");
  P (ltm_gate_logit, "ltm_gate_logit"); P (ltm_router_w, "ltm_router.weight"); P (ltm_router_b, "ltm_router.bias");
  P (ltm_keys, "ltm.keys"); P (ltm_vals, "ltm.vals"); P (qproj, "qproj.weight");
  P (in_proj_w, "in_proj.weight"); P (in_proj_b, "in_proj.bias"); P (l_feedback, "l_feedback_proj.weight");
  P (h_to_ctx_w, "h_to_context.weight"); P (h_to_ctx_b, "h_to_context.bias");
  P (halt_w, "h_halt_proj.weight"); P (halt_b, "h_halt_proj.bias");
  P (l_in_w, "l_input_proj.weight"); P (l_in_b, "l_input_proj.bias"); P (drift_w, "context_drift_proj.weight");
  P (l_out_w, "l_to_out.weight"); P (l_out_b, "l_to_out.bias"); P (onw, "out_norm.weight"); P (onb, "out_norm.bias");
#undef P
  r->persistent = m->P > 0 ? poff (m, "persistent") : NONE;
}

/* ---- recording ---- */

/* A fresh slot of n floats in the activation region. */
static guint32
A (HnHierVkRunner *r, gsize n)
{
  if ((gsize) r->cur + n > r->act_n)
    {
      r->overflow = TRUE;
      return r->act;
    }
  guint32 at = r->act + r->cur;
  r->cur += (guint32) n;
  return at;
}

static HnHierCellOff
A_cell (HnHierVkRunner *r, int W, int N)
{
  HnHierCellOff c;
  gsize base = A (r, (gsize) W * (4 + N));
  cell_off (&base, W, N, &c);
  return c;
}

static void
emit (HnHierVkRunner *r, HnHierOp *op)
{
  guint32 rs = (guint32) r->rs, ps = (guint32) r->m->n_params;
  op->rows = r->rows;
  switch (op->kind)
    {
    case HN_HIER_OP_MATVEC: op->u.mv.rs = rs; op->u.mv.ps = ps; break;
    case HN_HIER_OP_NORM: op->u.norm.rs = rs; op->u.norm.ps = ps; break;
    case HN_HIER_OP_WKV: op->u.wkv.rs = rs; op->u.wkv.ps = ps; break;
    case HN_HIER_OP_LTM: op->u.ltm.rs = rs; op->u.ltm.ps = ps; break;
    case HN_HIER_OP_DRIFT: op->u.drift.rs = rs; op->u.drift.ps = ps; break;
    case HN_HIER_OP_EW: op->u.ew.rs = rs; op->u.ew.ps = ps; break;
    default: g_assert_not_reached ();
    }
  op->bs = r->bs;
  g_array_append_val (r->prog, *op);
}

static HnHierMatvecPush
mv_base (guint32 w, guint32 x, guint32 in, guint32 y, guint32 out)
{
  HnHierMatvecPush p = { 0 };
  p.out_n = out;
  p.in_n = in;
  p.w_off = w;
  p.b_off = p.res_off = p.y2_off = p.aux = p.pred = NONE;
  p.y_off = y;
  p.x0 = x;
  p.n0 = in;
  p.x1 = p.x2 = x;
  p.scale = 1.0f;
  return p;
}

static void
emit_mv (HnHierVkRunner *r, const HnHierMatvecPush *p)
{
  HnHierOp op = { .kind = HN_HIER_OP_MATVEC };
  op.u.mv = *p;
  /* training: the forward keeps v = W x + b + res, so the backward need
   * not read W twice */
  if (r->train && p->post != HN_HIER_POST_HALT)
    {
      op.u.mv.flags |= HN_HIER_MV_KEEP_V;
      op.u.mv.u0 = A (r, p->out_n);
    }
  /* training: the weight's gradient is one matmul per chunk over its uses,
   * so each use keeps its dv in its own scratch */
  if (r->train)
    op.u.mv.flags |= HN_HIER_MV_NO_DW;
  emit (r, &op);
  if (r->train)
    {
      HnHierOp *last = &g_array_index (r->prog, HnHierOp, r->prog->len - 1);
      last->bs = A (r, hn_hier_mv_back_scratch (last));
    }
}

/* y = clamp(act(W x + b)) with W [out, in]. */
static void
linear (HnHierVkRunner *r, guint32 w, guint32 b, guint32 x, guint32 in, guint32 y, guint32 out, guint32 act,
        float clamp, guint32 pred)
{
  HnHierMatvecPush p = mv_base (w, x, in, y, out);
  p.b_off = b;
  p.act = act;
  p.clamp = clamp;
  p.pred = pred;
  emit_mv (r, &p);
}

/* y = act(x @ M + b) with M [in, out]. */
static void
vecmat (HnHierVkRunner *r, guint32 M, guint32 b, guint32 x, guint32 in, guint32 y, guint32 out, guint32 act, guint32 pred)
{
  HnHierMatvecPush p = mv_base (M, x, in, y, out);
  p.trans = 1;
  p.b_off = b;
  p.act = act;
  p.pred = pred;
  emit_mv (r, &p);
}

/* LayerNorm of x (xsrc: bit 0 from prm, bit 1 the row work[xi] of it). */
static void
norm (HnHierVkRunner *r, guint32 x, guint32 xsrc, guint32 xi, guint32 w, guint32 b, guint32 width, guint32 y,
      float yclamp, guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  HnHierNormPush *p = &op.u.norm;
  p->width = width;
  p->x_off = x;
  p->xsrc = xsrc;
  p->xi = xi;
  p->w_off = w;
  p->b_off = b;
  p->y_off = y;
  p->eps = 1e-5f;
  p->yclamp = yclamp;
  p->prev_off = p->mix_off = 0;
  p->pred = pred;
  emit (r, &op);
}

static void
ew (HnHierVkRunner *r, guint32 opcode, guint32 a, guint32 asrc, guint32 b, guint32 s, guint32 y, guint32 n, float f0,
    float clamp, guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_EW };
  op.u.ew = (HnHierEwPush) { n, opcode, a, asrc, b, s, y, f0, clamp, pred, s };
  emit (r, &op);
}

/* A copy the backward does not see (the TBPTT cuts, the state out). */
static void
detached_copy (HnHierVkRunner *r, guint32 from, guint32 to, guint32 n)
{
  ew (r, HN_HIER_EW_COPY, from, 0, NONE, NONE, to, n, 0, 0, NONE);
  g_array_index (r->prog, HnHierOp, r->prog->len - 1).no_back = TRUE;
}

/* One RWKV-7 style cell step from state `in` to fresh state `out`, input x
 * [W], deep embedding de [4W]; writes clamp(out, activation_clamp) to y. */
static void
cell (HnHierVkRunner *r, const HnHierCellPrm *c, const HnHierCellOff *in, const HnHierCellOff *st, guint32 x,
      guint32 de, guint32 y, guint32 pred)
{
  const HnHierConfig *cfg = &r->m->cfg;
  guint32 W = c->W;
  float sc = (float) cfg->recurrent_state_clamp, kc = (float) cfg->rwkv_channel_mix_key_clamp;
  float dc = (float) cfg->rwkv_channel_mix_deepembed_clamp, act = (float) cfg->activation_clamp;
  guint32 mix = A (r, 6 * (gsize) W), rr = A (r, W), k = A (r, W), v = A (r, W), a = A (r, W), g = A (r, W);
  guint32 w = A (r, W), la = A (r, c->ra), lw = A (r, c->rw), lg = A (r, c->rg), tt = A (r, W);
  guint32 mixed = A (r, W), xkc = A (r, W), f = A (r, 4 * (gsize) W);

  /* xn = LN1(x) -> tm state; the six token-shift mixes r, w, k, v, a, g
   * against the previous tm */
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  HnHierNormPush *np = &op.u.norm;
  *np = (HnHierNormPush) { W, x, 0, c->ln1w, c->ln1b, st->tm, 1e-5f, sc, 6, in->tm, mix, pred,
                           { c->x_r, c->x_w, c->x_k, c->x_v, c->x_a, c->x_g } };
  emit (r, &op);
  guint32 xr = mix, xw = mix + W, xk = mix + 2 * W, xv = mix + 3 * W, xa = mix + 4 * W, xg = mix + 5 * W;
  linear (r, c->rec, NONE, xr, W, rr, W, 0, 0, pred);
  linear (r, c->key, NONE, xk, W, k, W, 0, 0, pred);
  linear (r, c->val, NONE, xv, W, v, W, 0, 0, pred);
  vecmat (r, c->a1, NONE, xa, W, la, c->ra, 0, pred);
  vecmat (r, c->w1, NONE, xw, W, lw, c->rw, 8 /* tanh */, pred);
  vecmat (r, c->g1, NONE, xg, W, lg, c->rg, 7 /* sigmoid */, pred);
  vecmat (r, c->a2, c->a0, la, c->ra, a, W, 7, pred);
  vecmat (r, c->w2, c->w0, lw, c->rw, w, W, HN_HIER_ACT_WDECAY, pred);
  vecmat (r, c->g2, NONE, lg, c->rg, g, W, 0, pred);

  HnHierOp wop = { .kind = HN_HIER_OP_WKV, .groups = W / c->N };
  wop.u.wkv = (HnHierWkvPush) { c->N, rr, k, v, a, g, w, c->k_k, c->k_a, c->r_k, c->lnxw, c->lnxb,
                                in->S, st->vf, tt, sc, 64e-5f, pred, st->S };
  emit (r, &wop);

  /* mixed = x + W_o t */
  HnHierMatvecPush p = mv_base (c->out, tt, W, mixed, W);
  p.res_off = x;
  p.pred = pred;
  emit_mv (r, &p);

  /* channel mix: xn2 = LN2(mixed) -> cm state; xk = mix with the old cm */
  *np = (HnHierNormPush) { W, mixed, 0, c->ln2w, c->ln2b, st->cm, 1e-5f, sc, 1, in->cm, xkc, pred, { c->x_k_cm } };
  emit (r, &op);
  p = mv_base (c->kcm, xkc, W, f, 4 * W);
  p.post = HN_HIER_POST_CM;
  p.clamp = kc;
  p.aux = de;
  p.f1 = dc;
  p.pred = pred;
  emit_mv (r, &p);
  /* out = mixed + W_value f: the cell output (clamped for the caller) and
   * the out state (clamped to the state clamp) */
  p = mv_base (c->vcm, f, 4 * W, y, W);
  p.res_off = mixed;
  p.clamp = act;
  p.y2_off = st->out;
  p.clamp2 = sc;
  p.pred = pred;
  emit_mv (r, &p);
}

/* A memory gate F(sigmoid(clamp(logit + router(x), 50))) into y [1]. */
static void
gate (HnHierVkRunner *r, guint32 logit, guint32 rw, guint32 rb, guint32 x, guint32 y, float floor, guint32 pred)
{
  HnHierMatvecPush p = mv_base (rw, x, (guint32) r->m->C, y, 1);
  p.b_off = rb;
  p.post = HN_HIER_POST_GATE;
  p.aux = logit;
  p.f1 = floor;
  p.pred = pred;
  emit_mv (r, &p);
}

static float
gate_floor (HnHierModel *m)
{
  double steps = (double) m->cfg.memory_gate_warmup_steps, floor = m->cfg.memory_gate_warmup_floor;
  if (steps <= 0 || floor <= 0)
    return 0.0f;
  floor = CLAMP (floor, 0.0, 0.95);
  double progress = CLAMP (hn_hier_model_data (m, "memory_gate_warmup_step")[0] / steps, 0.0, 1.0);
  return (float) (floor * (1.0 - progress));
}

/* Halting step `step` on the manager output o: probability to hp, control
 * words [active, survival, steps] from ctl_in to ctl_out. */
static void
halt (HnHierVkRunner *r, int step, guint32 o, guint32 hp, guint32 ctl_in, guint32 ctl_out)
{
  const HnHierConfig *cfg = &r->m->cfg;
  HnHierMatvecPush p = mv_base (r->halt_w, o, (guint32) r->m->H, hp, 1);
  p.b_off = r->halt_b;
  p.post = HN_HIER_POST_HALT;
  p.aux = ctl_in;
  p.y2_off = ctl_out;
  p.flags = step == 0 ? 1 : 0;
  p.u0 = (guint32) cfg->min_h_steps;
  p.f0 = (float) cfg->h_halt_thresh;
  p.f1 = (float) cfg->halt_logit_clamp;
  p.pred = step == 0 ? NONE : ctl_in;
  emit_mv (r, &p);
}

/* The worker's input li = clamp(l_input_proj [enc; cd], state clamp). */
static void
worker_input (HnHierVkRunner *r, guint32 enc, guint32 cd, guint32 li, guint32 pred)
{
  HnHierModel *m = r->m;
  HnHierMatvecPush p = mv_base (r->l_in_w, enc, 2 * (guint32) m->C, li, (guint32) m->L);
  p.n0 = (guint32) m->C;
  p.x1 = cd;
  p.n1 = (guint32) m->C;
  p.b_off = r->l_in_b;
  p.clamp = (float) m->cfg.recurrent_state_clamp;
  p.pred = pred;
  emit_mv (r, &p);
}

static void
drift (HnHierVkRunner *r, guint32 mode, guint32 d_in, guint32 delta, guint32 ctx, guint32 cd, guint32 y, guint32 flag,
       guint32 pred)
{
  const HnHierConfig *cfg = &r->m->cfg;
  HnHierOp op = { .kind = HN_HIER_OP_DRIFT };
  op.u.drift = (HnHierDriftPush) { (guint32) r->m->C, d_in, delta, ctx, cd, y, (float) cfg->drift_state_clamp,
                                   (float) cfg->drift_norm_clamp, (float) cfg->l_conv_atol, mode, flag,
                                   (guint32) cfg->max_l_steps + 1, pred };
  emit (r, &op);
}

/* The state's current versions copied to fresh slots the backward does not
 * pass (a TBPTT cut inside the chunk). */
static void
detach_state (HnHierVkRunner *r)
{
  HnHierModel *m = r->m;
  HnHierVOff *vs = &r->vs;
  HnHierCellOff h = A_cell (r, m->H, (int) m->cfg.h_rwkv_head_size), l = A_cell (r, m->L, (int) m->cfg.l_rwkv_head_size);
  detached_copy (r, vs->h.tm, h.tm, h.size);
  detached_copy (r, vs->l.tm, l.tm, l.size);
  guint32 prev = A (r, m->C), target = A (r, m->C), fdrift = A (r, m->C);
  detached_copy (r, vs->prev, prev, (guint32) m->C);
  detached_copy (r, vs->target, target, (guint32) m->C);
  detached_copy (r, vs->fdrift, fdrift, (guint32) m->C);
  *vs = (HnHierVOff) { h, l, prev, target, fdrift };
}

/* The chunk's final state to the state-out region (packed like the state in). */
static void
record_state_out (HnHierVkRunner *r)
{
  HnHierVOff *vs = &r->vs;
  guint32 o = r->sout, C = (guint32) r->m->C;
  detached_copy (r, vs->h.tm, o + r->sin.h.tm, vs->h.size);
  detached_copy (r, vs->l.tm, o + r->sin.l.tm, vs->l.size);
  detached_copy (r, vs->prev, o + r->sin.prev, C);
  detached_copy (r, vs->target, o + r->sin.target, C);
  detached_copy (r, vs->fdrift, o + r->sin.fdrift, C);
}

/* Token t of the chunk at position pos. rosa: 0 no row has a ROSA
 * prediction, 2 every row has one, 1 some (work[ron + t] says which). */
static void
record_token (HnHierVkRunner *r, int t, gint64 pos, int rosa, gboolean detach)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  HnHierVOff *vs = &r->vs;
  HnHierTokOut *to = &r->to[t];
  guint32 C = (guint32) m->C, H = (guint32) m->H, L = (guint32) m->L, rank = (guint32) m->rank;
  int Nh = (int) cfg->h_rwkv_head_size, Nl = (int) cfg->l_rwkv_head_size;
  float act = (float) cfg->activation_clamp, ctxc = (float) cfg->context_state_clamp;
  float dsc = (float) cfg->drift_state_clamp;
  float floor = gate_floor (m);
  int max_h = (int) cfg->max_h_steps, max_l = (int) cfg->max_l_steps;
  guint32 max_hu = (guint32) max_h, nl = (guint32) max_l + 1;

  if (detach)
    detach_state (r);

  /* 1. tied embedding (the row's token), deep embeddings */
  guint32 e = A (r, C), ehat = A (r, C), hmid = A (r, rank), lmid = A (r, rank), hde = A (r, 4 * H), lde = A (r, 4 * L);
  ew (r, HN_HIER_EW_COPY, r->lm_head, 3, NONE, r->tok + (guint32) t, e, C, 0, 0, NONE);
  norm (r, e, 0, NONE, NONE, NONE, C, ehat, 0, NONE);
  linear (r, r->hde_down, NONE, ehat, C, hmid, rank, 1 /* silu */, 0, NONE);
  linear (r, r->lde_down, NONE, ehat, C, lmid, rank, 1, 0, NONE);
  linear (r, r->hde_up, r->hde_bias, hmid, rank, hde, 4 * H, 0, 0, NONE);
  linear (r, r->lde_up, r->lde_bias, lmid, rank, lde, 4 * L, 0, 0, NONE);

  /* 2. ROSA: x = e + gate * adapter(LN(e[pred])) in the rows with a
   * prediction, x = e in the others */
  guint32 x = e;
  if (rosa)
    {
      guint32 on = rosa == 2 ? NONE : r->ron + (guint32) t;
      guint32 fehat = A (r, C), ramid = A (r, rank), remb = A (r, C), rgate = A (r, 1);
      x = A (r, C);
      norm (r, r->lm_head, 3, r->rtok + (guint32) t, NONE, NONE, C, fehat, 0, on);
      linear (r, r->ra_down, NONE, fehat, C, ramid, rank, 1, 0, on);
      linear (r, r->ra_up, r->ra_bias, ramid, rank, remb, C, 0, 0, on);
      gate (r, r->rosa_gate_logit, r->rosa_router_w, r->rosa_router_b, e, rgate, floor, on);
      ew (r, HN_HIER_EW_AXPYS, e, 0, remb, rgate, x, C, 0, 0, on);
      if (rosa == 1)
        ew (r, HN_HIER_EW_COPY, e, 0, NONE, NONE, x, C, 0, 0, on | HN_HIER_PRED_NOT);
    }

  /* 4. LTM read: q = clamp(qproj [x; prev_context], 12), top-k, gated values */
  guint32 q = A (r, (gsize) m->K), lgate = A (r, 1), kv = (guint32) (m->topk * m->Vd);
  guint32 vals = A (r, kv), idx = A (r, (gsize) m->topk), enc = A (r, C), u = A (r, H);
  HnHierMatvecPush p = mv_base (r->qproj, x, 2 * C, q, (guint32) m->K);
  p.n0 = C;
  p.x1 = vs->prev;
  p.n1 = C;
  p.clamp = 12.0f;
  emit_mv (r, &p);
  gate (r, r->ltm_gate_logit, r->ltm_router_w, r->ltm_router_b, x, lgate, floor, NONE);
  HnHierOp lop = { .kind = HN_HIER_OP_LTM };
  lop.u.ltm = (HnHierLtmPush) { (guint32) m->S, (guint32) m->K, (guint32) m->Vd, (guint32) m->topk, r->ltm_keys,
                                r->ltm_vals, r->fast, q, lgate, vals, idx, NONE };
  emit (r, &lop);

  /* 5. enc = clamp(GELU(in_proj [x; persistent; values]), 30) */
  p = mv_base (r->in_proj_w, x, C + (guint32) m->P + kv, enc, C);
  p.n0 = C;
  if (m->P > 0)
    {
      p.x1 = r->persistent;
      p.n1 = (guint32) m->P;
      p.xsrc = 2;
      p.x2 = vals;
    }
  else
    {
      p.x1 = vals;
      p.n1 = kv;
    }
  p.b_off = r->in_proj_b;
  p.act = 2; /* gelu */
  p.clamp = 30.0f;
  emit_mv (r, &p);

  /* 6. manager: one real step, ponder steps every h_stride tokens. Each
   * step writes one block [state | output | control words]; a step that
   * does not run (halted) copies the previous block, so the last block is
   * always the selected step. */
  p = mv_base (r->l_feedback, vs->l.out, L, u, H);
  p.res_off = enc;
  p.clamp = act;
  emit_mv (r, &p);
  guint32 hblk = vs->h.size + H + 3;
  HnHierCellOff b = A_cell (r, (int) H, Nh);
  guint32 hout = A (r, H), ctl = A (r, 3);
  g_assert (r->overflow || (hout == b.tm + vs->h.size && ctl == hout + H));
  cell (r, &r->hpm, &vs->h, &b, u, hde, hout, NONE);
  int stride = (int) cfg->h_stride;
  to->pondered = pos % stride == 0;
  if (to->pondered)
    {
      guint32 hp0 = r->hp + (guint32) t * max_hu, ctl0 = r->ctl + (guint32) t * 3;
      to->hp = hp0;
      to->ctl = ctl0;
      halt (r, 0, hout, hp0, ctl, ctl);
      for (int step = 1; step < max_h; step++)
        {
          HnHierCellOff nb = A_cell (r, (int) H, Nh);
          guint32 nout = A (r, H), nctl = A (r, 3);
          cell (r, &r->hpm, &b, &nb, u, hde, nout, ctl);
          halt (r, step, nout, hp0 + (guint32) step, ctl, nctl);
          ew (r, HN_HIER_EW_COPY, b.tm, 0, NONE, NONE, nb.tm, hblk, 0, 0, ctl | HN_HIER_PRED_NOT);
          b = nb;
          hout = nout;
          ctl = nctl;
        }
      /* the last control words, for the losses (how many steps ran) */
      detached_copy (r, ctl, ctl0, 3);
      guint32 target = A (r, C);
      linear (r, r->h_to_ctx_w, r->h_to_ctx_b, hout, H, target, C, 0, ctxc, NONE);
      vs->prev = vs->target;
      vs->target = target;
    }
  vs->h = b;

  /* 7. sliding context */
  float alpha = (float) (pos % stride) / (float) stride;
  guint32 ctx = A (r, C);
  ew (r, HN_HIER_EW_LERP, vs->prev, 0, vs->target, NONE, ctx, C, alpha, ctxc, NONE);

  /* 8. worker with drift refinement on shadow states. Step i reads block i
   * [d | li] and writes block i + 1 (copied when the step does not run);
   * the drifts also go to the token's loss slots. */
  guint32 dr = A (r, C), flags = r->flags + (guint32) t * nl, dd = r->dd + (guint32) t * nl * C;
  to->flags = flags;
  to->d = dd;
  linear (r, r->drift_w, NONE, vs->l.out, L, dr, C, 8 /* tanh */, dsc, NONE);
  guint32 blk = A (r, C + L), cd = A (r, C);
  drift (r, HN_HIER_DRIFT_START, dr, NONE, ctx, cd, blk, flags, NONE);
  worker_input (r, enc, cd, blk + C, NONE);
  HnHierCellOff sh = vs->l;
  for (int i = 0; i < max_l; i++)
    {
      guint32 on = flags + (guint32) i;
      HnHierCellOff nsh = A_cell (r, (int) L, Nl);
      guint32 o = A (r, L), delta = A (r, C), nblk = A (r, C + L), ncd = A (r, C);
      cell (r, &r->lpm, &sh, &nsh, blk + C, lde, o, on);
      p = mv_base (r->drift_w, o, L, delta, C);
      p.act = 8;
      p.scale = (float) cfg->drift_delta_scale;
      p.pred = on;
      emit_mv (r, &p);
      drift (r, HN_HIER_DRIFT_REFINE, blk, delta, ctx, ncd, nblk, on + 1, on);
      worker_input (r, enc, ncd, nblk + C, on);
      ew (r, HN_HIER_EW_COPY, blk, 0, NONE, NONE, nblk, C + L, 0, 0, on | HN_HIER_PRED_NOT);
      if (r->train)
        ew (r, HN_HIER_EW_COPY, nblk, 0, NONE, NONE, dd + (guint32) (i + 1) * C, C, 0, 0, on);
      sh = nsh;
      blk = nblk;
    }
  HnHierCellOff lnew = A_cell (r, (int) L, Nl);
  guint32 fo = A (r, L), fenc = A (r, C), fdrift = A (r, C), fn = r->fnr + (guint32) t * C;
  cell (r, &r->lpm, &vs->l, &lnew, blk + C, lde, fo, NONE);
  p = mv_base (r->l_out_w, fo, L, fenc, C);
  p.b_off = r->l_out_b;
  p.res_off = enc;
  p.clamp = act;
  emit_mv (r, &p);
  drift (r, HN_HIER_DRIFT_FINAL, blk, NONE, ctx, NONE, fdrift, 0, NONE);
  vs->l = lnew;
  vs->fdrift = fdrift;

  /* 9. the head's input clamp(LN_out(final_enc), 100); the logits of the
   * whole chunk are one matmul after the program (head_forward) */
  norm (r, fenc, 0, NONE, r->onw, r->onb, C, fn, act, NONE);
}

/* ---- state transfer ---- */

static void
pack_cell (float *dst, const HnHierCellState *c, const HnHierCellOff *o, int W)
{
  memcpy (dst + o->tm, c->tm, (gsize) W * sizeof (float));
  memcpy (dst + o->cm, c->cm, (gsize) W * sizeof (float));
  memcpy (dst + o->vf, c->vfirst, (gsize) W * sizeof (float));
  memcpy (dst + o->out, c->out, (gsize) W * sizeof (float));
  memcpy (dst + o->S, c->S, (gsize) (o->size - 4 * W) * sizeof (float));
}

static void
unpack_cell (const float *src, HnHierCellState *c, const HnHierCellOff *o, int W)
{
  memcpy (c->tm, src + o->tm, (gsize) W * sizeof (float));
  memcpy (c->cm, src + o->cm, (gsize) W * sizeof (float));
  memcpy (c->vfirst, src + o->vf, (gsize) W * sizeof (float));
  memcpy (c->out, src + o->out, (gsize) W * sizeof (float));
  memcpy (c->S, src + o->S, (gsize) (o->size - 4 * W) * sizeof (float));
}

static void
pack_state (HnHierVkRunner *r, float *pack, const HnHierState *s)
{
  HnHierModel *m = r->m;
  pack_cell (pack, &s->h, &r->sin.h, m->H);
  pack_cell (pack, &s->l, &r->sin.l, m->L);
  memcpy (pack + r->sin.prev, s->prev_context, (gsize) m->C * sizeof (float));
  memcpy (pack + r->sin.target, s->target_context, (gsize) m->C * sizeof (float));
  memcpy (pack + r->sin.fdrift, s->final_drift, (gsize) m->C * sizeof (float));
}

static void
unpack_state (HnHierVkRunner *r, const float *pack, HnHierState *s)
{
  HnHierModel *m = r->m;
  unpack_cell (pack, &s->h, &r->sin.h, m->H);
  unpack_cell (pack, &s->l, &r->sin.l, m->L);
  memcpy (s->prev_context, pack + r->sin.prev, (gsize) m->C * sizeof (float));
  memcpy (s->target_context, pack + r->sin.target, (gsize) m->C * sizeof (float));
  memcpy (s->final_drift, pack + r->sin.fdrift, (gsize) m->C * sizeof (float));
}

gboolean
hn_hier_vk_wk_upload (HnHierVkRunner *r, gsize at, const float *src, gsize n, GError **error)
{
  if (!r->ctx)
    {
      memcpy (r->host_wk + at, src, n * sizeof (float));
      return TRUE;
    }
  return hn_vk_buffer_upload (r->wk->buf, (guint64) at * sizeof (float), src, n * sizeof (float), error);
}

gboolean
hn_hier_vk_wk_download (HnHierVkRunner *r, gsize at, float *dst, gsize n, GError **error)
{
  if (!r->ctx)
    {
      memcpy (dst, r->host_wk + at, n * sizeof (float));
      return TRUE;
    }
  return hn_vk_buffer_download (r->wk->buf, (guint64) at * sizeof (float), dst, n * sizeof (float), error);
}

/* ---- the runner ---- */

static HnHierVkRunner *
runner_alloc (HnHierModel *m, gboolean train, int rows, int chunk, GError **error)
{
  if (!check_limits (m, error))
    return NULL;
  if (m->n_params > G_MAXUINT32 / 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "the Vulkan Hierarchos runtime addresses at most 2^31 parameters");
      return NULL;
    }
  HnHierVkRunner *r = g_new0 (HnHierVkRunner, 1);
  r->m = m;
  r->train = train;
  r->R = (guint32) MAX (rows, 1);
  r->T = (guint32) MAX (chunk, 1);
  r->prog = g_array_new (FALSE, FALSE, sizeof (HnHierOp));
  r->cache = g_ptr_array_new_with_free_func (program_free);
  r->to = g_new0 (HnHierTokOut, r->T);
  layout (r);
  r->pack = g_new0 (float, (gsize) r->R * r->state_n);
  r->fast_sent = g_new0 (float, (gsize) m->S * m->Vd);
  /* offsets are 32-bit and every row's predicates must stay below the
   * negation bit */
  if (r->rs * r->R >= HN_HIER_PRED_NOT)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "the Vulkan Hierarchos %s needs %" G_GSIZE_FORMAT " MiB of work buffer per row, past its 8 GiB "
                   "addressing limit; use fewer rows or a shorter --training-chunk-size, or --runtime cpu",
                   train ? "trainer" : "runtime", r->rs * 4 >> 20);
      hn_hier_vk_runner_free (r);
      return NULL;
    }
  return r;
}

static HnTensor *
device_buffer (HnHierVkRunner *r, gsize floats, const char *what, GError **error)
{
  guint64 bytes = (guint64) floats * sizeof (float);
  guint64 range = hn_vk_context_max_buffer_size (r->ctx);
  if (range && bytes > range)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "the Hierarchos %s needs %" G_GUINT64_FORMAT " MiB, past this device's %" G_GUINT64_FORMAT
                   " MiB storage-buffer limit; use fewer rows (--batch-size), a shorter --training-chunk-size or "
                   "--runtime cpu", what, bytes >> 20, range >> 20);
      return NULL;
    }
  return hn_tensor_new_named (r->ctx, what, HN_DTYPE_F32, 1, (gint64[]) { (gint64) floats }, error);
}

gboolean
hn_hier_vk_zero (HnCmd *cmd, HnVkBuffer *b, gsize floats, GError **error)
{
  struct { guint32 n, off, value; } pc = { 0, 0, 0 };
  for (gsize at = 0; at < floats; at += (gsize) 1 << 30)
    {
      pc.off = (guint32) at;
      pc.n = (guint32) MIN (floats - at, (gsize) 1 << 30);
      guint32 g = (pc.n + 255) / 256, gx = MIN (g, 65535u), gy = (g + gx - 1) / gx;
      HnVkBinding bd = { b, 0, 0, TRUE };
      if (!hn_cmd_dispatch (cmd, "fill", NULL, 0, &bd, 1, &pc, sizeof pc, gx, gy, 1, error))
        return FALSE;
    }
  return TRUE;
}

static HnHierVkRunner *
runner_new (HnHierModel *m, HnVkContext *ctx, gboolean train, int rows, int chunk, GError **error)
{
  g_autoptr (HnHierVkRunner) r = runner_alloc (m, train, rows, chunk, error);
  if (!r)
    return NULL;
  gsize wk_n = r->rs * r->R;
  if (!ctx)
    {
      r->host_wk = g_new0 (float, wk_n);
      if (train)
        {
          r->host_gwk = g_new0 (float, wk_n);
          r->host_gprm = g_new0 (float, (gsize) m->n_params * r->R);
        }
      return g_steal_pointer (&r);
    }
  r->ctx = hn_vk_context_ref (ctx);
  if (!(r->prm = device_buffer (r, m->n_params, "Hierarchos parameters", error)) ||
      !(r->wk = device_buffer (r, wk_n, "Hierarchos work buffer", error)))
    return NULL;
  if (train && (!(r->gwk = device_buffer (r, wk_n, "Hierarchos work gradients", error)) ||
                !(r->gprm = device_buffer (r, (gsize) m->n_params * r->R, "Hierarchos parameter gradients", error))))
    return NULL;
  if (!(r->cmd = hn_cmd_new (ctx, error)) || !hn_hier_vk_runner_upload_params (r, error))
    return NULL;
  if (g_getenv ("HN_HIER_PROFILE"))
    {
      r->prof = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
      hn_cmd_set_profiling (r->cmd, TRUE);
    }
  /* Zero the work buffer once: the predicate words of rows and the slots
   * of ops that do not run are read before anything writes them. */
  if (!hn_hier_vk_zero (r->cmd, r->wk->buf, wk_n, error) ||
      (train && (!hn_hier_vk_zero (r->cmd, r->gprm->buf, (gsize) m->n_params * r->R, error) ||
                 !hn_hier_vk_zero (r->cmd, r->gwk->buf, wk_n, error))) ||
      !hn_cmd_submit_wait (r->cmd, error))
    return NULL;
  return g_steal_pointer (&r);
}

HnHierVkRunner *
hn_hier_vk_runner_new (HnHierModel *m, HnVkContext *ctx, GError **error)
{
  return runner_new (m, ctx, FALSE, 1, HN_HIER_VK_CHUNK, error);
}

HnHierVkRunner *
hn_hier_vk_trainer_new (HnHierModel *m, HnVkContext *ctx, int rows, int chunk, GError **error)
{
  return runner_new (m, ctx, TRUE, rows, chunk, error);
}

HnHierVkRunner *
hn_hier_vk_trainer_layout (HnHierModel *m, int rows, int chunk, GError **error)
{
  return runner_alloc (m, TRUE, rows, chunk, error);
}

gsize
hn_hier_vk_trainer_row_floats (HnHierVkRunner *r)
{
  return r->rs;
}

HnHierVkRunner *
hn_hier_vk_runner_new_reference (HnHierModel *m, GError **error)
{
  return runner_new (m, NULL, FALSE, 1, HN_HIER_VK_CHUNK, error);
}

gboolean
hn_hier_vk_device_bytes (HnHierModel *m, guint64 *bytes, GError **error)
{
  /* the two buffers hn_hier_vk_runner_new allocates, laid out without a device */
  HnHierVkRunner *r = runner_alloc (m, FALSE, 1, HN_HIER_VK_CHUNK, error);
  if (!r)
    return FALSE;
  *bytes = ((guint64) m->n_params + r->rs) * sizeof (float);
  hn_hier_vk_runner_free (r);
  return TRUE;
}

gboolean
hn_hier_vk_runner_upload_params (HnHierVkRunner *r, GError **error)
{
  if (!r->ctx)
    return TRUE; /* the references read m->params directly */
  return hn_vk_buffer_upload (r->prm->buf, 0, r->m->params, (guint64) r->m->n_params * sizeof (float), error);
}

void
hn_hier_vk_runner_free (HnHierVkRunner *r)
{
  if (!r)
    return;
  if (r->prof)
    {
      profile_print (r);
      g_hash_table_unref (r->prof);
    }
  g_ptr_array_unref (r->cache); /* before the buffers its recordings bind */
  if (r->cmd)
    hn_cmd_free (r->cmd);
  HnTensor *bufs[4] = { r->prm, r->wk, r->gprm, r->gwk };
  for (int i = 0; i < 4; i++)
    if (bufs[i])
      hn_tensor_unref (bufs[i]);
  if (r->ctx)
    hn_vk_context_unref (r->ctx);
  g_array_unref (r->prog);
  g_free (r->host_wk);
  g_free (r->host_gwk);
  g_free (r->host_gprm);
  g_free (r->to);
  for (guint32 i = 0; r->tapes && i < r->R; i++)
    hn_htape_free (r->tapes[i]);
  g_free (r->tapes);
  g_free (r->gsum);
  g_free (r->pack);
  g_free (r->fast_sent);
  g_free (r);
}

guint
hn_hier_vk_runner_get_n_ops (HnHierVkRunner *r)
{
  return r->n_ops;
}

/* HN_HIER_PROFILE=1: GPU time per shader, summed over the runner's life
 * and printed to stderr when it is freed (the recorder's timestamps hold
 * 4096 dispatches, so a profiled program is submitted in parts). */
gboolean
hn_hier_vk_profile_flush (HnHierVkRunner *r, gboolean last, GError **error)
{
  if (!r->prof)
    return last ? hn_cmd_submit_wait (r->cmd, error) : TRUE;
  if (!last && hn_cmd_get_n_dispatches (r->cmd) < 4000)
    return TRUE;
  if (!hn_cmd_submit_wait (r->cmd, error))
    return FALSE;
  guint n = 0;
  const HnCmdProfileEntry *e = hn_cmd_get_profile (r->cmd, &n);
  for (guint i = 0; i < n; i++)
    {
      double *v = g_hash_table_lookup (r->prof, e[i].name);
      if (!v)
        g_hash_table_insert (r->prof, g_strdup (e[i].name), v = g_new0 (double, 2));
      v[0] += e[i].microseconds;
      v[1] += 1;
    }
  return TRUE;
}

void
hn_hier_vk_profile_label (HnHierVkRunner *r, const HnHierOp *op, const char *prefix)
{
  static const char *const kind[HN_HIER_N_OPS] = { "matvec", "norm", "wkv", "ltm", "drift", "ew" };
  char label[96];
  if (op->kind == HN_HIER_OP_MATVEC)
    g_snprintf (label, sizeof label, "%s%s %ux%u%s%s", prefix, kind[op->kind], op->u.mv.out_n, op->u.mv.in_n,
                op->u.mv.trans ? " T" : "", op->u.mv.post ? " post" : "");
  else
    g_snprintf (label, sizeof label, "%s%s", prefix, kind[op->kind]);
  hn_cmd_set_label (r->cmd, label);
}

static void
profile_print (HnHierVkRunner *r)
{
  GHashTableIter it;
  gpointer k, v;
  double total = 0;
  g_hash_table_iter_init (&it, r->prof);
  while (g_hash_table_iter_next (&it, &k, &v))
    total += ((double *) v)[0];
  g_printerr ("Hierarchos Vulkan %s profile: %.1f ms of GPU time\n", r->train ? "trainer" : "runtime", total / 1e3);
  g_hash_table_iter_init (&it, r->prof);
  while (g_hash_table_iter_next (&it, &k, &v))
    {
      const double *d = v;
      g_printerr ("  %-24s %10.1f ms %5.1f%% %9.0f dispatches %8.2f us each\n", (const char *) k, d[0] / 1e3,
                  100 * d[0] / MAX (total, 1e-9), d[1], d[0] / d[1]);
    }
}

static void
program_free (gpointer data)
{
  HnHierVkProgram *p = data;
  g_bytes_unref (p->ops);
  if (p->uses)
    hn_tensor_unref (p->uses);
  if (p->fwd)
    hn_cmd_free (p->fwd);
  if (p->back)
    hn_cmd_free (p->back);
  g_free (p);
}

#define HN_HIER_VK_CACHE 8 /* programs kept: chunk shapes of a run, single-token steps */

/* The cached program for r->prog, a new empty entry when none matches. */
static HnHierVkProgram *
program_for (HnHierVkRunner *r)
{
  g_autoptr (GBytes) ops = g_bytes_new (r->prog->data, (gsize) r->prog->len * sizeof (HnHierOp));
  for (guint i = 0; i < r->cache->len; i++)
    {
      HnHierVkProgram *p = r->cache->pdata[i];
      if (g_bytes_equal (p->ops, ops))
        return p;
    }
  if (r->cache->len >= HN_HIER_VK_CACHE)
    g_ptr_array_remove_index (r->cache, 0);
  HnHierVkProgram *p = g_new0 (HnHierVkProgram, 1);
  p->ops = g_steal_pointer (&ops);
  g_ptr_array_add (r->cache, p);
  return p;
}

/* ---- the tied LM head: one matmul per row and chunk ---- */

/* The [rows, cols] matrix at element off of a 1-D tensor. */
HnTensor *
hn_hier_vk_view (HnTensor *t, gsize off, gint64 rows, gint64 cols, GError **error)
{
  g_autoptr (HnTensor) v = hn_tensor_view_rows (t, (gint64) off, rows * cols, error);
  return v ? hn_tensor_reshape (v, 2, (gint64[]) { rows, cols }, error) : NULL;
}

/* logits[n, V] = fn[n, C] lm_head^T for every row (the head reads no state,
 * so it leaves the token loop: a matmul instead of n matrix-vector products;
 * W is read once per row instead of once per token). */
static gboolean
head_forward (HnHierVkRunner *r, HnCmd *c, GError **error)
{
  HnHierModel *m = r->m;
  gint64 n = r->n, C = m->C, V = m->V;
  if (!r->ctx)
    {
      const float *W = m->params + r->lm_head;
      for (guint32 k = 0; k < r->rows; k++)
        {
          float *wk = r->host_wk + (gsize) k * r->rs;
          for (gint64 t = 0; t < n; t++)
            for (gint64 v = 0; v < V; v++)
              {
                float acc = 0;
                for (gint64 i = 0; i < C; i++)
                  acc += wk[r->fnr + t * C + i] * W[v * C + i];
                wk[r->logits + t * V + v] = acc;
              }
        }
      return TRUE;
    }
  g_autoptr (HnTensor) W = hn_hier_vk_view (r->prm, r->lm_head, V, C, error);
  for (guint32 k = 0; W && k < r->rows; k++)
    {
      g_autoptr (HnTensor) x = hn_hier_vk_view (r->wk, k * r->rs + r->fnr, n, C, error);
      g_autoptr (HnTensor) y = x ? hn_hier_vk_view (r->wk, k * r->rs + r->logits, n, V, error) : NULL;
      if (!y || !hn_op_matmul (c, y, x, W, NULL, error))
        return FALSE;
    }
  return W != NULL;
}

/* The head's backward from the logits' gradients: the inputs' gradients
 * into gwk, lm_head's into each row's gradient slice. */
gboolean
hn_hier_vk_head_backward (HnHierVkRunner *r, HnCmd *c, GError **error)
{
  HnHierModel *m = r->m;
  gint64 n = r->n, C = m->C, V = m->V;
  gsize np = m->n_params;
  if (!r->ctx)
    {
      const float *W = m->params + r->lm_head;
      for (guint32 k = 0; k < r->rows; k++)
        {
          const float *wk = r->host_wk + (gsize) k * r->rs;
          float *gwk = r->host_gwk + (gsize) k * r->rs, *gW = r->host_gprm + (gsize) k * np + r->lm_head;
          for (gint64 t = 0; t < n; t++)
            for (gint64 i = 0; i < C; i++)
              {
                float acc = 0;
                for (gint64 v = 0; v < V; v++)
                  acc += gwk[r->logits + t * V + v] * W[v * C + i];
                gwk[r->fnr + t * C + i] += acc;
              }
          for (gint64 v = 0; v < V; v++)
            for (gint64 i = 0; i < C; i++)
              {
                float acc = 0;
                for (gint64 t = 0; t < n; t++)
                  acc += gwk[r->logits + t * V + v] * wk[r->fnr + t * C + i];
                gW[v * C + i] += acc;
              }
        }
      return TRUE;
    }
  g_autoptr (HnTensor) W = hn_hier_vk_view (r->prm, r->lm_head, V, C, error);
  for (guint32 k = 0; W && k < r->rows; k++)
    {
      g_autoptr (HnTensor) x = hn_hier_vk_view (r->wk, k * r->rs + r->fnr, n, C, error);
      g_autoptr (HnTensor) dx = x ? hn_hier_vk_view (r->gwk, k * r->rs + r->fnr, n, C, error) : NULL;
      g_autoptr (HnTensor) dy = dx ? hn_hier_vk_view (r->gwk, k * r->rs + r->logits, n, V, error) : NULL;
      g_autoptr (HnTensor) dW = dy ? hn_hier_vk_view (r->gprm, k * np + r->lm_head, V, C, error) : NULL;
      if (!dW || !hn_op_matmul_back (c, dx, dW, NULL, dy, x, W, HN_BACK_ACCUMULATE, error))
        return FALSE;
    }
  return W != NULL;
}

/* Training: the cross-entropy of every token on the device
 * (shaders/hierarchos/hier_ce.comp; c NULL: the same on the host). */
static gboolean
loss_forward (HnHierVkRunner *r, HnCmd *c, GError **error)
{
  HnHierModel *m = r->m;
  guint32 V = (guint32) m->V;
  float zw = (float) m->cfg.z_loss_weight;
  if (!r->train)
    return TRUE;
  if (!r->ctx)
    {
      for (guint32 k = 0; k < r->rows; k++)
        {
          float *wk = r->host_wk + (gsize) k * r->rs, *gwk = r->host_gwk + (gsize) k * r->rs;
          for (guint32 t = 0; t < r->n; t++)
            {
              const float *z = wk + r->logits + (gsize) t * V;
              float mx = -INFINITY, bad = 0, s = 0;
              for (guint32 i = 0; i < V; i++)
                {
                  bad += isfinite (z[i]) ? 0.0f : 1.0f;
                  mx = MAX (mx, z[i]);
                }
              for (guint32 i = 0; i < V; i++)
                s += expf (z[i] - mx);
              float lse = mx + logf (s), co = wk[r->coef + t], kk = 1.0f + 2.0f * zw * lse;
              int lab = (int) wk[r->lab + t];
              wk[r->stats + 3 * t] = lse;
              wk[r->stats + 3 * t + 1] = lab >= 0 ? lse - z[lab] : 0.0f;
              wk[r->stats + 3 * t + 2] = bad;
              for (guint32 i = 0; co != 0.0f && i < V; i++)
                gwk[r->logits + (gsize) t * V + i] = co * (expf (z[i] - lse) * kk - ((int) i == lab ? 1.0f : 0.0f));
            }
        }
      return TRUE;
    }
  struct { guint32 V, logits, lab, coef, stats, rs; float zw; } pc = { V, r->logits, r->lab, r->coef, r->stats,
                                                                      (guint32) r->rs, zw };
  HnVkBinding b[2] = { { r->wk->buf, 0, 0, TRUE }, { r->gwk->buf, 0, 0, TRUE } };
  return hn_cmd_dispatch (c, "hier_ce", NULL, 0, b, 2, &pc, sizeof pc, r->n, 1, r->rows, error);
}

gboolean
hn_hier_vk_run_program (HnHierVkRunner *r, GError **error)
{
  r->n_ops = r->prog->len;
  if (!r->ctx)
    {
      for (guint i = 0; i < r->prog->len; i++)
        hn_hier_op_ref (&g_array_index (r->prog, HnHierOp, i), r->m->params, r->host_wk);
      return head_forward (r, NULL, error) && loss_forward (r, NULL, error);
    }
  if (r->prof)
    {
      /* profiled: recorded every time, submitted in parts, each op named
       * by its kind and shape */
      for (guint i = 0; i < r->prog->len; i++)
        if ((hn_hier_vk_profile_label (r, &g_array_index (r->prog, HnHierOp, i), ""), FALSE) ||
            !hn_hier_op_record (r->cmd, &g_array_index (r->prog, HnHierOp, i), r->prm->buf, r->wk->buf, error) ||
            !hn_hier_vk_profile_flush (r, FALSE, error))
          {
            hn_cmd_reset (r->cmd);
            return FALSE;
          }
      hn_cmd_set_label (r->cmd, NULL);
      if (!head_forward (r, r->cmd, error) || !loss_forward (r, r->cmd, error))
        {
          hn_cmd_reset (r->cmd);
          return FALSE;
        }
      return hn_hier_vk_profile_flush (r, TRUE, error);
    }
  HnHierVkProgram *p = r->last = program_for (r);
  if (!p->fwd)
    {
      HnCmd *c = hn_cmd_new (r->ctx, error);
      if (!c)
        return FALSE;
      hn_cmd_set_reusable (c);
      for (guint i = 0; i < r->prog->len; i++)
        if (!hn_hier_op_record (c, &g_array_index (r->prog, HnHierOp, i), r->prm->buf, r->wk->buf, error))
          {
            hn_cmd_free (c);
            return FALSE;
          }
      if (!head_forward (r, c, error) || !loss_forward (r, c, error) || !hn_cmd_finish (c, error))
        {
          hn_cmd_free (c);
          return FALSE;
        }
      p->fwd = c;
    }
  return hn_cmd_replay (p->fwd, 1, error);
}

gboolean
hn_hier_vk_forward (HnHierVkRunner *r, HnHierState **s, int rows, const guint32 *const *in, int n, float *logits,
                    GError **error)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  gsize cap = cfg->enforce_rosa_max_context ? (gsize) cfg->rosa_max_context : 0;
  gsize nfast = (gsize) m->S * m->Vd;
  g_assert (rows >= 1 && (guint32) rows <= r->R && n >= 1 && (guint32) n <= r->T);
  for (int k = 0; k < rows; k++)
    for (int i = 0; i < n; i++)
      if (in[k][i] >= (guint32) m->V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %u is outside the vocabulary (%d)", in[k][i], m->V);
          return FALSE;
        }
  /* The automata advance on copies: the callers' states change only when
   * the whole chunk succeeded. Per row: the tokens, the ROSA predictions
   * and whether there is one, as floats (exact below 2^24). */
  HnHierRosa rosa[rows];
  g_autofree float *words = g_new (float, 3 * (gsize) n);
  g_autofree guint8 *have = g_new0 (guint8, (gsize) n * rows);
  gboolean ok = TRUE;
  for (int k = 0; k < rows; k++)
    {
      hn_hier_rosa_init (&rosa[k]);
      hn_hier_rosa_copy (&rosa[k], &s[k]->rosa);
    }
  for (int k = 0; k < rows && ok; k++)
    {
      gsize base = (gsize) k * r->rs;
      for (int i = 0; i < n; i++)
        {
          gint64 pred = hn_hier_rosa_predict_and_push (&rosa[k], in[k][i], cap);
          gboolean on = pred >= 0 && pred < m->V;
          have[(gsize) i * rows + k] = on;
          words[i] = (float) in[k][i];
          words[n + i] = on ? (float) pred : 0.0f;
          words[2 * n + i] = on ? 1.0f : 0.0f;
        }
      float *pk = r->pack + (gsize) k * r->state_n;
      pack_state (r, pk, s[k]);
      ok = hn_hier_vk_wk_upload (r, base, pk, r->state_n, error) &&
           hn_hier_vk_wk_upload (r, base + r->tok, words, n, error) &&
           hn_hier_vk_wk_upload (r, base + r->rtok, words + n, n, error) &&
           hn_hier_vk_wk_upload (r, base + r->ron, words + 2 * n, n, error);
      /* the fast values rarely change (inference: never between chunks) */
      gboolean same = k == 0 && rows == 1 && r->fast_valid && memcmp (r->fast_sent, s[k]->fast_vals, nfast * sizeof (float)) == 0;
      if (ok && !same)
        {
          ok = hn_hier_vk_wk_upload (r, base + r->fast, s[k]->fast_vals, nfast, error);
          r->fast_valid = ok && k == 0 && rows == 1;
          if (r->fast_valid)
            memcpy (r->fast_sent, s[k]->fast_vals, nfast * sizeof (float));
        }
    }
  if (ok)
    {
      g_array_set_size (r->prog, 0);
      r->rows = (guint32) rows;
      r->n = (guint32) n;
      r->cur = 0;
      r->overflow = FALSE;
      r->vs = r->sin;
      gint64 dn = r->train ? cfg->detach_every_n_steps : 0;
      for (int i = 0; i < n; i++)
        {
          int all = 1, any = 0;
          for (int k = 0; k < rows; k++)
            {
              all &= have[(gsize) i * rows + k];
              any |= have[(gsize) i * rows + k];
            }
          /* training: the ROSA ops always predicated, so every chunk at
           * the same positions has the same program (replayed) */
          int mode = r->train ? 1 : all ? 2 : any;
          record_token (r, i, s[0]->position + i, mode, dn > 0 && i > 0 && i % dn == 0);
        }
      record_state_out (r);
      g_assert (!r->overflow);
      ok = hn_hier_vk_run_program (r, error);
    }
  for (int k = 0; k < rows && ok; k++)
    {
      gsize base = (gsize) k * r->rs;
      float *out = logits ? logits + (gsize) k * n * m->V : NULL;
      ok = (!out || hn_hier_vk_wk_download (r, base + r->logits, out, (gsize) n * m->V, error)) &&
           hn_hier_vk_wk_download (r, base + r->sout, r->pack + (gsize) k * r->state_n, r->state_n, error);
      for (gsize i = 0; ok && out && i < (gsize) n * m->V; i++)
        if (!isfinite (out[i]))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                         "the model produced a non-finite logit (NaN or Inf) at position %" G_GINT64_FORMAT " (after input token %u); "
                     "coherent-v9 output is never sanitized",
                         s[k]->position + (gint64) (i / (gsize) m->V), in[k][i / (gsize) m->V]);
            ok = FALSE;
          }
    }
  for (int k = 0; k < rows; k++)
    {
      if (ok)
        {
          unpack_state (r, r->pack + (gsize) k * r->state_n, s[k]);
          hn_hier_rosa_copy (&s[k]->rosa, &rosa[k]);
          g_array_append_vals (s[k]->history, in[k], (guint) n);
          s[k]->position += n;
        }
      hn_hier_rosa_clear (&rosa[k]);
    }
  return ok;
}

gboolean
hn_hier_vk_runner_steps (HnHierVkRunner *r, HnHierState *s, const guint32 *tokens, gsize n, float *logits,
                         float *last, GError **error)
{
  HnHierModel *m = r->m;
  for (gsize i = 0; i < n; i += r->T)
    {
      int k = (int) MIN ((gsize) r->T, n - i);
      g_autofree float *rows = logits ? NULL : g_new (float, (gsize) k * m->V);
      float *out = logits ? logits + i * m->V : rows;
      const guint32 *in = tokens + i;
      if (!hn_hier_vk_forward (r, &s, 1, &in, k, out, error))
        return FALSE;
      if (last && i + (gsize) k == n)
        memcpy (last, out + (gsize) (k - 1) * m->V, (gsize) m->V * sizeof (float));
    }
  return TRUE;
}
