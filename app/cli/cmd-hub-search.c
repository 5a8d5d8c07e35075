/* `hub-search [--search TEXT] [--task T] [--sort S] [--library L] [--limit N]
 * [--cursor C] [--local]`: one page of Hub search results, or the local
 * cache's models and the added folders, as JSON on stdout (engine/jobs/hub-job.c runs it). */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_hub_search (int argc, char **argv);

int
hn_cmd_hub_search (int argc, char **argv)
{
  return hn_job_cli_main ("hub-search", argc, argv);
}
