/* LoRA adapters in PEFT's format, and merging them into a model (lora.h). */
#include "train/lora.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#include <json-glib/json-glib.h>

#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"
#include "formats/safetensors.h"
#include "tensor/optim.h"

#define PEFT_PREFIX "base_model.model."

void
hn_lora_config_init (HnLoraConfig *cfg)
{
  memset (cfg, 0, sizeof *cfg);
  cfg->r = 8;
  cfg->alpha = 16;
  cfg->target_modules = g_strsplit ("q_proj,v_proj", ",", -1);
  cfg->task_type = g_strdup ("CAUSAL_LM");
}

void
hn_lora_config_clear (HnLoraConfig *cfg)
{
  g_clear_pointer (&cfg->target_modules, g_strfreev);
  g_clear_pointer (&cfg->target_regex, g_free);
  g_clear_pointer (&cfg->base_model_name_or_path, g_free);
  g_clear_pointer (&cfg->task_type, g_free);
}

double
hn_lora_config_scaling (const HnLoraConfig *cfg)
{
  return cfg->use_rslora ? cfg->alpha / sqrt ((double) cfg->r) : cfg->alpha / (double) cfg->r;
}

gboolean
hn_lora_config_set_targets (HnLoraConfig *cfg, const char *spec, GError **error)
{
  g_clear_pointer (&cfg->target_modules, g_strfreev);
  g_clear_pointer (&cfg->target_regex, g_free);
  cfg->all_linear = FALSE;
  if (!spec || !*spec)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--lora-target-modules is empty");
      return FALSE;
    }
  if (g_str_equal (spec, "all-linear") || g_str_equal (spec, "all_linear"))
    {
      cfg->all_linear = TRUE;
      return TRUE;
    }
  if (strpbrk (spec, "^$*+?()[]|\\"))
    {
      g_autoptr (GRegex) re = g_regex_new (spec, 0, 0, error);
      if (!re)
        {
          g_prefix_error (error, "--lora-target-modules: ");
          return FALSE;
        }
      cfg->target_regex = g_strdup (spec);
      return TRUE;
    }
  g_auto (GStrv) parts = g_strsplit (spec, ",", -1);
  GPtrArray *names = g_ptr_array_new ();
  for (char **p = parts; *p; p++)
    {
      g_strstrip (*p);
      if (**p)
        g_ptr_array_add (names, g_strdup (*p));
    }
  g_ptr_array_add (names, NULL);
  cfg->target_modules = (char **) g_ptr_array_free (names, FALSE);
  if (!cfg->target_modules[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--lora-target-modules '%s' names no module", spec);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_lora_config_matches (const HnLoraConfig *cfg, const char *path)
{
  if (cfg->all_linear)
    {
      /* PEFT: every Linear but the output layer. */
      return !g_str_has_suffix (path, "lm_head") && !g_str_equal (path, "lm_head");
    }
  if (cfg->target_regex)
    {
      g_autofree char *anchored = g_strdup_printf ("^(?:%s)$", cfg->target_regex);
      return g_regex_match_simple (anchored, path, 0, 0);
    }
  for (char **t = cfg->target_modules; t && *t; t++)
    {
      if (g_str_equal (path, *t))
        return TRUE;
      gsize lp = strlen (path), lt = strlen (*t);
      if (lp > lt && path[lp - lt - 1] == '.' && strcmp (path + lp - lt, *t) == 0)
        return TRUE;
    }
  return FALSE;
}

static gboolean
reject_if (JsonObject *o, const char *field, gboolean bad, GError **error)
{
  if (bad)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "adapter_config.json: '%s' is set; this PEFT feature is not supported",
                   field);
      return FALSE;
    }
  return TRUE;
}

static gboolean
is_set (JsonObject *o, const char *field)
{
  if (!json_object_has_member (o, field))
    return FALSE;
  JsonNode *n = json_object_get_member (o, field);
  if (JSON_NODE_HOLDS_NULL (n))
    return FALSE;
  if (JSON_NODE_HOLDS_OBJECT (n))
    return json_object_get_size (json_node_get_object (n)) > 0;
  if (JSON_NODE_HOLDS_ARRAY (n))
    return json_array_get_length (json_node_get_array (n)) > 0;
  if (JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
    return json_node_get_boolean (n);
  return TRUE;
}

gboolean
hn_lora_config_load (HnLoraConfig *cfg, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename (dir, "adapter_config.json", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_autoptr (GError) local = NULL;
  if (!hn_file_read_bounded (path, HN_MAX_CONFIG_BYTES, "adapter config", &text, &len, &local))
    {
      g_set_error (error, HN_ERROR, g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND : HN_ERROR_IO,
                   "%s: not a LoRA adapter folder: %s", dir, local->message);
      return FALSE;
    }
  g_autoptr (JsonParser) parser = json_parser_new ();
  if (!hn_json_parser_load (parser, text, (gssize) len, path, error))
    return FALSE;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a JSON object", path);
      return FALSE;
    }
  JsonObject *o = json_node_get_object (root);
  hn_lora_config_clear (cfg);
  hn_lora_config_init (cfg);
  const char *ptype = json_object_get_string_member_with_default (o, "peft_type", "");
  if (g_strcmp0 (ptype, "LORA") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: peft_type '%s' is not LORA", path, ptype);
      return FALSE;
    }
  gint64 r = 0;
  double alpha = 0, dropout = 0;
  if (!json_object_has_member (o, "r") || !hn_json_node_get_int (json_object_get_member (o, "r"), &r) || r < 1 ||
      r > 65536)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'r' must be a positive integer", path);
      return FALSE;
    }
  if (!json_object_has_member (o, "lora_alpha") ||
      !hn_json_node_get_double (json_object_get_member (o, "lora_alpha"), &alpha) || !(alpha > 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'lora_alpha' must be a positive number", path);
      return FALSE;
    }
  if (json_object_has_member (o, "lora_dropout") &&
      !hn_json_node_get_double (json_object_get_member (o, "lora_dropout"), &dropout))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: 'lora_dropout' must be a number", path);
      return FALSE;
    }
  cfg->r = (int) r;
  cfg->alpha = alpha;
  cfg->dropout = dropout;
  cfg->use_rslora = json_object_get_boolean_member_with_default (o, "use_rslora", FALSE);
  cfg->fan_in_fan_out = json_object_get_boolean_member_with_default (o, "fan_in_fan_out", FALSE);
  const char *bias = json_object_get_string_member_with_default (o, "bias", "none");
  if (!reject_if (o, "bias", g_strcmp0 (bias, "none") != 0, error) ||
      !reject_if (o, "use_dora", is_set (o, "use_dora"), error) ||
      !reject_if (o, "lora_bias", is_set (o, "lora_bias"), error) ||
      !reject_if (o, "rank_pattern", is_set (o, "rank_pattern"), error) ||
      !reject_if (o, "alpha_pattern", is_set (o, "alpha_pattern"), error) ||
      !reject_if (o, "modules_to_save", is_set (o, "modules_to_save"), error) ||
      !reject_if (o, "layers_to_transform", is_set (o, "layers_to_transform"), error) ||
      !reject_if (o, "exclude_modules", is_set (o, "exclude_modules"), error) ||
      !reject_if (o, "trainable_token_indices", is_set (o, "trainable_token_indices"), error) ||
      !reject_if (o, "layer_replication", is_set (o, "layer_replication"), error) ||
      !reject_if (o, "target_parameters", is_set (o, "target_parameters"), error))
    {
      g_prefix_error (error, "%s: ", path);
      return FALSE;
    }
  JsonNode *tm = json_object_get_member (o, "target_modules");
  g_clear_pointer (&cfg->target_modules, g_strfreev);
  if (tm && JSON_NODE_HOLDS_ARRAY (tm))
    {
      JsonArray *a = json_node_get_array (tm);
      GPtrArray *names = g_ptr_array_new ();
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
            {
              g_ptr_array_free (names, TRUE);
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: target_modules[%u] is not a string", path, i);
              return FALSE;
            }
          g_ptr_array_add (names, g_strdup (json_node_get_string (e)));
        }
      g_ptr_array_add (names, NULL);
      cfg->target_modules = (char **) g_ptr_array_free (names, FALSE);
    }
  else if (tm && JSON_NODE_HOLDS_VALUE (tm) && json_node_get_value_type (tm) == G_TYPE_STRING)
    {
      const char *s = json_node_get_string (tm);
      if (g_str_equal (s, "all-linear"))
        cfg->all_linear = TRUE;
      else
        cfg->target_regex = g_strdup (s);
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: target_modules must be a list or a string", path);
      return FALSE;
    }
  const char *base = json_object_get_string_member_with_default (o, "base_model_name_or_path", NULL);
  cfg->base_model_name_or_path = g_strdup (base);
  g_free (cfg->task_type);
  cfg->task_type = g_strdup (json_object_get_string_member_with_default (o, "task_type", "CAUSAL_LM"));
  return TRUE;
}

static char *
config_to_json (const HnLoraConfig *cfg)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "alpha_pattern");
  json_builder_begin_object (b);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "base_model_name_or_path");
  if (cfg->base_model_name_or_path)
    json_builder_add_string_value (b, cfg->base_model_name_or_path);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "bias");
  json_builder_add_string_value (b, "none");
  json_builder_set_member_name (b, "fan_in_fan_out");
  json_builder_add_boolean_value (b, cfg->fan_in_fan_out);
  json_builder_set_member_name (b, "inference_mode");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_set_member_name (b, "init_lora_weights");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_set_member_name (b, "layers_pattern");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "layers_to_transform");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "lora_alpha");
  if (cfg->alpha == floor (cfg->alpha))
    json_builder_add_int_value (b, (gint64) cfg->alpha);
  else
    json_builder_add_double_value (b, cfg->alpha);
  json_builder_set_member_name (b, "lora_dropout");
  /* json-glib 1.6 prints small doubles as "1e-05.0" (not JSON): round to a
   * value it prints plainly */
  json_builder_add_double_value (b, cfg->dropout < 1e-4 ? 0.0 : round (cfg->dropout * 1e6) / 1e6);
  json_builder_set_member_name (b, "modules_to_save");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "peft_type");
  json_builder_add_string_value (b, "LORA");
  json_builder_set_member_name (b, "r");
  json_builder_add_int_value (b, cfg->r);
  json_builder_set_member_name (b, "rank_pattern");
  json_builder_begin_object (b);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "revision");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "target_modules");
  if (cfg->all_linear)
    json_builder_add_string_value (b, "all-linear");
  else if (cfg->target_regex)
    json_builder_add_string_value (b, cfg->target_regex);
  else
    {
      json_builder_begin_array (b);
      for (char **t = cfg->target_modules; t && *t; t++)
        json_builder_add_string_value (b, *t);
      json_builder_end_array (b);
    }
  json_builder_set_member_name (b, "task_type");
  json_builder_add_string_value (b, cfg->task_type ? cfg->task_type : "CAUSAL_LM");
  json_builder_set_member_name (b, "use_dora");
  json_builder_add_boolean_value (b, FALSE);
  json_builder_set_member_name (b, "use_rslora");
  json_builder_add_boolean_value (b, cfg->use_rslora);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_indent (gen, 2);
  return json_generator_to_data (gen, NULL);
}

static void
module_free (gpointer p)
{
  HnLoraModule *m = p;
  g_free (m->module);
  g_free (m->a);
  g_free (m->b);
  g_free (m);
}

HnLoraAdapter *
hn_lora_adapter_new (const HnLoraConfig *config)
{
  HnLoraAdapter *ad = g_new0 (HnLoraAdapter, 1);
  hn_lora_config_init (&ad->config);
  ad->config.r = config->r;
  ad->config.alpha = config->alpha;
  ad->config.dropout = config->dropout;
  ad->config.use_rslora = config->use_rslora;
  ad->config.fan_in_fan_out = config->fan_in_fan_out;
  ad->config.all_linear = config->all_linear;
  g_strfreev (ad->config.target_modules);
  ad->config.target_modules = g_strdupv (config->target_modules);
  ad->config.target_regex = g_strdup (config->target_regex);
  ad->config.base_model_name_or_path = g_strdup (config->base_model_name_or_path);
  g_free (ad->config.task_type);
  ad->config.task_type = g_strdup (config->task_type);
  ad->modules = g_ptr_array_new_with_free_func (module_free);
  return ad;
}

void
hn_lora_adapter_free (HnLoraAdapter *ad)
{
  if (!ad)
    return;
  hn_lora_config_clear (&ad->config);
  g_ptr_array_unref (ad->modules);
  g_free (ad);
}

static gint
module_cmp (gconstpointer a, gconstpointer b)
{
  const HnLoraModule *ma = *(HnLoraModule *const *) a, *mb = *(HnLoraModule *const *) b;
  return strcmp (ma->module, mb->module);
}

HnLoraModule *
hn_lora_adapter_lookup (HnLoraAdapter *ad, const char *module)
{
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = g_ptr_array_index (ad->modules, i);
      if (g_str_equal (m->module, module))
        return m;
    }
  return NULL;
}

HnLoraModule *
hn_lora_adapter_add (HnLoraAdapter *ad, const char *module, int in, int out, guint64 seed)
{
  HnLoraModule *m = g_new0 (HnLoraModule, 1);
  int r = ad->config.r;
  m->module = g_strdup (module);
  m->in = in;
  m->out = out;
  m->r = r;
  m->a = g_new (float, (gsize) r * in);
  m->b = g_new0 (float, (gsize) out * r);
  /* kaiming_uniform_(a=sqrt(5)) on [r, in]: bound = gain·sqrt(3/fan_in) with
   * gain = sqrt(2/(1+5)), i.e. 1/sqrt(in). The stream mixes the module path so
   * each module differs under one seed. */
  float bound = 1.0f / sqrtf ((float) in);
  guint32 stream = g_str_hash (module);
  for (gsize i = 0; i < (gsize) r * in; i++)
    {
      float u = (float) (hn_rng_u32 ((guint32) seed ^ (guint32) (seed >> 32), stream, (guint32) i) >> 8) *
                (1.0f / 16777216.0f);
      m->a[i] = (2.0f * u - 1.0f) * bound;
    }
  g_ptr_array_add (ad->modules, m);
  g_ptr_array_sort (ad->modules, module_cmp);
  return m;
}

char *
hn_lora_tensor_name (const char *module, gboolean is_b)
{
  return g_strdup_printf (PEFT_PREFIX "%s.%s.weight", module, is_b ? "lora_B" : "lora_A");
}

HnLoraAdapter *
hn_lora_adapter_load (const char *dir, GError **error)
{
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  if (!hn_lora_config_load (&cfg, dir, error))
    {
      hn_lora_config_clear (&cfg);
      return NULL;
    }
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_new (&cfg);
  hn_lora_config_clear (&cfg);
  g_autofree char *path = g_build_filename (dir, "adapter_model.safetensors", NULL);
  if (!g_file_test (path, G_FILE_TEST_EXISTS))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: no adapter_model.safetensors (a .bin adapter is not supported)",
                   dir);
      return NULL;
    }
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, error);
  if (!st)
    return NULL;
  guint n = hn_safetensors_get_n_tensors (st);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      const char *name = t->name;
      if (!g_str_has_prefix (name, PEFT_PREFIX))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s is not a PEFT LoRA tensor (%s...)", path, name,
                       PEFT_PREFIX);
          return NULL;
        }
      const char *rest = name + strlen (PEFT_PREFIX);
      const char *kind = NULL;
      gboolean is_b = FALSE;
      const char *suffixes[4] = { ".lora_A.weight", ".lora_B.weight", ".lora_A.default.weight", ".lora_B.default.weight" };
      gsize cut = 0;
      for (int s = 0; s < 4; s++)
        if (g_str_has_suffix (rest, suffixes[s]))
          {
            kind = suffixes[s];
            is_b = (s % 2) == 1;
            cut = strlen (rest) - strlen (suffixes[s]);
            break;
          }
      if (!kind || t->ndim != 2)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor %s is not a 2-D lora_A/lora_B weight", path,
                       name);
          return NULL;
        }
      g_autofree char *module = g_strndup (rest, cut);
      HnLoraModule *m = hn_lora_adapter_lookup (ad, module);
      if (!m)
        {
          m = g_new0 (HnLoraModule, 1);
          m->module = g_strdup (module);
          m->r = ad->config.r;
          m->in = m->out = -1;
          g_ptr_array_add (ad->modules, m);
        }
      int rows = (int) t->shape[0], cols = (int) t->shape[1];
      if ((is_b ? cols : rows) != ad->config.r || (is_b ? m->b : m->a))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s has shape [%d, %d]: rank %d expected%s", path,
                       name, rows, cols, ad->config.r, (is_b ? m->b : m->a) ? " (or it is duplicated)" : "");
          return NULL;
        }
      float *data = hn_safetensor_info_dup_f32 (t, error);
      if (!data)
        return NULL;
      /* NaN or Inf weights would merge into every output of the module */
      for (gint64 e = 0; e < (gint64) rows * cols; e++)
        if (!isfinite (data[e]))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "%s: tensor %s holds a non-finite value (%g at element %"
                         G_GINT64_FORMAT "): the adapter is corrupt", path, name, (double) data[e], e);
            g_free (data);
            return NULL;
          }
      if (is_b)
        {
          m->b = data;
          m->out = rows;
        }
      else
        {
          m->a = data;
          m->in = cols;
        }
    }
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = g_ptr_array_index (ad->modules, i);
      if (!m->a || !m->b)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: module %s has lora_%s but not lora_%s", path, m->module,
                       m->a ? "A" : "B", m->a ? "B" : "A");
          return NULL;
        }
    }
  if (ad->modules->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: no LoRA tensors", path);
      return NULL;
    }
  /* PEFT puts LoRA layers only on the modules target_modules names and drops
   * the tensors of any other: an adapter whose tensors are outside its own
   * target_modules is inconsistent, and applying it (or not) would differ
   * from what PEFT does */
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = g_ptr_array_index (ad->modules, i);
      if (!hn_lora_config_matches (&ad->config, m->module))
        {
          g_autofree char *targets = ad->config.all_linear ? g_strdup ("all-linear")
                                     : ad->config.target_regex ? g_strdup (ad->config.target_regex)
                                     : g_strjoinv (", ", ad->config.target_modules);
          guint n_match = 0;
          for (guint j = 0; j < ad->modules->len; j++)
            n_match += hn_lora_config_matches (&ad->config, ((HnLoraModule *) ad->modules->pdata[j])->module);
          if (n_match == 0)
            g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                         "%s/adapter_config.json: target_modules (%s) match none of the adapter's %u modules (such as %s)",
                         dir, targets, ad->modules->len, m->module);
          else
            g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                         "%s/adapter_config.json: the adapter has tensors for %s, which target_modules (%s) does not name",
                         dir, m->module, targets);
          return NULL;
        }
    }
  g_ptr_array_sort (ad->modules, module_cmp);
  return g_steal_pointer (&ad);
}

gboolean
hn_lora_adapter_save (HnLoraAdapter *ad, const char *dir, GError **error)
{
  if (!hn_mkdir_p (dir, error))
    return FALSE;
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = g_ptr_array_index (ad->modules, i);
      g_autofree char *na = hn_lora_tensor_name (m->module, FALSE), *nb = hn_lora_tensor_name (m->module, TRUE);
      gint64 sa[2] = { m->r, m->in }, sb[2] = { m->out, m->r };
      if (!hn_safetensors_writer_add (w, na, HN_ST_DTYPE_F32, 2, sa, m->a, sizeof (float) * m->r * m->in, TRUE, error) ||
          !hn_safetensors_writer_add (w, nb, HN_ST_DTYPE_F32, 2, sb, m->b, sizeof (float) * m->out * m->r, TRUE, error))
        return FALSE;
    }
  g_autofree char *st_path = g_build_filename (dir, "adapter_model.safetensors", NULL);
  if (!hn_safetensors_writer_write_file (w, st_path, error))
    return FALSE;
  g_autofree char *json = config_to_json (&ad->config);
  g_autofree char *cfg_path = g_build_filename (dir, "adapter_config.json", NULL);
  return hn_write_file_atomic (cfg_path, json, strlen (json), error);
}

gboolean
hn_model_copy_side_files (const char *src_dir, const char *dst_dir, GError **error)
{
  static const char *const files[] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", NULL };
  if (!hn_mkdir_p (dst_dir, error))
    return FALSE;
  for (int i = 0; files[i]; i++)
    {
      g_autofree char *src = g_build_filename (src_dir, files[i], NULL);
      if (!g_file_test (src, G_FILE_TEST_IS_REGULAR))
        continue;
      g_autofree char *data = NULL;
      gsize len = 0;
      if (!g_file_get_contents (src, &data, &len, error))
        return FALSE;
      g_autofree char *dst = g_build_filename (dst_dir, files[i], NULL);
      if (!hn_write_file_atomic (dst, data, len, error))
        return FALSE;
    }
  return TRUE;
}

/* merge-lora never writes a non-finite weight: it names the tensor instead */
static gboolean
check_finite (const char *what, const char *name, HnStDtype dtype, const void *data, gsize n, GError **error)
{
  gint64 bad = hn_st_first_nonfinite (dtype, data, n);
  if (bad < 0)
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "%s: tensor %s would hold a non-finite value (NaN or Inf at element %"
               G_GINT64_FORMAT "); nothing was written", what, name, bad);
  return FALSE;
}

gboolean
hn_lora_merge_model (const char *model_dir, const char *adapter_dir, const char *out_dir, GError **error)
{
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (adapter_dir, error);
  if (!ad)
    return FALSE;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  if (!st)
    return FALSE;
  double scaling = hn_lora_config_scaling (&ad->config);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  g_autoptr (GHashTable) used = g_hash_table_new (g_str_hash, g_str_equal);
  guint n = hn_safetensors_get_n_tensors (st);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      HnLoraModule *m = NULL;
      if (g_str_has_suffix (t->name, ".weight"))
        {
          g_autofree char *module = g_strndup (t->name, strlen (t->name) - strlen (".weight"));
          m = hn_lora_adapter_lookup (ad, module);
          if (!m && !g_str_has_prefix (module, "model."))
            {
              /* a bare base model saved without its "model." prefix */
              g_autofree char *prefixed = g_strconcat ("model.", module, NULL);
              m = hn_lora_adapter_lookup (ad, prefixed);
            }
        }
      if (!m)
        {
          g_autofree char *what = g_strdup_printf ("%s (the base model)", model_dir);
          if (!check_finite (what, t->name, t->dtype, t->data, (gsize) t->n_elements, error) ||
              !hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE, error))
            return FALSE;
          continue;
        }
      g_hash_table_add (used, m->module);
      /* A Conv1D weight is stored [in, out]; a square one cannot tell, so the
       * adapter's fan_in_fan_out decides (PEFT sets it for Conv1D). */
      gboolean conv1d = m->in != m->out ? (t->ndim == 2 && t->shape[0] == m->in && t->shape[1] == m->out)
                                        : ad->config.fan_in_fan_out;
      if (t->ndim != 2 || (conv1d ? (t->shape[0] != m->in || t->shape[1] != m->out)
                                  : (t->shape[0] != m->out || t->shape[1] != m->in)))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "%s: weight %s does not fit the adapter's %s (in %d, out %d)", model_dir, t->name, m->module, m->in,
                       m->out);
          return FALSE;
        }
      g_autofree float *wf = hn_safetensor_info_dup_f32 (t, error);
      if (!wf)
        return FALSE;
      for (int o = 0; o < m->out; o++)
        for (int k = 0; k < m->in; k++)
          {
            double d = 0;
            for (int r = 0; r < m->r; r++)
              d += (double) m->b[(gsize) o * m->r + r] * m->a[(gsize) r * m->in + k];
            gsize idx = conv1d ? (gsize) k * m->out + o : (gsize) o * m->in + k;
            wf[idx] += (float) (scaling * d);
          }
      gsize ne = (gsize) t->n_elements;
      g_autofree char *merged = g_strdup_printf ("merging %s into %s", adapter_dir, model_dir);
      if (!check_finite (merged, t->name, HN_ST_DTYPE_F32, wf, ne, error))
        return FALSE;
      if (t->dtype == HN_ST_DTYPE_F32)
        {
          if (!hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, wf, ne * 4, TRUE, error))
            return FALSE;
        }
      else if (t->dtype == HN_ST_DTYPE_F16 || t->dtype == HN_ST_DTYPE_BF16)
        {
          g_autofree guint16 *h = g_new (guint16, ne);
          for (gsize e = 0; e < ne; e++)
            h[e] = t->dtype == HN_ST_DTYPE_F16 ? hn_st_f32_to_f16 (wf[e]) : hn_st_f32_to_bf16 (wf[e]);
          /* a sum past the half-precision range rounds to Inf */
          if (!check_finite (merged, t->name, t->dtype, h, ne, error))
            return FALSE;
          if (!hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, h, ne * 2, TRUE, error))
            return FALSE;
        }
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: cannot merge into %s of dtype %s", model_dir,
                       t->name, hn_st_dtype_name (t->dtype));
          return FALSE;
        }
    }
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *m = g_ptr_array_index (ad->modules, i);
      if (!g_hash_table_contains (used, m->module))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: the model has no weight %s.weight for the adapter",
                       model_dir, m->module);
          return FALSE;
        }
    }
  if (!hn_model_copy_side_files (model_dir, out_dir, error))
    return FALSE;
  return hn_safetensors_writer_write_dir (w, out_dir, "model", 0, error);
}

/* ---------------------------------------------------------------- on a loaded model */

gboolean
hn_lora_module_map (const HnTransformerHParams *hp, const char **prefix, const HnLoraModuleMap **map, guint *n_map,
                    GError **error)
{
  static const HnLoraModuleMap llama[] = {
    { "self_attn.q_proj", 1, { HN_LORA_PROJ_Q } }, { "self_attn.k_proj", 1, { HN_LORA_PROJ_K } },
    { "self_attn.v_proj", 1, { HN_LORA_PROJ_V } }, { "self_attn.o_proj", 1, { HN_LORA_PROJ_O } },
    { "mlp.gate_proj", 1, { HN_LORA_PROJ_GATE } }, { "mlp.up_proj", 1, { HN_LORA_PROJ_UP } },
    { "mlp.down_proj", 1, { HN_LORA_PROJ_DOWN } },
  };
  static const HnLoraModuleMap phi3[] = {
    { "self_attn.qkv_proj", 3, { HN_LORA_PROJ_Q, HN_LORA_PROJ_K, HN_LORA_PROJ_V } },
    { "self_attn.o_proj", 1, { HN_LORA_PROJ_O } }, { "mlp.gate_up_proj", 1, { HN_LORA_PROJ_GATE } },
    { "mlp.down_proj", 1, { HN_LORA_PROJ_DOWN } },
  };
  static const HnLoraModuleMap gpt2[] = {
    { "attn.c_attn", 3, { HN_LORA_PROJ_Q, HN_LORA_PROJ_K, HN_LORA_PROJ_V } },
    { "attn.c_proj", 1, { HN_LORA_PROJ_O } }, { "mlp.c_fc", 1, { HN_LORA_PROJ_UP } },
    { "mlp.c_proj", 1, { HN_LORA_PROJ_DOWN } },
  };
  if (hp->layer_src)
    {
      /* module paths count the checkpoint's layers, which the graph does not all run (mllama) */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "LoRA: %s runs only some of its checkpoint's layers (its cross-attention layers are skipped on "
                   "text alone); adapters are not mapped onto it yet", hp->arch->model_type);
      return FALSE;
    }
  if (hp->attn_gate_per_head || hp->final_norm_plain)
    {
      /* their attention gates and step3p5's stacked experts have no adapter sites here */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "LoRA: adapters for %s are not mapped yet",
                   hp->arch->model_type);
      return FALSE;
    }
  switch (hp->arch->names)
    {
    case HN_NAMES_LLAMA:
      *prefix = "model.layers.";
      *map = llama;
      *n_map = G_N_ELEMENTS (llama);
      return TRUE;
    case HN_NAMES_PHI3:
      *prefix = "model.layers.";
      *map = phi3;
      *n_map = G_N_ELEMENTS (phi3);
      return TRUE;
    case HN_NAMES_GPT2:
      *prefix = "transformer.h.";
      *map = gpt2;
      *n_map = G_N_ELEMENTS (gpt2);
      return TRUE;
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "LoRA: module names of the %s family are not mapped yet",
                   hp->arch->model_type);
      return FALSE;
    }
}

HnTensor *
hn_lora_proj_weight (const HnLayerWeights *lw, HnLoraProj p)
{
  switch (p)
    {
    case HN_LORA_PROJ_Q: return lw->wq;
    case HN_LORA_PROJ_K: return lw->wk;
    case HN_LORA_PROJ_V: return lw->wv;
    case HN_LORA_PROJ_O: return lw->wo;
    case HN_LORA_PROJ_GATE: return lw->w_gate;
    case HN_LORA_PROJ_UP: return lw->w_up;
    case HN_LORA_PROJ_DOWN: return lw->w_down;
    default: return NULL;
    }
}

gboolean
hn_lora_attach (HnTransformer *model, HnLoraAdapter *ad, GError **error)
{
  if (!hn_transformer_require_whole (model, "attaching a LoRA adapter", error))
    return FALSE;
  const HnTransformerHParams *hp = hn_transformer_get_hparams (model);
  const HnTransformerWeights *W = hn_transformer_get_weights (model);
  const char *prefix;
  const HnLoraModuleMap *map;
  guint n_map;
  if (!hn_lora_module_map (hp, &prefix, &map, &n_map, error))
    return FALSE;
  double scaling = hn_lora_config_scaling (&ad->config);
  guint used = 0;
  for (int il = 0; il < hp->n_layer; il++)
    for (guint mi = 0; mi < n_map; mi++)
      {
        g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
        HnLoraModule *m = hn_lora_adapter_lookup (ad, path);
        if (!m)
          continue;
        used++;
        const HnLayerWeights *lw = &W->layers[il];
        gint64 row0 = 0;
        for (int k = 0; k < map[mi].n; k++)
          {
            HnTensor *w = hn_lora_proj_weight (lw, map[mi].proj[k]);
            if (!w || w->shape[1] != m->in || row0 + w->shape[0] > m->out)
              {
                g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                             "LoRA: %s [in %d, out %d] does not fit the model's projection", path, m->in, m->out);
                return FALSE;
              }
            if (hn_dtype_is_ggml (w->dtype))
              {
                g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                             "LoRA: the adapter is merged into the weights at load, and %s is kept quantized (%s): "
                             "load a GGUF base with HN_GGUF_DEQUANTIZE=1 to merge it, or export the merged model "
                             "(export-gguf --lora-adapter-path)", w->name, hn_dtype_name (w->dtype));
                return FALSE;
              }
            gint64 rows = w->shape[0], in = w->shape[1];
            g_autofree float *buf = g_new (float, w->n);
            if (!hn_tensor_download_f32 (w, buf, w->n, error))
              return FALSE;
            for (gint64 o = 0; o < rows; o++)
              for (gint64 c = 0; c < in; c++)
                {
                  double d = 0;
                  for (int r = 0; r < m->r; r++)
                    d += (double) m->b[(row0 + o) * m->r + r] * m->a[(gsize) r * m->in + c];
                  buf[o * in + c] += (float) (scaling * d);
                }
            if (!hn_tensor_upload_f32 (w, buf, w->n, error))
              return FALSE;
            row0 += rows;
          }
        if (row0 != m->out)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "LoRA: %s has %d outputs, the model %" G_GINT64_FORMAT,
                         path, m->out, row0);
            return FALSE;
          }
      }
  if (used != ad->modules->len)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "LoRA: %u of the adapter's %u modules are not projections of this %s model", ad->modules->len - used,
                   ad->modules->len, hp->arch->model_type);
      return FALSE;
    }
  return TRUE;
}
