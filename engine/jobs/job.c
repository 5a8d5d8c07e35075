/* HnJob: runs one job kind's run function on the engine thread pool and
 * delivers its events. See job.h for the flow. */
#include "jobs/job.h"
#include "base/hn-error.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

/* ---- registry --------------------------------------------------------- */

static GMutex registry_lock;
static GHashTable *registry; /* canonical kind -> HnJobRunFunc */

void
hn_job_register_kind (const char *kind, HnJobRunFunc func)
{
  g_return_if_fail (kind && func);
  const HnJobKindInfo *info = hn_job_kind_lookup (kind);
  if (!info)
    {
      g_critical ("hn_job_register_kind: %s is not in hn_job_kind_table (engine/jobs/job-options.c)", kind);
      return;
    }
  g_mutex_lock (&registry_lock);
  if (!registry)
    registry = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (registry, (gpointer) info->name, (gpointer) func);
  g_mutex_unlock (&registry_lock);
}

static HnJobRunFunc
lookup_kind (const char *kind)
{
  const HnJobKindInfo *info = hn_job_kind_lookup (kind);
  HnJobRunFunc func = NULL;
  g_mutex_lock (&registry_lock);
  if (registry && info)
    func = (HnJobRunFunc) g_hash_table_lookup (registry, info->name);
  g_mutex_unlock (&registry_lock);
  return func;
}

gboolean
hn_job_kind_is_registered (const char *kind)
{
  return lookup_kind (kind) != NULL;
}

/* ---- events ----------------------------------------------------------- */

HnJobEvent *
hn_job_event_copy (const HnJobEvent *event)
{
  HnJobEvent *copy = g_new (HnJobEvent, 1);
  *copy = *event;
  switch (event->type)
    {
    case HN_JOB_EVENT_TOKEN:
      copy->token.text = g_strdup (event->token.text);
      break;
    case HN_JOB_EVENT_LOG:
      copy->log.message = g_strdup (event->log.message);
      break;
    case HN_JOB_EVENT_DONE:
      copy->done.error_message = g_strdup (event->done.error_message);
      copy->done.output_path = g_strdup (event->done.output_path);
      copy->done.resume_from = g_strdup (event->done.resume_from);
      break;
    default:
      break;
    }
  return copy;
}

void
hn_job_event_free (HnJobEvent *event)
{
  if (!event)
    return;
  switch (event->type)
    {
    case HN_JOB_EVENT_TOKEN:
      g_free (event->token.text);
      break;
    case HN_JOB_EVENT_LOG:
      g_free (event->log.message);
      break;
    case HN_JOB_EVENT_DONE:
      g_free (event->done.error_message);
      g_free (event->done.output_path);
      g_free (event->done.resume_from);
      break;
    default:
      break;
    }
  g_free (event);
}

const char *
hn_job_event_type_name (HnJobEventType type)
{
  switch (type)
    {
    case HN_JOB_EVENT_PROGRESS: return "progress";
    case HN_JOB_EVENT_METRIC: return "metric";
    case HN_JOB_EVENT_TOKEN: return "token";
    case HN_JOB_EVENT_LOG: return "log";
    case HN_JOB_EVENT_TURN_END: return "turn_end";
    case HN_JOB_EVENT_DONE: return "done";
    }
  return "unknown";
}

static void
add_double (JsonBuilder *b, const char *name, double v)
{
  if (isfinite (v))
    {
      json_builder_set_member_name (b, name);
      json_builder_add_double_value (b, v);
    }
}

static void
add_int (JsonBuilder *b, const char *name, gint64 v)
{
  if (v >= 0)
    {
      json_builder_set_member_name (b, name);
      json_builder_add_int_value (b, v);
    }
}

static void
add_string (JsonBuilder *b, const char *name, const char *v)
{
  if (v)
    {
      json_builder_set_member_name (b, name);
      json_builder_add_string_value (b, v);
    }
}

char *
hn_job_event_to_json (const HnJobEvent *e)
{
  static const char *const units[] = { "steps", "tokens", "bytes", "items" };
  static const char *const levels[] = { "debug", "info", "warning", "error" };
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  add_string (b, "event", hn_job_event_type_name (e->type));
  add_double (b, "time_s", e->time_s);
  switch (e->type)
    {
    case HN_JOB_EVENT_PROGRESS:
      add_string (b, "unit", units[e->progress.unit]);
      add_int (b, "step", e->progress.step);
      add_int (b, "total", e->progress.total);
      add_double (b, "tokens_per_s", e->progress.tokens_per_s);
      add_double (b, "eta_s", e->progress.eta_s);
      add_int (b, "device_bytes", e->progress.device_bytes);
      break;
    case HN_JOB_EVENT_METRIC:
      add_int (b, "step", e->metric.step);
      add_double (b, "epoch", e->metric.epoch);
      add_double (b, "loss", e->metric.loss);
      add_double (b, "lr", e->metric.lr);
      add_double (b, "grad_norm", e->metric.grad_norm);
      add_double (b, "tokens_per_s", e->metric.tokens_per_s);
      add_double (b, "elapsed_s", e->metric.elapsed_s);
      add_double (b, "eval_loss", e->metric.eval_loss);
      add_double (b, "loss_scale", e->metric.loss_scale);
      break;
    case HN_JOB_EVENT_TOKEN:
      add_string (b, "text", e->token.text ? e->token.text : "");
      add_int (b, "token_id", e->token.token_id);
      add_int (b, "sequence", e->token.sequence);
      break;
    case HN_JOB_EVENT_LOG:
      add_string (b, "level", levels[e->log.level]);
      add_string (b, "message", e->log.message);
      break;
    case HN_JOB_EVENT_TURN_END:
      add_int (b, "n_tokens", e->turn_end.n_tokens);
      break;
    case HN_JOB_EVENT_DONE:
      json_builder_set_member_name (b, "ok");
      json_builder_add_boolean_value (b, e->done.ok);
      json_builder_set_member_name (b, "cancelled");
      json_builder_add_boolean_value (b, e->done.cancelled);
      add_string (b, "error", e->done.error_message);
      add_string (b, "output_path", e->done.output_path);
      add_string (b, "resume_from", e->done.resume_from);
      break;
    }
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  return json_generator_to_data (gen, NULL);
}

/* ---- the job ---------------------------------------------------------- */

static int input_closed_marker;

struct _HnJob
{
  GObject parent_instance;
  HnJobSpec *spec;
  GCancellable *cancellable;
  GCancellable *chained;  /* the caller's cancellable, forwarded to ours */
  gulong chained_id;

  HnJobEventFunc func;
  gpointer func_data;
  GDestroyNotify func_destroy;

  GMutex lock;            /* output_path, resume_path */
  char *output_path;
  char *resume_path;
  gint save_and_stop;     /* atomic */
  gint64 device_bytes;    /* written by the job thread only */
  gint running;           /* atomic */
  gint started;           /* atomic */
  gint64 start_us;

  /* progress rate, from the first progress call */
  gboolean rate_started;
  gint64 rate_t0, rate_step0, rate_tokens0;

  GAsyncQueue *input;
};

G_DEFINE_FINAL_TYPE (HnJob, hn_job, G_TYPE_OBJECT)

static void
hn_job_finalize (GObject *object)
{
  HnJob *self = HN_JOB (object);
  if (self->chained)
    {
      g_cancellable_disconnect (self->chained, self->chained_id);
      g_object_unref (self->chained);
    }
  if (self->func_destroy)
    self->func_destroy (self->func_data);
  g_clear_object (&self->spec);
  g_clear_object (&self->cancellable);
  g_free (self->output_path);
  g_free (self->resume_path);
  g_mutex_clear (&self->lock);
  g_async_queue_unref (self->input);
  G_OBJECT_CLASS (hn_job_parent_class)->finalize (object);
}

static void
hn_job_class_init (HnJobClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = hn_job_finalize;
}

static void
input_free (gpointer p)
{
  if (p != &input_closed_marker)
    g_free (p);
}

static void
hn_job_init (HnJob *self)
{
  g_mutex_init (&self->lock);
  self->cancellable = g_cancellable_new ();
  self->device_bytes = -1;
  self->input = g_async_queue_new_full (input_free);
}

HnJob *
hn_job_new (HnJobSpec *spec)
{
  g_return_val_if_fail (HN_IS_JOB_SPEC (spec), NULL);
  HnJob *self = g_object_new (HN_TYPE_JOB, NULL);
  self->spec = hn_job_spec_copy (spec);
  return self;
}

HnJobSpec *
hn_job_get_spec (HnJob *self)
{
  g_return_val_if_fail (HN_IS_JOB (self), NULL);
  return self->spec;
}

GCancellable *
hn_job_get_cancellable (HnJob *self)
{
  g_return_val_if_fail (HN_IS_JOB (self), NULL);
  return self->cancellable;
}

void
hn_job_cancel (HnJob *self)
{
  g_return_if_fail (HN_IS_JOB (self));
  g_cancellable_cancel (self->cancellable);
}

void
hn_job_set_event_func (HnJob *self, HnJobEventFunc func, gpointer user_data, GDestroyNotify destroy)
{
  g_return_if_fail (HN_IS_JOB (self));
  g_return_if_fail (!g_atomic_int_get (&self->started));
  if (self->func_destroy)
    self->func_destroy (self->func_data);
  self->func = func;
  self->func_data = user_data;
  self->func_destroy = destroy;
}

gboolean
hn_job_is_running (HnJob *self)
{
  g_return_val_if_fail (HN_IS_JOB (self), FALSE);
  return g_atomic_int_get (&self->running) != 0;
}

double
hn_job_get_elapsed (HnJob *self)
{
  g_return_val_if_fail (HN_IS_JOB (self), 0.0);
  if (!g_atomic_int_get (&self->started))
    return 0.0;
  return (double) (g_get_monotonic_time () - self->start_us) / G_USEC_PER_SEC;
}

gboolean
hn_job_check_cancelled (HnJob *self, GError **error)
{
  if (g_cancellable_is_cancelled (self->cancellable))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "%s was cancelled",
                   hn_job_spec_get_kind (self->spec));
      return FALSE;
    }
  return TRUE;
}

void
hn_job_emit (HnJob *self, const HnJobEvent *event)
{
  g_return_if_fail (HN_IS_JOB (self) && event);
  if (!self->func)
    return;
  HnJobEvent e = *event;
  e.time_s = hn_job_get_elapsed (self);
  self->func (self, &e, self->func_data);
}

void
hn_job_emit_progress (HnJob *self, HnProgressUnit unit, gint64 step, gint64 total, gint64 tokens_done)
{
  gint64 now = g_get_monotonic_time ();
  if (!self->rate_started)
    {
      self->rate_started = TRUE;
      self->rate_t0 = now;
      self->rate_step0 = step;
      self->rate_tokens0 = tokens_done;
    }
  double dt = (double) (now - self->rate_t0) / G_USEC_PER_SEC;
  HnJobEvent e = { .type = HN_JOB_EVENT_PROGRESS };
  e.progress.unit = unit;
  e.progress.step = step;
  e.progress.total = total;
  e.progress.tokens_per_s = NAN;
  e.progress.eta_s = NAN;
  e.progress.device_bytes = self->device_bytes;
  if (dt > 0.0 && tokens_done >= 0 && self->rate_tokens0 >= 0)
    e.progress.tokens_per_s = (double) (tokens_done - self->rate_tokens0) / dt;
  gint64 done_steps = step - self->rate_step0;
  /* wait for the rate to settle so the estimate does not jump around */
  if (total > 0 && done_steps >= 3 && dt >= 2.0)
    e.progress.eta_s = (double) (total - step) * dt / (double) done_steps;
  hn_job_emit (self, &e);
}

void
hn_job_metric_init (HnJobMetric *m)
{
  m->step = -1;
  m->epoch = m->loss = m->lr = m->grad_norm = m->tokens_per_s = m->elapsed_s = m->eval_loss = m->loss_scale = NAN;
}

void
hn_job_emit_metric (HnJob *self, const HnJobMetric *metric)
{
  HnJobEvent e = { .type = HN_JOB_EVENT_METRIC };
  e.metric = *metric;
  hn_job_emit (self, &e);
}

void
hn_job_emit_token (HnJob *self, guint sequence, gint32 token_id, const char *text)
{
  HnJobEvent e = { .type = HN_JOB_EVENT_TOKEN };
  e.token.text = (char *) (text ? text : "");
  e.token.token_id = token_id;
  e.token.sequence = sequence;
  hn_job_emit (self, &e);
}

void
hn_job_emit_turn_end (HnJob *self, guint n_tokens)
{
  HnJobEvent e = { .type = HN_JOB_EVENT_TURN_END };
  e.turn_end.n_tokens = n_tokens;
  hn_job_emit (self, &e);
}

void
hn_job_log (HnJob *self, HnLogLevel level, const char *format, ...)
{
  va_list args;
  va_start (args, format);
  g_autofree char *msg = g_strdup_vprintf (format, args);
  va_end (args);
  HnJobEvent e = { .type = HN_JOB_EVENT_LOG };
  e.log.level = level;
  e.log.message = msg;
  hn_job_emit (self, &e);
}

void
hn_job_set_output_path (HnJob *self, const char *path)
{
  g_mutex_lock (&self->lock);
  g_free (self->output_path);
  self->output_path = g_strdup (path);
  g_mutex_unlock (&self->lock);
}

void
hn_job_set_resume_path (HnJob *self, const char *dir)
{
  g_mutex_lock (&self->lock);
  g_free (self->resume_path);
  self->resume_path = g_strdup (dir);
  g_mutex_unlock (&self->lock);
}

void
hn_job_request_save_and_stop (HnJob *self)
{
  g_atomic_int_set (&self->save_and_stop, 1);
}

gboolean
hn_job_save_and_stop_requested (HnJob *self)
{
  return g_atomic_int_get (&self->save_and_stop) != 0;
}

gboolean
hn_job_kind_can_save_and_stop (const char *kind)
{
  /* the Transformer trainer (train-job.c) and the Hierarchos one (hierarchos-train.c) honour the request */
  const char *const kinds[] = { "transformer-train", "transformer-finetune", "hierarchos-train", "hierarchos-finetune" };
  for (gsize i = 0; i < G_N_ELEMENTS (kinds); i++)
    if (g_strcmp0 (kind, kinds[i]) == 0)
      return TRUE;
  return FALSE;
}

void
hn_job_set_device_bytes (HnJob *self, gint64 bytes)
{
  self->device_bytes = bytes;
}

void
hn_job_push_input (HnJob *self, const char *text)
{
  g_return_if_fail (HN_IS_JOB (self) && text);
  g_async_queue_push (self->input, g_strdup (text));
}

void
hn_job_close_input (HnJob *self)
{
  g_return_if_fail (HN_IS_JOB (self));
  g_async_queue_push (self->input, &input_closed_marker);
}

char *
hn_job_pop_input (HnJob *self, GError **error)
{
  for (;;)
    {
      if (!hn_job_check_cancelled (self, error))
        return NULL;
      /* poll so a cancel is seen within 50 ms without a wake-up source */
      gpointer p = g_async_queue_timeout_pop (self->input, 50000);
      if (!p)
        continue;
      if (p == &input_closed_marker)
        {
          /* keep it queued so later pops also see the end */
          g_async_queue_push_front (self->input, p);
          return NULL;
        }
      return p;
    }
}

/* ---- running ---------------------------------------------------------- */

static gboolean
run_job (HnJob *self, GError **error)
{
  self->start_us = g_get_monotonic_time ();
  g_atomic_int_set (&self->running, 1);
  g_atomic_int_set (&self->started, 1);

  const char *kind = hn_job_spec_get_kind (self->spec);
  HnJobRunFunc func = lookup_kind (kind);
  GError *local = NULL;
  gboolean ok = FALSE;
  if (!func)
    g_set_error (&local, HN_ERROR, HN_ERROR_UNSUPPORTED,
                 "the job kind '%s' is not implemented in this build", kind);
  else if (hn_job_check_cancelled (self, &local) && hn_job_spec_validate (self->spec, &local))
    {
      ok = func (self, &local);
      if (!ok && !local)
        g_set_error (&local, HN_ERROR, HN_ERROR_FAILED, "%s failed without saying why", kind);
      if (ok)
        g_clear_error (&local);
    }

  HnJobEvent done = { .type = HN_JOB_EVENT_DONE };
  done.done.ok = ok;
  done.done.cancelled = local && g_error_matches (local, HN_ERROR, HN_ERROR_CANCELLED);
  done.done.error_message = local ? local->message : NULL;
  done.done.error_code = local ? local->code : 0;
  g_mutex_lock (&self->lock);
  done.done.output_path = g_strdup (self->output_path);
  done.done.resume_from = ok ? g_strdup (self->resume_path) : NULL;
  g_mutex_unlock (&self->lock);
  hn_job_emit (self, &done);
  g_free (done.done.output_path);
  g_free (done.done.resume_from);

  g_atomic_int_set (&self->running, 0);
  if (local)
    g_propagate_error (error, local);
  return ok;
}

gboolean
hn_job_run_sync (HnJob *self, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB (self), FALSE);
  g_return_val_if_fail (!g_atomic_int_get (&self->started), FALSE);
  return run_job (self, error);
}

/* The jobs on the engine's threads, from hn_job_run_async until their
 * worker lets go of them (hn_job_cancel_all, hn_job_wait_all). */
static GMutex live_lock;
static GCond live_cond;
static GList *live_jobs;  /* HnJob*, not owned (each task holds its job) */
static guint live_count;  /* also counts a worker still letting go */

static void
pool_func (gpointer data, gpointer user_data)
{
  GTask *task = data;
  HnJob *self = g_task_get_source_object (task);
  GError *error = NULL;
  if (run_job (self, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
  g_mutex_lock (&live_lock);
  live_jobs = g_list_remove (live_jobs, self);
  g_mutex_unlock (&live_lock);
  g_object_unref (task); /* may be the job's last reference: it goes on this thread */
  g_mutex_lock (&live_lock);
  live_count--;
  g_cond_broadcast (&live_cond);
  g_mutex_unlock (&live_lock);
}

void
hn_job_cancel_all (void)
{
  g_mutex_lock (&live_lock);
  GList *jobs = NULL;
  for (GList *l = live_jobs; l; l = l->next)
    jobs = g_list_prepend (jobs, g_object_ref (l->data)); /* alive: its task holds it until it leaves the list */
  g_mutex_unlock (&live_lock);
  for (GList *l = jobs; l; l = l->next)
    {
      hn_job_close_input (l->data);
      hn_job_cancel (l->data);
    }
  g_list_free_full (jobs, g_object_unref);
}

gboolean
hn_job_wait_all (guint timeout_ms)
{
  gint64 end = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  g_mutex_lock (&live_lock);
  while (live_count > 0)
    if (!g_cond_wait_until (&live_cond, &live_lock, end))
      break;
  gboolean none = live_count == 0;
  g_mutex_unlock (&live_lock);
  return none;
}

/* The engine's thread pool: a few workers, so a chat can run beside a
 * training job; the device queue serialises the GPU work itself. */
static GThreadPool *
engine_pool (void)
{
  static GThreadPool *pool;
  static gsize once = 0;
  if (g_once_init_enter (&once))
    {
      pool = g_thread_pool_new (pool_func, NULL, 4, FALSE, NULL);
      g_once_init_leave (&once, 1);
    }
  return pool;
}

static void
forward_cancel (GCancellable *cancellable, gpointer user_data)
{
  g_cancellable_cancel (G_CANCELLABLE (user_data));
}

void
hn_job_run_async (HnJob *self, GCancellable *cancellable, GAsyncReadyCallback callback, gpointer user_data)
{
  g_return_if_fail (HN_IS_JOB (self));
  g_return_if_fail (!g_atomic_int_get (&self->started));
  if (cancellable && !self->chained)
    {
      self->chained = g_object_ref (cancellable);
      self->chained_id = g_cancellable_connect (cancellable, G_CALLBACK (forward_cancel),
                                                g_object_ref (self->cancellable), g_object_unref);
    }
  GTask *task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, hn_job_run_async);
  g_atomic_int_set (&self->started, 1);
  self->start_us = g_get_monotonic_time ();
  g_mutex_lock (&live_lock);
  live_jobs = g_list_prepend (live_jobs, self);
  live_count++;
  g_mutex_unlock (&live_lock);
  GError *error = NULL;
  if (!g_thread_pool_push (engine_pool (), task, &error))
    {
      g_mutex_lock (&live_lock);
      live_jobs = g_list_remove (live_jobs, self);
      live_count--;
      g_cond_broadcast (&live_cond);
      g_mutex_unlock (&live_lock);
      g_task_return_error (task, error);
      g_object_unref (task);
    }
}

gboolean
hn_job_run_finish (HnJob *self, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}
