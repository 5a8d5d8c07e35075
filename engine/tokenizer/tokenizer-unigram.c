/* Unigram (T5, ALBERT, XLNet, SentencePiece unigram): Viterbi search for the
 * segmentation with the highest total piece score. A character no piece
 * covers becomes <unk> with score (min score - 10), as in SentencePiece;
 * consecutive unknowns fuse into one <unk> (or become <0xXX> pieces with
 * byte fallback). */
#include "tokenizer-private.h"
#include <string.h>

#define UNK_PENALTY 10.0f

void
hn_unigram_tokenize (HnModel *m, const char *word, gsize len, GArray *out)
{
  g_autofree float *best = g_new (float, len + 1);
  g_autofree int32_t *from = g_new (int32_t, len + 1);  /* start byte of the last piece */
  g_autofree int32_t *piece = g_new (int32_t, len + 1); /* its id, -1 = unknown char */
  for (gsize i = 0; i <= len; i++)
    best[i] = -G_MAXFLOAT, from[i] = -1, piece[i] = -1;
  best[0] = 0.0f;
  float unk_score = m->min_score - UNK_PENALTY;
  g_autofree char *buf = g_malloc (MIN ((gsize) m->max_piece_bytes, len) + 1);
  for (gsize i = 0; i < len;)
    {
      gsize next = g_utf8_next_char (word + i) - word;
      if (next > len)
        next = len;
      if (best[i] > -G_MAXFLOAT)
        {
          gboolean single = FALSE;
          gsize maxe = MIN (len, i + (gsize) m->max_piece_bytes);
          for (gsize e = next; e <= maxe;)
            {
              memcpy (buf, word + i, e - i);
              buf[e - i] = '\0';
              int32_t id = hn_model_lookup (m, buf);
              /* Control/unknown pieces (types 2, 3) never match text. */
              if (id >= 0 && !(m->piece_types && (m->piece_types[id] == 2 || m->piece_types[id] == 3
                                                   || m->piece_types[id] == 6)))
                {
                  float s = best[i] + m->scores[id];
                  if (s > best[e])
                    best[e] = s, from[e] = (int32_t) i, piece[e] = id;
                  if (e == next)
                    single = TRUE;
                }
              if (e == len)
                break;
              e = g_utf8_next_char (word + e) - word;
            }
          if (!single)
            {
              float s = best[i] + unk_score;
              if (s > best[next])
                best[next] = s, from[next] = (int32_t) i, piece[next] = -1;
            }
        }
      i = next;
    }
  /* Backtrack. */
  g_autoptr (GArray) rev = g_array_new (FALSE, FALSE, sizeof (int32_t) * 2);
  for (gsize e = len; e > 0;)
    {
      if (from[e] < 0)
        {
          /* Unreachable (non-finite scores in a damaged model): [0, e) is unknown. */
          int32_t unk[2] = { -1, 0 };
          g_array_append_val (rev, unk);
          break;
        }
      int32_t pair[2] = { piece[e], from[e] };
      g_array_append_val (rev, pair);
      e = (gsize) from[e];
    }
  gboolean last_unk = FALSE;
  for (int i = (int) rev->len - 1; i >= 0; i--)
    {
      int32_t *pair = &g_array_index (rev, int32_t, 2 * i);
      if (pair[0] >= 0)
        {
          g_array_append_val (out, pair[0]);
          last_unk = FALSE;
          continue;
        }
      gsize s = (gsize) pair[1];
      gsize e = i > 0 ? (gsize) g_array_index (rev, int32_t, 2 * (i - 1) + 1) : len;
      if (m->byte_fallback)
        {
          for (gsize k = s; k < e; k++)
            {
              int32_t id = m->byte_ids[(guint8) word[k]];
              if (id < 0)
                id = m->unk_id;
              if (id >= 0)
                g_array_append_val (out, id);
            }
          continue;
        }
      if (!last_unk && m->unk_id >= 0)
        g_array_append_val (out, m->unk_id);
      last_unk = TRUE;
    }
}
