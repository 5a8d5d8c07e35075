/* Parquet reader for datasets: footer and Thrift compact metadata, row
 * groups, data pages v1 and v2, PLAIN and dictionary encodings, RLE /
 * bit-packed levels, DELTA_* and BYTE_STREAM_SPLIT encodings, optional
 * (null) values, BYTE_ARRAY strings, BOOLEAN,
 * INT32/INT64, FLOAT/DOUBLE, and one level of lists (list<int> for
 * input_ids, list<struct<...>> for chat messages: each leaf of the struct is
 * read as a per-row list), with compression none/snappy/gzip/zstd.
 *
 * Columns are read per leaf ("text", "input_ids.list.element",
 * "messages.list.element.content"). Anything else (nested lists, INT96,
 * FIXED_LEN_BYTE_ARRAY, LZ4/Brotli) fails closed with
 * HN_ERROR_UNSUPPORTED naming the file, the column and the feature; a
 * malformed file is HN_ERROR_CORRUPT naming the file and what is wrong. */
#pragma once
#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef enum {
  HN_PARQUET_BOOLEAN,   /* -> ints (0/1) */
  HN_PARQUET_INT32,     /* -> ints */
  HN_PARQUET_INT64,     /* -> ints */
  HN_PARQUET_FLOAT,     /* -> doubles */
  HN_PARQUET_DOUBLE,    /* -> doubles */
  HN_PARQUET_BYTE_ARRAY /* -> strings (NUL-terminated copies; lengths in lens) */
} HnParquetType;

typedef struct {
  HnParquetType type;
  gboolean is_list;     /* one value list per row */
  gint64 n_rows;
  guint8 *row_valid;    /* n_rows: 0 where the row's value (or list) is null */
  gint64 n_values;      /* values (all rows' list elements for a list) */
  guint8 *value_valid;  /* n_values: 0 for a null element */
  gint64 *offsets;      /* lists: n_rows + 1, row r is values [offsets[r], offsets[r+1]) */
  gint64 *ints;
  double *doubles;
  char **strings;
  gsize *lens;
} HnParquetColumn;

void hn_parquet_column_free (HnParquetColumn *col);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnParquetColumn, hn_parquet_column_free)

typedef struct _HnParquetFile HnParquetFile;

HnParquetFile *hn_parquet_open (const char *path, GError **error);
void hn_parquet_close (HnParquetFile *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnParquetFile, hn_parquet_close)

gint64 hn_parquet_get_n_rows (HnParquetFile *f);
guint hn_parquet_get_n_row_groups (HnParquetFile *f);
gint64 hn_parquet_get_row_group_rows (HnParquetFile *f, guint rg);

/* Leaf columns in schema order, named by their dotted path. */
guint hn_parquet_get_n_columns (HnParquetFile *f);
const char *hn_parquet_get_column_path (HnParquetFile *f, guint i);
/* The leaf for `name`: an exact dotted path, or a top-level field whose only
 * leaf it is (so "input_ids" finds "input_ids.list.element"). -1 if none. */
int hn_parquet_find_column (HnParquetFile *f, const char *name);
/* Top-level field names (NULL-terminated, owned by f). */
const char *const *hn_parquet_get_field_names (HnParquetFile *f);

/* Reads leaf `i` of one row group, or of all row groups (rg = -1). */
HnParquetColumn *hn_parquet_read_column (HnParquetFile *f, guint i, int rg, GError **error);

/* Rows of one row group (rg >= 0) or of the whole file (rg = -1) as JSON
 * objects, the shape a JSONL dataset row has: scalars, null, lists of
 * scalars (input_ids), lists of structs (messages: [{role, content}]) and
 * structs. Nulls inside are JSON null. Top-level fields it cannot shape this
 * way fail with HN_ERROR_UNSUPPORTED naming them. */
JsonArray *hn_parquet_read_json_rows (HnParquetFile *f, int rg, GError **error);

G_END_DECLS
