/* Hostile files (issue 20's probe of the CLI): JSON nested 100k deep for every
 * json-glib reader, FIFOs and devices where a file is expected, sizes in a
 * config that would truncate or allocate without bound, duplicate tensor
 * names, a huge JSONL row in the preview, NaN weights. Each must fail with a
 * clear error (or succeed where it should), quickly and in bounded memory. */
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"
#include "data/dataset.h"
#include "formats/gen-config.h"
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "hierarchos/hierarchos.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data-parallel.h"
#include "train/lora.h"
#include "transformer/transformer.h"
#include "test-device.h"

#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>

static char *
shared_path (const char *rel)
{
  const char *s = g_getenv ("HN_SHARED_DIR");
  return g_build_filename (s ? s : "../shared", rel, NULL);
}

/* `prefix` + 100k '[' + `suffix`: a stack overflow for a recursive parser. */
static char *
deep_json (const char *prefix, const char *suffix, int depth)
{
  GString *s = g_string_new (prefix);
  for (int i = 0; i < depth; i++)
    g_string_append_c (s, '[');
  for (int i = 0; i < depth; i++)
    g_string_append_c (s, ']');
  g_string_append (s, suffix);
  return g_string_free (s, FALSE);
}

static void
write_file (const char *dir, const char *name, const char *text)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (p, text, -1, NULL));
}

static void
copy_file (const char *from, const char *dir, const char *name)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (from, &data, &len, NULL));
  g_autofree char *p = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (p, data, (gssize) len, NULL));
}

static void
expect_deep (GError *error, const char *what)
{
  if (!error || !strstr (error->message, "nested deeper than 512 levels"))
    g_error ("%s: want the depth error, got %s", what, error ? error->message : "success");
}

static void
test_json_depth (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  g_autofree char *deep = deep_json ("{\"model_type\": \"llama\", \"x\": ", "}", 100000);
  g_autofree char *deep_arr = deep_json ("", "", 100000);

  /* config.json, generation_config.json, adapter_config.json, trainer_state.json, Hierarchos config */
  const char *const names[] = { "config.json", "generation_config.json", "adapter_config.json", "trainer_state.json" };
  for (guint k = 0; k < G_N_ELEMENTS (names); k++)
    write_file (dir, names[k], deep);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (dir, &error);
  g_assert_null (cfg);
  expect_deep (error, "config.json");
  g_clear_error (&error);
  g_autoptr (HnGenerationConfig) gc = hn_generation_config_load (dir, &error);
  g_assert_null (gc);
  expect_deep (error, "generation_config.json");
  g_clear_error (&error);
  HnLoraConfig lc;
  hn_lora_config_init (&lc);
  g_assert_false (hn_lora_config_load (&lc, dir, &error));
  hn_lora_config_clear (&lc);
  expect_deep (error, "adapter_config.json");
  g_clear_error (&error);
  HnTrainerState ts = { 0 };
  g_assert_false (hn_trainer_state_read (&ts, dir, &error));
  hn_trainer_state_clear (&ts);
  expect_deep (error, "trainer_state.json");
  g_clear_error (&error);
  HnHierConfig hc;
  hn_hier_config_init_defaults (&hc, 256, 64);
  g_autofree char *cfg_path = g_build_filename (dir, "config.json", NULL);
  g_assert_false (hn_hier_config_load (&hc, cfg_path, &error));
  hn_hier_config_clear (&hc);
  expect_deep (error, "hierarchos config.json");
  g_clear_error (&error);

  /* tokenizer_config.json next to a good tokenizer.json */
  g_autofree char *tdir = g_build_filename (dir, "tok", NULL);
  g_assert_cmpint (g_mkdir (tdir, 0755), ==, 0);
  g_autofree char *tj = shared_path ("models/stories260K/tokenizer.json");
  copy_file (tj, tdir, "tokenizer.json");
  write_file (tdir, "tokenizer_config.json", deep);
  g_autoptr (HnTokenizer) bad_tok = hn_tokenizer_load (tdir, &error);
  g_assert_null (bad_tok);
  expect_deep (error, "tokenizer_config.json");
  g_clear_error (&error);

  /* a safetensors header */
  {
    g_autofree char *hdr = deep_json ("{\"__metadata__\": {}, \"x\": ", "}", 100000);
    guint64 n = strlen (hdr);
    g_autoptr (GString) f = g_string_new (NULL);
    for (int i = 0; i < 8; i++)
      g_string_append_c (f, (char) ((n >> (8 * i)) & 0xff));
    g_string_append (f, hdr);
    g_autofree char *p = g_build_filename (dir, "deep.safetensors", NULL);
    g_assert_true (g_file_set_contents (p, f->str, (gssize) f->len, NULL));
    g_autoptr (HnSafetensors) st = hn_safetensors_open (p, &error);
    g_assert_null (st);
    expect_deep (error, "safetensors header");
    g_clear_error (&error);
  }

  /* a JSONL row and a .json dataset */
  g_autofree char *sdir = shared_path ("models/stories260K");
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (sdir, &error);
  g_assert_no_error (error);
  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  opts.seq_len = 16;
  g_autofree char *row = deep_json ("{\"text\": ", "}\n", 100000);
  write_file (dir, "deep.jsonl", row);
  write_file (dir, "deep.json", deep_arr);
  g_autofree char *jl = g_build_filename (dir, "deep.jsonl", NULL);
  g_autofree char *ja = g_build_filename (dir, "deep.json", NULL);
  g_autoptr (HnDataset) ds = hn_dataset_load (jl, tok, &opts, &error);
  g_assert_null (ds);
  expect_deep (error, "JSONL row");
  g_clear_error (&error);
  g_autoptr (HnDataset) ds2 = hn_dataset_load (ja, tok, &opts, &error);
  g_assert_null (ds2);
  expect_deep (error, ".json dataset");
  g_clear_error (&error);

  /* nesting within the bound still parses */
  g_autofree char *ok = deep_json ("{\"x\": ", "}", 500);
  g_autoptr (JsonParser) jp = json_parser_new ();
  g_assert_true (hn_json_parser_load (jp, ok, -1, "ok.json", &error));
  g_assert_no_error (error);
  /* brackets inside strings do not count */
  GString *str = g_string_new ("[\"");
  for (int i = 0; i < 2000; i++)
    g_string_append (str, "[{");
  g_string_append (str, "\\\"\"]");
  g_assert_true (hn_json_parser_load (jp, str->str, -1, "str.json", &error));
  g_assert_no_error (error);
  g_string_free (str, TRUE);
}

static void
test_not_regular (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  g_autofree char *fifo = g_build_filename (dir, "config.json", NULL);
  g_assert_cmpint (mkfifo (fifo, 0600), ==, 0);
  g_autoptr (GError) error = NULL;
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (dir, &error);
  g_assert_null (cfg);
  g_assert_nonnull (strstr (error->message, "is not a regular file"));
  g_clear_error (&error);
  g_autoptr (HnModelConfig) cfg2 = hn_model_config_load ("/dev/zero", &error);
  g_assert_null (cfg2);
  g_assert_nonnull (strstr (error->message, "/dev/zero: the model config is not a regular file"));
  g_clear_error (&error);
  char *data = NULL;
  g_assert_false (hn_file_read_bounded ("/dev/zero", HN_MAX_TEXT_BYTES, "prompt file", &data, NULL, &error));
  g_assert_nonnull (strstr (error->message, "not a regular file"));
  g_clear_error (&error);

  /* a sparse file past the cap is refused before it is read */
  g_autofree char *big = g_build_filename (dir, "big.json", NULL);
  FILE *f = fopen (big, "w");
  g_assert_nonnull (f);
  g_assert_cmpint (ftruncate (fileno (f), (off_t) HN_MAX_CONFIG_BYTES + 1), ==, 0);
  fclose (f);
  g_autoptr (HnModelConfig) cfg3 = hn_model_config_load (big, &error);
  g_assert_null (cfg3);
  g_assert_nonnull (strstr (error->message, "over the limit of 67108864 bytes"));
  g_clear_error (&error);
  g_assert_true (hn_file_read_bounded ("/proc/self/stat", 1 << 20, "x", &data, NULL, &error) == FALSE ||
                 (g_free (data), TRUE)); /* /proc files have size 0: whatever it says, no hang */
  g_clear_error (&error);

  /* a dataset that is a FIFO or a device */
  g_autofree char *sdir = shared_path ("models/stories260K");
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (sdir, &error);
  g_assert_no_error (error);
  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  opts.seq_len = 16;
  g_autofree char *dfifo = g_build_filename (dir, "data.jsonl", NULL);
  g_assert_cmpint (mkfifo (dfifo, 0600), ==, 0);
  const char *const paths[] = { dfifo, "/dev/zero" };
  for (guint k = 0; k < G_N_ELEMENTS (paths); k++)
    {
      g_autoptr (HnDataset) ds = hn_dataset_load (paths[k], tok, &opts, &error);
      g_assert_null (ds);
      g_assert_nonnull (strstr (error->message, "is not a regular file"));
      g_clear_error (&error);
    }
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 10 * G_USEC_PER_SEC);
  g_unlink (fifo);
  g_unlink (dfifo);
}

static void
test_config_ranges (void)
{
  static const struct { const char *json; const char *want; } cases[] = {
    { "{\"model_type\": \"llama\", \"vocab_size\": 4294967808, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
      "\"num_attention_heads\": 4}", "\"vocab_size\" is 4294967808, out of range" },
    { "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64, \"num_hidden_layers\": 1e9, "
      "\"num_attention_heads\": 4}", "\"num_hidden_layers\" is 1000000000, out of range (at most 1024)" },
    { "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64, \"num_hidden_layers\": 2.5, "
      "\"num_attention_heads\": 4}", "\"num_hidden_layers\" must be an integer" },
    { "{\"model_type\": \"llama\", \"vocab_size\": 512, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
      "\"num_attention_heads\": 4, \"max_position_embeddings\": 1e15}", "\"max_position_embeddings\" is 1000000000000000" },
  };
  for (guint k = 0; k < G_N_ELEMENTS (cases); k++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (HnModelConfig) cfg = hn_model_config_load_from_data (cases[k].json, -1, "config.json", &error);
      g_assert_null (cfg);
      if (!strstr (error->message, cases[k].want))
        g_error ("%s: got '%s', want '%s'", cases[k].json, error->message, cases[k].want);
    }
}

static void
test_safetensors_duplicate (void)
{
  const char *hdr = "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                    "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}";
  guint64 n = strlen (hdr);
  g_autoptr (GString) f = g_string_new (NULL);
  for (int i = 0; i < 8; i++)
    g_string_append_c (f, (char) ((n >> (8 * i)) & 0xff));
  g_string_append (f, hdr);
  g_string_append_len (f, "\0\0\0\0\0\0\0\0", 8);
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  g_autofree char *p = g_build_filename (dir, "dup.safetensors", NULL);
  g_assert_true (g_file_set_contents (p, f->str, (gssize) f->len, NULL));
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (p, &error);
  g_assert_null (st);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "tensor name 'a' appears more than once"));
  /* the count is of the top level only: nested keys may repeat across entries */
  g_assert_cmpuint (hn_json_count_top_members ("{\"a\": {\"x\": 1, \"x\": 2}, \"b\": [\"a\", {\"a\": 1}]}", 45, NULL),
                    ==, 2);
}

/* The preview cuts a 20 MB row to what seq_len + 1 tokens can use before
 * tokenizing (it took tens of GB for a 300 MB row). */
static void
test_preview_long_row (void)
{
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  g_autofree char *p = g_build_filename (dir, "long.jsonl", NULL);
  GString *row = g_string_new ("{\"text\": \"");
  for (int i = 0; i < 2000000; i++)
    g_string_append (row, "Once upon ");
  g_string_append (row, "\"}\n{\"text\": \"a short one\"}\n");
  g_assert_true (g_file_set_contents (p, row->str, (gssize) row->len, NULL));
  g_string_free (row, TRUE);
  g_autoptr (GError) error = NULL;
  g_autofree char *sdir = shared_path ("models/stories260K");
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (sdir, &error);
  g_assert_no_error (error);
  HnDatasetOptions opts;
  hn_dataset_options_init (&opts);
  opts.seq_len = 32;
  opts.pack = FALSE;
  HnDatasetStats stats;
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (GPtrArray) rows = hn_dataset_preview (p, tok, &opts, 2, &stats, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rows->len, ==, 2);
  HnDatasetPreviewRow *r0 = rows->pdata[0];
  g_assert_true (r0->truncated);
  g_assert_cmpuint (r0->n_tokens, ==, 33);
  g_assert_nonnull (strstr (r0->reason, "the preview tokenized the first 1048576 of the row's 20000000 bytes"));
  HnDatasetPreviewRow *r1 = rows->pdata[1];
  g_assert_false (r1->truncated);
  g_test_message ("preview of a 20 MB row: %.2f s", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 10 * G_USEC_PER_SEC);

  /* a line past the row limit is a bad row, read past without keeping it */
  g_autofree char *p2 = g_build_filename (dir, "huge.jsonl", NULL);
  FILE *f = fopen (p2, "w");
  g_assert_nonnull (f);
  char chunk[4096];
  memset (chunk, 'x', sizeof chunk);
  for (int i = 0; i < (65 << 20) / (int) sizeof chunk; i++)
    g_assert_cmpuint (fwrite (chunk, 1, sizeof chunk, f), ==, sizeof chunk);
  fputs ("\n{\"text\": \"after\"}\n", f);
  fclose (f);
  g_autoptr (GPtrArray) rows2 = hn_dataset_preview (p2, tok, &opts, 2, &stats, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (rows2->len, ==, 2);
  HnDatasetPreviewRow *h0 = rows2->pdata[0];
  g_assert_nonnull (strstr (h0->reason, "the line is longer than 64 MiB"));
  g_assert_cmpuint (((HnDatasetPreviewRow *) rows2->pdata[1])->line, ==, 2);
  HnDatasetOptions strict = opts;
  g_autoptr (HnDataset) ds = hn_dataset_load (p2, tok, &strict, &error);
  g_assert_null (ds);
  g_assert_nonnull (strstr (error->message, "huge.jsonl:1: the line is longer than 64 MiB"));
  g_unlink (p2);
}

/* A weight with a NaN: loading names it, training refuses. */
static void
test_nonfinite_weights (void)
{
  if (!hn_test_have_vulkan ())
    {
      g_test_skip ("no Vulkan device");
      return;
    }
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  g_autofree char *sdir = shared_path ("models/stories260K");
  const char *const files[] = { "config.json", "tokenizer.json", "tokenizer_config.json" };
  for (guint k = 0; k < G_N_ELEMENTS (files); k++)
    {
      g_autofree char *src = g_build_filename (sdir, files[k], NULL);
      copy_file (src, dir, files[k]);
    }
  g_autofree char *st_src = g_build_filename (sdir, "model.safetensors", NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (st_src, &data, &len, NULL));
  /* model.layers.0.input_layernorm.weight: F32 [64] at data offset 131072 */
  guint64 hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | (guchar) data[i];
  const guint32 nan_bits = 0x7fc00000u;
  memcpy (data + 8 + hlen + 131072 + 12, &nan_bits, 4);
  g_autofree char *st_dst = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (g_file_set_contents (st_dst, data, (gssize) len, NULL));

  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  /* (it also says so with g_message, which the structured log cannot expect here) */
  HnTransformer *m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  guint64 n = 0;
  g_assert_cmpstr (hn_transformer_get_nonfinite_weight (m, &n), ==, "model.layers.0.input_layernorm.weight");
  g_assert_cmpuint (n, ==, 1);
  hn_transformer_free (m);
  HnDataParallel *dp = hn_data_parallel_new (&ctx, 1, dir, &error);
  g_assert_null (dp);
  g_assert_error (error, HN_ERROR, HN_ERROR_NUMERIC);
  g_assert_nonnull (strstr (error->message, "weight model.layers.0.input_layernorm.weight holds 1 NaN/Inf values; training"));
  hn_vk_context_unref (ctx);
}

/* A catastrophic regex in a tokenizer (PCRE2 stops it at its match limit):
 * the encode fails naming the pattern, instead of splitting the text wrongly
 * or (the Replace normalizer) using a NULL result. */
static void
test_tokenizer_regex_limit (void)
{
  static const char *const parts[] = {
    "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+$\"}, \"behavior\": \"Isolated\", "
    "\"invert\": false}",
    "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(a+)+$\"}, \"content\": \"x\"}",
  };
  static const char *const want[] = { "pre-tokenizer regex '(a+)+$' failed", "normalizer Replace regex '(a+)+$' failed" };
  for (guint k = 0; k < G_N_ELEMENTS (parts); k++)
    {
      g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
      g_autofree char *json = g_strdup_printf ("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0, \"b\": 1, "
                                               "\"x\": 2, \"[UNK]\": 3}, \"unk_token\": \"[UNK]\"}, %s}", parts[k]);
      write_file (dir, "tokenizer.json", json);
      g_autoptr (GError) error = NULL;
      g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dir, &error);
      g_assert_no_error (error);
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_assert_true (hn_tokenizer_encode (tok, "aab", -1, FALSE, ids, &error)); /* short: fine */
      g_assert_no_error (error);
      GString *text = g_string_new (NULL);
      for (int i = 0; i < 100000; i++)
        g_string_append_c (text, 'a');
      g_string_append_c (text, 'b');
      gint64 t0 = g_get_monotonic_time ();
      g_assert_false (hn_tokenizer_encode (tok, text->str, -1, FALSE, ids, &error));
      g_assert_cmpint (g_get_monotonic_time () - t0, <, 10 * G_USEC_PER_SEC);
      if (!strstr (error->message, want[k]))
        g_error ("got '%s', want '%s'", error->message, want[k]);
      g_string_free (text, TRUE);
    }

  /* the decoder's Replace regex: the decode fails naming the pattern (it used to keep the
   * token unreplaced, without a word) */
  g_autofree char *dir = g_dir_make_tmp ("hn-hostile-XXXXXX", NULL);
  write_file (dir, "tokenizer.json",
              "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0, \"b\": 1, \"[UNK]\": 2}, "
              "\"unk_token\": \"[UNK]\"}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, "
              "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(a+)+$\"}, \"content\": \"x\"}]}}");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  static const int32_t few[] = { 0, 0, 1 };
  g_autofree char *shortd = hn_tokenizer_decode (tok, few, G_N_ELEMENTS (few), FALSE, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (shortd, ==, "aab");
  g_autofree int32_t *ids = g_new0 (int32_t, 100001);
  ids[100000] = 1;
  gint64 t0 = g_get_monotonic_time ();
  g_autofree char *longd = hn_tokenizer_decode (tok, ids, 100001, FALSE, &error);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 10 * G_USEC_PER_SEC);
  g_assert_null (longd);
  g_assert_nonnull (error);
  if (!strstr (error->message, "decoder Replace regex '(a+)+$' failed"))
    g_error ("got '%s'", error->message);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hostile/json-depth", test_json_depth);
  g_test_add_func ("/hostile/not-regular", test_not_regular);
  g_test_add_func ("/hostile/config-ranges", test_config_ranges);
  g_test_add_func ("/hostile/safetensors-duplicate", test_safetensors_duplicate);
  g_test_add_func ("/hostile/preview-long-row", test_preview_long_row);
  g_test_add_func ("/hostile/nonfinite-weights", test_nonfinite_weights);
  g_test_add_func ("/hostile/tokenizer-regex-limit", test_tokenizer_regex_limit);
  return g_test_run ();
}
