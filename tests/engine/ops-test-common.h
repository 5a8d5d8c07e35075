/* Helpers shared by the vk/op tests: one context per test process, random
 * host data, tensor construction, and comparison against the CPU reference. */
#pragma once
#include "tensor/hn-ops.h"
#include "tensor/hn-cpu-ref.h"
#include "base/hn-error.h"

HnVkContext *hn_test_ctx (void);
void hn_test_free_ctx (void);
/* Uniform random values in [lo, hi) from the g_test random generator. */
float *hn_test_random (gint64 n, double lo, double hi);
/* A new tensor holding `data` (converted to dtype); data is rounded in place
 * to what the tensor stores, so the reference sees the same values. */
HnTensor *hn_test_tensor (HnDType dtype, int ndim, const gint64 *shape, float *data);
HnTensor *hn_test_tensor_i32 (int ndim, const gint64 *shape, const gint32 *data);
HnTensor *hn_test_empty (HnDType dtype, int ndim, const gint64 *shape);
float *hn_test_download (HnTensor *t);
/* Asserts that a and b hold the same bytes (a bit-for-bit comparison of two ways to one
 * result); returns a's bytes (g_free them). */
guint8 *hn_test_same_bytes (HnTensor *a, HnTensor *b);
/* Runs what cmd recorded. */
void hn_test_run (HnCmd *cmd);
/* Asserts |got - want| <= atol + rtol·|want| elementwise, with a message naming what and where. */
void hn_test_assert_close (const char *what, const float *got, const float *want, gint64 n, double rtol, double atol);
/* Largest |x| of an array (for absolute tolerances scaled to the data). */
double hn_test_max_abs (const float *x, gint64 n);
