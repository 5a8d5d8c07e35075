/* The Vulkan compute core: device report and choice, memory, pipelines and
 * command recording. Only the C files of engine/vk include vulkan.h; this header exposes
 * opaque types so the rest of the engine (and the app) never needs it.
 *
 * Typical use (see engine/vk/README.md for the whole picture):
 *
 *   g_autoptr(HnVkContext) ctx = hn_vk_context_new (-1, &error);   // best device
 *   g_autoptr(HnTensor) x = hn_tensor_new (ctx, HN_DTYPE_F32, 2, (gint64[]){ T, C }, &error);
 *   hn_tensor_upload_f32 (x, data, T * C, &error);
 *   g_autoptr(HnCmd) cmd = hn_cmd_new (ctx, &error);
 *   hn_op_rmsnorm (cmd, y, x, w, 1e-5f, 0, &error);                 // records, no work yet
 *   hn_op_matmul (cmd, z, y, W, NULL, &error);                      // barrier inserted: reads y
 *   hn_cmd_submit_wait (cmd, &error);                                // runs, waits, resets cmd
 *   hn_tensor_download_f32 (z, out, n, &error);
 *
 * Threading: a context may be shared by threads; each thread records into
 * its own HnCmd. Allocation, uploads/downloads and queue submission are
 * serialised inside the context.
 */
#pragma once
#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* ---------------------------------------------------------------- devices */

typedef struct {
  guint32 m, n, k;
  const char *a_type, *b_type, *c_type, *result_type; /* "f16", "bf16", "f32", "i8", "u8", "i32", ... */
  gboolean saturating;
  const char *scope;  /* "subgroup", "workgroup", ... */
} HnVkCoopmatShape;

typedef struct {
  guint64 size;
  gboolean device_local;
  gboolean host_visible;  /* some memory type of this heap is host-visible */
} HnVkHeap;

typedef struct {
  int index;                       /* position in the loader's list */
  char *name;
  const char *type;                /* "discrete", "integrated", "virtual", "cpu", "other" */
  guint32 vendor_id, device_id;
  const char *vendor;              /* "NVIDIA", "AMD", "Intel", "Mesa/llvmpipe", ... or "unknown" */
  char *driver_name, *driver_info;
  guint32 driver_version;
  char *api_version;               /* "1.3.239" */
  char uuid[37];                   /* pipelineCacheUUID-independent device UUID, 8-4-4-4-12 */
  guint n_heaps;
  HnVkHeap heaps[16];
  guint32 subgroup_size, min_subgroup_size, max_subgroup_size;
  gboolean subgroup_arithmetic, subgroup_shuffle, subgroup_size_control;
  guint32 max_shared_memory, max_workgroup_invocations;
  guint32 max_workgroup_size[3], max_workgroup_count[3];
  guint32 max_push_constants;
  guint64 max_allocation_size, max_storage_buffer_range, min_storage_offset_alignment;
  gboolean fp16, bf16, int8, storage16, storage8, int_dot_product;
  gboolean push_descriptor, timestamps;
  gboolean memory_budget;          /* VK_EXT_memory_budget: the driver reports free memory per heap */
  double timestamp_period_ns;
  gboolean coopmat_khr, coopmat_nv, coopmat_nv2;
  GArray *coopmat_shapes;          /* of HnVkCoopmatShape (KHR, or NV v1 when KHR is absent) */
  guint32 nv2_flex_granularity[3]; /* NV_cooperative_matrix2 flexible-dimension granularity (M,N,K), 0 if none */
  guint32 nv2_workgroup_invocations; /* workgroup size of its f16 x f16 -> f32 workgroup-scope shape, 0 if none */
  guint32 nv2_invocations_listed;    /* every workgroup size listed for that shape: bit i = 32 << i */
  guint32 nv2_granularity[6][3];     /* that shape's (M, N, K) granularity on 32 << i invocations, 0 if not listed */
  guint32 multiprocessors;           /* streaming multiprocessors (VK_NV_shader_sm_builtins), 0 if unknown */
  gboolean f16_rte;                  /* 16-bit conversions can round to nearest even and keep subnormals
                                      * (float controls: RoundingModeRTE and DenormPreserve for 16 bits) */
} HnVkDeviceInfo;

void hn_vk_device_info_free (HnVkDeviceInfo *info);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnVkDeviceInfo, hn_vk_device_info_free)

/* Lists every physical device (a GPtrArray of HnVkDeviceInfo*, owning them).
 * Fails with HN_ERROR_NO_DEVICE when the loader or the devices are missing. */
GPtrArray *hn_vk_list_devices (GError **error);

/* The Vulkan instance version the loader offers, e.g. "1.3.239"; NULL when
 * there is no loader. */
char *hn_vk_loader_version (void);

/* The size of the device's largest device-local heap: the memory it offers. */
guint64 hn_vk_device_info_local_bytes (const HnVkDeviceInfo *info);

/* One device as JSON (an object): every field above, cooperative matrix shapes
 * as "16x16x16 f16*f16+f32->f32" strings and objects. */
JsonNode *hn_vk_device_info_to_json (const HnVkDeviceInfo *info);

/* ---------------------------------------------------------------- context */

typedef struct _HnVkContext HnVkContext;

/* Opens a device: index >= 0, or -1 for the best one (discrete > integrated >
 * virtual > cpu, then the larger device-local heap). With -1 the environment
 * variable HN_DEVICE (a selector, see below) is consulted first. */
HnVkContext *hn_vk_context_new (int device_index, GError **error);

/* Opens the device a selector names: NULL or "" = best, a number = index, a
 * 36-character UUID, or else a case-insensitive substring of the name. */
HnVkContext *hn_vk_context_new_for_selector (const char *selector, GError **error);

/* One context per entry of `indices` (as hn_vk_context_new: -1 = the best
 * device). An index may repeat: each entry is its own VkDevice, so "0,0"
 * gives two logical devices on one GPU (how the multi-device paths are
 * tested on one GPU or lavapipe). A GPtrArray owning the contexts. */
GPtrArray *hn_vk_contexts_new (const int *indices, guint n, GError **error);

/* The process-wide context for the device HN_DEVICE names (or the best one),
 * created on first use and shared, so the GUI, jobs and models do not each
 * open their own VkDevice. Returns a new reference; the context goes away
 * when the last one is dropped (and is recreated on the next call). */
HnVkContext *hn_vk_context_get_default (GError **error);

HnVkContext *hn_vk_context_ref (HnVkContext *ctx);
void hn_vk_context_unref (HnVkContext *ctx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnVkContext, hn_vk_context_unref)

const HnVkDeviceInfo *hn_vk_context_get_device_info (HnVkContext *ctx);

typedef struct {
  guint64 allocated_bytes;       /* live sub-allocations (tensors, scratch) */
  guint64 peak_allocated_bytes;  /* high-water mark of allocated_bytes since creation/reset */
  guint64 reserved_bytes;        /* device memory held in blocks */
  guint64 peak_reserved_bytes;
  guint n_blocks;
  guint n_allocations;
} HnVkMemoryStats;

void hn_vk_context_get_memory_stats (HnVkContext *ctx, HnVkMemoryStats *stats);
void hn_vk_context_reset_peak (HnVkContext *ctx);

/* Caps the device memory the context may allocate and reserve (0 = no cap).
 * Going over it is HN_ERROR_OUT_OF_MEMORY, exactly like a real
 * VK_ERROR_OUT_OF_DEVICE_MEMORY. */
void hn_vk_context_set_memory_limit (HnVkContext *ctx, guint64 bytes);

/* The most device memory one model can hold: the largest device-local heap,
 * or the memory limit above when one is set and smaller. Used to refuse a
 * model that cannot fit before anything is uploaded. */
guint64 hn_vk_context_get_capacity (HnVkContext *ctx);

/* Device-local memory this context can still get: with VK_EXT_memory_budget
 * the driver's budget minus what the whole system uses now, else the heap
 * size minus what this context holds; capped by the memory limit (set above
 * or by HN_VK_MEMORY_LIMIT, bytes with an optional K/M/G suffix, read when
 * the context is made). `total` is the largest device-local heap (or the
 * limit). */
typedef struct {
  guint64 total, free;
  gboolean from_budget; /* free came from VK_EXT_memory_budget */
} HnVkMemoryBudget;

void hn_vk_context_get_memory_budget (HnVkContext *ctx, HnVkMemoryBudget *out);

/* Largest single buffer a tensor can live in: min(maxStorageBufferRange,
 * maxMemoryAllocationSize). A tensor bigger than this fails closed with
 * HN_ERROR_UNSUPPORTED (we do not split bindings; the caller splits e.g. a
 * vocabulary matrix into row blocks). */
guint64 hn_vk_context_max_buffer_size (HnVkContext *ctx);

/* Writes the on-disk pipeline cache now (it is also written when the last
 * reference to the context goes). */
gboolean hn_vk_context_save_pipeline_cache (HnVkContext *ctx, GError **error);

/* TRUE when the cooperative-matrix (tensor core) matmul runs on this context:
 * the shaders are built in, the device has VK_KHR_cooperative_matrix with an
 * f16 16x16x16 -> f32 subgroup shape, and HN_NO_COOPMAT is unset. */
gboolean hn_vk_context_has_coopmat (HnVkContext *ctx);

/* TRUE when the VK_NV_cooperative_matrix2 matmul (workgroup-scope matrices,
 * tensor addressing) runs on this context: its shader is built in (glslang
 * >= 15), the device has the extension with the features it uses and an f16
 * x f16 -> f32 workgroup-scope shape, the KHR path is on, and HN_NO_COOPMAT2
 * is unset. *invocations (may be NULL) gets that shape's workgroup size. */
gboolean hn_vk_context_has_coopmat2 (HnVkContext *ctx, guint32 *invocations);
/* TRUE when 4x8-bit integer dot products are enabled (matvec_gguf_q8i). */
gboolean hn_vk_context_has_int_dot (HnVkContext *ctx);

/* TRUE when hn_vk_context_has_coopmat2 and the device's workgroup-scope
 * matrices also have row/column reductions (cooperativeMatrixReductions,
 * enabled then; HN_NO_CM2_REDUCE turns it off). */
gboolean hn_vk_context_has_coopmat2_reductions (HnVkContext *ctx);

/* TRUE when the device lists its f16 x f16 -> f32 workgroup-scope matrices
 * for nt invocations and an M x N x K product fits their granularity there
 * (what a tile from the environment must meet before a kernel is built on it). */
gboolean hn_vk_coopmat2_product_ok (const HnVkDeviceInfo *info, guint32 nt, guint32 m, guint32 n, guint32 k);

/* Which shaders are embedded (names), and whether the cooperative-matrix ones
 * were compiled in. */
const char *const *hn_vk_shader_names (void);
gboolean hn_vk_have_coopmat_shaders (void);

/* ---------------------------------------------------------------- buffers */

/* A sub-allocation of a device-local block. Refcounted; tensors hold one. */
typedef struct _HnVkBuffer HnVkBuffer;

/* `what` names the allocation for error messages ("tensor blk.0.attn_q"). */
HnVkBuffer *hn_vk_buffer_new (HnVkContext *ctx, guint64 size, const char *what, GError **error);
HnVkBuffer *hn_vk_buffer_ref (HnVkBuffer *buf);
void hn_vk_buffer_unref (HnVkBuffer *buf);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnVkBuffer, hn_vk_buffer_unref)
guint64 hn_vk_buffer_get_size (HnVkBuffer *buf);
HnVkContext *hn_vk_buffer_get_context (HnVkBuffer *buf);

/* Synchronous host <-> device copies (through a host-visible staging buffer,
 * or a plain memcpy on devices whose device-local memory is host-visible).
 * They wait for the device: do not call them while a submitted HnCmd that
 * touches the same bytes is running on another thread. */
gboolean hn_vk_buffer_upload (HnVkBuffer *buf, guint64 offset, const void *data, guint64 size, GError **error);
gboolean hn_vk_buffer_download (HnVkBuffer *buf, guint64 offset, void *data, guint64 size, GError **error);

/* ---------------------------------------------------------------- recording */

/* A recorder: one command buffer into which ops record dispatches. Barriers
 * are inserted only where a dispatch touches bytes written since the last
 * barrier (read-after-write, write-after-write) or writes bytes read since
 * then (write-after-read). */
typedef struct _HnCmd HnCmd;

HnCmd *hn_cmd_new (HnVkContext *ctx, GError **error);
void hn_cmd_free (HnCmd *cmd);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnCmd, hn_cmd_free)
HnVkContext *hn_cmd_get_context (HnCmd *cmd);

/* A storage-buffer binding: the whole sub-allocation `buf` is bound (its
 * start is aligned for any binding), `offset`/`size` are the bytes this
 * dispatch actually reads or writes (for hazard tracking; size 0 = all). */
typedef struct {
  HnVkBuffer *buf;
  guint64 offset, size;
  gboolean write;
} HnVkBinding;

/* Records one dispatch of the embedded shader `shader` (its file name
 * without .comp), with specialization constants 0..n_spec-1, storage buffers
 * at bindings 0..n_bindings-1 of set 0 and `push_size` bytes (<= 128) of push
 * constants. Pipelines are created on first use and cached. Group counts
 * above the device limit fail with HN_ERROR_INVALID_ARGUMENT. */
gboolean hn_cmd_dispatch (HnCmd *cmd, const char *shader,
                          const guint32 *spec, guint n_spec,
                          const HnVkBinding *bindings, guint n_bindings,
                          const void *push, guint push_size,
                          guint32 groups_x, guint32 groups_y, guint32 groups_z,
                          GError **error);

/* A device buffer of at least `bytes` for an op's intermediate (the f16 copy
 * of an operand), owned by the recorder. The same buffer comes back to the
 * next caller whose request fits, so two ops of one recording share it: bind
 * it with its byte range and the hazard tracking orders the reuse. A buffer
 * outgrown by a later request stays alive until the recording is submitted,
 * reset or freed. */
HnVkBuffer *hn_cmd_scratch (HnCmd *cmd, guint64 bytes, GError **error);
/* Buffers apart from hn_cmd_scratch's (an op may use both at once) for the
 * f16 form of a quantized weight (tensor/ops-quant.c): each call returns the
 * next of HN_WEIGHT_SCRATCH_SLOTS slots in turn, so up to that many such
 * weights can be live at once (matmul_glu's gate and up). */
#define HN_WEIGHT_SCRATCH_SLOTS 3
HnVkBuffer *hn_cmd_scratch_weight (HnCmd *cmd, guint64 bytes, GError **error);

/* Names the op the following dispatches belong to, for profiling (until the
 * next call; NULL = use the shader name). */
void hn_cmd_set_label (HnCmd *cmd, const char *label);

/* How the matmuls recorded into this recorder compute (hn_op_matmul,
 * hn_op_bmm and so hn_op_matmul_back; see hn-ops.h). HN_AUTOCAST_F16 is
 * PyTorch's fp16 autocast (--precision fp16 training): both operands are
 * rounded to f16 and each result to f16, with f32 accumulation, on the
 * tensor cores where the device has cooperative matrices and in the scalar
 * kernel otherwise (same numbers). Every other op is unchanged (f32).
 * Stays until changed; a new recorder starts with HN_AUTOCAST_NONE. */
typedef enum {
  HN_AUTOCAST_NONE,
  HN_AUTOCAST_F16,
} HnAutocast;

void hn_cmd_set_autocast (HnCmd *cmd, HnAutocast mode);
HnAutocast hn_cmd_get_autocast (HnCmd *cmd);

/* Ends, submits and waits (a device timeout or loss is HN_ERROR_DEVICE_LOST).
 * The recorder is then empty and can record again. Submitting an empty
 * recorder is a no-op. */
gboolean hn_cmd_submit_wait (HnCmd *cmd, GError **error);

/* Starts what was recorded so far on the device and goes on recording into
 * another command buffer (the device works while the host records the
 * rest); hn_cmd_submit_wait then waits for all of it. The host must not
 * change, before that wait, what the flushed part reads. A no-op for a
 * reusable recorder or an empty one. */
gboolean hn_cmd_flush (HnCmd *cmd, GError **error);

/* Drops what was recorded (or finished) without running it (what was
 * flushed has run: this waits for it). */
void hn_cmd_reset (HnCmd *cmd);

/* Recorded once, run many times (a decode step): call hn_cmd_set_reusable
 * on a fresh or reset recorder, record, hn_cmd_finish, then hn_cmd_replay
 * runs the same command buffer `times` times back to back (each run sees
 * the previous one's writes) and waits. Push constants are frozen at
 * recording, so what changes per run (positions, tokens) must live in
 * buffers the shaders read. The buffers bound must outlive the recording;
 * the next dispatch or hn_cmd_reset starts over. With profiling on, the
 * timestamps of the last run are read back. */
void hn_cmd_set_reusable (HnCmd *cmd);
gboolean hn_cmd_finish (HnCmd *cmd, GError **error);
gboolean hn_cmd_is_finished (HnCmd *cmd);
gboolean hn_cmd_replay (HnCmd *cmd, guint times, GError **error);

/* Number of dispatches and barriers recorded since the last submit/reset. */
guint hn_cmd_get_n_dispatches (HnCmd *cmd);
guint hn_cmd_get_n_barriers (HnCmd *cmd);

/* Profiling: when on, each dispatch is bracketed by timestamps; after
 * submit_wait the entries of the last submission can be read. */
typedef struct {
  const char *name;       /* the label or shader name (owned by the recorder) */
  double microseconds;
} HnCmdProfileEntry;

void hn_cmd_set_profiling (HnCmd *cmd, gboolean enabled);
/* Whether dispatches recorded now get timestamps (a reusable recording made
 * without them has none when replayed). */
gboolean hn_cmd_get_profiling (HnCmd *cmd);
const HnCmdProfileEntry *hn_cmd_get_profile (HnCmd *cmd, guint *n_entries);
/* Microseconds from the first timed dispatch's start to the last one's end
 * in the last profiled submission (the sum of the entries plus the gaps). */
double hn_cmd_get_profile_span_us (HnCmd *cmd);

G_END_DECLS
