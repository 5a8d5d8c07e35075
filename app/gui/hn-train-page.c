#include "hn-train-page.h"
#include "hn-models-page.h"
#include "hn-window.h"
#include "hn-command-view.h"
#include "hn-data-preview.h"
#include "hn-dataset-picker.h"
#include "hn-memory-row.h"
#include "hn-option-group.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"

#include "base/hn-error.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

struct _HnTrainPage
{
  AdwBin parent_instance;
  char *kind;
  char *alt_kind;
  HnJobSpec *specs[2];
  guint active;
  HnJobController *controller;
  char *problem;

  GtkWidget *mode_group;
  GtkWidget *mode_train;
  GtkWidget *mode_finetune;
  GtkWidget *model_group, *data_group, *output_group, *lora_group, *arch_group;
  GtkWidget *schedule_group, *optim_group, *run_group;
  GtkWidget *log_toggle;
  HnLossChart *chart;
  GtkWidget *progress;
  GtkWidget *command;
  GtkWidget *reason;
  GtkWidget *memory;
  GtkWidget *save_stop_button;
  GtkWidget *preview, *preview_expander, *dataset_picker;
  char *resume_from; /* the checkpoint of the last "Stop and save" */
  char *last_output, *last_base; /* the last finished Transformer run: its output and --model-path */
};

enum { PROP_0, PROP_KIND, PROP_ALT_KIND, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnTrainPage, hn_train_page, ADW_TYPE_BIN)

static GtkWidget **
groups (HnTrainPage *self, GtkWidget **out)
{
  GtkWidget *g[] = { self->model_group, self->data_group, self->output_group, self->lora_group,
                     self->arch_group, self->schedule_group, self->optim_group, self->run_group, NULL };
  memcpy (out, g, sizeof g);
  return out;
}

static void
update_state (HnTrainPage *self)
{
  GtkWidget *gs[9];
  g_free (self->problem);
  self->problem = hn_page_start_problem (self->specs[self->active], groups (self, gs));
  if (!self->problem)
    self->problem = hn_memory_row_dup_problem (HN_MEMORY_ROW (self->memory));
  gboolean running = hn_job_controller_get_running (self->controller);
  gtk_label_set_text (GTK_LABEL (self->reason), running ? "" : self->problem ? self->problem : "");
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.start", !running && !self->problem);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.stop", running);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.save-stop", running);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.export-model", !running && self->last_output);
  gtk_widget_set_sensitive (self->mode_train, !running);
  gtk_widget_set_sensitive (self->mode_finetune, !running);
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnTrainPage *self)
{
  update_state (self);
}

static void
bind_spec (HnTrainPage *self)
{
  GtkWidget *gs[9];
  HnJobSpec *spec = self->specs[self->active];
  for (GtkWidget **g = groups (self, gs); *g; g++)
    hn_option_group_set_spec (HN_OPTION_GROUP (*g), spec);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), spec);
  hn_memory_row_set_spec (HN_MEMORY_ROW (self->memory), spec);
  hn_data_preview_set_spec (HN_DATA_PREVIEW (self->preview), spec);
  hn_dataset_picker_set_spec (HN_DATASET_PICKER (self->dataset_picker), spec);
  gtk_widget_set_visible (self->preview_expander, gtk_widget_get_visible (self->preview));
  update_state (self);
}

void
hn_train_page_set_alt_mode (HnTrainPage *self, gboolean alt)
{
  guint active = alt && self->specs[1] ? 1 : 0;
  if (active == self->active)
    return;
  self->active = active;
  gtk_toggle_button_set_active (GTK_TOGGLE_BUTTON (active ? self->mode_finetune : self->mode_train), TRUE);
  bind_spec (self);
}

static void
on_mode_toggled (GtkToggleButton *button, HnTrainPage *self)
{
  if (gtk_toggle_button_get_active (button))
    hn_train_page_set_alt_mode (self, GTK_WIDGET (button) == self->mode_finetune);
}

static void
on_problems_changed (HnOptionGroup *group, HnTrainPage *self)
{
  update_state (self);
}

static void
on_event (HnJobController *c, const HnJobEvent *e, HnTrainPage *self)
{
  if (e->type == HN_JOB_EVENT_DONE)
    {
      g_free (self->resume_from);
      self->resume_from = g_strdup (e->done.resume_from);
    }
  if (e->type == HN_JOB_EVENT_METRIC && e->metric.step >= 0)
    hn_loss_chart_add_point (self->chart, e->metric.step, e->metric.loss, e->metric.lr, e->metric.eval_loss);
}

static void
on_started (HnJobController *c, HnTrainPage *self)
{
  hn_loss_chart_clear (self->chart);
  update_state (self);
}

static void
on_finished (HnJobController *c, gboolean ok, const char *message, const char *output, HnTrainPage *self)
{
  HnJobSpec *spec = self->specs[self->active];
  if (ok && output && !self->resume_from && g_str_has_prefix (hn_job_spec_get_kind (spec), "transformer-"))
    {
      /* what Export offers: a fine-tune's adapter over its base model, or the trained model */
      g_free (self->last_output);
      g_free (self->last_base);
      self->last_output = g_strdup (output);
      self->last_base = g_strdup (hn_job_spec_get_string (spec, "model-path"));
    }
  update_state (self);
  HnJob *job = hn_job_controller_get_job (c);
  g_autofree char *text = NULL;
  if (ok && self->resume_from)
    text = g_strdup_printf (_("Stopped and saved %s: resume it from the Jobs page"), self->resume_from);
  else if (ok)
    text = output ? g_strdup_printf (_("Training finished: %s"), output) : g_strdup (_("Training finished"));
  else if (job && g_cancellable_is_cancelled (hn_job_get_cancellable (job)))
    text = g_strdup (_("Training stopped"));
  else
    text = g_strdup_printf (_("Training failed: %s"), message ? message : _("unknown error"));
  hn_page_toast (GTK_WIDGET (self), text);
}

static void
export_model_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnTrainPage *self = HN_TRAIN_PAGE (widget);
  GtkRoot *root = gtk_widget_get_root (widget);
  g_autoptr (GError) error = NULL;
  if (!HN_IS_WINDOW (root))
    return;
  if (!hn_models_page_export_run (HN_MODELS_PAGE (hn_window_get_page (HN_WINDOW (root), "models")), self->last_base,
                                  self->last_output, &error))
    hn_page_toast (widget, error->message);
}

static void
start_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnTrainPage *self = HN_TRAIN_PAGE (widget);
  g_autoptr (GError) error = NULL;
  update_state (self);
  if (self->problem)
    return;
  HnJobSpec *spec = self->specs[self->active];
  hn_page_fresh_out_dir (spec);
  hn_page_remember (spec);
  if (!hn_job_controller_start (self->controller, spec, &error))
    hn_page_toast (widget, error->message);
}

static void
stop_action (GtkWidget *widget, const char *action, GVariant *param)
{
  if (g_str_equal (action, "page.save-stop"))
    hn_job_controller_save_and_stop (HN_TRAIN_PAGE (widget)->controller);
  else
    hn_job_controller_stop (HN_TRAIN_PAGE (widget)->controller);
}

gboolean
hn_train_page_resume (HnTrainPage *self, HnJobSpec *from, const char *checkpoint, GError **error)
{
  const char *kind = hn_job_spec_get_kind (from);
  guint which = self->specs[1] && g_str_equal (kind, hn_job_spec_get_kind (self->specs[1])) ? 1 : 0;
  if (!g_str_equal (kind, hn_job_spec_get_kind (self->specs[which])))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("This page does not run %s jobs"), kind);
      return FALSE;
    }
  hn_train_page_set_alt_mode (self, which == 1);
  HnJobSpec *spec = self->specs[which];
  guint n = 0;
  const HnOptionInfo *opts = hn_job_spec_get_options (spec, &n);
  for (guint i = 0; i < n; i++)
    {
      const char *name = opts[i].name;
      if (!hn_job_spec_is_set (from, name))
        hn_job_spec_unset (spec, name);
      else if (opts[i].type == HN_OPTION_STRINGV)
        hn_job_spec_set_strv (spec, name, hn_job_spec_get_strv (from, name));
      else
        {
          g_autofree char *v = hn_job_spec_value_to_string (from, name);
          if (!hn_job_spec_set_from_string (spec, name, v, error))
            return FALSE;
        }
    }
  hn_job_spec_set_string (spec, "resume-from-checkpoint", checkpoint);
  update_state (self);
  if (self->problem)
    {
      g_set_error_literal (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, self->problem);
      return FALSE;
    }
  return hn_job_controller_start (self->controller, spec, error);
}

static void
on_export_response (GtkNativeDialog *dialog, int response, gpointer user_data)
{
  HnTrainPage *self = user_data;
  gboolean csv = GPOINTER_TO_INT (g_object_get_data (G_OBJECT (dialog), "hn-csv"));
  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr (GFile) file = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (dialog));
      g_autofree char *path = g_file_get_path (file);
      g_autoptr (GError) error = NULL;
      gboolean ok = csv ? hn_loss_chart_export_csv (self->chart, path, &error)
                        : hn_loss_chart_export_png (self->chart, path, 1200, 700, &error);
      g_autofree char *msg = ok ? g_strdup_printf (_("Saved %s"), path) : g_strdup (error->message);
      hn_page_toast (GTK_WIDGET (self), msg);
    }
  gtk_native_dialog_destroy (dialog);
  g_object_unref (dialog);
  g_object_unref (self);
}

static void
export_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnTrainPage *self = HN_TRAIN_PAGE (widget);
  gboolean csv = g_str_equal (action, "page.export-csv");
  GtkRoot *root = gtk_widget_get_root (widget);
  GtkFileChooserNative *dialog = gtk_file_chooser_native_new (csv ? _("Export the loss as CSV")
                                                                  : _("Export the chart as PNG"),
                                                              GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL,
                                                              GTK_FILE_CHOOSER_ACTION_SAVE, _("_Save"), _("_Cancel"));
  gtk_native_dialog_set_modal (GTK_NATIVE_DIALOG (dialog), TRUE);
  g_autofree char *name = g_strdup_printf ("%s-loss.%s", hn_job_spec_get_kind (self->specs[self->active]),
                                           csv ? "csv" : "png");
  gtk_file_chooser_set_current_name (GTK_FILE_CHOOSER (dialog), name);
  g_object_set_data (G_OBJECT (dialog), "hn-csv", GINT_TO_POINTER (csv));
  g_signal_connect (dialog, "response", G_CALLBACK (on_export_response), g_object_ref (self));
  gtk_native_dialog_show (GTK_NATIVE_DIALOG (dialog));
}

static void
hn_train_page_constructed (GObject *object)
{
  HnTrainPage *self = HN_TRAIN_PAGE (object);
  G_OBJECT_CLASS (hn_train_page_parent_class)->constructed (object);
  const char *kinds[2] = { self->kind ? self->kind : "transformer-train", self->alt_kind };
  for (int i = 0; i < 2; i++)
    {
      if (!kinds[i])
        continue;
      g_autoptr (GError) error = NULL;
      self->specs[i] = hn_job_spec_new (kinds[i], &error);
      if (!self->specs[i])
        g_error ("HnTrainPage: %s", error->message); /* a programming error in the .ui */
      hn_page_apply_defaults (self->specs[i]);
      g_signal_connect (self->specs[i], "changed", G_CALLBACK (on_spec_changed), self);
    }
  gtk_widget_set_visible (self->mode_group, self->specs[1] != NULL);
  gtk_widget_set_visible (self->save_stop_button, hn_job_kind_can_save_and_stop (kinds[0]));
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (self->progress), self->controller);
  bind_spec (self);
}

HnJobSpec *
hn_train_page_get_spec (HnTrainPage *self)
{
  return self->specs[self->active];
}

HnJobController *
hn_train_page_get_controller (HnTrainPage *self)
{
  return self->controller;
}

HnLossChart *
hn_train_page_get_chart (HnTrainPage *self)
{
  return self->chart;
}

const char *
hn_train_page_get_command_text (HnTrainPage *self)
{
  return hn_command_view_get_text (HN_COMMAND_VIEW (self->command));
}

void
hn_train_page_set_preview_expanded (HnTrainPage *self, gboolean expanded)
{
  gtk_expander_set_expanded (GTK_EXPANDER (self->preview_expander), expanded);
}

GtkWidget *
hn_train_page_get_dataset_picker (HnTrainPage *self)
{
  return self->dataset_picker;
}

GtkWidget *
hn_train_page_get_data_preview (HnTrainPage *self)
{
  return self->preview;
}

GtkWidget *
hn_train_page_get_memory_row (HnTrainPage *self)
{
  return self->memory;
}

const char *
hn_train_page_get_start_problem (HnTrainPage *self)
{
  return self->problem;
}

static void
hn_train_page_dispose (GObject *object)
{
  HnTrainPage *self = HN_TRAIN_PAGE (object);
  for (int i = 0; i < 2; i++)
    if (self->specs[i])
      g_signal_handlers_disconnect_by_data (self->specs[i], self);
  if (self->controller)
    {
      g_signal_handlers_disconnect_by_data (self->controller, self);
      hn_job_controller_stop (self->controller);
    }
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_TRAIN_PAGE);
  g_clear_object (&self->controller);
  g_clear_object (&self->specs[0]);
  g_clear_object (&self->specs[1]);
  G_OBJECT_CLASS (hn_train_page_parent_class)->dispose (object);
}

static void
hn_train_page_finalize (GObject *object)
{
  HnTrainPage *self = HN_TRAIN_PAGE (object);
  g_free (self->kind);
  g_free (self->alt_kind);
  g_free (self->problem);
  g_free (self->resume_from);
  g_free (self->last_output);
  g_free (self->last_base);
  G_OBJECT_CLASS (hn_train_page_parent_class)->finalize (object);
}

static void
hn_train_page_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  HnTrainPage *self = HN_TRAIN_PAGE (object);
  switch (prop_id)
    {
    case PROP_KIND: g_value_set_string (value, self->kind); break;
    case PROP_ALT_KIND: g_value_set_string (value, self->alt_kind); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_train_page_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  HnTrainPage *self = HN_TRAIN_PAGE (object);
  switch (prop_id)
    {
    case PROP_KIND: self->kind = g_value_dup_string (value); break;
    case PROP_ALT_KIND: self->alt_kind = g_value_dup_string (value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_train_page_class_init (HnTrainPageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->constructed = hn_train_page_constructed;
  object_class->dispose = hn_train_page_dispose;
  object_class->finalize = hn_train_page_finalize;
  object_class->get_property = hn_train_page_get_property;
  object_class->set_property = hn_train_page_set_property;
  properties[PROP_KIND] = g_param_spec_string ("kind", NULL, NULL, NULL,
                                               G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
  properties[PROP_ALT_KIND] = g_param_spec_string ("alt-kind", NULL, NULL, NULL,
                                                   G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);

  g_type_ensure (HN_TYPE_OPTION_GROUP);
  g_type_ensure (HN_TYPE_LOSS_CHART);
  g_type_ensure (HN_TYPE_PROGRESS_VIEW);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  g_type_ensure (HN_TYPE_MEMORY_ROW);
  g_type_ensure (HN_TYPE_DATA_PREVIEW);
  g_type_ensure (HN_TYPE_DATASET_PICKER);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-train-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, mode_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, mode_train);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, mode_finetune);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, model_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, data_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, output_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, lora_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, arch_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, schedule_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, optim_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, run_group);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, log_toggle);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, chart);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, progress);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, command);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, reason);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, memory);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, save_stop_button);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, preview);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, preview_expander);
  gtk_widget_class_bind_template_child (widget_class, HnTrainPage, dataset_picker);
  gtk_widget_class_install_action (widget_class, "page.start", NULL, start_action);
  gtk_widget_class_install_action (widget_class, "page.stop", NULL, stop_action);
  gtk_widget_class_install_action (widget_class, "page.save-stop", NULL, stop_action);
  gtk_widget_class_install_action (widget_class, "page.export-model", NULL, export_model_action);
  gtk_widget_class_install_action (widget_class, "page.export-png", NULL, export_action);
  gtk_widget_class_install_action (widget_class, "page.export-csv", NULL, export_action);
}

static void
hn_train_page_init (HnTrainPage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->controller = hn_job_controller_new ();
  g_signal_connect (self->controller, "event", G_CALLBACK (on_event), self);
  g_signal_connect (self->controller, "started", G_CALLBACK (on_started), self);
  g_signal_connect (self->controller, "finished", G_CALLBACK (on_finished), self);
  g_object_bind_property (self->log_toggle, "active", self->chart, "log-scale", G_BINDING_SYNC_CREATE);
  g_signal_connect_swapped (self->memory, "changed", G_CALLBACK (update_state), self);
  g_signal_connect (self->mode_train, "toggled", G_CALLBACK (on_mode_toggled), self);
  g_signal_connect (self->mode_finetune, "toggled", G_CALLBACK (on_mode_toggled), self);
  GtkWidget *gs[9];
  for (GtkWidget **g = groups (self, gs); *g; g++)
    g_signal_connect (*g, "problems-changed", G_CALLBACK (on_problems_changed), self);
  /* a dataset just downloaded can be previewed */
  g_signal_connect_swapped (hn_dataset_picker_get_pull_controller (HN_DATASET_PICKER (self->dataset_picker)),
                            "finished", G_CALLBACK (hn_data_preview_refresh), self->preview);
}

GtkWidget *
hn_train_page_new (const char *kind, const char *alt_kind)
{
  return g_object_new (HN_TYPE_TRAIN_PAGE, "kind", kind, "alt-kind", alt_kind, NULL);
}
