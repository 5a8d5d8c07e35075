/* GUI tests under Xvfb: every page builds, the command preview follows the
 * widgets and parses back into the same spec, Start says why it is
 * disabled, the loss chart draws (pixel checks), the job controller delivers
 * worker events on the main thread, and a screenshot of each page is saved
 * to <build>/tests/out. */
#include "hn-application.h"
#include "hn-chat-page.h"
#include "hn-compare-page.h"
#include "hn-data-preview.h"
#include "hn-device-list-row.h"
#include "hn-device-row.h"
#include "hn-devices.h"
#include "hn-generate-page.h"
#include "hn-job-controller.h"
#include "hn-job-record.h"
#include "hn-loss-chart.h"
#include "hn-memory-row.h"
#include "hn-option-group.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"
#include "hn-train-page.h"
#include "hn-window.h"
#include "jobs/job.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "base/hn-util.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnWindow *window;

static char *
out_dir (void)
{
  static gboolean fresh;
  const char *build = g_getenv ("HN_BUILD_DIR");
  char *dir = g_build_filename (build ? build : ".", "tests", "out", NULL);
  /* a new run every time: the jobs refuse an output folder an earlier run filled */
  if (!fresh)
    hn_folder_remove_tree (dir);
  fresh = TRUE;
  g_mkdir_with_parents (dir, 0755);
  return dir;
}

static void
spin (guint ms)
{
  gint64 end = g_get_monotonic_time () + ms * 1000;
  while (g_get_monotonic_time () < end)
    while (g_main_context_iteration (NULL, FALSE))
      ;
}

static gboolean
wait_for (gboolean (*cond) (gpointer), gpointer data, guint timeout_ms)
{
  gint64 end = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (!cond (data))
    {
      if (g_get_monotonic_time () > end)
        return FALSE;
      g_main_context_iteration (NULL, FALSE);
      g_usleep (1000);
    }
  return TRUE;
}

/* Finds the HnOptionGroup inside `root` that edits `option`. */
static HnOptionGroup *
find_group (GtkWidget *root, const char *option)
{
  if (HN_IS_OPTION_GROUP (root) && hn_option_group_get_row (HN_OPTION_GROUP (root), option))
    return HN_OPTION_GROUP (root);
  for (GtkWidget *c = gtk_widget_get_first_child (root); c; c = gtk_widget_get_next_sibling (c))
    {
      HnOptionGroup *g = find_group (c, option);
      if (g)
        return g;
    }
  return NULL;
}

static GtkWidget *
editor (GtkWidget *page, const char *option)
{
  HnOptionGroup *g = find_group (page, option);
  g_assert_nonnull (g);
  return hn_option_group_get_editor (g, option);
}

static void
test_pages_build (void)
{
  const char *names[] = { "generate", "finetune", "train", "hierarchos", "chat", "jobs" };
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    g_assert_nonnull (hn_window_get_page (window, names[i]));
  g_assert_true (HN_IS_GENERATE_PAGE (hn_window_get_page (window, "generate")));
  g_assert_true (HN_IS_TRAIN_PAGE (hn_window_get_page (window, "finetune")));
  g_assert_true (HN_IS_CHAT_PAGE (hn_window_get_page (window, "chat")));
  HnTrainPage *ft = HN_TRAIN_PAGE (hn_window_get_page (window, "finetune"));
  g_assert_cmpstr (hn_job_spec_get_kind (hn_train_page_get_spec (ft)), ==, "transformer-finetune");
  /* LoRA rows exist on the fine-tune page and not on full training */
  g_assert_nonnull (find_group (GTK_WIDGET (ft), "lora-r"));
  g_assert_null (find_group (hn_window_get_page (window, "train"), "lora-r"));
  /* the demo model and dataset are preselected */
  HnJobSpec *spec = hn_train_page_get_spec (ft);
  g_assert_true (g_str_has_suffix (hn_job_spec_get_string (spec, "model-path"), "stories260K"));
  g_assert_true (g_str_has_suffix (hn_job_spec_get_string (spec, "train"), "tinyshakespeare-small.txt"));
  g_assert_true (g_file_test (hn_job_spec_get_string (spec, "model-path"), G_FILE_TEST_IS_DIR));
  /* Hierarchos: a mode switch between train and fine-tune */
  HnTrainPage *h = HN_TRAIN_PAGE (hn_window_get_page (window, "hierarchos"));
  g_assert_cmpstr (hn_job_spec_get_kind (hn_train_page_get_spec (h)), ==, "hierarchos-train");
  hn_train_page_set_alt_mode (h, TRUE);
  g_assert_cmpstr (hn_job_spec_get_kind (hn_train_page_get_spec (h)), ==, "hierarchos-finetune");
  g_assert_true (g_str_has_prefix (hn_train_page_get_command_text (h), "hierarchos-native-cli hierarchos-finetune"));
  hn_train_page_set_alt_mode (h, FALSE);
  /* the Hierarchos runtime (Vulkan or the CPU) on its page and the chat
   * page, not on Transformer training */
  g_assert_nonnull (find_group (GTK_WIDGET (h), "runtime"));
  g_assert_nonnull (find_group (hn_window_get_page (window, "chat"), "runtime"));
  g_assert_null (find_group (hn_window_get_page (window, "train"), "runtime"));
  /* diagnostics for a bug report */
  g_autofree char *diag = hn_window_dup_diagnostics (window);
  g_assert_true (g_str_has_prefix (diag, "Hierarchos Native " HN_VERSION "\nGTK 4."));
  g_assert_nonnull (strstr (diag, "Vulkan devices:\n"));
  g_assert_false (hn_window_has_running_jobs (window));
}

static void
test_preview_follows (void)
{
  HnGeneratePage *page = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  GtkWidget *w = GTK_WIDGET (page);
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "temperature")), "0.5");
  gtk_spin_button_set_value (GTK_SPIN_BUTTON (editor (w, "max-new-tokens")), 12);
  gtk_switch_set_active (GTK_SWITCH (editor (w, "do-sample")), TRUE);
  const char *cmd = hn_generate_page_get_command_text (page);
  g_assert_true (g_str_has_prefix (cmd, "hierarchos-native-cli transformer-generate --model-path "));
  g_assert_nonnull (strstr (cmd, " --max-new-tokens 12 --do-sample --temperature 0.5"));
  g_assert_nonnull (strstr (cmd, "--prompt 'Once upon a time'"));

  /* KV cache selector: Model default / Contiguous / Paged / Disabled */
  AdwComboRow *kv = ADW_COMBO_ROW (editor (w, "cache-implementation"));
  g_assert_cmpuint (g_list_model_get_n_items (adw_combo_row_get_model (kv)), ==, 4);
  adw_combo_row_set_selected (kv, 2);
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--cache-implementation paged"));
  adw_combo_row_set_selected (kv, 3);
  cmd = hn_generate_page_get_command_text (page);
  g_assert_null (strstr (cmd, "--cache-implementation"));
  g_assert_nonnull (strstr (cmd, "--no-use-cache"));
  adw_combo_row_set_selected (kv, 0);
  g_assert_null (strstr (hn_generate_page_get_command_text (page), "cache"));

  /* continuous batching adds the extra prompts as repeated --prompt */
  gtk_switch_set_active (GTK_SWITCH (editor (w, "continuous-batching")), TRUE);
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--continuous-batching"));
  gtk_switch_set_active (GTK_SWITCH (editor (w, "continuous-batching")), FALSE);

  /* the spec drives the widgets too */
  hn_job_spec_set_int (hn_generate_page_get_spec (page), "max-new-tokens", 33);
  g_assert_cmpfloat (gtk_spin_button_get_value (GTK_SPIN_BUTTON (editor (w, "max-new-tokens"))), ==, 33);

  /* secrets are masked in the preview */
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "hf-token")), "hf_secret123");
  g_assert_null (strstr (hn_generate_page_get_command_text (page), "hf_secret123"));
  g_assert_nonnull (strstr (hn_generate_page_get_command_text (page), "--hf-token '********'"));
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "hf-token")), "");
}

/* preview -> CLI parser -> the same spec, for every page */
static void
check_round_trip (const char *cmd, HnJobSpec *spec)
{
  g_auto (GStrv) argv = NULL;
  int argc = 0;
  g_assert_true (g_shell_parse_argv (cmd, &argc, &argv, NULL));
  g_assert_cmpstr (argv[0], ==, "hierarchos-native-cli");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnJobSpec) back = hn_job_spec_new_from_argv (argc - 1, (const char *const *) argv + 1, &error);
  g_assert_no_error (error);
  if (!hn_job_spec_equal (back, spec))
    g_error ("preview does not parse back to the same spec: %s", cmd);
}

static void
test_preview_round_trip (void)
{
  HnGeneratePage *gen = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  gtk_editable_set_text (GTK_EDITABLE (editor (GTK_WIDGET (gen), "stop")), "THE END, ###");
  check_round_trip (hn_generate_page_get_command_text (gen), hn_generate_page_get_spec (gen));
  const char *train_pages[] = { "finetune", "train", "hierarchos" };
  for (guint i = 0; i < G_N_ELEMENTS (train_pages); i++)
    {
      HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, train_pages[i]));
      GtkWidget *w = GTK_WIDGET (p);
      gtk_editable_set_text (GTK_EDITABLE (editor (w, "lr")), "0.0003");
      gtk_spin_button_set_value (GTK_SPIN_BUTTON (editor (w, "batch-size")), 2);
      adw_combo_row_set_selected (ADW_COMBO_ROW (editor (w, "lr-scheduler")), 0);
      check_round_trip (hn_train_page_get_command_text (p), hn_train_page_get_spec (p));
      g_assert_nonnull (strstr (hn_train_page_get_command_text (p), "--lr 0.0003"));
      g_assert_nonnull (strstr (hn_train_page_get_command_text (p), "--batch-size 2"));
    }
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  gtk_switch_set_active (GTK_SWITCH (editor (GTK_WIDGET (chat), "carry-chat-state")), TRUE);
  HnJobSpec *cspec = hn_chat_page_get_spec (chat);
  g_assert_true (hn_job_spec_get_bool (cspec, "carry-chat-state"));
  g_assert_true (hn_job_spec_get_bool (cspec, "raw-prompt")); /* the demo model has no chat template */
  g_autofree char *line = hn_job_spec_to_command_line (cspec, HN_ARGV_WITH_PROGRAM);
  check_round_trip (line, cspec);
}

static void save_screenshot (const char *name);

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
  GtkWidget *list = editor (w, "device-indices");
  g_assert_true (HN_IS_DEVICE_LIST_ROW (list));
  g_assert_nonnull (find_group (hn_window_get_page (window, "finetune"), "device-indices"));
  g_assert_null (find_group (hn_window_get_page (window, "hierarchos"), "device-indices")); /* trains on the CPU */

  hn_job_spec_set_int (spec, "device-index", 0);
  hn_device_list_row_set_device_indices (HN_DEVICE_LIST_ROW (list), "0,0");
  g_assert_cmpstr (hn_job_spec_get_string (spec, "device-indices"), ==, "0,0");
  g_assert_false (hn_job_spec_is_set (spec, "device-index"));
  const char *cmd = hn_train_page_get_command_text (p);
  g_assert_nonnull (strstr (cmd, " --device-indices 0,0"));
  g_assert_null (strstr (cmd, "--device-index "));
  check_round_trip (cmd, spec);

  /* the checks follow the list and write it */
  g_assert_true (wait_for (devices_ready, NULL, 30000));
  GtkCheckButton *c0 = hn_device_list_row_get_check (HN_DEVICE_LIST_ROW (list), 0);
  g_assert_nonnull (c0);
  g_assert_true (gtk_check_button_get_active (c0));
  gtk_check_button_set_active (c0, FALSE);
  g_assert_false (hn_job_spec_is_set (spec, "device-indices"));
  g_assert_null (strstr (hn_train_page_get_command_text (p), "--device-indices"));
  gtk_check_button_set_active (c0, TRUE);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "device-indices"), ==, "0");
  check_round_trip (hn_train_page_get_command_text (p), spec);

  /* the spec drives the row; one device on the Device row clears the list */
  hn_job_spec_set_string (spec, "device-indices", "0,1");
  g_assert_cmpstr (hn_device_list_row_get_device_indices (HN_DEVICE_LIST_ROW (list)), ==, "0,1");
  hn_device_row_set_device_index (HN_DEVICE_ROW (editor (w, "device-index")), 0);
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
  GtkWidget *lr = editor (w, "lr");
  gtk_editable_set_text (GTK_EDITABLE (lr), "fast");
  g_assert_true (gtk_widget_has_css_class (lr, "error"));
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Learning rate: 'fast' is not a number");
  gtk_editable_set_text (GTK_EDITABLE (lr), "20");
  g_assert_nonnull (strstr (hn_train_page_get_start_problem (p), "it must be greater than 0 and at most 10"));
  gtk_editable_set_text (GTK_EDITABLE (lr), "1e-4");
  g_assert_false (gtk_widget_has_css_class (lr, "error"));

  /* a missing folder is flagged, and the model choice is required */
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "model-path")), "/nonexistent/model");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Model folder: there is no folder /nonexistent/model");
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "model-path")), "");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Set the Model folder or Hub model");
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "hf-model")), "not a hub id");
  g_assert_cmpstr (hn_train_page_get_start_problem (p), ==, "Hub model: 'not a hub id' is not a Hub id like org/name");
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "hf-model")), "");
  gtk_editable_set_text (GTK_EDITABLE (editor (w, "model-path")), model);

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
  g_assert_true (wait_for ((gboolean (*) (gpointer)) hn_memory_row_get_exceeds, row, 5000));
  g_test_message ("%s", hn_memory_row_get_text (row));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "It may not fit"));
  g_assert_nonnull (strstr (hn_memory_row_get_text (row), "LoRA"));
  g_assert_nonnull (strstr (hn_train_page_get_start_problem (p), "may not fit"));
  g_assert_false (gtk_widget_activate_action (GTK_WIDGET (p), "page.start", NULL) &&
                  hn_job_controller_get_running (hn_train_page_get_controller (p)));
  save_screenshot ("memory-warning");
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

/* ---- chart ------------------------------------------------------------- */

static guint
count_color (const guchar *data, int stride, int w, int h, int x0, int x1, int y0, int y1,
             gboolean (*match) (guchar r, guchar g, guchar b, guchar a))
{
  guint n = 0;
  for (int y = MAX (y0, 0); y < MIN (y1, h); y++)
    for (int x = MAX (x0, 0); x < MIN (x1, w); x++)
      {
        const guchar *p = data + y * stride + x * 4; /* cairo ARGB32 little endian: B G R A */
        if (match (p[2], p[1], p[0], p[3]))
          n++;
      }
  return n;
}

static gboolean
is_blue (guchar r, guchar g, guchar b, guchar a)
{
  return a > 200 && b > 150 && r < 90 && g > 60 && g < 150;
}

static gboolean
is_orange (guchar r, guchar g, guchar b, guchar a)
{
  return a > 200 && r > 200 && g > 60 && g < 140 && b < 60;
}

static void
fill_chart (HnLossChart *chart)
{
  hn_loss_chart_clear (chart);
  for (int s = 1; s <= 200; s++)
    {
      double loss = 4.0 * exp (-s / 60.0) + 1.0 + 0.15 * sin (s * 1.7);
      double lr = s < 20 ? 2e-4 * s / 20 : 2e-4 * (1 - (s - 20) / 180.0);
      hn_loss_chart_add_point (chart, s, loss, lr, s % 50 == 0 ? loss + 0.1 : NAN);
    }
}

static void
test_chart_pixels (void)
{
  g_autoptr (HnLossChart) chart = g_object_ref_sink (HN_LOSS_CHART (hn_loss_chart_new ()));
  const int W = 600, H = 360;
  /* empty chart: no curve pixels */
  cairo_surface_t *surface = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, W, H);
  cairo_t *cr = cairo_create (surface);
  hn_loss_chart_draw (chart, cr, W, H);
  cairo_surface_flush (surface);
  g_assert_cmpuint (count_color (cairo_image_surface_get_data (surface), cairo_image_surface_get_stride (surface),
                                 W, H, 0, W, 0, H, is_blue), ==, 0);
  cairo_destroy (cr);
  cairo_surface_destroy (surface);

  fill_chart (chart);
  g_assert_cmpuint (hn_loss_chart_get_n_points (chart), ==, 200);
  /* smoothing is a debiased EMA: the first point equals the raw loss */
  g_assert_cmpfloat_with_epsilon (hn_loss_chart_get_smoothed (chart, 0), 4.0 * exp (-1 / 60.0) + 1.0 + 0.15 * sin (1.7), 1e-9);

  surface = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, W, H);
  cr = cairo_create (surface);
  cairo_set_source_rgb (cr, 1, 1, 1);
  cairo_paint (cr);
  hn_loss_chart_draw (chart, cr, W, H);
  cairo_surface_flush (surface);
  const guchar *data = cairo_image_surface_get_data (surface);
  int stride = cairo_image_surface_get_stride (surface);
  /* the loss falls: the smoothed curve is high on the left, low on the right */
  guint left_top = count_color (data, stride, W, H, 64, 140, 0, H / 2, is_blue);
  guint left_bottom = count_color (data, stride, W, H, 64, 140, H * 3 / 4, H, is_blue);
  guint right_bottom = count_color (data, stride, W, H, W - 200, W - 64, H / 2, H, is_blue);
  guint right_top = count_color (data, stride, W, H, W - 200, W - 64, 0, H / 3, is_blue);
  g_test_message ("blue pixels: left top %u bottom %u; right top %u bottom %u", left_top, left_bottom, right_top, right_bottom);
  g_assert_cmpuint (left_top, >, 50);
  g_assert_cmpuint (right_bottom, >, 50);
  g_assert_cmpuint (right_top, ==, 0);
  /* the learning rate is drawn on its own axis */
  g_assert_cmpuint (count_color (data, stride, W, H, 64, W - 64, 0, H, is_orange), >, 100);

  /* log scale changes the picture */
  hn_loss_chart_set_log_scale (chart, TRUE);
  cairo_surface_t *surface2 = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, W, H);
  cairo_t *cr2 = cairo_create (surface2);
  hn_loss_chart_draw (chart, cr2, W, H);
  cairo_surface_flush (surface2);
  g_assert_true (memcmp (cairo_image_surface_get_data (surface2), data, (gsize) stride * H) != 0);
  cairo_destroy (cr2);
  cairo_surface_destroy (surface2);
  hn_loss_chart_set_log_scale (chart, FALSE);
  cairo_destroy (cr);
  cairo_surface_destroy (surface);

  /* exports */
  g_autofree char *dir = out_dir ();
  g_autofree char *png = g_build_filename (dir, "chart-export.png", NULL);
  g_autofree char *csv = g_build_filename (dir, "chart-export.csv", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_loss_chart_export_png (chart, png, 900, 500, &error));
  g_assert_no_error (error);
  g_autoptr (GdkTexture) tex = gdk_texture_new_from_filename (png, &error);
  g_assert_no_error (error);
  g_assert_cmpint (gdk_texture_get_width (tex), ==, 900);
  g_assert_true (hn_loss_chart_export_csv (chart, csv, &error));
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (csv, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  g_assert_cmpstr (lines[0], ==, "step,loss,smoothed_loss,lr,eval_loss");
  g_assert_cmpuint (g_strv_length (lines), ==, 202); /* header + 200 + trailing empty */
  g_assert_true (g_str_has_prefix (lines[50], "50,"));
  g_assert_false (g_str_has_suffix (lines[50], ","));  /* step 50 has an eval loss */
  g_assert_true (g_str_has_suffix (lines[49], ","));   /* step 49 has none */
}

/* The chart inside the real window renders through GTK's renderer too. */
static void
test_chart_in_window (void)
{
  HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, "finetune"));
  hn_window_show_page (window, "finetune");
  HnLossChart *chart = hn_train_page_get_chart (p);
  fill_chart (chart);
  spin (300);
  int w = gtk_widget_get_width (GTK_WIDGET (chart)), h = gtk_widget_get_height (GTK_WIDGET (chart));
  g_assert_cmpint (w, >, 100);
  g_assert_cmpint (h, >, 100);
  GdkPaintable *paintable = gtk_widget_paintable_new (GTK_WIDGET (chart));
  GtkSnapshot *snap = gtk_snapshot_new ();
  gdk_paintable_snapshot (paintable, snap, w, h);
  GskRenderNode *node = gtk_snapshot_free_to_node (snap);
  g_assert_nonnull (node);
  GskRenderer *renderer = gtk_native_get_renderer (GTK_NATIVE (window));
  GdkTexture *tex = gsk_renderer_render_texture (renderer, node, &GRAPHENE_RECT_INIT (0, 0, w, h));
  gsize stride = (gsize) w * 4;
  guchar *pixels = g_malloc (stride * h);
  gdk_texture_download (tex, pixels, stride);
  g_assert_cmpuint (count_color (pixels, (int) stride, w, h, 0, w, 0, h, is_blue), >, 100);
  g_free (pixels);
  g_object_unref (tex);
  gsk_render_node_unref (node);
  g_object_unref (paintable);
  hn_loss_chart_clear (chart);
}

/* ---- controller -------------------------------------------------------- */

static gboolean
fake_steps (HnJob *job, GError **error)
{
  /* a stand-in kind for the plumbing test: the engine kinds register later */
  for (int s = 1; s <= 40; s++)
    {
      if (!hn_job_check_cancelled (job, error))
        return FALSE;
      HnJobMetric m;
      hn_job_metric_init (&m);
      m.step = s;
      m.loss = 3.0 / s;
      hn_job_emit_metric (job, &m);
      hn_job_emit_progress (job, HN_PROGRESS_STEPS, s, 40, s * 100);
    }
  hn_job_set_output_path (job, "/tmp/hn-test-out");
  return TRUE;
}

typedef struct {
  guint events, progress, metrics;
  gboolean finished, ok;
  GThread *thread;
} Seen;

static void
on_ctl_event (HnJobController *c, const HnJobEvent *e, Seen *seen)
{
  seen->events++;
  seen->thread = g_thread_self ();
  if (e->type == HN_JOB_EVENT_PROGRESS)
    seen->progress++;
  if (e->type == HN_JOB_EVENT_METRIC)
    seen->metrics++;
}

static void
on_ctl_finished (HnJobController *c, gboolean ok, const char *msg, const char *out, Seen *seen)
{
  seen->finished = TRUE;
  seen->ok = ok;
}

static gboolean
seen_finished (gpointer data)
{
  return ((Seen *) data)->finished;
}

static void
test_controller (void)
{
  hn_job_register_kind ("pull", fake_steps);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("pull", NULL);
  hn_job_spec_set_string (spec, "repo", "org/x");
  g_autoptr (HnJobController) c = hn_job_controller_new ();
  GtkWidget *view = g_object_ref_sink (g_object_new (HN_TYPE_PROGRESS_VIEW, NULL));
  hn_progress_view_set_controller (HN_PROGRESS_VIEW (view), c);
  Seen seen = { 0 };
  g_signal_connect (c, "event", G_CALLBACK (on_ctl_event), &seen);
  g_signal_connect (c, "finished", G_CALLBACK (on_ctl_finished), &seen);
  guint n_records = g_list_model_get_n_items (G_LIST_MODEL (hn_job_record_list ()));
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_job_controller_start (c, spec, &error));
  g_assert_true (hn_job_controller_get_running (c));
  g_assert_false (hn_job_controller_start (c, spec, NULL)); /* one job per page */
  g_assert_true (wait_for (seen_finished, &seen, 10000));
  g_assert_true (seen.ok);
  g_assert_true (seen.thread == g_thread_self ()); /* replayed on the main thread */
  g_assert_cmpuint (seen.metrics, ==, 40);
  g_assert_cmpuint (seen.progress, >=, 1);
  g_assert_cmpuint (seen.progress, <=, 40);      /* coalesced within a batch */
  g_assert_false (hn_job_controller_get_running (c));
  g_assert_true (g_str_has_prefix (hn_progress_view_get_text (HN_PROGRESS_VIEW (view)), "Done · 40 of 40 steps"));
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (hn_job_record_list ())), ==, n_records + 1);
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_nonnull (strstr (hn_job_record_get_summary (rec), "final loss 0.0750"));
  g_assert_cmpstr (hn_job_record_get_output_path (rec), ==, "/tmp/hn-test-out");
  g_object_unref (view);

  /* the run history is on disk and reads back */
  g_autofree char *path = hn_job_history_path ();
  g_assert_true (g_file_test (path, G_FILE_TEST_IS_REGULAR));
  g_autoptr (GListStore) back = g_list_store_new (HN_TYPE_JOB_RECORD);
  g_assert_true (hn_job_history_load (back, path, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (back)), >=, 1);
  g_autoptr (HnJobRecord) first = g_list_model_get_item (G_LIST_MODEL (back), 0);
  g_assert_cmpstr (hn_job_record_get_command_line (first), ==, hn_job_record_get_command_line (rec));
  g_assert_cmpint (hn_job_record_get_state (first), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_cmpfloat_with_epsilon (hn_job_record_get_final_loss (first), 0.075, 1e-9);
  /* a damaged file is an error naming it, not a crash */
  g_autofree char *dir = out_dir ();
  g_autofree char *bad = g_build_filename (dir, "history-bad.json", NULL);
  g_assert_true (g_file_set_contents (bad, "{\"jobs\": 3", -1, NULL));
  g_assert_false (hn_job_history_load (back, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, bad));
}

static void save_screenshot (const char *name);

/* ---- a real job: generate with the demo model --------------------------- */

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
  g_assert_true (wait_for (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_assert_cmpuint (seen.tokens_before_done, >=, 5); /* streamed token by token */
  g_autofree char *out = hn_generate_page_dup_output (page);
  g_test_message ("generated: %s", out);
  /* greedy stories260K from this prompt, as transformers gives it */
  g_assert_true (g_str_has_prefix (out, "Once upon a time, there was a little girl"));
  save_screenshot ("generate-output");

  /* Stop cancels a long run within a token or two */
  memset (&seen, 0, sizeof seen);
  hn_job_spec_set_int (spec, "max-new-tokens", 100000);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (wait_for (gen_has_token, &seen, 60000));
  gint64 t0 = g_get_monotonic_time ();
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.stop", NULL));
  g_assert_true (wait_for (gen_done, &seen, 30000));
  g_test_message ("stopped after %.2f s", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_false (seen.ok);
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_CANCELLED);
  g_signal_handler_disconnect (c, id);

  /* continuous batching from the page: the main prompt and two extra ones served together over
   * the paged cache, each in its own section, the first as the single greedy run gave it */
  GtkWidget *w = GTK_WIDGET (page);
  GtkWidget *max_row = hn_option_group_get_row (find_group (w, "continuous-batch-max-requests"),
                                                "continuous-batch-max-requests");
  g_assert_false (gtk_widget_get_sensitive (max_row));
  hn_job_spec_set_int (spec, "max-new-tokens", 12);
  gtk_switch_set_active (GTK_SWITCH (editor (w, "continuous-batching")), TRUE);
  g_assert_true (gtk_widget_get_sensitive (max_row));
  gtk_spin_button_set_value (GTK_SPIN_BUTTON (editor (w, "continuous-batch-max-requests")), 2);
  hn_generate_page_set_extra_prompts (page, "Lily\nThe dog was very\n");
  const char *cmd = hn_generate_page_get_command_text (page);
  g_assert_nonnull (strstr (cmd, "--prompt 'Once upon a time' --prompt Lily --prompt 'The dog was very'"));
  g_assert_nonnull (strstr (cmd, "--continuous-batching --continuous-batch-max-requests 2"));
  check_round_trip (cmd, spec);
  memset (&seen, 0, sizeof seen);
  id = g_signal_connect (c, "event", G_CALLBACK (on_gen_event), &seen);
  g_assert_true (gtk_widget_activate_action (w, "page.start", NULL));
  g_assert_true (wait_for (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_signal_handler_disconnect (c, id);
  g_autofree char *batched = hn_generate_page_dup_output (page);
  g_test_message ("batched: %s", batched);
  g_assert_true (g_str_has_prefix (batched, "── Sequence 1 ──\nOnce upon a time, there was a little girl"));
  g_assert_nonnull (strstr (batched, "── Sequence 3 ──\nThe dog was very"));
  save_screenshot ("generate-batched");
  gtk_switch_set_active (GTK_SWITCH (editor (w, "continuous-batching")), FALSE);
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
  g_assert_true (wait_for (gen_done, &seen, 120000));
  hn_fault_set_vk_alloc (0);
  g_assert_false (seen.ok);
  g_assert_cmpint (seen.error_code, ==, HN_ERROR_OUT_OF_MEMORY);
  g_autoptr (HnJobRecord) failed = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_assert_cmpint (hn_job_record_get_state (failed), ==, HN_JOB_RECORD_FAILED);
  g_assert_false (hn_job_controller_get_running (c));
  spin (50);
  memset (&seen, 0, sizeof seen);
  g_assert_null (hn_generate_page_get_start_problem (page));
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (wait_for (gen_done, &seen, 120000));
  g_assert_true (seen.ok);
  g_signal_handler_disconnect (c, id);
  hn_job_spec_set_int (spec, "max-new-tokens", 64);
}

/* ---- Hierarchos: train a tiny fresh model, watch the loss, chat with it -- */

static gboolean
not_running (gpointer data)
{
  return !hn_job_controller_get_running (HN_JOB_CONTROLLER (data));
}

typedef struct {
  gboolean turn_end;
  int tokens;       /* streamed TOKEN events with an id */
} ChatSeen;

static void
on_chat_event (HnJobController *c, const HnJobEvent *e, ChatSeen *seen)
{
  if (e->type == HN_JOB_EVENT_TURN_END)
    seen->turn_end = TRUE;
  else if (e->type == HN_JOB_EVENT_TOKEN && e->token.token_id >= 0)
    seen->tokens++;
}

static gboolean
chat_turn_done (gpointer data)
{
  return ((ChatSeen *) data)->turn_end;
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
  g_autofree char *dir = out_dir ();
  char *run = g_build_filename (dir, name, NULL);
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
  g_assert_true (wait_for (not_running, c, 120000));
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("hierarchos run: %s", hn_job_record_get_summary (rec));
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_SUCCEEDED);
  HnLossChart *chart = hn_train_page_get_chart (page);
  g_assert_cmpuint (hn_loss_chart_get_n_points (chart), ==, 40);
  double first = hn_loss_chart_get_smoothed (chart, 0), last = hn_loss_chart_get_smoothed (chart, 39);
  g_test_message ("smoothed loss %.4f -> %.4f", first, last);
  g_assert_cmpfloat (last, <, first - 0.3); /* the curve falls */
  save_screenshot ("hierarchos-trained");

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
  ChatSeen seen = { FALSE };
  HnJobController *cc = hn_chat_page_get_controller (chat);
  gulong id = g_signal_connect (cc, "event", G_CALLBACK (on_chat_event), &seen);
  hn_chat_page_send (chat, "ROMEO:");
  g_assert_true (wait_for (chat_turn_done, &seen, 60000));
  g_assert_true (hn_job_controller_get_running (cc)); /* the conversation stays open */
  g_autofree char *reply = hn_chat_page_dup_last_reply (chat);
  g_test_message ("reply: %s", reply);
  g_assert_cmpuint (strlen (reply), >, 0);
  seen.turn_end = FALSE;
  hn_chat_page_send (chat, "JULIET:");
  g_assert_true (wait_for (chat_turn_done, &seen, 60000));
  save_screenshot ("chat-hierarchos");
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  g_assert_true (wait_for (not_running, cc, 30000));
  g_signal_handler_disconnect (cc, id);
}

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
  ChatSeen seen = { FALSE, 0 };
  HnJobController *cc = hn_chat_page_get_controller (chat);
  gulong id = g_signal_connect (cc, "event", G_CALLBACK (on_chat_event), &seen);
  hn_chat_page_send (chat, "Once upon a time");
  g_assert_true (wait_for (chat_turn_done, &seen, 60000));
  g_assert_cmpint (seen.tokens, ==, 12);
  HnJob *job = hn_job_controller_get_job (cc);
  g_autofree char *reply = hn_chat_page_dup_last_reply (chat);
  g_test_message ("reply: %s", reply);
  g_assert_cmpuint (strlen (reply), >, 0);
  seen.turn_end = FALSE;
  hn_chat_page_send (chat, "The end.");
  g_assert_true (wait_for (chat_turn_done, &seen, 60000));
  g_assert_true (hn_job_controller_get_job (cc) == job); /* one job holds the conversation */
  g_assert_cmpint (seen.tokens, >, 12);
  save_screenshot ("chat-transformer");
  gtk_widget_activate_action (GTK_WIDGET (chat), "page.reset", NULL);
  g_assert_true (wait_for (not_running, cc, 30000));
  g_signal_handler_disconnect (cc, id);
}

/* ---- LoRA fine-tuning of the demo model: the loss curve falls ----------- */

/* The Fine-tune page, shown, with the preselected demo model and dataset and
 * a short run into <build>/tests/out/RUN; NULL (test skipped) without the kind. */
static HnJobSpec *
finetune_setup (HnTrainPage **page_out, const char *run_name, gint64 steps, gint64 batch, gint64 seq_len)
{
  if (!hn_job_kind_is_registered ("transformer-finetune"))
    {
      g_test_skip ("transformer-finetune is not registered in this build");
      return NULL;
    }
  HnTrainPage *page = *page_out = HN_TRAIN_PAGE (hn_window_get_page (window, "finetune"));
  hn_window_show_page (window, "finetune");
  HnJobSpec *spec = hn_train_page_get_spec (page);
  g_autofree char *dir = out_dir ();
  g_autofree char *run = g_build_filename (dir, run_name, NULL);
  hn_job_spec_set_string (spec, "out-dir", run);
  hn_job_spec_set_int (spec, "max-steps", steps);
  hn_job_spec_set_int (spec, "batch-size", batch);
  hn_job_spec_set_int (spec, "seq-len", seq_len);
  return spec;
}

static void
test_finetune_loss_falls (void)
{
  HnTrainPage *page = NULL;
  HnJobSpec *spec = finetune_setup (&page, "finetune-run", 16, 4, 48);
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
  g_assert_true (wait_for (not_running, c, 240000));
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
  save_screenshot ("finetune-trained");
}

/* ---- the fine-tuning workflow: preview, stop and save, compare --------- */

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
  save_screenshot ("dataset-preview");
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

static gboolean
has_two_points (gpointer chart)
{
  return hn_loss_chart_get_n_points (chart) >= 2;
}

/* Starts the page's run, stops and saves it (what Quit does first) after two
 * points: a resumable run in the history; Resume continues it from that
 * checkpoint, on the same page, to step `steps`. */
static void
stop_save_resume (HnTrainPage *page, gint64 steps)
{
  HnJobController *c = hn_train_page_get_controller (page);
  const char *out = hn_job_spec_get_string (hn_train_page_get_spec (page), "out-dir");
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  g_assert_true (wait_for (has_two_points, hn_train_page_get_chart (page), 120000));
  hn_window_save_and_stop_jobs (window);
  g_assert_true (wait_for (not_running, c, 120000));
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("stopped run: %s", hn_job_record_get_summary (rec));
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_STOPPED);
  const char *ck = hn_job_record_get_resume_from (rec);
  g_assert_nonnull (ck);
  g_assert_true (g_str_has_prefix (ck, out));
  g_autofree char *state = g_build_filename (ck, "trainer_state.json", NULL);
  g_assert_true (g_file_test (state, G_FILE_TEST_EXISTS));
  gint64 stopped_at = g_array_index (hn_job_record_get_points (rec), HnJobRecordPoint,
                                     hn_job_record_get_points (rec)->len - 1).step;
  g_assert_cmpint (stopped_at, <, steps);

  g_autoptr (GError) error = NULL;
  g_assert_true (hn_window_resume_record (window, rec, &error));
  g_assert_no_error (error);
  g_assert_true (wait_for (not_running, c, 120000));
  g_autoptr (HnJobRecord) again = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("resumed run: %s", hn_job_record_get_summary (again));
  g_assert_cmpint (hn_job_record_get_state (again), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_nonnull (strstr (hn_job_record_get_command_line (again), "--resume-from-checkpoint"));
  GArray *pts = hn_job_record_get_points (again);
  g_assert_cmpint (g_array_index (pts, HnJobRecordPoint, 0).step, ==, stopped_at + 1);
  g_assert_cmpint (g_array_index (pts, HnJobRecordPoint, pts->len - 1).step, ==, steps);
  hn_job_spec_unset (hn_train_page_get_spec (page), "resume-from-checkpoint");
}

static void
test_stop_save_resume (void)
{
  HnTrainPage *page = NULL;
  HnJobSpec *spec = finetune_setup (&page, "stop-run", 8, 2, 16);
  if (!spec)
    return;
  hn_job_spec_unset (spec, "eval-split");
  hn_job_spec_unset (spec, "eval-steps");
  stop_save_resume (page, 8);
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
  stop_save_resume (page, 12);
}

/* Two runs of the history overlaid on the Jobs page's chart. */
static void
test_history_overlay (void)
{
  GListModel *list = G_LIST_MODEL (hn_job_record_list ());
  guint picked = 0;
  for (guint i = 0; i < g_list_model_get_n_items (list) && picked < 2; i++)
    {
      g_autoptr (HnJobRecord) r = g_list_model_get_item (list, i);
      if (hn_job_record_get_points (r)->len >= 4 && hn_job_record_get_state (r) == HN_JOB_RECORD_SUCCEEDED)
        {
          hn_window_set_compared (window, r, TRUE);
          picked++;
        }
    }
  g_assert_cmpuint (picked, ==, 2);
  g_assert_cmpuint (hn_loss_chart_get_n_series (HN_LOSS_CHART (hn_window_get_compare_chart (window))), ==, 2);
  hn_window_show_page (window, "jobs");
  save_screenshot ("history-two-runs");
  /* the curves are in the history file, so the comparison survives a restart */
  g_autofree char *path = hn_job_history_path ();
  g_autoptr (GListStore) reloaded = g_list_store_new (HN_TYPE_JOB_RECORD);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_job_history_load (reloaded, path, &error));
  g_autoptr (HnJobRecord) first = g_list_model_get_item (G_LIST_MODEL (reloaded), 0);
  g_assert_cmpuint (hn_job_record_get_points (first)->len, >, 0);
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
  g_assert_true (hn_window_compare_record (window, tuned, &error));
  g_assert_no_error (error);
  HnComparePage *cp = HN_COMPARE_PAGE (hn_window_get_page (window, "compare"));
  g_assert_true (hn_compare_page_send (cp, "Once upon a time", &error));
  g_assert_no_error (error);
  g_assert_true (wait_for (compare_idle, cp, 120000));
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
  g_assert_true (wait_for (compare_idle, cp, 120000));
  g_assert_true (hn_compare_page_get_job (cp, 0) == jobs[0] && hn_compare_page_get_job (cp, 1) == jobs[1]);
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 0)), >, 0);
  g_assert_cmpuint (strlen (hn_compare_page_get_reply (cp, 1)), >, 0);
  save_screenshot ("chat-side-by-side");
}

/* ---- screenshots ------------------------------------------------------- */

static void
save_screenshot (const char *name)
{
  spin (400);
  GtkWidget *w = GTK_WIDGET (window);
  int width = gtk_widget_get_width (w), height = gtk_widget_get_height (w);
  GdkPaintable *paintable = gtk_widget_paintable_new (w);
  GtkSnapshot *snap = gtk_snapshot_new ();
  gdk_paintable_snapshot (paintable, snap, width, height);
  GskRenderNode *node = gtk_snapshot_free_to_node (snap);
  GdkTexture *tex = gsk_renderer_render_texture (gtk_native_get_renderer (GTK_NATIVE (window)), node,
                                                 &GRAPHENE_RECT_INIT (0, 0, width, height));
  g_autofree char *dir = out_dir ();
  g_autofree char *file = g_strdup_printf ("%s.png", name);
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_assert_true (gdk_texture_save_to_png (tex, path));
  g_test_message ("saved %s (%dx%d)", path, width, height);
  g_object_unref (tex);
  gsk_render_node_unref (node);
  g_object_unref (paintable);
}

static void
test_screenshots (void)
{
  const char *names[] = { "generate", "finetune", "train", "hierarchos", "chat", "jobs" };
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  hn_chat_page_add_message (chat, TRUE, "Tell me a story about a dragon.");
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      hn_window_show_page (window, names[i]);
      save_screenshot (names[i]);
    }
}

/* The page's default output folder never points a new run at an earlier
 * run's files (the job would refuse it): KIND moves on to KIND-2; a folder
 * the user named, a resume and --overwrite-output-dir keep theirs. */
static void
test_fresh_out_dir (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-train", NULL);
  g_autofree char *dir = out_dir ();
  g_autofree char *runs = g_build_filename (dir, "fresh-runs", NULL);
  g_autofree char *first = g_build_filename (runs, "transformer-train", NULL);
  g_autofree char *second = g_build_filename (runs, "transformer-train-2", NULL);
  g_autofree char *mine = g_build_filename (runs, "mine", NULL);
  hn_job_spec_set_string (spec, "out-dir", first);
  hn_page_fresh_out_dir (spec);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "out-dir"), ==, first); /* missing: kept */
  g_assert_cmpint (g_mkdir_with_parents (first, 0755), ==, 0);
  g_autofree char *f = g_build_filename (first, "model.safetensors", NULL);
  g_assert_true (g_file_set_contents (f, "x", -1, NULL));
  hn_page_fresh_out_dir (spec);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "out-dir"), ==, second);
  hn_job_spec_set_string (spec, "out-dir", first);
  hn_job_spec_set_bool (spec, "overwrite-output-dir", TRUE);
  hn_page_fresh_out_dir (spec);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "out-dir"), ==, first);
  hn_job_spec_set_bool (spec, "overwrite-output-dir", FALSE);
  g_assert_cmpint (g_mkdir_with_parents (mine, 0755), ==, 0);
  g_autofree char *g = g_build_filename (mine, "notes.txt", NULL);
  g_assert_true (g_file_set_contents (g, "x", -1, NULL));
  hn_job_spec_set_string (spec, "out-dir", mine);
  hn_page_fresh_out_dir (spec);
  g_assert_cmpstr (hn_job_spec_get_string (spec, "out-dir"), ==, mine);
}

int
main (int argc, char **argv)
{
  hn_gui_i18n_init ();
  gtk_test_init (&argc, &argv, NULL);
  adw_init ();
  hn_job_register_builtin_kinds ();
  GtkCssProvider *css = gtk_css_provider_new ();
  gtk_css_provider_load_from_resource (css, "/io/github/hierarchos/Native/style.css");
  gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                              GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  /* start from an empty run history so the Jobs page shows this run's jobs */
  g_autofree char *history = hn_job_history_path ();
  g_unlink (history);
  window = g_object_new (HN_TYPE_WINDOW, NULL);
  gtk_window_set_default_size (GTK_WINDOW (window), 1280, 820);
  gtk_window_present (GTK_WINDOW (window));
  spin (300);

  g_test_add_func ("/gui/pages-build", test_pages_build);
  g_test_add_func ("/gui/fresh-out-dir", test_fresh_out_dir);
  g_test_add_func ("/gui/preview-follows", test_preview_follows);
  g_test_add_func ("/gui/preview-round-trip", test_preview_round_trip);
  g_test_add_func ("/gui/device-list", test_device_list);
  g_test_add_func ("/gui/start-reason", test_start_reason);
  g_test_add_func ("/gui/memory-estimate", test_memory_estimate);
  g_test_add_func ("/gui/chart-pixels", test_chart_pixels);
  g_test_add_func ("/gui/chart-in-window", test_chart_in_window);
  g_test_add_func ("/gui/controller", test_controller);
  g_test_add_func ("/gui/generate-streams", test_generate_streams);
  g_test_add_func ("/gui/generate-vk-alloc-fails", test_generate_vk_alloc_fails);
  g_test_add_func ("/gui/hierarchos-train-and-chat", test_hierarchos_train_and_chat);
  g_test_add_func ("/gui/transformer-chat", test_transformer_chat);
  g_test_add_func ("/gui/finetune-loss-falls", test_finetune_loss_falls);
  g_test_add_func ("/gui/data-preview", test_data_preview);
  g_test_add_func ("/gui/stop-save-resume", test_stop_save_resume);
  g_test_add_func ("/gui/hierarchos-stop-resume", test_hierarchos_stop_resume);
  g_test_add_func ("/gui/history-overlay", test_history_overlay);
  g_test_add_func ("/gui/side-by-side", test_side_by_side);
  g_test_add_func ("/gui/screenshots", test_screenshots);
  int ret = g_test_run ();
  gtk_window_destroy (GTK_WINDOW (window));
  spin (50);
  g_object_unref (css);
  return ret;
}
