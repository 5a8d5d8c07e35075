/* Hugging Face encoders with their masked-LM head on Vulkan: bert, roberta,
 * xlm-roberta, distilbert, albert (factorised embeddings, shared layers),
 * electra (embedding projection, generator head) and modernbert (rope,
 * local/global attention, gated GeLU). Bidirectional attention, one forward.
 *
 *   g_autoptr (HnEncoder) m = hn_encoder_load (ctx, "model-dir", &error);
 *   hn_encoder_logits (m, ids, type_ids_or_NULL, n, logits, &error);   // [n, vocab]
 */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

#include "transformer/registry.h"
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

typedef struct _HnEncoder HnEncoder;

/* Loads config.json and the weights; every checkpoint tensor must be one the graph uses. */
HnEncoder *hn_encoder_load (HnVkContext *ctx, const char *model_dir, GError **error);
void hn_encoder_free (HnEncoder *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnEncoder, hn_encoder_free)

const HnArchInfo *hn_encoder_get_arch (HnEncoder *m);
int hn_encoder_get_vocab (HnEncoder *m);
/* Token types the model has (0 when it takes none: distilbert, modernbert). */
int hn_encoder_get_type_vocab (HnEncoder *m);
guint64 hn_encoder_get_weight_bytes (HnEncoder *m);

/* Masked-LM logits [n, vocab] of one sequence (attention mask all ones). type_ids may be NULL
 * (all 0, as transformers); a model without token types refuses them. */
gboolean hn_encoder_logits (HnEncoder *m, const int32_t *ids, const int32_t *type_ids, int n, float *logits,
                            GError **error);

/* ---- masked-LM training (post-norm encoders: the bert family) */

typedef struct _HnEncoderTrainer HnEncoderTrainer;

/* torch.optim.AdamW settings of one step (step counts from 1). */
typedef struct {
  gint64 step;
  double lr, beta1, beta2, eps, weight_decay;
  double max_grad_norm; /* > 0: clip the gradients to this total norm first (torch's clip_grad_norm_) */
} HnEncoderTrainStep;

/* A trainer for batches of B rows of T tokens; every weight (f32) trains. Models it cannot train
 * (modernbert) fail with HN_ERROR_UNSUPPORTED. */
HnEncoderTrainer *hn_encoder_trainer_new (HnEncoder *m, int B, int T, GError **error);
void hn_encoder_trainer_free (HnEncoderTrainer *tr);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnEncoderTrainer, hn_encoder_trainer_free)
/* One forward, backward and AdamW update on ids [B*T] (type_ids NULL: 0) with MLM labels [B*T]
 * (-100: ignored); *loss is the batch's loss before the update, as transformers reports it. */
gboolean hn_encoder_trainer_step (HnEncoderTrainer *tr, const int32_t *ids, const int32_t *type_ids,
                                  const int32_t *labels, const HnEncoderTrainStep *opt, double *loss, GError **error);
/* The total gradient norm of the last step, before clipping. */
double hn_encoder_trainer_get_grad_norm (HnEncoderTrainer *tr);
/* Every device tensor of the model in load order (checkpoint weights; modernbert adds its rope tables). */
HnTensor *const *hn_encoder_get_weights (HnEncoder *m, guint *n);

G_END_DECLS
