/* The tokenizer.json components one at a time, on small hand-written files
 * whose expected results follow from tokenizers' documented semantics
 * (split behaviours, prepend schemes, added-token flags, decoders,
 * post-processors, Unigram Viterbi). A WordPiece model whose vocabulary holds
 * whole pieces makes the pre-tokenizer's split points visible as tokens. */
#include "tokenizer/tokenizer.h"
#include "base/hn-error.h"
#include <glib/gstdio.h>
#include <string.h>

static char *tmpdir;

static HnTokenizer *
make (const char *json)
{
  g_autofree char *p = g_build_filename (tmpdir, "tokenizer.json", NULL);
  g_assert_true (g_file_set_contents (p, json, -1, NULL));
  g_autoptr (GError) error = NULL;
  HnTokenizer *tok = hn_tokenizer_load (p, &error);
  g_assert_no_error (error);
  g_unlink (p);
  return tok;
}

/* A WordPiece model over the given pieces ("[UNK]" is id 0). */
static char *
wp_model (const char *pieces)
{
  g_auto (GStrv) list = g_strsplit (pieces, " ", -1);
  GString *s = g_string_new ("{\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\", "
                             "\"max_input_chars_per_word\": 100, \"vocab\": {\"[UNK]\": 0");
  for (guint i = 0; list[i]; i++)
    g_string_append_printf (s, ", \"%s\": %u", list[i], i + 1);
  g_string_append (s, "}}");
  return g_string_free (s, FALSE);
}

/* Encodes and joins the token strings with '|'. */
static char *
pieces (HnTokenizer *tok, const char *text, gboolean special)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_tokenizer_encode (tok, text, -1, special, ids, &error));
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < ids->len; i++)
    {
      if (i)
        g_string_append_c (s, '|');
      g_string_append (s, hn_tokenizer_id_to_token (tok, g_array_index (ids, int32_t, i)));
    }
  return g_string_free (s, FALSE);
}

static void
check (const char *model, const char *normalizer, const char *pretok, const char *added, const char *text,
       const char *expected)
{
  g_autofree char *json = g_strdup_printf ("{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s, "
                                           "\"pre_tokenizer\": %s, \"post_processor\": null, \"decoder\": null, \"model\": %s}",
                                           added ? added : "[]", normalizer ? normalizer : "null",
                                           pretok ? pretok : "null", model);
  g_autoptr (HnTokenizer) tok = make (json);
  g_autofree char *got = pieces (tok, text, FALSE);
  if (!g_str_equal (got, expected))
    g_error ("normalizer %s, pre_tokenizer %s, added %s on '%s': expected '%s', got '%s'", normalizer, pretok, added,
             text, expected, got);
}

#define SPLIT(behavior, invert) \
  "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"" behavior "\", \"invert\": " invert "}"

static void
test_split_behaviors (void)
{
  g_autofree char *m = wp_model ("a b c - a- b- -b -c --");
  check (m, NULL, SPLIT ("Removed", "false"), NULL, "a-b--c", "a|b|c");
  check (m, NULL, SPLIT ("Isolated", "false"), NULL, "a-b--c", "a|-|b|-|-|c");
  check (m, NULL, SPLIT ("MergedWithPrevious", "false"), NULL, "a-b--c", "a-|b-|-|c");
  check (m, NULL, SPLIT ("MergedWithNext", "false"), NULL, "a-b--c", "a|-b|-|-c");
  check (m, NULL, SPLIT ("Contiguous", "false"), NULL, "a-b--c", "a|-|b|--|c");
  check (m, NULL, SPLIT ("Removed", "true"), NULL, "a-b--c", "-|-|-");
  check (m, NULL, SPLIT ("Isolated", "true"), NULL, "a-b--c", "a|-|b|-|-|c");
  g_autofree char *m2 = wp_model ("ab 12 cd 3");
  check (m2, NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"}, \"behavior\": \"Isolated\", \"invert\": false}",
         NULL, "ab12cd3", "ab|12|cd|3");
}

static void
test_pretokenizers (void)
{
  g_autofree char *m = wp_model ("ab 1 2 3 123 hi ! ? , there hi, x");
  check (m, NULL, "{\"type\": \"Digits\", \"individual_digits\": true}", NULL, "ab123", "ab|1|2|3");
  check (m, NULL, "{\"type\": \"Digits\", \"individual_digits\": false}", NULL, "ab123", "ab|123");
  check (m, NULL, "{\"type\": \"Punctuation\", \"behavior\": \"Isolated\"}", NULL, "hi!?", "hi|!|?");
  check (m, NULL, "{\"type\": \"Whitespace\"}", NULL, "hi, there", "hi|,|there");
  check (m, NULL, "{\"type\": \"WhitespaceSplit\"}", NULL, "hi,  there", "hi,|there");
  check (m, NULL, "{\"type\": \"BertPreTokenizer\"}", NULL, " hi,there! ", "hi|,|there|!");
  check (m, NULL,
         "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": \"Digits\", \"individual_digits\": true}]}",
         NULL, "hi 12x", "hi|1|2|x");
  /* ByteLevel with add_prefix_space: "hi" becomes "Ġhi" */
  g_autofree char *bl = wp_model ("\xc4\xa0hi \xc4\xa0there hi");
  check (bl, NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}", NULL, "hi there",
         "\xc4\xa0hi|\xc4\xa0there");
  check (bl, NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}", NULL, "hi there",
         "hi|\xc4\xa0there");
}

#define U "\xe2\x96\x81" /* ▁ */
#define METASPACE(scheme, split) \
  "{\"type\": \"Metaspace\", \"replacement\": \"" U "\", \"prepend_scheme\": \"" scheme "\", \"split\": " split "}"
#define ADDED_X "[{\"id\": 100, \"content\": \"<x>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}]"

static void
test_metaspace (void)
{
  g_autofree char *m = wp_model (U "hey hey " U "you " U "hey" U "you");
  check (m, NULL, METASPACE ("always", "true"), NULL, "hey you", U "hey|" U "you");
  check (m, NULL, METASPACE ("never", "true"), NULL, "hey you", "hey|" U "you");
  check (m, NULL, METASPACE ("always", "false"), NULL, "hey you", U "hey" U "you");
  /* "first": only the piece at the very start of the input gets the prefix */
  check (m, NULL, METASPACE ("first", "true"), ADDED_X, "hey you", U "hey|" U "you");
  check (m, NULL, METASPACE ("first", "true"), ADDED_X, "<x>hey you", "<x>|hey|" U "you");
  check (m, NULL, METASPACE ("always", "true"), ADDED_X, "<x>hey you", "<x>|" U "hey|" U "you");
}

static void
test_normalizers (void)
{
  g_autofree char *m = wp_model ("hello hi cafe ayb " U "hi \xe4\xb8\xad");
  const char *ws = "{\"type\": \"WhitespaceSplit\"}";
  check (m, "{\"type\": \"Lowercase\"}", ws, NULL, "HeLLo", "hello");
  check (m, "{\"type\": \"NFKC\"}", ws, NULL, "\xef\xbd\x88\xef\xbd\x89", "hi"); /* full-width ｈｉ */
  check (m, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": \"StripAccents\"}]}", ws, NULL,
         "caf\xc3\xa9", "cafe");
  check (m, "{\"type\": \"Replace\", \"pattern\": {\"String\": \"x\"}, \"content\": \"y\"}", ws, NULL, "axb", "ayb");
  check (m, "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"[0-9]+\"}, \"content\": \"\"}", ws, NULL, "he11llo0", "hello");
  check (m, "{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}", NULL, NULL, "  hi \t", "hi");
  check (m, "{\"type\": \"Prepend\", \"prepend\": \"" U "\"}", NULL, NULL, "hi", U "hi");
  check (m, "{\"type\": \"BertNormalizer\", \"clean_text\": true, \"handle_chinese_chars\": true, \"strip_accents\": null, "
            "\"lowercase\": true}", ws, NULL, "H\xc3\xa9l\x01lo\tHi\xe4\xb8\xad", "hello|hi|\xe4\xb8\xad");
  check (m, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"}, {\"type\": \"Strip\", \"strip_left\": true, "
            "\"strip_right\": false}]}", NULL, NULL, "  HI", "hi");
}

#define ADDED(content, lstrip, rstrip, single, normalized, special) \
  "[{\"id\": 100, \"content\": \"" content "\", \"single_word\": " single ", \"lstrip\": " lstrip ", \"rstrip\": " rstrip \
  ", \"normalized\": " normalized ", \"special\": " special "}]"

static void
test_added_tokens (void)
{
  g_autofree char *m = wp_model ("a a\\u0020 b \\u0020b x xab");
  check (m, NULL, NULL, ADDED ("<m>", "false", "false", "false", "false", "true"), "a <m>b", "a |<m>|b");
  check (m, NULL, NULL, ADDED ("<m>", "true", "false", "false", "false", "true"), "a <m>b", "a|<m>|b");
  check (m, NULL, NULL, ADDED ("<m>", "false", "false", "false", "false", "true"), "a<m> b", "a|<m>| b");
  check (m, NULL, NULL, ADDED ("<m>", "false", "true", "false", "false", "true"), "a<m> b", "a|<m>|b");
  const char *ws = "{\"type\": \"WhitespaceSplit\"}";
  check (m, NULL, ws, ADDED ("ab", "false", "false", "false", "false", "false"), "xab ab", "x|ab|ab");
  check (m, NULL, ws, ADDED ("ab", "false", "false", "true", "false", "false"), "xab ab", "xab|ab");
  /* normalized tokens are matched after the normalizer, the others before */
  const char *lower = "{\"type\": \"Lowercase\"}";
  check (m, lower, ws, ADDED ("<hi>", "false", "false", "false", "true", "false"), "a<HI>b", "a|<hi>|b");
  check (m, lower, ws, ADDED ("<hi>", "false", "false", "false", "false", "false"), "a<HI>b", "[UNK]");
  /* the longest added token wins */
  check (m, NULL, NULL,
         "[{\"id\": 100, \"content\": \"<a>\", \"special\": true}, {\"id\": 101, \"content\": \"<a><b>\", \"special\": true}]",
         "<a><b>a", "<a><b>|a");
}

static void
test_bpe_options (void)
{
  /* continuing_subword_prefix: merges name the "##" form of the right part */
  const char *bpe_cont = "{\"type\": \"BPE\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\", "
                         "\"vocab\": {\"[UNK]\": 0, \"a\": 1, \"##b\": 2, \"ab\": 3, \"##a\": 4, \"b\": 5}, \"merges\": [\"a ##b\"]}";
  check (bpe_cont, NULL, "{\"type\": \"WhitespaceSplit\"}", NULL, "ab ba", "ab|b|##a");
  /* end_of_word_suffix and merges as pairs */
  const char *bpe_eow = "{\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\", \"unk_token\": \"[UNK]\", "
                        "\"vocab\": {\"[UNK]\": 0, \"a\": 1, \"b</w>\": 2, \"ab</w>\": 3, \"b\": 4, \"a</w>\": 5}, \"merges\": [[\"a\", \"b</w>\"]]}";
  check (bpe_eow, NULL, "{\"type\": \"WhitespaceSplit\"}", NULL, "ab ba", "ab</w>|b|a</w>");
  /* ignore_merges: a word in the vocabulary is taken whole */
#define BPE_IGN "{\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4}, " \
                "\"merges\": [\"a b\"]}"
  g_autofree char *ign = g_strdup_printf (BPE_IGN, "true");
  g_autofree char *noign = g_strdup_printf (BPE_IGN, "false");
  check (ign, NULL, NULL, NULL, "abc", "abc");
  check (noign, NULL, NULL, NULL, "abc", "ab|c");
  /* unknown characters: fused into one <unk> with fuse_unk */
#define BPE_UNK "{\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": %s, \"vocab\": {\"<unk>\": 0, \"a\": 1}, \"merges\": []}"
  g_autofree char *fuse = g_strdup_printf (BPE_UNK, "true");
  g_autofree char *nofuse = g_strdup_printf (BPE_UNK, "false");
  check (fuse, NULL, NULL, NULL, "azza", "a|<unk>|a");
  check (nofuse, NULL, NULL, NULL, "azza", "a|<unk>|<unk>|a");
}

static void
test_wrong_types_tolerated (void)
{
  /* optional numbers of the wrong type fall back to their defaults */
  g_autoptr (HnTokenizer) tok = make ("{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", "
                                      "\"max_input_chars_per_word\": \"x\", \"vocab\": {\"[UNK]\": 0, \"hi\": 1}}, "
                                      "\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": \"x\", \"stop\": null}}");
  g_autofree char *p = pieces (tok, "hi", FALSE);
  g_assert_cmpstr (p, ==, "hi");
}

static void
test_wordlevel (void)
{
  const char *model = "{\"type\": \"WordLevel\", \"unk_token\": \"<unk>\", \"vocab\": {\"<unk>\": 0, \"hi\": 1, \"there\": 2}}";
  check (model, NULL, "{\"type\": \"CharDelimiterSplit\", \"delimiter\": \"_\"}", NULL, "hi_there__you", "hi|there|<unk>");
}

static void
test_unigram (void)
{
  /* scores: "▁ab" beats "▁"+"ab"; "▁b"+"a" beats "▁"+"b"+"a"; an unknown
   * character costs min - 10 and consecutive unknowns fuse */
  const char *model = "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0.0], [\"" U "\", -2.0], "
                      "[\"a\", -1.0], [\"b\", -1.0], [\"ab\", -1.5], [\"" U "ab\", -1.0], [\"" U "b\", -1.8]]}";
  const char *ms = METASPACE ("always", "true");
  check (model, NULL, ms, NULL, "ab", U "ab");
  check (model, NULL, ms, NULL, "ba", U "b|a");
  check (model, NULL, ms, NULL, "zz", U "|<unk>");
  check (model, NULL, ms, NULL, "ab ba", U "ab|" U "b|a");
}

static char *
decode_tokens (const char *model, const char *decoder, const int32_t *ids, gsize n)
{
  g_autofree char *json = g_strdup_printf ("{\"model\": %s, \"decoder\": %s}", model, decoder);
  g_autoptr (HnTokenizer) tok = make (json);
  g_autoptr (GError) error = NULL;
  char *s = hn_tokenizer_decode (tok, ids, n, FALSE, &error);
  g_assert_no_error (error);
  return s;
}

static void
test_decoders (void)
{
  g_autofree char *m = wp_model ("hel ##lo world . " U "hey " U "you he##llo wor</w> ld</w>");
  const int32_t wp[] = { 1, 2, 3, 4 };
  g_autofree char *a = decode_tokens (m, "{\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}", wp, 4);
  g_assert_cmpstr (a, ==, "hello world.");
  const int32_t ms[] = { 5, 6 };
  g_autofree char *b = decode_tokens (m, METASPACE ("always", "true"), ms, 2);
  g_assert_cmpstr (b, ==, "hey you");
  g_autofree char *c = decode_tokens (m, METASPACE ("never", "true"), ms, 2);
  g_assert_cmpstr (c, ==, " hey you");
  const int32_t bpe[] = { 8, 9 };
  g_autofree char *d = decode_tokens (m, "{\"type\": \"BPEDecoder\", \"suffix\": \"</w>\"}", bpe, 2);
  g_assert_cmpstr (d, ==, "wor ld");
  g_autofree char *e = decode_tokens (m, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                                         "{\"String\": \"" U "\"}, \"content\": \" \"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
                                         "\"content\": \" \", \"start\": 1, \"stop\": 0}]}", ms, 2);
  g_assert_cmpstr (e, ==, "hey you");
  /* no decoder: tokens joined with spaces */
  g_autofree char *f = decode_tokens (m, "null", wp, 2);
  g_assert_cmpstr (f, ==, "hel ##lo");
}

static void
check_post (const char *post, const char *text, const char *expected, gboolean add_bos, gboolean add_eos)
{
  g_autofree char *m = wp_model ("[CLS] [SEP] <s> </s> hi");
  g_autofree char *json = g_strdup_printf ("{\"added_tokens\": [{\"id\": 1, \"content\": \"[CLS]\", \"special\": true}, "
                                           "{\"id\": 2, \"content\": \"[SEP]\", \"special\": true}, {\"id\": 3, \"content\": \"<s>\", "
                                           "\"special\": true}, {\"id\": 4, \"content\": \"</s>\", \"special\": true}], "
                                           "\"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, \"post_processor\": %s, \"model\": %s}",
                                           post, m);
  g_autoptr (HnTokenizer) tok = make (json);
  g_autofree char *got = pieces (tok, text, TRUE);
  g_assert_cmpstr (got, ==, expected);
  g_autofree char *plain = pieces (tok, text, FALSE);
  g_assert_cmpstr (plain, ==, "hi");
  g_assert_cmpint (hn_tokenizer_get_add_bos (tok), ==, add_bos);
  g_assert_cmpint (hn_tokenizer_get_add_eos (tok), ==, add_eos);
}

static void
test_post_processors (void)
{
  check_post ("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, "
              "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], "
              "\"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [1], \"tokens\": [\"[CLS]\"]}, "
              "\"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [2], \"tokens\": [\"[SEP]\"]}}}",
              "hi", "[CLS]|hi|[SEP]", FALSE, FALSE);
  check_post ("{\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 2], \"cls\": [\"[CLS]\", 1]}", "hi", "[CLS]|hi|[SEP]", FALSE, FALSE);
  check_post ("{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 4], \"cls\": [\"<s>\", 3], \"trim_offsets\": true, "
              "\"add_prefix_space\": false}", "hi", "<s>|hi|</s>", TRUE, TRUE);
  check_post ("{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
              "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, "
              "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [3], "
              "\"tokens\": [\"<s>\"]}}}]}", "hi", "<s>|hi", TRUE, FALSE);
  check_post ("{\"type\": \"ByteLevel\", \"add_prefix_space\": false}", "hi", "hi", FALSE, FALSE);
}

static void
test_bad_components (void)
{
  const char *cases[][2] = {
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": \"CTC\"}}", "CTC" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}}", "UnicodeScripts" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": \"Mystery\"}}", "Mystery" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}}", "dropout" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *p = g_build_filename (tmpdir, "tokenizer.json", NULL);
      g_assert_true (g_file_set_contents (p, cases[i][0], -1, NULL));
      g_autoptr (GError) error = NULL;
      g_autoptr (HnTokenizer) tok = hn_tokenizer_load (p, &error);
      g_assert_null (tok);
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, cases[i][1]));
      g_unlink (p);
    }
  const char *corrupt[][2] = {
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}", "expected a number" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}", "two tokens" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\ud800\": 0}, \"merges\": []}}", "surrogate" },
    { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": 5}}", "unk_id" },
    { "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "unk_token" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}} trailing", "trailing" },
    /* values of the wrong JSON type are errors, never a crash */
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": "
      "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"a\"}}], \"special_tokens\": {\"a\": {\"ids\": [\"x\"]}}}}",
      "bad id" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": "
      "\"BertProcessing\", \"sep\": [{}, \"x\"], \"cls\": [\"a\", 0]}}", "cls and sep" },
    { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": \"1\", \"content\": \"b\"}]}",
      "added_tokens[0]" },
    { "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": \"0\"}}", "unk_id" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (corrupt); i++)
    {
      g_autofree char *p = g_build_filename (tmpdir, "tokenizer.json", NULL);
      g_assert_true (g_file_set_contents (p, corrupt[i][0], -1, NULL));
      g_autoptr (GError) error = NULL;
      g_autoptr (HnTokenizer) tok = hn_tokenizer_load (p, &error);
      g_assert_null (tok);
      g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
      if (!strstr (error->message, corrupt[i][1]))
        g_error ("'%s' does not mention '%s'", error->message, corrupt[i][1]);
      g_unlink (p);
    }
}

/* Random damage to real tokenizer files: loading gives an HN_ERROR or a
 * tokenizer that encodes and decodes without crashing. */
static void
fuzz_file (const char *rel, const char *name, int iterations)
{
  g_autofree char *src = g_build_filename (g_getenv ("HN_SHARED_DIR"), rel, NULL);
  g_autofree char *orig = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (src, &orig, &len, NULL));
  g_autofree char *dst = g_build_filename (tmpdir, name, NULL);
  g_autoptr (GRand) rand = g_rand_new_with_seed (1234);
  guint loaded = 0, failed = 0;
  for (int it = 0; it < iterations; it++)
    {
      g_autofree char *buf = g_memdup2 (orig, len);
      gsize n = len;
      int kind = g_rand_int_range (rand, 0, 3);
      if (kind == 0)
        n = g_rand_int_range (rand, 0, (gint32) len); /* truncate */
      int flips = kind == 2 ? 1 : g_rand_int_range (rand, 1, 16);
      for (int f = 0; f < flips && n > 0; f++)
        {
          gsize at = g_rand_int_range (rand, 0, (gint32) n);
          buf[at] = kind == 2 ? (char) (buf[at] ^ (1 << g_rand_int_range (rand, 0, 8))) : (char) g_rand_int_range (rand, 0, 256);
        }
      /* without fsync (fast); G_FILE_SET_CONTENTS_NONE does not truncate, so unlink first */
      g_unlink (dst);
      g_assert_true (g_file_set_contents_full (dst, buf, (gssize) n, G_FILE_SET_CONTENTS_NONE, 0644, NULL));
      g_autoptr (GError) error = NULL;
      g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dst, &error);
      if (!tok)
        {
          g_assert_nonnull (error);
          g_assert_true (error->domain == HN_ERROR);
          failed++;
          continue;
        }
      loaded++;
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_assert_true (hn_tokenizer_encode (tok, "Once upon a time, Lily saw 3 dogs \xf0\x9f\xa6\x99 <s> and\nleft.", -1, TRUE,
                                          ids, NULL));
      g_autofree char *back = hn_tokenizer_decode (tok, (int32_t *) ids->data, ids->len, FALSE, NULL);
      g_assert_nonnull (back);
      g_assert_true (g_utf8_validate (back, -1, NULL));
    }
  g_unlink (dst);
  g_test_message ("%s: %u loaded, %u rejected", rel, loaded, failed);
  g_assert_cmpuint (failed, >, 0);
}

static void
test_fuzz (void)
{
  fuzz_file ("models/stories260K/tokenizer.json", "tokenizer.json", 300);
  fuzz_file ("tokenizers/unigram-test/spiece.model", "spiece.model", 120);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmpdir = g_dir_make_tmp ("hn-tokc-XXXXXX", NULL);
  g_test_add_func ("/tokenizer/components/split-behaviors", test_split_behaviors);
  g_test_add_func ("/tokenizer/components/pre-tokenizers", test_pretokenizers);
  g_test_add_func ("/tokenizer/components/metaspace", test_metaspace);
  g_test_add_func ("/tokenizer/components/normalizers", test_normalizers);
  g_test_add_func ("/tokenizer/components/added-tokens", test_added_tokens);
  g_test_add_func ("/tokenizer/components/bpe-options", test_bpe_options);
  g_test_add_func ("/tokenizer/components/unigram", test_unigram);
  g_test_add_func ("/tokenizer/components/wordlevel", test_wordlevel);
  g_test_add_func ("/tokenizer/components/wrong-types", test_wrong_types_tolerated);
  g_test_add_func ("/tokenizer/components/decoders", test_decoders);
  g_test_add_func ("/tokenizer/components/post-processors", test_post_processors);
  g_test_add_func ("/tokenizer/components/bad", test_bad_components);
  g_test_add_func ("/tokenizer/components/fuzz", test_fuzz);
  int ret = g_test_run ();
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}
