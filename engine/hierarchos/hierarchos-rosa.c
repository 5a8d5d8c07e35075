/* ROSA: an online suffix automaton over the token history that predicts the
 * token which followed the longest earlier occurrence of the current suffix.
 * Transitions are per-state linked lists in flat arrays (vocabularies are
 * large, out-degrees small). */
#include "hierarchos/hierarchos.h"

#include <string.h>

#define GI32(a, i) g_array_index (a, gint32, i)

void
hn_hier_rosa_init (HnHierRosa *r)
{
  memset (r, 0, sizeof *r);
  r->next_sym = g_array_new (FALSE, FALSE, sizeof (guint32));
  r->next_dst = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->next_link = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->head = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->link = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->len = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->endpos = g_array_new (FALSE, FALSE, sizeof (gint32));
  r->tokens = g_array_new (FALSE, FALSE, sizeof (guint32));
  hn_hier_rosa_reset (r);
}

void
hn_hier_rosa_clear (HnHierRosa *r)
{
  GArray **arrs[] = { &r->next_sym, &r->next_dst, &r->next_link, &r->head, &r->link, &r->len, &r->endpos, &r->tokens };
  for (gsize i = 0; i < G_N_ELEMENTS (arrs); i++)
    g_clear_pointer (arrs[i], g_array_unref);
}

static gint32
push_state (HnHierRosa *r)
{
  gint32 m1 = -1, z = 0;
  g_array_append_val (r->head, m1);
  g_array_append_val (r->link, m1);
  g_array_append_val (r->len, z);
  g_array_append_val (r->endpos, m1);
  return (gint32) r->head->len - 1;
}

void
hn_hier_rosa_reset (HnHierRosa *r)
{
  g_array_set_size (r->next_sym, 0);
  g_array_set_size (r->next_dst, 0);
  g_array_set_size (r->next_link, 0);
  g_array_set_size (r->head, 0);
  g_array_set_size (r->link, 0);
  g_array_set_size (r->len, 0);
  g_array_set_size (r->endpos, 0);
  g_array_set_size (r->tokens, 0);
  push_state (r);
  r->last = 0;
}

static void
copy_array (GArray *dst, const GArray *src)
{
  g_array_set_size (dst, src->len);
  if (src->len)
    memcpy (dst->data, src->data, (gsize) src->len * g_array_get_element_size ((GArray *) src));
}

void
hn_hier_rosa_copy (HnHierRosa *dst, const HnHierRosa *src)
{
  copy_array (dst->next_sym, src->next_sym);
  copy_array (dst->next_dst, src->next_dst);
  copy_array (dst->next_link, src->next_link);
  copy_array (dst->head, src->head);
  copy_array (dst->link, src->link);
  copy_array (dst->len, src->len);
  copy_array (dst->endpos, src->endpos);
  copy_array (dst->tokens, src->tokens);
  dst->last = src->last;
}

static gint32
find_trans (const HnHierRosa *r, gint32 state, guint32 sym)
{
  for (gint32 t = GI32 (r->head, state); t >= 0; t = GI32 (r->next_link, t))
    if (g_array_index (r->next_sym, guint32, t) == sym)
      return t;
  return -1;
}

static void
set_trans (HnHierRosa *r, gint32 state, guint32 sym, gint32 dst)
{
  gint32 t = find_trans (r, state, sym);
  if (t >= 0)
    {
      GI32 (r->next_dst, t) = dst;
      return;
    }
  gint32 head = GI32 (r->head, state);
  g_array_append_val (r->next_sym, sym);
  g_array_append_val (r->next_dst, dst);
  g_array_append_val (r->next_link, head);
  GI32 (r->head, state) = (gint32) r->next_sym->len - 1;
}

gint64
hn_hier_rosa_predict_and_push (HnHierRosa *r, guint32 token, gsize max_context)
{
  if (max_context > 0 && r->tokens->len >= max_context)
    hn_hier_rosa_reset (r);
  gint32 i = (gint32) r->tokens->len;
  g_array_append_val (r->tokens, token);

  gint32 prev_last = r->last;
  gint32 cur = push_state (r);
  GI32 (r->len, cur) = GI32 (r->len, prev_last) + 1;
  gint32 p = prev_last;
  while (p != -1 && find_trans (r, p, token) < 0)
    {
      set_trans (r, p, token, cur);
      p = GI32 (r->link, p);
    }
  if (p == -1)
    GI32 (r->link, cur) = 0;
  else
    {
      gint32 q = GI32 (r->next_dst, find_trans (r, p, token));
      if (GI32 (r->len, p) + 1 == GI32 (r->len, q))
        GI32 (r->link, cur) = q;
      else
        {
          gint32 u = push_state (r);
          for (gint32 t = GI32 (r->head, q); t >= 0; t = GI32 (r->next_link, t))
            set_trans (r, u, g_array_index (r->next_sym, guint32, t), GI32 (r->next_dst, t));
          GI32 (r->len, u) = GI32 (r->len, p) + 1;
          GI32 (r->link, u) = GI32 (r->link, q);
          GI32 (r->endpos, u) = GI32 (r->endpos, q);
          for (gint32 w = p; w != -1; w = GI32 (r->link, w))
            {
              gint32 t = find_trans (r, w, token);
              if (t < 0 || GI32 (r->next_dst, t) != q)
                break;
              GI32 (r->next_dst, t) = u;
            }
          GI32 (r->link, q) = u;
          GI32 (r->link, cur) = u;
        }
    }
  r->last = cur;

  /* Predict from the longest suffix with an earlier end position, before
   * this position is recorded. */
  gint64 prediction = -1;
  for (gint32 v = cur; v != -1; v = GI32 (r->link, v))
    if (GI32 (r->len, v) > 0 && GI32 (r->endpos, v) >= 0)
      {
        guint next = (guint) GI32 (r->endpos, v) + 1;
        if (next < r->tokens->len)
          prediction = g_array_index (r->tokens, guint32, next);
        break;
      }
  for (gint32 v = cur; v != -1; v = GI32 (r->link, v))
    {
      if (GI32 (r->endpos, v) >= i)
        break;
      GI32 (r->endpos, v) = i;
    }
  return prediction;
}
