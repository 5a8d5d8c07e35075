/* Chat with a Hierarchos model: the prompt template, sampling (the engine's
 * transformers-exact logits processors), streaming through the job's token
 * events, carried state with state files, and the /reset /status /save /quit
 * commands. */
#include "models/hierarchos-private.h"
#include "generate/logits-process.h"
#include "hn-error.h"
#include "io/hub-job.h"
#include "io/tokenizer.h"

#include <math.h>
#include <string.h>

#define TEMPLATE_PREFIX "User: "
#define TEMPLATE_SUFFIX "\n\nAssistant: "

void
hn_hier_sampling_defaults (HnHierSampling *s)
{
  s->temperature = 0.7;
  s->top_k = 40;
  s->top_p = 0.9;
  s->repetition_penalty = 1.2;
}

guint32
hn_hier_sample (const HnHierSampling *s, float *logits, int V, const GArray *history, HnRng *rng)
{
  if (s->repetition_penalty != 1.0 && history && history->len)
    {
      g_autofree int32_t *ids = g_new (int32_t, history->len);
      for (guint i = 0; i < history->len; i++)
        ids[i] = (int32_t) g_array_index (history, guint32, i);
      hn_logits_repetition_penalty (logits, V, ids, (int) history->len, s->repetition_penalty);
    }
  if (s->temperature <= 0)
    return (guint32) hn_argmax (logits, V);
  hn_logits_temperature (logits, V, s->temperature);
  if (s->top_k > 0)
    hn_logits_top_k (logits, V, s->top_k, 1);
  if (s->top_p < 1.0)
    hn_logits_top_p (logits, V, s->top_p, 1);
  int id = hn_sample_categorical (rng, logits, V);
  return id < 0 ? (guint32) hn_argmax (logits, V) : (guint32) id;
}

typedef struct {
  HnJob *job;
  HnHierModel *m;
  HnTokenizer *tok;
  HnHierRunner *runner;
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
  for (guint i = 0; i < ids->len; i++)
    {
      if (!hn_job_check_cancelled (c->job, error))
        return FALSE;
      gint32 id = g_array_index (ids, int32_t, i);
      if (id < 0 || id >= c->m->V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token %d is outside the model's vocabulary (%d)", id, c->m->V);
          return FALSE;
        }
      if (!hn_hier_runner_step (c->runner, c->state, (guint32) id, c->logits, error))
        return FALSE;
    }
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
      if (!hn_hier_runner_step (c->runner, c->state, id, c->logits, error))
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

gboolean
hn_hier_chat_job_run (HnJob *job, GError **error)
{
  HnJobSpec *spec = hn_job_get_spec (job);
  g_autofree char *dir = hn_hub_job_model_dir (job, error);
  if (!dir)
    return FALSE;
  if (!hn_hier_is_model_dir (dir))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s is not a Hierarchos model folder (config.json with "
                   "model_type \"hierarchos\"); chat with Transformer models is handled elsewhere", dir);
      return FALSE;
    }
  if (hn_job_spec_lookup (spec, "lora-adapter-path") && hn_job_spec_is_set (spec, "lora-adapter-path"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "LoRA adapters do not apply to Hierarchos models");
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
  g_autoptr (HnHierRunner) runner = hn_hier_runner_new (m);
  g_autoptr (HnHierState) state = hn_hier_state_new (m);
  g_autofree float *logits = g_new0 (float, m->V);
  Chat c = { job, m, tok, runner, state };
  hn_hier_sampling_defaults (&c.sampling);
  c.logits = logits;
  c.carry = hn_job_spec_get_bool (spec, "carry-chat-state");
  c.raw = hn_job_spec_get_bool (spec, "raw-prompt");
  c.max_new = hn_job_spec_get_int (spec, "max-new-tokens");
  c.seed = (guint64) hn_job_spec_get_int (spec, "seed");
  c.state_file = hn_job_spec_get_string (spec, "chat-state-file");
  c.stops = hn_job_spec_get_strv (spec, "stop");
  c.sampling.temperature = hn_job_spec_get_bool (spec, "do-sample") ? hn_job_spec_get_double (spec, "temperature") : 0.0;
  c.sampling.top_k = (int) hn_job_spec_get_int (spec, "top-k");
  c.sampling.top_p = hn_job_spec_get_double (spec, "top-p");
  c.sampling.repetition_penalty = hn_job_spec_get_double (spec, "repetition-penalty");
  const char *resume = hn_job_spec_get_string (spec, "resume-chat-from-state-file");
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
                      ", ROSA %u tokens; carry-chat-state %s; state file %s", m->cfg.architecture_revision,
                      m->contract_sha256, m->V, m->C, state->position, state->rosa.tokens->len, c.carry ? "on" : "off",
                      c.state_file ? c.state_file : "(none)");
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
