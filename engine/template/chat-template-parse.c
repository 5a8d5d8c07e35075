/* Lexer and parser for the Jinja subset that chat templates use. The lexer
 * follows jinja2's rules with transformers' environment: trim_blocks and
 * lstrip_blocks on, newlines normalised to '\n', one trailing newline of the
 * template dropped. The parser follows jinja2's grammar and precedence
 * (jinja2/parser.py), so `messages|length - 1` and `-x|abs` group the same. */
#include "chat-template-private.h"
#include "base/hn-error.h"

#include <stdlib.h>
#include <errno.h>
#include <string.h>

typedef enum {
  T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
  T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} TokKind;

typedef struct {
  TokKind kind;
  int line, col;
  char *s;      /* text, name, string value or operator */
  gsize len;
  gint64 i;
  double f;
} Tok;

typedef struct {
  const char *src;
  gsize n;
  GArray *toks;  /* Tok */
  GError **error;
  gsize lc_pos;  /* pos_to_linecol's last answer, so counting is linear */
  int lc_line, lc_col;
} Lexer;

static void
pos_to_linecol (Lexer *lx, gsize pos, int *line, int *col)
{
  if (pos < lx->lc_pos || lx->lc_line == 0)
    lx->lc_pos = 0, lx->lc_line = 1, lx->lc_col = 1;
  for (gsize k = lx->lc_pos; k < pos && lx->src[k]; k++)
    {
      if (lx->src[k] == '\n') { lx->lc_line++; lx->lc_col = 1; }
      else lx->lc_col++;
    }
  lx->lc_pos = pos;
  *line = lx->lc_line;
  *col = lx->lc_col;
}

static void
lex_push (Lexer *lx, TokKind kind, gsize pos, const char *s, gsize len)
{
  Tok t = { kind, 0, 0, NULL, 0, 0, 0 };
  pos_to_linecol (lx, pos, &t.line, &t.col);
  if (s)
    {
      t.s = g_malloc (len + 1);
      memcpy (t.s, s, len);
      t.s[len] = '\0';
      t.len = len;
    }
  g_array_append_val (lx->toks, t);
}

static gboolean
lex_fail (Lexer *lx, gsize pos, const char *msg)
{
  int line, col;
  pos_to_linecol (lx, pos, &line, &col);
  g_set_error (lx->error, HN_ERROR, HN_ERROR_CORRUPT,
               "chat template: line %d, column %d: %s", line, col, msg);
  return FALSE;
}

static gboolean
is_ws (char c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Decodes a string literal's escapes as Python would for the common cases. */
static gboolean
lex_string (Lexer *lx, gsize *pos)
{
  gsize p = *pos;
  char q = lx->src[p++];
  GString *out = g_string_new (NULL);
  while (p < lx->n && lx->src[p] != q)
    {
      char c = lx->src[p];
      if (c == '\\' && p + 1 < lx->n)
        {
          char e = lx->src[p + 1];
          p += 2;
          switch (e)
            {
            case 'n': g_string_append_c (out, '\n'); break;
            case 't': g_string_append_c (out, '\t'); break;
            case 'r': g_string_append_c (out, '\r'); break;
            case 'b': g_string_append_c (out, '\b'); break;
            case 'f': g_string_append_c (out, '\f'); break;
            case 'v': g_string_append_c (out, '\v'); break;
            case '0': g_string_append_c (out, '\0'); break;
            case '\\': g_string_append_c (out, '\\'); break;
            case '\'': g_string_append_c (out, '\''); break;
            case '"': g_string_append_c (out, '"'); break;
            case '\n': break; /* line continuation */
            case 'x': case 'u': case 'U':
              {
                int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                gunichar u = 0;
                int k;
                for (k = 0; k < nd && p < lx->n && g_ascii_isxdigit (lx->src[p]); k++, p++)
                  u = u * 16 + g_ascii_xdigit_value (lx->src[p]);
                if (k != nd)
                  {
                    g_string_free (out, TRUE);
                    return lex_fail (lx, p, "bad \\x/\\u escape in string literal");
                  }
                g_string_append_unichar (out, u);
                break;
              }
            default:
              g_string_append_c (out, '\\');
              g_string_append_c (out, e);
            }
          continue;
        }
      g_string_append_c (out, c);
      p++;
    }
  if (p >= lx->n)
    {
      g_string_free (out, TRUE);
      return lex_fail (lx, *pos, "unterminated string literal");
    }
  lex_push (lx, T_STRING, *pos, out->str, out->len);
  g_string_free (out, TRUE);
  *pos = p + 1;
  return TRUE;
}

/* Lexes the inside of a variable or block tag up to its end marker. On return
 * *pos is just after the end marker and *strip_after and *no_trim say what
 * whitespace handling follows. */
static gboolean
lex_tag_body (Lexer *lx, gsize *pos, gboolean is_block, gboolean *strip_after, gboolean *no_trim)
{
  gsize p = *pos;
  int depth = 0;
  const char endc = is_block ? '%' : '}';
  *strip_after = FALSE;
  *no_trim = FALSE;
  for (;;)
    {
      while (p < lx->n && is_ws (lx->src[p]))
        p++;
      if (p >= lx->n)
        return lex_fail (lx, *pos, is_block ? "unclosed block tag '{%'" : "unclosed expression '{{'");
      const char *s = lx->src + p;
      if (depth == 0)
        {
          gboolean minus = s[0] == '-' && s[1] == endc && s[2] == '}';
          gboolean plus = is_block && s[0] == '+' && s[1] == '%' && s[2] == '}';
          if (minus || plus || (s[0] == endc && s[1] == '}'))
            {
              lex_push (lx, is_block ? T_BLOCK_END : T_VAR_END, p, NULL, 0);
              p += (minus || plus) ? 3 : 2;
              *strip_after = minus;
              *no_trim = plus || !is_block;
              *pos = p;
              return TRUE;
            }
        }
      char c = s[0];
      if (g_ascii_isalpha (c) || c == '_')
        {
          gsize q = p;
          while (q < lx->n && (g_ascii_isalnum (lx->src[q]) || lx->src[q] == '_'))
            q++;
          lex_push (lx, T_NAME, p, s, q - p);
          p = q;
        }
      else if (g_ascii_isdigit (c))
        {
          gsize q = p;
          gboolean is_float = FALSE;
          while (q < lx->n && (g_ascii_isdigit (lx->src[q]) || lx->src[q] == '_'))
            q++;
          if (q + 1 < lx->n && lx->src[q] == '.' && g_ascii_isdigit (lx->src[q + 1]))
            {
              is_float = TRUE;
              q++;
              while (q < lx->n && g_ascii_isdigit (lx->src[q]))
                q++;
            }
          if (q < lx->n && (lx->src[q] == 'e' || lx->src[q] == 'E'))
            {
              gsize r = q + 1;
              if (r < lx->n && (lx->src[r] == '+' || lx->src[r] == '-'))
                r++;
              if (r < lx->n && g_ascii_isdigit (lx->src[r]))
                {
                  is_float = TRUE;
                  q = r;
                  while (q < lx->n && g_ascii_isdigit (lx->src[q]))
                    q++;
                }
            }
          g_autofree char *num = g_strndup (s, q - p);
          /* drop digit separators */
          char *w = num;
          for (char *r = num; *r; r++)
            if (*r != '_')
              *w++ = *r;
          *w = '\0';
          lex_push (lx, is_float ? T_FLOAT : T_INT, p, NULL, 0);
          Tok *t = &g_array_index (lx->toks, Tok, lx->toks->len - 1);
          if (is_float)
            t->f = g_ascii_strtod (num, NULL);
          else
            {
              errno = 0;
              t->i = g_ascii_strtoll (num, NULL, 10);
              if (errno == ERANGE) /* strtoll would saturate: a wrong number, silently */
                return lex_fail (lx, p, "integer literal does not fit in 64 bits");
            }
          p = q;
        }
      else if (c == '\'' || c == '"')
        {
          if (!lex_string (lx, &p))
            return FALSE;
        }
      else
        {
          static const char *const two[] = { "//", "**", "==", "!=", "<=", ">=", NULL };
          gsize len = 0;
          for (int k = 0; two[k]; k++)
            if (s[0] == two[k][0] && s[1] == two[k][1])
              len = 2;
          if (!len)
            {
              if (!strchr ("+-*/%~<>=()[]{},.:|", c))
                {
                  g_autofree char *m = g_strdup_printf ("unexpected character '%c'", c);
                  return lex_fail (lx, p, m);
                }
              len = 1;
              if (c == '(' || c == '[' || c == '{')
                depth++;
              else if (c == ')' || c == ']' || c == '}')
                depth = MAX (depth - 1, 0);
            }
          lex_push (lx, T_OP, p, s, len);
          p += len;
        }
    }
}

static void
push_text (Lexer *lx, gsize start, gsize end)
{
  if (end > start)
    lex_push (lx, T_TEXT, start, lx->src + start, end - start);
}

static gboolean
lex_all (Lexer *lx)
{
  gsize pos = 0;
  gboolean strip_next = FALSE, trim_next = FALSE;
  while (pos <= lx->n)
    {
      if (strip_next)
        while (pos < lx->n && is_ws (lx->src[pos]))
          pos++;
      else if (trim_next && pos < lx->n && lx->src[pos] == '\n')
        pos++;
      strip_next = trim_next = FALSE;

      /* find the next tag opener */
      gsize tag = pos;
      while (tag + 1 < lx->n && !(lx->src[tag] == '{' &&
                                  (lx->src[tag + 1] == '{' || lx->src[tag + 1] == '%' || lx->src[tag + 1] == '#')))
        tag++;
      if (tag + 1 >= lx->n)
        {
          push_text (lx, pos, lx->n);
          break;
        }
      char kind = lx->src[tag + 1];
      char mod = tag + 2 < lx->n ? lx->src[tag + 2] : '\0';
      gsize text_end = tag;
      if (mod == '-')
        {
          while (text_end > pos && is_ws (lx->src[text_end - 1]))
            text_end--;
        }
      else if (kind != '{' && mod != '+')
        {
          /* lstrip_blocks: a block or comment tag alone after indentation
           * on its line loses that indentation. */
          gsize l = text_end;
          while (l > pos && lx->src[l - 1] != '\n')
            l--;
          gboolean line_start = l > pos || l == 0 || lx->src[l - 1] == '\n';
          gboolean only_ws = TRUE;
          for (gsize k = l; k < text_end; k++)
            if (lx->src[k] != ' ' && lx->src[k] != '\t' && lx->src[k] != '\r' && lx->src[k] != '\f' && lx->src[k] != '\v')
              only_ws = FALSE;
          if (line_start && only_ws)
            text_end = l;
        }
      push_text (lx, pos, text_end);
      gsize body = tag + 2 + ((mod == '-' || (mod == '+' && kind != '{')) ? 1 : 0);

      if (kind == '#')
        {
          const char *endc = strstr (lx->src + body, "#}");
          if (!endc)
            return lex_fail (lx, tag, "unclosed comment '{#'");
          gsize e = endc - lx->src;
          pos = e + 2;
          if (e > body && lx->src[e - 1] == '-')
            strip_next = TRUE;
          else if (!(e > body && lx->src[e - 1] == '+'))
            trim_next = TRUE;
          continue;
        }
      gboolean is_block = kind == '%';
      lex_push (lx, is_block ? T_BLOCK_BEGIN : T_VAR_BEGIN, tag, NULL, 0);
      gsize start_toks = lx->toks->len;
      gboolean strip_after, no_trim;
      pos = body;
      if (!lex_tag_body (lx, &pos, is_block, &strip_after, &no_trim))
        return FALSE;
      strip_next = strip_after;
      trim_next = !strip_after && !no_trim;

      /* {% raw %}: everything up to {% endraw %} is text */
      if (is_block && lx->toks->len == start_toks + 2)
        {
          Tok *t = &g_array_index (lx->toks, Tok, start_toks);
          if (t->kind == T_NAME && strcmp (t->s, "raw") == 0)
            {
              g_free (t->s);
              g_array_set_size (lx->toks, start_toks - 1);
              gsize q = pos;
              if (strip_next)
                while (q < lx->n && is_ws (lx->src[q]))
                  q++;
              else if (trim_next && q < lx->n && lx->src[q] == '\n')
                q++;
              strip_next = trim_next = FALSE;
              for (;;)
                {
                  const char *o = strstr (lx->src + q, "{%");
                  if (!o)
                    return lex_fail (lx, tag, "missing {% endraw %}");
                  gsize r = (o - lx->src) + 2;
                  gboolean m = lx->src[r] == '-';
                  if (m || lx->src[r] == '+')
                    r++;
                  while (r < lx->n && is_ws (lx->src[r]))
                    r++;
                  if (strncmp (lx->src + r, "endraw", 6) == 0)
                    {
                      gsize te = o - lx->src;
                      if (m)
                        while (te > q && is_ws (lx->src[te - 1]))
                          te--;
                      push_text (lx, q, te);
                      r += 6;
                      while (r < lx->n && is_ws (lx->src[r]))
                        r++;
                      if (lx->src[r] == '-' && lx->src[r + 1] == '%')
                        { strip_next = TRUE; r++; }
                      else
                        trim_next = TRUE;
                      if (strncmp (lx->src + r, "%}", 2) != 0)
                        return lex_fail (lx, r, "expected '%}' after endraw");
                      pos = r + 2;
                      break;
                    }
                  q = (o - lx->src) + 2;
                }
            }
        }
    }
  lex_push (lx, T_EOF, lx->n, NULL, 0);
  return TRUE;
}

/* ---------------------------------------------------------------- parser */

typedef struct {
  Tok *t;
  guint n;
  guint i;
  GError **error;
  int depth;   /* nesting levels open now, see deeper() */
} Parser;

static CtNode *
node_new (CtNodeKind kind, const Tok *at)
{
  CtNode *n = g_new0 (CtNode, 1);
  n->kind = kind;
  n->line = at->line;
  n->col = at->col;
  return n;
}

static void
node_list_free (GPtrArray *a)
{
  if (a)
    g_ptr_array_unref (a);
}

void
ct_node_free (CtNode *n)
{
  if (!n)
    return;
  g_free (n->str);
  ct_node_free (n->a);
  ct_node_free (n->b);
  ct_node_free (n->c);
  ct_node_free (n->d);
  node_list_free (n->body);
  node_list_free (n->else_body);
  node_list_free (n->args);
  node_list_free (n->kwnames);
  node_list_free (n->kwargs);
  node_list_free (n->targets);
  if (n->ops)
    g_array_unref (n->ops);
  g_free (n);
}

static GPtrArray *
node_list_new (void)
{
  return g_ptr_array_new_with_free_func ((GDestroyNotify) ct_node_free);
}

static Tok *
peek (Parser *p)
{
  return &p->t[p->i];
}

static Tok *
peek_at (Parser *p, guint k)
{
  return &p->t[MIN (p->i + k, p->n - 1)];
}

static Tok *
next (Parser *p)
{
  Tok *t = &p->t[p->i];
  if (p->i < p->n - 1)
    p->i++;
  return t;
}

static const char *
tok_desc (const Tok *t)
{
  switch (t->kind)
    {
    case T_TEXT: return "template text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_EOF: return "end of template";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: return t->s;
    }
}

static gboolean
fail_at (Parser *p, const Tok *t, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static gboolean
fail_at (Parser *p, const Tok *t, const char *fmt, ...)
{
  if (p->error && *p->error)
    return FALSE;
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *m = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (p->error, HN_ERROR, HN_ERROR_CORRUPT, "chat template: line %d, column %d: %s",
               t->line, t->col, m);
  return FALSE;
}

static gboolean
is_op (const Tok *t, const char *op)
{
  return t->kind == T_OP && strcmp (t->s, op) == 0;
}

static gboolean
is_name (const Tok *t, const char *name)
{
  return t->kind == T_NAME && strcmp (t->s, name) == 0;
}

static gboolean
expect_op (Parser *p, const char *op)
{
  Tok *t = peek (p);
  if (!is_op (t, op))
    return fail_at (p, t, "expected '%s', found %s", op, tok_desc (t));
  next (p);
  return TRUE;
}

/* The evaluator and ct_node_free recurse once per level of the tree, so a
 * hostile template of 100k nested parentheses, `not`s, elifs or a chain of
 * 100k `+` would overflow the stack: the parser counts every nesting level
 * and every link of an operator chain while it parses them and refuses a
 * tree deeper than this (real templates stay under 30). */
#define CT_MAX_DEPTH 256

static gboolean
deeper (Parser *p)
{
  if (++p->depth <= CT_MAX_DEPTH)
    return TRUE;
  return fail_at (p, peek (p), "the template nests deeper than %d levels (parentheses, blocks or operator chains), "
                  "the parser's limit", CT_MAX_DEPTH);
}

static CtNode *parse_expression (Parser *p, gboolean with_condexpr);
static CtNode *parse_unary (Parser *p, gboolean with_filter);
static CtNode *parse_primary (Parser *p);
static CtNode *parse_postfix (Parser *p, CtNode *node);
static CtNode *parse_or (Parser *p);

/* Parses `(a, b=c)` after the '(' has been seen into n's args/kwargs. */
static gboolean
parse_call_args (Parser *p, CtNode *n)
{
  if (!expect_op (p, "("))
    return FALSE;
  if (!n->args)
    n->args = node_list_new ();
  n->kwnames = g_ptr_array_new_with_free_func (g_free);
  n->kwargs = node_list_new ();
  while (!is_op (peek (p), ")"))
    {
      if (n->args->len + n->kwargs->len > 0 && !expect_op (p, ","))
        return FALSE;
      if (is_op (peek (p), ")"))
        break;
      if (peek (p)->kind == T_NAME && is_op (peek_at (p, 1), "="))
        {
          g_ptr_array_add (n->kwnames, g_strdup (next (p)->s));
          next (p);
          CtNode *v = parse_expression (p, TRUE);
          if (!v)
            return FALSE;
          g_ptr_array_add (n->kwargs, v);
        }
      else
        {
          if (n->kwargs->len > 0)
            return fail_at (p, peek (p), "positional argument after keyword argument");
          CtNode *v = parse_expression (p, TRUE);
          if (!v)
            return FALSE;
          g_ptr_array_add (n->args, v);
        }
    }
  next (p);
  return TRUE;
}

/* Parses a comma-separated list; a single element without a comma is returned
 * as itself unless `force_tuple`. */
static CtNode *
parse_tuple (Parser *p, gboolean with_condexpr, gboolean explicit_parens)
{
  Tok *start = peek (p);
  GPtrArray *items = node_list_new ();
  gboolean saw_comma = FALSE;
  for (;;)
    {
      if (items->len > 0)
        {
          if (!is_op (peek (p), ","))
            break;
          next (p);
          saw_comma = TRUE;
        }
      Tok *t = peek (p);
      if (t->kind == T_BLOCK_END || t->kind == T_VAR_END || is_op (t, ")") || is_name (t, "in") ||
          (items->len > 0 && (is_name (t, "if"))))
        break;
      CtNode *e = with_condexpr ? parse_expression (p, TRUE) : parse_or (p);
      if (!e)
        {
          g_ptr_array_unref (items);
          return NULL;
        }
      g_ptr_array_add (items, e);
    }
  if (!saw_comma && items->len == 1)
    {
      CtNode *only = g_ptr_array_steal_index (items, 0);
      g_ptr_array_unref (items);
      return only;
    }
  if (items->len == 0 && !explicit_parens)
    {
      g_ptr_array_unref (items);
      fail_at (p, start, "expected an expression, found %s", tok_desc (start));
      return NULL;
    }
  CtNode *n = node_new (CT_E_TUPLE, start);
  n->args = items;
  return n;
}

static CtNode *
parse_primary (Parser *p)
{
  Tok *t = peek (p);
  CtNode *n;
  switch (t->kind)
    {
    case T_NAME:
      next (p);
      if (!strcmp (t->s, "true") || !strcmp (t->s, "True") || !strcmp (t->s, "false") || !strcmp (t->s, "False"))
        {
          n = node_new (CT_E_LITERAL, t);
          n->lit_kind = CT_LIT_BOOL;
          n->ival = t->s[0] == 't' || t->s[0] == 'T';
          return n;
        }
      if (!strcmp (t->s, "none") || !strcmp (t->s, "None"))
        {
          n = node_new (CT_E_LITERAL, t);
          n->lit_kind = CT_LIT_NONE;
          return n;
        }
      n = node_new (CT_E_NAME, t);
      n->str = g_strdup (t->s);
      return n;
    case T_STRING:
      {
        GString *s = g_string_new_len (t->s, t->len);
        next (p);
        while (peek (p)->kind == T_STRING) /* adjacent literals concatenate */
          {
            Tok *u = next (p);
            g_string_append_len (s, u->s, u->len);
          }
        n = node_new (CT_E_LITERAL, t);
        n->lit_kind = CT_LIT_STRING;
        n->str_len = s->len;
        n->str = g_string_free (s, FALSE);
        return n;
      }
    case T_INT:
      next (p);
      n = node_new (CT_E_LITERAL, t);
      n->lit_kind = CT_LIT_INT;
      n->ival = t->i;
      return n;
    case T_FLOAT:
      next (p);
      n = node_new (CT_E_LITERAL, t);
      n->lit_kind = CT_LIT_FLOAT;
      n->fval = t->f;
      return n;
    case T_OP:
      if (is_op (t, "("))
        {
          next (p);
          n = parse_tuple (p, TRUE, TRUE);
          if (!n)
            return NULL;
          if (!expect_op (p, ")"))
            {
              ct_node_free (n);
              return NULL;
            }
          return n;
        }
      if (is_op (t, "["))
        {
          next (p);
          n = node_new (CT_E_LIST, t);
          n->args = node_list_new ();
          while (!is_op (peek (p), "]"))
            {
              if (n->args->len && !expect_op (p, ","))
                goto fail;
              if (is_op (peek (p), "]"))
                break;
              CtNode *e = parse_expression (p, TRUE);
              if (!e)
                goto fail;
              g_ptr_array_add (n->args, e);
            }
          next (p);
          return n;
        }
      if (is_op (t, "{"))
        {
          next (p);
          n = node_new (CT_E_DICT, t);
          n->args = node_list_new ();
          n->kwargs = node_list_new ();
          while (!is_op (peek (p), "}"))
            {
              if (n->args->len && !expect_op (p, ","))
                goto fail;
              if (is_op (peek (p), "}"))
                break;
              CtNode *k = parse_expression (p, TRUE);
              if (!k)
                goto fail;
              g_ptr_array_add (n->args, k);
              if (!expect_op (p, ":"))
                goto fail;
              CtNode *v = parse_expression (p, TRUE);
              if (!v)
                goto fail;
              g_ptr_array_add (n->kwargs, v);
            }
          next (p);
          return n;
        }
      /* fallthrough */
    default:
      fail_at (p, t, "expected an expression, found %s", tok_desc (t));
      return NULL;
    }
fail:
  ct_node_free (n);
  return NULL;
}

static CtNode *
parse_subscript (Parser *p, CtNode *obj)
{
  Tok *t = next (p);
  if (is_op (t, "."))
    {
      Tok *a = next (p);
      CtNode *n;
      if (a->kind == T_NAME)
        {
          n = node_new (CT_E_GETATTR, t);
          n->a = obj;
          n->str = g_strdup (a->s);
          return n;
        }
      if (a->kind == T_INT)
        {
          n = node_new (CT_E_GETITEM, t);
          n->a = obj;
          n->b = node_new (CT_E_LITERAL, a);
          n->b->lit_kind = CT_LIT_INT;
          n->b->ival = a->i;
          return n;
        }
      ct_node_free (obj);
      fail_at (p, a, "expected an attribute name after '.', found %s", tok_desc (a));
      return NULL;
    }
  /* '[' */
  CtNode *parts[3] = { NULL, NULL, NULL };
  int np = 0;
  gboolean is_slice = FALSE;
  for (;;)
    {
      Tok *u = peek (p);
      if (is_op (u, ":"))
        {
          next (p);
          is_slice = TRUE;
          if (++np > 2)
            {
              fail_at (p, u, "too many ':' in slice");
              goto fail;
            }
          continue;
        }
      if (is_op (u, "]"))
        {
          next (p);
          break;
        }
      if (parts[np])
        {
          fail_at (p, u, "expected ']' or ':', found %s", tok_desc (u));
          goto fail;
        }
      parts[np] = parse_expression (p, TRUE);
      if (!parts[np])
        goto fail;
    }
  CtNode *n;
  if (is_slice)
    {
      n = node_new (CT_E_SLICE, t);
      n->a = obj;
      n->b = parts[0];
      n->c = parts[1];
      n->d = parts[2];
    }
  else
    {
      if (!parts[0])
        {
          fail_at (p, t, "empty subscript");
          goto fail;
        }
      n = node_new (CT_E_GETITEM, t);
      n->a = obj;
      n->b = parts[0];
    }
  return n;
fail:
  ct_node_free (obj);
  for (int k = 0; k < 3; k++)
    ct_node_free (parts[k]);
  return NULL;
}

static CtNode *
parse_postfix (Parser *p, CtNode *node)
{
  while (node)
    {
      Tok *t = peek (p);
      if ((is_op (t, ".") || is_op (t, "[") || is_op (t, "(")) && !deeper (p))
        {
          ct_node_free (node);
          return NULL;
        }
      if (is_op (t, ".") || is_op (t, "["))
        node = parse_subscript (p, node);
      else if (is_op (t, "("))
        {
          CtNode *c = node_new (CT_E_CALL, t);
          c->a = node;
          node = c;
          if (!parse_call_args (p, c))
            {
              ct_node_free (c);
              return NULL;
            }
        }
      else
        break;
    }
  return node;
}

static char *
parse_dotted_name (Parser *p)
{
  Tok *t = next (p);
  if (t->kind != T_NAME)
    {
      fail_at (p, t, "expected a filter or test name, found %s", tok_desc (t));
      return NULL;
    }
  GString *s = g_string_new (t->s);
  while (is_op (peek (p), ".") && peek_at (p, 1)->kind == T_NAME)
    {
      next (p);
      g_string_append_c (s, '.');
      g_string_append (s, next (p)->s);
    }
  return g_string_free (s, FALSE);
}

static CtNode *
parse_filter_expr (Parser *p, CtNode *node)
{
  while (node)
    {
      Tok *t = peek (p);
      if ((is_op (t, "|") || is_name (t, "is")) && !deeper (p))
        goto fail;
      if (is_op (t, "|"))
        {
          next (p);
          CtNode *f = node_new (CT_E_FILTER, t);
          f->a = node;
          node = f;
          f->str = parse_dotted_name (p);
          if (!f->str)
            goto fail;
          if (is_op (peek (p), "(") && !parse_call_args (p, f))
            goto fail;
        }
      else if (is_name (t, "is"))
        {
          next (p);
          CtNode *f = node_new (CT_E_TEST, t);
          f->a = node;
          node = f;
          if (is_name (peek (p), "not"))
            {
              next (p);
              f->negated = TRUE;
            }
          f->str = parse_dotted_name (p);
          if (!f->str)
            goto fail;
          Tok *u = peek (p);
          if (is_op (u, "("))
            {
              if (!parse_call_args (p, f))
                goto fail;
            }
          else if ((u->kind == T_NAME || u->kind == T_STRING || u->kind == T_INT || u->kind == T_FLOAT ||
                    is_op (u, "[") || is_op (u, "{")) &&
                   !is_name (u, "else") && !is_name (u, "or") && !is_name (u, "and") &&
                   !is_name (u, "if") && !is_name (u, "in") && !is_name (u, "not") && !is_name (u, "is"))
            {
              CtNode *arg = parse_postfix (p, parse_primary (p));
              if (!arg)
                goto fail;
              f->args = node_list_new ();
              g_ptr_array_add (f->args, arg);
            }
        }
      else if (is_op (t, "("))
        node = parse_postfix (p, node);
      else
        break;
    }
  return node;
fail:
  ct_node_free (node);
  return NULL;
}

static CtNode *parse_unary_level (Parser *p, gboolean with_filter);

static CtNode *
parse_unary (Parser *p, gboolean with_filter)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_unary_level (p, with_filter) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_unary_level (Parser *p, gboolean with_filter)
{
  Tok *t = peek (p);
  CtNode *node;
  if (is_op (t, "-") || is_op (t, "+"))
    {
      next (p);
      CtNode *inner = parse_unary (p, FALSE);
      if (!inner)
        return NULL;
      node = node_new (CT_E_UNARY, t);
      node->op = t->s[0];
      node->a = inner;
    }
  else
    node = parse_primary (p);
  node = parse_postfix (p, node);
  if (with_filter)
    node = parse_filter_expr (p, node);
  return node;
}

static CtNode *
binary (const Tok *t, int op, CtNode *a, CtNode *b)
{
  CtNode *n = node_new (CT_E_BINARY, t);
  n->op = op;
  n->a = a;
  n->b = b;
  return n;
}

static CtNode *parse_pow_level (Parser *p);

static CtNode *
parse_pow (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_pow_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_pow_level (Parser *p)
{
  CtNode *l = parse_unary (p, TRUE);
  while (l && is_op (peek (p), "**"))
    {
      Tok *t = next (p);
      CtNode *r = deeper (p) ? parse_unary (p, TRUE) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      l = binary (t, CT_OP_POW, l, r);
    }
  return l;
}

static CtNode *parse_math2_level (Parser *p);

static CtNode *
parse_math2 (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_math2_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_math2_level (Parser *p)
{
  CtNode *l = parse_pow (p);
  while (l)
    {
      Tok *t = peek (p);
      int op = is_op (t, "*") ? CT_OP_MUL : is_op (t, "/") ? CT_OP_DIV : is_op (t, "//") ? CT_OP_FLOORDIV
             : is_op (t, "%") ? CT_OP_MOD : 0;
      if (!op)
        break;
      next (p);
      CtNode *r = deeper (p) ? parse_pow (p) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      l = binary (t, op, l, r);
    }
  return l;
}

static CtNode *parse_concat_level (Parser *p);

static CtNode *
parse_concat (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_concat_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_concat_level (Parser *p)
{
  CtNode *l = parse_math2 (p);
  while (l && is_op (peek (p), "~"))
    {
      Tok *t = next (p);
      CtNode *r = deeper (p) ? parse_math2 (p) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      l = binary (t, CT_OP_CONCAT, l, r);
    }
  return l;
}

static CtNode *parse_math1_level (Parser *p);

static CtNode *
parse_math1 (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_math1_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_math1_level (Parser *p)
{
  CtNode *l = parse_concat (p);
  while (l)
    {
      Tok *t = peek (p);
      int op = is_op (t, "+") ? CT_OP_ADD : is_op (t, "-") ? CT_OP_SUB : 0;
      if (!op)
        break;
      next (p);
      CtNode *r = deeper (p) ? parse_concat (p) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      l = binary (t, op, l, r);
    }
  return l;
}

static CtNode *
parse_compare (Parser *p)
{
  Tok *start = peek (p);
  CtNode *l = parse_math1 (p);
  CtNode *cmp = NULL;
  while (l)
    {
      Tok *t = peek (p);
      int op = 0;
      if (is_op (t, "==")) op = CT_OP_EQ;
      else if (is_op (t, "!=")) op = CT_OP_NE;
      else if (is_op (t, "<")) op = CT_OP_LT;
      else if (is_op (t, "<=")) op = CT_OP_LE;
      else if (is_op (t, ">")) op = CT_OP_GT;
      else if (is_op (t, ">=")) op = CT_OP_GE;
      else if (is_name (t, "in")) op = CT_OP_IN;
      else if (is_name (t, "not") && is_name (peek_at (p, 1), "in")) op = CT_OP_NOTIN;
      if (!op)
        break;
      next (p);
      if (op == CT_OP_NOTIN)
        next (p);
      CtNode *r = parse_math1 (p);
      if (!r)
        {
          ct_node_free (cmp ? cmp : l);
          return NULL;
        }
      if (!cmp)
        {
          cmp = node_new (CT_E_COMPARE, start);
          cmp->a = l;
          cmp->args = node_list_new ();
          cmp->ops = g_array_new (FALSE, FALSE, sizeof (int));
        }
      g_ptr_array_add (cmp->args, r);
      g_array_append_val (cmp->ops, op);
    }
  return cmp ? cmp : l;
}

static CtNode *parse_not_level (Parser *p);

static CtNode *
parse_not (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_not_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_not_level (Parser *p)
{
  Tok *t = peek (p);
  if (is_name (t, "not"))
    {
      next (p);
      CtNode *inner = parse_not (p);
      if (!inner)
        return NULL;
      CtNode *n = node_new (CT_E_UNARY, t);
      n->op = 'n';
      n->a = inner;
      return n;
    }
  return parse_compare (p);
}

static CtNode *parse_and_level (Parser *p);

static CtNode *
parse_and (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_and_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_and_level (Parser *p)
{
  CtNode *l = parse_not (p);
  while (l && is_name (peek (p), "and"))
    {
      Tok *t = next (p);
      CtNode *r = deeper (p) ? parse_not (p) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      CtNode *n = node_new (CT_E_AND, t);
      n->a = l;
      n->b = r;
      l = n;
    }
  return l;
}

static CtNode *parse_or_level (Parser *p);

static CtNode *
parse_or (Parser *p)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_or_level (p) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_or_level (Parser *p)
{
  CtNode *l = parse_and (p);
  while (l && is_name (peek (p), "or"))
    {
      Tok *t = next (p);
      CtNode *r = deeper (p) ? parse_and (p) : NULL;
      if (!r)
        {
          ct_node_free (l);
          return NULL;
        }
      CtNode *n = node_new (CT_E_OR, t);
      n->a = l;
      n->b = r;
      l = n;
    }
  return l;
}

static CtNode *parse_expression_level (Parser *p, gboolean with_condexpr);

static CtNode *
parse_expression (Parser *p, gboolean with_condexpr)
{
  int d = p->depth;
  CtNode *n = deeper (p) ? parse_expression_level (p, with_condexpr) : NULL;
  p->depth = d;
  return n;
}

static CtNode *
parse_expression_level (Parser *p, gboolean with_condexpr)
{
  CtNode *e = parse_or (p);
  if (!with_condexpr)
    return e;
  while (e && is_name (peek (p), "if"))
    {
      Tok *t = next (p);
      CtNode *cond = deeper (p) ? parse_or (p) : NULL;
      if (!cond)
        {
          ct_node_free (e);
          return NULL;
        }
      CtNode *n = node_new (CT_E_COND, t);
      n->a = e;
      n->b = cond;
      if (is_name (peek (p), "else"))
        {
          next (p);
          n->c = parse_expression (p, TRUE);
          if (!n->c)
            {
              ct_node_free (n);
              return NULL;
            }
        }
      e = n;
    }
  return e;
}

/* ------------------------------------------------------------- statements */

static gboolean parse_body (Parser *p, GPtrArray *body, const char *const *ends, char **found);

static gboolean
expect_block_end (Parser *p)
{
  Tok *t = peek (p);
  if (t->kind != T_BLOCK_END)
    return fail_at (p, t, "expected '%%}', found %s", tok_desc (t));
  next (p);
  return TRUE;
}

static gboolean
parse_names (Parser *p, GPtrArray *targets)
{
  for (;;)
    {
      Tok *t = next (p);
      if (t->kind != T_NAME)
        return fail_at (p, t, "expected a variable name, found %s", tok_desc (t));
      g_ptr_array_add (targets, g_strdup (t->s));
      if (!is_op (peek (p), ","))
        return TRUE;
      next (p);
    }
}

static CtNode *
parse_for (Parser *p, Tok *at)
{
  g_autofree char *found = NULL;
  CtNode *n = node_new (CT_N_FOR, at);
  n->targets = g_ptr_array_new_with_free_func (g_free);
  gboolean paren = is_op (peek (p), "(");
  if (paren)
    next (p);
  if (!parse_names (p, n->targets) || (paren && !expect_op (p, ")")))
    goto fail;
  if (!is_name (peek (p), "in"))
    {
      fail_at (p, peek (p), "expected 'in' in for loop, found %s", tok_desc (peek (p)));
      goto fail;
    }
  next (p);
  n->a = parse_tuple (p, FALSE, FALSE);
  if (!n->a)
    goto fail;
  if (is_name (peek (p), "if"))
    {
      next (p);
      n->b = parse_expression (p, TRUE);
      if (!n->b)
        goto fail;
    }
  if (is_name (peek (p), "recursive"))
    {
      g_set_error (p->error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "chat template: line %d, column %d: recursive for loops are not supported",
                   peek (p)->line, peek (p)->col);
      goto fail;
    }
  if (!expect_block_end (p))
    goto fail;
  n->body = node_list_new ();
  n->else_body = node_list_new ();
  static const char *const ends[] = { "endfor", "else", NULL };
  if (!parse_body (p, n->body, ends, &found))
    goto fail;
  if (strcmp (found, "else") == 0)
    {
      static const char *const ends2[] = { "endfor", NULL };
      g_free (found);
      found = NULL;
      if (!parse_body (p, n->else_body, ends2, &found))
        goto fail;
    }
  return n;
fail:
  ct_node_free (n);
  return NULL;
}

static CtNode *
parse_if (Parser *p, Tok *at)
{
  g_autofree char *found = NULL;
  CtNode *n = node_new (CT_N_IF, at);
  n->a = parse_expression (p, TRUE);
  if (!n->a || !expect_block_end (p))
    goto fail;
  n->body = node_list_new ();
  n->else_body = node_list_new ();
  static const char *const ends[] = { "endif", "elif", "else", NULL };
  if (!parse_body (p, n->body, ends, &found))
    goto fail;
  if (strcmp (found, "elif") == 0)
    {
      int d = p->depth;
      CtNode *e = deeper (p) ? parse_if (p, at) : NULL;
      p->depth = d;
      if (!e)
        goto fail;
      g_ptr_array_add (n->else_body, e);
    }
  else if (strcmp (found, "else") == 0)
    {
      static const char *const ends2[] = { "endif", NULL };
      g_free (found);
      found = NULL;
      if (!parse_body (p, n->else_body, ends2, &found))
        goto fail;
    }
  return n;
fail:
  ct_node_free (n);
  return NULL;
}

static CtNode *
parse_set (Parser *p, Tok *at)
{
  g_autofree char *found = NULL;
  CtNode *n = node_new (CT_N_SET, at);
  n->targets = g_ptr_array_new_with_free_func (g_free);
  Tok *t = peek (p);
  if (t->kind == T_NAME && is_op (peek_at (p, 1), ".") && peek_at (p, 2)->kind == T_NAME)
    {
      /* namespace attribute: {% set ns.x = ... %} */
      next (p);
      next (p);
      n->a = node_new (CT_E_GETATTR, t);
      n->a->a = node_new (CT_E_NAME, t);
      n->a->a->str = g_strdup (t->s);
      n->a->str = g_strdup (next (p)->s);
    }
  else if (!parse_names (p, n->targets))
    goto fail;
  if (peek (p)->kind == T_BLOCK_END && !n->a && n->targets->len == 1)
    {
      /* {% set x %}...{% endset %} */
      next (p);
      n->kind = CT_N_SET_BLOCK;
      n->body = node_list_new ();
      static const char *const ends[] = { "endset", NULL };
      if (!parse_body (p, n->body, ends, &found))
        goto fail;
      return n;
    }
  if (!expect_op (p, "="))
    goto fail;
  n->b = parse_tuple (p, TRUE, FALSE);
  if (!n->b || !expect_block_end (p))
    goto fail;
  return n;
fail:
  ct_node_free (n);
  return NULL;
}

static CtNode *
parse_macro (Parser *p, Tok *at)
{
  g_autofree char *found = NULL;
  CtNode *n = node_new (CT_N_MACRO, at);
  n->targets = g_ptr_array_new_with_free_func (g_free);
  n->args = node_list_new ();
  Tok *t = next (p);
  if (t->kind != T_NAME)
    {
      fail_at (p, t, "expected a macro name, found %s", tok_desc (t));
      goto fail;
    }
  n->str = g_strdup (t->s);
  if (!expect_op (p, "("))
    goto fail;
  while (!is_op (peek (p), ")"))
    {
      if (n->targets->len && !expect_op (p, ","))
        goto fail;
      Tok *a = next (p);
      if (a->kind != T_NAME)
        {
          fail_at (p, a, "expected a parameter name, found %s", tok_desc (a));
          goto fail;
        }
      g_ptr_array_add (n->targets, g_strdup (a->s));
      CtNode *def = NULL;
      if (is_op (peek (p), "="))
        {
          next (p);
          def = parse_expression (p, TRUE);
          if (!def)
            goto fail;
        }
      g_ptr_array_add (n->args, def);
    }
  next (p);
  if (!expect_block_end (p))
    goto fail;
  n->body = node_list_new ();
  static const char *const ends[] = { "endmacro", NULL };
  if (!parse_body (p, n->body, ends, &found))
    goto fail;
  return n;
fail:
  ct_node_free (n);
  return NULL;
}

/* Parses statements until a block tag named in `ends` (NULL: end of input).
 * The terminating tag is consumed; *found gets its name. */
static gboolean parse_body_level (Parser *p, GPtrArray *body, const char *const *ends, char **found);

static gboolean
parse_body (Parser *p, GPtrArray *body, const char *const *ends, char **found)
{
  int d = p->depth;
  gboolean ok = deeper (p) && parse_body_level (p, body, ends, found);
  p->depth = d;
  return ok;
}

static gboolean
parse_body_level (Parser *p, GPtrArray *body, const char *const *ends, char **found)
{
  for (;;)
    {
      Tok *t = next (p);
      switch (t->kind)
        {
        case T_EOF:
          if (ends)
            return fail_at (p, t, "unexpected end of template: missing {%% %s %%}", ends[0]);
          return TRUE;
        case T_TEXT:
          {
            CtNode *n = node_new (CT_N_TEXT, t);
            n->str = g_strndup (t->s, t->len);
            n->str_len = t->len;
            g_ptr_array_add (body, n);
            break;
          }
        case T_VAR_BEGIN:
          {
            CtNode *n = node_new (CT_N_OUTPUT, t);
            n->a = parse_tuple (p, TRUE, FALSE);
            if (!n->a)
              {
                ct_node_free (n);
                return FALSE;
              }
            g_ptr_array_add (body, n);
            Tok *e = next (p);
            if (e->kind != T_VAR_END)
              return fail_at (p, e, "expected '}}', found %s", tok_desc (e));
            break;
          }
        case T_BLOCK_BEGIN:
          {
            Tok *kw = next (p);
            if (kw->kind != T_NAME)
              return fail_at (p, kw, "expected a statement name after '{%%', found %s", tok_desc (kw));
            for (const char *const *e = ends; e && *e; e++)
              if (strcmp (kw->s, *e) == 0)
                {
                  *found = g_strdup (kw->s);
                  /* `else`/`endif`/... take no arguments; `elif` is handled by the caller */
                  if (strcmp (kw->s, "elif") == 0)
                    return TRUE;
                  return expect_block_end (p);
                }
            CtNode *n = NULL;
            if (!strcmp (kw->s, "if"))
              n = parse_if (p, kw);
            else if (!strcmp (kw->s, "for"))
              n = parse_for (p, kw);
            else if (!strcmp (kw->s, "set"))
              n = parse_set (p, kw);
            else if (!strcmp (kw->s, "macro"))
              n = parse_macro (p, kw);
            else if (!strcmp (kw->s, "break") || !strcmp (kw->s, "continue"))
              {
                n = node_new (kw->s[0] == 'b' ? CT_N_BREAK : CT_N_CONTINUE, kw);
                if (!expect_block_end (p))
                  {
                    ct_node_free (n);
                    return FALSE;
                  }
              }
            else if (!strcmp (kw->s, "generation"))
              {
                n = node_new (CT_N_GENERATION, kw);
                n->body = node_list_new ();
                static const char *const gends[] = { "endgeneration", NULL };
                g_autofree char *f = NULL;
                if (!expect_block_end (p) || !parse_body (p, n->body, gends, &f))
                  {
                    ct_node_free (n);
                    return FALSE;
                  }
              }
            else if (!strcmp (kw->s, "filter"))
              {
                n = node_new (CT_N_FILTER_BLOCK, kw);
                n->body = node_list_new ();
                /* parse `name(args) | name2` as a filter chain over a NULL operand */
                CtNode *chain = NULL;
                do
                  {
                    if (!deeper (p))
                      {
                        ct_node_free (chain);
                        ct_node_free (n);
                        return FALSE;
                      }
                    if (chain)
                      next (p); /* '|' */
                    CtNode *f = node_new (CT_E_FILTER, peek (p));
                    f->a = chain;
                    chain = f;
                    f->str = parse_dotted_name (p);
                    if (!f->str || (is_op (peek (p), "(") && !parse_call_args (p, f)))
                      {
                        ct_node_free (chain);
                        ct_node_free (n);
                        return FALSE;
                      }
                  }
                while (is_op (peek (p), "|"));
                n->a = chain;
                static const char *const fends[] = { "endfilter", NULL };
                g_autofree char *f = NULL;
                if (!expect_block_end (p) || !parse_body (p, n->body, fends, &f))
                  {
                    ct_node_free (n);
                    return FALSE;
                  }
              }
            else if (!strcmp (kw->s, "include") || !strcmp (kw->s, "import") || !strcmp (kw->s, "from") ||
                     !strcmp (kw->s, "extends") || !strcmp (kw->s, "block") || !strcmp (kw->s, "call") ||
                     !strcmp (kw->s, "with") || !strcmp (kw->s, "do") || !strcmp (kw->s, "autoescape"))
              {
                g_set_error (p->error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                             "chat template: line %d, column %d: the '%s' statement is not supported",
                             kw->line, kw->col, kw->s);
                return FALSE;
              }
            else
              return fail_at (p, kw, "unknown statement '%s'%s%s", kw->s,
                              ends ? ", expected " : "", ends ? ends[0] : "");
            if (!n)
              return FALSE;
            g_ptr_array_add (body, n);
            break;
          }
        default:
          return fail_at (p, t, "unexpected %s", tok_desc (t));
        }
    }
}

GPtrArray *
ct_parse (const char *source, GError **error)
{
  /* Normalise newlines and drop one trailing newline, as jinja2 does. */
  GString *src = g_string_sized_new (strlen (source));
  for (const char *s = source; *s; s++)
    {
      if (*s == '\r')
        {
          g_string_append_c (src, '\n');
          if (s[1] == '\n')
            s++;
        }
      else
        g_string_append_c (src, *s);
    }
  if (src->len && src->str[src->len - 1] == '\n')
    g_string_truncate (src, src->len - 1);

  Lexer lx = { src->str, src->len, g_array_new (FALSE, TRUE, sizeof (Tok)), error };
  GPtrArray *body = NULL;
  if (lex_all (&lx))
    {
      Parser p = { (Tok *) (void *) lx.toks->data, lx.toks->len, 0, error };
      body = node_list_new ();
      if (!parse_body (&p, body, NULL, NULL))
        g_clear_pointer (&body, g_ptr_array_unref);
    }
  for (guint k = 0; k < lx.toks->len; k++)
    g_free (g_array_index (lx.toks, Tok, k).s);
  g_array_unref (lx.toks);
  g_string_free (src, TRUE);
  return body;
}
