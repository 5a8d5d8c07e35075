/* Training datasets: JSONL/NDJSON (and JSON array) rows of the shapes Hugging
 * Face users have, or a plain .txt file, tokenized into examples with loss
 * labels, and a batch iterator with a cursor for exact resume.
 *
 * Row shapes (HnDatasetShape), detected from the first row unless forced:
 *   TEXT              {"text": ...} or {"content": ...}            all tokens trained
 *   INSTRUCTION       {"instruction", "input"?, "output"}          Alpaca prompt, loss on output
 *   PROMPT_COMPLETION {"prompt", "completion"}                     loss on completion
 *   QA                {"question", "answer"}                       "Question: q\nAnswer: " + a
 *   MESSAGES          {"messages": [{role, content}...], "tools"?} rendered with the chat
 *                     template; loss on assistant turns only ({"conversations": [{from, value}]}
 *                     in ShareGPT form is accepted too: human/gpt/system)
 *   TOKENS            {"input_ids": [...], "labels"?, "attention_mask"?, "loss_weights"?}
 *                     used as given (labels default to input_ids, -100 = no loss; positions
 *                     with attention_mask 0 are removed; no BOS/EOS added)
 * Text shapes get BOS when the tokenizer adds one (add_bos_token / post-processor) and
 * EOS appended (opts.add_eos). Chat-templated rows are tokenized as transformers does
 * (the template writes the special tokens; nothing is added); the trained spans are
 * the assistant turns as hn_chat_template_apply() reports them ({% generation %}
 * blocks when the template has them). Each row's text is tokenized as ONE string, as
 * the model sees it; where the loss switches on or off is found by tokenizing the
 * text before that point (plus a probe character, so SentencePiece's stripping and
 * word-start markers do not move it); a token straddling the point is trained.
 *
 * Alpaca prompt (Stanford Alpaca), with input:
 *   "Below is an instruction that describes a task, paired with an input that provides
 *    further context. Write a response that appropriately completes the request.\n\n
 *    ### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
 * without input: "Below is an instruction that describes a task. Write a response that
 *   appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
 *
 * Examples and labels (transformers convention): an example is n <= seq_len + 1
 * tokens; labels[i] is the target of position i-1 (the model is trained to
 * predict labels[i] from ids[0..i-1]); -100 means no loss there. Longer rows
 * are truncated to seq_len + 1 tokens (counted in stats); a row with nothing
 * left to learn is dropped (counted, with the reason).
 *
 * Packing (opts.pack, default on): TEXT rows and .txt files are concatenated
 * into one token stream (BOS/EOS per document as above) and cut into windows
 * of seq_len + 1 tokens that overlap by one token, so every token after the
 * first is a target exactly once (llm.c's data loader does this). A .txt file
 * is one document and is always packed. The stream is held once: the rows are
 * tokenized straight onto it and the windows point into it (each keeps only
 * its labels), so a packed load takes about 8 bytes per token. Other shapes are never packed: one
 * row = one example, padded in the batch.
 *
 * Batches (HnBatch) are already shifted for next-token prediction:
 *   inputs[b][t]  = ids[t]                      [batch, seq_len], pad_id past the end
 *   targets[b][t] = labels[t + 1]               [batch, seq_len], -100 past the end
 *   weights[b][t] = loss weight of that target  (0 where the target is -100)
 * Order: the examples in a fixed permutation per epoch: Fisher-Yates driven by
 * xoshiro256** seeded through splitmix64 from (seed + epoch * 0x9E3779B97F4A7C15);
 * without shuffling, file order. A batch always holds batch_size examples and
 * may run into the next epoch. The cursor (epoch, index of the next example in
 * that epoch's order) restores the exact same sequence of batches.
 *
 * Malformed rows (bad JSON, missing or mistyped fields, invalid UTF-8, token
 * ids out of range) are errors naming the file and line (HN_ERROR_CORRUPT);
 * with HN_DATASET_ON_ERROR_SKIP they are skipped and counted instead. */
#pragma once
#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

G_BEGIN_DECLS

typedef enum {
  HN_DATASET_SHAPE_AUTO,
  HN_DATASET_SHAPE_TEXT,
  HN_DATASET_SHAPE_INSTRUCTION,
  HN_DATASET_SHAPE_PROMPT_COMPLETION,
  HN_DATASET_SHAPE_QA,
  HN_DATASET_SHAPE_MESSAGES,
  HN_DATASET_SHAPE_TOKENS,
} HnDatasetShape;

/* "auto", "text", "instruction", "prompt-completion", "qa", "messages", "tokens" */
const char *hn_dataset_shape_to_string (HnDatasetShape shape);
/* Accepts the names above (also "alpaca", "chat", "pretokenized"). */
gboolean hn_dataset_shape_from_string (const char *name, HnDatasetShape *shape, GError **error);

typedef enum {
  HN_DATASET_ON_ERROR_FAIL,  /* the first malformed row fails the load (default) */
  HN_DATASET_ON_ERROR_SKIP,  /* malformed rows are skipped and counted */
} HnDatasetOnError;

typedef struct {
  HnDatasetShape shape;           /* AUTO */
  guint seq_len;                  /* 256; examples hold at most seq_len + 1 tokens */
  gboolean pack;                  /* TRUE: pack TEXT rows (see above) */
  gboolean mask_prompt;           /* TRUE: no loss on prompt/user/system tokens */
  gboolean add_eos;               /* TRUE: append EOS to text-shaped rows */
  HnDatasetOnError on_error;      /* FAIL */
  const char *chat_template;      /* NULL: the tokenizer's chat_template */
  JsonObject *chat_template_kwargs; /* extra template variables (enable_thinking...), or NULL */
  guint64 max_rows;               /* 0: all rows; else stop after this many non-empty rows */
  GCancellable *cancellable;      /* checked between rows: HN_ERROR_CANCELLED; may be NULL */
  gint32 vocab_size;              /* without a tokenizer: the model's vocabulary, which bounds the ids */
} HnDatasetOptions;

void hn_dataset_options_init (HnDatasetOptions *opts);

typedef struct {
  HnDatasetShape shape;         /* the shape used (detected or forced) */
  guint64 rows_read;            /* non-empty rows seen */
  guint64 rows_used;            /* rows that produced tokens */
  guint64 rows_skipped;         /* malformed rows skipped (on_error = SKIP) */
  guint64 rows_truncated;       /* rows cut to seq_len + 1 tokens */
  guint64 rows_dropped;         /* rows with nothing to learn (empty, all masked) */
  guint64 n_examples;
  guint64 n_tokens;             /* tokens in all examples */
  guint64 n_target_tokens;      /* tokens with a loss (labels != -100, first position excluded) */
  char first_skip_reason[256];  /* "FILE:LINE: problem" of the first skipped row, or "" */
  char first_drop_reason[256];  /* the first dropped row's reason, or "" */
} HnDatasetStats;

typedef struct {
  guint n_tokens;
  const int32_t *ids;     /* [n_tokens] */
  const int32_t *labels;  /* [n_tokens], -100 = no loss */
  const float *weights;   /* [n_tokens], weight of labels[i]; NULL when every weight is the
                             default (1 where labels[i] != -100, else 0) */
} HnExample;

typedef struct _HnDataset HnDataset;

/* Loads and tokenizes `path` (.jsonl/.ndjson, .json array, .parquet, .txt; anything else is read
 * as JSONL). `opts` may be NULL (defaults). */
/* `tok` may be NULL (a model folder without tokenizer files, as transformers'
 * Trainer allows): then only TOKENS rows load, their ids bounded by
 * opts->vocab_size; a text row, a .txt file or a chat row is an error
 * (HN_ERROR_UNSUPPORTED) that says a tokenizer is needed. */
HnDataset *hn_dataset_load (const char *path, HnTokenizer *tok, const HnDatasetOptions *opts, GError **error);
void hn_dataset_free (HnDataset *ds);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnDataset, hn_dataset_free)

gsize hn_dataset_get_n_examples (HnDataset *ds);
/* Pointers into the dataset, valid while it lives. */
void hn_dataset_get_example (HnDataset *ds, gsize index, HnExample *out);
const HnDatasetStats *hn_dataset_get_stats (HnDataset *ds);
guint hn_dataset_get_seq_len (HnDataset *ds);

/* Holds out round(n * eval_fraction) examples (at least 1 when the fraction is
 * > 0 and n >= 2), chosen by the seeded permutation; both parts keep file order. */
gboolean hn_dataset_split (HnDataset *ds, double eval_fraction, guint64 seed,
                           HnDataset **train_out, HnDataset **eval_out, GError **error);

typedef struct {
  guint batch_size;
  guint seq_len;
  int32_t *inputs;          /* [batch_size, seq_len] */
  int32_t *targets;         /* [batch_size, seq_len], -100 = no loss */
  float *weights;           /* [batch_size, seq_len] */
  int32_t *attention_mask;  /* [batch_size, seq_len], 1 = real token */
  guint64 *example_index;   /* [batch_size] which examples */
  guint n_targets;          /* targets != -100 in the batch */
} HnBatch;

typedef struct {
  guint64 epoch;
  guint64 index;  /* next example within the epoch's order */
} HnDatasetCursor;

typedef struct _HnDatasetIter HnDatasetIter;

/* `ds` must outlive the iterator. pad_id: the tokenizer's pad id, else EOS, else 0. */
HnDatasetIter *hn_dataset_iter_new (HnDataset *ds, guint batch_size, gboolean shuffle, guint64 seed,
                                    int32_t pad_id, GError **error);
void hn_dataset_iter_free (HnDatasetIter *it);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnDatasetIter, hn_dataset_iter_free)
/* Fills and returns the next batch (owned by the iterator, valid until the next call). */
const HnBatch *hn_dataset_iter_next (HnDatasetIter *it);
void hn_dataset_iter_get_cursor (HnDatasetIter *it, HnDatasetCursor *cursor);
gboolean hn_dataset_iter_set_cursor (HnDatasetIter *it, const HnDatasetCursor *cursor, GError **error);

/* Preview of the first rows as the trainer will see them. */
typedef struct {
  char *text;         /* segments over 4000 bytes are cut, ending "… [N more bytes]" */
  gboolean trained;   /* FALSE: loss-masked (prompt) */
} HnDatasetSegment;

typedef struct {
  guint64 line;            /* 1-based line (element for .json, row for .parquet, 0 for .txt) */
  GArray *segments;        /* HnDatasetSegment: the rendered text, in order */
  guint n_tokens;          /* after truncation */
  guint n_tokens_full;     /* before truncation */
  guint n_trained;         /* target tokens */
  gboolean truncated;
  gboolean dropped;        /* nothing to learn */
  gboolean malformed;      /* the row is malformed (training fails or skips it) */
  char *reason;            /* why truncated/dropped/malformed, or NULL */
} HnDatasetPreviewRow;

void hn_dataset_preview_row_free (HnDatasetPreviewRow *row);

/* Reads the first `n_rows` non-empty rows (malformed ones included, marked).
 * Returns HnDatasetPreviewRow*; `stats` (may be NULL) gets the counts for those rows. */
GPtrArray *hn_dataset_preview (const char *path, HnTokenizer *tok, const HnDatasetOptions *opts,
                               guint n_rows, HnDatasetStats *stats, GError **error);

G_END_DECLS
