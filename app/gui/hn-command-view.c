#include "hn-command-view.h"

#include <glib/gi18n.h>

struct _HnCommandView
{
  GtkWidget parent_instance;
  GtkWidget *label;
  GtkWidget *copy;
  HnJobSpec *spec;
};

G_DEFINE_FINAL_TYPE (HnCommandView, hn_command_view, GTK_TYPE_WIDGET)

static void
refresh (HnCommandView *self)
{
  g_autofree char *line = self->spec ? hn_job_spec_to_command_line (self->spec, HN_ARGV_WITH_PROGRAM) : g_strdup ("");
  gtk_label_set_text (GTK_LABEL (self->label), line);
}

static void
on_changed (HnJobSpec *spec, const char *name, HnCommandView *self)
{
  refresh (self);
}

void
hn_command_view_set_spec (HnCommandView *self, HnJobSpec *spec)
{
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  g_set_object (&self->spec, spec);
  if (spec)
    g_signal_connect (spec, "changed", G_CALLBACK (on_changed), self);
  refresh (self);
}

const char *
hn_command_view_get_text (HnCommandView *self)
{
  return gtk_label_get_text (GTK_LABEL (self->label));
}

static void
on_copy (GtkButton *button, HnCommandView *self)
{
  gdk_clipboard_set_text (gtk_widget_get_clipboard (GTK_WIDGET (self)), hn_command_view_get_text (self));
  gtk_widget_activate_action (GTK_WIDGET (self), "win.show-toast", "s", _("Command copied"));
}

static void
hn_command_view_dispose (GObject *object)
{
  HnCommandView *self = HN_COMMAND_VIEW (object);
  hn_command_view_set_spec (self, NULL);
  g_clear_pointer (&self->label, gtk_widget_unparent);
  g_clear_pointer (&self->copy, gtk_widget_unparent);
  G_OBJECT_CLASS (hn_command_view_parent_class)->dispose (object);
}

static void
hn_command_view_class_init (HnCommandViewClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = hn_command_view_dispose;
  gtk_widget_class_set_layout_manager_type (GTK_WIDGET_CLASS (klass), GTK_TYPE_BOX_LAYOUT);
  gtk_widget_class_set_css_name (GTK_WIDGET_CLASS (klass), "commandview");
}

static void
hn_command_view_init (HnCommandView *self)
{
  gtk_box_layout_set_spacing (GTK_BOX_LAYOUT (gtk_widget_get_layout_manager (GTK_WIDGET (self))), 6);
  self->label = gtk_label_new (NULL);
  gtk_label_set_selectable (GTK_LABEL (self->label), TRUE);
  gtk_label_set_wrap (GTK_LABEL (self->label), TRUE);
  gtk_label_set_wrap_mode (GTK_LABEL (self->label), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_xalign (GTK_LABEL (self->label), 0);
  gtk_widget_set_hexpand (self->label, TRUE);
  gtk_widget_add_css_class (self->label, "monospace");
  gtk_widget_add_css_class (self->label, "command-line");
  gtk_widget_set_parent (self->label, GTK_WIDGET (self));
  gtk_accessible_update_property (GTK_ACCESSIBLE (self->label), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  _("Command line for this job"), -1);
  self->copy = gtk_button_new_from_icon_name ("edit-copy-symbolic");
  gtk_widget_set_valign (self->copy, GTK_ALIGN_START);
  gtk_widget_add_css_class (self->copy, "flat");
  gtk_widget_set_tooltip_text (self->copy, _("Copy the command"));
  gtk_accessible_update_property (GTK_ACCESSIBLE (self->copy), GTK_ACCESSIBLE_PROPERTY_LABEL, _("Copy the command"), -1);
  g_signal_connect (self->copy, "clicked", G_CALLBACK (on_copy), self);
  gtk_widget_set_parent (self->copy, GTK_WIDGET (self));
}
