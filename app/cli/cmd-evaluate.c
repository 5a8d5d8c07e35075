/* `evaluate --model-path DIR [--lora-adapter-path DIR] (--text-file F | --eval-file F.jsonl)
 *  [--seq-len N] [--device-index N] [--json]` prints the perplexity, the mean NLL and
 * the number of predicted tokens: the "evaluate" job kind (engine/jobs/evaluate-job.c; the
 * rules are engine/train/evaluate.h), its options from the job option table. */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_evaluate (int argc, char **argv);

int
hn_cmd_evaluate (int argc, char **argv)
{
  return hn_job_cli_main ("evaluate", argc, argv);
}
