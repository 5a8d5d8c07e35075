/* Hub datasets on the Fine-tune page under Xvfb, against the fake Hub
 * (tests/engine/fake-hub.c) and an empty cache: the search is a hub-search
 * job for datasets with paging, a dataset's splits and JSONL/Parquet files,
 * picking a split or a file writes --hf-dataset and its split or file into
 * the page's spec (and its CLI line), the data preview says to download
 * first, the download is a pull job with its CLI line, and the preview then
 * shows the rows as the trainer sees them. */
#include "fake-hub.h"
#include "gui-test.h"
#include "hn-data-preview.h"
#include "hn-dataset-picker.h"
#include "hn-job-record.h"
#include "hn-train-page.h"
#include "jobs/job.h"

#include <string.h>

static HnWindow *window;
static HnTrainPage *page;
static HnDatasetPicker *picker;
static char *cache;

static gboolean
picker_idle (gpointer data)
{
  return !hn_dataset_picker_is_loading (data) &&
         !hn_job_controller_get_running (hn_dataset_picker_get_pull_controller (data));
}

static void
settle (void)
{
  g_assert_true (gui_test_wait (picker_idle, picker, 30000));
  gui_test_spin (50);
}

static void
test_search (void)
{
  hn_window_show_page (window, "finetune");
  hn_job_spec_set_int (hn_dataset_picker_get_search_spec (picker), "limit", 1);
  hn_dataset_picker_search (picker, "");
  settle ();
  g_assert_cmpuint (hn_dataset_picker_get_n_results (picker), ==, 1);
  const char *cmd = hn_dataset_picker_get_command_text (picker);
  g_assert_nonnull (strstr (cmd, "hierarchos-native-cli hub-search"));
  g_assert_nonnull (strstr (cmd, "--repo-type dataset"));
  g_assert_nonnull (strstr (cmd, "--limit 1"));
  g_assert_nonnull (strstr (hub_srv.last_search, "expand=")); /* /api/datasets */
  g_assert_true (hn_dataset_picker_more (picker));
  settle ();
  g_assert_cmpuint (hn_dataset_picker_get_n_results (picker), ==, 2);
  g_assert_nonnull (strstr (hn_dataset_picker_get_command_text (picker), "--cursor off-1"));
  g_assert_false (hn_dataset_picker_more (picker)); /* the last page */
  g_assert_cmpstr (hn_dataset_picker_get_status (picker), ==, "2 datasets");
  hn_dataset_picker_search (picker, "alpaca");
  settle ();
  g_assert_cmpuint (hn_dataset_picker_get_n_results (picker), ==, 1);
}

static void
test_pick_and_preview (void)
{
  HnJobSpec *spec = hn_train_page_get_spec (page);
  HnDataPreview *pv = HN_DATA_PREVIEW (hn_train_page_get_data_preview (page));
  /* org/ds: two train shards and a test split */
  hn_dataset_picker_select (picker, "org/ds");
  settle ();
  const char *const *splits = hn_dataset_picker_get_splits (picker);
  g_assert_cmpuint (g_strv_length ((char **) splits), ==, 2);
  g_assert_cmpstr (splits[0], ==, "train");
  g_assert_cmpstr (splits[1], ==, "test");
  g_assert_cmpuint (hn_dataset_picker_get_n_files (picker), ==, 3);
  g_assert_false (hn_dataset_picker_pick_split (picker, "validation"));
  g_assert_true (hn_dataset_picker_pick_split (picker, "train"));
  /* the page trains on it: exactly one of --train and --hf-dataset */
  g_assert_null (hn_job_spec_get_string (spec, "train"));
  g_assert_cmpstr (hn_job_spec_get_string (spec, "hf-dataset"), ==, "org/ds");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "hf-dataset-split"), ==, "train");
  const char *line = hn_train_page_get_command_text (page);
  g_assert_nonnull (strstr (line, "--hf-dataset org/ds --out-dir")); /* train is the default split */
  g_assert_null (strstr (line, "--train "));
  g_assert_null (hn_train_page_get_start_problem (page));
  /* not downloaded yet: the preview says so */
  hn_data_preview_refresh (pv);
  g_test_message ("%s", hn_data_preview_get_summary (pv));
  g_assert_true (g_str_has_prefix (hn_data_preview_get_summary (pv), "Download org/ds to preview it"));
  /* Download is a pull job of the split's files, with its CLI line */
  const char *pull = hn_dataset_picker_get_command_text (picker);
  g_assert_nonnull (strstr (pull, "hierarchos-native-cli pull --repo org/ds --repo-type dataset"));
  g_assert_nonnull (strstr (pull, "--include data/train-00000-of-00002.jsonl --include data/train-00001-of-00002.jsonl"));
  g_autofree char *pull_line = g_strdup (pull);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_dataset_picker_download (picker, &error));
  g_assert_no_error (error);
  settle ();
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_cmpstr (hn_job_record_get_command_line (rec), ==, pull_line);
  g_autofree char *test_shard = g_build_filename (cache, "datasets--org--ds", "snapshots", COMMIT, "data",
                                                  "test-00000-of-00001.jsonl", NULL);
  g_assert_false (g_file_test (test_shard, G_FILE_TEST_EXISTS)); /* only what was picked */
  /* the preview (refreshed when the download ended) shows the first shard */
  g_test_message ("%s", hn_data_preview_get_summary (pv));
  g_assert_cmpuint (hn_data_preview_get_n_rows (pv), ==, 1);
  g_assert_nonnull (strstr (hn_data_preview_get_row_markup (pv, 0), "a"));

  /* one file of another dataset: --hf-dataset-file; an instruction dataset previews as such */
  hn_dataset_picker_select (picker, "org/alpaca");
  settle ();
  g_assert_true (hn_dataset_picker_pick_file (picker, "alpaca.jsonl"));
  g_assert_cmpstr (hn_job_spec_get_string (spec, "hf-dataset"), ==, "org/alpaca");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "hf-dataset-file"), ==, "alpaca.jsonl");
  g_assert_false (hn_job_spec_is_set (spec, "hf-dataset-split"));
  g_assert_nonnull (strstr (hn_train_page_get_command_text (page), "--hf-dataset org/alpaca --hf-dataset-file alpaca.jsonl"));
  g_assert_true (hn_dataset_picker_download (picker, &error));
  settle ();
  /* the picker scrolled into view for the picture */
  gtk_widget_child_focus (GTK_WIDGET (picker), GTK_DIR_TAB_BACKWARD);
  g_test_message ("%s", hn_data_preview_get_summary (pv));
  g_assert_nonnull (strstr (hn_data_preview_get_summary (pv), "instruction"));
  g_assert_nonnull (strstr (hn_data_preview_get_row_markup (pv, 0), "Below is an instruction"));
  hn_train_page_set_preview_expanded (page, TRUE);
  gui_test_screenshot ("finetune-hub-dataset");
  hn_train_page_set_preview_expanded (page, FALSE);
}

int
main (int argc, char **argv)
{
  cache = gui_test_private_hub_cache ();
  gui_test_init (&argc, &argv, "gui-datasets");
  start_server (); /* sets HF_ENDPOINT */
  g_autofree char *alpaca = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "data", "alpaca.jsonl",
                                              NULL);
  g_autofree char *pq = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "io", "parquet",
                                          "hy-snappy-dict.parquet", NULL);
  char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (alpaca, &data, &len, NULL));
  add_file ("datasets/org/alpaca", "alpaca.jsonl", g_bytes_new_take (data, len), FALSE);
  g_assert_true (g_file_get_contents (pq, &data, &len, NULL));
  add_file ("datasets/org/alpaca", "extra/rows.parquet", g_bytes_new_take (data, len), TRUE);
  window = gui_test_window ();
  page = HN_TRAIN_PAGE (hn_window_get_page (window, "finetune"));
  picker = HN_DATASET_PICKER (hn_train_page_get_dataset_picker (page));
  g_test_add_func ("/gui-datasets/search", test_search);
  g_test_add_func ("/gui-datasets/pick-and-preview", test_pick_and_preview);
  int ret = gui_test_run ();
  stop_server ();
  rm_rf (cache);
  g_free (cache);
  return ret;
}
