#include "parity-util.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

char *
parity_fixture_dir (const char *rel)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", rel, NULL);
}

JsonObject *
parity_load_json (JsonParser *p, const char *path)
{
  GError *error = NULL;
  g_assert_true (json_parser_load_from_file (p, path, &error));
  g_assert_no_error (error);
  return json_node_get_object (json_parser_get_root (p));
}

JsonObject *
parity_load_expected (JsonParser *p, const char *fixture)
{
  g_autofree char *dir = parity_fixture_dir (fixture);
  g_autofree char *path = g_build_filename (dir, "expected.json", NULL);
  return parity_load_json (p, path);
}

GArray *
parity_int_array (JsonObject *o, const char *member)
{
  JsonArray *a = json_object_get_array_member (o, member);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      int32_t v = (int32_t) json_array_get_int_element (a, i);
      g_array_append_val (out, v);
    }
  return out;
}

void
parity_compare_logits (const char *name, const float *got, JsonArray *want, gsize n)
{
  g_assert_cmpuint (json_array_get_length (want), ==, n);
  gsize bad = 0, first = 0;
  double worst = 0;
  for (gsize i = 0; i < n; i++)
    {
      double e = json_array_get_double_element (want, (guint) i);
      double d = fabs (got[i] - e);
      if (!(d <= 1e-4 + 1e-4 * fabs (e)))
        {
          if (!bad)
            first = i;
          bad++;
        }
      worst = MAX (worst, d);
    }
  if (bad)
    g_test_message ("%s: %zu of %zu logits differ (first at %zu: %g vs %g), max |diff| %g", name, bad, n, first,
                    got[first], json_array_get_double_element (want, (guint) first), worst);
  g_assert_cmpuint (bad, ==, 0);
}

void
parity_assert_ids (const char *what, GArray *got, GArray *want)
{
  gboolean same = got->len == want->len && memcmp (got->data, want->data, sizeof (int32_t) * want->len) == 0;
  if (!same)
    {
      g_autoptr (GString) s = g_string_new (NULL);
      for (guint i = 0; i < got->len; i++)
        g_string_append_printf (s, "%d ", g_array_index (got, int32_t, i));
      g_test_message ("%s: got %s", what, s->str);
    }
  g_assert_true (same);
}

void
parity_beam_options (JsonObject *b, HnGenerateOptions *o)
{
  hn_generate_options_init (o);
  o->num_beams = (int) json_object_get_int_member (b, "num_beams");
  o->num_return_sequences = (int) json_object_get_int_member (b, "num_return_sequences");
  o->max_new_tokens = (int) json_object_get_int_member (b, "max_new_tokens");
  o->min_new_tokens = (int) json_object_get_int_member (b, "min_new_tokens");
  o->length_penalty = json_object_get_double_member (b, "length_penalty");
  o->early_stopping = json_object_get_boolean_member (b, "early_stopping") ? HN_EARLY_STOP_TRUE : HN_EARLY_STOP_FALSE;
}

char *
parity_trained_dir (const char *dir)
{
  GError *error = NULL;
  char *tmp = g_dir_make_tmp ("hn-parity-XXXXXX", &error);
  g_assert_no_error (error);
  const char *files[][2] = { { "config.json", "config.json" }, { "trained.safetensors", "model.safetensors" } };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *src = g_build_filename (dir, files[i][0], NULL);
      g_autofree char *dst = g_build_filename (tmp, files[i][1], NULL);
      g_assert_cmpint (symlink (src, dst), ==, 0);
    }
  return tmp;
}

void
parity_trained_dir_remove (const char *tmp)
{
  const char *names[] = { "config.json", "model.safetensors" };
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autofree char *p = g_build_filename (tmp, names[i], NULL);
      g_unlink (p);
    }
  g_rmdir (tmp);
}

/* dst/NAME <- src/NAME, with `from` replaced by `to` in the text when given */
void
parity_copy_file (const char *src, const char *dst, const char *name, const char *from, const char *to)
{
  g_autofree char *sp = g_build_filename (src, name, NULL), *dp = g_build_filename (dst, name, NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (sp, &text, &len, NULL));
  if (from)
    {
      g_assert_nonnull (strstr (text, from));
      g_auto (GStrv) parts = g_strsplit (text, from, -1);
      g_free (text);
      text = g_strjoinv (to, parts);
      len = strlen (text);
    }
  g_assert_true (g_file_set_contents (dp, text, (gssize) len, NULL));
}
