/* Hierarchos subcommands: `hierarchos-train` (alias `train`),
 * `hierarchos-finetune` (alias `finetune`) and `chat` run the shared job
 * kinds; `hierarchos-init` writes a fresh model folder from a tokenizer. */
#include "cli.h"
#include "base/hn-error.h"
#include "job-cli.h"
#include "hierarchos/hierarchos.h"
#include "base/hn-folder.h"

#include <stdio.h>
#include <string.h>

int hn_cmd_chat (int argc, char **argv);
int hn_cmd_hierarchos_finetune (int argc, char **argv);
int hn_cmd_hierarchos_init (int argc, char **argv);
int hn_cmd_hierarchos_train (int argc, char **argv);

int
hn_cmd_chat (int argc, char **argv)
{
  return hn_job_cli_main ("chat", argc, argv);
}

int
hn_cmd_hierarchos_train (int argc, char **argv)
{
  return hn_job_cli_main ("hierarchos-train", argc, argv);
}

int
hn_cmd_hierarchos_finetune (int argc, char **argv)
{
  return hn_job_cli_main ("hierarchos-finetune", argc, argv);
}

/* The original project's flags are spelled with underscores
 * (--context_dim); GOption wants one spelling, so flag names are
 * normalised to hyphens before parsing (values are left alone). */
static void
normalise_flag (char *arg)
{
  if (!g_str_has_prefix (arg, "--"))
    return;
  for (char *p = arg + 2; *p && *p != '='; p++)
    if (*p == '_')
      *p = '-';
}

int
hn_cmd_hierarchos_init (int argc, char **argv)
{
  g_autofree char *tokenizer = NULL, *out = NULL;
  gint64 seed = 1337, context_dim = 448;
  gboolean overwrite = FALSE;
  int h_hidden = 0, l_hidden = 0, head = 0, slots = 0, pdim = -1, topk = 0, keydim = 0, valdim = 0;
  int stride = 0, max_h = 0, max_l = 0, chunk = 0;
  g_auto (GStrv) sets = NULL;
  GOptionEntry entries[] = {
    { "tokenizer-path", 't', 0, G_OPTION_ARG_FILENAME, &tokenizer, "Tokenizer file or folder (any Hugging Face tokenizer)", "PATH" },
    { "out-dir", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Model folder to create", "DIR" },
    { "overwrite-output-dir", 0, 0, G_OPTION_ARG_NONE, &overwrite,
      "Write into --out-dir even when it already holds files (those of the same names are replaced)", NULL },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Initialisation seed (1337)", "N" },
    { "context-dim", 0, 0, G_OPTION_ARG_INT64, &context_dim, "Context width C (448)", "N" },
    { "h-hidden", 0, 0, G_OPTION_ARG_INT, &h_hidden, "Manager width (must equal C)", "N" },
    { "l-hidden", 0, 0, G_OPTION_ARG_INT, &l_hidden, "Worker width (C)", "N" },
    { "rwkv-head-size", 0, 0, G_OPTION_ARG_INT, &head, "RWKV head size (64; divides the widths)", "N" },
    { "ltm-slots", 0, 0, G_OPTION_ARG_INT, &slots, "Long-term memory slots (1024)", "N" },
    { "ltm-topk", 0, 0, G_OPTION_ARG_INT, &topk, "Memory slots read per token (4)", "N" },
    { "ltm-key-dim", 0, 0, G_OPTION_ARG_INT, &keydim, "Memory key size (128)", "N" },
    { "ltm-val-dim", 0, 0, G_OPTION_ARG_INT, &valdim, "Memory value size (128)", "N" },
    { "persistent-dim", 0, 0, G_OPTION_ARG_INT, &pdim, "Persistent vector size (128)", "N" },
    { "h-stride", 0, 0, G_OPTION_ARG_INT, &stride, "Manager stride (4)", "N" },
    { "max-h-steps", 0, 0, G_OPTION_ARG_INT, &max_h, "Most manager ponder steps (5)", "N" },
    { "max-l-steps", 0, 0, G_OPTION_ARG_INT, &max_l, "Most worker refinement steps (5)", "N" },
    { "training-chunk-size", 0, 0, G_OPTION_ARG_INT, &chunk, "Truncated-BPTT chunk recorded in the contract (256)", "N" },
    { "set", 0, 0, G_OPTION_ARG_STRING_ARRAY, &sets, "Any contract setting, e.g. --set drift_norm_clamp=2 (repeatable)",
      "NAME=VALUE" },
    { NULL },
  };
  for (int i = 1; i < argc; i++)
    normalise_flag (argv[i]);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- create a fresh Hierarchos coherent-v9 model folder");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) error = NULL;
  if (!hn_cli_check_repeats (entries, argc, argv, &error) || !g_option_context_parse (ctx, &argc, &argv, &error))
    {
      fprintf (stderr, "error: %s\n", error->message);
      return 2;
    }
  if (!tokenizer || !out)
    {
      fprintf (stderr, "error: --tokenizer-path and --out-dir are required\n");
      return 2;
    }
  {
    /* a fresh model never lands on the tokenizer's folder or over an existing model */
    const HnOutputInput inputs[] = { { "--tokenizer-path", tokenizer } };
    g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
    if (!hn_output_dir_check (out, inputs, G_N_ELEMENTS (inputs), NULL, overwrite, HN_OUTPUT_WRITE_INTO, notes, &error))
      return hn_cli_fail (g_steal_pointer (&error));
    for (guint i = 0; i < notes->len; i++)
      fprintf (stderr, "warning: %s\n", (char *) notes->pdata[i]);
  }
  g_autoptr (GPtrArray) ov = g_ptr_array_new_with_free_func (g_free);
  const struct { const char *name; int v; gboolean set; } geo[] = {
    { "h_hidden", h_hidden, h_hidden > 0 }, { "l_hidden", l_hidden, l_hidden > 0 },
    { "rwkv_head_size", head, head > 0 }, { "ltm_slots", slots, slots > 0 }, { "ltm_topk", topk, topk > 0 },
    { "ltm_key_dim", keydim, keydim > 0 }, { "ltm_val_dim", valdim, valdim > 0 },
    { "persistent_dim", pdim, pdim >= 0 }, { "h_stride", stride, stride > 0 }, { "max_h_steps", max_h, max_h > 0 },
    { "max_l_steps", max_l, max_l > 0 }, { "training_chunk_size", chunk, chunk > 0 },
    { "reference_chunk_len", chunk, chunk > 0 },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (geo); i++)
    if (geo[i].set)
      g_ptr_array_add (ov, g_strdup_printf ("%s=%d", geo[i].name, geo[i].v));
  for (int i = 0; sets && sets[i]; i++)
    g_ptr_array_add (ov, g_strdup (sets[i]));
  g_ptr_array_add (ov, NULL);
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tokenizer, out, context_dim, (const char *const *) ov->pdata,
                                                       (guint64) seed, &error);
  if (!m)
    return hn_cli_fail (g_steal_pointer (&error));
  printf ("%s: Hierarchos %s, vocab %d, context %d, %zu parameters, contract sha256 %s\n", out,
          m->cfg.architecture_revision, m->V, m->C, m->n_params, m->contract_sha256);
  return 0;
}
