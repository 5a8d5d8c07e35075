#include "hn-application.h"

#include <glib/gi18n.h>

struct _HnApplication
{
  AdwApplication parent_instance;
};

G_DEFINE_FINAL_TYPE (HnApplication, hn_application, ADW_TYPE_APPLICATION)

static void
hn_application_activate (GApplication *app)
{
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (app));
  if (!win)
    {
      win = GTK_WINDOW (adw_application_window_new (GTK_APPLICATION (app)));
      gtk_window_set_title (win, _("Hierarchos Native"));
      gtk_window_set_default_size (win, 1100, 760);
      GtkWidget *box = gtk_box_new (GTK_ORIENTATION_VERTICAL, 0);
      gtk_box_append (GTK_BOX (box), adw_header_bar_new ());
      GtkWidget *status = adw_status_page_new ();
      adw_status_page_set_title (ADW_STATUS_PAGE (status), _("Hierarchos Native"));
      gtk_widget_set_vexpand (status, TRUE);
      gtk_box_append (GTK_BOX (box), status);
      adw_application_window_set_content (ADW_APPLICATION_WINDOW (win), box);
    }
  gtk_window_present (win);
}

static void
hn_application_class_init (HnApplicationClass *klass)
{
  G_APPLICATION_CLASS (klass)->activate = hn_application_activate;
}

static void
hn_application_init (HnApplication *self)
{
}

HnApplication *
hn_application_new (void)
{
  return g_object_new (HN_TYPE_APPLICATION, "application-id", HN_APP_ID,
                       "flags", G_APPLICATION_DEFAULT_FLAGS, NULL);
}
