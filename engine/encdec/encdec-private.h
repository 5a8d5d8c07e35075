/* Internals shared by the encoder (masked LM) and encoder-decoder graphs:
 * the checkpoint loader and recording temporaries (encdec-loader.h, public:
 * engine/ssm uses them too), trained parameter sets and the attention pieces
 * both graphs use. */
#pragma once
#include "formats/model-config.h"
#include "formats/safetensors.h"
#include "transformer/registry.h"
#include "tensor/hn-ops.h"
#include "tensor/optim.h"
#include "encdec/encdec-loader.h"

G_BEGIN_DECLS

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

/* ---- trained parameters: each f32 weight with its gradient and AdamW moments */

typedef struct {
  GPtrArray *params, *grads, *m1, *m2; /* grads and moments are owned */
  GHashTable *grad;                    /* param -> its gradient */
  HnTensor *partials;                  /* sums of squares for the gradient norm, made on first use */
} HnParamSet;

void hn_params_init (HnParamSet *ps);
void hn_params_clear (HnParamSet *ps);
/* Adds a parameter (f32 only; another dtype is HN_ERROR_UNSUPPORTED naming it). */
gboolean hn_params_add (HnParamSet *ps, HnTensor *param, GError **error);
/* The gradient of param, or NULL for NULL. */
HnTensor *hn_params_grad (HnParamSet *ps, HnTensor *param);
/* Records zeroing the moments (once) or the gradients (every step). */
gboolean hn_params_zero (HnParamSet *ps, HnCmd *cmd, gboolean moments, GError **error);
/* Records one AdamW update of every parameter, gradients scaled by clip (1: none). */
gboolean hn_params_adamw (HnParamSet *ps, HnCmd *cmd, const HnAdamwScalars *s, float clip, GError **error);
/* Submits what cmd holds plus the sums of squares of every gradient; *norm = their total L2 norm. */
gboolean hn_params_grad_norm (HnParamSet *ps, HnCmd *cmd, double *norm, GError **error);
/* Submits cmd, measures the gradient norm of the step (a non-finite one is HN_ERROR_NUMERIC) and,
 * with max_norm > 0, the clip coefficient of torch's clip_grad_norm_ (else *clip = 1). */
gboolean hn_params_clip (HnParamSet *ps, HnCmd *cmd, double max_norm, double *norm, float *clip, GError **error);

/* ---- attention */

/* Flat f32 buffers the biased attention works in (head-major copies and scores), each at least
 * as large as the biggest call needs: qh, oh T·H·D, kh, vh S·H·D, scores H·T·S. */
typedef struct {
  HnTensor *qh, *kh, *vh, *scores, *oh;
} HnAttendWork;

/* out [T, H, D] = softmax(alpha · q·kᵀ + bias)·v for q [T, H, D] and k, v [S, H, D]; bias (nullable,
 * then w is needed) f32 [H, T, S] added to the scores (T5's relative positions); causal: query t
 * sits at position pos0 + t and sees keys j <= pos0 + t. mask (nullable) is an additive [T, S]
 * mask (without a bias). */
gboolean hn_encdec_attend (HnCmd *cmd, HnScratch *sc, const HnAttendWork *w, HnTensor *out, HnTensor *q, HnTensor *k,
                           HnTensor *v, float alpha, HnTensor *bias, HnTensor *mask, gboolean causal, gint64 pos0,
                           GError **error);

/* T5's bucket of the relative position (key - query), as transformers computes it (f32 logs). */
int hn_t5_relative_bucket (int relative_position, gboolean bidirectional, int num_buckets, int max_distance);

G_END_DECLS
