/* Pipelines (lazy, per shader + specialization constants, in-memory and
 * on-disk cache) and the recorder (HnCmd): dispatches into one command buffer
 * with hazard-tracked barriers and optional timestamps. */
#include "vk-private.h"
#include "base/hn-util.h"

#include <string.h>

#define MAX_BINDINGS 16
#define MAX_SPEC 24

/* ---------------------------------------------------------------- pipelines */

static char *
pipeline_cache_path (HnVkContext *ctx)
{
  g_autofree char *dir = hn_user_cache_dir ("pipelines");
  g_autofree char *file = g_strdup_printf ("%04x-%04x-%08x-%s.bin", ctx->info->vendor_id, ctx->info->device_id,
                                           ctx->info->driver_version, ctx->info->uuid);
  return g_build_filename (dir, file, NULL);
}

void
hn_vk_pipelines_init (HnVkContext *ctx)
{
  ctx->pipelines = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  ctx->modules = g_hash_table_new (g_str_hash, g_str_equal);
  ctx->pipeline_cache_path = pipeline_cache_path (ctx);

  /* Load the on-disk cache; the driver validates its header (vendor, device,
   * pipelineCacheUUID) and ignores a stale one, but a file that is too short
   * or does not begin with the right device is skipped here already. */
  g_autofree char *data = NULL;
  gsize len = 0;
  VkPipelineCacheCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO };
  if (g_file_get_contents (ctx->pipeline_cache_path, &data, &len, NULL) && len >= 32)
    {
      guint32 hdr[4];
      memcpy (hdr, data, sizeof hdr);
      if (hdr[0] >= 32 && hdr[0] <= len && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
          hdr[2] == ctx->info->vendor_id && hdr[3] == ctx->info->device_id)
        {
          pci.initialDataSize = len;
          pci.pInitialData = data;
        }
    }
  if (vkCreatePipelineCache (ctx->device, &pci, NULL, &ctx->pipeline_cache) != VK_SUCCESS)
    {
      pci.initialDataSize = 0;
      pci.pInitialData = NULL;
      if (vkCreatePipelineCache (ctx->device, &pci, NULL, &ctx->pipeline_cache) != VK_SUCCESS)
        ctx->pipeline_cache = VK_NULL_HANDLE;
    }
}

gboolean
hn_vk_context_save_pipeline_cache (HnVkContext *ctx, GError **error)
{
  if (!ctx->pipeline_cache)
    return TRUE;
  g_mutex_lock (&ctx->lock);
  size_t size = 0;
  gboolean ok = HN_VK_OK (vkGetPipelineCacheData (ctx->device, ctx->pipeline_cache, &size, NULL), error);
  g_autofree void *data = NULL;
  if (ok && size > 0)
    {
      data = g_malloc (size);
      ok = HN_VK_OK (vkGetPipelineCacheData (ctx->device, ctx->pipeline_cache, &size, data), error);
    }
  g_mutex_unlock (&ctx->lock);
  if (ok && size > 0)
    ok = hn_write_file_atomic (ctx->pipeline_cache_path, data, size, error);
  return ok;
}

static void
destroy_module (gpointer key, gpointer value, gpointer user_data)
{
  HnVkContext *ctx = user_data;
  vkDestroyShaderModule (ctx->device, (VkShaderModule) value, NULL);
}

void
hn_vk_pipelines_fini (HnVkContext *ctx)
{
  if (ctx->pipelines)
    {
      GHashTableIter it;
      gpointer v;
      g_hash_table_iter_init (&it, ctx->pipelines);
      while (g_hash_table_iter_next (&it, NULL, &v))
        vkDestroyPipeline (ctx->device, ((HnVkPipeline *) v)->pipeline, NULL);
      g_hash_table_unref (ctx->pipelines);
    }
  if (ctx->modules)
    {
      g_hash_table_foreach (ctx->modules, destroy_module, ctx);
      g_hash_table_unref (ctx->modules);
    }
  for (guint i = 0; i < G_N_ELEMENTS (ctx->layouts); i++)
    {
      if (ctx->layouts[i].layout)
        vkDestroyPipelineLayout (ctx->device, ctx->layouts[i].layout, NULL);
      if (ctx->layouts[i].set_layout)
        vkDestroyDescriptorSetLayout (ctx->device, ctx->layouts[i].set_layout, NULL);
    }
  if (ctx->pipeline_cache)
    vkDestroyPipelineCache (ctx->device, ctx->pipeline_cache, NULL);
  g_free (ctx->pipeline_cache_path);
}

HnVkLayout *
hn_vk_get_layout (HnVkContext *ctx, guint n_bindings, GError **error)
{
  HnVkLayout *l = &ctx->layouts[n_bindings];
  if (l->layout)
    return l;
  VkDescriptorSetLayoutBinding b[MAX_BINDINGS];
  for (guint i = 0; i < n_bindings; i++)
    b[i] = (VkDescriptorSetLayoutBinding) {
      .binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1,
      .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT };
  VkDescriptorSetLayoutCreateInfo dci = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
    .flags = ctx->use_push_descriptor ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
    .bindingCount = n_bindings, .pBindings = b };
  if (!HN_VK_OK (vkCreateDescriptorSetLayout (ctx->device, &dci, NULL, &l->set_layout), error))
    return NULL;
  VkPushConstantRange pcr = { .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 128 };
  VkPipelineLayoutCreateInfo lci = {
    .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1, .pSetLayouts = &l->set_layout,
    .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr };
  if (!HN_VK_OK (vkCreatePipelineLayout (ctx->device, &lci, NULL, &l->layout), error))
    {
      vkDestroyDescriptorSetLayout (ctx->device, l->set_layout, NULL);
      l->set_layout = VK_NULL_HANDLE;
      return NULL;
    }
  return l;
}

static const HnShaderBlob *
find_shader (const char *name)
{
  for (const HnShaderBlob *s = hn_shader_table; s->name; s++)
    if (strcmp (s->name, name) == 0)
      return s;
  return NULL;
}

/* Reads the workgroup size the SPIR-V declares: OpExecutionMode LocalSize,
 * or LocalSizeId / a WorkgroupSize builtin made of spec constants (we then
 * take the specialised values). Used to size dispatches. */
static void
reflect_local_size (const HnShaderBlob *blob, const guint32 *spec, guint n_spec, guint32 out[3])
{
  out[0] = out[1] = out[2] = 1;
  const guint32 *w = blob->words;
  size_t n = blob->size / 4;
  /* spec constant id -> default value, by result id */
  GHashTable *spec_ids = g_hash_table_new (NULL, NULL);     /* result id -> SpecId */
  GHashTable *spec_defaults = g_hash_table_new (NULL, NULL); /* result id -> default */
  guint32 wg_builtin_id = 0;
  GHashTable *builtin_ids = g_hash_table_new (NULL, NULL);
  for (size_t i = 5; i < n;)
    {
      guint32 op = w[i] & 0xffff, len = w[i] >> 16;
      if (len == 0 || i + len > n)
        break;
      if (op == 16 && len >= 6 && w[i + 2] == 17) /* OpExecutionMode LocalSize */
        {
          out[0] = w[i + 3]; out[1] = w[i + 4]; out[2] = w[i + 5];
        }
      else if (op == 71 && len >= 4 && w[i + 2] == 1) /* OpDecorate SpecId */
        g_hash_table_insert (spec_ids, GUINT_TO_POINTER (w[i + 1]), GUINT_TO_POINTER (w[i + 3] + 1));
      else if (op == 71 && len >= 4 && w[i + 2] == 11 && w[i + 3] == 25) /* BuiltIn WorkgroupSize */
        wg_builtin_id = w[i + 1];
      else if (op == 50 && len >= 4) /* OpSpecConstant */
        g_hash_table_insert (spec_defaults, GUINT_TO_POINTER (w[i + 2]), GUINT_TO_POINTER (w[i + 3]));
      else if (op == 51 && len >= 6) /* OpSpecConstantComposite */
        g_hash_table_insert (builtin_ids, GUINT_TO_POINTER (w[i + 2]), (gpointer) &w[i + 3]);
      i += len;
    }
  if (wg_builtin_id)
    {
      const guint32 *c = g_hash_table_lookup (builtin_ids, GUINT_TO_POINTER (wg_builtin_id));
      if (c)
        {
          for (int k = 0; k < 3; k++)
            {
              guint32 val = GPOINTER_TO_UINT (g_hash_table_lookup (spec_defaults, GUINT_TO_POINTER (c[k])));
              guint32 sid = GPOINTER_TO_UINT (g_hash_table_lookup (spec_ids, GUINT_TO_POINTER (c[k])));
              if (sid && sid - 1 < n_spec)
                val = spec[sid - 1];
              if (val)
                out[k] = val;
            }
        }
    }
  g_hash_table_unref (spec_ids);
  g_hash_table_unref (spec_defaults);
  g_hash_table_unref (builtin_ids);
}

HnVkPipeline *
hn_vk_get_pipeline (HnVkContext *ctx, const char *shader, const guint32 *spec, guint n_spec, guint n_bindings,
                    GError **error)
{
  GString *key = g_string_new (shader);
  g_string_append_printf (key, "/%u", n_bindings);
  for (guint i = 0; i < n_spec; i++)
    g_string_append_printf (key, ",%u", spec[i]);
  HnVkPipeline *p = g_hash_table_lookup (ctx->pipelines, key->str);
  if (p)
    {
      g_string_free (key, TRUE);
      return p;
    }
  const HnShaderBlob *blob = find_shader (shader);
  if (!blob)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "shader '%s' is not built into this engine", shader);
      g_string_free (key, TRUE);
      return NULL;
    }
  HnVkLayout *layout = hn_vk_get_layout (ctx, n_bindings, error);
  if (!layout)
    {
      g_string_free (key, TRUE);
      return NULL;
    }
  VkShaderModule module = g_hash_table_lookup (ctx->modules, shader);
  if (!module)
    {
      VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = blob->size, .pCode = blob->words };
      if (!HN_VK_OK (vkCreateShaderModule (ctx->device, &mci, NULL, &module), error))
        {
          g_prefix_error (error, "shader '%s': ", shader);
          g_string_free (key, TRUE);
          return NULL;
        }
      g_hash_table_insert (ctx->modules, (gpointer) blob->name, module);
    }
  VkSpecializationMapEntry entries[MAX_SPEC];
  for (guint i = 0; i < n_spec; i++)
    entries[i] = (VkSpecializationMapEntry) { .constantID = i, .offset = i * 4, .size = 4 };
  VkSpecializationInfo si = { .mapEntryCount = n_spec, .pMapEntries = entries, .dataSize = n_spec * 4, .pData = spec };
  VkComputePipelineCreateInfo cpi = {
    .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
    .stage = {
      .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
      .module = module, .pName = "main", .pSpecializationInfo = n_spec ? &si : NULL },
    .layout = layout->layout };
  VkPipeline pipeline;
  if (!HN_VK_OK (vkCreateComputePipelines (ctx->device, ctx->pipeline_cache, 1, &cpi, NULL, &pipeline), error))
    {
      g_prefix_error (error, "pipeline for shader '%s': ", shader);
      g_string_free (key, TRUE);
      return NULL;
    }
  p = g_new0 (HnVkPipeline, 1);
  p->pipeline = pipeline;
  p->layout = layout->layout;
  reflect_local_size (blob, spec, n_spec, p->local_size);
  g_hash_table_insert (ctx->pipelines, g_string_free (key, FALSE), p);
  return p;
}

/* ---------------------------------------------------------------- recorder */

typedef struct {
  HnVkBlock *block;
  guint64 begin, end;
} HnSpan;

struct _HnCmd {
  HnVkContext *ctx;
  VkCommandPool pool;
  VkCommandBuffer cb;
  VkFence fence;
  VkDescriptorPool dpool;  /* when push descriptors are unavailable: the pool in use */
  guint dpool_sets;        /* sets taken from it */
  GArray *dpools;          /* every pool (VkDescriptorPool), all reset at each recording */
  guint dpool_index;
  gboolean recording;
  gboolean reusable;  /* recorded for hn_cmd_replay */
  gboolean finished;  /* a reusable recording was ended and may be replayed */
  GArray *written;  /* HnSpan since the last barrier */
  GArray *read;
  guint n_dispatches, n_barriers;
  char *label;
  HnAutocast autocast;

  gboolean profiling;
  VkQueryPool queries;
  guint n_queries_cap;
  GPtrArray *pending_names;  /* names of the timed dispatches in this recording */
  GPtrArray *profile_names;  /* of the last submission (owns the strings) */
  GArray *profile;           /* HnCmdProfileEntry */
  double profile_span_us;    /* first dispatch's start to the last one's end */

  HnVkBuffer *scratch;       /* hn_cmd_scratch's buffer */
  HnVkBuffer *wscratch[HN_WEIGHT_SCRATCH_SLOTS]; /* hn_cmd_scratch_weight's ring */
  guint wnext;
  GPtrArray *retired;        /* outgrown scratch buffers the recording still binds */
  /* hn_cmd_flush: the recording's command buffers submitted before its end
   * (reset once its last one has been waited for), and spare ones */
  GArray *flushed, *spare;   /* VkCommandBuffer */
  /* HN_VK_SERIAL=1: a barrier before every dispatch, so that a profile times
   * each one alone (dispatches without a hazard between them otherwise
   * overlap, and each one's time includes the others') */
  gboolean serial;
};

#define DPOOL_SETS 1024

/* A new descriptor pool for DPOOL_SETS more dispatches; becomes the current one. */
static gboolean
add_descriptor_pool (HnCmd *cmd, GError **error)
{
  VkDescriptorPoolSize ps = { .type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = DPOOL_SETS * MAX_BINDINGS };
  VkDescriptorPoolCreateInfo dci = {
    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = DPOOL_SETS, .poolSizeCount = 1,
    .pPoolSizes = &ps };
  VkDescriptorPool pool;
  if (!HN_VK_OK (vkCreateDescriptorPool (cmd->ctx->device, &dci, NULL, &pool), error))
    return FALSE;
  g_array_append_val (cmd->dpools, pool);
  cmd->dpool = pool;
  cmd->dpool_index = cmd->dpools->len - 1;
  cmd->dpool_sets = 0;
  return TRUE;
}

HnCmd *
hn_cmd_new (HnVkContext *ctx, GError **error)
{
  HnCmd *cmd = g_new0 (HnCmd, 1);
  cmd->ctx = hn_vk_context_ref (ctx);
  cmd->written = g_array_new (FALSE, FALSE, sizeof (HnSpan));
  cmd->read = g_array_new (FALSE, FALSE, sizeof (HnSpan));
  cmd->pending_names = g_ptr_array_new_with_free_func (g_free);
  cmd->profile_names = g_ptr_array_new_with_free_func (g_free);
  cmd->retired = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_vk_buffer_unref);
  cmd->profile = g_array_new (FALSE, FALSE, sizeof (HnCmdProfileEntry));
  cmd->serial = g_strcmp0 (g_getenv ("HN_VK_SERIAL"), "1") == 0;
  cmd->flushed = g_array_new (FALSE, FALSE, sizeof (VkCommandBuffer));
  cmd->spare = g_array_new (FALSE, FALSE, sizeof (VkCommandBuffer));
  VkCommandPoolCreateInfo pci = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = ctx->queue_family };
  if (!HN_VK_OK (vkCreateCommandPool (ctx->device, &pci, NULL, &cmd->pool), error))
    goto fail;
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = cmd->pool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
  if (!HN_VK_OK (vkAllocateCommandBuffers (ctx->device, &cai, &cmd->cb), error))
    goto fail;
  VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  if (!HN_VK_OK (vkCreateFence (ctx->device, &fci, NULL, &cmd->fence), error))
    goto fail;
  cmd->dpools = g_array_new (FALSE, FALSE, sizeof (VkDescriptorPool));
  if (!ctx->use_push_descriptor && !add_descriptor_pool (cmd, error))
    goto fail;
  return cmd;

fail:
  hn_cmd_free (cmd);
  return NULL;
}

static void drain_flushed (HnCmd *cmd);

void
hn_cmd_free (HnCmd *cmd)
{
  if (!cmd)
    return;
  drain_flushed (cmd); /* the pool must not go while they run */
  VkDevice dev = cmd->ctx->device;
  if (cmd->queries)
    vkDestroyQueryPool (dev, cmd->queries, NULL);
  for (guint i = 0; cmd->dpools && i < cmd->dpools->len; i++)
    vkDestroyDescriptorPool (dev, g_array_index (cmd->dpools, VkDescriptorPool, i), NULL);
  if (cmd->dpools)
    g_array_unref (cmd->dpools);
  if (cmd->fence)
    vkDestroyFence (dev, cmd->fence, NULL);
  if (cmd->pool)
    vkDestroyCommandPool (dev, cmd->pool, NULL);
  g_array_unref (cmd->written);
  g_array_unref (cmd->read);
  g_ptr_array_unref (cmd->pending_names);
  g_ptr_array_unref (cmd->profile_names);
  g_array_unref (cmd->profile);
  g_ptr_array_unref (cmd->retired);
  g_array_unref (cmd->flushed);
  g_array_unref (cmd->spare);
  if (cmd->scratch)
    hn_vk_buffer_unref (cmd->scratch);
  for (guint i = 0; i < HN_WEIGHT_SCRATCH_SLOTS; i++)
    if (cmd->wscratch[i])
      hn_vk_buffer_unref (cmd->wscratch[i]);
  g_free (cmd->label);
  hn_vk_context_unref (cmd->ctx);
  g_free (cmd);
}

static HnVkBuffer *
scratch_slot (HnCmd *cmd, HnVkBuffer **slot, guint64 bytes, const char *what, GError **error)
{
  bytes = MAX ((bytes + 255) & ~(guint64) 255, 256);
  if (*slot && hn_vk_buffer_get_size (*slot) >= bytes)
    return *slot;
  HnVkBuffer *b = hn_vk_buffer_new (cmd->ctx, bytes, what, error);
  if (!b)
    return NULL;
  if (*slot)
    g_ptr_array_add (cmd->retired, *slot);
  *slot = b;
  return b;
}

HnVkBuffer *
hn_cmd_scratch (HnCmd *cmd, guint64 bytes, GError **error)
{
  return scratch_slot (cmd, &cmd->scratch, bytes, "recorder scratch (an f16 copy of a matmul operand)", error);
}

HnVkBuffer *
hn_cmd_scratch_weight (HnCmd *cmd, guint64 bytes, GError **error)
{
  /* A ring: the next weight's dequantization writes another slot than the
   * GEMM before it reads, so the two need no barrier between them and run
   * side by side (a memory-bound pass under a compute-bound one); three
   * slots so that the GLU's gate and up forms and the next weight's coexist. */
  guint i = cmd->wnext;
  cmd->wnext = (i + 1) % HN_WEIGHT_SCRATCH_SLOTS;
  return scratch_slot (cmd, &cmd->wscratch[i], bytes, "recorder weight scratch (a quantized weight in f16)", error);
}

HnVkContext *
hn_cmd_get_context (HnCmd *cmd)
{
  return cmd->ctx;
}

void
hn_cmd_set_label (HnCmd *cmd, const char *label)
{
  g_free (cmd->label);
  cmd->label = g_strdup (label);
}

void
hn_cmd_set_autocast (HnCmd *cmd, HnAutocast mode)
{
  cmd->autocast = mode;
}

HnAutocast
hn_cmd_get_autocast (HnCmd *cmd)
{
  return cmd->autocast;
}

void
hn_cmd_set_profiling (HnCmd *cmd, gboolean enabled)
{
  cmd->profiling = enabled && cmd->ctx->info->timestamps;
}

gboolean
hn_cmd_get_profiling (HnCmd *cmd)
{
  return cmd->profiling;
}

/* The barrier a recording's command buffer starts with: uploads made before
 * it are visible to its shaders; after_shaders: so are the shader writes of
 * what was submitted before (a replay's previous run, the same recording's
 * flushed part). */
static void
begin_barrier (HnCmd *cmd, gboolean after_shaders)
{
  VkMemoryBarrier mb = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                     (after_shaders ? VK_ACCESS_SHADER_WRITE_BIT : 0),
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
  vkCmdPipelineBarrier (cmd->cb,
                        VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                          (after_shaders ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : 0),
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* The flushed command buffers back to the spares: they have finished (the
 * last submission was waited for) or done is FALSE and this waits for them. */
static void
recycle_flushed (HnCmd *cmd, gboolean done)
{
  if (cmd->flushed->len == 0)
    return;
  if (!done)
    {
      /* an empty batch with the fence: it signals once everything submitted before has finished */
      HnVkContext *ctx = cmd->ctx;
      g_mutex_lock (&ctx->lock);
      gboolean ok = vkResetFences (ctx->device, 1, &cmd->fence) == VK_SUCCESS &&
                    vkQueueSubmit (ctx->queue, 0, NULL, cmd->fence) == VK_SUCCESS;
      g_mutex_unlock (&ctx->lock);
      if (!ok || !hn_vk_wait_fence (ctx, cmd->fence, "the flushed ops", NULL))
        vkDeviceWaitIdle (ctx->device);
    }
  for (guint i = 0; i < cmd->flushed->len; i++)
    {
      VkCommandBuffer cb = g_array_index (cmd->flushed, VkCommandBuffer, i);
      vkResetCommandBuffer (cb, 0);
      g_array_append_val (cmd->spare, cb);
    }
  g_array_set_size (cmd->flushed, 0);
}

static void
drain_flushed (HnCmd *cmd)
{
  if (cmd->flushed)
    recycle_flushed (cmd, FALSE);
}

gboolean
hn_cmd_flush (HnCmd *cmd, GError **error)
{
  if (!cmd->recording || cmd->reusable)
    return TRUE;
  HnVkContext *ctx = cmd->ctx;
  VkCommandBuffer next;
  if (cmd->spare->len)
    {
      next = g_array_index (cmd->spare, VkCommandBuffer, cmd->spare->len - 1);
      g_array_set_size (cmd->spare, cmd->spare->len - 1);
    }
  else
    {
      VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = cmd->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
      if (!HN_VK_OK (vkAllocateCommandBuffers (ctx->device, &cai, &next), error))
        return FALSE;
    }
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd->cb };
  gboolean ok = HN_VK_OK (vkEndCommandBuffer (cmd->cb), error);
  g_mutex_lock (&ctx->lock);
  ok = ok && HN_VK_OK (vkQueueSubmit (ctx->queue, 1, &si, VK_NULL_HANDLE), error);
  g_mutex_unlock (&ctx->lock);
  if (!ok)
    {
      g_array_append_val (cmd->spare, next);
      cmd->recording = FALSE; /* ended: the next recording resets it */
      hn_cmd_reset (cmd);
      return FALSE;
    }
  g_array_append_val (cmd->flushed, cmd->cb);
  cmd->cb = next;
  VkCommandBufferBeginInfo bi = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
  if (!HN_VK_OK (vkBeginCommandBuffer (cmd->cb, &bi), error))
    {
      cmd->recording = FALSE;
      hn_cmd_reset (cmd);
      return FALSE;
    }
  begin_barrier (cmd, TRUE);
  /* the barrier orders everything after it: no hazards to track across it */
  g_array_set_size (cmd->written, 0);
  g_array_set_size (cmd->read, 0);
  cmd->n_barriers++;
  return TRUE;
}

static gboolean
begin (HnCmd *cmd, GError **error)
{
  if (cmd->recording)
    return TRUE;
  /* A replayed buffer may be pending several times in one submission. */
  VkCommandBufferBeginInfo bi = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    .flags = cmd->reusable ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
  cmd->finished = FALSE;
  if (!HN_VK_OK (vkResetCommandBuffer (cmd->cb, 0), error) || !HN_VK_OK (vkBeginCommandBuffer (cmd->cb, &bi), error))
    return FALSE;
  /* Uploads happened outside any recording: make them visible; a replay
   * also follows the previous run of the same buffer (its shader writes). */
  begin_barrier (cmd, cmd->reusable);
  /* The sets of the last submission are no longer in use: reset every pool. */
  for (guint i = 0; i < cmd->dpools->len; i++)
    vkResetDescriptorPool (cmd->ctx->device, g_array_index (cmd->dpools, VkDescriptorPool, i), 0);
  if (cmd->dpools->len)
    {
      cmd->dpool_index = 0;
      cmd->dpool = g_array_index (cmd->dpools, VkDescriptorPool, 0);
      cmd->dpool_sets = 0;
    }
  cmd->recording = TRUE;
  cmd->n_dispatches = 0;
  cmd->n_barriers = 0;
  g_array_set_size (cmd->written, 0);
  g_array_set_size (cmd->read, 0);
  g_ptr_array_set_size (cmd->pending_names, 0);
  return TRUE;
}

static gboolean
spans_overlap (GArray *spans, const HnSpan *s)
{
  for (guint i = 0; i < spans->len; i++)
    {
      const HnSpan *o = &g_array_index (spans, HnSpan, i);
      if (o->block == s->block && o->begin < s->end && s->begin < o->end)
        return TRUE;
    }
  return FALSE;
}

static gboolean
ensure_queries (HnCmd *cmd, guint needed, GError **error)
{
  if (cmd->queries && cmd->n_queries_cap >= needed)
    return TRUE;
  /* Only grows between recordings' first dispatch; a pool in use by the
   * current recording cannot be replaced, so start big. */
  if (cmd->queries)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "profiling supports at most %u dispatches per submission", cmd->n_queries_cap / 2);
      return FALSE;
    }
  guint cap = 8192;
  VkQueryPoolCreateInfo qci = {
    .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = cap };
  if (!HN_VK_OK (vkCreateQueryPool (cmd->ctx->device, &qci, NULL, &cmd->queries), error))
    return FALSE;
  cmd->n_queries_cap = cap;
  return TRUE;
}

gboolean
hn_cmd_dispatch (HnCmd *cmd, const char *shader, const guint32 *spec, guint n_spec,
                 const HnVkBinding *bindings, guint n_bindings, const void *push, guint push_size,
                 guint32 gx, guint32 gy, guint32 gz, GError **error)
{
  HnVkContext *ctx = cmd->ctx;
  if (n_bindings > MAX_BINDINGS || n_spec > MAX_SPEC || push_size > 128 ||
      push_size > ctx->info->max_push_constants)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "dispatch of '%s': too many bindings (%u), specialization constants (%u) or push bytes (%u)",
                   shader, n_bindings, n_spec, push_size);
      return FALSE;
    }
  if (gx == 0 || gy == 0 || gz == 0)
    return TRUE; /* nothing to do */
  if (gx > ctx->info->max_workgroup_count[0] || gy > ctx->info->max_workgroup_count[1] ||
      gz > ctx->info->max_workgroup_count[2])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "dispatch of '%s': %u x %u x %u workgroups exceed the device limit %u x %u x %u", shader, gx, gy,
                   gz, ctx->info->max_workgroup_count[0], ctx->info->max_workgroup_count[1],
                   ctx->info->max_workgroup_count[2]);
      return FALSE;
    }
  for (guint i = 0; i < n_bindings; i++)
    if (!bindings[i].buf || bindings[i].buf->ctx != ctx)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "dispatch of '%s': binding %u is missing or from another device", shader, i);
        return FALSE;
      }

  g_mutex_lock (&ctx->lock);
  HnVkPipeline *p = hn_vk_get_pipeline (ctx, shader, spec, n_spec, n_bindings, error);
  g_mutex_unlock (&ctx->lock);
  if (!p || !begin (cmd, error))
    return FALSE;

  /* Hazards: RAW/WAW against written spans, WAR against read spans. */
  HnSpan spans[MAX_BINDINGS];
  gboolean need_barrier = cmd->serial && cmd->n_dispatches > 0;
  for (guint i = 0; i < n_bindings; i++)
    {
      const HnVkBinding *bd = &bindings[i];
      guint64 size = bd->size ? bd->size : bd->buf->size;
      spans[i] = (HnSpan) { bd->buf->block, bd->buf->offset + bd->offset, bd->buf->offset + bd->offset + size };
      if (spans_overlap (cmd->written, &spans[i]) || (bd->write && spans_overlap (cmd->read, &spans[i])))
        need_barrier = TRUE;
    }
  if (need_barrier)
    {
      VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
      vkCmdPipelineBarrier (cmd->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                            1, &mb, 0, NULL, 0, NULL);
      g_array_set_size (cmd->written, 0);
      g_array_set_size (cmd->read, 0);
      cmd->n_barriers++;
    }
  for (guint i = 0; i < n_bindings; i++)
    g_array_append_val (bindings[i].write ? cmd->written : cmd->read, spans[i]);

  vkCmdBindPipeline (cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
  VkDescriptorBufferInfo bi[MAX_BINDINGS];
  VkWriteDescriptorSet wr[MAX_BINDINGS];
  for (guint i = 0; i < n_bindings; i++)
    {
      HnVkBuffer *b = bindings[i].buf;
      bi[i] = (VkDescriptorBufferInfo) { .buffer = b->block->buffer, .offset = b->offset, .range = b->alloc_size };
      wr[i] = (VkWriteDescriptorSet) {
        .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = i, .descriptorCount = 1,
        .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i] };
    }
  if (ctx->use_push_descriptor)
    {
      if (n_bindings)
        ctx->push_descriptor_fn (cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, n_bindings, wr);
    }
  else if (n_bindings)
    {
      if (cmd->dpool_sets >= DPOOL_SETS)
        {
          /* Steady state reuses the pools; a longer recording adds one. */
          if (cmd->dpool_index + 1 < cmd->dpools->len)
            {
              cmd->dpool = g_array_index (cmd->dpools, VkDescriptorPool, ++cmd->dpool_index);
              cmd->dpool_sets = 0;
            }
          else if (!add_descriptor_pool (cmd, error))
            return FALSE;
        }
      g_mutex_lock (&ctx->lock);
      HnVkLayout *layout = hn_vk_get_layout (ctx, n_bindings, error);
      g_mutex_unlock (&ctx->lock);
      if (!layout)
        return FALSE;
      VkDescriptorSetAllocateInfo dai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = cmd->dpool,
        .descriptorSetCount = 1, .pSetLayouts = &layout->set_layout };
      VkDescriptorSet set;
      if (!HN_VK_OK (vkAllocateDescriptorSets (ctx->device, &dai, &set), error))
        return FALSE;
      cmd->dpool_sets++;
      for (guint i = 0; i < n_bindings; i++)
        wr[i].dstSet = set;
      vkUpdateDescriptorSets (ctx->device, n_bindings, wr, 0, NULL);
      vkCmdBindDescriptorSets (cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    }
  if (push_size)
    vkCmdPushConstants (cmd->cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);

  gboolean timed = FALSE;
  if (cmd->profiling)
    {
      guint q = cmd->pending_names->len * 2;
      if (!ensure_queries (cmd, q + 2, error))
        return FALSE;
      if (q == 0)
        vkCmdResetQueryPool (cmd->cb, cmd->queries, 0, cmd->n_queries_cap);
      vkCmdWriteTimestamp (cmd->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, cmd->queries, q);
      timed = TRUE;
    }
  vkCmdDispatch (cmd->cb, gx, gy, gz);
  if (timed)
    {
      guint q = cmd->pending_names->len * 2;
      vkCmdWriteTimestamp (cmd->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, cmd->queries, q + 1);
      g_ptr_array_add (cmd->pending_names, g_strdup (cmd->label ? cmd->label : shader));
    }
  cmd->n_dispatches++;
  return TRUE;
}

void
hn_cmd_reset (HnCmd *cmd)
{
  recycle_flushed (cmd, FALSE);
  if (cmd->recording)
    {
      vkEndCommandBuffer (cmd->cb);
      vkResetCommandBuffer (cmd->cb, 0);
      cmd->recording = FALSE;
    }
  else if (cmd->finished)
    vkResetCommandBuffer (cmd->cb, 0);
  cmd->finished = FALSE;
  g_array_set_size (cmd->written, 0);
  g_array_set_size (cmd->read, 0);
  g_ptr_array_set_size (cmd->pending_names, 0);
  g_ptr_array_set_size (cmd->retired, 0);
}

/* Ends the recording: results become visible to the host (mapped memory) and to transfers. */
static gboolean
end_recording (HnCmd *cmd, GError **error)
{
  VkMemoryBarrier mb = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT };
  vkCmdPipelineBarrier (cmd->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                        VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  cmd->recording = FALSE;
  return HN_VK_OK (vkEndCommandBuffer (cmd->cb), error);
}

/* Submits the command buffer `times` times (in batches, one fence on the last) and waits; then reads
 * the timestamps of the last run. */
static gboolean
run_and_wait (HnCmd *cmd, guint times, GError **error)
{
  HnVkContext *ctx = cmd->ctx;
  enum { BATCH = 32 };
  VkCommandBuffer cbs[BATCH];
  for (guint i = 0; i < BATCH; i++)
    cbs[i] = cmd->cb;
  gboolean ok = TRUE;
  g_mutex_lock (&ctx->lock);
  ok = HN_VK_OK (vkResetFences (ctx->device, 1, &cmd->fence), error);
  for (guint done = 0; ok && done < times;)
    {
      guint n = MIN (BATCH, times - done);
      VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = n, .pCommandBuffers = cbs };
      done += n;
      ok = HN_VK_OK (vkQueueSubmit (ctx->queue, 1, &si, done == times ? cmd->fence : VK_NULL_HANDLE), error);
    }
  g_mutex_unlock (&ctx->lock);
  if (ok)
    ok = hn_vk_wait_fence (ctx, cmd->fence, "the recorded ops", error);

  g_array_set_size (cmd->profile, 0);
  g_ptr_array_set_size (cmd->profile_names, 0);
  cmd->profile_span_us = 0;
  if (ok && cmd->pending_names->len > 0)
    {
      guint n = cmd->pending_names->len;
      g_autofree guint64 *ts = g_new0 (guint64, 2 * n);
      if (vkGetQueryPoolResults (ctx->device, cmd->queries, 0, 2 * n, 2 * n * sizeof (guint64), ts, sizeof (guint64),
                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
        for (guint i = 0; i < n; i++)
          {
            char *name = g_strdup (cmd->pending_names->pdata[i]);
            g_ptr_array_add (cmd->profile_names, name);
            HnCmdProfileEntry e = { name, (double) (ts[2 * i + 1] - ts[2 * i]) * ctx->info->timestamp_period_ns / 1000.0 };
            g_array_append_val (cmd->profile, e);
            cmd->profile_span_us = (double) (ts[2 * i + 1] - ts[0]) * ctx->info->timestamp_period_ns / 1000.0;
          }
    }
  return ok;
}

gboolean
hn_cmd_submit_wait (HnCmd *cmd, GError **error)
{
  if (!cmd->recording)
    return TRUE;
  if (cmd->reusable)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "a recorder made reusable runs through hn_cmd_finish and hn_cmd_replay, not submit_wait");
      hn_cmd_reset (cmd);
      return FALSE;
    }
  gboolean ok = end_recording (cmd, error) && run_and_wait (cmd, 1, error);
  recycle_flushed (cmd, ok); /* waited for with the last one (a fence covers what was submitted before) */
  g_ptr_array_set_size (cmd->pending_names, 0);
  g_ptr_array_set_size (cmd->retired, 0);
  g_array_set_size (cmd->written, 0);
  g_array_set_size (cmd->read, 0);
  return ok;
}

void
hn_cmd_set_reusable (HnCmd *cmd)
{
  g_return_if_fail (!cmd->recording);
  cmd->reusable = TRUE;
}

gboolean
hn_cmd_finish (HnCmd *cmd, GError **error)
{
  if (!cmd->reusable || !cmd->recording)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   cmd->reusable ? "nothing recorded to finish" : "hn_cmd_finish needs hn_cmd_set_reusable first");
      return FALSE;
    }
  if (!end_recording (cmd, error))
    {
      hn_cmd_reset (cmd);
      return FALSE;
    }
  cmd->finished = TRUE;
  g_array_set_size (cmd->written, 0);
  g_array_set_size (cmd->read, 0);
  return TRUE;
}

gboolean
hn_cmd_is_finished (HnCmd *cmd)
{
  return cmd->finished;
}

gboolean
hn_cmd_replay (HnCmd *cmd, guint times, GError **error)
{
  if (!cmd->finished)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no finished recording to replay");
      return FALSE;
    }
  return times == 0 || run_and_wait (cmd, times, error);
}

guint
hn_cmd_get_n_dispatches (HnCmd *cmd)
{
  return cmd->n_dispatches;
}

guint
hn_cmd_get_n_barriers (HnCmd *cmd)
{
  return cmd->n_barriers;
}

const HnCmdProfileEntry *
hn_cmd_get_profile (HnCmd *cmd, guint *n_entries)
{
  *n_entries = cmd->profile->len;
  return (const HnCmdProfileEntry *) cmd->profile->data;
}

double
hn_cmd_get_profile_span_us (HnCmd *cmd)
{
  return cmd->profile_span_us;
}
