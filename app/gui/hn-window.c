#include "hn-window.h"
#include "hn-chat-page.h"
#include "hn-compare-page.h"
#include "hn-jobs-page.h"
#include "hn-models-page.h"
#include "base/hn-error.h"
#include "hn-devices.h"
#include "hn-generate-page.h"
#include "hn-job-record.h"
#include "hn-page-util.h"
#include "hn-train-page.h"

#include <glib/gi18n.h>

struct _HnWindow
{
  AdwApplicationWindow parent_instance;
  GtkWidget *switcher_title;
  GtkWidget *banner;
  GtkWidget *banner_label;
  GtkWidget *toasts;
  GtkWidget *stack;
  GtkWidget *generate_page, *finetune_page, *train_page, *hierarchos_page, *chat_page, *models_page;
  HnDevices *devices;
  gboolean held;      /* the app is held while the window hides over running jobs */
  gboolean quitting;
};

G_DEFINE_FINAL_TYPE (HnWindow, hn_window, ADW_TYPE_APPLICATION_WINDOW)

void
hn_window_toast (HnWindow *self, const char *message)
{
  AdwToast *toast = adw_toast_new (message);
  adw_toast_set_timeout (toast, 5);
  adw_toast_overlay_add_toast (ADW_TOAST_OVERLAY (self->toasts), toast);
}

static void
toast_action (GtkWidget *widget, const char *action, GVariant *param)
{
  hn_window_toast (HN_WINDOW (widget), g_variant_get_string (param, NULL));
}

GtkWidget *
hn_window_get_page (HnWindow *self, const char *name)
{
  return adw_view_stack_get_child_by_name (ADW_VIEW_STACK (self->stack), name);
}

void
hn_window_show_page (HnWindow *self, const char *name)
{
  adw_view_stack_set_visible_child_name (ADW_VIEW_STACK (self->stack), name);
}

static void
show_page_action (GtkWidget *widget, const char *action, GVariant *param)
{
  hn_window_show_page (HN_WINDOW (widget), g_variant_get_string (param, NULL));
}

/* Start/Stop shortcuts act on the visible page. */
static void
page_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnWindow *self = HN_WINDOW (widget);
  GtkWidget *page = adw_view_stack_get_visible_child (ADW_VIEW_STACK (self->stack));
  gtk_widget_activate_action (page, g_str_equal (action, "win.start-job") ? "page.start" : "page.stop", NULL);
}

/* ---- software device banner -------------------------------------------- */

gboolean
hn_window_get_banner_revealed (HnWindow *self)
{
  return gtk_revealer_get_reveal_child (GTK_REVEALER (self->banner));
}

static void
update_banner (HnWindow *self)
{
  if (!hn_devices_is_ready (self->devices))
    return;
  const char *msg = NULL;
  if (hn_devices_get_entries (self->devices)->len == 0)
    msg = _("No Vulkan device found: jobs cannot run until a Vulkan driver is installed");
  else if (hn_devices_only_software (self->devices))
    msg = _("Running on the CPU: no GPU driver found. Jobs will be slow.");
  if (msg)
    gtk_label_set_text (GTK_LABEL (self->banner_label), msg);
  gtk_revealer_set_reveal_child (GTK_REVEALER (self->banner), msg != NULL);
}

static void
on_devices_ready (HnDevices *devices, GParamSpec *pspec, HnWindow *self)
{
  update_banner (self);
}

static void
on_details_copy (HnWindow *self)
{
  gtk_widget_activate_action (GTK_WIDGET (self), "win.copy-diagnostics", NULL);
}

static void
device_details_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnWindow *self = HN_WINDOW (widget);
  GString *s = g_string_new (NULL);
  GPtrArray *entries = hn_devices_get_entries (self->devices);
  if (hn_devices_get_error (self->devices))
    g_string_append_printf (s, "%s\n\n", hn_devices_get_error (self->devices));
  for (guint i = 0; i < entries->len; i++)
    {
      g_autofree char *d = hn_device_entry_describe (g_ptr_array_index (entries, i));
      g_string_append_printf (s, "%u: %s\n", i, d);
    }
  g_string_append (s, _("\nThe only Vulkan device is a software renderer (such as lavapipe), so every job runs "
                        "on the processor. Install the Vulkan driver of your GPU (Mesa's RADV or ANV for AMD "
                        "and Intel, the NVIDIA driver for NVIDIA) and restart the app. "
                        "`hierarchos-native-cli doctor` prints a full report."));
  GtkWidget *dialog = adw_message_dialog_new (GTK_WINDOW (self), _("Vulkan devices"), s->str);
  adw_message_dialog_add_response (ADW_MESSAGE_DIALOG (dialog), "copy", _("Copy _Diagnostics"));
  adw_message_dialog_add_response (ADW_MESSAGE_DIALOG (dialog), "close", _("_Close"));
  adw_message_dialog_set_default_response (ADW_MESSAGE_DIALOG (dialog), "close");
  g_signal_connect_object (dialog, "response::copy", G_CALLBACK (on_details_copy), self, G_CONNECT_SWAPPED);
  gtk_window_present (GTK_WINDOW (dialog));
  g_string_free (s, TRUE);
}

char *
hn_window_dup_diagnostics (HnWindow *self)
{
  GString *s = g_string_new (NULL);
  g_string_append_printf (s, "Hierarchos Native %s\n", HN_VERSION);
  g_string_append_printf (s, "GTK %u.%u.%u, libadwaita %u.%u.%u, GLib %u.%u.%u\n", gtk_get_major_version (),
                          gtk_get_minor_version (), gtk_get_micro_version (), adw_get_major_version (),
                          adw_get_minor_version (), adw_get_micro_version (), glib_major_version, glib_minor_version,
                          glib_micro_version);
  g_string_append (s, "Vulkan devices:\n");
  if (!hn_devices_is_ready (self->devices))
    g_string_append (s, "  (still detecting)\n");
  else if (hn_devices_get_error (self->devices))
    g_string_append_printf (s, "  none: %s\n", hn_devices_get_error (self->devices));
  GPtrArray *entries = hn_devices_get_entries (self->devices);
  for (guint i = 0; i < entries->len; i++)
    {
      const HnDeviceEntry *e = g_ptr_array_index (entries, i);
      g_autofree char *d = hn_device_entry_describe (e);
      g_string_append_printf (s, "  %d: %s [%s]\n", e->index, d, e->type);
    }
  GListModel *jobs = G_LIST_MODEL (hn_job_record_list ());
  for (guint i = 0; i < g_list_model_get_n_items (jobs); i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (jobs, i);
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_FAILED)
        {
          g_string_append_printf (s, "Last error: %s\n  %s\n", hn_job_record_get_summary (r),
                                  hn_job_record_get_command_line (r));
          break;
        }
    }
  return g_string_free (s, FALSE);
}

static void
copy_diagnostics_action (GtkWidget *widget, const char *action, GVariant *param)
{
  g_autofree char *text = hn_window_dup_diagnostics (HN_WINDOW (widget));
  gdk_clipboard_set_text (gtk_widget_get_clipboard (widget), text);
  hn_window_toast (HN_WINDOW (widget), _("Diagnostics copied"));
}

/* ---- window state ------------------------------------------------------ */

static HnJobController *
page_controller (GtkWidget *page)
{
  if (HN_IS_TRAIN_PAGE (page))
    return hn_train_page_get_controller (HN_TRAIN_PAGE (page));
  if (HN_IS_GENERATE_PAGE (page))
    return hn_generate_page_get_controller (HN_GENERATE_PAGE (page));
  if (HN_IS_CHAT_PAGE (page))
    return hn_chat_page_get_controller (HN_CHAT_PAGE (page));
  if (HN_IS_MODELS_PAGE (page))
    return hn_models_page_get_pull_controller (HN_MODELS_PAGE (page)); /* a download survives the window closing */
  return NULL;
}

gboolean
hn_window_has_running_jobs (HnWindow *self)
{
  GtkWidget *pages[] = { self->generate_page, self->finetune_page, self->train_page, self->hierarchos_page,
                         self->chat_page, self->models_page };
  for (guint i = 0; i < G_N_ELEMENTS (pages); i++)
    {
      HnJobController *c = page_controller (pages[i]);
      /* a chat waiting for the next message is not work worth keeping the app for */
      if (c && hn_job_controller_get_running (c) && pages[i] != self->chat_page)
        return TRUE;
    }
  return FALSE;
}

/* Hidden with jobs running: when the last one ends, the app may go. */
static void
on_background_job_done (HnJobController *c, GParamSpec *pspec, HnWindow *self)
{
  if (hn_window_has_running_jobs (self) || gtk_widget_get_visible (GTK_WIDGET (self)))
    return;
  GtkApplication *app = gtk_window_get_application (GTK_WINDOW (self));
  if (self->held && app)
    {
      self->held = FALSE;
      g_application_release (G_APPLICATION (app));
    }
  gtk_window_destroy (GTK_WINDOW (self));
}

static gboolean
hn_window_close_request (GtkWindow *window)
{
  HnWindow *self = HN_WINDOW (window);
  GSettings *s = hn_app_settings ();
  if (s)
    {
      int w, h;
      gtk_window_get_default_size (window, &w, &h);
      g_settings_set_int (s, "window-width", w);
      g_settings_set_int (s, "window-height", h);
      g_settings_set_boolean (s, "window-maximized", gtk_window_is_maximized (window));
      const char *page = adw_view_stack_get_visible_child_name (ADW_VIEW_STACK (self->stack));
      if (page)
        g_settings_set_string (s, "last-page", page);
    }
  /* Closing the window does not kill a training run: the window hides, the
   * job goes on, a notification says when it ends, and starting the app
   * again brings the window back. Quit (Ctrl+Q) stops the jobs. */
  GtkApplication *app = gtk_window_get_application (window);
  if (app && hn_window_has_running_jobs (self) && !self->quitting)
    {
      gtk_widget_set_visible (GTK_WIDGET (window), FALSE);
      /* the way back: this notification's action, or starting the app again */
      g_autoptr (GNotification) n = g_notification_new (_("Training continues in the background"));
      g_notification_set_body (n, _("The window is closed, the job goes on. Quit saves a checkpoint first."));
      g_notification_set_default_action (n, "app.show-window");
      g_notification_add_button (n, _("Show"), "app.show-window");
      g_application_send_notification (G_APPLICATION (app), "background", n);
      if (!self->held)
        {
          self->held = TRUE;
          g_application_hold (G_APPLICATION (app));
        }
      return TRUE;
    }
  return GTK_WINDOW_CLASS (hn_window_parent_class)->close_request (window);
}

void
hn_window_save_and_stop_jobs (HnWindow *self)
{
  GtkWidget *pages[] = { self->generate_page, self->finetune_page, self->train_page, self->hierarchos_page,
                         self->chat_page, self->models_page };
  for (guint i = 0; i < G_N_ELEMENTS (pages); i++)
    {
      HnJobController *c = page_controller (pages[i]);
      if (c && hn_job_controller_get_running (c))
        hn_job_controller_save_and_stop (c);
    }
}

void
hn_window_set_quitting (HnWindow *self)
{
  self->quitting = TRUE;
}

static void
hn_window_dispose (GObject *object)
{
  HnWindow *self = HN_WINDOW (object);
  if (self->held)
    {
      GtkApplication *app = gtk_window_get_application (GTK_WINDOW (self));
      self->held = FALSE;
      if (app)
        g_application_release (G_APPLICATION (app));
    }
  if (self->devices)
    g_signal_handlers_disconnect_by_data (self->devices, self);
  g_clear_object (&self->devices);
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_WINDOW);
  G_OBJECT_CLASS (hn_window_parent_class)->dispose (object);
}

static void
hn_window_class_init (HnWindowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->dispose = hn_window_dispose;
  GTK_WINDOW_CLASS (klass)->close_request = hn_window_close_request;

  g_type_ensure (HN_TYPE_GENERATE_PAGE);
  g_type_ensure (HN_TYPE_TRAIN_PAGE);
  g_type_ensure (HN_TYPE_CHAT_PAGE);
  g_type_ensure (HN_TYPE_MODELS_PAGE);
  g_type_ensure (HN_TYPE_COMPARE_PAGE);
  g_type_ensure (HN_TYPE_JOBS_PAGE);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-window.ui");
  gtk_widget_class_bind_template_child (widget_class, HnWindow, switcher_title);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, banner);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, banner_label);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, toasts);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, stack);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, generate_page);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, finetune_page);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, train_page);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, hierarchos_page);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, chat_page);
  gtk_widget_class_bind_template_child (widget_class, HnWindow, models_page);

  gtk_widget_class_install_action (widget_class, "win.show-toast", "s", toast_action);
  gtk_widget_class_install_action (widget_class, "win.show-page", "s", show_page_action);
  gtk_widget_class_install_action (widget_class, "win.start-job", NULL, page_action);
  gtk_widget_class_install_action (widget_class, "win.stop-job", NULL, page_action);
  gtk_widget_class_install_action (widget_class, "win.device-details", NULL, device_details_action);
  gtk_widget_class_install_action (widget_class, "win.copy-diagnostics", NULL, copy_diagnostics_action);

  static const char *const pages[] = { "generate", "finetune", "train", "hierarchos", "chat", "compare", "jobs" };
  for (guint i = 0; i < G_N_ELEMENTS (pages); i++)
    gtk_widget_class_add_binding_action (widget_class, GDK_KEY_1 + i, GDK_ALT_MASK, "win.show-page", "s", pages[i]);
  gtk_widget_class_add_binding_action (widget_class, GDK_KEY_Return, GDK_CONTROL_MASK, "win.start-job", NULL);
  gtk_widget_class_add_binding_action (widget_class, GDK_KEY_period, GDK_CONTROL_MASK, "win.stop-job", NULL);
}

static void
hn_window_init (HnWindow *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));

  GSettings *s = hn_app_settings ();
  if (s)
    {
      gtk_window_set_default_size (GTK_WINDOW (self), g_settings_get_int (s, "window-width"),
                                   g_settings_get_int (s, "window-height"));
      if (g_settings_get_boolean (s, "window-maximized"))
        gtk_window_maximize (GTK_WINDOW (self));
      g_autofree char *page = g_settings_get_string (s, "last-page");
      if (page && *page && hn_window_get_page (self, page))
        hn_window_show_page (self, page);
    }
  GtkWidget *pages[] = { self->generate_page, self->finetune_page, self->train_page, self->hierarchos_page,
                         self->chat_page, self->models_page };
  for (guint i = 0; i < G_N_ELEMENTS (pages); i++)
    g_signal_connect_object (page_controller (pages[i]), "notify::running", G_CALLBACK (on_background_job_done),
                             self, 0);
  self->devices = g_object_ref (hn_devices_get_default ());
  g_signal_connect (self->devices, "notify::ready", G_CALLBACK (on_devices_ready), self);
  update_banner (self);
}

HnWindow *
hn_window_new (GtkApplication *app)
{
  return g_object_new (HN_TYPE_WINDOW, "application", app, NULL);
}
