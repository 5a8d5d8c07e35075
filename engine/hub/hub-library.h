/* The model library over the Hub client (hub.h): searching the Hub, one
 * repo's details, and what the local cache holds.
 *
 * Search is the Hub's /api/models (or /api/datasets) listing: free text,
 * pipeline_tag, library, sort (descending), a page size, and paging through
 * the reply's Link header (rel="next" carries an opaque cursor). Only the
 * cursor is kept from that URL; the next request is rebuilt from the query,
 * so a reply cannot send the client elsewhere.
 *
 * What a cached model is (architecture, parameters, whether it runs here)
 * needs the formats and the registry, a layer up: jobs/model-library.h. */
#pragma once
#include <json-glib/json-glib.h>

#include "hub/hub.h"

G_BEGIN_DECLS

typedef struct {
  HnHubRepoType type;
  const char *search;       /* free text; NULL: any */
  const char *pipeline_tag; /* "text-generation", "fill-mask", "text2text-generation"; NULL: any (models only) */
  const char *library;      /* "transformers", ...; NULL: any (models only) */
  const char *sort;         /* "downloads" (default), "lastModified", "likes" */
  guint limit;              /* 1..100; 0: 20 */
  const char *cursor;       /* from a previous page's *next_cursor; NULL: the first page */
} HnHubSearchQuery;

typedef struct {
  char *id;
  char *pipeline_tag;       /* NULL when the Hub has none */
  char *library;            /* library_name, NULL when none */
  char *license;            /* from the "license:..." tag, NULL when none */
  char *gated;              /* NULL (open), "auto" or "manual" */
  char *last_modified;      /* ISO 8601 as the Hub sends it, NULL when absent */
  gboolean private_repo;
  gint64 downloads, likes;  /* -1 when absent */
  gint64 n_params;          /* safetensors.total, -1 when absent */
  gint64 used_storage;      /* usedStorage in bytes, -1 when absent */
} HnHubRepoSummary;

void hn_hub_repo_summary_free (HnHubRepoSummary *s);

/* One page of results (HnHubRepoSummary*, in the Hub's order). *next_cursor
 * (may be NULL) gets the cursor of the next page, NULL on the last page. */
GPtrArray *hn_hub_search (HnHub *hub, const HnHubSearchQuery *query, char **next_cursor,
                          GCancellable *cancellable, GError **error);

/* A search page as JSON: {"results": [{"id", "pipeline_tag", "library",
 * "license", "gated", "private", "downloads", "likes", "params",
 * "used_storage", "last_modified"}...], "next_cursor": "..." or null}. */
JsonNode *hn_hub_search_to_json (GPtrArray *results, const char *next_cursor);

typedef struct {
  HnHubRepoSummary summary;
  char *sha;                /* the commit of main, NULL when the Hub did not say */
  GPtrArray *files;         /* HnHubFile*, with sizes */
  guint64 weights_size;     /* sum of the *.safetensors files */
  guint64 total_size;       /* sum of every file */
  char *architecture;       /* config.architectures[0], NULL when absent */
  char *model_type;         /* config.model_type, NULL when absent */
} HnHubRepoInfo;

void hn_hub_repo_info_free (HnHubRepoInfo *info);

/* /api/models/ID (or datasets) with file sizes. A gated repo's details are
 * public, so this works without a token; its files need one. */
HnHubRepoInfo *hn_hub_repo_info (HnHub *hub, HnHubRepoType type, const char *repo_id,
                                 GCancellable *cancellable, GError **error);

/* The repo's README.md (model card) as text, read from the Hub without
 * touching the cache (a downloaded model's card is in its snapshot).
 * Capped at 1 MiB. */
char *hn_hub_fetch_readme (HnHub *hub, HnHubRepoType type, const char *repo_id, GCancellable *cancellable,
                           GError **error);

/* The model card without its YAML front matter, for plain-text display. */
char *hn_hub_readme_strip_front_matter (const char *readme);

/* The snapshot folder of a cached repo that a model picker uses: the one
 * refs/main names when it has files, else the newest that has. NULL when
 * none has files (*commit_out untouched). */
char *hn_hub_cached_repo_pick_snapshot (const HnHubCachedRepo *repo, char **commit_out);
/* Bytes in the repo's blobs/ .incomplete files: a download that resumes. */
guint64 hn_hub_cached_repo_incomplete_bytes (const HnHubCachedRepo *repo);

/* Removes a repo from the cache (snapshots, blobs, refs, .incomplete files
 * and its locks). The folder is first renamed aside, so a half-removed repo
 * never looks valid. *freed gets the bytes of its blobs. */
gboolean hn_hub_remove_cached_repo (const char *cache_dir, HnHubRepoType type, const char *repo_id, guint64 *freed,
                                    GError **error);

/* Bytes a removal would free (what the GUI asks about first). */
guint64 hn_hub_cached_repo_size (const char *cache_dir, HnHubRepoType type, const char *repo_id);

G_END_DECLS
