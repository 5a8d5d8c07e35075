/* `transformer-logits --model-path DIR --input-ids "1,2,3" [--device-index N] --output OUT.json`
 * writes {"shape": [seq, vocab], "logits": [row-major floats]} for batch row 0. */
#include "cli.h"
#include "hn-error.h"
#include "hn-util.h"
#include "models/transformer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int hn_cmd_transformer_logits (int argc, char **argv);

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

int
hn_cmd_transformer_logits (int argc, char **argv)
{
  g_autofree char *model = NULL, *ids_text = NULL, *dec_text = NULL, *output = NULL;
  int device = -1;
  GOptionEntry entries[] = {
    { "model-path", 0, 0, G_OPTION_ARG_FILENAME, &model, "Hugging Face model folder", "DIR" },
    { "input-ids", 0, 0, G_OPTION_ARG_STRING, &ids_text, "Comma-separated input token ids", "IDS" },
    { "decoder-input-ids", 0, 0, G_OPTION_ARG_STRING, &dec_text, "Decoder input ids (encoder-decoder models)", "IDS" },
    { "device-index", 0, 0, G_OPTION_ARG_INT, &device, "Vulkan device (-1: the best one)", "N" },
    { "output", 0, 0, G_OPTION_ARG_FILENAME, &output, "Where to write the logits JSON", "OUT.json" },
    { NULL },
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- write the logits of a Transformer for given ids");
  g_option_context_add_main_entries (ctx, entries, NULL);
  GError *error = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    return hn_cli_fail (error);
  if (argc > 1)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "unexpected argument '%s'", argv[1]));
  if (!model || !ids_text || !output)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                     "--model-path, --input-ids and --output are required"));
  if (dec_text)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_UNSUPPORTED,
                                     "--decoder-input-ids: encoder-decoder models are not supported yet"));
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  if (!parse_ids ("--input-ids", ids_text, ids, &error))
    return hn_cli_fail (error);
  g_autoptr (HnVkContext) vk = hn_vk_context_new (device, &error);
  if (!vk)
    return hn_cli_fail (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (vk, model, &error);
  if (!m)
    return hn_cli_fail (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  if (!hn_arch_require_task (hp->arch, HN_TASK_LOGITS, &error))
    return hn_cli_fail (error);
  gsize n = (gsize) ids->len * hp->vocab;
  g_autofree float *logits = g_new (float, n);
  if (!hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error))
    return hn_cli_fail (error);
  for (gsize i = 0; i < n; i++)
    if (!isfinite (logits[i]))
      return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_NUMERIC, "the model produced a non-finite logit at row %zu",
                                       i / (gsize) hp->vocab));
  /* "%.9g" round-trips a float exactly */
  GString *s = g_string_sized_new (n * 14 + 64);
  g_string_append_printf (s, "{\"shape\": [%u, %d], \"logits\": [", ids->len, hp->vocab);
  for (gsize i = 0; i < n; i++)
    {
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_ascii_formatd (buf, sizeof buf, "%.9g", logits[i]);
      g_string_append_printf (s, "%s%s", i ? ", " : "", buf);
    }
  g_string_append (s, "]}\n");
  gboolean ok = hn_write_file_atomic (output, s->str, s->len, &error);
  g_string_free (s, TRUE);
  if (!ok)
    return hn_cli_fail (error);
  return 0;
}
