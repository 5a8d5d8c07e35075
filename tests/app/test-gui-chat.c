/* The Chat page under Xvfb with a Transformer model (the demo model, raw
 * text): the reply streams token by token and one job holds the
 * conversation across turns. (Chat with a freshly trained Hierarchos model
 * is in test-gui-train.c, after its training.) */
#include "gui-test.h"
#include "hn-chat-page.h"
#include "hn-page-util.h"
#include "jobs/job.h"
#include "base/hn-util.h"

#include <string.h>

static HnWindow *window;

/* The Chat page with a Transformer model (the demo model, raw text: it has no chat template):
 * the reply streams token by token and the conversation's job stays open across turns. */
static void
test_transformer_chat (void)
{
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  hn_window_show_page (window, "chat");
  HnJobSpec *cspec = hn_chat_page_get_spec (chat);
  g_autofree char *demo = hn_demo_path ("stories260K");
  g_assert_nonnull (demo);
  hn_job_spec_set_string (cspec, "model-path", demo);
  hn_job_spec_set_bool (cspec, "raw-prompt", TRUE);
  hn_job_spec_set_bool (cspec, "carry-chat-state", FALSE);
  hn_job_spec_set_bool (cspec, "do-sample", FALSE);
  hn_job_spec_set_int (cspec, "max-new-tokens", 12);
  g_assert_null (hn_chat_page_get_start_problem (chat));
  GuiTestChat seen = { FALSE, 0 };
  HnJobController *cc = hn_chat_page_get_controller (chat);
  gulong id = g_signal_connect (cc, "event", G_CALLBACK (gui_test_chat_event), &seen);
  hn_chat_page_send (chat, "Once upon a time");
  g_assert_true (gui_test_wait (gui_test_chat_turn_done, &seen, 60000));
  g_assert_cmpint (seen.tokens, ==, 12);
  HnJob *job = hn_job_controller_get_job (cc);
  g_autofree char *reply = hn_chat_page_dup_last_reply (chat);
  g_test_message ("reply: %s", reply);
  g_assert_cmpuint (strlen (reply), >, 0);
  seen.turn_end = FALSE;
  hn_chat_page_send (chat, "The end.");
  g_assert_true (gui_test_wait (gui_test_chat_turn_done, &seen, 60000));
  g_assert_true (hn_job_controller_get_job (cc) == job); /* one job holds the conversation */
  g_assert_cmpint (seen.tokens, >, 12);
  gui_test_screenshot ("chat-transformer");
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  g_assert_true (gui_test_wait (gui_test_not_running, cc, 30000));
  g_signal_handler_disconnect (cc, id);
}

int
main (int argc, char **argv)
{
  gui_test_init (&argc, &argv, "gui-chat");
  window = gui_test_window ();
  g_test_add_func ("/gui-chat/transformer", test_transformer_chat);
  return gui_test_run ();
}
