/* The "slow" tokenizer formats: GPT-2's vocab.json + merges.txt (byte-level
 * BPE) and BERT's vocab.txt (WordPiece). They are turned into the same
 * pipeline tokenizer.json would describe, with the settings transformers'
 * GPT2TokenizerFast and BertTokenizerFast use. */
#include "tokenizer-private.h"
#include <string.h>

HnTokenizer *
hn_tokenizer_load_gpt2 (const char *vocab_json, const char *merges_txt, GError **error)
{
  g_autofree char *vdata = NULL;
  gsize vlen = 0;
  if (!hn_file_read_bounded (vocab_json, HN_MAX_TOKENIZER_BYTES, "vocabulary", &vdata, &vlen, error))
    return NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_new_empty (vocab_json);
  tok->model = hn_model_new (HN_MODEL_BPE);
  if (!hn_tok_json_read_vocab (tok->model, vocab_json, vdata, vlen, error))
    return NULL;
  if (tok->model->vocab->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the vocabulary is empty", vocab_json);
      return NULL;
    }
  g_autofree char *text = NULL;
  gsize len = 0;
  g_autoptr (GError) e = NULL;
  if (!hn_file_read_bounded (merges_txt, HN_MAX_TOKENIZER_BYTES, "merges file", &text, &len, &e))
    {
      g_set_error (error, HN_ERROR, e->code, "%s (vocab.json needs merges.txt next to it)", e->message);
      return NULL;
    }
  if (!g_utf8_validate (text, len, NULL))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not valid UTF-8", merges_txt);
      return NULL;
    }
  guint lineno = 0;
  for (char *line = text, *next; line && *line; line = next)
    {
      lineno++;
      next = strchr (line, '\n');
      if (next)
        *next++ = '\0';
      gsize ll = strlen (line);
      if (ll && line[ll - 1] == '\r')
        line[--ll] = '\0';
      if (ll == 0 || (lineno == 1 && g_str_has_prefix (line, "#version")))
        continue;
      char *sp = strchr (line, ' ');
      if (!sp || sp == line || !sp[1] || strchr (sp + 1, ' '))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s:%u: '%s' is not two tokens separated by one space",
                       merges_txt, lineno, line);
          return NULL;
        }
      *sp = '\0';
      g_autofree char *where = g_strdup_printf ("%s:%u", merges_txt, lineno);
      if (!hn_model_add_merge (tok->model, line, sp + 1, where, error))
        return NULL;
    }
  tok->pretok = hn_pretok_new_byte_level (FALSE, TRUE);
  tok->decoder = hn_decoder_new (HN_DEC_BYTE_LEVEL);
  tok->has_post = TRUE; /* GPT-2 adds no special tokens */
  tok->slow_gpt2 = TRUE;
  int32_t eot = hn_model_lookup (tok->model, "<|endoftext|>");
  if (eot >= 0)
    hn_tokenizer_add_token (tok, "<|endoftext|>", eot, TRUE, FALSE, FALSE, FALSE, FALSE);
  return g_steal_pointer (&tok);
}

/* Reads do_lower_case etc. from tokenizer_config.json next to vocab.txt;
 * BERT checkpoints without it are uncased. */
static void
bert_options (const char *vocab_txt, gboolean *lower, gboolean *chinese, gboolean *strip, gboolean *strip_set)
{
  *lower = TRUE;
  *chinese = TRUE;
  *strip_set = FALSE;
  g_autofree char *dir = g_path_get_dirname (vocab_txt);
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autoptr (JsonParser) parser = NULL;
  if (!g_file_test (cfg, G_FILE_TEST_EXISTS))
    return;
  JsonNode *root = hn_tok_parse_json_file (cfg, &parser, NULL);
  if (!root)
    return; /* reported when the config itself is applied */
  JsonObject *o = json_node_get_object (root);
  *lower = hn_tok_json_bool (o, "do_lower_case", TRUE);
  *chinese = hn_tok_json_bool (o, "tokenize_chinese_chars", TRUE);
  JsonNode *sa = json_object_get_member (o, "strip_accents");
  if (sa && json_node_get_value_type (sa) == G_TYPE_BOOLEAN)
    {
      *strip = json_node_get_boolean (sa);
      *strip_set = TRUE;
    }
}

HnTokenizer *
hn_tokenizer_load_vocab_txt (const char *vocab_txt, GError **error)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (vocab_txt, HN_MAX_TOKENIZER_BYTES, "vocabulary", &text, &len, error))
    return NULL;
  if (!g_utf8_validate (text, len, NULL) || memchr (text, '\0', len))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not valid UTF-8 text", vocab_txt);
      return NULL;
    }
  g_autoptr (HnTokenizer) tok = hn_tokenizer_new_empty (vocab_txt);
  tok->model = hn_model_new (HN_MODEL_WORDPIECE);
  int32_t id = 0;
  for (char *line = text, *next; line && *line; line = next)
    {
      next = strchr (line, '\n');
      if (next)
        *next++ = '\0';
      gsize ll = strlen (line);
      if (ll && line[ll - 1] == '\r')
        line[--ll] = '\0';
      /* transformers keeps the first id of a duplicated line */
      if (hn_model_lookup (tok->model, line) >= 0)
        {
          g_ptr_array_add (tok->model->vocab, g_strdup (line));
          id++;
          continue;
        }
      if (!hn_model_add_token (tok->model, line, id++, vocab_txt, error))
        return NULL;
    }
  HnModel *m = tok->model;
  m->wp_prefix = g_strdup ("##");
  m->unk_id = hn_model_lookup (m, "[UNK]");
  if (m->unk_id < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: no [UNK] token (is this a BERT vocab.txt?)", vocab_txt);
      return NULL;
    }
  tok->unk_id = m->unk_id;
  gboolean lower, chinese, strip = FALSE, strip_set;
  bert_options (vocab_txt, &lower, &chinese, &strip, &strip_set);
  HnNormalizer *n = g_new0 (HnNormalizer, 1);
  n->type = HN_NORM_BERT;
  n->clean_text = TRUE;
  n->chinese_chars = chinese;
  n->lowercase = lower;
  n->strip_accents = strip_set ? strip : lower;
  tok->normalizer = n;
  tok->pretok = hn_pretok_new_bert ();
  HnDecoder *d = hn_decoder_new (HN_DEC_WORDPIECE);
  d->prefix = g_strdup ("##");
  d->cleanup = TRUE;
  tok->decoder = d;
  static const char *const specials[] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
  for (gsize i = 0; i < G_N_ELEMENTS (specials); i++)
    {
      int32_t sid = hn_model_lookup (m, specials[i]);
      if (sid >= 0)
        hn_tokenizer_add_token (tok, specials[i], sid, TRUE, FALSE, FALSE, FALSE, FALSE);
    }
  int32_t cls = hn_model_lookup (m, "[CLS]"), sep = hn_model_lookup (m, "[SEP]");
  if (cls >= 0 && sep >= 0)
    {
      g_array_append_val (tok->post_prefix, cls);
      g_array_append_val (tok->post_suffix, sep);
    }
  tok->has_post = TRUE;
  return g_steal_pointer (&tok);
}
