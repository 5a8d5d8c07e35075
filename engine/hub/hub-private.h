/* What the Hub client's other files (hub-search.c, hub-local.c, hub-token.c)
 * share with hub.c. Not for use outside engine/hub (tests/check-layers.sh). */
#pragma once
#include <json-glib/json-glib.h>

#include "hub/hub.h"

G_BEGIN_DECLS

/* The same for a body that is not JSON, at most `limit` bytes. */
GBytes *hn_hub_get_bytes (HnHub *hub, const char *url, const char *repo_id, const char *what, gsize limit,
                          char **link_next, GCancellable *cancellable, GError **error);

/* TRUE when a token is set (its text never leaves the client). */
gboolean hn_hub_has_token (HnHub *hub);

/* The rel="next" target of an RFC 8288 Link header value, or NULL. */
char *hn_hub_link_next (const char *link);

G_END_DECLS
