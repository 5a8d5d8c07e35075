/* The subcommand table. Keep entries sorted by name. */
#include "cli.h"

int hn_cmd_architectures (int argc, char **argv);
int hn_cmd_dataset_preview (int argc, char **argv);
int hn_cmd_devices (int argc, char **argv);
int hn_cmd_doctor (int argc, char **argv);
int hn_cmd_pull (int argc, char **argv);
int hn_cmd_tokenize (int argc, char **argv);
int hn_cmd_transformer_generate (int argc, char **argv);
int hn_cmd_transformer_logits (int argc, char **argv);

static const char *const generate_aliases[] = { "generate", "infer", NULL };

static const char *const pull_aliases[] = { "download", NULL };

const HnCliCommand hn_cli_commands[] = {
  { "architectures", NULL, "List supported model architectures and tasks", hn_cmd_architectures },
  { "dataset-preview", NULL, "Show training rows as the trainer sees them: templating, loss mask, tokens", hn_cmd_dataset_preview },
  { "devices", NULL, "List the Vulkan devices (--json for the full report)", hn_cmd_devices },
  { "doctor", NULL, "Check the Vulkan setup, devices, features, shaders and cache folders", hn_cmd_doctor },
  { "pull", pull_aliases, "Download a model or dataset from the Hugging Face Hub into the shared cache", hn_cmd_pull },
  { "tokenize", NULL, "Turn text into token ids and back with a model's tokenizer", hn_cmd_tokenize },
  { "transformer-generate", generate_aliases, "Generate text with a Transformer model", hn_cmd_transformer_generate },
  { "transformer-logits", NULL, "Write a Transformer's logits for given token ids", hn_cmd_transformer_logits },
  { NULL, NULL, NULL, NULL }
};
