/* GGUF reader and writer: a hand-built byte fixture (independent of our
 * writer), writer -> reader round trips of every value type and several
 * tensor types, and the validation of damaged files. */
#include "formats/gguf.h"
#include "base/hn-error.h"
#include "formats/safetensors.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* ---- a hand-built file ---- */

static void
b_u32 (GByteArray *b, guint32 v)
{
  for (int i = 0; i < 4; i++)
    {
      guint8 x = (guint8) (v >> (8 * i));
      g_byte_array_append (b, &x, 1);
    }
}

static void
b_u64 (GByteArray *b, guint64 v)
{
  for (int i = 0; i < 8; i++)
    {
      guint8 x = (guint8) (v >> (8 * i));
      g_byte_array_append (b, &x, 1);
    }
}

static void
b_str (GByteArray *b, const char *s)
{
  b_u64 (b, strlen (s));
  g_byte_array_append (b, (const guint8 *) s, (guint) strlen (s));
}

/* Version `ver`, 3 metadata entries, 2 tensors: "a" F32 [3] at 0 and "b"
 * Q8_0 [32, 2] at 32, with alignment 32. Written field by field from the
 * format description, not through HnGgufWriter. */
static GByteArray *
hand_built (guint32 ver)
{
  GByteArray *b = g_byte_array_new ();
  g_byte_array_append (b, (const guint8 *) "GGUF", 4);
  b_u32 (b, ver);
  b_u64 (b, 2); /* tensors */
  b_u64 (b, 3); /* kv */
  b_str (b, "general.architecture");
  b_u32 (b, 8);
  b_str (b, "llama");
  b_str (b, "llama.block_count");
  b_u32 (b, 4);
  b_u32 (b, 7);
  b_str (b, "tokenizer.ggml.tokens");
  b_u32 (b, 9);
  b_u32 (b, 8);
  b_u64 (b, 2);
  b_str (b, "<s>");
  b_str (b, "hi");
  /* tensor infos */
  b_str (b, "a");
  b_u32 (b, 1);
  b_u64 (b, 3);
  b_u32 (b, 0);
  b_u64 (b, 0);
  b_str (b, "b");
  b_u32 (b, 2);
  b_u64 (b, 32);
  b_u64 (b, 2);
  b_u32 (b, 8);
  b_u64 (b, 32);
  while (b->len % 32)
    g_byte_array_append (b, (const guint8 *) "", 1);
  float a[3] = { 1.5f, -2.0f, 0.25f };
  g_byte_array_append (b, (const guint8 *) a, sizeof a);
  while (b->len % 32)
    g_byte_array_append (b, (const guint8 *) "", 1);
  for (int blk = 0; blk < 2; blk++)
    {
      guint8 d[2] = { 0x00, blk ? 0x40 : 0x3c }; /* half 1.0, 2.0 */
      g_byte_array_append (b, d, 2);
      for (int j = 0; j < 32; j++)
        {
          gint8 q = (gint8) (j - 16);
          g_byte_array_append (b, (const guint8 *) &q, 1);
        }
    }
  return b;
}

static void
check_hand_built (HnGguf *g, guint32 ver)
{
  g_autoptr (GError) error = NULL;
  g_assert_cmpuint (hn_gguf_get_version (g), ==, ver);
  g_assert_cmpuint (hn_gguf_get_n_kv (g), ==, 3);
  g_assert_cmpstr (hn_gguf_get_string (g, "general.architecture", &error), ==, "llama");
  gint64 n = 0;
  g_assert_true (hn_gguf_get_int (g, "llama.block_count", &n, &error));
  g_assert_cmpint (n, ==, 7);
  const HnGgufKv *toks = hn_gguf_get_array (g, "tokenizer.ggml.tokens", HN_GGUF_STRING, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (toks->n, ==, 2);
  g_assert_cmpstr (toks->strs[1], ==, "hi");
  g_assert_cmpuint (hn_gguf_get_n_tensors (g), ==, 2);
  const HnGgufTensor *a = hn_gguf_find_tensor (g, "a"), *b = hn_gguf_find_tensor (g, "b");
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_cmpint (a->ne[0], ==, 3);
  g_assert_cmpint (b->ne[0], ==, 32);
  g_assert_cmpint (b->ne[1], ==, 2);
  g_assert_cmpuint (b->nbytes, ==, 68);
  float fa[3], fb[64];
  g_assert_true (hn_gguf_tensor_to_f32 (g, a, fa, &error));
  g_assert_cmpfloat (fa[1], ==, -2.0f);
  g_assert_true (hn_gguf_tensor_to_f32 (g, b, fb, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (fb[0], ==, -16.0f);
  g_assert_cmpfloat (fb[31], ==, 15.0f);
  g_assert_cmpfloat (fb[32], ==, -32.0f);
  g_assert_cmpfloat (fb[63], ==, 30.0f);
  /* a wrong-typed getter is an error naming the key */
  g_assert_false (hn_gguf_get_int (g, "general.architecture", &n, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "general.architecture"));
}

static char *tmp_dir;

static char *
tmp_file (const char *name, const void *data, gsize len)
{
  char *p = g_build_filename (tmp_dir, name, NULL);
  g_assert_true (g_file_set_contents (p, data, (gssize) len, NULL));
  return p;
}

static void
test_hand_built (void)
{
  for (guint32 ver = 2; ver <= 3; ver++)
    {
      g_autoptr (GByteArray) b = hand_built (ver);
      g_autofree char *path = tmp_file ("hand.gguf", b->data, b->len);
      g_autoptr (GError) error = NULL;
      g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
      g_assert_no_error (error);
      check_hand_built (g, ver);
      /* the folder form finds the one .gguf */
      g_autoptr (HnGguf) g2 = hn_gguf_open (tmp_dir, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (hn_gguf_get_path (g2), ==, path);
      g_unlink (path);
    }
}

/* Every prefix of a valid file fails cleanly (except the whole file). */
static void
test_truncated (void)
{
  g_autoptr (GByteArray) b = hand_built (3);
  for (guint n = 0; n < b->len; n++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (HnGguf) g = hn_gguf_open_from_data (b->data, n, "cut.gguf", &error);
      g_assert_null (g);
      g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
      g_assert_true (g_str_has_prefix (error->message, "cut.gguf: "));
    }
}

typedef struct {
  gsize at;          /* byte offset to patch */
  guint64 value;
  guint width;       /* 4 or 8 */
  const char *expect; /* substring of the message */
  int code;
} Patch;

static void
test_damaged (void)
{
  g_autoptr (GByteArray) good = hand_built (3);
  /* offsets in the hand-built layout */
  const gsize kv0 = 24;                                  /* first key length */
  const gsize kv0_type = kv0 + 8 + 20;                  /* "general.architecture" */
  const gsize kv1 = kv0_type + 4 + 8 + 5;
  const gsize kv1_type = kv1 + 8 + 17;                  /* "llama.block_count" */
  const gsize kv2 = kv1_type + 4 + 4;
  const gsize kv2_count = kv2 + 8 + 21 + 4 + 4;
  const gsize ti0 = kv2_count + 8 + (8 + 3) + (8 + 2);
  const gsize ti0_ndim = ti0 + 8 + 1;
  const gsize ti0_type = ti0_ndim + 4 + 8;
  const gsize ti0_off = ti0_type + 4;
  const gsize ti1 = ti0_off + 8;
  const gsize ti1_ne0 = ti1 + 8 + 1 + 4;
  const gsize ti1_type = ti1_ne0 + 16;
  const gsize ti1_off = ti1_type + 4;
  Patch patches[] = {
    { 0, 0x46554748, 4, "magic", HN_ERROR_CORRUPT },
    { 4, 1, 4, "version 1", HN_ERROR_UNSUPPORTED },
    { 4, 0x03000000, 4, "big-endian", HN_ERROR_UNSUPPORTED },
    { 4, 7, 4, "version 7", HN_ERROR_CORRUPT },
    { 8, G_MAXUINT64, 8, "tensor count", HN_ERROR_CORRUPT },
    { 16, 1u << 30, 8, "metadata count", HN_ERROR_CORRUPT },
    { kv0, G_MAXUINT64 / 2, 8, "key of metadata entry 0", HN_ERROR_CORRUPT },
    { kv0_type, 99, 4, "unknown value type 99", HN_ERROR_CORRUPT },
    { kv1_type, 9, 4, "llama.block_count", HN_ERROR_CORRUPT },
    { kv2_count, G_GUINT64_CONSTANT (1) << 40, 8, "tokenizer.ggml.tokens", HN_ERROR_CORRUPT },
    { ti0_ndim, 5, 4, "tensor 'a' has 5 dimensions", HN_ERROR_CORRUPT },
    { ti0_type, 4, 4, "tensor 'a' has unknown type 4", HN_ERROR_CORRUPT },
    { ti0_off, 8, 8, "not a multiple of the alignment", HN_ERROR_CORRUPT },
    { ti0_off, 4096, 8, "tensor 'a'", HN_ERROR_CORRUPT },
    { ti1_off, 0, 8, "overlap", HN_ERROR_CORRUPT },
    { ti1_ne0, 31, 8, "multiple of its 32-element blocks", HN_ERROR_CORRUPT },
    { ti1_ne0, G_MAXUINT64 / 4, 8, "tensor 'b'", HN_ERROR_CORRUPT },
    { ti1 + 8, 'a', 1, "tensor 'a' appears twice", HN_ERROR_CORRUPT },
  };
  for (guint i = 0; i < G_N_ELEMENTS (patches); i++)
    {
      g_autoptr (GByteArray) b = g_byte_array_new ();
      g_byte_array_append (b, good->data, good->len);
      for (guint k = 0; k < patches[i].width; k++)
        b->data[patches[i].at + k] = (guint8) (patches[i].value >> (8 * k));
      g_autoptr (GError) error = NULL;
      g_autoptr (HnGguf) g = hn_gguf_open_from_data (b->data, b->len, "bad.gguf", &error);
      if (g || !error || error->code != patches[i].code || !strstr (error->message, patches[i].expect))
        g_error ("patch %u: expected '%s', got %s", i, patches[i].expect, error ? error->message : "success");
      g_assert_true (g_str_has_prefix (error->message, "bad.gguf: "));
    }
  /* a duplicate key */
  g_autoptr (GByteArray) b = g_byte_array_new ();
  g_byte_array_append (b, (const guint8 *) "GGUF", 4);
  b_u32 (b, 3);
  b_u64 (b, 0);
  b_u64 (b, 2);
  for (int i = 0; i < 2; i++)
    {
      b_str (b, "k");
      b_u32 (b, 4);
      b_u32 (b, 1);
    }
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGguf) g = hn_gguf_open_from_data (b->data, b->len, "dup.gguf", &error);
  g_assert_null (g);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "'k' appears twice"));
}

/* ---- writer round trip ---- */

static void
test_round_trip (void)
{
  g_autoptr (HnGgufWriter) w = hn_gguf_writer_new ();
  hn_gguf_writer_set_string (w, "general.architecture", "llama");
  hn_gguf_writer_set_u32 (w, "u32", 4000000000u);
  hn_gguf_writer_set_i32 (w, "i32", -5);
  hn_gguf_writer_set_u64 (w, "u64", G_GUINT64_CONSTANT (1) << 40);
  hn_gguf_writer_set_f32 (w, "f32", 0.125f);
  hn_gguf_writer_set_bool (w, "flag", TRUE);
  const char *strs[] = { "a", "", "ü ▁x" };
  hn_gguf_writer_set_string_array (w, "strs", strs, 3);
  const gint32 ints[] = { 1, -2, 3 };
  hn_gguf_writer_set_i32_array (w, "ints", ints, 3);
  const float fl[] = { 0.5f, -1e-3f };
  hn_gguf_writer_set_f32_array (w, "floats", fl, 2);
  hn_gguf_writer_set_i32 (w, "i32", -6); /* replaced in place */
  hn_gguf_writer_set_u32 (w, "general.alignment", 64);

  float src[2 * 256];
  for (int i = 0; i < 512; i++)
    src[i] = sinf ((float) i * 0.37f) * 0.1f;
  const HnGgmlType types[] = { HN_GGML_F32, HN_GGML_F16, HN_GGML_BF16, HN_GGML_Q8_0, HN_GGML_Q4_0, HN_GGML_Q4_K,
                               HN_GGML_Q6_K, HN_GGML_Q8_K };
  g_autoptr (GError) error = NULL;
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      gint64 ne[2] = { 256, 2 };
      gsize nb = hn_ggml_row_size (types[i], 256) * 2;
      g_autofree void *q = g_malloc (nb);
      g_assert_true (hn_ggml_quantize (types[i], src, q, 512, &error));
      g_autofree char *name = g_strdup_printf ("t.%s", hn_ggml_type_name (types[i]));
      g_assert_true (hn_gguf_writer_add_tensor (w, name, types[i], 2, ne, q, nb, TRUE, &error));
    }
  gint64 bad_ne[2] = { 100, 1 };
  g_assert_false (hn_gguf_writer_add_tensor (w, "bad", HN_GGML_Q8_0, 2, bad_ne, src, 100, TRUE, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  g_autofree char *path = g_build_filename (tmp_dir, "rt.gguf", NULL);
  g_assert_true (hn_gguf_writer_write (w, path, &error));
  g_assert_no_error (error);
  g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_gguf_get_alignment (g), ==, 64);
  g_assert_cmpstr (hn_gguf_get_kv (g, 0)->key, ==, "general.architecture");
  gint64 v = 0;
  g_assert_true (hn_gguf_get_int (g, "u32", &v, &error) && v == 4000000000);
  g_assert_true (hn_gguf_get_int (g, "i32", &v, &error) && v == -6);
  g_assert_cmpstr (hn_gguf_get_kv (g, 2)->key, ==, "i32");
  g_assert_true (hn_gguf_get_int (g, "u64", &v, &error) && v == (G_GINT64_CONSTANT (1) << 40));
  double f = 0;
  g_assert_true (hn_gguf_get_float (g, "f32", &f, &error) && f == 0.125);
  gboolean flag = FALSE;
  g_assert_true (hn_gguf_get_bool (g, "flag", &flag, &error) && flag);
  const HnGgufKv *s = hn_gguf_get_array (g, "strs", HN_GGUF_STRING, &error);
  g_assert_cmpstr (s->strs[2], ==, "ü ▁x");
  g_assert_cmpstr (s->strs[1], ==, "");
  const HnGgufKv *ia = hn_gguf_get_array (g, "ints", HN_GGUF_INT64, &error);
  g_assert_cmpint (hn_gguf_kv_array_int (ia, 1), ==, -2);
  const HnGgufKv *fa = hn_gguf_get_array (g, "floats", HN_GGUF_FLOAT64, &error);
  g_assert_cmpfloat (hn_gguf_kv_array_float (fa, 1), ==, -1e-3f);
  g_assert_no_error (error);
  g_assert_null (hn_gguf_get_array (g, "ints", HN_GGUF_STRING, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_clear_error (&error);

  g_assert_cmpuint (hn_gguf_get_n_tensors (g), ==, G_N_ELEMENTS (types));
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      const HnGgufTensor *t = hn_gguf_get_tensor (g, i);
      g_assert_cmpint (t->type, ==, types[i]);
      g_assert_cmpuint (t->offset % 64, ==, 0);
      g_assert_cmpuint (((guintptr) t->data) % 64, ==, 0);
      float back[512];
      g_assert_true (hn_gguf_tensor_to_f32 (g, t, back, &error));
      /* error bound per type relative to the values' range (0.1) */
      const float tol = types[i] == HN_GGML_F32 ? 0 : types[i] == HN_GGML_F16 ? 1e-4f
                        : types[i] == HN_GGML_BF16 ? 1e-3f : types[i] == HN_GGML_Q8_0 ? 1e-3f
                        : types[i] == HN_GGML_Q8_K ? 1e-3f
                        : types[i] == HN_GGML_Q6_K ? 3e-3f : types[i] == HN_GGML_Q4_0 ? 2e-2f : 1e-2f;
      double max_err = 0;
      for (int k = 0; k < 512; k++)
        max_err = MAX (max_err, fabs (back[k] - src[k]));
      if (max_err > tol)
        g_error ("%s: max error %g above %g", hn_ggml_type_name (types[i]), max_err, tol);
    }
  g_unlink (path);
}

/* ---- (de)quantization details checked by hand ---- */

static void
test_quant_by_hand (void)
{
  g_autoptr (GError) error = NULL;
  /* Q4_0 of 0..31 scaled: max |x| = 31 (positive) -> d = 31 / -8 */
  float x[32], y[32];
  for (int i = 0; i < 32; i++)
    x[i] = (float) i;
  guint8 q[18];
  g_assert_true (hn_ggml_quantize (HN_GGML_Q4_0, x, q, 32, &error));
  g_assert_true (hn_ggml_dequantize (HN_GGML_Q4_0, q, y, 32, &error));
  g_assert_cmpfloat (y[31], ==, hn_st_f16_to_f32 (hn_st_f32_to_f16 (31.0f / -8)) * -8);
  g_assert_cmpfloat (y[0], ==, 0.0f);
  /* Q8_K: f32 d then int8 */
  guint8 k8[292] = { 0 };
  float d = 0.5f;
  memcpy (k8, &d, 4);
  k8[4] = 0xFE; /* -2 */
  k8[4 + 255] = 7;
  float z[256];
  g_assert_true (hn_ggml_dequantize (HN_GGML_Q8_K, k8, z, 256, &error));
  g_assert_cmpfloat (z[0], ==, -1.0f);
  g_assert_cmpfloat (z[255], ==, 3.5f);
  g_assert_cmpfloat (z[1], ==, 0.0f);
  /* Q8_K's quantizer (ggml's quantize_row_q8_K_ref): the value of largest |x|
   * (here negative) is code -127 with d = -max / 127, every value within d / 2,
   * bsums the sums of each 16 codes */
  float xk[256];
  for (int i = 0; i < 256; i++)
    xk[i] = (float) (i - 200) * 0.01f;
  g_assert_true (hn_ggml_quantize (HN_GGML_Q8_K, xk, k8, 256, &error));
  g_assert_no_error (error);
  float dk;
  memcpy (&dk, k8, 4);
  g_assert_cmpfloat (dk, ==, 1 / (-127.f / xk[0]));
  g_assert_cmpint ((gint8) k8[4], ==, -127);
  g_assert_cmpint ((gint8) k8[4 + 200], ==, 0);
  g_assert_cmpint ((gint8) k8[4 + 255], ==, 35); /* 0.55 * 127 / 2 = 34.9 */
  for (int j = 0; j < 16; j++)
    {
      int sum = 0;
      for (int i = 0; i < 16; i++)
        sum += (gint8) k8[4 + 16 * j + i];
      gint16 bs;
      memcpy (&bs, k8 + 260 + 2 * j, 2);
      g_assert_cmpint (bs, ==, sum);
    }
  g_assert_true (hn_ggml_dequantize (HN_GGML_Q8_K, k8, z, 256, &error));
  for (int i = 0; i < 256; i++)
    g_assert_cmpfloat (fabsf (z[i] - xk[i]), <=, fabsf (dk) * 0.5f + 1e-6f);
  /* unsupported and misaligned requests fail closed */
  g_assert_false (hn_ggml_dequantize (HN_GGML_IQ2_XXS, k8, z, 256, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_false (hn_ggml_dequantize (HN_GGML_Q8_0, q, z, 31, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* all-zero input quantizes to zeros */
  float zeros[256] = { 0 };
  guint8 qk[292];
  for (guint t = 0; t < 3; t++)
    {
      HnGgmlType ty = t == 2 ? HN_GGML_Q8_K : t ? HN_GGML_Q6_K : HN_GGML_Q4_K;
      g_assert_true (hn_ggml_quantize (ty, zeros, qk, 256, &error));
      g_assert_true (hn_ggml_dequantize (ty, qk, z, 256, &error));
      for (int i = 0; i < 256; i++)
        g_assert_cmpfloat (z[i], ==, 0.0f);
    }
  HnGgmlType ty;
  g_assert_true (hn_ggml_type_from_name ("q4_k", &ty) && ty == HN_GGML_Q4_K);
  g_assert_false (hn_ggml_type_from_name ("q4_2", &ty));
  g_assert_false (hn_ggml_type_is_known (4));
}

/* ---- against llama.cpp's own code (tests/fixtures/gguf/make_quant_fixtures.py) ---- */

static HnGguf *
open_reference (void)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  g_autofree char *path = g_build_filename (src ? src : ".", "tests", "fixtures", "gguf", "quants-ref.gguf", NULL);
  g_autoptr (GError) error = NULL;
  HnGguf *g = hn_gguf_open (path, &error);
  g_assert_no_error (error);
  return g;
}

static float *
ref_f32 (HnGguf *g, const char *name, gint64 *n)
{
  const HnGgufTensor *t = hn_gguf_find_tensor (g, name);
  if (!t)
    g_error ("reference tensor %s is missing", name);
  float *f = g_new (float, t->n_elements);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_tensor_to_f32 (g, t, f, &error));
  *n = t->n_elements;
  return f;
}

/* Our dequantizers give gguf-py's quants.py values for random blocks. */
static void
test_dequant_reference (void)
{
  g_autoptr (HnGguf) g = open_reference ();
  const char *types[] = { "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16", "F16" };
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autofree char *bn = g_strdup_printf ("blocks.%s", types[i]);
      g_autofree char *dn = g_strdup_printf ("deq.%s", types[i]);
      gint64 n = 0, nref = 0;
      g_autofree float *ours = ref_f32 (g, bn, &n); /* dequantized by the code under test */
      g_autofree float *want = ref_f32 (g, dn, &nref);
      g_assert_cmpint (n, ==, nref);
      g_assert_cmpint (n, >=, 256);
      gint64 exact = 0;
      for (gint64 k = 0; k < n; k++)
        {
          /* numpy may order a product differently: allow 1 ulp */
          if (ours[k] == want[k])
            exact++;
          else if (fabsf (ours[k] - want[k]) > 1.2e-7f * fabsf (want[k]))
            g_error ("%s element %" G_GINT64_FORMAT ": %.9g, quants.py %.9g", types[i], k, ours[k], want[k]);
        }
      g_test_message ("%s: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " values bit-identical", types[i], exact, n);
    }
}

static void
check_quantizer (HnGgmlType type, const float *src, gint64 n, const HnGgufTensor *want, const char *what)
{
  g_autoptr (GError) error = NULL;
  g_assert_cmpint (want->type, ==, type);
  g_assert_cmpint (want->n_elements, ==, n);
  g_autofree guint8 *q = g_malloc (want->nbytes);
  g_assert_true (hn_ggml_quantize (type, src, q, n, &error));
  gsize bs = hn_ggml_type_size (type), nb = want->nbytes / bs, diff = 0;
  for (gsize b = 0; b < nb; b++)
    if (memcmp (q + b * bs, (const guint8 *) want->data + b * bs, bs) != 0)
      diff++;
  if (diff)
    g_error ("%s %s: %zu of %zu blocks differ from the reference bytes", what, hn_ggml_type_name (type), diff, nb);
}

/* Our quantizers write quants.py's bytes for given floats, and
 * llama-quantize's (ggml's quantize_row_*_ref) for real weight rows. */
static void
test_quant_reference (void)
{
  g_autoptr (HnGguf) g = open_reference ();
  gint64 n = 0;
  g_autofree float *src = ref_f32 (g, "qsrc", &n);
  const HnGgmlType qp[] = { HN_GGML_Q8_0, HN_GGML_Q4_0, HN_GGML_BF16, HN_GGML_F16 };
  for (guint i = 0; i < G_N_ELEMENTS (qp); i++)
    {
      g_autofree char *name = g_strdup_printf ("quant.%s", hn_ggml_type_name (qp[i]));
      const HnGgufTensor *t = hn_gguf_find_tensor (g, name);
      g_assert_nonnull (t);
      check_quantizer (qp[i], src, n, t, "quants.py");
    }
  gint64 nl = 0;
  g_autofree float *rows = ref_f32 (g, "lq.src", &nl);
  const HnGgmlType lq[] = { HN_GGML_Q4_K, HN_GGML_Q6_K, HN_GGML_Q8_0, HN_GGML_Q4_0 };
  for (guint i = 0; i < G_N_ELEMENTS (lq); i++)
    {
      g_autofree char *name = g_strdup_printf ("lq.%s", hn_ggml_type_name (lq[i]));
      const HnGgufTensor *t = hn_gguf_find_tensor (g, name);
      g_assert_nonnull (t);
      check_quantizer (lq[i], rows, nl, t, "llama-quantize");
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmp_dir = g_dir_make_tmp ("hn-gguf-XXXXXX", NULL);
  g_test_add_func ("/gguf/hand-built", test_hand_built);
  g_test_add_func ("/gguf/truncated", test_truncated);
  g_test_add_func ("/gguf/damaged", test_damaged);
  g_test_add_func ("/gguf/round-trip", test_round_trip);
  g_test_add_func ("/gguf/quant-by-hand", test_quant_by_hand);
  g_test_add_func ("/gguf/dequant-reference", test_dequant_reference);
  g_test_add_func ("/gguf/quant-reference", test_quant_reference);
  int rc = g_test_run ();
  g_rmdir (tmp_dir);
  g_free (tmp_dir);
  return rc;
}
