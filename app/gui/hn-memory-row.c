#include "hn-memory-row.h"

#include <glib/gi18n.h>

#include "jobs/memory-estimate.h"
#include "vk/hn-vk.h"

struct _HnMemoryRow
{
  GtkBox parent_instance;
  GtkWidget *icon, *label, *override;
  HnJobSpec *spec;
  HnVkContext *ctx; /* the device of the spec's --device-index, opened on first use */
  int ctx_index;
  guint timeout_id;
  gboolean exceeds;
};

enum { SIGNAL_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (HnMemoryRow, hn_memory_row, GTK_TYPE_BOX)

static HnVkContext *
device (HnMemoryRow *self, int index)
{
  if (!self->ctx || self->ctx_index != index)
    {
      g_clear_pointer (&self->ctx, hn_vk_context_unref);
      self->ctx = index < 0 ? hn_vk_context_get_default (NULL) : hn_vk_context_new (index, NULL);
      self->ctx_index = index;
    }
  return self->ctx;
}

void
hn_memory_row_refresh (HnMemoryRow *self)
{
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  HnMemoryEstimate e = { 0 };
  g_autoptr (GError) error = NULL;
  gboolean was = self->exceeds;
  g_autofree char *text = NULL, *tip = NULL;
  self->exceeds = FALSE;
  if (self->spec && hn_job_spec_get_string (self->spec, "model-path"))
    {
      HnVkContext *ctx = device (self, (int) hn_job_spec_get_int (self->spec, "device-index"));
      if (hn_memory_estimate_for_spec (self->spec, ctx, &e, &error))
        {
          self->exceeds = hn_memory_estimate_exceeds (&e);
          g_autofree char *summary = hn_memory_estimate_summary (&e);
          text = self->exceeds ? g_strdup_printf (_("%s. It may not fit: %s."), summary,
                                                  _(hn_memory_estimate_advice (e.workload)))
                               : g_steal_pointer (&summary);
          tip = hn_memory_estimate_to_text (&e);
          hn_memory_estimate_clear (&e);
        }
      else
        text = g_strdup_printf (_("No memory estimate: %s"), error->message);
    }
  gtk_label_set_text (GTK_LABEL (self->label), text ? text : "");
  gtk_widget_set_tooltip_text (self->label, tip);
  gtk_widget_set_visible (GTK_WIDGET (self), text != NULL);
  gtk_widget_set_visible (self->icon, self->exceeds);
  gtk_widget_set_visible (self->override, self->exceeds);
  if (self->exceeds)
    gtk_widget_add_css_class (self->label, "warning");
  else
    gtk_widget_remove_css_class (self->label, "warning");
  if (was != self->exceeds && !self->exceeds)
    gtk_check_button_set_active (GTK_CHECK_BUTTON (self->override), FALSE);
  g_signal_emit (self, signals[SIGNAL_CHANGED], 0);
}

static gboolean
on_timeout (gpointer data)
{
  HnMemoryRow *self = data;
  self->timeout_id = 0;
  hn_memory_row_refresh (self);
  return G_SOURCE_REMOVE;
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnMemoryRow *self)
{
  /* typing a path or a number changes the spec per keystroke: wait for a pause */
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  self->timeout_id = g_timeout_add (250, on_timeout, self);
}

void
hn_memory_row_set_spec (HnMemoryRow *self, HnJobSpec *spec)
{
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  g_set_object (&self->spec, spec);
  if (spec)
    g_signal_connect (spec, "changed", G_CALLBACK (on_spec_changed), self);
  hn_memory_row_refresh (self);
}

const char *
hn_memory_row_get_text (HnMemoryRow *self)
{
  return gtk_label_get_text (GTK_LABEL (self->label));
}

gboolean
hn_memory_row_get_exceeds (HnMemoryRow *self)
{
  return self->exceeds;
}

gboolean
hn_memory_row_get_needs_override (HnMemoryRow *self)
{
  return self->exceeds && !gtk_check_button_get_active (GTK_CHECK_BUTTON (self->override));
}

void
hn_memory_row_set_override (HnMemoryRow *self, gboolean start_anyway)
{
  gtk_check_button_set_active (GTK_CHECK_BUTTON (self->override), start_anyway);
}

char *
hn_memory_row_dup_problem (HnMemoryRow *self)
{
  return hn_memory_row_get_needs_override (self)
           ? g_strdup (_("The job may not fit in device memory: tick “Start anyway” to try it"))
           : NULL;
}

static void
on_override_toggled (GtkCheckButton *button, HnMemoryRow *self)
{
  g_signal_emit (self, signals[SIGNAL_CHANGED], 0);
}

static void
hn_memory_row_dispose (GObject *object)
{
  HnMemoryRow *self = HN_MEMORY_ROW (object);
  g_clear_handle_id (&self->timeout_id, g_source_remove);
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  g_clear_object (&self->spec);
  g_clear_pointer (&self->ctx, hn_vk_context_unref);
  G_OBJECT_CLASS (hn_memory_row_parent_class)->dispose (object);
}

static void
hn_memory_row_class_init (HnMemoryRowClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = hn_memory_row_dispose;
  signals[SIGNAL_CHANGED] = g_signal_new ("changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                          NULL, G_TYPE_NONE, 0);
}

static void
hn_memory_row_init (HnMemoryRow *self)
{
  gtk_orientable_set_orientation (GTK_ORIENTABLE (self), GTK_ORIENTATION_HORIZONTAL);
  gtk_box_set_spacing (GTK_BOX (self), 8);
  self->icon = gtk_image_new_from_icon_name ("dialog-warning-symbolic");
  gtk_widget_add_css_class (self->icon, "warning");
  self->label = gtk_label_new (NULL);
  gtk_label_set_wrap (GTK_LABEL (self->label), TRUE);
  gtk_label_set_xalign (GTK_LABEL (self->label), 0);
  gtk_widget_set_hexpand (self->label, TRUE);
  gtk_widget_add_css_class (self->label, "caption");
  self->override = gtk_check_button_new_with_mnemonic (_("Start _anyway"));
  gtk_widget_set_tooltip_text (self->override, _("The estimate can be wrong: try the job even so"));
  g_signal_connect (self->override, "toggled", G_CALLBACK (on_override_toggled), self);
  gtk_box_append (GTK_BOX (self), self->icon);
  gtk_box_append (GTK_BOX (self), self->label);
  gtk_box_append (GTK_BOX (self), self->override);
  self->ctx_index = -2;
}

GtkWidget *
hn_memory_row_new (void)
{
  return g_object_new (HN_TYPE_MEMORY_ROW, NULL);
}
