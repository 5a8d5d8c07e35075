#include "hn-dataset-picker.h"
#include "hn-command-view.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"
#include "hub/hub.h"
#include "base/hn-error.h"

#include <glib/gi18n.h>
#include <json-glib/json-glib.h>
#include <string.h>

static const char *const split_names[] = { "train", "validation", "test" };

typedef struct {
  char *split;               /* NULL for a file row */
  char **files;              /* the split's files, or the one file */
  guint64 size;
} Choice;

static void
choice_free (Choice *c)
{
  g_free (c->split);
  g_strfreev (c->files);
  g_free (c);
}

struct _HnDatasetPicker
{
  AdwPreferencesGroup parent_instance;
  HnJobSpec *spec;           /* the page's */
  HnJobSpec *search_spec, *pull_spec;
  HnJobController *search_ctl, *pull_ctl;
  GString *search_out;
  char *next_cursor;
  guint n_results;
  guint loading;
  GCancellable *cancel;
  char *sel_id;
  guint serial;
  GPtrArray *choices;        /* Choice*: the splits, then the files */
  GStrvBuilder *split_list;
  char **splits;
  guint n_files;
  const Choice *picked;

  GtkWidget *search_entry, *status, *result_list, *more_button, *selected, *file_list, *progress, *command;
};

G_DEFINE_FINAL_TYPE (HnDatasetPicker, hn_dataset_picker, ADW_TYPE_PREFERENCES_GROUP)

static void
clear_list (GtkWidget *list)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child (list)))
    gtk_list_box_remove (GTK_LIST_BOX (list), child);
}

static void
update_actions (HnDatasetPicker *self)
{
  GtkWidget *w = GTK_WIDGET (self);
  gboolean searching = hn_job_controller_get_running (self->search_ctl);
  gboolean pulling = hn_job_controller_get_running (self->pull_ctl);
  gtk_widget_action_set_enabled (w, "datasets.search", !searching);
  gtk_widget_action_set_enabled (w, "datasets.more", !searching && self->next_cursor);
  gtk_widget_action_set_enabled (w, "datasets.download", self->picked && !pulling);
  gtk_widget_action_set_enabled (w, "datasets.cancel", pulling);
  gtk_widget_set_visible (self->more_button, self->next_cursor != NULL);
}

/* ---- search ------------------------------------------------------------- */

static void
start_search (HnDatasetPicker *self, gboolean more)
{
  hn_job_spec_set_string (self->search_spec, "search", gtk_editable_get_text (GTK_EDITABLE (self->search_entry)));
  if (!more)
    {
      clear_list (self->result_list);
      self->n_results = 0;
    }
  hn_page_start_search (self->search_ctl, self->search_spec, more ? self->next_cursor : NULL, self->search_out,
                        self->command, self->status);
  update_actions (self);
}

static void
on_search_event (HnJobController *c, const HnJobEvent *e, HnDatasetPicker *self)
{
  hn_page_collect_output (e, self->search_out);
}

static void
add_result_row (JsonObject *o, const char *id, gpointer data)
{
  HnDatasetPicker *self = data;
  GString *s = g_string_new (NULL);
  /* TRANSLATORS: "1200 downloads · 3 likes" */
  g_string_append_printf (s, _("%" G_GINT64_FORMAT " downloads · %" G_GINT64_FORMAT " likes"),
                          MAX (hn_page_json_int (o, "downloads"), 0), MAX (hn_page_json_int (o, "likes"), 0));
  if (hn_page_json_string (o, "license"))
    g_string_append_printf (s, " · %s", hn_page_json_string (o, "license"));
  if (hn_page_json_int (o, "used_storage") > 0)
    {
      g_autofree char *size = g_format_size ((guint64) hn_page_json_int (o, "used_storage"));
      g_string_append_printf (s, " · %s", size);
    }
  if (hn_page_json_string (o, "gated"))
    g_string_append_printf (s, " · %s", _("gated: needs a token"));
  GtkWidget *row = adw_action_row_new ();
  g_autofree char *title = g_markup_escape_text (id, -1);
  g_autofree char *sub = g_markup_escape_text (s->str, -1);
  g_string_free (s, TRUE);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), sub);
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), TRUE);
  g_object_set_data_full (G_OBJECT (row), "hn-id", g_strdup (id), g_free);
  gtk_list_box_append (GTK_LIST_BOX (self->result_list), row);
  self->n_results++;
}

static void
on_search_finished (HnJobController *c, gboolean ok, const char *message, const char *out, HnDatasetPicker *self)
{
  g_clear_pointer (&self->next_cursor, g_free);
  if (hn_page_finish_search (ok, message, self->search_out->str, &self->next_cursor, add_result_row, self,
                             self->status))
    {
      g_autofree char *text = g_strdup_printf (g_dngettext (NULL, "%u dataset", "%u datasets", self->n_results),
                                               self->n_results);
      gtk_label_set_text (GTK_LABEL (self->status), self->n_results ? text : _("No datasets match"));
    }
  update_actions (self);
}

void
hn_dataset_picker_search (HnDatasetPicker *self, const char *text)
{
  gtk_editable_set_text (GTK_EDITABLE (self->search_entry), text ? text : "");
  start_search (self, FALSE);
}

gboolean
hn_dataset_picker_more (HnDatasetPicker *self)
{
  if (!self->next_cursor || hn_job_controller_get_running (self->search_ctl))
    return FALSE;
  start_search (self, TRUE);
  return TRUE;
}

/* ---- one dataset: its splits and files ------------------------------------ */

typedef struct {
  char *id;
  guint serial;
  GPtrArray *choices;
} FilesTask;

static void
files_task_free (FilesTask *t)
{
  g_free (t->id);
  g_clear_pointer (&t->choices, g_ptr_array_unref);
  g_free (t);
}

static gboolean
is_data_file (const char *path)
{
  g_autofree char *base = g_path_get_basename (path);
  if (base[0] == '.' || g_str_has_prefix (base, "dataset_info") || g_str_equal (base, "dataset_dict.json") ||
      g_str_equal (base, "state.json"))
    return FALSE;
  return g_str_has_suffix (path, ".jsonl") || g_str_has_suffix (path, ".ndjson") || g_str_has_suffix (path, ".json") ||
         g_str_has_suffix (path, ".parquet");
}

static void
files_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  FilesTask *t = data;
  GError *error = NULL;
  g_autoptr (HnHub) hub = hn_hub_new ();
  g_autoptr (GPtrArray) files = hn_hub_list_files (hub, HN_HUB_REPO_DATASET, t->id, NULL, NULL, cancellable, &error);
  if (!files)
    {
      g_task_return_error (task, error);
      return;
    }
  g_autoptr (GPtrArray) paths = g_ptr_array_new ();
  for (guint i = 0; i < files->len; i++)
    g_ptr_array_add (paths, ((HnHubFile *) files->pdata[i])->path);
  g_ptr_array_add (paths, NULL);
  t->choices = g_ptr_array_new_with_free_func ((GDestroyNotify) choice_free);
  for (guint s = 0; s < G_N_ELEMENTS (split_names); s++)
    {
      g_auto (GStrv) picked = hn_hub_dataset_pick_files ((const char *const *) paths->pdata, t->id, NULL,
                                                         split_names[s], NULL, NULL);
      if (!picked || !picked[0])
        continue;
      Choice *c = g_new0 (Choice, 1);
      c->split = g_strdup (split_names[s]);
      c->files = g_steal_pointer (&picked);
      for (char **f = c->files; *f; f++)
        for (guint i = 0; i < files->len; i++)
          if (g_str_equal (((HnHubFile *) files->pdata[i])->path, *f))
            c->size += ((HnHubFile *) files->pdata[i])->size;
      g_ptr_array_add (t->choices, c);
    }
  for (guint i = 0; i < files->len; i++)
    {
      HnHubFile *f = files->pdata[i];
      if (!is_data_file (f->path))
        continue;
      Choice *c = g_new0 (Choice, 1);
      c->files = g_new0 (char *, 2);
      c->files[0] = g_strdup (f->path);
      c->size = f->size;
      g_ptr_array_add (t->choices, c);
    }
  g_task_return_boolean (task, TRUE);
}

static void
add_choice_row (HnDatasetPicker *self, const Choice *c)
{
  GtkWidget *row = adw_action_row_new ();
  g_autofree char *size = g_format_size (c->size);
  g_autofree char *title = NULL, *sub = NULL;
  if (c->split)
    {
      guint n = g_strv_length (c->files);
      /* TRANSLATORS: "Split: train" */
      title = g_strdup_printf (_("Split: %s"), c->split);
      sub = g_strdup_printf (g_dngettext (NULL, "%u file · %s", "%u files · %s", n), n, size);
    }
  else
    {
      title = g_markup_escape_text (c->files[0], -1);
      sub = g_strdup (size);
    }
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), sub);
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), TRUE);
  g_object_set_data (G_OBJECT (row), "hn-choice", (gpointer) c);
  gtk_list_box_append (GTK_LIST_BOX (self->file_list), row);
}

static void
on_files (GObject *source, GAsyncResult *result, gpointer data)
{
  HnDatasetPicker *self = data;
  FilesTask *t = g_task_get_task_data (G_TASK (result));
  g_autoptr (GError) error = NULL;
  gboolean ok = g_task_propagate_boolean (G_TASK (result), &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  self->loading--;
  if (t->serial != self->serial)
    return;
  if (!ok)
    {
      g_autofree char *msg = g_strdup_printf (_("%s: %s"), t->id, error->message);
      gtk_label_set_text (GTK_LABEL (self->selected), msg);
      return;
    }
  self->choices = g_steal_pointer (&t->choices);
  g_autoptr (GStrvBuilder) b = g_strv_builder_new ();
  for (guint i = 0; i < self->choices->len; i++)
    {
      Choice *c = self->choices->pdata[i];
      if (c->split)
        g_strv_builder_add (b, c->split);
      else
        self->n_files++;
      add_choice_row (self, c);
    }
  g_strfreev (self->splits);
  self->splits = g_strv_builder_end (b);
  gtk_widget_set_visible (self->file_list, self->choices->len > 0);
  g_autofree char *head = self->choices->len
                            ? g_strdup_printf (_("%s: pick a split or a file to train on"), t->id)
                            : g_strdup_printf (_("%s has no JSONL, JSON or Parquet data files"), t->id);
  gtk_label_set_text (GTK_LABEL (self->selected), head);
}

void
hn_dataset_picker_select (HnDatasetPicker *self, const char *id_in)
{
  g_autofree char *id = g_strdup (id_in);
  g_free (self->sel_id);
  self->sel_id = g_strdup (id);
  self->serial++;
  self->picked = NULL;
  self->n_files = 0;
  g_clear_pointer (&self->choices, g_ptr_array_unref);
  g_clear_pointer (&self->splits, g_strfreev);
  clear_list (self->file_list);
  gtk_widget_set_visible (self->file_list, FALSE);
  g_autofree char *head = g_strdup_printf (_("%s: looking at its files…"), id);
  gtk_label_set_text (GTK_LABEL (self->selected), head);
  FilesTask *t = g_new0 (FilesTask, 1);
  t->id = g_strdup (id);
  t->serial = self->serial;
  g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_files, self);
  g_task_set_task_data (task, t, (GDestroyNotify) files_task_free);
  self->loading++;
  g_task_run_in_thread (task, files_thread);
  update_actions (self);
}

static void
on_result_activated (GtkListBox *list, GtkListBoxRow *row, HnDatasetPicker *self)
{
  const char *id = g_object_get_data (G_OBJECT (row), "hn-id");
  if (id)
    hn_dataset_picker_select (self, id);
}

/* ---- picking ------------------------------------------------------------ */

static void
pick (HnDatasetPicker *self, const Choice *c)
{
  self->picked = c;
  if (self->spec)
    {
      /* exactly one of --train and --hf-dataset */
      hn_job_spec_unset (self->spec, "train");
      hn_job_spec_unset (self->spec, "hf-dataset-config");
      hn_job_spec_set_string (self->spec, "hf-dataset", self->sel_id);
      hn_job_spec_set_string (self->spec, "hf-dataset-split", c->split);
      hn_job_spec_set_string (self->spec, "hf-dataset-file", c->split ? NULL : c->files[0]);
    }
  hn_job_spec_set_string (self->pull_spec, "repo", self->sel_id);
  hn_job_spec_set_strv (self->pull_spec, "include", (const char *const *) c->files);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->pull_spec);
  for (GtkWidget *r = gtk_widget_get_first_child (self->file_list); r; r = gtk_widget_get_next_sibling (r))
    if (g_object_get_data (G_OBJECT (r), "hn-choice") == c)
      gtk_list_box_select_row (GTK_LIST_BOX (self->file_list), GTK_LIST_BOX_ROW (r));
  update_actions (self);
}

static void
on_choice_activated (GtkListBox *list, GtkListBoxRow *row, HnDatasetPicker *self)
{
  const Choice *c = g_object_get_data (G_OBJECT (row), "hn-choice");
  if (c)
    pick (self, c);
}

gboolean
hn_dataset_picker_pick_split (HnDatasetPicker *self, const char *split)
{
  for (guint i = 0; self->choices && i < self->choices->len; i++)
    {
      const Choice *c = self->choices->pdata[i];
      if (g_strcmp0 (c->split, split) == 0)
        {
          pick (self, c);
          return TRUE;
        }
    }
  return FALSE;
}

gboolean
hn_dataset_picker_pick_file (HnDatasetPicker *self, const char *path)
{
  for (guint i = 0; self->choices && i < self->choices->len; i++)
    {
      const Choice *c = self->choices->pdata[i];
      if (!c->split && g_str_equal (c->files[0], path))
        {
          pick (self, c);
          return TRUE;
        }
    }
  return FALSE;
}

/* ---- download ----------------------------------------------------------- */

gboolean
hn_dataset_picker_download (HnDatasetPicker *self, GError **error)
{
  if (!self->picked)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("Pick a split or a file first"));
      return FALSE;
    }
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->pull_spec);
  gboolean ok = hn_job_controller_start (self->pull_ctl, self->pull_spec, error);
  update_actions (self);
  return ok;
}

static void
on_pull_finished (HnJobController *c, gboolean ok, const char *message, const char *out, HnDatasetPicker *self)
{
  HnJob *job = hn_job_controller_get_job (c);
  const char *repo = job ? hn_job_spec_get_string (hn_job_get_spec (job), "repo") : "";
  g_autofree char *text = ok ? g_strdup_printf (_("Downloaded %s"), repo)
                             : g_strdup_printf (_("Download failed: %s"), message ? message : _("unknown error"));
  hn_page_toast (GTK_WIDGET (self), text);
  update_actions (self);
}

static void
on_pull_started (HnJobController *c, HnDatasetPicker *self)
{
  update_actions (self);
}

/* ---- actions, getters, life ---------------------------------------------- */

static void
search_action (GtkWidget *w, const char *action, GVariant *param)
{
  start_search (HN_DATASET_PICKER (w), FALSE);
}

static void
more_action (GtkWidget *w, const char *action, GVariant *param)
{
  hn_dataset_picker_more (HN_DATASET_PICKER (w));
}

static void
download_action (GtkWidget *w, const char *action, GVariant *param)
{
  g_autoptr (GError) error = NULL;
  if (!hn_dataset_picker_download (HN_DATASET_PICKER (w), &error))
    hn_page_toast (w, error->message);
}

static void
cancel_action (GtkWidget *w, const char *action, GVariant *param)
{
  hn_job_controller_stop (HN_DATASET_PICKER (w)->pull_ctl);
}

static void
on_search_activate (GtkSearchEntry *entry, HnDatasetPicker *self)
{
  if (!hn_job_controller_get_running (self->search_ctl))
    start_search (self, FALSE);
}

void
hn_dataset_picker_set_spec (HnDatasetPicker *self, HnJobSpec *spec)
{
  g_set_object (&self->spec, spec);
  /* a Hub cache folder chosen on the page is the one searched and filled */
  const char *cache = spec && hn_job_spec_lookup (spec, "hf-cache-dir") ? hn_job_spec_get_string (spec, "hf-cache-dir")
                                                                          : NULL;
  hn_job_spec_set_string (self->pull_spec, "hf-cache-dir", cache);
}

gboolean
hn_dataset_picker_is_loading (HnDatasetPicker *self)
{
  return self->loading > 0 || hn_job_controller_get_running (self->search_ctl);
}

HnJobController *
hn_dataset_picker_get_pull_controller (HnDatasetPicker *self)
{
  return self->pull_ctl;
}

HnJobSpec *
hn_dataset_picker_get_search_spec (HnDatasetPicker *self)
{
  return self->search_spec;
}

guint
hn_dataset_picker_get_n_results (HnDatasetPicker *self)
{
  return self->n_results;
}

const char *const *
hn_dataset_picker_get_splits (HnDatasetPicker *self)
{
  static const char *const none[] = { NULL };
  return self->splits ? (const char *const *) self->splits : none;
}

guint
hn_dataset_picker_get_n_files (HnDatasetPicker *self)
{
  return self->n_files;
}

const char *
hn_dataset_picker_get_status (HnDatasetPicker *self)
{
  return gtk_label_get_text (GTK_LABEL (self->status));
}

const char *
hn_dataset_picker_get_command_text (HnDatasetPicker *self)
{
  return hn_command_view_get_text (HN_COMMAND_VIEW (self->command));
}

static void
hn_dataset_picker_dispose (GObject *object)
{
  HnDatasetPicker *self = HN_DATASET_PICKER (object);
  g_cancellable_cancel (self->cancel);
  for (HnJobController **c = (HnJobController *[]) { self->search_ctl, self->pull_ctl, NULL }; *c; c++)
    {
      g_signal_handlers_disconnect_by_data (*c, self);
      hn_job_controller_stop (*c);
    }
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_DATASET_PICKER);
  g_clear_object (&self->search_ctl);
  g_clear_object (&self->pull_ctl);
  g_clear_object (&self->search_spec);
  g_clear_object (&self->pull_spec);
  g_clear_object (&self->spec);
  G_OBJECT_CLASS (hn_dataset_picker_parent_class)->dispose (object);
}

static void
hn_dataset_picker_finalize (GObject *object)
{
  HnDatasetPicker *self = HN_DATASET_PICKER (object);
  g_string_free (self->search_out, TRUE);
  g_free (self->next_cursor);
  g_free (self->sel_id);
  g_clear_pointer (&self->choices, g_ptr_array_unref);
  g_strfreev (self->splits);
  g_object_unref (self->cancel);
  G_OBJECT_CLASS (hn_dataset_picker_parent_class)->finalize (object);
}

static void
hn_dataset_picker_class_init (HnDatasetPickerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->dispose = hn_dataset_picker_dispose;
  object_class->finalize = hn_dataset_picker_finalize;
  g_type_ensure (HN_TYPE_PROGRESS_VIEW);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-dataset-picker.ui");
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, search_entry);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, status);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, result_list);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, more_button);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, selected);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, file_list);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, progress);
  gtk_widget_class_bind_template_child (widget_class, HnDatasetPicker, command);
  gtk_widget_class_install_action (widget_class, "datasets.search", NULL, search_action);
  gtk_widget_class_install_action (widget_class, "datasets.more", NULL, more_action);
  gtk_widget_class_install_action (widget_class, "datasets.download", NULL, download_action);
  gtk_widget_class_install_action (widget_class, "datasets.cancel", NULL, cancel_action);
}

static void
hn_dataset_picker_init (HnDatasetPicker *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->search_out = g_string_new (NULL);
  self->cancel = g_cancellable_new ();
  self->search_spec = hn_job_spec_new ("hub-search", NULL);
  hn_job_spec_set_string (self->search_spec, "repo-type", "dataset");
  self->pull_spec = hn_job_spec_new ("pull", NULL);
  hn_job_spec_set_string (self->pull_spec, "repo-type", "dataset");
  self->search_ctl = hn_job_controller_new ();
  self->pull_ctl = hn_job_controller_new ();
  g_signal_connect (self->search_ctl, "event", G_CALLBACK (on_search_event), self);
  g_signal_connect (self->search_ctl, "finished", G_CALLBACK (on_search_finished), self);
  g_signal_connect (self->pull_ctl, "started", G_CALLBACK (on_pull_started), self);
  g_signal_connect (self->pull_ctl, "finished", G_CALLBACK (on_pull_finished), self);
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (self->progress), self->pull_ctl);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->search_spec);
  g_signal_connect (self->result_list, "row-activated", G_CALLBACK (on_result_activated), self);
  g_signal_connect (self->file_list, "row-activated", G_CALLBACK (on_choice_activated), self);
  g_signal_connect (self->search_entry, "activate", G_CALLBACK (on_search_activate), self);
  update_actions (self);
}
