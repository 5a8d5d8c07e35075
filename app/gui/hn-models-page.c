#include "hn-models-page.h"
#include "hn-chat-page.h"
#include "hn-command-view.h"
#include "hn-export-dialog.h"
#include "hn-job-record.h"
#include "hn-generate-page.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"
#include "hn-train-page.h"
#include "hn-window.h"
#include "hierarchos/hierarchos.h"
#include "hub/hub-library.h"
#include "hub/hub-token.h"
#include "jobs/memory-estimate.h"
#include "jobs/model-library.h"
#include "base/hn-error.h"
#include "base/json-util.h"
#include "base/hn-util.h"

#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>

typedef struct {
  HnLocalModel *model;
  HnModelFit fit;
  gboolean has_fit;
  GtkWidget *badge;
} LocalEntry;

static void
local_entry_free (LocalEntry *e)
{
  hn_local_model_free (e->model);
  g_free (e);
}

struct _HnModelsPage
{
  AdwBin parent_instance;
  HnJobSpec *search_spec, *pull_spec;
  GtkWidget *gguf_box, *gguf_drop;
  char **gguf_files;         /* a GGUF-only Hub repo's .gguf files (Download pulls one), else NULL */
  HnJobController *search_ctl, *pull_ctl, *export_ctl;
  GString *search_out;       /* the hub-search job's JSON */
  char *next_cursor;
  guint n_results;
  gboolean offline;
  GPtrArray *local;          /* LocalEntry* */
  guint loading;             /* tasks in flight */
  GCancellable *cancel;      /* of the tasks; cancelled on dispose */
  /* the device the fit badges are for */
  gboolean device_checked;
  guint64 free_bytes;
  char *device_name;
  /* the chosen model */
  char *sel_id;
  gboolean sel_local;
  char *sel_snapshot;        /* its folder when it is on this computer */
  guint64 sel_incomplete;
  guint detail_serial;
  guint n_files;
  char *fit_text;
  HnModelFit sel_fit;        /* the chosen model's estimates (sel_has_fit) */
  gboolean sel_has_fit;
  char *sel_fit_why;
  GPtrArray *results;        /* ResultEntry*, the search rows */
  guint search_serial;
  GtkWidget *remove_dialog, *export_dialog;

  GtkWidget *local_list, *search_entry, *task_drop, *sort_drop, *search_status, *result_list, *more_button;
  GtkWidget *token_row, *token_status;
  GtkWidget *title, *subtitle, *fit_badge, *download_button, *progress, *card_view, *file_list, *command;
  GtkWidget *detail_stack, *run_list;
  guint n_runs;
  guint local_serial;
};

G_DEFINE_FINAL_TYPE (HnModelsPage, hn_models_page, ADW_TYPE_BIN)

static const char *const task_values[] = { "text-generation", "fill-mask", "text2text-generation", "any" };
static const char *const sort_values[] = { "downloads", "lastModified", "likes" };

/* ---- helpers ------------------------------------------------------------ */

static char *
format_params (gint64 n)
{
  if (n < 0)
    return g_strdup (_("unknown size"));
  /* TRANSLATORS: parameter counts: "1.2 B parameters", "350 M parameters" */
  if (n >= 1000000000)
    return g_strdup_printf (_("%.1f B parameters"), (double) n / 1e9);
  if (n >= 1000000)
    return g_strdup_printf (_("%.0f M parameters"), (double) n / 1e6);
  return g_strdup_printf (_("%.0f K parameters"), (double) n / 1e3);
}

static char *
format_count (gint64 n)
{
  if (n >= 1000000)
    return g_strdup_printf ("%.1f M", (double) n / 1e6);
  if (n >= 1000)
    return g_strdup_printf ("%.1f K", (double) n / 1e3);
  return g_strdup_printf ("%" G_GINT64_FORMAT, MAX (n, 0));
}

static const char *
task_title (const char *tag)
{
  if (g_strcmp0 (tag, "text-generation") == 0)
    return _("Text generation");
  if (g_strcmp0 (tag, "fill-mask") == 0)
    return _("Fill-mask");
  if (g_strcmp0 (tag, "text2text-generation") == 0)
    return _("Text-to-text");
  return tag ? tag : _("No task");
}

static const char *
fit_label (HnFitLevel level)
{
  switch (level)
    {
    case HN_FIT_LORA:
      /* TRANSLATORS: %d × %d is batch × sequence length */
      return _("Fits for LoRA at batch 4 × 512");
    case HN_FIT_CHAT:
      return _("Fits for chat");
    case HN_FIT_NEEDS_4BIT:
      return _("Needs 4-bit");
    case HN_FIT_TOO_LARGE:
      return _("Too large for this device");
    case HN_FIT_UNKNOWN:
    default:
      return _("Fit unknown");
    }
}

static char *
fit_tooltip (HnModelsPage *self, const HnModelFit *fit)
{
  g_autofree char *chat = g_format_size (fit->chat_bytes);
  g_autofree char *lora = g_format_size (fit->lora_bytes);
  g_autofree char *q4 = g_format_size (fit->chat_4bit_bytes);
  const char *guess = fit->params_from_storage ? _(" (the Hub gives no parameter count: estimated from the repo's "
                                                   "size, an upper bound)")
                                               : "";
  if (self->free_bytes == 0)
    return g_strdup_printf (_("Chat needs about %s, LoRA at batch 4 × 512 about %s%s; no device memory to compare "
                              "with"),
                            chat, lora, guess);
  g_autofree char *free_s = g_format_size (self->free_bytes);
  return g_strdup_printf (_("Chat needs about %s (%s with 4-bit weights), LoRA at batch 4 × 512 about %s%s; %s free "
                            "on %s"),
                          chat, q4, lora, guess, free_s, self->device_name ? self->device_name : _("the device"));
}

static void
style_badge (GtkWidget *badge, HnFitLevel level)
{
  gtk_widget_remove_css_class (badge, "success");
  gtk_widget_remove_css_class (badge, "warning");
  gtk_widget_remove_css_class (badge, "error");
  if (level == HN_FIT_LORA || level == HN_FIT_CHAT)
    gtk_widget_add_css_class (badge, "success");
  else if (level == HN_FIT_NEEDS_4BIT)
    gtk_widget_add_css_class (badge, "warning");
  else if (level == HN_FIT_TOO_LARGE)
    gtk_widget_add_css_class (badge, "error");
}

static GtkWidget *
new_badge (void)
{
  GtkWidget *b = gtk_label_new (NULL);
  gtk_widget_add_css_class (b, "hn-badge");
  gtk_widget_set_valign (b, GTK_ALIGN_CENTER);
  return b;
}

/* A fit badge for estimates `fit` (NULL: none, `why` says why) against the
 * device's free memory now. */
static void
apply_fit (HnModelsPage *self, GtkWidget *badge, const HnModelFit *fit, const char *why)
{
  HnFitLevel level = fit ? hn_model_fit_level (fit, self->free_bytes) : HN_FIT_UNKNOWN;
  gtk_label_set_text (GTK_LABEL (badge), fit_label (level));
  style_badge (badge, level);
  g_autofree char *tip = fit ? fit_tooltip (self, fit) : NULL;
  gtk_widget_set_tooltip_text (badge, fit ? tip : why);
}

/* Free device memory, asked once (opening the device takes a moment). */
static void
check_device (HnModelsPage *self)
{
  if (self->device_checked)
    return;
  self->device_checked = TRUE;
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    return;
  HnMemoryEstimate e = { 0 };
  hn_memory_estimate_set_device (&e, ctx);
  if (e.device_known)
    {
      self->free_bytes = e.device_free;
      self->device_name = g_strdup (e.device_name);
    }
  hn_memory_estimate_clear (&e);
  hn_vk_context_unref (ctx);
}

static void
clear_list (GtkWidget *list)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child (list)))
    gtk_list_box_remove (GTK_LIST_BOX (list), child);
}

static void
update_actions (HnModelsPage *self)
{
  GtkWidget *w = GTK_WIDGET (self);
  gboolean pulling = hn_job_controller_get_running (self->pull_ctl);
  gboolean searching = hn_job_controller_get_running (self->search_ctl);
  gboolean complete = self->sel_snapshot != NULL && self->sel_incomplete == 0;
  gtk_widget_action_set_enabled (w, "models.search", !searching && !self->offline);
  gtk_widget_action_set_enabled (w, "models.more", !searching && !self->offline && self->next_cursor);
  gtk_widget_action_set_enabled (w, "models.download", self->sel_id && !pulling && !self->offline && !complete);
  gtk_widget_action_set_enabled (w, "models.cancel", pulling);
  gtk_widget_action_set_enabled (w, "models.open", complete);
  gtk_widget_action_set_enabled (w, "models.export", complete && !hn_job_controller_get_running (self->export_ctl));
  gtk_widget_action_set_enabled (w, "models.remove", self->sel_local && !pulling);
  gtk_widget_set_visible (self->more_button, self->next_cursor != NULL);
  gtk_button_set_label (GTK_BUTTON (self->download_button),
                        self->sel_incomplete ? _("_Resume download") : _("_Download"));
}

static void
set_card (HnModelsPage *self, const char *text)
{
  gtk_text_buffer_set_text (gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->card_view)), text, -1);
}

static void
add_file_row (HnModelsPage *self, const char *path, guint64 size)
{
  GtkWidget *row = adw_action_row_new ();
  g_autofree char *markup = g_markup_escape_text (path, -1);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), markup);
  g_autofree char *sz = g_format_size (size);
  GtkWidget *l = gtk_label_new (sz);
  gtk_widget_add_css_class (l, "dim-label");
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), l);
  gtk_list_box_append (GTK_LIST_BOX (self->file_list), row);
  self->n_files++;
}

static void
set_fit (HnModelsPage *self, const HnModelFit *fit, const char *why_not)
{
  self->sel_has_fit = fit != NULL;
  if (fit)
    self->sel_fit = *fit;
  g_free (self->sel_fit_why);
  self->sel_fit_why = g_strdup (why_not);
  apply_fit (self, self->fit_badge, fit, why_not);
  g_free (self->fit_text);
  self->fit_text = g_strdup (gtk_label_get_text (GTK_LABEL (self->fit_badge)));
  gtk_widget_set_visible (self->fit_badge, TRUE);
}

/* What Download pulls: the model's files (never pickles or code) and its
 * card; of a GGUF-only repo the one .gguf file chosen and the card. */
static void
set_pull_files (HnModelsPage *self, const char *gguf)
{
  g_autoptr (GStrvBuilder) b = g_strv_builder_new ();
  if (gguf)
    g_strv_builder_add (b, gguf);
  else
    g_strv_builder_addv (b, (const char **) hn_hub_model_patterns);
  g_strv_builder_add (b, "README.md");
  g_auto (GStrv) include = g_strv_builder_end (b);
  hn_job_spec_set_strv (self->pull_spec, "include", (const char *const *) include);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->pull_spec);
}

static void
begin_details (HnModelsPage *self, const char *id, gboolean local)
{
  g_free (self->sel_id);
  self->sel_id = g_strdup (id);
  self->sel_local = local;
  g_clear_pointer (&self->sel_snapshot, g_free);
  self->sel_incomplete = 0;
  self->detail_serial++;
  self->n_files = 0;
  clear_list (self->file_list);
  clear_list (self->run_list);
  self->n_runs = 0;
  gtk_label_set_text (GTK_LABEL (self->title), id);
  gtk_label_set_text (GTK_LABEL (self->subtitle), "");
  set_card (self, "");
  gtk_widget_set_visible (self->fit_badge, FALSE);
  g_clear_pointer (&self->fit_text, g_free);
  /* the command line shows what Download runs */
  hn_job_spec_set_string (self->pull_spec, "repo", id);
  g_clear_pointer (&self->gguf_files, g_strfreev);
  gtk_widget_set_visible (self->gguf_box, FALSE);
  set_pull_files (self, NULL);
}

/* A cache repo is known by its id, a folder or file the user added by its path. */
static const char *
entry_id (const LocalEntry *e)
{
  return e->model->user_added ? e->model->repo_path : e->model->repo_id;
}

static LocalEntry *
find_local (HnModelsPage *self, const char *id)
{
  for (guint i = 0; self->local && i < self->local->len; i++)
    {
      LocalEntry *e = self->local->pdata[i];
      if (strcmp (entry_id (e), id) == 0)
        return e;
    }
  return NULL;
}

/* ---- what was made from a model (the job history) ----------------------- */

static gboolean
record_uses_model (HnJobRecord *r, const char *model_dir)
{
  g_auto (GStrv) argv = NULL;
  if (!g_shell_parse_argv (hn_job_record_get_command_line (r), NULL, &argv, NULL) || !argv[0] || !argv[1])
    return FALSE;
  const char *kind = argv[1];
  if (!g_str_has_prefix (kind, "transformer-train") && !g_str_has_prefix (kind, "transformer-finetune") &&
      !g_str_has_prefix (kind, "lora") && !g_str_has_prefix (kind, "hierarchos-") && !g_str_equal (kind, "export-gguf") &&
      !g_str_equal (kind, "merge-lora"))
    return FALSE;
  for (int k = 2; argv[k] && argv[k + 1]; k++)
    if (g_str_equal (argv[k], "--model-path") && g_str_equal (argv[k + 1], model_dir))
      return TRUE;
  return FALSE;
}

static gboolean
is_adapter (const char *dir)
{
  g_autofree char *cfg = dir ? g_build_filename (dir, "adapter_config.json", NULL) : NULL;
  return cfg && g_file_test (cfg, G_FILE_TEST_IS_REGULAR);
}

/* The trainings, fine-tunes and exports of `model_dir` in the history
 * (HnJobRecord refs, newest first); *n_adapters the adapters among their outputs. */
static GPtrArray *
runs_of (const char *model_dir, guint *n_adapters)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_object_unref);
  guint adapters = 0;
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  for (guint i = 0; model_dir && i < g_list_model_get_n_items (list); i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_RUNNING || !record_uses_model (r, model_dir))
        continue;
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED && is_adapter (hn_job_record_get_output_path (r)))
        adapters++;
      g_ptr_array_add (out, g_object_ref (r));
    }
  if (n_adapters)
    *n_adapters = adapters;
  return out;
}

static void
fill_runs (HnModelsPage *self, const char *model_dir)
{
  clear_list (self->run_list);
  self->n_runs = 0;
  g_autoptr (GPtrArray) runs = runs_of (model_dir, NULL);
  for (guint i = 0; i < runs->len; i++)
    {
      HnJobRecord *r = runs->pdata[i];
      GtkWidget *row = adw_action_row_new ();
      gboolean adapter = hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED &&
                         is_adapter (hn_job_record_get_output_path (r));
      g_autofree char *title = g_strdup_printf ("%s%s", hn_job_record_get_title (r), adapter ? _(" · adapter") : "");
      g_autofree char *title_m = g_markup_escape_text (title, -1);
      g_autofree char *sub = g_markup_escape_text (hn_job_record_get_summary (r), -1);
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title_m);
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), sub);
      adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 3);
      gtk_widget_set_tooltip_text (row, hn_job_record_get_command_line (r));
      gtk_list_box_append (GTK_LIST_BOX (self->run_list), row);
      self->n_runs++;
    }
}

/* ---- the local list ---------------------------------------------------- */

typedef struct {
  guint64 free_bytes;
  guint serial;              /* of the refresh: a newer one replaces it */
  char **paths;              /* the added folders and files */
  GPtrArray *entries;
} LocalTask;

static void
local_task_free (LocalTask *t)
{
  g_clear_pointer (&t->entries, g_ptr_array_unref);
  g_strfreev (t->paths);
  g_free (t);
}

/* The folders and .gguf files the user added: the engine's list, which
 * `hub-search --local` reads too. An older release kept them in the
 * settings: they move into the list once. */
static char **
dup_user_paths (void)
{
  g_autoptr (GError) error = NULL;
  GSettings *s = hn_app_settings ();
  g_autofree char *file = hn_model_library_paths_file ();
  if (s && !g_file_test (file, G_FILE_TEST_EXISTS))
    {
      g_auto (GStrv) old = g_settings_get_strv (s, "model-folders");
      if (old[0] && hn_model_library_set_paths ((const char *const *) old, &error))
        g_settings_reset (s, "model-folders");
      else if (error)
        g_warning ("%s", error->message);
      g_clear_error (&error);
    }
  char **paths = hn_model_library_get_paths (&error);
  if (!paths)
    {
      g_warning ("%s", error->message);
      return g_new0 (char *, 1);
    }
  return paths;
}

static void
list_local_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  LocalTask *t = data;
  GError *error = NULL;
  g_autoptr (GPtrArray) models = hn_model_library_list_with (NULL, (const char *const *) t->paths, &error);
  if (!models)
    {
      g_task_return_error (task, error);
      return;
    }
  t->entries = g_ptr_array_new_with_free_func ((GDestroyNotify) local_entry_free);
  for (guint i = 0; i < models->len; i++)
    {
      LocalEntry *e = g_new0 (LocalEntry, 1);
      e->model = models->pdata[i];
      models->pdata[i] = NULL; /* now the entry's */
      if (e->model->snapshot && e->model->supported && !hn_hier_is_model_dir (e->model->snapshot))
        e->has_fit = hn_model_fit_local (e->model->snapshot, t->free_bytes, &e->fit, NULL);
      g_ptr_array_add (t->entries, e);
    }
  g_task_return_boolean (task, TRUE);
}

static int
entry_cmp (gconstpointer a, gconstpointer b)
{
  const LocalEntry *x = *(LocalEntry *const *) a, *y = *(LocalEntry *const *) b;
  return strcmp (x->model->repo_id, y->model->repo_id);
}

static char *
local_subtitle (const LocalEntry *e)
{
  const HnLocalModel *m = e->model;
  GString *s = g_string_new (NULL);
  if (m->architecture)
    g_string_append (s, m->architecture);
  else if (m->model_type)
    g_string_append (s, m->model_type); /* a GGUF names its model_type only */
  g_autofree char *params = format_params (m->n_params);
  g_string_append_printf (s, "%s%s", s->len ? " · " : "", params);
  if (m->dtype)
    g_string_append_printf (s, " · %s", m->dtype);
  g_autofree char *size = g_format_size (m->size_on_disk);
  g_string_append_printf (s, " · %s", size);
  if (m->verified)
    g_string_append_printf (s, " · %s", _("parity-verified"));
  else if (m->supported)
    g_string_append_printf (s, " · %s", _("supported"));
  if (m->incomplete_bytes)
    g_string_append_printf (s, " · %s", _("download paused"));
  else if (m->problem)
    g_string_append_printf (s, " · %s", m->problem);
  guint n_adapters = 0;
  g_autoptr (GPtrArray) runs = runs_of (m->snapshot, &n_adapters);
  if (runs->len)
    g_string_append_printf (s, g_dngettext (NULL, " · %u run", " · %u runs", runs->len), runs->len);
  if (n_adapters)
    g_string_append_printf (s, g_dngettext (NULL, ", %u adapter", ", %u adapters", n_adapters), n_adapters);
  if (m->user_added)
    g_string_append_printf (s, "\n%s%s", m->gguf ? _("GGUF file ") : _("Folder "), m->repo_path);
  return g_string_free (s, FALSE);
}

static void
on_local_listed (GObject *source, GAsyncResult *result, gpointer data)
{
  HnModelsPage *self = data;
  GTask *task = G_TASK (result);
  LocalTask *t = g_task_get_task_data (task);
  g_autoptr (GError) error = NULL;
  gboolean ok = g_task_propagate_boolean (task, &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return; /* the page is gone */
  self->loading--;
  if (t->serial != self->local_serial)
    return; /* a later look (another folder added meanwhile) lists what is there now */
  clear_list (self->local_list);
  g_clear_pointer (&self->local, g_ptr_array_unref);
  if (!ok)
    {
      hn_page_toast (GTK_WIDGET (self), error->message);
      return;
    }
  self->local = g_steal_pointer (&t->entries);
  g_ptr_array_sort (self->local, entry_cmp);
  for (guint i = 0; i < self->local->len; i++)
    {
      LocalEntry *e = self->local->pdata[i];
      GtkWidget *row = adw_action_row_new ();
      g_autofree char *title = g_markup_escape_text (e->model->repo_id, -1);
      g_autofree char *sub = local_subtitle (e);
      g_autofree char *sub_m = g_markup_escape_text (sub, -1);
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title);
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), sub_m);
      adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 3);
      gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), TRUE);
      e->badge = new_badge ();
      apply_fit (self, e->badge, e->has_fit ? &e->fit : NULL, e->model->problem);
      adw_action_row_add_suffix (ADW_ACTION_ROW (row), e->badge);
      g_object_set_data_full (G_OBJECT (row), "hn-id", g_strdup (entry_id (e)), g_free);
      g_object_set_data (G_OBJECT (row), "hn-local", GINT_TO_POINTER (1));
      gtk_list_box_append (GTK_LIST_BOX (self->local_list), row);
    }
  if (self->local->len == 0)
    {
      GtkWidget *row = adw_action_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), _("No models yet"));
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), _("Search the Hub below and download one"));
      gtk_list_box_append (GTK_LIST_BOX (self->local_list), row);
    }
  /* the chosen model may have come or gone */
  if (self->sel_id)
    {
      LocalEntry *e = find_local (self, self->sel_id);
      if (e || self->sel_local)
        hn_models_page_select (self, self->sel_id, e != NULL);
    }
  update_actions (self);
}

void
hn_models_page_refresh_local (HnModelsPage *self)
{
  check_device (self);
  LocalTask *t = g_new0 (LocalTask, 1);
  t->free_bytes = self->free_bytes;
  t->paths = dup_user_paths ();
  t->serial = ++self->local_serial;
  g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_local_listed, self);
  g_task_set_task_data (task, t, (GDestroyNotify) local_task_free);
  self->loading++;
  g_task_run_in_thread (task, list_local_thread);
}

/* ---- search (a hub-search job) ----------------------------------------- */

/* A search row: its fit badge fills in when its config.json has come. */
typedef struct {
  char *id;
  GtkWidget *badge;          /* a ref */
  gboolean has_fit, pending;
  HnModelFit fit;
  char *why;
} ResultEntry;

static void
result_entry_free (ResultEntry *e)
{
  g_free (e->id);
  g_clear_object (&e->badge);
  g_free (e->why);
  g_free (e);
}

typedef struct {
  HnHubRepoSummary s;        /* id, n_params, used_storage */
  guint serial;
  gboolean ok;
  HnModelFit fit;
  char *why;
} FitTask;

static void
fit_task_free (FitTask *t)
{
  g_free (t->s.id);
  g_free (t->why);
  g_free (t);
}

static void
fit_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  FitTask *t = data;
  g_autoptr (HnHub) hub = hn_hub_new ();
  g_autoptr (GError) error = NULL;
  t->ok = hn_model_fit_summary (hub, &t->s, 0, &t->fit, cancellable, &error);
  if (!t->ok)
    t->why = g_strdup (error->message);
  g_task_return_boolean (task, TRUE);
}

static void
on_fit (GObject *source, GAsyncResult *result, gpointer data)
{
  HnModelsPage *self = data;
  GTask *task = G_TASK (result);
  FitTask *t = g_task_get_task_data (task);
  g_autoptr (GError) error = NULL;
  g_task_propagate_boolean (task, &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return; /* the page is gone */
  self->loading--;
  if (t->serial != self->search_serial)
    return; /* a new search replaced the rows */
  for (guint i = 0; i < self->results->len; i++)
    {
      ResultEntry *e = self->results->pdata[i];
      if (!e->pending || strcmp (e->id, t->s.id) != 0)
        continue;
      e->pending = FALSE;
      e->has_fit = t->ok;
      e->fit = t->fit;
      g_free (e->why);
      e->why = g_strdup (t->why);
      apply_fit (self, e->badge, e->has_fit ? &e->fit : NULL, e->why);
    }
}

static void
start_fit (HnModelsPage *self, ResultEntry *e, JsonObject *o);

static ResultEntry *
find_result (HnModelsPage *self, const char *id)
{
  for (guint i = 0; i < self->results->len; i++)
    {
      ResultEntry *e = self->results->pdata[i];
      if (strcmp (e->id, id) == 0)
        return e;
    }
  return NULL;
}

static void
start_search (HnModelsPage *self, gboolean more)
{
  guint task = gtk_drop_down_get_selected (GTK_DROP_DOWN (self->task_drop));
  guint sort = gtk_drop_down_get_selected (GTK_DROP_DOWN (self->sort_drop));
  const char *text = gtk_editable_get_text (GTK_EDITABLE (self->search_entry));
  hn_job_spec_set_string (self->search_spec, "search", text);
  hn_job_spec_set_string (self->search_spec, "task", task_values[MIN (task, G_N_ELEMENTS (task_values) - 1)]);
  hn_job_spec_set_string (self->search_spec, "sort", sort_values[MIN (sort, G_N_ELEMENTS (sort_values) - 1)]);
  if (!more)
    {
      clear_list (self->result_list);
      g_ptr_array_set_size (self->results, 0);
      self->search_serial++;
      self->n_results = 0;
    }
  hn_page_start_search (self->search_ctl, self->search_spec, more ? self->next_cursor : NULL, self->search_out,
                        self->command, self->search_status);
  update_actions (self);
}

static void
on_search_event (HnJobController *c, const HnJobEvent *e, HnModelsPage *self)
{
  hn_page_collect_output (e, self->search_out);
}

static void
add_result_row (JsonObject *o, const char *id, gpointer data)
{
  HnModelsPage *self = data;
  GString *s = g_string_new (task_title (hn_page_json_string (o, "pipeline_tag")));
  g_autofree char *dl = format_count (hn_page_json_int (o, "downloads"));
  /* TRANSLATORS: "1.2 M downloads" */
  g_string_append_printf (s, _(" · %s downloads"), dl);
  g_string_append_printf (s, _(" · %" G_GINT64_FORMAT " likes"), MAX (hn_page_json_int (o, "likes"), 0));
  if (hn_page_json_string (o, "license"))
    g_string_append_printf (s, " · %s", hn_page_json_string (o, "license"));
  if (hn_page_json_int (o, "used_storage") > 0)
    {
      g_autofree char *size = g_format_size ((guint64) hn_page_json_int (o, "used_storage"));
      g_string_append_printf (s, " · %s", size);
    }
  if (hn_page_json_int (o, "params") > 0)
    {
      g_autofree char *p = format_params (hn_page_json_int (o, "params"));
      g_string_append_printf (s, " · %s", p);
    }
  GtkWidget *row = adw_action_row_new ();
  g_autofree char *title = g_markup_escape_text (id, -1);
  g_autofree char *sub = g_markup_escape_text (s->str, -1);
  g_string_free (s, TRUE);
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (row), sub);
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (row), TRUE);
  if (hn_page_json_string (o, "gated"))
    {
      GtkWidget *g = new_badge ();
      gtk_label_set_text (GTK_LABEL (g), _("Gated: needs a token"));
      gtk_widget_add_css_class (g, "warning");
      adw_action_row_add_suffix (ADW_ACTION_ROW (row), g);
    }
  if (find_local (self, id))
    {
      GtkWidget *l = new_badge ();
      gtk_label_set_text (GTK_LABEL (l), _("On this computer"));
      adw_action_row_add_suffix (ADW_ACTION_ROW (row), l);
    }
  ResultEntry *e = g_new0 (ResultEntry, 1);
  e->id = g_strdup (id);
  e->badge = g_object_ref (new_badge ());
  gtk_label_set_text (GTK_LABEL (e->badge), _("Checking fit…"));
  gtk_widget_set_tooltip_text (e->badge, _("Reading the model's config.json from the Hub"));
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), e->badge);
  g_ptr_array_add (self->results, e);
  start_fit (self, e, o);
  g_object_set_data_full (G_OBJECT (row), "hn-id", g_strdup (id), g_free);
  gtk_list_box_append (GTK_LIST_BOX (self->result_list), row);
  self->n_results++;
}

static void
start_fit (HnModelsPage *self, ResultEntry *e, JsonObject *o)
{
  check_device (self);
  FitTask *t = g_new0 (FitTask, 1);
  t->s.id = g_strdup (e->id);
  t->s.n_params = hn_page_json_int (o, "params");
  t->s.used_storage = hn_page_json_int (o, "used_storage");
  t->serial = self->search_serial;
  e->pending = TRUE;
  g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_fit, self);
  g_task_set_task_data (task, t, (GDestroyNotify) fit_task_free);
  self->loading++;
  g_task_run_in_thread (task, fit_thread);
}

static void
on_search_finished (HnJobController *c, gboolean ok, const char *message, const char *out, HnModelsPage *self)
{
  g_clear_pointer (&self->next_cursor, g_free);
  if (hn_page_finish_search (ok, message, self->search_out->str, &self->next_cursor, add_result_row, self,
                             self->search_status))
    {
      g_autofree char *status = g_strdup_printf (g_dngettext (NULL, "%u model", "%u models", self->n_results),
                                                 self->n_results);
      gtk_label_set_text (GTK_LABEL (self->search_status), self->n_results ? status : _("No models match"));
    }
  update_actions (self);
}

void
hn_models_page_search (HnModelsPage *self, const char *text)
{
  gtk_editable_set_text (GTK_EDITABLE (self->search_entry), text ? text : "");
  start_search (self, FALSE);
}

static void
search_action (GtkWidget *w, const char *action, GVariant *param)
{
  start_search (HN_MODELS_PAGE (w), FALSE);
}

static void
more_action (GtkWidget *w, const char *action, GVariant *param)
{
  start_search (HN_MODELS_PAGE (w), TRUE);
}

static void
refresh_action (GtkWidget *w, const char *action, GVariant *param)
{
  hn_models_page_refresh_local (HN_MODELS_PAGE (w));
}

/* ---- details ----------------------------------------------------------- */

typedef struct {
  char *id;
  guint serial;
  guint64 free_bytes;
  HnHubRepoInfo *info;
  char *card;
  HnModelFit fit;
  gboolean has_fit;
  char *fit_error;
} DetailTask;

static void
detail_task_free (DetailTask *t)
{
  g_free (t->id);
  hn_hub_repo_info_free (t->info);
  g_free (t->card);
  g_free (t->fit_error);
  g_free (t);
}

static void
detail_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  DetailTask *t = data;
  GError *error = NULL;
  g_autoptr (HnHub) hub = hn_hub_new ();
  t->info = hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, t->id, cancellable, &error);
  if (!t->info)
    {
      g_task_return_error (task, error);
      return;
    }
  g_autoptr (GError) cerr = NULL;
  g_autofree char *readme = hn_hub_fetch_readme (hub, HN_HUB_REPO_MODEL, t->id, cancellable, &cerr);
  t->card = readme ? hn_hub_readme_strip_front_matter (readme) : NULL;
  g_autoptr (GError) ferr = NULL;
  t->has_fit = hn_model_fit_remote (hub, t->info, t->free_bytes, &t->fit, cancellable, &ferr);
  if (!t->has_fit)
    t->fit_error = g_strdup (ferr->message);
  g_task_return_boolean (task, TRUE);
}

static gboolean
repo_has_gguf (const HnHubRepoInfo *info)
{
  for (guint i = 0; i < info->files->len; i++)
    {
      g_autofree char *lower = g_ascii_strdown (((HnHubFile *) info->files->pdata[i])->path, -1);
      if (g_str_has_suffix (lower, ".gguf"))
        return TRUE;
    }
  return FALSE;
}

/* A GGUF-only repo holds one file per quantization: Download pulls the one
 * chosen (llama.cpp's usual Q4_K_M when there is one), like --hf-file. */
static void
offer_ggufs (HnModelsPage *self, char **files)
{
  g_strfreev (self->gguf_files);
  self->gguf_files = files;
  guint pick = 0;
  for (guint i = 0; files[i]; i++)
    {
      g_autofree char *lower = g_ascii_strdown (files[i], -1);
      if (strstr (lower, "q4_k_m"))
        {
          pick = i;
          break;
        }
    }
  g_autoptr (GtkStringList) names = gtk_string_list_new ((const char *const *) files);
  gtk_drop_down_set_model (GTK_DROP_DOWN (self->gguf_drop), G_LIST_MODEL (names));
  gtk_drop_down_set_selected (GTK_DROP_DOWN (self->gguf_drop), pick);
  gtk_widget_set_visible (self->gguf_box, TRUE);
  set_pull_files (self, files[pick]);
}

static void
on_gguf_selected (GtkDropDown *drop, GParamSpec *pspec, HnModelsPage *self)
{
  guint i = gtk_drop_down_get_selected (drop);
  if (self->gguf_files && i < g_strv_length (self->gguf_files))
    set_pull_files (self, self->gguf_files[i]);
}

const char *const *
hn_models_page_get_gguf_files (HnModelsPage *self)
{
  return (const char *const *) self->gguf_files;
}

gboolean
hn_models_page_choose_gguf (HnModelsPage *self, const char *file)
{
  for (guint i = 0; self->gguf_files && self->gguf_files[i]; i++)
    if (g_str_equal (self->gguf_files[i], file))
      {
        gtk_drop_down_set_selected (GTK_DROP_DOWN (self->gguf_drop), i);
        return TRUE;
      }
  return FALSE;
}

const char *
hn_models_page_get_chosen_gguf (HnModelsPage *self)
{
  guint i = gtk_drop_down_get_selected (GTK_DROP_DOWN (self->gguf_drop));
  return self->gguf_files && i < g_strv_length (self->gguf_files) ? self->gguf_files[i] : NULL;
}

static void
on_details (GObject *source, GAsyncResult *result, gpointer data)
{
  HnModelsPage *self = data;
  GTask *task = G_TASK (result);
  DetailTask *t = g_task_get_task_data (task);
  g_autoptr (GError) error = NULL;
  gboolean ok = g_task_propagate_boolean (task, &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  self->loading--;
  if (t->serial != self->detail_serial)
    return; /* another model was picked meanwhile */
  if (!ok)
    {
      gtk_label_set_text (GTK_LABEL (self->subtitle), error->message);
      return;
    }
  const HnHubRepoSummary *s = &t->info->summary;
  GString *sub = g_string_new (task_title (s->pipeline_tag));
  if (t->info->architecture)
    g_string_append_printf (sub, " · %s", t->info->architecture);
  g_autofree char *dl = format_count (s->downloads);
  g_string_append_printf (sub, _(" · %s downloads"), dl);
  g_string_append_printf (sub, _(" · %" G_GINT64_FORMAT " likes"), MAX (s->likes, 0));
  g_string_append_printf (sub, " · %s", s->license ? s->license : _("no licence given"));
  g_autofree char *wsize = g_format_size (t->info->weights_size);
  if (t->info->weights_size > 0 || !repo_has_gguf (t->info))
    g_string_append_printf (sub, _(" · weights %s"), wsize); /* a GGUF repo's sizes are per file (Files) */
  if (s->gated)
    g_string_append_printf (sub, " · %s", _("gated: accept the licence on the Hub and save a token below"));
  gtk_label_set_text (GTK_LABEL (self->subtitle), sub->str);
  g_string_free (sub, TRUE);
  set_card (self, t->card && *t->card ? t->card : _("This model has no model card."));
  gboolean safetensors = FALSE;
  g_autoptr (GStrvBuilder) ggufs = g_strv_builder_new ();
  for (guint i = 0; i < t->info->files->len; i++)
    {
      HnHubFile *f = t->info->files->pdata[i];
      add_file_row (self, f->path, f->size);
      g_autofree char *lower = g_ascii_strdown (f->path, -1);
      safetensors |= g_str_has_suffix (lower, ".safetensors");
      if (g_str_has_suffix (lower, ".gguf"))
        g_strv_builder_add (ggufs, f->path);
    }
  g_auto (GStrv) gguf_files = g_strv_builder_end (ggufs);
  if (!safetensors && gguf_files[0])
    offer_ggufs (self, g_steal_pointer (&gguf_files));
  set_fit (self, t->has_fit ? &t->fit : NULL, t->fit_error);
}

static void
show_local (HnModelsPage *self, LocalEntry *e)
{
  const HnLocalModel *m = e->model;
  self->sel_snapshot = g_strdup (m->snapshot);
  self->sel_incomplete = m->incomplete_bytes;
  fill_runs (self, m->snapshot);
  if (m->user_added)
    {
      /* not a Hub repo: nothing to download */
      gtk_label_set_text (GTK_LABEL (self->title), m->repo_id);
      hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), NULL);
    }
  g_autofree char *sub = local_subtitle (e);
  gtk_label_set_text (GTK_LABEL (self->subtitle), sub);
  if (e->has_fit)
    set_fit (self, &e->fit, NULL);
  else
    set_fit (self, NULL, m->problem);
  g_autofree char *card = NULL;
  if (m->snapshot)
    {
      g_autofree char *readme = g_build_filename (m->snapshot, "README.md", NULL);
      g_autofree char *text = NULL;
      if (hn_file_read_bounded (readme, HN_MAX_CONFIG_BYTES, "model card", &text, NULL, NULL))
        {
          g_autofree char *valid = g_utf8_make_valid (text, -1);
          card = hn_hub_readme_strip_front_matter (valid);
        }
      gboolean one_file = m->gguf && m->user_added; /* an added .gguf, not a folder */
      if (one_file)
        add_file_row (self, m->repo_id, m->size_on_disk);
      g_autoptr (GDir) d = one_file ? NULL : g_dir_open (m->snapshot, 0, NULL);
      const char *n;
      g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      while (d && (n = g_dir_read_name (d)))
        g_ptr_array_add (names, g_strdup (n));
      g_ptr_array_sort (names, (GCompareFunc) g_strcmp0);
      for (guint i = 0; i < names->len; i++)
        {
          g_autofree char *p = g_build_filename (m->snapshot, names->pdata[i], NULL);
          GStatBuf sb;
          if (g_stat (p, &sb) == 0 && S_ISREG (sb.st_mode))
            add_file_row (self, names->pdata[i], (guint64) sb.st_size);
        }
    }
  set_card (self, card && *card ? card : _("No model card was downloaded with this model."));
}

gboolean
hn_models_page_select (HnModelsPage *self, const char *id_in, gboolean local)
{
  g_autofree char *id = g_strdup (id_in); /* id_in may be self->sel_id, which begin_details replaces */
  LocalEntry *e = local ? find_local (self, id) : NULL;
  if (local && !e)
    return FALSE;
  begin_details (self, id, local);
  if (!e)
    e = find_local (self, id); /* a search result already on this computer */
  if (e && (local || self->offline))
    show_local (self, e);
  else if (!self->offline)
    {
      if (e)
        {
          self->sel_snapshot = g_strdup (e->model->snapshot);
          self->sel_incomplete = e->model->incomplete_bytes;
        }
      check_device (self);
      DetailTask *t = g_new0 (DetailTask, 1);
      t->id = g_strdup (id);
      t->serial = self->detail_serial;
      t->free_bytes = self->free_bytes;
      g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_details, self);
      g_task_set_task_data (task, t, (GDestroyNotify) detail_task_free);
      self->loading++;
      g_task_run_in_thread (task, detail_thread);
    }
  update_actions (self);
  return TRUE;
}

static void
on_row_activated (GtkListBox *list, GtkListBoxRow *row, HnModelsPage *self)
{
  const char *id = g_object_get_data (G_OBJECT (row), "hn-id");
  if (id)
    hn_models_page_select (self, id, g_object_get_data (G_OBJECT (row), "hn-local") != NULL);
}

/* ---- download (a pull job) --------------------------------------------- */

static void
download_action (GtkWidget *w, const char *action, GVariant *param)
{
  HnModelsPage *self = HN_MODELS_PAGE (w);
  g_autoptr (GError) error = NULL;
  if (!self->sel_id)
    return;
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->pull_spec);
  if (!hn_job_controller_start (self->pull_ctl, self->pull_spec, &error))
    hn_page_toast (w, error->message);
  update_actions (self);
}

static void
cancel_action (GtkWidget *w, const char *action, GVariant *param)
{
  hn_job_controller_stop (HN_MODELS_PAGE (w)->pull_ctl);
}

static void
on_pull_started (HnJobController *c, HnModelsPage *self)
{
  update_actions (self);
}

static void
on_pull_finished (HnJobController *c, gboolean ok, const char *message, const char *out, HnModelsPage *self)
{
  HnJob *job = hn_job_controller_get_job (c);
  const char *repo = job ? hn_job_spec_get_string (hn_job_get_spec (job), "repo") : NULL;
  g_autofree char *text = NULL;
  if (ok)
    text = g_strdup_printf (_("Downloaded %s"), repo ? repo : "");
  else if (job && g_cancellable_is_cancelled (hn_job_get_cancellable (job)))
    text = g_strdup_printf (_("Download of %s paused; Resume goes on from where it stopped"), repo ? repo : "");
  else
    {
      text = g_strdup_printf (_("Download failed: %s"), message ? message : _("unknown error"));
      if (message && strstr (message, "gated or private"))
        gtk_label_set_text (GTK_LABEL (self->token_status), _("This model needs a token: accept its licence on the Hub, "
                                                              "then paste a token above and save it"));
    }
  hn_page_toast (GTK_WIDGET (self), text);
  hn_models_page_refresh_local (self);
  update_actions (self);
}

/* ---- using a model ------------------------------------------------------ */

static void
open_action (GtkWidget *w, const char *action, GVariant *param)
{
  HnModelsPage *self = HN_MODELS_PAGE (w);
  const char *target = g_variant_get_string (param, NULL);
  GtkRoot *root = gtk_widget_get_root (w);
  if (!self->sel_snapshot || !HN_IS_WINDOW (root))
    return;
  /* a Hierarchos folder trains on its own page */
  if ((g_str_equal (target, "finetune") || g_str_equal (target, "train")) && hn_hier_is_model_dir (self->sel_snapshot))
    target = "hierarchos";
  GtkWidget *page = hn_window_get_page (HN_WINDOW (root), target);
  HnJobSpec *spec = NULL;
  if (HN_IS_TRAIN_PAGE (page))
    spec = hn_train_page_get_spec (HN_TRAIN_PAGE (page));
  else if (HN_IS_GENERATE_PAGE (page))
    spec = hn_generate_page_get_spec (HN_GENERATE_PAGE (page));
  else if (HN_IS_CHAT_PAGE (page))
    spec = hn_chat_page_get_spec (HN_CHAT_PAGE (page));
  if (!spec)
    return;
  if (hn_job_spec_lookup (spec, "hf-model"))
    hn_job_spec_unset (spec, "hf-model");
  hn_job_spec_set_string (spec, "model-path", self->sel_snapshot);
  hn_window_show_page (HN_WINDOW (root), target);
}

/* The newest adapter a finished fine-tune of `model_dir` wrote (the job
 * history), or NULL. */
static char *
newest_adapter (const char *model_dir)
{
  g_autoptr (GPtrArray) runs = runs_of (model_dir, NULL);
  for (guint i = 0; i < runs->len; i++)
    {
      HnJobRecord *r = runs->pdata[i];
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED && is_adapter (hn_job_record_get_output_path (r)))
        return g_strdup (hn_job_record_get_output_path (r));
    }
  return NULL;
}

static void
on_export_finished (HnJobController *c, gboolean ok, const char *message, const char *out, HnModelsPage *self)
{
  g_autofree char *text = ok ? g_strdup_printf (_("Exported %s"), out ? out : "")
                             : g_strdup_printf (_("Export failed: %s"), message ? message : _("unknown error"));
  hn_page_toast (GTK_WIDGET (self), text);
  update_actions (self);
}

static void
on_export_response (AdwMessageDialog *dialog, const char *response, HnModelsPage *self)
{
  self->export_dialog = NULL;
  if (!g_str_equal (response, "export"))
    return;
  HnJobSpec *spec = hn_export_dialog_get_spec (HN_EXPORT_DIALOG (dialog));
  g_autoptr (GError) error = NULL;
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), spec);
  if (!hn_job_controller_start (self->export_ctl, spec, &error))
    hn_page_toast (GTK_WIDGET (self), error->message);
  update_actions (self);
}

/* The Export dialog for model_dir (with adapter preselected), answered by this page's export job. */
static void
open_export_dialog (HnModelsPage *self, const char *model_dir, const char *name, const char *adapter)
{
  const char *docs = g_get_user_special_dir (G_USER_DIRECTORY_DOCUMENTS);
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (self));
  GtkWidget *dialog = hn_export_dialog_new (GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL, model_dir, name, adapter,
                                            docs ? docs : g_get_home_dir ());
  g_signal_connect (dialog, "response", G_CALLBACK (on_export_response), self);
  self->export_dialog = dialog;
  gtk_window_present (GTK_WINDOW (dialog));
}

static void
export_action (GtkWidget *w, const char *action, GVariant *param)
{
  HnModelsPage *self = HN_MODELS_PAGE (w);
  if (!self->sel_snapshot || !self->sel_id)
    return;
  const char *slash = strrchr (self->sel_id, '/');
  g_autofree char *adapter = newest_adapter (self->sel_snapshot);
  open_export_dialog (self, self->sel_snapshot, slash ? slash + 1 : self->sel_id, adapter);
}

gboolean
hn_models_page_export_run (HnModelsPage *self, const char *base_model, const char *output, GError **error)
{
  g_autofree char *cfg = output ? g_build_filename (output, "adapter_config.json", NULL) : NULL;
  gboolean adapter = cfg && g_file_test (cfg, G_FILE_TEST_IS_REGULAR);
  const char *model = adapter ? base_model : output;
  if (!output || !g_file_test (output, G_FILE_TEST_IS_DIR) || !model || !g_file_test (model, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   adapter ? _("Export needs the base model folder %s of this adapter")
                           : _("Export needs a finished run's output folder (%s)"),
                   (adapter ? base_model : output) ? (adapter ? base_model : output) : "none");
      return FALSE;
    }
  if (hn_job_controller_get_running (self->export_ctl))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("An export is already running"));
      return FALSE;
    }
  g_autofree char *name = g_path_get_basename (output);
  open_export_dialog (self, model, name, adapter ? output : NULL);
  return TRUE;
}

/* ---- folders and files the user added ----------------------------------- */

gboolean
hn_models_page_add_local (HnModelsPage *self, const char *path, GError **error)
{
  g_autofree char *abs = g_canonicalize_filename (path, NULL);
  gboolean gguf = g_str_has_suffix (abs, ".gguf") && g_file_test (abs, G_FILE_TEST_IS_REGULAR);
  if (!gguf && !g_file_test (abs, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("%s is not a model folder or a .gguf file"), abs);
      return FALSE;
    }
  g_auto (GStrv) paths = dup_user_paths ();
  if (!g_strv_contains ((const char *const *) paths, abs))
    {
      g_autoptr (GStrvBuilder) b = g_strv_builder_new ();
      g_strv_builder_addv (b, (const char **) paths);
      g_strv_builder_add (b, abs);
      g_auto (GStrv) now = g_strv_builder_end (b);
      if (!hn_model_library_set_paths ((const char *const *) now, error))
        return FALSE;
    }
  hn_models_page_refresh_local (self);
  return TRUE;
}

gboolean
hn_models_page_forget_local (HnModelsPage *self, const char *path)
{
  g_auto (GStrv) paths = dup_user_paths ();
  if (!g_strv_contains ((const char *const *) paths, path))
    return FALSE;
  g_autoptr (GStrvBuilder) b = g_strv_builder_new ();
  for (char **p = paths; *p; p++)
    if (!g_str_equal (*p, path))
      g_strv_builder_add (b, *p);
  g_auto (GStrv) now = g_strv_builder_end (b);
  g_autoptr (GError) error = NULL;
  if (!hn_model_library_set_paths ((const char *const *) now, &error))
    {
      hn_page_toast (GTK_WIDGET (self), error->message);
      return FALSE;
    }
  hn_models_page_refresh_local (self);
  return TRUE;
}

static void
on_add_response (GtkNativeDialog *dialog, int response, HnModelsPage *self)
{
  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr (GFile) f = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (dialog));
      g_autofree char *path = f ? g_file_get_path (f) : NULL;
      g_autoptr (GError) error = NULL;
      if (path && !hn_models_page_add_local (self, path, &error))
        hn_page_toast (GTK_WIDGET (self), error->message);
    }
  g_object_unref (self);
  gtk_native_dialog_destroy (dialog);
  g_object_unref (dialog);
}

static void
add_action (GtkWidget *w, const char *action, GVariant *param)
{
  gboolean folder = g_str_equal (g_variant_get_string (param, NULL), "folder");
  GtkRoot *root = gtk_widget_get_root (w);
  GtkFileChooserNative *dialog = gtk_file_chooser_native_new (
    folder ? _("Add a model folder") : _("Add a GGUF file"), GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL,
    folder ? GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER : GTK_FILE_CHOOSER_ACTION_OPEN, _("_Add"), _("_Cancel"));
  if (!folder)
    {
      GtkFileFilter *filter = gtk_file_filter_new ();
      gtk_file_filter_set_name (filter, _("GGUF models"));
      gtk_file_filter_add_pattern (filter, "*.gguf");
      gtk_file_chooser_add_filter (GTK_FILE_CHOOSER (dialog), filter);
      g_object_unref (filter);
    }
  gtk_native_dialog_set_modal (GTK_NATIVE_DIALOG (dialog), TRUE);
  g_signal_connect (dialog, "response", G_CALLBACK (on_add_response), g_object_ref (w));
  gtk_native_dialog_show (GTK_NATIVE_DIALOG (dialog));
}

/* ---- removal ------------------------------------------------------------ */

static void
remove_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  guint64 freed = 0;
  GError *error = NULL;
  if (!hn_hub_remove_cached_repo (NULL, HN_HUB_REPO_MODEL, data, &freed, &error))
    g_task_return_error (task, error);
  else
    g_task_return_int (task, (gssize) MIN (freed, (guint64) G_MAXSSIZE));
}

static void
on_removed (GObject *source, GAsyncResult *result, gpointer data)
{
  HnModelsPage *self = data;
  g_autoptr (GError) error = NULL;
  gssize freed = g_task_propagate_int (G_TASK (result), &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  self->loading--;
  g_autofree char *text = NULL;
  if (error)
    text = g_strdup_printf (_("Could not remove the model: %s"), error->message);
  else
    {
      g_autofree char *size = g_format_size ((guint64) freed);
      text = g_strdup_printf (_("Removed %s; %s freed"), (const char *) g_task_get_task_data (G_TASK (result)), size);
    }
  hn_page_toast (GTK_WIDGET (self), text);
  hn_models_page_refresh_local (self);
}

static void
on_remove_response (AdwMessageDialog *dialog, const char *response, HnModelsPage *self)
{
  self->remove_dialog = NULL;
  if (!g_str_equal (response, "remove"))
    return;
  const char *id = g_object_get_data (G_OBJECT (dialog), "hn-id");
  if (g_object_get_data (G_OBJECT (dialog), "hn-forget"))
    {
      /* a folder or file the user added: the list forgets it, the files stay */
      g_autofree char *name = g_path_get_basename (id);
      g_autofree char *text = g_strdup_printf (_("%s is no longer listed; its files are where they were"), name);
      hn_models_page_forget_local (self, id);
      hn_page_toast (GTK_WIDGET (self), text);
      return;
    }
  g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_removed, self);
  g_task_set_task_data (task, g_strdup (id), g_free);
  self->loading++;
  g_task_run_in_thread (task, remove_thread);
}

static void
remove_action (GtkWidget *w, const char *action, GVariant *param)
{
  HnModelsPage *self = HN_MODELS_PAGE (w);
  if (!self->sel_local || !self->sel_id)
    return;
  LocalEntry *e = find_local (self, self->sel_id);
  gboolean forget = e && e->model->user_added;
  g_autofree char *heading = NULL, *body = NULL;
  if (forget)
    {
      heading = g_strdup_printf (_("Stop listing %s?"), e->model->repo_id);
      body = g_strdup_printf (_("%s stays on the disk; the Models page just forgets it. Add it again at any time."),
                              e->model->repo_path);
    }
  else
    {
      guint64 size = hn_hub_cached_repo_size (NULL, HN_HUB_REPO_MODEL, self->sel_id);
      g_autofree char *size_s = g_format_size (size);
      heading = g_strdup_printf (_("Remove %s?"), self->sel_id);
      body = g_strdup_printf (_("This deletes its files from the Hugging Face cache and frees %s. "
                                "Python tools that share the cache lose it too."), size_s);
    }
  GtkRoot *root = gtk_widget_get_root (w);
  GtkWidget *dialog = adw_message_dialog_new (GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL, heading, body);
  if (forget)
    g_object_set_data (G_OBJECT (dialog), "hn-forget", GINT_TO_POINTER (1));
  adw_message_dialog_add_responses (ADW_MESSAGE_DIALOG (dialog), "cancel", _("_Cancel"), "remove",
                                    forget ? _("_Stop listing") : _("_Remove"), NULL);
  adw_message_dialog_set_response_appearance (ADW_MESSAGE_DIALOG (dialog), "remove", ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  adw_message_dialog_set_close_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  g_object_set_data_full (G_OBJECT (dialog), "hn-id", g_strdup (self->sel_id), g_free);
  g_signal_connect (dialog, "response", G_CALLBACK (on_remove_response), self);
  self->remove_dialog = dialog;
  gtk_window_present (GTK_WINDOW (dialog));
}

/* ---- the token ---------------------------------------------------------- */

static void
token_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  GError *error = NULL;
  gboolean ok = data ? hn_hub_token_save (NULL, data, &error) : hn_hub_token_forget (NULL, &error);
  if (!ok)
    g_task_return_error (task, error);
  else
    g_task_return_boolean (task, TRUE);
}

static void
on_token_done (GObject *source, GAsyncResult *result, gpointer data)
{
  HnModelsPage *self = data;
  g_autoptr (GError) error = NULL;
  gboolean saving = g_task_get_task_data (G_TASK (result)) != NULL;
  gboolean ok = g_task_propagate_boolean (G_TASK (result), &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  self->loading--;
  if (!ok)
    gtk_label_set_text (GTK_LABEL (self->token_status), error->message);
  else
    gtk_label_set_text (GTK_LABEL (self->token_status), saving ? _("Saved in the keyring; downloads use it when a "
                                                                   "model needs it")
                                                               : _("No token saved"));
}

static void
run_token_task (HnModelsPage *self, char *token)
{
  g_autoptr (GTask) task = g_task_new (NULL, self->cancel, on_token_done, self);
  g_task_set_task_data (task, token, g_free);
  self->loading++;
  g_task_run_in_thread (task, token_thread);
}

static void
save_token_action (GtkWidget *w, const char *action, GVariant *param)
{
  HnModelsPage *self = HN_MODELS_PAGE (w);
  g_autofree char *token = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->token_row))));
  g_autoptr (GError) error = NULL;
  if (!hn_hub_token_check (token, &error))
    {
      gtk_label_set_text (GTK_LABEL (self->token_status), error->message);
      return;
    }
  /* out of the widget at once: the text lives on only in the keyring */
  gtk_editable_set_text (GTK_EDITABLE (self->token_row), "");
  run_token_task (self, g_steal_pointer (&token));
}

static void
forget_token_action (GtkWidget *w, const char *action, GVariant *param)
{
  run_token_task (HN_MODELS_PAGE (w), NULL);
}

/* ---- getters (tests) ---------------------------------------------------- */

HnJobController *
hn_models_page_get_search_controller (HnModelsPage *self)
{
  return self->search_ctl;
}

HnJobController *
hn_models_page_get_pull_controller (HnModelsPage *self)
{
  return self->pull_ctl;
}

HnJobSpec *
hn_models_page_get_search_spec (HnModelsPage *self)
{
  return self->search_spec;
}

gboolean
hn_models_page_is_loading (HnModelsPage *self)
{
  return self->loading > 0 || hn_job_controller_get_running (self->search_ctl);
}

guint
hn_models_page_get_n_results (HnModelsPage *self)
{
  return self->n_results;
}

guint
hn_models_page_get_n_local (HnModelsPage *self)
{
  return self->local ? self->local->len : 0;
}

const char *
hn_models_page_get_search_status (HnModelsPage *self)
{
  return gtk_label_get_text (GTK_LABEL (self->search_status));
}

const char *
hn_models_page_get_fit_text (HnModelsPage *self)
{
  return self->fit_text;
}

const char *
hn_models_page_get_result_fit (HnModelsPage *self, const char *id, HnModelFit *fit)
{
  ResultEntry *e = find_result (self, id);
  if (!e)
    return NULL;
  if (fit && e->has_fit)
    *fit = e->fit;
  return gtk_label_get_text (GTK_LABEL (e->badge));
}

void
hn_models_page_set_device_memory (HnModelsPage *self, guint64 free_bytes, const char *name)
{
  self->device_checked = TRUE;
  self->free_bytes = free_bytes;
  g_free (self->device_name);
  self->device_name = g_strdup (name);
  for (guint i = 0; self->local && i < self->local->len; i++)
    {
      LocalEntry *e = self->local->pdata[i];
      if (e->badge)
        apply_fit (self, e->badge, e->has_fit ? &e->fit : NULL, e->model->problem);
    }
  for (guint i = 0; i < self->results->len; i++)
    {
      ResultEntry *e = self->results->pdata[i];
      if (!e->pending)
        apply_fit (self, e->badge, e->has_fit ? &e->fit : NULL, e->why);
    }
  if (self->fit_text)
    set_fit (self, self->sel_has_fit ? &self->sel_fit : NULL, self->sel_fit_why);
}

const char *
hn_models_page_get_local_fit (HnModelsPage *self, const char *id)
{
  LocalEntry *e = find_local (self, id);
  return e && e->badge ? gtk_label_get_text (GTK_LABEL (e->badge)) : NULL;
}

char *
hn_models_page_dup_card_text (HnModelsPage *self)
{
  GtkTextBuffer *buf = gtk_text_view_get_buffer (GTK_TEXT_VIEW (self->card_view));
  GtkTextIter a, b;
  gtk_text_buffer_get_bounds (buf, &a, &b);
  return gtk_text_buffer_get_text (buf, &a, &b, FALSE);
}

guint
hn_models_page_get_n_runs (HnModelsPage *self)
{
  return self->n_runs;
}

const char *
hn_models_page_get_local_subtitle (HnModelsPage *self, const char *id)
{
  for (GtkWidget *r = gtk_widget_get_first_child (self->local_list); r; r = gtk_widget_get_next_sibling (r))
    if (g_strcmp0 (g_object_get_data (G_OBJECT (r), "hn-id"), id) == 0)
      return adw_action_row_get_subtitle (ADW_ACTION_ROW (r));
  return NULL;
}

guint
hn_models_page_get_n_files (HnModelsPage *self)
{
  return self->n_files;
}

const char *
hn_models_page_get_command_text (HnModelsPage *self)
{
  return hn_command_view_get_text (HN_COMMAND_VIEW (self->command));
}

GtkWidget *
hn_models_page_get_export_dialog (HnModelsPage *self)
{
  return self->export_dialog;
}

HnJobController *
hn_models_page_get_export_controller (HnModelsPage *self)
{
  return self->export_ctl;
}

GtkWidget *
hn_models_page_get_remove_dialog (HnModelsPage *self)
{
  return self->remove_dialog;
}

void
hn_models_page_set_token_text (HnModelsPage *self, const char *text)
{
  gtk_editable_set_text (GTK_EDITABLE (self->token_row), text);
}

const char *
hn_models_page_get_token_status (HnModelsPage *self)
{
  return gtk_label_get_text (GTK_LABEL (self->token_status));
}

/* ---- life --------------------------------------------------------------- */

static void
on_search_activate (GtkSearchEntry *entry, HnModelsPage *self)
{
  if (!hn_job_controller_get_running (self->search_ctl) && !self->offline)
    start_search (self, FALSE);
}

static void
on_first_map (GtkWidget *w, gpointer data)
{
  g_signal_handlers_disconnect_by_func (w, on_first_map, data);
  hn_models_page_refresh_local (HN_MODELS_PAGE (w));
}

static void
hn_models_page_dispose (GObject *object)
{
  HnModelsPage *self = HN_MODELS_PAGE (object);
  g_cancellable_cancel (self->cancel);
  for (HnJobController **c = (HnJobController *[]) { self->search_ctl, self->pull_ctl, self->export_ctl, NULL }; *c; c++)
    {
      g_signal_handlers_disconnect_by_data (*c, self);
      hn_job_controller_stop (*c);
    }
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_MODELS_PAGE);
  g_clear_object (&self->search_ctl);
  g_clear_object (&self->pull_ctl);
  g_clear_object (&self->export_ctl);
  g_clear_object (&self->search_spec);
  g_clear_object (&self->pull_spec);
  G_OBJECT_CLASS (hn_models_page_parent_class)->dispose (object);
}

static void
hn_models_page_finalize (GObject *object)
{
  HnModelsPage *self = HN_MODELS_PAGE (object);
  g_string_free (self->search_out, TRUE);
  g_free (self->next_cursor);
  g_clear_pointer (&self->local, g_ptr_array_unref);
  g_object_unref (self->cancel);
  g_free (self->device_name);
  g_free (self->sel_id);
  g_free (self->sel_snapshot);
  g_strfreev (self->gguf_files);
  g_free (self->fit_text);
  g_free (self->sel_fit_why);
  g_ptr_array_unref (self->results);
  G_OBJECT_CLASS (hn_models_page_parent_class)->finalize (object);
}

static void
hn_models_page_class_init (HnModelsPageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->dispose = hn_models_page_dispose;
  object_class->finalize = hn_models_page_finalize;
  g_type_ensure (HN_TYPE_PROGRESS_VIEW);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-models-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, local_list);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, search_entry);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, task_drop);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, sort_drop);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, search_status);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, result_list);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, more_button);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, token_row);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, token_status);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, title);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, subtitle);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, fit_badge);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, download_button);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, gguf_box);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, gguf_drop);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, progress);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, detail_stack);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, card_view);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, file_list);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, run_list);
  gtk_widget_class_bind_template_child (widget_class, HnModelsPage, command);
  gtk_widget_class_install_action (widget_class, "models.search", NULL, search_action);
  gtk_widget_class_install_action (widget_class, "models.more", NULL, more_action);
  gtk_widget_class_install_action (widget_class, "models.refresh", NULL, refresh_action);
  gtk_widget_class_install_action (widget_class, "models.add", "s", add_action);
  gtk_widget_class_install_action (widget_class, "models.download", NULL, download_action);
  gtk_widget_class_install_action (widget_class, "models.cancel", NULL, cancel_action);
  gtk_widget_class_install_action (widget_class, "models.open", "s", open_action);
  gtk_widget_class_install_action (widget_class, "models.export", NULL, export_action);
  gtk_widget_class_install_action (widget_class, "models.remove", NULL, remove_action);
  gtk_widget_class_install_action (widget_class, "models.save-token", NULL, save_token_action);
  gtk_widget_class_install_action (widget_class, "models.forget-token", NULL, forget_token_action);
}

static void
hn_models_page_init (HnModelsPage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->search_out = g_string_new (NULL);
  self->results = g_ptr_array_new_with_free_func ((GDestroyNotify) result_entry_free);
  self->cancel = g_cancellable_new ();
  self->search_spec = hn_job_spec_new ("hub-search", NULL);
  self->pull_spec = hn_job_spec_new ("pull", NULL);
  self->search_ctl = hn_job_controller_new ();
  self->pull_ctl = hn_job_controller_new ();
  self->export_ctl = hn_job_controller_new ();
  g_signal_connect (self->export_ctl, "finished", G_CALLBACK (on_export_finished), self);
  g_signal_connect (self->search_ctl, "event", G_CALLBACK (on_search_event), self);
  g_signal_connect (self->search_ctl, "finished", G_CALLBACK (on_search_finished), self);
  g_signal_connect (self->pull_ctl, "started", G_CALLBACK (on_pull_started), self);
  g_signal_connect (self->pull_ctl, "finished", G_CALLBACK (on_pull_finished), self);
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (self->progress), self->pull_ctl);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->search_spec);
  g_signal_connect (self->local_list, "row-activated", G_CALLBACK (on_row_activated), self);
  g_signal_connect (self->result_list, "row-activated", G_CALLBACK (on_row_activated), self);
  g_signal_connect (self->search_entry, "activate", G_CALLBACK (on_search_activate), self);
  g_signal_connect (self->gguf_drop, "notify::selected", G_CALLBACK (on_gguf_selected), self);
  g_autoptr (HnHub) hub = hn_hub_new ();
  self->offline = hn_hub_get_offline (hub);
  if (self->offline)
    gtk_label_set_text (GTK_LABEL (self->search_status),
                        _("Offline (HF_HUB_OFFLINE is set): only the models on this computer are listed"));
  update_actions (self);
  /* the first look at the cache (and the device) waits until the page shows */
  g_signal_connect (self, "map", G_CALLBACK (on_first_map), NULL);
}

GtkWidget *
hn_models_page_new (void)
{
  return g_object_new (HN_TYPE_MODELS_PAGE, NULL);
}
