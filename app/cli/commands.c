/* The subcommand table. Keep entries sorted by name. */
#include "cli.h"

int hn_cmd_architectures (int argc, char **argv);
int hn_cmd_benchmark (int argc, char **argv);
int hn_cmd_dataset_preview (int argc, char **argv);
int hn_cmd_devices (int argc, char **argv);
int hn_cmd_doctor (int argc, char **argv);
int hn_cmd_evaluate (int argc, char **argv);
int hn_cmd_export_gguf (int argc, char **argv);
int hn_cmd_chat (int argc, char **argv);
int hn_cmd_hierarchos_finetune (int argc, char **argv);
int hn_cmd_hierarchos_init (int argc, char **argv);
int hn_cmd_hierarchos_train (int argc, char **argv);
int hn_cmd_hub_search (int argc, char **argv);
int hn_cmd_pull (int argc, char **argv);
int hn_cmd_tokenize (int argc, char **argv);
int hn_cmd_merge_lora (int argc, char **argv);
int hn_cmd_transformer_finetune (int argc, char **argv);
int hn_cmd_transformer_generate (int argc, char **argv);
int hn_cmd_transformer_logits (int argc, char **argv);
int hn_cmd_transformer_train (int argc, char **argv);

static const char *const generate_aliases[] = { "generate", "infer", NULL };
static const char *const finetune_aliases[] = { "lora", "finetune-lora", NULL };

static const char *const pull_aliases[] = { "download", NULL };

const HnCliCommand hn_cli_commands[] = {
  { "architectures", NULL, "List supported model architectures and tasks", hn_cmd_architectures },
  { "benchmark", NULL, "Time decode, prefill and GEMM on a model or the reference shapes", hn_cmd_benchmark },
  { "chat", NULL, "Chat with a Transformer model (chat template) or a Hierarchos model", hn_cmd_chat },
  { "dataset-preview", NULL, "Show training rows as the trainer sees them: templating, loss mask, tokens", hn_cmd_dataset_preview },
  { "devices", NULL, "List the Vulkan devices (--json for the full report)", hn_cmd_devices },
  { "doctor", NULL, "Check the Vulkan setup, devices, features, shaders and cache folders", hn_cmd_doctor },
  { "evaluate", NULL, "Perplexity of a model (or model + LoRA adapter) on a text or JSONL file", hn_cmd_evaluate },
  { "export-gguf", NULL, "Write a model (and a merged LoRA adapter) as a GGUF file for llama.cpp / Ollama",
    hn_cmd_export_gguf },
  { "hierarchos-finetune", (const char *const[]) { "finetune", NULL },
    "Fine-tune a Hierarchos model (a trainable subset by default)", hn_cmd_hierarchos_finetune },
  { "hierarchos-init", NULL, "Create a fresh Hierarchos model folder from a tokenizer", hn_cmd_hierarchos_init },
  { "hierarchos-train", (const char *const[]) { "train", NULL },
    "Train a Hierarchos model, fresh from a tokenizer or continuing a model", hn_cmd_hierarchos_train },
  { "hub-search", (const char *const[]) { "search", NULL },
    "Search the Hugging Face Hub, or list the local cache (--local), as JSON", hn_cmd_hub_search },
  { "merge-lora", NULL, "Merge a LoRA adapter into its base model (a normal model folder)", hn_cmd_merge_lora },
  { "pull", pull_aliases, "Download a model or dataset from the Hugging Face Hub into the shared cache", hn_cmd_pull },
  { "tokenize", NULL, "Turn text into token ids and back with a model's tokenizer", hn_cmd_tokenize },
  { "transformer-finetune", finetune_aliases, "Fine-tune a Transformer with LoRA adapters (PEFT format)", hn_cmd_transformer_finetune },
  { "transformer-generate", generate_aliases, "Generate text with a Transformer model", hn_cmd_transformer_generate },
  { "transformer-logits", NULL, "Write a Transformer's logits for given token ids", hn_cmd_transformer_logits },
  { "transformer-train", NULL, "Train all weights of a Transformer model", hn_cmd_transformer_train },
  { NULL, NULL, NULL, NULL }
};
