#include "gui-test.h"
#include "hn-application.h"
#include "hn-job-record.h"
#include "hn-jobs-page.h"
#include "hn-loss-chart.h"
#include "base/hn-folder.h"
#include "jobs/job.h"

#include <glib/gstdio.h>
#include <string.h>

static char *test_name;
static HnWindow *window;
static GtkCssProvider *css;

static char *
build_path (const char *a, const char *b)
{
  const char *build = g_getenv ("HN_BUILD_DIR");
  return g_build_filename (build ? build : ".", "tests", a, b, NULL);
}

void
gui_test_init (int *argc, char ***argv, const char *name)
{
  test_name = g_strdup (name);
  /* the job history lives under XDG_DATA_HOME: one per executable, empty,
   * so tests running side by side never see each other's jobs (set before
   * GLib first reads it) */
  const char *build = g_getenv ("HN_BUILD_DIR");
  g_autofree char *data_home = g_build_filename (build ? build : ".", "test-data-home", name, NULL);
  hn_folder_remove_tree (data_home);
  g_mkdir_with_parents (data_home, 0755);
  g_setenv ("XDG_DATA_HOME", data_home, TRUE);
  hn_gui_i18n_init ();
  gtk_test_init (argc, argv, NULL);
  adw_init ();
  hn_job_register_builtin_kinds ();
  css = gtk_css_provider_new ();
  gtk_css_provider_load_from_resource (css, "/io/github/hierarchos/Native/style.css");
  gtk_style_context_add_provider_for_display (gdk_display_get_default (), GTK_STYLE_PROVIDER (css),
                                              GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  g_autofree char *runs = build_path ("out", name);
  hn_folder_remove_tree (runs);
  g_mkdir_with_parents (runs, 0755);
}

HnWindow *
gui_test_window (void)
{
  if (!window)
    {
      window = g_object_new (HN_TYPE_WINDOW, NULL);
      gtk_window_set_default_size (GTK_WINDOW (window), 1280, 820);
      gtk_window_present (GTK_WINDOW (window));
      gui_test_spin (300);
    }
  return window;
}

int
gui_test_run (void)
{
  int ret = g_test_run ();
  if (window)
    gtk_window_destroy (GTK_WINDOW (window));
  window = NULL;
  /* what the app's shutdown does: the jobs the window cancelled end first */
  hn_application_end_jobs ();
  gui_test_spin (50);
  g_clear_object (&css);
  g_clear_pointer (&test_name, g_free);
  return ret;
}

void
gui_test_spin (guint ms)
{
  gint64 end = g_get_monotonic_time () + ms * 1000;
  while (g_get_monotonic_time () < end)
    while (g_main_context_iteration (NULL, FALSE))
      ;
}

gboolean
gui_test_wait (gboolean (*cond) (gpointer), gpointer data, guint timeout_ms)
{
  gint64 end = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  while (!cond (data))
    {
      if (g_get_monotonic_time () > end)
        return FALSE;
      /* blocks until a source is ready: the worker's events wake it */
      if (!g_main_context_iteration (NULL, FALSE))
        g_usleep (1000);
    }
  return TRUE;
}

gboolean
gui_test_not_running (gpointer controller)
{
  return !hn_job_controller_get_running (HN_JOB_CONTROLLER (controller));
}

char *
gui_test_run_dir (const char *run)
{
  g_autofree char *dir = build_path ("out", test_name);
  return g_build_filename (dir, run, NULL);
}

void
gui_test_screenshot_of (GtkWidget *w, const char *name)
{
  gui_test_spin (300);
  GtkNative *native = gtk_widget_get_native (w);
  int width = gtk_widget_get_width (w), height = gtk_widget_get_height (w);
  GdkPaintable *paintable = gtk_widget_paintable_new (w);
  GtkSnapshot *snap = gtk_snapshot_new ();
  gdk_paintable_snapshot (paintable, snap, width, height);
  GskRenderNode *node = gtk_snapshot_free_to_node (snap);
  GdkTexture *tex = gsk_renderer_render_texture (gtk_native_get_renderer (native), node,
                                                 &GRAPHENE_RECT_INIT (0, 0, width, height));
  g_autofree char *file = g_strdup_printf ("%s.png", name);
  g_autofree char *path = build_path ("out", file);
  g_autofree char *dir = g_path_get_dirname (path);
  g_mkdir_with_parents (dir, 0755);
  g_assert_true (gdk_texture_save_to_png (tex, path));
  g_test_message ("saved %s (%dx%d)", path, width, height);
  g_object_unref (tex);
  gsk_render_node_unref (node);
  g_object_unref (paintable);
}

void
gui_test_screenshot (const char *name)
{
  gui_test_screenshot_of (GTK_WIDGET (gui_test_window ()), name);
}

HnOptionGroup *
gui_test_find_group (GtkWidget *root, const char *option)
{
  if (HN_IS_OPTION_GROUP (root) && hn_option_group_get_row (HN_OPTION_GROUP (root), option))
    return HN_OPTION_GROUP (root);
  for (GtkWidget *c = gtk_widget_get_first_child (root); c; c = gtk_widget_get_next_sibling (c))
    {
      HnOptionGroup *g = gui_test_find_group (c, option);
      if (g)
        return g;
    }
  return NULL;
}

GtkWidget *
gui_test_editor (GtkWidget *page, const char *option)
{
  HnOptionGroup *g = gui_test_find_group (page, option);
  g_assert_nonnull (g);
  return hn_option_group_get_editor (g, option);
}

void
gui_test_check_round_trip (const char *cmd, HnJobSpec *spec)
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

HnJobSpec *
gui_test_finetune_setup (HnTrainPage **page_out, const char *run_name, gint64 steps, gint64 batch, gint64 seq_len)
{
  if (!hn_job_kind_is_registered ("transformer-finetune"))
    {
      g_test_skip ("transformer-finetune is not registered in this build");
      return NULL;
    }
  HnWindow *win = gui_test_window ();
  HnTrainPage *page = *page_out = HN_TRAIN_PAGE (hn_window_get_page (win, "finetune"));
  hn_window_show_page (win, "finetune");
  HnJobSpec *spec = hn_train_page_get_spec (page);
  g_autofree char *run = gui_test_run_dir (run_name);
  hn_job_spec_set_string (spec, "out-dir", run);
  hn_job_spec_set_int (spec, "max-steps", steps);
  hn_job_spec_set_int (spec, "batch-size", batch);
  hn_job_spec_set_int (spec, "seq-len", seq_len);
  return spec;
}

static void
hold_tap (HnJob *job, const HnJobEvent *e, gpointer data)
{
  GuiTestHold *h = data;
  if (!h->at (e, h->data))
    return;
  g_mutex_lock (&h->lock);
  if (!h->held)
    {
      h->held = TRUE;
      g_main_context_wakeup (NULL);
      while (!h->released)
        g_cond_wait (&h->cond, &h->lock);
    }
  g_mutex_unlock (&h->lock);
}

void
gui_test_hold_start (GuiTestHold *h, HnJobController *c, gboolean (*at) (const HnJobEvent *e, gpointer data),
                     gpointer data)
{
  memset (h, 0, sizeof *h);
  g_mutex_init (&h->lock);
  g_cond_init (&h->cond);
  h->at = at;
  h->data = data;
  h->controller = c;
  hn_job_controller_set_worker_tap (c, hold_tap, h);
}

static gboolean
is_held (gpointer data)
{
  GuiTestHold *h = data;
  g_mutex_lock (&h->lock);
  gboolean held = h->held;
  g_mutex_unlock (&h->lock);
  return held;
}

gboolean
gui_test_hold_wait (GuiTestHold *h, guint timeout_ms)
{
  return gui_test_wait (is_held, h, timeout_ms);
}

void
gui_test_hold_release (GuiTestHold *h)
{
  g_mutex_lock (&h->lock);
  h->released = TRUE;
  g_cond_broadcast (&h->cond);
  g_mutex_unlock (&h->lock);
  /* the worker may still be in the tap: the tap goes once the job is done */
  gui_test_wait (gui_test_not_running, h->controller, 120000);
  hn_job_controller_set_worker_tap (h->controller, NULL, NULL);
  g_mutex_clear (&h->lock);
  g_cond_clear (&h->cond);
}

char *
gui_test_private_hub_cache (void)
{
  char *cache = g_dir_make_tmp ("hn-gui-hub-XXXXXX", NULL);
  g_autofree char *hf_home = g_build_filename (cache, "home", NULL);
  g_setenv ("HF_HUB_CACHE", cache, TRUE);
  g_setenv ("HF_HOME", hf_home, TRUE);
  for (const char *const *v = (const char *const[]) { "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                                      "http_proxy", "https_proxy", NULL };
       *v; v++)
    g_unsetenv (*v);
  return cache;
}

/* Stop at the metric of step 2. */
static gboolean
at_step_2 (const HnJobEvent *e, gpointer data)
{
  return e->type == HN_JOB_EVENT_METRIC && e->metric.step >= 2;
}

void
gui_test_stop_save_resume (HnTrainPage *page, gint64 steps)
{
  HnWindow *win = gui_test_window ();
  HnJobController *c = hn_train_page_get_controller (page);
  const char *out = hn_job_spec_get_string (hn_train_page_get_spec (page), "out-dir");
  GuiTestHold hold;
  gui_test_hold_start (&hold, c, at_step_2, NULL);
  g_assert_true (gtk_widget_activate_action (GTK_WIDGET (page), "page.start", NULL));
  gboolean held = gui_test_hold_wait (&hold, 120000);
  if (held)
    hn_window_save_and_stop_jobs (win);
  gui_test_hold_release (&hold); /* also when the wait failed: the run must not hang */
  g_assert_true (held);
  g_assert_false (hn_job_controller_get_running (c));
  g_autoptr (HnJobRecord) rec = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("stopped run: %s", hn_job_record_get_summary (rec));
  g_assert_cmpint (hn_job_record_get_state (rec), ==, HN_JOB_RECORD_STOPPED);
  const char *ck = hn_job_record_get_resume_from (rec);
  g_assert_nonnull (ck);
  g_assert_true (g_str_has_prefix (ck, out));
  g_autofree char *state = g_build_filename (ck, "trainer_state.json", NULL);
  g_assert_true (g_file_test (state, G_FILE_TEST_EXISTS));
  GArray *stopped = hn_job_record_get_points (rec);
  gint64 stopped_at = g_array_index (stopped, HnJobRecordPoint, stopped->len - 1).step;
  g_assert_cmpint (stopped_at, ==, 2);

  g_autoptr (GError) error = NULL;
  HnJobsPage *jobs = HN_JOBS_PAGE (hn_window_get_page (win, "jobs"));
  g_assert_true (hn_jobs_page_resume_record (jobs, rec, &error));
  g_assert_no_error (error);
  g_assert_true (gui_test_wait (gui_test_not_running, c, 120000));
  g_autoptr (HnJobRecord) again = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_test_message ("resumed run: %s", hn_job_record_get_summary (again));
  g_assert_cmpint (hn_job_record_get_state (again), ==, HN_JOB_RECORD_SUCCEEDED);
  g_assert_nonnull (strstr (hn_job_record_get_command_line (again), "--resume-from-checkpoint"));
  GArray *pts = hn_job_record_get_points (again);
  g_assert_cmpint (g_array_index (pts, HnJobRecordPoint, 0).step, ==, stopped_at + 1);
  g_assert_cmpint (g_array_index (pts, HnJobRecordPoint, pts->len - 1).step, ==, steps);
  hn_job_spec_unset (hn_train_page_get_spec (page), "resume-from-checkpoint");
}

void
gui_test_chat_event (HnJobController *c, const HnJobEvent *e, GuiTestChat *seen)
{
  if (e->type == HN_JOB_EVENT_TURN_END)
    seen->turn_end = TRUE;
  else if (e->type == HN_JOB_EVENT_TOKEN && e->token.token_id >= 0)
    seen->tokens++;
}

gboolean
gui_test_chat_turn_done (gpointer data)
{
  return ((GuiTestChat *) data)->turn_end;
}
