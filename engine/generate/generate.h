/* Text generation over any language model that can produce next-token logits:
 * greedy, sampling and beam search with transformers' logits processors,
 * stopping criteria and defaults (transformers 5.x GenerationConfig).
 *
 * The model is reached through HnLmOps, so the same loop drives the Vulkan
 * transformer (with or without its KV cache), Hierarchos, and CPU fakes in
 * tests. Rows are independent sequences (beams); the model keeps their state. */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef enum {
  HN_EARLY_STOP_FALSE = 0, /* transformers early_stopping=False (heuristic) */
  HN_EARLY_STOP_TRUE,      /* stop as soon as num_beams hypotheses are finished */
  HN_EARLY_STOP_NEVER,     /* canonical beam search: stop only when no improvement is possible */
} HnEarlyStopMode;

/* The generation policy. Fields mirror transformers' GenerationConfig; a
 * negative int / NaN double means "unset" where transformers uses None.
 * hn_generate_options_init() fills transformers' defaults. */
typedef struct {
  /* length */
  int max_length;      /* total length incl. prompt; default 20; ignored when max_new_tokens >= 0 */
  int max_new_tokens;  /* -1: unset */
  int min_length;      /* total length incl. prompt before EOS may appear; default 0 */
  int min_new_tokens;  /* default 0 */
  /* strategy */
  gboolean do_sample;
  int num_beams;                  /* default 1 */
  int num_return_sequences;       /* default 1 */
  double length_penalty;          /* default 1.0 */
  HnEarlyStopMode early_stopping; /* default FALSE */
  /* logits processors (applied in transformers' order) */
  double repetition_penalty;   /* 1.0: off */
  int no_repeat_ngram_size;    /* 0: off */
  GPtrArray *bad_words_ids;    /* of GArray(int32_t); NULL: none */
  GArray *suppress_tokens;     /* int32_t; NULL: none */
  GArray *begin_suppress_tokens;
  /* warpers (sampling only) */
  double temperature;    /* default 1.0 */
  int top_k;             /* default 50; 0: off */
  double top_p;          /* default 1.0 */
  double min_p;          /* NaN: unset */
  double typical_p;      /* default 1.0 */
  double epsilon_cutoff; /* 0: off */
  double eta_cutoff;     /* 0: off */
  /* stopping */
  GArray *eos_token_ids; /* int32_t; may be empty */
  int pad_token_id;      /* -1: unset (the first EOS fills finished rows) */
  char **stop_strings;   /* NULL-terminated, may be NULL; needs a decoder */
  /* sampling seed for the engine's own PRNG (torch's stream is not reproduced) */
  guint64 seed;
} HnGenerateOptions;

void hn_generate_options_init (HnGenerateOptions *opt);
void hn_generate_options_clear (HnGenerateOptions *opt);
/* Deep copy of src into dst (dst need not be initialised). */
void hn_generate_options_copy (HnGenerateOptions *dst, const HnGenerateOptions *src);
/* Checks ranges and combinations the way GenerationConfig.validate() does;
 * vocab_size > 0 also checks token ids. */
/* Drops the eos ids and the pad id at or past `vocab` (config.json of many
 * tiny test models on the Hub names GPT-2's 50256 with a vocabulary of a few
 * hundred), and negative ones (pad_token_id -3; -1 is "unset"): transformers
 * generates from them and never meets such an id (it warns for a negative
 * eos_token_id, and does not check the pad id).
 * Returns the warning to log once (NULL when nothing was dropped). */
char *hn_generate_options_drop_outside_vocab (HnGenerateOptions *opt, int vocab);
gboolean hn_generate_options_validate (const HnGenerateOptions *opt, int vocab_size, GError **error);
/* The total length limit for a prompt of prompt_len tokens. */
int hn_generate_options_max_length (const HnGenerateOptions *opt, int prompt_len);

/* What generation needs from a model. Every call may fail with a GError. */
typedef struct {
  /* Starts n_rows empty sequences (drops any previous state). */
  gboolean (*reset) (gpointer self, int n_rows, GError **error);
  /* Appends ids[0..n) to `row` and writes the logits of its last position to logits [vocab]. */
  gboolean (*prefill) (gpointer self, int row, const int32_t *ids, int n, float *logits, GError **error);
  /* Appends one token to each of rows[0..n) and writes their logits [n, vocab]. */
  gboolean (*decode) (gpointer self, int n, const int *rows, const int32_t *tokens, float *logits,
                      GError **error);
  /* Row r takes the state that row src[r] had (beam reordering; src may repeat). */
  gboolean (*reorder) (gpointer self, int n_rows, const int *src, GError **error);
  /* Continuous batching (NULL where the model has no shared cache): `row` ends and returns
   * its cache to the pool; the row starts empty. decode() then takes rows of any lengths. */
  gboolean (*release) (gpointer self, int row, GError **error);
  /* Greedy decoding on the model's side, so that only token ids come back (both NULL where the
   * model has none). can_decode_greedy: whether this instance, as now reset, can (one row, a
   * cache that supports it). decode_greedy: feeds `token` to row 0, then its own argmax picks,
   * n steps, writing the picks to out[n] (out[n-1] is not fed yet). */
  gboolean (*can_decode_greedy) (gpointer self);
  gboolean (*decode_greedy) (gpointer self, int32_t token, int n, int32_t *out, GError **error);
} HnLmOps;

/* Decodes ids to text (for stop strings and streaming); returns a new string or NULL. */
typedef char *(*HnDecodeFunc) (gpointer user_data, const int32_t *ids, int n);
/* Streams one generated token of the single running sequence (greedy/sampling). */
typedef void (*HnTokenFunc) (gpointer user_data, int32_t token);

typedef struct {
  int n_sequences;
  GPtrArray *sequences; /* of GArray(int32_t): the new ids of each returned sequence */
  GArray *scores;       /* double per sequence: beam score (length-penalised); 0 for greedy/sampling */
  int n_prompt;
  int n_generated;      /* tokens produced by the model (sum over steps; for tokens/s) */
  double seconds;       /* wall time of the loop */
  double prefill_seconds;
  char *stop_reason;    /* "eos", "max_length", "stop_string" */
  gboolean device_greedy; /* the tokens after the first came from HnLmOps.decode_greedy */
} HnGenerateResult;

void hn_generate_result_free (HnGenerateResult *res);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnGenerateResult, hn_generate_result_free)

typedef struct {
  const HnLmOps *ops;
  gpointer lm;
  int vocab_size;
  HnDecodeFunc decode;  /* NULL: stop strings are refused */
  gpointer decode_data;
  HnTokenFunc on_token; /* NULL: no streaming */
  gpointer token_data;
} HnGenerateModel;

/* Runs generation for one prompt. */
HnGenerateResult *hn_generate_run (const HnGenerateModel *model, const HnGenerateOptions *opt,
                                   const int32_t *prompt, int n_prompt, GCancellable *cancellable,
                                   GError **error);

/* ---- continuous batching (batch.c) ---- */

typedef struct {
  int max_requests;  /* requests decoded together (>= 1) */
  int n_pages;       /* the model's shared cache in pages of page_size tokens */
  int page_size;
  int max_pages_per_request; /* 0: no limit beyond n_pages */
} HnBatchOptions;

typedef struct {
  int rounds;          /* decode rounds: one model->decode call (one submission) each */
  int max_active;      /* most requests active at once */
  int page_waits;      /* times the next request waited for pages with a request slot free */
  gint64 n_generated;  /* tokens produced over all requests */
  double seconds;
} HnBatchStats;

/* Called as each request finishes, in finishing order; `result` holds its one sequence. */
typedef void (*HnBatchDoneFunc) (gpointer user_data, int request, const HnGenerateResult *result);

/* Serves prompts (GArray of int32_t each) with continuous batching over a model whose rows
 * share a page pool (model->ops->release is required): up to max_requests run at once; a
 * waiting request is admitted, first come first served, when a row is free and the pool has
 * the pages of its whole length (prompt + new tokens) besides those reserved by the active
 * ones; a finished request returns its pages. Every decode round feeds all active requests
 * in one model->decode call. Greedy or sampling (each request with its own generator seeded
 * with opt->seed, so it matches hn_generate_run), one sequence per request; beam search fails
 * closed. Returns the results in request order (GPtrArray of HnGenerateResult). */
GPtrArray *hn_generate_batch_run (const HnGenerateModel *model, const HnGenerateOptions *opt, const HnBatchOptions *bo,
                                  GPtrArray *prompts, HnBatchDoneFunc done, gpointer done_data, HnBatchStats *stats,
                                  GCancellable *cancellable, GError **error);

G_END_DECLS
