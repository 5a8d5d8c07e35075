/* The Hub client against a local fake Hub (SoupServer on 127.0.0.1) that
 * answers with the real endpoint shapes: the revision API, resolve URLs
 * redirecting LFS files to a CDN host (here "localhost", so the token must
 * not follow), X-Repo-Commit / X-Linked-Etag / X-Linked-Size headers, Range,
 * 401 for a gated repo, 404s with X-Error-Code, and a CDN that drops the
 * connection mid-file once. */
#include "hub/hub.h"
#include "jobs/hub-job.h"
#include "formats/safetensors.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "fake-hub.h"


typedef struct {
  int calls, finished;
  guint64 last_total;
} ProgressLog;

static void
on_progress (const HnHubProgress *p, gpointer data)
{
  ProgressLog *log = data;
  log->calls++;
  g_assert_cmpuint (p->bytes_done, <=, p->bytes_total ? p->bytes_total : G_MAXUINT64);
  if (p->finished)
    {
      log->finished++;
      log->last_total = p->bytes_total;
    }
}

static HnHub *
new_hub (const char *cache)
{
  HnHub *hub = hn_hub_new ();
  hn_hub_set_endpoint (hub, hub_srv.base);
  hn_hub_set_cache_dir (hub, cache);
  hn_hub_set_offline (hub, FALSE);
  hn_hub_set_token (hub, "secret-token");
  return hub;
}

static int
counter (int *c)
{
  g_mutex_lock (&hub_srv.lock);
  int v = *c;
  g_mutex_unlock (&hub_srv.lock);
  return v;
}

static void
test_pull_model (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  ProgressLog log = { 0 };
  hn_hub_set_progress (hub, on_progress, &log);
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = hn_hub_resolve_model (hub, "org/tiny", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_autofree char *want = g_build_filename (cache, "models--org--tiny", "snapshots", COMMIT, NULL);
  g_assert_cmpstr (dir, ==, want);
  g_assert_cmpint (log.finished, ==, 3); /* config.json, extra.json, model.safetensors; never the pickle */
  g_assert_cmpint (counter (&hub_srv.auth_leaks), ==, 0);

  /* the layout huggingface_hub uses */
  g_autofree char *ref = g_build_filename (cache, "models--org--tiny", "refs", "main", NULL);
  g_autofree char *refc = NULL;
  g_assert_true (g_file_get_contents (ref, &refc, NULL, NULL));
  g_assert_cmpstr (refc, ==, COMMIT);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree char *link = g_file_read_link (cfg, &error);
  g_assert_no_error (error);
  FakeFile *cf = find_file ("models/org/tiny", "config.json");
  g_autofree char *want_link = g_strdup_printf ("../../blobs/%s", cf->served_etag);
  g_assert_cmpstr (link, ==, want_link);
  g_autofree char *nested = g_build_filename (dir, "nested", "deeper", "extra.json", NULL);
  g_autofree char *nlink = g_file_read_link (nested, &error);
  g_assert_true (g_str_has_prefix (nlink, "../../../../blobs/"));
  g_assert_true (g_file_test (nested, G_FILE_TEST_IS_REGULAR));
  g_autofree char *pickle = g_build_filename (dir, "pytorch_model.bin", NULL);
  g_assert_false (g_file_test (pickle, G_FILE_TEST_EXISTS));
  FakeFile *sf = find_file ("models/org/tiny", "model.safetensors");
  g_autofree char *blob = g_build_filename (cache, "models--org--tiny", "blobs", sf->sha256, NULL);
  g_assert_true (g_file_test (blob, G_FILE_TEST_IS_REGULAR));
  g_autofree char *incomplete = g_strdup_printf ("%s.incomplete", blob);
  g_assert_false (g_file_test (incomplete, G_FILE_TEST_EXISTS));
  g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_safetensors_lookup (st, "w")->shape[1], ==, 300);

  /* Again: metadata only, no body is downloaded. */
  int bodies = counter (&hub_srv.get_bodies);
  g_autofree char *dir2 = hn_hub_resolve_model (hub, "org/tiny", "main", NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dir2, ==, dir);
  g_assert_cmpint (counter (&hub_srv.get_bodies), ==, bodies);

  /* A tag resolves to the same commit and gets its own ref. */
  g_autofree char *dir3 = hn_hub_resolve_model (hub, "org/tiny", "v1.0", NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dir3, ==, dir);
  g_assert_cmpint (counter (&hub_srv.get_bodies), ==, bodies);

  /* Pinned to the commit and cached: no request at all. */
  int heads = counter (&hub_srv.head_calls), apis = counter (&hub_srv.api_calls);
  g_autofree char *f = hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/tiny", COMMIT, "config.json", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (f, ==, cfg);
  g_assert_cmpint (counter (&hub_srv.head_calls), ==, heads);
  g_assert_cmpint (counter (&hub_srv.api_calls), ==, apis);

  /* Offline: the cache serves, nothing is asked. */
  hn_hub_set_offline (hub, TRUE);
  g_autofree char *dir4 = hn_hub_resolve_model (hub, "org/tiny", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dir4, ==, dir);
  g_assert_cmpint (counter (&hub_srv.api_calls), ==, apis);
  g_assert_null (hn_hub_resolve_model (hub, "org/other", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "HF_HUB_OFFLINE"));
  g_clear_error (&error);

  /* Network down: a clear error with the offline hint, or the cache. */
  hn_hub_set_offline (hub, FALSE);
  hn_hub_set_endpoint (hub, "http://127.0.0.1:1");
  g_assert_null (hn_hub_resolve_model (hub, "org/other", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NETWORK);
  g_assert_nonnull (strstr (error->message, "HF_HUB_OFFLINE=1"));
  g_clear_error (&error);
  g_autofree char *dir5 = hn_hub_resolve_model (hub, "org/tiny", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dir5, ==, dir);

  /* what the cache holds */
  g_autoptr (GPtrArray) repos = hn_hub_scan_cache (cache, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (repos->len, ==, 1);
  HnHubCachedRepo *r = repos->pdata[0];
  g_assert_cmpint (r->type, ==, HN_HUB_REPO_MODEL);
  g_assert_cmpstr (r->repo_id, ==, "org/tiny");
  g_assert_cmpuint (r->size_on_disk, ==, g_bytes_get_size (sf->data) + 22 + 2);
  g_assert_cmpstr (r->snapshots[0], ==, COMMIT);
  g_assert_null (r->snapshots[1]);
  g_assert_cmpstr (r->refs[0], ==, "main=" COMMIT);
  g_assert_cmpstr (r->refs[1], ==, "v1.0=" COMMIT);
  g_autoptr (GPtrArray) none = hn_hub_scan_cache ("/nonexistent/cache", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (none->len, ==, 0);
  rm_rf (cache);
}

/* With HN_IO_EXPORT_DIR set, pulls org/tiny and org/ds into
 * $HN_IO_EXPORT_DIR/hub-cache and keeps it, for check_reference.py to scan
 * with huggingface_hub. */
static void
test_export (void)
{
  const char *out = g_getenv ("HN_IO_EXPORT_DIR");
  if (!out)
    {
      g_test_skip ("set HN_IO_EXPORT_DIR to export a cache for the reference check");
      return;
    }
  g_autofree char *cache = g_build_filename (out, "hub-cache", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_auto (GStrv) files = hn_hub_resolve_dataset (hub, "org/ds", NULL, NULL, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_autofree char *info = g_build_filename (out, "hub-cache.json", NULL);
  g_autofree char *text = g_strdup_printf ("{\"commit\": \"%s\", \"model\": \"org/tiny\", \"model_files\": "
                                           "[\"config.json\", \"model.safetensors\", \"pytorch_model.bin\", "
                                           "\"nested/deeper/extra.json\"], \"dataset\": \"org/ds\"}\n", COMMIT);
  g_assert_true (g_file_set_contents (info, text, -1, NULL));
}

static void
test_errors (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;

  /* gated: 401 without the right token */
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_AUTH);
  g_assert_nonnull (strstr (error->message, "HF_TOKEN"));
  g_assert_nonnull (strstr (error->message, "licence"));
  g_clear_error (&error);
  hn_hub_set_token (hub, "good-token");
  g_autofree char *g = hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error);
  g_assert_no_error (error);

  /* 404s: repo, revision, file */
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/missing", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "'org/missing' was not found"));
  g_clear_error (&error);
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/tiny", "nope", NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "revision"));
  g_clear_error (&error);
  g_assert_null (hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "nothere.json", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "nothere.json"));
  g_clear_error (&error);

  /* safety: a server path escaping the snapshot, a bad id, a user path */
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/evil", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "../escape.json"));
  g_clear_error (&error);
  g_assert_null (hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/../x", NULL, "a", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_null (hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "/etc/passwd", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_clear_error (&error);

  /* sha256 mismatch: refused, nothing left behind */
  g_assert_null (hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/bad", NULL, "model.safetensors", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "sha256"));
  g_clear_error (&error);
  g_autofree char *blobs = g_build_filename (cache, "models--org--bad", "blobs", NULL);
  g_autoptr (GDir) d = g_dir_open (blobs, 0, NULL);
  g_assert_null (d ? g_dir_read_name (d) : NULL);

  /* pickle-only models are refused */
  g_assert_null (hn_hub_resolve_model (hub, "org/pickle", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "safetensors"));
  g_clear_error (&error);

  /* cancelled before start */
  g_autoptr (GCancellable) c = g_cancellable_new ();
  g_cancellable_cancel (c);
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/flaky", NULL, NULL, c, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CANCELLED);
  rm_rf (cache);
}

static void
test_resume (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;
  g_mutex_lock (&hub_srv.lock);
  hub_srv.drop_next_flaky = TRUE;
  int ranges = hub_srv.range_gets;
  g_mutex_unlock (&hub_srv.lock);
  g_autofree char *p = hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/flaky", NULL, "model.safetensors", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (counter (&hub_srv.range_gets), ==, ranges + 1);
  FakeFile *f = find_file ("models/org/flaky", "model.safetensors");
  g_autofree char *got = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (p, &got, &len, NULL));
  g_assert_cmpmem (got, len, g_bytes_get_data (f->data, NULL), g_bytes_get_size (f->data));

  /* a 503 from the CDN is asked again */
  g_mutex_lock (&hub_srv.lock);
  hub_srv.busy_next = TRUE;
  int gets = hub_srv.cdn_gets;
  g_mutex_unlock (&hub_srv.lock);
  g_autofree char *b = hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/busy", NULL, "model.safetensors", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (counter (&hub_srv.cdn_gets), ==, gets + 2);
  rm_rf (cache);
}

typedef struct {
  HnHub *hub;
  char *path;
  GError *error;
} LockJob;

static gpointer
lock_job (gpointer data)
{
  LockJob *j = data;
  j->path = hn_hub_download_file (j->hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "model.safetensors", NULL, &j->error);
  return NULL;
}

/* A blob locked by another process the way huggingface_hub locks it
 * (flock on .locks/<repo>/<etag>.lock) is waited for, not written twice. */
static void
test_lock (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  FakeFile *f = find_file ("models/org/tiny", "model.safetensors");
  g_autofree char *ldir = g_build_filename (cache, ".locks", "models--org--tiny", NULL);
  g_assert_cmpint (g_mkdir_with_parents (ldir, 0755), ==, 0);
  g_autofree char *lname = g_strdup_printf ("%s.lock", f->sha256);
  g_autofree char *lpath = g_build_filename (ldir, lname, NULL);
  int fd = open (lpath, O_RDWR | O_CREAT, 0644);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (flock (fd, LOCK_EX), ==, 0);
  LockJob j = { new_hub (cache), NULL, NULL };
  int bodies = counter (&hub_srv.get_bodies);
  GThread *t = g_thread_new ("lock-job", lock_job, &j);
  g_usleep (G_USEC_PER_SEC * 3 / 10);
  g_assert_cmpint (counter (&hub_srv.get_bodies), ==, bodies); /* still waiting */
  flock (fd, LOCK_UN);
  close (fd);
  g_thread_join (t);
  g_assert_no_error (j.error);
  g_assert_nonnull (j.path);
  g_assert_cmpint (counter (&hub_srv.get_bodies), ==, bodies + 1);
  g_free (j.path);
  hn_hub_free (j.hub);
  rm_rf (cache);
}

static void
test_dataset (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) files = hn_hub_resolve_dataset (hub, "org/ds", NULL, "train", NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (files), ==, 2);
  g_assert_true (g_str_has_suffix (files[0], "datasets--org--ds/snapshots/" COMMIT "/data/train-00000-of-00002.jsonl"));
  g_assert_true (g_str_has_suffix (files[1], "data/train-00001-of-00002.jsonl"));
  g_auto (GStrv) test = hn_hub_resolve_dataset (hub, "org/ds", NULL, "test", NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (test), ==, 1);
  /* offline, picked from the cached snapshot */
  hn_hub_set_offline (hub, TRUE);
  g_auto (GStrv) off = hn_hub_resolve_dataset (hub, "org/ds", NULL, NULL, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (off), ==, 2);
  g_assert_cmpstr (off[0], ==, files[0]);
  rm_rf (cache);
}

static void
expect_pick (const char *const *paths, const char *config, const char *split, const char *const *want)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *why = NULL;
  g_auto (GStrv) got = hn_hub_dataset_pick_files (paths, "org/x", config, split, &why, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (got), ==, g_strv_length ((char **) want));
  for (guint i = 0; want[i]; i++)
    g_assert_cmpstr (got[i], ==, want[i]);
  g_assert_nonnull (why);
}

static void
test_pick_files (void)
{
  const char *hub_parquet[] = { "README.md", ".gitattributes", "data/train-00001-of-00002.parquet",
                                "data/train-00000-of-00002.parquet", "data/validation-00000-of-00001.parquet", NULL };
  const char *w1[] = { "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet", NULL };
  expect_pick (hub_parquet, NULL, NULL, w1);
  const char *w2[] = { "data/validation-00000-of-00001.parquet", NULL };
  expect_pick (hub_parquet, NULL, "validation", w2);

  const char *converted[] = { "default/train/0000.parquet", "default/train/0001.parquet", "default/test/0000.parquet",
                              "other/train/0000.parquet", NULL };
  const char *w3[] = { "default/train/0000.parquet", "default/train/0001.parquet", NULL };
  expect_pick (converted, NULL, "train", w3);
  const char *w4[] = { "other/train/0000.parquet", NULL };
  expect_pick (converted, "other", "train", w4);

  const char *plain[] = { "train.jsonl", "test.jsonl", "dataset_infos.json", NULL };
  const char *w5[] = { "train.jsonl", NULL };
  expect_pick (plain, NULL, NULL, w5);
  const char *unmarked[] = { "alpaca_data.json", NULL };
  expect_pick (unmarked, NULL, NULL, unmarked);

  g_autoptr (GError) error = NULL;
  const char *configs[] = { "en/train-0.parquet", "fr/train-0.parquet", NULL };
  g_assert_null (hn_hub_dataset_pick_files (configs, "org/x", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "en, fr"));
  g_clear_error (&error);
  const char *script[] = { "x.py", "README.md", NULL };
  g_assert_null (hn_hub_dataset_pick_files (script, "org/x", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "never run"));
  g_clear_error (&error);
  const char *mixed[] = { "train.jsonl", "train.parquet", NULL };
  g_assert_null (hn_hub_dataset_pick_files (mixed, "org/x", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "train.jsonl, train.parquet"));
  g_clear_error (&error);
  g_assert_null (hn_hub_dataset_pick_files (plain, "org/x", NULL, "validation", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
}

typedef struct {
  char *model_dir, *tok, **data;
  GError *model_error;
  int byte_events;
} JobResult;

static JobResult job_result;

static gboolean
resolve_run (HnJob *job, GError **error)
{
  job_result.model_dir = hn_hub_job_model_dir (job, &job_result.model_error);
  job_result.tok = hn_hub_job_tokenizer_path (job, error);
  job_result.data = hn_hub_job_dataset_files (job, error);
  return TRUE;
}

static void
on_job_event (HnJob *job, const HnJobEvent *e, gpointer data)
{
  if (e->type == HN_JOB_EVENT_PROGRESS && e->progress.unit == HN_PROGRESS_BYTES)
    job_result.byte_events++;
}

/* The --hf-* options of a workflow kind resolve through a job, with
 * download progress as job events. (The kind's run function is replaced by
 * one that only resolves, in this test process.) */
static void
test_job_options (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  hn_job_register_kind ("transformer-finetune", resolve_run);
  const char *argv[] = { "transformer-finetune", "--hf-model", "org/tiny", "--hf-dataset", "org/ds",
                         "--hf-dataset-split", "test", "--hf-cache-dir", cache, "--out-dir", cache, NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, on_job_event, NULL, NULL);
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  g_assert_no_error (job_result.model_error);
  g_autofree char *want = g_build_filename (cache, "models--org--tiny", "snapshots", COMMIT, NULL);
  g_assert_cmpstr (job_result.model_dir, ==, want);
  g_assert_null (job_result.tok); /* no tokenizer option: the model folder's */
  g_assert_cmpuint (g_strv_length (job_result.data), ==, 1);
  g_assert_true (g_str_has_suffix (job_result.data[0], "data/test-00000-of-00001.jsonl"));
  g_assert_cmpint (job_result.byte_events, >, 0);
  g_free (job_result.model_dir);
  g_strfreev (job_result.data);

  /* --hf-model with --hf-file: the file's path; only .gguf files; not with --model-path */
  const char *argv3[] = { "transformer-finetune", "--hf-model", "org/stories-gguf", "--hf-file",
                          "stories260K-llamacpp-q4_k_m.gguf", "--train", "t.jsonl", "--hf-cache-dir", cache,
                          "--out-dir", cache, NULL };
  g_autoptr (HnJobSpec) spec3 = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv3) - 1, argv3, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job3 = hn_job_new (spec3);
  g_assert_true (hn_job_run_sync (job3, &error));
  g_assert_no_error (job_result.model_error);
  g_autofree char *want3 = g_build_filename (cache, "models--org--stories-gguf", "snapshots", COMMIT,
                                             "stories260K-llamacpp-q4_k_m.gguf", NULL);
  g_assert_cmpstr (job_result.model_dir, ==, want3);
  g_free (job_result.model_dir);
  g_strfreev (job_result.data);
  g_autoptr (HnHub) hub = hn_hub_new ();
  hn_hub_set_endpoint (hub, hub_srv.base);
  hn_hub_set_cache_dir (hub, cache);
  g_assert_null (hn_hub_resolve_model_file (hub, "org/stories-gguf", NULL, "README.md", NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_null (hn_hub_resolve_model_file (hub, "org/stories-gguf", NULL, "missing.gguf", NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_clear_error (&error);
  const char *argv4[] = { "transformer-finetune", "--model-path", "/some/dir", "--hf-file", "x.gguf", "--train",
                          "t.jsonl", "--out-dir", cache, NULL };
  g_autoptr (HnJobSpec) spec4 = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv4) - 1, argv4, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job4 = hn_job_new (spec4);
  g_assert_true (hn_job_run_sync (job4, &error));
  g_assert_error (job_result.model_error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&job_result.model_error);
  g_strfreev (job_result.data);

  /* --model-path wins without any download; neither is an error */
  const char *argv2[] = { "transformer-finetune", "--model-path", "/some/dir", "--train", "t.jsonl", "--out-dir", cache, NULL };
  g_autoptr (HnJobSpec) spec2 = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv2) - 1, argv2, &error);
  g_assert_no_error (error);
  g_autoptr (HnJob) job2 = hn_job_new (spec2);
  g_assert_true (hn_job_run_sync (job2, &error));
  g_assert_cmpstr (job_result.model_dir, ==, "/some/dir");
  g_assert_cmpstr (job_result.data[0], ==, "t.jsonl");
  g_free (job_result.model_dir);
  g_strfreev (job_result.data);
  rm_rf (cache);
}

/* The CLI end to end: `pull` against the fake Hub through HF_ENDPOINT. */
static void
test_cli_pull (void)
{
  const char *build = g_getenv ("HN_BUILD_DIR");
  g_autofree char *cli = g_build_filename (build ? build : ".", "app", "cli", "hierarchos-native-cli", NULL);
  if (!g_file_test (cli, G_FILE_TEST_IS_EXECUTABLE))
    {
      g_test_skip ("CLI not built");
      return;
    }
  g_autofree char *cache = g_dir_make_tmp ("hn-hub-XXXXXX", NULL);
  g_autoptr (GSubprocessLauncher) l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_setenv (l, "HF_ENDPOINT", hub_srv.base, TRUE);
  g_subprocess_launcher_unsetenv (l, "HF_HUB_OFFLINE");
  /* the gated pull asks the keyring: never the real one (test-hub-keyring has its own) */
  g_subprocess_launcher_setenv (l, "DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus", TRUE);
  g_autoptr (GError) error = NULL;
  g_autoptr (GSubprocess) p = g_subprocess_launcher_spawn (l, &error, cli, "pull", "--repo", "org/tiny",
                                                           "--include", "*.json", "--hf-cache-dir", cache,
                                                           "--json-events", NULL);
  g_assert_no_error (error);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (p, NULL, NULL, &out, &err, &error));
  g_assert_no_error (error);
  if (g_subprocess_get_exit_status (p) != 0)
    g_error ("pull failed: %s %s", out, err);
  g_autofree char *snap = g_build_filename (cache, "models--org--tiny", "snapshots", COMMIT, NULL);
  g_assert_nonnull (strstr (out, "\"done\""));
  g_assert_nonnull (strstr (out, snap));
  g_autofree char *cfg = g_build_filename (snap, "config.json", NULL);
  g_autofree char *st = g_build_filename (snap, "model.safetensors", NULL);
  g_assert_true (g_file_test (cfg, G_FILE_TEST_IS_REGULAR));
  g_assert_false (g_file_test (st, G_FILE_TEST_EXISTS)); /* --include *.json */

  /* generate --hf-model: resolved through the cache, downloaded on first use */
  g_autoptr (GSubprocess) g = g_subprocess_launcher_spawn (l, &error, cli, "generate", "--hf-model", "org/stories",
                                                           "--hf-cache-dir", cache, "--prompt", "Once upon a time",
                                                           "--max-new-tokens", "8", NULL);
  g_assert_no_error (error);
  g_autofree char *gout = NULL, *gerr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (g, NULL, NULL, &gout, &gerr, &error));
  if (g_subprocess_get_exit_status (g) != 0)
    g_error ("generate --hf-model failed: %s %s", gout, gerr);
  g_test_message ("generate --hf-model: %s", gout);
  g_assert_true (g_str_has_prefix (gout, ", there was a little girl")); /* greedy stories260K, as transformers */
  g_autofree char *gsnap = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, "model.safetensors",
                                             NULL);
  g_assert_true (g_file_test (gsnap, G_FILE_TEST_EXISTS));

  /* generate --hf-model --hf-file: that one .gguf file, not the repo, and llama-simple's greedy text */
  g_autoptr (GSubprocess) gg = g_subprocess_launcher_spawn (l, &error, cli, "generate", "--hf-model", "org/stories-gguf",
                                                            "--hf-file", "stories260K-llamacpp-q4_k_m.gguf",
                                                            "--hf-cache-dir", cache, "--prompt", "Once upon a time",
                                                            "--max-new-tokens", "8", NULL);
  g_assert_no_error (error);
  g_autofree char *ggout = NULL, *ggerr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (gg, NULL, NULL, &ggout, &ggerr, &error));
  if (g_subprocess_get_exit_status (gg) != 0)
    g_error ("generate --hf-file failed: %s %s", ggout, ggerr);
  g_test_message ("generate --hf-file: %s", ggout);
  g_assert_true (g_str_has_prefix (ggout, ", there was a little girl"));
  g_autofree char *ggsnap = g_build_filename (cache, "models--org--stories-gguf", "snapshots", COMMIT, NULL);
  g_autofree char *ggfile = g_build_filename (ggsnap, "stories260K-llamacpp-q4_k_m.gguf", NULL);
  g_autofree char *ggother = g_build_filename (ggsnap, "stories260K-Q8_0.gguf", NULL);
  g_autofree char *ggreadme = g_build_filename (ggsnap, "README.md", NULL);
  g_assert_true (g_file_test (ggfile, G_FILE_TEST_IS_REGULAR));
  g_assert_false (g_file_test (ggother, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (ggreadme, G_FILE_TEST_EXISTS));

  /* a gated repo: exit status 1 and the actionable message */
  g_autoptr (GSubprocess) q = g_subprocess_launcher_spawn (l, &error, cli, "pull", "--repo", "org/gated",
                                                           "--hf-cache-dir", cache, NULL);
  g_autofree char *out2 = NULL, *err2 = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (q, NULL, NULL, &out2, &err2, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (q), !=, 0);
  g_assert_nonnull (strstr (err2, "HF_TOKEN"));
  rm_rf (cache);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  /* the tests must never see a real token or proxy */
  g_unsetenv ("HF_TOKEN");
  g_unsetenv ("HUGGING_FACE_HUB_TOKEN");
  g_unsetenv ("HF_HUB_OFFLINE");
  g_unsetenv ("TRANSFORMERS_OFFLINE");
  g_unsetenv ("HF_TOKEN_PATH");
  g_unsetenv ("http_proxy");
  g_unsetenv ("https_proxy");
  g_unsetenv ("HTTP_PROXY");
  g_unsetenv ("HTTPS_PROXY");
  start_server ();
  g_test_add_func ("/hub/pull-model", test_pull_model);
  g_test_add_func ("/hub/errors", test_errors);
  g_test_add_func ("/hub/export", test_export);
  g_test_add_func ("/hub/resume", test_resume);
  g_test_add_func ("/hub/lock", test_lock);
  g_test_add_func ("/hub/dataset", test_dataset);
  g_test_add_func ("/hub/pick-files", test_pick_files);
  g_test_add_func ("/hub/cli-pull", test_cli_pull);
  g_test_add_func ("/hub/job-options", test_job_options);
  int rc = g_test_run ();
  stop_server ();
  return rc;
}
