/* The tokenizer model common to BPE, WordPiece and Unigram: vocabulary,
 * word cache, and reading the "model" object of tokenizer.json. */
#include "tokenizer-private.h"
#include <string.h>

/* Words longer than this are not cached: they are rare, and a whole
 * un-pre-tokenized text (SentencePiece-style BPE) would fill the cache. */
#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 200000

static void
garray_unref0 (gpointer p)
{
  if (p)
    g_array_unref (p);
}

HnModel *
hn_model_new (HnModelType type)
{
  HnModel *m = g_new0 (HnModel, 1);
  m->type = type;
  m->vocab = g_ptr_array_new_with_free_func (g_free);
  m->token_to_id = g_hash_table_new (g_str_hash, g_str_equal);
  m->unk_id = -1;
  m->max_input_chars = 100;
  for (int i = 0; i < 256; i++)
    m->byte_ids[i] = -1;
  m->cache = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, garray_unref0);
  g_mutex_init (&m->cache_lock);
  return m;
}

void hn_merge_table_free (HnMergeTable *t);

void
hn_model_free (HnModel *m)
{
  if (!m)
    return;
  g_hash_table_unref (m->token_to_id);
  g_ptr_array_unref (m->vocab);
  if (m->merges)
    hn_merge_table_free (m->merges);
  g_free (m->cont_prefix);
  g_free (m->eow_suffix);
  g_free (m->scores);
  g_free (m->piece_types);
  g_free (m->wp_prefix);
  g_hash_table_unref (m->cache);
  g_mutex_clear (&m->cache_lock);
  g_free (m);
}

gboolean
hn_model_add_token (HnModel *m, const char *token, int32_t id, const char *file, GError **error)
{
  if (id < 0 || id > (1 << 26))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: token '%s' has an invalid id %d", file, token, id);
      return FALSE;
    }
  if ((guint) id >= m->vocab->len)
    g_ptr_array_set_size (m->vocab, id + 1);
  if (g_ptr_array_index (m->vocab, id) != NULL)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: id %d is used by two tokens ('%s' and '%s')",
                   file, id, (char *) g_ptr_array_index (m->vocab, id), token);
      return FALSE;
    }
  char *copy = g_strdup (token);
  g_ptr_array_index (m->vocab, id) = copy;
  /* Duplicate strings happen in real vocabularies (SentencePiece control
   * pieces); the first id wins, as in the reference implementations. */
  if (!g_hash_table_contains (m->token_to_id, copy))
    g_hash_table_insert (m->token_to_id, copy, GINT_TO_POINTER (id + 1));
  return TRUE;
}

int32_t
hn_model_lookup (const HnModel *m, const char *token)
{
  gpointer v = g_hash_table_lookup (m->token_to_id, token);
  return v ? GPOINTER_TO_INT (v) - 1 : -1;
}

void
hn_model_index_bytes (HnModel *m)
{
  for (int b = 0; b < 256; b++)
    {
      char name[8];
      g_snprintf (name, sizeof name, "<0x%02X>", b);
      m->byte_ids[b] = hn_model_lookup (m, name);
    }
}

static void
find_split_bytes (HnModel *m)
{
  static const char cands[] = { '\n', '\r', '\t' };
  if (m->cont_prefix || m->eow_suffix)
    return; /* cutting would change which symbols are word-initial/final */
  for (gsize k = 0; k < G_N_ELEMENTS (cands); k++)
    {
      char c = cands[k];
      char alone[2] = { c, '\0' };
      gboolean whole = hn_model_lookup (m, alone) >= 0;
      if (!whole && !(m->byte_fallback && m->byte_ids[(guint8) c] >= 0))
        continue; /* it would become <unk>, which may fuse with neighbours */
      gboolean inside = FALSE;
      for (guint i = 0; i < m->vocab->len && !inside; i++)
        {
          const char *t = g_ptr_array_index (m->vocab, i);
          inside = t && strchr (t, c) && !g_str_equal (t, alone);
        }
      if (!inside)
        m->split_byte[(guint8) c] = m->any_split = TRUE;
    }
}

static void tokenize_chunk (HnModel *m, const char *word, gsize len, GArray *out);

void
hn_model_tokenize (HnModel *m, const char *word, gsize len, GArray *out)
{
  if (g_once_init_enter (&m->split_once))
    {
      find_split_bytes (m);
      g_once_init_leave (&m->split_once, 1);
    }
  if (!m->any_split)
    {
      tokenize_chunk (m, word, len, out);
      return;
    }
  const char *p = word, *end = word + len;
  for (const char *q = word; q < end; q++)
    if (m->split_byte[(guint8) *q])
      {
        tokenize_chunk (m, p, q - p, out);
        tokenize_chunk (m, q, 1, out);
        p = q + 1;
      }
  tokenize_chunk (m, p, end - p, out);
}

static void
tokenize_chunk (HnModel *m, const char *word, gsize len, GArray *out)
{
  if (len == 0)
    return;
  gboolean cacheable = len <= CACHE_MAX_WORD;
  g_autofree char *key = NULL;
  if (cacheable)
    {
      key = g_strndup (word, len);
      g_mutex_lock (&m->cache_lock);
      GArray *hit = g_hash_table_lookup (m->cache, key);
      if (hit)
        g_array_append_vals (out, hit->data, hit->len);
      g_mutex_unlock (&m->cache_lock);
      if (hit)
        return;
    }
  guint start = out->len;
  switch (m->type)
    {
    case HN_MODEL_BPE:
    case HN_MODEL_SPM_BPE:
      hn_bpe_tokenize (m, word, len, out);
      break;
    case HN_MODEL_WORDPIECE:
      hn_wordpiece_tokenize (m, word, len, out);
      break;
    case HN_MODEL_UNIGRAM:
      hn_unigram_tokenize (m, word, len, out);
      break;
    case HN_MODEL_WORDLEVEL:
      {
        /* the whole word or <unk> */
        g_autofree char *w = g_strndup (word, len);
        int32_t id = hn_model_lookup (m, w);
        if (id < 0)
          id = m->unk_id;
        if (id >= 0)
          g_array_append_val (out, id);
        break;
      }
    }
  if (cacheable)
    {
      GArray *val = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), out->len - start);
      if (out->len > start) /* an empty GArray has no data pointer to offset */
        g_array_append_vals (val, &g_array_index (out, int32_t, start), out->len - start);
      g_mutex_lock (&m->cache_lock);
      if (g_hash_table_size (m->cache) >= CACHE_MAX_ENTRIES)
        g_hash_table_remove_all (m->cache);
      g_hash_table_replace (m->cache, g_steal_pointer (&key), val);
      g_mutex_unlock (&m->cache_lock);
    }
}

/* ---- tokenizer.json "model" ---- */

static gboolean
read_vocab_object (HnModel *m, JsonObject *model, const HnTokJsonSpan *big, const char *file, GError **error)
{
  if (big && big[0].data && big[0].data[0] == '{')
    return hn_tok_json_read_vocab (m, file, big[0].data, big[0].len, error);
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: model.vocab must be an object of token -> id", file);
  return FALSE;
}

static gboolean
read_merges (HnModel *m, JsonObject *model, const HnTokJsonSpan *big, const char *file, GError **error)
{
  if (big && big[1].data && big[1].data[0] == '[')
    return hn_tok_json_read_merges (m, file, big[1].data, big[1].len, error);
  JsonNode *mn = json_object_get_member (model, "merges");
  if (!mn || JSON_NODE_HOLDS_NULL (mn))
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: model.merges must be an array", file);
  return FALSE;
}

HnModel *
hn_model_from_json (JsonObject *mo, const HnTokJsonSpan *big, const char *file, GError **error)
{
  const char *type = hn_tok_json_str (mo, "type");
  if (!type)
    {
      /* Old files omit the type; infer it from the members. */
      if (json_object_has_member (mo, "merges"))
        type = "BPE";
      else if (json_object_has_member (mo, "continuing_subword_prefix") || json_object_has_member (mo, "max_input_chars_per_word"))
        type = "WordPiece";
      else if ((big && big[0].data && big[0].data[0] == '[')
               || (json_object_has_member (mo, "vocab") && JSON_NODE_HOLDS_ARRAY (json_object_get_member (mo, "vocab"))))
        type = "Unigram";
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: model has no type", file);
          return NULL;
        }
    }
  g_autoptr (HnModel) m = NULL;
  if (g_str_equal (type, "BPE"))
    {
      m = hn_model_new (HN_MODEL_BPE);
      if (!read_vocab_object (m, mo, big, file, error))
        return NULL;
      if (hn_tok_json_double (mo, "dropout", 0.0) > 0.0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: BPE dropout is not supported (it makes encoding random)", file);
          return NULL;
        }
      const char *p = hn_tok_json_str (mo, "continuing_subword_prefix");
      m->cont_prefix = p && *p ? g_strdup (p) : NULL;
      p = hn_tok_json_str (mo, "end_of_word_suffix");
      m->eow_suffix = p && *p ? g_strdup (p) : NULL;
      m->fuse_unk = hn_tok_json_bool (mo, "fuse_unk", FALSE);
      m->byte_fallback = hn_tok_json_bool (mo, "byte_fallback", FALSE);
      m->ignore_merges = hn_tok_json_bool (mo, "ignore_merges", FALSE);
      const char *unk = hn_tok_json_str (mo, "unk_token");
      m->unk_id = unk ? hn_model_lookup (m, unk) : -1;
      if (!read_merges (m, mo, big, file, error))
        return NULL;
      if (m->byte_fallback)
        hn_model_index_bytes (m);
    }
  else if (g_str_equal (type, "WordPiece"))
    {
      m = hn_model_new (HN_MODEL_WORDPIECE);
      if (!read_vocab_object (m, mo, big, file, error))
        return NULL;
      const char *p = hn_tok_json_str (mo, "continuing_subword_prefix");
      m->wp_prefix = g_strdup (p ? p : "##");
      m->max_input_chars = (int) CLAMP (hn_tok_json_int (mo, "max_input_chars_per_word", 100), 1, 1 << 20);
      const char *unk = hn_tok_json_str (mo, "unk_token");
      m->unk_id = hn_model_lookup (m, unk ? unk : "[UNK]");
      if (m->unk_id < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: WordPiece unk_token '%s' is not in the vocabulary",
                       file, unk ? unk : "[UNK]");
          return NULL;
        }
    }
  else if (g_str_equal (type, "WordLevel"))
    {
      m = hn_model_new (HN_MODEL_WORDLEVEL);
      if (!read_vocab_object (m, mo, big, file, error))
        return NULL;
      const char *unk = hn_tok_json_str (mo, "unk_token");
      m->unk_id = unk ? hn_model_lookup (m, unk) : -1;
    }
  else if (g_str_equal (type, "Unigram"))
    {
      m = hn_model_new (HN_MODEL_UNIGRAM);
      if (!big || !big[0].data || big[0].data[0] != '[')
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Unigram model.vocab must be an array of [piece, score]", file);
          return NULL;
        }
      if (!hn_tok_json_read_unigram_vocab (m, file, big[0].data, big[0].len, error))
        return NULL;
      guint n = m->vocab->len;
      JsonNode *un = json_object_get_member (mo, "unk_id");
      if (un && !JSON_NODE_HOLDS_NULL (un))
        {
          gint64 u = hn_tok_json_int (mo, "unk_id", -1);
          if (u < 0 || u >= n)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Unigram unk_id %" G_GINT64_FORMAT " is out of range", file, u);
              return NULL;
            }
          m->unk_id = (int32_t) u;
        }
      m->byte_fallback = hn_tok_json_bool (mo, "byte_fallback", FALSE);
      m->fuse_unk = TRUE;
      if (m->byte_fallback)
        hn_model_index_bytes (m);
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tokenizer model type '%s' is not supported (BPE, WordPiece, WordLevel, Unigram are)",
                   file, type);
      return NULL;
    }
  if (m->vocab->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the model vocabulary is empty", file);
      return NULL;
    }
  return g_steal_pointer (&m);
}
