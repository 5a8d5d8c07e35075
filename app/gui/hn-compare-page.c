#include "hn-compare-page.h"
#include "hn-job-controller.h"
#include "hn-page-util.h"
#include "base/hn-error.h"
#include "base/json-util.h"
#include "base/hn-util.h"

#include <glib/gi18n.h>
#include <json-glib/json-glib.h>

typedef struct {
  HnJobController *controller;
  GtkWidget *title, *messages;
  GtkWidget *reply;      /* the bubble being streamed into */
  GString *text;         /* its text */
  gboolean waiting;      /* a message was sent and its reply is not complete */
} Side;

struct _HnComparePage
{
  AdwBin parent_instance;
  GtkWidget *base_entry, *tuned_entry, *prompt, *send, *reason;
  Side sides[2];
};

G_DEFINE_FINAL_TYPE (HnComparePage, hn_compare_page, ADW_TYPE_BIN)

static GtkWidget *
add_bubble (Side *side, gboolean from_user, const char *text)
{
  return hn_page_add_bubble (GTK_LIST_BOX (side->messages), from_user, text);
}

/* A side is busy from a message until its reply ends (its chat job keeps running between turns). */
static gboolean
any_running (HnComparePage *self)
{
  return self->sides[0].waiting || self->sides[1].waiting;
}

static void
update_state (HnComparePage *self)
{
  gboolean running = any_running (self);
  const char *base = gtk_editable_get_text (GTK_EDITABLE (self->base_entry));
  const char *tuned = gtk_editable_get_text (GTK_EDITABLE (self->tuned_entry));
  const char *why = running ? NULL
                    : !*base || !*tuned ? _("Choose the base model and the fine-tuned adapter or model (Jobs page: “Chat side by side”)")
                                        : NULL;
  gtk_label_set_text (GTK_LABEL (self->reason), why ? why : "");
  gtk_widget_set_sensitive (self->send, !running && !why);
  g_autofree char *bt = g_strdup_printf (_("Base: %s"), *base ? base : _("not set"));
  g_autofree char *tt = g_strdup_printf (_("Fine-tuned: %s"), *tuned ? tuned : _("not set"));
  gtk_label_set_text (GTK_LABEL (self->sides[0].title), bt);
  gtk_label_set_text (GTK_LABEL (self->sides[1].title), tt);
}

static void
on_event (HnJobController *c, const HnJobEvent *e, HnComparePage *self)
{
  Side *side = c == self->sides[0].controller ? &self->sides[0] : &self->sides[1];
  if (e->type == HN_JOB_EVENT_TOKEN && side->reply)
    {
      g_string_append (side->text, e->token.text);
      g_autofree char *valid = g_utf8_make_valid (side->text->str, -1);
      gtk_label_set_text (GTK_LABEL (side->reply), valid);
    }
  else if (e->type == HN_JOB_EVENT_TURN_END)
    {
      side->waiting = FALSE;
      update_state (self);
    }
  else if (e->type == HN_JOB_EVENT_DONE && !e->done.ok && side->reply)
    {
      g_autofree char *msg = g_strdup_printf (_("(failed: %s)"), e->done.error_message ? e->done.error_message : "");
      gtk_label_set_text (GTK_LABEL (side->reply), msg);
    }
}

static void
on_finished (HnJobController *c, gboolean ok, const char *message, const char *output, HnComparePage *self)
{
  Side *side = c == self->sides[0].controller ? &self->sides[0] : &self->sides[1];
  side->waiting = FALSE;
  update_state (self);
}

/* Other models: a new conversation on both sides. */
static void
end_conversations (HnComparePage *self)
{
  for (guint i = 0; i < 2; i++)
    {
      Side *side = &self->sides[i];
      hn_job_controller_stop (side->controller);
      side->waiting = FALSE;
      side->reply = NULL;
      GtkWidget *child;
      while ((child = gtk_widget_get_first_child (side->messages)))
        gtk_list_box_remove (GTK_LIST_BOX (side->messages), child);
    }
}

void
hn_compare_page_set_models (HnComparePage *self, const char *base, const char *tuned)
{
  gtk_editable_set_text (GTK_EDITABLE (self->base_entry), base ? base : "");
  gtk_editable_set_text (GTK_EDITABLE (self->tuned_entry), tuned ? tuned : "");
  update_state (self);
}

/* Whether the tokenizer next to `dir` has a chat template (else the side chats in raw text). */
static gboolean
has_chat_template (const char *dir)
{
  g_autofree char *jinja = g_build_filename (dir, "chat_template.jinja", NULL);
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  if (g_file_test (jinja, G_FILE_TEST_EXISTS))
    return TRUE;
  if (!hn_json_parser_load_file (p, cfg, HN_MAX_CONFIG_BYTES, "tokenizer config", NULL) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
    return FALSE;
  JsonNode *t = json_object_get_member (json_node_get_object (json_parser_get_root (p)), "chat_template");
  return t && !JSON_NODE_HOLDS_NULL (t);
}

/* The chat job of one side; it keeps that side's conversation. */
static HnJobSpec *
side_spec (HnComparePage *self, guint side, GError **error)
{
  const char *base = gtk_editable_get_text (GTK_EDITABLE (self->base_entry));
  const char *tuned = gtk_editable_get_text (GTK_EDITABLE (self->tuned_entry));
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("chat", error);
  if (!spec)
    return NULL;
  g_autofree char *adapter_cfg = g_build_filename (tuned, "adapter_config.json", NULL);
  gboolean is_adapter = g_file_test (adapter_cfg, G_FILE_TEST_EXISTS);
  const char *model = side == 0 || is_adapter ? base : tuned;
  hn_job_spec_set_string (spec, "model-path", model);
  if (side == 1 && is_adapter)
    hn_job_spec_set_string (spec, "lora-adapter-path", tuned);
  /* the chat job reads an adapter's own tokenizer files when it has them */
  g_autofree char *adapter_tok = g_build_filename (tuned, "tokenizer_config.json", NULL);
  gboolean adapter_has_tok = side == 1 && is_adapter && g_file_test (adapter_tok, G_FILE_TEST_EXISTS);
  hn_job_spec_set_bool (spec, "raw-prompt", !has_chat_template (adapter_has_tok ? tuned : model));
  /* greedy: the two sides differ by the model only */
  hn_job_spec_set_bool (spec, "do-sample", FALSE);
  hn_job_spec_set_int (spec, "max-new-tokens", 48);
  return g_steal_pointer (&spec);
}

gboolean
hn_compare_page_send (HnComparePage *self, const char *text, GError **error)
{
  if (any_running (self))
    {
      g_set_error_literal (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, _("Both sides are still answering"));
      return FALSE;
    }
  for (guint i = 0; i < 2; i++)
    {
      Side *side = &self->sides[i];
      if (hn_job_controller_get_running (side->controller))
        continue; /* the conversation goes on */
      g_autoptr (HnJobSpec) spec = side_spec (self, i, error);
      if (!spec || !hn_job_spec_validate (spec, error) || !hn_job_controller_start (side->controller, spec, error))
        return FALSE;
    }
  for (guint i = 0; i < 2; i++)
    {
      Side *side = &self->sides[i];
      add_bubble (side, TRUE, text);
      side->reply = add_bubble (side, FALSE, "…");
      g_string_truncate (side->text, 0);
      side->waiting = TRUE;
      hn_job_push_input (hn_job_controller_get_job (side->controller), text);
    }
  update_state (self);
  return TRUE;
}

gboolean
hn_compare_page_get_running (HnComparePage *self)
{
  return any_running (self);
}

HnJob *
hn_compare_page_get_job (HnComparePage *self, guint side)
{
  g_return_val_if_fail (side < 2, NULL);
  return hn_job_controller_get_job (self->sides[side].controller);
}

HnJobController *
hn_compare_page_get_controller (HnComparePage *self, guint side)
{
  g_return_val_if_fail (side < 2, NULL);
  return self->sides[side].controller;
}

const char *
hn_compare_page_get_reply (HnComparePage *self, guint side)
{
  g_return_val_if_fail (side < 2, NULL);
  return self->sides[side].text->str;
}

static void
on_send (GtkWidget *w, HnComparePage *self)
{
  const char *text = gtk_editable_get_text (GTK_EDITABLE (self->prompt));
  if (!*text)
    return;
  g_autoptr (GError) error = NULL;
  g_autofree char *copy = g_strdup (text);
  if (hn_compare_page_send (self, copy, &error))
    gtk_editable_set_text (GTK_EDITABLE (self->prompt), "");
  else
    hn_page_toast (GTK_WIDGET (self), error->message);
}

static void
on_entry_changed (GtkEditable *e, HnComparePage *self)
{
  end_conversations (self);
  update_state (self);
}

static void
hn_compare_page_dispose (GObject *object)
{
  HnComparePage *self = HN_COMPARE_PAGE (object);
  for (guint i = 0; i < 2; i++)
    if (self->sides[i].controller)
      {
        g_signal_handlers_disconnect_by_data (self->sides[i].controller, self);
        hn_job_controller_stop (self->sides[i].controller);
        g_clear_object (&self->sides[i].controller);
      }
  gtk_widget_dispose_template (GTK_WIDGET (self), HN_TYPE_COMPARE_PAGE);
  G_OBJECT_CLASS (hn_compare_page_parent_class)->dispose (object);
}

static void
hn_compare_page_finalize (GObject *object)
{
  HnComparePage *self = HN_COMPARE_PAGE (object);
  for (guint i = 0; i < 2; i++)
    g_string_free (self->sides[i].text, TRUE);
  G_OBJECT_CLASS (hn_compare_page_parent_class)->finalize (object);
}

static void
hn_compare_page_class_init (HnComparePageClass *klass)
{
  GtkWidgetClass *widget_class = GTK_WIDGET_CLASS (klass);
  G_OBJECT_CLASS (klass)->dispose = hn_compare_page_dispose;
  G_OBJECT_CLASS (klass)->finalize = hn_compare_page_finalize;
  gtk_widget_class_set_template_from_resource (widget_class, "/io/github/hierarchos/Native/hn-compare-page.ui");
  gtk_widget_class_bind_template_child (widget_class, HnComparePage, base_entry);
  gtk_widget_class_bind_template_child (widget_class, HnComparePage, tuned_entry);
  gtk_widget_class_bind_template_child (widget_class, HnComparePage, prompt);
  gtk_widget_class_bind_template_child (widget_class, HnComparePage, send);
  gtk_widget_class_bind_template_child (widget_class, HnComparePage, reason);
  gtk_widget_class_bind_template_child_full (widget_class, "base_title", FALSE,
                                             G_STRUCT_OFFSET (HnComparePage, sides[0].title));
  gtk_widget_class_bind_template_child_full (widget_class, "base_messages", FALSE,
                                             G_STRUCT_OFFSET (HnComparePage, sides[0].messages));
  gtk_widget_class_bind_template_child_full (widget_class, "tuned_title", FALSE,
                                             G_STRUCT_OFFSET (HnComparePage, sides[1].title));
  gtk_widget_class_bind_template_child_full (widget_class, "tuned_messages", FALSE,
                                             G_STRUCT_OFFSET (HnComparePage, sides[1].messages));
}

static void
hn_compare_page_init (HnComparePage *self)
{
  gtk_widget_init_template (GTK_WIDGET (self));
  g_signal_connect (self->base_entry, "changed", G_CALLBACK (on_entry_changed), self);
  g_signal_connect (self->tuned_entry, "changed", G_CALLBACK (on_entry_changed), self);
  g_signal_connect (self->prompt, "activate", G_CALLBACK (on_send), self);
  g_signal_connect (self->send, "clicked", G_CALLBACK (on_send), self);
  for (guint i = 0; i < 2; i++)
    {
      Side *side = &self->sides[i];
      side->text = g_string_new (NULL);
      side->controller = hn_job_controller_new ();
      g_signal_connect (side->controller, "event", G_CALLBACK (on_event), self);
      g_signal_connect (side->controller, "finished", G_CALLBACK (on_finished), self);
    }
  update_state (self);
}
