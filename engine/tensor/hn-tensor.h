/* Tensors: a dtype, a row-major shape of up to 4 dims (shape[0] outermost,
 * like PyTorch) and contiguous storage at a byte offset inside a device
 * buffer. Views (a range of outermost rows, a reshape) share the storage.
 *
 *   x = hn_tensor_new (ctx, HN_DTYPE_F32, 2, (gint64[]){ T, C }, &error);  // [T, C]
 *   W = hn_tensor_new (ctx, HN_DTYPE_BF16, 2, (gint64[]){ N, C }, &error); // [out, in] like HF Linear
 *   v = hn_tensor_view_rows (cache, pos, T, &error);                      // rows [pos, pos+T)
 *
 * f16/bf16/u8/i8 tensors are storage formats (weights, caches); the ops
 * compute in f32. Upload/download helpers convert f32 <-> f16/bf16 on the
 * host (round to nearest even). */
#pragma once
#include <glib.h>
#include "vk/hn-vk.h"

G_BEGIN_DECLS

typedef enum {
  HN_DTYPE_F32,
  HN_DTYPE_F16,
  HN_DTYPE_BF16,
  HN_DTYPE_I32,
  HN_DTYPE_U8,
  HN_DTYPE_I8,
  /* packed frozen weights, 2-D only (tensor/quant.h has the layouts) */
  HN_DTYPE_NF4,     /* bitsandbytes NF4, blocks of 64, f32 absmax */
  HN_DTYPE_NF4_DQ,  /* NF4 with double-quantized absmax */
  HN_DTYPE_Q8,      /* int8 per output channel */
  /* ggml's blocks as a GGUF file holds them, row by row (tensor/ggml-quants.h);
   * the matrix-vector and matmul kernels dequantize them (ops-gguf.c) */
  HN_DTYPE_GGML_Q4_0,
  HN_DTYPE_GGML_Q4_1,
  HN_DTYPE_GGML_Q5_0,
  HN_DTYPE_GGML_Q5_1,
  HN_DTYPE_GGML_Q8_0,
  HN_DTYPE_GGML_Q4_K,
  HN_DTYPE_GGML_Q5_K,
  HN_DTYPE_GGML_Q6_K,
  HN_DTYPE_GGML_Q8_K,
} HnDType;

#define HN_MAX_DIMS 4

typedef struct {
  HnVkContext *ctx;     /* a reference */
  HnVkBuffer *buf;      /* a reference; shared by views */
  guint64 offset;       /* bytes from the start of buf */
  HnDType dtype;
  int ndim;
  gint64 shape[HN_MAX_DIMS];  /* unused dims are 1 */
  gint64 n;             /* number of elements */
  char *name;           /* for error messages; never NULL */
  /* private */
  gint refcount;
} HnTensor;

const char *hn_dtype_name (HnDType dtype);
gsize hn_dtype_size (HnDType dtype);
/* Parses "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16", "i32", "u8", "i8". */
gboolean hn_dtype_from_string (const char *s, HnDType *out);

/* A new tensor with uninitialised storage. Fails with HN_ERROR_INVALID_ARGUMENT
 * for a bad shape, HN_ERROR_UNSUPPORTED when it is larger than one buffer
 * binding (hn_vk_context_max_buffer_size), HN_ERROR_OUT_OF_MEMORY when the
 * device is full. */
HnTensor *hn_tensor_new (HnVkContext *ctx, HnDType dtype, int ndim, const gint64 *shape, GError **error);
HnTensor *hn_tensor_new_named (HnVkContext *ctx, const char *name, HnDType dtype, int ndim,
                               const gint64 *shape, GError **error);
/* Convenience: 1-D/2-D/3-D shapes. */
/* A tensor over existing storage: `buf` (a new reference) from byte `offset`
 * (a multiple of 4); a plain dtype, the elements must fit the buffer. */
HnTensor *hn_tensor_new_in_buffer (HnVkContext *ctx, HnVkBuffer *buf, guint64 offset, const char *name, HnDType dtype,
                                   int ndim, const gint64 *shape, GError **error);
HnTensor *hn_tensor_new_1d (HnVkContext *ctx, HnDType dtype, gint64 d0, GError **error);
HnTensor *hn_tensor_new_2d (HnVkContext *ctx, HnDType dtype, gint64 d0, gint64 d1, GError **error);
HnTensor *hn_tensor_new_3d (HnVkContext *ctx, HnDType dtype, gint64 d0, gint64 d1, gint64 d2, GError **error);

HnTensor *hn_tensor_ref (HnTensor *t);
void hn_tensor_unref (HnTensor *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTensor, hn_tensor_unref)
void hn_tensor_set_name (HnTensor *t, const char *name);

/* A view of outermost rows [row0, row0 + n_rows) (shape[0] becomes n_rows). */
HnTensor *hn_tensor_view_rows (HnTensor *t, gint64 row0, gint64 n_rows, GError **error);
/* The same storage with another shape of the same element count. */
HnTensor *hn_tensor_reshape (HnTensor *t, int ndim, const gint64 *shape, GError **error);

/* Product of all dims but the last, and the last dim. */
gint64 hn_tensor_rows (const HnTensor *t);
gint64 hn_tensor_cols (const HnTensor *t);
guint64 hn_tensor_nbytes (const HnTensor *t);
/* "[2, 3, 4] f32" into a static-free newly allocated string. */
char *hn_tensor_describe (const HnTensor *t);
gboolean hn_tensor_same_shape (const HnTensor *a, const HnTensor *b);

/* Synchronous transfers of the whole tensor. `n` must equal t->n.
 * upload_f32 converts to the tensor's dtype (F32/F16/BF16; I32 from f32 is
 * refused); download_f32 converts from F32/F16/BF16/I32/U8/I8. */
gboolean hn_tensor_upload_f32 (HnTensor *t, const float *data, gsize n, GError **error);
gboolean hn_tensor_download_f32 (HnTensor *t, float *data, gsize n, GError **error);
gboolean hn_tensor_upload_i32 (HnTensor *t, const gint32 *data, gsize n, GError **error);
gboolean hn_tensor_download_i32 (HnTensor *t, gint32 *data, gsize n, GError **error);
/* Bytes exactly as stored (n_bytes must equal hn_tensor_nbytes). */
gboolean hn_tensor_upload_raw (HnTensor *t, const void *data, gsize n_bytes, GError **error);
gboolean hn_tensor_download_raw (HnTensor *t, void *data, gsize n_bytes, GError **error);

/* Host conversions (round to nearest even; NaN stays NaN). */
guint16 hn_f32_to_f16 (float f);
float hn_f16_to_f32 (guint16 h);
guint16 hn_f32_to_bf16 (float f);
float hn_bf16_to_f32 (guint16 h);

G_END_DECLS
