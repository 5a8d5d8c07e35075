/* Mamba / Falcon-Mamba decoders (see mamba.h). The checkpoint's fused
 * projections are split at load into the parts the graph multiplies by
 * (in_proj into its x and z rows, x_proj into dt, B and C rows), so every
 * activation is a contiguous tensor the ops take as they are. */
#include "ssm/mamba.h"

#include "base/hn-error.h"
#include "encdec/encdec-loader.h"
#include "formats/model-config.h"
#include "recurrent/mamba1-mixer.h"
#include "recurrent/mamba2-mixer.h"
#include "recurrent/ops-ssm.h"
#include "recurrent/rwkv-mixer.h"

#include <math.h>
#include <string.h>

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

typedef struct {
  HnTensor *norm_w;
  HnMamba1Weights m1; /* Mamba's mixer: in_proj split into x and z rows, x_proj into dt, B and C */
  HnMamba2Weights m2; /* Mamba-2's */
  HnRwkvWeights rw;   /* RWKV-4's block */
} MambaLayer;

struct _HnMamba {
  HnVkContext *ctx;
  const HnArchInfo *arch;
  HnMambaHParams hp;
  MambaLayer *layers;
  HnTensor *embed, *norm_f, *lm_head;
  HnTensor *norm_f_b, *pre_ln_w, *pre_ln_b; /* RWKV: ln_out's bias, blocks.0.pre_ln */
  GPtrArray *owned;
  guint64 weight_bytes;
  char *dir;
};

const HnArchInfo *
hn_mamba_get_arch (HnMamba *m)
{
  return m->arch;
}

const HnMambaHParams *
hn_mamba_get_hparams (HnMamba *m)
{
  return &m->hp;
}

guint64
hn_mamba_get_weight_bytes (HnMamba *m)
{
  return m->weight_bytes;
}

/* Channels of the conv (Mamba-2: x, B and C). */
static gint64
conv_channels (const HnMambaHParams *h)
{
  return h->inner + (h->mamba2 ? 2 * (gint64) h->n_groups * h->state : 0);
}

guint64
hn_mamba_hparams_state_bytes (const HnMambaHParams *h)
{
  if (h->rwkv) /* the two shifts [C] and num, den, max [A] per layer */
    return (guint64) sizeof (float) * h->n_layer * (2 * (guint64) h->hidden + 3 * (guint64) h->att_size);
  return (guint64) sizeof (float) * h->n_layer *
         ((guint64) (h->conv_kernel - 1) * conv_channels (h) + (guint64) h->inner * h->state);
}

guint64
hn_mamba_state_bytes_per_row (HnMamba *m)
{
  return hn_mamba_hparams_state_bytes (&m->hp);
}

void
hn_mamba_free (HnMamba *m)
{
  if (!m)
    return;
  g_free (m->layers);
  g_clear_pointer (&m->owned, g_ptr_array_unref);
  g_clear_pointer (&m->ctx, hn_vk_context_unref);
  g_free (m->dir);
  g_free (m);
}

/* ---------------------------------------------------------------- loading */

static gboolean
cfg_int (const HnModelConfig *cfg, const char *key, gint64 def, gint64 *out, GError **error)
{
  GError *e = NULL;
  if (!hn_model_config_get_int (cfg, key, out, &e))
    {
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      *out = def;
    }
  return TRUE;
}

static gboolean
cfg_bool (const HnModelConfig *cfg, const char *key, gboolean def, gboolean *out, GError **error)
{
  GError *e = NULL;
  if (!hn_model_config_get_bool (cfg, key, out, &e))
    {
      if (e)
        {
          g_propagate_error (error, e);
          return FALSE;
        }
      *out = def;
    }
  return TRUE;
}

/* RwkvConfig: attention_hidden_size and intermediate_size (null: hidden, 4 · hidden),
 * layer_norm_epsilon (1e-5), rescale_every (6), tie_word_embeddings (false). */
static gboolean
resolve_rwkv (HnMambaHParams *h, const HnModelConfig *cfg, GError **error)
{
  gint64 att = 0, resc = 6;
  h->rwkv = TRUE;
  h->vocab = (int) cfg->vocab_size;
  h->hidden = (int) cfg->hidden_size;
  h->n_layer = (int) cfg->num_hidden_layers;
  if (h->vocab <= 0 || h->hidden <= 0 || h->n_layer <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: vocab_size, hidden_size and num_hidden_layers are required",
                   cfg->path);
      return FALSE;
    }
  if (!cfg_int (cfg, "attention_hidden_size", h->hidden, &att, error) ||
      !cfg_int (cfg, "rescale_every", 6, &resc, error))
    return FALSE;
  gint64 ffn = cfg->intermediate_size > 0 ? cfg->intermediate_size : 4 * (gint64) h->hidden;
  if (att < 1 || ffn < 1 || resc < 0 || att > G_MAXINT || ffn > G_MAXINT || resc > G_MAXINT)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: attention_hidden_size %" G_GINT64_FORMAT ", intermediate_size %" G_GINT64_FORMAT
                   " and rescale_every %" G_GINT64_FORMAT " must be positive (rescale_every 0 or more)",
                   cfg->path, att, ffn, resc);
      return FALSE;
    }
  h->att_size = (int) att;
  h->ffn_size = (int) ffn;
  h->rescale_every = (int) resc;
  h->inner = h->att_size;
  h->state = 1;
  h->conv_kernel = 2;
  h->dt_rank = 1;
  h->norm_eps = isnan (cfg->norm_eps) ? 1e-5f : (float) cfg->norm_eps;
  h->tie_embeddings = cfg->tie_word_embeddings > 0; /* RwkvConfig's default: untied */
  return TRUE;
}

static gboolean
resolve (HnMambaHParams *h, const HnModelConfig *cfg, const HnArchInfo *arch, GError **error)
{
  if (arch->names == HN_NAMES_RWKV)
    return resolve_rwkv (h, cfg, error);
  gint64 state, kernel, expand, inner, rank;
  gboolean use_bias, conv_bias;
  if (!cfg_int (cfg, "state_size", 16, &state, error) || !cfg_int (cfg, "conv_kernel", 4, &kernel, error) ||
      !cfg_int (cfg, "expand", 2, &expand, error) || !cfg_bool (cfg, "use_bias", FALSE, &use_bias, error) ||
      !cfg_bool (cfg, "use_conv_bias", TRUE, &conv_bias, error))
    return FALSE;
  (void) use_bias;
  (void) conv_bias;
  h->vocab = (int) cfg->vocab_size;
  h->hidden = (int) cfg->hidden_size;
  h->n_layer = (int) cfg->num_hidden_layers;
  if (h->vocab <= 0 || h->hidden <= 0 || h->n_layer <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: vocab_size, hidden_size and num_hidden_layers are required",
                   cfg->path);
      return FALSE;
    }
  /* intermediate_size is saved by MambaConfig (expand · hidden otherwise) */
  inner = cfg->intermediate_size > 0 ? cfg->intermediate_size : expand * h->hidden;
  const char *rs = hn_model_config_get_string (cfg, "time_step_rank");
  if (rs && g_str_equal (rs, "auto"))
    rank = (h->hidden + 15) / 16;
  else if (!cfg_int (cfg, "time_step_rank", (h->hidden + 15) / 16, &rank, error))
    return FALSE;
  h->inner = (int) inner;
  h->state = (int) state;
  h->conv_kernel = (int) kernel;
  h->dt_rank = (int) rank;
  if (state < 1 || state > HN_SSM_MAX_STATE || kernel < 1 || kernel > HN_CONV1D_MAX_KERNEL || rank < 1 || inner < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: state_size %" G_GINT64_FORMAT " (1..%d), conv_kernel %" G_GINT64_FORMAT
                   " (1..%d), time_step_rank %" G_GINT64_FORMAT " and intermediate_size %" G_GINT64_FORMAT
                   " are outside what the kernels take",
                   cfg->path, state, HN_SSM_MAX_STATE, kernel, HN_CONV1D_MAX_KERNEL, rank, inner);
      return FALSE;
    }
  h->norm_eps = isnan (cfg->norm_eps) ? 1e-5f : (float) cfg->norm_eps;
  const char *act = cfg->hidden_act;
  if (act && !g_str_equal (act, "silu") && !g_str_equal (act, "swish"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: hidden_act \"%s\": the Mamba mixer is built for silu",
                   cfg->path, act);
      return FALSE;
    }
  h->bc_dt_norm = g_str_equal (arch->model_type, "falcon_mamba");
  double me = 1e-6;
  GError *e = NULL;
  if (!hn_model_config_get_double (cfg, "mixer_rms_eps", &me, &e) && e)
    {
      g_propagate_error (error, e);
      return FALSE;
    }
  h->mixer_eps = (float) me;
  h->tie_embeddings = cfg->tie_word_embeddings != 0; /* MambaConfig's default: tied */
  h->mamba2 = arch->names == HN_NAMES_MAMBA2;
  if (!h->mamba2)
    return TRUE;
  gint64 heads, hd, groups;
  if (!cfg_int (cfg, "num_heads", 128, &heads, error) || !cfg_int (cfg, "head_dim", 64, &hd, error) ||
      !cfg_int (cfg, "n_groups", 8, &groups, error))
    return FALSE;
  h->inner = (int) (expand * h->hidden);
  if (heads < 1 || hd < 1 || groups < 1 || heads * hd != h->inner || heads % groups)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: num_heads %" G_GINT64_FORMAT " · head_dim %" G_GINT64_FORMAT " must be expand · hidden_size "
                   "(%d) with num_heads a multiple of n_groups %" G_GINT64_FORMAT,
                   cfg->path, heads, hd, h->inner, groups);
      return FALSE;
    }
  h->n_heads = (int) heads;
  h->head_dim = (int) hd;
  h->n_groups = (int) groups;
  gboolean rms = TRUE;
  if (!cfg_bool (cfg, "rms_norm", TRUE, &rms, error))
    return FALSE;
  if (!rms)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: rms_norm false (Mamba-2 without its gated norm) is not "
                   "built", cfg->path);
      return FALSE;
    }
  HnMamba2Dims d = { 0 };
  if (!hn_mamba2_dt_limit_from_config (cfg, &d, error))
    return FALSE;
  h->dt_limit = d.dt_limit;
  h->dt_min = d.dt_min;
  h->dt_max = d.dt_max;
  return TRUE;
}

/* An f32 device tensor of `shape` from checkpoint tensor `name`, which must hold that many values
 * (conv1d.weight [I, 1, K] as [I, K]). */
static gboolean
load_f32 (HnWLoader *L, const char *name, int ndim, const gint64 *shape, gboolean required, HnTensor **out,
          GError **error)
{
  *out = NULL;
  const HnSafetensorInfo *t = hn_wl_find (L, name, required, error);
  if (!t)
    return !required;
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  if ((gint64) t->n_elements != n)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: tensor %s holds %" G_GINT64_FORMAT " values, config.json implies %" G_GINT64_FORMAT, t->file,
                   t->name, (gint64) t->n_elements, n);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *out = hn_wl_from_f32 (L, name, ndim, shape, f, error);
  return *out != NULL;
}

/* A bias of 2 parts [n0 + n1] as two f32 tensors (NULL, NULL when absent). */
static gboolean
load_split_bias (HnWLoader *L, const char *name, gint64 n0, gint64 n1, HnTensor **a, HnTensor **b, GError **error)
{
  *a = *b = NULL;
  const HnSafetensorInfo *t = hn_wl_find (L, name, FALSE, error);
  if (!t)
    return TRUE;
  if ((gint64) t->n_elements != n0 + n1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s should hold %" G_GINT64_FORMAT " values", t->file,
                   t->name, n0 + n1);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *a = hn_wl_from_f32 (L, name, 1, (gint64[]) { n0 }, f, error);
  *b = *a ? hn_wl_from_f32 (L, name, 1, (gint64[]) { n1 }, f + n0, error) : NULL;
  return *b != NULL;
}

/* Rows [r0, r0 + n) of an f32 copy of checkpoint tensor `name` (n_rows x cols values) as [n, cols]. */
static gboolean
load_f32_rows (HnWLoader *L, const char *name, gint64 n_rows, gint64 cols, gint64 r0, gint64 n, gboolean required,
               HnTensor **out, GError **error)
{
  *out = NULL;
  const HnSafetensorInfo *t = hn_wl_find (L, name, required, error);
  if (!t)
    return !required;
  if ((gint64) t->n_elements != n_rows * cols)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: tensor %s holds %" G_GINT64_FORMAT " values, config.json implies %" G_GINT64_FORMAT, t->file,
                   t->name, (gint64) t->n_elements, n_rows * cols);
      return FALSE;
    }
  g_autofree float *f = hn_safetensor_info_dup_f32 (t, error);
  if (!f)
    return FALSE;
  *out = cols == 1 ? hn_wl_from_f32 (L, name, 1, (gint64[]) { n }, f + r0, error)
                   : hn_wl_from_f32 (L, name, 2, (gint64[]) { n, cols }, f + r0 * cols, error);
  return *out != NULL;
}

static gboolean
load_weights_mamba2 (HnMamba *m, HnWLoader *L, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  gint64 C = h->hidden, I = h->inner, GN = (gint64) h->n_groups * h->state, H = h->n_heads, K = h->conv_kernel;
  gint64 CD = I + 2 * GN, R = 2 * I + 2 * GN + H;
  for (int l = 0; l < h->n_layer; l++)
    {
      MambaLayer *ly = &m->layers[l];
      HnMamba2Weights *mw = &ly->m2;
      char p[96], nm[160];
      g_snprintf (p, sizeof p, "backbone.layers.%d.", l);
#define NM(s) (g_snprintf (nm, sizeof nm, "%s%s", p, s), nm)
      CK (hn_wl_vector (L, NM ("norm.weight"), C, TRUE, &ly->norm_w, error));
      /* in_proj rows: z [0, I), x [I, 2I), B, C (GN each), dt (H) */
      const char *ip = NM ("mixer.in_proj.weight");
      g_autofree char *ipn = g_strdup (ip);
      CK (hn_wl_matrix_rows (L, ipn, R, 0, I, C, &mw->w_z, error));
      CK (hn_wl_matrix_rows (L, ipn, R, I, I, C, &mw->w_x, error));
      CK (hn_wl_matrix_rows (L, ipn, R, 2 * I, GN, C, &mw->w_B, error));
      CK (hn_wl_matrix_rows (L, ipn, R, 2 * I + GN, GN, C, &mw->w_C, error));
      CK (hn_wl_matrix_rows (L, ipn, R, 2 * I + 2 * GN, H, C, &mw->w_dt, error));
      g_autofree char *ibn = g_strdup (NM ("mixer.in_proj.bias"));
      CK (load_f32_rows (L, ibn, R, 1, 0, I, FALSE, &mw->b_z, error));
      if (mw->b_z)
        {
          CK (load_f32_rows (L, ibn, R, 1, I, I, TRUE, &mw->b_x, error));
          CK (load_f32_rows (L, ibn, R, 1, 2 * I, GN, TRUE, &mw->b_B, error));
          CK (load_f32_rows (L, ibn, R, 1, 2 * I + GN, GN, TRUE, &mw->b_C, error));
          CK (load_f32_rows (L, ibn, R, 1, 2 * I + 2 * GN, H, TRUE, &mw->b_dt, error));
        }
      /* conv1d over x, B, C: weight [CD, 1, K], bias [CD] */
      g_autofree char *cwn = g_strdup (NM ("mixer.conv1d.weight"));
      CK (load_f32_rows (L, cwn, CD, K, 0, I, TRUE, &mw->conv_w, error));
      CK (load_f32_rows (L, cwn, CD, K, I, GN, TRUE, &mw->conv_wB, error));
      CK (load_f32_rows (L, cwn, CD, K, I + GN, GN, TRUE, &mw->conv_wC, error));
      g_autofree char *cbn = g_strdup (NM ("mixer.conv1d.bias"));
      CK (load_f32_rows (L, cbn, CD, 1, 0, I, FALSE, &mw->conv_b, error));
      if (mw->conv_b)
        {
          CK (load_f32_rows (L, cbn, CD, 1, I, GN, TRUE, &mw->conv_bB, error));
          CK (load_f32_rows (L, cbn, CD, 1, I + GN, GN, TRUE, &mw->conv_bC, error));
        }
      CK (load_f32 (L, NM ("mixer.dt_bias"), 1, (gint64[]) { H }, TRUE, &mw->dt_bias, error));
      CK (load_f32 (L, NM ("mixer.A_log"), 1, (gint64[]) { H }, TRUE, &mw->A_log, error));
      CK (load_f32 (L, NM ("mixer.D"), 1, (gint64[]) { H }, TRUE, &mw->D, error));
      CK (hn_wl_vector (L, NM ("mixer.norm.weight"), I, TRUE, &mw->norm_w, error));
      CK (hn_wl_matrix (L, NM ("mixer.out_proj.weight"), C, I, TRUE, &mw->out_w, error));
      CK (hn_wl_vector (L, NM ("mixer.out_proj.bias"), C, FALSE, &mw->out_b, error));
#undef NM
    }
  return TRUE;
}

/* A token-shift mix ([1, 1, C]) as the conv1d weight [C, 2] = (1 - m, m). */
static gboolean
load_shift_mix (HnWLoader *L, const char *name, gint64 C, HnTensor **out, GError **error)
{
  const HnSafetensorInfo *t = hn_wl_find (L, name, TRUE, error);
  if (!t)
    return FALSE;
  if ((gint64) t->n_elements != C)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor %s should hold %" G_GINT64_FORMAT " values", t->file,
                   t->name, C);
      return FALSE;
    }
  g_autofree float *m = hn_safetensor_info_dup_f32 (t, error);
  if (!m)
    return FALSE;
  g_autofree float *w = g_new (float, 2 * C);
  for (gint64 c = 0; c < C; c++)
    {
      w[2 * c] = 1.0f - m[c];
      w[2 * c + 1] = m[c];
    }
  *out = hn_wl_from_f32 (L, name, 2, (gint64[]) { C, 2 }, w, error);
  return *out != NULL;
}

/* A [rows, cols] matrix divided by `div` (RWKV's inference rescale; div 1: as stored). */
static gboolean
load_matrix_div (HnWLoader *L, const char *name, gint64 rows, gint64 cols, double div, HnTensor **out, GError **error)
{
  if (div == 1.0)
    return hn_wl_matrix (L, name, rows, cols, TRUE, out, error);
  g_autofree float *f = hn_wl_host_matrix (L, name, rows, cols, error);
  if (!f)
    return FALSE;
  for (gint64 i = 0; i < rows * cols; i++)
    f[i] = (float) (f[i] / div);
  *out = hn_wl_from_f32 (L, name, 2, (gint64[]) { rows, cols }, f, error);
  return *out != NULL;
}

static gboolean
load_weights_rwkv (HnMamba *m, HnWLoader *L, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  gint64 C = h->hidden, A = h->att_size, F = h->ffn_size;
  CK (hn_wl_norm (L, "rwkv.blocks.0.", "pre_ln", C, &m->pre_ln_w, &m->pre_ln_b, error));
  for (int l = 0; l < h->n_layer; l++)
    {
      HnRwkvWeights *w = &m->layers[l].rw;
      char p[96], nm[160];
      g_snprintf (p, sizeof p, "rwkv.blocks.%d.", l);
#define NM(s) (g_snprintf (nm, sizeof nm, "%s%s", p, s), nm)
      /* transformers divides these two by 2^(l / rescale_every) in eval mode (_rescale_layers) */
      double div = h->rescale_every > 0 ? ldexp (1.0, l / h->rescale_every) : 1.0;
      CK (hn_wl_norm (L, p, "ln1", C, &w->ln1_w, &w->ln1_b, error));
      CK (hn_wl_norm (L, p, "ln2", C, &w->ln2_w, &w->ln2_b, error));
      CK (load_shift_mix (L, NM ("attention.time_mix_key"), C, &w->att_mix[0], error));
      CK (load_shift_mix (L, NM ("attention.time_mix_value"), C, &w->att_mix[1], error));
      CK (load_shift_mix (L, NM ("attention.time_mix_receptance"), C, &w->att_mix[2], error));
      CK (load_f32 (L, NM ("attention.time_decay"), 1, (gint64[]) { A }, TRUE, &w->time_decay, error));
      CK (load_f32 (L, NM ("attention.time_first"), 1, (gint64[]) { A }, TRUE, &w->time_first, error));
      CK (hn_wl_matrix (L, NM ("attention.key.weight"), A, C, TRUE, &w->w_k, error));
      CK (hn_wl_matrix (L, NM ("attention.value.weight"), A, C, TRUE, &w->w_v, error));
      CK (hn_wl_matrix (L, NM ("attention.receptance.weight"), A, C, TRUE, &w->w_r, error));
      CK (load_matrix_div (L, NM ("attention.output.weight"), C, A, div, &w->w_o, error));
      CK (load_shift_mix (L, NM ("feed_forward.time_mix_key"), C, &w->ffn_mix[0], error));
      CK (load_shift_mix (L, NM ("feed_forward.time_mix_receptance"), C, &w->ffn_mix[1], error));
      CK (hn_wl_matrix (L, NM ("feed_forward.key.weight"), F, C, TRUE, &w->f_k, error));
      CK (hn_wl_matrix (L, NM ("feed_forward.receptance.weight"), C, C, TRUE, &w->f_r, error));
      CK (load_matrix_div (L, NM ("feed_forward.value.weight"), C, F, div, &w->f_v, error));
#undef NM
    }
  return TRUE;
}

static gboolean
load_weights (gpointer model, HnWLoader *L, const HnModelConfig *cfg, GError **error)
{
  (void) cfg;
  HnMamba *m = model;
  if (m->hp.rwkv)
    {
      const HnMambaHParams *h = &m->hp;
      CK (hn_wl_matrix (L, "rwkv.embeddings.weight", h->vocab, h->hidden, TRUE, &m->embed, error));
      CK (hn_wl_norm (L, "rwkv.", "ln_out", h->hidden, &m->norm_f, &m->norm_f_b, error));
      if (h->tie_embeddings)
        {
          m->lm_head = m->embed;
          hn_wl_find (L, "head.weight", FALSE, NULL);
        }
      else
        CK (hn_wl_matrix (L, "head.weight", h->vocab, h->hidden, TRUE, &m->lm_head, error));
      m->layers = g_new0 (MambaLayer, h->n_layer);
      return load_weights_rwkv (m, L, error);
    }
  const HnMambaHParams *h = &m->hp;
  gint64 C = h->hidden, I = h->inner, N = h->state, R = h->dt_rank, K = h->conv_kernel, V = h->vocab;
  CK (hn_wl_matrix (L, "backbone.embeddings.weight", V, C, TRUE, &m->embed, error));
  CK (hn_wl_vector (L, "backbone.norm_f.weight", C, TRUE, &m->norm_f, error));
  if (h->tie_embeddings)
    {
      m->lm_head = m->embed;
      hn_wl_find (L, "lm_head.weight", FALSE, NULL); /* a tied copy some exporters keep */
    }
  else
    CK (hn_wl_matrix (L, "lm_head.weight", V, C, TRUE, &m->lm_head, error));
  m->layers = g_new0 (MambaLayer, h->n_layer);
  if (h->mamba2)
    return load_weights_mamba2 (m, L, error);
  for (int l = 0; l < h->n_layer; l++)
    {
      MambaLayer *ly = &m->layers[l];
      char p[96];
      g_snprintf (p, sizeof p, "backbone.layers.%d.", l);
#define NM(s) (g_snprintf (nm, sizeof nm, "%s%s", p, s), nm)
      char nm[160];
      CK (hn_wl_vector (L, NM ("norm.weight"), C, TRUE, &ly->norm_w, error));
      CK (hn_wl_matrix_rows (L, NM ("mixer.in_proj.weight"), 2 * I, 0, I, C, &ly->m1.w_x, error));
      CK (hn_wl_matrix_rows (L, NM ("mixer.in_proj.weight"), 2 * I, I, I, C, &ly->m1.w_z, error));
      CK (load_split_bias (L, NM ("mixer.in_proj.bias"), I, I, &ly->m1.b_x, &ly->m1.b_z, error));
      CK (load_f32 (L, NM ("mixer.conv1d.weight"), 2, (gint64[]) { I, K }, TRUE, &ly->m1.conv_w, error));
      CK (load_f32 (L, NM ("mixer.conv1d.bias"), 1, (gint64[]) { I }, FALSE, &ly->m1.conv_b, error));
      CK (hn_wl_matrix_rows (L, NM ("mixer.x_proj.weight"), R + 2 * N, 0, R, I, &ly->m1.w_dtl, error));
      CK (hn_wl_matrix_rows (L, NM ("mixer.x_proj.weight"), R + 2 * N, R, N, I, &ly->m1.w_B, error));
      CK (hn_wl_matrix_rows (L, NM ("mixer.x_proj.weight"), R + 2 * N, R + N, N, I, &ly->m1.w_C, error));
      CK (hn_wl_matrix (L, NM ("mixer.dt_proj.weight"), I, R, TRUE, &ly->m1.dt_w, error));
      CK (hn_wl_vector (L, NM ("mixer.dt_proj.bias"), I, FALSE, &ly->m1.dt_b, error));
      CK (load_f32 (L, NM ("mixer.A_log"), 2, (gint64[]) { I, N }, TRUE, &ly->m1.A_log, error));
      CK (load_f32 (L, NM ("mixer.D"), 1, (gint64[]) { I }, TRUE, &ly->m1.D, error));
      CK (hn_wl_matrix (L, NM ("mixer.out_proj.weight"), C, I, TRUE, &ly->m1.out_w, error));
      CK (hn_wl_vector (L, NM ("mixer.out_proj.bias"), C, FALSE, &ly->m1.out_b, error));
#undef NM
    }
  return TRUE;
}

gboolean
hn_mamba_hparams_resolve (HnMambaHParams *h, const HnModelConfig *cfg, GError **error)
{
  memset (h, 0, sizeof *h);
  const HnArchInfo *arch = hn_arch_lookup (cfg->model_type, error);
  if (!arch)
    return FALSE;
  if (!hn_arch_is_ssm (arch))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is not a state-space decoder",
                   cfg->path, arch->model_type);
      return FALSE;
    }
  return resolve (h, cfg, arch, error);
}

HnMamba *
hn_mamba_load (HnVkContext *ctx, const char *model_dir, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  const HnArchInfo *arch = cfg ? hn_arch_lookup (cfg->model_type, error) : NULL;
  if (!arch)
    return NULL;
  if (!hn_arch_is_ssm (arch) || arch->block != HN_BLOCK_MAMBA)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: model_type \"%s\" is not a Mamba decoder", cfg->path,
                   arch->model_type);
      return NULL;
    }
  g_autoptr (HnMamba) m = g_new0 (HnMamba, 1);
  m->ctx = hn_vk_context_ref (ctx);
  m->arch = arch;
  m->dir = g_strdup (model_dir);
  m->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  if (!resolve (&m->hp, cfg, arch, error) ||
      !hn_wl_load_all (ctx, model_dir, arch, cfg, m->owned, load_weights, m, &m->weight_bytes, error))
    return NULL;
  return g_steal_pointer (&m);
}

/* ---------------------------------------------------------------- the graph */

/* Activations of up to max_tok tokens (flat [tokens, ...]); views of them per call. */
typedef struct {
  int max_tok, max_logit_rows;
  HnTensor *ids, *x, *h, *xin, *z, *xc, *dtl, *Bm, *Cm, *dt, *y, *last, *logits;
  HnTensor *Bc, *Cc, *g; /* Mamba-2: B and C after the conv, the gated y */
  HnRwkvBufs rb;         /* RWKV */
} Work;

/* Width of B and C (n_groups · N). */
static int
bc_width (const HnMambaHParams *h)
{
  return (h->mamba2 ? h->n_groups : 1) * h->state;
}

static void
work_clear (Work *w)
{
  HnTensor **all[] = { &w->ids, &w->x, &w->h, &w->xin, &w->z, &w->xc, &w->dtl, &w->Bm, &w->Cm, &w->dt, &w->y,
                       &w->last, &w->logits, &w->Bc, &w->Cc, &w->g };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
  hn_rwkv_bufs_clear (&w->rb);
}

static HnRwkvDims
rwkv_dims (const HnMambaHParams *h)
{
  return (HnRwkvDims) { h->hidden, h->att_size, h->ffn_size, h->norm_eps };
}

static gboolean
work_init (Work *w, HnMamba *m, int max_tok, int max_logit_rows, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  HnVkContext *ctx = m->ctx;
  *w = (Work) { max_tok, max_logit_rows };
  gint64 T = max_tok;
  if (h->rwkv)
    {
      HnRwkvDims rd = rwkv_dims (h);
      if (!(w->ids = hn_tensor_new_named (ctx, "rwkv.ids", HN_DTYPE_I32, 1, (gint64[]) { T }, error)) ||
          !(w->x = hn_tensor_new_named (ctx, "rwkv.x", HN_DTYPE_F32, 2, (gint64[]) { T, h->hidden }, error)) ||
          !(w->h = hn_tensor_new_named (ctx, "rwkv.h", HN_DTYPE_F32, 2, (gint64[]) { T, h->hidden }, error)) ||
          !hn_rwkv_bufs_init (&w->rb, ctx, &rd, T, error) ||
          !(w->last = hn_tensor_new_named (ctx, "rwkv.last", HN_DTYPE_F32, 2, (gint64[]) { max_logit_rows, h->hidden },
                                           error)) ||
          !(w->logits = hn_tensor_new_named (ctx, "rwkv.logits", HN_DTYPE_F32, 2,
                                             (gint64[]) { max_logit_rows, h->vocab }, error)))
        {
          work_clear (w);
          return FALSE;
        }
      return TRUE;
    }
#define NEW(f, name, d1) (w->f = hn_tensor_new_named (ctx, name, HN_DTYPE_F32, 2, (gint64[]) { T, d1 }, error))
  if (!(w->ids = hn_tensor_new_named (ctx, "mamba.ids", HN_DTYPE_I32, 1, (gint64[]) { T }, error)) ||
      !NEW (x, "mamba.x", h->hidden) || !NEW (h, "mamba.h", h->hidden) || !NEW (xin, "mamba.xin", h->inner) ||
      !NEW (z, "mamba.z", h->inner) || !NEW (xc, "mamba.xc", h->inner) || !NEW (dtl, "mamba.dt_low", h->dt_rank) ||
      !NEW (Bm, "mamba.B", bc_width (h)) || !NEW (Cm, "mamba.C", bc_width (h)) || !NEW (dt, "mamba.dt", h->inner) ||
      !NEW (y, "mamba.y", h->inner) ||
      (h->mamba2 && (!NEW (Bc, "mamba.B_conv", bc_width (h)) || !NEW (Cc, "mamba.C_conv", bc_width (h)) ||
                     !NEW (g, "mamba.gated", h->inner))) ||
      !(w->last = hn_tensor_new_named (ctx, "mamba.last", HN_DTYPE_F32, 2, (gint64[]) { max_logit_rows, h->hidden },
                                       error)) ||
      !(w->logits = hn_tensor_new_named (ctx, "mamba.logits", HN_DTYPE_F32, 2,
                                         (gint64[]) { max_logit_rows, h->vocab }, error)))
    {
      work_clear (w);
      return FALSE;
    }
#undef NEW
  return TRUE;
}

/* Per-layer carried state of B rows: conv [B, K - 1, I] (NULL when K == 1) and ssm [B, I, N]. */
typedef struct {
  HnTensor *conv, *ssm;
  HnTensor *convB, *convC; /* Mamba-2: [B, K - 1, G·N] each */
} LayerState;

/* One Mamba-2 layer (see mamba.h) on flat [n, .] activations of B rows of T tokens. */
static gboolean
record_layer_mamba2 (HnMamba *m, HnCmd *cmd, HnScratch *sc, Work *w, const MambaLayer *ly, int B, int T,
                     const LayerState *st, HnTensor *x, HnTensor *hn, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  HnMamba2Dims d = { .inner = h->inner, .state = h->state, .n_heads = h->n_heads, .head_dim = h->head_dim,
                     .n_groups = h->n_groups, .norm_eps = h->norm_eps, .norm_groups = 1, .dt_limit = h->dt_limit,
                     .dt_min = h->dt_min, .dt_max = h->dt_max };
  HnMamba2Bufs buf = { w->z, w->xin, w->xc, w->y, w->g, w->Bm, w->Cm, w->Bc, w->Cc, w->dt };
  HnSsmState s = { 0 };
  if (st)
    s = (HnSsmState) { st->conv, st->convB, st->convC, st->ssm };
  return hn_mamba2_record (cmd, sc, &d, &ly->m2, &buf, B, T, st ? &s : NULL, x, hn, 1.0f, error);
}

/* The final norm: RMSNorm (Mamba), or RWKV's ln_out (nn.LayerNorm's default eps 1e-5, not the
 * config's layer_norm_epsilon). */
static gboolean
final_norm (HnMamba *m, HnCmd *cmd, HnTensor *out, HnTensor *in, GError **error)
{
  if (m->hp.rwkv)
    return hn_op_layernorm (cmd, out, in, m->norm_f, m->norm_f_b, 1e-5f, error);
  return hn_op_rmsnorm (cmd, out, in, m->norm_f, m->hp.norm_eps, HN_NORM_DEFAULT, error);
}

/* RWKV's blocks: pre_ln on the embeddings, then each block, x halved after every
 * rescale_every-th block (the output / value weights were divided to match at load). */
static gboolean
record_rwkv (HnMamba *m, HnCmd *cmd, HnScratch *sc, Work *w, int B, int T, const LayerState *st, HnTensor *x,
             HnTensor *hn, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  HnRwkvDims d = rwkv_dims (h);
  CK (hn_op_layernorm (cmd, hn, x, m->pre_ln_w, m->pre_ln_b, h->norm_eps, error));
  CK (hn_op_copy (cmd, x, hn, error));
  for (int l = 0; l < h->n_layer; l++)
    {
      HnRwkvState rs = { 0 };
      if (st)
        rs = (HnRwkvState) { st[l].conv, st[l].convB, st[l].ssm };
      CK (hn_rwkv_record (cmd, sc, &d, &m->layers[l].rw, &w->rb, B, T, st ? &rs : NULL, x, error));
      if (h->rescale_every > 0 && (l + 1) % h->rescale_every == 0)
        CK (hn_op_scale (cmd, x, x, 0.5f, 0.0f, error));
    }
  return TRUE;
}

/* Records the forward of B rows of T tokens (ids already in w->ids[0, B·T)) through every layer,
 * then the final norm and head: for every token (all_logits) or the last token of each row, into
 * w->logits. st: per-layer states of these B rows (NULL: from zero, nothing kept). */
static gboolean
record_forward (HnMamba *m, HnCmd *cmd, HnScratch *sc, Work *w, int B, int T, const LayerState *st,
                gboolean all_logits, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  gint64 n = (gint64) B * T;
#define V2(t, d1) hn_scratch_prefix (sc, w->t, 2, (gint64[]) { n, d1 }, error)
  HnTensor *ids = hn_scratch_prefix (sc, w->ids, 1, (gint64[]) { n }, error);
  HnTensor *x = V2 (x, h->hidden), *hn = V2 (h, h->hidden);
#undef V2
  if (!ids || !x || !hn)
    return FALSE;
  HnMamba1Dims d1 = { h->inner, h->state, h->dt_rank, h->bc_dt_norm, h->mixer_eps };
  HnMamba1Bufs b1 = { w->xin, w->z, w->xc, w->dtl, w->Bm, w->Cm, w->dt, w->y };
  CK (hn_op_embedding (cmd, x, m->embed, ids, error));
  if (h->rwkv)
    CK (record_rwkv (m, cmd, sc, w, B, T, st, x, hn, error));
  for (int l = 0; !h->rwkv && l < h->n_layer; l++)
    {
      const MambaLayer *ly = &m->layers[l];
      CK (hn_op_rmsnorm (cmd, hn, x, ly->norm_w, h->norm_eps, HN_NORM_DEFAULT, error));
      if (h->mamba2)
        {
          CK (record_layer_mamba2 (m, cmd, sc, w, ly, B, T, st ? &st[l] : NULL, x, hn, error));
          continue;
        }
      HnSsmState s1 = { 0 };
      if (st)
        s1 = (HnSsmState) { st[l].conv, NULL, NULL, st[l].ssm };
      CK (hn_mamba1_record (cmd, sc, &d1, &ly->m1, &b1, B, T, st ? &s1 : NULL, x, hn, 1.0f, error));
    }
  if (all_logits)
    {
      HnTensor *lg = hn_scratch_prefix (sc, w->logits, 2, (gint64[]) { n, h->vocab }, error);
      CK (lg);
      CK (final_norm (m, cmd, hn, x, error));
      return hn_op_matmul (cmd, lg, hn, m->lm_head, NULL, error);
    }
  /* the last token of each row */
  HnTensor *last = hn_scratch_prefix (sc, w->last, 2, (gint64[]) { B, h->hidden }, error);
  HnTensor *lg = hn_scratch_prefix (sc, w->logits, 2, (gint64[]) { B, h->vocab }, error);
  CK (last && lg);
  if (T == 1)
    CK (final_norm (m, cmd, last, x, error));
  else
    for (int b = 0; b < B; b++)
      {
        HnTensor *src = hn_scratch_rows (sc, x, (gint64) b * T + T - 1, 1, error);
        HnTensor *dst = hn_scratch_rows (sc, last, b, 1, error);
        CK (src && dst);
        CK (final_norm (m, cmd, dst, src, error));
      }
  return hn_op_matmul (cmd, lg, last, m->lm_head, NULL, error);
}

gboolean
hn_mamba_logits (HnMamba *m, const int32_t *ids, int n, float *logits, GError **error)
{
  if (n <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba logits: no tokens");
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->hp.vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%d)", ids[i],
                     m->hp.vocab);
        return FALSE;
      }
  Work w;
  if (!work_init (&w, m, n, n, error))
    return FALSE;
  HnScratch sc;
  hn_scratch_init (&sc, m->ctx);
  g_autoptr (HnCmd) cmd = hn_cmd_new (m->ctx, error);
  gboolean ok = cmd && hn_tensor_upload_raw (w.ids, ids, sizeof (int32_t) * (gsize) n, error) &&
                record_forward (m, cmd, &sc, &w, 1, n, NULL, TRUE, error) && hn_cmd_submit_wait (cmd, error);
  if (ok)
    {
      HnTensor *lg = hn_scratch_prefix (&sc, w.logits, 2, (gint64[]) { n, m->hp.vocab }, error);
      ok = lg && hn_tensor_download_f32 (lg, logits, (gsize) n * m->hp.vocab, error);
    }
  hn_scratch_clear (&sc);
  work_clear (&w);
  return ok;
}

/* ---------------------------------------------------------------- sessions */

struct _HnMambaSession {
  HnMamba *m;
  int max_rows, max_chunk;
  Work w;
  HnTensor **conv, **ssm; /* [n_layer]: [max_rows, K - 1, I] (NULL when K == 1), [max_rows, I, N] */
  HnTensor **convB, **convC; /* Mamba-2: [n_layer] of [max_rows, K - 1, G·N] (NULL when K == 1) */
  HnCmd *cmd;
  HnScratch sc;
  /* the one-token step of one row, recorded once and replayed (its views live in step_sc) */
  HnCmd *step_cmd;
  HnScratch step_sc;
  int step_row;           /* -1: none recorded */
  HnTensor *step_ids, *step_logits;
  float *host_logits;     /* [max_rows, vocab] */
  guint64 bytes;
  gboolean profiling;
};

void
hn_mamba_session_free (HnMambaSession *s)
{
  if (!s)
    return;
  for (int l = 0; l < s->m->hp.n_layer; l++)
    {
      g_clear_pointer (&s->conv[l], hn_tensor_unref);
      g_clear_pointer (&s->ssm[l], hn_tensor_unref);
      g_clear_pointer (&s->convB[l], hn_tensor_unref);
      g_clear_pointer (&s->convC[l], hn_tensor_unref);
    }
  g_free (s->conv);
  g_free (s->ssm);
  g_free (s->convB);
  g_free (s->convC);
  work_clear (&s->w);
  hn_scratch_clear (&s->sc);
  g_clear_pointer (&s->cmd, hn_cmd_free);
  g_clear_pointer (&s->step_cmd, hn_cmd_free);
  hn_scratch_clear (&s->step_sc);
  g_free (s->host_logits);
  g_free (s);
}

HnMambaSession *
hn_mamba_session_new (HnMamba *m, int max_rows, int max_chunk, GError **error)
{
  const HnMambaHParams *h = &m->hp;
  if (max_rows < 1 || max_chunk < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba session: %d rows, chunks of %d tokens", max_rows,
                   max_chunk);
      return NULL;
    }
  g_autoptr (HnMambaSession) s = g_new0 (HnMambaSession, 1);
  s->m = m;
  s->max_rows = max_rows;
  s->max_chunk = max_chunk;
  s->conv = g_new0 (HnTensor *, h->n_layer);
  s->ssm = g_new0 (HnTensor *, h->n_layer);
  s->convB = g_new0 (HnTensor *, h->n_layer);
  s->convC = g_new0 (HnTensor *, h->n_layer);
  hn_scratch_init (&s->sc, m->ctx);
  hn_scratch_init (&s->step_sc, m->ctx);
  s->step_row = -1;
  int max_tok = MAX (max_chunk, max_rows);
  if (!work_init (&s->w, m, max_tok, max_rows, error))
    return NULL;
  /* RWKV: conv = the time-mix shift [rows, 1, C], convB = the channel-mix shift, ssm = WKV [rows, 3, A] */
  for (int l = 0; h->rwkv && l < h->n_layer; l++)
    if (!(s->conv[l] = hn_tensor_new_named (m->ctx, "rwkv.att_shift", HN_DTYPE_F32, 3,
                                            (gint64[]) { max_rows, 1, h->hidden }, error)) ||
        !(s->convB[l] = hn_tensor_new_named (m->ctx, "rwkv.ffn_shift", HN_DTYPE_F32, 3,
                                             (gint64[]) { max_rows, 1, h->hidden }, error)) ||
        !(s->ssm[l] = hn_tensor_new_named (m->ctx, "rwkv.wkv_state", HN_DTYPE_F32, 3,
                                           (gint64[]) { max_rows, 3, h->att_size }, error)))
      return NULL;
  for (int l = 0; !h->rwkv && l < h->n_layer; l++)
    {
      if (h->conv_kernel > 1 &&
          !(s->conv[l] = hn_tensor_new_named (m->ctx, "mamba.conv_state", HN_DTYPE_F32, 3,
                                              (gint64[]) { max_rows, h->conv_kernel - 1, h->inner }, error)))
        return NULL;
      if (!(s->ssm[l] = hn_tensor_new_named (m->ctx, "mamba.ssm_state", HN_DTYPE_F32, 3,
                                             (gint64[]) { max_rows, h->inner, h->state }, error)))
        return NULL;
      gint64 bcs[3] = { max_rows, h->conv_kernel - 1, bc_width (h) };
      if (h->mamba2 && h->conv_kernel > 1 &&
          (!(s->convB[l] = hn_tensor_new_named (m->ctx, "mamba.conv_state_B", HN_DTYPE_F32, 3, bcs, error)) ||
           !(s->convC[l] = hn_tensor_new_named (m->ctx, "mamba.conv_state_C", HN_DTYPE_F32, 3, bcs, error))))
        return NULL;
    }
  HnRwkvDims rd = rwkv_dims (h);
  s->bytes = hn_mamba_state_bytes_per_row (m) * (guint64) max_rows +
             (h->rwkv ? sizeof (float) * (guint64) max_tok * 2 * h->hidden + hn_rwkv_bufs_bytes (&rd, max_tok)
                      : sizeof (float) * (guint64) max_tok *
                          (2 * h->hidden + 7 * h->inner + h->dt_rank + 4 * bc_width (h))) +
             sizeof (float) * (guint64) max_rows * (h->hidden + h->vocab);
  s->host_logits = g_new (float, (gsize) max_rows * h->vocab);
  if (!(s->cmd = hn_cmd_new (m->ctx, error)) || !(s->step_cmd = hn_cmd_new (m->ctx, error)))
    return NULL;
  return g_steal_pointer (&s);
}

guint64
hn_mamba_session_get_bytes (HnMambaSession *s)
{
  return s->bytes;
}

void
hn_mamba_session_set_profiling (HnMambaSession *s, gboolean enabled)
{
  s->profiling = enabled;
  hn_cmd_set_profiling (s->cmd, enabled);
  hn_cmd_set_profiling (s->step_cmd, enabled);
  s->step_row = -1; /* re-recorded with (or without) timestamps */
}

/* The last one-token step (or, before any, the last other submission). */
const HnCmdProfileEntry *
hn_mamba_session_get_profile (HnMambaSession *s, guint *n_entries)
{
  return hn_cmd_get_profile (s->step_row >= 0 ? s->step_cmd : s->cmd, n_entries);
}

/* The states of rows [row0, row0 + n) as views kept in sc. */
static gboolean
state_views (HnMambaSession *s, HnScratch *sc, int row0, int n, LayerState *st, GError **error)
{
  for (int l = 0; l < s->m->hp.n_layer; l++)
    {
      st[l].conv = s->conv[l] ? hn_scratch_rows (sc, s->conv[l], row0, n, error) : NULL;
      st[l].ssm = hn_scratch_rows (sc, s->ssm[l], row0, n, error);
      st[l].convB = s->convB[l] ? hn_scratch_rows (sc, s->convB[l], row0, n, error) : NULL;
      st[l].convC = s->convC[l] ? hn_scratch_rows (sc, s->convC[l], row0, n, error) : NULL;
      if ((s->conv[l] && !st[l].conv) || !st[l].ssm || (s->convB[l] && !st[l].convB) || (s->convC[l] && !st[l].convC))
        return FALSE;
    }
  return TRUE;
}

static gboolean
check_ids (HnMambaSession *s, const int32_t *ids, int n, GError **error)
{
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= s->m->hp.vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%d)", ids[i],
                     s->m->hp.vocab);
        return FALSE;
      }
  return TRUE;
}

/* Runs B rows (from row0) of T tokens each through the model with their states; logits of each row's
 * last token into s->host_logits[0, B). */
static gboolean
session_run (HnMambaSession *s, int row0, int B, int T, const int32_t *ids, GError **error)
{
  HnMamba *m = s->m;
  g_autofree LayerState *st = g_new0 (LayerState, m->hp.n_layer);
  HnTensor *idv = hn_scratch_prefix (&s->sc, s->w.ids, 1, (gint64[]) { (gint64) B * T }, error);
  gboolean ok = idv && hn_tensor_upload_raw (idv, ids, sizeof (int32_t) * (gsize) B * T, error) &&
                state_views (s, &s->sc, row0, B, st, error) &&
                record_forward (m, s->cmd, &s->sc, &s->w, B, T, st, FALSE, error) &&
                hn_cmd_submit_wait (s->cmd, error);
  if (ok)
    {
      HnTensor *lg = hn_scratch_prefix (&s->sc, s->w.logits, 2, (gint64[]) { B, m->hp.vocab }, error);
      ok = lg && hn_tensor_download_f32 (lg, s->host_logits, (gsize) B * m->hp.vocab, error);
    }
  if (!ok)
    hn_cmd_reset (s->cmd);
  hn_scratch_reset (&s->sc);
  return ok;
}

/* One token of one row: the recorded step replayed (recorded on first use for that row; the
 * token goes to the ids buffer it reads, its states are read and written in place). */
static gboolean
session_step (HnMambaSession *s, int row, int32_t token, GError **error)
{
  HnMamba *m = s->m;
  if (s->step_row != row)
    {
      hn_cmd_reset (s->step_cmd);
      hn_scratch_reset (&s->step_sc);
      s->step_row = -1;
      g_autofree LayerState *st = g_new0 (LayerState, m->hp.n_layer);
      hn_cmd_set_reusable (s->step_cmd);
      s->step_ids = hn_scratch_prefix (&s->step_sc, s->w.ids, 1, (gint64[]) { 1 }, error);
      s->step_logits = s->step_ids ? hn_scratch_prefix (&s->step_sc, s->w.logits, 2, (gint64[]) { 1, m->hp.vocab }, error)
                                   : NULL;
      if (!s->step_logits || !state_views (s, &s->step_sc, row, 1, st, error) ||
          !record_forward (m, s->step_cmd, &s->step_sc, &s->w, 1, 1, st, FALSE, error) ||
          !hn_cmd_finish (s->step_cmd, error))
        {
          hn_cmd_reset (s->step_cmd);
          hn_scratch_reset (&s->step_sc);
          return FALSE;
        }
      s->step_row = row;
    }
  return hn_tensor_upload_raw (s->step_ids, &token, sizeof token, error) && hn_cmd_replay (s->step_cmd, 1, error) &&
         hn_tensor_download_f32 (s->step_logits, s->host_logits, (gsize) m->hp.vocab, error);
}

static gboolean
ops_reset (gpointer self, int n_rows, GError **error)
{
  HnMambaSession *s = self;
  if (n_rows < 1 || n_rows > s->max_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba session: %d rows (at most %d)", n_rows,
                   s->max_rows);
      return FALSE;
    }
  for (int l = 0; l < s->m->hp.n_layer; l++)
    if ((s->conv[l] && !hn_op_fill (s->cmd, s->conv[l], 0.0f, error)) || !hn_op_fill (s->cmd, s->ssm[l], 0.0f, error) ||
        (s->convB[l] && !hn_op_fill (s->cmd, s->convB[l], 0.0f, error)) ||
        (s->convC[l] && !hn_op_fill (s->cmd, s->convC[l], 0.0f, error)))
      {
        hn_cmd_reset (s->cmd);
        return FALSE;
      }
  /* RWKV: the WKV max row of each batch row starts at -1e38 (num = den = 0) */
  for (int l = 0; s->m->hp.rwkv && l < s->m->hp.n_layer; l++)
    for (int r = 0; r < s->max_rows; r++)
      {
        HnTensor *row = hn_scratch_rows (&s->sc, s->ssm[l], r, 1, error);
        HnTensor *rs = row ? hn_scratch_shape (&s->sc, row, 2, (gint64[]) { 3, s->m->hp.att_size }, error) : NULL;
        HnTensor *mx = rs ? hn_scratch_rows (&s->sc, rs, 2, 1, error) : NULL;
        if (!mx || !hn_op_fill (s->cmd, mx, HN_WKV4_MAX_INIT, error))
          {
            hn_cmd_reset (s->cmd);
            hn_scratch_reset (&s->sc);
            return FALSE;
          }
      }
  gboolean ok = hn_cmd_submit_wait (s->cmd, error);
  hn_scratch_reset (&s->sc);
  return ok;
}

static gboolean
ops_prefill (gpointer self, int row, const int32_t *ids, int n, float *logits, GError **error)
{
  HnMambaSession *s = self;
  if (row < 0 || row >= s->max_rows || n < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba prefill: row %d, %d tokens", row, n);
      return FALSE;
    }
  if (!check_ids (s, ids, n, error))
    return FALSE;
  for (int i = 0; i < n; i += s->max_chunk)
    if (!session_run (s, row, 1, MIN (s->max_chunk, n - i), ids + i, error))
      return FALSE;
  memcpy (logits, s->host_logits, sizeof (float) * s->m->hp.vocab);
  return TRUE;
}

static gboolean
ops_decode (gpointer self, int n, const int *rows, const int32_t *tokens, float *logits, GError **error)
{
  HnMambaSession *s = self;
  int V = s->m->hp.vocab;
  if (n < 1 || n > s->max_rows || !check_ids (s, tokens, n, error))
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba decode: %d rows", n);
      return FALSE;
    }
  gboolean in_order = TRUE;
  for (int i = 0; i < n; i++)
    {
      if (rows[i] < 0 || rows[i] >= s->max_rows)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba decode: row %d", rows[i]);
          return FALSE;
        }
      in_order &= rows[i] == rows[0] + i;
    }
  if (n == 1)
    {
      if (!session_step (s, rows[0], tokens[0], error))
        return FALSE;
      memcpy (logits, s->host_logits, sizeof (float) * V);
      return TRUE;
    }
  if (in_order)
    {
      /* one batch of n rows, T = 1 */
      if (!session_run (s, rows[0], n, 1, tokens, error))
        return FALSE;
      memcpy (logits, s->host_logits, sizeof (float) * (gsize) n * V);
      return TRUE;
    }
  for (int i = 0; i < n; i++)
    {
      if (!session_run (s, rows[i], 1, 1, tokens + i, error))
        return FALSE;
      memcpy (logits + (gsize) i * V, s->host_logits, sizeof (float) * V);
    }
  return TRUE;
}

static gboolean
ops_reorder (gpointer self, int n_rows, const int *src, GError **error)
{
  HnMambaSession *s = self;
  HnMamba *m = s->m;
  if (n_rows < 1 || n_rows > s->max_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba reorder: %d rows", n_rows);
      return FALSE;
    }
  gboolean ok = TRUE;
  for (int l = 0; ok && l < m->hp.n_layer; l++)
    for (int k = 0; ok && k < 4; k++)
      {
        HnTensor *t = k == 0 ? s->conv[l] : k == 1 ? s->ssm[l] : k == 2 ? s->convB[l] : s->convC[l];
        if (!t)
          continue;
        HnTensor *copy = hn_scratch_new (&s->sc, "mamba.reorder", HN_DTYPE_F32, t->ndim, t->shape, error);
        ok = copy && hn_op_copy (s->cmd, copy, t, error);
        for (int r = 0; ok && r < n_rows; r++)
          {
            if (src[r] < 0 || src[r] >= s->max_rows)
              {
                g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "mamba reorder: source row %d", src[r]);
                ok = FALSE;
                break;
              }
            HnTensor *from = hn_scratch_rows (&s->sc, copy, src[r], 1, error);
            HnTensor *to = from ? hn_scratch_rows (&s->sc, t, r, 1, error) : NULL;
            ok = to && hn_op_copy (s->cmd, to, from, error);
          }
      }
  ok = ok && hn_cmd_submit_wait (s->cmd, error);
  if (!ok)
    hn_cmd_reset (s->cmd);
  hn_scratch_reset (&s->sc);
  return ok;
}

static const HnLmOps mamba_ops = {
  .reset = ops_reset,
  .prefill = ops_prefill,
  .decode = ops_decode,
  .reorder = ops_reorder,
};

const HnLmOps *
hn_mamba_session_lm_ops (void)
{
  return &mamba_ops;
}

HnGenerateResult *
hn_mamba_generate (HnMamba *m, const HnGenerateOptions *opt, const int32_t *prompt, int n_prompt, HnDecodeFunc decode,
                   gpointer decode_data, HnTokenFunc on_token, gpointer token_data, GCancellable *cancellable,
                   GError **error)
{
  int rows = MAX (1, opt->num_beams);
  g_autoptr (HnMambaSession) s = hn_mamba_session_new (m, rows, 512, error);
  if (!s)
    return NULL;
  HnGenerateModel gm = { &mamba_ops, s, m->hp.vocab, decode, decode_data, on_token, token_data };
  return hn_generate_run (&gm, opt, prompt, n_prompt, cancellable, error);
}
