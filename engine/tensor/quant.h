/* Quantized frozen weights for QLoRA (bitsandbytes' formats), packed on the
 * host and kept packed on the device; the matmuls dequantize them tile by
 * tile (shaders/matmul_quant.comp), so no full-precision copy ever exists.
 *
 * A quantized [rows, cols] weight is one tensor of dtype HN_DTYPE_NF4,
 * HN_DTYPE_NF4_DQ or HN_DTYPE_Q8 whose storage holds these sections (each
 * starting on a 4-byte boundary; n = rows·cols elements, row-major):
 *
 *   NF4     codes  u8[ceil(n / 2)]   two 4-bit codes a byte, element 2i in
 *                                    the high nibble (bitsandbytes' packing)
 *           absmax f32[nb]           nb = ceil(n / 64): blocks of 64
 *                                    consecutive elements (the flat tensor)
 *   NF4_DQ  codes  as NF4
 *           qabsmax u8[nb]           double quantization (bitsandbytes'
 *           absmax2 f32[ceil(nb / 256)] compress_statistics): the block
 *           offset f32                 absmaxes minus their mean, 8-bit
 *           table f32[256]             quantized in blocks of 256 with the
 *                                      signed dynamic map
 *   Q8      codes  i8[n]             per output channel (row): q = round(w / s),
 *           scale f32[rows]          s = max|w_row| / 127
 *
 * NF4: w ≈ NF4[code] · absmax[block]; a block's code is the nearest of the 16
 * NormalFloat values to w / absmax (bitsandbytes' published table).
 *
 * HN_DTYPE_GGML_*: a GGUF file's blocks kept as they are (a quantized GGUF
 * loads without a full-precision copy): row r is the ggml row of `cols`
 * elements at byte r · hn_ggml_row_size (type, cols), cols a multiple of the
 * type's block (32 or 256); the storage is padded to a multiple of 4 bytes.
 * Packing quantizes with ggml's reference quantizers (q4_0, q8_0, q4_k, q6_k,
 * q8_k); unpacking is tensor/ggml-quants.c's dequantization. */
#pragma once
#include <glib.h>

#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

#define HN_NF4_BLOCK 64
#define HN_NF4_DQ_BLOCK 256

/* bitsandbytes' NF4 code (functional.py get_4bit_type("nf4")). */
extern const float hn_nf4_code[16];

/* bitsandbytes' create_dynamic_map(signed=True): the 256-entry 8-bit code of
 * the double-quantized scales, sorted ascending. */
void hn_quant_dynamic_map (float out[256]);

/* TRUE for the packed weight dtypes above. */
gboolean hn_dtype_is_quant (HnDType dt);
/* TRUE for the HN_DTYPE_GGML_* dtypes; the ggml type of one, and back
 * (FALSE for a ggml type with no device kernel). */
gboolean hn_dtype_is_ggml (HnDType dt);
guint32 hn_dtype_ggml_type (HnDType dt);
gboolean hn_dtype_from_ggml_type (guint32 ggml_type, HnDType *out);
/* TRUE when a [rows, cols] weight can be stored as dt (GGML types: cols a
 * multiple of the block; packing also needs a reference quantizer). */
gboolean hn_quant_shape_ok (HnDType dt, gint64 cols);

/* Parses --quantization: "none", "nf4", "int8", "q4_k" (HN_DTYPE_GGML_Q4_K:
 * a GGUF model's ggml blocks stay as they are, and every other Linear weight
 * of the layers is packed into Q4_K blocks by ggml's reference quantizer). */
gboolean hn_quant_dtype_from_string (const char *s, gboolean double_quant, HnDType *out, GError **error);

/* The --quantization spelling of dt: "nf4", "nf4-dq" (double-quantized
 * scales), "int8", "q4_k"; "none" for any other dtype. */
const char *hn_quant_dtype_name (HnDType dt);

/* Bytes of the packed storage of a [rows, cols] weight. */
guint64 hn_quant_nbytes (HnDType dt, gint64 rows, gint64 cols);

/* Word (4-byte) offsets of the sections in the storage: codes at 0, then
 * scale (absmax / qabsmax / Q8 scale), scale2 (absmax2), offset, table. */
typedef struct {
  guint64 scale, scale2, offset, table;
} HnQuantLayout;
void hn_quant_layout (HnDType dt, gint64 rows, gint64 cols, HnQuantLayout *out);

/* Packs a host matrix [rows, cols] of dtype src_dt (f32, f16 or bf16) into
 * `out` (hn_quant_nbytes bytes), one block at a time (no f32 copy). */
void hn_quant_pack (HnDType dt, const void *src, HnDType src_dt, gint64 rows, gint64 cols, guint8 *out);

/* The dequantized value of element `idx` (row-major) of packed storage `q`. */
float hn_quant_get (HnDType dt, const guint8 *q, gint64 rows, gint64 cols, gint64 idx);

/* Dequantizes rows [row0, row0 + n_rows) into out [n_rows, cols] (tests and
 * the CPU reference; callers take a few rows at a time). */
void hn_quant_unpack_rows (HnDType dt, const guint8 *q, gint64 rows, gint64 cols, gint64 row0, gint64 n_rows,
                           float *out);

/* A device tensor [rows, cols] of dtype dt holding `packed`
 * (hn_quant_nbytes bytes). */
HnTensor *hn_tensor_new_quant (HnVkContext *ctx, const char *name, HnDType dt, gint64 rows, gint64 cols,
                               const guint8 *packed, GError **error);

/* TRUE when a matmul of M rows through a quantized weight of w_cols columns
 * takes the tensor-core kernel (matmul_quant_cm2.comp: a VK_NV_cooperative_
 * matrix2 device, M > 8, whole blocks in a row, no HN_MATMUL_EXACT): its
 * operands, A and the dequantized W, are then rounded to f16 (W's values
 * clamped to ±65504) and accumulated in f32. */
gboolean hn_quant_matmul_tensor_cores (HnVkContext *ctx, HnDType dt, gint64 M, gint64 w_cols, guint flags);
/* The same for a weight in ggml blocks (matmul_gguf_cm2.comp; also needs
 * 16-bit storage). hn_quant_matmul_tensor_cores answers for both. */
gboolean hn_gguf_matmul_tensor_cores (HnVkContext *ctx, HnDType dt, gint64 M, gint64 w_cols, guint flags);
/* TRUE when a one-row product with this GGUF weight takes the integer-dot
 * kernel (matvec_gguf_q8.comp): x is quantized to 8-bit codes, 32 to a
 * power-of-two scale, first (HN_MATVEC_GGUF_Q8=0 keeps the float kernel). */
gboolean hn_gguf_matvec_q8 (HnVkContext *ctx, HnDType dt, gint64 M, gint64 K);

/* CPU reference of the quantized matmul: y[M, N] = x[M, K] · Wᵀ (+ bias),
 * W [N, K] packed; dequantizes one row of W at a time. */
void hn_cpu_matmul_quant (float *y, const float *x, HnDType dt, const guint8 *w, const float *bias, gint64 M,
                          gint64 N, gint64 K);
/* dx[M, K] = dy[M, N] · W (the input gradient through a frozen quantized W). */
void hn_cpu_matmul_quant_dx (float *dx, const float *dy, HnDType dt, const guint8 *w, gint64 M, gint64 N, gint64 K);

G_END_DECLS
