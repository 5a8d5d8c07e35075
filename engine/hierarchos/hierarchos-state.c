/* Chat state files: the full runtime state as versioned JSON in the
 * coherent-v9 interchange layout (the Hierarchos-Native runtime's
 * RuntimeStateSnapshot): cell states packed [1, W, 4 + N] as prev_tm,
 * prev_cm, v_first, output, then the channel's matrix row; ROSA as sorted
 * transition rows. Floats are written with 9 significant digits, which
 * round-trips every float exactly, so a restored state continues bit for bit. */
#include "hierarchos/hierarchos-private.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#define PACKED_LAYOUT "rwkv_v8_matrix_packed"

static void
put_floats (GString *s, const float *v, gsize n)
{
  g_string_append_c (s, '[');
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  for (gsize i = 0; i < n; i++)
    {
      if (i)
        g_string_append_c (s, ',');
      g_ascii_formatd (buf, sizeof buf, "%.9g", (double) v[i]);
      g_string_append (s, buf);
    }
  g_string_append_c (s, ']');
}

static void
put_cell (GString *s, const char *name, const HnHierCellState *c, int W, int N)
{
  int ss = 4 + N;
  g_string_append_printf (s, "\"%s\":{\"layout\":\"" PACKED_LAYOUT "\",\"state_readout_mode\":\"explicit-output\","
                          "\"hidden\":%d,\"head_size\":%d,\"state_size\":%d,\"shape\":[1,%d,%d],\"values\":",
                          name, W, N, ss, W, ss);
  g_autofree float *packed = g_new (float, (gsize) W * ss);
  for (int ch = 0; ch < W; ch++)
    {
      float *p = packed + (gsize) ch * ss;
      p[0] = c->tm[ch];
      p[1] = c->cm[ch];
      p[2] = c->vfirst[ch];
      p[3] = c->out[ch];
      memcpy (p + 4, c->S + (gsize) ch * N, (gsize) N * sizeof (float));
    }
  put_floats (s, packed, (gsize) W * ss);
  g_string_append_c (s, '}');
}

static int
cmp_u32_pair (gconstpointer a, gconstpointer b)
{
  const guint32 *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

static gboolean
check_finite (const float *v, gsize n, const char *what, GError **error)
{
  for (gsize i = 0; i < n; i++)
    if (!isfinite (v[i]))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "runtime state %s contains non-finite values", what);
        return FALSE;
      }
  return TRUE;
}

gboolean
hn_hier_state_save (const HnHierModel *m, const HnHierState *st, const char *path, GError **error)
{
  int Nh = (int) m->cfg.h_rwkv_head_size, Nl = (int) m->cfg.l_rwkv_head_size;
  if ((gsize) st->position != st->history->len)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "runtime state position %" G_GINT64_FORMAT
                   " does not match its history (%u tokens)", st->position, st->history->len);
      return FALSE;
    }
  if (!check_finite (st->h.S, (gsize) m->H * Nh, "h_state", error) ||
      !check_finite (st->l.S, (gsize) m->L * Nl, "l_state", error) ||
      !check_finite (st->fast_vals, (gsize) m->S * m->Vd, "fast_vals", error))
    return FALSE;
  GString *s = g_string_new ("{");
  g_string_append_printf (s, "\"kind\":\"%s\",\"schema_version\":%d,\"architecture_revision\":\"%s\","
                          "\"architecture_contract_sha256\":\"%s\",\"position\":%" G_GINT64_FORMAT ",\"history\":[",
                          HN_HIER_STATE_KIND, HN_HIER_STATE_SCHEMA, m->cfg.architecture_revision, m->contract_sha256,
                          st->position);
  for (guint i = 0; i < st->history->len; i++)
    g_string_append_printf (s, "%s%u", i ? "," : "", g_array_index (st->history, guint32, i));
  g_string_append (s, "],\n");
  put_cell (s, "h_state", &st->h, m->H, Nh);
  g_string_append (s, ",\n");
  put_cell (s, "l_state", &st->l, m->L, Nl);
  g_string_append (s, ",\n\"prev_context\":");
  put_floats (s, st->prev_context, (gsize) m->C);
  g_string_append (s, ",\n\"target_context\":");
  put_floats (s, st->target_context, (gsize) m->C);
  g_string_append (s, ",\n\"final_drift\":");
  put_floats (s, st->final_drift, (gsize) m->C);
  g_string_append (s, ",\n\"fast_vals\":");
  put_floats (s, st->fast_vals, (gsize) m->S * m->Vd);

  const HnHierRosa *r = &st->rosa;
  g_string_append (s, ",\n\"rosa\":{\"transitions\":[");
  g_autoptr (GArray) row = g_array_new (FALSE, FALSE, 2 * sizeof (guint32));
  for (guint q = 0; q < r->head->len; q++)
    {
      g_array_set_size (row, 0);
      for (gint32 t = g_array_index (r->head, gint32, q); t >= 0; t = g_array_index (r->next_link, gint32, t))
        {
          guint32 pair[2] = { g_array_index (r->next_sym, guint32, t), (guint32) g_array_index (r->next_dst, gint32, t) };
          g_array_append_val (row, pair);
        }
      g_array_sort (row, cmp_u32_pair);
      g_string_append (s, q ? ",[" : "[");
      for (guint k = 0; k < row->len; k++)
        {
          const guint32 *pair = (const guint32 *) (row->data + k * 2 * sizeof (guint32));
          g_string_append_printf (s, "%s{\"symbol\":%u,\"target\":%u}", k ? "," : "", pair[0], pair[1]);
        }
      g_string_append_c (s, ']');
    }
  const char *names[3] = { "suffix_links", "lengths", "endpos" };
  GArray *arrs[3] = { r->link, r->len, r->endpos };
  for (int a = 0; a < 3; a++)
    {
      g_string_append_printf (s, "],\"%s\":[", names[a]);
      for (guint q = 0; q < arrs[a]->len; q++)
        g_string_append_printf (s, "%s%d", q ? "," : "", g_array_index (arrs[a], gint32, q));
    }
  g_string_append_printf (s, "],\"last_state\":%d,\"tokens\":[", r->last);
  for (guint i = 0; i < r->tokens->len; i++)
    g_string_append_printf (s, "%s%u", i ? "," : "", g_array_index (r->tokens, guint32, i));
  g_string_append (s, "]}}\n");
  gboolean ok = hn_write_file_atomic (path, s->str, s->len, error);
  g_string_free (s, TRUE);
  return ok;
}

/* ---- loading ---- */

#define BAD(...) do { g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, __VA_ARGS__); return FALSE; } while (0)

static JsonArray *
get_array (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  return n && JSON_NODE_HOLDS_ARRAY (n) ? json_node_get_array (n) : NULL;
}

static gboolean
get_int (JsonObject *o, const char *name, gint64 *out)
{
  JsonNode *n = json_object_get_member (o, name);
  if (!n || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return TRUE;
}

static gboolean
read_floats (JsonObject *o, const char *name, float *dst, gsize n, const char *path, GError **error)
{
  JsonArray *a = get_array (o, name);
  if (!a || json_array_get_length (a) != n)
    BAD ("%s: '%s' must be an array of %zu numbers", path, name, n);
  for (guint i = 0; i < n; i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      GType t = JSON_NODE_HOLDS_VALUE (e) ? json_node_get_value_type (e) : G_TYPE_INVALID;
      if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
        BAD ("%s: '%s'[%u] is not a number", path, name, i);
      double v = json_node_get_double (e);
      if (!isfinite (v) || fabs (v) > 3.4e38)
        BAD ("%s: '%s'[%u] is not a finite float", path, name, i);
      dst[i] = (float) v;
    }
  return TRUE;
}

static gboolean
read_ints (JsonArray *a, GArray *dst, gint64 lo, gint64 hi, const char *path, const char *name, GError **error)
{
  g_array_set_size (dst, 0);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *e = json_array_get_element (a, i);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64)
        BAD ("%s: '%s'[%u] is not an integer", path, name, i);
      gint64 v = json_node_get_int (e);
      if (v < lo || v > hi)
        BAD ("%s: '%s'[%u] = %" G_GINT64_FORMAT " is out of range", path, name, i, v);
      if (g_array_get_element_size (dst) == sizeof (guint32))
        {
          guint32 u = (guint32) v;
          g_array_append_val (dst, u);
        }
    }
  return TRUE;
}

static gboolean
read_cell (JsonObject *root, const char *name, HnHierCellState *c, int W, int N, const char *path, GError **error)
{
  JsonNode *n = json_object_get_member (root, name);
  if (!n || !JSON_NODE_HOLDS_OBJECT (n))
    BAD ("%s: '%s' is missing", path, name);
  JsonObject *o = json_node_get_object (n);
  gint64 hidden = 0, hs = 0, ss = 0;
  const char *layout = hn_json_object_get_string (o, "layout");
  const char *mode = hn_json_object_get_string (o, "state_readout_mode");
  JsonArray *shape = get_array (o, "shape");
#define MISMATCH(...) do { g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, __VA_ARGS__); return FALSE; } while (0)
  /* each check says what it found: one message for all of them named the
   * hidden size even when that matched */
  if (!get_int (o, "hidden", &hidden) || !get_int (o, "head_size", &hs) || !get_int (o, "state_size", &ss))
    MISMATCH ("%s: %s: 'hidden', 'head_size' and 'state_size' must be integers", path, name);
  if (hidden != W || hs != N)
    MISMATCH ("%s: %s geometry does not match this model (saved hidden=%" G_GINT64_FORMAT " head_size=%" G_GINT64_FORMAT
              "; the model has hidden=%d head_size=%d)", path, name, hidden, hs, W, N);
  if (ss != 4 + N)
    MISMATCH ("%s: %s: state_size %" G_GINT64_FORMAT " is not head_size + 4 (%d)", path, name, ss, 4 + N);
  if (g_strcmp0 (layout, PACKED_LAYOUT) != 0 || g_strcmp0 (mode, "explicit-output") != 0)
    MISMATCH ("%s: %s: layout '%s' and state_readout_mode '%s' must be '" PACKED_LAYOUT "' and 'explicit-output'", path,
              name, layout ? layout : "(none)", mode ? mode : "(none)");
  const gint64 want[3] = { 1, W, 4 + N };
  for (guint i = 0; i < 3; i++)
    {
      JsonNode *e = shape && json_array_get_length (shape) == 3 ? json_array_get_element (shape, i) : NULL;
      if (!e || !JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64 ||
          json_node_get_int (e) != want[i])
        MISMATCH ("%s: %s: 'shape' must be [1, %d, %d] (three integers) for this model", path, name, W, 4 + N);
    }
#undef MISMATCH
  int sz = 4 + N;
  g_autofree float *packed = g_new (float, (gsize) W * sz);
  if (!read_floats (o, "values", packed, (gsize) W * sz, path, error))
    return FALSE;
  for (int ch = 0; ch < W; ch++)
    {
      const float *p = packed + (gsize) ch * sz;
      c->tm[ch] = p[0];
      c->cm[ch] = p[1];
      c->vfirst[ch] = p[2];
      c->out[ch] = p[3];
      memcpy (c->S + (gsize) ch * N, p + 4, (gsize) N * sizeof (float));
    }
  return TRUE;
}

static gboolean
read_rosa (JsonObject *root, HnHierRosa *r, int V, const char *path, GError **error)
{
  JsonNode *n = json_object_get_member (root, "rosa");
  if (!n || !JSON_NODE_HOLDS_OBJECT (n))
    BAD ("%s: 'rosa' is missing", path);
  JsonObject *o = json_node_get_object (n);
  JsonArray *tr = get_array (o, "transitions"), *sl = get_array (o, "suffix_links"), *ln = get_array (o, "lengths");
  JsonArray *ep = get_array (o, "endpos"), *tk = get_array (o, "tokens");
  gint64 last = -1;
  if (!tr || !sl || !ln || !ep || !tk || !get_int (o, "last_state", &last))
    BAD ("%s: 'rosa' lacks transitions, suffix_links, lengths, endpos, last_state or tokens", path);
  guint states = json_array_get_length (tr);
  if (states == 0 || states > 4u * 1024 * 1024 || json_array_get_length (sl) != states ||
      json_array_get_length (ln) != states || json_array_get_length (ep) != states || last < 0 || last >= states)
    BAD ("%s: ROSA state table has inconsistent geometry", path);
  g_autoptr (GArray) links = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr (GArray) lens = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr (GArray) ends = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr (GArray) toks = g_array_new (FALSE, FALSE, sizeof (guint32));
  if (!read_ints (tk, toks, 0, V - 1, path, "rosa.tokens", error))
    return FALSE;
  gint64 ntok = toks->len;
  for (guint q = 0; q < states; q++)
    {
      gint64 a = json_array_get_int_element (sl, q), b = json_array_get_int_element (ln, q), c = json_array_get_int_element (ep, q);
      if (b < 0 || b > ntok || c < -1 || c >= ntok)
        BAD ("%s: ROSA state %u has an invalid length or end position", path, q);
      gint32 ai = (gint32) a, bi = (gint32) b, ci = (gint32) c;
      g_array_append_val (links, ai);
      g_array_append_val (lens, bi);
      g_array_append_val (ends, ci);
    }
  if (g_array_index (links, gint32, 0) != -1 || g_array_index (lens, gint32, 0) != 0)
    BAD ("%s: ROSA root state is invalid", path);
  for (guint q = 1; q < states; q++)
    {
      gint32 l = g_array_index (links, gint32, q);
      if (l < 0 || (guint) l >= states || g_array_index (lens, gint32, l) >= g_array_index (lens, gint32, q))
        BAD ("%s: ROSA state %u has an invalid suffix link", path, q);
    }
  if (g_array_index (lens, gint32, last) != ntok)
    BAD ("%s: ROSA final state does not cover its token history", path);
  hn_hier_rosa_reset (r);
  g_array_set_size (r->head, 0);
  g_array_set_size (r->link, 0);
  g_array_set_size (r->len, 0);
  g_array_set_size (r->endpos, 0);
  for (guint q = 0; q < states; q++)
    {
      gint32 m1 = -1;
      g_array_append_val (r->head, m1);
    }
  g_array_append_vals (r->link, links->data, states);
  g_array_append_vals (r->len, lens->data, states);
  g_array_append_vals (r->endpos, ends->data, states);
  for (guint q = 0; q < states; q++)
    {
      JsonNode *rn = json_array_get_element (tr, q);
      if (!JSON_NODE_HOLDS_ARRAY (rn))
        BAD ("%s: ROSA transitions[%u] is not an array", path, q);
      JsonArray *ra = json_node_get_array (rn);
      for (gint k = (gint) json_array_get_length (ra) - 1; k >= 0; k--)
        {
          JsonNode *en = json_array_get_element (ra, (guint) k);
          gint64 sym = -1, dst = -1;
          if (!JSON_NODE_HOLDS_OBJECT (en) || !get_int (json_node_get_object (en), "symbol", &sym) ||
              !get_int (json_node_get_object (en), "target", &dst) || sym < 0 || sym >= V || dst < 0 ||
              dst >= states || g_array_index (lens, gint32, dst) <= g_array_index (lens, gint32, q))
            BAD ("%s: ROSA state %u has an invalid transition", path, q);
          for (gint32 t = g_array_index (r->head, gint32, q); t >= 0; t = g_array_index (r->next_link, gint32, t))
            if (g_array_index (r->next_sym, guint32, t) == (guint32) sym)
              BAD ("%s: ROSA state %u has a duplicate transition", path, q);
          guint32 s32 = (guint32) sym;
          gint32 d32 = (gint32) dst, head = g_array_index (r->head, gint32, q);
          g_array_append_val (r->next_sym, s32);
          g_array_append_val (r->next_dst, d32);
          g_array_append_val (r->next_link, head);
          g_array_index (r->head, gint32, q) = (gint32) r->next_sym->len - 1;
        }
    }
  g_array_set_size (r->tokens, 0);
  g_array_append_vals (r->tokens, toks->data, toks->len);
  r->last = (gint32) last;
  return TRUE;
}

gboolean
hn_hier_state_load (const HnHierModel *m, HnHierState *out, const char *path, GError **error)
{
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!hn_json_parser_load_file (p, path, HN_MAX_CONFIG_BYTES, "chat state", error))
    return FALSE;
  JsonNode *rn = json_parser_get_root (p);
  if (!rn || !JSON_NODE_HOLDS_OBJECT (rn))
    BAD ("%s: not a JSON object", path);
  JsonObject *o = json_node_get_object (rn);
  const char *kind = hn_json_object_get_string (o, "kind");
  gint64 schema = -1, position = -1;
  if (g_strcmp0 (kind, HN_HIER_STATE_KIND) != 0 || !get_int (o, "schema_version", &schema) || schema != HN_HIER_STATE_SCHEMA)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: not a Hierarchos runtime state of schema %d", path,
                   HN_HIER_STATE_SCHEMA);
      return FALSE;
    }
  const char *rev = hn_json_object_get_string (o, "architecture_revision");
  const char *sha = hn_json_object_get_string (o, "architecture_contract_sha256");
  if (g_strcmp0 (rev, m->cfg.architecture_revision) != 0 || g_strcmp0 (sha, m->contract_sha256) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: the state belongs to another model (revision %s, contract %s; this model: %s, %s)", path,
                   rev ? rev : "?", sha ? sha : "?", m->cfg.architecture_revision, m->contract_sha256);
      return FALSE;
    }
  /* Fill a scratch state; the caller's is replaced only when all is valid. */
  g_autoptr (HnHierState) s = hn_hier_state_new (m);
  JsonArray *hist = get_array (o, "history");
  if (!get_int (o, "position", &position) || !hist || position != (gint64) json_array_get_length (hist))
    BAD ("%s: position and history do not match", path);
  if (!read_ints (hist, s->history, 0, m->V - 1, path, "history", error))
    return FALSE;
  s->position = position;
  if (!read_cell (o, "h_state", &s->h, m->H, (int) m->cfg.h_rwkv_head_size, path, error) ||
      !read_cell (o, "l_state", &s->l, m->L, (int) m->cfg.l_rwkv_head_size, path, error) ||
      !read_floats (o, "prev_context", s->prev_context, (gsize) m->C, path, error) ||
      !read_floats (o, "target_context", s->target_context, (gsize) m->C, path, error) ||
      !read_floats (o, "final_drift", s->final_drift, (gsize) m->C, path, error) ||
      !read_floats (o, "fast_vals", s->fast_vals, (gsize) m->S * m->Vd, path, error) ||
      !read_rosa (o, &s->rosa, m->V, path, error))
    return FALSE;
  guint nt = s->rosa.tokens->len, nh = s->history->len;
  if (nt > nh || memcmp (s->rosa.tokens->data, s->history->data + (gsize) (nh - nt) * sizeof (guint32),
                         (gsize) nt * sizeof (guint32)) != 0)
    BAD ("%s: the ROSA history is not a suffix of the token history", path);
  hn_hier_state_copy (m, out, s);
  return TRUE;
}
