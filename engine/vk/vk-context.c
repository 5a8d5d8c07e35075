/* Instance, device report and choice, and the context (device + queue). */
#include "vk-private.h"
#include "base/hn-util.h"

#include <stdio.h>
#include <string.h>

/* Vulkan headers 1.3.239 (Debian 12) predate VK_KHR_cooperative_matrix and
 * VK_NV_cooperative_matrix2: declare the few pieces we query. Values and
 * layouts are from the Vulkan registry. */
#ifndef VK_KHR_cooperative_matrix
#define HN_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType) 1000506001)
typedef struct {
  VkStructureType sType;
  void *pNext;
  uint32_t MSize, NSize, KSize;
  uint32_t AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  uint32_t scope;
} HnVkCooperativeMatrixPropertiesKHR;
#else
#define HN_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
typedef VkCooperativeMatrixPropertiesKHR HnVkCooperativeMatrixPropertiesKHR;
#endif
#define HN_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType) 1000506000)
typedef struct {
  VkStructureType sType;
  void *pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
} HnVkCoopmatFeaturesKHR;
typedef VkResult (VKAPI_PTR *HnPfnCoopmatProps) (VkPhysicalDevice, uint32_t *, HnVkCooperativeMatrixPropertiesKHR *);

#define HN_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV ((VkStructureType) 1000593001)
typedef struct {
  VkStructureType sType;
  void *pNext;
  uint32_t MGranularity, NGranularity, KGranularity;
  uint32_t AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  uint32_t scope;
  uint32_t workgroupInvocations;
} HnVkCoopmatFlexNV;
typedef VkResult (VKAPI_PTR *HnPfnCoopmatFlex) (VkPhysicalDevice, uint32_t *, HnVkCoopmatFlexNV *);
#define HN_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV ((VkStructureType) 1000593000)
typedef struct {
  VkStructureType sType;
  void *pNext;
  VkBool32 cooperativeMatrixWorkgroupScope;
  VkBool32 cooperativeMatrixFlexibleDimensions;
  VkBool32 cooperativeMatrixReductions;
  VkBool32 cooperativeMatrixConversions;
  VkBool32 cooperativeMatrixPerElementOperations;
  VkBool32 cooperativeMatrixTensorAddressing;
  VkBool32 cooperativeMatrixBlockLoads;
} HnVkCoopmat2FeaturesNV;
/* VkComponentTypeKHR and VkScopeKHR values */
#define HN_VK_COMPONENT_FLOAT16 0u
#define HN_VK_COMPONENT_FLOAT32 1u
#define HN_VK_SCOPE_WORKGROUP 2u

const char *
hn_vk_result_string (VkResult r)
{
  switch (r)
    {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult";
    }
}

gboolean
hn_vk_check (VkResult r, const char *call, GError **error)
{
  if (r == VK_SUCCESS)
    return TRUE;
  HnErrorCode code = HN_ERROR_VULKAN;
  const char *hint = "";
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    {
      code = HN_ERROR_OUT_OF_MEMORY;
      hint = r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? " (GPU memory is full)" : " (host memory is full)";
    }
  else if (r == VK_ERROR_DEVICE_LOST)
    {
      code = HN_ERROR_DEVICE_LOST;
      hint = " (the GPU driver reset the device; restart the job)";
    }
  else if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED)
    {
      code = HN_ERROR_NO_DEVICE;
    }
  g_set_error (error, HN_ERROR, code, "%s failed: %s (%d)%s", call, hn_vk_result_string (r), (int) r, hint);
  return FALSE;
}

char *
hn_vk_loader_version (void)
{
  uint32_t v = 0;
  PFN_vkEnumerateInstanceVersion fn = (PFN_vkEnumerateInstanceVersion) vkGetInstanceProcAddr (NULL, "vkEnumerateInstanceVersion");
  if (!fn || fn (&v) != VK_SUCCESS)
    return NULL;
  return g_strdup_printf ("%u.%u.%u", VK_API_VERSION_MAJOR (v), VK_API_VERSION_MINOR (v), VK_API_VERSION_PATCH (v));
}

gboolean
hn_vk_create_instance (VkInstance *out, GError **error)
{
  uint32_t n_ext = 0;
  vkEnumerateInstanceExtensionProperties (NULL, &n_ext, NULL);
  g_autofree VkExtensionProperties *exts = g_new0 (VkExtensionProperties, n_ext + 1);
  vkEnumerateInstanceExtensionProperties (NULL, &n_ext, exts);
  const char *enabled[2];
  uint32_t n_enabled = 0;
  gboolean portability = FALSE;
  for (uint32_t i = 0; i < n_ext; i++)
    if (strcmp (exts[i].extensionName, "VK_KHR_portability_enumeration") == 0)
      portability = TRUE;
  if (portability)
    enabled[n_enabled++] = "VK_KHR_portability_enumeration";

  VkApplicationInfo app = {
    .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
    .pApplicationName = "hierarchos-native",
    .applicationVersion = VK_MAKE_API_VERSION (0, 0, 1, 0),
    .pEngineName = "hierarchos-native",
    .apiVersion = VK_API_VERSION_1_3,
  };
  VkInstanceCreateInfo ci = {
    .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
    .flags = portability ? VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR : 0,
    .pApplicationInfo = &app,
    .enabledExtensionCount = n_enabled,
    .ppEnabledExtensionNames = enabled,
  };
  VkResult r = vkCreateInstance (&ci, NULL, out);
  if (r != VK_SUCCESS)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE,
                   "cannot create a Vulkan instance: %s (is a Vulkan driver installed? On Debian: "
                   "apt install mesa-vulkan-drivers, or the GPU vendor's driver)", hn_vk_result_string (r));
      return FALSE;
    }
  return TRUE;
}

static const char *
device_type_name (VkPhysicalDeviceType t)
{
  switch (t)
    {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static const char *
vendor_name (guint32 id)
{
  switch (id)
    {
    case 0x10de: return "NVIDIA";
    case 0x1002: return "AMD";
    case 0x8086: return "Intel";
    case 0x13b5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x106b: return "Apple";
    case 0x10005: return "Mesa";
    case 0x1010: return "Imagination";
    default: return "unknown";
    }
}

static const char *
component_name (uint32_t t)
{
  switch (t)
    {
    case 0: return "f16";
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "i8";
    case 4: return "i16";
    case 5: return "i32";
    case 6: return "i64";
    case 7: return "u8";
    case 8: return "u16";
    case 9: return "u32";
    case 10: return "u64";
    case 1000141000: return "bf16";
    case 1000491000: return "i8packed";
    case 1000491001: return "u8packed";
    case 1000491002: return "e4m3";
    case 1000491003: return "e5m2";
    default: return "other";
    }
}

static const char *
scope_name (uint32_t s)
{
  switch (s)
    {
    case 1: return "device";
    case 2: return "workgroup";
    case 3: return "subgroup";
    case 5: return "queue-family";
    default: return "other";
    }
}

static gboolean
has_ext (const VkExtensionProperties *exts, uint32_t n, const char *name)
{
  for (uint32_t i = 0; i < n; i++)
    if (strcmp (exts[i].extensionName, name) == 0)
      return TRUE;
  return FALSE;
}

void
hn_vk_device_info_free (HnVkDeviceInfo *info)
{
  if (!info)
    return;
  g_free (info->name);
  g_free (info->driver_name);
  g_free (info->driver_info);
  g_free (info->api_version);
  if (info->coopmat_shapes)
    g_array_unref (info->coopmat_shapes);
  g_free (info);
}

gboolean
hn_vk_fill_device_info (VkInstance instance, VkPhysicalDevice phys, int index, HnVkDeviceInfo **out, GError **error)
{
  g_autoptr(HnVkDeviceInfo) info = g_new0 (HnVkDeviceInfo, 1);
  info->index = index;

  uint32_t n_ext = 0;
  if (!HN_VK_OK (vkEnumerateDeviceExtensionProperties (phys, NULL, &n_ext, NULL), error))
    return FALSE;
  g_autofree VkExtensionProperties *exts = g_new0 (VkExtensionProperties, n_ext + 1);
  if (!HN_VK_OK (vkEnumerateDeviceExtensionProperties (phys, NULL, &n_ext, exts), error))
    return FALSE;

  VkPhysicalDeviceSubgroupProperties sg = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES };
  VkPhysicalDeviceSubgroupSizeControlProperties sgc = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES, .pNext = &sg };
  VkPhysicalDeviceDriverProperties drv = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, .pNext = &sgc };
  VkPhysicalDeviceIDProperties idp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES, .pNext = &drv };
  VkPhysicalDeviceMaintenance3Properties m3 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &idp };
  VkPhysicalDeviceFloatControlsProperties fc = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES, .pNext = &m3 };
  VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &fc };
  /* NVIDIA's multiprocessor count (VK_NV_shader_sm_builtins), chained only where the device has it */
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV smb = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV };
  if (has_ext (exts, n_ext, "VK_NV_shader_sm_builtins"))
    {
      smb.pNext = props.pNext;
      props.pNext = &smb;
    }
  vkGetPhysicalDeviceProperties2 (phys, &props);
  info->multiprocessors = smb.shaderSMCount;
  info->f16_rte = fc.shaderRoundingModeRTEFloat16 && fc.shaderDenormPreserveFloat16;

  VkPhysicalDeviceShaderFloat16Int8Features f16i8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES };
  VkPhysicalDevice16BitStorageFeatures s16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &f16i8 };
  VkPhysicalDevice8BitStorageFeatures s8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES, .pNext = &s16 };
  VkPhysicalDeviceSubgroupSizeControlFeatures sgcf = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES, .pNext = &s8 };
  VkPhysicalDeviceFeatures2 feats = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &sgcf };
  vkGetPhysicalDeviceFeatures2 (phys, &feats);

  const VkPhysicalDeviceLimits *lim = &props.properties.limits;
  info->name = g_strdup (props.properties.deviceName);
  info->type = device_type_name (props.properties.deviceType);
  info->vendor_id = props.properties.vendorID;
  info->device_id = props.properties.deviceID;
  info->vendor = vendor_name (info->vendor_id);
  info->driver_name = g_strdup (drv.driverName);
  info->driver_info = g_strdup (drv.driverInfo);
  info->driver_version = props.properties.driverVersion;
  uint32_t av = props.properties.apiVersion;
  info->api_version = g_strdup_printf ("%u.%u.%u", VK_API_VERSION_MAJOR (av), VK_API_VERSION_MINOR (av),
                                       VK_API_VERSION_PATCH (av));
  const guint8 *u = idp.deviceUUID;
  g_snprintf (info->uuid, sizeof info->uuid,
              "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
              u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);

  info->memory_budget = has_ext (exts, n_ext, "VK_EXT_memory_budget");
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties (phys, &mp);
  info->n_heaps = MIN (mp.memoryHeapCount, G_N_ELEMENTS (info->heaps));
  for (guint h = 0; h < info->n_heaps; h++)
    {
      info->heaps[h].size = mp.memoryHeaps[h].size;
      info->heaps[h].device_local = (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
      for (uint32_t t = 0; t < mp.memoryTypeCount; t++)
        if (mp.memoryTypes[t].heapIndex == h && (mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
          info->heaps[h].host_visible = TRUE;
    }

  info->subgroup_size = sg.subgroupSize;
  info->min_subgroup_size = sgc.minSubgroupSize ? sgc.minSubgroupSize : sg.subgroupSize;
  info->max_subgroup_size = sgc.maxSubgroupSize ? sgc.maxSubgroupSize : sg.subgroupSize;
  info->subgroup_arithmetic = (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                              (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
  info->subgroup_shuffle = (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  info->subgroup_size_control = sgcf.subgroupSizeControl && sgcf.computeFullSubgroups;
  info->max_shared_memory = lim->maxComputeSharedMemorySize;
  info->max_workgroup_invocations = lim->maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; i++)
    {
      info->max_workgroup_size[i] = lim->maxComputeWorkGroupSize[i];
      info->max_workgroup_count[i] = lim->maxComputeWorkGroupCount[i];
    }
  info->max_push_constants = lim->maxPushConstantsSize;
  info->max_allocation_size = m3.maxMemoryAllocationSize;
  info->max_storage_buffer_range = lim->maxStorageBufferRange;
  info->min_storage_offset_alignment = lim->minStorageBufferOffsetAlignment;
  info->fp16 = f16i8.shaderFloat16;
  info->int8 = f16i8.shaderInt8;
  info->storage16 = s16.storageBuffer16BitAccess;
  info->storage8 = s8.storageBuffer8BitAccess;
  info->bf16 = has_ext (exts, n_ext, "VK_KHR_shader_bfloat16");
  info->int_dot_product = has_ext (exts, n_ext, "VK_KHR_shader_integer_dot_product");
  info->push_descriptor = has_ext (exts, n_ext, "VK_KHR_push_descriptor");
  info->timestamps = lim->timestampComputeAndGraphics && lim->timestampPeriod > 0;
  info->timestamp_period_ns = lim->timestampPeriod;
  info->coopmat_khr = has_ext (exts, n_ext, "VK_KHR_cooperative_matrix");
  info->coopmat_nv = has_ext (exts, n_ext, "VK_NV_cooperative_matrix");
  info->coopmat_nv2 = has_ext (exts, n_ext, "VK_NV_cooperative_matrix2");
  info->coopmat_shapes = g_array_new (FALSE, TRUE, sizeof (HnVkCoopmatShape));

  if (info->coopmat_khr)
    {
      HnPfnCoopmatProps fn = (HnPfnCoopmatProps) vkGetInstanceProcAddr (instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
      uint32_t n = 0;
      if (fn && fn (phys, &n, NULL) == VK_SUCCESS && n > 0 && n < 4096)
        {
          g_autofree HnVkCooperativeMatrixPropertiesKHR *cp = g_new0 (HnVkCooperativeMatrixPropertiesKHR, n);
          for (uint32_t i = 0; i < n; i++)
            cp[i].sType = HN_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
          if (fn (phys, &n, cp) == VK_SUCCESS)
            for (uint32_t i = 0; i < n; i++)
              {
                HnVkCoopmatShape s = {
                  cp[i].MSize, cp[i].NSize, cp[i].KSize,
                  component_name (cp[i].AType), component_name (cp[i].BType),
                  component_name (cp[i].CType), component_name (cp[i].ResultType),
                  cp[i].saturatingAccumulation, scope_name (cp[i].scope),
                };
                g_array_append_val (info->coopmat_shapes, s);
              }
        }
    }
  if (info->coopmat_nv2)
    {
      HnPfnCoopmatFlex fn = (HnPfnCoopmatFlex) vkGetInstanceProcAddr (instance, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
      uint32_t n = 0;
      if (fn && fn (phys, &n, NULL) == VK_SUCCESS && n > 0 && n < 4096)
        {
          g_autofree HnVkCoopmatFlexNV *fp = g_new0 (HnVkCoopmatFlexNV, n);
          for (uint32_t i = 0; i < n; i++)
            fp[i].sType = HN_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
          if (fn (phys, &n, fp) == VK_SUCCESS)
            for (uint32_t i = 0; i < n; i++)
              {
                /* The f16 x f16 -> f32 workgroup-scope shape matmul_cm2 uses
                 * (256 invocations preferred), else the first one listed. */
                gboolean ours = fp[i].AType == HN_VK_COMPONENT_FLOAT16 && fp[i].BType == HN_VK_COMPONENT_FLOAT16 &&
                                fp[i].CType == HN_VK_COMPONENT_FLOAT32 && fp[i].ResultType == HN_VK_COMPONENT_FLOAT32 &&
                                fp[i].scope == HN_VK_SCOPE_WORKGROUP && !fp[i].saturatingAccumulation;
                if (ours && fp[i].workgroupInvocations >= 32 && fp[i].workgroupInvocations <= (32u << 5) &&
                    (fp[i].workgroupInvocations & (fp[i].workgroupInvocations - 1)) == 0)
                  {
                    info->nv2_invocations_listed |= fp[i].workgroupInvocations / 32;
                    guint idx = (guint) g_bit_nth_lsf (fp[i].workgroupInvocations / 32, -1);
                    info->nv2_granularity[idx][0] = fp[i].MGranularity;
                    info->nv2_granularity[idx][1] = fp[i].NGranularity;
                    info->nv2_granularity[idx][2] = fp[i].KGranularity;
                  }
                if (info->nv2_flex_granularity[0] == 0 ||
                    (ours && (info->nv2_workgroup_invocations == 0 || fp[i].workgroupInvocations == 256)))
                  {
                    info->nv2_flex_granularity[0] = fp[i].MGranularity;
                    info->nv2_flex_granularity[1] = fp[i].NGranularity;
                    info->nv2_flex_granularity[2] = fp[i].KGranularity;
                    if (ours)
                      info->nv2_workgroup_invocations = fp[i].workgroupInvocations;
                  }
              }
        }
    }
  *out = g_steal_pointer (&info);
  return TRUE;
}

GPtrArray *
hn_vk_list_devices (GError **error)
{
  VkInstance instance;
  if (!hn_vk_create_instance (&instance, error))
    return NULL;
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices (instance, &n, NULL);
  if (r != VK_SUCCESS || n == 0)
    {
      vkDestroyInstance (instance, NULL);
      g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE,
                   "no Vulkan device found (%s); install a Vulkan driver (mesa-vulkan-drivers or the GPU vendor's)",
                   r != VK_SUCCESS ? hn_vk_result_string (r) : "the loader lists none");
      return NULL;
    }
  g_autofree VkPhysicalDevice *phys = g_new0 (VkPhysicalDevice, n);
  vkEnumeratePhysicalDevices (instance, &n, phys);
  GPtrArray *list = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_vk_device_info_free);
  for (uint32_t i = 0; i < n; i++)
    {
      HnVkDeviceInfo *info = NULL;
      if (!hn_vk_fill_device_info (instance, phys[i], (int) i, &info, error))
        {
          g_ptr_array_unref (list);
          vkDestroyInstance (instance, NULL);
          return NULL;
        }
      g_ptr_array_add (list, info);
    }
  vkDestroyInstance (instance, NULL);
  return list;
}

JsonNode *
hn_vk_device_info_to_json (const HnVkDeviceInfo *info)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "index"); json_builder_add_int_value (b, info->index);
  json_builder_set_member_name (b, "name"); json_builder_add_string_value (b, info->name);
  json_builder_set_member_name (b, "type"); json_builder_add_string_value (b, info->type);
  json_builder_set_member_name (b, "vendor"); json_builder_add_string_value (b, info->vendor);
  json_builder_set_member_name (b, "vendor_id"); json_builder_add_int_value (b, info->vendor_id);
  json_builder_set_member_name (b, "device_id"); json_builder_add_int_value (b, info->device_id);
  json_builder_set_member_name (b, "uuid"); json_builder_add_string_value (b, info->uuid);
  json_builder_set_member_name (b, "driver"); json_builder_add_string_value (b, info->driver_name);
  json_builder_set_member_name (b, "driver_info"); json_builder_add_string_value (b, info->driver_info);
  json_builder_set_member_name (b, "driver_version"); json_builder_add_int_value (b, info->driver_version);
  json_builder_set_member_name (b, "api_version"); json_builder_add_string_value (b, info->api_version);
  json_builder_set_member_name (b, "heaps");
  json_builder_begin_array (b);
  for (guint h = 0; h < info->n_heaps; h++)
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "size"); json_builder_add_int_value (b, (gint64) info->heaps[h].size);
      json_builder_set_member_name (b, "device_local"); json_builder_add_boolean_value (b, info->heaps[h].device_local);
      json_builder_set_member_name (b, "host_visible"); json_builder_add_boolean_value (b, info->heaps[h].host_visible);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_set_member_name (b, "subgroup_size"); json_builder_add_int_value (b, info->subgroup_size);
  json_builder_set_member_name (b, "multiprocessors"); json_builder_add_int_value (b, info->multiprocessors);
  json_builder_set_member_name (b, "f16_rte"); json_builder_add_boolean_value (b, info->f16_rte);
  json_builder_set_member_name (b, "subgroup_size_range");
  json_builder_begin_array (b);
  json_builder_add_int_value (b, info->min_subgroup_size);
  json_builder_add_int_value (b, info->max_subgroup_size);
  json_builder_end_array (b);
  json_builder_set_member_name (b, "subgroup_arithmetic"); json_builder_add_boolean_value (b, info->subgroup_arithmetic);
  json_builder_set_member_name (b, "subgroup_size_control"); json_builder_add_boolean_value (b, info->subgroup_size_control);
  json_builder_set_member_name (b, "max_shared_memory"); json_builder_add_int_value (b, info->max_shared_memory);
  json_builder_set_member_name (b, "max_workgroup_invocations"); json_builder_add_int_value (b, info->max_workgroup_invocations);
  json_builder_set_member_name (b, "max_push_constants"); json_builder_add_int_value (b, info->max_push_constants);
  json_builder_set_member_name (b, "max_allocation_size"); json_builder_add_int_value (b, (gint64) info->max_allocation_size);
  json_builder_set_member_name (b, "max_storage_buffer_range"); json_builder_add_int_value (b, (gint64) info->max_storage_buffer_range);
  json_builder_set_member_name (b, "fp16"); json_builder_add_boolean_value (b, info->fp16);
  json_builder_set_member_name (b, "bf16"); json_builder_add_boolean_value (b, info->bf16);
  json_builder_set_member_name (b, "int8"); json_builder_add_boolean_value (b, info->int8);
  json_builder_set_member_name (b, "storage16"); json_builder_add_boolean_value (b, info->storage16);
  json_builder_set_member_name (b, "storage8"); json_builder_add_boolean_value (b, info->storage8);
  json_builder_set_member_name (b, "integer_dot_product"); json_builder_add_boolean_value (b, info->int_dot_product);
  json_builder_set_member_name (b, "push_descriptor"); json_builder_add_boolean_value (b, info->push_descriptor);
  json_builder_set_member_name (b, "timestamps"); json_builder_add_boolean_value (b, info->timestamps);
  json_builder_set_member_name (b, "memory_budget"); json_builder_add_boolean_value (b, info->memory_budget);
  json_builder_set_member_name (b, "cooperative_matrix_khr"); json_builder_add_boolean_value (b, info->coopmat_khr);
  json_builder_set_member_name (b, "cooperative_matrix_nv"); json_builder_add_boolean_value (b, info->coopmat_nv);
  json_builder_set_member_name (b, "cooperative_matrix_nv2"); json_builder_add_boolean_value (b, info->coopmat_nv2);
  json_builder_set_member_name (b, "cooperative_matrix_shapes");
  json_builder_begin_array (b);
  for (guint i = 0; info->coopmat_shapes && i < info->coopmat_shapes->len; i++)
    {
      const HnVkCoopmatShape *s = &g_array_index (info->coopmat_shapes, HnVkCoopmatShape, i);
      g_autofree char *str = g_strdup_printf ("%ux%ux%u %s*%s+%s->%s%s %s", s->m, s->n, s->k, s->a_type, s->b_type,
                                              s->c_type, s->result_type, s->saturating ? " sat" : "", s->scope);
      json_builder_add_string_value (b, str);
    }
  json_builder_end_array (b);
  if (info->nv2_flex_granularity[0])
    {
      json_builder_set_member_name (b, "cooperative_matrix_nv2_granularity");
      json_builder_begin_array (b);
      for (int i = 0; i < 3; i++)
        json_builder_add_int_value (b, info->nv2_flex_granularity[i]);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "cooperative_matrix_nv2_workgroup_invocations");
      json_builder_add_int_value (b, info->nv2_workgroup_invocations);
      json_builder_set_member_name (b, "cooperative_matrix_nv2_workgroup_sizes");
      json_builder_begin_array (b);
      for (guint i = 0; i < 6; i++)
        if (info->nv2_invocations_listed & (1u << i))
          json_builder_add_int_value (b, 32u << i);
      json_builder_end_array (b);
      /* per workgroup size: [invocations, M, N, K] */
      json_builder_set_member_name (b, "cooperative_matrix_nv2_granularity_by_size");
      json_builder_begin_array (b);
      for (guint i = 0; i < 6; i++)
        if (info->nv2_invocations_listed & (1u << i))
          {
            json_builder_begin_array (b);
            json_builder_add_int_value (b, 32u << i);
            for (int j = 0; j < 3; j++)
              json_builder_add_int_value (b, info->nv2_granularity[i][j]);
            json_builder_end_array (b);
          }
      json_builder_end_array (b);
    }
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

/* ---------------------------------------------------------------- context */

static gboolean
coopmat_has_shape (const HnVkDeviceInfo *info, const char *ab, const char *cr, guint32 m, guint32 n, guint32 k)
{
  for (guint i = 0; info->coopmat_shapes && i < info->coopmat_shapes->len; i++)
    {
      const HnVkCoopmatShape *s = &g_array_index (info->coopmat_shapes, HnVkCoopmatShape, i);
      if (s->m == m && s->n == n && s->k == k && g_str_equal (s->a_type, ab) && g_str_equal (s->b_type, ab) &&
          g_str_equal (s->c_type, cr) && g_str_equal (s->result_type, cr) && g_str_equal (s->scope, "subgroup"))
        return TRUE;
    }
  return FALSE;
}

gboolean
hn_vk_context_has_coopmat (HnVkContext *ctx)
{
  return ctx->coopmat_f16;
}

gboolean
hn_vk_coopmat2_product_ok (const HnVkDeviceInfo *info, guint32 nt, guint32 m, guint32 n, guint32 k)
{
  if (nt < 32 || nt > (32u << 5) || (nt & (nt - 1)) != 0 || !(info->nv2_invocations_listed & (nt / 32)))
    return FALSE;
  const guint32 *g = info->nv2_granularity[g_bit_nth_lsf (nt / 32, -1)];
  return g[0] && g[1] && g[2] && m && n && k && m % g[0] == 0 && n % g[1] == 0 && k % g[2] == 0;
}

gboolean
hn_vk_context_has_coopmat2_reductions (HnVkContext *ctx)
{
  return ctx->coopmat2 && ctx->coopmat2_reductions;
}

gboolean
hn_vk_context_has_int_dot (HnVkContext *ctx)
{
  return ctx->int_dot;
}

gboolean
hn_vk_context_has_coopmat2 (HnVkContext *ctx, guint32 *invocations)
{
  if (invocations)
    *invocations = ctx->coopmat2 ? ctx->info->nv2_workgroup_invocations : 0;
  return ctx->coopmat2;
}

static int
device_rank (const HnVkDeviceInfo *info)
{
  if (g_str_equal (info->type, "discrete")) return 4;
  if (g_str_equal (info->type, "integrated")) return 3;
  if (g_str_equal (info->type, "virtual")) return 2;
  if (g_str_equal (info->type, "cpu")) return 1;
  return 0;
}

guint64
hn_vk_device_info_local_bytes (const HnVkDeviceInfo *info)
{
  guint64 best = 0;
  for (guint h = 0; h < info->n_heaps; h++)
    if (info->heaps[h].device_local)
      best = MAX (best, info->heaps[h].size);
  return best;
}

static int
pick_device (GPtrArray *list, const char *selector, GError **error)
{
  if (selector == NULL || *selector == '\0')
    {
      int best = 0;
      for (guint i = 1; i < list->len; i++)
        {
          const HnVkDeviceInfo *a = list->pdata[i], *b = list->pdata[best];
          if (device_rank (a) > device_rank (b) ||
              (device_rank (a) == device_rank (b) &&
               hn_vk_device_info_local_bytes (a) > hn_vk_device_info_local_bytes (b)))
            best = (int) i;
        }
      return best;
    }
  char *end = NULL;
  gint64 idx = g_ascii_strtoll (selector, &end, 10);
  if (end && *end == '\0' && end != selector)
    {
      if (idx < 0 || idx >= (gint64) list->len)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE, "no Vulkan device with index %s (there are %u)",
                       selector, list->len);
          return -1;
        }
      return (int) idx;
    }
  for (guint i = 0; i < list->len; i++)
    {
      const HnVkDeviceInfo *d = list->pdata[i];
      if (g_ascii_strcasecmp (d->uuid, selector) == 0)
        return (int) i;
    }
  g_autofree char *want = g_utf8_strdown (selector, -1);
  for (guint i = 0; i < list->len; i++)
    {
      const HnVkDeviceInfo *d = list->pdata[i];
      g_autofree char *name = g_utf8_strdown (d->name, -1);
      if (strstr (name, want))
        return (int) i;
    }
  GString *names = g_string_new (NULL);
  for (guint i = 0; i < list->len; i++)
    g_string_append_printf (names, "%s%u: %s", i ? ", " : "", i, ((HnVkDeviceInfo *) list->pdata[i])->name);
  g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE, "no Vulkan device matches '%s' (devices: %s)", selector, names->str);
  g_string_free (names, TRUE);
  return -1;
}

static HnVkContext *
context_open (VkInstance instance, VkPhysicalDevice phys, int index, GError **error)
{
  g_autofree VkQueueFamilyProperties *qf = NULL;
  HnVkContext *ctx = g_new0 (HnVkContext, 1);
  ctx->refcount = 1;
  ctx->instance = instance;
  ctx->phys = phys;
  g_mutex_init (&ctx->lock);
  ctx->blocks = g_ptr_array_new ();

  if (!hn_vk_fill_device_info (instance, phys, index, &ctx->info, error))
    goto fail;

  uint32_t n_q = 0;
  vkGetPhysicalDeviceQueueFamilyProperties (phys, &n_q, NULL);
  qf = g_new0 (VkQueueFamilyProperties, n_q + 1);
  vkGetPhysicalDeviceQueueFamilyProperties (phys, &n_q, qf);
  int fam = -1;
  /* Prefer a compute queue family that also does graphics: it is the main,
   * most capable queue on every driver we know (and has timestamps). */
  for (uint32_t i = 0; i < n_q && fam < 0; i++)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
      fam = (int) i;
  for (uint32_t i = 0; i < n_q && fam < 0; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
      fam = (int) i;
  if (fam < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE, "Vulkan device '%s' has no compute queue", ctx->info->name);
      goto fail;
    }
  ctx->queue_family = (guint32) fam;
  if (qf[fam].timestampValidBits == 0)
    ctx->info->timestamps = FALSE;

  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
    .queueFamilyIndex = ctx->queue_family, .queueCount = 1, .pQueuePriorities = &prio };

  const char *exts[8];
  uint32_t n_exts = 0;
  if (ctx->info->push_descriptor)
    exts[n_exts++] = "VK_KHR_push_descriptor";

  /* Enable what the shaders may use and the device has. */
  VkPhysicalDeviceShaderFloat16Int8Features f16i8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
    .shaderFloat16 = ctx->info->fp16, .shaderInt8 = ctx->info->int8 };
  VkPhysicalDevice16BitStorageFeatures s16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
    .pNext = &f16i8, .storageBuffer16BitAccess = ctx->info->storage16 };
  VkPhysicalDevice8BitStorageFeatures s8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
    .pNext = &s16, .storageBuffer8BitAccess = ctx->info->storage8 };
  VkPhysicalDeviceSubgroupSizeControlFeatures sgcf = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES,
    .pNext = &s8, .subgroupSizeControl = ctx->info->subgroup_size_control, .computeFullSubgroups = ctx->info->subgroup_size_control };
  VkPhysicalDeviceFeatures2 feats = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &sgcf };

  /* Cooperative matrices (tensor cores): only when the shaders are built in
   * and the device has the f16 16x16x16 -> f32 subgroup shape they use. */
  HnVkCoopmatFeaturesKHR cmf = { .sType = HN_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR };
  VkPhysicalDeviceVulkanMemoryModelFeatures vmm = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES };
  if (HN_HAVE_COOPMAT && ctx->info->coopmat_khr && ctx->info->fp16 && coopmat_has_shape (ctx->info, "f16", "f32", 16, 16, 16))
    {
      cmf.pNext = &vmm;
      VkPhysicalDeviceFeatures2 q = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cmf };
      vkGetPhysicalDeviceFeatures2 (phys, &q);
      if (cmf.cooperativeMatrix && vmm.vulkanMemoryModel && g_getenv ("HN_NO_COOPMAT") == NULL)
        {
          cmf.cooperativeMatrixRobustBufferAccess = VK_FALSE;
          vmm.vulkanMemoryModelDeviceScope = VK_FALSE;
          vmm.vulkanMemoryModelAvailabilityVisibilityChains = VK_FALSE;
          vmm.pNext = feats.pNext;
          feats.pNext = &cmf;
          exts[n_exts++] = "VK_KHR_cooperative_matrix";
          ctx->coopmat_f16 = TRUE;
        }
    }
  /* NV cooperative matrix 2 on top (NVIDIA): workgroup-scope matrices,
   * flexible sizes, use conversions (an f32 A becomes an f16 operand),
   * per-element epilogues and tensor addressing; the 16-bit operands are
   * read as 16-bit storage. */
  HnVkCoopmat2FeaturesNV cm2 = { .sType = HN_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV };
  VkPhysicalDeviceBufferDeviceAddressFeatures bda = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES };
  if (HN_HAVE_COOPMAT2 && ctx->coopmat_f16 && ctx->info->coopmat_nv2 && ctx->info->storage16 &&
      ctx->info->nv2_workgroup_invocations > 0 && ctx->info->nv2_workgroup_invocations <= ctx->info->max_workgroup_invocations &&
      g_getenv ("HN_NO_COOPMAT2") == NULL)
    {
      /* The bf16 decode function reads through a buffer reference of
       * 16-bit integers: buffer device addresses and shaderInt16 too. */
      cm2.pNext = &bda;
      VkPhysicalDeviceFeatures2 q = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cm2 };
      vkGetPhysicalDeviceFeatures2 (phys, &q);
      if (cm2.cooperativeMatrixWorkgroupScope && cm2.cooperativeMatrixFlexibleDimensions &&
          cm2.cooperativeMatrixConversions && cm2.cooperativeMatrixPerElementOperations &&
          cm2.cooperativeMatrixTensorAddressing && cm2.cooperativeMatrixBlockLoads && bda.bufferDeviceAddress &&
          q.features.shaderInt16)
        {
          /* row reductions: the flash-attention forward's softmax (attention_cm2_reg) */
          ctx->coopmat2_reductions = cm2.cooperativeMatrixReductions && g_getenv ("HN_NO_CM2_REDUCE") == NULL;
          cm2.cooperativeMatrixReductions = ctx->coopmat2_reductions;
          bda.bufferDeviceAddressCaptureReplay = VK_FALSE;
          bda.bufferDeviceAddressMultiDevice = VK_FALSE;
          feats.features.shaderInt16 = VK_TRUE;
          bda.pNext = feats.pNext;
          feats.pNext = &cm2;
          exts[n_exts++] = "VK_NV_cooperative_matrix2";
          ctx->coopmat2 = TRUE;
        }
    }
  /* 4x8-bit integer dot products (the GGUF decode kernel's), when its
   * variant is built in (glslang >= 14). */
  VkPhysicalDeviceShaderIntegerDotProductFeatures idot = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES };
  if (HN_HAVE_IDOT && ctx->info->int_dot_product && g_getenv ("HN_NO_IDOT") == NULL)
    {
      VkPhysicalDeviceFeatures2 q = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &idot };
      vkGetPhysicalDeviceFeatures2 (phys, &q);
      if (idot.shaderIntegerDotProduct)
        {
          idot.pNext = feats.pNext;
          feats.pNext = &idot;
          exts[n_exts++] = "VK_KHR_shader_integer_dot_product";
          ctx->int_dot = TRUE;
        }
    }
  VkDeviceCreateInfo dci = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &feats,
    .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
    .enabledExtensionCount = n_exts, .ppEnabledExtensionNames = exts };
  if (!HN_VK_OK (vkCreateDevice (phys, &dci, NULL, &ctx->device), error))
    goto fail;
  vkGetDeviceQueue (ctx->device, ctx->queue_family, 0, &ctx->queue);
  if (ctx->info->push_descriptor)
    {
      ctx->push_descriptor_fn = (PFN_vkCmdPushDescriptorSetKHR) vkGetDeviceProcAddr (ctx->device, "vkCmdPushDescriptorSetKHR");
      ctx->use_push_descriptor = ctx->push_descriptor_fn != NULL && g_getenv ("HN_VK_NO_PUSH_DESCRIPTOR") == NULL;
    }

  ctx->timeout_ns = 600ull * 1000000000ull;
  const char *t = g_getenv ("HN_VK_TIMEOUT_S");
  if (t && g_ascii_strtoull (t, NULL, 10) > 0)
    ctx->timeout_ns = g_ascii_strtoull (t, NULL, 10) * 1000000000ull;

  if (!hn_vk_memory_init (ctx, error))
    goto fail;
  hn_vk_pipelines_init (ctx);
  return ctx;

fail:
  hn_vk_context_unref (ctx);
  return NULL;
}

HnVkContext *
hn_vk_context_new_for_selector (const char *selector, GError **error)
{
  VkInstance instance;
  if (!hn_vk_create_instance (&instance, error))
    return NULL;
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices (instance, &n, NULL);
  if (r != VK_SUCCESS || n == 0)
    {
      vkDestroyInstance (instance, NULL);
      g_set_error (error, HN_ERROR, HN_ERROR_NO_DEVICE,
                   "no Vulkan device found; install a Vulkan driver (mesa-vulkan-drivers or the GPU vendor's)");
      return NULL;
    }
  g_autofree VkPhysicalDevice *phys = g_new0 (VkPhysicalDevice, n);
  vkEnumeratePhysicalDevices (instance, &n, phys);
  g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_vk_device_info_free);
  for (uint32_t i = 0; i < n; i++)
    {
      HnVkDeviceInfo *info = NULL;
      if (!hn_vk_fill_device_info (instance, phys[i], (int) i, &info, error))
        {
          vkDestroyInstance (instance, NULL);
          return NULL;
        }
      g_ptr_array_add (list, info);
    }
  int idx = pick_device (list, selector, error);
  if (idx < 0)
    {
      vkDestroyInstance (instance, NULL);
      return NULL;
    }
  /* context_open owns the instance from here (destroyed on failure too). */
  return context_open (instance, phys[idx], idx, error);
}

HnVkContext *
hn_vk_context_new (int device_index, GError **error)
{
  if (device_index >= 0)
    {
      g_autofree char *sel = g_strdup_printf ("%d", device_index);
      return hn_vk_context_new_for_selector (sel, error);
    }
  return hn_vk_context_new_for_selector (g_getenv ("HN_DEVICE"), error);
}

GPtrArray *
hn_vk_contexts_new (const int *indices, guint n, GError **error)
{
  g_autoptr (GPtrArray) ctxs = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_vk_context_unref);
  for (guint i = 0; i < n; i++)
    {
      HnVkContext *c = hn_vk_context_new (indices[i], error);
      if (!c)
        return NULL;
      g_ptr_array_add (ctxs, c);
    }
  return g_steal_pointer (&ctxs);
}

static GMutex default_lock;
static HnVkContext *default_ctx; /* weak: cleared when its last reference goes */

HnVkContext *
hn_vk_context_get_default (GError **error)
{
  g_mutex_lock (&default_lock);
  HnVkContext *ctx = default_ctx ? hn_vk_context_ref (default_ctx) : NULL;
  g_mutex_unlock (&default_lock);
  if (ctx)
    return ctx;
  /* Created outside the lock (a failed creation unrefs, which takes it). */
  HnVkContext *made = hn_vk_context_new (-1, error);
  if (!made)
    return NULL;
  g_mutex_lock (&default_lock);
  if (default_ctx)
    ctx = hn_vk_context_ref (default_ctx); /* another thread won the race */
  else
    ctx = default_ctx = hn_vk_context_ref (made);
  g_mutex_unlock (&default_lock);
  hn_vk_context_unref (made);
  return ctx;
}

HnVkContext *
hn_vk_context_ref (HnVkContext *ctx)
{
  g_atomic_int_inc (&ctx->refcount);
  return ctx;
}

void
hn_vk_context_unref (HnVkContext *ctx)
{
  if (!ctx)
    return;
  /* The default context's last reference is dropped under default_lock so
   * hn_vk_context_get_default never revives a dying context. */
  g_mutex_lock (&default_lock);
  gboolean last = g_atomic_int_dec_and_test (&ctx->refcount);
  if (last && ctx == default_ctx)
    default_ctx = NULL;
  g_mutex_unlock (&default_lock);
  if (!last)
    return;
  if (ctx->device)
    {
      vkDeviceWaitIdle (ctx->device);
      g_autoptr(GError) error = NULL;
      if (ctx->pipeline_cache && !hn_vk_context_save_pipeline_cache (ctx, &error))
        g_debug ("pipeline cache not saved: %s", error->message);
      hn_vk_pipelines_fini (ctx);
      hn_vk_memory_fini (ctx);
      vkDestroyDevice (ctx->device, NULL);
    }
  if (ctx->instance)
    vkDestroyInstance (ctx->instance, NULL);
  hn_vk_device_info_free (ctx->info);
  g_ptr_array_unref (ctx->blocks);
  g_mutex_clear (&ctx->lock);
  g_free (ctx);
}

const HnVkDeviceInfo *
hn_vk_context_get_device_info (HnVkContext *ctx)
{
  return ctx->info;
}

gboolean
hn_vk_wait_fence (HnVkContext *ctx, VkFence fence, const char *what, GError **error)
{
  VkResult r = vkWaitForFences (ctx->device, 1, &fence, VK_TRUE, ctx->timeout_ns);
  if (r == VK_TIMEOUT)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_DEVICE_LOST,
                   "the GPU did not finish %s within %" G_GUINT64_FORMAT " s (hung or far too slow; "
                   "HN_VK_TIMEOUT_S raises the limit)", what, (guint64) (ctx->timeout_ns / 1000000000ull));
      return FALSE;
    }
  if (r != VK_SUCCESS)
    {
      g_autofree char *call = g_strdup_printf ("vkWaitForFences (%s)", what);
      return hn_vk_check (r, call, error);
    }
  return TRUE;
}

extern const HnShaderBlob hn_shader_table[];

const char *const *
hn_vk_shader_names (void)
{
  static const char **names = NULL;
  if (g_once_init_enter (&names))
    {
      guint n = 0;
      while (hn_shader_table[n].name)
        n++;
      const char **v = g_new0 (const char *, n + 1);
      for (guint i = 0; i < n; i++)
        v[i] = hn_shader_table[i].name;
      g_once_init_leave (&names, v);
    }
  return names;
}

gboolean
hn_vk_have_coopmat_shaders (void)
{
  return HN_HAVE_COOPMAT != 0;
}
