/* hn-bench-hierarchos: a fresh Hierarchos model of a given width on real
 * text: CPU vs Vulkan forward agreement (max |logit diff|), forward and
 * generation tokens/s on both runtimes, and the trainer's tokens/s. One
 * JSON object per line on stdout. Not a test (the smoke test runs it tiny);
 * build-aux/device-check run-hier runs it at the default size (context 448).
 *
 *   hn-bench-hierarchos [--context-dim 448] [--tokens 256] [--gen 128]
 *                       [--train-steps 2] [--batch 4] [--seq-len 128]
 *                       [--chunk 0] [--train-runtime both|cpu|vulkan] [--vocab V]
 * Training runs from the same initial weights on each runtime; "both" also
 * reports how far the two runs' losses are apart.
 * Needs HN_SHARED_DIR (stories260K tokenizer, tinyshakespeare.txt). */
#include "hierarchos/hierarchos.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double
now_s (void)
{
  return (double) g_get_monotonic_time () / 1e6;
}

static void
on_metric (const char *line, gpointer data)
{
  (void) data;
  printf ("{\"bench\":\"hierarchos-train-step\",\"metric\":%s}\n", line);
  fflush (stdout);
}

static int
fail (GError *error)
{
  fprintf (stderr, "hn-bench-hierarchos: %s\n", error->message);
  g_error_free (error);
  return 1;
}

int
main (int argc, char **argv)
{
  gint ctx_dim = 448, n_tok = 256, n_gen = 128, train_steps = 2, batch = 4, seq_len = 128, chunk = 0, vocab = 0;
  g_autofree char *train_rt = NULL;
  GOptionEntry entries[] = {
    { "context-dim", 0, 0, G_OPTION_ARG_INT, &ctx_dim, "Model width (default 448)", "C" },
    { "tokens", 0, 0, G_OPTION_ARG_INT, &n_tok, "Tokens of text for the forward comparison", "N" },
    { "gen", 0, 0, G_OPTION_ARG_INT, &n_gen, "Generated tokens (greedy) per runtime", "N" },
    { "train-steps", 0, 0, G_OPTION_ARG_INT, &train_steps, "Optimizer steps of the trainer (0: skip)", "N" },
    { "batch", 0, 0, G_OPTION_ARG_INT, &batch, "Rows per step", "N" },
    { "seq-len", 0, 0, G_OPTION_ARG_INT, &seq_len, "Tokens per row", "N" },
    { "chunk", 0, 0, G_OPTION_ARG_INT, &chunk, "Tokens per training chunk (0: the whole row)", "N" },
    { "vocab", 0, 0, G_OPTION_ARG_INT, &vocab, "Vocabulary size of the model (0: the tokenizer's; larger: "
      "e.g. GPT-2's 50257, with the text still tokenized by stories260K)", "V" },
    { "train-runtime", 0, 0, G_OPTION_ARG_STRING, &train_rt, "both (default), cpu or vulkan", "RT" },
    { NULL },
  };
  GError *error = NULL;
  g_autoptr (GOptionContext) oc = g_option_context_new (NULL);
  g_option_context_add_main_entries (oc, entries, NULL);
  if (!g_option_context_parse (oc, &argc, &argv, &error))
    return fail (error);
  const char *shared = g_getenv ("HN_SHARED_DIR");
  if (!shared)
    {
      fprintf (stderr, "hn-bench-hierarchos: set HN_SHARED_DIR\n");
      return 2;
    }
  g_autofree char *tp = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *text_path = g_build_filename (shared, "datasets", "tinyshakespeare.txt", NULL);
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tp, &error);
  if (!tok)
    return fail (error);
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_get_contents (text_path, &text, &len, &error))
    return fail (error);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  if (!hn_tokenizer_encode (tok, text, MIN (len, (gsize) 200000), TRUE, ids, &error))
    return fail (error);
  if (ids->len < (guint) MAX (n_tok, 1) + 1)
    {
      fprintf (stderr, "hn-bench-hierarchos: the text has only %u tokens\n", ids->len);
      return 1;
    }

  HnHierConfig cfg;
  hn_hier_config_init_defaults (&cfg, MAX (hn_tokenizer_get_vocab_size (tok), vocab), ctx_dim);
  g_autoptr (HnHierModel) m = hn_hier_model_new (&cfg, &error);
  hn_hier_config_clear (&cfg);
  if (!m)
    return fail (error);
  hn_hier_model_init_weights (m, 1337);
  g_autoptr (HnVkContext) ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    return fail (error);
  g_autoptr (HnHierVkRunner) vk = hn_hier_vk_runner_new (m, ctx, &error);
  if (!vk)
    return fail (error);
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
  printf ("{\"bench\":\"hierarchos-model\",\"device\":\"%s\",\"context_dim\":%d,\"vocab\":%d,\"params\":%" G_GSIZE_FORMAT
          ",\"h_steps\":%" G_GINT64_FORMAT ",\"l_steps\":%" G_GINT64_FORMAT "}\n",
          info->name, m->C, m->V, m->n_params, m->cfg.max_h_steps, m->cfg.max_l_steps);

  /* forward: CPU runtime token by token, Vulkan in chunks */
  gsize V = (gsize) m->V, n = (gsize) n_tok;
  const guint32 *toks = (const guint32 *) ids->data;
  g_autofree float *want = g_new (float, n * V);
  g_autofree float *got = g_new (float, n * V);
  g_autoptr (HnHierRunner) cpu = hn_hier_runner_new (m);
  g_autoptr (HnHierState) sc = hn_hier_state_new (m);
  g_autoptr (HnHierState) sv = hn_hier_state_new (m);
  double t0 = now_s ();
  for (gsize t = 0; t < n; t++)
    if (!hn_hier_runner_step (cpu, sc, toks[t], want + t * V, &error))
      return fail (error);
  double t_cpu = now_s () - t0;
  /* a warm-up call creates the pipelines */
  g_autoptr (HnHierState) warm = hn_hier_state_new (m);
  if (!hn_hier_vk_runner_steps (vk, warm, toks, 4, NULL, NULL, &error))
    return fail (error);
  t0 = now_s ();
  if (!hn_hier_vk_runner_steps (vk, sv, toks, n, got, NULL, &error))
    return fail (error);
  double t_vk = now_s () - t0;
  double worst = 0, scale = 0;
  for (gsize i = 0; i < n * V; i++)
    {
      worst = MAX (worst, fabs ((double) got[i] - want[i]));
      scale = MAX (scale, fabs ((double) want[i]));
    }
  printf ("{\"bench\":\"hierarchos-forward\",\"tokens\":%d,\"max_abs_logit_diff\":%.3g,\"max_abs_logit\":%.3g,"
          "\"cpu_tokens_per_s\":%.1f,\"vulkan_tokens_per_s\":%.1f}\n", n_tok, worst, scale, n / t_cpu, n / t_vk);
  fflush (stdout);

  /* generation: greedy, one token per call (as chat and generate run) */
  g_autofree float *lg = g_new (float, V);
  HnHierState *states[2] = { sc, sv };
  double rate[2];
  guint32 last_tok[2] = { 0, 0 };
  gboolean same = TRUE;
  g_autoptr (GArray) gen0 = g_array_new (FALSE, FALSE, sizeof (guint32));
  for (int r = 0; r < 2; r++)
    {
      memcpy (lg, (r ? got : want) + (n - 1) * V, V * sizeof (float));
      t0 = now_s ();
      for (int i = 0; i < n_gen; i++)
        {
          guint32 id = 0;
          for (gsize j = 1; j < V; j++)
            if (lg[j] > lg[id])
              id = (guint32) j;
          if (r == 0)
            g_array_append_val (gen0, id);
          else if (g_array_index (gen0, guint32, i) != id)
            same = FALSE;
          last_tok[r] = id;
          gboolean ok = r ? hn_hier_vk_runner_steps (vk, states[r], &id, 1, NULL, lg, &error)
                          : hn_hier_runner_step (cpu, states[r], id, lg, &error);
          if (!ok)
            return fail (error);
        }
      rate[r] = n_gen / (now_s () - t0);
    }
  printf ("{\"bench\":\"hierarchos-generate\",\"new_tokens\":%d,\"cpu_tokens_per_s\":%.1f,\"vulkan_tokens_per_s\":%.1f,"
          "\"greedy_tokens_identical\":%s}\n", n_gen, rate[0], rate[1], same ? "true" : "false");
  fflush (stdout);
  (void) last_tok;

  /* the trainers (forward + backward + AdamW) from the same weights */
  gboolean train_ok = TRUE;
  if (train_steps > 0)
    {
      const char *which = train_rt ? train_rt : "both";
      g_autofree float *init = g_memdup2 (m->params, m->n_params * sizeof (float));
      double losses[2] = { NAN, NAN };
      for (int rt = 0; rt < 2; rt++)
        {
          if (!g_str_equal (which, "both") && !g_str_equal (which, rt ? "vulkan" : "cpu"))
            continue;
          memcpy (m->params, init, m->n_params * sizeof (float));
          hn_hier_model_data (m, "memory_gate_warmup_step")[0] = 0;
          g_autofree char *tmp = g_dir_make_tmp ("hn-bench-hier-XXXXXX", &error);
          if (!tmp)
            return fail (error);
          HnHierTrainOptions o;
          hn_hier_train_options_defaults (&o);
          o.out_dir = tmp;
          o.tokens = toks;
          o.n_tokens = ids->len;
          o.batch_size = batch;
          o.max_length = seq_len;
          o.chunk_size = chunk > 0 ? chunk : seq_len;
          o.max_steps = train_steps;
          o.epochs = 1;
          o.quiet = TRUE;
          o.on_metric = on_metric;
          o.vk_ctx = rt ? ctx : NULL;
          t0 = now_s ();
          gboolean ok = hn_hier_train (m, &o, &losses[rt], &error);
          double secs = now_s () - t0;
          hn_folder_remove_tree (tmp);
          if (!ok)
            return fail (error);
          printf ("{\"bench\":\"hierarchos-train\",\"runtime\":\"%s\",\"threads\":%u,\"steps\":%d,\"batch\":%d,"
                  "\"seq_len\":%d,\"chunk\":%d,\"tokens_per_s\":%.1f,\"seconds\":%.2f,\"loss\":%.6f}\n",
                  rt ? "vulkan" : "cpu", rt ? 1 : MIN (g_get_num_processors (), 16u), train_steps, batch, seq_len,
                  o.chunk_size, (double) train_steps * batch * seq_len / secs, secs, losses[rt]);
          fflush (stdout);
        }
      if (g_str_equal (which, "both"))
        {
          double d = fabs (losses[0] - losses[1]);
          printf ("{\"bench\":\"hierarchos-train-agreement\",\"final_loss_cpu\":%.6f,\"final_loss_vulkan\":%.6f,"
                  "\"abs_diff\":%.3g}\n", losses[0], losses[1], d);
          train_ok = d < 2e-3;
        }
    }
  return worst < 1e-4 && same && train_ok ? 0 : 3;
}
