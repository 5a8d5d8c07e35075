/* Fast reading of the big parts of tokenizer.json. json-glib builds a node
 * per value and takes over a second on Qwen's 11 MB file (150k vocabulary
 * entries + 150k merges); here the model's vocab and merges are scanned
 * directly into the model, and json-glib parses only the rest (a few KB,
 * with vocab/merges replaced by null). The scanner validates what it reads:
 * a malformed value is a CORRUPT error with its byte offset. */
#include "tokenizer-private.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *s, *end, *start; /* start: the document, for offsets */
  const char *file;
  char why[64];                /* the last failure, for errors about a value's shape */
} Scan;

static gboolean
fail (Scan *sc, const char *what, GError **error)
{
  g_snprintf (sc->why, sizeof sc->why, "%s", what);
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not valid JSON at byte %zu: %s", sc->file,
               (gsize) (sc->s - sc->start), what);
  return FALSE;
}

static inline void
skip_ws (Scan *sc)
{
  while (sc->s < sc->end && (*sc->s == ' ' || *sc->s == '\n' || *sc->s == '\r' || *sc->s == '\t'))
    sc->s++;
}

static int
hex4 (const char *p)
{
  int v = 0;
  for (int i = 0; i < 4; i++)
    {
      int d = g_ascii_xdigit_value (p[i]);
      if (d < 0)
        return -1;
      v = v * 16 + d;
    }
  return v;
}

/* Reads a string at sc->s (which is '"') into out (decoded, NUL-terminated). */
static gboolean
read_string (Scan *sc, GString *out, GError **error)
{
  g_string_truncate (out, 0);
  if (sc->s >= sc->end || *sc->s != '"')
    return fail (sc, "expected a string", error);
  sc->s++;
  for (;;)
    {
      const char *p = sc->s;
      while (p < sc->end && *p != '"' && *p != '\\' && (guchar) *p >= 0x20)
        p++;
      g_string_append_len (out, sc->s, p - sc->s);
      sc->s = p;
      if (p >= sc->end)
        return fail (sc, "unterminated string", error);
      if (*p == '"')
        {
          sc->s++;
          break;
        }
      if ((guchar) *p < 0x20)
        return fail (sc, "control character in a string", error);
      /* escape */
      if (p + 1 >= sc->end)
        return fail (sc, "unterminated escape", error);
      char c = p[1];
      sc->s = p + 2;
      switch (c)
        {
        case '"': g_string_append_c (out, '"'); break;
        case '\\': g_string_append_c (out, '\\'); break;
        case '/': g_string_append_c (out, '/'); break;
        case 'b': g_string_append_c (out, '\b'); break;
        case 'f': g_string_append_c (out, '\f'); break;
        case 'n': g_string_append_c (out, '\n'); break;
        case 'r': g_string_append_c (out, '\r'); break;
        case 't': g_string_append_c (out, '\t'); break;
        case 'u':
          {
            if (sc->end - sc->s < 4)
              return fail (sc, "short \\u escape", error);
            int u = hex4 (sc->s);
            if (u < 0)
              return fail (sc, "bad \\u escape", error);
            sc->s += 4;
            gunichar ch = (gunichar) u;
            if (u >= 0xD800 && u <= 0xDBFF)
              {
                int lo;
                if (sc->end - sc->s < 6 || sc->s[0] != '\\' || sc->s[1] != 'u' || (lo = hex4 (sc->s + 2)) < 0xDC00
                    || lo > 0xDFFF)
                  return fail (sc, "unpaired surrogate", error);
                sc->s += 6;
                ch = 0x10000 + (((gunichar) u - 0xD800) << 10) + ((gunichar) lo - 0xDC00);
              }
            else if (u >= 0xDC00 && u <= 0xDFFF)
              return fail (sc, "unpaired surrogate", error);
            if (ch == 0)
              return fail (sc, "NUL in a string", error);
            g_string_append_unichar (out, ch);
            break;
          }
        default:
          return fail (sc, "unknown escape", error);
        }
    }
  if (!g_utf8_validate (out->str, out->len, NULL))
    return fail (sc, "string is not valid UTF-8", error);
  return TRUE;
}

static gboolean
read_number (Scan *sc, double *v, gboolean *is_int, GError **error)
{
  char buf[64];
  const char *p = sc->s;
  /* fast path: a plain integer (vocabulary ids) */
  {
    const char *q = p;
    gboolean neg = q < sc->end && *q == '-';
    if (neg)
      q++;
    gint64 x = 0;
    const char *d0 = q;
    while (q < sc->end && g_ascii_isdigit (*q) && q - d0 < 15)
      x = x * 10 + (*q++ - '0');
    if (q > d0 && (q >= sc->end || (*q != '.' && *q != 'e' && *q != 'E' && !g_ascii_isdigit (*q))))
      {
        *v = (double) (neg ? -x : x);
        *is_int = TRUE;
        sc->s = q;
        return TRUE;
      }
  }
  while (p < sc->end && (g_ascii_isdigit (*p) || *p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E'))
    p++;
  gsize n = p - sc->s;
  if (n == 0 || n >= sizeof buf)
    return fail (sc, "expected a number", error);
  memcpy (buf, sc->s, n);
  buf[n] = '\0';
  char *endp = NULL;
  *v = g_ascii_strtod (buf, &endp);
  if (!endp || *endp)
    return fail (sc, "bad number", error);
  *is_int = strpbrk (buf, ".eE") == NULL;
  sc->s = p;
  return TRUE;
}

static gboolean
expect (Scan *sc, char c, GError **error)
{
  skip_ws (sc);
  if (sc->s >= sc->end || *sc->s != c)
    {
      char what[32];
      g_snprintf (what, sizeof what, "expected '%c'", c);
      return fail (sc, what, error);
    }
  sc->s++;
  return TRUE;
}

/* After an element: ',' (returns TRUE, *more) or the closing char. */
static gboolean
next_or_close (Scan *sc, char close, gboolean *more, GError **error)
{
  skip_ws (sc);
  if (sc->s < sc->end && *sc->s == ',')
    {
      sc->s++;
      *more = TRUE;
      return TRUE;
    }
  if (sc->s < sc->end && *sc->s == close)
    {
      sc->s++;
      *more = FALSE;
      return TRUE;
    }
  return fail (sc, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'", error);
}

/* Skips any value (validating its structure). */
static gboolean
skip_value (Scan *sc, int depth, GError **error)
{
  if (depth > 512)
    return fail (sc, "nested too deeply", error);
  skip_ws (sc);
  if (sc->s >= sc->end)
    return fail (sc, "unexpected end", error);
  char c = *sc->s;
  if (c == '"')
    {
      /* strings are validated when they are read; here only find the end */
      for (const char *p = sc->s + 1; p < sc->end; p++)
        {
          if (*p == '\\')
            p++;
          else if (*p == '"')
            {
              sc->s = p + 1;
              return TRUE;
            }
        }
      return fail (sc, "unterminated string", error);
    }
  if (c == '{' || c == '[')
    {
      char close = c == '{' ? '}' : ']';
      sc->s++;
      skip_ws (sc);
      if (sc->s < sc->end && *sc->s == close)
        {
          sc->s++;
          return TRUE;
        }
      for (gboolean more = TRUE; more;)
        {
          if (c == '{')
            {
              skip_ws (sc);
              if (sc->s >= sc->end || *sc->s != '"')
                return fail (sc, "expected a member name", error);
              if (!skip_value (sc, depth + 1, error) || !expect (sc, ':', error))
                return FALSE;
            }
          if (!skip_value (sc, depth + 1, error) || !next_or_close (sc, close, &more, error))
            return FALSE;
        }
      return TRUE;
    }
  static const char *const lits[] = { "true", "false", "null" };
  for (gsize i = 0; i < G_N_ELEMENTS (lits); i++)
    {
      gsize l = strlen (lits[i]);
      if ((gsize) (sc->end - sc->s) >= l && memcmp (sc->s, lits[i], l) == 0)
        {
          sc->s += l;
          return TRUE;
        }
    }
  double v;
  gboolean is_int;
  return read_number (sc, &v, &is_int, error);
}

/* ---- the big values ---- */

gboolean
hn_tok_json_read_vocab (HnModel *m, const char *file, const char *data, gsize len, GError **error)
{
  Scan sc = { data, data + len, data, file };
  g_autoptr (GString) key = g_string_new (NULL);
  if (!expect (&sc, '{', error))
    return FALSE;
  skip_ws (&sc);
  if (sc.s < sc.end && *sc.s == '}')
    return TRUE;
  for (gboolean more = TRUE; more;)
    {
      skip_ws (&sc);
      if (!read_string (&sc, key, error) || !expect (&sc, ':', error))
        return FALSE;
      skip_ws (&sc);
      double v;
      gboolean is_int;
      if (!read_number (&sc, &v, &is_int, error))
        return FALSE;
      if (!is_int)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: vocabulary entry '%s' is not an integer id", file, key->str);
          return FALSE;
        }
      /* the id as written in the error: clamping it first showed -3 as -1 */
      if (v < 0 || v > (1 << 26))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: token '%s' has an invalid id %.0f (ids are 0 to %d)", file,
                       key->str, v, 1 << 26);
          return FALSE;
        }
      if (!hn_model_add_token (m, key->str, (int32_t) v, file, error))
        return FALSE;
      if (!next_or_close (&sc, '}', &more, error))
        return FALSE;
    }
  skip_ws (&sc);
  if (sc.s != sc.end)
    return fail (&sc, "trailing data after the vocabulary", error);
  return TRUE;
}

gboolean
hn_tok_json_read_merges (HnModel *m, const char *file, const char *data, gsize len, GError **error)
{
  Scan sc = { data, data + len, data, file };
  g_autoptr (GString) a = g_string_new (NULL);
  g_autoptr (GString) b = g_string_new (NULL);
  if (!expect (&sc, '[', error))
    return FALSE;
  skip_ws (&sc);
  if (sc.s < sc.end && *sc.s == ']')
    return TRUE;
  guint i = 0;
  for (gboolean more = TRUE; more; i++)
    {
      skip_ws (&sc);
      g_autoptr (GError) shape = NULL;
      /* well-formed JSON of the wrong shape ([1, 2], ["a"], ["a", "b", "c"]) is
       * reported as the merge it is, with the scanner's detail */
      if (sc.s < sc.end && *sc.s == '[')
        {
          sc.s++;
          skip_ws (&sc);
          if (read_string (&sc, a, &shape) && expect (&sc, ',', &shape))
            {
              skip_ws (&sc);
              if (read_string (&sc, b, &shape))
                expect (&sc, ']', &shape);
            }
          if (shape)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                           "%s: model.merges[%u] is not a pair of two strings [\"a\", \"b\"] (%s)", file, i,
                           sc.why);
              return FALSE;
            }
        }
      else
        {
          if (!read_string (&sc, a, &shape))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                           "%s: model.merges[%u] is neither a string \"a b\" nor a pair [\"a\", \"b\"] (%s)", file,
                           i, sc.why);
              return FALSE;
            }
          const char *sp = strchr (a->str, ' ');
          if (!sp || sp == a->str || sp[1] == '\0' || strchr (sp + 1, ' '))
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: merge %u '%s' is not two tokens separated by a space",
                           file, i, a->str);
              return FALSE;
            }
          g_string_assign (b, sp + 1);
          g_string_truncate (a, sp - a->str);
        }
      if (!hn_model_add_merge (m, a->str, b->str, file, error))
        return FALSE;
      if (!next_or_close (&sc, ']', &more, error))
        return FALSE;
    }
  return TRUE;
}

/* Unigram: [["piece", score], ...] */
gboolean
hn_tok_json_read_unigram_vocab (HnModel *m, const char *file, const char *data, gsize len, GError **error)
{
  Scan sc = { data, data + len, data, file };
  g_autoptr (GString) piece = g_string_new (NULL);
  g_autoptr (GArray) scores = g_array_new (FALSE, FALSE, sizeof (float));
  if (!expect (&sc, '[', error))
    return FALSE;
  skip_ws (&sc);
  gboolean more = !(sc.s < sc.end && *sc.s == ']');
  if (!more)
    sc.s++;
  while (more)
    {
      if (!expect (&sc, '[', error))
        return FALSE;
      skip_ws (&sc);
      if (!read_string (&sc, piece, error) || !expect (&sc, ',', error))
        return FALSE;
      skip_ws (&sc);
      double v;
      gboolean is_int;
      if (!read_number (&sc, &v, &is_int, error) || !expect (&sc, ']', error))
        return FALSE;
      if (!hn_model_add_token (m, piece->str, (int32_t) scores->len, file, error))
        return FALSE;
      float f = (float) v;
      g_array_append_val (scores, f);
      m->max_piece_bytes = MAX (m->max_piece_bytes, (int) piece->len);
      if (!next_or_close (&sc, ']', &more, error))
        return FALSE;
    }
  m->scores = (float *) g_array_steal (scores, NULL);
  m->min_score = G_MAXFLOAT;
  for (guint i = 0; i < m->vocab->len; i++)
    m->min_score = MIN (m->min_score, m->scores[i]);
  if (m->vocab->len == 0)
    m->min_score = 0.0f;
  return TRUE;
}

/* Parses tokenizer.json with model.vocab and model.merges cut out (their
 * spans returned in big[0], big[1]; NULL when absent). */
JsonNode *
hn_tok_json_load_split (const char *file, const char *data, gsize len, JsonParser **parser_out, HnTokJsonSpan big[2],
                        GError **error)
{
  memset (big, 0, 2 * sizeof (HnTokJsonSpan));
  Scan sc = { data, data + len, data, file };
  g_autoptr (GString) key = g_string_new (NULL);
  g_autoptr (GString) key2 = g_string_new (NULL);
  if (!expect (&sc, '{', error))
    return NULL;
  skip_ws (&sc);
  gboolean more = !(sc.s < sc.end && *sc.s == '}');
  while (more)
    {
      skip_ws (&sc);
      if (!read_string (&sc, key, error) || !expect (&sc, ':', error))
        return NULL;
      skip_ws (&sc);
      if (g_str_equal (key->str, "model") && sc.s < sc.end && *sc.s == '{')
        {
          sc.s++;
          skip_ws (&sc);
          gboolean more2 = !(sc.s < sc.end && *sc.s == '}');
          if (!more2)
            sc.s++;
          while (more2)
            {
              skip_ws (&sc);
              if (!read_string (&sc, key2, error) || !expect (&sc, ':', error))
                return NULL;
              skip_ws (&sc);
              const char *vstart = sc.s;
              if (!skip_value (&sc, 1, error))
                return NULL;
              int which = g_str_equal (key2->str, "vocab") ? 0 : g_str_equal (key2->str, "merges") ? 1 : -1;
              if (which >= 0 && (*vstart == '{' || *vstart == '['))
                {
                  big[which].data = vstart;
                  big[which].len = sc.s - vstart;
                }
              if (!next_or_close (&sc, '}', &more2, error))
                return NULL;
            }
        }
      else if (!skip_value (&sc, 1, error))
        return NULL;
      if (!next_or_close (&sc, '}', &more, error))
        return NULL;
    }
  skip_ws (&sc);
  if (sc.s != sc.end)
    {
      fail (&sc, "trailing data after the top-level object", error);
      return NULL;
    }
  /* the document without the big values */
  GString *small = g_string_sized_new (len / 8 + 64);
  const char *p = data;
  int order[2] = { 0, 1 };
  if (big[0].data && big[1].data && big[1].data < big[0].data)
    order[0] = 1, order[1] = 0;
  for (int k = 0; k < 2; k++)
    {
      HnTokJsonSpan *b = &big[order[k]];
      if (!b->data)
        continue;
      g_string_append_len (small, p, b->data - p);
      g_string_append (small, "null");
      p = b->data + b->len;
    }
  g_string_append_len (small, p, data + len - p);
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  g_autoptr (GError) e = NULL;
  gboolean ok = hn_json_parser_load (parser, small->str, (gssize) small->len, file, &e);
  g_string_free (small, TRUE);
  if (!ok)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "not valid JSON: %s", e->message);
      return NULL;
    }
  *parser_out = g_steal_pointer (&parser);
  return json_parser_get_root (*parser_out);
}
