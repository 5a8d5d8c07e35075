/* The Hub token in the keyring (hub-token.h). */
#include "hub/hub-token.h"
#include "base/hn-error.h"

#include <libsecret/secret.h>
#include <string.h>

static const SecretSchema *
token_schema (void)
{
  static const SecretSchema schema = {
    .name = "io.github.hierarchos.Native.HubToken",
    .flags = SECRET_SCHEMA_NONE,
    .attributes = { { "endpoint", SECRET_SCHEMA_ATTRIBUTE_STRING }, { NULL, 0 } },
  };
  return &schema;
}

static char *
default_endpoint (const char *endpoint)
{
  const char *e = endpoint && *endpoint ? endpoint : g_getenv ("HF_ENDPOINT");
  char *s = g_strdup (e && *e ? e : "https://huggingface.co");
  gsize l = strlen (s);
  while (l > 0 && s[l - 1] == '/')
    s[--l] = '\0';
  return s;
}

static void
keyring_error (GError **error, const char *what, GError *local)
{
  g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot %s the Hub token in the keyring: %s (is a Secret Service such as "
               "GNOME Keyring running?)", what, local ? local->message : "unknown error");
}

/* Searches without unlocking: a locked keyring yields no token, not a prompt. */
static char *
secret_lookup (const char *endpoint, gpointer data, GError **error)
{
  g_autoptr (GError) local = NULL;
  g_autoptr (GHashTable) attrs = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (attrs, (gpointer) "endpoint", (gpointer) endpoint);
  GList *items = secret_service_search_sync (NULL, token_schema (), attrs, SECRET_SEARCH_LOAD_SECRETS, NULL, &local);
  if (local)
    {
      keyring_error (error, "read", local);
      return NULL;
    }
  char *token = NULL;
  for (GList *l = items; l && !token; l = l->next)
    {
      g_autoptr (SecretValue) v = secret_item_get_secret (l->data);
      const char *text = v ? secret_value_get_text (v) : NULL;
      if (text && *text)
        token = g_strdup (text);
    }
  g_list_free_full (items, g_object_unref);
  return token;
}

static gboolean
secret_store (const char *endpoint, const char *token, gpointer data, GError **error)
{
  g_autoptr (GError) local = NULL;
  g_autofree char *label = g_strdup_printf ("Hugging Face token (%s)", endpoint);
  if (!secret_password_store_sync (token_schema (), SECRET_COLLECTION_DEFAULT, label, token, NULL, &local,
                                   "endpoint", endpoint, NULL))
    {
      keyring_error (error, "save", local);
      return FALSE;
    }
  return TRUE;
}

static gboolean
secret_clear (const char *endpoint, gpointer data, GError **error)
{
  g_autoptr (GError) local = NULL;
  secret_password_clear_sync (token_schema (), NULL, &local, "endpoint", endpoint, NULL);
  if (local)
    {
      keyring_error (error, "remove", local);
      return FALSE;
    }
  return TRUE;
}

static const HnHubTokenStore keyring = { secret_lookup, secret_store, secret_clear, NULL };
static GMutex lock;
static HnHubTokenStore current = { secret_lookup, secret_store, secret_clear, NULL };

void
hn_hub_token_store_set (const HnHubTokenStore *store)
{
  g_mutex_lock (&lock);
  current = store ? *store : keyring;
  g_mutex_unlock (&lock);
}

static HnHubTokenStore
get_store (void)
{
  g_mutex_lock (&lock);
  HnHubTokenStore s = current;
  g_mutex_unlock (&lock);
  return s;
}

gboolean
hn_hub_token_check (const char *token, GError **error)
{
  gsize n = token ? strlen (token) : 0;
  gboolean ok = n >= 8 && n <= 512;
  for (gsize i = 0; ok && i < n; i++)
    ok = token[i] > 0x20 && token[i] < 0x7f;
  if (!ok)
    g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                 "that is not an access token (expected 8 to 512 printable characters without spaces, like hf_...)");
  return ok;
}

char *
hn_hub_token_lookup (const char *endpoint, GError **error)
{
  g_autofree char *e = default_endpoint (endpoint);
  HnHubTokenStore s = get_store ();
  return s.lookup (e, s.data, error);
}

gboolean
hn_hub_token_save (const char *endpoint, const char *token, GError **error)
{
  if (!hn_hub_token_check (token, error))
    return FALSE;
  g_autofree char *e = default_endpoint (endpoint);
  HnHubTokenStore s = get_store ();
  return s.store (e, token, s.data, error);
}

gboolean
hn_hub_token_forget (const char *endpoint, GError **error)
{
  g_autofree char *e = default_endpoint (endpoint);
  HnHubTokenStore s = get_store ();
  return s.clear (e, s.data, error);
}
