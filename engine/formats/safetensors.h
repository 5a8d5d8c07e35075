/* safetensors: the Hugging Face tensor file format, read through mmap and
 * written atomically.
 *
 * Reading: hn_safetensors_open() takes a .safetensors file, a
 * model.safetensors.index.json, or a model folder (model.safetensors first,
 * then model.safetensors.index.json, then a single *.safetensors). Every
 * header is validated before any tensor is exposed: header length, JSON
 * shape, dtypes, shapes, offsets inside the data section, no overlaps, byte
 * size = prod(shape) x dtype size, names unique across shards. A problem is
 * an HN_ERROR_CORRUPT error naming the file and the tensor.
 *
 * Tensor data pointers point into the read-only mapping and stay valid until
 * hn_safetensors_free(). They are NOT necessarily aligned to the element
 * size (the format only pads the header to 8 bytes, and foreign writers may
 * not even do that): read through memcpy or hn_safetensor_info_to_f32().
 *
 * Writing: HnSafetensorsWriter collects tensors (copied or borrowed) and
 * metadata, then writes one file or a sharded folder with an index, each file
 * through a temporary name + fsync + rename, exactly as the Python
 * safetensors library lays it out (compact JSON header padded with spaces to
 * a multiple of 8, tensors contiguous without holes). */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  HN_ST_DTYPE_BOOL,
  HN_ST_DTYPE_U8,
  HN_ST_DTYPE_I8,
  HN_ST_DTYPE_F8_E5M2,
  HN_ST_DTYPE_F8_E4M3,
  HN_ST_DTYPE_I16,
  HN_ST_DTYPE_U16,
  HN_ST_DTYPE_F16,
  HN_ST_DTYPE_BF16,
  HN_ST_DTYPE_I32,
  HN_ST_DTYPE_U32,
  HN_ST_DTYPE_F32,
  HN_ST_DTYPE_F64,
  HN_ST_DTYPE_I64,
  HN_ST_DTYPE_U64,
  /* not a safetensors dtype: ggml blocks of a GGUF file kept quantized
   * (HnSafetensorInfo.ggml_type, tensor/ggml-quants.h), only in the tensor
   * sets hn_gguf_open_as_safetensors builds; its element size is 0 and the
   * file parser never accepts its name */
  HN_ST_DTYPE_GGML,
  HN_ST_N_DTYPES
} HnStDtype;

#define HN_ST_MAX_DIMS 8

/* Bytes per element. */
gsize hn_st_dtype_size (HnStDtype dtype);
/* The format's spelling ("F32", "BF16", ...). */
const char *hn_st_dtype_name (HnStDtype dtype);
/* Parses the format's spelling; FALSE for an unknown name. */
gboolean hn_st_dtype_from_name (const char *name, HnStDtype *out);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float hn_st_f16_to_f32 (guint16 h);
float hn_st_bf16_to_f32 (guint16 h);
guint16 hn_st_f32_to_f16 (float f);
guint16 hn_st_f32_to_bf16 (float f);
/* The index of the first NaN or Inf among n values of a float dtype stored
 * at data (any alignment), or -1; integer dtypes have none. */
gint64 hn_st_first_nonfinite (HnStDtype dtype, const void *data, gsize n);

typedef struct {
  const char *name;
  HnStDtype dtype;
  guint ndim;                    /* 0 for a scalar */
  gint64 shape[HN_ST_MAX_DIMS];
  gint64 n_elements;             /* prod(shape); 1 for a scalar */
  const void *data;              /* into the mapping; see alignment note above */
  gsize nbytes;
  const char *file;              /* the file holding it */
  guint32 ggml_type;             /* HN_ST_DTYPE_GGML: the HnGgmlType of the blocks */
} HnSafetensorInfo;

typedef struct _HnSafetensors HnSafetensors;

HnSafetensors *hn_safetensors_open (const char *path_or_dir, GError **error);
void hn_safetensors_free (HnSafetensors *st);

/* Tensors in a stable order: sorted by name. */
guint hn_safetensors_get_n_tensors (HnSafetensors *st);
const HnSafetensorInfo *hn_safetensors_get_nth (HnSafetensors *st, guint i);
/* NULL when there is no tensor of that name. */
const HnSafetensorInfo *hn_safetensors_lookup (HnSafetensors *st, const char *name);
/* Like lookup, but a missing tensor is an HN_ERROR_NOT_FOUND error naming it. */
const HnSafetensorInfo *hn_safetensors_require (HnSafetensors *st, const char *name, GError **error);

/* __metadata__ string values (of the first shard for a sharded model, merged
 * with the index's "metadata" object). NULL when absent. */
const char *hn_safetensors_get_metadata (HnSafetensors *st, const char *key);
/* key -> value (both char*), owned by st. */
GHashTable *hn_safetensors_get_metadata_table (HnSafetensors *st);
/* Files that were mapped, in load order (owned by st). */
const char *const *hn_safetensors_get_files (HnSafetensors *st);

/* Converts F32/F16/BF16/F64 (and integer types, and GGML blocks) elements to float.
 * `dst` holds info->n_elements floats. */
gboolean hn_safetensor_info_to_f32 (const HnSafetensorInfo *info, float *dst, GError **error);
/* Same, newly allocated (g_free). */
float *hn_safetensor_info_dup_f32 (const HnSafetensorInfo *info, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnSafetensors, hn_safetensors_free)

/* A tensor set built in memory (GGUF import): `file` names it in messages;
 * `keep` (freed with keep_free last) is what borrowed data points into.
 * add: data is borrowed, or owned (g_free) when `owned` is set (then
 * owned == data); a duplicate name or wrong size is HN_ERROR_CORRUPT. */
HnSafetensors *hn_safetensors_new_in_memory (const char *file, gpointer keep, GDestroyNotify keep_free);
gboolean hn_safetensors_add_in_memory (HnSafetensors *st, const char *name, HnStDtype dtype, guint ndim,
                                       const gint64 *shape, const void *data, gsize nbytes, gpointer owned,
                                       GError **error);
void hn_safetensors_set_metadata (HnSafetensors *st, const char *key, const char *value);
/* A tensor of ggml blocks (dtype HN_ST_DTYPE_GGML): nbytes must be
 * rows · hn_ggml_row_size (ggml_type, shape[ndim - 1]). */
gboolean hn_safetensors_add_ggml_in_memory (HnSafetensors *st, const char *name, guint32 ggml_type, guint ndim,
                                            const gint64 *shape, const void *data, gsize nbytes, gpointer owned,
                                            GError **error);

/* ---- writer ---- */

typedef struct _HnSafetensorsWriter HnSafetensorsWriter;

HnSafetensorsWriter *hn_safetensors_writer_new (void);
void hn_safetensors_writer_free (HnSafetensorsWriter *w);

/* Adds a tensor. With copy=FALSE the data is borrowed and must stay valid
 * until the writer is freed. nbytes must equal prod(shape) x dtype size.
 * A duplicate name is an HN_ERROR_INVALID_ARGUMENT error. */
gboolean hn_safetensors_writer_add (HnSafetensorsWriter *w, const char *name, HnStDtype dtype,
                                    guint ndim, const gint64 *shape, const void *data, gsize nbytes,
                                    gboolean copy, GError **error);
/* Adds a __metadata__ entry (values are strings in the format). The writer
 * adds "format": "pt" unless set, because transformers refuses files
 * without a known format. */
void hn_safetensors_writer_set_metadata (HnSafetensorsWriter *w, const char *key, const char *value);
/* A scratch file (the benchmark's synthetic model): written and renamed into
 * place as always, but not fsynced, so it may not survive a crash. */
void hn_safetensors_writer_set_scratch (HnSafetensorsWriter *w, gboolean scratch);

/* Writes everything into one file. */
gboolean hn_safetensors_writer_write_file (HnSafetensorsWriter *w, const char *path, GError **error);

/* Writes into `dir` (created) as transformers' save_pretrained does:
 * `<basename>.safetensors` when the total fits in max_shard_bytes (0 = no
 * limit), otherwise `<basename>-00001-of-0000N.safetensors` shards plus
 * `<basename>.safetensors.index.json`. A stale single file or index of the
 * other layout is removed so a later open cannot pick up old weights.
 * basename: "model" for models, "adapter_model" for LoRA adapters. */
gboolean hn_safetensors_writer_write_dir (HnSafetensorsWriter *w, const char *dir, const char *basename,
                                          guint64 max_shard_bytes, GError **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnSafetensorsWriter, hn_safetensors_writer_free)

G_END_DECLS
