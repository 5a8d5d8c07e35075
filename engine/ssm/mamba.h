/* State-space decoders on Vulkan (issue 25): Mamba (v1), Falcon-Mamba and
 * Mamba-2, as transformers' MambaForCausalLM / FalconMambaForCausalLM /
 * Mamba2ForCausalLM compute them without CUDA kernels (Mamba's sequential
 * selective scan; Mamba-2's SSD, which transformers sums in chunks and this
 * graph by the same recurrence, step by step).
 *
 *   g_autoptr (HnMamba) m = hn_mamba_load (ctx, "model-dir", &error);
 *   hn_mamba_logits (m, ids, n, logits, &error);                  // [n, vocab]
 *   r = hn_mamba_generate (m, &options, prompt, n_prompt, ...);   // greedy, sampling or beams
 *
 * Each layer: x += out_proj(scan(conv(in_proj_x(n)), dt_proj(x_proj_dt), x_proj_B, x_proj_C) ·
 * silu(in_proj_z(n))) with n = rmsnorm(x); falcon_mamba RMS-normalises (no weight) the dt, B and C
 * projections. Mamba-2: in_proj gives z, x, B, C and dt (one per head); x, B and C go through the
 * conv, the scan runs per head (A, dt, D per head, B and C per group), then
 * out_proj(rmsnorm(y · silu(z))). Generation carries each layer's conv state [rows, K - 1, I]
 * (Mamba-2: also its B and C parts) and SSM state [rows, I, N] instead of a KV cache (their size
 * does not grow with the context).
 *
 * RWKV-4 (model_type rwkv, RwkvForCausalLM) runs here too, one recurrent/rwkv-mixer.h block per
 * layer between blocks.0.pre_ln and ln_out; its sessions carry the two token-shift states
 * [rows, 1, C] and the WKV state [rows, 3, A] (num, den, max) per layer. */
#pragma once
#include <gio/gio.h>
#include <stdint.h>

#include "formats/model-config.h"
#include "generate/generate.h"
#include "transformer/registry.h"
#include "tensor/hn-tensor.h"

G_BEGIN_DECLS

typedef struct _HnMamba HnMamba;

typedef struct {
  int vocab, hidden, n_layer, inner, state, conv_kernel, dt_rank;
  float norm_eps;
  gboolean bc_dt_norm; /* falcon_mamba: B, C and dt RMS-normed with mixer_rms_eps */
  float mixer_eps;
  gboolean tie_embeddings;
  /* Mamba-2 */
  gboolean mamba2;
  int n_heads, head_dim, n_groups; /* inner = n_heads · head_dim */
  gboolean dt_limit;               /* time_step_limit other than (0, inf) */
  float dt_min, dt_max;
  /* RWKV-4 (model_type rwkv; inner = attention_hidden_size, the Mamba fields unused) */
  gboolean rwkv;
  int att_size, ffn_size; /* attention_hidden_size, intermediate_size */
  int rescale_every;      /* 0: none */
} HnMambaHParams;

/* The hyper-parameters config.json gives (its model_type a registered state-space decoder), without
 * loading weights (memory estimates); errors name the key. */
gboolean hn_mamba_hparams_resolve (HnMambaHParams *h, const HnModelConfig *cfg, GError **error);
/* Device bytes of one sequence's recurrent state (every layer's conv and SSM states). */
guint64 hn_mamba_hparams_state_bytes (const HnMambaHParams *h);

HnMamba *hn_mamba_load (HnVkContext *ctx, const char *model_dir, GError **error);
void hn_mamba_free (HnMamba *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnMamba, hn_mamba_free)

const HnArchInfo *hn_mamba_get_arch (HnMamba *m);
const HnMambaHParams *hn_mamba_get_hparams (HnMamba *m);
guint64 hn_mamba_get_weight_bytes (HnMamba *m);
/* Bytes of the recurrent state of one sequence (every layer's conv and SSM state). */
guint64 hn_mamba_state_bytes_per_row (HnMamba *m);

/* Logits [n, vocab] of every position of one sequence (from a zero state). */
gboolean hn_mamba_logits (HnMamba *m, const int32_t *ids, int n, float *logits, GError **error);

/* ---- generation: each row (beam) carries its layers' conv + SSM states */

typedef struct _HnMambaSession HnMambaSession;

/* A session of up to max_rows sequences; prompts run in chunks of up to max_chunk tokens. */
HnMambaSession *hn_mamba_session_new (HnMamba *m, int max_rows, int max_chunk, GError **error);
void hn_mamba_session_free (HnMambaSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnMambaSession, hn_mamba_session_free)
const HnLmOps *hn_mamba_session_lm_ops (void);
guint64 hn_mamba_session_get_bytes (HnMambaSession *s);
/* Per-dispatch timestamps of the session's steps (benchmark --profile). */
void hn_mamba_session_set_profiling (HnMambaSession *s, gboolean enabled);
const HnCmdProfileEntry *hn_mamba_session_get_profile (HnMambaSession *s, guint *n_entries);

HnGenerateResult *hn_mamba_generate (HnMamba *m, const HnGenerateOptions *opt, const int32_t *prompt, int n_prompt,
                                     HnDecodeFunc decode, gpointer decode_data, HnTokenFunc on_token,
                                     gpointer token_data, GCancellable *cancellable, GError **error);

G_END_DECLS
