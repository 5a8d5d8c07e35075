/* The Hierarchos "chat" and "generate" kinds: the prompt template, sampling
 * (hierarchos/hierarchos-sample.c), streaming through the job's token events,
 * carried state with state files, and the /reset /status /save /quit commands;
 * and the runtime (Vulkan or CPU) a Hierarchos job runs on. */
#include "jobs/hierarchos-job.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "jobs/hub-job.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <string.h>

#define TEMPLATE_PREFIX "User: "
#define TEMPLATE_SUFFIX "\n\nAssistant: "

/* ---- the runtime a job runs on ---- */

void
hn_hier_runtime_options_read (HnJobSpec *spec, HnHierRuntimeOptions *o)
{
  gboolean has = hn_job_spec_lookup (spec, "runtime") != NULL;
  o->runtime = has ? hn_job_spec_get_string (spec, "runtime") : "vulkan";
  o->runtime_given = has && hn_job_spec_is_set (spec, "runtime");
  o->device_index = (int) hn_job_spec_get_int (spec, "device-index");
  o->device_index_given = hn_job_spec_is_set (spec, "device-index");
}

gboolean
hn_hier_runtime_choose (const HnHierRuntimeOptions *o, HnVkContext **ctx, char **why, GError **error)
{
  *ctx = NULL;
  *why = NULL;
  const char *rt = o->runtime ? o->runtime : "auto";
  if (g_str_equal (rt, "cpu"))
    {
      *why = g_strdup ("CPU (--runtime cpu)");
      return TRUE;
    }
  gboolean any = g_str_equal (rt, "auto");
  int device = o->device_index;
  g_autoptr (GError) local = NULL;
  g_autoptr (HnVkContext) c = device >= 0 ? hn_vk_context_new (device, &local) : hn_vk_context_get_default (&local);
  if (!c)
    {
      if (any)
        {
          *why = g_strdup_printf ("CPU (--runtime auto: no Vulkan device: %s)", local->message);
          return TRUE;
        }
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (c);
  if (any && g_strcmp0 (info->type, "cpu") == 0)
    {
      *why = g_strdup_printf ("CPU (--runtime auto: %s, device %d, is a CPU-type (software) Vulkan device, many times "
                              "slower than the CPU runtime; --runtime vulkan uses it anyway)", info->name, info->index);
      return TRUE;
    }
  gboolean software = g_strcmp0 (info->type, "cpu") == 0;
  *why = any ? g_strdup_printf ("Vulkan on %s (device %d, a %s GPU; --runtime auto)", info->name, info->index,
                                info->type ? info->type : "Vulkan")
             : g_strdup_printf ("Vulkan on %s (device %d, --runtime vulkan%s)", info->name, info->index,
                                software ? "; a CPU-type (software) device: exact, but many times slower than "
                                           "--runtime cpu" : "");
  *ctx = g_steal_pointer (&c);
  return TRUE;
}

gboolean
hn_hier_exec_init (HnHierExec *x, HnJob *job, HnHierModel *m, const char *model_dir, const HnHierRuntimeOptions *rt,
                   GError **error)
{
  memset (x, 0, sizeof *x);
  x->m = m;
  x->model_dir = g_strdup (model_dir);
  g_autoptr (HnVkContext) ctx = NULL;
  g_autofree char *why = NULL;
  g_autoptr (GError) local = NULL;
  if (!hn_hier_runtime_choose (rt, &ctx, &why, &local))
    {
      g_set_error (error, HN_ERROR, local->code, "Hierarchos Vulkan runtime: %s (--runtime cpu runs the CPU runtime)",
                   local->message);
      hn_hier_exec_clear (x);
      return FALSE;
    }
  if (!ctx)
    {
      if (rt->runtime_given && g_str_equal (rt->runtime, "cpu") && rt->device_index_given)
        hn_job_log (job, HN_LOG_WARNING, "--runtime cpu: --device-index is not used");
      x->cpu = hn_hier_runner_new (m);
      x->description = g_strdup ("CPU");
      hn_job_log (job, HN_LOG_INFO, "Hierarchos runtime: %s", why);
      return TRUE;
    }
  x->vk = hn_hier_vk_runner_new (m, ctx, &local);
  if (!x->vk)
    {
      g_set_error (error, HN_ERROR, local->code == HN_ERROR_UNSUPPORTED ? HN_ERROR_UNSUPPORTED : local->code,
                   "Hierarchos Vulkan runtime: %s (--runtime cpu runs the CPU runtime)", local->message);
      hn_hier_exec_clear (x);
      return FALSE;
    }
  x->description = g_strdup_printf ("Vulkan (%s)", hn_vk_context_get_device_info (ctx)->name);
  hn_job_log (job, HN_LOG_INFO, "Hierarchos runtime: %s", why);
  return TRUE;
}

void
hn_hier_exec_clear (HnHierExec *x)
{
  g_clear_pointer (&x->cpu, hn_hier_runner_free);
  g_clear_pointer (&x->vk, hn_hier_vk_runner_free);
  g_clear_pointer (&x->description, g_free);
  g_clear_pointer (&x->model_dir, g_free);
}

gboolean
hn_hier_exec_feed (HnHierExec *x, HnHierState *s, const guint32 *tokens, gsize n, float *last, GError **error)
{
  GError *local = NULL;
  gboolean ok = TRUE;
  if (x->vk)
    ok = hn_hier_vk_runner_steps (x->vk, s, tokens, n, NULL, last, &local);
  for (gsize i = 0; ok && !x->vk && i < n; i++)
    ok = hn_hier_runner_step (x->cpu, s, tokens[i], i + 1 == n ? last : NULL, &local);
  if (ok)
    return TRUE;
  if (g_error_matches (local, HN_ERROR, HN_ERROR_NUMERIC))
    {
      /* the weights were scanned at load (hn_hier_model_load_weights refuses NaN/Inf and names the
       * tensor), and a restored chat state is checked the same way: the values overflowed here */
      g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                   "%s: %s; the weights of %s/" HN_HIER_WEIGHTS_FILE " are finite (checked at load), so the values "
                   "overflowed in the %s runtime", x->model_dir ? x->model_dir : "Hierarchos", local->message,
                   x->model_dir ? x->model_dir : ".", x->description ? x->description : "Hierarchos");
      g_error_free (local);
      return FALSE;
    }
  g_propagate_error (error, local);
  return FALSE;
}

void
hn_hier_run_options_read (HnJobSpec *spec, HnHierRunOptions *o)
{
  memset (o, 0, sizeof *o);
  gboolean chat = g_str_equal (hn_job_spec_get_kind (spec), "chat");
  o->model_dir = hn_job_spec_get_string (spec, "model-path");
  o->tokenizer_path = hn_job_spec_get_string (spec, "tokenizer-path");
  hn_hier_runtime_options_read (spec, &o->runtime);
  hn_hier_sampling_defaults (&o->sampling);
  o->sampling.temperature = hn_job_spec_get_bool (spec, "do-sample") ? hn_job_spec_get_double (spec, "temperature") : 0.0;
  o->sampling.top_k = (int) hn_job_spec_get_int (spec, "top-k");
  o->sampling.top_p = hn_job_spec_get_double (spec, "top-p");
  o->sampling.repetition_penalty = hn_job_spec_get_double (spec, "repetition-penalty");
  o->max_new_tokens = hn_job_spec_get_int (spec, "max-new-tokens");
  o->seed = (guint64) hn_job_spec_get_int (spec, "seed");
  o->stop = hn_job_spec_get_strv (spec, "stop");
  static const char *const empty[] = { NULL };
  o->prompts = o->input_ids = empty;
  if (chat)
    {
      o->carry_state = hn_job_spec_get_bool (spec, "carry-chat-state");
      o->raw_prompt = hn_job_spec_get_bool (spec, "raw-prompt");
      o->state_file = hn_job_spec_get_string (spec, "chat-state-file");
      o->resume_state_file = hn_job_spec_get_string (spec, "resume-chat-from-state-file");
      o->paged_cache = g_strcmp0 (hn_job_spec_get_string (spec, "cache-implementation"), "paged") == 0;
      o->lora_adapter = hn_job_spec_is_set (spec, "lora-adapter-path");
    }
  else
    {
      o->prompts = hn_job_spec_get_strv (spec, "prompt");
      o->input_ids = hn_job_spec_get_strv (spec, "input-ids");
      o->prompt_file = hn_job_spec_get_string (spec, "prompt-file");
      o->beams = hn_job_spec_get_int (spec, "num-beams") > 1 || hn_job_spec_get_int (spec, "num-return-sequences") > 1;
    }
  /* what only the Transformer kinds implement fails closed in the run functions */
  static const char *const chat_only[] = { "system-prompt", "chat-template", "generation-config", "bad-words-ids",
                                           "suppress-tokens", "eos-token-id", "no-repeat-ngram-size", "num-beams",
                                           "min-new-tokens", "typical-p", "epsilon-cutoff", "eta-cutoff", NULL };
  static const char *const generate_only[] = { "lora-adapter-path", "output-json", "continuous-batching",
                                               "generation-config", "bad-words-ids", "suppress-tokens",
                                               "no-repeat-ngram-size", NULL };
  for (const char *const *u = chat ? chat_only : generate_only; *u && !o->unsupported; u++)
    if (hn_job_spec_lookup (spec, *u) && hn_job_spec_is_set (spec, *u))
      o->unsupported = *u;
}

typedef struct {
  HnJob *job;
  HnHierModel *m;
  HnTokenizer *tok;
  HnHierExec *exec;
  HnHierState *state;
  HnHierSampling sampling;
  float *logits;
  gboolean have_logits; /* logits of the state's last token are current */
  gboolean carry, raw;
  gint64 max_new;
  guint64 seed;
  const char *state_file;
  const char *const *stops;
} Chat;

static gboolean
feed (Chat *c, const GArray *ids, GError **error)
{
  if (!hn_job_check_cancelled (c->job, error))
    return FALSE;
  for (guint i = 0; i < ids->len; i++)
    {
      gint32 id = g_array_index (ids, int32_t, i);
      if (id < 0 || id >= c->m->V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token %d is outside the model's vocabulary (%d)", id, c->m->V);
          return FALSE;
        }
    }
  if (ids->len && !hn_hier_exec_feed (c->exec, c->state, (const guint32 *) ids->data, ids->len, c->logits, error))
    return FALSE;
  c->have_logits = ids->len > 0 || c->have_logits;
  return TRUE;
}

/* One reply; returns the number of generated tokens or -1. */
static gint64
reply (Chat *c, const char *input, GError **error)
{
  if (!c->carry)
    {
      hn_hier_state_reset (c->m, c->state);
      c->have_logits = FALSE;
    }
  g_autofree char *text = c->raw ? g_strdup (input) : g_strconcat (TEMPLATE_PREFIX, input, TEMPLATE_SUFFIX, NULL);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  /* Special tokens (BOS) only at the very start of a conversation. */
  if (!hn_tokenizer_encode (c->tok, text, -1, c->state->position == 0, ids, error))
    return -1;
  if (ids->len == 0 && !c->have_logits)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the prompt is empty");
      return -1;
    }
  /* The sampler stream is a function of the seed and the position where the
   * reply starts, so a restored state continues exactly as the original. */
  HnRng rng;
  hn_rng_seed (&rng, c->seed ^ (0x9e3779b97f4a7c15ULL * (guint64) (c->state->position + ids->len + 1)));
  if (!feed (c, ids, error))
    return -1;
  g_autoptr (HnTokenDecoder) dec = hn_token_decoder_new (c->tok, TRUE);
  g_autoptr (GString) out = g_string_new (NULL);
  g_autofree float *work = g_new (float, c->m->V);
  gint64 n = 0;
  for (; n < c->max_new; n++)
    {
      if (!hn_job_check_cancelled (c->job, error))
        return -1;
      memcpy (work, c->logits, (gsize) c->m->V * sizeof (float));
      guint32 id = hn_hier_sample (&c->sampling, work, c->m->V, c->state->history, &rng);
      if (hn_tokenizer_is_eos (c->tok, (int32_t) id))
        break;
      g_autofree char *piece = hn_token_decoder_push (dec, (int32_t) id, error);
      if (!piece)
        return -1;
      hn_job_emit_token (c->job, 0, (gint32) id, piece);
      g_string_append (out, piece);
      if (!hn_hier_exec_feed (c->exec, c->state, &id, 1, c->logits, error))
        return -1;
      gboolean stop = FALSE;
      for (int s = 0; c->stops && c->stops[s]; s++)
        if (*c->stops[s] && g_str_has_suffix (out->str, c->stops[s]))
          stop = TRUE;
      if (stop)
        {
          n++;
          break;
        }
    }
  g_autofree char *rest = hn_token_decoder_flush (dec);
  if (rest && *rest)
    hn_job_emit_token (c->job, 0, -1, rest);
  return n;
}

static gboolean
save_state (Chat *c, const char *path, GError **error)
{
  if (!hn_hier_state_save (c->m, c->state, path, error))
    return FALSE;
  hn_job_log (c->job, HN_LOG_INFO, "state saved to %s (position %" G_GINT64_FORMAT ")", path, c->state->position);
  return TRUE;
}

static gboolean chat_loop (HnJob *job, const HnHierRunOptions *o, HnHierModel *m, HnTokenizer *tok, HnHierExec *exec,
                           GError **error);

gboolean
hn_hier_chat_job_run (HnJob *job, GError **error)
{
  HnHierRunOptions o;
  hn_hier_run_options_read (hn_job_get_spec (job), &o);
  g_autofree char *dir = hn_hub_job_model_dir (job, error);
  if (!dir)
    return FALSE;
  if (!hn_hier_is_model_dir (dir))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s is not a Hierarchos model folder (config.json with "
                   "model_type \"hierarchos\")", dir);
      return FALSE;
    }
  if (o.paged_cache)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "--cache-implementation paged: Hierarchos is recurrent and has no attention cache to page");
      return FALSE;
    }
  if (o.lora_adapter)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "LoRA adapters do not apply to Hierarchos models");
      return FALSE;
    }
  /* what only the Transformer chat implements fails closed here */
  if (o.unsupported)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: --%s is not supported for Hierarchos models (it uses "
                   "its own \"User: ...\\n\\nAssistant: \" template and sampler)", dir, o.unsupported);
      return FALSE;
    }
  g_autoptr (HnHierModel) m = hn_hier_model_load (dir, error);
  if (!m)
    return FALSE;
  g_autofree char *tp = hn_hub_job_tokenizer_path (job, error);
  if (!tp && error && *error)
    return FALSE;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tp ? tp : dir, error);
  if (!tok)
    return FALSE;
  if (hn_tokenizer_get_vocab_size (tok) > m->V)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the tokenizer has %d tokens, the model %d",
                   hn_tokenizer_get_vocab_size (tok), m->V);
      return FALSE;
    }
  HnHierExec exec;
  if (!hn_hier_exec_init (&exec, job, m, dir, &o.runtime, error))
    return FALSE;
  gboolean ok = chat_loop (job, &o, m, tok, &exec, error);
  hn_hier_exec_clear (&exec);
  return ok;
}

static gboolean
chat_loop (HnJob *job, const HnHierRunOptions *o, HnHierModel *m, HnTokenizer *tok, HnHierExec *exec, GError **error)
{
  g_autoptr (HnHierState) state = hn_hier_state_new (m);
  g_autofree float *logits = g_new0 (float, m->V);
  Chat c = { job, m, tok, exec, state };
  c.sampling = o->sampling;
  c.logits = logits;
  c.carry = o->carry_state;
  c.raw = o->raw_prompt;
  c.max_new = o->max_new_tokens;
  c.seed = o->seed;
  c.state_file = o->state_file;
  c.stops = o->stop;
  const char *resume = o->resume_state_file;
  if (resume)
    {
      if (!hn_hier_state_load (m, state, resume, error))
        return FALSE;
      if (!c.carry)
        hn_job_log (job, HN_LOG_INFO, "--resume-chat-from-state-file implies --carry-chat-state");
      c.carry = TRUE;
      /* The logits after the last restored token are recomputed lazily: the
       * next prompt's tokens produce fresh ones. */
      hn_job_log (job, HN_LOG_INFO, "resumed chat state at position %" G_GINT64_FORMAT, state->position);
    }

  for (;;)
    {
      g_autoptr (GError) in_err = NULL;
      g_autofree char *input = hn_job_pop_input (job, &in_err);
      if (!input)
        {
          if (in_err)
            {
              g_propagate_error (error, g_steal_pointer (&in_err));
              return FALSE;
            }
          break;
        }
      g_strchomp (input);
      if (strcmp (input, "/quit") == 0 || strcmp (input, "/exit") == 0)
        break;
      if (strcmp (input, "/reset") == 0)
        {
          hn_hier_state_reset (m, state);
          c.have_logits = FALSE;
          hn_job_log (job, HN_LOG_INFO, "state reset");
          hn_job_emit_turn_end (job, 0);
          continue;
        }
      if (strcmp (input, "/status") == 0)
        {
          hn_job_log (job, HN_LOG_INFO, "Hierarchos %s, contract %.12s, vocab %d, context %d; position %" G_GINT64_FORMAT
                      ", ROSA %u tokens; carry-chat-state %s; state file %s; runtime %s", m->cfg.architecture_revision,
                      m->contract_sha256, m->V, m->C, state->position, state->rosa.tokens->len, c.carry ? "on" : "off",
                      c.state_file ? c.state_file : "(none)", exec->description);
          hn_job_emit_turn_end (job, 0);
          continue;
        }
      if (strcmp (input, "/save") == 0 || g_str_has_prefix (input, "/save "))
        {
          const char *path = input[5] ? g_strstrip (input + 6) : c.state_file;
          if (!path || !*path)
            hn_job_log (job, HN_LOG_WARNING, "/save needs a path (or --chat-state-file)");
          else if (!save_state (&c, path, error))
            return FALSE;
          hn_job_emit_turn_end (job, 0);
          continue;
        }
      if (input[0] == '/' && input[1] && !g_ascii_isspace (input[1]) && !strchr (input, ' '))
        {
          hn_job_log (job, HN_LOG_WARNING, "unknown command %s (commands: /reset /status /save [FILE] /quit)", input);
          hn_job_emit_turn_end (job, 0);
          continue;
        }
      gint64 n = reply (&c, input, error);
      if (n < 0)
        return FALSE;
      hn_job_emit_turn_end (job, (guint) n);
      if (c.state_file && !save_state (&c, c.state_file, error))
        return FALSE;
    }
  return TRUE;
}

/* ---- generate ---- */

static gboolean
generate_prompts (const HnHierRunOptions *o, HnTokenizer *tok, GPtrArray *prompts, GError **error)
{
  for (const char *const *ids_text = o->input_ids; *ids_text; ids_text++)
    {
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_ptr_array_add (prompts, ids);
      g_auto (GStrv) parts = g_strsplit (*ids_text, ",", -1);
      for (char **p = parts; *p; p++)
        {
          gint64 v;
          if (!g_ascii_string_to_signed (g_strstrip (*p), 10, 0, G_MAXINT32, &v, NULL))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--input-ids: '%s' is not a token id", *p);
              return FALSE;
            }
          gint32 id = (gint32) v;
          g_array_append_val (ids, id);
        }
    }
  g_autoptr (GPtrArray) texts = g_ptr_array_new_with_free_func (g_free);
  for (const char *const *p = o->prompts; *p; p++)
    g_ptr_array_add (texts, g_strdup (*p));
  const char *pf = o->prompt_file;
  if (pf)
    {
      g_autofree char *content = NULL;
      if (!hn_file_read_bounded (pf, HN_MAX_TEXT_BYTES, "prompt file", &content, NULL, error))
        return FALSE;
      g_auto (GStrv) lines = g_strsplit (content, "\n", -1);
      for (char **l = lines; *l; l++)
        if (**l)
          g_ptr_array_add (texts, g_strdup (*l));
    }
  for (guint i = 0; i < texts->len; i++)
    {
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_ptr_array_add (prompts, ids);
      if (!hn_tokenizer_encode (tok, g_ptr_array_index (texts, i), -1, TRUE, ids, error))
        return FALSE;
    }
  if (prompts->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "give --prompt, --prompt-file or --input-ids");
      return FALSE;
    }
  return TRUE;
}

static gboolean
generate_one (HnJob *job, HnHierExec *exec, HnTokenizer *tok, const HnHierSampling *smp, guint seq,
              const GArray *prompt, gint64 max_new, guint64 seed, GError **error)
{
  HnHierModel *m = exec->m;
  g_autoptr (HnHierState) state = hn_hier_state_new (m);
  g_autofree float *logits = g_new (float, m->V);
  if (prompt->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "prompt %u is empty", seq);
      return FALSE;
    }
  for (guint i = 0; i < prompt->len; i++)
    if (g_array_index (prompt, int32_t, i) >= m->V)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token %d is outside the model's vocabulary (%d)",
                     g_array_index (prompt, int32_t, i), m->V);
        return FALSE;
      }
  HnRng rng;
  hn_rng_seed (&rng, seed ^ (0x9e3779b97f4a7c15ULL * (guint64) (seq + 1)));
  gint64 t0 = g_get_monotonic_time ();
  if (!hn_hier_exec_feed (exec, state, (const guint32 *) prompt->data, prompt->len, logits, error))
    return FALSE;
  gint64 t1 = g_get_monotonic_time ();
  g_autoptr (HnTokenDecoder) dec = hn_token_decoder_new (tok, TRUE);
  const char *stop = "max-new-tokens";
  gint64 n = 0;
  for (; n < max_new; n++)
    {
      if (!hn_job_check_cancelled (job, error))
        return FALSE;
      guint32 id = hn_hier_sample (smp, logits, m->V, state->history, &rng);
      if (hn_tokenizer_is_eos (tok, (int32_t) id))
        {
          stop = "eos";
          break;
        }
      g_autofree char *piece = hn_token_decoder_push (dec, (int32_t) id, error);
      if (!piece)
        return FALSE;
      hn_job_emit_token (job, seq, (gint32) id, piece);
      hn_job_emit_progress (job, HN_PROGRESS_TOKENS, n + 1, max_new, n + 1);
      if (n + 1 < max_new && !hn_hier_exec_feed (exec, state, &id, 1, logits, error))
        return FALSE;
    }
  g_autofree char *rest = hn_token_decoder_flush (dec);
  if (rest && *rest)
    hn_job_emit_token (job, seq, -1, rest);
  hn_job_emit_token (job, seq, -1, "\n");
  double secs = (double) (g_get_monotonic_time () - t1) / 1e6;
  hn_job_log (job, HN_LOG_INFO, "prompt %u: %u prompt tokens (%.3f s), %" G_GINT64_FORMAT " generated in %.2f s "
              "(%.1f tokens/s, %s runtime), stop: %s", seq, prompt->len, (double) (t1 - t0) / 1e6, n, secs,
              (double) n / MAX (secs, 1e-9), exec->description, stop);
  return TRUE;
}

gboolean
hn_hier_generate_job_run (HnJob *job, GError **error)
{
  HnHierRunOptions o;
  hn_hier_run_options_read (hn_job_get_spec (job), &o);
  const char *dir = o.model_dir;
  /* What only Transformer generation implements fails closed here. */
  if (o.unsupported)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "--%s is not supported for Hierarchos models", o.unsupported);
      return FALSE;
    }
  if (o.beams)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "beam search and several return sequences are not "
                   "supported for Hierarchos models");
      return FALSE;
    }
  g_autoptr (HnHierModel) m = hn_hier_model_load (dir, error);
  if (!m)
    return FALSE;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (o.tokenizer_path ? o.tokenizer_path : dir, error);
  if (!tok)
    return FALSE;
  g_autoptr (GPtrArray) prompts = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  if (!generate_prompts (&o, tok, prompts, error))
    return FALSE;
  HnHierExec exec;
  if (!hn_hier_exec_init (&exec, job, m, dir, &o.runtime, error))
    return FALSE;
  gboolean ok = TRUE;
  for (guint i = 0; ok && i < prompts->len; i++)
    ok = generate_one (job, &exec, tok, &o.sampling, i, g_ptr_array_index (prompts, i), o.max_new_tokens, o.seed, error);
  hn_hier_exec_clear (&exec);
  return ok;
}
