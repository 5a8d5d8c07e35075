/* Gated DeltaNet (transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet) as one recording, the
 * token mixer of the linear-attention layers of the qwen3_next / qwen3_5 hybrids:
 *
 *   qkv, z, b, a = in_proj(h)          (qwen3_next's fused in_proj_qkvz / in_proj_ba regrouped at load
 *                                       from its per-key-head interleaving into q | k | v, z, b, a)
 *   qkv = silu(conv1d(qkv))            (causal depthwise, carrying the last K - 1 inputs)
 *   y = gated_delta_rule(qkv, a, b)    (ops-delta.h: L2-normed q, k; g from A_log, dt_bias; β = σ(b))
 *   out += scale · out_proj(rmsnorm_head(y) · w · silu(z))   (RMSNormGated over each value head)
 */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"

G_BEGIN_DECLS

typedef struct {
  int width;                 /* hidden_size */
  int n_k_heads, n_v_heads;  /* linear_num_key_heads, linear_num_value_heads */
  int k_dim, v_dim;          /* linear_key_head_dim, linear_value_head_dim */
  int kernel;                /* linear_conv_kernel_dim */
  float norm_eps;            /* the gated norm's (rms_norm_eps) */
} HnDeltaNetDims;

/* q | k | v channels of the conv (2·HK·DK + HV·DV). */
static inline gint64
hn_deltanet_conv_dim (const HnDeltaNetDims *d)
{
  return 2 * (gint64) d->n_k_heads * d->k_dim + (gint64) d->n_v_heads * d->v_dim;
}

/* One layer's weights: in_proj rows qkv [CD, W], z [HV·DV, W], b and a [HV, W]; conv f32 [CD, K];
 * A_log, dt_bias f32 [HV]; the gated norm's weight [DV]; out_proj [W, HV·DV]. */
typedef struct {
  HnTensor *w_qkv, *w_z, *w_b, *w_a, *conv_w, *A_log, *dt_bias, *norm_w, *out_w;
} HnDeltaNetWeights;

/* Activation buffers of up to max_tok tokens: qkv and its conv [., CD]; z, y [., HV·DV]; b, a [., HV]. */
typedef struct {
  HnTensor *qkv, *qkvc, *z, *y, *b, *a;
} HnDeltaNetBufs;

gboolean hn_deltanet_bufs_init (HnDeltaNetBufs *b, HnVkContext *ctx, const HnDeltaNetDims *d, gint64 max_tok,
                                GError **error);
void hn_deltanet_bufs_clear (HnDeltaNetBufs *b);

/* Records the mixer over B rows of T tokens: `in` [B·T, W] the normed input, out [B·T, W] += scale ·
 * the mixer's output. conv f32 [B, K - 1, CD] and state f32 [B, HV·DK, DV] the carried states
 * (both NULL: from zero, nothing kept). Views go into sc (drop them after the submit). */
gboolean hn_deltanet_record (HnCmd *cmd, HnScratch *sc, const HnDeltaNetDims *d, const HnDeltaNetWeights *w,
                             const HnDeltaNetBufs *buf, int B, int T, HnTensor *conv, HnTensor *state, HnTensor *out,
                             HnTensor *in, float scale, GError **error);

G_END_DECLS
