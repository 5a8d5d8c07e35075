/* The model library's local side: the Hugging Face cache's model repos
 * (and folders the user picked) read without loading a weight — config.json
 * for the architecture, the safetensors headers for the parameter count and
 * dtype, the registry for whether the architecture runs here and is
 * parity-verified — and whether a model fits a device for chat or LoRA
 * (jobs/memory-estimate.h). */
#pragma once
#include <json-glib/json-glib.h>

#include "hub/hub.h"
#include "hub/hub-library.h"
#include "transformer/registry.h"

G_BEGIN_DECLS

typedef struct {
  char *repo_id;            /* "org/name" */
  char *repo_path;          /* <cache>/models--org--name */
  char *snapshot;           /* the snapshot folder used, NULL when none has files */
  char *commit;
  char *architecture;       /* config.json architectures[0], NULL without config */
  char *model_type;         /* NULL without config */
  char *dtype;              /* "bf16", "f16", "f32", "mixed"; NULL without weights */
  gint64 n_params;          /* -1 without safetensors weights */
  guint64 size_on_disk;     /* blobs, .incomplete files included */
  guint64 incomplete_bytes; /* in .incomplete files: a download that can resume */
  gboolean supported;       /* the registry knows model_type */
  gboolean verified;        /* ...and its logits are parity-verified */
  char *problem;            /* why it cannot be used (no config, no safetensors, bad header), else NULL */
  gboolean user_added;      /* a folder or file the user added, not a cache repo (repo_id: its name) */
  gboolean gguf;            /* a .gguf file (dtype: the ggml type most matrix bytes are in) */
} HnLocalModel;

void hn_local_model_free (HnLocalModel *m);

/* The cache's model repos (HnLocalModel*), sorted by id. NULL cache_dir: the
 * default. A missing cache is an empty list. Works offline. */
GPtrArray *hn_model_library_list (const char *cache_dir, GError **error);
/* One model folder (a snapshot or any folder the user picked) or a .gguf
 * file (its tensor infos and <arch>.* keys: nothing is dequantized). */
HnLocalModel *hn_local_model_read (const char *path, GError **error);
/* What the model folder at `path` keeps while generating (config.json's model_type through the
 * registry); HN_CACHE_KV when it cannot tell (no folder yet, a GGUF file, an unknown model_type). */
HnCacheKind hn_local_model_cache_kind (const char *path);
/* The cache's models, then one entry per path of `paths` (folders and .gguf
 * files the user added, in that order); a path that cannot be read is
 * listed with its problem. */
GPtrArray *hn_model_library_list_with (const char *cache_dir, const char *const *paths, GError **error);

/* The folders and .gguf files the user added to the library (the Models
 * page's "Add", listed by `hub-search --local` too): a JSON array of paths in
 * <user data dir>/hierarchos-native/model-folders.json. A missing file is an
 * empty list (NULL-terminated; never NULL without an error). */
char *hn_model_library_paths_file (void);
char **hn_model_library_get_paths (GError **error);
/* Replaces the list (atomically; the folder is made when missing). */
gboolean hn_model_library_set_paths (const char *const *paths, GError **error);

/* As JSON: [{"id", "path", "snapshot", "architecture", "model_type",
 * "dtype", "params", "size_on_disk", "incomplete_bytes", "supported",
 * "verified", "problem", "user_added", "gguf"}...]. */
JsonNode *hn_local_models_to_json (GPtrArray *models);

/* Whether a model fits a device, best first: LoRA fine-tuning at batch
 * HN_FIT_LORA_BATCH x HN_FIT_LORA_SEQ (which implies chat), chat with a
 * HN_FIT_CHAT_CONTEXT-token context, chat only with 4-bit weights (advice:
 * this build runs the stored dtype), or not at all. */
typedef enum {
  HN_FIT_UNKNOWN,    /* no estimate (no config, unknown architecture, no device) */
  HN_FIT_TOO_LARGE,
  HN_FIT_NEEDS_4BIT,
  HN_FIT_CHAT,
  HN_FIT_LORA,
} HnFitLevel;

#define HN_FIT_LORA_BATCH 4
#define HN_FIT_LORA_SEQ 512
#define HN_FIT_CHAT_CONTEXT 2048

typedef struct {
  HnFitLevel level;
  guint64 chat_bytes, chat_4bit_bytes, lora_bytes; /* the estimates (jobs/memory-estimate.h) */
  guint64 free_bytes;                               /* what they were set against */
  gboolean params_from_storage;                     /* no parameter count: the repo's size as weights (an upper bound) */
} HnModelFit;

/* The level of the estimates in `fit` against free_bytes (0: unknown). */
HnFitLevel hn_model_fit_level (const HnModelFit *fit, guint64 free_bytes);

/* For a local model folder (config.json + safetensors headers). */
gboolean hn_model_fit_local (const char *model_dir, guint64 free_bytes, HnModelFit *out, GError **error);
/* For a Hub model before download: its config.json fetched alone (not
 * cached) and the weight sizes of its details. */
gboolean hn_model_fit_remote (HnHub *hub, const HnHubRepoInfo *info, guint64 free_bytes, HnModelFit *out,
                              GCancellable *cancellable, GError **error);

/* For a search result before any download: its config.json fetched alone
 * (not cached) and the Hub's parameter count (safetensors.total) with the
 * config's dtype; without a count, the repo's storage read as weights (an
 * upper bound, params_from_storage). Fails when the Hub gives neither, the
 * config cannot be read (gated, missing) or names an unknown architecture. */
gboolean hn_model_fit_summary (HnHub *hub, const HnHubRepoSummary *s, guint64 free_bytes, HnModelFit *out,
                               GCancellable *cancellable, GError **error);

G_END_DECLS
