/* Data-parallel training (data-parallel.h): replicas, the host all-reduce
 * and one thread per replica for each phase of a step. */
#include "train/data-parallel.h"

#include <string.h>

#include "base/hn-error.h"
#include "train/checkpoint.h"

typedef struct {
  HnVkContext *ctx;
  HnTransformer *model;
  HnTrainGraph *graph;
  float *host;    /* [n_trainable] gradients on the host (all-reduce), NULL with one replica */
  double loss;    /* this replica's share of the step's loss */
} Replica;

struct _HnDataParallel {
  guint n;
  Replica *rep;
  int rows;       /* rows per replica */
  int seq_len;
  gint64 n_grad;  /* floats in one replica's gradients */
  double allreduce_s; /* time spent in the all-reduce so far */
  HnTrainGraphOptions gopts;
};

void
hn_data_parallel_set_graph_options (HnDataParallel *dp, const HnTrainGraphOptions *opts)
{
  dp->gopts = *opts;
}

void
hn_data_parallel_set_loss_scale (HnDataParallel *dp, double scale)
{
  for (guint r = 0; r < dp->n; r++)
    if (dp->rep[r].graph)
      hn_train_graph_set_loss_scale (dp->rep[r].graph, scale);
}

void
hn_data_parallel_free (HnDataParallel *dp)
{
  if (!dp)
    return;
  for (guint r = 0; r < dp->n; r++)
    {
      Replica *p = &dp->rep[r];
      g_clear_pointer (&p->graph, hn_train_graph_free);
      g_clear_pointer (&p->model, hn_transformer_free);
      g_clear_pointer (&p->ctx, hn_vk_context_unref);
      g_free (p->host);
    }
  g_free (dp->rep);
  g_free (dp);
}

HnDataParallel *
hn_data_parallel_new (HnVkContext *const *ctxs, guint n_devices, const char *weights_dir, GError **error)
{
  return hn_data_parallel_new_quantized (ctxs, n_devices, weights_dir, HN_DTYPE_F32, error);
}

HnDataParallel *
hn_data_parallel_new_quantized (HnVkContext *const *ctxs, guint n_devices, const char *weights_dir, HnDType quant,
                                GError **error)
{
  if (n_devices == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "data-parallel training needs at least one device");
      return NULL;
    }
  g_autoptr (HnDataParallel) dp = g_new0 (HnDataParallel, 1);
  dp->n = n_devices;
  dp->rep = g_new0 (Replica, n_devices);
  for (guint r = 0; r < n_devices; r++)
    {
      Replica *p = &dp->rep[r];
      p->ctx = hn_vk_context_ref (ctxs[r]);
      if (!(p->model = hn_transformer_load_quantized (p->ctx, weights_dir, quant, error)))
        {
          if (n_devices > 1)
            g_prefix_error (error, "replica %u (%s): ", r, hn_vk_context_get_device_info (p->ctx)->name);
          return NULL;
        }
      guint64 bad = 0;
      const char *nf = hn_transformer_get_nonfinite_weight (p->model, &bad);
      if (nf) /* every loss and gradient would be NaN */
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "%s: weight %s holds %" G_GUINT64_FORMAT
                       " NaN/Inf values; training from it cannot work", weights_dir, nf, bad);
          return NULL;
        }
    }
  return g_steal_pointer (&dp);
}

gboolean
hn_data_parallel_setup (HnDataParallel *dp, int global_batch, int seq_len, HnLoraAdapter *adapter, GError **error)
{
  if (global_batch % (int) dp->n != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--batch-size %d does not split evenly over %u devices (give a multiple of %u)", global_batch, dp->n,
                   dp->n);
      return FALSE;
    }
  dp->rows = global_batch / (int) dp->n;
  dp->seq_len = seq_len;
  for (guint r = 0; r < dp->n; r++)
    {
      Replica *p = &dp->rep[r];
      if (!(p->graph = hn_train_graph_new_full (p->model, dp->rows, seq_len, adapter, &dp->gopts, error)))
        return FALSE;
    }
  dp->n_grad = hn_train_graph_get_n_trainable (dp->rep[0].graph);
  if (dp->n > 1)
    for (guint r = 0; r < dp->n; r++)
      dp->rep[r].host = g_try_new (float, dp->n_grad);
  for (guint r = 0; dp->n > 1 && r < dp->n; r++)
    if (!dp->rep[r].host)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
                     "data-parallel training: no host memory for %u copies of %.1f MB of gradients", dp->n,
                     dp->n_grad * 4.0 / 1e6);
        return FALSE;
      }
  return TRUE;
}

guint
hn_data_parallel_get_n_replicas (HnDataParallel *dp)
{
  return dp->n;
}

HnVkContext *
hn_data_parallel_get_context (HnDataParallel *dp, guint replica)
{
  g_return_val_if_fail (replica < dp->n, NULL);
  return dp->rep[replica].ctx;
}

HnTransformer *
hn_data_parallel_get_model (HnDataParallel *dp, guint replica)
{
  g_return_val_if_fail (replica < dp->n, NULL);
  return dp->rep[replica].model;
}

HnTrainGraph *
hn_data_parallel_get_graph (HnDataParallel *dp, guint replica)
{
  g_return_val_if_fail (replica < dp->n, NULL);
  return dp->rep[replica].graph;
}

/* ---------------------------------------------------------------- one thread per replica */

typedef gboolean (*ReplicaFunc) (HnDataParallel *dp, guint r, gconstpointer data, GError **error);

typedef struct {
  HnDataParallel *dp;
  guint r;
  ReplicaFunc fn;
  gconstpointer data;
  GError *error;
  gboolean ok;
} Task;

static gpointer
task_run (gpointer p)
{
  Task *t = p;
  t->ok = t->fn (t->dp, t->r, t->data, &t->error);
  return NULL;
}

/* Runs fn for every replica, replica 0 on this thread and the others on
 * their own (each replica's context has its own queue, so they overlap).
 * Every replica finishes before this returns; the first failure (by replica
 * order) is reported. */
static gboolean
run_all (HnDataParallel *dp, ReplicaFunc fn, gconstpointer data, GError **error)
{
  if (dp->n == 1)
    return fn (dp, 0, data, error);
  g_autofree Task *tasks = g_new0 (Task, dp->n);
  g_autofree GThread **threads = g_new0 (GThread *, dp->n);
  for (guint r = 0; r < dp->n; r++)
    tasks[r] = (Task) { dp, r, fn, data, NULL, FALSE };
  for (guint r = 1; r < dp->n; r++)
    threads[r] = g_thread_new ("hn-replica", task_run, &tasks[r]);
  task_run (&tasks[0]);
  for (guint r = 1; r < dp->n; r++)
    g_thread_join (threads[r]);
  gboolean ok = TRUE;
  for (guint r = 0; r < dp->n; r++)
    {
      if (ok && !tasks[r].ok)
        {
          if (dp->n > 1)
            g_prefix_error (&tasks[r].error, "replica %u: ", r);
          g_propagate_error (error, g_steal_pointer (&tasks[r].error));
          ok = FALSE;
        }
      g_clear_error (&tasks[r].error);
    }
  return ok;
}

/* ---------------------------------------------------------------- step phases */

typedef struct {
  const gint32 *inputs, *targets;
  const float *weights;
  int accum;
  double w_total;
} StepData;

static gboolean
replica_micro_steps (HnDataParallel *dp, guint r, gconstpointer data, GError **error)
{
  const StepData *sd = data;
  Replica *p = &dp->rep[r];
  gint64 local = (gint64) dp->rows * dp->seq_len;
  gint64 global = local * dp->n;
  p->loss = 0;
  if (!hn_train_graph_zero_grads (p->graph, error))
    return FALSE;
  for (int mb = 0; mb < sd->accum; mb++)
    {
      gint64 off = mb * global + r * local;
      double part = 0;
      if (!hn_train_graph_micro_step (p->graph, sd->inputs + off, sd->targets + off, sd->weights ? sd->weights + off : NULL,
                                      sd->w_total, &part, error))
        return FALSE;
      p->loss += part;
    }
  return TRUE;
}

/* Gradients of replica r into (to_host) or from (!to_host) a host array in parameter order. */
static gboolean
copy_grads (HnDataParallel *dp, guint r, float *host, gboolean to_host, GError **error)
{
  HnTrainGraph *g = dp->rep[r].graph;
  gint64 off = 0;
  for (guint i = 0; i < hn_train_graph_get_n_params (g); i++)
    {
      HnTensor *t = hn_train_graph_get_param (g, i)->g;
      gboolean ok = to_host ? hn_tensor_download_f32 (t, host + off, (gsize) t->n, error)
                            : hn_tensor_upload_f32 (t, host + off, (gsize) t->n, error);
      if (!ok)
        return FALSE;
      off += t->n;
    }
  return TRUE;
}

static gboolean
replica_download (HnDataParallel *dp, guint r, gconstpointer data, GError **error)
{
  return copy_grads (dp, r, dp->rep[r].host, TRUE, error);
}

/* Replica r's thread sums its slice of every replica's gradients into
 * replica 0's array, always in replica order, so the result does not depend
 * on the thread timing. */
static gboolean
replica_reduce (HnDataParallel *dp, guint r, gconstpointer data, GError **error)
{
  gint64 lo = dp->n_grad * r / dp->n, hi = dp->n_grad * (r + 1) / dp->n;
  float *sum = dp->rep[0].host;
  for (guint k = 1; k < dp->n; k++)
    {
      const float *src = dp->rep[k].host;
      for (gint64 i = lo; i < hi; i++)
        sum[i] += src[i];
    }
  return TRUE;
}

static gboolean
replica_upload (HnDataParallel *dp, guint r, gconstpointer data, GError **error)
{
  return copy_grads (dp, r, dp->rep[0].host, FALSE, error);
}

gboolean
hn_data_parallel_gradients (HnDataParallel *dp, const gint32 *inputs, const gint32 *targets, const float *weights,
                            int accum, double w_total, double *loss, GError **error)
{
  g_return_val_if_fail (dp->rep[0].graph, FALSE);
  StepData sd = { inputs, targets, weights, accum, w_total };
  if (!run_all (dp, replica_micro_steps, &sd, error))
    return FALSE;
  *loss = 0;
  for (guint r = 0; r < dp->n; r++)
    *loss += dp->rep[r].loss;
  if (dp->n == 1)
    return TRUE;
  gint64 t0 = g_get_monotonic_time ();
  gboolean ok = run_all (dp, replica_download, NULL, error) && run_all (dp, replica_reduce, NULL, error) &&
                run_all (dp, replica_upload, NULL, error);
  dp->allreduce_s += (g_get_monotonic_time () - t0) / 1e6;
  return ok;
}

double
hn_data_parallel_get_allreduce_seconds (HnDataParallel *dp)
{
  return dp->allreduce_s;
}

gboolean
hn_data_parallel_grad_norm (HnDataParallel *dp, double *norm, GError **error)
{
  return hn_train_graph_grad_norm (dp->rep[0].graph, norm, error);
}

typedef struct {
  const HnOptimConfig *oc;
  gint64 step;
  double lr;
  float clip;
} OptData;

static gboolean
replica_optimizer (HnDataParallel *dp, guint r, gconstpointer data, GError **error)
{
  const OptData *od = data;
  return hn_train_graph_optimizer_step (dp->rep[r].graph, od->oc, od->step, od->lr, od->clip, error);
}

gboolean
hn_data_parallel_optimizer_step (HnDataParallel *dp, const HnOptimConfig *oc, gint64 step, double lr, float clip,
                                 GError **error)
{
  OptData od = { oc, step, lr, clip };
  return run_all (dp, replica_optimizer, &od, error);
}

gboolean
hn_data_parallel_read_optimizer (HnDataParallel *dp, const char *dir, GError **error)
{
  for (guint r = 0; r < dp->n; r++)
    if (!hn_checkpoint_read_optimizer (dp->rep[r].graph, dir, error))
      return FALSE;
  return TRUE;
}

gboolean
hn_data_parallel_replicas_identical (HnDataParallel *dp, GError **error)
{
  HnTrainGraph *g0 = dp->rep[0].graph;
  guint np = hn_train_graph_get_n_params (g0);
  for (guint i = 0; i < np; i++)
    {
      HnTrainParam *p0 = hn_train_graph_get_param (g0, i);
      g_autofree float *a = g_new (float, p0->w->n), *b = g_new (float, p0->w->n);
      if (!hn_tensor_download_f32 (p0->w, a, (gsize) p0->w->n, error))
        return FALSE;
      for (guint r = 1; r < dp->n; r++)
        {
          HnTrainParam *pr = hn_train_graph_get_param (dp->rep[r].graph, i);
          if (!hn_tensor_download_f32 (pr->w, b, (gsize) pr->w->n, error))
            return FALSE;
          if (memcmp (a, b, sizeof (float) * (gsize) p0->w->n) != 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "replica %u's %s differs from replica 0's", r, p0->name);
              return FALSE;
            }
        }
    }
  return TRUE;
}
