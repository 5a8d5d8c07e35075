#include "formats/gen-config.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/gguf-hf.h"

#include <math.h>
#include <string.h>

HnGenerationConfig *
hn_generation_config_new (void)
{
  HnGenerationConfig *g = g_new0 (HnGenerationConfig, 1);
  g->do_sample = -1;
  g->temperature = g->top_p = g->min_p = g->typical_p = NAN;
  g->epsilon_cutoff = g->eta_cutoff = g->repetition_penalty = g->length_penalty = NAN;
  g->top_k = g->no_repeat_ngram_size = g->min_new_tokens = g->max_new_tokens = -1;
  g->min_length = g->max_length = g->pad_token_id = g->bos_token_id = g->decoder_start_token_id = -1;
  g->num_beams = g->num_return_sequences = -1;
  g->early_stopping = HN_EARLY_STOPPING_UNSET;
  g->use_cache = -1;
  return g;
}

static GPtrArray *
copy_bad_words (const GPtrArray *src)
{
  if (!src)
    return NULL;
  GPtrArray *dst = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (guint i = 0; i < src->len; i++)
    {
      GArray *a = src->pdata[i];
      GArray *b = g_array_sized_new (FALSE, FALSE, sizeof (gint64), a->len);
      g_array_append_vals (b, a->data, a->len);
      g_ptr_array_add (dst, b);
    }
  return dst;
}

static gint64 *
dup_ids (const gint64 *ids, guint n)
{
  return n ? g_memdup2 (ids, n * sizeof (gint64)) : NULL;
}

HnGenerationConfig *
hn_generation_config_copy (const HnGenerationConfig *src)
{
  HnGenerationConfig *g = g_new (HnGenerationConfig, 1);
  *g = *src;
  g->bad_words_ids = copy_bad_words (src->bad_words_ids);
  g->suppress_tokens = dup_ids (src->suppress_tokens, src->n_suppress_tokens);
  g->begin_suppress_tokens = dup_ids (src->begin_suppress_tokens, src->n_begin_suppress_tokens);
  g->eos_token_ids = dup_ids (src->eos_token_ids, src->n_eos_token_ids);
  g->cache_implementation = g_strdup (src->cache_implementation);
  if (src->continuous_batching)
    json_object_ref (src->continuous_batching);
  return g;
}

void
hn_generation_config_free (HnGenerationConfig *g)
{
  if (!g)
    return;
  if (g->bad_words_ids)
    g_ptr_array_unref (g->bad_words_ids);
  g_free (g->suppress_tokens);
  g_free (g->begin_suppress_tokens);
  g_free (g->eos_token_ids);
  g_free (g->cache_implementation);
  g_clear_pointer (&g->continuous_batching, json_object_unref);
  g_free (g);
}

typedef struct {
  const char *file;
  JsonObject *o;
  GError *err;
} GCtx;

static JsonNode *
gmember (GCtx *c, const char *key)
{
  if (c->err)
    return NULL;
  JsonNode *n = json_object_get_member (c->o, key);
  return (n && !JSON_NODE_HOLDS_NULL (n)) ? n : NULL;
}

static void
gtype_error (GCtx *c, const char *key, const char *want)
{
  if (!c->err)
    g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT, "%s: \"%s\" must be %s", c->file, key, want);
}

static void
g_int (GCtx *c, const char *key, gint64 *out)
{
  JsonNode *n = gmember (c, key);
  if (n && !hn_json_node_get_int (n, out))
    gtype_error (c, key, "an integer");
}

/* A count or length: an integer in [min, G_MAXINT32] (the generator keeps
 * them as int); -1 is the "unset" value inside, so a negative one in the
 * file must not read as unset. */
static void
g_count (GCtx *c, const char *key, gint64 *out, gint64 min)
{
  JsonNode *n = gmember (c, key);
  gint64 v = 0;
  if (!n)
    return;
  if (!hn_json_node_get_int (n, &v))
    {
      gtype_error (c, key, "an integer");
      return;
    }
  if (v < min || v > G_MAXINT32)
    {
      g_set_error (&c->err, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: \"%s\" is %" G_GINT64_FORMAT ", out of range (it must be %" G_GINT64_FORMAT " to %d)", c->file,
                   key, v, min, G_MAXINT32);
      return;
    }
  *out = v;
}

static void
g_dbl (GCtx *c, const char *key, double *out)
{
  JsonNode *n = gmember (c, key);
  if (n && !hn_json_node_get_double (n, out))
    gtype_error (c, key, "a number");
}

static void
g_tri (GCtx *c, const char *key, int *out)
{
  JsonNode *n = gmember (c, key);
  gboolean b;
  if (!n)
    return;
  if (!hn_json_node_get_bool (n, &b))
    gtype_error (c, key, "true or false");
  else
    *out = b;
}

static gboolean
read_ids (GCtx *c, const char *key, gint64 **ids, guint *n_ids, gboolean allow_scalar)
{
  JsonNode *n = gmember (c, key);
  if (!n)
    return FALSE;
  gint64 v;
  g_clear_pointer (ids, g_free);
  *n_ids = 0;
  if (allow_scalar && hn_json_node_get_int (n, &v))
    {
      *ids = g_new (gint64, 1);
      (*ids)[0] = v;
      *n_ids = 1;
      return TRUE;
    }
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      gtype_error (c, key, allow_scalar ? "an integer or a list of integers" : "a list of integers");
      return FALSE;
    }
  JsonArray *a = json_node_get_array (n);
  guint len = json_array_get_length (a);
  *ids = len ? g_new (gint64, len) : NULL;
  for (guint i = 0; i < len; i++)
    if (!hn_json_node_get_int (json_array_get_element (a, i), &(*ids)[i]))
      {
        gtype_error (c, key, "a list of integers");
        g_clear_pointer (ids, g_free);
        return FALSE;
      }
  *n_ids = len;
  return TRUE;
}

static void
read_gen_fields (GCtx *c, HnGenerationConfig *g, gboolean ids_too)
{
  g_tri (c, "do_sample", &g->do_sample);
  g_dbl (c, "temperature", &g->temperature);
  g_count (c, "top_k", &g->top_k, 0);
  g_dbl (c, "top_p", &g->top_p);
  g_dbl (c, "min_p", &g->min_p);
  g_dbl (c, "typical_p", &g->typical_p);
  g_dbl (c, "epsilon_cutoff", &g->epsilon_cutoff);
  g_dbl (c, "eta_cutoff", &g->eta_cutoff);
  g_dbl (c, "repetition_penalty", &g->repetition_penalty);
  g_count (c, "no_repeat_ngram_size", &g->no_repeat_ngram_size, 0);
  g_count (c, "min_new_tokens", &g->min_new_tokens, 0);
  g_count (c, "max_new_tokens", &g->max_new_tokens, 1);
  g_count (c, "min_length", &g->min_length, 0);
  g_count (c, "max_length", &g->max_length, 1);
  g_count (c, "num_beams", &g->num_beams, 1);
  g_dbl (c, "length_penalty", &g->length_penalty);
  g_count (c, "num_return_sequences", &g->num_return_sequences, 1);
  g_tri (c, "use_cache", &g->use_cache);
  JsonNode *es = gmember (c, "early_stopping");
  if (es)
    {
      gboolean b;
      if (hn_json_node_get_bool (es, &b))
        g->early_stopping = b ? HN_EARLY_STOPPING_TRUE : HN_EARLY_STOPPING_FALSE;
      else if (JSON_NODE_HOLDS_VALUE (es) && json_node_get_value_type (es) == G_TYPE_STRING &&
               strcmp (json_node_get_string (es), "never") == 0)
        g->early_stopping = HN_EARLY_STOPPING_NEVER;
      else
        gtype_error (c, "early_stopping", "true, false or \"never\"");
    }
  JsonNode *ci = gmember (c, "cache_implementation");
  if (ci)
    {
      if (JSON_NODE_HOLDS_VALUE (ci) && json_node_get_value_type (ci) == G_TYPE_STRING)
        {
          g_free (g->cache_implementation);
          g->cache_implementation = g_strdup (json_node_get_string (ci));
        }
      else
        gtype_error (c, "cache_implementation", "a string");
    }
  JsonNode *cb = gmember (c, "continuous_batching_config");
  if (cb)
    {
      if (JSON_NODE_HOLDS_OBJECT (cb))
        {
          g_clear_pointer (&g->continuous_batching, json_object_unref);
          g->continuous_batching = json_object_ref (json_node_get_object (cb));
        }
      else
        gtype_error (c, "continuous_batching_config", "an object");
    }
  if (read_ids (c, "suppress_tokens", &g->suppress_tokens, &g->n_suppress_tokens, FALSE))
    g->suppress_tokens_set = TRUE;
  if (read_ids (c, "begin_suppress_tokens", &g->begin_suppress_tokens, &g->n_begin_suppress_tokens, FALSE))
    g->begin_suppress_tokens_set = TRUE;
  JsonNode *bw = gmember (c, "bad_words_ids");
  if (bw)
    {
      if (!JSON_NODE_HOLDS_ARRAY (bw))
        gtype_error (c, "bad_words_ids", "a list of lists of integers");
      else
        {
          JsonArray *a = json_node_get_array (bw);
          g_autoptr (GPtrArray) lists = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
          for (guint i = 0; i < json_array_get_length (a) && !c->err; i++)
            {
              JsonNode *e = json_array_get_element (a, i);
              if (!JSON_NODE_HOLDS_ARRAY (e) || json_array_get_length (json_node_get_array (e)) == 0)
                {
                  gtype_error (c, "bad_words_ids", "a list of non-empty lists of integers");
                  break;
                }
              JsonArray *ea = json_node_get_array (e);
              GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint64));
              g_ptr_array_add (lists, ids);
              for (guint j = 0; j < json_array_get_length (ea); j++)
                {
                  gint64 v;
                  if (!hn_json_node_get_int (json_array_get_element (ea, j), &v))
                    {
                      gtype_error (c, "bad_words_ids", "a list of lists of integers");
                      break;
                    }
                  g_array_append_val (ids, v);
                }
            }
          if (!c->err)
            {
              if (g->bad_words_ids)
                g_ptr_array_unref (g->bad_words_ids);
              g->bad_words_ids = g_steal_pointer (&lists);
            }
        }
    }
  if (ids_too)
    {
      if (read_ids (c, "eos_token_id", &g->eos_token_ids, &g->n_eos_token_ids, TRUE))
        g->eos_token_ids_set = TRUE;
      g_int (c, "pad_token_id", &g->pad_token_id);
      g_int (c, "bos_token_id", &g->bos_token_id);
      g_int (c, "decoder_start_token_id", &g->decoder_start_token_id);
    }
}

HnGenerationConfig *
hn_generation_config_load_from_data (const char *data, gssize len, const char *name, GError **error)
{
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  if (!hn_json_parser_load (parser, data, len, name, error))
    return NULL;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a JSON object", name);
      return NULL;
    }
  g_autoptr (HnGenerationConfig) g = hn_generation_config_new ();
  GCtx c = { name, json_node_get_object (root), NULL };
  read_gen_fields (&c, g, TRUE);
  if (c.err)
    {
      g_propagate_error (error, c.err);
      return NULL;
    }
  return g_steal_pointer (&g);
}

HnGenerationConfig *
hn_generation_config_load (const char *path, GError **error)
{
  /* A GGUF has no generation_config.json: the caller's defaults apply. */
  g_autofree char *gguf = hn_gguf_resolve_path (path);
  if (gguf)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: a GGUF model has no generation config", gguf);
      return NULL;
    }
  g_autofree char *file = g_file_test (path, G_FILE_TEST_IS_DIR)
                            ? g_build_filename (path, "generation_config.json", NULL)
                            : g_strdup (path);
  g_autofree char *data = NULL;
  gsize len;
  if (!hn_file_read_bounded (file, HN_MAX_CONFIG_BYTES, "generation config", &data, &len, error))
    return NULL;
  return hn_generation_config_load_from_data (data, (gssize) len, file, error);
}

HnGenerationConfig *
hn_generation_config_from_model_config (const HnModelConfig *mc)
{
  HnGenerationConfig *g = hn_generation_config_new ();
  /* Generation keys in config.json are a 4.x habit; a wrong type there is
   * ignored rather than failing a model that transformers would load. */
  GCtx c = { mc->path, hn_model_config_get_raw (mc), NULL };
  read_gen_fields (&c, g, FALSE);
  if (c.err)
    {
      g_debug ("ignoring generation keys in %s: %s", mc->path, c.err->message);
      g_clear_error (&c.err);
      hn_generation_config_free (g);
      g = hn_generation_config_new ();
    }
  if (mc->n_eos_token_ids > 0)
    {
      g->eos_token_ids = dup_ids (mc->eos_token_ids, mc->n_eos_token_ids);
      g->n_eos_token_ids = mc->n_eos_token_ids;
      g->eos_token_ids_set = TRUE;
    }
  g->bos_token_id = mc->bos_token_id;
  g->pad_token_id = mc->pad_token_id;
  g->decoder_start_token_id = mc->decoder_start_token_id;
  return g;
}

void
hn_generation_config_merge (HnGenerationConfig *dst, const HnGenerationConfig *src)
{
#define M_INT(f) if (src->f >= 0) dst->f = src->f
#define M_DBL(f) if (!isnan (src->f)) dst->f = src->f
  M_INT (do_sample);
  M_DBL (temperature);
  M_INT (top_k);
  M_DBL (top_p);
  M_DBL (min_p);
  M_DBL (typical_p);
  M_DBL (epsilon_cutoff);
  M_DBL (eta_cutoff);
  M_DBL (repetition_penalty);
  M_INT (no_repeat_ngram_size);
  M_INT (min_new_tokens);
  M_INT (max_new_tokens);
  M_INT (min_length);
  M_INT (max_length);
  /* -1 is "unset" (and LLaMA's "none"); another negative id is carried so
   * generation can warn that it ignores it (hn_generate_options_drop_outside_vocab) */
  if (src->pad_token_id != -1)
    dst->pad_token_id = src->pad_token_id;
  M_INT (bos_token_id);
  M_INT (decoder_start_token_id);
  M_INT (num_beams);
  M_DBL (length_penalty);
  M_INT (num_return_sequences);
  M_INT (use_cache);
#undef M_INT
#undef M_DBL
  if (src->early_stopping != HN_EARLY_STOPPING_UNSET)
    dst->early_stopping = src->early_stopping;
  if (src->cache_implementation)
    {
      g_free (dst->cache_implementation);
      dst->cache_implementation = g_strdup (src->cache_implementation);
    }
  if (src->continuous_batching)
    {
      g_clear_pointer (&dst->continuous_batching, json_object_unref);
      dst->continuous_batching = json_object_ref (src->continuous_batching);
    }
  if (src->bad_words_ids)
    {
      if (dst->bad_words_ids)
        g_ptr_array_unref (dst->bad_words_ids);
      dst->bad_words_ids = copy_bad_words (src->bad_words_ids);
    }
#define M_IDS(f, n, set)                                                                           \
  if (src->set)                                                                                    \
    {                                                                                              \
      g_free (dst->f);                                                                             \
      dst->f = dup_ids (src->f, src->n);                                                           \
      dst->n = src->n;                                                                             \
      dst->set = TRUE;                                                                             \
    }
  M_IDS (suppress_tokens, n_suppress_tokens, suppress_tokens_set)
  M_IDS (begin_suppress_tokens, n_begin_suppress_tokens, begin_suppress_tokens_set)
  M_IDS (eos_token_ids, n_eos_token_ids, eos_token_ids_set)
#undef M_IDS
}

void
hn_generation_config_apply_defaults (HnGenerationConfig *g)
{
#define D_INT(f, v) if (g->f < 0) g->f = (v)
#define D_DBL(f, v) if (isnan (g->f)) g->f = (v)
  D_INT (do_sample, 0);
  D_DBL (temperature, 1.0);
  D_INT (top_k, 50);
  D_DBL (top_p, 1.0);
  D_DBL (min_p, 0.0);
  D_DBL (typical_p, 1.0);
  D_DBL (epsilon_cutoff, 0.0);
  D_DBL (eta_cutoff, 0.0);
  D_DBL (repetition_penalty, 1.0);
  D_INT (no_repeat_ngram_size, 0);
  D_INT (min_new_tokens, 0);
  D_INT (min_length, 0);
  D_INT (max_length, 20);
  D_INT (num_beams, 1);
  D_DBL (length_penalty, 1.0);
  D_INT (num_return_sequences, 1);
  D_INT (use_cache, 1);
#undef D_INT
#undef D_DBL
  if (g->early_stopping == HN_EARLY_STOPPING_UNSET)
    g->early_stopping = HN_EARLY_STOPPING_FALSE;
}

gboolean
hn_generation_config_validate (const HnGenerationConfig *g, GError **error)
{
#define BAD(...)                                                                                   \
  do                                                                                               \
    {                                                                                              \
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, __VA_ARGS__);                       \
      return FALSE;                                                                                \
    }                                                                                              \
  while (0)
  if (!isnan (g->temperature) && !(g->temperature >= 0 && isfinite (g->temperature)))
    BAD ("temperature %g is out of range (must be >= 0)", g->temperature);
  if (!isnan (g->top_p) && !(g->top_p > 0 && g->top_p <= 1))
    BAD ("top_p %g is out of range (must be in (0, 1])", g->top_p);
  if (!isnan (g->min_p) && !(g->min_p >= 0 && g->min_p <= 1))
    BAD ("min_p %g is out of range (must be in [0, 1])", g->min_p);
  if (!isnan (g->typical_p) && !(g->typical_p > 0 && g->typical_p <= 1))
    BAD ("typical_p %g is out of range (must be in (0, 1])", g->typical_p);
  if (!isnan (g->epsilon_cutoff) && !(g->epsilon_cutoff >= 0 && g->epsilon_cutoff < 1))
    BAD ("epsilon_cutoff %g is out of range (must be in [0, 1))", g->epsilon_cutoff);
  if (!isnan (g->eta_cutoff) && !(g->eta_cutoff >= 0 && g->eta_cutoff < 1))
    BAD ("eta_cutoff %g is out of range (must be in [0, 1))", g->eta_cutoff);
  if (!isnan (g->repetition_penalty) && !(g->repetition_penalty > 0 && isfinite (g->repetition_penalty)))
    BAD ("repetition_penalty %g is out of range (must be > 0)", g->repetition_penalty);
  if (!isnan (g->length_penalty) && !isfinite (g->length_penalty))
    BAD ("length_penalty %g is not finite", g->length_penalty);
  if (g->num_beams == 0)
    BAD ("num_beams must be at least 1");
  if (g->num_return_sequences == 0)
    BAD ("num_return_sequences must be at least 1");
  if (g->num_return_sequences > 0 && g->num_beams > 0 && g->do_sample != 1 &&
      g->num_return_sequences > g->num_beams)
    BAD ("num_return_sequences %" G_GINT64_FORMAT " is larger than num_beams %" G_GINT64_FORMAT
         " with greedy or beam search", g->num_return_sequences, g->num_beams);
  if (g->max_new_tokens == 0)
    BAD ("max_new_tokens must be at least 1");
  if (g->min_new_tokens > 0 && g->max_new_tokens > 0 && g->min_new_tokens > g->max_new_tokens)
    BAD ("min_new_tokens %" G_GINT64_FORMAT " is larger than max_new_tokens %" G_GINT64_FORMAT,
         g->min_new_tokens, g->max_new_tokens);
#undef BAD
  return TRUE;
}

HnGenerationConfig *
hn_generation_config_resolve (const char *model_dir, const HnModelConfig *mc,
                              const HnGenerationConfig *explicit_opts, GError **error)
{
  g_autoptr (HnGenerationConfig) g = mc ? hn_generation_config_from_model_config (mc) : hn_generation_config_new ();
  if (model_dir)
    {
      g_autofree char *file = g_build_filename (model_dir, "generation_config.json", NULL);
      if (g_file_test (file, G_FILE_TEST_EXISTS))
        {
          g_autoptr (HnGenerationConfig) fg = hn_generation_config_load (file, error);
          if (!fg)
            return NULL;
          hn_generation_config_merge (g, fg);
        }
    }
  if (explicit_opts)
    hn_generation_config_merge (g, explicit_opts);
  hn_generation_config_apply_defaults (g);
  if (!hn_generation_config_validate (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

gboolean
hn_generation_config_is_eos (const HnGenerationConfig *g, gint64 id)
{
  for (guint i = 0; i < g->n_eos_token_ids; i++)
    if (g->eos_token_ids[i] == id)
      return TRUE;
  return FALSE;
}

gboolean
hn_continuous_batching_config_parse (const HnGenerationConfig *cfg, const char *file, HnContinuousBatchingConfig *out,
                                     GError **error)
{
  static const char *const ints[] = { "block_size", "num_blocks", "max_batch_tokens", "max_requests_per_batch",
                                      "max_blocks_per_request" };
  gint64 *slots[] = { &out->block_size, &out->num_blocks, &out->max_batch_tokens, &out->max_requests_per_batch,
                      &out->max_blocks_per_request };
  for (gsize i = 0; i < G_N_ELEMENTS (slots); i++)
    *slots[i] = -1;
  if (!cfg->continuous_batching)
    return TRUE;
  g_autoptr (GList) keys = json_object_get_members (cfg->continuous_batching);
  for (GList *l = keys; l; l = l->next)
    {
      const char *key = l->data;
      JsonNode *n = json_object_get_member (cfg->continuous_batching, key);
      if (JSON_NODE_HOLDS_NULL (n)) /* None: transformers' default */
        continue;
      gboolean known = FALSE;
      for (gsize i = 0; i < G_N_ELEMENTS (ints) && !known; i++)
        if (strcmp (key, ints[i]) == 0)
          {
            known = TRUE;
            if (!hn_json_node_get_int (n, slots[i]) || *slots[i] < 1)
              {
                g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                             "%s: continuous_batching_config.%s must be a positive integer", file, key);
                return FALSE;
              }
          }
      if (known)
        continue;
      gboolean b;
      if (strcmp (key, "scheduler_type") == 0)
        {
          const char *v = JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING
                            ? json_node_get_string (n) : NULL;
          if (!v || strcmp (v, "fifo") != 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "%s: continuous_batching_config.scheduler_type must be \"fifo\", the only scheduler here", file);
              return FALSE;
            }
        }
      else if (strcmp (key, "allow_block_sharing") == 0)
        {
          if (!hn_json_node_get_bool (n, &b) || b)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "%s: continuous_batching_config.allow_block_sharing: prefix sharing of pages is not "
                           "implemented; set it to false", file);
              return FALSE;
            }
        }
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "%s: continuous_batching_config.%s is not a knob of this scheduler (known: block_size, num_blocks, "
                       "max_batch_tokens, max_requests_per_batch, max_blocks_per_request, scheduler_type, "
                       "allow_block_sharing)", file, key);
          return FALSE;
        }
    }
  if (out->block_size >= 0 && out->block_size != 16)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: continuous_batching_config.block_size %" G_GINT64_FORMAT ": the paged KV cache uses pages of 16 "
                   "tokens", file, out->block_size);
      return FALSE;
    }
  return TRUE;
}
