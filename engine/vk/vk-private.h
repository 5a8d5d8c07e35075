/* Internals of engine/vk: shared by vk-*.c only. */
#pragma once
#include <vulkan/vulkan.h>
#include "base/hn-error.h"
#include "vk/hn-vk.h"

/* VkResult -> GError in HN_ERROR with the call's text; FALSE on failure. */
gboolean hn_vk_check (VkResult r, const char *call, GError **error);
#define HN_VK_OK(call, error) hn_vk_check ((call), #call, (error))
const char *hn_vk_result_string (VkResult r);

typedef struct {
  const char *name;
  const uint32_t *words;
  size_t size;
} HnShaderBlob;
extern const HnShaderBlob hn_shader_table[];

typedef struct _HnVkBlock HnVkBlock;

struct _HnVkBlock {
  VkBuffer buffer;
  VkDeviceMemory memory;
  guint64 size;
  guint8 *mapped;         /* non-NULL when the memory is host-visible and mapped */
  GArray *free_ranges;    /* of HnVkRange, sorted by offset, coalesced */
  guint n_live;
  gboolean dedicated;
  guint id;
};

typedef struct {
  guint64 offset, size;
} HnVkRange;

struct _HnVkBuffer {
  gint refcount;
  HnVkContext *ctx;
  HnVkBlock *block;
  guint64 offset;  /* in the block, aligned */
  guint64 size;    /* requested */
  guint64 alloc_size;
};

typedef struct {
  VkPipeline pipeline;
  VkPipelineLayout layout;  /* borrowed from the layout cache */
  guint32 local_size[3];
} HnVkPipeline;

typedef struct {
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
} HnVkLayout;

struct _HnVkContext {
  gint refcount;
  VkInstance instance;
  VkPhysicalDevice phys;
  VkDevice device;
  VkQueue queue;
  guint32 queue_family;
  HnVkDeviceInfo *info;
  VkPhysicalDeviceMemoryProperties mem_props;
  guint32 device_mem_type;     /* device-local (and maybe host-visible) */
  gboolean device_mem_mapped;  /* device memory is host-visible+coherent and used by memcpy */
  guint32 staging_mem_type;
  guint64 block_size;
  guint64 max_buffer;
  guint64 alignment;
  gboolean use_push_descriptor;
  gboolean coopmat_f16;         /* VK_KHR_cooperative_matrix enabled, f16 16x16x16 shader usable */
  gboolean coopmat2;            /* VK_NV_cooperative_matrix2 enabled, matmul_cm2 usable */
  gboolean coopmat2_reductions; /* and its row/column reductions (cooperativeMatrixReductions) */
  gboolean int_dot;             /* VK_KHR_shader_integer_dot_product enabled, matvec_gguf_q8i usable */
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_fn;

  GMutex lock;                 /* memory, staging, pipelines, queue */
  GPtrArray *blocks;           /* HnVkBlock* */
  guint next_block_id;
  guint64 allocated, peak_allocated, reserved, peak_reserved, limit;
  guint n_allocations;

  /* staging for uploads/downloads */
  VkBuffer staging_buffer;
  VkDeviceMemory staging_memory;
  guint8 *staging_mapped;
  guint64 staging_size;
  VkCommandPool xfer_pool;
  VkCommandBuffer xfer_cb;
  VkFence xfer_fence;

  /* pipelines */
  VkPipelineCache pipeline_cache;
  char *pipeline_cache_path;
  GHashTable *pipelines;       /* key string -> HnVkPipeline* */
  GHashTable *modules;         /* shader name -> VkShaderModule (as pointer) */
  HnVkLayout layouts[17];      /* by number of bindings */
  guint64 timeout_ns;
};

gboolean hn_vk_fill_device_info (VkInstance instance, VkPhysicalDevice phys, int index, HnVkDeviceInfo **out,
                                 GError **error);
gboolean hn_vk_create_instance (VkInstance *out, GError **error);

gboolean hn_vk_memory_init (HnVkContext *ctx, GError **error);
void hn_vk_memory_fini (HnVkContext *ctx);

void hn_vk_pipelines_init (HnVkContext *ctx);
void hn_vk_pipelines_fini (HnVkContext *ctx);
/* Under ctx->lock. */
HnVkPipeline *hn_vk_get_pipeline (HnVkContext *ctx, const char *shader, const guint32 *spec, guint n_spec,
                                  guint n_bindings, GError **error);
HnVkLayout *hn_vk_get_layout (HnVkContext *ctx, guint n_bindings, GError **error);

/* Waits for a fence with the context timeout: a timeout or loss becomes
 * HN_ERROR_DEVICE_LOST. */
gboolean hn_vk_wait_fence (HnVkContext *ctx, VkFence fence, const char *what, GError **error);
