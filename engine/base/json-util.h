/* Small json-glib helpers for the io readers (config.json, generation
 * config, safetensors index, hub replies). */
#pragma once
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* Loads JSON text; a syntax error is HN_ERROR_CORRUPT "<name>:<line>:<col>: ...". */
gboolean hn_json_parser_load (JsonParser *parser, const char *data, gssize len, const char *name, GError **error);

/* Integers accept integral doubles (1.0) since Python writes those too. */
gboolean hn_json_node_get_int (JsonNode *node, gint64 *out);
gboolean hn_json_node_get_double (JsonNode *node, double *out);
gboolean hn_json_node_get_bool (JsonNode *node, gboolean *out);
/* The member's string, or NULL when it is absent or not a string (json-glib's
 * getters raise a critical on an object or array, which damaged files have). */
const char *hn_json_object_get_string (JsonObject *o, const char *name);

G_END_DECLS
