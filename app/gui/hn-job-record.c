#include "hn-job-record.h"

#include <glib/gi18n.h>
#include <math.h>

struct _HnJobRecord
{
  GObject parent_instance;
  char *title;
  char *command_line;
  HnJobRecordState state;
  char *summary;
  char *output_path;
  gint64 step, total;
  double loss;
};

enum { PROP_0, PROP_SUMMARY, PROP_STATE, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnJobRecord, hn_job_record, G_TYPE_OBJECT)

static void
hn_job_record_finalize (GObject *object)
{
  HnJobRecord *self = HN_JOB_RECORD (object);
  g_free (self->title);
  g_free (self->command_line);
  g_free (self->summary);
  g_free (self->output_path);
  G_OBJECT_CLASS (hn_job_record_parent_class)->finalize (object);
}

static void
hn_job_record_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  HnJobRecord *self = HN_JOB_RECORD (object);
  switch (prop_id)
    {
    case PROP_SUMMARY: g_value_set_string (value, self->summary); break;
    case PROP_STATE: g_value_set_int (value, self->state); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_job_record_class_init (HnJobRecordClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->finalize = hn_job_record_finalize;
  object_class->get_property = hn_job_record_get_property;
  properties[PROP_SUMMARY] = g_param_spec_string ("summary", NULL, NULL, NULL, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  properties[PROP_STATE] = g_param_spec_int ("state", NULL, NULL, 0, 3, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
hn_job_record_init (HnJobRecord *self)
{
  self->loss = NAN;
  self->total = -1;
}

GListStore *
hn_job_record_list (void)
{
  static GListStore *store;
  if (!store)
    store = g_list_store_new (HN_TYPE_JOB_RECORD);
  return store;
}

HnJobRecord *
hn_job_record_new (const char *title, const char *command_line)
{
  HnJobRecord *self = g_object_new (HN_TYPE_JOB_RECORD, NULL);
  self->title = g_strdup (title);
  self->command_line = g_strdup (command_line);
  self->summary = g_strdup (_("Starting…"));
  return self;
}

const char *hn_job_record_get_title (HnJobRecord *self) { return self->title; }
const char *hn_job_record_get_command_line (HnJobRecord *self) { return self->command_line; }
HnJobRecordState hn_job_record_get_state (HnJobRecord *self) { return self->state; }
const char *hn_job_record_get_summary (HnJobRecord *self) { return self->summary; }
const char *hn_job_record_get_output_path (HnJobRecord *self) { return self->output_path; }

static void
set_summary (HnJobRecord *self, char *summary)
{
  g_free (self->summary);
  self->summary = summary;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SUMMARY]);
}

void
hn_job_record_update (HnJobRecord *self, gint64 step, gint64 total, double loss)
{
  if (step >= 0)
    self->step = step;
  if (total > 0)
    self->total = total;
  if (isfinite (loss))
    self->loss = loss;
  GString *s = g_string_new (_("Running"));
  if (self->total > 0)
    g_string_append_printf (s, _(" · step %lld of %lld"), (long long) self->step, (long long) self->total);
  else if (self->step > 0)
    g_string_append_printf (s, _(" · step %lld"), (long long) self->step);
  if (isfinite (self->loss))
    g_string_append_printf (s, _(" · loss %.4f"), self->loss);
  set_summary (self, g_string_free (s, FALSE));
}

void
hn_job_record_finish (HnJobRecord *self, HnJobRecordState state, const char *message, const char *output_path,
                      double elapsed_s)
{
  self->state = state;
  g_free (self->output_path);
  self->output_path = g_strdup (output_path);
  GString *s = g_string_new (NULL);
  switch (state)
    {
    case HN_JOB_RECORD_SUCCEEDED:
      if (elapsed_s >= 60)
        g_string_append_printf (s, _("Finished in %.0f min"), elapsed_s / 60);
      else
        g_string_append_printf (s, _("Finished in %.0f s"), elapsed_s);
      break;
    case HN_JOB_RECORD_CANCELLED:
      g_string_append (s, _("Stopped"));
      break;
    case HN_JOB_RECORD_FAILED:
      g_string_append_printf (s, _("Failed: %s"), message ? message : _("unknown error"));
      break;
    default:
      g_string_append (s, _("Running"));
    }
  if (state != HN_JOB_RECORD_FAILED && isfinite (self->loss))
    g_string_append_printf (s, _(" · final loss %.4f"), self->loss);
  if (output_path)
    g_string_append_printf (s, " · %s", output_path);
  set_summary (self, g_string_free (s, FALSE));
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_STATE]);
}
