/* HnJobController: runs the jobs of one page. It hands a copy of the page's
 * spec to the engine's job runner (engine thread pool), queues the worker's
 * events under a mutex and replays them on the main thread from one idle
 * callback at a time ("event" signal; consecutive progress events are
 * coalesced), keeps the job list record, inhibits suspend while running and
 * sends a desktop notification when a job ends while the window is not
 * focused. */
#pragma once
#include <gio/gio.h>

#include "jobs/job.h"

G_BEGIN_DECLS

#define HN_TYPE_JOB_CONTROLLER (hn_job_controller_get_type ())
G_DECLARE_FINAL_TYPE (HnJobController, hn_job_controller, HN, JOB_CONTROLLER, GObject)

HnJobController *hn_job_controller_new (void);
/* Starts a job for `spec`; fails (nothing started) when the spec is not
 * valid or a job is already running. */
gboolean hn_job_controller_start (HnJobController *self, HnJobSpec *spec, GError **error);
/* Cancel: the job ends without saving (the last checkpoint stays). */
void hn_job_controller_stop (HnJobController *self);
/* "Stop and save": a training job writes a checkpoint of the step reached
 * and ends resumable; other jobs are cancelled. */
void hn_job_controller_save_and_stop (HnJobController *self);
gboolean hn_job_controller_get_running (HnJobController *self);
/* The running (or last) job, or NULL. */
HnJob *hn_job_controller_get_job (HnJobController *self);

/* Called on the worker thread with every event of the jobs started after
 * this, before it is queued for the main thread (NULL: none). For a caller
 * that must act at an exact point of a run while it is there: the GUI tests
 * hold a training run at a step until they have asked it to stop. */
void hn_job_controller_set_worker_tap (HnJobController *self, HnJobEventFunc func, gpointer user_data);

/* Signals (main thread):
 *   "started"  ()
 *   "event"    (const HnJobEvent *event)   every event, DONE included
 *   "finished" (gboolean ok, const char *message, const char *output_path) */

G_END_DECLS
