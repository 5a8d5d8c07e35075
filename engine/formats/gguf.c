#include "formats/gguf.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/writer-tensors.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
/* A key or string longer than this is a corrupt length, not a real value
 * (the longest real strings are chat templates of tens of kilobytes). */
#define MAX_STRING (256u << 20)
#define MAX_KEY 65535u

static const char *const value_type_names[HN_GGUF_N_VALUE_TYPES] = {
  "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64",
  "float64",
};

static const guint value_type_sizes[HN_GGUF_N_VALUE_TYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

const char *
hn_gguf_value_type_name (HnGgufValueType t)
{
  return (guint) t < HN_GGUF_N_VALUE_TYPES ? value_type_names[t] : "?";
}

/* ---------------------------------------------------------------- reader */

struct _HnGguf {
  char *path;
  GMappedFile *map;   /* or NULL when read from memory */
  guint8 *copy;       /* the bytes when read from memory */
  const guint8 *base;
  gsize len;
  guint32 version, alignment;
  GPtrArray *kvs;     /* HnGgufKv* */
  GHashTable *kv_by_key;
  GArray *tensors;    /* HnGgufTensor */
  GHashTable *tensor_by_name; /* name -> index + 1 */
  GStringChunk *strings;
};

typedef struct {
  const guint8 *p, *end;
  const char *file;
  GError **error;
} Rd;

static gboolean
fail (Rd *r, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static gboolean
fail (Rd *r, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (r->error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s", r->file, msg);
  return FALSE;
}

static gsize
left (const Rd *r)
{
  return (gsize) (r->end - r->p);
}

static gboolean
rd_bytes (Rd *r, void *out, gsize n, const char *what)
{
  if (left (r) < n)
    return fail (r, "truncated while reading %s", what);
  memcpy (out, r->p, n);
  r->p += n;
  return TRUE;
}

static gboolean
rd_u32 (Rd *r, guint32 *v, const char *what)
{
  guint8 b[4] = { 0 };
  if (!rd_bytes (r, b, 4, what))
    return FALSE;
  *v = b[0] | (b[1] << 8) | (b[2] << 16) | ((guint32) b[3] << 24);
  return TRUE;
}

static gboolean
rd_u64 (Rd *r, guint64 *v, const char *what)
{
  guint8 b[8] = { 0 };
  if (!rd_bytes (r, b, 8, what))
    return FALSE;
  *v = 0;
  for (int i = 7; i >= 0; i--)
    *v = (*v << 8) | b[i];
  return TRUE;
}

/* A string into the chunk (NUL-terminated); NUL bytes inside are refused
 * because every consumer treats these as C strings. */
static gboolean
rd_string (Rd *r, GStringChunk *chunk, guint64 max, const char **out, const char *what)
{
  guint64 n;
  if (!rd_u64 (r, &n, what))
    return FALSE;
  if (n > max || n > left (r))
    return fail (r, "%s has length %" G_GUINT64_FORMAT ", past %s", what, n,
                 n > left (r) ? "the end of the file" : "the limit");
  if (memchr (r->p, 0, (gsize) n))
    return fail (r, "%s holds a NUL byte", what);
  *out = g_string_chunk_insert_len (chunk, (const char *) r->p, (gssize) n);
  r->p += n;
  return TRUE;
}

static gint64
raw_int (const guint8 *p, HnGgufValueType t)
{
  switch (t)
    {
    case HN_GGUF_UINT8: case HN_GGUF_BOOL: return p[0];
    case HN_GGUF_INT8: return (gint8) p[0];
    case HN_GGUF_UINT16: return (guint16) (p[0] | (p[1] << 8));
    case HN_GGUF_INT16: return (gint16) (p[0] | (p[1] << 8));
    case HN_GGUF_UINT32: case HN_GGUF_INT32:
      {
        guint32 u = p[0] | (p[1] << 8) | (p[2] << 16) | ((guint32) p[3] << 24);
        return t == HN_GGUF_INT32 ? (gint64) (gint32) u : (gint64) u;
      }
    case HN_GGUF_UINT64: case HN_GGUF_INT64:
      {
        guint64 u = 0;
        for (int i = 7; i >= 0; i--)
          u = (u << 8) | p[i];
        return (gint64) u; /* uint64 above INT64_MAX wraps; callers check ranges */
      }
    default:
      return 0;
    }
}

static double
raw_float (const guint8 *p, HnGgufValueType t)
{
  if (t == HN_GGUF_FLOAT32)
    {
      float f;
      memcpy (&f, p, 4);
      return f;
    }
  if (t == HN_GGUF_FLOAT64)
    {
      double d;
      memcpy (&d, p, 8);
      return d;
    }
  return (double) raw_int (p, t);
}

static gboolean
is_int_type (HnGgufValueType t)
{
  return t <= HN_GGUF_INT32 || t == HN_GGUF_UINT64 || t == HN_GGUF_INT64;
}

static gboolean
read_kv (Rd *r, HnGguf *g, guint idx)
{
  g_autofree char *what = g_strdup_printf ("the key of metadata entry %u", idx);
  const char *key;
  if (!rd_string (r, g->strings, MAX_KEY, &key, what))
    return FALSE;
  if (!*key)
    return fail (r, "metadata entry %u has an empty key", idx);
  if (g_hash_table_contains (g->kv_by_key, key))
    return fail (r, "metadata key '%s' appears twice", key);
  HnGgufKv *kv = g_new0 (HnGgufKv, 1);
  kv->key = key;
  g_ptr_array_add (g->kvs, kv);
  g_hash_table_insert (g->kv_by_key, (char *) key, kv);
  guint32 t;
  if (!rd_u32 (r, &t, key))
    return FALSE;
  if (t >= HN_GGUF_N_VALUE_TYPES)
    return fail (r, "metadata '%s' has unknown value type %u", key, t);
  kv->type = t;
  kv->n = 1;
  if (t == HN_GGUF_STRING)
    return rd_string (r, g->strings, MAX_STRING, &kv->str, key);
  if (t != HN_GGUF_ARRAY)
    {
      guint8 b[8] = { 0 };
      if (!rd_bytes (r, b, value_type_sizes[t], key))
        return FALSE;
      if (t == HN_GGUF_BOOL && b[0] > 1)
        return fail (r, "metadata '%s' is a bool of value %u", key, b[0]);
      if (t == HN_GGUF_FLOAT32 || t == HN_GGUF_FLOAT64)
        kv->v.f = raw_float (b, t);
      else if (t == HN_GGUF_UINT64 || t == HN_GGUF_UINT8 || t == HN_GGUF_UINT16 || t == HN_GGUF_UINT32
               || t == HN_GGUF_BOOL)
        kv->v.u = (guint64) raw_int (b, t);
      else
        kv->v.i = raw_int (b, t);
      return TRUE;
    }
  guint32 et;
  guint64 n;
  if (!rd_u32 (r, &et, key) || !rd_u64 (r, &n, key))
    return FALSE;
  if (et >= HN_GGUF_N_VALUE_TYPES)
    return fail (r, "metadata array '%s' has unknown element type %u", key, et);
  if (et == HN_GGUF_ARRAY)
    return fail (r, "metadata '%s' is an array of arrays, which GGUF readers do not support", key);
  kv->elem_type = et;
  kv->n = n;
  if (et == HN_GGUF_STRING)
    {
      /* every string takes at least its 8-byte length */
      if (n > left (r) / 8)
        return fail (r, "metadata array '%s' has %" G_GUINT64_FORMAT " strings, more than the file holds", key, n);
      const char **strs = g_new (const char *, n + 1);
      kv->strs = strs;
      strs[n] = NULL;
      for (guint64 i = 0; i < n; i++)
        {
          g_autofree char *w = g_strdup_printf ("%s[%" G_GUINT64_FORMAT "]", key, i);
          if (!rd_string (r, g->strings, MAX_STRING, &strs[i], w))
            {
              for (guint64 k = i; k <= n; k++)
                strs[k] = NULL;
              return FALSE;
            }
        }
      return TRUE;
    }
  const guint es = value_type_sizes[et];
  if (n > left (r) / es)
    return fail (r, "metadata array '%s' has %" G_GUINT64_FORMAT " elements, more than the file holds", key, n);
  kv->raw = r->p;
  if (et == HN_GGUF_BOOL)
    for (guint64 i = 0; i < n; i++)
      if (r->p[i] > 1)
        return fail (r, "metadata '%s'[%" G_GUINT64_FORMAT "] is a bool of value %u", key, i, r->p[i]);
  r->p += n * es;
  return TRUE;
}

static void
kv_free (gpointer p)
{
  HnGgufKv *kv = p;
  g_free ((gpointer) kv->strs);
  g_free (kv);
}

void
hn_gguf_free (HnGguf *g)
{
  if (!g)
    return;
  g_free (g->path);
  if (g->map)
    g_mapped_file_unref (g->map);
  g_free (g->copy);
  g_ptr_array_unref (g->kvs);
  g_hash_table_unref (g->kv_by_key);
  g_array_unref (g->tensors);
  g_hash_table_unref (g->tensor_by_name);
  g_string_chunk_free (g->strings);
  g_free (g);
}

static gint
tensor_offset_cmp (gconstpointer a, gconstpointer b)
{
  const HnGgufTensor *x = *(HnGgufTensor *const *) a, *y = *(HnGgufTensor *const *) b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static gboolean
parse (HnGguf *g, GError **error)
{
  Rd r = { g->base, g->base + g->len, g->path, error };
  char magic[4];
  if (g->len < 4 || memcmp (g->base, GGUF_MAGIC, 4) != 0)
    return fail (&r, "not a GGUF file (no 'GGUF' magic)");
  rd_bytes (&r, magic, 4, "magic");
  if (!rd_u32 (&r, &g->version, "the version"))
    return FALSE;
  if (g->version == 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: GGUF version 1 is not supported (convert it with a "
                   "current llama.cpp)", g->path);
      return FALSE;
    }
  if ((g->version & 0xFFFF) == 0 && g->version != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", g->path);
      return FALSE;
    }
  if (g->version != 2 && g->version != 3)
    return fail (&r, "unknown GGUF version %u (2 and 3 are read)", g->version);
  guint64 n_tensors, n_kv;
  if (!rd_u64 (&r, &n_tensors, "the tensor count") || !rd_u64 (&r, &n_kv, "the metadata count"))
    return FALSE;
  /* A metadata entry takes at least 8 + 1 + 4 + 1 bytes, a tensor info 8 +
   * 1 + 4 + 8 + 4 + 8: counts beyond what the file can hold are corrupt. */
  if (n_kv > left (&r) / 14)
    return fail (&r, "metadata count %" G_GUINT64_FORMAT " is more than the file can hold", n_kv);
  for (guint64 i = 0; i < n_kv; i++)
    if (!read_kv (&r, g, (guint) i))
      return FALSE;
  if (n_tensors > left (&r) / 33)
    return fail (&r, "tensor count %" G_GUINT64_FORMAT " is more than the file can hold", n_tensors);

  g->alignment = HN_GGUF_DEFAULT_ALIGNMENT;
  const HnGgufKv *al = g_hash_table_lookup (g->kv_by_key, "general.alignment");
  if (al)
    {
      if (al->type != HN_GGUF_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) != 0 || al->v.u > (1u << 20))
        return fail (&r, "general.alignment must be a uint32 power of two (at most 1 MiB)");
      g->alignment = (guint32) al->v.u;
    }

  for (guint64 i = 0; i < n_tensors; i++)
    {
      HnGgufTensor t = { 0 };
      g_autofree char *what = g_strdup_printf ("the name of tensor %" G_GUINT64_FORMAT, i);
      if (!rd_string (&r, g->strings, MAX_KEY, &t.name, what))
        return FALSE;
      if (!*t.name)
        return fail (&r, "tensor %" G_GUINT64_FORMAT " has an empty name", i);
      if (strlen (t.name) > HN_GGUF_MAX_NAME)
        return fail (&r, "tensor name '%s' is longer than %d bytes", t.name, HN_GGUF_MAX_NAME);
      if (g_hash_table_contains (g->tensor_by_name, t.name))
        return fail (&r, "tensor '%s' appears twice", t.name);
      guint32 nd, type;
      if (!rd_u32 (&r, &nd, t.name))
        return FALSE;
      if (nd == 0 || nd > HN_GGUF_MAX_DIMS)
        return fail (&r, "tensor '%s' has %u dimensions (1 to %d are valid)", t.name, nd, HN_GGUF_MAX_DIMS);
      t.n_dims = nd;
      for (guint d = 0; d < HN_GGUF_MAX_DIMS; d++)
        t.ne[d] = 1;
      t.n_elements = 1;
      for (guint d = 0; d < nd; d++)
        {
          guint64 ne;
          if (!rd_u64 (&r, &ne, t.name))
            return FALSE;
          if (ne > G_MAXINT64 || (ne > 0 && (guint64) t.n_elements > (guint64) G_MAXINT64 / ne))
            return fail (&r, "tensor '%s' has an impossible size (dimension %u is %" G_GUINT64_FORMAT ")", t.name, d,
                         ne);
          t.ne[d] = (gint64) ne;
          t.n_elements *= (gint64) ne;
        }
      if (!rd_u32 (&r, &type, t.name) || !rd_u64 (&r, &t.offset, t.name))
        return FALSE;
      if (!hn_ggml_type_is_known (type))
        return fail (&r, "tensor '%s' has unknown type %u", t.name, type);
      t.type = type;
      const guint bs = hn_ggml_block_size (t.type);
      if (t.ne[0] % bs != 0)
        return fail (&r, "tensor '%s' (%s) has rows of %" G_GINT64_FORMAT " elements, not a multiple of its %u-element "
                     "blocks", t.name, hn_ggml_type_name (t.type), t.ne[0], bs);
      guint64 nbytes = (guint64) (t.n_elements / bs) * hn_ggml_type_size (t.type);
      if (t.n_elements / bs > 0 && nbytes / hn_ggml_type_size (t.type) != (guint64) (t.n_elements / bs))
        return fail (&r, "tensor '%s' has an impossible size", t.name);
      t.nbytes = (gsize) nbytes;
      if (t.offset % g->alignment != 0)
        return fail (&r, "tensor '%s' has offset %" G_GUINT64_FORMAT ", not a multiple of the alignment %u", t.name,
                     t.offset, g->alignment);
      g_array_append_val (g->tensors, t);
      g_hash_table_insert (g->tensor_by_name, (char *) t.name, GUINT_TO_POINTER (g->tensors->len));
    }

  gsize header_end = (gsize) (r.p - g->base);
  gsize data_start = (header_end + g->alignment - 1) / g->alignment * g->alignment;
  if (n_tensors > 0 && data_start > g->len)
    return fail (&r, "the data section starts past the end of the file");
  gsize data_len = data_start <= g->len ? g->len - data_start : 0;
  g_autoptr (GPtrArray) order = g_ptr_array_new ();
  for (guint i = 0; i < g->tensors->len; i++)
    {
      HnGgufTensor *t = &g_array_index (g->tensors, HnGgufTensor, i);
      if (t->offset > data_len || t->nbytes > data_len - t->offset)
        return fail (&r, "tensor '%s' (%" G_GSIZE_FORMAT " bytes at data offset %" G_GUINT64_FORMAT ") runs past the "
                     "end of the file", t->name, t->nbytes, t->offset);
      t->data = g->base + data_start + t->offset;
      g_ptr_array_add (order, t);
    }
  g_ptr_array_sort (order, tensor_offset_cmp);
  for (guint i = 1; i < order->len; i++)
    {
      const HnGgufTensor *a = order->pdata[i - 1], *b = order->pdata[i];
      if (a->offset + a->nbytes > b->offset && a->nbytes > 0 && b->nbytes > 0)
        return fail (&r, "tensors '%s' and '%s' overlap", a->name, b->name);
    }
  return TRUE;
}

static HnGguf *
gguf_new (const char *path)
{
  HnGguf *g = g_new0 (HnGguf, 1);
  g->path = g_strdup (path);
  g->kvs = g_ptr_array_new_with_free_func (kv_free);
  g->kv_by_key = g_hash_table_new (g_str_hash, g_str_equal);
  g->tensors = g_array_new (FALSE, TRUE, sizeof (HnGgufTensor));
  g->tensor_by_name = g_hash_table_new (g_str_hash, g_str_equal);
  g->strings = g_string_chunk_new (4096);
  return g;
}

/* The one .gguf of a folder (an error for none or several). */
static char *
find_in_dir (const char *dir, GError **error)
{
  g_autoptr (GError) e = NULL;
  g_autoptr (GDir) d = g_dir_open (dir, 0, &e);
  if (!d)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "%s: %s", dir, e->message);
      return NULL;
    }
  g_autoptr (GPtrArray) found = g_ptr_array_new_with_free_func (g_free);
  const char *n;
  while ((n = g_dir_read_name (d)))
    if (g_str_has_suffix (n, ".gguf"))
      g_ptr_array_add (found, g_strdup (n));
  if (found->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: no .gguf file in this folder", dir);
      return NULL;
    }
  if (found->len > 1)
    {
      g_ptr_array_sort (found, (GCompareFunc) g_strcmp0);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %u .gguf files (%s, %s, ...); name one with "
                   "--model-path", dir, found->len, (char *) found->pdata[0], (char *) found->pdata[1]);
      return NULL;
    }
  return g_build_filename (dir, found->pdata[0], NULL);
}

static gboolean
check_not_split (HnGguf *g, GError **error)
{
  gint64 count = 1;
  if (!hn_gguf_get_int (g, "split.count", &count, error) && error && *error)
    return FALSE;
  if (count > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: split GGUF models (split.count %" G_GINT64_FORMAT ") "
                   "are not supported; merge them with llama-gguf-split --merge", g->path, count);
      return FALSE;
    }
  return TRUE;
}

HnGguf *
hn_gguf_open (const char *path, GError **error)
{
  g_autofree char *file = NULL;
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      if (!(file = find_in_dir (path, error)))
        return NULL;
    }
  else
    file = g_strdup (path);
  g_autoptr (GError) e = NULL;
  GMappedFile *map = g_mapped_file_new (file, FALSE, &e);
  if (!map)
    {
      g_set_error (error, HN_ERROR, g_error_matches (e, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND
                   : HN_ERROR_IO, "%s: %s", file, e->message);
      return NULL;
    }
  g_autoptr (HnGguf) g = gguf_new (file);
  g->map = map;
  g->base = (const guint8 *) g_mapped_file_get_contents (map);
  g->len = g_mapped_file_get_length (map);
  if (!parse (g, error) || !check_not_split (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

HnGguf *
hn_gguf_open_from_data (const void *data, gsize len, const char *name, GError **error)
{
  g_autoptr (HnGguf) g = gguf_new (name);
  /* g_malloc returns memory aligned for any type, like a mapping is. */
  g->copy = g_malloc (MAX (len, 1));
  memcpy (g->copy, data, len);
  g->base = g->copy;
  g->len = len;
  if (!parse (g, error) || !check_not_split (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

const char *hn_gguf_get_path (HnGguf *g) { return g->path; }
guint32 hn_gguf_get_version (HnGguf *g) { return g->version; }
guint32 hn_gguf_get_alignment (HnGguf *g) { return g->alignment; }
guint hn_gguf_get_n_kv (HnGguf *g) { return g->kvs->len; }

const HnGgufKv *
hn_gguf_get_kv (HnGguf *g, guint i)
{
  g_return_val_if_fail (i < g->kvs->len, NULL);
  return g->kvs->pdata[i];
}

const HnGgufKv *
hn_gguf_find (HnGguf *g, const char *key)
{
  return g_hash_table_lookup (g->kv_by_key, key);
}

static gboolean
wrong_type (HnGguf *g, const HnGgufKv *kv, const char *want, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: metadata '%s' is a%s %s, expected %s", g->path, kv->key,
               kv->type == HN_GGUF_ARRAY || kv->type == HN_GGUF_INT8 || kv->type == HN_GGUF_INT16
               || kv->type == HN_GGUF_INT32 || kv->type == HN_GGUF_INT64 ? "n" : "",
               hn_gguf_value_type_name (kv->type), want);
  return FALSE;
}

gboolean
hn_gguf_get_int (HnGguf *g, const char *key, gint64 *out, GError **error)
{
  const HnGgufKv *kv = hn_gguf_find (g, key);
  if (!kv)
    return FALSE;
  if (!is_int_type (kv->type))
    return wrong_type (g, kv, "an integer", error);
  if (kv->type == HN_GGUF_UINT64 && kv->v.u > (guint64) G_MAXINT64)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: metadata '%s' is out of range", g->path, key);
      return FALSE;
    }
  *out = (kv->type == HN_GGUF_UINT8 || kv->type == HN_GGUF_UINT16 || kv->type == HN_GGUF_UINT32
          || kv->type == HN_GGUF_UINT64) ? (gint64) kv->v.u : kv->v.i;
  return TRUE;
}

gboolean
hn_gguf_get_float (HnGguf *g, const char *key, double *out, GError **error)
{
  const HnGgufKv *kv = hn_gguf_find (g, key);
  if (!kv)
    return FALSE;
  if (kv->type != HN_GGUF_FLOAT32 && kv->type != HN_GGUF_FLOAT64)
    return wrong_type (g, kv, "a float", error);
  *out = kv->v.f;
  return TRUE;
}

gboolean
hn_gguf_get_bool (HnGguf *g, const char *key, gboolean *out, GError **error)
{
  const HnGgufKv *kv = hn_gguf_find (g, key);
  if (!kv)
    return FALSE;
  if (kv->type != HN_GGUF_BOOL)
    return wrong_type (g, kv, "a bool", error);
  *out = kv->v.u != 0;
  return TRUE;
}

const char *
hn_gguf_get_string (HnGguf *g, const char *key, GError **error)
{
  const HnGgufKv *kv = hn_gguf_find (g, key);
  if (!kv)
    return NULL;
  if (kv->type != HN_GGUF_STRING)
    {
      wrong_type (g, kv, "a string", error);
      return NULL;
    }
  return kv->str;
}

const HnGgufKv *
hn_gguf_get_array (HnGguf *g, const char *key, HnGgufValueType elem, GError **error)
{
  const HnGgufKv *kv = hn_gguf_find (g, key);
  if (!kv)
    return NULL;
  gboolean ok = kv->type == HN_GGUF_ARRAY
                && (elem == HN_GGUF_INT64 ? is_int_type (kv->elem_type)
                    : elem == HN_GGUF_FLOAT64 ? (kv->elem_type == HN_GGUF_FLOAT32 || kv->elem_type == HN_GGUF_FLOAT64)
                    : kv->elem_type == elem);
  if (!ok)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: metadata '%s' is not an array of %s", g->path, key,
                   elem == HN_GGUF_INT64 ? "integers" : elem == HN_GGUF_FLOAT64 ? "floats"
                   : hn_gguf_value_type_name (elem));
      return NULL;
    }
  return kv;
}

gint64
hn_gguf_kv_array_int (const HnGgufKv *kv, guint64 i)
{
  g_return_val_if_fail (kv->raw && i < kv->n, 0);
  return raw_int (kv->raw + i * value_type_sizes[kv->elem_type], kv->elem_type);
}

double
hn_gguf_kv_array_float (const HnGgufKv *kv, guint64 i)
{
  g_return_val_if_fail (kv->raw && i < kv->n, 0);
  return raw_float (kv->raw + i * value_type_sizes[kv->elem_type], kv->elem_type);
}

guint hn_gguf_get_n_tensors (HnGguf *g) { return g->tensors->len; }

const HnGgufTensor *
hn_gguf_get_tensor (HnGguf *g, guint i)
{
  g_return_val_if_fail (i < g->tensors->len, NULL);
  return &g_array_index (g->tensors, HnGgufTensor, i);
}

const HnGgufTensor *
hn_gguf_find_tensor (HnGguf *g, const char *name)
{
  guint i = GPOINTER_TO_UINT (g_hash_table_lookup (g->tensor_by_name, name));
  return i ? &g_array_index (g->tensors, HnGgufTensor, i - 1) : NULL;
}

gboolean
hn_gguf_tensor_to_f32 (HnGguf *g, const HnGgufTensor *t, float *dst, GError **error)
{
  g_autoptr (GError) e = NULL;
  if (!hn_ggml_dequantize (t->type, t->data, dst, t->n_elements, &e))
    {
      g_set_error (error, HN_ERROR, e->code, "%s: tensor '%s': %s", g->path, t->name, e->message);
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- writer */

G_STATIC_ASSERT (HN_GGUF_MAX_DIMS <= HN_WRITER_MAX_DIMS);

typedef struct {
  char *key;
  HnGgufValueType type, elem_type;
  GByteArray *payload; /* the value's bytes as written after the type */
} WKv;

struct _HnGgufWriter {
  GPtrArray *kvs;         /* WKv* */
  HnWriterTensors tensors;
};

static void
wkv_free (gpointer p)
{
  WKv *kv = p;
  g_free (kv->key);
  g_byte_array_unref (kv->payload);
  g_free (kv);
}

HnGgufWriter *
hn_gguf_writer_new (void)
{
  HnGgufWriter *w = g_new0 (HnGgufWriter, 1);
  w->kvs = g_ptr_array_new_with_free_func (wkv_free);
  hn_writer_tensors_init (&w->tensors);
  return w;
}

void
hn_gguf_writer_free (HnGgufWriter *w)
{
  if (!w)
    return;
  hn_writer_tensors_clear (&w->tensors);
  g_ptr_array_unref (w->kvs);
  g_free (w);
}

static void
put_u32 (GByteArray *b, guint32 v)
{
  guint8 x[4] = { (guint8) v, (guint8) (v >> 8), (guint8) (v >> 16), (guint8) (v >> 24) };
  g_byte_array_append (b, x, 4);
}

static void
put_u64 (GByteArray *b, guint64 v)
{
  guint8 x[8];
  for (int i = 0; i < 8; i++)
    x[i] = (guint8) (v >> (8 * i));
  g_byte_array_append (b, x, 8);
}

static void
put_str (GByteArray *b, const char *s)
{
  gsize n = strlen (s);
  put_u64 (b, n);
  g_byte_array_append (b, (const guint8 *) s, (guint) n);
}

/* The entry for key, replaced in place when it exists. */
static WKv *
set_kv (HnGgufWriter *w, const char *key, HnGgufValueType type, HnGgufValueType elem)
{
  WKv *kv = NULL;
  for (guint i = 0; i < w->kvs->len && !kv; i++)
    if (g_str_equal (((WKv *) w->kvs->pdata[i])->key, key))
      kv = w->kvs->pdata[i];
  if (!kv)
    {
      kv = g_new0 (WKv, 1);
      kv->key = g_strdup (key);
      kv->payload = g_byte_array_new ();
      g_ptr_array_add (w->kvs, kv);
    }
  g_byte_array_set_size (kv->payload, 0);
  kv->type = type;
  kv->elem_type = elem;
  return kv;
}

void
hn_gguf_writer_set_u32 (HnGgufWriter *w, const char *key, guint32 v)
{
  put_u32 (set_kv (w, key, HN_GGUF_UINT32, 0)->payload, v);
}

void
hn_gguf_writer_set_i32 (HnGgufWriter *w, const char *key, gint32 v)
{
  put_u32 (set_kv (w, key, HN_GGUF_INT32, 0)->payload, (guint32) v);
}

void
hn_gguf_writer_set_u64 (HnGgufWriter *w, const char *key, guint64 v)
{
  put_u64 (set_kv (w, key, HN_GGUF_UINT64, 0)->payload, v);
}

void
hn_gguf_writer_set_f32 (HnGgufWriter *w, const char *key, float v)
{
  guint32 u;
  memcpy (&u, &v, 4);
  put_u32 (set_kv (w, key, HN_GGUF_FLOAT32, 0)->payload, u);
}

void
hn_gguf_writer_set_bool (HnGgufWriter *w, const char *key, gboolean v)
{
  guint8 b = v ? 1 : 0;
  g_byte_array_append (set_kv (w, key, HN_GGUF_BOOL, 0)->payload, &b, 1);
}

void
hn_gguf_writer_set_string (HnGgufWriter *w, const char *key, const char *v)
{
  put_str (set_kv (w, key, HN_GGUF_STRING, 0)->payload, v);
}

void
hn_gguf_writer_set_string_array (HnGgufWriter *w, const char *key, const char *const *v, gsize n)
{
  GByteArray *b = set_kv (w, key, HN_GGUF_ARRAY, HN_GGUF_STRING)->payload;
  put_u32 (b, HN_GGUF_STRING);
  put_u64 (b, n);
  for (gsize i = 0; i < n; i++)
    put_str (b, v[i]);
}

void
hn_gguf_writer_set_i32_array (HnGgufWriter *w, const char *key, const gint32 *v, gsize n)
{
  GByteArray *b = set_kv (w, key, HN_GGUF_ARRAY, HN_GGUF_INT32)->payload;
  put_u32 (b, HN_GGUF_INT32);
  put_u64 (b, n);
  for (gsize i = 0; i < n; i++)
    put_u32 (b, (guint32) v[i]);
}

void
hn_gguf_writer_set_f32_array (HnGgufWriter *w, const char *key, const float *v, gsize n)
{
  GByteArray *b = set_kv (w, key, HN_GGUF_ARRAY, HN_GGUF_FLOAT32)->payload;
  put_u32 (b, HN_GGUF_FLOAT32);
  put_u64 (b, n);
  for (gsize i = 0; i < n; i++)
    {
      guint32 u;
      memcpy (&u, &v[i], 4);
      put_u32 (b, u);
    }
}

static gboolean
add_tensor (HnGgufWriter *w, const char *name, HnGgmlType type, guint n_dims, const gint64 *ne, const void *data,
            gsize nbytes, gpointer owned, GError **error)
{
  const char *problem = NULL;
  gint64 n = 1;
  if (!name || !*name || strlen (name) > HN_GGUF_MAX_NAME)
    problem = "its name is empty or longer than 63 bytes";
  else if (hn_writer_tensors_contains (&w->tensors, name))
    problem = "a tensor of that name was already added";
  else if (!hn_ggml_type_is_known ((guint32) type))
    problem = "its type is unknown";
  else if (n_dims == 0 || n_dims > HN_GGUF_MAX_DIMS)
    problem = "it needs 1 to 4 dimensions";
  else
    {
      for (guint d = 0; d < n_dims; d++)
        {
          if (ne[d] < 0 || (ne[d] > 0 && n > G_MAXINT64 / ne[d]))
            problem = "a dimension is negative or the size overflows";
          else
            n *= ne[d];
        }
      if (!problem && ne[0] % hn_ggml_block_size (type) != 0)
        problem = "its row length is not a multiple of the type's block size";
      else if (!problem && nbytes != hn_ggml_row_size (type, ne[0]) * (gsize) (ne[0] ? n / ne[0] : 0)
               && !(ne[0] == 0 && nbytes == 0))
        problem = "the byte size does not match the shape";
    }
  if (problem)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "GGUF tensor '%s': %s", name ? name : "(null)", problem);
      g_free (owned);
      return FALSE;
    }
  hn_writer_tensors_add (&w->tensors, name, type, n_dims, ne, data, nbytes, owned);
  return TRUE;
}

gboolean
hn_gguf_writer_add_tensor (HnGgufWriter *w, const char *name, HnGgmlType type, guint n_dims, const gint64 *ne,
                           const void *data, gsize nbytes, gboolean copy, GError **error)
{
  gpointer owned = copy ? g_memdup2 (data, nbytes) : NULL;
  return add_tensor (w, name, type, n_dims, ne, copy ? owned : data, nbytes, owned, error);
}

gboolean
hn_gguf_writer_add_tensor_take (HnGgufWriter *w, const char *name, HnGgmlType type, guint n_dims, const gint64 *ne,
                                void *data, gsize nbytes, GError **error)
{
  return add_tensor (w, name, type, n_dims, ne, data, nbytes, data, error);
}

gboolean
hn_gguf_writer_write (HnGgufWriter *w, const char *path, GError **error)
{
  guint32 alignment = HN_GGUF_DEFAULT_ALIGNMENT;
  for (guint i = 0; i < w->kvs->len; i++)
    {
      WKv *kv = w->kvs->pdata[i];
      if (g_str_equal (kv->key, "general.alignment"))
        {
          const guint8 *p = kv->payload->data;
          guint32 a = kv->type == HN_GGUF_UINT32 ? (p[0] | (p[1] << 8) | (p[2] << 16) | ((guint32) p[3] << 24)) : 0;
          if (a == 0 || (a & (a - 1)) != 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: general.alignment must be a uint32 power "
                           "of two", path);
              return FALSE;
            }
          alignment = a;
        }
    }
  g_autoptr (GByteArray) h = g_byte_array_new ();
  g_byte_array_append (h, (const guint8 *) GGUF_MAGIC, 4);
  put_u32 (h, 3);
  put_u64 (h, w->tensors.list->len);
  put_u64 (h, w->kvs->len);
  for (guint i = 0; i < w->kvs->len; i++)
    {
      WKv *kv = w->kvs->pdata[i];
      put_str (h, kv->key);
      put_u32 (h, kv->type);
      g_byte_array_append (h, kv->payload->data, kv->payload->len);
    }
  guint64 off = 0;
  for (guint i = 0; i < w->tensors.list->len; i++)
    {
      const HnWriterTensor *t = w->tensors.list->pdata[i];
      put_str (h, t->name);
      put_u32 (h, t->ndim);
      for (guint d = 0; d < t->ndim; d++)
        put_u64 (h, (guint64) t->shape[d]);
      put_u32 (h, (guint32) t->type);
      put_u64 (h, off);
      off += (t->nbytes + alignment - 1) / alignment * alignment;
    }
  static const guint8 zeros[64] = { 0 };
  while (h->len % alignment != 0)
    g_byte_array_append (h, zeros, MIN (sizeof zeros, alignment - h->len % alignment));

  g_autofree char *tmp = NULL;
  int fd = hn_fd_begin_tmp (path, &tmp, error);
  if (fd < 0)
    return FALSE;
  gboolean ok = hn_fd_write_all (fd, h->data, h->len, path, error);
  for (guint i = 0; ok && i < w->tensors.list->len; i++)
    {
      const HnWriterTensor *t = w->tensors.list->pdata[i];
      ok = hn_fd_write_all (fd, t->data, t->nbytes, path, error);
      for (gsize pad = (alignment - t->nbytes % alignment) % alignment; ok && pad > 0;)
        {
          gsize n = MIN (pad, sizeof zeros);
          ok = hn_fd_write_all (fd, zeros, n, path, error);
          pad -= n;
        }
    }
  return hn_fd_commit_tmp (fd, ok, tmp, path, error);
}
