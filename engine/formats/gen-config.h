/* generation_config.json and the precedence users expect:
 * transformers defaults < config.json < generation_config.json < explicit
 * options (CLI flags, GUI fields).
 *
 * Every field has an "unset" value (integers and tri-states -1, doubles NAN,
 * lists with *_set FALSE) so configs can be merged field by field;
 * hn_generation_config_apply_defaults() fills what is still unset with
 * transformers' GenerationConfig defaults. */
#pragma once
#include <glib.h>
#include "formats/model-config.h"

G_BEGIN_DECLS

typedef enum {
  HN_EARLY_STOPPING_UNSET = -1,
  HN_EARLY_STOPPING_FALSE = 0,
  HN_EARLY_STOPPING_TRUE = 1,
  HN_EARLY_STOPPING_NEVER = 2,
} HnEarlyStopping;

typedef struct {
  int do_sample;                 /* tri-state; default FALSE */
  double temperature;            /* default 1.0 */
  gint64 top_k;                  /* default 50 (0 = off) */
  double top_p;                  /* default 1.0 */
  double min_p;                  /* default 0 (off) */
  double typical_p;              /* default 1.0 */
  double epsilon_cutoff;         /* default 0 */
  double eta_cutoff;             /* default 0 */
  double repetition_penalty;     /* default 1.0 */
  gint64 no_repeat_ngram_size;   /* default 0 */
  GPtrArray *bad_words_ids;      /* of GArray<gint64>; NULL when unset */
  gint64 *suppress_tokens;
  guint n_suppress_tokens;
  gboolean suppress_tokens_set;
  gint64 *begin_suppress_tokens;
  guint n_begin_suppress_tokens;
  gboolean begin_suppress_tokens_set;
  gint64 min_new_tokens;         /* default 0 */
  gint64 max_new_tokens;         /* -1: use max_length */
  gint64 min_length;             /* default 0 */
  gint64 max_length;             /* default 20 (prompt + new tokens) */
  gint64 *eos_token_ids;
  guint n_eos_token_ids;
  gboolean eos_token_ids_set;
  gint64 pad_token_id;
  gint64 bos_token_id;
  gint64 decoder_start_token_id;
  gint64 num_beams;              /* default 1 */
  double length_penalty;         /* default 1.0 */
  HnEarlyStopping early_stopping; /* default FALSE */
  gint64 num_return_sequences;   /* default 1 */
  char *cache_implementation;    /* "static", "dynamic", ...; NULL = default */
  int use_cache;                 /* tri-state; default TRUE */
  JsonObject *continuous_batching; /* transformers' continuous_batching_config as read (NULL: none);
                                    * only checked where it is used (hn_continuous_batching_config_parse) */
} HnGenerationConfig;

/* The knobs of transformers' ContinuousBatchingConfig that this scheduler has; -1 = unset. */
typedef struct {
  gint64 block_size;             /* must be 16, the engine's page */
  gint64 num_blocks;             /* pages in the shared pool */
  gint64 max_batch_tokens;       /* tokens per forward (bounds the active requests and prefill chunks) */
  gint64 max_requests_per_batch; /* requests decoded together */
  gint64 max_blocks_per_request;
} HnContinuousBatchingConfig;

/* Reads cfg->continuous_batching. Any other key, a block_size other than 16, a scheduler_type
 * other than "fifo", allow_block_sharing true (prefix sharing is not implemented) or a wrong type
 * is HN_ERROR_INVALID_ARGUMENT naming `file` and the key. */
gboolean hn_continuous_batching_config_parse (const HnGenerationConfig *cfg, const char *file,
                                              HnContinuousBatchingConfig *out, GError **error);

/* All fields unset. */
HnGenerationConfig *hn_generation_config_new (void);
HnGenerationConfig *hn_generation_config_copy (const HnGenerationConfig *cfg);
void hn_generation_config_free (HnGenerationConfig *cfg);

/* Reads a generation_config.json (file or folder holding one). Unknown keys
 * are ignored; wrong types are HN_ERROR_CORRUPT naming file and key; a
 * missing file is HN_ERROR_NOT_FOUND. */
HnGenerationConfig *hn_generation_config_load (const char *path, GError **error);
HnGenerationConfig *hn_generation_config_load_from_data (const char *data, gssize len, const char *name, GError **error);

/* The ids (bos/eos/pad/decoder_start) of config.json, plus any generation
 * keys that 4.x-era config.json files carry (max_length, temperature...). */
HnGenerationConfig *hn_generation_config_from_model_config (const HnModelConfig *mc);

/* Fields set in `src` override `dst`. */
void hn_generation_config_merge (HnGenerationConfig *dst, const HnGenerationConfig *src);

/* Fills the fields still unset with transformers' defaults. */
void hn_generation_config_apply_defaults (HnGenerationConfig *cfg);

/* Range checks (temperature >= 0, 0 < top_p <= 1, num_beams >= 1, ...);
 * HN_ERROR_INVALID_ARGUMENT naming the option. */
gboolean hn_generation_config_validate (const HnGenerationConfig *cfg, GError **error);

/* The whole precedence chain: defaults < model config (may be NULL) <
 * model_dir/generation_config.json (skipped when model_dir is NULL or the
 * file is absent) < explicit (may be NULL); then validated. */
HnGenerationConfig *hn_generation_config_resolve (const char *model_dir, const HnModelConfig *mc,
                                                  const HnGenerationConfig *explicit_opts, GError **error);

gboolean hn_generation_config_is_eos (const HnGenerationConfig *cfg, gint64 id);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnGenerationConfig, hn_generation_config_free)

G_END_DECLS
