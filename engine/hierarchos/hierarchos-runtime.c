/* The coherent-v9 token step, written once on the CPU tape: the inference
 * runner executes it without recording gradients, the trainer records them.
 * Follows the native runtime (Hierarchos-Native model.rs / rwkv.rs) op for
 * op, including where clamps sit. */
#include "hierarchos/hierarchos-private.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

/* ---- parameter indices ---- */

static HnVar
pidx (HnHierModel *m, const char *name)
{
  HnHierParam *p = hn_hier_model_param (m, name);
  g_assert (p != NULL);
  for (guint i = 0; i < m->param_list->len; i++)
    if (m->param_list->pdata[i] == p)
      return (HnVar) i;
  g_assert_not_reached ();
}

static HnVar
cidx (HnHierModel *m, const char *pre, const char *name)
{
  g_autofree char *n = g_strdup_printf ("%s.%s", pre, name);
  return pidx (m, n);
}

static void
resolve_cell (HnHierModel *m, const char *pre, int W, int N, int rw, int ra, int rg, HnHierCellIdx *c)
{
  c->W = W;
  c->N = N;
  c->heads = W / N;
  c->rw = rw;
  c->ra = ra;
  c->rg = rg;
  c->x_r = cidx (m, pre, "x_r");
  c->x_w = cidx (m, pre, "x_w");
  c->x_k = cidx (m, pre, "x_k");
  c->x_v = cidx (m, pre, "x_v");
  c->x_a = cidx (m, pre, "x_a");
  c->x_g = cidx (m, pre, "x_g");
  c->w1 = cidx (m, pre, "w1");
  c->w2 = cidx (m, pre, "w2");
  c->w0 = cidx (m, pre, "w0");
  c->a1 = cidx (m, pre, "a1");
  c->a2 = cidx (m, pre, "a2");
  c->a0 = cidx (m, pre, "a0");
  c->g1 = cidx (m, pre, "g1");
  c->g2 = cidx (m, pre, "g2");
  c->k_k = cidx (m, pre, "k_k");
  c->k_a = cidx (m, pre, "k_a");
  c->r_k = cidx (m, pre, "r_k");
  c->x_k_cm = cidx (m, pre, "x_k_cm");
  c->ln1w = cidx (m, pre, "ln1.weight");
  c->ln1b = cidx (m, pre, "ln1.bias");
  c->ln2w = cidx (m, pre, "ln2.weight");
  c->ln2b = cidx (m, pre, "ln2.bias");
  c->lnxw = cidx (m, pre, "ln_x.weight");
  c->lnxb = cidx (m, pre, "ln_x.bias");
  c->rec = cidx (m, pre, "receptance.weight");
  c->key = cidx (m, pre, "key.weight");
  c->val = cidx (m, pre, "value.weight");
  c->out = cidx (m, pre, "output.weight");
  c->kcm = cidx (m, pre, "key_cm.weight");
  c->vcm = cidx (m, pre, "value_cm.weight");
}

void
hn_hier_tape_params (HnHTape *t, HnHierModel *m, float *grads, HnHierIdx *ix)
{
  g_assert (t->nodes->len == 0);
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      hn_htape_leaf (t, m->params + p->offset, grads && p->trainable ? grads + p->offset : NULL, (int) p->numel);
    }
  t->n_params = (int) m->param_list->len;
  ix->lm_head = pidx (m, "lm_head.weight");
  ix->hde_down = pidx (m, "h_deepembed_adapter.down.weight");
  ix->hde_up = pidx (m, "h_deepembed_adapter.up.weight");
  ix->hde_bias = pidx (m, "h_deepembed_adapter.bias");
  ix->lde_down = pidx (m, "l_deepembed_adapter.down.weight");
  ix->lde_up = pidx (m, "l_deepembed_adapter.up.weight");
  ix->lde_bias = pidx (m, "l_deepembed_adapter.bias");
  ix->ra_down = pidx (m, "rosa_adapter.down.weight");
  ix->ra_up = pidx (m, "rosa_adapter.up.weight");
  ix->ra_bias = pidx (m, "rosa_adapter.bias");
  ix->rosa_gate_logit = pidx (m, "rosa_gate_logit");
  ix->rosa_router_w = pidx (m, "rosa_router.weight");
  ix->rosa_router_b = pidx (m, "rosa_router.bias");
  ix->ltm_gate_logit = pidx (m, "ltm_gate_logit");
  ix->ltm_router_w = pidx (m, "ltm_router.weight");
  ix->ltm_router_b = pidx (m, "ltm_router.bias");
  ix->warmup_step = pidx (m, "memory_gate_warmup_step");
  ix->persistent = m->P > 0 ? pidx (m, "persistent") : -1;
  ix->ltm_keys = pidx (m, "ltm.keys");
  ix->ltm_vals = pidx (m, "ltm.vals");
  ix->qproj = pidx (m, "qproj.weight");
  ix->in_proj_w = pidx (m, "in_proj.weight");
  ix->in_proj_b = pidx (m, "in_proj.bias");
  ix->l_feedback = pidx (m, "l_feedback_proj.weight");
  ix->h_to_ctx_w = pidx (m, "h_to_context.weight");
  ix->h_to_ctx_b = pidx (m, "h_to_context.bias");
  ix->halt_w = pidx (m, "h_halt_proj.weight");
  ix->halt_b = pidx (m, "h_halt_proj.bias");
  ix->l_in_w = pidx (m, "l_input_proj.weight");
  ix->l_in_b = pidx (m, "l_input_proj.bias");
  ix->drift_w = pidx (m, "context_drift_proj.weight");
  ix->l_out_w = pidx (m, "l_to_out.weight");
  ix->l_out_b = pidx (m, "l_to_out.bias");
  ix->onw = pidx (m, "out_norm.weight");
  ix->onb = pidx (m, "out_norm.bias");
  resolve_cell (m, "h_rnn", m->H, (int) m->cfg.h_rwkv_head_size, m->rw, m->ra, m->rg, &ix->h);
  resolve_cell (m, "l_rnn", m->L, (int) m->cfg.l_rwkv_head_size, m->rwl, m->ral, m->rgl, &ix->l);
}

/* ---- state ---- */

static void
cell_alloc (HnHierCellState *c, int W, int N)
{
  c->tm = g_new0 (float, W);
  c->cm = g_new0 (float, W);
  c->vfirst = g_new0 (float, W);
  c->out = g_new0 (float, W);
  c->S = g_new0 (float, (gsize) W * N);
}

static void
cell_free (HnHierCellState *c)
{
  g_free (c->tm);
  g_free (c->cm);
  g_free (c->vfirst);
  g_free (c->out);
  g_free (c->S);
}

HnHierState *
hn_hier_state_new (const HnHierModel *m)
{
  HnHierState *s = g_new0 (HnHierState, 1);
  cell_alloc (&s->h, m->H, (int) m->cfg.h_rwkv_head_size);
  cell_alloc (&s->l, m->L, (int) m->cfg.l_rwkv_head_size);
  s->prev_context = g_new0 (float, m->C);
  s->target_context = g_new0 (float, m->C);
  s->final_drift = g_new0 (float, m->C);
  s->fast_vals = g_new0 (float, (gsize) m->S * m->Vd);
  hn_hier_rosa_init (&s->rosa);
  s->history = g_array_new (FALSE, FALSE, sizeof (guint32));
  hn_hier_state_reset (m, s);
  return s;
}

void
hn_hier_state_free (HnHierState *s)
{
  if (!s)
    return;
  cell_free (&s->h);
  cell_free (&s->l);
  g_free (s->prev_context);
  g_free (s->target_context);
  g_free (s->final_drift);
  g_free (s->fast_vals);
  hn_hier_rosa_clear (&s->rosa);
  g_array_unref (s->history);
  g_free (s);
}

static void
cell_zero (HnHierCellState *c, int W, int N)
{
  memset (c->tm, 0, (gsize) W * sizeof (float));
  memset (c->cm, 0, (gsize) W * sizeof (float));
  memset (c->vfirst, 0, (gsize) W * sizeof (float));
  memset (c->out, 0, (gsize) W * sizeof (float));
  memset (c->S, 0, (gsize) W * N * sizeof (float));
}

void
hn_hier_state_reset (const HnHierModel *m, HnHierState *s)
{
  cell_zero (&s->h, m->H, (int) m->cfg.h_rwkv_head_size);
  cell_zero (&s->l, m->L, (int) m->cfg.l_rwkv_head_size);
  memset (s->prev_context, 0, (gsize) m->C * sizeof (float));
  memset (s->target_context, 0, (gsize) m->C * sizeof (float));
  memset (s->final_drift, 0, (gsize) m->C * sizeof (float));
  /* Fast values start from the stored buffer (zeros for fresh models). */
  HnHierParam *fv = g_hash_table_lookup (m->by_name, "ltm.fast_vals");
  memcpy (s->fast_vals, m->params + fv->offset, (gsize) m->S * m->Vd * sizeof (float));
  hn_hier_rosa_reset (&s->rosa);
  g_array_set_size (s->history, 0);
  s->position = 0;
}

static void
cell_copy (HnHierCellState *d, const HnHierCellState *s, int W, int N)
{
  memcpy (d->tm, s->tm, (gsize) W * sizeof (float));
  memcpy (d->cm, s->cm, (gsize) W * sizeof (float));
  memcpy (d->vfirst, s->vfirst, (gsize) W * sizeof (float));
  memcpy (d->out, s->out, (gsize) W * sizeof (float));
  memcpy (d->S, s->S, (gsize) W * N * sizeof (float));
}

void
hn_hier_state_copy (const HnHierModel *m, HnHierState *d, const HnHierState *s)
{
  cell_copy (&d->h, &s->h, m->H, (int) m->cfg.h_rwkv_head_size);
  cell_copy (&d->l, &s->l, m->L, (int) m->cfg.l_rwkv_head_size);
  memcpy (d->prev_context, s->prev_context, (gsize) m->C * sizeof (float));
  memcpy (d->target_context, s->target_context, (gsize) m->C * sizeof (float));
  memcpy (d->final_drift, s->final_drift, (gsize) m->C * sizeof (float));
  memcpy (d->fast_vals, s->fast_vals, (gsize) m->S * m->Vd * sizeof (float));
  hn_hier_rosa_copy (&d->rosa, &s->rosa);
  g_array_set_size (d->history, s->history->len);
  if (s->history->len)
    memcpy (d->history->data, s->history->data, (gsize) s->history->len * sizeof (guint32));
  d->position = s->position;
}

static void
vcell_load (HnHTape *t, const HnHierCellState *c, int W, int N, HnHierVCell *v)
{
  v->tm = hn_htape_const (t, c->tm, W);
  v->cm = hn_htape_const (t, c->cm, W);
  v->vf = hn_htape_const (t, c->vfirst, W);
  v->out = hn_htape_const (t, c->out, W);
  v->S = hn_htape_const (t, c->S, W * N);
}

void
hn_hier_vstate_load (HnHTape *t, const HnHierModel *m, const HnHierState *s, HnHierVState *vs)
{
  vcell_load (t, &s->h, m->H, (int) m->cfg.h_rwkv_head_size, &vs->h);
  vcell_load (t, &s->l, m->L, (int) m->cfg.l_rwkv_head_size, &vs->l);
  vs->prev_ctx = hn_htape_const (t, s->prev_context, m->C);
  vs->target_ctx = hn_htape_const (t, s->target_context, m->C);
  vs->final_drift = hn_htape_const (t, s->final_drift, m->C);
}

static void
vcell_store (HnHTape *t, const HnHierVCell *v, HnHierCellState *c, int W, int N)
{
  memcpy (c->tm, hn_htape_val (t, v->tm), (gsize) W * sizeof (float));
  memcpy (c->cm, hn_htape_val (t, v->cm), (gsize) W * sizeof (float));
  memcpy (c->vfirst, hn_htape_val (t, v->vf), (gsize) W * sizeof (float));
  memcpy (c->out, hn_htape_val (t, v->out), (gsize) W * sizeof (float));
  memcpy (c->S, hn_htape_val (t, v->S), (gsize) W * N * sizeof (float));
}

void
hn_hier_vstate_store (HnHTape *t, const HnHierModel *m, const HnHierVState *vs, HnHierState *s)
{
  vcell_store (t, &vs->h, &s->h, m->H, (int) m->cfg.h_rwkv_head_size);
  vcell_store (t, &vs->l, &s->l, m->L, (int) m->cfg.l_rwkv_head_size);
  memcpy (s->prev_context, hn_htape_val (t, vs->prev_ctx), (gsize) m->C * sizeof (float));
  memcpy (s->target_context, hn_htape_val (t, vs->target_ctx), (gsize) m->C * sizeof (float));
  memcpy (s->final_drift, hn_htape_val (t, vs->final_drift), (gsize) m->C * sizeof (float));
}

static HnVar
detach (HnHTape *t, HnVar v)
{
  return hn_htape_const (t, hn_htape_val (t, v), hn_htape_node (t, v)->n);
}

void
hn_hier_vstate_detach (HnHTape *t, HnHierVState *vs)
{
  HnHierVCell *cells[2] = { &vs->h, &vs->l };
  for (int i = 0; i < 2; i++)
    {
      cells[i]->tm = detach (t, cells[i]->tm);
      cells[i]->cm = detach (t, cells[i]->cm);
      cells[i]->vf = detach (t, cells[i]->vf);
      cells[i]->out = detach (t, cells[i]->out);
      cells[i]->S = detach (t, cells[i]->S);
    }
  vs->prev_ctx = detach (t, vs->prev_ctx);
  vs->target_ctx = detach (t, vs->target_ctx);
  vs->final_drift = detach (t, vs->final_drift);
}

/* ---- the RWKV-7 style cell ---- */

static HnVar
cell_step (HnHTape *t, const HnHierConfig *cfg, const HnHierCellIdx *c, HnVar x, const HnHierVCell *st, HnVar de,
           HnHierVCell *ns)
{
  int W = c->W, heads = c->heads;
  float sc = (float) cfg->recurrent_state_clamp;
  float kc = (float) cfg->rwkv_channel_mix_key_clamp, dc = (float) cfg->rwkv_channel_mix_deepembed_clamp;

  HnVar xn = hn_htape_ln (t, x, c->ln1w, c->ln1b, 1e-5f);
  HnVar xr = hn_htape_mix (t, xn, st->tm, c->x_r);
  HnVar xw = hn_htape_mix (t, xn, st->tm, c->x_w);
  HnVar xk = hn_htape_mix (t, xn, st->tm, c->x_k);
  HnVar xv = hn_htape_mix (t, xn, st->tm, c->x_v);
  HnVar xa = hn_htape_mix (t, xn, st->tm, c->x_a);
  HnVar xg = hn_htape_mix (t, xn, st->tm, c->x_g);
  HnVar r = hn_htape_linear (t, c->rec, xr, -1, W, W);
  HnVar k = hn_htape_linear (t, c->key, xk, -1, W, W);
  HnVar v = hn_htape_linear (t, c->val, xv, -1, W, W);
  HnVar a = hn_htape_sigmoid (t, hn_htape_add (t, c->a0, hn_htape_vecmat (t, hn_htape_vecmat (t, xa, c->a1, W, c->ra), c->a2, c->ra, W)));
  HnVar g = hn_htape_vecmat (t, hn_htape_sigmoid (t, hn_htape_vecmat (t, xg, c->g1, W, c->rg)), c->g2, c->rg, W);
  HnVar w = hn_htape_wdecay (t, hn_htape_add (t, c->w0, hn_htape_vecmat (t, hn_htape_tanh (t, hn_htape_vecmat (t, xw, c->w1, W, c->rw)), c->w2, c->rw, W)));
  HnVar kk = hn_htape_headnorm (t, hn_htape_mul (t, k, c->k_k), heads);
  HnVar k2 = hn_htape_mul (t, k, hn_htape_addc (t, hn_htape_mul (t, hn_htape_addc (t, a, -1.0f), c->k_a), 1.0f));
  HnVar S = hn_htape_wkv (t, st->S, w, k2, v, kk, a, heads, c->N);
  HnVar y = hn_htape_wkvread (t, S, r, heads, c->N);
  HnVar tt = hn_htape_gn (t, y, c->lnxw, c->lnxb, heads, 64e-5f);
  tt = hn_htape_bonus (t, tt, r, k2, c->r_k, v, heads);
  tt = hn_htape_mul (t, tt, g);
  HnVar mixed = hn_htape_add (t, x, hn_htape_linear (t, c->out, tt, -1, W, W));

  HnVar xn2 = hn_htape_ln (t, mixed, c->ln2w, c->ln2b, 1e-5f);
  HnVar xkc = hn_htape_mix (t, xn2, st->cm, c->x_k_cm);
  HnVar key = hn_htape_linear (t, c->kcm, xkc, -1, 4 * W, W);
  if (kc > 0)
    key = hn_htape_clamp (t, key, kc);
  HnVar f = hn_htape_relusq (t, key);
  if (de >= 0)
    {
      HnVar d = dc > 0 ? hn_htape_clamp (t, de, dc) : de;
      f = hn_htape_mul (t, f, d);
      if (kc > 0 && dc > 0)
        f = hn_htape_clamp (t, f, kc * kc * dc);
    }
  HnVar out = hn_htape_add (t, mixed, hn_htape_linear (t, c->vcm, f, -1, W, 4 * W));

  ns->tm = hn_htape_clamp (t, xn, sc);
  ns->cm = hn_htape_clamp (t, xn2, sc);
  ns->vf = hn_htape_clamp (t, v, sc);
  ns->out = hn_htape_clamp (t, out, sc);
  ns->S = hn_htape_clamp (t, S, sc);
  return out;
}

/* ---- helpers ---- */

static HnVar
adapter (HnHTape *t, HnVar down, HnVar up, HnVar bias, HnVar xnorm, int in, int rank, int out)
{
  HnVar h = hn_htape_silu (t, hn_htape_linear (t, down, xnorm, -1, rank, in));
  return hn_htape_linear (t, up, h, bias, out, rank);
}

static float
gate_floor (HnHTape *t, HnHierModel *m, const HnHierIdx *ix)
{
  double steps = (double) m->cfg.memory_gate_warmup_steps, floor = m->cfg.memory_gate_warmup_floor;
  if (steps <= 0 || floor <= 0)
    return 0.0f;
  floor = CLAMP (floor, 0.0, 0.95);
  double progress = CLAMP (hn_htape_val (t, ix->warmup_step)[0] / steps, 0.0, 1.0);
  return (float) (floor * (1.0 - progress));
}

static HnVar
memory_gate (HnHTape *t, HnVar logit, HnVar router_w, HnVar router_b, HnVar x, int C, float floor)
{
  HnVar r = hn_htape_linear (t, router_w, x, router_b, 1, C);
  HnVar g = hn_htape_sigmoid (t, hn_htape_clamp (t, hn_htape_add (t, logit, r), 50.0f));
  if (floor > 0)
    g = hn_htape_addc (t, hn_htape_scale (t, g, 1.0f - floor), floor);
  return g;
}

/* Hard top-k over the score values; ties go to the lower slot. NaN = -inf. */
static int
ltm_topk (const HnHierModel *m, const float *keys, const float *q, int *idx)
{
  int S = m->S, K = m->K, k = m->topk;
  float scale = 1.0f / sqrtf ((float) K);
  float best[k];
  int n = 0;
  for (int s = 0; s < S; s++)
    {
      const float *row = keys + (gsize) s * K;
      float d = 0;
      for (int i = 0; i < K; i++)
        d += q[i] * row[i];
      d *= scale;
      if (isnan (d))
        d = -INFINITY;
      if (n < k || d > best[n - 1])
        {
          int pos = n < k ? n++ : k - 1;
          while (pos > 0 && best[pos - 1] < d)
            {
              best[pos] = best[pos - 1];
              idx[pos] = idx[pos - 1];
              pos--;
            }
          best[pos] = d;
          idx[pos] = s;
        }
    }
  return n;
}

gboolean
hn_hier_forward_step (HnHTape *t, HnHierModel *m, const HnHierIdx *ix, HnHierVState *vs, HnHierState *s,
                      guint32 token, HnHierStepOut *out, GError **error)
{
  const HnHierConfig *cfg = &m->cfg;
  int C = m->C, L = m->L, H = m->H;
  float act = (float) cfg->activation_clamp, ctxc = (float) cfg->context_state_clamp;
  float dsc = (float) cfg->drift_state_clamp, dnc = (float) cfg->drift_norm_clamp;
  float rsc = (float) cfg->recurrent_state_clamp;
  memset (out, 0, sizeof *out);
  out->logits = -1;
  if (token >= (guint32) m->V)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %u is outside the vocabulary (%d)", token, m->V);
      return FALSE;
    }

  /* 1. tied embedding and deep embeddings */
  HnVar e = hn_htape_row (t, ix->lm_head, (int) token, C);
  HnVar ehat = hn_htape_ln (t, e, -1, -1, 1e-5f);
  HnVar hde = adapter (t, ix->hde_down, ix->hde_up, ix->hde_bias, ehat, C, m->rank, 4 * H);
  HnVar lde = adapter (t, ix->lde_down, ix->lde_up, ix->lde_bias, ehat, C, m->rank, 4 * L);
  float floor = gate_floor (t, m, ix);

  /* 2. ROSA */
  HnVar x = e;
  gsize cap = cfg->enforce_rosa_max_context ? (gsize) cfg->rosa_max_context : 0;
  gint64 pred = hn_hier_rosa_predict_and_push (&s->rosa, token, cap);
  if (pred >= 0 && pred < m->V)
    {
      HnVar fe = hn_htape_row (t, ix->lm_head, (int) pred, C);
      HnVar remb = adapter (t, ix->ra_down, ix->ra_up, ix->ra_bias, hn_htape_ln (t, fe, -1, -1, 1e-5f), C, m->rank, C);
      HnVar gate = memory_gate (t, ix->rosa_gate_logit, ix->rosa_router_w, ix->rosa_router_b, e, C, floor);
      x = hn_htape_add (t, e, hn_htape_muls (t, remb, gate));
    }

  /* 4. LTM read */
  HnVar qin[2] = { x, vs->prev_ctx };
  HnVar q = hn_htape_clamp (t, hn_htape_linear (t, ix->qproj, hn_htape_concat (t, 2, qin), -1, m->K, 2 * C), 12.0f);
  int idx[m->topk];
  int n_idx = ltm_topk (m, hn_htape_val (t, ix->ltm_keys), hn_htape_val (t, q), idx);
  HnVar vals = hn_htape_gather (t, ix->ltm_vals, s->fast_vals, idx, n_idx, m->topk, m->Vd);
  HnVar lgate = memory_gate (t, ix->ltm_gate_logit, ix->ltm_router_w, ix->ltm_router_b, x, C, floor);
  vals = hn_htape_muls (t, vals, lgate);

  /* 5. encoder */
  HnVar ein[3] = { x, ix->persistent, vals };
  HnVar enc_in = ix->persistent >= 0 ? hn_htape_concat (t, 3, ein) : hn_htape_concat (t, 2, (HnVar[]) { x, vals });
  int in_w = C + m->P + m->topk * m->Vd;
  HnVar enc = hn_htape_clamp (t, hn_htape_gelu (t, hn_htape_linear (t, ix->in_proj_w, enc_in, ix->in_proj_b, C, in_w)), 30.0f);

  /* 6. manager */
  HnVar u = hn_htape_clamp (t, hn_htape_add (t, enc, hn_htape_linear (t, ix->l_feedback, vs->l.out, -1, H, L)), act);
  HnHierVCell hst;
  HnVar hout = hn_htape_clamp (t, cell_step (t, cfg, &ix->h, u, &vs->h, hde, &hst), act);
  vs->h = hst;
  gint64 pos = s->position;
  int stride = (int) cfg->h_stride;
  if (pos % stride == 0)
    {
      vs->prev_ctx = vs->target_ctx;
      int max_h = (int) cfg->max_h_steps, min_h = (int) cfg->min_h_steps;
      float hlc = (float) cfg->halt_logit_clamp, thr = (float) cfg->h_halt_thresh;
      HnVar outs[HN_HIER_MAX_STEPS];
      HnHierVCell states[HN_HIER_MAX_STEPS];
      outs[0] = hout;
      states[0] = vs->h;
#define HALT(o) hn_htape_clamp2 (t, hn_htape_sigmoid (t, hn_htape_clamp (t, hn_htape_linear (t, ix->halt_w, o, ix->halt_b, 1, H), hlc)), 1e-6f, 1.0f - 1e-6f)
      out->halt_p[0] = HALT (hout);
      float survival = 1.0f - hn_htape_val (t, out->halt_p[0])[0];
      gboolean halted = min_h <= 1 && (1.0f - survival) >= thr;
      HnHierVCell shadow = vs->h;
      int n = 1;
      for (int step = 0; step < max_h - 1 && !halted; step++)
        {
          HnHierVCell next;
          HnVar po = hn_htape_clamp (t, cell_step (t, cfg, &ix->h, u, &shadow, hde, &next), act);
          shadow = next;
          out->halt_p[n] = HALT (po);
          outs[n] = po;
          states[n] = shadow;
          survival *= 1.0f - hn_htape_val (t, out->halt_p[n])[0];
          n++;
          if (n >= min_h && (1.0f - survival) >= thr)
            halted = TRUE;
        }
#undef HALT
      int sel = n - 1;
      float cs = 1.0f;
      for (int i = 0; i < n; i++)
        {
          cs *= 1.0f - hn_htape_val (t, out->halt_p[i])[0];
          if (i + 1 >= min_h && (1.0f - cs) >= thr)
            {
              sel = i;
              break;
            }
        }
      vs->h = states[sel];
      HnVar fh = hn_htape_clamp (t, outs[sel], act);
      vs->target_ctx = hn_htape_clamp (t, hn_htape_linear (t, ix->h_to_ctx_w, fh, ix->h_to_ctx_b, C, H), ctxc);
      out->pondered = TRUE;
      out->n_h = n;
      out->selected = sel;
    }

  /* 7. sliding context */
  float alpha = (float) (pos % stride) / (float) stride;
  HnVar ctx = hn_htape_clamp (t, hn_htape_add (t, vs->prev_ctx, hn_htape_scale (t, hn_htape_sub (t, vs->target_ctx, vs->prev_ctx), alpha)), ctxc);

  /* 8. worker with drift refinement */
  HnVar d = hn_htape_l2clamp (t, hn_htape_clamp (t, hn_htape_tanh (t, hn_htape_linear (t, ix->drift_w, vs->l.out, -1, C, L)), dsc), dnc);
  d = hn_htape_l2clamp (t, hn_htape_clamp (t, d, dsc), dnc);
#define LIN(dd) hn_htape_clamp (t, hn_htape_linear (t, ix->l_in_w, hn_htape_concat (t, 2, (HnVar[]) { enc, hn_htape_add (t, ctx, dd) }), ix->l_in_b, L, 2 * C), rsc)
  HnVar li = LIN (d);
  HnHierVCell shadow = vs->l;
  int max_l = (int) cfg->max_l_steps;
  float dds = (float) cfg->drift_delta_scale, atol = (float) cfg->l_conv_atol;
  for (int i = 0; i < max_l; i++)
    {
      HnHierVCell cand;
      HnVar o = hn_htape_clamp (t, cell_step (t, cfg, &ix->l, li, &shadow, lde, &cand), act);
      HnVar delta = hn_htape_scale (t, hn_htape_tanh (t, hn_htape_linear (t, ix->drift_w, o, -1, C, L)), dds);
      d = hn_htape_l2clamp (t, hn_htape_clamp (t, hn_htape_add (t, d, delta), dsc), dnc);
      out->drift[out->n_refine++] = d;
      shadow = cand;
      li = LIN (d);
      const float *dv = hn_htape_val (t, delta);
      float ma = 0;
      for (int j = 0; j < C; j++)
        ma += fabsf (dv[j]);
      if (ma / (float) C < atol)
        break;
    }
#undef LIN
  HnHierVCell lst;
  HnVar fo = hn_htape_clamp (t, cell_step (t, cfg, &ix->l, li, &vs->l, lde, &lst), act);
  vs->l = lst;
  HnVar final_enc = hn_htape_clamp (t, hn_htape_add (t, enc, hn_htape_linear (t, ix->l_out_w, fo, ix->l_out_b, C, L)), act);
  vs->final_drift = hn_htape_l2clamp (t, hn_htape_clamp (t, d, dsc), dnc);

  /* 9. logits */
  HnVar fn = hn_htape_clamp (t, hn_htape_ln (t, final_enc, ix->onw, ix->onb, 1e-5f), act);
  out->logits = hn_htape_linear (t, ix->lm_head, fn, -1, m->V, C);
  const float *lv = hn_htape_val (t, out->logits);
  for (int i = 0; i < m->V; i++)
    if (!isfinite (lv[i]))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                     "the model produced a non-finite logit (NaN or Inf) at position %" G_GINT64_FORMAT " (after input token %u); "
                     "coherent-v9 output is never sanitized",
                     pos, token);
        return FALSE;
      }
  s->position++;
  g_array_append_val (s->history, token);
  return TRUE;
}

/* ---- the inference runner ---- */

struct _HnHierRunner {
  HnHierModel *m;
  HnHTape *t;
};

HnHierRunner *
hn_hier_runner_new (HnHierModel *m)
{
  HnHierRunner *r = g_new0 (HnHierRunner, 1);
  r->m = m;
  r->t = hn_htape_new ();
  return r;
}

void
hn_hier_runner_free (HnHierRunner *r)
{
  if (!r)
    return;
  hn_htape_free (r->t);
  g_free (r);
}

gboolean
hn_hier_runner_step (HnHierRunner *r, HnHierState *state, guint32 token, float *logits, GError **error)
{
  HnHTape *t = r->t;
  HnHierIdx ix;
  HnHierVState vs;
  HnHierStepOut so;
  hn_htape_reset (t);
  t->record_grads = FALSE;
  hn_hier_tape_params (t, r->m, NULL, &ix);
  hn_hier_vstate_load (t, r->m, state, &vs);
  /* Work on a copy of the non-differentiable parts so a failed step leaves
   * the caller's state untouched. */
  gint64 pos = state->position;
  guint hist = state->history->len;
  HnHierRosa saved;
  hn_hier_rosa_init (&saved);
  hn_hier_rosa_copy (&saved, &state->rosa);
  if (!hn_hier_forward_step (t, r->m, &ix, &vs, state, token, &so, error))
    {
      hn_hier_rosa_copy (&state->rosa, &saved);
      hn_hier_rosa_clear (&saved);
      state->position = pos;
      g_array_set_size (state->history, hist);
      return FALSE;
    }
  hn_hier_rosa_clear (&saved);
  hn_hier_vstate_store (t, r->m, &vs, state);
  if (logits)
    memcpy (logits, hn_htape_val (t, so.logits), (gsize) r->m->V * sizeof (float));
  return TRUE;
}
