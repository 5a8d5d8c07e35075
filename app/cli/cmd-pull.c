/* `pull --repo ID [--revision R] [--repo-type model|dataset] [--include GLOB]`:
 * downloads into the Hugging Face cache (engine/jobs/hub-job.c runs it). */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_pull (int argc, char **argv);

int
hn_cmd_pull (int argc, char **argv)
{
  return hn_job_cli_main ("pull", argc, argv);
}
