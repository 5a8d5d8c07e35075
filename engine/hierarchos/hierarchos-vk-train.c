/* Hierarchos training on the Vulkan runner: a chunk's forward keeps every
 * value (hierarchos-vk.c), the losses run on the host over what the loss
 * needs (logits, halting probabilities, drifts: downloaded once per chunk,
 * the tape's own loss code), and the backward of every op runs on the
 * device in reverse order, one submission per chunk for all rows. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"
#include "tensor/hn-ops.h"

#include <math.h>
#include <string.h>

static gboolean
gwk_upload (HnHierVkRunner *r, gsize at, const float *src, gsize n, GError **error)
{
  if (!r->ctx)
    {
      memcpy (r->host_gwk + at, src, n * sizeof (float));
      return TRUE;
    }
  return hn_vk_buffer_upload (r->gwk->buf, (guint64) at * sizeof (float), src, n * sizeof (float), error);
}

/* ---- the weight gradients: one matmul per weight and chunk ---- */

static void
weight_uses_free (gpointer data)
{
  HnHierWeightUses *w = data;
  g_array_unref (w->ops);
  g_free (w);
}

GPtrArray *
hn_hier_vk_weight_uses (HnHierVkRunner *r)
{
  GPtrArray *all = g_ptr_array_new_with_free_func (weight_uses_free);
  for (guint i = 0; i < r->prog->len; i++)
    {
      const HnHierOp *op = &g_array_index (r->prog, HnHierOp, i);
      if (op->kind != HN_HIER_OP_MATVEC || !(op->u.mv.flags & HN_HIER_MV_NO_DW) || op->no_back)
        continue;
      const HnHierMatvecPush *p = &op->u.mv;
      HnHierWeightUses *w = NULL;
      for (guint k = 0; k < all->len && !w; k++)
        {
          HnHierWeightUses *c = all->pdata[k];
          if (c->w_off == p->w_off && c->trans == p->trans)
            w = c;
        }
      if (!w)
        {
          w = g_new0 (HnHierWeightUses, 1);
          *w = (HnHierWeightUses) { p->w_off, p->trans, p->in_n, p->out_n, g_array_new (FALSE, FALSE, sizeof (guint)) };
          g_ptr_array_add (all, w);
        }
      g_array_append_val (w->ops, i);
    }
  return all;
}

gsize
hn_hier_vk_gather_floats (GPtrArray *uses)
{
  gsize n = 0;
  for (guint k = 0; k < uses->len; k++)
    {
      HnHierWeightUses *w = uses->pdata[k];
      n = MAX (n, (gsize) w->ops->len * (w->in_n + w->out_n));
    }
  return n;
}

/* The host's version (reference mode): every use's outer product in order. */
static void
weight_grads_host (HnHierVkRunner *r, GPtrArray *uses)
{
  gsize np = r->m->n_params;
  for (guint k = 0; k < uses->len; k++)
    {
      HnHierWeightUses *w = uses->pdata[k];
      g_autofree float *x = g_new (float, MAX (w->in_n, 1)), *dv = g_new (float, MAX (w->out_n, 1));
      for (guint32 row = 0; row < r->rows; row++)
        {
          const float *wk = r->host_wk + (gsize) row * r->rs;
          const float *gwk = r->host_gwk + (gsize) row * r->rs;
          float *gw = r->host_gprm + (gsize) row * np + w->w_off;
          for (guint u = 0; u < w->ops->len; u++)
            {
              const HnHierOp *op = &g_array_index (r->prog, HnHierOp, g_array_index (w->ops, guint, u));
              const HnHierMatvecPush *p = &op->u.mv;
              if (hn_hier_ref_skip (wk, p->pred))
                continue;
              gboolean direct = hn_hier_mv_back_direct (p);
              for (guint32 o = 0; o < p->out_n; o++)
                dv[o] = direct ? gwk[p->y_off + o] * p->scale : gwk[op->bs + o];
              for (guint32 i = 0; i < p->in_n; i++)
                {
                  guint seg = i < p->n0 ? 0 : (i < p->n0 + p->n1 ? 1 : 2);
                  guint32 idx = seg == 0 ? p->x0 + i : seg == 1 ? p->x1 + i - p->n0 : p->x2 + i - p->n0 - p->n1;
                  x[i] = (p->xsrc >> seg) & 1 ? r->m->params[idx] : wk[idx];
                }
              for (guint32 o = 0; o < p->out_n; o++)
                for (guint32 i = 0; i < p->in_n; i++)
                  gw[p->trans ? (gsize) i * p->out_n + o : (gsize) o * p->in_n + i] += dv[o] * x[i];
            }
        }
    }
}

/* The device's: each weight's uses gathered into X [U, in] and DV [U, out]
 * per row (hier_gather.comp), then dW += DV^T X (trans: X^T DV) into the
 * row's gradient slice. The use table goes to *table (kept as long as the
 * recording). */
static gboolean
weight_grads (HnHierVkRunner *r, HnCmd *c, GPtrArray *uses, HnTensor **table, GError **error)
{
  gsize np = r->m->n_params, n = 0;
  for (guint k = 0; k < uses->len; k++)
    n += ((HnHierWeightUses *) uses->pdata[k])->ops->len;
  if (!n)
    return TRUE;
  g_autofree guint32 *tab = g_new (guint32, n * 10);
  gsize e = 0;
  for (guint k = 0; k < uses->len; k++)
    {
      HnHierWeightUses *w = uses->pdata[k];
      for (guint u = 0; u < w->ops->len; u++)
        {
          const HnHierOp *op = &g_array_index (r->prog, HnHierOp, g_array_index (w->ops, guint, u));
          const HnHierMatvecPush *p = &op->u.mv;
          gboolean direct = hn_hier_mv_back_direct (p);
          guint32 sb;
          memcpy (&sb, &p->scale, sizeof sb);
          guint32 row[10] = { p->x0, p->n0, p->x1, p->n1, p->x2, p->xsrc, direct ? p->y_off : op->bs, direct, sb, p->pred };
          memcpy (tab + e * 10, row, sizeof row);
          e++;
        }
    }
  if (*table)
    hn_tensor_unref (*table);
  *table = hn_tensor_new_named (r->ctx, "Hierarchos weight uses", HN_DTYPE_I32, 1, (gint64[]) { (gint64) n * 10 }, error);
  if (!*table || !hn_tensor_upload_raw (*table, tab, n * 10 * sizeof (guint32), error))
    return FALSE;
  guint32 base = 0;
  for (guint k = 0; k < uses->len; k++)
    {
      HnHierWeightUses *w = uses->pdata[k];
      guint32 U = w->ops->len, xo = r->gath, dvo = r->gath + U * w->in_n;
      struct { guint32 base, in_n, out_n, rs, xo, dvo; } pc = { base * 10, w->in_n, w->out_n, (guint32) r->rs, xo, dvo };
      HnVkBinding b[4] = { { r->prm->buf, 0, 0, FALSE }, { r->wk->buf, 0, 0, FALSE }, { r->gwk->buf, 0, 0, TRUE },
                           { (*table)->buf, 0, 0, FALSE } };
      if (!hn_cmd_dispatch (c, "hier_gather", NULL, 0, b, 4, &pc, sizeof pc, U, 1, r->rows, error))
        return FALSE;
      for (guint32 row = 0; row < r->rows; row++)
        {
          gsize rb = (gsize) row * r->rs;
          g_autoptr (HnTensor) X = hn_hier_vk_view (r->gwk, rb + xo, U, w->in_n, error);
          g_autoptr (HnTensor) DV = X ? hn_hier_vk_view (r->gwk, rb + dvo, U, w->out_n, error) : NULL;
          g_autoptr (HnTensor) dW = DV ? hn_hier_vk_view (r->gprm, (gsize) row * np + w->w_off, w->trans ? w->in_n : w->out_n,
                                                          w->trans ? w->out_n : w->in_n, error)
                                       : NULL;
          if (!dW || !hn_op_bmm (c, dW, w->trans ? X : DV, w->trans ? DV : X,
                                 HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE | HN_MATMUL_EXACT, 1.0f, error))
            return FALSE;
        }
      base += U;
    }
  return TRUE;
}

/* The backward program, then the work gradients zeroed for the next chunk
 * (the gradient slices of the parameters keep accumulating). */
static gboolean
record_backward (HnHierVkRunner *r, HnCmd *c, gboolean profiled, HnTensor **table, GError **error)
{
  if (profiled)
    hn_cmd_set_label (c, "back head");
  if (!hn_hier_vk_head_backward (r, c, error))
    return FALSE;
  for (guint i = r->prog->len; i-- > 0;)
    {
      const HnHierOp *op = &g_array_index (r->prog, HnHierOp, i);
      if (profiled)
        hn_hier_vk_profile_label (r, op, "back ");
      if (!op->no_back && (!hn_hier_op_back_record (c, op, r->prm->buf, r->wk->buf, r->gprm->buf, r->gwk->buf, error) ||
                           (profiled && !hn_hier_vk_profile_flush (r, FALSE, error))))
        return FALSE;
    }
  /* (profiled: submit what is recorded, so the gradients' dispatches fit) */
  if (profiled && !hn_hier_vk_profile_flush (r, TRUE, error))
    return FALSE;
  if (profiled)
    hn_cmd_set_label (c, "weight gradients");
  g_autoptr (GPtrArray) uses = hn_hier_vk_weight_uses (r);
  if (!weight_grads (r, c, uses, table, error))
    return FALSE;
  if (profiled)
    hn_cmd_set_label (c, NULL);
  return hn_hier_vk_zero (c, r->gwk->buf, r->rs * r->rows, error);
}

static gboolean
run_backward (HnHierVkRunner *r, GError **error)
{
  if (!r->ctx)
    {
      hn_hier_vk_head_backward (r, NULL, error);
      for (guint i = r->prog->len; i-- > 0;)
        {
          const HnHierOp *op = &g_array_index (r->prog, HnHierOp, i);
          if (!op->no_back)
            hn_hier_op_back_ref (op, r->m->params, r->host_wk, r->host_gprm, r->host_gwk);
        }
      g_autoptr (GPtrArray) uses = hn_hier_vk_weight_uses (r);
      weight_grads_host (r, uses);
      memset (r->host_gwk, 0, r->rs * r->rows * sizeof (float));
      return TRUE;
    }
  if (r->prof)
    {
      g_autoptr (HnTensor) table = NULL;
      if (!record_backward (r, r->cmd, TRUE, &table, error))
        {
          hn_cmd_reset (r->cmd);
          return FALSE;
        }
      return hn_hier_vk_profile_flush (r, TRUE, error);
    }
  HnHierVkProgram *p = r->last;
  if (!p->back)
    {
      HnCmd *c = hn_cmd_new (r->ctx, error);
      if (!c)
        return FALSE;
      hn_cmd_set_reusable (c);
      if (!record_backward (r, c, FALSE, &p->uses, error) || !hn_cmd_finish (c, error))
        {
          hn_cmd_free (c);
          return FALSE;
        }
      p->back = c;
    }
  return hn_cmd_replay (p->back, 1, error);
}

/* What one row's losses read and write (host copies of the chunk's values
 * and the gradients the losses give them). */
typedef struct {
  HnHierVkRunner *r;
  int n;
  float *stats, *hp, *hp_g, *ctl, *flags, *dd, *dd_g;
  const gint32 *labels;
  const float *weights;
  float scale;
  HnHierLoss *loss;
  HnHTape *tape;
  GError *error;
} RowLoss;

/* A row's losses on its own tape, from the device's cross-entropy values
 * (whose gradient the device applied) and the halting probabilities and
 * drifts (whose gradients go back up). */
static gpointer
row_losses (gpointer data)
{
  RowLoss *w = data;
  HnHierVkRunner *r = w->r;
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  int n = w->n, max_h = (int) cfg->max_h_steps, max_l = (int) cfg->max_l_steps, nl = max_l + 1, C = m->C;
  HnHTape *t = w->tape;
  hn_htape_reset (t);
  t->record_grads = TRUE;
  g_auto (HnHierLossAcc) acc;
  hn_hier_loss_acc_init (&acc);
  memset (w->loss, 0, sizeof *w->loss);
  for (int i = 0; i < n; i++)
    {
      HnHierStepOut so;
      memset (&so, 0, sizeof so);
      so.logits = -1;
      so.lse = w->stats[3 * i];
      so.ce = w->stats[3 * i + 1];
      so.pondered = r->to[i].pondered;
      if (so.pondered)
        {
          /* the selected step is always the last one computed */
          so.n_h = CLAMP ((int) w->ctl[(gsize) i * 3 + 2], 1, max_h);
          so.selected = so.n_h - 1;
          for (int k = 0; k < so.n_h; k++)
            so.halt_p[k] = hn_htape_leaf (t, w->hp + (gsize) i * max_h + k, w->hp_g + (gsize) i * max_h + k, 1);
        }
      while (so.n_refine < max_l && w->flags[(gsize) i * nl + so.n_refine] != 0.0f)
        {
          gsize at = ((gsize) i * nl + so.n_refine + 1) * C;
          so.drift[so.n_refine++] = hn_htape_leaf (t, w->dd + at, w->dd_g + at, C);
        }
      if (!hn_hier_loss_token (t, m, &so, w->labels[i], w->weights ? w->weights[i] : 1.0f, 0, &acc, w->loss, &w->error))
        return NULL;
    }
  hn_hier_loss_finish (t, m, &acc, w->scale, TRUE, w->loss);
  return NULL;
}

typedef struct {
  RowLoss *w;
  int rows, tid, n_threads;
} LossThread;

static gpointer
loss_thread (gpointer data)
{
  LossThread *lt = data;
  for (int k = lt->tid; k < lt->rows; k += lt->n_threads)
    row_losses (&lt->w[k]);
  return NULL;
}

/* Row k's labels and loss coefficients for the device's cross-entropy: the
 * seed the tape's CE node gets (scale / sum of the labelled weights) times
 * the position's weight, 0 where there is no loss. */
static gboolean
upload_labels (HnHierVkRunner *r, int k, const gint32 *labels, const float *weights, int n, float scale, GError **error)
{
  HnHierModel *m = r->m;
  g_autofree float *words = g_new (float, 2 * (gsize) n);
  double wsum = 0;
  for (int i = 0; i < n; i++)
    {
      float w = weights ? weights[i] : 1.0f;
      if (labels[i] >= m->V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "label %d is outside the vocabulary (%d)", labels[i], m->V);
          return FALSE;
        }
      if (labels[i] >= 0 && w > 0)
        wsum += w;
    }
  float seed = wsum > 0 ? (float) (scale / wsum) : 0.0f;
  for (int i = 0; i < n; i++)
    {
      float w = weights ? weights[i] : 1.0f;
      gboolean on = labels[i] >= 0 && w > 0;
      words[i] = on ? (float) labels[i] : -1.0f;
      words[n + i] = on ? seed * w : 0.0f;
    }
  gsize base = (gsize) k * r->rs;
  return hn_hier_vk_wk_upload (r, base + r->lab, words, n, error) &&
         hn_hier_vk_wk_upload (r, base + r->coef, words + n, n, error);
}

gboolean
hn_hier_vk_train_chunk (HnHierVkRunner *r, HnHierState **s, int rows, const guint32 *const *in,
                        const gint32 *const *labels, const float *const *weights, int n, float scale,
                        HnHierLoss *loss, GError **error)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  g_assert (r->train);
  gsize nh = (gsize) n * cfg->max_h_steps, nl = (gsize) cfg->max_l_steps + 1;
  gsize nd = (gsize) n * nl * m->C, per_row = 2 * (nh + nd) + (gsize) n * (6 + nl);
  g_autofree float *vals = g_try_malloc ((gsize) rows * per_row * sizeof (float));
  if (!vals)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "cannot allocate the host buffers of a training chunk");
      return FALSE;
    }
  RowLoss w[rows];
  if (!r->tapes)
    r->tapes = g_new0 (HnHTape *, r->R);
  for (int k = 0; k < rows; k++)
    {
      float *v = vals + (gsize) k * per_row;
      w[k] = (RowLoss) { r, n, v, v + 3 * n, v + 3 * n + nh, v + 3 * n + 2 * nh, v + 6 * n + 2 * nh, NULL, NULL,
                         labels[k], weights ? weights[k] : NULL, scale, &loss[k], NULL, NULL };
      w[k].dd = w[k].flags + (gsize) n * nl;
      w[k].dd_g = w[k].dd + nd;
      memset (w[k].hp_g, 0, nh * sizeof (float));
      memset (w[k].dd_g, 0, nd * sizeof (float));
      if (!r->tapes[k])
        r->tapes[k] = hn_htape_new ();
      w[k].tape = r->tapes[k];
      if (!upload_labels (r, k, labels[k], weights ? weights[k] : NULL, n, scale, error))
        return FALSE;
    }
  /* the forward with the logits' cross-entropy and gradient, then what the
   * other losses need (the work gradients were zero before: at creation and
   * after every backward) */
  if (!hn_hier_vk_forward (r, s, rows, in, n, NULL, error))
    return FALSE;
  for (int k = 0; k < rows; k++)
    {
      gsize base = (gsize) k * r->rs;
      if (!hn_hier_vk_wk_download (r, base + r->stats, w[k].stats, 3 * (gsize) n, error) ||
          !hn_hier_vk_wk_download (r, base + r->hp, w[k].hp, nh, error) ||
          !hn_hier_vk_wk_download (r, base + r->ctl, w[k].ctl, (gsize) n * 3, error) ||
          !hn_hier_vk_wk_download (r, base + r->flags, w[k].flags, (gsize) n * nl, error) ||
          !hn_hier_vk_wk_download (r, base + r->dd, w[k].dd, nd, error))
        return FALSE;
      for (int i = 0; i < n; i++)
        if (w[k].stats[3 * i + 2] != 0.0f || !isfinite (w[k].stats[3 * i]))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                         "the model produced a non-finite logit (NaN or Inf) at position %" G_GINT64_FORMAT " (after input token %u); "
                     "coherent-v9 output is never sanitized",
                         s[k]->position - n + i, in[k][i]);
            return FALSE;
          }
    }
  /* rows tid, tid + T, ... on thread tid of T (each row on its own tape) */
  int n_threads = (int) MIN ((guint) rows, MIN (g_get_num_processors (), 16u));
  LossThread lt[16];
  GThread *th[16] = { NULL };
  for (int i = 0; i < n_threads; i++)
    {
      lt[i] = (LossThread) { w, rows, i, n_threads };
      if (i > 0)
        th[i] = g_thread_new ("hier-loss", loss_thread, &lt[i]);
    }
  loss_thread (&lt[0]);
  for (int i = 1; i < n_threads; i++)
    g_thread_join (th[i]);
  GError *first = NULL;
  for (int k = 0; k < rows; k++)
    {
      if (w[k].error && !first)
        first = w[k].error;
      else if (w[k].error)
        g_error_free (w[k].error);
    }
  if (first)
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  for (int k = 0; k < rows; k++)
    {
      gsize base = (gsize) k * r->rs;
      if (!gwk_upload (r, base + r->hp, w[k].hp_g, nh, error) || !gwk_upload (r, base + r->dd, w[k].dd_g, nd, error))
        return FALSE;
    }
  return run_backward (r, error);
}

gboolean
hn_hier_vk_train_take_grads (HnHierVkRunner *r, int rows, float *sum, GError **error)
{
  gsize np = r->m->n_params;
  if (!r->gsum)
    r->gsum = g_new (float, np);
  if (!r->ctx)
    {
      /* the rows' slices summed in row order, as on the device */
      memcpy (r->gsum, r->host_gprm, np * sizeof (float));
      for (int k = 1; k < rows; k++)
        for (gsize i = 0; i < np; i++)
          r->gsum[i] += r->host_gprm[(gsize) k * np + i];
      memset (r->host_gprm, 0, np * r->R * sizeof (float));
    }
  else
    {
      /* slice 0 += slice k in row order on the device: one slice comes back */
      g_autoptr (HnTensor) s0 = hn_tensor_view_rows (r->gprm, 0, (gint64) np, error);
      if (!s0)
        return FALSE;
      for (int k = 1; k < rows; k++)
        {
          g_autoptr (HnTensor) sk = hn_tensor_view_rows (r->gprm, (gint64) ((gsize) k * np), (gint64) np, error);
          if (!sk || !hn_op_add (r->cmd, s0, s0, sk, error))
            {
              hn_cmd_reset (r->cmd);
              return FALSE;
            }
        }
      if (!hn_cmd_submit_wait (r->cmd, error) ||
          !hn_vk_buffer_download (r->gprm->buf, 0, r->gsum, np * sizeof (float), error) ||
          !hn_hier_vk_zero (r->cmd, r->gprm->buf, np * r->R, error) || !hn_cmd_submit_wait (r->cmd, error))
        return FALSE;
    }
  for (gsize i = 0; i < np; i++)
    sum[i] += r->gsum[i];
  return TRUE;
}
