/* Internal to engine/hierarchos/hierarchos-vk*.c: the Vulkan runtime's ops.
 *
 * The token step is recorded as a program of a few Hierarchos-specific ops
 * (shaders/hier_*.comp). Every op reads the model's parameters (one f32
 * block, `prm`) and reads and writes the runner's work buffer (`wk`: state,
 * scratch, control words, logits) at element offsets given in its push
 * constants. Each op has a CPU reference (hierarchos-vk-ref.c) that
 * interprets the same push constants, so the shaders are tested against it
 * and a program can also run on the host.
 *
 * Batch rows: an op with `rows` > 1 runs once per row (gl_WorkGroupID.z),
 * row r's work buffer starting at r * rs (every push struct ends with rs
 * and ps); its offsets are relative to that base. Training keeps one
 * gradient slice of the parameters' size per row, at r * ps. */
#pragma once
#include "hierarchos/hierarchos-private.h"
#include "vk/hn-vk.h"
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

#define HN_HIER_NONE 0xffffffffu
/* In a predicate: run when the control word is 0 (the negation). */
#define HN_HIER_PRED_NOT 0x80000000u

typedef enum {
  HN_HIER_OP_MATVEC,
  HN_HIER_OP_NORM,
  HN_HIER_OP_WKV,
  HN_HIER_OP_LTM,
  HN_HIER_OP_DRIFT,
  HN_HIER_OP_EW,
  HN_HIER_N_OPS,
} HnHierOpKind;

/* Activation codes: HnActivation's numbers plus this one. */
#define HN_HIER_ACT_WDECAY 9u

enum { HN_HIER_POST_PLAIN, HN_HIER_POST_CM, HN_HIER_POST_GATE, HN_HIER_POST_HALT };
/* MATVEC flags bit (training, every post but halting): the forward also
 * writes v = W x + b + res to wk[u0 + o], so its backward reads v instead
 * of reading W again. */
#define HN_HIER_MV_KEEP_V 2u
/* MATVEC flags bit (training): the backward adds no weight gradient; the
 * trainer adds it once per weight and chunk as a matmul over the weight's
 * uses (each keeps its dv: in its own scratch, or scale x the output's
 * gradient for a direct Linear). */
#define HN_HIER_MV_NO_DW 8u

/* shaders/hierarchos/hier_matvec.comp documents every field. */
typedef struct {
  guint32 out_n, in_n, trans, w_off;
  guint32 b_off, res_off, y_off, y2_off;
  guint32 x0, n0, x1, n1;
  guint32 x2, xsrc, act, post;
  guint32 aux, pred, flags, u0;
  float scale, clamp, clamp2, f0;
  float f1;
  guint32 rs, ps;
} HnHierMatvecPush;

typedef struct {
  guint32 width, x_off, xsrc, w_off;
  guint32 b_off, y_off;
  float eps, yclamp;
  guint32 n_mix, prev_off, mix_off, pred;
  guint32 c[6];
  guint32 xi;
  guint32 rs, ps;
} HnHierNormPush;

typedef struct {
  guint32 N, r_off, k_off, v_off;
  guint32 a_off, g_off, w_off, kk_p;
  guint32 ka_p, rk_p, lnw_p, lnb_p;
  guint32 s_off, vf_off, t_off;
  float sc, eps;
  guint32 pred, so_off;
  guint32 rs, ps;
} HnHierWkvPush;

typedef struct {
  guint32 S, K, Vd, topk;
  guint32 keys_p, vals_p, fast_off, q_off;
  guint32 gate_off, y_off, idx_off, pred;
  guint32 rs, ps;
} HnHierLtmPush;

enum { HN_HIER_DRIFT_START, HN_HIER_DRIFT_REFINE, HN_HIER_DRIFT_FINAL };

typedef struct {
  guint32 n, d_off, delta_off, ctx_off;
  guint32 cd_off, y_off;
  float dsc, dnc, atol;
  guint32 mode, flag, nflag, pred;
  guint32 rs, ps;
} HnHierDriftPush;

enum { HN_HIER_EW_COPY, HN_HIER_EW_LERP, HN_HIER_EW_AXPYS };

typedef struct {
  guint32 n, op, a_off, asrc;
  guint32 b_off, s_off, y_off;
  float f0, clamp;
  guint32 pred, xi;
  guint32 rs, ps;
} HnHierEwPush;

typedef struct {
  HnHierOpKind kind;
  guint32 groups;
  guint32 rows; /* 0 or 1: one row */
  guint32 bs;   /* training: the backward's scratch in gwk (row-relative) */
  gboolean no_back; /* training: a detaching copy (no gradient flows back) */
  union {
    HnHierMatvecPush mv;
    HnHierNormPush norm;
    HnHierWkvPush wkv;
    HnHierLtmPush ltm;
    HnHierDriftPush drift;
    HnHierEwPush ew;
  } u;
} HnHierOp;

/* Limits of the shaders (workgroup-local arrays). */
#define HN_HIER_VK_MAX_HEAD 64
#define HN_HIER_VK_MAX_SLOTS 4096
#define HN_HIER_VK_MAX_TOPK 64
#define HN_HIER_VK_MAX_DRIFT 4096

/* The workgroup count an op needs (from its push constants). */
guint32 hn_hier_op_groups (const HnHierOp *op);
/* The row stride (rs) of an op. */
guint32 hn_hier_op_rs (const HnHierOp *op);
/* The CPU reference of one op (every row). */
void hn_hier_op_ref (const HnHierOp *op, const float *prm, float *wk);
/* The references' rules (hierarchos-vk-ref.c): a row skipped by its
 * predicate, the clamp that passes non-finite values, the stable sigmoid,
 * an activation code's function. */
gboolean hn_hier_ref_skip (const float *wk, guint32 pred);
float hn_hier_ref_clamp (float x, float m);
float hn_hier_ref_sigmoid (float x);
float hn_hier_ref_act (guint32 act, float x);
/* Records one op: prm and wk are bound whole at bindings 0 and 1. */
gboolean hn_hier_op_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, GError **error);

/* ---- training: the backward of each op ----
 *
 * The backward of an op takes the op's own push constants. wk holds the
 * forward's values (a training program never overwrites a value that a
 * later op or a backward reads), gwk the gradients of the work buffer (the
 * same layout, rows at r * rs) and gprm one gradient slice of the
 * parameters' size per row (row r's at r * ps). For every row whose
 * predicate held in the forward, the backward reads the gradient of each
 * output at the output's offset in gwk and ADDS the gradient of each input:
 * inputs read from wk to gwk at the same offset, inputs read from prm
 * (weights, biases, mix coefficients, embedding rows, gate logits) to the
 * row's gprm slice. Control words (predicates, halting words, refinement
 * flags, LTM picks) get no gradient; an output's gradient may be left
 * changed. The rules are the CPU tape's (hierarchos-tape.c), op for op.
 * An op may use hn_hier_*_back_scratch floats of gwk at op->bs in its row
 * (content undefined on entry). No float atomics: the same inputs give the
 * same bits, so training is deterministic. */
typedef gboolean (*HnHierBackRecordFunc) (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk,
                                          HnVkBuffer *gprm, HnVkBuffer *gwk, GError **error);
typedef void (*HnHierBackRefFunc) (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);

/* One dispatch of a backward shader: prm, wk, gprm, gwk bound whole at 0..3,
 * gx workgroups (split over y past 65535) times `rows` in z. */
gboolean hn_hier_back_dispatch (HnCmd *cmd, const char *shader, const void *push, guint push_size, HnVkBuffer *prm,
                                HnVkBuffer *wk, HnVkBuffer *gprm, HnVkBuffer *gwk, guint32 gx, guint32 rows,
                                GError **error);

/* The backward of any op (hierarchos-vk-back.c: by kind). */
guint32 hn_hier_op_back_scratch (const HnHierOp *op);
void hn_hier_op_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_op_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                 HnVkBuffer *gwk, GError **error);

/* Per op kind (hierarchos-vk-back-*.c). */
guint32 hn_hier_mv_back_scratch (const HnHierOp *op);
/* A plain Linear (no activation, clamp or y2): its dv is scale x dL/dy and
 * the backward keeps no dv of its own. */
gboolean hn_hier_mv_back_direct (const HnHierMatvecPush *p);
void hn_hier_mv_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_mv_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                 HnVkBuffer *gwk, GError **error);
guint32 hn_hier_wkv_back_scratch (const HnHierOp *op);
void hn_hier_wkv_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_wkv_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                  HnVkBuffer *gwk, GError **error);
guint32 hn_hier_ltm_back_scratch (const HnHierOp *op);
void hn_hier_ltm_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_ltm_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                  HnVkBuffer *gwk, GError **error);
guint32 hn_hier_norm_back_scratch (const HnHierOp *op);
void hn_hier_norm_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_norm_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                   HnVkBuffer *gwk, GError **error);
guint32 hn_hier_drift_back_scratch (const HnHierOp *op);
void hn_hier_drift_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_drift_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                    HnVkBuffer *gwk, GError **error);
guint32 hn_hier_ew_back_scratch (const HnHierOp *op);
void hn_hier_ew_back_ref (const HnHierOp *op, const float *prm, const float *wk, float *gprm, float *gwk);
gboolean hn_hier_ew_back_record (HnCmd *cmd, const HnHierOp *op, HnVkBuffer *prm, HnVkBuffer *wk, HnVkBuffer *gprm,
                                 HnVkBuffer *gwk, GError **error);

/* ---- the runner (hierarchos-vk.c; training in hierarchos-vk-train.c) ----
 *
 * Every value a chunk computes gets its own slot in the row's activation
 * region (nothing is overwritten), so the same program serves inference and
 * training: the backward reads what the forward left. Per row: */
typedef struct { guint32 tm, cm, vf, out, S, size; } HnHierCellOff;

/* A token's values the losses need (row-relative offsets). */
typedef struct {
  gboolean pondered;
  guint32 hp, ctl; /* halting probabilities [max_h], the last control words [3] */
  guint32 flags;   /* refinement predicates [max_l + 1] */
  guint32 d;       /* drift [max_l + 1][C]: d[i + 1] after refinement step i */
} HnHierTokOut;

/* Parameter offsets of one cell. */
typedef struct {
  guint32 W, N, rw, ra, rg;
  guint32 x_r, x_w, x_k, x_v, x_a, x_g, w1, w2, w0, a1, a2, a0, g1, g2, k_k, k_a, r_k, x_k_cm;
  guint32 ln1w, ln1b, ln2w, ln2b, lnxw, lnxb, rec, key, val, out, kcm, vcm;
} HnHierCellPrm;

typedef struct { HnHierCellOff h, l; guint32 prev, target, fdrift; } HnHierVOff;

struct _HnHierVkRunner {
  HnHierModel *m;
  HnVkContext *ctx; /* NULL: the CPU references run the programs */
  HnTensor *prm, *wk, *gprm, *gwk; /* 1-D; gradients: training only */
  HnCmd *cmd;
  float *host_wk, *host_gprm, *host_gwk; /* reference mode */
  GArray *prog;                         /* HnHierOp of the chunk */
  guint n_ops;
  gboolean train;
  guint32 R, T, rows; /* row capacity, token capacity, rows of this chunk */
  gsize rs;           /* floats per row */
  /* the fixed part of a row */
  HnHierVOff sin;     /* the state in (packed like pack_state), from 0 */
  guint32 state_n, sout, fast, tok, rtok, ron, hp, ctl, flags, dd, fnr, logits;
  guint32 lab, coef, stats; /* training: labels, loss coefficients, [lse, ce, bad] per token */
  guint32 n;          /* tokens of the chunk being run */
  /* the activation region: a bump allocator reset per chunk */
  guint32 act, act_n, cur;
  gboolean overflow;
  guint32 bs, bs_n; /* backward scratch */
  guint32 gath, gath_n; /* training: the weights' uses gathered (X and DV) */
  HnHierVOff vs;    /* the current version of each state value */
  HnHierTokOut *to; /* [T] */
  HnHierCellPrm hpm, lpm;
  guint32 lm_head, hde_down, hde_up, hde_bias, lde_down, lde_up, lde_bias, ra_down, ra_up, ra_bias;
  guint32 rosa_gate_logit, rosa_router_w, rosa_router_b, ltm_gate_logit, ltm_router_w, ltm_router_b;
  guint32 persistent, ltm_keys, ltm_vals, qproj, in_proj_w, in_proj_b, l_feedback;
  guint32 h_to_ctx_w, h_to_ctx_b, halt_w, halt_b, l_in_w, l_in_b, drift_w, l_out_w, l_out_b, onw, onb;
  float *pack;      /* [R][state_n] staging of the states */
  float *fast_sent; /* row 0's fast values last uploaded (inference) */
  gboolean fast_valid;
  HnHTape **tapes;  /* training: the losses, a tape per row */
  float *gsum;      /* training: the downloaded gradient of a row group */
  GHashTable *prof; /* HN_HIER_PROFILE: shader name -> [microseconds, dispatches] */
  GPtrArray *cache; /* HnHierVkProgram: recorded programs, replayed when a chunk's ops repeat */
  struct _HnHierVkProgram *last; /* the program of the chunk that ran last */
};

/* A chunk's program recorded once (forward, and for training its backward
 * followed by the zeroing of the work gradients) and replayed whenever a
 * chunk has exactly the same ops: the tokens, ROSA words and weights live
 * in buffers, so steady training and generation record nothing. */
typedef struct _HnHierVkProgram {
  GBytes *ops; /* the HnHierOp array it was recorded from */
  HnCmd *fwd, *back;
  HnTensor *uses; /* training: the weights' uses, for their gradients (hier_gather.comp) */
} HnHierVkProgram;

/* Training: the MATVEC ops of r->prog grouped by weight (first use first),
 * for the weight gradients as one matmul per weight and chunk. */
typedef struct {
  guint32 w_off, trans, in_n, out_n;
  GArray *ops; /* guint indices into r->prog */
} HnHierWeightUses;
GPtrArray *hn_hier_vk_weight_uses (HnHierVkRunner *r);
/* The floats of gwk per row that gathering the largest weight's uses needs. */
gsize hn_hier_vk_gather_floats (GPtrArray *uses);

/* A runner for training: `rows` rows of `chunk` tokens per program, with
 * gradient buffers (ctx NULL: reference mode). */
HnHierVkRunner *hn_hier_vk_trainer_new (HnHierModel *m, HnVkContext *ctx, int rows, int chunk, GError **error);
/* Records and runs the forward of one chunk of n tokens for rows states
 * (s[r], tokens in[r]); with logits, downloads each row's [n, V] logits to
 * logits + r * n * V. The states advance only when everything succeeded. */
gboolean hn_hier_vk_forward (HnHierVkRunner *r, HnHierState **s, int rows, const guint32 *const *in, int n,
                             float *logits, GError **error);
/* Buffer transfers of the runner (device or reference mode). */
gboolean hn_hier_vk_wk_upload (HnHierVkRunner *r, gsize at, const float *src, gsize n, GError **error);
gboolean hn_hier_vk_wk_download (HnHierVkRunner *r, gsize at, float *dst, gsize n, GError **error);
/* Records into cmd a zero fill of the first `floats` floats of b. */
gboolean hn_hier_vk_zero (HnCmd *cmd, HnVkBuffer *b, gsize floats, GError **error);
/* One training chunk for `rows` rows: the forward, the losses on the host
 * from the downloaded logits, halting probabilities and drifts (the tape's
 * own loss code), and the backward on the device, adding each row's
 * gradient times `scale` to its gradient slice. loss[k]: row k's losses. */
gboolean hn_hier_vk_train_chunk (HnHierVkRunner *r, HnHierState **s, int rows, const guint32 *const *in,
                                 const gint32 *const *labels, const float *const *weights, int n, float scale,
                                 HnHierLoss *loss, GError **error);
/* Adds the gradient of the rows run since the last call (the rows' slices
 * summed in row order on the device; one slice is downloaded) to sum, and
 * zeroes the slices. */
gboolean hn_hier_vk_train_take_grads (HnHierVkRunner *r, int rows, float *sum, GError **error);
/* Submits what is recorded when `last` (or, profiling, every 4000
 * dispatches), adding the profile's timestamps to r->prof. */
gboolean hn_hier_vk_profile_flush (HnHierVkRunner *r, gboolean last, GError **error);
/* The [rows, cols] matrix at element off of a 1-D tensor (a view). */
HnTensor *hn_hier_vk_view (HnTensor *t, gsize off, gint64 rows, gint64 cols, GError **error);
/* Records the LM head's backward for the chunk that ran (c NULL in
 * reference mode: runs it on the host). */
gboolean hn_hier_vk_head_backward (HnHierVkRunner *r, HnCmd *c, GError **error);
/* Profiling: names the next dispatches by the op's kind and shape. */
void hn_hier_vk_profile_label (HnHierVkRunner *r, const HnHierOp *op, const char *prefix);
/* Runs r->prog (forward ops) through the device or the references. */
gboolean hn_hier_vk_run_program (HnHierVkRunner *r, GError **error);

/* The runner without a device: runs its programs through the CPU
 * references (tests compare it with the tape runtime and the shaders). */
HnHierVkRunner *hn_hier_vk_runner_new_reference (HnHierModel *m, GError **error);
/* Dispatches recorded for the last chunk. */
guint hn_hier_vk_runner_get_n_ops (HnHierVkRunner *r);

G_END_DECLS
