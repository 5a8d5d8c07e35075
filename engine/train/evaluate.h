/* Perplexity of a Transformer (optionally with a LoRA adapter merged in) on a
 * text file or a JSONL dataset, computed as transformers does:
 *
 *   text:  the whole file is tokenized once with the special tokens the
 *          tokenizer config adds (BOS...), then cut into non-overlapping
 *          windows of `window` tokens (the model's max_position_embeddings,
 *          or seq_len); within a window every token after the first is
 *          predicted from the ones before it (labels = input_ids).
 *   JSONL: rows go through data/dataset.h unpacked (one row = one example, cut
 *          to the window), so labels of -100 (prompt masking, TOKENS rows)
 *          are ignored.
 *
 * mean_nll is the mean negative log-likelihood (natural log) over all
 * predicted tokens; perplexity = exp(mean_nll). */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

#include "transformer/transformer.h"

G_BEGIN_DECLS

typedef struct {
  double nll_sum;      /* sum of -log p(target) over predicted tokens */
  guint64 tokens;      /* predicted tokens */
  double mean_nll;
  double perplexity;
  guint64 windows;     /* forward passes */
} HnEvalResult;

/* Adds the NLL of one sequence to `res` (nll_sum, tokens, windows): positions
 * [0, n) in non-overlapping windows of `window` tokens; `labels` may be NULL
 * (labels = ids), else labels[i] is the target predicted from ids[0..i-1] and
 * -100 means none (transformers' convention; labels[0] is never predicted,
 * nor is the first token of each window). */
gboolean hn_evaluate_sequence (HnTransformer *model, const int32_t *ids, const int32_t *labels, gsize n,
                               int window, HnEvalResult *res, GCancellable *cancellable, GError **error);

/* Fills mean_nll and perplexity from nll_sum / tokens (no tokens: an error). */
gboolean hn_eval_result_finish (HnEvalResult *res, GError **error);

typedef struct {
  const char *model_dir;
  const char *lora_adapter_dir;  /* NULL: base model only; else merged into a temporary copy */
  const char *text_file;         /* exactly one of text_file / eval_file */
  const char *eval_file;         /* .jsonl/.json/.parquet rows (data/dataset.h) */
  int seq_len;                   /* 0: the model's max_position_embeddings */
  int device_index;              /* -1: the best device */
} HnEvalOptions;

void hn_eval_options_init (HnEvalOptions *opts);

/* Loads everything, evaluates, frees. */
gboolean hn_evaluate_run (const HnEvalOptions *opts, HnEvalResult *res, GCancellable *cancellable, GError **error);

G_END_DECLS
