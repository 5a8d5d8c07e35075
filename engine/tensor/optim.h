/* Optimizers, gradient clipping and learning-rate schedules, exactly as
 * PyTorch and transformers define them, so a run here matches a run there
 * step for step.
 *
 *   HnOptimConfig oc;
 *   hn_optim_config_init (&oc, HN_OPTIM_ADAMW);          // transformers' defaults
 *   float lr = hn_lr_schedule_value (&sched, step) * oc.lr; // update `step` (0-based)
 *   hn_adamw_step_cpu (p, g, m, v, n, step + 1, lr, &oc, decay ? oc.weight_decay : 0);
 *
 * The CPU functions here are the references the Vulkan shaders
 * (shaders/adamw.comp, sgd.comp) are tested against, and what the trainers
 * use for host-side scalars (bias corrections, clip coefficient). They sit
 * in tensor/, next to hn_op_adamw, because every family's training step
 * (encdec/encoder-train.c, hierarchos/hierarchos-train.c, train/) uses
 * them and the families sit below train/. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  HN_OPTIM_ADAMW,
  HN_OPTIM_SGD,
} HnOptimKind;

typedef struct {
  HnOptimKind kind;
  double lr;            /* peak learning rate */
  double beta1, beta2;  /* AdamW */
  double eps;           /* AdamW */
  double weight_decay;  /* decoupled (AdamW) or L2 added to the gradient (SGD, as torch.optim.SGD) */
  double momentum;      /* SGD; 0 = plain SGD */
  double max_grad_norm; /* 0 = no clipping */
} HnOptimConfig;

/* transformers.TrainingArguments defaults: lr 5e-5, betas (0.9, 0.999),
 * eps 1e-8, weight decay 0, max_grad_norm 1.0; SGD momentum 0. */
void hn_optim_config_init (HnOptimConfig *oc, HnOptimKind kind);
/* "adamw", "adamw_torch", "sgd". */
gboolean hn_optim_kind_from_string (const char *s, HnOptimKind *out, GError **error);
const char *hn_optim_kind_name (HnOptimKind kind);

/* One torch.optim.AdamW update (the single-tensor path torch takes on the
 * CPU), `step` counted from 1 after increment:
 *   p *= 1 - lr·wd;  m = lerp(m, g, 1-β1);  v = β2·v + (1-β2)·g²
 *   p -= lr/(1-β1^step) · m / (sqrt(v)/sqrt(1-β2^step) + eps) */
void hn_adamw_step_cpu (float *param, const float *grad, float *m, float *v, gint64 n, gint64 step,
                        double lr, double beta1, double beta2, double eps, double weight_decay);

/* The per-step scalars of the AdamW update, computed in double as torch
 * does on the host and handed to the shader as floats. */
typedef struct {
  float lr_wd;        /* 1 - lr·wd */
  float one_m_beta1;  /* 1 - β1 */
  float beta2, one_m_beta2;
  float step_size;    /* lr / (1 - β1^step) */
  float bc2_sqrt;     /* sqrt(1 - β2^step) */
  float eps;
} HnAdamwScalars;

void hn_adamw_scalars (HnAdamwScalars *s, gint64 step, double lr, double beta1, double beta2, double eps,
                       double weight_decay);

/* torch.optim.SGD: g += wd·p; with momentum: buf = g on the first step, else
 * buf = momentum·buf + g; g = buf; p -= lr·g. `buf` may be NULL when momentum
 * is 0. `first` is TRUE on the first update. */
void hn_sgd_step_cpu (float *param, const float *grad, float *buf, gint64 n, gboolean first, double lr,
                      double momentum, double weight_decay);

/* torch.nn.utils.clip_grad_norm_: the coefficient min(1, max_norm /
 * (total_norm + 1e-6)) that every gradient is multiplied by. */
float hn_clip_coef (double total_norm, double max_norm);

/* Dynamic loss scaling for fp16 training, as torch.amp.GradScaler with its
 * defaults: the loss (so every gradient) is multiplied by `scale` (65536 at
 * first); a step whose gradients hold an Inf or NaN is skipped (no
 * optimizer update, no Adam step count) and the scale is halved; after
 * `growth_interval` (2000) overflow-free steps in a row it doubles. */
typedef struct {
  double scale;
  double growth_factor, backoff_factor;
  gint64 growth_interval;
  gint64 growth_tracker;   /* overflow-free steps since the scale last changed */
} HnLossScaler;

void hn_loss_scaler_init (HnLossScaler *s);
/* The update after a step's gradients (GradScaler.update): `found_inf`
 * backs the scale off and resets the tracker; otherwise the tracker counts
 * up and the scale grows when it reaches the interval (not past f32's
 * range). Returns TRUE when the step's optimizer update is to run. */
gboolean hn_loss_scaler_update (HnLossScaler *s, gboolean found_inf);

/* Which parameters get weight decay, as transformers' Trainer decides:
 * everything but biases and the weights of normalisation layers. */
gboolean hn_param_wants_decay (const char *hf_name);

/* ---------------------------------------------------------------- schedules */

typedef enum {
  HN_LR_CONSTANT,   /* get_constant_schedule_with_warmup */
  HN_LR_LINEAR,     /* get_linear_schedule_with_warmup */
  HN_LR_COSINE,     /* get_cosine_schedule_with_warmup (num_cycles 0.5) */
} HnLrScheduleKind;

typedef struct {
  HnLrScheduleKind kind;
  gint64 warmup_steps;
  gint64 total_steps;
} HnLrSchedule;

/* "constant" (also "constant_with_warmup"), "linear", "cosine". */
gboolean hn_lr_schedule_kind_from_string (const char *s, HnLrScheduleKind *out, GError **error);
const char *hn_lr_schedule_kind_name (HnLrScheduleKind kind);

/* The multiplier of the peak lr used by update `step` (0-based), i.e. the
 * LambdaLR factor after `step` scheduler steps, as the HF Trainer applies it. */
double hn_lr_schedule_factor (const HnLrSchedule *s, gint64 step);

/* ---------------------------------------------------------------- dropout RNG */

/* A counter-based generator (a 32-bit integer hash of seed, stream and
 * index), identical in C and in the shaders (shaders/rng.glsl), so dropout
 * masks are reproducible from (seed, step, site) alone and exact resume needs
 * no RNG state beyond the seed and the step. */
guint32 hn_rng_u32 (guint32 seed, guint32 stream, guint32 index);
/* Keep-mask of inverted dropout: TRUE when element `index` survives. */
gboolean hn_dropout_keep (guint32 seed, guint32 stream, guint32 index, float p);
/* The stream of a dropout site: mixes the optimizer step, the micro-batch
 * and the site id (layer * 8 + which dropout). */
guint32 hn_dropout_stream (gint64 step, guint micro, guint site);

G_END_DECLS
