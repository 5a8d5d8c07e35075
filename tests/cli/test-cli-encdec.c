/* transformer-logits and transformer-generate on encoder and encoder-decoder fixtures, run as a
 * user would: the logits JSON matches transformers' (1e-4), generate writes the greedy ids, and
 * options that do not fit the model's kind fail with a message naming them. */
#include "cli-util.h"
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static char *
fixture (const char *name)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", name, NULL);
}

static JsonObject *
load (JsonParser *p, const char *path)
{
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (p, path, &error));
  return json_node_get_object (json_parser_get_root (p));
}

/* "1,2,3" of an int array member */
static char *
ids_arg (JsonObject *o, const char *member)
{
  JsonArray *a = json_object_get_array_member (o, member);
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < json_array_get_length (a); i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "", json_array_get_int_element (a, i));
  return g_string_free (s, FALSE);
}

static void
check_logits (const char *name, const char *extra_flag, const char *extra_member)
{
  g_autofree char *dir = fixture (name);
  g_autofree char *exp_path = g_build_filename (dir, "expected.json", NULL);
  g_autoptr (JsonParser) ep = json_parser_new ();
  JsonObject *exp = load (ep, exp_path);
  g_autofree char *ids = ids_arg (exp, "input_ids"), *extra = ids_arg (exp, extra_member);
  g_autofree char *tmp = g_dir_make_tmp ("hn-cli-encdec-XXXXXX", NULL);
  g_autofree char *out = g_build_filename (tmp, "logits.json", NULL);
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = cli_run (&status, &err, "transformer-logits", "--model-path", dir, "--input-ids", ids,
                                extra_flag, extra, "--output", out, NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("%s: %s", name, err);
  g_autoptr (JsonParser) gp = json_parser_new ();
  JsonObject *got = load (gp, out);
  JsonArray *gl = json_object_get_array_member (got, "logits"), *wl = json_object_get_array_member (exp, "logits");
  JsonArray *shape = json_object_get_array_member (got, "shape");
  JsonArray *wshape = json_object_get_array_member (exp, "logits_shape");
  g_assert_cmpint (json_array_get_int_element (shape, 0), ==, json_array_get_int_element (wshape, 0));
  g_assert_cmpuint (json_array_get_length (gl), ==, json_array_get_length (wl));
  for (guint i = 0; i < json_array_get_length (wl); i++)
    {
      double e = json_array_get_double_element (wl, i), g = json_array_get_double_element (gl, i);
      if (!(fabs (g - e) <= 1e-4 + 1e-4 * fabs (e)))
        g_error ("%s: logit %u is %g, transformers %g", name, i, g, e);
    }
  g_unlink (out);
  g_rmdir (tmp);
}

static void
test_logits (void)
{
  check_logits ("bert", "--token-type-ids", "token_type_ids");
  check_logits ("t5", "--decoder-input-ids", "decoder_input_ids");
}

static void
test_generate (void)
{
  g_autofree char *dir = fixture ("pegasus");
  g_autofree char *exp_path = g_build_filename (dir, "expected.json", NULL);
  g_autoptr (JsonParser) ep = json_parser_new ();
  JsonObject *gr = json_object_get_object_member (load (ep, exp_path), "greedy");
  g_autofree char *prompt = ids_arg (gr, "prompt_ids"), *want = ids_arg (gr, "new_ids");
  g_autofree char *tmp = g_dir_make_tmp ("hn-cli-encdec-XXXXXX", NULL);
  g_autofree char *out = g_build_filename (tmp, "gen.json", NULL);
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = cli_run (&status, &err, "transformer-generate", "--model-path", dir, "--input-ids", prompt,
                                "--max-new-tokens", "12", "--min-new-tokens", "12", "--output-json", out, NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("pegasus: %s", err);
  g_autoptr (JsonParser) gp = json_parser_new ();
  JsonArray *seqs = json_object_get_array_member (load (gp, out), "sequences");
  JsonArray *s0 = json_array_get_array_element (seqs, 0);
  GString *got = g_string_new (NULL);
  for (guint i = 0; i < json_array_get_length (s0); i++)
    g_string_append_printf (got, "%s%" G_GINT64_FORMAT, i ? "," : "", json_array_get_int_element (s0, i));
  g_assert_cmpstr (got->str, ==, want);
  g_string_free (got, TRUE);
  g_unlink (out);
  g_rmdir (tmp);
}

static void
test_refusals (void)
{
  g_autofree char *bert = fixture ("bert"), *t5 = fixture ("t5");
  struct {
    const char *cmd, *model, *flag, *value, *says;
  } cases[] = {
    { "transformer-logits", bert, "--decoder-input-ids", "0", "not an encoder-decoder" },
    { "transformer-logits", t5, "--token-type-ids", "0,0", "not an encoder" },
    { "transformer-generate", bert, "--max-new-tokens", "2", "does not generate text" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      int status;
      g_autofree char *err = NULL;
      gboolean logits = strcmp (cases[i].cmd, "transformer-logits") == 0;
      g_autofree char *o = cli_run (&status, &err, cases[i].cmd, "--model-path", cases[i].model, "--input-ids", "5,6",
                                    cases[i].flag, cases[i].value, logits ? "--output" : NULL,
                                    "/nonexistent/never-written.json", NULL);
      g_assert_false (g_spawn_check_wait_status (status, NULL));
      if (!strstr (err, cases[i].says))
        g_error ("%s %s: %s", cases[i].cmd, cases[i].flag, err);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/encdec/logits", test_logits);
  g_test_add_func ("/cli/encdec/generate", test_generate);
  g_test_add_func ("/cli/encdec/refusals", test_refusals);
  return g_test_run ();
}
