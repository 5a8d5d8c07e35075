/* What the Hub client's other files (hub-search.c, hub-local.c, hub-token.c)
 * share with hub.c. Not for use outside engine/io. */
#pragma once
#include <json-glib/json-glib.h>

#include "hub/hub.h"

G_BEGIN_DECLS

/* GETs `url` (which must be on the Hub's own host, so the token never goes
 * elsewhere) and parses the JSON reply. `repo_id` and `what` word the error
 * of a non-2xx reply. *link_next (may be NULL) receives the rel="next" URL of
 * the Link header, NULL when there is none. Offline, fails with
 * HN_ERROR_NETWORK. */
JsonNode *hn_hub_api_get (HnHub *hub, const char *url, const char *repo_id, const char *what, char **link_next,
                          GCancellable *cancellable, GError **error);

/* The same for a body that is not JSON, at most `limit` bytes. */
GBytes *hn_hub_get_bytes (HnHub *hub, const char *url, const char *repo_id, const char *what, gsize limit,
                          char **link_next, GCancellable *cancellable, GError **error);

/* TRUE when a token is set (its text never leaves the client). */
gboolean hn_hub_has_token (HnHub *hub);

/* The rel="next" target of an RFC 8288 Link header value, or NULL. */
char *hn_hub_link_next (const char *link);

G_END_DECLS
