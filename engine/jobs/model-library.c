/* The model library's local side (model-library.h). Nothing here loads a
 * weight: config.json and the safetensors headers say everything the
 * library page shows. */
#include "jobs/model-library.h"
#include "hub/hub-library.h"
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "hierarchos/hierarchos.h"
#include "transformer/registry.h"
#include "base/hn-error.h"

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

HnLocalModel *
hn_local_model_read (const char *folder, GError **error)
{
  if (!g_file_test (folder, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s is not a folder", folder);
      return NULL;
    }
  HnLocalModel *m = g_new0 (HnLocalModel, 1);
  m->repo_id = g_path_get_basename (folder);
  m->repo_path = g_strdup (folder);
  m->snapshot = g_strdup (folder);
  read_folder (m, folder);
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
      if (m->snapshot)
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
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  return json_builder_get_root (b);
}

