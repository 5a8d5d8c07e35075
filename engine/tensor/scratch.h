/* Temporaries of one recording: tensors and views a command buffer references until its submit
 * (shared by the encoders, the state-space mixers and the transformer graph's hybrids). */
#pragma once
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

typedef struct {
  HnVkContext *ctx;
  GPtrArray *keep; /* tensors and views referenced by the recording, dropped after its submit */
} HnScratch;

void hn_scratch_init (HnScratch *s, HnVkContext *ctx);
/* Drops every temporary (after hn_cmd_submit_wait). */
void hn_scratch_reset (HnScratch *s);
void hn_scratch_clear (HnScratch *s);
HnTensor *hn_scratch_new (HnScratch *s, const char *name, HnDType dt, int ndim, const gint64 *shape, GError **error);
HnTensor *hn_scratch_rows (HnScratch *s, HnTensor *t, gint64 row0, gint64 n, GError **error);
HnTensor *hn_scratch_shape (HnScratch *s, HnTensor *t, int ndim, const gint64 *shape, GError **error);
/* The first prod(shape) elements of t with that shape. */
HnTensor *hn_scratch_prefix (HnScratch *s, HnTensor *t, int ndim, const gint64 *shape, GError **error);

G_END_DECLS
