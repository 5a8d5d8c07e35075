#include "hn-export-dialog.h"
#include "hn-command-view.h"
#include "hn-option-group.h"
#include "train/gguf-export.h"

#include <glib/gi18n.h>

struct _HnExportDialog
{
  AdwMessageDialog parent_instance;
  HnJobSpec *gguf_spec, *merge_spec;
  GtkWidget *format_row, *gguf_group, *merge_group, *command, *problem_label, *size_label;
  char *name, *out_folder;
  char *auto_out;           /* the default --out, followed while the user leaves it */
};

G_DEFINE_FINAL_TYPE (HnExportDialog, hn_export_dialog, ADW_TYPE_MESSAGE_DIALOG)

static char *
default_gguf (HnExportDialog *self)
{
  const char *type = hn_job_spec_get_string (self->gguf_spec, "outtype");
  gboolean adapter_only = hn_job_spec_get_bool (self->gguf_spec, "adapter-only");
  g_autofree char *file = adapter_only ? g_strdup_printf ("%s-lora.gguf", self->name)
                                       : g_strdup_printf ("%s-%s.gguf", self->name, type ? type : "f16");
  return g_build_filename (self->out_folder, file, NULL);
}

char *
hn_export_dialog_dup_problem (HnExportDialog *self)
{
  gboolean merged = hn_export_dialog_get_merged (self);
  char *p = hn_option_group_dup_problem (HN_OPTION_GROUP (merged ? self->merge_group : self->gguf_group));
  if (p)
    return p;
  HnJobSpec *spec = hn_export_dialog_get_spec (self);
  if (merged && !hn_job_spec_get_string (spec, "lora-adapter-path"))
    return g_strdup (_("A merged model needs a LoRA adapter to merge in"));
  if (!merged && hn_job_spec_get_bool (spec, "adapter-only") && !hn_job_spec_get_string (spec, "lora-adapter-path"))
    return g_strdup (_("Adapter only needs a LoRA adapter"));
  g_autoptr (GError) error = NULL;
  if (!hn_job_spec_validate (spec, &error))
    return g_strdup (error->message);
  return NULL;
}

/* "About 1.2 GB" for the GGUF of the chosen weight type (hn_gguf_export_estimate); empty for the
 * adapter alone and the merged folder (the model's own size). */
static void
update_size (HnExportDialog *self, gboolean merged)
{
  const char *type = hn_job_spec_get_string (self->gguf_spec, "outtype");
  const char *model = hn_job_spec_get_string (self->gguf_spec, "model-path");
  HnGgufOutType t;
  gint64 bytes = -1;
  if (!merged && !hn_job_spec_get_bool (self->gguf_spec, "adapter-only") && model &&
      hn_gguf_outtype_from_string (type ? type : "f16", &t, NULL))
    bytes = hn_gguf_export_estimate (model, t, NULL);
  g_autofree char *size = bytes >= 0 ? g_format_size ((guint64) bytes) : NULL;
  g_autofree char *text = size ? g_strdup_printf (_("Estimated size: about %s"), size) : NULL;
  gtk_label_set_text (GTK_LABEL (self->size_label), text ? text : "");
  gtk_widget_set_visible (self->size_label, text != NULL);
}

const char *
hn_export_dialog_get_size_text (HnExportDialog *self)
{
  return gtk_label_get_text (GTK_LABEL (self->size_label));
}

static void
update (HnExportDialog *self)
{
  gboolean merged = hn_export_dialog_get_merged (self);
  update_size (self, merged);
  gtk_widget_set_visible (self->gguf_group, !merged);
  gtk_widget_set_visible (self->merge_group, merged);
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), hn_export_dialog_get_spec (self));
  g_autofree char *problem = hn_export_dialog_dup_problem (self);
  gtk_label_set_text (GTK_LABEL (self->problem_label), problem ? problem : "");
  gtk_widget_set_visible (self->problem_label, problem != NULL);
  adw_message_dialog_set_response_enabled (ADW_MESSAGE_DIALOG (self), "export", problem == NULL);
}

static void
on_gguf_changed (HnJobSpec *spec, const char *name, HnExportDialog *self)
{
  /* the default file name follows the weight type until the user names one */
  if ((g_strcmp0 (name, "outtype") == 0 || g_strcmp0 (name, "adapter-only") == 0) &&
      g_strcmp0 (hn_job_spec_get_string (spec, "out"), self->auto_out) == 0)
    {
      g_free (self->auto_out);
      self->auto_out = default_gguf (self);
      hn_job_spec_set_string (spec, "out", self->auto_out);
    }
  update (self);
}

static void
on_merge_changed (HnJobSpec *spec, const char *name, HnExportDialog *self)
{
  update (self);
}

static void
on_format (AdwComboRow *row, GParamSpec *pspec, HnExportDialog *self)
{
  update (self);
}

void
hn_export_dialog_set_merged (HnExportDialog *self, gboolean merged)
{
  adw_combo_row_set_selected (ADW_COMBO_ROW (self->format_row), merged ? 1 : 0);
}

gboolean
hn_export_dialog_get_merged (HnExportDialog *self)
{
  return adw_combo_row_get_selected (ADW_COMBO_ROW (self->format_row)) == 1;
}

HnJobSpec *
hn_export_dialog_get_spec (HnExportDialog *self)
{
  return hn_export_dialog_get_merged (self) ? self->merge_spec : self->gguf_spec;
}

const char *
hn_export_dialog_get_command_text (HnExportDialog *self)
{
  return hn_command_view_get_text (HN_COMMAND_VIEW (self->command));
}

static void
hn_export_dialog_dispose (GObject *object)
{
  HnExportDialog *self = HN_EXPORT_DIALOG (object);
  if (self->gguf_spec)
    g_signal_handlers_disconnect_by_data (self->gguf_spec, self);
  if (self->merge_spec)
    g_signal_handlers_disconnect_by_data (self->merge_spec, self);
  g_clear_object (&self->gguf_spec);
  g_clear_object (&self->merge_spec);
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_EXPORT_DIALOG);
  G_OBJECT_CLASS (hn_export_dialog_parent_class)->dispose (object);
}

static void
hn_export_dialog_finalize (GObject *object)
{
  HnExportDialog *self = HN_EXPORT_DIALOG (object);
  g_free (self->name);
  g_free (self->out_folder);
  g_free (self->auto_out);
  G_OBJECT_CLASS (hn_export_dialog_parent_class)->finalize (object);
}

static void
hn_export_dialog_class_init (HnExportDialogClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  G_OBJECT_CLASS (klass)->dispose = hn_export_dialog_dispose;
  G_OBJECT_CLASS (klass)->finalize = hn_export_dialog_finalize;
  g_type_ensure (HN_TYPE_OPTION_GROUP);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-export-dialog.ui");
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, format_row);
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, gguf_group);
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, merge_group);
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, problem_label);
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, size_label);
  gtk_widget_class_bind_template_child (widget_class, HnExportDialog, command);
}

static void
hn_export_dialog_init (HnExportDialog *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
}

GtkWidget *
hn_export_dialog_new (GtkWindow *parent, const char *model_dir, const char *name, const char *adapter,
                      const char *out_folder)
{
  g_autofree char *heading = g_strdup_printf (_("Export %s"), name);
  HnExportDialog *self = g_object_new (HN_TYPE_EXPORT_DIALOG, "transient-for", parent, "heading", heading, NULL);
  self->name = g_strdup (name);
  self->out_folder = g_strdup (out_folder);
  self->gguf_spec = hn_job_spec_new ("export-gguf", NULL);
  self->merge_spec = hn_job_spec_new ("merge-lora", NULL);
  for (HnJobSpec **s = (HnJobSpec *[]) { self->gguf_spec, self->merge_spec, NULL }; *s; s++)
    {
      hn_job_spec_set_string (*s, "model-path", model_dir);
      hn_job_spec_set_string (*s, "lora-adapter-path", adapter);
    }
  self->auto_out = default_gguf (self);
  hn_job_spec_set_string (self->gguf_spec, "out", self->auto_out);
  g_autofree char *merged_name = g_strdup_printf ("%s-merged", name);
  g_autofree char *merged_dir = g_build_filename (out_folder, merged_name, NULL);
  hn_job_spec_set_string (self->merge_spec, "out-dir", merged_dir);

  hn_option_group_set_spec (HN_OPTION_GROUP (self->gguf_group), self->gguf_spec);
  hn_option_group_set_spec (HN_OPTION_GROUP (self->merge_group), self->merge_spec);
  g_signal_connect (self->gguf_spec, "changed", G_CALLBACK (on_gguf_changed), self);
  g_signal_connect (self->merge_spec, "changed", G_CALLBACK (on_merge_changed), self);
  g_signal_connect (self->format_row, "notify::selected", G_CALLBACK (on_format), self);
  update (self);
  return GTK_WIDGET (self);
}
