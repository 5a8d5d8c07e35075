/* safetensors reader and writer: round trips, dtype conversions, sharding,
 * every corrupt-file error, and the real stories260K package. */
#include "formats/safetensors.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *n;
      while (d && (n = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, n, NULL);
          rm_rf (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

static char *
make_tmpdir (void)
{
  g_autoptr (GError) error = NULL;
  char *dir = g_dir_make_tmp ("hn-st-XXXXXX", &error);
  g_assert_no_error (error);
  return dir;
}

/* ---- conversions ---- */

static void
test_half_conversions (void)
{
  g_assert_cmphex (hn_st_f32_to_f16 (1.0f), ==, 0x3c00);
  g_assert_cmphex (hn_st_f32_to_f16 (-2.0f), ==, 0xc000);
  g_assert_cmphex (hn_st_f32_to_f16 (65504.0f), ==, 0x7bff);
  g_assert_cmphex (hn_st_f32_to_f16 (65520.0f), ==, 0x7c00); /* rounds to inf */
  g_assert_cmphex (hn_st_f32_to_f16 (ldexpf (1.0f, -24)), ==, 0x0001);
  g_assert_cmphex (hn_st_f32_to_f16 (ldexpf (1.0f, -25)), ==, 0x0000); /* tie to even */
  g_assert_cmphex (hn_st_f32_to_f16 (ldexpf (3.0f, -25)), ==, 0x0002);
  g_assert_cmphex (hn_st_f32_to_f16 (0.1f), ==, 0x2e66);
  g_assert_cmphex (hn_st_f32_to_bf16 (1.0f), ==, 0x3f80);
  g_assert_cmphex (hn_st_f32_to_bf16 (3.14159265f), ==, 0x4049);
  g_assert_cmpfloat (hn_st_bf16_to_f32 (0x4049), ==, 3.140625f);
  g_assert_true (isnan (hn_st_f16_to_f32 (0x7e00)));
  g_assert_true (isinf (hn_st_f16_to_f32 (0xfc00)) && hn_st_f16_to_f32 (0xfc00) < 0);
  /* Every finite half survives f16 -> f32 -> f16, and the f32 value is exact. */
  for (guint32 h = 0; h < 65536; h++)
    {
      if ((h & 0x7c00) == 0x7c00)
        continue;
      float f = hn_st_f16_to_f32 ((guint16) h);
      g_assert_cmphex (hn_st_f32_to_f16 (f), ==, h);
      guint32 e = (h >> 10) & 0x1f, m = h & 0x3ff;
      double want = e ? ldexp (1.0 + m / 1024.0, (int) e - 15) : ldexp ((double) m, -24);
      if (h & 0x8000)
        want = -want;
      g_assert_cmpfloat ((double) f, ==, want);
    }
  /* bf16 rounds to nearest even */
  g_assert_cmphex (hn_st_f32_to_bf16 (1.0f + ldexpf (1.0f, -8)), ==, 0x3f80);
  g_assert_cmphex (hn_st_f32_to_bf16 (1.0f + ldexpf (3.0f, -8)), ==, 0x3f82);
}

/* ---- round trip ---- */

static HnSafetensorsWriter *
make_writer (float *f32, guint16 *f16, guint16 *bf16, gint64 *i64, guint8 *u8)
{
  HnSafetensorsWriter *w = hn_safetensors_writer_new ();
  g_autoptr (GError) error = NULL;
  for (int i = 0; i < 15; i++)
    f32[i] = (float) i * 0.5f - 3.0f;
  for (int i = 0; i < 7; i++)
    {
      f16[i] = hn_st_f32_to_f16 ((float) i - 2.5f);
      bf16[i] = hn_st_f32_to_bf16 ((float) i * 1.25f);
    }
  for (int i = 0; i < 4; i++)
    i64[i] = (gint64) 1 << (10 * i);
  for (int i = 0; i < 3; i++)
    u8[i] = (guint8) (i * 100);
  gint64 s35[] = { 3, 5 }, s7[] = { 7 }, s4[] = { 4 }, s3[] = { 3 }, s1x7[] = { 1, 7 }, s0[] = { 0, 4 };
  float scalar = 42.0f;
  g_assert_true (hn_safetensors_writer_add (w, "b.weight", HN_ST_DTYPE_F32, 2, s35, f32, 60, FALSE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "a.half", HN_ST_DTYPE_F16, 1, s7, f16, 14, TRUE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "c.bf16", HN_ST_DTYPE_BF16, 2, s1x7, bf16, 14, TRUE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "d.ids", HN_ST_DTYPE_I64, 1, s4, i64, 32, TRUE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "e.mask", HN_ST_DTYPE_U8, 1, s3, u8, 3, TRUE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "f.scalar", HN_ST_DTYPE_F32, 0, NULL, &scalar, 4, TRUE, &error));
  g_assert_true (hn_safetensors_writer_add (w, "g.empty", HN_ST_DTYPE_F32, 2, s0, NULL, 0, TRUE, &error));
  g_assert_no_error (error);
  /* duplicate names and wrong sizes are refused */
  g_assert_false (hn_safetensors_writer_add (w, "b.weight", HN_ST_DTYPE_F32, 2, s35, f32, 60, FALSE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (hn_safetensors_writer_add (w, "x", HN_ST_DTYPE_F32, 2, s35, f32, 56, FALSE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  hn_safetensors_writer_set_metadata (w, "note", "hello \"world\"");
  return w;
}

static void
check_contents (HnSafetensors *st, const float *f32, const guint16 *f16, const guint16 *bf16, const gint64 *i64,
                const guint8 *u8)
{
  g_assert_cmpuint (hn_safetensors_get_n_tensors (st), ==, 7);
  const char *order[] = { "a.half", "b.weight", "c.bf16", "d.ids", "e.mask", "f.scalar", "g.empty" };
  for (guint i = 0; i < 7; i++)
    g_assert_cmpstr (hn_safetensors_get_nth (st, i)->name, ==, order[i]);

  const HnSafetensorInfo *t = hn_safetensors_lookup (st, "b.weight");
  g_assert_nonnull (t);
  g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_F32);
  g_assert_cmpuint (t->ndim, ==, 2);
  g_assert_cmpint (t->shape[0], ==, 3);
  g_assert_cmpint (t->shape[1], ==, 5);
  g_assert_cmpint (t->n_elements, ==, 15);
  g_assert_cmpuint (t->nbytes, ==, 60);
  g_assert_cmpmem (t->data, 60, f32, 60);

  t = hn_safetensors_lookup (st, "a.half");
  g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_F16);
  g_assert_cmpmem (t->data, 14, f16, 14);
  g_autoptr (GError) error = NULL;
  g_autofree float *conv = hn_safetensor_info_dup_f32 (t, &error);
  g_assert_no_error (error);
  for (int i = 0; i < 7; i++)
    g_assert_cmpfloat (conv[i], ==, (float) i - 2.5f);

  t = hn_safetensors_lookup (st, "c.bf16");
  g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_BF16);
  g_assert_cmpmem (t->data, 14, bf16, 14);
  g_autofree float *conv2 = hn_safetensor_info_dup_f32 (t, &error);
  for (int i = 0; i < 7; i++)
    g_assert_cmpfloat (conv2[i], ==, (float) i * 1.25f);

  t = hn_safetensors_lookup (st, "d.ids");
  g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_I64);
  g_assert_cmpmem (t->data, 32, i64, 32);
  t = hn_safetensors_lookup (st, "e.mask");
  g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_U8);
  g_assert_cmpmem (t->data, 3, u8, 3);
  t = hn_safetensors_lookup (st, "f.scalar");
  g_assert_cmpuint (t->ndim, ==, 0);
  g_assert_cmpint (t->n_elements, ==, 1);
  float sc;
  memcpy (&sc, t->data, 4);
  g_assert_cmpfloat (sc, ==, 42.0f);
  t = hn_safetensors_lookup (st, "g.empty");
  g_assert_cmpint (t->n_elements, ==, 0);
  g_assert_cmpuint (t->nbytes, ==, 0);

  g_assert_null (hn_safetensors_lookup (st, "nope"));
  g_assert_null (hn_safetensors_require (st, "nope", &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "nope"));
  g_assert_cmpstr (hn_safetensors_get_metadata (st, "format"), ==, "pt");
  g_assert_cmpstr (hn_safetensors_get_metadata (st, "note"), ==, "hello \"world\"");
}

static void
test_round_trip (void)
{
  float f32[15];
  guint16 f16[7], bf16[7];
  gint64 i64[4];
  guint8 u8[3];
  g_autoptr (HnSafetensorsWriter) w = make_writer (f32, f16, bf16, i64, u8);
  g_autofree char *dir = make_tmpdir ();
  g_autofree char *path = g_build_filename (dir, "t.safetensors", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_safetensors_writer_write_file (w, path, &error));
  g_assert_no_error (error);

  /* Layout as the Python library writes it: header padded with spaces to 8
   * bytes, bigger dtypes first so every tensor is aligned in the file. */
  g_autofree char *bytes = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (path, &bytes, &len, NULL));
  guint64 hlen;
  memcpy (&hlen, bytes, 8);
  g_assert_cmpuint (hlen % 8, ==, 0);
  g_assert_cmpint (bytes[8], ==, '{');
  g_assert_true (g_str_has_prefix (bytes + 8, "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"hello \\\"world\\\"\"},\"d.ids\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[0,32]}"));

  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
  g_assert_no_error (error);
  check_contents (st, f32, f16, bf16, i64, u8);
  const guint8 *base = (const guint8 *) hn_safetensors_lookup (st, "d.ids")->data;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      gsize off = (gsize) ((const guint8 *) t->data - base) + 8 + hlen;
      g_assert_cmpuint (off % hn_st_dtype_size (t->dtype), ==, 0);
      g_assert_cmpstr (t->file, ==, path);
    }
  /* A folder with one safetensors file opens too. */
  g_autoptr (HnSafetensors) st2 = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_safetensors_get_n_tensors (st2), ==, 7);
  rm_rf (dir);
}

static void
test_sharded (void)
{
  float f32[15];
  guint16 f16[7], bf16[7];
  gint64 i64[4];
  guint8 u8[3];
  g_autoptr (HnSafetensorsWriter) w = make_writer (f32, f16, bf16, i64, u8);
  g_autofree char *dir = make_tmpdir ();
  g_autoptr (GError) error = NULL;
  /* 64-byte shards: a.half (14) | b.weight (60) | c.bf16, d.ids, e.mask, f.scalar, g.empty (53) */
  g_assert_true (hn_safetensors_writer_write_dir (w, dir, "model", 64, &error));
  g_assert_no_error (error);
  g_autofree char *index = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_autofree char *s1 = g_build_filename (dir, "model-00001-of-00003.safetensors", NULL);
  g_autofree char *s3 = g_build_filename (dir, "model-00003-of-00003.safetensors", NULL);
  g_autofree char *single = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (g_file_test (index, G_FILE_TEST_IS_REGULAR));
  g_assert_true (g_file_test (s1, G_FILE_TEST_IS_REGULAR));
  g_assert_true (g_file_test (s3, G_FILE_TEST_IS_REGULAR));
  g_assert_false (g_file_test (single, G_FILE_TEST_EXISTS));
  g_autofree char *itext = NULL;
  g_assert_true (g_file_get_contents (index, &itext, NULL, NULL));
  g_assert_nonnull (strstr (itext, "\"total_size\" : 127"));
  {
    g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
    g_assert_no_error (error);
    check_contents (st, f32, f16, bf16, i64, u8);
    g_assert_cmpuint (g_strv_length ((char **) hn_safetensors_get_files (st)), ==, 3);
    g_assert_cmpstr (hn_safetensors_get_metadata (st, "total_size"), ==, "127");
    g_autofree char *b = g_path_get_basename (hn_safetensors_lookup (st, "b.weight")->file);
    g_assert_cmpstr (b, ==, "model-00002-of-00003.safetensors");
  }
  /* Writing again unsharded removes the shards and the index. */
  g_assert_true (hn_safetensors_writer_write_dir (w, dir, "model", 0, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (index, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (s1, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (single, G_FILE_TEST_IS_REGULAR));
  g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  check_contents (st, f32, f16, bf16, i64, u8);
  rm_rf (dir);
}

/* ---- corrupt files ---- */

static void
write_raw (const char *path, guint64 hlen, const char *header, gsize data_len)
{
  gsize hl = strlen (header);
  gsize total = 8 + hl + data_len;
  g_autofree guint8 *buf = g_malloc0 (total);
  for (int i = 0; i < 8; i++)
    buf[i] = (guint8) (hlen >> (8 * i));
  memcpy (buf + 8, header, hl);
  g_assert_true (g_file_set_contents (path, (char *) buf, (gssize) total, NULL));
}

static void
expect_corrupt (const char *path, const char *want1, const char *want2)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
  g_assert_null (st);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  if (g_test_verbose ())
    g_printerr ("  %s\n", error->message);
  g_assert_nonnull (strstr (error->message, want1));
  if (want2)
    g_assert_nonnull (strstr (error->message, want2));
}

static void
test_corrupt (void)
{
  g_autofree char *dir = make_tmpdir ();
  g_autofree char *p = g_build_filename (dir, "bad.safetensors", NULL);

  g_assert_true (g_file_set_contents (p, "\x10\0\0", 3, NULL));
  expect_corrupt (p, "bad.safetensors", "truncated header: the file is 3 bytes");

  write_raw (p, 500, "{\"a\":{}}", 0);
  expect_corrupt (p, "truncated header: header length 500 runs past the end", NULL);

  write_raw (p, (guint64) 200 * 1000 * 1000, "{}", 0);
  expect_corrupt (p, "exceeds the 100 MB limit", NULL);

  const char *bad_json = "{\"a\":{\"dtype\":\"F32\",";
  write_raw (p, strlen (bad_json), bad_json, 0);
  expect_corrupt (p, "header is not valid JSON", NULL);

  write_raw (p, 2, "[]", 0);
  expect_corrupt (p, "header is not a JSON object", NULL);

  const char *overlap = "{\"w1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"w2\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  write_raw (p, strlen (overlap), overlap, 12);
  expect_corrupt (p, "tensors 'w1' [0, 8) and 'w2' [4, 12) overlap", NULL);

  const char *mismatch = "{\"w\":{\"dtype\":\"F16\",\"shape\":[3,3],\"data_offsets\":[0,16]}}";
  write_raw (p, strlen (mismatch), mismatch, 16);
  expect_corrupt (p, "tensor 'w'", "size mismatch");

  const char *outside = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
  write_raw (p, strlen (outside), outside, 12);
  expect_corrupt (p, "tensor 'w'", "run past the end of the data section (12 bytes)");

  const char *reversed = "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}";
  write_raw (p, strlen (reversed), reversed, 12);
  expect_corrupt (p, "tensor 'w'", "is after end");

  const char *dtype = "{\"w\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  write_raw (p, strlen (dtype), dtype, 4);
  expect_corrupt (p, "tensor 'w'", "unknown dtype \"F31\"");

  const char *noffs = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}";
  write_raw (p, strlen (noffs), noffs, 4);
  expect_corrupt (p, "tensor 'w'", "\"data_offsets\"");

  const char *negshape = "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
  write_raw (p, strlen (negshape), negshape, 4);
  expect_corrupt (p, "tensor 'w'", "shape[0]");

  const char *badmeta = "{\"__metadata__\":{\"format\":1}}";
  write_raw (p, strlen (badmeta), badmeta, 0);
  expect_corrupt (p, "__metadata__ value 'format' is not a string", NULL);

  /* Sharded: the same tensor in two shards, and an index escaping the folder. */
  const char *one = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  g_autofree char *a = g_build_filename (dir, "model-00001-of-00002.safetensors", NULL);
  g_autofree char *b = g_build_filename (dir, "model-00002-of-00002.safetensors", NULL);
  write_raw (a, strlen (one), one, 4);
  write_raw (b, strlen (one), one, 4);
  g_autofree char *idx = g_build_filename (dir, "model.safetensors.index.json", NULL);
  g_assert_true (g_file_set_contents (idx, "{\"metadata\":{},\"weight_map\":{\"w\":\"model-00001-of-00002.safetensors\","
                                           "\"v\":\"model-00002-of-00002.safetensors\"}}", -1, NULL));
  expect_corrupt (idx, "tensor 'w' is also in", "unique across shards");

  write_raw (b, strlen (one), one, 4);
  g_assert_true (g_file_set_contents (idx, "{\"weight_map\":{\"w\":\"../model-00001-of-00002.safetensors\"}}", -1, NULL));
  expect_corrupt (idx, "not a plain file name", NULL);

  g_assert_true (g_file_set_contents (idx, "{\"weight_map\":{\"w\":\"model-00001-of-00002.safetensors\","
                                           "\"x\":\"model-00001-of-00002.safetensors\"}}", -1, NULL));
  expect_corrupt (idx, "maps tensor 'x' to model-00001-of-00002.safetensors, but that file has no such tensor", NULL);

  g_assert_true (g_file_set_contents (idx, "{\"weight_map\": {\"w\": }", -1, NULL));
  expect_corrupt (idx, "model.safetensors.index.json:1:22: Parse error", NULL);

  /* A missing shard is a not-found error naming the index. */
  g_assert_true (g_file_set_contents (idx, "{\"weight_map\":{\"w\":\"model-00009.safetensors\"}}", -1, NULL));
  {
    g_autoptr (GError) error = NULL;
    g_assert_null (hn_safetensors_open (idx, &error));
    g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
    g_assert_nonnull (strstr (error->message, "model-00009.safetensors"));
  }
  /* A folder with nothing to load. */
  {
    g_autofree char *empty = g_build_filename (dir, "empty", NULL);
    g_mkdir (empty, 0755);
    g_autoptr (GError) error = NULL;
    g_assert_null (hn_safetensors_open (empty, &error));
    g_assert_error (error, HN_ERROR, HN_ERROR_NOT_FOUND);
  }
  rm_rf (dir);
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

/* Random damage to a header gives an error or a valid file, never a crash
 * or an out-of-bounds read (valgrind shows the latter). */
static void
test_fuzz (void)
{
  float f32[15];
  guint16 f16[7], bf16[7];
  gint64 i64[4];
  guint8 u8[3];
  g_autoptr (HnSafetensorsWriter) w = make_writer (f32, f16, bf16, i64, u8);
  g_autofree char *dir = fuzz_dir ();
  g_autofree char *path = g_build_filename (dir, "f.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, path, NULL));
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  GRand *rng = g_rand_new_with_seed (99);
  guint bad = 0;
  for (int iter = 0; iter < 1000; iter++)
    {
      g_autofree char *copy = g_memdup2 (data, len);
      int flips = 1 + g_rand_int_range (rng, 0, 3);
      for (int k = 0; k < flips; k++)
        {
          gsize at = (gsize) g_rand_int_range (rng, 0, (gint32) MIN (len, 420));
          /* digits and JSON punctuation make the interesting damage */
          const char pool[] = "0123456789{}[],:\"\\ -eE.xF";
          copy[at] = g_rand_boolean (rng) ? pool[g_rand_int_range (rng, 0, sizeof pool - 1)]
                                          : (char) g_rand_int_range (rng, 0, 256);
        }
      gsize cut = g_rand_int_range (rng, 0, 10) == 0 ? (gsize) g_rand_int_range (rng, 0, (gint32) len) : len;
      put_file (path, copy, cut);
      g_autoptr (GError) error = NULL;
      g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
      if (!st)
        {
          g_assert_true (error->domain == HN_ERROR &&
                         (error->code == HN_ERROR_CORRUPT || error->code == HN_ERROR_UNSUPPORTED));
          bad++;
          continue;
        }
      /* whatever opened must be readable in full */
      for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
        {
          const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
          g_autofree float *v = hn_safetensor_info_dup_f32 (t, NULL);
          (void) v;
        }
    }
  g_rand_free (rng);
  g_assert_cmpuint (bad, >, 500);
  rm_rf (dir);
}

/* ---- the real model ---- */

static void
test_stories260k (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *dir = g_build_filename (shared ? shared : "../shared", "models", "stories260K", NULL);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("stories260K not available");
      return;
    }
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  /* embed + norm + 5 layers x 9 tensors (tied embeddings: no lm_head) */
  g_assert_cmpuint (hn_safetensors_get_n_tensors (st), ==, 47);
  g_assert_cmpstr (hn_safetensors_get_metadata (st, "format"), ==, "pt");
  const HnSafetensorInfo *e = hn_safetensors_require (st, "model.embed_tokens.weight", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (e->ndim, ==, 2);
  g_assert_cmpint (e->shape[0], ==, 512);
  g_assert_cmpint (e->shape[1], ==, 64);
  g_autofree float *v = hn_safetensor_info_dup_f32 (e, &error);
  g_assert_no_error (error);
  /* first values, as read by the Python struct module */
  g_assert_cmpfloat_with_epsilon (v[0], -0.29474878f, 1e-7);
  g_assert_cmpfloat_with_epsilon (v[1], 0.56189561f, 1e-7);
  const HnSafetensorInfo *k = hn_safetensors_lookup (st, "model.layers.4.self_attn.k_proj.weight");
  g_assert_nonnull (k);
  g_assert_cmpint (k->shape[0], ==, 32); /* 4 KV heads x head_dim 8 */
  g_assert_cmpint (k->shape[1], ==, 64);
  g_assert_null (hn_safetensors_lookup (st, "lm_head.weight"));
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_F32);
      if (i > 0)
        g_assert_cmpint (strcmp (hn_safetensors_get_nth (st, i - 1)->name, t->name), <, 0);
    }

  /* Re-writing the model gives a file that reads back identically. */
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_assert_true (hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE, &error));
    }
  g_autofree char *tmp = make_tmpdir ();
  g_assert_true (hn_safetensors_writer_write_dir (w, tmp, "model", 200 * 1024, &error));
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) st2 = hn_safetensors_open (tmp, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_safetensors_get_n_tensors (st2), ==, 47);
  g_assert_cmpuint (g_strv_length ((char **) hn_safetensors_get_files (st2)), >, 1);
  for (guint i = 0; i < 47; i++)
    {
      const HnSafetensorInfo *a = hn_safetensors_get_nth (st, i), *b = hn_safetensors_get_nth (st2, i);
      g_assert_cmpstr (a->name, ==, b->name);
      g_assert_cmpmem (a->data, a->nbytes, b->data, b->nbytes);
    }
  rm_rf (tmp);
}

static void
copy_file (const char *from_dir, const char *to_dir, const char *name)
{
  g_autofree char *a = g_build_filename (from_dir, name, NULL);
  g_autofree char *b = g_build_filename (to_dir, name, NULL);
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (a, &data, &len, NULL));
  g_assert_true (g_file_set_contents (b, data, (gssize) len, NULL));
}

/* With HN_IO_EXPORT_DIR set, leaves files written here for
 * tests/fixtures/io/check_reference.py to load with the Python safetensors
 * library and transformers: a mixed-dtype file (and the values it holds, as
 * JSON) and stories260K re-sharded by our writer. */
static void
test_export (void)
{
  const char *out = g_getenv ("HN_IO_EXPORT_DIR");
  if (!out)
    {
      g_test_skip ("set HN_IO_EXPORT_DIR to export files for the reference check");
      return;
    }
  g_autofree char *sdir = g_build_filename (out, "safetensors", NULL);
  g_assert_true (g_mkdir_with_parents (sdir, 0755) == 0);
  float f32[15];
  guint16 f16[7], bf16[7];
  gint64 i64[4];
  guint8 u8[3];
  g_autoptr (HnSafetensorsWriter) w = make_writer (f32, f16, bf16, i64, u8);
  g_autofree char *mixed = g_build_filename (sdir, "mixed.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, mixed, NULL));
  g_autoptr (GString) js = g_string_new ("{\"b.weight\": [");
  for (int i = 0; i < 15; i++)
    g_string_append_printf (js, "%s%.9g", i ? ", " : "", f32[i]);
  g_string_append (js, "], \"a.half\": [");
  for (int i = 0; i < 7; i++)
    g_string_append_printf (js, "%s%.9g", i ? ", " : "", hn_st_f16_to_f32 (f16[i]));
  g_string_append (js, "], \"c.bf16\": [");
  for (int i = 0; i < 7; i++)
    g_string_append_printf (js, "%s%.9g", i ? ", " : "", hn_st_bf16_to_f32 (bf16[i]));
  g_string_append (js, "], \"d.ids\": [");
  for (int i = 0; i < 4; i++)
    g_string_append_printf (js, "%s%" G_GINT64_FORMAT, i ? ", " : "", i64[i]);
  g_string_append (js, "], \"e.mask\": [0, 100, 200], \"f.scalar\": 42.0, \"g.empty\": [0, 4]}\n");
  g_autofree char *jpath = g_build_filename (sdir, "mixed.json", NULL);
  g_assert_true (g_file_set_contents (jpath, js->str, -1, NULL));

  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *src = g_build_filename (shared ? shared : "../shared", "models", "stories260K", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (src, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w2 = hn_safetensors_writer_new ();
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_assert_true (hn_safetensors_writer_add (w2, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE, NULL));
    }
  g_autofree char *mdir = g_build_filename (out, "stories260K-resharded", NULL);
  g_assert_true (hn_safetensors_writer_write_dir (w2, mdir, "model", 300 * 1024, &error));
  g_assert_no_error (error);
  const char *files[] = { "config.json", "tokenizer.json", "tokenizer_config.json", "expected-greedy-ids.txt" };
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    copy_file (src, mdir, files[i]);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/safetensors/half-conversions", test_half_conversions);
  g_test_add_func ("/safetensors/round-trip", test_round_trip);
  g_test_add_func ("/safetensors/sharded", test_sharded);
  g_test_add_func ("/safetensors/corrupt", test_corrupt);
  g_test_add_func ("/safetensors/fuzz", test_fuzz);
  g_test_add_func ("/safetensors/stories260k", test_stories260k);
  g_test_add_func ("/safetensors/export", test_export);
  return g_test_run ();
}
