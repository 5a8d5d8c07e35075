/* The Generate page under Xvfb: the command preview follows the widgets
 * (and the widgets the spec), greedy generation with the demo model streams
 * token by token and matches transformers, Stop cancels a long run,
 * continuous batching from the page, and a Vulkan allocation that fails
 * mid-job ends it with the out-of-memory error, the next run working. */
#include "gui-test.h"
#include "hn-generate-page.h"
#include "hn-job-record.h"
#include "jobs/job.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <string.h>

static HnWindow *window;

static void
test_preview_follows (void)
{
  HnGeneratePage *page = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  GtkWidget *w = GTK_WIDGET (page);
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "temperature")), "0.5");
  gtk_spin_button_set_value (GTK_SPIN_BUTTON (gui_test_editor (w, "max-new-tokens")), 12);
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (w, "do-sample")), TRUE);
  const char *cmd = hn_generate_page_get_command_text (page);
  g_assert_true (g_str_has_prefix (cmd, "hierarchos-native-cli transformer-generate --model-path "));
  g_assert_nonnull (strstr (cmd, " --max-new-tokens 12 --do-sample --temperature 0.5"));
  g_assert_nonnull (strstr (cmd, "--prompt 'Once upon a time'"));

  /* KV cache selector: Model default / Contiguous / Paged / Disabled */
  AdwComboRow *kv = ADW_COMBO_ROW (gui_test_editor (w, "cache-implementation"));
  g_assert_cmpuint (g_list_model_get_n_items (adw_combo_row_get_model (kv)), ==, 4);
  adw_combo_row_set_selected (kv, 2);
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--cache-implementation paged"));
  adw_combo_row_set_selected (kv, 3);
  cmd = hn_generate_page_get_command_text (page);
  g_assert_null (strstr (cmd, "--cache-implementation"));
  g_assert_nonnull (strstr (cmd, "--no-use-cache"));
  adw_combo_row_set_selected (kv, 0);
  g_assert_null (strstr (hn_generate_page_get_command_text (page), "cache"));

  /* the row follows the model: a state-space model keeps a recurrent state, not a KV cache */
  HnJobSpec *spec = hn_generate_page_get_spec (page);
  g_autofree char *demo = g_strdup (hn_job_spec_get_string (spec, "model-path"));
  g_autofree char *mamba = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "mamba", NULL);
  adw_combo_row_set_selected (kv, 2);
  hn_job_spec_set_string (spec, "model-path", mamba);
  g_assert_false (gtk_widget_get_sensitive (GTK_WIDGET (kv)));
  g_assert_nonnull (strstr (adw_action_row_get_subtitle (ADW_ACTION_ROW (kv)), "recurrent state"));
  g_assert_null (strstr (hn_generate_page_get_command_text (page), "--cache-implementation paged"));
  hn_job_spec_set_string (spec, "model-path", demo);
  g_assert_true (gtk_widget_get_sensitive (GTK_WIDGET (kv)));
  g_assert_nonnull (strstr (adw_action_row_get_subtitle (ADW_ACTION_ROW (kv)), "keys and values"));

  /* continuous batching adds the extra prompts as repeated --prompt */
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (w, "continuous-batching")), TRUE);
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--continuous-batching"));
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (w, "continuous-batching")), FALSE);

  /* the spec drives the widgets too */
  hn_job_spec_set_int (hn_generate_page_get_spec (page), "max-new-tokens", 33);
  g_assert_cmpfloat (gtk_spin_button_get_value (GTK_SPIN_BUTTON (gui_test_editor (w, "max-new-tokens"))), ==, 33);

  /* secrets are masked in the preview */
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "hf-token")), "hf_secret123");
  g_assert_null (strstr (hn_generate_page_get_command_text (page), "hf_secret123"));
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--hf-token '********'"));
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "hf-token")), "");
}

typedef struct {
  guint tokens_before_done;
  gboolean done, ok;
  int error_code;
} GenSeen;

static void
on_gen_event (HnJobController *c, const HnJobEvent *e, GenSeen *seen)
{
  if (g_getenv ("HN_TEST_TRACE")) { g_autofree char *j = hn_job_event_to_json (e); g_printerr ("%s\n", j); }
  if (e->type == HN_JOB_EVENT_TOKEN && !seen->done)
    seen->tokens_before_done++;
  if (e->type == HN_JOB_EVENT_DONE)
    seen->done = TRUE, seen->ok = e->done.ok, seen->error_code = e->done.error_code;
}

static gboolean
gen_done (gpointer data)
{
  return ((GenSeen *) data)->done;
}

static gboolean
gen_has_token (gpointer data)
{
  return ((GenSeen *) data)->tokens_before_done > 0;
}

static void
test_generate_streams (void)
{
  if (!hn_job_kind_is_registered ("transformer-generate"))
    {
      g_test_skip ("transformer-generate is not registered in this build");
      return;
    }
  HnGeneratePage *page = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  hn_window_show_page (window, "generate");
  HnJobSpec *spec = hn_generate_page_get_spec (page);
  hn_job_spec_unset (spec, "do-sample");
  hn_job_spec_unset (spec, "temperature");
  hn_job_spec_unset (spec, "stop");
  hn_job_spec_set_int (spec, "max-new-tokens", 12);
  hn_generate_page_set_prompt (page, "Once upon a time");
  g_assert_null (hn_generate_page_get_start_problem (page));
  HnJobController *c = hn_generate_page_get_controller (page);
  GenSeen seen = { 0 };
  gulong id = g_signal_connect (c, "event", G_CALLBACK (on_gen_event), &seen);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (hn_job_controller_get_running (c));
  g_assert_true (gui_test_wait (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_assert_cmpuint (seen.tokens_before_done, >=, 5); /* streamed token by token */
  g_autofree char *out = hn_generate_page_dup_output (page);
  g_test_message ("generated: %s", out);
  /* greedy stories260K from this prompt, as transformers gives it */
  g_assert_true (g_str_has_prefix (out, "Once upon a time, there was a little girl"));
  gui_test_screenshot ("generate-output");

  /* Stop cancels a long run within a token or two */
  memset (&seen, 0, sizeof seen);
  hn_job_spec_set_int (spec, "max-new-tokens", 100000);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (gui_test_wait (gen_has_token, &seen, 60000));
  gint64 t0 = g_get_monotonic_time ();
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.stop", NULL));
  g_assert_true (gui_test_wait (gen_done, &seen, 30000));
  g_test_message ("stopped after %.2f s", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_false (seen.ok);
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_CANCELLED);
  g_signal_handler_disconnect (c, id);

  /* continuous batching from the page: the main prompt and two extra ones served together over
   * the paged cache, each in its own section, the first as the single greedy run gave it */
  GtkWidget *w = GTK_WIDGET (page);
  GtkWidget *max_row = hn_option_group_get_row (gui_test_find_group (w, "continuous-batch-max-requests"),
                                                "continuous-batch-max-requests");
  g_assert_false (gtk_widget_get_sensitive (max_row));
  hn_job_spec_set_int (spec, "max-new-tokens", 12);
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (w, "continuous-batching")), TRUE);
  g_assert_true (gtk_widget_get_sensitive (max_row));
  gtk_spin_button_set_value (GTK_SPIN_BUTTON (gui_test_editor (w, "continuous-batch-max-requests")), 2);
  hn_generate_page_set_extra_prompts (page, "Lily\nThe dog was very\n");
  const char *cmd = hn_generate_page_get_command_text (page);
  g_assert_nonnull (strstr (cmd, "--prompt 'Once upon a time' --prompt Lily --prompt 'The dog was very'"));
  g_assert_nonnull (strstr (cmd, "--continuous-batching --continuous-batch-max-requests 2"));
  gui_test_check_round_trip (cmd, spec);
  memset (&seen, 0, sizeof seen);
  id = g_signal_connect (c, "event", G_CALLBACK (on_gen_event), &seen);
  g_assert_true (gtk_widget_activate_action (w, "page.start", NULL));
  g_assert_true (gui_test_wait (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_signal_handler_disconnect (c, id);
  g_autofree char *batched = hn_generate_page_dup_output (page);
  g_test_message ("batched: %s", batched);
  g_assert_true (g_str_has_prefix (batched, "── Sequence 1 ──\nOnce upon a time, there was a little girl"));
  g_assert_nonnull (strstr (batched, "── Sequence 3 ──\nThe dog was very"));
  gui_test_screenshot ("generate-batched");
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (w, "continuous-batching")), FALSE);
  hn_generate_page_set_extra_prompts (page, "");
  hn_job_spec_set_int (spec, "max-new-tokens", 64);
}

/* A Vulkan allocation fails in the middle of a job: the job ends with the
 * out-of-memory error, the window stays usable, the next run works. */
static void
test_generate_vk_alloc_fails (void)
{
  if (!hn_job_kind_is_registered ("transformer-generate"))
    {
      g_test_skip ("transformer-generate is not registered in this build");
      return;
    }
  HnGeneratePage *page = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  hn_window_show_page (window, "generate");
  HnJobSpec *spec = hn_generate_page_get_spec (page);
  hn_job_spec_set_int (spec, "max-new-tokens", 4);
  hn_generate_page_set_prompt (page, "Once upon a time");
  HnJobController *c = hn_generate_page_get_controller (page);
  GenSeen seen = { 0 };
  gulong id = g_signal_connect (c, "event", G_CALLBACK (on_gen_event), &seen);
  hn_fault_set_vk_alloc (1);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (gui_test_wait (gen_done, &seen, 120000));
  hn_fault_set_vk_alloc (0);
  g_assert_false (seen.ok);
  g_assert_cmpint (seen.error_code, ==, HN_ERROR_OUT_OF_MEMORY);
  g_autoptr (HnJobRecord) failed = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (failed), ==, HN_JOB_RECORD_FAILED);
  g_assert_false (hn_job_controller_get_running (c));
  gui_test_spin (50);
  memset (&seen, 0, sizeof seen);
  g_assert_null (hn_generate_page_get_start_problem (page));
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (gui_test_wait (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_signal_handler_disconnect (c, id);
  hn_job_spec_set_int (spec, "max-new-tokens", 64);
}

int
main (int argc, char **argv)
{
  gui_test_init (&argc, &argv, "gui-generate");
  window = gui_test_window ();
  g_test_add_func ("/gui-generate/preview-follows", test_preview_follows);
  g_test_add_func ("/gui-generate/streams", test_generate_streams);
  g_test_add_func ("/gui-generate/vk-alloc-fails", test_generate_vk_alloc_fails);
  return gui_test_run ();
}
