/* HnJobsPage: the job history (hn_job_record_list, newest first, kept
 * between sessions). Each row copies its CLI line; a stopped training run
 * resumes from its checkpoint on its page; a finished fine-tune opens side
 * by side with its base model; ticked runs overlay their loss curves on the
 * chart above the list. */
#pragma once
#include <adwaita.h>

#include "hn-job-record.h"

G_BEGIN_DECLS

#define HN_TYPE_JOBS_PAGE (hn_jobs_page_get_type ())
G_DECLARE_FINAL_TYPE (HnJobsPage, hn_jobs_page, HN, JOBS_PAGE, AdwBin)

GtkWidget *hn_jobs_page_new (void);
/* Resume: the run's page continues it from the checkpoint it stopped at
 * (shown). FALSE with a reason when it was not stopped with one. */
gboolean hn_jobs_page_resume_record (HnJobsPage *self, HnJobRecord *record, GError **error);
/* Side by side: the Side-by-side page with the run's --model-path and its
 * output (shown). */
/* Export (the Models page's dialog) for a succeeded training or fine-tune run's output. */
gboolean hn_jobs_page_export_record (HnJobsPage *self, HnJobRecord *record, GError **error);
gboolean hn_jobs_page_compare_record (HnJobsPage *self, HnJobRecord *record, GError **error);
/* Ticks a run's compare box (tests, and the first two runs). */
void hn_jobs_page_set_compared (HnJobsPage *self, HnJobRecord *record, gboolean compared);
GtkWidget *hn_jobs_page_get_chart (HnJobsPage *self);

G_END_DECLS
