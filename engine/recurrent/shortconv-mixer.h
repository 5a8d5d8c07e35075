/* LFM2's gated short convolution (transformers' Lfm2ShortConv) as one recording, the token mixer of
 * the hybrid decoder's conv layers:
 *
 *   B, C, x = in_proj(h)              (in_proj split by rows at load, in that order)
 *   y = C · conv1d(B · x)             (causal depthwise over time, kernel L_cache, no activation,
 *                                      carrying the last K - 1 products B · x)
 *   out += scale · out_proj(y)
 *
 * A step carries the exact causal window, as the full forward and causal_conv1d_update do.
 * (transformers' CPU slow_forward rolls its L_cache-wide state and writes the new product at
 * min(position, L_cache - 1), which drops inputs when decoding starts after a prompt shorter than
 * L_cache - 1 tokens; from longer prompts the two agree.)
 */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"

G_BEGIN_DECLS

typedef struct {
  int width;   /* hidden_size: every projection is [width, width] */
  int kernel;  /* conv_L_cache */
  gboolean bias; /* conv_bias: in_proj, the conv and out_proj have biases */
} HnShortConvDims;

/* One layer's weights: in_proj rows B, C, x [W, W] (biases nullable); conv f32 [W, K] (+ bias);
 * out_proj [W, W] (+ bias). */
typedef struct {
  HnTensor *w_B, *w_C, *w_x, *b_B, *b_C, *b_x, *conv_w, *conv_b, *out_w, *out_b;
} HnShortConvWeights;

/* Activation buffers of up to max_tok tokens, flat [max_tok, W]: the B and C gates, x (then the
 * conv's output). */
typedef struct {
  HnTensor *b, *c, *x;
} HnShortConvBufs;

gboolean hn_shortconv_bufs_init (HnShortConvBufs *b, HnVkContext *ctx, const HnShortConvDims *d, gint64 max_tok,
                                 GError **error);
void hn_shortconv_bufs_clear (HnShortConvBufs *b);

/* Records the mixer over B rows of T tokens: `in` [B·T, W] the normed input, out [B·T, W] += scale ·
 * the mixer's output. state: f32 [B, K - 1, W], the products before these tokens, replaced by the
 * last K - 1 (NULL: from zero, nothing kept). Views go into sc (drop them after the submit). */
gboolean hn_shortconv_record (HnCmd *cmd, HnScratch *sc, const HnShortConvDims *d, const HnShortConvWeights *w,
                              const HnShortConvBufs *buf, int B, int T, HnTensor *state, HnTensor *out, HnTensor *in,
                              float scale, GError **error);

G_END_DECLS
