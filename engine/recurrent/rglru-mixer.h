/* Griffin's recurrent block (transformers' RecurrentGemmaRecurrentBlock) as one recording, the
 * temporal block of recurrent_gemma's "recurrent" layers:
 *
 *   y = gelu_tanh(linear_y(h))                         [., L]
 *   x = conv1d(linear_x(h)) + conv bias                (causal depthwise, carrying the last K - 1 inputs)
 *   x = rglru(x, σ-gates from the block-diagonal linears, Λ)   (ops-rglru.h; reset at position 0)
 *   out += scale · linear_out(x · y)
 *
 * The block-diagonal gates (input_gate_weight / recurrent_gate_weight [heads, L/heads, L/heads])
 * are expanded at load into dense [L, L] matrices (zeros off the blocks), so they run as matmuls. */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"

G_BEGIN_DECLS

typedef struct {
  int width;  /* hidden_size */
  int lru;    /* lru_width */
  int kernel; /* conv1d_width */
  int heads;  /* num_attention_heads: the gates' diagonal blocks */
} HnRglruDims;

/* One layer's weights: linear_y, linear_x [L, W] with biases; conv f32 [L, K] and its bias [L];
 * the gates as dense [L, L] with biases [L]; recurrent_param f32 [L]; linear_out [W, L] with bias. */
typedef struct {
  HnTensor *w_y, *b_y, *w_x, *b_x, *conv_w, *conv_b, *w_gi, *b_gi, *w_ga, *b_ga, *lambda, *out_w, *out_b;
} HnRglruWeights;

/* Activation buffers of up to max_tok tokens, each [., L]: the y branch, the x branch and its conv,
 * the two gates' pre-activations. */
typedef struct {
  HnTensor *y, *x, *xc, *gi, *ga;
} HnRglruBufs;

gboolean hn_rglru_bufs_init (HnRglruBufs *b, HnVkContext *ctx, const HnRglruDims *d, gint64 max_tok, GError **error);
void hn_rglru_bufs_clear (HnRglruBufs *b);

/* Records the block over B rows of T tokens from position pos0: `in` [B·T, W] the normed input,
 * out [B·T, W] += scale · the block's output. conv f32 [B, K - 1, L] and h f32 [B, L] (any shape of
 * that count) the carried states (both NULL: from zero, nothing kept). Views go into sc. */
gboolean hn_rglru_record (HnCmd *cmd, HnScratch *sc, const HnRglruDims *d, const HnRglruWeights *w,
                          const HnRglruBufs *buf, int B, int T, int pos0, HnTensor *conv, HnTensor *h, HnTensor *out,
                          HnTensor *in, float scale, GError **error);

G_END_DECLS
