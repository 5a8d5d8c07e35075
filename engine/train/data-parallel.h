/* Data-parallel training over several devices of one host: one replica of
 * the model (and its training graph) per device, the global batch split by
 * rows across the replicas, gradients summed each step and handed back to
 * every replica, and the same optimizer update run on each, so the weights
 * stay identical (hn_data_parallel_replicas_identical checks it).
 *
 * The all-reduce goes through host memory: each replica downloads its
 * gradients (through its mapped staging buffer), the host sums them in a
 * fixed replica order, and each replica uploads the sum. That is simple and
 * exact (every replica gets the same bits); it costs two PCIe copies of the
 * gradients per step, which is what a real multi-GPU setup would replace with
 * external-memory sharing or peer copies.
 *
 * With one device this is the plain single-device trainer: no host copies,
 * everything on the calling thread.
 *
 *   dp = hn_data_parallel_new (ctxs, n, model_dir, &error);     // a model per context
 *   hn_data_parallel_setup (dp, batch, seq_len, adapter, &error); // training graphs
 *   per step: _gradients, _grad_norm, _optimizer_step */
#pragma once
#include "train/train-graph.h"

G_BEGIN_DECLS

typedef struct _HnDataParallel HnDataParallel;

/* Loads the model of `weights_dir` on each context (hn_vk_contexts_new opens
 * them; the same GPU twice gives two logical devices: correct, no faster,
 * meant for testing). The replicas keep references to the contexts. */
HnDataParallel *hn_data_parallel_new (HnVkContext *const *ctxs, guint n_devices, const char *weights_dir,
                                      GError **error);
/* The same with the base's Linear weights quantized at load (QLoRA; see
 * hn_transformer_load_quantized; HN_DTYPE_F32 = as stored). */
HnDataParallel *hn_data_parallel_new_quantized (HnVkContext *const *ctxs, guint n_devices, const char *weights_dir,
                                                HnDType quant, GError **error);
void hn_data_parallel_free (HnDataParallel *dp);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnDataParallel, hn_data_parallel_free)

/* Makes each replica's training graph for `global_batch` rows split evenly
 * (global_batch / n_replicas rows each; an uneven split is an error) of
 * `seq_len` tokens. With `adapter` LoRA modules are trained (the adapter is
 * only read here and must outlive dp). */
gboolean hn_data_parallel_setup (HnDataParallel *dp, int global_batch, int seq_len, HnLoraAdapter *adapter,
                                 GError **error);

/* Options of the training graphs hn_data_parallel_setup makes (call before it). */
void hn_data_parallel_set_graph_options (HnDataParallel *dp, const HnTrainGraphOptions *opts);

/* The loss scale of every replica's graph (hn_train_graph_set_loss_scale; after setup). */
void hn_data_parallel_set_loss_scale (HnDataParallel *dp, double scale);
guint hn_data_parallel_get_n_replicas (HnDataParallel *dp);
HnVkContext *hn_data_parallel_get_context (HnDataParallel *dp, guint replica);
HnTransformer *hn_data_parallel_get_model (HnDataParallel *dp, guint replica);
HnTrainGraph *hn_data_parallel_get_graph (HnDataParallel *dp, guint replica); /* NULL before setup */

/* The gradients of one optimizer step: zeroes them, runs `accum`
 * micro-batches on every replica at once (inputs/targets/weights are
 * [accum, global_batch, seq_len]; replica r takes rows r·b .. r·b + b of each,
 * weights may be NULL), then all-reduces. w_total is the weight sum of the
 * step's counted targets (see hn_train_graph_micro_step); *loss gets the
 * step's mean loss. */
gboolean hn_data_parallel_gradients (HnDataParallel *dp, const gint32 *inputs, const gint32 *targets,
                                     const float *weights, int accum, double w_total, double *loss, GError **error);

/* The global gradient norm (after the all-reduce every replica holds the
 * global gradient; replica 0 computes it). */
gboolean hn_data_parallel_grad_norm (HnDataParallel *dp, double *norm, GError **error);

/* The same optimizer update on every replica (see hn_train_graph_optimizer_step). */
gboolean hn_data_parallel_optimizer_step (HnDataParallel *dp, const HnOptimConfig *oc, gint64 step, double lr,
                                          float clip, GError **error);

/* Seconds spent in the gradient all-reduce since dp was made (0 with one replica). */
double hn_data_parallel_get_allreduce_seconds (HnDataParallel *dp);

/* Loads a checkpoint's optimizer state into every replica. */
gboolean hn_data_parallel_read_optimizer (HnDataParallel *dp, const char *dir, GError **error);

/* Downloads every trainable tensor of every replica and compares it with
 * replica 0's, bit for bit. FALSE with an error when they differ (HN_ERROR_NUMERIC,
 * naming the tensor and the replica) or a download fails. */
gboolean hn_data_parallel_replicas_identical (HnDataParallel *dp, GError **error);

G_END_DECLS
