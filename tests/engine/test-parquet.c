/* Parquet reader against files from two independent writers
 * (tests/fixtures/io/make_parquet.mjs: hyparquet-writer with data pages v2,
 * dictionaries, snappy/gzip/zstd/none, lists and list<struct>; parquetjs
 * with data pages v1, PLAIN, legacy repeated fields), compared with the
 * rows the writers were given (expected.json), plus malformed files. */
#include "formats/parquet.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

static char *
fixture (const char *name)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  return g_build_filename (src ? src : ".", "tests", "fixtures", "io", "parquet", name, NULL);
}

static JsonParser *expected_parser;
static JsonArray *expected_rows;

static JsonObject *
row (guint i)
{
  return json_array_get_object_element (expected_rows, i);
}

static gboolean
is_null (JsonObject *r, const char *key)
{
  JsonNode *n = json_object_get_member (r, key);
  return !n || JSON_NODE_HOLDS_NULL (n);
}

static HnParquetColumn *
read_col (HnParquetFile *f, const char *name)
{
  int i = hn_parquet_find_column (f, name);
  if (i < 0)
    g_error ("no column %s", name);
  g_autoptr (GError) error = NULL;
  HnParquetColumn *c = hn_parquet_read_column (f, (guint) i, -1, &error);
  g_assert_no_error (error);
  g_assert_nonnull (c);
  return c;
}

static void
check_scalars (HnParquetFile *f, guint n)
{
  g_autoptr (HnParquetColumn) text = read_col (f, "text");
  g_autoptr (HnParquetColumn) ni = read_col (f, "n");
  g_autoptr (HnParquetColumn) big = read_col (f, "big");
  g_autoptr (HnParquetColumn) fl = read_col (f, "f");
  g_autoptr (HnParquetColumn) flag = read_col (f, "flag");
  g_assert_cmpint (text->type, ==, HN_PARQUET_BYTE_ARRAY);
  g_assert_cmpint (ni->type, ==, HN_PARQUET_INT32);
  g_assert_cmpint (big->type, ==, HN_PARQUET_INT64);
  g_assert_cmpint (fl->type, ==, HN_PARQUET_DOUBLE);
  g_assert_cmpint (flag->type, ==, HN_PARQUET_BOOLEAN);
  g_assert_false (text->is_list);
  for (guint i = 0; i < n; i++)
    {
      JsonObject *r = row (i);
      g_assert_cmpint (text->n_rows, ==, n);
      if (is_null (r, "text"))
        g_assert_false (text->row_valid[i]);
      else
        {
          const char *want = json_object_get_string_member (r, "text");
          g_assert_true (text->row_valid[i]);
          g_assert_cmpstr (text->strings[i], ==, want);
          g_assert_cmpuint (text->lens[i], ==, strlen (want));
        }
      g_assert_true (ni->row_valid[i]);
      g_assert_cmpint (ni->ints[i], ==, json_object_get_int_member (r, "n"));
      g_assert_cmpint (big->ints[i], ==, g_ascii_strtoll (json_object_get_string_member (r, "big"), NULL, 10));
      g_assert_cmpfloat (fl->doubles[i], ==, json_object_get_double_member (r, "f"));
      if (is_null (r, "flag"))
        g_assert_false (flag->row_valid[i]);
      else
        {
          g_assert_true (flag->row_valid[i]);
          g_assert_cmpint (flag->ints[i], ==, json_object_get_boolean_member (r, "flag"));
        }
    }
}

static void
check_lists (HnParquetFile *f, guint n)
{
  g_autoptr (HnParquetColumn) ids = read_col (f, "input_ids");
  g_assert_true (ids->is_list);
  g_assert_cmpint (ids->n_rows, ==, n);
  g_assert_cmpstr (hn_parquet_get_column_path (f, (guint) hn_parquet_find_column (f, "input_ids")), ==,
                   "input_ids.list.element");
  g_autoptr (HnParquetColumn) role = read_col (f, "messages.list.element.role");
  g_autoptr (HnParquetColumn) content = read_col (f, "messages.list.element.content");
  g_assert_cmpint (hn_parquet_find_column (f, "messages"), ==, -1); /* two leaves: ambiguous */
  for (guint i = 0; i < n; i++)
    {
      JsonObject *r = row (i);
      if (is_null (r, "input_ids"))
        {
          g_assert_false (ids->row_valid[i]);
          g_assert_cmpint (ids->offsets[i + 1] - ids->offsets[i], ==, 0);
        }
      else
        {
          JsonArray *a = json_object_get_array_member (r, "input_ids");
          g_assert_true (ids->row_valid[i]);
          g_assert_cmpint (ids->offsets[i + 1] - ids->offsets[i], ==, json_array_get_length (a));
          for (guint k = 0; k < json_array_get_length (a); k++)
            g_assert_cmpint (ids->ints[ids->offsets[i] + k], ==, json_array_get_int_element (a, k));
        }
      if (is_null (r, "messages"))
        {
          g_assert_false (role->row_valid[i]);
          g_assert_false (content->row_valid[i]);
          continue;
        }
      JsonArray *m = json_object_get_array_member (r, "messages");
      g_assert_true (role->row_valid[i]);
      g_assert_cmpint (role->offsets[i + 1] - role->offsets[i], ==, json_array_get_length (m));
      g_assert_cmpint (content->offsets[i + 1] - content->offsets[i], ==, json_array_get_length (m));
      for (guint k = 0; k < json_array_get_length (m); k++)
        {
          JsonObject *msg = json_array_get_object_element (m, k);
          gint64 at = role->offsets[i] + k;
          g_assert_cmpstr (role->strings[at], ==, json_object_get_string_member (msg, "role"));
          if (is_null (msg, "content"))
            {
              g_assert_false (content->value_valid[at]);
              g_assert_null (content->strings[at]);
            }
          else
            {
              g_assert_true (content->value_valid[at]);
              g_assert_cmpstr (content->strings[at], ==, json_object_get_string_member (msg, "content"));
            }
        }
    }
}

/* Legacy parquetjs `repeated int32 ids`: the leaf itself repeats, no nulls. */
static void
check_repeated (HnParquetFile *f, guint n)
{
  g_autoptr (HnParquetColumn) ids = read_col (f, "ids");
  g_assert_true (ids->is_list);
  for (guint i = 0; i < n; i++)
    {
      JsonObject *r = row (i);
      g_assert_true (ids->row_valid[i]);
      guint want = is_null (r, "input_ids") ? 0 : json_array_get_length (json_object_get_array_member (r, "input_ids"));
      g_assert_cmpint (ids->offsets[i + 1] - ids->offsets[i], ==, want);
      for (guint k = 0; k < want; k++)
        g_assert_cmpint (ids->ints[ids->offsets[i] + k], ==,
                         json_array_get_int_element (json_object_get_array_member (r, "input_ids"), k));
    }
}

static char *
to_text (JsonNode *n)
{
  return n ? json_to_string (n, FALSE) : g_strdup ("(absent)");
}

/* Rows as JSON objects, the way the dataset loader takes them. */
static void
check_json_rows (HnParquetFile *f, guint n)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (JsonArray) rows = hn_parquet_read_json_rows (f, -1, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (json_array_get_length (rows), ==, n);
  const char *keys[] = { "text", "n", "flag", "input_ids", "messages" };
  for (guint i = 0; i < n; i++)
    {
      JsonObject *got = json_array_get_object_element (rows, i), *want = row (i);
      for (guint k = 0; k < G_N_ELEMENTS (keys); k++)
        {
          g_autofree char *a = to_text (json_object_get_member (got, keys[k]));
          g_autofree char *b = to_text (json_object_get_member (want, keys[k]));
          if (strcmp (a, b) != 0)
            g_error ("row %u %s: read %s, expected %s", i, keys[k], a, b);
        }
      g_assert_cmpfloat (json_object_get_double_member (got, "f"), ==, json_object_get_double_member (want, "f"));
      g_assert_cmpint (json_object_get_int_member (got, "big"), ==,
                       g_ascii_strtoll (json_object_get_string_member (want, "big"), NULL, 10));
    }
  /* one row group */
  if (hn_parquet_get_n_row_groups (f) > 1)
    {
      g_autoptr (JsonArray) part = hn_parquet_read_json_rows (f, 1, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (json_array_get_length (part), ==, hn_parquet_get_row_group_rows (f, 1));
    }
}

static void
test_file (gconstpointer data)
{
  const char *name = data;
  g_autofree char *path = fixture (name);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnParquetFile) f = hn_parquet_open (path, &error);
  g_assert_no_error (error);
  guint n = json_array_get_length (expected_rows);
  g_assert_cmpint (hn_parquet_get_n_rows (f), ==, n);
  check_scalars (f, n);
  if (g_str_has_prefix (name, "hy-"))
    {
      check_lists (f, n);
      check_json_rows (f, n);
      g_assert_cmpuint (hn_parquet_get_n_columns (f), ==, 8);
      const char *const *fields = hn_parquet_get_field_names (f);
      g_assert_cmpstr (fields[5], ==, "input_ids");
      g_assert_cmpstr (fields[6], ==, "messages");
      g_assert_null (fields[7]);
    }
  else
    check_repeated (f, n);
  if (strstr (name, "rowgroups") || g_str_has_prefix (name, "pj-"))
    {
      g_assert_cmpuint (hn_parquet_get_n_row_groups (f), ==, 3);
      /* one row group alone */
      int c = hn_parquet_find_column (f, "n");
      g_autoptr (HnParquetColumn) part = hn_parquet_read_column (f, (guint) c, 1, &error);
      g_assert_no_error (error);
      gint64 first = hn_parquet_get_row_group_rows (f, 0);
      g_assert_cmpint (part->n_rows, ==, hn_parquet_get_row_group_rows (f, 1));
      g_assert_cmpint (part->ints[0], ==, json_object_get_int_member (row ((guint) first), "n"));
    }
}

/* DELTA_BINARY_PACKED (INT32, INT64), DELTA_LENGTH_BYTE_ARRAY,
 * DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT (DOUBLE). */
static void
test_delta (void)
{
  g_autofree char *path = fixture ("hy-delta-bss.parquet");
  g_autoptr (GError) error = NULL;
  g_autoptr (HnParquetFile) f = hn_parquet_open (path, &error);
  g_assert_no_error (error);
  guint n = json_array_get_length (expected_rows);
  g_autoptr (HnParquetColumn) text = read_col (f, "text");
  g_autoptr (HnParquetColumn) text2 = read_col (f, "text2");
  g_autoptr (HnParquetColumn) ni = read_col (f, "n");
  g_autoptr (HnParquetColumn) big = read_col (f, "big");
  g_autoptr (HnParquetColumn) fl = read_col (f, "f");
  for (guint i = 0; i < n; i++)
    {
      JsonObject *r = row (i);
      HnParquetColumn *ts[] = { text, text2 };
      for (int k = 0; k < 2; k++)
        {
          if (is_null (r, "text"))
            g_assert_false (ts[k]->row_valid[i]);
          else
            g_assert_cmpstr (ts[k]->strings[i], ==, json_object_get_string_member (r, "text"));
        }
      g_assert_cmpint (ni->ints[i], ==, json_object_get_int_member (r, "n"));
      g_assert_cmpint (big->ints[i], ==, g_ascii_strtoll (json_object_get_string_member (r, "big"), NULL, 10));
      g_assert_cmpfloat (fl->doubles[i], ==, json_object_get_double_member (r, "f"));
    }
}

static void
expect_error (const char *path, int code, const char *want)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnParquetFile) f = hn_parquet_open (path, &error);
  if (f)
    {
      /* metadata fine: the failure must come when reading */
      for (guint i = 0; i < hn_parquet_get_n_columns (f) && !error; i++)
        {
          HnParquetColumn *c = hn_parquet_read_column (f, i, -1, &error);
          hn_parquet_column_free (c);
        }
    }
  g_assert_error (error, HN_ERROR, code);
  if (g_test_verbose ())
    g_printerr ("  %s\n", error->message);
  g_assert_nonnull (strstr (error->message, want));
}

static void
test_malformed (void)
{
  g_autofree char *good = fixture ("hy-snappy-dict.parquet");
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (good, &data, &len, NULL));
  g_autofree char *dir = g_dir_make_tmp ("hn-pq-XXXXXX", NULL);
  g_autofree char *p = g_build_filename (dir, "bad.parquet", NULL);

  g_assert_true (g_file_set_contents (p, "PAR1", 4, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "not a Parquet file");
  g_assert_true (g_file_set_contents (p, "{\"text\": \"a jsonl line\"}\n", -1, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "not a Parquet file");

  /* truncated: the end magic is gone */
  g_assert_true (g_file_set_contents (p, data, (gssize) len - 100, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "no PAR1 magic");

  /* footer length beyond the file */
  g_autofree char *copy = g_memdup2 (data, len);
  copy[len - 8] = (char) 0xff;
  copy[len - 7] = (char) 0xff;
  copy[len - 6] = (char) 0x0f;
  g_assert_true (g_file_set_contents (p, copy, (gssize) len, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "footer length");

  /* garbage footer */
  memcpy (copy, data, len);
  guint32 flen = (guint8) data[len - 8] | ((guint8) data[len - 7] << 8) | ((guint8) data[len - 6] << 16);
  memset (copy + len - 8 - flen, 0xee, flen);
  g_assert_true (g_file_set_contents (p, copy, (gssize) len, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "bad.parquet");

  /* damaged page data: the snappy pages no longer decompress */
  memcpy (copy, data, len);
  memset (copy + 4, 0xff, 400);
  g_assert_true (g_file_set_contents (p, copy, (gssize) len, NULL));
  expect_error (p, HN_ERROR_CORRUPT, "column 'text'");

  /* a physical type we do not read fails closed with its name */
  g_autofree char *f16 = fixture ("hy-float16-unsupported.parquet");
  expect_error (f16, HN_ERROR_UNSUPPORTED, "FIXED_LEN_BYTE_ARRAY");

  g_autoptr (GError) error = NULL;
  g_assert_null (hn_parquet_open ("/nonexistent/x.parquet", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_unlink (p);
  g_rmdir (dir);
}

/* Without the fsync of g_file_set_contents: the fuzz loops write thousands of
 * files (into memory when /dev/shm is there). */
static char *
fuzz_dir (void)
{
  char *d = g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR) ? g_strdup ("/dev/shm/hn-fuzz-XXXXXX") : NULL;
  if (d && g_mkdtemp (d))
    return d;
  g_free (d);
  return g_dir_make_tmp ("hn-fuzz-XXXXXX", NULL);
}

static void
put_file (const char *path, const char *data, gsize len)
{
  FILE *fp = fopen (path, "wb");
  g_assert_nonnull (fp);
  g_assert_cmpuint (fwrite (data, 1, len, fp), ==, len);
  fclose (fp);
}

/* Random damage anywhere in a file gives an error or valid data, never a
 * crash or an out-of-bounds read (run under valgrind to see the latter). */
static void
test_fuzz (void)
{
  const char *names[] = { "hy-snappy-dict.parquet", "hy-none-plain-rowgroups.parquet", "pj-v1-gzip.parquet",
                          "hy-zstd-dict.parquet", "hy-delta-bss.parquet" };
  g_autofree char *dir = fuzz_dir ();
  g_autofree char *p = g_build_filename (dir, "fuzz.parquet", NULL);
  GRand *rng = g_rand_new_with_seed (1234);
  guint errors = 0, oks = 0;
  for (guint fi = 0; fi < G_N_ELEMENTS (names); fi++)
    {
      g_autofree char *src = fixture (names[fi]);
      g_autofree char *data = NULL;
      gsize len;
      g_assert_true (g_file_get_contents (src, &data, &len, NULL));
      for (int iter = 0; iter < 150; iter++)
        {
          g_autofree char *copy = g_memdup2 (data, len);
          int flips = 1 + g_rand_int_range (rng, 0, 4);
          for (int k = 0; k < flips; k++)
            {
              /* half the damage in the footer, where the structure is */
              gsize at = g_rand_boolean (rng) ? (gsize) g_rand_int_range (rng, 0, (gint32) len)
                                              : len - 8 - (gsize) g_rand_int_range (rng, 1, (gint32) MIN (len - 8, 600));
              copy[at] = (char) g_rand_int_range (rng, 0, 256);
            }
          put_file (p, copy, len);
          g_autoptr (GError) error = NULL;
          g_autoptr (HnParquetFile) f = hn_parquet_open (p, &error);
          if (f)
            {
              g_autoptr (JsonArray) rows = hn_parquet_read_json_rows (f, -1, &error);
              for (guint i = 0; i < hn_parquet_get_n_columns (f) && !error; i++)
                hn_parquet_column_free (hn_parquet_read_column (f, i, -1, &error));
            }
          if (error)
            {
              g_assert_true (error->domain == HN_ERROR);
              g_assert_true (error->code == HN_ERROR_CORRUPT || error->code == HN_ERROR_UNSUPPORTED ||
                             error->code == HN_ERROR_OUT_OF_MEMORY);
              errors++;
            }
          else
            oks++;
        }
    }
  g_rand_free (rng);
  g_test_message ("%u damaged files rejected, %u still readable", errors, oks);
  g_assert_cmpuint (errors, >, 0);
  g_unlink (p);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autofree char *exp = fixture ("expected.json");
  expected_parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  if (!json_parser_load_from_file (expected_parser, exp, &error))
    g_error ("%s", error->message);
  JsonObject *root = json_node_get_object (json_parser_get_root (expected_parser));
  expected_rows = json_object_get_array_member (root, "rows");
  JsonArray *files = json_object_get_array_member (root, "files");
  for (guint i = 0; i < json_array_get_length (files); i++)
    {
      const char *name = json_array_get_string_element (files, i);
      g_autofree char *tp = g_strdup_printf ("/parquet/%s", name);
      g_test_add_data_func (tp, name, test_file);
    }
  g_test_add_func ("/parquet/delta-byte-stream-split", test_delta);
  g_test_add_func ("/parquet/malformed", test_malformed);
  g_test_add_func ("/parquet/fuzz", test_fuzz);
  int rc = g_test_run ();
  g_object_unref (expected_parser);
  return rc;
}
