#include "hub/hub.h"
#include "hub/hub-private.h"
#include "hub/hub-token.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define MAX_API_REPLY (64u << 20)
#define MAX_ATTEMPTS 5

struct _HnHub {
  SoupSession *session;
  char *endpoint;
  char *endpoint_host;
  int endpoint_port;
  char *token;
  gboolean keyring_tried; /* the keyring is asked once, on the first refusal */
  gboolean offline;
  char *cache_dir;
  HnHubProgressFunc progress;
  gpointer progress_data;
  /* what the progress callback is told about the current file */
  const char *cur_repo;
  guint cur_index, cur_count;
};

const char *const hn_hub_model_patterns[] = {
  "*.json", "*.safetensors", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "*.tiktoken",
  "merges.txt", "vocab.txt", "*.jinja", NULL
};

const char *const hn_hub_tokenizer_patterns[] = {
  "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
  "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "*.tiktoken",
  "chat_template.jinja", "chat_template.json", "config.json", "generation_config.json", NULL
};

gboolean
hn_hub_repo_type_from_string (const char *s, HnHubRepoType *out)
{
  if (g_strcmp0 (s, "model") == 0)
    *out = HN_HUB_REPO_MODEL;
  else if (g_strcmp0 (s, "dataset") == 0)
    *out = HN_HUB_REPO_DATASET;
  else
    return FALSE;
  return TRUE;
}

void
hn_hub_file_free (HnHubFile *f)
{
  if (!f)
    return;
  g_free (f->path);
  g_free (f->lfs_sha256);
  g_free (f);
}

/* ------------------------------------------------------------ settings */

static gboolean
env_true (const char *name)
{
  const char *v = g_getenv (name);
  return v && (g_ascii_strcasecmp (v, "1") == 0 || g_ascii_strcasecmp (v, "true") == 0 ||
               g_ascii_strcasecmp (v, "yes") == 0 || g_ascii_strcasecmp (v, "on") == 0);
}

static char *
hf_home (void)
{
  const char *h = g_getenv ("HF_HOME");
  if (h && *h)
    return g_strdup (h);
  return g_build_filename (g_get_user_cache_dir (), "huggingface", NULL);
}

static char *
default_cache_dir (void)
{
  const char *c = g_getenv ("HF_HUB_CACHE");
  if (!c || !*c)
    c = g_getenv ("HUGGINGFACE_HUB_CACHE");
  if (c && *c)
    return g_strdup (c);
  g_autofree char *home = hf_home ();
  return g_build_filename (home, "hub", NULL);
}

static char *
default_token (void)
{
  const char *t = g_getenv ("HF_TOKEN");
  if (!t || !*t)
    t = g_getenv ("HUGGING_FACE_HUB_TOKEN");
  if (t && *t)
    return g_strstrip (g_strdup (t));
  const char *tp = g_getenv ("HF_TOKEN_PATH");
  g_autofree char *home = hf_home ();
  g_autofree char *path = tp && *tp ? g_strdup (tp) : g_build_filename (home, "token", NULL);
  char *contents = NULL;
  if (g_file_get_contents (path, &contents, NULL, NULL))
    {
      g_strstrip (contents);
      if (*contents)
        return contents;
    }
  g_free (contents);
  return NULL;
}

void
hn_hub_set_endpoint (HnHub *hub, const char *url)
{
  g_free (hub->endpoint);
  g_clear_pointer (&hub->endpoint_host, g_free);
  hub->endpoint = g_strdup (url && *url ? url : "https://huggingface.co");
  gsize l = strlen (hub->endpoint);
  while (l > 0 && hub->endpoint[l - 1] == '/')
    hub->endpoint[--l] = '\0';
  g_autoptr (GUri) u = g_uri_parse (hub->endpoint, G_URI_FLAGS_NONE, NULL);
  if (u)
    {
      hub->endpoint_host = g_strdup (g_uri_get_host (u));
      hub->endpoint_port = g_uri_get_port (u);
    }
}

static void
setup_proxy (HnHub *hub)
{
  const char *p = g_getenv ("https_proxy");
  if (!p || !*p)
    p = g_getenv ("HTTPS_PROXY");
  if (!p || !*p)
    p = g_getenv ("http_proxy");
  if (!p || !*p)
    p = g_getenv ("HTTP_PROXY");
  if (!p || !*p)
    return;
  const char *np = g_getenv ("no_proxy");
  if (!np)
    np = g_getenv ("NO_PROXY");
  g_autofree char *ignore = g_strdup_printf ("localhost,127.0.0.1,::1%s%s", np && *np ? "," : "", np ? np : "");
  g_auto (GStrv) hosts = g_strsplit (ignore, ",", -1);
  for (char **h = hosts; *h; h++)
    g_strstrip (*h);
  g_autoptr (GProxyResolver) r = g_simple_proxy_resolver_new (p, hosts);
  soup_session_set_proxy_resolver (hub->session, r);
}

HnHub *
hn_hub_new (void)
{
  HnHub *hub = g_new0 (HnHub, 1);
  hub->session = soup_session_new ();
  soup_session_set_user_agent (hub->session, "hierarchos-native/" HN_VERSION "; hf_hub-compatible");
  soup_session_set_timeout (hub->session, 60);
  setup_proxy (hub);
  hn_hub_set_endpoint (hub, g_getenv ("HF_ENDPOINT"));
  hub->token = default_token ();
  hub->offline = env_true ("HF_HUB_OFFLINE") || env_true ("TRANSFORMERS_OFFLINE");
  hub->cache_dir = default_cache_dir ();
  return hub;
}

void
hn_hub_free (HnHub *hub)
{
  if (!hub)
    return;
  g_object_unref (hub->session);
  g_free (hub->endpoint);
  g_free (hub->endpoint_host);
  g_free (hub->token);
  g_free (hub->cache_dir);
  g_free (hub);
}

void
hn_hub_set_token (HnHub *hub, const char *token)
{
  g_free (hub->token);
  hub->token = token && *token ? g_strdup (token) : NULL;
}

void
hn_hub_set_offline (HnHub *hub, gboolean offline)
{
  hub->offline = offline;
}

void
hn_hub_set_cache_dir (HnHub *hub, const char *dir)
{
  if (!dir || !*dir)
    return;
  g_free (hub->cache_dir);
  hub->cache_dir = g_strdup (dir);
}

void
hn_hub_set_progress (HnHub *hub, HnHubProgressFunc func, gpointer user_data)
{
  hub->progress = func;
  hub->progress_data = user_data;
}

const char *
hn_hub_get_cache_dir (HnHub *hub)
{
  return hub->cache_dir;
}

const char *
hn_hub_get_endpoint (HnHub *hub)
{
  return hub->endpoint;
}

/* ------------------------------------------------------------ validation */

gboolean
hn_hub_validate_repo_id (const char *repo_id, GError **error)
{
  gboolean ok = repo_id && *repo_id && strlen (repo_id) <= 96;
  int slashes = 0;
  for (const char *p = repo_id; ok && *p; p++)
    {
      if (*p == '/')
        {
          slashes++;
          ok = p != repo_id && p[1] != '\0';
        }
      else
        ok = g_ascii_isalnum (*p) || *p == '-' || *p == '_' || *p == '.';
    }
  ok = ok && slashes <= 1 && !strstr (repo_id, "..") && repo_id[0] != '.' && !strstr (repo_id, "/.") &&
       !strstr (repo_id, "--");
  if (!ok)
    g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                 "'%s' is not a Hugging Face repo id (expected 'name' or 'org/name')", repo_id ? repo_id : "");
  return ok;
}

/* A path from the server or the user must stay inside the snapshot folder. */
static gboolean
safe_rel_path (const char *p)
{
  if (!p || !*p || p[0] == '/' || strlen (p) > 1024 || strchr (p, '\\'))
    return FALSE;
  for (const char *c = p; *c; c++)
    if ((unsigned char) *c < 0x20)
      return FALSE;
  g_auto (GStrv) parts = g_strsplit (p, "/", -1);
  for (char **s = parts; *s; s++)
    if (!**s || strcmp (*s, ".") == 0 || strcmp (*s, "..") == 0)
      return FALSE;
  return TRUE;
}

static gboolean
check_rel_path (const char *what, const char *p, GError **error)
{
  if (safe_rel_path (p))
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "refusing %s '%s': it would leave the snapshot folder", what,
               p ? p : "");
  return FALSE;
}

static gboolean
is_commit_hash (const char *s)
{
  if (!s || strlen (s) != 40)
    return FALSE;
  for (int i = 0; i < 40; i++)
    if (!g_ascii_isxdigit (s[i]) || g_ascii_isupper (s[i]))
      return FALSE;
  return TRUE;
}

static gboolean
safe_etag (const char *e)
{
  if (!e || !*e || strlen (e) > 128)
    return FALSE;
  for (const char *c = e; *c; c++)
    if (!g_ascii_isalnum (*c) && *c != '-' && *c != '_')
      return FALSE;
  return TRUE;
}

char *
hn_hub_repo_cache_dir (HnHub *hub, HnHubRepoType type, const char *repo_id)
{
  g_auto (GStrv) parts = g_strsplit (repo_id, "/", -1);
  g_autofree char *joined = g_strjoinv ("--", parts);
  g_autofree char *folder = g_strdup_printf ("%s--%s", type == HN_HUB_REPO_DATASET ? "datasets" : "models", joined);
  return g_build_filename (hub->cache_dir, folder, NULL);
}

/* ------------------------------------------------------------ HTTP */

static const char *
type_api (HnHubRepoType type)
{
  return type == HN_HUB_REPO_DATASET ? "datasets" : "models";
}

static const char *
type_prefix (HnHubRepoType type)
{
  return type == HN_HUB_REPO_DATASET ? "/datasets" : "";
}

static char *
escape_path (const char *p)
{
  return g_uri_escape_string (p, "/", FALSE);
}

static gboolean
same_host_as_endpoint (HnHub *hub, const char *url)
{
  g_autoptr (GUri) u = g_uri_parse (url, G_URI_FLAGS_NONE, NULL);
  return u && hub->endpoint_host && g_ascii_strcasecmp (g_uri_get_host (u), hub->endpoint_host) == 0 &&
         g_uri_get_port (u) == hub->endpoint_port;
}

static void
set_network_error (HnHub *hub, GError *local, const char *url, GError **error)
{
  if (g_error_matches (local, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "download cancelled");
  else
    g_set_error (error, HN_ERROR, HN_ERROR_NETWORK,
                 "cannot reach %s: %s (check the network, or set HF_HUB_OFFLINE=1 to use the local cache only)",
                 url, local->message);
}

/* Turns a non-2xx reply into the error a user can act on. */
static gboolean
check_status (HnHub *hub, SoupMessage *msg, const char *repo_id, const char *what, GError **error)
{
  guint st = soup_message_get_status (msg);
  if (st >= 200 && st < 300)
    return TRUE;
  SoupMessageHeaders *h = soup_message_get_response_headers (msg);
  const char *code = soup_message_headers_get_one (h, "X-Error-Code");
  const char *emsg = soup_message_headers_get_one (h, "X-Error-Message");
  if (g_strcmp0 (code, "RepoNotFound") == 0 || (st == 404 && !code))
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                 "repository '%s' was not found on %s (check the id; a private repo needs HF_TOKEN)", repo_id,
                 hub->endpoint);
  else if (g_strcmp0 (code, "RevisionNotFound") == 0)
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "revision of %s not found: %s", repo_id,
                 emsg ? emsg : what);
  else if (g_strcmp0 (code, "EntryNotFound") == 0 || st == 404)
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s not found in %s", what, repo_id);
  else if (st == 401 || st == 403)
    g_set_error (error, HN_ERROR, HN_ERROR_AUTH,
                 "access to %s is restricted (%s%s%u): it is gated or private. Log in to %s, accept the licence "
                 "on the repo page, and set HF_TOKEN to an access token or save one on the app's Models page%s",
                 repo_id, code ? code : "", code ? ", HTTP " : "HTTP ", st, hub->endpoint,
                 hub->token ? " (the token in use was refused)" : "");
  else
    g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "%s of %s: HTTP %u %s", what, repo_id, st,
                 soup_message_get_reason_phrase (msg) ? soup_message_get_reason_phrase (msg) : "");
  return FALSE;
}

/* Sends method url; follows redirects itself so the token is only sent to
 * the Hub's own host, never to a CDN. With stop_at_metadata, a redirect
 * that already carries X-Repo-Commit is returned as is (the Hub answers a
 * HEAD for an LFS file that way). */
static GInputStream *
send_request (HnHub *hub, const char *method, const char *url_in, guint64 range_from, gboolean stop_at_metadata,
              SoupMessage **msg_out, char **final_url, GCancellable *cancellable, GError **error)
{
  g_autofree char *url = g_strdup (url_in);
  for (int hop = 0; hop < 10; hop++)
    {
      g_autoptr (SoupMessage) msg = soup_message_new (method, url);
      if (!msg)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "invalid URL %s", url);
          return NULL;
        }
      soup_message_add_flags (msg, SOUP_MESSAGE_NO_REDIRECT);
      SoupMessageHeaders *rh = soup_message_get_request_headers (msg);
      soup_message_headers_replace (rh, "Accept-Encoding", "identity");
      if (hub->token && same_host_as_endpoint (hub, url))
        {
          g_autofree char *auth = g_strdup_printf ("Bearer %s", hub->token);
          soup_message_headers_replace (rh, "Authorization", auth);
        }
      if (range_from > 0)
        soup_message_headers_set_range (rh, (goffset) range_from, -1);
      g_autoptr (GError) local = NULL;
      GInputStream *in = soup_session_send (hub->session, msg, cancellable, &local);
      if (!in)
        {
          set_network_error (hub, local, url, error);
          return NULL;
        }
      guint st = soup_message_get_status (msg);
      if ((st == 401 || st == 403) && !hub->token && !hub->keyring_tried && same_host_as_endpoint (hub, url))
        {
          /* A gated or private repo: ask the keyring now, not for every public download. */
          hub->keyring_tried = TRUE;
          g_autoptr (GError) kerr = NULL;
          hub->token = hn_hub_token_lookup (hub->endpoint, &kerr);
          if (kerr)
            g_debug ("%s", kerr->message);
          if (hub->token)
            {
              g_input_stream_close (in, NULL, NULL);
              g_object_unref (in);
              continue;
            }
        }
      SoupMessageHeaders *h = soup_message_get_response_headers (msg);
      const char *loc = soup_message_headers_get_one (h, "Location");
      if (SOUP_STATUS_IS_REDIRECTION (st) && loc &&
          !(stop_at_metadata && soup_message_headers_get_one (h, "X-Repo-Commit")))
        {
          g_input_stream_close (in, NULL, NULL);
          g_object_unref (in);
          g_autoptr (GError) uerr = NULL;
          char *next = g_uri_resolve_relative (url, loc, G_URI_FLAGS_NONE, &uerr);
          if (!next)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "bad redirect from %s: %s", url, uerr->message);
              return NULL;
            }
          g_free (url);
          url = next;
          continue;
        }
      *msg_out = g_steal_pointer (&msg);
      if (final_url)
        *final_url = g_steal_pointer (&url);
      return in;
    }
  g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "too many redirects from %s", url_in);
  return NULL;
}

static GBytes *
read_all (GInputStream *in, gsize limit, const char *url, GCancellable *cancellable, GError **error)
{
  g_autoptr (GByteArray) buf = g_byte_array_new ();
  guint8 chunk[16384];
  for (;;)
    {
      g_autoptr (GError) local = NULL;
      gssize n = g_input_stream_read (in, chunk, sizeof chunk, cancellable, &local);
      if (n < 0)
        {
          if (g_error_matches (local, G_IO_ERROR, G_IO_ERROR_CANCELLED))
            g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "download cancelled");
          else
            g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "reading %s: %s", url, local->message);
          return NULL;
        }
      if (n == 0)
        break;
      if (buf->len + (gsize) n > limit)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "reply from %s is larger than %" G_GSIZE_FORMAT " bytes", url,
                       limit);
          return NULL;
        }
      g_byte_array_append (buf, chunk, (guint) n);
    }
  return g_byte_array_free_to_bytes (g_steal_pointer (&buf));
}

/* ------------------------------------------------------------ cache */

static char *
read_ref (const char *storage, const char *revision)
{
  if (is_commit_hash (revision))
    return g_strdup (revision);
  g_autofree char *p = g_build_filename (storage, "refs", revision, NULL);
  char *c = NULL;
  if (!g_file_get_contents (p, &c, NULL, NULL))
    return NULL;
  g_strstrip (c);
  if (!is_commit_hash (c))
    {
      g_free (c);
      return NULL;
    }
  return c;
}

static gboolean
write_ref (const char *storage, const char *revision, const char *commit, GError **error)
{
  if (is_commit_hash (revision))
    return TRUE;
  g_autofree char *p = g_build_filename (storage, "refs", revision, NULL);
  g_autofree char *dir = g_path_get_dirname (p);
  g_autofree char *old = NULL;
  if (g_file_get_contents (p, &old, NULL, NULL) && strcmp (g_strstrip (old), commit) == 0)
    return TRUE;
  return hn_mkdir_p (dir, error) && hn_write_file_atomic (p, commit, strlen (commit), error);
}

static gboolean
make_pointer (const char *storage, const char *commit, const char *path, const char *etag, GError **error)
{
  g_autofree char *pointer = g_build_filename (storage, "snapshots", commit, path, NULL);
  g_autofree char *dir = g_path_get_dirname (pointer);
  if (!hn_mkdir_p (dir, error))
    return FALSE;
  /* snapshots/<commit>/<a/b/file> -> ../../(..)blobs/<etag>, relative as huggingface_hub makes it */
  GString *target = g_string_new ("../../");
  for (const char *c = path; *c; c++)
    if (*c == '/')
      g_string_append (target, "../");
  g_string_append_printf (target, "blobs/%s", etag);
  g_unlink (pointer);
  int rc = symlink (target->str, pointer);
  int e = errno;
  g_string_free (target, TRUE);
  if (rc != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create %s: %s", pointer, g_strerror (e));
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------ download */

typedef struct {
  char *commit;
  char *etag;
  guint64 size;        /* 0 when unknown */
  gboolean is_lfs;
  char *location;      /* where to GET */
} FileMeta;

static void
file_meta_clear (FileMeta *m)
{
  g_free (m->commit);
  g_free (m->etag);
  g_free (m->location);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (FileMeta, file_meta_clear)

static char *
normalize_etag (const char *e)
{
  if (!e)
    return NULL;
  if (g_str_has_prefix (e, "W/"))
    e += 2;
  char *s = g_strdup (e);
  gsize l = strlen (s);
  if (l >= 2 && s[0] == '"' && s[l - 1] == '"')
    {
      memmove (s, s + 1, l - 2);
      s[l - 2] = '\0';
    }
  return s;
}

static gboolean
fetch_meta (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision, const char *path,
            FileMeta *m, GCancellable *cancellable, GError **error)
{
  g_autofree char *erev = g_uri_escape_string (revision, NULL, FALSE);
  g_autofree char *epath = escape_path (path);
  g_autofree char *url = g_strdup_printf ("%s%s/%s/resolve/%s/%s", hub->endpoint, type_prefix (type), repo_id,
                                          erev, epath);
  g_autoptr (SoupMessage) msg = NULL;
  g_autofree char *final = NULL;
  g_autoptr (GInputStream) in = send_request (hub, "HEAD", url, 0, TRUE, &msg, &final, cancellable, error);
  if (!in)
    return FALSE;
  g_input_stream_close (in, NULL, NULL);
  guint st = soup_message_get_status (msg);
  if (!SOUP_STATUS_IS_REDIRECTION (st))
    {
      g_autofree char *what = g_strdup_printf ("file '%s' (revision %s)", path, revision);
      if (!check_status (hub, msg, repo_id, what, error))
        return FALSE;
    }
  SoupMessageHeaders *h = soup_message_get_response_headers (msg);
  const char *commit = soup_message_headers_get_one (h, "X-Repo-Commit");
  const char *linked = soup_message_headers_get_one (h, "X-Linked-Etag");
  const char *etag = linked ? linked : soup_message_headers_get_one (h, "ETag");
  const char *lsize = soup_message_headers_get_one (h, "X-Linked-Size");
  if (!commit || !is_commit_hash (commit))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the server sent no valid X-Repo-Commit for %s", repo_id, path);
      return FALSE;
    }
  m->etag = normalize_etag (etag);
  if (!safe_etag (m->etag))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the server sent no usable ETag for %s", repo_id, path);
      return FALSE;
    }
  m->commit = g_strdup (commit);
  m->is_lfs = linked != NULL;
  if (lsize)
    m->size = g_ascii_strtoull (lsize, NULL, 10);
  else if (!SOUP_STATUS_IS_REDIRECTION (st))
    m->size = (guint64) MAX (soup_message_headers_get_content_length (h), 0);
  const char *loc = soup_message_headers_get_one (h, "Location");
  if (SOUP_STATUS_IS_REDIRECTION (st) && loc)
    m->location = g_uri_resolve_relative (final, loc, G_URI_FLAGS_NONE, NULL);
  if (!m->location)
    m->location = g_steal_pointer (&final);
  return TRUE;
}

static void
report (HnHub *hub, const char *file, guint64 done, guint64 total, double rate, gboolean finished)
{
  if (!hub->progress)
    return;
  HnHubProgress p = {
    .repo_id = hub->cur_repo, .file = file, .file_index = hub->cur_index, .n_files = MAX (hub->cur_count, 1),
    .bytes_done = done, .bytes_total = total, .rate = rate,
    .eta_seconds = (total > 0 && rate > 0 && done <= total) ? (double) (total - done) / rate : -1,
    .finished = finished,
  };
  hub->progress (&p, hub->progress_data);
}

/* Hashes what an earlier attempt left in the .incomplete file. */
static gboolean
hash_existing (GChecksum *sum, const char *path, guint64 len, GError **error)
{
  if (len == 0)
    return TRUE;
  g_autoptr (GMappedFile) mf = g_mapped_file_new (path, FALSE, NULL);
  if (!mf || g_mapped_file_get_length (mf) < len)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot read %s to resume", path);
      return FALSE;
    }
  g_checksum_update (sum, (const guchar *) g_mapped_file_get_contents (mf), (gssize) len);
  return TRUE;
}

/* One GET attempt, appending to `incomplete` from its current size.
 * Returns FALSE with *retry TRUE when the connection broke mid-file. */
static gboolean
download_attempt (HnHub *hub, const char *repo_id, const char *path, FileMeta *m, const char *incomplete,
                  gboolean *retry, GCancellable *cancellable, GError **error)
{
  *retry = FALSE;
  GStatBuf sb;
  guint64 have = g_stat (incomplete, &sb) == 0 ? (guint64) sb.st_size : 0;
  if (m->size > 0 && have > m->size)
    {
      g_unlink (incomplete);
      have = 0;
    }
  g_autoptr (SoupMessage) msg = NULL;
  g_autoptr (GError) local = NULL;
  g_autoptr (GInputStream) in = NULL;
  if (!(m->size > 0 && have == m->size))
    {
      in = send_request (hub, "GET", m->location, have, FALSE, &msg, NULL, cancellable, &local);
      if (!in)
        {
          *retry = g_error_matches (local, HN_ERROR, HN_ERROR_NETWORK);
          g_propagate_error (error, g_steal_pointer (&local));
          return FALSE;
        }
      guint st = soup_message_get_status (msg);
      if (st == SOUP_STATUS_REQUESTED_RANGE_NOT_SATISFIABLE)
        {
          /* our partial file does not fit what the server has: start over */
          g_unlink (incomplete);
          *retry = TRUE;
          g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "range not satisfiable for %s", path);
          return FALSE;
        }
      g_autofree char *what = g_strdup_printf ("file '%s'", path);
      if (!check_status (hub, msg, repo_id, what, error))
        {
          /* rate limits and server trouble pass; ask again (with Range) */
          *retry = st == 429 || st >= 500;
          return FALSE;
        }
      if (have > 0 && st != SOUP_STATUS_PARTIAL_CONTENT)
        have = 0; /* the server ignored Range: rewrite from the start */
    }
  int fd = g_open (incomplete, O_WRONLY | O_CREAT | O_CLOEXEC | (have > 0 ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", incomplete, g_strerror (e));
      return FALSE;
    }
  g_autoptr (GChecksum) sum = m->is_lfs ? g_checksum_new (G_CHECKSUM_SHA256) : NULL;
  if (sum && !hash_existing (sum, incomplete, have, error))
    {
      close (fd);
      return FALSE;
    }
  guint64 done = have;
  gint64 t0 = g_get_monotonic_time (), last = 0;
  double rate = 0;
  guint64 done_at_last = done;
  gsize bufsz = 1 << 18;
  g_autofree guint8 *buf = g_malloc (bufsz);
  gboolean ok = TRUE;
  while (in)
    {
      gssize n = g_input_stream_read (in, buf, bufsz, cancellable, &local);
      if (n < 0)
        {
          if (g_error_matches (local, G_IO_ERROR, G_IO_ERROR_CANCELLED))
            g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "download of %s cancelled", path);
          else
            {
              g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "connection lost while downloading %s: %s", path,
                           local->message);
              *retry = TRUE;
            }
          ok = FALSE;
          break;
        }
      if (n == 0)
        break;
      if (m->size > 0 && done + (guint64) n > m->size)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the server sent more than the %" G_GUINT64_FORMAT
                       " bytes it announced", path, m->size);
          g_unlink (incomplete);
          ok = FALSE;
          break;
        }
      const guint8 *p = buf;
      gsize left = (gsize) n;
      while (left > 0)
        {
          ssize_t w = write (fd, p, left);
          if (w < 0 && errno == EINTR)
            continue;
          if (w < 0)
            {
              int e = errno;
              g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s%s", incomplete, g_strerror (e),
                           e == ENOSPC ? " (the disk is full; free space or set HF_HUB_CACHE to another disk)" : "");
              ok = FALSE;
              break;
            }
          p += w;
          left -= (gsize) w;
        }
      if (!ok)
        break;
      if (sum)
        g_checksum_update (sum, buf, n);
      done += (guint64) n;
      gint64 now = g_get_monotonic_time ();
      if (now - last > 100000)
        {
          double dt = (double) (now - (last ? last : t0)) / 1e6;
          double inst = dt > 0 ? (double) (done - done_at_last) / dt : 0;
          rate = rate > 0 ? 0.7 * rate + 0.3 * inst : inst;
          last = now;
          done_at_last = done;
          report (hub, path, done, m->size, rate, FALSE);
        }
    }
  if (close (fd) != 0 && ok)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", incomplete, g_strerror (e));
      ok = FALSE;
    }
  if (!ok)
    return FALSE;
  if (m->size > 0 && done != m->size)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "%s: got %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " bytes",
                   path, done, m->size);
      *retry = TRUE;
      return FALSE;
    }
  if (sum && g_ascii_strcasecmp (g_checksum_get_string (sum), m->etag) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s from %s: sha256 %s does not match the Hub's %s; the download "
                   "was damaged and has been removed", path, repo_id, g_checksum_get_string (sum), m->etag);
      g_unlink (incomplete);
      return FALSE;
    }
  report (hub, path, done, m->size ? m->size : done, rate, TRUE);
  return TRUE;
}

/* The lock huggingface_hub takes for a blob (<cache>/.locks/<repo>/<etag>.lock
 * with flock, which Python's filelock uses on Unix), so a Python tool and we
 * never write the same .incomplete file at once. Returns the fd, or -1 with
 * an error (cancelled while waiting, or the lock file cannot be made). */
static int
lock_blob (HnHub *hub, const char *storage, const char *etag, GCancellable *cancellable, GError **error)
{
  g_autofree char *repo_folder = g_path_get_basename (storage);
  g_autofree char *dir = g_build_filename (hub->cache_dir, ".locks", repo_folder, NULL);
  if (!hn_mkdir_p (dir, error))
    return -1;
  g_autofree char *name = g_strdup_printf ("%s.lock", etag);
  g_autofree char *path = g_build_filename (dir, name, NULL);
  int fd = g_open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create %s: %s", path, g_strerror (e));
      return -1;
    }
  gboolean told = FALSE;
  while (flock (fd, LOCK_EX | LOCK_NB) != 0)
    {
      if (errno != EWOULDBLOCK && errno != EINTR)
        {
          int e = errno;
          close (fd);
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot lock %s: %s", path, g_strerror (e));
          return -1;
        }
      if (g_cancellable_is_cancelled (cancellable))
        {
          close (fd);
          g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "download cancelled");
          return -1;
        }
      if (!told)
        g_message ("waiting for another download of the same file to finish (%s)", path);
      told = TRUE;
      g_usleep (G_USEC_PER_SEC / 10);
    }
  return fd;
}

static void
unlock_blob (int fd)
{
  if (fd >= 0)
    {
      flock (fd, LOCK_UN);
      close (fd);
    }
}

static char *
cached_file (const char *storage, const char *revision, const char *path)
{
  g_autofree char *commit = read_ref (storage, revision);
  if (!commit)
    return NULL;
  char *p = g_build_filename (storage, "snapshots", commit, path, NULL);
  if (g_file_test (p, G_FILE_TEST_EXISTS))
    return p;
  g_free (p);
  return NULL;
}

char *
hn_hub_download_file (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision,
                      const char *path, GCancellable *cancellable, GError **error)
{
  const char *rev = revision && *revision ? revision : "main";
  if (!hn_hub_validate_repo_id (repo_id, error) || !check_rel_path ("file name", path, error) ||
      !check_rel_path ("revision", rev, error))
    return NULL;
  g_autofree char *storage = hn_hub_repo_cache_dir (hub, type, repo_id);
  if (is_commit_hash (rev) || hub->offline)
    {
      char *hit = cached_file (storage, rev, path);
      if (hit)
        return hit;
    }
  if (hub->offline)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                   "%s of %s (revision %s) is not in the cache %s, and HF_HUB_OFFLINE is set", path, repo_id, rev,
                   hub->cache_dir);
      return NULL;
    }
  g_auto (FileMeta) m = { 0 };
  g_autoptr (GError) merr = NULL;
  if (!fetch_meta (hub, type, repo_id, rev, path, &m, cancellable, &merr))
    {
      /* Like huggingface_hub: with the network down, a cached copy still serves. */
      if (g_error_matches (merr, HN_ERROR, HN_ERROR_NETWORK))
        {
          char *hit = cached_file (storage, rev, path);
          if (hit)
            {
              g_message ("%s: using the cached %s (%s)", repo_id, path, merr->message);
              return hit;
            }
        }
      g_propagate_error (error, g_steal_pointer (&merr));
      return NULL;
    }
  if (!write_ref (storage, rev, m.commit, error))
    return NULL;
  g_autofree char *pointer = g_build_filename (storage, "snapshots", m.commit, path, NULL);
  g_autofree char *blobs = g_build_filename (storage, "blobs", NULL);
  g_autofree char *blob = g_build_filename (blobs, m.etag, NULL);
  if (g_file_test (pointer, G_FILE_TEST_EXISTS))
    return g_steal_pointer (&pointer);
  GStatBuf sb;
  if (g_stat (blob, &sb) == 0 && (m.size == 0 || (guint64) sb.st_size == m.size))
    {
      if (!make_pointer (storage, m.commit, path, m.etag, error))
        return NULL;
      return g_steal_pointer (&pointer);
    }
  if (!hn_mkdir_p (blobs, error))
    return NULL;
  int lock = lock_blob (hub, storage, m.etag, cancellable, error);
  if (lock < 0)
    return NULL;
  /* Another process may have finished the blob while we waited. */
  if (!(g_stat (blob, &sb) == 0 && (m.size == 0 || (guint64) sb.st_size == m.size)))
    {
      g_autofree char *incomplete = g_strdup_printf ("%s.incomplete", blob);
      for (int attempt = 1;; attempt++)
        {
          g_autoptr (GError) aerr = NULL;
          gboolean retry = FALSE;
          if (download_attempt (hub, repo_id, path, &m, incomplete, &retry, cancellable, &aerr))
            break;
          if (!retry || attempt >= MAX_ATTEMPTS)
            {
              unlock_blob (lock);
              g_propagate_error (error, g_steal_pointer (&aerr));
              return NULL;
            }
          g_message ("%s: %s; resuming (attempt %d of %d)", repo_id, aerr->message, attempt + 1, MAX_ATTEMPTS);
          g_usleep (G_USEC_PER_SEC / 10 * attempt);
        }
      if (g_rename (incomplete, blob) != 0)
        {
          int e = errno;
          unlock_blob (lock);
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot move %s into place: %s", blob, g_strerror (e));
          return NULL;
        }
    }
  unlock_blob (lock);
  if (!make_pointer (storage, m.commit, path, m.etag, error))
    return NULL;
  return g_steal_pointer (&pointer);
}

/* ------------------------------------------------------------ API GETs */

gboolean
hn_hub_get_offline (HnHub *hub)
{
  return hub->offline;
}

gboolean
hn_hub_has_token (HnHub *hub)
{
  return hub->token != NULL;
}

char *
hn_hub_link_next (const char *link)
{
  /* <url>; rel="next", <url2>; rel="prev" */
  if (!link)
    return NULL;
  g_auto (GStrv) parts = g_strsplit (link, ",", -1);
  for (char **p = parts; *p; p++)
    {
      const char *lt = strchr (*p, '<'), *gt = lt ? strchr (lt, '>') : NULL;
      if (!gt)
        continue;
      g_autofree char *params = g_strdup (gt + 1);
      gboolean next = FALSE;
      g_auto (GStrv) attrs = g_strsplit (params, ";", -1);
      for (char **a = attrs; *a; a++)
        {
          g_strstrip (*a);
          if (g_ascii_strcasecmp (*a, "rel=\"next\"") == 0 || g_ascii_strcasecmp (*a, "rel=next") == 0)
            next = TRUE;
        }
      if (next)
        return g_strndup (lt + 1, (gsize) (gt - lt - 1));
    }
  return NULL;
}

GBytes *
hn_hub_get_bytes (HnHub *hub, const char *url, const char *repo_id, const char *what, gsize limit, char **link_next,
                  GCancellable *cancellable, GError **error)
{
  if (link_next)
    *link_next = NULL;
  if (hub->offline)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "cannot ask the Hub for %s: HF_HUB_OFFLINE is set (only the "
                   "local cache %s is used)", what, hub->cache_dir);
      return NULL;
    }
  if (!same_host_as_endpoint (hub, url))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "refusing %s: it is not on the Hub %s", url,
                   hub->endpoint);
      return NULL;
    }
  g_autoptr (SoupMessage) msg = NULL;
  g_autoptr (GInputStream) in = send_request (hub, "GET", url, 0, FALSE, &msg, NULL, cancellable, error);
  if (!in)
    return NULL;
  if (!check_status (hub, msg, repo_id, what, error))
    return NULL;
  GBytes *body = read_all (in, limit, url, cancellable, error);
  if (body && link_next)
    *link_next = hn_hub_link_next (soup_message_headers_get_one (soup_message_get_response_headers (msg), "Link"));
  return body;
}

JsonNode *
hn_hub_api_get (HnHub *hub, const char *url, const char *repo_id, const char *what, char **link_next,
                GCancellable *cancellable, GError **error)
{
  g_autoptr (GBytes) body = hn_hub_get_bytes (hub, url, repo_id, what, MAX_API_REPLY, link_next, cancellable, error);
  if (!body)
    return NULL;
  gsize len;
  const char *data = g_bytes_get_data (body, &len);
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  g_autoptr (GError) jerr = NULL;
  JsonNode *root = NULL;
  if (hn_json_parser_load (parser, data ? data : "", (gssize) len, "reply", &jerr))
    root = json_parser_get_root (parser);
  if (!root)
    {
      if (link_next)
        g_clear_pointer (link_next, g_free);
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the Hub's reply is not JSON%s%s", url, jerr ? ": " : "",
                   jerr ? jerr->message : " (empty)");
      return NULL;
    }
  return json_node_copy (root);
}

/* ------------------------------------------------------------ listing */

GPtrArray *
hn_hub_list_files (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision, char **commit_out,
                   GCancellable *cancellable, GError **error)
{
  const char *rev = revision && *revision ? revision : "main";
  if (!hn_hub_validate_repo_id (repo_id, error) || !check_rel_path ("revision", rev, error))
    return NULL;
  if (hub->offline)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NETWORK, "cannot list %s: HF_HUB_OFFLINE is set", repo_id);
      return NULL;
    }
  g_autofree char *erev = g_uri_escape_string (rev, NULL, FALSE);
  g_autofree char *url = g_strdup_printf ("%s/api/%s/%s/revision/%s?blobs=true", hub->endpoint, type_api (type),
                                          repo_id, erev);
  g_autoptr (SoupMessage) msg = NULL;
  g_autoptr (GInputStream) in = send_request (hub, "GET", url, 0, FALSE, &msg, NULL, cancellable, error);
  if (!in)
    return NULL;
  g_autofree char *what = g_strdup_printf ("revision '%s'", rev);
  if (!check_status (hub, msg, repo_id, what, error))
    return NULL;
  g_autoptr (GBytes) body = read_all (in, MAX_API_REPLY, url, cancellable, error);
  if (!body)
    return NULL;
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  gsize len;
  const char *data = g_bytes_get_data (body, &len);
  g_autoptr (GError) jerr = NULL;
  if (!hn_json_parser_load (parser, data ? data : "", (gssize) len, "reply", &jerr)) /* an empty body has no data */
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the Hub's reply is not JSON: %s", url, jerr->message);
      return NULL;
    }
  JsonNode *root = json_parser_get_root (parser);
  JsonObject *o = root && JSON_NODE_HOLDS_OBJECT (root) ? json_node_get_object (root) : NULL;
  const char *sha = hn_json_object_get_string (o, "sha");
  JsonNode *sib = o ? json_object_get_member (o, "siblings") : NULL;
  if (!sha || !is_commit_hash (sha) || !sib || !JSON_NODE_HOLDS_ARRAY (sib))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the Hub's reply has no commit sha or file list", url);
      return NULL;
    }
  g_autoptr (GPtrArray) files = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_hub_file_free);
  JsonArray *a = json_node_get_array (sib);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *en = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_OBJECT (en))
        continue;
      JsonObject *e = json_node_get_object (en);
      const char *name = hn_json_object_get_string (e, "rfilename");
      if (!check_rel_path ("file name", name, error))
        return NULL;
      HnHubFile *f = g_new0 (HnHubFile, 1);
      f->path = g_strdup (name);
      gint64 size = 0;
      hn_json_node_get_int (json_object_get_member (e, "size"), &size);
      f->size = (guint64) MAX (size, 0);
      JsonNode *lfs = json_object_get_member (e, "lfs");
      if (lfs && JSON_NODE_HOLDS_OBJECT (lfs))
        {
          JsonObject *lo = json_node_get_object (lfs);
          f->lfs_sha256 = g_strdup (hn_json_object_get_string (lo, "sha256"));
          if (hn_json_node_get_int (json_object_get_member (lo, "size"), &size))
            f->size = (guint64) MAX (size, 0);
        }
      g_ptr_array_add (files, f);
    }
  g_autofree char *storage = hn_hub_repo_cache_dir (hub, type, repo_id);
  if (!write_ref (storage, rev, sha, error))
    return NULL;
  if (commit_out)
    *commit_out = g_strdup (sha);
  return g_steal_pointer (&files);
}

static gboolean
matches_any (const char *path, const char *const *include)
{
  if (!include)
    return TRUE;
  for (const char *const *p = include; *p; p++)
    {
      g_autoptr (GPatternSpec) spec = g_pattern_spec_new (*p);
      if (g_pattern_spec_match_string (spec, path))
        return TRUE;
    }
  return FALSE;
}

static gboolean
dir_has_files (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  return d && g_dir_read_name (d) != NULL;
}

char *
hn_hub_snapshot_download (HnHub *hub, HnHubRepoType type, const char *repo_id, const char *revision,
                          const char *const *include, GCancellable *cancellable, GError **error)
{
  const char *rev = revision && *revision ? revision : "main";
  if (!hn_hub_validate_repo_id (repo_id, error) || !check_rel_path ("revision", rev, error))
    return NULL;
  g_autofree char *storage = hn_hub_repo_cache_dir (hub, type, repo_id);
  if (hub->offline)
    {
      g_autofree char *commit = read_ref (storage, rev);
      g_autofree char *snap = commit ? g_build_filename (storage, "snapshots", commit, NULL) : NULL;
      if (snap && dir_has_files (snap))
        return g_steal_pointer (&snap);
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                   "%s (revision %s) is not in the cache %s, and HF_HUB_OFFLINE is set", repo_id, rev, hub->cache_dir);
      return NULL;
    }
  g_autofree char *commit = NULL;
  g_autoptr (GError) lerr = NULL;
  g_autoptr (GPtrArray) files = hn_hub_list_files (hub, type, repo_id, rev, &commit, cancellable, &lerr);
  if (!files)
    {
      if (g_error_matches (lerr, HN_ERROR, HN_ERROR_NETWORK))
        {
          g_autofree char *c = read_ref (storage, rev);
          g_autofree char *snap = c ? g_build_filename (storage, "snapshots", c, NULL) : NULL;
          if (snap && dir_has_files (snap))
            {
              g_message ("%s: using the cached snapshot (%s)", repo_id, lerr->message);
              return g_steal_pointer (&snap);
            }
        }
      g_propagate_error (error, g_steal_pointer (&lerr));
      return NULL;
    }
  g_autoptr (GPtrArray) wanted = g_ptr_array_new ();
  for (guint i = 0; i < files->len; i++)
    {
      HnHubFile *f = files->pdata[i];
      if (matches_any (f->path, include))
        g_ptr_array_add (wanted, f);
    }
  if (wanted->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s (revision %s) has no files matching the requested patterns",
                   repo_id, rev);
      return NULL;
    }
  hub->cur_repo = repo_id;
  hub->cur_count = wanted->len;
  for (guint i = 0; i < wanted->len; i++)
    {
      HnHubFile *f = wanted->pdata[i];
      hub->cur_index = i;
      g_autofree char *p = hn_hub_download_file (hub, type, repo_id, commit, f->path, cancellable, error);
      if (!p)
        {
          hub->cur_repo = NULL;
          return NULL;
        }
    }
  hub->cur_repo = NULL;
  hub->cur_count = hub->cur_index = 0;
  return g_build_filename (storage, "snapshots", commit, NULL);
}

/* ------------------------------------------------------------ --hf-* */

static HnHub *
hub_for (HnHub *hub, const char *cache_dir, HnHub **owned)
{
  if (!hub)
    hub = *owned = hn_hub_new ();
  hn_hub_set_cache_dir (hub, cache_dir);
  return hub;
}

char *
hn_hub_resolve_model (HnHub *hub, const char *id_or_path, const char *revision, const char *cache_dir,
                      GCancellable *cancellable, GError **error)
{
  if (g_file_test (id_or_path, G_FILE_TEST_IS_DIR))
    return g_strdup (id_or_path);
  if (!hn_hub_validate_repo_id (id_or_path, NULL))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "'%s' is neither a model folder nor a Hugging Face repo id",
                   id_or_path);
      return NULL;
    }
  g_autoptr (HnHub) owned = NULL;
  hub = hub_for (hub, cache_dir, &owned);
  g_autofree char *dir = hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, id_or_path, revision,
                                                   hn_hub_model_patterns, cancellable, error);
  if (!dir)
    return NULL;
  g_autofree char *single = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *index = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  gboolean any = g_file_test (single, G_FILE_TEST_EXISTS) || g_file_test (index, G_FILE_TEST_EXISTS);
  const char *n;
  while (!any && d && (n = g_dir_read_name (d)))
    any = g_str_has_suffix (n, ".safetensors");
  if (!any)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s has no safetensors weights; PyTorch pickle files (*.bin, *.pt) are never loaded because "
                   "they can run code. Pick a repo or revision with model.safetensors", id_or_path);
      return NULL;
    }
  return g_steal_pointer (&dir);
}

char *
hn_hub_resolve_model_file (HnHub *hub, const char *repo_id, const char *revision, const char *file,
                           const char *cache_dir, GCancellable *cancellable, GError **error)
{
  if (!hn_hub_validate_repo_id (repo_id, error))
    return NULL;
  g_autofree char *lower = g_ascii_strdown (file, -1);
  if (!g_str_has_suffix (lower, ".gguf"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--hf-file %s: only a .gguf file is pulled alone (a safetensors model is --hf-model without --hf-file)",
                   file);
      return NULL;
    }
  g_autoptr (HnHub) owned = NULL;
  hub = hub_for (hub, cache_dir, &owned);
  return hn_hub_download_file (hub, HN_HUB_REPO_MODEL, repo_id, revision, file, cancellable, error);
}

char *
hn_hub_resolve_tokenizer (HnHub *hub, const char *id_or_path, const char *revision, const char *cache_dir,
                          GCancellable *cancellable, GError **error)
{
  if (g_file_test (id_or_path, G_FILE_TEST_EXISTS))
    return g_strdup (id_or_path);
  if (!hn_hub_validate_repo_id (id_or_path, NULL))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "'%s' is neither a tokenizer file or folder nor a repo id",
                   id_or_path);
      return NULL;
    }
  g_autoptr (HnHub) owned = NULL;
  hub = hub_for (hub, cache_dir, &owned);
  return hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, id_or_path, revision, hn_hub_tokenizer_patterns,
                                   cancellable, error);
}

char **
hn_hub_resolve_dataset (HnHub *hub, const char *repo_id, const char *config, const char *split, const char *file,
                        const char *revision, const char *cache_dir, GCancellable *cancellable, GError **error)
{
  if (!hn_hub_validate_repo_id (repo_id, error))
    return NULL;
  g_autoptr (HnHub) owned = NULL;
  hub = hub_for (hub, cache_dir, &owned);
  g_autoptr (GPtrArray) picked = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *commit = NULL;
  if (file)
    {
      if (!check_rel_path ("dataset file", file, error))
        return NULL;
      g_ptr_array_add (picked, g_strdup (file));
      commit = g_strdup (revision);
    }
  else if (hub->offline)
    {
      /* Offline: pick among the files of the cached snapshot. */
      g_autofree char *storage = hn_hub_repo_cache_dir (hub, HN_HUB_REPO_DATASET, repo_id);
      commit = read_ref (storage, revision ? revision : "main");
      g_autofree char *snap = commit ? g_build_filename (storage, "snapshots", commit, NULL) : NULL;
      if (!snap || !g_file_test (snap, G_FILE_TEST_IS_DIR))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                       "dataset %s is not in the cache %s, and HF_HUB_OFFLINE is set", repo_id, hub->cache_dir);
          return NULL;
        }
      g_autoptr (GPtrArray) all = g_ptr_array_new_with_free_func (g_free);
      g_autoptr (GPtrArray) stack = g_ptr_array_new_with_free_func (g_free);
      g_ptr_array_add (stack, g_strdup (""));
      while (stack->len > 0)
        {
          g_autofree char *rel = g_ptr_array_steal_index (stack, stack->len - 1);
          g_autofree char *abs = g_build_filename (snap, rel, NULL);
          g_autoptr (GDir) d = g_dir_open (abs, 0, NULL);
          const char *n;
          while (d && (n = g_dir_read_name (d)))
            {
              char *r = *rel ? g_strdup_printf ("%s/%s", rel, n) : g_strdup (n);
              g_autofree char *ap = g_build_filename (snap, r, NULL);
              g_ptr_array_add (g_file_test (ap, G_FILE_TEST_IS_DIR) ? stack : all, r);
            }
        }
      g_ptr_array_add (all, NULL);
      g_autofree char *why = NULL;
      g_auto (GStrv) pick = hn_hub_dataset_pick_files ((const char *const *) all->pdata, repo_id, config, split, &why,
                                                        error);
      if (!pick)
        return NULL;
      g_message ("%s", why);
      for (char **p = pick; *p; p++)
        g_ptr_array_add (picked, g_strdup (*p));
    }
  else
    {
      g_autoptr (GPtrArray) files = hn_hub_list_files (hub, HN_HUB_REPO_DATASET, repo_id, revision, &commit,
                                                       cancellable, error);
      if (!files)
        return NULL;
      g_autoptr (GPtrArray) paths = g_ptr_array_new ();
      for (guint i = 0; i < files->len; i++)
        g_ptr_array_add (paths, ((HnHubFile *) files->pdata[i])->path);
      g_ptr_array_add (paths, NULL);
      g_autofree char *why = NULL;
      g_auto (GStrv) pick = hn_hub_dataset_pick_files ((const char *const *) paths->pdata, repo_id, config, split,
                                                        &why, error);
      if (!pick)
        return NULL;
      g_message ("%s", why);
      for (char **p = pick; *p; p++)
        g_ptr_array_add (picked, g_strdup (*p));
    }
  g_autoptr (GPtrArray) out = g_ptr_array_new_with_free_func (g_free);
  hub->cur_repo = repo_id;
  hub->cur_count = picked->len;
  for (guint i = 0; i < picked->len; i++)
    {
      hub->cur_index = i;
      char *p = hn_hub_download_file (hub, HN_HUB_REPO_DATASET, repo_id, commit ? commit : revision,
                                      picked->pdata[i], cancellable, error);
      if (!p)
        {
          hub->cur_repo = NULL;
          return NULL;
        }
      g_ptr_array_add (out, p);
    }
  hub->cur_repo = NULL;
  g_ptr_array_add (out, NULL);
  return (char **) g_ptr_array_free (g_steal_pointer (&out), FALSE);
}

/* ------------------------------------------------------------ cache scan */

void
hn_hub_cached_repo_free (HnHubCachedRepo *r)
{
  if (!r)
    return;
  g_free (r->repo_id);
  g_free (r->path);
  g_strfreev (r->snapshots);
  g_strfreev (r->refs);
  g_free (r);
}

static void
collect_refs (const char *dir, const char *prefix, GPtrArray *out)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *n;
  while (d && (n = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (dir, n, NULL);
      g_autofree char *name = prefix ? g_strdup_printf ("%s/%s", prefix, n) : g_strdup (n);
      if (g_file_test (p, G_FILE_TEST_IS_DIR))
        {
          collect_refs (p, name, out);
          continue;
        }
      g_autofree char *c = NULL;
      if (g_file_get_contents (p, &c, NULL, NULL) && is_commit_hash (g_strstrip (c)))
        g_ptr_array_add (out, g_strdup_printf ("%s=%s", name, c));
    }
}

static int
cached_repo_cmp (gconstpointer a, gconstpointer b)
{
  const HnHubCachedRepo *x = *(HnHubCachedRepo *const *) a, *y = *(HnHubCachedRepo *const *) b;
  if (x->type != y->type)
    return x->type < y->type ? -1 : 1;
  return strcmp (x->repo_id, y->repo_id);
}

static int
strv_cmp (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

GPtrArray *
hn_hub_scan_cache (const char *cache_dir, GError **error)
{
  g_autofree char *dir = cache_dir && *cache_dir ? g_strdup (cache_dir) : default_cache_dir ();
  GPtrArray *repos = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_hub_cached_repo_free);
  g_autoptr (GError) local = NULL;
  g_autoptr (GDir) d = g_dir_open (dir, 0, &local);
  if (!d)
    {
      if (g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        return repos;
      g_ptr_array_unref (repos);
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot read the Hub cache %s: %s", dir, local->message);
      return NULL;
    }
  const char *n;
  while ((n = g_dir_read_name (d)))
    {
      HnHubRepoType type;
      const char *rest;
      if (g_str_has_prefix (n, "models--"))
        type = HN_HUB_REPO_MODEL, rest = n + 8;
      else if (g_str_has_prefix (n, "datasets--"))
        type = HN_HUB_REPO_DATASET, rest = n + 10;
      else
        continue; /* spaces, .locks, foreign files */
      g_auto (GStrv) parts = g_strsplit (rest, "--", -1);
      g_autofree char *id = g_strjoinv ("/", parts);
      if (!hn_hub_validate_repo_id (id, NULL))
        continue;
      HnHubCachedRepo *r = g_new0 (HnHubCachedRepo, 1);
      r->type = type;
      r->repo_id = g_steal_pointer (&id);
      r->path = g_build_filename (dir, n, NULL);
      g_autofree char *blobs = g_build_filename (r->path, "blobs", NULL);
      g_autoptr (GDir) bd = g_dir_open (blobs, 0, NULL);
      const char *b;
      while (bd && (b = g_dir_read_name (bd)))
        {
          g_autofree char *bp = g_build_filename (blobs, b, NULL);
          GStatBuf sb;
          if (g_stat (bp, &sb) == 0 && S_ISREG (sb.st_mode))
            r->size_on_disk += (guint64) sb.st_size;
        }
      g_autoptr (GPtrArray) snaps = g_ptr_array_new ();
      g_autofree char *sdir = g_build_filename (r->path, "snapshots", NULL);
      g_autoptr (GDir) sd = g_dir_open (sdir, 0, NULL);
      const char *sn;
      while (sd && (sn = g_dir_read_name (sd)))
        if (is_commit_hash (sn))
          g_ptr_array_add (snaps, g_strdup (sn));
      g_ptr_array_sort (snaps, strv_cmp);
      g_ptr_array_add (snaps, NULL);
      r->snapshots = (char **) g_ptr_array_free (g_steal_pointer (&snaps), FALSE);
      g_autoptr (GPtrArray) refs = g_ptr_array_new ();
      g_autofree char *rdir = g_build_filename (r->path, "refs", NULL);
      collect_refs (rdir, NULL, refs);
      g_ptr_array_sort (refs, strv_cmp);
      g_ptr_array_add (refs, NULL);
      r->refs = (char **) g_ptr_array_free (g_steal_pointer (&refs), FALSE);
      g_ptr_array_add (repos, r);
    }
  g_ptr_array_sort (repos, cached_repo_cmp);
  return repos;
}
