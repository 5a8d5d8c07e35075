/* Chat templates: the Jinja2 subset that the chat_template strings of real
 * models use (Qwen2/3 with tools and <think>, Llama 3.x, Mistral, Gemma 1-3,
 * Phi-3, ChatML, Zephyr, DeepSeek, SmolLM), rendered natively with the
 * environment transformers' apply_chat_template uses: trim_blocks and
 * lstrip_blocks on, no autoescaping, `tojson` as json.dumps(ensure_ascii=False),
 * `raise_exception(msg)` and `strftime_now(fmt)` globals, loop controls
 * (break/continue) and the {% generation %} tag.
 *
 * Supported: {{ }}, {% if/elif/else %}, {% for %} (loop.index/index0/
 * revindex/revindex0/first/last/length/previtem/nextitem/cycle, for-else,
 * `for k, v in d.items()`, `for x in xs if cond`), {% set %} (names, tuples,
 * namespace attributes, block set), {% macro %}, {% filter %}, {% raw %},
 * comments, whitespace control; Python-like values and operators, slicing,
 * the common filters, tests, str/dict methods and range/namespace/dict.
 * Not supported (fail closed with HN_ERROR_UNSUPPORTED): include/import/
 * extends/block/call/with, recursive loops.
 *
 * Values print as Python would (None, True, 1.0, ['a']), as in transformers. */
#pragma once
#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef struct _HnChatTemplate HnChatTemplate;

/* A template comes from outside (a model's tokenizer_config.json), so a
 * render runs under budgets, as jinja2's sandbox (which transformers uses)
 * and minijinja do; running out is an error naming the template and the
 * limit. Integer arithmetic that leaves 64 bits is an error too, and the
 * parser refuses templates nested deeper than 256 levels. */
#define HN_CHAT_TEMPLATE_MAX_OUTPUT (32u << 20)      /* bytes of rendered text */
#define HN_CHAT_TEMPLATE_MAX_MEMORY (64u << 20)      /* bytes of values made in one render */
#define HN_CHAT_TEMPLATE_MAX_STEPS 10000000u         /* evaluated nodes plus bulk work */
#define HN_CHAT_TEMPLATE_MAX_ITERATIONS 1000000u     /* for-loop iterations, all loops together */
#define HN_CHAT_TEMPLATE_MAX_DEPTH 500               /* nested evaluation (expressions, blocks, macro calls) */
#define HN_CHAT_TEMPLATE_MAX_RANGE 100000            /* items of one range(), jinja2's sandbox MAX_RANGE */

/* Parses a template. Syntax errors are HN_ERROR_CORRUPT and say
 * "chat template: line L, column C: ...". */
HnChatTemplate *hn_chat_template_new (const char *source, GError **error);

/* The same, and the template's errors (syntax and rendering) say
 * "chat template (NAME): ..." — e.g. the file it came from. */
HnChatTemplate *hn_chat_template_new_named (const char *source, const char *name, GError **error);
void hn_chat_template_free (HnChatTemplate *tmpl);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnChatTemplate, hn_chat_template_free)

typedef struct {
  JsonNode *messages;             /* array of objects {role, content, ...} (required) */
  JsonNode *tools;                /* array of tool schemas, or NULL (then `tools` is None) */
  gboolean add_generation_prompt;
  const char *bos_token;          /* NULL: the variable is undefined */
  const char *eos_token;          /* NULL: the variable is undefined */
  JsonObject *extra;              /* more variables (enable_thinking, date_string,
                                     pad_token, ...), or NULL; they override the above */
} HnChatRenderArgs;

/* A byte range [start, end) of the rendered text that is an assistant turn's
 * output, i.e. what a model learns to produce after the generation prompt. */
typedef struct {
  int message_index;   /* index into args->messages */
  gsize start, end;
} HnChatSpan;

/* Renders the template. When `assistant_spans` (GArray of HnChatSpan) is not
 * NULL it receives one span per assistant message that produced output:
 * - if the template uses {% generation %}, those blocks (as transformers'
 *   return_assistant_tokens_mask);
 * - otherwise the output written while a for loop's variable was that
 *   message, minus the leading generation prompt header (e.g.
 *   "<|im_start|>assistant\n") and anything after the last eos_token in it.
 * Runtime errors (raise_exception, undefined values in arithmetic, bad
 * types) are HN_ERROR_INVALID_ARGUMENT naming line and column. */
char *hn_chat_template_apply (HnChatTemplate *tmpl, const HnChatRenderArgs *args,
                              GArray *assistant_spans, GError **error);

/* One-shot: parse `template_src` and render `messages` (a JSON array). */
char *hn_chat_template_render (const char *template_src, JsonNode *messages,
                               gboolean add_generation_prompt, const char *bos_token,
                               const char *eos_token, JsonObject *extra_vars, GError **error);

/* A simple message list as a JSON array node for the functions above. */
typedef struct {
  const char *role;
  const char *content;
} HnChatMessage;
JsonNode *hn_chat_messages_to_json (const HnChatMessage *messages, gsize n_messages);

G_END_DECLS
