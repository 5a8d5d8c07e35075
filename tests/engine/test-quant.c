/* Quantized frozen weights (tensor/quant.h): the NF4 / double-quantized
 * NF4 / int8 packers against hand-worked values, and the quantized matmul
 * kernel (forward x·Wᵀ + b and the input gradient dy·W, plain and
 * accumulating) against the CPU reference on odd sizes whose 64-element
 * blocks straddle rows, and the tensor-core kernel (whole blocks in a row)
 * against a reference on the f16-rounded operands where a device has it.
 * GGUF blocks (HN_DTYPE_GGML_*): random blocks of each type through the
 * matrix-vector kernel (plain, bias, residual add, fused RMSNorm, gated) and
 * the tiled matmul (forward, bmm, input gradient) against the CPU
 * dequantization (tensor/ggml-quants.c, itself checked against gguf-py's
 * quants.py in test-gguf). */
#include "ops-test-common.h"
#include "tensor/ops-back.h"
#include "tensor/quant.h"
#include "tensor/ggml-quants.h"

#include <math.h>
#include <string.h>

/* One 70-element weight [2, 35]: block 0 = elements 0..63, block 1 = 64..69. */
static void
test_nf4_hand (void)
{
  float w[70] = { 0 };
  w[0] = 2.0f;   /* / absmax 2 = 1     -> code 15 */
  w[1] = -2.0f;  /* -1                 -> code 0 */
  w[2] = 1.0f;   /* 0.5 < midpoint 0.5016 of 0.4407 and 0.5626 -> code 12 */
  w[3] = 0.0f;   /* code 7 */
  w[4] = -0.7f;  /* -0.35 < midpoint -0.3397 of -0.3949 and -0.2844 -> code 3 */
  w[5] = 0.15f;  /* 0.075 > midpoint 0.0398 of 0 and 0.0796 -> code 8 */
  w[64] = 0.3f;  /* block 1: absmax 0.3 -> code 15 */
  w[65] = -0.1f; /* -0.3333 > -0.3397 -> code 4 (-0.2844) */
  guint64 nb = hn_quant_nbytes (HN_DTYPE_NF4, 2, 35);
  g_assert_cmpuint (nb, ==, 36 + 2 * 4); /* 35 code bytes padded to 36, two absmax */
  g_autofree guint8 *q = g_malloc (nb);
  hn_quant_pack (HN_DTYPE_NF4, w, HN_DTYPE_F32, 2, 35, q);
  g_assert_cmphex (q[0], ==, 0xf0);
  g_assert_cmphex (q[1], ==, 0xc7);
  g_assert_cmphex (q[2], ==, 0x38);
  g_assert_cmphex (q[3], ==, 0x77);
  g_assert_cmphex (q[32], ==, 0xf4);
  g_assert_cmphex (q[34], ==, 0x77); /* elements 68 and 69 (the last): 0 */
  g_assert_cmphex (q[35], ==, 0x00); /* padding to the absmax section */
  float absmax[2];
  memcpy (absmax, q + 36, sizeof absmax);
  g_assert_cmpfloat (absmax[0], ==, 2.0f);
  g_assert_cmpfloat (absmax[1], ==, 0.3f);
  g_assert_cmpfloat (hn_quant_get (HN_DTYPE_NF4, q, 2, 35, 2), ==, 0.44070982933044434f * 2.0f);
  g_assert_cmpfloat (hn_quant_get (HN_DTYPE_NF4, q, 2, 35, 4), ==, -0.39491748809814453f * 2.0f);
  g_assert_cmpfloat (hn_quant_get (HN_DTYPE_NF4, q, 2, 35, 65), ==, -0.28444138169288635f * 0.3f);
  g_assert_cmpfloat (hn_quant_get (HN_DTYPE_NF4, q, 2, 35, 69), ==, 0.0f);
  /* from bf16 storage: the same codes (the values are exact in bf16 but 0.7/0.15/0.3/0.1, which stay on the same side) */
  guint16 wb[70];
  for (int i = 0; i < 70; i++)
    wb[i] = hn_f32_to_bf16 (w[i]);
  g_autofree guint8 *qb = g_malloc (nb);
  hn_quant_pack (HN_DTYPE_NF4, wb, HN_DTYPE_BF16, 2, 35, qb);
  g_assert_cmpmem (qb, 36, q, 36);
}

static void
test_int8_hand (void)
{
  float w[8] = { 127.0f, -63.5f, 0.5f, 1.0f, /* row 1 */ 0.0f, 0.0f, 0.0f, -2.54f };
  guint64 nb = hn_quant_nbytes (HN_DTYPE_Q8, 2, 4);
  g_assert_cmpuint (nb, ==, 8 + 2 * 4);
  g_autofree guint8 *q = g_malloc (nb);
  hn_quant_pack (HN_DTYPE_Q8, w, HN_DTYPE_F32, 2, 4, q);
  const gint8 *c = (const gint8 *) q;
  /* row 0: scale 127 / 127 = 1; -63.5 and 0.5 round half to even */
  g_assert_cmpint (c[0], ==, 127);
  g_assert_cmpint (c[1], ==, -64);
  g_assert_cmpint (c[2], ==, 0);
  g_assert_cmpint (c[3], ==, 1);
  /* row 1: absmax 2.54 -> -127, zeros stay 0 */
  g_assert_cmpint (c[7], ==, -127);
  g_assert_cmpint (c[4], ==, 0);
  g_assert_cmpfloat (hn_quant_get (HN_DTYPE_Q8, q, 2, 4, 1), ==, -64.0f);
  g_assert_cmpfloat (fabsf (hn_quant_get (HN_DTYPE_Q8, q, 2, 4, 7) + 2.54f), <, 1e-6);
}

static void
test_double_quant (void)
{
  float table[256];
  hn_quant_dynamic_map (table);
  /* bitsandbytes' signed dynamic map: 127 negatives, 0, 127 positives and 1 */
  g_assert_cmpfloat (table[255], ==, 1.0f);
  g_assert_cmpfloat (table[127], ==, 0.0f);
  g_assert_cmpfloat (fabsf (table[254] - 0.99296875f), <, 1e-7);
  g_assert_cmpfloat (fabsf (table[0] + 0.99296875f), <, 1e-7);
  g_assert_cmpfloat (fabsf (table[128] - 5.5e-7f), <, 1e-12); /* 10^-6 · (0.1 + 1) / 2 */
  for (int i = 0; i < 255; i++)
    g_assert_cmpfloat (table[i], <, table[i + 1]);
  /* a weight of 600 blocks (3 double-quant blocks): each dequantized absmax
   * within half a step of the 8-bit map, so every element within 3 % of NF4's own */
  gint64 rows = 300, cols = 128, n = rows * cols;
  g_autofree float *w = hn_test_random (n, -1, 1);
  for (gint64 i = 0; i < n; i++)
    w[i] *= 1.0f + (float) (i / 64 % 7); /* blocks of different scales */
  g_autofree guint8 *q4 = g_malloc (hn_quant_nbytes (HN_DTYPE_NF4, rows, cols));
  g_autofree guint8 *qd = g_malloc (hn_quant_nbytes (HN_DTYPE_NF4_DQ, rows, cols));
  g_assert_cmpuint (hn_quant_nbytes (HN_DTYPE_NF4_DQ, rows, cols), <, hn_quant_nbytes (HN_DTYPE_NF4, rows, cols));
  hn_quant_pack (HN_DTYPE_NF4, w, HN_DTYPE_F32, rows, cols, q4);
  hn_quant_pack (HN_DTYPE_NF4_DQ, w, HN_DTYPE_F32, rows, cols, qd);
  g_assert_cmpmem (q4, n / 2, qd, n / 2); /* the same 4-bit codes */
  double worst = 0;
  for (gint64 i = 0; i < n; i++)
    {
      float a = hn_quant_get (HN_DTYPE_NF4, q4, rows, cols, i), b = hn_quant_get (HN_DTYPE_NF4_DQ, qd, rows, cols, i);
      worst = MAX (worst, fabs (a - b) / (fabs (a) + 1e-3));
    }
  g_test_message ("double quantization: worst relative change %.3g", worst);
  g_assert_cmpfloat (worst, <, 0.03); /* half a step of the map near 1 (0.007) times absmax2 / absmax */
}

/* Every block's absmax is its largest |w| and every code the nearest NF4
 * value (int8: the row's scale and rounding): a weight above 2^20 elements,
 * which several threads pack, and one whose last block is odd-sized. */
static void
check_pack (gint64 rows, gint64 cols)
{
  gint64 n = rows * cols;
  g_autofree float *w = hn_test_random (n, -1, 1);
  for (gint64 i = 0; i < n; i++)
    w[i] *= 1.0f + (float) (i / 64 % 5);
  g_autofree guint8 *q = g_malloc (hn_quant_nbytes (HN_DTYPE_NF4, rows, cols));
  hn_quant_pack (HN_DTYPE_NF4, w, HN_DTYPE_F32, rows, cols, q);
  HnQuantLayout L;
  hn_quant_layout (HN_DTYPE_NF4, rows, cols, &L);
  const float *absmax = (const float *) (q + 4 * L.scale);
  for (gint64 b = 0; b * 64 < n; b++)
    {
      gint64 i1 = MIN (n, b * 64 + 64);
      float amax = 0;
      for (gint64 i = b * 64; i < i1; i++)
        amax = fmaxf (amax, fabsf (w[i]));
      g_assert_cmpfloat (absmax[b], ==, amax);
      for (gint64 i = b * 64; i < i1; i++)
        {
          int code = (i & 1) ? q[i / 2] & 15 : q[i / 2] >> 4;
          float x = w[i] / amax, d = fabsf (hn_nf4_code[code] - x);
          for (int c = 0; c < 16; c++)
            if (fabsf (hn_nf4_code[c] - x) < d - 1e-6f)
              g_error ("element %" G_GINT64_FORMAT ": code %d, %d is nearer", i, code, c);
        }
    }
  g_autofree guint8 *q8 = g_malloc (hn_quant_nbytes (HN_DTYPE_Q8, rows, cols));
  hn_quant_pack (HN_DTYPE_Q8, w, HN_DTYPE_F32, rows, cols, q8);
  hn_quant_layout (HN_DTYPE_Q8, rows, cols, &L);
  const float *scale = (const float *) (q8 + 4 * L.scale);
  for (gint64 r = 0; r < rows; r++)
    {
      float amax = 0;
      for (gint64 c = 0; c < cols; c++)
        amax = fmaxf (amax, fabsf (w[r * cols + c]));
      g_assert_cmpfloat (scale[r], ==, amax / 127.0f);
      for (gint64 c = 0; c < cols; c++)
        g_assert_cmpint (((gint8 *) q8)[r * cols + c], ==, (int) rintf (w[r * cols + c] * (127.0f / amax)));
    }
}

static void
test_pack_threads (void)
{
  check_pack (1030, 1024);
  check_pack (3, 23); /* 69 elements: a last block of 5 */
}

static float
round_f16 (float v)
{
  return hn_f16_to_f32 (hn_f32_to_f16 (CLAMP (v, -65504.0f, 65504.0f)));
}

/* got against a dense reference whose error bound is tol times the sum of
 * the absolute terms of each output (abs) plus |c0| when accumulating. */
static void
check_dense (const char *what, const char *out, const float *got, const double *ref, const double *abs, gint64 n,
             double tol)
{
  for (gint64 i = 0; i < n; i++)
    if (!(fabs ((double) got[i] - ref[i]) <= tol * abs[i] + 1e-30))
      g_error ("%s %s[%" G_GINT64_FORMAT "]: %.9g, reference %.9g (bound %.3g)", what, out, i, got[i], ref[i],
               tol * abs[i]);
}

/* The four kernels a quantized weight q [N, K] serves: y = x W^T + b,
 * y2 = 0.5 x W^T, dx = dx0 + dy W (accumulated) and dx2 = dy W. */
static void
run_kernels (HnDType dt, gint64 M, gint64 N, gint64 K, const guint8 *q, float *x, float *b, float *dy,
             float *dx0, float **y, float **y2, float **dx, float **dx2)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "w", dt, N, K, q, &error);
  g_assert_no_error (error);
  g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b);
  g_autoptr (HnTensor) tdy = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, N }, dy);
  g_autoptr (HnTensor) tdx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, dx0);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr (HnTensor) ty2 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr (HnTensor) tdx2 = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, K });
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  g_assert_true (hn_op_matmul (cmd, ty, tx, tw, tb, &error));
  g_assert_true (hn_op_bmm (cmd, ty2, tx, tw, HN_MATMUL_TRANS_B, 0.5f, &error));
  g_assert_true (hn_op_matmul_back (cmd, tdx, NULL, NULL, tdy, tx, tw, HN_BACK_ACCUMULATE, &error));
  g_assert_true (hn_op_matmul_back (cmd, tdx2, NULL, NULL, tdy, tx, tw, 0, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  *y = hn_test_download (ty);
  *y2 = hn_test_download (ty2);
  *dx = hn_test_download (tdx);
  *dx2 = hn_test_download (tdx2);
}

/* run_kernels' outputs against the CPU reference on the same blocks. */
static void
check_cpu (const char *what, HnDType dt, const guint8 *q, gint64 M, gint64 N, gint64 K, const float *x, const float *b,
           const float *dy, const float *dx0, const float *y, const float *y2, const float *dx, const float *dx2,
           double scale)
{
  g_autofree float *ry = g_new (float, M * N), *ry2 = g_new (float, M * N), *rdx = g_new (float, M * K);
  hn_cpu_matmul_quant (ry, x, dt, q, b, M, N, K);
  hn_cpu_matmul_quant (ry2, x, dt, q, NULL, M, N, K);
  for (gint64 i = 0; i < M * N; i++)
    ry2[i] *= 0.5f;
  hn_cpu_matmul_quant_dx (rdx, dy, dt, q, M, N, K);
  hn_test_assert_close (what, y, ry, M * N, 1e-5, scale);
  hn_test_assert_close (what, y2, ry2, M * N, 1e-5, scale);
  hn_test_assert_close (what, dx2, rdx, M * K, 1e-5, scale);
  for (gint64 i = 0; i < M * K; i++)
    rdx[i] += dx0[i];
  hn_test_assert_close (what, dx, rdx, M * K, 1e-5, scale);
}

/* On a cooperative-matrix-2 device with M > 8 and whole blocks in W's rows
 * the kernel is the tensor-core one: the reference then takes x, dy and the
 * dequantized W rounded to f16, as the kernel does, and the tolerance is
 * that of an f32 accumulation on tensor cores (test-ops-matmul's). */
/* q_in: packed blocks of W [N, K] to use (GGUF's random blocks); NULL packs
 * random values, and then W's dequantization is also checked against them. */
static void
run_case_q (HnDType dt, gint64 M, gint64 N, gint64 K, const guint8 *q_in)
{
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *x = hn_test_random (M * K, -1, 1), *w = hn_test_random (N * K, -1, 1);
  g_autofree float *b = hn_test_random (N, -1, 1), *dy = hn_test_random (M * N, -1, 1);
  g_autofree float *dx0 = hn_test_random (M * K, -1, 1);
  guint64 nq = hn_quant_nbytes (dt, N, K);
  g_autofree guint8 *q = g_malloc (nq);
  if (q_in)
    memcpy (q, q_in, nq);
  else
    hn_quant_pack (dt, w, HN_DTYPE_F32, N, K, q);
  g_autofree float *y = NULL, *y2 = NULL, *dx = NULL, *dx2 = NULL;
  run_kernels (dt, M, N, K, q, x, b, dy, dx0, &y, &y2, &dx, &dx2);
  gboolean tc = hn_quant_matmul_tensor_cores (ctx, dt, M, K, 0);
  /* W's f16 form (ops-quant.c's f16_form): the tensor cores' choice from 64 rows, or forced */
  const char *f16e = g_getenv ("HN_QUANT_F16");
  gboolean f16_ok = (N * K) % 8 == 0 && N * K <= ((gint64) 128 << 20) &&
                    (dt == HN_DTYPE_Q8 || hn_dtype_is_ggml (dt) || K % 64 == 0);
  gboolean f16_form = f16_ok && !(f16e && f16e[0] == '0') &&
                     ((f16e && f16e[0] == '1') || (tc && M >= 64 && !hn_dtype_is_ggml (dt)));
  /* A (and dy) is made f16 on the tensor cores: the decode kernel's, or the
   * 16-bit weights' kernel the f16 form takes (more than 8 rows) */
  gboolean a16 = f16_form ? hn_op_matmul_reduced_precision (ctx, HN_DTYPE_F16, M, 0) : tc;
  g_autofree char *what = g_strdup_printf ("%s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "%s%s",
                                           hn_dtype_name (dt), M, N, K,
                                           f16_form ? (a16 ? " (tensor cores, W's f16 form" : " (W's f16 form")
                                           : tc ? " (tensor cores, decode" : "",
                                           a16 || f16_form ? (g_getenv ("HN_QCM2_A_F32") ? ", f32 A)" : ")") : "");
  if (!tc && !f16_form)
    {
      g_autofree float *wf = g_new (float, N * K);
      hn_quant_unpack_rows (dt, q, N, K, 0, N, wf);
      check_cpu (what, dt, q, M, N, K, x, b, dy, dx0, y, y2, dx, dx2,
                 sqrt ((double) MAX (K, N)) * 1e-5 * MAX (1.0, hn_test_max_abs (wf, N * K)));
    }
  else
    {
      g_autofree float *wd = g_new (float, N * K);
      hn_quant_unpack_rows (dt, q, N, K, 0, N, wd);
      for (gint64 i = 0; i < N * K; i++)
        wd[i] = round_f16 (wd[i]);
      g_autofree double *ry = g_new0 (double, M * N), *ay = g_new0 (double, M * N);
      g_autofree double *rdx = g_new0 (double, M * K), *adx = g_new0 (double, M * K);
      /* A rounded once, not per product: the tile cases are 2048 rows (issue 23's 90 s limit) */
      g_autofree float *xa = g_new (float, M * K);
      for (gint64 i = 0; i < M * K; i++)
        xa[i] = a16 ? round_f16 (x[i]) : x[i];
      for (gint64 m = 0; m < M; m++)
        for (gint64 n = 0; n < N; n++)
          {
            double s = 0, sa = 0;
            for (gint64 k = 0; k < K; k++)
              {
                double t = (double) xa[m * K + k] * wd[n * K + k];
                s += t;
                sa += fabs (t);
              }
            ry[m * N + n] = s;
            ay[m * N + n] = sa;
            float dyr = a16 ? round_f16 (dy[m * N + n]) : dy[m * N + n];
            for (gint64 k = 0; k < K; k++)
              {
                double t = (double) dyr * wd[n * K + k];
                rdx[m * K + k] += t;
                adx[m * K + k] += fabs (t);
              }
          }
      g_autofree double *r = g_new (double, MAX (M * N, M * K)), *a2 = g_new (double, MAX (M * N, M * K));
      for (gint64 i = 0; i < M * N; i++)
        r[i] = ry[i] + b[i % N], a2[i] = ay[i] + fabs (b[i % N]);
      check_dense (what, "y", y, r, a2, M * N, 2e-4);
      for (gint64 i = 0; i < M * N; i++)
        r[i] = 0.5 * ry[i], a2[i] = 0.5 * ay[i];
      check_dense (what, "y (alpha 0.5)", y2, r, a2, M * N, 2e-4);
      check_dense (what, "dx", dx2, rdx, adx, M * K, 2e-4);
      for (gint64 i = 0; i < M * K; i++)
        r[i] = rdx[i] + dx0[i], a2[i] = adx[i] + fabs (dx0[i]);
      check_dense (what, "dx (accumulated)", dx, r, a2, M * K, 2e-4);
    }
  g_test_message ("%s: checked", what);
  if (q_in)
    return;
  /* the dequantized weight is close to the original (NF4 error ~ absmax / 10) */
  g_autofree float *row = g_new (float, K);
  double worst = 0;
  for (gint64 r = 0; r < N; r++)
    {
      hn_quant_unpack_rows (dt, q, N, K, r, 1, row);
      for (gint64 c = 0; c < K; c++)
        worst = MAX (worst, fabs (row[c] - w[r * K + c]));
    }
  g_assert_cmpfloat (worst, <, dt == HN_DTYPE_Q8 ? 0.005 : 0.2);
}

static void
run_case (HnDType dt, gint64 M, gint64 N, gint64 K)
{
  run_case_q (dt, M, N, K, NULL);
}

static void
test_matmul (void)
{
  static const HnDType dts[] = { HN_DTYPE_NF4, HN_DTYPE_NF4_DQ, HN_DTYPE_Q8 };
  /* odd sizes (blocks straddling rows: the f32 kernel everywhere), whole
   * blocks in a row (the tensor-core kernel where there is one: edge tiles,
   * one 64x64 tile, 17 of them) */
  static const gint64 shapes[][3] = { { 37, 29, 71 }, { 2, 3, 5 }, { 130, 200, 192 }, { 65, 64, 1 },
                                      { 64, 64, 64 }, { 77, 130, 128 }, { 300, 260, 256 } };
  for (gsize d = 0; d < G_N_ELEMENTS (dts); d++)
    for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
      run_case (dts[d], shapes[s][0], shapes[s][1], shapes[s][2]);
}

/* The tensor-core kernel's large tiles (128x128 and 128x256, chosen when
 * they fill the GPU) and its in-kernel f32 conversion of A; on a device
 * without that kernel there is nothing more to check than test_matmul does. */
static void
test_matmul_tensor_core_tiles (void)
{
  HnVkContext *ctx = hn_test_ctx ();
  if (!hn_quant_matmul_tensor_cores (ctx, HN_DTYPE_NF4, 2048, 128, 0))
    {
      g_test_skip ("no tensor-core quantized matmul on this device");
      return;
    }
  run_case (HN_DTYPE_NF4, 2048, 1024, 128);
  run_case (HN_DTYPE_Q8, 1100, 1100, 64);
  run_case (HN_DTYPE_NF4, 2048, 4096, 64);
  g_setenv ("HN_QCM2_A_F32", "1", TRUE);
  run_case (HN_DTYPE_NF4_DQ, 300, 260, 256);
  run_case (HN_DTYPE_Q8, 130, 200, 192);
  g_unsetenv ("HN_QCM2_A_F32");
  /* the decode kernel where the f16 form would be taken (M >= 64) */
  g_setenv ("HN_QUANT_F16", "0", TRUE);
  run_case (HN_DTYPE_NF4, 2048, 1024, 128);
  run_case (HN_DTYPE_NF4_DQ, 300, 260, 256);
  run_case (HN_DTYPE_Q8, 130, 200, 192);
  g_unsetenv ("HN_QUANT_F16");
}

/* W's f16 form taken on every device (HN_QUANT_F16=1): quant_to_f16 and
 * then the 16-bit weights' matmul (the scalar kernel on lavapipe, the
 * tensor cores elsewhere), forward with a bias, alpha, the input gradient
 * written and accumulated; odd row counts, int8 rows of 6. */
static void
test_matmul_f16_form (void)
{
  static const HnDType dts[] = { HN_DTYPE_NF4, HN_DTYPE_NF4_DQ, HN_DTYPE_Q8 };
  static const gint64 shapes[][3] = { { 37, 29, 128 }, { 3, 64, 64 }, { 130, 200, 192 } };
  g_setenv ("HN_QUANT_F16", "1", TRUE);
  for (gsize d = 0; d < G_N_ELEMENTS (dts); d++)
    for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
      run_case (dts[d], shapes[s][0], shapes[s][1], shapes[s][2]);
  run_case (HN_DTYPE_Q8, 9, 12, 6);
  g_unsetenv ("HN_QUANT_F16");
}

/* quant_to_f16.comp (W's f16 form for the tensor-core matmul) against the
 * CPU dequantization rounded to f16: every value to within the rounding of
 * one f16 step (a driver may round its f32 -> f16 conversion either way);
 * odd row counts, int8 rows that split an invocation's 8 elements. */
static void
test_to_f16 (void)
{
  static const struct { HnDType dt; gint64 rows, cols; } cases[] = {
    { HN_DTYPE_NF4, 3, 64 }, { HN_DTYPE_NF4, 37, 192 }, { HN_DTYPE_NF4_DQ, 5, 128 }, { HN_DTYPE_NF4_DQ, 300, 256 },
    { HN_DTYPE_Q8, 4, 6 }, { HN_DTYPE_Q8, 13, 40 }
  };
  HnVkContext *ctx = hn_test_ctx ();
  for (gsize c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autoptr (GError) error = NULL;
      HnDType dt = cases[c].dt;
      gint64 R = cases[c].rows, K = cases[c].cols;
      g_autofree float *w = hn_test_random (R * K, -3, 3);
      for (gint64 r = 0; r < R; r++) /* rows of different scales */
        for (gint64 k = 0; k < K; k++)
          w[r * K + k] *= (float) (1 + r % 7);
      g_autofree guint8 *q = g_malloc (hn_quant_nbytes (dt, R, K));
      hn_quant_pack (dt, w, HN_DTYPE_F32, R, K, q);
      g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "w", dt, R, K, q, &error);
      g_assert_no_error (error);
      g_autoptr (HnTensor) out = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { R, K });
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_no_error (error);
      g_assert_true (hn_op_quant_to_f16 (cmd, out, tw, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *got = hn_test_download (out), *ref = g_new (float, R * K);
      hn_quant_unpack_rows (dt, q, R, K, 0, R, ref);
      for (gint64 i = 0; i < R * K; i++)
        {
          float want = round_f16 (ref[i]);
          if (!(fabsf (got[i] - want) <= fabsf (ref[i]) * (1.0f / 1024) + 6e-8f))
            g_error ("quant_to_f16 %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " [%" G_GINT64_FORMAT "]: %.9g, want %.9g",
                     hn_dtype_name (dt), R, K, i, got[i], want);
        }
    }
  /* fails closed on a weight it does not cover */
  g_autoptr (GError) error = NULL;
  g_autofree float *w = hn_test_random (3 * 5, -1, 1);
  g_autofree guint8 *q = g_malloc (hn_quant_nbytes (HN_DTYPE_Q8, 3, 5));
  hn_quant_pack (HN_DTYPE_Q8, w, HN_DTYPE_F32, 3, 5, q);
  g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "w", HN_DTYPE_Q8, 3, 5, q, &error);
  g_assert_no_error (error);
  g_autoptr (HnTensor) out = hn_test_empty (HN_DTYPE_F16, 2, (gint64[]) { 3, 5 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_false (hn_op_quant_to_f16 (cmd, out, tw, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static const HnDType ggml_dts[] = { HN_DTYPE_GGML_Q4_0, HN_DTYPE_GGML_Q4_1, HN_DTYPE_GGML_Q5_0, HN_DTYPE_GGML_Q5_1,
                                    HN_DTYPE_GGML_Q8_0, HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q5_K, HN_DTYPE_GGML_Q6_K,
                                    HN_DTYPE_GGML_Q8_K };

/* Random blocks of dt for [rows, cols]: random bytes, with the block's f16
 * scales (d, and m / dmin; Q8_K's f32 d) set to random values of either sign
 * in [0.002, 0.05) so every value is a finite number of a model's magnitude. */
static guint8 *
random_blocks (HnDType dt, gint64 rows, gint64 cols)
{
  HnGgmlType g = hn_dtype_ggml_type (dt);
  guint bs = hn_ggml_block_size (g), ts = hn_ggml_type_size (g);
  guint64 nb = (guint64) rows * (guint64) (cols / bs), n = hn_quant_nbytes (dt, rows, cols);
  guint8 *q = g_malloc0 (n);
  for (guint64 i = 0; i < nb * ts; i++)
    q[i] = (guint8) g_test_rand_int_range (0, 256);
  for (guint64 b = 0; b < nb; b++)
    {
      guint8 *blk = q + b * ts;
      if (g == HN_GGML_Q8_K)
        {
          float d = (float) g_test_rand_double_range (0.002, 0.05) * (g_test_rand_bit () ? 1.0f : -1.0f);
          memcpy (blk, &d, 4);
          continue;
        }
      int offs[2] = { 0, 2 }, n_half = 1;
      if (g == HN_GGML_Q6_K)
        offs[0] = 208;
      else if (g == HN_GGML_Q4_1 || g == HN_GGML_Q5_1 || g == HN_GGML_Q4_K || g == HN_GGML_Q5_K)
        n_half = 2;
      for (int h = 0; h < n_half; h++)
        {
          float v = (float) g_test_rand_double_range (0.002, 0.05) * (g_test_rand_bit () ? 1.0f : -1.0f);
          guint16 bits = hn_f32_to_f16 (v);
          blk[offs[h]] = (guint8) (bits & 0xff);
          blk[offs[h] + 1] = (guint8) (bits >> 8);
        }
    }
  return q;
}

/* quant_to_f16 of ggml blocks (W's f16 form for the tensor-core matmul)
 * against the CPU dequantization rounded to f16: gguf_to_f16_wide.comp for
 * Q4_K, Q6_K and Q8_0 and gguf_to_f16.comp for the rest (Q8_K included), then
 * gguf_to_f16.comp for all (HN_GGUF_TO_F16_OLD=1). Block counts that leave a
 * workgroup part full and odd Q6_K / Q8_0 block counts (blocks 2 bytes off a
 * word, the last one too), outputs at a 16-byte and at a 4-byte offset (the
 * wide kernel's uint stores) with the bytes around them checked untouched,
 * other workgroup shapes (HN_GGUF_TO_F16_TUNE), and blocks from the reference
 * quantizers. Within one f16 step, plus 1e-5 for a driver that fuses ggml's
 * d * q - m into one fma. */
static void
check_gguf_to_f16 (HnDType dt, gint64 R, gint64 K, gint64 off, const guint8 *q_in)
{
  HnVkContext *ctx = hn_test_ctx ();
  g_autoptr (GError) error = NULL;
  g_autofree guint8 *q = q_in ? g_memdup2 (q_in, hn_quant_nbytes (dt, R, K)) : random_blocks (dt, R, K);
  g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "w", dt, R, K, q, &error);
  g_assert_no_error (error);
  /* out at element `off` of a buffer of sentinels with 8 more after it */
  gint64 n = R * K, nb = off + n + 8;
  g_autofree float *fill = g_new (float, nb);
  for (gint64 i = 0; i < nb; i++)
    fill[i] = 7.0f;
  g_autoptr (HnTensor) big = hn_test_tensor (HN_DTYPE_F16, 1, (gint64[]) { nb }, fill);
  g_autoptr (HnTensor) out = hn_tensor_new_in_buffer (ctx, big->buf, big->offset + (guint64) off * 2, "out",
                                                      HN_DTYPE_F16, 2, (gint64[]) { R, K }, &error);
  g_assert_no_error (error);
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  g_assert_true (hn_op_quant_to_f16 (cmd, out, tw, &error));
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *all = hn_test_download (big), *ref = g_new (float, n);
  hn_quant_unpack_rows (dt, q, R, K, 0, R, ref);
  const char *old = g_getenv ("HN_GGUF_TO_F16_OLD"), *tune = g_getenv ("HN_GGUF_TO_F16_TUNE");
  for (gint64 i = 0; i < nb; i++)
    {
      gint64 e = i - off;
      float want = e >= 0 && e < n ? round_f16 (ref[e]) : 7.0f;
      float tol = e >= 0 && e < n ? fabsf (ref[e]) * (1.0f / 1024) + 1e-5f : 0.0f;
      if (!(fabsf (all[i] - want) <= tol))
        g_error ("quant_to_f16 %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " at +%" G_GINT64_FORMAT "%s%s [%"
                 G_GINT64_FORMAT "]: %.9g, want %.9g", hn_dtype_name (dt), R, K, off, old ? " (old kernel)" : "",
                 tune ? " (tuned)" : "", e, all[i], want);
    }
}

static void
test_gguf_to_f16 (void)
{
  for (int old = 0; old < 2; old++)
    {
      if (old)
        g_setenv ("HN_GGUF_TO_F16_OLD", "1", TRUE);
      for (gsize d = 0; d < G_N_ELEMENTS (ggml_dts); d++)
        {
          gint64 bs = hn_ggml_block_size (hn_dtype_ggml_type (ggml_dts[d]));
          check_gguf_to_f16 (ggml_dts[d], 1, bs, 0, NULL);
          check_gguf_to_f16 (ggml_dts[d], 5, 3 * bs, 0, NULL);
          check_gguf_to_f16 (ggml_dts[d], 37, bs == 256 ? 512 : 96, 8, NULL);
          check_gguf_to_f16 (ggml_dts[d], 131, bs == 256 ? 256 : 160, 2, NULL);
        }
      g_unsetenv ("HN_GGUF_TO_F16_OLD");
    }
  static const HnDType wide[] = { HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q6_K, HN_DTYPE_GGML_Q8_0 };
  static const char *tunes[] = { "64,3", "7,1", "256,16" };
  for (gsize t = 0; t < G_N_ELEMENTS (tunes); t++)
    {
      g_setenv ("HN_GGUF_TO_F16_TUNE", tunes[t], TRUE);
      for (gsize d = 0; d < G_N_ELEMENTS (wide); d++)
        check_gguf_to_f16 (wide[d], 19, 768, t == 1 ? 2 : 0, NULL);
      g_unsetenv ("HN_GGUF_TO_F16_TUNE");
    }
  static const HnDType packed[] = { HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q6_K, HN_DTYPE_GGML_Q8_0, HN_DTYPE_GGML_Q8_K };
  for (gsize d = 0; d < G_N_ELEMENTS (packed); d++)
    {
      gint64 R = 11, K = 512;
      g_autofree float *w = hn_test_random (R * K, -2, 2);
      g_autofree guint8 *q = g_malloc (hn_quant_nbytes (packed[d], R, K));
      hn_quant_pack (packed[d], w, HN_DTYPE_F32, R, K, q);
      check_gguf_to_f16 (packed[d], R, K, 0, q);
    }
}

/* The integer-dot decode kernel's x (matvec_gguf_q8.comp): each 32-element
 * block as codes times the smallest power of two 2^e with max |x| / 2^e <=
 * 127.5, rounded to even and clamped to ±127; exact, so the kernel's codes
 * are these. */
static void
q8_quantize (const float *x, gint64 K, float *out)
{
  for (gint64 b = 0; b < K / 32; b++)
    {
      float amax = 0;
      for (int e = 0; e < 32; e++)
        amax = MAX (amax, fabsf (x[32 * b + e]));
      int ex;
      frexpf (amax, &ex);
      int es = ex - 7;
      if (ldexpf (amax, -es) > 127.5f)
        es++;
      for (int e = 0; e < 32; e++)
        {
          float c = nearbyintf (ldexpf (x[32 * b + e], -es));
          out[32 * b + e] = ldexpf (CLAMP (c, -127.0f, 127.0f), es);
        }
    }
}

/* Decode: the matrix-vector kernel and its fused forms, 1, 3 and 8 rows. */
static void
run_gguf_matvec (HnDType dt, gint64 M, gint64 N, gint64 K, gboolean fused)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  if (!hn_op_matvec_available (cmd, M))
    {
      g_test_message ("no matrix-vector kernel on this device: skipped");
      return;
    }
  g_autofree guint8 *q = random_blocks (dt, N, K), *qu = random_blocks (dt, N, K);
  g_autofree float *wf = g_new (float, N * K), *uf = g_new (float, N * K);
  hn_quant_unpack_rows (dt, q, N, K, 0, N, wf);
  hn_quant_unpack_rows (dt, qu, N, K, 0, N, uf);
  g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "w", dt, N, K, q, &error);
  g_assert_no_error (error);
  g_autoptr (HnTensor) tu = hn_tensor_new_quant (ctx, "u", dt, N, K, qu, &error);
  g_assert_no_error (error);
  g_autofree float *x = hn_test_random (M * K, -1, 1), *b = hn_test_random (N, -1, 1), *bu = hn_test_random (N, -1, 1);
  g_autofree float *y0 = hn_test_random (M * N, -1, 1), *gn = hn_test_random (K, 0.5, 1.5);
  g_autoptr (HnTensor) tx = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, K }, x);
  g_autoptr (HnTensor) tb = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, b);
  g_autoptr (HnTensor) tbu = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { N }, bu);
  g_autoptr (HnTensor) tg = hn_test_tensor (HN_DTYPE_F32, 1, (gint64[]) { K }, gn);
  g_autoptr (HnTensor) ty = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr (HnTensor) tyb = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr (HnTensor) tya = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { M, N }, y0);
  g_autoptr (HnTensor) tyn = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  g_autoptr (HnTensor) tyg = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { M, N });
  HnMatvecNorm nrm = { tg, 1e-5f, FALSE };
  g_assert_true (hn_op_matmul (cmd, ty, tx, tw, NULL, &error));
  g_assert_true (hn_op_matmul (cmd, tyb, tx, tw, tb, &error));
  g_assert_true (hn_op_matvec_add (cmd, tya, tx, tw, tb, 0.5f, &error));
  /* the fused forms are the same code for every type: tested on a few (each is a pipeline to compile) */
  if (fused)
    {
      g_assert_true (hn_op_matvec_normed (cmd, tyn, tx, &nrm, tw, tb, &error));
      g_assert_true (hn_op_matvec_glu (cmd, tyg, tx, &nrm, tw, tb, tu, tbu, HN_ACT_SILU, &error));
    }
  g_assert_no_error (error);
  hn_test_run (cmd);
  g_autofree float *y = hn_test_download (ty), *yb = hn_test_download (tyb), *ya = hn_test_download (tya);
  g_autofree float *yn = hn_test_download (tyn), *yg = hn_test_download (tyg);
  g_autofree float *ry = g_new (float, M * N), *ryb = g_new (float, M * N), *rya = g_new (float, M * N);
  g_autofree float *ryn = g_new (float, M * N), *ryg = g_new (float, M * N);
  /* the integer-dot kernel multiplies W by x quantized (x times the gain, for the normed forms) */
  gboolean q8 = hn_gguf_matvec_q8 (ctx, dt, M, K);
  g_autofree float *xq = g_new (float, M * K), *xg = g_new (float, M * K), *xgq = g_new (float, M * K);
  for (gint64 i = 0; i < M * K; i++)
    xg[i] = x[i] * gn[i % K];
  for (gint64 m = 0; m < M; m++)
    {
      if (q8)
        {
          q8_quantize (x + m * K, K, xq + m * K);
          q8_quantize (xg + m * K, K, xgq + m * K);
        }
      else
        {
          memcpy (xq + m * K, x + m * K, K * sizeof (float));
          memcpy (xgq + m * K, xg + m * K, K * sizeof (float));
        }
    }
  if (q8)
    g_test_message ("%s: integer-dot kernel (x quantized)", hn_dtype_name (dt));
  for (gint64 m = 0; m < M; m++)
    {
      double ss = 0;
      for (gint64 k = 0; k < K; k++)
        ss += (double) x[m * K + k] * x[m * K + k];
      double rstd = 1.0 / sqrt (ss / (double) K + 1e-5);
      for (gint64 n = 0; n < N; n++)
        {
          double s = 0, sn = 0, su = 0;
          for (gint64 k = 0; k < K; k++)
            {
              double xv = xq[m * K + k], xgv = xgq[m * K + k];
              s += xv * wf[n * K + k];
              sn += xgv * wf[n * K + k];
              su += xgv * uf[n * K + k];
            }
          gint64 i = m * N + n;
          ry[i] = (float) s;
          ryb[i] = (float) (s + b[n]);
          rya[i] = (float) (y0[i] + 0.5 * (s + b[n]));
          ryn[i] = (float) (rstd * sn + b[n]);
          double gv = rstd * sn + b[n], uv = rstd * su + bu[n];
          ryg[i] = (float) (gv / (1.0 + exp (-gv)) * uv);
        }
    }
  g_autofree char *what = g_strdup_printf ("matvec %s %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                                           hn_dtype_name (dt), M, N, K);
  double atol = sqrt ((double) K) * 1e-5 * MAX (1.0, hn_test_max_abs (wf, N * K));
  hn_test_assert_close (what, y, ry, M * N, 1e-5, atol);
  hn_test_assert_close (what, yb, ryb, M * N, 1e-5, atol);
  hn_test_assert_close (what, ya, rya, M * N, 1e-5, atol);
  if (fused)
    {
      hn_test_assert_close (what, yn, ryn, M * N, 1e-5, atol);
      hn_test_assert_close (what, yg, ryg, M * N, 1e-4, atol * 4);
    }
}

static void
test_gguf_matvec (void)
{
  for (gsize d = 0; d < G_N_ELEMENTS (ggml_dts); d++)
    {
      gboolean k_type = hn_ggml_block_size (hn_dtype_ggml_type (ggml_dts[d])) == 256;
      gint64 K = k_type ? 512 : 160;
      gboolean fused = ggml_dts[d] == HN_DTYPE_GGML_Q4_K || ggml_dts[d] == HN_DTYPE_GGML_Q5_0 ||
                       ggml_dts[d] == HN_DTYPE_GGML_Q8_K;
      run_gguf_matvec (ggml_dts[d], 1, 37, K, fused);
      run_gguf_matvec (ggml_dts[d], 3, 9, K, fused);
      run_gguf_matvec (ggml_dts[d], 8, 70, k_type ? 256 : 96, FALSE);
    }
  /* several rows a subgroup (the default for 4096 rows and more), with a
   * last workgroup whose rows run past N: 37 rows in groups of 6 and 4 */
  static const HnDType multi[] = { HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q6_K, HN_DTYPE_GGML_Q8_0, HN_DTYPE_GGML_Q4_0,
                                   HN_DTYPE_GGML_Q8_K };
  for (gsize d = 0; d < G_N_ELEMENTS (multi); d++)
    {
      gint64 K = hn_ggml_block_size (hn_dtype_ggml_type (multi[d])) * 3;
      g_setenv ("HN_MATVEC_GGUF_TUNE", "3,2", TRUE);
      run_gguf_matvec (multi[d], 2, 37, K, multi[d] == HN_DTYPE_GGML_Q4_K || multi[d] == HN_DTYPE_GGML_Q8_K);
      g_setenv ("HN_MATVEC_GGUF_TUNE", "1,4", TRUE);
      run_gguf_matvec (multi[d], 1, 37, K, FALSE);
      /* two chunks a lane at once, K of 3 blocks: an odd chunk count */
      g_setenv ("HN_MATVEC_GGUF_TUNE", "2,2,2", TRUE);
      run_gguf_matvec (multi[d], 1, 37, K, multi[d] == HN_DTYPE_GGML_Q6_K);
      g_unsetenv ("HN_MATVEC_GGUF_TUNE");
    }
  /* Q4_K and Q6_K in chunk_dot_ql's layout too (HN_MATVEC_GGUF_QL=1, opt-in) */
  g_setenv ("HN_MATVEC_GGUF_QL", "1", TRUE);
  run_gguf_matvec (HN_DTYPE_GGML_Q4_K, 3, 9, 512, TRUE);
  run_gguf_matvec (HN_DTYPE_GGML_Q6_K, 1, 37, 768, TRUE);
  g_unsetenv ("HN_MATVEC_GGUF_QL");
}

/* Prefill and training: the tiled matmul (x·Wᵀ + b, bmm with alpha, dy·W). */
static void
test_gguf_matmul (void)
{
  for (gsize d = 0; d < G_N_ELEMENTS (ggml_dts); d++)
    {
      gboolean k_type = hn_ggml_block_size (hn_dtype_ggml_type (ggml_dts[d])) == 256;
      gint64 shapes[][3] = { { 37, 29, k_type ? 512 : 96 }, { 65, 70, k_type ? 256 : 32 } };
      for (gsize s = 0; s < G_N_ELEMENTS (shapes); s++)
        {
          g_autofree guint8 *q = random_blocks (ggml_dts[d], shapes[s][1], shapes[s][2]);
          run_case_q (ggml_dts[d], shapes[s][0], shapes[s][1], shapes[s][2], q);
        }
    }
  /* W's f16 form on any device (gguf_to_f16.comp; elsewhere the 16-bit
   * weights' kernel is the scalar one) */
  g_setenv ("HN_QUANT_F16", "1", TRUE);
  for (gsize d = 0; d < G_N_ELEMENTS (ggml_dts); d++)
    {
      gint64 K = hn_ggml_block_size (hn_dtype_ggml_type (ggml_dts[d])) * 2;
      g_autofree guint8 *q = random_blocks (ggml_dts[d], 29, K);
      run_case_q (ggml_dts[d], 37, 29, K, q);
    }
  g_unsetenv ("HN_QUANT_F16");
  /* the reference quantizers pack as llama-quantize does: the kernels read them too */
  static const HnDType packable[] = { HN_DTYPE_GGML_Q4_0, HN_DTYPE_GGML_Q8_0, HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q6_K,
                                      HN_DTYPE_GGML_Q8_K };
  for (gsize d = 0; d < G_N_ELEMENTS (packable); d++)
    run_case (packable[d], 9, 12, 256);
}

/* The embedding lookup of a quantized table: rows dequantized, ids outside
 * the vocabulary give zeros (as for float tables). */
static void
test_gguf_embedding (void)
{
  HnVkContext *ctx = hn_test_ctx ();
  for (gsize d = 0; d < G_N_ELEMENTS (ggml_dts); d++)
    {
      g_autoptr (GError) error = NULL;
      HnDType dt = ggml_dts[d];
      gint64 V = 7, D = hn_ggml_block_size (hn_dtype_ggml_type (dt)) * 2;
      g_autofree guint8 *q = random_blocks (dt, V, D);
      g_autofree float *ref = g_new (float, V * D);
      hn_quant_unpack_rows (dt, q, V, D, 0, V, ref);
      g_autoptr (HnTensor) tt = hn_tensor_new_quant (ctx, "table", dt, V, D, q, &error);
      g_assert_no_error (error);
      gint32 ids[5] = { 3, 0, 6, -1, 7 };
      g_autoptr (HnTensor) ti = hn_test_tensor_i32 (1, (gint64[]) { 5 }, ids);
      g_autoptr (HnTensor) to = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 5, D });
      g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
      g_assert_true (hn_op_embedding (cmd, to, tt, ti, &error));
      g_assert_no_error (error);
      hn_test_run (cmd);
      g_autofree float *o = hn_test_download (to);
      g_autofree float *want = g_new0 (float, 5 * D);
      for (int r = 0; r < 3; r++)
        memcpy (want + r * D, ref + ids[r] * D, sizeof (float) * D);
      g_autofree char *what = g_strdup_printf ("embedding %s", hn_dtype_name (dt));
      hn_test_assert_close (what, o, want, 5 * D, 1e-6, 1e-7);
    }
}

/* A quantized weight is only for hn_op_matmul / bmm: views, the decode
 * kernels and f32 transfers refuse it by name. */
static void
test_fails_closed (void)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  float w[64 * 3] = { 0 };
  guint8 q[512];
  g_assert_cmpuint (hn_quant_nbytes (HN_DTYPE_NF4, 3, 64), <=, sizeof q);
  hn_quant_pack (HN_DTYPE_NF4, w, HN_DTYPE_F32, 3, 64, q);
  g_autoptr (HnTensor) tw = hn_tensor_new_quant (ctx, "frozen", HN_DTYPE_NF4, 3, 64, q, &error);
  g_assert_no_error (error);
  g_assert_null (hn_tensor_view_rows (tw, 0, 1, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  float out[192];
  g_assert_false (hn_tensor_download_f32 (tw, out, 192, &error));
  g_assert_nonnull (strstr (error->message, "frozen"));
  g_clear_error (&error);
  g_autoptr (HnTensor) x = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 1, 64 });
  g_autoptr (HnTensor) y = hn_test_empty (HN_DTYPE_F32, 2, (gint64[]) { 1, 3 });
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  if (hn_op_matvec_available (cmd, 1))
    {
      g_assert_false (hn_op_matvec_add (cmd, y, x, tw, NULL, 1.0f, &error));
      g_assert_nonnull (strstr (error->message, "nf4"));
    }
}

/* The same for GGUF blocks: matmul_gguf_cm2.comp's 128x128 and 128x256
 * tiles (W's tiles dequantized into shared memory), the same through W's f16
 * form (HN_QUANT_F16=1: gguf_to_f16.comp, then the 16-bit weights' kernel),
 * and the per-element decode functions. */
static void
test_gguf_tensor_core_tiles (void)
{
  HnVkContext *ctx = hn_test_ctx ();
  if (!hn_quant_matmul_tensor_cores (ctx, HN_DTYPE_GGML_Q4_K, 2048, 256, 0))
    {
      g_test_skip ("no tensor-core GGUF matmul on this device");
      return;
    }
  g_autofree guint8 *q4k = random_blocks (HN_DTYPE_GGML_Q4_K, 1024, 256);
  g_autofree guint8 *q80 = random_blocks (HN_DTYPE_GGML_Q8_0, 4096, 64);
  for (int f16 = 0; f16 < 2; f16++)
    {
      g_setenv ("HN_QUANT_F16", f16 ? "1" : "0", TRUE);
      run_case_q (HN_DTYPE_GGML_Q4_K, 2048, 1024, 256, q4k);
      run_case_q (HN_DTYPE_GGML_Q8_0, 2048, 4096, 64, q80);
    }
  /* the forward through the per-element decode functions (the input
   * gradient always takes them) */
  g_unsetenv ("HN_QUANT_F16");
  g_setenv ("HN_GGUF_CM2_SHB", "0", TRUE);
  static const HnDType dts[] = { HN_DTYPE_GGML_Q4_K, HN_DTYPE_GGML_Q6_K, HN_DTYPE_GGML_Q5_1, HN_DTYPE_GGML_Q8_K };
  for (gsize d = 0; d < G_N_ELEMENTS (dts); d++)
    {
      g_autofree guint8 *q = random_blocks (dts[d], 70, 512);
      run_case_q (dts[d], 65, 70, 512, q);
    }
  g_unsetenv ("HN_GGUF_CM2_SHB");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/quant/nf4-hand", test_nf4_hand);
  g_test_add_func ("/quant/int8-hand", test_int8_hand);
  g_test_add_func ("/quant/double-quant", test_double_quant);
  g_test_add_func ("/quant/pack-threads", test_pack_threads);
  g_test_add_func ("/quant/matmul", test_matmul);
  g_test_add_func ("/quant/matmul-tensor-core-tiles", test_matmul_tensor_core_tiles);
  g_test_add_func ("/quant/to-f16", test_to_f16);
  g_test_add_func ("/quant/matmul-f16-form", test_matmul_f16_form);
  g_test_add_func ("/quant/fails-closed", test_fails_closed);
  g_test_add_func ("/quant/gguf-matvec", test_gguf_matvec);
  g_test_add_func ("/quant/gguf-to-f16", test_gguf_to_f16);
  g_test_add_func ("/quant/gguf-matmul", test_gguf_matmul);
  g_test_add_func ("/quant/gguf-embedding", test_gguf_embedding);
  g_test_add_func ("/quant/gguf-tensor-core-tiles", test_gguf_tensor_core_tiles);
  int rc = g_test_run ();
  hn_test_free_ctx ();
  return rc;
}
