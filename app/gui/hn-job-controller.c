#include "hn-job-controller.h"
#include "hn-job-record.h"
#include "hn-page-util.h"
#include "base/hn-error.h"

#include <glib/gi18n.h>
#include <gtk/gtk.h>
#include <math.h>

struct _HnJobController
{
  GObject parent_instance;
  HnJob *job;
  HnJobRecord *record;
  GMainContext *context;   /* where events are replayed */
  GMutex lock;             /* guards queue and idle_pending */
  GQueue queue;            /* HnJobEvent* from the worker */
  gboolean idle_pending;
  guint inhibit_cookie;
  gboolean running;
  HnJobEventFunc tap;      /* worker-thread tap, see hn_job_controller_set_worker_tap */
  gpointer tap_data;
};

enum { PROP_0, PROP_RUNNING, N_PROPS };
static GParamSpec *properties[N_PROPS];
enum { STARTED, EVENT, FINISHED, N_SIGNALS };
static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (HnJobController, hn_job_controller, G_TYPE_OBJECT)

static void
set_running (HnJobController *self, gboolean running)
{
  if (self->running == running)
    return;
  self->running = running;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_RUNNING]);
}

static void
notify_finished (HnJobController *self, const HnJobEvent *e)
{
  GApplication *app = g_application_get_default ();
  if (!GTK_IS_APPLICATION (app))
    return;
  if (self->inhibit_cookie)
    {
      gtk_application_uninhibit (GTK_APPLICATION (app), self->inhibit_cookie);
      self->inhibit_cookie = 0;
    }
  GSettings *settings = hn_app_settings ();
  if (settings && !g_settings_get_boolean (settings, "notify-on-finish"))
    return;
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (app));
  if (win && gtk_window_is_active (win) && gtk_widget_get_visible (GTK_WIDGET (win)))
    return;
  const char *title = gettext (hn_job_spec_get_kind_info (hn_job_get_spec (self->job))->title);
  g_autoptr (GNotification) n = g_notification_new (e->done.ok ? _("Job finished") : e->done.cancelled
                                                                                         ? _("Job stopped")
                                                                                         : _("Job failed"));
  g_autofree char *body = e->done.ok ? g_strdup_printf (_("%s is done."), title)
                                     : g_strdup_printf ("%s: %s", title, e->done.error_message ? e->done.error_message : "");
  g_notification_set_body (n, body);
  g_application_send_notification (app, "job-finished", n);
}

static gboolean
drain (gpointer data)
{
  HnJobController *self = data;
  GQueue batch = G_QUEUE_INIT;
  g_mutex_lock (&self->lock);
  batch = self->queue;
  g_queue_init (&self->queue);
  self->idle_pending = FALSE;
  g_mutex_unlock (&self->lock);

  for (GList *l = batch.head; l; l = l->next)
    {
      HnJobEvent *e = l->data;
      /* a progress event followed by a newer one in the same batch says nothing new */
      if (e->type == HN_JOB_EVENT_PROGRESS && l->next && ((HnJobEvent *) l->next->data)->type == HN_JOB_EVENT_PROGRESS)
        continue;
      if (self->record)
        {
          if (e->type == HN_JOB_EVENT_PROGRESS)
            hn_job_record_update (self->record, e->progress.step, e->progress.total, NAN);
          else if (e->type == HN_JOB_EVENT_METRIC)
            {
              hn_job_record_update (self->record, e->metric.step, -1, e->metric.loss);
              hn_job_record_add_point (self->record, e->metric.step, e->metric.loss, e->metric.eval_loss);
            }
        }
      g_signal_emit (self, signals[EVENT], 0, e);
      if (e->type == HN_JOB_EVENT_DONE)
        {
          if (self->record)
            {
              hn_job_record_set_resume_from (self->record, e->done.resume_from);
              hn_job_record_finish (self->record,
                                    e->done.ok ? (e->done.resume_from ? HN_JOB_RECORD_STOPPED : HN_JOB_RECORD_SUCCEEDED)
                                    : e->done.cancelled ? HN_JOB_RECORD_CANCELLED : HN_JOB_RECORD_FAILED,
                                    e->done.error_message, e->done.output_path, e->time_s);
            }
          notify_finished (self, e);
          set_running (self, FALSE);
          g_signal_emit (self, signals[FINISHED], 0, e->done.ok, e->done.error_message, e->done.output_path);
        }
    }
  g_queue_clear_full (&batch, (GDestroyNotify) hn_job_event_free);
  return G_SOURCE_REMOVE;
}

/* Worker thread: never touch GTK here. */
static void
on_job_event (HnJob *job, const HnJobEvent *event, gpointer user_data)
{
  HnJobController *self = user_data;
  gboolean schedule = FALSE;
  if (self->tap)
    self->tap (job, event, self->tap_data);
  g_mutex_lock (&self->lock);
  g_queue_push_tail (&self->queue, hn_job_event_copy (event));
  if (!self->idle_pending)
    schedule = self->idle_pending = TRUE;
  g_mutex_unlock (&self->lock);
  if (schedule)
    {
      GSource *src = g_idle_source_new ();
      g_source_set_priority (src, G_PRIORITY_DEFAULT_IDLE);
      g_source_set_callback (src, drain, g_object_ref (self), g_object_unref);
      g_source_attach (src, self->context);
      g_source_unref (src);
    }
}

static void
on_run_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  /* the DONE event already told everything; just collect the result */
  g_autoptr (HnJobController) self = user_data;
  hn_job_run_finish (HN_JOB (source), result, NULL);
}

gboolean
hn_job_controller_start (HnJobController *self, HnJobSpec *spec, GError **error)
{
  g_return_val_if_fail (HN_IS_JOB_CONTROLLER (self) && HN_IS_JOB_SPEC (spec), FALSE);
  if (self->running)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("A job is already running on this page"));
      return FALSE;
    }
  if (!hn_job_spec_validate (spec, error))
    return FALSE;
  g_clear_object (&self->job);
  self->job = hn_job_new (spec);
  hn_job_set_event_func (self->job, on_job_event, g_object_ref (self), g_object_unref);

  g_autofree char *line = hn_job_spec_to_command_line (spec, HN_ARGV_WITH_PROGRAM);
  g_clear_object (&self->record);
  self->record = hn_job_record_new (gettext (hn_job_spec_get_kind_info (spec)->title), line);
  g_list_store_insert (hn_job_record_list (), 0, self->record);

  GApplication *app = g_application_get_default ();
  if (GTK_IS_APPLICATION (app) && !self->inhibit_cookie)
    self->inhibit_cookie = gtk_application_inhibit (GTK_APPLICATION (app), NULL, GTK_APPLICATION_INHIBIT_SUSPEND,
                                                    _("A job is running"));
  g_clear_pointer (&self->context, g_main_context_unref);
  self->context = g_main_context_ref_thread_default ();
  set_running (self, TRUE);
  g_signal_emit (self, signals[STARTED], 0);
  hn_job_run_async (self->job, NULL, on_run_done, g_object_ref (self));
  return TRUE;
}

void
hn_job_controller_stop (HnJobController *self)
{
  g_return_if_fail (HN_IS_JOB_CONTROLLER (self));
  if (self->job && self->running)
    {
      hn_job_close_input (self->job);
      hn_job_cancel (self->job);
    }
}

void
hn_job_controller_save_and_stop (HnJobController *self)
{
  g_return_if_fail (HN_IS_JOB_CONTROLLER (self));
  if (!self->job || !self->running)
    return;
  if (hn_job_kind_can_save_and_stop (hn_job_spec_get_kind (hn_job_get_spec (self->job))))
    hn_job_request_save_and_stop (self->job);
  else
    hn_job_controller_stop (self);
}

void
hn_job_controller_set_worker_tap (HnJobController *self, HnJobEventFunc func, gpointer user_data)
{
  g_return_if_fail (HN_IS_JOB_CONTROLLER (self) && !self->running);
  self->tap = func;
  self->tap_data = user_data;
}

gboolean
hn_job_controller_get_running (HnJobController *self)
{
  return self->running;
}

HnJob *
hn_job_controller_get_job (HnJobController *self)
{
  return self->job;
}

static void
hn_job_controller_dispose (GObject *object)
{
  HnJobController *self = HN_JOB_CONTROLLER (object);
  if (self->job)
    hn_job_cancel (self->job);
  GApplication *app = g_application_get_default ();
  if (self->inhibit_cookie && GTK_IS_APPLICATION (app))
    gtk_application_uninhibit (GTK_APPLICATION (app), self->inhibit_cookie);
  self->inhibit_cookie = 0;
  g_clear_object (&self->job);
  g_clear_object (&self->record);
  G_OBJECT_CLASS (hn_job_controller_parent_class)->dispose (object);
}

static void
hn_job_controller_finalize (GObject *object)
{
  HnJobController *self = HN_JOB_CONTROLLER (object);
  g_queue_clear_full (&self->queue, (GDestroyNotify) hn_job_event_free);
  g_clear_pointer (&self->context, g_main_context_unref);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (hn_job_controller_parent_class)->finalize (object);
}

static void
hn_job_controller_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_RUNNING: g_value_set_boolean (value, HN_JOB_CONTROLLER (object)->running); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_job_controller_class_init (HnJobControllerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->dispose = hn_job_controller_dispose;
  object_class->finalize = hn_job_controller_finalize;
  object_class->get_property = hn_job_controller_get_property;
  properties[PROP_RUNNING] = g_param_spec_boolean ("running", NULL, NULL, FALSE,
                                                   G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
  signals[STARTED] = g_signal_new ("started", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                   NULL, G_TYPE_NONE, 0);
  signals[EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                 G_TYPE_NONE, 1, G_TYPE_POINTER);
  signals[FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                    NULL, G_TYPE_NONE, 3, G_TYPE_BOOLEAN, G_TYPE_STRING, G_TYPE_STRING);
}

static void
hn_job_controller_init (HnJobController *self)
{
  g_mutex_init (&self->lock);
  g_queue_init (&self->queue);
}

HnJobController *
hn_job_controller_new (void)
{
  return g_object_new (HN_TYPE_JOB_CONTROLLER, NULL);
}
