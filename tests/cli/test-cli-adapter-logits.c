/* transformer-logits --adapter: peft's QLoRA fixture adapter (tests/fixtures/parity/
 * qlora_llama/adapter_final) merged into the dequantized base gives peft's greedy tokens
 * (teacher-forced: each continuation token is the argmax of the row before it), the base
 * alone other logits, and an adapter on an encoder is refused by name. */
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

/* The logits of ids (through the adapter when one is given), as a JSON array owned by p. */
static JsonArray *
logits (JsonParser *p, const char *model, const char *adapter, const char *ids, const char *out, int *vocab)
{
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = adapter ? cli_run (&status, &err, "transformer-logits", "--model-path", model, "--adapter",
                                          adapter, "--input-ids", ids, "--output", out, NULL)
                               : cli_run (&status, &err, "transformer-logits", "--model-path", model, "--input-ids",
                                          ids, "--output", out, NULL);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("transformer-logits: %s", err);
  JsonObject *got = load (p, out);
  *vocab = (int) json_array_get_int_element (json_object_get_array_member (got, "shape"), 1);
  return json_object_get_array_member (got, "logits");
}

static void
test_peft_greedy (void)
{
  g_autofree char *dir = fixture ("qlora_llama");
  g_autofree char *deq = g_build_filename (dir, "dequantized", NULL), *ad = g_build_filename (dir, "adapter_final", NULL);
  g_autofree char *exp_path = g_build_filename (dir, "expected.json", NULL);
  g_autoptr (JsonParser) ep = json_parser_new ();
  JsonObject *gr = json_object_get_object_member (load (ep, exp_path), "greedy");
  JsonArray *prompt = json_object_get_array_member (gr, "prompt"), *tokens = json_object_get_array_member (gr, "tokens");
  guint np = json_array_get_length (prompt), nt = json_array_get_length (tokens);
  g_autoptr (GString) ids = g_string_new (NULL);
  for (guint i = 0; i < np + nt - 1; i++)
    g_string_append_printf (ids, "%s%" G_GINT64_FORMAT, i ? "," : "",
                            i < np ? json_array_get_int_element (prompt, i) : json_array_get_int_element (tokens, i - np));
  g_autofree char *tmp = g_dir_make_tmp ("hn-cli-adapter-XXXXXX", NULL);
  g_autofree char *out_a = g_build_filename (tmp, "adapter.json", NULL), *out_b = g_build_filename (tmp, "base.json", NULL);
  g_autoptr (JsonParser) pa = json_parser_new ();
  g_autoptr (JsonParser) pb = json_parser_new ();
  int V = 0, Vb = 0;
  JsonArray *la = logits (pa, deq, ad, ids->str, out_a, &V), *lb = logits (pb, deq, NULL, ids->str, out_b, &Vb);
  g_assert_cmpint (V, ==, Vb);
  g_assert_cmpuint (json_array_get_length (la), ==, (guint) V * (np + nt - 1));
  double moved = 0;
  for (guint s = 0; s < nt; s++)
    {
      guint row = np - 1 + s;
      int best = 0;
      for (int v = 0; v < V; v++)
        {
          double x = json_array_get_double_element (la, row * V + v);
          if (x > json_array_get_double_element (la, row * V + best))
            best = v;
          moved = MAX (moved, fabs (x - json_array_get_double_element (lb, row * V + v)));
        }
      g_assert_cmpint (best, ==, json_array_get_int_element (tokens, s));
    }
  g_test_message ("greedy tokens as peft's; the adapter moves logits by up to %.3g", moved);
  g_assert_cmpfloat (moved, >, 1e-2);
  g_unlink (out_a);
  g_unlink (out_b);
  g_rmdir (tmp);
}

static void
test_encoder_refused (void)
{
  g_autofree char *bert = fixture ("bert"), *ad = fixture ("qlora_llama/adapter_final");
  int status;
  g_autofree char *err = NULL;
  g_autofree char *o = cli_run (&status, &err, "transformer-logits", "--model-path", bert, "--adapter", ad,
                                "--input-ids", "1,2", "--output", "/nonexistent/x.json", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  if (!strstr (err, "--adapter is for decoders"))
    g_error ("--adapter on an encoder: %s", err);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/adapter-logits/peft-greedy", test_peft_greedy);
  g_test_add_func ("/cli/adapter-logits/encoder-refused", test_encoder_refused);
  return g_test_run ();
}
