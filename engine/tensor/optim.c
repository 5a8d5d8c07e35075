/* Optimizers, clipping, schedules and the dropout RNG (see optim.h). */
#include "tensor/optim.h"

#include <math.h>
#include <string.h>

#include "base/hn-error.h"

void
hn_optim_config_init (HnOptimConfig *oc, HnOptimKind kind)
{
  memset (oc, 0, sizeof *oc);
  oc->kind = kind;
  oc->lr = 5e-5;
  oc->beta1 = 0.9;
  oc->beta2 = 0.999;
  oc->eps = 1e-8;
  oc->weight_decay = 0.0;
  oc->momentum = 0.0;
  oc->max_grad_norm = 1.0;
}

gboolean
hn_optim_kind_from_string (const char *s, HnOptimKind *out, GError **error)
{
  if (g_strcmp0 (s, "adamw") == 0 || g_strcmp0 (s, "adamw_torch") == 0)
    *out = HN_OPTIM_ADAMW;
  else if (g_strcmp0 (s, "sgd") == 0)
    *out = HN_OPTIM_SGD;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "Unknown optimizer '%s' (known: adamw, sgd)", s ? s : "(null)");
      return FALSE;
    }
  return TRUE;
}

const char *
hn_optim_kind_name (HnOptimKind kind)
{
  return kind == HN_OPTIM_SGD ? "sgd" : "adamw";
}

void
hn_adamw_scalars (HnAdamwScalars *s, gint64 step, double lr, double beta1, double beta2, double eps,
                  double weight_decay)
{
  /* torch keeps these as Python floats (double) and converts them to the
   * tensor's dtype when they meet a tensor. */
  double bc1 = 1.0 - pow (beta1, (double) step);
  double bc2 = 1.0 - pow (beta2, (double) step);
  s->lr_wd = (float) (1.0 - lr * weight_decay);
  s->one_m_beta1 = (float) (1.0 - beta1);
  s->beta2 = (float) beta2;
  s->one_m_beta2 = (float) (1.0 - beta2);
  s->step_size = (float) (lr / bc1);
  s->bc2_sqrt = (float) sqrt (bc2);
  s->eps = (float) eps;
}

void
hn_adamw_step_cpu (float *param, const float *grad, float *m, float *v, gint64 n, gint64 step,
                   double lr, double beta1, double beta2, double eps, double weight_decay)
{
  HnAdamwScalars s;
  hn_adamw_scalars (&s, step, lr, beta1, beta2, eps, weight_decay);
  for (gint64 i = 0; i < n; i++)
    {
      float g = grad[i];
      float p = param[i];
      if (weight_decay != 0.0)
        p *= s.lr_wd;
      /* torch.lerp with weight < 0.5: start + weight * (end - start) */
      m[i] = m[i] + s.one_m_beta1 * (g - m[i]);
      v[i] = v[i] * s.beta2 + s.one_m_beta2 * g * g;
      float denom = sqrtf (v[i]) / s.bc2_sqrt + s.eps;
      param[i] = p - s.step_size * (m[i] / denom);
    }
}

void
hn_sgd_step_cpu (float *param, const float *grad, float *buf, gint64 n, gboolean first, double lr,
                 double momentum, double weight_decay)
{
  float flr = (float) lr, fmom = (float) momentum, fwd = (float) weight_decay;
  for (gint64 i = 0; i < n; i++)
    {
      float g = grad[i];
      if (weight_decay != 0.0)
        g += fwd * param[i];
      if (momentum != 0.0)
        {
          buf[i] = first ? g : fmom * buf[i] + g;
          g = buf[i];
        }
      param[i] -= flr * g;
    }
}

float
hn_clip_coef (double total_norm, double max_norm)
{
  if (max_norm <= 0.0)
    return 1.0f;
  float coef = (float) max_norm / ((float) total_norm + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

void
hn_loss_scaler_init (HnLossScaler *s)
{
  s->scale = 65536.0;
  s->growth_factor = 2.0;
  s->backoff_factor = 0.5;
  s->growth_interval = 2000;
  s->growth_tracker = 0;
}

gboolean
hn_loss_scaler_update (HnLossScaler *s, gboolean found_inf)
{
  if (found_inf)
    {
      /* torch's _amp_update_scale_ keeps the scale in f32 */
      s->scale = (float) (s->scale * s->backoff_factor);
      s->growth_tracker = 0;
      return FALSE;
    }
  if (++s->growth_tracker == s->growth_interval)
    {
      float grown = (float) (s->scale * s->growth_factor);
      if (isfinite (grown))
        s->scale = grown;
      s->growth_tracker = 0;
    }
  return TRUE;
}

gboolean
hn_param_wants_decay (const char *name)
{
  /* transformers: not in a LayerNorm-like module and "bias" not in the name;
   * newer versions also match norm module names, which covers RMSNorm. */
  g_autofree char *lower = g_ascii_strdown (name, -1);
  if (strstr (lower, "bias"))
    return FALSE;
  if (strstr (lower, "norm"))
    return FALSE;
  /* gpt2 / bloom-style norm modules: ln_1, ln_2, ln_f, ln_attn, ln_mlp */
  const char *base = strrchr (lower, '.');
  gsize plen = base ? (gsize) (base - lower) : 0;
  g_autofree char *module = g_strndup (lower, plen);
  const char *mod = strrchr (module, '.');
  mod = mod ? mod + 1 : module;
  if (g_str_has_prefix (mod, "ln_") || g_str_equal (mod, "ln") || g_str_has_suffix (mod, "_ln"))
    return FALSE;
  return TRUE;
}

/* ---------------------------------------------------------------- schedules */

gboolean
hn_lr_schedule_kind_from_string (const char *s, HnLrScheduleKind *out, GError **error)
{
  if (g_strcmp0 (s, "constant") == 0 || g_strcmp0 (s, "constant_with_warmup") == 0)
    *out = HN_LR_CONSTANT;
  else if (g_strcmp0 (s, "linear") == 0)
    *out = HN_LR_LINEAR;
  else if (g_strcmp0 (s, "cosine") == 0)
    *out = HN_LR_COSINE;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "Unknown --lr-scheduler '%s' (known: constant, linear, cosine)", s ? s : "(null)");
      return FALSE;
    }
  return TRUE;
}

const char *
hn_lr_schedule_kind_name (HnLrScheduleKind kind)
{
  switch (kind)
    {
    case HN_LR_LINEAR: return "linear";
    case HN_LR_COSINE: return "cosine";
    case HN_LR_CONSTANT:
    default: return "constant";
    }
}

double
hn_lr_schedule_factor (const HnLrSchedule *s, gint64 step)
{
  gint64 warm = s->warmup_steps > 0 ? s->warmup_steps : 0;
  if (step < warm)
    return (double) step / (double) MAX (1, warm);
  switch (s->kind)
    {
    case HN_LR_LINEAR:
      return MAX (0.0, (double) (s->total_steps - step) / (double) MAX (1, s->total_steps - warm));
    case HN_LR_COSINE:
      {
        double progress = (double) (step - warm) / (double) MAX (1, s->total_steps - warm);
        return MAX (0.0, 0.5 * (1.0 + cos (G_PI * 0.5 * 2.0 * progress)));
      }
    case HN_LR_CONSTANT:
    default:
      return 1.0;
    }
}

/* ---------------------------------------------------------------- RNG */

static inline guint32
hash32 (guint32 x)
{
  /* "lowbias32" (Chris Wellons): a good, cheap integer hash. */
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

guint32
hn_rng_u32 (guint32 seed, guint32 stream, guint32 index)
{
  return hash32 (hash32 (hash32 (seed) ^ stream) + index);
}

gboolean
hn_dropout_keep (guint32 seed, guint32 stream, guint32 index, float p)
{
  float u = (float) (hn_rng_u32 (seed, stream, index) >> 8) * (1.0f / 16777216.0f);
  return u >= p;
}

guint32
hn_dropout_stream (gint64 step, guint micro, guint site)
{
  return hash32 ((guint32) step * 0x9e3779b9u ^ (micro << 20) ^ site);
}
