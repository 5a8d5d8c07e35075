/* The CLI's dispatcher and the helpers subcommands share. */
#pragma once
#include <glib.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

typedef struct {
  const char *name;
  const char *const *aliases;  /* NULL-terminated, may be NULL */
  const char *summary;
  int (*run) (int argc, char **argv); /* argv[0] is the subcommand name */
} HnCliCommand;

extern const HnCliCommand hn_cli_commands[];

int hn_cli_main (int argc, char **argv);

/* Parses a command's argv (argv[0] = its name) by its row of hn_command_table
 * (engine/jobs/job-options.c): -h/--help prints the help generated from the
 * option table (*exit_status 0), an unknown, repeated, malformed or missing
 * option prints the error (*exit_status 2); both return NULL. Otherwise the
 * checked spec, whose getters give the typed values. */
HnJobSpec *hn_cli_parse_command (const char *name, int argc, char **argv, int *exit_status);

/* Prints "error: <message>" to stderr and returns the exit status 1. */
int hn_cli_fail (GError *error);

G_END_DECLS
