/* Which files of a dataset repo make up a config's split: the layouts the
 * Hub and the datasets library use, without running any loading script. */
#include "hub/hub.h"
#include "base/hn-error.h"

#include <string.h>

static const char *const split_words[][6] = {
  { "train", "training", NULL },
  { "validation", "valid", "val", "dev", NULL },
  { "test", "testing", "eval", "evaluation", NULL },
};

static const char *
data_format (const char *path)
{
  if (g_str_has_suffix (path, ".parquet"))
    return "parquet";
  if (g_str_has_suffix (path, ".jsonl") || g_str_has_suffix (path, ".ndjson"))
    return "jsonl";
  if (g_str_has_suffix (path, ".json"))
    return "json";
  return NULL;
}

static gboolean
is_metadata_file (const char *path)
{
  g_autofree char *base = g_path_get_basename (path);
  return base[0] == '.' || strcmp (base, "dataset_infos.json") == 0 || strcmp (base, "dataset_info.json") == 0 ||
         strcmp (base, "dataset_dict.json") == 0 || strcmp (base, "state.json") == 0 ||
         strcmp (base, "config.json") == 0;
}

/* 0 train, 1 validation, 2 test for a word, -1 otherwise. */
static int
split_of_word (const char *w)
{
  for (int s = 0; s < 3; s++)
    for (const char *const *p = split_words[s]; *p; p++)
      if (g_ascii_strcasecmp (w, *p) == 0)
        return s;
  return -1;
}

/* Which split a path names: a folder equal to a split word, or a file name
 * starting with one followed by '-', '_' or '.'. -1 when none. */
static int
split_of_path (const char *path)
{
  g_auto (GStrv) parts = g_strsplit (path, "/", -1);
  guint n = g_strv_length (parts);
  for (guint i = 0; i + 1 < n; i++)
    {
      int s = split_of_word (parts[i]);
      if (s >= 0)
        return s;
    }
  const char *base = parts[n - 1];
  for (int s = 0; s < 3; s++)
    for (const char *const *p = split_words[s]; *p; p++)
      {
        gsize l = strlen (*p);
        if (g_ascii_strncasecmp (base, *p, l) == 0 && (base[l] == '-' || base[l] == '_' || base[l] == '.'))
          return s;
      }
  return -1;
}

/* The config a path belongs to: its first folder, unless that folder is
 * "data" or a split name (then the default config). */
static char *
config_of_path (const char *path)
{
  const char *slash = strchr (path, '/');
  if (!slash)
    return g_strdup ("default");
  g_autofree char *first = g_strndup (path, (gsize) (slash - path));
  if (strcmp (first, "data") == 0)
    {
      /* data/<config>/<split>-... when there is a further folder that is not a split */
      const char *rest = slash + 1;
      const char *s2 = strchr (rest, '/');
      if (s2)
        {
          g_autofree char *second = g_strndup (rest, (gsize) (s2 - rest));
          if (split_of_word (second) < 0)
            return g_steal_pointer (&second);
        }
      return g_strdup ("default");
    }
  if (split_of_word (first) >= 0)
    return g_strdup ("default");
  return g_steal_pointer (&first);
}

static char *
join_list (GPtrArray *a, guint max)
{
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < a->len && i < max; i++)
    g_string_append_printf (s, "%s%s", i ? ", " : "", (const char *) a->pdata[i]);
  if (a->len > max)
    g_string_append_printf (s, ", ... (%u in all)", a->len);
  return g_string_free (s, FALSE);
}

static int
cmp_str (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

char **
hn_hub_dataset_pick_files (const char *const *paths, const char *repo_id, const char *config, const char *split,
                           char **why, GError **error)
{
  g_autoptr (GPtrArray) data = g_ptr_array_new ();
  const char *script = NULL;
  for (const char *const *p = paths; p && *p; p++)
    {
      if (!strchr (*p, '/') && g_str_has_suffix (*p, ".py"))
        script = *p;
      if (data_format (*p) && !is_metadata_file (*p))
        g_ptr_array_add (data, (gpointer) *p);
    }
  if (data->len == 0)
    {
      if (script)
        g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                     "dataset %s is built by a loading script (%s) and has no JSONL or Parquet files; scripts are "
                     "never run. Use a revision with data files (the Hub's refs/convert/parquet often has them)",
                     repo_id, script);
      else
        g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "dataset %s has no JSONL, JSON or Parquet files", repo_id);
      return NULL;
    }
  g_ptr_array_sort (data, cmp_str);

  /* config */
  g_autoptr (GPtrArray) configs = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; i < data->len; i++)
    {
      char *c = config_of_path (data->pdata[i]);
      if (!g_ptr_array_find_with_equal_func (configs, c, g_str_equal, NULL))
        g_ptr_array_add (configs, c);
      else
        g_free (c);
    }
  g_ptr_array_sort (configs, cmp_str);
  const char *cfg = config;
  if (!cfg)
    {
      if (configs->len == 1)
        cfg = configs->pdata[0];
      else if (g_ptr_array_find_with_equal_func (configs, "default", g_str_equal, NULL))
        cfg = "default";
      else
        {
          g_autofree char *list = join_list (configs, 20);
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "dataset %s has several configs; choose one with --hf-dataset-config: %s", repo_id, list);
          return NULL;
        }
    }
  g_autoptr (GPtrArray) in_cfg = g_ptr_array_new ();
  for (guint i = 0; i < data->len; i++)
    {
      g_autofree char *c = config_of_path (data->pdata[i]);
      if (strcmp (c, cfg) == 0)
        g_ptr_array_add (in_cfg, data->pdata[i]);
    }
  if (in_cfg->len == 0)
    {
      g_autofree char *list = join_list (configs, 20);
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "dataset %s has no config '%s'; configs: %s", repo_id, cfg,
                   list);
      return NULL;
    }

  /* split */
  const char *sp = split ? split : "train";
  int want = split_of_word (sp);
  gboolean any_marked = FALSE;
  g_autoptr (GPtrArray) picked = g_ptr_array_new ();
  for (guint i = 0; i < in_cfg->len; i++)
    {
      int s = split_of_path (in_cfg->pdata[i]);
      if (s >= 0)
        any_marked = TRUE;
      if (s >= 0 && s == want)
        g_ptr_array_add (picked, in_cfg->pdata[i]);
    }
  /* A split name the heuristics do not know: match it literally. */
  if (want < 0)
    for (guint i = 0; i < in_cfg->len; i++)
      {
        const char *p = in_cfg->pdata[i];
        g_autofree char *base = g_path_get_basename (p);
        g_autofree char *infix = g_strdup_printf ("/%s/", sp);
        gsize l = strlen (sp);
        if (strstr (p, infix) || g_str_has_prefix (p, infix + 1) ||
            (strncmp (base, sp, l) == 0 && (base[l] == '-' || base[l] == '_' || base[l] == '.')))
          g_ptr_array_add (picked, (gpointer) p);
      }
  const char *how = "files named for the split";
  if (picked->len == 0 && !any_marked && want == 0)
    {
      /* No split markers at all: everything is the train split. */
      for (guint i = 0; i < in_cfg->len; i++)
        g_ptr_array_add (picked, in_cfg->pdata[i]);
      how = "no split names in the repo, so all files form the train split";
    }
  if (picked->len == 0)
    {
      g_autofree char *list = join_list (in_cfg, 12);
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                   "dataset %s (config '%s') has no files for split '%s'; files: %s", repo_id, cfg, sp, list);
      return NULL;
    }
  /* One format per split; a repo with both is ambiguous. */
  const char *fmt0 = data_format (picked->pdata[0]);
  for (guint i = 1; i < picked->len; i++)
    if (strcmp (data_format (picked->pdata[i]), fmt0) != 0)
      {
        g_autofree char *list = join_list (picked, 12);
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "dataset %s, split '%s' mixes file formats; name one with --hf-dataset-file: %s", repo_id, sp,
                     list);
        return NULL;
      }
  if (why)
    {
      g_autofree char *list = join_list (picked, 6);
      *why = g_strdup_printf ("dataset %s: config '%s', split '%s': %u %s file%s (%s): %s", repo_id, cfg, sp,
                              picked->len, fmt0, picked->len == 1 ? "" : "s", how, list);
    }
  char **out = g_new0 (char *, picked->len + 1);
  for (guint i = 0; i < picked->len; i++)
    out[i] = g_strdup (picked->pdata[i]);
  return out;
}
