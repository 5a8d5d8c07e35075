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

int
hn_cmd_hierarchos_init (int argc, char **argv)
{
  /* the original project's underscore spellings (--context_dim) parse too */
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("hierarchos-init", argc, argv, &status);
  if (!spec)
    return status;
  const char *tokenizer = hn_job_spec_get_string (spec, "tokenizer-path"), *out = hn_job_spec_get_string (spec, "out-dir");
  gboolean overwrite = hn_job_spec_get_bool (spec, "overwrite-output-dir");
  gint64 seed = hn_job_spec_get_int (spec, "seed"), context_dim = hn_job_spec_get_int (spec, "context-dim");
  g_autoptr (GError) error = NULL;
  {
    /* a fresh model never lands on the tokenizer's folder or over an existing model */
    const HnOutputInput inputs[] = { { "--tokenizer-path", tokenizer } };
    g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
    if (!hn_output_dir_check (out, inputs, G_N_ELEMENTS (inputs), NULL, overwrite, HN_OUTPUT_WRITE_INTO, notes, &error))
      return hn_cli_fail (g_steal_pointer (&error));
    for (guint i = 0; i < notes->len; i++)
      fprintf (stderr, "warning: %s\n", (char *) notes->pdata[i]);
  }
  /* the contract's settings given on the command line; the rest keep the contract's defaults */
  g_autoptr (GPtrArray) ov = g_ptr_array_new_with_free_func (g_free);
  const struct { const char *flag, *setting; } geo[] = {
    { "h-hidden", "h_hidden" }, { "l-hidden", "l_hidden" }, { "rwkv-head-size", "rwkv_head_size" },
    { "ltm-slots", "ltm_slots" }, { "ltm-topk", "ltm_topk" }, { "ltm-key-dim", "ltm_key_dim" },
    { "ltm-val-dim", "ltm_val_dim" }, { "persistent-dim", "persistent_dim" }, { "h-stride", "h_stride" },
    { "max-h-steps", "max_h_steps" }, { "max-l-steps", "max_l_steps" },
    { "training-chunk-size", "training_chunk_size" }, { "training-chunk-size", "reference_chunk_len" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (geo); i++)
    {
      gint64 v = hn_job_spec_get_int (spec, geo[i].flag);
      /* 0 is "the contract's" for every setting but persistent_dim, which may be 0 */
      if (hn_job_spec_is_set (spec, geo[i].flag) && (v > 0 || g_str_equal (geo[i].flag, "persistent-dim")))
        g_ptr_array_add (ov, g_strdup_printf ("%s=%" G_GINT64_FORMAT, geo[i].setting, v));
    }
  for (const char *const *set = hn_job_spec_get_strv (spec, "set"); *set; set++)
    g_ptr_array_add (ov, g_strdup (*set));
  g_ptr_array_add (ov, NULL);
  g_autoptr (HnHierModel) m = hn_hier_init_model_dir (tokenizer, out, context_dim, (const char *const *) ov->pdata,
                                                       (guint64) seed, &error);
  if (!m)
    return hn_cli_fail (g_steal_pointer (&error));
  printf ("%s: Hierarchos %s, vocab %d, context %d, %zu parameters, contract sha256 %s\n", out,
          m->cfg.architecture_revision, m->V, m->C, m->n_params, m->contract_sha256);
  return 0;
}
