/* The decoder graph: loading a model, activations, and recording the
 * embedding, one layer (every block wiring and quirk) and the head into an
 * HnCmd. A forward is one recording and one submit. */
#include "base/hn-error.h"
#include "transformer/transformer-private.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

/* ---------------------------------------------------------------- loading */

/* Weights stay in their stored dtype on the device, so their bytes on disk
 * are what they need there. A model that cannot fit is refused with the
 * numbers before the first upload, not after minutes of copying. */
static gboolean
check_fits (HnTransformer *m, HnSafetensors *st, GError **error)
{
  guint64 need = 0;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    need += hn_safetensors_get_nth (st, i)->nbytes;
  guint64 have = hn_vk_context_get_capacity (m->ctx);
  if (have == 0 || need <= have)
    return TRUE;
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (m->ctx);
  g_autofree char *need_s = g_format_size_full (need, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *have_s = g_format_size_full (have, G_FORMAT_SIZE_IEC_UNITS);
  g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
               "%s: the model's weights alone need %s (%" G_GUINT64_FORMAT " bytes) of device memory, but %s has %s (%"
               G_GUINT64_FORMAT " bytes): choose a device with more memory or a smaller model (a bf16/f16 copy of an "
               "f32 model needs half)",
               m->dir, need_s, need, info->name, have_s, have);
  return FALSE;
}

/* Layers [layer0, layer1) of the model (layer1 < 0: up to the last). */
static HnTransformer *
load_stage (HnVkContext *ctx, const char *model_dir, int layer0, int layer1, HnDType quant, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return NULL;
  HnTransformer *m = g_new0 (HnTransformer, 1);
  m->ctx = hn_vk_context_ref (ctx);
  m->dir = g_strdup (model_dir);
  m->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  m->config = g_steal_pointer (&cfg);
  m->quant = quant;
  if (!hn_transformer_hparams_resolve (&m->hp, m->config, error))
    {
      hn_transformer_free (m);
      return NULL;
    }
  m->layer0 = layer0;
  m->layer1 = layer1 < 0 ? m->hp.n_layer : layer1;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (model_dir, error);
  /* a whole model must fit its device; a pipeline stage was checked by the split plan */
  gboolean whole = m->layer0 == 0 && m->layer1 == m->hp.n_layer;
  /* quantized weights need far less than the files hold: allocation failures say it then */
  if (!st || (whole && m->quant == HN_DTYPE_F32 && !check_fits (m, st, error)) || !hn_transformer_weights_load (m, st, error))
    {
      hn_transformer_free (m);
      return NULL;
    }
  return m;
}

HnTransformer *
hn_transformer_load (HnVkContext *ctx, const char *model_dir, GError **error)
{
  return load_stage (ctx, model_dir, 0, -1, HN_DTYPE_F32, error);
}

HnTransformer *
hn_transformer_load_quantized (HnVkContext *ctx, const char *model_dir, HnDType quant, GError **error)
{
  if (quant != HN_DTYPE_F32 && !hn_dtype_is_quant (quant))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %s is not a quantized weight format", model_dir,
                   hn_dtype_name (quant));
      return NULL;
    }
  return load_stage (ctx, model_dir, 0, -1, quant, error);
}

gboolean
hn_transformer_plan_split (const char *model_dir, const guint64 *capacity, guint n_devices, int *first_layer,
                           guint64 *stage_bytes, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return FALSE;
  HnTransformerHParams hp = { 0 };
  if (!hn_transformer_hparams_resolve (&hp, cfg, error))
    {
      hn_transformer_hparams_clear (&hp);
      return FALSE;
    }
  int L = hp.n_layer;
  gboolean ok = FALSE;
  g_autofree guint64 *layer = g_new0 (guint64, MAX (L, 1));
  g_autoptr (HnSafetensors) st = NULL;
  if (n_devices == 0 || (int) n_devices > L)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: %d layers cannot be split over %u devices",
                   model_dir, L, n_devices);
      goto out;
    }
  if (!(st = hn_safetensors_open (model_dir, error)))
    goto out;
  guint64 embed = 0, head = 0, total = 0, cap_total = 0;
  hn_transformer_weights_measure (&hp, st, layer, &embed, &head);
  for (int i = 0; i < L; i++)
    total += layer[i];
  total += embed + head;
  for (guint d = 0; d < n_devices; d++)
    cap_total += MAX (capacity[d], 1);
  /* boundary d goes where the bytes before it come closest to the device
   * capacities' share of the whole; every stage keeps at least one layer */
  first_layer[0] = 0;
  first_layer[n_devices] = L;
  guint64 cap_before = 0;
  for (guint d = 1; d < n_devices; d++)
    {
      cap_before += MAX (capacity[d - 1], 1);
      double target = (double) total * (double) cap_before / (double) cap_total;
      int lo = first_layer[d - 1] + 1, hi = L - (int) (n_devices - d), best = lo;
      double best_err = G_MAXDOUBLE, before = (double) embed;
      for (int i = 0; i < lo; i++)
        before += (double) layer[i];
      for (int i = lo; i <= hi; i++)
        {
          if (fabs (before - target) < best_err)
            {
              best_err = fabs (before - target);
              best = i;
            }
          before += (double) layer[i];
        }
      first_layer[d] = best;
    }
  for (guint d = 0; d < n_devices; d++)
    {
      guint64 b = (d == 0 ? embed : 0) + (d + 1 == n_devices ? head : 0);
      for (int i = first_layer[d]; i < first_layer[d + 1]; i++)
        b += layer[i];
      stage_bytes[d] = b;
      if (capacity[d] > 0 && b > capacity[d])
        {
          g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
                       "%s: layers %d-%d need %.1f MB of weights, more than device %u's %.1f MB; add a device",
                       model_dir, first_layer[d], first_layer[d + 1] - 1, b / 1e6, d, capacity[d] / 1e6);
          goto out;
        }
    }
  ok = TRUE;
out:
  hn_transformer_hparams_clear (&hp);
  return ok;
}

HnTransformer *
hn_transformer_load_split (HnVkContext *const *ctxs, guint n_devices, const char *model_dir, GError **error)
{
  if (n_devices == 1)
    return hn_transformer_load (ctxs[0], model_dir, error);
  g_autofree guint64 *cap = g_new0 (guint64, MAX (n_devices, 1));
  g_autofree guint64 *bytes = g_new0 (guint64, MAX (n_devices, 1));
  g_autofree int *first = g_new0 (int, n_devices + 1);
  for (guint d = 0; d < n_devices; d++)
    cap[d] = hn_vk_context_get_capacity (ctxs[d]); /* the largest device-local heap, or the memory limit */
  if (!hn_transformer_plan_split (model_dir, cap, n_devices, first, bytes, error))
    return NULL;
  HnTransformer *head = NULL, **link = &head;
  for (guint d = 0; d < n_devices; d++)
    {
      HnTransformer *m = load_stage (ctxs[d], model_dir, first[d], first[d + 1], HN_DTYPE_F32, error);
      if (!m)
        {
          g_prefix_error (error, "pipeline stage %u (layers %d-%d): ", d, first[d], first[d + 1] - 1);
          hn_transformer_free (head);
          return NULL;
        }
      *link = m;
      link = &m->next;
    }
  return head;
}

guint
hn_transformer_get_n_stages (HnTransformer *m)
{
  guint n = 0;
  for (; m; m = m->next)
    n++;
  return n;
}

HnTransformer *
hn_transformer_get_stage (HnTransformer *m, guint i, int *layer0, int *layer1)
{
  for (; m && i > 0; i--)
    m = m->next;
  if (m && layer0)
    *layer0 = m->layer0;
  if (m && layer1)
    *layer1 = m->layer1;
  return m;
}

gboolean
hn_transformer_require_whole (HnTransformer *m, const char *what, GError **error)
{
  if (!m->next && m->layer0 == 0 && m->layer1 == m->hp.n_layer)
    return TRUE;
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
               "%s runs on one device; a model split across devices (--device-indices) is only used for generation",
               what);
  return FALSE;
}

void
hn_transformer_free (HnTransformer *m)
{
  if (!m)
    return;
  g_clear_pointer (&m->next, hn_transformer_free);
  for (int i = 0; m->w.layers && i < m->hp.n_layer; i++)
    {
      g_free (m->w.layers[i].experts); /* the tensors themselves are in m->owned */
      g_free (m->w.layers[i].expert_biases);
    }
  g_free (m->w.layers);
  g_clear_pointer (&m->owned, g_ptr_array_unref);
  if (m->origins)
    for (guint i = 0; i < m->origins->len; i++)
      {
        HnWeightOrigin *o = &g_array_index (m->origins, HnWeightOrigin, i);
        g_free (o->src);
        g_free (o->rows);
      }
  g_clear_pointer (&m->origins, g_array_unref);
  hn_transformer_hparams_clear (&m->hp);
  g_clear_pointer (&m->config, hn_model_config_free);
  g_clear_pointer (&m->ctx, hn_vk_context_unref);
  g_free (m->dir);
  g_free (m->nonfinite_tensor);
  g_free (m);
}

const HnTransformerHParams *
hn_transformer_get_hparams (HnTransformer *m)
{
  return &m->hp;
}

HnVkContext *
hn_transformer_get_context (HnTransformer *m)
{
  return m->ctx;
}

guint64
hn_transformer_get_weight_bytes (HnTransformer *m)
{
  return m->weight_bytes + (m->next ? hn_transformer_get_weight_bytes (m->next) : 0);
}

const HnTransformerWeights *
hn_transformer_get_weights (HnTransformer *m)
{
  return &m->w;
}

const HnWeightOrigin *
hn_transformer_get_weight_origins (HnTransformer *m, guint *n_origins)
{
  *n_origins = m->origins ? m->origins->len : 0;
  return m->origins ? (const HnWeightOrigin *) m->origins->data : NULL;
}

const char *
hn_transformer_get_dir (HnTransformer *m)
{
  return m->dir;
}

const char *
hn_transformer_get_nonfinite_weight (HnTransformer *m, guint64 *n_values)
{
  /* a pipeline's later stages hold the other layers */
  for (HnTransformer *s = m; s; s = s->next)
    if (s->nonfinite_tensor)
      {
        if (n_values)
          *n_values = s->nonfinite_values;
        return s->nonfinite_tensor;
      }
  return NULL;
}

/* ---------------------------------------------------------------- activations */

struct ActsPriv {
  HnTransformerActs pub;
  GPtrArray *views; /* views made while recording; dropped after the submit */
  /* MoE scratch (NULL for dense models): router logits / routing weights [N, E], chosen experts [N, k],
   * one column [N, 1], one expert's output [N, C] */
  HnTensor *route, *route_w, *topi, *col, *expert_out;
  /* sparse expert execution: slots grouped by expert (offsets [E + 1], order [N * k]) and the
   * routed experts' gate, up, activation [N * k, F] and output [N * k, C] per slot */
  HnTensor *moe_offs, *moe_order, *moe_tiles, *moe_g, *moe_u, *moe_act, *moe_y;
  /* MLA scratch (NULL unless deepseek): q/kv latent [N, max(q_lora, kv_lora)], per-head key nope part
   * [N, H * nope], the shared rotary key [N, rope] and its copy per head [N, H * rope] */
  HnTensor *mla_lat, *mla_knope, *mla_kr, *mla_krb;
  /* f16 inputs of the cooperative-matrix-2 GEMMs (NULL without that kernel): the pre-norms'
   * output [N, C] and the gate's activation [N, Fu], written f16 by rmsnorm and glu so that no
   * f16 copy runs before the projections (f16_input) */
  HnTensor *h16, *act16;
  HnTensor *head_tmp; /* [max_logit_rows, C]: the head transform's dense output (hp.head_transform) */
  HnTensor *diff;     /* [2, N, H/2 * Dv]: the two head halves of a differential attention output (hp.diff_attn) */
  HnTensor *moa_slots; /* [N * k, KVH * D]: per routed slot, its queries and then its attention output (hp.moa) */
  /* hybrids: the Mamba-2 mixers' activations [N, .] (all NULL without such layers) and the views
   * their recording makes */
  HnMamba2Bufs m2;
  HnMamba1Bufs m1;
  HnShortConvBufs sconv;
  HnDeltaNetBufs dnet;
  HnRglruBufs rglru;
  HnScratch sc;
  /* attention output gate (hp->attn_gate_act): its projection [N, H * D] */
  HnTensor *attn_g;
  HnTensor *attn_temp; /* [N, 1]: the query temperature of each token (hp.attn_temp_floor) */
  /* hp.moe_scale_input: the top-k scores [N, k] and the experts' scaled inputs [N * k, C] */
  HnTensor *moe_topv, *moe_xin;
};

static HnTensor *
act_new (HnTransformer *m, GPtrArray *keep, const char *name, HnDType dt, gint64 rows, gint64 cols, GError **error)
{
  HnTensor *t = cols > 0 ? hn_tensor_new_named (m->ctx, name, dt, 2, (gint64[]) { rows, cols }, error)
                         : hn_tensor_new_named (m->ctx, name, dt, 1, (gint64[]) { rows }, error);
  if (t)
    g_ptr_array_add (keep, t);
  return t;
}

HnTransformerActs *
hn_transformer_acts_new (HnTransformer *m, int max_tokens, int max_logit_rows, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = g_new0 (struct ActsPriv, 1);
  HnTransformerActs *a = &p->pub;
  p->views = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  hn_scratch_init (&p->sc, m->ctx);
  g_autoptr (GPtrArray) keep = g_ptr_array_new ();
  gint64 N = max_tokens, C = hp->hidden, qd = (gint64) hp->n_head * hp->head_dim;
  gint64 kvd = (gint64) hp->n_kv_head * hp->head_dim;
  gint64 vd = (gint64) hp->n_kv_head * hp->v_head_dim, ad = (gint64) hp->n_head * hp->v_head_dim;
  const HnLayerWeights *l0 = m->w.layers ? &m->w.layers[m->layer0] : NULL; /* this stage's first layer */
  gint64 F = hp->ffn * ((l0 && l0->w_gate && !l0->w_up) ? 2 : 1);
  gint64 Fu = MAX (hp->ffn, MAX (hp->moe_ffn, hp->shared_ffn)); /* MoE experts reuse gate/up/act */
  F = MAX (F, Fu);
  a->max_tokens = max_tokens;
  if (!(a->ids = act_new (m, keep, "acts.ids", HN_DTYPE_I32, N, 0, error)) ||
      !(a->pos = act_new (m, keep, "acts.pos", HN_DTYPE_I32, N, 0, error)) ||
      !(a->x = act_new (m, keep, "acts.x", HN_DTYPE_F32, N, C, error)) ||
      !(a->h = act_new (m, keep, "acts.h", HN_DTYPE_F32, N, C, error)) ||
      !(a->q = act_new (m, keep, "acts.q", HN_DTYPE_F32, N, qd, error)) ||
      !(a->k = act_new (m, keep, "acts.k", HN_DTYPE_F32, N, kvd, error)) ||
      !(a->v = act_new (m, keep, "acts.v", HN_DTYPE_F32, N, MAX (kvd, vd), error)) ||
      !(a->att = act_new (m, keep, "acts.att", HN_DTYPE_F32, N, MAX (qd, ad), error)) ||
      !(a->o = act_new (m, keep, "acts.o", HN_DTYPE_F32, N, C, error)) ||
      !(a->h2 = act_new (m, keep, "acts.h2", HN_DTYPE_F32, N, C, error)) ||
      !(a->gate = act_new (m, keep, "acts.gate", HN_DTYPE_F32, N, F, error)) ||
      !(a->up = act_new (m, keep, "acts.up", HN_DTYPE_F32, N, Fu, error)) ||
      !(a->act = act_new (m, keep, "acts.act", HN_DTYPE_F32, N, Fu, error)) ||
      !(a->mlp = act_new (m, keep, "acts.mlp", HN_DTYPE_F32, N, C, error)) ||
      !(a->last = act_new (m, keep, "acts.last", HN_DTYPE_F32, max_logit_rows, C, error)) ||
      !(a->logits = act_new (m, keep, "acts.logits", HN_DTYPE_F32, max_logit_rows, hp->vocab, error)) ||
      (hp->n_experts > 0 &&
       (!(p->route = act_new (m, keep, "acts.moe.route", HN_DTYPE_F32, N, hp->n_experts, error)) ||
        !(p->route_w = act_new (m, keep, "acts.moe.route_w", HN_DTYPE_F32, N, hp->n_experts, error)) ||
        !(p->topi = act_new (m, keep, "acts.moe.topi", HN_DTYPE_I32, N, hp->n_experts_used, error)) ||
        !(p->col = act_new (m, keep, "acts.moe.col", HN_DTYPE_F32, N, 1, error)) ||
        !(p->expert_out = act_new (m, keep, "acts.moe.expert_out", HN_DTYPE_F32, N, C, error)) ||
        !(p->moe_offs = act_new (m, keep, "acts.moe.offsets", HN_DTYPE_I32, hp->n_experts + 1, 0, error)) ||
        !(p->moe_order = act_new (m, keep, "acts.moe.order", HN_DTYPE_I32, N * hp->n_experts_used, 0, error)) ||
        !(p->moe_tiles = act_new (m, keep, "acts.moe.tiles", HN_DTYPE_I32,
                                  hn_moe_tiles_size (N * hp->n_experts_used, hp->n_experts), 0, error)) ||
        !(p->moe_g = act_new (m, keep, "acts.moe.gate", HN_DTYPE_F32, N * hp->n_experts_used, hp->moe_ffn, error)) ||
        !(p->moe_u = act_new (m, keep, "acts.moe.up", HN_DTYPE_F32, N * hp->n_experts_used, hp->moe_ffn, error)) ||
        !(p->moe_act = act_new (m, keep, "acts.moe.act", HN_DTYPE_F32, N * hp->n_experts_used, hp->moe_ffn, error)) ||
        !(p->moe_y = act_new (m, keep, "acts.moe.y", HN_DTYPE_F32, N * hp->n_experts_used, C, error)))) ||
      (hp->attn_gate_act != HN_ACT_IDENTITY &&
       !(p->attn_g = act_new (m, keep, "acts.attn_gate", HN_DTYPE_F32, N, qd, error))) ||
      (hp->attn_temp_floor > 0 && !(p->attn_temp = act_new (m, keep, "acts.attn_temp", HN_DTYPE_F32, N, 1, error))) ||
      (hp->moe_scale_input &&
       (!(p->moe_topv = act_new (m, keep, "acts.moe.top_scores", HN_DTYPE_F32, N, hp->n_experts_used, error)) ||
        !(p->moe_xin = act_new (m, keep, "acts.moe.inputs", HN_DTYPE_F32, N * hp->n_experts_used, C, error)))) ||
      (hp->mla &&
       (!(p->mla_lat = act_new (m, keep, "acts.mla.latent", HN_DTYPE_F32, N, MAX (hp->kv_lora_rank, hp->q_lora_rank),
                                error)) ||
        !(p->mla_knope = act_new (m, keep, "acts.mla.k_nope", HN_DTYPE_F32, N, hp->n_head * hp->qk_nope_dim, error)) ||
        !(p->mla_kr = act_new (m, keep, "acts.mla.k_rope", HN_DTYPE_F32, N, hp->head_dim - hp->qk_nope_dim, error)) ||
        !(p->mla_krb = act_new (m, keep, "acts.mla.k_rope_heads", HN_DTYPE_F32, N,
                                hp->n_head * (hp->head_dim - hp->qk_nope_dim), error)))))
    goto fail;
  if (hp->moa && !(p->moa_slots = act_new (m, keep, "acts.moa.slots", HN_DTYPE_F32, N * hp->n_experts_used,
                                             (gint64) hp->n_kv_head * hp->head_dim, error)))
    goto fail;
  if (hp->diff_attn && !(p->diff = act_new (m, keep, "acts.diff", HN_DTYPE_F32, 2 * N, ad / 2, error)))
    goto fail;
  if (hp->head_transform && !(p->head_tmp = act_new (m, keep, "acts.head_tmp", HN_DTYPE_F32, max_logit_rows, C, error)))
    goto fail;
  if (hn_vk_context_has_coopmat2 (m->ctx, NULL) && g_getenv ("HN_NO_F16_ACTS") == NULL && max_tokens > 8 &&
      (!(p->h16 = act_new (m, keep, "acts.h16", HN_DTYPE_F16, N, C, error)) ||
       !(p->act16 = act_new (m, keep, "acts.act16", HN_DTYPE_F16, N, Fu, error))))
    goto fail;
  /* split-K partials for decode steps of up to max_logit_rows rows, at any context length */
  gint64 scratch = hn_attention_scratch_size (max_logit_rows, 1, hp->n_head, MAX (hp->head_dim, hp->v_head_dim),
                                              G_MAXINT32);
  if (scratch > 0 && !(a->att_scratch = act_new (m, keep, "acts.att_scratch", HN_DTYPE_F32, scratch, 0, error)))
    goto fail;
  if (!(a->pick_scratch = act_new (m, keep, "acts.pick_scratch", HN_DTYPE_F32, 2048, 0, error)))
    goto fail;
  if (hp->layer_mixer && (memchr (hp->layer_mixer, HN_MIXER_MAMBA2, (gsize) hp->n_layer) ||
                          memchr (hp->layer_mixer, HN_MIXER_PARALLEL, (gsize) hp->n_layer)) &&
      !hn_mamba2_bufs_init (&p->m2, m->ctx, &hp->ssm, N, error))
    goto fail;
  if (hp->layer_mixer && memchr (hp->layer_mixer, HN_MIXER_MAMBA1, (gsize) hp->n_layer) &&
      !hn_mamba1_bufs_init (&p->m1, m->ctx, &hp->ssm1, N, error))
    goto fail;
  if (hp->layer_mixer && memchr (hp->layer_mixer, HN_MIXER_SHORTCONV, (gsize) hp->n_layer) &&
      !hn_shortconv_bufs_init (&p->sconv, m->ctx, &hp->sconv, N, error))
    goto fail;
  if (hp->layer_mixer && memchr (hp->layer_mixer, HN_MIXER_DELTANET, (gsize) hp->n_layer) &&
      !hn_deltanet_bufs_init (&p->dnet, m->ctx, &hp->dnet, N, error))
    goto fail;
  if (hp->layer_mixer && memchr (hp->layer_mixer, HN_MIXER_RGLRU, (gsize) hp->n_layer) &&
      !hn_rglru_bufs_init (&p->rglru, m->ctx, &hp->rglru, N, error))
    goto fail;
  /* one counter per (row, query <= 8 of the split kernel, KV head), zero; each dispatch leaves them zero */
  if (scratch > 0)
    {
      gint64 nc = (gint64) max_logit_rows * 8 * hp->n_kv_head;
      g_autofree gint32 *zeros = g_new0 (gint32, nc);
      if (!(a->att_count = act_new (m, keep, "acts.att_count", HN_DTYPE_I32, nc, 0, error)) ||
          !hn_tensor_upload_i32 (a->att_count, zeros, (gsize) nc, error))
        goto fail;
    }
  return a;

fail:
  for (guint i = 0; i < keep->len; i++)
    hn_tensor_unref (keep->pdata[i]);
  g_ptr_array_unref (p->views);
  hn_scratch_clear (&p->sc);
  g_free (p);
  return NULL;
}

void
hn_transformer_acts_free (HnTransformerActs *a)
{
  if (!a)
    return;
  struct ActsPriv *p = (struct ActsPriv *) a;
  HnTensor **all[] = { &a->ids, &a->pos, &a->x, &a->h, &a->q, &a->k, &a->v, &a->att, &a->o, &a->h2, &a->gate,
                       &a->up, &a->act, &a->mlp, &a->last, &a->logits, &a->att_scratch, &a->att_count, &a->pick_scratch, &p->route, &p->route_w,
                       &p->topi, &p->col, &p->expert_out, &p->moe_offs, &p->moe_order, &p->moe_tiles, &p->moe_g, &p->moe_u,
                       &p->moe_act, &p->moe_y, &p->mla_lat, &p->mla_knope, &p->mla_kr, &p->mla_krb, &p->h16,
                       &p->act16, &p->head_tmp, &p->diff, &p->moa_slots, &p->attn_g, &p->attn_temp,
                       &p->moe_topv, &p->moe_xin };
  for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], hn_tensor_unref);
  hn_mamba2_bufs_clear (&p->m2);
  hn_mamba1_bufs_clear (&p->m1);
  hn_shortconv_bufs_clear (&p->sconv);
  hn_deltanet_bufs_clear (&p->dnet);
  hn_rglru_bufs_clear (&p->rglru);
  g_ptr_array_unref (p->views);
  hn_scratch_clear (&p->sc);
  g_free (p);
}

void
hn_transformer_acts_drop_views (HnTransformerActs *a)
{
  struct ActsPriv *p = (struct ActsPriv *) a;
  g_ptr_array_set_size (p->views, 0);
  hn_scratch_reset (&p->sc);
}

static HnTensor *
keep_view (HnTransformerActs *a, HnTensor *t)
{
  if (t)
    g_ptr_array_add (((struct ActsPriv *) a)->views, t);
  return t;
}

static HnTensor *
rows_of (HnTransformerActs *a, HnTensor *t, gint64 row0, gint64 n, GError **error)
{
  return keep_view (a, hn_tensor_view_rows (t, row0, n, error));
}

static HnTensor *
shaped (HnTransformerActs *a, HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  return keep_view (a, hn_tensor_reshape (t, ndim, shape, error));
}

/* ---------------------------------------------------------------- pieces */

static HnTensor *scratch_2d (HnTransformerActs *a, HnTensor *t, gint64 n, gint64 cols, GError **error);

/* *out: the first N rows of the f16 activation t16 as [N, cols] when every non-NULL weight of ws
 * (at least one) takes an f16 x (hn_op_matmul_takes_f16), else NULL: the norm or glu before
 * those GEMMs then writes f16 and they read it as it is (the same numbers as the f16 copy of an
 * f32 x they make otherwise, one dispatch fewer). */
static gboolean
f16_input (HnCmd *cmd, HnTransformerActs *a, HnTensor *t16, gint64 N, gint64 cols, HnTensor *const *ws, guint nw,
           HnTensor **out, GError **error)
{
  *out = NULL;
  if (!t16 || cols % 2 != 0 || N * cols > t16->n)
    return TRUE;
  guint used = 0;
  for (guint i = 0; i < nw; i++)
    {
      if (!ws[i])
        continue;
      if (!hn_op_matmul_takes_f16 (cmd, ws[i], N))
        return TRUE;
      used++;
    }
  if (used == 0)
    return TRUE;
  *out = scratch_2d (a, t16, N, cols, error);
  return *out != NULL;
}

static gboolean
norm (HnTransformer *m, HnCmd *cmd, HnTensor *out, HnTensor *in, HnTensor *w, HnTensor *b, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (hp->layernorm)
    return hn_op_layernorm (cmd, out, in, w, b, hp->norm_eps, error);
  return hn_op_rmsnorm (cmd, out, in, w, hp->norm_eps, hp->norm_plus_one ? HN_NORM_WEIGHT_PLUS_ONE : HN_NORM_DEFAULT,
                        error);
}

/* A sandwich's post-sublayer norm: the layers' norm with post_norm_eps where the model gives them
 * their own (muse_glimmer_text). */
static gboolean
post_norm (HnTransformer *m, HnCmd *cmd, HnTensor *t, HnTensor *w, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (hp->post_norm_eps > 0 && !hp->layernorm)
    return hn_op_rmsnorm (cmd, t, t, w, hp->post_norm_eps,
                          hp->norm_plus_one ? HN_NORM_WEIGHT_PLUS_ONE : HN_NORM_DEFAULT, error);
  return norm (m, cmd, t, t, w, NULL, error);
}

/* clamp(t, -c, c) from the ops we have: min(x, c) = c - relu(c - x); max(y, -c) = relu(y + c) - c. */
static gboolean
clamp_abs (HnCmd *cmd, HnTensor *t, float c, GError **error)
{
  CK (hn_op_scale (cmd, t, t, -1.0f, c, error));
  CK (hn_op_unary (cmd, t, t, HN_ACT_RELU, error));
  CK (hn_op_scale (cmd, t, t, -1.0f, 2.0f * c, error)); /* c - relu(c - x) + c */
  CK (hn_op_unary (cmd, t, t, HN_ACT_RELU, error));
  return hn_op_scale (cmd, t, t, 1.0f, -c, error);
}


/* xIELU (apertus) of u [N, F] into act, from elementwise ops (u and the gate scratch are
 * overwritten): ap·relu(u)² + β·u + an·(expm1(w) − w) with w = min(u, 0), and
 * expm1(w) = 2t / (1 − t) for t = tanh(w / 2), which keeps its precision near 0. */
static gboolean
xielu (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *act, HnTensor *u,
       gint64 N, GError **error)
{
  float ap = lw->xielu[0], an = lw->xielu[1], beta = lw->xielu[2];
  HnTensor *g = scratch_2d (a, a->gate, N, u->shape[1], error);
  CK (g);
  CK (hn_op_scale (cmd, act, u, beta, 0.0f, error));
  CK (hn_op_scale (cmd, g, u, -1.0f, 0.0f, error));
  CK (hn_op_unary (cmd, g, g, HN_ACT_RELU, error)); /* g = -w >= 0 */
  CK (hn_op_unary (cmd, u, u, HN_ACT_RELU2, error));
  CK (hn_op_scale (cmd, u, u, ap, 0.0f, error));
  CK (hn_op_add (cmd, act, act, u, error));
  CK (hn_op_scale (cmd, u, g, 0.5f, 0.0f, error));
  CK (hn_op_unary (cmd, u, u, HN_ACT_TANH, error)); /* s = tanh(-w / 2) = -t */
  CK (hn_op_scale (cmd, g, g, an, 0.0f, error));
  CK (hn_op_add (cmd, act, act, g, error)); /* + an · (-w) */
  CK (hn_op_scale (cmd, g, u, 1.0f, 1.0f, error));
  CK (hn_op_scale (cmd, u, u, -2.0f * an, 0.0f, error));
  CK (hn_op_binary (cmd, u, u, g, HN_BINARY_DIV, error)); /* an · expm1(w) = -2an·s / (1 + s) */
  return hn_op_add (cmd, act, act, u, error);
}

/* The non-gated MLP's activation of u into act. */
static gboolean
mlp_act (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *act, HnTensor *u,
         gint64 N, GError **error)
{
  if (m->hp.xielu)
    return xielu (m, cmd, a, lw, act, u, N, error);
  return hn_op_unary (cmd, act, u, m->hp.act, error);
}

/* HN_MOE_DENSE=1 runs every expert on every token (to compare the two paths). */
static gboolean
hn_moe_dense_forced (void)
{
  return g_strcmp0 (g_getenv ("HN_MOE_DENSE"), "1") == 0;
}

static gboolean moe (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in,
                     HnTensor *out, gint64 N, GError **error);
static gboolean expert_glu (HnTransformer *m, HnCmd *cmd, HnTensor *act, HnTensor *g, HnTensor *u, float silu_limit,
                            GError **error);

/* Decode (N <= 8 rows, dense MLP, pre-norm): x̂ = rmsnorm(x) inside the kernels, gate and up in one
 * matrix-vector pass with the activation, and the down projection added straight into the residual
 * stream (x += residual_scale * down). */
static gboolean
mlp_matvec (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *x,
            const HnMatvecNorm *nrm, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  HnTensor *act = rows_of (a, a->act, 0, N, error);
  CK (act);
  HnTensor *wg = lw->w_gate, *bg = lw->b_gate, *wu = lw->w_up, *bu = lw->b_up;
  if (!wg) /* not gated: up, activation */
    {
      HnTensor *u = rows_of (a, a->up, 0, N, error);
      CK (u);
      CK (hn_op_matvec_normed (cmd, u, x, nrm, lw->w_up, lw->b_up, error));
      CK (mlp_act (m, cmd, a, lw, act, u, N, error));
    }
  else if (!wu) /* fused gate_up [2F, C]: the halves as views */
    {
      gint64 F = hp->ffn;
      wg = keep_view (a, hn_tensor_view_rows (lw->w_gate, 0, F, error));
      wu = wg ? keep_view (a, hn_tensor_view_rows (lw->w_gate, F, F, error)) : NULL;
      CK (wu);
      if (lw->b_gate) /* [2F]: rows of a 1-D tensor are its elements */
        {
          bg = rows_of (a, lw->b_gate, 0, F, error);
          bu = bg ? rows_of (a, lw->b_gate, F, F, error) : NULL;
          CK (bu);
        }
    }
  if (wg)
    CK (hn_op_matvec_glu (cmd, act, x, nrm, wg, bg, wu, bu, hp->act, error));
  return hn_op_matvec_add (cmd, x, act, lw->w_down, lw->b_down, hp->residual_scale, error);
}

/* out = mlp(in); with add_to (a dense MLP only): add_to += residual_scale · mlp(in) in the down
 * projection's epilogue, out unused */
static gboolean
mlp (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in, HnTensor *out,
     HnTensor *add_to, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (lw->router)
    return moe (m, cmd, a, lw, in, out, N, error);
  HnTensor *act = rows_of (a, a->act, 0, N, error);
  CK (act);
  if (lw->w_gate && lw->glu_limit > 0) /* step3p5's clamped SwiGLU: the two projections, then expert_glu */
    {
      HnTensor *g = rows_of (a, a->gate, 0, N, error), *u = rows_of (a, a->up, 0, N, error);
      CK (g && u);
      HnTensor *ys[2] = { g, u }, *ws[2] = { lw->w_gate, lw->w_up }, *bs[2] = { lw->b_gate, lw->b_up };
      CK (hn_op_matmul_n (cmd, 2, ys, in, ws, bs, error));
      CK (expert_glu (m, cmd, act, g, u, lw->glu_limit, error));
      if (add_to)
        return hn_op_matmul_add (cmd, add_to, act, lw->w_down, lw->b_down, hp->residual_scale, error);
      return hn_op_matmul (cmd, out, act, lw->w_down, lw->b_down, error);
    }
  if (lw->w_gate && !lw->ffn_sub_w)
    {
      /* the gate's activation as the down projection's f16 operand */
      HnTensor *act16;
      CK (f16_input (cmd, a, ((struct ActsPriv *) a)->act16, N, act->shape[1], &lw->w_down, 1, &act16, error));
      if (act16)
        act = act16;
    }
  if (lw->w_gate && !lw->w_up)
    {
      HnTensor *gu = rows_of (a, a->gate, 0, N, error); /* [N, 2F] fused gate_up */
      CK (gu);
      CK (hn_op_matmul (cmd, gu, in, lw->w_gate, lw->b_gate, error));
      CK (hn_op_glu (cmd, act, gu, NULL, hp->act, error));
    }
  else if (lw->w_gate && act->dtype == HN_DTYPE_F16 && !lw->b_gate && !lw->b_up &&
           hn_op_matmul_glu_available (cmd, lw->w_gate, lw->w_up, N))
    /* gate, up and the activation in one pass, f16 out: no gate/up results in memory */
    CK (hn_op_matmul_glu (cmd, act, in, lw->w_gate, lw->w_up, hp->act, error));
  else if (lw->w_gate)
    {
      HnTensor *g = rows_of (a, a->gate, 0, N, error), *u = rows_of (a, a->up, 0, N, error);
      CK (g && u);
      HnTensor *ys[2] = { g, u }, *ws[2] = { lw->w_gate, lw->w_up }, *bs[2] = { lw->b_gate, lw->b_up };
      CK (hn_op_matmul_n (cmd, 2, ys, in, ws, bs, error));
      CK (hn_op_glu (cmd, act, g, u, hp->act, error));
    }
  else
    {
      HnTensor *u = rows_of (a, a->up, 0, N, error);
      CK (u);
      CK (hn_op_matmul (cmd, u, in, lw->w_up, lw->b_up, error));
      CK (mlp_act (m, cmd, a, lw, act, u, N, error));
    }
  if (lw->ffn_sub_w) /* bitnet ffn_sub_norm */
    CK (norm (m, cmd, act, act, lw->ffn_sub_w, NULL, error));
  if (add_to)
    return hn_op_matmul_add (cmd, add_to, act, lw->w_down, lw->b_down, hp->residual_scale, error);
  return hn_op_matmul (cmd, out, act, lw->w_down, lw->b_down, error);
}

/* The first n * cols elements of the scratch t, as [n, cols] (experts narrower than the dense MLP). */
static HnTensor *
scratch_2d (HnTransformerActs *a, HnTensor *t, gint64 n, gint64 cols, GError **error)
{
  HnTensor *flat = shaped (a, t, 1, (gint64[]) { t->n }, error);
  HnTensor *part = flat ? rows_of (a, flat, 0, n * cols, error) : NULL;
  return part ? shaped (a, part, 2, (gint64[]) { n, cols }, error) : NULL;
}

/* act = act(g) * u; gpt_oss clamps first: g to at most the limit, u to ±limit, and runs
 * (u + 1) · quick_gelu(g); step3p5 (silu_limit > 0) clamps after the activation:
 * min(act(g), L) · clamp(u, −L, L). g and u are overwritten. */
static gboolean
expert_glu (HnTransformer *m, HnCmd *cmd, HnTensor *act, HnTensor *g, HnTensor *u, float silu_limit, GError **error)
{
  float lim = m->hp.moe_swiglu_limit;
  if (silu_limit > 0 && !(lim > 0))
    {
      CK (hn_op_unary (cmd, g, g, m->hp.act, error));
      CK (hn_op_clamp (cmd, g, g, -INFINITY, silu_limit, error));
      CK (hn_op_clamp (cmd, u, u, -silu_limit, silu_limit, error));
      return hn_op_mul (cmd, act, g, u, error);
    }
  if (lim > 0)
    {
      CK (hn_op_clamp (cmd, g, g, -INFINITY, lim, error));
      CK (hn_op_clamp (cmd, u, u, -lim, lim, error));
      CK (hn_op_scale (cmd, u, u, 1.0f, 1.0f, error));
    }
  return hn_op_glu (cmd, act, g, u, lim > 0 ? HN_ACT_QUICK_GELU : m->hp.act, error);
}

/* out = down(act(gate(in)) * up(in)) with an intermediate size of F (an expert or the shared one),
 * clamped as expert_glu says where limit > 0. */
static gboolean
gated_ffn (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, HnTensor *wg, HnTensor *bg, HnTensor *wu,
           HnTensor *bu, HnTensor *wd, HnTensor *bd, gint64 F, float limit, HnTensor *in, HnTensor *out, gint64 N,
           GError **error)
{
  HnTensor *g = scratch_2d (a, a->gate, N, F, error), *u = g ? scratch_2d (a, a->up, N, F, error) : NULL;
  HnTensor *act = u ? scratch_2d (a, a->act, N, F, error) : NULL;
  CK (act);
  CK (hn_op_matmul (cmd, u, in, wu, bu, error));
  if (!wg) /* an MLP expert (nemotron_h): down(act(up(x))) */
    CK (hn_op_unary (cmd, act, u, m->hp.act, error));
  else
    {
      CK (hn_op_matmul (cmd, g, in, wg, bg, error));
      CK (expert_glu (m, cmd, act, g, u, limit, error));
    }
  return hn_op_matmul (cmd, out, act, wd, bd, error);
}

/* The routed experts only: slots grouped by expert, the three projections read just the chosen
 * experts' rows of the stacked weights, and each token sums its k outputs by their weights. */
static gboolean
sparse_experts (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in,
                HnTensor *w, HnTensor *topi, HnTensor *out, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 S = N * hp->n_experts_used;
  HnTensor *order = rows_of (a, p->moe_order, 0, S, error), *g = rows_of (a, p->moe_g, 0, S, error);
  HnTensor *u = rows_of (a, p->moe_u, 0, S, error), *act = rows_of (a, p->moe_act, 0, S, error);
  HnTensor *y = rows_of (a, p->moe_y, 0, S, error);
  HnTensor *ids = shaped (a, topi, 1, (gint64[]) { S }, error);
  HnTensor *tiles = scratch_2d (a, p->moe_tiles, 1, hn_moe_tiles_size (S, hp->n_experts), error);
  HnTensor *tiles1 = tiles ? shaped (a, tiles, 1, (gint64[]) { tiles->n }, error) : NULL;
  CK (order && g && u && act && y && ids && tiles1);
  HnTensor *const *st = lw->expert_stack, *const *bs = lw->expert_bias_stack;
  int k = hp->n_experts_used;
  CK (hn_op_moe_sort (cmd, p->moe_offs, order, tiles1, ids, hp->n_experts, error));
  CK (hn_op_moe_matmul (cmd, u, in, st[1], bs[1], p->moe_offs, order, tiles1, k, error));
  if (!st[0]) /* MLP experts (nemotron_h) */
    CK (hn_op_unary (cmd, act, u, hp->act, error));
  else
    {
      CK (hn_op_moe_matmul (cmd, g, in, st[0], bs[0], p->moe_offs, order, tiles1, k, error));
      CK (expert_glu (m, cmd, act, g, u, lw->expert_glu_limit, error));
    }
  CK (hn_op_moe_matmul (cmd, y, act, st[2], bs[2], p->moe_offs, order, tiles1, 1, error));
  return hn_op_moe_combine (cmd, out, y, w, topi, error);
}

/* The routed experts of the router logits `route` into out: hn_op_moe_route's weights, then
 * sparse_experts, or every expert on every token weighted by its column (0 where not chosen). */
static gboolean
routed_experts (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in,
                HnTensor *route, HnTensor *out, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 E = hp->n_experts;
  HnTensor *w = rows_of (a, p->route_w, 0, N, error), *topi = rows_of (a, p->topi, 0, N, error);
  HnTensor *col = rows_of (a, p->col, 0, N, error), *eo = rows_of (a, p->expert_out, 0, N, error);
  CK (w && topi && col && eo);
  HnMoeRouteParams rp = { hp->moe_route, hp->n_experts_used, hp->moe_norm_topk, hp->moe_scale, hp->moe_n_group,
                          hp->moe_topk_group, hp->moe_route == HN_MOE_ROUTE_SIGMOID_TOPK, hp->moe_jitter_eps,
                          lw->route_bias, hp->moe_norm_min, hp->moe_norm_add };
  CK (hn_op_moe_route (cmd, w, topi, route, &rp, error));
  gboolean stacked = (lw->expert_stack[0] || !lw->experts[0]) && lw->expert_stack[1] && lw->expert_stack[2];
  if (stacked && !hn_moe_dense_forced ())
    return sparse_experts (m, cmd, a, lw, in, w, topi, out, N, error);
  CK (hn_op_fill (cmd, out, 0.0f, error));
  for (gint64 e = 0; e < E; e++)
    {
      HnTensor **x = &lw->experts[3 * e];
      HnTensor *const none[3] = { NULL, NULL, NULL };
      HnTensor *const *b = lw->expert_biases ? &lw->expert_biases[3 * e] : none;
      CK (gated_ffn (m, cmd, a, x[0], b[0], x[1], b[1], x[2], b[2], hp->moe_ffn, lw->expert_glu_limit, in, eo, N,
                     error));
      CK (hn_op_slice (cmd, col, w, 1, e, error));
      CK (hn_op_mul (cmd, eo, eo, col, error));
      CK (hn_op_add (cmd, out, out, eo, error));
    }
  return TRUE;
}

/* Llama4TextMoe's routed experts: the k largest router logits (torch.topk), their sigmoids s scale
 * the chosen experts' inputs, out = sum_j expert_j(s_j · in), unweighted. Sparse over stacked
 * experts: slot t·k + j runs on its own scaled row; otherwise (or HN_MOE_DENSE=1) every expert on
 * every token's input times its routing weight (0 where not chosen: an expert without biases maps 0
 * to 0). */
static gboolean
moe_scaled_inputs (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in,
                   HnTensor *route, HnTensor *out, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 K = hp->n_experts_used, S = N * K, C = hp->hidden, E = hp->n_experts;
  gboolean stacked = lw->expert_stack[0] && lw->expert_stack[1] && lw->expert_stack[2];
  if (!stacked || hn_moe_dense_forced ())
    {
      HnTensor *w = rows_of (a, p->route_w, 0, N, error), *topi = rows_of (a, p->topi, 0, N, error);
      HnTensor *col = rows_of (a, p->col, 0, N, error), *eo = rows_of (a, p->expert_out, 0, N, error);
      HnTensor *xin = rows_of (a, p->moe_xin, 0, N, error);
      CK (w && topi && col && eo && xin);
      /* sigmoid of the chosen logits, 0 elsewhere (sigmoid is monotone: the same k as the logits') */
      HnMoeRouteParams rp = { .kind = HN_MOE_ROUTE_SIGMOID_TOPK, .k = (int) K, .scale = 1.0f };
      CK (hn_op_moe_route (cmd, w, topi, route, &rp, error));
      CK (hn_op_fill (cmd, out, 0.0f, error));
      for (gint64 e = 0; e < E; e++)
        {
          HnTensor **x = &lw->experts[3 * e];
          CK (hn_op_slice (cmd, col, w, 1, e, error));
          CK (hn_op_mul (cmd, xin, in, col, error));
          CK (gated_ffn (m, cmd, a, x[0], NULL, x[1], NULL, x[2], NULL, hp->moe_ffn, 0.0f, xin, eo, N, error));
          CK (hn_op_add (cmd, out, out, eo, error));
        }
      return TRUE;
    }
  HnTensor *vals = rows_of (a, p->moe_topv, 0, N, error), *topi = rows_of (a, p->topi, 0, N, error);
  HnTensor *xs = rows_of (a, p->moe_xin, 0, S, error);
  HnTensor *xs3 = xs ? shaped (a, xs, 3, (gint64[]) { N, K, C }, error) : NULL;
  HnTensor *in3 = shaped (a, in, 3, (gint64[]) { N, 1, C }, error);
  HnTensor *s3 = vals ? shaped (a, vals, 3, (gint64[]) { N, K, 1 }, error) : NULL;
  HnTensor *order = rows_of (a, p->moe_order, 0, S, error), *g = rows_of (a, p->moe_g, 0, S, error);
  HnTensor *u = rows_of (a, p->moe_u, 0, S, error), *act = rows_of (a, p->moe_act, 0, S, error);
  /* one expert per token: its output is the layer's */
  HnTensor *y = K == 1 ? out : rows_of (a, p->moe_y, 0, S, error);
  HnTensor *ids = topi ? shaped (a, topi, 1, (gint64[]) { S }, error) : NULL;
  HnTensor *tiles = scratch_2d (a, p->moe_tiles, 1, hn_moe_tiles_size (S, E), error);
  HnTensor *tiles1 = tiles ? shaped (a, tiles, 1, (gint64[]) { tiles->n }, error) : NULL;
  CK (xs3 && in3 && s3 && order && g && u && act && y && ids && tiles1);
  HnTensor *const *st = lw->expert_stack;
  CK (hn_op_topk (cmd, vals, topi, route, (int) K, error));
  CK (hn_op_unary (cmd, vals, vals, HN_ACT_SIGMOID, error));
  CK (hn_op_mul (cmd, xs3, in3, s3, error));
  CK (hn_op_moe_sort (cmd, p->moe_offs, order, tiles1, ids, (int) E, error));
  CK (hn_op_moe_matmul (cmd, u, xs, st[1], NULL, p->moe_offs, order, tiles1, 1, error));
  CK (hn_op_moe_matmul (cmd, g, xs, st[0], NULL, p->moe_offs, order, tiles1, 1, error));
  CK (expert_glu (m, cmd, act, g, u, 0.0f, error));
  CK (hn_op_moe_matmul (cmd, y, act, st[2], NULL, p->moe_offs, order, tiles1, 1, error));
  if (K == 1)
    return TRUE;
  HnTensor *y3 = shaped (a, y, 3, (gint64[]) { N, K, C }, error);
  HnTensor *o3 = shaped (a, out, 3, (gint64[]) { N, 1, C }, error);
  HnTensor *eo = rows_of (a, p->expert_out, 0, N, error);
  HnTensor *e3 = eo ? shaped (a, eo, 3, (gint64[]) { N, 1, C }, error) : NULL;
  CK (y3 && o3 && e3);
  CK (hn_op_slice (cmd, o3, y3, 1, 0, error));
  for (gint64 j = 1; j < K; j++)
    {
      CK (hn_op_slice (cmd, e3, y3, 1, j, error));
      CK (hn_op_add (cmd, o3, o3, e3, error));
    }
  return TRUE;
}

/* Routed mixture of experts: router logits (+ bias) -> hn_op_moe_route (each family's rule) -> the
 * weights of the k chosen experts per token, 0 elsewhere; out = sum over the chosen experts of
 * weight * expert(in) (llama4_text: sum of expert(s · in), moe_scaled_inputs) (+ the shared expert,
 * sigmoid-gated for qwen2_moe). Sparse when the layer's
 * experts are stacked (only chosen experts run, and their weights are all that is read: k of E
 * for one decoded token); otherwise, or with HN_MOE_DENSE=1, every expert runs on every token and
 * is weighted by 0 where not chosen. Neither needs a readback of the routing inside a recording. */
static gboolean
moe (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in, HnTensor *out,
     gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  HnTensor *route = rows_of (a, p->route, 0, N, error);
  HnTensor *col = rows_of (a, p->col, 0, N, error), *eo = rows_of (a, p->expert_out, 0, N, error);
  CK (route && col && eo);
  CK (hn_op_matmul (cmd, route, in, lw->router, lw->router_b, error));
  if (hp->moe_scale_input)
    CK (moe_scaled_inputs (m, cmd, a, lw, in, route, out, N, error));
  else
    CK (routed_experts (m, cmd, a, lw, in, route, out, N, error));
  if (lw->w_down)
    {
      CK (gated_ffn (m, cmd, a, lw->w_gate, lw->b_gate, lw->w_up, lw->b_up, lw->w_down, lw->b_down, hp->shared_ffn,
                     lw->glu_limit, in, eo, N, error));
      if (lw->shared_expert_gate)
        {
          CK (hn_op_matmul (cmd, col, in, lw->shared_expert_gate, NULL, error));
          CK (hn_op_unary (cmd, col, col, HN_ACT_SIGMOID, error));
          CK (hn_op_mul (cmd, eo, eo, col, error));
        }
      CK (hn_op_add (cmd, out, out, eo, error));
      if (hp->moe_shared_mean)
        CK (hn_op_scale (cmd, out, out, 0.5f, 0.0f, error));
    }
  if (lw->moe_bias)
    CK (hn_op_add (cmd, out, out, lw->moe_bias, error));
  return TRUE;
}

/* JetMoeMoA.map: the router picks k attention experts per token (as the MLP's router does); slot
 * (t, j) gets expert j's query projection of x_t, KVH heads, laid out as device heads i·k + j
 * (q [N, KVH, k, D]); k and v come from the shared kv_proj. moa_reduce reads the same routing. */
static gboolean
moa_map (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in, HnTensor *q,
         HnTensor *k, HnTensor *v, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 K = hp->n_experts_used, S = N * K, KVH = hp->n_kv_head, D = hp->head_dim;
  HnTensor *route = rows_of (a, p->route, 0, N, error), *w = rows_of (a, p->route_w, 0, N, error);
  HnTensor *topi = rows_of (a, p->topi, 0, N, error), *slots = rows_of (a, p->moa_slots, 0, S, error);
  HnTensor *order = rows_of (a, p->moe_order, 0, S, error);
  HnTensor *ids = topi ? shaped (a, topi, 1, (gint64[]) { S }, error) : NULL;
  HnTensor *tiles = scratch_2d (a, p->moe_tiles, 1, hn_moe_tiles_size (S, hp->n_experts), error);
  HnTensor *tiles1 = tiles ? shaped (a, tiles, 1, (gint64[]) { tiles->n }, error) : NULL;
  HnTensor *s4 = slots ? shaped (a, slots, 4, (gint64[]) { N, K, KVH, D }, error) : NULL;
  HnTensor *q4 = shaped (a, q, 4, (gint64[]) { N, KVH, K, D }, error);
  CK (route && w && order && ids && tiles1 && s4 && q4);
  CK (hn_op_matmul (cmd, route, in, lw->moa_router, NULL, error));
  HnMoeRouteParams rp = { .kind = HN_MOE_ROUTE_TOPK_SOFTMAX, .k = (int) K, .scale = 1.0f };
  CK (hn_op_moe_route (cmd, w, topi, route, &rp, error));
  CK (hn_op_moe_sort (cmd, p->moe_offs, order, tiles1, ids, hp->n_experts, error));
  CK (hn_op_moe_matmul (cmd, slots, in, lw->moa_in, NULL, p->moe_offs, order, tiles1, (int) K, error));
  CK (hn_op_permute (cmd, q4, s4, (const int[]) { 0, 2, 1, 3 }, error));
  HnTensor *ys[2] = { k, v }, *ws[2] = { lw->wk, lw->wv }, *bs[2] = { NULL, NULL };
  return hn_op_matmul_n (cmd, 2, ys, in, ws, bs, error);
}

/* JetMoeMoA.reduce: out [N, C] = sum over each token's slots of weight · expert output projection
 * of that slot's heads, + bias. */
static gboolean
moa_reduce (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *att,
            HnTensor *out, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 K = hp->n_experts_used, S = N * K, KVH = hp->n_kv_head, D = hp->head_dim;
  HnTensor *w = rows_of (a, p->route_w, 0, N, error), *topi = rows_of (a, p->topi, 0, N, error);
  HnTensor *slots = rows_of (a, p->moa_slots, 0, S, error), *order = rows_of (a, p->moe_order, 0, S, error);
  HnTensor *y = rows_of (a, p->moe_y, 0, S, error);
  HnTensor *tiles = scratch_2d (a, p->moe_tiles, 1, hn_moe_tiles_size (S, hp->n_experts), error);
  HnTensor *tiles1 = tiles ? shaped (a, tiles, 1, (gint64[]) { tiles->n }, error) : NULL;
  HnTensor *s4 = slots ? shaped (a, slots, 4, (gint64[]) { N, K, KVH, D }, error) : NULL;
  HnTensor *a4 = shaped (a, att, 4, (gint64[]) { N, KVH, K, D }, error);
  CK (w && topi && order && y && tiles1 && s4 && a4);
  CK (hn_op_permute (cmd, s4, a4, (const int[]) { 0, 2, 1, 3 }, error));
  CK (hn_op_moe_matmul (cmd, y, slots, lw->moa_out, NULL, p->moe_offs, order, tiles1, 1, error));
  CK (hn_op_moe_combine (cmd, out, y, w, topi, error));
  return hn_op_add (cmd, out, out, lw->moa_bias, error);
}

/* DeepSeek multi-head latent attention projections: q [N, H, rope | nope] (through the q LoRA and
 * its norm when configured), keys [N, H, rope | nope] from the shared rotary key and the latent's
 * per-head part, values [N, H * v_head_dim] from the latent. RoPE runs afterwards as for any model. */
static gboolean
mla_qkv (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *in, HnTensor *q,
         HnTensor *k, HnTensor *v, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 H = hp->n_head, dn = hp->qk_nope_dim, dr = hp->head_dim - dn;
  if (hp->q_lora_rank > 0)
    {
      HnTensor *qa = scratch_2d (a, p->mla_lat, N, hp->q_lora_rank, error);
      CK (qa);
      CK (hn_op_matmul (cmd, qa, in, lw->wq_a, NULL, error));
      CK (hn_op_rmsnorm (cmd, qa, qa, lw->q_a_norm_w, hp->mla_norm_eps, HN_NORM_DEFAULT, error));
      CK (hn_op_matmul (cmd, q, qa, lw->wq, NULL, error));
    }
  else
    CK (hn_op_matmul (cmd, q, in, lw->wq, NULL, error));
  HnTensor *lat = scratch_2d (a, p->mla_lat, N, hp->kv_lora_rank, error);
  HnTensor *kn = rows_of (a, p->mla_knope, 0, N, error), *kr = rows_of (a, p->mla_kr, 0, N, error);
  HnTensor *krb = rows_of (a, p->mla_krb, 0, N, error);
  CK (lat && kn && kr && krb);
  CK (hn_op_matmul (cmd, lat, in, lw->wkv_a, NULL, error));
  CK (hn_op_rmsnorm (cmd, lat, lat, lw->kv_a_norm_w, hp->mla_norm_eps, HN_NORM_DEFAULT, error));
  CK (hn_op_matmul (cmd, kn, lat, lw->wk_nope, NULL, error));
  CK (hn_op_matmul (cmd, v, lat, lw->wv_b, NULL, error));
  CK (hn_op_matmul (cmd, kr, in, lw->wk_rope, NULL, error));
  HnTensor *kr3 = shaped (a, kr, 3, (gint64[]) { N, 1, dr }, error);
  HnTensor *krb3 = shaped (a, krb, 3, (gint64[]) { N, H, dr }, error);
  HnTensor *kn3 = shaped (a, kn, 3, (gint64[]) { N, H, dn }, error);
  HnTensor *k3 = shaped (a, k, 3, (gint64[]) { N, H, dn + dr }, error);
  CK (kr3 && krb3 && kn3 && k3);
  CK (hn_op_fill (cmd, krb3, 0.0f, error));
  CK (hn_op_add (cmd, krb3, krb3, kr3, error)); /* the one rotary key, broadcast to every head */
  return hn_op_concat (cmd, k3, krb3, kn3, 2, error);
}

/* x += r * residual_scale */
static gboolean
residual_add (HnTransformer *m, HnCmd *cmd, HnTensor *x, HnTensor *r, GError **error)
{
  if (m->hp.residual_scale != 1.0f)
    CK (hn_op_scale (cmd, r, r, m->hp.residual_scale, 0.0f, error));
  return hn_op_add (cmd, x, x, r, error);
}

/* ---------------------------------------------------------------- recording */

/* ids/pos: i32 [N] (views of acts->ids/pos, or of a decode state) */
static gboolean
record_embed (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, HnTensor *ids, HnTensor *pos, gint64 N,
              GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  const HnTransformerWeights *W = &m->w;
  HnTensor *x = rows_of (a, a->x, 0, N, error);
  CK (x);
  CK (hn_op_embedding (cmd, x, W->tok_embed, ids, error));
  if (hp->embed_scale != 1.0f)
    CK (hn_op_scale (cmd, x, x, hp->embed_scale, 0.0f, error));
  if (W->pos_embed)
    {
      HnTensor *pe = rows_of (a, a->h, 0, N, error);
      CK (pe);
      CK (hn_op_embedding (cmd, pe, W->pos_embed, pos, error));
      CK (hn_op_add (cmd, x, x, pe, error));
    }
  if (hp->embed_norm) /* bloom's LayerNorm, nanochat's weightless RMSNorm */
    CK (norm (m, cmd, x, x, W->embed_norm_w, W->embed_norm_b, error));
  return TRUE;
}

/* Decode (pre-norm, RMSNorm, dense MLP, a few rows): the norms run inside the matrix-vector kernels
 * and the residual adds are fused into the o and down projections. */
static gboolean
decode_fusable (HnTransformer *m, HnCmd *cmd, const HnLayerWeights *lw, gint64 N)
{
  const HnTransformerHParams *hp = &m->hp;
  return hn_op_matvec_available (cmd, N) && !lw->router && !hp->mla && !hp->moa && hp->block == HN_BLOCK_PRE_NORM &&
         !hp->layernorm && !hp->sub_norms && !lw->attn_gate && !(lw->glu_limit > 0);
}

static gboolean paged_attention (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv,
                                 HnTensor *q, HnTensor *k, HnTensor *v, HnTensor *att, int B, int T, GError **error);

/* gemma4: the layer's whole output (residual stream included) *= layer_scalar */
static gboolean
layer_scale (HnCmd *cmd, const HnLayerWeights *lw, HnTensor *x, GError **error)
{
  return lw->layer_scalar == 1.0f || hn_op_scale (cmd, x, x, lw->layer_scalar, 0.0f, error);
}
static gboolean record_mixer_layer (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv,
                                    int B, int T, int pos0, GError **error);
static gboolean layer_rest (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *x,
                            HnTensor *h, HnTensor *h2, HnTensor *o, HnTensor *mo, HnTensor *att, gint64 N,
                            GError **error);

gboolean
hn_transformer_record_embed (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int n_tokens, GError **error)
{
  HnTensor *ids = rows_of (a, a->ids, 0, n_tokens, error), *pos = rows_of (a, a->pos, 0, n_tokens, error);
  CK (ids && pos);
  return record_embed (m, cmd, a, ids, pos, n_tokens, error);
}

/* pos: i32 [B*T] positions (rope); dyn_row: NULL, or i32 [1] holding pos0 on the device (B = T = 1,
 * a replayed decode step: the cache row and the key count are read there). */
static gboolean
record_layer (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv, int B, int T,
              int pos0, HnTensor *pos, HnTensor *dyn_row, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  const HnTransformerWeights *W = &m->w;
  const HnLayerWeights *lw = &W->layers[il];
  gint64 N = (gint64) B * T, H = hn_transformer_layer_heads (hp, il), KVH = hn_transformer_layer_kv_heads (hp, il);
  gint64 D = hn_transformer_layer_head_dim (hp, il), Dv = hn_transformer_layer_v_head_dim (hp, il);
  if (hp->layer_mixer && hp->layer_mixer[il] != HN_MIXER_ATTENTION && hp->layer_mixer[il] != HN_MIXER_PARALLEL)
    /* a recorded decode step (dyn_row: the position lives on the device, pos0 reads 0) follows the
     * prompt, never at position 0, where the RG-LRU resets */
    return record_mixer_layer (m, cmd, a, il, kv, B, T, dyn_row ? 1 : pos0, error);
  gboolean paged = kv->page_table != NULL;
  gint64 n_ctx = paged ? G_MAXINT32 : kv->k->shape[1];
  if (paged && (W->alibi_slopes || kv->slots->n != N || kv->page_table->shape[0] != B))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "layer %d: %s", il,
                   W->alibi_slopes ? "ALiBi attention cannot read a paged cache"
                                   : "the page table or slots do not match the rows and tokens");
      return FALSE;
    }
  if (N > a->max_tokens || pos0 + T > n_ctx || (!paged && B > kv->k->shape[0]))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "layer %d: %d rows x %d tokens at position %d do not fit the session (%d tokens, context %" G_GINT64_FORMAT ")",
                   il, B, T, pos0, a->max_tokens, n_ctx);
      return FALSE;
    }
  HnTensor *x = rows_of (a, a->x, 0, N, error), *h = rows_of (a, a->h, 0, N, error);
  HnTensor *h2 = rows_of (a, a->h2, 0, N, error), *o = rows_of (a, a->o, 0, N, error);
  HnTensor *mo = rows_of (a, a->mlp, 0, N, error);
  HnTensor *q = scratch_2d (a, a->q, N, H * D, error), *k = scratch_2d (a, a->k, N, KVH * D, error);
  HnTensor *v = scratch_2d (a, a->v, N, KVH * Dv, error);
  HnTensor *att = scratch_2d (a, a->att, N, H * Dv, error);
  CK (x && h && h2 && o && mo && q && k && v && att && pos);

  /* decode: the pre-norms run inside the matrix-vector kernels (and layer_rest fuses the residual adds) */
  gboolean fuse = decode_fusable (m, cmd, lw, N);
  HnMatvecNorm n1 = { lw->ln1_w, hp->norm_eps, hp->norm_plus_one };

  /* --- attention input */
  HnTensor *ain = h;
  if (hp->block == HN_BLOCK_PRE_NORM && !fuse && !hp->mla && !hp->moa && !hp->layernorm && !lw->attn_gate)
    {
      /* the pre-norm writes the projections' f16 operand directly (not jetmoe's: its router and
       * expert matmuls read f32) */
      HnTensor *ws[3] = { lw->wq, lw->wk, lw->wv }, *h16;
      CK (f16_input (cmd, a, ((struct ActsPriv *) a)->h16, N, hp->hidden, ws, 3, &h16, error));
      if (h16)
        ain = h16;
    }
  if (hp->block == HN_BLOCK_POST_NORM || hp->block == HN_BLOCK_POST_LN || (hp->no_first_attn_norm && il == 0))
    ain = x;
  else if (!fuse)
    CK (norm (m, cmd, ain, x, lw->ln1_w, lw->ln1_b, error));
  if (hp->block == HN_BLOCK_PARALLEL_2NORM)
    CK (norm (m, cmd, h2, x, lw->ln2_w, lw->ln2_b, error)); /* from the same x as attention */

  if (hp->mla)
    CK (mla_qkv (m, cmd, a, lw, ain, q, k, v, N, error));
  else if (hp->moa)
    CK (moa_map (m, cmd, a, lw, ain, q, k, v, N, error));
  else if (fuse)
    {
      CK (hn_op_matvec_normed (cmd, q, x, &n1, lw->wq, lw->bq, error));
      CK (hn_op_matvec_normed (cmd, k, x, &n1, lw->wk, lw->bk, error));
      CK (hn_op_matvec_normed (cmd, v, x, &n1, lw->wv, lw->bv, error));
    }
  else
    {
      HnTensor *ys[3] = { q, k, v }, *ws[3] = { lw->wq, lw->wk, lw->wv }, *bs[3] = { lw->bq, lw->bk, lw->bv };
      CK (hn_op_matmul_n (cmd, 3, ys, ain, ws, bs, error));
    }
  if (hp->layer_mixer && hp->layer_mixer[il] == HN_MIXER_PARALLEL)
    {
      /* falcon_h1: the Mamba-2 mixer on the same normed input, added into x now that q, k and v are
       * taken from it */
      CK (norm (m, cmd, h2, x, lw->ln1_w, lw->ln1_b, error));
      CK (hn_mamba2_record (cmd, &((struct ActsPriv *) a)->sc, &hp->ssm, &lw->m2, &((struct ActsPriv *) a)->m2, B, T,
                            kv->ssm.ssm ? &kv->ssm : NULL, x, h2, 1.0f, error));
    }
  if (hp->v_scale != 1.0f) /* mimo_v2_flash: the cache holds the scaled values */
    CK (hn_op_scale (cmd, v, v, hp->v_scale, 0.0f, error));
  if (lw->attn_gate) /* its activation multiplies the attention output in layer_rest */
    {
      HnTensor *g = scratch_2d (a, ((struct ActsPriv *) a)->attn_g, N, hp->attn_gate_per_head ? H : H * D, error);
      CK (g);
      CK (hn_op_matmul (cmd, g, ain, lw->attn_gate, NULL, error));
    }
  if (hp->clip_qkv > 0)
    {
      CK (clamp_abs (cmd, q, hp->clip_qkv, error));
      CK (clamp_abs (cmd, k, hp->clip_qkv, error));
      CK (clamp_abs (cmd, v, hp->clip_qkv, error));
    }
  HnTensor *q3 = shaped (a, q, 3, (gint64[]) { N, H, D }, error);
  HnTensor *k3 = shaped (a, k, 3, (gint64[]) { N, KVH, D }, error);
  CK (q3 && k3);
  if (hp->v_norm) /* gemma4: a weightless RMSNorm of each value head */
    {
      HnTensor *vh = shaped (a, v, 3, (gint64[]) { N, KVH, Dv }, error);
      CK (vh);
      CK (hn_op_rmsnorm (cmd, vh, vh, NULL, hp->norm_eps, HN_NORM_DEFAULT, error));
    }
  if (hp->qk_norm_head && !hp->qk_norm_after_rope) /* per head, with the model's own norm (RMS, 1+w RMS or LayerNorm) */
    {
      CK (norm (m, cmd, q3, q3, lw->q_norm_w, lw->q_norm_b, error));
      CK (norm (m, cmd, k3, k3, lw->k_norm_w, lw->k_norm_b, error));
    }
  if (hp->qk_norm_full)
    {
      CK (norm (m, cmd, q, q, lw->q_norm_w, lw->q_norm_b, error));
      CK (norm (m, cmd, k, k, lw->k_norm_w, lw->k_norm_b, error));
    }
  if (hp->attn_temp_floor > 0 && !hp->layer_rope[il]) /* llama4_text: NoPE queries *= their position's temperature */
    {
      HnTensor *tcol = rows_of (a, ((struct ActsPriv *) a)->attn_temp, 0, N, error);
      CK (tcol);
      CK (hn_op_embedding (cmd, tcol, W->attn_temp, pos, error));
      CK (hn_op_mul (cmd, q, q, tcol, error));
    }
  /* q/k norms on the rotated heads (hunyuan; llama4_text's weightless ones): the rope apart */
  gboolean norm_after_rope = hp->qk_norm_after_rope || (hp->qk_l2_norm && hp->layer_rope[il]);
  gboolean kv_written = FALSE;
  /* one query: the rope and the cache writes inside the attention dispatch where it can */
  HnAttentionNewKv nkv = { 0 };
  gboolean kv_in_attention = FALSE;
  if (hp->layer_rope[il])
    {
      gboolean local = hp->local_rope && hp->layer_sliding[il];
      HnTensor *inv = local ? W->inv_freq_local : W->inv_freq;
      int rd = local ? hp->local_rot_dims : hp->rot_dims;
      float sc = local ? W->rope_attn_scale_local : W->rope_attn_scale;
      HnAttentionParams probe = { .n_kv = pos0 + T, .scratch = a->att_scratch, .dyn_pos = dyn_row };
      if (!paged && N == 1 && kv->k->dtype == HN_DTYPE_F32 && kv->v->dtype == HN_DTYPE_F32 && !norm_after_rope &&
          !W->alibi_slopes && hn_attention_new_kv_ok (&probe, H, KVH, D, Dv, n_ctx, kv->k->dtype))
        {
          nkv = (HnAttentionNewKv) { k, v, pos, inv, rd, hp->rope_style, sc };
          kv_in_attention = kv_written = TRUE;
        }
      else if (!paged && (B == 1 || !dyn_row) && kv->k->dtype == HN_DTYPE_F32 && kv->v->dtype == HN_DTYPE_F32 &&
               !norm_after_rope)
        {
          /* rope of q and k and every row's cache writes in one dispatch */
          HnTensor *kr = rows_of (a, kv->k, 0, B, error), *vr = rows_of (a, kv->v, 0, B, error);
          CK (kr && vr);
          HnTensor *kf = shaped (a, kr, 2, (gint64[]) { B * n_ctx, KVH * D }, error);
          HnTensor *vf = shaped (a, vr, 2, (gint64[]) { B * n_ctx, KVH * Dv }, error);
          HnTensor *v3 = shaped (a, v, 3, (gint64[]) { N, KVH, Dv }, error);
          CK (kf && vf && v3);
          HnKvDest dest = { kf, vf, pos0, dyn_row, B };
          CK (hn_op_rope_kv (cmd, q3, k3, v3, pos, inv, rd, hp->rope_style, sc, &dest, error));
          kv_written = TRUE;
        }
      else
        {
          CK (hn_op_rope (cmd, q3, q3, pos, inv, rd, hp->rope_style, sc, error));
          CK (hn_op_rope (cmd, k3, k3, pos, inv, rd, hp->rope_style, sc, error));
        }
    }
  if (hp->qk_norm_head && hp->qk_norm_after_rope) /* hunyuan: on the rotated heads, before the cache */
    {
      CK (norm (m, cmd, q3, q3, lw->q_norm_w, lw->q_norm_b, error));
      CK (norm (m, cmd, k3, k3, lw->k_norm_w, lw->k_norm_b, error));
    }
  if (hp->qk_l2_norm && hp->layer_rope[il]) /* Llama4TextL2Norm: x / sqrt(mean(x²) + eps) per head, no weight */
    {
      CK (hn_op_rmsnorm (cmd, q3, q3, NULL, hp->norm_eps, HN_NORM_DEFAULT, error));
      CK (hn_op_rmsnorm (cmd, k3, k3, NULL, hp->norm_eps, HN_NORM_DEFAULT, error));
    }
  if (paged)
    return paged_attention (m, cmd, a, il, kv, q, k, v, att, B, T, error) &&
           layer_rest (m, cmd, a, lw, x, h, h2, o, mo, att, N, error) && layer_scale (cmd, lw, x, error);
  /* new keys/values into each row's cache at [pos0, pos0 + T) */
  for (int b = 0; b < B && !kv_written; b++)
    {
      HnTensor *kr = rows_of (a, kv->k, b, 1, error), *vr = rows_of (a, kv->v, b, 1, error);
      CK (kr && vr);
      HnTensor *kf = shaped (a, kr, 2, (gint64[]) { n_ctx, KVH * D }, error);
      HnTensor *vf = shaped (a, vr, 2, (gint64[]) { n_ctx, KVH * Dv }, error);
      CK (kf && vf);
      HnTensor *ks = rows_of (a, k, (gint64) b * T, T, error), *vs = rows_of (a, v, (gint64) b * T, T, error);
      CK (ks && vs);
      if (kv->k->dtype == HN_DTYPE_F32 && kv->v->dtype == HN_DTYPE_F32)
        {
          CK (hn_op_kv_store (cmd, kf, vf, ks, vs, pos0, dyn_row, error));
          continue;
        }
      if (dyn_row)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "layer %d: a replayed decode step needs an f32 KV cache",
                       il);
          return FALSE;
        }
      HnTensor *kd = rows_of (a, kf, pos0, T, error), *vd = rows_of (a, vf, pos0, T, error);
      CK (kd && vd);
      CK (hn_op_copy (cmd, kd, ks, error));
      CK (hn_op_copy (cmd, vd, vs, error));
    }
  HnAttentionParams ap = { 0 };
  ap.scale = hp->attn_scale;
  ap.softcap = hp->attn_softcap;
  ap.causal = TRUE;
  ap.pos0 = pos0;
  ap.n_kv = pos0 + T;
  ap.window = hp->layer_sliding[il] ? hp->sliding_window : 0;
  ap.local_chunk = hp->layer_chunked && hp->layer_chunked[il] ? hp->local_chunk : 0;
  ap.alibi_slopes = W->alibi_slopes;
  ap.sinks = lw->sinks;
  ap.scratch = a->att_scratch;
  ap.counters = a->att_count;
  ap.dyn_pos = dyn_row;
  ap.new_kv = kv_in_attention ? &nkv : NULL;
  /* 16-bit attention exactly when the projections run in 16 bits (fp16
   * autocast, or a GGUF weight's f16 form on the tensor cores) */
  HnTensor *pw = lw->wo ? lw->wo : lw->wq;
  ap.reduced_precision = hn_op_linear_reduced_precision (cmd, pw, N);
  HnTensor *kk = rows_of (a, kv->k, 0, B, error), *vv = rows_of (a, kv->v, 0, B, error);
  CK (kk && vv);
  if (B == 1)
    {
      HnTensor *k1 = shaped (a, kk, 3, (gint64[]) { n_ctx, KVH, D }, error);
      HnTensor *v1 = shaped (a, vv, 3, (gint64[]) { n_ctx, KVH, Dv }, error);
      HnTensor *att3 = shaped (a, att, 3, (gint64[]) { T, H, Dv }, error);
      CK (k1 && v1 && att3);
      CK (hn_op_attention (cmd, att3, q3, k1, v1, &ap, error));
    }
  else
    {
      HnTensor *q4 = shaped (a, q, 4, (gint64[]) { B, T, H, D }, error);
      HnTensor *att4 = shaped (a, att, 4, (gint64[]) { B, T, H, Dv }, error);
      CK (q4 && att4);
      CK (hn_op_attention (cmd, att4, q4, kk, vv, &ap, error));
    }
  return layer_rest (m, cmd, a, lw, x, h, h2, o, mo, att, N, error) && layer_scale (cmd, lw, x, error);
}

/* The new K/V into their arena slots, then attention through the page table. */
static gboolean
paged_attention (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv, HnTensor *q,
                 HnTensor *k, HnTensor *v, HnTensor *att, int B, int T, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  gint64 H = hn_transformer_layer_heads (hp, il), KVH = hn_transformer_layer_kv_heads (hp, il);
  gint64 D = hn_transformer_layer_head_dim (hp, il), Dv = hn_transformer_layer_v_head_dim (hp, il);
  gint64 R = kv->k->shape[0];
  HnTensor *k2 = shaped (a, kv->k, 2, (gint64[]) { R, KVH * D }, error);
  HnTensor *v2 = shaped (a, kv->v, 2, (gint64[]) { R, KVH * Dv }, error);
  CK (k2 && v2);
  CK (hn_op_set_rows (cmd, k2, k, kv->slots, error));
  CK (hn_op_set_rows (cmd, v2, v, kv->slots, error));
  HnTensor *q4 = shaped (a, q, 4, (gint64[]) { B, T, H, D }, error);
  HnTensor *att4 = shaped (a, att, 4, (gint64[]) { B, T, H, Dv }, error);
  CK (q4 && att4);
  HnPagedAttentionParams pp = { 0 };
  pp.scale = hp->attn_scale;
  pp.softcap = hp->attn_softcap;
  pp.causal = TRUE;
  pp.window = hp->layer_sliding[il] ? hp->sliding_window : 0;
  pp.local_chunk = hp->layer_chunked && hp->layer_chunked[il] ? hp->local_chunk : 0;
  pp.page_table = kv->page_table;
  pp.seq_lens = kv->seq_lens;
  pp.sinks = m->w.layers[il].sinks;
  return hn_op_attention_paged (cmd, att4, q4, kv->k, kv->v, &pp, error);
}

/* Differential attention's head pairs (hp.diff_attn): att [N, H, 2D] -> *out [N, H/2, 2D] (in the
 * query buffer, free once attention ran) = (1 - lambda_init) · rmsnorm(att[h] - lambda · att[h + H/2]). */
static gboolean
diff_combine (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *att,
              gint64 N, HnTensor **out, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  gint64 Hh = hp->n_head / 2, Dv = hp->v_head_dim;
  HnTensor *d = rows_of (a, ((struct ActsPriv *) a)->diff, 0, 2 * N, error);
  HnTensor *att3 = shaped (a, att, 3, (gint64[]) { N, 2, Hh * Dv }, error);
  HnTensor *d3 = d ? shaped (a, d, 3, (gint64[]) { 2, N, Hh * Dv }, error) : NULL;
  HnTensor *a1 = d ? rows_of (a, d, 0, N, error) : NULL, *a2 = d ? rows_of (a, d, N, N, error) : NULL;
  HnTensor *q = rows_of (a, a->q, 0, N, error);
  HnTensor *r = q ? shaped (a, q, 2, (gint64[]) { N, Hh * Dv }, error) : NULL;
  HnTensor *r2 = q ? shaped (a, q, 2, (gint64[]) { N * Hh, Dv }, error) : NULL;
  CK (att3 && d3 && a1 && a2 && r && r2);
  CK (hn_op_permute (cmd, d3, att3, (const int[]) { 1, 0, 2 }, error));
  CK (hn_op_scale (cmd, a2, a2, -lw->diff_lambda, 0.0f, error));
  CK (hn_op_add (cmd, r, a1, a2, error));
  CK (hn_op_rmsnorm (cmd, r2, r2, NULL, hp->norm_eps, HN_NORM_DEFAULT, error));
  CK (hn_op_scale (cmd, r, r, 1.0f - lw->diff_lambda_init, 0.0f, error));
  *out = r;
  return TRUE;
}

/* Pre-norm: x += mlp(norm2(x)) (the residual add in the down projection's epilogue where it can). */
static gboolean
pre_norm_mlp (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *x, HnTensor *h2,
              HnTensor *mo, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (!lw->w_down && !lw->router)
    return TRUE; /* a hybrid's layer without an MLP */
  HnTensor *min = h2;
  if (!lw->router && !hp->layernorm)
    {
      /* the norm writes the gate/up projections' f16 operand directly */
      HnTensor *ws[2] = { lw->w_gate, lw->w_up }, *h16;
      CK (f16_input (cmd, a, ((struct ActsPriv *) a)->h16, N, hp->hidden, ws, 2, &h16, error));
      if (h16)
        min = h16;
    }
  CK (norm (m, cmd, min, x, lw->ln2_w, lw->ln2_b, error));
  if (!lw->router && !lw->post_ffn_w && (hp->residual_scale == 1.0f || !lw->b_down))
    return mlp (m, cmd, a, lw, min, mo, x, N, error);
  CK (mlp (m, cmd, a, lw, min, mo, NULL, N, error));
  if (lw->post_ffn_w) /* axk1: a norm on the MoE output */
    CK (norm (m, cmd, mo, mo, lw->post_ffn_w, NULL, error));
  return residual_add (m, cmd, x, mo, error);
}

/* A hybrid's layer without attention: a Mamba or short-convolution layer, x += scale · mixer(norm1(x))
 * with the rows' states (kv->ssm; none: from zero, as full-sequence logits run), then the layer's MLP if
 * it has one; an MLP-only layer, x += mlp(norm2(x)). */
static gboolean
record_mixer_layer (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv, int B, int T,
                    int pos0,
                    GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  const HnLayerWeights *lw = &m->w.layers[il];
  struct ActsPriv *p = (struct ActsPriv *) a;
  gint64 N = (gint64) B * T;
  if (kv->page_table || N > a->max_tokens)
    {
      g_set_error (error, HN_ERROR, kv->page_table ? HN_ERROR_UNSUPPORTED : HN_ERROR_INVALID_ARGUMENT,
                   "layer %d (a state layer): %s", il, kv->page_table ? "a recurrent state has no paged cache"
                                                                : "more tokens than the session's activations");
      return FALSE;
    }
  HnTensor *x = rows_of (a, a->x, 0, N, error), *h = rows_of (a, a->h, 0, N, error);
  HnTensor *h2 = rows_of (a, a->h2, 0, N, error), *mo = rows_of (a, a->mlp, 0, N, error);
  CK (x && h && h2 && mo);
  if (hp->layer_mixer[il] == HN_MIXER_NONE)
    return pre_norm_mlp (m, cmd, a, lw, x, h2, mo, N, error);
  CK (norm (m, cmd, h, x, lw->ln1_w, lw->ln1_b, error));
  const HnSsmState *st = kv->ssm.ssm ? &kv->ssm : NULL;
  if (hp->layer_mixer[il] == HN_MIXER_DELTANET)
    CK (hn_deltanet_record (cmd, &p->sc, &hp->dnet, &lw->dnet, &p->dnet, B, T, kv->ssm.conv, kv->ssm.ssm, x, h,
                            hp->residual_scale, error));
  else if (hp->layer_mixer[il] == HN_MIXER_RGLRU)
    CK (hn_rglru_record (cmd, &p->sc, &hp->rglru, &lw->rglru, &p->rglru, B, T, pos0, kv->ssm.conv, kv->ssm.ssm, x, h,
                         hp->residual_scale, error));
  else if (hp->layer_mixer[il] == HN_MIXER_SHORTCONV) /* its state is the conv's alone */
    CK (hn_shortconv_record (cmd, &p->sc, &hp->sconv, &lw->sconv, &p->sconv, B, T, kv->ssm.conv, x, h,
                             hp->residual_scale, error));
  else if (hp->layer_mixer[il] == HN_MIXER_MAMBA1)
    CK (hn_mamba1_record (cmd, &p->sc, &hp->ssm1, &lw->m1, &p->m1, B, T, st, x, h, hp->residual_scale, error));
  else
    CK (hn_mamba2_record (cmd, &p->sc, &hp->ssm, &lw->m2, &p->m2, B, T, st, x, h, hp->residual_scale, error));
  return pre_norm_mlp (m, cmd, a, lw, x, h2, mo, N, error);
}

/* o_proj, then the block's residual and MLP wiring. */
static gboolean
layer_rest (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerWeights *lw, HnTensor *x, HnTensor *h,
            HnTensor *h2, HnTensor *o, HnTensor *mo, HnTensor *att, gint64 N, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (hp->diff_attn)
    CK (diff_combine (m, cmd, a, lw, att, N, &att, error));
  if (lw->attn_gate && hp->attn_gate_per_head) /* step3p5: head h's output *= act(gate[h]) */
    {
      gint64 Dv = hp->v_head_dim, H = att->shape[1] / Dv;
      HnTensor *g = scratch_2d (a, ((struct ActsPriv *) a)->attn_g, N, H, error);
      HnTensor *g3 = g ? shaped (a, g, 3, (gint64[]) { N, H, 1 }, error) : NULL;
      HnTensor *a3 = shaped (a, att, 3, (gint64[]) { N, H, Dv }, error);
      CK (g3 && a3);
      CK (hn_op_unary (cmd, g, g, hp->attn_gate_act, error));
      CK (hn_op_mul (cmd, a3, a3, g3, error));
    }
  else if (lw->attn_gate) /* afmoe, laguna, muse_glimmer_text: att *= act(gate projection of the attention's input) */
    {
      HnTensor *g = scratch_2d (a, ((struct ActsPriv *) a)->attn_g, N, att->shape[1], error);
      CK (g);
      CK (hn_op_unary (cmd, g, g, hp->attn_gate_act, error));
      CK (hn_op_mul (cmd, att, att, g, error));
    }
  if (decode_fusable (m, cmd, lw, N))
    {
      HnMatvecNorm n2 = { lw->ln2_w, hp->norm_eps, hp->norm_plus_one };
      CK (hn_op_matvec_add (cmd, x, att, lw->wo, lw->bo, hp->residual_scale, error));
      return !lw->w_down || mlp_matvec (m, cmd, a, lw, x, &n2, N, error); /* hybrids: some layers have no MLP */
    }
  if (lw->attn_sub_w) /* bitnet attn_sub_norm */
    CK (norm (m, cmd, att, att, lw->attn_sub_w, NULL, error));
  /* pre-norm: both residual adds in the o and down projections' epilogues (the tiled kernels add
   * the bias after the scale, so a bias with a residual scale keeps the separate adds) */
  if (hp->block == HN_BLOCK_PRE_NORM)
    {
      if (hp->moa)
        {
          CK (moa_reduce (m, cmd, a, lw, att, o, N, error));
          CK (residual_add (m, cmd, x, o, error));
        }
      else if (hp->residual_scale == 1.0f || !lw->bo)
        CK (hn_op_matmul_add (cmd, x, att, lw->wo, lw->bo, hp->residual_scale, error));
      else
        {
          CK (hn_op_matmul (cmd, o, att, lw->wo, lw->bo, error));
          CK (residual_add (m, cmd, x, o, error));
        }
      return pre_norm_mlp (m, cmd, a, lw, x, h2, mo, N, error);
    }
  CK (hn_op_matmul (cmd, o, att, lw->wo, lw->bo, error));

  /* --- wiring */
  switch (hp->block)
    {
    case HN_BLOCK_PRE_NORM:
      g_assert_not_reached (); /* above */
    case HN_BLOCK_PARALLEL:
      CK (mlp (m, cmd, a, lw, h, mo, NULL, N, error));
      CK (hn_op_add (cmd, x, x, o, error));
      CK (hn_op_add (cmd, x, x, mo, error));
      break;
    case HN_BLOCK_PARALLEL_2NORM:
      CK (mlp (m, cmd, a, lw, h2, mo, NULL, N, error));
      CK (hn_op_add (cmd, x, x, o, error));
      CK (hn_op_add (cmd, x, x, mo, error));
      break;
    case HN_BLOCK_SANDWICH:
      CK (post_norm (m, cmd, o, lw->post_attn_w, error));
      CK (residual_add (m, cmd, x, o, error));
      CK (norm (m, cmd, h2, x, lw->ln2_w, lw->ln2_b, error));
      CK (mlp (m, cmd, a, lw, h2, mo, NULL, N, error));
      CK (post_norm (m, cmd, mo, lw->post_ffn_w, error));
      CK (residual_add (m, cmd, x, mo, error));
      break;
    case HN_BLOCK_POST_NORM:
      CK (norm (m, cmd, o, o, lw->post_attn_w, NULL, error));
      CK (residual_add (m, cmd, x, o, error));
      CK (mlp (m, cmd, a, lw, x, mo, NULL, N, error));
      CK (norm (m, cmd, mo, mo, lw->post_ffn_w, NULL, error));
      CK (residual_add (m, cmd, x, mo, error));
      break;
    case HN_BLOCK_POST_LN:
      CK (hn_op_add (cmd, o, o, x, error));
      CK (norm (m, cmd, x, o, lw->ln1_w, lw->ln1_b, error));
      CK (mlp (m, cmd, a, lw, x, mo, NULL, N, error));
      CK (hn_op_add (cmd, mo, mo, x, error));
      CK (norm (m, cmd, x, mo, lw->ln2_w, lw->ln2_b, error));
      break;
    case HN_BLOCK_ENCODER_POST_NORM:
    case HN_BLOCK_ENCODER_PRE_NORM:
    case HN_BLOCK_SEQ2SEQ_POST_NORM:
    case HN_BLOCK_SEQ2SEQ_PRE_NORM:
    case HN_BLOCK_MAMBA:
      g_assert_not_reached (); /* hn_transformer_hparams_resolve refuses them (encoder.c, seq2seq.c, ssm/mamba.c) */
    }
  return TRUE;
}

gboolean
hn_transformer_record_layer (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int il, const HnLayerKv *kv,
                             int B, int T, int pos0, GError **error)
{
  HnTensor *pos = rows_of (a, a->pos, 0, (gint64) B * T, error);
  CK (pos);
  return record_layer (m, cmd, a, il, kv, B, T, pos0, pos, NULL, error);
}

static gboolean record_head (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int row0, int n, gboolean fuse_norm,
                             GError **error);

gboolean
hn_transformer_flush_layers (int n_tokens)
{
  static gint off = -1;
  if (g_atomic_int_get (&off) < 0)
    g_atomic_int_set (&off, g_strcmp0 (g_getenv ("HN_PREFILL_FLUSH"), "0") == 0);
  return n_tokens >= 64 && !g_atomic_int_get (&off);
}

gboolean
hn_transformer_record_head (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int row0, int n, GError **error)
{
  return record_head (m, cmd, a, row0, n, FALSE, error);
}

/* fuse_norm: the final RMSNorm inside the LM head's matrix-vector kernel where it can (a decode
 * step, whose normed rows `last` nobody reads) */
static gboolean
record_head (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, int row0, int n, gboolean fuse_norm, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  const HnTransformerWeights *W = &m->w;
  if (n > a->last->shape[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "head: %d rows exceed the %" G_GINT64_FORMAT " logit rows",
                   n, a->last->shape[0]);
      return FALSE;
    }
  HnTensor *x = rows_of (a, a->x, row0, n, error), *last = rows_of (a, a->last, 0, n, error);
  HnTensor *lg = rows_of (a, a->logits, 0, n, error);
  CK (x && last && lg);
  float final_eps = hp->final_norm_eps > 0 ? hp->final_norm_eps : hp->norm_eps; /* jetmoe: its own */
  if (fuse_norm && hp->block != HN_BLOCK_POST_LN && !hp->layernorm && !W->final_norm_b && !hp->head_transform &&
      !hn_dtype_is_quant (W->lm_head->dtype) && hn_op_matvec_available (cmd, n))
    {
      HnMatvecNorm fn = { W->final_norm_w, final_eps, hp->norm_plus_one && !hp->final_norm_plain };
      CK (hn_op_matvec_normed (cmd, lg, x, &fn, W->lm_head, W->lm_head_b, error));
    }
  else
    {
      if (hp->final_norm_eps > 0 || (hp->final_norm_plain && !hp->layernorm)) /* jetmoe's eps; a plain weight */
        CK (hn_op_rmsnorm (cmd, last, x, W->final_norm_w, final_eps, HN_NORM_DEFAULT, error));
      else if (hp->block != HN_BLOCK_POST_LN)
        CK (norm (m, cmd, last, x, W->final_norm_w, W->final_norm_b, error));
      else
        CK (hn_op_copy (cmd, last, x, error)); /* openai-gpt: no final norm */
      if (hp->head_transform)
        {
          /* modernbert-decoder: last = norm(act(dense(last))) */
          HnTensor *t = rows_of (a, ((struct ActsPriv *) a)->head_tmp, 0, n, error);
          CK (t);
          CK (hn_op_matmul (cmd, t, last, W->head_dense_w, W->head_dense_b, error));
          CK (hn_op_unary (cmd, t, t, hp->head_act, error));
          CK (norm (m, cmd, last, t, W->head_norm_w, W->head_norm_b, error));
        }
      CK (hn_op_matmul (cmd, lg, last, W->lm_head, W->lm_head_b, error));
    }
  if (hp->logits_scale != 1.0f)
    CK (hn_op_scale (cmd, lg, lg, hp->logits_scale, 0.0f, error));
  if (hp->final_softcap > 0.0f)
    {
      CK (hn_op_scale (cmd, lg, lg, 1.0f / hp->final_softcap, 0.0f, error));
      CK (hn_op_unary (cmd, lg, lg, HN_ACT_TANH, error));
      CK (hn_op_scale (cmd, lg, lg, hp->final_softcap, 0.0f, error));
    }
  return TRUE;
}

gboolean
hn_transformer_record_step (HnTransformer *m, HnCmd *cmd, HnTransformerActs *a, const HnLayerKv *kv,
                            HnTensor *state, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (state->dtype != HN_DTYPE_I32 || state->ndim != 1 || state->n <= HN_STEP_TOKENS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "decode step: state %s must be i32 [%d + capacity]",
                   state->name, HN_STEP_TOKENS);
      return FALSE;
    }
  HnTensor *tok = rows_of (a, state, HN_STEP_TOKEN, 1, error), *pos = rows_of (a, state, HN_STEP_POS, 1, error);
  HnTensor *row = rows_of (a, state, HN_STEP_ROW, 1, error);
  CK (tok && pos && row);
  CK (record_embed (m, cmd, a, tok, pos, 1, error));
  for (int il = 0; il < hp->n_layer; il++)
    CK (record_layer (m, cmd, a, il, &kv[il], 1, 1, 0, pos, row, error));
  CK (record_head (m, cmd, a, 0, 1, TRUE, error));
  HnTensor *lg = rows_of (a, a->logits, 0, 1, error);
  CK (lg);
  CK (hn_op_argmax_scratch (cmd, tok, lg, a->pick_scratch, error));
  struct { guint32 off, cap; } pc = { (guint32) (state->offset / 4), (guint32) (state->n - HN_STEP_TOKENS) };
  HnVkBinding bd[1] = { { state->buf, state->offset, hn_tensor_nbytes (state), TRUE } };
  hn_cmd_set_label (cmd, "decode_advance");
  gboolean ok = hn_cmd_dispatch (cmd, "decode_advance", NULL, 0, bd, 1, &pc, sizeof pc, 1, 1, 1, error);
  hn_cmd_set_label (cmd, NULL);
  return ok;
}

/* ---------------------------------------------------------------- full-sequence logits */

gboolean
hn_transformer_logits (HnTransformer *m, const int32_t *ids, int n, float *logits, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (!hn_transformer_require_whole (m, "full-sequence logits", error))
    return FALSE;
  if (n <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no input ids");
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= hp->vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "input id %d at position %d is outside the vocabulary (0..%d)",
                     ids[i], i, hp->vocab - 1);
        return FALSE;
      }
  if (hp->ctx_limit > 0 && n > hp->ctx_limit)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%d tokens: %s scales its queries (llama_4_scaling_beta) past %d tokens, which is not built", n,
                   hp->arch->model_type, hp->ctx_limit);
      return FALSE;
    }
  if (hp->learned_pos && n + hp->pos_offset > m->w.pos_embed->shape[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%d tokens exceed the %" G_GINT64_FORMAT " learned positions",
                   n, m->w.pos_embed->shape[0] - hp->pos_offset);
      return FALSE;
    }
  g_autoptr (HnTransformerActs) a = hn_transformer_acts_new (m, n, n, error);
  if (!a)
    return FALSE;
  /* one K/V scratch that every layer reuses; one per layer when their K/V heads or head dims differ */
  int n_kv = hp->layer_n_kv_head || hp->layer_head_dim ? hp->n_layer : 1;
  g_autoptr (GPtrArray) kvs = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  g_autofree HnLayerKv *kv = g_new0 (HnLayerKv, n_kv);
  for (int i = 0; i < n_kv; i++)
    {
      gint64 kvh = hn_transformer_layer_kv_heads (hp, i);
      gint64 kvd_shape[4] = { 1, n, kvh, hn_transformer_layer_head_dim (hp, i) };
      gint64 vd_shape[4] = { 1, n, kvh, hn_transformer_layer_v_head_dim (hp, i) };
      kv[i].k = hn_tensor_new_named (m->ctx, "logits.k", HN_DTYPE_F32, 4, kvd_shape, error);
      kv[i].v = kv[i].k ? hn_tensor_new_named (m->ctx, "logits.v", HN_DTYPE_F32, 4, vd_shape, error) : NULL;
      if (kv[i].k)
        g_ptr_array_add (kvs, kv[i].k);
      if (!kv[i].v)
        return FALSE;
      g_ptr_array_add (kvs, kv[i].v);
    }
  g_autofree int32_t *pos = g_new (int32_t, n);
  for (int i = 0; i < n; i++)
    pos[i] = i + (hp->learned_pos ? hp->pos_offset : 0);
  g_autoptr (HnTensor) ids_t = hn_tensor_view_rows (a->ids, 0, n, error);
  g_autoptr (HnTensor) pos_t = ids_t ? hn_tensor_view_rows (a->pos, 0, n, error) : NULL;
  if (!pos_t || !hn_tensor_upload_i32 (ids_t, ids, (gsize) n, error) || !hn_tensor_upload_i32 (pos_t, pos, (gsize) n, error))
    return FALSE;
  g_autoptr (HnCmd) cmd = hn_cmd_new (m->ctx, error);
  if (!cmd)
    return FALSE;
  gboolean ok = hn_transformer_record_embed (m, cmd, a, n, error);
  for (int il = 0; ok && il < hp->n_layer; il++)
    ok = hn_transformer_record_layer (m, cmd, a, il, &kv[n_kv > 1 ? il : 0], 1, n, 0, error);
  ok = ok && hn_transformer_record_head (m, cmd, a, 0, n, error);
  ok = ok && hn_cmd_submit_wait (cmd, error);
  hn_transformer_acts_drop_views (a);
  if (!ok)
    return FALSE;
  return hn_tensor_download_f32 (a->logits, logits, (gsize) n * hp->vocab, error);
}
