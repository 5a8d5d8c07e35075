/* The CPU trainer: truncated BPTT over chunks on the tape, the coherent-v9
 * losses (cross-entropy + z-loss, ponder, commitment), AdamW with fp32
 * masters, cosine schedule with warm-up, clipping, accumulation, periodic
 * checkpoints with optimizer / data-cursor / RNG sidecars and exact resume. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "base/hn-util.h"
#include "formats/safetensors.h"
#include "tensor/optim.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TRAINER_STATE_FILE "trainer_state.json"
#define OPTIMIZER_FILE "optimizer.safetensors"
#define TRAINER_STATE_VERSION 1

void
hn_hier_train_options_defaults (HnHierTrainOptions *o)
{
  memset (o, 0, sizeof *o);
  o->batch_size = 4;
  o->accumulation_steps = 1;
  o->chunk_size = 0;  /* 0: the contract's training_chunk_size */
  o->max_length = 0;  /* 0: one chunk per row */
  o->epochs = 3;
  o->max_steps = 0;
  o->save_steps = 0;
  o->warmup_steps = 0;
  o->lr = 1e-4;
  o->min_lr = 1e-6;
  o->weight_decay = 0.1;
  o->grad_clip = 1.0;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->eps = 1e-8;
  o->seed = 1337;
  o->threads = 0;
  o->lr_schedule = HN_LR_COSINE;
}

/* ---- the losses of one chunk (shared with the Vulkan trainer) ---- */

void
hn_hier_loss_acc_init (HnHierLossAcc *a)
{
  memset (a, 0, sizeof *a);
  a->ce = g_array_new (FALSE, FALSE, sizeof (HnVar));
  a->ponder = g_array_new (FALSE, FALSE, sizeof (HnVar));
  a->commit = g_array_new (FALSE, FALSE, sizeof (HnVar));
}

void
hn_hier_loss_acc_clear (HnHierLossAcc *a)
{
  g_clear_pointer (&a->ce, g_array_unref);
  g_clear_pointer (&a->ponder, g_array_unref);
  g_clear_pointer (&a->commit, g_array_unref);
}

gboolean
hn_hier_loss_token (HnHTape *t, HnHierModel *m, const HnHierStepOut *so, gint32 lab, float w, int flags,
                    HnHierLossAcc *a, HnHierLoss *loss, GError **error)
{
  const HnHierConfig *cfg = &m->cfg;
  int min_h = (int) cfg->min_h_steps, max_h = (int) cfg->max_h_steps;
  float thr = (float) cfg->h_halt_thresh, temp = (float) cfg->act_depth_temperature;
  float zw = (float) cfg->z_loss_weight, beta = (float) cfg->ponder_huber_beta;
  float pcap = (float) cfg->max_ponder_cost_for_backward, ccap = (float) cfg->max_commitment_cost_for_backward;
  float cthr = (float) cfg->commitment_threshold;
  float lnV = logf ((float) m->V);
  if (lab < 0 || w <= 0)
    return TRUE;
  if (lab >= m->V)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "label %d is outside the vocabulary (%d)", lab, m->V);
      return FALSE;
    }
  float ce = so->ce;
  HnVar c;
  if (so->logits >= 0)
    c = hn_htape_ce (t, so->logits, lab, zw, w, &ce);
  else
    {
      /* the term's value only: its gradient was applied where it was computed */
      float v = w * (ce + zw * so->lse * so->lse);
      c = hn_htape_const (t, &v, 1);
    }
  g_array_append_val (a->ce, c);
  a->wsum += w;
  a->ce_sum += (double) w * ce;
  loss->n_tokens++;

  if (so->pondered && cfg->ponder_loss_weight > 0)
    {
      /* Expected depth: min_h + sum over i in [min_h, max_h) of
       * sigmoid((thresh - cdf_i) / T), straight-through to the hard depth. */
      HnVar surv = -1, cdf = -1, soft = -1;
      for (int k = 1; k < max_h; k++)
        {
          if (k <= so->n_h)
            {
              HnVar q = hn_htape_addc (t, hn_htape_scale (t, so->halt_p[k - 1], -1.0f), 1.0f);
              surv = surv < 0 ? q : hn_htape_mul (t, surv, q);
              cdf = hn_htape_addc (t, hn_htape_scale (t, surv, -1.0f), 1.0f);
            }
          if (k < min_h)
            continue;
          HnVar term = hn_htape_sigmoid (t, hn_htape_scale (t, hn_htape_addc (t, hn_htape_scale (t, cdf, -1.0f), thr), 1.0f / temp));
          soft = soft < 0 ? term : hn_htape_add (t, soft, term);
        }
      if (soft >= 0)
        {
          soft = hn_htape_addc (t, soft, (float) min_h);
          HnVar depth = (flags & HN_HIER_LOSS_SOFT_PONDER) ? soft
                                                           : hn_htape_straight (t, soft, (float) (so->selected + 1));
          /* OPEN choice (HIERARCHOS.md): difficulty = this position's
           * detached cross-entropy relative to a uniform guess. */
          float diff = CLAMP (ce / lnV, 0.0f, 1.0f);
          float target = (float) min_h + (float) (max_h - min_h) * diff;
          HnVar pl = hn_htape_smoothl1 (t, depth, target, beta);
          if (pcap > 0)
            pl = hn_htape_minc (t, pl, pcap);
          g_array_append_val (a->ponder, pl);
          loss->ponder += hn_htape_val (t, pl)[0];
        }
    }
  if (cfg->commitment_loss_weight > 0)
    for (int j = 0; j < so->n_refine; j++)
      {
        HnVar cc = hn_htape_relu (t, hn_htape_addc (t, hn_htape_meansq (t, so->drift[j]), -cthr));
        if (ccap > 0)
          cc = hn_htape_minc (t, cc, ccap);
        g_array_append_val (a->commit, cc);
        loss->commit += hn_htape_val (t, cc)[0];
      }
  return TRUE;
}

void
hn_hier_loss_finish (HnHTape *t, HnHierModel *m, HnHierLossAcc *a, float scale, gboolean grads, HnHierLoss *loss)
{
  const HnHierConfig *cfg = &m->cfg;
  double zsum = 0;
  for (guint i = 0; i < a->ce->len; i++)
    zsum += hn_htape_val (t, g_array_index (a->ce, HnVar, i))[0];
  loss->ce = a->wsum > 0 ? a->ce_sum / a->wsum : 0;
  loss->ce_z = a->wsum > 0 ? zsum / a->wsum : 0;
  loss->ponder = a->ponder->len ? loss->ponder / a->ponder->len : 0;
  loss->commit = a->commit->len ? loss->commit / a->commit->len : 0;
  loss->total = loss->ce_z + cfg->ponder_loss_weight * loss->ponder + cfg->commitment_loss_weight * loss->commit;
  if (!grads)
    return;
  for (guint i = 0; i < a->ce->len; i++)
    hn_htape_seed (t, g_array_index (a->ce, HnVar, i), (float) (scale / a->wsum));
  for (guint i = 0; i < a->ponder->len; i++)
    hn_htape_seed (t, g_array_index (a->ponder, HnVar, i), (float) (scale * cfg->ponder_loss_weight / a->ponder->len));
  for (guint i = 0; i < a->commit->len; i++)
    hn_htape_seed (t, g_array_index (a->commit, HnVar, i),
                   (float) (scale * cfg->commitment_loss_weight / a->commit->len));
  hn_htape_sweep (t);
}

/* ---- one chunk on the tape: forward, losses, backward ---- */

gboolean
hn_hier_chunk_loss (HnHTape *t, HnHierModel *m, float *grads, float scale, HnHierState *s, const guint32 *inputs,
                    const gint32 *labels, const float *weights, int n, int flags, HnHierLoss *loss, GError **error)
{
  const HnHierConfig *cfg = &m->cfg;
  HnHierIdx ix;
  HnHierVState vs;
  memset (loss, 0, sizeof *loss);
  hn_htape_reset (t);
  t->record_grads = grads != NULL;
  hn_hier_tape_params (t, m, grads, &ix);
  hn_hier_vstate_load (t, m, s, &vs);
  g_auto (HnHierLossAcc) acc;
  hn_hier_loss_acc_init (&acc);
  gint64 detach_n = cfg->detach_every_n_steps;

  for (int i = 0; i < n; i++)
    {
      if (detach_n > 0 && i > 0 && i % detach_n == 0)
        hn_hier_vstate_detach (t, &vs);
      HnHierStepOut so;
      if (!hn_hier_forward_step (t, m, &ix, &vs, s, inputs[i], &so, error) ||
          !hn_hier_loss_token (t, m, &so, labels[i], weights ? weights[i] : 1.0f, flags, &acc, loss, error))
        return FALSE;
    }
  hn_hier_loss_finish (t, m, &acc, scale, grads != NULL, loss);
  hn_hier_vstate_store (t, m, &vs, s);
  return TRUE;
}

/* ---- data ---- */

typedef struct {
  const guint32 *tokens;
  const float *tw; /* per-token weight of predicting it, or NULL */
  const gint32 *labels; /* per-token label, or NULL (= the token) */
  gsize n_rows;
  int row_len;     /* inputs per row (labels are shifted by one) */
  gsize stride;    /* row r starts at r * stride */
} Data;

static void
epoch_order (guint64 seed, gint64 epoch, gsize n, guint32 *perm, gboolean no_shuffle)
{
  HnRng rng;
  if (no_shuffle)
    {
      for (gsize i = 0; i < n; i++)
        perm[i] = (guint32) i;
      return;
    }
  hn_rng_seed (&rng, seed ^ (0xda3e39cb94b95bdbULL * (guint64) (epoch + 1)));
  for (gsize i = 0; i < n; i++)
    perm[i] = (guint32) i;
  for (gsize i = n; i > 1; i--)
    {
      gsize j = (gsize) (hn_rng_uniform (&rng) * (double) i);
      guint32 tmp = perm[i - 1];
      perm[i - 1] = perm[j];
      perm[j] = tmp;
    }
}

/* ---- the optimizer state ---- */

typedef struct {
  float *m, *v;   /* [n_params] */
  gint64 step;
} Adam;

static double
schedule_lr (const HnHierTrainOptions *o, gint64 step, gint64 total)
{
  /* transformers' cosine-with-warmup factor for update `step` (0-based); the
   * decay runs from lr down to --min-lr instead of 0. */
  HnLrSchedule sched = { (HnLrScheduleKind) o->lr_schedule, o->warmup_steps, total };
  double f = hn_lr_schedule_factor (&sched, step);
  if (step < o->warmup_steps)
    return o->lr * f;
  return o->min_lr + (o->lr - o->min_lr) * f;
}

/* ---- worker threads: one per subset of rows, per-row gradient buffers ---- */

typedef struct {
  HnHierModel *m;
  const HnHierTrainOptions *o;
  const Data *d;
  const guint32 *rows;  /* row indices of this step */
  int n_rows, chunk, n_chunks;
  float **row_grads;
  HnHierLoss *row_loss;
  int tid, n_threads;
  float scale;
  HnHTape *tape;  /* kept across steps: its arena is reused */
  HnHierState *state;
  GError *error;
} Work;

static gpointer
work_thread (gpointer data)
{
  Work *w = data;
  HnHTape *t = w->tape;
  HnHierState *s = w->state;
  g_autofree gint32 *labels = g_new (gint32, w->chunk);
  g_autofree float *wts = g_new (float, w->chunk);
  for (int r = w->tid; r < w->n_rows && !w->error; r += w->n_threads)
    {
      const guint32 *row = w->d->tokens + (gsize) w->rows[r] * w->d->stride;
      const float *tw = w->d->tw ? w->d->tw + (gsize) w->rows[r] * w->d->stride : NULL;
      const gint32 *lab = w->d->labels ? w->d->labels + (gsize) w->rows[r] * w->d->stride : NULL;
      memset (w->row_grads[r], 0, w->m->n_params * sizeof (float));
      memset (&w->row_loss[r], 0, sizeof (HnHierLoss));
      hn_hier_state_reset (w->m, s);
      for (int c = 0; c < w->n_chunks; c++)
        {
          int off = c * w->chunk;
          for (int i = 0; i < w->chunk; i++)
            {
              labels[i] = lab ? lab[off + i + 1] : (gint32) row[off + i + 1];
              wts[i] = tw ? tw[off + i + 1] : 1.0f;
            }
          HnHierLoss l;
          if (!hn_hier_chunk_loss (t, w->m, w->row_grads[r], w->scale, s, row + off, labels, wts, w->chunk, 0, &l, &w->error))
            break;
          w->row_loss[r].total += l.total / w->n_chunks;
          w->row_loss[r].ce += l.ce / w->n_chunks;
          w->row_loss[r].ponder += l.ponder / w->n_chunks;
          w->row_loss[r].commit += l.commit / w->n_chunks;
          w->row_loss[r].n_tokens += l.n_tokens;
        }
    }
  return NULL;
}

/* ---- the Vulkan trainer: the step's rows in groups of up to R rows ---- */

/* The step's gradient is summed into grads (zeroed by the caller); the
 * rows' losses go to w->row_loss as on the CPU. */
static gboolean
vk_step (HnHierVkRunner *vk, HnHierState **states, int R, const Work *w, float *grads, GError **error)
{
  int chunk = w->chunk;
  g_autofree gint32 *labels = g_new (gint32, (gsize) R * chunk);
  g_autofree float *wts = g_new (float, (gsize) R * chunk);
  g_autofree HnHierLoss *l = g_new0 (HnHierLoss, R);
  const guint32 *in[R];
  const gint32 *lab[R];
  const float *wt[R];
  for (int g = 0; g < w->n_rows; g += R)
    {
      int nr = MIN (R, w->n_rows - g);
      for (int k = 0; k < nr; k++)
        {
          hn_hier_state_reset (w->m, states[k]);
          memset (&w->row_loss[g + k], 0, sizeof (HnHierLoss));
        }
      for (int c = 0; c < w->n_chunks; c++)
        {
          int off = c * chunk;
          for (int k = 0; k < nr; k++)
            {
              gsize at = (gsize) w->rows[g + k] * w->d->stride;
              const guint32 *row = w->d->tokens + at;
              gint32 *lk = labels + (gsize) k * chunk;
              float *wk = wts + (gsize) k * chunk;
              for (int i = 0; i < chunk; i++)
                {
                  lk[i] = w->d->labels ? w->d->labels[at + off + i + 1] : (gint32) row[off + i + 1];
                  wk[i] = w->d->tw ? w->d->tw[at + off + i + 1] : 1.0f;
                }
              in[k] = row + off;
              lab[k] = lk;
              wt[k] = wk;
            }
          if (!hn_hier_vk_train_chunk (vk, states, nr, in, lab, wt, chunk, w->scale, l, error))
            return FALSE;
          for (int k = 0; k < nr; k++)
            {
              HnHierLoss *rl = &w->row_loss[g + k];
              rl->total += l[k].total / w->n_chunks;
              rl->ce += l[k].ce / w->n_chunks;
              rl->ponder += l[k].ponder / w->n_chunks;
              rl->commit += l[k].commit / w->n_chunks;
              rl->n_tokens += l[k].n_tokens;
            }
        }
      if (!hn_hier_vk_train_take_grads (vk, nr, grads, error))
        return FALSE;
    }
  return TRUE;
}

int
hn_hier_vk_train_rows (HnHierModel *m, HnVkContext *ctx, int chunk, int want, gsize *row_floats, GError **error)
{
  /* as many rows as the device's largest buffer holds (the work buffer, its
   * gradient and the parameter gradients each hold one slice per row) and
   * its free memory, past the weights and a margin, holds all three */
  g_autoptr (HnHierVkRunner) one = hn_hier_vk_trainer_layout (m, 1, chunk, error);
  if (!one)
    return 0;
  guint64 row = (guint64) hn_hier_vk_trainer_row_floats (one) * sizeof (float), np = (guint64) m->n_params * sizeof (float);
  if (row_floats)
    *row_floats = hn_hier_vk_trainer_row_floats (one);
  guint64 limit = hn_vk_context_max_buffer_size (ctx);
  guint64 fit = limit / MAX (row, np);
  HnVkMemoryBudget b;
  hn_vk_context_get_memory_budget (ctx, &b);
  guint64 margin = 256ull << 20;
  if (b.free > 0)
    fit = MIN (fit, b.free > np + margin ? (b.free - np - margin) / (2 * row + np) : 0);
  if (fit < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
                   "one training row of %d tokens needs %" G_GUINT64_FORMAT " MiB of Vulkan work buffers (the "
                   "device's largest buffer: %" G_GUINT64_FORMAT " MiB, free: %" G_GUINT64_FORMAT " MiB); use a "
                   "shorter --training-chunk-size or --runtime cpu",
                   chunk, (2 * row + np) >> 20, limit >> 20, b.free >> 20);
      return 0;
    }
  return (int) MIN ((guint64) want, fit);
}

/* ---- checkpoints ---- */

static gboolean
save_optimizer (HnHierModel *m, const Adam *a, const char *path, GError **error)
{
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  gint64 shape[1] = { (gint64) m->n_params };
  if (!hn_safetensors_writer_add (w, "exp_avg", HN_ST_DTYPE_F32, 1, shape, a->m, m->n_params * 4, FALSE, error) ||
      !hn_safetensors_writer_add (w, "exp_avg_sq", HN_ST_DTYPE_F32, 1, shape, a->v, m->n_params * 4, FALSE, error))
    return FALSE;
  g_autofree char *step = g_strdup_printf ("%" G_GINT64_FORMAT, a->step);
  hn_safetensors_writer_set_metadata (w, "optimizer", "adamw");
  hn_safetensors_writer_set_metadata (w, "step", step);
  hn_safetensors_writer_set_metadata (w, "architecture_contract_sha256", m->contract_sha256);
  return hn_safetensors_writer_write_file (w, path, error);
}

static gboolean
load_optimizer (HnHierModel *m, Adam *a, const char *path, GError **error)
{
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, error);
  if (!st)
    return FALSE;
  const char *sha = hn_safetensors_get_metadata (st, "architecture_contract_sha256");
  const char *step = hn_safetensors_get_metadata (st, "step");
  if (!sha || strcmp (sha, m->contract_sha256) != 0 || !step)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: optimizer state belongs to another model", path);
      return FALSE;
    }
  const char *names[2] = { "exp_avg", "exp_avg_sq" };
  float *dst[2] = { a->m, a->v };
  for (int i = 0; i < 2; i++)
    {
      const HnSafetensorInfo *info = hn_safetensors_require (st, names[i], error);
      if (!info)
        return FALSE;
      if (info->dtype != HN_ST_DTYPE_F32 || info->ndim != 1 || info->shape[0] != (gint64) m->n_params)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s must be F32 [%zu]", path, names[i], m->n_params);
          return FALSE;
        }
      if (!hn_safetensor_info_to_f32 (info, dst[i], error))
        return FALSE;
    }
  a->step = g_ascii_strtoll (step, NULL, 10);
  return TRUE;
}

static char *
data_fingerprint (const HnHierTrainOptions *o)
{
  g_autoptr (GChecksum) ck = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (ck, (const guchar *) o->tokens, o->n_tokens * sizeof (guint32));
  if (o->token_weights)
    g_checksum_update (ck, (const guchar *) o->token_weights, o->n_tokens * sizeof (float));
  if (o->token_labels)
    g_checksum_update (ck, (const guchar *) o->token_labels, o->n_tokens * sizeof (gint32));
  g_checksum_update (ck, (const guchar *) (o->separate_rows ? "rows" : "stream"), 4);
  return g_strdup (g_checksum_get_string (ck));
}

typedef struct {
  gint64 global_step, epoch, step_in_epoch, total_steps;
  double last_loss;
} Cursor;

static char *
checkpoint_dir (const HnHierTrainOptions *o, const Cursor *cur)
{
  g_autofree char *name = g_strdup_printf ("checkpoint-epoch-%" G_GINT64_FORMAT "-step-%" G_GINT64_FORMAT,
                                           cur->epoch, cur->global_step);
  return g_build_filename (o->out_dir, name, NULL);
}

static gboolean write_checkpoint (HnHierModel *m, const HnHierTrainOptions *o, const Adam *a, const Cursor *cur,
                                  int chunk, int row_len, const char *fingerprint, const char *tmp, GError **error);

static gboolean
save_checkpoint (HnHierModel *m, const HnHierTrainOptions *o, const Adam *a, const Cursor *cur, int chunk,
                 int row_len, const char *fingerprint, GError **error)
{
  g_autofree char *final = checkpoint_dir (o, cur);
  /* Write everything into a hidden folder, then rename it into place: a
   * crash never leaves a checkpoint folder that looks complete. */
  g_autofree char *tmp = hn_folder_begin (final, error);
  if (!tmp)
    return FALSE;
  gboolean ok = write_checkpoint (m, o, a, cur, chunk, row_len, fingerprint, tmp, error) &&
                hn_folder_commit (tmp, final, NULL, error);
  if (!ok)
    hn_folder_remove_tree (tmp);
  return ok;
}

static gboolean
write_checkpoint (HnHierModel *m, const HnHierTrainOptions *o, const Adam *a, const Cursor *cur, int chunk,
                  int row_len, const char *fingerprint, const char *tmp, GError **error)
{
  if (!hn_hier_model_save (m, tmp, error))
    return FALSE;
  if (o->tokenizer_dir && !hn_hier_copy_tokenizer_files (o->tokenizer_dir, tmp, error))
    return FALSE;
  g_autofree char *op = g_build_filename (tmp, OPTIMIZER_FILE, NULL);
  if (!save_optimizer (m, a, op, error))
    return FALSE;

  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define INT(k, v) (json_builder_set_member_name (b, k), json_builder_add_int_value (b, v))
/* doubles as Python-repr strings: json-glib 1.6 prints some doubles as "1e-08.0" */
#define DBL(k, v) G_STMT_START { g_autofree char *r_ = hn_hier_python_float_repr (v); \
    json_builder_set_member_name (b, k); json_builder_add_string_value (b, r_); } G_STMT_END
#define STR(k, v) (json_builder_set_member_name (b, k), json_builder_add_string_value (b, v))
  STR ("kind", "hierarchos_trainer_state");
  INT ("version", TRAINER_STATE_VERSION);
  INT ("global_step", cur->global_step);
  INT ("epoch", cur->epoch);
  INT ("step_in_epoch", cur->step_in_epoch);
  INT ("total_steps", cur->total_steps);
  DBL ("last_loss", cur->last_loss);
  /* The data order is a pure function of (seed, epoch): the RNG state to
   * restore is the seed, recorded with the cursor. */
  g_autofree char *seed = g_strdup_printf ("%" G_GUINT64_FORMAT, o->seed);
  STR ("rng_seed", seed);
  STR ("rng", "xoshiro256** per epoch, seeded seed ^ (0xda3e39cb94b95bdb * (epoch + 1))");
  STR ("data_sha256", fingerprint);
  INT ("n_tokens", (gint64) o->n_tokens);
  INT ("batch_size", o->batch_size);
  INT ("accumulation_steps", o->accumulation_steps);
  INT ("training_chunk_size", chunk);
  INT ("max_length", row_len);
  INT ("warmup_steps", o->warmup_steps);
  DBL ("lr", o->lr);
  DBL ("min_lr", o->min_lr);
  DBL ("weight_decay", o->weight_decay);
  DBL ("grad_clip", o->grad_clip);
  DBL ("beta1", o->beta1);
  DBL ("beta2", o->beta2);
  DBL ("eps", o->eps);
  STR ("trainable", o->trainable ? o->trainable : (o->finetune ? "finetune-default" : "all"));
#undef INT
#undef DBL
#undef STR
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_root (gen, root);
  gsize len = 0;
  g_autofree char *text = json_generator_to_data (gen, &len);
  g_autofree char *sp = g_build_filename (tmp, TRAINER_STATE_FILE, NULL);
  if (!hn_write_file_atomic (sp, text, len, error))
    return FALSE;
  return TRUE;
}

typedef struct {
  const char *key;
  double want;
} CheckD;

static gboolean
load_trainer_state (const char *dir, const HnHierTrainOptions *o, int chunk, int row_len, const char *fingerprint,
                    Cursor *cur, GError **error)
{
  g_autofree char *sp = g_build_filename (dir, TRAINER_STATE_FILE, NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) local = NULL;
  if (!hn_json_parser_load_file (p, sp, HN_MAX_CONFIG_BYTES, "trainer state", &local))
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  JsonNode *root = json_parser_get_root (p);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a JSON object", sp);
      return FALSE;
    }
  JsonObject *obj = json_node_get_object (root);
  const char *ints[] = { "version", "global_step", "epoch", "step_in_epoch", "total_steps", "n_tokens", "batch_size",
                         "accumulation_steps", "training_chunk_size", "max_length" };
  gint64 iv[G_N_ELEMENTS (ints)];
  for (gsize i = 0; i < G_N_ELEMENTS (ints); i++)
    {
      JsonNode *n = json_object_get_member (obj, ints[i]);
      if (!n || json_node_get_value_type (n) != G_TYPE_INT64)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: '%s' is missing or not an integer", sp, ints[i]);
          return FALSE;
        }
      iv[i] = json_node_get_int (n);
    }
  if (iv[0] != TRAINER_STATE_VERSION)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: trainer state version %" G_GINT64_FORMAT " is not supported", sp, iv[0]);
      return FALSE;
    }
  const char *fp = hn_json_object_get_string (obj, "data_sha256");
  const char *seed = hn_json_object_get_string (obj, "rng_seed");
  g_autofree char *want_seed = g_strdup_printf ("%" G_GUINT64_FORMAT, o->seed);
  if (!fp || strcmp (fp, fingerprint) != 0 || (gsize) iv[5] != o->n_tokens)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: the checkpoint was trained on other data; exact resume needs the same dataset", sp);
      return FALSE;
    }
  if (!seed || strcmp (seed, want_seed) != 0 || iv[6] != o->batch_size || iv[7] != o->accumulation_steps ||
      iv[8] != chunk || iv[9] != row_len)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: --seed, --batch-size, --accumulation-steps, --training-chunk-size and --max-length must match the "
                   "checkpoint (seed %s, batch %" G_GINT64_FORMAT ", accumulation %" G_GINT64_FORMAT ", chunk %" G_GINT64_FORMAT
                   ", max length %" G_GINT64_FORMAT ")", sp, seed ? seed : "?", iv[6], iv[7], iv[8], iv[9]);
      return FALSE;
    }
  cur->global_step = iv[1];
  cur->epoch = iv[2];
  cur->step_in_epoch = iv[3];
  cur->total_steps = iv[4];
  if (cur->global_step < 0 || cur->epoch < 0 || cur->step_in_epoch < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: negative cursor", sp);
      return FALSE;
    }
  return TRUE;
}

/* ---- trainable set ---- */

static gboolean
is_trainable (const HnHierParam *p, const HnHierTrainOptions *o)
{
  if (!p->trainable)
    return FALSE;
  if (o->trainable && *o->trainable)
    {
      if (strcmp (o->trainable, "all") == 0)
        return TRUE;
      g_auto (GStrv) parts = g_strsplit (o->trainable, ",", -1);
      for (int i = 0; parts[i]; i++)
        {
          g_strstrip (parts[i]);
          if (*parts[i] && g_str_has_prefix (p->name, parts[i]))
            return TRUE;
        }
      return FALSE;
    }
  return o->finetune ? p->finetune : TRUE;
}

/* ---- the loop ---- */

/* Worker threads: one row of the step each at a time. */
static int
train_threads (const HnHierTrainOptions *o)
{
  int n = o->threads > 0 ? o->threads : (int) MIN (g_get_num_processors (), 16);
  return MIN (MIN (n, o->batch_size * o->accumulation_steps), 16);
}

/* The buffers hn_hier_train allocates besides the tapes (keep in step). */
static void
train_memory_fixed (const HnHierModel *m, const HnHierTrainOptions *o, HnHierTrainMemory *out)
{
  guint64 p = (guint64) m->n_params * sizeof (float);
  out->params = p;
  out->grads = p * (1 + (guint64) o->batch_size * o->accumulation_steps);
  out->optimizer = 2 * p;
  out->threads = train_threads (o);
  out->trainable = 0;
  for (guint i = 0; i < m->param_list->len; i++)
    if (is_trainable (m->param_list->pdata[i], o))
      out->trainable += (gint64) ((HnHierParam *) m->param_list->pdata[i])->numel;
}

gboolean
hn_hier_train_memory (HnHierModel *m, const HnHierTrainOptions *o, HnHierTrainMemory *out, GError **error)
{
  int chunk = o->chunk_size > 0 ? o->chunk_size : (int) m->cfg.training_chunk_size;
  if (o->batch_size <= 0 || o->accumulation_steps <= 0 || chunk <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "the memory estimate needs a positive batch size, accumulation and chunk size");
      return FALSE;
    }
  memset (out, 0, sizeof *out);
  train_memory_fixed (m, o, out);
  /* One chunk as a worker tapes it; the weights are not changed. */
  HnHTape *t = hn_htape_new ();
  HnHierState *s = hn_hier_state_new (m);
  g_autofree float *grads = g_try_malloc0 ((gsize) m->n_params * sizeof (float));
  g_autofree guint32 *in = g_new (guint32, chunk);
  g_autofree gint32 *lab = g_new (gint32, chunk);
  for (int i = 0; i < chunk; i++)
    {
      in[i] = (guint32) ((7919u * (guint32) i + 1u) % (guint32) m->V);
      lab[i] = (gint32) ((7919u * (guint32) (i + 1) + 1u) % (guint32) m->V);
    }
  HnHierLoss l;
  gboolean ok = grads != NULL;
  if (!ok)
    g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "cannot allocate a gradient buffer for the memory estimate");
  else
    ok = hn_hier_chunk_loss (t, m, grads, 1.0f, s, in, lab, NULL, chunk, 0, &l, error);
  out->tapes = (guint64) out->threads * hn_htape_bytes (t);
  hn_htape_free (t);
  hn_hier_state_free (s);
  return ok;
}

gboolean
hn_hier_train (HnHierModel *m, const HnHierTrainOptions *o, double *final_loss, GError **error)
{
  int chunk = o->chunk_size > 0 ? o->chunk_size : (int) m->cfg.training_chunk_size;
  int row_len = o->max_length > 0 ? o->max_length : chunk;
  if (o->batch_size <= 0 || o->accumulation_steps <= 0 || chunk <= 0 || o->lr <= 0 || o->min_lr < 0 ||
      o->min_lr > o->lr || o->grad_clip < 0 || o->weight_decay < 0 || (o->max_steps <= 0 && o->epochs <= 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "invalid training options (batch size, accumulation steps, chunk size, lr >= min-lr >= 0, "
                   "epochs or max-steps must be positive)");
      return FALSE;
    }
  if (row_len % chunk != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--max-length (%d) must be a multiple of "
                   "--training-chunk-size (%d)", row_len, chunk);
      return FALSE;
    }
  if (!o->out_dir)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "an output folder is required");
      return FALSE;
    }
  for (gsize i = 0; o->token_labels && i < o->n_tokens; i++)
    if (o->token_labels[i] >= m->V)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "training label %d at %zu is outside the vocabulary (%d)",
                     o->token_labels[i], i, m->V);
        return FALSE;
      }
  for (gsize i = 0; i < o->n_tokens; i++)
    if (o->tokens[i] >= (guint32) m->V)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "training token %u at %zu is outside the vocabulary (%d)",
                     o->tokens[i], i, m->V);
        return FALSE;
      }
  Data d = { o->tokens, o->token_weights, o->token_labels, 0, row_len, o->separate_rows ? (gsize) row_len + 1 : (gsize) row_len };
  d.n_rows = o->separate_rows ? o->n_tokens / d.stride : (o->n_tokens > 1 ? (o->n_tokens - 1) / (gsize) row_len : 0);
  gsize per_step = (gsize) o->batch_size * o->accumulation_steps;
  if (d.n_rows < per_step)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "the dataset has %zu rows of %d tokens, fewer than one step needs (batch %d x accumulation %d)",
                   d.n_rows, row_len, o->batch_size, o->accumulation_steps);
      return FALSE;
    }
  /* Rows are row_len inputs + 1 label token: windows of one stream that
   * overlap by a token (stride row_len), or separate examples (stride
   * row_len + 1). */
  gint64 steps_per_epoch = (gint64) (d.n_rows / per_step);
  Cursor cur = { 0, 0, 0, o->max_steps > 0 ? o->max_steps : o->epochs * steps_per_epoch, 0 };
  g_autofree char *fingerprint = data_fingerprint (o);

  Adam adam = { g_new0 (float, m->n_params), g_new0 (float, m->n_params), 0 };
  gboolean ok = FALSE;
  HnHierVkRunner *vk = NULL;
  HnHierState **vstates = NULL;
  int vk_rows = 0;
  int n_threads = train_threads (o);
  gsize n_step_rows = per_step;
  float **row_grads = g_new0 (float *, n_step_rows);
  HnHierLoss *row_loss = g_new0 (HnHierLoss, n_step_rows);
  float *grads = g_new0 (float, m->n_params);
  guint32 *perm = g_new (guint32, d.n_rows);
  guint32 *rows = g_new (guint32, n_step_rows);
  gboolean *train_mask = g_new0 (gboolean, m->param_list->len);
  FILE *metrics = NULL;
  gint64 last_perm_epoch = -1;
  HnHTape *tapes[16] = { NULL };
  HnHierState *states[16] = { NULL };
  for (int i = 0; i < n_threads; i++)
    {
      tapes[i] = hn_htape_new ();
      states[i] = hn_hier_state_new (m);
    }
  if (o->vk_ctx)
    {
      int want = o->vk_rows > 0 ? MIN (o->vk_rows, (int) n_step_rows) : (int) n_step_rows;
      if (!(vk_rows = hn_hier_vk_train_rows (m, o->vk_ctx, chunk, want, NULL, error)) ||
          !(vk = hn_hier_vk_trainer_new (m, o->vk_ctx, vk_rows, chunk, error)))
        goto out;
      vstates = g_new0 (HnHierState *, vk_rows);
      for (int i = 0; i < vk_rows; i++)
        vstates[i] = hn_hier_state_new (m);
    }
  /* per-row gradients: the CPU trainer's threads (the Vulkan trainer sums
   * its rows on the device) */
  for (gsize i = 0; i < n_step_rows && !vk; i++)
    row_grads[i] = g_try_malloc0 (m->n_params * sizeof (float));
  for (gsize i = 0; i < n_step_rows && !vk; i++)
    if (!row_grads[i])
      {
        g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "cannot allocate gradient buffers");
        goto out;
      }
  int n_train = 0;
  for (guint i = 0; i < m->param_list->len; i++)
    if ((train_mask[i] = is_trainable (m->param_list->pdata[i], o)))
      n_train++;
  if (n_train == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--trainable '%s' matches no trainable tensor",
                   o->trainable ? o->trainable : "");
      goto out;
    }
  if (!hn_mkdir_p (o->out_dir, error))
    goto out;
  if (o->resume_from)
    {
      g_autofree char *op = g_build_filename (o->resume_from, OPTIMIZER_FILE, NULL);
      if (!load_trainer_state (o->resume_from, o, chunk, row_len, fingerprint, &cur, error) ||
          !load_optimizer (m, &adam, op, error))
        goto out;
      if (o->max_steps > 0)
        cur.total_steps = o->max_steps;
    }
  if (o->metrics_file)
    {
      metrics = g_fopen (o->metrics_file, o->resume_from ? "a" : "w");
      if (!metrics)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot open %s: %s", o->metrics_file, g_strerror (e));
          goto out;
        }
    }

  gint64 t0 = g_get_monotonic_time ();
  gint64 n_chunks = row_len / chunk;
  gint64 start_step = cur.global_step, saved_step = -1;
  while (cur.global_step < cur.total_steps)
    {
      if (o->cancellable && g_cancellable_is_cancelled (o->cancellable))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "training cancelled at step %" G_GINT64_FORMAT, cur.global_step);
          goto out;
        }
      if (o->stop_requested && o->stop_requested (o->stop_data))
        {
          /* "Stop and save": the checkpoint of this step, unless save_steps
           * just wrote it or no step ran since the resumed one. */
          if (cur.global_step > start_step && saved_step != cur.global_step &&
              !save_checkpoint (m, o, &adam, &cur, chunk, row_len, fingerprint, error))
            goto out;
          if (o->stopped_at)
            *o->stopped_at = cur.global_step > start_step ? checkpoint_dir (o, &cur) : g_strdup (o->resume_from);
          if (final_loss)
            *final_loss = cur.last_loss;
          ok = TRUE;
          goto out;
        }
      if (cur.step_in_epoch >= steps_per_epoch)
        {
          cur.epoch++;
          cur.step_in_epoch = 0;
        }
      if (last_perm_epoch != cur.epoch)
        {
          epoch_order (o->seed, cur.epoch, d.n_rows, perm, o->no_shuffle);
          last_perm_epoch = cur.epoch;
        }
      gint64 ts = g_get_monotonic_time ();
      for (gsize i = 0; i < n_step_rows; i++)
        rows[i] = perm[(gsize) cur.step_in_epoch * n_step_rows + i];

      Work works[16];
      GThread *threads[16];
      float scale = (float) (1.0 / ((double) n_step_rows * (double) n_chunks));
      memset (grads, 0, m->n_params * sizeof (float));
      if (vk)
        {
          works[0] = (Work) { m, o, &d, rows, (int) n_step_rows, chunk, (int) n_chunks, row_grads, row_loss, 0, 1,
                              scale, NULL, NULL, NULL };
          if (!vk_step (vk, vstates, vk_rows, &works[0], grads, error))
            goto out;
        }
      for (int i = 0; i < n_threads && !vk; i++)
        {
          works[i] = (Work) { m, o, &d, rows, (int) n_step_rows, chunk, (int) n_chunks, row_grads, row_loss, i, n_threads,
                              scale, tapes[i], states[i], NULL };
          threads[i] = n_threads > 1 ? g_thread_new ("hier-train", work_thread, &works[i]) : NULL;
          if (!threads[i])
            work_thread (&works[i]);
        }
      GError *werr = NULL;
      for (int i = 0; i < n_threads && !vk; i++)
        {
          if (threads[i])
            g_thread_join (threads[i]);
          if (works[i].error && !werr)
            werr = works[i].error;
          else if (works[i].error)
            g_error_free (works[i].error);
        }
      if (werr)
        {
          g_propagate_error (error, werr);
          goto out;
        }
      /* Sum per-row gradients in row order: the result does not depend on
       * the thread count or scheduling. */
      double loss = 0, ce = 0, pond = 0, com = 0;
      gint64 toks = 0;
      for (gsize r = 0; r < n_step_rows; r++)
        {
          for (gsize j = 0; j < m->n_params && !vk; j++)
            grads[j] += row_grads[r][j];
          loss += row_loss[r].total / (double) n_step_rows;
          ce += row_loss[r].ce / (double) n_step_rows;
          pond += row_loss[r].ponder / (double) n_step_rows;
          com += row_loss[r].commit / (double) n_step_rows;
          toks += (gint64) row_len;
        }
      double gn2 = 0;
      for (guint i = 0; i < m->param_list->len; i++)
        {
          HnHierParam *p = m->param_list->pdata[i];
          if (!train_mask[i])
            continue;
          for (gsize j = 0; j < p->numel; j++)
            gn2 += (double) grads[p->offset + j] * grads[p->offset + j];
        }
      double gnorm = sqrt (gn2);
      if (!isfinite (gnorm) || !isfinite (loss))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "non-finite loss or gradient at step %" G_GINT64_FORMAT,
                       cur.global_step + 1);
          goto out;
        }
      float clip = o->grad_clip > 0 ? hn_clip_coef (gnorm, o->grad_clip) : 1.0f;
      double lr = schedule_lr (o, cur.global_step, cur.total_steps);
      adam.step++;
      for (guint i = 0; i < m->param_list->len; i++)
        {
          HnHierParam *p = m->param_list->pdata[i];
          if (!train_mask[i])
            continue;
          float *g = grads + p->offset;
          if (clip != 1.0f)
            for (gsize j = 0; j < p->numel; j++)
              g[j] *= clip;
          hn_adamw_step_cpu (m->params + p->offset, g, adam.m + p->offset, adam.v + p->offset, (gint64) p->numel,
                             adam.step, lr, o->beta1, o->beta2, o->eps, p->decay ? o->weight_decay : 0.0);
        }
      cur.global_step++;
      cur.step_in_epoch++;
      cur.last_loss = loss;
      /* The memory-gate warm-up counts optimizer steps. */
      hn_hier_model_data (m, "memory_gate_warmup_step")[0] = (float) cur.global_step;
      if (vk && !hn_hier_vk_runner_upload_params (vk, error))
        goto out;

      double now = (double) (g_get_monotonic_time () - t0) / 1e6;
      double dt = (double) (g_get_monotonic_time () - ts) / 1e6;
      g_autofree char *line = g_strdup_printf (
          "{\"step\":%" G_GINT64_FORMAT ",\"epoch\":%" G_GINT64_FORMAT ",\"loss\":%.6f,\"lr\":%.8g,\"grad_norm\":%.6f,"
          "\"tokens_per_s\":%.1f,\"elapsed_s\":%.3f,\"ce\":%.6f,\"ponder\":%.6f,\"commitment\":%.6f}",
          cur.global_step, cur.epoch, loss, lr, gnorm, dt > 0 ? (double) toks / dt : 0.0, now, ce, pond, com);
      if (metrics)
        {
          fprintf (metrics, "%s\n", line);
          fflush (metrics);
        }
      if (o->on_metric)
        o->on_metric (line, o->on_metric_data);
      if (o->save_steps > 0 && cur.global_step % o->save_steps == 0 && cur.global_step < cur.total_steps)
        {
          if (!save_checkpoint (m, o, &adam, &cur, chunk, row_len, fingerprint, error))
            goto out;
          saved_step = cur.global_step;
        }
    }
  if (!hn_hier_model_save (m, o->out_dir, error))
    goto out;
  if (o->tokenizer_dir && !hn_hier_copy_tokenizer_files (o->tokenizer_dir, o->out_dir, error))
    goto out;
  if (final_loss)
    *final_loss = cur.last_loss;
  ok = TRUE;
out:
  if (metrics)
    fclose (metrics);
  if (o->measured)
    {
      memset (o->measured, 0, sizeof *o->measured);
      train_memory_fixed (m, o, o->measured);
      for (int i = 0; i < n_threads; i++)
        o->measured->tapes += hn_htape_bytes (tapes[i]);
    }
  for (int i = 0; i < 16; i++)
    {
      hn_htape_free (tapes[i]);
      hn_hier_state_free (states[i]);
    }
  for (int i = 0; vstates && i < vk_rows; i++)
    hn_hier_state_free (vstates[i]);
  g_free (vstates);
  hn_hier_vk_runner_free (vk);
  for (gsize i = 0; i < n_step_rows; i++)
    g_free (row_grads[i]);
  g_free (row_grads);
  g_free (row_loss);
  g_free (grads);
  g_free (perm);
  g_free (rows);
  g_free (train_mask);
  g_free (adam.m);
  g_free (adam.v);
  return ok;
}
