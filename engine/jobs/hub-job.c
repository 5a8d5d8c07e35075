#include "jobs/hub-job.h"
#include "hub/hub.h"
#include "hub/hub-library.h"
#include "jobs/model-library.h"
#include "base/hn-error.h"

#include <math.h>

/* A string option of the job's kind, NULL when the kind lacks it or it is unset. */
static const char *
opt (HnJob *job, const char *name)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  if (!hn_job_spec_lookup (spec, name))
    return NULL;
  const char *v = hn_job_spec_get_string (spec, name);
  return v && *v ? v : NULL;
}

static void
on_progress (const HnHubProgress *p, gpointer user_data)
{
  HnJob *job = user_data;
  HnJobEvent e = { .type = HN_JOB_EVENT_PROGRESS };
  e.progress.unit = HN_PROGRESS_BYTES;
  e.progress.step = (gint64) p->bytes_done;
  e.progress.total = p->bytes_total ? (gint64) p->bytes_total : -1;
  e.progress.tokens_per_s = p->rate; /* bytes per second for a download */
  e.progress.eta_s = p->eta_seconds >= 0 ? p->eta_seconds : NAN;
  e.progress.device_bytes = -1;
  hn_job_emit (job, &e);
  if (p->finished)
    hn_job_log (job, HN_LOG_INFO, "%s: %s (%u of %u, %" G_GUINT64_FORMAT " bytes)", p->repo_id ? p->repo_id : "",
                p->file, p->file_index + 1, p->n_files, p->bytes_total);
}

static HnHub *
job_hub (HnJob *job)
{
  HnHub *hub = hn_hub_new ();
  hn_hub_set_cache_dir (hub, opt (job, "hf-cache-dir"));
  if (opt (job, "hf-token"))
    hn_hub_set_token (hub, opt (job, "hf-token"));
  hn_hub_set_progress (hub, on_progress, job);
  return hub;
}

/* The options of the pull kind, read once (strings belong to the spec). */
typedef struct {
  const char *repo, *repo_type, *revision;
  const char *const *include;
} PullOptions;

static void
pull_options_read (HnJob *job, PullOptions *o)
{
  o->repo = opt (job, "repo");
  o->repo_type = opt (job, "repo-type");
  o->revision = opt (job, "revision");
  o->include = hn_job_spec_get_strv (hn_job_get_spec (job), "include");
}

gboolean
hn_hub_pull_job_run (HnJob *job, GError **error)
{
  PullOptions o;
  pull_options_read (job, &o);
  if (!o.repo)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--repo ID is required");
      return FALSE;
    }
  HnHubRepoType type = HN_HUB_REPO_MODEL;
  if (o.repo_type && !hn_hub_repo_type_from_string (o.repo_type, &type))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--repo-type must be model or dataset, not '%s'",
                   o.repo_type);
      return FALSE;
    }
  g_autoptr (HnHub) hub = job_hub (job);
  hn_job_log (job, HN_LOG_INFO, "pulling %s %s (revision %s) into %s", type == HN_HUB_REPO_DATASET ? "dataset" : "model",
              o.repo, o.revision ? o.revision : "main", hn_hub_get_cache_dir (hub));
  g_autofree char *dir = hn_hub_snapshot_download (hub, type, o.repo, o.revision,
                                                   o.include && o.include[0] ? o.include : NULL,
                                                   hn_job_get_cancellable (job), error);
  if (!dir)
    return FALSE;
  hn_job_set_output_path (job, dir);
  return TRUE;
}

char *
hn_hub_job_model_dir (HnJob *job, GError **error)
{
  const char *path = opt (job, "model-path"), *file = opt (job, "hf-file");
  if (path && file)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--hf-file names a file of --hf-model, not of --model-path");
      return NULL;
    }
  if (path)
    return g_strdup (path);
  const char *id = opt (job, "hf-model");
  if (!id)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   file ? "--hf-file needs --hf-model ID (the repo holding it)" : "give --model-path DIR or --hf-model ID");
      return NULL;
    }
  g_autoptr (HnHub) hub = job_hub (job);
  if (file)
    return hn_hub_resolve_model_file (hub, id, opt (job, "hf-model-revision"), file, NULL, hn_job_get_cancellable (job),
                                      error);
  return hn_hub_resolve_model (hub, id, opt (job, "hf-model-revision"), NULL, hn_job_get_cancellable (job), error);
}

char *
hn_hub_job_tokenizer_path (HnJob *job, GError **error)
{
  const char *path = opt (job, "tokenizer-path");
  if (path)
    return g_strdup (path);
  const char *id = opt (job, "hf-tokenizer");
  if (!id)
    return NULL;
  g_autoptr (HnHub) hub = job_hub (job);
  return hn_hub_resolve_tokenizer (hub, id, opt (job, "hf-tokenizer-revision"), NULL, hn_job_get_cancellable (job), error);
}

char **
hn_hub_job_dataset_files (HnJob *job, GError **error)
{
  const char *train = opt (job, "train");
  if (train)
    {
      char **v = g_new0 (char *, 2);
      v[0] = g_strdup (train);
      return v;
    }
  const char *id = opt (job, "hf-dataset");
  if (!id)
    return NULL;
  g_autoptr (HnHub) hub = job_hub (job);
  return hn_hub_resolve_dataset (hub, id, opt (job, "hf-dataset-config"), opt (job, "hf-dataset-split"),
                                 opt (job, "hf-dataset-file"), opt (job, "hf-dataset-revision"), NULL,
                                 hn_job_get_cancellable (job), error);
}

/* One line of JSON on stdout (the CLI prints token events as they are). */
static void
emit_json (HnJob *job, JsonNode *node)
{
  g_autofree char *text = json_to_string (node, FALSE);
  hn_job_emit_token (job, 0, -1, text);
  hn_job_emit_token (job, 0, -1, "\n");
}

/* The options of the hub-search kind, read once (strings belong to the spec). */
typedef struct {
  const char *repo_type, *search, *task, *library, *sort, *cursor, *hf_cache_dir;
  gboolean local;
  gint64 limit;
} SearchOptions;

static void
search_options_read (HnJob *job, SearchOptions *o)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  o->repo_type = opt (job, "repo-type");
  o->search = opt (job, "search");
  o->task = opt (job, "task");
  o->library = opt (job, "library");
  o->sort = opt (job, "sort");
  o->cursor = opt (job, "cursor");
  o->hf_cache_dir = opt (job, "hf-cache-dir");
  o->local = hn_job_spec_get_bool (spec, "local");
  o->limit = hn_job_spec_get_int (spec, "limit");
}

gboolean
hn_hub_search_job_run (HnJob *job, GError **error)
{
  SearchOptions o;
  search_options_read (job, &o);
  HnHubRepoType type = HN_HUB_REPO_MODEL;
  if (o.repo_type && !hn_hub_repo_type_from_string (o.repo_type, &type))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--repo-type must be model or dataset, not '%s'",
                   o.repo_type);
      return FALSE;
    }
  if (o.local)
    {
      /* the cache's models and the folders and files added on the Models page */
      g_auto (GStrv) paths = hn_model_library_get_paths (error);
      g_autoptr (GPtrArray) models = paths ? hn_model_library_list_with (o.hf_cache_dir, (const char *const *) paths,
                                                                         error)
                                           : NULL;
      if (!models)
        return FALSE;
      g_autoptr (JsonNode) node = hn_local_models_to_json (models);
      emit_json (job, node);
      return TRUE;
    }
  HnHubSearchQuery q = {
    .type = type,
    .search = o.search,
    .pipeline_tag = g_strcmp0 (o.task, "any") == 0 ? NULL : o.task,
    .library = g_strcmp0 (o.library, "any") == 0 ? NULL : o.library,
    .sort = o.sort,
    .limit = (guint) o.limit,
    .cursor = o.cursor,
  };
  g_autoptr (HnHub) hub = job_hub (job);
  g_autofree char *next = NULL;
  g_autoptr (GPtrArray) results = hn_hub_search (hub, &q, &next, hn_job_get_cancellable (job), error);
  if (!results)
    return FALSE;
  hn_job_log (job, HN_LOG_DEBUG, "%u results%s", results->len, next ? ", more on the next page" : "");
  g_autoptr (JsonNode) node = hn_hub_search_to_json (results, next);
  emit_json (job, node);
  return TRUE;
}
