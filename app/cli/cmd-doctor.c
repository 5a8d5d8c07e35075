/* `doctor [--json]`: is this machine ready? The Vulkan loader, every device
 * with its features, a compute check on the chosen device, the shaders built
 * in (and whether the optional cooperative-matrix ones are), and writable
 * cache folders. Exits 1 with a clear message when no device can compute. */
#include "cli.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "tensor/hn-ops.h"
#include "vk/hn-vk.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <unistd.h>

int hn_cmd_doctor (int argc, char **argv);

static gboolean
dir_writable (const char *dir, GError **error)
{
  if (!hn_mkdir_p (dir, error))
    return FALSE;
  g_autofree char *probe = g_build_filename (dir, ".hn-write-probe-XXXXXX", NULL);
  int fd = g_mkstemp (probe);
  if (fd < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write in %s", dir);
      return FALSE;
    }
  close (fd);
  g_unlink (probe);
  return TRUE;
}

/* Runs a tiny op end to end: allocation, pipeline, dispatch, readback. */
static gboolean
compute_check (HnVkContext *ctx, GError **error)
{
  g_autoptr (HnTensor) x = hn_tensor_new_1d (ctx, HN_DTYPE_F32, 1000, error);
  if (!x)
    return FALSE;
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, error);
  if (!cmd || !hn_op_fill (cmd, x, 2.0f, error) || !hn_op_scale (cmd, x, x, 3.0f, 1.0f, error) ||
      !hn_cmd_submit_wait (cmd, error))
    return FALSE;
  float v[1000];
  if (!hn_tensor_download_f32 (x, v, 1000, error))
    return FALSE;
  for (int i = 0; i < 1000; i++)
    if (v[i] != 7.0f)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_VULKAN, "the device computed %g where 7 was expected (element %d)",
                     v[i], i);
        return FALSE;
      }
  return TRUE;
}

static void
print_device (const HnVkDeviceInfo *d)
{
  printf ("  %d: %s\n", d->index, d->name);
  printf ("     type %s, vendor %s (0x%04x), device 0x%04x, Vulkan %s, driver %s (%s)\n", d->type, d->vendor,
          d->vendor_id, d->device_id, d->api_version, d->driver_name, d->driver_info);
  printf ("     uuid %s\n", d->uuid);
  for (guint h = 0; h < d->n_heaps; h++)
    {
      g_autofree char *sz = g_format_size_full (d->heaps[h].size, G_FORMAT_SIZE_IEC_UNITS);
      printf ("     memory heap %u: %s%s%s\n", h, sz, d->heaps[h].device_local ? ", device-local" : "",
              d->heaps[h].host_visible ? ", host-visible" : "");
    }
  g_autofree char *alloc = g_format_size_full (d->max_allocation_size, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *range = g_format_size_full (d->max_storage_buffer_range, G_FORMAT_SIZE_IEC_UNITS);
  printf ("     subgroup %u (%u-%u, arithmetic %s, size control %s), shared memory %u KiB, workgroup <= %u\n",
          d->subgroup_size, d->min_subgroup_size, d->max_subgroup_size, d->subgroup_arithmetic ? "yes" : "no",
          d->subgroup_size_control ? "yes" : "no", d->max_shared_memory / 1024, d->max_workgroup_invocations);
  printf ("     max allocation %s, max storage buffer %s\n", alloc, range);
  printf ("     fp16 %s, bf16 %s, int8 %s, 16-bit storage %s, 8-bit storage %s, int dot product %s\n",
          d->fp16 ? "yes" : "no", d->bf16 ? "yes" : "no", d->int8 ? "yes" : "no", d->storage16 ? "yes" : "no",
          d->storage8 ? "yes" : "no", d->int_dot_product ? "yes" : "no");
  printf ("     push descriptors %s, timestamps %s\n", d->push_descriptor ? "yes" : "no", d->timestamps ? "yes" : "no");
  printf ("     cooperative matrix: KHR %s, NV %s, NV2 %s\n", d->coopmat_khr ? "yes" : "no", d->coopmat_nv ? "yes" : "no",
          d->coopmat_nv2 ? "yes" : "no");
  for (guint i = 0; d->coopmat_shapes && i < d->coopmat_shapes->len; i++)
    {
      const HnVkCoopmatShape *s = &g_array_index (d->coopmat_shapes, HnVkCoopmatShape, i);
      printf ("       %ux%ux%u %s*%s+%s->%s%s (%s)\n", s->m, s->n, s->k, s->a_type, s->b_type, s->c_type,
              s->result_type, s->saturating ? " saturating" : "", s->scope);
    }
  if (d->nv2_flex_granularity[0])
    printf ("       NV2 flexible dimensions, granularity %ux%ux%u\n", d->nv2_flex_granularity[0],
            d->nv2_flex_granularity[1], d->nv2_flex_granularity[2]);
}

int
hn_cmd_doctor (int argc, char **argv)
{
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("doctor", argc, argv, &status);
  if (!spec)
    return status;
  gboolean json = hn_job_spec_get_bool (spec, "json");
  const char *device = hn_job_spec_get_string (spec, "device");

  g_autofree char *loader = hn_vk_loader_version ();
  g_autoptr (GError) list_error = NULL;
  g_autoptr (GPtrArray) list = hn_vk_list_devices (&list_error);

  g_autoptr (GError) ctx_error = NULL;
  g_autoptr (HnVkContext) ctx = NULL;
  gboolean compute_ok = FALSE;
  if (list)
    {
      ctx = device ? hn_vk_context_new_for_selector (device, &ctx_error) : hn_vk_context_new (-1, &ctx_error);
      if (ctx)
        compute_ok = compute_check (ctx, &ctx_error);
    }

  g_autofree char *cache = hn_user_cache_dir (NULL);
  g_autofree char *pipelines = hn_user_cache_dir ("pipelines");
  g_autoptr (GError) cache_error = NULL, pipe_error = NULL;
  gboolean cache_ok = dir_writable (cache, &cache_error);
  gboolean pipe_ok = dir_writable (pipelines, &pipe_error);
  const char *const *shaders = hn_vk_shader_names ();

  if (json)
    {
      g_autoptr (JsonBuilder) b = json_builder_new ();
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "version");
      json_builder_add_string_value (b, HN_VERSION);
      json_builder_set_member_name (b, "loader");
      if (loader)
        json_builder_add_string_value (b, loader);
      else
        json_builder_add_null_value (b);
      json_builder_set_member_name (b, "devices");
      json_builder_begin_array (b);
      for (guint i = 0; list && i < list->len; i++)
        json_builder_add_value (b, hn_vk_device_info_to_json (list->pdata[i]));
      json_builder_end_array (b);
      if (list_error)
        {
          json_builder_set_member_name (b, "devices_error");
          json_builder_add_string_value (b, list_error->message);
        }
      json_builder_set_member_name (b, "selected");
      if (ctx)
        json_builder_add_int_value (b, hn_vk_context_get_device_info (ctx)->index);
      else
        json_builder_add_null_value (b);
      json_builder_set_member_name (b, "compute_check");
      json_builder_add_string_value (b, compute_ok ? "ok" : ctx_error ? ctx_error->message : "not run");
      json_builder_set_member_name (b, "shaders");
      json_builder_begin_array (b);
      for (const char *const *s = shaders; *s; s++)
        json_builder_add_string_value (b, *s);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "cooperative_matrix_shaders");
      json_builder_add_boolean_value (b, hn_vk_have_coopmat_shaders ());
      json_builder_set_member_name (b, "cooperative_matrix_active");
      json_builder_add_boolean_value (b, ctx && hn_vk_context_has_coopmat (ctx));
      json_builder_set_member_name (b, "cache_dir");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "path");
      json_builder_add_string_value (b, cache);
      json_builder_set_member_name (b, "writable");
      json_builder_add_boolean_value (b, cache_ok);
      json_builder_end_object (b);
      json_builder_set_member_name (b, "pipeline_cache_dir");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "path");
      json_builder_add_string_value (b, pipelines);
      json_builder_set_member_name (b, "writable");
      json_builder_add_boolean_value (b, pipe_ok);
      json_builder_end_object (b);
      json_builder_end_object (b);
      g_autoptr (JsonNode) root = json_builder_get_root (b);
      g_autofree char *s = json_to_string (root, TRUE);
      printf ("%s\n", s);
    }
  else
    {
      printf ("hierarchos-native-cli %s\n", HN_VERSION);
      printf ("Vulkan loader: %s\n", loader ? loader : "not found (install libvulkan1)");
      if (list)
        {
          printf ("Devices (%u):\n", list->len);
          for (guint i = 0; i < list->len; i++)
            print_device (list->pdata[i]);
        }
      if (ctx)
        printf ("Selected device: %d (%s); compute check: %s\n", hn_vk_context_get_device_info (ctx)->index,
                hn_vk_context_get_device_info (ctx)->name, compute_ok ? "ok" : ctx_error->message);
      guint n = 0;
      for (const char *const *s = shaders; *s; s++)
        n++;
      g_autofree char *names = g_strjoinv (" ", (char **) shaders);
      printf ("Shaders built in (%u): %s\n", n, names);
      printf ("Cooperative-matrix shaders: %s; tensor-core matmul on the selected device: %s\n",
              hn_vk_have_coopmat_shaders () ? "built" : "not built (glslang without GL_KHR_cooperative_matrix)",
              ctx && hn_vk_context_has_coopmat (ctx) ? "active" : "inactive");
      printf ("Cache folder: %s (%s)\n", cache, cache_ok ? "writable" : cache_error->message);
      printf ("Pipeline cache: %s (%s)\n", pipelines, pipe_ok ? "writable" : pipe_error->message);
    }

  if (!list)
    {
      fprintf (stderr, "error: %s\n", list_error->message);
      return 1;
    }
  if (!compute_ok)
    {
      fprintf (stderr, "error: the Vulkan device cannot run the engine: %s\n", ctx_error ? ctx_error->message : "unknown");
      return 1;
    }
  if (!cache_ok || !pipe_ok)
    {
      fprintf (stderr, "error: %s\n", (cache_error ? cache_error : pipe_error)->message);
      return 1;
    }
  return 0;
}
