/* The window and the widgets every page shares, under Xvfb: every page
 * builds, each page's command preview parses back into the same spec, the
 * loss chart draws (pixel checks, exports), the job controller delivers
 * worker events on the main thread and keeps the history, the default
 * output folder moves past an earlier run, and a screenshot of each page
 * is saved to <build>/tests/out. The pages' own workflows are in
 * test-gui-<page>.c. */
#include "gui-test.h"
#include "hn-chat-page.h"
#include "hn-generate-page.h"
#include "hn-job-record.h"
#include "hn-loss-chart.h"
#include "hn-page-util.h"
#include "hn-progress-view.h"
#include "hn-train-page.h"
#include "jobs/job.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

static HnWindow *window;

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
  g_assert_nonnull (gui_test_find_group (GTK_WIDGET (ft), "lora-r"));
  g_assert_null (gui_test_find_group (hn_window_get_page (window, "train"), "lora-r"));
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
  g_assert_nonnull (gui_test_find_group (GTK_WIDGET (h), "runtime"));
  g_assert_nonnull (gui_test_find_group (hn_window_get_page (window, "chat"), "runtime"));
  g_assert_null (gui_test_find_group (hn_window_get_page (window, "train"), "runtime"));
  /* diagnostics for a bug report */
  g_autofree char *diag = hn_window_dup_diagnostics (window);
  g_assert_true (g_str_has_prefix (diag, "Hierarchos Native " HN_VERSION "\nGTK 4."));
  g_assert_nonnull (strstr (diag, "Vulkan devices:\n"));
  g_assert_false (hn_window_has_running_jobs (window));
}

static void
test_preview_round_trip (void)
{
  HnGeneratePage *gen = HN_GENERATE_PAGE (hn_window_get_page (window, "generate"));
  gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (GTK_WIDGET (gen), "stop")), "THE END, ###");
  gui_test_check_round_trip (hn_generate_page_get_command_text (gen), hn_generate_page_get_spec (gen));
  const char *train_pages[] = { "finetune", "train", "hierarchos" };
  for (guint i = 0; i < G_N_ELEMENTS (train_pages); i++)
    {
      HnTrainPage *p = HN_TRAIN_PAGE (hn_window_get_page (window, train_pages[i]));
      GtkWidget *w = GTK_WIDGET (p);
      gtk_editable_set_text (GTK_EDITABLE (gui_test_editor (w, "lr")), "0.0003");
      gtk_spin_button_set_value (GTK_SPIN_BUTTON (gui_test_editor (w, "batch-size")), 2);
      adw_combo_row_set_selected (ADW_COMBO_ROW (gui_test_editor (w, "lr-scheduler")), 0);
      gui_test_check_round_trip (hn_train_page_get_command_text (p), hn_train_page_get_spec (p));
      g_assert_nonnull (strstr (hn_train_page_get_command_text (p), "--lr 0.0003"));
      g_assert_nonnull (strstr (hn_train_page_get_command_text (p), "--batch-size 2"));
    }
  HnChatPage *chat = HN_CHAT_PAGE (hn_window_get_page (window, "chat"));
  gtk_switch_set_active (GTK_SWITCH (gui_test_editor (GTK_WIDGET (chat), "carry-chat-state")), TRUE);
  HnJobSpec *cspec = hn_chat_page_get_spec (chat);
  g_assert_true (hn_job_spec_get_bool (cspec, "carry-chat-state"));
  g_assert_true (hn_job_spec_get_bool (cspec, "raw-prompt")); /* the demo model has no chat template */
  g_autofree char *line = hn_job_spec_to_command_line (cspec, HN_ARGV_WITH_PROGRAM);
  gui_test_check_round_trip (line, cspec);
}

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
  g_autofree char *png = gui_test_run_dir ("chart-export.png");
  g_autofree char *csv = gui_test_run_dir ("chart-export.csv");
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
  gui_test_spin (300);
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
  g_assert_true (gui_test_wait (seen_finished, &seen, 10000));
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
  g_autofree char *bad = gui_test_run_dir ("history-bad.json");
  g_assert_true (g_file_set_contents (bad, "{\"jobs\": 3", -1, NULL));
  g_assert_false (hn_job_history_load (back, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, bad));
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
      gui_test_screenshot (names[i]);
    }
}

/* The page's default output folder never points a new run at an earlier
 * run's files (the job would refuse it): KIND moves on to KIND-2; a folder
 * the user named, a resume and --overwrite-output-dir keep theirs. */
static void
test_fresh_out_dir (void)
{
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-train", NULL);
  g_autofree char *runs = gui_test_run_dir ("fresh-runs");
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
  gui_test_init (&argc, &argv, "gui-window");
  window = gui_test_window ();
  g_test_add_func ("/gui-window/pages-build", test_pages_build);
  g_test_add_func ("/gui-window/fresh-out-dir", test_fresh_out_dir);
  g_test_add_func ("/gui-window/preview-round-trip", test_preview_round_trip);
  g_test_add_func ("/gui-window/chart-pixels", test_chart_pixels);
  g_test_add_func ("/gui-window/chart-in-window", test_chart_in_window);
  g_test_add_func ("/gui-window/controller", test_controller);
  g_test_add_func ("/gui-window/screenshots", test_screenshots);
  return gui_test_run ();
}
