/* `transformer-train`, `transformer-finetune` (LoRA) and `merge-lora`. The
 * first two are job kinds: the job layer parses the flags into the spec the
 * GUI edits, runs the trainer and prints its events (a progress line with
 * loss, tokens/s and ETA on a terminal, JSON lines with --json-events). */
#include <stdio.h>

#include "cli.h"
#include "base/hn-error.h"
#include "job-cli.h"
#include "jobs/train-job.h"

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
  g_autofree char *model = NULL, *adapter = NULL, *out = NULL;
  gboolean overwrite = FALSE;
  GOptionEntry entries[] = {
    { "model-path", 0, 0, G_OPTION_ARG_FILENAME, &model, "The base model folder", "DIR" },
    { "lora-adapter-path", 0, 0, G_OPTION_ARG_FILENAME, &adapter, "The PEFT adapter folder", "DIR" },
    { "out-dir", 0, 0, G_OPTION_ARG_FILENAME, &out, "Where the merged model is written", "DIR" },
    { "overwrite-output-dir", 0, 0, G_OPTION_ARG_NONE, &overwrite,
      "Replace --out-dir when it already exists (never the model's or the adapter's folder)", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) oc = g_option_context_new ("- merge a LoRA adapter into its base model");
  g_option_context_add_main_entries (oc, entries, NULL);
  g_option_context_set_summary (oc, "Writes base weights + scaling·B·A as a normal Hugging Face model folder.");
  g_autoptr (GError) error = NULL;
  if (!hn_cli_check_repeats (entries, argc, argv, &error) || !g_option_context_parse (oc, &argc, &argv, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 2;
    }
  if (!model || !adapter || !out)
    {
      fprintf (stderr, "error: merge-lora needs --model-path, --lora-adapter-path and --out-dir\n");
      return 2;
    }
  g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
  gboolean ok = hn_merge_lora_run (model, adapter, out, overwrite, notes, &error);
  for (guint i = 0; i < notes->len; i++)
    fprintf (stderr, "warning: %s\n", (char *) notes->pdata[i]);
  if (!ok)
    return hn_cli_fail (g_steal_pointer (&error));
  printf ("%s\n", out);
  return 0;
}
