/* Hub API replies: the revision listing (sha, siblings, LFS sizes/hashes)
 * that hn_hub_list_files parses, served by an in-process HTTP server (a
 * thread with its own main context) answering with the fuzz input. */
#include "fuzz-common.h"
#include "hub/hub.h"

#include <libsoup/soup.h>
#include <string.h>

static GMutex lock;
static GBytes *reply;
static char *endpoint;

static void
handler (SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query, gpointer user_data)
{
  g_mutex_lock (&lock);
  gsize len;
  const char *d = g_bytes_get_data (reply, &len);
  soup_server_message_set_status (msg, 200, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_COPY, d, len);
  g_mutex_unlock (&lock);
}

static gpointer
server_thread (gpointer data)
{
  GMainContext *ctx = g_main_context_new ();
  g_main_context_push_thread_default (ctx);
  SoupServer *server = soup_server_new (NULL, NULL);
  soup_server_add_handler (server, NULL, handler, NULL, NULL);
  g_autoptr (GError) error = NULL;
  if (!soup_server_listen_local (server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error))
    g_error ("fuzz-hub-reply: %s", error->message);
  GSList *uris = soup_server_get_uris (server);
  char *s = g_uri_to_string (uris->data);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  /* No trailing slash: the client appends /api/... */
  if (g_str_has_suffix (s, "/"))
    s[strlen (s) - 1] = 0;
  g_mutex_lock (&lock);
  endpoint = s;
  g_mutex_unlock (&lock);
  for (;;)
    g_main_context_iteration (ctx, TRUE);
  return NULL;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const char *tmp = fuzz_tmp_dir ();
  static HnHub *hub;
  if (!hub)
    {
      g_thread_unref (g_thread_new ("fuzz-hub-server", server_thread, NULL));
      for (;;)
        {
          g_mutex_lock (&lock);
          gboolean ready = endpoint != NULL;
          g_mutex_unlock (&lock);
          if (ready)
            break;
          g_usleep (1000);
        }
      g_unsetenv ("HF_TOKEN");
      g_unsetenv ("HUGGING_FACE_HUB_TOKEN");
      hub = hn_hub_new ();
      hn_hub_set_endpoint (hub, endpoint);
      hn_hub_set_token (hub, NULL);
      hn_hub_set_offline (hub, FALSE);
      g_autofree char *cache = g_build_filename (tmp, "hub-cache", NULL);
      hn_hub_set_cache_dir (hub, cache);
    }
  g_mutex_lock (&lock);
  g_clear_pointer (&reply, g_bytes_unref);
  reply = g_bytes_new (data, size);
  g_mutex_unlock (&lock);
  g_autoptr (GError) error = NULL;
  g_autofree char *commit = NULL;
  g_autoptr (GPtrArray) files = hn_hub_list_files (hub, HN_HUB_REPO_MODEL, "org/name", "main", &commit, NULL, &error);
  if (files)
    for (guint i = 0; i < files->len; i++)
      {
        HnHubFile *f = g_ptr_array_index (files, i);
        g_assert (f->path && *f->path && !g_path_is_absolute (f->path));
      }
  return 0;
}
