#include "formats/safetensors.h"
#include "tensor/ggml-quants.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/gguf-hf.h"
#include "formats/writer-tensors.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

/* The Python library refuses headers above 100 MB; so do we, before
 * allocating anything from a length read out of an untrusted file. */
#define HN_ST_MAX_HEADER (100u * 1000u * 1000u)

/* ---------------------------------------------------------------- dtypes */

static const struct {
  const char *name;
  gsize size;
} dtype_table[HN_ST_N_DTYPES] = {
  [HN_ST_DTYPE_BOOL] = { "BOOL", 1 },       [HN_ST_DTYPE_U8] = { "U8", 1 },
  [HN_ST_DTYPE_I8] = { "I8", 1 },           [HN_ST_DTYPE_F8_E5M2] = { "F8_E5M2", 1 },
  [HN_ST_DTYPE_F8_E4M3] = { "F8_E4M3", 1 }, [HN_ST_DTYPE_I16] = { "I16", 2 },
  [HN_ST_DTYPE_U16] = { "U16", 2 },         [HN_ST_DTYPE_F16] = { "F16", 2 },
  [HN_ST_DTYPE_BF16] = { "BF16", 2 },       [HN_ST_DTYPE_I32] = { "I32", 4 },
  [HN_ST_DTYPE_U32] = { "U32", 4 },         [HN_ST_DTYPE_F32] = { "F32", 4 },
  [HN_ST_DTYPE_F64] = { "F64", 8 },         [HN_ST_DTYPE_I64] = { "I64", 8 },
  [HN_ST_DTYPE_U64] = { "U64", 8 },         [HN_ST_DTYPE_GGML] = { "GGML", 0 },
};

gsize
hn_st_dtype_size (HnStDtype dtype)
{
  g_return_val_if_fail ((guint) dtype < HN_ST_N_DTYPES, 0);
  return dtype_table[dtype].size;
}

const char *
hn_st_dtype_name (HnStDtype dtype)
{
  g_return_val_if_fail ((guint) dtype < HN_ST_N_DTYPES, "?");
  return dtype_table[dtype].name;
}

gboolean
hn_st_dtype_from_name (const char *name, HnStDtype *out)
{
  for (guint i = 0; i < HN_ST_DTYPE_GGML; i++)
    if (g_strcmp0 (dtype_table[i].name, name) == 0)
      {
        *out = (HnStDtype) i;
        return TRUE;
      }
  return FALSE;
}

static float
bits_to_f32 (guint32 u)
{
  float f;
  memcpy (&f, &u, 4);
  return f;
}

static guint32
f32_to_bits (float f)
{
  guint32 u;
  memcpy (&u, &f, 4);
  return u;
}

float
hn_st_f16_to_f32 (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000) << 16;
  guint32 exp = (h >> 10) & 0x1f;
  guint32 mant = h & 0x3ff;
  if (exp == 0)
    {
      /* zero or subnormal: mant * 2^-24 */
      float v = (float) mant * (1.0f / 16777216.0f);
      return (sign ? -v : v);
    }
  if (exp == 31)
    return bits_to_f32 (sign | 0x7f800000u | (mant << 13));
  return bits_to_f32 (sign | ((exp + 112) << 23) | (mant << 13));
}

float
hn_st_bf16_to_f32 (guint16 h)
{
  return bits_to_f32 ((guint32) h << 16);
}

guint16
hn_st_f32_to_bf16 (float f)
{
  guint32 u = f32_to_bits (f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (guint16) ((u >> 16) | 0x40); /* quiet NaN, keep sign */
  u += 0x7fffu + ((u >> 16) & 1);        /* round to nearest even */
  return (guint16) (u >> 16);
}

gint64
hn_st_first_nonfinite (HnStDtype dtype, const void *data, gsize n)
{
  const guint8 *p = data;
  for (gsize i = 0; i < n; i++)
    {
      if (dtype == HN_ST_DTYPE_F32)
        {
          guint32 u;
          memcpy (&u, p + 4 * i, 4);
          if ((u & 0x7F800000u) == 0x7F800000u)
            return (gint64) i;
        }
      else if (dtype == HN_ST_DTYPE_F16 || dtype == HN_ST_DTYPE_BF16)
        {
          guint16 h;
          memcpy (&h, p + 2 * i, 2);
          guint16 mask = dtype == HN_ST_DTYPE_F16 ? 0x7C00 : 0x7F80;
          if ((h & mask) == mask)
            return (gint64) i;
        }
      else if (dtype == HN_ST_DTYPE_F64)
        {
          double d;
          memcpy (&d, p + 8 * i, 8);
          if (!isfinite (d))
            return (gint64) i;
        }
      else
        return -1;
    }
  return -1;
}

guint16
hn_st_f32_to_f16 (float f)
{
  guint32 u = f32_to_bits (f);
  guint16 sign = (guint16) ((u >> 16) & 0x8000);
  guint32 absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u)
    return sign | 0x7e00; /* NaN */
  if (absu >= 0x477ff000u)
    return sign | 0x7c00; /* rounds to or above 65520: infinity */
  if (absu < 0x38800000u)
    {
      /* result is subnormal or zero: round |f| * 2^24 to an integer (even) */
      if (absu < 0x33000000u)
        return sign; /* below half the smallest subnormal */
      guint32 e = absu >> 23;
      guint32 m = (absu & 0x7fffff) | 0x800000;
      guint32 shift = 126 - e; /* so that result = m >> (shift) scaled */
      /* value = m * 2^(e-150); subnormal unit = 2^-24 -> q = m * 2^(e-126) */
      guint32 q = m >> shift;
      guint32 rem = m & ((1u << shift) - 1);
      guint32 half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1)))
        q++;
      return sign | (guint16) q;
    }
  /* normal: rebias the exponent and round the mantissa to 10 bits */
  guint32 r = absu + 0xfffu + ((absu >> 13) & 1);
  return sign | (guint16) ((r - 0x38000000u) >> 13);
}

static float
f8_e4m3_to_f32 (guint8 b)
{
  /* E4M3FN: bias 7, no infinities, S.1111.111 is NaN */
  guint32 sign = b & 0x80;
  guint32 exp = (b >> 3) & 0xf;
  guint32 mant = b & 0x7;
  float v;
  if (exp == 15 && mant == 7)
    return NAN;
  if (exp == 0)
    v = (float) mant * (1.0f / 512.0f); /* mant * 2^-9 */
  else
    v = ldexpf (1.0f + (float) mant / 8.0f, (int) exp - 7);
  return sign ? -v : v;
}

/* ---------------------------------------------------------------- reader */

typedef struct {
  char *path;
  GMappedFile *map;
  const guint8 *data; /* start of the data section */
  gsize data_len;
} StFile;

struct _HnSafetensors {
  GPtrArray *files;      /* StFile* */
  GPtrArray *tensors;    /* HnSafetensorInfo*, sorted by name */
  GHashTable *by_name;   /* name -> HnSafetensorInfo* */
  GHashTable *metadata;  /* char* -> char* */
  char **file_names;     /* NULL-terminated, for get_files */
  GPtrArray *owned;      /* memory of tensors built in memory (a GGUF's dequantized weights) */
  gpointer keep;         /* what borrowed tensor data points into, freed last */
  GDestroyNotify keep_free;
};

static void
st_file_free (gpointer p)
{
  StFile *f = p;
  g_free (f->path);
  if (f->map)
    g_mapped_file_unref (f->map);
  g_free (f);
}

static void
info_free (gpointer p)
{
  HnSafetensorInfo *t = p;
  g_free ((char *) t->name);
  g_free (t);
}

void
hn_safetensors_free (HnSafetensors *st)
{
  if (!st)
    return;
  g_hash_table_unref (st->by_name);
  g_ptr_array_unref (st->tensors);
  g_ptr_array_unref (st->files);
  g_hash_table_unref (st->metadata);
  g_strfreev (st->file_names);
  if (st->owned)
    g_ptr_array_unref (st->owned);
  if (st->keep_free)
    st->keep_free (st->keep);
  g_free (st);
}

static gboolean
corrupt (GError **error, const char *file, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static gboolean
corrupt (GError **error, const char *file, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s", file, msg);
  return FALSE;
}

/* A JSON integer >= 0; json-glib keeps integers as gint64. */
static gboolean
node_get_uint (JsonNode *n, guint64 *out)
{
  if (!n || !JSON_NODE_HOLDS_VALUE (n) || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  gint64 v = json_node_get_int (n);
  if (v < 0)
    return FALSE;
  *out = (guint64) v;
  return TRUE;
}

typedef struct {
  HnSafetensorInfo *info;
  guint64 begin, end;
} Span;

static int
span_cmp (gconstpointer a, gconstpointer b)
{
  const Span *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

static gboolean
parse_tensor_entry (const char *file, const char *name, JsonNode *node, const StFile *sf,
                    HnSafetensorInfo **out, guint64 *begin_out, guint64 *end_out, GError **error)
{
  if (!JSON_NODE_HOLDS_OBJECT (node))
    return corrupt (error, file, "tensor '%s': header entry is not a JSON object", name);
  JsonObject *o = json_node_get_object (node);
  JsonNode *dn = json_object_get_member (o, "dtype");
  JsonNode *sn = json_object_get_member (o, "shape");
  JsonNode *on = json_object_get_member (o, "data_offsets");
  if (!dn || !JSON_NODE_HOLDS_VALUE (dn) || json_node_get_value_type (dn) != G_TYPE_STRING)
    return corrupt (error, file, "tensor '%s': missing or non-string \"dtype\"", name);
  if (!sn || !JSON_NODE_HOLDS_ARRAY (sn))
    return corrupt (error, file, "tensor '%s': missing or non-array \"shape\"", name);
  if (!on || !JSON_NODE_HOLDS_ARRAY (on))
    return corrupt (error, file, "tensor '%s': missing or non-array \"data_offsets\"", name);

  HnStDtype dtype;
  const char *dname = json_node_get_string (dn);
  if (!hn_st_dtype_from_name (dname, &dtype))
    return corrupt (error, file, "tensor '%s': unknown dtype \"%s\"", name, dname);

  JsonArray *sa = json_node_get_array (sn);
  guint ndim = json_array_get_length (sa);
  if (ndim > HN_ST_MAX_DIMS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: tensor '%s' has %u dimensions; at most %d are supported", file, name, ndim,
                   HN_ST_MAX_DIMS);
      return FALSE;
    }
  g_autofree HnSafetensorInfo *t = g_new0 (HnSafetensorInfo, 1);
  t->dtype = dtype;
  t->ndim = ndim;
  guint64 nel = 1;
  for (guint i = 0; i < ndim; i++)
    {
      guint64 d;
      if (!node_get_uint (json_array_get_element (sa, i), &d))
        return corrupt (error, file, "tensor '%s': shape[%u] is not a non-negative integer", name, i);
      if (d != 0 && nel > G_MAXINT64 / d)
        return corrupt (error, file, "tensor '%s': shape overflows", name);
      nel *= d;
      t->shape[i] = (gint64) d;
    }
  JsonArray *oa = json_node_get_array (on);
  guint64 begin, end;
  if (json_array_get_length (oa) != 2 || !node_get_uint (json_array_get_element (oa, 0), &begin) ||
      !node_get_uint (json_array_get_element (oa, 1), &end))
    return corrupt (error, file, "tensor '%s': \"data_offsets\" must be two non-negative integers", name);
  if (begin > end)
    return corrupt (error, file, "tensor '%s': data_offsets begin %" G_GUINT64_FORMAT
                    " is after end %" G_GUINT64_FORMAT, name, begin, end);
  if (end > sf->data_len)
    return corrupt (error, file, "tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                    "] run past the end of the data section (%" G_GSIZE_FORMAT " bytes); the file is truncated or the header is wrong",
                    name, begin, end, sf->data_len);
  gsize es = hn_st_dtype_size (dtype);
  if (nel > G_MAXUINT64 / es || nel * es != end - begin)
    return corrupt (error, file, "tensor '%s': shape x dtype %s is %" G_GUINT64_FORMAT
                    " elements but data_offsets span %" G_GUINT64_FORMAT " bytes (size mismatch)",
                    name, dname, nel, end - begin);
  t->n_elements = (gint64) nel;
  t->nbytes = (gsize) (end - begin);
  t->data = sf->data + begin;
  t->file = sf->path;
  t->name = g_strdup (name);
  *begin_out = begin;
  *end_out = end;
  *out = g_steal_pointer (&t);
  return TRUE;
}

/* Maps and validates one file; appends its tensors to st (names must be new). */
static gboolean
load_file (HnSafetensors *st, const char *path, gboolean take_metadata, GError **error)
{
  g_autoptr (GError) local = NULL;
  GMappedFile *map = g_mapped_file_new (path, FALSE, &local);
  if (!map)
    {
      g_set_error (error, HN_ERROR, g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND : HN_ERROR_IO,
                   "cannot open %s: %s", path, local->message);
      return FALSE;
    }
  StFile *sf = g_new0 (StFile, 1);
  sf->path = g_strdup (path);
  sf->map = map;
  g_ptr_array_add (st->files, sf);

  const guint8 *bytes = (const guint8 *) g_mapped_file_get_contents (map);
  gsize size = g_mapped_file_get_length (map);
  if (size < 8)
    return corrupt (error, path, "truncated header: the file is %" G_GSIZE_FORMAT
                    " bytes, shorter than the 8-byte header length", size);
  guint64 hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | bytes[i];
  if (hlen > HN_ST_MAX_HEADER)
    return corrupt (error, path, "header length %" G_GUINT64_FORMAT " exceeds the 100 MB limit", hlen);
  if (hlen > size - 8)
    return corrupt (error, path, "truncated header: header length %" G_GUINT64_FORMAT
                    " runs past the end of the file (%" G_GSIZE_FORMAT " bytes)", hlen, size);
  if (hlen < 2 || bytes[8] != '{')
    return corrupt (error, path, "header is not a JSON object");
  sf->data = bytes + 8 + hlen;
  sf->data_len = size - 8 - (gsize) hlen;

  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  g_autoptr (GError) jerr = NULL;
  if (!hn_json_parser_load (parser, (const char *) bytes + 8, (gssize) hlen, "", &jerr))
    {
      const char *m = jerr->message;
      if (m[0] == ':')
        m++;
      return corrupt (error, path, "header is not valid JSON%s%s", m[0] == ' ' ? ":" : " at ", m);
    }
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    return corrupt (error, path, "header is not a JSON object");
  JsonObject *ro = json_node_get_object (root);
  /* A name written twice would silently take its last entry (json-glib keeps
   * that); the safetensors library refuses such a header, and so do we. */
  g_autofree char *dup = NULL;
  if (hn_json_count_top_members ((const char *) bytes + 8, (gsize) hlen, &dup) != json_object_get_size (ro))
    return dup ? corrupt (error, path, "tensor name '%s' appears more than once in the header", dup)
               : corrupt (error, path, "a tensor name appears more than once in the header");

  g_autoptr (GList) members = json_object_get_members (ro);
  g_autoptr (GArray) spans = g_array_new (FALSE, FALSE, sizeof (Span));
  g_autoptr (GPtrArray) added = g_ptr_array_new ();
  gboolean ok = TRUE;
  for (GList *l = members; l && ok; l = l->next)
    {
      const char *name = l->data;
      JsonNode *node = json_object_get_member (ro, name);
      if (strcmp (name, "__metadata__") == 0)
        {
          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              ok = corrupt (error, path, "__metadata__ is not a JSON object");
              break;
            }
          JsonObject *mo = json_node_get_object (node);
          g_autoptr (GList) keys = json_object_get_members (mo);
          for (GList *k = keys; k; k = k->next)
            {
              JsonNode *v = json_object_get_member (mo, k->data);
              if (!JSON_NODE_HOLDS_VALUE (v) || json_node_get_value_type (v) != G_TYPE_STRING)
                {
                  ok = corrupt (error, path, "__metadata__ value '%s' is not a string", (const char *) k->data);
                  break;
                }
              if (take_metadata)
                g_hash_table_replace (st->metadata, g_strdup (k->data), g_strdup (json_node_get_string (v)));
            }
          continue;
        }
      HnSafetensorInfo *t = NULL;
      Span sp;
      if (!parse_tensor_entry (path, name, node, sf, &t, &sp.begin, &sp.end, error))
        {
          ok = FALSE;
          break;
        }
      HnSafetensorInfo *prev = g_hash_table_lookup (st->by_name, t->name);
      if (prev)
        {
          ok = corrupt (error, path, "tensor '%s' is also in %s (names must be unique across shards)", t->name, prev->file);
          info_free (t);
          break;
        }
      sp.info = t;
      g_array_append_val (spans, sp);
      g_ptr_array_add (st->tensors, t);
      g_hash_table_insert (st->by_name, (char *) t->name, t);
    }
  if (!ok)
    return FALSE;

  g_array_sort (spans, span_cmp);
  for (guint i = 1; i < spans->len; i++)
    {
      const Span *a = &g_array_index (spans, Span, i - 1);
      const Span *b = &g_array_index (spans, Span, i);
      if (b->begin < a->end)
        return corrupt (error, path, "tensors '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                        ") and '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ") overlap",
                        a->info->name, a->begin, a->end, b->info->name, b->begin, b->end);
    }
  return TRUE;
}

static int
info_cmp (gconstpointer a, gconstpointer b)
{
  const HnSafetensorInfo *x = *(HnSafetensorInfo *const *) a;
  const HnSafetensorInfo *y = *(HnSafetensorInfo *const *) b;
  return strcmp (x->name, y->name);
}

/* A shard name from an index must stay inside the model folder. */
static gboolean
is_plain_file_name (const char *s)
{
  return s[0] && s[0] != '.' && !strchr (s, '/') && !strchr (s, '\\');
}

static int
str_ptr_cmp (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static gboolean
load_index (HnSafetensors *st, const char *index_path, GError **error)
{
  g_autofree char *text = NULL;
  gsize text_len = 0;
  g_autoptr (GError) ferr = NULL;
  if (!hn_file_read_bounded (index_path, HN_MAX_CONFIG_BYTES, "safetensors index", &text, &text_len, &ferr))
    {
      g_set_error (error, HN_ERROR, g_error_matches (ferr, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND : HN_ERROR_IO,
                   "cannot read %s: %s", index_path, ferr->message);
      return FALSE;
    }
  g_autoptr (JsonParser) parser = json_parser_new_immutable ();
  if (!hn_json_parser_load (parser, text, (gssize) text_len, index_path, error))
    return FALSE;
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    return corrupt (error, index_path, "not a JSON object");
  JsonObject *ro = json_node_get_object (root);
  JsonNode *wm = json_object_get_member (ro, "weight_map");
  if (!wm || !JSON_NODE_HOLDS_OBJECT (wm))
    return corrupt (error, index_path, "missing \"weight_map\" object");
  JsonObject *wo = json_node_get_object (wm);
  if (json_object_get_size (wo) == 0)
    return corrupt (error, index_path, "\"weight_map\" is empty");

  JsonNode *md = json_object_get_member (ro, "metadata");
  if (md && JSON_NODE_HOLDS_OBJECT (md))
    {
      JsonObject *mo = json_node_get_object (md);
      g_autoptr (GList) keys = json_object_get_members (mo);
      for (GList *k = keys; k; k = k->next)
        {
          JsonNode *v = json_object_get_member (mo, k->data);
          if (!JSON_NODE_HOLDS_VALUE (v))
            continue;
          char *s = NULL;
          if (json_node_get_value_type (v) == G_TYPE_STRING)
            s = g_strdup (json_node_get_string (v));
          else if (json_node_get_value_type (v) == G_TYPE_INT64)
            s = g_strdup_printf ("%" G_GINT64_FORMAT, json_node_get_int (v));
          else if (json_node_get_value_type (v) == G_TYPE_DOUBLE)
            s = g_strdup_printf ("%.17g", json_node_get_double (v));
          if (s)
            g_hash_table_replace (st->metadata, g_strdup (k->data), s);
        }
    }

  g_autofree char *dir = g_path_get_dirname (index_path);
  g_autoptr (GList) names = json_object_get_members (wo);
  g_autoptr (GPtrArray) shards = g_ptr_array_new ();
  g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  for (GList *l = names; l; l = l->next)
    {
      JsonNode *v = json_object_get_member (wo, l->data);
      if (!JSON_NODE_HOLDS_VALUE (v) || json_node_get_value_type (v) != G_TYPE_STRING)
        return corrupt (error, index_path, "weight_map entry '%s' is not a file name string", (const char *) l->data);
      const char *fn = json_node_get_string (v);
      if (!is_plain_file_name (fn))
        return corrupt (error, index_path, "weight_map entry '%s' names \"%s\", which is not a plain file name inside the model folder",
                        (const char *) l->data, fn);
      if (!g_hash_table_contains (seen, fn))
        {
          g_hash_table_add (seen, (char *) fn);
          g_ptr_array_add (shards, (char *) fn);
        }
    }
  g_ptr_array_sort (shards, str_ptr_cmp);
  for (guint i = 0; i < shards->len; i++)
    {
      g_autofree char *p = g_build_filename (dir, (const char *) shards->pdata[i], NULL);
      if (!load_file (st, p, i == 0, error))
        {
          if (error && *error && (*error)->code == HN_ERROR_NOT_FOUND)
            g_prefix_error (error, "%s lists a shard that is missing: ", index_path);
          return FALSE;
        }
    }
  for (GList *l = names; l; l = l->next)
    {
      const char *fn = json_object_get_string_member (wo, l->data);
      HnSafetensorInfo *t = g_hash_table_lookup (st->by_name, l->data);
      if (!t)
        return corrupt (error, index_path, "weight_map maps tensor '%s' to %s, but that file has no such tensor",
                        (const char *) l->data, fn);
      g_autofree char *base = g_path_get_basename (t->file);
      if (strcmp (base, fn) != 0)
        return corrupt (error, index_path, "weight_map maps tensor '%s' to %s, but it is in %s",
                        (const char *) l->data, fn, base);
    }
  return TRUE;
}

static char *
find_in_dir (const char *dir, gboolean *is_index, GError **error)
{
  const char *prefer[] = { "model.safetensors", "model.safetensors.index.json" };
  for (guint i = 0; i < G_N_ELEMENTS (prefer); i++)
    {
      char *p = g_build_filename (dir, prefer[i], NULL);
      if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
        {
          *is_index = i == 1;
          return p;
        }
      g_free (p);
    }
  /* Otherwise a single safetensors file or index (adapter_model.safetensors, ...). */
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  g_autoptr (GPtrArray) singles = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) indexes = g_ptr_array_new_with_free_func (g_free);
  const char *n;
  while (d && (n = g_dir_read_name (d)))
    {
      if (g_str_has_suffix (n, ".safetensors.index.json"))
        g_ptr_array_add (indexes, g_strdup (n));
      else if (g_str_has_suffix (n, ".safetensors"))
        g_ptr_array_add (singles, g_strdup (n));
    }
  if (indexes->len == 1)
    {
      *is_index = TRUE;
      return g_build_filename (dir, (const char *) indexes->pdata[0], NULL);
    }
  if (indexes->len == 0 && singles->len == 1)
    {
      *is_index = FALSE;
      return g_build_filename (dir, (const char *) singles->pdata[0], NULL);
    }
  if (indexes->len > 1 || singles->len > 1)
    g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                 "%s holds several safetensors files but no model.safetensors or model.safetensors.index.json; name the file to load", dir);
  else
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND,
                 "%s has no model.safetensors or model.safetensors.index.json", dir);
  return NULL;
}

static HnSafetensors *
st_new (void)
{
  HnSafetensors *st = g_new0 (HnSafetensors, 1);
  st->files = g_ptr_array_new_with_free_func (st_file_free);
  st->tensors = g_ptr_array_new_with_free_func (info_free);
  st->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  st->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return st;
}

HnSafetensors *
hn_safetensors_new_in_memory (const char *file, gpointer keep, GDestroyNotify keep_free)
{
  HnSafetensors *st = st_new ();
  st->owned = g_ptr_array_new_with_free_func (g_free);
  st->keep = keep;
  st->keep_free = keep_free;
  st->file_names = g_new0 (char *, 2);
  st->file_names[0] = g_strdup (file);
  return st;
}

gboolean
hn_safetensors_add_in_memory (HnSafetensors *st, const char *name, HnStDtype dtype, guint ndim, const gint64 *shape,
                              const void *data, gsize nbytes, gpointer owned, GError **error)
{
  g_return_val_if_fail (st->owned && ndim <= HN_ST_MAX_DIMS, FALSE);
  if (owned)
    g_ptr_array_add (st->owned, owned);
  gint64 n = 1;
  for (guint d = 0; d < ndim; d++)
    n *= shape[d];
  if (g_hash_table_contains (st->by_name, name) || (gsize) n * hn_st_dtype_size (dtype) != nbytes)
    return corrupt (error, st->file_names[0], "tensor %s: duplicate name or size mismatch", name);
  HnSafetensorInfo *t = g_new0 (HnSafetensorInfo, 1);
  t->name = g_strdup (name);
  t->dtype = dtype;
  t->ndim = ndim;
  memcpy (t->shape, shape, ndim * sizeof (gint64));
  t->n_elements = n;
  t->data = data;
  t->nbytes = nbytes;
  t->file = st->file_names[0];
  g_ptr_array_add (st->tensors, t);
  g_hash_table_insert (st->by_name, (char *) t->name, t);
  g_ptr_array_sort (st->tensors, info_cmp);
  return TRUE;
}

gboolean
hn_safetensors_add_ggml_in_memory (HnSafetensors *st, const char *name, guint32 ggml_type, guint ndim,
                                   const gint64 *shape, const void *data, gsize nbytes, gpointer owned, GError **error)
{
  g_return_val_if_fail (st->owned && ndim >= 1 && ndim <= HN_ST_MAX_DIMS, FALSE);
  if (owned)
    g_ptr_array_add (st->owned, owned);
  gint64 n = 1;
  for (guint d = 0; d < ndim; d++)
    n *= shape[d];
  gint64 cols = shape[ndim - 1];
  guint bs = hn_ggml_block_size ((HnGgmlType) ggml_type);
  if (g_hash_table_contains (st->by_name, name) || bs == 0 || cols % bs != 0 ||
      (gsize) (n / cols) * hn_ggml_row_size ((HnGgmlType) ggml_type, cols) != nbytes)
    return corrupt (error, st->file_names[0], "tensor %s: duplicate name or size mismatch", name);
  HnSafetensorInfo *t = g_new0 (HnSafetensorInfo, 1);
  t->name = g_strdup (name);
  t->dtype = HN_ST_DTYPE_GGML;
  t->ggml_type = ggml_type;
  t->ndim = ndim;
  memcpy (t->shape, shape, ndim * sizeof (gint64));
  t->n_elements = n;
  t->data = data;
  t->nbytes = nbytes;
  t->file = st->file_names[0];
  g_ptr_array_add (st->tensors, t);
  g_hash_table_insert (st->by_name, (char *) t->name, t);
  g_ptr_array_sort (st->tensors, info_cmp);
  return TRUE;
}

void
hn_safetensors_set_metadata (HnSafetensors *st, const char *key, const char *value)
{
  g_hash_table_insert (st->metadata, g_strdup (key), g_strdup (value));
}

HnSafetensors *
hn_safetensors_open (const char *path_or_dir, GError **error)
{
  g_return_val_if_fail (path_or_dir != NULL, NULL);
  /* A GGUF model (a .gguf file, or a folder holding one and no config.json)
   * reads as the Hugging Face checkpoint it was converted from. */
  g_autofree char *gguf = hn_gguf_resolve_path (path_or_dir);
  if (gguf)
    return hn_gguf_open_as_safetensors (gguf, error);
  g_autoptr (HnSafetensors) st = st_new ();

  g_autofree char *path = NULL;
  gboolean is_index = FALSE;
  if (g_file_test (path_or_dir, G_FILE_TEST_IS_DIR))
    {
      path = find_in_dir (path_or_dir, &is_index, error);
      if (!path)
        return NULL;
    }
  else
    {
      path = g_strdup (path_or_dir);
      is_index = g_str_has_suffix (path, ".json");
    }
  if (!(is_index ? load_index (st, path, error) : load_file (st, path, TRUE, error)))
    return NULL;

  g_ptr_array_sort (st->tensors, info_cmp);
  st->file_names = g_new0 (char *, st->files->len + 1);
  for (guint i = 0; i < st->files->len; i++)
    st->file_names[i] = g_strdup (((StFile *) st->files->pdata[i])->path);
  return g_steal_pointer (&st);
}

guint
hn_safetensors_get_n_tensors (HnSafetensors *st)
{
  return st->tensors->len;
}

const HnSafetensorInfo *
hn_safetensors_get_nth (HnSafetensors *st, guint i)
{
  g_return_val_if_fail (i < st->tensors->len, NULL);
  return st->tensors->pdata[i];
}

const HnSafetensorInfo *
hn_safetensors_lookup (HnSafetensors *st, const char *name)
{
  return g_hash_table_lookup (st->by_name, name);
}

const HnSafetensorInfo *
hn_safetensors_require (HnSafetensors *st, const char *name, GError **error)
{
  const HnSafetensorInfo *t = g_hash_table_lookup (st->by_name, name);
  if (!t)
    g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "tensor '%s' is not in %s", name,
                 st->file_names && st->file_names[0] ? st->file_names[0] : "the model");
  return t;
}

const char *
hn_safetensors_get_metadata (HnSafetensors *st, const char *key)
{
  return g_hash_table_lookup (st->metadata, key);
}

GHashTable *
hn_safetensors_get_metadata_table (HnSafetensors *st)
{
  return st->metadata;
}

const char *const *
hn_safetensors_get_files (HnSafetensors *st)
{
  return (const char *const *) st->file_names;
}

gboolean
hn_safetensor_info_to_f32 (const HnSafetensorInfo *t, float *dst, GError **error)
{
  const guint8 *p = t->data;
  gint64 n = t->n_elements;
  switch (t->dtype)
    {
    case HN_ST_DTYPE_F32:
      memcpy (dst, p, (gsize) n * 4);
      break;
    case HN_ST_DTYPE_F16:
    case HN_ST_DTYPE_BF16:
      for (gint64 i = 0; i < n; i++)
        {
          guint16 h = (guint16) (p[2 * i] | (p[2 * i + 1] << 8));
          dst[i] = t->dtype == HN_ST_DTYPE_F16 ? hn_st_f16_to_f32 (h) : hn_st_bf16_to_f32 (h);
        }
      break;
    case HN_ST_DTYPE_F64:
      for (gint64 i = 0; i < n; i++)
        {
          double d;
          memcpy (&d, p + 8 * i, 8);
          dst[i] = (float) d;
        }
      break;
    case HN_ST_DTYPE_F8_E5M2:
      for (gint64 i = 0; i < n; i++)
        dst[i] = hn_st_f16_to_f32 ((guint16) (p[i] << 8));
      break;
    case HN_ST_DTYPE_GGML:
      {
        g_autoptr (GError) e = NULL;
        if (!hn_ggml_dequantize ((HnGgmlType) t->ggml_type, p, dst, n, &e))
          {
            g_set_error (error, HN_ERROR, e->code, "%s: tensor '%s': %s", t->file, t->name, e->message);
            return FALSE;
          }
      }
      break;
    case HN_ST_DTYPE_F8_E4M3:
      for (gint64 i = 0; i < n; i++)
        dst[i] = f8_e4m3_to_f32 (p[i]);
      break;
    case HN_ST_DTYPE_BOOL:
    case HN_ST_DTYPE_U8:
      for (gint64 i = 0; i < n; i++)
        dst[i] = (float) p[i];
      break;
    case HN_ST_DTYPE_I8:
      for (gint64 i = 0; i < n; i++)
        dst[i] = (float) (gint8) p[i];
      break;
#define CONV(T, SZ)                                                                                \
  for (gint64 i = 0; i < n; i++)                                                                   \
    {                                                                                              \
      T v;                                                                                         \
      memcpy (&v, p + (SZ) * i, SZ);                                                               \
      dst[i] = (float) v;                                                                          \
    }                                                                                              \
  break;
    case HN_ST_DTYPE_I16:
      CONV (gint16, 2)
    case HN_ST_DTYPE_U16:
      CONV (guint16, 2)
    case HN_ST_DTYPE_I32:
      CONV (gint32, 4)
    case HN_ST_DTYPE_U32:
      CONV (guint32, 4)
    case HN_ST_DTYPE_I64:
      CONV (gint64, 8)
    case HN_ST_DTYPE_U64:
      CONV (guint64, 8)
#undef CONV
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which cannot be converted to F32",
                   t->file, t->name, hn_st_dtype_name (t->dtype));
      return FALSE;
    }
  return TRUE;
}

float *
hn_safetensor_info_dup_f32 (const HnSafetensorInfo *t, GError **error)
{
  float *dst = g_try_new (float, MAX (t->n_elements, 1));
  if (!dst)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "out of memory converting tensor '%s' to F32", t->name);
      return NULL;
    }
  if (!hn_safetensor_info_to_f32 (t, dst, error))
    {
      g_free (dst);
      return NULL;
    }
  return dst;
}

/* ---------------------------------------------------------------- writer */

G_STATIC_ASSERT (HN_ST_MAX_DIMS <= HN_WRITER_MAX_DIMS);

struct _HnSafetensorsWriter {
  HnWriterTensors entries;
  GHashTable *metadata;  /* char* -> char* */
  gboolean scratch;      /* no fsync (hn_safetensors_writer_set_scratch) */
};

HnSafetensorsWriter *
hn_safetensors_writer_new (void)
{
  HnSafetensorsWriter *w = g_new0 (HnSafetensorsWriter, 1);
  hn_writer_tensors_init (&w->entries);
  w->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return w;
}

void
hn_safetensors_writer_free (HnSafetensorsWriter *w)
{
  if (!w)
    return;
  hn_writer_tensors_clear (&w->entries);
  g_hash_table_unref (w->metadata);
  g_free (w);
}

gboolean
hn_safetensors_writer_add (HnSafetensorsWriter *w, const char *name, HnStDtype dtype, guint ndim,
                           const gint64 *shape, const void *data, gsize nbytes, gboolean copy, GError **error)
{
  g_return_val_if_fail (name != NULL && (guint) dtype < HN_ST_N_DTYPES, FALSE);
  if (!name[0] || strcmp (name, "__metadata__") == 0 || !g_utf8_validate (name, -1, NULL))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "invalid tensor name '%s'", name);
      return FALSE;
    }
  if (hn_writer_tensors_contains (&w->entries, name))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor '%s' was added twice", name);
      return FALSE;
    }
  if (ndim > HN_ST_MAX_DIMS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor '%s' has %u dimensions; at most %d",
                   name, ndim, HN_ST_MAX_DIMS);
      return FALSE;
    }
  guint64 nel = 1;
  for (guint i = 0; i < ndim; i++)
    {
      if (shape[i] < 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "tensor '%s' has a negative dimension", name);
          return FALSE;
        }
      nel *= (guint64) shape[i];
    }
  if (nel * hn_st_dtype_size (dtype) != nbytes)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "tensor '%s': %" G_GSIZE_FORMAT " bytes given, shape x %s needs %" G_GUINT64_FORMAT,
                   name, nbytes, hn_st_dtype_name (dtype), nel * hn_st_dtype_size (dtype));
      return FALSE;
    }
  gpointer owned = copy && nbytes > 0 ? g_memdup2 (data, nbytes) : NULL;
  hn_writer_tensors_add (&w->entries, name, dtype, ndim, shape, owned ? owned : data, nbytes, owned);
  return TRUE;
}

void
hn_safetensors_writer_set_scratch (HnSafetensorsWriter *w, gboolean scratch)
{
  w->scratch = scratch;
}

void
hn_safetensors_writer_set_metadata (HnSafetensorsWriter *w, const char *key, const char *value)
{
  g_hash_table_replace (w->metadata, g_strdup (key), g_strdup (value));
}

static void
json_escape (GString *s, const char *str)
{
  g_string_append_c (s, '"');
  for (const unsigned char *p = (const unsigned char *) str; *p; p++)
    {
      if (*p == '"' || *p == '\\')
        {
          g_string_append_c (s, '\\');
          g_string_append_c (s, (char) *p);
        }
      else if (*p < 0x20)
        g_string_append_printf (s, "\\u%04x", *p);
      else
        g_string_append_c (s, (char) *p);
    }
  g_string_append_c (s, '"');
}

/* The Python library stores larger dtypes first (then by name) so every
 * tensor stays aligned to its element size inside the 8-aligned data
 * section; we do the same so mmap readers can use the data in place. */
static int
wentry_layout_cmp (gconstpointer a, gconstpointer b)
{
  const HnWriterTensor *x = *(HnWriterTensor *const *) a, *y = *(HnWriterTensor *const *) b;
  gsize sx = hn_st_dtype_size ((HnStDtype) x->type), sy = hn_st_dtype_size ((HnStDtype) y->type);
  if (sx != sy)
    return sx > sy ? -1 : 1;
  return strcmp (x->name, y->name);
}

static int
wentry_name_cmp (gconstpointer a, gconstpointer b)
{
  const HnWriterTensor *x = *(HnWriterTensor *const *) a, *y = *(HnWriterTensor *const *) b;
  return strcmp (x->name, y->name);
}

/* Writes entries (any order; laid out here) into path atomically. */
static gboolean
write_entries (GPtrArray *entries, GHashTable *metadata, gboolean sync, const char *path, GError **error)
{
  g_autoptr (GPtrArray) order = g_ptr_array_new ();
  for (guint i = 0; i < entries->len; i++)
    g_ptr_array_add (order, entries->pdata[i]);
  g_ptr_array_sort (order, wentry_layout_cmp);

  g_autoptr (GString) h = g_string_new ("{");
  gboolean first = TRUE;
  if (g_hash_table_size (metadata) > 0)
    {
      g_autoptr (GList) keys = g_hash_table_get_keys (metadata);
      keys = g_list_sort (keys, (GCompareFunc) g_strcmp0);
      g_string_append (h, "\"__metadata__\":{");
      for (GList *k = keys; k; k = k->next)
        {
          if (k != keys)
            g_string_append_c (h, ',');
          json_escape (h, k->data);
          g_string_append_c (h, ':');
          json_escape (h, g_hash_table_lookup (metadata, k->data));
        }
      g_string_append_c (h, '}');
      first = FALSE;
    }
  guint64 off = 0;
  for (guint i = 0; i < order->len; i++)
    {
      const HnWriterTensor *e = order->pdata[i];
      if (!first)
        g_string_append_c (h, ',');
      first = FALSE;
      json_escape (h, e->name);
      g_string_append_printf (h, ":{\"dtype\":\"%s\",\"shape\":[", hn_st_dtype_name ((HnStDtype) e->type));
      for (guint d = 0; d < e->ndim; d++)
        g_string_append_printf (h, "%s%" G_GINT64_FORMAT, d ? "," : "", e->shape[d]);
      g_string_append_printf (h, "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]}", off,
                              off + e->nbytes);
      off += e->nbytes;
    }
  g_string_append_c (h, '}');
  while (h->len % 8 != 0)
    g_string_append_c (h, ' ');
  guint8 lenbuf[8];
  guint64 hl = h->len;
  for (int i = 0; i < 8; i++)
    lenbuf[i] = (guint8) (hl >> (8 * i));

  g_autofree char *tmp = NULL;
  int fd = hn_fd_begin_tmp (path, &tmp, error);
  if (fd < 0)
    return FALSE;
  gboolean ok = hn_fd_write_all (fd, lenbuf, 8, path, error) && hn_fd_write_all (fd, h->str, h->len, path, error);
  for (guint i = 0; ok && i < order->len; i++)
    {
      const HnWriterTensor *e = order->pdata[i];
      ok = hn_fd_write_all (fd, e->data, e->nbytes, path, error);
    }
  return hn_fd_commit_tmp_full (fd, ok, sync, tmp, path, error);
}

static void
ensure_format (HnSafetensorsWriter *w)
{
  if (!g_hash_table_contains (w->metadata, "format"))
    g_hash_table_insert (w->metadata, g_strdup ("format"), g_strdup ("pt"));
}

gboolean
hn_safetensors_writer_write_file (HnSafetensorsWriter *w, const char *path, GError **error)
{
  ensure_format (w);
  return write_entries (w->entries.list, w->metadata, !w->scratch, path, error);
}

static gboolean
is_shard_of (const char *name, const char *basename)
{
  /* <basename>-NNNNN-of-NNNNN.safetensors */
  gsize bl = strlen (basename);
  if (strncmp (name, basename, bl) != 0 || name[bl] != '-')
    return FALSE;
  const char *p = name + bl + 1;
  for (int i = 0; i < 5; i++)
    if (!g_ascii_isdigit (p[i]))
      return FALSE;
  if (strncmp (p + 5, "-of-", 4) != 0)
    return FALSE;
  p += 9;
  for (int i = 0; i < 5; i++)
    if (!g_ascii_isdigit (p[i]))
      return FALSE;
  return strcmp (p + 5, ".safetensors") == 0;
}

static void
remove_stale (const char *dir, const char *basename, GHashTable *keep)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  if (!d)
    return;
  g_autofree char *single = g_strdup_printf ("%s.safetensors", basename);
  g_autofree char *index = g_strdup_printf ("%s.safetensors.index.json", basename);
  g_autoptr (GPtrArray) victims = g_ptr_array_new_with_free_func (g_free);
  const char *n;
  while ((n = g_dir_read_name (d)))
    if ((strcmp (n, single) == 0 || strcmp (n, index) == 0 || is_shard_of (n, basename)) &&
        !g_hash_table_contains (keep, n))
      g_ptr_array_add (victims, g_build_filename (dir, n, NULL));
  for (guint i = 0; i < victims->len; i++)
    g_unlink (victims->pdata[i]);
}

gboolean
hn_safetensors_writer_write_dir (HnSafetensorsWriter *w, const char *dir, const char *basename,
                                 guint64 max_shard_bytes, GError **error)
{
  g_return_val_if_fail (basename && is_plain_file_name (basename), FALSE);
  if (!hn_mkdir_p (dir, error))
    return FALSE;
  ensure_format (w);
  g_autoptr (GHashTable) keep = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  guint64 total = 0;
  for (guint i = 0; i < w->entries.list->len; i++)
    total += ((HnWriterTensor *) w->entries.list->pdata[i])->nbytes;

  if (max_shard_bytes == 0 || total <= max_shard_bytes)
    {
      g_autofree char *name = g_strdup_printf ("%s.safetensors", basename);
      g_autofree char *path = g_build_filename (dir, name, NULL);
      if (!write_entries (w->entries.list, w->metadata, !w->scratch, path, error))
        return FALSE;
      g_hash_table_add (keep, g_steal_pointer (&name));
      remove_stale (dir, basename, keep);
      return TRUE;
    }

  /* Shards in name order, a new shard when the next tensor would overflow. */
  g_autoptr (GPtrArray) order = g_ptr_array_new ();
  for (guint i = 0; i < w->entries.list->len; i++)
    g_ptr_array_add (order, w->entries.list->pdata[i]);
  g_ptr_array_sort (order, wentry_name_cmp);
  g_autoptr (GPtrArray) shards = g_ptr_array_new_with_free_func ((GDestroyNotify) g_ptr_array_unref);
  GPtrArray *cur = NULL;
  guint64 cur_size = 0;
  for (guint i = 0; i < order->len; i++)
    {
      HnWriterTensor *e = order->pdata[i];
      if (!cur || (cur->len > 0 && cur_size + e->nbytes > max_shard_bytes))
        {
          cur = g_ptr_array_new ();
          g_ptr_array_add (shards, cur);
          cur_size = 0;
        }
      g_ptr_array_add (cur, e);
      cur_size += e->nbytes;
    }
  if (shards->len > 99999)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%u shards are too many; raise the shard size", shards->len);
      return FALSE;
    }
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "metadata");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "total_size");
  json_builder_add_int_value (b, (gint64) total);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "weight_map");
  json_builder_begin_object (b);
  for (guint s = 0; s < shards->len; s++)
    {
      GPtrArray *sh = shards->pdata[s];
      char *name = g_strdup_printf ("%s-%05u-of-%05u.safetensors", basename, s + 1, shards->len);
      g_autofree char *path = g_build_filename (dir, name, NULL);
      g_hash_table_add (keep, name);
      if (!write_entries (sh, w->metadata, !w->scratch, path, error))
        return FALSE;
      for (guint i = 0; i < sh->len; i++)
        {
          json_builder_set_member_name (b, ((HnWriterTensor *) sh->pdata[i])->name);
          json_builder_add_string_value (b, name);
        }
    }
  json_builder_end_object (b);
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_indent (gen, 2);
  gsize len = 0;
  g_autofree char *text = json_generator_to_data (gen, &len);
  g_autofree char *text_nl = g_strconcat (text, "\n", NULL);
  g_autofree char *iname = g_strdup_printf ("%s.safetensors.index.json", basename);
  g_autofree char *ipath = g_build_filename (dir, iname, NULL);
  if (!hn_write_file_atomic (ipath, text_nl, len + 1, error))
    return FALSE;
  g_hash_table_add (keep, g_steal_pointer (&iname));
  remove_stale (dir, basename, keep);
  return TRUE;
}
