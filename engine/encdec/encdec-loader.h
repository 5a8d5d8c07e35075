/* The checkpoint loader and the recording temporaries of the encoder,
 * encoder-decoder and state-space graphs (encdec/, ssm/): a loader that names
 * every tensor it takes (a tensor left over is an error), and scratch tensors
 * and views kept alive until a recording is submitted. */
#pragma once
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "transformer/registry.h"
#include "tensor/hn-ops.h"
#include "tensor/scratch.h"

G_BEGIN_DECLS

/* ---- checkpoint loading */

typedef struct {
  HnVkContext *ctx;
  const char *dir;
  HnSafetensors *st;
  GHashTable *used;  /* tensor name -> TRUE */
  GPtrArray *owned;  /* every device weight (the model's) */
  guint64 bytes;
  /* a multimodal package of the text model (modernvbert): its tensors are found under the package's
   * names, and its towers are kept, not run; NULL for a text checkpoint */
  const HnArchPackage *pkg;
} HnWLoader;

void hn_wl_init (HnWLoader *L, HnVkContext *ctx, const char *dir, HnSafetensors *st, GPtrArray *owned);
void hn_wl_clear (HnWLoader *L);
/* The tensor `name` (marked used), or NULL; a required one that is missing is an error naming it. */
const HnSafetensorInfo *hn_wl_find (HnWLoader *L, const char *name, gboolean required, GError **error);
/* Whether the checkpoint has tensor `name` (not marked used). */
gboolean hn_wl_has (HnWLoader *L, const char *name);
/* A matrix [rows, cols] in its stored dtype (f32/f16/bf16); *out NULL when absent and not required. */
gboolean hn_wl_matrix (HnWLoader *L, const char *name, gint64 rows, gint64 cols, gboolean required, HnTensor **out,
                       GError **error);
/* Rows [row0, row0 + rows) of a stored [total_rows, cols] matrix (fused projections). */
gboolean hn_wl_matrix_rows (HnWLoader *L, const char *name, gint64 total_rows, gint64 row0, gint64 rows, gint64 cols,
                            HnTensor **out, GError **error);
/* A vector of n elements as f32 (norm weights, biases; a [1, n] bias too). */
/* A stored [rows, cols] matrix as a host f32 copy (marked used; g_free it), or NULL with an error. */
float *hn_wl_host_matrix (HnWLoader *L, const char *name, gint64 rows, gint64 cols, GError **error);
gboolean hn_wl_vector (HnWLoader *L, const char *name, gint64 n, gboolean required, HnTensor **out, GError **error);
/* "<pfx><part>.weight" [rows, cols] and, when present and b is not NULL, "<pfx><part>.bias" [rows]. */
gboolean hn_wl_linear (HnWLoader *L, const char *pfx, const char *part, gint64 rows, gint64 cols, HnTensor **w,
                       HnTensor **b, GError **error);
/* "<pfx><part>.weight" [n] and, when present, "<pfx><part>.bias" [n]. */
gboolean hn_wl_norm (HnWLoader *L, const char *pfx, const char *part, gint64 n, HnTensor **w, HnTensor **b,
                     GError **error);
/* An f32 device tensor from host data. */
HnTensor *hn_wl_from_f32 (HnWLoader *L, const char *name, int ndim, const gint64 *shape, const float *data,
                          GError **error);
/* Fails naming the first checkpoint tensor nothing took. */
gboolean hn_wl_check_all_used (HnWLoader *L, const char *model_type, GError **error);

/* config.json of model_dir and its registry row, which must be an encoder (seq2seq FALSE) or an
 * encoder-decoder (seq2seq TRUE); anything else is HN_ERROR_UNSUPPORTED naming it. */
HnModelConfig *hn_encdec_config_load (const char *model_dir, gboolean seq2seq, const HnArchInfo **arch,
                                      GError **error);

typedef gboolean (*HnWLoadFunc) (gpointer model, HnWLoader *L, const HnModelConfig *cfg, GError **error);
/* Opens model_dir's safetensors, lets load() take the weights into `owned` and checks that every
 * checkpoint tensor was taken; *bytes receives the device bytes. */
gboolean hn_wl_load_all (HnVkContext *ctx, const char *model_dir, const HnArchInfo *arch, const HnModelConfig *cfg,
                         GPtrArray *owned, HnWLoadFunc load, gpointer model, guint64 *bytes, GError **error);

G_END_DECLS
