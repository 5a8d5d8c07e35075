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
 * round trip. */
#include "models/hierarchos-vk-private.h"
#include "hn-error.h"

#include <math.h>
#include <string.h>

#define NONE HN_HIER_NONE
#define HN_HIER_VK_CHUNK 64 /* tokens per submission (logits rows kept) */

static const char *const op_shader[HN_HIER_N_OPS] = {
  "hier_matvec", "hier_norm", "hier_wkv", "hier_ltm", "hier_drift", "hier_ew",
};
static const guint op_push_size[HN_HIER_N_OPS] = {
  sizeof (HnHierMatvecPush), sizeof (HnHierNormPush), sizeof (HnHierWkvPush),
  sizeof (HnHierLtmPush),    sizeof (HnHierDriftPush), sizeof (HnHierEwPush),
};

gboolean
hn_hier_op_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, GError **error)
{
  /* Every op may read anything in the work buffer: one barrier per op
   * (the step is a chain of dependent ops anyway). */
  HnVkBinding b[2] = { { prm, 0, 0, FALSE }, { wk, 0, 0, TRUE } };
  guint32 g = hn_hier_op_groups (op), gx = g, gy = 1;
  if (g > 65535)
    {
      gx = 65535;
      gy = (g + 65534) / 65535;
    }
  return hn_cmd_dispatch (cmd, op_shader[op->kind], NULL, 0, b, 2, &op->u, op_push_size[op->kind], gx, gy,
                          MAX (op->rows, 1), error);
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

typedef struct { guint32 tm, cm, vf, out, S, size; } CellOff;

/* Parameter offsets of one cell. */
typedef struct {
  guint32 W, N, rw, ra, rg;
  guint32 x_r, x_w, x_k, x_v, x_a, x_g, w1, w2, w0, a1, a2, a0, g1, g2, k_k, k_a, r_k, x_k_cm;
  guint32 ln1w, ln1b, ln2w, ln2b, lnxw, lnxb, rec, key, val, out, kcm, vcm;
} CellPrm;

/* Scratch of one cell step (sized for the wider cell). */
typedef struct { guint32 mix, r, k, v, a, g, w, la, lw, lg, tt, mixed, xkc, f; } CellScratch;

struct _HnHierVkRunner {
  HnHierModel *m;
  HnVkContext *ctx; /* NULL: the CPU references run the program */
  HnVkBuffer *prm, *wk;
  HnCmd *cmd;
  float *host_wk;   /* reference mode */
  GArray *prog;     /* HnHierOp of the chunk being recorded */
  guint n_ops;
  gsize wk_n;
  /* state (contiguous from 0, packed like pack_state) */
  CellOff h, l;
  guint32 prev, target, fdrift, state_n;
  guint32 fast;
  CellOff shadow;
  CellScratch cs;
  guint32 e, ehat, hmid, lmid, hde, lde, fehat, ramid, remb, rgate, x, q, lgate, vals, idx, enc, u, hout;
  guint32 halt_p, hctl, ctx_v, dr, d, cd, li, o, delta, lflags, fo, fenc, fn;
  guint32 logits;
  CellPrm hp, lp;
  /* top-level parameter offsets */
  guint32 lm_head, hde_down, hde_up, hde_bias, lde_down, lde_up, lde_bias, ra_down, ra_up, ra_bias;
  guint32 rosa_gate_logit, rosa_router_w, rosa_router_b, ltm_gate_logit, ltm_router_w, ltm_router_b;
  guint32 persistent, ltm_keys, ltm_vals, qproj, in_proj_w, in_proj_b, l_feedback;
  guint32 h_to_ctx_w, h_to_ctx_b, halt_w, halt_b, l_in_w, l_in_b, drift_w, l_out_w, l_out_b, onw, onb;
  float *pack;      /* [state_n] staging of the state */
  float *fast_sent; /* fast values last uploaded */
  gboolean fast_valid;
};

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
cell_prm (HnHierModel *m, const char *pre, int W, int N, int rw, int ra, int rg, CellPrm *c)
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
cell_off (gsize *cur, int W, int N, CellOff *c)
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

static void
layout (HnHierVkRunner *r)
{
  HnHierModel *m = r->m;
  int Nh = (int) m->cfg.h_rwkv_head_size, Nl = (int) m->cfg.l_rwkv_head_size;
  int Wm = MAX (m->H, m->L), rmax = MAX (MAX (MAX (m->rw, m->ra), m->rg), MAX (MAX (m->rwl, m->ral), m->rgl));
  gsize cur = 0;
  cell_off (&cur, m->H, Nh, &r->h);
  cell_off (&cur, m->L, Nl, &r->l);
  r->prev = take (&cur, m->C);
  r->target = take (&cur, m->C);
  r->fdrift = take (&cur, m->C);
  r->state_n = (guint32) cur;
  r->fast = take (&cur, (gsize) m->S * m->Vd);
  cell_off (&cur, m->L, Nl, &r->shadow);
  CellScratch *s = &r->cs;
  s->mix = take (&cur, 6 * (gsize) Wm);
  s->r = take (&cur, Wm);
  s->k = take (&cur, Wm);
  s->v = take (&cur, Wm);
  s->a = take (&cur, Wm);
  s->g = take (&cur, Wm);
  s->w = take (&cur, Wm);
  s->la = take (&cur, rmax);
  s->lw = take (&cur, rmax);
  s->lg = take (&cur, rmax);
  s->tt = take (&cur, Wm);
  s->mixed = take (&cur, Wm);
  s->xkc = take (&cur, Wm);
  s->f = take (&cur, 4 * (gsize) Wm);
  r->e = take (&cur, m->C);
  r->ehat = take (&cur, m->C);
  r->hmid = take (&cur, m->rank);
  r->lmid = take (&cur, m->rank);
  r->hde = take (&cur, 4 * (gsize) m->H);
  r->lde = take (&cur, 4 * (gsize) m->L);
  r->fehat = take (&cur, m->C);
  r->ramid = take (&cur, m->rank);
  r->remb = take (&cur, m->C);
  r->rgate = take (&cur, 1);
  r->x = take (&cur, m->C);
  r->q = take (&cur, m->K);
  r->lgate = take (&cur, 1);
  r->vals = take (&cur, (gsize) m->topk * m->Vd);
  r->idx = take (&cur, m->topk);
  r->enc = take (&cur, m->C);
  r->u = take (&cur, m->H);
  r->hout = take (&cur, m->H);
  r->halt_p = take (&cur, HN_HIER_MAX_STEPS);
  r->hctl = take (&cur, 3);
  r->ctx_v = take (&cur, m->C);
  r->dr = take (&cur, m->C);
  r->d = take (&cur, m->C);
  r->cd = take (&cur, m->C);
  r->li = take (&cur, m->L);
  r->o = take (&cur, m->L);
  r->delta = take (&cur, m->C);
  r->lflags = take (&cur, HN_HIER_MAX_STEPS + 1);
  r->fo = take (&cur, m->L);
  r->fenc = take (&cur, m->C);
  r->fn = take (&cur, m->C);
  cur = (cur + 63) & ~(gsize) 63;
  r->logits = take (&cur, (gsize) HN_HIER_VK_CHUNK * m->V);
  r->wk_n = cur;

  cell_prm (m, "h_rnn", m->H, Nh, m->rw, m->ra, m->rg, &r->hp);
  cell_prm (m, "l_rnn", m->L, Nl, m->rwl, m->ral, m->rgl, &r->lp);
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

static void
emit (HnHierVkRunner *r, HnHierOp *op)
{
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
  emit (r, &op);
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

static void
norm (HnHierVkRunner *r, guint32 x, gboolean x_prm, guint32 w, guint32 b, guint32 width, guint32 y, float yclamp,
      guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  HnHierNormPush *p = &op.u.norm;
  p->width = width;
  p->x_off = x;
  p->xsrc = x_prm ? 1 : 0;
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
ew (HnHierVkRunner *r, guint32 opcode, guint32 a, gboolean a_prm, guint32 b, guint32 s, guint32 y, guint32 n, float f0,
    float clamp, guint32 pred)
{
  HnHierOp op = { .kind = HN_HIER_OP_EW };
  op.u.ew = (HnHierEwPush) { n, opcode, a, a_prm ? 1 : 0, b, s, y, f0, clamp, pred };
  emit (r, &op);
}

/* One RWKV-7 style cell step on state st (updated in place), input x [W],
 * deep embedding de [4W]; writes clamp(out, activation_clamp) to y. */
static void
cell (HnHierVkRunner *r, const CellPrm *c, const CellOff *st, guint32 x, guint32 de, guint32 y, guint32 pred)
{
  const HnHierConfig *cfg = &r->m->cfg;
  const CellScratch *s = &r->cs;
  guint32 W = c->W;
  float sc = (float) cfg->recurrent_state_clamp, kc = (float) cfg->rwkv_channel_mix_key_clamp;
  float dc = (float) cfg->rwkv_channel_mix_deepembed_clamp, act = (float) cfg->activation_clamp;

  /* xn = LN1(x) -> tm state; the six token-shift mixes r, w, k, v, a, g */
  HnHierOp op = { .kind = HN_HIER_OP_NORM };
  HnHierNormPush *np = &op.u.norm;
  *np = (HnHierNormPush) { W, x, 0, c->ln1w, c->ln1b, st->tm, 1e-5f, sc, 6, st->tm, s->mix, pred,
                           { c->x_r, c->x_w, c->x_k, c->x_v, c->x_a, c->x_g } };
  emit (r, &op);
  guint32 xr = s->mix, xw = s->mix + W, xk = s->mix + 2 * W, xv = s->mix + 3 * W, xa = s->mix + 4 * W, xg = s->mix + 5 * W;
  linear (r, c->rec, NONE, xr, W, s->r, W, 0, 0, pred);
  linear (r, c->key, NONE, xk, W, s->k, W, 0, 0, pred);
  linear (r, c->val, NONE, xv, W, s->v, W, 0, 0, pred);
  vecmat (r, c->a1, NONE, xa, W, s->la, c->ra, 0, pred);
  vecmat (r, c->w1, NONE, xw, W, s->lw, c->rw, 8 /* tanh */, pred);
  vecmat (r, c->g1, NONE, xg, W, s->lg, c->rg, 7 /* sigmoid */, pred);
  vecmat (r, c->a2, c->a0, s->la, c->ra, s->a, W, 7, pred);
  vecmat (r, c->w2, c->w0, s->lw, c->rw, s->w, W, HN_HIER_ACT_WDECAY, pred);
  vecmat (r, c->g2, NONE, s->lg, c->rg, s->g, W, 0, pred);

  HnHierOp wop = { .kind = HN_HIER_OP_WKV, .groups = W / c->N };
  wop.u.wkv = (HnHierWkvPush) { c->N, s->r, s->k, s->v, s->a, s->g, s->w, c->k_k, c->k_a, c->r_k, c->lnxw, c->lnxb,
                                st->S, st->vf, s->tt, sc, 64e-5f, pred, st->S };
  emit (r, &wop);

  /* mixed = x + W_o t */
  HnHierMatvecPush p = mv_base (c->out, s->tt, W, s->mixed, W);
  p.res_off = x;
  p.pred = pred;
  emit_mv (r, &p);

  /* channel mix: xn2 = LN2(mixed) -> cm state; xk = mix with the old cm */
  *np = (HnHierNormPush) { W, s->mixed, 0, c->ln2w, c->ln2b, st->cm, 1e-5f, sc, 1, st->cm, s->xkc, pred,
                           { c->x_k_cm } };
  emit (r, &op);
  p = mv_base (c->kcm, s->xkc, W, s->f, 4 * W);
  p.post = HN_HIER_POST_CM;
  p.clamp = kc;
  p.aux = de;
  p.f1 = dc;
  p.pred = pred;
  emit_mv (r, &p);
  /* out = mixed + W_value f: the cell output (clamped for the caller) and
   * the out state (clamped to the state clamp) */
  p = mv_base (c->vcm, s->f, 4 * W, y, W);
  p.res_off = s->mixed;
  p.clamp = act;
  p.y2_off = st->out;
  p.clamp2 = sc;
  p.pred = pred;
  emit_mv (r, &p);
}

/* A memory gate F(sigmoid(clamp(logit + router(x), 50))) into y [1]. */
static void
gate (HnHierVkRunner *r, guint32 logit, guint32 rw, guint32 rb, guint32 x, guint32 y, float floor)
{
  HnHierMatvecPush p = mv_base (rw, x, (guint32) r->m->C, y, 1);
  p.b_off = rb;
  p.post = HN_HIER_POST_GATE;
  p.aux = logit;
  p.f1 = floor;
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

static void
halt (HnHierVkRunner *r, int step)
{
  const HnHierConfig *cfg = &r->m->cfg;
  HnHierMatvecPush p = mv_base (r->halt_w, r->hout, (guint32) r->m->H, r->halt_p + step, 1);
  p.b_off = r->halt_b;
  p.post = HN_HIER_POST_HALT;
  p.aux = r->hctl;
  p.y2_off = r->hctl;
  p.flags = step == 0 ? 1 : 0;
  p.u0 = (guint32) cfg->min_h_steps;
  p.f0 = (float) cfg->h_halt_thresh;
  p.f1 = (float) cfg->halt_logit_clamp;
  p.pred = step == 0 ? NONE : r->hctl;
  emit_mv (r, &p);
}

/* The worker's input li = clamp(l_input_proj [enc; ctx + d], state clamp). */
static void
worker_input (HnHierVkRunner *r, guint32 pred)
{
  HnHierModel *m = r->m;
  HnHierMatvecPush p = mv_base (r->l_in_w, r->enc, 2 * (guint32) m->C, r->li, (guint32) m->L);
  p.n0 = (guint32) m->C;
  p.x1 = r->cd;
  p.n1 = (guint32) m->C;
  p.b_off = r->l_in_b;
  p.clamp = (float) m->cfg.recurrent_state_clamp;
  p.pred = pred;
  emit_mv (r, &p);
}

static void
drift (HnHierVkRunner *r, guint32 mode, guint32 d_in, guint32 y, guint32 flag, guint32 pred)
{
  const HnHierConfig *cfg = &r->m->cfg;
  HnHierOp op = { .kind = HN_HIER_OP_DRIFT };
  gboolean fin = mode == HN_HIER_DRIFT_FINAL;
  op.u.drift = (HnHierDriftPush) { (guint32) r->m->C, d_in, r->delta, r->ctx_v, fin ? NONE : r->cd, y,
                                   (float) cfg->drift_state_clamp, (float) cfg->drift_norm_clamp,
                                   (float) cfg->l_conv_atol, mode, flag, (guint32) cfg->max_l_steps + 1, pred };
  emit (r, &op);
}

/* One token at `pos` with ROSA prediction `pred` (-1: none); logits to row t. */
static void
record_token (HnHierVkRunner *r, guint32 token, gint64 pos, gint64 pred, int t)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  guint32 C = (guint32) m->C, H = (guint32) m->H, L = (guint32) m->L;
  float act = (float) cfg->activation_clamp, ctxc = (float) cfg->context_state_clamp;
  float floor = gate_floor (m);

  /* 1. tied embedding, deep embeddings */
  ew (r, HN_HIER_EW_COPY, r->lm_head + token * C, TRUE, NONE, NONE, r->e, C, 0, 0, NONE);
  norm (r, r->e, FALSE, NONE, NONE, C, r->ehat, 0, NONE);
  linear (r, r->hde_down, NONE, r->ehat, C, r->hmid, (guint32) m->rank, 1 /* silu */, 0, NONE);
  linear (r, r->lde_down, NONE, r->ehat, C, r->lmid, (guint32) m->rank, 1, 0, NONE);
  linear (r, r->hde_up, r->hde_bias, r->hmid, (guint32) m->rank, r->hde, 4 * H, 0, 0, NONE);
  linear (r, r->lde_up, r->lde_bias, r->lmid, (guint32) m->rank, r->lde, 4 * L, 0, 0, NONE);

  /* 2. ROSA: x = e + gate * adapter(LN(e[pred])) */
  guint32 x = r->e;
  if (pred >= 0 && pred < m->V)
    {
      norm (r, r->lm_head + (guint32) pred * C, TRUE, NONE, NONE, C, r->fehat, 0, NONE);
      linear (r, r->ra_down, NONE, r->fehat, C, r->ramid, (guint32) m->rank, 1, 0, NONE);
      linear (r, r->ra_up, r->ra_bias, r->ramid, (guint32) m->rank, r->remb, C, 0, 0, NONE);
      gate (r, r->rosa_gate_logit, r->rosa_router_w, r->rosa_router_b, r->e, r->rgate, floor);
      ew (r, HN_HIER_EW_AXPYS, r->e, FALSE, r->remb, r->rgate, r->x, C, 0, 0, NONE);
      x = r->x;
    }

  /* 4. LTM read: q = clamp(qproj [x; prev_context], 12), top-k, gated values */
  HnHierMatvecPush p = mv_base (r->qproj, x, 2 * C, r->q, (guint32) m->K);
  p.n0 = C;
  p.x1 = r->prev;
  p.n1 = C;
  p.clamp = 12.0f;
  emit_mv (r, &p);
  gate (r, r->ltm_gate_logit, r->ltm_router_w, r->ltm_router_b, x, r->lgate, floor);
  HnHierOp lop = { .kind = HN_HIER_OP_LTM };
  lop.u.ltm = (HnHierLtmPush) { (guint32) m->S, (guint32) m->K, (guint32) m->Vd, (guint32) m->topk, r->ltm_keys,
                                r->ltm_vals, r->fast, r->q, r->lgate, r->vals, r->idx, NONE };
  emit (r, &lop);

  /* 5. enc = clamp(GELU(in_proj [x; persistent; values]), 30) */
  guint32 kv = (guint32) (m->topk * m->Vd);
  p = mv_base (r->in_proj_w, x, C + (guint32) m->P + kv, r->enc, C);
  p.n0 = C;
  if (m->P > 0)
    {
      p.x1 = r->persistent;
      p.n1 = (guint32) m->P;
      p.xsrc = 2;
      p.x2 = r->vals;
    }
  else
    {
      p.x1 = r->vals;
      p.n1 = kv;
    }
  p.b_off = r->in_proj_b;
  p.act = 2; /* gelu */
  p.clamp = 30.0f;
  emit_mv (r, &p);

  /* 6. manager: one real step, ponder steps every h_stride tokens */
  p = mv_base (r->l_feedback, r->l.out, L, r->u, H);
  p.res_off = r->enc;
  p.clamp = act;
  emit_mv (r, &p);
  cell (r, &r->hp, &r->h, r->u, r->hde, r->hout, NONE);
  int stride = (int) cfg->h_stride;
  if (pos % stride == 0)
    {
      ew (r, HN_HIER_EW_COPY, r->target, FALSE, NONE, NONE, r->prev, C, 0, 0, NONE);
      halt (r, 0);
      for (int step = 1; step < (int) cfg->max_h_steps; step++)
        {
          /* the shadow steps continue from the committed state; the last
           * computed step is the selected one, so they run in place */
          cell (r, &r->hp, &r->h, r->u, r->hde, r->hout, r->hctl);
          halt (r, step);
        }
      linear (r, r->h_to_ctx_w, r->h_to_ctx_b, r->hout, H, r->target, C, 0, ctxc, NONE);
    }

  /* 7. sliding context */
  float alpha = (float) (pos % stride) / (float) stride;
  ew (r, HN_HIER_EW_LERP, r->prev, FALSE, r->target, NONE, r->ctx_v, C, alpha, ctxc, NONE);

  /* 8. worker with drift refinement on a shadow state */
  linear (r, r->drift_w, NONE, r->l.out, L, r->dr, C, 8 /* tanh */, (float) cfg->drift_state_clamp, NONE);
  drift (r, HN_HIER_DRIFT_START, r->dr, r->d, r->lflags, NONE);
  worker_input (r, NONE);
  ew (r, HN_HIER_EW_COPY, r->l.tm, FALSE, NONE, NONE, r->shadow.tm, r->l.size, 0, 0, NONE);
  for (int i = 0; i < (int) cfg->max_l_steps; i++)
    {
      guint32 on = r->lflags + (guint32) i;
      cell (r, &r->lp, &r->shadow, r->li, r->lde, r->o, on);
      p = mv_base (r->drift_w, r->o, L, r->delta, C);
      p.act = 8;
      p.scale = (float) cfg->drift_delta_scale;
      p.pred = on;
      emit_mv (r, &p);
      drift (r, HN_HIER_DRIFT_REFINE, r->d, r->d, on + 1, on);
      worker_input (r, on);
    }
  cell (r, &r->lp, &r->l, r->li, r->lde, r->fo, NONE);
  p = mv_base (r->l_out_w, r->fo, L, r->fenc, C);
  p.b_off = r->l_out_b;
  p.res_off = r->enc;
  p.clamp = act;
  emit_mv (r, &p);
  drift (r, HN_HIER_DRIFT_FINAL, r->d, r->fdrift, 0, NONE);

  /* 9. logits = lm_head(clamp(LN_out(final_enc), 100)) */
  norm (r, r->fenc, FALSE, r->onw, r->onb, C, r->fn, act, NONE);
  linear (r, r->lm_head, NONE, r->fn, C, r->logits + (guint32) t * (guint32) m->V, (guint32) m->V, 0, 0, NONE);
}

/* ---- state transfer ---- */

static void
pack_cell (float *dst, const HnHierCellState *c, const CellOff *o, int W)
{
  memcpy (dst + o->tm, c->tm, (gsize) W * sizeof (float));
  memcpy (dst + o->cm, c->cm, (gsize) W * sizeof (float));
  memcpy (dst + o->vf, c->vfirst, (gsize) W * sizeof (float));
  memcpy (dst + o->out, c->out, (gsize) W * sizeof (float));
  memcpy (dst + o->S, c->S, (gsize) (o->size - 4 * W) * sizeof (float));
}

static void
unpack_cell (const float *src, HnHierCellState *c, const CellOff *o, int W)
{
  memcpy (c->tm, src + o->tm, (gsize) W * sizeof (float));
  memcpy (c->cm, src + o->cm, (gsize) W * sizeof (float));
  memcpy (c->vfirst, src + o->vf, (gsize) W * sizeof (float));
  memcpy (c->out, src + o->out, (gsize) W * sizeof (float));
  memcpy (c->S, src + o->S, (gsize) (o->size - 4 * W) * sizeof (float));
}

static void
pack_state (HnHierVkRunner *r, const HnHierState *s)
{
  HnHierModel *m = r->m;
  pack_cell (r->pack, &s->h, &r->h, m->H);
  pack_cell (r->pack, &s->l, &r->l, m->L);
  memcpy (r->pack + r->prev, s->prev_context, (gsize) m->C * sizeof (float));
  memcpy (r->pack + r->target, s->target_context, (gsize) m->C * sizeof (float));
  memcpy (r->pack + r->fdrift, s->final_drift, (gsize) m->C * sizeof (float));
}

static void
unpack_state (HnHierVkRunner *r, HnHierState *s)
{
  HnHierModel *m = r->m;
  unpack_cell (r->pack, &s->h, &r->h, m->H);
  unpack_cell (r->pack, &s->l, &r->l, m->L);
  memcpy (s->prev_context, r->pack + r->prev, (gsize) m->C * sizeof (float));
  memcpy (s->target_context, r->pack + r->target, (gsize) m->C * sizeof (float));
  memcpy (s->final_drift, r->pack + r->fdrift, (gsize) m->C * sizeof (float));
}

static gboolean
wk_upload (HnHierVkRunner *r, guint32 at, const float *src, gsize n, GError **error)
{
  if (!r->ctx)
    {
      memcpy (r->host_wk + at, src, n * sizeof (float));
      return TRUE;
    }
  return hn_vk_buffer_upload (r->wk, (guint64) at * sizeof (float), src, n * sizeof (float), error);
}

static gboolean
wk_download (HnHierVkRunner *r, guint32 at, float *dst, gsize n, GError **error)
{
  if (!r->ctx)
    {
      memcpy (dst, r->host_wk + at, n * sizeof (float));
      return TRUE;
    }
  return hn_vk_buffer_download (r->wk, (guint64) at * sizeof (float), dst, n * sizeof (float), error);
}

/* ---- the runner ---- */

static HnHierVkRunner *
runner_alloc (HnHierModel *m, GError **error)
{
  if (!check_limits (m, error))
    return NULL;
  HnHierVkRunner *r = g_new0 (HnHierVkRunner, 1);
  r->m = m;
  r->prog = g_array_new (FALSE, FALSE, sizeof (HnHierOp));
  layout (r);
  r->pack = g_new0 (float, r->state_n);
  r->fast_sent = g_new0 (float, (gsize) m->S * m->Vd);
  return r;
}

HnHierVkRunner *
hn_hier_vk_runner_new (HnHierModel *m, HnVkContext *ctx, GError **error)
{
  if (m->n_params > G_MAXUINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "the Vulkan Hierarchos runtime addresses at most 2^32 parameters");
      return NULL;
    }
  g_autoptr (HnHierVkRunner) r = runner_alloc (m, error);
  if (!r)
    return NULL;
  r->ctx = hn_vk_context_ref (ctx);
  r->prm = hn_vk_buffer_new (ctx, (guint64) m->n_params * sizeof (float), "Hierarchos parameters", error);
  if (!r->prm)
    return NULL;
  r->wk = hn_vk_buffer_new (ctx, (guint64) r->wk_n * sizeof (float), "Hierarchos work buffer", error);
  if (!r->wk)
    return NULL;
  r->cmd = hn_cmd_new (ctx, error);
  if (!r->cmd)
    return NULL;
  if (!hn_hier_vk_runner_upload_params (r, error))
    return NULL;
  /* Zero the work buffer once (scratch never read before written, but
   * the control words and logits rows are clean). */
  g_autofree float *zeros = g_new0 (float, r->wk_n);
  if (!hn_vk_buffer_upload (r->wk, 0, zeros, (guint64) r->wk_n * sizeof (float), error))
    return NULL;
  return g_steal_pointer (&r);
}

gboolean
hn_hier_vk_device_bytes (HnHierModel *m, guint64 *bytes, GError **error)
{
  /* the two buffers hn_hier_vk_runner_new allocates, laid out without a device */
  HnHierVkRunner *r = runner_alloc (m, error);
  if (!r)
    return FALSE;
  *bytes = ((guint64) m->n_params + r->wk_n) * sizeof (float);
  hn_hier_vk_runner_free (r);
  return TRUE;
}

HnHierVkRunner *
hn_hier_vk_runner_new_reference (HnHierModel *m, GError **error)
{
  HnHierVkRunner *r = runner_alloc (m, error);
  if (r)
    r->host_wk = g_new0 (float, r->wk_n);
  return r;
}

gboolean
hn_hier_vk_runner_upload_params (HnHierVkRunner *r, GError **error)
{
  if (!r->ctx)
    return TRUE; /* the references read m->params directly */
  return hn_vk_buffer_upload (r->prm, 0, r->m->params, (guint64) r->m->n_params * sizeof (float), error);
}

void
hn_hier_vk_runner_free (HnHierVkRunner *r)
{
  if (!r)
    return;
  if (r->cmd)
    hn_cmd_free (r->cmd);
  if (r->prm)
    hn_vk_buffer_unref (r->prm);
  if (r->wk)
    hn_vk_buffer_unref (r->wk);
  if (r->ctx)
    hn_vk_context_unref (r->ctx);
  g_array_unref (r->prog);
  g_free (r->host_wk);
  g_free (r->pack);
  g_free (r->fast_sent);
  g_free (r);
}

guint
hn_hier_vk_runner_get_n_ops (HnHierVkRunner *r)
{
  return r->n_ops;
}

static gboolean
run_program (HnHierVkRunner *r, GError **error)
{
  r->n_ops = r->prog->len;
  if (!r->ctx)
    {
      for (guint i = 0; i < r->prog->len; i++)
        hn_hier_op_ref (&g_array_index (r->prog, HnHierOp, i), r->m->params, r->host_wk);
      return TRUE;
    }
  for (guint i = 0; i < r->prog->len; i++)
    if (!hn_hier_op_record (r->cmd, &g_array_index (r->prog, HnHierOp, i), r->prm, r->wk, error))
      {
        hn_cmd_reset (r->cmd);
        return FALSE;
      }
  return hn_cmd_submit_wait (r->cmd, error);
}

/* One chunk of n <= HN_HIER_VK_CHUNK tokens. */
static gboolean
run_chunk (HnHierVkRunner *r, HnHierState *s, const guint32 *tokens, int n, float *logits, float *last, GError **error)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  gsize cap = cfg->enforce_rosa_max_context ? (gsize) cfg->rosa_max_context : 0;
  gsize nfast = (gsize) m->S * m->Vd;
  pack_state (r, s);
  if (!wk_upload (r, 0, r->pack, r->state_n, error))
    return FALSE;
  if (!r->fast_valid || memcmp (r->fast_sent, s->fast_vals, nfast * sizeof (float)) != 0)
    {
      if (!wk_upload (r, r->fast, s->fast_vals, nfast, error))
        return FALSE;
      memcpy (r->fast_sent, s->fast_vals, nfast * sizeof (float));
      r->fast_valid = TRUE;
    }
  /* The automaton advances on a copy: the caller's state changes only when
   * the whole chunk succeeded. */
  HnHierRosa rosa;
  hn_hier_rosa_init (&rosa);
  hn_hier_rosa_copy (&rosa, &s->rosa);
  g_array_set_size (r->prog, 0);
  for (int t = 0; t < n; t++)
    {
      gint64 pred = hn_hier_rosa_predict_and_push (&rosa, tokens[t], cap);
      record_token (r, tokens[t], s->position + t, pred, t);
    }
  g_autofree float *rows = logits ? NULL : g_new (float, (gsize) n * m->V);
  float *out = logits ? logits : rows;
  gboolean ok = run_program (r, error) && wk_download (r, r->logits, out, (gsize) n * m->V, error) &&
                wk_download (r, 0, r->pack, r->state_n, error);
  for (gsize i = 0; ok && i < (gsize) n * m->V; i++)
    if (!isfinite (out[i]))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                     "non-finite logit at position %" G_GINT64_FORMAT " (token %u); refusing to sanitize coherent-v9 output",
                     s->position + (gint64) (i / (gsize) m->V), tokens[i / (gsize) m->V]);
        ok = FALSE;
      }
  if (!ok)
    {
      hn_hier_rosa_clear (&rosa);
      return FALSE;
    }
  unpack_state (r, s);
  hn_hier_rosa_copy (&s->rosa, &rosa);
  hn_hier_rosa_clear (&rosa);
  g_array_append_vals (s->history, tokens, (guint) n);
  s->position += n;
  if (last)
    memcpy (last, out + (gsize) (n - 1) * m->V, (gsize) m->V * sizeof (float));
  return TRUE;
}

gboolean
hn_hier_vk_runner_steps (HnHierVkRunner *r, HnHierState *s, const guint32 *tokens, gsize n, float *logits,
                         float *last, GError **error)
{
  HnHierModel *m = r->m;
  for (gsize i = 0; i < n; i++)
    if (tokens[i] >= (guint32) m->V)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %u is outside the vocabulary (%d)", tokens[i], m->V);
        return FALSE;
      }
  for (gsize i = 0; i < n; i += HN_HIER_VK_CHUNK)
    {
      int k = (int) MIN ((gsize) HN_HIER_VK_CHUNK, n - i);
      if (!run_chunk (r, s, tokens + i, k, logits ? logits + i * m->V : NULL, i + (gsize) k == n ? last : NULL, error))
        return FALSE;
    }
  return TRUE;
}
