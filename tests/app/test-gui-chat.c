/* The Chat page under Xvfb with a Transformer model (the demo model, raw
 * text): the reply streams token by token and one job holds the
 * conversation across turns. (Chat with a freshly trained Hierarchos model
 * is in test-gui-train.c, after its training.) */
#include "gui-test.h"
#include "hn-chat-page.h"
#include "hn-compare-page.h"
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

static gboolean
compare_idle (gpointer page)
{
  return !hn_compare_page_get_running (page);
}

/* The two chat jobs of the Side by side page, left open when the window goes. */
static HnJob *open_jobs[2];

/* On the worker thread: the end of a job takes a while, as freeing a large
 * model and its device does (the window is long gone by then). */
static void
slow_end (HnJob *job, const HnJobEvent *e, gpointer data)
{
  if (e->type == HN_JOB_EVENT_DONE)
    g_usleep (300 * 1000);
}

/* Side by side with the demo model on both sides; the conversations stay
 * open, waiting for the next message, when the test ends. The teardown (the
 * window destroyed with live chat jobs, then the process exiting) once
 * crashed with SIGSEGV: the process exited while the cancelled jobs'
 * threads still freed their models and Vulkan devices. main () checks
 * that the teardown waits for them (hn_application_end_jobs). */
static void
test_compare_open (void)
{
  g_autofree char *demo = hn_demo_path ("stories260K");
  HnComparePage *cp = HN_COMPARE_PAGE (hn_window_get_page (window, "compare"));
  hn_compare_page_set_models (cp, demo, demo);
  hn_job_controller_set_worker_tap (hn_compare_page_get_controller (cp, 0), slow_end, NULL);
  hn_window_show_page (window, "compare");
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_compare_page_send (cp, "Once upon a time", &error));
  g_assert_no_error (error);
  g_assert_true (gui_test_wait (compare_idle, cp, 60000));
  /* the same model and greedy decoding: the same reply on both sides */
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 0)), >, 0);
  g_assert_cmpstr (hn_compare_page_get_reply (cp, 0), ==, hn_compare_page_get_reply (cp, 1));
  for (guint i = 0; i < 2; i++)
    {
      open_jobs[i] = g_object_ref (hn_compare_page_get_job (cp, i));
      g_assert_true (hn_job_is_running (open_jobs[i]));
    }
}

int
main (int argc, char **argv)
{
  gui_test_init (&argc, &argv, "gui-chat");
  window = gui_test_window ();
  g_test_add_func ("/gui-chat/transformer", test_transformer_chat);
  g_test_add_func ("/gui-chat/compare-open", test_compare_open);
  int ret = gui_test_run ();
  /* the teardown ended the jobs the window held, their threads included */
  for (guint i = 0; i < 2; i++)
    if (open_jobs[i])
      {
        g_assert_false (hn_job_is_running (open_jobs[i]));
        g_object_unref (open_jobs[i]);
      }
  return ret;
}
