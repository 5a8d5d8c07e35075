/* State-space ops (issue 25): the causal depthwise conv1d with a carried
 * state, the Mamba selective scan and RWKV-4's WKV recurrence, forward and backward, with their CPU
 * references (cpu-ref-ssm.c). Conventions of hn-ops.h / ops-back.h:
 * activations f32, ops record dispatches and never allocate, gradients of
 * parameters accumulate (+=), gradients of activations are written.
 *
 * Shaders (conv1d_causal*.comp, ssm_scan*.comp): one invocation per channel,
 * a sequential loop over time (the recurrence), channels across
 * invocations; the scan keeps its N state values in registers. */
#pragma once
#include "tensor/hn-ops.h"
#include "tensor/ops-back.h"

G_BEGIN_DECLS

/* The largest state size (N, d_state) and kernel width the shaders take. */
#define HN_SSM_MAX_STATE 256
#define HN_CONV1D_MAX_KERNEL 16

/* out[b, t, c] = act(bias[c] + Σ_k w[c, k] · P[b, t + k, c]) with
 * P = concat(state[b], x[b]) along time: the K - 1 inputs before x (zeros when
 * state is NULL), then x. x and out [B, T, C] (or [T, C]: B = 1), w f32
 * [C, K] (HF's conv1d.weight [C, 1, K]; 1 <= K <= HN_CONV1D_MAX_KERNEL),
 * bias f32 [C] nullable, state f32 [B, K - 1, C] nullable, replaced in place
 * by the last K - 1 rows of P (generation carries it from step to step).
 * act: HN_ACT_IDENTITY or any HnActivation. out must not overlap x. */
gboolean hn_op_conv1d_causal (HnCmd *cmd, HnTensor *out, HnTensor *x, HnTensor *w, HnTensor *bias, HnTensor *state,
                              HnActivation act, GError **error);

/* The selective scan of Mamba (transformers' MambaMixer.slow_forward) and
 * Mamba-2's SSD recurrence (Mamba2Mixer; transformers computes it in chunks,
 * which is the same sum), per batch row b and channel i of head
 * h = i / head_dim (head_dim 1: every channel its own head, Mamba), group
 * g = h / (H / n_groups), with s[n] the state (N values):
 *   delta = dt[b, t, h] (+ dt_bias[h]), softplus'ed when dt_softplus (torch's, threshold 20),
 *           clamped to [dt_min, dt_max] when dt_limit
 *   s[n]  = exp(delta · A[h, n]) · s[n] + delta · B[b, t, g, n] · x[b, t, i],  A = -exp(A_log)
 *   y     = Σ_n s[n] · C[b, t, g, n] (+ D[h] · x[b, t, i]),  then · silu(z[b, t, i]) when z is set.
 * x, z, y [B, T, I] (or [T, I]); dt [B, T, H]; B, C [B, T, G, N] (N, 1..HN_SSM_MAX_STATE, from their
 * size); A_log f32 [H, N] or [H] (one value per head, Mamba-2); D, dt_bias f32 [H]; state f32 [B, I, N]: the state
 * before x (zeros when NULL), replaced in place by the state after the last step. */
typedef struct {
  HnTensor *dt_bias; /* nullable */
  HnTensor *D;       /* nullable */
  HnTensor *z;       /* nullable: the gate */
  HnTensor *state;   /* nullable */
  gboolean dt_softplus;
  int head_dim;      /* channels per head; 0 or 1: Mamba (dt [B, T, I], A_log [I, N]) */
  int n_groups;      /* 0 or 1: one B and C for all heads */
  gboolean dt_limit; /* clamp delta to [dt_min, dt_max] (Mamba-2's time_step_limit) */
  float dt_min, dt_max;
} HnSsmScanParams;

gboolean hn_op_ssm_scan (HnCmd *cmd, HnTensor *y, HnTensor *x, HnTensor *dt, HnTensor *A_log, HnTensor *B,
                         HnTensor *C, const HnSsmScanParams *p, GError **error);

/* Backward of hn_op_conv1d_causal from a zero state (training): dx [B, T, C]
 * written (added with HN_BACK_ACCUMULATE), dw [C, K] and dbias [C] accumulated;
 * any of them nullable. */
gboolean hn_op_conv1d_causal_back (HnCmd *cmd, HnTensor *dx, HnTensor *dw, HnTensor *dbias, HnTensor *dy, HnTensor *x,
                                   HnTensor *w, HnTensor *bias, HnActivation act, HnBackFlags flags, GError **error);

/* Backward of hn_op_ssm_scan from a zero state (p->state must be NULL):
 * dx, ddt, dB, dC, dz written; dA_log, dD, ddt_bias accumulated; dx, ddt, dB
 * and dC required, the others nullable (dz / dD / ddt_bias need p->z / p->D /
 * p->dt_bias). scratch: f32 of at least hn_ssm_scan_back_scratch (B, T, I, N)
 * elements (the states of the forward, recomputed here, and the per-channel
 * parts of dB and dC, summed over channels by a reduction). */
gint64 hn_ssm_scan_back_scratch (gint64 B, gint64 T, gint64 I, gint64 N);
gboolean hn_op_ssm_scan_back (HnCmd *cmd, HnTensor *dx, HnTensor *ddt, HnTensor *dA_log, HnTensor *dB, HnTensor *dC,
                              HnTensor *dD, HnTensor *dz, HnTensor *ddt_bias, HnTensor *dy, HnTensor *x, HnTensor *dt,
                              HnTensor *A_log, HnTensor *B, HnTensor *C, const HnSsmScanParams *p, HnTensor *scratch,
                              GError **error);

/* RWKV-4's WKV recurrence (transformers' rwkv_linear_attention_cpu), per batch row b and channel
 * c, with w = -exp(time_decay[c]), u = time_first[c] and the state (num, den, mx) kept scaled by
 * exp(mx) for stability:
 *   q = max(mx, u + k_t);  y_t = (e^(mx-q) num + e^(u+k_t-q) v_t) / (e^(mx-q) den + e^(u+k_t-q))
 *   q = max(mx + w, k_t);  num = e^(mx+w-q) num + e^(k_t-q) v_t;  den = e^(mx+w-q) den + e^(k_t-q);  mx = q
 * k, v, y [B, T, A] (or [T, A]); time_decay, time_first f32 [A]; state f32 [B, 3, A] (rows num, den,
 * mx per batch row) nullable: the state before k (num = den = 0, mx = -1e38 when NULL), replaced in
 * place by the state after the last step (generation carries it). y must not overlap k or v. */
#define HN_WKV4_MAX_INIT (-1e38f)
gboolean hn_op_wkv4 (HnCmd *cmd, HnTensor *y, HnTensor *k, HnTensor *v, HnTensor *time_decay, HnTensor *time_first,
                     HnTensor *state, GError **error);

/* Backward of hn_op_wkv4 from a fresh state (training): dk, dv [B, T, A] written (added with
 * HN_BACK_ACCUMULATE), dtime_decay, dtime_first [A] accumulated; any of them nullable. Each step's
 * weights are recomputed (max-subtracted): O(T^2) per channel. */
gboolean hn_op_wkv4_back (HnCmd *cmd, HnTensor *dk, HnTensor *dv, HnTensor *dtime_decay, HnTensor *dtime_first,
                          HnTensor *dy, HnTensor *k, HnTensor *v, HnTensor *time_decay, HnTensor *time_first,
                          HnBackFlags flags, GError **error);

/* ------------------------------------------------------------ CPU references (double sums) */

/* state [B, K - 1, C] nullable, updated in place as the op does. */
void hn_ref_conv1d_causal (float *out, const float *x, const float *w, const float *bias, float *state, gint64 B,
                           gint64 T, gint64 C, gint64 K, HnActivation act);
/* dx written, dw / dbias accumulated (each nullable). */
void hn_ref_conv1d_causal_back (const float *dy, const float *x, const float *w, const float *bias, gint64 B,
                                gint64 T, gint64 C, gint64 K, HnActivation act, float *dx, float *dw, float *dbias);

/* Host pointers of the scan's optional inputs (NULL when absent) and its layout (HnSsmScanParams). */
typedef struct {
  const float *dt_bias, *D, *z;
  float *state; /* [B, I, N], updated in place */
  gboolean dt_softplus;
  int head_dim, n_groups;
  gboolean dt_limit;
  float dt_min, dt_max;
  gboolean a_per_head; /* A_log [H] instead of [H, N] */
} HnRefSsmScan;

void hn_ref_ssm_scan (float *y, const float *x, const float *dt, const float *A_log, const float *B, const float *C,
                      gint64 nb, gint64 T, gint64 I, gint64 N, const HnRefSsmScan *p);
/* From a zero state (p->state ignored): dx, ddt, dB, dC, dz written; dA_log, dD, ddt_bias accumulated. */
void hn_ref_ssm_scan_back (const float *dy, const float *x, const float *dt, const float *A_log, const float *B,
                           const float *C, gint64 nb, gint64 T, gint64 I, gint64 N, const HnRefSsmScan *p, float *dx,
                           float *ddt, float *dA_log, float *dB, float *dC, float *dD, float *dz, float *ddt_bias);

/* hn_op_wkv4 in f32, the order transformers computes it in; state [B, 3, A] nullable, updated in place. */
void hn_ref_wkv4 (float *y, const float *k, const float *v, const float *time_decay, const float *time_first,
                  float *state, gint64 B, gint64 T, gint64 A);
/* Its backward from a fresh state (double sums, unscaled: for the test sizes): dk, dv written;
 * dtime_decay, dtime_first accumulated (each nullable). */
void hn_ref_wkv4_back (const float *dy, const float *k, const float *v, const float *time_decay,
                       const float *time_first, gint64 B, gint64 T, gint64 A, float *dk, float *dv,
                       float *dtime_decay, float *dtime_first);

G_END_DECLS
