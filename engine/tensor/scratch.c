/* Temporaries of one recording (tensor/scratch.h). */
#include "tensor/scratch.h"

void
hn_scratch_init (HnScratch *s, HnVkContext *ctx)
{
  s->ctx = ctx;
  s->keep = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
}

void
hn_scratch_reset (HnScratch *s)
{
  g_ptr_array_set_size (s->keep, 0);
}

void
hn_scratch_clear (HnScratch *s)
{
  g_clear_pointer (&s->keep, g_ptr_array_unref);
}

static HnTensor *
keep (HnScratch *s, HnTensor *t)
{
  if (t)
    g_ptr_array_add (s->keep, t);
  return t;
}

HnTensor *
hn_scratch_new (HnScratch *s, const char *name, HnDType dt, int ndim, const gint64 *shape, GError **error)
{
  return keep (s, hn_tensor_new_named (s->ctx, name, dt, ndim, shape, error));
}

HnTensor *
hn_scratch_rows (HnScratch *s, HnTensor *t, gint64 row0, gint64 n, GError **error)
{
  return keep (s, hn_tensor_view_rows (t, row0, n, error));
}

HnTensor *
hn_scratch_shape (HnScratch *s, HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  return keep (s, hn_tensor_reshape (t, ndim, shape, error));
}

HnTensor *
hn_scratch_prefix (HnScratch *s, HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  HnTensor *flat = hn_scratch_shape (s, t, 1, (gint64[]) { t->n }, error);
  HnTensor *part = flat ? hn_scratch_rows (s, flat, 0, n, error) : NULL;
  return part ? hn_scratch_shape (s, part, ndim, shape, error) : NULL;
}
