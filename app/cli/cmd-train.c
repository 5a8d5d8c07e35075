/* `transformer-train`, `transformer-finetune` (LoRA) and `merge-lora`, job
 * kinds: the job layer parses the flags into the spec the GUI edits, runs
 * the trainer (or the merge, engine/jobs/export-job.c) and prints its events
 * (a progress line with loss, tokens/s and ETA on a terminal, JSON lines
 * with --json-events). */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_transformer_train (int argc, char **argv);
int hn_cmd_transformer_finetune (int argc, char **argv);
int hn_cmd_merge_lora (int argc, char **argv);

int
hn_cmd_transformer_train (int argc, char **argv)
{
  return hn_job_cli_main ("transformer-train", argc, argv);
}

int
hn_cmd_transformer_finetune (int argc, char **argv)
{
  return hn_job_cli_main ("transformer-finetune", argc, argv);
}

int
hn_cmd_merge_lora (int argc, char **argv)
{
  return hn_job_cli_main ("merge-lora", argc, argv);
}
