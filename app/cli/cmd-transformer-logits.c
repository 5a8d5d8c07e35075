/* `transformer-logits --model-path DIR --input-ids "1,2,3" [--device-index N] --output OUT.json`
 * writes {"shape": [seq, vocab], "logits": [row-major floats]} for batch row 0: a decoder's
 * next-token logits (--adapter DIR: with a PEFT LoRA adapter merged into it), an encoder's
 * masked-LM logits (--token-type-ids), or an encoder-decoder's logits of --decoder-input-ids
 * (default: decoder_start_token_id alone). */
#include "cli.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/model-config.h"
#include "encdec/encoder.h"
#include "encdec/seq2seq.h"
#include "ssm/mamba.h"
#include "train/lora.h"
#include "transformer/transformer.h"

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
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("transformer-logits", argc, argv, &status);
  if (!spec)
    return status;
  const char *model = hn_job_spec_get_string (spec, "model-path"), *output = hn_job_spec_get_string (spec, "output");
  const char *const *ids_list = hn_job_spec_get_strv (spec, "input-ids"); /* repeatable for generate: one here */
  if (g_strv_length ((char **) ids_list) != 1)
    {
      fprintf (stderr, "error: --input-ids is given twice; transformer-logits takes one sequence\n");
      return 2;
    }
  const char *ids_text = ids_list[0];
  const char *dec_text = hn_job_spec_get_string (spec, "decoder-input-ids");
  const char *tt_text = hn_job_spec_get_string (spec, "token-type-ids");
  int device = (int) hn_job_spec_get_int (spec, "device-index");
  const char *adapter_dir = hn_job_spec_get_string (spec, "lora-adapter-path"); /* also --adapter */
  GError *error = NULL;
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) dec = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) tt = g_array_new (FALSE, FALSE, sizeof (int32_t));
  if (!parse_ids ("--input-ids", ids_text, ids, &error) || (dec_text && !parse_ids ("--decoder-input-ids", dec_text, dec, &error)) ||
      (tt_text && !parse_ids ("--token-type-ids", tt_text, tt, &error)))
    return hn_cli_fail (error);
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model, &error);
  const HnArchInfo *arch = cfg ? hn_arch_lookup (cfg->model_type, &error) : NULL;
  if (!arch)
    return hn_cli_fail (error);
  gboolean enc = hn_arch_is_encoder (arch), s2s = hn_arch_is_seq2seq (arch), ssm = hn_arch_is_ssm (arch);
  if (dec_text && !s2s)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                     "--decoder-input-ids: model_type \"%s\" is not an encoder-decoder", arch->model_type));
  if (tt_text && !enc)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                     "--token-type-ids: model_type \"%s\" is not an encoder", arch->model_type));
  if (tt_text && tt->len != ids->len)
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                     "--token-type-ids has %u ids for %u input ids", tt->len, ids->len));
  if (!hn_arch_require_task (arch, HN_TASK_LOGITS, &error))
    return hn_cli_fail (error);
  if (adapter_dir && (enc || s2s || ssm))
    return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_UNSUPPORTED,
                                     "--adapter is for decoders with attention; model_type \"%s\" is not one",
                                     arch->model_type));
  g_autoptr (HnLoraAdapter) adapter = adapter_dir ? hn_lora_adapter_load (adapter_dir, &error) : NULL;
  if (adapter_dir && !adapter)
    return hn_cli_fail (error);
  g_autoptr (HnVkContext) vk = hn_vk_context_new (device, &error);
  if (!vk)
    return hn_cli_fail (error);
  int vocab = 0;
  guint rows = ids->len;
  g_autofree float *logits = NULL;
  gboolean ok;
  if (enc)
    {
      g_autoptr (HnEncoder) m = hn_encoder_load (vk, model, &error);
      ok = m != NULL;
      if (ok)
        {
          vocab = hn_encoder_get_vocab (m);
          logits = g_new (float, (gsize) rows * vocab);
          ok = hn_encoder_logits (m, (const int32_t *) ids->data, tt_text ? (const int32_t *) tt->data : NULL,
                                  (int) ids->len, logits, &error);
        }
    }
  else if (s2s)
    {
      g_autoptr (HnSeq2Seq) m = hn_seq2seq_load (vk, model, &error);
      ok = m != NULL;
      if (ok)
        {
          vocab = hn_seq2seq_get_vocab (m);
          if (!dec_text)
            {
              int32_t start = hn_seq2seq_get_decoder_start (m);
              g_array_append_val (dec, start);
            }
          rows = dec->len;
          logits = g_new (float, (gsize) rows * vocab);
          ok = hn_seq2seq_logits (m, (const int32_t *) ids->data, (int) ids->len, (const int32_t *) dec->data,
                                  (int) dec->len, logits, &error);
        }
    }
  else if (ssm)
    {
      g_autoptr (HnMamba) m = hn_mamba_load (vk, model, &error);
      ok = m != NULL;
      if (ok)
        {
          vocab = hn_mamba_get_hparams (m)->vocab;
          logits = g_new (float, (gsize) rows * vocab);
          ok = hn_mamba_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error);
        }
    }
  else
    {
      g_autoptr (HnTransformer) m = hn_transformer_load (vk, model, &error);
      ok = m != NULL && (!adapter || hn_lora_attach (m, adapter, &error));
      if (ok)
        {
          vocab = hn_transformer_get_hparams (m)->vocab;
          logits = g_new (float, (gsize) rows * vocab);
          ok = hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error);
        }
    }
  if (!ok)
    return hn_cli_fail (error);
  gsize n = (gsize) rows * vocab;
  for (gsize i = 0; i < n; i++)
    if (!isfinite (logits[i]))
      return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_NUMERIC, "the model produced a non-finite logit at row %zu",
                                       i / (gsize) vocab));
  /* "%.9g" round-trips a float exactly */
  GString *s = g_string_sized_new (n * 14 + 64);
  g_string_append_printf (s, "{\"shape\": [%u, %d], \"logits\": [", rows, vocab);
  for (gsize i = 0; i < n; i++)
    {
      char buf[G_ASCII_DTOSTR_BUF_SIZE];
      g_ascii_formatd (buf, sizeof buf, "%.9g", logits[i]);
      g_string_append_printf (s, "%s%s", i ? ", " : "", buf);
    }
  g_string_append (s, "]}\n");
  ok = hn_write_file_atomic (output, s->str, s->len, &error);
  g_string_free (s, TRUE);
  if (!ok)
    return hn_cli_fail (error);
  return 0;
}
