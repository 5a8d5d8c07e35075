#include "hn-application.h"
#include "hn-page-util.h"
#include "hn-window.h"
#include "jobs/job.h"

#include <glib/gi18n.h>
#include <locale.h>

struct _HnApplication
{
  AdwApplication parent_instance;
};

G_DEFINE_FINAL_TYPE (HnApplication, hn_application, ADW_TYPE_APPLICATION)

void
hn_gui_i18n_init (void)
{
  setlocale (LC_ALL, "");
  bindtextdomain (GETTEXT_PACKAGE, LOCALEDIR);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  textdomain (GETTEXT_PACKAGE);
}

static void
hn_application_activate (GApplication *app)
{
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (app));
  if (!win)
    win = GTK_WINDOW (hn_window_new (GTK_APPLICATION (app)));
  gtk_window_present (win);
}

static gboolean
any_window_running (GApplication *app)
{
  for (GList *l = gtk_application_get_windows (GTK_APPLICATION (app)); l; l = l->next)
    if (HN_IS_WINDOW (l->data) && hn_window_has_running_jobs (l->data))
      return TRUE;
  return FALSE;
}

static void
quit_now (GApplication *app)
{
  /* closing a window removes it from the application's list: walk a copy */
  g_autoptr (GList) windows = g_list_copy (gtk_application_get_windows (GTK_APPLICATION (app)));
  for (GList *l = windows; l; l = l->next)
    {
      if (HN_IS_WINDOW (l->data))
        hn_window_set_quitting (l->data);
      gtk_window_close (l->data); /* saves window state; pages stop their jobs on dispose */
    }
  g_application_quit (app);
}

static gboolean
quit_when_saved (gpointer app)
{
  if (any_window_running (app))
    return G_SOURCE_CONTINUE;
  quit_now (app);
  g_application_release (app);
  return G_SOURCE_REMOVE;
}

/* Quit saves first: running training writes a checkpoint after its current
 * step (resumable from the Jobs page), then the app goes. Quit again while
 * it saves to leave at once. */
static void
quit_action (GSimpleAction *action, GVariant *param, gpointer app)
{
  static guint waiting;
  if (waiting || !any_window_running (app))
    {
      if (waiting)
        g_source_remove (waiting), g_application_release (app);
      waiting = 0;
      quit_now (app);
      return;
    }
  for (GList *l = gtk_application_get_windows (GTK_APPLICATION (app)); l; l = l->next)
    if (HN_IS_WINDOW (l->data))
      {
        hn_window_save_and_stop_jobs (l->data);
        hn_window_toast (l->data, _("Saving a checkpoint, then quitting…"));
      }
  g_application_hold (app);
  waiting = g_timeout_add (100, quit_when_saved, app);
}

static void
show_window_action (GSimpleAction *action, GVariant *param, gpointer app)
{
  GtkWindow *win = gtk_application_get_active_window (GTK_APPLICATION (app));
  if (win)
    gtk_window_present (win);
}

static void
about_action (GSimpleAction *action, GVariant *param, gpointer app)
{
  static const char *const developers[] = { "The Hierarchos Native contributors", NULL };
  GtkWindow *parent = gtk_application_get_active_window (GTK_APPLICATION (app));
  GtkWidget *about = g_object_new (ADW_TYPE_ABOUT_WINDOW,
                                   "transient-for", parent,
                                   "application-name", _("Hierarchos Native"),
                                   "application-icon", HN_APP_ID,
                                   "version", HN_VERSION,
                                   "developers", developers,
                                   "license-type", GTK_LICENSE_MIT_X11,
                                   "comments", _("Train, fine-tune and run language models on any Vulkan GPU"),
                                   "translator-credits", _("translator-credits"),
                                   NULL);
  gtk_window_present (GTK_WINDOW (about));
}

static void
preferences_action (GSimpleAction *action, GVariant *param, gpointer app)
{
  GtkWindow *parent = gtk_application_get_active_window (GTK_APPLICATION (app));
  GtkWidget *prefs = adw_preferences_window_new ();
  gtk_window_set_transient_for (GTK_WINDOW (prefs), parent);
  gtk_window_set_modal (GTK_WINDOW (prefs), TRUE);
  AdwPreferencesPage *page = ADW_PREFERENCES_PAGE (adw_preferences_page_new ());
  AdwPreferencesGroup *group = ADW_PREFERENCES_GROUP (adw_preferences_group_new ());
  adw_preferences_group_set_title (group, _("Jobs"));
  GSettings *s = hn_app_settings ();

  GtkWidget *notify_row = adw_action_row_new ();
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (notify_row), _("Notify when a job ends"));
  adw_action_row_set_subtitle (ADW_ACTION_ROW (notify_row), _("A desktop notification when the window is not focused"));
  GtkWidget *sw = gtk_switch_new ();
  gtk_widget_set_valign (sw, GTK_ALIGN_CENTER);
  adw_action_row_add_suffix (ADW_ACTION_ROW (notify_row), sw);
  adw_action_row_set_activatable_widget (ADW_ACTION_ROW (notify_row), sw);
  adw_preferences_group_add (group, notify_row);

  GtkWidget *out_row = adw_entry_row_new ();
  adw_preferences_row_set_title (ADW_PREFERENCES_ROW (out_row), _("Folder for new runs"));
  adw_preferences_group_add (group, out_row);
  if (s)
    {
      g_settings_bind (s, "notify-on-finish", sw, "active", G_SETTINGS_BIND_DEFAULT);
      g_settings_bind (s, "last-output-dir", out_row, "text", G_SETTINGS_BIND_DEFAULT);
    }
  else
    gtk_widget_set_sensitive (GTK_WIDGET (group), FALSE);
  adw_preferences_page_add (page, group);
  adw_preferences_window_add (ADW_PREFERENCES_WINDOW (prefs), page);
  gtk_window_present (GTK_WINDOW (prefs));
}

static void
hn_application_startup (GApplication *app)
{
  G_APPLICATION_CLASS (hn_application_parent_class)->startup (app);
  hn_job_register_builtin_kinds ();
  static const GActionEntry actions[] = {
    { "quit", quit_action, NULL, NULL, NULL, { 0 } },
    { "show-window", show_window_action, NULL, NULL, NULL, { 0 } },
    { "about", about_action, NULL, NULL, NULL, { 0 } },
    { "preferences", preferences_action, NULL, NULL, NULL, { 0 } },
  };
  g_action_map_add_action_entries (G_ACTION_MAP (app), actions, G_N_ELEMENTS (actions), app);
  static const char *const quit_accels[] = { "<Control>q", NULL };
  static const char *const prefs_accels[] = { "<Control>comma", NULL };
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.quit", quit_accels);
  gtk_application_set_accels_for_action (GTK_APPLICATION (app), "app.preferences", prefs_accels);
  GtkCssProvider *css = gtk_css_provider_new ();
  gtk_css_provider_load_from_resource (css, "/io/github/hierarchos/Native/style.css");
  gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                              GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  g_object_unref (css);
}

void
hn_application_end_jobs (void)
{
  hn_job_cancel_all ();
  if (!hn_job_wait_all (HN_END_JOBS_TIMEOUT_MS))
    g_warning ("a job did not stop within %u s of being cancelled; exiting under it", HN_END_JOBS_TIMEOUT_MS / 1000);
}

static void
hn_application_shutdown (GApplication *app)
{
  /* the windows are gone and their pages cancelled their jobs: their
   * threads finish before the process exits */
  hn_application_end_jobs ();
  G_APPLICATION_CLASS (hn_application_parent_class)->shutdown (app);
}

static void
hn_application_class_init (HnApplicationClass *klass)
{
  G_APPLICATION_CLASS (klass)->activate = hn_application_activate;
  G_APPLICATION_CLASS (klass)->startup = hn_application_startup;
  G_APPLICATION_CLASS (klass)->shutdown = hn_application_shutdown;
}

static void
hn_application_init (HnApplication *self)
{
}

HnApplication *
hn_application_new (void)
{
  return g_object_new (HN_TYPE_APPLICATION, "application-id", HN_APP_ID,
                       "flags", G_APPLICATION_DEFAULT_FLAGS,
                       "resource-base-path", "/io/github/hierarchos/Native", NULL);
}
