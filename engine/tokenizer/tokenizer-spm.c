/* SentencePiece tokenizer.model: a ModelProto (sentencepiece_model.proto)
 * read with a small protobuf wire-format reader. We need the pieces (text,
 * score, type), trainer_spec (model_type, byte_fallback, special ids) and
 * normalizer_spec (precompiled charsmap, add_dummy_prefix,
 * remove_extra_whitespaces, escape_whitespaces). */
#include "tokenizer-private.h"
#include <string.h>

#define SPIECE_UNDERLINE "\xe2\x96\x81"

enum { PIECE_NORMAL = 1, PIECE_UNKNOWN = 2, PIECE_CONTROL = 3, PIECE_USER_DEFINED = 4, PIECE_UNUSED = 5, PIECE_BYTE = 6 };
enum { MODEL_UNIGRAM = 1, MODEL_BPE = 2, MODEL_WORD = 3, MODEL_CHAR = 4 };

typedef struct {
  const guint8 *p, *end;
} Reader;

static gboolean
read_varint (Reader *r, guint64 *v)
{
  guint64 x = 0;
  for (int shift = 0; shift < 64; shift += 7)
    {
      if (r->p >= r->end)
        return FALSE;
      guint8 b = *r->p++;
      x |= (guint64) (b & 0x7F) << shift;
      if (!(b & 0x80))
        {
          *v = x;
          return TRUE;
        }
    }
  return FALSE;
}

/* Reads one field header and its payload. For wire type 2, *sub is the
 * payload; for 0 *v is the varint; for 5 *v holds the 32 bits. */
static gboolean
read_field (Reader *r, guint32 *field, guint *wt, guint64 *v, Reader *sub)
{
  guint64 key;
  if (!read_varint (r, &key))
    return FALSE;
  *field = (guint32) (key >> 3);
  *wt = key & 7;
  switch (*wt)
    {
    case 0:
      return read_varint (r, v);
    case 1:
      if (r->end - r->p < 8)
        return FALSE;
      memcpy (v, r->p, 8);
      r->p += 8;
      return TRUE;
    case 2:
      {
        guint64 len;
        if (!read_varint (r, &len) || len > (guint64) (r->end - r->p))
          return FALSE;
        sub->p = r->p;
        sub->end = r->p + len;
        r->p += len;
        return TRUE;
      }
    case 5:
      {
        if (r->end - r->p < 4)
          return FALSE;
        guint32 x;
        memcpy (&x, r->p, 4);
        *v = GUINT32_FROM_LE (x);
        r->p += 4;
        return TRUE;
      }
    default:
      return FALSE;
    }
}

typedef struct {
  char *piece;
  float score;
  int type;
} Piece;

static void
piece_clear (gpointer p)
{
  g_free (((Piece *) p)->piece);
}

HnTokenizer *
hn_tokenizer_load_spm (const char *file, GError **error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (file, HN_MAX_TOKENIZER_BYTES, "SentencePiece model", &data, &len, error))
    return NULL;
  g_autoptr (GArray) pieces = g_array_new (FALSE, TRUE, sizeof (Piece));
  g_array_set_clear_func (pieces, piece_clear);
  int model_type = MODEL_UNIGRAM;
  gboolean byte_fallback = FALSE, add_dummy_prefix = TRUE, remove_extra_ws = TRUE, escape_ws = TRUE;
  gboolean treat_ws_as_suffix = FALSE;
  gint64 unk_id = 0;
  const guint8 *charsmap = NULL;
  gsize charsmap_len = 0;
  g_autofree char *norm_name = NULL;
  g_autoptr (HnTokenizer) tok = NULL;

  Reader r = { (const guint8 *) data, (const guint8 *) data + len };
  while (r.p < r.end)
    {
      guint32 field;
      guint wt;
      guint64 v = 0;
      Reader sub = { 0 };
      if (!read_field (&r, &field, &wt, &v, &sub))
        goto corrupt;
      if (field == 1 && wt == 2)
        {
          Piece pc = { NULL, 0.0f, PIECE_NORMAL };
          while (sub.p < sub.end)
            {
              guint32 f2;
              guint w2;
              guint64 v2 = 0;
              Reader s2 = { 0 };
              if (!read_field (&sub, &f2, &w2, &v2, &s2))
                {
                  g_free (pc.piece);
                  goto corrupt;
                }
              if (f2 == 1 && w2 == 2)
                {
                  g_free (pc.piece);
                  pc.piece = g_strndup ((const char *) s2.p, s2.end - s2.p);
                  if (strlen (pc.piece) != (gsize) (s2.end - s2.p) || !g_utf8_validate (pc.piece, -1, NULL))
                    {
                      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: piece %u is not valid UTF-8", file, pieces->len);
                      g_free (pc.piece);
                      return NULL;
                    }
                }
              else if (f2 == 2 && w2 == 5)
                {
                  guint32 bits = (guint32) v2;
                  memcpy (&pc.score, &bits, 4);
                }
              else if (f2 == 3 && w2 == 0)
                pc.type = (int) v2;
            }
          if (!pc.piece || pc.type < 1 || pc.type > 6)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: piece %u has no text or an unknown type", file, pieces->len);
              g_free (pc.piece);
              return NULL;
            }
          g_array_append_val (pieces, pc);
        }
      else if (field == 2 && wt == 2) /* trainer_spec */
        {
          while (sub.p < sub.end)
            {
              guint32 f2;
              guint w2;
              guint64 v2 = 0;
              Reader s2 = { 0 };
              if (!read_field (&sub, &f2, &w2, &v2, &s2))
                goto corrupt;
              if (w2 != 0)
                continue;
              if (f2 == 3)
                model_type = (int) v2;
              else if (f2 == 35)
                byte_fallback = v2 != 0;
              else if (f2 == 24)
                treat_ws_as_suffix = v2 != 0;
              else if (f2 == 40)
                unk_id = (gint32) v2;
            }
        }
      else if (field == 3 && wt == 2) /* normalizer_spec */
        {
          while (sub.p < sub.end)
            {
              guint32 f2;
              guint w2;
              guint64 v2 = 0;
              Reader s2 = { 0 };
              if (!read_field (&sub, &f2, &w2, &v2, &s2))
                goto corrupt;
              if (f2 == 1 && w2 == 2)
                {
                  g_free (norm_name);
                  norm_name = g_strndup ((const char *) s2.p, s2.end - s2.p);
                }
              else if (f2 == 2 && w2 == 2)
                charsmap = s2.p, charsmap_len = s2.end - s2.p;
              else if (f2 == 3 && w2 == 0)
                add_dummy_prefix = v2 != 0;
              else if (f2 == 4 && w2 == 0)
                remove_extra_ws = v2 != 0;
              else if (f2 == 5 && w2 == 0)
                escape_ws = v2 != 0;
            }
        }
    }
  if (pieces->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: no pieces (not a SentencePiece model?)", file);
      return NULL;
    }
  if (model_type != MODEL_UNIGRAM && model_type != MODEL_BPE)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: SentencePiece model type %d is not supported (Unigram and BPE are)", file, model_type);
      return NULL;
    }
  if (treat_ws_as_suffix)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: treat_whitespace_as_suffix is not supported", file);
      return NULL;
    }

  tok = hn_tokenizer_new_empty (file);
  tok->model = hn_model_new (model_type == MODEL_BPE ? HN_MODEL_SPM_BPE : HN_MODEL_UNIGRAM);
  HnModel *m = tok->model;
  m->scores = g_new0 (float, pieces->len);
  m->piece_types = g_new0 (guint8, pieces->len);
  m->min_score = G_MAXFLOAT;
  m->byte_fallback = byte_fallback;
  m->fuse_unk = TRUE;
  for (guint i = 0; i < pieces->len; i++)
    {
      Piece *pc = &g_array_index (pieces, Piece, i);
      if (!hn_model_add_token (m, pc->piece, (int32_t) i, file, error))
        return NULL;
      m->scores[i] = pc->score;
      m->piece_types[i] = (guint8) pc->type;
      if (pc->type == PIECE_NORMAL)
        {
          m->min_score = MIN (m->min_score, pc->score);
          m->max_piece_bytes = MAX (m->max_piece_bytes, (int) strlen (pc->piece));
        }
      if (pc->type == PIECE_USER_DEFINED)
        m->max_piece_bytes = MAX (m->max_piece_bytes, (int) strlen (pc->piece));
      if (pc->type == PIECE_UNKNOWN && m->unk_id < 0)
        m->unk_id = (int32_t) i;
      /* Control and unknown pieces are special; user-defined pieces are
       * matched in text before the model, as SentencePiece does. */
      if (pc->type == PIECE_CONTROL || pc->type == PIECE_UNKNOWN)
        hn_tokenizer_add_token (tok, pc->piece, (int32_t) i, TRUE, FALSE, FALSE, FALSE, FALSE);
      else if (pc->type == PIECE_USER_DEFINED)
        hn_tokenizer_add_token (tok, pc->piece, (int32_t) i, FALSE, FALSE, FALSE, FALSE, FALSE);
    }
  if (m->min_score == G_MAXFLOAT)
    m->min_score = 0.0f;
  if (m->unk_id < 0 && unk_id >= 0 && unk_id < pieces->len)
    m->unk_id = (int32_t) unk_id;
  if (byte_fallback)
    {
      hn_model_index_bytes (m);
      for (int b = 0; b < 256; b++)
        if (m->byte_ids[b] < 0)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: byte_fallback is set but piece <0x%02X> is missing", file, b);
            return NULL;
          }
    }
  tok->unk_id = m->unk_id;

  HnNormalizer *n = g_new0 (HnNormalizer, 1);
  n->type = HN_NORM_SPM;
  n->add_dummy_prefix = add_dummy_prefix;
  n->remove_extra_ws = remove_extra_ws;
  n->escape_ws = escape_ws;
  tok->normalizer = n;
  if (charsmap_len > 0)
    {
      n->charsmap = hn_charsmap_new (charsmap, charsmap_len, file, error);
      if (!n->charsmap)
        return NULL;
    }

  /* Decoding: "▁" -> " ", <0xXX> -> bytes, and the dummy prefix removed. */
  HnDecoder *d = hn_decoder_new (HN_DEC_SEQUENCE);
  HnDecoder *rep = hn_decoder_new (HN_DEC_REPLACE);
  rep->pattern = g_strdup (SPIECE_UNDERLINE);
  rep->content = g_strdup (" ");
  g_ptr_array_add (d->children, rep);
  g_ptr_array_add (d->children, hn_decoder_new (HN_DEC_BYTE_FALLBACK));
  g_ptr_array_add (d->children, hn_decoder_new (HN_DEC_FUSE));
  if (add_dummy_prefix)
    {
      HnDecoder *strip = hn_decoder_new (HN_DEC_STRIP);
      strip->content = g_strdup (" ");
      strip->start = 1;
      g_ptr_array_add (d->children, strip);
    }
  tok->decoder = d;

  /* LlamaTokenizer's defaults: BOS, no EOS (tokenizer_config.json may change them). */
  tok->add_bos = TRUE;
  return g_steal_pointer (&tok);

corrupt:
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: malformed SentencePiece protobuf near byte %zu",
               file, (gsize) (r.p - (const guint8 *) data));
  return NULL;
}
