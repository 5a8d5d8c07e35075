/* The parameter table (names and shapes of the coherent-v9 tensors), fresh
 * initialisation with the documented rules, and model folders. */
#include "models/hierarchos-private.h"
#include "hn-error.h"
#include "hn-util.h"

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

/* ---- PRNG: xoshiro256** seeded through splitmix64 ---- */

void
hn_hier_rng_seed (HnHierRng *rng, guint64 seed)
{
  guint64 z = seed;
  for (int i = 0; i < 4; i++)
    {
      z += 0x9e3779b97f4a7c15ULL;
      guint64 x = z;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
      rng->s[i] = x ^ (x >> 31);
    }
}

static inline guint64
rotl (guint64 x, int k)
{
  return (x << k) | (x >> (64 - k));
}

guint64
hn_hier_rng_next (HnHierRng *r)
{
  guint64 result = rotl (r->s[1] * 5, 7) * 9;
  guint64 t = r->s[1] << 17;
  r->s[2] ^= r->s[0];
  r->s[3] ^= r->s[1];
  r->s[1] ^= r->s[2];
  r->s[0] ^= r->s[3];
  r->s[2] ^= t;
  r->s[3] = rotl (r->s[3], 45);
  return result;
}

double
hn_hier_rng_uniform (HnHierRng *r)
{
  return (double) (hn_hier_rng_next (r) >> 11) * (1.0 / 9007199254740992.0);
}

double
hn_hier_rng_normal (HnHierRng *r)
{
  double u1 = hn_hier_rng_uniform (r), u2 = hn_hier_rng_uniform (r);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt (-2.0 * log (u1)) * cos (2.0 * G_PI * u2);
}

/* Orthogonal init: Gaussian matrix, modified Gram-Schmidt over the shorter
 * dimension (rows orthonormal when rows <= cols, else columns), times gain. */
static void
init_orthogonal (float *w, int rows, int cols, float gain, HnHierRng *rng)
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
  HnHierRng rng;
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      float *w = m->params + p->offset;
      /* One stream per tensor, derived from the seed and the tensor's name, so
       * adding a tensor never shifts the others' values. */
      guint64 h = seed * 0x9e3779b97f4a7c15ULL;
      for (const char *c = p->name; *c; c++)
        h = (h ^ (guchar) *c) * 0x100000001b3ULL;
      hn_hier_rng_seed (&rng, h);
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
            w[j] = (float) ((2.0 * hn_hier_rng_uniform (&rng) - 1.0) * p->init_a);
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

/* ---- safetensors (fp32) ----
 * TEMPORARY internal reader/writer: replace with engine/io/safetensors.h once
 * that lands on main; it only handles what model.safetensors needs here. */


gboolean
hn_hier_write_safetensors (const char *path, GPtrArray *names, GPtrArray *shapes, GPtrArray *datas,
                           GHashTable *metadata, GError **error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  if (metadata)
    {
      json_builder_set_member_name (b, "__metadata__");
      json_builder_begin_object (b);
      g_autoptr (GList) keys = g_list_sort (g_hash_table_get_keys (metadata), (GCompareFunc) strcmp);
      for (GList *l = keys; l; l = l->next)
        {
          json_builder_set_member_name (b, l->data);
          json_builder_add_string_value (b, g_hash_table_lookup (metadata, l->data));
        }
      json_builder_end_object (b);
    }
  gsize off = 0;
  for (guint i = 0; i < names->len; i++)
    {
      const gint64 *shape = shapes->pdata[i];
      gsize numel = 1;
      json_builder_set_member_name (b, names->pdata[i]);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "dtype");
      json_builder_add_string_value (b, "F32");
      json_builder_set_member_name (b, "shape");
      json_builder_begin_array (b);
      for (int d = 1; d <= shape[0]; d++)
        {
          json_builder_add_int_value (b, shape[d]);
          numel *= (gsize) shape[d];
        }
      json_builder_end_array (b);
      json_builder_set_member_name (b, "data_offsets");
      json_builder_begin_array (b);
      json_builder_add_int_value (b, (gint64) off);
      json_builder_add_int_value (b, (gint64) (off + numel * 4));
      json_builder_end_array (b);
      json_builder_end_object (b);
      off += numel * 4;
    }
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, root);
  gsize hlen = 0;
  g_autofree char *header = json_generator_to_data (gen, &hlen);
  gsize padded = (hlen + 7) & ~(gsize) 7;
  gsize total = 8 + padded + off;
  g_autofree guint8 *buf = g_try_malloc (total);
  if (!buf)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, total);
      return FALSE;
    }
  guint64 le = GUINT64_TO_LE ((guint64) padded);
  memcpy (buf, &le, 8);
  memcpy (buf + 8, header, hlen);
  memset (buf + 8 + hlen, ' ', padded - hlen);
  gsize pos = 8 + padded;
  for (guint i = 0; i < names->len; i++)
    {
      const gint64 *shape = shapes->pdata[i];
      gsize numel = 1;
      for (int d = 1; d <= shape[0]; d++)
        numel *= (gsize) shape[d];
      memcpy (buf + pos, datas->pdata[i], numel * 4); /* little-endian hosts only */
      pos += numel * 4;
    }
  return hn_write_file_atomic (path, buf, total, error);
}

typedef struct {
  GMappedFile *map;
  JsonParser *parser;
  JsonObject *header;
  const guint8 *data;
  gsize data_len;
  char *path;
} StFile;

void
hn_hier_st_close (gpointer p)
{
  StFile *f = p;
  if (!f)
    return;
  if (f->map)
    g_mapped_file_unref (f->map);
  if (f->parser)
    g_object_unref (f->parser);
  g_free (f->path);
  g_free (f);
}

gpointer
hn_hier_st_open (const char *path, GError **error)
{
  StFile *f = g_new0 (StFile, 1);
  f->path = g_strdup (path);
  g_autoptr (GError) local = NULL;
  f->map = g_mapped_file_new (path, FALSE, &local);
  if (!f->map)
    {
      g_set_error (error, HN_ERROR, g_error_matches (local, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? HN_ERROR_NOT_FOUND : HN_ERROR_IO,
                   "%s: %s", path, local->message);
      hn_hier_st_close (f);
      return NULL;
    }
  gsize len = g_mapped_file_get_length (f->map);
  const guint8 *p = (const guint8 *) g_mapped_file_get_contents (f->map);
  guint64 hlen = 0;
  if (len < 8 || (memcpy (&hlen, p, 8), hlen = GUINT64_FROM_LE (hlen), hlen > len - 8) || hlen > 100 * 1024 * 1024)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: not a safetensors file (bad header length)", path);
      hn_hier_st_close (f);
      return NULL;
    }
  f->parser = json_parser_new ();
  if (!json_parser_load_from_data (f->parser, (const char *) p + 8, (gssize) hlen, &local) ||
      !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (f->parser)))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: bad safetensors header: %s", path,
                   local ? local->message : "not an object");
      hn_hier_st_close (f);
      return NULL;
    }
  f->header = json_node_get_object (json_parser_get_root (f->parser));
  f->data = p + 8 + hlen;
  f->data_len = len - 8 - hlen;
  return f;
}

const char *
hn_hier_st_metadata (gpointer p, const char *key)
{
  StFile *f = p;
  JsonNode *md = json_object_get_member (f->header, "__metadata__");
  if (!md || !JSON_NODE_HOLDS_OBJECT (md))
    return NULL;
  JsonNode *v = json_object_get_member (json_node_get_object (md), key);
  return v && json_node_get_value_type (v) == G_TYPE_STRING ? json_node_get_string (v) : NULL;
}

/* Copies tensor `name` (F32, exactly `numel` values with the given shape
 * product) into dst. */
gboolean
hn_hier_st_read (gpointer p, const char *name, const gint64 *shape, int ndim, float *dst, GError **error)
{
  StFile *f = p;
  JsonNode *n = json_object_get_member (f->header, name);
  if (!n || !JSON_NODE_HOLDS_OBJECT (n))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' is missing", f->path, name);
      return FALSE;
    }
  JsonObject *o = json_node_get_object (n);
  JsonNode *dt = json_object_get_member (o, "dtype");
  JsonNode *sh = json_object_get_member (o, "shape");
  JsonNode *of = json_object_get_member (o, "data_offsets");
  if (!dt || json_node_get_value_type (dt) != G_TYPE_STRING || strcmp (json_node_get_string (dt), "F32") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "%s: tensor '%s' is not F32", f->path, name);
      return FALSE;
    }
  if (!sh || !JSON_NODE_HOLDS_ARRAY (sh) || !of || !JSON_NODE_HOLDS_ARRAY (of))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' has no shape or offsets", f->path, name);
      return FALSE;
    }
  JsonArray *sa = json_node_get_array (sh), *oa = json_node_get_array (of);
  gboolean shape_ok = (int) json_array_get_length (sa) == ndim;
  gsize numel = 1;
  for (int d = 0; shape_ok && d < ndim; d++)
    {
      JsonNode *e = json_array_get_element (sa, (guint) d);
      shape_ok = json_node_get_value_type (e) == G_TYPE_INT64 && json_node_get_int (e) == shape[d];
      numel *= (gsize) shape[d];
    }
  if (!shape_ok)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' has the wrong shape for this config", f->path, name);
      return FALSE;
    }
  if (json_array_get_length (oa) != 2 ||
      json_node_get_value_type (json_array_get_element (oa, 0)) != G_TYPE_INT64 ||
      json_node_get_value_type (json_array_get_element (oa, 1)) != G_TYPE_INT64)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' has bad data_offsets", f->path, name);
      return FALSE;
    }
  gint64 a = json_array_get_int_element (oa, 0), b = json_array_get_int_element (oa, 1);
  if (a < 0 || b < a || (guint64) b > f->data_len || (guint64) (b - a) != numel * 4)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT, "%s: tensor '%s' data_offsets [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                   "] are out of range or do not match its shape", f->path, name, a, b);
      return FALSE;
    }
  memcpy (dst, f->data + a, numel * 4);
  for (gsize i = 0; i < numel; i++)
    if (!isfinite (dst[i]))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "%s: tensor '%s' contains non-finite values", f->path, name);
        return FALSE;
      }
  return TRUE;
}

gboolean
hn_hier_model_save_weights (HnHierModel *m, const char *path, GError **error)
{
  g_autoptr (GPtrArray) names = g_ptr_array_new ();
  g_autoptr (GPtrArray) shapes = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) datas = g_ptr_array_new ();
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      gint64 *sh = g_new (gint64, 3);
      sh[0] = p->ndim;
      sh[1] = p->shape[0];
      sh[2] = p->shape[1];
      g_ptr_array_add (names, p->name);
      g_ptr_array_add (shapes, sh);
      g_ptr_array_add (datas, m->params + p->offset);
    }
  g_autoptr (GHashTable) md = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (md, (gpointer) "format", (gpointer) "pt");
  g_hash_table_insert (md, (gpointer) "architecture_revision", m->cfg.architecture_revision);
  g_hash_table_insert (md, (gpointer) "architecture_contract_sha256", m->contract_sha256);
  g_hash_table_insert (md, (gpointer) "model_type", (gpointer) "hierarchos");
  return hn_hier_write_safetensors (path, names, shapes, datas, md, error);
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
  gpointer st = hn_hier_st_open (path, error);
  if (!st)
    return FALSE;
  gboolean ok = TRUE;
  const char *rev = hn_hier_st_metadata (st, "architecture_revision");
  const char *sha = hn_hier_st_metadata (st, "architecture_contract_sha256");
  if (!rev || strcmp (rev, m->cfg.architecture_revision) != 0 || !sha || strcmp (sha, m->contract_sha256) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CORRUPT,
                   "%s: weights were saved for another architecture contract (revision %s, sha256 %s; config has %s, %s)",
                   path, rev ? rev : "(none)", sha ? sha : "(none)", m->cfg.architecture_revision, m->contract_sha256);
      ok = FALSE;
    }
  for (guint i = 0; ok && i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      ok = hn_hier_st_read (st, p->name, p->shape, p->ndim, m->params + p->offset, error);
    }
  hn_hier_st_close (st);
  return ok;
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
