/* Datasets: every row shape, prompt masking, truncation, packing, shuffling
 * and exact resume, malformed rows, preview — with the real stories260K
 * tokenizer (../shared/models/stories260K). */
#include "data/dataset.h"
#include "template/chat-template.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <string.h>
#include <sys/resource.h>

static HnTokenizer *tok;

static char *
fixture (const char *name)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  return g_build_filename (src ? src : ".", "tests", "fixtures", "data", name, NULL);
}

static HnDataset *
load (const char *name, HnDatasetOptions *opts)
{
  g_autofree char *path = fixture (name);
  g_autoptr (GError) error = NULL;
  HnDataset *ds = hn_dataset_load (path, tok, opts, &error);
  g_assert_no_error (error);
  g_assert_nonnull (ds);
  return ds;
}

static GArray *
encode (const char *text)
{
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_tokenizer_encode (tok, text, -1, FALSE, ids, &error));
  g_assert_no_error (error);
  return ids;
}

/* Decodes the tokens whose label is (trained) or is not (!trained) -100. */
static char *
decode_where (const HnExample *e, gboolean trained)
{
  g_autoptr (GArray) sel = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint k = 0; k < e->n_tokens; k++)
    if ((e->labels[k] != -100) == trained)
      g_array_append_val (sel, e->ids[k]);
  g_autoptr (GError) error = NULL;
  char *s = hn_tokenizer_decode (tok, (const int32_t *) (void *) sel->data, sel->len, FALSE, &error);
  g_assert_no_error (error);
  return s;
}

static void
assert_ids (const int32_t *got, guint n_got, GArray *want)
{
  g_assert_cmpuint (n_got, ==, want->len);
  for (guint k = 0; k < n_got; k++)
    g_assert_cmpint (got[k], ==, g_array_index (want, int32_t, k));
}

static void
test_shapes_detected (void)
{
  static const struct { const char *file; HnDatasetShape shape; gsize n; } cases[] = {
    { "alpaca.jsonl", HN_DATASET_SHAPE_INSTRUCTION, 2 },
    { "prompt-completion.jsonl", HN_DATASET_SHAPE_PROMPT_COMPLETION, 2 },
    { "qa.jsonl", HN_DATASET_SHAPE_QA, 2 },
    { "tokens.jsonl", HN_DATASET_SHAPE_TOKENS, 3 },
  };
  for (guint k = 0; k < G_N_ELEMENTS (cases); k++)
    {
      HnDatasetOptions o;
      hn_dataset_options_init (&o);
      g_autoptr (HnDataset) ds = load (cases[k].file, &o);
      const HnDatasetStats *s = hn_dataset_get_stats (ds);
      g_assert_cmpint (s->shape, ==, cases[k].shape);
      g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, cases[k].n);
      g_assert_cmpuint (s->rows_read, ==, cases[k].n);
      g_assert_cmpuint (s->rows_used, ==, cases[k].n);
    }
  HnDatasetShape sh;
  g_assert_true (hn_dataset_shape_from_string ("alpaca", &sh, NULL));
  g_assert_cmpint (sh, ==, HN_DATASET_SHAPE_INSTRUCTION);
  g_autoptr (GError) error = NULL;
  g_assert_false (hn_dataset_shape_from_string ("sql", &sh, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* Text rows without packing: [BOS] + text + [EOS], all trained. */
static void
test_text_rows (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.pack = FALSE;
  g_autoptr (HnDataset) ds = load ("text.jsonl", &o);
  g_assert_cmpint (hn_dataset_get_stats (ds)->shape, ==, HN_DATASET_SHAPE_TEXT);
  g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, 3); /* the blank line is not a row */
  HnExample e;
  hn_dataset_get_example (ds, 2, &e);
  g_autoptr (GArray) want = g_array_new (FALSE, FALSE, sizeof (int32_t));
  int32_t bos = hn_tokenizer_get_bos_id (tok), eos = hn_tokenizer_get_eos_id (tok);
  g_assert_cmpint (bos, >=, 0);
  g_assert_cmpint (eos, >=, 0);
  g_array_append_val (want, bos);
  g_autoptr (GArray) body = encode ("One day, the sun was shining and the birds were singing.");
  g_array_append_vals (want, body->data, body->len);
  g_array_append_val (want, eos);
  assert_ids (e.ids, e.n_tokens, want);
  for (guint k = 1; k < e.n_tokens; k++)
    {
      g_assert_cmpint (e.labels[k], ==, e.ids[k]);
      g_assert_null (e.weights); /* all default: not stored */
    }
}

/* Packing: windows of seq_len + 1 overlapping by one token cover the stream of
 * all documents; every stream token after the first is a target once. */
static void
test_packing (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 8;
  g_autoptr (HnDataset) ds = load ("text.jsonl", &o);
  g_autoptr (GArray) stream = g_array_new (FALSE, FALSE, sizeof (int32_t));
  const char *docs[] = { "Once upon a time, there was a little girl named Lily.",
                         "She loved to play outside in the park with her dog.",
                         "One day, the sun was shining and the birds were singing." };
  int32_t bos = hn_tokenizer_get_bos_id (tok), eos = hn_tokenizer_get_eos_id (tok);
  for (guint d = 0; d < 3; d++)
    {
      g_autoptr (GArray) ids = encode (docs[d]);
      g_array_append_val (stream, bos);
      g_array_append_vals (stream, ids->data, ids->len);
      g_array_append_val (stream, eos);
    }
  gsize n = hn_dataset_get_n_examples (ds);
  g_assert_cmpuint (n, ==, (stream->len - 1 + 7) / 8);
  guint64 targets = 0;
  for (gsize k = 0; k < n; k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      g_assert_cmpuint (e.n_tokens, <=, 9);
      if (k + 1 < n)
        g_assert_cmpuint (e.n_tokens, ==, 9);
      g_assert_cmpint (e.labels[0], ==, -100);
      for (guint t = 0; t < e.n_tokens; t++)
        {
          int32_t want = g_array_index (stream, int32_t, k * 8 + t);
          g_assert_cmpint (e.ids[t], ==, want);
          if (t > 0)
            {
              /* a BOS is never a target; everything else is */
              g_assert_cmpint (e.labels[t], ==, want == bos ? -100 : want);
              targets += e.labels[t] != -100;
            }
        }
    }
  g_assert_cmpuint (targets, ==, stream->len - 3); /* all tokens but the three BOS */
  g_assert_cmpuint (hn_dataset_get_stats (ds)->n_target_tokens, ==, targets);
}

static void
test_txt_file (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 64;
  g_autoptr (HnDataset) ds = load ("shakespeare-excerpt.txt", &o);
  g_autofree char *path = fixture ("shakespeare-excerpt.txt");
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_autoptr (GArray) ids = encode (text);
  guint stream = ids->len + 2; /* BOS + text + EOS */
  g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, (stream - 1 + 63) / 64);
  g_assert_cmpuint (hn_dataset_get_stats (ds)->n_target_tokens, ==, stream - 1);
  HnExample e;
  hn_dataset_get_example (ds, 1, &e);
  g_assert_cmpint (e.ids[0], ==, g_array_index (ids, int32_t, 63)); /* window 1 starts at stream[64] */
}

/* The row is tokenized as one string, [BOS] + encode(prompt + completion) +
 * [EOS]; the masked tokens spell the prompt and the trained ones the
 * completion and EOS (a space at the boundary belongs to the completion's
 * first word, as SentencePiece writes it). */
static void
check_prompt_completion (const char *file, guint row, const char *prompt, const char *completion)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  g_autoptr (HnDataset) ds = load (file, &o);
  HnExample e;
  hn_dataset_get_example (ds, row, &e);
  int32_t bos = hn_tokenizer_get_bos_id (tok), eos = hn_tokenizer_get_eos_id (tok);
  g_autofree char *joined = g_strconcat (prompt, completion, NULL);
  g_autoptr (GArray) full = encode (joined);
  g_assert_cmpuint (e.n_tokens, ==, 1 + full->len + 1);
  g_assert_cmpint (e.ids[0], ==, bos);
  g_assert_cmpint (e.labels[0], ==, -100);
  guint n_masked = 0;
  for (guint k = 0; k < full->len; k++)
    {
      int32_t id = g_array_index (full, int32_t, k);
      g_assert_cmpint (e.ids[1 + k], ==, id);
      g_assert_true (e.labels[1 + k] == -100 || e.labels[1 + k] == id);
      g_assert_null (e.weights);
      if (e.labels[1 + k] == -100)
        {
          g_assert_cmpuint (k, ==, n_masked); /* the masked part is one run at the start */
          n_masked++;
        }
    }
  g_assert_cmpint (e.ids[e.n_tokens - 1], ==, eos);
  g_assert_cmpint (e.labels[e.n_tokens - 1], ==, eos);
  g_autoptr (GError) error = NULL;
  g_autofree char *masked = hn_tokenizer_decode (tok, e.ids + 1, n_masked, FALSE, &error);
  g_autofree char *want_masked = g_strdup (prompt);
  gsize ml = strlen (want_masked);
  while (ml && want_masked[ml - 1] == ' ')
    want_masked[--ml] = '\0';
  /* the space before the completion is the prompt's last token, or merges
   * into the completion's first one (▁word) */
  if (!g_str_equal (masked, prompt))
    g_assert_cmpstr (masked, ==, want_masked);
  g_autofree char *trained = decode_where (&e, TRUE);
  g_autofree char *want = g_strconcat (completion, "</s>", NULL);
  g_assert_cmpstr (g_strchug (trained), ==, g_strchug (want));

  /* mask_prompt off: everything after position 0 is trained */
  o.mask_prompt = FALSE;
  g_autoptr (HnDataset) all = load (file, &o);
  hn_dataset_get_example (all, row, &e);
  for (guint k = 0; k < e.n_tokens; k++)
    g_assert_cmpint (e.labels[k], ==, e.ids[k]);
}

static void
test_masking (void)
{
  check_prompt_completion ("alpaca.jsonl", 0,
                           "Below is an instruction that describes a task. Write a response that appropriately "
                           "completes the request.\n\n### Instruction:\nName a color of the sky.\n\n### Response:\n",
                           "The sky is blue.");
  check_prompt_completion ("alpaca.jsonl", 1,
                           "Below is an instruction that describes a task, paired with an input that provides "
                           "further context. Write a response that appropriately completes the request.\n\n"
                           "### Instruction:\nAdd the numbers.\n\n### Input:\n2 and 3\n\n### Response:\n", "5");
  check_prompt_completion ("prompt-completion.jsonl", 1, "Lily went to the", " park to play.");
  check_prompt_completion ("qa.jsonl", 0, "Question: What color is the sun?\nAnswer: ", "Yellow.");
}

static const char zephyr_template[] =
  "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
  "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
  "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
  "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* Chat rows: rendered with the template; only assistant turns (content + eos) are trained. */
static void
test_messages (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  /* stories260K has no chat template: asking for chat rows says so */
  {
    g_autofree char *path = fixture ("messages.jsonl");
    g_autoptr (GError) error = NULL;
    g_autoptr (HnDataset) none = hn_dataset_load (path, tok, &o, &error);
    g_assert_null (none);
    g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "chat template"));
  }
  o.chat_template = zephyr_template;
  g_autoptr (HnDataset) ds = load ("messages.jsonl", &o);
  g_assert_cmpint (hn_dataset_get_stats (ds)->shape, ==, HN_DATASET_SHAPE_MESSAGES);
  g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, 3);
  static const char *const want_trained[] = { "Hi there.</s>", "Once upon a time.</s>The end.</s>", "Hello friend.</s>" };
  for (guint k = 0; k < 3; k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      g_autofree char *trained = decode_where (&e, TRUE);
      g_autofree char *masked = decode_where (&e, FALSE);
      g_assert_cmpstr (trained, ==, want_trained[k]);
      g_assert_nonnull (strstr (masked, "<|user|>"));
      g_assert_null (strstr (masked, "friend"));
    }
  /* the whole example is the rendered conversation tokenized as one string,
   * without added special tokens (as apply_chat_template(tokenize=True)) */
  HnExample e;
  hn_dataset_get_example (ds, 0, &e);
  g_autoptr (GArray) want = encode ("<|user|>\nHello!</s>\n<|assistant|>\nHi there.</s>\n");
  assert_ids (e.ids, e.n_tokens, want);
}

static void
test_tokens (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  g_autoptr (HnDataset) ds = load ("tokens.jsonl", &o);
  HnExample e;
  hn_dataset_get_example (ds, 0, &e);
  g_assert_cmpuint (e.n_tokens, ==, 6); /* nothing added */
  g_assert_cmpint (e.labels[3], ==, 402);
  hn_dataset_get_example (ds, 1, &e);
  g_assert_cmpint (e.labels[2], ==, -100);
  g_assert_cmpfloat (e.weights[2], ==, 0.0f);
  g_assert_cmpint (e.labels[3], ==, 302);
  hn_dataset_get_example (ds, 2, &e);
  g_assert_cmpuint (e.n_tokens, ==, 4); /* attention_mask 0 positions removed */
  g_assert_cmpfloat (e.weights[1], ==, 0.5f);
  g_assert_cmpfloat (e.weights[3], ==, 2.0f);
  /* the batch carries them, shifted with the targets */
  {
    g_autoptr (GError) ie = NULL;
    g_autoptr (HnDatasetIter) it = hn_dataset_iter_new (ds, 3, FALSE, 0, 0, &ie);
    g_assert_no_error (ie);
    const HnBatch *b = hn_dataset_iter_next (it);
    const float *w = b->weights + 2 * b->seq_len;
    g_assert_cmpfloat (w[0], ==, 0.5f);
    g_assert_cmpfloat (w[1], ==, 1.0f);
    g_assert_cmpfloat (w[2], ==, 2.0f);
    g_assert_cmpfloat (w[3], ==, 0.0f);
    g_assert_cmpfloat (b->weights[0], ==, 1.0f);
    g_assert_cmpfloat (b->weights[b->seq_len + 1], ==, 0.0f); /* row 2: label -100 */
  }

  g_autofree char *bad = fixture ("bad-tokens.jsonl");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDataset) none = hn_dataset_load (bad, tok, &o, &error);
  g_assert_null (none);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "bad-tokens.jsonl:2: input_ids[1] = 99999 is outside the vocabulary"));
}

static void
test_truncation (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 12;
  g_autoptr (HnDataset) ds = load ("prompt-completion.jsonl", &o);
  const HnDatasetStats *s = hn_dataset_get_stats (ds);
  g_assert_cmpuint (s->rows_truncated, ==, 0);
  for (gsize k = 0; k < hn_dataset_get_n_examples (ds); k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      g_assert_cmpuint (e.n_tokens, <=, 13);
    }
  /* alpaca prompts are longer than 12 tokens: every completion is cut off, rows dropped */
  g_autofree char *path = fixture ("alpaca.jsonl");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDataset) none = hn_dataset_load (path, tok, &o, &error);
  g_assert_null (none);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "no usable examples (2 rows read, 0 skipped, 2 dropped"));

  /* long enough for the prompt, too short for the whole answer: truncated, kept */
  g_autoptr (GArray) pc = encode ("The cat sat on the mat.");
  g_autoptr (GArray) pp = encode ("The cat sat on the");
  o.seq_len = pp->len + 2; /* BOS + prompt + 2 answer tokens = seq_len + 1 */
  g_autoptr (HnDataset) cut = load ("prompt-completion.jsonl", &o);
  s = hn_dataset_get_stats (cut);
  g_assert_cmpuint (s->rows_truncated, ==, 2);
  g_assert_cmpuint (s->rows_dropped, ==, 0);
  HnExample e;
  hn_dataset_get_example (cut, 0, &e);
  g_assert_cmpuint (e.n_tokens, ==, o.seq_len + 1);
  g_assert_cmpint (e.labels[e.n_tokens - 1], ==, g_array_index (pc, int32_t, pp->len + 1));
  g_assert_cmpint (e.labels[e.n_tokens - 2], ==, g_array_index (pc, int32_t, pp->len));
  g_assert_cmpint (e.labels[e.n_tokens - 3], ==, -100);
  g_assert_cmpuint (s->n_target_tokens, >=, 3);
}

static void
test_malformed (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  g_autofree char *path = fixture ("malformed.jsonl");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDataset) none = hn_dataset_load (path, tok, &o, &error);
  g_assert_null (none);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "malformed.jsonl:2: invalid JSON"));

  o.on_error = HN_DATASET_ON_ERROR_SKIP;
  g_autoptr (HnDataset) ds = load ("malformed.jsonl", &o);
  const HnDatasetStats *s = hn_dataset_get_stats (ds);
  g_assert_cmpuint (s->rows_read, ==, 6);
  g_assert_cmpuint (s->rows_skipped, ==, 4);
  g_assert_cmpuint (s->rows_used, ==, 2);
  g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, 2);
  g_assert_nonnull (strstr (s->first_skip_reason, "malformed.jsonl:2:"));

  /* each kind of problem is reported with its line */
  static const struct { const char *line; const char *msg; } rows[] = {
    { "{\"prompt\": \"a\"}", "malformed-1.jsonl:1: missing \"completion\"" },
    { "[1, 2]", "malformed-1.jsonl:1: the row is not a JSON object" },
    { "{\"prompt\": 5, \"completion\": \"x\"}", "malformed-1.jsonl:1: \"prompt\" must be a string" },
    { "{\"prompt\": \"\xff\", \"completion\": \"x\"}", "malformed-1.jsonl:1: the line has invalid UTF-8 at byte 12" },
    { "{\"weird\": 1}", "malformed-1.jsonl:1: cannot tell the dataset shape from the keys \"weird\"" },
  };
  g_autofree char *dir = g_dir_make_tmp ("hn-dataset-XXXXXX", NULL);
  g_autofree char *tmp = g_build_filename (dir, "malformed-1.jsonl", NULL);
  o.on_error = HN_DATASET_ON_ERROR_FAIL;
  for (guint k = 0; k < G_N_ELEMENTS (rows); k++)
    {
      g_assert_true (g_file_set_contents (tmp, rows[k].line, -1, NULL));
      o.shape = k + 1 < G_N_ELEMENTS (rows) ? HN_DATASET_SHAPE_PROMPT_COMPLETION : HN_DATASET_SHAPE_AUTO;
      g_autoptr (GError) e2 = NULL;
      g_autoptr (HnDataset) d2 = hn_dataset_load (tmp, tok, &o, &e2);
      g_assert_null (d2);
      g_assert_nonnull (e2);
      if (!strstr (e2->message, rows[k].msg))
        g_error ("row %u: got '%s', want '%s'", k, e2->message, rows[k].msg);
    }
  /* a NUL byte is named as one, not as invalid UTF-8 */
  g_assert_true (g_file_set_contents (tmp, "{\"text\": \"a\0b\"}", 15, NULL));
  o.shape = HN_DATASET_SHAPE_AUTO;
  g_autoptr (GError) e5 = NULL;
  g_autoptr (HnDataset) d5 = hn_dataset_load (tmp, tok, &o, &e5);
  g_assert_null (d5);
  g_assert_nonnull (strstr (e5->message, "malformed-1.jsonl:1: the line has a NUL byte at byte 11"));
  g_unlink (tmp);
  g_rmdir (dir);
  g_autoptr (GError) e3 = NULL;
  g_autoptr (HnDataset) d3 = hn_dataset_load ("/nonexistent/x.jsonl", tok, &o, &e3);
  g_assert_error (e3, HN_ERROR, HN_ERROR_NOT_FOUND);

  g_autoptr (GCancellable) c = g_cancellable_new ();
  g_cancellable_cancel (c);
  o.cancellable = c;
  g_autoptr (GError) e4 = NULL;
  g_autoptr (HnDataset) d4 = hn_dataset_load (path, tok, &o, &e4);
  g_assert_error (e4, HN_ERROR, HN_ERROR_CANCELLED);
}

/* Empty texts are no examples: a dataset of them is refused instead of
 * training on the special tokens alone (<s></s>). */
static void
test_empty_text (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 16;
  g_autofree char *dir = g_dir_make_tmp ("hn-dataset-XXXXXX", NULL);
  g_autofree char *jl = g_build_filename (dir, "empty.jsonl", NULL);
  g_autofree char *txt = g_build_filename (dir, "empty.txt", NULL);
  g_assert_true (g_file_set_contents (jl, "{\"text\": \"\"}\n{\"text\": \"\"}\n", -1, NULL));
  g_assert_true (g_file_set_contents (txt, "", 0, NULL));
  const char *files[] = { jl, txt };
  for (int i = 0; i < 2; i++)
    {
      for (int pack = 0; pack < 2; pack++)
        {
          o.pack = pack;
          g_autoptr (GError) e = NULL;
          g_autoptr (HnDataset) d = hn_dataset_load (files[i], tok, &o, &e);
          g_assert_null (d);
          g_assert_error (e, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
          g_assert_nonnull (strstr (e->message, "no usable examples"));
          g_assert_nonnull (strstr (e->message, "dropped: the text is empty"));
        }
    }
  /* one empty row among others is dropped and counted */
  g_assert_true (g_file_set_contents (jl, "{\"text\": \"\"}\n{\"text\": \"Once upon a time\"}\n", -1, NULL));
  o.pack = FALSE;
  g_autoptr (GError) e = NULL;
  g_autoptr (HnDataset) d = hn_dataset_load (jl, tok, &o, &e);
  g_assert_no_error (e);
  g_assert_cmpuint (hn_dataset_get_n_examples (d), ==, 1);
  g_assert_cmpuint (hn_dataset_get_stats (d)->rows_dropped, ==, 1);
  g_unlink (jl);
  g_unlink (txt);
  g_rmdir (dir);
}

static void
assert_batches_equal (const HnBatch *a, const HnBatch *b)
{
  gsize cells = (gsize) a->batch_size * a->seq_len;
  g_assert_cmpmem (a->inputs, cells * sizeof (int32_t), b->inputs, cells * sizeof (int32_t));
  g_assert_cmpmem (a->targets, cells * sizeof (int32_t), b->targets, cells * sizeof (int32_t));
  g_assert_cmpmem (a->example_index, a->batch_size * sizeof (guint64), b->example_index, b->batch_size * sizeof (guint64));
}

static void
test_batches_and_resume (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 16;
  g_autoptr (HnDataset) ds = load ("shakespeare-excerpt.txt", &o);
  gsize n = hn_dataset_get_n_examples (ds);
  g_assert_cmpuint (n, >, 20);
  int32_t pad = hn_tokenizer_get_eos_id (tok);
  g_autoptr (GError) error = NULL;

  /* a batch is the examples shifted: targets[t] = labels[t + 1] */
  g_autoptr (HnDatasetIter) plain = hn_dataset_iter_new (ds, 3, FALSE, 0, pad, &error);
  g_assert_no_error (error);
  const HnBatch *b = hn_dataset_iter_next (plain);
  for (guint r = 0; r < 3; r++)
    {
      g_assert_cmpuint (b->example_index[r], ==, r);
      HnExample e;
      hn_dataset_get_example (ds, r, &e);
      for (guint t = 0; t < 16; t++)
        {
          g_assert_cmpint (b->inputs[r * 16 + t], ==, e.ids[t]);
          g_assert_cmpint (b->targets[r * 16 + t], ==, e.labels[t + 1]);
          g_assert_cmpint (b->attention_mask[r * 16 + t], ==, 1);
        }
    }

  /* same seed, same order; each epoch is a permutation */
  g_autoptr (HnDatasetIter) a = hn_dataset_iter_new (ds, 4, TRUE, 1234, pad, &error);
  g_autoptr (HnDatasetIter) c = hn_dataset_iter_new (ds, 4, TRUE, 1234, pad, &error);
  g_autoptr (HnDatasetIter) d = hn_dataset_iter_new (ds, 4, TRUE, 99, pad, &error);
  g_autofree int *seen = g_new0 (int, n);
  gboolean differs = FALSE;
  guint n_batches = (n + 3) / 4;
  for (guint k = 0; k < n_batches; k++)
    {
      const HnBatch *x = hn_dataset_iter_next (a), *y = hn_dataset_iter_next (c);
      const HnBatch *z = hn_dataset_iter_next (d);
      assert_batches_equal (x, y);
      for (guint r = 0; r < 4; r++)
        {
          if (k * 4 + r < n)
            seen[x->example_index[r]]++;
          differs |= x->example_index[r] != z->example_index[r];
        }
    }
  g_assert_true (differs);
  for (gsize k = 0; k < n; k++)
    g_assert_cmpint (seen[k], ==, 1);

  /* save the cursor mid-run; a fresh iterator restored to it continues identically */
  HnDatasetCursor cur;
  hn_dataset_iter_get_cursor (a, &cur);
  g_autoptr (HnDatasetIter) resumed = hn_dataset_iter_new (ds, 4, TRUE, 1234, pad, &error);
  g_assert_true (hn_dataset_iter_set_cursor (resumed, &cur, &error));
  for (guint k = 0; k < 2 * n_batches; k++)
    assert_batches_equal (hn_dataset_iter_next (a), hn_dataset_iter_next (resumed));
  hn_dataset_iter_get_cursor (a, &cur);
  g_assert_cmpuint (cur.epoch, >=, 2);

  HnDatasetCursor bad = { 0, n + 1 };
  g_assert_false (hn_dataset_iter_set_cursor (resumed, &bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_padding (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 64;
  g_autoptr (HnDataset) ds = load ("qa.jsonl", &o);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDatasetIter) it = hn_dataset_iter_new (ds, 2, FALSE, 0, 0, &error);
  const HnBatch *b = hn_dataset_iter_next (it);
  HnExample e;
  hn_dataset_get_example (ds, 0, &e);
  g_assert_cmpuint (e.n_tokens, <, 64);
  guint targets = 0;
  for (guint t = 0; t < 64; t++)
    {
      gboolean real = t < e.n_tokens;
      g_assert_cmpint (b->attention_mask[t], ==, real);
      if (!real)
        g_assert_cmpint (b->inputs[t], ==, 0);
      if (t + 1 >= e.n_tokens)
        g_assert_cmpint (b->targets[t], ==, -100);
      targets += b->targets[t] != -100;
    }
  /* the answer's tokens as they stand after the prompt, and EOS */
  g_autoptr (GArray) full = encode ("Question: What color is the sun?\nAnswer: Yellow.");
  g_autoptr (GArray) prompt = encode ("Question: What color is the sun?\nAnswer: ");
  g_assert_cmpuint (targets, ==, full->len - prompt->len + 1);
}

static void
test_split (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 16;
  g_autoptr (HnDataset) ds = load ("shakespeare-excerpt.txt", &o);
  gsize n = hn_dataset_get_n_examples (ds);
  HnDataset *tr = NULL, *ev = NULL;
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_dataset_split (ds, 0.1, 7, &tr, &ev, &error));
  g_assert_cmpuint (hn_dataset_get_n_examples (ev), ==, (gsize) (0.1 * n + 0.5));
  g_assert_cmpuint (hn_dataset_get_n_examples (tr) + hn_dataset_get_n_examples (ev), ==, n);
  g_assert_false (hn_dataset_split (ds, 1.5, 7, &tr, &ev, &error));
  /* the parts hold the same windows (ids and labels), and stay whole once the
   * dataset they came from is gone (a packed stream is shared, not copied) */
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_bytes_hash, g_bytes_equal, (GDestroyNotify) g_bytes_unref, NULL);
  for (gsize k = 0; k < n; k++)
    {
      HnExample e;
      hn_dataset_get_example (ds, k, &e);
      GByteArray *b = g_byte_array_new ();
      g_byte_array_append (b, (const guint8 *) e.ids, e.n_tokens * sizeof (int32_t));
      g_byte_array_append (b, (const guint8 *) e.labels, e.n_tokens * sizeof (int32_t));
      g_hash_table_add (seen, g_byte_array_free_to_bytes (b));
    }
  g_clear_pointer (&ds, hn_dataset_free);
  for (HnDataset **part = (HnDataset *[]) { tr, ev, NULL }; *part; part++)
    for (gsize k = 0; k < hn_dataset_get_n_examples (*part); k++)
      {
        HnExample e;
        hn_dataset_get_example (*part, k, &e);
        GByteArray *b = g_byte_array_new ();
        g_byte_array_append (b, (const guint8 *) e.ids, e.n_tokens * sizeof (int32_t));
        g_byte_array_append (b, (const guint8 *) e.labels, e.n_tokens * sizeof (int32_t));
        g_autoptr (GBytes) key = g_byte_array_free_to_bytes (b);
        g_assert_true (g_hash_table_remove (seen, key));
      }
  g_assert_cmpuint (g_hash_table_size (seen), ==, 0);
  hn_dataset_free (tr);
  hn_dataset_free (ev);
}

static void
test_preview (void)
{
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  g_autofree char *path = fixture ("malformed.jsonl");
  HnDatasetStats s;
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) rows = hn_dataset_preview (path, tok, &o, 3, &s, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rows->len, ==, 3);
  HnDatasetPreviewRow *r0 = rows->pdata[0], *r1 = rows->pdata[1];
  g_assert_cmpuint (r0->line, ==, 1);
  g_assert_false (r0->malformed);
  g_assert_cmpuint (r1->line, ==, 2);
  g_assert_true (r1->malformed);
  g_assert_nonnull (strstr (r1->reason, "invalid JSON"));
  /* segments: BOS (masked), prompt (masked), completion (trained), EOS (trained) */
  g_assert_cmpuint (r0->segments->len, ==, 4);
  HnDatasetSegment *seg = &g_array_index (r0->segments, HnDatasetSegment, 1);
  g_assert_cmpstr (seg->text, ==, "The dog ran to the");
  g_assert_false (seg->trained);
  seg = &g_array_index (r0->segments, HnDatasetSegment, 2);
  g_assert_cmpstr (seg->text, ==, " tree.");
  g_assert_true (seg->trained);
  g_assert_cmpuint (r0->n_trained, >, 0);
  g_assert_cmpuint (s.rows_skipped, ==, 2);

  /* truncation is shown with its reason */
  o.seq_len = 8;
  g_autofree char *alp = fixture ("alpaca.jsonl");
  g_autoptr (GPtrArray) rows2 = hn_dataset_preview (alp, tok, &o, 5, &s, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rows2->len, ==, 2);
  HnDatasetPreviewRow *t0 = rows2->pdata[0];
  g_assert_true (t0->truncated);
  g_assert_true (t0->dropped);
  g_assert_cmpuint (t0->n_tokens, ==, 9);
  g_assert_cmpuint (t0->n_tokens_full, >, 9);
  g_assert_nonnull (strstr (t0->reason, "no trained tokens left after truncation"));
}

/* A real chat model's tokenizer and template: Qwen3 (special tokens matched as
 * whole tokens, loss on the assistant answer and <|im_end|>). */
static void
test_qwen3_chat (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *qdir = g_build_filename (shared ? shared : "../shared", "tokenizers", "qwen3", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) qt = hn_tokenizer_load (qdir, &error);
  g_assert_no_error (error);
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  g_autofree char *path = fixture ("messages.jsonl");
  g_autoptr (HnDataset) ds = hn_dataset_load (path, qt, &o, &error);
  g_assert_no_error (error);
  HnExample e;
  hn_dataset_get_example (ds, 0, &e);
  g_autoptr (GArray) sel = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint k = 0; k < e.n_tokens; k++)
    if (e.labels[k] != -100)
      g_array_append_val (sel, e.ids[k]);
  g_autofree char *trained = hn_tokenizer_decode (qt, (const int32_t *) (void *) sel->data, sel->len, FALSE, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (trained, ==, "<think>\n\n</think>\n\nHi there.<|im_end|>");
  g_autofree char *all = hn_tokenizer_decode (qt, e.ids, e.n_tokens, FALSE, &error);
  g_assert_cmpstr (all, ==, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                            "Hi there.<|im_end|>\n");
  g_assert_cmpint (e.ids[0], ==, hn_tokenizer_token_to_id (qt, "<|im_start|>"));
}

/* transformers' apply_chat_template(tokenize=True) ids for Qwen3
 * (tests/fixtures/parity/chat_template/qwen3_two_turn.json) = our template
 * rendering tokenized without added special tokens. */
static void
test_qwen3_parity_ids (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR"), *src = g_getenv ("HN_SOURCE_DIR");
  g_autofree char *qdir = g_build_filename (shared ? shared : "../shared", "tokenizers", "qwen3", NULL);
  g_autofree char *fx = g_build_filename (src ? src : ".", "tests", "fixtures", "parity", "chat_template",
                                          "qwen3_two_turn.json", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) qt = hn_tokenizer_load (qdir, &error);
  g_assert_no_error (error);
  g_autoptr (HnChatTemplate) t = hn_chat_template_new (hn_tokenizer_get_chat_template (qt), &error);
  g_assert_no_error (error);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, fx, &error));
  JsonArray *renders = json_object_get_array_member (json_node_get_object (json_parser_get_root (p)), "renders");
  for (guint k = 0; k < json_array_get_length (renders); k++)
    {
      JsonObject *r = json_array_get_object_element (renders, k);
      HnChatRenderArgs args = { json_object_get_member (r, "messages"), NULL,
                                json_object_get_boolean_member (r, "add_generation_prompt"),
                                hn_tokenizer_get_bos_token (qt), hn_tokenizer_get_eos_token (qt),
                                json_object_get_object_member (r, "template_kwargs") };
      g_autofree char *text = hn_chat_template_apply (t, &args, NULL, &error);
      g_assert_no_error (error);
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_assert_true (hn_tokenizer_encode (qt, text, -1, FALSE, ids, &error));
      JsonArray *want = json_object_get_array_member (r, "ids");
      g_assert_cmpuint (ids->len, ==, json_array_get_length (want));
      for (guint j = 0; j < ids->len; j++)
        g_assert_cmpint (g_array_index (ids, int32_t, j), ==, json_array_get_int_element (want, j));
    }
}

/* Parquet rows are rows like JSONL's: text rows (null text is a malformed row),
 * chat rows (a null assistant content makes the template fail: malformed). */
static void
test_parquet (void)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  g_autofree char *path = g_build_filename (src ? src : ".", "tests", "fixtures", "io", "parquet",
                                            "hy-snappy-dict.parquet", NULL);
  g_autofree char *exp_path = g_build_filename (src ? src : ".", "tests", "fixtures", "io", "parquet",
                                                "expected.json", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (p, exp_path, &error));
  JsonArray *rows = json_object_get_array_member (json_node_get_object (json_parser_get_root (p)), "rows");
  guint with_text = 0, empty_text = 0, first_text = G_MAXUINT, null_content = 0;
  for (guint k = 0; k < json_array_get_length (rows); k++)
    {
      JsonObject *r = json_array_get_object_element (rows, k);
      /* an empty text is dropped: it holds nothing to learn but <s></s> */
      if (!json_object_get_null_member (r, "text") && !*json_object_get_string_member (r, "text"))
        empty_text++;
      else if (!json_object_get_null_member (r, "text"))
        {
          with_text++;
          first_text = MIN (first_text, k);
        }
      JsonNode *mn = json_object_get_member (r, "messages");
      JsonArray *m = mn && JSON_NODE_HOLDS_ARRAY (mn) ? json_node_get_array (mn) : NULL;
      for (guint j = 0; m && j < json_array_get_length (m); j++)
        {
          JsonNode *el = json_array_get_element (m, j);
          null_content += JSON_NODE_HOLDS_OBJECT (el) && json_object_get_null_member (json_node_get_object (el), "content");
        }
    }
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.shape = HN_DATASET_SHAPE_TEXT;
  o.pack = FALSE;
  o.on_error = HN_DATASET_ON_ERROR_SKIP;
  g_autoptr (HnDataset) ds = hn_dataset_load (path, tok, &o, &error);
  g_assert_no_error (error);
  const HnDatasetStats *s = hn_dataset_get_stats (ds);
  g_assert_cmpuint (s->rows_read, ==, json_array_get_length (rows));
  g_assert_cmpuint (s->rows_skipped, ==, json_array_get_length (rows) - with_text - empty_text);
  g_assert_cmpuint (s->rows_dropped, ==, empty_text);
  g_assert_cmpuint (hn_dataset_get_n_examples (ds), ==, with_text);
  HnExample e;
  hn_dataset_get_example (ds, 0, &e);
  g_autoptr (GArray) want = encode (json_object_get_string_member (json_array_get_object_element (rows, first_text), "text"));
  g_assert_cmpuint (e.n_tokens, ==, want->len + 2);
  g_assert_cmpmem (e.ids + 1, want->len * sizeof (int32_t), want->data, want->len * sizeof (int32_t));

  /* auto: the messages column wins; chat rows with a null content are malformed */
  hn_dataset_options_init (&o);
  o.chat_template = zephyr_template;
  o.on_error = HN_DATASET_ON_ERROR_SKIP;
  g_autoptr (HnDataset) chat = hn_dataset_load (path, tok, &o, &error);
  g_assert_no_error (error);
  s = hn_dataset_get_stats (chat);
  g_assert_cmpint (s->shape, ==, HN_DATASET_SHAPE_MESSAGES);
  g_assert_cmpuint (null_content, >, 0);
  g_assert_cmpuint (s->rows_skipped, >, 0);
  g_assert_nonnull (strstr (s->first_skip_reason, "hy-snappy-dict.parquet: row "));
  g_assert_cmpuint (s->rows_used + s->rows_skipped, ==, json_array_get_length (rows));
}

/* Peak memory a packed load adds, in bytes per byte of text: a fresh process
 * (its peak RSS starts at the tokenizer) loads HN_BIG_TEXT. */
static double
packed_load_bytes_per_byte (const char *path, guint64 *tokens)
{
  struct rusage r0, r1;
  GStatBuf sb;
  g_assert_cmpint (g_stat (path, &sb), ==, 0);
  getrusage (RUSAGE_SELF, &r0);
  HnDatasetOptions o;
  hn_dataset_options_init (&o);
  o.seq_len = 256;
  g_autoptr (GError) error = NULL;
  g_autoptr (HnDataset) ds = hn_dataset_load (path, tok, &o, &error);
  g_assert_no_error (error);
  getrusage (RUSAGE_SELF, &r1);
  *tokens = hn_dataset_get_stats (ds)->n_tokens;
  return (double) (r1.ru_maxrss - r0.ru_maxrss) * 1024.0 / (double) sb.st_size;
}

/* Large text trains from one copy of its tokens: an 8 MiB .txt file and the
 * same text as JSONL rows load packed within 7.5 bytes of peak memory per
 * byte of text (the tokens are int32 with an int32 label each, and this
 * tokenizer makes about 0.6 tokens a byte), not several copies of them. */
static void
test_packed_memory (void)
{
  const char *which = g_getenv ("HN_BIG_TEXT");
  if (g_test_subprocess ())
    {
      guint64 tokens = 0;
      double per_byte = packed_load_bytes_per_byte (which, &tokens);
      g_test_message ("%s: %" G_GUINT64_FORMAT " tokens, %.2f bytes of peak memory per byte of text", which, tokens,
                      per_byte);
      g_assert_cmpfloat (per_byte, <, 7.5); /* 15.9 (.txt) and 8.8 (JSONL) before */
      return;
    }
  g_autofree char *src = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (src, &text, &len, NULL));
  g_autofree char *dir = g_dir_make_tmp ("hn-big-text-XXXXXX", NULL);
  g_autofree char *txt = g_build_filename (dir, "big.txt", NULL);
  g_autofree char *jsonl = g_build_filename (dir, "big.jsonl", NULL);
  const gsize want = 8u << 20;
  GString *t = g_string_sized_new (want + len);
  while (t->len < want)
    g_string_append_len (t, text, (gssize) len);
  g_assert_true (g_file_set_contents (txt, t->str, (gssize) t->len, NULL));
  /* the same text as rows of a paragraph each */
  GString *j = g_string_sized_new (want * 2);
  g_auto (GStrv) paras = g_strsplit (t->str, "\n\n", -1);
  for (char **p = paras; *p; p++)
    if (**p)
      {
        g_autofree char *esc = g_strescape (*p, NULL);
        g_string_append_printf (j, "{\"text\": \"%s\"}\n", esc);
      }
  g_assert_true (g_file_set_contents (jsonl, j->str, (gssize) j->len, NULL));
  g_string_free (t, TRUE);
  g_string_free (j, TRUE);
  /* meson test sets MALLOC_PERTURB_, which fills every allocation and so
   * counts the arrays' unused growth room as resident: measure without it */
  g_unsetenv ("MALLOC_PERTURB_");
  for (const char *const *f = (const char *const[]) { txt, jsonl, NULL }; *f; f++)
    {
      g_setenv ("HN_BIG_TEXT", *f, TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDOUT | G_TEST_SUBPROCESS_INHERIT_STDERR);
      g_test_trap_assert_passed ();
    }
  g_unsetenv ("HN_BIG_TEXT");
  g_unlink (txt);
  g_unlink (jsonl);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *dir = g_build_filename (shared ? shared : "../shared", "models", "stories260K", NULL);
  g_autoptr (GError) error = NULL;
  tok = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  g_test_add_func ("/dataset/shapes", test_shapes_detected);
  g_test_add_func ("/dataset/text-rows", test_text_rows);
  g_test_add_func ("/dataset/packing", test_packing);
  g_test_add_func ("/dataset/txt-file", test_txt_file);
  g_test_add_func ("/dataset/packed-memory", test_packed_memory);
  g_test_add_func ("/dataset/masking", test_masking);
  g_test_add_func ("/dataset/messages", test_messages);
  g_test_add_func ("/dataset/tokens", test_tokens);
  g_test_add_func ("/dataset/truncation", test_truncation);
  g_test_add_func ("/dataset/malformed", test_malformed);
  g_test_add_func ("/dataset/empty-text", test_empty_text);
  g_test_add_func ("/dataset/batches-and-resume", test_batches_and_resume);
  g_test_add_func ("/dataset/padding", test_padding);
  g_test_add_func ("/dataset/split", test_split);
  g_test_add_func ("/dataset/preview", test_preview);
  g_test_add_func ("/dataset/qwen3-chat", test_qwen3_chat);
  g_test_add_func ("/dataset/parquet", test_parquet);
  g_test_add_func ("/dataset/qwen3-parity-ids", test_qwen3_parity_ids);
  int rc = g_test_run ();
  hn_tokenizer_unref (tok);
  return rc;
}
