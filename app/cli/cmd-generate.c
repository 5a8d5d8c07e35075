/* `transformer-generate` (aliases generate, infer): the job kind's CLI. The
 * job layer parses the flags into the same spec the GUI edits, runs the job
 * and prints its events: the text streams on stdout, tokens/s on stderr. */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_transformer_generate (int argc, char **argv);

int
hn_cmd_transformer_generate (int argc, char **argv)
{
  return hn_job_cli_main ("transformer-generate", argc, argv);
}
