/* The Hub access token in the desktop keyring (libsecret's Secret Service),
 * never in GSettings nor on a command line: the GUI saves it here, and both
 * the GUI's jobs and the CLI find it here when HF_TOKEN, --hf-token and the
 * token file are not set.
 *
 * The keyring is only asked when the Hub refuses a request for want of a
 * token (a gated or private repo), so public downloads never touch it, and
 * the lookup never unlocks a locked keyring (no prompt from a worker thread
 * or a terminal).
 *
 * One entry per Hub endpoint (attribute "endpoint"), schema
 * io.github.hierarchos.Native.HubToken. Tests inject a store of their own. */
#pragma once
#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  /* NULL without an error when there is no token */
  char *(*lookup) (const char *endpoint, gpointer data, GError **error);
  gboolean (*store) (const char *endpoint, const char *token, gpointer data, GError **error);
  gboolean (*clear) (const char *endpoint, gpointer data, GError **error);
  gpointer data;
} HnHubTokenStore;

/* Replaces the keyring for this process (NULL: back to libsecret). */
void hn_hub_token_store_set (const HnHubTokenStore *store);

/* NULL endpoint: HF_ENDPOINT or https://huggingface.co. These block on
 * D-Bus: call them off the GUI's main thread. */
char *hn_hub_token_lookup (const char *endpoint, GError **error);
gboolean hn_hub_token_save (const char *endpoint, const char *token, GError **error);
gboolean hn_hub_token_forget (const char *endpoint, GError **error);

/* A token must look like one (printable ASCII, no spaces, 8..512 chars), so a
 * pasted sentence or a newline never goes into a header. The error never
 * repeats the text. */
gboolean hn_hub_token_check (const char *token, GError **error);

G_END_DECLS
