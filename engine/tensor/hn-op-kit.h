/* What an op outside engine/tensor needs to record its own shaders (the
 * recurrent scans in engine/recurrent): bindings and element offsets of
 * tensors, argument checks that name the op, and dispatches over rows or
 * elements. The op files of tensor/ share these through ops-private.h. */
#pragma once
#include "tensor/hn-ops.h"
#include "base/hn-error.h"

#define HN_WG 256u

static inline HnVkBinding
hn_bind (HnTensor *t, gboolean write)
{
  return (HnVkBinding) { t->buf, t->offset, hn_tensor_nbytes (t), write };
}

/* Element offset of t from the start of its bound buffer. */
static inline guint32
hn_eoff (const HnTensor *t)
{
  return (guint32) (t->offset / hn_dtype_size (t->dtype));
}

/* Splits n_groups over x (<= 65535) and y. */
static inline void
hn_grid (guint64 n_groups, guint32 *gx, guint32 *gy)
{
  if (n_groups <= 65535)
    {
      *gx = (guint32) MAX (n_groups, 1);
      *gy = 1;
    }
  else
    {
      *gx = 65535;
      *gy = (guint32) ((n_groups + 65534) / 65535);
    }
}

gboolean hn_op_check_dtype (const char *op, const char *role, HnTensor *t, HnDType want, GError **error);
gboolean hn_op_check_float_storage (const char *op, const char *role, HnTensor *t, GError **error);
gboolean hn_op_check_count (const char *op, const char *role, HnTensor *t, gint64 n, GError **error);
gboolean hn_op_check_ctx (const char *op, HnCmd *cmd, HnTensor *t, GError **error);
/* How an op writes a 16-bit copy of its f32 result (the shaders' OUT16-style codes): 2, rounded
 * as fp16 autocast rounds (±Inf past the range), under fp16 autocast; 1, clamped to ±65504 (the
 * f16 operand inference's matmuls read) otherwise. */
guint32 hn_op_f16_rounding (HnCmd *cmd);
/* The numeric code the shaders use for a float storage dtype (0 f32, 1 f16, 2 bf16). */
guint32 hn_op_float_code (HnDType dt);
gboolean hn_op_dispatch_rows (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec,
                              const HnVkBinding *b, guint nb, const void *push, guint push_size, guint64 rows,
                              GError **error);
gboolean hn_op_dispatch_elems (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec,
                               const HnVkBinding *b, guint nb, const void *push, guint push_size, guint64 n,
                               GError **error);

