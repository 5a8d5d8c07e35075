#include "hn-job-record.h"

#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"

#include <glib/gi18n.h>
#include <json-glib/json-glib.h>
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
  char *resume_from;
  GArray *points; /* HnJobRecordPoint */
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
  g_free (self->resume_from);
  g_array_unref (self->points);
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
  properties[PROP_STATE] = g_param_spec_int ("state", NULL, NULL, 0, HN_JOB_RECORD_STOPPED, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
hn_job_record_init (HnJobRecord *self)
{
  self->loss = NAN;
  self->total = -1;
  self->points = g_array_new (FALSE, FALSE, sizeof (HnJobRecordPoint));
}

char *
hn_job_history_path (void)
{
  return g_build_filename (g_get_user_data_dir (), "hierarchos-native", "history.json", NULL);
}

GListStore *
hn_job_record_list (void)
{
  static GListStore *store;
  if (!store)
    {
      store = g_list_store_new (HN_TYPE_JOB_RECORD);
      g_autofree char *path = hn_job_history_path ();
      g_autoptr (GError) error = NULL;
      if (!hn_job_history_load (store, path, &error))
        g_warning ("%s", error->message); /* the app works without its history */
    }
  return store;
}

static const char *const state_names[] = { "running", "succeeded", "failed", "cancelled", "stopped" };

/* The curve in the history file: at most this many points (every k-th kept,
 * the last always), so a long run does not make the file huge. */
#define HISTORY_MAX_POINTS 1000

static void
write_points (JsonBuilder *b, GArray *points)
{
  if (points->len == 0)
    return;
  guint every = (points->len + HISTORY_MAX_POINTS - 1) / HISTORY_MAX_POINTS;
  json_builder_set_member_name (b, "curve");
  json_builder_begin_array (b);
  for (guint i = 0; i < points->len; i++)
    {
      if (i % every != 0 && i + 1 != points->len)
        continue;
      const HnJobRecordPoint *p = &g_array_index (points, HnJobRecordPoint, i);
      json_builder_begin_array (b); /* [step, loss, eval_loss or null] */
      json_builder_add_int_value (b, p->step);
      if (isfinite (p->loss))
        json_builder_add_double_value (b, p->loss);
      else
        json_builder_add_null_value (b);
      if (isfinite (p->eval_loss))
        json_builder_add_double_value (b, p->eval_loss);
      else
        json_builder_add_null_value (b);
      json_builder_end_array (b);
    }
  json_builder_end_array (b);
}

static void
read_points (JsonObject *o, GArray *points)
{
  JsonNode *n = json_object_get_member (o, "curve");
  if (!n || !JSON_NODE_HOLDS_ARRAY (n))
    return;
  JsonArray *a = json_node_get_array (n);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_ARRAY (e) || json_array_get_length (json_node_get_array (e)) != 3)
        continue; /* a damaged point: skip it, keep the curve */
      JsonArray *t = json_node_get_array (e);
      HnJobRecordPoint p = { json_array_get_int_element (t, 0), NAN, NAN };
      if (!json_array_get_null_element (t, 1))
        p.loss = json_array_get_double_element (t, 1);
      if (!json_array_get_null_element (t, 2))
        p.eval_loss = json_array_get_double_element (t, 2);
      g_array_append_val (points, p);
    }
}

gboolean
hn_job_history_save (GListModel *records, const char *path, GError **error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "version");
  json_builder_add_int_value (b, 1);
  json_builder_set_member_name (b, "jobs");
  json_builder_begin_array (b);
  guint n = MIN (g_list_model_get_n_items (records), HN_JOB_HISTORY_MAX);
  for (guint i = 0; i < n; i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (records, i);
      if (r->state == HN_JOB_RECORD_RUNNING)
        continue;
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "title");
      json_builder_add_string_value (b, r->title);
      json_builder_set_member_name (b, "command_line");
      json_builder_add_string_value (b, r->command_line);
      json_builder_set_member_name (b, "state");
      json_builder_add_string_value (b, state_names[r->state]);
      json_builder_set_member_name (b, "summary");
      json_builder_add_string_value (b, r->summary);
      if (r->output_path)
        {
          json_builder_set_member_name (b, "output_path");
          json_builder_add_string_value (b, r->output_path);
        }
      if (isfinite (r->loss))
        {
          json_builder_set_member_name (b, "final_loss");
          json_builder_add_double_value (b, r->loss);
        }
      if (r->step > 0)
        {
          json_builder_set_member_name (b, "steps");
          json_builder_add_int_value (b, r->step);
        }
      if (r->resume_from)
        {
          json_builder_set_member_name (b, "resume_from");
          json_builder_add_string_value (b, r->resume_from);
        }
      write_points (b, r->points);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  gsize len = 0;
  g_autofree char *text = json_generator_to_data (gen, &len);
  g_autofree char *dir = g_path_get_dirname (path);
  return hn_mkdir_p (dir, error) && hn_write_file_atomic (path, text, len, error);
}

static const char *
member_string (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

gboolean
hn_job_history_load (GListStore *store, const char *path, GError **error)
{
  if (!g_file_test (path, G_FILE_TEST_EXISTS))
    return TRUE;
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) local = NULL;
  if (!hn_json_parser_load_file (parser, path, HN_MAX_CONFIG_BYTES, "job history", &local))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, _("The job history %s cannot be read: %s"), path,
                   local->message);
      return FALSE;
    }
  JsonNode *root = json_parser_get_root (parser);
  JsonObject *obj = root && JSON_NODE_HOLDS_OBJECT (root) ? json_node_get_object (root) : NULL;
  JsonNode *jobs_node = obj ? json_object_get_member (obj, "jobs") : NULL;
  if (!jobs_node || !JSON_NODE_HOLDS_ARRAY (jobs_node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, _("The job history %s has no \"jobs\" list"), path);
      return FALSE;
    }
  JsonArray *jobs = json_node_get_array (jobs_node);
  for (guint i = 0; i < json_array_get_length (jobs) && i < HN_JOB_HISTORY_MAX; i++)
    {
      JsonNode *n = json_array_get_element (jobs, i);
      if (!JSON_NODE_HOLDS_OBJECT (n))
        continue;
      JsonObject *o = json_node_get_object (n);
      const char *title = member_string (o, "title"), *cmd = member_string (o, "command_line");
      const char *state = member_string (o, "state"), *summary = member_string (o, "summary");
      if (!title || !cmd || !state || !summary)
        continue; /* an entry from a newer or damaged file: skip it, keep the rest */
      g_autoptr (HnJobRecord) r = hn_job_record_new (title, cmd);
      r->state = HN_JOB_RECORD_FAILED;
      for (guint k = 0; k < G_N_ELEMENTS (state_names); k++)
        if (g_str_equal (state, state_names[k]))
          r->state = k;
      if (r->state == HN_JOB_RECORD_RUNNING)
        r->state = HN_JOB_RECORD_CANCELLED; /* it did not finish while the app was open */
      g_free (r->summary);
      r->summary = g_strdup (summary);
      r->output_path = g_strdup (member_string (o, "output_path"));
      r->resume_from = g_strdup (member_string (o, "resume_from"));
      read_points (o, r->points);
      JsonNode *loss = json_object_get_member (o, "final_loss");
      if (loss && JSON_NODE_HOLDS_VALUE (loss) && json_node_get_value_type (loss) == G_TYPE_DOUBLE)
        r->loss = json_node_get_double (loss);
      g_list_store_append (store, r);
    }
  return TRUE;
}

double
hn_job_record_get_final_loss (HnJobRecord *self)
{
  return self->loss;
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

const char *hn_job_record_get_resume_from (HnJobRecord *self) { return self->resume_from; }
GArray *hn_job_record_get_points (HnJobRecord *self) { return self->points; }

void
hn_job_record_set_resume_from (HnJobRecord *self, const char *dir)
{
  g_free (self->resume_from);
  self->resume_from = g_strdup (dir);
}

void
hn_job_record_add_point (HnJobRecord *self, gint64 step, double loss, double eval_loss)
{
  HnJobRecordPoint p = { step, loss, eval_loss };
  g_array_append_val (self->points, p);
}

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
      g_string_append (s, _("Cancelled"));
      break;
    case HN_JOB_RECORD_STOPPED:
      g_string_append_printf (s, _("Stopped and saved at step %lld (resumable)"), (long long) self->step);
      break;
    case HN_JOB_RECORD_FAILED:
      g_string_append_printf (s, _("Failed: %s"), message ? message : _("unknown error"));
      break;
    default:
      g_string_append (s, _("Running"));
    }
  if (state != HN_JOB_RECORD_FAILED && isfinite (self->loss))
    g_string_append_printf (s, _(" · final loss %.4f"), self->loss);
  if (output_path && state != HN_JOB_RECORD_STOPPED)
    g_string_append_printf (s, " · %s", output_path);
  else if (self->resume_from)
    g_string_append_printf (s, " · %s", self->resume_from);
  set_summary (self, g_string_free (s, FALSE));
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_STATE]);
  g_autofree char *path = hn_job_history_path ();
  g_autoptr (GError) error = NULL;
  if (!hn_job_history_save (G_LIST_MODEL (hn_job_record_list ()), path, &error))
    g_warning ("Could not save the job history: %s", error->message);
}
