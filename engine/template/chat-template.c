/* Evaluator of the Jinja subset (see chat-template.h). Values live in a
 * per-render arena and are freed together at the end, so the evaluator can
 * share them freely (slices keep the identity of message objects, which the
 * assistant-span tracking relies on). Semantics follow jinja2 3.1 with
 * transformers' environment; each rule below is the one jinja2 applies. */
#include "chat-template.h"
#include "chat-template-private.h"
#include "base/hn-error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct _HnChatTemplate {
  GPtrArray *body;
  gboolean has_generation;
  char *name;
};

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_FUNC } VType;

typedef enum {
  F_NONE, F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME, F_MACRO, F_METHOD
} FuncKind;

typedef struct _Value Value;
struct _Value {
  VType t;
  gboolean tuple;      /* V_LIST printed as a tuple */
  gboolean ns;         /* V_DICT created by namespace(): attributes assignable */
  gboolean loop;       /* V_DICT loop object (has cycle()) */
  gboolean b;
  gint64 i;
  double f;
  char *s;             /* V_STR text, V_UNDEF name hint, V_FUNC method name */
  gsize len;
  GPtrArray *list;     /* Value* */
  GHashTable *map;     /* char* -> Value* */
  GPtrArray *keys;     /* insertion order; strings owned by map */
  FuncKind fk;
  Value *self;         /* bound method receiver */
  const CtNode *macro;
};

typedef struct _Frame Frame;
struct _Frame {
  GHashTable *vars;    /* char* -> Value* */
  Frame *parent;
};

typedef struct {
  GString *out;
  GString *main_out;
  GPtrArray *arena;    /* Value*, freed with value_free */
  GPtrArray *frames;   /* Frame*, freed at the end */
  GError *error;
  int brk;             /* 1 break, 2 continue */
  int depth;
  Frame *root;
  GHashTable *tracked; /* Value* (message object) -> index + 1 */
  GArray *segs;        /* gssize pairs (start, end) per message, -1 = none */
  GArray *gen_spans;   /* HnChatSpan from {% generation %} */
  int current_msg;     /* message whose loop iteration is running, -1 none */
  /* Budgets (see chat-template.h), as jinja2's sandbox and minijinja keep:
   * the arena frees nothing before the end, so `mem` is what the render
   * holds; `steps` counts evaluated nodes, loop iterations and bulk work. */
  const char *name;    /* the template's name for errors, or NULL */
  const CtNode *at;    /* the node being evaluated, for budget errors */
  gsize mem;
  guint64 steps;
  guint64 iterations;
  int depth_now;       /* eval/exec recursion */
} R;

static void
value_free (Value *v)
{
  g_free (v->s);
  if (v->list)
    g_ptr_array_unref (v->list);
  if (v->map)
    g_hash_table_unref (v->map);
  if (v->keys)
    g_ptr_array_unref (v->keys);
  g_free (v);
}

static Value *
v_new (R *r, VType t)
{
  Value *v = g_new0 (Value, 1);
  v->t = t;
  g_ptr_array_add (r->arena, v);
  r->mem += sizeof (Value) + 2 * sizeof (gpointer);
  return v;
}

static Value *
v_undef (R *r, const char *hint)
{
  Value *v = v_new (r, V_UNDEF);
  v->s = g_strdup (hint);
  return v;
}

static Value *
v_none (R *r)
{
  return v_new (r, V_NONE);
}

static Value *
v_bool (R *r, gboolean b)
{
  Value *v = v_new (r, V_BOOL);
  v->b = !!b;
  return v;
}

static Value *
v_int (R *r, gint64 i)
{
  Value *v = v_new (r, V_INT);
  v->i = i;
  return v;
}

static Value *
v_float (R *r, double f)
{
  Value *v = v_new (r, V_FLOAT);
  v->f = f;
  return v;
}

static Value *
v_strn (R *r, const char *s, gsize len)
{
  Value *v = v_new (r, V_STR);
  r->mem += len;
  v->s = g_malloc (len + 1);
  memcpy (v->s, s, len);
  v->s[len] = '\0';
  v->len = len;
  return v;
}

static Value *
v_str (R *r, const char *s)
{
  return v_strn (r, s, strlen (s));
}

static Value *
v_str_take (R *r, GString *s)
{
  Value *v = v_new (r, V_STR);
  r->mem += s->allocated_len;
  v->len = s->len;
  v->s = g_string_free (s, FALSE);
  return v;
}

static Value *
v_list (R *r)
{
  Value *v = v_new (r, V_LIST);
  v->list = g_ptr_array_new ();
  return v;
}

static Value *
v_dict (R *r)
{
  Value *v = v_new (r, V_DICT);
  r->mem += 512; /* a GHashTable and its first arrays (measured, roughly) */
  v->map = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  v->keys = g_ptr_array_new ();
  return v;
}

/* Appends to a list value, counting the slot against the memory budget. */
static void
list_push (R *r, Value *l, Value *item)
{
  r->mem += 2 * sizeof (gpointer);
  g_ptr_array_add (l->list, item);
}

static void
dict_set (R *r, Value *d, const char *key, Value *val)
{
  r->mem += 96 + strlen (key);
  /* GHashTable keeps the existing key on replace, so the order array stays valid */
  gboolean existed = g_hash_table_contains (d->map, key);
  char *k = g_strdup (key);
  g_hash_table_insert (d->map, k, val);
  if (!existed)
    g_ptr_array_add (d->keys, k);
}

static Value *
dict_get (Value *d, const char *key)
{
  return g_hash_table_lookup (d->map, key);
}

static Value *
v_func (R *r, FuncKind fk, const char *name)
{
  Value *v = v_new (r, V_FUNC);
  v->fk = fk;
  v->s = g_strdup (name);
  return v;
}

/* ------------------------------------------------------------------ errors */

static Value *
rfail (R *r, const CtNode *at, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static Value *
rfail (R *r, const CtNode *at, const char *fmt, ...)
{
  if (r->error)
    return NULL;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *m = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_autofree char *who = r->name ? g_strdup_printf ("chat template (%s)", r->name) : g_strdup ("chat template");
  if (!at)
    at = r->at;
  if (at)
    g_set_error (&r->error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                 "%s: line %d, column %d: %s", who, at->line, at->col, m);
  else
    g_set_error (&r->error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s", who, m);
  return NULL;
}

/* A budget ran out: the error names the limit, so a user can tell a hostile
 * or broken template from a bug. */
static Value *
limit_fail (R *r, const char *what, guint64 limit, const char *unit)
{
  return rfail (r, NULL, "the template exceeds its %s limit of %" G_GUINT64_FORMAT "%s", what, limit, unit);
}

/* Checks every budget; `work` adds steps for bulk work (bytes scanned,
 * elements compared) so one step cannot hide a long loop in C. */
static gboolean
budget_ok (R *r, guint64 work)
{
  if (r->error)
    return FALSE;
  r->steps += work;
  if (r->steps > HN_CHAT_TEMPLATE_MAX_STEPS)
    return limit_fail (r, "evaluation step", HN_CHAT_TEMPLATE_MAX_STEPS, " steps") != NULL;
  if (r->mem > HN_CHAT_TEMPLATE_MAX_MEMORY)
    return limit_fail (r, "memory", HN_CHAT_TEMPLATE_MAX_MEMORY >> 20, " MiB") != NULL;
  if (r->main_out && r->main_out->len > HN_CHAT_TEMPLATE_MAX_OUTPUT)
    return limit_fail (r, "output size", HN_CHAT_TEMPLATE_MAX_OUTPUT >> 20, " MiB") != NULL;
  return TRUE;
}

/* Whether `bytes` more may be made now (checked before a big allocation). */
static gboolean
room_for (R *r, guint64 bytes)
{
  if (r->error)
    return FALSE;
  if (bytes > HN_CHAT_TEMPLATE_MAX_MEMORY || r->mem + bytes > HN_CHAT_TEMPLATE_MAX_MEMORY)
    return limit_fail (r, "memory", HN_CHAT_TEMPLATE_MAX_MEMORY >> 20, " MiB") != NULL;
  return TRUE;
}

static Value *
undef_fail (R *r, const CtNode *at, const Value *v)
{
  return rfail (r, at, "%s is undefined", v->s && *v->s ? v->s : "value");
}

/* ----------------------------------------------------------- conversions */

static Value *
from_json (R *r, JsonNode *n)
{
  if (!n)
    return v_none (r);
  switch (json_node_get_node_type (n))
    {
    case JSON_NODE_NULL:
      return v_none (r);
    case JSON_NODE_VALUE:
      {
        GType t = json_node_get_value_type (n);
        if (t == G_TYPE_BOOLEAN)
          return v_bool (r, json_node_get_boolean (n));
        if (t == G_TYPE_INT64 || t == G_TYPE_INT)
          return v_int (r, json_node_get_int (n));
        if (t == G_TYPE_DOUBLE || t == G_TYPE_FLOAT)
          return v_float (r, json_node_get_double (n));
        if (t == G_TYPE_STRING)
          return v_str (r, json_node_get_string (n));
        return v_none (r);
      }
    case JSON_NODE_ARRAY:
      {
        Value *l = v_list (r);
        JsonArray *a = json_node_get_array (n);
        for (guint k = 0; k < json_array_get_length (a); k++)
          list_push (r, l, from_json (r, json_array_get_element (a, k)));
        return l;
      }
    case JSON_NODE_OBJECT:
      {
        /* json_object_get_members keeps the file's key order, which
         * tojson and items() must reproduce */
        Value *d = v_dict (r);
        JsonObject *o = json_node_get_object (n);
        GList *names = json_object_get_members (o);
        for (GList *l = names; l; l = l->next)
          dict_set (r, d, l->data, from_json (r, json_object_get_member (o, l->data)));
        g_list_free (names);
        return d;
      }
    }
  return v_none (r);
}

static const char *
type_name (const Value *v)
{
  switch (v->t)
    {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v->tuple ? "tuple" : "list";
    case V_DICT: return v->ns ? "Namespace" : v->loop ? "LoopContext" : "dict";
    case V_FUNC: return "function";
    }
  return "object";
}

/* Python's repr(float): the shortest string that reads back exactly. */
static void
append_float (GString *out, double x)
{
  if (isnan (x))
    {
      g_string_append (out, "nan");
      return;
    }
  if (isinf (x))
    {
      g_string_append (out, x < 0 ? "-inf" : "inf");
      return;
    }
  char buf[64];
  int prec;
  for (prec = 1; prec <= 17; prec++)
    {
      g_snprintf (buf, sizeof buf, "%.*e", prec - 1, x);
      if (g_ascii_strtod (buf, NULL) == x)
        break;
    }
  /* buf = [-]d.ddde[+-]XX */
  char *e = strchr (buf, 'e');
  int exp10 = atoi (e + 1);
  *e = '\0';
  GString *digits = g_string_new (NULL);
  gboolean neg = buf[0] == '-';
  for (char *c = buf + neg; *c; c++)
    if (g_ascii_isdigit (*c))
      g_string_append_c (digits, *c);
  while (digits->len > 1 && digits->str[digits->len - 1] == '0')
    g_string_truncate (digits, digits->len - 1);
  if (neg)
    g_string_append_c (out, '-');
  int nd = digits->len;
  if (exp10 >= -4 && exp10 < 16)
    {
      if (exp10 >= 0)
        {
          for (int k = 0; k <= exp10; k++)
            g_string_append_c (out, k < nd ? digits->str[k] : '0');
          g_string_append_c (out, '.');
          if (nd > exp10 + 1)
            g_string_append (out, digits->str + exp10 + 1);
          else
            g_string_append_c (out, '0');
        }
      else
        {
          g_string_append (out, "0.");
          for (int k = 0; k < -exp10 - 1; k++)
            g_string_append_c (out, '0');
          g_string_append (out, digits->str);
        }
    }
  else
    {
      g_string_append_c (out, digits->str[0]);
      if (nd > 1)
        {
          g_string_append_c (out, '.');
          g_string_append (out, digits->str + 1);
        }
      g_string_append_printf (out, "e%c%02d", exp10 < 0 ? '-' : '+', ABS (exp10));
    }
  g_string_free (digits, TRUE);
}

static void
append_py_repr_str (GString *out, const char *s, gsize len)
{
  gboolean has_sq = memchr (s, '\'', len) != NULL, has_dq = memchr (s, '"', len) != NULL;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  g_string_append_c (out, q);
  for (gsize k = 0; k < len; k++)
    {
      gsize run = k; /* copy a run of plain characters at once */
      while (run < len && (unsigned char) s[run] >= 0x20 && s[run] != 0x7f && s[run] != q && s[run] != '\\')
        run++;
      if (run > k)
        {
          g_string_append_len (out, s + k, run - k);
          k = run - 1;
          continue;
        }
      unsigned char c = s[k];
      if (c == (unsigned char) q || c == '\\')
        {
          g_string_append_c (out, '\\');
          g_string_append_c (out, c);
        }
      else if (c == '\n')
        g_string_append (out, "\\n");
      else if (c == '\r')
        g_string_append (out, "\\r");
      else if (c == '\t')
        g_string_append (out, "\\t");
      else if (c < 0x20 || c == 0x7f)
        g_string_append_printf (out, "\\x%02x", c);
      else
        g_string_append_c (out, c);
    }
  g_string_append_c (out, q);
}

/* Values may share and (through namespace attributes) contain themselves, so
 * printing is bounded in depth and, since a list of N references to one big
 * string prints N copies, in size: the text printed counts against the
 * memory budget as it grows. */
#define CT_MAX_VALUE_DEPTH 100

static gboolean
append_value (R *r, GString *out, const Value *v, gboolean repr, int depth)
{
  if (depth > CT_MAX_VALUE_DEPTH)
    return rfail (r, NULL, "a value nests deeper than %d levels (or contains itself)", CT_MAX_VALUE_DEPTH) != NULL;
  if (!room_for (r, out->len))
    return FALSE;
  switch (v->t)
    {
    case V_UNDEF:
      break;
    case V_NONE:
      g_string_append (out, "None");
      break;
    case V_BOOL:
      g_string_append (out, v->b ? "True" : "False");
      break;
    case V_INT:
      g_string_append_printf (out, "%" G_GINT64_FORMAT, v->i);
      break;
    case V_FLOAT:
      append_float (out, v->f);
      break;
    case V_STR:
      if (!room_for (r, out->len + 4 * (guint64) v->len))
        return FALSE;
      if (repr)
        append_py_repr_str (out, v->s, v->len);
      else
        g_string_append_len (out, v->s, v->len);
      break;
    case V_LIST:
      g_string_append_c (out, v->tuple ? '(' : '[');
      for (guint k = 0; k < v->list->len; k++)
        {
          if (k)
            g_string_append (out, ", ");
          if (!append_value (r, out, v->list->pdata[k], TRUE, depth + 1))
            return FALSE;
        }
      if (v->tuple && v->list->len == 1)
        g_string_append_c (out, ',');
      g_string_append_c (out, v->tuple ? ')' : ']');
      break;
    case V_DICT:
      if (v->ns)
        g_string_append (out, "<Namespace ");
      g_string_append_c (out, '{');
      for (guint k = 0; k < v->keys->len; k++)
        {
          const char *key = v->keys->pdata[k];
          if (k)
            g_string_append (out, ", ");
          append_py_repr_str (out, key, strlen (key));
          g_string_append (out, ": ");
          if (!append_value (r, out, dict_get ((Value *) v, key), TRUE, depth + 1))
            return FALSE;
        }
      g_string_append_c (out, '}');
      if (v->ns)
        g_string_append_c (out, '>');
      break;
    case V_FUNC:
      g_string_append_printf (out, "<function %s>", v->s ? v->s : "");
      break;
    }
  return TRUE;
}

/* Python's str() of a value, which is what {{ }} prints; on a budget error
 * r->error is set and the text is cut. */
static gboolean
append_str (R *r, GString *out, const Value *v)
{
  return append_value (r, out, v, FALSE, 0);
}

static char *
to_cstr (R *r, const Value *v)
{
  GString *s = g_string_new (NULL);
  append_str (r, s, v);
  return g_string_free (s, FALSE);
}

static Value *
v_tostr (R *r, const Value *v)
{
  if (v->t == V_STR)
    return (Value *) v;
  GString *s = g_string_new (NULL);
  append_str (r, s, v);
  return v_str_take (r, s);
}

static gboolean
truthy (const Value *v)
{
  switch (v->t)
    {
    case V_UNDEF: case V_NONE: return FALSE;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0.0;
    case V_STR: return v->len > 0;
    case V_LIST: return v->list->len > 0;
    case V_DICT: return v->keys->len > 0;
    case V_FUNC: return TRUE;
    }
  return FALSE;
}

static gboolean
is_num (const Value *v)
{
  return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL;
}

static double
num_f (const Value *v)
{
  return v->t == V_FLOAT ? v->f : v->t == V_INT ? (double) v->i : (double) v->b;
}

static gint64
num_i (const Value *v)
{
  if (v->t == V_FLOAT) /* a float outside the int64 range saturates (a cast would be undefined) */
    return isnan (v->f) ? 0 : v->f >= 9.2233720368547758e18 ? G_MAXINT64 : v->f <= -9.2233720368547758e18 ? G_MININT64
                                                                                                 : (gint64) v->f;
  return v->t == V_INT ? v->i : (gint64) v->b;
}

/* Python's ==; each element compared and each byte counts as work (unique
 * and `in` over big lists), and the depth is bounded as in append_value. */
static gboolean
values_equal_at (R *r, const Value *a, const Value *b, int depth)
{
  if (!budget_ok (r, 1) || depth > CT_MAX_VALUE_DEPTH)
    {
      if (depth > CT_MAX_VALUE_DEPTH)
        rfail (r, NULL, "a value nests deeper than %d levels (or contains itself)", CT_MAX_VALUE_DEPTH);
      return FALSE;
    }
  if (a == b && a->t != V_FLOAT)
    return TRUE;
  if (is_num (a) && is_num (b))
    {
      if (a->t != V_FLOAT && b->t != V_FLOAT)
        return num_i (a) == num_i (b);
      return num_f (a) == num_f (b);
    }
  if (a->t != b->t)
    return FALSE;
  switch (a->t)
    {
    case V_UNDEF: case V_NONE: return TRUE;
    case V_STR: return a->len == b->len && budget_ok (r, a->len / 16) && memcmp (a->s, b->s, a->len) == 0;
    case V_LIST:
      if (a->list->len != b->list->len)
        return FALSE;
      for (guint k = 0; k < a->list->len; k++)
        if (!values_equal_at (r, a->list->pdata[k], b->list->pdata[k], depth + 1))
          return FALSE;
      return TRUE;
    case V_DICT:
      if (a->keys->len != b->keys->len)
        return FALSE;
      for (guint k = 0; k < a->keys->len; k++)
        {
          Value *bv = dict_get ((Value *) b, a->keys->pdata[k]);
          if (!bv || !values_equal_at (r, dict_get ((Value *) a, a->keys->pdata[k]), bv, depth + 1))
            return FALSE;
        }
      return TRUE;
    default:
      return a == b;
    }
}

static gboolean
values_equal (R *r, const Value *a, const Value *b)
{
  return values_equal_at (r, a, b, 0);
}

/* ------------------------------------------------------------------ frames */

static Frame *
frame_push (R *r, Frame *parent)
{
  r->mem += 768; /* the frame, its hash table and a few names (measured, roughly) */
  Frame *f = g_new0 (Frame, 1);
  f->vars = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  f->parent = parent;
  g_ptr_array_add (r->frames, f);
  return f;
}

static void
frame_free (Frame *f)
{
  g_hash_table_unref (f->vars);
  g_free (f);
}

static void
frame_set (Frame *f, const char *name, Value *v)
{
  g_hash_table_insert (f->vars, g_strdup (name), v);
}

static Value *
frame_lookup (Frame *f, const char *name)
{
  for (; f; f = f->parent)
    {
      Value *v = g_hash_table_lookup (f->vars, name);
      if (v)
        return v;
    }
  return NULL;
}

/* --------------------------------------------------------- string helpers */

/* Byte offsets of each character of a UTF-8 string, plus the end. */
static GArray *
char_offsets (R *r, const Value *s)
{
  r->steps += s->len / 4; /* checked at the next step: no string is bigger than the memory budget */
  GArray *o = g_array_new (FALSE, FALSE, sizeof (gsize));
  const char *p = s->s, *end = s->s + s->len;
  while (p < end)
    {
      gsize off = p - s->s;
      g_array_append_val (o, off);
      p = g_utf8_find_next_char (p, end);
      if (!p)
        p = end;
    }
  gsize off = s->len;
  g_array_append_val (o, off);
  return o;
}

static gsize
str_nchars (const Value *s)
{
  return g_utf8_strlen (s->s, s->len);
}

static gboolean
in_charset (gunichar c, const Value *chars)
{
  if (!chars)
    return g_unichar_isspace (c);
  for (const char *p = chars->s; p < chars->s + chars->len; p = g_utf8_next_char (p))
    if (g_utf8_get_char (p) == c)
      return TRUE;
  return FALSE;
}

static Value *
str_strip (R *r, const Value *s, const Value *chars, gboolean left, gboolean right)
{
  const char *b = s->s, *e = s->s + s->len;
  while (left && b < e && in_charset (g_utf8_get_char (b), chars))
    b = g_utf8_next_char (b);
  while (right && e > b)
    {
      const char *prev = g_utf8_find_prev_char (b, e);
      if (!prev || !in_charset (g_utf8_get_char (prev), chars))
        break;
      e = prev;
    }
  return v_strn (r, b, e - b);
}

static Value *
str_case (R *r, const Value *s, int mode)
{
  /* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' title (str.title), 'j' jinja title */
  if (mode == 'u' || mode == 'l')
    {
      /* whole-string case mapping handles special casing (ß -> SS) as Python */
      g_autofree char *m = mode == 'u' ? g_utf8_strup (s->s, s->len) : g_utf8_strdown (s->s, s->len);
      return v_str (r, m);
    }
  GString *out = g_string_new (NULL);
  gboolean prev_cased = FALSE, first = TRUE;
  for (const char *p = s->s; p < s->s + s->len; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);
      gunichar o = c;
      switch (mode)
        {
        case 'u': o = g_unichar_toupper (c); break;
        case 'l': o = g_unichar_tolower (c); break;
        case 'c': o = first ? g_unichar_toupper (c) : g_unichar_tolower (c); break;
        case 't':
          o = prev_cased ? g_unichar_tolower (c) : g_unichar_toupper (c);
          prev_cased = g_unichar_isalpha (c);
          break;
        case 'j':
          o = prev_cased ? g_unichar_tolower (c) : g_unichar_toupper (c);
          prev_cased = !(g_unichar_isspace (c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<');
          break;
        }
      first = FALSE;
      g_string_append_unichar (out, o);
    }
  return v_str_take (r, out);
}

static Value *
str_replace (R *r, const Value *s, const Value *old, const Value *rep, gint64 count)
{
  GString *out = g_string_new (NULL);
  const char *p = s->s, *end = s->s + s->len;
  gint64 done = 0;
  if (old->len == 0)
    {
      /* Python inserts the replacement between characters */
      for (; p <= end && (count < 0 || done < count); done++)
        {
          if (!room_for (r, out->len + rep->len))
            break; /* r->error says which budget */
          g_string_append_len (out, rep->s, rep->len);
          if (p == end)
            {
              p++;
              break;
            }
          const char *n = g_utf8_next_char (p);
          g_string_append_len (out, p, n - p);
          p = n;
        }
      if (p < end)
        g_string_append_len (out, p, end - p);
      return v_str_take (r, out);
    }
  while (p < end && (count < 0 || done < count))
    {
      const char *hit = g_strstr_len (p, end - p, old->s);
      if (!hit || hit + old->len > end)
        break;
      if (!room_for (r, out->len + (hit - p) + rep->len))
        break;
      g_string_append_len (out, p, hit - p);
      g_string_append_len (out, rep->s, rep->len);
      p = hit + old->len;
      done++;
    }
  g_string_append_len (out, p, end - p);
  return v_str_take (r, out);
}

static Value *
str_split (R *r, const Value *s, const Value *sep, gint64 maxsplit)
{
  Value *l = v_list (r);
  const char *p = s->s, *end = s->s + s->len;
  if (!sep)
    {
      gint64 n = 0;
      for (;;)
        {
          while (p < end && g_unichar_isspace (g_utf8_get_char (p)))
            p = g_utf8_next_char (p);
          if (p >= end)
            break;
          if (maxsplit >= 0 && n >= maxsplit)
            {
              const char *e = end;
              while (e > p)
                {
                  const char *prev = g_utf8_find_prev_char (p, e);
                  if (!prev || !g_unichar_isspace (g_utf8_get_char (prev)))
                    break;
                  e = prev;
                }
              list_push (r, l, v_strn (r, p, e - p));
              break;
            }
          const char *w = p;
          while (p < end && !g_unichar_isspace (g_utf8_get_char (p)))
            p = g_utf8_next_char (p);
          list_push (r, l, v_strn (r, w, p - w));
          n++;
        }
      return l;
    }
  gint64 n = 0;
  for (;;)
    {
      const char *hit = (maxsplit < 0 || n < maxsplit) && sep->len <= (gsize) (end - p)
                          ? g_strstr_len (p, end - p, sep->s) : NULL;
      if (!hit)
        {
          list_push (r, l, v_strn (r, p, end - p));
          break;
        }
      list_push (r, l, v_strn (r, p, hit - p));
      p = hit + sep->len;
      n++;
    }
  return l;
}

static gboolean
str_has_prefix_v (const Value *s, const Value *pre, gboolean suffix)
{
  if (pre->len > s->len)
    return FALSE;
  return memcmp (suffix ? s->s + s->len - pre->len : s->s, pre->s, pre->len) == 0;
}

/* ------------------------------------------------------------------ JSON */

static void
json_escape (GString *out, const char *s, gsize len)
{
  g_string_append_c (out, '"');
  for (gsize k = 0; k < len; k++)
    {
      unsigned char c = s[k];
      switch (c)
        {
        case '"': g_string_append (out, "\\\""); break;
        case '\\': g_string_append (out, "\\\\"); break;
        case '\n': g_string_append (out, "\\n"); break;
        case '\r': g_string_append (out, "\\r"); break;
        case '\t': g_string_append (out, "\\t"); break;
        case '\b': g_string_append (out, "\\b"); break;
        case '\f': g_string_append (out, "\\f"); break;
        default:
          if (c < 0x20)
            g_string_append_printf (out, "\\u%04x", c);
          else
            g_string_append_c (out, c);
        }
    }
  g_string_append_c (out, '"');
}

static int
cmp_keys (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) */
static gboolean
json_dump (R *r, GString *out, const Value *v, gint64 indent, int level, const char *item_sep,
           const char *key_sep, gboolean sort_keys, const char **bad_type)
{
  /* bounded as append_value is; *bad_type stays NULL for a budget error */
  if (level > CT_MAX_VALUE_DEPTH)
    return rfail (r, NULL, "a value nests deeper than %d levels (or contains itself)", CT_MAX_VALUE_DEPTH) != NULL;
  guint64 pad = indent > 0 ? (guint64) indent * (guint64) (level + 1) : 0;
  if (!room_for (r, out->len + pad + (v->t == V_STR ? 6 * (guint64) v->len : 0)))
    return FALSE;
  switch (v->t)
    {
    case V_NONE: g_string_append (out, "null"); return TRUE;
    case V_BOOL: g_string_append (out, v->b ? "true" : "false"); return TRUE;
    case V_INT: g_string_append_printf (out, "%" G_GINT64_FORMAT, v->i); return TRUE;
    case V_FLOAT:
      if (isnan (v->f))
        g_string_append (out, "NaN");
      else if (isinf (v->f))
        g_string_append (out, v->f < 0 ? "-Infinity" : "Infinity");
      else
        append_float (out, v->f);
      return TRUE;
    case V_STR: json_escape (out, v->s, v->len); return TRUE;
    case V_LIST:
    case V_DICT:
      {
        gboolean is_list = v->t == V_LIST;
        guint n = is_list ? v->list->len : v->keys->len;
        g_string_append_c (out, is_list ? '[' : '{');
        if (n == 0)
          {
            g_string_append_c (out, is_list ? ']' : '}');
            return TRUE;
          }
        GPtrArray *keys = NULL;
        if (!is_list)
          {
            keys = g_ptr_array_copy (v->keys, NULL, NULL);
            if (sort_keys)
              g_ptr_array_sort (keys, cmp_keys);
          }
        gboolean ok = TRUE;
        for (guint k = 0; k < n && ok; k++)
          {
            if (k)
              g_string_append (out, item_sep);
            if (indent >= 0)
              {
                g_string_append_c (out, '\n');
                for (guint64 s = 0; s < pad; s++)
                  g_string_append_c (out, ' ');
              }
            const Value *item;
            if (is_list)
              item = v->list->pdata[k];
            else
              {
                const char *key = keys->pdata[k];
                json_escape (out, key, strlen (key));
                g_string_append (out, key_sep);
                item = dict_get ((Value *) v, key);
              }
            ok = json_dump (r, out, item, indent, level + 1, item_sep, key_sep, sort_keys, bad_type);
          }
        if (keys)
          g_ptr_array_unref (keys);
        if (!ok)
          return FALSE;
        if (indent >= 0)
          {
            g_string_append_c (out, '\n');
            for (guint64 s = 0; s < pad - (guint64) indent; s++)
              g_string_append_c (out, ' ');
          }
        g_string_append_c (out, is_list ? ']' : '}');
        return TRUE;
      }
    default:
      *bad_type = type_name (v);
      return FALSE;
    }
}

/* ------------------------------------------------------------ evaluation */

static Value *eval (R *r, Frame *f, const CtNode *n);
static gboolean exec_body (R *r, Frame *f, GPtrArray *body);
static Value *call_value (R *r, Frame *f, const CtNode *at, Value *fn, GPtrArray *args,
                          GPtrArray *kwnames, GPtrArray *kwvals);

/* Keyword/positional argument access for builtins. */
typedef struct {
  GPtrArray *args;     /* Value* */
  GPtrArray *kwnames;  /* char* */
  GPtrArray *kwvals;   /* Value* */
} Args;

static Value *
arg_get (const Args *a, guint pos, const char *name)
{
  if (name && a->kwnames)
    for (guint k = 0; k < a->kwnames->len; k++)
      if (strcmp (a->kwnames->pdata[k], name) == 0)
        return a->kwvals->pdata[k];
  if (pos != G_MAXUINT && a->args && pos < a->args->len)
    return a->args->pdata[pos];
  return NULL;
}

static Value *
iterable_to_list (R *r, const CtNode *at, Value *v)
{
  switch (v->t)
    {
    case V_LIST:
      return v;
    case V_UNDEF:
      return v_list (r);
    case V_DICT:
      {
        Value *l = v_list (r);
        for (guint k = 0; k < v->keys->len; k++)
          list_push (r, l, v_str (r, v->keys->pdata[k]));
        return l;
      }
    case V_STR:
      {
        Value *l = v_list (r);
        for (const char *p = v->s; p < v->s + v->len; p = g_utf8_next_char (p))
          list_push (r, l, v_strn (r, p, g_utf8_next_char (p) - p));
        return l;
      }
    default:
      return rfail (r, at, "'%s' object is not iterable", type_name (v));
    }
}

static Value *
dict_items (R *r, Value *d)
{
  Value *l = v_list (r);
  for (guint k = 0; k < d->keys->len; k++)
    {
      Value *t = v_list (r);
      t->tuple = TRUE;
      list_push (r, t, v_str (r, d->keys->pdata[k]));
      list_push (r, t, dict_get (d, d->keys->pdata[k]));
      list_push (r, l, t);
    }
  return l;
}

static gboolean
is_method_name (const Value *v, const char *name)
{
  static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
    "replace", "title", "capitalize", "format", "join", "find", "rfind", "count", "splitlines",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix",
    "removesuffix", "index", NULL };
  static const char *const dict_methods[] = { "get", "items", "keys", "values", NULL };
  const char *const *m = v->t == V_STR ? str_methods : v->t == V_DICT ? dict_methods : NULL;
  if (v->t == V_DICT && v->loop && strcmp (name, "cycle") == 0)
    return TRUE;
  for (; m && *m; m++)
    if (strcmp (*m, name) == 0)
      return TRUE;
  return FALSE;
}

static Value *
get_attr (R *r, const CtNode *at, Value *obj, const char *name)
{
  if (obj->t == V_UNDEF)
    return undef_fail (r, at, obj);
  if (obj->t == V_DICT)
    {
      /* jinja2 tries getattr first: dict methods win over keys of the same name */
      if (!obj->ns && is_method_name (obj, name))
        {
          Value *m = v_func (r, F_METHOD, name);
          m->self = obj;
          return m;
        }
      Value *v = dict_get (obj, name);
      if (v)
        return v;
    }
  else if (is_method_name (obj, name))
    {
      Value *m = v_func (r, F_METHOD, name);
      m->self = obj;
      return m;
    }
  g_autofree char *hint = g_strdup_printf ("'%s object' has no attribute '%s'", type_name (obj), name);
  return v_undef (r, hint);
}

static Value *
get_item (R *r, const CtNode *at, Value *obj, Value *key)
{
  if (obj->t == V_UNDEF)
    return undef_fail (r, at, obj);
  if (obj->t == V_DICT)
    {
      g_autofree char *k = key->t == V_STR ? NULL : to_cstr (r, key);
      Value *v = dict_get (obj, key->t == V_STR ? key->s : k);
      if (v)
        return v;
      g_autofree char *hint = g_strdup_printf ("'%s object' has no attribute '%s'", type_name (obj),
                                               key->t == V_STR ? key->s : k);
      return v_undef (r, hint);
    }
  if ((obj->t == V_LIST || obj->t == V_STR) && (key->t == V_INT || key->t == V_BOOL))
    {
      gint64 i = num_i (key);
      if (obj->t == V_LIST)
        {
          gint64 n = obj->list->len;
          if (i < 0)
            i += n;
          if (i >= 0 && i < n)
            return obj->list->pdata[i];
        }
      else
        {
          /* walk to the character: s[i] in a loop over a long string must not
           * build an offset table per step */
          r->steps += obj->len / 4;
          gint64 n = (gint64) g_utf8_strlen (obj->s, obj->len);
          if (i < 0)
            i += n;
          if (i >= 0 && i < n)
            {
              const char *c = g_utf8_offset_to_pointer (obj->s, i);
              return v_strn (r, c, g_utf8_next_char (c) - c);
            }
        }
      g_autofree char *hint = g_strdup_printf ("%s index %" G_GINT64_FORMAT " out of range", type_name (obj), num_i (key));
      return v_undef (r, hint);
    }
  if (key->t == V_STR)
    return get_attr (r, at, obj, key->s);
  g_autofree char *hint = g_strdup_printf ("'%s object' has no item", type_name (obj));
  return v_undef (r, hint);
}

static Value *
slice_value (R *r, const CtNode *at, Value *obj, Value *vs, Value *ve, Value *vst)
{
  if (obj->t == V_UNDEF)
    return undef_fail (r, at, obj);
  if (obj->t != V_LIST && obj->t != V_STR)
    return rfail (r, at, "'%s' object cannot be sliced", type_name (obj));
  g_autoptr (GArray) off = obj->t == V_STR ? char_offsets (r, obj) : NULL;
  gint64 n = obj->t == V_LIST ? (gint64) obj->list->len : (gint64) off->len - 1;
  gint64 step = vst && vst->t != V_NONE ? num_i (vst) : 1;
  if (step == 0)
    return rfail (r, at, "slice step cannot be zero");
  gint64 start, stop;
  /* Python's slice.indices() */
  if (!vs || vs->t == V_NONE)
    start = step < 0 ? n - 1 : 0;
  else
    {
      start = num_i (vs);
      if (start < 0)
        start = MAX (start + n, step < 0 ? -1 : 0);
      else if (start >= n)
        start = step < 0 ? n - 1 : n;
    }
  if (!ve || ve->t == V_NONE)
    stop = step < 0 ? -1 : n;
  else
    {
      stop = num_i (ve);
      if (stop < 0)
        stop = MAX (stop + n, step < 0 ? -1 : 0);
      else if (stop >= n)
        stop = step < 0 ? n - 1 : n;
    }
  /* start and stop lie in [-1, n] now; count the items in 128 bits, since
   * `i += step` could overflow for a step near the int64 limits */
  __int128 span = step > 0 ? (__int128) stop - start : (__int128) start - stop;
  __int128 astep = step > 0 ? (__int128) step : -(__int128) step;
  gint64 count = span > 0 ? (gint64) ((span + astep - 1) / astep) : 0;
  if (obj->t == V_LIST)
    {
      Value *l = v_list (r);
      l->tuple = obj->tuple;
      for (gint64 k = 0; k < count; k++)
        list_push (r, l, obj->list->pdata[start + k * step]);
      return l;
    }
  GString *s = g_string_new (NULL);
  for (gint64 k = 0; k < count; k++)
    {
      gint64 i = start + k * step;
      gsize b = g_array_index (off, gsize, i), e = g_array_index (off, gsize, i + 1);
      g_string_append_len (s, obj->s + b, e - b);
    }
  return v_str_take (r, s);
}

static int
compare_values_at (R *r, const CtNode *at, const Value *a, const Value *b, gboolean *ok, int depth)
{
  *ok = TRUE;
  if (!budget_ok (r, 1) || depth > CT_MAX_VALUE_DEPTH)
    {
      if (depth > CT_MAX_VALUE_DEPTH)
        rfail (r, at, "a value nests deeper than %d levels (or contains itself)", CT_MAX_VALUE_DEPTH);
      *ok = FALSE;
      return 0;
    }
  if (is_num (a) && is_num (b))
    {
      double x = num_f (a), y = num_f (b);
      if (a->t != V_FLOAT && b->t != V_FLOAT)
        return num_i (a) < num_i (b) ? -1 : num_i (a) > num_i (b);
      return x < y ? -1 : x > y;
    }
  if (a->t == V_STR && b->t == V_STR)
    {
      budget_ok (r, MIN (a->len, b->len) / 16);
      int c = memcmp (a->s, b->s, MIN (a->len, b->len));
      if (c == 0)
        return a->len < b->len ? -1 : a->len > b->len;
      return c < 0 ? -1 : 1;
    }
  if (a->t == V_LIST && b->t == V_LIST)
    {
      for (guint k = 0; k < MIN (a->list->len, b->list->len); k++)
        {
          int c = compare_values_at (r, at, a->list->pdata[k], b->list->pdata[k], ok, depth + 1);
          if (!*ok || c)
            return c;
        }
      return a->list->len < b->list->len ? -1 : a->list->len > b->list->len;
    }
  *ok = FALSE;
  if (a->t == V_UNDEF)
    undef_fail (r, at, a);
  else if (b->t == V_UNDEF)
    undef_fail (r, at, b);
  else
    rfail (r, at, "'<' not supported between instances of '%s' and '%s'", type_name (a), type_name (b));
  return 0;
}

static int
compare_values (R *r, const CtNode *at, const Value *a, const Value *b, gboolean *ok)
{
  return compare_values_at (r, at, a, b, ok, 0);
}

static Value *
contains (R *r, const CtNode *at, Value *needle, Value *hay)
{
  switch (hay->t)
    {
    case V_STR:
      if (needle->t != V_STR)
        return rfail (r, at, "'in <string>' requires string as left operand, not %s", type_name (needle));
      if (!budget_ok (r, hay->len / 16))
        return NULL;
      return v_bool (r, needle->len == 0 || (needle->len <= hay->len &&
                                             g_strstr_len (hay->s, hay->len, needle->s) != NULL));
    case V_LIST:
      for (guint k = 0; k < hay->list->len && !r->error; k++)
        if (values_equal (r, needle, hay->list->pdata[k]))
          return v_bool (r, TRUE);
      return v_bool (r, FALSE);
    case V_DICT:
      if (needle->t != V_STR)
        return v_bool (r, FALSE);
      return v_bool (r, dict_get (hay, needle->s) != NULL);
    case V_UNDEF:
      return v_bool (r, FALSE);
    default:
      return rfail (r, at, "argument of type '%s' is not iterable", type_name (hay));
    }
}

static Value *
int_overflow (R *r, const CtNode *at, const char *op)
{
  return rfail (r, at, "integer overflow in '%s' (the result does not fit in 64 bits)", op);
}

static Value *
binary_op (R *r, const CtNode *at, int op, Value *a, Value *b)
{
  if (op == CT_OP_CONCAT)
    {
      GString *s = g_string_new (NULL);
      append_str (r, s, a);
      append_str (r, s, b);
      return v_str_take (r, s);
    }
  if (a->t == V_UNDEF)
    return undef_fail (r, at, a);
  if (b->t == V_UNDEF)
    return undef_fail (r, at, b);
  static const char *const names[] = { "", "+", "-", "*", "/", "//", "%", "**" };
  if (is_num (a) && is_num (b))
    {
      gboolean ints = a->t != V_FLOAT && b->t != V_FLOAT;
      gint64 x = num_i (a), y = num_i (b);
      double fx = num_f (a), fy = num_f (b);
      gint64 z;
      /* Python's ints do not overflow; ours are 64-bit, so a result out of
       * range is an error rather than undefined behaviour or a wrong number. */
      switch (op)
        {
        case CT_OP_ADD:
          if (!ints)
            return v_float (r, fx + fy);
          return __builtin_add_overflow (x, y, &z) ? int_overflow (r, at, "+") : v_int (r, z);
        case CT_OP_SUB:
          if (!ints)
            return v_float (r, fx - fy);
          return __builtin_sub_overflow (x, y, &z) ? int_overflow (r, at, "-") : v_int (r, z);
        case CT_OP_MUL:
          if (!ints)
            return v_float (r, fx * fy);
          return __builtin_mul_overflow (x, y, &z) ? int_overflow (r, at, "*") : v_int (r, z);
        case CT_OP_DIV:
          if (fy == 0)
            return rfail (r, at, "division by zero");
          return v_float (r, fx / fy);
        case CT_OP_FLOORDIV:
          if (fy == 0)
            return rfail (r, at, "integer division or modulo by zero");
          if (ints)
            {
              if (x == G_MININT64 && y == -1)
                return int_overflow (r, at, "//");
              gint64 q = x / y;
              if ((x % y != 0) && ((x < 0) != (y < 0)))
                q--;
              return v_int (r, q);
            }
          return v_float (r, floor (fx / fy));
        case CT_OP_MOD:
          if (fy == 0)
            return rfail (r, at, "integer division or modulo by zero");
          if (ints)
            {
              gint64 m = y == -1 ? 0 : x % y; /* INT64_MIN % -1 traps in C */
              if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
              return v_int (r, m);
            }
          {
            double m = fmod (fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
              m += fy;
            return v_float (r, m);
          }
        case CT_OP_POW:
          if (ints && y >= 0)
            {
              /* by squaring: 64 multiplications at most, each checked */
              gint64 p = 1, base = x;
              for (gint64 e = y; e > 0; e >>= 1)
                {
                  if ((e & 1) && __builtin_mul_overflow (p, base, &p))
                    return int_overflow (r, at, "**");
                  /* base*base overflowing with bits left means the result does too */
                  if (e > 1 && __builtin_mul_overflow (base, base, &base))
                    return int_overflow (r, at, "**");
                }
              return v_int (r, p);
            }
          return v_float (r, pow (fx, fy));
        }
    }
  if (op == CT_OP_ADD && a->t == V_STR && b->t == V_STR)
    {
      if (!room_for (r, (guint64) a->len + b->len))
        return NULL;
      GString *s = g_string_sized_new (a->len + b->len);
      g_string_append_len (s, a->s, a->len);
      g_string_append_len (s, b->s, b->len);
      return v_str_take (r, s);
    }
  if (op == CT_OP_ADD && a->t == V_LIST && b->t == V_LIST)
    {
      if (!room_for (r, ((guint64) a->list->len + b->list->len) * 2 * sizeof (gpointer)))
        return NULL;
      Value *l = v_list (r);
      l->tuple = a->tuple;
      for (guint k = 0; k < a->list->len; k++)
        list_push (r, l, a->list->pdata[k]);
      for (guint k = 0; k < b->list->len; k++)
        list_push (r, l, b->list->pdata[k]);
      return l;
    }
  if (op == CT_OP_MUL && (a->t == V_STR || a->t == V_LIST) && (b->t == V_INT || b->t == V_BOOL))
    {
      gint64 n = num_i (b);
      guint64 unit = a->t == V_STR ? a->len : (guint64) a->list->len * 2 * sizeof (gpointer);
      if (n > 0 && unit > 0 && (guint64) n > (HN_CHAT_TEMPLATE_MAX_MEMORY + unit - 1) / unit)
        return limit_fail (r, "memory", HN_CHAT_TEMPLATE_MAX_MEMORY >> 20, " MiB");
      if (n > 0 && !room_for (r, unit * (guint64) n))
        return NULL;
      if (a->t == V_STR)
        {
          GString *s = g_string_new (NULL);
          for (gint64 k = 0; k < n; k++)
            g_string_append_len (s, a->s, a->len);
          return v_str_take (r, s);
        }
      Value *l = v_list (r);
      for (gint64 k = 0; k < n; k++)
        for (guint j = 0; j < a->list->len; j++)
          list_push (r, l, a->list->pdata[j]);
      return l;
    }
  if (op == CT_OP_MUL && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL))
    return binary_op (r, at, op, b, a);
  return rfail (r, at, "unsupported operand type(s) for %s: '%s' and '%s'",
                names[op <= CT_OP_POW ? op : 0], type_name (a), type_name (b));
}

/* ----------------------------------------------------------------- tests */

static gboolean
apply_test (R *r, const CtNode *at, const char *name, Value *v, const Args *a, gboolean *result)
{
  Value *arg = arg_get (a, 0, NULL);
  gboolean ok = TRUE;
#define IS(n) (strcmp (name, n) == 0)
  if (IS ("defined"))
    *result = v->t != V_UNDEF;
  else if (IS ("undefined"))
    *result = v->t == V_UNDEF;
  else if (IS ("none"))
    *result = v->t == V_NONE;
  else if (IS ("boolean"))
    *result = v->t == V_BOOL;
  else if (IS ("true"))
    *result = v->t == V_BOOL && v->b;
  else if (IS ("false"))
    *result = v->t == V_BOOL && !v->b;
  else if (IS ("integer"))
    *result = v->t == V_INT;
  else if (IS ("float"))
    *result = v->t == V_FLOAT;
  else if (IS ("number"))
    *result = is_num (v);
  else if (IS ("string"))
    *result = v->t == V_STR;
  else if (IS ("mapping"))
    *result = v->t == V_DICT;
  else if (IS ("iterable"))
    *result = v->t == V_LIST || v->t == V_DICT || v->t == V_STR || v->t == V_UNDEF;
  else if (IS ("sequence"))
    *result = v->t == V_LIST || v->t == V_DICT || v->t == V_STR || v->t == V_UNDEF;
  else if (IS ("callable"))
    *result = v->t == V_FUNC;
  else if (IS ("lower") || IS ("upper"))
    {
      gboolean up = IS ("upper"), any = FALSE;
      *result = v->t == V_STR;
      for (const char *p = v->s; *result && p && p < v->s + v->len; p = g_utf8_next_char (p))
        {
          gunichar c = g_utf8_get_char (p);
          if (g_unichar_isalpha (c))
            {
              any = TRUE;
              if (up ? g_unichar_islower (c) : g_unichar_isupper (c))
                *result = FALSE;
            }
        }
      *result = *result && any;
    }
  else if (IS ("even") || IS ("odd"))
    {
      if (!is_num (v))
        return rfail (r, at, "test '%s' needs a number, got %s", name, type_name (v)) != NULL;
      *result = (num_i (v) % 2 == 0) == IS ("even");
    }
  else if (IS ("divisibleby"))
    {
      if (!is_num (v) || !arg || !is_num (arg) || num_i (arg) == 0)
        return rfail (r, at, "test 'divisibleby' needs two numbers") != NULL;
      *result = num_i (v) % num_i (arg) == 0;
    }
  else if (IS ("sameas"))
    *result = arg && (arg == v || (arg->t == v->t && (v->t == V_NONE || (v->t == V_BOOL && v->b == arg->b))));
  else if (IS ("eq") || IS ("equalto") || IS ("=="))
    *result = arg && values_equal (r, v, arg);
  else if (IS ("ne") || IS ("!="))
    *result = !(arg && values_equal (r, v, arg));
  else if (IS ("lt") || IS ("lessthan") || IS ("<") || IS ("le") || IS ("<=") || IS ("gt") ||
           IS ("greaterthan") || IS (">") || IS ("ge") || IS (">="))
    {
      if (!arg)
        return rfail (r, at, "test '%s' needs an argument", name) != NULL;
      int c = compare_values (r, at, v, arg, &ok);
      if (!ok)
        return FALSE;
      if (IS ("lt") || IS ("lessthan") || IS ("<")) *result = c < 0;
      else if (IS ("le") || IS ("<=")) *result = c <= 0;
      else if (IS ("gt") || IS ("greaterthan") || IS (">")) *result = c > 0;
      else *result = c >= 0;
    }
  else if (IS ("in"))
    {
      if (!arg)
        return rfail (r, at, "test 'in' needs an argument") != NULL;
      Value *c = contains (r, at, v, arg);
      if (!c)
        return FALSE;
      *result = c->b;
    }
  else if (IS ("escaped"))
    *result = FALSE;
  else
    return rfail (r, at, "no test named '%s'", name) != NULL;
#undef IS
  return TRUE;
}

/* --------------------------------------------------------------- filters */

static Value *apply_filter (R *r, Frame *f, const CtNode *at, const char *name, Value *v, const Args *a);

static Value *
attr_path (R *r, const CtNode *at, Value *v, const char *path)
{
  /* attribute="a.b" or "0" as jinja2's make_attrgetter */
  g_auto (GStrv) parts = g_strsplit (path, ".", -1);
  for (int k = 0; parts[k] && v; k++)
    {
      char *end;
      gint64 idx = g_ascii_strtoll (parts[k], &end, 10);
      if (*parts[k] && *end == '\0' && v->t == V_LIST)
        v = get_item (r, at, v, v_int (r, idx));
      else if (v->t == V_UNDEF)
        return v;
      else
        v = get_item (r, at, v, v_str (r, parts[k]));
    }
  return v;
}

static Value *
select_items (R *r, Frame *f, const CtNode *at, Value *seq, const Args *a, gboolean by_attr, gboolean keep)
{
  Value *l = iterable_to_list (r, at, seq);
  if (!l)
    return NULL;
  Value *out = v_list (r);
  guint first_test_arg = by_attr ? 1 : 0;
  Value *attr = by_attr ? arg_get (a, 0, NULL) : NULL;
  if (by_attr && (!attr || attr->t != V_STR))
    return rfail (r, at, "selectattr/rejectattr need an attribute name");
  Value *test = arg_get (a, first_test_arg, NULL);
  if (test && test->t != V_STR)
    return rfail (r, at, "the test name must be a string");
  Args targs = { g_ptr_array_new (), NULL, NULL };
  for (guint k = first_test_arg + 1; a->args && k < a->args->len; k++)
    g_ptr_array_add (targs.args, a->args->pdata[k]);
  for (guint k = 0; k < l->list->len; k++)
    {
      Value *item = l->list->pdata[k];
      Value *subject = by_attr ? attr_path (r, at, item, attr->s) : item;
      gboolean res;
      if (!subject)
        {
          g_ptr_array_unref (targs.args);
          return NULL;
        }
      if (test)
        {
          if (!apply_test (r, at, test->s, subject, &targs, &res))
            {
              g_ptr_array_unref (targs.args);
              return NULL;
            }
        }
      else
        res = truthy (subject);
      if (res == keep)
        list_push (r, out, item);
    }
  g_ptr_array_unref (targs.args);
  return out;
}

static gint
sort_cmp (gconstpointer pa, gconstpointer pb, gpointer data)
{
  const Value *a = *(const Value *const *) pa, *b = *(const Value *const *) pb;
  gboolean ok;
  R *r = data;
  if (r->error)
    return 0;
  if (a->t == V_STR && b->t == V_STR)
    {
      /* case-insensitive by default, as jinja2's sort */
      if (!budget_ok (r, (a->len + b->len) / 16 + 1))
        return 0;
      g_autofree char *x = g_utf8_casefold (a->s, a->len), *y = g_utf8_casefold (b->s, b->len);
      return strcmp (x, y);
    }
  return compare_values (r, NULL, a, b, &ok);
}

static Value *
do_indent (R *r, Value *s, Value *width, gboolean first, gboolean blank)
{
  gint64 nsp = width && width->t != V_STR ? num_i (width) : 4;
  if (!room_for (r, width && width->t == V_STR ? width->len : (guint64) MAX (nsp, 0)))
    return NULL;
  GString *ind = g_string_new (NULL);
  if (width && width->t == V_STR)
    g_string_append_len (ind, width->s, width->len);
  else
    for (gint64 k = 0; k < nsp; k++)
      g_string_append_c (ind, ' ');
  g_autofree char *text = g_strdup_printf ("%s\n", s->s);
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  guint n = g_strv_length (lines);
  if (n > 0)
    n--; /* splitlines() drops the empty piece after the final newline */
  GString *out = g_string_new (NULL);
  for (guint k = 0; k < n; k++)
    {
      if (k > 0)
        g_string_append_c (out, '\n');
      if (!room_for (r, out->len + ind->len))
        break;
      if ((k > 0 || first) && (blank || lines[k][0]))
        g_string_append_len (out, ind->str, ind->len);
      g_string_append (out, lines[k]);
    }
  g_string_free (ind, TRUE);
  return v_str_take (r, out);
}

static Value *
apply_filter (R *r, Frame *f, const CtNode *at, const char *name, Value *v, const Args *a)
{
#define IS(n) (strcmp (name, n) == 0)
  Value *a0 = arg_get (a, 0, NULL);
  if (IS ("safe") || IS ("escape") || IS ("e") || IS ("forceescape"))
    {
      if (IS ("safe"))
        return v;
      Value *s = v_tostr (r, v);
      GString *o = g_string_new (NULL);
      for (gsize k = 0; k < s->len; k++)
        switch (s->s[k])
          {
          case '&': g_string_append (o, "&amp;"); break;
          case '<': g_string_append (o, "&lt;"); break;
          case '>': g_string_append (o, "&gt;"); break;
          case '"': g_string_append (o, "&#34;"); break;
          case '\'': g_string_append (o, "&#39;"); break;
          default: g_string_append_c (o, s->s[k]);
          }
      return v_str_take (r, o);
    }
  if (IS ("default") || IS ("d"))
    {
      Value *def = arg_get (a, 0, "default_value");
      Value *boolean = arg_get (a, 1, "boolean");
      if (v->t == V_UNDEF || (boolean && truthy (boolean) && !truthy (v)))
        return def ? def : v_str (r, "");
      return v;
    }
  if (IS ("tojson"))
    {
      Value *ind = arg_get (a, 0, "indent");
      Value *seps = arg_get (a, G_MAXUINT, "separators");
      Value *sk = arg_get (a, G_MAXUINT, "sort_keys");
      gint64 indent = ind && ind->t != V_NONE ? num_i (ind) : -1;
      const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
      if (seps && seps->t == V_LIST && seps->list->len == 2 &&
          ((Value *) seps->list->pdata[0])->t == V_STR && ((Value *) seps->list->pdata[1])->t == V_STR)
        {
          item_sep = ((Value *) seps->list->pdata[0])->s;
          key_sep = ((Value *) seps->list->pdata[1])->s;
        }
      GString *o = g_string_new (NULL);
      const char *bad = NULL;
      if (!json_dump (r, o, v, indent, 0, item_sep, key_sep, sk && truthy (sk), &bad))
        {
          g_string_free (o, TRUE);
          if (!bad)
            return NULL;
          return rfail (r, at, "Object of type %s is not JSON serializable", bad);
        }
      return v_str_take (r, o);
    }
  if (v->t == V_UNDEF && !IS ("length") && !IS ("count") && !IS ("string") && !IS ("list") && !IS ("join"))
    return undef_fail (r, at, v);
  if (IS ("trim") || IS ("strip"))
    {
      if (v->t != V_STR)
        v = v_tostr (r, v);
      return str_strip (r, v, a0 && a0->t == V_STR ? a0 : NULL, TRUE, TRUE);
    }
  if (IS ("length") || IS ("count"))
    {
      switch (v->t)
        {
        case V_UNDEF: return v_int (r, 0);
        case V_STR: return v_int (r, str_nchars (v));
        case V_LIST: return v_int (r, v->list->len);
        case V_DICT: return v_int (r, v->keys->len);
        default: return rfail (r, at, "object of type '%s' has no len()", type_name (v));
        }
    }
  if (IS ("string"))
    return v_tostr (r, v);
  if (IS ("upper"))
    return str_case (r, v_tostr (r, v), 'u');
  if (IS ("lower"))
    return str_case (r, v_tostr (r, v), 'l');
  if (IS ("capitalize"))
    return str_case (r, v_tostr (r, v), 'c');
  if (IS ("title"))
    return str_case (r, v_tostr (r, v), 'j');
  if (IS ("replace"))
    {
      Value *old = arg_get (a, 0, "old"), *rep = arg_get (a, 1, "new"), *cnt = arg_get (a, 2, "count");
      if (!old || !rep)
        return rfail (r, at, "replace needs two arguments");
      return str_replace (r, v_tostr (r, v), v_tostr (r, old), v_tostr (r, rep), cnt && cnt->t != V_NONE ? num_i (cnt) : -1);
    }
  if (IS ("list"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l || l != v)
        return l;
      Value *c = v_list (r);
      for (guint k = 0; k < v->list->len; k++)
        list_push (r, c, v->list->pdata[k]);
      return c;
    }
  if (IS ("first") || IS ("last"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      if (l->list->len == 0)
        return v_undef (r, "no first item, sequence was empty");
      return l->list->pdata[IS ("first") ? 0 : l->list->len - 1];
    }
  if (IS ("join"))
    {
      Value *sep = arg_get (a, 0, "d");
      Value *attr = arg_get (a, 1, "attribute");
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      GString *o = g_string_new (NULL);
      for (guint k = 0; k < l->list->len; k++)
        {
          if (k && sep)
            append_str (r, o, sep);
          Value *item = l->list->pdata[k];
          if (attr)
            item = attr_path (r, at, item, v_tostr (r, attr)->s);
          if (!item)
            {
              g_string_free (o, TRUE);
              return NULL;
            }
          append_str (r, o, item);
        }
      return v_str_take (r, o);
    }
  if (IS ("items") || IS ("dictsort"))
    {
      if (v->t != V_DICT)
        return rfail (r, at, "filter '%s' needs a mapping, got %s", name, type_name (v));
      Value *l = dict_items (r, v);
      if (IS ("dictsort"))
        g_ptr_array_sort_with_data (l->list, sort_cmp, r);
      return l;
    }
  if (IS ("map"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      Value *attr = arg_get (a, G_MAXUINT, "attribute");
      Value *def = arg_get (a, G_MAXUINT, "default");
      Value *out = v_list (r);
      Args fargs = { g_ptr_array_new (), NULL, NULL };
      for (guint k = 1; a->args && k < a->args->len; k++)
        g_ptr_array_add (fargs.args, a->args->pdata[k]);
      for (guint k = 0; k < l->list->len; k++)
        {
          Value *item = l->list->pdata[k], *res;
          if (attr)
            {
              res = attr_path (r, at, item, v_tostr (r, attr)->s);
              if (res && res->t == V_UNDEF && def)
                res = def;
            }
          else if (a0 && a0->t == V_STR)
            res = apply_filter (r, f, at, a0->s, item, &fargs);
          else
            res = rfail (r, at, "map needs a filter name or attribute=");
          if (!res)
            {
              g_ptr_array_unref (fargs.args);
              return NULL;
            }
          list_push (r, out, res);
        }
      g_ptr_array_unref (fargs.args);
      return out;
    }
  if (IS ("selectattr") || IS ("rejectattr"))
    return select_items (r, f, at, v, a, TRUE, IS ("selectattr"));
  if (IS ("select") || IS ("reject"))
    return select_items (r, f, at, v, a, FALSE, IS ("select"));
  if (IS ("unique"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      Value *out = v_list (r);
      for (guint k = 0; k < l->list->len; k++)
        {
          gboolean seen = FALSE;
          for (guint j = 0; j < out->list->len && !seen && !r->error; j++)
            seen = values_equal (r, out->list->pdata[j], l->list->pdata[k]);
          if (!seen)
            list_push (r, out, l->list->pdata[k]);
        }
      return out;
    }
  if (IS ("sort") || IS ("reverse"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      if (IS ("reverse") && v->t == V_STR)
        {
          g_autofree char *rev = g_utf8_strreverse (v->s, v->len);
          return v_str (r, rev);
        }
      Value *out = v_list (r);
      for (guint k = 0; k < l->list->len; k++)
        list_push (r, out, l->list->pdata[k]);
      gboolean reverse = IS ("reverse");
      if (IS ("sort"))
        {
          Value *rv = arg_get (a, 0, "reverse"), *attr = arg_get (a, 2, "attribute");
          if (attr)
            {
              /* sort by attribute: decorate, sort pairs, undecorate */
              Value *pairs = v_list (r);
              for (guint k = 0; k < out->list->len; k++)
                {
                  Value *p = v_list (r);
                  Value *key = attr_path (r, at, out->list->pdata[k], v_tostr (r, attr)->s);
                  if (!key)
                    return NULL;
                  list_push (r, p, key);
                  list_push (r, p, v_int (r, k));
                  list_push (r, p, out->list->pdata[k]);
                  list_push (r, pairs, p);
                }
              g_ptr_array_sort_with_data (pairs->list, sort_cmp, r);
              for (guint k = 0; k < out->list->len; k++)
                out->list->pdata[k] = ((Value *) pairs->list->pdata[k])->list->pdata[2];
            }
          else
            g_ptr_array_sort_with_data (out->list, sort_cmp, r);
          if (r->error)
            return NULL;
          reverse = rv && truthy (rv);
        }
      if (reverse)
        for (guint k = 0; k < out->list->len / 2; k++)
          {
            gpointer t = out->list->pdata[k];
            out->list->pdata[k] = out->list->pdata[out->list->len - 1 - k];
            out->list->pdata[out->list->len - 1 - k] = t;
          }
      return out;
    }
  if (IS ("int"))
    {
      Value *def = arg_get (a, 0, "default");
      if (v->t == V_INT)
        return v;
      if (v->t == V_BOOL || v->t == V_FLOAT)
        return v_int (r, num_i (v));
      if (v->t == V_STR)
        {
          g_autofree char *s = g_strstrip (g_strndup (v->s, v->len));
          char *end;
          gint64 i = g_ascii_strtoll (s, &end, 10);
          if (*s && *end == '\0')
            return v_int (r, i);
          double d = g_ascii_strtod (s, &end);
          if (*s && *end == '\0')
            return v_int (r, (gint64) d);
        }
      return def ? def : v_int (r, 0);
    }
  if (IS ("float"))
    {
      Value *def = arg_get (a, 0, "default");
      if (is_num (v))
        return v_float (r, num_f (v));
      if (v->t == V_STR)
        {
          g_autofree char *s = g_strstrip (g_strndup (v->s, v->len));
          char *end;
          double d = g_ascii_strtod (s, &end);
          if (*s && *end == '\0')
            return v_float (r, d);
        }
      return def ? def : v_float (r, 0.0);
    }
  if (IS ("abs"))
    {
      if (!is_num (v))
        return rfail (r, at, "bad operand type for abs(): '%s'", type_name (v));
      return v->t == V_FLOAT ? v_float (r, fabs (v->f)) : v_int (r, ABS (num_i (v)));
    }
  if (IS ("round"))
    {
      Value *prec = arg_get (a, 0, "precision"), *method = arg_get (a, 1, "method");
      if (!is_num (v))
        return rfail (r, at, "round needs a number, got %s", type_name (v));
      double scale = pow (10.0, prec ? (double) num_i (prec) : 0.0), x = num_f (v) * scale;
      const char *m = method && method->t == V_STR ? method->s : "common";
      double rx = strcmp (m, "floor") == 0 ? floor (x) : strcmp (m, "ceil") == 0 ? ceil (x) : nearbyint (x);
      return v_float (r, rx / scale);
    }
  if (IS ("indent"))
    {
      Value *first = arg_get (a, 1, "first"), *blank = arg_get (a, 2, "blank");
      return do_indent (r, v_tostr (r, v), arg_get (a, 0, "width"), first && truthy (first), blank && truthy (blank));
    }
  if (IS ("min") || IS ("max") || IS ("sum"))
    {
      Value *l = iterable_to_list (r, at, v);
      if (!l)
        return NULL;
      Value *attr = arg_get (a, G_MAXUINT, "attribute");
      if (IS ("sum"))
        {
          Value *acc = arg_get (a, G_MAXUINT, "start");
          acc = acc ? acc : v_int (r, 0);
          for (guint k = 0; k < l->list->len && acc; k++)
            {
              Value *item = l->list->pdata[k];
              if (attr)
                item = attr_path (r, at, item, v_tostr (r, attr)->s);
              acc = item ? binary_op (r, at, CT_OP_ADD, acc, item) : NULL;
            }
          return acc;
        }
      if (l->list->len == 0)
        return v_undef (r, "empty sequence");
      Value *best = l->list->pdata[0];
      for (guint k = 1; k < l->list->len; k++)
        {
          gboolean ok;
          int c = compare_values (r, at, l->list->pdata[k], best, &ok);
          if (!ok)
            return NULL;
          if (IS ("min") ? c < 0 : c > 0)
            best = l->list->pdata[k];
        }
      return best;
    }
  if (IS ("attr"))
    return a0 ? get_attr (r, at, v, v_tostr (r, a0)->s) : rfail (r, at, "attr needs a name");
  if (IS ("wordcount"))
    return v_int (r, str_split (r, v_tostr (r, v), NULL, -1)->list->len);
  if (IS ("format"))
    {
      /* printf-style: %s and %d and %% */
      Value *s = v_tostr (r, v);
      GString *o = g_string_new (NULL);
      guint ai = 0;
      for (gsize k = 0; k < s->len; k++)
        {
          if (s->s[k] == '%' && k + 1 < s->len)
            {
              char c = s->s[++k];
              if (c == '%')
                g_string_append_c (o, '%');
              else if ((c == 's' || c == 'd') && a->args && ai < a->args->len)
                append_str (r, o, a->args->pdata[ai++]);
              else
                {
                  g_string_free (o, TRUE);
                  return rfail (r, at, "format: unsupported or missing argument for '%%%c'", c);
                }
            }
          else
            g_string_append_c (o, s->s[k]);
        }
      return v_str_take (r, o);
    }
#undef IS
  return rfail (r, at, "no filter named '%s'", name);
}

/* ---------------------------------------------------------- method calls */

static Value *
str_format (R *r, const CtNode *at, Value *s, const Args *a)
{
  GString *o = g_string_new (NULL);
  guint auto_idx = 0;
  for (gsize k = 0; k < s->len; k++)
    {
      char c = s->s[k];
      if (c == '{' && k + 1 < s->len && s->s[k + 1] == '{')
        {
          g_string_append_c (o, '{');
          k++;
        }
      else if (c == '}' && k + 1 < s->len && s->s[k + 1] == '}')
        {
          g_string_append_c (o, '}');
          k++;
        }
      else if (c == '{')
        {
          const char *close = memchr (s->s + k, '}', s->len - k);
          if (!close)
            {
              g_string_free (o, TRUE);
              return rfail (r, at, "format: single '{' encountered in format string");
            }
          g_autofree char *field = g_strndup (s->s + k + 1, close - (s->s + k + 1));
          Value *v;
          if (!*field)
            v = arg_get (a, auto_idx++, NULL);
          else if (g_ascii_isdigit (field[0]))
            v = arg_get (a, atoi (field), NULL);
          else
            v = arg_get (a, G_MAXUINT, field);
          if (!v)
            {
              g_string_free (o, TRUE);
              return rfail (r, at, "format: no argument for field '{%s}'", field);
            }
          append_str (r, o, v);
          k = close - s->s;
        }
      else
        g_string_append_c (o, c);
    }
  return v_str_take (r, o);
}

static Value *
call_method (R *r, const CtNode *at, Value *self, const char *m, const Args *a)
{
  Value *a0 = arg_get (a, 0, NULL), *a1 = arg_get (a, 1, NULL);
#define IS(n) (strcmp (m, n) == 0)
  if (self->t == V_DICT)
    {
      if (IS ("cycle"))
        {
          Value *idx = dict_get (self, "index0");
          if (!a->args || a->args->len == 0)
            return rfail (r, at, "loop.cycle needs at least one argument");
          return a->args->pdata[num_i (idx) % a->args->len];
        }
      if (IS ("get"))
        {
          if (!a0)
            return rfail (r, at, "get needs a key");
          g_autofree char *k = to_cstr (r, a0);
          Value *v = dict_get (self, k);
          return v ? v : a1 ? a1 : v_none (r);
        }
      if (IS ("items"))
        return dict_items (r, self);
      if (IS ("keys") || IS ("values"))
        {
          Value *l = v_list (r);
          for (guint k = 0; k < self->keys->len; k++)
            list_push (r, l, IS ("keys") ? v_str (r, self->keys->pdata[k]) : dict_get (self, self->keys->pdata[k]));
          return l;
        }
    }
  else if (self->t == V_STR)
    {
      for (guint k = 0; a->args && k < a->args->len; k++)
        {
          Value *x = a->args->pdata[k];
          if (x->t == V_UNDEF)
            return undef_fail (r, at, x);
        }
      if (IS ("strip") || IS ("lstrip") || IS ("rstrip"))
        {
          if (a0 && a0->t != V_STR && a0->t != V_NONE)
            return rfail (r, at, "%s arg must be None or str", m);
          return str_strip (r, self, a0 && a0->t == V_STR ? a0 : NULL, !IS ("rstrip"), !IS ("lstrip"));
        }
      if (IS ("split") || IS ("rsplit"))
        {
          Value *sep = arg_get (a, 0, "sep"), *mx = arg_get (a, 1, "maxsplit");
          if (sep && sep->t == V_NONE)
            sep = NULL;
          if (sep && (sep->t != V_STR || sep->len == 0))
            return rfail (r, at, "split: separator must be a non-empty string");
          gint64 maxsplit = mx ? num_i (mx) : -1;
          if (IS ("rsplit") && maxsplit >= 0)
            {
              /* split from the right by reversing the job */
              Value *all = str_split (r, self, sep, -1);
              if (!sep || (gint64) all->list->len <= maxsplit + 1)
                return sep ? all : str_split (r, self, NULL, -1);
              Value *out = v_list (r);
              guint head = all->list->len - maxsplit;
              GString *first = g_string_new (NULL);
              for (guint k = 0; k < head; k++)
                {
                  if (k)
                    g_string_append_len (first, sep->s, sep->len);
                  Value *piece = all->list->pdata[k];
                  g_string_append_len (first, piece->s, piece->len);
                }
              list_push (r, out, v_str_take (r, first));
              for (guint k = head; k < all->list->len; k++)
                list_push (r, out, all->list->pdata[k]);
              return out;
            }
          return str_split (r, self, sep, maxsplit);
        }
      if (IS ("splitlines"))
        {
          Value *l = str_split (r, self, v_str (r, "\n"), -1);
          if (l->list->len && ((Value *) l->list->pdata[l->list->len - 1])->len == 0)
            g_ptr_array_remove_index (l->list, l->list->len - 1);
          return l;
        }
      if (IS ("startswith") || IS ("endswith"))
        {
          if (!a0)
            return rfail (r, at, "%s needs an argument", m);
          gboolean suffix = IS ("endswith");
          if (a0->t == V_LIST)
            {
              for (guint k = 0; k < a0->list->len; k++)
                {
                  Value *p = a0->list->pdata[k];
                  if (p->t == V_STR && str_has_prefix_v (self, p, suffix))
                    return v_bool (r, TRUE);
                }
              return v_bool (r, FALSE);
            }
          if (a0->t != V_STR)
            return rfail (r, at, "%s first arg must be str or a tuple of str, not %s", m, type_name (a0));
          return v_bool (r, str_has_prefix_v (self, a0, suffix));
        }
      if (IS ("upper"))
        return str_case (r, self, 'u');
      if (IS ("lower"))
        return str_case (r, self, 'l');
      if (IS ("title"))
        return str_case (r, self, 't');
      if (IS ("capitalize"))
        return str_case (r, self, 'c');
      if (IS ("replace"))
        {
          Value *cnt = arg_get (a, 2, "count");
          if (!a0 || !a1 || a0->t != V_STR || a1->t != V_STR)
            return rfail (r, at, "replace needs two strings");
          return str_replace (r, self, a0, a1, cnt ? num_i (cnt) : -1);
        }
      if (IS ("format"))
        return str_format (r, at, self, a);
      if (IS ("join"))
        {
          if (!a0)
            return rfail (r, at, "join needs a list");
          Value *l = iterable_to_list (r, at, a0);
          if (!l)
            return NULL;
          GString *o = g_string_new (NULL);
          for (guint k = 0; k < l->list->len; k++)
            {
              Value *item = l->list->pdata[k];
              if (item->t != V_STR)
                {
                  g_string_free (o, TRUE);
                  return rfail (r, at, "sequence item %u: expected str instance, %s found", k, type_name (item));
                }
              if (!room_for (r, o->len + self->len + item->len))
                {
                  g_string_free (o, TRUE);
                  return NULL;
                }
              if (k)
                g_string_append_len (o, self->s, self->len);
              g_string_append_len (o, item->s, item->len);
            }
          return v_str_take (r, o);
        }
      if (IS ("find") || IS ("rfind") || IS ("index") || IS ("count"))
        {
          if (!a0 || a0->t != V_STR)
            return rfail (r, at, "%s needs a string", m);
          if (IS ("count"))
            {
              gint64 c = 0;
              if (a0->len == 0)
                return v_int (r, str_nchars (self) + 1);
              for (const char *p = self->s; (p = g_strstr_len (p, self->s + self->len - p, a0->s)); p += a0->len)
                c++;
              return v_int (r, c);
            }
          const char *hit = NULL;
          if (IS ("rfind"))
            hit = g_strrstr_len (self->s, self->len, a0->s);
          else
            hit = g_strstr_len (self->s, self->len, a0->s);
          if (!hit && IS ("index"))
            return rfail (r, at, "substring not found");
          return v_int (r, hit ? (gint64) g_utf8_pointer_to_offset (self->s, hit) : -1);
        }
      if (IS ("removeprefix") || IS ("removesuffix"))
        {
          if (!a0 || a0->t != V_STR)
            return rfail (r, at, "%s needs a string", m);
          gboolean suffix = IS ("removesuffix");
          if (!str_has_prefix_v (self, a0, suffix))
            return self;
          return suffix ? v_strn (r, self->s, self->len - a0->len) : v_strn (r, self->s + a0->len, self->len - a0->len);
        }
      if (IS ("isdigit") || IS ("isalpha") || IS ("isalnum") || IS ("isspace") || IS ("islower") || IS ("isupper"))
        {
          gboolean res = self->len > 0, cased = FALSE;
          for (const char *p = self->s; res && p < self->s + self->len; p = g_utf8_next_char (p))
            {
              gunichar c = g_utf8_get_char (p);
              if (IS ("isdigit")) res = g_unichar_isdigit (c);
              else if (IS ("isalpha")) res = g_unichar_isalpha (c);
              else if (IS ("isalnum")) res = g_unichar_isalnum (c);
              else if (IS ("isspace")) res = g_unichar_isspace (c);
              else if (IS ("islower")) { if (g_unichar_isupper (c)) res = FALSE; if (g_unichar_islower (c)) cased = TRUE; }
              else { if (g_unichar_islower (c)) res = FALSE; if (g_unichar_isupper (c)) cased = TRUE; }
            }
          if (IS ("islower") || IS ("isupper"))
            res = res && cased;
          return v_bool (r, res);
        }
    }
#undef IS
  return rfail (r, at, "'%s' object has no method '%s'", type_name (self), m);
}

/* ---------------------------------------------------------------- calls */

static Value *
call_value (R *r, Frame *f, const CtNode *at, Value *fn, GPtrArray *args, GPtrArray *kwnames, GPtrArray *kwvals)
{
  Args a = { args, kwnames, kwvals };
  if (fn->t == V_UNDEF)
    return undef_fail (r, at, fn);
  if (fn->t != V_FUNC)
    return rfail (r, at, "'%s' object is not callable", type_name (fn));
  switch (fn->fk)
    {
    case F_METHOD:
      return call_method (r, at, fn->self, fn->s, &a);
    case F_RAISE:
      {
        Value *m = arg_get (&a, 0, NULL);
        g_autofree char *msg = m ? to_cstr (r, m) : g_strdup ("");
        if (!r->error)
          g_set_error (&r->error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "chat template raised an error (line %d): %s", at->line, msg);
        return NULL;
      }
    case F_STRFTIME:
      {
        Value *fmt = arg_get (&a, 0, NULL);
        if (!fmt || fmt->t != V_STR)
          return rfail (r, at, "strftime_now needs a format string");
        char buf[256];
        time_t now = time (NULL);
        struct tm tmv;
        localtime_r (&now, &tmv);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        gsize n = strftime (buf, sizeof buf, fmt->s, &tmv);
#pragma GCC diagnostic pop
        return v_strn (r, buf, n);
      }
    case F_RANGE:
      {
        gint64 start = 0, stop, step = 1;
        guint n = args ? args->len : 0;
        for (guint k = 0; k < n; k++)
          if (!is_num (args->pdata[k]) || ((Value *) args->pdata[k])->t == V_FLOAT)
            return rfail (r, at, "range() arguments must be integers");
        if (n == 1)
          stop = num_i (args->pdata[0]);
        else if (n == 2 || n == 3)
          {
            start = num_i (args->pdata[0]);
            stop = num_i (args->pdata[1]);
            if (n == 3)
              step = num_i (args->pdata[2]);
          }
        else
          return rfail (r, at, "range() takes 1 to 3 arguments");
        if (step == 0)
          return rfail (r, at, "range() step must not be zero");
        /* Python's len(range()), in 128 bits so no difference overflows; the
         * cap is jinja2's sandbox MAX_RANGE, which transformers renders under */
        __int128 span = step > 0 ? (__int128) stop - start : (__int128) start - stop;
        __int128 astep = step > 0 ? (__int128) step : -(__int128) step;
        __int128 count = span > 0 ? (span + astep - 1) / astep : 0;
        if (count > HN_CHAT_TEMPLATE_MAX_RANGE)
          return rfail (r, at, "range() of %" G_GINT64_FORMAT " items exceeds the limit of %d (jinja2's sandbox MAX_RANGE)",
                        (gint64) (count > G_MAXINT64 ? G_MAXINT64 : count), HN_CHAT_TEMPLATE_MAX_RANGE);
        Value *l = v_list (r);
        for (gint64 k = 0; k < (gint64) count; k++)
          list_push (r, l, v_int (r, (gint64) ((__int128) start + (__int128) k * step))); /* k * step may pass int64 */
        return l;
      }
    case F_NAMESPACE:
    case F_DICT:
      {
        Value *d = v_dict (r);
        d->ns = fn->fk == F_NAMESPACE;
        for (guint k = 0; args && k < args->len; k++)
          {
            Value *src = args->pdata[k];
            if (src->t != V_DICT)
              return rfail (r, at, "%s() positional arguments must be mappings", fn->s);
            for (guint j = 0; j < src->keys->len; j++)
              dict_set (r, d, src->keys->pdata[j], dict_get (src, src->keys->pdata[j]));
          }
        for (guint k = 0; kwnames && k < kwnames->len; k++)
          dict_set (r, d, kwnames->pdata[k], kwvals->pdata[k]);
        return d;
      }
    case F_MACRO:
      {
        const CtNode *m = fn->macro;
        if (r->depth > 64)
          return rfail (r, at, "macro recursion too deep");
        Frame *mf = frame_push (r, r->root);
        for (guint k = 0; k < m->targets->len; k++)
          {
            const char *pname = m->targets->pdata[k];
            Value *v = arg_get (&a, k, pname);
            if (!v)
              {
                CtNode *def = m->args->pdata[k];
                v = def ? eval (r, mf, def) : v_undef (r, pname);
                if (!v)
                  return NULL;
              }
            frame_set (mf, pname, v);
          }
        if (args && args->len > m->targets->len)
          return rfail (r, at, "macro '%s' takes at most %u arguments", m->str, m->targets->len);
        GString *saved = r->out;
        r->out = g_string_new (NULL);
        r->depth++;
        gboolean ok = exec_body (r, mf, m->body);
        r->depth--;
        GString *res = r->out;
        r->out = saved;
        if (!ok)
          {
            g_string_free (res, TRUE);
            return NULL;
          }
        return v_str_take (r, res);
      }
    default:
      break;
    }
  return rfail (r, at, "cannot call this object");
}

static gboolean
eval_args (R *r, Frame *f, const CtNode *n, GPtrArray **args, GPtrArray **kwvals)
{
  *args = g_ptr_array_new ();
  *kwvals = g_ptr_array_new ();
  for (guint k = 0; n->args && k < n->args->len; k++)
    {
      Value *v = eval (r, f, n->args->pdata[k]);
      if (!v)
        return FALSE;
      g_ptr_array_add (*args, v);
    }
  for (guint k = 0; n->kwargs && k < n->kwargs->len; k++)
    {
      Value *v = eval (r, f, n->kwargs->pdata[k]);
      if (!v)
        return FALSE;
      g_ptr_array_add (*kwvals, v);
    }
  return TRUE;
}

static Value *
lookup_name (R *r, Frame *f, const char *name)
{
  Value *v = frame_lookup (f, name);
  if (v)
    return v;
  static const struct { const char *name; FuncKind fk; } builtins[] = {
    { "range", F_RANGE }, { "namespace", F_NAMESPACE }, { "dict", F_DICT },
    { "raise_exception", F_RAISE }, { "strftime_now", F_STRFTIME },
  };
  for (guint k = 0; k < G_N_ELEMENTS (builtins); k++)
    if (strcmp (builtins[k].name, name) == 0)
      return v_func (r, builtins[k].fk, name);
  g_autofree char *hint = g_strdup_printf ("'%s'", name);
  return v_undef (r, hint);
}

static Value *
eval_filter_node (R *r, Frame *f, const CtNode *n, Value *operand)
{
  g_autoptr (GPtrArray) args = NULL;
  g_autoptr (GPtrArray) kwvals = NULL;
  if (!eval_args (r, f, n, &args, &kwvals))
    return NULL;
  Args a = { args, n->kwnames, kwvals };
  return apply_filter (r, f, n, n->str, operand, &a);
}

/* Every expression and statement passes here: one step, and one level of
 * recursion (the parser bounds the tree's depth; macros and the call chain
 * of filters add to it). */
static gboolean
enter (R *r, const CtNode *n)
{
  r->at = n;
  if (!budget_ok (r, 1))
    return FALSE;
  if (r->depth_now >= HN_CHAT_TEMPLATE_MAX_DEPTH)
    return limit_fail (r, "recursion depth", HN_CHAT_TEMPLATE_MAX_DEPTH, " levels") != NULL;
  r->depth_now++;
  return TRUE;
}

static Value *eval_node (R *r, Frame *f, const CtNode *n);

static Value *
eval (R *r, Frame *f, const CtNode *n)
{
  if (!enter (r, n))
    return NULL;
  Value *v = eval_node (r, f, n);
  r->depth_now--;
  r->at = n;
  return v;
}

static Value *
eval_node (R *r, Frame *f, const CtNode *n)
{
  switch (n->kind)
    {
    case CT_E_LITERAL:
      switch (n->lit_kind)
        {
        case CT_LIT_NONE: return v_none (r);
        case CT_LIT_BOOL: return v_bool (r, n->ival != 0);
        case CT_LIT_INT: return v_int (r, n->ival);
        case CT_LIT_FLOAT: return v_float (r, n->fval);
        case CT_LIT_STRING: return v_strn (r, n->str, n->str_len);
        }
      return NULL;
    case CT_E_NAME:
      return lookup_name (r, f, n->str);
    case CT_E_LIST:
    case CT_E_TUPLE:
      {
        Value *l = v_list (r);
        l->tuple = n->kind == CT_E_TUPLE;
        for (guint k = 0; k < n->args->len; k++)
          {
            Value *v = eval (r, f, n->args->pdata[k]);
            if (!v)
              return NULL;
            list_push (r, l, v);
          }
        return l;
      }
    case CT_E_DICT:
      {
        Value *d = v_dict (r);
        for (guint k = 0; k < n->args->len; k++)
          {
            Value *key = eval (r, f, n->args->pdata[k]);
            Value *v = key ? eval (r, f, n->kwargs->pdata[k]) : NULL;
            if (!v)
              return NULL;
            g_autofree char *ks = to_cstr (r, key);
            dict_set (r, d, ks, v);
          }
        return d;
      }
    case CT_E_GETATTR:
      {
        Value *o = eval (r, f, n->a);
        return o ? get_attr (r, n, o, n->str) : NULL;
      }
    case CT_E_GETITEM:
      {
        Value *o = eval (r, f, n->a);
        Value *k = o ? eval (r, f, n->b) : NULL;
        return k ? get_item (r, n, o, k) : NULL;
      }
    case CT_E_SLICE:
      {
        Value *o = eval (r, f, n->a);
        Value *parts[3] = { NULL, NULL, NULL };
        const CtNode *pn[3] = { n->b, n->c, n->d };
        if (!o)
          return NULL;
        for (int k = 0; k < 3; k++)
          if (pn[k])
            {
              parts[k] = eval (r, f, pn[k]);
              if (!parts[k])
                return NULL;
              if (parts[k]->t != V_NONE && parts[k]->t != V_INT && parts[k]->t != V_BOOL)
                return rfail (r, n, "slice indices must be integers or None");
            }
        return slice_value (r, n, o, parts[0], parts[1], parts[2]);
      }
    case CT_E_CALL:
      {
        Value *fn = eval (r, f, n->a);
        if (!fn)
          return NULL;
        g_autoptr (GPtrArray) args = NULL;
        g_autoptr (GPtrArray) kwvals = NULL;
        if (!eval_args (r, f, n, &args, &kwvals))
          return NULL;
        return call_value (r, f, n, fn, args, n->kwnames, kwvals);
      }
    case CT_E_FILTER:
      {
        Value *o = eval (r, f, n->a);
        return o ? eval_filter_node (r, f, n, o) : NULL;
      }
    case CT_E_TEST:
      {
        Value *o = eval (r, f, n->a);
        if (!o)
          return NULL;
        g_autoptr (GPtrArray) args = NULL;
        g_autoptr (GPtrArray) kwvals = NULL;
        if (!eval_args (r, f, n, &args, &kwvals))
          return NULL;
        Args a = { args, n->kwnames, kwvals };
        gboolean res;
        if (!apply_test (r, n, n->str, o, &a, &res))
          return NULL;
        return v_bool (r, n->negated ? !res : res);
      }
    case CT_E_UNARY:
      {
        Value *o = eval (r, f, n->a);
        if (!o)
          return NULL;
        if (n->op == 'n')
          return v_bool (r, !truthy (o));
        if (o->t == V_UNDEF)
          return undef_fail (r, n, o);
        if (!is_num (o))
          return rfail (r, n, "bad operand type for unary %c: '%s'", n->op, type_name (o));
        if (n->op == '+')
          return o;
        if (o->t == V_FLOAT)
          return v_float (r, -o->f);
        return num_i (o) == G_MININT64 ? int_overflow (r, n, "-") : v_int (r, -num_i (o));
      }
    case CT_E_BINARY:
      {
        Value *a = eval (r, f, n->a);
        Value *b = a ? eval (r, f, n->b) : NULL;
        return b ? binary_op (r, n, n->op, a, b) : NULL;
      }
    case CT_E_AND:
    case CT_E_OR:
      {
        /* Python semantics: the deciding operand is the result */
        Value *a = eval (r, f, n->a);
        if (!a)
          return NULL;
        if ((n->kind == CT_E_AND) != truthy (a))
          return a;
        return eval (r, f, n->b);
      }
    case CT_E_COMPARE:
      {
        Value *left = eval (r, f, n->a);
        if (!left)
          return NULL;
        for (guint k = 0; k < n->args->len; k++)
          {
            Value *right = eval (r, f, n->args->pdata[k]);
            if (!right)
              return NULL;
            int op = g_array_index (n->ops, int, k);
            gboolean res;
            if (op == CT_OP_EQ || op == CT_OP_NE)
              res = values_equal (r, left, right) == (op == CT_OP_EQ);
            else if (op == CT_OP_IN || op == CT_OP_NOTIN)
              {
                Value *c = contains (r, n, left, right);
                if (!c)
                  return NULL;
                res = c->b == (op == CT_OP_IN);
              }
            else
              {
                gboolean ok;
                int c = compare_values (r, n, left, right, &ok);
                if (!ok)
                  return NULL;
                res = op == CT_OP_LT ? c < 0 : op == CT_OP_LE ? c <= 0 : op == CT_OP_GT ? c > 0 : c >= 0;
              }
            if (!res)
              return v_bool (r, FALSE);
            left = right;
          }
        return v_bool (r, TRUE);
      }
    case CT_E_COND:
      {
        Value *c = eval (r, f, n->b);
        if (!c)
          return NULL;
        if (truthy (c))
          return eval (r, f, n->a);
        if (n->c)
          return eval (r, f, n->c);
        return v_undef (r, "the inline if-expression on false");
      }
    default:
      return rfail (r, n, "internal: not an expression");
    }
}

/* ------------------------------------------------------------ statements */

static gboolean
assign_targets (R *r, Frame *f, const CtNode *at, GPtrArray *targets, Value *v)
{
  if (targets->len == 1)
    {
      frame_set (f, targets->pdata[0], v);
      return TRUE;
    }
  if (v->t != V_LIST || v->list->len != targets->len)
    {
      rfail (r, at, "cannot unpack %s into %u names", type_name (v), targets->len);
      return FALSE;
    }
  for (guint k = 0; k < targets->len; k++)
    frame_set (f, targets->pdata[k], v->list->pdata[k]);
  return TRUE;
}

static gboolean
exec_for (R *r, Frame *f, const CtNode *n)
{
  Value *src = eval (r, f, n->a);
  if (!src)
    return FALSE;
  Value *items = iterable_to_list (r, n->a, src);
  if (!items)
    return FALSE;
  if (n->b)
    {
      /* `for x in xs if cond`: filter first, so loop.length counts kept items */
      Value *kept = v_list (r);
      for (guint k = 0; k < items->list->len; k++)
        {
          if (++r->iterations > HN_CHAT_TEMPLATE_MAX_ITERATIONS)
            return limit_fail (r, "loop iteration", HN_CHAT_TEMPLATE_MAX_ITERATIONS, " iterations") != NULL;
          Frame *tf = frame_push (r, f);
          if (!assign_targets (r, tf, n, n->targets, items->list->pdata[k]))
            return FALSE;
          Value *c = eval (r, tf, n->b);
          if (!c)
            return FALSE;
          if (truthy (c))
            list_push (r, kept, items->list->pdata[k]);
        }
      items = kept;
    }
  guint len = items->list->len;
  for (guint k = 0; k < len; k++)
    {
      Value *item = items->list->pdata[k];
      if (++r->iterations > HN_CHAT_TEMPLATE_MAX_ITERATIONS)
        return limit_fail (r, "loop iteration", HN_CHAT_TEMPLATE_MAX_ITERATIONS, " iterations") != NULL;
      Frame *lf = frame_push (r, f);
      if (!assign_targets (r, lf, n, n->targets, item))
        return FALSE;
      Value *loop = v_dict (r);
      loop->loop = TRUE;
      dict_set (r, loop, "index", v_int (r, k + 1));
      dict_set (r, loop, "index0", v_int (r, k));
      dict_set (r, loop, "revindex", v_int (r, len - k));
      dict_set (r, loop, "revindex0", v_int (r, len - k - 1));
      dict_set (r, loop, "first", v_bool (r, k == 0));
      dict_set (r, loop, "last", v_bool (r, k == len - 1));
      dict_set (r, loop, "length", v_int (r, len));
      dict_set (r, loop, "depth", v_int (r, 1));
      dict_set (r, loop, "depth0", v_int (r, 0));
      if (k > 0)
        dict_set (r, loop, "previtem", items->list->pdata[k - 1]);
      if (k + 1 < len)
        dict_set (r, loop, "nextitem", items->list->pdata[k + 1]);
      frame_set (lf, "loop", loop);

      int msg = r->tracked ? GPOINTER_TO_INT (g_hash_table_lookup (r->tracked, item)) - 1 : -1;
      gsize start = r->out->len;
      int saved_msg = r->current_msg;
      if (msg >= 0)
        r->current_msg = msg;
      gboolean ok = exec_body (r, lf, n->body);
      r->current_msg = saved_msg;
      if (!ok)
        return FALSE;
      if (msg >= 0 && r->out == r->main_out && r->out->len > start)
        {
          g_array_index (r->segs, gssize, 2 * msg) = start;
          g_array_index (r->segs, gssize, 2 * msg + 1) = r->out->len;
        }
      if (r->brk == 1)
        {
          r->brk = 0;
          break;
        }
      r->brk = 0;
    }
  if (len == 0)
    return exec_body (r, f, n->else_body);
  return TRUE;
}

static gboolean exec_node (R *r, Frame *f, const CtNode *n);

static gboolean
exec_stmt (R *r, Frame *f, const CtNode *n)
{
  if (!enter (r, n))
    return FALSE;
  gboolean ok = exec_node (r, f, n);
  r->depth_now--;
  return ok && !r->error;
}

static gboolean
exec_node (R *r, Frame *f, const CtNode *n)
{
  switch (n->kind)
    {
    case CT_N_TEXT:
      g_string_append_len (r->out, n->str, n->str_len);
      return TRUE;
    case CT_N_OUTPUT:
      {
        Value *v = eval (r, f, n->a);
        if (!v)
          return FALSE;
        append_str (r, r->out, v);
        return TRUE;
      }
    case CT_N_IF:
      {
        Value *c = eval (r, f, n->a);
        if (!c)
          return FALSE;
        return exec_body (r, f, truthy (c) ? n->body : n->else_body);
      }
    case CT_N_FOR:
      return exec_for (r, f, n);
    case CT_N_SET:
      {
        Value *v = eval (r, f, n->b);
        if (!v)
          return FALSE;
        if (n->a)
          {
            Value *ns = eval (r, f, n->a->a);
            if (!ns)
              return FALSE;
            if (ns->t != V_DICT || !ns->ns)
              {
                rfail (r, n, "cannot assign attribute on non-namespace object '%s'", n->a->a->str);
                return FALSE;
              }
            dict_set (r, ns, n->a->str, v);
            return TRUE;
          }
        return assign_targets (r, f, n, n->targets, v);
      }
    case CT_N_SET_BLOCK:
    case CT_N_FILTER_BLOCK:
      {
        GString *saved = r->out;
        r->out = g_string_new (NULL);
        gboolean ok = exec_body (r, f, n->body);
        GString *res = r->out;
        r->out = saved;
        if (!ok)
          {
            g_string_free (res, TRUE);
            return FALSE;
          }
        Value *v = v_str_take (r, res);
        if (n->kind == CT_N_SET_BLOCK)
          {
            frame_set (f, n->targets->pdata[0], v);
            return TRUE;
          }
        /* apply the filter chain innermost first */
        GPtrArray *chain = g_ptr_array_new ();
        for (const CtNode *c = n->a; c; c = c->a)
          g_ptr_array_insert (chain, 0, (gpointer) c);
        for (guint k = 0; k < chain->len && v; k++)
          v = eval_filter_node (r, f, chain->pdata[k], v);
        g_ptr_array_unref (chain);
        if (!v)
          return FALSE;
        append_str (r, r->out, v);
        return TRUE;
      }
    case CT_N_MACRO:
      {
        Value *m = v_func (r, F_MACRO, n->str);
        m->macro = n;
        frame_set (f, n->str, m);
        return TRUE;
      }
    case CT_N_BREAK:
      r->brk = 1;
      return TRUE;
    case CT_N_CONTINUE:
      r->brk = 2;
      return TRUE;
    case CT_N_GENERATION:
      {
        gsize start = r->out->len;
        if (!exec_body (r, f, n->body))
          return FALSE;
        if (r->out == r->main_out && r->gen_spans)
          {
            HnChatSpan s = { r->current_msg, start, r->out->len };
            g_array_append_val (r->gen_spans, s);
          }
        return TRUE;
      }
    default:
      rfail (r, n, "internal: not a statement");
      return FALSE;
    }
}

static gboolean
exec_body (R *r, Frame *f, GPtrArray *body)
{
  for (guint k = 0; k < body->len; k++)
    {
      if (!exec_stmt (r, f, body->pdata[k]))
        return FALSE;
      if (r->brk)
        return TRUE;
    }
  return TRUE;
}

/* ------------------------------------------------------------------- API */

static gboolean
has_generation (GPtrArray *body)
{
  for (guint k = 0; body && k < body->len; k++)
    {
      CtNode *n = body->pdata[k];
      if (n->kind == CT_N_GENERATION || has_generation (n->body) || has_generation (n->else_body))
        return TRUE;
    }
  return FALSE;
}

HnChatTemplate *
hn_chat_template_new_named (const char *source, const char *name, GError **error)
{
  g_return_val_if_fail (source != NULL, NULL);
  GError *local = NULL;
  GPtrArray *body = ct_parse (source, &local);
  if (!body)
    {
      const char *m = local->message;
      if (name && g_str_has_prefix (m, "chat template: "))
        g_set_error (error, local->domain, local->code, "chat template (%s): %s", name, m + strlen ("chat template: "));
      else
        g_propagate_error (error, g_steal_pointer (&local));
      g_clear_error (&local);
      return NULL;
    }
  HnChatTemplate *t = g_new0 (HnChatTemplate, 1);
  t->body = body;
  t->has_generation = has_generation (body);
  t->name = g_strdup (name);
  return t;
}

HnChatTemplate *
hn_chat_template_new (const char *source, GError **error)
{
  return hn_chat_template_new_named (source, NULL, error);
}

void
hn_chat_template_free (HnChatTemplate *tmpl)
{
  if (!tmpl)
    return;
  g_ptr_array_unref (tmpl->body);
  g_free (tmpl->name);
  g_free (tmpl);
}

static char *
render_raw (HnChatTemplate *tmpl, const HnChatRenderArgs *args, GArray *segs_out,
            GArray *gen_spans, GError **error)
{
  R r = { 0 };
  r.arena = g_ptr_array_new_with_free_func ((GDestroyNotify) value_free);
  r.frames = g_ptr_array_new_with_free_func ((GDestroyNotify) frame_free);
  r.out = r.main_out = g_string_new (NULL);
  r.current_msg = -1;
  r.gen_spans = gen_spans;
  r.name = tmpl->name;
  r.root = frame_push (&r, NULL);

  Value *msgs = from_json (&r, args->messages);
  frame_set (r.root, "messages", msgs);
  frame_set (r.root, "tools", args->tools ? from_json (&r, args->tools) : v_none (&r));
  frame_set (r.root, "documents", v_none (&r));
  frame_set (r.root, "add_generation_prompt", v_bool (&r, args->add_generation_prompt));
  if (args->bos_token)
    frame_set (r.root, "bos_token", v_str (&r, args->bos_token));
  if (args->eos_token)
    frame_set (r.root, "eos_token", v_str (&r, args->eos_token));
  if (args->extra)
    {
      GList *names = json_object_get_members (args->extra);
      for (GList *l = names; l; l = l->next)
        frame_set (r.root, l->data, from_json (&r, json_object_get_member (args->extra, l->data)));
      g_list_free (names);
    }
  if (segs_out && msgs->t == V_LIST)
    {
      r.tracked = g_hash_table_new (NULL, NULL);
      for (guint k = 0; k < msgs->list->len; k++)
        g_hash_table_insert (r.tracked, msgs->list->pdata[k], GINT_TO_POINTER (k + 1));
      r.segs = segs_out;
      g_array_set_size (segs_out, 2 * msgs->list->len);
      for (guint k = 0; k < segs_out->len; k++)
        g_array_index (segs_out, gssize, k) = -1;
    }

  gboolean ok = exec_body (&r, r.root, tmpl->body);
  char *result = NULL;
  if (ok && !r.error)
    result = g_string_free (r.out, FALSE);
  else
    {
      g_string_free (r.out, TRUE);
      if (!r.error)
        g_set_error (&r.error, HN_ERROR, HN_ERROR_FAILED, "chat template: rendering failed");
      g_propagate_error (error, r.error);
    }
  if (r.tracked)
    g_hash_table_unref (r.tracked);
  g_ptr_array_unref (r.frames);
  g_ptr_array_unref (r.arena);
  return result;
}

char *
hn_chat_template_apply (HnChatTemplate *tmpl, const HnChatRenderArgs *args,
                        GArray *assistant_spans, GError **error)
{
  g_return_val_if_fail (tmpl && args, NULL);
  if (!args->messages || !JSON_NODE_HOLDS_ARRAY (args->messages))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "chat template: messages must be a JSON array");
      return NULL;
    }
  if (!assistant_spans)
    return render_raw (tmpl, args, NULL, NULL, error);

  g_autoptr (GArray) segs = g_array_new (FALSE, TRUE, sizeof (gssize));
  g_autoptr (GArray) gen = g_array_new (FALSE, FALSE, sizeof (HnChatSpan));
  char *text = render_raw (tmpl, args, segs, gen, error);
  if (!text)
    return NULL;
  g_array_set_size (assistant_spans, 0);
  if (tmpl->has_generation)
    {
      g_array_append_vals (assistant_spans, gen->data, gen->len);
      return text;
    }

  /* The generation prompt header (what add_generation_prompt appends after a
   * user turn) starts each assistant segment but is prompt, not answer. */
  g_autofree char *header = NULL;
  {
    JsonNode *probe = json_from_string ("[{\"role\": \"user\", \"content\": \"Hi\"}]", NULL);
    HnChatRenderArgs pa = *args;
    pa.messages = probe;
    pa.add_generation_prompt = FALSE;
    g_autofree char *without = render_raw (tmpl, &pa, NULL, NULL, NULL);
    pa.add_generation_prompt = TRUE;
    g_autofree char *with = render_raw (tmpl, &pa, NULL, NULL, NULL);
    if (without && with && g_str_has_prefix (with, without))
      header = g_strdup (with + strlen (without));
    json_node_unref (probe);
  }
  JsonArray *msgs = json_node_get_array (args->messages);
  for (guint k = 0; k < json_array_get_length (msgs); k++)
    {
      gssize s = g_array_index (segs, gssize, 2 * k), e = g_array_index (segs, gssize, 2 * k + 1);
      JsonNode *m = json_array_get_element (msgs, k);
      if (s < 0 || !JSON_NODE_HOLDS_OBJECT (m))
        continue;
      const char *role = json_object_get_string_member_with_default (json_node_get_object (m), "role", "");
      if (strcmp (role, "assistant") != 0)
        continue;
      gsize start = s, end = e;
      if (header && *header)
        {
          gsize hl = strlen (header), lcp = 0;
          while (lcp < hl && start + lcp < end && text[start + lcp] == header[lcp])
            lcp++;
          if (lcp == hl)
            start += hl;
          else
            {
              /* e.g. Qwen3 with enable_thinking=false: the header carries an
               * empty think block that earlier turns lack; skip whole lines */
              while (lcp > 0 && header[lcp - 1] != '\n')
                lcp--;
              start += lcp;
            }
        }
      if (args->eos_token && *args->eos_token)
        {
          const char *last = NULL;
          gsize el = strlen (args->eos_token);
          for (const char *p = text + start; (p = g_strstr_len (p, text + end - p, args->eos_token)); p += el)
            last = p;
          if (last)
            end = (last - text) + el;
        }
      HnChatSpan span = { (int) k, start, end };
      g_array_append_val (assistant_spans, span);
    }
  return text;
}

char *
hn_chat_template_render (const char *template_src, JsonNode *messages, gboolean add_generation_prompt,
                         const char *bos_token, const char *eos_token, JsonObject *extra_vars, GError **error)
{
  g_autoptr (HnChatTemplate) t = hn_chat_template_new (template_src, error);
  if (!t)
    return NULL;
  HnChatRenderArgs args = { messages, NULL, add_generation_prompt, bos_token, eos_token, extra_vars };
  if (extra_vars && json_object_has_member (extra_vars, "tools"))
    args.tools = json_object_get_member (extra_vars, "tools");
  return hn_chat_template_apply (t, &args, NULL, error);
}

JsonNode *
hn_chat_messages_to_json (const HnChatMessage *messages, gsize n_messages)
{
  JsonArray *a = json_array_new ();
  for (gsize k = 0; k < n_messages; k++)
    {
      JsonObject *o = json_object_new ();
      json_object_set_string_member (o, "role", messages[k].role);
      json_object_set_string_member (o, "content", messages[k].content);
      json_array_add_object_element (a, o);
    }
  JsonNode *n = json_node_new (JSON_NODE_ARRAY);
  json_node_take_array (n, a);
  return n;
}
