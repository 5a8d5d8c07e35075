/* Token-id data trains without a tokenizer, as transformers' Trainer allows:
 * transformer-train and transformer-finetune on a copy of the demo model
 * (stories260K) without its tokenizer files train on rows of input_ids
 * (labels / attention_mask / loss_weights too) and write no tokenizer files;
 * with the tokenizer files in the model folder they are copied; text rows
 * without a tokenizer are refused with an error that says so. A model whose
 * q/k/v come from one fused tensor (GPT-2's c_attn, weight and bias) saves a
 * checkpoint with its AdamW moments and resumes from it. */
#include "base/hn-error.h"
#include "jobs/job.h"

#include <glib/gstdio.h>
#include <string.h>

static char *tmp_root, *bare_model, *tokens_jsonl, *text_jsonl;

static char *
demo_model (void)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
}

static gboolean
run (const char *kind, const char *model, const char *train, const char *out, GError **error)
{
  const char *argv[] = { kind, "--model-path", model, "--train", train, "--out-dir", out, "--batch-size", "2",
                         "--seq-len", "8", "--max-steps", "2", "--seed", "3", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  return hn_job_run_sync (job, error);
}

static gboolean
run_args (const char *const *extra, GError **error)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  for (gsize i = 0; extra[i]; i++)
    g_ptr_array_add (argv, (gpointer) extra[i]);
  g_ptr_array_add (argv, NULL);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv ((int) argv->len - 1, (const char **) argv->pdata, error);
  if (!spec || !hn_job_spec_validate (spec, error))
    return FALSE;
  g_autoptr (HnJob) job = hn_job_new (spec);
  return hn_job_run_sync (job, error);
}

/* Copies config.json and model.safetensors of the folder src into dst (new). */
static void
copy_model (const char *src, const char *dst)
{
  g_assert_cmpint (g_mkdir (dst, 0755), ==, 0);
  const char *files[] = { "config.json", "model.safetensors" };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *from = g_build_filename (src, files[i], NULL), *to = g_build_filename (dst, files[i], NULL);
      g_autofree char *data = NULL;
      gsize len = 0;
      g_assert_true (g_file_get_contents (from, &data, &len, NULL));
      g_assert_true (g_file_set_contents (to, data, (gssize) len, NULL));
    }
}

static gboolean
has_file (const char *dir, const char *name)
{
  g_autofree char *p = g_build_filename (dir, name, NULL);
  return g_file_test (p, G_FILE_TEST_IS_REGULAR);
}

static void
test_train_without_tokenizer (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "train-out", NULL);
  gboolean ok = run ("transformer-train", bare_model, tokens_jsonl, out, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_true (has_file (out, "model.safetensors"));
  g_assert_true (has_file (out, "config.json"));
  g_assert_false (has_file (out, "tokenizer.json"));
  g_assert_false (has_file (out, "tokenizer_config.json"));
}

static void
test_finetune_without_tokenizer (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "lora-out", NULL);
  gboolean ok = run ("transformer-finetune", bare_model, tokens_jsonl, out, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_true (has_file (out, "adapter_model.safetensors"));
  g_assert_false (has_file (out, "tokenizer.json"));
}

static void
test_tokenizer_files_copied (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *model = demo_model ();
  g_autofree char *out = g_build_filename (tmp_root, "with-tok", NULL);
  gboolean ok = run ("transformer-finetune", model, tokens_jsonl, out, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_true (has_file (out, "tokenizer.json"));
  g_assert_true (has_file (out, "tokenizer_config.json"));
}

static void
test_text_rows_refused (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *out = g_build_filename (tmp_root, "text-out", NULL);
  g_assert_false (run ("transformer-train", bare_model, text_jsonl, out, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "need a tokenizer"));
  g_assert_nonnull (strstr (error->message, "text.jsonl"));
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
}

/* GPT-2's c_attn is split into q, k, v weights and biases at load: each of
 * the six is its own trained parameter, so the optimizer file names each once
 * (the biases once shared their weight's name: "added twice" at the first save). */
static void
test_fused_qkv_checkpoint (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *fixture = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "gpt2", NULL);
  g_autofree char *model = g_build_filename (tmp_root, "gpt2", NULL);
  copy_model (fixture, model);
  /* ids inside its vocabulary of 128 */
  g_autofree char *rows = g_build_filename (tmp_root, "gpt2-tokens.jsonl", NULL);
  g_assert_true (g_file_set_contents (rows,
                                      "{\"input_ids\": [1, 40, 47, 61, 78, 32, 83, 86, 61]}\n"
                                      "{\"input_ids\": [1, 46, 106, 114, 63, 104, 41, 13]}\n",
                                      -1, NULL));
  g_autofree char *out = g_build_filename (tmp_root, "gpt2-out", NULL);
  const char *train[] = { "transformer-train", "--model-path", model, "--train", rows, "--out-dir", out,
                          "--batch-size", "2", "--seq-len", "8", "--max-steps", "2", "--save-steps", "1", "--seed", "3", NULL };
  gboolean ok = run_args (train, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_autofree char *ckpt = g_build_filename (out, "checkpoint-step-1", NULL);
  g_assert_true (has_file (ckpt, "optimizer.safetensors"));
  g_autofree char *out2 = g_build_filename (tmp_root, "gpt2-resumed", NULL);
  const char *resume[] = { "transformer-train", "--model-path", model, "--train", rows, "--out-dir", out2,
                           "--batch-size", "2", "--seq-len", "8", "--max-steps", "2", "--seed", "3",
                           "--resume-from-checkpoint", ckpt, NULL };
  ok = run_args (resume, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_true (has_file (out2, "model.safetensors"));
}

static void
remove_tree (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *name;
      while (d && (name = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, name, NULL);
          remove_tree (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  tmp_root = g_dir_make_tmp ("hn-train-tokens-XXXXXX", NULL);
  g_assert_nonnull (tmp_root);
  /* the demo model without its tokenizer files */
  bare_model = g_build_filename (tmp_root, "model", NULL);
  g_autofree char *demo = demo_model ();
  copy_model (demo, bare_model);
  tokens_jsonl = g_build_filename (tmp_root, "tokens.jsonl", NULL);
  g_assert_true (g_file_set_contents (tokens_jsonl,
                                      "{\"input_ids\": [1, 403, 407, 261, 378, 432, 383, 286, 261]}\n"
                                      "{\"input_ids\": [1, 346, 306, 414, 263, 304, 341, 13], \"labels\": [-100, -100, -100, -100, 263, 304, 341, 13]}\n"
                                      "{\"input_ids\": [1, 278, 271, 411, 0, 0], \"attention_mask\": [1, 1, 1, 1, 0, 0]}\n"
                                      "{\"input_ids\": [1, 262, 423, 290, 411], \"loss_weights\": [0, 1, 0.5, 2, 1]}\n",
                                      -1, NULL));
  text_jsonl = g_build_filename (tmp_root, "text.jsonl", NULL);
  g_assert_true (g_file_set_contents (text_jsonl, "{\"text\": \"Once upon a time\"}\n", -1, NULL));
  g_test_add_func ("/train-tokens/train-without-tokenizer", test_train_without_tokenizer);
  g_test_add_func ("/train-tokens/finetune-without-tokenizer", test_finetune_without_tokenizer);
  g_test_add_func ("/train-tokens/tokenizer-files-copied", test_tokenizer_files_copied);
  g_test_add_func ("/train-tokens/text-rows-refused", test_text_rows_refused);
  g_test_add_func ("/train-tokens/fused-qkv-checkpoint", test_fused_qkv_checkpoint);
  int rc = g_test_run ();
  remove_tree (tmp_root);
  g_free (tmp_root);
  g_free (bare_model);
  g_free (tokens_jsonl);
  g_free (text_jsonl);
  return rc;
}
