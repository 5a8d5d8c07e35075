/* The subcommand table. Keep entries sorted by name. */
#include "cli.h"

const HnCliCommand hn_cli_commands[] = {
  { NULL, NULL, NULL, NULL }
};
