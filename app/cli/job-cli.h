/* The CLI side of jobs (job-cli.c): parse a subcommand's argv into a spec,
 * run it and print its events. Terminal printing and Ctrl-C live here, not
 * in the engine. */
#pragma once
#include "jobs/job.h"

G_BEGIN_DECLS

/* The whole CLI subcommand for a kind; argv[0] is the subcommand name. */
int hn_job_cli_main (const char *kind, int argc, char **argv);
/* Parses argv for `kind` (argv[0] is ignored), handling --help (prints it
 * and sets *exit_status to 0) and --json-events. Returns NULL with
 * *exit_status set (0 after --help, 2 on a usage error, message printed). */
HnJobSpec *hn_job_cli_parse (const char *kind, int argc, char **argv, gboolean *json_events,
                             int *exit_status);

G_END_DECLS
