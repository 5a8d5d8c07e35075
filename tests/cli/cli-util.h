/* Runs the real hierarchos-native-cli ($HN_BUILD_DIR/app/cli) as a user
 * would, for the CLI tests. */
#pragma once
#include <glib.h>

/* argv after the program name, NULL-terminated; envp NULL keeps ours.
 * Returns stdout; *err gets stderr and *status the wait status. */
char *cli_run_env (int *status, char **err, const char *const *envp, ...) G_GNUC_NULL_TERMINATED;
#define cli_run(status, err, ...) cli_run_env (status, err, NULL, __VA_ARGS__)
