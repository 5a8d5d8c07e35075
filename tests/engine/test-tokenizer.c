/* Tokenizer tests against the reference ids of the original Hugging Face
 * tokenizers (llama.cpp's test vectors in ../shared/tokenizers/golden), round
 * trips, streaming decode, corrupt files and speed. */
#include "tokenizer/tokenizer.h"
#include "base/hn-error.h"
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *
shared_path (const char *rel)
{
  const char *dir = g_getenv ("HN_SHARED_DIR");
  return g_build_filename (dir ? dir : "../shared", rel, NULL);
}

/* Loaded tokenizers are kept for the whole run (Qwen3's is 11 MB). */
static GHashTable *loaded;

static HnTokenizer *
load_shared (const char *rel)
{
  HnTokenizer *hit = g_hash_table_lookup (loaded, rel);
  if (hit)
    return hn_tokenizer_ref (hit);
  g_autofree char *p = g_path_is_absolute (rel) ? g_strdup (rel) : shared_path (rel);
  g_autoptr (GError) error = NULL;
  HnTokenizer *tok = hn_tokenizer_load (p, &error);
  g_assert_no_error (error);
  g_assert_nonnull (tok);
  g_hash_table_insert (loaded, g_strdup (rel), hn_tokenizer_ref (tok));
  return tok;
}

/* Reads name.inp / name.out: inputs separated by "\n__ggml_vocab_test__\n"
 * (each input, the last too, is followed by the separator: so an input never
 * includes the newline before it), one line of space-separated ids each. */
static void
run_golden (const char *tokenizer_rel, const char *name)
{
  g_autoptr (HnTokenizer) tok = load_shared (tokenizer_rel);
  g_autofree char *inp_rel = g_strdup_printf ("tokenizers/golden/%s.inp", name);
  g_autofree char *out_rel = g_strdup_printf ("tokenizers/golden/%s.out", name);
  g_autofree char *inp_path = shared_path (inp_rel), *out_path = shared_path (out_rel);
  g_autofree char *inp = NULL, *out = NULL;
  g_assert_true (g_file_get_contents (inp_path, &inp, NULL, NULL));
  g_assert_true (g_file_get_contents (out_path, &out, NULL, NULL));
  g_auto (GStrv) inputs = g_strsplit (inp, "\n__ggml_vocab_test__\n", -1);
  g_auto (GStrv) outputs = g_strsplit (out, "\n", -1);
  guint n_in = g_strv_length (inputs), n_out = g_strv_length (outputs);
  g_assert_cmpuint (n_in, >=, 2);
  g_assert_cmpstr (inputs[n_in - 1], ==, ""); /* text after the last separator */
  n_in--;
  g_assert_cmpuint (n_out, ==, n_in + 1); /* trailing newline */
  guint ok = 0;
  for (guint i = 0; i < n_in; i++)
    {
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_autoptr (GError) error = NULL;
      g_assert_true (hn_tokenizer_encode (tok, inputs[i], -1, FALSE, ids, &error));
      g_assert_no_error (error);
      g_autoptr (GString) got = g_string_new (NULL);
      for (guint k = 0; k < ids->len; k++)
        g_string_append_printf (got, " %d", g_array_index (ids, int32_t, k));
      if (g_str_equal (got->str, outputs[i]))
        ok++;
      else
        g_test_message ("%s #%u %s\n  input:    '%s'\n  expected: '%s'\n  got:      '%s'", name, i, tokenizer_rel,
                        inputs[i], outputs[i], got->str);
    }
  g_test_message ("%s with %s: %u/%u", name, tokenizer_rel, ok, n_in);
  g_assert_cmpuint (ok, ==, n_in);
}

static void test_golden_gpt2 (void) { run_golden ("tokenizers/gpt2", "gpt-2"); }
static void test_golden_gpt2_file (void) { run_golden ("tokenizers/gpt2/vocab.json", "gpt-2"); }
static void test_golden_qwen2 (void) { run_golden ("tokenizers/qwen3/tokenizer.json", "qwen2"); }
static void test_golden_llama_json (void) { run_golden ("tokenizers/llama2/tokenizer.json", "llama-spm"); }
static void test_golden_llama_model (void) { run_golden ("tokenizers/llama2/tokenizer.model", "llama-spm"); }
static void test_golden_bert (void) { run_golden ("tokenizers/bert-base-uncased/vocab.txt", "bert-bge"); }

static GArray *encode (HnTokenizer *tok, const char *text, gboolean special);

/* ---- the slow files rewritten as tokenizer.json, through the same golden ids ---- */

static void
json_escape (GString *out, const char *s)
{
  g_string_append_c (out, '"');
  for (const char *p = s; *p; p++)
    {
      if (*p == '"' || *p == '\\')
        g_string_append_printf (out, "\\%c", *p);
      else if ((guchar) *p < 0x20)
        g_string_append_printf (out, "\\u%04x", (guchar) *p);
      else
        g_string_append_c (out, *p);
    }
  g_string_append_c (out, '"');
}

static char *tmpdir;

static char *
write_tmp_json (const char *name, GString *json)
{
  char *p = g_build_filename (tmpdir, name, NULL);
  g_assert_true (g_file_set_contents (p, json->str, (gssize) json->len, NULL));
  return p;
}

static void
test_golden_gpt2_as_json (void)
{
  g_autofree char *vp = shared_path ("tokenizers/gpt2/vocab.json"), *mp = shared_path ("tokenizers/gpt2/merges.txt");
  g_autofree char *vocab = NULL, *merges = NULL;
  g_assert_true (g_file_get_contents (vp, &vocab, NULL, NULL));
  g_assert_true (g_file_get_contents (mp, &merges, NULL, NULL));
  g_autoptr (GString) j = g_string_new ("{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 50256, \"content\": \"<|endoftext|>\", "
                                        "\"special\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                                        "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
                                        "\"post_processor\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}, "
                                        "\"model\": {\"type\": \"BPE\", \"unk_token\": null, \"vocab\": ");
  g_string_append (j, vocab);
  g_string_append (j, ", \"merges\": [");
  g_auto (GStrv) lines = g_strsplit (merges, "\n", -1);
  gboolean first = TRUE;
  for (guint i = 0; lines[i]; i++)
    {
      if (!*lines[i] || g_str_has_prefix (lines[i], "#version"))
        continue;
      if (!first)
        g_string_append (j, ", ");
      first = FALSE;
      json_escape (j, lines[i]);
    }
  g_string_append (j, "]}}");
  g_autofree char *path = write_tmp_json ("gpt2-tokenizer.json", j);
  run_golden (path, "gpt-2");
}

static void
test_golden_bert_as_json (void)
{
  g_autofree char *vp = shared_path ("tokenizers/bert-base-uncased/vocab.txt");
  g_autofree char *vocab = NULL;
  g_assert_true (g_file_get_contents (vp, &vocab, NULL, NULL));
  g_autoptr (GString) j = g_string_new (
    "{\"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, \"handle_chinese_chars\": true, "
    "\"strip_accents\": null, \"lowercase\": true}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
    "\"added_tokens\": [{\"id\": 0, \"content\": \"[PAD]\", \"special\": true}, {\"id\": 100, \"content\": \"[UNK]\", \"special\": true}, "
    "{\"id\": 101, \"content\": \"[CLS]\", \"special\": true}, {\"id\": 102, \"content\": \"[SEP]\", \"special\": true}, "
    "{\"id\": 103, \"content\": \"[MASK]\", \"special\": true}], "
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, "
    "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], "
    "\"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [101]}, \"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [102]}}}, "
    "\"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}, "
    "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\", "
    "\"max_input_chars_per_word\": 100, \"vocab\": {");
  g_auto (GStrv) lines = g_strsplit (vocab, "\n", -1);
  for (guint i = 0; lines[i] && *lines[i]; i++)
    {
      if (i)
        g_string_append (j, ", ");
      json_escape (j, lines[i]);
      g_string_append_printf (j, ": %u", i);
    }
  g_string_append (j, "}}}");
  g_autofree char *path = write_tmp_json ("bert-tokenizer.json", j);
  run_golden (path, "bert-bge");
  g_autoptr (HnTokenizer) tok = load_shared (path);
  g_autoptr (GArray) ids = encode (tok, "Hello, World!", TRUE);
  const int32_t expect[] = { 101, 7592, 1010, 2088, 999, 102 };
  g_assert_cmpmem (ids->data, ids->len * 4, expect, sizeof expect);
}

static GArray *
encode (HnTokenizer *tok, const char *text, gboolean special)
{
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_tokenizer_encode (tok, text, -1, special, ids, &error));
  g_assert_no_error (error);
  return ids;
}

static char *
decode (HnTokenizer *tok, GArray *ids, gboolean skip)
{
  g_autoptr (GError) error = NULL;
  char *s = hn_tokenizer_decode (tok, (int32_t *) ids->data, ids->len, skip, &error);
  g_assert_no_error (error);
  return s;
}

/* Streams ids one by one through HnTokenDecoder and checks the pieces add up
 * to the one-shot decode. */
static void
check_stream (HnTokenizer *tok, GArray *ids, gboolean skip)
{
  g_autofree char *whole = decode (tok, ids, skip);
  g_autoptr (HnTokenDecoder) d = hn_token_decoder_new (tok, skip);
  g_autoptr (GString) acc = g_string_new (NULL);
  for (guint i = 0; i < ids->len; i++)
    {
      g_autoptr (GError) error = NULL;
      g_autofree char *piece = hn_token_decoder_push (d, g_array_index (ids, int32_t, i), &error);
      g_assert_no_error (error);
      g_assert_true (g_utf8_validate (piece, -1, NULL));
      g_string_append (acc, piece);
    }
  g_autofree char *rest = hn_token_decoder_flush (d);
  g_string_append (acc, rest);
  g_assert_cmpstr (acc->str, ==, whole);
}

static void
check_round_trip (HnTokenizer *tok, const char *text, const char *expected)
{
  g_autoptr (GArray) ids = encode (tok, text, TRUE);
  g_autofree char *back = decode (tok, ids, TRUE);
  g_assert_cmpstr (back, ==, expected ? expected : text);
  check_stream (tok, ids, TRUE);
  check_stream (tok, ids, FALSE);
}

/* Lines of a shared text, at most `max`, non-empty. */
static GPtrArray *
text_lines (const char *rel, guint max)
{
  g_autofree char *p = shared_path (rel);
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (p, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; lines[i] && out->len < max; i++)
    {
      g_strchomp (lines[i]); /* botchan has \r\n */
      if (*lines[i])
        g_ptr_array_add (out, g_strdup (lines[i]));
    }
  return out;
}

/* What a model folder of class LlamaTokenizer gives back in transformers 5:
 * the text, less the one leading space its decoder strips (the Metaspace
 * prefix, or the text's own first space, which the prefix then stands for). */
static const char *
llama_round_trip (const char *s)
{
  return s[0] == ' ' ? s + 1 : s;
}

static void
test_stories260k (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("models/stories260K");
  g_assert_cmpint (hn_tokenizer_get_vocab_size (tok), ==, 512);
  g_assert_cmpint (hn_tokenizer_get_bos_id (tok), ==, 1);
  g_assert_cmpint (hn_tokenizer_get_eos_id (tok), ==, 2);
  g_assert_cmpint (hn_tokenizer_get_unk_id (tok), ==, 0);
  g_assert_true (hn_tokenizer_get_add_bos (tok));
  g_assert_false (hn_tokenizer_get_add_eos (tok));
  g_assert_true (hn_tokenizer_is_special (tok, 1));
  g_assert_false (hn_tokenizer_is_special (tok, 300));
  g_assert_cmpuint (hn_tokenizer_get_model_max_length (tok), ==, 512);
  g_assert_cmpint (hn_tokenizer_token_to_id (tok, "<0x0A>"), ==, 13);
  g_assert_cmpstr (hn_tokenizer_id_to_token (tok, 1), ==, "<s>");

  /* expected-greedy-ids.txt decodes to the documented story opening */
  g_autofree char *p = shared_path ("models/stories260K/expected-greedy-ids.txt");
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (p, &text, NULL, NULL));
  g_auto (GStrv) nums = g_strsplit_set (g_strstrip (text), " ,\n[]", -1);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint i = 0; nums[i]; i++)
    if (*nums[i])
      {
        int32_t v = (int32_t) g_ascii_strtoll (nums[i], NULL, 10);
        g_array_append_val (ids, v);
      }
  g_autofree char *story = decode (tok, ids, TRUE);
  g_assert_true (g_str_has_prefix (story, "Once upon a time, there was a little girl named Lily."));
  check_stream (tok, ids, FALSE);
  /* encoding the decoded story gives the ids back (BOS first) */
  g_autoptr (GArray) again = encode (tok, story, TRUE);
  g_assert_cmpuint (again->len, <=, ids->len);
  g_assert_cmpint (g_array_index (again, int32_t, 0), ==, 1);

  const char *files[] = { "datasets/tinyshakespeare.txt", "datasets/botchan.txt" };
  for (gsize f = 0; f < G_N_ELEMENTS (files); f++)
    {
      g_autoptr (GPtrArray) lines = text_lines (files[f], 400);
      for (guint i = 0; i < lines->len; i++)
        {
          const char *line = g_ptr_array_index (lines, i);
          check_round_trip (tok, line, llama_round_trip (line));
        }
    }
  /* byte fallback: characters outside the 512-piece vocabulary survive */
  check_round_trip (tok, "Zoë saw 日本 and 🦙!", NULL);
}

/* Model folders against transformers 5.17's AutoTokenizer
 * (tests/fixtures/tokref/tok_reference.json, made by make_tok_reference.py
 * there): trailing newlines, runs of spaces, leading spaces, special tokens in
 * text and byte fallback, with and without the special tokens. */
static void
check_ids (JsonArray *want, GArray *got, const char *tok_name, const char *text, gboolean special)
{
  g_autoptr (GString) w = g_string_new (NULL), g = g_string_new (NULL);
  for (guint i = 0; i < json_array_get_length (want); i++)
    g_string_append_printf (w, "%s%" G_GINT64_FORMAT, i ? " " : "", json_array_get_int_element (want, i));
  for (guint i = 0; i < got->len; i++)
    g_string_append_printf (g, "%s%d", i ? " " : "", g_array_index (got, int32_t, i));
  if (!g_str_equal (w->str, g->str))
    g_error ("%s, %s special tokens, %s: transformers gives [%s], we give [%s]", tok_name, special ? "with" : "without",
             g_strescape (text, NULL), w->str, g->str);
}

static void
test_transformers_reference (void)
{
  g_autofree char *ref = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "tokref", "tok_reference.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (parser, ref, &error));
  g_assert_no_error (error);
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  JsonArray *texts = json_object_get_array_member (root, "texts");
  JsonObject *toks = json_object_get_object_member (root, "tokenizers");
  static const char *const folders[][2] = {
    { "stories260K", "models/stories260K" }, { "llama2", "tokenizers/llama2" }, { "mistral", "tokenizers/mistral" },
  };
  for (gsize f = 0; f < G_N_ELEMENTS (folders); f++)
    {
      g_autoptr (HnTokenizer) tok = load_shared (folders[f][1]);
      JsonArray *cases = json_object_get_array_member (json_object_get_object_member (toks, folders[f][0]), "cases");
      g_assert_cmpuint (json_array_get_length (cases), ==, json_array_get_length (texts));
      for (guint i = 0; i < json_array_get_length (texts); i++)
        {
          const char *text = json_array_get_string_element (texts, i);
          JsonObject *c = json_array_get_object_element (cases, i);
          g_autoptr (GArray) with = encode (tok, text, TRUE), without = encode (tok, text, FALSE);
          check_ids (json_object_get_array_member (c, "ids"), with, folders[f][0], text, TRUE);
          check_ids (json_object_get_array_member (c, "ids_no_special"), without, folders[f][0], text, FALSE);
        }
    }
}

static void
test_mistral (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("tokenizers/mistral");
  g_assert_cmpint (hn_tokenizer_get_vocab_size (tok), ==, 32000);
  g_assert_cmpint (hn_tokenizer_get_bos_id (tok), ==, 1);
  g_assert_true (hn_tokenizer_get_add_bos (tok));
  /* mistral-tokenizer-js's test: "Hello world!" -> 1 22557 1526 28808 */
  g_autoptr (GArray) ids = encode (tok, "Hello world!", TRUE);
  const int32_t expect[] = { 1, 22557, 1526, 28808 };
  g_assert_cmpmem (ids->data, ids->len * 4, expect, sizeof expect);
  g_autoptr (GPtrArray) lines = text_lines ("datasets/botchan.txt", 300);
  for (guint i = 0; i < lines->len; i++)
    check_round_trip (tok, g_ptr_array_index (lines, i), NULL);
  check_round_trip (tok, " leading space, emoji 🦙🦙 and 日本語\nnew line", "leading space, emoji 🦙🦙 and 日本語\nnew line");
  /* special tokens in text are matched, and skipped on request */
  g_autoptr (GArray) sp = encode (tok, "<s>Hi</s>", FALSE);
  g_assert_cmpint (g_array_index (sp, int32_t, 0), ==, 1);
  g_assert_cmpint (g_array_index (sp, int32_t, sp->len - 1), ==, 2);
  g_autofree char *plain = decode (tok, sp, TRUE);
  g_assert_cmpstr (plain, ==, "Hi");
}

static void
test_unigram_model (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("tokenizers/unigram-test/spiece.model");
  g_assert_cmpint (hn_tokenizer_get_vocab_size (tok), ==, 1000);
  g_autoptr (GArray) ids = encode (tok, "Hello world", FALSE);
  g_assert_cmpuint (ids->len, >, 0);
  check_round_trip (tok, "I saw a girl with a telescope.", NULL);
  check_round_trip (tok, "this is a test of the unigram model", NULL);
  /* the NFKC charsmap folds full-width letters and squeezes whitespace */
  g_autoptr (GArray) a = encode (tok, "\xef\xbc\xa1" "BC  def", FALSE);
  g_autoptr (GArray) b = encode (tok, "ABC def", FALSE);
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpmem (a->data, a->len * 4, b->data, b->len * 4);
}

static void
test_qwen_specials (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("tokenizers/qwen3/tokenizer.json");
  g_assert_nonnull (hn_tokenizer_get_chat_template (tok));
  g_assert_cmpint (hn_tokenizer_get_bos_id (tok), ==, -1);
  g_assert_false (hn_tokenizer_get_add_bos (tok));
  int32_t im_end = hn_tokenizer_token_to_id (tok, "<|im_end|>");
  g_assert_cmpint (im_end, ==, 151645);
  g_assert_true (hn_tokenizer_is_eos (tok, im_end));
  g_assert_true (hn_tokenizer_is_special (tok, im_end));
  g_autoptr (GArray) ids = encode (tok, "<|im_start|>user\nHi there<|im_end|>\n", TRUE);
  g_assert_cmpint (g_array_index (ids, int32_t, 0), ==, 151644);
  g_autofree char *back = decode (tok, ids, FALSE);
  g_assert_cmpstr (back, ==, "<|im_start|>user\nHi there<|im_end|>\n");
  g_autofree char *plain = decode (tok, ids, TRUE);
  g_assert_cmpstr (plain, ==, "user\nHi there\n");
  check_round_trip (tok, "Ünïcödé, 日本語 and emoji 🦙 split across byte-level tokens", NULL);
}

static void
test_bert (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("tokenizers/bert-base-uncased/vocab.txt");
  g_autoptr (GArray) ids = encode (tok, "Hello, World!", TRUE);
  const int32_t expect[] = { 101, 7592, 1010, 2088, 999, 102 };
  g_assert_cmpmem (ids->data, ids->len * 4, expect, sizeof expect);
  g_autofree char *back = decode (tok, ids, TRUE);
  g_assert_cmpstr (back, ==, "hello, world!");
  g_assert_cmpint (hn_tokenizer_get_pad_id (tok), ==, 0);
}

static void
test_gpt2_stream (void)
{
  g_autoptr (HnTokenizer) tok = load_shared ("tokenizers/gpt2");
  check_round_trip (tok, "Byte-level: 🦙 日本 ü — done.<|endoftext|>", "Byte-level: 🦙 日本 ü — done.");
  g_assert_cmpint (hn_tokenizer_get_eos_id (tok), ==, 50256);
  /* an id past the vocabulary has no text (tokenizers skips it); a negative one is an error */
  int32_t past[] = { 15496, 999999, 995 };
  g_autoptr (GError) error = NULL;
  g_autofree char *hw = hn_tokenizer_decode (tok, past, 3, FALSE, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hw, ==, "Hello world");
  int32_t bad = -5;
  g_autofree char *s = hn_tokenizer_decode (tok, &bad, 1, FALSE, &error);
  g_assert_null (s);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_assert_false (hn_tokenizer_encode (tok, "bad \xff utf8", -1, FALSE, ids, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

/* ---- spiece.model rewritten as a T5-style tokenizer.json (Precompiled
 * charsmap normalizer + Metaspace + Unigram), as transformers'
 * SpmConverter does; both must give the same ids. ---- */

static gboolean
pb_varint (const guint8 **p, const guint8 *end, guint64 *v)
{
  *v = 0;
  for (int s = 0; s < 64 && *p < end; s += 7)
    {
      guint8 b = *(*p)++;
      *v |= (guint64) (b & 0x7f) << s;
      if (!(b & 0x80))
        return TRUE;
    }
  return FALSE;
}

/* Calls fn for each field of a message: length-delimited payloads as data,
 * varints and fixed32 as value. */
typedef void (*PbField) (guint32 field, const guint8 *data, gsize len, guint64 value, gpointer user);

static void
pb_walk (const guint8 *p, const guint8 *end, PbField fn, gpointer user)
{
  while (p < end)
    {
      guint64 key, v = 0;
      g_assert_true (pb_varint (&p, end, &key));
      switch (key & 7)
        {
        case 0:
          g_assert_true (pb_varint (&p, end, &v));
          fn ((guint32) (key >> 3), NULL, 0, v, user);
          break;
        case 2:
          g_assert_true (pb_varint (&p, end, &v));
          g_assert_cmpuint (v, <=, (guint64) (end - p));
          fn ((guint32) (key >> 3), p, v, 0, user);
          p += v;
          break;
        case 5:
          {
            guint32 x;
            memcpy (&x, p, 4);
            p += 4;
            fn ((guint32) (key >> 3), NULL, 0, x, user);
            break;
          }
        case 1:
          p += 8;
          break;
        default:
          g_assert_not_reached ();
        }
    }
}

typedef struct {
  GString *vocab;     /* JSON array body */
  char *charsmap_b64;
  guint n;
  int unk_id;
  /* current piece */
  char *piece;
  float score;
  guint64 type;
} SpmToJson;

static void
piece_field (guint32 f, const guint8 *d, gsize len, guint64 v, gpointer user)
{
  SpmToJson *c = user;
  if (f == 1 && d)
    c->piece = g_strndup ((const char *) d, len);
  else if (f == 2 && !d)
    {
      guint32 bits = (guint32) v;
      memcpy (&c->score, &bits, 4);
    }
  else if (f == 3 && !d)
    c->type = v;
}

static void
normalizer_field (guint32 f, const guint8 *d, gsize len, guint64 v, gpointer user)
{
  SpmToJson *c = user;
  if (f == 2 && d)
    c->charsmap_b64 = g_base64_encode (d, len);
}

static void json_escape (GString *out, const char *s);

static void
model_field (guint32 f, const guint8 *d, gsize len, guint64 v, gpointer user)
{
  SpmToJson *c = user;
  if (f == 1 && d)
    {
      c->piece = NULL;
      c->score = 0;
      c->type = 1;
      pb_walk (d, d + len, piece_field, c);
      g_assert_nonnull (c->piece);
      if (c->n)
        g_string_append (c->vocab, ", ");
      g_string_append_c (c->vocab, '[');
      json_escape (c->vocab, c->piece);
      g_string_append_printf (c->vocab, ", %.9g]", (double) c->score);
      if (c->type == 2)
        c->unk_id = (int) c->n;
      c->n++;
      g_free (c->piece);
    }
  else if (f == 3 && d)
    pb_walk (d, d + len, normalizer_field, c);
}

static void
test_unigram_as_json (void)
{
  g_autofree char *mp = shared_path ("tokenizers/unigram-test/spiece.model");
  g_autofree char *blob = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (mp, &blob, &len, NULL));
  SpmToJson c = { g_string_new (NULL), NULL, 0, -1, NULL, 0, 0 };
  pb_walk ((const guint8 *) blob, (const guint8 *) blob + len, model_field, &c);
  g_assert_nonnull (c.charsmap_b64);
  g_assert_cmpint (c.unk_id, >=, 0);
  g_autoptr (GString) j = g_string_new (NULL);
  g_string_append_printf (j,
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"%s\"}, "
    "{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}, "
    "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \"\xe2\x96\x81\"}]}, "
    "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true}, "
    "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true}, "
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": %d, \"byte_fallback\": false, \"vocab\": [%s]}}",
    c.charsmap_b64, c.unk_id, c.vocab->str);
  g_string_free (c.vocab, TRUE);
  g_free (c.charsmap_b64);
  g_autofree char *path = write_tmp_json ("unigram-tokenizer.json", j);
  g_autoptr (HnTokenizer) js = load_shared (path);
  g_autoptr (HnTokenizer) spm = load_shared ("tokenizers/unigram-test/spiece.model");
  g_autoptr (GPtrArray) lines = text_lines ("datasets/botchan.txt", 200);
  /* full-width letters and a ligature go through the charsmap */
  g_ptr_array_add (lines, g_strdup ("\xef\xbc\xa8" "ello \xef\xac\x81ne w\xc3\xb6rld"));
  guint same = 0;
  for (guint i = 0; i < lines->len; i++)
    {
      g_autofree char *line = g_strstrip (g_strdup (g_ptr_array_index (lines, i)));
      g_autoptr (GArray) a = encode (js, line, FALSE);
      g_autoptr (GArray) b = encode (spm, line, FALSE);
      if (a->len == b->len && memcmp (a->data, b->data, a->len * 4) == 0)
        same++;
      else
        g_test_message ("differs: '%s'", line);
    }
  g_assert_cmpuint (same, ==, lines->len);
}

/* LlamaTokenizer legacy=false: no dummy prefix after a special token. */
static void
test_spm_legacy_false (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-tok-legacy-XXXXXX", NULL);
  g_autofree char *model = shared_path ("tokenizers/llama2/tokenizer.model");
  g_autofree char *link = g_build_filename (dir, "tokenizer.model", NULL);
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_assert_cmpint (symlink (model, link), ==, 0);
  g_assert_true (g_file_set_contents (cfg, "{\"legacy\": false, \"add_bos_token\": true, \"bos_token\": \"<s>\"}", -1, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnTokenizer) legacy = load_shared ("tokenizers/llama2/tokenizer.model");
  int32_t hello = hn_tokenizer_token_to_id (tok, "Hello"), uhello = hn_tokenizer_token_to_id (tok, "\xe2\x96\x81Hello");
  g_assert_cmpint (hello, >=, 0);
  g_assert_cmpint (uhello, ==, 15043);
  g_autoptr (GArray) a = encode (tok, "<s>Hello", FALSE);
  g_autoptr (GArray) b = encode (legacy, "<s>Hello", FALSE);
  g_assert_cmpuint (a->len, ==, 2);
  g_assert_cmpint (g_array_index (a, int32_t, 1), ==, hello);
  g_assert_cmpuint (b->len, ==, 2);
  g_assert_cmpint (g_array_index (b, int32_t, 1), ==, uhello);
  /* the start of the text still gets it */
  g_autoptr (GArray) c = encode (tok, "Hello", TRUE);
  g_assert_cmpuint (c->len, ==, 2);
  g_assert_cmpint (g_array_index (c, int32_t, 0), ==, 1);
  g_assert_cmpint (g_array_index (c, int32_t, 1), ==, uhello);
  g_unlink (link);
  g_unlink (cfg);
  g_rmdir (dir);
}

/* vocab.json + merges.txt with a RoBERTa-style tokenizer_config.json */
static void
test_roberta_slow (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-tok-roberta-XXXXXX", NULL);
  const char *names[] = { "vocab.json", "merges.txt" };
  for (int i = 0; i < 2; i++)
    {
      g_autofree char *rel = g_build_filename ("tokenizers/gpt2", names[i], NULL);
      g_autofree char *src = shared_path (rel);
      g_autofree char *dst = g_build_filename (dir, names[i], NULL);
      g_assert_cmpint (symlink (src, dst), ==, 0);
    }
  g_autofree char *cfg = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_assert_true (g_file_set_contents (cfg, "{\"tokenizer_class\": \"RobertaTokenizer\", \"add_prefix_space\": true, "
                                      "\"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\", "
                                      "\"clean_up_tokenization_spaces\": true}", -1, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  g_autoptr (GArray) ids = encode (tok, "Hello", TRUE);
  g_assert_cmpuint (ids->len, ==, 3);
  g_assert_cmpint (g_array_index (ids, int32_t, 0), ==, 50256);
  g_assert_cmpint (g_array_index (ids, int32_t, 1), ==, hn_tokenizer_token_to_id (tok, "\xc4\xa0Hello"));
  g_assert_cmpint (g_array_index (ids, int32_t, 2), ==, 50256);
  /* clean_up_tokenization_spaces: " ," and " ." lose their space on decode */
  g_autoptr (GArray) ids2 = encode (tok, "Hello , world . It is n't , is it ?", FALSE);
  g_autofree char *clean = decode (tok, ids2, TRUE);
  g_assert_cmpstr (clean, ==, " Hello, world. It isn't, is it?");
  for (int i = 0; i < 2; i++)
    {
      g_autofree char *dst = g_build_filename (dir, names[i], NULL);
      g_unlink (dst);
    }
  g_unlink (cfg);
  g_rmdir (dir);
}

/* One tokenizer, several threads: the word cache is shared. */
typedef struct {
  HnTokenizer *tok;
  GPtrArray *lines;
  GPtrArray *expected; /* GArray* per line */
  gboolean ok;
} ThreadJob;

static gpointer
thread_encode (gpointer data)
{
  ThreadJob *job = data;
  job->ok = TRUE;
  for (int round = 0; round < 3; round++)
    for (guint i = 0; i < job->lines->len; i++)
      {
        g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
        if (!hn_tokenizer_encode (job->tok, g_ptr_array_index (job->lines, i), -1, TRUE, ids, NULL))
          job->ok = FALSE;
        GArray *want = g_ptr_array_index (job->expected, i);
        if (ids->len != want->len || memcmp (ids->data, want->data, ids->len * 4) != 0)
          job->ok = FALSE;
      }
  return NULL;
}

static void
test_threads (void)
{
  const char *names[] = { "tokenizers/llama2/tokenizer.json", "tokenizers/gpt2" };
  for (gsize t = 0; t < G_N_ELEMENTS (names); t++)
    {
      g_autoptr (HnTokenizer) tok = load_shared (names[t]);
      g_autoptr (GPtrArray) lines = text_lines ("datasets/botchan.txt", 300);
      g_autoptr (GPtrArray) expected = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
      g_autoptr (HnTokenizer) fresh = NULL;
      {
        /* expected ids from a separate, single-threaded instance */
        g_autofree char *p = shared_path (names[t]);
        fresh = hn_tokenizer_load (p, NULL);
        g_assert_nonnull (fresh);
      }
      for (guint i = 0; i < lines->len; i++)
        g_ptr_array_add (expected, encode (fresh, g_ptr_array_index (lines, i), TRUE));
      ThreadJob jobs[4];
      GThread *threads[4];
      for (int k = 0; k < 4; k++)
        {
          jobs[k] = (ThreadJob) { tok, lines, expected, FALSE };
          threads[k] = g_thread_new ("encode", thread_encode, &jobs[k]);
        }
      for (int k = 0; k < 4; k++)
        {
          g_thread_join (threads[k]);
          g_assert_true (jobs[k].ok);
        }
    }
}

/* ---- corrupt files ---- */

static void
expect_load_error (const char *dir, const char *name, const char *content, gssize len, int code, const char *needle)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (p, content, len, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (p, &error);
  g_assert_null (tok);
  g_assert_error (error, HN_ERROR, code);
  if (!strstr (error->message, needle))
    g_error ("error '%s' does not mention '%s'", error->message, needle);
  if (!strstr (error->message, dir))
    g_error ("error '%s' does not name the file in %s", error->message, dir);
  g_unlink (p);
}

static void
test_corrupt (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-tok-XXXXXX", NULL);
  g_assert_nonnull (dir);
  expect_load_error (dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", -1, HN_ERROR_CORRUPT, "not valid JSON");
  expect_load_error (dir, "tokenizer.json", "{\"version\": \"1.0\"}", -1, HN_ERROR_CORRUPT, "no 'model'");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}", -1,
                     HN_ERROR_CORRUPT, "not in the vocabulary");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", -1,
                     HN_ERROR_CORRUPT, "used by two tokens");
  /* well-formed JSON of the wrong shape is named as the merge it is */
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                     "\"merges\": [[\"a\", \"b\", \"c\"]]}}", -1,
                     HN_ERROR_CORRUPT, "model.merges[0] is not a pair of two strings [\"a\", \"b\"] (expected ']')");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\", 7]}}", -1,
                     HN_ERROR_CORRUPT, "is neither a string \"a b\" nor a pair");
  /* an invalid id is shown as written (it was clamped to -1) */
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": -3}, \"merges\": []}}", -1,
                     HN_ERROR_CORRUPT, "token 'b' has an invalid id -3");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                     "\"added_tokens\": [{\"id\": -3, \"content\": \"<x>\", \"special\": true}]}", -1,
                     HN_ERROR_CORRUPT, "added_tokens[0] has an invalid id -3");
  expect_load_error (dir, "tokenizer.json", "{\"model\": {\"type\": \"Mystery\", \"vocab\": {\"a\": 0}}}", -1,
                     HN_ERROR_UNSUPPORTED, "Mystery");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                     " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                     -1, HN_ERROR_CORRUPT, "does not compile");
  expect_load_error (dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                     " \"normalizer\": {\"type\": \"Mystery\"}}", -1, HN_ERROR_UNSUPPORTED, "Mystery");
  /* a SentencePiece model cut in the middle of a piece */
  g_autofree char *spm = shared_path ("tokenizers/llama2/tokenizer.model");
  g_autofree char *blob = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (spm, &blob, &len, NULL));
  expect_load_error (dir, "tokenizer.model", blob, 1001, HN_ERROR_CORRUPT, "malformed SentencePiece protobuf");
  expect_load_error (dir, "tokenizer.model", "\x0a\x05\x0a\x01", 4, HN_ERROR_CORRUPT, "malformed");
  expect_load_error (dir, "vocab.txt", "hello\nworld\n", -1, HN_ERROR_CORRUPT, "[UNK]");
  expect_load_error (dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}", -1, HN_ERROR_NOT_FOUND, "merges.txt");
  g_autofree char *merges = g_build_filename (dir, "merges.txt", NULL);
  g_assert_true (g_file_set_contents (merges, "#version: 0.2\na b\nab c\n", -1, NULL));
  expect_load_error (dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}", -1, HN_ERROR_CORRUPT, "merges.txt:3");
  g_unlink (merges);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) none = hn_tokenizer_load (dir, &error);
  g_assert_null (none);
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_rmdir (dir);
}

/* ---- the whole of tinyshakespeare: round trip, time reported ---- */

static void
time_file (const char *tokenizer_rel)
{
  g_autoptr (HnTokenizer) tok = load_shared (tokenizer_rel);
  g_autofree char *p = shared_path ("datasets/tinyshakespeare.txt");
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (p, &text, &len, NULL));
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  gint64 t0 = g_get_monotonic_time ();
  clock_t c0 = clock ();
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_tokenizer_encode (tok, text, (gssize) len, FALSE, ids, &error));
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  double cpu = (double) (clock () - c0) / CLOCKS_PER_SEC;
  g_test_message ("tinyshakespeare (%zu bytes) with %s: %u tokens in %.3f s (%.3f s CPU)", len, tokenizer_rel, ids->len,
                  secs, cpu);
  /* Reported, not asserted: speed is measured by benchmarks, never by a
   * timed test (sanitizer builds run this 10x slower). */
  g_assert_cmpuint (ids->len, >, len / 8);
  g_autofree char *back = hn_tokenizer_decode (tok, (int32_t *) ids->data, ids->len, FALSE, &error);
  g_assert_no_error (error);
  if (!strstr (tokenizer_rel, "stories") && !strstr (tokenizer_rel, "bert"))
    g_assert_true (g_str_equal (back, text));
}

static void test_speed_qwen (void) { time_file ("tokenizers/qwen3/tokenizer.json"); }
static void test_speed_gpt2 (void) { time_file ("tokenizers/gpt2"); }
static void test_speed_llama (void) { time_file ("tokenizers/llama2/tokenizer.json"); }
static void test_speed_llama_model (void) { time_file ("tokenizers/llama2/tokenizer.model"); }
static void test_speed_bert (void) { time_file ("tokenizers/bert-base-uncased/vocab.txt"); }

/* A long text is encoded in chunks (bounded memory for a training file):
 * the ids are those of the whole text, for a SentencePiece-style tokenizer
 * (Strip/Prepend normalizers, no pre-tokenizer) and a WordPiece one, with
 * newlines that allow a cut and a long line that does not. */
static void
test_chunked_encode (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *story = g_build_filename (shared, "models", "stories260K", NULL);
  g_autofree char *mlm = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "mlm", NULL);
  g_autofree char *text_path = g_build_filename (shared, "datasets", "tinyshakespeare.txt", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (text_path, &text, &len, NULL));
  GString *t = g_string_new_len (text, (gssize) MIN (len, 300000));
  for (int i = 0; i < 60000; i++) /* a 240 kB line: no newline to cut at */
    g_string_append (t, i % 7 ? "word " : "Word, ");
  g_string_append (t, "\n  Last  line.\n");
  const char *dirs[] = { story, mlm };
  for (guint d = 0; d < G_N_ELEMENTS (dirs); d++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dirs[d], &error);
      g_assert_no_error (error);
      g_autoptr (GArray) whole = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_autoptr (GArray) chunked = g_array_new (FALSE, FALSE, sizeof (int32_t));
      hn_tokenizer_set_encode_chunk (tok, 0);
      g_assert_true (hn_tokenizer_encode (tok, t->str, (gssize) t->len, TRUE, whole, &error));
      hn_tokenizer_set_encode_chunk (tok, 8192); /* dozens of cuts */
      g_assert_true (hn_tokenizer_encode (tok, t->str, (gssize) t->len, TRUE, chunked, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (whole->len, >, 10000);
      g_assert_cmpuint (chunked->len, ==, whole->len);
      g_assert_cmpmem (chunked->data, chunked->len * 4, whole->data, whole->len * 4);
    }
  g_string_free (t, TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  loaded = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, (GDestroyNotify) hn_tokenizer_unref);
  g_test_add_func ("/tokenizer/golden/gpt-2", test_golden_gpt2);
  g_test_add_func ("/tokenizer/golden/gpt-2-file", test_golden_gpt2_file);
  g_test_add_func ("/tokenizer/golden/qwen2", test_golden_qwen2);
  g_test_add_func ("/tokenizer/golden/llama-spm-json", test_golden_llama_json);
  g_test_add_func ("/tokenizer/golden/llama-spm-model", test_golden_llama_model);
  g_test_add_func ("/tokenizer/golden/bert-bge", test_golden_bert);
  g_test_add_func ("/tokenizer/golden/gpt-2-as-tokenizer-json", test_golden_gpt2_as_json);
  g_test_add_func ("/tokenizer/golden/bert-bge-as-tokenizer-json", test_golden_bert_as_json);
  g_test_add_func ("/tokenizer/unigram-as-tokenizer-json", test_unigram_as_json);
  g_test_add_func ("/tokenizer/stories260k", test_stories260k);
  g_test_add_func ("/tokenizer/transformers-reference", test_transformers_reference);
  g_test_add_func ("/tokenizer/mistral", test_mistral);
  g_test_add_func ("/tokenizer/unigram-model", test_unigram_model);
  g_test_add_func ("/tokenizer/qwen-specials", test_qwen_specials);
  g_test_add_func ("/tokenizer/bert", test_bert);
  g_test_add_func ("/tokenizer/gpt2-stream", test_gpt2_stream);
  g_test_add_func ("/tokenizer/corrupt", test_corrupt);
  g_test_add_func ("/tokenizer/spm-legacy-false", test_spm_legacy_false);
  g_test_add_func ("/tokenizer/threads", test_threads);
  g_test_add_func ("/tokenizer/roberta-slow", test_roberta_slow);
  g_test_add_func ("/tokenizer/speed/qwen3", test_speed_qwen);
  g_test_add_func ("/tokenizer/speed/gpt2", test_speed_gpt2);
  g_test_add_func ("/tokenizer/speed/llama-json", test_speed_llama);
  g_test_add_func ("/tokenizer/speed/llama-model", test_speed_llama_model);
  g_test_add_func ("/tokenizer/speed/bert", test_speed_bert);
  g_test_add_func ("/tokenizer/chunked-encode", test_chunked_encode);
  tmpdir = g_dir_make_tmp ("hn-tok-golden-XXXXXX", NULL);
  int ret = g_test_run ();
  g_hash_table_unref (loaded);
  g_autofree char *g1 = g_build_filename (tmpdir, "gpt2-tokenizer.json", NULL);
  g_autofree char *g2 = g_build_filename (tmpdir, "bert-tokenizer.json", NULL);
  g_autofree char *g3 = g_build_filename (tmpdir, "unigram-tokenizer.json", NULL);
  g_unlink (g3);
  g_unlink (g1);
  g_unlink (g2);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}
