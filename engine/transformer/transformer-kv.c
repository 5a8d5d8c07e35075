/* Generation sessions: the contiguous KV cache (one [max_ctx] block per row
 * and layer, allocated once), the paged cache (one arena of 16-token pages
 * per layer shared by every row through per-row page tables, with a free
 * list; rows of different lengths decode in one forward) and the no-cache
 * mode that recomputes the whole prefix each step, all behind HnLmOps. Beam
 * reordering copies contiguous cache rows into a second set of buffers and
 * swaps them.
 *
 * A model split across devices (hn_transformer_load_split) runs as stages:
 * each stage records its layers on its own device, with its own activations
 * and the K/V caches of its layers there; at a boundary the residual stream
 * [tokens, hidden] is downloaded and uploaded into the next stage. The paged
 * cache and the replayed one-row step serve a model on one device. */
#include "base/hn-error.h"
#include "transformer/transformer-private.h"

#include <string.h>

typedef struct {
  HnTransformer *m;            /* this stage's part of the model */
  HnTransformerActs *acts;
  HnCmd *cmd;
} Stage;

struct _HnTransformerSession {
  HnTransformer *m;  /* stage 0 (hyper-parameters, embeddings) */
  guint n_stages;
  Stage *st;
  float *x_host;     /* [max_tokens, hidden] hand-over between stages (split models) */
  HnKvCacheMode mode;
  int max_rows, max_ctx;
  int n_rows;
  HnLayerKv *kv;     /* [n_layer]: k, v [max_rows, max_ctx, KVH, D] */
  HnLayerKv *kv_alt; /* the same, for reordering (max_rows > 1) */
  int *len;          /* [max_rows] tokens in each row */
  GArray **hist;     /* [max_rows] token history (no-cache mode recomputes from it) */
  int max_tokens;    /* activation rows of every stage */
  /* one-row contiguous sessions: a decode step recorded once and replayed per token, reading
   * token/position/cache row from `state` (i32 [HN_STEP_TOKENS + max_ctx]) */
  HnCmd *step_cmd;
  HnTensor *state;
  gboolean profiling;
  float *row_logits; /* [max_rows, vocab] host staging */
  int32_t *ids_host, *pos_host; /* [max_tokens] */
  guint64 bytes;
  int chunk;         /* tokens per prefill forward */
  /* paged: kv[il] are arenas [n_pages * HN_KV_PAGE_SIZE, KVH, D] */
  int n_pages, max_pages;          /* pool size; page-table width (pages of max_ctx) */
  int *pages;                      /* [max_rows, max_pages] physical page of each logical page */
  int *n_row_pages;                /* [max_rows] pages each row holds */
  int *free_list, n_free;          /* a stack of free pages */
  HnTensor *pt_dev, *sl_dev, *slot_dev; /* i32 [max_rows, max_pages], [max_rows], [max_tokens] */
  int32_t *pt_host, *sl_host, *slot_host;
};

#define PREFILL_CHUNK 512

gboolean
hn_kv_cache_mode_from_string (const char *s, HnKvCacheMode *out, GError **error)
{
  if (!s || !*s || strcmp (s, "dynamic") == 0 || strcmp (s, "static") == 0 || strcmp (s, "contiguous") == 0)
    *out = HN_KV_CACHE_CONTIGUOUS;
  else if (strcmp (s, "none") == 0 || strcmp (s, "off") == 0)
    *out = HN_KV_CACHE_NONE;
  else if (strcmp (s, "paged") == 0)
    *out = HN_KV_CACHE_PAGED;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "cache implementation \"%s\" is not supported (use dynamic/contiguous, paged, or none)", s);
      return FALSE;
    }
  return TRUE;
}

const char *
hn_kv_cache_mode_name (HnKvCacheMode mode)
{
  switch (mode)
    {
    case HN_KV_CACHE_CONTIGUOUS: return "contiguous";
    case HN_KV_CACHE_NONE: return "none";
    case HN_KV_CACHE_PAGED: return "paged";
    }
  return "?";
}

static void
free_kv (HnLayerKv *kv, int n)
{
  for (int i = 0; kv && i < n; i++)
    {
      g_clear_pointer (&kv[i].k, hn_tensor_unref);
      g_clear_pointer (&kv[i].v, hn_tensor_unref);
      g_clear_pointer (&kv[i].ssm.conv, hn_tensor_unref);
      g_clear_pointer (&kv[i].ssm.convB, hn_tensor_unref);
      g_clear_pointer (&kv[i].ssm.convC, hn_tensor_unref);
      g_clear_pointer (&kv[i].ssm.ssm, hn_tensor_unref);
    }
  g_free (kv);
}

/* A hybrid's layer with a Mamba mixer or a short convolution: it keeps a recurrent state. */
static gboolean
is_state_layer (const HnTransformerHParams *hp, int il)
{
  return hp->layer_mixer && (hp->layer_mixer[il] == HN_MIXER_MAMBA2 || hp->layer_mixer[il] == HN_MIXER_PARALLEL ||
                             hp->layer_mixer[il] == HN_MIXER_MAMBA1 || hp->layer_mixer[il] == HN_MIXER_SHORTCONV ||
                             hp->layer_mixer[il] == HN_MIXER_DELTANET || hp->layer_mixer[il] == HN_MIXER_RGLRU);
}

/* A layer with attention (every layer but a hybrid's Mamba-2 and MLP-only layers): it keeps K/V. */
static gboolean
is_kv_layer (const HnTransformerHParams *hp, int il)
{
  return !hp->layer_mixer || hp->layer_mixer[il] == HN_MIXER_ATTENTION || hp->layer_mixer[il] == HN_MIXER_PARALLEL;
}

/* The state tensors of a state layer, as an array (conv, convB, convC: NULL when the kernel is 1). */
static void
state_parts (HnSsmState *st, HnTensor ***out)
{
  out[0] = &st->conv;
  out[1] = &st->convB;
  out[2] = &st->convC;
  out[3] = &st->ssm;
}

/* One state layer's states of max_rows rows: conv [rows, K - 1, I], convB/convC [rows, K - 1, G·N],
 * ssm [rows, I, N]; a short convolution's conv [rows, K - 1, W] alone. */
static gboolean
alloc_state (HnTransformerSession *s, HnVkContext *ctx, const char *what, int il, HnSsmState *st, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  const HnMamba2Dims *d = &hp->ssm;
  gboolean v1 = hp->layer_mixer[il] == HN_MIXER_MAMBA1; /* Mamba (v1): no B and C channels in the conv */
  gboolean sc = hp->layer_mixer[il] == HN_MIXER_SHORTCONV; /* lfm2: the conv's inputs, no SSM state */
  gint64 K1 = hp->ssm_conv_kernel - 1, GN = (gint64) d->n_groups * d->state;
  gint64 I = sc ? hp->sconv.width : v1 ? hp->ssm1.inner : d->inner, N = v1 ? hp->ssm1.state : d->state;
  gint64 shapes[4][3] = { { s->max_rows, K1, I }, { s->max_rows, K1, GN }, { s->max_rows, K1, GN },
                          { s->max_rows, I, N } };
  if (hp->layer_mixer[il] == HN_MIXER_DELTANET)
    {
      /* gated DeltaNet: the conv's q|k|v inputs and the delta rule's state [rows, HV · DK, DV] */
      const HnDeltaNetDims *dn = &hp->dnet;
      shapes[0][2] = hn_deltanet_conv_dim (dn);
      shapes[3][1] = (gint64) dn->n_v_heads * dn->k_dim;
      shapes[3][2] = dn->v_dim;
      v1 = TRUE; /* no B and C channels */
    }
  if (hp->layer_mixer[il] == HN_MIXER_RGLRU)
    {
      /* Griffin's recurrent block: the conv's inputs [rows, K - 1, L] and the RG-LRU's h [rows, 1, L] */
      shapes[0][2] = hp->rglru.lru;
      shapes[3][1] = 1;
      shapes[3][2] = hp->rglru.lru;
      v1 = TRUE; /* no B and C channels */
    }
  static const char *const names[4] = { "conv", "conv_B", "conv_C", "ssm" };
  HnTensor **parts[4];
  state_parts (st, parts);
  for (int k = K1 > 0 ? 0 : 3; k < 4; k++)
    {
      if ((v1 || sc) && (k == 1 || k == 2))
        continue;
      if (sc && k == 3)
        break;
      g_autofree char *n = g_strdup_printf ("%s.%d.%s", what, il, names[k]);
      if (!(*parts[k] = hn_tensor_new_named (ctx, n, HN_DTYPE_F32, 3, shapes[k], error)))
        return FALSE;
      s->bytes += hn_tensor_nbytes (*parts[k]);
    }
  return TRUE;
}

void
hn_transformer_session_free (HnTransformerSession *s)
{
  if (!s)
    return;
  int L = s->m->hp.n_layer;
  free_kv (s->kv, L);
  free_kv (s->kv_alt, L);
  for (int r = 0; s->hist && r < s->max_rows; r++)
    if (s->hist[r])
      g_array_unref (s->hist[r]);
  g_free (s->hist);
  g_free (s->len);
  for (guint i = 0; s->st && i < s->n_stages; i++)
    {
      g_clear_pointer (&s->st[i].acts, hn_transformer_acts_free);
      g_clear_pointer (&s->st[i].cmd, hn_cmd_free);
    }
  g_free (s->st);
  g_free (s->x_host);
  g_clear_pointer (&s->step_cmd, hn_cmd_free);
  g_clear_pointer (&s->state, hn_tensor_unref);
  g_free (s->row_logits);
  g_free (s->ids_host);
  g_free (s->pos_host);
  g_free (s->pages);
  g_free (s->n_row_pages);
  g_free (s->free_list);
  g_clear_pointer (&s->pt_dev, hn_tensor_unref);
  g_clear_pointer (&s->sl_dev, hn_tensor_unref);
  g_clear_pointer (&s->slot_dev, hn_tensor_unref);
  g_free (s->pt_host);
  g_free (s->sl_host);
  g_free (s->slot_host);
  g_free (s);
}

/* The stage that runs layer il. */
static Stage *
stage_of (HnTransformerSession *s, int il)
{
  for (guint i = 0; i < s->n_stages; i++)
    {
      int l0, l1;
      hn_transformer_get_stage (s->m, i, &l0, &l1);
      if (il >= l0 && il < l1)
        return &s->st[i];
    }
  g_assert_not_reached ();
}

static HnLayerKv *
alloc_kv (HnTransformerSession *s, const char *what, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  int L = hp->n_layer;
  HnLayerKv *kv = g_new0 (HnLayerKv, L);
  gboolean paged = s->mode == HN_KV_CACHE_PAGED;
  for (int i = 0; i < L; i++)
    {
      gint64 kvh = hn_transformer_layer_kv_heads (hp, i);
      gint64 d = hn_transformer_layer_head_dim (hp, i), dv = hn_transformer_layer_v_head_dim (hp, i);
      gint64 shape[4] = { s->max_rows, s->max_ctx, kvh, d };
      gint64 vshape[4] = { s->max_rows, s->max_ctx, kvh, dv };
      gint64 arena[3] = { (gint64) s->n_pages * HN_KV_PAGE_SIZE, kvh, d };
      gint64 varena[3] = { (gint64) s->n_pages * HN_KV_PAGE_SIZE, kvh, dv };
      g_autofree char *kn = g_strdup_printf ("%s.%d.k", what, i);
      g_autofree char *vn = g_strdup_printf ("%s.%d.v", what, i);
      HnVkContext *ctx = stage_of (s, i)->m->ctx; /* the cache lives where its layer runs */
      if (is_state_layer (hp, i))
        {
          if (!alloc_state (s, ctx, what, i, &kv[i].ssm, error))
            {
              free_kv (kv, L);
              return NULL;
            }
        }
      if (!is_kv_layer (hp, i))
        continue;
      kv[i].k = hn_tensor_new_named (ctx, kn, HN_DTYPE_F32, paged ? 3 : 4, paged ? arena : shape, error);
      kv[i].v = kv[i].k ? hn_tensor_new_named (ctx, vn, HN_DTYPE_F32, paged ? 3 : 4, paged ? varena : vshape, error)
                        : NULL;
      if (!kv[i].v)
        {
          free_kv (kv, L);
          return NULL;
        }
      s->bytes += hn_tensor_nbytes (kv[i].k) + hn_tensor_nbytes (kv[i].v);
    }
  return kv;
}

/* The page pool: every page free, no row holding any. */
static void
pages_reset (HnTransformerSession *s)
{
  s->n_free = s->n_pages;
  for (int i = 0; i < s->n_pages; i++)
    s->free_list[i] = s->n_pages - 1 - i; /* pops 0, 1, 2, ... */
  memset (s->n_row_pages, 0, sizeof (int) * (gsize) s->max_rows);
}

static gboolean
paged_alloc (HnTransformerSession *s, int max_tokens, GError **error)
{
  HnVkContext *ctx = s->m->ctx;
  s->pages = g_new0 (int, (gsize) s->max_rows * s->max_pages);
  s->n_row_pages = g_new0 (int, s->max_rows);
  s->free_list = g_new (int, s->n_pages);
  pages_reset (s);
  s->pt_host = g_new0 (int32_t, (gsize) s->max_rows * s->max_pages);
  s->sl_host = g_new0 (int32_t, s->max_rows);
  s->slot_host = g_new0 (int32_t, max_tokens);
  s->pt_dev = hn_tensor_new_named (ctx, "kv.page_table", HN_DTYPE_I32, 2, (gint64[]) { s->max_rows, s->max_pages }, error);
  s->sl_dev = s->pt_dev ? hn_tensor_new_named (ctx, "kv.seq_lens", HN_DTYPE_I32, 1, (gint64[]) { s->max_rows }, error) : NULL;
  s->slot_dev = s->sl_dev ? hn_tensor_new_named (ctx, "kv.slots", HN_DTYPE_I32, 1, (gint64[]) { max_tokens }, error) : NULL;
  return s->slot_dev != NULL;
}

/* Whether the model's attention can read a paged cache (no ALiBi, head dims the kernel takes). */
static gboolean
check_pageable (HnTransformer *m, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (hp->layer_mixer)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: the paged KV cache cannot hold the recurrent state of its Mamba or convolution layers; use "
                   "--cache-implementation contiguous", hp->arch->model_type);
      return FALSE;
    }
  if (hp->alibi || hp->head_dim > 256 || hp->v_head_dim > 256)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: the paged KV cache cannot serve this model's attention (%s); use --cache-implementation contiguous",
                   hp->arch->model_type, hp->alibi ? "ALiBi position biases" : "head dim above 256");
      return FALSE;
    }
  return TRUE;
}

static HnTransformerSession *
session_new (HnTransformer *m, HnKvCacheMode mode, int max_rows, int max_ctx, int n_pages, GError **error)
{
  const HnTransformerHParams *hp = &m->hp;
  if (mode == HN_KV_CACHE_PAGED && !check_pageable (m, error))
    return NULL;
  if (mode == HN_KV_CACHE_PAGED && hn_transformer_get_n_stages (m) > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "the paged KV cache serves a model on one device; a model split across devices (--device-indices) "
                   "uses the contiguous cache");
      return NULL;
    }
  if (max_rows < 1 || max_ctx < 1 || n_pages < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "a session needs at least one row and one token");
      return NULL;
    }
  if (hp->ctx_limit > 0 && max_ctx > hp->ctx_limit)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%d tokens: %s scales its queries (llama_4_scaling_beta) past %d tokens, which is not built",
                   max_ctx, hp->arch->model_type, hp->ctx_limit);
      return NULL;
    }
  int pos_limit = hp->learned_pos ? (int) m->w.pos_embed->shape[0] - hp->pos_offset : hp->max_positions;
  if (hp->learned_pos && max_ctx > pos_limit)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%d tokens exceed the model's %d learned positions", max_ctx, pos_limit);
      return NULL;
    }
  HnTransformerSession *s = g_new0 (HnTransformerSession, 1);
  s->m = m;
  s->mode = mode;
  s->max_rows = max_rows;
  s->max_ctx = max_ctx;
  s->max_pages = (max_ctx + HN_KV_PAGE_SIZE - 1) / HN_KV_PAGE_SIZE;
  s->n_pages = n_pages > 0 ? n_pages : max_rows * s->max_pages;
  s->len = g_new0 (int, max_rows);
  s->hist = g_new0 (GArray *, max_rows);
  for (int r = 0; r < max_rows; r++)
    s->hist[r] = g_array_new (FALSE, FALSE, sizeof (int32_t));
  /* prefills (and no-cache recomputes) run in chunks of PREFILL_CHUNK tokens, so activations stay
   * bounded for long contexts; a decode step takes one token of every row */
  int max_tokens = MAX (MIN (max_ctx, PREFILL_CHUNK), max_rows);
  s->max_tokens = max_tokens;
  s->chunk = MIN (max_ctx, PREFILL_CHUNK);
  s->n_stages = hn_transformer_get_n_stages (m);
  s->st = g_new0 (Stage, s->n_stages);
  for (guint i = 0; i < s->n_stages; i++)
    {
      Stage *st = &s->st[i];
      st->m = hn_transformer_get_stage (m, i, NULL, NULL);
      if (!(st->acts = hn_transformer_acts_new (st->m, max_tokens, max_rows, error)) ||
          !(st->cmd = hn_cmd_new (st->m->ctx, error)))
        {
          hn_transformer_session_free (s);
          return NULL;
        }
    }
  if (s->n_stages > 1)
    s->x_host = g_new (float, (gsize) max_tokens * hp->hidden);
  /* the replayed one-row step records the whole model into one command buffer: one device only */
  if (!(s->kv = alloc_kv (s, "kv", error)) ||
      (max_rows > 1 && mode == HN_KV_CACHE_CONTIGUOUS && !(s->kv_alt = alloc_kv (s, "kv-alt", error))) ||
      (mode == HN_KV_CACHE_PAGED && !paged_alloc (s, max_tokens, error)) ||
      (max_rows == 1 && mode == HN_KV_CACHE_CONTIGUOUS && s->n_stages == 1 &&
       (!(s->step_cmd = hn_cmd_new (m->ctx, error)) ||
        !(s->state = hn_tensor_new_named (m->ctx, "session.step", HN_DTYPE_I32, 1,
                                          (gint64[]) { HN_STEP_TOKENS + max_ctx }, error)))))
    {
      hn_transformer_session_free (s);
      return NULL;
    }
  s->row_logits = g_new (float, (gsize) max_rows * hp->vocab);
  s->ids_host = g_new (int32_t, max_tokens);
  s->pos_host = g_new (int32_t, max_tokens);
  return s;
}

HnTransformerSession *
hn_transformer_session_new (HnTransformer *m, HnKvCacheMode mode, int max_rows, int max_ctx, GError **error)
{
  return session_new (m, mode, max_rows, max_ctx, 0, error);
}

HnTransformerSession *
hn_transformer_session_new_paged (HnTransformer *m, int max_rows, int max_ctx, int n_pages, GError **error)
{
  if (n_pages < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "a paged KV cache needs at least one page (got %d)", n_pages);
      return NULL;
    }
  return session_new (m, HN_KV_CACHE_PAGED, max_rows, max_ctx, n_pages, error);
}

gboolean
hn_transformer_check_pageable (HnTransformer *m, GError **error)
{
  return check_pageable (m, error);
}

int
hn_transformer_session_get_free_pages (HnTransformerSession *s)
{
  return s->mode == HN_KV_CACHE_PAGED ? s->n_free : 0;
}

int
hn_transformer_session_get_n_pages (HnTransformerSession *s)
{
  return s->mode == HN_KV_CACHE_PAGED ? s->n_pages : 0;
}

gboolean
hn_transformer_session_set_prefill_chunk (HnTransformerSession *s, int n_tokens, GError **error)
{
  if (n_tokens < 1 || n_tokens > s->max_tokens)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "prefill chunk %d outside 1..%d", n_tokens,
                   s->max_tokens);
      return FALSE;
    }
  s->chunk = n_tokens;
  return TRUE;
}

guint64
hn_transformer_session_get_bytes (HnTransformerSession *s)
{
  return s->bytes;
}

/* Records stage `st`'s part of a forward over kvs (embeddings on the first
 * stage, the head on the last) and runs it (one submit). */
static gboolean
run_stage (HnTransformerSession *s, Stage *st, gboolean last, const HnLayerKv *kvs, int B, int T, int pos0,
           GError **error)
{
  HnTransformerActs *a = st->acts;
  int N = B * T;
  g_autoptr (HnTensor) ids = hn_tensor_view_rows (a->ids, 0, N, error);
  g_autoptr (HnTensor) pos = ids ? hn_tensor_view_rows (a->pos, 0, N, error) : NULL;
  if (!pos || (st->m->layer0 == 0 && !hn_tensor_upload_i32 (ids, s->ids_host, (gsize) N, error)) ||
      !hn_tensor_upload_i32 (pos, s->pos_host, (gsize) N, error))
    return FALSE;
  gboolean ok = st->m->layer0 > 0 || hn_transformer_record_embed (st->m, st->cmd, a, N, error);
  for (int il = st->m->layer0; ok && il < st->m->layer1; il++)
    {
      ok = hn_transformer_record_layer (st->m, st->cmd, a, il, &kvs[il], B, T, pos0, error);
      /* a prefill: the device starts on each layer while the host records the next */
      if (ok && hn_transformer_flush_layers (N))
        ok = hn_cmd_flush (st->cmd, error);
    }
  /* the last token of each row: rows T-1, 2T-1, ... are contiguous only for T == 1 */
  if (ok && last && T == 1)
    ok = hn_transformer_record_head (st->m, st->cmd, a, 0, B, error);
  else if (ok && last && B == 1)
    ok = hn_transformer_record_head (st->m, st->cmd, a, T - 1, 1, error);
  else if (ok && last)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "several rows of several tokens in one forward");
      ok = FALSE;
    }
  if (!ok)
    {
      hn_cmd_reset (st->cmd);
      hn_transformer_acts_drop_views (a);
      return FALSE;
    }
  ok = hn_cmd_submit_wait (st->cmd, error);
  hn_transformer_acts_drop_views (a);
  return ok;
}

/* Uploads ids_host/pos_host, runs the forward of B rows of T tokens over kvs
 * stage by stage and downloads the logits of the last token of each row into
 * `logits` [B, vocab]. */
static gboolean
run_forward (HnTransformerSession *s, const HnLayerKv *kvs, int B, int T, int pos0, float *logits, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  int N = B * T;
  for (guint i = 0; i < s->n_stages; i++)
    {
      gboolean last = i + 1 == s->n_stages;
      if (!run_stage (s, &s->st[i], last, kvs, B, T, pos0, error))
        return FALSE;
      if (last)
        break;
      /* hand the residual stream [N, hidden] to the next device */
      gsize n = (gsize) N * hp->hidden;
      g_autoptr (HnTensor) from = hn_tensor_view_rows (s->st[i].acts->x, 0, N, error);
      g_autoptr (HnTensor) to = from ? hn_tensor_view_rows (s->st[i + 1].acts->x, 0, N, error) : NULL;
      if (!to || !hn_tensor_download_f32 (from, s->x_host, n, error) || !hn_tensor_upload_f32 (to, s->x_host, n, error))
        return FALSE;
    }
  g_autoptr (HnTensor) lg = hn_tensor_view_rows (s->st[s->n_stages - 1].acts->logits, 0, B, error);
  return lg && hn_tensor_download_f32 (lg, logits, (gsize) B * hp->vocab, error);
}

/* Views of rows [row0, row0 + n) of a state layer's states (kept in views). */
static gboolean
state_views (HnSsmState *st, int row0, int n, HnSsmState *out, GPtrArray *views, GError **error)
{
  HnTensor **from[4], **to[4];
  state_parts (st, from);
  state_parts (out, to);
  for (int k = 0; k < 4; k++)
    {
      *to[k] = NULL;
      if (!*from[k])
        continue;
      if (!(*to[k] = hn_tensor_view_rows (*from[k], row0, n, error)))
        return FALSE;
      g_ptr_array_add (views, *to[k]);
    }
  return TRUE;
}

/* Zeroes the recurrent states of rows [row0, row0 + n) (a row starting over). */
static gboolean
zero_states (HnTransformerSession *s, int row0, int n, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  if (!hp->layer_mixer)
    return TRUE;
  g_autoptr (GPtrArray) views = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  gboolean ok = TRUE;
  for (int il = 0; ok && il < hp->n_layer; il++)
    {
      if (!is_state_layer (hp, il))
        continue;
      HnSsmState v;
      HnTensor **parts[4];
      ok = state_views (&s->kv[il].ssm, row0, n, &v, views, error);
      state_parts (&v, parts);
      for (int k = 0; ok && k < 4; k++)
        ok = !*parts[k] || hn_op_fill (stage_of (s, il)->cmd, *parts[k], 0.0f, error);
    }
  for (guint i = 0; i < s->n_stages; i++)
    if (!ok)
      hn_cmd_reset (s->st[i].cmd);
    else
      ok = hn_cmd_submit_wait (s->st[i].cmd, error);
  return ok;
}

/* Contiguous: B rows (cache rows first_row..first_row+B) of T tokens at position pos0. */
static gboolean
forward (HnTransformerSession *s, int first_row, int B, int T, int pos0, float *logits, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  if (pos0 + T > s->max_ctx)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "the sequence would grow to %d tokens, beyond the session's context of %d", pos0 + T, s->max_ctx);
      return FALSE;
    }
  g_autofree HnLayerKv *kvs = g_new0 (HnLayerKv, hp->n_layer);
  g_autoptr (GPtrArray) views = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  for (int il = 0; il < hp->n_layer; il++)
    {
      if (is_state_layer (hp, il))
        {
          if (!state_views (&s->kv[il].ssm, first_row, B, &kvs[il].ssm, views, error))
            return FALSE;
        }
      if (!is_kv_layer (hp, il))
        continue;
      HnTensor *k = hn_tensor_view_rows (s->kv[il].k, first_row, B, error);
      HnTensor *v = k ? hn_tensor_view_rows (s->kv[il].v, first_row, B, error) : NULL;
      if (k)
        g_ptr_array_add (views, k);
      if (v)
        g_ptr_array_add (views, v);
      if (!v)
        return FALSE;
      kvs[il].k = k;
      kvs[il].v = v;
    }
  return run_forward (s, kvs, B, T, pos0, logits, error);
}

/* Paged: T new tokens of each of rows[0..B) (T > 1 only for one row), each row at its own
 * length. Takes the pages the new tokens need from the free list, writes the rows' page
 * tables, lengths and the arena slot of every new token, and grows the rows on success. */
static gboolean
forward_paged (HnTransformerSession *s, const int *rows, int B, int T, float *logits, GError **error)
{
  const HnTransformerHParams *hp = &s->m->hp;
  const int P = HN_KV_PAGE_SIZE, MP = s->max_pages;
  for (int b = 0; b < B; b++)
    {
      int r = rows[b], need = s->len[r] + T;
      if (need > s->max_ctx)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "the sequence would grow to %d tokens, beyond the session's context of %d", need, s->max_ctx);
          return FALSE;
        }
      while (s->n_row_pages[r] * P < need)
        {
          if (s->n_free == 0)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY,
                           "the paged KV cache has no free page left (%d pages of %d tokens)", s->n_pages, P);
              return FALSE;
            }
          s->pages[r * MP + s->n_row_pages[r]++] = s->free_list[--s->n_free];
        }
      memcpy (s->pt_host + b * MP, s->pages + r * MP, sizeof (int32_t) * (gsize) MP);
      s->sl_host[b] = need;
      for (int t = 0; t < T; t++)
        {
          int j = s->len[r] + t;
          s->slot_host[b * T + t] = s->pages[r * MP + j / P] * P + j % P;
        }
    }
  g_autoptr (HnTensor) pt = hn_tensor_view_rows (s->pt_dev, 0, B, error);
  g_autoptr (HnTensor) sl = pt ? hn_tensor_view_rows (s->sl_dev, 0, B, error) : NULL;
  g_autoptr (HnTensor) slots = sl ? hn_tensor_view_rows (s->slot_dev, 0, (gint64) B * T, error) : NULL;
  if (!slots || !hn_tensor_upload_i32 (pt, s->pt_host, (gsize) B * MP, error) ||
      !hn_tensor_upload_i32 (sl, s->sl_host, (gsize) B, error) ||
      !hn_tensor_upload_i32 (slots, s->slot_host, (gsize) B * T, error))
    return FALSE;
  g_autofree HnLayerKv *kvs = g_new0 (HnLayerKv, hp->n_layer);
  for (int il = 0; il < hp->n_layer; il++)
    kvs[il] = (HnLayerKv) { s->kv[il].k, s->kv[il].v, pt, sl, slots };
  if (!run_forward (s, kvs, B, T, 0, logits, error))
    return FALSE;
  for (int b = 0; b < B; b++)
    s->len[rows[b]] += T;
  return TRUE;
}

/* The recorded step for row 0 (recorded on first use). */
static gboolean
ensure_step (HnTransformerSession *s, GError **error)
{
  if (hn_cmd_is_finished (s->step_cmd))
    return TRUE;
  hn_cmd_reset (s->step_cmd);
  hn_cmd_set_reusable (s->step_cmd);
  hn_cmd_set_profiling (s->step_cmd, s->profiling);
  gboolean ok = hn_transformer_record_step (s->m, s->step_cmd, s->st[0].acts, s->kv, s->state, error) &&
                hn_cmd_finish (s->step_cmd, error);
  if (!ok)
    hn_cmd_reset (s->step_cmd);
  hn_transformer_acts_drop_views (s->st[0].acts); /* the recording holds the buffers, not the views */
  return ok;
}

/* Runs `n` replayed steps of row 0 from `token`: the cache grows by n. */
static gboolean
run_steps (HnTransformerSession *s, int32_t token, int n, GError **error)
{
  if (s->len[0] + n > s->max_ctx)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "the sequence would grow to %d tokens, beyond the session's context of %d", s->len[0] + n, s->max_ctx);
      return FALSE;
    }
  int off = s->m->hp.learned_pos ? s->m->hp.pos_offset : 0;
  int32_t head[HN_STEP_TOKENS] = { [HN_STEP_TOKEN] = token, [HN_STEP_POS] = s->len[0] + off,
                                   [HN_STEP_ROW] = s->len[0], [HN_STEP_COUNT] = 0 };
  g_autoptr (HnTensor) hv = hn_tensor_view_rows (s->state, 0, HN_STEP_TOKENS, error);
  if (!hv || !ensure_step (s, error) || !hn_tensor_upload_i32 (hv, head, HN_STEP_TOKENS, error) ||
      !hn_cmd_replay (s->step_cmd, (guint) n, error))
    return FALSE;
  g_array_append_val (s->hist[0], token);
  s->len[0] += n;
  return TRUE;
}

gboolean
hn_transformer_session_decode_greedy (HnTransformerSession *s, int32_t token, int n_new, int32_t *out, GError **error)
{
  if (!s->step_cmd || s->n_rows != 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "greedy decoding on the device needs a session of one row with a contiguous KV cache (after a reset to 1 row)");
      return FALSE;
    }
  if (token < 0 || token >= s->m->hp.vocab || n_new < 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "greedy decoding of %d tokens from token id %d", n_new,
                   token);
      return FALSE;
    }
  if (!run_steps (s, token, n_new, error))
    return FALSE;
  g_autoptr (HnTensor) picks = hn_tensor_view_rows (s->state, HN_STEP_TOKENS, n_new, error);
  if (!picks || !hn_tensor_download_i32 (picks, out, (gsize) n_new, error))
    return FALSE;
  g_array_append_vals (s->hist[0], out, (guint) n_new - 1);
  return TRUE;
}

void
hn_transformer_session_set_profiling (HnTransformerSession *s, gboolean enabled)
{
  s->profiling = enabled;
  for (guint i = 0; i < s->n_stages; i++)
    hn_cmd_set_profiling (s->st[i].cmd, enabled);
  if (s->step_cmd)
    hn_cmd_reset (s->step_cmd);
}

const HnCmdProfileEntry *
hn_transformer_session_get_profile (HnTransformerSession *s, guint *n_entries)
{
  *n_entries = 0;
  return s->step_cmd ? hn_cmd_get_profile (s->step_cmd, n_entries) : NULL;
}

static void
fill_positions (HnTransformerSession *s, int idx, int n, int pos0)
{
  int off = s->m->hp.learned_pos ? s->m->hp.pos_offset : 0;
  for (int i = 0; i < n; i++)
    s->pos_host[idx + i] = pos0 + i + off;
}

static gboolean
check_row (HnTransformerSession *s, int row, GError **error)
{
  if (row < 0 || row >= s->n_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "row %d is outside the session's %d rows", row,
                   s->n_rows);
      return FALSE;
    }
  return TRUE;
}

static gboolean
lm_reset (gpointer self, int n_rows, GError **error)
{
  HnTransformerSession *s = self;
  if (n_rows < 1 || n_rows > s->max_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%d rows requested; the session holds %d", n_rows,
                   s->max_rows);
      return FALSE;
    }
  s->n_rows = n_rows;
  for (int r = 0; r < s->max_rows; r++)
    {
      s->len[r] = 0;
      g_array_set_size (s->hist[r], 0);
    }
  if (s->mode == HN_KV_CACHE_PAGED)
    pages_reset (s);
  return zero_states (s, 0, s->max_rows, error);
}

/* The row's pages go back to the free list; the row starts empty. */
static gboolean
lm_release (gpointer self, int row, GError **error)
{
  HnTransformerSession *s = self;
  if (!check_row (s, row, error))
    return FALSE;
  if (s->mode == HN_KV_CACHE_PAGED)
    {
      for (int p = s->n_row_pages[row] - 1; p >= 0; p--)
        s->free_list[s->n_free++] = s->pages[row * s->max_pages + p];
      s->n_row_pages[row] = 0;
    }
  s->len[row] = 0;
  g_array_set_size (s->hist[row], 0);
  return zero_states (s, row, 1, error);
}

/* Tokens ids[0..n) of `row` at positions pos0.., in chunks; logits of the last token. */
static gboolean
prefill_chunks (HnTransformerSession *s, int row, const int32_t *ids, int n, int pos0, float *logits, GError **error)
{
  for (int off = 0; off < n; off += s->chunk)
    {
      int t = MIN (s->chunk, n - off);
      memcpy (s->ids_host, ids + off, sizeof (int32_t) * (gsize) t);
      fill_positions (s, 0, t, pos0 + off);
      if (s->mode == HN_KV_CACHE_PAGED ? !forward_paged (s, &row, 1, t, logits, error)
                                       : !forward (s, row, 1, t, pos0 + off, logits, error))
        return FALSE;
    }
  return TRUE;
}

/* No-cache: recompute row `row` from its whole history. */
static gboolean
recompute (HnTransformerSession *s, int row, float *logits, GError **error)
{
  GArray *h = s->hist[row];
  int n = (int) h->len;
  if (n > s->max_ctx)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the sequence would grow to %d tokens, beyond the session's context of %d",
                   n, s->max_ctx);
      return FALSE;
    }
  return zero_states (s, row, 1, error) && prefill_chunks (s, row, (const int32_t *) h->data, n, 0, logits, error);
}

static gboolean
lm_prefill (gpointer self, int row, const int32_t *ids, int n, float *logits, GError **error)
{
  HnTransformerSession *s = self;
  if (!check_row (s, row, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= s->m->hp.vocab)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)", ids[i],
                     s->m->hp.vocab - 1);
        return FALSE;
      }
  g_array_append_vals (s->hist[row], ids, (guint) n);
  if (s->mode == HN_KV_CACHE_NONE)
    return recompute (s, row, logits, error);
  if (s->len[row] + n > s->max_ctx)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the sequence would grow to %d tokens, beyond the session's context of %d",
                   s->len[row] + n, s->max_ctx);
      return FALSE;
    }
  if (!prefill_chunks (s, row, ids, n, s->len[row], logits, error))
    return FALSE;
  if (s->mode != HN_KV_CACHE_PAGED) /* forward_paged grows the row itself */
    s->len[row] += n;
  return TRUE;
}

/* Paged: one forward for every row, each at its own length. */
static gboolean
decode_paged (HnTransformerSession *s, int n, const int *rows, const int32_t *tokens, float *logits, GError **error)
{
  int off = s->m->hp.learned_pos ? s->m->hp.pos_offset : 0;
  for (int i = 0; i < n; i++)
    {
      if (tokens[i] < 0 || tokens[i] >= s->m->hp.vocab)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                       tokens[i], s->m->hp.vocab - 1);
          return FALSE;
        }
      for (int j = 0; j < i; j++)
        if (rows[j] == rows[i])
          {
            g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "row %d appears twice in one decode step", rows[i]);
            return FALSE;
          }
      s->ids_host[i] = tokens[i];
      s->pos_host[i] = s->len[rows[i]] + off;
    }
  if (!forward_paged (s, rows, n, 1, logits, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    g_array_append_val (s->hist[rows[i]], tokens[i]);
  return TRUE;
}

static gboolean
lm_decode (gpointer self, int n, const int *rows, const int32_t *tokens, float *logits, GError **error)
{
  HnTransformerSession *s = self;
  int V = s->m->hp.vocab;
  for (int i = 0; i < n; i++)
    if (!check_row (s, rows[i], error))
      return FALSE;
  if (s->mode == HN_KV_CACHE_PAGED)
    return decode_paged (s, n, rows, tokens, logits, error);
  /* one batched step when the rows are 0..n-1 at one length (beams) */
  gboolean batched = s->mode == HN_KV_CACHE_CONTIGUOUS && n > 1;
  for (int i = 0; batched && i < n; i++)
    batched = rows[i] == i && s->len[i] == s->len[0];
  if (batched)
    {
      for (int i = 0; i < n; i++)
        {
          s->ids_host[i] = tokens[i];
          g_array_append_val (s->hist[i], tokens[i]);
        }
      fill_positions (s, 0, 1, s->len[0]);
      for (int i = 1; i < n; i++)
        s->pos_host[i] = s->pos_host[0];
      if (!forward (s, 0, n, 1, s->len[0], logits, error))
        return FALSE;
      for (int i = 0; i < n; i++)
        s->len[i]++;
      return TRUE;
    }
  /* one row: the recorded step, then its logits */
  if (n == 1 && s->step_cmd && s->n_rows == 1 && s->mode == HN_KV_CACHE_CONTIGUOUS)
    {
      if (tokens[0] < 0 || tokens[0] >= V)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                       tokens[0], V - 1);
          return FALSE;
        }
      g_autoptr (HnTensor) lg = hn_tensor_view_rows (s->st[0].acts->logits, 0, 1, error);
      return lg && run_steps (s, tokens[0], 1, error) && hn_tensor_download_f32 (lg, logits, (gsize) V, error);
    }
  for (int i = 0; i < n; i++)
    if (!lm_prefill (s, rows[i], &tokens[i], 1, logits + (gsize) i * V, error))
      return FALSE;
  return TRUE;
}

static gboolean
lm_reorder (gpointer self, int n_rows, const int *src, GError **error)
{
  HnTransformerSession *s = self;
  if (n_rows != s->n_rows)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "reorder of %d rows in a session of %d", n_rows, s->n_rows);
      return FALSE;
    }
  gboolean identity = TRUE;
  for (int r = 0; r < n_rows; r++)
    {
      if (!check_row (s, src[r], error))
        return FALSE;
      identity = identity && src[r] == r;
    }
  if (identity)
    return TRUE;
  if (s->mode == HN_KV_CACHE_PAGED)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "beam search reorders cache rows, which the paged KV cache does not do; use the contiguous cache");
      return FALSE;
    }
  g_autofree int *old_len = g_memdup2 (s->len, sizeof (int) * (gsize) n_rows);
  g_autofree GArray **old_hist = g_memdup2 (s->hist, sizeof (GArray *) * (gsize) n_rows);
  GArray **new_hist = g_new (GArray *, (gsize) MAX (n_rows, 1));
  for (int r = 0; r < n_rows; r++)
    {
      GArray *h = old_hist[src[r]];
      new_hist[r] = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), h->len);
      g_array_append_vals (new_hist[r], h->data, h->len);
      s->len[r] = old_len[src[r]];
    }
  for (int r = 0; r < n_rows; r++)
    {
      g_array_unref (s->hist[r]);
      s->hist[r] = new_hist[r];
    }
  g_free (new_hist);
  if (s->mode != HN_KV_CACHE_CONTIGUOUS || n_rows == 1)
    return TRUE;
  const HnTransformerHParams *hp = &s->m->hp;
  g_autoptr (GPtrArray) views = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  for (int il = 0; il < hp->n_layer; il++)
    for (int r = 0; r < n_rows; r++)
      {
        gint64 kvh = hn_transformer_layer_kv_heads (hp, il);
        gint64 kvd[2] = { kvh * hn_transformer_layer_head_dim (hp, il), kvh * hn_transformer_layer_v_head_dim (hp, il) };
        int n = s->len[r];
        if (is_state_layer (hp, il))
          {
            /* the whole state of the source row */
            HnSsmState from, to;
            HnTensor **fp[4], **tp[4];
            if (!state_views (&s->kv[il].ssm, src[r], 1, &from, views, error) ||
                !state_views (&s->kv_alt[il].ssm, r, 1, &to, views, error))
              return FALSE;
            state_parts (&from, fp);
            state_parts (&to, tp);
            for (int k = 0; k < 4; k++)
              if (*fp[k] && !hn_op_copy (stage_of (s, il)->cmd, *tp[k], *fp[k], error))
                {
                  for (guint i = 0; i < s->n_stages; i++)
                    hn_cmd_reset (s->st[i].cmd);
                  return FALSE;
                }
          }
        if (n == 0 || !is_kv_layer (hp, il))
          continue;
        HnTensor *pair[2][2] = { { s->kv[il].k, s->kv_alt[il].k }, { s->kv[il].v, s->kv_alt[il].v } };
        for (int j = 0; j < 2; j++)
          {
            HnTensor *from = hn_tensor_view_rows (pair[j][0], src[r], 1, error);
            HnTensor *to = from ? hn_tensor_view_rows (pair[j][1], r, 1, error) : NULL;
            if (from)
              g_ptr_array_add (views, from);
            if (!to)
              return FALSE;
            g_ptr_array_add (views, to);
            HnTensor *f2 = hn_tensor_reshape (from, 2, (gint64[]) { s->max_ctx, kvd[j] }, error);
            if (!f2)
              return FALSE;
            g_ptr_array_add (views, f2);
            HnTensor *t2 = hn_tensor_reshape (to, 2, (gint64[]) { s->max_ctx, kvd[j] }, error);
            if (!t2)
              return FALSE;
            g_ptr_array_add (views, t2);
            HnTensor *fn = hn_tensor_view_rows (f2, 0, n, error);
            if (!fn)
              return FALSE;
            g_ptr_array_add (views, fn);
            HnTensor *tn = hn_tensor_view_rows (t2, 0, n, error);
            if (!tn)
              return FALSE;
            g_ptr_array_add (views, tn);
            if (!hn_op_copy (stage_of (s, il)->cmd, tn, fn, error))
              {
                for (guint i = 0; i < s->n_stages; i++)
                  hn_cmd_reset (s->st[i].cmd);
                return FALSE;
              }
          }
      }
  for (guint i = 0; i < s->n_stages; i++)
    if (!hn_cmd_submit_wait (s->st[i].cmd, error))
      {
        for (guint k = i + 1; k < s->n_stages; k++)
          hn_cmd_reset (s->st[k].cmd);
        return FALSE;
      }
  HnLayerKv *tmp = s->kv;
  s->kv = s->kv_alt;
  s->kv_alt = tmp;
  return TRUE;
}

static gboolean
lm_can_decode_greedy (gpointer self)
{
  HnTransformerSession *s = self;
  return s->step_cmd && s->n_rows == 1;
}

static gboolean
lm_decode_greedy (gpointer self, int32_t token, int n, int32_t *out, GError **error)
{
  return hn_transformer_session_decode_greedy (self, token, n, out, error);
}

static const HnLmOps session_ops = { lm_reset,   lm_prefill,           lm_decode,
                                     lm_reorder, lm_release,           lm_can_decode_greedy,
                                     lm_decode_greedy };

const HnLmOps *
hn_transformer_session_lm_ops (void)
{
  return &session_ops;
}

HnGenerateResult *
hn_transformer_generate (HnTransformer *m, HnKvCacheMode mode, const HnGenerateOptions *opt, const int32_t *prompt,
                         int n_prompt, HnDecodeFunc decode, gpointer decode_data, HnTokenFunc on_token,
                         gpointer token_data, GCancellable *cancellable, GError **error)
{
  int max_len = hn_generate_options_max_length (opt, n_prompt);
  if (max_len <= n_prompt)
    max_len = n_prompt + 1; /* hn_generate_run reports the real problem */
  if (mode == HN_KV_CACHE_PAGED && opt->num_beams > 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "beam search (num_beams %d) needs the contiguous KV cache; the paged cache serves greedy and sampling",
                   opt->num_beams);
      return NULL;
    }
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, mode, MAX (1, opt->num_beams), max_len, error);
  if (!s)
    return NULL;
  HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, m->hp.vocab, decode, decode_data, on_token, token_data };
  return hn_generate_run (&gm, opt, prompt, n_prompt, cancellable, error);
}
