#include "hn-jobs-page.h"
#include "hn-models-page.h"
#include "hn-compare-page.h"
#include "hn-loss-chart.h"
#include "hn-train-page.h"
#include "hn-window.h"
#include "base/hn-error.h"
#include "jobs/job-spec.h"

#include <glib/gi18n.h>

struct _HnJobsPage
{
  AdwBin parent_instance;
  GtkWidget *chart, *list;
};

G_DEFINE_FINAL_TYPE (HnJobsPage, hn_jobs_page, ADW_TYPE_BIN)

static void
on_copy_command (GtkButton *button, HnJobRecord *record)
{
  gdk_clipboard_set_text (gtk_widget_get_clipboard (GTK_WIDGET (button)), hn_job_record_get_command_line (record));
  gtk_widget_activate_action (GTK_WIDGET (button), "win.show-toast", "s", _("Command copied"));
}

/* The option value of a record's CLI line ("--model-path DIR"), or NULL. */
static char *
command_option (HnJobRecord *record, const char *flag)
{
  g_auto (GStrv) argv = NULL;
  if (!g_shell_parse_argv (hn_job_record_get_command_line (record), NULL, &argv, NULL))
    return NULL;
  for (int i = 0; argv[i] && argv[i + 1]; i++)
    if (g_str_equal (argv[i], flag))
      return g_strdup (argv[i + 1]);
  return NULL;
}

static char *
record_kind (HnJobRecord *record)
{
  g_auto (GStrv) argv = NULL;
  if (!g_shell_parse_argv (hn_job_record_get_command_line (record), NULL, &argv, NULL) || !argv[0] || !argv[1])
    return NULL;
  const HnJobKindInfo *k = hn_job_kind_lookup (argv[1]);
  return k ? g_strdup (k->name) : NULL;
}

/* Overlays every ticked run on the chart. */
static void
update_chart (HnJobsPage *self)
{
  HnLossChart *chart = HN_LOSS_CHART (self->chart);
  hn_loss_chart_clear_series (chart);
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  for (guint i = 0; i < g_list_model_get_n_items (list); i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (!g_object_get_data (G_OBJECT (r), "hn-compare"))
        continue;
      GArray *pts = hn_job_record_get_points (r);
      g_autofree gint64 *steps = g_new (gint64, MAX (pts->len, 1));
      g_autofree double *loss = g_new (double, MAX (pts->len, 1)), *eval = g_new (double, MAX (pts->len, 1));
      for (guint k = 0; k < pts->len; k++)
        {
          const HnJobRecordPoint *p = &g_array_index (pts, HnJobRecordPoint, k);
          steps[k] = p->step, loss[k] = p->loss, eval[k] = p->eval_loss;
        }
      g_autofree char *out = command_option (r, "--out-dir");
      g_autofree char *base = out ? g_path_get_basename (out) : NULL;
      g_autofree char *label = g_strdup_printf ("%s · %s", hn_job_record_get_title (r), base ? base : "");
      hn_loss_chart_add_series (chart, label, steps, loss, eval, pts->len);
    }
}

static HnJobsPage *
page_of (GtkWidget *w)
{
  return HN_JOBS_PAGE (gtk_widget_get_ancestor (w, HN_TYPE_JOBS_PAGE));
}

static void
on_compare_toggled (GtkCheckButton *check, HnJobRecord *record)
{
  g_object_set_data (G_OBJECT (record), "hn-compare", GINT_TO_POINTER (gtk_check_button_get_active (check)));
  update_chart (page_of (GTK_WIDGET (check)));
}

static HnWindow *
window_of (HnJobsPage *self, GError **error)
{
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (self));
  if (!HN_IS_WINDOW (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("The Jobs page is not in the main window"));
      return NULL;
    }
  return HN_WINDOW (root);
}

gboolean
hn_jobs_page_resume_record (HnJobsPage *self, HnJobRecord *record, GError **error)
{
  HnWindow *win = window_of (self, error);
  if (!win)
    return FALSE;
  const char *ck = hn_job_record_get_resume_from (record);
  g_auto (GStrv) argv = NULL;
  if (!ck || !g_shell_parse_argv (hn_job_record_get_command_line (record), NULL, &argv, error))
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("This run was not stopped with a checkpoint"));
      return FALSE;
    }
  /* argv[0] is the program, argv[1] the kind */
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (g_strv_length (argv) - 1, (const char *const *) argv + 1,
                                                          error);
  if (!spec)
    return FALSE;
  const char *kind = hn_job_spec_get_kind (spec);
  const char *page = g_str_equal (kind, "transformer-finetune") ? "finetune"
                     : g_str_has_prefix (kind, "hierarchos-")   ? "hierarchos"
                                                                : "train";
  if (!hn_train_page_resume (HN_TRAIN_PAGE (hn_window_get_page (win, page)), spec, ck, error))
    return FALSE;
  hn_window_show_page (win, page);
  return TRUE;
}

gboolean
hn_jobs_page_compare_record (HnJobsPage *self, HnJobRecord *record, GError **error)
{
  HnWindow *win = window_of (self, error);
  if (!win)
    return FALSE;
  g_autofree char *base = command_option (record, "--model-path");
  const char *tuned = hn_job_record_get_output_path (record);
  if (!base || !tuned)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   _("Side by side needs a finished run with a local --model-path and an output"));
      return FALSE;
    }
  hn_compare_page_set_models (HN_COMPARE_PAGE (hn_window_get_page (win, "compare")), base, tuned);
  hn_window_show_page (win, "compare");
  return TRUE;
}

gboolean
hn_jobs_page_export_record (HnJobsPage *self, HnJobRecord *record, GError **error)
{
  HnWindow *win = window_of (self, error);
  if (!win)
    return FALSE;
  g_autofree char *base = command_option (record, "--model-path");
  return hn_models_page_export_run (HN_MODELS_PAGE (hn_window_get_page (win, "models")), base,
                                    hn_job_record_get_output_path (record), error);
}

static void
on_export (GtkButton *button, HnJobRecord *record)
{
  g_autoptr (GError) error = NULL;
  if (!hn_jobs_page_export_record (page_of (GTK_WIDGET (button)), record, &error))
    gtk_widget_activate_action (GTK_WIDGET (button), "win.show-toast", "s", error->message);
}

static void
on_resume (GtkButton *button, HnJobRecord *record)
{
  g_autoptr (GError) error = NULL;
  if (!hn_jobs_page_resume_record (page_of (GTK_WIDGET (button)), record, &error))
    gtk_widget_activate_action (GTK_WIDGET (button), "win.show-toast", "s", error->message);
}

static void
on_side_by_side (GtkButton *button, HnJobRecord *record)
{
  g_autoptr (GError) error = NULL;
  if (!hn_jobs_page_compare_record (page_of (GTK_WIDGET (button)), record, &error))
    gtk_widget_activate_action (GTK_WIDGET (button), "win.show-toast", "s", error->message);
}

/* Which of a row's buttons apply depends on how the run ended. */
static void
update_row_buttons (HnJobRecord *record, GParamSpec *pspec, GtkWidget *row)
{
  HnJobRecordState st = hn_job_record_get_state (record);
  g_autofree char *kind = record_kind (record);
  gboolean training = kind && (g_str_has_prefix (kind, "transformer-train") || g_str_equal (kind, "transformer-finetune") ||
                               g_str_has_prefix (kind, "hierarchos-"));
  gtk_widget_set_visible (g_object_get_data (G_OBJECT (row), "hn-compare"),
                          training && hn_job_record_get_points (record)->len > 0);
  gtk_widget_set_visible (g_object_get_data (G_OBJECT (row), "hn-resume"),
                          st == HN_JOB_RECORD_STOPPED && hn_job_record_get_resume_from (record));
  gtk_widget_set_visible (g_object_get_data (G_OBJECT (row), "hn-side"),
                          st == HN_JOB_RECORD_SUCCEEDED && kind &&
                            (g_str_equal (kind, "transformer-finetune") || g_str_equal (kind, "transformer-train")));
  gtk_widget_set_visible (g_object_get_data (G_OBJECT (row), "hn-export"),
                          st == HN_JOB_RECORD_SUCCEEDED && kind && hn_job_record_get_output_path (record) &&
                            (g_str_equal (kind, "transformer-finetune") || g_str_equal (kind, "transformer-train")));
}

static GtkWidget *
row_button (GtkWidget *row, const char *label, const char *tooltip, GCallback cb, HnJobRecord *record)
{
  GtkWidget *b = gtk_button_new_with_mnemonic (label);
  gtk_widget_set_valign (b, GTK_ALIGN_CENTER);
  gtk_widget_set_tooltip_text (b, tooltip);
  g_signal_connect_object (b, "clicked", cb, record, 0);
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), b);
  return b;
}

static GtkWidget *
create_row (gpointer item, gpointer user_data)
{
  HnJobRecord *record = item;
  GtkWidget *row = adw_action_row_new ();
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), hn_job_record_get_title (record));
  adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 3);
  g_object_bind_property (record, "summary", row, "subtitle", G_BINDING_SYNC_CREATE);
  GtkWidget *check = gtk_check_button_new ();
  gtk_widget_set_valign (check, GTK_ALIGN_CENTER);
  gtk_widget_set_tooltip_text (check, _("Overlay this run's loss curve on the chart above"));
  gtk_check_button_set_active (GTK_CHECK_BUTTON (check), g_object_get_data (G_OBJECT (record), "hn-compare") != NULL);
  g_signal_connect_object (check, "toggled", G_CALLBACK (on_compare_toggled), record, 0);
  adw_action_row_add_prefix (ADW_ACTION_ROW (row), check);
  g_object_set_data (G_OBJECT (row), "hn-compare", check);
  g_object_set_data (G_OBJECT (row), "hn-resume",
                     row_button (row, _("_Resume"), _("Continue from the checkpoint it was stopped at"),
                                 G_CALLBACK (on_resume), record));
  g_object_set_data (G_OBJECT (row), "hn-side",
                     row_button (row, _("Chat side _by side"), _("Talk to the base model and this fine-tune at once"),
                                 G_CALLBACK (on_side_by_side), record));
  g_object_set_data (G_OBJECT (row), "hn-export",
                     row_button (row, _("_Export…"), _("Write the model as a GGUF file for llama.cpp / Ollama, or merged"),
                                 G_CALLBACK (on_export), record));
  GtkWidget *copy = gtk_button_new_from_icon_name ("edit-copy-symbolic");
  gtk_widget_set_valign (copy, GTK_ALIGN_CENTER);
  gtk_widget_add_css_class (copy, "flat");
  gtk_widget_set_tooltip_text (copy, hn_job_record_get_command_line (record));
  gtk_accessible_update_property (GTK_ACCESSIBLE (copy), GTK_ACCESSIBLE_PROPERTY_LABEL, _("Copy the command"), -1);
  g_signal_connect_object (copy, "clicked", G_CALLBACK (on_copy_command), record, 0);
  adw_action_row_add_suffix (ADW_ACTION_ROW (row), copy);
  g_signal_connect_object (record, "notify::state", G_CALLBACK (update_row_buttons), row, 0);
  update_row_buttons (record, NULL, row);
  return row;
}

void
hn_jobs_page_set_compared (HnJobsPage *self, HnJobRecord *record, gboolean compared)
{
  g_object_set_data (G_OBJECT (record), "hn-compare", GINT_TO_POINTER (compared));
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  for (guint i = 0; i < g_list_model_get_n_items (list); i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (r != record)
        continue;
      GtkListBoxRow *row = gtk_list_box_get_row_at_index (GTK_LIST_BOX (self->list), (int) i);
      if (row)
        gtk_check_button_set_active (GTK_CHECK_BUTTON (g_object_get_data (G_OBJECT (row), "hn-compare")), compared);
    }
  update_chart (self);
}

GtkWidget *
hn_jobs_page_get_chart (HnJobsPage *self)
{
  return self->chart;
}

static void
hn_jobs_page_dispose (GObject *object)
{
  gtk_widget_dispose_template (GTK_WIDGET (object), HN_TYPE_JOBS_PAGE);
  G_OBJECT_CLASS (hn_jobs_page_parent_class)->dispose (object);
}

static void
hn_jobs_page_class_init (HnJobsPageClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  G_OBJECT_CLASS (klass)->dispose = hn_jobs_page_dispose;
  g_type_ensure (HN_TYPE_LOSS_CHART);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-jobs-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnJobsPage, chart);
  gtk_widget_class_bind_template_child (widget_class, HnJobsPage, list);
}

static void
hn_jobs_page_init (HnJobsPage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  gtk_list_box_bind_model (GTK_LIST_BOX (self->list), G_LIST_MODEL (hn_job_record_list ()), create_row, NULL, NULL);
}

GtkWidget *
hn_jobs_page_new (void)
{
  return g_object_new (HN_TYPE_JOBS_PAGE, NULL);
}
