/* Device memory: big blocks (one VkBuffer + VkDeviceMemory each) carved into
 * sub-allocations with a first-fit free list, a host-visible staging buffer
 * for transfers, and byte accounting (current and peak).
 *
 * Limits: a block is at most min(maxStorageBufferRange, maxMemoryAllocationSize)
 * bytes, so any sub-allocation can be bound whole as one storage buffer. A
 * request larger than that fails closed with HN_ERROR_UNSUPPORTED; callers
 * split such tensors (e.g. by rows). Requests above the default block size get
 * a dedicated block of their own. */
#include "base/hn-util.h"
#include "vk-private.h"

#include <string.h>

#define DEFAULT_BLOCK_SIZE (256ull << 20)
#define STAGING_SIZE (64ull << 20)

static gboolean
find_memory_type (HnVkContext *ctx, guint32 type_bits, VkMemoryPropertyFlags want, guint32 *out)
{
  for (guint32 i = 0; i < ctx->mem_props.memoryTypeCount; i++)
    if ((type_bits & (1u << i)) && (ctx->mem_props.memoryTypes[i].propertyFlags & want) == want)
      {
        *out = i;
        return TRUE;
      }
  return FALSE;
}

static gboolean
create_buffer (HnVkContext *ctx, guint64 size, VkBufferUsageFlags usage, VkBuffer *buffer, GError **error)
{
  /* matmul_cm2's decode functions read storage buffers through device
   * addresses the driver takes from the descriptors. */
  if (ctx->coopmat2 && (usage & VK_BUFFER_USAGE_STORAGE_BUFFER_BIT))
    usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  VkBufferCreateInfo bci = {
    .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .usage = usage,
    .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
  return HN_VK_OK (vkCreateBuffer (ctx->device, &bci, NULL, buffer), error);
}

gboolean
hn_vk_memory_init (HnVkContext *ctx, GError **error)
{
  vkGetPhysicalDeviceMemoryProperties (ctx->phys, &ctx->mem_props);
  const HnVkDeviceInfo *info = ctx->info;

  ctx->max_buffer = MIN (info->max_storage_buffer_range, info->max_allocation_size);
  /* Keep sub-allocations 256-byte aligned: above every device's
   * minStorageBufferOffsetAlignment and good for vec4 loads. */
  ctx->alignment = MAX (256, info->min_storage_offset_alignment);
  ctx->max_buffer &= ~(ctx->alignment - 1);
  ctx->block_size = MIN (DEFAULT_BLOCK_SIZE, ctx->max_buffer);
  /* HN_VK_MEMORY_LIMIT: play a smaller GPU (out-of-memory tests, trying a
   * configuration meant for a smaller card) */
  const char *lim = g_getenv ("HN_VK_MEMORY_LIMIT");
  if (lim && *lim)
    {
      char *end = NULL;
      guint64 v = g_ascii_strtoull (lim, &end, 10);
      switch (end ? g_ascii_toupper (*end) : 0)
        {
        case 'G': v <<= 30; break;
        case 'M': v <<= 20; break;
        case 'K': v <<= 10; break;
        default: break;
        }
      ctx->limit = v;
    }

  /* Probe a buffer's memory requirements to learn the allowed types. */
  VkBuffer probe;
  if (!create_buffer (ctx, 4096, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT, &probe, error))
    return FALSE;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements (ctx->device, probe, &req);
  vkDestroyBuffer (ctx->device, probe, NULL);

  if (!find_memory_type (ctx, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, &ctx->device_mem_type) &&
      !find_memory_type (ctx, req.memoryTypeBits, 0, &ctx->device_mem_type))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_VULKAN, "Vulkan device '%s' offers no memory type for storage buffers",
                   info->name);
      return FALSE;
    }
  /* On a CPU or integrated device the device-local memory is plain host
   * memory: map it and copy with memcpy instead of staging. A discrete GPU
   * with a host-visible BAR is still staged (reads over PCIe are slow). */
  VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  if ((g_str_equal (info->type, "cpu") || g_str_equal (info->type, "integrated")))
    {
      guint32 t;
      if (find_memory_type (ctx, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | hv, &t))
        {
          ctx->device_mem_type = t;
          ctx->device_mem_mapped = TRUE;
        }
    }
  if (!ctx->device_mem_mapped)
    {
      if (!find_memory_type (ctx, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, &ctx->staging_mem_type) &&
          !find_memory_type (ctx, req.memoryTypeBits, hv, &ctx->staging_mem_type))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_VULKAN, "Vulkan device '%s' offers no host-visible memory for staging",
                       info->name);
          return FALSE;
        }
    }

  VkCommandPoolCreateInfo pci = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = ctx->queue_family };
  if (!HN_VK_OK (vkCreateCommandPool (ctx->device, &pci, NULL, &ctx->xfer_pool), error))
    return FALSE;
  VkCommandBufferAllocateInfo cai = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = ctx->xfer_pool,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
  if (!HN_VK_OK (vkAllocateCommandBuffers (ctx->device, &cai, &ctx->xfer_cb), error))
    return FALSE;
  VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  if (!HN_VK_OK (vkCreateFence (ctx->device, &fci, NULL, &ctx->xfer_fence), error))
    return FALSE;
  return TRUE;
}

static void
block_free (HnVkContext *ctx, HnVkBlock *b)
{
  if (b->mapped)
    vkUnmapMemory (ctx->device, b->memory);
  if (b->buffer)
    vkDestroyBuffer (ctx->device, b->buffer, NULL);
  if (b->memory)
    vkFreeMemory (ctx->device, b->memory, NULL);
  ctx->reserved -= b->size;
  if (b->free_ranges)
    g_array_unref (b->free_ranges);
  g_free (b);
}

void
hn_vk_memory_fini (HnVkContext *ctx)
{
  if (!ctx->device)
    return;
  for (guint i = 0; i < ctx->blocks->len; i++)
    {
      HnVkBlock *b = ctx->blocks->pdata[i];
      if (b->n_live)
        g_warning ("Vulkan context freed with %u live buffers in block %u", b->n_live, b->id);
      block_free (ctx, b);
    }
  g_ptr_array_set_size (ctx->blocks, 0);
  if (ctx->staging_mapped)
    vkUnmapMemory (ctx->device, ctx->staging_memory);
  if (ctx->staging_buffer)
    vkDestroyBuffer (ctx->device, ctx->staging_buffer, NULL);
  if (ctx->staging_memory)
    vkFreeMemory (ctx->device, ctx->staging_memory, NULL);
  if (ctx->xfer_fence)
    vkDestroyFence (ctx->device, ctx->xfer_fence, NULL);
  if (ctx->xfer_pool)
    vkDestroyCommandPool (ctx->device, ctx->xfer_pool, NULL);
}

static void set_oom_error (HnVkContext *ctx, guint64 size, const char *what, const char *detail, GError **error);

static HnVkBlock *
block_new (HnVkContext *ctx, guint64 size, guint64 need, gboolean dedicated, const char *what, GError **error)
{
  /* need: the bytes the caller's allocation takes (for messages; size may be a whole pool block) */
  if (ctx->limit && ctx->reserved + size > ctx->limit)
    {
      set_oom_error (ctx, need, what, NULL, error);
      return NULL;
    }
  HnVkBlock *b = g_new0 (HnVkBlock, 1);
  b->size = size;
  b->dedicated = dedicated;
  b->id = ctx->next_block_id++;
  ctx->reserved += size; /* undone by block_free */
  GError *local = NULL;
  if (!create_buffer (ctx, size, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT, &b->buffer, &local))
    goto fail;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements (ctx->device, b->buffer, &req);
  VkMemoryAllocateFlagsInfo maf = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT };
  VkMemoryAllocateInfo mai = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = ctx->coopmat2 ? &maf : NULL,
    .allocationSize = req.size, .memoryTypeIndex = ctx->device_mem_type };
  /* hn_fault_vk_alloc_fails: the allocation-failure test's hook (hn-util.h) */
  VkResult ar = hn_fault_vk_alloc_fails () ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                                           : vkAllocateMemory (ctx->device, &mai, NULL, &b->memory);
  if (!hn_vk_check (ar, "vkAllocateMemory", &local))
    goto fail;
  if (!HN_VK_OK (vkBindBufferMemory (ctx->device, b->buffer, b->memory, 0), &local))
    goto fail;
  if (ctx->device_mem_mapped && !HN_VK_OK (vkMapMemory (ctx->device, b->memory, 0, VK_WHOLE_SIZE, 0, (void **) &b->mapped), &local))
    goto fail;
  b->free_ranges = g_array_new (FALSE, FALSE, sizeof (HnVkRange));
  HnVkRange all = { 0, size };
  g_array_append_val (b->free_ranges, all);
  ctx->peak_reserved = MAX (ctx->peak_reserved, ctx->reserved);
  g_ptr_array_add (ctx->blocks, b);
  return b;

fail:
  if (local->code == HN_ERROR_OUT_OF_MEMORY)
    {
      ctx->reserved -= size; /* block_free below undoes it for good; the message counts what is held */
      set_oom_error (ctx, need, what, local->message, error);
      ctx->reserved += size;
    }
  else
    g_propagate_prefixed_error (error, g_steal_pointer (&local), "allocating %" G_GUINT64_FORMAT " bytes for %s: ", size, what);
  g_clear_error (&local);
  block_free (ctx, b);
  return NULL;
}

static gboolean
block_take (HnVkBlock *b, guint64 size, guint64 *offset)
{
  for (guint i = 0; i < b->free_ranges->len; i++)
    {
      HnVkRange *r = &g_array_index (b->free_ranges, HnVkRange, i);
      if (r->size >= size)
        {
          *offset = r->offset;
          r->offset += size;
          r->size -= size;
          if (r->size == 0)
            g_array_remove_index (b->free_ranges, i);
          return TRUE;
        }
    }
  return FALSE;
}

static void
block_give (HnVkBlock *b, guint64 offset, guint64 size)
{
  GArray *fr = b->free_ranges;
  guint i = 0;
  while (i < fr->len && g_array_index (fr, HnVkRange, i).offset < offset)
    i++;
  HnVkRange r = { offset, size };
  g_array_insert_val (fr, i, r);
  /* merge with the next, then with the previous */
  if (i + 1 < fr->len)
    {
      HnVkRange *a = &g_array_index (fr, HnVkRange, i), *n = &g_array_index (fr, HnVkRange, i + 1);
      if (a->offset + a->size == n->offset)
        {
          a->size += n->size;
          g_array_remove_index (fr, i + 1);
        }
    }
  if (i > 0)
    {
      HnVkRange *p = &g_array_index (fr, HnVkRange, i - 1), *a = &g_array_index (fr, HnVkRange, i);
      if (p->offset + p->size == a->offset)
        {
          p->size += a->size;
          g_array_remove_index (fr, i);
        }
    }
}

HnVkBuffer *
hn_vk_buffer_new (HnVkContext *ctx, guint64 size, const char *what, GError **error)
{
  if (!what)
    what = "a buffer";
  if (size == 0)
    size = 4;
  if (size > ctx->max_buffer)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s needs %" G_GUINT64_FORMAT " bytes, more than the %" G_GUINT64_FORMAT
                   " bytes one storage buffer can address on '%s' (maxStorageBufferRange/maxMemoryAllocationSize); "
                   "split it into smaller tensors", what, size, ctx->max_buffer, ctx->info->name);
      return NULL;
    }
  guint64 asize = (size + ctx->alignment - 1) & ~(ctx->alignment - 1);
  HnVkBlock *block = NULL;
  guint64 offset = 0;

  g_mutex_lock (&ctx->lock);
  if (ctx->limit && ctx->allocated + asize > ctx->limit)
    {
      set_oom_error (ctx, size, what, NULL, error);
      g_mutex_unlock (&ctx->lock);
      return NULL;
    }
  if (asize > ctx->block_size / 2)
    {
      block = block_new (ctx, asize, asize, TRUE, what, error);
      if (block)
        block_take (block, asize, &offset);
    }
  else
    {
      for (guint i = 0; i < ctx->blocks->len && !block; i++)
        {
          HnVkBlock *b = ctx->blocks->pdata[i];
          if (!b->dedicated && block_take (b, asize, &offset))
            block = b;
        }
      if (!block)
        {
          /* under a memory limit, the last block takes what is left, so the limit
           * fails the allocation that crosses it (as a real device would) */
          guint64 bsize = ctx->block_size;
          if (ctx->limit && ctx->limit > ctx->reserved)
            bsize = MAX (asize, MIN (bsize, (ctx->limit - ctx->reserved) & ~(ctx->alignment - 1)));
          block = block_new (ctx, bsize, asize, FALSE, what, error);
          if (block)
            block_take (block, asize, &offset);
        }
    }
  if (!block)
    {
      g_mutex_unlock (&ctx->lock);
      return NULL;
    }
  block->n_live++;
  ctx->allocated += asize;
  ctx->peak_allocated = MAX (ctx->peak_allocated, ctx->allocated);
  ctx->n_allocations++;
  g_mutex_unlock (&ctx->lock);

  HnVkBuffer *buf = g_new0 (HnVkBuffer, 1);
  buf->refcount = 1;
  buf->ctx = hn_vk_context_ref (ctx);
  buf->block = block;
  buf->offset = offset;
  buf->size = size;
  buf->alloc_size = asize;
  return buf;
}

HnVkBuffer *
hn_vk_buffer_ref (HnVkBuffer *buf)
{
  g_atomic_int_inc (&buf->refcount);
  return buf;
}

void
hn_vk_buffer_unref (HnVkBuffer *buf)
{
  if (!buf || !g_atomic_int_dec_and_test (&buf->refcount))
    return;
  HnVkContext *ctx = buf->ctx;
  g_mutex_lock (&ctx->lock);
  HnVkBlock *b = buf->block;
  block_give (b, buf->offset, buf->alloc_size);
  b->n_live--;
  ctx->allocated -= buf->alloc_size;
  ctx->n_allocations--;
  /* Give dedicated blocks back at once; keep one empty shared block around
   * so a loop that frees and reallocates does not thrash. */
  if (b->n_live == 0)
    {
      gboolean keep = !b->dedicated;
      if (keep)
        for (guint i = 0; i < ctx->blocks->len; i++)
          {
            HnVkBlock *o = ctx->blocks->pdata[i];
            if (o != b && !o->dedicated && o->n_live == 0)
              keep = FALSE;
          }
      if (!keep)
        {
          /* The device may still use it only if a submit is in flight, and
           * every submit waits before returning. */
          g_ptr_array_remove (ctx->blocks, b);
          block_free (ctx, b);
        }
    }
  g_mutex_unlock (&ctx->lock);
  g_free (buf);
  hn_vk_context_unref (ctx);
}

guint64
hn_vk_buffer_get_size (HnVkBuffer *buf)
{
  return buf->size;
}

HnVkContext *
hn_vk_buffer_get_context (HnVkBuffer *buf)
{
  return buf->ctx;
}

void
hn_vk_context_get_memory_stats (HnVkContext *ctx, HnVkMemoryStats *stats)
{
  g_mutex_lock (&ctx->lock);
  stats->allocated_bytes = ctx->allocated;
  stats->peak_allocated_bytes = ctx->peak_allocated;
  stats->reserved_bytes = ctx->reserved;
  stats->peak_reserved_bytes = ctx->peak_reserved;
  stats->n_blocks = ctx->blocks->len;
  stats->n_allocations = ctx->n_allocations;
  g_mutex_unlock (&ctx->lock);
}

void
hn_vk_context_reset_peak (HnVkContext *ctx)
{
  g_mutex_lock (&ctx->lock);
  ctx->peak_allocated = ctx->allocated;
  ctx->peak_reserved = ctx->reserved;
  g_mutex_unlock (&ctx->lock);
}

void
hn_vk_context_set_memory_limit (HnVkContext *ctx, guint64 bytes)
{
  g_mutex_lock (&ctx->lock);
  ctx->limit = bytes;
  g_mutex_unlock (&ctx->lock);
}

/* Under ctx->lock. */
static void
budget_locked (HnVkContext *ctx, HnVkMemoryBudget *out)
{
  VkPhysicalDeviceMemoryBudgetPropertiesEXT bp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT };
  VkPhysicalDeviceMemoryProperties2 mp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                           .pNext = ctx->info->memory_budget ? &bp : NULL };
  vkGetPhysicalDeviceMemoryProperties2 (ctx->phys, &mp);
  /* the heap our device-local memory type lives in */
  guint32 heap = mp.memoryProperties.memoryTypes[ctx->device_mem_type].heapIndex;
  out->total = mp.memoryProperties.memoryHeaps[heap].size;
  out->from_budget = ctx->info->memory_budget && bp.heapBudget[heap] > 0;
  if (out->from_budget)
    out->free = bp.heapBudget[heap] > bp.heapUsage[heap] ? bp.heapBudget[heap] - bp.heapUsage[heap] : 0;
  else
    out->free = out->total > ctx->reserved ? out->total - ctx->reserved : 0;
  if (ctx->limit)
    {
      out->total = MIN (out->total, ctx->limit);
      out->free = MIN (out->free, ctx->limit > ctx->reserved ? ctx->limit - ctx->reserved : 0);
    }
}

void
hn_vk_context_get_memory_budget (HnVkContext *ctx, HnVkMemoryBudget *out)
{
  g_mutex_lock (&ctx->lock);
  budget_locked (ctx, out);
  g_mutex_unlock (&ctx->lock);
}

/* "out of GPU memory allocating tensor X: needed 64.0 MiB, 12.0 MiB free of
 * 8.0 GiB on 'device'" (under ctx->lock). Free counts the unused room in
 * our own blocks too. */
static void
set_oom_error (HnVkContext *ctx, guint64 size, const char *what, const char *detail, GError **error)
{
  HnVkMemoryBudget b;
  budget_locked (ctx, &b);
  guint64 free_bytes = b.free + (ctx->reserved > ctx->allocated ? ctx->reserved - ctx->allocated : 0);
  g_autofree char *need = g_format_size_full (size, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *free_s = g_format_size_full (MIN (free_bytes, b.total), G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *total = g_format_size_full (b.total, G_FORMAT_SIZE_IEC_UNITS);
  g_autofree char *held = g_format_size_full (ctx->allocated, G_FORMAT_SIZE_IEC_UNITS);
  g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
               "out of GPU memory allocating %s: needed %s (%" G_GUINT64_FORMAT " bytes), %s free of %s%s on '%s' "
               "(%s in use by this job)%s%s",
               what, need, size, free_s, total, ctx->limit ? " (the memory limit)" : "", ctx->info->name, held,
               detail ? ": " : "", detail ? detail : "");
}

guint64
hn_vk_context_get_capacity (HnVkContext *ctx)
{
  guint64 heap = hn_vk_device_info_local_bytes (ctx->info);
  g_mutex_lock (&ctx->lock);
  guint64 limit = ctx->limit;
  g_mutex_unlock (&ctx->lock);
  return limit && limit < heap ? limit : heap;
}

guint64
hn_vk_context_max_buffer_size (HnVkContext *ctx)
{
  return ctx->max_buffer;
}

/* ---------------------------------------------------------------- transfers */

/* Under ctx->lock. */
static gboolean
ensure_staging (HnVkContext *ctx, GError **error)
{
  if (ctx->staging_buffer)
    return TRUE;
  guint64 size = MIN (STAGING_SIZE, ctx->max_buffer);
  if (!create_buffer (ctx, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                      &ctx->staging_buffer, error))
    return FALSE;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements (ctx->device, ctx->staging_buffer, &req);
  VkMemoryAllocateInfo mai = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = ctx->staging_mem_type };
  if (!HN_VK_OK (vkAllocateMemory (ctx->device, &mai, NULL, &ctx->staging_memory), error) ||
      !HN_VK_OK (vkBindBufferMemory (ctx->device, ctx->staging_buffer, ctx->staging_memory, 0), error) ||
      !HN_VK_OK (vkMapMemory (ctx->device, ctx->staging_memory, 0, VK_WHOLE_SIZE, 0, (void **) &ctx->staging_mapped), error))
    {
      if (ctx->staging_memory)
        vkFreeMemory (ctx->device, ctx->staging_memory, NULL);
      vkDestroyBuffer (ctx->device, ctx->staging_buffer, NULL);
      ctx->staging_buffer = VK_NULL_HANDLE;
      ctx->staging_memory = VK_NULL_HANDLE;
      ctx->staging_mapped = NULL;
      return FALSE;
    }
  ctx->staging_size = size;
  return TRUE;
}

/* Under ctx->lock: copies between staging[0..size) and block at offset. */
static gboolean
staged_copy (HnVkContext *ctx, HnVkBlock *b, guint64 offset, guint64 size, gboolean to_device, GError **error)
{
  if (!HN_VK_OK (vkResetCommandBuffer (ctx->xfer_cb, 0), error))
    return FALSE;
  VkCommandBufferBeginInfo bi = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
  if (!HN_VK_OK (vkBeginCommandBuffer (ctx->xfer_cb, &bi), error))
    return FALSE;
  VkBufferCopy region = {
    .srcOffset = to_device ? 0 : offset, .dstOffset = to_device ? offset : 0, .size = size };
  if (to_device)
    vkCmdCopyBuffer (ctx->xfer_cb, ctx->staging_buffer, b->buffer, 1, &region);
  else
    vkCmdCopyBuffer (ctx->xfer_cb, b->buffer, ctx->staging_buffer, 1, &region);
  VkMemoryBarrier mb = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
  vkCmdPipelineBarrier (ctx->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                        VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  if (!HN_VK_OK (vkEndCommandBuffer (ctx->xfer_cb), error))
    return FALSE;
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &ctx->xfer_cb };
  if (!HN_VK_OK (vkResetFences (ctx->device, 1, &ctx->xfer_fence), error) ||
      !HN_VK_OK (vkQueueSubmit (ctx->queue, 1, &si, ctx->xfer_fence), error))
    return FALSE;
  return hn_vk_wait_fence (ctx, ctx->xfer_fence, to_device ? "an upload" : "a download", error);
}

static gboolean
transfer (HnVkBuffer *buf, guint64 offset, void *data, guint64 size, gboolean to_device, GError **error)
{
  HnVkContext *ctx = buf->ctx;
  if (offset > buf->size || size > buf->size - offset)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s of %" G_GUINT64_FORMAT " bytes at offset %" G_GUINT64_FORMAT " is outside a buffer of %"
                   G_GUINT64_FORMAT " bytes", to_device ? "upload" : "download", size, offset, buf->size);
      return FALSE;
    }
  if (size == 0)
    return TRUE;
  HnVkBlock *b = buf->block;
  guint64 base = buf->offset + offset;
  if (b->mapped)
    {
      /* Host-coherent memory of a CPU/integrated device; the caller
       * guarantees no submit touching it is in flight. */
      if (to_device)
        memcpy (b->mapped + base, data, size);
      else
        memcpy (data, b->mapped + base, size);
      return TRUE;
    }
  g_mutex_lock (&ctx->lock);
  gboolean ok = ensure_staging (ctx, error);
  guint8 *p = data;
  for (guint64 done = 0; ok && done < size;)
    {
      guint64 n = MIN (size - done, ctx->staging_size);
      if (to_device)
        memcpy (ctx->staging_mapped, p + done, n);
      ok = staged_copy (ctx, b, base + done, n, to_device, error);
      if (ok && !to_device)
        memcpy (p + done, ctx->staging_mapped, n);
      done += n;
    }
  g_mutex_unlock (&ctx->lock);
  return ok;
}

gboolean
hn_vk_buffer_upload (HnVkBuffer *buf, guint64 offset, const void *data, guint64 size, GError **error)
{
  return transfer (buf, offset, (void *) data, size, TRUE, error);
}

gboolean
hn_vk_buffer_download (HnVkBuffer *buf, guint64 offset, void *data, guint64 size, GError **error)
{
  return transfer (buf, offset, data, size, FALSE, error);
}
