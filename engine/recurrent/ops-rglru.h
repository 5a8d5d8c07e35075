/* The RG-LRU (issue 25): the real-gated linear recurrent unit of Griffin
 * (transformers' RecurrentGemmaRglru), forward with a carried state and
 * backward, with CPU references (cpu-ref-rglru.c). Conventions of ops-ssm.h:
 * activations f32, ops record dispatches and never allocate, gradients of
 * parameters accumulate (+=), gradients of activations are written.
 *
 * Per batch row b, channel c and step t, with gx and ga the pre-sigmoid
 * input and recurrence gates (the block-diagonal linears, computed before):
 *   i = σ(gx),  r = σ(ga),  log a = -8 · r · softplus(Λ[c])   (torch's softplus, threshold 20)
 *   at a reset (position 0): h = x · i
 *   else:                    h = a · h + sqrt(1 - a²) · x · i
 *   y = h
 * x, gx, ga, y [B, T, C] (or [T, C]); Λ f32 [C] (recurrent_param); state f32
 * [B, C]: h before these tokens (zeros when NULL), replaced in place by h after
 * the last one; reset: the first step is at position 0 (a session's first
 * chunk). y may be x.
 *
 * Shaders (rglru*.comp): one invocation per (row, channel) forward, one per
 * channel backward (it sums dΛ over the rows), a sequential loop over time. */
#pragma once
#include "tensor/hn-ops.h"

G_BEGIN_DECLS

gboolean hn_op_rglru (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *gx, HnTensor *ga, HnTensor *lambda,
                      HnTensor *state, gboolean reset, GError **error);

/* Backward from position 0 (reset at the first step, no state): dx, dgx, dga [B, T, C] written,
 * dlambda [C] accumulated (nullable). The sqrt's derivative is clipped as transformers'
 * SqrtBoundDerivative does: d sqrt(u) = 1 / sqrt(max(4u, 1e-6)). */
gboolean hn_op_rglru_back (HnCmd *cmd, HnTensor *dx, HnTensor *dgx, HnTensor *dga, HnTensor *dlambda, HnTensor *dy,
                           HnTensor *x, HnTensor *gx, HnTensor *ga, HnTensor *lambda, GError **error);

/* ------------------------------------------------------------ CPU references (double sums) */

/* state [B, C] nullable, updated in place as the op does. */
void hn_ref_rglru (float *y, const float *x, const float *gx, const float *ga, const float *lambda, float *state,
                   gboolean reset, gint64 B, gint64 T, gint64 C);
/* dx, dgx, dga written; dlambda accumulated (nullable). */
void hn_ref_rglru_back (const float *dy, const float *x, const float *gx, const float *ga, const float *lambda,
                        gint64 B, gint64 T, gint64 C, float *dx, float *dgx, float *dga, float *dlambda);

G_END_DECLS
