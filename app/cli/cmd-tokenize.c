/* `tokenize --tokenizer PATH [--text STR | --input-file FILE]
 * [--add-special-tokens] [--json]` prints token ids; `--decode "1,2,3"`
 * prints the text of ids instead. Options: hn_command_table. */
#include "cli.h"
#include "tokenizer/tokenizer.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

int hn_cmd_tokenize (int argc, char **argv);

static gboolean
parse_ids (const char *s, GArray *ids, GError **error)
{
  g_auto (GStrv) parts = g_strsplit_set (s, ", \t\n[]", -1);
  for (guint i = 0; parts[i]; i++)
    {
      if (!*parts[i])
        continue;
      gint64 v = 0;
      g_autoptr (GError) e = NULL;
      if (!g_ascii_string_to_signed (parts[i], 10, 0, G_MAXINT32, &v, &e))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--decode: '%s' is not a token id", parts[i]);
          return FALSE;
        }
      int32_t id = (int32_t) v;
      g_array_append_val (ids, id);
    }
  return TRUE;
}

static char *
json_string (const char *s)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_add_string_value (b, s);
  g_autoptr (JsonNode) n = json_builder_get_root (b);
  return json_to_string (n, FALSE);
}

int
hn_cmd_tokenize (int argc, char **argv)
{
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("tokenize", argc, argv, &status);
  if (!spec)
    return status;
  /* exactly one of --text, --input-file and --decode (hn_command_table) */
  const char *tokenizer = hn_job_spec_get_string (spec, "tokenizer-path");
  const char *text = hn_job_spec_get_string (spec, "text"), *input_file = hn_job_spec_get_string (spec, "input-file");
  const char *decode = hn_job_spec_get_string (spec, "decode");
  gboolean add_special = hn_job_spec_get_bool (spec, "add-special-tokens"), json = hn_job_spec_get_bool (spec, "json");
  gboolean skip_special = hn_job_spec_get_bool (spec, "skip-special-tokens");
  gboolean show_tokens = hn_job_spec_get_bool (spec, "tokens");
  GError *error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (tokenizer, &error);
  if (!tok)
    return hn_cli_fail (error);

  if (decode)
    {
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      if (!parse_ids (decode, ids, &error))
        return hn_cli_fail (error);
      /* decoding skips ids without a token (a model's padded rows), as
       * tokenizers does; ids typed by hand that are not tokens are an error */
      for (guint i = 0; i < ids->len; i++)
        {
          int32_t id = g_array_index (ids, int32_t, i);
          if (!hn_tokenizer_id_to_token (tok, id))
            return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                                             "--decode: token id %d is not in the vocabulary of %s (%d ids)", id,
                                             tokenizer, hn_tokenizer_get_vocab_size (tok)));
        }
      g_autofree char *out = hn_tokenizer_decode (tok, (const int32_t *) ids->data, ids->len, skip_special, &error);
      if (!out)
        return hn_cli_fail (error);
      if (json)
        {
          g_autofree char *js = json_string (out);
          printf ("{\"text\": %s}\n", js);
        }
      else
        printf ("%s\n", out);
      return 0;
    }

  g_autofree char *contents = NULL;
  gsize len = 0;
  if (input_file)
    {
      g_autoptr (GError) e = NULL;
      if (g_str_equal (input_file, "-"))
        {
          /* standard input */
          GString *in = g_string_new (NULL);
          char buf[65536];
          gsize n;
          while ((n = fread (buf, 1, sizeof buf, stdin)) > 0 && in->len <= HN_MAX_TEXT_BYTES)
            g_string_append_len (in, buf, n);
          if (in->len > HN_MAX_TEXT_BYTES)
            {
              g_string_free (in, TRUE);
              return hn_cli_fail (g_error_new (HN_ERROR, HN_ERROR_IO, "standard input is over the limit of %u bytes",
                                               HN_MAX_TEXT_BYTES));
            }
          len = in->len;
          contents = g_string_free (in, FALSE);
        }
      else if (!hn_file_read_bounded (input_file, HN_MAX_TEXT_BYTES, "input file", &contents, &len, &e))
        return hn_cli_fail (g_steal_pointer (&e));
    }
  else
    {
      contents = g_strdup (text);
      len = strlen (contents);
    }
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  if (!hn_tokenizer_encode (tok, contents, (gssize) len, add_special, ids, &error))
    return hn_cli_fail (error);
  g_autoptr (GString) out = g_string_new (json ? "{\"ids\": [" : "");
  for (guint i = 0; i < ids->len; i++)
    g_string_append_printf (out, i ? (json ? ", %d" : " %d") : "%d", g_array_index (ids, int32_t, i));
  if (json)
    {
      g_string_append (out, "]");
      if (show_tokens)
        {
          g_string_append (out, ", \"tokens\": [");
          for (guint i = 0; i < ids->len; i++)
            {
              g_autofree char *js = json_string (hn_tokenizer_id_to_token (tok, g_array_index (ids, int32_t, i)));
              g_string_append_printf (out, i ? ", %s" : "%s", js);
            }
          g_string_append (out, "]");
        }
      g_string_append (out, "}");
    }
  else if (show_tokens)
    {
      g_string_append_c (out, '\n');
      for (guint i = 0; i < ids->len; i++)
        g_string_append_printf (out, i ? " %s" : "%s", hn_tokenizer_id_to_token (tok, g_array_index (ids, int32_t, i)));
    }
  printf ("%s\n", out->str);
  return 0;
}
