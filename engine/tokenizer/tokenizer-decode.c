/* Decoders: turn token strings back into text, as tokenizers'
 * decode_chain does. Tokens are kept as raw bytes (GByteArray) so that
 * byte-fallback and byte-level pieces of one character can be split across
 * tokens; the caller validates UTF-8 at the end (or holds an incomplete tail
 * back when streaming). */
#include "tokenizer-private.h"
#include "base/hn-error.h"
#include <string.h>

#define SPIECE_UNDERLINE "\xe2\x96\x81"

static void
bytes_set (GByteArray *b, const char *s, gsize len)
{
  g_byte_array_set_size (b, 0);
  g_byte_array_append (b, (const guint8 *) s, len);
}

static void
replace_in (GByteArray *b, const char *pat, const char *content)
{
  gsize pl = strlen (pat), cl = strlen (content);
  if (!pl || b->len < pl)
    return;
  g_autoptr (GByteArray) out = g_byte_array_sized_new (b->len);
  for (gsize i = 0; i < b->len;)
    {
      if (i + pl <= b->len && memcmp (b->data + i, pat, pl) == 0)
        {
          g_byte_array_append (out, (const guint8 *) content, cl);
          i += pl;
        }
      else
        g_byte_array_append (out, b->data + i++, 1);
    }
  bytes_set (b, (const char *) out->data, out->len);
}

static gboolean
starts_with (GByteArray *b, const char *s)
{
  gsize l = strlen (s);
  return b->len >= l && memcmp (b->data, s, l) == 0;
}

static int
parse_byte_token (GByteArray *b)
{
  if (b->len != 6 || memcmp (b->data, "<0x", 3) != 0 || b->data[5] != '>')
    return -1;
  int hi = g_ascii_xdigit_value (b->data[3]), lo = g_ascii_xdigit_value (b->data[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static void
fuse_all (GPtrArray *tokens)
{
  if (tokens->len <= 1)
    return;
  GByteArray *first = g_ptr_array_index (tokens, 0);
  for (guint i = 1; i < tokens->len; i++)
    {
      GByteArray *t = g_ptr_array_index (tokens, i);
      g_byte_array_append (first, t->data, t->len);
    }
  g_ptr_array_set_size (tokens, 1);
}

static const char *
wp_cleanup_pairs[][2] = {
  { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" }, { " n't", "n't" },
  { " 'm", "'m" }, { " do not", " don't" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
};

gboolean
hn_decoder_apply (const HnDecoder *d, GPtrArray *tokens, GError **error)
{
  switch (d->type)
    {
    case HN_DEC_SEQUENCE:
      for (guint i = 0; i < d->children->len; i++)
        if (!hn_decoder_apply (g_ptr_array_index (d->children, i), tokens, error))
          return FALSE;
      break;
    case HN_DEC_BYTE_LEVEL:
      {
        g_autoptr (GByteArray) out = g_byte_array_new ();
        for (guint i = 0; i < tokens->len; i++)
          {
            GByteArray *t = g_ptr_array_index (tokens, i);
            g_autofree char *s = g_strndup ((const char *) t->data, t->len);
            guint start = out->len;
            gboolean ok = g_utf8_validate (s, t->len, NULL);
            for (const char *p = s; ok && *p; p = g_utf8_next_char (p))
              {
                int b = hn_byte_level_byte (g_utf8_get_char (p));
                if (b < 0)
                  ok = FALSE;
                else
                  {
                    guint8 c = (guint8) b;
                    g_byte_array_append (out, &c, 1);
                  }
              }
            if (!ok)
              {
                /* not a byte-level token (an added token): keep it as is */
                g_byte_array_set_size (out, start);
                g_byte_array_append (out, t->data, t->len);
              }
          }
        g_ptr_array_set_size (tokens, 0);
        g_ptr_array_add (tokens, g_steal_pointer (&out));
        break;
      }
    case HN_DEC_METASPACE:
      for (guint i = 0; i < tokens->len; i++)
        {
          GByteArray *t = g_ptr_array_index (tokens, i);
          replace_in (t, d->replacement, " ");
          if (i == 0 && d->prepend_scheme != HN_PREPEND_NEVER && starts_with (t, " "))
            g_byte_array_remove_index (t, 0);
        }
      break;
    case HN_DEC_WORDPIECE:
      for (guint i = 0; i < tokens->len; i++)
        {
          GByteArray *t = g_ptr_array_index (tokens, i);
          if (i != 0)
            {
              if (starts_with (t, d->prefix))
                g_byte_array_remove_range (t, 0, strlen (d->prefix));
              else
                g_byte_array_prepend (t, (const guint8 *) " ", 1);
            }
          if (d->cleanup)
            for (gsize k = 0; k < G_N_ELEMENTS (wp_cleanup_pairs); k++)
              replace_in (t, wp_cleanup_pairs[k][0], wp_cleanup_pairs[k][1]);
        }
      break;
    case HN_DEC_BYTE_FALLBACK:
      {
        /* <0xXX> tokens become their bytes; runs of them are merged. */
        g_autoptr (GPtrArray) out = g_ptr_array_new_with_free_func ((GDestroyNotify) g_byte_array_unref);
        GByteArray *run = NULL;
        for (guint i = 0; i < tokens->len; i++)
          {
            GByteArray *t = g_ptr_array_index (tokens, i);
            int b = parse_byte_token (t);
            if (b >= 0)
              {
                if (!run)
                  {
                    run = g_byte_array_new ();
                    g_ptr_array_add (out, run);
                  }
                guint8 c = (guint8) b;
                g_byte_array_append (run, &c, 1);
                continue;
              }
            run = NULL;
            g_ptr_array_add (out, g_byte_array_ref (t));
          }
        g_ptr_array_set_size (tokens, 0);
        for (guint i = 0; i < out->len; i++)
          g_ptr_array_add (tokens, g_byte_array_ref (g_ptr_array_index (out, i)));
        break;
      }
    case HN_DEC_FUSE:
      fuse_all (tokens);
      break;
    case HN_DEC_STRIP:
      {
        gsize cl = strlen (d->content);
        for (guint i = 0; i < tokens->len; i++)
          {
            GByteArray *t = g_ptr_array_index (tokens, i);
            for (int k = 0; k < d->start && starts_with (t, d->content); k++)
              g_byte_array_remove_range (t, 0, cl);
            for (int k = 0; k < d->stop && t->len >= cl && memcmp (t->data + t->len - cl, d->content, cl) == 0; k++)
              g_byte_array_set_size (t, t->len - cl);
          }
        break;
      }
    case HN_DEC_REPLACE:
      for (guint i = 0; i < tokens->len; i++)
        {
          GByteArray *t = g_ptr_array_index (tokens, i);
          if (d->regex)
            {
              g_autofree char *s = g_strndup ((const char *) t->data, t->len);
              if (!g_utf8_validate (s, -1, NULL))
                continue;
              /* NULL when PCRE2 stops at its match limit: an error naming the pattern, never the
               * token left as it was */
              g_autoptr (GError) e = NULL;
              g_autofree char *r = g_regex_replace_literal (d->regex, s, -1, 0, d->content, 0, &e);
              if (!r)
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                               "tokenizer decoder Replace regex '%s' failed on a %u-byte token (PCRE2's match limit): %s",
                               g_regex_get_pattern (d->regex), t->len, e ? e->message : "no result");
                  return FALSE;
                }
              bytes_set (t, r, strlen (r));
            }
          else
            replace_in (t, d->pattern, d->content);
        }
      break;
    case HN_DEC_BPE:
      for (guint i = 0; i < tokens->len; i++)
        replace_in (g_ptr_array_index (tokens, i), d->suffix, i + 1 == tokens->len ? "" : " ");
      break;
    }
  return TRUE;
}

HnDecoder *
hn_decoder_new (HnDecType type)
{
  HnDecoder *d = g_new0 (HnDecoder, 1);
  d->type = type;
  if (type == HN_DEC_SEQUENCE)
    d->children = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_decoder_free);
  return d;
}

void
hn_decoder_free (HnDecoder *d)
{
  if (!d)
    return;
  if (d->children)
    g_ptr_array_unref (d->children);
  g_free (d->replacement);
  g_free (d->prefix);
  g_free (d->pattern);
  g_free (d->content);
  g_clear_pointer (&d->regex, g_regex_unref);
  g_free (d->suffix);
  g_free (d);
}

gboolean hn_tok_parse_prepend_scheme (JsonObject *o, HnPrependScheme *scheme, const char *file, GError **error);

HnDecoder *
hn_decoder_from_json (JsonNode *node, const char *file, GError **error)
{
  if (!node || JSON_NODE_HOLDS_NULL (node))
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: decoder is not an object", file);
      return NULL;
    }
  JsonObject *o = json_node_get_object (node);
  const char *type = hn_tok_json_str (o, "type");
  if (!type)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: decoder has no type", file);
      return NULL;
    }
  g_autoptr (HnDecoder) d = NULL;
  if (g_str_equal (type, "Sequence"))
    {
      d = hn_decoder_new (HN_DEC_SEQUENCE);
      JsonNode *cn = json_object_get_member (o, "decoders");
      if (!cn || !JSON_NODE_HOLDS_ARRAY (cn))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Sequence decoder has no 'decoders' array", file);
          return NULL;
        }
      JsonArray *a = json_node_get_array (cn);
      for (guint i = 0; i < json_array_get_length (a); i++)
        {
          GError *e = NULL;
          HnDecoder *c = hn_decoder_from_json (json_array_get_element (a, i), file, &e);
          if (e)
            {
              g_propagate_error (error, e);
              return NULL;
            }
          if (c)
            g_ptr_array_add (d->children, c);
        }
    }
  else if (g_str_equal (type, "ByteLevel"))
    d = hn_decoder_new (HN_DEC_BYTE_LEVEL);
  else if (g_str_equal (type, "Metaspace"))
    {
      d = hn_decoder_new (HN_DEC_METASPACE);
      const char *r = hn_tok_json_str (o, "replacement");
      d->replacement = g_strdup (r ? r : SPIECE_UNDERLINE);
      if (!hn_tok_parse_prepend_scheme (o, &d->prepend_scheme, file, error))
        return NULL;
    }
  else if (g_str_equal (type, "WordPiece"))
    {
      d = hn_decoder_new (HN_DEC_WORDPIECE);
      const char *p = hn_tok_json_str (o, "prefix");
      d->prefix = g_strdup (p ? p : "##");
      d->cleanup = hn_tok_json_bool (o, "cleanup", TRUE);
    }
  else if (g_str_equal (type, "ByteFallback"))
    d = hn_decoder_new (HN_DEC_BYTE_FALLBACK);
  else if (g_str_equal (type, "Fuse"))
    d = hn_decoder_new (HN_DEC_FUSE);
  else if (g_str_equal (type, "Strip"))
    {
      d = hn_decoder_new (HN_DEC_STRIP);
      const char *c = hn_tok_json_str (o, "content");
      d->content = g_strdup (c && *c ? c : " ");
      gint64 start = hn_tok_json_int (o, "start", 0), stop = hn_tok_json_int (o, "stop", 0);
      if (start < 0 || stop < 0 || start > 1000 || stop > 1000)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Strip decoder start/stop out of range", file);
          return NULL;
        }
      d->start = (int) start;
      d->stop = (int) stop;
    }
  else if (g_str_equal (type, "Replace"))
    {
      d = hn_decoder_new (HN_DEC_REPLACE);
      JsonNode *pn = json_object_get_member (o, "pattern");
      JsonObject *po = pn && JSON_NODE_HOLDS_OBJECT (pn) ? json_node_get_object (pn) : NULL;
      const char *lit = po ? hn_tok_json_str (po, "String") : NULL;
      const char *re = po ? hn_tok_json_str (po, "Regex") : NULL;
      if (lit)
        d->pattern = g_strdup (lit);
      else if (re)
        {
          g_autofree char *what = g_strdup_printf ("%s: Replace decoder", file);
          d->regex = hn_tok_regex_new (re, what, error);
          if (!d->regex)
            return NULL;
        }
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: Replace decoder pattern is neither String nor Regex", file);
          return NULL;
        }
      const char *c = hn_tok_json_str (o, "content");
      d->content = g_strdup (c ? c : "");
    }
  else if (g_str_equal (type, "BPEDecoder"))
    {
      d = hn_decoder_new (HN_DEC_BPE);
      const char *s = hn_tok_json_str (o, "suffix");
      d->suffix = g_strdup (s ? s : "</w>");
    }
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: decoder type '%s' is not supported", file, type);
      return NULL;
    }
  return g_steal_pointer (&d);
}
