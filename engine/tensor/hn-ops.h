/* Forward ops (llm.c/ggml style): each is a plain function that checks its
 * tensors, then records one or a few dispatches into `cmd`. Nothing runs
 * until hn_cmd_submit_wait(). Every op has a CPU reference in
 * hn-cpu-ref.h and a test in tests/engine/test-ops-*.c.
 *
 * Conventions
 * - Shapes are row-major, shape[0] outermost. "rows" = product of all dims
 *   but the last, "cols" = the last dim.
 * - Activations are f32. Weight-like inputs (matmul B, embedding tables)
 *   may be f16/bf16 storage; math is f32.
 * - `out` must already exist with the right shape and dtype (allocate once,
 *   reuse every step); ops never allocate device memory. Unless an op says
 *   so, out must not overlap its inputs (elementwise ops, norms, softmax and
 *   rope may run in place: out == in).
 * - Backward ops will be named hn_op_<name>_back with shaders <name>_back.comp.
 * - Every failure is a GError in HN_ERROR naming the op and the tensor.
 */
#pragma once
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

/* ------------------------------------------------------------ matmul */

/* y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]): a Linear layer with W stored
 * [out, in] as Hugging Face stores it. x and y may have leading dims (M =
 * rows). W is f32, f16 or bf16; bias (nullable) f32. Picks the tiled kernel,
 * or the matrix-vector kernel (subgroup reductions) when M is small (decode).
 * Under fp16 autocast y may be f16 (its values are f16 already: stored as
 * they are), on the cooperative-matrix-2 kernel or the scalar one (N and
 * y's offset multiples of 4); elsewhere that fails closed. */
gboolean hn_op_matmul (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, GError **error);

/* y[M, N] += alpha · x·Wᵀ + bias: hn_op_matmul with the add into y in the
 * kernel's epilogue (a residual add without a pass of its own). A bias with
 * alpha != 1 is refused unless the matrix-vector kernel runs it (which adds
 * alpha · (x·Wᵀ + bias), as hn_op_matvec_add). */
gboolean hn_op_matmul_add (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, float alpha,
                           GError **error);

/* y[i] = x · w[i]ᵀ + bias[i] for i < n (bias nullable, or its entries): the
 * Linear layers of one input (q, k, v; gate, up), with one f16 copy of x for
 * all of them on the cooperative-matrix-2 path, and no barrier between them. */
gboolean hn_op_matmul_n (HnCmd *cmd, guint n, HnTensor *const *y, HnTensor *x, HnTensor *const *w,
                         HnTensor *const *bias, GError **error);

/* n Linear layers of one input with their weights stacked: w [n·N, K] (row
 * block i is W_i), bias [n·N] or NULL, y [n·M, N] (row block i is x·W_iᵀ +
 * bias_i). matmul_cm2 runs them as one batch (q, k and v of gpt2's training
 * step: 1152 tiles where each alone has 384); elsewhere one at a time. */
gboolean hn_op_matmul_stacked (HnCmd *cmd, guint n, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias,
                               GError **error);

/* TRUE when hn_op_matmul, hn_op_matmul_add and hn_op_matmul_n with weight w
 * and x of `rows` rows run on the cooperative-matrix-2 kernel with f16
 * operands (bf16/f16 weights on a device with VK_NV_cooperative_matrix2, more
 * than 8 rows, no fp16 autocast, HN_NO_F16_ACTS unset): x may then be an f16
 * tensor (rmsnorm's or glu's f16 output), read as it is, where an f32 x is
 * copied to f16 (clamped to ±65504) first — the same numbers. Anywhere else
 * an f16 x is refused. */
gboolean hn_op_matmul_takes_f16 (HnCmd *cmd, HnTensor *w, gint64 rows);

/* TRUE when hn_op_matmul takes the matrix-vector kernel for x with M rows
 * (1..8 rows, subgroup arithmetic, HN_NO_MATVEC unset); the fused decode
 * ops below need it and fail with HN_ERROR_UNSUPPORTED otherwise. */
gboolean hn_op_matvec_available (HnCmd *cmd, gint64 M);

/* An RMSNorm the matrix-vector kernel applies to x on the fly (the decode
 * step's pre-norm, no separate pass): x̂ = x / sqrt(mean(x²) + eps) · w,
 * or · (1 + w) with plus_one; weight nullable (f32 [K]). */
typedef struct {
  HnTensor *weight;
  float eps;
  gboolean plus_one;
} HnMatvecNorm;

/* y[M, N] = rmsnorm(x)·Wᵀ + bias in one pass. */
gboolean hn_op_matvec_normed (HnCmd *cmd, HnTensor *y, HnTensor *x, const HnMatvecNorm *norm, HnTensor *w,
                              HnTensor *bias, GError **error);

/* y[M, N] += alpha · (x·Wᵀ + bias): the residual add fused into the
 * matrix-vector kernel (y is read and written; it must not overlap x or W). */
gboolean hn_op_matvec_add (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, float alpha,
                           GError **error);

typedef enum {
  HN_MATMUL_DEFAULT    = 0,
  HN_MATMUL_TRANS_A    = 1 << 0,  /* A is stored [batch, K, M] */
  HN_MATMUL_TRANS_B    = 1 << 1,  /* B is stored [batch, N, K] */
  HN_MATMUL_ACCUMULATE = 1 << 2,  /* C += result (gradient accumulation) */
  HN_MATMUL_EXACT      = 1 << 3,  /* never the reduced-precision tensor-core path */
  HN_MATMUL_F16        = 1 << 4,  /* fp16 autocast for this call (as the recorder's HN_AUTOCAST_F16) */
} HnMatmulFlags;

/* Precision: with f32 B every path is f32. With f16/bf16 B on a device with
 * cooperative matrices (hn_vk_context_has_coopmat) and M > 8, the tensor-core
 * kernel rounds BOTH operands to f16 (clamped to ±65504; bf16 B converted) and
 * accumulates in f32 — like PyTorch autocast. This tells whether a call with
 * these arguments takes that path (HN_MATMUL_EXACT or the environment
 * variable HN_MATMUL_EXACT=1 forces f32). hn_op_matmul passes no flags. */
/* The tensor cores' ceiling (benchmark --workload mma-peak): `workgroups`
 * workgroups of the device's largest power-of-two size up to 256 multiply
 * register-resident 16x16 f16 tiles `iters` x 8 times each subgroup
 * (mma_peak.comp); out: at least workgroups * subgroups * 256 floats.
 * *flops: the multiply-adds' FLOPs. Fails on a device without KHR
 * cooperative matrix. */
gboolean hn_op_tensor_core_peak (HnCmd *cmd, HnTensor *out, guint32 workgroups, guint32 iters, double *flops,
                                 GError **error);
/* The same through VK_NV_cooperative_matrix2's workgroup-scope matrices
 * (mma_peak_cm2.comp): a bm x bk by bk x bn multiply-add iters times per
 * workgroup, the operands constants or (shared) reloaded from shared memory
 * each step. out is never written (any size). */
gboolean hn_op_tensor_core_peak_cm2 (HnCmd *cmd, HnTensor *out, guint32 workgroups, guint32 iters, guint32 bm,
                                     guint32 bn, guint32 bk, gboolean shared, double *flops, GError **error);
gboolean hn_op_matmul_reduced_precision (HnVkContext *ctx, HnDType b_dtype, gint64 M, HnMatmulFlags flags);
/* Whether x·Wᵀ with x of `rows` rows runs in 16 bits on this device: a 16-bit
 * W as above, or ggml blocks taken through their f16 form (tensor/ops-quant.c). */
gboolean hn_op_linear_reduced_precision (HnCmd *cmd, HnTensor *w, gint64 rows);
/* Whether bf16 weights are stored as f16 on this device (where the tensor
 * cores read f16: a device with cooperative matrices, HN_MATMUL_EXACT unset;
 * HN_BF16_AS_F16=0 keeps bf16), and the conversion: FALSE (nothing
 * allocated) when a value is beyond f16's range (|x| > 65504, Inf, NaN). The
 * conversion rounds to nearest even, as the kernels' in-load conversion of
 * bf16 did (values below 2^-14 become f16 subnormals, losing bits below
 * 2^-24); the exact f32 paths (the matrix-vector kernel) then read those
 * f16 values too. */
gboolean hn_bf16_weights_as_f16 (HnVkContext *ctx);
gboolean hn_bf16_to_f16_if_fits (const void *bf16, gsize n, guint16 **out);

/* fp16 autocast (the recorder's hn_cmd_set_autocast (HN_AUTOCAST_F16), or
 * HN_MATMUL_F16 on one hn_op_bmm call; HN_MATMUL_EXACT wins): whatever B's
 * dtype, both operands are rounded to f16 (to nearest, ±Inf past ±65504: an
 * overflow shows, for the loss scaler) and each result alpha·A·B + f16(bias)
 * is rounded to f16 before it is stored or added to C — what PyTorch's fp16
 * autocast computes for a Linear / matmul (f16 in, f32 accumulation, f16 out)
 * when its f16 output is then used as f32. Runs on the tensor cores
 * (matmul_cm2, matmul_coopmat) where the device has cooperative matrices,
 * else in the scalar kernel with the same rounding (lavapipe). The
 * matrix-vector kernel is not used in this mode. This tells whether a call
 * on this recorder with these flags runs so. */
gboolean hn_op_matmul_f16 (HnCmd *cmd, HnMatmulFlags flags);

/* out (f16, as many elements) = the quantized weight w (NF4 / NF4_DQ / int8,
 * tensor/quant.h) dequantized, each value rounded to f16 (clamped to ±65504)
 * as the tensor-core decode does. w's elements a multiple of 8. */
gboolean hn_op_quant_to_f16 (HnCmd *cmd, HnTensor *out, HnTensor *w, GError **error);

/* Batched C[b] = alpha · op(A[b]) · op(B[b]). A is [batch, M, K] (or [batch,
 * K, M] with TRANS_A), B [batch, K, N] (or [batch, N, K] with TRANS_B), C
 * [batch, M, N]. A 2-D operand has batch 1; a 4-D one has batch shape[0] *
 * shape[1]. An operand of batch 1 is broadcast over C's batch. A and C f32;
 * B f32/f16/bf16. */
gboolean hn_op_bmm (HnCmd *cmd, HnTensor *c, HnTensor *a, HnTensor *b, HnMatmulFlags flags, float alpha,
                    GError **error);

/* ------------------------------------------------------------ elementwise */

typedef enum {
  HN_BINARY_ADD,
  HN_BINARY_SUB,
  HN_BINARY_MUL,
  HN_BINARY_DIV,
} HnBinaryOp;

/* out = a (op) b with numpy broadcasting (shapes right-aligned, a dim of 1
 * broadcasts). out has the broadcast shape. All f32. out may be a or b when
 * it has that operand's shape. A bias is hn_op_add (y, y, bias[N]). */
gboolean hn_op_binary (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, HnBinaryOp op, GError **error);
gboolean hn_op_add (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, GError **error);
gboolean hn_op_mul (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, GError **error);

/* out = in * scale + offset (same element count). */
gboolean hn_op_scale (HnCmd *cmd, HnTensor *out, HnTensor *in, float scale, float offset, GError **error);

/* out = min(max(in, lo), hi) (same element count; in place allowed). */
gboolean hn_op_clamp (HnCmd *cmd, HnTensor *out, HnTensor *in, float lo, float hi, GError **error);

/* out = value everywhere (f32 or i32 tensors; an i32 gets (gint32) value). */
gboolean hn_op_fill (HnCmd *cmd, HnTensor *out, float value, GError **error);

typedef enum {
  HN_ACT_IDENTITY,
  HN_ACT_SILU,        /* x·sigmoid(x) (HF "silu", "swish") */
  HN_ACT_GELU,        /* exact, erf (HF "gelu") */
  HN_ACT_GELU_TANH,   /* tanh approximation (HF "gelu_new", "gelu_pytorch_tanh", "gelu_fast") */
  HN_ACT_RELU,
  HN_ACT_RELU2,       /* relu(x)^2 (HF "relu2") */
  HN_ACT_QUICK_GELU,  /* x·sigmoid(1.702x) (HF "quick_gelu") */
  HN_ACT_SIGMOID,
  HN_ACT_TANH,
  HN_ACT_SOFTPLUS,    /* log(1 + e^x); unary only (laguna's attention gate), no hidden_act name */
} HnActivation;

/* Maps an HF `hidden_act` string; FALSE for an unknown one. */
gboolean hn_activation_from_string (const char *name, HnActivation *out);
const char *hn_activation_name (HnActivation act);

gboolean hn_op_unary (HnCmd *cmd, HnTensor *out, HnTensor *in, HnActivation act, GError **error);

/* Gated: out[.., F] = act(gate[.., F]) * up[.., F] (SwiGLU with SILU, GeGLU
 * with GELU/GELU_TANH). With up == NULL, gate is [.., 2F] holding the gate in
 * its first half and up in the second (a fused gate_up_proj). out f32, or f16
 * (clamped to ±65504: the next matmul's operand, see hn_op_matmul_takes_f16;
 * an even element count and offset). */
gboolean hn_op_glu (HnCmd *cmd, HnTensor *out, HnTensor *gate, HnTensor *up, HnActivation act, GError **error);

/* A gated MLP's gate and up projections in one pass of the cooperative-
 * matrix-2 kernel: out[M, F] (f16) = act(x·W_gateᵀ) * (x·W_upᵀ), clamped
 * to ±65504 (the down projection's operand), with no gate/up results in
 * memory and no glu pass. x f32 (copied to f16 first) or f16; W_gate and
 * W_up [F, K] of one dtype; no biases. Only where
 * hn_op_matmul_glu_available (HN_NO_CM2_GLU unset); elsewhere
 * HN_ERROR_UNSUPPORTED. */
gboolean hn_op_matmul_glu_available (HnCmd *cmd, HnTensor *w_gate, HnTensor *w_up, gint64 rows);
gboolean hn_op_matmul_glu (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w_gate, HnTensor *w_up, HnActivation act,
                           GError **error);

/* out[M, F] = act(x̂·W_gateᵀ + b_gate) * (x̂·W_upᵀ + b_up) in one pass over
 * both matrices (same dtype, [F, K]); biases nullable; x̂ = x, or
 * rmsnorm(x) with norm (HnMatvecNorm, nullable). */
gboolean hn_op_matvec_glu (HnCmd *cmd, HnTensor *out, HnTensor *x, const HnMatvecNorm *norm, HnTensor *w_gate,
                           HnTensor *b_gate, HnTensor *w_up, HnTensor *b_up, HnActivation act, GError **error);

/* ------------------------------------------------------------ gather */

/* out[N, D] = table[ids[n], :]. table [V, D] f32/f16/bf16, ids i32 [N] (any
 * shape with N elements). An id outside [0, V) yields a row of zeros: check
 * ids from outside on the host (the tokenizer's ids always fit). */
gboolean hn_op_embedding (HnCmd *cmd, HnTensor *out, HnTensor *table, HnTensor *ids, GError **error);

/* ------------------------------------------------------------ norms */

typedef enum {
  HN_NORM_DEFAULT          = 0,
  HN_NORM_WEIGHT_PLUS_ONE  = 1 << 0,  /* y = x̂ · (1 + w) (Gemma) */
  HN_NORM_ROUND_BF16       = 1 << 1,  /* round x̂ to bf16 before the weight (HF with bf16 activations) */
  HN_NORM_ROUND_F16        = 1 << 2,  /* round x̂ to f16 before the weight */
} HnNormFlags;

/* RMSNorm over the last dim: y = x / sqrt(mean(x²) + eps) · w. w [cols] or
 * NULL (no weight). Per-head norms (q/k norm) are [T, H, D] with w [D]. out
 * f32 (may be x), or f16 apart from x (the next matmul's operand, see
 * hn_op_matmul_takes_f16; an even last dim and offset): clamped to ±65504,
 * or under fp16 autocast rounded as autocast rounds (as hn_op_cast_f16). */
gboolean hn_op_rmsnorm (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, float eps, HnNormFlags flags,
                        GError **error);

/* LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) · w + b;
 * w and b nullable; out f32 or f16 as hn_op_rmsnorm's. */
gboolean hn_op_layernorm (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, HnTensor *b, float eps,
                          GError **error);

/* ------------------------------------------------------------ softmax */

typedef struct {
  float scale;      /* multiplies the input first; 0 means 1 */
  float softcap;    /* > 0: x = softcap · tanh(x / softcap) after scaling (Gemma 2) */
  gboolean causal;  /* in is [.., T, S]: row t (position pos0 + t) sees columns c <= pos0 + t */
  gint64 pos0;      /* position of the first row of each [T, S] block */
  gint64 window;    /* > 0: row at position p also hides columns c <= p - window */
  HnTensor *mask;   /* optional additive f32 mask [Bm, Tm, S] (or [Tm, S], [S]) with Tm 1 or T;
                     * the rows of `in` are split evenly over the Bm batches (padding masks) */
} HnSoftmaxParams;

/* Softmax over the last dim. A row whose columns are all hidden yields zeros. */
gboolean hn_op_softmax (HnCmd *cmd, HnTensor *out, HnTensor *in, const HnSoftmaxParams *params, GError **error);

/* ------------------------------------------------------------ rope */

typedef enum {
  HN_ROPE_NEOX,  /* rotate_half: pairs (i, i + rot/2) — HF Llama and most models */
  HN_ROPE_GPTJ,  /* interleaved pairs (2i, 2i+1) — GPT-J, CodeGen, ChatGLM */
} HnRopeStyle;

typedef enum {
  HN_ROPE_SCALING_NONE,
  HN_ROPE_SCALING_LINEAR,
  HN_ROPE_SCALING_DYNAMIC,   /* dynamic NTK */
  HN_ROPE_SCALING_LLAMA3,
  HN_ROPE_SCALING_YARN,
  HN_ROPE_SCALING_LONGROPE,
} HnRopeScalingType;

typedef struct {
  HnRopeScalingType type;
  double factor;
  gint64 original_max_position_embeddings;  /* 0 = max_position_embeddings */
  double low_freq_factor, high_freq_factor; /* llama3 */
  double beta_fast, beta_slow;              /* yarn; 0 = 32 and 1 */
  double attention_factor;                  /* yarn/longrope; 0 = derived like transformers */
  double mscale, mscale_all_dim;            /* yarn (DeepSeek); 0 = unset */
  gboolean yarn_no_truncate;                /* yarn "truncate": false */
  const double *short_factor, *long_factor; /* longrope, n_factors = rot_dims / 2 each */
  guint n_factors;
} HnRopeScaling;

/* Host side, mirroring transformers' ROPE_INIT_FUNCTIONS: fills inv_freq
 * [rot_dims / 2] and the attention scale that multiplies cos and sin.
 * seq_len is the current sequence length (dynamic NTK and longrope depend on
 * it; pass 0 when unknown). scaling may be NULL. */
gboolean hn_rope_compute_inv_freq (double base, int rot_dims, gint64 max_position_embeddings,
                                   const HnRopeScaling *scaling, gint64 seq_len,
                                   float *inv_freq, float *attention_scale, GError **error);

/* Rotates the first rot_dims of every head. x [.., H, D] (e.g. [T, H, D] or
 * [B, T, H, D]); positions i32 with rows/H elements (one per token); inv_freq
 * f32 [rot_dims / 2] on the device. cos/sin are multiplied by attn_scale.
 * out may be x. */
gboolean hn_op_rope (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *positions, HnTensor *inv_freq,
                     int rot_dims, HnRopeStyle style, float attn_scale, GError **error);

/* Where hn_op_rope_kv writes the new keys and values: f32 caches [n_ctx, KVH * D] and
 * [n_ctx, KVH * Dv] from row row0 (dyn_row, nullable i32 [1]: row0 read on the device; rows past
 * n_ctx are then dropped). seqs > 1: the T new tokens are seqs sequences of T / seqs tokens each,
 * and the caches [seqs · n_ctx, ...] hold their caches one after another (sequence s's token j
 * at row s · n_ctx + row0 + j); 0 or 1: one. */
typedef struct {
  HnTensor *k_cache, *v_cache;
  gint64 row0;
  HnTensor *dyn_row;
  gint64 seqs;
} HnKvDest;

/* The decode step's rope + cache writes in one dispatch: q [T, H, D] is rotated in place, k
 * [T, KVH, D] rotated into dest->k_cache and v [T, KVH, Dv] copied into dest->v_cache (k and v
 * themselves are left as they are). Same math as hn_op_rope then hn_op_kv_store. */
gboolean hn_op_rope_kv (HnCmd *cmd, HnTensor *q, HnTensor *k, HnTensor *v, HnTensor *positions, HnTensor *inv_freq,
                        int rot_dims, HnRopeStyle style, float attn_scale, const HnKvDest *dest, GError **error);

/* ------------------------------------------------------------ attention */

/* The decode step's new key and value, for hn_op_attention to write itself (HnAttentionParams.new_kv):
 * what hn_op_rope_kv would do for one query before the attention, with the caches k/v at row pos0
 * (or dyn_pos) as the destination: k [1, KVH, D] rotated into the k cache, v [1, KVH, Dv] copied into
 * the v cache, and q rotated as the attention reads it (q's memory is left as it is). f32 caches. */
typedef struct {
  HnTensor *k, *v;
  HnTensor *positions; /* i32 [1]: the rope position */
  HnTensor *inv_freq;  /* f32 [rot_dims / 2] */
  int rot_dims;
  HnRopeStyle style;
  float attn_scale;
} HnAttentionNewKv;

typedef struct {
  float scale;            /* 0 = 1/sqrt(head_dim) */
  float softcap;          /* > 0: tanh soft-capping of the scores */
  gboolean causal;        /* query t (position pos0 + t) sees keys j <= pos0 + t */
  gint64 pos0;            /* position of the first query (decode: n_kv - T) */
  gint64 n_kv;            /* valid rows of the K/V cache; 0 = all of it */
  gint64 window;          /* > 0: also hide keys j <= p - window (sliding window) */
  gint64 local_chunk;     /* > 0 (not with window): also hide keys j < p - p % local_chunk, i.e. outside the
                           * query's own block of local_chunk positions (Llama 4's chunked attention); the
                           * tensor-core flash kernel does not take it (the exact kernels run) */
  HnTensor *alibi_slopes; /* optional f32 [H]: score += slope[h] · (j - p) */
  HnTensor *mask;         /* optional additive f32 [T, n_kv] (or [B, T, n_kv], [B, 1, n_kv]) */
  HnTensor *sinks;        /* optional f32 [H]: a logit per head that joins every softmax denominator and
                           * adds no value (gpt_oss); not with alibi_slopes */
  HnTensor *scratch;      /* optional f32 scratch for split-K decode (see below); NULL = one pass */
  HnTensor *dyn_pos;      /* optional i32 [1]: pos0 read on the device (n_kv = pos0 + T; pos0 and n_kv
                           * above are ignored), so a recorded step can be replayed at every position */
  gboolean reduced_precision; /* TRUE: many queries (T >= 16, D = Dv = 64 or 128) may run on the tensor
                               * cores (VK_NV_cooperative_matrix2) with q, k, v and the probabilities
                               * rounded to f16 (clamped to ±65504) and f32 accumulation, as fp16 autocast
                               * does; FALSE (default): exact f32 everywhere */
  HnTensor *lse;          /* optional f32 [B·T·H] (row (b·T + t)·H + h): the forward also writes each query
                           * row's log-sum-exp of its scores, which hn_op_attention_back_flash reuses. Only
                           * the flash kernel writes it: set it when hn_attention_flash_ok() says so (and
                           * reduced_precision); otherwise the op fails with HN_ERROR_UNSUPPORTED */
  const HnAttentionNewKv *new_kv; /* optional: rope and the cache writes of the new row in the same
                                   * dispatch (decode); only where hn_attention_new_kv_ok() says so,
                                   * otherwise the op fails with HN_ERROR_UNSUPPORTED */
  HnTensor *counters; /* optional i32 [>= B·T·KVH], all zero (and left zero): with split-K by KV head the
                       * last split of each group merges them in the same dispatch */
} HnAttentionParams;

/* Scaled-dot-product attention reading K/V from a cache:
 * out [T, H, Dv] = softmax(q·kᵀ·scale + ...)·v, q [T, H, D], k [n_ctx, KVH, D],
 * v [n_ctx, KVH, Dv] with H % KVH == 0 (GQA; KVH 1 = MQA). With a batch:
 * out/q [B, T, H, D], k/v [B, n_ctx, KVH, D]. f32 (k/v may be f16/bf16).
 * Split-K (flash-decoding): with T <= 8, many keys and few (head, query)
 * pairs, keys are split over several workgroups per head when
 * params->scratch (f32, owned by the caller and reused across steps) holds
 * B·T·H·n_split·(Dv + 2) elements; hn_attention_scratch_size() gives the
 * size for the largest n_kv. Too small or NULL: the single-pass kernel. */
gboolean hn_op_attention (HnCmd *cmd, HnTensor *out, HnTensor *q, HnTensor *k, HnTensor *v,
                          const HnAttentionParams *params, GError **error);

/* Scratch elements (f32) that let hn_op_attention use its full split-K
 * for up to n_kv keys with the given B, T, H, Dv (0 when it would not split). */
gint64 hn_attention_scratch_size (gint64 B, gint64 T, gint64 H, gint64 Dv, gint64 n_kv);

/* Whether hn_op_attention takes params->new_kv for one query (no batch dim) of H heads over KVH
 * cache heads of head dims D, Dv and n_ctx rows, with params' scratch, n_kv and dyn_pos: the
 * split-K kernel by KV head (at most 8 query heads per KV head), f32 caches. */
gboolean hn_attention_new_kv_ok (const HnAttentionParams *params, gint64 H, gint64 KVH, gint64 D, gint64 Dv,
                                 gint64 n_ctx, HnDType kv_dtype);

/* Paged K/V (issue 10): keys/values live in HN_KV_PAGE_SIZE-token pages of one
 * physical arena per layer; a page table maps each sequence's logical pages to
 * physical ones. */
#define HN_KV_PAGE_SIZE 16

typedef struct {
  float scale;           /* 0 = 1/sqrt(head_dim) */
  float softcap;         /* > 0: tanh soft-capping of the scores */
  gboolean causal;       /* query t of row b (position seq_len[b] - T + t) sees keys j <= its position */
  gint64 window;         /* > 0: also hide keys j <= p - window (sliding window) */
  gint64 local_chunk;    /* > 0 (not with window): also hide keys outside the query's block of local_chunk
                          * positions (HnAttentionParams.local_chunk) */
  HnTensor *page_table;  /* i32 [B, max_pages]: physical page of each logical page */
  HnTensor *seq_lens;    /* i32 [B]: tokens in each row's cache, the T new ones included */
  HnTensor *sinks;       /* optional f32 [H]: per-head logits in every softmax denominator (gpt_oss) */
} HnPagedAttentionParams;

/* Attention of q/out [B, T, H, D] over k/v arenas [n_pages * HN_KV_PAGE_SIZE, KVH, D]
 * read through params->page_table (entries must be valid pages for every key
 * below seq_len; rows may have different lengths). Same math as hn_op_attention
 * with pos0 = seq_len[b] - T and n_kv = seq_len[b] (sinks included); no ALiBi or mask. */
gboolean hn_op_attention_paged (HnCmd *cmd, HnTensor *out, HnTensor *q, HnTensor *k_arena, HnTensor *v_arena,
                                const HnPagedAttentionParams *params, GError **error);

/* dst[rows[r], :] = src[r, :]: scatters the rows of src [n, D] into dst [R, D]
 * (both f32; rows i32 [n], entries outside 0..R-1 are skipped). Writes the new
 * keys/values of a step into their slots of a paged arena. */
gboolean hn_op_set_rows (HnCmd *cmd, HnTensor *dst, HnTensor *src, HnTensor *rows, GError **error);

/* Standard ALiBi slopes for n_heads (as in BLOOM/MPT). */
void hn_alibi_slopes (int n_heads, float max_bias, float *slopes);

/* fairseq's fixed sinusoidal positions (m2m_100, xglm): row r of [n_rows, C] =
 * [sin(r·f_j) | cos(r·f_j)], f_j = 10000^(-j / (C/2 - 1)), a zero last column
 * when C is odd and a zero row at padding_idx (-1: none). New array. */
float *hn_sinusoidal_table_fairseq (int n_rows, int C, int padding_idx);

/* ------------------------------------------------------------ losses, picks */

/* loss[N] = logsumexp(logits[n, :]) - logits[n, targets[n]] (0 where the
 * target is ignore_index); mean (nullable, f32 [1]) = sum / number of
 * non-ignored rows (0 when there are none). logits [N, V] f32, targets i32
 * [N]. A target outside [0, V) that is not ignore_index yields NaN. */
gboolean hn_op_cross_entropy (HnCmd *cmd, HnTensor *loss, HnTensor *mean, HnTensor *logits,
                              HnTensor *targets, gint32 ignore_index, GError **error);

/* out i32 [rows] = index of the largest value of each row (first on ties). */
gboolean hn_op_argmax (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error);
/* The same; for one long row with f32 scratch of at least 2 · ceil(cols / 1024) elements, many
 * workgroups each pick in a chunk of the row and one more picks among them (decode's LM head). */
gboolean hn_op_argmax_scratch (HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *scratch, GError **error);

/* The k largest values of each row, sorted descending (lower index first on
 * ties): values f32 [rows, k] (nullable), indices i32 [rows, k]. */
gboolean hn_op_topk (HnCmd *cmd, HnTensor *values, HnTensor *indices, HnTensor *in, int k, GError **error);

/* Mixture-of-experts routing of router logits [N, E] to k experts per token:
 * weights f32 [N, E] get the k routing weights (times `scale`) and zeros
 * elsewhere, indices i32 [N, k] the chosen experts, best first. */
typedef enum {
  HN_MOE_ROUTE_SOFTMAX_TOPK,  /* softmax over all experts, the k best (mixtral, qwen_moe, olmoe, deepseek_v2) */
  HN_MOE_ROUTE_TOPK_SOFTMAX,  /* the k largest logits, softmax over those k (granitemoe, gpt_oss) */
  HN_MOE_ROUTE_SIGMOID_TOPK,  /* sigmoid scores, chosen by score + bias within the kept groups (deepseek_v3) */
  HN_MOE_ROUTE_SPARSEMIXER,   /* phimoe's sparsemixer at inference (k = 2) */
} HnMoeRouteKind;

typedef struct {
  HnMoeRouteKind kind;
  int k;                 /* 1..32 */
  gboolean norm_topk;    /* renormalise the k weights to sum to 1 (softmax and sigmoid kinds) */
  float scale;           /* multiplies the final weights (routed_scaling_factor); 0 means 1 */
  int n_group;           /* > 1: experts split into n_group groups (<= 32), only topk_group of them may be chosen */
  int topk_group;
  gboolean group_sum2;   /* a group's score is the sum of its two best (deepseek_v3), else its best (deepseek_v2) */
  float jitter_eps;      /* sparsemixer: experts within 2·eps (relative) of a pick share its softmax */
  HnTensor *bias;        /* optional f32 [E] added to the scores for the choice only (e_score_correction_bias) */
  float norm_min;        /* > 0: the renormalising sum is at least this (ernie4_5_moe's moe_norm_min) */
  float norm_add;        /* sigmoid kind: added to the renormalising sum (lfm2_moe 1e-6); 0 = 1e-20 (deepseek_v3) */
} HnMoeRouteParams;

gboolean hn_op_moe_route (HnCmd *cmd, HnTensor *weights, HnTensor *indices, HnTensor *logits,
                          const HnMoeRouteParams *params, GError **error);

/* Routed (sparse) expert execution, with no readback of the routing: moe_sort groups the
 * slots s = token · k + j of ids i32 [S] (moe_route's indices) by expert into offsets
 * i32 [E + 1], order i32 [S] and a work list tiles i32 [hn_moe_tiles_size (S, E)] (E <= 1024).
 * moe_matmul then computes
 * y[s, :] = x[s / x_div, :] · w[e, :, :]ᵀ (+ bias[e, :]) for each slot s of expert e, reading
 * only the experts some slot chose: x f32 [R, K] (x_div = k: token rows; 1: slot rows),
 * w [E, N, K] f32/f16/bf16, bias f32 [E, N] (nullable), y f32 [S, N]. moe_combine sums each
 * token's k rows: out[t, :] = sum_j weights[t, ids[t, j]] · y[t · k + j, :] (weights [T, E] f32,
 * ids i32 [T, k], y [T · k, C], out [T, C]). */
gint64 hn_moe_tiles_size (gint64 n_slots, gint64 n_experts);
gboolean hn_op_moe_sort (HnCmd *cmd, HnTensor *offsets, HnTensor *order, HnTensor *tiles, HnTensor *ids, int n_experts,
                         GError **error);
gboolean hn_op_moe_matmul (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *offsets,
                           HnTensor *order, HnTensor *tiles, int x_div, GError **error);
gboolean hn_op_moe_combine (HnCmd *cmd, HnTensor *out, HnTensor *y, HnTensor *weights, HnTensor *ids, GError **error);

/* ------------------------------------------------------------ layout */

/* out = in with the same element count; converts between f32, f16 and bf16
 * (round to nearest even); i32 -> i32. */
gboolean hn_op_copy (HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error);

/* New keys and values into a cache: k_cache f32 [n_ctx, Wk] and v_cache
 * [n_ctx, Wv] get rows row0..row0+T of k [T, Wk] and v [T, Wv] (any shapes
 * with those element counts; shape[0] of the caches is n_ctx),
 * one dispatch for both. dyn_row (nullable i32 [1]): row0 is read on the
 * device instead (rows past n_ctx are dropped), for replayed decode steps. */
gboolean hn_op_kv_store (HnCmd *cmd, HnTensor *k_cache, HnTensor *v_cache, HnTensor *k, HnTensor *v, gint64 row0,
                         HnTensor *dyn_row, GError **error);

/* out.shape[i] = in.shape[perm[i]] (f32 or i32; up to 4 dims). */
gboolean hn_op_permute (HnCmd *cmd, HnTensor *out, HnTensor *in, const int *perm, GError **error);
gboolean hn_op_transpose (HnCmd *cmd, HnTensor *out, HnTensor *in, int dim0, int dim1, GError **error);

/* out = in[.., start : start + out.shape[dim], ..] along `dim`. */
gboolean hn_op_slice (HnCmd *cmd, HnTensor *out, HnTensor *in, int dim, gint64 start, GError **error);

/* out = concatenation of a and b along `dim`. */
gboolean hn_op_concat (HnCmd *cmd, HnTensor *out, HnTensor *a, HnTensor *b, int dim, GError **error);

/* ------------------------------------------------------------ reductions */

typedef enum {
  HN_REDUCE_SUM,
  HN_REDUCE_MEAN,
  HN_REDUCE_MAX,
} HnReduceOp;

/* out [rows] (any shape with rows elements) = reduction of each row of in. */
gboolean hn_op_reduce (HnCmd *cmd, HnTensor *out, HnTensor *in, HnReduceOp op, GError **error);

G_END_DECLS
