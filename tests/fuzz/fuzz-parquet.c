/* Parquet: footer (Thrift compact), column chunks, pages (v1/v2, every
 * encoding and codec we read), then the rows as JSON objects. */
#include "fuzz-common.h"
#include "formats/parquet.h"

#include <json-glib/json-glib.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("data.parquet", data, size);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnParquetFile) f = hn_parquet_open (path, &error);
  if (!f)
    return 0;
  guint n_rg = MIN (hn_parquet_get_n_row_groups (f), 4);
  for (guint rg = 0; rg < n_rg; rg++)
    {
      for (guint c = 0; c < MIN (hn_parquet_get_n_columns (f), 8); c++)
        {
          g_autoptr (GError) e2 = NULL;
          HnParquetColumn *col = hn_parquet_read_column (f, c, (int) rg, &e2);
          if (col)
            hn_parquet_column_free (col);
          (void) hn_parquet_get_column_path (f, c);
        }
      g_autoptr (GError) e3 = NULL;
      JsonArray *rows = hn_parquet_read_json_rows (f, (int) rg, &e3);
      if (rows)
        json_array_unref (rows);
    }
  return 0;
}
