/* Tokenizers in GGUF metadata (tokenizer.ggml.*), read and written the way
 * llama.cpp's llama-vocab.cpp reads them:
 *
 *   model "llama": SentencePiece-style BPE over tokens + scores + token_type
 *                  (spaces as "▁", a "▁" prefix unless add_space_prefix is
 *                  false, <0xXX> byte fallback)
 *   model "gpt2":  byte-level BPE over tokens + merges, split first by the
 *                  regex of the `pre` name (llama-bpe, qwen2, gpt-2, ...)
 *
 * plus bos/eos/unk/padding ids, add_bos_token/add_eos_token and
 * tokenizer.chat_template. */
#include "tokenizer-private.h"
#include "formats/gguf.h"
#include "formats/gguf-hf.h"

#include <string.h>

#define SPIECE_UNDERLINE "\xe2\x96\x81"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* llama.cpp's pre-tokenizer names -> the split regex of the tokenizer.json
 * they stand for (NULL: GPT-2's ByteLevel regex). */
static const struct {
  const char *name;
  const char *regex;
  gboolean ignore_merges;
} pre_types[] = {
  { "default", NULL, FALSE },
  { "gpt-2", NULL, FALSE },
  { "gpt2", NULL, FALSE },
  { "llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", TRUE },
  { "llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", TRUE },
  { "qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", FALSE },
};

static const char *const gpt2_regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static gboolean
gget_id (HnGguf *g, const char *key, int32_t n_vocab, int32_t *out, GError **error)
{
  gint64 v;
  if (!hn_gguf_get_int (g, key, &v, error))
    return !(error && *error);
  if (v < 0 || v >= n_vocab)
    {
      /* llama.cpp writes -1 (as uint32 0xffffffff) for "none" in some files */
      if (v == 0xffffffffLL || v == -1)
        return TRUE;
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s %" G_GINT64_FORMAT " is not a token id (vocabulary of %d)",
                   hn_gguf_get_path (g), key, v, n_vocab);
      return FALSE;
    }
  *out = (int32_t) v;
  return TRUE;
}

static HnTokenizer *
load_gguf (HnGguf *g, GError **error)
{
  const char *file = hn_gguf_get_path (g);
  const char *model = hn_gguf_get_string (g, "tokenizer.ggml.model", error);
  if (!model)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: no tokenizer in the GGUF metadata", file);
      return NULL;
    }
  gboolean spm = g_str_equal (model, "llama"), bpe = g_str_equal (model, "gpt2");
  if (!spm && !bpe)
    {
      g_set_error (error, HN_ERROR, g_str_equal (model, "none") ? HN_ERROR_NOT_FOUND : HN_ERROR_UNSUPPORTED,
                   "%s: tokenizer.ggml.model '%s' is not supported (llama and gpt2 are)", file, model);
      return NULL;
    }
  const HnGgufKv *tokens = hn_gguf_get_array (g, "tokenizer.ggml.tokens", HN_GGUF_STRING, error);
  if (!tokens)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.tokens is missing", file);
      return NULL;
    }
  if (tokens->n == 0 || tokens->n > G_MAXINT32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.tokens has %" G_GUINT64_FORMAT " entries", file,
                   tokens->n);
      return NULL;
    }
  const int32_t n = (int32_t) tokens->n;
  const HnGgufKv *types = hn_gguf_get_array (g, "tokenizer.ggml.token_type", HN_GGUF_INT64, error);
  if (!types && error && *error)
    return NULL;
  const HnGgufKv *scores = hn_gguf_get_array (g, "tokenizer.ggml.scores", HN_GGUF_FLOAT64, error);
  if (!scores && error && *error)
    return NULL;
  if ((types && types->n != tokens->n) || (scores && scores->n != tokens->n))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.token_type/scores do not have one entry per "
                   "token (%d)", file, n);
      return NULL;
    }
  for (int32_t i = 0; i < n; i++)
    if (!g_utf8_validate (tokens->strs[i], -1, NULL))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.tokens[%d] is not valid UTF-8", file, i);
        return NULL;
      }

  g_autoptr (HnTokenizer) tok = hn_tokenizer_new_empty (file);
  tok->model = hn_model_new (spm ? HN_MODEL_SPM_BPE : HN_MODEL_BPE);
  HnModel *m = tok->model;
  if (spm)
    {
      m->scores = g_new0 (float, n);
      m->piece_types = g_new0 (guint8, n);
      m->min_score = G_MAXFLOAT;
    }
  for (int32_t i = 0; i < n; i++)
    {
      if (!hn_model_add_token (m, tokens->strs[i], i, file, error))
        return NULL;
      gint64 tt = types ? hn_gguf_kv_array_int (types, (guint64) i) : TT_NORMAL;
      if (tt < TT_NORMAL || tt > TT_BYTE)
        tt = TT_NORMAL;
      if (spm)
        {
          m->scores[i] = scores ? (float) hn_gguf_kv_array_float (scores, (guint64) i) : 0.0f;
          m->piece_types[i] = (guint8) tt;
          if (tt == TT_NORMAL)
            {
              m->min_score = MIN (m->min_score, m->scores[i]);
              m->max_piece_bytes = MAX (m->max_piece_bytes, (int) strlen (tokens->strs[i]));
            }
          if (tt == TT_USER_DEFINED)
            m->max_piece_bytes = MAX (m->max_piece_bytes, (int) strlen (tokens->strs[i]));
        }
      if (tt == TT_UNKNOWN && m->unk_id < 0)
        m->unk_id = i;
      /* control tokens are special; user-defined ones are matched in text
       * before the model, as llama.cpp does */
      if (tt == TT_CONTROL || tt == TT_UNKNOWN)
        hn_tokenizer_add_token (tok, tokens->strs[i], i, TRUE, FALSE, FALSE, FALSE, FALSE);
      else if (tt == TT_USER_DEFINED)
        hn_tokenizer_add_token (tok, tokens->strs[i], i, FALSE, FALSE, FALSE, FALSE, FALSE);
    }
  if (spm && m->min_score == G_MAXFLOAT)
    m->min_score = 0.0f;

  if (spm)
    {
      hn_model_index_bytes (m);
      gboolean all_bytes = TRUE;
      for (int b = 0; b < 256; b++)
        all_bytes = all_bytes && m->byte_ids[b] >= 0;
      m->byte_fallback = all_bytes;
      m->fuse_unk = TRUE;
      gboolean add_prefix = TRUE;
      if (!hn_gguf_get_bool (g, "tokenizer.ggml.add_space_prefix", &add_prefix, error) && error && *error)
        return NULL;
      HnNormalizer *nz = g_new0 (HnNormalizer, 1);
      nz->type = HN_NORM_SPM;
      nz->add_dummy_prefix = add_prefix;
      nz->remove_extra_ws = FALSE; /* llama.cpp keeps runs of spaces */
      nz->escape_ws = TRUE;
      tok->normalizer = nz;
      HnDecoder *d = hn_decoder_new (HN_DEC_SEQUENCE);
      HnDecoder *rep = hn_decoder_new (HN_DEC_REPLACE);
      rep->pattern = g_strdup (SPIECE_UNDERLINE);
      rep->content = g_strdup (" ");
      g_ptr_array_add (d->children, rep);
      g_ptr_array_add (d->children, hn_decoder_new (HN_DEC_BYTE_FALLBACK));
      g_ptr_array_add (d->children, hn_decoder_new (HN_DEC_FUSE));
      if (add_prefix)
        {
          HnDecoder *strip = hn_decoder_new (HN_DEC_STRIP);
          strip->content = g_strdup (" ");
          strip->start = 1;
          g_ptr_array_add (d->children, strip);
        }
      tok->decoder = d;
      tok->add_bos = TRUE;
    }
  else
    {
      const HnGgufKv *merges = hn_gguf_get_array (g, "tokenizer.ggml.merges", HN_GGUF_STRING, error);
      if (!merges)
        {
          if (error && !*error)
            g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.merges is missing", file);
          return NULL;
        }
      for (guint64 i = 0; i < merges->n; i++)
        {
          const char *s = merges->strs[i];
          const char *sp = *s ? strchr (s + 1, ' ') : NULL;
          if (!sp || !sp[1])
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tokenizer.ggml.merges[%" G_GUINT64_FORMAT "] '%s' is "
                           "not two tokens separated by a space", file, i, s);
              return NULL;
            }
          g_autofree char *a = g_strndup (s, (gsize) (sp - s));
          g_autofree char *where = g_strdup_printf ("%s: tokenizer.ggml.merges[%" G_GUINT64_FORMAT "]", file, i);
          if (!hn_model_add_merge (m, a, sp + 1, where, error))
            return NULL;
        }
      const char *pre = hn_gguf_get_string (g, "tokenizer.ggml.pre", NULL);
      guint k;
      for (k = 0; k < G_N_ELEMENTS (pre_types); k++)
        if (g_str_equal (pre ? pre : "default", pre_types[k].name))
          break;
      if (k == G_N_ELEMENTS (pre_types))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: pre-tokenizer '%s' is not supported (default, gpt-2, "
                       "llama-bpe, qwen2 are)", file, pre);
          return NULL;
        }
      if (pre_types[k].regex)
        {
          HnPretok *seq = g_new0 (HnPretok, 1);
          seq->type = HN_PRETOK_SEQUENCE;
          seq->children = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_pretok_free);
          HnPretok *split = g_new0 (HnPretok, 1);
          split->type = HN_PRETOK_SPLIT;
          split->behavior = HN_SPLIT_ISOLATED;
          split->regex = hn_tok_regex_new (pre_types[k].regex, file, error);
          g_ptr_array_add (seq->children, split);
          g_ptr_array_add (seq->children, hn_pretok_new_byte_level (FALSE, FALSE));
          tok->pretok = seq;
          if (!split->regex)
            return NULL;
        }
      else
        tok->pretok = hn_pretok_new_byte_level (FALSE, TRUE);
      m->ignore_merges = pre_types[k].ignore_merges;
      tok->decoder = hn_decoder_new (HN_DEC_BYTE_LEVEL);
      tok->add_bos = FALSE;
    }
  tok->unk_id = m->unk_id;

  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  if (!gget_id (g, "tokenizer.ggml.bos_token_id", n, &bos, error) || !gget_id (g, "tokenizer.ggml.eos_token_id", n, &eos, error)
      || !gget_id (g, "tokenizer.ggml.unknown_token_id", n, &unk, error)
      || !gget_id (g, "tokenizer.ggml.padding_token_id", n, &pad, error)
      || !gget_id (g, "tokenizer.ggml.eot_token_id", n, &eot, error)
      || !gget_id (g, "tokenizer.ggml.eom_token_id", n, &eom, error))
    return NULL;
  if (unk >= 0)
    tok->unk_id = m->unk_id = unk;
  tok->bos_id = bos;
  tok->eos_id = eos;
  tok->pad_id = pad;
  if (bos >= 0)
    tok->bos_token = g_strdup (tokens->strs[bos]);
  if (eos >= 0)
    tok->eos_token = g_strdup (tokens->strs[eos]);
  if (pad >= 0)
    tok->pad_token = g_strdup (tokens->strs[pad]);
  if (tok->unk_id >= 0)
    tok->unk_token = g_strdup (tokens->strs[tok->unk_id]);
  gboolean v;
  if (hn_gguf_get_bool (g, "tokenizer.ggml.add_bos_token", &v, error))
    tok->add_bos = v, tok->add_bos_set = TRUE;
  if (hn_gguf_get_bool (g, "tokenizer.ggml.add_eos_token", &v, error))
    tok->add_eos = v, tok->add_eos_set = TRUE;
  if (error && *error)
    return NULL;
  const char *tmpl = hn_gguf_get_string (g, "tokenizer.chat_template", error);
  if (error && *error)
    return NULL;
  tok->chat_template = g_strdup (tmpl);
  const int32_t ends[] = { eos, eot, eom };
  for (guint i = 0; i < G_N_ELEMENTS (ends); i++)
    {
      gboolean dup = FALSE;
      for (guint k = 0; k < tok->eos_ids->len; k++)
        dup = dup || g_array_index (tok->eos_ids, int32_t, k) == ends[i];
      if (ends[i] >= 0 && !dup)
        g_array_append_val (tok->eos_ids, ends[i]);
    }
  return g_steal_pointer (&tok);
}

HnTokenizer *
hn_tokenizer_load_gguf (const char *gguf_path, GError **error)
{
  g_autoptr (HnGguf) g = hn_gguf_open (gguf_path, error);
  if (!g)
    return NULL;
  return load_gguf (g, error);
}

/* ---------------------------------------------------------------- writing */

static gboolean
has_prefix_space (HnTokenizer *tok)
{
  const HnNormalizer *n = tok->normalizer;
  if (n && n->type == HN_NORM_SPM)
    return n->add_dummy_prefix;
  if (n && n->type == HN_NORM_SEQUENCE)
    for (guint i = 0; i < n->children->len; i++)
      {
        const HnNormalizer *c = n->children->pdata[i];
        if (c->type == HN_NORM_PREPEND && g_strcmp0 (c->content, SPIECE_UNDERLINE) == 0)
          return TRUE;
      }
  if (n && n->type == HN_NORM_PREPEND)
    return g_strcmp0 (n->content, SPIECE_UNDERLINE) == 0;
  const HnPretok *p = tok->pretok;
  if (p && p->type == HN_PRETOK_METASPACE)
    return p->prepend_scheme != HN_PREPEND_NEVER;
  return FALSE;
}

/* The split regex of a byte-level tokenizer (NULL: GPT-2's, from ByteLevel). */
static gboolean
byte_level_regex (const HnPretok *p, const char **regex)
{
  *regex = NULL;
  if (!p)
    return FALSE;
  if (p->type == HN_PRETOK_BYTE_LEVEL)
    {
      *regex = p->use_regex ? gpt2_regex : NULL;
      return TRUE;
    }
  if (p->type == HN_PRETOK_SEQUENCE && p->children->len == 2)
    {
      const HnPretok *a = p->children->pdata[0], *b = p->children->pdata[1];
      if (a->type == HN_PRETOK_SPLIT && a->regex && b->type == HN_PRETOK_BYTE_LEVEL && !b->use_regex)
        {
          *regex = g_regex_get_pattern (a->regex);
          return TRUE;
        }
    }
  return FALSE;
}

gboolean
hn_tokenizer_write_gguf (HnTokenizer *tok, HnGgufWriter *w, int32_t n_vocab, GError **error)
{
  HnModel *m = tok->model;
  const char *regex = NULL;
  gboolean byte_level = byte_level_regex (tok->pretok, &regex);
  gboolean spm = m->type == HN_MODEL_SPM_BPE || (m->type == HN_MODEL_BPE && m->byte_fallback && !byte_level);
  if (!spm && !(m->type == HN_MODEL_BPE && byte_level))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: this tokenizer (neither SentencePiece-style nor byte-level "
                   "BPE) has no llama.cpp form", tok->path);
      return FALSE;
    }
  const char *pre = NULL;
  if (!spm)
    {
      for (guint k = 0; k < G_N_ELEMENTS (pre_types) && !pre; k++)
        if (g_strcmp0 (regex ? regex : gpt2_regex, pre_types[k].regex ? pre_types[k].regex : gpt2_regex) == 0)
          pre = pre_types[k].name;
      if (!pre)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: the pre-tokenizer regex matches none of llama.cpp's "
                       "(gpt-2, llama-bpe, qwen2)", tok->path);
          return FALSE;
        }
      if (g_str_equal (pre, "default"))
        pre = "gpt-2";
    }
  int32_t n = MAX (n_vocab, hn_tokenizer_get_vocab_size (tok));
  g_autoptr (GPtrArray) strs = g_ptr_array_new_with_free_func (g_free);
  g_autofree gint32 *types = g_new (gint32, n);
  g_autofree float *scores = g_new0 (float, n);
  g_autofree gint32 *merge_rank = g_new (gint32, n);
  for (int32_t i = 0; i < n; i++)
    merge_rank[i] = -1;
  g_autoptr (GArray) merges = hn_model_dup_merges (m);
  for (guint r = 0; r < merges->len; r++)
    {
      const HnMerge *mg = &g_array_index (merges, HnMerge, r);
      if (mg->merged >= 0 && mg->merged < n && merge_rank[mg->merged] < 0)
        merge_rank[mg->merged] = (gint32) r;
    }
  for (int32_t i = 0; i < n; i++)
    {
      const HnAddedToken *at = g_hash_table_lookup (tok->added_by_id, GINT_TO_POINTER (i));
      const char *s = at ? at->content : hn_tokenizer_id_to_token (tok, i);
      if (!s)
        {
          g_ptr_array_add (strs, g_strdup_printf ("[PAD%d]", i));
          types[i] = TT_UNUSED;
          continue;
        }
      g_ptr_array_add (strs, g_strdup (s));
      guint8 pt = m->piece_types && i < (int32_t) m->vocab->len ? m->piece_types[i] : 0;
      if (i == m->unk_id || pt == TT_UNKNOWN)
        types[i] = TT_UNKNOWN;
      else if ((at && at->special) || pt == TT_CONTROL)
        types[i] = TT_CONTROL;
      else if (at || pt == TT_USER_DEFINED)
        types[i] = TT_USER_DEFINED;
      else if (spm && strlen (s) == 6 && g_str_has_prefix (s, "<0x") && s[5] == '>')
        types[i] = TT_BYTE;
      else
        types[i] = pt ? pt : TT_NORMAL;
      /* llama.cpp's SentencePiece merge picks the pair whose joined piece
       * scores highest: SentencePiece scores where the model has them, else
       * minus the rank of the first merge that makes the piece, which orders
       * merges as tokenizers' BPE does. */
      if (spm)
        scores[i] = m->scores && i < (int32_t) m->vocab->len ? m->scores[i]
                    : merge_rank[i] >= 0 ? -(float) merge_rank[i] : 0.0f;
    }
  hn_gguf_writer_set_string (w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm)
    hn_gguf_writer_set_string (w, "tokenizer.ggml.pre", pre);
  hn_gguf_writer_set_string_array (w, "tokenizer.ggml.tokens", (const char *const *) strs->pdata, strs->len);
  if (spm)
    hn_gguf_writer_set_f32_array (w, "tokenizer.ggml.scores", scores, (gsize) n);
  hn_gguf_writer_set_i32_array (w, "tokenizer.ggml.token_type", types, (gsize) n);
  if (!spm)
    {
      g_autoptr (GPtrArray) ms = g_ptr_array_new_with_free_func (g_free);
      for (guint r = 0; r < merges->len; r++)
        {
          const HnMerge *mg = &g_array_index (merges, HnMerge, r);
          g_ptr_array_add (ms, g_strdup_printf ("%s %s", (const char *) m->vocab->pdata[mg->a],
                                                (const char *) m->vocab->pdata[mg->b]));
        }
      hn_gguf_writer_set_string_array (w, "tokenizer.ggml.merges", (const char *const *) ms->pdata, ms->len);
    }
  else
    hn_gguf_writer_set_bool (w, "tokenizer.ggml.add_space_prefix", has_prefix_space (tok));
  if (tok->bos_id >= 0)
    hn_gguf_writer_set_u32 (w, "tokenizer.ggml.bos_token_id", (guint32) tok->bos_id);
  if (tok->eos_id >= 0)
    hn_gguf_writer_set_u32 (w, "tokenizer.ggml.eos_token_id", (guint32) tok->eos_id);
  if (tok->unk_id >= 0)
    hn_gguf_writer_set_u32 (w, "tokenizer.ggml.unknown_token_id", (guint32) tok->unk_id);
  if (tok->pad_id >= 0)
    hn_gguf_writer_set_u32 (w, "tokenizer.ggml.padding_token_id", (guint32) tok->pad_id);
  /* What encode(add_special_tokens) does, whichever way the tokenizer says it. */
  gboolean add_bos, add_eos;
  if (tok->has_post)
    {
      add_bos = tok->post_prefix->len > 0 && tok->bos_id >= 0 && g_array_index (tok->post_prefix, int32_t, 0) == tok->bos_id;
      add_eos = tok->post_suffix->len > 0 && tok->eos_id >= 0
                && g_array_index (tok->post_suffix, int32_t, tok->post_suffix->len - 1) == tok->eos_id;
    }
  else
    add_bos = tok->add_bos && tok->bos_id >= 0, add_eos = tok->add_eos && tok->eos_id >= 0;
  hn_gguf_writer_set_bool (w, "tokenizer.ggml.add_bos_token", add_bos);
  hn_gguf_writer_set_bool (w, "tokenizer.ggml.add_eos_token", add_eos);
  if (tok->chat_template)
    hn_gguf_writer_set_string (w, "tokenizer.chat_template", tok->chat_template);
  return TRUE;
}
