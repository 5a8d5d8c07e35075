/* The state-space ops (engine/recurrent/ops-ssm.h) on the device against their
 * CPU references, on random shapes with odd sizes: the causal conv1d and the
 * selective scan, forward (whole sequences, and the same sequence in chunks
 * carrying the state, as generation does) and backward; and the backward
 * references against central finite differences of the forward ones; the
 * gated delta rule (ops-delta.h), the RG-LRU (ops-rglru.h) and RWKV-4's WKV
 * recurrence (ops-ssm.h) the same way. */
#include <math.h>
#include <string.h>

#include "ops-test-common.h"
#include "recurrent/ops-delta.h"
#include "recurrent/ops-rglru.h"
#include "recurrent/ops-ssm.h"

static void
run (HnCmd *cmd)
{
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_assert_no_error (error);
}

static void
close_to (const char *what, HnTensor *t, const float *want, double rtol, double atol)
{
  g_autofree float *got = hn_test_download (t);
  hn_test_assert_close (what, got, want, t->n, rtol, atol);
}

/* ------------------------------------------------------------ conv1d */

static void
conv_case (gint64 B, gint64 T, gint64 C, gint64 K, gboolean with_bias, gboolean with_state, HnActivation act)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random (B * T * C, -1, 1), *w = hn_test_random (C * K, -0.7, 0.7);
  g_autofree float *b = hn_test_random (C, -0.3, 0.3), *s0 = hn_test_random (B * (K - 1) * C + 1, -1, 1);
  g_autofree float *want = g_new (float, B * T * C), *s_want = g_memdup2 (s0, sizeof (float) * (B * (K - 1) * C + 1));
  hn_ref_conv1d_causal (want, x, w, with_bias ? b : NULL, with_state ? s_want : NULL, B, T, C, K, act);
  g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, x);
  g_autoptr (HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { C, K }, w);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, b);
  g_autoptr (HnTensor) ts = K > 1 ? hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, K - 1, C }, s0) : NULL;
  g_autoptr (HnTensor) to = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, C });
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_conv1d_causal (cmd, to, tx, tw, with_bias ? tb : NULL, with_state ? ts : NULL, act, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("conv1d B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " C%" G_GINT64_FORMAT
                                           " K%" G_GINT64_FORMAT " bias %d state %d act %d",
                                           B, T, C, K, with_bias, with_state, (int) act);
  close_to (what, to, want, 1e-5, 1e-5);
  if (with_state && ts)
    close_to ("conv1d state", ts, s_want, 0, 0);
}

/* The sequence in chunks of 1..3 steps with the carried state equals it whole from a zero state. */
static void
conv_chunks (gint64 B, gint64 T, gint64 C, gint64 K)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random (B * T * C, -1, 1), *w = hn_test_random (C * K, -0.7, 0.7);
  g_autofree float *b = hn_test_random (C, -0.3, 0.3), *want = g_new (float, B * T * C);
  hn_ref_conv1d_causal (want, x, w, b, NULL, B, T, C, K, HN_ACT_SILU);
  g_autoptr (HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { C, K }, w);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, b);
  g_autofree float *zeros = g_new0 (float, B * (K - 1) * C);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, K - 1, C }, zeros);
  g_autofree float *got = g_new (float, B * T * C);
  for (gint64 t0 = 0, step = 1; t0 < T; t0 += step, step = step % 3 + 1)
    {
      gint64 n = MIN (step, T - t0);
      g_autofree float *xc = g_new (float, B * n * C);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (xc + bb * n * C, x + (bb * T + t0) * C, sizeof (float) * n * C);
      g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, C }, xc);
      g_autoptr (HnTensor) to = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, n, C });
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_conv1d_causal (cmd, to, tx, tw, tb, ts, HN_ACT_SILU, &error));
      run (cmd);
      g_autofree float *o = hn_test_download (to);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (got + (bb * T + t0) * C, o + bb * n * C, sizeof (float) * n * C);
    }
  hn_test_assert_close ("conv1d in chunks with the carried state", got, want, B * T * C, 1e-5, 1e-5);
}

static void
test_conv1d (void)
{
  conv_case (2, 7, 13, 4, TRUE, TRUE, HN_ACT_SILU);
  conv_case (3, 2, 37, 4, TRUE, TRUE, HN_ACT_SILU);     /* T < K - 1: the new state keeps part of the old one */
  conv_case (1, 9, 5, 3, FALSE, TRUE, HN_ACT_IDENTITY);
  conv_case (2, 5, 70, 4, TRUE, FALSE, HN_ACT_SILU);
  conv_case (1, 6, 3, 1, TRUE, FALSE, HN_ACT_GELU);
  conv_chunks (2, 11, 19, 4);
  conv_chunks (1, 8, 65, 3);

  /* refusals by name */
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 6 });
  g_autoptr (HnTensor) w = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 6, 17 });
  g_autoptr (HnTensor) o = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 6 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_conv1d_causal (cmd, o, x, w, NULL, NULL, HN_ACT_SILU, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "conv1d_causal"));
}

/* ------------------------------------------------------------ scan */

typedef struct {
  gint64 B, T, I, N;
  float *x, *dt, *A_log, *Bm, *Cm, *D, *z, *dt_bias;
  gboolean use_D, use_z, use_bias, softplus;
  /* Mamba-2's layout: heads of hd channels (dt, D, dt_bias per head), G groups of B/C, A_log [H] */
  gint64 hd, G, H;
  gboolean a_head, limit;
} ScanCase;

/* Mamba-2 options of the next scan_make (reset after it). */
static gint64 next_hd = 1, next_G = 1;
static gboolean next_a_head, next_limit;

static void
scan_make (ScanCase *c, gint64 B, gint64 T, gint64 I, gint64 N, gboolean use_D, gboolean use_z, gboolean use_bias,
           gboolean softplus)
{
  *c = (ScanCase) { B, T, I, N };
  c->hd = next_hd;
  c->G = next_G;
  c->H = I / c->hd;
  c->a_head = next_a_head;
  c->limit = next_limit;
  next_hd = next_G = 1;
  next_a_head = next_limit = FALSE;
  gint64 n = B * T * I, nh = B * T * c->H, nbc = B * T * c->G * N;
  c->x = hn_test_random (n, -1, 1);
  c->dt = softplus ? hn_test_random (nh, -3, 1) : hn_test_random (nh, 0.01, 0.5);
  c->A_log = hn_test_random (c->a_head ? c->H : c->H * N, -1, 1.2);
  c->Bm = hn_test_random (nbc, -1, 1);
  c->Cm = hn_test_random (nbc, -1, 1);
  c->D = hn_test_random (c->H, -1, 1);
  c->z = hn_test_random (n, -2, 2);
  c->dt_bias = hn_test_random (c->H, -1, 1);
  c->use_D = use_D;
  c->use_z = use_z;
  c->use_bias = use_bias;
  c->softplus = softplus;
}

/* dt limits of the Mamba-2 cases: inside the softplus range, so that both ends clamp */
#define LIM_LO 0.05f
#define LIM_HI 0.9f

static HnSsmScanParams
scan_dev_params (const ScanCase *c, HnTensor *dt_bias, HnTensor *D, HnTensor *z, HnTensor *state)
{
  return (HnSsmScanParams) { c->use_bias ? dt_bias : NULL, c->use_D ? D : NULL, c->use_z ? z : NULL, state,
                             c->softplus, (int) c->hd, (int) c->G, c->limit, LIM_LO, LIM_HI };
}

static void
scan_free (ScanCase *c)
{
  g_free (c->x);
  g_free (c->dt);
  g_free (c->A_log);
  g_free (c->Bm);
  g_free (c->Cm);
  g_free (c->D);
  g_free (c->z);
  g_free (c->dt_bias);
}

static HnRefSsmScan
scan_ref_params (const ScanCase *c, float *state)
{
  return (HnRefSsmScan) { c->use_bias ? c->dt_bias : NULL, c->use_D ? c->D : NULL, c->use_z ? c->z : NULL, state,
                          c->softplus, (int) c->hd, (int) c->G, c->limit, LIM_LO, LIM_HI, c->a_head };
}

static void
scan_case (gint64 B, gint64 T, gint64 I, gint64 N, gboolean use_D, gboolean use_z, gboolean use_bias,
           gboolean softplus, gboolean with_state)
{
  g_autoptr (GError) error = NULL;
  ScanCase c;
  scan_make (&c, B, T, I, N, use_D, use_z, use_bias, softplus);
  g_autofree float *s0 = hn_test_random (B * I * N, -1, 1);
  g_autofree float *s_want = g_memdup2 (s0, sizeof (float) * B * I * N), *want = g_new (float, B * T * I);
  HnRefSsmScan rp = scan_ref_params (&c, with_state ? s_want : NULL);
  hn_ref_ssm_scan (want, c.x, c.dt, c.A_log, c.Bm, c.Cm, B, T, I, N, &rp);
  gint64 sx[3] = { B, T, I }, sh[3] = { B, T, c.H }, sb[4] = { B, T, c.G, N };
  g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, sx, c.x);
  g_autoptr (HnTensor) tdt = hn_test_tensor (HN_DTYPE_F32, 3, sh, c.dt);
  g_autoptr (HnTensor) tz = hn_test_tensor (HN_DTYPE_F32, 3, sx, c.z);
  g_autoptr (HnTensor) ta = c.a_head ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { c.H }, c.A_log)
                                     : hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { c.H, N }, c.A_log);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 4, sb, c.Bm);
  g_autoptr (HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 4, sb, c.Cm);
  g_autoptr (HnTensor) td = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { c.H }, c.D);
  g_autoptr (HnTensor) tdb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { c.H }, c.dt_bias);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, I, N }, s0);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, sx);
  HnSsmScanParams p = scan_dev_params (&c, tdb, td, tz, with_state ? ts : NULL);
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_ssm_scan (cmd, ty, tx, tdt, ta, tb, tc, &p, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("ssm_scan B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " I%" G_GINT64_FORMAT
                                           " N%" G_GINT64_FORMAT " D%d z%d bias%d softplus%d state%d head_dim %"
                                           G_GINT64_FORMAT " groups %" G_GINT64_FORMAT " A per head %d limit %d",
                                           B, T, I, N, use_D, use_z, use_bias, softplus, with_state, c.hd, c.G,
                                           c.a_head, c.limit);
  close_to (what, ty, want, 1e-4, 1e-5);
  if (with_state)
    close_to ("ssm_scan state", ts, s_want, 1e-4, 1e-5);
  scan_free (&c);
}

/* T steps one at a time (decode) with the carried state equal the whole sequence. */
static void
scan_steps (gint64 B, gint64 T, gint64 I, gint64 N)
{
  g_autoptr (GError) error = NULL;
  ScanCase c;
  scan_make (&c, B, T, I, N, TRUE, TRUE, FALSE, TRUE);
  g_autofree float *want = g_new (float, B * T * I), *got = g_new (float, B * T * I);
  HnRefSsmScan rp = scan_ref_params (&c, NULL);
  hn_ref_ssm_scan (want, c.x, c.dt, c.A_log, c.Bm, c.Cm, B, T, I, N, &rp);
  gint64 H = c.H, GN = c.G * N;
  g_autoptr (HnTensor) ta = c.a_head ? hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, c.A_log)
                                     : hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { H, N }, c.A_log);
  g_autoptr (HnTensor) td = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, c.D);
  g_autofree float *zeros = g_new0 (float, B * I * N);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, I, N }, zeros);
  for (gint64 t = 0; t < T; t++)
    {
      g_autofree float *x1 = g_new (float, B * I), *dt1 = g_new (float, B * H), *z1 = g_new (float, B * I);
      g_autofree float *b1 = g_new (float, B * GN), *c1 = g_new (float, B * GN);
      for (gint64 bb = 0; bb < B; bb++)
        {
          memcpy (x1 + bb * I, c.x + (bb * T + t) * I, sizeof (float) * I);
          memcpy (dt1 + bb * H, c.dt + (bb * T + t) * H, sizeof (float) * H);
          memcpy (z1 + bb * I, c.z + (bb * T + t) * I, sizeof (float) * I);
          memcpy (b1 + bb * GN, c.Bm + (bb * T + t) * GN, sizeof (float) * GN);
          memcpy (c1 + bb * GN, c.Cm + (bb * T + t) * GN, sizeof (float) * GN);
        }
      gint64 sx[3] = { B, 1, I }, sh[3] = { B, 1, H }, sb[4] = { B, 1, c.G, N };
      g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, sx, x1);
      g_autoptr (HnTensor) tdt = hn_test_tensor (HN_DTYPE_F32, 3, sh, dt1);
      g_autoptr (HnTensor) tz = hn_test_tensor (HN_DTYPE_F32, 3, sx, z1);
      g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 4, sb, b1);
      g_autoptr (HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 4, sb, c1);
      g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, sx);
      HnSsmScanParams p = scan_dev_params (&c, NULL, td, tz, ts);
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_ssm_scan (cmd, ty, tx, tdt, ta, tb, tc, &p, &error));
      run (cmd);
      g_autofree float *y = hn_test_download (ty);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (got + (bb * T + t) * I, y + bb * I, sizeof (float) * I);
    }
  hn_test_assert_close ("ssm_scan one step at a time with the carried state", got, want, B * T * I, 1e-4, 1e-5);
  scan_free (&c);
}

static void
test_scan (void)
{
  scan_case (2, 9, 11, 5, TRUE, TRUE, TRUE, TRUE, TRUE);
  scan_case (1, 13, 67, 16, TRUE, TRUE, FALSE, TRUE, FALSE);
  scan_case (3, 4, 7, 1, FALSE, FALSE, FALSE, FALSE, TRUE);
  scan_case (1, 5, 129, 3, TRUE, FALSE, TRUE, TRUE, TRUE);
  scan_steps (2, 7, 13, 8);
  /* Mamba-2: heads of 5 channels, 3 groups of B/C, A_log per head, dt clamped */
  next_hd = 5, next_G = 3, next_a_head = TRUE, next_limit = TRUE;
  scan_case (2, 9, 45, 4, TRUE, FALSE, TRUE, TRUE, TRUE);
  next_hd = 3, next_G = 1, next_a_head = TRUE;
  scan_case (1, 6, 21, 16, TRUE, TRUE, FALSE, TRUE, FALSE);
  next_hd = 7, next_G = 2, next_a_head = TRUE, next_limit = TRUE;
  scan_steps (2, 6, 28, 8);

  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 4 });
  g_autoptr (HnTensor) a = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 5, 2 });
  g_autoptr (HnTensor) bc = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 2 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnSsmScanParams p = { 0 };
  g_assert_false (hn_op_ssm_scan (cmd, x, x, x, a, bc, bc, &p, &error)); /* A_log is not [I = 4, N] */
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "ssm_scan"));
}

/* ------------------------------------------------------------ backward on the device */

static void
test_conv1d_back (void)
{
  g_autoptr (GError) error = NULL;
  const gint64 shapes[][4] = { { 2, 9, 13, 4 }, { 1, 3, 70, 4 }, { 3, 5, 7, 3 }, { 1, 4, 5, 1 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      gint64 B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], K = shapes[s][3];
      HnActivation act = s % 2 ? HN_ACT_IDENTITY : HN_ACT_SILU;
      g_autofree float *x = hn_test_random (B * T * C, -1, 1), *w = hn_test_random (C * K, -0.7, 0.7);
      g_autofree float *b = hn_test_random (C, -0.3, 0.3), *dy = hn_test_random (B * T * C, -1, 1);
      g_autofree float *dx = g_new (float, B * T * C), *dw = hn_test_random (C * K, -1, 1);
      g_autofree float *db = hn_test_random (C, -1, 1);
      g_autoptr (HnTensor) tdw = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { C, K }, dw);
      g_autoptr (HnTensor) tdb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, db);
      hn_ref_conv1d_causal_back (dy, x, w, b, B, T, C, K, act, dx, dw, db);
      gint64 sh[3] = { B, T, C };
      g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, sh, x);
      g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 3, sh, dy);
      g_autoptr (HnTensor) tw = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { C, K }, w);
      g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, b);
      g_autoptr (HnTensor) tdx = hn_test_empty (HN_DTYPE_F32, 3, sh);
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_conv1d_causal_back (cmd, tdx, tdw, tdb, tdy, tx, tw, tb, act, 0, &error));
      g_assert_no_error (error);
      run (cmd);
      close_to ("conv1d_back dx", tdx, dx, 1e-4, 1e-5);
      close_to ("conv1d_back dw (accumulated)", tdw, dw, 1e-4, 1e-5);
      close_to ("conv1d_back dbias (accumulated)", tdb, db, 1e-4, 1e-5);
      /* HN_BACK_ACCUMULATE adds into dx */
      g_assert_true (hn_op_conv1d_causal_back (cmd, tdx, NULL, NULL, tdy, tx, tw, tb, act, HN_BACK_ACCUMULATE, &error));
      run (cmd);
      for (gint64 i = 0; i < B * T * C; i++)
        dx[i] *= 2;
      close_to ("conv1d_back dx (accumulated)", tdx, dx, 1e-4, 1e-5);
    }
}

static void
test_scan_back (void)
{
  g_autoptr (GError) error = NULL;
  /* B, T, I, N, head_dim, groups, A per head, dt limit */
  const gint64 shapes[][8] = { { 2, 9, 11, 5, 1, 1, 0, 0 }, { 1, 6, 67, 16, 1, 1, 0, 0 }, { 3, 4, 7, 1, 1, 1, 0, 0 },
                               { 2, 7, 30, 4, 5, 3, 1, 1 }, { 1, 5, 12, 8, 4, 1, 1, 0 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      gint64 B = shapes[s][0], T = shapes[s][1], I = shapes[s][2], N = shapes[s][3];
      gboolean full = s != 2;
      ScanCase c;
      next_hd = shapes[s][4], next_G = shapes[s][5], next_a_head = shapes[s][6], next_limit = shapes[s][7];
      scan_make (&c, B, T, I, N, full, full && s < 3, full, full);
      gint64 H = c.H, n = B * T * I, nh = B * T * H, nbn = B * T * c.G * N, na = c.a_head ? H : H * N;
      g_autofree float *dy = hn_test_random (n, -1, 1);
      g_autofree float *dx = g_new (float, n), *ddt = g_new (float, nh), *dz = g_new0 (float, n);
      g_autofree float *dB = g_new (float, nbn), *dC = g_new (float, nbn);
      g_autofree float *dA = hn_test_random (na, -1, 1), *dD = hn_test_random (H, -1, 1);
      g_autofree float *ddb = hn_test_random (H, -1, 1);
      gint64 sx[3] = { B, T, I }, sh[3] = { B, T, H }, sb[4] = { B, T, c.G, N };
      g_autoptr (HnTensor) tdA = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { na }, dA);
      g_autoptr (HnTensor) tdD = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, dD);
      g_autoptr (HnTensor) tddb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, ddb);
      HnRefSsmScan rp = scan_ref_params (&c, NULL);
      hn_ref_ssm_scan_back (dy, c.x, c.dt, c.A_log, c.Bm, c.Cm, B, T, I, N, &rp, dx, ddt, dA, dB, dC, dD, dz, ddb);
      g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, sx, c.x);
      g_autoptr (HnTensor) tdt = hn_test_tensor (HN_DTYPE_F32, 3, sh, c.dt);
      g_autoptr (HnTensor) tz = hn_test_tensor (HN_DTYPE_F32, 3, sx, c.z);
      g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 3, sx, dy);
      g_autoptr (HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { na }, c.A_log);
      g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 4, sb, c.Bm);
      g_autoptr (HnTensor) tc = hn_test_tensor (HN_DTYPE_F32, 4, sb, c.Cm);
      g_autoptr (HnTensor) td = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, c.D);
      g_autoptr (HnTensor) tbias = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { H }, c.dt_bias);
      g_autoptr (HnTensor) tdx = hn_test_empty (HN_DTYPE_F32, 3, sx), tddt = hn_test_empty (HN_DTYPE_F32, 3, sh);
      g_autoptr (HnTensor) tdz = hn_test_empty (HN_DTYPE_F32, 3, sx);
      g_autoptr (HnTensor) tdB = hn_test_empty (HN_DTYPE_F32, 4, sb), tdC = hn_test_empty (HN_DTYPE_F32, 4, sb);
      g_autoptr (HnTensor) scratch =
        hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { hn_ssm_scan_back_scratch (B, T, I, N) });
      HnSsmScanParams p = scan_dev_params (&c, tbias, td, tz, NULL);
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_ssm_scan_back (cmd, tdx, tddt, tdA, tdB, tdC, full ? tdD : NULL, c.use_z ? tdz : NULL,
                                          full ? tddb : NULL, tdy, tx, tdt, ta, tb, tc, &p, scratch, &error));
      g_assert_no_error (error);
      run (cmd);
      close_to ("ssm_scan_back dx", tdx, dx, 1e-4, 1e-4);
      close_to ("ssm_scan_back ddt", tddt, ddt, 1e-4, 1e-4);
      close_to ("ssm_scan_back dB", tdB, dB, 1e-4, 1e-4);
      close_to ("ssm_scan_back dC", tdC, dC, 1e-4, 1e-4);
      close_to ("ssm_scan_back dA_log (accumulated)", tdA, dA, 1e-4, 1e-4);
      if (c.use_z)
        close_to ("ssm_scan_back dz", tdz, dz, 1e-4, 1e-4);
      if (full)
        {
          close_to ("ssm_scan_back dD (accumulated)", tdD, dD, 1e-4, 1e-4);
          close_to ("ssm_scan_back ddt_bias (accumulated)", tddb, ddb, 1e-4, 1e-4);
        }
      scan_free (&c);
    }
}


/* ------------------------------------------------------------ gated delta rule */

typedef struct {
  gint64 B, T;
  HnRefDeltaRule p;
  gint64 CD, nh;
  float *qkv, *a, *b, *A_log, *dt_bias;
} DeltaCase;

static void
delta_make (DeltaCase *c, gint64 B, gint64 T, int HK, int HV, int DK, int DV, gboolean bias, gboolean l2)
{
  *c = (DeltaCase) { B, T };
  c->p = (HnRefDeltaRule) { NULL, NULL, HK, HV, DK, DV, l2, 0.0f };
  c->CD = 2 * HK * DK + HV * DV;
  c->nh = B * T * HV;
  c->qkv = hn_test_random (B * T * c->CD, -1, 1);
  c->a = hn_test_random (c->nh, -3, 1.5);
  c->b = hn_test_random (c->nh, -2, 2);
  c->A_log = hn_test_random (HV, -1.5, 0.8);
  c->dt_bias = hn_test_random (HV, -1, 1);
  c->p.dt_bias = bias ? c->dt_bias : NULL;
}

static void
delta_free (DeltaCase *c)
{
  g_free (c->qkv);
  g_free (c->a);
  g_free (c->b);
  g_free (c->A_log);
  g_free (c->dt_bias);
}

static HnDeltaRuleParams
delta_dev_params (const DeltaCase *c, HnTensor *dt_bias, HnTensor *state)
{
  return (HnDeltaRuleParams) { c->p.dt_bias ? dt_bias : NULL, state, c->p.n_k_heads, c->p.n_v_heads, c->p.k_dim,
                               c->p.v_dim, c->p.qk_l2norm, c->p.scale };
}

static void
delta_case (gint64 B, gint64 T, int HK, int HV, int DK, int DV, gboolean bias, gboolean l2, gboolean with_state)
{
  g_autoptr (GError) error = NULL;
  DeltaCase c;
  delta_make (&c, B, T, HK, HV, DK, DV, bias, l2);
  gint64 ns = B * HV * DK * DV, ny = B * T * HV * DV;
  g_autofree float *s0 = hn_test_random (ns, -0.5, 0.5), *s_want = g_memdup2 (s0, sizeof (float) * ns);
  g_autofree float *want = g_new (float, ny);
  c.p.state = with_state ? s_want : NULL;
  hn_ref_gated_delta_rule (want, c.qkv, c.a, c.b, c.A_log, B, T, &c.p);
  g_autoptr (HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, c.CD }, c.qkv);
  g_autoptr (HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV }, c.a);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV }, c.b);
  g_autoptr (HnTensor) tal = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.A_log);
  g_autoptr (HnTensor) tdb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.dt_bias);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 4, (gint64[]) { B, HV, DK, DV }, s0);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV * DV });
  HnDeltaRuleParams p = delta_dev_params (&c, tdb, with_state ? ts : NULL);
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_gated_delta_rule (cmd, ty, tq, ta, tb, tal, &p, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("gated_delta_rule B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT
                                           " HK%d HV%d DK%d DV%d bias %d l2 %d state %d",
                                           B, T, HK, HV, DK, DV, bias, l2, with_state);
  close_to (what, ty, want, 1e-4, 1e-5);
  if (with_state)
    close_to ("gated_delta_rule state", ts, s_want, 1e-4, 1e-5);
  delta_free (&c);
}

/* The sequence in chunks of 1..3 tokens with the carried state equals it whole from a zero state. */
static void
delta_chunks (gint64 B, gint64 T, int HK, int HV, int DK, int DV)
{
  g_autoptr (GError) error = NULL;
  DeltaCase c;
  delta_make (&c, B, T, HK, HV, DK, DV, TRUE, TRUE);
  gint64 ns = B * HV * DK * DV, YD = (gint64) HV * DV;
  g_autofree float *want = g_new (float, B * T * YD), *got = g_new (float, B * T * YD);
  hn_ref_gated_delta_rule (want, c.qkv, c.a, c.b, c.A_log, B, T, &c.p);
  g_autoptr (HnTensor) tal = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.A_log);
  g_autoptr (HnTensor) tdb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.dt_bias);
  g_autofree float *zeros = g_new0 (float, ns);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 4, (gint64[]) { B, HV, DK, DV }, zeros);
  for (gint64 t0 = 0, step = 1; t0 < T; t0 += step, step = step % 3 + 1)
    {
      gint64 n = MIN (step, T - t0);
      g_autofree float *q = g_new (float, B * n * c.CD), *a = g_new (float, B * n * HV), *b = g_new (float, B * n * HV);
      for (gint64 bb = 0; bb < B; bb++)
        {
          memcpy (q + bb * n * c.CD, c.qkv + (bb * T + t0) * c.CD, sizeof (float) * n * c.CD);
          memcpy (a + bb * n * HV, c.a + (bb * T + t0) * HV, sizeof (float) * n * HV);
          memcpy (b + bb * n * HV, c.b + (bb * T + t0) * HV, sizeof (float) * n * HV);
        }
      g_autoptr (HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, c.CD }, q);
      g_autoptr (HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, HV }, a);
      g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, HV }, b);
      g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, n, YD });
      HnDeltaRuleParams p = delta_dev_params (&c, tdb, ts);
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_gated_delta_rule (cmd, ty, tq, ta, tb, tal, &p, &error));
      g_assert_no_error (error);
      run (cmd);
      g_autofree float *y = hn_test_download (ty);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (got + (bb * T + t0) * YD, y + bb * n * YD, sizeof (float) * n * YD);
    }
  hn_test_assert_close ("gated_delta_rule in chunks with the carried state", got, want, B * T * YD, 1e-4, 1e-5);
  delta_free (&c);
}

static void
test_delta (void)
{
  delta_case (2, 9, 2, 4, 8, 8, TRUE, TRUE, TRUE);      /* the fixtures' shape */
  delta_case (1, 13, 1, 3, 5, 7, FALSE, TRUE, FALSE);   /* odd head sizes, 3 value heads per key head */
  delta_case (3, 4, 3, 3, 16, 5, TRUE, FALSE, TRUE);    /* no L2 norm */
  delta_case (1, 5, 2, 2, 33, 67, TRUE, TRUE, TRUE);    /* more columns than a workgroup */
  delta_case (2, 1, 1, 2, 128, 3, TRUE, TRUE, TRUE);    /* Qwen3-Next's key head size, one decode step */
  delta_chunks (2, 11, 2, 4, 7, 5);
  delta_chunks (1, 8, 1, 1, 16, 9);

  /* refusals by name */
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) q = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 10 });
  g_autoptr (HnTensor) ab = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 2 });
  g_autoptr (HnTensor) al = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 2 });
  g_autoptr (HnTensor) y = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 4 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  HnDeltaRuleParams p = { NULL, NULL, 1, 2, 2, 2, TRUE, 0.0f }; /* qkv must be [3, 8] */
  g_assert_false (hn_op_gated_delta_rule (cmd, y, q, ab, ab, al, &p, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "gated_delta_rule"));
  g_clear_error (&error);
  p = (HnDeltaRuleParams) { NULL, NULL, 2, 3, 2, 2, TRUE, 0.0f }; /* 3 value heads over 2 key heads */
  g_assert_false (hn_op_gated_delta_rule (cmd, y, q, ab, ab, al, &p, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_delta_back (void)
{
  g_autoptr (GError) error = NULL;
  /* B, T, HK, HV, DK, DV, dt_bias, l2 */
  const int shapes[][8] = { { 2, 7, 2, 4, 8, 8, 1, 1 }, { 1, 9, 1, 3, 5, 7, 0, 1 }, { 3, 4, 3, 3, 6, 5, 1, 0 },
                            { 1, 5, 2, 2, 33, 3, 1, 1 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      const int *sh = shapes[s];
      gint64 B = sh[0], T = sh[1], HV = sh[3];
      DeltaCase c;
      delta_make (&c, B, T, sh[2], sh[3], sh[4], sh[5], sh[6], sh[7]);
      gint64 nq = B * T * c.CD, ny = B * T * HV * sh[5];
      g_autofree float *dy = hn_test_random (ny, -1, 1), *dq = g_new (float, nq);
      g_autofree float *da = g_new (float, c.nh), *db = g_new (float, c.nh);
      g_autofree float *dA = hn_test_random (HV, -1, 1), *ddb = hn_test_random (HV, -1, 1);
      g_autoptr (HnTensor) tdA = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, dA);
      g_autoptr (HnTensor) tddb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, ddb);
      hn_ref_gated_delta_rule_back (dy, c.qkv, c.a, c.b, c.A_log, B, T, &c.p, dq, da, db, dA, c.p.dt_bias ? ddb : NULL);
      g_autoptr (HnTensor) tq = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, c.CD }, c.qkv);
      g_autoptr (HnTensor) ta = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV }, c.a);
      g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV }, c.b);
      g_autoptr (HnTensor) tal = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.A_log);
      g_autoptr (HnTensor) tbias = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { HV }, c.dt_bias);
      g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV * sh[5] }, dy);
      g_autoptr (HnTensor) tdq = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, c.CD });
      g_autoptr (HnTensor) tda = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV });
      g_autoptr (HnTensor) tdbt = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, HV });
      HnDeltaRuleParams p = delta_dev_params (&c, tbias, NULL);
      g_autoptr (HnTensor) scratch =
        hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { hn_gated_delta_rule_back_scratch (&p, T) });
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_gated_delta_rule_back (cmd, tdq, tda, tdbt, tdA, p.dt_bias ? tddb : NULL, tdy, tq, ta, tb,
                                                  tal, &p, scratch, &error));
      g_assert_no_error (error);
      run (cmd);
      close_to ("gated_delta_rule_back dqkv", tdq, dq, 1e-4, 1e-4);
      close_to ("gated_delta_rule_back da", tda, da, 1e-4, 1e-4);
      close_to ("gated_delta_rule_back db", tdbt, db, 1e-4, 1e-4);
      close_to ("gated_delta_rule_back dA_log (accumulated)", tdA, dA, 1e-4, 1e-4);
      if (p.dt_bias)
        close_to ("gated_delta_rule_back ddt_bias (accumulated)", tddb, ddb, 1e-4, 1e-4);
      delta_free (&c);
    }
}

/* ------------------------------------------------------------ RG-LRU */

typedef struct {
  gint64 B, T, C;
  float *x, *gx, *ga, *lam;
} RgCase;

static void
rg_make (RgCase *c, gint64 B, gint64 T, gint64 C)
{
  *c = (RgCase) { B, T, C };
  gint64 n = B * T * C;
  c->x = hn_test_random (n, -1.5, 1.5);
  c->gx = hn_test_random (n, -2, 2);
  c->ga = hn_test_random (n, -2, 2);
  /* recurrent_param as transformers initialises it (a^c in 0.9..0.999) and wider */
  c->lam = hn_test_random (C, -9, 1);
}

static void
rg_free (RgCase *c)
{
  g_free (c->x);
  g_free (c->gx);
  g_free (c->ga);
  g_free (c->lam);
}

static void
rg_case (gint64 B, gint64 T, gint64 C, gboolean with_state, gboolean reset)
{
  g_autoptr (GError) error = NULL;
  RgCase c;
  rg_make (&c, B, T, C);
  gint64 n = B * T * C;
  g_autofree float *s0 = hn_test_random (B * C, -1, 1), *s_want = g_memdup2 (s0, sizeof (float) * B * C);
  g_autofree float *want = g_new (float, n);
  hn_ref_rglru (want, c.x, c.gx, c.ga, c.lam, with_state ? s_want : NULL, reset, B, T, C);
  g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.x);
  g_autoptr (HnTensor) tgx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.gx);
  g_autoptr (HnTensor) tga = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.ga);
  g_autoptr (HnTensor) tl = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, c.lam);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { B, C }, s0);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, C });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_true (hn_op_rglru (cmd, ty, tx, tgx, tga, tl, with_state ? ts : NULL, reset, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("rglru B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " C%" G_GINT64_FORMAT
                                           " state %d reset %d", B, T, C, with_state, reset);
  close_to (what, ty, want, 1e-4, 1e-5);
  if (with_state)
    close_to ("rglru state", ts, s_want, 1e-4, 1e-5);
  rg_free (&c);
}

/* The sequence in chunks of 1..3 steps carrying h (the first chunk resets) equals it whole. */
static void
rg_chunks (gint64 B, gint64 T, gint64 C)
{
  g_autoptr (GError) error = NULL;
  RgCase c;
  rg_make (&c, B, T, C);
  gint64 n = B * T * C;
  g_autofree float *want = g_new (float, n), *got = g_new (float, n), *zeros = g_new0 (float, B * C);
  hn_ref_rglru (want, c.x, c.gx, c.ga, c.lam, NULL, TRUE, B, T, C);
  g_autoptr (HnTensor) tl = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, c.lam);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { B, C }, zeros);
  for (gint64 t0 = 0, step = 1; t0 < T; t0 += step, step = step % 3 + 1)
    {
      gint64 k = MIN (step, T - t0);
      float *src[3] = { c.x, c.gx, c.ga };
      HnTensor *tt[3];
      for (int j = 0; j < 3; j++)
        {
          g_autofree float *part = g_new (float, B * k * C);
          for (gint64 bb = 0; bb < B; bb++)
            memcpy (part + bb * k * C, src[j] + (bb * T + t0) * C, sizeof (float) * k * C);
          tt[j] = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, k, C }, part);
        }
      g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, k, C });
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_rglru (cmd, ty, tt[0], tt[1], tt[2], tl, ts, t0 == 0, &error));
      g_assert_no_error (error);
      run (cmd);
      g_autofree float *y = hn_test_download (ty);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (got + (bb * T + t0) * C, y + bb * k * C, sizeof (float) * k * C);
      for (int j = 0; j < 3; j++)
        hn_tensor_unref (tt[j]);
    }
  /* atol 5e-5: on the H200 one element of 1152 differed by 2.2e-5 (2026-12-03): sqrt(1 - a²) for a
   * near 1 amplifies the last bits of the driver's exp, which is not correctly rounded */
  hn_test_assert_close ("rglru in chunks with the carried state", got, want, n, 1e-4, 5e-5);
  rg_free (&c);
}

static void
test_rglru (void)
{
  rg_case (1, 11, 32, FALSE, TRUE);  /* the fixture's shape */
  rg_case (2, 7, 5, TRUE, FALSE);    /* odd sizes, a carried state */
  rg_case (3, 1, 67, TRUE, FALSE);   /* one decode step, more channels than a workgroup */
  rg_case (2, 9, 3, TRUE, TRUE);     /* a reset ignores the state */
  rg_chunks (2, 13, 7);
  rg_chunks (1, 6, 65);

  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 3, 4 });
  g_autoptr (HnTensor) l = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 5 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_rglru (cmd, x, x, x, x, l, NULL, TRUE, &error)); /* Λ must be [4] */
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "rglru"));
}

static void
test_rglru_back (void)
{
  g_autoptr (GError) error = NULL;
  const gint64 shapes[][3] = { { 1, 11, 32 }, { 2, 7, 5 }, { 3, 4, 67 }, { 2, 1, 3 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      gint64 B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], n = B * T * C;
      RgCase c;
      rg_make (&c, B, T, C);
      g_autofree float *dy = hn_test_random (n, -1, 1), *dx = g_new (float, n), *dgx = g_new (float, n);
      g_autofree float *dga = g_new (float, n), *dl = hn_test_random (C, -1, 1);
      g_autoptr (HnTensor) tdl = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, dl);
      hn_ref_rglru_back (dy, c.x, c.gx, c.ga, c.lam, B, T, C, dx, dgx, dga, dl);
      g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.x);
      g_autoptr (HnTensor) tgx = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.gx);
      g_autoptr (HnTensor) tga = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, c.ga);
      g_autoptr (HnTensor) tl = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { C }, c.lam);
      g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, C }, dy);
      g_autoptr (HnTensor) tdx = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, C });
      g_autoptr (HnTensor) tdgx = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, C });
      g_autoptr (HnTensor) tdga = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, C });
      g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
      g_assert_true (hn_op_rglru_back (cmd, tdx, tdgx, tdga, tdl, tdy, tx, tgx, tga, tl, &error));
      g_assert_no_error (error);
      run (cmd);
      close_to ("rglru_back dx", tdx, dx, 1e-4, 1e-4);
      close_to ("rglru_back dgx", tdgx, dgx, 1e-4, 1e-4);
      close_to ("rglru_back dga", tdga, dga, 1e-4, 1e-4);
      close_to ("rglru_back dlambda (accumulated)", tdl, dl, 1e-4, 1e-4);
      rg_free (&c);
    }
}

/* ------------------------------------------------------------ finite differences of the references */

typedef double (*LossFn) (gpointer data);

static void
check_fd (const char *what, LossFn fn, gpointer data, float *x, gint64 n, const float *analytic)
{
  const float h = 1e-2f;
  double worst = 0;
  for (gint64 i = 0; i < n; i++)
    {
      float saved = x[i];
      x[i] = saved + h;
      double lp = fn (data);
      x[i] = saved - h;
      double lm = fn (data);
      x[i] = saved;
      double num = (lp - lm) / (2.0 * h), err = fabs (num - analytic[i]) / MAX (1.0, fabs (num));
      worst = MAX (worst, err);
      if (err > 5e-3)
        g_error ("%s[%" G_GINT64_FORMAT "]: analytic %.6g, numeric %.6g", what, i, analytic[i], num);
    }
  g_test_message ("%s: max relative error %.3g over %" G_GINT64_FORMAT, what, worst, n);
}

typedef struct {
  gint64 B, T, C, K;
  HnActivation act;
  float *x, *w, *b, *r;
} ConvFd;

static double
conv_loss (gpointer data)
{
  ConvFd *c = data;
  gint64 n = c->B * c->T * c->C;
  g_autofree float *y = g_new (float, n);
  hn_ref_conv1d_causal (y, c->x, c->w, c->b, NULL, c->B, c->T, c->C, c->K, c->act);
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) y[i] * c->r[i];
  return s;
}

typedef struct {
  ScanCase s;
  float *r;
} ScanFd;

static double
scan_loss (gpointer data)
{
  ScanFd *f = data;
  ScanCase *c = &f->s;
  gint64 n = c->B * c->T * c->I;
  g_autofree float *y = g_new (float, n);
  HnRefSsmScan rp = scan_ref_params (c, NULL);
  hn_ref_ssm_scan (y, c->x, c->dt, c->A_log, c->Bm, c->Cm, c->B, c->T, c->I, c->N, &rp);
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) y[i] * f->r[i];
  return s;
}

static void
test_fd (void)
{
  for (int act = 0; act < 2; act++)
    {
      ConvFd c = { 2, 6, 5, 3, act ? HN_ACT_SILU : HN_ACT_IDENTITY };
      gint64 n = c.B * c.T * c.C;
      c.x = hn_test_random (n, -1, 1);
      c.w = hn_test_random (c.C * c.K, -1, 1);
      c.b = hn_test_random (c.C, -0.5, 0.5);
      c.r = hn_test_random (n, -1, 1);
      g_autofree float *dx = g_new (float, n), *dw = g_new0 (float, c.C * c.K), *db = g_new0 (float, c.C);
      hn_ref_conv1d_causal_back (c.r, c.x, c.w, c.b, c.B, c.T, c.C, c.K, c.act, dx, dw, db);
      check_fd ("conv1d dx", conv_loss, &c, c.x, n, dx);
      check_fd ("conv1d dw", conv_loss, &c, c.w, c.C * c.K, dw);
      check_fd ("conv1d dbias", conv_loss, &c, c.b, c.C, db);
      g_free (c.x);
      g_free (c.w);
      g_free (c.b);
      g_free (c.r);
    }
  for (int full = 0; full < 3; full++)
    {
      ScanFd f;
      if (full == 2) /* Mamba-2: heads of 2 channels, 2 groups, A_log per head */
        next_hd = 2, next_G = 2, next_a_head = TRUE;
      scan_make (&f.s, 2, 5, full == 2 ? 8 : 3, 4, full, full, full, full);
      ScanCase *c = &f.s;
      gint64 n = c->B * c->T * c->I, nh = c->B * c->T * c->H, nbn = c->B * c->T * c->G * c->N;
      gint64 na = c->a_head ? c->H : c->H * c->N;
      f.r = hn_test_random (n, -1, 1);
      g_autofree float *dx = g_new (float, n), *ddt = g_new (float, nh), *dz = g_new0 (float, n);
      g_autofree float *dB = g_new (float, nbn), *dC = g_new (float, nbn), *dA = g_new0 (float, na);
      g_autofree float *dD = g_new0 (float, c->H), *ddb = g_new0 (float, c->H);
      HnRefSsmScan rp = scan_ref_params (c, NULL);
      hn_ref_ssm_scan_back (f.r, c->x, c->dt, c->A_log, c->Bm, c->Cm, c->B, c->T, c->I, c->N, &rp, dx, ddt, dA, dB,
                            dC, dD, dz, ddb);
      check_fd ("ssm_scan dx", scan_loss, &f, c->x, n, dx);
      check_fd ("ssm_scan ddt", scan_loss, &f, c->dt, nh, ddt);
      check_fd ("ssm_scan dA_log", scan_loss, &f, c->A_log, na, dA);
      check_fd ("ssm_scan dB", scan_loss, &f, c->Bm, nbn, dB);
      check_fd ("ssm_scan dC", scan_loss, &f, c->Cm, nbn, dC);
      if (full)
        {
          check_fd ("ssm_scan dz", scan_loss, &f, c->z, n, dz);
          check_fd ("ssm_scan dD", scan_loss, &f, c->D, c->H, dD);
          check_fd ("ssm_scan ddt_bias", scan_loss, &f, c->dt_bias, c->H, ddb);
        }
      g_free (f.r);
      scan_free (c);
    }
}

typedef struct {
  DeltaCase c;
  float *r;
} DeltaFd;

static double
delta_loss (gpointer data)
{
  DeltaFd *f = data;
  DeltaCase *c = &f->c;
  gint64 n = c->B * c->T * c->p.n_v_heads * c->p.v_dim;
  g_autofree float *y = g_new (float, n);
  hn_ref_gated_delta_rule (y, c->qkv, c->a, c->b, c->A_log, c->B, c->T, &c->p);
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) y[i] * f->r[i];
  return s;
}

static void
test_delta_fd (void)
{
  for (int l2 = 0; l2 < 2; l2++)
    {
      DeltaFd f;
      delta_make (&f.c, 2, 5, 1, 2, 3, 4, l2, l2);
      DeltaCase *c = &f.c;
      gint64 nq = c->B * c->T * c->CD, HV = c->p.n_v_heads;
      f.r = hn_test_random (c->B * c->T * HV * c->p.v_dim, -1, 1);
      g_autofree float *dq = g_new (float, nq), *da = g_new (float, c->nh), *db = g_new (float, c->nh);
      g_autofree float *dA = g_new0 (float, HV), *ddb = g_new0 (float, HV);
      hn_ref_gated_delta_rule_back (f.r, c->qkv, c->a, c->b, c->A_log, c->B, c->T, &c->p, dq, da, db, dA, ddb);
      check_fd ("gated_delta_rule dqkv", delta_loss, &f, c->qkv, nq, dq);
      check_fd ("gated_delta_rule da", delta_loss, &f, c->a, c->nh, da);
      check_fd ("gated_delta_rule db", delta_loss, &f, c->b, c->nh, db);
      check_fd ("gated_delta_rule dA_log", delta_loss, &f, c->A_log, HV, dA);
      if (l2)
        check_fd ("gated_delta_rule ddt_bias", delta_loss, &f, c->dt_bias, HV, ddb);
      g_free (f.r);
      delta_free (c);
    }
}

typedef struct {
  RgCase c;
  float *r;
} RgFd;

static double
rg_loss (gpointer data)
{
  RgFd *f = data;
  RgCase *c = &f->c;
  gint64 n = c->B * c->T * c->C;
  g_autofree float *y = g_new (float, n);
  hn_ref_rglru (y, c->x, c->gx, c->ga, c->lam, NULL, TRUE, c->B, c->T, c->C);
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) y[i] * f->r[i];
  return s;
}

static void
test_rglru_fd (void)
{
  const gint64 shapes[][3] = { { 2, 5, 3 }, { 1, 7, 5 } };
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      RgFd f;
      rg_make (&f.c, shapes[s][0], shapes[s][1], shapes[s][2]);
      RgCase *c = &f.c;
      for (gint64 i = 0; i < c->C; i++)
        c->lam[i] = -3.0f + 0.7f * (float) i; /* a kept away from 1, where the sqrt's slope is clipped */
      gint64 n = c->B * c->T * c->C;
      f.r = hn_test_random (n, -1, 1);
      g_autofree float *dx = g_new (float, n), *dgx = g_new (float, n), *dga = g_new (float, n);
      g_autofree float *dl = g_new0 (float, c->C);
      hn_ref_rglru_back (f.r, c->x, c->gx, c->ga, c->lam, c->B, c->T, c->C, dx, dgx, dga, dl);
      check_fd ("rglru dx", rg_loss, &f, c->x, n, dx);
      check_fd ("rglru dgx", rg_loss, &f, c->gx, n, dgx);
      check_fd ("rglru dga", rg_loss, &f, c->ga, n, dga);
      check_fd ("rglru dlambda", rg_loss, &f, c->lam, c->C, dl);
      g_free (f.r);
      rg_free (c);
    }
}

/* ------------------------------------------------------------ RWKV-4 WKV */

/* time_decay in [-1.5, 1] (w = -exp: decays from e^-0.2 to e^-2.7), keys in [-3, 3] so that the
 * max tracking switches sides. */
static void
wkv_case (gint64 B, gint64 T, gint64 A, gboolean with_state)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *k = hn_test_random (B * T * A, -3, 3), *v = hn_test_random (B * T * A, -1, 1);
  g_autofree float *td = hn_test_random (A, -1.5, 1), *tf = hn_test_random (A, -1, 1);
  g_autofree float *s0 = g_new (float, B * 3 * A);
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < A; c++)
      {
        s0[(b * 3 + 0) * A + c] = (float) g_test_rand_double_range (-1, 1);
        s0[(b * 3 + 1) * A + c] = (float) g_test_rand_double_range (0.1, 2);
        s0[(b * 3 + 2) * A + c] = (float) g_test_rand_double_range (-2, 2);
      }
  g_autofree float *want = g_new (float, B * T * A), *s_want = g_memdup2 (s0, sizeof (float) * B * 3 * A);
  hn_ref_wkv4 (want, k, v, td, tf, with_state ? s_want : NULL, B, T, A);
  g_autoptr (HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, k);
  g_autoptr (HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, v);
  g_autoptr (HnTensor) ttd = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, td);
  g_autoptr (HnTensor) ttf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, tf);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, 3, A }, s0);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, T, A });
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_wkv4 (cmd, ty, tk, tv, ttd, ttf, with_state ? ts : NULL, &error));
  g_assert_no_error (error);
  run (cmd);
  g_autofree char *what = g_strdup_printf ("wkv4 B%" G_GINT64_FORMAT " T%" G_GINT64_FORMAT " A%" G_GINT64_FORMAT
                                           " state %d", B, T, A, with_state);
  close_to (what, ty, want, 1e-5, 1e-5);
  if (with_state)
    close_to ("wkv4 state", ts, s_want, 1e-5, 1e-5);
}

/* The sequence in chunks of 1..3 steps carrying the state (from the fresh state: num = den = 0,
 * mx = -1e38, as generation resets it) equals it whole without one. */
static void
wkv_chunks (gint64 B, gint64 T, gint64 A)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *k = hn_test_random (B * T * A, -3, 3), *v = hn_test_random (B * T * A, -1, 1);
  g_autofree float *td = hn_test_random (A, -1.5, 1), *tf = hn_test_random (A, -1, 1);
  g_autofree float *want = g_new (float, B * T * A), *s0 = g_new0 (float, B * 3 * A);
  hn_ref_wkv4 (want, k, v, td, tf, NULL, B, T, A);
  for (gint64 b = 0; b < B; b++)
    for (gint64 c = 0; c < A; c++)
      s0[(b * 3 + 2) * A + c] = HN_WKV4_MAX_INIT;
  g_autoptr (HnTensor) ttd = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, td);
  g_autoptr (HnTensor) ttf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, tf);
  g_autoptr (HnTensor) ts = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, 3, A }, s0);
  g_autofree float *got = g_new (float, B * T * A);
  for (gint64 t0 = 0, step = 1; t0 < T; t0 += step, step = step % 3 + 1)
    {
      gint64 n = MIN (step, T - t0);
      g_autofree float *kc = g_new (float, B * n * A), *vc = g_new (float, B * n * A);
      for (gint64 bb = 0; bb < B; bb++)
        {
          memcpy (kc + bb * n * A, k + (bb * T + t0) * A, sizeof (float) * n * A);
          memcpy (vc + bb * n * A, v + (bb * T + t0) * A, sizeof (float) * n * A);
        }
      g_autoptr (HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, A }, kc);
      g_autoptr (HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, n, A }, vc);
      g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 3, (gint64[]) { B, n, A });
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_wkv4 (cmd, ty, tk, tv, ttd, ttf, ts, &error));
      run (cmd);
      g_autofree float *o = hn_test_download (ty);
      for (gint64 bb = 0; bb < B; bb++)
        memcpy (got + (bb * T + t0) * A, o + bb * n * A, sizeof (float) * n * A);
    }
  hn_test_assert_close ("wkv4 in chunks with the carried state", got, want, B * T * A, 1e-5, 1e-5);
}

static void
test_wkv4 (void)
{
  wkv_case (2, 7, 13, TRUE);
  wkv_case (3, 1, 37, TRUE);
  wkv_case (1, 9, 70, FALSE);
  wkv_case (2, 11, 5, FALSE);
  wkv_chunks (2, 11, 19);
  wkv_chunks (1, 8, 65);

  /* refusals by name */
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTensor) k = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 4, 6 });
  g_autoptr (HnTensor) td = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 5 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (hn_test_ctx (), &error);
  g_assert_false (hn_op_wkv4 (cmd, k, k, k, td, td, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "wkv4"));
}

/* The device backward against the CPU reference (which the finite differences check). */
static void
wkv_back_case (gint64 B, gint64 T, gint64 A, gboolean accumulate)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  gint64 n = B * T * A;
  g_autofree float *k = hn_test_random (n, -2, 2), *v = hn_test_random (n, -1, 1), *dy = hn_test_random (n, -1, 1);
  g_autofree float *td = hn_test_random (A, -1.5, 1), *tf = hn_test_random (A, -1, 1);
  g_autofree float *dk0 = hn_test_random (n, -1, 1), *dv0 = hn_test_random (n, -1, 1);
  g_autofree float *dtd0 = hn_test_random (A, -1, 1), *dtf0 = hn_test_random (A, -1, 1);
  g_autofree float *dk = g_new (float, n), *dv = g_new (float, n);
  g_autofree float *dtd = g_memdup2 (dtd0, sizeof (float) * A), *dtf = g_memdup2 (dtf0, sizeof (float) * A);
  hn_ref_wkv4_back (dy, k, v, td, tf, B, T, A, dk, dv, dtd, dtf);
  if (accumulate)
    for (gint64 i = 0; i < n; i++)
      dk[i] += dk0[i], dv[i] += dv0[i];
  g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, dy);
  g_autoptr (HnTensor) tk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, k);
  g_autoptr (HnTensor) tv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, v);
  g_autoptr (HnTensor) ttd = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, td);
  g_autoptr (HnTensor) ttf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, tf);
  g_autoptr (HnTensor) tdk = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, dk0);
  g_autoptr (HnTensor) tdv = hn_test_tensor (HN_DTYPE_F32, 3, (gint64[]) { B, T, A }, dv0);
  g_autoptr (HnTensor) tdtd = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, dtd0);
  g_autoptr (HnTensor) tdtf = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { A }, dtf0);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_wkv4_back (cmd, tdk, tdv, tdtd, tdtf, tdy, tk, tv, ttd, ttf,
                                  accumulate ? HN_BACK_ACCUMULATE : 0, &error));
  g_assert_no_error (error);
  run (cmd);
  close_to ("wkv4_back dk", tdk, dk, 1e-4, 1e-4);
  close_to ("wkv4_back dv", tdv, dv, 1e-4, 1e-4);
  close_to ("wkv4_back dtime_decay", tdtd, dtd, 1e-4, 1e-4);
  close_to ("wkv4_back dtime_first", tdtf, dtf, 1e-4, 1e-4);
}

static void
test_wkv4_back (void)
{
  wkv_back_case (2, 7, 13, FALSE);
  wkv_back_case (1, 12, 70, TRUE);
  wkv_back_case (3, 1, 5, FALSE);
}

typedef struct {
  gint64 B, T, A;
  float *k, *v, *td, *tf, *r;
} WkvFd;

static double
wkv_loss (gpointer data)
{
  WkvFd *c = data;
  gint64 n = c->B * c->T * c->A;
  g_autofree float *y = g_new (float, n);
  hn_ref_wkv4 (y, c->k, c->v, c->td, c->tf, NULL, c->B, c->T, c->A);
  double s = 0;
  for (gint64 i = 0; i < n; i++)
    s += (double) y[i] * c->r[i];
  return s;
}

static void
test_wkv4_fd (void)
{
  WkvFd c = { 2, 6, 5 };
  gint64 n = c.B * c.T * c.A;
  c.k = hn_test_random (n, -2, 2);
  c.v = hn_test_random (n, -1, 1);
  c.td = hn_test_random (c.A, -1.5, 1);
  c.tf = hn_test_random (c.A, -1, 1);
  c.r = hn_test_random (n, -1, 1);
  g_autofree float *dk = g_new (float, n), *dv = g_new (float, n), *dtd = g_new0 (float, c.A);
  g_autofree float *dtf = g_new0 (float, c.A);
  hn_ref_wkv4_back (c.r, c.k, c.v, c.td, c.tf, c.B, c.T, c.A, dk, dv, dtd, dtf);
  check_fd ("wkv4 dk", wkv_loss, &c, c.k, n, dk);
  check_fd ("wkv4 dv", wkv_loss, &c, c.v, n, dv);
  check_fd ("wkv4 dtime_decay", wkv_loss, &c, c.td, c.A, dtd);
  check_fd ("wkv4 dtime_first", wkv_loss, &c, c.tf, c.A, dtf);
  g_free (c.k);
  g_free (c.v);
  g_free (c.td);
  g_free (c.tf);
  g_free (c.r);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ssm/fd", test_fd);
  g_test_add_func ("/ssm/conv1d", test_conv1d);
  g_test_add_func ("/ssm/scan", test_scan);
  g_test_add_func ("/ssm/conv1d-back", test_conv1d_back);
  g_test_add_func ("/ssm/scan-back", test_scan_back);
  g_test_add_func ("/ssm/delta-fd", test_delta_fd);
  g_test_add_func ("/ssm/delta", test_delta);
  g_test_add_func ("/ssm/delta-back", test_delta_back);
  g_test_add_func ("/ssm/rglru-fd", test_rglru_fd);
  g_test_add_func ("/ssm/rglru", test_rglru);
  g_test_add_func ("/ssm/rglru-back", test_rglru_back);
  g_test_add_func ("/ssm/wkv4-fd", test_wkv4_fd);
  g_test_add_func ("/ssm/wkv4", test_wkv4);
  g_test_add_func ("/ssm/wkv4-back", test_wkv4_back);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
