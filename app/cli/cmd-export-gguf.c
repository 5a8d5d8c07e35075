/* `export-gguf`: a model folder (plus a LoRA adapter, merged) written as a
 * GGUF file llama.cpp and Ollama load; a job kind (engine/jobs/export-job.c)
 * that the GUI's Export runs too. No device is needed. */
#include "cli.h"
#include "job-cli.h"

int hn_cmd_export_gguf (int argc, char **argv);

int
hn_cmd_export_gguf (int argc, char **argv)
{
  return hn_job_cli_main ("export-gguf", argc, argv);
}
