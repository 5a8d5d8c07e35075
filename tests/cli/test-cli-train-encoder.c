/* transformer-train on an encoder, run as a user would: masked-LM training of
 * the tiny bert fixture on text rows (tests/fixtures/mlm) whose loss falls,
 * with the metrics file, checkpoints and an output folder that
 * transformer-logits loads back with logits other than the untrained ones;
 * and the kinds it does not train fail with a message naming the reason. */
#include "cli-util.h"
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static char *
src_path (const char *a, const char *b)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", a, b, NULL);
}

/* The logits transformer-logits writes for a short sequence. */
static JsonArray *
logits_of (JsonParser *p, const char *model, const char *tmp)
{
  g_autofree char *out = g_build_filename (tmp, "logits.json", NULL);
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = cli_run (&status, &err, "transformer-logits", "--model-path", model, "--input-ids",
                                "2,10,7,8,3", "--output", out, NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("transformer-logits %s: %s", model, err);
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (p, out, &error));
  g_unlink (out);
  return json_object_get_array_member (json_node_get_object (json_parser_get_root (p)), "logits");
}

static void
test_train (void)
{
  g_autofree char *bert = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "bert", NULL);
  g_autofree char *tokdir = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "mlm", NULL);
  g_autofree char *data = src_path ("mlm", "train.jsonl");
  g_autofree char *tmp = g_dir_make_tmp ("hn-cli-mlm-XXXXXX", NULL);
  g_autofree char *out = g_build_filename (tmp, "out", NULL), *metrics = g_build_filename (tmp, "m.jsonl", NULL);
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = cli_run (&status, &err, "transformer-train", "--model-path", bert, "--tokenizer-path", tokdir,
                                "--train", data, "--out-dir", out, "--batch-size", "2", "--seq-len", "16",
                                "--max-steps", "24", "--lr", "1e-2", "--lr-scheduler", "constant", "--seed", "3",
                                "--save-steps", "12", "--metrics-file", metrics, NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("transformer-train: %s", err);
  g_assert_nonnull (strstr (err, "masking 0.15"));
  /* 24 metrics lines; the mean loss of the last 6 steps is well below the first 6 */
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (metrics, &text, NULL, NULL));
  g_auto (GStrv) lines = g_strsplit (g_strstrip (text), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 24);
  double first = 0, last = 0;
  for (int i = 0; i < 24; i++)
    {
      g_autoptr (JsonParser) p = json_parser_new ();
      g_assert_true (json_parser_load_from_data (p, lines[i], -1, NULL));
      JsonObject *m = json_node_get_object (json_parser_get_root (p));
      g_assert_cmpint (json_object_get_int_member (m, "step"), ==, i + 1);
      g_assert_true (json_object_get_double_member (m, "grad_norm") > 0);
      double loss = json_object_get_double_member (m, "loss");
      if (i < 6)
        first += loss / 6;
      if (i >= 18)
        last += loss / 6;
    }
  g_test_message ("mean loss of steps 1-6 %.4f, of steps 19-24 %.4f", first, last);
  g_assert_cmpfloat (last, <, first - 0.5);
  /* the output folder and the checkpoints are model folders */
  const char *dirs[] = { out, "checkpoint-step-12", "checkpoint-step-24" };
  for (gsize i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      g_autofree char *d = i ? g_build_filename (out, dirs[i], NULL) : g_strdup (out);
      const char *files[] = { "model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json" };
      for (gsize k = 0; k < G_N_ELEMENTS (files); k++)
        {
          g_autofree char *f = g_build_filename (d, files[k], NULL);
          g_assert_true (g_file_test (f, G_FILE_TEST_IS_REGULAR));
        }
    }
  /* the final model is the trained one: same as the last checkpoint, unlike the fixture */
  g_autofree char *ck = g_build_filename (out, "checkpoint-step-24", NULL);
  g_autoptr (JsonParser) p0 = json_parser_new ();
  g_autoptr (JsonParser) p1 = json_parser_new ();
  g_autoptr (JsonParser) p2 = json_parser_new ();
  JsonArray *base = logits_of (p0, bert, tmp), *trained = logits_of (p1, out, tmp), *ckl = logits_of (p2, ck, tmp);
  g_assert_cmpuint (json_array_get_length (trained), ==, json_array_get_length (base));
  double moved = 0;
  for (guint i = 0; i < json_array_get_length (base); i++)
    {
      double t = json_array_get_double_element (trained, i);
      moved = MAX (moved, fabs (t - json_array_get_double_element (base, i)));
      g_assert_cmpfloat (fabs (t - json_array_get_double_element (ckl, i)), <=, 1e-6);
    }
  g_assert_cmpfloat (moved, >, 0.1);
  g_autofree char *rm = g_strdup_printf ("rm -rf '%s'", tmp);
  g_assert_cmpint (system (rm), ==, 0);
}

static void
test_refusals (void)
{
  g_autofree char *bert = src_path ("parity", "bert"), *t5 = src_path ("parity", "t5");
  g_autofree char *tokdir = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "mlm", NULL);
  g_autofree char *data = src_path ("mlm", "train.jsonl");
  struct {
    const char *cmd, *model, *flag, *value, *says;
  } cases[] = {
    { "transformer-finetune", bert, "--lora-r", "4", "LoRA (transformer-finetune) is not implemented" },
    { "transformer-train", bert, "--resume-from-checkpoint", bert, "--resume-from-checkpoint is not implemented" },
    { "transformer-train", bert, "--grad-accum", "2", "--grad-accum above 1" },
    { "transformer-train", bert, "--eval-split", "0.2", "evaluation" },
    { "transformer-train", bert, "--seq-len", "4096", "do not fill one block" },
    { "transformer-train", t5, "--seed", "1", "encoder-decoders (t5, mt5) through transformer-train is not implemented" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      int status;
      g_autofree char *err = NULL;
      g_autofree char *o = cli_run (&status, &err, cases[i].cmd, "--model-path", cases[i].model, "--tokenizer-path",
                                    tokdir, "--train", data, "--out-dir", "/nonexistent/never-written", "--max-steps",
                                    "1", cases[i].flag, cases[i].value, NULL);
      g_assert_false (g_spawn_check_wait_status (status, NULL));
      if (!strstr (err, cases[i].says))
        g_error ("%s %s: %s", cases[i].cmd, cases[i].flag, err);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/train-encoder/mlm", test_train);
  g_test_add_func ("/cli/train-encoder/refusals", test_refusals);
  return g_test_run ();
}
