/* BPE: the merge table and the merge loop, for Hugging Face BPE (merges by
 * rank) and SentencePiece BPE (the pair whose concatenation has the highest
 * piece score). Both use a heap over adjacent pairs and a linked list of
 * symbols, O(n log n) per word: SentencePiece-style tokenizers do not
 * pre-tokenize, so a "word" can be a whole document. */
#include "tokenizer-private.h"
#include <string.h>

/* Open-addressing hash from a pair of ids to (rank, merged id). */
struct _HnMergeTable {
  guint64 *keys;   /* (a << 32 | b) + 1, 0 = empty */
  int32_t *rank;
  int32_t *merged;
  gsize cap, n;
};

void hn_merge_table_free (HnMergeTable *t);

GArray *
hn_model_dup_merges (const HnModel *m)
{
  const HnMergeTable *t = m->merges;
  GArray *out = g_array_new (FALSE, TRUE, sizeof (HnMerge));
  if (!t || !t->n)
    return out;
  g_array_set_size (out, (guint) t->n);
  for (gsize i = 0; i < t->cap; i++)
    if (t->keys[i] && t->rank[i] >= 0 && (gsize) t->rank[i] < t->n)
      {
        guint64 k = t->keys[i] - 1;
        HnMerge *mg = &g_array_index (out, HnMerge, t->rank[i]);
        mg->a = (int32_t) (k >> 32);
        mg->b = (int32_t) (k & 0xffffffffu);
        mg->merged = t->merged[i];
      }
  return out;
}

void
hn_merge_table_free (HnMergeTable *t)
{
  g_free (t->keys);
  g_free (t->rank);
  g_free (t->merged);
  g_free (t);
}

static inline guint64
pair_key (int32_t a, int32_t b)
{
  return (((guint64) (guint32) a << 32) | (guint32) b) + 1;
}

static inline gsize
pair_hash (guint64 k)
{
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (gsize) k;
}

static void merge_table_insert (HnMergeTable *t, guint64 key, int32_t rank, int32_t merged);

static void
merge_table_grow (HnMergeTable *t)
{
  HnMergeTable old = *t;
  t->cap = old.cap ? old.cap * 2 : 1024;
  t->keys = g_new0 (guint64, t->cap);
  t->rank = g_new (int32_t, t->cap);
  t->merged = g_new (int32_t, t->cap);
  t->n = 0;
  for (gsize i = 0; i < old.cap; i++)
    if (old.keys[i])
      merge_table_insert (t, old.keys[i], old.rank[i], old.merged[i]);
  g_free (old.keys);
  g_free (old.rank);
  g_free (old.merged);
}

static void
merge_table_insert (HnMergeTable *t, guint64 key, int32_t rank, int32_t merged)
{
  if ((t->n + 1) * 2 > t->cap)
    merge_table_grow (t);
  gsize mask = t->cap - 1;
  for (gsize i = pair_hash (key) & mask;; i = (i + 1) & mask)
    {
      if (t->keys[i] == key)
        return; /* a repeated merge keeps its first (best) rank */
      if (!t->keys[i])
        {
          t->keys[i] = key;
          t->rank[i] = rank;
          t->merged[i] = merged;
          t->n++;
          return;
        }
    }
}

static inline gboolean
merge_table_find (const HnMergeTable *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
  if (!t || !t->n)
    return FALSE;
  guint64 key = pair_key (a, b);
  gsize mask = t->cap - 1;
  for (gsize i = pair_hash (key) & mask;; i = (i + 1) & mask)
    {
      if (t->keys[i] == key)
        {
          *rank = t->rank[i];
          *merged = t->merged[i];
          return TRUE;
        }
      if (!t->keys[i])
        return FALSE;
    }
}

gboolean
hn_model_add_merge (HnModel *m, const char *a, const char *b, const char *file, GError **error)
{
  int32_t ia = hn_model_lookup (m, a), ib = hn_model_lookup (m, b);
  if (ia < 0 || ib < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: merge '%s %s' uses a token that is not in the vocabulary",
                   file, a, b);
      return FALSE;
    }
  /* The merged token drops the continuing-subword prefix of the right part. */
  const char *bb = b;
  if (m->cont_prefix && g_str_has_prefix (b, m->cont_prefix))
    bb = b + strlen (m->cont_prefix);
  g_autofree char *ab = g_strconcat (a, bb, NULL);
  int32_t iab = hn_model_lookup (m, ab);
  if (iab < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: merge '%s %s' gives '%s', which is not in the vocabulary",
                   file, a, b, ab);
      return FALSE;
    }
  if (!m->merges)
    m->merges = g_new0 (HnMergeTable, 1);
  merge_table_insert (m->merges, pair_key (ia, ib), (int32_t) m->merges->n, iab);
  return TRUE;
}

/* ---- the merge loop ---- */

typedef struct {
  int32_t id;      /* -1: not in the vocabulary (SentencePiece) */
  int32_t prev, next;
  int32_t start, len; /* bytes of the word it covers; len 0 = merged away */
} Sym;

typedef struct {
  float prio;      /* lower first */
  int32_t left, right;
  int32_t left_len, right_len;
  int32_t merged;
} Cand;

static inline gboolean
cand_before (const Cand *a, const Cand *b)
{
  return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void
heap_push (GArray *h, const Cand *c)
{
  g_array_append_val (h, *c);
  Cand *d = (Cand *) h->data;
  gsize i = h->len - 1;
  while (i > 0)
    {
      gsize p = (i - 1) / 2;
      if (!cand_before (&d[i], &d[p]))
        break;
      Cand t = d[i]; d[i] = d[p]; d[p] = t;
      i = p;
    }
}

static Cand
heap_pop (GArray *h)
{
  Cand *d = (Cand *) h->data;
  Cand top = d[0];
  d[0] = d[h->len - 1];
  g_array_set_size (h, h->len - 1);
  gsize n = h->len, i = 0;
  for (;;)
    {
      gsize l = 2 * i + 1, r = l + 1, m = i;
      if (l < n && cand_before (&d[l], &d[m]))
        m = l;
      if (r < n && cand_before (&d[r], &d[m]))
        m = r;
      if (m == i)
        break;
      Cand t = d[i]; d[i] = d[m]; d[m] = t;
      i = m;
    }
  return top;
}

typedef struct {
  HnModel *m;
  const char *word;
  Sym *syms;
  GArray *heap;
  GString *scratch;
} MergeCtx;

static void
maybe_add_pair (MergeCtx *c, int32_t left, int32_t right)
{
  if (left < 0 || right < 0)
    return;
  Sym *l = &c->syms[left], *r = &c->syms[right];
  Cand cand = { 0, left, right, l->len, r->len, -1 };
  if (c->m->type == HN_MODEL_BPE)
    {
      int32_t rank;
      if (l->id < 0 || r->id < 0 || !merge_table_find (c->m->merges, l->id, r->id, &rank, &cand.merged))
        return;
      cand.prio = (float) rank;
    }
  else
    {
      g_string_truncate (c->scratch, 0);
      g_string_append_len (c->scratch, c->word + l->start, l->len + r->len);
      int32_t id = hn_model_lookup (c->m, c->scratch->str);
      if (id < 0)
        return;
      /* Only normal, user-defined and unused pieces take part in merges. */
      guint8 t = c->m->piece_types ? c->m->piece_types[id] : 1;
      if (t != 0 && t != 1 && t != 4 && t != 5)
        return;
      cand.merged = id;
      cand.prio = -c->m->scores[id];
    }
  heap_push (c->heap, &cand);
}

static void
emit_bytes (HnModel *m, const char *s, gsize len, GArray *out)
{
  for (gsize i = 0; i < len; i++)
    {
      int32_t id = m->byte_ids[(guint8) s[i]];
      if (id < 0)
        id = m->unk_id;
      if (id >= 0)
        g_array_append_val (out, id);
    }
}

void
hn_bpe_tokenize (HnModel *m, const char *word, gsize len, GArray *out)
{
  if (m->ignore_merges && !m->cont_prefix && !m->eow_suffix)
    {
      g_autofree char *w = g_strndup (word, len);
      int32_t id = hn_model_lookup (m, w);
      if (id >= 0)
        {
          g_array_append_val (out, id);
          return;
        }
    }
  /* Initial symbols: one per character. */
  gsize n_chars = g_utf8_strlen (word, len);
  g_autofree Sym *syms = g_new (Sym, n_chars * 4 + 1);
  int32_t n = 0;
  char buf[64];
  gboolean last_unk = FALSE;
  for (const char *p = word, *end = word + len; p < end;)
    {
      const char *q = g_utf8_next_char (p);
      if (q > end)
        q = end;
      gsize cl = q - p;
      int32_t id = -1;
      if (m->type == HN_MODEL_BPE)
        {
          const char *pre = (p != word && m->cont_prefix) ? m->cont_prefix : "";
          const char *suf = (q == end && m->eow_suffix) ? m->eow_suffix : "";
          if (*pre || *suf)
            {
              g_autofree char *s = g_strdup_printf ("%s%.*s%s", pre, (int) cl, p, suf);
              id = hn_model_lookup (m, s);
            }
          else
            {
              memcpy (buf, p, cl);
              buf[cl] = '\0';
              id = hn_model_lookup (m, buf);
            }
          if (id < 0)
            {
              if (m->byte_fallback && m->byte_ids[(guint8) *p] >= 0)
                {
                  gboolean all = TRUE;
                  for (gsize i = 0; i < cl; i++)
                    all = all && m->byte_ids[(guint8) p[i]] >= 0;
                  if (all)
                    {
                      for (gsize i = 0; i < cl; i++)
                        syms[n] = (Sym) { m->byte_ids[(guint8) p[i]], n - 1, n + 1, (int32_t) (p - word + i), 1 }, n++;
                      last_unk = FALSE;
                      p = q;
                      continue;
                    }
                }
              if (m->unk_id < 0)
                {
                  /* No unk token: the character is dropped, as tokenizers does. */
                  p = q;
                  continue;
                }
              if (m->fuse_unk && last_unk)
                {
                  syms[n - 1].len += (int32_t) cl;
                  p = q;
                  continue;
                }
              id = m->unk_id;
              last_unk = TRUE;
            }
          else
            last_unk = FALSE;
        }
      else
        {
          memcpy (buf, p, cl);
          buf[cl] = '\0';
          id = hn_model_lookup (m, buf);
        }
      syms[n] = (Sym) { id, n - 1, n + 1, (int32_t) (p - word), (int32_t) cl };
      n++;
      p = q;
    }
  if (n == 0)
    return;
  syms[n - 1].next = -1;
  g_autoptr (GArray) heap = g_array_sized_new (FALSE, FALSE, sizeof (Cand), n);
  g_autoptr (GString) scratch = g_string_new (NULL);
  MergeCtx c = { m, word, syms, heap, scratch };
  for (int32_t i = 0; i + 1 < n; i++)
    maybe_add_pair (&c, i, i + 1);
  while (heap->len)
    {
      Cand top = heap_pop (heap);
      Sym *l = &syms[top.left], *r = &syms[top.right];
      if (l->len != top.left_len || r->len != top.right_len || l->next != top.right)
        continue; /* stale: one side was merged since */
      l->id = top.merged;
      l->len += r->len;
      l->next = r->next;
      r->len = 0;
      if (l->next >= 0)
        syms[l->next].prev = top.left;
      maybe_add_pair (&c, l->prev, top.left);
      maybe_add_pair (&c, top.left, l->next);
    }
  for (int32_t i = 0; i >= 0; i = syms[i].next)
    {
      if (syms[i].id >= 0)
        g_array_append_val (out, syms[i].id);
      else if (m->byte_fallback)
        emit_bytes (m, word + syms[i].start, syms[i].len, out);
      else if (m->unk_id >= 0)
        {
          /* SentencePiece without byte fallback: consecutive unknowns fuse. */
          if (!(out->len && i != 0 && syms[syms[i].prev].id < 0))
            g_array_append_val (out, m->unk_id);
        }
    }
}
