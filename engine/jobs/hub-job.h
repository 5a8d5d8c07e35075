/* The Hub in jobs: the `pull` kind, and the --hf-* options every workflow
 * kind takes (--hf-model, --hf-tokenizer, --hf-dataset with
 * --hf-dataset-file/-config/-split, --hf-cache-dir, --hf-token), resolved to
 * local paths with download progress reported as job events. */
#pragma once
#include "jobs/job.h"

G_BEGIN_DECLS

/* Run function of the "pull" kind: --repo ID [--revision R]
 * [--repo-type model|dataset] [--include GLOB]...; the output path is the
 * snapshot folder. */
gboolean hn_hub_pull_job_run (HnJob *job, GError **error);

/* Run function of the "hub-search" kind: one page of Hub search results as
 * JSON (hub-library.h's hn_hub_search_to_json), or with --local the cache's
 * models and the added folders (hn_model_library_get_paths) as
 * hn_local_models_to_json, printed as one line. */
gboolean hn_hub_search_job_run (HnJob *job, GError **error);

/* --model-path, or --hf-model downloaded into the cache: the model folder.
 * Fails with HN_ERROR_INVALID_ARGUMENT when neither is set. */
char *hn_hub_job_model_dir (HnJob *job, GError **error);

/* --tokenizer-path, or --hf-tokenizer downloaded; NULL without an error when
 * neither is set (use the model folder then). */
char *hn_hub_job_tokenizer_path (HnJob *job, GError **error);

/* --train, or the files of --hf-dataset (config/split/file options) in shard
 * order; NULL without an error when neither is set. */
char **hn_hub_job_dataset_files (HnJob *job, GError **error);

G_END_DECLS
