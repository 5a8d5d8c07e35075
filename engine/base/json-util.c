#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <math.h>
#include <string.h>

gboolean
hn_json_check_depth (const char *data, gsize len, const char *name, GError **error)
{
  /* Brackets inside strings do not nest; a malformed text is left to the
   * parser, which reports it with line and column. */
  int depth = 0;
  gboolean in_str = FALSE;
  for (gsize k = 0; k < len; k++)
    {
      char c = data[k];
      if (in_str)
        {
          if (c == '\\')
            k++;
          else if (c == '"')
            in_str = FALSE;
        }
      else if (c == '"')
        in_str = TRUE;
      else if (c == '[' || c == '{')
        {
          if (++depth > HN_JSON_MAX_DEPTH)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: JSON nested deeper than %d levels (at byte %"
                           G_GSIZE_FORMAT ")", name, HN_JSON_MAX_DEPTH, k);
              return FALSE;
            }
        }
      else if ((c == ']' || c == '}') && depth > 0)
        depth--;
    }
  return TRUE;
}

guint
hn_json_count_top_members (const char *data, gsize len, char **first_dup)
{
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  int depth = 0;
  gboolean expect_key = FALSE;
  guint n = 0;
  if (first_dup)
    *first_dup = NULL;
  for (gsize k = 0; k < len; k++)
    {
      char c = data[k];
      if (c == '"')
        {
          gsize start = ++k;
          while (k < len && data[k] != '"')
            k += data[k] == '\\' ? 2 : 1;
          if (depth == 1 && expect_key && k <= len)
            {
              char *key = g_strndup (data + start, MIN (k, len) - start);
              n++;
              if (!g_hash_table_add (seen, key) && first_dup && !*first_dup)
                *first_dup = g_strdup (key);
            }
          expect_key = FALSE;
        }
      else if (c == '{' || c == '[')
        {
          depth++;
          expect_key = depth == 1 && c == '{';
        }
      else if (c == '}' || c == ']')
        depth--;
      else if (c == ',' && depth == 1)
        expect_key = TRUE;
    }
  return n;
}

gboolean
hn_json_parser_load (JsonParser *parser, const char *data, gssize len, const char *name, GError **error)
{
  g_autoptr (GError) local = NULL;
  if (len < 0)
    len = (gssize) strlen (data);
  if (!hn_json_check_depth (data, (gsize) len, name, error))
    return FALSE;
  if (json_parser_load_from_data (parser, data, len, &local))
    return TRUE;
  /* json-glib says "<data>:LINE:COL: Parse error: ..."; put the file name there. */
  const char *msg = local->message;
  if (g_str_has_prefix (msg, "<data>:"))
    msg += strlen ("<data>");
  else if (msg[0] != ':')
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: invalid JSON: %s", name, msg);
      return FALSE;
    }
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s%s", name, msg);
  return FALSE;
}

gboolean
hn_json_parser_load_file (JsonParser *parser, const char *path, gsize max_bytes, const char *what, GError **error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (path, max_bytes, what, &data, &len, error))
    return FALSE;
  return hn_json_parser_load (parser, data, (gssize) len, path, error);
}

gboolean
hn_json_node_get_int (JsonNode *n, gint64 *out)
{
  if (!n || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  GType t = json_node_get_value_type (n);
  if (t == G_TYPE_INT64)
    {
      *out = json_node_get_int (n);
      return TRUE;
    }
  if (t == G_TYPE_DOUBLE)
    {
      double d = json_node_get_double (n);
      if (isfinite (d) && d == floor (d) && fabs (d) < 9.0e15)
        {
          *out = (gint64) d;
          return TRUE;
        }
    }
  return FALSE;
}

gboolean
hn_json_node_get_double (JsonNode *n, double *out)
{
  if (!n || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  GType t = json_node_get_value_type (n);
  if (t == G_TYPE_INT64)
    *out = (double) json_node_get_int (n);
  else if (t == G_TYPE_DOUBLE)
    *out = json_node_get_double (n);
  else
    return FALSE;
  return TRUE;
}

gboolean
hn_json_node_get_bool (JsonNode *n, gboolean *out)
{
  if (!n || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  GType t = json_node_get_value_type (n);
  if (t == G_TYPE_BOOLEAN)
    *out = json_node_get_boolean (n);
  else if (t == G_TYPE_INT64 && (json_node_get_int (n) == 0 || json_node_get_int (n) == 1))
    *out = json_node_get_int (n) == 1; /* a few old configs write 0/1 */
  else
    return FALSE;
  return TRUE;
}

const char *
hn_json_object_get_string (JsonObject *o, const char *name)
{
  JsonNode *n = o ? json_object_get_member (o, name) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}
