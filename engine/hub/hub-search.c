/* Hub search, repo details and model cards (hub-library.h). Every field of a
 * reply is optional and type-checked: a missing or odd field is left unset,
 * never trusted. */
#include "hub/hub-library.h"
#include "hub/hub-private.h"
#include "base/json-util.h"
#include "base/hn-error.h"

#include <string.h>

#define MAX_README (1u << 20)

void
hn_hub_repo_summary_free (HnHubRepoSummary *s)
{
  if (!s)
    return;
  g_free (s->id);
  g_free (s->pipeline_tag);
  g_free (s->library);
  g_free (s->license);
  g_free (s->gated);
  g_free (s->last_modified);
  g_free (s);
}

static void
summary_clear (HnHubRepoSummary *s)
{
  g_free (s->id);
  g_free (s->pipeline_tag);
  g_free (s->library);
  g_free (s->license);
  g_free (s->gated);
  g_free (s->last_modified);
}

void
hn_hub_repo_info_free (HnHubRepoInfo *info)
{
  if (!info)
    return;
  summary_clear (&info->summary);
  g_free (info->sha);
  g_clear_pointer (&info->files, g_ptr_array_unref);
  g_free (info->architecture);
  g_free (info->model_type);
  g_free (info);
}

static gint64
get_int (JsonObject *o, const char *name)
{
  gint64 v;
  return o && hn_json_node_get_int (json_object_get_member (o, name), &v) ? v : -1;
}

static char *
dup_string (JsonObject *o, const char *name)
{
  const char *s = hn_json_object_get_string (o, name);
  return s && *s ? g_strdup (s) : NULL;
}

/* Fills `s` from one listing or info object; FALSE when it has no valid id. */
static gboolean
parse_summary (JsonObject *o, HnHubRepoSummary *s)
{
  const char *id = hn_json_object_get_string (o, "id");
  if (!id || !hn_hub_validate_repo_id (id, NULL))
    return FALSE;
  s->id = g_strdup (id);
  s->pipeline_tag = dup_string (o, "pipeline_tag");
  s->library = dup_string (o, "library_name");
  s->last_modified = dup_string (o, "lastModified");
  s->downloads = get_int (o, "downloads");
  s->likes = get_int (o, "likes");
  s->used_storage = get_int (o, "usedStorage");
  gboolean b;
  s->private_repo = hn_json_node_get_bool (json_object_get_member (o, "private"), &b) && b;
  /* gated: false, or "auto" / "manual" */
  JsonNode *g = json_object_get_member (o, "gated");
  if (g && JSON_NODE_HOLDS_VALUE (g) && json_node_get_value_type (g) == G_TYPE_STRING)
    s->gated = g_strdup (json_node_get_string (g));
  else if (g && hn_json_node_get_bool (g, &b) && b)
    s->gated = g_strdup ("auto");
  JsonNode *st = json_object_get_member (o, "safetensors");
  s->n_params = st && JSON_NODE_HOLDS_OBJECT (st) ? get_int (json_node_get_object (st), "total") : -1;
  /* the licence: cardData.license, else the "license:x" tag */
  JsonNode *cd = json_object_get_member (o, "cardData");
  if (cd && JSON_NODE_HOLDS_OBJECT (cd))
    s->license = dup_string (json_node_get_object (cd), "license");
  JsonNode *tags = json_object_get_member (o, "tags");
  if (!s->license && tags && JSON_NODE_HOLDS_ARRAY (tags))
    {
      JsonArray *a = json_node_get_array (tags);
      for (guint i = 0; i < json_array_get_length (a) && !s->license; i++)
        {
          JsonNode *t = json_array_get_element (a, i);
          if (JSON_NODE_HOLDS_VALUE (t) && json_node_get_value_type (t) == G_TYPE_STRING &&
              g_str_has_prefix (json_node_get_string (t), "license:"))
            s->license = g_strdup (json_node_get_string (t) + 8);
        }
    }
  return TRUE;
}

static const char *
api_folder (HnHubRepoType type)
{
  return type == HN_HUB_REPO_DATASET ? "datasets" : "models";
}

static void
add_param (GString *url, const char *name, const char *value)
{
  g_autofree char *e = g_uri_escape_string (value, NULL, FALSE);
  g_string_append_printf (url, "%c%s=%s", strchr (url->str, '?') ? '&' : '?', name, e);
}

static gboolean
check_query (const HnHubSearchQuery *q, GError **error)
{
  const char *sort = q->sort ? q->sort : "downloads";
  if (strcmp (sort, "downloads") != 0 && strcmp (sort, "lastModified") != 0 && strcmp (sort, "likes") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "sort '%s' is not one of downloads, lastModified, likes", sort);
      return FALSE;
    }
  if (q->limit > 100)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "a search page holds 1 to 100 results, not %u",
                   q->limit);
      return FALSE;
    }
  return TRUE;
}

/* The cursor of a rel="next" URL, or NULL. */
static char *
cursor_of (const char *url)
{
  if (!url)
    return NULL;
  g_autoptr (GUri) u = g_uri_parse (url, G_URI_FLAGS_ENCODED_QUERY, NULL);
  const char *query = u ? g_uri_get_query (u) : NULL;
  if (!query)
    return NULL;
  g_autoptr (GHashTable) params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, NULL);
  const char *c = params ? g_hash_table_lookup (params, "cursor") : NULL;
  return c && *c ? g_strdup (c) : NULL;
}

GPtrArray *
hn_hub_search (HnHub *hub, const HnHubSearchQuery *q, char **next_cursor, GCancellable *cancellable,
               GError **error)
{
  if (next_cursor)
    *next_cursor = NULL;
  if (!check_query (q, error))
    return NULL;
  GString *url = g_string_new (hn_hub_get_endpoint (hub));
  g_string_append_printf (url, "/api/%s", api_folder (q->type));
  if (q->search && *q->search)
    add_param (url, "search", q->search);
  if (q->type == HN_HUB_REPO_MODEL && q->pipeline_tag && *q->pipeline_tag)
    add_param (url, "pipeline_tag", q->pipeline_tag);
  if (q->type == HN_HUB_REPO_MODEL && q->library && *q->library)
    add_param (url, "filter", q->library); /* huggingface_hub sends the library as a filter tag */
  add_param (url, "sort", q->sort ? q->sort : "downloads");
  add_param (url, "direction", "-1");
  g_autofree char *limit = g_strdup_printf ("%u", q->limit ? q->limit : 20);
  add_param (url, "limit", limit);
  if (q->cursor && *q->cursor)
    add_param (url, "cursor", q->cursor);
  /* With expand the Hub returns just these fields (and the id). */
  static const char *const model_fields[] = { "downloads", "likes", "gated", "lastModified", "pipeline_tag",
                                              "library_name", "tags", "private", "safetensors", "usedStorage",
                                              NULL };
  static const char *const dataset_fields[] = { "downloads", "likes", "gated", "lastModified", "tags", "private",
                                                "usedStorage", NULL };
  for (const char *const *f = q->type == HN_HUB_REPO_MODEL ? model_fields : dataset_fields; *f; f++)
    add_param (url, "expand", *f);
  g_autofree char *text = g_string_free (url, FALSE);
  g_autofree char *next = NULL;
  g_autoptr (JsonNode) root = hn_hub_api_get (hub, text, "the search", "the search", &next, cancellable, error);
  if (!root)
    return NULL;
  if (!JSON_NODE_HOLDS_ARRAY (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the Hub's search reply is not a list", text);
      return NULL;
    }
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_hub_repo_summary_free);
  JsonArray *a = json_node_get_array (root);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      HnHubRepoSummary *s = g_new0 (HnHubRepoSummary, 1);
      if (JSON_NODE_HOLDS_OBJECT (e) && parse_summary (json_node_get_object (e), s))
        g_ptr_array_add (out, s);
      else
        hn_hub_repo_summary_free (s); /* an entry without a valid id cannot be opened */
    }
  if (next_cursor)
    *next_cursor = cursor_of (next);
  return out;
}

static void
add_opt_string (JsonBuilder *b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  if (value)
    json_builder_add_string_value (b, value);
  else
    json_builder_add_null_value (b);
}

static void
add_opt_int (JsonBuilder *b, const char *name, gint64 value)
{
  json_builder_set_member_name (b, name);
  if (value >= 0)
    json_builder_add_int_value (b, value);
  else
    json_builder_add_null_value (b);
}

JsonNode *
hn_hub_search_to_json (GPtrArray *results, const char *next_cursor)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "results");
  json_builder_begin_array (b);
  for (guint i = 0; i < results->len; i++)
    {
      HnHubRepoSummary *s = results->pdata[i];
      json_builder_begin_object (b);
      add_opt_string (b, "id", s->id);
      add_opt_string (b, "pipeline_tag", s->pipeline_tag);
      add_opt_string (b, "library", s->library);
      add_opt_string (b, "license", s->license);
      add_opt_string (b, "gated", s->gated);
      json_builder_set_member_name (b, "private");
      json_builder_add_boolean_value (b, s->private_repo);
      add_opt_int (b, "downloads", s->downloads);
      add_opt_int (b, "likes", s->likes);
      add_opt_int (b, "params", s->n_params);
      add_opt_int (b, "used_storage", s->used_storage);
      add_opt_string (b, "last_modified", s->last_modified);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  add_opt_string (b, "next_cursor", next_cursor);
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

HnHubRepoInfo *
hn_hub_repo_info (HnHub *hub, HnHubRepoType type, const char *repo_id, GCancellable *cancellable, GError **error)
{
  if (!hn_hub_validate_repo_id (repo_id, error))
    return NULL;
  g_autofree char *url = g_strdup_printf ("%s/api/%s/%s?blobs=true", hn_hub_get_endpoint (hub), api_folder (type),
                                          repo_id);
  g_autoptr (JsonNode) root = hn_hub_api_get (hub, url, repo_id, "the repo's details", NULL, cancellable, error);
  if (!root)
    return NULL;
  JsonObject *o = JSON_NODE_HOLDS_OBJECT (root) ? json_node_get_object (root) : NULL;
  HnHubRepoInfo *info = g_new0 (HnHubRepoInfo, 1);
  info->files = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_hub_file_free);
  if (!o || !parse_summary (o, &info->summary))
    {
      hn_hub_repo_info_free (info);
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the Hub's reply has no repo id", url);
      return NULL;
    }
  info->sha = dup_string (o, "sha");
  JsonNode *cfg = json_object_get_member (o, "config");
  if (cfg && JSON_NODE_HOLDS_OBJECT (cfg))
    {
      JsonObject *c = json_node_get_object (cfg);
      info->model_type = dup_string (c, "model_type");
      JsonNode *arch = json_object_get_member (c, "architectures");
      if (arch && JSON_NODE_HOLDS_ARRAY (arch) && json_array_get_length (json_node_get_array (arch)) > 0)
        {
          JsonNode *a0 = json_array_get_element (json_node_get_array (arch), 0);
          if (JSON_NODE_HOLDS_VALUE (a0) && json_node_get_value_type (a0) == G_TYPE_STRING)
            info->architecture = g_strdup (json_node_get_string (a0));
        }
    }
  JsonNode *sib = json_object_get_member (o, "siblings");
  JsonArray *a = sib && JSON_NODE_HOLDS_ARRAY (sib) ? json_node_get_array (sib) : NULL;
  for (guint i = 0; a && i < json_array_get_length (a); i++)
    {
      JsonNode *en = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_OBJECT (en))
        continue;
      JsonObject *e = json_node_get_object (en);
      const char *name = hn_json_object_get_string (e, "rfilename");
      if (!name || !*name || strlen (name) > 1024)
        continue;
      HnHubFile *f = g_new0 (HnHubFile, 1);
      f->path = g_strdup (name);
      gint64 size = get_int (e, "size");
      JsonNode *lfs = json_object_get_member (e, "lfs");
      if (lfs && JSON_NODE_HOLDS_OBJECT (lfs))
        {
          f->lfs_sha256 = dup_string (json_node_get_object (lfs), "sha256");
          gint64 ls = get_int (json_node_get_object (lfs), "size");
          if (ls >= 0)
            size = ls;
        }
      f->size = (guint64) MAX (size, 0);
      info->total_size += f->size;
      if (g_str_has_suffix (f->path, ".safetensors"))
        info->weights_size += f->size;
      g_ptr_array_add (info->files, f);
    }
  return info;
}

char *
hn_hub_fetch_readme (HnHub *hub, HnHubRepoType type, const char *repo_id, GCancellable *cancellable,
                     GError **error)
{
  if (!hn_hub_validate_repo_id (repo_id, error))
    return NULL;
  /* read from the Hub, not into the cache: browsing must not leave
   * half-made repos in the local model list */
  g_autofree char *url = g_strdup_printf ("%s%s/%s/resolve/main/README.md", hn_hub_get_endpoint (hub),
                                          type == HN_HUB_REPO_DATASET ? "/datasets" : "", repo_id);
  g_autoptr (GError) local = NULL;
  g_autoptr (GBytes) body = hn_hub_get_bytes (hub, url, repo_id, "README.md", 16 * MAX_README, NULL, cancellable,
                                              &local);
  if (!body)
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  gsize len;
  const char *text = g_bytes_get_data (body, &len);
  /* a card is shown as text: capped, and invalid UTF-8 replaced, not trusted */
  return g_utf8_make_valid (text ? text : "", (gssize) MIN (len, MAX_README));
}

char *
hn_hub_readme_strip_front_matter (const char *readme)
{
  if (!readme)
    return g_strdup ("");
  if (g_str_has_prefix (readme, "---\n") || g_str_has_prefix (readme, "---\r\n"))
    {
      const char *end = strstr (readme + 3, "\n---");
      if (end)
        {
          const char *nl = strchr (end + 4, '\n');
          readme = nl ? nl + 1 : end + 4;
        }
    }
  while (*readme == '\n' || *readme == '\r')
    readme++;
  return g_strdup (readme);
}
