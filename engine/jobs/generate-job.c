/* The "transformer-generate" job: load a model folder, resolve the policy
 * (transformers defaults < config.json < generation_config.json < the
 * job's explicit options), tokenize the prompts, generate each one and
 * stream the text as TOKEN events with tokens/s in PROGRESS events. */
#include "jobs/generate-job.h"
#include "generate/generate.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/gen-config.h"
#include "jobs/hub-job.h"
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "jobs/hierarchos-job.h"
#include "train/lora.h"
#include "encdec/seq2seq.h"
#include "ssm/mamba.h"
#include "transformer/transformer.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static GArray *
ids_from_i64 (const gint64 *v, guint n)
{
  GArray *a = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), n);
  for (guint i = 0; i < n; i++)
    {
      int32_t x = (int32_t) CLAMP (v[i], G_MININT32, G_MAXINT32); /* never truncated into a valid id */
      g_array_append_val (a, x);
    }
  return a;
}

void
hn_generate_options_from_config (HnGenerateOptions *o, const HnGenerationConfig *c)
{
  if (c->do_sample >= 0)
    o->do_sample = c->do_sample;
  if (!isnan (c->temperature))
    o->temperature = c->temperature;
  if (c->top_k >= 0)
    o->top_k = (int) c->top_k;
  if (!isnan (c->top_p))
    o->top_p = c->top_p;
  if (!isnan (c->min_p) && c->min_p > 0)
    o->min_p = c->min_p;
  if (!isnan (c->typical_p))
    o->typical_p = c->typical_p;
  if (!isnan (c->epsilon_cutoff))
    o->epsilon_cutoff = c->epsilon_cutoff;
  if (!isnan (c->eta_cutoff))
    o->eta_cutoff = c->eta_cutoff;
  if (!isnan (c->repetition_penalty))
    o->repetition_penalty = c->repetition_penalty;
  if (c->no_repeat_ngram_size >= 0)
    o->no_repeat_ngram_size = (int) c->no_repeat_ngram_size;
  if (c->bad_words_ids)
    {
      g_clear_pointer (&o->bad_words_ids, g_ptr_array_unref);
      o->bad_words_ids = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
      for (guint i = 0; i < c->bad_words_ids->len; i++)
        {
          GArray *w = g_ptr_array_index (c->bad_words_ids, i);
          g_ptr_array_add (o->bad_words_ids, ids_from_i64 ((const gint64 *) w->data, w->len));
        }
    }
  if (c->suppress_tokens_set)
    {
      g_clear_pointer (&o->suppress_tokens, g_array_unref);
      o->suppress_tokens = ids_from_i64 (c->suppress_tokens, c->n_suppress_tokens);
    }
  if (c->begin_suppress_tokens_set)
    {
      g_clear_pointer (&o->begin_suppress_tokens, g_array_unref);
      o->begin_suppress_tokens = ids_from_i64 (c->begin_suppress_tokens, c->n_begin_suppress_tokens);
    }
  if (c->min_new_tokens >= 0)
    o->min_new_tokens = (int) c->min_new_tokens;
  if (c->max_new_tokens > 0)
    o->max_new_tokens = (int) c->max_new_tokens;
  if (c->min_length >= 0)
    o->min_length = (int) c->min_length;
  if (c->max_length > 0)
    o->max_length = (int) c->max_length;
  if (c->eos_token_ids_set)
    {
      g_clear_pointer (&o->eos_token_ids, g_array_unref);
      o->eos_token_ids = ids_from_i64 (c->eos_token_ids, c->n_eos_token_ids);
    }
  if (c->pad_token_id != -1) /* a negative one is dropped with a warning once the vocabulary is known */
    o->pad_token_id = (int) CLAMP (c->pad_token_id, G_MININT32, G_MAXINT32);
  if (c->num_beams > 0)
    o->num_beams = (int) c->num_beams;
  if (!isnan (c->length_penalty))
    o->length_penalty = c->length_penalty;
  if (c->early_stopping != HN_EARLY_STOPPING_UNSET)
    o->early_stopping = c->early_stopping == HN_EARLY_STOPPING_TRUE    ? HN_EARLY_STOP_TRUE
                        : c->early_stopping == HN_EARLY_STOPPING_NEVER ? HN_EARLY_STOP_NEVER
                                                                       : HN_EARLY_STOP_FALSE;
  if (c->num_return_sequences > 0)
    o->num_return_sequences = (int) c->num_return_sequences;
}

static gboolean
parse_ids (const char *flag, const char *text, GArray *out, GError **error)
{
  g_auto (GStrv) parts = g_strsplit_set (text, ", \t\n", -1);
  for (char **p = parts; *p; p++)
    {
      if (!**p)
        continue;
      char *end = NULL;
      gint64 v = g_ascii_strtoll (*p, &end, 10);
      if (!end || *end || v < 0 || v > G_MAXINT32)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: \"%s\" is not a token id", flag, *p);
          return FALSE;
        }
      int32_t x = (int32_t) v;
      g_array_append_val (out, x);
    }
  if (out->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s has no ids", flag);
      return FALSE;
    }
  return TRUE;
}

typedef struct {
  HnJob *job;
  HnTokenizer *tok;
  HnTokenDecoder *dec;
  guint seq;
  gint64 n_tokens, max_new;
  GError *stream_error;
} Stream;

static void
on_token (gpointer data, int32_t id)
{
  Stream *s = data;
  s->n_tokens++;
  g_autofree char *piece = NULL;
  if (s->dec && !s->stream_error)
    piece = hn_token_decoder_push (s->dec, id, &s->stream_error);
  hn_job_emit_token (s->job, s->seq, id, piece ? piece : "");
  hn_job_emit_progress (s->job, HN_PROGRESS_TOKENS, s->n_tokens, s->max_new, s->n_tokens);
}

static char *
decode_text (gpointer data, const int32_t *ids, int n)
{
  return hn_tokenizer_decode (data, ids, (gsize) n, TRUE, NULL);
}

static void
add_int (JsonBuilder *b, const char *name, gint64 v)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, v);
}

/* The results as one JSON document: every returned sequence's ids and text (in prompt order),
 * and per prompt its lengths and why it stopped. */
static char *
results_json (GPtrArray *results, HnTokenizer *tok, const HnBatchStats *batch, gsize *len)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  for (int pass = 0; pass < 2; pass++)
    {
      json_builder_set_member_name (b, pass == 0 ? "sequences" : "texts");
      json_builder_begin_array (b);
      for (guint i = 0; i < results->len; i++)
        {
          HnGenerateResult *r = g_ptr_array_index (results, i);
          for (int k = 0; k < r->n_sequences; k++)
            {
              GArray *ids = g_ptr_array_index (r->sequences, k);
              if (pass == 1)
                {
                  g_autofree char *t = tok ? hn_tokenizer_decode (tok, (const int32_t *) ids->data, ids->len, TRUE, NULL)
                                           : NULL;
                  if (t)
                    json_builder_add_string_value (b, t);
                  else
                    json_builder_add_null_value (b);
                  continue;
                }
              json_builder_begin_array (b);
              for (guint j = 0; j < ids->len; j++)
                json_builder_add_int_value (b, g_array_index (ids, int32_t, j));
              json_builder_end_array (b);
            }
        }
      json_builder_end_array (b);
    }
  json_builder_set_member_name (b, "requests");
  json_builder_begin_array (b);
  for (guint i = 0; i < results->len; i++)
    {
      HnGenerateResult *r = g_ptr_array_index (results, i);
      json_builder_begin_object (b);
      add_int (b, "prompt_tokens", r->n_prompt);
      add_int (b, "generated_tokens", r->n_generated);
      json_builder_set_member_name (b, "stop_reason");
      json_builder_add_string_value (b, r->stop_reason ? r->stop_reason : "");
      json_builder_set_member_name (b, "seconds");
      json_builder_add_double_value (b, r->seconds);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  if (batch)
    {
      json_builder_set_member_name (b, "continuous_batching");
      json_builder_begin_object (b);
      add_int (b, "rounds", batch->rounds);
      add_int (b, "max_active", batch->max_active);
      add_int (b, "page_waits", batch->page_waits);
      json_builder_set_member_name (b, "tokens_per_s");
      json_builder_add_double_value (b, batch->n_generated / MAX (batch->seconds, 1e-9));
      json_builder_end_object (b);
    }
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  return json_generator_to_data (gen, len);
}

/* The scalar policy flags: each overrides its HnGenerateOptions field when given. */
static const struct {
  const char *flag;
  gsize offset;
  gboolean is_double;
} scalar_flags[] = {
  { "min-new-tokens", G_STRUCT_OFFSET (HnGenerateOptions, min_new_tokens), FALSE },
  { "top-k", G_STRUCT_OFFSET (HnGenerateOptions, top_k), FALSE },
  { "no-repeat-ngram-size", G_STRUCT_OFFSET (HnGenerateOptions, no_repeat_ngram_size), FALSE },
  { "num-beams", G_STRUCT_OFFSET (HnGenerateOptions, num_beams), FALSE },
  { "num-return-sequences", G_STRUCT_OFFSET (HnGenerateOptions, num_return_sequences), FALSE },
  { "temperature", G_STRUCT_OFFSET (HnGenerateOptions, temperature), TRUE },
  { "top-p", G_STRUCT_OFFSET (HnGenerateOptions, top_p), TRUE },
  { "typical-p", G_STRUCT_OFFSET (HnGenerateOptions, typical_p), TRUE },
  { "repetition-penalty", G_STRUCT_OFFSET (HnGenerateOptions, repetition_penalty), TRUE },
  { "length-penalty", G_STRUCT_OFFSET (HnGenerateOptions, length_penalty), TRUE },
  { "epsilon-cutoff", G_STRUCT_OFFSET (HnGenerateOptions, epsilon_cutoff), TRUE },
  { "eta-cutoff", G_STRUCT_OFFSET (HnGenerateOptions, eta_cutoff), TRUE },
};

void
hn_generate_policy_read (HnJobSpec *spec, HnGeneratePolicy *p)
{
  memset (p, 0, sizeof *p);
  for (guint i = 0; i < G_N_ELEMENTS (scalar_flags); i++)
    {
      const char *flag = scalar_flags[i].flag;
      if (!hn_job_spec_lookup (spec, flag))
        continue;
      gpointer field = G_STRUCT_MEMBER_P (&p->value, scalar_flags[i].offset);
      if (scalar_flags[i].is_double)
        *(double *) field = hn_job_spec_get_double (spec, flag);
      else
        *(int *) field = (int) hn_job_spec_get_int (spec, flag);
      if (hn_job_spec_is_set (spec, flag))
        p->given |= 1u << i;
    }
  p->value.max_new_tokens = (int) hn_job_spec_get_int (spec, "max-new-tokens");
  p->max_new_tokens_given = hn_job_spec_is_set (spec, "max-new-tokens");
  p->min_p_given = hn_job_spec_is_set (spec, "min-p");
  if (p->min_p_given)
    p->value.min_p = hn_job_spec_get_double (spec, "min-p");
  p->do_sample_given = hn_job_spec_is_set (spec, "do-sample");
  if (p->do_sample_given)
    p->value.do_sample = hn_job_spec_get_bool (spec, "do-sample");
  p->early_stopping_given = hn_job_spec_is_set (spec, "early-stopping");
  if (p->early_stopping_given)
    p->value.early_stopping = hn_job_spec_get_bool (spec, "early-stopping") ? HN_EARLY_STOP_TRUE : HN_EARLY_STOP_FALSE;
  p->suppress_tokens = hn_job_spec_get_string (spec, "suppress-tokens");
  p->eos_token_id = hn_job_spec_get_string (spec, "eos-token-id");
  p->bad_words_ids = hn_job_spec_get_string (spec, "bad-words-ids");
  p->stop = hn_job_spec_get_strv (spec, "stop");
  p->value.seed = (guint64) hn_job_spec_get_int (spec, "seed");
  p->generation_config = hn_job_spec_get_string (spec, "generation-config");
  p->cache_implementation = hn_job_spec_get_string (spec, "cache-implementation");
  p->no_use_cache = hn_job_spec_get_bool (spec, "no-use-cache");
  p->continuous_batching = hn_job_spec_lookup (spec, "continuous-batching") &&
                           hn_job_spec_get_bool (spec, "continuous-batching");
}

gboolean
hn_generate_job_options_read (HnJobSpec *spec, HnGenerateJobOptions *o, GError **error)
{
  memset (o, 0, sizeof *o);
  hn_generate_policy_read (spec, &o->policy);
  o->tokenizer_path = hn_job_spec_get_string (spec, "tokenizer-path");
  o->adapter_path = hn_job_spec_get_string (spec, "lora-adapter-path");
  o->output_json = hn_job_spec_get_string (spec, "output-json");
  o->input_ids = hn_job_spec_get_strv (spec, "input-ids");
  o->prompt_file = hn_job_spec_get_string (spec, "prompt-file");
  o->prompts = hn_job_spec_get_strv (spec, "prompt");
  o->json = hn_job_spec_get_bool (spec, "json");
  o->batch_max_requests = (int) hn_job_spec_get_int (spec, "continuous-batch-max-requests");
  o->batch_max_requests_given = hn_job_spec_is_set (spec, "continuous-batch-max-requests");
  o->device_indices_given = hn_job_spec_is_set (spec, "device-indices");
  return (o->devices = hn_job_spec_get_devices (spec, error)) != NULL;
}

void
hn_generate_job_options_clear (HnGenerateJobOptions *o)
{
  g_clear_pointer (&o->devices, g_array_unref);
}

/* What an explicit --generation-config file opts into (a model's own file cannot). */
typedef struct {
  char *cache_implementation;         /* the file's, or NULL */
  gboolean continuous_batching;       /* the file has a continuous_batching_config */
  HnContinuousBatchingConfig cb;
  gboolean model_asks;                /* the model's own file or config.json asks for paged / batching */
} OptIn;

/* The policy: model defaults, then the job's explicit options. */
static gboolean
build_options (const HnGeneratePolicy *p, const char *model_dir, HnModelConfig *mc, HnGenerateOptions *o, OptIn *in,
               GError **error)
{
  g_autoptr (HnGenerationConfig) none = hn_generation_config_new ();
  hn_continuous_batching_config_parse (none, NULL, &in->cb, NULL); /* every knob unset */
  g_autoptr (HnGenerationConfig) gc = hn_generation_config_from_model_config (mc);
  const char *gc_path = p->generation_config;
  GError *e = NULL;
  g_autoptr (HnGenerationConfig) file = hn_generation_config_load (gc_path ? gc_path : model_dir, &e);
  if (!file && !(e->code == HN_ERROR_NOT_FOUND && !gc_path))
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  g_clear_error (&e);
  /* a package's own paged cache or batching settings must not opt the user in; a file the user
   * names may (issue 10) */
  in->model_asks = g_strcmp0 (gc->cache_implementation, "paged") == 0 || gc->continuous_batching;
  if (file && gc_path)
    {
      in->cache_implementation = g_strdup (file->cache_implementation);
      in->continuous_batching = file->continuous_batching != NULL;
      if (!hn_continuous_batching_config_parse (file, gc_path, &in->cb, error))
        return FALSE;
    }
  else if (file)
    in->model_asks = in->model_asks || g_strcmp0 (file->cache_implementation, "paged") == 0 ||
                     file->continuous_batching;
  if (file)
    hn_generation_config_merge (gc, file);
  gboolean model_sets_length = gc->max_new_tokens > 0 || gc->max_length > 0;
  hn_generation_config_apply_defaults (gc);
  if (!hn_generation_config_validate (gc, error))
    return FALSE;
  hn_generate_options_from_config (o, gc);
  if (!model_sets_length || p->max_new_tokens_given)
    o->max_new_tokens = p->value.max_new_tokens;
  for (guint i = 0; i < G_N_ELEMENTS (scalar_flags); i++)
    if (p->given & (1u << i))
      {
        gsize off = scalar_flags[i].offset;
        if (scalar_flags[i].is_double)
          G_STRUCT_MEMBER (double, o, off) = G_STRUCT_MEMBER (double, &p->value, off);
        else
          G_STRUCT_MEMBER (int, o, off) = G_STRUCT_MEMBER (int, &p->value, off);
      }
  const char *sup = p->suppress_tokens;
  if (sup)
    {
      g_clear_pointer (&o->suppress_tokens, g_array_unref);
      o->suppress_tokens = g_array_new (FALSE, FALSE, sizeof (int32_t));
      if (!parse_ids ("--suppress-tokens", sup, o->suppress_tokens, error))
        return FALSE;
    }
  const char *eos = p->eos_token_id;
  if (eos)
    {
      g_array_set_size (o->eos_token_ids, 0);
      if (!parse_ids ("--eos-token-id", eos, o->eos_token_ids, error))
        return FALSE;
    }
  const char *bad = p->bad_words_ids;
  if (bad)
    {
      g_clear_pointer (&o->bad_words_ids, g_ptr_array_unref);
      o->bad_words_ids = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
      g_auto (GStrv) seqs = g_strsplit (bad, ";", -1);
      for (char **q = seqs; *q; q++)
        {
          if (!*g_strstrip (*q))
            continue;
          GArray *w = g_array_new (FALSE, FALSE, sizeof (int32_t));
          g_ptr_array_add (o->bad_words_ids, w);
          if (!parse_ids ("--bad-words-ids", *q, w, error))
            return FALSE;
        }
    }
  if (p->min_p_given)
    o->min_p = p->value.min_p > 0 ? p->value.min_p : NAN;
  if (p->do_sample_given)
    o->do_sample = p->value.do_sample;
  if (p->early_stopping_given)
    o->early_stopping = p->value.early_stopping;
  if (p->stop && p->stop[0])
    o->stop_strings = g_strdupv ((char **) p->stop);
  o->seed = p->value.seed;
  return TRUE;
}

/* The cache and scheduler a job asked for: the flags, else an explicit --generation-config. */
static gboolean
resolve_cache (HnJob *job, const HnGeneratePolicy *p, const OptIn *in, HnKvCacheMode *mode, gboolean *batch,
               GError **error)
{
  const char *gc_path = p->generation_config;
  const char *ci = p->cache_implementation;
  *mode = HN_KV_CACHE_CONTIGUOUS;
  if (ci && !hn_kv_cache_mode_from_string (ci, mode, error))
    return FALSE;
  if (!ci && in->cache_implementation && !hn_kv_cache_mode_from_string (in->cache_implementation, mode, error))
    {
      g_prefix_error (error, "%s: ", gc_path);
      return FALSE;
    }
  gboolean chosen = ci || in->cache_implementation;
  if (p->no_use_cache)
    *mode = HN_KV_CACHE_NONE, chosen = TRUE;
  *batch = p->continuous_batching || in->continuous_batching;
  if (*batch && chosen && *mode != HN_KV_CACHE_PAGED)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "continuous batching shares a paged KV cache; it cannot run with the %s cache",
                   hn_kv_cache_mode_name (*mode));
      return FALSE;
    }
  if (*batch)
    *mode = HN_KV_CACHE_PAGED;
  if (in->model_asks && !chosen && !*batch)
    hn_job_log (job, HN_LOG_INFO, "the model's generation config asks for a paged cache or continuous batching; "
                "ignored (opt in with --cache-implementation paged, --continuous-batching or --generation-config)");
  return TRUE;
}

/* Prompts: --input-ids and --prompt (both repeatable, one request each), --prompt-file (one per line). */
static GPtrArray *
read_prompts (const HnGenerateJobOptions *o, HnTokenizer *tok, GError *tok_error, GError **error)
{
  g_autoptr (GPtrArray) prompts = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (const char *const *p = o->input_ids; p && *p; p++)
    {
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_ptr_array_add (prompts, ids);
      if (!parse_ids ("--input-ids", *p, ids, error))
        return NULL;
    }
  g_autoptr (GPtrArray) texts_in = g_ptr_array_new_with_free_func (g_free);
  for (const char *const *p = o->prompts; p && *p; p++)
    g_ptr_array_add (texts_in, g_strdup (*p));
  const char *pf = o->prompt_file;
  if (pf)
    {
      g_autofree char *content = NULL;
      if (!hn_file_read_bounded (pf, HN_MAX_TEXT_BYTES, "prompt file", &content, NULL, error))
        return NULL;
      g_auto (GStrv) lines = g_strsplit (content, "\n", -1);
      for (char **l = lines; *l; l++)
        if (**l)
          g_ptr_array_add (texts_in, g_strdup (*l));
    }
  if (texts_in->len > 0 && !tok)
    {
      g_set_error (error, HN_ERROR, tok_error ? tok_error->code : HN_ERROR_NOT_FOUND, "prompts need a tokenizer: %s",
                   tok_error ? tok_error->message : "none found");
      return NULL;
    }
  for (guint i = 0; i < texts_in->len; i++)
    {
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_ptr_array_add (prompts, ids);
      if (!hn_tokenizer_encode (tok, g_ptr_array_index (texts_in, i), -1, TRUE, ids, error))
        return NULL;
    }
  if (prompts->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "give --prompt, --prompt-file or --input-ids");
      return NULL;
    }
  return g_steal_pointer (&prompts);
}

typedef struct {
  HnJob *job;
  HnTokenizer *tok;
  gboolean json;
  GPtrArray *done;   /* HnGenerateResult copies by request (NULL until finished) */
  guint next_print;  /* requests before this one are printed */
  gint64 n_tokens;
} BatchPrint;

static HnGenerateResult *
result_copy (const HnGenerateResult *r)
{
  HnGenerateResult *c = g_new0 (HnGenerateResult, 1);
  *c = *r;
  c->sequences = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (guint i = 0; i < r->sequences->len; i++)
    {
      GArray *a = g_ptr_array_index (r->sequences, i);
      GArray *b = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), a->len);
      g_array_append_vals (b, a->data, a->len);
      g_ptr_array_add (c->sequences, b);
    }
  c->scores = g_array_copy (r->scores);
  c->stop_reason = g_strdup (r->stop_reason);
  return c;
}

/* A finished request: its text is printed once every earlier request's is, so the output keeps
 * the prompts' order while requests finish in any order. */
static void
on_request_done (gpointer data, int request, const HnGenerateResult *r)
{
  BatchPrint *bp = data;
  g_ptr_array_index (bp->done, request) = result_copy (r);
  bp->n_tokens += r->n_generated;
  hn_job_emit_progress (bp->job, HN_PROGRESS_TOKENS, bp->n_tokens, -1, bp->n_tokens);
  while (bp->next_print < bp->done->len && g_ptr_array_index (bp->done, bp->next_print))
    {
      guint i = bp->next_print++;
      HnGenerateResult *d = g_ptr_array_index (bp->done, i);
      GArray *ids = g_ptr_array_index (d->sequences, 0);
      hn_job_log (bp->job, HN_LOG_INFO, "request %u: %d prompt tokens, %d generated in %.2f s, stop: %s", i, d->n_prompt,
                  d->n_generated, d->seconds, d->stop_reason);
      if (bp->json)
        continue;
      g_autofree char *text = bp->tok ? hn_tokenizer_decode (bp->tok, (const int32_t *) ids->data, ids->len, TRUE, NULL)
                                      : NULL;
      if (!text) /* no tokenizer: the ids */
        {
          GString *s = g_string_new (NULL);
          for (guint j = 0; j < ids->len; j++)
            g_string_append_printf (s, "%s%d", j ? " " : "", g_array_index (ids, int32_t, j));
          text = g_string_free (s, FALSE);
        }
      hn_job_emit_token (bp->job, i, -1, text);
      hn_job_emit_token (bp->job, i, -1, "\n");
    }
}

/* --continuous-batching: every prompt a request over one paged session. */
static GPtrArray *
run_batched (HnJob *job, const HnGenerateJobOptions *jo, HnTransformer *model, HnTokenizer *tok,
             const HnGenerateOptions *opt, GPtrArray *prompts, const OptIn *in, HnBatchStats *st, GError **error)
{
  G_STATIC_ASSERT (HN_KV_PAGE_SIZE == 16); /* hn_continuous_batching_config_parse checks block_size against 16 */
  int R = jo->batch_max_requests;
  if (!jo->batch_max_requests_given && in->cb.max_requests_per_batch > 0)
    R = (int) MIN (in->cb.max_requests_per_batch, 4096);
  if (in->cb.max_batch_tokens > 0) /* one token of every active request per round */
    R = (int) MIN (R, in->cb.max_batch_tokens);
  R = MIN (R, (int) prompts->len);
  int max_ctx = 1, max_pages = 1;
  for (guint i = 0; i < prompts->len; i++)
    {
      int n = (int) ((GArray *) g_ptr_array_index (prompts, i))->len;
      int len = MAX (hn_generate_options_max_length (opt, n), n + 1);
      max_ctx = MAX (max_ctx, len);
      max_pages = MAX (max_pages, (len - 1 + HN_KV_PAGE_SIZE - 1) / HN_KV_PAGE_SIZE);
    }
  /* by default the pool holds every active request at its full length: no request waits for pages */
  gint64 n_pages = in->cb.num_blocks > 0 ? in->cb.num_blocks : (gint64) R * max_pages;
  if (n_pages > G_MAXINT32 / HN_KV_PAGE_SIZE)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "continuous_batching_config.num_blocks %" G_GINT64_FORMAT
                   " is too large", n_pages);
      return NULL;
    }
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new_paged (model, R, max_ctx, (int) n_pages, error);
  if (!s || (in->cb.max_batch_tokens > 0 &&
             !hn_transformer_session_set_prefill_chunk (s, (int) MIN (in->cb.max_batch_tokens, 512), error)))
    return NULL;
  hn_job_set_device_bytes (job, (gint64) (hn_transformer_get_weight_bytes (model) + hn_transformer_session_get_bytes (s)));
  hn_job_log (job, HN_LOG_INFO, "continuous batching: %u requests, up to %d at once, %d pages of %d tokens", prompts->len,
              R, (int) n_pages, HN_KV_PAGE_SIZE);
  HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, hn_transformer_get_hparams (model)->vocab,
                         tok ? decode_text : NULL, tok, NULL, NULL };
  HnBatchOptions bo = { R, (int) n_pages, HN_KV_PAGE_SIZE, (int) MAX (in->cb.max_blocks_per_request, 0) };
  g_autoptr (GPtrArray) done = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_generate_result_free);
  g_ptr_array_set_size (done, (gint) prompts->len);
  BatchPrint bp = { job, tok, jo->json, done, 0, 0 };
  GPtrArray *res = hn_generate_batch_run (&gm, opt, &bo, prompts, on_request_done, &bp, st,
                                          hn_job_get_cancellable (job), error);
  if (res)
    hn_job_log (job, HN_LOG_INFO, "%" G_GINT64_FORMAT " tokens in %.2f s (%.1f tokens/s), %d decode rounds, up to %d "
                "requests at once, %d waits for pages", st->n_generated, st->seconds,
                st->n_generated / MAX (st->seconds, 1e-9), st->rounds, st->max_active, st->page_waits);
  return res;
}

/* One prompt after another, streaming the text of greedy/sampled ones. */
static GPtrArray *
run_sequential (HnJob *job, HnTransformer *model, HnSeq2Seq *s2s_model, HnMamba *ssm_model, HnKvCacheMode mode,
                HnTokenizer *tok, const HnGenerateOptions *opt, GPtrArray *prompts, gboolean json, GError **error)
{
  g_autoptr (GPtrArray) results = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_generate_result_free);
  for (guint i = 0; i < prompts->len; i++)
    {
      GArray *p = g_ptr_array_index (prompts, i);
      gboolean stream = opt->num_beams == 1 && !json;
      Stream st = { job, tok, tok && stream ? hn_token_decoder_new (tok, TRUE) : NULL, i, 0, opt->max_new_tokens, NULL };
      HnTokenFunc tf = stream ? on_token : NULL;
      HnGenerateResult *r =
        model ? hn_transformer_generate (model, mode, opt, (const int32_t *) p->data, (int) p->len,
                                         tok ? decode_text : NULL, tok, tf, &st, hn_job_get_cancellable (job), error)
        : ssm_model ? hn_mamba_generate (ssm_model, opt, (const int32_t *) p->data, (int) p->len,
                                         tok ? decode_text : NULL, tok, tf, &st, hn_job_get_cancellable (job), error)
              : hn_seq2seq_generate (s2s_model, opt, (const int32_t *) p->data, (int) p->len, tok ? decode_text : NULL,
                                     tok, tf, &st, hn_job_get_cancellable (job), error);
      if (st.dec)
        {
          g_autofree char *rest = hn_token_decoder_flush (st.dec);
          if (rest && *rest)
            hn_job_emit_token (job, i, -1, rest);
          hn_token_decoder_free (st.dec);
        }
      g_clear_error (&st.stream_error);
      if (!r)
        return NULL;
      g_ptr_array_add (results, r);
      if (stream)
        hn_job_emit_token (job, i, -1, "\n");
      hn_job_log (job, HN_LOG_INFO, "prompt %u: %d prompt tokens, %d generated in %.2f s (%.1f tokens/s, prefill %.3f s), stop: %s",
                  i, r->n_prompt, r->n_generated, r->seconds, r->n_generated / MAX (r->seconds, 1e-9),
                  r->prefill_seconds, r->stop_reason);
      for (int j = 0; opt->num_beams > 1 && !json && j < r->n_sequences; j++)
        {
          /* beam results are only known at the end */
          GArray *ids = g_ptr_array_index (r->sequences, j);
          g_autofree char *t = tok ? hn_tokenizer_decode (tok, (const int32_t *) ids->data, ids->len, TRUE, NULL) : NULL;
          hn_job_emit_token (job, i, -1, t ? t : "");
          hn_job_emit_token (job, i, -1, "\n");
        }
    }
  return g_steal_pointer (&results);
}

/* Where a model split across devices (--device-indices) put its layers. */
static void
log_stages (HnJob *job, HnTransformer *m, GArray *devs)
{
  for (guint i = 0; i < hn_transformer_get_n_stages (m); i++)
    {
      int l0, l1;
      HnTransformer *st = hn_transformer_get_stage (m, i, &l0, &l1);
      HnTransformer *next = hn_transformer_get_stage (m, i + 1, NULL, NULL);
      guint64 bytes = hn_transformer_get_weight_bytes (st) - (next ? hn_transformer_get_weight_bytes (next) : 0);
      hn_job_log (job, HN_LOG_INFO, "pipeline stage %u: layers %d-%d on device %d (%s), %.1f MB of weights", i, l0,
                  l1 - 1, g_array_index (devs, int, i),
                  hn_vk_context_get_device_info (hn_transformer_get_context (st))->name, bytes / 1e6);
    }
}

gboolean
hn_generate_job_attach_adapter (HnJob *job, HnTransformer *model, const char *adapter_dir, GError **error)
{
  /* attached in device memory (scaling·B·A added to the adapted weights); no merged files */
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (adapter_dir, error);
  if (!ad || !hn_lora_attach (model, ad, error))
    return FALSE;
  hn_job_log (job, HN_LOG_INFO, "LoRA adapter %s attached (%u modules)", adapter_dir, ad->modules->len);
  return TRUE;
}

gboolean
hn_generate_job_policy (HnJob *job, const HnGeneratePolicy *p, const char *model_dir, HnModelConfig *mc,
                        HnGenerateOptions *opt, HnKvCacheMode *mode, GError **error)
{
  OptIn in = { 0 };
  gboolean batch;
  gboolean ok = build_options (p, model_dir, mc, opt, &in, error) && resolve_cache (job, p, &in, mode, &batch, error);
  g_free (in.cache_implementation);
  if (ok && batch)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: continuous batching serves many prompts at once; a chat runs one conversation",
                   p->generation_config);
      return FALSE;
    }
  return ok;
}

/* transformers warns the same way: positions past max_position_embeddings
 * are outside what the model was trained on (it may degrade or fail) */
static void
warn_positions (HnJob *job, const HnModelConfig *mc, const HnGenerateOptions *opt, GPtrArray *prompts)
{
  if (mc->max_position_embeddings <= 0)
    return;
  gint64 longest = 0;
  for (guint i = 0; i < prompts->len; i++)
    {
      gint64 n = ((GArray *) prompts->pdata[i])->len;
      gint64 total = opt->max_new_tokens > 0 ? n + opt->max_new_tokens : MAX (n, opt->max_length);
      longest = MAX (longest, total);
    }
  if (longest > mc->max_position_embeddings)
    hn_job_log (job, HN_LOG_WARNING,
                "this generation may reach %" G_GINT64_FORMAT " tokens, past the model's max_position_embeddings (%"
                G_GINT64_FORMAT "): positions after it are outside what the model was trained on, and the output may "
                "degrade", longest, mc->max_position_embeddings);
}

static gboolean
generate_with (HnJob *job, const HnGenerateJobOptions *jo, const char *model_dir, HnModelConfig *mc,
               HnGenerateOptions *opt, GError **error)
{
  OptIn in = { 0 };
  HnKvCacheMode mode;
  gboolean batch;
  gboolean ok = build_options (&jo->policy, model_dir, mc, opt, &in, error) &&
                resolve_cache (job, &jo->policy, &in, &mode, &batch, error);
  g_free (in.cache_implementation);
  if (!ok)
    return FALSE;
  if (batch && (opt->num_beams > 1 || opt->num_return_sequences > 1))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "continuous batching returns one greedy or sampled sequence per request (num_beams %d, "
                   "num_return_sequences %d)", opt->num_beams, opt->num_return_sequences);
      return FALSE;
    }

  const char *tok_dir = jo->tokenizer_path;
  g_autoptr (GError) tok_error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tok_dir ? tok_dir : model_dir, &tok_error);
  g_autoptr (GPtrArray) prompts = read_prompts (jo, tok, tok_error, error);
  if (!prompts)
    return FALSE;
  warn_positions (job, mc, opt, prompts);
  if (opt->eos_token_ids->len == 0 && tok)
    {
      gsize n_eos;
      const int32_t *eos = hn_tokenizer_get_eos_ids (tok, &n_eos);
      g_array_append_vals (opt->eos_token_ids, eos, (guint) n_eos);
    }

  /* one device, or several with the layers split across them (--device-indices) */
  GArray *devs = jo->devices;
  g_autoptr (GPtrArray) ctxs = hn_vk_contexts_new ((const int *) devs->data, devs->len, error);
  HnVkContext *ctx = ctxs ? ctxs->pdata[0] : NULL;
  /* decoders run through HnTransformer, encoder-decoders through HnSeq2Seq; encoders do not generate */
  const HnArchInfo *arch = ctx ? hn_arch_lookup (mc->model_type, error) : NULL;
  const char *adapter_dir = jo->adapter_path;
  gboolean s2s = arch && hn_arch_is_seq2seq (arch);
  if (arch && hn_arch_is_encoder (arch))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "model_type \"%s\" is an encoder (masked LM): it does not generate text; transformer-logits gives "
                   "its logits", arch->model_type);
      return FALSE;
    }
  if (s2s && (batch || mode != HN_KV_CACHE_CONTIGUOUS || adapter_dir || ctxs->len > 1))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "model_type \"%s\" (encoder-decoder): %s is not supported",
                   arch->model_type, batch ? "continuous batching (decoder-only models)"
                                   : adapter_dir ? "--lora-adapter-path"
                                   : ctxs->len > 1 ? "splitting the layers across devices (--device-indices)"
                                                   : "a KV cache mode other than the default");
      return FALSE;
    }
  gboolean ssm = arch && hn_arch_is_ssm (arch);
  if (ssm && (batch || mode != HN_KV_CACHE_CONTIGUOUS || adapter_dir || ctxs->len > 1))
    {
      /* a state-space decoder carries a fixed-size recurrent state per layer (conv + SSM) */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "model_type \"%s\" (state-space decoder: a conv + SSM state per layer, no KV cache): %s is not "
                   "supported",
                   arch->model_type,
                   batch ? "continuous batching (a paged KV cache)"
                   : adapter_dir ? "--lora-adapter-path"
                   : ctxs->len > 1 ? "splitting the layers across devices (--device-indices)"
                   : mode == HN_KV_CACHE_PAGED ? "the paged KV cache (--kv-cache paged)"
                                               : "recomputing the prefix (--kv-cache none)");
      return FALSE;
    }
  g_autoptr (HnSeq2Seq) s2s_model = arch && s2s ? hn_seq2seq_load (ctx, model_dir, error) : NULL;
  g_autoptr (HnMamba) ssm_model = ssm ? hn_mamba_load (ctx, model_dir, error) : NULL;
  g_autoptr (HnTransformer) model =
    arch && !s2s && !ssm ? hn_transformer_load_split ((HnVkContext *const *) ctxs->pdata, ctxs->len, model_dir, error)
                         : NULL;
  if (model && ctxs->len > 1)
    log_stages (job, model, devs);
  if ((!model && !s2s_model && !ssm_model) || !hn_arch_require_task (arch, HN_TASK_GENERATE, error) ||
      (mode == HN_KV_CACHE_PAGED && !hn_transformer_check_pageable (model, error)))
    return FALSE;
  if (adapter_dir && !hn_generate_job_attach_adapter (job, model, adapter_dir, error))
    return FALSE;
  g_autofree char *dropped = hn_generate_options_drop_outside_vocab (
    opt, model ? hn_transformer_get_hparams (model)->vocab
         : ssm_model ? hn_mamba_get_hparams (ssm_model)->vocab : hn_seq2seq_get_vocab (s2s_model));
  if (dropped)
    hn_job_log (job, HN_LOG_WARNING, "%s: %s", model_dir, dropped);
  if (ssm_model)
    hn_job_log (job, HN_LOG_INFO, "%s (%s), %.1f MB of weights, recurrent state: %.1f KB per sequence (conv + SSM, "
                "no KV cache)", model_dir, arch->model_type, hn_mamba_get_weight_bytes (ssm_model) / 1e6,
                hn_mamba_state_bytes_per_row (ssm_model) / 1e3);
  else
    hn_job_log (job, HN_LOG_INFO, "%s (%s), %.1f MB of weights, KV cache: %s", model_dir, arch->model_type,
                (model ? hn_transformer_get_weight_bytes (model) : hn_seq2seq_get_weight_bytes (s2s_model)) / 1e6,
                hn_kv_cache_mode_name (mode));

  gboolean json = jo->json;
  HnBatchStats st;
  g_autoptr (GPtrArray) results = batch ? run_batched (job, jo, model, tok, opt, prompts, &in, &st, error)
                                        : run_sequential (job, model, s2s_model, ssm_model, mode, tok, opt, prompts, json, error);
  if (!results)
    return FALSE;
  const char *out = jo->output_json;
  if (!out && !json)
    return TRUE;
  gsize len;
  g_autofree char *data = results_json (results, tok, batch ? &st : NULL, &len);
  if (json)
    {
      hn_job_emit_token (job, 0, -1, data);
      hn_job_emit_token (job, 0, -1, "\n");
    }
  if (out)
    {
      if (!hn_write_file_atomic (out, data, len, error))
        return FALSE;
      hn_job_set_output_path (job, out);
    }
  return TRUE;
}

void
hn_generate_job_explain_numeric (GError **error, const char *model_dir)
{
  if (!error || !*error || !g_error_matches (*error, HN_ERROR, HN_ERROR_NUMERIC) || !model_dir)
    return;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, NULL);
  if (!st)
    return;
  g_autofree char *why = NULL;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st) && !why; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      gint64 bad = hn_st_first_nonfinite (t->dtype, t->data, (gsize) t->n_elements);
      if (bad >= 0)
        why = g_strdup_printf ("tensor %s in %s holds NaN or Inf (element %" G_GINT64_FORMAT ")", t->name, t->file,
                               bad);
    }
  if (!why)
    why = g_strdup_printf ("the weights in %s are all finite, so the values overflowed in the computation", model_dir);
  GError *e = g_error_new (HN_ERROR, HN_ERROR_NUMERIC, "%s: %s", (*error)->message, why);
  g_clear_error (error);
  *error = e;
}

gboolean
hn_transformer_generate_job_run (HnJob *job, GError **error)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  /* --model-path, or --hf-model resolved through the Hub cache (downloaded
   * on first use, offline afterwards when HF_HUB_OFFLINE is set). */
  g_autofree char *model_dir = hn_hub_job_model_dir (job, error);
  if (!model_dir)
    return FALSE;
  g_auto (HnGenerateJobOptions) jo = { 0 };
  if (!hn_generate_job_options_read (spec, &jo, error))
    return FALSE;
  if (hn_hier_is_model_dir (model_dir) && jo.device_indices_given)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s is a Hierarchos model: it runs on one device (--device-index); --device-indices splits the "
                   "layers of Transformer models only", model_dir);
      return FALSE;
    }
  if (hn_hier_is_model_dir (model_dir))
    {
      /* recurrent: no attention cache to page or share */
      if (g_strcmp0 (jo.policy.cache_implementation, "paged") == 0 || jo.policy.continuous_batching)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "%s: Hierarchos is recurrent and has no attention cache to page; the paged cache and continuous "
                       "batching serve Transformer decoders", model_dir);
          return FALSE;
        }
      return hn_hier_generate_job_run (job, error);
    }
  g_autoptr (HnModelConfig) mc = hn_model_config_load (model_dir, error);
  if (!mc)
    return FALSE;
  HnGenerateOptions opt;
  hn_generate_options_init (&opt);
  gboolean ok = generate_with (job, &jo, model_dir, mc, &opt, error);
  if (!ok)
    hn_generate_job_explain_numeric (error, model_dir);
  hn_generate_options_clear (&opt);
  return ok;
}
