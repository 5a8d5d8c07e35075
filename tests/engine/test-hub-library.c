/* The model library's engine side against the fake Hub (fake-hub.c):
 * search and paging, repo details, a gated repo refused and then accepted
 * with a token from the (injected) keyring that is never printed, a
 * download cancelled and resumed to the same sha256, a damaged partial
 * download refused, offline mode listing only local models, removal. */
#include "fake-hub.h"
#include "hub/hub.h"
#include "hub/hub-library.h"
#include "jobs/model-library.h"
#include "train/gguf-export.h"
#include "hub/hub-private.h"
#include "hub/hub-token.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define TOKEN "good-token" /* the fake's accepted token */

static HnHub *
new_hub (const char *cache)
{
  HnHub *hub = hn_hub_new ();
  hn_hub_set_endpoint (hub, hub_srv.base);
  hn_hub_set_cache_dir (hub, cache);
  hn_hub_set_offline (hub, FALSE);
  return hub;
}

/* ---- an in-memory keyring --------------------------------------------- */

static char *mem_token;
static int mem_lookups;

static char *
mem_lookup (const char *endpoint, gpointer data, GError **error)
{
  mem_lookups++;
  g_assert_cmpstr (endpoint, ==, hub_srv.base);
  return g_strdup (mem_token);
}

static gboolean
mem_store (const char *endpoint, const char *token, gpointer data, GError **error)
{
  g_free (mem_token);
  mem_token = g_strdup (token);
  return TRUE;
}

static gboolean
mem_clear (const char *endpoint, gpointer data, GError **error)
{
  g_clear_pointer (&mem_token, g_free);
  return TRUE;
}

static const HnHubTokenStore mem_store_vt = { mem_lookup, mem_store, mem_clear, NULL };

/* ---- tests -------------------------------------------------------------- */

static void
test_link_next (void)
{
  g_autofree char *a = hn_hub_link_next ("<https://h/api/models?cursor=abc>; rel=\"next\"");
  g_assert_cmpstr (a, ==, "https://h/api/models?cursor=abc");
  g_autofree char *b = hn_hub_link_next ("<https://h/p1>; rel=\"prev\", <https://h/p3>; rel=\"next\"");
  g_assert_cmpstr (b, ==, "https://h/p3");
  g_assert_null (hn_hub_link_next ("<https://h/p1>; rel=\"prev\""));
  g_assert_null (hn_hub_link_next ("garbage"));
  g_assert_null (hn_hub_link_next (NULL));
}

static void
test_search_paging (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;
  /* text-generation by downloads, 3 a page: 8 repos in pages of 3, 3, 2 */
  HnHubSearchQuery q = { .type = HN_HUB_REPO_MODEL, .pipeline_tag = "text-generation", .library = "transformers",
                         .sort = "downloads", .limit = 3 };
  g_autoptr (GPtrArray) seen = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *cursor = NULL;
  int pages = 0;
  gint64 last = G_MAXINT64;
  do
    {
      g_autofree char *next = NULL;
      q.cursor = cursor;
      g_autoptr (GPtrArray) page = hn_hub_search (hub, &q, &next, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (page->len, <=, 3);
      for (guint i = 0; i < page->len; i++)
        {
          HnHubRepoSummary *s = page->pdata[i];
          g_assert_cmpint (s->downloads, <=, last); /* sorted across pages */
          last = s->downloads;
          g_assert_cmpstr (s->pipeline_tag, ==, "text-generation");
          g_assert_cmpstr (s->library, ==, "transformers");
          for (guint j = 0; j < seen->len; j++)
            g_assert_cmpstr (seen->pdata[j], !=, s->id);
          g_ptr_array_add (seen, g_strdup (s->id));
        }
      g_free (cursor);
      cursor = g_steal_pointer (&next);
      pages++;
    }
  while (cursor && pages < 10);
  g_assert_cmpint (pages, ==, 3);
  g_assert_cmpuint (seen->len, ==, 8);
  g_assert_cmpstr (seen->pdata[0], ==, "org/stories");
  /* what went over the wire: huggingface_hub's spelling */
  g_mutex_lock (&hub_srv.lock);
  g_autofree char *qs = g_strdup (hub_srv.last_search);
  g_mutex_unlock (&hub_srv.lock);
  g_assert_nonnull (strstr (qs, "pipeline_tag=text-generation"));
  g_assert_nonnull (strstr (qs, "filter=transformers"));
  g_assert_nonnull (strstr (qs, "direction=-1"));
  g_assert_nonnull (strstr (qs, "expand=gated"));
  g_assert_nonnull (strstr (qs, "cursor=off-6"));

  /* fields: gated, licence from the tag, storage */
  HnHubSearchQuery g = { .type = HN_HUB_REPO_MODEL, .search = "gated" };
  g_autoptr (GPtrArray) gp = hn_hub_search (hub, &g, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (gp->len, ==, 1);
  HnHubRepoSummary *gs = gp->pdata[0];
  g_assert_cmpstr (gs->gated, ==, "manual");
  g_assert_cmpstr (gs->license, ==, "llama3");
  g_assert_cmpint (gs->likes, ==, 90);
  g_assert_cmpint (gs->used_storage, >, 0);

  /* another task, and recency */
  HnHubSearchQuery fm = { .type = HN_HUB_REPO_MODEL, .pipeline_tag = "fill-mask" };
  g_autoptr (GPtrArray) fp = hn_hub_search (hub, &fm, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (fp->len, ==, 1);
  g_assert_cmpstr (((HnHubRepoSummary *) fp->pdata[0])->id, ==, "org/bert-mini");
  HnHubSearchQuery lm = { .type = HN_HUB_REPO_MODEL, .pipeline_tag = "text-generation", .sort = "lastModified",
                          .limit = 1 };
  g_autoptr (GPtrArray) lp = hn_hub_search (hub, &lm, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (((HnHubRepoSummary *) lp->pdata[0])->id, ==, "org/tiny");

  /* datasets: their own listing, no model filters sent */
  HnHubSearchQuery dq = { .type = HN_HUB_REPO_DATASET, .search = "ds", .pipeline_tag = "text-generation",
                          .library = "transformers" };
  g_autoptr (GPtrArray) dp = hn_hub_search (hub, &dq, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (dp->len, ==, 1);
  g_assert_cmpstr (((HnHubRepoSummary *) dp->pdata[0])->id, ==, "org/ds");
  g_mutex_lock (&hub_srv.lock);
  g_assert_null (strstr (hub_srv.last_search, "pipeline_tag"));
  g_assert_null (strstr (hub_srv.last_search, "filter="));
  g_assert_nonnull (strstr (hub_srv.last_search, "search=ds"));
  g_mutex_unlock (&hub_srv.lock);

  /* bad queries fail before any request */
  HnHubSearchQuery bad = { .type = HN_HUB_REPO_MODEL, .sort = "stars" };
  g_assert_null (hn_hub_search (hub, &bad, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* JSON */
  g_autoptr (JsonNode) node = hn_hub_search_to_json (gp, "off-3");
  g_autofree char *json = json_to_string (node, FALSE);
  g_assert_nonnull (strstr (json, "\"id\":\"org/gated\""));
  g_assert_nonnull (strstr (json, "\"gated\":\"manual\""));
  g_assert_nonnull (strstr (json, "\"next_cursor\":\"off-3\""));
  rm_rf (cache);
}

static void
test_info_and_card (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autoptr (GError) error = NULL;
  HnHubRepoInfo *info = hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (info->summary.id, ==, "org/tiny");
  g_assert_cmpstr (info->summary.license, ==, "apache-2.0");
  g_assert_cmpstr (info->model_type, ==, "llama");
  g_assert_cmpstr (info->architecture, ==, "LlamaForCausalLM");
  g_assert_cmpstr (info->sha, ==, COMMIT);
  g_assert_cmpuint (info->files->len, ==, 4);
  FakeFile *st = find_file ("models/org/tiny", "model.safetensors");
  g_assert_cmpuint (info->weights_size, ==, g_bytes_get_size (st->data));
  g_assert_cmpuint (info->total_size, >, info->weights_size);
  hn_hub_repo_info_free (info);

  /* a gated repo's details are public; its files are not */
  info = hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, "org/gated", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (info->summary.gated, ==, "manual");
  hn_hub_repo_info_free (info);
  g_assert_null (hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, "org/missing", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_clear_error (&error);

  /* the card, without its front matter */
  g_autofree char *card = hn_hub_fetch_readme (hub, HN_HUB_REPO_MODEL, "org/stories", NULL, &error);
  g_assert_no_error (error);
  g_assert_true (g_str_has_prefix (card, "---\nlicense: mit"));
  g_autofree char *text = hn_hub_readme_strip_front_matter (card);
  g_assert_true (g_str_has_prefix (text, "# Stories 260K"));
  g_autofree char *stories_dir = g_build_filename (cache, "models--org--stories", NULL);
  g_assert_false (g_file_test (stories_dir, G_FILE_TEST_EXISTS)); /* browsing leaves the cache alone */
  g_autofree char *plain = hn_hub_readme_strip_front_matter ("no front matter");
  g_assert_cmpstr (plain, ==, "no front matter");
  rm_rf (cache);
}

static void
test_gated_token (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  hn_hub_token_store_set (&mem_store_vt);
  mem_lookups = 0;

  /* no token anywhere: refused with the way out, the keyring asked once */
  g_autoptr (HnHub) hub = new_hub (cache);
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_AUTH);
  g_assert_nonnull (strstr (error->message, "Models page"));
  g_assert_cmpint (mem_lookups, ==, 1);
  g_clear_error (&error);

  /* a public download never asks the keyring */
  g_autoptr (HnHub) pub = new_hub (cache);
  g_autofree char *cfg = hn_hub_download_file (pub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "config.json", NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (mem_lookups, ==, 1);

  /* tokens that cannot be one are refused, without echoing them */
  g_assert_false (hn_hub_token_save (NULL, "two words", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_null (strstr (error->message, "two words"));
  g_clear_error (&error);

  /* a wrong token in the keyring: refused, says so, never printed */
  g_assert_true (hn_hub_token_save (hub_srv.base, "wrong-token-123", &error));
  g_autoptr (HnHub) wrong = new_hub (cache);
  g_assert_null (hn_hub_snapshot_download (wrong, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_AUTH);
  g_assert_nonnull (strstr (error->message, "was refused"));
  g_assert_null (strstr (error->message, "wrong-token-123"));
  g_clear_error (&error);

  /* the right one: accepted */
  g_assert_true (hn_hub_token_save (hub_srv.base, TOKEN, &error));
  g_autoptr (HnHub) good = new_hub (cache);
  g_autofree char *snap = hn_hub_snapshot_download (good, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_autofree char *gcfg = g_build_filename (snap, "config.json", NULL);
  g_assert_true (g_file_test (gcfg, G_FILE_TEST_EXISTS));
  g_assert_true (hn_hub_token_forget (hub_srv.base, &error));
  g_assert_null (mem_token);
  hn_hub_token_store_set (NULL);
  rm_rf (cache);
}

typedef struct {
  GCancellable *cancel;
  guint64 at_cancel;
  int calls;
} CancelAt;

static void
cancel_on_progress (const HnHubProgress *p, gpointer data)
{
  CancelAt *c = data;
  c->calls++;
  if (!p->finished && strcmp (p->file, "model.safetensors") == 0 && !g_cancellable_is_cancelled (c->cancel))
    {
      g_assert_cmpuint (p->bytes_total, >, p->bytes_done);
      c->at_cancel = p->bytes_done;
      g_cancellable_cancel (c->cancel);
    }
}

static char *
file_sha256 (const char *path)
{
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) data, len);
}

static void
test_cancel_resume (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  FakeFile *f = find_file ("models/org/tiny", "model.safetensors");
  g_autoptr (HnHub) hub = new_hub (cache);
  g_mutex_lock (&hub_srv.lock);
  hub_srv.throttle_us = 20000; /* 64 KiB per 20 ms: a few progress calls per file */
  g_mutex_unlock (&hub_srv.lock);
  CancelAt c = { g_cancellable_new (), 0, 0 };
  hn_hub_set_progress (hub, cancel_on_progress, &c);
  const char *const inc[] = { "*.safetensors", NULL };
  g_assert_null (hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, inc, c.cancel, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CANCELLED);
  g_clear_error (&error);
  g_object_unref (c.cancel);
  g_mutex_lock (&hub_srv.lock);
  hub_srv.throttle_us = 0;
  g_mutex_unlock (&hub_srv.lock);

  /* the partial file stays, and the local listing says the download can resume */
  g_autofree char *inc_name = g_strdup_printf ("%s.incomplete", f->sha256);
  g_autofree char *partial = g_build_filename (cache, "models--org--tiny", "blobs", inc_name, NULL);
  GStatBuf sb;
  g_assert_cmpint (g_stat (partial, &sb), ==, 0);
  g_assert_cmpuint ((guint64) sb.st_size, >, 0);
  g_assert_cmpuint ((guint64) sb.st_size, <, g_bytes_get_size (f->data));
  g_autoptr (GPtrArray) mid = hn_model_library_list (cache, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mid->len, ==, 1);
  g_assert_cmpuint (((HnLocalModel *) mid->pdata[0])->incomplete_bytes, ==, (guint64) sb.st_size);

  /* resumed with Range from where it stopped, to the Hub's sha256 */
  int ranges = hub_srv.range_gets;
  hn_hub_set_progress (hub, NULL, NULL);
  g_autofree char *snap = hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, inc, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hub_srv.range_gets, ==, ranges + 1);
  g_autofree char *st = g_build_filename (snap, "model.safetensors", NULL);
  g_autofree char *sum = file_sha256 (st);
  g_assert_cmpstr (sum, ==, f->sha256);
  g_assert_false (g_file_test (partial, G_FILE_TEST_EXISTS));
  rm_rf (cache);
}

/* A partial file whose bytes were damaged: the resumed download's sha256
 * does not match, so it is refused and removed, never renamed into place. */
static void
test_corrupt_partial (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  FakeFile *f = find_file ("models/org/tiny", "model.safetensors");
  g_autofree char *blobs = g_build_filename (cache, "models--org--tiny", "blobs", NULL);
  g_assert_cmpint (g_mkdir_with_parents (blobs, 0755), ==, 0);
  g_autofree char *inc_name = g_strdup_printf ("%s.incomplete", f->sha256);
  g_autofree char *partial = g_build_filename (blobs, inc_name, NULL);
  gsize half = g_bytes_get_size (f->data) / 2;
  g_autofree char *bytes = g_memdup2 (g_bytes_get_data (f->data, NULL), half);
  bytes[100] ^= 0x5a;
  g_assert_true (g_file_set_contents (partial, bytes, (gssize) half, NULL));
  g_autoptr (HnHub) hub = new_hub (cache);
  g_assert_null (hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "model.safetensors", NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "sha256"));
  g_clear_error (&error);
  g_assert_false (g_file_test (partial, G_FILE_TEST_EXISTS));
  g_autofree char *blob = g_build_filename (blobs, f->sha256, NULL);
  g_assert_false (g_file_test (blob, G_FILE_TEST_EXISTS));
  /* asked again, it downloads cleanly */
  g_autofree char *p = hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/tiny", NULL, "model.safetensors", NULL, &error);
  g_assert_no_error (error);
  g_autofree char *sum = file_sha256 (p);
  g_assert_cmpstr (sum, ==, f->sha256);
  rm_rf (cache);
}

static void
test_local_offline_remove (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHub) hub = new_hub (cache);
  g_autofree char *a = hn_hub_resolve_model (hub, "org/stories", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_autofree char *b = hn_hub_download_file (hub, HN_HUB_REPO_MODEL, "org/bert-mini", NULL, "config.json", NULL, &error);
  g_assert_no_error (error);

  /* offline: search refuses, the local list still works and holds only what was downloaded */
  g_autoptr (HnHub) off = new_hub (cache);
  hn_hub_set_offline (off, TRUE);
  int calls = hub_srv.search_calls;
  HnHubSearchQuery q = { .type = HN_HUB_REPO_MODEL };
  g_assert_null (hn_hub_search (off, &q, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NETWORK);
  g_assert_nonnull (strstr (error->message, "HF_HUB_OFFLINE"));
  g_clear_error (&error);
  g_assert_cmpint (hub_srv.search_calls, ==, calls);
  g_autoptr (GPtrArray) local = hn_model_library_list (cache, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (local->len, ==, 2);
  HnLocalModel *bert = local->pdata[0], *st = local->pdata[1];
  g_assert_cmpstr (bert->repo_id, ==, "org/bert-mini");
  g_assert_cmpint (bert->n_params, ==, -1);  /* config only: no weights */
  g_assert_nonnull (bert->problem);
  g_assert_cmpstr (st->repo_id, ==, "org/stories");
  g_assert_cmpstr (st->model_type, ==, "llama");
  g_assert_cmpstr (st->architecture, ==, "LlamaForCausalLM");
  g_assert_true (st->supported);
  g_assert_cmpint (st->n_params, >, 200000);
  g_assert_cmpint (st->n_params, <, 400000);
  g_assert_nonnull (st->dtype);
  g_assert_cmpuint (st->incomplete_bytes, ==, 0);
  g_autofree char *snap = g_build_filename (cache, "models--org--stories", "snapshots", COMMIT, NULL);
  g_assert_cmpstr (st->snapshot, ==, snap);
  FakeFile *w = find_file ("models/org/stories", "model.safetensors");
  g_assert_cmpuint (st->size_on_disk, >, g_bytes_get_size (w->data));
  g_autoptr (JsonNode) node = hn_local_models_to_json (local);
  g_autofree char *json = json_to_string (node, FALSE);
  g_assert_nonnull (strstr (json, "\"id\":\"org/stories\""));

  /* removal reports what it frees, and the list shrinks */
  guint64 size = hn_hub_cached_repo_size (cache, HN_HUB_REPO_MODEL, "org/stories");
  g_assert_cmpuint (size, ==, st->size_on_disk);
  guint64 freed = 0;
  g_assert_true (hn_hub_remove_cached_repo (cache, HN_HUB_REPO_MODEL, "org/stories", &freed, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (freed, ==, size);
  g_autofree char *repo = g_build_filename (cache, "models--org--stories", NULL);
  g_assert_false (g_file_test (repo, G_FILE_TEST_EXISTS));
  g_autoptr (GPtrArray) after = hn_model_library_list (cache, &error);
  g_assert_cmpuint (after->len, ==, 1);
  g_assert_false (hn_hub_remove_cached_repo (cache, HN_HUB_REPO_MODEL, "org/stories", &freed, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_clear_error (&error);
  g_assert_false (hn_hub_remove_cached_repo (cache, HN_HUB_REPO_MODEL, "../x", &freed, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  rm_rf (cache);
}

/* The fit badge's figures: local from the headers, remote from the Hub's
 * details and config.json alone, and the level against the free memory. */
static void
test_fit (void)
{
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHub) hub = new_hub (cache);
  HnHubRepoInfo *info = hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, "org/stories", NULL, &error);
  g_assert_no_error (error);
  HnModelFit remote;
  g_assert_true (hn_model_fit_remote (hub, info, G_MAXUINT64, &remote, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (remote.level, ==, HN_FIT_LORA);
  /* nothing was cached for it */
  g_autofree char *repo = g_build_filename (cache, "models--org--stories", NULL);
  g_assert_false (g_file_test (repo, G_FILE_TEST_EXISTS));

  g_autofree char *dir = hn_hub_resolve_model (hub, "org/stories", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  HnModelFit local;
  g_assert_true (hn_model_fit_local (dir, G_MAXUINT64, &local, &error));
  g_assert_cmpuint (local.lora_bytes, >, local.chat_bytes);
  g_assert_cmpuint (local.chat_4bit_bytes, <, local.chat_bytes);
  /* before and after download, the same model costs about the same */
  g_assert_cmpfloat (fabs ((double) remote.chat_bytes - (double) local.chat_bytes), <, 0.1 * (double) local.chat_bytes);
  g_assert_cmpfloat (fabs ((double) remote.lora_bytes - (double) local.lora_bytes), <, 0.1 * (double) local.lora_bytes);

  /* the level follows the free memory */
  HnModelFit f;
  g_assert_true (hn_model_fit_local (dir, local.lora_bytes, &f, &error));
  g_assert_cmpint (f.level, ==, HN_FIT_LORA);
  g_assert_true (hn_model_fit_local (dir, local.lora_bytes - 1, &f, &error));
  g_assert_cmpint (f.level, ==, HN_FIT_CHAT);
  g_assert_true (hn_model_fit_local (dir, local.chat_bytes - 1, &f, &error));
  g_assert_cmpint (f.level, ==, HN_FIT_NEEDS_4BIT);
  g_assert_true (hn_model_fit_local (dir, local.chat_4bit_bytes - 1, &f, &error));
  g_assert_cmpint (f.level, ==, HN_FIT_TOO_LARGE);
  g_assert_true (hn_model_fit_local (dir, 0, &f, &error));
  g_assert_cmpint (f.level, ==, HN_FIT_UNKNOWN);
  /* from a search row alone: the Hub's parameter count and config.json */
  HnHubSearchQuery q = { .type = HN_HUB_REPO_MODEL, .search = "stories", .pipeline_tag = "text-generation" };
  g_autoptr (GPtrArray) hits = hn_hub_search (hub, &q, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hits->len, ==, 1);
  HnHubRepoSummary *s = hits->pdata[0];
  g_assert_cmpint (s->n_params, ==, 260032);
  g_assert_true (hn_model_fit_summary (hub, s, local.lora_bytes - 1, &f, NULL, &error));
  g_assert_no_error (error);
  g_assert_false (f.params_from_storage);
  g_assert_cmpfloat (fabs ((double) f.chat_bytes - (double) local.chat_bytes), <, 0.1 * (double) local.chat_bytes);
  g_assert_cmpfloat (fabs ((double) f.lora_bytes - (double) local.lora_bytes), <, 0.1 * (double) local.lora_bytes);
  g_assert_cmpint (hn_model_fit_level (&f, G_MAXUINT64), ==, HN_FIT_LORA);
  g_assert_cmpint (hn_model_fit_level (&f, f.chat_4bit_bytes), ==, HN_FIT_NEEDS_4BIT);
  g_assert_cmpint (hn_model_fit_level (&f, 1), ==, HN_FIT_TOO_LARGE);
  /* no count: the repo's size read as weights, said to be a guess */
  HnHubRepoSummary guess = *s;
  guess.n_params = -1;
  g_assert_true (hn_model_fit_summary (hub, &guess, G_MAXUINT64, &f, NULL, &error));
  g_assert_true (f.params_from_storage);
  g_assert_cmpuint (f.chat_bytes, >=, local.chat_bytes * 9 / 10);
  /* neither: an error; a config that needs a token: an error */
  guess.used_storage = -1;
  g_assert_false (hn_model_fit_summary (hub, &guess, G_MAXUINT64, &f, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  HnHubRepoSummary gated = { .id = (char *) "org/gated", .n_params = 1000, .used_storage = 11 };
  g_assert_false (hn_model_fit_summary (hub, &gated, G_MAXUINT64, &f, NULL, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  /* no weights: an error, not a guess */
  HnHubRepoInfo *bert = hn_hub_repo_info (hub, HN_HUB_REPO_MODEL, "org/bert-mini", NULL, &error);
  g_assert_no_error (error);
  g_assert_false (hn_model_fit_remote (hub, bert, G_MAXUINT64, &f, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  hn_hub_repo_info_free (bert);
  hn_hub_repo_info_free (info);
  rm_rf (cache);
}

/* The CLI: hub-search prints one JSON page; --local lists the cache offline;
 * a keyring-less session falls back to anonymous; HF_TOKEN is used and never
 * printed. */
static void
test_cli (void)
{
  const char *build = g_getenv ("HN_BUILD_DIR");
  g_autofree char *cli = g_build_filename (build ? build : ".", "app", "cli", "hierarchos-native-cli", NULL);
  if (!g_file_test (cli, G_FILE_TEST_IS_EXECUTABLE))
    {
      g_test_skip ("CLI not built");
      return;
    }
  g_autofree char *cache = g_dir_make_tmp ("hn-lib-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (GSubprocessLauncher) l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                                                                 G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_setenv (l, "HF_ENDPOINT", hub_srv.base, TRUE);
  g_subprocess_launcher_unsetenv (l, "HF_HUB_OFFLINE");
  /* no Secret Service on this bus: the keyring lookup fails fast */
  g_subprocess_launcher_setenv (l, "DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus", TRUE);
  g_autoptr (GSubprocess) p = g_subprocess_launcher_spawn (l, &error, cli, "hub-search", "--limit", "2",
                                                           "--hf-cache-dir", cache, NULL);
  g_assert_no_error (error);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (p, NULL, NULL, &out, &err, &error));
  if (g_subprocess_get_exit_status (p) != 0)
    g_error ("hub-search failed: %s %s", out, err);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_assert_true (json_parser_load_from_data (parser, out, -1, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpuint (json_array_get_length (json_object_get_array_member (o, "results")), ==, 2);
  g_assert_cmpstr (json_object_get_string_member (o, "next_cursor"), ==, "off-2");

  /* the next page through --cursor */
  g_autoptr (GSubprocess) p2 = g_subprocess_launcher_spawn (l, &error, cli, "hub-search", "--limit", "2", "--cursor",
                                                            "off-2", NULL);
  g_autofree char *out2 = NULL, *err2 = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (p2, NULL, NULL, &out2, &err2, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (p2), ==, 0);
  g_assert_nonnull (strstr (out2, "\"id\":\"org/tiny\""));

  /* gated with HF_TOKEN: downloaded, and the token appears nowhere */
  g_subprocess_launcher_setenv (l, "HF_TOKEN", TOKEN, TRUE);
  g_autoptr (GSubprocess) g = g_subprocess_launcher_spawn (l, &error, cli, "pull", "--repo", "org/gated",
                                                           "--hf-cache-dir", cache, "--json-events", NULL);
  g_autofree char *gout = NULL, *gerr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (g, NULL, NULL, &gout, &gerr, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (g), ==, 0);
  g_assert_null (strstr (gout, TOKEN));
  g_assert_null (strstr (gerr, TOKEN));
  g_subprocess_launcher_unsetenv (l, "HF_TOKEN");

  /* offline: --local lists the cache; a search fails with the reason */
  g_subprocess_launcher_setenv (l, "HF_HUB_OFFLINE", "1", TRUE);
  g_autoptr (GSubprocess) loc = g_subprocess_launcher_spawn (l, &error, cli, "hub-search", "--local", "--hf-cache-dir",
                                                             cache, NULL);
  g_autofree char *lout = NULL, *lerr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (loc, NULL, NULL, &lout, &lerr, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (loc), ==, 0);
  g_assert_true (g_str_has_prefix (lout, "[{\"id\":\"org/gated\""));
  g_autoptr (GSubprocess) s = g_subprocess_launcher_spawn (l, &error, cli, "hub-search", NULL);
  g_autofree char *sout = NULL, *serr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (s, NULL, NULL, &sout, &serr, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (s), !=, 0);
  g_assert_nonnull (strstr (serr, "HF_HUB_OFFLINE"));

  /* --local lists the folders added on the Models page too (the same list) */
  g_autofree char *demo = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  const char *added[] = { demo, NULL };
  g_assert_true (hn_model_library_set_paths (added, &error));
  g_assert_no_error (error);
  g_autoptr (GSubprocess) la = g_subprocess_launcher_spawn (l, &error, cli, "hub-search", "--local", "--hf-cache-dir",
                                                            cache, NULL);
  g_autofree char *laout = NULL, *laerr = NULL;
  g_assert_true (g_subprocess_communicate_utf8 (la, NULL, NULL, &laout, &laerr, &error));
  g_assert_cmpint (g_subprocess_get_exit_status (la), ==, 0);
  g_assert_true (g_str_has_prefix (laout, "[{\"id\":\"org/gated\""));
  g_autofree char *demo_json = g_strdup_printf ("\"id\":\"stories260K\",\"path\":\"%s\"", demo);
  g_assert_nonnull (strstr (laout, demo_json));
  g_assert_nonnull (strstr (laout, "\"user_added\":true"));
  g_assert_true (hn_model_library_set_paths (NULL, &error));
  rm_rf (cache);
}

/* The list of added folders: kept in order, read back, empty without a
 * file, and a damaged file is an error that names it. */
static void
test_added_list (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *file = hn_model_library_paths_file ();
  g_unlink (file);
  g_auto (GStrv) none = hn_model_library_get_paths (&error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (none), ==, 0);
  const char *paths[] = { "/models/b", "/models/a.gguf", NULL };
  g_assert_true (hn_model_library_set_paths (paths, &error));
  g_assert_no_error (error);
  g_auto (GStrv) back = hn_model_library_get_paths (&error);
  g_assert_no_error (error);
  g_assert_true (g_strv_equal ((const char *const *) back, paths));
  g_assert_true (g_file_set_contents (file, "{\"not\": \"a list\"}", -1, NULL));
  g_auto (GStrv) bad = hn_model_library_get_paths (&error);
  g_assert_null (bad);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, file));
  g_unlink (file);
}

/* What the library says about folders and GGUF files the user added: a
 * GGUF from its tensor infos and keys (the ggml type, the parameters, the
 * model_type), a fit like the folder it came from, and a path that cannot
 * be read listed with the reason. */
static void
test_added_paths (void)
{
  g_autofree char *tmp = g_dir_make_tmp ("hn-lib-added-XXXXXX", NULL);
  g_autofree char *cache = g_build_filename (tmp, "cache", NULL);
  g_autofree char *demo = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  g_autofree char *gguf = g_build_filename (tmp, "stories-q8_0.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export (demo, NULL, HN_GGUF_OUT_Q8_0, gguf, &error));
  g_assert_no_error (error);
  const char *paths[] = { demo, gguf, "/nonexistent/model", NULL };
  g_autoptr (GPtrArray) all = hn_model_library_list_with (cache, paths, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (all->len, ==, 3); /* an empty cache, then the three in order */
  HnLocalModel *f = all->pdata[0], *g = all->pdata[1], *bad = all->pdata[2];
  g_assert_true (f->user_added && !f->gguf);
  g_assert_cmpstr (f->dtype, ==, "f32");
  g_assert_cmpint (f->n_params, ==, 260032);
  g_assert_cmpuint (f->size_on_disk, >, 1000000);
  g_assert_true (g->user_added && g->gguf);
  g_assert_cmpstr (g->repo_id, ==, "stories-q8_0.gguf");
  g_assert_cmpstr (g->dtype, ==, "q8_0");
  g_assert_cmpstr (g->model_type, ==, "llama");
  g_assert_true (g->supported);
  g_assert_null (g->problem);
  g_assert_cmpint (g->n_params, >, 250000);
  g_assert_cmpint (g->n_params, <=, 260032);
  g_assert_cmpuint (g->size_on_disk, <, f->size_on_disk / 2); /* 8-bit against f32 */
  g_assert_true (bad->user_added);
  g_assert_nonnull (bad->problem);
  g_assert_nonnull (strstr (bad->problem, "/nonexistent/model"));
  /* a GGUF repo in the cache (one .gguf, no config.json) is a GGUF entry too */
  g_autofree char *snap = g_build_filename (cache, "models--org--stories-gguf", "snapshots", COMMIT, NULL);
  g_autofree char *refs = g_build_filename (cache, "models--org--stories-gguf", "refs", NULL);
  g_assert_cmpint (g_mkdir_with_parents (snap, 0755), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (refs, 0755), ==, 0);
  g_autofree char *main_ref = g_build_filename (refs, "main", NULL);
  g_assert_true (g_file_set_contents (main_ref, COMMIT, -1, NULL));
  g_autofree char *in_cache = g_build_filename (snap, "stories-q8_0.gguf", NULL);
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (gguf, &bytes, &len, NULL));
  g_assert_true (g_file_set_contents (in_cache, bytes, (gssize) len, NULL));
  g_autoptr (GPtrArray) cached = hn_model_library_list (cache, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (cached->len, ==, 1);
  HnLocalModel *c = cached->pdata[0];
  g_assert_cmpstr (c->repo_id, ==, "org/stories-gguf");
  g_assert_true (c->gguf && !c->user_added);
  g_assert_cmpstr (c->dtype, ==, "q8_0");
  g_assert_null (c->problem);
  g_assert_cmpstr (c->snapshot, ==, snap);
  /* a GGUF gets a fit from the engine's estimate for it, like a folder */
  HnModelFit fg, ff;
  g_assert_true (hn_model_fit_local (gguf, G_MAXUINT64, &fg, &error));
  g_assert_no_error (error);
  g_assert_true (hn_model_fit_local (demo, G_MAXUINT64, &ff, &error));
  g_assert_cmpint (fg.level, ==, HN_FIT_LORA);
  g_assert_cmpint (ff.level, ==, HN_FIT_LORA);
  g_assert_cmpuint (fg.chat_bytes, >, 0);
  g_assert_cmpuint (fg.chat_4bit_bytes, <=, fg.chat_bytes);
  rm_rf (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_unsetenv ("HF_TOKEN");
  g_unsetenv ("HUGGING_FACE_HUB_TOKEN");
  g_unsetenv ("HF_HUB_OFFLINE");
  g_unsetenv ("TRANSFORMERS_OFFLINE");
  g_unsetenv ("http_proxy");
  g_unsetenv ("https_proxy");
  g_unsetenv ("HTTP_PROXY");
  g_unsetenv ("HTTPS_PROXY");
  g_autofree char *home = g_dir_make_tmp ("hn-lib-home-XXXXXX", NULL);
  g_setenv ("HF_HOME", home, TRUE); /* no token file of the user's */
  /* the added-folders list of this test, not the user's */
  g_autofree char *data_home = g_build_filename (home, "data", NULL);
  g_setenv ("XDG_DATA_HOME", data_home, TRUE);
  start_server ();
  /* every keyring call in this process goes to the in-memory store */
  hn_hub_token_store_set (&mem_store_vt);
  g_test_add_func ("/hub-library/link-next", test_link_next);
  g_test_add_func ("/hub-library/search-paging", test_search_paging);
  g_test_add_func ("/hub-library/info-and-card", test_info_and_card);
  g_test_add_func ("/hub-library/gated-token", test_gated_token);
  g_test_add_func ("/hub-library/cancel-resume", test_cancel_resume);
  g_test_add_func ("/hub-library/corrupt-partial", test_corrupt_partial);
  g_test_add_func ("/hub-library/local-offline-remove", test_local_offline_remove);
  g_test_add_func ("/hub-library/fit", test_fit);
  g_test_add_func ("/hub-library/added-paths", test_added_paths);
  g_test_add_func ("/hub-library/added-list", test_added_list);
  g_test_add_func ("/hub-library/cli", test_cli);
  int rc = g_test_run ();
  stop_server ();
  rm_rf (home);
  g_free (mem_token);
  return rc;
}
