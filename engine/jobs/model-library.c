/* The model library's local side (model-library.h). Nothing here loads a
 * weight: config.json and the safetensors headers say everything the
 * library page shows. */
#include "jobs/model-library.h"
#include "hub/hub-library.h"
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "formats/gguf.h"
#include "formats/gguf-hf.h"
#include "hierarchos/hierarchos.h"
#include "transformer/registry.h"
#include "jobs/memory-estimate.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

void
hn_local_model_free (HnLocalModel *m)
{
  if (!m)
    return;
  g_free (m->repo_id);
  g_free (m->repo_path);
  g_free (m->snapshot);
  g_free (m->commit);
  g_free (m->architecture);
  g_free (m->model_type);
  g_free (m->dtype);
  g_free (m->problem);
  g_free (m);
}

/* Parameters and the dtype the matrices are stored in, from the headers. */
static void
read_weights (HnLocalModel *m, const char *folder)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (folder, &error);
  if (!st)
    {
      if (!m->problem)
        m->problem = g_strdup (error->message);
      return;
    }
  guint64 by_dtype[HN_ST_N_DTYPES] = { 0 };
  m->n_params = 0;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      m->n_params += t->n_elements;
      if (t->ndim >= 2)
        by_dtype[t->dtype] += t->nbytes;
    }
  int best = -1, kinds = 0;
  for (int k = 0; k < HN_ST_N_DTYPES; k++)
    if (by_dtype[k])
      {
        kinds++;
        if (best < 0 || by_dtype[k] > by_dtype[best])
          best = k;
      }
  if (kinds > 1)
    m->dtype = g_strdup ("mixed");
  else if (best >= 0)
    m->dtype = g_ascii_strdown (hn_st_dtype_name ((HnStDtype) best), -1);
}

static void
read_folder (HnLocalModel *m, const char *folder)
{
  m->n_params = -1;
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (folder, &error);
  if (!cfg)
    m->problem = g_strdup (error->message);
  else
    {
      m->model_type = g_strdup (cfg->model_type);
      if (cfg->architectures[0])
        m->architecture = g_strdup (cfg->architectures[0]);
      if (hn_hier_is_model_dir (folder))
        m->supported = TRUE; /* runs on its own runtime; no parity fixture to claim */
      else if (cfg->model_type)
        {
          const HnArchInfo *arch = hn_arch_lookup (cfg->model_type, NULL);
          m->supported = arch != NULL;
          m->verified = arch && arch->fixture && (arch->tasks & HN_TASK_LOGITS);
          if (!arch)
            m->problem = g_strdup_printf ("model_type '%s' is not supported by this build", cfg->model_type);
        }
    }
  read_weights (m, folder);
}

HnCacheKind
hn_local_model_cache_kind (const char *path)
{
  if (!path || !g_file_test (path, G_FILE_TEST_IS_DIR) || hn_hier_is_model_dir (path))
    return HN_CACHE_KV;
  g_autofree char *cfg_path = g_build_filename (path, "config.json", NULL);
  if (!g_file_test (cfg_path, G_FILE_TEST_IS_REGULAR))
    return HN_CACHE_KV;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (path, NULL);
  const HnArchInfo *arch = cfg && cfg->model_type ? hn_arch_lookup (cfg->model_type, NULL) : NULL;
  return arch ? hn_arch_cache_kind (arch) : HN_CACHE_KV;
}

/* Bytes of the regular files under `dir` (links not followed). */
static guint64
tree_size (const char *dir, int depth)
{
  guint64 n = 0;
  g_autoptr (GDir) d = depth < 16 ? g_dir_open (dir, 0, NULL) : NULL;
  const char *name;
  while (d && (name = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (dir, name, NULL);
      GStatBuf sb;
      if (g_lstat (p, &sb) != 0)
        continue;
      if (S_ISREG (sb.st_mode))
        n += (guint64) sb.st_size;
      else if (S_ISDIR (sb.st_mode))
        n += tree_size (p, depth + 1);
    }
  return n;
}

/* A .gguf file: its config from the <arch>.* keys, its parameters and the
 * ggml type most of its matrix bytes are in, from the tensor infos. */
static void
read_gguf (HnLocalModel *m, const char *path)
{
  m->n_params = -1;
  m->gguf = TRUE;
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
  if (!g)
    {
      m->problem = g_strdup (error->message);
      return;
    }
  GStatBuf sb;
  if (g_stat (path, &sb) == 0)
    m->size_on_disk = (guint64) sb.st_size;
  m->n_params = 0;
  guint64 by_type[HN_GGML_N_TYPES] = { 0 };
  for (guint i = 0; i < hn_gguf_get_n_tensors (g); i++)
    {
      const HnGgufTensor *t = hn_gguf_get_tensor (g, i);
      m->n_params += t->n_elements;
      if (t->n_dims >= 2 && (guint) t->type < HN_GGML_N_TYPES)
        by_type[t->type] += t->nbytes;
    }
  int best = -1;
  for (int k = 0; k < HN_GGML_N_TYPES; k++)
    if (by_type[k] && (best < 0 || by_type[k] > by_type[best]))
      best = k;
  if (best >= 0)
    m->dtype = g_ascii_strdown (hn_ggml_type_name ((HnGgmlType) best), -1); /* as --outtype spells it */
  g_autofree char *json = hn_gguf_config_json (g, &error);
  g_autoptr (HnModelConfig) cfg = json ? hn_model_config_load_from_data (json, -1, path, &error) : NULL;
  if (!cfg)
    {
      m->problem = g_strdup (error->message);
      return;
    }
  m->model_type = g_strdup (cfg->model_type);
  if (cfg->architectures[0])
    m->architecture = g_strdup (cfg->architectures[0]);
  const HnArchInfo *arch = cfg->model_type ? hn_arch_lookup (cfg->model_type, NULL) : NULL;
  m->supported = arch != NULL;
  m->verified = arch && arch->fixture && (arch->tasks & HN_TASK_LOGITS);
}

HnLocalModel *
hn_local_model_read (const char *path, GError **error)
{
  gboolean gguf = g_str_has_suffix (path, ".gguf") && g_file_test (path, G_FILE_TEST_IS_REGULAR);
  if (!gguf && !g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s is not a model folder or a .gguf file", path);
      return NULL;
    }
  HnLocalModel *m = g_new0 (HnLocalModel, 1);
  m->repo_id = g_path_get_basename (path);
  m->repo_path = g_strdup (path);
  m->snapshot = g_strdup (path);
  m->user_added = TRUE;
  if (gguf)
    read_gguf (m, path);
  else
    {
      read_folder (m, path);
      m->size_on_disk = tree_size (path, 0);
    }
  return m;
}

static int
local_cmp (gconstpointer a, gconstpointer b)
{
  return strcmp ((*(HnLocalModel *const *) a)->repo_id, (*(HnLocalModel *const *) b)->repo_id);
}

GPtrArray *
hn_model_library_list (const char *cache_dir, GError **error)
{
  g_autoptr (GPtrArray) repos = hn_hub_scan_cache (cache_dir, error);
  if (!repos)
    return NULL;
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_local_model_free);
  for (guint i = 0; i < repos->len; i++)
    {
      HnHubCachedRepo *r = repos->pdata[i];
      if (r->type != HN_HUB_REPO_MODEL)
        continue;
      HnLocalModel *m = g_new0 (HnLocalModel, 1);
      m->repo_id = g_strdup (r->repo_id);
      m->repo_path = g_strdup (r->path);
      m->size_on_disk = r->size_on_disk;
      m->incomplete_bytes = hn_hub_cached_repo_incomplete_bytes (r);
      m->snapshot = hn_hub_cached_repo_pick_snapshot (r, &m->commit);
      /* a GGUF repo: one .gguf and no config.json (loaders take the folder) */
      g_autofree char *gguf = m->snapshot ? hn_gguf_resolve_path (m->snapshot) : NULL;
      if (gguf)
        {
          read_gguf (m, gguf);
          m->size_on_disk = r->size_on_disk;
        }
      else if (m->snapshot)
        read_folder (m, m->snapshot);
      else
        {
          m->n_params = -1;
          m->problem = g_strdup (m->incomplete_bytes ? "the download is not finished (it resumes from where it stopped)"
                                                     : "no snapshot with files");
        }
      g_ptr_array_add (out, m);
    }
  g_ptr_array_sort (out, local_cmp);
  return out;
}

GPtrArray *
hn_model_library_list_with (const char *cache_dir, const char *const *paths, GError **error)
{
  GPtrArray *out = hn_model_library_list (cache_dir, error);
  if (!out)
    return NULL;
  for (const char *const *p = paths; p && *p; p++)
    {
      g_autoptr (GError) e = NULL;
      HnLocalModel *m = hn_local_model_read (*p, &e);
      if (!m)
        {
          /* listed still, so it can be forgotten */
          m = g_new0 (HnLocalModel, 1);
          m->repo_id = g_path_get_basename (*p);
          m->repo_path = g_strdup (*p);
          m->n_params = -1;
          m->user_added = TRUE;
          m->problem = g_strdup (e->message);
        }
      g_ptr_array_add (out, m);
    }
  return out;
}

char *
hn_model_library_paths_file (void)
{
  return g_build_filename (g_get_user_data_dir (), "hierarchos-native", "model-folders.json", NULL);
}

char **
hn_model_library_get_paths (GError **error)
{
  g_autofree char *file = hn_model_library_paths_file ();
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) e = NULL;
  g_autoptr (GStrvBuilder) out = g_strv_builder_new ();
  if (!hn_json_parser_load_file (p, file, HN_MAX_CONFIG_BYTES, "model folder list", &e))
    {
      if (g_error_matches (e, HN_ERROR, HN_ERROR_NOT_FOUND))
        return g_strv_builder_end (out);
      g_propagate_error (error, g_steal_pointer (&e));
      return NULL;
    }
  JsonNode *root = json_parser_get_root (p);
  if (!root || !JSON_NODE_HOLDS_ARRAY (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: not a JSON array of paths", file);
      return NULL;
    }
  JsonArray *a = json_node_get_array (root);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *n = json_array_get_element (a, i);
      if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING && *json_node_get_string (n))
        g_strv_builder_add (out, json_node_get_string (n));
    }
  return g_strv_builder_end (out);
}

gboolean
hn_model_library_set_paths (const char *const *paths, GError **error)
{
  g_autofree char *file = hn_model_library_paths_file ();
  g_autofree char *dir = g_path_get_dirname (file);
  if (g_mkdir_with_parents (dir, 0755) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create %s: %s", dir, g_strerror (e));
      return FALSE;
    }
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (const char *const *p = paths; p && *p; p++)
    json_builder_add_string_value (b, *p);
  json_builder_end_array (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *text = json_to_string (root, TRUE);
  return hn_write_file_atomic (file, text, strlen (text), error);
}

JsonNode *
hn_local_models_to_json (GPtrArray *models)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (guint i = 0; i < models->len; i++)
    {
      HnLocalModel *m = models->pdata[i];
      json_builder_begin_object (b);
#define STR(k, v)                                                                                                  \
  json_builder_set_member_name (b, k);                                                                             \
  if (v)                                                                                                           \
    json_builder_add_string_value (b, v);                                                                          \
  else                                                                                                             \
    json_builder_add_null_value (b);
      STR ("id", m->repo_id);
      STR ("path", m->repo_path);
      STR ("snapshot", m->snapshot);
      STR ("architecture", m->architecture);
      STR ("model_type", m->model_type);
      STR ("dtype", m->dtype);
#undef STR
      json_builder_set_member_name (b, "params");
      if (m->n_params >= 0)
        json_builder_add_int_value (b, m->n_params);
      else
        json_builder_add_null_value (b);
      json_builder_set_member_name (b, "size_on_disk");
      json_builder_add_int_value (b, (gint64) m->size_on_disk);
      json_builder_set_member_name (b, "incomplete_bytes");
      json_builder_add_int_value (b, (gint64) m->incomplete_bytes);
      json_builder_set_member_name (b, "supported");
      json_builder_add_boolean_value (b, m->supported);
      json_builder_set_member_name (b, "verified");
      json_builder_add_boolean_value (b, m->verified);
      json_builder_set_member_name (b, "problem");
      if (m->problem)
        json_builder_add_string_value (b, m->problem);
      else
        json_builder_add_null_value (b);
      json_builder_set_member_name (b, "user_added");
      json_builder_add_boolean_value (b, m->user_added);
      json_builder_set_member_name (b, "gguf");
      json_builder_add_boolean_value (b, m->gguf);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  return json_builder_get_root (b);
}


/* ---- fit ---------------------------------------------------------------- */

typedef gboolean (*EstimateFunc) (const HnMemoryRequest *req, HnMemoryEstimate *e, gpointer data, GError **error);

static gboolean
fit_with (EstimateFunc estimate, gpointer data, guint64 free_bytes, HnModelFit *out, GError **error)
{
  memset (out, 0, sizeof *out);
  out->free_bytes = free_bytes;
  HnMemoryRequest chat = { .workload = HN_MEMORY_GENERATE, .rows = 1, .context = HN_FIT_CHAT_CONTEXT };
  HnMemoryRequest lora = { .workload = HN_MEMORY_LORA, .batch = HN_FIT_LORA_BATCH, .seq_len = HN_FIT_LORA_SEQ,
                           .lora_r = 8 };
  HnMemoryEstimate ec = { 0 }, el = { 0 };
  if (!estimate (&chat, &ec, data, error))
    return FALSE;
  if (!estimate (&lora, &el, data, error))
    {
      hn_memory_estimate_clear (&ec);
      return FALSE;
    }
  out->chat_bytes = ec.total;
  out->lora_bytes = el.total;
  /* the same chat with every parameter at 4 bits */
  guint64 w4 = (guint64) MAX (ec.n_params, 0) / 2;
  out->chat_4bit_bytes = ec.total - ec.weights + MIN (w4, ec.weights);
  hn_memory_estimate_clear (&ec);
  hn_memory_estimate_clear (&el);
  out->level = hn_model_fit_level (out, free_bytes);
  return TRUE;
}

HnFitLevel
hn_model_fit_level (const HnModelFit *fit, guint64 free_bytes)
{
  if (free_bytes == 0)
    return HN_FIT_UNKNOWN;
  if (fit->lora_bytes <= free_bytes)
    return HN_FIT_LORA;
  if (fit->chat_bytes <= free_bytes)
    return HN_FIT_CHAT;
  if (fit->chat_4bit_bytes <= free_bytes)
    return HN_FIT_NEEDS_4BIT;
  return HN_FIT_TOO_LARGE;
}

static gboolean
estimate_local (const HnMemoryRequest *req, HnMemoryEstimate *e, gpointer data, GError **error)
{
  return hn_memory_estimate_model (data, req, e, error);
}

gboolean
hn_model_fit_local (const char *model_dir, guint64 free_bytes, HnModelFit *out, GError **error)
{
  return fit_with (estimate_local, (gpointer) model_dir, free_bytes, out, error);
}

typedef struct {
  HnModelConfig *cfg;
  gint64 n_params;
  guint64 weights;
} Remote;

static gboolean
estimate_remote (const HnMemoryRequest *req, HnMemoryEstimate *e, gpointer data, GError **error)
{
  Remote *r = data;
  return hn_memory_estimate_config (r->cfg, r->n_params, r->weights, NULL, req, e, error);
}

/* config.json is small and never LFS: read it from the Hub, not the cache. */
static HnModelConfig *
fetch_config (HnHub *hub, const char *repo_id, GCancellable *cancellable, GError **error)
{
  g_autofree char *url = g_strdup_printf ("%s/%s/resolve/main/config.json", hn_hub_get_endpoint (hub), repo_id);
  g_autoptr (JsonNode) node = hn_hub_api_get (hub, url, repo_id, "config.json", NULL, cancellable, error);
  if (!node)
    return NULL;
  g_autofree char *text = json_to_string (node, FALSE);
  g_autofree char *name = g_strdup_printf ("%s/config.json", repo_id);
  return hn_model_config_load_from_data (text, -1, name, error);
}

gboolean
hn_model_fit_remote (HnHub *hub, const HnHubRepoInfo *info, guint64 free_bytes, HnModelFit *out,
                     GCancellable *cancellable, GError **error)
{
  if (info->weights_size == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s has no safetensors weights", info->summary.id);
      return FALSE;
    }
  g_autoptr (HnModelConfig) cfg = fetch_config (hub, info->summary.id, cancellable, error);
  if (!cfg)
    return FALSE;
  /* without the Hub's parameter count, assume 16-bit weights (what nearly every repo holds) */
  Remote r = { cfg, info->summary.n_params >= 0 ? info->summary.n_params : (gint64) (info->weights_size / 2),
               info->weights_size };
  return fit_with (estimate_remote, &r, free_bytes, out, error);
}

/* Bytes per parameter of a config's dtype (float32: 4; 16-bit or unnamed: 2). */
static guint
dtype_bytes (const HnModelConfig *cfg)
{
  const char *d = cfg->dtype;
  return d && (g_str_equal (d, "float32") || g_str_equal (d, "float") || g_str_equal (d, "fp32")) ? 4 : 2;
}

gboolean
hn_model_fit_summary (HnHub *hub, const HnHubRepoSummary *s, guint64 free_bytes, HnModelFit *out,
                      GCancellable *cancellable, GError **error)
{
  if (s->n_params <= 0 && s->used_storage <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "the Hub gives no parameter count or size for %s", s->id);
      return FALSE;
    }
  g_autoptr (HnModelConfig) cfg = fetch_config (hub, s->id, cancellable, error);
  if (!cfg)
    return FALSE;
  guint per = dtype_bytes (cfg);
  Remote r = { cfg, s->n_params, 0 };
  gboolean from_storage = s->n_params <= 0;
  if (from_storage)
    r.n_params = s->used_storage / per; /* every stored byte a weight: an upper bound */
  r.weights = (guint64) r.n_params * per;
  if (!fit_with (estimate_remote, &r, free_bytes, out, error))
    return FALSE;
  out->params_from_storage = from_storage;
  return TRUE;
}
