/* Internals of the Jinja-subset chat template engine, shared by the
 * lexer/parser (chat-template-parse.c) and the evaluator (chat-template.c).
 * Not part of the engine's API. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  /* statements */
  CT_N_TEXT,        /* str: literal output */
  CT_N_OUTPUT,      /* a: expression to print */
  CT_N_IF,          /* a: condition, body, else_body (elif = nested CT_N_IF) */
  CT_N_FOR,         /* targets: loop names, a: iterable, b: filter (may be NULL),
                       body, else_body */
  CT_N_SET,         /* targets: names, or a: target (name or ns.attr), b: value */
  CT_N_SET_BLOCK,   /* targets[0]: name, body (rendered into the variable) */
  CT_N_MACRO,       /* str: name, targets: params, args: defaults (NULL = none), body */
  CT_N_BREAK,
  CT_N_CONTINUE,
  CT_N_GENERATION,  /* body: output that is the assistant's (transformers' tag) */
  CT_N_FILTER_BLOCK,/* a: filter chain applied to the rendered body (a->a is NULL) */
  /* expressions */
  CT_E_LITERAL,     /* lit_kind + ival/fval/str */
  CT_E_NAME,        /* str */
  CT_E_LIST,        /* args */
  CT_E_TUPLE,       /* args */
  CT_E_DICT,        /* args: keys, kwargs: values */
  CT_E_GETATTR,     /* a: object, str: attribute */
  CT_E_GETITEM,     /* a: object, b: index */
  CT_E_SLICE,       /* a: object, b: start, c: stop, d: step (each may be NULL) */
  CT_E_CALL,        /* a: callee, args, kwnames + kwargs */
  CT_E_FILTER,      /* a: operand, str: name, args, kwnames + kwargs */
  CT_E_TEST,        /* a: operand, str: name, args, negated */
  CT_E_UNARY,       /* op: '-' '+' or 'n' (not), a */
  CT_E_BINARY,      /* op, a, b */
  CT_E_AND,         /* a, b */
  CT_E_OR,          /* a, b */
  CT_E_COMPARE,     /* a, args: operands after a, ops: operators */
  CT_E_COND,        /* a: value if true, b: condition, c: else (may be NULL) */
} CtNodeKind;

/* Binary and comparison operators. */
enum {
  CT_OP_ADD = 1, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_FLOORDIV, CT_OP_MOD, CT_OP_POW,
  CT_OP_CONCAT,
  CT_OP_EQ, CT_OP_NE, CT_OP_LT, CT_OP_LE, CT_OP_GT, CT_OP_GE, CT_OP_IN, CT_OP_NOTIN,
};

typedef enum { CT_LIT_NONE, CT_LIT_BOOL, CT_LIT_INT, CT_LIT_FLOAT, CT_LIT_STRING } CtLitKind;

typedef struct _CtNode CtNode;
struct _CtNode {
  CtNodeKind kind;
  int line, col;
  char *str;
  CtLitKind lit_kind;
  gint64 ival;
  double fval;
  gsize str_len;        /* literal strings may hold NUL */
  int op;
  gboolean negated;
  CtNode *a, *b, *c, *d;
  GPtrArray *body;      /* CtNode* statements */
  GPtrArray *else_body;
  GPtrArray *args;      /* CtNode* (elements may be NULL for macro defaults) */
  GPtrArray *kwnames;   /* char* */
  GPtrArray *kwargs;    /* CtNode* */
  GPtrArray *targets;   /* char* */
  GArray *ops;          /* int, CT_E_COMPARE */
};

/* Parses `source` with transformers' settings (trim_blocks, lstrip_blocks,
 * no trailing newline kept). Returns the top-level statement list; errors
 * name line and column. */
GPtrArray *ct_parse (const char *source, GError **error);
void ct_node_free (CtNode *n);

G_END_DECLS
