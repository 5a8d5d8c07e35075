/* Runs `hierarchos-native-cli dataset-preview` as a user would and checks what it prints. */
#include "cli-util.h"
#include <glib.h>
#include <json-glib/json-glib.h>
#include <string.h>

static char *
fixture (const char *name)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "data", name, NULL);
}

static char *
tokenizer_dir (void)
{
  return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
}

static void
test_json (void)
{
  g_autofree char *tok = tokenizer_dir ();
  g_autofree char *file = fixture ("malformed.jsonl");
  int status;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "dataset-preview", "--train", file, "--tokenizer", tok,
                                  "--rows", "3", "--seq-len", "64", "--json", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_data (p, out, -1, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  g_assert_cmpstr (json_object_get_string_member (o, "shape"), ==, "prompt-completion");
  g_assert_true (json_object_get_boolean_member (o, "shape_detected"));
  g_assert_cmpint (json_object_get_int_member (o, "seq_len"), ==, 64);
  JsonObject *whole = json_object_get_object_member (o, "whole_file");
  g_assert_cmpint (json_object_get_int_member (whole, "rows_read"), ==, 6);
  g_assert_cmpint (json_object_get_int_member (whole, "rows_malformed"), ==, 4);
  g_assert_cmpint (json_object_get_int_member (whole, "examples"), ==, 2);
  g_assert_nonnull (strstr (json_object_get_string_member (whole, "first_malformed"), "malformed.jsonl:2:"));
  JsonArray *rows = json_object_get_array_member (o, "rows");
  g_assert_cmpuint (json_array_get_length (rows), ==, 3);
  JsonObject *r0 = json_array_get_object_element (rows, 0);
  g_assert_false (json_object_get_boolean_member (r0, "malformed"));
  JsonArray *segs = json_object_get_array_member (r0, "segments");
  g_assert_cmpuint (json_array_get_length (segs), ==, 4);
  JsonObject *s2 = json_array_get_object_element (segs, 2);
  g_assert_cmpstr (json_object_get_string_member (s2, "text"), ==, " tree.");
  g_assert_true (json_object_get_boolean_member (s2, "trained"));
  JsonObject *r1 = json_array_get_object_element (rows, 1);
  g_assert_true (json_object_get_boolean_member (r1, "malformed"));
  g_assert_nonnull (strstr (json_object_get_string_member (r1, "reason"), "invalid JSON"));
}

static void
test_text (void)
{
  g_autofree char *tok = tokenizer_dir ();
  g_autofree char *file = fixture ("alpaca.jsonl");
  int status;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "dataset-preview", "--train", file, "--tokenizer", tok,
                                  "--seq-len", "20", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (out, "Shape:    instruction (detected)"));
  g_assert_nonnull (strstr (out, "no usable examples (2 rows read, 0 skipped, 2 dropped; first dropped: alpaca.jsonl:1:"));
  g_assert_nonnull (strstr (out, "DROPPED: no trained tokens left after truncation to 21 tokens"));
  g_assert_nonnull (strstr (out, "  [prompt] Below is an instruction that describes a task."));
  g_assert_nonnull (strstr (out, "\\n\\n### Response:\\n"));
  g_assert_nonnull (strstr (out, "  [train ] The sky is blue."));

  /* a forced shape that does not fit is a malformed row, not a crash */
  g_autofree char *err2 = NULL;
  g_autofree char *out2 = cli_run (&status, &err2, "dataset-preview", "--train", file, "--tokenizer", tok,
                                   "--shape", "qa", "--rows", "1", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (out2, "MALFORMED: missing \"question\""));
}

static void
test_errors (void)
{
  g_autofree char *tok = tokenizer_dir ();
  int status;
  g_autofree char *err = NULL, *err2 = NULL;
  g_autofree char *out = cli_run (&status, &err, "dataset-preview", "--train", "/nonexistent.jsonl", "--tokenizer", tok, NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "error: dataset file /nonexistent.jsonl does not exist"));
  g_autofree char *out2 = cli_run (&status, &err2, "dataset-preview", "--train", "x.jsonl", "--tokenizer", tok,
                                   "--shape", "sql", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err2, "unknown dataset shape 'sql'"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/dataset-preview/json", test_json);
  g_test_add_func ("/cli/dataset-preview/text", test_text);
  g_test_add_func ("/cli/dataset-preview/errors", test_errors);
  return g_test_run ();
}
