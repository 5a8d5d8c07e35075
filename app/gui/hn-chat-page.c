#include "hn-chat-page.h"
#include "hn-command-view.h"
#include "hn-option-group.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"

#include <glib/gi18n.h>

struct _HnChatPage
{
  AdwBin parent_instance;
  HnJobSpec *spec;
  HnJobController *controller;
  char *problem;
  GtkWidget *reply;       /* the assistant label being streamed into, or NULL */
  GString *reply_text;
  GString *last_reply;    /* the latest reply, kept after it ends */
  gboolean waiting;       /* a message was sent and its reply is not complete */

  GtkWidget *model_group, *sampling_group, *state_group, *run_group;
  GtkWidget *scroller, *messages, *entry, *reason, *progress, *command;
};

G_DEFINE_FINAL_TYPE (HnChatPage, hn_chat_page, ADW_TYPE_BIN)

static void
update_state (HnChatPage *self)
{
  GtkWidget *gs[] = { self->model_group, self->sampling_group, self->state_group, self->run_group, NULL };
  g_free (self->problem);
  self->problem = hn_page_start_problem (self->spec, gs);
  gboolean running = hn_job_controller_get_running (self->controller);
  /* while a conversation runs, its settings are fixed: Reset applies new ones */
  const char *shown = running ? "" : self->problem ? self->problem : "";
  gtk_label_set_text (GTK_LABEL (self->reason), shown);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.start", (running || !self->problem) && !self->waiting);
  gtk_widget_action_set_enabled (GTK_WIDGET (self), "page.stop", running && self->waiting);
}

static GtkWidget *
add_bubble (HnChatPage *self, gboolean from_user, const char *text)
{
  GtkWidget *label = hn_page_add_bubble (GTK_LIST_BOX (self->messages), from_user, text);
  GtkAdjustment *adj = gtk_scrolled_window_get_vadjustment (GTK_SCROLLED_WINDOW (self->scroller));
  gtk_adjustment_set_value (adj, gtk_adjustment_get_upper (adj));
  return label;
}

void
hn_chat_page_add_message (HnChatPage *self, gboolean from_user, const char *text)
{
  add_bubble (self, from_user, text);
}

static void
end_reply (HnChatPage *self)
{
  if (self->reply)
    g_string_assign (self->last_reply, self->reply_text->str);
  self->reply = NULL;
  g_string_truncate (self->reply_text, 0);
  self->waiting = FALSE;
  update_state (self);
}

static void
on_event (HnJobController *c, const HnJobEvent *e, HnChatPage *self)
{
  if (e->type == HN_JOB_EVENT_TOKEN && self->reply)
    {
      g_string_append (self->reply_text, e->token.text);
      /* a model may emit bytes that are not UTF-8 (yet): show U+FFFD */
      g_autofree char *valid = g_utf8_make_valid (self->reply_text->str, -1);
      gtk_label_set_text (GTK_LABEL (self->reply), valid);
    }
  else if (e->type == HN_JOB_EVENT_TURN_END)
    end_reply (self);
}

static void
on_finished (HnJobController *c, gboolean ok, const char *message, const char *output, HnChatPage *self)
{
  HnJob *job = hn_job_controller_get_job (c);
  gboolean cancelled = job && g_cancellable_is_cancelled (hn_job_get_cancellable (job));
  if (self->reply && self->reply_text->len == 0)
    gtk_label_set_text (GTK_LABEL (self->reply), cancelled ? _("(stopped)") : _("(no reply)"));
  end_reply (self);
  if (!ok && !cancelled)
    {
      g_autofree char *text = g_strdup_printf (_("Chat failed: %s"), message ? message : _("unknown error"));
      hn_page_toast (GTK_WIDGET (self), text);
    }
}

static void
send_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnChatPage *self = HN_CHAT_PAGE (widget);
  g_autofree char *text = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (self->entry))));
  if (!*text || self->waiting)
    return;
  if (!hn_job_controller_get_running (self->controller))
    {
      g_autoptr (GError) error = NULL;
      update_state (self);
      if (self->problem)
        return;
      hn_page_remember (self->spec);
      if (!hn_job_controller_start (self->controller, self->spec, &error))
        {
          hn_page_toast (widget, error->message);
          return;
        }
    }
  add_bubble (self, TRUE, text);
  self->reply = add_bubble (self, FALSE, "…");
  g_string_truncate (self->reply_text, 0);
  self->waiting = TRUE;
  hn_job_push_input (hn_job_controller_get_job (self->controller), text);
  gtk_editable_set_text (GTK_EDITABLE (self->entry), "");
  update_state (self);
}

void
hn_chat_page_send (HnChatPage *self, const char *text)
{
  gtk_editable_set_text (GTK_EDITABLE (self->entry), text);
  gtk_widget_activate_action (GTK_WIDGET (self), "page.start", NULL);
}

char *
hn_chat_page_dup_last_reply (HnChatPage *self)
{
  return g_utf8_make_valid (self->last_reply->str, -1);
}

static void
stop_action (GtkWidget *widget, const char *action, GVariant *param)
{
  hn_job_controller_stop (HN_CHAT_PAGE (widget)->controller);
}

static void
reset_action (GtkWidget *widget, const char *action, GVariant *param)
{
  HnChatPage *self = HN_CHAT_PAGE (widget);
  hn_job_controller_stop (self->controller);
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child (self->messages)))
    gtk_list_box_remove (GTK_LIST_BOX (self->messages), child);
  end_reply (self);
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnChatPage *self)
{
  update_state (self);
}

static void
on_problems_changed (HnOptionGroup *group, HnChatPage *self)
{
  update_state (self);
}

static void
on_running (HnJobController *c, GParamSpec *pspec, HnChatPage *self)
{
  update_state (self);
}

HnJobSpec *hn_chat_page_get_spec (HnChatPage *self) { return self->spec; }
HnJobController *hn_chat_page_get_controller (HnChatPage *self) { return self->controller; }
const char *hn_chat_page_get_start_problem (HnChatPage *self) { return self->problem; }

static void
hn_chat_page_dispose (GObject *object)
{
  HnChatPage *self = HN_CHAT_PAGE (object);
  if (self->spec)
    g_signal_handlers_disconnect_by_data (self->spec, self);
  if (self->controller)
    {
      g_signal_handlers_disconnect_by_data (self->controller, self);
      hn_job_controller_stop (self->controller);
    }
  self->reply = NULL;
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_CHAT_PAGE);
  g_clear_object (&self->controller);
  g_clear_object (&self->spec);
  G_OBJECT_CLASS (hn_chat_page_parent_class)->dispose (object);
}

static void
hn_chat_page_finalize (GObject *object)
{
  HnChatPage *self = HN_CHAT_PAGE (object);
  g_free (self->problem);
  g_string_free (self->reply_text, TRUE);
  g_string_free (self->last_reply, TRUE);
  G_OBJECT_CLASS (hn_chat_page_parent_class)->finalize (object);
}

static void
hn_chat_page_class_init (HnChatPageClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  object_class->dispose = hn_chat_page_dispose;
  object_class->finalize = hn_chat_page_finalize;
  g_type_ensure (HN_TYPE_OPTION_GROUP);
  g_type_ensure (HN_TYPE_PROGRESS_VIEW);
  g_type_ensure (HN_TYPE_COMMAND_VIEW);
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-chat-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, model_group);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, sampling_group);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, state_group);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, run_group);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, scroller);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, messages);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, entry);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, reason);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, progress);
  gtk_widget_class_bind_template_child (widget_class, HnChatPage, command);
  gtk_widget_class_install_action (widget_class, "page.start", NULL, send_action);
  gtk_widget_class_install_action (widget_class, "page.stop", NULL, stop_action);
  gtk_widget_class_install_action (widget_class, "page.reset", NULL, reset_action);
}

static void
on_entry_activate (GtkEntry *entry, HnChatPage *self)
{
  gtk_widget_activate_action (GTK_WIDGET (self), "page.start", NULL);
}

static void
hn_chat_page_init (HnChatPage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  self->reply_text = g_string_new (NULL);
  self->last_reply = g_string_new (NULL);
  self->spec = hn_job_spec_new ("chat", NULL);
  hn_page_apply_defaults (self->spec);
  /* the demo model has no chat template: talk to it as plain text */
  g_autofree char *demo = hn_demo_path ("stories260K");
  if (demo && g_strcmp0 (demo, hn_job_spec_get_string (self->spec, "model-path")) == 0)
    hn_job_spec_set_bool (self->spec, "raw-prompt", TRUE);
  self->controller = hn_job_controller_new ();
  g_signal_connect (self->controller, "event", G_CALLBACK (on_event), self);
  g_signal_connect (self->controller, "finished", G_CALLBACK (on_finished), self);
  g_signal_connect (self->controller, "notify::running", G_CALLBACK (on_running), self);
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (self->progress), self->controller);
  GtkWidget *gs[] = { self->model_group, self->sampling_group, self->state_group, self->run_group };
  for (guint i = 0; i < G_N_ELEMENTS (gs); i++)
    {
      hn_option_group_set_spec (HN_OPTION_GROUP (gs[i]), self->spec);
      g_signal_connect (gs[i], "problems-changed", G_CALLBACK (on_problems_changed), self);
    }
  hn_command_view_set_spec (HN_COMMAND_VIEW (self->command), self->spec);
  g_signal_connect (self->spec, "changed", G_CALLBACK (on_spec_changed), self);
  g_signal_connect (self->entry, "activate", G_CALLBACK (on_entry_activate), self);
  update_state (self);
}

GtkWidget *
hn_chat_page_new (void)
{
  return g_object_new (HN_TYPE_CHAT_PAGE, NULL);
}
