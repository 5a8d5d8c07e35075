/* The CLI side of jobs: parse a subcommand's argv into a spec, run it and
 * print its events (a progress line on a terminal, JSON lines with
 * --json-events). Ctrl-C cancels the job between steps; a second Ctrl-C
 * exits at once. */
#include "job-cli.h"
#include "base/hn-error.h"
#include "jobs/memory-estimate.h"

#include <glib-unix.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

HnJobSpec *
hn_job_cli_parse (const char *kind, int argc, char **argv, gboolean *json_events, int *exit_status)
{
  const HnJobKindInfo *info = hn_job_kind_lookup (kind);
  *exit_status = 2;
  if (json_events)
    *json_events = FALSE;
  if (!info)
    {
      fprintf (stderr, "error: unknown job kind '%s'\n", kind);
      return NULL;
    }
  /* Take out the flags that are about printing, not about the job. */
  g_autoptr (GPtrArray) args = g_ptr_array_new ();
  g_ptr_array_add (args, (gpointer) info->name);
  for (int i = 1; i < argc; i++)
    {
      if (strcmp (argv[i], "--help") == 0 || strcmp (argv[i], "-h") == 0)
        {
          hn_job_spec_print_help (info, stdout);
          *exit_status = 0;
          return NULL;
        }
      if (strcmp (argv[i], "--json-events") == 0 || strcmp (argv[i], "--json_events") == 0)
        {
          if (json_events)
            *json_events = TRUE;
          continue;
        }
      g_ptr_array_add (args, argv[i]);
    }
  g_autoptr (GError) error = NULL;
  HnJobSpec *spec = hn_job_spec_new_from_argv ((int) args->len, (const char *const *) args->pdata, &error);
  if (!spec || !hn_job_spec_validate (spec, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      g_clear_object (&spec);
      return NULL;
    }
  *exit_status = 0;
  return spec;
}

typedef struct {
  gboolean json;
  gboolean tty;          /* stderr is a terminal: redraw one progress line */
  gboolean line_pending; /* a progress line is on screen without a newline */
  gboolean interactive;
  gboolean prompt_tty;   /* stdin is a terminal: show a prompt */
  double last_loss;
  GMainLoop *loop;
  gboolean ok;
  gboolean cancelled;
  int sigints;
} Printer;

static void
format_duration (GString *s, double secs)
{
  gint64 t = (gint64) llround (secs);
  if (t >= 3600)
    g_string_append_printf (s, "%" G_GINT64_FORMAT "h %02" G_GINT64_FORMAT "m", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    g_string_append_printf (s, "%" G_GINT64_FORMAT "m %02" G_GINT64_FORMAT "s", t / 60, t % 60);
  else
    g_string_append_printf (s, "%" G_GINT64_FORMAT "s", t);
}

static void
end_progress_line (Printer *p)
{
  if (p->line_pending)
    {
      fputc ('\n', stderr);
      p->line_pending = FALSE;
    }
}

static void
print_event (HnJob *job, const HnJobEvent *e, gpointer user_data)
{
  Printer *p = user_data;
  if (p->json)
    {
      g_autofree char *line = hn_job_event_to_json (e);
      fprintf (stdout, "%s\n", line);
      fflush (stdout);
      return;
    }
  switch (e->type)
    {
    case HN_JOB_EVENT_PROGRESS:
      {
        if (e->progress.unit == HN_PROGRESS_TOKENS && !p->tty)
          break; /* the streamed text says enough when piped */
        GString *s = g_string_new (NULL);
        static const char *const units[] = { "step", "token", "bytes", "item" };
        if (e->progress.total > 0)
          g_string_append_printf (s, "%s %" G_GINT64_FORMAT "/%" G_GINT64_FORMAT, units[e->progress.unit],
                                  e->progress.step, e->progress.total);
        else
          g_string_append_printf (s, "%s %" G_GINT64_FORMAT, units[e->progress.unit], e->progress.step);
        if (isfinite (p->last_loss) && e->progress.unit == HN_PROGRESS_STEPS)
          g_string_append_printf (s, "  loss %.4f", p->last_loss);
        if (isfinite (e->progress.tokens_per_s))
          g_string_append_printf (s, "  %.1f tok/s", e->progress.tokens_per_s);
        if (isfinite (e->progress.eta_s))
          {
            g_string_append (s, "  ETA ");
            format_duration (s, e->progress.eta_s);
          }
        if (p->tty && e->progress.unit != HN_PROGRESS_TOKENS)
          {
            fprintf (stderr, "\r\033[K%s", s->str);
            p->line_pending = TRUE;
          }
        else if (!p->tty)
          fprintf (stderr, "%s\n", s->str);
        g_string_free (s, TRUE);
      }
      break;
    case HN_JOB_EVENT_METRIC:
      p->last_loss = e->metric.loss;
      if (!p->tty)
        {
          fprintf (stderr, "step %" G_GINT64_FORMAT "  loss %.4f", e->metric.step, e->metric.loss);
          if (isfinite (e->metric.lr))
            fprintf (stderr, "  lr %.3g", e->metric.lr);
          if (isfinite (e->metric.grad_norm))
            fprintf (stderr, "  grad_norm %.3g", e->metric.grad_norm);
          if (isfinite (e->metric.eval_loss))
            fprintf (stderr, "  eval_loss %.4f", e->metric.eval_loss);
          if (isfinite (e->metric.loss_scale))
            fprintf (stderr, "  loss_scale %g", e->metric.loss_scale);
          fputc ('\n', stderr);
        }
      break;
    case HN_JOB_EVENT_TOKEN:
      fputs (e->token.text, stdout);
      fflush (stdout);
      break;
    case HN_JOB_EVENT_LOG:
      end_progress_line (p);
      if (e->log.level >= HN_LOG_INFO)
        fprintf (stderr, "%s%s\n",
                 e->log.level == HN_LOG_ERROR ? "error: " : e->log.level == HN_LOG_WARNING ? "warning: " : "",
                 e->log.message);
      break;
    case HN_JOB_EVENT_TURN_END:
      fputc ('\n', stdout);
      fflush (stdout);
      if (p->prompt_tty)
        fputs ("> ", stderr);
      break;
    case HN_JOB_EVENT_DONE:
      end_progress_line (p);
      fflush (stdout);
      if (e->done.ok && e->done.resume_from)
        fprintf (stderr, "Stopped and saved %s (resume with --resume-from-checkpoint %s)\n", e->done.resume_from,
                 e->done.resume_from);
      else if (e->done.ok && e->done.output_path)
        fprintf (stderr, "Wrote %s\n", e->done.output_path);
      else if (e->done.cancelled)
        fprintf (stderr, "Cancelled.\n");
      else if (!e->done.ok)
        fprintf (stderr, "error: %s\n", e->done.error_message);
      break;
    }
}

static gboolean
on_sigint (gpointer user_data)
{
  HnJob *job = user_data;
  static int count;
  gboolean can_save = hn_job_kind_can_save_and_stop (hn_job_spec_get_kind (hn_job_get_spec (job)));
  if (++count > (can_save ? 2 : 1))
    _exit (130);
  if (can_save && count == 1)
    {
      /* Ctrl-C is "Stop and save" for training; a second one cancels without saving */
      fprintf (stderr, "\nSaving a checkpoint after the current step, then stopping (Ctrl-C again to stop without saving)...\n");
      hn_job_request_save_and_stop (job);
      return G_SOURCE_CONTINUE;
    }
  fprintf (stderr, "\nStopping after the current step (Ctrl-C again to quit at once)...\n");
  hn_job_cancel (job);
  return G_SOURCE_CONTINUE;
}

static gpointer
read_stdin (gpointer data)
{
  HnJob *job = data;
  char buf[4096];
  GString *line = g_string_new (NULL);
  while (fgets (buf, sizeof buf, stdin))
    {
      g_string_append (line, buf);
      if (line->len && line->str[line->len - 1] == '\n')
        {
          g_string_truncate (line, line->len - 1);
          hn_job_push_input (job, line->str);
          g_string_truncate (line, 0);
        }
    }
  if (line->len)
    hn_job_push_input (job, line->str);
  g_string_free (line, TRUE);
  hn_job_close_input (job);
  g_object_unref (job);
  return NULL;
}

static void
run_done (GObject *source, GAsyncResult *result, gpointer user_data)
{
  Printer *p = user_data;
  g_autoptr (GError) error = NULL;
  p->ok = hn_job_run_finish (HN_JOB (source), result, &error);
  p->cancelled = error && g_error_matches (error, HN_ERROR, HN_ERROR_CANCELLED);
  g_main_loop_quit (p->loop);
}

/* --dry-run: the memory estimate against the chosen device, nothing run. */
static int
dry_run (HnJobSpec *spec, gboolean json)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) ctx = hn_vk_context_new ((int) hn_job_spec_get_int (spec, "device-index"), &error);
  if (!ctx)
    {
      fprintf (stderr, "warning: no device to compare with: %s\n", error->message);
      g_clear_error (&error);
    }
  HnMemoryEstimate e;
  if (!hn_memory_estimate_for_spec (spec, ctx, &e, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 1;
    }
  if (json)
    {
      g_autoptr (JsonNode) node = hn_memory_estimate_to_json (&e);
      g_autofree char *text = json_to_string (node, FALSE);
      printf ("%s\n", text);
    }
  else
    {
      g_autofree char *text = hn_memory_estimate_to_text (&e);
      fputs (text, stdout);
    }
  hn_memory_estimate_clear (&e);
  return 0;
}

int
hn_job_cli_main (const char *kind, int argc, char **argv)
{
  gboolean json = FALSE, dry = FALSE, dry_json = FALSE;
  int status = 0;
  hn_job_register_builtin_kinds ();
  /* --dry-run (and its --json) are about printing, not about the job */
  g_autoptr (GPtrArray) args = g_ptr_array_new ();
  for (int i = 0; i < argc; i++)
    if (i > 0 && (strcmp (argv[i], "--dry-run") == 0 || strcmp (argv[i], "--dry_run") == 0))
      dry = TRUE;
    else
      g_ptr_array_add (args, argv[i]);
  const HnJobKindInfo *info = hn_job_kind_lookup (kind);
  gboolean kind_has_json = info && info->options && strstr (info->options, " json") != NULL;
  if (dry && !kind_has_json)
    for (guint i = 1; i < args->len; i++)
      if (strcmp (args->pdata[i], "--json") == 0)
        {
          dry_json = TRUE;
          g_ptr_array_remove_index (args, i--);
        }
  g_ptr_array_add (args, NULL);
  g_autoptr (HnJobSpec) spec = hn_job_cli_parse (kind, (int) args->len - 1, (char **) args->pdata, &json, &status);
  if (!spec)
    return status;
  if (dry)
    return dry_run (spec, dry_json || (kind_has_json && hn_job_spec_get_bool (spec, "json")));

  Printer p = { .json = json, .tty = isatty (STDERR_FILENO), .last_loss = NAN };
  /* interactive kinds read their inputs from stdin */
  p.interactive = hn_job_spec_lookup (spec, "carry-chat-state") != NULL;
  p.prompt_tty = p.interactive && !json && isatty (STDIN_FILENO);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, print_event, &p, NULL);
  g_autoptr (GMainContext) ctx = g_main_context_new ();
  g_main_context_push_thread_default (ctx);
  p.loop = g_main_loop_new (ctx, FALSE);
  GSource *sig = g_unix_signal_source_new (SIGINT);
  g_source_set_callback (sig, on_sigint, job, NULL);
  g_source_attach (sig, ctx);
  if (p.interactive)
    {
      if (p.prompt_tty)
        fputs ("> ", stderr);
      g_thread_unref (g_thread_new ("stdin", read_stdin, g_object_ref (job)));
    }
  hn_job_run_async (job, NULL, run_done, &p);
  g_main_loop_run (p.loop);
  g_source_destroy (sig);
  g_source_unref (sig);
  g_main_loop_unref (p.loop);
  g_main_context_pop_thread_default (ctx);
  return p.ok ? 0 : p.cancelled ? 130 : 1;
}
