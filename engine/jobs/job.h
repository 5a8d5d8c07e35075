/* Jobs: how the GUI and the CLI run engine work, and how engine code reports
 * back. (The job description itself is HnJobSpec, job-spec.h.)
 *
 * Flow
 *   1. A front end builds an HnJobSpec (GUI widgets, or hn_job_spec_new_from_argv).
 *   2. hn_job_new (spec) copies the spec; the front end sets an event callback.
 *   3. hn_job_run_async () runs the kind's run function on the engine thread
 *      pool (GUI); hn_job_run_sync () runs it on the calling thread (CLI).
 *   4. The run function reads its options from hn_job_get_spec (), checks
 *      hn_job_check_cancelled () between steps/layers, and emits typed events
 *      (hn_job_emit_*). Events reach the callback synchronously on the
 *      worker thread, in order; the GUI copies them (hn_job_event_copy) into a
 *      queue under a mutex and drains it in one idle callback at a time.
 *   5. When the run function returns, the runner emits exactly one DONE event
 *      (ok, error message, output path) and completes the GTask.
 *
 * Plugging in a kind
 *   Write   gboolean hn_thing_job_run (HnJob *job, GError **error);
 *   in engine/jobs/<kind>-job.c (declared in its header), and add one line
 *   to hn_job_register_builtin_kinds () in engine/jobs/job-builtin.c:
 *       hn_job_register_kind ("thing", hn_thing_job_run);
 *   (docs/architecture.md, "Where to add"). A kind without a run
 *   function fails closed: the job ends with HN_ERROR_UNSUPPORTED naming it.
 *   Return FALSE with a GError in HN_ERROR on failure; when cancelled, return
 *   FALSE with HN_ERROR_CANCELLED (hn_job_check_cancelled sets it), after
 *   leaving the last checkpoint intact.
 *
 * CLI
 *   A subcommand for a kind is one line (app/cli/cmd-*.c, with app/cli/job-cli.h):
 *       static int cmd_generate (int argc, char **argv)
 *       { return hn_job_cli_main ("transformer-generate", argc, argv); }
 *   hn_job_cli_main handles --help (generated from the option table),
 *   --json-events, parsing with clear errors, validation, running and
 *   printing events (a progress line on a terminal, JSON lines otherwise
 *   when asked), and the exit status. For chat-like kinds it feeds stdin
 *   lines into the job's input queue.
 */
#pragma once
#include <gio/gio.h>
#include <stdio.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

/* ---- events ----------------------------------------------------------- */

typedef enum {
  HN_JOB_EVENT_PROGRESS, /* where the job is: step of total, rate, ETA */
  HN_JOB_EVENT_METRIC,   /* one optimizer step's training figures */
  HN_JOB_EVENT_TOKEN,    /* a generated piece of text (streaming) */
  HN_JOB_EVENT_LOG,      /* a message for the user */
  HN_JOB_EVENT_TURN_END, /* interactive kinds: the reply to one input is complete */
  HN_JOB_EVENT_DONE,     /* the last event of every job */
} HnJobEventType;

typedef enum {
  HN_PROGRESS_STEPS,  /* optimizer steps */
  HN_PROGRESS_TOKENS, /* generated tokens */
  HN_PROGRESS_BYTES,  /* downloads */
  HN_PROGRESS_ITEMS,  /* anything else counted */
} HnProgressUnit;

typedef enum {
  HN_LOG_DEBUG,
  HN_LOG_INFO,
  HN_LOG_WARNING,
  HN_LOG_ERROR,
} HnLogLevel;

/* Figures not measured are NAN (doubles) or -1 (integers). */
typedef struct {
  gint64 step;
  double epoch;
  double loss;
  double lr;
  double grad_norm;
  double tokens_per_s;
  double elapsed_s;
  double eval_loss;
  double loss_scale;  /* --precision fp16: the loss scale this step's gradients were made with */
} HnJobMetric;

typedef struct {
  HnJobEventType type;
  double time_s; /* seconds since the job started */
  union {
    struct {
      HnProgressUnit unit;
      gint64 step, total; /* total -1: unknown */
      double tokens_per_s;
      double eta_s;       /* NAN until the rate has settled */
      gint64 device_bytes; /* device memory in use, -1: unknown */
    } progress;
    HnJobMetric metric;
    struct {
      char *text;     /* UTF-8 piece, may be "" for a token that completes no character */
      gint32 token_id;
      guint sequence; /* which prompt/sequence (continuous batching, several prompts) */
    } token;
    struct {
      HnLogLevel level;
      char *message;
    } log;
    struct {
      guint n_tokens; /* tokens of the reply */
    } turn_end;
    struct {
      gboolean ok;
      gboolean cancelled;
      char *error_message; /* NULL when ok */
      int error_code;      /* HnErrorCode when !ok */
      char *output_path;   /* what the job wrote, NULL if nothing */
      char *resume_from;   /* stopped and saved: the checkpoint to resume from, else NULL */
    } done;
  };
} HnJobEvent;

HnJobEvent *hn_job_event_copy (const HnJobEvent *event);
void hn_job_event_free (HnJobEvent *event);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnJobEvent, hn_job_event_free)
const char *hn_job_event_type_name (HnJobEventType type); /* "progress", "metric", ... */
/* One JSON object on one line (no newline), for --json-events. NAN fields are
 * left out. */
char *hn_job_event_to_json (const HnJobEvent *event);

/* ---- jobs ------------------------------------------------------------- */

#define HN_TYPE_JOB (hn_job_get_type ())
G_DECLARE_FINAL_TYPE (HnJob, hn_job, HN, JOB, GObject)

typedef gboolean (*HnJobRunFunc) (HnJob *job, GError **error);
/* Called on the thread that runs the job, in order. `event` is valid only
 * during the call: copy what you keep. */
typedef void (*HnJobEventFunc) (HnJob *job, const HnJobEvent *event, gpointer user_data);

/* Registers the run function of a kind (canonical name). Thread-safe;
 * registering a kind twice replaces the function. */
void hn_job_register_kind (const char *kind, HnJobRunFunc func);
gboolean hn_job_kind_is_registered (const char *kind);
/* Registers every kind this build implements (job-builtin.c). Idempotent;
 * the GUI and the CLI call it at start-up. */
void hn_job_register_builtin_kinds (void);

/* A job for a copy of `spec` (later edits of `spec` do not reach the job). */
HnJob *hn_job_new (HnJobSpec *spec);
HnJobSpec *hn_job_get_spec (HnJob *self);          /* the job's own copy; do not modify while running */
GCancellable *hn_job_get_cancellable (HnJob *self); /* never NULL */
void hn_job_cancel (HnJob *self);                   /* thread-safe */
/* "Stop and save" (thread-safe), as opposed to cancel: a kind that
 * checkpoints (hn_job_kind_can_save_and_stop) writes a checkpoint after the
 * current step and ends successfully, with the checkpoint in the DONE
 * event's resume_from. Other kinds ignore the request. */
void hn_job_request_save_and_stop (HnJob *self);
gboolean hn_job_kind_can_save_and_stop (const char *kind);
/* Must be called before the job starts. */
void hn_job_set_event_func (HnJob *self, HnJobEventFunc func, gpointer user_data, GDestroyNotify destroy);

/* Runs on the engine thread pool. `callback` runs on the caller's thread-
 * default main context after the DONE event. `cancellable` (may be NULL) is
 * chained to the job's own. */
void hn_job_run_async (HnJob *self, GCancellable *cancellable, GAsyncReadyCallback callback,
                       gpointer user_data);
gboolean hn_job_run_finish (HnJob *self, GAsyncResult *result, GError **error);
/* Runs on the calling thread (the CLI). */
gboolean hn_job_run_sync (HnJob *self, GError **error);

gboolean hn_job_is_running (HnJob *self);
/* Every job started with hn_job_run_async: cancel them (their input closed)
 * and wait, at most timeout_ms, until their worker threads let go of them
 * (run function returned, job released). A process must not exit while a
 * worker still tears a model or a Vulkan device down: libraries' exit-time
 * destructors would run under it. hn_job_wait_all is FALSE at the timeout. */
void hn_job_cancel_all (void);
gboolean hn_job_wait_all (guint timeout_ms);
/* Seconds since the job started (0 before). */
double hn_job_get_elapsed (HnJob *self);

/* ---- for run functions (call from the job's thread) -------------------- */

/* TRUE once "Stop and save" was asked for. */
gboolean hn_job_save_and_stop_requested (HnJob *self);
/* The checkpoint a stopped job resumes from (reported in DONE as resume_from). */
void hn_job_set_resume_path (HnJob *self, const char *dir);
/* FALSE with HN_ERROR_CANCELLED when the job was cancelled. */
gboolean hn_job_check_cancelled (HnJob *self, GError **error);
void hn_job_emit (HnJob *self, const HnJobEvent *event); /* time_s is filled in */
/* Progress with the rate and ETA computed from the time since the first call
 * (ETA is NAN until 3 steps and 2 seconds have passed, so it does not jump).
 * `tokens_done` is the number of tokens processed so far (-1: unknown). */
void hn_job_emit_progress (HnJob *self, HnProgressUnit unit, gint64 step, gint64 total,
                           gint64 tokens_done);
void hn_job_emit_metric (HnJob *self, const HnJobMetric *metric);
/* Fills every field with NAN / -1, for callers that set a few. */
void hn_job_metric_init (HnJobMetric *metric);
void hn_job_emit_token (HnJob *self, guint sequence, gint32 token_id, const char *text);
void hn_job_emit_turn_end (HnJob *self, guint n_tokens);
void hn_job_log (HnJob *self, HnLogLevel level, const char *format, ...) G_GNUC_PRINTF (3, 4);
/* The folder or file the job wrote; reported in the DONE event. */
void hn_job_set_output_path (HnJob *self, const char *path);
/* Device memory in use, reported with later progress events. */
void hn_job_set_device_bytes (HnJob *self, gint64 bytes);

/* Interactive kinds (chat): the front end pushes user inputs; the run
 * function pops them. hn_job_pop_input blocks until an input arrives, the
 * input is closed (returns NULL, no error) or the job is cancelled (returns
 * NULL with HN_ERROR_CANCELLED). */
void hn_job_push_input (HnJob *self, const char *text);
void hn_job_close_input (HnJob *self);
char *hn_job_pop_input (HnJob *self, GError **error);

G_END_DECLS
