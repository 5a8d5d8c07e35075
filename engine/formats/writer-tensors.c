#include "writer-tensors.h"

#include <string.h>

static void
tensor_free (gpointer p)
{
  HnWriterTensor *t = p;
  g_free (t->name);
  g_free (t->owned);
  g_free (t);
}

void
hn_writer_tensors_init (HnWriterTensors *t)
{
  t->list = g_ptr_array_new_with_free_func (tensor_free);
  t->names = g_hash_table_new (g_str_hash, g_str_equal);
}

void
hn_writer_tensors_clear (HnWriterTensors *t)
{
  g_clear_pointer (&t->names, g_hash_table_unref);
  g_clear_pointer (&t->list, g_ptr_array_unref);
}

gboolean
hn_writer_tensors_contains (const HnWriterTensors *t, const char *name)
{
  return g_hash_table_contains (t->names, name);
}

HnWriterTensor *
hn_writer_tensors_add (HnWriterTensors *t, const char *name, int type, guint ndim, const gint64 *shape,
                       const void *data, gsize nbytes, gpointer owned)
{
  g_return_val_if_fail (ndim <= HN_WRITER_MAX_DIMS && !hn_writer_tensors_contains (t, name), NULL);
  HnWriterTensor *e = g_new0 (HnWriterTensor, 1);
  e->name = g_strdup (name);
  e->type = type;
  e->ndim = ndim;
  if (ndim > 0)
    memcpy (e->shape, shape, ndim * sizeof (gint64));
  e->data = data;
  e->nbytes = nbytes;
  e->owned = owned;
  g_ptr_array_add (t->list, e);
  g_hash_table_add (t->names, e->name);
  return e;
}
