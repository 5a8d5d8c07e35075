/* The parameter table (names and shapes of the coherent-v9 tensors), fresh
 * initialisation with the documented rules, and model folders. */
#include "hierarchos/hierarchos-private.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "formats/safetensors.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

enum { INIT_ZERO, INIT_CONST, INIT_UNIFORM, INIT_NORMAL, INIT_ORTHO, INIT_MIXPOW, INIT_W0 };

static int
lora_rank (gint64 width, double scale)
{
  if (width < 128)
    return 8;
  long r = lround (scale * sqrt ((double) width) / 32.0);
  return (int) MAX (r, 1) * 32;
}

static void
param_free (gpointer p)
{
  HnHierParam *hp = p;
  g_free (hp->name);
  g_free (hp);
}

static HnHierParam *
add (HnHierModel *m, const char *name, gint64 rows, gint64 cols, int init, float a, gboolean finetune)
{
  HnHierParam *p = g_new0 (HnHierParam, 1);
  p->name = g_strdup (name);
  p->ndim = cols > 0 ? 2 : 1;
  p->shape[0] = rows;
  p->shape[1] = cols > 0 ? cols : 1;
  p->numel = (gsize) rows * (gsize) MAX (cols, 1);
  p->offset = m->n_params;
  p->init = init;
  p->init_a = a;
  p->trainable = TRUE;
  p->finetune = finetune;
  p->decay = cols > 0;
  m->n_params += p->numel;
  g_ptr_array_add (m->param_list, p);
  g_hash_table_insert (m->by_name, p->name, p);
  return p;
}

static void
add_cell (HnHierModel *m, const char *pre, int W, int rw, int ra, int rg)
{
  g_autofree char *b = NULL;
#define NAME(s) (g_free (b), b = g_strdup_printf ("%s.%s", pre, s))
  const double inv = 1.0 / sqrt ((double) W);
  add (m, NAME ("x_r"), W, 0, INIT_MIXPOW, 0.2f, FALSE);
  add (m, NAME ("x_w"), W, 0, INIT_MIXPOW, 0.9f, FALSE);
  add (m, NAME ("x_k"), W, 0, INIT_MIXPOW, 0.7f, FALSE);
  add (m, NAME ("x_v"), W, 0, INIT_MIXPOW, 0.7f, FALSE);
  add (m, NAME ("x_a"), W, 0, INIT_MIXPOW, 0.9f, FALSE);
  add (m, NAME ("x_g"), W, 0, INIT_MIXPOW, 0.2f, FALSE);
  add (m, NAME ("w1"), W, rw, INIT_ZERO, 0, TRUE);
  add (m, NAME ("w2"), rw, W, INIT_ORTHO, 0.1f, TRUE);
  add (m, NAME ("w0"), W, 0, INIT_W0, 0, FALSE);
  add (m, NAME ("a1"), W, ra, INIT_ZERO, 0, TRUE);
  add (m, NAME ("a2"), ra, W, INIT_ORTHO, 0.1f, TRUE);
  add (m, NAME ("a0"), W, 0, INIT_ZERO, 0, FALSE);
  add (m, NAME ("g1"), W, rg, INIT_ZERO, 0, TRUE);
  add (m, NAME ("g2"), rg, W, INIT_ORTHO, 0.1f, TRUE);
  add (m, NAME ("k_k"), W, 0, INIT_CONST, 0.85f, FALSE);
  add (m, NAME ("k_a"), W, 0, INIT_CONST, 1.02f, FALSE);
  add (m, NAME ("r_k"), W, 0, INIT_CONST, -0.04f, FALSE);
  add (m, NAME ("x_k_cm"), W, 0, INIT_MIXPOW, 1.0f, FALSE);
  add (m, NAME ("ln1.weight"), W, 0, INIT_CONST, 1.0f, FALSE);
  add (m, NAME ("ln1.bias"), W, 0, INIT_ZERO, 0, FALSE);
  add (m, NAME ("ln2.weight"), W, 0, INIT_CONST, 1.0f, FALSE);
  add (m, NAME ("ln2.bias"), W, 0, INIT_ZERO, 0, FALSE);
  /* RWKV-7 layer scale ((1 + layer_id) / n_layer)^0.7 for layer 0 of 2. */
  add (m, NAME ("ln_x.weight"), W, 0, INIT_CONST, (float) pow (0.5, 0.7), FALSE);
  add (m, NAME ("ln_x.bias"), W, 0, INIT_ZERO, 0, FALSE);
  add (m, NAME ("receptance.weight"), W, W, INIT_UNIFORM, (float) (0.5 * inv), FALSE);
  add (m, NAME ("key.weight"), W, W, INIT_UNIFORM, (float) (0.05 * inv), FALSE);
  add (m, NAME ("value.weight"), W, W, INIT_UNIFORM, (float) (0.5 * inv), FALSE);
  add (m, NAME ("output.weight"), W, W, INIT_UNIFORM, (float) (0.01 * inv), FALSE);
  add (m, NAME ("key_cm.weight"), 4 * W, W, INIT_ORTHO, 2.0f, FALSE);
  add (m, NAME ("value_cm.weight"), W, 4 * W, INIT_UNIFORM, (float) (0.01 * inv), FALSE);
#undef NAME
}

static void
add_adapter (HnHierModel *m, const char *pre, int in, int rank, int out, float bias)
{
  g_autofree char *d = g_strdup_printf ("%s.down.weight", pre);
  g_autofree char *u = g_strdup_printf ("%s.up.weight", pre);
  g_autofree char *b = g_strdup_printf ("%s.bias", pre);
  add (m, d, rank, in, INIT_UNIFORM, (float) (1.0 / sqrt ((double) in)), TRUE);
  add (m, u, out, rank, INIT_ZERO, 0, TRUE);
  add (m, b, out, 0, INIT_CONST, bias, TRUE);
}

HnHierModel *
hn_hier_model_new (const HnHierConfig *cfg, GError **error)
{
  if (!hn_hier_config_validate (cfg, error))
    return NULL;
  if (cfg->h_rwkv_head_size > 1024 || cfg->l_rwkv_head_size > 1024)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "RWKV head sizes above 1024 are not supported");
      return NULL;
    }
  HnHierModel *m = g_new0 (HnHierModel, 1);
  hn_hier_config_copy (&m->cfg, cfg);
  m->contract_sha256 = hn_hier_config_sha256 (cfg);
  m->param_list = g_ptr_array_new_with_free_func (param_free);
  m->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  m->C = (int) cfg->context_dim;
  m->H = (int) cfg->h_hidden;
  m->L = (int) cfg->l_hidden;
  m->P = (int) cfg->persistent_dim;
  m->S = (int) cfg->ltm_slots;
  m->K = (int) cfg->ltm_key_dim;
  m->Vd = (int) cfg->ltm_val_dim;
  m->topk = (int) cfg->ltm_topk;
  m->V = (int) cfg->vocab_size;
  m->rank = (int) cfg->token_adapter_rank;
  m->rw = m->ra = lora_rank (m->H, 2.5);
  m->rg = lora_rank (m->H, 5.0);
  m->rwl = m->ral = lora_rank (m->L, 2.5);
  m->rgl = lora_rank (m->L, 5.0);
  int C = m->C, H = m->H, L = m->L;
  double invC = 1.0 / sqrt ((double) C);

  add (m, "lm_head.weight", m->V, C, INIT_UNIFORM, (float) invC, FALSE);
  add_adapter (m, "h_deepembed_adapter", C, m->rank, 4 * H, 1.0f);
  add_adapter (m, "l_deepembed_adapter", C, m->rank, 4 * L, 1.0f);
  add_adapter (m, "rosa_adapter", C, m->rank, C, 0.0f);
  add (m, "rosa_gate_logit", 1, 0, INIT_CONST, -1.0f, TRUE);
  add (m, "rosa_router.weight", 1, C, INIT_ZERO, 0, TRUE);
  add (m, "rosa_router.bias", 1, 0, INIT_ZERO, 0, TRUE);
  add (m, "ltm_gate_logit", 1, 0, INIT_CONST, -2.0f, TRUE);
  add (m, "ltm_router.weight", 1, C, INIT_ZERO, 0, TRUE);
  add (m, "ltm_router.bias", 1, 0, INIT_ZERO, 0, TRUE);
  HnHierParam *ws = add (m, "memory_gate_warmup_step", 1, 0, INIT_ZERO, 0, FALSE);
  ws->trainable = FALSE;
  if (m->P > 0)
    add (m, "persistent", m->P, 0, INIT_NORMAL, 0.02f, FALSE);
  add (m, "ltm.keys", m->S, m->K, INIT_NORMAL, 0.02f, TRUE);
  add (m, "ltm.vals", m->S, m->Vd, INIT_ORTHO, 0.02f, TRUE);
  HnHierParam *fv = add (m, "ltm.fast_vals", m->S, m->Vd, INIT_ZERO, 0, FALSE);
  fv->trainable = FALSE;
  fv->decay = FALSE;
  add (m, "qproj.weight", m->K, 2 * C, INIT_UNIFORM, (float) (1.0 / sqrt (2.0 * C)), FALSE);
  int in_w = C + m->P + m->topk * m->Vd;
  add (m, "in_proj.weight", C, in_w, INIT_UNIFORM, (float) (1.0 / sqrt ((double) in_w)), FALSE);
  add (m, "in_proj.bias", C, 0, INIT_ZERO, 0, FALSE);
  add (m, "l_feedback_proj.weight", H, L, INIT_NORMAL, 0.01f, FALSE);
  add_cell (m, "h_rnn", H, m->rw, m->ra, m->rg);
  add (m, "h_to_context.weight", C, H, INIT_UNIFORM, (float) (1.0 / sqrt ((double) H)), FALSE);
  add (m, "h_to_context.bias", C, 0, INIT_ZERO, 0, FALSE);
  add (m, "h_halt_proj.weight", 1, H, INIT_UNIFORM, (float) (1.0 / sqrt ((double) H)), FALSE);
  add (m, "h_halt_proj.bias", 1, 0, INIT_CONST,
       (float) -log ((double) MAX (cfg->max_h_steps, 2) - 1.0), FALSE);
  add (m, "l_input_proj.weight", L, 2 * C, INIT_UNIFORM, (float) (1.0 / sqrt (2.0 * C)), FALSE);
  add (m, "l_input_proj.bias", L, 0, INIT_ZERO, 0, FALSE);
  add_cell (m, "l_rnn", L, m->rwl, m->ral, m->rgl);
  add (m, "context_drift_proj.weight", C, L, INIT_NORMAL, 0.01f, FALSE);
  add (m, "l_to_out.weight", C, L, INIT_UNIFORM, (float) (1.0 / sqrt ((double) L)), FALSE);
  add (m, "l_to_out.bias", C, 0, INIT_ZERO, 0, FALSE);
  add (m, "out_norm.weight", C, 0, INIT_CONST, 1.0f, FALSE);
  add (m, "out_norm.bias", C, 0, INIT_ZERO, 0, FALSE);

  m->params = g_try_malloc0_n (m->n_params, sizeof (float));
  if (!m->params)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "cannot allocate %zu parameters", m->n_params);
      hn_hier_model_free (m);
      return NULL;
    }
  return m;
}

void
hn_hier_model_free (HnHierModel *m)
{
  if (!m)
    return;
  hn_hier_config_clear (&m->cfg);
  g_free (m->contract_sha256);
  if (m->by_name)
    g_hash_table_unref (m->by_name);
  if (m->param_list)
    g_ptr_array_unref (m->param_list);
  g_free (m->params);
  g_free (m);
}

HnHierParam *
hn_hier_model_param (HnHierModel *m, const char *name)
{
  return g_hash_table_lookup (m->by_name, name);
}

float *
hn_hier_model_data (HnHierModel *m, const char *name)
{
  HnHierParam *p = hn_hier_model_param (m, name);
  g_return_val_if_fail (p != NULL, NULL);
  return m->params + p->offset;
}

double
hn_hier_rng_normal (HnRng *r)
{
  double u1 = hn_rng_uniform (r), u2 = hn_rng_uniform (r);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt (-2.0 * log (u1)) * cos (2.0 * G_PI * u2);
}

/* Orthogonal init: Gaussian matrix, modified Gram-Schmidt over the shorter
 * dimension (rows orthonormal when rows <= cols, else columns), times gain. */
static void
init_orthogonal (float *w, int rows, int cols, float gain, HnRng *rng)
{
  gboolean by_rows = rows <= cols;
  int nv = by_rows ? rows : cols, len = by_rows ? cols : rows;
  double *a = g_new (double, (gsize) nv * len);
  for (gsize i = 0; i < (gsize) nv * len; i++)
    a[i] = hn_hier_rng_normal (rng);
  for (int v = 0; v < nv; v++)
    {
      double *x = a + (gsize) v * len;
      for (int pass = 0; pass < 2; pass++) /* re-orthogonalise once for stability */
        for (int u = 0; u < v; u++)
          {
            const double *y = a + (gsize) u * len;
            double d = 0;
            for (int i = 0; i < len; i++)
              d += x[i] * y[i];
            for (int i = 0; i < len; i++)
              x[i] -= d * y[i];
          }
      double n = 0;
      for (int i = 0; i < len; i++)
        n += x[i] * x[i];
      n = sqrt (n);
      for (int i = 0; i < len; i++)
        x[i] = n > 0 ? x[i] / n : 0;
    }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      w[(gsize) r * cols + c] = (float) (gain * (by_rows ? a[(gsize) r * len + c] : a[(gsize) c * len + r]));
  g_free (a);
}

void
hn_hier_model_init_weights (HnHierModel *m, guint64 seed)
{
  HnRng rng;
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      float *w = m->params + p->offset;
      /* One stream per tensor, derived from the seed and the tensor's name, so
       * adding a tensor never shifts the others' values. */
      guint64 h = seed * 0x9e3779b97f4a7c15ULL;
      for (const char *c = p->name; *c; c++)
        h = (h ^ (guchar) *c) * 0x100000001b3ULL;
      hn_rng_seed (&rng, h);
      gsize n = p->numel;
      switch (p->init)
        {
        case INIT_ZERO:
          memset (w, 0, n * sizeof (float));
          break;
        case INIT_CONST:
          for (gsize j = 0; j < n; j++)
            w[j] = p->init_a;
          break;
        case INIT_UNIFORM:
          for (gsize j = 0; j < n; j++)
            w[j] = (float) ((2.0 * hn_rng_uniform (&rng) - 1.0) * p->init_a);
          break;
        case INIT_NORMAL:
          for (gsize j = 0; j < n; j++)
            w[j] = (float) (hn_hier_rng_normal (&rng) * p->init_a);
          break;
        case INIT_ORTHO:
          init_orthogonal (w, (int) p->shape[0], (int) p->shape[1], p->init_a, &rng);
          break;
        case INIT_MIXPOW:
          /* RWKV-7: 1 - (i / W)^(p * ratio_1_to_almost0), ratio 1 at layer 0. */
          for (gsize j = 0; j < n; j++)
            w[j] = (float) (1.0 - pow ((double) j / (double) n, p->init_a));
          break;
        case INIT_W0:
          /* RWKV-7 decay speed -7 + 5 (i / (W - 1))^0.85, plus 0.5. */
          for (gsize j = 0; j < n; j++)
            w[j] = (float) (-7.0 + 5.0 * pow (n > 1 ? (double) j / (double) (n - 1) : 0.0, 0.85) + 0.5);
          break;
        default:
          g_assert_not_reached ();
        }
    }
}

/* ---- weights through engine/formats/safetensors ---- */

gboolean
hn_hier_model_save_weights (HnHierModel *m, const char *path, GError **error)
{
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      if (!hn_safetensors_writer_add (w, p->name, HN_ST_DTYPE_F32, (guint) p->ndim, p->shape, m->params + p->offset,
                                      p->numel * sizeof (float), FALSE, error))
        return FALSE;
    }
  hn_safetensors_writer_set_metadata (w, "format", "pt");
  hn_safetensors_writer_set_metadata (w, "model_type", "hierarchos");
  hn_safetensors_writer_set_metadata (w, "architecture_revision", m->cfg.architecture_revision);
  hn_safetensors_writer_set_metadata (w, "architecture_contract_sha256", m->contract_sha256);
  return hn_safetensors_writer_write_file (w, path, error);
}

gboolean
hn_hier_model_save (HnHierModel *m, const char *dir, GError **error)
{
  if (!hn_mkdir_p (dir, error))
    return FALSE;
  g_autofree char *cp = g_build_filename (dir, HN_HIER_CONFIG_FILE, NULL);
  g_autofree char *wp = g_build_filename (dir, HN_HIER_WEIGHTS_FILE, NULL);
  /* Weights first: a folder whose config exists always has matching weights
   * (the weights carry the contract hash and loading checks it). */
  return hn_hier_model_save_weights (m, wp, error) && hn_hier_config_save (&m->cfg, cp, error);
}

gboolean
hn_hier_model_load_weights (HnHierModel *m, const char *path, GError **error)
{
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, error);
  if (!st)
    return FALSE;
  const char *rev = hn_safetensors_get_metadata (st, "architecture_revision");
  const char *sha = hn_safetensors_get_metadata (st, "architecture_contract_sha256");
  if (!rev || strcmp (rev, m->cfg.architecture_revision) != 0 || !sha || strcmp (sha, m->contract_sha256) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: weights were saved for another architecture contract (revision %s, sha256 %s; config has %s, %s)",
                   path, rev ? rev : "(none)", sha ? sha : "(none)", m->cfg.architecture_revision, m->contract_sha256);
      return FALSE;
    }
  if (hn_safetensors_get_n_tensors (st) != m->param_list->len)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: %u tensors, the config needs %u", path,
                   hn_safetensors_get_n_tensors (st), m->param_list->len);
      return FALSE;
    }
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      const HnSafetensorInfo *info = hn_safetensors_require (st, p->name, error);
      if (!info)
        return FALSE;
      if (info->dtype != HN_ST_DTYPE_F32 || (int) info->ndim != p->ndim || info->shape[0] != p->shape[0] ||
          (p->ndim == 2 && info->shape[1] != p->shape[1]))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' must be F32, %d-D, %" G_GINT64_FORMAT
                       " x %" G_GINT64_FORMAT " (the config's geometry)", path, p->name, p->ndim, p->shape[0], p->shape[1]);
          return FALSE;
        }
      float *dst = m->params + p->offset;
      if (!hn_safetensor_info_to_f32 (info, dst, error))
        return FALSE;
      for (gsize j = 0; j < p->numel; j++)
        if (!isfinite (dst[j]))
          {
            g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "%s: tensor '%s' contains non-finite values", path, p->name);
            return FALSE;
          }
    }
  return TRUE;
}

HnHierModel *
hn_hier_model_load (const char *dir, GError **error)
{
  g_autofree char *cp = g_build_filename (dir, HN_HIER_CONFIG_FILE, NULL);
  g_autofree char *wp = g_build_filename (dir, HN_HIER_WEIGHTS_FILE, NULL);
  HnHierConfig cfg;
  if (!hn_hier_config_load (&cfg, cp, error))
    return NULL;
  HnHierModel *m = hn_hier_model_new (&cfg, error);
  hn_hier_config_clear (&cfg);
  if (!m)
    return NULL;
  if (!hn_hier_model_load_weights (m, wp, error))
    {
      hn_hier_model_free (m);
      return NULL;
    }
  return m;
}

gboolean
hn_hier_copy_tokenizer_files (const char *tokenizer_dir, const char *out_dir, GError **error)
{
  static const char *const files[] = { "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                                       "tokenizer.model", "special_tokens_map.json", "added_tokens.json",
                                       "vocab.txt", "generation_config.json", NULL };
  int copied = 0;
  if (!hn_mkdir_p (out_dir, error))
    return FALSE;
  for (int i = 0; files[i]; i++)
    {
      g_autofree char *src = g_build_filename (tokenizer_dir, files[i], NULL);
      g_autofree char *dst = g_build_filename (out_dir, files[i], NULL);
      if (g_strcmp0 (src, dst) == 0 || !g_file_test (src, G_FILE_TEST_IS_REGULAR))
        continue;
      g_autofree char *data = NULL;
      gsize len = 0;
      g_autoptr (GError) local = NULL;
      if (!g_file_get_contents (src, &data, &len, &local))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot read %s: %s", src, local->message);
          return FALSE;
        }
      if (!hn_write_file_atomic (dst, data, len, error))
        return FALSE;
      copied++;
    }
  if (copied == 0 && g_strcmp0 (tokenizer_dir, out_dir) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s: no tokenizer files (tokenizer.json, vocab.json + merges.txt, "
                   "tokenizer.model, vocab.txt) found", tokenizer_dir);
      return FALSE;
    }
  return TRUE;
}
