/* The tokenizer: loading (tokenizer.json and dispatch to the slow formats),
 * tokenizer_config.json, added-token matching, the encode pipeline
 * (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor),
 * decode and streaming decode. */
#include "tokenizer-private.h"
#include "formats/gguf-hf.h"
#include <string.h>

#include "base/hn-util.h"

/* ---- small shared helpers ---- */

const char *
hn_tok_json_str (JsonObject *o, const char *member)
{
  JsonNode *n = o ? json_object_get_member (o, member) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

gboolean
hn_tok_json_bool (JsonObject *o, const char *member, gboolean dflt)
{
  JsonNode *n = o ? json_object_get_member (o, member) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_BOOLEAN)
    return dflt;
  return json_node_get_boolean (n);
}

gint64
hn_tok_json_int (JsonObject *o, const char *member, gint64 dflt)
{
  JsonNode *n = o ? json_object_get_member (o, member) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n))
    return dflt;
  if (json_node_get_value_type (n) == G_TYPE_INT64)
    return json_node_get_int (n);
  if (json_node_get_value_type (n) == G_TYPE_DOUBLE)
    {
      double d = json_node_get_double (n);
      return d >= -9e15 && d <= 9e15 ? (gint64) d : dflt;
    }
  return dflt;
}

double
hn_tok_json_double (JsonObject *o, const char *member, double dflt)
{
  JsonNode *n = o ? json_object_get_member (o, member) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n))
    return dflt;
  if (json_node_get_value_type (n) == G_TYPE_INT64)
    return (double) json_node_get_int (n);
  if (json_node_get_value_type (n) == G_TYPE_DOUBLE)
    return json_node_get_double (n);
  return dflt;
}

gint64
hn_tok_json_array_int (JsonArray *a, guint i)
{
  JsonNode *n = i < json_array_get_length (a) ? json_array_get_element (a, i) : NULL;
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return -1;
  return json_node_get_int (n);
}

GRegex *
hn_tok_regex_new (const char *pattern, const char *what, GError **error)
{
  g_autoptr (GError) e = NULL;
  GRegex *re = g_regex_new (pattern, G_REGEX_OPTIMIZE, 0, &e);
  if (!re)
    g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: regex '%s' does not compile: %s", what, pattern, e->message);
  return re;
}

JsonNode *
hn_tok_parse_json_file (const char *file, JsonParser **parser_out, GError **error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (file, HN_MAX_TOKENIZER_BYTES, "tokenizer file", &data, &len, error))
    return NULL;
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  g_autoptr (GError) e = NULL;
  if (!hn_json_parser_load (parser, data, (gssize) len, file, &e))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "not valid JSON: %s", e->message);
      return NULL;
    }
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the top level is not a JSON object", file);
      return NULL;
    }
  *parser_out = g_steal_pointer (&parser);
  return root;
}

/* ---- construction ---- */

static void
added_token_free (HnAddedToken *t)
{
  g_free (t->content);
  g_free (t);
}

HnTokenizer *
hn_tokenizer_new_empty (const char *path)
{
  HnTokenizer *tok = g_new0 (HnTokenizer, 1);
  tok->encode_chunk = ((gsize) 1 << 20) /* 1 MiB: see encode_text */;
  tok->ref_count = 1;
  tok->path = g_strdup (path);
  tok->added = g_ptr_array_new_with_free_func ((GDestroyNotify) added_token_free);
  tok->added_by_content = g_hash_table_new (g_str_hash, g_str_equal);
  tok->added_by_id = g_hash_table_new (NULL, NULL);
  tok->post_prefix = g_array_new (FALSE, FALSE, sizeof (int32_t));
  tok->post_suffix = g_array_new (FALSE, FALSE, sizeof (int32_t));
  tok->eos_ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  tok->bos_id = tok->eos_id = tok->pad_id = tok->unk_id = -1;
  return tok;
}

HnTokenizer *
hn_tokenizer_ref (HnTokenizer *tok)
{
  g_atomic_int_inc (&tok->ref_count);
  return tok;
}

void
hn_tokenizer_set_encode_chunk (HnTokenizer *tok, gsize bytes)
{
  tok->encode_chunk = bytes;
}

void
hn_tokenizer_unref (HnTokenizer *tok)
{
  if (!tok || !g_atomic_int_dec_and_test (&tok->ref_count))
    return;
  g_free (tok->path);
  hn_model_free (tok->model);
  hn_normalizer_free (tok->normalizer);
  hn_pretok_free (tok->pretok);
  hn_decoder_free (tok->decoder);
  for (int i = 0; i < 256; i++)
    if (tok->added_by_first_byte[i])
      g_ptr_array_unref (tok->added_by_first_byte[i]);
  g_hash_table_unref (tok->added_by_content);
  g_hash_table_unref (tok->added_by_id);
  g_ptr_array_unref (tok->added);
  g_array_unref (tok->post_prefix);
  g_array_unref (tok->post_suffix);
  g_array_unref (tok->eos_ids);
  g_free (tok->bos_token);
  g_free (tok->eos_token);
  g_free (tok->pad_token);
  g_free (tok->unk_token);
  g_free (tok->chat_template);
  g_free (tok);
}

static gint
longest_first (gconstpointer a, gconstpointer b)
{
  const HnAddedToken *x = *(HnAddedToken *const *) a, *y = *(HnAddedToken *const *) b;
  gsize lx = strlen (x->content), ly = strlen (y->content);
  return lx > ly ? -1 : lx < ly ? 1 : 0;
}

void
hn_tokenizer_add_token (HnTokenizer *tok, const char *content, int32_t id, gboolean special,
                        gboolean lstrip, gboolean rstrip, gboolean single_word, gboolean normalized)
{
  if (!content || !*content || id < 0)
    return;
  HnAddedToken *old = g_hash_table_lookup (tok->added_by_content, content);
  if (old)
    {
      /* a later declaration (tokenizer_config.json) only upgrades flags */
      old->special = old->special || special;
      return;
    }
  HnAddedToken *t = g_new0 (HnAddedToken, 1);
  *t = (HnAddedToken) { g_strdup (content), id, special, lstrip, rstrip, single_word, normalized };
  g_ptr_array_add (tok->added, t);
  g_hash_table_insert (tok->added_by_content, t->content, t);
  if (!g_hash_table_contains (tok->added_by_id, GINT_TO_POINTER (id)))
    g_hash_table_insert (tok->added_by_id, GINT_TO_POINTER (id), t);
  guint8 b = (guint8) t->content[0];
  if (!tok->added_by_first_byte[b])
    tok->added_by_first_byte[b] = g_ptr_array_new ();
  g_ptr_array_add (tok->added_by_first_byte[b], t);
  g_ptr_array_sort (tok->added_by_first_byte[b], longest_first);
  if (t->normalized)
    tok->has_normalized_added = TRUE;
}

/* ---- added-token matching ---- */

static gboolean
is_word_char (gunichar c)
{
  return g_unichar_isalnum (c) || c == '_';
}

/* Finds the leftmost-longest added token in s[from..len) whose `normalized`
 * flag equals `want_normalized`. Returns the token and the span to cut out
 * (including whitespace eaten by lstrip/rstrip). */
static const HnAddedToken *
find_added (HnTokenizer *tok, const char *s, gsize from, gsize len, gboolean want_normalized,
            gsize *cut_start, gsize *match_start, gsize *cut_end)
{
  for (gsize i = from; i < len; i++)
    {
      GPtrArray *cands = tok->added_by_first_byte[(guint8) s[i]];
      if (!cands)
        continue;
      for (guint k = 0; k < cands->len; k++)
        {
          const HnAddedToken *t = g_ptr_array_index (cands, k);
          if (t->normalized != want_normalized)
            continue;
          gsize tl = strlen (t->content);
          if (i + tl > len || memcmp (s + i, t->content, tl) != 0)
            continue;
          if (t->single_word)
            {
              if (i > 0)
                {
                  const char *p = g_utf8_find_prev_char (s, s + i);
                  if (p && is_word_char (g_utf8_get_char (p)))
                    continue;
                }
              if (i + tl < len && is_word_char (g_utf8_get_char (s + i + tl)))
                continue;
            }
          gsize a = i, b = i + tl;
          if (t->lstrip)
            while (a > from)
              {
                const char *p = g_utf8_find_prev_char (s + from, s + a);
                if (!p || !g_unichar_isspace (g_utf8_get_char (p)))
                  break;
                a = p - s;
              }
          if (t->rstrip)
            while (b < len && g_unichar_isspace (g_utf8_get_char (s + b)))
              b = g_utf8_next_char (s + b) - s;
          *cut_start = a;
          *match_start = i;
          *cut_end = b;
          return t;
        }
    }
  return NULL;
}

/* ---- encode ---- */

/* The pre-tokenizer and the model on s[0, len) (s may continue past len). */
static gboolean
encode_pieces (HnTokenizer *tok, const char *s, gsize len, gboolean at_start, GArray *out, GError **error)
{
  if (len == 0)
    return TRUE;
  g_autoptr (GPtrArray) pieces = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (pieces, g_strndup (s, len));
  if (tok->pretok && !hn_pretok_apply (tok->pretok, pieces, at_start, error))
    return FALSE;
  for (guint i = 0; i < pieces->len; i++)
    {
      const char *p = g_ptr_array_index (pieces, i);
      hn_model_tokenize (tok->model, p, strlen (p), out);
    }
  return TRUE;
}

/* A long text (a training file is one text) is encoded in chunks of about
 * tok->encode_chunk bytes (1 MiB), so that the pre-tokenizer's pieces and the model's
 * work of one chunk are alive at a time, not of the whole text (a 256 MiB
 * file took several GB at once). A chunk ends where cutting changes nothing:
 * the SEAM bytes on each side of the cut encode to the same ids whole and
 * cut in two. The pre-tokenizer and the model only look a few bytes around
 * any point (regex lookahead, merges inside a piece), so a cut that changes
 * nothing within the seam changes nothing in the whole text; where no such
 * cut is found within a further chunk, the rest is encoded whole. */
#define HN_TOK_SEAM ((gsize) 4096)

static gsize
char_start (const char *s, gsize i)
{
  while (i > 0 && ((guchar) s[i] & 0xC0) == 0x80)
    i--;
  return i;
}

/* Whether s[p] is a cut that changes nothing (p follows a newline). */
static gboolean
seam_is_exact (HnTokenizer *tok, const char *s, gsize n, gsize p, GError **error, gboolean *ok)
{
  gsize a = char_start (s, p - HN_TOK_SEAM), b = MIN (n, p + HN_TOK_SEAM);
  b = b < n ? char_start (s, b) : n;
  g_autoptr (GArray) whole = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) cut = g_array_new (FALSE, FALSE, sizeof (int32_t));
  *ok = encode_pieces (tok, s + a, b - a, FALSE, whole, error) && encode_pieces (tok, s + a, p - a, FALSE, cut, error) &&
        encode_pieces (tok, s + p, b - p, FALSE, cut, error);
  return *ok && whole->len == cut->len && memcmp (whole->data, cut->data, whole->len * sizeof (int32_t)) == 0;
}

/* Where a cut may go: after a newline, or before a space or SentencePiece's
 * word marker U+2581 (a BPE vocabulary learnt on words rarely merges across
 * a word start). s[q + 2] exists: q is at least two chunks before the end. */
static gboolean
cut_candidate (const char *s, gsize q)
{
  return s[q - 1] == '\n' || s[q] == ' ' ||
         ((guchar) s[q] == 0xE2 && (guchar) s[q + 1] == 0x96 && (guchar) s[q + 2] == 0x81);
}

static gboolean
encode_text (HnTokenizer *tok, const char *s, gboolean at_start, GArray *out, GError **error)
{
  gsize n = strlen (s), pos = 0, chunk = MAX (tok->encode_chunk, HN_TOK_SEAM);
  while (tok->encode_chunk > 0 && n - pos > 2 * chunk)
    {
      gsize cut = 0, tries = 0;
      /* a few checks a chunk, spread out: a text that refuses every cut costs little */
      for (gsize q = pos + chunk; !cut && q < pos + 2 * chunk && tries < 32; q++)
        {
          if (!cut_candidate (s, q))
            continue;
          tries++;
          gboolean ok;
          if (seam_is_exact (tok, s, n, q, error, &ok))
            cut = q;
          else if (!ok)
            return FALSE;
          q += chunk / 64;
        }
      if (!cut)
        break; /* no exact cut nearby: the rest in one go */
      if (!encode_pieces (tok, s + pos, cut - pos, at_start && pos == 0, out, error))
        return FALSE;
      pos = cut;
    }
  return encode_pieces (tok, s + pos, n - pos, at_start && pos == 0, out, error);
}

static gboolean
encode_normalized_segment (HnTokenizer *tok, const char *raw, gsize len, gboolean at_start, GArray *out,
                           GError **error)
{
  g_autofree char *seg = g_strndup (raw, len);
  g_autofree char *norm = tok->normalizer ? hn_normalizer_apply_at (tok->normalizer, seg, at_start, error)
                                          : g_steal_pointer (&seg);
  if (!norm)
    return FALSE;
  if (!tok->has_normalized_added)
    return encode_text (tok, norm, at_start, out, error);
  gsize nlen = strlen (norm), pos = 0, a, m, b;
  const HnAddedToken *t;
  while ((t = find_added (tok, norm, pos, nlen, TRUE, &a, &m, &b)))
    {
      g_autofree char *part = g_strndup (norm + pos, a - pos);
      if (!encode_text (tok, part, at_start && pos == 0, out, error))
        return FALSE;
      g_array_append_val (out, t->id);
      pos = b;
    }
  return encode_text (tok, norm + pos, at_start && pos == 0, out, error);
}

gboolean
hn_tokenizer_encode (HnTokenizer *tok, const char *text, gssize len, gboolean add_special_tokens,
                     GArray *ids_out, GError **error)
{
  g_return_val_if_fail (tok && text && ids_out, FALSE);
  gsize n = len < 0 ? strlen (text) : (gsize) len;
  gsize at = 0;
  const char *why = hn_utf8_problem (text, n, &at);
  if (why)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "text to tokenize has %s at byte %zu", why, at);
      return FALSE;
    }
  if (add_special_tokens)
    {
      if (tok->has_post)
        g_array_append_vals (ids_out, tok->post_prefix->data, tok->post_prefix->len);
      else if (tok->add_bos && tok->bos_id >= 0)
        g_array_append_val (ids_out, tok->bos_id);
    }
  gsize pos = 0, a, m, b;
  const HnAddedToken *t;
  while ((t = find_added (tok, text, pos, n, FALSE, &a, &m, &b)))
    {
      if (a > pos && !encode_normalized_segment (tok, text + pos, a - pos, pos == 0, ids_out, error))
        return FALSE;
      g_array_append_val (ids_out, t->id);
      pos = b;
    }
  if (pos < n && !encode_normalized_segment (tok, text + pos, n - pos, pos == 0, ids_out, error))
    return FALSE;
  if (add_special_tokens)
    {
      if (tok->has_post)
        g_array_append_vals (ids_out, tok->post_suffix->data, tok->post_suffix->len);
      else if (tok->add_eos && tok->eos_id >= 0)
        g_array_append_val (ids_out, tok->eos_id);
    }
  return TRUE;
}

/* ---- decode ---- */

/* transformers' clean_up_tokenization(), applied when the config asks for it. */
static void
clean_up_spaces (GByteArray *b)
{
  static const char *const pairs[][2] = {
    { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" }, { " n't", "n't" },
    { " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
  };
  for (gsize k = 0; k < G_N_ELEMENTS (pairs); k++)
    {
      gsize pl = strlen (pairs[k][0]), rl = strlen (pairs[k][1]);
      gsize w = 0;
      for (gsize r = 0; r < b->len;)
        {
          if (r + pl <= b->len && memcmp (b->data + r, pairs[k][0], pl) == 0)
            {
              memmove (b->data + w, pairs[k][1], rl); /* rl < pl: never overtakes r */
              w += rl;
              r += pl;
            }
          else
            b->data[w++] = b->data[r++];
        }
      g_byte_array_set_size (b, (guint) w);
    }
}

static GByteArray *
decode_bytes (HnTokenizer *tok, const int32_t *ids, gsize n, gboolean skip_special, GError **error)
{
  g_autoptr (GPtrArray) tokens = g_ptr_array_new_with_free_func ((GDestroyNotify) g_byte_array_unref);
  for (gsize i = 0; i < n; i++)
    {
      int32_t id = ids[i];
      const HnAddedToken *t = g_hash_table_lookup (tok->added_by_id, GINT_TO_POINTER (id));
      if (t && t->special && skip_special)
        continue;
      const char *s = t ? t->content
                        : (id >= 0 && (guint) id < tok->model->vocab->len ? g_ptr_array_index (tok->model->vocab, id) : NULL);
      if (id < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is negative (decoding with %s)", id, tok->path);
          return NULL;
        }
      if (!s)
        continue; /* an id past the vocabulary (a model's padded rows) has no text, as in tokenizers */
      if (skip_special && tok->model->piece_types && (guint) id < tok->model->vocab->len
          && (tok->model->piece_types[id] == 3 || tok->model->piece_types[id] == 2))
        continue;
      GByteArray *b = g_byte_array_new ();
      g_byte_array_append (b, (const guint8 *) s, strlen (s));
      g_ptr_array_add (tokens, b);
    }
  if (tok->decoder && !hn_decoder_apply (tok->decoder, tokens, error))
    return NULL;
  GByteArray *out = g_byte_array_new ();
  for (guint i = 0; i < tokens->len; i++)
    {
      GByteArray *b = g_ptr_array_index (tokens, i);
      if (!tok->decoder && i > 0)
        g_byte_array_append (out, (const guint8 *) " ", 1);
      g_byte_array_append (out, b->data, b->len);
    }
  if (tok->clean_up_spaces)
    clean_up_spaces (out);
  return out;
}

static char *
bytes_to_utf8 (const guint8 *data, gsize len)
{
  /* An empty GByteArray has no buffer (data NULL): g_utf8_make_valid refuses it. */
  return len ? g_utf8_make_valid ((const char *) data, (gssize) len) : g_strdup ("");
}

char *
hn_tokenizer_decode (HnTokenizer *tok, const int32_t *ids, gsize n_ids, gboolean skip_special_tokens, GError **error)
{
  g_autoptr (GByteArray) b = decode_bytes (tok, ids, n_ids, skip_special_tokens, error);
  if (!b)
    return NULL;
  return bytes_to_utf8 (b->data, b->len);
}

struct _HnTokenDecoder {
  HnTokenizer *tok;
  gboolean skip_special;
  GArray *ids;         /* the window: context ids + the ids not yet fully emitted */
  GByteArray *prefix;  /* decode of the context part (already emitted) */
  guint prefix_index;  /* ids[0..prefix_index) are context */
};

HnTokenDecoder *
hn_token_decoder_new (HnTokenizer *tok, gboolean skip_special_tokens)
{
  HnTokenDecoder *d = g_new0 (HnTokenDecoder, 1);
  d->tok = hn_tokenizer_ref (tok);
  d->skip_special = skip_special_tokens;
  d->ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  d->prefix = g_byte_array_new ();
  return d;
}

void
hn_token_decoder_free (HnTokenDecoder *d)
{
  if (!d)
    return;
  hn_tokenizer_unref (d->tok);
  g_array_unref (d->ids);
  g_byte_array_unref (d->prefix);
  g_free (d);
}

/* TRUE when the bytes end inside a UTF-8 character that may still complete. */
static gboolean
ends_incomplete (const guint8 *s, gsize len)
{
  gsize k = 0;
  while (k < len && k < 4 && (s[len - 1 - k] & 0xC0) == 0x80)
    k++;
  if (k == len || k >= 4)
    return FALSE;
  guint8 lead = s[len - 1 - k];
  gsize need = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead < 0xE0 ? 2 : 0;
  if (lead >= 0xF5)
    need = 0;
  return need > k + 1;
}

char *
hn_token_decoder_push (HnTokenDecoder *d, int32_t id, GError **error)
{
  g_array_append_val (d->ids, id);
  g_autoptr (GByteArray) all = decode_bytes (d->tok, (const int32_t *) d->ids->data, d->ids->len, d->skip_special, error);
  if (!all)
    {
      g_array_set_size (d->ids, d->ids->len - 1);
      return NULL;
    }
  if (all->len <= d->prefix->len || ends_incomplete (all->data, all->len))
    return g_strdup ("");
  gsize common = d->prefix->len;
  if (common > 0 && memcmp (all->data, d->prefix->data, common) != 0) /* an empty prefix has no buffer */
    common = 0; /* a context-dependent decoder rewrote the context: emit all */
  char *text = bytes_to_utf8 (all->data + common, all->len - common);
  /* Slide the window: the ids after the old context become the new context. */
  guint new_prefix_index = d->ids->len - d->prefix_index;
  g_array_remove_range (d->ids, 0, d->prefix_index);
  g_autoptr (GByteArray) p = decode_bytes (d->tok, (const int32_t *) d->ids->data, d->ids->len, d->skip_special, NULL);
  g_byte_array_set_size (d->prefix, 0);
  if (p)
    g_byte_array_append (d->prefix, p->data, p->len);
  d->prefix_index = new_prefix_index;
  return text;
}

char *
hn_token_decoder_flush (HnTokenDecoder *d)
{
  g_autoptr (GByteArray) all = decode_bytes (d->tok, (const int32_t *) d->ids->data, d->ids->len, d->skip_special, NULL);
  char *text;
  if (all && all->len > d->prefix->len &&
      (d->prefix->len == 0 || memcmp (all->data, d->prefix->data, d->prefix->len) == 0))
    text = bytes_to_utf8 (all->data + d->prefix->len, all->len - d->prefix->len);
  else
    text = g_strdup ("");
  g_array_set_size (d->ids, 0);
  g_byte_array_set_size (d->prefix, 0);
  d->prefix_index = 0;
  return text;
}

/* ---- getters ---- */

int32_t
hn_tokenizer_get_vocab_size (HnTokenizer *tok)
{
  int32_t n = (int32_t) tok->model->vocab->len;
  for (guint i = 0; i < tok->added->len; i++)
    n = MAX (n, ((HnAddedToken *) g_ptr_array_index (tok->added, i))->id + 1);
  return n;
}

int32_t hn_tokenizer_get_bos_id (HnTokenizer *tok) { return tok->bos_id; }
int32_t hn_tokenizer_get_eos_id (HnTokenizer *tok) { return tok->eos_id; }
int32_t hn_tokenizer_get_pad_id (HnTokenizer *tok) { return tok->pad_id; }
int32_t hn_tokenizer_get_unk_id (HnTokenizer *tok) { return tok->unk_id; }
const char *hn_tokenizer_get_bos_token (HnTokenizer *tok) { return tok->bos_token; }
const char *hn_tokenizer_get_eos_token (HnTokenizer *tok) { return tok->eos_token; }
const char *hn_tokenizer_get_pad_token (HnTokenizer *tok) { return tok->pad_token; }
const char *hn_tokenizer_get_unk_token (HnTokenizer *tok) { return tok->unk_token; }
const char *hn_tokenizer_get_chat_template (HnTokenizer *tok) { return tok->chat_template; }
guint64 hn_tokenizer_get_model_max_length (HnTokenizer *tok) { return tok->model_max_length; }
const char *hn_tokenizer_get_path (HnTokenizer *tok) { return tok->path; }

const int32_t *
hn_tokenizer_get_eos_ids (HnTokenizer *tok, gsize *n_out)
{
  *n_out = tok->eos_ids->len;
  return (const int32_t *) tok->eos_ids->data;
}

gboolean
hn_tokenizer_is_eos (HnTokenizer *tok, int32_t id)
{
  for (guint i = 0; i < tok->eos_ids->len; i++)
    if (g_array_index (tok->eos_ids, int32_t, i) == id)
      return TRUE;
  return FALSE;
}

static gboolean
array_has (GArray *a, int32_t id)
{
  for (guint i = 0; i < a->len; i++)
    if (g_array_index (a, int32_t, i) == id)
      return TRUE;
  return FALSE;
}

gboolean
hn_tokenizer_get_add_bos (HnTokenizer *tok)
{
  if (tok->has_post)
    return tok->bos_id >= 0 && array_has (tok->post_prefix, tok->bos_id);
  return tok->add_bos && tok->bos_id >= 0;
}

gboolean
hn_tokenizer_get_add_eos (HnTokenizer *tok)
{
  if (tok->has_post)
    return tok->eos_id >= 0 && array_has (tok->post_suffix, tok->eos_id);
  return tok->add_eos && tok->eos_id >= 0;
}

int32_t
hn_tokenizer_token_to_id (HnTokenizer *tok, const char *token)
{
  if (!token)
    return -1;
  const HnAddedToken *t = g_hash_table_lookup (tok->added_by_content, token);
  if (t)
    return t->id;
  return hn_model_lookup (tok->model, token);
}

const char *
hn_tokenizer_id_to_token (HnTokenizer *tok, int32_t id)
{
  const HnAddedToken *t = g_hash_table_lookup (tok->added_by_id, GINT_TO_POINTER (id));
  if (t)
    return t->content;
  if (id < 0 || (guint) id >= tok->model->vocab->len)
    return NULL;
  return g_ptr_array_index (tok->model->vocab, id);
}

gboolean
hn_tokenizer_is_special (HnTokenizer *tok, int32_t id)
{
  const HnAddedToken *t = g_hash_table_lookup (tok->added_by_id, GINT_TO_POINTER (id));
  if (t)
    return t->special;
  return tok->model->piece_types && id >= 0 && (guint) id < tok->model->vocab->len
         && (tok->model->piece_types[id] == 2 || tok->model->piece_types[id] == 3);
}

/* ---- tokenizer.json ---- */

static gboolean
read_added_tokens (HnTokenizer *tok, JsonObject *root, const char *file, GError **error)
{
  JsonNode *an = json_object_get_member (root, "added_tokens");
  if (!an || JSON_NODE_HOLDS_NULL (an))
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY (an))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: added_tokens is not an array", file);
      return FALSE;
    }
  JsonArray *a = json_node_get_array (an);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      JsonObject *o = JSON_NODE_HOLDS_OBJECT (e) ? json_node_get_object (e) : NULL;
      const char *content = hn_tok_json_str (o, "content");
      JsonNode *idn = o ? json_object_get_member (o, "id") : NULL;
      if (idn && JSON_NODE_HOLDS_VALUE (idn) && json_node_get_value_type (idn) == G_TYPE_INT64 &&
          (json_node_get_int (idn) < 0 || json_node_get_int (idn) > (1 << 26)))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: added_tokens[%u] has an invalid id %" G_GINT64_FORMAT
                       " (ids are 0 to %d)", file, i, json_node_get_int (idn), 1 << 26);
          return FALSE;
        }
      if (!content || !*content || !idn || !JSON_NODE_HOLDS_VALUE (idn) || json_node_get_value_type (idn) != G_TYPE_INT64)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: added_tokens[%u] needs a non-empty content and an integer id", file, i);
          return FALSE;
        }
      gboolean special = hn_tok_json_bool (o, "special", FALSE);
      hn_tokenizer_add_token (tok, content, (int32_t) json_node_get_int (idn), special,
                              hn_tok_json_bool (o, "lstrip", FALSE), hn_tok_json_bool (o, "rstrip", FALSE),
                              hn_tok_json_bool (o, "single_word", FALSE), hn_tok_json_bool (o, "normalized", !special));
    }
  return TRUE;
}

static int32_t
special_id_from_pair (HnTokenizer *tok, JsonNode *n)
{
  /* ["[CLS]", 101] */
  if (!n || !JSON_NODE_HOLDS_ARRAY (n) || json_array_get_length (json_node_get_array (n)) != 2)
    return -1;
  JsonArray *a = json_node_get_array (n);
  gint64 id = hn_tok_json_array_int (a, 1);
  if (id >= 0 && id <= G_MAXINT32)
    return (int32_t) id;
  JsonNode *tn = json_array_get_element (a, 0);
  if (JSON_NODE_HOLDS_VALUE (tn) && json_node_get_value_type (tn) == G_TYPE_STRING)
    return hn_tokenizer_token_to_id (tok, json_node_get_string (tn));
  return -1;
}

/* Computes the ids a post-processor puts before/after a single sequence. */
static gboolean
read_post_processor (HnTokenizer *tok, JsonNode *node, GArray *prefix, GArray *suffix, const char *file, GError **error)
{
  JsonObject *o = json_node_get_object (node);
  const char *type = hn_tok_json_str (o, "type");
  if (!type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: post_processor has no type", file);
      return FALSE;
    }
  if (g_str_equal (type, "ByteLevel"))
    return TRUE;
  if (g_str_equal (type, "Sequence"))
    {
      JsonNode *pn = json_object_get_member (o, "processors");
      if (!pn || !JSON_NODE_HOLDS_ARRAY (pn))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Sequence post_processor has no 'processors' array", file);
          return FALSE;
        }
      JsonArray *a = json_node_get_array (pn);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *c = json_array_get_element (a, i);
          if (!JSON_NODE_HOLDS_OBJECT (c))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: post_processor %u is not an object", file, i);
              return FALSE;
            }
          g_autoptr (GArray) p = g_array_new (FALSE, FALSE, sizeof (int32_t));
          g_autoptr (GArray) s = g_array_new (FALSE, FALSE, sizeof (int32_t));
          if (!read_post_processor (tok, c, p, s, file, error))
            return FALSE;
          /* a later processor wraps the result of the earlier ones */
          g_array_prepend_vals (prefix, p->data, p->len);
          g_array_append_vals (suffix, s->data, s->len);
        }
      return TRUE;
    }
  if (g_str_equal (type, "BertProcessing") || g_str_equal (type, "RobertaProcessing"))
    {
      int32_t cls = special_id_from_pair (tok, json_object_get_member (o, "cls"));
      int32_t sep = special_id_from_pair (tok, json_object_get_member (o, "sep"));
      if (cls < 0 || sep < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s needs cls and sep as [token, id]", file, type);
          return FALSE;
        }
      g_array_append_val (prefix, cls);
      g_array_append_val (suffix, sep);
      return TRUE;
    }
  if (g_str_equal (type, "TemplateProcessing"))
    {
      JsonNode *sn = json_object_get_member (o, "single");
      JsonNode *stn = json_object_get_member (o, "special_tokens");
      if (!sn || !JSON_NODE_HOLDS_ARRAY (sn))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: TemplateProcessing has no 'single' template", file);
          return FALSE;
        }
      JsonObject *specials = stn && JSON_NODE_HOLDS_OBJECT (stn) ? json_node_get_object (stn) : NULL;
      JsonArray *a = json_node_get_array (sn);
      gboolean seen_seq = FALSE;
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          JsonObject *eo = JSON_NODE_HOLDS_OBJECT (e) ? json_node_get_object (e) : NULL;
          if (eo && json_object_has_member (eo, "Sequence"))
            {
              seen_seq = TRUE;
              continue;
            }
          JsonNode *stok = eo ? json_object_get_member (eo, "SpecialToken") : NULL;
          const char *name = stok && JSON_NODE_HOLDS_OBJECT (stok) ? hn_tok_json_str (json_node_get_object (stok), "id") : NULL;
          if (!name)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: TemplateProcessing item %u is neither Sequence nor SpecialToken", file, i);
              return FALSE;
            }
          JsonNode *spn = specials ? json_object_get_member (specials, name) : NULL;
          JsonObject *spo = spn && JSON_NODE_HOLDS_OBJECT (spn) ? json_node_get_object (spn) : NULL;
          JsonNode *idsn = spo ? json_object_get_member (spo, "ids") : NULL;
          if (!idsn || !JSON_NODE_HOLDS_ARRAY (idsn))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: TemplateProcessing special token '%s' has no ids", file, name);
              return FALSE;
            }
          JsonArray *ids = json_node_get_array (idsn);
          for (guint k = 0; k < json_array_get_length (ids); k++)
            {
              gint64 v = hn_tok_json_array_int (ids, k);
              if (v < 0 || v > G_MAXINT32)
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: TemplateProcessing special token '%s' has a bad id", file, name);
                  return FALSE;
                }
              int32_t id = (int32_t) v;
              g_array_append_val (seen_seq ? suffix : prefix, id);
            }
        }
      return TRUE;
    }
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: post_processor type '%s' is not supported", file, type);
  return FALSE;
}

static HnTokenizer *
load_tokenizer_json (const char *file, GError **error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (file, HN_MAX_TOKENIZER_BYTES, "tokenizer file", &data, &len, error))
    return NULL;
  g_autoptr (JsonParser) parser = NULL;
  HnTokJsonSpan big[2];
  JsonNode *rootn = hn_tok_json_load_split (file, data, len, &parser, big, error);
  if (!rootn)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (rootn))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the top level is not a JSON object", file);
      return NULL;
    }
  JsonObject *root = json_node_get_object (rootn);
  JsonNode *mn = json_object_get_member (root, "model");
  if (!mn || !JSON_NODE_HOLDS_OBJECT (mn))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: no 'model' object (is this a tokenizer.json?)", file);
      return NULL;
    }
  g_autoptr (HnTokenizer) tok = hn_tokenizer_new_empty (file);
  GError *e = NULL;
  tok->model = hn_model_from_json (json_node_get_object (mn), big, file, error);
  if (!tok->model)
    return NULL;
  if (!read_added_tokens (tok, root, file, error))
    return NULL;
  tok->normalizer = hn_normalizer_from_json (json_object_get_member (root, "normalizer"), file, &e);
  if (!e)
    tok->pretok = hn_pretok_from_json (json_object_get_member (root, "pre_tokenizer"), file, &e);
  if (!e)
    tok->decoder = hn_decoder_from_json (json_object_get_member (root, "decoder"), file, &e);
  if (e)
    {
      g_propagate_error (error, e);
      return NULL;
    }
  JsonNode *pp = json_object_get_member (root, "post_processor");
  if (pp && !JSON_NODE_HOLDS_NULL (pp))
    {
      if (!JSON_NODE_HOLDS_OBJECT (pp))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: post_processor is not an object", file);
          return NULL;
        }
      if (!read_post_processor (tok, pp, tok->post_prefix, tok->post_suffix, file, error))
        return NULL;
      tok->has_post = TRUE;
    }
  /* post-processor ids must exist */
  int32_t vs = hn_tokenizer_get_vocab_size (tok);
  for (guint i = 0; i < tok->post_prefix->len + tok->post_suffix->len; i++)
    {
      int32_t id = i < tok->post_prefix->len ? g_array_index (tok->post_prefix, int32_t, i)
                                             : g_array_index (tok->post_suffix, int32_t, i - tok->post_prefix->len);
      if (id >= vs)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: post_processor adds id %d, outside the vocabulary (%d)", file, id, vs);
          return NULL;
        }
    }
  tok->unk_id = tok->model->unk_id;
  tok->from_tokenizer_json = TRUE;
  return g_steal_pointer (&tok);
}

/* ---- tokenizer_config.json ---- */

/* "<s>" or {"content": "<s>", ...} */
static const char *
config_token (JsonObject *cfg, const char *key, gboolean *present)
{
  JsonNode *n = cfg ? json_object_get_member (cfg, key) : NULL;
  *present = n != NULL;
  if (!n || JSON_NODE_HOLDS_NULL (n))
    return NULL;
  if (JSON_NODE_HOLDS_OBJECT (n))
    return hn_tok_json_str (json_node_get_object (n), "content");
  if (json_node_get_value_type (n) == G_TYPE_STRING)
    return json_node_get_string (n);
  return NULL;
}

static void
set_special (HnTokenizer *tok, JsonObject *cfg, JsonObject *map, const char *key, const char *const *guesses,
             char **token_out, int32_t *id_out)
{
  gboolean present = FALSE, present2 = FALSE;
  const char *s = config_token (cfg, key, &present);
  if (!present)
    s = config_token (map, key, &present2);
  if (!present && !present2)
    for (const char *const *g = guesses; g && *g && !s; g++)
      if (hn_tokenizer_token_to_id (tok, *g) >= 0)
        s = *g;
  if (!s)
    return;
  int32_t id = hn_tokenizer_token_to_id (tok, s);
  if (id < 0)
    return;
  g_free (*token_out);
  *token_out = g_strdup (s);
  *id_out = id;
  /* a declared special token is matched in text like an added token */
  hn_tokenizer_add_token (tok, s, id, TRUE, FALSE, FALSE, FALSE, FALSE);
}

static gboolean
pretok_has_byte_level (const HnPretok *p)
{
  if (!p)
    return FALSE;
  if (p->type == HN_PRETOK_BYTE_LEVEL)
    return TRUE;
  for (guint i = 0; p->children && i < p->children->len; i++)
    if (pretok_has_byte_level (g_ptr_array_index (p->children, i)))
      return TRUE;
  return FALSE;
}

/* transformers 5's AutoTokenizer builds LlamaTokenizer's pipeline in the class
 * (models/llama/tokenization_llama.py) and takes only the vocabulary, merges and
 * added tokens from tokenizer.json: no normalizer, a Metaspace pre-tokenizer
 * without split (prepend "always", "first" with legacy=false, "never" with
 * add_prefix_space=false) and the matching decoder. A Strip or space-squeezing
 * normalizer in the file is thus not applied (stories260K: a trailing newline
 * stays a token). Only for a model folder (what AutoTokenizer reads): a
 * tokenizer.json given as a file keeps its own pipeline, as
 * tokenizers.Tokenizer.from_file does. Byte-level files that carry the class
 * name (DeepSeek-V3) keep theirs too. */
static gboolean
use_llama_class_pipeline (HnTokenizer *tok, JsonObject *cfg, GError **error)
{
  const char *cls = hn_tok_json_str (cfg, "tokenizer_class");
  if (!cls || !(g_str_equal (cls, "LlamaTokenizer") || g_str_equal (cls, "LlamaTokenizerFast"))
      || tok->model->type != HN_MODEL_BPE || pretok_has_byte_level (tok->pretok)
      || (tok->decoder && tok->decoder->type == HN_DEC_BYTE_LEVEL))
    return TRUE;
  gboolean prefix = hn_tok_json_bool (cfg, "add_prefix_space", TRUE);
  gboolean legacy = hn_tok_json_bool (cfg, "legacy", FALSE);
  g_autofree char *pre = g_strdup_printf ("{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
                                          "\"prepend_scheme\": \"%s\", \"split\": false}",
                                          !prefix ? "never" : legacy ? "always" : "first");
  g_autofree char *dec = g_strdup_printf ("{\"type\": \"Sequence\", \"decoders\": ["
                                          "{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"}, \"content\": \" \"}, "
                                          "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}%s]}",
                                          prefix ? ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}" : "");
  g_autoptr (JsonNode) pn = json_from_string (pre, NULL), dn = json_from_string (dec, NULL);
  g_autoptr (HnPretok) p = hn_pretok_from_json (pn, tok->path, error);
  g_autoptr (HnDecoder) d = p ? hn_decoder_from_json (dn, tok->path, error) : NULL;
  if (!d)
    return FALSE;
  g_clear_pointer (&tok->normalizer, hn_normalizer_free);
  hn_pretok_free (tok->pretok);
  tok->pretok = g_steal_pointer (&p);
  hn_decoder_free (tok->decoder);
  tok->decoder = g_steal_pointer (&d);
  return TRUE;
}

static gboolean
apply_config (HnTokenizer *tok, const char *dir, gboolean as_folder, GError **error)
{
  g_autofree char *cfg_path = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autofree char *map_path = g_build_filename (dir, "special_tokens_map.json", NULL);
  g_autoptr (JsonParser) p1 = NULL, p2 = NULL;
  JsonObject *cfg = NULL, *map = NULL;
  if (g_file_test (cfg_path, G_FILE_TEST_EXISTS))
    {
      JsonNode *n = hn_tok_parse_json_file (cfg_path, &p1, error);
      if (!n)
        return FALSE;
      cfg = json_node_get_object (n);
    }
  if (g_file_test (map_path, G_FILE_TEST_EXISTS))
    {
      JsonNode *n = hn_tok_parse_json_file (map_path, &p2, error);
      if (!n)
        return FALSE;
      map = json_node_get_object (n);
    }
  /* added_tokens_decoder: id -> token (the slow formats rely on it) */
  JsonNode *atd = cfg ? json_object_get_member (cfg, "added_tokens_decoder") : NULL;
  if (atd && JSON_NODE_HOLDS_OBJECT (atd))
    {
      JsonObjectIter it;
      const char *key;
      JsonNode *val;
      json_object_iter_init (&it, json_node_get_object (atd));
      while (json_object_iter_next (&it, &key, &val))
        {
          char *endp = NULL;
          gint64 id = g_ascii_strtoll (key, &endp, 10);
          JsonObject *o = JSON_NODE_HOLDS_OBJECT (val) ? json_node_get_object (val) : NULL;
          const char *content = hn_tok_json_str (o, "content");
          if (!endp || *endp || id < 0 || id > (1 << 26) || !content)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: added_tokens_decoder entry '%s' is malformed", cfg_path, key);
              return FALSE;
            }
          gboolean special = hn_tok_json_bool (o, "special", FALSE);
          hn_tokenizer_add_token (tok, content, (int32_t) id, special, hn_tok_json_bool (o, "lstrip", FALSE),
                                  hn_tok_json_bool (o, "rstrip", FALSE), hn_tok_json_bool (o, "single_word", FALSE),
                                  hn_tok_json_bool (o, "normalized", !special));
        }
    }
  static const char *const bos_guess[] = { "<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|endoftext|>", NULL };
  static const char *const eos_guess[] = { "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|endoftext|>", NULL };
  static const char *const pad_guess[] = { "<pad>", "[PAD]", NULL };
  static const char *const unk_guess[] = { "<unk>", "[UNK]", NULL };
  set_special (tok, cfg, map, "bos_token", bos_guess, &tok->bos_token, &tok->bos_id);
  set_special (tok, cfg, map, "eos_token", eos_guess, &tok->eos_token, &tok->eos_id);
  set_special (tok, cfg, map, "pad_token", pad_guess, &tok->pad_token, &tok->pad_id);
  set_special (tok, cfg, map, "unk_token", unk_guess, &tok->unk_token, &tok->unk_id);
  if (tok->unk_id < 0)
    tok->unk_id = tok->model->unk_id;
  JsonNode *ast = cfg ? json_object_get_member (cfg, "additional_special_tokens") : NULL;
  if (ast && JSON_NODE_HOLDS_ARRAY (ast))
    {
      JsonArray *a = json_node_get_array (ast);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          JsonNode *e = json_array_get_element (a, i);
          const char *s = JSON_NODE_HOLDS_OBJECT (e) ? hn_tok_json_str (json_node_get_object (e), "content")
                          : json_node_get_value_type (e) == G_TYPE_STRING ? json_node_get_string (e) : NULL;
          int32_t id = s ? hn_tokenizer_token_to_id (tok, s) : -1;
          if (id >= 0)
            hn_tokenizer_add_token (tok, s, id, TRUE, FALSE, FALSE, FALSE, FALSE);
        }
    }
  if (cfg)
    {
      JsonNode *n;
      if ((n = json_object_get_member (cfg, "add_bos_token")) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
        tok->add_bos = json_node_get_boolean (n), tok->add_bos_set = TRUE;
      if ((n = json_object_get_member (cfg, "add_eos_token")) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
        tok->add_eos = json_node_get_boolean (n), tok->add_eos_set = TRUE;
      n = json_object_get_member (cfg, "chat_template");
      if (n && json_node_get_value_type (n) == G_TYPE_STRING)
        tok->chat_template = g_strdup (json_node_get_string (n));
      else if (n && JSON_NODE_HOLDS_ARRAY (n))
        {
          JsonArray *a = json_node_get_array (n);
          for (guint i = 0; i < json_array_get_length (a); i++)
            {
              JsonNode *e = json_array_get_element (a, i);
              JsonObject *o = JSON_NODE_HOLDS_OBJECT (e) ? json_node_get_object (e) : NULL;
              const char *name = hn_tok_json_str (o, "name"), *tmpl = hn_tok_json_str (o, "template");
              if (tmpl && (!tok->chat_template || g_strcmp0 (name, "default") == 0))
                {
                  g_free (tok->chat_template);
                  tok->chat_template = g_strdup (tmpl);
                }
            }
        }
      n = json_object_get_member (cfg, "model_max_length");
      if (n && JSON_NODE_HOLDS_VALUE (n))
        {
          double v = json_node_get_value_type (n) == G_TYPE_INT64 ? (double) json_node_get_int (n)
                     : json_node_get_value_type (n) == G_TYPE_DOUBLE ? json_node_get_double (n) : 0.0;
          tok->model_max_length = v > 0 && v <= (double) (G_GUINT64_CONSTANT (1) << 40) ? (guint64) v : 0;
        }
      /* vocab.json + merges.txt of RoBERTa-like models: <s> text </s>, and
       * add_prefix_space as the config says. */
      if (tok->slow_gpt2)
        {
          if (hn_tok_json_bool (cfg, "add_prefix_space", FALSE))
            {
              hn_pretok_free (tok->pretok);
              tok->pretok = hn_pretok_new_byte_level (TRUE, TRUE);
            }
          const char *klass = hn_tok_json_str (cfg, "tokenizer_class");
          static const char *const roberta_like[] = { "Roberta", "Bart", "Longformer", "LED", "Mvp", "Blenderbot", NULL };
          for (const char *const *r = roberta_like; klass && *r; r++)
            if (g_str_has_prefix (klass, *r) && tok->bos_id >= 0 && tok->eos_id >= 0)
              {
                g_array_set_size (tok->post_prefix, 0);
                g_array_set_size (tok->post_suffix, 0);
                g_array_append_val (tok->post_prefix, tok->bos_id);
                g_array_append_val (tok->post_suffix, tok->eos_id);
                break;
              }
        }
      tok->clean_up_spaces = hn_tok_json_bool (cfg, "clean_up_tokenization_spaces", FALSE);
      if (as_folder && tok->from_tokenizer_json && !use_llama_class_pipeline (tok, cfg, error))
        return FALSE;
      /* LlamaTokenizer with legacy=false: the SentencePiece dummy prefix goes
       * only at the start of the input, not after each special token. */
      n = json_object_get_member (cfg, "legacy");
      if (n && json_node_get_value_type (n) == G_TYPE_BOOLEAN && !json_node_get_boolean (n) && tok->normalizer
          && tok->normalizer->type == HN_NORM_SPM)
        tok->normalizer->dummy_prefix_first_only = TRUE;
      /* transformers' Llama/Gemma fast tokenizers rebuild the post-processor
       * from add_bos_token/add_eos_token. */
      const char *cls = hn_tok_json_str (cfg, "tokenizer_class");
      if (cls && (g_str_has_prefix (cls, "Llama") || g_str_has_prefix (cls, "CodeLlama") || g_str_has_prefix (cls, "Gemma"))
          && (tok->add_bos_set || tok->add_eos_set))
        {
          g_array_set_size (tok->post_prefix, 0);
          g_array_set_size (tok->post_suffix, 0);
          if (tok->add_bos && tok->bos_id >= 0)
            g_array_append_val (tok->post_prefix, tok->bos_id);
          if (tok->add_eos && tok->eos_id >= 0)
            g_array_append_val (tok->post_suffix, tok->eos_id);
          tok->has_post = TRUE;
        }
    }
  /* Generation stops at EOS and at the end-of-turn tokens chat models use. */
  if (tok->eos_id >= 0)
    g_array_append_val (tok->eos_ids, tok->eos_id);
  static const char *const eot[] = { "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>",
                                     "<|endoftext|>", "<|end_of_text|>", NULL };
  for (const char *const *e = eot; *e; e++)
    {
      const HnAddedToken *t = g_hash_table_lookup (tok->added_by_content, *e);
      if (t && t->special && !array_has (tok->eos_ids, t->id))
        g_array_append_val (tok->eos_ids, t->id);
    }
  return TRUE;
}

/* ---- entry point ---- */

static gboolean
exists (const char *dir, const char *name, char **out)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  if (!g_file_test (p, G_FILE_TEST_IS_REGULAR))
    return FALSE;
  *out = g_steal_pointer (&p);
  return TRUE;
}

HnTokenizer *
hn_tokenizer_load (const char *path, GError **error)
{
  g_return_val_if_fail (path, NULL);
  g_autofree char *gguf = hn_gguf_resolve_path (path);
  if (gguf)
    return hn_tokenizer_load_gguf (gguf, error);
  g_autofree char *file = NULL, *merges = NULL;
  g_autoptr (HnTokenizer) tok = NULL;
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      if (!exists (path, "tokenizer.json", &file) && !exists (path, "tokenizer.model", &file)
          && !(exists (path, "vocab.json", &file) && exists (path, "merges.txt", &merges))
          && !exists (path, "vocab.txt", &file) && !exists (path, "spiece.model", &file))
        {
          g_clear_pointer (&file, g_free);
          g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                       "%s: no tokenizer found (looked for tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt)",
                       path);
          return NULL;
        }
    }
  else if (g_file_test (path, G_FILE_TEST_IS_REGULAR))
    file = g_strdup (path);
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: no such tokenizer file or folder", path);
      return NULL;
    }
  g_autofree char *dir = g_path_get_dirname (file);
  g_autofree char *base = g_path_get_basename (file);
  if (g_str_has_suffix (base, ".model"))
    tok = hn_tokenizer_load_spm (file, error);
  else if (g_str_has_suffix (base, ".txt"))
    tok = hn_tokenizer_load_vocab_txt (file, error);
  else if (g_str_equal (base, "vocab.json") || g_str_has_suffix (base, "-vocab.json"))
    {
      if (!merges)
        merges = g_build_filename (dir, "merges.txt", NULL);
      tok = hn_tokenizer_load_gpt2 (file, merges, error);
    }
  else
    tok = load_tokenizer_json (file, error);
  if (!tok)
    return NULL;
  if (!apply_config (tok, dir, g_file_test (path, G_FILE_TEST_IS_DIR), error))
    return NULL;
  return g_steal_pointer (&tok);
}
