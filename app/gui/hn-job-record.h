/* HnJobRecord: one row of the job list (running and finished jobs with their
 * final figures), kept in an application-wide GListStore. */
#pragma once
#include <gio/gio.h>

G_BEGIN_DECLS

#define HN_TYPE_JOB_RECORD (hn_job_record_get_type ())
G_DECLARE_FINAL_TYPE (HnJobRecord, hn_job_record, HN, JOB_RECORD, GObject)

typedef enum {
  HN_JOB_RECORD_RUNNING,
  HN_JOB_RECORD_SUCCEEDED,
  HN_JOB_RECORD_FAILED,
  HN_JOB_RECORD_CANCELLED,
  HN_JOB_RECORD_STOPPED,   /* "Stop and save": resumable from hn_job_record_get_resume_from */
} HnJobRecordState;

HnJobRecord *hn_job_record_new (const char *title, const char *command_line);
/* The list every page appends to (newest first). */
GListStore *hn_job_record_list (void);

const char *hn_job_record_get_title (HnJobRecord *self);
const char *hn_job_record_get_command_line (HnJobRecord *self);
HnJobRecordState hn_job_record_get_state (HnJobRecord *self);
/* One line: "Running · step 120 of 500 · loss 2.31" / "Finished in 2 min · loss 1.87" */
const char *hn_job_record_get_summary (HnJobRecord *self);
const char *hn_job_record_get_output_path (HnJobRecord *self);

/* Run history: every finished job (its settings as the CLI line, state,
 * final figures, output) is kept as JSON under the user data dir
 * (~/.local/share/hierarchos-native/history.json) and listed again at the
 * next start. Newest first, at most HN_JOB_HISTORY_MAX entries. */
#define HN_JOB_HISTORY_MAX 200
char *hn_job_history_path (void);
gboolean hn_job_history_save (GListModel *records, const char *path, GError **error);
/* Appends the records of `path` (a missing file is an empty history; a
 * malformed one is an error naming the file). */
gboolean hn_job_history_load (GListStore *store, const char *path, GError **error);
double hn_job_record_get_final_loss (HnJobRecord *self);

void hn_job_record_update (HnJobRecord *self, gint64 step, gint64 total, double loss);
/* The checkpoint a stopped run resumes from (set before hn_job_record_finish), or NULL. */
void hn_job_record_set_resume_from (HnJobRecord *self, const char *dir);
const char *hn_job_record_get_resume_from (HnJobRecord *self);
/* The run's loss curve, kept in the history so runs can be compared:
 * one point per metric event (eval_loss NAN where there was none). */
typedef struct {
  gint64 step;
  double loss, eval_loss;
} HnJobRecordPoint;
void hn_job_record_add_point (HnJobRecord *self, gint64 step, double loss, double eval_loss);
/* HnJobRecordPoint, in step order (never NULL). */
GArray *hn_job_record_get_points (HnJobRecord *self);
void hn_job_record_finish (HnJobRecord *self, HnJobRecordState state, const char *message,
                           const char *output_path, double elapsed_s);

G_END_DECLS
