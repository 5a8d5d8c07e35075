/* The training pages under Xvfb (Fine-tune, Train and Hierarchos are one
 * HnTrainPage each): several devices in the device list, Start says why it
 * is disabled, the memory estimate warns and can be overridden, a LoRA
 * fine-tune of the demo model whose loss falls (with its eval series), the
 * dataset preview, a fresh Hierarchos model trained and chatted with,
 * Stop and save then Resume for both trainers, and the fine-tune side by
 * side with its base model (from its Jobs page record). */
#include "gui-test.h"
#include "hn-chat-page.h"
#include "hn-compare-page.h"
#include "hn-data-preview.h"
#include "hn-device-list-row.h"
#include "hn-device-row.h"
#include "hn-devices.h"
#include "hn-generate-page.h"
#include "hn-job-record.h"
#include "hn-jobs-page.h"
#include "hn-models-page.h"
#include "hn-export-dialog.h"
#include "hn-loss-chart.h"
#include "hn-memory-row.h"
#include "hn-train-page.h"
#include "jobs/job.h"

#include <math.h>
#include <string.h>

static HnWindow *window;

static gboolean
devices_ready (gpointer data)
{
  return hn_devices_is_ready (hn_devices_get_default ());
}

/* The training pages pick several devices (data parallel): the list row
 * writes --device-indices, the preview shows it and parses back, and the
 * one-device row and the list clear each other. */
static void
test_device_list (void)
{
  HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, "train"));
  GtkWidget *w = GTK_WIDGET (p);
  HnJobSpec *spec = hn_train_page_get_spec (p);
  GtkWidget *list = gui_test_editor (w, "device-indices");
  g_assert_true (HN_IS_DEVICE_LIST_ROW (list));
  g_assert_nonnull (gui_test_find_group (hn_window_get_page (window, "finetune"), "device-indices"));
  g_assert_null (gui_test_find_group (hn_window_get_page (window, "hierarchos"), "device-indices")); /* trains on the CPU */

  hn_job_spec_set_int (spec, "device-index", 0);
  hn_device_list_row_set_device_indices (HN_DEVICE_LIST_ROW (list), "0,0");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "device-indices"), ==, "0,0");
  g_assert_false (hn_job_spec_is_set (spec, "device-index"));
  const char *cmd = hn_train_page_get_command_text (p);
  g_assert_nonnull (strstr (cmd, " --device-indices 0,0"));
  g_assert_null (strstr (cmd, "--device-index "));
  gui_test_check_round_trip (cmd, spec);

  /* the checks follow the list and write it */
  g_assert_true (gui_test_wait (devices_ready, NULL, 30000));
  GtkCheckButton *c0 = hn_device_list_row_get_check (HN_DEVICE_LIST_ROW (list), 0);
  g_assert_nonnull (c0);
  g_assert_true (gtk_check_button_get_active (c0));
  gtk_check_button_set_active (c0, FALSE);
  g_assert_false (hn_job_spec_is_set (spec, "device-indices"));
  g_assert_null (strstr (hn_train_page_get_command_text (p), "--device-indices"));
  gtk_check_button_set_active (c0, TRUE);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "device-indices"), ==, "0");
  gui_test_check_round_trip (hn_train_page_get_command_text (p), spec);

  /* the spec drives the row; one device on the Device row clears the list */
  hn_job_spec_set_string (spec, "device-indices", "0,1");
  g_assert_cmpstr (hn_device_list_row_get_device_indices (HN_DEVICE_LIST_ROW (list)), ==, "0,1");
  hn_device_row_set_device_index (HN_DEVICE_ROW (gui_test_editor (w, "device-index")), 0);
  g_assert_false (hn_job_spec_is_set (spec, "device-indices"));
  g_assert_null (hn_device_list_row_get_device_indices (HN_DEVICE_LIST_ROW (list)));
  g_assert_false (gtk_check_button_get_active (c0));
  hn_job_spec_unset (spec, "device-index");
}

static void
test_start_reason (void)
{
  HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, "train"));
  GtkWidget *w = GTK_WIDGET (p);
  HnJobSpec *spec = hn_train_page_get_spec (p);
  g_autofree char *model = g_strdup (hn_job_spec_get_string (spec, "model-path"));

  /* a bad number is flagged inline and named */
  GtkWidget *lr = gui_test_editor (w, "lr");
  gtk_editable_set_text (GTK_EDITABLE (lr), "fast");
  g_assert_true (gtk_widget_has_css_class (lr, "error"));
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Learning rate: 'fast' is not a number");
  gtk_editable_set_text (GTK_EDITABLE (lr), "20");
  g_assert_nonnull (strstr (hn_train_page_get_start_problem (p), "it must be greater than 0 and at most 10"));
  gtk_editable_set_text (GTK_EDITABLE (lr), "1e-4");
  g_assert_false (gtk_widget_has_css_class (lr, "error"));

  /* a missing folder is flagged, and the model choice is required */
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "model-path")), "/nonexistent/model");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Model folder: there is no folder /nonexistent/model");
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "model-path")), "");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Set the Model folder or Hub model");
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "hf-model")), "not a hub id");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Hub model: 'not a hub id' is not a Hub id like org/name");
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "hf-model")), "");
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "model-path")), model);

  /* with everything valid, an unimplemented kind still fails closed, visibly */
  if (!hn_job_kind_is_registered ("transformer-train"))
    {
      g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Transformer training is not available in this build yet");
      g_assert_false (gtk_widget_activate_action (w, "page.start", NULL) &&
                      hn_job_controller_get_running (hn_train_page_get_controller (p)));
    }
  else
    g_assert_null (hn_train_page_get_start_problem (p));
}

/* The memory estimate follows the settings; when it does not fit it warns,
 * Start waits for "Start anyway", and the user can go on. */
static void
test_memory_estimate (void)
{
  HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, "train"));
  hn_window_show_page (window, "train");
  HnMemoryRow *row = HN_MEMORY_ROW (hn_train_page_get_memory_row (p));
  HnJobSpec *spec = hn_train_page_get_spec (p);
  g_assert_nonnull (hn_job_spec_get_string (spec, "model-path"));
  hn_memory_row_refresh (row);
  g_test_message ("%s", hn_memory_row_get_text (row));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "About "));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "free on"));
  g_assert_false (hn_memory_row_get_exceeds (row));
  g_assert_null (hn_train_page_get_start_problem (p));

  /* far more activations than lavapipe's memory: a warning, and an override */
  hn_job_spec_set_int (spec, "batch-size", 4096);
  hn_job_spec_set_int (spec, "seq-len", 512);
  g_assert_true (gui_test_wait ((gboolean (*) (gpointer)) hn_memory_row_get_exceeds, row, 5000));
  g_test_message ("%s", hn_memory_row_get_text (row));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "It may not fit"));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "LoRA"));
  g_assert_nonnull (strstr (hn_train_page_get_start_problem (p), "may not fit"));
  g_assert_false (gtk_widget_activate_action (GTK_WIDGET (p), "page.start", NULL) &&
                  hn_job_controller_get_running (hn_train_page_get_controller (p)));
  gui_test_screenshot ("memory-warning");
  hn_memory_row_set_override (row, TRUE);
  g_assert_null (hn_train_page_get_start_problem (p));
  hn_memory_row_set_override (row, FALSE);
  g_assert_nonnull (hn_train_page_get_start_problem (p));

  hn_job_spec_unset (spec, "batch-size");
  hn_job_spec_unset (spec, "seq-len");
  hn_memory_row_refresh (row);
  g_assert_false (hn_memory_row_get_exceeds (row));
  g_assert_null (hn_train_page_get_start_problem (p));

  /* the Generate page estimates generation: weights, activations and the KV cache */
  HnGeneratePage *gp = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  HnMemoryRow *grow = HN_MEMORY_ROW (hn_generate_page_get_memory_row (gp));
  hn_memory_row_refresh (grow);
  g_test_message ("%s", hn_memory_row_get_text (grow));
  g_assert_nonnull (strstr (hn_memory_row_get_text (grow), "KV cache"));
  g_assert_false (hn_memory_row_get_exceeds (grow));
}

static void
test_finetune_loss_falls (void)
{
  HnTrainPage *page = NULL;
  HnJobSpec *spec = gui_test_finetune_setup (&page, "finetune-run", 16, 4, 48);
  if (!spec)
    return;
  hn_job_spec_set_double (spec, "lr", 5e-3);
  hn_job_spec_set_string (spec, "lr-scheduler", "constant");
  hn_job_spec_set_int (spec, "lora-r", 8);
  hn_job_spec_set_double (spec, "eval-split", 0.01);
  hn_job_spec_set_int (spec, "eval-steps", 8);
  g_assert_null (hn_train_page_get_start_problem (page));
  HnJobController *c = hn_train_page_get_controller (page);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (gui_test_wait (gui_test_not_running, c, 240000));
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("fine-tune run: %s", hn_job_record_get_summary (rec));
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  HnLossChart *chart = hn_train_page_get_chart (page);
  guint n = hn_loss_chart_get_n_points (chart);
  g_assert_cmpuint (n, ==, 16);
  double first = hn_loss_chart_get_smoothed (chart, 0), last = hn_loss_chart_get_smoothed (chart, n - 1);
  g_test_message ("smoothed loss %.4f -> %.4f", first, last);
  g_assert_cmpfloat (last, <, first);
  /* the eval loss is its own series: at steps 8 and 16 only */
  for (guint i = 0; i < n; i++)
    g_assert_true (isfinite (hn_loss_chart_get_eval_loss (chart, i)) == (i == 7 || i == 15));
  g_test_message ("eval loss %.4f -> %.4f", hn_loss_chart_get_eval_loss (chart, 7), hn_loss_chart_get_eval_loss (chart, 15));
  gui_test_screenshot ("finetune-trained");
}

static void
test_data_preview (void)
{
  HnTrainPage *page = HN_TRAIN_PAGE (hn_window_get_page (window, "finetune"));
  hn_window_show_page (window, "finetune");
  HnJobSpec *spec = hn_train_page_get_spec (page);
  g_autofree char *old = g_strdup (hn_job_spec_get_string (spec, "train"));
  g_autofree char *alpaca = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "data", "alpaca.jsonl", NULL);
  HnDataPreview *pv = HN_DATA_PREVIEW (hn_train_page_get_data_preview (page));
  gint64 old_seq = hn_job_spec_get_int (spec, "seq-len");
  hn_job_spec_set_int (spec, "seq-len", 256);
  hn_job_spec_set_string (spec, "train", alpaca);
  hn_data_preview_refresh (pv);
  g_test_message ("%s", hn_data_preview_get_summary (pv));
  g_assert_nonnull (strstr (hn_data_preview_get_summary (pv), "instruction"));
  g_assert_cmpuint (hn_data_preview_get_n_rows (pv), >=, 1);
  const char *m = hn_data_preview_get_row_markup (pv, 0);
  g_assert_nonnull (strstr (m, "background=\"#e8e8e7\">Below is an instruction")); /* the masked Alpaca prompt */
  g_assert_nonnull (strstr (m, "<b>"));                                              /* the trained response */
  g_assert_null (strstr (hn_data_preview_get_summary (pv), " 0 trained"));
  hn_train_page_set_preview_expanded (page, TRUE);
  gui_test_screenshot ("dataset-preview");
  /* a file that cannot be read says why */
  hn_job_spec_set_string (spec, "train", "/nonexistent/data.jsonl");
  hn_data_preview_refresh (pv);
  g_assert_nonnull (strstr (hn_data_preview_get_summary (pv), "cannot be read"));
  g_assert_nonnull (strstr (hn_data_preview_get_summary (pv), "/nonexistent/data.jsonl"));
  hn_train_page_set_preview_expanded (page, FALSE);
  hn_job_spec_set_string (spec, "train", old);
  hn_job_spec_set_int (spec, "seq-len", old_seq);
  hn_data_preview_refresh (pv);
}

static void
test_stop_save_resume (void)
{
  HnTrainPage *page = NULL;
  HnJobSpec *spec = gui_test_finetune_setup (&page, "stop-run", 8, 2, 16);
  if (!spec)
    return;
  hn_job_spec_unset (spec, "eval-split");
  hn_job_spec_unset (spec, "eval-steps");
  gui_test_stop_save_resume (page, 8);
}


/* The Hierarchos page set up for a fresh tiny model (seconds on lavapipe);
 * returns the output folder. */
static char *
hierarchos_setup (HnTrainPage **page_out, const char *name, int steps)
{
  HnTrainPage *page = HN_TRAIN_PAGE (hn_window_get_page (window, "hierarchos"));
  hn_window_show_page (window, "hierarchos");
  hn_train_page_set_alt_mode (page, FALSE);
  HnJobSpec *spec = hn_train_page_get_spec (page);
  char *run = gui_test_run_dir (name);
  hn_job_spec_set_string (spec, "out-dir", run);
  hn_job_spec_set_int (spec, "context-dim", 32);
  /* the CPU trainer: lavapipe runs the Vulkan one exactly but slowly */
  hn_job_spec_set_string (spec, "runtime", "cpu");
  hn_job_spec_set_int (spec, "rwkv-head-size", 16);
  hn_job_spec_set_int (spec, "ltm-slots", 16);
  hn_job_spec_set_int (spec, "seq-len", 32);
  hn_job_spec_set_int (spec, "training-chunk-size", 16);
  hn_job_spec_set_int (spec, "batch-size", 2);
  hn_job_spec_set_int (spec, "max-steps", steps);
  hn_job_spec_set_double (spec, "lr", 3e-3);
  hn_job_spec_set_int (spec, "warmup-steps", 0);
  hn_job_spec_set_string (spec, "lr-scheduler", "cosine");
  g_assert_null (hn_train_page_get_start_problem (page));
  *page_out = page;
  return run;
}

static void
test_hierarchos_train_and_chat (void)
{
  if (!hn_job_kind_is_registered ("hierarchos-train") || !hn_job_kind_is_registered ("chat"))
    {
      g_test_skip ("hierarchos-train or chat is not registered in this build");
      return;
    }
  HnTrainPage *page = NULL;
  g_autofree char *run = hierarchos_setup (&page, "hierarchos-run", 40);
  HnJobController *c = hn_train_page_get_controller (page);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (hn_job_controller_get_running (c));
  g_assert_true (gui_test_wait (gui_test_not_running, c, 120000));
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("hierarchos run: %s", hn_job_record_get_summary (rec));
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  HnLossChart *chart = hn_train_page_get_chart (page);
  g_assert_cmpuint (hn_loss_chart_get_n_points (chart), ==, 40);
  double first = hn_loss_chart_get_smoothed (chart, 0), last = hn_loss_chart_get_smoothed (chart, 39);
  g_test_message ("smoothed loss %.4f -> %.4f", first, last);
  g_assert_cmpfloat (last, <, first - 0.3); /* the curve falls */
  gui_test_screenshot ("hierarchos-trained");

  /* chat with the model just written, carrying state across turns */
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  hn_window_show_page (window, "chat");
  HnJobSpec *cspec = hn_chat_page_get_spec (chat);
  hn_job_spec_set_string (cspec, "model-path", run);
  hn_job_spec_set_int (cspec, "max-new-tokens", 24);
  hn_job_spec_set_bool (cspec, "carry-chat-state", TRUE);
  hn_job_spec_set_bool (cspec, "raw-prompt", FALSE);
  g_assert_null (hn_chat_page_get_start_problem (chat));
  GuiTestChat seen = { FALSE };
  HnJobController *cc = hn_chat_page_get_controller (chat);
  gulong id = g_signal_connect (cc, "event", G_CALLBACK (gui_test_chat_event), &seen);
  hn_chat_page_send (chat, "ROMEO:");
  g_assert_true (gui_test_wait (gui_test_chat_turn_done, &seen, 60000));
  g_assert_true (hn_job_controller_get_running (cc)); /* the conversation stays open */
  g_autofree char *reply = hn_chat_page_dup_last_reply (chat);
  g_test_message ("reply: %s", reply);
  g_assert_cmpuint (strlen (reply), >, 0);
  seen.turn_end = FALSE;
  hn_chat_page_send (chat, "JULIET:");
  g_assert_true (gui_test_wait (gui_test_chat_turn_done, &seen, 60000));
  gui_test_screenshot ("chat-hierarchos");
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  g_assert_true (gui_test_wait (gui_test_not_running, cc, 30000));
  g_signal_handler_disconnect (cc, id);
}

/* The same for a Hierarchos run, resumed on the Hierarchos page. */
static void
test_hierarchos_stop_resume (void)
{
  if (!hn_job_kind_is_registered ("hierarchos-train"))
    {
      g_test_skip ("hierarchos-train is not registered in this build");
      return;
    }
  HnTrainPage *page = NULL;
  g_autofree char *run = hierarchos_setup (&page, "hierarchos-stop", 12);
  /* Hierarchos checkpoints never replace a folder: start from none */
  const char *rm[] = { "rm", "-rf", run, NULL };
  g_assert_true (g_spawn_sync (NULL, (char **) rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL));
  gui_test_stop_save_resume (page, 12);
}

static gboolean
compare_idle (gpointer page)
{
  return !hn_compare_page_get_running (page);
}

/* The base model and the fine-tuned adapter answer the same message side by side. */
static void
test_side_by_side (void)
{
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  g_autoptr (HnJobRecord) tuned = NULL;
  for (guint i = 0; i < g_list_model_get_n_items (list) && !tuned; i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED &&
          strstr (hn_job_record_get_command_line (r), "transformer-finetune") && hn_job_record_get_output_path (r))
        tuned = g_object_ref (r);
    }
  g_assert_nonnull (tuned);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_jobs_page_compare_record (HN_JOBS_PAGE (hn_window_get_page (window, "jobs")), tuned, &error));
  g_assert_no_error (error);
  HnComparePage *cp = HN_COMPARE_PAGE (hn_window_get_page (window, "compare"));
  g_assert_true (hn_compare_page_send (cp, "Once upon a time", &error));
  g_assert_no_error (error);
  g_assert_true (gui_test_wait (compare_idle, cp, 120000));
  g_test_message ("base: %s", hn_compare_page_get_reply (cp, 0));
  g_test_message ("fine-tuned: %s", hn_compare_page_get_reply (cp, 1));
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 0)), >, 0);
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 1)), >, 0);
  /* the adapter changes the model: its greedy continuation differs */
  g_assert_cmpstr (hn_compare_page_get_reply (cp, 0), !=, hn_compare_page_get_reply (cp, 1));
  /* a second turn goes to the same chat jobs: each side keeps its conversation */
  HnJob *jobs[2] = { hn_compare_page_get_job (cp, 0), hn_compare_page_get_job (cp, 1) };
  g_assert_nonnull (jobs[0]);
  g_assert_true (hn_compare_page_send (cp, "The end.", &error));
  g_assert_no_error (error);
  g_assert_true (gui_test_wait (compare_idle, cp, 120000));
  g_assert_true (hn_compare_page_get_job (cp, 0) == jobs[0] && hn_compare_page_get_job (cp, 1) == jobs[1]);
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 0)), >, 0);
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 1)), >, 0);
  gui_test_screenshot ("chat-side-by-side");
  /* both conversations stay open: the teardown ends them (test-gui-chat's
   * compare-open checks that it waits for their threads) */
}

static void
close_export_dialog (HnModelsPage *models)
{
  GtkWidget *d = hn_models_page_get_export_dialog (models);
  g_assert_nonnull (d);
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (d), "cancel");
  gtk_window_destroy (GTK_WINDOW (d));
  g_assert_null (hn_models_page_get_export_dialog (models));
}

/* Export from the finished fine-tune: its Jobs row and the fine-tune page open the Models page's
 * export dialog on the base model with the run's adapter. */
static void
test_export_run (void)
{
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  g_autoptr (HnJobRecord) tuned = NULL;
  for (guint i = 0; i < g_list_model_get_n_items (list) && !tuned; i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED &&
          strstr (hn_job_record_get_command_line (r), "transformer-finetune") && hn_job_record_get_output_path (r))
        tuned = g_object_ref (r);
    }
  g_assert_nonnull (tuned);
  HnModelsPage *models = HN_MODELS_PAGE (hn_window_get_page (window, "models"));
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_jobs_page_export_record (HN_JOBS_PAGE (hn_window_get_page (window, "jobs")), tuned, &error));
  g_assert_no_error (error);
  HnExportDialog *d = HN_EXPORT_DIALOG (hn_models_page_get_export_dialog (models));
  g_assert_nonnull (d);
  HnJobSpec *spec = hn_export_dialog_get_spec (d);
  g_assert_cmpstr (hn_job_spec_get_kind (spec), ==, "export-gguf");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "lora-adapter-path"), ==, hn_job_record_get_output_path (tuned));
  g_assert_nonnull (strstr (hn_job_record_get_command_line (tuned), hn_job_spec_get_string (spec, "model-path")));
  gui_test_screenshot_of (GTK_WIDGET (d), "jobs-export");
  /* a second export while one dialog is open is one dialog: close it first */
  close_export_dialog (models);
  /* the fine-tune page's Export offers the same */
  GtkWidget *ft = hn_window_get_page (window, "finetune");
  g_assert_true (gtk_widget_activate_action (ft, "page.export-model", NULL));
  d = HN_EXPORT_DIALOG (hn_models_page_get_export_dialog (models));
  g_assert_nonnull (d);
  g_assert_nonnull (hn_job_spec_get_string (hn_export_dialog_get_spec (d), "lora-adapter-path"));
  close_export_dialog (models);
  /* a run without an output is refused by name */
  g_autoptr (HnJobRecord) none = NULL;
  for (guint i = 0; i < g_list_model_get_n_items (list) && !none; i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (!hn_job_record_get_output_path (r))
        none = g_object_ref (r);
    }
  if (none)
    {
      g_assert_false (hn_jobs_page_export_record (HN_JOBS_PAGE (hn_window_get_page (window, "jobs")), none, &error));
      g_assert_nonnull (error);
      g_clear_error (&error);
      g_assert_null (hn_models_page_get_export_dialog (models));
    }
}

int
main (int argc, char **argv)
{
  gui_test_init (&argc, &argv, "gui-train");
  window = gui_test_window ();
  g_test_add_func ("/gui-train/device-list", test_device_list);
  g_test_add_func ("/gui-train/start-reason", test_start_reason);
  g_test_add_func ("/gui-train/memory-estimate", test_memory_estimate);
  g_test_add_func ("/gui-train/finetune-loss-falls", test_finetune_loss_falls);
  g_test_add_func ("/gui-train/data-preview", test_data_preview);
  g_test_add_func ("/gui-train/stop-save-resume", test_stop_save_resume);
  g_test_add_func ("/gui-train/hierarchos-train-and-chat", test_hierarchos_train_and_chat);
  g_test_add_func ("/gui-train/hierarchos-stop-resume", test_hierarchos_stop_resume);
  g_test_add_func ("/gui-train/side-by-side", test_side_by_side);
  g_test_add_func ("/gui-train/export-run", test_export_run);
  return gui_test_run ();
}
