/* The "chat" job kind for Transformer decoders: the job keeps the messages
 * list; every turn renders the whole conversation with the model's chat
 * template (add_generation_prompt), tokenizes it as apply_chat_template
 * does and generates the reply with the transformer-generate policy
 * (generation_config.json, EOS and stop tokens, the sampling flags),
 * streaming its tokens. Hierarchos model folders go to their own chat. */
#include "jobs/generate-job.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "jobs/hub-job.h"
#include "jobs/hierarchos-job.h"

#include <string.h>

gboolean
hn_chat_render_ids (HnChatTemplate *tmpl, HnTokenizer *tok, JsonNode *messages, GArray *ids, GError **error)
{
  HnChatRenderArgs args = { messages, NULL, TRUE, hn_tokenizer_get_bos_token (tok), hn_tokenizer_get_eos_token (tok),
                            NULL };
  g_autofree char *text = hn_chat_template_apply (tmpl, &args, NULL, error);
  /* the template writes the special tokens (BOS, role markers) itself */
  return text && hn_tokenizer_encode (tok, text, -1, FALSE, ids, error);
}

typedef struct {
  HnJob *job;
  HnTransformer *model;
  HnTokenizer *tok;
  HnChatTemplate *tmpl; /* NULL with --raw-prompt */
  const HnGenerateOptions *opt;
  HnKvCacheMode mode;
  const char *system;
  JsonArray *messages; /* the conversation so far */
  GArray *raw_ids;     /* --raw-prompt: the transcript's ids (prompts and replies) */
  HnTokenDecoder *dec;
  gint64 n_tokens;
  GError *stream_error;
  gint64 max_positions;      /* config.json's max_position_embeddings (<= 0: none) */
  gboolean warned_positions; /* once per conversation */
} Chat;

static void
add_message (JsonArray *messages, const char *role, const char *content)
{
  JsonObject *m = json_object_new ();
  json_object_set_string_member (m, "role", role);
  json_object_set_string_member (m, "content", content);
  json_array_add_object_element (messages, m);
}

static void
reset (Chat *c)
{
  json_array_unref (c->messages);
  c->messages = json_array_new ();
  if (c->system && *c->system)
    add_message (c->messages, "system", c->system);
  g_array_set_size (c->raw_ids, 0);
  c->warned_positions = FALSE;
}

/* transformers warns the same way (generate's warn_positions): a conversation
 * grows by every turn, so this is checked before each reply, once per
 * conversation */
static void
warn_positions (Chat *c, guint n_prompt)
{
  gint64 total = c->opt->max_new_tokens > 0 ? (gint64) n_prompt + c->opt->max_new_tokens
                                            : MAX ((gint64) n_prompt, (gint64) c->opt->max_length);
  if (c->max_positions <= 0 || c->warned_positions || total <= c->max_positions)
    return;
  c->warned_positions = TRUE;
  hn_job_log (c->job, HN_LOG_WARNING,
              "the conversation may reach %" G_GINT64_FORMAT " tokens (%u in the prompt), past the model's "
              "max_position_embeddings (%" G_GINT64_FORMAT "): positions after it are outside what the model was "
              "trained on, and replies may degrade (/reset starts a new conversation)",
              total, n_prompt, c->max_positions);
}

static void
on_token (gpointer data, int32_t id)
{
  Chat *c = data;
  c->n_tokens++;
  g_autofree char *piece = NULL;
  if (!c->stream_error)
    piece = hn_token_decoder_push (c->dec, id, &c->stream_error);
  hn_job_emit_token (c->job, 0, id, piece ? piece : "");
  hn_job_emit_progress (c->job, HN_PROGRESS_TOKENS, c->n_tokens, c->opt->max_new_tokens, c->n_tokens);
}

static char *
decode_text (gpointer data, const int32_t *ids, int n)
{
  return hn_tokenizer_decode (data, ids, (gsize) n, TRUE, NULL);
}

/* One turn: the user's text in, the reply streamed; returns the generated count or -1. */
static gint64
reply (Chat *c, const char *input, GError **error)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  if (c->tmpl)
    {
      add_message (c->messages, "user", input);
      g_autoptr (JsonNode) node = json_node_new (JSON_NODE_ARRAY);
      json_node_set_array (node, c->messages);
      if (!hn_chat_render_ids (c->tmpl, c->tok, node, ids, error))
        return -1;
    }
  else
    {
      /* special tokens (BOS) only where the transcript starts */
      if (!hn_tokenizer_encode (c->tok, input, -1, c->raw_ids->len == 0, c->raw_ids, error))
        return -1;
      g_array_append_vals (ids, c->raw_ids->data, c->raw_ids->len);
    }
  if (ids->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the prompt is empty");
      return -1;
    }
  warn_positions (c, ids->len);
  c->dec = hn_token_decoder_new (c->tok, TRUE);
  c->n_tokens = 0;
  g_autoptr (HnGenerateResult) r =
    hn_transformer_generate (c->model, c->mode, c->opt, (const int32_t *) ids->data, (int) ids->len, decode_text, c->tok,
                             c->opt->num_beams == 1 ? on_token : NULL, c, hn_job_get_cancellable (c->job), error);
  g_autofree char *rest = hn_token_decoder_flush (c->dec);
  g_clear_pointer (&c->dec, hn_token_decoder_free);
  g_clear_error (&c->stream_error);
  if (!r)
    {
      if (error && *error && !g_error_matches (*error, HN_ERROR, HN_ERROR_CANCELLED))
        g_prefix_error (error, "the conversation's %u prompt tokens (/reset starts a new one): ", ids->len);
      return -1;
    }
  GArray *out = g_ptr_array_index (r->sequences, 0);
  g_autofree char *text = hn_tokenizer_decode (c->tok, (const int32_t *) out->data, out->len, TRUE, error);
  if (!text)
    return -1;
  if (c->opt->num_beams > 1) /* beam results are only known at the end */
    hn_job_emit_token (c->job, 0, -1, text);
  else if (rest && *rest)
    hn_job_emit_token (c->job, 0, -1, rest);
  if (c->tmpl)
    add_message (c->messages, "assistant", text);
  else
    g_array_append_vals (c->raw_ids, out->data, out->len);
  hn_job_log (c->job, HN_LOG_INFO, "turn: %d prompt tokens, %d generated in %.2f s (%.1f tokens/s), stop: %s",
              r->n_prompt, r->n_generated, r->seconds, r->n_generated / MAX (r->seconds, 1e-9), r->stop_reason);
  return out->len;
}

static gboolean
chat_loop (Chat *c, GError **error)
{
  for (;;)
    {
      g_autoptr (GError) in_err = NULL;
      g_autofree char *input = hn_job_pop_input (c->job, &in_err);
      if (!input)
        {
          if (in_err)
            {
              g_propagate_error (error, g_steal_pointer (&in_err));
              return FALSE;
            }
          return TRUE;
        }
      g_strchomp (input);
      if (strcmp (input, "/quit") == 0 || strcmp (input, "/exit") == 0)
        return TRUE;
      if (strcmp (input, "/reset") == 0)
        {
          reset (c);
          hn_job_log (c->job, HN_LOG_INFO, "conversation reset");
          hn_job_emit_turn_end (c->job, 0);
          continue;
        }
      if (input[0] == '/' && input[1] && !g_ascii_isspace (input[1]) && !strchr (input, ' '))
        {
          hn_job_log (c->job, HN_LOG_WARNING, "unknown command %s (commands: /reset /quit)", input);
          hn_job_emit_turn_end (c->job, 0);
          continue;
        }
      gint64 n = reply (c, input, error);
      if (n < 0)
        return FALSE;
      hn_job_emit_turn_end (c->job, (guint) n);
    }
}

/* The options of a Transformer chat, read once from the spec (strings belong to it). */
typedef struct {
  HnGeneratePolicy policy;
  const char *chat_template, *adapter_path, *system_prompt;
  gboolean raw_prompt;
  int device_index;
  const char *hier_only; /* the first Hierarchos-only flag given, or NULL */
} ChatOptions;

static void
chat_options_read (HnJobSpec *spec, ChatOptions *o)
{
  memset (o, 0, sizeof *o);
  hn_generate_policy_read (spec, &o->policy);
  o->chat_template = hn_job_spec_get_string (spec, "chat-template");
  o->adapter_path = hn_job_spec_get_string (spec, "lora-adapter-path");
  o->system_prompt = hn_job_spec_get_string (spec, "system-prompt");
  o->raw_prompt = hn_job_spec_get_bool (spec, "raw-prompt");
  o->device_index = (int) hn_job_spec_get_int (spec, "device-index");
  const char *const hier_only[] = { "carry-chat-state", "chat-state-file", "resume-chat-from-state-file", NULL };
  for (int i = 0; hier_only[i] && !o->hier_only; i++)
    if (hn_job_spec_is_set (spec, hier_only[i]))
      o->hier_only = hier_only[i];
}

/* The template: --chat-template FILE, else the tokenizer folder's chat_template.jinja (where
 * transformers saves it), else tokenizer_config.json's; none fails unless --raw-prompt. */
static HnChatTemplate *
load_template (const ChatOptions *o, HnTokenizer *tok, const char *tok_dir, const char *model_dir, GError **error)
{
  const char *path = o->chat_template;
  g_autofree char *jinja = g_build_filename (tok_dir, "chat_template.jinja", NULL);
  if (!path && g_file_test (jinja, G_FILE_TEST_IS_REGULAR))
    path = jinja;
  g_autofree char *src = NULL;
  if (path && !hn_file_read_bounded (path, HN_MAX_TEMPLATE_BYTES, "chat template", &src, NULL, error))
    return NULL;
  const char *text = src ? src : hn_tokenizer_get_chat_template (tok);
  if (!text)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: the tokenizer (%s) has no chat_template in tokenizer_config.json; give --chat-template FILE, "
                   "or --raw-prompt to send the text as it is", model_dir, hn_tokenizer_get_path (tok));
      return NULL;
    }
  g_autofree char *name = path ? g_strdup (path) : g_strdup_printf ("tokenizer_config.json of %s", hn_tokenizer_get_path (tok));
  return hn_chat_template_new_named (text, name, error);
}

/* The Hierarchos-only flags fail closed for Transformer models. */
static gboolean
check_flags (const ChatOptions *o, const char *model_dir, GError **error)
{
  if (o->hier_only)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: --%s is for Hierarchos models; a Transformer chat "
                   "renders the whole conversation every turn", model_dir, o->hier_only);
      return FALSE;
    }
  if (o->raw_prompt && o->chat_template)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--raw-prompt skips the chat template; --chat-template "
                   "cannot be used with it");
      return FALSE;
    }
  return TRUE;
}

static gboolean
transformer_chat (HnJob *job, const char *model_dir, HnGenerateOptions *opt, GError **error)
{
  ChatOptions co;
  chat_options_read (hn_job_get_spec (job), &co);
  if (!check_flags (&co, model_dir, error))
    return FALSE;
  g_autoptr (HnModelConfig) mc = hn_model_config_load (model_dir, error);
  HnKvCacheMode mode;
  if (!mc || !hn_generate_job_policy (job, &co.policy, model_dir, mc, opt, &mode, error))
    return FALSE;
  g_autofree char *tp = hn_hub_job_tokenizer_path (job, error);
  if (!tp && error && *error)
    return FALSE;
  /* an adapter folder written by the trainer carries the tokenizer and template it was trained with */
  const char *adapter_dir = co.adapter_path;
  g_autofree char *adapter_tok = adapter_dir ? g_build_filename (adapter_dir, "tokenizer_config.json", NULL) : NULL;
  if (!tp && adapter_tok && g_file_test (adapter_tok, G_FILE_TEST_IS_REGULAR))
    {
      tp = g_strdup (adapter_dir);
      hn_job_log (job, HN_LOG_INFO, "tokenizer and chat template from the adapter folder %s", adapter_dir);
    }
  const char *tok_dir = tp ? tp : model_dir;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tok_dir, error);
  if (!tok)
    return FALSE;
  gboolean raw = co.raw_prompt;
  g_autoptr (HnChatTemplate) tmpl = raw ? NULL : load_template (&co, tok, tok_dir, model_dir, error);
  if (!raw && !tmpl)
    return FALSE;
  if (opt->eos_token_ids->len == 0)
    {
      gsize n_eos;
      const int32_t *eos = hn_tokenizer_get_eos_ids (tok, &n_eos);
      g_array_append_vals (opt->eos_token_ids, eos, (guint) n_eos);
    }
  if (opt->num_return_sequences > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "a chat reply is one sequence (num_return_sequences %d)",
                   opt->num_return_sequences);
      return FALSE;
    }

  g_autoptr (HnVkContext) ctx = hn_vk_context_new (co.device_index, error);
  const HnArchInfo *arch = ctx ? hn_arch_lookup (mc->model_type, error) : NULL;
  if (!arch)
    return FALSE;
  if (hn_arch_is_encoder (arch) || hn_arch_is_seq2seq (arch))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is %s; chat runs decoder-only models "
                   "(transformer-generate continues text with encoder-decoders)", model_dir, arch->model_type,
                   hn_arch_is_encoder (arch) ? "an encoder" : "an encoder-decoder");
      return FALSE;
    }
  g_autoptr (HnTransformer) model = hn_transformer_load (ctx, model_dir, error);
  if (!model || !hn_arch_require_task (arch, HN_TASK_GENERATE, error) ||
      (mode == HN_KV_CACHE_PAGED && !hn_transformer_check_pageable (model, error)))
    return FALSE;
  if (adapter_dir && !hn_generate_job_attach_adapter (job, model, adapter_dir, error))
    return FALSE;
  g_autofree char *dropped = hn_generate_options_drop_outside_vocab (opt, hn_transformer_get_hparams (model)->vocab);
  if (dropped)
    hn_job_log (job, HN_LOG_WARNING, "%s: %s", model_dir, dropped);
  hn_job_log (job, HN_LOG_INFO, "%s (%s), %.1f MB of weights, %s", model_dir, arch->model_type,
              hn_transformer_get_weight_bytes (model) / 1e6, raw ? "raw prompts" : "chat template");

  Chat c = { job, model, tok, tmpl, opt, mode, co.system_prompt, json_array_new (),
             g_array_new (FALSE, FALSE, sizeof (int32_t)), .max_positions = mc->max_position_embeddings };
  if (raw && c.system)
    hn_job_log (job, HN_LOG_WARNING, "--raw-prompt: --system-prompt is not used (it is a chat template message)");
  reset (&c);
  gboolean ok = chat_loop (&c, error);
  json_array_unref (c.messages);
  g_array_unref (c.raw_ids);
  return ok;
}

gboolean
hn_chat_job_run (HnJob *job, GError **error)
{
  g_autofree char *model_dir = hn_hub_job_model_dir (job, error);
  if (!model_dir)
    return FALSE;
  if (hn_hier_is_model_dir (model_dir))
    return hn_hier_chat_job_run (job, error);
  HnGenerateOptions opt;
  hn_generate_options_init (&opt);
  gboolean ok = transformer_chat (job, model_dir, &opt, error);
  if (!ok)
    hn_generate_job_explain_numeric (error, model_dir);
  hn_generate_options_clear (&opt);
  return ok;
}
