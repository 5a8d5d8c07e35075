/* `evaluate --model-path DIR [--lora-adapter-path DIR] (--text-file F | --eval-file F.jsonl)
 *  [--seq-len N] [--device-index N] [--json]` prints the perplexity, the mean NLL and
 * the number of predicted tokens (see engine/transformer/evaluate.h for the rules). */
#include "cli.h"
#include "base/hn-error.h"
#include "transformer/evaluate.h"

#include <stdio.h>

int hn_cmd_evaluate (int argc, char **argv);

int
hn_cmd_evaluate (int argc, char **argv)
{
  g_autofree char *model = NULL, *adapter = NULL, *text_file = NULL, *eval_file = NULL;
  int device = -1, seq_len = 0;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model-path", 0, 0, G_OPTION_ARG_FILENAME, &model, "Hugging Face model folder", "DIR" },
    { "lora-adapter-path", 0, 0, G_OPTION_ARG_FILENAME, &adapter, "PEFT LoRA adapter folder to merge in", "DIR" },
    { "text-file", 0, 0, G_OPTION_ARG_FILENAME, &text_file, "Plain text to score", "FILE" },
    { "eval-file", 0, 0, G_OPTION_ARG_FILENAME, &eval_file, "JSONL/Parquet rows to score (labels -100 ignored)", "FILE" },
    { "seq-len", 0, 0, G_OPTION_ARG_INT, &seq_len, "Window length (default: the model's context)", "N" },
    { "device-index", 0, 0, G_OPTION_ARG_INT, &device, "Vulkan device (-1: the best one)", "N" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object", NULL },
    { NULL },
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- perplexity of a model (or model + adapter) on a text");
  g_option_context_add_main_entries (ctx, entries, NULL);
  GError *error = NULL;
  if (!hn_cli_check_repeats (entries, argc, argv, &error) || !g_option_context_parse (ctx, &argc, &argv, &error))
    return hn_cli_fail (error);
  if (argc > 1)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "unexpected argument '%s'", argv[1]));
  if (!model || (!text_file == !eval_file))
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                     "--model-path and exactly one of --text-file / --eval-file are required"));
  HnEvalOptions opts;
  hn_eval_options_init (&opts);
  opts.model_dir = model;
  opts.lora_adapter_dir = adapter;
  opts.text_file = text_file;
  opts.eval_file = eval_file;
  opts.seq_len = seq_len;
  opts.device_index = device;
  HnEvalResult res;
  if (!hn_evaluate_run (&opts, &res, NULL, &error))
    return hn_cli_fail (error);
  char ppl[G_ASCII_DTOSTR_BUF_SIZE], nll[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd (ppl, sizeof ppl, "%.9g", res.perplexity);
  g_ascii_formatd (nll, sizeof nll, "%.9g", res.mean_nll);
  if (json)
    printf ("{\"perplexity\": %s, \"mean_nll\": %s, \"tokens\": %" G_GUINT64_FORMAT "}\n", ppl, nll, res.tokens);
  else
    printf ("perplexity %s\nmean_nll   %s\ntokens     %" G_GUINT64_FORMAT "\n", ppl, nll, res.tokens);
  return 0;
}
