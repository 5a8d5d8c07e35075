/* Dataset loading, tokenization, masking, packing and batching (see dataset.h). */
#include "data/dataset.h"
#include "template/chat-template.h"
#include "formats/parquet.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"

#include <gio/gio.h>
#include <math.h>
#include <string.h>

#define IGNORE_INDEX (-100)
#define PREVIEW_SEGMENT_MAX 4000

struct _HnDataset {
  GArray *ids;       /* int32_t: the examples back to back, or (packed) the one token stream their
                        windows overlap in, held once (shared by the parts of a split) */
  GArray *id_starts; /* guint64 per example: where a packed example starts in ids; NULL unpacked */
  GArray *labels;    /* int32_t, the examples back to back */
  GArray *weights;   /* float, as labels; NULL while every weight is the default */
  GArray *offsets;   /* guint64, n_examples + 1: example k's labels are [offsets[k], offsets[k + 1]) */
  HnDatasetStats stats;
  guint seq_len;
};

static const char *const shape_names[] = {
  "auto", "text", "instruction", "prompt-completion", "qa", "messages", "tokens",
};

const char *
hn_dataset_shape_to_string (HnDatasetShape shape)
{
  if ((guint) shape < G_N_ELEMENTS (shape_names))
    return shape_names[shape];
  return "unknown";
}

gboolean
hn_dataset_shape_from_string (const char *name, HnDatasetShape *shape, GError **error)
{
  static const struct { const char *name; HnDatasetShape shape; } aliases[] = {
    { "alpaca", HN_DATASET_SHAPE_INSTRUCTION }, { "chat", HN_DATASET_SHAPE_MESSAGES },
    { "pretokenized", HN_DATASET_SHAPE_TOKENS }, { "pre-tokenized", HN_DATASET_SHAPE_TOKENS },
    { "prompt_completion", HN_DATASET_SHAPE_PROMPT_COMPLETION }, { "question-answer", HN_DATASET_SHAPE_QA },
  };
  for (guint k = 0; k < G_N_ELEMENTS (shape_names); k++)
    if (g_ascii_strcasecmp (name, shape_names[k]) == 0)
      {
        *shape = k;
        return TRUE;
      }
  for (guint k = 0; k < G_N_ELEMENTS (aliases); k++)
    if (g_ascii_strcasecmp (name, aliases[k].name) == 0)
      {
        *shape = aliases[k].shape;
        return TRUE;
      }
  g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
               "unknown dataset shape '%s' (expected auto, text, instruction, prompt-completion, qa, "
               "messages or tokens)", name);
  return FALSE;
}

void
hn_dataset_options_init (HnDatasetOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->shape = HN_DATASET_SHAPE_AUTO;
  opts->seq_len = 256;
  opts->pack = TRUE;
  opts->mask_prompt = TRUE;
  opts->add_eos = TRUE;
  opts->on_error = HN_DATASET_ON_ERROR_FAIL;
}

/* ------------------------------------------------------------- the loader */

typedef struct {
  char *text;        /* NULL for a special token */
  int32_t special;   /* token id when text is NULL */
  gboolean trained;
} Piece;

static void
piece_clear (Piece *p)
{
  g_free (p->text);
}

typedef struct {
  const char *path;
  char *display;      /* basename for messages */
  HnTokenizer *tok;
  HnDatasetOptions opts;
  HnDatasetShape shape;
  HnChatTemplate *tmpl;
  HnDataset *ds;       /* output (load mode) */
  GPtrArray *preview;  /* output (preview mode), HnDatasetPreviewRow* */
  guint preview_max;
  /* packing: the rows' tokens go straight into the dataset's stream (ds->ids) */
  GArray *doc_starts;  /* guint64: stream positions of a document's BOS, which is no target */
  char *txt_text;      /* a .txt file's text, for its one row to take */
  gboolean packing;
  int32_t vocab;
  guint64 cut_from;    /* preview: bytes of the row's text before the cut, 0 = not cut */
  guint64 cut_to;
} Loader;

/* A JSONL row is read whole (json-glib needs it so), json-glib copies its
 * strings and parses at some 20 MB/s: a longer line is a bad row (skipped
 * with on-error=skip), read past without keeping it, so a file of no
 * newlines neither fills memory nor takes minutes. */
#define HN_MAX_JSONL_LINE_BYTES (64u << 20)
/* A .json dataset is one JSON document read whole into a tree several times
 * its size: bigger ones must be JSONL, which is read a row at a time. */
#define HN_MAX_JSON_DATASET_BYTES (64u << 20)

static void
set_reason (char *dst, const char *msg)
{
  if (!dst[0])
    g_strlcpy (dst, msg, 256);
}

static void
add_text_piece (GArray *pieces, const char *text, gssize len, gboolean trained)
{
  Piece p = { len < 0 ? g_strdup (text) : g_strndup (text, len), -1, trained };
  g_array_append_val (pieces, p);
}

static void
add_special_piece (GArray *pieces, int32_t id, gboolean trained)
{
  Piece p = { NULL, id, trained };
  g_array_append_val (pieces, p);
}

static const char *
get_string_member (JsonObject *o, const char *name, gboolean required, GError **error)
{
  JsonNode *n = json_object_get_member (o, name);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    {
      if (required)
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "missing \"%s\"", name);
      return NULL;
    }
  if (!JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_STRING)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"%s\" must be a string", name);
      return NULL;
    }
  return json_node_get_string (n);
}

static HnDatasetShape
detect_shape (JsonObject *o)
{
  if (json_object_has_member (o, "messages") || json_object_has_member (o, "conversations"))
    return HN_DATASET_SHAPE_MESSAGES;
  if (json_object_has_member (o, "input_ids"))
    return HN_DATASET_SHAPE_TOKENS;
  if (json_object_has_member (o, "instruction") && json_object_has_member (o, "output"))
    return HN_DATASET_SHAPE_INSTRUCTION;
  if (json_object_has_member (o, "prompt") && json_object_has_member (o, "completion"))
    return HN_DATASET_SHAPE_PROMPT_COMPLETION;
  if (json_object_has_member (o, "question") && json_object_has_member (o, "answer"))
    return HN_DATASET_SHAPE_QA;
  if (json_object_has_member (o, "text") || json_object_has_member (o, "content"))
    return HN_DATASET_SHAPE_TEXT;
  return HN_DATASET_SHAPE_AUTO;
}

static char *
describe_keys (JsonObject *o)
{
  GString *s = g_string_new (NULL);
  GList *names = json_object_get_members (o);
  for (GList *l = names; l; l = l->next)
    g_string_append_printf (s, "%s\"%s\"", s->len ? ", " : "", (const char *) l->data);
  g_list_free (names);
  if (!s->len)
    g_string_append (s, "none");
  return g_string_free (s, FALSE);
}

/* ShareGPT rows {"conversations": [{"from": "human", "value": ...}]} as messages. */
static JsonNode *
sharegpt_to_messages (JsonArray *conv, GError **error)
{
  JsonArray *out = json_array_new ();
  for (guint k = 0; k < json_array_get_length (conv); k++)
    {
      JsonNode *e = json_array_get_element (conv, k);
      if (!JSON_NODE_HOLDS_OBJECT (e))
        {
          json_array_unref (out);
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "conversations[%u] is not an object", k);
          return NULL;
        }
      JsonObject *m = json_node_get_object (e);
      const char *from = get_string_member (m, "from", TRUE, error);
      const char *value = from ? get_string_member (m, "value", TRUE, error) : NULL;
      if (!value)
        {
          json_array_unref (out);
          g_prefix_error (error, "conversations[%u]: ", k);
          return NULL;
        }
      const char *role = from;
      if (!strcmp (from, "human") || !strcmp (from, "user"))
        role = "user";
      else if (!strcmp (from, "gpt") || !strcmp (from, "assistant") || !strcmp (from, "model"))
        role = "assistant";
      JsonObject *nm = json_object_new ();
      json_object_set_string_member (nm, "role", role);
      json_object_set_string_member (nm, "content", value);
      json_array_add_object_element (out, nm);
    }
  JsonNode *n = json_node_new (JSON_NODE_ARRAY);
  json_node_take_array (n, out);
  return n;
}

static gboolean
ensure_template (Loader *L, GError **error)
{
  if (L->tmpl)
    return TRUE;
  const char *src = L->opts.chat_template ? L->opts.chat_template : hn_tokenizer_get_chat_template (L->tok);
  if (!src)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "chat rows need a chat template, and the tokenizer (%s) has none in "
                   "tokenizer_config.json; give one explicitly", hn_tokenizer_get_path (L->tok));
      return FALSE;
    }
  g_autofree char *name = L->opts.chat_template ? g_strdup ("the given chat template")
                                                : g_strdup_printf ("tokenizer_config.json of %s", hn_tokenizer_get_path (L->tok));
  L->tmpl = hn_chat_template_new_named (src, name, error);
  return L->tmpl != NULL;
}

static gboolean
messages_pieces (Loader *L, JsonObject *row, GArray *pieces, gboolean *fatal, GError **error)
{
  g_autoptr (JsonNode) converted = NULL;
  JsonNode *msgs = json_object_get_member (row, "messages");
  if (!msgs)
    {
      JsonNode *conv = json_object_get_member (row, "conversations");
      if (!conv || !JSON_NODE_HOLDS_ARRAY (conv))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "missing \"messages\" array");
          return FALSE;
        }
      converted = sharegpt_to_messages (json_node_get_array (conv), error);
      if (!converted)
        return FALSE;
      msgs = converted;
    }
  if (!JSON_NODE_HOLDS_ARRAY (msgs) || json_array_get_length (json_node_get_array (msgs)) == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"messages\" must be a non-empty array");
      return FALSE;
    }
  JsonArray *arr = json_node_get_array (msgs);
  for (guint k = 0; k < json_array_get_length (arr); k++)
    {
      JsonNode *e = json_array_get_element (arr, k);
      if (!JSON_NODE_HOLDS_OBJECT (e))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "messages[%u] is not an object", k);
          return FALSE;
        }
      if (!get_string_member (json_node_get_object (e), "role", TRUE, error))
        {
          g_prefix_error (error, "messages[%u]: ", k);
          return FALSE;
        }
    }
  if (!ensure_template (L, error))
    {
      *fatal = TRUE; /* no usable template: no row can work */
      return FALSE;
    }
  JsonNode *tools = json_object_get_member (row, "tools");
  HnChatRenderArgs args = {
    msgs, tools && !JSON_NODE_HOLDS_NULL (tools) ? tools : NULL, FALSE,
    hn_tokenizer_get_bos_token (L->tok), hn_tokenizer_get_eos_token (L->tok), L->opts.chat_template_kwargs,
  };
  g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (HnChatSpan));
  g_autofree char *text = hn_chat_template_apply (L->tmpl, &args, spans, error);
  if (!text)
    return FALSE;
  gsize pos = 0;
  for (guint k = 0; k < spans->len; k++)
    {
      HnChatSpan *s = &g_array_index (spans, HnChatSpan, k);
      if (s->start < pos || s->end < s->start)
        continue; /* overlapping spans cannot happen for real templates; stay safe */
      if (s->start > pos)
        add_text_piece (pieces, text + pos, s->start - pos, FALSE);
      if (s->end > s->start)
        add_text_piece (pieces, text + s->start, s->end - s->start, TRUE);
      pos = s->end;
    }
  if (text[pos])
    add_text_piece (pieces, text + pos, -1, FALSE);
  if (spans->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "the conversation has no assistant turn to learn from");
      return FALSE;
    }
  return TRUE;
}

/* Turns a row into pieces of text (trained or not) and special tokens. */
static gboolean
row_pieces (Loader *L, JsonObject *row, GArray *pieces, gboolean *fatal, GError **error)
{
  int32_t bos = hn_tokenizer_get_bos_id (L->tok), eos = hn_tokenizer_get_eos_id (L->tok);
  gboolean want_bos = hn_tokenizer_get_add_bos (L->tok) && bos >= 0;
  const char *prompt = NULL, *completion = NULL;
  g_autofree char *prompt_owned = NULL;
  switch (L->shape)
    {
    case HN_DATASET_SHAPE_TEXT:
      {
        const char *key = json_object_has_member (row, "text") ? "text" : "content";
        const char *t = get_string_member (row, key, TRUE, error);
        if (!t)
          return FALSE;
        if (want_bos)
          add_special_piece (pieces, bos, FALSE);
        if (L->txt_text)
          {
            /* a .txt file's text is handed over, not copied (it is the whole file) */
            Piece p = { g_steal_pointer (&L->txt_text), -1, TRUE };
            g_array_append_val (pieces, p);
          }
        else
          add_text_piece (pieces, t, -1, TRUE);
        if (L->opts.add_eos && eos >= 0)
          add_special_piece (pieces, eos, TRUE);
        return TRUE;
      }
    case HN_DATASET_SHAPE_INSTRUCTION:
      {
        const char *ins = get_string_member (row, "instruction", TRUE, error);
        if (!ins)
          return FALSE;
        GError *e2 = NULL;
        const char *input = get_string_member (row, "input", FALSE, &e2);
        if (e2)
          {
            g_propagate_error (error, e2);
            return FALSE;
          }
        completion = get_string_member (row, "output", TRUE, error);
        if (!completion)
          return FALSE;
        if (input && *input)
          prompt_owned = g_strdup_printf ("Below is an instruction that describes a task, paired with an input that "
                                          "provides further context. Write a response that appropriately completes "
                                          "the request.\n\n### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:\n",
                                          ins, input);
        else
          prompt_owned = g_strdup_printf ("Below is an instruction that describes a task. Write a response that "
                                          "appropriately completes the request.\n\n### Instruction:\n%s\n\n"
                                          "### Response:\n", ins);
        prompt = prompt_owned;
        break;
      }
    case HN_DATASET_SHAPE_PROMPT_COMPLETION:
      prompt = get_string_member (row, "prompt", TRUE, error);
      completion = prompt ? get_string_member (row, "completion", TRUE, error) : NULL;
      if (!completion)
        return FALSE;
      break;
    case HN_DATASET_SHAPE_QA:
      {
        const char *q = get_string_member (row, "question", TRUE, error);
        completion = q ? get_string_member (row, "answer", TRUE, error) : NULL;
        if (!completion)
          return FALSE;
        prompt = prompt_owned = g_strdup_printf ("Question: %s\nAnswer: ", q);
        break;
      }
    case HN_DATASET_SHAPE_MESSAGES:
      return messages_pieces (L, row, pieces, fatal, error);
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "internal: bad shape");
      return FALSE;
    }
  if (want_bos)
    add_special_piece (pieces, bos, FALSE);
  if (*prompt)
    add_text_piece (pieces, prompt, -1, FALSE);
  add_text_piece (pieces, completion, -1, TRUE);
  if (L->opts.add_eos && eos >= 0)
    add_special_piece (pieces, eos, TRUE);
  return TRUE;
}

static gboolean
json_int_array (JsonObject *row, const char *name, gboolean required, GArray *out, GError **error)
{
  JsonNode *n = json_object_get_member (row, name);
  if (!n || JSON_NODE_HOLDS_NULL (n))
    {
      if (required)
        g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "missing \"%s\"", name);
      return !required;
    }
  if (!JSON_NODE_HOLDS_ARRAY (n))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"%s\" must be an array of integers", name);
      return FALSE;
    }
  JsonArray *a = json_node_get_array (n);
  for (guint k = 0; k < json_array_get_length (a); k++)
    {
      JsonNode *e = json_array_get_element (a, k);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_INT64)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s[%u] is not an integer", name, k);
          return FALSE;
        }
      gint64 v = json_node_get_int (e);
      if (v < G_MININT32 || v > G_MAXINT32)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s[%u] = %" G_GINT64_FORMAT " is out of range", name, k, v);
          return FALSE;
        }
      int32_t x = (int32_t) v;
      g_array_append_val (out, x);
    }
  return TRUE;
}

/* The pre-tokenized shape: validates and fills ids/labels/weights directly. */
static gboolean
row_tokens (Loader *L, JsonObject *row, GArray *ids, GArray *labels, GArray *weights, GError **error)
{
  g_autoptr (GArray) in_ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) in_labels = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) in_mask = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) in_w = g_array_new (FALSE, FALSE, sizeof (float));
  if (!json_int_array (row, "input_ids", TRUE, in_ids, error) ||
      !json_int_array (row, "labels", FALSE, in_labels, error) ||
      !json_int_array (row, "attention_mask", FALSE, in_mask, error))
    return FALSE;
  guint n = in_ids->len;
  if (n == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"input_ids\" is empty");
      return FALSE;
    }
  if (json_object_has_member (row, "labels") && in_labels->len != n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"labels\" has %u entries, \"input_ids\" %u", in_labels->len, n);
      return FALSE;
    }
  if (json_object_has_member (row, "attention_mask") && in_mask->len != n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"attention_mask\" has %u entries, \"input_ids\" %u", in_mask->len, n);
      return FALSE;
    }
  JsonNode *wn = json_object_get_member (row, "loss_weights");
  if (wn && !JSON_NODE_HOLDS_NULL (wn))
    {
      if (!JSON_NODE_HOLDS_ARRAY (wn) || json_array_get_length (json_node_get_array (wn)) != n)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "\"loss_weights\" must be an array of %u numbers", n);
          return FALSE;
        }
      JsonArray *a = json_node_get_array (wn);
      for (guint k = 0; k < n; k++)
        {
          JsonNode *e = json_array_get_element (a, k);
          GType t = JSON_NODE_HOLDS_VALUE (e) ? json_node_get_value_type (e) : G_TYPE_INVALID;
          if (t != G_TYPE_INT64 && t != G_TYPE_DOUBLE)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "loss_weights[%u] is not a number", k);
              return FALSE;
            }
          double d = json_node_get_double (e);
          if (!isfinite (d) || d < 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "loss_weights[%u] = %g must be finite and >= 0", k, d);
              return FALSE;
            }
          float f = (float) d;
          g_array_append_val (in_w, f);
        }
    }
  for (guint k = 0; k < n; k++)
    {
      int32_t id = g_array_index (in_ids, int32_t, k);
      if (id < 0 || id >= L->vocab)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "input_ids[%u] = %d is outside the vocabulary (0..%d)",
                       k, id, L->vocab - 1);
          return FALSE;
        }
      int32_t lab = in_labels->len ? g_array_index (in_labels, int32_t, k) : id;
      if (lab != IGNORE_INDEX && (lab < 0 || lab >= L->vocab))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "labels[%u] = %d is neither -100 nor in the vocabulary", k, lab);
          return FALSE;
        }
      if (in_mask->len)
        {
          int32_t m = g_array_index (in_mask, int32_t, k);
          if (m != 0 && m != 1)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "attention_mask[%u] = %d must be 0 or 1", k, m);
              return FALSE;
            }
          if (m == 0)
            continue; /* padding: not part of the example */
        }
      float w = lab == IGNORE_INDEX ? 0.0f : in_w->len ? g_array_index (in_w, float, k) : 1.0f;
      g_array_append_val (ids, id);
      g_array_append_val (labels, lab);
      g_array_append_val (weights, w);
    }
  return TRUE;
}

/* labels and weights are NULL for packed text (its labels come from the stream). */
static void
push_labelled (Loader *L, const int32_t *ids, guint n, gboolean trained, GArray *ids_out, GArray *labels, GArray *weights)
{
  trained = trained || !L->opts.mask_prompt;
  g_array_append_vals (ids_out, ids, n);
  for (guint j = 0; labels && j < n; j++)
    {
      int32_t lab = trained ? ids[j] : IGNORE_INDEX;
      float w = trained ? 1.0f : 0.0f;
      g_array_append_val (labels, lab);
      g_array_append_val (weights, w);
    }
}

static gboolean
ids_equal (GArray *a, GArray *b)
{
  return a->len == b->len && memcmp (a->data, b->data, a->len * sizeof (int32_t)) == 0;
}

/* Tokenizes a run of consecutive text pieces as ONE string, as the model will
 * see it, and labels each token by the piece it comes from. Tokenizing the
 * pieces one by one is not the same for every tokenizer (SentencePiece's
 * Metaspace puts a word-start marker at the start of each encode call, BPE
 * may merge across a boundary), so piece boundaries are found by encoding the
 * prefixes up to them when the piecewise result differs. A token straddling a
 * boundary belongs to the later piece. */
static gboolean
tokenize_run (Loader *L, Piece *pieces, guint n_pieces, GArray *ids, GArray *labels, GArray *weights, GError **error)
{
  GString *text = g_string_new (NULL);
  g_autofree gsize *bounds = g_new (gsize, n_pieces + 1);
  for (guint k = 0; n_pieces > 1 && k < n_pieces; k++) /* one piece (a text file) is encoded in place */
    {
      bounds[k] = text->len;
      g_string_append (text, pieces[k].text);
    }
  bounds[n_pieces] = text->len;
  g_autoptr (GArray) full = g_array_new (FALSE, FALSE, sizeof (int32_t));
  gboolean ok = n_pieces == 1 ? hn_tokenizer_encode (L->tok, pieces[0].text, -1, FALSE, full, error)
                              : hn_tokenizer_encode (L->tok, text->str, text->len, FALSE, full, error);
  g_autofree guint *tok_bounds = g_new0 (guint, n_pieces + 1);
  if (ok && n_pieces > 1)
    {
      g_autoptr (GArray) piecewise = g_array_new (FALSE, FALSE, sizeof (int32_t));
      for (guint k = 0; k < n_pieces && ok; k++)
        {
          tok_bounds[k] = piecewise->len;
          ok = hn_tokenizer_encode (L->tok, pieces[k].text, -1, FALSE, piecewise, error);
        }
      if (ok && !ids_equal (piecewise, full))
        {
          /* The probe is the prefix plus a control character that merges
           * with nothing: tokenizers that strip or rewrite the end of a text
           * (SentencePiece normalizers) then tokenize the prefix's end as in
           * the full text, and the common prefix stops at the boundary. */
          g_autoptr (GArray) prefix = g_array_new (FALSE, FALSE, sizeof (int32_t));
          GString *probe = g_string_new (NULL);
          for (guint k = 1; k < n_pieces && ok; k++)
            {
              /* A boundary right after a special token is exact: the text
               * after it is tokenized as a new segment either way. */
              g_array_set_size (prefix, 0);
              ok = hn_tokenizer_encode (L->tok, text->str, bounds[k], FALSE, prefix, error);
              if (ok && prefix->len && prefix->len <= full->len &&
                  hn_tokenizer_is_special (L->tok, g_array_index (prefix, int32_t, prefix->len - 1)) &&
                  memcmp (prefix->data, full->data, prefix->len * sizeof (int32_t)) == 0)
                {
                  tok_bounds[k] = MAX (prefix->len, tok_bounds[k - 1]);
                  continue;
                }
              g_array_set_size (prefix, 0);
              g_string_truncate (probe, 0);
              g_string_append_len (probe, text->str, bounds[k]);
              g_string_append_c (probe, '\x01');
              ok = hn_tokenizer_encode (L->tok, probe->str, probe->len, FALSE, prefix, error);
              guint lcp = 0;
              while (ok && lcp < prefix->len && lcp < full->len &&
                     g_array_index (prefix, int32_t, lcp) == g_array_index (full, int32_t, lcp))
                lcp++;
              tok_bounds[k] = MAX (lcp, tok_bounds[k - 1]);
            }
          g_string_free (probe, TRUE);
        }
    }
  tok_bounds[n_pieces] = full->len;
  for (guint k = 0; k < n_pieces && ok; k++)
    if (tok_bounds[k + 1] > tok_bounds[k]) /* an empty piece (or an empty full) has no ids to point at */
      push_labelled (L, &g_array_index (full, int32_t, tok_bounds[k]), tok_bounds[k + 1] - tok_bounds[k],
                     pieces[k].trained, ids, labels, weights);
  g_string_free (text, TRUE);
  return ok;
}

/* The preview shows at most seq_len + 1 tokens of a row, so it tokenizes only
 * the text those can come from (generously: 64 bytes a token, at least 1 MiB)
 * instead of a 300 MB row whole, which takes tens of GB in the tokenizer. */
static void
preview_cut (Loader *L, GArray *pieces)
{
  gsize budget = MAX ((gsize) 1 << 20, ((gsize) L->opts.seq_len + 1) * 64), used = 0;
  guint64 full = 0;
  guint keep = pieces->len;
  for (guint k = 0; k < pieces->len; k++)
    {
      Piece *p = &g_array_index (pieces, Piece, k);
      gsize len = p->text ? strlen (p->text) : 0;
      full += len;
      if (keep < pieces->len || used + len <= budget)
        {
          used += len;
          continue;
        }
      gsize cut = budget - used;
      while (cut > 0 && ((guchar) p->text[cut] & 0xC0) == 0x80) /* not inside a character */
        cut--;
      p->text[cut] = '\0';
      used += cut;
      keep = k + 1;
    }
  if (keep < pieces->len || used < full)
    {
      L->cut_from = full;
      L->cut_to = used;
      g_array_set_size (pieces, keep);
    }
}

static gboolean
tokenize_pieces (Loader *L, GArray *pieces, GArray *ids, GArray *labels, GArray *weights, GError **error)
{
  guint k = 0;
  L->cut_from = L->cut_to = 0;
  if (L->preview)
    preview_cut (L, pieces);
  while (k < pieces->len)
    {
      Piece *p = &g_array_index (pieces, Piece, k);
      if (!p->text)
        {
          push_labelled (L, &p->special, 1, p->trained, ids, labels, weights);
          k++;
          continue;
        }
      guint j = k;
      while (j < pieces->len && g_array_index (pieces, Piece, j).text)
        j++;
      if (!tokenize_run (L, p, j - k, ids, labels, weights, error))
        return FALSE;
      k = j;
    }
  return TRUE;
}

static guint
count_targets (const int32_t *labels, guint n)
{
  guint c = 0;
  for (guint k = 1; k < n; k++)
    c += labels[k] != IGNORE_INDEX;
  return c;
}

/* Weights are kept only once some token's weight is not the default (1 where
 * there is a label, 0 elsewhere): a third less memory for most datasets. */
static gboolean
default_weights (const int32_t *labels, const float *weights, guint n)
{
  for (guint k = 0; weights && k < n; k++)
    if (weights[k] != (labels[k] == IGNORE_INDEX ? 0.0f : 1.0f))
      return FALSE;
  return TRUE;
}

/* Adds an example: its ids appended (unpacked), or (packed, ids NULL) the
 * window of the stream at id_start. */
static void
dataset_add (HnDataset *ds, const int32_t *ids, guint64 id_start, const int32_t *labels, const float *weights, guint n)
{
  if (!ds->weights && !default_weights (labels, weights, n))
    {
      ds->weights = g_array_sized_new (FALSE, FALSE, sizeof (float), ds->labels->len + n);
      for (guint k = 0; k < ds->labels->len; k++)
        {
          float w = g_array_index (ds->labels, int32_t, k) == IGNORE_INDEX ? 0.0f : 1.0f;
          g_array_append_val (ds->weights, w);
        }
    }
  if (ds->id_starts)
    g_array_append_val (ds->id_starts, id_start);
  else
    g_array_append_vals (ds->ids, ids, n);
  g_array_append_vals (ds->labels, labels, n);
  if (ds->weights)
    {
      if (weights)
        g_array_append_vals (ds->weights, weights, n);
      else
        for (guint k = 0; k < n; k++)
          {
            float w = labels[k] == IGNORE_INDEX ? 0.0f : 1.0f;
            g_array_append_val (ds->weights, w);
          }
    }
  guint64 end = ds->labels->len;
  g_array_append_val (ds->offsets, end);
  ds->stats.n_examples++;
  ds->stats.n_tokens += n;
  ds->stats.n_target_tokens += count_targets (labels, n);
}

static HnDataset *
dataset_new (guint seq_len)
{
  HnDataset *ds = g_new0 (HnDataset, 1);
  ds->ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  ds->labels = g_array_new (FALSE, FALSE, sizeof (int32_t));
  ds->offsets = g_array_new (FALSE, FALSE, sizeof (guint64));
  guint64 zero = 0;
  g_array_append_val (ds->offsets, zero);
  ds->seq_len = seq_len;
  return ds;
}

void
hn_dataset_free (HnDataset *ds)
{
  if (!ds)
    return;
  g_array_unref (ds->ids);
  if (ds->id_starts)
    g_array_unref (ds->id_starts);
  g_array_unref (ds->labels);
  if (ds->weights)
    g_array_unref (ds->weights);
  g_array_unref (ds->offsets);
  g_free (ds);
}

void
hn_dataset_preview_row_free (HnDatasetPreviewRow *row)
{
  if (!row)
    return;
  if (row->segments)
    {
      for (guint k = 0; k < row->segments->len; k++)
        g_free (g_array_index (row->segments, HnDatasetSegment, k).text);
      g_array_unref (row->segments);
    }
  g_free (row->reason);
  g_free (row);
}

static HnDatasetStats *
loader_stats (Loader *L, HnDatasetStats *scratch)
{
  return L->ds ? &L->ds->stats : scratch;
}

static HnDatasetPreviewRow *
preview_row_new (guint64 line)
{
  HnDatasetPreviewRow *r = g_new0 (HnDatasetPreviewRow, 1);
  r->line = line;
  r->segments = g_array_new (FALSE, FALSE, sizeof (HnDatasetSegment));
  return r;
}

static void
preview_add_pieces (Loader *L, HnDatasetPreviewRow *r, GArray *pieces)
{
  for (guint k = 0; k < pieces->len; k++)
    {
      Piece *p = &g_array_index (pieces, Piece, k);
      const char *t = p->text;
      if (!t)
        t = hn_tokenizer_id_to_token (L->tok, p->special);
      t = t ? t : "";
      gsize len = strlen (t);
      char *shown;
      if (len > PREVIEW_SEGMENT_MAX)
        {
          /* a preview of a book is its beginning */
          const char *cut = g_utf8_find_prev_char (t, t + PREVIEW_SEGMENT_MAX + 1);
          shown = g_strdup_printf ("%.*s … [%" G_GSIZE_FORMAT " more bytes]", (int) (cut - t), t,
                                   len - (gsize) (cut - t));
        }
      else
        shown = g_strdup (t);
      HnDatasetSegment s = { shown, p->trained || !L->opts.mask_prompt };
      g_array_append_val (r->segments, s);
    }
}

/* Token ids as text, for the preview of a dataset without a tokenizer. */
static char *
ids_to_string (const int32_t *ids, guint n)
{
  GString *s = g_string_new ("[");
  for (guint i = 0; i < n; i++)
    g_string_append_printf (s, "%s%d", i ? " " : "", ids[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gboolean
has_text (GArray *pieces)
{
  for (guint i = 0; i < pieces->len; i++)
    {
      const Piece *p = &g_array_index (pieces, Piece, i);
      if (p->text && p->text[0])
        return TRUE;
    }
  return FALSE;
}

/* Counts a row that yields no example, with the first reason kept. */
static void
drop_row (Loader *L, HnDatasetStats *stats, guint64 line, const char *detail)
{
  g_autofree char *why = g_strdup_printf ("%s:%" G_GUINT64_FORMAT ": dropped: %s", L->display, line, detail);
  stats->rows_dropped++;
  set_reason (stats->first_drop_reason, why);
  if (L->preview)
    {
      HnDatasetPreviewRow *pr = preview_row_new (line);
      pr->dropped = TRUE;
      pr->reason = g_strdup (detail);
      g_ptr_array_add (L->preview, pr);
    }
}

/* Processes one parsed row. Returns FALSE with `error` for a malformed row;
 * fatal errors (tokenizer failures) set *fatal. */
static gboolean
process_row (Loader *L, JsonNode *node, guint64 line, HnDatasetStats *stats, gboolean *fatal, GError **error)
{
  *fatal = FALSE;
  if (!node) /* json-glib parses a line of only whitespace to no root at all */
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "the row holds no JSON value");
      return FALSE;
    }
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "the row is not a JSON object");
      return FALSE;
    }
  JsonObject *row = json_node_get_object (node);
  if (L->shape == HN_DATASET_SHAPE_AUTO)
    {
      L->shape = detect_shape (row);
      if (L->shape == HN_DATASET_SHAPE_AUTO)
        {
          g_autofree char *keys = describe_keys (row);
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                       "cannot tell the dataset shape from the keys %s; expected \"text\", \"instruction\"+\"output\", "
                       "\"prompt\"+\"completion\", \"question\"+\"answer\", \"messages\" or \"input_ids\"", keys);
          *fatal = TRUE;
          return FALSE;
        }
      stats->shape = L->shape;
      L->packing = L->shape == HN_DATASET_SHAPE_TEXT && L->opts.pack;
    }
  if (!L->tok && L->shape != HN_DATASET_SHAPE_TOKENS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s rows need a tokenizer and there is none (the model folder has no tokenizer files): give "
                   "--tokenizer-path, or rows of token ids (\"input_ids\", optional \"labels\", \"attention_mask\", "
                   "\"loss_weights\")", hn_dataset_shape_to_string (L->shape));
      *fatal = TRUE;
      return FALSE;
    }

  /* packed text (loading, not previewing) is tokenized straight onto the
   * dataset's stream: no per-row copy, no labels or weights (the stream's
   * tokens are their own labels) */
  gboolean direct = L->packing && L->ds && !L->preview;
  g_autoptr (GArray) own_ids = direct ? NULL : g_array_new (FALSE, FALSE, sizeof (int32_t));
  GArray *ids = direct ? L->ds->ids : own_ids;
  guint row_start = ids->len;
  g_autoptr (GArray) labels = direct ? NULL : g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GArray) weights = direct ? NULL : g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) pieces = g_array_new (FALSE, FALSE, sizeof (Piece));
  g_array_set_clear_func (pieces, (GDestroyNotify) piece_clear);
  if (L->shape == HN_DATASET_SHAPE_TOKENS)
    {
      if (!row_tokens (L, row, ids, labels, weights, error))
        return FALSE;
    }
  else
    {
      if (!row_pieces (L, row, pieces, fatal, error))
        return FALSE;
      if (L->shape == HN_DATASET_SHAPE_TEXT && !has_text (pieces))
        {
          /* an empty text is no example: it would train on the special tokens alone (<s></s>) */
          drop_row (L, stats, line, "the text is empty");
          return TRUE;
        }
      GError *tok_error = NULL;
      if (!tokenize_pieces (L, pieces, ids, labels, weights, &tok_error))
        {
          g_array_set_size (ids, row_start); /* a row that failed leaves nothing on the stream */
          /* invalid UTF-8 is the row's fault; anything else is fatal */
          *fatal = !g_error_matches (tok_error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
          g_propagate_error (error, tok_error);
          return FALSE;
        }
    }

  HnDatasetPreviewRow *pr = NULL;
  if (L->preview)
    {
      pr = preview_row_new (line);
      if (L->shape == HN_DATASET_SHAPE_TOKENS)
        {
          g_autoptr (GError) derr = NULL;
          /* show the tokens, split where the loss switches on or off */
          guint k = 0;
          while (k < ids->len)
            {
              gboolean tr = g_array_index (labels, int32_t, k) != IGNORE_INDEX;
              guint j = k;
              while (j < ids->len && (g_array_index (labels, int32_t, j) != IGNORE_INDEX) == tr)
                j++;
              g_autofree char *t = L->tok ? hn_tokenizer_decode (L->tok, &g_array_index (ids, int32_t, k), j - k, FALSE, &derr)
                                          : ids_to_string (&g_array_index (ids, int32_t, k), j - k);
              HnDatasetSegment s = { g_strdup (t ? t : ""), tr };
              g_array_append_val (pr->segments, s);
              k = j;
            }
        }
      else
        preview_add_pieces (L, pr, pieces);
      pr->n_tokens_full = ids->len;
      if (L->cut_from && L->shape != HN_DATASET_SHAPE_TOKENS)
        {
          pr->truncated = TRUE;
          pr->reason = g_strdup_printf ("the preview tokenized the first %" G_GUINT64_FORMAT " of the row's %" G_GUINT64_FORMAT
                                        " bytes of text (more than seq_len + 1 tokens need)", L->cut_to, L->cut_from);
        }
      g_ptr_array_add (L->preview, pr);
    }

  stats->rows_used++;
  if (L->packing)
    {
      /* packed text: a document's BOS is not a target (nothing predicts a document start) */
      if (direct && ids->len > row_start && g_array_index (ids, int32_t, row_start) == hn_tokenizer_get_bos_id (L->tok))
        {
          guint64 at = row_start;
          g_array_append_val (L->doc_starts, at);
        }
      if (pr)
        {
          pr->n_tokens = ids->len;
          pr->n_trained = count_targets (&g_array_index (labels, int32_t, 0), ids->len);
        }
      return TRUE;
    }

  guint limit = L->opts.seq_len + 1;
  guint n = ids->len;
  gboolean truncated = n > limit;
  if (truncated)
    {
      n = limit;
      stats->rows_truncated++;
    }
  guint targets = count_targets (&g_array_index (labels, int32_t, 0), n);
  if (pr)
    {
      pr->n_tokens = n;
      pr->n_trained = targets;
      pr->truncated = truncated || pr->truncated;
      if (truncated && !pr->reason)
        pr->reason = g_strdup_printf ("truncated from %u to %u tokens (seq_len %u + 1)", ids->len, n, L->opts.seq_len);
    }
  if (targets == 0)
    {
      g_autofree char *detail = truncated
        ? g_strdup_printf ("no trained tokens left after truncation to %u tokens", n)
        : g_strdup ("no trained tokens");
      g_autofree char *why = g_strdup_printf ("%s:%" G_GUINT64_FORMAT ": dropped: %s", L->display, line, detail);
      stats->rows_used--;
      stats->rows_dropped++;
      set_reason (stats->first_drop_reason, why);
      if (pr)
        {
          pr->dropped = TRUE;
          g_free (pr->reason);
          pr->reason = g_steal_pointer (&detail);
        }
      return TRUE;
    }
  if (L->ds)
    dataset_add (L->ds, &g_array_index (ids, int32_t, 0), 0, &g_array_index (labels, int32_t, 0),
                 &g_array_index (weights, float, 0), n);
  return TRUE;
}

/* Cuts the packed stream (the dataset's ids) into windows of seq_len + 1
 * tokens overlapping by one: the examples point into it; only their labels
 * are their own (a window's first token is context only, a document's BOS
 * no target). */
static void
flush_stream (Loader *L)
{
  if (!L->ds || !L->packing)
    return;
  HnDataset *ds = L->ds;
  ds->id_starts = g_array_new (FALSE, FALSE, sizeof (guint64));
  guint64 total = ds->ids->len, step = L->opts.seq_len;
  const int32_t *ids = (const int32_t *) (gpointer) ds->ids->data;
  const guint64 *bos = L->doc_starts->len ? &g_array_index (L->doc_starts, guint64, 0) : NULL;
  guint nb = L->doc_starts->len, bi = 0;
  g_autoptr (GArray) lbl = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint64 start = 0; total >= 2 && start + 1 < total; start += step)
    {
      guint64 n = MIN (step + 1, total - start);
      g_array_set_size (lbl, (guint) n);
      int32_t *lab = &g_array_index (lbl, int32_t, 0);
      lab[0] = IGNORE_INDEX;
      while (bi < nb && bos[bi] <= start)
        bi++;
      guint j = bi;
      for (guint64 k = 1; k < n; k++)
        {
          gboolean doc_start = j < nb && bos[j] == start + k;
          lab[k] = doc_start ? IGNORE_INDEX : ids[start + k];
          j += doc_start;
        }
      if (count_targets (lab, (guint) n) == 0)
        continue;
      dataset_add (ds, NULL, start, lab, NULL, (guint) n);
    }
}

static gboolean
row_failed (Loader *L, HnDatasetStats *stats, guint64 line, const char *unit, GError *row_error, GError **error)
{
  g_autofree char *msg = g_strdup_printf ("%s:%s%" G_GUINT64_FORMAT ": %s", L->display, unit, line, row_error->message);
  if (L->preview)
    {
      HnDatasetPreviewRow *pr = preview_row_new (line);
      pr->malformed = TRUE;
      pr->reason = g_strdup (row_error->message);
      g_ptr_array_add (L->preview, pr);
    }
  if (L->opts.on_error == HN_DATASET_ON_ERROR_SKIP || L->preview)
    {
      stats->rows_skipped++;
      set_reason (stats->first_skip_reason, msg);
      g_error_free (row_error);
      return TRUE;
    }
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s (skip malformed rows with on-error=skip)", msg);
  g_error_free (row_error);
  return FALSE;
}

static gboolean
load_txt (Loader *L, HnDatasetStats *stats, GError **error)
{
  g_autofree char *data = NULL;
  gsize len;
  if (!hn_file_read_bounded (L->path, HN_MAX_TEXT_BYTES, "text dataset", &data, &len, error))
    return FALSE;
  gsize at = 0;
  const char *why = hn_utf8_problem (data, len, &at);
  if (why)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: the text file has %s at byte %zu", L->display, why, at);
      return FALSE;
    }
  L->shape = stats->shape = HN_DATASET_SHAPE_TEXT;
  L->packing = TRUE;
  stats->rows_read = 1;
  g_autoptr (JsonNode) node = json_node_new (JSON_NODE_OBJECT);
  JsonObject *o = json_object_new ();
  json_object_set_string_member (o, "text", ""); /* the text itself goes to the row's piece uncopied */
  L->txt_text = g_steal_pointer (&data);
  json_node_take_object (node, o);
  gboolean fatal;
  GError *row_error = NULL;
  gboolean ok = process_row (L, node, 0, stats, &fatal, &row_error);
  g_clear_pointer (&L->txt_text, g_free); /* not taken when the row failed first */
  if (!ok)
    {
      g_propagate_prefixed_error (error, row_error, "%s: ", L->display);
      return FALSE;
    }
  return TRUE;
}

static gboolean
handle_row (Loader *L, HnDatasetStats *stats, JsonNode *node, guint64 line, const char *unit, GError **error)
{
  gboolean fatal;
  GError *row_error = NULL;
  stats->rows_read++;
  if (process_row (L, node, line, stats, &fatal, &row_error))
    return TRUE;
  if (fatal)
    {
      g_propagate_prefixed_error (error, row_error, "%s:%s%" G_GUINT64_FORMAT ": ", L->display, unit, line);
      return FALSE;
    }
  return row_failed (L, stats, line, unit, row_error, error);
}

static gboolean
cancelled (Loader *L, GError **error)
{
  if (L->opts.cancellable && g_cancellable_is_cancelled (L->opts.cancellable))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "%s: loading was cancelled", L->display);
      return TRUE;
    }
  return FALSE;
}

static gboolean
enough_rows (Loader *L, HnDatasetStats *stats)
{
  if (L->preview)
    return L->preview->len >= L->preview_max;
  return L->opts.max_rows && stats->rows_read >= L->opts.max_rows;
}

/* GDataInputStream's read_line has no bound; this reads LF-terminated lines
 * of at most `cap` bytes. */
typedef struct {
  GInputStream *in;
  char buf[65536];
  gsize len, pos;
} LineReader;

static char *
line_reader_next (LineReader *lr, gsize cap, gsize *len_out, gboolean *too_long, GError **error)
{
  GString *s = NULL;
  *too_long = FALSE;
  for (;;)
    {
      if (lr->pos == lr->len)
        {
          gssize n = g_input_stream_read (lr->in, lr->buf, sizeof lr->buf, NULL, error);
          if (n < 0)
            break;
          if (n == 0)
            {
              if (s)
                *len_out = s->len;
              if (*too_long)
                return g_string_free (s, TRUE), g_strdup ("");
              return s ? g_string_free (s, FALSE) : NULL;
            }
          lr->len = (gsize) n;
          lr->pos = 0;
        }
      const char *start = lr->buf + lr->pos;
      const char *nl = memchr (start, '\n', lr->len - lr->pos);
      gsize take = nl ? (gsize) (nl - start) : lr->len - lr->pos;
      if (!s)
        s = g_string_sized_new (take + 1);
      if (s->len + take > cap)
        {
          *too_long = TRUE; /* keep reading to the line's end, keeping nothing */
          g_string_truncate (s, 0);
        }
      if (!*too_long)
        g_string_append_len (s, start, take);
      lr->pos += take + (nl ? 1 : 0);
      if (nl)
        {
          *len_out = s->len;
          if (*too_long)
            return g_string_free (s, TRUE), g_strdup ("");
          return g_string_free (s, FALSE);
        }
    }
  if (s)
    g_string_free (s, TRUE);
  return NULL;
}

static gboolean
load_jsonl (Loader *L, HnDatasetStats *stats, GError **error)
{
  g_autoptr (GFile) file = g_file_new_for_path (L->path);
  g_autoptr (GFileInputStream) fin = g_file_read (file, NULL, error);
  if (!fin)
    return FALSE;
  g_autofree LineReader *lr = g_new0 (LineReader, 1);
  lr->in = G_INPUT_STREAM (fin);
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  guint64 line = 0;
  for (;;)
    {
      gsize len = 0;
      gboolean too_long = FALSE;
      GError *io_error = NULL;
      g_autofree char *text = line_reader_next (lr, HN_MAX_JSONL_LINE_BYTES, &len, &too_long, &io_error);
      if (io_error)
        {
          g_propagate_prefixed_error (error, io_error, "%s: ", L->display);
          return FALSE;
        }
      if (!text)
        break;
      line++;
      if (len && text[len - 1] == '\r')
        text[--len] = '\0';
      if (line == 1 && len >= 3 && (guchar) text[0] == 0xEF && (guchar) text[1] == 0xBB && (guchar) text[2] == 0xBF)
        memmove (text, text + 3, (len -= 3) + 1); /* UTF-8 byte order mark */
      gboolean blank = !too_long;
      for (gsize k = 0; k < len && blank; k++)
        blank = g_ascii_isspace (text[k]);
      if (blank)
        continue;
      if (enough_rows (L, stats))
        break;
      if (cancelled (L, error))
        return FALSE;
      GError *row_error = NULL;
      gsize at = 0;
      const char *why = NULL;
      if (too_long)
        g_set_error (&row_error, HN_ERROR, HN_ERROR_CORRUPT, "the line is longer than %u MiB, the limit for one JSONL row",
                     HN_MAX_JSONL_LINE_BYTES >> 20);
      else if ((why = hn_utf8_problem (text, len, &at)))
        g_set_error (&row_error, HN_ERROR, HN_ERROR_CORRUPT, "the line has %s at byte %zu", why, at);
      else if (!hn_json_parser_load (parser, text, (gssize) len, "row", &row_error))
        {
          g_autofree char *m = g_strdup_printf ("invalid JSON (%s)", row_error->message);
          g_clear_error (&row_error);
          g_set_error_literal (&row_error, HN_ERROR, HN_ERROR_CORRUPT, m);
        }
      if (row_error)
        {
          stats->rows_read++;
          if (!row_failed (L, stats, line, "", row_error, error))
            return FALSE;
          continue;
        }
      g_clear_pointer (&text, g_free); /* the parsed tree holds its own copy: one row in memory, not two */
      if (!handle_row (L, stats, json_parser_get_root (parser), line, "", error))
        return FALSE;
    }
  return TRUE;
}

static gboolean
load_json_array (Loader *L, HnDatasetStats *stats, GError **error)
{
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  g_autofree char *data = NULL;
  gsize len = 0;
  if (!hn_file_read_bounded (L->path, HN_MAX_JSON_DATASET_BYTES, "JSON dataset (use .jsonl for bigger ones)", &data,
                             &len, error) ||
      !hn_json_parser_load (parser, data, (gssize) len, L->display, error))
    return FALSE;
  g_clear_pointer (&data, g_free);
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_ARRAY (root))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: a .json dataset must be an array of rows "
                   "(use .jsonl for one row per line)", L->display);
      return FALSE;
    }
  JsonArray *a = json_node_get_array (root);
  for (guint k = 0; k < json_array_get_length (a) && !enough_rows (L, stats); k++)
    if (cancelled (L, error) || !handle_row (L, stats, json_array_get_element (a, k), k + 1, " element ", error))
      return FALSE;
  return TRUE;
}

/* Parquet (what the Hub serves): each row group's rows as the JSON objects a
 * JSONL row would be; errors name the row (1-based, whole file). */
static gboolean
load_parquet (Loader *L, HnDatasetStats *stats, GError **error)
{
  g_autoptr (HnParquetFile) f = hn_parquet_open (L->path, error);
  if (!f)
    return FALSE;
  guint64 row = 0;
  for (guint rg = 0; rg < hn_parquet_get_n_row_groups (f) && !enough_rows (L, stats); rg++)
    {
      g_autoptr (JsonArray) rows = hn_parquet_read_json_rows (f, (int) rg, error);
      if (!rows)
        return FALSE;
      for (guint k = 0; k < json_array_get_length (rows) && !enough_rows (L, stats); k++)
        if (cancelled (L, error) || !handle_row (L, stats, json_array_get_element (rows, k), ++row, " row ", error))
          return FALSE;
    }
  return TRUE;
}

static gboolean
run_loader (Loader *L, HnDatasetStats *stats, GError **error)
{
  if (!g_file_test (L->path, G_FILE_TEST_EXISTS))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "dataset file %s does not exist", L->path);
      return FALSE;
    }
  if (!g_file_test (L->path, G_FILE_TEST_IS_REGULAR)) /* a FIFO or device blocks or reads without end */
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "dataset file %s is not a regular file", L->path);
      return FALSE;
    }
  if (L->opts.seq_len < 1 || L->opts.seq_len > (1u << 24))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "seq_len %u is out of range (1..16777216)", L->opts.seq_len);
      return FALSE;
    }
  L->vocab = L->tok ? hn_tokenizer_get_vocab_size (L->tok) : L->opts.vocab_size;
  if (L->vocab <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: no tokenizer and no vocabulary size to check ids against",
                   L->display);
      return FALSE;
    }
  L->shape = L->opts.shape;
  stats->shape = L->shape;
  L->packing = L->shape == HN_DATASET_SHAPE_TEXT && L->opts.pack;
  L->doc_starts = g_array_new (FALSE, FALSE, sizeof (guint64));
  gboolean ok;
  if (g_str_has_suffix (L->path, ".parquet"))
    ok = load_parquet (L, stats, error);
  else if (g_str_has_suffix (L->path, ".txt") || g_str_has_suffix (L->path, ".text") || g_str_has_suffix (L->path, ".md"))
    {
      if (L->opts.shape != HN_DATASET_SHAPE_AUTO && L->opts.shape != HN_DATASET_SHAPE_TEXT)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: a plain text file has the text shape, not %s",
                       L->display, hn_dataset_shape_to_string (L->opts.shape));
          ok = FALSE;
        }
      else
        ok = load_txt (L, stats, error);
    }
  else if (g_str_has_suffix (L->path, ".json"))
    ok = load_json_array (L, stats, error);
  else
    ok = load_jsonl (L, stats, error);
  if (ok)
    flush_stream (L);
  g_array_unref (L->doc_starts);
  if (L->tmpl)
    hn_chat_template_free (L->tmpl);
  return ok;
}

static void
loader_init (Loader *L, const char *path, HnTokenizer *tok, const HnDatasetOptions *opts)
{
  memset (L, 0, sizeof *L);
  L->path = path;
  L->display = g_path_get_basename (path);
  L->tok = tok;
  if (opts)
    L->opts = *opts;
  else
    hn_dataset_options_init (&L->opts);
}

HnDataset *
hn_dataset_load (const char *path, HnTokenizer *tok, const HnDatasetOptions *opts, GError **error)
{
  g_return_val_if_fail (path, NULL);
  Loader L;
  loader_init (&L, path, tok, opts);
  L.ds = dataset_new (L.opts.seq_len);
  HnDatasetStats scratch = { 0 };
  gboolean ok = run_loader (&L, loader_stats (&L, &scratch), error);
  g_free (L.display);
  if (!ok)
    {
      hn_dataset_free (L.ds);
      return NULL;
    }
  if (L.ds->stats.n_examples == 0)
    {
      const HnDatasetStats *s = &L.ds->stats;
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: no usable examples (%" G_GUINT64_FORMAT " rows read, %" G_GUINT64_FORMAT " skipped, %"
                   G_GUINT64_FORMAT " dropped%s%s)", path, s->rows_read, s->rows_skipped, s->rows_dropped,
                   s->first_skip_reason[0] ? "; first skipped: " : s->first_drop_reason[0] ? "; first dropped: " : "",
                   s->first_skip_reason[0] ? s->first_skip_reason : s->first_drop_reason);
      hn_dataset_free (L.ds);
      return NULL;
    }
  return L.ds;
}

GPtrArray *
hn_dataset_preview (const char *path, HnTokenizer *tok, const HnDatasetOptions *opts, guint n_rows,
                    HnDatasetStats *stats, GError **error)
{
  g_return_val_if_fail (path && tok, NULL);
  Loader L;
  loader_init (&L, path, tok, opts);
  L.preview = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_dataset_preview_row_free);
  L.preview_max = MAX (n_rows, 1);
  HnDatasetStats local = { 0 };
  gboolean ok = run_loader (&L, &local, error);
  g_free (L.display);
  if (!ok)
    {
      g_ptr_array_unref (L.preview);
      return NULL;
    }
  if (stats)
    *stats = local;
  return L.preview;
}

gsize
hn_dataset_get_n_examples (HnDataset *ds)
{
  return ds->offsets->len - 1;
}

void
hn_dataset_get_example (HnDataset *ds, gsize index, HnExample *out)
{
  g_return_if_fail (index < hn_dataset_get_n_examples (ds));
  guint64 a = g_array_index (ds->offsets, guint64, index), b = g_array_index (ds->offsets, guint64, index + 1);
  out->n_tokens = b - a;
  out->ids = &g_array_index (ds->ids, int32_t, ds->id_starts ? g_array_index (ds->id_starts, guint64, index) : a);
  out->labels = &g_array_index (ds->labels, int32_t, a);
  out->weights = ds->weights ? &g_array_index (ds->weights, float, a) : NULL;
}

const HnDatasetStats *
hn_dataset_get_stats (HnDataset *ds)
{
  return &ds->stats;
}

guint
hn_dataset_get_seq_len (HnDataset *ds)
{
  return ds->seq_len;
}

/* -------------------------------------------------------- deterministic RNG */

static guint64
splitmix64 (guint64 *x)
{
  guint64 z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct { guint64 s[4]; } Xoshiro;

static guint64
rotl (guint64 x, int k)
{
  return (x << k) | (x >> (64 - k));
}

static guint64
xoshiro_next (Xoshiro *r)
{
  guint64 *s = r->s;
  guint64 result = rotl (s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl (s[3], 45);
  return result;
}

static void
xoshiro_seed (Xoshiro *r, guint64 seed)
{
  for (int k = 0; k < 4; k++)
    r->s[k] = splitmix64 (&seed);
}

/* Uniform in [0, bound) without modulo bias (rejection). */
static guint64
xoshiro_below (Xoshiro *r, guint64 bound)
{
  guint64 limit = G_MAXUINT64 - G_MAXUINT64 % bound;
  guint64 x;
  do
    x = xoshiro_next (r);
  while (x >= limit);
  return x % bound;
}

static void
permutation (guint64 *perm, gsize n, guint64 seed, guint64 epoch, gboolean shuffle)
{
  for (gsize k = 0; k < n; k++)
    perm[k] = k;
  if (!shuffle || n < 2)
    return;
  Xoshiro r;
  xoshiro_seed (&r, seed + epoch * 0x9E3779B97F4A7C15ull);
  for (gsize k = n - 1; k > 0; k--)
    {
      gsize j = xoshiro_below (&r, k + 1);
      guint64 t = perm[k];
      perm[k] = perm[j];
      perm[j] = t;
    }
}

gboolean
hn_dataset_split (HnDataset *ds, double eval_fraction, guint64 seed, HnDataset **train_out,
                  HnDataset **eval_out, GError **error)
{
  gsize n = hn_dataset_get_n_examples (ds);
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "eval fraction %g must be in [0, 1)", eval_fraction);
      return FALSE;
    }
  gsize n_eval = (gsize) llround (eval_fraction * n);
  if (eval_fraction > 0 && n_eval == 0 && n >= 2)
    n_eval = 1;
  if (n_eval >= n && eval_fraction > 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "cannot hold out %g of %" G_GSIZE_FORMAT " examples and keep any for training", eval_fraction, n);
      return FALSE;
    }
  g_autofree guint64 *perm = g_new (guint64, MAX (n, 1));
  permutation (perm, n, seed ^ 0x5EEDE7A1ull, 0, TRUE);
  g_autofree gboolean *is_eval = g_new0 (gboolean, MAX (n, 1));
  for (gsize k = 0; k < n_eval; k++)
    is_eval[perm[k]] = TRUE;
  HnDataset *tr = dataset_new (ds->seq_len), *ev = dataset_new (ds->seq_len);
  for (HnDataset **part = (HnDataset *[]) { tr, ev, NULL }; ds->id_starts && *part; part++)
    {
      /* windows of one packed stream: both parts point into it, it is not copied */
      g_array_unref ((*part)->ids);
      (*part)->ids = g_array_ref (ds->ids);
      (*part)->id_starts = g_array_new (FALSE, FALSE, sizeof (guint64));
    }
  tr->stats = ds->stats;
  ev->stats = ds->stats;
  tr->stats.n_examples = tr->stats.n_tokens = tr->stats.n_target_tokens = 0;
  ev->stats.n_examples = ev->stats.n_tokens = ev->stats.n_target_tokens = 0;
  for (gsize k = 0; k < n; k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      dataset_add (is_eval[k] ? ev : tr, e.ids, ds->id_starts ? g_array_index (ds->id_starts, guint64, k) : 0, e.labels,
                   e.weights, e.n_tokens);
    }
  *train_out = tr;
  *eval_out = ev;
  return TRUE;
}

/* --------------------------------------------------------------- batching */

struct _HnDatasetIter {
  HnDataset *ds;
  gboolean shuffle;
  guint64 seed;
  int32_t pad_id;
  guint64 *perm;
  guint64 perm_epoch;
  gboolean perm_valid;
  HnDatasetCursor cur;
  HnBatch batch;
};

HnDatasetIter *
hn_dataset_iter_new (HnDataset *ds, guint batch_size, gboolean shuffle, guint64 seed, int32_t pad_id,
                     GError **error)
{
  gsize n = hn_dataset_get_n_examples (ds);
  if (batch_size == 0 || n == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   n == 0 ? "the dataset has no examples" : "batch size must be at least 1");
      return NULL;
    }
  HnDatasetIter *it = g_new0 (HnDatasetIter, 1);
  it->ds = ds;
  it->shuffle = shuffle;
  it->seed = seed;
  it->pad_id = pad_id < 0 ? 0 : pad_id;
  it->perm = g_new (guint64, n);
  HnBatch *b = &it->batch;
  b->batch_size = batch_size;
  b->seq_len = ds->seq_len;
  gsize cells = (gsize) batch_size * ds->seq_len;
  b->inputs = g_new (int32_t, cells);
  b->targets = g_new (int32_t, cells);
  b->weights = g_new (float, cells);
  b->attention_mask = g_new (int32_t, cells);
  b->example_index = g_new (guint64, batch_size);
  return it;
}

void
hn_dataset_iter_free (HnDatasetIter *it)
{
  if (!it)
    return;
  g_free (it->perm);
  g_free (it->batch.inputs);
  g_free (it->batch.targets);
  g_free (it->batch.weights);
  g_free (it->batch.attention_mask);
  g_free (it->batch.example_index);
  g_free (it);
}

const HnBatch *
hn_dataset_iter_next (HnDatasetIter *it)
{
  HnBatch *b = &it->batch;
  gsize n = hn_dataset_get_n_examples (it->ds);
  guint T = b->seq_len;
  b->n_targets = 0;
  for (guint row = 0; row < b->batch_size; row++)
    {
      if (it->cur.index >= n)
        {
          it->cur.epoch++;
          it->cur.index = 0;
        }
      if (!it->perm_valid || it->perm_epoch != it->cur.epoch)
        {
          permutation (it->perm, n, it->seed, it->cur.epoch, it->shuffle);
          it->perm_epoch = it->cur.epoch;
          it->perm_valid = TRUE;
        }
      guint64 idx = it->perm[it->cur.index++];
      b->example_index[row] = idx;
      HnExample e;
      hn_dataset_get_example (it->ds, idx, &e);
      int32_t *in = b->inputs + (gsize) row * T, *tg = b->targets + (gsize) row * T;
      float *w = b->weights + (gsize) row * T;
      int32_t *am = b->attention_mask + (gsize) row * T;
      for (guint t = 0; t < T; t++)
        {
          gboolean has_in = t < e.n_tokens, has_tg = t + 1 < e.n_tokens;
          in[t] = has_in ? e.ids[t] : it->pad_id;
          am[t] = has_in;
          tg[t] = has_tg ? e.labels[t + 1] : IGNORE_INDEX;
          w[t] = has_tg && tg[t] != IGNORE_INDEX ? (e.weights ? e.weights[t + 1] : 1.0f) : 0.0f;
          b->n_targets += tg[t] != IGNORE_INDEX;
        }
    }
  return b;
}

void
hn_dataset_iter_get_cursor (HnDatasetIter *it, HnDatasetCursor *cursor)
{
  *cursor = it->cur;
}

gboolean
hn_dataset_iter_set_cursor (HnDatasetIter *it, const HnDatasetCursor *cursor, GError **error)
{
  gsize n = hn_dataset_get_n_examples (it->ds);
  if (cursor->index > n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "dataset cursor index %" G_GUINT64_FORMAT " is past the %" G_GSIZE_FORMAT " examples "
                   "(was the checkpoint made with another dataset?)", cursor->index, n);
      return FALSE;
    }
  it->cur = *cursor;
  return TRUE;
}
