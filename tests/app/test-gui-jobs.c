/* The Jobs page under Xvfb, over records made here (no training: the runs
 * that Resume and Side by side act on are in test-gui-train.c): two runs'
 * loss curves overlaid on its chart, the curves kept in the history file,
 * and Resume / Side by side refusing runs they do not apply to. */
#include "gui-test.h"
#include "hn-job-record.h"
#include "hn-jobs-page.h"
#include "hn-loss-chart.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

static HnWindow *window;

/* A finished fine-tune record of `n` points, newest in the list. */
static HnJobRecord *
add_run (const char *out, guint n, double scale)
{
  g_autofree char *line = g_strdup_printf ("hierarchos-native-cli transformer-finetune --model-path /m --train /d.jsonl "
                                           "--out-dir %s",
                                           out);
  HnJobRecord *r = hn_job_record_new ("LoRA fine-tuning", line);
  g_list_store_insert (hn_job_record_list (), 0, r);
  for (guint s = 1; s <= n; s++)
    {
      double loss = scale * exp (-(double) s / 8.0) + 1.0;
      hn_job_record_update (r, s, n, loss);
      hn_job_record_add_point (r, s, loss, s % 4 == 0 ? loss + 0.05 : NAN);
    }
  hn_job_record_finish (r, HN_JOB_RECORD_SUCCEEDED, NULL, NULL, 12);
  return r;
}

static void
test_overlay (void)
{
  HnJobsPage *jobs = HN_JOBS_PAGE (hn_window_get_page (window, "jobs"));
  g_assert_true (HN_IS_JOBS_PAGE (jobs));
  HnLossChart *chart = HN_LOSS_CHART (hn_jobs_page_get_chart (jobs));
  g_assert_cmpuint (hn_loss_chart_get_n_series (chart), ==, 0);
  g_autoptr (HnJobRecord) a = add_run ("/runs/a", 16, 3.0);
  g_autoptr (HnJobRecord) b = add_run ("/runs/b", 24, 2.0);
  hn_jobs_page_set_compared (jobs, a, TRUE);
  g_assert_cmpuint (hn_loss_chart_get_n_series (chart), ==, 1);
  hn_jobs_page_set_compared (jobs, b, TRUE);
  g_assert_cmpuint (hn_loss_chart_get_n_series (chart), ==, 2);
  hn_window_show_page (window, "jobs");
  gui_test_screenshot ("history-two-runs");
  hn_jobs_page_set_compared (jobs, a, FALSE);
  g_assert_cmpuint (hn_loss_chart_get_n_series (chart), ==, 1);

  /* the curves are in the history file, so a comparison survives a restart */
  g_autofree char *path = hn_job_history_path ();
  g_autoptr (GListStore) reloaded = g_list_store_new (HN_TYPE_JOB_RECORD);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_job_history_load (reloaded, path, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (g_list_model_get_n_items (G_LIST_MODEL (reloaded)), ==, 2);
  g_autoptr (HnJobRecord) first = g_list_model_get_item (G_LIST_MODEL (reloaded), 0);
  g_assert_cmpuint (hn_job_record_get_points (first)->len, ==, 24);
  g_assert_cmpstr (hn_job_record_get_command_line (first), ==, hn_job_record_get_command_line (b));
}

static void
test_refusals (void)
{
  HnJobsPage *jobs = HN_JOBS_PAGE (hn_window_get_page (window, "jobs"));
  g_autoptr (HnJobRecord) r = g_list_model_get_item (G_LIST_MODEL (hn_job_record_list ()), 0);
  g_autoptr (GError) error = NULL;
  /* finished, not stopped: nothing to resume from */
  g_assert_false (hn_jobs_page_resume_record (jobs, r, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "checkpoint"));
  g_clear_error (&error);
  /* no output folder: nothing to chat with */
  g_assert_false (hn_jobs_page_compare_record (jobs, r, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (adw_view_stack_get_visible_child_name (
                     ADW_VIEW_STACK (gtk_widget_get_ancestor (GTK_WIDGET (jobs), ADW_TYPE_VIEW_STACK))),
                   ==, "jobs");
}

int
main (int argc, char **argv)
{
  gui_test_init (&argc, &argv, "gui-jobs");
  window = gui_test_window ();
  g_test_add_func ("/gui-jobs/overlay", test_overlay);
  g_test_add_func ("/gui-jobs/refusals", test_refusals);
  return gui_test_run ();
}
