/* Normalizers: Unicode forms via GLib, lower-casing, accents, Replace,
 * Prepend, Strip, the BERT normalizer, NMT, and SentencePiece's precompiled
 * charsmap (a darts-clone double-array trie of rewrite rules, looked up by
 * longest prefix exactly as sentencepiece's normalizer.cc does).
 *
 * One documented difference: tokenizers' Precompiled normalizer first tries
 * each whole grapheme cluster (< 6 bytes) as a key and only then its
 * characters; we always take the longest rule at each position, as
 * SentencePiece itself does. Both agree whenever no rule key spans a
 * grapheme boundary differently, which holds for the NFKC charsmaps we test
 * (spiece.model rewritten as tokenizer.json gives the same ids). */
#include "tokenizer-private.h"
#include <string.h>

/* ---- precompiled charsmap ---- */

HnCharsMap *
hn_charsmap_new (const guint8 *data, gsize len, const char *file, GError **error)
{
  if (len < 4)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: precompiled_charsmap is truncated (%zu bytes)", file, len);
      return NULL;
    }
  guint32 trie_size;
  memcpy (&trie_size, data, 4); /* the blob sits at any offset of a decoded base64 string */
  trie_size = GUINT32_FROM_LE (trie_size);
  if (trie_size % 4 != 0 || trie_size == 0 || trie_size > len - 4)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: precompiled_charsmap trie size %u does not fit its %zu bytes",
                   file, trie_size, len);
      return NULL;
    }
  HnCharsMap *m = g_new0 (HnCharsMap, 1);
  m->n_units = trie_size / 4;
  m->units = g_new (guint32, m->n_units);
  for (gsize i = 0; i < m->n_units; i++)
    {
      guint32 u;
      memcpy (&u, data + 4 + 4 * i, 4);
      m->units[i] = GUINT32_FROM_LE (u);
    }
  m->normalized_len = len - 4 - trie_size;
  /* +1: a terminating NUL, so a value pointing into the last string is safe */
  m->normalized = g_malloc0 (m->normalized_len + 1);
  memcpy (m->normalized, data + 4 + trie_size, m->normalized_len);
  return m;
}

void
hn_charsmap_free (HnCharsMap *m)
{
  if (!m)
    return;
  g_free (m->units);
  g_free (m->normalized);
  g_free (m);
}

/* Longest rule matching a prefix of s[0..len): returns its byte length and
 * the replacement, or 0. */
static gsize
charsmap_longest (const HnCharsMap *m, const char *s, gsize len, const char **repl)
{
#define UNIT_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
#define UNIT_LABEL(u) ((u) & ((1u << 31) | 0xFFu))
#define UNIT_HAS_LEAF(u) (((u) >> 8) & 1u)
#define UNIT_VALUE(u) ((u) & ((1u << 31) - 1))
  gsize best = 0;
  gsize pos = 0;
  guint32 unit = m->units[0];
  pos ^= UNIT_OFFSET (unit);
  for (gsize i = 0; i < len; i++)
    {
      guint8 c = (guint8) s[i];
      pos ^= c;
      if (pos >= m->n_units)
        break;
      unit = m->units[pos];
      if (UNIT_LABEL (unit) != c)
        break;
      pos ^= UNIT_OFFSET (unit);
      if (pos >= m->n_units)
        break;
      if (UNIT_HAS_LEAF (unit))
        {
          guint32 v = UNIT_VALUE (m->units[pos]);
          if (v < m->normalized_len)
            {
              best = i + 1;
              *repl = m->normalized + v;
            }
        }
    }
  return best;
}

/* Appends the normalized form of the prefix of s and returns the bytes consumed. */
static gsize
charsmap_prefix (const HnCharsMap *m, const char *s, gsize len, GString *out)
{
  const char *repl = NULL;
  gsize n = m ? charsmap_longest (m, s, len, &repl) : 0;
  if (n)
    {
      g_string_append (out, repl);
      return n;
    }
  const char *next = g_utf8_next_char (s);
  gsize cl = MIN ((gsize) (next - s), len);
  g_string_append_len (out, s, cl);
  return cl;
}

static char *
charsmap_apply (const HnCharsMap *m, const char *s)
{
  gsize len = strlen (s);
  GString *out = g_string_sized_new (len);
  for (gsize i = 0; i < len;)
    i += charsmap_prefix (m, s + i, len - i, out);
  return g_string_free (out, FALSE);
}

/* SentencePiece normalizer_spec: sentencepiece/src/normalizer.cc Normalize(). */
static char *
spm_apply (const HnNormalizer *n, const char *s, gboolean at_start)
{
  gsize len = strlen (s);
  GString *out = g_string_sized_new (len + 8);
  g_autoptr (GString) piece = g_string_new (NULL);
  const char *space = n->escape_ws ? "\xe2\x96\x81" : " ";
  gsize i = 0;
  if (n->remove_extra_ws)
    while (i < len)
      {
        g_string_truncate (piece, 0);
        gsize used = charsmap_prefix (n->charsmap, s + i, len - i, piece);
        if (!g_str_equal (piece->str, " "))
          break;
        i += used;
      }
  if (i >= len)
    return g_string_free (out, FALSE);
  if (n->add_dummy_prefix && (at_start || !n->dummy_prefix_first_only))
    g_string_append (out, space);
  gboolean prev_space = n->remove_extra_ws;
  while (i < len)
    {
      g_string_truncate (piece, 0);
      i += charsmap_prefix (n->charsmap, s + i, len - i, piece);
      const char *sp = piece->str;
      if (prev_space)
        while (*sp == ' ')
          sp++;
      if (*sp)
        {
          for (const char *c = sp; *c; c++)
            {
              if (*c == ' ' && n->escape_ws)
                g_string_append (out, space);
              else
                g_string_append_c (out, *c);
            }
          prev_space = g_str_has_suffix (sp, " ");
        }
      if (!n->remove_extra_ws)
        prev_space = FALSE;
    }
  if (n->remove_extra_ws)
    {
      gsize sl = strlen (space);
      while (out->len >= sl && memcmp (out->str + out->len - sl, space, sl) == 0)
        g_string_truncate (out, out->len - sl);
    }
  return g_string_free (out, FALSE);
}

/* ---- simple normalizers ---- */

static gboolean
is_bert_control (gunichar c)
{
  if (c == '\t' || c == '\n' || c == '\r')
    return FALSE;
  switch (g_unichar_type (c))
    {
    case G_UNICODE_CONTROL:
    case G_UNICODE_FORMAT:
    case G_UNICODE_UNASSIGNED:
    case G_UNICODE_PRIVATE_USE:
    case G_UNICODE_SURROGATE:
      return TRUE;
    default:
      return FALSE;
    }
}

static gboolean
is_bert_whitespace (gunichar c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || g_unichar_type (c) == G_UNICODE_SPACE_SEPARATOR;
}

static gboolean
is_cjk (gunichar c)
{
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF)
         || (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF)
         || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static char *
strip_accents (const char *s)
{
  g_autofree char *nfd = g_utf8_normalize (s, -1, G_NORMALIZE_NFD);
  GString *out = g_string_sized_new (strlen (s));
  for (const char *p = nfd; p && *p; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);
      if (g_unichar_type (c) != G_UNICODE_NON_SPACING_MARK)
        g_string_append_unichar (out, c);
    }
  return g_string_free (out, FALSE);
}

static char *
bert_apply (const HnNormalizer *n, const char *s)
{
  GString *out = g_string_sized_new (strlen (s) + 8);
  for (const char *p = s; *p; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);
      if (n->clean_text)
        {
          if (c == 0 || c == 0xFFFD || is_bert_control (c))
            continue;
          if (is_bert_whitespace (c))
            c = ' ';
        }
      if (n->chinese_chars && is_cjk (c))
        {
          g_string_append_c (out, ' ');
          g_string_append_unichar (out, c);
          g_string_append_c (out, ' ');
        }
      else
        g_string_append_unichar (out, c);
    }
  char *r = g_string_free (out, FALSE);
  if (n->strip_accents)
    {
      char *t = strip_accents (r);
      g_free (r);
      r = t;
    }
  if (n->lowercase)
    {
      char *t = g_utf8_strdown (r, -1);
      g_free (r);
      r = t;
    }
  return r;
}

static char *
nmt_apply (const char *s)
{
  GString *out = g_string_sized_new (strlen (s));
  for (const char *p = s; *p; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);
      if ((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F)
        continue;
      if (c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 || (c >= 0x200B && c <= 0x200F)
          || c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD)
        c = ' ';
      g_string_append_unichar (out, c);
    }
  return g_string_free (out, FALSE);
}

static char *
strip_apply (const char *s, gboolean left, gboolean right)
{
  const char *b = s, *e = s + strlen (s);
  if (left)
    while (b < e && g_unichar_isspace (g_utf8_get_char (b)))
      b = g_utf8_next_char (b);
  if (right)
    while (e > b)
      {
        const char *p = g_utf8_find_prev_char (b, e);
        if (!p || !g_unichar_isspace (g_utf8_get_char (p)))
          break;
        e = p;
      }
  return g_strndup (b, e - b);
}

static char *
replace_literal (const char *s, const char *pattern, const char *content)
{
  if (!*pattern)
    return g_strdup (s);
  GString *out = g_string_sized_new (strlen (s));
  gsize pl = strlen (pattern);
  const char *p = s;
  for (const char *q; (q = strstr (p, pattern)); p = q + pl)
    {
      g_string_append_len (out, p, q - p);
      g_string_append (out, content);
    }
  g_string_append (out, p);
  return g_string_free (out, FALSE);
}

char *
hn_normalizer_apply (const HnNormalizer *n, const char *s, GError **error)
{
  return hn_normalizer_apply_at (n, s, TRUE, error);
}

char *
hn_normalizer_apply_at (const HnNormalizer *n, const char *s, gboolean at_start, GError **error)
{
  switch (n->type)
    {
    case HN_NORM_SEQUENCE:
      {
        char *cur = g_strdup (s);
        for (guint i = 0; i < n->children->len; i++)
          {
            char *next = hn_normalizer_apply_at (g_ptr_array_index (n->children, i), cur, at_start, error);
            g_free (cur);
            cur = next;
            if (!cur)
              return NULL;
          }
        return cur;
      }
    case HN_NORM_NFC:
      return g_utf8_normalize (s, -1, G_NORMALIZE_NFC);
    case HN_NORM_NFD:
      return g_utf8_normalize (s, -1, G_NORMALIZE_NFD);
    case HN_NORM_NFKC:
      return g_utf8_normalize (s, -1, G_NORMALIZE_NFKC);
    case HN_NORM_NFKD:
      return g_utf8_normalize (s, -1, G_NORMALIZE_NFKD);
    case HN_NORM_LOWERCASE:
      return g_utf8_strdown (s, -1);
    case HN_NORM_STRIP_ACCENTS:
      {
        /* tokenizers removes combining marks from the current string (it is
         * used after NFD); do the same without decomposing again. */
        GString *out = g_string_sized_new (strlen (s));
        for (const char *p = s; *p; p = g_utf8_next_char (p))
          {
            gunichar c = g_utf8_get_char (p);
            if (g_unichar_type (c) != G_UNICODE_NON_SPACING_MARK)
              g_string_append_unichar (out, c);
          }
        return g_string_free (out, FALSE);
      }
    case HN_NORM_REPLACE:
      if (n->regex)
        {
          /* NULL when PCRE2 stops at its match limit: an error naming the pattern */
          GError *e = NULL;
          char *r = g_regex_replace_literal (n->regex, s, -1, 0, n->content, 0, &e);
          if (!r)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "tokenizer normalizer Replace regex '%s' failed on a %"
                           G_GSIZE_FORMAT "-byte text (PCRE2's match limit): %s", g_regex_get_pattern (n->regex),
                           strlen (s), e ? e->message : "no result");
              g_clear_error (&e);
            }
          return r;
        }
      return replace_literal (s, n->pattern, n->content);
    case HN_NORM_PREPEND:
      return *s ? g_strconcat (n->content, s, NULL) : g_strdup (s);
    case HN_NORM_STRIP:
      return strip_apply (s, n->left, n->right);
    case HN_NORM_BERT:
      return bert_apply (n, s);
    case HN_NORM_PRECOMPILED:
      return charsmap_apply (n->charsmap, s);
    case HN_NORM_NMT:
      return nmt_apply (s);
    case HN_NORM_SPM:
      return spm_apply (n, s, at_start);
    }
  g_return_val_if_reached (g_strdup (s));
}

void
hn_normalizer_free (HnNormalizer *n)
{
  if (!n)
    return;
  if (n->children)
    g_ptr_array_unref (n->children);
  g_free (n->pattern);
  g_clear_pointer (&n->regex, g_regex_unref);
  g_free (n->content);
  hn_charsmap_free (n->charsmap);
  g_free (n);
}

/* Reads {"String": "..."} or {"Regex": "..."}. */
static gboolean
read_pattern (JsonObject *o, const char *file, const char *what, char **literal, GRegex **regex, GError **error)
{
  JsonNode *pn = json_object_get_member (o, "pattern");
  if (!pn || !JSON_NODE_HOLDS_OBJECT (pn))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s has no pattern object", file, what);
      return FALSE;
    }
  JsonObject *po = json_node_get_object (pn);
  const char *s = hn_tok_json_str (po, "String");
  const char *r = hn_tok_json_str (po, "Regex");
  if (s)
    {
      *literal = g_strdup (s);
      return TRUE;
    }
  if (r)
    {
      g_autofree char *w = g_strdup_printf ("%s: %s", file, what);
      *regex = hn_tok_regex_new (r, w, error);
      return *regex != NULL;
    }
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s pattern is neither String nor Regex", file, what);
  return FALSE;
}

HnNormalizer *
hn_normalizer_from_json (JsonNode *node, const char *file, GError **error)
{
  if (!node || JSON_NODE_HOLDS_NULL (node))
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: normalizer is not an object", file);
      return NULL;
    }
  JsonObject *o = json_node_get_object (node);
  const char *type = hn_tok_json_str (o, "type");
  if (!type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: normalizer has no type", file);
      return NULL;
    }
  g_autoptr (HnNormalizer) n = g_new0 (HnNormalizer, 1);
  if (g_str_equal (type, "Sequence"))
    {
      n->type = HN_NORM_SEQUENCE;
      n->children = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_normalizer_free);
      JsonNode *cn = json_object_get_member (o, "normalizers");
      if (!cn || !JSON_NODE_HOLDS_ARRAY (cn))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Sequence normalizer has no 'normalizers' array", file);
          return NULL;
        }
      JsonArray *a = json_node_get_array (cn);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          GError *e = NULL;
          HnNormalizer *c = hn_normalizer_from_json (json_array_get_element (a, i), file, &e);
          if (e)
            {
              g_propagate_error (error, e);
              return NULL;
            }
          if (c)
            g_ptr_array_add (n->children, c);
        }
    }
  else if (g_str_equal (type, "NFC"))
    n->type = HN_NORM_NFC;
  else if (g_str_equal (type, "NFD"))
    n->type = HN_NORM_NFD;
  else if (g_str_equal (type, "NFKC"))
    n->type = HN_NORM_NFKC;
  else if (g_str_equal (type, "NFKD"))
    n->type = HN_NORM_NFKD;
  else if (g_str_equal (type, "Lowercase"))
    n->type = HN_NORM_LOWERCASE;
  else if (g_str_equal (type, "StripAccents"))
    n->type = HN_NORM_STRIP_ACCENTS;
  else if (g_str_equal (type, "Nmt"))
    n->type = HN_NORM_NMT;
  else if (g_str_equal (type, "Replace"))
    {
      n->type = HN_NORM_REPLACE;
      if (!read_pattern (o, file, "Replace normalizer", &n->pattern, &n->regex, error))
        return NULL;
      const char *c = hn_tok_json_str (o, "content");
      n->content = g_strdup (c ? c : "");
    }
  else if (g_str_equal (type, "Prepend"))
    {
      n->type = HN_NORM_PREPEND;
      const char *c = hn_tok_json_str (o, "prepend");
      if (!c)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Prepend normalizer has no 'prepend' string", file);
          return NULL;
        }
      n->content = g_strdup (c);
    }
  else if (g_str_equal (type, "Strip"))
    {
      n->type = HN_NORM_STRIP;
      n->left = hn_tok_json_bool (o, "strip_left", TRUE);
      n->right = hn_tok_json_bool (o, "strip_right", TRUE);
    }
  else if (g_str_equal (type, "BertNormalizer"))
    {
      n->type = HN_NORM_BERT;
      n->clean_text = hn_tok_json_bool (o, "clean_text", TRUE);
      n->chinese_chars = hn_tok_json_bool (o, "handle_chinese_chars", TRUE);
      n->lowercase = hn_tok_json_bool (o, "lowercase", TRUE);
      /* strip_accents: null means "follow lowercase" */
      n->strip_accents = hn_tok_json_bool (o, "strip_accents", n->lowercase);
    }
  else if (g_str_equal (type, "Precompiled"))
    {
      n->type = HN_NORM_PRECOMPILED;
      const char *b64 = hn_tok_json_str (o, "precompiled_charsmap");
      if (b64 && *b64)
        {
          gsize len = 0;
          g_autofree guint8 *blob = g_base64_decode (b64, &len);
          n->charsmap = hn_charsmap_new (blob, len, file, error);
          if (!n->charsmap)
            return NULL;
        }
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: normalizer type '%s' is not supported", file, type);
      return NULL;
    }
  return g_steal_pointer (&n);
}
