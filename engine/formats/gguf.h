/* GGUF: llama.cpp's model file (versions 2 and 3, little-endian), read
 * through mmap and written atomically.
 *
 * Layout: "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv key/value
 * pairs (a key is a u64-length string; a value a u32 type and its payload,
 * arrays as u32 element type + u64 count + elements); n_tensors tensor
 * infos (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); the
 * data section, aligned to general.alignment (default 32), with every
 * tensor's offset relative to it and aligned too.
 *
 * Reading validates everything before a value or tensor is exposed: counts
 * and lengths bounded by what is left of the file, known value and tensor
 * types, at most 4 dimensions, ne[0] a multiple of the type's block, tensor
 * extents inside the file, aligned and not overlapping, keys and tensor
 * names unique. A problem is an HN_ERROR_CORRUPT error naming the file and
 * the key or tensor (HN_ERROR_UNSUPPORTED for a valid file we do not read:
 * big-endian, version 1, split files).
 *
 * ggml's dimension order is innermost first: ne[0] is the row length. The
 * engine's [rows, cols] shape of a matrix is [ne[1], ne[0]].
 *
 * Tensor data points into the read-only mapping and stays valid until
 * hn_gguf_free(); it is aligned to the file's alignment relative to the start
 * of the mapping (page aligned), so at least 8 bytes for any valid file. */
#pragma once
#include <glib.h>
#include <stdint.h>

#include "tensor/ggml-quants.h"

G_BEGIN_DECLS

typedef enum {
  HN_GGUF_UINT8 = 0,
  HN_GGUF_INT8 = 1,
  HN_GGUF_UINT16 = 2,
  HN_GGUF_INT16 = 3,
  HN_GGUF_UINT32 = 4,
  HN_GGUF_INT32 = 5,
  HN_GGUF_FLOAT32 = 6,
  HN_GGUF_BOOL = 7,
  HN_GGUF_STRING = 8,
  HN_GGUF_ARRAY = 9,
  HN_GGUF_UINT64 = 10,
  HN_GGUF_INT64 = 11,
  HN_GGUF_FLOAT64 = 12,
  HN_GGUF_N_VALUE_TYPES
} HnGgufValueType;

const char *hn_gguf_value_type_name (HnGgufValueType t);

#define HN_GGUF_MAX_DIMS 4
#define HN_GGUF_DEFAULT_ALIGNMENT 32
/* ggml's GGML_MAX_NAME is 64 bytes with the NUL. */
#define HN_GGUF_MAX_NAME 63

/* One metadata value. Strings are NUL-terminated copies (a string holding a
 * NUL byte is refused); arrays of numbers point into the mapping (read them
 * with hn_gguf_kv_array_* which copy, since they may be unaligned). */
typedef struct {
  const char *key;
  HnGgufValueType type;
  HnGgufValueType elem_type;  /* arrays */
  guint64 n;                  /* array length (1 for a scalar) */
  union {
    guint64 u;                /* unsigned and bool */
    gint64 i;                 /* signed */
    double f;                 /* floats */
  } v;
  const char *str;            /* STRING */
  const char *const *strs;    /* array of STRING: n entries */
  const guint8 *raw;          /* array of numbers: n elements in the mapping */
} HnGgufKv;

typedef struct {
  const char *name;
  HnGgmlType type;
  guint n_dims;
  gint64 ne[HN_GGUF_MAX_DIMS]; /* unused dims are 1 */
  gint64 n_elements;
  guint64 offset;              /* from the start of the data section */
  const void *data;
  gsize nbytes;
} HnGgufTensor;

typedef struct _HnGguf HnGguf;

/* `path`: a .gguf file or a folder holding exactly one .gguf file. */
HnGguf *hn_gguf_open (const char *path, GError **error);
/* Same from memory (copied); `name` stands for the file in messages. */
HnGguf *hn_gguf_open_from_data (const void *data, gsize len, const char *name, GError **error);
void hn_gguf_free (HnGguf *g);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnGguf, hn_gguf_free)

/* The file read (resolved from a folder). */
const char *hn_gguf_get_path (HnGguf *g);
guint32 hn_gguf_get_version (HnGguf *g);
guint32 hn_gguf_get_alignment (HnGguf *g);

/* Key/value pairs in file order. */
guint hn_gguf_get_n_kv (HnGguf *g);
const HnGgufKv *hn_gguf_get_kv (HnGguf *g, guint i);
const HnGgufKv *hn_gguf_find (HnGguf *g, const char *key);

/* Typed getters: FALSE when absent; a value of the wrong type is an
 * HN_ERROR_CORRUPT error naming file and key (and FALSE). Integers accept
 * any integer type whose value fits; floats accept float32/float64. */
gboolean hn_gguf_get_int (HnGguf *g, const char *key, gint64 *out, GError **error);
gboolean hn_gguf_get_float (HnGguf *g, const char *key, double *out, GError **error);
gboolean hn_gguf_get_bool (HnGguf *g, const char *key, gboolean *out, GError **error);
/* NULL when absent or not a string (error set in the second case). */
const char *hn_gguf_get_string (HnGguf *g, const char *key, GError **error);
/* An array of `elem` elements (any integer type for HN_GGUF_INT64, any float
 * type for HN_GGUF_FLOAT64): NULL when absent; wrong type is an error. */
const HnGgufKv *hn_gguf_get_array (HnGguf *g, const char *key, HnGgufValueType elem, GError **error);

/* Array element i as int64 / double (any numeric element type). */
gint64 hn_gguf_kv_array_int (const HnGgufKv *kv, guint64 i);
double hn_gguf_kv_array_float (const HnGgufKv *kv, guint64 i);

/* Tensors in file order. */
guint hn_gguf_get_n_tensors (HnGguf *g);
const HnGgufTensor *hn_gguf_get_tensor (HnGguf *g, guint i);
const HnGgufTensor *hn_gguf_find_tensor (HnGguf *g, const char *name);

/* Dequantizes a whole tensor into dst (n_elements floats). */
gboolean hn_gguf_tensor_to_f32 (HnGguf *g, const HnGgufTensor *t, float *dst, GError **error);

/* ---- writer ---- */

typedef struct _HnGgufWriter HnGgufWriter;

HnGgufWriter *hn_gguf_writer_new (void);
void hn_gguf_writer_free (HnGgufWriter *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnGgufWriter, hn_gguf_writer_free)

/* Metadata, kept in insertion order; setting a key again replaces its value
 * in place. general.alignment (u32, a power of two) changes the layout. */
void hn_gguf_writer_set_u32 (HnGgufWriter *w, const char *key, guint32 v);
void hn_gguf_writer_set_i32 (HnGgufWriter *w, const char *key, gint32 v);
void hn_gguf_writer_set_u64 (HnGgufWriter *w, const char *key, guint64 v);
void hn_gguf_writer_set_f32 (HnGgufWriter *w, const char *key, float v);
void hn_gguf_writer_set_bool (HnGgufWriter *w, const char *key, gboolean v);
void hn_gguf_writer_set_string (HnGgufWriter *w, const char *key, const char *v);
void hn_gguf_writer_set_string_array (HnGgufWriter *w, const char *key, const char *const *v, gsize n);
void hn_gguf_writer_set_i32_array (HnGgufWriter *w, const char *key, const gint32 *v, gsize n);
void hn_gguf_writer_set_f32_array (HnGgufWriter *w, const char *key, const float *v, gsize n);

/* Adds a tensor: ne in ggml order (ne[0] innermost), `data` of
 * hn_ggml_row_size (type, ne[0]) x prod(ne[1..]) bytes, copied or (copy =
 * FALSE) borrowed until the writer is freed. A bad name, shape or size is
 * HN_ERROR_INVALID_ARGUMENT. */
gboolean hn_gguf_writer_add_tensor (HnGgufWriter *w, const char *name, HnGgmlType type, guint n_dims,
                                    const gint64 *ne, const void *data, gsize nbytes, gboolean copy,
                                    GError **error);
/* Same, taking ownership of `data` (g_free). */
gboolean hn_gguf_writer_add_tensor_take (HnGgufWriter *w, const char *name, HnGgmlType type, guint n_dims,
                                         const gint64 *ne, void *data, gsize nbytes, GError **error);

/* Writes a version 3 file through a temporary name + fsync + rename. */
gboolean hn_gguf_writer_write (HnGgufWriter *w, const char *path, GError **error);

G_END_DECLS
