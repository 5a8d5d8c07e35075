#include "formats/parquet.h"
#include "base/hn-error.h"

#include <snappy-c.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* Upper bounds that keep a hostile file from asking for absurd memory. */
#define MAX_FOOTER (256u << 20)
#define MAX_PAGE_BYTES (1u << 30)
#define MAX_PAGE_VALUES (1 << 28)
#define MAX_DEPTH 32

enum { T_STOP = 0, T_TRUE = 1, T_FALSE = 2, T_BYTE = 3, T_I16 = 4, T_I32 = 5, T_I64 = 6, T_DOUBLE = 7,
       T_BINARY = 8, T_LIST = 9, T_SET = 10, T_MAP = 11, T_STRUCT = 12 };

enum { PT_BOOLEAN = 0, PT_INT32 = 1, PT_INT64 = 2, PT_INT96 = 3, PT_FLOAT = 4, PT_DOUBLE = 5, PT_BYTE_ARRAY = 6,
       PT_FIXED = 7 };

enum { REP_REQUIRED = 0, REP_OPTIONAL = 1, REP_REPEATED = 2 };

enum { ENC_PLAIN = 0, ENC_PLAIN_DICTIONARY = 2, ENC_RLE = 3, ENC_BIT_PACKED = 4, ENC_DELTA_BINARY_PACKED = 5,
       ENC_DELTA_LENGTH_BYTE_ARRAY = 6, ENC_DELTA_BYTE_ARRAY = 7, ENC_RLE_DICTIONARY = 8, ENC_BYTE_STREAM_SPLIT = 9 };

enum { CODEC_NONE = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };

enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };

static const char *
codec_name (int c)
{
  static const char *names[] = { "UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW" };
  return c >= 0 && c < (int) G_N_ELEMENTS (names) ? names[c] : "unknown";
}

static const char *
encoding_name (int e)
{
  static const char *names[] = { "PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                 "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                 "RLE_DICTIONARY", "BYTE_STREAM_SPLIT" };
  return e >= 0 && e < (int) G_N_ELEMENTS (names) ? names[e] : "unknown";
}

/* ------------------------------------------------------------ thrift compact */

typedef struct {
  const guint8 *p, *end;
  gboolean bad;
} TR;

static guint64
tr_varint (TR *t)
{
  guint64 v = 0;
  for (int shift = 0; shift < 64; shift += 7)
    {
      if (t->p >= t->end)
        {
          t->bad = TRUE;
          return 0;
        }
      guint8 b = *t->p++;
      v |= (guint64) (b & 0x7f) << shift;
      if (!(b & 0x80))
        return v;
    }
  t->bad = TRUE;
  return 0;
}

static gint64
tr_zigzag (TR *t)
{
  guint64 v = tr_varint (t);
  return (gint64) (v >> 1) ^ -(gint64) (v & 1);
}

static guint8
tr_byte (TR *t)
{
  if (t->p >= t->end)
    {
      t->bad = TRUE;
      return 0;
    }
  return *t->p++;
}

/* Reads a field header; FALSE at STOP (or on error). */
static gboolean
tr_field (TR *t, int *last_id, int *type, int *id)
{
  guint8 b = tr_byte (t);
  if (t->bad || b == 0)
    return FALSE;
  *type = b & 0x0f;
  int delta = b >> 4;
  *id = delta ? *last_id + delta : (int) tr_zigzag (t);
  *last_id = *id;
  return !t->bad;
}

static const guint8 *
tr_binary (TR *t, gsize *len)
{
  guint64 l = tr_varint (t);
  if (t->bad || l > (guint64) (t->end - t->p))
    {
      t->bad = TRUE;
      *len = 0;
      return NULL;
    }
  const guint8 *s = t->p;
  t->p += l;
  *len = (gsize) l;
  return s;
}

static char *
tr_string (TR *t)
{
  gsize len;
  const guint8 *s = tr_binary (t, &len);
  return s ? g_strndup ((const char *) s, len) : NULL;
}

static void
tr_list_header (TR *t, int *etype, guint64 *n)
{
  guint8 b = tr_byte (t);
  *etype = b & 0x0f;
  *n = b >> 4;
  if (*n == 15)
    *n = tr_varint (t);
  if (*n > (guint64) (t->end - t->p) + 1) /* every element takes at least a byte (bools in lists too) */
    t->bad = TRUE;
}

static void tr_skip (TR *t, int type, int depth);

static void
tr_skip_struct (TR *t, int depth)
{
  int last = 0, type, id;
  while (!t->bad && tr_field (t, &last, &type, &id))
    tr_skip (t, type, depth + 1);
}

static void
tr_skip (TR *t, int type, int depth)
{
  if (depth > MAX_DEPTH)
    {
      t->bad = TRUE;
      return;
    }
  switch (type)
    {
    case T_TRUE:
    case T_FALSE:
      break;
    case T_BYTE:
      tr_byte (t);
      break;
    case T_I16:
    case T_I32:
    case T_I64:
      tr_varint (t);
      break;
    case T_DOUBLE:
      if (t->end - t->p < 8)
        t->bad = TRUE;
      else
        t->p += 8;
      break;
    case T_BINARY:
      {
        gsize l;
        tr_binary (t, &l);
      }
      break;
    case T_LIST:
    case T_SET:
      {
        int et;
        guint64 n;
        tr_list_header (t, &et, &n);
        for (guint64 i = 0; i < n && !t->bad; i++)
          tr_skip (t, et == T_TRUE || et == T_FALSE ? T_BYTE : et, depth + 1);
      }
      break;
    case T_MAP:
      {
        guint64 n = tr_varint (t);
        if (n == 0)
          break;
        /* Booleans inside a map take a byte each, like in lists, so every
         * entry takes at least two bytes: a count past that is a damaged
         * file, not 2^64 iterations (found by fuzz-parquet). */
        if (n > (guint64) (t->end - t->p) / 2 + 1)
          {
            t->bad = TRUE;
            break;
          }
        guint8 kv = tr_byte (t);
        int kt = kv >> 4, vt = kv & 0x0f;
        kt = kt == T_TRUE || kt == T_FALSE ? T_BYTE : kt;
        vt = vt == T_TRUE || vt == T_FALSE ? T_BYTE : vt;
        for (guint64 i = 0; i < n && !t->bad; i++)
          {
            tr_skip (t, kt, depth + 1);
            tr_skip (t, vt, depth + 1);
          }
      }
      break;
    case T_STRUCT:
      tr_skip_struct (t, depth);
      break;
    default:
      t->bad = TRUE;
    }
}

static gint64
tr_int (TR *t, int type)
{
  if (type != T_I16 && type != T_I32 && type != T_I64 && type != T_BYTE)
    {
      tr_skip (t, type, 0);
      t->bad = TRUE;
      return 0;
    }
  if (type == T_BYTE)
    return (gint8) tr_byte (t);
  return tr_zigzag (t);
}

/* ------------------------------------------------------------ metadata */

typedef struct {
  char *name;
  int type;          /* physical type, -1 for groups */
  int repetition;
  int n_children;
  int converted_type;
} SchemaEl;

typedef struct {
  char *path;
  int type;
  int max_def, max_rep;
  int rep_def;       /* def level of the repeated ancestor (lists) */
  int top;           /* index of the top-level field */
} Leaf;

typedef struct {
  int type;
  int codec;
  gint64 num_values;
  gint64 total_compressed_size;
  gint64 data_page_offset;
  gint64 dictionary_page_offset; /* -1 when absent */
  char *path;
} ChunkMeta;

typedef struct {
  gint64 num_rows;
  ChunkMeta *chunks; /* n_leaves */
} RowGroup;

struct _HnParquetFile {
  char *path;
  GMappedFile *map;
  const guint8 *data;
  gsize size;
  gint64 num_rows;
  GArray *schema;    /* SchemaEl */
  GPtrArray *leaves; /* Leaf* */
  GPtrArray *fields; /* char*, NULL-terminated */
  RowGroup *rgs;
  guint n_rgs;
};

static gboolean
corrupt (GError **error, const char *file, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static gboolean
corrupt (GError **error, const char *file, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *m = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %s", file, m);
  return FALSE;
}

static void
parse_schema_el (TR *t, SchemaEl *el)
{
  int last = 0, type, id;
  el->type = -1;
  el->converted_type = -1;
  while (tr_field (t, &last, &type, &id))
    switch (id)
      {
      case 1: el->type = (int) tr_int (t, type); break;
      case 3: el->repetition = (int) tr_int (t, type); break;
      case 4:
        if (type != T_BINARY)
          t->bad = TRUE;
        else
          {
            g_free (el->name); /* a damaged footer may repeat the field */
            el->name = tr_string (t);
          }
        break;
      case 5: el->n_children = (int) tr_int (t, type); break;
      case 6: el->converted_type = (int) tr_int (t, type); break;
      default: tr_skip (t, type, 1);
      }
}

static void
parse_column_meta (TR *t, ChunkMeta *c)
{
  int last = 0, type, id;
  while (tr_field (t, &last, &type, &id))
    switch (id)
      {
      case 1: c->type = (int) tr_int (t, type); break;
      case 3:
        {
          int et;
          guint64 n;
          if (type != T_LIST)
            {
              t->bad = TRUE;
              return;
            }
          tr_list_header (t, &et, &n);
          GString *s = g_string_new (NULL);
          for (guint64 i = 0; i < n && !t->bad; i++)
            {
              g_autofree char *part = tr_string (t);
              if (i)
                g_string_append_c (s, '.');
              g_string_append (s, part ? part : "");
            }
          g_free (c->path);
          c->path = g_string_free (s, FALSE);
        }
        break;
      case 4: c->codec = (int) tr_int (t, type); break;
      case 5: c->num_values = tr_int (t, type); break;
      case 7: c->total_compressed_size = tr_int (t, type); break;
      case 9: c->data_page_offset = tr_int (t, type); break;
      case 11: c->dictionary_page_offset = tr_int (t, type); break;
      default: tr_skip (t, type, 1);
      }
}

static void
parse_column_chunk (TR *t, ChunkMeta *c, gboolean *external)
{
  int last = 0, type, id;
  while (tr_field (t, &last, &type, &id))
    switch (id)
      {
      case 1:
        *external = TRUE;
        tr_skip (t, type, 1);
        break;
      case 3:
        if (type != T_STRUCT)
          t->bad = TRUE;
        else
          parse_column_meta (t, c);
        break;
      default: tr_skip (t, type, 1);
      }
}

static void
file_free_rgs (HnParquetFile *f)
{
  for (guint i = 0; i < f->n_rgs; i++)
    {
      if (f->rgs[i].chunks)
        for (guint j = 0; j < f->leaves->len; j++)
          g_free (f->rgs[i].chunks[j].path);
      g_free (f->rgs[i].chunks);
    }
  g_free (f->rgs);
}

void
hn_parquet_close (HnParquetFile *f)
{
  if (!f)
    return;
  if (f->leaves)
    file_free_rgs (f);
  if (f->schema)
    {
      for (guint i = 0; i < f->schema->len; i++)
        g_free (g_array_index (f->schema, SchemaEl, i).name);
      g_array_unref (f->schema);
    }
  if (f->leaves)
    g_ptr_array_unref (f->leaves);
  if (f->fields)
    g_ptr_array_unref (f->fields);
  if (f->map)
    g_mapped_file_unref (f->map);
  g_free (f->path);
  g_free (f);
}

static void
leaf_free (gpointer p)
{
  Leaf *l = p;
  g_free (l->path);
  g_free (l);
}

/* Walks the flattened schema depth first, computing levels per leaf. */
static gboolean
build_leaves (HnParquetFile *f, guint *idx, const char *prefix, int def, int rep, int rep_def, int top,
              int depth, GError **error)
{
  if (depth > MAX_DEPTH || *idx >= f->schema->len)
    return corrupt (error, f->path, "schema is truncated or too deep");
  SchemaEl *el = &g_array_index (f->schema, SchemaEl, *idx);
  (*idx)++;
  if (!el->name)
    return corrupt (error, f->path, "schema element without a name");
  if (el->repetition == REP_OPTIONAL)
    def++;
  else if (el->repetition == REP_REPEATED)
    {
      def++;
      rep++;
      rep_def = def;
    }
  g_autofree char *path = prefix ? g_strdup_printf ("%s.%s", prefix, el->name) : g_strdup (el->name);
  if (el->n_children < 0)
    return corrupt (error, f->path, "schema element '%s' has a negative child count", el->name);
  if (el->n_children == 0)
    {
      if (el->type < 0)
        return corrupt (error, f->path, "leaf column '%s' has no physical type", path);
      Leaf *l = g_new0 (Leaf, 1);
      l->path = g_steal_pointer (&path);
      l->type = el->type;
      l->max_def = def;
      l->max_rep = rep;
      l->rep_def = rep_def;
      l->top = top;
      g_ptr_array_add (f->leaves, l);
      return TRUE;
    }
  for (int c = 0; c < el->n_children; c++)
    if (!build_leaves (f, idx, path, def, rep, rep_def, top, depth + 1, error))
      return FALSE;
  return TRUE;
}

HnParquetFile *
hn_parquet_open (const char *path, GError **error)
{
  g_autoptr (HnParquetFile) f = g_new0 (HnParquetFile, 1);
  f->path = g_strdup (path);
  g_autoptr (GError) local = NULL;
  f->map = g_mapped_file_new (path, FALSE, &local);
  if (!f->map)
    {
      g_set_error (error, HN_ERROR, g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND : HN_ERROR_IO,
                   "cannot open %s: %s", path, local->message);
      return NULL;
    }
  f->data = (const guint8 *) g_mapped_file_get_contents (f->map);
  f->size = g_mapped_file_get_length (f->map);
  if (f->size < 12 || memcmp (f->data, "PAR1", 4) != 0 || memcmp (f->data + f->size - 4, "PAR1", 4) != 0)
    {
      if (f->size >= 4 && memcmp (f->data + f->size - 4, "PARE", 4) == 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: encrypted Parquet files are not supported", path);
          return NULL;
        }
      corrupt (error, path, "not a Parquet file (no PAR1 magic at both ends)");
      return NULL;
    }
  const guint8 *fl = f->data + f->size - 8;
  guint32 flen = (guint32) fl[0] | ((guint32) fl[1] << 8) | ((guint32) fl[2] << 16) | ((guint32) fl[3] << 24);
  if (flen > MAX_FOOTER || flen > f->size - 12)
    {
      corrupt (error, path, "footer length %u runs past the start of the file (%" G_GSIZE_FORMAT " bytes)", flen, f->size);
      return NULL;
    }
  TR t = { f->data + f->size - 8 - flen, f->data + f->size - 8, FALSE };
  f->schema = g_array_new (FALSE, TRUE, sizeof (SchemaEl));
  f->leaves = g_ptr_array_new_with_free_func (leaf_free);
  f->fields = g_ptr_array_new_with_free_func (g_free);
  GArray *rg_meta = g_array_new (FALSE, TRUE, sizeof (RowGroup));
  GPtrArray *rg_chunks = g_ptr_array_new (); /* GArray of ChunkMeta per rg */
  gboolean external = FALSE;
  int last = 0, type, id;
  while (tr_field (&t, &last, &type, &id))
    {
      if (id == 2 && type == T_LIST)
        {
          int et;
          guint64 n;
          tr_list_header (&t, &et, &n);
          for (guint64 i = 0; i < n && !t.bad; i++)
            {
              SchemaEl el = { 0 };
              parse_schema_el (&t, &el);
              g_array_append_val (f->schema, el);
            }
        }
      else if (id == 3 && type == T_I64)
        f->num_rows = tr_zigzag (&t);
      else if (id == 4 && type == T_LIST)
        {
          int et;
          guint64 n;
          tr_list_header (&t, &et, &n);
          for (guint64 i = 0; i < n && !t.bad; i++)
            {
              RowGroup rg = { 0 };
              GArray *chunks = g_array_new (FALSE, TRUE, sizeof (ChunkMeta));
              int l2 = 0, ty2, id2;
              while (tr_field (&t, &l2, &ty2, &id2))
                {
                  if (id2 == 1 && ty2 == T_LIST)
                    {
                      int et2;
                      guint64 n2;
                      tr_list_header (&t, &et2, &n2);
                      for (guint64 j = 0; j < n2 && !t.bad; j++)
                        {
                          ChunkMeta c = { .dictionary_page_offset = -1, .type = -1 };
                          parse_column_chunk (&t, &c, &external);
                          g_array_append_val (chunks, c);
                        }
                    }
                  else if (id2 == 3)
                    rg.num_rows = tr_int (&t, ty2);
                  else
                    tr_skip (&t, ty2, 1);
                }
              g_array_append_val (rg_meta, rg);
              g_ptr_array_add (rg_chunks, chunks);
            }
        }
      else
        tr_skip (&t, type, 0);
    }
  gboolean ok = !t.bad;
  if (!ok)
    corrupt (error, path, "the footer metadata is malformed");
  guint sidx = 1;
  if (ok && f->schema->len < 2)
    ok = corrupt (error, path, "the schema has no columns");
  if (ok)
    {
      SchemaEl *root = &g_array_index (f->schema, SchemaEl, 0);
      for (int c = 0; ok && c < root->n_children; c++)
        {
          SchemaEl *el = sidx < f->schema->len ? &g_array_index (f->schema, SchemaEl, sidx) : NULL;
          g_ptr_array_add (f->fields, g_strdup (el && el->name ? el->name : ""));
          ok = build_leaves (f, &sidx, NULL, 0, 0, 0, c, 0, error);
        }
      if (ok && sidx != f->schema->len)
        ok = corrupt (error, path, "the schema has %u elements but its tree uses %u", f->schema->len, sidx);
    }
  g_ptr_array_add (f->fields, NULL);
  if (ok && external)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column chunks in external files are not supported", path);
      ok = FALSE;
    }
  /* row groups: one chunk per leaf, in leaf order, inside the file */
  f->n_rgs = rg_meta->len;
  f->rgs = g_new0 (RowGroup, MAX (f->n_rgs, 1));
  gint64 total_rows = 0;
  for (guint i = 0; i < f->n_rgs; i++)
    {
      GArray *chunks = rg_chunks->pdata[i];
      f->rgs[i].num_rows = g_array_index (rg_meta, RowGroup, i).num_rows;
      f->rgs[i].chunks = g_new0 (ChunkMeta, MAX (f->leaves->len, 1));
      for (guint j = 0; j < chunks->len; j++)
        {
          ChunkMeta *c = &g_array_index (chunks, ChunkMeta, j);
          if (j < f->leaves->len)
            f->rgs[i].chunks[j] = *c;
          else
            g_free (c->path);
        }
      if (!ok)
        continue;
      if (chunks->len != f->leaves->len)
        {
          ok = corrupt (error, path, "row group %u has %u column chunks for %u columns", i, chunks->len, f->leaves->len);
          continue;
        }
      total_rows += f->rgs[i].num_rows;
      for (guint j = 0; ok && j < f->leaves->len; j++)
        {
          ChunkMeta *c = &f->rgs[i].chunks[j];
          Leaf *l = f->leaves->pdata[j];
          gint64 start = c->dictionary_page_offset > 0 ? MIN (c->dictionary_page_offset, c->data_page_offset)
                                                       : c->data_page_offset;
          if (g_strcmp0 (c->path, l->path) != 0)
            ok = corrupt (error, path, "row group %u chunk %u is for '%s', expected '%s'", i, j, c->path ? c->path : "?", l->path);
          else if (c->type != l->type)
            ok = corrupt (error, path, "column '%s': chunk type %d differs from the schema's %d", l->path, c->type, l->type);
          else if (start < 4 || c->total_compressed_size < 0 || c->num_values < 0 ||
                   (guint64) start + (guint64) c->total_compressed_size > f->size - 8 - flen)
            ok = corrupt (error, path, "column '%s' in row group %u lies outside the file's data", l->path, i);
        }
      if (ok && f->rgs[i].num_rows < 0)
        ok = corrupt (error, path, "row group %u has a negative row count", i);
    }
  for (guint i = 0; i < rg_chunks->len; i++)
    g_array_unref (rg_chunks->pdata[i]);
  g_ptr_array_unref (rg_chunks);
  g_array_unref (rg_meta);
  if (!ok)
    return NULL;
  if (total_rows != f->num_rows)
    {
      corrupt (error, path, "the row groups hold %" G_GINT64_FORMAT " rows but the footer says %" G_GINT64_FORMAT,
               total_rows, f->num_rows);
      return NULL;
    }
  return g_steal_pointer (&f);
}

gint64
hn_parquet_get_n_rows (HnParquetFile *f)
{
  return f->num_rows;
}

guint
hn_parquet_get_n_row_groups (HnParquetFile *f)
{
  return f->n_rgs;
}

gint64
hn_parquet_get_row_group_rows (HnParquetFile *f, guint rg)
{
  g_return_val_if_fail (rg < f->n_rgs, 0);
  return f->rgs[rg].num_rows;
}

guint
hn_parquet_get_n_columns (HnParquetFile *f)
{
  return f->leaves->len;
}

const char *
hn_parquet_get_column_path (HnParquetFile *f, guint i)
{
  g_return_val_if_fail (i < f->leaves->len, NULL);
  return ((Leaf *) f->leaves->pdata[i])->path;
}

const char *const *
hn_parquet_get_field_names (HnParquetFile *f)
{
  return (const char *const *) f->fields->pdata;
}

int
hn_parquet_find_column (HnParquetFile *f, const char *name)
{
  for (guint i = 0; i < f->leaves->len; i++)
    if (strcmp (((Leaf *) f->leaves->pdata[i])->path, name) == 0)
      return (int) i;
  int found = -1, count = 0;
  for (guint i = 0; i < f->leaves->len; i++)
    {
      Leaf *l = f->leaves->pdata[i];
      if (strcmp (f->fields->pdata[l->top], name) == 0)
        {
          found = (int) i;
          count++;
        }
    }
  return count == 1 ? found : -1;
}

/* ------------------------------------------------------------ pages */

/* RLE / bit-packed hybrid decoder (levels and dictionary indices). */
static gboolean
rle_decode (const guint8 *p, const guint8 *end, int bit_width, guint32 *out, gint64 n)
{
  if (bit_width < 0 || bit_width > 32)
    return FALSE;
  TR t = { p, end, FALSE };
  gint64 i = 0;
  int bytes = (bit_width + 7) / 8;
  while (i < n)
    {
      guint64 h = tr_varint (&t);
      if (t.bad)
        return FALSE;
      if (h & 1)
        {
          guint64 groups = h >> 1;
          if (groups == 0 || groups > (guint64) (t.end - t.p) + 1)
            return FALSE;
          guint64 nbits = groups * 8 * (guint64) bit_width;
          if ((nbits + 7) / 8 > (guint64) (t.end - t.p))
            return FALSE;
          guint64 bit = 0;
          for (guint64 k = 0; k < groups * 8; k++)
            {
              guint32 v = 0;
              for (int b = 0; b < bit_width; b++, bit++)
                v |= (guint32) ((t.p[bit >> 3] >> (bit & 7)) & 1) << b;
              if (i < n)
                out[i++] = v;
            }
          t.p += (nbits + 7) / 8;
        }
      else
        {
          guint64 run = h >> 1;
          if (bytes > t.end - t.p)
            return FALSE;
          guint32 v = 0;
          for (int b = 0; b < bytes; b++)
            v |= (guint32) t.p[b] << (8 * b);
          t.p += bytes;
          if (run == 0)
            return FALSE;
          for (guint64 k = 0; k < run && i < n; k++)
            out[i++] = v;
        }
    }
  return TRUE;
}

static int
bit_width_of (int max)
{
  int w = 0;
  while ((1 << w) <= max)
    w++;
  return w;
}

typedef struct {
  HnParquetType type;
  GArray *ints;     /* gint64 */
  GArray *doubles;  /* double */
  GPtrArray *strs;  /* char* */
  GArray *lens;     /* gsize */
} Values;

static void
values_init (Values *v, HnParquetType type)
{
  v->type = type;
  v->ints = g_array_new (FALSE, FALSE, sizeof (gint64));
  v->doubles = g_array_new (FALSE, FALSE, sizeof (double));
  v->strs = g_ptr_array_new_with_free_func (g_free);
  v->lens = g_array_new (FALSE, FALSE, sizeof (gsize));
}

static void
values_clear (Values *v)
{
  g_array_unref (v->ints);
  g_array_unref (v->doubles);
  g_ptr_array_unref (v->strs);
  g_array_unref (v->lens);
}

static gint64
values_len (const Values *v)
{
  switch (v->type)
    {
    case HN_PARQUET_FLOAT:
    case HN_PARQUET_DOUBLE:
      return v->doubles->len;
    case HN_PARQUET_BYTE_ARRAY:
      return v->strs->len;
    default:
      return v->ints->len;
    }
}

/* Appends element k of src to dst. */
static void
values_append_from (Values *dst, const Values *src, gint64 k)
{
  switch (dst->type)
    {
    case HN_PARQUET_FLOAT:
    case HN_PARQUET_DOUBLE:
      g_array_append_val (dst->doubles, g_array_index (src->doubles, double, k));
      break;
    case HN_PARQUET_BYTE_ARRAY:
      g_ptr_array_add (dst->strs, g_strndup (src->strs->pdata[k], g_array_index (src->lens, gsize, k)));
      g_array_append_val (dst->lens, g_array_index (src->lens, gsize, k));
      break;
    default:
      g_array_append_val (dst->ints, g_array_index (src->ints, gint64, k));
    }
}

/* PLAIN-decodes n values. */
static gboolean
decode_plain (int ptype, const guint8 *p, const guint8 *end, gint64 n, Values *out)
{
  gsize avail = (gsize) (end - p);
  switch (ptype)
    {
    case PT_BOOLEAN:
      if ((guint64) (n + 7) / 8 > avail)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          gint64 v = (p[i >> 3] >> (i & 7)) & 1;
          g_array_append_val (out->ints, v);
        }
      return TRUE;
    case PT_INT32:
      if ((guint64) n * 4 > avail)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          gint32 v;
          memcpy (&v, p + 4 * i, 4);
          gint64 w = GINT32_FROM_LE (v);
          g_array_append_val (out->ints, w);
        }
      return TRUE;
    case PT_INT64:
      if ((guint64) n * 8 > avail)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          gint64 v;
          memcpy (&v, p + 8 * i, 8);
          v = GINT64_FROM_LE (v);
          g_array_append_val (out->ints, v);
        }
      return TRUE;
    case PT_FLOAT:
      if ((guint64) n * 4 > avail)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          float v;
          memcpy (&v, p + 4 * i, 4);
          double d = v;
          g_array_append_val (out->doubles, d);
        }
      return TRUE;
    case PT_DOUBLE:
      if ((guint64) n * 8 > avail)
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          double d;
          memcpy (&d, p + 8 * i, 8);
          g_array_append_val (out->doubles, d);
        }
      return TRUE;
    case PT_BYTE_ARRAY:
      for (gint64 i = 0; i < n; i++)
        {
          if (end - p < 4)
            return FALSE;
          guint32 l = (guint32) p[0] | ((guint32) p[1] << 8) | ((guint32) p[2] << 16) | ((guint32) p[3] << 24);
          p += 4;
          if (l > (guint32) (end - p))
            return FALSE;
          gsize len = l;
          g_ptr_array_add (out->strs, g_strndup ((const char *) p, len));
          g_array_append_val (out->lens, len);
          p += l;
        }
      return TRUE;
    default:
      return FALSE;
    }
}

/* DELTA_BINARY_PACKED: n integers into out; returns the end of the encoded
 * data (other encodings continue after it) or NULL when malformed. Sums wrap
 * like the writer's integers do. */
static const guint8 *
delta_binary_unpack (const guint8 *p, const guint8 *end, gint64 n, gint64 *out, gboolean is32)
{
  TR t = { p, end, FALSE };
  guint64 block = tr_varint (&t), minis = tr_varint (&t), total = tr_varint (&t);
  guint64 v = (guint64) tr_zigzag (&t);
  if (t.bad || block == 0 || block % 128 != 0 || minis == 0 || block % minis != 0 || (block / minis) % 32 != 0 ||
      minis > 4096 || total < (guint64) n)
    return NULL;
  guint64 per_mini = block / minis;
  gint64 got = 0;
  if (n > 0)
    out[got++] = is32 ? (gint64) (gint32) (guint32) v : (gint64) v;
  while (got < (gint64) total)
    {
      guint64 min_delta = (guint64) tr_zigzag (&t);
      if (t.bad || (guint64) (t.end - t.p) < minis)
        return NULL;
      const guint8 *widths = t.p;
      t.p += minis;
      for (guint64 m = 0; m < minis && got < (gint64) total; m++)
        {
          int bw = widths[m];
          if (bw > 64)
            return NULL;
          guint64 bytes = per_mini * (guint64) bw / 8;
          if (bytes > (guint64) (t.end - t.p))
            return NULL;
          guint64 bit = 0;
          for (guint64 k = 0; k < per_mini && got < (gint64) total; k++)
            {
              guint64 d = 0;
              for (int b = 0; b < bw; b++, bit++)
                d |= (guint64) ((t.p[bit >> 3] >> (bit & 7)) & 1) << b;
              v += min_delta + d;
              if (got < n)
                out[got] = is32 ? (gint64) (gint32) (guint32) v : (gint64) v;
              got++;
            }
          t.p += bytes;
        }
    }
  return t.p;
}

/* The DELTA and BYTE_STREAM_SPLIT encodings (what writers other than pyarrow
 * pick for ints, strings and floats). */
static gboolean
decode_other (int enc, int ptype, const guint8 *p, const guint8 *end, gint64 n, Values *out)
{
  if (n == 0)
    return TRUE;
  if (enc == ENC_DELTA_BINARY_PACKED && (ptype == PT_INT32 || ptype == PT_INT64))
    {
      g_autofree gint64 *v = g_try_new (gint64, n);
      if (!v || !delta_binary_unpack (p, end, n, v, ptype == PT_INT32))
        return FALSE;
      g_array_append_vals (out->ints, v, (guint) n);
      return TRUE;
    }
  if ((enc == ENC_DELTA_LENGTH_BYTE_ARRAY || enc == ENC_DELTA_BYTE_ARRAY) && ptype == PT_BYTE_ARRAY)
    {
      g_autofree gint64 *prefix = NULL;
      if (enc == ENC_DELTA_BYTE_ARRAY)
        {
          prefix = g_try_new (gint64, n);
          if (!prefix || !(p = delta_binary_unpack (p, end, n, prefix, TRUE)))
            return FALSE;
        }
      g_autofree gint64 *lens = g_try_new (gint64, n);
      if (!lens || !(p = delta_binary_unpack (p, end, n, lens, TRUE)))
        return FALSE;
      const char *prev = "";
      gsize prev_len = 0;
      for (gint64 i = 0; i < n; i++)
        {
          gint64 pl = prefix ? prefix[i] : 0;
          if (lens[i] < 0 || pl < 0 || (guint64) pl > prev_len || (guint64) lens[i] > (guint64) (end - p))
            return FALSE;
          gsize len = (gsize) pl + (gsize) lens[i];
          char *s = g_malloc (len + 1);
          memcpy (s, prev, (gsize) pl);
          memcpy (s + pl, p, (gsize) lens[i]);
          s[len] = '\0';
          p += lens[i];
          g_ptr_array_add (out->strs, s);
          g_array_append_val (out->lens, len);
          prev = s;
          prev_len = len;
        }
      return TRUE;
    }
  if (enc == ENC_BYTE_STREAM_SPLIT && (ptype == PT_FLOAT || ptype == PT_DOUBLE || ptype == PT_INT32 || ptype == PT_INT64))
    {
      gsize w = ptype == PT_FLOAT || ptype == PT_INT32 ? 4 : 8;
      if ((guint64) n * w > (guint64) (end - p))
        return FALSE;
      for (gint64 i = 0; i < n; i++)
        {
          guint8 b[8];
          for (gsize j = 0; j < w; j++)
            b[j] = p[j * (gsize) n + (gsize) i];
          if (ptype == PT_FLOAT)
            {
              float f;
              memcpy (&f, b, 4);
              double d = f;
              g_array_append_val (out->doubles, d);
            }
          else if (ptype == PT_DOUBLE)
            {
              double d;
              memcpy (&d, b, 8);
              g_array_append_val (out->doubles, d);
            }
          else if (ptype == PT_INT32)
            {
              gint32 x;
              memcpy (&x, b, 4);
              gint64 v = x;
              g_array_append_val (out->ints, v);
            }
          else
            {
              gint64 v;
              memcpy (&v, b, 8);
              g_array_append_val (out->ints, v);
            }
        }
      return TRUE;
    }
  return FALSE;
}

static guint8 *
decompress (const char *file, const char *col, int codec, const guint8 *src, gsize len, gsize want, GError **error)
{
  if (want > MAX_PAGE_BYTES)
    {
      corrupt (error, file, "column '%s': page of %" G_GSIZE_FORMAT " bytes is too large", col, want);
      return NULL;
    }
  guint8 *dst = g_try_malloc (MAX (want, 1));
  if (!dst)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: out of memory for a page of column '%s'", file, col);
      return NULL;
    }
  gboolean ok = FALSE;
  switch (codec)
    {
    case CODEC_NONE:
      ok = len == want;
      if (ok)
        memcpy (dst, src, len);
      break;
    case CODEC_SNAPPY:
      {
        size_t ulen = 0;
        ok = snappy_uncompressed_length ((const char *) src, len, &ulen) == SNAPPY_OK && ulen == want;
        size_t out = want;
        ok = ok && snappy_uncompress ((const char *) src, len, (char *) dst, &out) == SNAPPY_OK && out == want;
      }
      break;
    case CODEC_GZIP:
      {
        z_stream z = { 0 };
        if (inflateInit2 (&z, 15 + 32) != Z_OK) /* gzip or zlib header */
          break;
        z.next_in = (Bytef *) src;
        z.avail_in = (uInt) len;
        z.next_out = dst;
        z.avail_out = (uInt) want;
        int rc = inflate (&z, Z_FINISH);
        ok = rc == Z_STREAM_END && z.total_out == want;
        inflateEnd (&z);
      }
      break;
    case CODEC_ZSTD:
      {
        size_t r = ZSTD_decompress (dst, want, src, len);
        ok = !ZSTD_isError (r) && r == want;
      }
      break;
    default:
      g_free (dst);
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s' uses %s compression; supported: "
                   "none, snappy, gzip, zstd", file, col, codec_name (codec));
      return NULL;
    }
  if (!ok)
    {
      g_free (dst);
      corrupt (error, file, "column '%s': a %s page does not decompress to its %" G_GSIZE_FORMAT " bytes", col,
               codec_name (codec), want);
      return NULL;
    }
  return dst;
}

typedef struct {
  int type, uncompressed, compressed;
  /* data page v1/v2 and dictionary page */
  int num_values, encoding, def_enc, rep_enc;
  int num_nulls, num_rows, def_len, rep_len;
  gboolean is_compressed;
} PageHeader;

static void
parse_page_sub (TR *t, PageHeader *h, int which)
{
  int last = 0, type, id;
  while (tr_field (t, &last, &type, &id))
    {
      if (type == T_TRUE || type == T_FALSE)
        {
          if (which == PAGE_DATA_V2 && id == 7)
            h->is_compressed = type == T_TRUE;
          continue;
        }
      if (type != T_I32)
        {
          tr_skip (t, type, 2);
          continue;
        }
      int v = (int) tr_zigzag (t);
      if (which == PAGE_DATA)
        switch (id)
          {
          case 1: h->num_values = v; break;
          case 2: h->encoding = v; break;
          case 3: h->def_enc = v; break;
          case 4: h->rep_enc = v; break;
          }
      else if (which == PAGE_DICT)
        switch (id)
          {
          case 1: h->num_values = v; break;
          case 2: h->encoding = v; break;
          }
      else
        switch (id)
          {
          case 1: h->num_values = v; break;
          case 2: h->num_nulls = v; break;
          case 3: h->num_rows = v; break;
          case 4: h->encoding = v; break;
          case 5: h->def_len = v; break;
          case 6: h->rep_len = v; break;
          }
    }
}

static gboolean
parse_page_header (TR *t, PageHeader *h)
{
  memset (h, 0, sizeof *h);
  h->type = -1;
  h->is_compressed = TRUE;
  int last = 0, type, id;
  while (tr_field (t, &last, &type, &id))
    switch (id)
      {
      case 1: h->type = (int) tr_int (t, type); break;
      case 2: h->uncompressed = (int) tr_int (t, type); break;
      case 3: h->compressed = (int) tr_int (t, type); break;
      case 5:
        if (type == T_STRUCT)
          parse_page_sub (t, h, PAGE_DATA);
        else
          t->bad = TRUE;
        break;
      case 7:
        if (type == T_STRUCT)
          parse_page_sub (t, h, PAGE_DICT);
        else
          t->bad = TRUE;
        break;
      case 8:
        if (type == T_STRUCT)
          parse_page_sub (t, h, PAGE_DATA_V2);
        else
          t->bad = TRUE;
        break;
      default: tr_skip (t, type, 1);
      }
  return !t->bad && h->type >= 0 && h->compressed >= 0 && h->uncompressed >= 0;
}

/* Reads one column chunk, appending levels and non-null values. */
static gboolean
read_chunk (HnParquetFile *f, Leaf *leaf, ChunkMeta *c, GArray *defs, GArray *reps, Values *vals, GError **error)
{
  const char *col = leaf->path;
  HnParquetType htype;
  switch (leaf->type)
    {
    case PT_BOOLEAN: htype = HN_PARQUET_BOOLEAN; break;
    case PT_INT32: htype = HN_PARQUET_INT32; break;
    case PT_INT64: htype = HN_PARQUET_INT64; break;
    case PT_FLOAT: htype = HN_PARQUET_FLOAT; break;
    case PT_DOUBLE: htype = HN_PARQUET_DOUBLE; break;
    case PT_BYTE_ARRAY: htype = HN_PARQUET_BYTE_ARRAY; break;
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s' has physical type %s, which is not supported",
                   f->path, col, leaf->type == PT_INT96 ? "INT96" : leaf->type == PT_FIXED ? "FIXED_LEN_BYTE_ARRAY" : "?");
      return FALSE;
    }
  Values dict;
  values_init (&dict, htype);
  gboolean have_dict = FALSE, ok = TRUE;
  gint64 start = c->dictionary_page_offset > 0 ? MIN (c->dictionary_page_offset, c->data_page_offset) : c->data_page_offset;
  const guint8 *p = f->data + start, *end = p + c->total_compressed_size;
  gint64 seen = 0;
  int dbw = bit_width_of (leaf->max_def), rbw = bit_width_of (leaf->max_rep);
  while (ok && seen < c->num_values)
    {
      if (p >= end)
        {
          ok = corrupt (error, f->path, "column '%s': the chunk ends after %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " values",
                        col, seen, c->num_values);
          break;
        }
      TR t = { p, end, FALSE };
      PageHeader h;
      if (!parse_page_header (&t, &h) || h.compressed > end - t.p)
        {
          ok = corrupt (error, f->path, "column '%s': malformed page header", col);
          break;
        }
      const guint8 *body = t.p;
      p = t.p + h.compressed;
      if (h.type == PAGE_INDEX)
        continue;
      if (h.type == PAGE_DICT)
        {
          if (h.encoding != ENC_PLAIN && h.encoding != ENC_PLAIN_DICTIONARY)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s': dictionary page encoded as %s",
                           f->path, col, encoding_name (h.encoding));
              ok = FALSE;
              break;
            }
          g_autofree guint8 *raw = decompress (f->path, col, c->codec, body, (gsize) h.compressed, (gsize) h.uncompressed, error);
          if (!raw)
            {
              ok = FALSE;
              break;
            }
          values_clear (&dict);
          values_init (&dict, htype);
          if (h.num_values < 0 || !decode_plain (leaf->type, raw, raw + h.uncompressed, h.num_values, &dict))
            {
              ok = corrupt (error, f->path, "column '%s': malformed dictionary page", col);
              break;
            }
          have_dict = TRUE;
          continue;
        }
      if (h.type != PAGE_DATA && h.type != PAGE_DATA_V2)
        {
          ok = corrupt (error, f->path, "column '%s': unknown page type %d", col, h.type);
          break;
        }
      gint64 n = h.num_values;
      if (n < 0 || n > MAX_PAGE_VALUES || seen + n > c->num_values)
        {
          ok = corrupt (error, f->path, "column '%s': page value count %" G_GINT64_FORMAT " is out of range", col, n);
          break;
        }
      g_autofree guint8 *raw = NULL;
      const guint8 *q, *qend;
      g_autofree guint32 *lv = g_try_new (guint32, MAX (n, 1));
      if (!lv)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: out of memory reading column '%s'", f->path, col);
          ok = FALSE;
          break;
        }
      guint dstart = defs->len;
      if (h.type == PAGE_DATA)
        {
          raw = decompress (f->path, col, c->codec, body, (gsize) h.compressed, (gsize) h.uncompressed, error);
          if (!raw)
            {
              ok = FALSE;
              break;
            }
          q = raw;
          qend = raw + h.uncompressed;
          for (int pass = 0; pass < 2 && ok; pass++)
            {
              int maxl = pass == 0 ? leaf->max_rep : leaf->max_def;
              int bw = pass == 0 ? rbw : dbw;
              int enc = pass == 0 ? h.rep_enc : h.def_enc;
              GArray *dst = pass == 0 ? reps : defs;
              if (maxl == 0)
                {
                  guint32 z = 0;
                  for (gint64 i = 0; i < n; i++)
                    g_array_append_val (dst, z);
                  continue;
                }
              if (enc != ENC_RLE)
                {
                  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s': levels encoded as %s", f->path,
                               col, encoding_name (enc));
                  ok = FALSE;
                  break;
                }
              if (qend - q < 4)
                {
                  ok = corrupt (error, f->path, "column '%s': truncated levels", col);
                  break;
                }
              guint32 len = (guint32) q[0] | ((guint32) q[1] << 8) | ((guint32) q[2] << 16) | ((guint32) q[3] << 24);
              q += 4;
              if (len > (guint32) (qend - q) || !rle_decode (q, q + len, bw, lv, n))
                {
                  ok = corrupt (error, f->path, "column '%s': malformed levels", col);
                  break;
                }
              q += len;
              g_array_append_vals (dst, lv, (guint) n);
            }
        }
      else
        {
          /* v2: levels first, never compressed; then the (maybe compressed) values */
          if (h.rep_len < 0 || h.def_len < 0 || (gint64) h.rep_len + h.def_len > h.compressed)
            {
              ok = corrupt (error, f->path, "column '%s': bad level lengths in a v2 page", col);
              break;
            }
          const guint8 *lp = body;
          for (int pass = 0; pass < 2 && ok; pass++)
            {
              int maxl = pass == 0 ? leaf->max_rep : leaf->max_def;
              int len = pass == 0 ? h.rep_len : h.def_len;
              GArray *dst = pass == 0 ? reps : defs;
              if (maxl == 0)
                {
                  guint32 z = 0;
                  for (gint64 i = 0; i < n; i++)
                    g_array_append_val (dst, z);
                }
              else if (!rle_decode (lp, lp + len, pass == 0 ? rbw : dbw, lv, n))
                ok = corrupt (error, f->path, "column '%s': malformed levels", col);
              else
                g_array_append_vals (dst, lv, (guint) n);
              lp += len;
            }
          if (!ok)
            break;
          gsize vlen = (gsize) (h.compressed - h.rep_len - h.def_len);
          gsize ulen = (gsize) h.uncompressed - (gsize) h.rep_len - (gsize) h.def_len;
          if (h.uncompressed < h.rep_len + h.def_len)
            {
              ok = corrupt (error, f->path, "column '%s': bad sizes in a v2 page", col);
              break;
            }
          raw = decompress (f->path, col, h.is_compressed ? c->codec : CODEC_NONE, lp, vlen, ulen, error);
          if (!raw)
            {
              ok = FALSE;
              break;
            }
          q = raw;
          qend = raw + ulen;
        }
      if (!ok)
        break;
      gint64 nonnull = 0;
      for (guint i = dstart; i < defs->len; i++)
        {
          guint32 d = g_array_index (defs, guint32, i);
          if ((int) d > leaf->max_def)
            {
              ok = corrupt (error, f->path, "column '%s': definition level %u above the maximum %d", col, d, leaf->max_def);
              break;
            }
          nonnull += (int) d == leaf->max_def;
        }
      for (guint i = dstart; ok && i < reps->len; i++)
        if ((int) g_array_index (reps, guint32, i) > leaf->max_rep)
          ok = corrupt (error, f->path, "column '%s': repetition level above the maximum", col);
      if (!ok)
        break;
      if (h.encoding == ENC_PLAIN)
        {
          if (!decode_plain (leaf->type, q, qend, nonnull, vals))
            ok = corrupt (error, f->path, "column '%s': PLAIN values run past the page", col);
        }
      else if (h.encoding == ENC_PLAIN_DICTIONARY || h.encoding == ENC_RLE_DICTIONARY)
        {
          if (!have_dict)
            {
              ok = corrupt (error, f->path, "column '%s': dictionary-encoded page without a dictionary", col);
              break;
            }
          g_autofree guint32 *idx = g_try_new (guint32, MAX (nonnull, 1));
          if (nonnull > 0 && (qend - q < 1 || !idx || !rle_decode (q + 1, qend, q[0], idx, nonnull)))
            {
              ok = corrupt (error, f->path, "column '%s': malformed dictionary indices", col);
              break;
            }
          gint64 dn = values_len (&dict);
          for (gint64 i = 0; i < nonnull; i++)
            {
              if (idx[i] >= dn)
                {
                  ok = corrupt (error, f->path, "column '%s': dictionary index %u beyond the %" G_GINT64_FORMAT " entries",
                                col, idx[i], dn);
                  break;
                }
              values_append_from (vals, &dict, idx[i]);
            }
        }
      else if (h.encoding == ENC_RLE && leaf->type == PT_BOOLEAN)
        {
          g_autofree guint32 *bits = g_try_new (guint32, MAX (nonnull, 1));
          /* v2 booleans: 4-byte length, then RLE with bit width 1 */
          if (qend - q < 4 || !bits)
            ok = corrupt (error, f->path, "column '%s': truncated RLE booleans", col);
          else
            {
              guint32 len = (guint32) q[0] | ((guint32) q[1] << 8) | ((guint32) q[2] << 16) | ((guint32) q[3] << 24);
              if (len > (guint32) (qend - q - 4) || !rle_decode (q + 4, q + 4 + len, 1, bits, nonnull))
                ok = corrupt (error, f->path, "column '%s': malformed RLE booleans", col);
              for (gint64 i = 0; ok && i < nonnull; i++)
                {
                  gint64 v = bits[i];
                  g_array_append_val (vals->ints, v);
                }
            }
        }
      else if (h.encoding == ENC_DELTA_BINARY_PACKED || h.encoding == ENC_DELTA_LENGTH_BYTE_ARRAY ||
               h.encoding == ENC_DELTA_BYTE_ARRAY || h.encoding == ENC_BYTE_STREAM_SPLIT)
        {
          if (!decode_other (h.encoding, leaf->type, q, qend, nonnull, vals))
            ok = corrupt (error, f->path, "column '%s': malformed %s values", col, encoding_name (h.encoding));
        }
      else
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s' uses the %s encoding, which is not supported "
                       "(PLAIN, dictionary, DELTA and BYTE_STREAM_SPLIT encodings are)", f->path, col,
                       encoding_name (h.encoding));
          ok = FALSE;
        }
      seen += n;
    }
  values_clear (&dict);
  return ok;
}

void
hn_parquet_column_free (HnParquetColumn *col)
{
  if (!col)
    return;
  g_free (col->row_valid);
  g_free (col->value_valid);
  g_free (col->offsets);
  g_free (col->ints);
  g_free (col->doubles);
  if (col->strings)
    for (gint64 i = 0; i < col->n_values; i++)
      g_free (col->strings[i]);
  g_free (col->strings);
  g_free (col->lens);
  g_free (col);
}

/* Appends one value slot to the output column arrays (k < 0: a null slot). */
static void
out_push (GArray *ints, GArray *dbls, GPtrArray *strs, GArray *lens, HnParquetType type, const Values *v, gint64 k)
{
  switch (type)
    {
    case HN_PARQUET_FLOAT:
    case HN_PARQUET_DOUBLE:
      {
        double d = k >= 0 ? g_array_index (v->doubles, double, k) : 0;
        g_array_append_val (dbls, d);
      }
      break;
    case HN_PARQUET_BYTE_ARRAY:
      {
        gsize l = k >= 0 ? g_array_index (v->lens, gsize, k) : 0;
        g_ptr_array_add (strs, k >= 0 ? g_steal_pointer (&v->strs->pdata[k]) : NULL);
        g_array_append_val (lens, l);
      }
      break;
    default:
      {
        gint64 x = k >= 0 ? g_array_index (v->ints, gint64, k) : 0;
        g_array_append_val (ints, x);
      }
    }
}

HnParquetColumn *
hn_parquet_read_column (HnParquetFile *f, guint i, int rg, GError **error)
{
  g_return_val_if_fail (i < f->leaves->len, NULL);
  g_return_val_if_fail (rg < (int) f->n_rgs, NULL);
  Leaf *leaf = f->leaves->pdata[i];
  if (leaf->max_rep > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s' is a list nested in a list, which is not supported",
                   f->path, leaf->path);
      return NULL;
    }
  HnParquetType type;
  switch (leaf->type)
    {
    case PT_BOOLEAN: type = HN_PARQUET_BOOLEAN; break;
    case PT_INT32: type = HN_PARQUET_INT32; break;
    case PT_INT64: type = HN_PARQUET_INT64; break;
    case PT_FLOAT: type = HN_PARQUET_FLOAT; break;
    case PT_DOUBLE: type = HN_PARQUET_DOUBLE; break;
    case PT_BYTE_ARRAY: type = HN_PARQUET_BYTE_ARRAY; break;
    default:
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: column '%s' has physical type %s, which is not supported",
                   f->path, leaf->path, leaf->type == PT_INT96 ? "INT96" : leaf->type == PT_FIXED ? "FIXED_LEN_BYTE_ARRAY" : "?");
      return NULL;
    }
  g_autoptr (GArray) defs = g_array_new (FALSE, FALSE, sizeof (guint32));
  g_autoptr (GArray) reps = g_array_new (FALSE, FALSE, sizeof (guint32));
  Values vals;
  values_init (&vals, type);
  gint64 want_rows = 0;
  gboolean ok = TRUE;
  for (guint r = 0; ok && r < f->n_rgs; r++)
    {
      if (rg >= 0 && (guint) rg != r)
        continue;
      want_rows += f->rgs[r].num_rows;
      ok = read_chunk (f, leaf, &f->rgs[r].chunks[i], defs, reps, &vals, error);
    }
  if (!ok)
    {
      values_clear (&vals);
      return NULL;
    }
  g_autoptr (GArray) row_valid = g_array_new (FALSE, FALSE, 1);
  g_autoptr (GArray) value_valid = g_array_new (FALSE, FALSE, 1);
  g_autoptr (GArray) offsets = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autoptr (GArray) ints = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autoptr (GArray) dbls = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GPtrArray) strs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) lens = g_array_new (FALSE, FALSE, sizeof (gsize));
  gint64 k = 0, nvals = values_len (&vals), nv = 0;
  for (guint e = 0; e < defs->len; e++)
    {
      int d = (int) g_array_index (defs, guint32, e);
      int rp = (int) g_array_index (reps, guint32, e);
      gboolean present = d == leaf->max_def;
      if (present && k >= nvals)
        {
          corrupt (error, f->path, "column '%s': fewer values than definition levels say", leaf->path);
          values_clear (&vals);
          return NULL;
        }
      if (leaf->max_rep == 0)
        {
          guint8 rv = present;
          g_array_append_val (row_valid, rv);
          g_array_append_val (value_valid, rv);
          out_push (ints, dbls, strs, lens, type, &vals, present ? k++ : -1);
          nv++;
          continue;
        }
      if (rp == 0)
        {
          g_array_append_val (offsets, nv);
          guint8 rv = d >= leaf->rep_def - 1;
          g_array_append_val (row_valid, rv);
        }
      else if (offsets->len == 0)
        {
          corrupt (error, f->path, "column '%s': the first value continues a list", leaf->path);
          values_clear (&vals);
          return NULL;
        }
      if (d >= leaf->rep_def)
        {
          guint8 vv = present;
          g_array_append_val (value_valid, vv);
          out_push (ints, dbls, strs, lens, type, &vals, present ? k++ : -1);
          nv++;
        }
    }
  values_clear (&vals);
  gint64 n_rows = leaf->max_rep == 0 ? (gint64) defs->len : (gint64) offsets->len;
  if (n_rows != want_rows)
    {
      corrupt (error, f->path, "column '%s' has %" G_GINT64_FORMAT " rows, the row groups say %" G_GINT64_FORMAT,
               leaf->path, n_rows, want_rows);
      return NULL;
    }
  if (k != nvals)
    {
      corrupt (error, f->path, "column '%s': more values than definition levels say", leaf->path);
      return NULL;
    }
  HnParquetColumn *col = g_new0 (HnParquetColumn, 1);
  col->type = type;
  col->is_list = leaf->max_rep == 1;
  col->n_rows = n_rows;
  col->n_values = nv;
  col->row_valid = (guint8 *) g_array_free (g_steal_pointer (&row_valid), FALSE);
  col->value_valid = (guint8 *) g_array_free (g_steal_pointer (&value_valid), FALSE);
  if (col->is_list)
    {
      g_array_append_val (offsets, nv);
      col->offsets = (gint64 *) g_array_free (g_steal_pointer (&offsets), FALSE);
    }
  switch (type)
    {
    case HN_PARQUET_FLOAT:
    case HN_PARQUET_DOUBLE:
      col->doubles = (double *) g_array_free (g_steal_pointer (&dbls), FALSE);
      break;
    case HN_PARQUET_BYTE_ARRAY:
      g_ptr_array_set_free_func (strs, NULL);
      col->strings = (char **) g_ptr_array_free (g_steal_pointer (&strs), FALSE);
      col->lens = (gsize *) g_array_free (g_steal_pointer (&lens), FALSE);
      break;
    default:
      col->ints = (gint64 *) g_array_free (g_steal_pointer (&ints), FALSE);
    }
  return col;
}

/* ------------------------------------------------------------ rows as JSON */

static JsonNode *
value_node (const HnParquetColumn *c, gint64 k)
{
  JsonNode *n = json_node_new (JSON_NODE_VALUE);
  if (!c->value_valid[k])
    {
      json_node_init_null (n);
      return n;
    }
  switch (c->type)
    {
    case HN_PARQUET_BOOLEAN:
      json_node_set_boolean (n, c->ints[k] != 0);
      break;
    case HN_PARQUET_INT32:
    case HN_PARQUET_INT64:
      json_node_set_int (n, c->ints[k]);
      break;
    case HN_PARQUET_FLOAT:
    case HN_PARQUET_DOUBLE:
      json_node_set_double (n, c->doubles[k]);
      break;
    case HN_PARQUET_BYTE_ARRAY:
      if (g_utf8_validate (c->strings[k], (gssize) c->lens[k], NULL) && strlen (c->strings[k]) == c->lens[k])
        json_node_set_string (n, c->strings[k]);
      else
        json_node_init_null (n); /* binary: not text a dataset row can use */
      break;
    }
  return n;
}

static const char *
last_component (const char *path)
{
  const char *d = strrchr (path, '.');
  return d ? d + 1 : path;
}

JsonArray *
hn_parquet_read_json_rows (HnParquetFile *f, int rg, GError **error)
{
  g_return_val_if_fail (rg < (int) f->n_rgs, NULL);
  gint64 n_rows = rg >= 0 ? f->rgs[rg].num_rows : f->num_rows;
  guint n_fields = f->fields->len - 1;
  g_autoptr (GPtrArray) objs = g_ptr_array_new_with_free_func ((GDestroyNotify) json_object_unref);
  for (gint64 r = 0; r < n_rows; r++)
    g_ptr_array_add (objs, json_object_new ());
  for (guint fi = 0; fi < n_fields; fi++)
    {
      const char *field = f->fields->pdata[fi];
      g_autoptr (GPtrArray) cols = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_parquet_column_free);
      g_autoptr (GPtrArray) names = g_ptr_array_new ();
      gboolean simple = FALSE;
      for (guint i = 0; i < f->leaves->len; i++)
        {
          Leaf *l = f->leaves->pdata[i];
          if (l->top != (int) fi)
            continue;
          HnParquetColumn *c = hn_parquet_read_column (f, i, rg, error);
          if (!c)
            return NULL;
          g_ptr_array_add (cols, c);
          g_ptr_array_add (names, (gpointer) last_component (l->path));
          simple = strcmp (l->path, field) == 0;
        }
      gboolean all_list = TRUE, none_list = TRUE;
      for (guint i = 0; i < cols->len; i++)
        {
          HnParquetColumn *c = cols->pdata[i];
          all_list = all_list && c->is_list;
          none_list = none_list && !c->is_list;
        }
      /* a list of structs: the leaves' lists must line up element by element */
      if (all_list && cols->len > 1)
        for (guint i = 1; i < cols->len; i++)
          {
            HnParquetColumn *a = cols->pdata[0], *b = cols->pdata[i];
            if (memcmp (a->offsets, b->offsets, sizeof (gint64) * (gsize) (n_rows + 1)) != 0)
              all_list = FALSE;
          }
      if (!all_list && !none_list)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: field '%s' mixes lists and plain values; only "
                       "scalars, lists of scalars, lists of structs and structs are read", f->path, field);
          return NULL;
        }
      for (gint64 r = 0; r < n_rows; r++)
        {
          JsonObject *o = objs->pdata[r];
          HnParquetColumn *c0 = cols->pdata[0];
          JsonNode *node;
          if (!c0->row_valid[r])
            node = json_node_new (JSON_NODE_NULL);
          else if (none_list && cols->len == 1 && simple)
            node = value_node (c0, r);
          else if (none_list)
            {
              JsonObject *s = json_object_new ();
              for (guint i = 0; i < cols->len; i++)
                json_object_set_member (s, names->pdata[i], value_node (cols->pdata[i], r));
              node = json_node_init_object (json_node_alloc (), s);
              json_object_unref (s);
            }
          else
            {
              JsonArray *a = json_array_new ();
              for (gint64 k = c0->offsets[r]; k < c0->offsets[r + 1]; k++)
                {
                  if (cols->len == 1)
                    {
                      json_array_add_element (a, value_node (c0, k));
                      continue;
                    }
                  JsonObject *s = json_object_new ();
                  for (guint i = 0; i < cols->len; i++)
                    json_object_set_member (s, names->pdata[i], value_node (cols->pdata[i], k));
                  json_array_add_object_element (a, s);
                }
              node = json_node_init_array (json_node_alloc (), a);
              json_array_unref (a);
            }
          json_object_set_member (o, field, node);
        }
    }
  JsonArray *rows = json_array_sized_new ((guint) n_rows);
  for (gint64 r = 0; r < n_rows; r++)
    json_array_add_object_element (rows, json_object_ref (objs->pdata[r]));
  return rows;
}
