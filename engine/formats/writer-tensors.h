/* The tensors a file writer (safetensors, GGUF) has been given: in the order
 * they were added, each name once, each with its bytes borrowed or owned.
 * Internal to engine/formats. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

#define HN_WRITER_MAX_DIMS 8

typedef struct {
  char *name;
  int type;                          /* the format's element type (HnStDtype, HnGgmlType) */
  guint ndim;
  gint64 shape[HN_WRITER_MAX_DIMS];  /* as the format orders its dimensions */
  const void *data;                  /* the bytes to write */
  gsize nbytes;
  gpointer owned;                    /* freed with the table, or NULL when data is the caller's */
} HnWriterTensor;

typedef struct {
  GPtrArray *list;     /* HnWriterTensor*, in the order added */
  GHashTable *names;   /* their names */
} HnWriterTensors;

void hn_writer_tensors_init (HnWriterTensors *t);
void hn_writer_tensors_clear (HnWriterTensors *t);
gboolean hn_writer_tensors_contains (const HnWriterTensors *t, const char *name);
/* Appends a tensor of a new name (ndim <= HN_WRITER_MAX_DIMS); takes `owned`. */
HnWriterTensor *hn_writer_tensors_add (HnWriterTensors *t, const char *name, int type, guint ndim,
                                       const gint64 *shape, const void *data, gsize nbytes, gpointer owned);

G_END_DECLS
