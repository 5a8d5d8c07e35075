/* The training graph: a Transformer decoder's forward that keeps every
 * activation the backward needs, and an explicit per-layer backward
 * (llm.c style), recorded into one HnCmd per micro-batch.
 *
 * Why explicit instead of autodiff by graph rewrite: the families differ in
 * a handful of wiring switches (block kind, norms, q/k norm, fused
 * projections), so a hand-written backward per layer is short, easy to read
 * next to its forward, and lets us choose the memory layout (per-layer saved
 * activations, in-place cross-entropy gradient, no probability matrices)
 * without a general graph machinery. Each op's backward is tested on its own
 * (tests/engine/test-back-*.c); the whole graph is tested against PyTorch
 * (tests/engine/test-train-parity.c).
 *
 * Parameters: full training trains every weight of the model (f32 storage;
 * tied embeddings share one gradient); LoRA training (an adapter given)
 * freezes the base and trains each adapted module's A and B. */
#pragma once
#include "train/lora.h"
#include "transformer/transformer.h"
#include "tensor/ops-back.h"
#include "tensor/optim.h"

G_BEGIN_DECLS

typedef struct {
  char *name;        /* HF name (or the loader's name of a split piece) / LoRA tensor name */
  HnTensor *w;       /* the trained tensor (f32, on the device) */
  HnTensor *g;       /* its gradient (same shape) */
  HnTensor *m, *v;   /* optimizer state (AdamW moments; SGD uses m as momentum) */
  gboolean decay;    /* weight decay applies (not to biases and norms) */
  HnTensor *w16;     /* NULL, or w's f16 copy that the matmuls read under fp16 autocast (kept by the optimizer step) */
} HnTrainParam;

typedef struct _HnTrainGraph HnTrainGraph;

/* A graph for batches of `batch` rows of `seq_len` tokens. With `adapter`
 * (not NULL) the model's weights stay frozen and the adapter's modules are
 * trained (they are uploaded now; the adapter must outlive the graph). Fails
 * closed (HN_ERROR_UNSUPPORTED) for a feature the backward does not cover,
 * naming it. */
HnTrainGraph *hn_train_graph_new (HnTransformer *model, int batch, int seq_len, HnLoraAdapter *adapter,
                                  GError **error);

typedef struct {
  /* Gradient checkpointing (transformers' gradient_checkpointing_enable):
   * only each layer's input (the residual stream) is kept from the forward;
   * the backward recomputes a layer's activations into one shared set just
   * before it differentiates that layer. Costs one more forward per step;
   * the saved activations shrink from n_layer sets to one. The recomputed
   * values are the same bits, so losses and gradients do not change. */
  gboolean checkpointing;
  /* Mixed precision as PyTorch's fp16 autocast (--precision fp16): every
   * matmul of the forward and the backward (projections, the LM head, LoRA
   * adapters) takes f16 operands, accumulates in f32 and rounds its result
   * to f16 (hn_cmd_set_autocast: the tensor cores where the device has
   * cooperative matrices, the scalar kernel with the same rounding
   * elsewhere); what autocast keeps in f32 (norms, softmax, attention's
   * softmax, cross entropy, reductions, the optimizer) stays f32, and the
   * weights, their gradients and AdamW's moments stay f32 (master weights).
   * Use it with a loss scale (hn_train_graph_set_loss_scale) and
   * HnLossScaler, as GradScaler does. */
  gboolean fp16;
} HnTrainGraphOptions;

/* The saved activations of layer il (> 0) that the backward never reads, so
 * that every layer writes one tensor of layer 0 instead of its own (the
 * forward's values are dead once the layer's next op has read them):
 * without checkpointing this is most of what LoRA saves per layer for
 * frozen MLPs. QK: q and k before rope (rope without q/k norm: the
 * backward reads the roped ones); with an adapter (LoRA), ACT: the MLP's
 * activation when the adapter has no down_proj (its only reader is the
 * gradient of down_proj's weight or adapter), H2: the MLP's normed input
 * when it has neither gate_proj nor up_proj. HN_TRAIN_NO_SHARE=1 keeps
 * every layer's own (tests: the same losses). */
enum { HN_TRAIN_SHARE_QK = 1 << 0, HN_TRAIN_SHARE_ACT = 1 << 1, HN_TRAIN_SHARE_H2 = 1 << 2 };
guint hn_train_graph_shares (const HnTransformerHParams *hp, HnLoraAdapter *adapter, int il);

/* Rows of the LM head's logits at a time in LoRA training (lora): all N
 * when the logits [N, V] are at most 32 Mi floats (128 MiB), else N split
 * into equal chunks of at most that many (llama-1b and Llama-3-8B 4 x 512:
 * 8 chunks of 256 rows, 131 MB of logits instead of 1.05 GB). Full training
 * keeps the whole head (a chunk would cost the head weight's gradient one
 * more read and write each). A chunk's logits, loss and gradient (into
 * the final hidden state's gradient and the head's weight) are taken before
 * the next chunk reuses the buffer, so the full logits and their gradient
 * never exist at once; the results are those of the whole head.
 * HN_TRAIN_HEAD_ROWS=n sets the rows (tests). */
gint64 hn_train_graph_head_rows (gint64 N, gint64 V, gboolean lora);

/* hn_train_graph_new with options (NULL = the defaults, all off). */
HnTrainGraph *hn_train_graph_new_full (HnTransformer *model, int batch, int seq_len, HnLoraAdapter *adapter,
                                       const HnTrainGraphOptions *opts, GError **error);
void hn_train_graph_free (HnTrainGraph *g);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTrainGraph, hn_train_graph_free)

guint hn_train_graph_get_n_params (HnTrainGraph *g);
HnTrainParam *hn_train_graph_get_param (HnTrainGraph *g, guint i);
gint64 hn_train_graph_get_n_trainable (HnTrainGraph *g);

/* Sets every gradient to zero (recorded and run). */
gboolean hn_train_graph_zero_grads (HnTrainGraph *g, GError **error);

/* The factor the loss's gradient is multiplied by before the backward
 * (GradScaler's scale; 1 by default): the gradients then come out
 * multiplied by it. Unscale by passing clip / scale to
 * hn_train_graph_optimizer_step; the loss that micro steps report is not
 * scaled. */
void hn_train_graph_set_loss_scale (HnTrainGraph *g, double scale);
double hn_train_graph_get_loss_scale (HnTrainGraph *g);

/* One micro-batch: forward, loss, backward; gradients accumulate.
 * inputs/targets i32 [batch, seq_len] already shifted (targets[t] is the
 * label of position t + 1; -100 = no loss); weights [batch, seq_len] the loss
 * weight of each target (NULL = 1); w_total the sum of the weights of all
 * counted targets of the whole optimizer step (so several micro-batches add
 * up to transformers' mean over the step's tokens). *loss_part gets this
 * micro-batch's Σ w·ce / w_total. */
gboolean hn_train_graph_micro_step (HnTrainGraph *g, const gint32 *inputs, const gint32 *targets, const float *weights,
                                    double w_total, double *loss_part, GError **error);

/* Mean loss over the counted targets of one batch, without gradients
 * (evaluation). */
gboolean hn_train_graph_eval_loss (HnTrainGraph *g, const gint32 *inputs, const gint32 *targets, const float *weights,
                                   double *loss_sum, double *weight_sum, GError **error);

/* The global L2 norm of all gradients (f64 sum of squares). */
gboolean hn_train_graph_grad_norm (HnTrainGraph *g, double *norm, GError **error);

/* One optimizer update of every parameter with learning rate `lr`, the
 * gradients multiplied by `clip` first; `step` counts updates from 1. */
gboolean hn_train_graph_optimizer_step (HnTrainGraph *g, const HnOptimConfig *oc, gint64 step, double lr, float clip,
                                        GError **error);

/* The recorder a step records into (to turn on profiling: hn_cmd_set_profiling). */
HnCmd *hn_train_graph_get_cmd (HnTrainGraph *g);
/* Host microseconds spent recording forward and backward passes so far (the GPU idles meanwhile). */
gint64 hn_train_graph_get_record_us (HnTrainGraph *g);

/* Copies the trained adapter matrices back into the adapter's host arrays. */
gboolean hn_train_graph_sync_adapter (HnTrainGraph *g, GError **error);

G_END_DECLS

G_BEGIN_DECLS
/* The modules of `model` a LoRA config adapts, as (path, in, out) in layer
 * order: a new adapter is made from this list. */
typedef struct {
  char *path;
  int in, out;
} HnLoraCandidate;

GArray *hn_train_graph_lora_candidates (HnTransformer *model, const HnLoraConfig *cfg, GError **error);
void hn_lora_candidates_free (GArray *candidates);
G_END_DECLS
