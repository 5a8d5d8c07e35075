/* The Mamba-2 mixer as one recording, shared by the pure state-space decoder (ssm/mamba.c) and the
 * hybrid decoders whose attention layers the transformer graph runs (bamba: transformer-graph.c):
 *
 *   z, x, B, C, dt = in_proj(h)              (in_proj split by rows at load)
 *   x, B, C = silu(conv1d(x, B, C))          (causal, carrying the last K - 1 inputs)
 *   y = ssd_scan(x, dt + dt_bias, A, B, C) + D · x   (per head; B and C per group)
 *   out += scale · out_proj(rmsnorm(y · silu(z)) · w)   (nemotron_h: the rmsnorm per group of channels)
 */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"
#include "formats/model-config.h"

G_BEGIN_DECLS

typedef struct {
  int inner, state, n_heads, head_dim, n_groups; /* inner = n_heads · head_dim */
  float norm_eps;                                /* the gated RMSNorm's */
  int norm_groups;                               /* > 1: it normalises each of that many channel groups */
  gboolean dt_limit;                             /* time_step_limit other than (0, inf) */
  float dt_min, dt_max;
} HnMamba2Dims;

/* One layer's weights: in_proj rows z [I], x [I], B [G·N], C [G·N], dt [H] (biases nullable); the
 * conv's x, B and C channels (f32 [., K], biases nullable); dt_bias, A_log, D f32 [H]; the gated
 * norm's weight [I]; out_proj [C, I] (bias nullable). */
typedef struct {
  HnTensor *w_z, *w_x, *w_B, *w_C, *w_dt, *b_z, *b_x, *b_B, *b_C, *b_dt;
  HnTensor *conv_w, *conv_b, *conv_wB, *conv_bB, *conv_wC, *conv_bC;
  HnTensor *dt_bias, *A_log, *D, *norm_w, *out_w, *out_b;
} HnMamba2Weights;

/* Activation buffers of up to max_tok tokens, flat [max_tok, width]: z, x, xc, y, g [., I];
 * B, C, Bc, Cc [., G·N]; dt [., H]. */
typedef struct {
  HnTensor *z, *x, *xc, *y, *g, *B, *C, *Bc, *Cc, *dt;
} HnMamba2Bufs;

/* The carried state of B rows (all NULL: from zero, nothing kept): conv [B, K - 1, I] and
 * convB/convC [B, K - 1, G·N] (NULL when K == 1), ssm [B, H·P, N]. */
typedef struct {
  HnTensor *conv, *convB, *convC, *ssm;
} HnSsmState;

/* d->dt_limit, dt_min and dt_max from config.json's time_step_limit ([lo, hi], default (0, inf)). */
gboolean hn_mamba2_dt_limit_from_config (const HnModelConfig *cfg, HnMamba2Dims *d, GError **error);

gboolean hn_mamba2_bufs_init (HnMamba2Bufs *b, HnVkContext *ctx, const HnMamba2Dims *d, gint64 max_tok,
                              GError **error);
void hn_mamba2_bufs_clear (HnMamba2Bufs *b);

/* Records the mixer over B rows of T tokens: `in` [B·T, C] the normed input, out [B·T, C] += scale ·
 * the mixer's output. Views go into sc (drop them after the submit). */
gboolean hn_mamba2_record (HnCmd *cmd, HnScratch *sc, const HnMamba2Dims *d, const HnMamba2Weights *w,
                           const HnMamba2Bufs *buf, int B, int T, const HnSsmState *st, HnTensor *out, HnTensor *in,
                           float scale, GError **error);

G_END_DECLS
