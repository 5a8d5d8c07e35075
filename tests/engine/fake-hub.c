/* The fake Hub (fake-hub.h): the revision API, resolve URLs redirecting
 * LFS files to a CDN host (here "localhost", so the token must not follow),
 * X-Repo-Commit / X-Linked-Etag / X-Linked-Size headers, Range, 401 for a
 * gated repo, 404s with X-Error-Code, and a CDN that drops the connection
 * mid-file once. */
#include "fake-hub.h"
#include "formats/safetensors.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

FakeHub hub_srv;

static void
fake_file_free (gpointer p)
{
  FakeFile *f = p;
  g_bytes_unref (f->data);
  g_free (f->sha256);
  g_free (f->served_etag);
  g_free (f);
}

void
add_file (const char *repo, const char *path, GBytes *data, gboolean lfs)
{
  FakeFile *f = g_new0 (FakeFile, 1);
  f->repo = repo;
  f->path = path;
  f->data = data;
  f->lfs = lfs;
  f->sha256 = g_compute_checksum_for_bytes (G_CHECKSUM_SHA256, data);
  if (lfs)
    f->served_etag = g_strdup (f->sha256);
  else
    f->served_etag = g_compute_checksum_for_bytes (G_CHECKSUM_SHA1, data); /* like a git blob id */
  g_ptr_array_add (hub_srv.files, f);
}

static void
error_reply (SoupServerMessage *msg, guint status, const char *code)
{
  soup_server_message_set_status (msg, status, NULL);
  if (code)
    soup_message_headers_replace (soup_server_message_get_response_headers (msg), "X-Error-Code", code);
  const char *body = "{\"error\":\"fake hub error\"}";
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_STATIC, body, strlen (body));
}

static gboolean
repo_exists (const char *repo)
{
  for (guint i = 0; i < hub_srv.files->len; i++)
    if (strcmp (((FakeFile *) hub_srv.files->pdata[i])->repo, repo) == 0)
      return TRUE;
  return FALSE;
}

/* Gated repos answer 401 unless the right token comes. */
static gboolean
authorized (SoupServerMessage *msg, const char *repo)
{
  if (!strstr (repo, "gated"))
    return TRUE;
  const char *auth = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Authorization");
  return g_strcmp0 (auth, "Bearer good-token") == 0;
}

static const char *
commit_for (const char *rev)
{
  if (strcmp (rev, "main") == 0 || strcmp (rev, "v1.0") == 0 || strcmp (rev, COMMIT) == 0)
    return COMMIT;
  return NULL;
}

static void
serve_api (SoupServerMessage *msg, const char *repo, const char *rev)
{
  if (!repo_exists (repo))
    return error_reply (msg, 401, "RepoNotFound"); /* the Hub answers 401 for unknown repos */
  if (!authorized (msg, repo))
    return error_reply (msg, 401, "GatedRepo");
  if (!commit_for (rev))
    return error_reply (msg, 404, "RevisionNotFound");
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, strchr (repo, '/') + 1);
  json_builder_set_member_name (b, "sha");
  json_builder_add_string_value (b, COMMIT);
  json_builder_set_member_name (b, "siblings");
  json_builder_begin_array (b);
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (strcmp (f->repo, repo) != 0)
        continue;
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "rfilename");
      json_builder_add_string_value (b, f->path);
      json_builder_set_member_name (b, "size");
      json_builder_add_int_value (b, (gint64) g_bytes_get_size (f->data));
      if (f->lfs)
        {
          json_builder_set_member_name (b, "lfs");
          json_builder_begin_object (b);
          json_builder_set_member_name (b, "sha256");
          json_builder_add_string_value (b, f->sha256);
          json_builder_set_member_name (b, "size");
          json_builder_add_int_value (b, (gint64) g_bytes_get_size (f->data));
          json_builder_end_object (b);
        }
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  gsize len;
  char *text = json_to_string (root, FALSE);
  len = strlen (text);
  soup_server_message_set_status (msg, 200, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, text, len);
}

FakeFile *
find_file (const char *repo, const char *path)
{
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (strcmp (f->repo, repo) == 0 && strcmp (f->path, path) == 0)
        return f;
    }
  return NULL;
}

static FakeFile *
find_blob (const char *repo, const char *sha)
{
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (strcmp (f->repo, repo) == 0 && strcmp (f->sha256, sha) == 0)
        return f;
    }
  return NULL;
}

/* Writes the body, honouring "Range: bytes=N-". */
/* A slow CDN (throttle_us): the body goes out 64 KiB at a time from a
 * timer, so a client sees a download in progress and can cancel it. */
typedef struct {
  SoupServerMessage *msg;
  GBytes *data;
  gsize off;
  gboolean finished;
} Drip;

static void
drip_finished (SoupServerMessage *msg, Drip *d)
{
  d->finished = TRUE;
}

static gboolean
drip_next (gpointer p)
{
  Drip *d = p;
  gsize len;
  const char *b = g_bytes_get_data (d->data, &len);
  if (!d->finished)
    {
      gsize n = MIN ((gsize) 65536, len - d->off);
      SoupMessageBody *body = soup_server_message_get_response_body (d->msg);
      soup_message_body_append (body, SOUP_MEMORY_COPY, b + d->off, n);
      d->off += n;
      if (d->off >= len)
        soup_message_body_complete (body);
      soup_server_message_unpause (d->msg);
    }
  if (d->finished || d->off >= len)
    {
      g_signal_handlers_disconnect_by_data (d->msg, d);
      g_object_unref (d->msg);
      g_bytes_unref (d->data);
      g_free (d);
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

static void
drip_bytes (SoupServerMessage *msg, const char *data, gsize len)
{
  soup_message_headers_set_content_type (soup_server_message_get_response_headers (msg), "application/octet-stream", NULL);
  soup_message_headers_set_content_length (soup_server_message_get_response_headers (msg), (goffset) len);
  Drip *d = g_new0 (Drip, 1);
  d->msg = g_object_ref (msg);
  d->data = g_bytes_new (data, len);
  g_signal_connect (msg, "finished", G_CALLBACK (drip_finished), d);
  soup_server_message_pause (msg);
  GSource *t = g_timeout_source_new (MAX (1, hub_srv.throttle_us / 1000));
  g_source_set_callback (t, drip_next, d, NULL);
  g_source_attach (t, hub_srv.ctx);
  g_source_unref (t);
}

static void
serve_bytes (SoupServerMessage *msg, GBytes *data)
{
  gsize len;
  const char *d = g_bytes_get_data (data, &len);
  const char *range = soup_message_headers_get_one (soup_server_message_get_request_headers (msg), "Range");
  guint64 from = 0;
  if (range && sscanf (range, "bytes=%" G_GUINT64_FORMAT "-", &from) == 1 && from > 0)
    {
      hub_srv.range_gets++;
      if (from >= len)
        {
          soup_server_message_set_status (msg, 416, NULL);
          return;
        }
      g_autofree char *cr = g_strdup_printf ("bytes %" G_GUINT64_FORMAT "-%" G_GSIZE_FORMAT "/%" G_GSIZE_FORMAT, from,
                                             len - 1, len);
      soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Content-Range", cr);
      soup_server_message_set_status (msg, 206, NULL);
      if (hub_srv.throttle_us > 0 && strcmp (soup_server_message_get_method (msg), "GET") == 0)
        drip_bytes (msg, d + from, len - from);
      else
        soup_server_message_set_response (msg, "application/octet-stream", SOUP_MEMORY_COPY, d + from, len - from);
      return;
    }
  soup_server_message_set_status (msg, 200, NULL);
  if (hub_srv.throttle_us > 0 && strcmp (soup_server_message_get_method (msg), "GET") == 0)
    drip_bytes (msg, d, len);
  else
    soup_server_message_set_response (msg, "application/octet-stream", SOUP_MEMORY_COPY, d, len);
}

/* The flaky CDN: announce the whole file, send half, hang up. */
static void
drop_mid_file (SoupServerMessage *msg, GBytes *data)
{
  gsize len;
  const char *d = g_bytes_get_data (data, &len);
  GIOStream *io = soup_server_message_steal_connection (msg);
  g_autofree char *head = g_strdup_printf ("HTTP/1.1 200 OK\r\nContent-Length: %" G_GSIZE_FORMAT
                                           "\r\nContent-Type: application/octet-stream\r\n\r\n", len);
  GOutputStream *out = g_io_stream_get_output_stream (io);
  g_output_stream_write_all (out, head, strlen (head), NULL, NULL, NULL);
  g_output_stream_write_all (out, d, len / 2, NULL, NULL, NULL);
  g_output_stream_flush (out, NULL, NULL);
  g_io_stream_close (io, NULL, NULL);
  g_object_unref (io);
}

/* Every model repo the fake holds, with the figures search sorts by. */
const FakeRepoMeta fake_repo_meta[] = {
  { "org/stories", "text-generation", 9000, 40, "2024-05-01T00:00:00.000Z", "mit", 260032 },
  { "org/gated", "text-generation", 8000, 90, "2024-01-01T00:00:00.000Z", "llama3" },
  { "org/tiny", "text-generation", 7000, 10, "2024-07-01T00:00:00.000Z", "apache-2.0" },
  { "org/flaky", "text-generation", 6000, 5, "2023-01-01T00:00:00.000Z", "apache-2.0" },
  { "org/busy", "text-generation", 5000, 4, "2023-02-01T00:00:00.000Z", NULL },
  { "org/bad", "text-generation", 4000, 3, "2023-03-01T00:00:00.000Z", NULL },
  { "org/pickle", "text-generation", 3000, 2, "2023-04-01T00:00:00.000Z", NULL },
  { "org/evil", "text-generation", 2000, 1, "2023-05-01T00:00:00.000Z", NULL },
  { "org/bert-mini", "fill-mask", 1000, 1, "2023-06-01T00:00:00.000Z", "apache-2.0" },
  { NULL }
};

/* Repos with details that search does not list (its counts stay as they are). */
static const FakeRepoMeta unlisted_meta[] = {
  { "org/stories-gguf", "text-generation", 100, 1, "2024-06-01T00:00:00.000Z", "mit" },
  { NULL }
};

static const FakeRepoMeta *
meta_for (const char *id)
{
  for (const FakeRepoMeta *m = fake_repo_meta; m->id; m++)
    if (strcmp (m->id, id) == 0)
      return m;
  for (const FakeRepoMeta *m = unlisted_meta; m->id; m++)
    if (strcmp (m->id, id) == 0)
      return m;
  return NULL;
}

static guint64
repo_bytes (const char *repo, gboolean weights_only)
{
  guint64 n = 0;
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (strcmp (f->repo, repo) == 0 && (!weights_only || g_str_has_suffix (f->path, ".safetensors")))
        n += g_bytes_get_size (f->data);
    }
  return n;
}

static void
add_meta (JsonBuilder *b, const FakeRepoMeta *m)
{
  g_autofree char *repo = g_strdup_printf ("models/%s", m->id);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, m->id);
  json_builder_set_member_name (b, "pipeline_tag");
  json_builder_add_string_value (b, m->pipeline_tag);
  json_builder_set_member_name (b, "library_name");
  json_builder_add_string_value (b, "transformers");
  json_builder_set_member_name (b, "downloads");
  json_builder_add_int_value (b, m->downloads);
  json_builder_set_member_name (b, "likes");
  json_builder_add_int_value (b, m->likes);
  json_builder_set_member_name (b, "lastModified");
  json_builder_add_string_value (b, m->last_modified);
  json_builder_set_member_name (b, "private");
  json_builder_add_boolean_value (b, FALSE);
  json_builder_set_member_name (b, "gated");
  if (strstr (m->id, "gated"))
    json_builder_add_string_value (b, "manual");
  else
    json_builder_add_boolean_value (b, FALSE);
  json_builder_set_member_name (b, "usedStorage");
  json_builder_add_int_value (b, (gint64) repo_bytes (repo, FALSE));
  if (m->params > 0)
    {
      json_builder_set_member_name (b, "safetensors");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "total");
      json_builder_add_int_value (b, m->params);
      json_builder_end_object (b);
    }
  json_builder_set_member_name (b, "tags");
  json_builder_begin_array (b);
  json_builder_add_string_value (b, "transformers");
  if (m->license)
    {
      g_autofree char *t = g_strdup_printf ("license:%s", m->license);
      json_builder_add_string_value (b, t);
    }
  json_builder_end_array (b);
}

static void
reply_json (SoupServerMessage *msg, JsonBuilder *b)
{
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  char *text = json_to_string (root, FALSE);
  soup_server_message_set_status (msg, 200, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, text, strlen (text));
}

static int
by_downloads (gconstpointer a, gconstpointer b)
{
  const FakeRepoMeta *x = *(const FakeRepoMeta *const *) a, *y = *(const FakeRepoMeta *const *) b;
  return x->downloads < y->downloads ? 1 : x->downloads > y->downloads ? -1 : 0;
}

static int
by_modified (gconstpointer a, gconstpointer b)
{
  const FakeRepoMeta *x = *(const FakeRepoMeta *const *) a, *y = *(const FakeRepoMeta *const *) b;
  return -strcmp (x->last_modified, y->last_modified);
}

/* The Hub's Link header: the same query with the cursor of the next page
 * (an offset in the fake, opaque to the client as on the Hub). */
static void
set_next_link (SoupServerMessage *msg, const char *api, const char *qs, guint next_offset)
{
  GString *next = g_string_new (NULL);
  g_string_append_printf (next, "<%s/api/%s?", hub_srv.base, api);
  g_auto (GStrv) pairs = g_strsplit (qs, "&", -1);
  for (char **p = pairs; *p; p++)
    if (!g_str_has_prefix (*p, "cursor="))
      g_string_append_printf (next, "%s&", *p);
  g_string_append_printf (next, "cursor=off-%u>; rel=\"next\"", next_offset);
  soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Link", next->str);
  g_string_free (next, TRUE);
}

/* /api/models?search=&pipeline_tag=&filter=&sort=&limit=&cursor=: the
 * cursor is an offset in the fake (opaque to the client, as on the Hub). */
static void
serve_search (SoupServerMessage *msg)
{
  GUri *uri = soup_server_message_get_uri (msg);
  const char *qs = g_uri_get_query (uri);
  hub_srv.search_calls++;
  g_free (hub_srv.last_search);
  hub_srv.last_search = g_strdup (qs ? qs : "");
  g_autoptr (GHashTable) q = qs ? g_uri_parse_params (qs, -1, "&", G_URI_PARAMS_NONE, NULL) : NULL;
  const char *search = q ? g_hash_table_lookup (q, "search") : NULL;
  const char *tag = q ? g_hash_table_lookup (q, "pipeline_tag") : NULL;
  const char *sort = q ? g_hash_table_lookup (q, "sort") : NULL;
  const char *limit_s = q ? g_hash_table_lookup (q, "limit") : NULL;
  const char *cursor = q ? g_hash_table_lookup (q, "cursor") : NULL;
  guint limit = limit_s ? (guint) atoi (limit_s) : 1000;
  guint from = cursor && g_str_has_prefix (cursor, "off-") ? (guint) atoi (cursor + 4) : 0;
  g_autoptr (GPtrArray) hits = g_ptr_array_new ();
  for (const FakeRepoMeta *m = fake_repo_meta; m->id; m++)
    if ((!search || strstr (m->id, search)) && (!tag || strcmp (tag, m->pipeline_tag) == 0))
      g_ptr_array_add (hits, (gpointer) m);
  g_ptr_array_sort (hits, g_strcmp0 (sort, "lastModified") == 0 ? by_modified : by_downloads);
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (guint i = from; i < hits->len && i < from + limit; i++)
    {
      json_builder_begin_object (b);
      add_meta (b, hits->pdata[i]);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  if (from + limit < hits->len)
    set_next_link (msg, "models", qs, from + limit);
  reply_json (msg, b);
}

/* /api/datasets?search=&limit=&cursor=: every dataset repo the fake holds
 * whose name has the text, in the order they were added, paged like the
 * models (the cursor is an offset). */
static void
serve_dataset_search (SoupServerMessage *msg)
{
  const char *qs = g_uri_get_query (soup_server_message_get_uri (msg));
  hub_srv.search_calls++;
  g_free (hub_srv.last_search);
  hub_srv.last_search = g_strdup (qs ? qs : "");
  g_autoptr (GHashTable) q = qs ? g_uri_parse_params (qs, -1, "&", G_URI_PARAMS_NONE, NULL) : NULL;
  const char *search = q ? g_hash_table_lookup (q, "search") : NULL;
  const char *limit_s = q ? g_hash_table_lookup (q, "limit") : NULL;
  const char *cursor = q ? g_hash_table_lookup (q, "cursor") : NULL;
  guint limit = limit_s ? (guint) atoi (limit_s) : 1000;
  guint from = cursor && g_str_has_prefix (cursor, "off-") ? (guint) atoi (cursor + 4) : 0;
  g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr (GPtrArray) hits = g_ptr_array_new ();
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (!g_str_has_prefix (f->repo, "datasets/") || g_hash_table_contains (seen, f->repo))
        continue;
      const char *id = f->repo + strlen ("datasets/");
      if (search && !strstr (id, search))
        continue;
      g_hash_table_add (seen, (gpointer) f->repo);
      g_ptr_array_add (hits, (gpointer) id);
    }
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (guint i = from; i < hits->len && i < from + limit; i++)
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "id");
      json_builder_add_string_value (b, hits->pdata[i]);
      json_builder_set_member_name (b, "downloads");
      json_builder_add_int_value (b, 100);
      json_builder_set_member_name (b, "likes");
      json_builder_add_int_value (b, 1);
      json_builder_set_member_name (b, "gated");
      json_builder_add_boolean_value (b, FALSE);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  if (from + limit < hits->len)
    set_next_link (msg, "datasets", qs, from + limit);
  reply_json (msg, b);
}

/* /api/models/org/name?blobs=true: public even for a gated repo. */
static void
serve_info (SoupServerMessage *msg, const char *id)
{
  g_autofree char *repo = g_strdup_printf ("models/%s", id);
  const FakeRepoMeta *m = meta_for (id);
  if (!m || !repo_exists (repo))
    return error_reply (msg, 401, "RepoNotFound");
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  add_meta (b, m);
  json_builder_set_member_name (b, "sha");
  json_builder_add_string_value (b, COMMIT);
  json_builder_set_member_name (b, "cardData");
  json_builder_begin_object (b);
  if (m->license)
    {
      json_builder_set_member_name (b, "license");
      json_builder_add_string_value (b, m->license);
    }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "config");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "model_type");
  json_builder_add_string_value (b, strstr (id, "bert") ? "bert" : "llama");
  json_builder_set_member_name (b, "architectures");
  json_builder_begin_array (b);
  json_builder_add_string_value (b, strstr (id, "bert") ? "BertForMaskedLM" : "LlamaForCausalLM");
  json_builder_end_array (b);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "siblings");
  json_builder_begin_array (b);
  for (guint i = 0; i < hub_srv.files->len; i++)
    {
      FakeFile *f = hub_srv.files->pdata[i];
      if (strcmp (f->repo, repo) != 0)
        continue;
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "rfilename");
      json_builder_add_string_value (b, f->path);
      json_builder_set_member_name (b, "size");
      json_builder_add_int_value (b, (gint64) g_bytes_get_size (f->data));
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);
  reply_json (msg, b);
}

static void
handler (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer data)
{
  g_mutex_lock (&hub_srv.lock);
  const char *method = soup_server_message_get_method (msg);
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  SoupMessageHeaders *resp = soup_server_message_get_response_headers (msg);
  g_auto (GStrv) parts = g_strsplit (path + 1, "/", -1);
  guint n = g_strv_length (parts);

  if (n == 5 && strcmp (parts[0], "cdn") == 0)
    {
      /* /cdn/<models|datasets>/<org>/<name>/<sha256> */
      if (soup_message_headers_get_one (req, "Authorization"))
        hub_srv.auth_leaks++;
      g_autofree char *repo = g_strdup_printf ("%s/%s/%s", parts[1], parts[2], parts[3]);
      FakeFile *f = find_blob (repo, parts[4]);
      if (!f)
        error_reply (msg, 404, NULL);
      else if (strcmp (method, "GET") == 0)
        {
          hub_srv.cdn_gets++;
          hub_srv.get_bodies++;
          if (strstr (f->repo, "busy") && hub_srv.busy_next)
            {
              hub_srv.busy_next = FALSE;
              error_reply (msg, 503, NULL);
            }
          else if (strstr (f->repo, "flaky") && hub_srv.drop_next_flaky)
            {
              hub_srv.drop_next_flaky = FALSE;
              drop_mid_file (msg, f->data);
            }
          else
            serve_bytes (msg, f->data);
        }
      else
        serve_bytes (msg, f->data);
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  if (n == 2 && strcmp (parts[0], "api") == 0 && strcmp (parts[1], "datasets") == 0)
    {
      serve_dataset_search (msg);
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  if (n == 2 && strcmp (parts[0], "api") == 0 && strcmp (parts[1], "models") == 0)
    {
      serve_search (msg);
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  if (n == 4 && strcmp (parts[0], "api") == 0 && strcmp (parts[1], "models") == 0)
    {
      g_autofree char *id = g_strdup_printf ("%s/%s", parts[2], parts[3]);
      serve_info (msg, id);
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  if (n >= 6 && strcmp (parts[0], "api") == 0 && strcmp (parts[4], "revision") == 0)
    {
      hub_srv.api_calls++;
      g_autofree char *repo = g_strdup_printf ("%s/%s/%s", parts[1], parts[2], parts[3]);
      g_autofree char *rev = g_uri_unescape_string (parts[5], NULL);
      serve_api (msg, repo, rev);
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  /* [datasets/]org/name/resolve/rev/path... */
  guint o = (n > 0 && strcmp (parts[0], "datasets") == 0) ? 1 : 0;
  if (n >= o + 5 && strcmp (parts[o + 2], "resolve") == 0)
    {
      g_autofree char *repo = g_strdup_printf ("%s/%s/%s", o ? "datasets" : "models", parts[o], parts[o + 1]);
      g_autofree char *rev = g_uri_unescape_string (parts[o + 3], NULL);
      g_autofree char *joined = g_strjoinv ("/", parts + o + 4);
      g_autofree char *fpath = g_uri_unescape_string (joined, NULL);
      if (strcmp (method, "HEAD") == 0)
        hub_srv.head_calls++;
      if (!repo_exists (repo))
        error_reply (msg, 401, "RepoNotFound");
      else if (!authorized (msg, repo))
        error_reply (msg, 401, "GatedRepo");
      else if (!commit_for (rev))
        error_reply (msg, 404, "RevisionNotFound");
      else
        {
          FakeFile *f = find_file (repo, fpath);
          if (!f)
            error_reply (msg, 404, "EntryNotFound");
          else
            {
              soup_message_headers_replace (resp, "X-Repo-Commit", COMMIT);
              g_autofree char *etag = g_strdup_printf ("\"%s\"", f->served_etag);
              if (f->lfs)
                {
                  g_autofree char *size = g_strdup_printf ("%" G_GSIZE_FORMAT, g_bytes_get_size (f->data));
                  g_autofree char *loc = g_strdup_printf ("http://localhost:%d/cdn/%s/%s", hub_srv.port, repo, f->sha256);
                  soup_message_headers_replace (resp, "X-Linked-Etag", etag);
                  soup_message_headers_replace (resp, "X-Linked-Size", size);
                  soup_message_headers_replace (resp, "ETag", "\"pointer-etag\"");
                  soup_message_headers_replace (resp, "Location", loc);
                  soup_server_message_set_status (msg, 302, NULL);
                }
              else
                {
                  soup_message_headers_replace (resp, "ETag", etag);
                  if (strcmp (method, "GET") == 0)
                    hub_srv.get_bodies++;
                  serve_bytes (msg, f->data);
                }
            }
        }
      g_mutex_unlock (&hub_srv.lock);
      return;
    }
  error_reply (msg, 404, NULL);
  g_mutex_unlock (&hub_srv.lock);
}

static gpointer
server_thread (gpointer data)
{
  g_main_context_push_thread_default (hub_srv.ctx);
  g_main_loop_run (hub_srv.loop);
  g_main_context_pop_thread_default (hub_srv.ctx);
  return NULL;
}

static GBytes *
make_safetensors_bytes (void)
{
  /* a real safetensors file, so the pulled model opens */
  g_autofree char *dir = g_dir_make_tmp ("hn-hubst-XXXXXX", NULL);
  g_autofree char *p = g_build_filename (dir, "m.safetensors", NULL);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  gint64 shape[] = { 256, 300 };
  g_autofree float *v = g_new (float, 256 * 300);
  for (int i = 0; i < 256 * 300; i++)
    v[i] = (float) ((i * 7919) % 1000) / 1000.0f;
  g_assert_true (hn_safetensors_writer_add (w, "w", HN_ST_DTYPE_F32, 2, shape, v, sizeof (float) * 256 * 300, FALSE, NULL));
  g_assert_true (hn_safetensors_writer_write_file (w, p, NULL));
  char *data;
  gsize len;
  g_assert_true (g_file_get_contents (p, &data, &len, NULL));
  g_unlink (p);
  g_rmdir (dir);
  return g_bytes_new_take (data, len);
}

static void
add_dir_files (const char *repo, const char *dir, const char *const *names)
{
  for (guint i = 0; names[i]; i++)
    {
      g_autofree char *p = g_build_filename (dir, names[i], NULL);
      char *data;
      gsize len;
      g_assert_true (g_file_get_contents (p, &data, &len, NULL));
      add_file (repo, names[i], g_bytes_new_take (data, len), g_str_has_suffix (names[i], ".safetensors"));
    }
}

void
start_server (void)
{
  g_mutex_init (&hub_srv.lock);
  hub_srv.files = g_ptr_array_new_with_free_func (fake_file_free);
  GBytes *st = make_safetensors_bytes ();
  add_file ("models/org/tiny", "config.json", g_bytes_new_static ("{\"model_type\":\"llama\"}", 22), FALSE);
  add_file ("models/org/tiny", "model.safetensors", g_bytes_ref (st), TRUE);
  /* a real model, so generate --hf-model runs end to end */
  static const char *const stories[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                         NULL };
  g_autofree char *demo = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  add_dir_files ("models/org/stories", demo, stories);
  /* a GGUF repo: llama.cpp's quantized stories260K and a second file that is never pulled */
  g_autofree char *gguf_dir = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf", NULL);
  static const char *const gguf_files[] = { "stories260K-llamacpp-q4_k_m.gguf", NULL };
  add_dir_files ("models/org/stories-gguf", gguf_dir, gguf_files);
  add_file ("models/org/stories-gguf", "stories260K-Q8_0.gguf", g_bytes_new_static ("not fetched", 11), TRUE);
  add_file ("models/org/stories-gguf", "README.md", g_bytes_new_static ("# gguf", 6), FALSE);
  add_file ("models/org/tiny", "pytorch_model.bin", g_bytes_new_static ("pickle!", 7), TRUE);
  add_file ("models/org/tiny", "nested/deeper/extra.json", g_bytes_new_static ("{}", 2), FALSE);
  add_file ("models/org/gated", "config.json", g_bytes_new_static ("{\"gated\":1}", 11), FALSE);
  add_file ("models/org/flaky", "model.safetensors", g_bytes_ref (st), TRUE);
  add_file ("models/org/flaky", "config.json", g_bytes_new_static ("{\"model_type\":\"llama\"}", 22), FALSE);
  add_file ("models/org/busy", "model.safetensors", g_bytes_new_static ("0123456789", 10), TRUE);
  add_file ("models/org/bad", "model.safetensors", g_bytes_new_static ("not what the etag says", 22), TRUE);
  add_file ("models/org/evil", "../escape.json", g_bytes_new_static ("{}", 2), FALSE);
  add_file ("models/org/pickle", "pytorch_model.bin", g_bytes_new_static ("pickle", 6), TRUE);
  add_file ("models/org/pickle", "config.json", g_bytes_new_static ("{}", 2), FALSE);
  add_file ("datasets/org/ds", "README.md", g_bytes_new_static ("# ds", 4), FALSE);
  static const char card[] = "---\nlicense: mit\nlanguage: en\n---\n# Stories 260K\n\nA tiny Llama trained on "
                             "TinyStories, for tests.\n";
  add_file ("models/org/stories", "README.md", g_bytes_new_static (card, sizeof card - 1), FALSE);
  add_file ("models/org/bert-mini", "config.json", g_bytes_new_static ("{\"model_type\":\"bert\"}", 21), FALSE);
  add_file ("datasets/org/ds", "data/train-00001-of-00002.jsonl", g_bytes_new_static ("{\"text\":\"b\"}\n", 13), FALSE);
  add_file ("datasets/org/ds", "data/train-00000-of-00002.jsonl", g_bytes_new_static ("{\"text\":\"a\"}\n", 13), FALSE);
  add_file ("datasets/org/ds", "data/test-00000-of-00001.jsonl", g_bytes_new_static ("{\"text\":\"t\"}\n", 13), FALSE);
  g_bytes_unref (st);
  /* the bad repo's server lies about the sha256 */
  FakeFile *bad = find_file ("models/org/bad", "model.safetensors");
  g_free (bad->served_etag);
  bad->served_etag = g_strdup ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  g_free (bad->sha256);
  bad->sha256 = g_strdup (bad->served_etag); /* so the CDN finds it by that name */

  hub_srv.ctx = g_main_context_new ();
  hub_srv.loop = g_main_loop_new (hub_srv.ctx, FALSE);
  g_main_context_push_thread_default (hub_srv.ctx);
  hub_srv.server = soup_server_new (NULL, NULL);
  soup_server_add_handler (hub_srv.server, NULL, handler, NULL, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (soup_server_listen_local (hub_srv.server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error));
  g_assert_no_error (error);
  GSList *uris = soup_server_get_uris (hub_srv.server);
  hub_srv.port = g_uri_get_port (uris->data);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  g_main_context_pop_thread_default (hub_srv.ctx);
  hub_srv.base = g_strdup_printf ("http://127.0.0.1:%d", hub_srv.port);
  /* for code that makes its own HnHub from the environment (jobs); set
   * before any thread exists, as setenv requires */
  g_setenv ("HF_ENDPOINT", hub_srv.base, TRUE);
  hub_srv.thread = g_thread_new ("fake-hub", server_thread, NULL);
}

static gboolean
quit_loop (gpointer data)
{
  soup_server_disconnect (hub_srv.server);
  g_main_loop_quit (hub_srv.loop);
  return G_SOURCE_REMOVE;
}

void
stop_server (void)
{
  GSource *s = g_idle_source_new ();
  g_source_set_callback (s, quit_loop, NULL, NULL);
  g_source_attach (s, hub_srv.ctx);
  g_source_unref (s);
  g_thread_join (hub_srv.thread);
  g_object_unref (hub_srv.server);
  g_main_loop_unref (hub_srv.loop);
  g_main_context_unref (hub_srv.ctx);
  g_ptr_array_unref (hub_srv.files);
  g_free (hub_srv.base);
  g_free (hub_srv.last_search);
}

void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *n;
      while (d && (n = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, n, NULL);
          rm_rf (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}
