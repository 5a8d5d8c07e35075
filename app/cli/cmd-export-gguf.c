/* `export-gguf`: a model folder (plus a LoRA adapter, merged) written as a
 * GGUF file llama.cpp and Ollama load. No device is needed. */
#include <stdio.h>

#include "cli.h"
#include "base/hn-error.h"
#include "train/gguf-export.h"

int hn_cmd_export_gguf (int argc, char **argv);

int
hn_cmd_export_gguf (int argc, char **argv)
{
  g_autofree char *model = NULL, *adapter = NULL, *out = NULL, *outtype = NULL;
  gboolean adapter_only = FALSE;
  GOptionEntry entries[] = {
    { "model-path", 0, 0, G_OPTION_ARG_FILENAME, &model, "The model folder", "DIR" },
    { "lora-adapter-path", 0, 0, G_OPTION_ARG_FILENAME, &adapter, "A PEFT adapter to merge in first", "DIR" },
    { "outtype", 0, 0, G_OPTION_ARG_STRING, &outtype, "f32, f16 (default), bf16, q8_0, q4_0, q4_k_m or q6_k", "TYPE" },
    { "out", 0, 0, G_OPTION_ARG_FILENAME, &out, "The .gguf file to write", "FILE" },
    { "adapter-only", 0, 0, G_OPTION_ARG_NONE, &adapter_only,
      "Write the LoRA adapter alone as a GGUF adapter (llama.cpp --lora) instead of the merged model", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) oc = g_option_context_new ("- write a model as a GGUF file for llama.cpp / Ollama");
  g_option_context_add_main_entries (oc, entries, NULL);
  g_option_context_set_summary (oc, "Writes the (merged) model with its tokenizer, special ids and chat template; "
                                "matrices in the chosen type, norms and biases in f32.");
  g_autoptr (GError) error = NULL;
  if (!g_option_context_parse (oc, &argc, &argv, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 2;
    }
  if (!model || !out)
    {
      fprintf (stderr, "error: export-gguf needs --model-path and --out\n");
      return 2;
    }
  if (adapter_only)
    {
      if (!adapter)
        {
          fprintf (stderr, "error: --adapter-only needs --lora-adapter-path\n");
          return 2;
        }
      if (!hn_gguf_export_lora (model, adapter, out, &error))
        return hn_cli_fail (g_steal_pointer (&error));
      printf ("%s\n", out);
      return 0;
    }
  HnGgufOutType type = HN_GGUF_OUT_F16;
  if (outtype && !hn_gguf_outtype_from_string (outtype, &type, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 2;
    }
  if (!hn_gguf_export (model, adapter, type, out, &error))
    return hn_cli_fail (g_steal_pointer (&error));
  printf ("%s\n", out);
  return 0;
}
