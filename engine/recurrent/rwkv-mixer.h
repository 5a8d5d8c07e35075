/* One RWKV-4 block (transformers' RwkvBlock) as one recording, for the state-space decoders
 * (ssm/mamba.c: rwkv). With n1 = ln1(x), n2 = ln2(x) and prev(n) the previous token's n (the
 * carried shift state at a chunk's first token, zeros from a fresh state):
 *
 *   mix_m(n)   = m · n + (1 - m) · prev(n)          (a causal conv1d of kernel 2, weights [1 - m, m])
 *   k, v, r    = key(mix_k(n1)), value(mix_v(n1)), sigmoid(receptance(mix_r(n1)))
 *   x         += output(r · wkv4(k, v; time_decay, time_first))
 *   k', r'     = relu(key(mix_k'(n2)))², sigmoid(receptance(mix_r'(n2)))
 *   x         += r' · value(k')
 *
 * The inference rescale (rescale_every) is the caller's: output and value weights divided at load
 * and x halved after the block.
 */
#pragma once
#include "tensor/hn-tensor.h"
#include "tensor/scratch.h"

G_BEGIN_DECLS

typedef struct {
  int hidden, att, ffn; /* C, attention_hidden_size A, intermediate_size F */
  float eps;            /* ln1 / ln2 */
} HnRwkvDims;

/* One block's weights: ln1, ln2 (weight, bias) [C]; the token-shift mixes as conv1d weights f32
 * [C, 2] (att k, v, r; ffn k, r); time_decay, time_first f32 [A]; key, value, receptance [A, C],
 * output [C, A]; ffn key [F, C], receptance [C, C], value [C, F]. */
typedef struct {
  HnTensor *ln1_w, *ln1_b, *ln2_w, *ln2_b;
  HnTensor *att_mix[3], *ffn_mix[2];
  HnTensor *time_decay, *time_first, *w_k, *w_v, *w_r, *w_o;
  HnTensor *f_k, *f_r, *f_v;
} HnRwkvWeights;

/* Activations of up to max_tok tokens, flat [max_tok, width]: n, mk, mv, mr [., C]; k, v, r, y [., A];
 * fk [., F]; fr, fv [., C]. */
typedef struct {
  HnTensor *n, *mk, *mv, *mr, *k, *v, *r, *y, *fk, *fr, *fv;
} HnRwkvBufs;

/* Carried state of B rows: the shifts att [B, 1, C] and ffn [B, 1, C] (ln1 / ln2 of the last token),
 * wkv [B, 3, A] (num, den, max; hn_op_wkv4). */
typedef struct {
  HnTensor *att_shift, *ffn_shift, *wkv;
} HnRwkvState;

gboolean hn_rwkv_bufs_init (HnRwkvBufs *b, HnVkContext *ctx, const HnRwkvDims *d, gint64 max_tok, GError **error);
void hn_rwkv_bufs_clear (HnRwkvBufs *b);
/* Device bytes of hn_rwkv_bufs_init's buffers. */
guint64 hn_rwkv_bufs_bytes (const HnRwkvDims *d, gint64 max_tok);

/* Records the block over B rows of T tokens on x [B·T, C] in place. st NULL: from a fresh state,
 * nothing kept. Views go into sc. */
gboolean hn_rwkv_record (HnCmd *cmd, HnScratch *sc, const HnRwkvDims *d, const HnRwkvWeights *w,
                         const HnRwkvBufs *buf, int B, int T, const HnRwkvState *st, HnTensor *x, GError **error);

G_END_DECLS
