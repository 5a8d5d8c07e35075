/* Hierarchos training on the Vulkan runner: a chunk's forward keeps every
 * value (hierarchos-vk.c), the losses run on the host over what the loss
 * needs (logits, halting probabilities, drifts: downloaded once per chunk,
 * the tape's own loss code), and the backward of every op runs on the
 * device in reverse order, one submission per chunk for all rows. */
#include "models/hierarchos-vk-private.h"
#include "hn-error.h"

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

/* The backward program, then the work gradients zeroed for the next chunk
 * (the gradient slices of the parameters keep accumulating). */
static gboolean
record_backward (HnHierVkRunner *r, HnCmd *c, gboolean profiled, GError **error)
{
  if (!hn_hier_vk_head_backward (r, c, error))
    return FALSE;
  for (guint i = r->prog->len; i-- > 0;)
    {
      const HnHierOp *op = &g_array_index (r->prog, HnHierOp, i);
      if (!op->no_back && (!hn_hier_op_back_record (c, op, r->prm->buf, r->wk->buf, r->gprm->buf, r->gwk->buf, error) ||
                           (profiled && !hn_hier_vk_profile_flush (r, FALSE, error))))
        return FALSE;
    }
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
      memset (r->host_gwk, 0, r->rs * r->rows * sizeof (float));
      return TRUE;
    }
  if (r->prof)
    {
      if (!record_backward (r, r->cmd, TRUE, error))
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
      if (!record_backward (r, c, FALSE, error) || !hn_cmd_finish (c, error))
        {
          hn_cmd_free (c);
          return FALSE;
        }
      p->back = c;
    }
  return hn_cmd_replay (p->back, 1, error);
}

/* Row k's losses on the tape, from the chunk's downloaded values; the
 * gradients of the loss land in the *_g arrays (zeroed by the caller). */
static gboolean
row_losses (HnHierVkRunner *r, int n, float *logits, float *logits_g, float *hp, float *hp_g, const float *ctl,
            const float *flags, float *dd, float *dd_g, const gint32 *labels, const float *weights, float scale,
            HnHierLoss *loss, GError **error)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  int max_h = (int) cfg->max_h_steps, max_l = (int) cfg->max_l_steps, nl = max_l + 1, C = m->C, V = m->V;
  HnHTape *t = r->tape;
  hn_htape_reset (t);
  t->record_grads = TRUE;
  g_auto (HnHierLossAcc) acc;
  hn_hier_loss_acc_init (&acc);
  memset (loss, 0, sizeof *loss);
  for (int i = 0; i < n; i++)
    {
      HnHierStepOut so;
      memset (&so, 0, sizeof so);
      so.logits = hn_htape_leaf (t, logits + (gsize) i * V, logits_g + (gsize) i * V, V);
      so.pondered = r->to[i].pondered;
      if (so.pondered)
        {
          /* the selected step is always the last one computed */
          so.n_h = CLAMP ((int) ctl[(gsize) i * 3 + 2], 1, max_h);
          so.selected = so.n_h - 1;
          for (int k = 0; k < so.n_h; k++)
            so.halt_p[k] = hn_htape_leaf (t, hp + (gsize) i * max_h + k, hp_g + (gsize) i * max_h + k, 1);
        }
      while (so.n_refine < max_l && flags[(gsize) i * nl + so.n_refine] != 0.0f)
        {
          gsize at = ((gsize) i * nl + so.n_refine + 1) * C;
          so.drift[so.n_refine++] = hn_htape_leaf (t, dd + at, dd_g + at, C);
        }
      if (!hn_hier_loss_token (t, m, &so, labels[i], weights ? weights[i] : 1.0f, 0, &acc, loss, error))
        return FALSE;
    }
  hn_hier_loss_finish (t, m, &acc, scale, TRUE, loss);
  return TRUE;
}

gboolean
hn_hier_vk_train_chunk (HnHierVkRunner *r, HnHierState **s, int rows, const guint32 *const *in,
                        const gint32 *const *labels, const float *const *weights, int n, float scale,
                        HnHierLoss *loss, GError **error)
{
  HnHierModel *m = r->m;
  const HnHierConfig *cfg = &m->cfg;
  g_assert (r->train);
  gsize nv = (gsize) n * m->V, nh = (gsize) n * cfg->max_h_steps, nl = (gsize) cfg->max_l_steps + 1;
  gsize nd = (gsize) n * nl * m->C;
  g_autofree float *logits = g_try_malloc ((gsize) rows * nv * sizeof (float));
  g_autofree float *vals = g_try_malloc (2 * (nv + nh + nd) * sizeof (float) + ((gsize) n * (3 + nl)) * sizeof (float));
  if (!logits || !vals)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "cannot allocate the host buffers of a training chunk");
      return FALSE;
    }
  float *logits_g = vals, *hp = logits_g + nv, *hp_g = hp + nh, *dd = hp_g + nh, *dd_g = dd + nd;
  float *ctl = dd_g + nd, *flags = ctl + (gsize) n * 3;
  if (!r->tape)
    r->tape = hn_htape_new ();
  if (!hn_hier_vk_forward (r, s, rows, in, n, logits, error))
    return FALSE;
  /* the work gradients are zero here (at creation and after every backward) */
  for (int k = 0; k < rows; k++)
    {
      gsize base = (gsize) k * r->rs;
      memset (logits_g, 0, (nv + 2 * nh + 2 * nd) * sizeof (float));
      /* hp_g and dd_g are cleared with the rest; hp and dd are overwritten */
      if (!hn_hier_vk_wk_download (r, base + r->hp, hp, nh, error) ||
          !hn_hier_vk_wk_download (r, base + r->ctl, ctl, (gsize) n * 3, error) ||
          !hn_hier_vk_wk_download (r, base + r->flags, flags, (gsize) n * nl, error) ||
          !hn_hier_vk_wk_download (r, base + r->dd, dd, nd, error) ||
          !row_losses (r, n, logits + (gsize) k * nv, logits_g, hp, hp_g, ctl, flags, dd, dd_g, labels[k],
                       weights ? weights[k] : NULL, scale, &loss[k], error))
        return FALSE;
      if (!gwk_upload (r, base + r->logits, logits_g, nv, error) || !gwk_upload (r, base + r->hp, hp_g, nh, error) ||
          !gwk_upload (r, base + r->dd, dd_g, nd, error))
        return FALSE;
    }
  return run_backward (r, error);
}

gboolean
hn_hier_vk_train_take_grads (HnHierVkRunner *r, int rows, float **grads, GError **error)
{
  gsize np = r->m->n_params;
  if (!r->ctx)
    {
      for (int k = 0; k < rows; k++)
        memcpy (grads[k], r->host_gprm + (gsize) k * np, np * sizeof (float));
      memset (r->host_gprm, 0, np * r->R * sizeof (float));
      return TRUE;
    }
  for (int k = 0; k < rows; k++)
    if (!hn_vk_buffer_download (r->gprm->buf, (guint64) k * np * sizeof (float), grads[k], np * sizeof (float), error))
      return FALSE;
  return hn_hier_vk_zero (r->cmd, r->gprm->buf, np * r->R, error) && hn_cmd_submit_wait (r->cmd, error);
}
