/* The Vulkan core: device report, memory (sub-allocation, accounting, limits),
 * recording (hazard barriers, profiling), pipeline cache, descriptor paths. */
#include "ops-test-common.h"
#include "vk/hn-vk.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static void
test_devices (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = hn_vk_list_devices (&error);
  g_assert_no_error (error);
  g_assert_cmpuint (list->len, >, 0);
  for (guint i = 0; i < list->len; i++)
    {
      const HnVkDeviceInfo *d = list->pdata[i];
      g_assert_cmpint (d->index, ==, (int) i);
      g_assert_nonnull (d->name);
      g_assert_cmpuint (d->subgroup_size, >, 0);
      g_assert_cmpuint (d->max_storage_buffer_range, >, 0);
      g_assert_cmpuint (strlen (d->uuid), ==, 36);
      g_autoptr(JsonNode) node = hn_vk_device_info_to_json (d);
      JsonObject *o = json_node_get_object (node);
      g_assert_cmpstr (json_object_get_string_member (o, "name"), ==, d->name);
      g_assert_true (json_object_has_member (o, "cooperative_matrix_shapes"));
      g_assert_cmpint (json_object_get_int_member (o, "max_storage_buffer_range"), ==, (gint64) d->max_storage_buffer_range);
    }
  g_autofree char *loader = hn_vk_loader_version ();
  g_assert_nonnull (loader);
}

static void
test_select (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) list = hn_vk_list_devices (&error);
  g_assert_no_error (error);
  const HnVkDeviceInfo *d0 = list->pdata[0];
  /* by index, by UUID, by name substring (case-insensitive) */
  g_autoptr(HnVkContext) a = hn_vk_context_new (0, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_vk_context_get_device_info (a)->uuid, ==, d0->uuid);
  g_autoptr(HnVkContext) b = hn_vk_context_new_for_selector (d0->uuid, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_vk_context_get_device_info (b)->index, ==, 0);
  g_autofree char *upper = g_ascii_strup (d0->name, 5);
  g_autoptr(HnVkContext) c = hn_vk_context_new_for_selector (upper, &error);
  g_assert_no_error (error);
  g_assert_nonnull (c);
  /* a bad selector is a clear error */
  g_autoptr(HnVkContext) none = hn_vk_context_new_for_selector ("no-such-gpu-xyz", &error);
  g_assert_null (none);
  g_assert_error (error, HN_ERROR, HN_ERROR_NO_DEVICE);
  g_assert_nonnull (strstr (error->message, "no-such-gpu-xyz"));
  g_clear_error (&error);
  g_autoptr(HnVkContext) none2 = hn_vk_context_new (999, &error);
  g_assert_null (none2);
  g_assert_error (error, HN_ERROR, HN_ERROR_NO_DEVICE);
}

static void
test_default_context (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *a = hn_vk_context_get_default (&error);
  g_assert_no_error (error);
  HnVkContext *b = hn_vk_context_get_default (&error);
  g_assert_true (a == b);
  hn_vk_context_unref (a);
  hn_vk_context_unref (b);
  /* recreated after the last reference went */
  g_autoptr(HnVkContext) c = hn_vk_context_get_default (&error);
  g_assert_no_error (error);
  g_assert_nonnull (c);
}

static void
test_memory (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnVkContext) ctx = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  HnVkMemoryStats st0, st1, st2;
  hn_vk_context_get_memory_stats (ctx, &st0);
  g_assert_cmpuint (st0.allocated_bytes, ==, 0);

  /* Many small tensors share one block. */
  HnTensor *ts[50];
  for (int i = 0; i < 50; i++)
    {
      ts[i] = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 1000 + i, &error);
      g_assert_no_error (error);
    }
  hn_vk_context_get_memory_stats (ctx, &st1);
  g_assert_cmpuint (st1.n_blocks, ==, 1);
  g_assert_cmpuint (st1.n_allocations, ==, 50);
  g_assert_cmpuint (st1.allocated_bytes, >=, 50 * 4000);
  g_assert_cmpuint (st1.peak_allocated_bytes, ==, st1.allocated_bytes);

  /* Distinct tensors hold distinct data. */
  for (int i = 0; i < 50; i += 7)
    {
      g_autofree float *v = g_new (float, ts[i]->n);
      for (gint64 j = 0; j < ts[i]->n; j++)
        v[j] = (float) (i * 10000 + j);
      g_assert_true (hn_tensor_upload_f32 (ts[i], v, ts[i]->n, &error));
    }
  for (int i = 0; i < 50; i += 7)
    {
      g_autofree float *v = hn_test_download (ts[i]);
      for (gint64 j = 0; j < ts[i]->n; j++)
        g_assert_cmpfloat (v[j], ==, (float) (i * 10000 + j));
    }
  for (int i = 0; i < 50; i++)
    hn_tensor_unref (ts[i]);
  hn_vk_context_get_memory_stats (ctx, &st2);
  g_assert_cmpuint (st2.allocated_bytes, ==, 0);
  g_assert_cmpuint (st2.peak_allocated_bytes, ==, st1.peak_allocated_bytes);
  hn_vk_context_reset_peak (ctx);
  hn_vk_context_get_memory_stats (ctx, &st2);
  g_assert_cmpuint (st2.peak_allocated_bytes, ==, 0);

  /* Freed space is reused (first fit with coalescing). */
  HnTensor *a = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 100000, &error);
  g_assert_no_error (error);
  hn_tensor_unref (a);
  HnTensor *b = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 100000, &error);
  g_assert_no_error (error);
  hn_vk_context_get_memory_stats (ctx, &st2);
  g_assert_cmpuint (st2.n_blocks, ==, 1);
  hn_tensor_unref (b);

  /* A tensor above one binding fails closed. */
  guint64 maxb = hn_vk_context_max_buffer_size (ctx);
  g_autoptr(HnTensor) huge = hn_tensor_new_1d (ctx, HN_DTYPE_F32, (gint64) (maxb / 4 + 1024), &error);
  g_assert_null (huge);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "split"));
  g_clear_error (&error);

  /* Out of device memory is a readable error naming the tensor and size. */
  hn_vk_context_set_memory_limit (ctx, 1 << 20);
  g_autoptr(HnTensor) big = hn_tensor_new_named (ctx, "big-activation", HN_DTYPE_F32, 1, (gint64[]) { 4 << 20 }, &error);
  g_assert_null (big);
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_assert_nonnull (strstr (error->message, "big-activation"));
  g_assert_nonnull (strstr (error->message, "16777216"));
  g_clear_error (&error);
  hn_vk_context_set_memory_limit (ctx, 0);

  /* Bad shapes are refused. */
  g_autoptr(HnTensor) bad = hn_tensor_new (ctx, HN_DTYPE_F32, 2, (gint64[]) { 3, 0 }, &error);
  g_assert_null (bad);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static void
test_views_and_conversions (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autofree float *data = hn_test_random (6 * 5, -3, 3);
  g_autoptr(HnTensor) t = hn_test_tensor (HN_DTYPE_F32, 2, (gint64[]) { 6, 5 }, data);
  g_autoptr(HnTensor) v = hn_tensor_view_rows (t, 2, 3, &error);
  g_assert_no_error (error);
  g_assert_cmpint (v->shape[0], ==, 3);
  g_autofree float *vd = hn_test_download (v);
  for (int i = 0; i < 15; i++)
    g_assert_cmpfloat (vd[i], ==, data[10 + i]);
  g_autoptr(HnTensor) r = hn_tensor_reshape (t, 3, (gint64[]) { 3, 2, 5 }, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_tensor_rows (r), ==, 6);
  g_autoptr(HnTensor) bad = hn_tensor_reshape (t, 2, (gint64[]) { 7, 5 }, &error);
  g_assert_null (bad);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_autoptr(HnTensor) badv = hn_tensor_view_rows (t, 5, 2, &error);
  g_assert_null (badv);
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* host conversions: exact values and rounding */
  g_assert_cmpfloat (hn_f16_to_f32 (hn_f32_to_f16 (1.0f)), ==, 1.0f);
  g_assert_cmpfloat (hn_f16_to_f32 (hn_f32_to_f16 (65504.0f)), ==, 65504.0f);
  g_assert_cmpuint (hn_f32_to_f16 (1e6f), ==, 0x7c00);
  g_assert_cmpfloat (hn_f16_to_f32 (0x0001), ==, 5.9604644775390625e-08f);
  g_assert_cmpuint (hn_f32_to_f16 (5.9604644775390625e-08f), ==, 1);
  g_assert_cmpuint (hn_f32_to_f16 (-2.0f), ==, 0xc000);
  g_assert_cmpuint (hn_f32_to_f16 (1.0f + 1.0f / 2048), ==, 0x3c00);  /* tie to even */
  g_assert_cmpuint (hn_f32_to_f16 (1.0f + 3.0f / 2048), ==, 0x3c02);
  g_assert_cmpuint (hn_f32_to_bf16 (1.0f), ==, 0x3f80);
  g_assert_cmpuint (hn_f32_to_bf16 (1.0f + 1.0f / 256), ==, 0x3f80);  /* tie to even */
  g_assert_cmpuint (hn_f32_to_bf16 (1.0f + 3.0f / 256), ==, 0x3f82);
  g_assert_cmpfloat (hn_bf16_to_f32 (0xc040), ==, -3.0f);
  for (int i = 0; i < 1000; i++)
    {
      float f = (float) g_test_rand_double_range (-100, 100);
      g_assert_cmpfloat (fabsf (hn_f16_to_f32 (hn_f32_to_f16 (f)) - f), <=, fabsf (f) / 2048 + 1e-7f);
      g_assert_cmpfloat (fabsf (hn_bf16_to_f32 (hn_f32_to_bf16 (f)) - f), <=, fabsf (f) / 256);
    }

  /* 16-bit tensors round-trip through upload/download */
  g_autofree float *h = hn_test_random (33, -2, 2);
  g_autoptr(HnTensor) th = hn_test_tensor (HN_DTYPE_BF16, 1, (gint64[]) { 33 }, h);
  g_autofree float *hd = hn_test_download (th);
  for (int i = 0; i < 33; i++)
    g_assert_cmpfloat (hd[i], ==, h[i]);
  (void) ctx;
}

static void
test_barriers (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  g_autoptr(HnTensor) a = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 1000 });
  g_autoptr(HnTensor) b = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 1000 });
  g_autoptr(HnTensor) c = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 1000 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  /* independent writes: no barrier */
  g_assert_true (hn_op_fill (cmd, a, 1.0f, &error));
  g_assert_true (hn_op_fill (cmd, b, 2.0f, &error));
  g_assert_cmpuint (hn_cmd_get_n_barriers (cmd), ==, 0);
  /* c = a + b reads what was written: one barrier */
  g_assert_true (hn_op_add (cmd, c, a, b, &error));
  g_assert_cmpuint (hn_cmd_get_n_barriers (cmd), ==, 1);
  /* a = 3 writes what c's op read (WAR): a barrier */
  g_assert_true (hn_op_fill (cmd, a, 3.0f, &error));
  g_assert_cmpuint (hn_cmd_get_n_barriers (cmd), ==, 2);
  /* b = b * 2 in place after a barrier-free span: b was only read since */
  g_assert_true (hn_op_scale (cmd, b, b, 2.0f, 0.0f, &error));
  g_assert_cmpuint (hn_cmd_get_n_barriers (cmd), ==, 2);
  g_assert_cmpuint (hn_cmd_get_n_dispatches (cmd), ==, 5);
  /* disjoint row views of one tensor do not conflict */
  g_autoptr(HnTensor) top = hn_tensor_view_rows (c, 0, 500, &error);
  g_autoptr(HnTensor) bottom = hn_tensor_view_rows (c, 500, 500, &error);
  hn_test_run (cmd);
  g_assert_true (hn_op_fill (cmd, top, 5.0f, &error));
  g_assert_true (hn_op_fill (cmd, bottom, 6.0f, &error));
  g_assert_cmpuint (hn_cmd_get_n_barriers (cmd), ==, 0);
  hn_test_run (cmd);
  g_assert_no_error (error);
  g_autofree float *va = hn_test_download (a), *vb = hn_test_download (b), *vc = hn_test_download (c);
  g_assert_cmpfloat (va[999], ==, 3.0f);
  g_assert_cmpfloat (vb[0], ==, 4.0f);
  g_assert_cmpfloat (vc[0], ==, 5.0f);
  g_assert_cmpfloat (vc[999], ==, 6.0f);

  /* a long dependent chain is correct */
  for (int i = 0; i < 100; i++)
    g_assert_true (hn_op_scale (cmd, a, a, 1.0f, 1.0f, &error));
  hn_test_run (cmd);
  g_autofree float *va2 = hn_test_download (a);
  g_assert_cmpfloat (va2[123], ==, 103.0f);
  /* submitting an empty recorder is fine */
  hn_test_run (cmd);
}

static void
test_profiling (void)
{
  g_autoptr(GError) error = NULL;
  HnVkContext *ctx = hn_test_ctx ();
  if (!hn_vk_context_get_device_info (ctx)->timestamps)
    {
      g_test_skip ("device has no timestamps");
      return;
    }
  g_autoptr(HnTensor) a = hn_test_empty (HN_DTYPE_F32, 1, (gint64[]) { 4096 });
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  hn_cmd_set_profiling (cmd, TRUE);
  g_assert_true (hn_op_fill (cmd, a, 1.0f, &error));
  g_assert_true (hn_op_unary (cmd, a, a, HN_ACT_SILU, &error));
  hn_test_run (cmd);
  guint n = 0;
  const HnCmdProfileEntry *e = hn_cmd_get_profile (cmd, &n);
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpstr (e[0].name, ==, "fill");
  g_assert_cmpstr (e[1].name, ==, "silu");
  g_assert_cmpfloat (e[0].microseconds, >=, 0.0);
}

static void
test_pipeline_cache (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnVkContext) ctx = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  g_autoptr(HnTensor) a = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 10, &error);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_fill (cmd, a, 1.0f, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_assert_true (hn_vk_context_save_pipeline_cache (ctx, &error));
  g_assert_no_error (error);
  g_autofree char *dir = g_build_filename (g_get_user_cache_dir (), "hierarchos-native", "pipelines", NULL);
  g_autoptr(GDir) d = g_dir_open (dir, 0, &error);
  g_assert_no_error (error);
  gboolean found = FALSE;
  for (const char *name; (name = g_dir_read_name (d));)
    if (g_str_has_suffix (name, ".bin"))
      found = TRUE;
  g_assert_true (found);

  /* unknown shader: fails closed */
  HnVkBinding bd = { a->buf, 0, 0, TRUE };
  g_assert_false (hn_cmd_dispatch (cmd, "no_such_shader", NULL, 0, &bd, 1, NULL, 0, 1, 1, 1, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
}

/* A context of its own, with push descriptors (when the device has them) or descriptor pools. */
static HnVkContext *
context_with (gboolean push)
{
  g_autoptr(GError) error = NULL;
  if (!push)
    g_setenv ("HN_VK_NO_PUSH_DESCRIPTOR", "1", TRUE);
  HnVkContext *ctx = hn_vk_context_new (-1, &error);
  g_unsetenv ("HN_VK_NO_PUSH_DESCRIPTOR");
  g_assert_no_error (error);
  return ctx;
}

static void
test_descriptor_pool_path (void)
{
  /* Without push descriptors the per-recording descriptor pool is used. */
  g_autoptr(GError) error = NULL;
  g_autoptr(HnVkContext) ctx = context_with (FALSE);
  g_autoptr(HnTensor) a = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 300, &error);
  g_autoptr(HnTensor) b = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 300, &error);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  for (int round = 0; round < 3; round++)
    {
      g_assert_true (hn_op_fill (cmd, a, 2.0f, &error));
      for (int i = 0; i < 20; i++)
        g_assert_true (hn_op_scale (cmd, b, a, 1.5f, (float) i, &error));
      g_assert_true (hn_cmd_submit_wait (cmd, &error));
      g_assert_no_error (error);
    }
  float v[300];
  g_assert_true (hn_tensor_download_f32 (b, v, 300, &error));
  g_assert_cmpfloat (v[299], ==, 2.0f * 1.5f + 19.0f);
  /* more dispatches in one submit than one descriptor pool holds, twice */
  for (int round = 0; round < 2; round++)
    {
      g_assert_true (hn_op_fill (cmd, a, 0.0f, &error));
      for (int i = 0; i < 1100; i++)
        g_assert_true (hn_op_scale (cmd, a, a, 1.0f, 1.0f, &error));
      g_assert_no_error (error);
      g_assert_true (hn_cmd_submit_wait (cmd, &error));
      g_assert_no_error (error);
      g_assert_true (hn_tensor_download_f32 (a, v, 300, &error));
      g_assert_cmpfloat (v[7], ==, 1100.0f);
    }
}

/* hn_cmd_flush: parts of one recording submitted as recorded; the whole
 * runs in order (a dependent chain across the flushes), the profile covers
 * it, a reset waits for the flushed part (which has run), and freeing a
 * recorder with flushed work waits for it. push: push descriptors or pools. */
static void
test_flush (gconstpointer push)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(HnVkContext) ctx = context_with (GPOINTER_TO_INT (push));
  g_autoptr(HnTensor) a = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 300, &error);
  g_autoptr(HnTensor) b = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 300, &error);
  g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_no_error (error);
  gboolean timed = hn_vk_context_get_device_info (ctx)->timestamps;
  hn_cmd_set_profiling (cmd, TRUE);
  float v[300];
  for (int round = 0; round < 2; round++)
    {
      g_assert_true (hn_op_fill (cmd, a, 0.0f, &error));
      for (int i = 0; i < 1100; i++)
        {
          g_assert_true (hn_op_scale (cmd, a, a, 1.0f, 1.0f, &error));
          if (i % 97 == 3)
            g_assert_true (hn_cmd_flush (cmd, &error));
        }
      g_assert_true (hn_op_copy (cmd, b, a, &error));
      g_assert_true (hn_cmd_submit_wait (cmd, &error));
      g_assert_no_error (error);
      g_assert_true (hn_tensor_download_f32 (b, v, 300, &error));
      g_assert_cmpfloat (v[299], ==, 1100.0f);
      guint n = 0;
      hn_cmd_get_profile (cmd, &n);
      g_assert_cmpuint (n, ==, timed ? 1102 : 0);
    }
  hn_cmd_set_profiling (cmd, FALSE);
  /* flushing an empty recorder does nothing */
  g_assert_true (hn_cmd_flush (cmd, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  /* reset: the flushed fill ran, the rest did not */
  g_assert_true (hn_op_fill (cmd, b, 5.0f, &error));
  g_assert_true (hn_cmd_flush (cmd, &error));
  g_assert_true (hn_op_fill (cmd, b, 6.0f, &error));
  hn_cmd_reset (cmd);
  g_assert_true (hn_tensor_download_f32 (b, v, 300, &error));
  g_assert_cmpfloat (v[0], ==, 5.0f);
  /* the recorder records and runs again after the reset */
  g_assert_true (hn_op_fill (cmd, b, 7.0f, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_assert_true (hn_tensor_download_f32 (b, v, 300, &error));
  g_assert_cmpfloat (v[0], ==, 7.0f);
  /* freed with flushed work in flight */
  HnCmd *c2 = hn_cmd_new (ctx, &error);
  g_assert_true (hn_op_fill (c2, a, 9.0f, &error));
  g_assert_true (hn_cmd_flush (c2, &error));
  g_assert_true (hn_op_fill (c2, b, 9.0f, &error));
  hn_cmd_free (c2);
  g_assert_true (hn_tensor_download_f32 (a, v, 300, &error));
  g_assert_cmpfloat (v[0], ==, 9.0f);
  g_assert_no_error (error);
}

/* hn_vk_coopmat2_product_ok against a device that lists 128 and 256
 * invocations with the H100's granularities ([32, 32, 16] on 256) */
static void
test_coopmat2_product_ok (void)
{
  HnVkDeviceInfo info = { 0 };
  info.nv2_invocations_listed = (128 / 32) | (256 / 32);
  guint32 g128[3] = { 16, 32, 16 }, g256[3] = { 32, 32, 16 };
  memcpy (info.nv2_granularity[2], g128, sizeof g128);
  memcpy (info.nv2_granularity[3], g256, sizeof g256);
  g_assert_true (hn_vk_coopmat2_product_ok (&info, 256, 64, 64, 64));
  g_assert_true (hn_vk_coopmat2_product_ok (&info, 256, 64, 96, 64));
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 256, 64, 80, 64));  /* N 80: not a multiple of 32 */
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 256, 48, 64, 64));
  g_assert_true (hn_vk_coopmat2_product_ok (&info, 128, 48, 64, 16));
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 128, 48, 64, 8));
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 64, 64, 64, 64));   /* not listed */
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 96, 64, 64, 64));   /* not a power of two */
  g_assert_false (hn_vk_coopmat2_product_ok (&info, 256, 0, 64, 64));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/vk/devices", test_devices);
  g_test_add_func ("/vk/coopmat2-product-ok", test_coopmat2_product_ok);
  g_test_add_func ("/vk/select", test_select);
  g_test_add_func ("/vk/default-context", test_default_context);
  g_test_add_func ("/vk/memory", test_memory);
  g_test_add_func ("/vk/views-conversions", test_views_and_conversions);
  g_test_add_func ("/vk/barriers", test_barriers);
  g_test_add_func ("/vk/profiling", test_profiling);
  g_test_add_func ("/vk/pipeline-cache", test_pipeline_cache);
  g_test_add_func ("/vk/descriptor-pool", test_descriptor_pool_path);
  g_test_add_data_func ("/vk/flush/push-descriptors", GINT_TO_POINTER (1), test_flush);
  g_test_add_data_func ("/vk/flush/descriptor-pools", GINT_TO_POINTER (0), test_flush);
  int r = g_test_run ();
  hn_test_free_ctx ();
  return r;
}
