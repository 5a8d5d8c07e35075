/* Weights stay in their stored dtype: a bf16 (and an f16) copy of a fixture
 * gives the logits of an f32 model holding the same rounded values, with
 * half the weight bytes on the device. */
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "transformer/transformer.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;

/* Writes `src`'s tensors into dir/model.safetensors: as `dtype` (F16/BF16), or
 * as F32 holding the values rounded through `dtype` when as_f32. */
static void
write_copy (const char *src, const char *dir, HnStDtype dtype, gboolean as_f32)
{
  GError *error = NULL;
  g_autoptr (HnSafetensors) st = hn_safetensors_open (src, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      g_autofree float *f = hn_safetensor_info_dup_f32 (t, &error);
      g_assert_no_error (error);
      gsize n = (gsize) t->n_elements;
      if (as_f32)
        {
          for (gsize j = 0; j < n; j++)
            f[j] = dtype == HN_ST_DTYPE_BF16 ? hn_st_bf16_to_f32 (hn_st_f32_to_bf16 (f[j]))
                                             : hn_st_f16_to_f32 (hn_st_f32_to_f16 (f[j]));
          g_assert_true (hn_safetensors_writer_add (w, t->name, HN_ST_DTYPE_F32, t->ndim, t->shape, f,
                                                    n * sizeof (float), TRUE, &error));
        }
      else
        {
          g_autofree guint16 *h = g_new (guint16, n);
          for (gsize j = 0; j < n; j++)
            h[j] = dtype == HN_ST_DTYPE_BF16 ? hn_st_f32_to_bf16 (f[j]) : hn_st_f32_to_f16 (f[j]);
          g_assert_true (hn_safetensors_writer_add (w, t->name, dtype, t->ndim, t->shape, h, n * 2, TRUE, &error));
        }
      g_assert_no_error (error);
    }
  g_autofree char *out = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, out, &error));
  g_assert_no_error (error);
  g_autofree char *cfg_src = g_build_filename (src, "config.json", NULL);
  g_autofree char *cfg_dst = g_build_filename (dir, "config.json", NULL);
  g_autofree char *text = NULL;
  gsize len;
  g_assert_true (g_file_get_contents (cfg_src, &text, &len, &error));
  g_assert_true (g_file_set_contents (cfg_dst, text, (gssize) len, &error));
}

static void
rm_dir (const char *dir)
{
  g_autofree char *a = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *b = g_build_filename (dir, "config.json", NULL);
  g_unlink (a);
  g_unlink (b);
  g_rmdir (dir);
}

static void
check_dtype (const char *fixture, HnStDtype dtype)
{
  g_autofree char *src = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", fixture, NULL);
  g_autofree char *d16 = g_dir_make_tmp ("hn-w16-XXXXXX", NULL);
  g_autofree char *d32 = g_dir_make_tmp ("hn-w32-XXXXXX", NULL);
  write_copy (src, d16, dtype, FALSE);
  write_copy (src, d32, dtype, TRUE);
  GError *error = NULL;
  g_autoptr (HnTransformer) m16 = hn_transformer_load (ctx, d16, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m32 = hn_transformer_load (ctx, d32, &error);
  g_assert_no_error (error);
  /* matrices are half the size; vectors (norms, biases) are f32 in both */
  g_assert_cmpuint (hn_transformer_get_weight_bytes (m16), <, hn_transformer_get_weight_bytes (m32) * 6 / 10);
  g_assert_cmpint (hn_transformer_get_weights (m16)->tok_embed->dtype, ==,
                   dtype == HN_ST_DTYPE_BF16 ? HN_DTYPE_BF16 : HN_DTYPE_F16);
  int V = hn_transformer_get_hparams (m16)->vocab;
  int32_t ids[] = { 47, 50, 120, 67, 70, 126, 70 };
  int n = G_N_ELEMENTS (ids);
  g_autofree float *a = g_new (float, (gsize) n * V);
  g_autofree float *b = g_new (float, (gsize) n * V);
  g_assert_true (hn_transformer_logits (m16, ids, n, a, &error));
  g_assert_true (hn_transformer_logits (m32, ids, n, b, &error));
  g_assert_no_error (error);
  for (int i = 0; i < n * V; i++)
    g_assert_cmpfloat (fabsf (a[i] - b[i]), <=, 1e-4f + 1e-4f * fabsf (b[i]));
  rm_dir (d16);
  rm_dir (d32);
}

static void
test_bf16 (void)
{
  check_dtype ("llama", HN_ST_DTYPE_BF16);
  check_dtype ("gpt2", HN_ST_DTYPE_BF16); /* Conv1D transposes and the fused c_attn split in bf16 */
}

static void
test_f16 (void)
{
  check_dtype ("phi3", HN_ST_DTYPE_F16); /* fused qkv / gate_up rows in f16 */
  check_dtype ("gpt_neox", HN_ST_DTYPE_F16);
}

/* Prefill rows (more than 8: the GEMMs, not the matrix-vector kernels) of a bf16 llama: where
 * the pre-norms and the gate's activation are written f16 for the cooperative-matrix-2 GEMMs
 * (hn_op_matmul_takes_f16) the logits are those of the f16 copies made from f32 activations
 * (HN_NO_F16_ACTS=1), bit for bit; with gate, up and the activation in one pass
 * (hn_op_matmul_glu) within 2e-3 of them; and within the tensor-core tolerance of the f32
 * model of the same rounded weights. */
static void
test_prefill_f16_acts (void)
{
  g_autofree char *src = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "llama", NULL);
  g_autofree char *d16 = g_dir_make_tmp ("hn-w16-XXXXXX", NULL);
  g_autofree char *d32 = g_dir_make_tmp ("hn-w32-XXXXXX", NULL);
  write_copy (src, d16, HN_ST_DTYPE_BF16, FALSE);
  write_copy (src, d32, HN_ST_DTYPE_BF16, TRUE);
  GError *error = NULL;
  g_autoptr (HnTransformer) m16 = hn_transformer_load (ctx, d16, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m32 = hn_transformer_load (ctx, d32, &error);
  g_assert_no_error (error);
  int V = hn_transformer_get_hparams (m16)->vocab;
  enum { n = 40 };
  int32_t ids[n];
  for (int i = 0; i < n; i++)
    ids[i] = (i * 37 + 11) % V;
  g_autofree float *a = g_new (float, (gsize) n * V);
  g_autofree float *b = g_new (float, (gsize) n * V);
  g_autofree float *c = g_new (float, (gsize) n * V), *d = g_new (float, (gsize) n * V);
  g_assert_true (hn_transformer_logits (m16, ids, n, a, &error));
  g_setenv ("HN_NO_F16_ACTS", "1", TRUE);
  g_assert_true (hn_transformer_logits (m16, ids, n, b, &error));
  g_unsetenv ("HN_NO_F16_ACTS");
  g_setenv ("HN_NO_CM2_GLU", "1", TRUE); /* f16 activations, gate/up and glu apart */
  g_assert_true (hn_transformer_logits (m16, ids, n, d, &error));
  g_unsetenv ("HN_NO_CM2_GLU");
  g_assert_true (hn_transformer_logits (m32, ids, n, c, &error));
  g_assert_no_error (error);
  g_assert_cmpint (memcmp (d, b, sizeof (float) * n * V), ==, 0);
  /* gate, up and glu in one pass (hn_op_matmul_glu): the same sums, another order at most */
  for (int i = 0; i < n * V; i++)
    g_assert_cmpfloat (fabsf (a[i] - b[i]), <=, 2e-3f * (1.0f + fabsf (b[i])));
  /* f16 operands (the tensor cores) against f32 ones: the fixture's logits are O(1) */
  double worst = 0;
  for (int i = 0; i < n * V; i++)
    worst = MAX (worst, fabs ((double) a[i] - c[i]) / (1.0 + fabs ((double) c[i])));
  g_assert_cmpfloat (worst, <=, 2e-2);
  rm_dir (d16);
  rm_dir (d32);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  GError *error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      return 1;
    }
  g_test_add_func ("/transformer/dtypes/bf16", test_bf16);
  g_test_add_func ("/transformer/dtypes/f16", test_f16);
  g_test_add_func ("/transformer/dtypes/prefill-f16-acts", test_prefill_f16_acts);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
