/* Small json-glib helpers for the io readers (config.json, generation
 * config, safetensors index, hub replies). */
#pragma once
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* json-glib's parser recurses once per nesting level, so a hostile file
 * nested 100k deep overflows the stack: every JSON read goes through the
 * two loaders below, which refuse text nested deeper than this first (the
 * tokenizer.json scanner uses the same bound). */
#define HN_JSON_MAX_DEPTH 512

/* HN_ERROR_CORRUPT "<name>: JSON nested deeper than 512 levels (at byte N)"
 * when the arrays and objects of `data` nest deeper than HN_JSON_MAX_DEPTH. */
gboolean hn_json_check_depth (const char *data, gsize len, const char *name, GError **error);

/* json-glib keeps the last of repeated member names silently. Scans the
 * top-level object of `data` and returns its number of members as written,
 * with *first_dup (when not NULL) set to the first name written twice (as
 * written, escapes kept; NULL when none, or only differently escaped ones). */
guint hn_json_count_top_members (const char *data, gsize len, char **first_dup);

/* Loads JSON text (len -1: NUL-terminated) after the depth check; a syntax
 * error is HN_ERROR_CORRUPT "<name>:<line>:<col>: ...". */
gboolean hn_json_parser_load (JsonParser *parser, const char *data, gssize len, const char *name, GError **error);

/* Reads the regular file `path` of at most `max_bytes` (hn_file_read_bounded;
 * `what` names the kind of file) and loads it as above. */
gboolean hn_json_parser_load_file (JsonParser *parser, const char *path, gsize max_bytes, const char *what,
                                   GError **error);

/* Integers accept integral doubles (1.0) since Python writes those too. */
gboolean hn_json_node_get_int (JsonNode *node, gint64 *out);
gboolean hn_json_node_get_double (JsonNode *node, double *out);
gboolean hn_json_node_get_bool (JsonNode *node, gboolean *out);
/* The member's string, or NULL when it is absent or not a string (json-glib's
 * getters raise a critical on an object or array, which damaged files have). */
const char *hn_json_object_get_string (JsonObject *o, const char *name);

G_END_DECLS
