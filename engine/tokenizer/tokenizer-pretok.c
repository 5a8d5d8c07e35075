/* Pre-tokenizers: split normalized text into words before the model. The
 * split behaviours follow tokenizers' SplitDelimiterBehavior exactly
 * (tokenizers/src/tokenizer/normalizer.rs). Regexes are compiled once with
 * G_REGEX_OPTIMIZE (PCRE2 JIT). */
#include "tokenizer-private.h"
#include <string.h>

/* GPT-2's pattern; tokenizers' ByteLevel uses it with use_regex. */
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define SPIECE_UNDERLINE "\xe2\x96\x81"

/* ---- byte-level alphabet ---- */

static gunichar byte_to_char[256];
static gint16 char_to_byte[324];
static char byte_utf8[256][3];

static void
byte_level_init (void)
{
  static gsize done = 0;
  if (g_once_init_enter (&done))
    {
      gboolean direct[256] = { 0 };
      for (int b = '!'; b <= '~'; b++)
        direct[b] = TRUE;
      for (int b = 0xA1; b <= 0xAC; b++)
        direct[b] = TRUE;
      for (int b = 0xAE; b <= 0xFF; b++)
        direct[b] = TRUE;
      int n = 0;
      for (int i = 0; i < 324; i++)
        char_to_byte[i] = -1;
      for (int b = 0; b < 256; b++)
        {
          byte_to_char[b] = direct[b] ? (gunichar) b : (gunichar) (256 + n++);
          char_to_byte[byte_to_char[b]] = (gint16) b;
          int l = g_unichar_to_utf8 (byte_to_char[b], byte_utf8[b]);
          byte_utf8[b][l] = '\0';
        }
      g_once_init_leave (&done, 1);
    }
}

gunichar
hn_byte_level_char (guint8 b)
{
  byte_level_init ();
  return byte_to_char[b];
}

int
hn_byte_level_byte (gunichar c)
{
  byte_level_init ();
  return c < 324 ? char_to_byte[c] : -1;
}

static char *
byte_level_map (const char *s)
{
  byte_level_init ();
  gsize len = strlen (s);
  GString *out = g_string_sized_new (len * 2);
  for (gsize i = 0; i < len; i++)
    g_string_append (out, byte_utf8[(guint8) s[i]]);
  return g_string_free (out, FALSE);
}

/* ---- splitting ---- */

typedef struct {
  gsize s, e;
  gboolean match;
} Span;

static void
add_span (GArray *spans, gsize s, gsize e, gboolean match)
{
  Span sp = { s, e, match };
  g_array_append_val (spans, sp);
}

/* Turns matches into pieces according to the behaviour; appends to out. */
static void
emit_spans (const char *str, GArray *spans, HnSplitBehavior behavior, gboolean invert, GPtrArray *out)
{
  Span *sp = (Span *) spans->data;
  if (invert)
    for (guint i = 0; i < spans->len; i++)
      sp[i].match = !sp[i].match;
  g_autoptr (GArray) res = g_array_new (FALSE, FALSE, sizeof (Span));
  gboolean prev_match = FALSE;
  switch (behavior)
    {
    case HN_SPLIT_REMOVED:
      for (guint i = 0; i < spans->len; i++)
        if (!sp[i].match)
          g_array_append_val (res, sp[i]);
      break;
    case HN_SPLIT_ISOLATED:
      g_array_append_vals (res, sp, spans->len);
      break;
    case HN_SPLIT_MERGED_WITH_PREVIOUS:
      for (guint i = 0; i < spans->len; i++)
        {
          if (sp[i].match && !prev_match && res->len)
            g_array_index (res, Span, res->len - 1).e = sp[i].e;
          else
            g_array_append_val (res, sp[i]);
          prev_match = sp[i].match;
        }
      break;
    case HN_SPLIT_MERGED_WITH_NEXT:
      for (guint k = spans->len; k-- > 0;)
        {
          if (sp[k].match && !prev_match && res->len)
            g_array_index (res, Span, res->len - 1).s = sp[k].s;
          else
            g_array_append_val (res, sp[k]);
          prev_match = sp[k].match;
        }
      /* built back to front */
      for (guint i = 0, j = res->len ? res->len - 1 : 0; i < j; i++, j--)
        {
          Span t = g_array_index (res, Span, i);
          g_array_index (res, Span, i) = g_array_index (res, Span, j);
          g_array_index (res, Span, j) = t;
        }
      break;
    case HN_SPLIT_CONTIGUOUS:
      for (guint i = 0; i < spans->len; i++)
        {
          if (sp[i].match == prev_match && res->len)
            g_array_index (res, Span, res->len - 1).e = sp[i].e;
          else
            g_array_append_val (res, sp[i]);
          prev_match = sp[i].match;
        }
      break;
    }
  for (guint i = 0; i < res->len; i++)
    {
      Span *r = &g_array_index (res, Span, i);
      if (r->e > r->s)
        g_ptr_array_add (out, g_strndup (str + r->s, r->e - r->s));
    }
}

/* PCRE2 (under GRegex) stops a match that backtracks past its match or
 * depth limit, e.g. (a+)+$ on a long run of a's, with an error: that must
 * fail the encode, naming the pattern, not split the text wrongly. */
static gboolean
regex_failed (GRegex *re, const char *what, gsize len, GError *e, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "tokenizer %s regex '%s' failed on a %" G_GSIZE_FORMAT
               "-byte piece (PCRE2's match limit): %s", what, g_regex_get_pattern (re), len, e->message);
  g_error_free (e);
  return FALSE;
}

static gboolean
split_regex (GRegex *re, const char *str, HnSplitBehavior behavior, gboolean invert, GPtrArray *out, GError **error)
{
  gsize len = strlen (str);
  g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (Span));
  g_autoptr (GMatchInfo) mi = NULL;
  gsize last = 0;
  GError *err = NULL;
  g_regex_match_full (re, str, (gssize) len, 0, 0, &mi, &err);
  if (err)
    return regex_failed (re, "pre-tokenizer", len, err, error);
  while (g_match_info_matches (mi))
    {
      int s, e;
      if (g_match_info_fetch_pos (mi, 0, &s, &e) && e > s)
        {
          if ((gsize) s > last)
            add_span (spans, last, s, FALSE);
          add_span (spans, s, e, TRUE);
          last = e;
        }
      if (!g_match_info_next (mi, &err))
        {
          if (err)
            return regex_failed (re, "pre-tokenizer", len, err, error);
          break;
        }
    }
  if (last < len)
    add_span (spans, last, len, FALSE);
  emit_spans (str, spans, behavior, invert, out);
  return TRUE;
}

typedef gboolean (*CharPred) (gunichar c);

static void
split_chars (CharPred pred, const char *str, HnSplitBehavior behavior, GPtrArray *out)
{
  gsize len = strlen (str);
  g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (Span));
  gsize last = 0;
  for (const char *p = str; *p; p = g_utf8_next_char (p))
    {
      if (pred (g_utf8_get_char (p)))
        {
          gsize s = p - str, e = g_utf8_next_char (p) - str;
          if (s > last)
            add_span (spans, last, s, FALSE);
          add_span (spans, s, e, TRUE);
          last = e;
        }
    }
  if (last < len)
    add_span (spans, last, len, FALSE);
  emit_spans (str, spans, behavior, FALSE, out);
}

static gboolean
is_ws (gunichar c)
{
  return g_unichar_isspace (c) || g_unichar_type (c) == G_UNICODE_SPACE_SEPARATOR;
}

static gboolean
is_punct (gunichar c)
{
  if (c < 128)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  switch (g_unichar_type (c))
    {
    case G_UNICODE_CONNECT_PUNCTUATION:
    case G_UNICODE_DASH_PUNCTUATION:
    case G_UNICODE_CLOSE_PUNCTUATION:
    case G_UNICODE_FINAL_PUNCTUATION:
    case G_UNICODE_INITIAL_PUNCTUATION:
    case G_UNICODE_OTHER_PUNCTUATION:
    case G_UNICODE_OPEN_PUNCTUATION:
      return TRUE;
    default:
      return FALSE;
    }
}

static gboolean
is_numeric (gunichar c)
{
  GUnicodeType t = g_unichar_type (c);
  return t == G_UNICODE_DECIMAL_NUMBER || t == G_UNICODE_LETTER_NUMBER || t == G_UNICODE_OTHER_NUMBER;
}

static char *
replace_spaces (const char *s, const char *rep)
{
  GString *out = g_string_sized_new (strlen (s) + 8);
  for (const char *p = s; *p; p++)
    {
      if (*p == ' ')
        g_string_append (out, rep);
      else
        g_string_append_c (out, *p);
    }
  return g_string_free (out, FALSE);
}

/* Applies p to one piece; appends results to out. */
static gboolean
apply_one (const HnPretok *p, char *piece, gboolean first, GPtrArray *out, GError **error)
{
  switch (p->type)
    {
    case HN_PRETOK_SEQUENCE:
      g_assert_not_reached ();
      break;
    case HN_PRETOK_BYTE_LEVEL:
      {
        g_autofree char *pre = NULL;
        if (p->add_prefix_space && piece[0] != ' ')
          pre = g_strconcat (" ", piece, NULL);
        const char *src = pre ? pre : piece;
        if (p->use_regex)
          {
            g_autoptr (GPtrArray) parts = g_ptr_array_new_with_free_func (g_free);
            if (!split_regex (p->regex, src, HN_SPLIT_ISOLATED, FALSE, parts, error))
              return FALSE;
            for (guint i = 0; i < parts->len; i++)
              g_ptr_array_add (out, byte_level_map (g_ptr_array_index (parts, i)));
          }
        else if (*src)
          g_ptr_array_add (out, byte_level_map (src));
        break;
      }
    case HN_PRETOK_SPLIT:
      return split_regex (p->regex, piece, p->behavior, p->invert, out, error);
    case HN_PRETOK_METASPACE:
      {
        g_autofree char *r = replace_spaces (piece, p->replacement);
        if ((p->prepend_scheme == HN_PREPEND_ALWAYS || (p->prepend_scheme == HN_PREPEND_FIRST && first))
            && !g_str_has_prefix (r, p->replacement))
          {
            char *t = g_strconcat (p->replacement, r, NULL);
            g_free (r);
            r = t;
          }
        if (!p->split)
          {
            if (*r)
              g_ptr_array_add (out, g_steal_pointer (&r));
            break;
          }
        /* split on the replacement, MergedWithNext */
        gsize rl = strlen (p->replacement);
        g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (Span));
        gsize last = 0, len = strlen (r);
        for (const char *q = r; (q = strstr (q, p->replacement)); q += rl)
          {
            gsize s = q - r;
            if (s > last)
              add_span (spans, last, s, FALSE);
            add_span (spans, s, s + rl, TRUE);
            last = s + rl;
          }
        if (last < len)
          add_span (spans, last, len, FALSE);
        emit_spans (r, spans, HN_SPLIT_MERGED_WITH_NEXT, FALSE, out);
        break;
      }
    case HN_PRETOK_WHITESPACE:
      return split_regex (p->regex, piece, HN_SPLIT_REMOVED, TRUE, out, error);
    case HN_PRETOK_WHITESPACE_SPLIT:
      split_chars (is_ws, piece, HN_SPLIT_REMOVED, out);
      break;
    case HN_PRETOK_BERT:
      {
        g_autoptr (GPtrArray) words = g_ptr_array_new_with_free_func (g_free);
        split_chars (is_ws, piece, HN_SPLIT_REMOVED, words);
        for (guint i = 0; i < words->len; i++)
          split_chars (is_punct, g_ptr_array_index (words, i), HN_SPLIT_ISOLATED, out);
        break;
      }
    case HN_PRETOK_DIGITS:
      split_chars (is_numeric, piece, p->individual_digits ? HN_SPLIT_ISOLATED : HN_SPLIT_CONTIGUOUS, out);
      break;
    case HN_PRETOK_PUNCTUATION:
      split_chars (is_punct, piece, p->behavior, out);
      break;
    case HN_PRETOK_CHAR_DELIMITER:
      {
        char d[8];
        d[g_unichar_to_utf8 (p->delimiter, d)] = '\0';
        g_auto (GStrv) parts = g_strsplit (piece, d, -1);
        for (guint i = 0; parts[i]; i++)
          if (*parts[i])
            g_ptr_array_add (out, g_strdup (parts[i]));
        break;
      }
    }
  return TRUE;
}

gboolean
hn_pretok_apply (const HnPretok *p, GPtrArray *pieces, gboolean at_start, GError **error)
{
  if (p->type == HN_PRETOK_SEQUENCE)
    {
      for (guint i = 0; i < p->children->len; i++)
        if (!hn_pretok_apply (g_ptr_array_index (p->children, i), pieces, at_start, error))
          return FALSE;
      return TRUE;
    }
  g_autoptr (GPtrArray) out = g_ptr_array_new_full (pieces->len * 2 + 4, g_free);
  for (guint i = 0; i < pieces->len; i++)
    if (!apply_one (p, g_ptr_array_index (pieces, i), at_start && i == 0, out, error))
      return FALSE;
  g_ptr_array_set_size (pieces, 0); /* frees the old pieces */
  g_ptr_array_extend_and_steal (pieces, g_steal_pointer (&out));
  return TRUE;
}

/* ---- construction ---- */

void
hn_pretok_free (HnPretok *p)
{
  if (!p)
    return;
  if (p->children)
    g_ptr_array_unref (p->children);
  g_clear_pointer (&p->regex, g_regex_unref);
  g_free (p->replacement);
  g_free (p);
}

HnPretok *
hn_pretok_new_byte_level (gboolean add_prefix_space, gboolean use_regex)
{
  HnPretok *p = g_new0 (HnPretok, 1);
  p->type = HN_PRETOK_BYTE_LEVEL;
  p->add_prefix_space = add_prefix_space;
  p->use_regex = use_regex;
  if (use_regex)
    p->regex = hn_tok_regex_new (GPT2_PATTERN, "ByteLevel", NULL);
  return p;
}

HnPretok *
hn_pretok_new_bert (void)
{
  HnPretok *p = g_new0 (HnPretok, 1);
  p->type = HN_PRETOK_BERT;
  return p;
}

static gboolean
parse_behavior (const char *s, HnSplitBehavior *b)
{
  static const struct { const char *name; HnSplitBehavior b; } names[] = {
    { "Removed", HN_SPLIT_REMOVED }, { "Isolated", HN_SPLIT_ISOLATED },
    { "MergedWithPrevious", HN_SPLIT_MERGED_WITH_PREVIOUS }, { "MergedWithNext", HN_SPLIT_MERGED_WITH_NEXT },
    { "Contiguous", HN_SPLIT_CONTIGUOUS },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    if (g_ascii_strcasecmp (s, names[i].name) == 0
        || (g_str_equal (s, "merged_with_previous") && names[i].b == HN_SPLIT_MERGED_WITH_PREVIOUS)
        || (g_str_equal (s, "merged_with_next") && names[i].b == HN_SPLIT_MERGED_WITH_NEXT))
      {
        *b = names[i].b;
        return TRUE;
      }
  return FALSE;
}

gboolean hn_tok_parse_prepend_scheme (JsonObject *o, HnPrependScheme *scheme, const char *file, GError **error);

gboolean
hn_tok_parse_prepend_scheme (JsonObject *o, HnPrependScheme *scheme, const char *file, GError **error)
{
  const char *s = hn_tok_json_str (o, "prepend_scheme");
  if (!s)
    {
      /* older files: add_prefix_space */
      *scheme = hn_tok_json_bool (o, "add_prefix_space", TRUE) ? HN_PREPEND_ALWAYS : HN_PREPEND_NEVER;
      return TRUE;
    }
  if (g_str_equal (s, "always"))
    *scheme = HN_PREPEND_ALWAYS;
  else if (g_str_equal (s, "first"))
    *scheme = HN_PREPEND_FIRST;
  else if (g_str_equal (s, "never"))
    *scheme = HN_PREPEND_NEVER;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Metaspace prepend_scheme '%s' is not always/first/never", file, s);
      return FALSE;
    }
  return TRUE;
}

HnPretok *
hn_pretok_from_json (JsonNode *node, const char *file, GError **error)
{
  if (!node || JSON_NODE_HOLDS_NULL (node))
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: pre_tokenizer is not an object", file);
      return NULL;
    }
  JsonObject *o = json_node_get_object (node);
  const char *type = hn_tok_json_str (o, "type");
  if (!type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: pre_tokenizer has no type", file);
      return NULL;
    }
  g_autoptr (HnPretok) p = g_new0 (HnPretok, 1);
  if (g_str_equal (type, "Sequence"))
    {
      p->type = HN_PRETOK_SEQUENCE;
      p->children = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_pretok_free);
      JsonNode *cn = json_object_get_member (o, "pretokenizers");
      if (!cn || !JSON_NODE_HOLDS_ARRAY (cn))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Sequence pre_tokenizer has no 'pretokenizers' array", file);
          return NULL;
        }
      JsonArray *a = json_node_get_array (cn);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          GError *e = NULL;
          HnPretok *c = hn_pretok_from_json (json_array_get_element (a, i), file, &e);
          if (e)
            {
              g_propagate_error (error, e);
              return NULL;
            }
          if (c)
            g_ptr_array_add (p->children, c);
        }
    }
  else if (g_str_equal (type, "ByteLevel"))
    {
      hn_pretok_free (g_steal_pointer (&p));
      p = hn_pretok_new_byte_level (hn_tok_json_bool (o, "add_prefix_space", TRUE), hn_tok_json_bool (o, "use_regex", TRUE));
    }
  else if (g_str_equal (type, "Split"))
    {
      p->type = HN_PRETOK_SPLIT;
      JsonNode *pn = json_object_get_member (o, "pattern");
      JsonObject *po = pn && JSON_NODE_HOLDS_OBJECT (pn) ? json_node_get_object (pn) : NULL;
      const char *lit = po ? hn_tok_json_str (po, "String") : NULL;
      const char *re = po ? hn_tok_json_str (po, "Regex") : NULL;
      if (!lit && !re)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Split pre_tokenizer pattern is neither String nor Regex", file);
          return NULL;
        }
      g_autofree char *escaped = lit ? g_regex_escape_string (lit, -1) : NULL;
      g_autofree char *what = g_strdup_printf ("%s: Split pre_tokenizer", file);
      p->regex = hn_tok_regex_new (lit ? escaped : re, what, error);
      if (!p->regex)
        return NULL;
      const char *b = hn_tok_json_str (o, "behavior");
      if (!b || !parse_behavior (b, &p->behavior))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Split pre_tokenizer behavior '%s' is unknown", file, b ? b : "(none)");
          return NULL;
        }
      p->invert = hn_tok_json_bool (o, "invert", FALSE);
    }
  else if (g_str_equal (type, "Metaspace"))
    {
      p->type = HN_PRETOK_METASPACE;
      const char *r = hn_tok_json_str (o, "replacement");
      p->replacement = g_strdup (r ? r : SPIECE_UNDERLINE);
      if (!hn_tok_parse_prepend_scheme (o, &p->prepend_scheme, file, error))
        return NULL;
      p->split = hn_tok_json_bool (o, "split", TRUE);
    }
  else if (g_str_equal (type, "Whitespace"))
    {
      p->type = HN_PRETOK_WHITESPACE;
      p->regex = hn_tok_regex_new ("\\w+|[^\\w\\s]+", "Whitespace pre_tokenizer", error);
      if (!p->regex)
        return NULL;
    }
  else if (g_str_equal (type, "WhitespaceSplit"))
    p->type = HN_PRETOK_WHITESPACE_SPLIT;
  else if (g_str_equal (type, "BertPreTokenizer"))
    p->type = HN_PRETOK_BERT;
  else if (g_str_equal (type, "Digits"))
    {
      p->type = HN_PRETOK_DIGITS;
      p->individual_digits = hn_tok_json_bool (o, "individual_digits", FALSE);
    }
  else if (g_str_equal (type, "CharDelimiterSplit"))
    {
      p->type = HN_PRETOK_CHAR_DELIMITER;
      const char *d = hn_tok_json_str (o, "delimiter");
      if (!d || !*d || g_utf8_strlen (d, -1) != 1)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: CharDelimiterSplit needs a one-character delimiter", file);
          return NULL;
        }
      p->delimiter = g_utf8_get_char (d);
    }
  else if (g_str_equal (type, "Punctuation"))
    {
      p->type = HN_PRETOK_PUNCTUATION;
      const char *b = hn_tok_json_str (o, "behavior");
      p->behavior = HN_SPLIT_ISOLATED;
      if (b && !parse_behavior (b, &p->behavior))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Punctuation pre_tokenizer behavior '%s' is unknown", file, b);
          return NULL;
        }
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported", file, type);
      return NULL;
    }
  return g_steal_pointer (&p);
}
