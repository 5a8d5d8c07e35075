/* The training graph (see train-graph.h): forward with saved activations,
 * explicit per-layer backward, gradients, optimizer updates. Every buffer
 * and view is made once in hn_train_graph_new; a step only records. */
#include "train/train-graph.h"

#include <math.h>
#include <string.h>

#include "base/hn-error.h"

#define CK(expr)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!(expr))                                                                                                     \
        return FALSE;                                                                                                  \
    }                                                                                                                  \
  while (0)

enum {
  P_Q = HN_LORA_PROJ_Q, P_K = HN_LORA_PROJ_K, P_V = HN_LORA_PROJ_V, P_O = HN_LORA_PROJ_O,
  P_GATE = HN_LORA_PROJ_GATE, P_UP = HN_LORA_PROJ_UP, P_DOWN = HN_LORA_PROJ_DOWN, N_PROJ = HN_LORA_N_PROJ
};

/* One LoRA-adapted module: u = s·x·Aᵀ is saved; each output (one, or q/k/v
 * of a fused projection) adds u·B_pᵀ. */
typedef struct {
  HnLoraModule *host;
  float scale;
  int in_proj;                 /* which projection's input x is (P_Q for q/k/v, P_GATE for gate/up) */
  HnTensor *A, *B;             /* device [r, in], [out, r] */
  int pa, pb;                  /* param indices */
  HnTensor *u, *du;            /* [N, r] saved and scratch */
  int n_out;
  int out_proj[3];
  HnTensor *Bv[3], *dBv[3];    /* row views of B / its gradient per output */
} LoraSite;

typedef struct {
  HnTensor *h, *h2;            /* [N, C] normed inputs */
  HnTensor *h16, *h2_16, *att16, *act16; /* f16 copies of the matmuls' inputs (f16ops) */
  HnTensor *x_mid;             /* [N, C] pre-norm: x + attention */
  HnTensor *q_lin, *k_lin, *v; /* [N, H*D], [N, KVH*D] projections */
  HnTensor *qkv;               /* f16ops, qd == kvd: [3N, qd], q_lin, k_lin and v its row blocks (else NULL) */
  HnTensor *q_nrm, *k_nrm;     /* after q/k norm (NULL without) */
  HnTensor *q, *k;             /* what attention reads (after rope) */
  HnTensor *att;               /* [N, H*D] */
  HnTensor *gate, *up, *act;   /* [N, F] (gate [N, 2F] when fused) */
  LoraSite *site[N_PROJ];      /* adapter per projection (shared by fused q/k/v) */
  /* MoE: router logits and routing weights [N, E], chosen experts [N, k]; per expert its gate,
   * up, activation [N, F] and output [N, C] (every expert runs; unchosen ones weigh 0) */
  HnTensor *route, *route_w, *topi;
  HnTensor **egate, **eup, **eact, **ey;
} LayerActs;

struct _HnTrainGraph {
  HnTransformer *model;
  const HnTransformerHParams *hp;
  const HnTransformerWeights *W;
  HnVkContext *ctx;
  int B, T;
  gint64 N;
  HnLoraAdapter *adapter;
  gboolean checkpointing;      /* layers share L[0]'s activation tensors (see HnTrainGraphOptions) */
  /* fp16 autocast on the cooperative-matrix-2 kernel (full training, no MoE): every matmul reads f16
   * operands from memory: the weights' f16 copies (HnTrainParam.w16, refreshed by the optimizer
   * step), the forward's inputs rounded once into h16 / att16 / h2_16 / act16 / hf16 (kept for the
   * weight gradients, as autocast saves them), and dy rounded once into dy16 for both of its
   * products. The same roundings as the per-matmul copies they replace, so the same results. */
  gboolean f16ops;
  /* LoRA on a frozen 16-bit base whose matmuls read f16 operands (matmul_cm2), no adapter on the
   * MLP: ln2's output and the MLP's activation, which nothing else reads, are written as f16 only
   * (h2_16, act16, one pair for all layers): the bits the matmuls' own f16 copies of them had,
   * without those copies (the same rounding: the same losses); in the backward, the gate and up
   * gradients likewise (dgate16, dup16). HN_LORA_F16_ACTS=0: off */
  gboolean acts16;
  HnTensor *dy16, *hf16, *dw_tmp;
  /* f16ops with q, k and v projections: per layer their f16 weight copies stacked [qd + 2 kvd, C]
   * and their gradients stacked the same way (the parameters' w16 and g are row views), so that
   * the backward takes dh and the three weight gradients in one matmul each */
  HnTensor **qkv_w16, **qkv_g;
  /* ... and, where the layer's q, k and v are row blocks of one tensor (LayerActs.qkv), their biases
   * stacked [qd + 2 kvd] (copied from the parameters in each forward) or NULL where there are none:
   * the three projections then run as one batched matmul (hn_op_matmul_stacked) */
  HnTensor **qkv_b, **qkv_b_rows;
  gboolean *qkv_stacked;
  double loss_scale;           /* hn_train_graph_set_loss_scale */
  gint64 record_us;            /* host time recording forward + backward, summed (hn_train_graph_get_record_us) */
  GPtrArray *owned;            /* every tensor and view we made */
  GPtrArray *params;           /* HnTrainParam* */
  GHashTable *grad_of;         /* HnTensor* (weight) -> HnTrainParam* */
  GPtrArray *sites;            /* LoraSite* */
  /* cmd: forward + backward, recorded once and replayed each micro step
   * (step_ready) while nothing else records into it (an evaluation's forward
   * does, and a change of profiling; HN_TRAIN_REPLAY=0 records every step);
   * aux: setup, zeroing, the gradient norm and the optimizer step. */
  HnCmd *cmd, *aux;
  gboolean step_ready, step_profiled, replay;
  /* with replay: the zeroing of the gradients and the AdamW step recorded
   * once each (zero, opt; the optimizer's per-step scalars in opt_scalars,
   * decaying parameters at index 0, the others at 1; opt_key the settings
   * it was recorded for) */
  HnCmd *zero, *opt;
  HnTensor *opt_scalars;
  double opt_key[4];
  /* inputs */
  HnTensor *ids, *pos, *neg_pos, *targets, *row_scale, *loss_rows;
  gint32 *pos_host;
  /* the token and position ids grouped by value for the embedding gradients
   * (hn_embedding_groups: the tokens' per batch in upload_batch) */
  HnTensor *id_groups, *pos_groups;
  /* activations */
  HnTensor **resid;            /* [n_layer + 1] of [N, C] */
  LayerActs *L;
  HnTensor *o, *mo, *pe;       /* [N, C] scratch */
  HnTensor *hf, *logits;       /* [N, C], [head_rows, V] */
  /* The LM head in row chunks (hn_train_graph_head_rows): per chunk the
   * views of hf, dh, targets, loss rows, row scales and logits */
  gint64 head_rows;
  guint n_chunks;
  HnTensor **ch_hf, **ch_dh, **ch_targets, **ch_loss, **ch_scale, **ch_logits;
  /* Each chunk's loss and logits' gradient from one kernel (hn_op_cross_entropy_grad;
   * HN_CE_FUSED=0: the two of before). Where the frozen head's input gradient runs on
   * matmul_cm2, which reads an f16 A (it would round the f32 gradient to f16 first), that
   * gradient is written as f16 into ch_lg16's rows instead (HN_CE_F16=0: f32, then rounded;
   * HN_CE_F16=1: on any matmul, which widens it again: a test of this path off the tensor cores) */
  gboolean ce_fused;
  HnTensor **ch_lg16;
  /* The unchunked head under f16ops: the loss and the logits' f16 gradient of
   * each lm_rows () chunk from one kernel in the backward (cross_entropy_grad:
   * the logits read twice, f16 written), instead of the forward's loss, an
   * in-place f32 gradient and its f16 copy (the logits read six times, written
   * twice). Not with a head bias (its gradient sums the f32 rows) or a vocabulary
   * that is not whole 4-column groups; HN_CE_IN_BACK=0: the three passes. */
  gboolean ce_in_back;
  /* 4-D views for attention */
  HnTensor **q4, **k4, **v4, **att4;
  /* backward scratch */
  HnTensor *dres, *dh, *dh2, *dq, *dk, *dv, *dq2, *dk2, *datt, *datt4, *dq4, *dk4, *dv4;
  HnTensor *dgate, *dup, *dact;
  HnTensor *dgate16, *dup16;   /* acts16: the f16 gate/up gradients */
  /* MoE backward: one column [N, 1], an expert's dy and a product [N, C], its gate/up/act
   * gradients [N, F], routing-weight gradients [E, N] and [N, E], router-logit gradients [N, E] */
  HnTensor *col, *edy, *eprod, *edgate, *edup, *edact, *dwT, *dw, *dl;
  HnTensor *stats, *qk_stats, *att_stats;
  /* Flash attention (tensor cores, f16 operands) in forward and backward:
   * each layer's row log-sum-exp [N·H] from the forward (see attn_flash) */
  gboolean flash;
  HnTensor **lse;
  HnTensor *q_rows, *k_rows, *dq_rows, *dk_rows, *dq2_rows, *dk2_rows; /* [N*H, D] views for q/k norm */
  HnTensor **q_lin_rows, **k_lin_rows;
  HnTensor *partials;
  guint n_partials;
  gint64 n_trainable;
};

/* Rows of the logits' gradient rounded to f16 at a time in the LM head's
 * backward (lm_back_f16); HN_TRAIN_LM_ROWS=n takes another count (fewer: a
 * test of the chunks; more: a measurement, at V x n halves of scratch). */
static gint64
lm_rows (void)
{
  const char *v = g_getenv ("HN_TRAIN_LM_ROWS");
  gint64 n = v ? g_ascii_strtoll (v, NULL, 10) : 0;
  return n > 0 && n <= 65536 ? n : 2048;
}

static HnTensor *
own (HnTrainGraph *g, HnTensor *t)
{
  if (t)
    g_ptr_array_add (g->owned, t);
  return t;
}

static HnTensor *
new2d (HnTrainGraph *g, const char *name, gint64 rows, gint64 cols, GError **error)
{
  return own (g, hn_tensor_new_named (g->ctx, name, HN_DTYPE_F32, 2, (gint64[]) { rows, cols }, error));
}

static HnTensor *
reshape (HnTrainGraph *g, HnTensor *t, int ndim, const gint64 *shape, GError **error)
{
  return own (g, hn_tensor_reshape (t, ndim, shape, error));
}

static HnTensor *
rows_view (HnTrainGraph *g, HnTensor *t, gint64 row0, gint64 n, GError **error)
{
  return own (g, hn_tensor_view_rows (t, row0, n, error));
}

static void
param_free (gpointer p)
{
  HnTrainParam *tp = p;
  g_free (tp->name);
  g_clear_pointer (&tp->w, hn_tensor_unref);
  g_clear_pointer (&tp->g, hn_tensor_unref);
  g_clear_pointer (&tp->m, hn_tensor_unref);
  g_clear_pointer (&tp->v, hn_tensor_unref);
  g_clear_pointer (&tp->w16, hn_tensor_unref);
  g_free (tp);
}

static HnTrainParam *
param_add (HnTrainGraph *g, HnTensor *w, const char *name, GError **error)
{
  if (!w)
    return NULL;
  HnTrainParam *existing = g_hash_table_lookup (g->grad_of, w);
  if (existing)
    return existing; /* tied weights: one parameter, one gradient */
  if (w->dtype != HN_DTYPE_F32)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "training %s: weight stored as %s; full training needs f32 weights (LoRA works with f16/bf16 bases)",
                   name, hn_dtype_name (w->dtype));
      return NULL;
    }
  HnTrainParam *p = g_new0 (HnTrainParam, 1);
  p->name = g_strdup (name);
  p->w = hn_tensor_ref (w);
  g_autofree char *gn = g_strdup_printf ("grad %s", name);
  g_autofree char *mn = g_strdup_printf ("adam.m %s", name);
  g_autofree char *vn = g_strdup_printf ("adam.v %s", name);
  p->g = hn_tensor_new_named (g->ctx, gn, HN_DTYPE_F32, w->ndim, w->shape, error);
  p->m = p->g ? hn_tensor_new_named (g->ctx, mn, HN_DTYPE_F32, w->ndim, w->shape, error) : NULL;
  p->v = p->m ? hn_tensor_new_named (g->ctx, vn, HN_DTYPE_F32, w->ndim, w->shape, error) : NULL;
  if (!p->v)
    {
      param_free (p);
      return NULL;
    }
  /* transformers: no decay for biases and norm weights, i.e. the 1-D ones */
  p->decay = w->ndim >= 2 && hn_param_wants_decay (name);
  g_ptr_array_add (g->params, p);
  g_hash_table_insert (g->grad_of, w, p);
  g->n_trainable += w->n;
  return p;
}

/* The gradient of a weight, or NULL when it is frozen. */
static HnTensor *
G (HnTrainGraph *g, HnTensor *w)
{
  if (!w)
    return NULL;
  HnTrainParam *p = g_hash_table_lookup (g->grad_of, w);
  return p ? p->g : NULL;
}

/* The tensor the matmuls read as weight w: its f16 copy under f16ops. */
static HnTensor *
W16 (HnTrainGraph *g, HnTensor *w)
{
  HnTrainParam *p = w && g->f16ops ? g_hash_table_lookup (g->grad_of, w) : NULL;
  return p && p->w16 ? p->w16 : w;
}

static HnTensor *
new16 (HnTrainGraph *g, const char *name, gint64 rows, gint64 cols, GError **error)
{
  return own (g, hn_tensor_new_named (g->ctx, name, HN_DTYPE_F16, 2, (gint64[]) { rows, cols }, error));
}

/* A layer's q, k and v projections: under f16ops with q and k/v of one width (not shared with layer
 * 0), row blocks of one [3N, qd] tensor (LayerActs.qkv), which one batched matmul writes. */
static gboolean
qkv_new (HnTrainGraph *g, LayerActs *a, const LayerActs *a0, gboolean share_qk, gint64 qd, gint64 kvd,
         GError **error)
{
  gint64 N = g->N;
  if (g->f16ops && qd == kvd && !share_qk && g_getenv ("HN_TRAIN_NO_QKV_STACK") == NULL)
    return (a->qkv = new2d (g, "train.qkv", 3 * N, qd, error)) && (a->q_lin = rows_view (g, a->qkv, 0, N, error)) &&
           (a->k_lin = rows_view (g, a->qkv, N, N, error)) && (a->v = rows_view (g, a->qkv, 2 * N, N, error));
  return (a->q_lin = share_qk ? a0->q_lin : new2d (g, "train.q", N, qd, error)) &&
         (a->k_lin = share_qk ? a0->k_lin : new2d (g, "train.k", N, kvd, error)) &&
         (a->v = new2d (g, "train.v", N, kvd, error));
}

static void
site_free (gpointer p)
{
  g_free (p);
}

void
hn_train_graph_free (HnTrainGraph *g)
{
  if (!g)
    return;
  g_clear_pointer (&g->cmd, hn_cmd_free);
  g_clear_pointer (&g->aux, hn_cmd_free);
  g_clear_pointer (&g->zero, hn_cmd_free);
  g_clear_pointer (&g->opt, hn_cmd_free);
  g_clear_pointer (&g->params, g_ptr_array_unref);
  g_clear_pointer (&g->grad_of, g_hash_table_unref);
  g_clear_pointer (&g->sites, g_ptr_array_unref);
  g_clear_pointer (&g->owned, g_ptr_array_unref);
  g_free (g->resid);
  for (int il = 0; g->L && il < (g->checkpointing ? 1 : g->hp->n_layer); il++)
    {
      g_free (g->L[il].egate); /* the tensors are in g->owned */
      g_free (g->L[il].eup);
      g_free (g->L[il].eact);
      g_free (g->L[il].ey);
    }
  g_free (g->L);
  g_free (g->q4);
  g_free (g->k4);
  g_free (g->v4);
  g_free (g->att4);
  g_free (g->lse);
  g_free (g->ch_hf);
  g_free (g->ch_dh);
  g_free (g->ch_targets);
  g_free (g->ch_loss);
  g_free (g->ch_scale);
  g_free (g->ch_logits);
  g_free (g->ch_lg16);
  g_free (g->q_lin_rows);
  g_free (g->k_lin_rows);
  g_free (g->qkv_w16);
  g_free (g->qkv_g);
  g_free (g->qkv_b);
  g_free (g->qkv_b_rows);
  g_free (g->qkv_stacked);
  g_free (g->pos_host);
  g_free (g);
}

guint
hn_train_graph_get_n_params (HnTrainGraph *g)
{
  return g->params->len;
}

HnTrainParam *
hn_train_graph_get_param (HnTrainGraph *g, guint i)
{
  return g_ptr_array_index (g->params, i);
}

gint64
hn_train_graph_get_n_trainable (HnTrainGraph *g)
{
  return g->n_trainable;
}

static gboolean
unsupported (const char *what, GError **error)
{
  g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training: %s is not supported by the training graph yet", what);
  return FALSE;
}

static gboolean
check_supported (HnTrainGraph *g, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  if (hp->block != HN_BLOCK_PRE_NORM && hp->block != HN_BLOCK_PARALLEL && hp->block != HN_BLOCK_PARALLEL_2NORM)
    return unsupported (hn_block_kind_name (hp->block), error);
  if (hp->diff_attn)
    return unsupported ("differential attention (diffllama)", error);
  if (hp->layer_src) /* the graph runs only some of the checkpoint's layers */
    return unsupported ("a model with skipped cross-attention layers (mllama_text_model)", error);
  if (hp->moa)
    return unsupported ("mixture-of-attention-heads layers (jetmoe)", error);
  if (hp->head_transform || hp->no_first_attn_norm)
    return unsupported ("modernbert-decoder's prediction head and first layer", error);
  if (hp->clip_qkv > 0)
    return unsupported ("clip_qkv", error);
  if (hp->qk_norm_full)
    return unsupported ("q/k norm over the whole projection", error);
  if (hp->final_softcap > 0)
    return unsupported ("final logit soft-capping", error);
  if (hp->residual_scale != 1.0f)
    return unsupported ("a residual multiplier", error);
  if (hp->embed_norm)
    return unsupported ("an embedding LayerNorm", error);
  if (hp->head_dim > 256)
    return unsupported ("a head dim above 256", error);
  /* the router backward built here is that of a softmax -> top-k -> renormalised router (mixtral,
   * qwen3_moe with norm_topk_prob) without a shared expert */
  if (hp->n_experts > 0 && (hp->moe_route != HN_MOE_ROUTE_SOFTMAX_TOPK || !hp->moe_norm_topk || hp->shared_ffn > 0 ||
                            hp->moe_n_group > 1 || hp->moe_scale != 1.0f || hp->moe_first_dense > 0 ||
                            hp->moe_last_layer != hp->n_layer - 1 || hp->moe_layer_interval != 1 ||
                            hp->moe_norm_min > 0))
    return unsupported ("this mixture-of-experts router (only softmax / top-k / renormalised routers without a "
                        "shared expert train)", error);
  if (hp->n_experts > 0 && hp->moe_train_jitter > 0)
    return unsupported ("router_jitter_noise (transformers multiplies the router input by random noise)", error);
  if (hp->n_experts > 0 && hp->moe_aux_loss)
    return unsupported ("output_router_logits (the load-balancing auxiliary loss)", error);
  if (hp->mla)
    return unsupported ("multi-head latent attention", error);
  if (hp->attn_sinks)
    return unsupported ("attention sinks", error);
  /* muse_glimmer_text is refused above by its sandwich block; step3p5 by its router, and by name here */
  if (hp->attn_gate_act != HN_ACT_IDENTITY)
    return unsupported (hp->attn_gate_per_head ? "a per-head attention output gate (step3p5's g_proj)"
                                               : "an attention output gate", error);
  if (hp->layer_glu_limit || hp->layer_expert_glu_limit)
    return unsupported ("a clamped SwiGLU (step3p5's swiglu_limits)", error);
  if (hp->final_norm_plain || hp->post_norm_eps > 0)
    return unsupported ("muse_glimmer_text's norms (a plain-weight final norm, post_norm_eps)", error);
  return TRUE;
}

/* ---------------------------------------------------------------- LoRA sites */

/* The module names per family live with the adapter format (lora.h). */
typedef HnLoraModuleMap ModuleMap;

static gboolean
lora_modules (const HnTransformerHParams *hp, const char **prefix, const ModuleMap **map, guint *n, GError **error)
{
  return hn_lora_module_map (hp, prefix, map, n, error);
}

static HnTensor *
proj_weight (const HnLayerWeights *lw, int p)
{
  return hn_lora_proj_weight (lw, (HnLoraProj) p);
}

static gboolean
setup_lora (HnTrainGraph *g, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  HnLoraAdapter *ad = g->adapter;
  const char *prefix;
  const ModuleMap *map;
  guint n_map;
  CK (lora_modules (hp, &prefix, &map, &n_map, error));
  float scale = (float) hn_lora_config_scaling (&ad->config);
  g_autoptr (GHashTable) seen = g_hash_table_new (g_direct_hash, g_direct_equal);
  for (int il = 0; il < hp->n_layer; il++)
    for (guint mi = 0; mi < n_map; mi++)
      {
        g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
        HnLoraModule *hm = hn_lora_adapter_lookup (ad, path);
        if (!hm)
          continue;
        g_hash_table_add (seen, hm);
        const HnLayerWeights *lw = &g->W->layers[il];
        gint64 out_total = 0;
        for (int k = 0; k < map[mi].n; k++)
          {
            HnTensor *w = proj_weight (lw, map[mi].proj[k]);
            if (!w)
              {
                g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "LoRA: the model has no %s", path);
                return FALSE;
              }
            out_total += w->shape[0];
          }
        HnTensor *w0 = proj_weight (lw, map[mi].proj[0]);
        if (hm->in != w0->shape[1] || hm->out != out_total)
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                         "LoRA: %s is [in %d, out %d] in the adapter but [in %" G_GINT64_FORMAT ", out %" G_GINT64_FORMAT
                         "] in the model", path, hm->in, hm->out, w0->shape[1], out_total);
            return FALSE;
          }
        LoraSite *s = g_new0 (LoraSite, 1);
        g_ptr_array_add (g->sites, s);
        s->host = hm;
        s->scale = scale;
        s->n_out = map[mi].n;
        int r = hm->r;
        g_autofree char *an = hn_lora_tensor_name (path, FALSE), *bn = hn_lora_tensor_name (path, TRUE);
        s->A = own (g, hn_tensor_new_named (g->ctx, an, HN_DTYPE_F32, 2, (gint64[]) { r, hm->in }, error));
        s->B = s->A ? own (g, hn_tensor_new_named (g->ctx, bn, HN_DTYPE_F32, 2, (gint64[]) { hm->out, r }, error)) : NULL;
        CK (s->B);
        CK (hn_tensor_upload_f32 (s->A, hm->a, (gsize) r * hm->in, error));
        CK (hn_tensor_upload_f32 (s->B, hm->b, (gsize) hm->out * r, error));
        HnTrainParam *pa = param_add (g, s->A, an, error);
        HnTrainParam *pb = pa ? param_add (g, s->B, bn, error) : NULL;
        CK (pb);
        pa->decay = pb->decay = TRUE; /* PEFT: lora weights take the optimizer's decay */
        s->u = new2d (g, "lora.u", g->N, r, error);
        s->du = s->u ? new2d (g, "lora.du", g->N, r, error) : NULL;
        CK (s->du);
        gint64 row0 = 0;
        for (int k = 0; k < s->n_out; k++)
          {
            int p = map[mi].proj[k];
            gint64 rows = proj_weight (lw, p)->shape[0];
            s->out_proj[k] = p;
            s->Bv[k] = rows_view (g, s->B, row0, rows, error);
            s->dBv[k] = s->Bv[k] ? rows_view (g, pb->g, row0, rows, error) : NULL;
            CK (s->dBv[k]);
            row0 += rows;
            g->L[il].site[p] = s;
          }
        s->in_proj = map[mi].proj[0];
      }
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *hm = g_ptr_array_index (ad->modules, i);
      if (!g_hash_table_contains (seen, hm))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "LoRA: adapter module %s is not an adaptable projection of this %s model", hm->module,
                       hp->arch->model_type);
          return FALSE;
        }
    }
  if (g->sites->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "LoRA: the adapter adapts no module of this model");
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- setup */

static gboolean
setup_params (HnTrainGraph *g, GError **error)
{
  const HnTransformerWeights *W = g->W;
  const HnTransformerHParams *hp = g->hp;
  if (W->tok_embed && !param_add (g, W->tok_embed, W->tok_embed->name, error))
    return FALSE;
  if (W->pos_embed && !param_add (g, W->pos_embed, W->pos_embed->name, error))
    return FALSE;
  for (int il = 0; il < hp->n_layer; il++)
    {
      const HnLayerWeights *lw = &W->layers[il];
      HnTensor *all[] = { lw->ln1_w, lw->ln1_b, lw->wq, lw->bq, lw->wk, lw->bk, lw->wv, lw->bv, lw->q_norm_w,
                          lw->k_norm_w, lw->wo, lw->bo, lw->ln2_w, lw->ln2_b, lw->w_gate, lw->b_gate, lw->w_up,
                          lw->b_up, lw->w_down, lw->b_down, lw->post_attn_w, lw->post_ffn_w };
      for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
        if (all[i] && !param_add (g, all[i], all[i]->name, error))
          return FALSE;
      if (lw->router && !param_add (g, lw->router, lw->router->name, error))
        return FALSE;
      for (int i = 0; lw->router && i < 3 * hp->n_experts; i++)
        if (!param_add (g, lw->experts[i], lw->experts[i]->name, error))
          return FALSE;
    }
  HnTensor *tail[] = { W->final_norm_w, W->final_norm_b, W->lm_head, W->lm_head_b };
  for (gsize i = 0; i < G_N_ELEMENTS (tail); i++)
    if (tail[i] && !param_add (g, tail[i], tail[i]->name, error))
      return FALSE;
  return TRUE;
}

static gboolean
moe_acts_new (HnTrainGraph *g, LayerActs *a, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  gint64 N = g->N, E = hp->n_experts, Fe = hp->moe_ffn;
  a->route = new2d (g, "train.moe.route", N, E, error);
  a->route_w = a->route ? new2d (g, "train.moe.route_w", N, E, error) : NULL;
  a->topi = a->route_w ? own (g, hn_tensor_new_named (g->ctx, "train.moe.topi", HN_DTYPE_I32, 2,
                                                      (gint64[]) { N, hp->n_experts_used }, error))
                       : NULL;
  CK (a->topi);
  a->egate = g_new0 (HnTensor *, E);
  a->eup = g_new0 (HnTensor *, E);
  a->eact = g_new0 (HnTensor *, E);
  a->ey = g_new0 (HnTensor *, E);
  for (gint64 e = 0; e < E; e++)
    CK ((a->egate[e] = new2d (g, "train.moe.gate", N, Fe, error)) &&
        (a->eup[e] = new2d (g, "train.moe.up", N, Fe, error)) &&
        (a->eact[e] = new2d (g, "train.moe.act", N, Fe, error)) &&
        (a->ey[e] = new2d (g, "train.moe.y", N, hp->hidden, error)));
  return TRUE;
}

guint
hn_train_graph_shares (const HnTransformerHParams *hp, HnLoraAdapter *adapter, int il)
{
  guint sh = hp->rope && !hp->qk_norm_head ? HN_TRAIN_SHARE_QK : 0;
  if (!adapter || g_getenv ("HN_TRAIN_NO_SHARE") != NULL)
    return g_getenv ("HN_TRAIN_NO_SHARE") ? 0 : sh;
  const char *prefix;
  const HnLoraModuleMap *map;
  guint n_map;
  if (!hn_lora_module_map (hp, &prefix, &map, &n_map, NULL))
    return sh; /* setup_lora names the problem */
  guint adapted = 0;
  for (guint mi = 0; mi < n_map; mi++)
    {
      g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
      if (hn_lora_adapter_lookup (adapter, path))
        for (int k = 0; k < map[mi].n; k++)
          adapted |= 1u << map[mi].proj[k];
    }
  if (!(adapted & (1u << P_DOWN)))
    sh |= HN_TRAIN_SHARE_ACT;
  if (!(adapted & ((1u << P_GATE) | (1u << P_UP))))
    sh |= HN_TRAIN_SHARE_H2;
  return sh;
}

gint64
hn_train_graph_head_rows (gint64 N, gint64 V, gboolean lora)
{
  const char *e = g_getenv ("HN_TRAIN_HEAD_ROWS");
  gint64 forced = e ? g_ascii_strtoll (e, NULL, 10) : 0;
  if (forced > 0)
    return MIN (forced, N);
  gint64 cap = (gint64) 32 << 20;
  if (!lora || N * V <= cap)
    return N;
  gint64 chunks = (N * V + cap - 1) / cap;
  return (N + chunks - 1) / chunks;
}

HnTrainGraph *
hn_train_graph_new (HnTransformer *model, int batch, int seq_len, HnLoraAdapter *adapter, GError **error)
{
  return hn_train_graph_new_full (model, batch, seq_len, adapter, NULL, error);
}

/* Flash attention on the tensor cores in training (hn_attention_flash_ok:
 * NVIDIA cooperative matrix 2, head dim 64/128, no soft-cap or ALiBi) where
 * PyTorch autocast would run attention in 16 bits: --precision fp16 (fp16
 * autocast, HnTrainGraphOptions.fp16) and LoRA over a 16-bit base (its
 * frozen projections already run on the tensor cores in f16). Training in
 * fp32 keeps the exact kernels unless HN_TRAIN_FLASH_ATTN=1
 * asks for it (a measurement aid); HN_NO_FLASH_ATTN=1 turns it off. The
 * sliding-window layers go along (the flash kernels mask windows too). */
static gboolean
attn_flash (HnTrainGraph *g, HnLoraAdapter *adapter, gboolean fp16)
{
  const HnTransformerHParams *hp = g->hp;
  const HnTensor *wq = g->W->layers[0].wq;
  gboolean want = fp16 || (adapter && wq && wq->dtype != HN_DTYPE_F32) || g_strcmp0 (g_getenv ("HN_TRAIN_FLASH_ATTN"), "1") == 0;
  HnAttentionParams ap = { 0 };
  ap.softcap = hp->attn_softcap;
  ap.causal = TRUE;
  ap.window = hp->sliding_window;
  ap.alibi_slopes = g->W->alibi_slopes;
  return want && hn_attention_flash_ok (g->ctx, hp->head_dim, hp->head_dim, &ap);
}

HnTrainGraph *
hn_train_graph_new_full (HnTransformer *model, int batch, int seq_len, HnLoraAdapter *adapter,
                         const HnTrainGraphOptions *opts, GError **error)
{
  if (!hn_transformer_require_whole (model, "training", error))
    return NULL;
  const HnTransformerHParams *mhp = hn_transformer_get_hparams (model);
  if (mhp->layer_mixer)
    {
      /* a hybrid's Mamba, short-convolution and gated DeltaNet layers have no backward in this graph */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: training a hybrid (attention + Mamba, short-convolution or linear-attention layers) is not "
                   "built yet",
                   mhp->arch->model_type);
      return NULL;
    }
  g_autoptr (HnTrainGraph) g = g_new0 (HnTrainGraph, 1);
  g->model = model;
  g->hp = hn_transformer_get_hparams (model);
  g->W = hn_transformer_get_weights (model);
  g->ctx = hn_transformer_get_context (model);
  g->B = batch;
  g->T = seq_len;
  g->N = (gint64) batch * seq_len;
  g->adapter = adapter;
  g->checkpointing = opts && opts->checkpointing;
  g->loss_scale = 1.0;
  g->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  g->params = g_ptr_array_new_with_free_func (param_free);
  g->grad_of = g_hash_table_new (g_direct_hash, g_direct_equal);
  g->sites = g_ptr_array_new_with_free_func (site_free);
  const HnTransformerHParams *hp = g->hp;
  if (batch < 1 || seq_len < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "training: batch %d x sequence %d is empty", batch, seq_len);
      return NULL;
    }
  if (hp->learned_pos && seq_len + hp->pos_offset > g->W->pos_embed->shape[0])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "training: --seq-len %d exceeds the model's %" G_GINT64_FORMAT " learned positions", seq_len,
                   g->W->pos_embed->shape[0] - hp->pos_offset);
      return NULL;
    }
  if (!check_supported (g, error))
    return NULL;
  gint64 N = g->N, C = hp->hidden, H = hp->n_head, KVH = hp->n_kv_head, D = hp->head_dim;
  gint64 qd = H * D, kvd = KVH * D, F = hp->ffn, V = hp->vocab;
  int nl = hp->n_layer;
  const HnLayerWeights *lw0 = &g->W->layers[0];
  gboolean fused_gu = lw0->w_gate && !lw0->w_up, gated = lw0->w_gate != NULL;
  g->L = g_new0 (LayerActs, nl);
  g->resid = g_new0 (HnTensor *, nl + 1);
  g->q4 = g_new0 (HnTensor *, nl);
  g->k4 = g_new0 (HnTensor *, nl);
  g->v4 = g_new0 (HnTensor *, nl);
  g->att4 = g_new0 (HnTensor *, nl);
  g->q_lin_rows = g_new0 (HnTensor *, nl);
  g->k_lin_rows = g_new0 (HnTensor *, nl);

  if (!(g->cmd = hn_cmd_new (g->ctx, error)) || !(g->aux = hn_cmd_new (g->ctx, error)))
    return NULL;
  hn_cmd_set_reusable (g->cmd);
  g->replay = g_strcmp0 (g_getenv ("HN_TRAIN_REPLAY"), "0") != 0;
  if (opts && opts->fp16)
    hn_cmd_set_autocast (g->cmd, HN_AUTOCAST_F16);
  /* f16ops where the matmuls read f16 operands from memory: the cooperative-matrix-2 kernel, and
   * the scalar kernel (which widens an f16 A first: slow, but it is the CI's check of this path);
   * the KHR cooperative-matrix kernel reads f32 activations faster as they are */
  g->f16ops = opts && opts->fp16 && !adapter && hp->n_experts == 0 &&
              (hn_vk_context_has_coopmat2 (g->ctx, NULL) || !hn_vk_context_has_coopmat (g->ctx)) &&
              g_strcmp0 (g_getenv ("HN_TRAIN_F16_COPIES"), "0") != 0;
  /* f16ops without a gate: the up projection stored f16 as autocast keeps it, read by the activation
   * and by its gradient's fused pass only (so not without that pass: HN_ACT_BACK_FUSED=0; HN_UP_F16=0:
   * f32); its f32 gradient dup is then never made */
  gboolean up16 = g->f16ops && !gated && hp->ffn % 2 == 0 && g_strcmp0 (g_getenv ("HN_UP_F16"), "0") != 0 &&
                  g_strcmp0 (g_getenv ("HN_ACT_BACK_FUSED"), "0") != 0;
  const char *a16 = g_getenv ("HN_LORA_F16_ACTS");
  g->acts16 = adapter && !g->f16ops && hp->block == HN_BLOCK_PRE_NORM && !hp->layernorm && hp->n_experts == 0 &&
              lw0->w_gate && lw0->w_up && g_strcmp0 (a16, "0") != 0 && hn_op_matmul_takes_f16 (g->cmd, lw0->w_gate, N);
  for (int il = 0; g->acts16 && il < nl; il++)
    {
      guint sh = hn_train_graph_shares (hp, adapter, il);
      g->acts16 = (sh & HN_TRAIN_SHARE_ACT) && (sh & HN_TRAIN_SHARE_H2);
    }
  /* inputs */
  g->ids = own (g, hn_tensor_new_named (g->ctx, "train.ids", HN_DTYPE_I32, 1, (gint64[]) { N }, error));
  g->pos = g->ids ? own (g, hn_tensor_new_named (g->ctx, "train.pos", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) : NULL;
  g->neg_pos = g->pos ? own (g, hn_tensor_new_named (g->ctx, "train.neg_pos", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) : NULL;
  g->targets = g->neg_pos ? own (g, hn_tensor_new_named (g->ctx, "train.targets", HN_DTYPE_I32, 1, (gint64[]) { N }, error)) : NULL;
  g->row_scale = g->targets ? own (g, hn_tensor_new_named (g->ctx, "train.row_scale", HN_DTYPE_F32, 1, (gint64[]) { N }, error)) : NULL;
  g->loss_rows = g->row_scale ? own (g, hn_tensor_new_named (g->ctx, "train.loss_rows", HN_DTYPE_F32, 1, (gint64[]) { N }, error)) : NULL;
  if (!g->loss_rows)
    return NULL;
  g->pos_host = g_new (gint32, N);
  g_autofree gint32 *neg = g_new (gint32, N);
  for (gint64 i = 0; i < N; i++)
    {
      g->pos_host[i] = (gint32) (i % seq_len) + (hp->learned_pos ? hp->pos_offset : 0);
      neg[i] = -g->pos_host[i];
    }
  if (!hn_tensor_upload_i32 (g->pos, g->pos_host, N, error) || !hn_tensor_upload_i32 (g->neg_pos, neg, N, error))
    return NULL;
  if (!(g->id_groups = own (g, hn_tensor_new_named (g->ctx, "train.id_groups", HN_DTYPE_I32, 1, (gint64[]) { HN_EMBEDDING_GROUPS_LEN (N) }, error))) ||
      !(g->pos_groups = own (g, hn_tensor_new_named (g->ctx, "train.pos_groups", HN_DTYPE_I32, 1, (gint64[]) { HN_EMBEDDING_GROUPS_LEN (N) }, error))))
    return NULL;
  if (g->W->pos_embed)
    {
      g_autofree gint32 *grp = g_new0 (gint32, HN_EMBEDDING_GROUPS_LEN (N));
      hn_embedding_groups (g->pos_host, N, g->W->pos_embed->shape[0], grp);
      if (!hn_tensor_upload_i32 (g->pos_groups, grp, HN_EMBEDDING_GROUPS_LEN (N), error))
        return NULL;
    }

  /* activations */
  for (int i = 0; i <= nl; i++)
    if (!(g->resid[i] = new2d (g, "train.resid", N, C, error)))
      return NULL;
  for (int il = 0; il < nl; il++)
    {
      LayerActs *a = &g->L[il];
      if (g->checkpointing && il > 0)
        {
          /* one set of activations, recomputed per layer in the backward */
          *a = g->L[0];
          memset (a->site, 0, sizeof a->site); /* setup_lora sets each layer's own */
          g->q4[il] = g->q4[0];
          g->k4[il] = g->k4[0];
          g->v4[il] = g->v4[0];
          g->att4[il] = g->att4[0];
          g->q_lin_rows[il] = g->q_lin_rows[0];
          g->k_lin_rows[il] = g->k_lin_rows[0];
          continue;
        }
      /* What the backward never reads is one tensor that all layers share
       * (hn_train_graph_shares): the MLP's activation when down_proj trains
       * nothing, its normed input when gate/up train nothing, q and k
       * before rope */
      const LayerActs *a0 = &g->L[0];
      guint sh = il > 0 ? hn_train_graph_shares (hp, adapter, il) : 0;
      if (!(a->h = new2d (g, "train.h", N, C, error)) ||
          !(a->h2 = (sh & HN_TRAIN_SHARE_H2) ? a0->h2 : new2d (g, "train.h2", N, C, error)) ||
          !(a->x_mid = new2d (g, "train.x_mid", N, C, error)) ||
          !qkv_new (g, a, a0, (sh & HN_TRAIN_SHARE_QK) != 0, qd, kvd, error) ||
          !(a->att = new2d (g, "train.att", N, qd, error)) ||
          (gated && !(a->gate = new2d (g, "train.gate", N, fused_gu ? 2 * F : F, error))) ||
          !(a->up = (up16 ? new16 : new2d) (g, "train.up", N, F, error)) ||
          /* f16ops writes the activation only as act16 */
          (!g->f16ops &&
           !(a->act = (sh & HN_TRAIN_SHARE_ACT) ? a0->act : new2d (g, "train.act", N, F, error))))
        return NULL;
      if (g->acts16 && il == 0 &&
          (!(a->h2_16 = new16 (g, "train.h2.f16", N, C, error)) || !(a->act16 = new16 (g, "train.act.f16", N, F, error))))
        return NULL;
      if (g->acts16 && il > 0)
        {
          a->h2_16 = a0->h2_16;
          a->act16 = a0->act16;
        }
      if (hp->n_experts > 0 && !moe_acts_new (g, a, error))
        return NULL;
      if (g->f16ops && (!(a->h16 = new16 (g, "train.h.f16", N, C, error)) ||
                        !(a->att16 = new16 (g, "train.att.f16", N, qd, error)) ||
                        (hp->block != HN_BLOCK_PARALLEL && !(a->h2_16 = new16 (g, "train.h2.f16", N, C, error))) ||
                        !(a->act16 = new16 (g, "train.act.f16", N, F, error))))
        return NULL;
      a->q = a->q_lin;
      a->k = a->k_lin;
      if (hp->qk_norm_head)
        {
          if (!(a->q_nrm = new2d (g, "train.q_nrm", N, qd, error)) || !(a->k_nrm = new2d (g, "train.k_nrm", N, kvd, error)))
            return NULL;
          a->q = a->q_nrm;
          a->k = a->k_nrm;
          if (!(g->q_lin_rows[il] = reshape (g, a->q_lin, 2, (gint64[]) { N * H, D }, error)) ||
              !(g->k_lin_rows[il] = reshape (g, a->k_lin, 2, (gint64[]) { N * KVH, D }, error)))
            return NULL;
        }
      if (hp->rope)
        {
          if (!(a->q = new2d (g, "train.q_rope", N, qd, error)) || !(a->k = new2d (g, "train.k_rope", N, kvd, error)))
            return NULL;
        }
      if (!(g->q4[il] = reshape (g, a->q, 4, (gint64[]) { g->B, g->T, H, D }, error)) ||
          !(g->k4[il] = reshape (g, a->k, 4, (gint64[]) { g->B, g->T, KVH, D }, error)) ||
          !(g->v4[il] = reshape (g, a->v, 4, (gint64[]) { g->B, g->T, KVH, D }, error)) ||
          !(g->att4[il] = reshape (g, a->att, 4, (gint64[]) { g->B, g->T, H, D }, error)))
        return NULL;
    }
  g->head_rows = hn_train_graph_head_rows (N, V, adapter != NULL);
  g->n_chunks = (guint) ((N + g->head_rows - 1) / g->head_rows);
  /* the unchunked head under f16ops: its loss and f16 gradient from the logits in the backward (see
   * ce_in_back), the logits themselves stored f16 as autocast keeps them (they are f16 values: half
   * the bytes written and read twice; HN_LOGITS_F16=0: f32) */
  g->ce_in_back = g->f16ops && g->n_chunks <= 1 && !g->W->lm_head_b && V % 4 == 0 &&
                  g_strcmp0 (g_getenv ("HN_CE_IN_BACK"), "0") != 0;
  gboolean logits16 = g->ce_in_back && hp->logits_scale == 1.0f && g_strcmp0 (g_getenv ("HN_LOGITS_F16"), "0") != 0;
  /* f16ops: the attention's and the MLP's outputs, f16 values that only the residual adds read, stored
   * f16 (HN_BRANCH_F16=0: f32) */
  gboolean branch16 = g->f16ops && C % 4 == 0 && g_strcmp0 (g_getenv ("HN_BRANCH_F16"), "0") != 0;
  HnTensor *(*branch_new) (HnTrainGraph *, const char *, gint64, gint64, GError **) = branch16 ? new16 : new2d;
  if (!(g->o = branch_new (g, "train.o", N, C, error)) || !(g->mo = branch_new (g, "train.mlp", N, C, error)) ||
      !(g->pe = new2d (g, "train.pos_embed", N, C, error)) || !(g->hf = new2d (g, "train.final", N, C, error)) ||
      !(g->logits = (logits16 ? new16 : new2d) (g, "train.logits", g->head_rows, V, error)))
    return NULL;
  g->ch_hf = g_new0 (HnTensor *, g->n_chunks);
  g->ch_dh = g_new0 (HnTensor *, g->n_chunks);
  g->ch_targets = g_new0 (HnTensor *, g->n_chunks);
  g->ch_loss = g_new0 (HnTensor *, g->n_chunks);
  g->ch_scale = g_new0 (HnTensor *, g->n_chunks);
  g->ch_logits = g_new0 (HnTensor *, g->n_chunks);
  if (!(g->dh = new2d (g, "grad.h", N, C, error)))
    return NULL;
  for (guint c = 0; g->n_chunks > 1 && c < g->n_chunks; c++)
    {
      gint64 r0 = c * g->head_rows, n = MIN (g->head_rows, N - r0);
      if (!(g->ch_hf[c] = rows_view (g, g->hf, r0, n, error)) || !(g->ch_dh[c] = rows_view (g, g->dh, r0, n, error)) ||
          !(g->ch_targets[c] = rows_view (g, g->targets, r0, n, error)) ||
          !(g->ch_loss[c] = rows_view (g, g->loss_rows, r0, n, error)) ||
          !(g->ch_scale[c] = rows_view (g, g->row_scale, r0, n, error)) ||
          !(g->ch_logits[c] = rows_view (g, g->logits, 0, n, error)))
        return NULL;
    }
  if (g->f16ops)
    {
      /* dy16 also takes lm_rows () rows of the logits' gradient, dw_tmp the LM head's weight gradient */
      gint64 widest = MAX (MAX (C, qd + 2 * kvd), fused_gu ? 2 * F : F);
      gint64 dy16_n = MAX (N * widest, MIN (N, lm_rows ()) * V), tmp_n = MAX (MAX (C, qd) * MAX (C, qd), V * C);
      if (!(g->hf16 = new16 (g, "train.final.f16", N, C, error)) ||
          !(g->dy16 = own (g, hn_tensor_new_named (g->ctx, "grad.f16", HN_DTYPE_F16, 1, (gint64[]) { dy16_n }, error))) ||
          !(g->dw_tmp = own (g, hn_tensor_new_named (g->ctx, "grad.weight_f32", HN_DTYPE_F32, 1, (gint64[]) { tmp_n }, error))))
        return NULL;
    }
  /* backward scratch */
  if (!(g->dres = new2d (g, "grad.resid", N, C, error)) ||
      !(g->dh2 = new2d (g, "grad.h2", N, C, error)) || !(g->dq = new2d (g, "grad.q", N, qd, error)) ||
      !(g->dk = new2d (g, "grad.k", N, kvd, error)) || !(g->dv = new2d (g, "grad.v", N, kvd, error)) ||
      !(g->dq2 = new2d (g, "grad.q2", N, qd, error)) || !(g->dk2 = new2d (g, "grad.k2", N, kvd, error)) ||
      !(g->datt = new2d (g, "grad.att", N, qd, error)) ||
      (gated && !(g->dgate = new2d (g, "grad.gate", N, fused_gu ? 2 * F : F, error))) ||
      (!up16 && !(g->dup = new2d (g, "grad.up", N, F, error))) ||
      /* with the f16 up projection its output's gradient too (a product autocast stores f16) */
      !(g->dact = (up16 && F % 4 == 0 ? new16 : new2d) (g, "grad.act", N, F, error)) ||
      !(g->stats = own (g, hn_tensor_new_named (g->ctx, "grad.stats", HN_DTYPE_F32, 1, (gint64[]) { 2 * N }, error))) ||
      !(g->qk_stats = own (g, hn_tensor_new_named (g->ctx, "grad.qk_stats", HN_DTYPE_F32, 1, (gint64[]) { 2 * N * H }, error))) ||
      !(g->att_stats = own (g, hn_tensor_new_named (g->ctx, "grad.att_stats", HN_DTYPE_F32, 1, (gint64[]) { 2 * N * H }, error))))
    return NULL;
  if (g->acts16 && (!(g->dgate16 = new16 (g, "grad.gate.f16", N, F, error)) ||
                    !(g->dup16 = new16 (g, "grad.up.f16", N, F, error))))
    return NULL;
  g->flash = attn_flash (g, adapter, opts && opts->fp16);
  g->lse = g_new0 (HnTensor *, nl);
  for (int il = 0; g->flash && il < nl; il++)
    if (!(g->lse[il] = (g->checkpointing && il > 0) ? g->lse[0]
                       : own (g, hn_tensor_new_named (g->ctx, "train.att_lse", HN_DTYPE_F32, 1, (gint64[]) { N * H }, error))))
      return NULL;
  if (hp->n_experts > 0)
    {
      gint64 E = hp->n_experts, Fe = hp->moe_ffn;
      if (!(g->col = new2d (g, "grad.moe.col", N, 1, error)) || !(g->edy = new2d (g, "grad.moe.dy", N, C, error)) ||
          !(g->eprod = new2d (g, "grad.moe.prod", N, C, error)) ||
          !(g->edgate = new2d (g, "grad.moe.gate", N, Fe, error)) || !(g->edup = new2d (g, "grad.moe.up", N, Fe, error)) ||
          !(g->edact = new2d (g, "grad.moe.act", N, Fe, error)) || !(g->dwT = new2d (g, "grad.moe.wT", E, N, error)) ||
          !(g->dw = new2d (g, "grad.moe.w", N, E, error)) || !(g->dl = new2d (g, "grad.moe.logits", N, E, error)))
        return NULL;
    }
  if (!(g->datt4 = reshape (g, g->datt, 4, (gint64[]) { g->B, g->T, H, D }, error)) ||
      !(g->dq4 = reshape (g, g->dq, 4, (gint64[]) { g->B, g->T, H, D }, error)) ||
      !(g->dk4 = reshape (g, g->dk, 4, (gint64[]) { g->B, g->T, KVH, D }, error)) ||
      !(g->dv4 = reshape (g, g->dv, 4, (gint64[]) { g->B, g->T, KVH, D }, error)) ||
      !(g->dq_rows = reshape (g, g->dq, 2, (gint64[]) { N * H, D }, error)) ||
      !(g->dk_rows = reshape (g, g->dk, 2, (gint64[]) { N * KVH, D }, error)) ||
      !(g->dq2_rows = reshape (g, g->dq2, 2, (gint64[]) { N * H, D }, error)) ||
      !(g->dk2_rows = reshape (g, g->dk2, 2, (gint64[]) { N * KVH, D }, error)))
    return NULL;

  /* parameters */
  if (adapter)
    {
      if (!setup_lora (g, error))
        return NULL;
    }
  else if (!setup_params (g, error))
    return NULL;
  /* after the parameters: the head's gradient decides (see ce_fused) */
  g->ce_fused = g->n_chunks > 1 && g_strcmp0 (g_getenv ("HN_CE_FUSED"), "0") != 0;
  const char *ce16 = g_getenv ("HN_CE_F16");
  if (g->ce_fused && V % 4 == 0 && !G (g, g->W->lm_head) && !G (g, g->W->lm_head_b) &&
      (g_strcmp0 (ce16, "1") == 0 ||
       (g_strcmp0 (ce16, "0") != 0 && hn_op_matmul_takes_f16 (g->cmd, g->W->lm_head, g->head_rows))))
    {
      HnTensor *lg16 = new16 (g, "grad.logits.f16", g->head_rows, V, error);
      if (!lg16)
        return NULL;
      g->ch_lg16 = g_new0 (HnTensor *, g->n_chunks);
      for (guint c = 0; c < g->n_chunks; c++)
        if (!(g->ch_lg16[c] = rows_view (g, lg16, 0, MIN (g->head_rows, N - c * g->head_rows), error)))
          return NULL;
    }
  if (g->f16ops)
    {
      /* q, k and v stacked (see qkv_w16): their gradients first, as row views of one tensor */
      g->qkv_w16 = g_new0 (HnTensor *, nl);
      g->qkv_g = g_new0 (HnTensor *, nl);
      g->qkv_b = g_new0 (HnTensor *, nl);
      g->qkv_b_rows = g_new0 (HnTensor *, 3 * nl);
      g->qkv_stacked = g_new0 (gboolean, nl);
      for (int il = 0; il < nl && g_getenv ("HN_TRAIN_NO_QKV_STACK") == NULL; il++)
        {
          const HnLayerWeights *lw = &g->W->layers[il];
          HnTrainParam *pq = lw->wq ? g_hash_table_lookup (g->grad_of, lw->wq) : NULL;
          HnTrainParam *pk = lw->wk ? g_hash_table_lookup (g->grad_of, lw->wk) : NULL;
          HnTrainParam *pv = lw->wv ? g_hash_table_lookup (g->grad_of, lw->wv) : NULL;
          if (!pq || !pk || !pv || pq == pk || pk == pv || pq == pv || pq->w->shape[0] != qd ||
              pk->w->shape[0] != kvd || pv->w->shape[0] != kvd || pq->w->shape[1] != C || pk->w->shape[1] != C ||
              pv->w->shape[1] != C)
            continue;
          HnTrainParam *ps[3] = { pq, pk, pv };
          gint64 rows = qd + 2 * kvd, row0 = 0;
          if (!(g->qkv_w16[il] = own (g, hn_tensor_new_named (g->ctx, "train.qkv (f16)", HN_DTYPE_F16, 2,
                                                               (gint64[]) { rows, C }, error))) ||
              !(g->qkv_g[il] = own (g, hn_tensor_new_named (g->ctx, "grad qkv", HN_DTYPE_F32, 2, (gint64[]) { rows, C },
                                                             error))))
            return NULL;
          for (int k = 0; k < 3; k++)
            {
              gint64 n = ps[k]->w->shape[0];
              HnTensor *gv = hn_tensor_view_rows (g->qkv_g[il], row0, n, error);
              HnTensor *wv = gv ? hn_tensor_view_rows (g->qkv_w16[il], row0, n, error) : NULL;
              if (!wv)
                {
                  g_clear_pointer (&gv, hn_tensor_unref);
                  return NULL;
                }
              hn_tensor_unref (ps[k]->g);
              ps[k]->g = gv;
              ps[k]->w16 = wv;
              if (!hn_op_cast_f16 (g->aux, wv, ps[k]->w, error))
                return NULL;
              row0 += n;
            }
          /* one batched matmul for the three where their outputs are stacked too (qkv_new) and
           * their biases are all f32 parameters or all absent */
          HnTensor *bs[3] = { lw->bq, lw->bk, lw->bv };
          gboolean none = !bs[0] && !bs[1] && !bs[2], all = TRUE;
          for (int k = 0; k < 3; k++)
            all = all && bs[k] && bs[k]->dtype == HN_DTYPE_F32 && bs[k]->n == ps[k]->w->shape[0];
          if (!g->L[il].qkv || (!none && !all))
            continue;
          g->qkv_stacked[il] = TRUE;
          if (none)
            continue;
          if (!(g->qkv_b[il] = own (g, hn_tensor_new_named (g->ctx, "train.qkv_bias", HN_DTYPE_F32, 1, (gint64[]) { rows },
                                                             error))))
            return NULL;
          for (int k = 0; k < 3; k++)
            if (!(g->qkv_b_rows[3 * il + k] = rows_view (g, g->qkv_b[il], k * qd, qd, error)))
              return NULL;
        }
      /* the f16 copies of the matmuls' weights (the tied embedding's once) */
      for (int il = 0; il <= nl; il++)
        {
          const HnLayerWeights *lw = il < nl ? &g->W->layers[il] : NULL;
          HnTensor *ws[] = { lw ? lw->wq : g->W->lm_head, lw ? lw->wk : NULL, lw ? lw->wv : NULL, lw ? lw->wo : NULL,
                             lw ? lw->w_gate : NULL, lw ? lw->w_up : NULL, lw ? lw->w_down : NULL };
          for (gsize i = 0; i < G_N_ELEMENTS (ws); i++)
            {
              HnTrainParam *p = ws[i] ? g_hash_table_lookup (g->grad_of, ws[i]) : NULL;
              if (!p || p->w16)
                continue;
              g_autofree char *name = g_strdup_printf ("%s (f16)", p->name);
              if (!(p->w16 = hn_tensor_new_named (g->ctx, name, HN_DTYPE_F16, p->w->ndim, p->w->shape, error)) ||
                  !hn_op_cast_f16 (g->aux, p->w16, p->w, error))
                return NULL;
            }
        }
    }
  g->n_partials = 0;
  for (guint i = 0; i < g->params->len; i++)
    g->n_partials += hn_sumsq_n_partials (((HnTrainParam *) g->params->pdata[i])->w->n);
  if (!(g->partials = own (g, hn_tensor_new_named (g->ctx, "grad.norm_partials", HN_DTYPE_F32, 1,
                                                   (gint64[]) { MAX (1, g->n_partials) }, error))))
    return NULL;
  /* optimizer state starts at zero */
  for (guint i = 0; i < g->params->len; i++)
    {
      HnTrainParam *p = g->params->pdata[i];
      if (!hn_op_fill (g->aux, p->m, 0.0f, error) || !hn_op_fill (g->aux, p->v, 0.0f, error) ||
          !hn_op_fill (g->aux, p->g, 0.0f, error))
        return NULL;
    }
  if (!hn_cmd_submit_wait (g->aux, error))
    return NULL;
  return g_steal_pointer (&g);
}

/* The first n elements of a 1-D scratch tensor as [rows, cols]. */
static HnTensor *
scratch_2d (HnTensor *t, gint64 rows, gint64 cols, GError **error)
{
  g_autoptr (HnTensor) head = hn_tensor_view_rows (t, 0, rows * cols, error);
  return head ? hn_tensor_reshape (head, 2, (gint64[]) { rows, cols }, error) : NULL;
}

/* The loss of the logits' rows [r0, r0 + n) and their gradient into d16, from one kernel
 * (cross_entropy_grad: the two reads of the logits; ce_in_back and an evaluation of f16 logits). */
static gboolean
head_rows_grad (HnTrainGraph *g, gint64 r0, gint64 n, HnTensor *d16, GError **error)
{
  g_autoptr (HnTensor) lg = hn_tensor_view_rows (g->logits, r0, n, error);
  g_autoptr (HnTensor) loss = lg ? hn_tensor_view_rows (g->loss_rows, r0, n, error) : NULL;
  g_autoptr (HnTensor) tg = loss ? hn_tensor_view_rows (g->targets, r0, n, error) : NULL;
  g_autoptr (HnTensor) rs = tg ? hn_tensor_view_rows (g->row_scale, r0, n, error) : NULL;
  return rs && hn_op_cross_entropy_grad (g->cmd, loss, d16, lg, tg, rs, -100, error);
}

/* ---------------------------------------------------------------- forward */

static gboolean
norm_fwd (HnTrainGraph *g, HnTensor *out, HnTensor *in, HnTensor *w, HnTensor *b, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  if (hp->layernorm)
    return hn_op_layernorm (g->cmd, out, in, w, b, hp->norm_eps, error);
  return hn_op_rmsnorm (g->cmd, out, in, w, hp->norm_eps, hp->norm_plus_one ? HN_NORM_WEIGHT_PLUS_ONE : 0, error);
}

static gboolean
norm_back (HnTrainGraph *g, HnTensor *dx, HnTensor *dy, HnTensor *x, HnTensor *w, HnTensor *b, HnBackFlags flags,
           GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  if (hp->layernorm)
    return hn_op_layernorm_back (g->cmd, dx, G (g, w), G (g, b), dy, x, w, g->stats, hp->norm_eps, flags, error);
  return hn_op_rmsnorm_back (g->cmd, dx, G (g, w), dy, x, w, g->stats, hp->norm_eps,
                             hp->norm_plus_one ? HN_NORM_WEIGHT_PLUS_ONE : 0, flags, error);
}

/* The rank-r expansions (y += u·B_pᵀ, dx += du·A: K = r) on their own
 * memory-bound kernel (hn_op_lora_expand), and the down-projections and
 * weight gradients (u, du, dA, dB: an output dimension of r) on kernels
 * that read the long operand once (hn_op_lora_rows / _cols, where the
 * device has subgroup arithmetic); exact f32, and under fp16 autocast
 * rounded as hn_op_bmm rounds there (on hn_op_bmm these ran 13.8 ms of the
 * llama-1b fp16 LoRA step's 139, H200 2026-12-03k). HN_LORA_BMM=1 keeps
 * hn_op_bmm (a measurement aid). */
static gboolean
lora_expand_ok (HnTrainGraph *g, LoraSite *s)
{
  return s->u->shape[1] <= 32 && s->u->dtype == HN_DTYPE_F32 && g_getenv ("HN_LORA_BMM") == NULL;
}

/* y += s·(x·Aᵀ)·B_pᵀ for each output of the site whose input is x. */
static gboolean
lora_fwd (HnTrainGraph *g, LoraSite *s, HnTensor *x, HnTensor **outs, GError **error)
{
  gboolean expand = lora_expand_ok (g, s);
  if (expand && hn_op_lora_down_available (g->cmd, s->u->shape[1]))
    CK (hn_op_lora_rows (g->cmd, s->u, x, s->A, TRUE, s->scale, FALSE, error));
  else
    CK (hn_op_bmm (g->cmd, s->u, x, s->A, HN_MATMUL_TRANS_B, s->scale, error));
  for (int k = 0; k < s->n_out; k++)
    CK (expand ? hn_op_lora_expand (g->cmd, outs[s->out_proj[k]], s->u, s->Bv[k], TRUE, 1.0f, TRUE, error)
               : hn_op_bmm (g->cmd, outs[s->out_proj[k]], s->u, s->Bv[k], HN_MATMUL_TRANS_B | HN_MATMUL_ACCUMULATE,
                            1.0f, error));
  return TRUE;
}

/* The adapters of q, k and v (distinct sites of one input x): their
 * down-projections in one hn_op_lora_rows_n, which reads x once (the same
 * sums as one call each; HN_LORA_FUSE=0: one call each), then each
 * site's expansions. */
static gboolean
lora_fwd_qkv (HnTrainGraph *g, LayerActs *a, HnTensor *x, HnTensor **outs, GError **error)
{
  LoraSite *ss[3];
  int n = 0;
  for (int p = P_Q; p <= P_V; p++)
    if (a->site[p] && (p == P_Q || a->site[p] != a->site[p - 1]))
      ss[n++] = a->site[p];
  gboolean fuse = n > 1 && g_strcmp0 (g_getenv ("HN_LORA_FUSE"), "0") != 0;
  for (int j = 0; fuse && j < n; j++)
    fuse = lora_expand_ok (g, ss[j]) && hn_op_lora_down_available (g->cmd, ss[j]->u->shape[1]) &&
           ss[j]->u->shape[1] == ss[0]->u->shape[1] && ss[j]->scale == ss[0]->scale;
  if (!fuse)
    {
      for (int j = 0; j < n; j++)
        CK (lora_fwd (g, ss[j], x, outs, error));
      return TRUE;
    }
  HnTensor *u[3], *A[3];
  for (int j = 0; j < n; j++)
    {
      u[j] = ss[j]->u;
      A[j] = ss[j]->A;
    }
  CK (hn_op_lora_rows_n (g->cmd, n, u, x, A, TRUE, ss[0]->scale, FALSE, error));
  for (int j = 0; j < n; j++)
    for (int k = 0; k < ss[j]->n_out; k++)
      CK (hn_op_lora_expand (g->cmd, outs[ss[j]->out_proj[k]], ss[j]->u, ss[j]->Bv[k], TRUE, 1.0f, TRUE, error));
  return TRUE;
}

/* dB_p += dy_pᵀ·u; du = s·Σ dy_p·B_p; dA += duᵀ·x; dx += du·A. Exact f32:
 * s as the alpha of du's products; fp16 autocast: du rounded, then scaled. */
static gboolean
lora_back (HnTrainGraph *g, LoraSite *s, HnTensor *x, HnTensor *dx, HnTensor **dys, GError **error)
{
  gboolean expand = lora_expand_ok (g, s), down = expand && hn_op_lora_down_available (g->cmd, s->u->shape[1]);
  for (int k = 0; k < s->n_out; k++)
    {
      HnTensor *dy = dys[s->out_proj[k]];
      if (down)
        {
          CK (hn_op_lora_cols (g->cmd, s->dBv[k], dy, s->u, FALSE, 1.0f, TRUE, error));
          CK (hn_op_lora_rows (g->cmd, s->du, dy, s->Bv[k], FALSE, s->scale, k > 0, error));
          continue;
        }
      CK (hn_op_bmm (g->cmd, s->dBv[k], dy, s->u, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, error));
      CK (hn_op_bmm (g->cmd, s->du, dy, s->Bv[k], k ? HN_MATMUL_ACCUMULATE : 0, expand ? s->scale : 1.0f, error));
    }
  if (!expand)
    CK (hn_op_scale (g->cmd, s->du, s->du, s->scale, 0.0f, error));
  if (down)
    CK (hn_op_lora_cols (g->cmd, G (g, s->A), x, s->du, TRUE, 1.0f, TRUE, error));
  else
    CK (hn_op_bmm (g->cmd, G (g, s->A), s->du, x, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, error));
  if (expand)
    return hn_op_lora_expand (g->cmd, dx, s->du, s->A, FALSE, 1.0f, TRUE, error);
  return hn_op_bmm (g->cmd, dx, s->du, s->A, HN_MATMUL_ACCUMULATE, 1.0f, error);
}

/* The adapters of q, k and v in the backward (distinct sites of one input
 * x, fused as in lora_fwd_qkv): each site's dB and du, then their dA in one
 * hn_op_lora_cols_n and dx in one hn_op_lora_expand_n (x and dx read once;
 * the same sums; HN_LORA_FUSE=0: lora_back for each). */
static gboolean
lora_back_qkv (HnTrainGraph *g, LayerActs *a, HnTensor *x, HnTensor *dx, HnTensor **dys, GError **error)
{
  LoraSite *ss[3];
  int n = 0;
  for (int p = P_Q; p <= P_V; p++)
    if (a->site[p] && (p == P_Q || a->site[p] != a->site[p - 1]))
      ss[n++] = a->site[p];
  gboolean fuse = n > 1 && g_strcmp0 (g_getenv ("HN_LORA_FUSE"), "0") != 0;
  for (int j = 0; fuse && j < n; j++)
    fuse = lora_expand_ok (g, ss[j]) && hn_op_lora_down_available (g->cmd, ss[j]->u->shape[1]) &&
           ss[j]->u->shape[1] == ss[0]->u->shape[1];
  if (!fuse)
    {
      for (int j = 0; j < n; j++)
        CK (lora_back (g, ss[j], x, dx, dys, error));
      return TRUE;
    }
  HnTensor *du[3], *A[3], *dA[3];
  for (int j = 0; j < n; j++)
    {
      LoraSite *s = ss[j];
      for (int k = 0; k < s->n_out; k++)
        {
          HnTensor *dy = dys[s->out_proj[k]];
          CK (hn_op_lora_cols (g->cmd, s->dBv[k], dy, s->u, FALSE, 1.0f, TRUE, error));
          CK (hn_op_lora_rows (g->cmd, s->du, dy, s->Bv[k], FALSE, s->scale, k > 0, error));
        }
      du[j] = s->du;
      A[j] = s->A;
      dA[j] = G (g, s->A);
    }
  CK (hn_op_lora_cols_n (g->cmd, n, dA, x, du, TRUE, 1.0f, TRUE, error));
  return hn_op_lora_expand_n (g->cmd, n, dx, du, A, FALSE, 1.0f, TRUE, error);
}

/* Mixture of experts as the inference graph routes it; every expert's activations are kept for the
 * backward (the unchosen ones weigh 0). */
static gboolean
moe_fwd (HnTrainGraph *g, LayerActs *a, const HnLayerWeights *lw, HnTensor *in, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  HnMoeRouteParams rp = { hp->moe_route, hp->n_experts_used, hp->moe_norm_topk, hp->moe_scale, 0, 0, FALSE, 0, NULL, 0 };
  CK (hn_op_matmul (g->cmd, a->route, in, lw->router, NULL, error));
  CK (hn_op_moe_route (g->cmd, a->route_w, a->topi, a->route, &rp, error));
  CK (hn_op_fill (g->cmd, g->mo, 0.0f, error));
  for (int e = 0; e < hp->n_experts; e++)
    {
      HnTensor **x = &lw->experts[3 * e];
      CK (hn_op_matmul (g->cmd, a->egate[e], in, x[0], NULL, error));
      CK (hn_op_matmul (g->cmd, a->eup[e], in, x[1], NULL, error));
      CK (hn_op_glu (g->cmd, a->eact[e], a->egate[e], a->eup[e], hp->act, error));
      CK (hn_op_matmul (g->cmd, a->ey[e], a->eact[e], x[2], NULL, error));
      CK (hn_op_slice (g->cmd, g->col, a->route_w, 1, e, error));
      CK (hn_op_mul (g->cmd, g->eprod, a->ey[e], g->col, error));
      CK (hn_op_add (g->cmd, g->mo, g->mo, g->eprod, error));
    }
  return TRUE;
}

/* A norm whose output only matmuls read: under f16ops written as f16 only (out16, the copy they
 * read and the backward keeps, rounded by the norm as hn_op_cast_f16 would round out), else out. */
static gboolean
norm_fwd_mm (HnTrainGraph *g, HnTensor *out, HnTensor *out16, HnTensor *in, HnTensor *w, HnTensor *b,
             HnTensor **mm_in, GError **error)
{
  *mm_in = g->f16ops ? out16 : out;
  return norm_fwd (g, *mm_in, in, w, b, error);
}

/* x16 under f16ops: x rounded to f16 once (the copy the matmuls of x read, kept for the backward). */
static gboolean
round16 (HnTrainGraph *g, HnTensor *x16, HnTensor *x, HnTensor **mm_in, GError **error)
{
  *mm_in = x;
  if (!g->f16ops)
    return TRUE;
  *mm_in = x16;
  return hn_op_cast_f16 (g->cmd, x16, x, error);
}

static gboolean
mlp_fwd (HnTrainGraph *g, LayerActs *a, const HnLayerWeights *lw, HnTensor *in, HnTensor *in_mm, GError **error)
{
  if (lw->router)
    return moe_fwd (g, a, lw, in, error);
  HnTensor *outs[N_PROJ] = { 0 };
  outs[P_GATE] = a->gate;
  outs[P_UP] = a->up;
  outs[P_DOWN] = g->mo;
  if (lw->w_gate && !lw->w_up)
    {
      CK (hn_op_matmul (g->cmd, a->gate, in_mm, W16 (g, lw->w_gate), lw->b_gate, error));
      if (a->site[P_GATE])
        CK (lora_fwd (g, a->site[P_GATE], in, outs, error));
      CK (hn_op_glu (g->cmd, g->f16ops ? a->act16 : a->act, a->gate, NULL, g->hp->act, error));
    }
  else if (lw->w_gate)
    {
      CK (hn_op_matmul_n (g->cmd, 2, (HnTensor *[]) { a->gate, a->up }, in_mm,
                          (HnTensor *[]) { W16 (g, lw->w_gate), W16 (g, lw->w_up) },
                          (HnTensor *[]) { lw->b_gate, lw->b_up }, error));
      if (a->site[P_GATE])
        CK (lora_fwd (g, a->site[P_GATE], in, outs, error));
      if (a->site[P_UP])
        CK (lora_fwd (g, a->site[P_UP], in, outs, error));
      CK (hn_op_glu (g->cmd, g->acts16 || g->f16ops ? a->act16 : a->act, a->gate, a->up, g->hp->act, error));
    }
  else
    {
      CK (hn_op_matmul (g->cmd, a->up, in_mm, W16 (g, lw->w_up), lw->b_up, error));
      if (a->site[P_UP])
        CK (lora_fwd (g, a->site[P_UP], in, outs, error));
      if (!g->f16ops)
        CK (hn_op_unary (g->cmd, a->act, a->up, g->hp->act, error));
    }
  /* under f16ops and acts16 the activation is written as its f16 copy only (glu's f16 out) */
  HnTensor *act_mm = a->act16;
  if (g->f16ops && !lw->w_gate)
    CK (hn_op_unary_f16 (g->cmd, a->act16, a->up, g->hp->act, error));
  else if (!g->acts16 && !g->f16ops)
    CK (round16 (g, a->act16, a->act, &act_mm, error));
  CK (hn_op_matmul (g->cmd, g->mo, act_mm, W16 (g, lw->w_down), lw->b_down, error));
  if (a->site[P_DOWN])
    CK (lora_fwd (g, a->site[P_DOWN], a->act, outs, error));
  return TRUE;
}

static gboolean
layer_fwd (HnTrainGraph *g, int il, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  const HnTransformerWeights *W = g->W;
  const HnLayerWeights *lw = &W->layers[il];
  LayerActs *a = &g->L[il];
  HnTensor *x = g->resid[il], *xo = g->resid[il + 1];
  HnTensor *h_mm, *h2_mm = NULL, *att_mm;
  gboolean stacked = g->qkv_stacked && g->qkv_stacked[il];
  if (stacked && g->qkv_b[il])
    {
      /* the biases stacked (qkv_b) for the batched q, k, v matmul: copied before the norm, which they
       * run beside */
      HnTensor *bs[3] = { lw->bq, lw->bk, lw->bv };
      for (int k = 0; k < 3; k++)
        CK (hn_op_copy (g->cmd, g->qkv_b_rows[3 * il + k], bs[k], error));
    }
  CK (norm_fwd_mm (g, a->h, a->h16, x, lw->ln1_w, lw->ln1_b, &h_mm, error));
  if (hp->block == HN_BLOCK_PARALLEL_2NORM)
    CK (norm_fwd_mm (g, a->h2, a->h2_16, x, lw->ln2_w, lw->ln2_b, &h2_mm, error));
  HnTensor *outs[N_PROJ] = { a->q_lin, a->k_lin, a->v, g->o, NULL, NULL, NULL };
  /* one f16 copy of h for the three (hn_op_matmul_n, on the tensor cores; under f16ops h16) */
  if (stacked)
    CK (hn_op_matmul_stacked (g->cmd, 3, a->qkv, h_mm, g->qkv_w16[il], g->qkv_b[il], error));
  else
    CK (hn_op_matmul_n (g->cmd, 3, (HnTensor *[]) { a->q_lin, a->k_lin, a->v }, h_mm,
                        (HnTensor *[]) { W16 (g, lw->wq), W16 (g, lw->wk), W16 (g, lw->wv) },
                        (HnTensor *[]) { lw->bq, lw->bk, lw->bv }, error));
  CK (lora_fwd_qkv (g, a, a->h, outs, error));
  HnTensor *qs = a->q_lin, *ks = a->k_lin;
  if (hp->qk_norm_head)
    {
      gint64 N = g->N;
      g_autoptr (HnTensor) qn = hn_tensor_reshape (a->q_nrm, 2, (gint64[]) { N * hp->n_head, hp->head_dim }, error);
      g_autoptr (HnTensor) kn = qn ? hn_tensor_reshape (a->k_nrm, 2, (gint64[]) { N * hp->n_kv_head, hp->head_dim }, error) : NULL;
      CK (kn);
      CK (hn_op_rmsnorm (g->cmd, qn, g->q_lin_rows[il], lw->q_norm_w, hp->norm_eps, 0, error));
      CK (hn_op_rmsnorm (g->cmd, kn, g->k_lin_rows[il], lw->k_norm_w, hp->norm_eps, 0, error));
      qs = a->q_nrm;
      ks = a->k_nrm;
    }
  if (hp->rope)
    {
      g_autoptr (HnTensor) q3 = hn_tensor_reshape (a->q, 3, (gint64[]) { g->N, hp->n_head, hp->head_dim }, error);
      g_autoptr (HnTensor) k3 = q3 ? hn_tensor_reshape (a->k, 3, (gint64[]) { g->N, hp->n_kv_head, hp->head_dim }, error) : NULL;
      g_autoptr (HnTensor) qs3 = k3 ? hn_tensor_reshape (qs, 3, (gint64[]) { g->N, hp->n_head, hp->head_dim }, error) : NULL;
      g_autoptr (HnTensor) ks3 = qs3 ? hn_tensor_reshape (ks, 3, (gint64[]) { g->N, hp->n_kv_head, hp->head_dim }, error) : NULL;
      CK (ks3);
      CK (hn_op_rope (g->cmd, q3, qs3, g->pos, W->inv_freq, hp->rot_dims, hp->rope_style, W->rope_attn_scale, error));
      CK (hn_op_rope (g->cmd, k3, ks3, g->pos, W->inv_freq, hp->rot_dims, hp->rope_style, W->rope_attn_scale, error));
    }
  HnAttentionParams ap = { 0 };
  ap.scale = hp->attn_scale;
  ap.softcap = hp->attn_softcap;
  ap.causal = TRUE;
  ap.window = hp->layer_sliding && hp->layer_sliding[il] ? hp->sliding_window : 0;
  ap.alibi_slopes = W->alibi_slopes;
  if (g->flash)
    {
      ap.reduced_precision = TRUE;
      ap.lse = g->lse[il];
    }
  CK (hn_op_attention (g->cmd, g->att4[il], g->q4[il], g->k4[il], g->v4[il], &ap, error));
  CK (round16 (g, a->att16, a->att, &att_mm, error));
  CK (hn_op_matmul (g->cmd, g->o, att_mm, W16 (g, lw->wo), lw->bo, error));
  if (a->site[P_O])
    CK (lora_fwd (g, a->site[P_O], a->att, outs, error));
  switch (hp->block)
    {
    case HN_BLOCK_PRE_NORM:
      CK (hn_op_add (g->cmd, a->x_mid, x, g->o, error));
      if (g->acts16)
        CK (norm_fwd (g, h2_mm = a->h2_16, a->x_mid, lw->ln2_w, lw->ln2_b, error));
      else
        CK (norm_fwd_mm (g, a->h2, a->h2_16, a->x_mid, lw->ln2_w, lw->ln2_b, &h2_mm, error));
      CK (mlp_fwd (g, a, lw, a->h2, h2_mm, error));
      CK (hn_op_add (g->cmd, xo, a->x_mid, g->mo, error));
      break;
    case HN_BLOCK_PARALLEL:
    case HN_BLOCK_PARALLEL_2NORM:
      CK (mlp_fwd (g, a, lw, hp->block == HN_BLOCK_PARALLEL ? a->h : a->h2, hp->block == HN_BLOCK_PARALLEL ? h_mm : h2_mm,
                   error));
      CK (hn_op_add (g->cmd, xo, x, g->o, error));
      CK (hn_op_add (g->cmd, xo, xo, g->mo, error));
      break;
    default:
      return unsupported (hn_block_kind_name (hp->block), error);
    }
  return TRUE;
}

/* grad: the backward follows (with the head in chunks, the head's gradient
 * is taken here, chunk by chunk). */
static gboolean
forward (HnTrainGraph *g, gboolean grad, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  const HnTransformerWeights *W = g->W;
  HnTensor *x0 = g->resid[0];
  CK (hn_op_embedding (g->cmd, x0, W->tok_embed, g->ids, error));
  if (hp->embed_scale != 1.0f)
    CK (hn_op_scale (g->cmd, x0, x0, hp->embed_scale, 0.0f, error));
  if (W->pos_embed)
    {
      CK (hn_op_embedding (g->cmd, g->pe, W->pos_embed, g->pos, error));
      CK (hn_op_add (g->cmd, x0, x0, g->pe, error));
    }
  for (int il = 0; il < hp->n_layer; il++)
    CK (layer_fwd (g, il, error));
  if (g->n_chunks > 1)
    {
      CK (norm_fwd (g, g->hf, g->resid[hp->n_layer], W->final_norm_w, W->final_norm_b, error));
      /* the head chunk by chunk: a chunk's logits, its loss and (grad) its
       * gradient into dh and the head's weight before the next chunk reuses
       * the logits (the backward then starts at the final norm) */
      for (guint c = 0; c < g->n_chunks; c++)
        {
          HnTensor *lg = g->ch_logits[c];
          CK (hn_op_matmul (g->cmd, lg, g->ch_hf[c], W->lm_head, W->lm_head_b, error));
          if (hp->logits_scale != 1.0f)
            CK (hn_op_scale (g->cmd, lg, lg, hp->logits_scale, 0.0f, error));
          if (grad && g->ce_fused)
            {
              HnTensor *dl = g->ch_lg16 ? g->ch_lg16[c] : lg;
              CK (hn_op_cross_entropy_grad (g->cmd, g->ch_loss[c], dl, lg, g->ch_targets[c], g->ch_scale[c], -100,
                                            error));
              if (g->ch_lg16)
                {
                  /* dh = dl·W: the frozen head takes no gradient (see ce_fused) */
                  CK (hn_op_bmm (g->cmd, g->ch_dh[c], dl, W->lm_head, 0, 1.0f, error));
                  continue;
                }
            }
          else
            {
              CK (hn_op_cross_entropy (g->cmd, g->ch_loss[c], NULL, lg, g->ch_targets[c], -100, error));
              if (!grad)
                continue;
              CK (hn_op_cross_entropy_back (g->cmd, lg, lg, g->ch_targets[c], g->ch_scale[c], error));
            }
          CK (hn_op_matmul_back (g->cmd, g->ch_dh[c], G (g, W->lm_head), G (g, W->lm_head_b), lg, g->ch_hf[c],
                                 W->lm_head, 0, error));
        }
      return TRUE;
    }
  HnTensor *hf_mm;
  CK (norm_fwd_mm (g, g->hf, g->hf16, g->resid[hp->n_layer], W->final_norm_w, W->final_norm_b, &hf_mm, error));
  CK (hn_op_matmul (g->cmd, g->logits, hf_mm, W16 (g, W->lm_head), W->lm_head_b, error));
  if (hp->logits_scale != 1.0f)
    CK (hn_op_scale (g->cmd, g->logits, g->logits, hp->logits_scale, 0.0f, error));
  if (grad && g->ce_in_back)
    return TRUE; /* the backward's first kernels write the loss (lm_back_f16) */
  if (g->logits->dtype == HN_DTYPE_F16)
    {
      /* f16 logits (an evaluation): their loss through the kernel that reads them, lm_rows () rows at a
       * time, each chunk's gradient dropped into dy16 */
      gint64 R = MIN (g->N, lm_rows ()), V = hn_tensor_cols (g->logits);
      for (gint64 r0 = 0; r0 < g->N; r0 += R)
        {
          gint64 n = MIN (R, g->N - r0);
          g_autoptr (HnTensor) d16 = scratch_2d (g->dy16, n, V, error);
          CK (d16 && head_rows_grad (g, r0, n, d16, error));
        }
      return TRUE;
    }
  return hn_op_cross_entropy (g->cmd, g->loss_rows, NULL, g->logits, g->targets, -100, error);
}

/* ---------------------------------------------------------------- backward */

/* out = Σ_e w_e · y_e: each expert gets dy · w_e; the routing weights get dw_e = <dy, y_e> per token.
 * The chosen weights are a softmax over the chosen logits (renormalised top-k of a softmax), the
 * others constant 0, so d logits = w ⊙ (dw - <w, dw>) (0 off the chosen experts). */
static gboolean
moe_back (HnTrainGraph *g, LayerActs *a, const HnLayerWeights *lw, HnTensor *dy, HnTensor *in, HnTensor *din,
          HnBackFlags flags, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  for (int e = 0; e < hp->n_experts; e++)
    {
      HnTensor **x = &lw->experts[3 * e];
      g_autoptr (HnTensor) dw_e = hn_tensor_view_rows (g->dwT, e, 1, error);
      CK (dw_e);
      CK (hn_op_mul (g->cmd, g->eprod, dy, a->ey[e], error));
      CK (hn_op_reduce (g->cmd, dw_e, g->eprod, HN_REDUCE_SUM, error));
      CK (hn_op_slice (g->cmd, g->col, a->route_w, 1, e, error));
      CK (hn_op_mul (g->cmd, g->edy, dy, g->col, error));
      CK (hn_op_matmul_back (g->cmd, g->edact, G (g, x[2]), NULL, g->edy, a->eact[e], x[2], 0, error));
      CK (hn_op_glu_back (g->cmd, g->edgate, g->edup, g->edact, a->egate[e], a->eup[e], hp->act, error));
      CK (hn_op_matmul_back (g->cmd, din, G (g, x[0]), NULL, g->edgate, in, x[0], e ? HN_BACK_ACCUMULATE : flags,
                             error));
      CK (hn_op_matmul_back (g->cmd, din, G (g, x[1]), NULL, g->edup, in, x[1], HN_BACK_ACCUMULATE, error));
    }
  CK (hn_op_transpose (g->cmd, g->dw, g->dwT, 0, 1, error));
  CK (hn_op_mul (g->cmd, g->dl, a->route_w, g->dw, error));
  CK (hn_op_reduce (g->cmd, g->col, g->dl, HN_REDUCE_SUM, error));
  CK (hn_op_binary (g->cmd, g->dl, g->dw, g->col, HN_BINARY_SUB, error));
  CK (hn_op_mul (g->cmd, g->dl, g->dl, a->route_w, error));
  return hn_op_matmul_back (g->cmd, din, G (g, lw->router), NULL, g->dl, in, lw->router, HN_BACK_ACCUMULATE, error);
}

/* dx (+)= dy·W, dW += dyᵀ·x, db += Σ dy for y = x·Wᵀ + b; x16: x's f16 copy (f16ops). */
static gboolean
mm_back (HnTrainGraph *g, HnTensor *dx, HnTensor *w, HnTensor *b, HnTensor *dy, HnTensor *x, HnTensor *x16,
         HnBackFlags flags, GError **error)
{
  if (g->f16ops)
    return hn_op_matmul_back_f16 (g->cmd, dx, G (g, w), G (g, b), dy, dy->n <= g->dy16->n ? g->dy16 : NULL, x16,
                                  W16 (g, w), g->dw_tmp, flags, error);
  return hn_op_matmul_back (g->cmd, dx, G (g, w), G (g, b), dy, x, w, flags, error);
}


/* dw (f32) += dyᵀ·x rounded to f16 as autocast rounds the product, from f16
 * dy [M, N] and x [M, K]: where its output tiles do not fill the GPU over a
 * long M, in f32 first (the kernel then splits M) into dw_tmp and added
 * rounded once (as hn_op_matmul_back_f16 does). */
static gboolean
dw_f16 (HnTrainGraph *g, HnTensor *dw, HnTensor *dy16, HnTensor *x16, GError **error)
{
  gint64 M = hn_tensor_rows (dy16), N = hn_tensor_cols (dy16), K = hn_tensor_cols (x16);
  if (M < 4096 || ((N + 127) / 128) * ((K + 127) / 128) >= 66 || g->dw_tmp->n < N * K ||
      g_getenv ("HN_TRAIN_NO_DW_SPLIT") != NULL)
    return hn_op_bmm (g->cmd, dw, dy16, x16, HN_MATMUL_TRANS_A | HN_MATMUL_ACCUMULATE, 1.0f, error);
  g_autoptr (HnTensor) tmp = scratch_2d (g->dw_tmp, N, K, error);
  CK (tmp);
  hn_cmd_set_autocast (g->cmd, HN_AUTOCAST_NONE);
  gboolean ok = hn_op_bmm (g->cmd, tmp, dy16, x16, HN_MATMUL_TRANS_A, 1.0f, error);
  hn_cmd_set_autocast (g->cmd, HN_AUTOCAST_F16);
  return ok && hn_op_add_rounded_f16 (g->cmd, dw, tmp, error);
}

/* attn_back's q, k and v projections with their weights stacked (qkv_w16):
 * dq, dk, dv rounded side by side into dy16 [N, qd + 2 kvd]; din (+)= that
 * times the stacked weights, the stacked gradients += its transpose times
 * h16, the biases' from the f32 gradients. */
static gboolean
qkv_back_f16 (HnTrainGraph *g, int il, HnTensor *dq, HnTensor *dk, HnTensor *dv, HnTensor *din, HnBackFlags flags,
              GError **error)
{
  const HnLayerWeights *lw = &g->W->layers[il];
  gint64 qd = hn_tensor_cols (dq), kvd = hn_tensor_cols (dk);
  g_autoptr (HnTensor) d16 = scratch_2d (g->dy16, g->N, qd + 2 * kvd, error);
  CK (d16);
  /* each bias's gradient from the read that rounds its dy (HN_BIAS_BACK_F16=0: apart) */
  gboolean fused = g_strcmp0 (g_getenv ("HN_BIAS_BACK_F16"), "0") != 0;
  HnTensor *bs[3] = { lw->bq, lw->bk, lw->bv }, *ds[3] = { dq, dk, dv };
  gint64 c0[3] = { 0, qd, qd + kvd };
  for (int k = 0; k < 3; k++)
    if (fused && G (g, bs[k]))
      CK (hn_op_cast_f16_cols_bias (g->cmd, d16, c0[k], ds[k], G (g, bs[k]), error));
    else
      {
        CK (hn_op_cast_f16_cols (g->cmd, d16, c0[k], ds[k], error));
        if (G (g, bs[k]))
          CK (hn_op_bias_back (g->cmd, G (g, bs[k]), ds[k], error));
      }
  CK (hn_op_bmm (g->cmd, din, d16, g->qkv_w16[il], (flags & HN_BACK_ACCUMULATE) ? HN_MATMUL_ACCUMULATE : 0, 1.0f,
                 error));
  CK (dw_f16 (g, g->qkv_g[il], d16, g->L[il].h16, error));
  return TRUE;
}

/* The LM head's backward under f16ops: the logits' gradient (f32, in place of
 * the logits: 1.6 GB at gpt2 8x1024, too large for one f16 copy beside it) is
 * rounded to f16 lm_rows () rows at a time into dy16; each chunk's dh rows come
 * from it on the tensor cores, and its share of dW = dlogitsᵀ·hf is added up
 * in f32 (dw_tmp) and added to the gradient rounded to f16 once, as autocast's
 * one f16 product would be. Under g->ce_in_back each chunk's f16 gradient (and
 * its rows' loss) comes straight from the logits instead. */
static gboolean
lm_back_f16 (HnTrainGraph *g, GError **error)
{
  const HnTransformerWeights *W = g->W;
  gint64 V = hn_tensor_cols (g->logits), C = g->hp->hidden, R = MIN (g->N, lm_rows ());
  HnTensor *gw = G (g, W->lm_head);
  g_autoptr (HnTensor) tmp = gw ? scratch_2d (g->dw_tmp, V, C, error) : NULL;
  if (gw && !tmp)
    return FALSE;
  for (gint64 r0 = 0; r0 < g->N; r0 += R)
    {
      gint64 n = MIN (R, g->N - r0);
      g_autoptr (HnTensor) dl = hn_tensor_view_rows (g->logits, r0, n, error);
      g_autoptr (HnTensor) dl16 = dl ? scratch_2d (g->dy16, n, V, error) : NULL;
      g_autoptr (HnTensor) dh = dl16 ? hn_tensor_view_rows (g->dh, r0, n, error) : NULL;
      g_autoptr (HnTensor) x16 = dh ? hn_tensor_view_rows (g->hf16, r0, n, error) : NULL;
      CK (x16);
      if (g->ce_in_back)
        CK (head_rows_grad (g, r0, n, dl16, error));
      else
        CK (hn_op_cast_f16 (g->cmd, dl16, dl, error));
      CK (hn_op_bmm (g->cmd, dh, dl16, W16 (g, W->lm_head), 0, 1.0f, error));
      if (gw)
        {
          /* f16 operands: without autocast's roundings the product is the f32 one */
          hn_cmd_set_autocast (g->cmd, HN_AUTOCAST_NONE);
          gboolean ok = hn_op_bmm (g->cmd, tmp, dl16, x16, HN_MATMUL_TRANS_A | (r0 ? HN_MATMUL_ACCUMULATE : 0), 1.0f,
                                   error);
          hn_cmd_set_autocast (g->cmd, HN_AUTOCAST_F16);
          CK (ok);
        }
    }
  if (gw)
    CK (hn_op_add_rounded_f16 (g->cmd, gw, tmp, error));
  return !G (g, W->lm_head_b) || hn_op_bias_back (g->cmd, G (g, W->lm_head_b), g->logits, error);
}

static gboolean
mlp_back (HnTrainGraph *g, LayerActs *a, const HnLayerWeights *lw, HnTensor *dy, HnTensor *in, HnTensor *in16,
          HnTensor *din, HnBackFlags flags, GError **error)
{
  if (lw->router)
    return moe_back (g, a, lw, dy, in, din, flags, error);
  HnTensor *dys[N_PROJ] = { 0 };
  CK (mm_back (g, g->dact, lw->w_down, lw->b_down, dy, a->act, a->act16, 0, error));
  dys[P_DOWN] = dy;
  if (a->site[P_DOWN])
    CK (lora_back (g, a->site[P_DOWN], a->act, g->dact, dys, error));
  if (lw->w_gate && !lw->w_up)
    {
      CK (hn_op_glu_back (g->cmd, g->dgate, NULL, g->dact, a->gate, NULL, g->hp->act, error));
      CK (mm_back (g, din, lw->w_gate, lw->b_gate, g->dgate, in, in16, flags, error));
      dys[P_GATE] = g->dgate;
      if (a->site[P_GATE])
        CK (lora_back (g, a->site[P_GATE], in, din, dys, error));
    }
  else if (lw->w_gate && g->acts16)
    {
      /* dgate and dup as f16 only (see acts16: the frozen projections' dx reads nothing else) */
      CK (hn_op_glu_back (g->cmd, g->dgate16, g->dup16, g->dact, a->gate, a->up, g->hp->act, error));
      CK (hn_op_bmm (g->cmd, din, g->dgate16, lw->w_gate, (flags & HN_BACK_ACCUMULATE) ? HN_MATMUL_ACCUMULATE : 0,
                     1.0f, error));
      CK (hn_op_bmm (g->cmd, din, g->dup16, lw->w_up, HN_MATMUL_ACCUMULATE, 1.0f, error));
    }
  else if (lw->w_gate)
    {
      CK (hn_op_glu_back (g->cmd, g->dgate, g->dup, g->dact, a->gate, a->up, g->hp->act, error));
      CK (mm_back (g, din, lw->w_gate, lw->b_gate, g->dgate, in, in16, flags, error));
      CK (mm_back (g, din, lw->w_up, lw->b_up, g->dup, in, in16, HN_BACK_ACCUMULATE, error));
      dys[P_GATE] = g->dgate;
      dys[P_UP] = g->dup;
      if (a->site[P_GATE])
        CK (lora_back (g, a->site[P_GATE], in, din, dys, error));
      if (a->site[P_UP])
        CK (lora_back (g, a->site[P_UP], in, din, dys, error));
    }
  else
    {
      /* f16ops: the activation's gradient formed where dup is rounded to f16 (never stored in f32) */
      HnTensor *dy16 = g->f16ops && g->dact->n <= g->dy16->n ? g->dy16 : NULL;
      if (!a->site[P_UP] && hn_op_matmul_back_f16_act_ok (g->dact, a->up, dy16))
        return hn_op_matmul_back_f16_act (g->cmd, din, G (g, lw->w_up), G (g, lw->b_up), g->dact, a->up, g->hp->act,
                                          dy16, in16, W16 (g, lw->w_up), g->dw_tmp, flags, error);
      CK (hn_op_unary_back (g->cmd, g->dup, g->dact, a->up, g->hp->act, 0, error));
      CK (mm_back (g, din, lw->w_up, lw->b_up, g->dup, in, in16, flags, error));
      dys[P_UP] = g->dup;
      if (a->site[P_UP])
        CK (lora_back (g, a->site[P_UP], in, din, dys, error));
    }
  return TRUE;
}

/* dy = gradient of the attention block's output (after o_proj); writes (or
 * adds to, with flags) din = gradient of its input h. */
static gboolean
attn_back (HnTrainGraph *g, int il, HnTensor *dy, HnTensor *din, HnBackFlags flags, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  const HnTransformerWeights *W = g->W;
  const HnLayerWeights *lw = &W->layers[il];
  LayerActs *a = &g->L[il];
  HnTensor *dys[N_PROJ] = { 0 };
  CK (mm_back (g, g->datt, lw->wo, lw->bo, dy, a->att, a->att16, 0, error));
  dys[P_O] = dy;
  if (a->site[P_O])
    CK (lora_back (g, a->site[P_O], a->att, g->datt, dys, error));
  HnAttentionParams ap = { 0 };
  ap.scale = hp->attn_scale;
  ap.softcap = hp->attn_softcap;
  ap.causal = TRUE;
  ap.window = hp->layer_sliding && hp->layer_sliding[il] ? hp->sliding_window : 0;
  ap.alibi_slopes = W->alibi_slopes;
  if (g->flash)
    CK (hn_op_attention_back_flash (g->cmd, g->dq4, g->dk4, g->dv4, g->datt4, g->q4[il], g->k4[il], g->v4[il],
                                    g->att4[il], g->lse[il], g->att_stats, &ap, 0, error));
  else
    CK (hn_op_attention_back (g->cmd, g->dq4, g->dk4, g->dv4, g->datt4, g->q4[il], g->k4[il], g->v4[il], g->att_stats,
                              &ap, 0, error));
  if (hp->rope)
    {
      g_autoptr (HnTensor) dq3 = hn_tensor_reshape (g->dq, 3, (gint64[]) { g->N, hp->n_head, hp->head_dim }, error);
      g_autoptr (HnTensor) dk3 = dq3 ? hn_tensor_reshape (g->dk, 3, (gint64[]) { g->N, hp->n_kv_head, hp->head_dim }, error) : NULL;
      CK (dk3);
      CK (hn_op_rope_back (g->cmd, dq3, dq3, g->neg_pos, W->inv_freq, hp->rot_dims, hp->rope_style, W->rope_attn_scale,
                           error));
      CK (hn_op_rope_back (g->cmd, dk3, dk3, g->neg_pos, W->inv_freq, hp->rot_dims, hp->rope_style, W->rope_attn_scale,
                           error));
    }
  HnTensor *dq = g->dq, *dk = g->dk;
  if (hp->qk_norm_head)
    {
      CK (hn_op_rmsnorm_back (g->cmd, g->dq2_rows, G (g, lw->q_norm_w), g->dq_rows, g->q_lin_rows[il], lw->q_norm_w,
                              g->qk_stats, hp->norm_eps, 0, 0, error));
      CK (hn_op_rmsnorm_back (g->cmd, g->dk2_rows, G (g, lw->k_norm_w), g->dk_rows, g->k_lin_rows[il], lw->k_norm_w,
                              g->qk_stats, hp->norm_eps, 0, 0, error));
      dq = g->dq2;
      dk = g->dk2;
    }
  if (g->qkv_w16 && g->qkv_w16[il])
    CK (qkv_back_f16 (g, il, dq, dk, g->dv, din, flags, error));
  else
    {
      CK (mm_back (g, din, lw->wq, lw->bq, dq, a->h, a->h16, flags, error));
      CK (mm_back (g, din, lw->wk, lw->bk, dk, a->h, a->h16, HN_BACK_ACCUMULATE, error));
      CK (mm_back (g, din, lw->wv, lw->bv, g->dv, a->h, a->h16, HN_BACK_ACCUMULATE, error));
    }
  dys[P_Q] = dq;
  dys[P_K] = dk;
  dys[P_V] = g->dv;
  return lora_back_qkv (g, a, a->h, din, dys, error);
}

static gboolean
layer_back (HnTrainGraph *g, int il, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  const HnLayerWeights *lw = &g->W->layers[il];
  LayerActs *a = &g->L[il];
  HnTensor *x = g->resid[il];
  /* g->dres holds d(layer output); turns into d(layer input). */
  switch (hp->block)
    {
    case HN_BLOCK_PRE_NORM:
      CK (mlp_back (g, a, lw, g->dres, a->h2, a->h2_16, g->dh2, 0, error));
      CK (norm_back (g, g->dres, g->dh2, a->x_mid, lw->ln2_w, lw->ln2_b, HN_BACK_ACCUMULATE, error));
      CK (attn_back (g, il, g->dres, g->dh, 0, error));
      CK (norm_back (g, g->dres, g->dh, x, lw->ln1_w, lw->ln1_b, HN_BACK_ACCUMULATE, error));
      break;
    case HN_BLOCK_PARALLEL:
      CK (attn_back (g, il, g->dres, g->dh, 0, error));
      CK (mlp_back (g, a, lw, g->dres, a->h, a->h16, g->dh, HN_BACK_ACCUMULATE, error));
      CK (norm_back (g, g->dres, g->dh, x, lw->ln1_w, lw->ln1_b, HN_BACK_ACCUMULATE, error));
      break;
    case HN_BLOCK_PARALLEL_2NORM:
      CK (attn_back (g, il, g->dres, g->dh, 0, error));
      CK (mlp_back (g, a, lw, g->dres, a->h2, a->h2_16, g->dh2, 0, error));
      CK (norm_back (g, g->dres, g->dh, x, lw->ln1_w, lw->ln1_b, HN_BACK_ACCUMULATE, error));
      CK (norm_back (g, g->dres, g->dh2, x, lw->ln2_w, lw->ln2_b, HN_BACK_ACCUMULATE, error));
      break;
    default:
      return unsupported (hn_block_kind_name (hp->block), error);
    }
  return TRUE;
}

static gboolean
backward (HnTrainGraph *g, GError **error)
{
  const HnTransformerHParams *hp = g->hp;
  const HnTransformerWeights *W = g->W;
  /* dlogits in place (row_scale already holds w/Σw·logits_scale); in
   * chunks, forward took the head's gradient */
  if (g->n_chunks <= 1)
    {
      if (!g->ce_in_back)
        CK (hn_op_cross_entropy_back (g->cmd, g->logits, g->logits, g->targets, g->row_scale, error));
      if (g->f16ops)
        CK (lm_back_f16 (g, error));
      else
        CK (mm_back (g, g->dh, W->lm_head, W->lm_head_b, g->logits, g->hf, g->hf16, 0, error));
    }
  CK (norm_back (g, g->dres, g->dh, g->resid[hp->n_layer], W->final_norm_w, W->final_norm_b, 0, error));
  for (int il = hp->n_layer - 1; il >= 0; il--)
    {
      /* checkpointing: the shared activations hold the last layer's after
       * the forward; every other layer is recomputed from its saved input
       * (this rewrites resid[il + 1] with the same values) */
      if (g->checkpointing && il < hp->n_layer - 1)
        CK (layer_fwd (g, il, error));
      CK (layer_back (g, il, error));
    }
  if (W->pos_embed && G (g, W->pos_embed))
    CK (hn_op_embedding_back_grouped (g->cmd, G (g, W->pos_embed), g->dres, g->pos_groups, error));
  if (G (g, W->tok_embed))
    {
      if (hp->embed_scale != 1.0f)
        CK (hn_op_scale (g->cmd, g->dres, g->dres, hp->embed_scale, 0.0f, error));
      CK (hn_op_embedding_back_grouped (g->cmd, G (g, W->tok_embed), g->dres, g->id_groups, error));
    }
  return TRUE;
}

/* ---------------------------------------------------------------- steps */

/* A recorder for a recording made once and replayed (g->zero, g->opt). */
static HnCmd *
replay_cmd (HnTrainGraph *g, HnCmd **slot, GError **error)
{
  if (!*slot && (*slot = hn_cmd_new (g->ctx, error)))
    hn_cmd_set_reusable (*slot);
  return *slot;
}

gboolean
hn_train_graph_zero_grads (HnTrainGraph *g, GError **error)
{
  HnCmd *c = g->replay ? replay_cmd (g, &g->zero, error) : g->aux;
  if (!c)
    return FALSE;
  if (c == g->aux || !hn_cmd_is_finished (c))
    {
      for (guint i = 0; i < g->params->len; i++)
        if (!hn_op_fill (c, ((HnTrainParam *) g->params->pdata[i])->g, 0.0f, error))
          {
            hn_cmd_reset (c);
            return FALSE;
          }
      if (c == g->aux)
        return hn_cmd_submit_wait (c, error);
      CK (hn_cmd_finish (c, error));
    }
  return hn_cmd_replay (c, 1, error);
}

static gboolean
upload_batch (HnTrainGraph *g, const gint32 *inputs, const gint32 *targets, GError **error)
{
  int V = g->hp->vocab;
  for (gint64 i = 0; i < g->N; i++)
    {
      if (inputs[i] < 0 || inputs[i] >= V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "training batch: input id %d at %" G_GINT64_FORMAT " is outside the vocabulary (0..%d)", inputs[i],
                       i, V - 1);
          return FALSE;
        }
      if (targets[i] != -100 && (targets[i] < 0 || targets[i] >= V))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "training batch: label %d at %" G_GINT64_FORMAT " is outside the vocabulary (0..%d)", targets[i],
                       i, V - 1);
          return FALSE;
        }
    }
  g_autofree gint32 *grp = g_new0 (gint32, HN_EMBEDDING_GROUPS_LEN (g->N));
  hn_embedding_groups (inputs, g->N, V, grp);
  return hn_tensor_upload_i32 (g->ids, inputs, g->N, error) && hn_tensor_upload_i32 (g->targets, targets, g->N, error) &&
         hn_tensor_upload_i32 (g->id_groups, grp, HN_EMBEDDING_GROUPS_LEN (g->N), error);
}

void
hn_train_graph_set_loss_scale (HnTrainGraph *g, double scale)
{
  g->loss_scale = scale;
}

double
hn_train_graph_get_loss_scale (HnTrainGraph *g)
{
  return g->loss_scale;
}

/* Forward and backward of the uploaded batch: recorded the first time (and
 * whenever profiling changed or something else recorded into g->cmd), then
 * replayed: nothing they record depends on the batch's values, which the
 * kernels read from the input buffers. */
static gboolean
run_step (HnTrainGraph *g, GError **error)
{
  gboolean profiled = hn_cmd_get_profiling (g->cmd);
  if (!g->step_ready || !g->replay || profiled != g->step_profiled)
    {
      g->step_ready = FALSE;
      hn_cmd_reset (g->cmd);
      gint64 t0 = g_get_monotonic_time ();
      gboolean ok = forward (g, TRUE, error) && backward (g, error) && hn_cmd_finish (g->cmd, error);
      g->record_us += g_get_monotonic_time () - t0;
      if (!ok)
        {
          hn_cmd_reset (g->cmd);
          return FALSE;
        }
      g->step_ready = TRUE;
      g->step_profiled = profiled;
    }
  return hn_cmd_replay (g->cmd, 1, error);
}

gboolean
hn_train_graph_micro_step (HnTrainGraph *g, const gint32 *inputs, const gint32 *targets, const float *weights,
                           double w_total, double *loss_part, GError **error)
{
  CK (upload_batch (g, inputs, targets, error));
  g_autofree float *rs = g_new (float, g->N);
  for (gint64 i = 0; i < g->N; i++)
    {
      double w = targets[i] == -100 ? 0.0 : (weights ? weights[i] : 1.0);
      rs[i] = w_total > 0 ? (float) (w / w_total * g->hp->logits_scale * g->loss_scale) : 0.0f;
    }
  CK (hn_tensor_upload_f32 (g->row_scale, rs, g->N, error));
  CK (run_step (g, error));
  g_autofree float *lr = g_new (float, g->N);
  CK (hn_tensor_download_f32 (g->loss_rows, lr, g->N, error));
  double s = 0;
  for (gint64 i = 0; i < g->N; i++)
    if (targets[i] != -100)
      s += (weights ? weights[i] : 1.0) * lr[i];
  *loss_part = w_total > 0 ? s / w_total : 0.0;
  if (!isfinite (*loss_part))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "training: the loss is not finite (%g)", *loss_part);
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_train_graph_eval_loss (HnTrainGraph *g, const gint32 *inputs, const gint32 *targets, const float *weights,
                          double *loss_sum, double *weight_sum, GError **error)
{
  CK (upload_batch (g, inputs, targets, error));
  /* into the step's recorder (its activations and scratch), which must then record the step anew */
  g->step_ready = FALSE;
  hn_cmd_reset (g->cmd);
  if (!forward (g, FALSE, error) || !hn_cmd_finish (g->cmd, error))
    {
      hn_cmd_reset (g->cmd);
      return FALSE;
    }
  CK (hn_cmd_replay (g->cmd, 1, error));
  g_autofree float *lr = g_new (float, g->N);
  CK (hn_tensor_download_f32 (g->loss_rows, lr, g->N, error));
  double s = 0, w = 0;
  for (gint64 i = 0; i < g->N; i++)
    if (targets[i] != -100)
      {
        double wi = weights ? weights[i] : 1.0;
        s += wi * lr[i];
        w += wi;
      }
  *loss_sum = s;
  *weight_sum = w;
  return TRUE;
}

gboolean
hn_train_graph_grad_norm (HnTrainGraph *g, double *norm, GError **error)
{
  guint off = 0;
  for (guint i = 0; i < g->params->len; i++)
    {
      HnTrainParam *p = g->params->pdata[i];
      CK (hn_op_sumsq_partials (g->aux, g->partials, off, p->g, error));
      off += hn_sumsq_n_partials (p->g->n);
    }
  CK (hn_cmd_submit_wait (g->aux, error));
  g_autofree float *parts = g_new (float, g->partials->n);
  CK (hn_tensor_download_f32 (g->partials, parts, g->partials->n, error));
  double s = 0;
  for (guint i = 0; i < off; i++)
    s += parts[i];
  *norm = sqrt (s);
  return TRUE;
}

/* The AdamW step recorded once (for these β1, β2, eps and weight decay) and
 * replayed with this step's scalars. */
static gboolean
adamw_replayed (HnTrainGraph *g, const HnOptimConfig *oc, gint64 step, double lr, float clip, GError **error)
{
  HnCmd *c = replay_cmd (g, &g->opt, error);
  if (!c)
    return FALSE;
  if (!g->opt_scalars &&
      !(g->opt_scalars = own (g, hn_tensor_new_named (g->ctx, "train.adamw_scalars", HN_DTYPE_F32, 1,
                                                      (gint64[]) { 8 }, error))))
    return FALSE;
  double key[4] = { oc->beta1, oc->beta2, oc->eps, oc->weight_decay };
  HnAdamwScalars s[2];
  hn_adamw_scalars (&s[0], step, lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay);
  hn_adamw_scalars (&s[1], step, lr, oc->beta1, oc->beta2, oc->eps, 0.0);
  float vals[8];
  hn_adamw_replay_values (vals, &s[0], clip);
  hn_adamw_replay_values (vals + 4, &s[1], clip);
  CK (hn_tensor_upload_f32 (g->opt_scalars, vals, 8, error));
  if (!hn_cmd_is_finished (c) || memcmp (key, g->opt_key, sizeof key) != 0)
    {
      hn_cmd_reset (c);
      for (guint i = 0; i < g->params->len; i++)
        {
          HnTrainParam *p = g->params->pdata[i];
          if (!hn_op_adamw_replayable (c, p->w, p->w16, p->g, p->m, p->v, &s[p->decay ? 0 : 1], g->opt_scalars,
                                       p->decay ? 0 : 1, error))
            {
              hn_cmd_reset (c);
              return FALSE;
            }
        }
      CK (hn_cmd_finish (c, error));
      memcpy (g->opt_key, key, sizeof key);
    }
  return hn_cmd_replay (c, 1, error);
}

gboolean
hn_train_graph_optimizer_step (HnTrainGraph *g, const HnOptimConfig *oc, gint64 step, double lr, float clip,
                               GError **error)
{
  if (g->replay && oc->kind != HN_OPTIM_SGD)
    return adamw_replayed (g, oc, step, lr, clip, error);
  for (guint i = 0; i < g->params->len; i++)
    {
      HnTrainParam *p = g->params->pdata[i];
      double wd = p->decay ? oc->weight_decay : 0.0;
      if (oc->kind == HN_OPTIM_SGD)
        {
          CK (hn_op_sgd (g->aux, p->w, p->g, p->m, (float) lr, (float) oc->momentum, (float) wd, step == 1, clip, error));
          if (p->w16)
            CK (hn_op_cast_f16 (g->aux, p->w16, p->w, error));
        }
      else
        {
          HnAdamwScalars s;
          hn_adamw_scalars (&s, step, lr, oc->beta1, oc->beta2, oc->eps, wd);
          if (p->w16)
            CK (hn_op_adamw_f16 (g->aux, p->w, p->w16, p->g, p->m, p->v, &s, clip, error));
          else
            CK (hn_op_adamw (g->aux, p->w, p->g, p->m, p->v, &s, clip, error));
        }
    }
  return hn_cmd_submit_wait (g->aux, error);
}

gboolean
hn_train_graph_sync_adapter (HnTrainGraph *g, GError **error)
{
  for (guint i = 0; i < g->sites->len; i++)
    {
      LoraSite *s = g->sites->pdata[i];
      CK (hn_tensor_download_f32 (s->A, s->host->a, s->A->n, error));
      CK (hn_tensor_download_f32 (s->B, s->host->b, s->B->n, error));
    }
  return TRUE;
}

void
hn_lora_candidates_free (GArray *c)
{
  if (!c)
    return;
  for (guint i = 0; i < c->len; i++)
    g_free (g_array_index (c, HnLoraCandidate, i).path);
  g_array_unref (c);
}

GArray *
hn_train_graph_lora_candidates (HnTransformer *model, const HnLoraConfig *cfg, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (model);
  const HnTransformerWeights *W = hn_transformer_get_weights (model);
  const char *prefix;
  const ModuleMap *map;
  guint n_map;
  if (!lora_modules (hp, &prefix, &map, &n_map, error))
    return NULL;
  GArray *out = g_array_new (FALSE, TRUE, sizeof (HnLoraCandidate));
  for (int il = 0; il < hp->n_layer; il++)
    for (guint mi = 0; mi < n_map; mi++)
      {
        const HnLayerWeights *lw = &W->layers[il];
        HnTensor *w0 = proj_weight (lw, map[mi].proj[0]);
        if (!w0)
          continue;
        g_autofree char *path = g_strdup_printf ("%s%d.%s", prefix, il, map[mi].module);
        if (!hn_lora_config_matches (cfg, path))
          continue;
        gint64 out_total = 0;
        for (int k = 0; k < map[mi].n; k++)
          out_total += proj_weight (lw, map[mi].proj[k])->shape[0];
        HnLoraCandidate c = { g_steal_pointer (&path), (int) w0->shape[1], (int) out_total };
        g_array_append_val (out, c);
      }
  if (out->len == 0)
    {
      hn_lora_candidates_free (out);
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--lora-target-modules matches no module of this %s model (its modules are named like %s0.%s)",
                   hp->arch->model_type, prefix, map[0].module);
      return NULL;
    }
  return out;
}

HnCmd *
hn_train_graph_get_cmd (HnTrainGraph *g)
{
  return g->cmd;
}

gint64
hn_train_graph_get_record_us (HnTrainGraph *g)
{
  return g->record_us;
}
