/* ggml tensor types: block sizes, CPU reference dequantization and the
 * reference quantizers used for export, bit-compatible with ggml-quants.c
 * (quantize_row_*_ref, dequantize_row_*).
 *
 * Block layouts (little-endian; "h" = IEEE half):
 *   Q4_0 (32): h d, u8 qs[16]          x = (nibble - 8) d; low nibbles first half
 *   Q4_1 (32): h d, h m, u8 qs[16]     x = nibble d + m
 *   Q5_0 (32): h d, u32 qh, u8 qs[16]  x = (nibble | bit << 4 - 16) d
 *   Q5_1 (32): h d, h m, u32 qh, qs[16]
 *   Q8_0 (32): h d, i8 qs[32]          x = q d
 *   Q4_K (256): h d, h dmin, u8 scales[12] (8 x 6-bit scale + 6-bit min), u8 qs[128]
 *   Q5_K (256): h d, h dmin, scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K (256): u8 ql[128], u8 qh[64], i8 scales[16], h d
 *   Q8_K (256): f32 d, i8 qs[256], i16 bsums[16]
 * K-quant elements are laid out in 32-element sub-blocks as ggml does. */
#pragma once
#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* ggml's type codes (the values are the file format). */
typedef enum {
  HN_GGML_F32 = 0,
  HN_GGML_F16 = 1,
  HN_GGML_Q4_0 = 2,
  HN_GGML_Q4_1 = 3,
  HN_GGML_Q5_0 = 6,
  HN_GGML_Q5_1 = 7,
  HN_GGML_Q8_0 = 8,
  HN_GGML_Q8_1 = 9,
  HN_GGML_Q2_K = 10,
  HN_GGML_Q3_K = 11,
  HN_GGML_Q4_K = 12,
  HN_GGML_Q5_K = 13,
  HN_GGML_Q6_K = 14,
  HN_GGML_Q8_K = 15,
  HN_GGML_IQ2_XXS = 16,
  HN_GGML_IQ2_XS = 17,
  HN_GGML_IQ3_XXS = 18,
  HN_GGML_IQ1_S = 19,
  HN_GGML_IQ4_NL = 20,
  HN_GGML_IQ3_S = 21,
  HN_GGML_IQ2_S = 22,
  HN_GGML_IQ4_XS = 23,
  HN_GGML_I8 = 24,
  HN_GGML_I16 = 25,
  HN_GGML_I32 = 26,
  HN_GGML_I64 = 27,
  HN_GGML_F64 = 28,
  HN_GGML_IQ1_M = 29,
  HN_GGML_BF16 = 30,
  HN_GGML_TQ1_0 = 34,
  HN_GGML_TQ2_0 = 35,
  HN_GGML_MXFP4 = 39,
  HN_GGML_N_TYPES = 40
} HnGgmlType;

/* TRUE for a type code ggml defines (holes and removed types are FALSE). */
gboolean hn_ggml_type_is_known (guint32 code);
const char *hn_ggml_type_name (HnGgmlType t);
/* Parses "f32", "q8_0", "Q4_K", ... (case-insensitive); FALSE when unknown. */
gboolean hn_ggml_type_from_name (const char *name, HnGgmlType *out);
/* Elements per block, bytes per block (0 for an unknown type). */
guint hn_ggml_block_size (HnGgmlType t);
guint hn_ggml_type_size (HnGgmlType t);
/* Bytes of a row of n elements (n a multiple of the block size). */
gsize hn_ggml_row_size (HnGgmlType t, gint64 n);

/* Types with a CPU dequantizer: F32 F16 BF16 F64 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
 * Q4_K Q5_K Q6_K Q8_K. */
gboolean hn_ggml_can_dequantize (HnGgmlType t);
/* n elements (a multiple of the block size) from src to dst. Fails with
 * HN_ERROR_UNSUPPORTED for other types. */
gboolean hn_ggml_dequantize (HnGgmlType t, const void *src, float *dst, gint64 n, GError **error);

/* Types with a reference quantizer: F32 F16 BF16 Q4_0 Q8_0 Q4_K Q6_K Q8_K. */
gboolean hn_ggml_can_quantize (HnGgmlType t);
/* n elements (a multiple of the block size) into dst (hn_ggml_row_size
 * bytes), as ggml's quantize_row_*_ref. */
gboolean hn_ggml_quantize (HnGgmlType t, const float *src, void *dst, gint64 n, GError **error);

G_END_DECLS
