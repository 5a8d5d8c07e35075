/* The Mamba (v1) mixer as one recording, shared by the pure state-space decoders (ssm/mamba.c:
 * mamba, falcon_mamba) and the hybrid decoders the transformer graph runs (jamba):
 *
 *   x, z = in_proj(h)                          (in_proj split by rows at load)
 *   x = silu(conv1d(x))                        (causal, carrying the last K - 1 inputs)
 *   dt, B, C = x_proj(x)                       (optionally each RMS-normed: falcon_mamba without a
 *                                               weight, jamba with dt/b/c_layernorm)
 *   y = scan(x, softplus(dt_proj(dt)), A, B, C) + D · x, gated by silu(z)
 *   out += out_proj(y)
 */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"
#include "recurrent/mamba2-mixer.h"

G_BEGIN_DECLS

typedef struct {
  int inner, state, dt_rank;
  gboolean bc_dt_norm; /* RMS-norm dt, B and C (with the weights below when they are set) */
  float norm_eps;
} HnMamba1Dims;

/* One layer's weights: in_proj rows x [I], z [I] (biases nullable); conv f32 [I, K] (+ bias); x_proj
 * rows dt [R], B [N], C [N]; dt_proj [I, R] (+ bias); A_log f32 [I, N], D [I]; out_proj [C, I]; the
 * dt, B and C norms' weights (nullable). */
typedef struct {
  HnTensor *w_x, *w_z, *b_x, *b_z, *conv_w, *conv_b, *w_dtl, *w_B, *w_C, *dt_w, *dt_b, *A_log, *D, *out_w, *out_b;
  HnTensor *dt_norm_w, *B_norm_w, *C_norm_w;
} HnMamba1Weights;

/* Activation buffers of up to max_tok tokens, flat [max_tok, width]: x, z, xc, dt, y [., I]; dtl [., R];
 * B, C [., N]. */
typedef struct {
  HnTensor *x, *z, *xc, *dtl, *B, *C, *dt, *y;
} HnMamba1Bufs;

gboolean hn_mamba1_bufs_init (HnMamba1Bufs *b, HnVkContext *ctx, const HnMamba1Dims *d, gint64 max_tok,
                              GError **error);
void hn_mamba1_bufs_clear (HnMamba1Bufs *b);

/* Records the mixer over B rows of T tokens: `in` [B·T, C] the normed input, out [B·T, C] += scale ·
 * the mixer's output. st: conv [B, K - 1, I] (NULL when K == 1) and ssm [B, I, N] (convB/convC unused),
 * or NULL (from zero). Views go into sc. */
gboolean hn_mamba1_record (HnCmd *cmd, HnScratch *sc, const HnMamba1Dims *d, const HnMamba1Weights *w,
                           const HnMamba1Bufs *buf, int B, int T, const HnSsmState *st, HnTensor *out, HnTensor *in,
                           float scale, GError **error);

G_END_DECLS
