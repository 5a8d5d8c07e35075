/* Hugging Face Hub client (libsoup3), writing into the same cache as the
 * Python tools (huggingface_hub's layout), so a model fetched by either is
 * found by both:
 *
 *   <cache>/models--org--name/blobs/<etag>
 *                            /snapshots/<commit>/<path> -> ../../blobs/<etag>
 *                            /refs/<revision>            (holds the commit)
 *
 * Environment, as huggingface_hub reads it: HF_ENDPOINT (base URL), HF_TOKEN
 * or HUGGING_FACE_HUB_TOKEN (else the token file HF_TOKEN_PATH or
 * $HF_HOME/token), HF_HUB_OFFLINE=1 (cache only), HF_HUB_CACHE / HF_HOME /
 * $XDG_CACHE_HOME/huggingface/hub, https_proxy / http_proxy / no_proxy.
 *
 * One HnHub per job thread: calls are synchronous and cancellable. Nothing
 * from a repo is ever executed; server file names never leave the snapshot
 * folder; downloads go to blobs/<etag>.incomplete, resume with Range, are
 * size-checked and (for LFS files) sha256-checked before the rename. */
#pragma once
#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef enum {
  HN_HUB_REPO_MODEL,
  HN_HUB_REPO_DATASET,
} HnHubRepoType;

/* Parses "model"/"dataset"; FALSE otherwise. */
gboolean hn_hub_repo_type_from_string (const char *s, HnHubRepoType *out);

typedef struct {
  const char *repo_id;
  const char *file;          /* the file being fetched */
  guint file_index;          /* 0-based among n_files */
  guint n_files;
  guint64 bytes_done;        /* of this file */
  guint64 bytes_total;       /* of this file; 0 when unknown */
  double rate;               /* bytes per second, smoothed */
  double eta_seconds;        /* -1 when unknown */
  gboolean finished;         /* the last call for this file */
} HnHubProgress;

typedef void (*HnHubProgressFunc) (const HnHubProgress *progress, gpointer user_data);

typedef struct {
  char *path;                /* relative path in the repo, validated */
  guint64 size;              /* 0 when the listing did not say */
  char *lfs_sha256;          /* NULL for non-LFS files */
} HnHubFile;

typedef struct _HnHub HnHub;

/* Reads the environment (see above). Never fails on a missing token. */
HnHub *hn_hub_new (void);
void hn_hub_free (HnHub *hub);

void hn_hub_set_endpoint (HnHub *hub, const char *url);
void hn_hub_set_token (HnHub *hub, const char *token);   /* NULL: anonymous */
void hn_hub_set_offline (HnHub *hub, gboolean offline);
void hn_hub_set_cache_dir (HnHub *hub, const char *dir);
void hn_hub_set_progress (HnHub *hub, HnHubProgressFunc func, gpointer user_data);
const char *hn_hub_get_cache_dir (HnHub *hub);
const char *hn_hub_get_endpoint (HnHub *hub);
/* TRUE when HF_HUB_OFFLINE (or hn_hub_set_offline) is in force. */
gboolean hn_hub_get_offline (HnHub *hub);

/* "<cache>/models--org--name" (not created). */
char *hn_hub_repo_cache_dir (HnHub *hub, HnHubRepoType type, const char *repo_id);

/* Checks a repo id ("name" or "org/name", [A-Za-z0-9._-]). */
gboolean hn_hub_validate_repo_id (const char *repo_id, GError **error);

/* Lists the repo's files at `revision` (NULL = "main") through the API and
 * returns the commit it resolved to. Array of HnHubFile*. */
GPtrArray *hn_hub_list_files (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision,
                              char **commit_out, GCancellable *cancellable, GError **error);

/* Downloads one file into the cache (or finds it there) and returns the
 * snapshot path. */
char *hn_hub_download_file (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision,
                            const char *path, GCancellable *cancellable, GError **error);

/* Downloads the files matching any of `include` (shell globs, matched
 * against the whole path; NULL = everything) and returns the snapshot
 * folder. Offline, the cached snapshot of `revision` is returned when it
 * has files. */
char *hn_hub_snapshot_download (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision,
                                const char *const *include, GCancellable *cancellable, GError **error);

/* The files a model needs (config, weights in safetensors, tokenizer files,
 * chat templates), never pickles or code. */
extern const char *const hn_hub_model_patterns[];
/* The files a tokenizer needs. */
extern const char *const hn_hub_tokenizer_patterns[];

/* --hf-model / --hf-tokenizer: an existing local folder is returned as is;
 * otherwise `id` is fetched (model or tokenizer files) and the snapshot
 * folder returned. `hub` may be NULL (one is made from the environment);
 * cache_dir (--hf-cache-dir) may be NULL. */
char *hn_hub_resolve_model (HnHub *hub, const char *id_or_path, const char *revision, const char *cache_dir,
                            GCancellable *cancellable, GError **error);
char *hn_hub_resolve_tokenizer (HnHub *hub, const char *id_or_path, const char *revision, const char *cache_dir,
                                GCancellable *cancellable, GError **error);
/* --hf-model ID --hf-file NAME.gguf: downloads that one GGUF file of the
 * model repo (or finds it in the cache) and returns its path; any other
 * kind of file is refused. */
char *hn_hub_resolve_model_file (HnHub *hub, const char *repo_id, const char *revision, const char *file,
                                 const char *cache_dir, GCancellable *cancellable, GError **error);

/* --hf-dataset: picks the data files of `config` / `split` (see
 * hn_hub_dataset_pick_files), downloads them and returns their local paths
 * in shard order. `file` (--hf-dataset-file) names one file in the repo
 * directly. The choice is logged with g_message. */
char **hn_hub_resolve_dataset (HnHub *hub, const char *repo_id, const char *config, const char *split,
                               const char *file, const char *revision, const char *cache_dir,
                               GCancellable *cancellable, GError **error);

/* Chooses the data files (JSONL/NDJSON/JSON/Parquet) for config/split (NULL:
 * the only config, "train") among repo paths, in the usual layouts:
 * data/train-*.parquet, <config>/<split>-*.parquet, <config>/<split>/NNNN.parquet,
 * <split>/NAME.jsonl, train.jsonl... A repo with a loading script and no data
 * files is refused (no remote code is run); ambiguous cases are an
 * HN_ERROR_INVALID_ARGUMENT listing the candidates. *why (may be NULL) says
 * how the choice was made. */
char **hn_hub_dataset_pick_files (const char *const *paths, const char *repo_id, const char *config,
                                  const char *split, char **why, GError **error);

void hn_hub_file_free (HnHubFile *f);

/* What is in a cache (like huggingface_hub's scan_cache_dir), for a model
 * picker: one entry per repo folder, sorted by type then id. */
typedef struct {
  HnHubRepoType type;
  char *repo_id;             /* "org/name" */
  char *path;                /* <cache>/models--org--name */
  guint64 size_on_disk;      /* bytes in blobs/ */
  char **snapshots;          /* commit hashes with a snapshot folder, NULL-terminated */
  char **refs;               /* "main=<commit>", ... NULL-terminated */
} HnHubCachedRepo;

void hn_hub_cached_repo_free (HnHubCachedRepo *r);
/* NULL cache_dir: the default (HF_HUB_CACHE, ...). A missing cache is an
 * empty list, not an error. */
GPtrArray *hn_hub_scan_cache (const char *cache_dir, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnHub, hn_hub_free)

/* GETs `url` (which must be on the Hub's own host, so the token never goes
 * elsewhere) and parses the JSON reply. `repo_id` and `what` word the error
 * of a non-2xx reply. *link_next (may be NULL) receives the rel="next" URL of
 * the Link header, NULL when there is none. Offline, fails with
 * HN_ERROR_NETWORK. */
JsonNode *hn_hub_api_get (HnHub *hub, const char *url, const char *repo_id, const char *what, char **link_next,
                          GCancellable *cancellable, GError **error);

G_END_DECLS
