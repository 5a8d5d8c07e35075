/* WordPiece (BERT): greedy longest-match-first over a pre-tokenized word,
 * continuation pieces carry the "##" prefix; a word with any unmatched part,
 * or longer than max_input_chars_per_word, becomes [UNK]. */
#include "tokenizer-private.h"
#include <string.h>

void
hn_wordpiece_tokenize (HnModel *m, const char *word, gsize len, GArray *out)
{
  if ((gsize) g_utf8_strlen (word, len) > (gsize) m->max_input_chars)
    {
      g_array_append_val (out, m->unk_id);
      return;
    }
  guint start_len = out->len;
  gsize prefix_len = m->wp_prefix ? strlen (m->wp_prefix) : 0;
  g_autofree char *buf = g_malloc (len + prefix_len + 1);
  gsize start = 0;
  while (start < len)
    {
      gsize end = len;
      int32_t found = -1;
      while (end > start)
        {
          gsize o = 0;
          if (start > 0 && prefix_len)
            {
              memcpy (buf, m->wp_prefix, prefix_len);
              o = prefix_len;
            }
          memcpy (buf + o, word + start, end - start);
          buf[o + end - start] = '\0';
          found = hn_model_lookup (m, buf);
          if (found >= 0)
            break;
          /* step back one whole character */
          const char *prev = g_utf8_find_prev_char (word + start, word + end);
          end = prev ? (gsize) (prev - word) : start;
        }
      if (found < 0)
        {
          g_array_set_size (out, start_len);
          g_array_append_val (out, m->unk_id);
          return;
        }
      g_array_append_val (out, found);
      start = end;
    }
}
