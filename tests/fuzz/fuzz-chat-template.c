/* Chat templates (the Jinja subset): parse, then render a fixed conversation
 * with and without the generation prompt, collecting assistant spans. An
 * optional JSON messages array may follow the template after a NUL byte. */
#include "fuzz-common.h"
#include "template/chat-template.h"

#include <json-glib/json-glib.h>
#include <string.h>

static const char default_messages[] =
  "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
  "{\"role\":\"user\",\"content\":\"Hi <b>there</b>\"},"
  "{\"role\":\"assistant\",\"content\":\"Hello!\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
  "{\"name\":\"f\",\"arguments\":{\"x\":1.5,\"y\":[true,null]}}}]},"
  "{\"role\":\"tool\",\"content\":\"42\"},"
  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"more\"}]}]";

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  fuzz_tmp_dir ();
  const uint8_t *parts[2];
  size_t lens[2];
  guint n = fuzz_split (data, size, parts, lens, 2);
  g_autofree char *src = g_strndup ((const char *) parts[0], lens[0]);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnChatTemplate) tmpl = hn_chat_template_new (src, &error);
  if (!tmpl)
    return 0;
  g_autoptr (JsonParser) parser = json_parser_new ();
  if (n < 2 || !json_parser_load_from_data (parser, (const char *) parts[1], (gssize) lens[1], NULL) ||
      !json_parser_get_root (parser) || !JSON_NODE_HOLDS_ARRAY (json_parser_get_root (parser)))
    g_assert (json_parser_load_from_data (parser, default_messages, -1, NULL));
  JsonNode *messages = json_parser_get_root (parser);
  g_autoptr (JsonObject) extra = json_object_new ();
  json_object_set_boolean_member (extra, "enable_thinking", FALSE);
  for (int gp = 0; gp < 2; gp++)
    {
      HnChatRenderArgs args = { .messages = messages, .add_generation_prompt = gp, .bos_token = "<s>",
                                .eos_token = "</s>", .extra = extra };
      g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (HnChatSpan));
      g_autoptr (GError) e2 = NULL;
      g_autofree char *out = hn_chat_template_apply (tmpl, &args, spans, &e2);
      if (out)
        for (guint i = 0; i < spans->len; i++)
          {
            HnChatSpan *sp = &g_array_index (spans, HnChatSpan, i);
            g_assert (sp->start <= sp->end && sp->end <= strlen (out));
          }
    }
  return 0;
}
