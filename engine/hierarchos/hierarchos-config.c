/* The coherent-v9 architecture contract: defaults, validation, the canonical
 * serialization and its sha256, config.json load/save. */
#include "hierarchos/hierarchos.h"
#include "base/json-util.h"
#include "base/hn-error.h"
#include "base/hn-util.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_INT, F_NINT, F_DBL, F_BOOL, F_STR } FieldType;

typedef struct {
  const char *name;
  FieldType type;
  gsize offset;
} Field;

#define FI(n) { #n, F_INT, G_STRUCT_OFFSET (HnHierConfig, n) }
#define FN(n) { #n, F_NINT, G_STRUCT_OFFSET (HnHierConfig, n) }
#define FD(n) { #n, F_DBL, G_STRUCT_OFFSET (HnHierConfig, n) }
#define FB(n) { #n, F_BOOL, G_STRUCT_OFFSET (HnHierConfig, n) }
#define FS(n) { #n, F_STR, G_STRUCT_OFFSET (HnHierConfig, n) }

/* The PyTorch project's ARCHITECTURE_CONTRACT_FIELDS (schema version 3). */
static const Field fields[] = {
  FS (architecture_revision),
  FI (vocab_size), FI (context_dim), FI (persistent_dim), FI (ltm_slots), FI (ltm_key_dim),
  FI (ltm_val_dim), FI (ltm_topk), FI (h_hidden), FI (l_hidden), FI (rwkv_head_size),
  FI (h_rwkv_head_size), FI (l_rwkv_head_size), FI (rwkv_n_layer_hint), FI (h_stride),
  FI (max_h_steps), FI (max_l_steps),
  FI (core_recurrence_version), FS (drift_recurrence_mode), FS (rwkv_state_readout_mode),
  FS (manager_state_commit_mode), FS (manager_compute_mode), FI (min_h_steps), FD (h_halt_thresh),
  FD (act_depth_temperature), FD (l_conv_atol), FS (commitment_cost_mode), FD (commitment_threshold),
  FD (drift_delta_scale), FN (detach_every_n_steps), FB (full_sample_bptt),
  FB (inference_logit_parity), FS (inference_recurrence_mode),
  FD (halt_logit_clamp), FD (recurrent_state_clamp), FD (context_state_clamp), FD (drift_state_clamp),
  FD (drift_norm_clamp), FD (activation_clamp), FD (rwkv_channel_mix_key_clamp),
  FD (rwkv_channel_mix_deepembed_clamp), FD (inference_logit_clamp),
  FB (use_deepembed), FS (deepembed_mode), FB (use_rosa), FS (rosa_embedding_mode),
  FI (token_adapter_rank), FB (memory_token_routers), FI (rosa_max_context),
  FB (enforce_rosa_max_context), FB (rosa_zero_no_prediction), FB (isolate_batch_ltm),
  FS (ltm_training_mode), FD (ltm_lr), FD (ltm_momentum), FD (ltm_weight_decay),
  FD (ltm_forget_rate), FD (ltm_score_grad_scale), FS (ltm_time_feature_mode),
  FI (reference_chunk_len), FI (training_chunk_size), FB (allow_untrained_hebbian_writer),
  FI (memory_gate_warmup_steps), FD (memory_gate_warmup_floor),
  FB (adaptive_ponder), FS (ponder_objective), FD (ponder_target_scale), FD (ponder_huber_beta),
  FD (ponder_loss_weight), FB (encourage_thinking), FD (commitment_loss_weight),
  FD (max_commitment_cost_for_backward), FD (max_ponder_cost_for_backward), FD (z_loss_weight),
  FD (ltm_value_alignment_weight), FI (ltm_value_alignment_stride),
  FI (ltm_value_alignment_min_updates), FD (ltm_value_alignment_ready_threshold),
  FD (ltm_value_alignment_ema_decay), FD (ltm_value_writer_max_norm),
};
#define N_FIELDS G_N_ELEMENTS (fields)
#define SCHEMA_VERSION 3

#define P_INT(c, f) ((gint64 *) ((char *) (c) + (f)->offset))
#define P_DBL(c, f) ((double *) ((char *) (c) + (f)->offset))
#define P_BOOL(c, f) ((gboolean *) ((char *) (c) + (f)->offset))
#define P_STR(c, f) ((char **) ((char *) (c) + (f)->offset))

static const Field *
find_field (const char *name)
{
  for (gsize i = 0; i < N_FIELDS; i++)
    if (strcmp (fields[i].name, name) == 0)
      return &fields[i];
  return NULL;
}

static void
set_str (char **p, const char *v)
{
  g_free (*p);
  *p = g_strdup (v);
}

static gint64
default_head_size (gint64 width)
{
  /* 64 as the sources do, or the largest divisor of the width not above 64
   * so tiny test geometries stay valid. */
  for (gint64 n = MIN (64, width); n > 1; n--)
    if (width % n == 0)
      return n;
  return 1;
}

void
hn_hier_config_derive (HnHierConfig *c)
{
  c->h_hidden = c->context_dim;
  if (c->l_hidden <= 0)
    c->l_hidden = c->context_dim;
  if (c->rwkv_head_size <= 0 || c->context_dim % c->rwkv_head_size != 0)
    c->rwkv_head_size = default_head_size (c->context_dim);
  c->h_rwkv_head_size = c->rwkv_head_size;
  c->l_rwkv_head_size = c->l_hidden % c->rwkv_head_size == 0 ? c->rwkv_head_size
                                                               : default_head_size (c->l_hidden);
  c->token_adapter_rank = MIN (64, c->context_dim);
  c->commitment_threshold = 0.1 / (double) c->context_dim;
}

void
hn_hier_config_init_defaults (HnHierConfig *c, gint64 vocab_size, gint64 context_dim)
{
  memset (c, 0, sizeof *c);
  set_str (&c->architecture_revision, HN_HIER_REVISION);
  c->vocab_size = vocab_size;
  c->context_dim = context_dim;
  c->persistent_dim = 128;
  c->ltm_slots = 1024;
  c->ltm_key_dim = 128;
  c->ltm_val_dim = 128;
  c->ltm_topk = 4;
  c->l_hidden = context_dim;
  c->rwkv_head_size = 64;
  c->rwkv_n_layer_hint = 2;
  c->h_stride = 4;
  c->max_h_steps = 5;
  c->max_l_steps = 5;
  c->min_h_steps = 1;
  c->core_recurrence_version = 2;
  set_str (&c->drift_recurrence_mode, "state-derived");
  set_str (&c->rwkv_state_readout_mode, "explicit-output");
  set_str (&c->manager_state_commit_mode, "hard-selected");
  set_str (&c->manager_compute_mode, "hard-masked");
  c->h_halt_thresh = 0.9;
  c->act_depth_temperature = 0.05;
  c->l_conv_atol = 1e-4;
  set_str (&c->commitment_cost_mode, "mean-square");
  c->drift_delta_scale = 1.0;
  c->detach_every_n_steps = 32;
  c->full_sample_bptt = FALSE;
  c->inference_logit_parity = TRUE;
  set_str (&c->inference_recurrence_mode, "tbptt");
  c->halt_logit_clamp = 30.0;
  c->recurrent_state_clamp = 50.0;
  c->context_state_clamp = 50.0;
  c->drift_state_clamp = 5.0;
  c->drift_norm_clamp = 0.0;
  c->activation_clamp = 100.0;
  c->rwkv_channel_mix_key_clamp = 12.0;
  c->rwkv_channel_mix_deepembed_clamp = 4.0;
  c->inference_logit_clamp = 0.0;
  c->use_deepembed = TRUE;
  set_str (&c->deepembed_mode, "shared-factorized");
  c->use_rosa = TRUE;
  set_str (&c->rosa_embedding_mode, "shared-factorized");
  c->memory_token_routers = TRUE;
  c->rosa_max_context = 512;
  c->enforce_rosa_max_context = TRUE;
  c->rosa_zero_no_prediction = TRUE;
  c->isolate_batch_ltm = TRUE;
  set_str (&c->ltm_training_mode, "read-only");
  c->ltm_lr = 1e-3;
  c->ltm_momentum = 0.9;
  c->ltm_weight_decay = 1e-4;
  c->ltm_forget_rate = 0.01;
  c->ltm_score_grad_scale = 1.0;
  set_str (&c->ltm_time_feature_mode, "metadata-only");
  c->reference_chunk_len = 256;
  c->training_chunk_size = 256;
  c->allow_untrained_hebbian_writer = FALSE;
  c->memory_gate_warmup_steps = 0;
  c->memory_gate_warmup_floor = 0.0;
  c->adaptive_ponder = TRUE;
  set_str (&c->ponder_objective, "symmetric-huber");
  c->ponder_target_scale = 0.5;
  c->ponder_huber_beta = 0.5;
  c->ponder_loss_weight = 0.01;
  c->encourage_thinking = FALSE;
  c->commitment_loss_weight = 0.5;
  c->max_commitment_cost_for_backward = 2.0;
  c->max_ponder_cost_for_backward = 0.0;
  c->z_loss_weight = 1e-4;
  /* The LTM value-alignment writer is not part of this runtime (the LTM is
   * read-only), so its weight is 0; the controller settings keep their
   * upstream defaults. */
  c->ltm_value_alignment_weight = 0.0;
  c->ltm_value_alignment_stride = 8;
  c->ltm_value_alignment_min_updates = 100;
  c->ltm_value_alignment_ready_threshold = 0.95;
  c->ltm_value_alignment_ema_decay = 0.95;
  c->ltm_value_writer_max_norm = 64.0;
  hn_hier_config_derive (c);
}

void
hn_hier_config_clear (HnHierConfig *c)
{
  for (gsize i = 0; i < N_FIELDS; i++)
    if (fields[i].type == F_STR)
      g_clear_pointer (P_STR (c, &fields[i]), g_free);
}

void
hn_hier_config_copy (HnHierConfig *dst, const HnHierConfig *src)
{
  if (dst == src)
    return;
  *dst = *src;
  for (gsize i = 0; i < N_FIELDS; i++)
    if (fields[i].type == F_STR)
      *P_STR (dst, &fields[i]) = g_strdup (*P_STR (src, &fields[i]));
}

/* ---- validation ---- */

#define FAIL(code, ...) \
  do { g_set_error (error, HN_ERROR, code, __VA_ARGS__); return FALSE; } while (0)

static gboolean
want_str (const char *name, const char *have, const char *want, GError **error)
{
  if (!have || strcmp (have, want) != 0)
    FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: %s=\"%s\" is not implemented (this runtime supports \"%s\")",
          name, have ? have : "(null)", want);
  return TRUE;
}

static gboolean
want_dbl (const char *name, double have, double want, GError **error)
{
  if (have != want)
    {
      g_autofree char *h = hn_hier_python_float_repr (have);
      g_autofree char *w = hn_hier_python_float_repr (want);
      FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: %s=%s is not implemented (this runtime supports %s)",
            name, h, w);
    }
  return TRUE;
}

static gboolean
want_bool (const char *name, gboolean have, gboolean want, GError **error)
{
  if (!have != !want)
    FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: %s=%s is not implemented (this runtime supports %s)",
          name, have ? "true" : "false", want ? "true" : "false");
  return TRUE;
}

gboolean
hn_hier_config_validate (const HnHierConfig *c, GError **error)
{
  /* Fixed semantics this runtime implements; anything else fails closed. */
  if (!want_str ("architecture_revision", c->architecture_revision, HN_HIER_REVISION, error) ||
      !want_str ("drift_recurrence_mode", c->drift_recurrence_mode, "state-derived", error) ||
      !want_str ("rwkv_state_readout_mode", c->rwkv_state_readout_mode, "explicit-output", error) ||
      !want_str ("manager_state_commit_mode", c->manager_state_commit_mode, "hard-selected", error) ||
      !want_str ("manager_compute_mode", c->manager_compute_mode, "hard-masked", error) ||
      !want_str ("commitment_cost_mode", c->commitment_cost_mode, "mean-square", error) ||
      !want_str ("inference_recurrence_mode", c->inference_recurrence_mode, "tbptt", error) ||
      !want_str ("deepembed_mode", c->deepembed_mode, "shared-factorized", error) ||
      !want_str ("rosa_embedding_mode", c->rosa_embedding_mode, "shared-factorized", error) ||
      !want_str ("ltm_training_mode", c->ltm_training_mode, "read-only", error) ||
      !want_str ("ltm_time_feature_mode", c->ltm_time_feature_mode, "metadata-only", error) ||
      !want_str ("ponder_objective", c->ponder_objective, "symmetric-huber", error) ||
      !want_bool ("use_deepembed", c->use_deepembed, TRUE, error) ||
      !want_bool ("use_rosa", c->use_rosa, TRUE, error) ||
      !want_bool ("memory_token_routers", c->memory_token_routers, TRUE, error) ||
      !want_bool ("inference_logit_parity", c->inference_logit_parity, TRUE, error) ||
      !want_bool ("full_sample_bptt", c->full_sample_bptt, FALSE, error) ||
      !want_bool ("rosa_zero_no_prediction", c->rosa_zero_no_prediction, TRUE, error) ||
      !want_bool ("allow_untrained_hebbian_writer", c->allow_untrained_hebbian_writer, FALSE, error) ||
      !want_bool ("adaptive_ponder", c->adaptive_ponder, TRUE, error) ||
      !want_bool ("encourage_thinking", c->encourage_thinking, FALSE, error) ||
      !want_dbl ("inference_logit_clamp", c->inference_logit_clamp, 0.0, error) ||
      !want_dbl ("ltm_value_alignment_weight", c->ltm_value_alignment_weight, 0.0, error) ||
      !want_dbl ("ponder_target_scale", c->ponder_target_scale, 0.5, error))
    return FALSE;
  if (c->core_recurrence_version != 2)
    FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: core_recurrence_version=%" G_GINT64_FORMAT
          " is not implemented (this runtime supports 2)", c->core_recurrence_version);

  const struct { const char *n; gint64 v; } pos[] = {
    { "vocab_size", c->vocab_size }, { "context_dim", c->context_dim }, { "ltm_slots", c->ltm_slots },
    { "ltm_key_dim", c->ltm_key_dim }, { "ltm_val_dim", c->ltm_val_dim }, { "ltm_topk", c->ltm_topk },
    { "h_hidden", c->h_hidden }, { "l_hidden", c->l_hidden }, { "h_stride", c->h_stride },
    { "max_h_steps", c->max_h_steps }, { "max_l_steps", c->max_l_steps }, { "min_h_steps", c->min_h_steps },
    { "token_adapter_rank", c->token_adapter_rank }, { "h_rwkv_head_size", c->h_rwkv_head_size },
    { "l_rwkv_head_size", c->l_rwkv_head_size }, { "rwkv_head_size", c->rwkv_head_size },
    { "training_chunk_size", c->training_chunk_size }, { "reference_chunk_len", c->reference_chunk_len },
    { "ltm_value_alignment_stride", c->ltm_value_alignment_stride },
    { "ltm_value_alignment_min_updates", c->ltm_value_alignment_min_updates },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (pos); i++)
    if (pos[i].v <= 0)
      FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: %s must be a positive integer (got %" G_GINT64_FORMAT ")",
            pos[i].n, pos[i].v);
  /* Sizes beyond these would overflow the int indexing of the CPU runtime. */
  if (c->vocab_size > (1 << 24) || c->context_dim > 65536 || c->l_hidden > 65536 || c->ltm_slots > (1 << 20) ||
      c->ltm_key_dim > 65536 || c->ltm_val_dim > 65536 || c->persistent_dim > 65536 || c->ltm_topk > 4096 ||
      c->max_h_steps > 64 || c->max_l_steps > 64 || c->h_stride > 65536 || c->token_adapter_rank > 65536)
    FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: a dimension is beyond what this runtime supports");
  if (c->persistent_dim < 0)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: persistent_dim must be >= 0");
  if (c->rwkv_n_layer_hint < 2)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: rwkv_n_layer_hint must be >= 2");
  if (c->h_hidden != c->context_dim)
    FAIL (HN_ERROR_UNSUPPORTED, "architecture contract: h_hidden=%" G_GINT64_FORMAT " must equal context_dim=%" G_GINT64_FORMAT,
          c->h_hidden, c->context_dim);
  if (c->h_hidden % c->h_rwkv_head_size != 0 || c->l_hidden % c->l_rwkv_head_size != 0)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: RWKV head sizes must divide their cell widths "
          "(h_hidden=%" G_GINT64_FORMAT " h_rwkv_head_size=%" G_GINT64_FORMAT " l_hidden=%" G_GINT64_FORMAT
          " l_rwkv_head_size=%" G_GINT64_FORMAT ")", c->h_hidden, c->h_rwkv_head_size, c->l_hidden, c->l_rwkv_head_size);
  if (c->min_h_steps > c->max_h_steps)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: min_h_steps must be in 1..max_h_steps");
  if (c->ltm_topk > c->ltm_slots)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: ltm_topk cannot exceed ltm_slots");
  if (c->enforce_rosa_max_context && c->rosa_max_context <= 0)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: rosa_max_context must be positive when bounded ROSA is enabled");
  if (c->rosa_max_context < 0 || c->detach_every_n_steps < 0 || c->memory_gate_warmup_steps < 0)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: negative rosa_max_context, detach_every_n_steps or memory_gate_warmup_steps");

  const struct { const char *n; double v; } spos[] = {
    { "halt_logit_clamp", c->halt_logit_clamp }, { "recurrent_state_clamp", c->recurrent_state_clamp },
    { "context_state_clamp", c->context_state_clamp }, { "drift_state_clamp", c->drift_state_clamp },
    { "activation_clamp", c->activation_clamp }, { "l_conv_atol", c->l_conv_atol },
    { "act_depth_temperature", c->act_depth_temperature }, { "ponder_huber_beta", c->ponder_huber_beta },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (spos); i++)
    if (!isfinite (spos[i].v) || spos[i].v <= 0)
      FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: %s must be finite and > 0", spos[i].n);
  const struct { const char *n; double v; } nneg[] = {
    { "drift_norm_clamp", c->drift_norm_clamp }, { "drift_delta_scale", c->drift_delta_scale },
    { "rwkv_channel_mix_key_clamp", c->rwkv_channel_mix_key_clamp },
    { "rwkv_channel_mix_deepembed_clamp", c->rwkv_channel_mix_deepembed_clamp },
    { "commitment_threshold", c->commitment_threshold }, { "ltm_lr", c->ltm_lr },
    { "ltm_weight_decay", c->ltm_weight_decay }, { "ltm_score_grad_scale", c->ltm_score_grad_scale },
    { "ponder_loss_weight", c->ponder_loss_weight }, { "commitment_loss_weight", c->commitment_loss_weight },
    { "max_commitment_cost_for_backward", c->max_commitment_cost_for_backward },
    { "max_ponder_cost_for_backward", c->max_ponder_cost_for_backward }, { "z_loss_weight", c->z_loss_weight },
    { "ltm_value_writer_max_norm", c->ltm_value_writer_max_norm },
    { "ltm_value_alignment_ready_threshold", c->ltm_value_alignment_ready_threshold },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (nneg); i++)
    if (!isfinite (nneg[i].v) || nneg[i].v < 0)
      FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: %s must be finite and >= 0", nneg[i].n);
  const struct { const char *n; double v, hi; } unit[] = {
    { "h_halt_thresh", c->h_halt_thresh, 1.0 }, { "ltm_momentum", c->ltm_momentum, 1.0 },
    { "ltm_forget_rate", c->ltm_forget_rate, 1.0 }, { "memory_gate_warmup_floor", c->memory_gate_warmup_floor, 0.95 },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (unit); i++)
    if (!isfinite (unit[i].v) || unit[i].v < 0 || unit[i].v > unit[i].hi)
      FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: %s must be in 0..%g", unit[i].n, unit[i].hi);
  if (!isfinite (c->ltm_value_alignment_ema_decay) || c->ltm_value_alignment_ema_decay < 0 ||
      c->ltm_value_alignment_ema_decay >= 1)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "architecture contract: ltm_value_alignment_ema_decay must be in [0, 1)");
  return TRUE;
}

/* ---- Python float repr ---- */

char *
hn_hier_python_float_repr (double v)
{
  if (isnan (v))
    return g_strdup ("NaN");
  if (isinf (v))
    return g_strdup (v > 0 ? "Infinity" : "-Infinity");
  if (v == 0)
    return g_strdup (signbit (v) ? "-0.0" : "0.0");
  /* Shortest digits that round-trip, as Python's repr does. */
  char buf[64];
  int prec;
  for (prec = 1; prec <= 17; prec++)
    {
      g_snprintf (buf, sizeof buf, "%.*e", prec - 1, v);
      if (g_ascii_strtod (buf, NULL) == v)
        break;
    }
  /* buf = [-]d.ddde[+-]XX: collect digits and the decimal exponent. */
  const char *p = buf;
  gboolean neg = FALSE;
  if (*p == '-')
    {
      neg = TRUE;
      p++;
    }
  char digits[32];
  int nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.')
      digits[nd++] = *p;
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = 0;
  int exp10 = atoi (p + 1);
  GString *s = g_string_new (neg ? "-" : "");
  if (exp10 < -4 || exp10 >= 16)
    {
      g_string_append_c (s, digits[0]);
      if (nd > 1)
        {
          g_string_append_c (s, '.');
          g_string_append (s, digits + 1);
        }
      g_string_append_printf (s, "e%c%02d", exp10 < 0 ? '-' : '+', ABS (exp10));
    }
  else if (exp10 < 0)
    {
      g_string_append (s, "0.");
      for (int i = 0; i < -exp10 - 1; i++)
        g_string_append_c (s, '0');
      g_string_append (s, digits);
    }
  else
    {
      for (int i = 0; i <= exp10; i++)
        g_string_append_c (s, i < nd ? digits[i] : '0');
      g_string_append_c (s, '.');
      if (nd > exp10 + 1)
        g_string_append (s, digits + exp10 + 1);
      else
        g_string_append_c (s, '0');
    }
  return g_string_free (s, FALSE);
}

/* ---- canonical JSON ---- */

static void
append_json_string (GString *s, const char *v)
{
  g_string_append_c (s, '"');
  for (const unsigned char *p = (const unsigned char *) v; *p; p++)
    {
      if (*p == '"' || *p == '\\')
        g_string_append_printf (s, "\\%c", *p);
      else if (*p == '\n')
        g_string_append (s, "\\n");
      else if (*p < 0x20 || *p >= 0x7f)
        g_string_append_printf (s, "\\u%04x", *p); /* contract strings are ASCII */
      else
        g_string_append_c (s, (char) *p);
    }
  g_string_append_c (s, '"');
}

static void
append_value (GString *s, const HnHierConfig *c, const Field *f)
{
  switch (f->type)
    {
    case F_INT:
      g_string_append_printf (s, "%" G_GINT64_FORMAT, *P_INT (c, f));
      break;
    case F_NINT:
      if (*P_INT (c, f) <= 0)
        g_string_append (s, "null");
      else
        g_string_append_printf (s, "%" G_GINT64_FORMAT, *P_INT (c, f));
      break;
    case F_DBL:
      {
        g_autofree char *r = hn_hier_python_float_repr (*P_DBL (c, f));
        g_string_append (s, r);
      }
      break;
    case F_BOOL:
      g_string_append (s, *P_BOOL (c, f) ? "true" : "false");
      break;
    case F_STR:
      append_json_string (s, *P_STR (c, f) ? *P_STR (c, f) : "");
      break;
    }
}

static int
cmp_field_names (gconstpointer a, gconstpointer b)
{
  return strcmp ((*(const Field *const *) a)->name, (*(const Field *const *) b)->name);
}

char *
hn_hier_config_canonical_json (const HnHierConfig *c)
{
  const Field *sorted[N_FIELDS + 1];
  static const Field schema = { "architecture_contract_schema_version", F_INT, 0 };
  for (gsize i = 0; i < N_FIELDS; i++)
    sorted[i] = &fields[i];
  sorted[N_FIELDS] = &schema;
  qsort (sorted, N_FIELDS + 1, sizeof sorted[0], cmp_field_names);
  GString *s = g_string_new ("{");
  for (gsize i = 0; i < N_FIELDS + 1; i++)
    {
      if (i)
        g_string_append_c (s, ',');
      append_json_string (s, sorted[i]->name);
      g_string_append_c (s, ':');
      if (sorted[i] == &schema)
        g_string_append_printf (s, "%d", SCHEMA_VERSION);
      else
        append_value (s, c, sorted[i]);
    }
  g_string_append_c (s, '}');
  return g_string_free (s, FALSE);
}

char *
hn_hier_config_sha256 (const HnHierConfig *c)
{
  g_autofree char *j = hn_hier_config_canonical_json (c);
  return g_compute_checksum_for_string (G_CHECKSUM_SHA256, j, -1);
}

/* ---- set from text ---- */

gboolean
hn_hier_config_set (HnHierConfig *c, const char *name, const char *value, GError **error)
{
  g_autofree char *key = g_strdelimit (g_strdup (name), "-", '_');
  const Field *f = find_field (key);
  if (!f)
    FAIL (HN_ERROR_INVALID_ARGUMENT, "unknown architecture setting '%s'", name);
  char *end = NULL;
  switch (f->type)
    {
    case F_INT:
    case F_NINT:
      {
        gint64 v = g_ascii_strtoll (value, &end, 10);
        if (!end || *end || end == value)
          FAIL (HN_ERROR_INVALID_ARGUMENT, "%s: '%s' is not an integer", name, value);
        *P_INT (c, f) = v;
      }
      break;
    case F_DBL:
      {
        double v = g_ascii_strtod (value, &end);
        if (!end || *end || end == value || !isfinite (v))
          FAIL (HN_ERROR_INVALID_ARGUMENT, "%s: '%s' is not a finite number", name, value);
        *P_DBL (c, f) = v;
      }
      break;
    case F_BOOL:
      if (g_ascii_strcasecmp (value, "true") == 0 || strcmp (value, "1") == 0)
        *P_BOOL (c, f) = TRUE;
      else if (g_ascii_strcasecmp (value, "false") == 0 || strcmp (value, "0") == 0)
        *P_BOOL (c, f) = FALSE;
      else
        FAIL (HN_ERROR_INVALID_ARGUMENT, "%s: '%s' is not true or false", name, value);
      break;
    case F_STR:
      set_str (P_STR (c, f), value);
      break;
    }
  return TRUE;
}

/* ---- config.json ---- */

gboolean
hn_hier_config_save (const HnHierConfig *c, const char *path, GError **error)
{
  g_autofree char *sha = hn_hier_config_sha256 (c);
  g_autofree char *canon = hn_hier_config_canonical_json (c);
  /* Written by hand: json-glib 1.6 prints some doubles as "1e-08.0", and the
   * contract is kept in its canonical form, byte for byte what is hashed. */
  GString *s = g_string_new ("{\n  \"model_type\": \"hierarchos\",\n");
  g_string_append_printf (s, "  \"format_version\": %d,\n", HN_HIER_FORMAT_VERSION);
  g_string_append (s, "  \"architecture_revision\": ");
  append_json_string (s, c->architecture_revision);
  g_string_append_printf (s, ",\n  \"architecture_contract_sha256\": \"%s\",\n", sha);
  g_string_append_printf (s, "  \"architecture_contract\": %s\n}\n", canon);
  gboolean ok = hn_write_file_atomic (path, s->str, s->len, error);
  g_string_free (s, TRUE);
  return ok;
}

gboolean
hn_hier_config_load (HnHierConfig *c, const char *path, GError **error)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) local = NULL;
  if (!hn_json_parser_load_file (parser, path, HN_MAX_CONFIG_BYTES, "model config", &local))
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return FALSE;
    }
  JsonNode *root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    FAIL (HN_ERROR_CORRUPT, "%s: not a JSON object", path);
  JsonObject *o = json_node_get_object (root);
  const char *mt = hn_json_object_get_string (o, "model_type");
  if (!mt || strcmp (mt, "hierarchos") != 0)
    FAIL (HN_ERROR_UNSUPPORTED, "%s: model_type is not \"hierarchos\"", path);
  JsonNode *fv = json_object_get_member (o, "format_version");
  if (!fv || json_node_get_value_type (fv) != G_TYPE_INT64 || json_node_get_int (fv) != HN_HIER_FORMAT_VERSION)
    FAIL (HN_ERROR_UNSUPPORTED, "%s: format_version must be %d", path, HN_HIER_FORMAT_VERSION);
  JsonNode *cn = json_object_get_member (o, "architecture_contract");
  if (!cn || !JSON_NODE_HOLDS_OBJECT (cn))
    FAIL (HN_ERROR_CORRUPT, "%s: architecture_contract missing", path);
  JsonObject *co = json_node_get_object (cn);

  HnHierConfig tmp;
  memset (&tmp, 0, sizeof tmp);
  JsonNode *sv = json_object_get_member (co, "architecture_contract_schema_version");
  if (!sv || json_node_get_value_type (sv) != G_TYPE_INT64 || json_node_get_int (sv) != SCHEMA_VERSION)
    FAIL (HN_ERROR_UNSUPPORTED, "%s: architecture_contract_schema_version must be %d", path, SCHEMA_VERSION);
  g_autoptr (GList) members = json_object_get_members (co);
  for (GList *l = members; l; l = l->next)
    if (strcmp (l->data, "architecture_contract_schema_version") != 0 && !find_field (l->data))
      {
        hn_hier_config_clear (&tmp);
        FAIL (HN_ERROR_UNSUPPORTED, "%s: unknown architecture contract field '%s'", path, (const char *) l->data);
      }
  for (gsize i = 0; i < N_FIELDS; i++)
    {
      const Field *f = &fields[i];
      JsonNode *n = json_object_get_member (co, f->name);
      gboolean ok = n && JSON_NODE_HOLDS_VALUE (n);
      GType t = ok ? json_node_get_value_type (n) : G_TYPE_INVALID;
      if (f->type == F_NINT && n && JSON_NODE_HOLDS_NULL (n))
        {
          *P_INT (&tmp, f) = 0;
          continue;
        }
      switch (f->type)
        {
        case F_INT:
        case F_NINT:
          ok = ok && t == G_TYPE_INT64;
          if (ok)
            *P_INT (&tmp, f) = json_node_get_int (n);
          break;
        case F_DBL:
          ok = ok && (t == G_TYPE_DOUBLE || t == G_TYPE_INT64);
          if (ok)
            *P_DBL (&tmp, f) = json_node_get_double (n);
          break;
        case F_BOOL:
          ok = ok && t == G_TYPE_BOOLEAN;
          if (ok)
            *P_BOOL (&tmp, f) = json_node_get_boolean (n);
          break;
        case F_STR:
          ok = ok && t == G_TYPE_STRING;
          if (ok)
            *P_STR (&tmp, f) = g_strdup (json_node_get_string (n));
          break;
        }
      if (!ok)
        {
          hn_hier_config_clear (&tmp);
          FAIL (HN_ERROR_CORRUPT, "%s: architecture contract field '%s' is missing or has the wrong type", path, f->name);
        }
    }
  g_autofree char *sha = hn_hier_config_sha256 (&tmp);
  const char *want = hn_json_object_get_string (o, "architecture_contract_sha256");
  if (!want || strlen (want) != 64 || g_ascii_strcasecmp (want, sha) != 0)
    {
      hn_hier_config_clear (&tmp);
      FAIL (HN_ERROR_CORRUPT, "%s: architecture_contract_sha256 %s does not match the contract (%s)", path,
            want ? want : "(missing)", sha);
    }
  g_autoptr (GError) verr = NULL;
  if (!hn_hier_config_validate (&tmp, &verr))
    {
      hn_hier_config_clear (&tmp);
      FAIL (verr->code, "%s: %s", path, verr->message);
    }
  *c = tmp;
  return TRUE;
}
