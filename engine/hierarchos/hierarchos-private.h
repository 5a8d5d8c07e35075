/* Internal to engine/hierarchos/hierarchos*.c: the CPU tape (reverse-mode
 * autodiff over float vectors) that both the inference runtime and the CPU
 * trainer run the token step on, so training differentiates exactly the
 * function that inference computes. */
#pragma once
#include "hierarchos/hierarchos.h"

G_BEGIN_DECLS

typedef int HnVar; /* node index on the tape; -1 = none */

typedef enum {
  HT_LEAF, HT_LINEAR, HT_VECMAT, HT_ROW, HT_ADD, HT_SUB, HT_MUL, HT_SCALE, HT_ADDC, HT_MULS,
  HT_CONCAT, HT_LN, HT_GN, HT_GELU, HT_SILU, HT_SIGMOID, HT_TANH, HT_RELUSQ, HT_WDECAY, HT_CLAMP,
  HT_CLAMP2, HT_L2CLAMP, HT_MIX, HT_HEADNORM, HT_WKV, HT_WKVREAD, HT_BONUS, HT_GATHER, HT_MEANSQ,
  HT_RELU, HT_MINC, HT_CE, HT_SMOOTHL1, HT_STRAIGHT, HT_SUM,
} HnHTapeOp;

typedef struct {
  float *val, *grad;
  int n;
  int op;
  HnVar in[4];
  int ia[4];
  float fa[4];
  float *aux; /* op-specific saved values */
  int *iaux;
} HnHTapeNode;

typedef struct {
  GArray *nodes;   /* HnHTapeNode */
  GPtrArray *blocks; /* float arenas, kept across resets */
  GArray *block_sizes; /* gsize per block */
  guint cur;           /* block in use */
  gsize block_used;
  int n_params;    /* nodes [0, n_params) are the model parameters */
  gboolean record_grads;
  guint peak_nodes;  /* the most nodes held before a reset */
} HnHTape;

HnHTape *hn_htape_new (void);
void hn_htape_free (HnHTape *t);
/* Drops every node and frees the arena (keeps the first block). */
void hn_htape_reset (HnHTape *t);
float *hn_htape_alloc (HnHTape *t, gsize n);
/* Bytes the tape holds: its arena blocks and its most nodes. */
guint64 hn_htape_bytes (const HnHTape *t);
static inline HnHTapeNode *hn_htape_node (HnHTape *t, HnVar v) { return &g_array_index (t->nodes, HnHTapeNode, v); }
static inline float *hn_htape_val (HnHTape *t, HnVar v) { return hn_htape_node (t, v)->val; }

/* Leaves: a parameter (grad may be NULL: not trained) or a constant copy. */
HnVar hn_htape_leaf (HnHTape *t, float *val, float *grad, int n);
HnVar hn_htape_const (HnHTape *t, const float *val, int n);
HnVar hn_htape_zeros (HnHTape *t, int n);

/* Ops. Shapes: W [out, in] row-major, M [in, out]. */
HnVar hn_htape_linear (HnHTape *t, HnVar W, HnVar x, HnVar b, int out, int in);
HnVar hn_htape_vecmat (HnHTape *t, HnVar x, HnVar M, int in, int out);
HnVar hn_htape_row (HnHTape *t, HnVar W, int row, int cols);
HnVar hn_htape_add (HnHTape *t, HnVar a, HnVar b);
HnVar hn_htape_sub (HnHTape *t, HnVar a, HnVar b);
HnVar hn_htape_mul (HnHTape *t, HnVar a, HnVar b);
HnVar hn_htape_scale (HnHTape *t, HnVar a, float s);
HnVar hn_htape_addc (HnHTape *t, HnVar a, float c);
HnVar hn_htape_muls (HnHTape *t, HnVar a, HnVar s1); /* a * scalar node */
HnVar hn_htape_concat (HnHTape *t, int n_in, const HnVar *in);
HnVar hn_htape_ln (HnHTape *t, HnVar x, HnVar w, HnVar b, float eps);
HnVar hn_htape_gn (HnHTape *t, HnVar x, HnVar w, HnVar b, int groups, float eps);
HnVar hn_htape_gelu (HnHTape *t, HnVar x);
HnVar hn_htape_silu (HnHTape *t, HnVar x);
HnVar hn_htape_sigmoid (HnHTape *t, HnVar x);
HnVar hn_htape_tanh (HnHTape *t, HnVar x);
HnVar hn_htape_relusq (HnHTape *t, HnVar x);
HnVar hn_htape_relu (HnHTape *t, HnVar x);
HnVar hn_htape_wdecay (HnHTape *t, HnVar x);  /* -softplus(-x) - 0.5 */
HnVar hn_htape_clamp (HnHTape *t, HnVar x, float m); /* finite clamp to +-m */
HnVar hn_htape_clamp2 (HnHTape *t, HnVar x, float lo, float hi);
HnVar hn_htape_l2clamp (HnHTape *t, HnVar x, float m);
HnVar hn_htape_mix (HnHTape *t, HnVar xn, HnVar prev, HnVar coeff);
HnVar hn_htape_headnorm (HnHTape *t, HnVar k, int heads); /* per-head L2, eps 1e-12 */
HnVar hn_htape_wkv (HnHTape *t, HnVar S, HnVar w, HnVar k, HnVar v, HnVar kk, HnVar a, int heads, int N);
HnVar hn_htape_wkvread (HnHTape *t, HnVar S, HnVar r, int heads, int N);
HnVar hn_htape_bonus (HnHTape *t, HnVar x, HnVar r, HnVar k, HnVar rk, HnVar v, int heads);
/* rows of M [rows, cols] (+ constant `fast` rows), zero-padded to `k` rows */
HnVar hn_htape_gather (HnHTape *t, HnVar M, const float *fast, const int *idx, int n_idx, int k, int cols);
HnVar hn_htape_meansq (HnHTape *t, HnVar x);
HnVar hn_htape_minc (HnHTape *t, HnVar x, float c);
HnVar hn_htape_sum (HnHTape *t, HnVar x);
/* cross-entropy of logits at `target` plus zw * logsumexp^2, times weight; the
 * per-token CE (without z) lands in *ce_out when not NULL. */
HnVar hn_htape_ce (HnHTape *t, HnVar logits, int target, float zw, float weight, float *ce_out);
HnVar hn_htape_smoothl1 (HnHTape *t, HnVar x, float target, float beta);
/* value = hard, gradient flows into soft (straight-through) */
HnVar hn_htape_straight (HnHTape *t, HnVar soft, float hard);

/* Backward from a scalar node with seed gradient `seed`. Parameter leaves
 * accumulate into their grad buffers. */
void hn_htape_backward (HnHTape *t, HnVar root, float seed);
/* Several roots: seed each, then sweep the whole tape once. */
void hn_htape_seed (HnHTape *t, HnVar v, float g);
void hn_htape_sweep (HnHTape *t);

/* ---- the model's parameter indices on a tape ---- */

typedef struct {
  int W, N, heads, rw, ra, rg;
  HnVar x_r, x_w, x_k, x_v, x_a, x_g, w1, w2, w0, a1, a2, a0, g1, g2, k_k, k_a, r_k, x_k_cm;
  HnVar ln1w, ln1b, ln2w, ln2b, lnxw, lnxb, rec, key, val, out, kcm, vcm;
} HnHierCellIdx;

typedef struct {
  HnVar lm_head, hde_down, hde_up, hde_bias, lde_down, lde_up, lde_bias, ra_down, ra_up, ra_bias;
  HnVar rosa_gate_logit, rosa_router_w, rosa_router_b, ltm_gate_logit, ltm_router_w, ltm_router_b;
  HnVar warmup_step, persistent, ltm_keys, ltm_vals, qproj, in_proj_w, in_proj_b, l_feedback;
  HnVar h_to_ctx_w, h_to_ctx_b, halt_w, halt_b, l_in_w, l_in_b, drift_w, l_out_w, l_out_b, onw, onb;
  HnHierCellIdx h, l;
} HnHierIdx;

/* Registers every parameter as a leaf (nodes 0..n-1 in param_list order);
 * grads (same layout as params) may be NULL. Fills idx. */
void hn_hier_tape_params (HnHTape *t, HnHierModel *m, float *grads, HnHierIdx *idx);

typedef struct { HnVar tm, cm, vf, out, S; } HnHierVCell;
typedef struct {
  HnHierVCell h, l;
  HnVar prev_ctx, target_ctx, final_drift;
} HnHierVState;

#define HN_HIER_MAX_STEPS 64
typedef struct {
  HnVar logits;
  gboolean pondered;
  int n_h, selected;                 /* computed manager steps, chosen index */
  HnVar halt_p[HN_HIER_MAX_STEPS];   /* [1] each */
  int n_refine;
  HnVar drift[HN_HIER_MAX_STEPS];    /* drift after each refinement step [C] */
  /* logits < 0: the cross-entropy was computed elsewhere (the Vulkan
   * trainer, which also computes the logits' gradient): its value and lse */
  float ce, lse;
} HnHierStepOut;

void hn_hier_vstate_load (HnHTape *t, const HnHierModel *m, const HnHierState *s, HnHierVState *vs);
void hn_hier_vstate_store (HnHTape *t, const HnHierModel *m, const HnHierVState *vs, HnHierState *s);
/* Replaces every differentiable state var by a constant copy (TBPTT cut). */
void hn_hier_vstate_detach (HnHTape *t, HnHierVState *vs);
/* One token on the tape: differentiable state in vs, the rest (ROSA,
 * position, history, fast values) in s. */
gboolean hn_hier_forward_step (HnHTape *t, HnHierModel *m, const HnHierIdx *ix, HnHierVState *vs,
                               HnHierState *s, guint32 token, HnHierStepOut *out, GError **error);

/* ---- training (hierarchos-train.c) ---- */

typedef struct {
  double total, ce, ce_z, ponder, commit;
  gint64 n_tokens;
} HnHierLoss;

/* One chunk of n tokens from state s (advanced in place): forward on a reset
 * tape, the losses, and when grads is not NULL the backward with every seed
 * multiplied by `scale`, accumulating into grads. labels < 0 are ignored;
 * weights (may be NULL) weight each position's cross-entropy. */
enum {
  /* Gradient checks only: the ponder term's forward uses the soft depth
   * instead of the straight-through hard depth, so finite differences see
   * the function whose gradient the backward computes. */
  HN_HIER_LOSS_SOFT_PONDER = 1 << 0,
};
gboolean hn_hier_chunk_loss (HnHTape *t, HnHierModel *m, float *grads, float scale, HnHierState *s,
                             const guint32 *inputs, const gint32 *labels, const float *weights, int n,
                             int flags, HnHierLoss *loss, GError **error);

/* The losses alone, built on tape t from each token's outputs (so.logits,
 * halt_p, drift may be leaves holding values computed elsewhere, e.g. by
 * the Vulkan trainer): hn_hier_loss_token per position (label < 0 or weight
 * <= 0: no loss), then hn_hier_loss_finish fills `loss` and, with grads,
 * seeds every loss term by `scale` and sweeps the tape. */
typedef struct {
  GArray *ce, *ponder, *commit; /* HnVar of each term */
  double wsum, ce_sum;
} HnHierLossAcc;
void hn_hier_loss_acc_init (HnHierLossAcc *a);
void hn_hier_loss_acc_clear (HnHierLossAcc *a);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (HnHierLossAcc, hn_hier_loss_acc_clear)
gboolean hn_hier_loss_token (HnHTape *t, HnHierModel *m, const HnHierStepOut *so, gint32 lab, float w, int flags,
                             HnHierLossAcc *a, HnHierLoss *loss, GError **error);
void hn_hier_loss_finish (HnHTape *t, HnHierModel *m, HnHierLossAcc *a, float scale, gboolean grads,
                          HnHierLoss *loss);

/* ---- weights ---- */
gboolean hn_hier_model_save_weights (HnHierModel *m, const char *path, GError **error);
gboolean hn_hier_model_load_weights (HnHierModel *m, const char *path, GError **error);

G_END_DECLS
