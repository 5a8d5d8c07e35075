/* Perplexity evaluation (see evaluate.h). */
#include "train/evaluate.h"

#include "base/hn-error.h"
#include "base/hn-util.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"

#include <glib/gstdio.h>
#include <math.h>

void
hn_eval_options_init (HnEvalOptions *opts)
{
  *opts = (HnEvalOptions) { .device_index = -1 };
}

/* -log softmax(row)[target], in double so long windows sum without drift. */
static double
row_nll (const float *row, int vocab, int target)
{
  double mx = row[0];
  for (int v = 1; v < vocab; v++)
    mx = MAX (mx, (double) row[v]);
  double sum = 0;
  for (int v = 0; v < vocab; v++)
    sum += exp ((double) row[v] - mx);
  return mx + log (sum) - (double) row[target];
}

gboolean
hn_evaluate_sequence (HnTransformer *model, const int32_t *ids, const int32_t *labels, gsize n, int window,
                      HnEvalResult *res, GCancellable *cancellable, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (model);
  if (window < 2)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "evaluate: the window must hold at least 2 tokens (got %d)",
                   window);
      return FALSE;
    }
  g_autofree float *logits = g_new (float, (gsize) MIN ((gsize) window, MAX (n, 1)) * hp->vocab); // [window, vocab]
  for (gsize start = 0; start + 1 < n; start += (gsize) window)
    {
      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;
      int len = (int) MIN ((gsize) window, n - start);
      if (len < 2)
        break; /* a lone last token has nothing before it in its window */
      gboolean any = FALSE;
      for (int i = 1; i < len && !any; i++)
        any = (labels ? labels[start + i] : ids[start + i]) != -100;
      if (!any)
        continue;
      if (!hn_transformer_logits (model, ids + start, len, logits, error))
        return FALSE;
      res->windows++;
      for (int i = 1; i < len; i++)
        {
          int32_t t = labels ? labels[start + i] : ids[start + i];
          if (t == -100)
            continue;
          if (t < 0 || t >= hp->vocab)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "evaluate: target token %d at position %" G_GSIZE_FORMAT " is outside the model's vocabulary (%d)",
                           t, start + i, hp->vocab);
              return FALSE;
            }
          double nll = row_nll (logits + (gsize) (i - 1) * hp->vocab, hp->vocab, t);
          if (!isfinite (nll))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                           "evaluate: non-finite log-likelihood at position %" G_GSIZE_FORMAT, start + i);
              return FALSE;
            }
          res->nll_sum += nll;
          res->tokens++;
        }
    }
  return TRUE;
}

gboolean
hn_eval_result_finish (HnEvalResult *res, GError **error)
{
  if (res->tokens == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "evaluate: the input has no token to predict");
      return FALSE;
    }
  res->mean_nll = res->nll_sum / (double) res->tokens;
  res->perplexity = exp (res->mean_nll);
  return TRUE;
}

/* Removes the merged model's temporary folder (flat: merge writes files only). */
static void
remove_flat_dir (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  if (d)
    {
      const char *name;
      while ((name = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (dir, name, NULL);
          g_remove (p);
        }
    }
  g_rmdir (dir);
}

static gboolean
evaluate_loaded (const HnEvalOptions *opts, HnTransformer *m, HnTokenizer *tok, HnEvalResult *res,
                 GCancellable *cancellable, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  if (!hn_arch_require_task (hp->arch, HN_TASK_LOGITS, error))
    return FALSE;
  int window = opts->seq_len > 0 ? opts->seq_len : hp->max_positions;
  if (window <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "evaluate: %s/config.json has no max_position_embeddings; give --seq-len", opts->model_dir);
      return FALSE;
    }
  if (hp->max_positions > 0 && window > hp->max_positions)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "evaluate: --seq-len %d is longer than the model's context (%d)", window, hp->max_positions);
      return FALSE;
    }
  if (opts->text_file)
    {
      g_autofree char *text = NULL;
      gsize len = 0;
      if (!hn_file_read_bounded (opts->text_file, HN_MAX_TEXT_BYTES, "text file", &text, &len, error))
        return FALSE;
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      if (!hn_tokenizer_encode (tok, text, (gssize) len, TRUE, ids, error))
        {
          g_prefix_error (error, "%s: ", opts->text_file);
          return FALSE;
        }
      return hn_evaluate_sequence (m, (const int32_t *) ids->data, NULL, ids->len, window, res, cancellable, error);
    }
  HnDatasetOptions dopts;
  hn_dataset_options_init (&dopts);
  dopts.seq_len = (guint) window - 1; /* an example holds seq_len + 1 tokens = one window */
  dopts.pack = FALSE;                 /* one row = one sequence, as a per-row eval does */
  dopts.cancellable = cancellable;
  g_autoptr (HnDataset) ds = hn_dataset_load (opts->eval_file, tok, &dopts, error);
  if (!ds)
    return FALSE;
  for (gsize i = 0; i < hn_dataset_get_n_examples (ds); i++)
    {
      HnExample ex;
      hn_dataset_get_example (ds, i, &ex);
      if (!hn_evaluate_sequence (m, ex.ids, ex.labels, ex.n_tokens, window, res, cancellable, error))
        return FALSE;
    }
  return TRUE;
}

gboolean
hn_evaluate_run (const HnEvalOptions *opts, HnEvalResult *res, GCancellable *cancellable, GError **error)
{
  *res = (HnEvalResult) { 0 };
  if (!opts->model_dir || (!opts->text_file == !opts->eval_file))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "evaluate: a model folder and exactly one of --text-file / --eval-file are required");
      return FALSE;
    }
  if (opts->seq_len < 0 || opts->seq_len == 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "evaluate: --seq-len must be at least 2 (got %d)",
                   opts->seq_len);
      return FALSE;
    }
  g_autofree char *merged = NULL;
  const char *model_dir = opts->model_dir;
  if (opts->lora_adapter_dir)
    {
      /* The inference path has no adapter hook: merge into a temporary copy. */
      merged = g_dir_make_tmp ("hn-eval-merged-XXXXXX", error);
      if (!merged)
        return FALSE;
      if (!hn_lora_merge_model (opts->model_dir, opts->lora_adapter_dir, merged, error))
        {
          remove_flat_dir (merged);
          return FALSE;
        }
      model_dir = merged;
    }
  gboolean ok = FALSE;
  {
    g_autoptr (HnTokenizer) tok = hn_tokenizer_load (opts->model_dir, error);
    g_autoptr (HnVkContext) vk = tok ? hn_vk_context_new (opts->device_index, error) : NULL;
    g_autoptr (HnTransformer) m = vk ? hn_transformer_load (vk, model_dir, error) : NULL;
    if (m)
      ok = evaluate_loaded (opts, m, tok, res, cancellable, error) && hn_eval_result_finish (res, error);
  }
  if (merged)
    remove_flat_dir (merged);
  return ok;
}
