/* The Models page under Xvfb, against the fake Hub (tests/engine/fake-hub.c)
 * and an empty cache: search with paging, a model card with its files and
 * fit badge, a gated model refused and then downloaded once a token is saved
 * (the token never shows), a download in progress cancelled and resumed to
 * the Hub's sha256, the local list's fit badges, Chat with a downloaded
 * model, removal that asks first, and offline mode listing only local
 * models. Screenshots go to <build>/tests/out (models-*.png). */
#include "fake-hub.h"
#include "gui-test.h"
#include "hn-chat-page.h"
#include "hn-export-dialog.h"
#include "hn-job-record.h"
#include "hn-models-page.h"
#include "hn-page-util.h"
#include "hn-window.h"
#include "hub/hub-token.h"
#include "jobs/job.h"
#include "jobs/model-library.h"

#include <glib/gstdio.h>
#include <string.h>

#define TOKEN "good-token"

static HnWindow *window;
static HnModelsPage *page;

static void
collect_tokens (HnJob *job, const HnJobEvent *e, gpointer data)
{
  if (e->type == HN_JOB_EVENT_TOKEN)
    g_string_append (data, e->token.text);
}

static char *cache;
static char *mem_token;

static char *
mem_lookup (const char *endpoint, gpointer data, GError **error)
{
  return g_strdup (mem_token);
}

static gboolean
mem_store (const char *endpoint, const char *token, gpointer data, GError **error)
{
  g_free (mem_token);
  mem_token = g_strdup (token);
  return TRUE;
}

static gboolean
mem_clear (const char *endpoint, gpointer data, GError **error)
{
  g_clear_pointer (&mem_token, g_free);
  return TRUE;
}

static gboolean
idle_page (gpointer data)
{
  return !hn_models_page_is_loading (data);
}

static gboolean
pull_idle (gpointer data)
{
  return !hn_job_controller_get_running (hn_models_page_get_pull_controller (data)) &&
         !hn_models_page_is_loading (data);
}

static void
settle (HnModelsPage *p)
{
  g_assert_true (gui_test_wait (idle_page, p, 30000));
  gui_test_spin (50);
}

static void
activate (const char *action, GVariant *param)
{
  g_assert_true (gtk_widget_activate_action_variant (GTK_WIDGET (page), action, param));
}

static void
test_search_paging (void)
{
  hn_window_show_page (window, "models");
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 0);
  hn_job_spec_set_int (hn_models_page_get_search_spec (page), "limit", 3);
  hn_models_page_search (page, "");
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_results (page), ==, 3);
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "hub-search"));
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "--limit 3"));
  activate ("models.more", NULL);
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_results (page), ==, 6);
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "--cursor off-3"));
  activate ("models.more", NULL);
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_results (page), ==, 8);
  g_assert_cmpstr (hn_models_page_get_search_status (page), ==, "8 models");
  gui_test_screenshot ("models-search");
}

/* Each search row gets a fit badge before any download, from the engine's
 * estimate (config.json and the Hub's parameter count) against the device's
 * free memory; unknown where the config cannot be read. */
static void
test_search_fit (void)
{
  hn_models_page_set_device_memory (page, G_MAXUINT64 / 4, "Test GPU");
  HnModelFit fit = { 0 };
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/stories", &fit), ==, "Fits for LoRA at batch 4 × 512");
  g_assert_cmpuint (fit.chat_4bit_bytes, <, fit.chat_bytes);
  g_assert_cmpuint (fit.chat_bytes, <, fit.lora_bytes);
  g_assert_false (fit.params_from_storage); /* the Hub's safetensors.total */
  hn_models_page_set_device_memory (page, fit.lora_bytes - 1, "Test GPU");
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/stories", NULL), ==, "Fits for chat");
  hn_models_page_set_device_memory (page, fit.chat_bytes - 1, "Test GPU");
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/stories", NULL), ==, "Needs 4-bit");
  hn_models_page_set_device_memory (page, fit.chat_4bit_bytes - 1, "Test GPU");
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/stories", NULL), ==, "Too large for this device");
  /* the config needs a token / names no known architecture: unknown, not a guess */
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/gated", NULL), ==, "Fit unknown");
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/pickle", NULL), ==, "Fit unknown");
  /* no device memory known: unknown */
  hn_models_page_set_device_memory (page, 0, NULL);
  g_assert_cmpstr (hn_models_page_get_result_fit (page, "org/stories", NULL), ==, "Fit unknown");
  hn_models_page_set_device_memory (page, fit.chat_bytes - 1, "Test GPU");
  gui_test_screenshot ("models-search-fit");
  hn_models_page_set_device_memory (page, G_MAXUINT64 / 4, "Test GPU");
}

static void
test_card (void)
{
  g_assert_true (hn_models_page_select (page, "org/stories", FALSE));
  settle (page);
  g_autofree char *card = hn_models_page_dup_card_text (page);
  g_assert_true (g_str_has_prefix (card, "# Stories 260K")); /* front matter stripped */
  g_assert_cmpuint (hn_models_page_get_n_files (page), ==, 5);
  const char *fit = hn_models_page_get_fit_text (page);
  g_assert_nonnull (fit);
  g_test_message ("fit of org/stories before download: %s", fit);
  g_assert_true (g_str_equal (fit, "Fits for LoRA at batch 4 × 512") || g_str_equal (fit, "Fits for chat") ||
                 g_str_equal (fit, "Needs 4-bit") || g_str_equal (fit, "Too large for this device") ||
                 g_str_equal (fit, "Fit unknown"));
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "pull --repo org/stories"));
  /* browsing left the cache alone */
  g_autofree char *repo = g_build_filename (cache, "models--org--stories", NULL);
  g_assert_false (g_file_test (repo, G_FILE_TEST_EXISTS));
  gui_test_screenshot ("models-card");
}

static void
test_gated_token (void)
{
  g_assert_true (hn_models_page_select (page, "org/gated", FALSE));
  settle (page);
  activate ("models.download", NULL);
  g_assert_true (gui_test_wait (pull_idle, page, 30000));
  g_assert_nonnull (strstr (hn_models_page_get_token_status (page), "needs a token"));
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 0);

  /* something that is not a token is refused and not echoed */
  hn_models_page_set_token_text (page, "my password");
  activate ("models.save-token", NULL);
  g_assert_null (strstr (hn_models_page_get_token_status (page), "my password"));
  g_assert_null (mem_token);

  hn_models_page_set_token_text (page, TOKEN);
  activate ("models.save-token", NULL);
  settle (page);
  g_assert_cmpstr (mem_token, ==, TOKEN);
  g_assert_nonnull (strstr (hn_models_page_get_token_status (page), "keyring"));
  activate ("models.download", NULL);
  g_assert_true (gui_test_wait (pull_idle, page, 30000));
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 1);
  /* the command line never holds it */
  g_assert_null (strstr (hn_models_page_get_command_text (page), TOKEN));
  g_assert_null (strstr (hn_models_page_get_command_text (page), "hf-token"));
}

/* The download waits, on its worker thread, at its first partial progress
 * until the test has cancelled it: it cannot finish first on a loaded
 * machine. */
static gboolean
at_partial_progress (const HnJobEvent *e, gpointer data)
{
  return e->type == HN_JOB_EVENT_PROGRESS && e->progress.unit == HN_PROGRESS_BYTES && e->progress.total > 0 &&
         e->progress.step > 0 && e->progress.step < e->progress.total;
}

static char *
file_sha256 (const char *path)
{
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) data, len);
}

static void
test_download_cancel_resume (void)
{
  g_assert_true (hn_models_page_select (page, "org/stories", FALSE));
  settle (page);
  g_mutex_lock (&hub_srv.lock);
  hub_srv.throttle_us = 60000; /* 64 KiB per 60 ms: slow enough to watch */
  g_mutex_unlock (&hub_srv.lock);
  GuiTestHold hold;
  gui_test_hold_start (&hold, hn_models_page_get_pull_controller (page), at_partial_progress, NULL);
  activate ("models.download", NULL);
  gboolean moving = gui_test_hold_wait (&hold, 30000);
  if (moving)
    {
      gui_test_spin (100); /* the events before the held one reach the progress bar */
      gui_test_screenshot ("models-download");
      activate ("models.cancel", NULL);
    }
  gui_test_hold_release (&hold);
  g_assert_true (moving);
  g_assert_true (gui_test_wait (pull_idle, page, 30000));
  g_mutex_lock (&hub_srv.lock);
  hub_srv.throttle_us = 0;
  g_mutex_unlock (&hub_srv.lock);

  /* the partial download is listed and resumes */
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 2);
  g_assert_true (hn_models_page_select (page, "org/stories", TRUE));
  int ranges = hub_srv.range_gets;
  activate ("models.download", NULL);
  g_assert_true (gui_test_wait (pull_idle, page, 30000));
  g_assert_cmpint (hub_srv.range_gets, >, ranges);
  FakeFile *f = find_file ("models/org/stories", "model.safetensors");
  g_autofree char *st = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, "model.safetensors", NULL);
  g_autofree char *sum = file_sha256 (st);
  g_assert_cmpstr (sum, ==, f->sha256);
}

static void
test_fit_badges (void)
{
  const char *fit = hn_models_page_get_local_fit (page, "org/stories");
  g_assert_nonnull (fit);
  g_test_message ("fit of org/stories on this device: %s", fit);
  g_assert_cmpstr (hn_models_page_get_local_fit (page, "org/gated"), ==, "Fit unknown"); /* config only */
  g_assert_true (hn_models_page_select (page, "org/stories", TRUE));
  settle (page);
  g_assert_cmpstr (hn_models_page_get_fit_text (page), ==, fit);
  g_autofree char *card = hn_models_page_dup_card_text (page);
  g_assert_true (g_str_has_prefix (card, "# Stories 260K")); /* the card came with the model */
  gui_test_screenshot ("models-fit");

  /* Chat with it */
  activate ("models.open", g_variant_new_string ("chat"));
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  g_autofree char *snap = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, NULL);
  g_assert_cmpstr (hn_job_spec_get_string (hn_chat_page_get_spec (chat), "model-path"), ==, snap);
  hn_window_show_page (window, "models");
}

static gboolean
export_idle (gpointer data)
{
  return !hn_job_controller_get_running (hn_models_page_get_export_controller (data));
}

/* Export posts an export-gguf job whose CLI line is the dialog's; the GGUF
 * lands where the dialog says. A merged folder needs an adapter. */
static void
test_export (void)
{
  g_assert_true (hn_models_page_select (page, "org/stories", TRUE));
  settle (page);
  activate ("models.export", NULL);
  HnExportDialog *d = HN_EXPORT_DIALOG (hn_models_page_get_export_dialog (page));
  g_assert_nonnull (d);
  g_autofree char *snap = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, NULL);
  HnJobSpec *spec = hn_export_dialog_get_spec (d);
  g_assert_cmpstr (hn_job_spec_get_kind (spec), ==, "export-gguf");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "model-path"), ==, snap);
  g_assert_true (g_str_has_suffix (hn_job_spec_get_string (spec, "out"), "/stories-f16.gguf"));
  /* the estimated size follows the weight type */
  g_autofree char *size_f16 = g_strdup (hn_export_dialog_get_size_text (d));
  g_assert_nonnull (strstr (size_f16, "Estimated size"));
  /* the default name follows the weight type */
  hn_job_spec_set_string (spec, "outtype", "q8_0");
  g_assert_cmpstr (hn_export_dialog_get_size_text (d), !=, size_f16);
  g_assert_true (g_str_has_suffix (hn_job_spec_get_string (spec, "out"), "/stories-q8_0.gguf"));
  /* a merged model without an adapter is refused before anything runs */
  hn_export_dialog_set_merged (d, TRUE);
  g_assert_cmpstr (hn_job_spec_get_kind (hn_export_dialog_get_spec (d)), ==, "merge-lora");
  g_autofree char *why = hn_export_dialog_dup_problem (d);
  g_assert_nonnull (why);
  g_assert_nonnull (strstr (why, "adapter"));
  g_assert_false (adw_message_dialog_get_response_enabled (ADW_MESSAGE_DIALOG (d), "export"));
  hn_export_dialog_set_merged (d, FALSE);
  /* an output folder that does not exist is named */
  hn_job_spec_set_string (spec, "out", "/nonexistent/x.gguf");
  g_autofree char *why2 = hn_export_dialog_dup_problem (d);
  g_assert_nonnull (why2);
  g_assert_nonnull (strstr (why2, "/nonexistent"));
  g_autofree char *gguf = g_build_filename (cache, "stories-q8_0.gguf", NULL);
  hn_job_spec_set_string (spec, "out", gguf);
  g_assert_null (hn_export_dialog_dup_problem (d));
  g_assert_true (adw_message_dialog_get_response_enabled (ADW_MESSAGE_DIALOG (d), "export"));
  g_autofree char *line = g_strdup (hn_export_dialog_get_command_text (d));
  g_assert_nonnull (strstr (line, "hierarchos-native-cli export-gguf --model-path "));
  g_assert_nonnull (strstr (line, "--outtype q8_0"));
  g_assert_nonnull (strstr (line, gguf));
  gui_test_screenshot_of (GTK_WIDGET (d), "models-export");
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (d), "export");
  gtk_window_destroy (GTK_WINDOW (d));
  g_assert_true (gui_test_wait (export_idle, page, 60000));
  g_assert_null (hn_models_page_get_export_dialog (page));
  /* the job list holds it, with the dialog's CLI line */
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_cmpstr (hn_job_record_get_command_line (rec), ==, line);
  g_assert_cmpstr (hn_job_record_get_output_path (rec), ==, gguf);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (gguf, &data, &len, NULL));
  g_assert_cmpuint (len, >, 1000);
  g_assert_true (memcmp (data, "GGUF", 4) == 0);
  g_autofree char *mf = g_build_filename (cache, "stories-q8_0.Modelfile", NULL);
  g_assert_true (g_file_test (mf, G_FILE_TEST_IS_REGULAR));
}

/* Folders and GGUF files the user adds are listed beside the cache (kept
 * in the list `hub-search --local` reads), with what they are, a fit badge, and the runs and
 * adapters made from each; Export offers the newest adapter; forgetting
 * one leaves its files alone. */
static void
test_local_added (void)
{
  g_autofree char *snap = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, NULL);
  /* a fine-tune of org/stories in the history, with its adapter */
  g_autofree char *adapter = g_build_filename (cache, "stories-lora", NULL);
  g_assert_cmpint (g_mkdir_with_parents (adapter, 0755), ==, 0);
  g_autofree char *cfg = g_build_filename (adapter, "adapter_config.json", NULL);
  g_assert_true (g_file_set_contents (cfg, "{\"peft_type\": \"LORA\"}", -1, NULL));
  g_autofree char *line = g_strdup_printf ("hierarchos-native-cli transformer-finetune --model-path %s --train d.jsonl "
                                           "--out-dir %s", snap, adapter);
  g_autoptr (HnJobRecord) rec = hn_job_record_new ("LoRA fine-tuning", line);
  g_list_store_insert (hn_job_record_list (), 0, rec);
  hn_job_record_finish (rec, HN_JOB_RECORD_SUCCEEDED, NULL, adapter, 3);
  hn_models_page_refresh_local (page);
  settle (page);
  const char *sub = hn_models_page_get_local_subtitle (page, "org/stories");
  g_test_message ("org/stories: %s", sub);
  g_assert_nonnull (strstr (sub, "2 runs, 1 adapter")); /* the export and the fine-tune */
  g_assert_true (hn_models_page_select (page, "org/stories", TRUE));
  g_assert_cmpuint (hn_models_page_get_n_runs (page), ==, 2);
  activate ("models.export", NULL);
  HnExportDialog *d = HN_EXPORT_DIALOG (hn_models_page_get_export_dialog (page));
  g_assert_cmpstr (hn_job_spec_get_string (hn_export_dialog_get_spec (d), "lora-adapter-path"), ==, adapter);
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (d), "cancel");
  gtk_window_destroy (GTK_WINDOW (d));

  /* a folder and a GGUF file */
  guint before = hn_models_page_get_n_local (page);
  g_autofree char *demo = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  g_autofree char *gguf = g_build_filename (cache, "stories-q8_0.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_models_page_add_local (page, demo, &error));
  g_assert_true (hn_models_page_add_local (page, gguf, &error));
  g_assert_true (hn_models_page_add_local (page, gguf, &error)); /* once is enough */
  g_assert_no_error (error);
  g_assert_false (hn_models_page_add_local (page, "/nonexistent/model", &error));
  g_assert_nonnull (strstr (error->message, "/nonexistent/model"));
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, before + 2);
  g_clear_error (&error);
  g_auto (GStrv) kept = hn_model_library_get_paths (&error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (kept), ==, 2);
  /* the CLI's `hub-search --local` reads the same list */
  g_autoptr (HnJobSpec) ls = hn_job_spec_new ("hub-search", NULL);
  hn_job_spec_set_bool (ls, "local", TRUE);
  g_autoptr (HnJob) job = hn_job_new (ls);
  g_autoptr (GString) listed = g_string_new (NULL);
  hn_job_set_event_func (job, collect_tokens, listed, NULL);
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  g_assert_nonnull (strstr (listed->str, demo));
  g_assert_nonnull (strstr (listed->str, gguf));
  const char *gsub = hn_models_page_get_local_subtitle (page, gguf);
  g_test_message ("gguf: %s", gsub);
  g_assert_true (g_str_has_prefix (gsub, "llama · 260 K parameters · q8_0"));
  g_assert_nonnull (strstr (gsub, "q8_0"));
  g_assert_nonnull (strstr (gsub, "GGUF file"));
  g_assert_cmpstr (hn_models_page_get_local_fit (page, gguf), ==, "Fits for LoRA at batch 4 × 512");
  const char *dsub = hn_models_page_get_local_subtitle (page, demo);
  g_test_message ("folder: %s", dsub);
  g_assert_nonnull (strstr (dsub, "parity-verified"));
  g_assert_nonnull (strstr (dsub, "f32"));
  g_assert_cmpstr (hn_models_page_get_local_fit (page, demo), ==, "Fits for LoRA at batch 4 × 512");
  gui_test_screenshot ("models-local");
  /* Chat with the GGUF */
  g_assert_true (hn_models_page_select (page, gguf, TRUE));
  g_assert_cmpuint (hn_models_page_get_n_files (page), ==, 1);
  activate ("models.open", g_variant_new_string ("chat"));
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  g_assert_cmpstr (hn_job_spec_get_string (hn_chat_page_get_spec (chat), "model-path"), ==, gguf);
  hn_window_show_page (window, "models");

  /* forgetting one asks, then leaves its file */
  activate ("models.remove", NULL);
  GtkWidget *dialog = hn_models_page_get_remove_dialog (page);
  g_assert_nonnull (strstr (adw_message_dialog_get_body (ADW_MESSAGE_DIALOG (dialog)), "stays on the disk"));
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (dialog), "remove");
  gtk_window_destroy (GTK_WINDOW (dialog));
  settle (page);
  g_assert_true (g_file_test (gguf, G_FILE_TEST_IS_REGULAR));
  g_assert_true (hn_models_page_forget_local (page, demo));
  g_assert_false (hn_models_page_forget_local (page, demo));
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, before);

  /* a list an older release kept in the settings moves into the shared list once */
  g_autofree char *file = hn_model_library_paths_file ();
  g_assert_cmpint (g_unlink (file), ==, 0);
  const char *old[] = { demo, NULL };
  g_settings_set_strv (hn_app_settings (), "model-folders", old);
  hn_models_page_refresh_local (page);
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, before + 1);
  g_auto (GStrv) moved = hn_model_library_get_paths (&error);
  g_assert_no_error (error);
  g_assert_true (g_strv_equal ((const char *const *) moved, old));
  g_auto (GStrv) left = g_settings_get_strv (hn_app_settings (), "model-folders");
  g_assert_cmpuint (g_strv_length (left), ==, 0);
  g_assert_true (hn_models_page_forget_local (page, demo));
  settle (page);
}

static gboolean
dialog_open (gpointer data)
{
  return hn_models_page_get_remove_dialog (data) != NULL;
}

static void
test_remove (void)
{
  g_assert_true (hn_models_page_select (page, "org/gated", TRUE));
  activate ("models.remove", NULL);
  g_assert_true (gui_test_wait (dialog_open, page, 5000));
  GtkWidget *dialog = hn_models_page_get_remove_dialog (page);
  g_assert_nonnull (strstr (adw_message_dialog_get_body (ADW_MESSAGE_DIALOG (dialog)), "frees"));
  /* Cancel keeps it */
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (dialog), "cancel");
  gtk_window_destroy (GTK_WINDOW (dialog));
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 2);
  activate ("models.remove", NULL);
  dialog = hn_models_page_get_remove_dialog (page);
  adw_message_dialog_response (ADW_MESSAGE_DIALOG (dialog), "remove");
  gtk_window_destroy (GTK_WINDOW (dialog));
  settle (page);
  g_assert_cmpuint (hn_models_page_get_n_local (page), ==, 1);
  g_autofree char *repo = g_build_filename (cache, "models--org--gated", NULL);
  g_assert_false (g_file_test (repo, G_FILE_TEST_EXISTS));
}

static void
test_offline (void)
{
  /* a page made while HF_HUB_OFFLINE is set (nothing else runs now) */
  g_setenv ("HF_HUB_OFFLINE", "1", TRUE);
  GtkWidget *win = gtk_window_new ();
  gtk_window_set_default_size (GTK_WINDOW (win), 900, 600);
  HnModelsPage *off = HN_MODELS_PAGE (hn_models_page_new ());
  gtk_window_set_child (GTK_WINDOW (win), GTK_WIDGET (off));
  gtk_window_present (GTK_WINDOW (win));
  g_unsetenv ("HF_HUB_OFFLINE");
  settle (off);
  g_assert_cmpuint (hn_models_page_get_n_local (off), ==, 1);
  g_assert_nonnull (strstr (hn_models_page_get_search_status (off), "Offline"));
  g_assert_false (gtk_widget_activate_action (GTK_WIDGET (off), "models.search", NULL) &&
                  hn_job_controller_get_running (hn_models_page_get_search_controller (off)));
  g_assert_cmpuint (hn_models_page_get_n_results (off), ==, 0);
  g_assert_true (hn_models_page_select (off, "org/stories", TRUE));
  g_assert_cmpuint (hn_models_page_get_n_files (off), >=, 3);
  gtk_window_destroy (GTK_WINDOW (win));
  gui_test_spin (50);
}

/* A Hub repo of GGUF files only (one per quantization, no safetensors):
 * Download offers a choice of file (Q4_K_M first) and pulls that one alone,
 * as the CLI's --hf-file does; the cache then lists it as a GGUF model. */
static void
test_gguf_repo (void)
{
  g_assert_true (hn_models_page_select (page, "org/stories-gguf", FALSE));
  settle (page);
  const char *const *files = hn_models_page_get_gguf_files (page);
  g_assert_nonnull (files);
  g_assert_cmpuint (g_strv_length ((char **) files), ==, 2);
  g_assert_cmpstr (hn_models_page_get_chosen_gguf (page), ==, "stories260K-llamacpp-q4_k_m.gguf");
  const char *line = hn_models_page_get_command_text (page);
  g_test_message ("%s", line);
  g_assert_nonnull (strstr (line, "--include stories260K-llamacpp-q4_k_m.gguf"));
  g_assert_null (strstr (line, "Q8_0"));
  g_assert_null (strstr (line, "*.safetensors"));
  g_assert_false (hn_models_page_choose_gguf (page, "README.md"));
  g_assert_true (hn_models_page_choose_gguf (page, "stories260K-Q8_0.gguf"));
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "--include stories260K-Q8_0.gguf"));
  g_assert_true (hn_models_page_choose_gguf (page, "stories260K-llamacpp-q4_k_m.gguf"));
  gui_test_screenshot ("models-gguf-choice");
  activate ("models.download", NULL);
  g_assert_true (gui_test_wait (pull_idle, page, 30000));
  g_autofree char *snap = g_build_filename (cache, "models--org--stories-gguf", "snapshots", COMMIT, NULL);
  g_autofree char *got = g_build_filename (snap, "stories260K-llamacpp-q4_k_m.gguf", NULL);
  g_autofree char *other = g_build_filename (snap, "stories260K-Q8_0.gguf", NULL);
  g_assert_true (g_file_test (got, G_FILE_TEST_IS_REGULAR));
  g_assert_false (g_file_test (other, G_FILE_TEST_EXISTS));
  settle (page);
  g_assert_nonnull (hn_models_page_get_local_subtitle (page, "org/stories-gguf"));
  g_assert_true (hn_models_page_select (page, "org/stories-gguf", TRUE));
  g_assert_null (hn_models_page_get_gguf_files (page)); /* downloaded: nothing to choose */
  /* a safetensors repo offers no choice */
  g_assert_true (hn_models_page_select (page, "org/tiny", FALSE));
  settle (page);
  g_assert_null (hn_models_page_get_gguf_files (page));
  g_assert_nonnull (strstr (hn_models_page_get_command_text (page), "*.safetensors"));
}

int
main (int argc, char **argv)
{
  cache = gui_test_private_hub_cache ();
  gui_test_init (&argc, &argv, "gui-models");
  start_server (); /* sets HF_ENDPOINT */
  static const HnHubTokenStore store = { mem_lookup, mem_store, mem_clear, NULL };
  hn_hub_token_store_set (&store); /* the libsecret path: test-hub-keyring */
  window = gui_test_window ();
  page = HN_MODELS_PAGE (hn_window_get_page (window, "models"));

  g_test_add_func ("/gui-models/search-paging", test_search_paging);
  g_test_add_func ("/gui-models/search-fit", test_search_fit);
  g_test_add_func ("/gui-models/card", test_card);
  g_test_add_func ("/gui-models/gated-token", test_gated_token);
  g_test_add_func ("/gui-models/download-cancel-resume", test_download_cancel_resume);
  g_test_add_func ("/gui-models/fit-badges", test_fit_badges);
  g_test_add_func ("/gui-models/export", test_export);
  g_test_add_func ("/gui-models/local-added", test_local_added);
  g_test_add_func ("/gui-models/remove", test_remove);
  g_test_add_func ("/gui-models/offline", test_offline);
  g_test_add_func ("/gui-models/gguf-repo", test_gguf_repo);
  int ret = gui_test_run ();
  stop_server ();
  rm_rf (cache);
  g_free (cache);
  g_free (mem_token);
  return ret;
}
