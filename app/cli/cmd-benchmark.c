/* `benchmark`: the reference workloads of docs/accelerator.md on this
 * engine, on a real model folder or on random weights of a named shape, so
 * each figure can be put beside PyTorch's on the same GPU.
 *
 * Decode and prefill record the model's forward themselves through the
 * transformer's building blocks (the same calls the generation session
 * makes), so --profile can read the per-op timestamps of one step. */
#include "cli.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "jobs/job-spec.h"
#include "transformer/transformer.h"
#include "ssm/mamba.h"
#include "formats/model-config.h"
#include "generate/sampler.h"
#include "train/lora.h"
#include "tensor/hn-ops.h"
#include "tensor/quant.h"
#include "train/data-parallel.h"
#include "jobs/memory-estimate.h"
#include "train/train-graph.h"
#include "vk/hn-vk.h"

typedef struct {
  const char *name;
  const char *model_type;
  int vocab, hidden, n_layer, n_head, n_kv_head, ffn, positions;
  gboolean tied;
} SynthShape;

/* The shapes of the reference table: Llama-3.2-1B, Llama-3-8B (QLoRA) and
 * GPT-2 124M (vocab padded to 50304 as in llm.c), plus a tiny one for smoke
 * tests on any device. */
static const SynthShape synth_shapes[] = {
  { "llama-1b", "llama", 128256, 2048, 16, 32, 8, 8192, 131072, TRUE },
  { "llama3-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 8192, FALSE },
  { "gpt2-124m", "gpt2", 50304, 768, 12, 12, 12, 3072, 1024, TRUE },
  { "tiny", "llama", 512, 64, 2, 4, 2, 128, 512, TRUE },
  /* state-space (issue 25): state-spaces/mamba-130m (state 16, conv 4, dt rank 48; ffn = d_inner) */
  { "mamba-130m", "mamba", 50280, 768, 24, 1, 1, 1536, 0, TRUE },
  { NULL },
};

/* The benchmark's options, read once from its spec (hn_command_table); the
 * strings belong to the spec. 0 / NULL: the workload's default. */
typedef struct {
  const char *model_path, *synthetic, *dtype, *workload, *device, *concurrency, *device_indices;
  const char *gemm_shape; /* gemm: "M,N,K" or NULL (size³) */
  gboolean gemm_bias;     /* gemm: with a bias (f32 [N]) */
  const char *quantization, *lora_targets; /* lora: the base's packing (nf4, int8; --double-quant) and targets */
  gboolean double_quant;
  const char *precision; /* train / lora: fp32 (default), fp16 (bf16 runs as fp16), as the training jobs' --precision */
  int batch, seq_len, new_tokens, iterations, warmup, size, requests, lora_r;
  double warmup_seconds; /* keep warming up at least this long (warm_until) */
  gboolean json, profile, continuous_batching, checkpointing;
} BenchOptions;

static guint64
splitmix (guint64 *s)
{
  guint64 z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static gboolean
parse_dtype (const char *s, HnStDtype *st, GError **error)
{
  if (!s || g_str_equal (s, "bf16") || g_str_equal (s, "bfloat16"))
    *st = HN_ST_DTYPE_BF16;
  else if (g_str_equal (s, "f16") || g_str_equal (s, "float16") || g_str_equal (s, "fp16"))
    *st = HN_ST_DTYPE_F16;
  else if (g_str_equal (s, "f32") || g_str_equal (s, "float32") || g_str_equal (s, "fp32"))
    *st = HN_ST_DTYPE_F32;
  else
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--dtype %s: use f32, f16 or bf16", s);
      return FALSE;
    }
  return TRUE;
}

/* Bytes free under path (0 when unknown). */
static guint64
free_bytes (const char *path)
{
  struct statvfs sv;
  return statvfs (path, &sv) == 0 ? (guint64) sv.f_bavail * sv.f_frsize : 0;
}

/* Writes config.json + model.safetensors of random weights (uniform +-0.02,
 * norms 1) into a new temporary folder: in /dev/shm when it has room (a
 * memory file system), else the temporary folder, never fsynced (a scratch
 * file: the 16 GB of the Llama-3-8B shape took 75 s to reach the disk).
 * Every matrix borrows the same random pool: the values are irrelevant to
 * speed, and this keeps a 1B-parameter model to one pool the size of its
 * largest tensor. */
static char *
write_synthetic (const SynthShape *sh, HnStDtype dt, GError **error)
{
  guint64 need = (guint64) hn_st_dtype_size (dt) *
                 ((guint64) sh->vocab * sh->hidden * (sh->tied ? 1 : 2) +
                  (guint64) sh->n_layer * ((guint64) sh->hidden * sh->hidden * 4 + (guint64) sh->hidden * sh->ffn * 3));
  g_autofree char *tmpl = NULL;
  if (g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR) && free_bytes ("/dev/shm") > need + need / 4 + ((guint64) 1 << 30))
    tmpl = g_strdup ("/dev/shm/hn-bench-XXXXXX");
  else
    tmpl = g_build_filename (g_get_tmp_dir (), "hn-bench-XXXXXX", NULL);
  g_autofree char *dir = g_mkdtemp (tmpl) ? g_steal_pointer (&tmpl) : NULL;
  if (!dir)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create a temporary folder for the synthetic model");
      return NULL;
    }
  gboolean llama = g_str_equal (sh->model_type, "llama"), mamba = g_str_equal (sh->model_type, "mamba");
  int C = sh->hidden, D = C / sh->n_head, KV = sh->n_kv_head * D, F = sh->ffn;
  gsize esz = hn_st_dtype_size (dt);
  gsize pool_elems = (gsize) sh->vocab * C;
  if ((gsize) F * C > pool_elems)
    pool_elems = (gsize) F * C;
  if (!llama && (gsize) C * 3 * C > pool_elems)
    pool_elems = (gsize) C * 3 * C;
  g_autofree guint8 *pool = g_malloc (pool_elems * esz);
  g_autofree guint8 *ones = g_malloc ((gsize) MAX (C, F) * 3 * esz);
  guint64 seed = 1234;
  for (gsize i = 0; i < pool_elems; i++)
    {
      float v = ((float) (splitmix (&seed) >> 40) / (float) (1 << 24) - 0.5f) * 0.04f;
      if (dt == HN_ST_DTYPE_F32)
        ((float *) pool)[i] = v;
      else
        ((guint16 *) pool)[i] = dt == HN_ST_DTYPE_BF16 ? hn_st_f32_to_bf16 (v) : hn_st_f32_to_f16 (v);
    }
  for (gsize i = 0; i < (gsize) MAX (C, F) * 3; i++)
    {
      if (dt == HN_ST_DTYPE_F32)
        ((float *) ones)[i] = 1.0f;
      else
        ((guint16 *) ones)[i] = dt == HN_ST_DTYPE_BF16 ? hn_st_f32_to_bf16 (1.0f) : hn_st_f32_to_f16 (1.0f);
    }
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  hn_safetensors_writer_set_scratch (w, TRUE);
#define ADD(name, data, ...)                                                                                           \
  G_STMT_START                                                                                                         \
  {                                                                                                                    \
    gint64 shp[] = { __VA_ARGS__ };                                                                                    \
    guint nd = G_N_ELEMENTS (shp);                                                                                     \
    gsize n = 1;                                                                                                       \
    for (guint q = 0; q < nd; q++)                                                                                     \
      n *= (gsize) shp[q];                                                                                             \
    if (!hn_safetensors_writer_add (w, name, dt, nd, shp, data, n * esz, FALSE, error))                                \
      return NULL;                                                                                                     \
  }                                                                                                                    \
  G_STMT_END
  if (mamba)
    {
      int I = F, N = 16, K = 4, R = (C + 15) / 16;
      ADD ("backbone.embeddings.weight", pool, sh->vocab, C);
      ADD ("backbone.norm_f.weight", ones, C);
      for (int l = 0; l < sh->n_layer; l++)
        {
          char nm[160];
#define MN(fmt) (g_snprintf (nm, sizeof nm, "backbone.layers.%d." fmt, l), nm)
          ADD (MN ("norm.weight"), ones, C);
          ADD (MN ("mixer.in_proj.weight"), pool, 2 * I, C);
          ADD (MN ("mixer.conv1d.weight"), pool, I, 1, K);
          ADD (MN ("mixer.conv1d.bias"), pool, I);
          ADD (MN ("mixer.x_proj.weight"), pool, R + 2 * N, I);
          ADD (MN ("mixer.dt_proj.weight"), pool, I, R);
          ADD (MN ("mixer.dt_proj.bias"), pool, I);
          ADD (MN ("mixer.A_log"), pool, I, N);
          ADD (MN ("mixer.D"), ones, I);
          ADD (MN ("mixer.out_proj.weight"), pool, C, I);
#undef MN
        }
    }
  else if (llama)
    {
      ADD ("model.embed_tokens.weight", pool, sh->vocab, C);
      ADD ("model.norm.weight", ones, C);
      if (!sh->tied) /* Llama-3-8B has its own LM head */
        ADD ("lm_head.weight", pool, sh->vocab, C);
      for (int l = 0; l < sh->n_layer; l++)
        {
          char nm[160];
#define LN(fmt) (g_snprintf (nm, sizeof nm, "model.layers.%d." fmt, l), nm)
          ADD (LN ("input_layernorm.weight"), ones, C);
          ADD (LN ("post_attention_layernorm.weight"), ones, C);
          ADD (LN ("self_attn.q_proj.weight"), pool, C, C);
          ADD (LN ("self_attn.k_proj.weight"), pool, KV, C);
          ADD (LN ("self_attn.v_proj.weight"), pool, KV, C);
          ADD (LN ("self_attn.o_proj.weight"), pool, C, C);
          ADD (LN ("mlp.gate_proj.weight"), pool, F, C);
          ADD (LN ("mlp.up_proj.weight"), pool, F, C);
          ADD (LN ("mlp.down_proj.weight"), pool, C, F);
        }
    }
  else
    {
      ADD ("transformer.wte.weight", pool, sh->vocab, C);
      ADD ("transformer.wpe.weight", pool, sh->positions, C);
      ADD ("transformer.ln_f.weight", ones, C);
      ADD ("transformer.ln_f.bias", pool, C);
      for (int l = 0; l < sh->n_layer; l++)
        {
          char nm[160];
#define GN(fmt) (g_snprintf (nm, sizeof nm, "transformer.h.%d." fmt, l), nm)
          ADD (GN ("ln_1.weight"), ones, C);
          ADD (GN ("ln_1.bias"), pool, C);
          ADD (GN ("ln_2.weight"), ones, C);
          ADD (GN ("ln_2.bias"), pool, C);
          ADD (GN ("attn.c_attn.weight"), pool, C, 3 * C); /* Conv1D: [in, out] */
          ADD (GN ("attn.c_attn.bias"), pool, 3 * C);
          ADD (GN ("attn.c_proj.weight"), pool, C, C);
          ADD (GN ("attn.c_proj.bias"), pool, C);
          ADD (GN ("mlp.c_fc.weight"), pool, C, F);
          ADD (GN ("mlp.c_fc.bias"), pool, F);
          ADD (GN ("mlp.c_proj.weight"), pool, F, C);
          ADD (GN ("mlp.c_proj.bias"), pool, C);
        }
    }
#undef ADD
#undef LN
#undef GN
  g_autofree char *st_path = g_build_filename (dir, "model.safetensors", NULL);
  if (!hn_safetensors_writer_write_file (w, st_path, error))
    return NULL;
  const char *dtname = dt == HN_ST_DTYPE_F32 ? "float32" : dt == HN_ST_DTYPE_F16 ? "float16" : "bfloat16";
  g_autofree char *config = NULL;
  if (mamba)
    config = g_strdup_printf (
      "{\"model_type\":\"mamba\",\"architectures\":[\"MambaForCausalLM\"],\"vocab_size\":%d,\"hidden_size\":%d,"
      "\"num_hidden_layers\":%d,\"intermediate_size\":%d,\"state_size\":16,\"conv_kernel\":4,\"expand\":2,"
      "\"time_step_rank\":%d,\"layer_norm_epsilon\":1e-05,\"hidden_act\":\"silu\",\"use_bias\":false,"
      "\"use_conv_bias\":true,\"tie_word_embeddings\":true,\"bos_token_id\":0,\"eos_token_id\":0,"
      "\"torch_dtype\":\"%s\"}",
      sh->vocab, C, sh->n_layer, F, (C + 15) / 16, dtname);
  else if (llama)
    config = g_strdup_printf (
      "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":%d,\"hidden_size\":%d,"
      "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"intermediate_size\":%d,"
      "\"max_position_embeddings\":%d,\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"hidden_act\":\"silu\","
      "\"tie_word_embeddings\":%s,\"bos_token_id\":1,\"eos_token_id\":2,\"torch_dtype\":\"%s\"}",
      sh->vocab, C, sh->n_layer, sh->n_head, sh->n_kv_head, F, sh->positions, sh->tied ? "true" : "false", dtname);
  else
    config = g_strdup_printf (
      "{\"model_type\":\"gpt2\",\"architectures\":[\"GPT2LMHeadModel\"],\"vocab_size\":%d,\"n_embd\":%d,"
      "\"n_layer\":%d,\"n_head\":%d,\"n_inner\":%d,\"n_positions\":%d,\"layer_norm_epsilon\":1e-05,"
      "\"activation_function\":\"gelu_new\",\"tie_word_embeddings\":true,\"bos_token_id\":50256,"
      "\"eos_token_id\":50256,\"torch_dtype\":\"%s\"}",
      sh->vocab, C, sh->n_layer, sh->n_head, F, sh->positions, dtname);
  g_autofree char *cfg_path = g_build_filename (dir, "config.json", NULL);
  if (!g_file_set_contents (cfg_path, config, -1, error))
    return NULL;
  return g_steal_pointer (&dir);
}

static void
remove_dir (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *n;
  while (d && (n = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (dir, n, NULL);
      g_remove (p);
    }
  g_rmdir (dir);
}

/* Per-op time of one profiled submission, summed by op name. */
static JsonNode *
profile_entries_json (const HnCmdProfileEntry *e, guint n, double *total_us)
{
  g_autoptr (GHashTable) sums = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr (GPtrArray) order = g_ptr_array_new ();
  g_autofree double *us = g_new0 (double, MAX (n, 1));
  g_autofree int *cnt = g_new0 (int, MAX (n, 1));
  *total_us = 0;
  for (guint i = 0; i < n; i++)
    {
      gpointer idx;
      if (!g_hash_table_lookup_extended (sums, e[i].name, NULL, &idx))
        {
          idx = GUINT_TO_POINTER (order->len);
          g_hash_table_insert (sums, (gpointer) e[i].name, idx);
          g_ptr_array_add (order, (gpointer) e[i].name);
        }
      us[GPOINTER_TO_UINT (idx)] += e[i].microseconds;
      cnt[GPOINTER_TO_UINT (idx)]++;
      *total_us += e[i].microseconds;
    }
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_array (b);
  for (guint i = 0; i < order->len; i++)
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "op");
      json_builder_add_string_value (b, g_ptr_array_index (order, i));
      json_builder_set_member_name (b, "dispatches");
      json_builder_add_int_value (b, cnt[i]);
      json_builder_set_member_name (b, "us");
      json_builder_add_double_value (b, round (us[i] * 10) / 10);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  return json_builder_get_root (b);
}

static JsonNode *
profile_json (HnCmd *cmd, double *total_us)
{
  guint n = 0;
  const HnCmdProfileEntry *e = hn_cmd_get_profile (cmd, &n);
  return profile_entries_json (e, n, total_us);
}

typedef struct {
  HnTransformer *m;
  HnTransformerActs *acts;
  HnLayerKv *kv;
  HnCmd *cmd;
  int n_layer;
  gint64 record_us; /* host time spent uploading and recording, summed over runs */
  gboolean replay;  /* prefill: record once, replay after (a diagnostic: HN_BENCH_PREFILL_REPLAY=1) */
} Fwd;

static void
fwd_clear (Fwd *f)
{
  if (f->kv)
    for (int i = 0; i < f->n_layer; i++)
      {
        g_clear_pointer (&f->kv[i].k, hn_tensor_unref);
        g_clear_pointer (&f->kv[i].v, hn_tensor_unref);
      }
  g_clear_pointer (&f->kv, g_free);
  g_clear_pointer (&f->acts, hn_transformer_acts_free);
  g_clear_pointer (&f->cmd, hn_cmd_free);
}

static gboolean
fwd_init (Fwd *f, HnTransformer *m, int rows, int ctx_len, int max_tokens, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  f->m = m;
  f->n_layer = hp->n_layer;
  f->kv = g_new0 (HnLayerKv, hp->n_layer);
  gint64 shape[4] = { rows, ctx_len, hp->n_kv_head, hp->head_dim };
  for (int i = 0; i < hp->n_layer; i++)
    if (!(f->kv[i].k = hn_tensor_new_named (hn_transformer_get_context (m), "bench.k", HN_DTYPE_F32, 4, shape, error)) ||
        !(f->kv[i].v = hn_tensor_new_named (hn_transformer_get_context (m), "bench.v", HN_DTYPE_F32, 4, shape, error)))
      return FALSE;
  f->acts = hn_transformer_acts_new (m, max_tokens, rows, error);
  f->cmd = f->acts ? hn_cmd_new (hn_transformer_get_context (m), error) : NULL;
  return f->cmd != NULL;
}

/* One forward of `rows` sequences of T tokens at position pos0; logits of the
 * last token of each row land in acts->logits (rows < logit capacity). */
static gboolean
fwd_run (Fwd *f, const int32_t *ids, const int32_t *pos, int rows, int T, int pos0, GError **error)
{
  HnTransformerActs *a = f->acts;
  int N = rows * T;
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (HnTensor) idv = hn_tensor_view_rows (a->ids, 0, N, error);
  g_autoptr (HnTensor) pv = idv ? hn_tensor_view_rows (a->pos, 0, N, error) : NULL;
  if (!pv || !hn_tensor_upload_i32 (idv, ids, (gsize) N, error) || !hn_tensor_upload_i32 (pv, pos, (gsize) N, error))
    return FALSE;
  if (f->replay && hn_cmd_is_finished (f->cmd))
    {
      /* HN_BENCH_PREFILL_REPLAY: the same shapes and buffers as the recording: run it again */
      f->record_us += g_get_monotonic_time () - t0;
      return hn_cmd_replay (f->cmd, 1, error);
    }
  if (f->replay)
    hn_cmd_set_reusable (f->cmd);
  gboolean ok = hn_transformer_record_embed (f->m, f->cmd, a, N, error);
  for (int il = 0; ok && il < f->n_layer; il++)
    {
      ok = hn_transformer_record_layer (f->m, f->cmd, a, il, &f->kv[il], rows, T, pos0, error);
      /* as generate's prefill does (HN_PREFILL_FLUSH=0: one submission at the end) */
      if (ok && hn_transformer_flush_layers (N))
        ok = hn_cmd_flush (f->cmd, error);
    }
  /* the head only on each row's last token, as generate does: with several rows, their last
   * hidden states gathered into x's first rows (no source row is a later copy's destination)
   * so that one head pass reads the head's weight once for all of them */
  if (T > 1 && rows > 1)
    for (int r = 0; ok && r < rows; r++)
      {
        g_autoptr (HnTensor) src = hn_tensor_view_rows (a->x, (gint64) r * T + T - 1, 1, error);
        g_autoptr (HnTensor) dst = src ? hn_tensor_view_rows (a->x, r, 1, error) : NULL;
        ok = dst && hn_op_copy (f->cmd, dst, src, error);
      }
  if (T > 1 && rows == 1)
    ok = ok && hn_transformer_record_head (f->m, f->cmd, a, T - 1, 1, error);
  else
    ok = ok && hn_transformer_record_head (f->m, f->cmd, a, 0, rows, error);
  if (!ok)
    hn_cmd_reset (f->cmd);
  f->record_us += g_get_monotonic_time () - t0;
  if (f->replay)
    ok = ok && hn_cmd_finish (f->cmd, error) && hn_cmd_replay (f->cmd, 1, error);
  else
    ok = ok && hn_cmd_submit_wait (f->cmd, error);
  hn_transformer_acts_drop_views (a);
  return ok;
}

static void
set_d (JsonObject *o, const char *k, double v)
{
  json_object_set_double_member (o, k, isfinite (v) ? v : 0.0);
}

/* Warm-up of decode, gemm, prefill, train and LoRA: at least o->warmup runs and at least o->warmup_seconds of them (a
 * GPU leaves its idle clocks only after some 0.1-0.3 s of load: on the H200 the first 1 x 512
 * prefills ran 34-42 ms, then 9.3). The seconds count from the end of the first run: that one
 * creates the pipelines (the driver compiles each cooperative-matrix variant, seconds in all on a
 * fresh cache) while the GPU idles, so counting it left the measured runs at idle clocks (2.5x slower
 * on 2026-12-02). Reports what it ran. */
static gboolean
warm_until (const BenchOptions *o, JsonObject *res, gboolean (*run) (gpointer, GError **), gpointer data,
            GError **error)
{
  gint64 t_first = g_get_monotonic_time ();
  if (!run (data, error))
    return FALSE;
  gint64 t0 = g_get_monotonic_time ();
  int n = 1;
  while (n < MAX (o->warmup, 1) || (g_get_monotonic_time () - t0 < o->warmup_seconds * 1e6 && n < 100000))
    {
      if (!run (data, error))
        return FALSE;
      n++;
    }
  json_object_set_int_member (res, "warmup_runs", n);
  set_d (res, "first_run_s", (t0 - t_first) / 1e6);
  set_d (res, "warmup_s", (g_get_monotonic_time () - t0) / 1e6);
  return TRUE;
}

typedef struct { HnCmd *cmd; HnTensor *y, *x, *w, *bias; } GemmRun;

static gboolean
gemm_once (gpointer p, GError **error)
{
  GemmRun *g = p;
  return hn_op_matmul (g->cmd, g->y, g->x, g->w, g->bias, error) && hn_cmd_submit_wait (g->cmd, error);
}

static gboolean
bench_gemm (HnVkContext *ctx, const BenchOptions *o, HnStDtype dt, JsonObject *res, GError **error)
{
  gint64 S = o->size > 0 ? o->size : 8192, M = S, N = S, K = S;
  if (o->gemm_shape)
    {
      g_auto (GStrv) f = g_strsplit (o->gemm_shape, ",", 0);
      char *end[3] = { NULL, NULL, NULL };
      gint64 v[3] = { 0, 0, 0 };
      for (int i = 0; f[0] && i < 3 && f[i]; i++)
        v[i] = g_ascii_strtoll (f[i], &end[i], 10);
      if (g_strv_length (f) != 3 || *end[0] || *end[1] || *end[2] || v[0] < 1 || v[1] < 1 || v[2] < 1 ||
          v[0] > 1048576 || v[1] > 1048576 || v[2] > 1048576)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--gemm-shape %s: give M,N,K, each 1 to 1048576",
                       o->gemm_shape);
          return FALSE;
        }
      M = v[0];
      N = v[1];
      K = v[2];
    }
  HnDType wd = dt == HN_ST_DTYPE_F32 ? HN_DTYPE_F32 : dt == HN_ST_DTYPE_F16 ? HN_DTYPE_F16 : HN_DTYPE_BF16;
  /* bf16 weights as a model load stores them: f16 where the tensor cores
   * read f16 and every value fits (hn_bf16_weights_as_f16) */
  gboolean as_f16 = wd == HN_DTYPE_BF16 && hn_bf16_weights_as_f16 (ctx);
  /* --precision fp16: a training Linear's forward under fp16 autocast (f16 x, weights and y, the
   * autocast rounding epilogue); otherwise an f32 x converted by the GEMM and an f32 y */
  gboolean fp16 = o->precision && (g_str_equal (o->precision, "fp16") || g_str_equal (o->precision, "bf16"));
  if (o->precision && !fp16 && !g_str_equal (o->precision, "fp32"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--precision %s: use fp32, fp16 or bf16", o->precision);
      return FALSE;
    }
  if (fp16 && wd == HN_DTYPE_BF16)
    as_f16 = TRUE;
  HnDType io = fp16 ? HN_DTYPE_F16 : HN_DTYPE_F32;
  g_autoptr (HnTensor) x = hn_tensor_new_2d (ctx, io, M, K, error);
  g_autoptr (HnTensor) w = x ? hn_tensor_new_2d (ctx, as_f16 ? HN_DTYPE_F16 : wd, N, K, error) : NULL;
  g_autoptr (HnTensor) y = w ? hn_tensor_new_2d (ctx, io, M, N, error) : NULL;
  g_autoptr (HnTensor) bias = y && o->gemm_bias ? hn_tensor_new_1d (ctx, HN_DTYPE_F32, N, error) : NULL;
  g_autoptr (HnCmd) cmd = y && (bias || !o->gemm_bias) ? hn_cmd_new (ctx, error) : NULL;
  if (!cmd)
    return FALSE;
  if (fp16)
    hn_cmd_set_autocast (cmd, HN_AUTOCAST_F16);
  if ((bias && !hn_op_fill (cmd, bias, 0.5f, error)) || (!fp16 && !hn_op_fill (cmd, x, 0.01f, error)) ||
      !hn_cmd_submit_wait (cmd, error))
    return FALSE;
  if (fp16)
    {
      gsize n = (gsize) M * K;
      g_autofree guint16 *h = g_new (guint16, n);
      for (gsize i = 0; i < n; i++)
        h[i] = hn_st_f32_to_f16 (0.01f);
      if (!hn_tensor_upload_raw (x, h, n * 2, error))
        return FALSE;
    }
  /* w: random bytes would be NaN-prone for f16/bf16; a constant is as fast */
  if (wd == HN_DTYPE_F32)
    {
      if (!hn_op_fill (cmd, w, 0.01f, error) || !hn_cmd_submit_wait (cmd, error))
        return FALSE;
    }
  else
    {
      gsize n = (gsize) N * K;
      g_autofree guint16 *h = g_new (guint16, n);
      guint16 v = wd == HN_DTYPE_BF16 ? hn_st_f32_to_bf16 (0.01f) : hn_st_f32_to_f16 (0.01f);
      for (gsize i = 0; i < n; i++)
        h[i] = v;
      g_autofree guint16 *h16 = NULL;
      if (as_f16 && !hn_bf16_to_f16_if_fits (h, n, &h16))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_FAILED, "gemm: bf16 weights do not fit f16");
          return FALSE;
        }
      if (!hn_tensor_upload_raw (w, h16 ? h16 : h, n * 2, error))
        return FALSE;
    }
  int iters = MAX (o->iterations, 1);
  GemmRun gr = { cmd, y, x, w, bias };
  if (!warm_until (o, res, gemm_once, &gr, error))
    return FALSE;
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; i < iters; i++)
    if (!hn_op_matmul (cmd, y, x, w, bias, error))
      return FALSE;
  if (!hn_cmd_submit_wait (cmd, error))
    return FALSE;
  double s = (g_get_monotonic_time () - t0) / 1e6 / iters;
  json_object_set_int_member (res, "size", S);
  json_object_set_int_member (res, "m", M);
  json_object_set_int_member (res, "n", N);
  json_object_set_int_member (res, "k", K);
  json_object_set_boolean_member (res, "reduced_precision", hn_op_matmul_reduced_precision (ctx, wd, M, 0));
  json_object_set_string_member (res, "weights_stored", hn_dtype_name (w->dtype));
  json_object_set_string_member (res, "precision", fp16 ? "fp16" : "fp32");
  json_object_set_boolean_member (res, "bias", bias != NULL);
  set_d (res, "ms_per_gemm", s * 1e3);
  set_d (res, "tflops", 2.0 * M * N * K / s / 1e12);
  return TRUE;
}

/* The same ceiling through workgroup-scope matrices (the kind matmul_cm2
 * uses), per tile, operands constant and reloaded from shared memory: one
 * object per tile, an error in place of a tile the driver refuses. */
static JsonArray *
mma_peak_cm2_tiles (HnCmd *cmd, HnTensor *out, const BenchOptions *o)
{
  static const guint32 tiles[][3] = { { 128, 256, 32 }, { 128, 128, 32 }, { 128, 128, 64 }, { 256, 128, 32 },
                                      { 64, 128, 32 },  { 64, 64, 32 },   { 128, 256, 16 } };
  JsonArray *arr = json_array_new ();
  for (gsize t = 0; t < G_N_ELEMENTS (tiles); t++)
    for (int shared = 0; shared <= 1; shared++)
      {
        g_autoptr (GError) error = NULL;
        JsonObject *row = json_object_new ();
        g_autofree char *name = g_strdup_printf ("%ux%ux%u", tiles[t][0], tiles[t][1], tiles[t][2]);
        json_object_set_string_member (row, "tile", name);
        json_object_set_boolean_member (row, "shared", shared);
        guint32 wgs = 132 * 4, iters = 4096 * 32 / tiles[t][2];
        double flops = 0;
        gboolean ok = hn_op_tensor_core_peak_cm2 (cmd, out, wgs, iters, tiles[t][0], tiles[t][1], tiles[t][2], shared,
                                                  &flops, &error) &&
                      hn_cmd_submit_wait (cmd, &error);
        gint64 t0 = g_get_monotonic_time ();
        int iterations = MAX (o->iterations, 1);
        for (int i = 0; ok && i < iterations; i++)
          ok = hn_op_tensor_core_peak_cm2 (cmd, out, wgs, iters, tiles[t][0], tiles[t][1], tiles[t][2], shared,
                                           &flops, &error);
        ok = ok && hn_cmd_submit_wait (cmd, &error);
        if (ok)
          set_d (row, "tflops", flops * iterations / ((g_get_monotonic_time () - t0) / 1e6) / 1e12);
        else
          json_object_set_string_member (row, "error", error->message);
        json_array_add_object_element (arr, row);
      }
  return arr;
}

/* The tensor cores' ceiling: register-resident multiply-adds with no memory
 * traffic (hn_op_tensor_core_peak), 8 workgroups per 132 multiprocessors'
 * worth by default (--size: workgroups). */
static gboolean
bench_mma_peak (HnVkContext *ctx, const BenchOptions *o, JsonObject *res, GError **error)
{
  guint32 wgs = o->size > 0 ? (guint32) o->size : 132 * 8, iters = 512;
  g_autoptr (HnTensor) out = hn_tensor_new_1d (ctx, HN_DTYPE_F32, (gint64) wgs * 8 * 256, error);
  g_autoptr (HnCmd) cmd = out ? hn_cmd_new (ctx, error) : NULL;
  double flops = 0;
  if (!cmd)
    return FALSE;
  for (int i = 0; i < MAX (o->warmup, 1); i++)
    if (!hn_op_tensor_core_peak (cmd, out, wgs, iters, &flops, error) || !hn_cmd_submit_wait (cmd, error))
      return FALSE;
  int iterations = MAX (o->iterations, 1);
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; i < iterations; i++)
    if (!hn_op_tensor_core_peak (cmd, out, wgs, iters, &flops, error))
      return FALSE;
  if (!hn_cmd_submit_wait (cmd, error))
    return FALSE;
  double s = (g_get_monotonic_time () - t0) / 1e6 / iterations;
  json_object_set_int_member (res, "workgroups", wgs);
  set_d (res, "ms_per_run", s * 1e3);
  set_d (res, "tflops", flops / s / 1e12);
  if (hn_vk_context_has_coopmat2 (ctx, NULL))
    json_object_set_array_member (res, "workgroup_scope", mma_peak_cm2_tiles (cmd, out, o));
  return TRUE;
}

typedef struct {
  HnTransformerSession *s;
  const HnLmOps *ops;
  const int32_t *ids;
  int P, NT, vocab;
  float *logits;
  int32_t *out, first;
  double seconds; /* decode time summed over the runs */
} DecodeRun;

/* One run: reset, prefill the prompt (untimed), NT greedy tokens (timed). */
static gboolean
decode_once (gpointer p, GError **error)
{
  DecodeRun *d = p;
  if (!d->ops->reset (d->s, 1, error) || !d->ops->prefill (d->s, 0, d->ids, d->P, d->logits, error))
    return FALSE;
  d->first = hn_argmax (d->logits, d->vocab);
  gint64 t0 = g_get_monotonic_time ();
  if (!hn_transformer_session_decode_greedy (d->s, d->first, d->NT, d->out, error))
    return FALSE;
  d->seconds += (g_get_monotonic_time () - t0) / 1e6;
  return TRUE;
}

/* Greedy decode as generation runs it: a session (contiguous KV cache), the prompt prefilled, then
 * new tokens from the recorded step replayed on the device with only the picked ids coming back. */
static gboolean
bench_decode (HnTransformer *m, const BenchOptions *o, JsonObject *res, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  int P = o->seq_len > 0 ? o->seq_len : 128, NT = o->new_tokens > 0 ? o->new_tokens : 128;
  if (o->batch != 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "the decode workload runs batch 1 (got --batch %d)", o->batch);
      return FALSE;
    }
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 1, P + NT + 1, error);
  if (!s)
    return FALSE;
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  g_autofree int32_t *ids = g_new (int32_t, P);
  g_autofree int32_t *out = g_new (int32_t, NT + 1);
  g_autofree float *logits = g_new (float, hp->vocab);
  for (int i = 0; i < P; i++)
    ids[i] = (i * 7919 + 11) % hp->vocab;
  /* warm-up (records the step, creates its pipelines, and lifts the GPU's clocks from idle: whole
   * runs for at least --warmup-seconds), then --iterations measured runs, each from a fresh prompt
   * (the prefill untimed) */
  DecodeRun dr = { s, ops, ids, P, NT, hp->vocab, logits, out, 0, 0.0 };
  if (!warm_until (o, res, decode_once, &dr, error))
    return FALSE;
  int iters = MAX (o->iterations, 1);
  dr.seconds = 0.0;
  for (int i = 0; i < iters; i++)
    if (!decode_once (&dr, error))
      return FALSE;
  double sec = dr.seconds / iters;
  int32_t first = dr.first;
  double prof_total = 0;
  JsonNode *prof = NULL;
  if (o->profile)
    {
      /* one more step, timed per dispatch */
      hn_transformer_session_set_profiling (s, TRUE);
      if (!ops->reset (s, 1, error) || !ops->prefill (s, 0, ids, P, logits, error) ||
          !hn_transformer_session_decode_greedy (s, first, 1, out + NT, error))
        return FALSE;
      guint n = 0;
      const HnCmdProfileEntry *e = hn_transformer_session_get_profile (s, &n);
      prof = profile_entries_json (e, n, &prof_total);
    }
  double per_tok = sec / NT;
  json_object_set_int_member (res, "prompt_tokens", P);
  json_object_set_int_member (res, "new_tokens", NT);
  json_object_set_int_member (res, "runs", iters);
  set_d (res, "tokens_per_s", NT / sec);
  set_d (res, "ms_per_token", per_tok * 1e3);
  /* bytes a decode step must read: every weight once (+ the KV cache, small here) */
  set_d (res, "weight_gb_per_s", hn_transformer_get_weight_bytes (m) / per_tok / 1e9);
  /* the picks, so runs can be compared (first and last few) */
  json_object_set_int_member (res, "first_token", out[0]);
  json_object_set_int_member (res, "last_token", out[NT - 1]);
  if (prof)
    {
      set_d (res, "profiled_step_gpu_us", prof_total);
      json_object_set_member (res, "profile", prof);
    }
  return TRUE;
}

/* Runs every request of `prompts` through hn_generate_batch_run with up to `C` at once on a paged
 * session (C = 0: one after another on a contiguous session, hn_generate_run each) and records the
 * aggregate rate, prefills included. */
static gboolean
bench_requests (HnTransformer *m, const HnGenerateOptions *opt, GPtrArray *prompts, int ctx_len, int C, JsonObject *row,
                GError **error)
{
  int V = hn_transformer_get_hparams (m)->vocab;
  gint64 t0 = g_get_monotonic_time (), tokens = 0;
  if (C == 0)
    {
      g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 1, ctx_len, error);
      if (!s)
        return FALSE;
      HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, V, NULL, NULL, NULL, NULL };
      t0 = g_get_monotonic_time ();
      for (guint i = 0; i < prompts->len; i++)
        {
          GArray *p = g_ptr_array_index (prompts, i);
          g_autoptr (HnGenerateResult) r = hn_generate_run (&gm, opt, (const int32_t *) p->data, (int) p->len, NULL, error);
          if (!r)
            return FALSE;
          tokens += r->n_generated;
        }
    }
  else
    {
      int pages = (ctx_len - 1 + HN_KV_PAGE_SIZE - 1) / HN_KV_PAGE_SIZE;
      g_autoptr (HnTransformerSession) s = hn_transformer_session_new_paged (m, C, ctx_len, C * pages, error);
      if (!s)
        return FALSE;
      HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, V, NULL, NULL, NULL, NULL };
      HnBatchOptions bo = { C, C * pages, HN_KV_PAGE_SIZE, 0 };
      HnBatchStats st;
      t0 = g_get_monotonic_time ();
      g_autoptr (GPtrArray) res = hn_generate_batch_run (&gm, opt, &bo, prompts, NULL, NULL, &st, NULL, error);
      if (!res)
        return FALSE;
      tokens = st.n_generated;
      json_object_set_int_member (row, "decode_rounds", st.rounds);
      json_object_set_int_member (row, "max_active", st.max_active);
      set_d (row, "ms_per_round_with_prefills", st.seconds * 1e3 / MAX (st.rounds, 1));
    }
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  json_object_set_int_member (row, "generated_tokens", tokens);
  set_d (row, "seconds", secs);
  set_d (row, "tokens_per_s", tokens / MAX (secs, 1e-9));
  return TRUE;
}

/* --workload decode --continuous-batching: --requests prompts of --seq-len random tokens, each
 * generating --new-tokens greedily (no EOS), served with each --concurrency level, against the
 * same requests run one after another on the contiguous cache. */
static gboolean
bench_decode_batched (HnTransformer *m, const BenchOptions *o, JsonObject *res, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  int P = o->seq_len > 0 ? o->seq_len : 32, NT = o->new_tokens > 0 ? o->new_tokens : 32;
  int R = o->requests > 0 ? o->requests : 64;
  g_auto (GStrv) levels = g_strsplit (o->concurrency ? o->concurrency : "1,8,32,64", ",", -1);
  g_autoptr (GArray) cs = g_array_new (FALSE, FALSE, sizeof (int));
  for (char **l = levels; *l; l++)
    {
      char *end = NULL;
      gint64 c = g_ascii_strtoll (*l, &end, 10);
      if (!end || *end || c < 1 || c > 4096)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--concurrency: \"%s\" is not a count in 1..4096", *l);
          return FALSE;
        }
      int ci = (int) c;
      g_array_append_val (cs, ci);
    }
  g_autoptr (GPtrArray) prompts = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (int r = 0; r < R; r++)
    {
      GArray *p = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), (guint) P);
      for (int i = 0; i < P; i++)
        {
          int32_t id = (int32_t) (((gint64) (r * P + i) * 7919 + 11) % hp->vocab);
          g_array_append_val (p, id);
        }
      g_ptr_array_add (prompts, p);
    }
  HnGenerateOptions opt;
  hn_generate_options_init (&opt); /* greedy, no EOS: every request makes NT tokens */
  opt.max_new_tokens = NT;
  g_autoptr (JsonObject) seq = json_object_new ();
  gboolean ok = bench_requests (m, &opt, prompts, P + NT, 0, seq, error);
  JsonArray *rows = json_array_new ();
  double base = ok ? json_object_get_double_member (seq, "tokens_per_s") : 0;
  for (guint i = 0; ok && i < cs->len; i++)
    {
      JsonObject *row = json_object_new ();
      json_object_set_int_member (row, "concurrent_requests", g_array_index (cs, int, i));
      ok = bench_requests (m, &opt, prompts, P + NT, g_array_index (cs, int, i), row, error);
      if (ok)
        set_d (row, "speedup_vs_sequential", json_object_get_double_member (row, "tokens_per_s") / MAX (base, 1e-9));
      json_array_add_object_element (rows, row);
    }
  hn_generate_options_clear (&opt);
  json_object_set_boolean_member (res, "continuous_batching", TRUE);
  json_object_set_int_member (res, "requests", R);
  json_object_set_int_member (res, "prompt_tokens", P);
  json_object_set_int_member (res, "new_tokens", NT);
  json_object_set_object_member (res, "sequential", json_object_ref (seq));
  json_object_set_array_member (res, "batched", rows);
  return ok;
}

typedef struct { Fwd *f; const int32_t *ids, *pos; int B, T; } PrefillRun;

static gboolean
prefill_once (gpointer p, GError **error)
{
  PrefillRun *r = p;
  return fwd_run (r->f, r->ids, r->pos, r->B, r->T, 0, error);
}

static gboolean
bench_prefill (HnTransformer *m, const BenchOptions *o, guint64 n_params, JsonObject *res, GError **error)
{
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  int B = MAX (o->batch, 1), T = o->seq_len > 0 ? o->seq_len : 512;
  Fwd f = { 0 };
  if (!fwd_init (&f, m, B, T, B * T, error))
    {
      fwd_clear (&f);
      return FALSE;
    }
  g_autofree int32_t *ids = g_new (int32_t, (gsize) B * T);
  g_autofree int32_t *pos = g_new (int32_t, (gsize) B * T);
  int off = hp->learned_pos ? hp->pos_offset : 0;
  for (int i = 0; i < B * T; i++)
    ids[i] = (i * 7919 + 11) % hp->vocab, pos[i] = i % T + off;
  gboolean ok = TRUE;
  /* HN_BENCH_PROFILE_ALL=1: timestamps on every run, and each timed run's wall time, dispatch
   * span and dispatch sum (ms) in runs_wall_span_gpu_ms (where the wall time goes) */
  gboolean every = g_getenv ("HN_BENCH_PROFILE_ALL") != NULL;
  f.replay = g_getenv ("HN_BENCH_PREFILL_REPLAY") != NULL;
  json_object_set_boolean_member (res, "flushed_per_layer", hn_transformer_flush_layers (B * T));
  json_object_set_boolean_member (res, "replayed", f.replay);
  g_autoptr (GString) runs = every ? g_string_new ("") : NULL;
  if (every)
    hn_cmd_set_profiling (f.cmd, TRUE);
  PrefillRun pr = { &f, ids, pos, B, T };
  ok = warm_until (o, res, prefill_once, &pr, error);
  int iters = MAX (o->iterations, 1);
  f.record_us = 0;
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; ok && i < iters; i++)
    {
      gint64 r0 = g_get_monotonic_time ();
      ok = fwd_run (&f, ids, pos, B, T, 0, error);
      if (ok && runs)
        {
          guint n = 0;
          double sum = 0;
          const HnCmdProfileEntry *e = hn_cmd_get_profile (f.cmd, &n);
          for (guint k = 0; k < n; k++)
            sum += e[k].microseconds;
          g_string_append_printf (runs, "%s%.2f/%.2f/%.2f", i ? " " : "", (g_get_monotonic_time () - r0) / 1e3,
                                  hn_cmd_get_profile_span_us (f.cmd) / 1e3, sum / 1e3);
        }
    }
  double s = (g_get_monotonic_time () - t0) / 1e6 / iters;
  double rec_ms = f.record_us / 1e3 / iters;
  guint n_disp = hn_cmd_get_n_dispatches (f.cmd);
  double prof_total = 0;
  JsonNode *prof = NULL;
  if (ok && o->profile)
    {
      hn_cmd_set_profiling (f.cmd, TRUE);
      ok = fwd_run (&f, ids, pos, B, T, 0, error);
      if (ok)
        prof = profile_json (f.cmd, &prof_total);
    }
  double span = hn_cmd_get_profile_span_us (f.cmd);
  fwd_clear (&f);
  if (!ok)
    {
      if (prof)
        json_node_unref (prof);
      return FALSE;
    }
  /* 2 FLOPs per weight per token (embedding gather excluded) + causal attention */
  double tokens = (double) B * T;
  double flops = 2.0 * (double) n_params * tokens +
                 2.0 * hp->n_layer * (double) B * T * T * hp->n_head * hp->head_dim; /* QK^T + PV, causal half */
  json_object_set_int_member (res, "tokens", (gint64) tokens);
  set_d (res, "tokens_per_s", tokens / s);
  set_d (res, "ms_per_step", s * 1e3);
  set_d (res, "ms_recording", rec_ms); /* of ms_per_step: the host's share before the submit */
  json_object_set_int_member (res, "dispatches", n_disp);
  if (runs)
    json_object_set_string_member (res, "runs_wall_span_gpu_ms", runs->str);
  set_d (res, "tflops", flops / s / 1e12);
  if (prof)
    {
      set_d (res, "profiled_step_gpu_us", prof_total);
      set_d (res, "profiled_step_span_us", span); /* first dispatch's start to the last one's end */
      json_object_set_member (res, "profile", prof);
    }
  return TRUE;
}

/* One training step of bench_train (gradients, then the AdamW update); keeps the first step's loss
 * (from the same initial weights whatever the warm-up ran: runs compare by it) and the last one's. */
typedef struct {
  HnDataParallel *dp;
  const gint32 *in, *tg;
  double tokens, scale;
  gint64 step;
  double loss, first_loss;
  HnOptimConfig oc;
  gint64 grad_us, opt_us; /* host wall time of each phase, summed over the steps run */
} TrainRun;

static gboolean
train_run (gpointer data, GError **error)
{
  TrainRun *r = data;
  gint64 t0 = g_get_monotonic_time ();
  if (!hn_data_parallel_gradients (r->dp, r->in, r->tg, NULL, 1, r->tokens, &r->loss, error))
    return FALSE;
  gint64 t1 = g_get_monotonic_time ();
  if (!hn_data_parallel_optimizer_step (r->dp, &r->oc, ++r->step, 1e-4, (float) (1.0 / r->scale), error))
    return FALSE;
  r->grad_us += t1 - t0;
  r->opt_us += g_get_monotonic_time () - t1;
  if (r->step == 1)
    r->first_loss = r->loss;
  return TRUE;
}

/* One optimizer step per iteration: zero grads, forward + backward of one
 * batch (B x T), AdamW over every trained parameter (full or LoRA); with
 * several replicas (--device-indices) the batch is split across them and the
 * gradients all-reduced (engine/train/data-parallel.h). */
static gboolean
bench_train (HnDataParallel *dp, const BenchOptions *o, gboolean lora, JsonObject *res, GError **error)
{
  HnTransformer *m = hn_data_parallel_get_model (dp, 0);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  int B = MAX (o->batch, 1), T = o->seq_len > 0 ? o->seq_len : 1024;
  g_autoptr (HnLoraAdapter) ad = NULL;
  if (lora)
    {
      HnLoraConfig cfg;
      hn_lora_config_init (&cfg);
      cfg.r = o->lora_r > 0 ? o->lora_r : 8;
      cfg.alpha = 2.0 * cfg.r;
      gboolean ok = hn_lora_config_set_targets (&cfg, o->lora_targets ? o->lora_targets : "q_proj,k_proj,v_proj,o_proj",
                                                error);
      GArray *cands = ok ? hn_train_graph_lora_candidates (m, &cfg, error) : NULL;
      if (cands)
        {
          ad = hn_lora_adapter_new (&cfg);
          for (guint i = 0; i < cands->len; i++)
            {
              HnLoraCandidate *c = &g_array_index (cands, HnLoraCandidate, i);
              hn_lora_adapter_add (ad, c->path, c->in, c->out, 42 + i);
            }
          hn_lora_candidates_free (cands);
        }
      hn_lora_config_clear (&cfg);
      if (!ad)
        return FALSE;
    }
  gboolean fp16 = o->precision && (g_str_equal (o->precision, "fp16") || g_str_equal (o->precision, "bf16"));
  if (o->precision && !fp16 && !g_str_equal (o->precision, "fp32"))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--precision %s: use fp32, fp16 or bf16", o->precision);
      return FALSE;
    }
  HnTrainGraphOptions gopts = { o->checkpointing, fp16 };
  hn_data_parallel_set_graph_options (dp, &gopts);
  if (!hn_data_parallel_setup (dp, B, T, ad, error))
    return FALSE;
  /* fp16: the loss scaled by GradScaler's initial 65536 and unscaled in the
   * update, as a training job's overflow-free step does */
  double scale = fp16 ? 65536.0 : 1.0;
  hn_data_parallel_set_loss_scale (dp, scale);
  json_object_set_string_member (res, "precision", fp16 ? "fp16" : "fp32");
  g_autofree gint32 *in = g_new (gint32, (gsize) B * T);
  g_autofree gint32 *tg = g_new (gint32, (gsize) B * T);
  for (int i = 0; i < B * T; i++)
    in[i] = (i * 7919 + 11) % hp->vocab, tg[i] = (i * 7919 + 7930) % hp->vocab;
  TrainRun tr = { dp, in, tg, (double) B * T, scale, 0, 0.0, 0.0 };
  hn_optim_config_init (&tr.oc, HN_OPTIM_ADAMW);
  /* warmed up as the other workloads are (warm_until): the first step creates the pipelines while
   * the GPU idles, so a fixed step count left the timed steps partly at idle clocks (the first
   * training row of a device call ran 5-10 % below the next, 2026-12-03) */
  if (!warm_until (o, res, train_run, &tr, error))
    return FALSE;
  set_d (res, "first_step_loss", tr.first_loss);
  int iters = MAX (o->iterations, 1);
  tr.grad_us = tr.opt_us = 0;
  gint64 rec0 = hn_train_graph_get_record_us (hn_data_parallel_get_graph (dp, 0));
  gint64 t0 = g_get_monotonic_time ();
  double allreduce0 = hn_data_parallel_get_allreduce_seconds (dp);
  for (int i = 0; i < iters; i++)
    if (!train_run (&tr, error))
      return FALSE;
  double loss = tr.loss;
  double s = (g_get_monotonic_time () - t0) / 1e6 / iters;
  double rec_ms = (hn_train_graph_get_record_us (hn_data_parallel_get_graph (dp, 0)) - rec0) / 1e3 / iters;
  if (o->profile)
    {
      /* one more forward + backward (a single submission) with timestamps, of replica 0's share */
      HnTrainGraph *g = hn_data_parallel_get_graph (dp, 0);
      HnCmd *cmd = hn_train_graph_get_cmd (g);
      double prof_total = 0, l2 = 0;
      hn_cmd_set_profiling (cmd, TRUE);
      g_autoptr (GError) perr = NULL;
      if (hn_train_graph_zero_grads (g, &perr) && hn_train_graph_micro_step (g, in, tg, NULL, (double) B * T, &l2, &perr))
        {
          JsonNode *prof = profile_json (cmd, &prof_total);
          set_d (res, "profiled_step_gpu_us", prof_total);
          set_d (res, "profiled_step_span_us", hn_cmd_get_profile_span_us (cmd)); /* first start to last end */
          json_object_set_member (res, "profile", prof);
        }
      else /* the timed steps above still stand (a large model's step can pass the profiler's dispatch limit) */
        json_object_set_string_member (res, "profile_error", perr->message);
      hn_cmd_set_profiling (cmd, FALSE);
    }
  json_object_set_int_member (res, "tokens", (gint64) B * T);
  json_object_set_int_member (res, "replicas", hn_data_parallel_get_n_replicas (dp));
  set_d (res, "allreduce_ms_per_step", (hn_data_parallel_get_allreduce_seconds (dp) - allreduce0) / iters * 1e3);
  json_object_set_int_member (res, "trainable_params", hn_train_graph_get_n_trainable (hn_data_parallel_get_graph (dp, 0)));
  set_d (res, "tokens_per_s", (double) B * T / s);
  set_d (res, "ms_per_step", s * 1e3);
  /* of ms_per_step: zeroing, forward and backward (with the loss read back), and the update */
  set_d (res, "ms_gradients", tr.grad_us / 1e3 / iters);
  set_d (res, "ms_optimizer", tr.opt_us / 1e3 / iters);
  set_d (res, "ms_recording", rec_ms); /* of ms_gradients: replica 0 recording forward + backward */
  set_d (res, "loss", loss);
  return TRUE;
}

static int
print_result (JsonObject *res, const BenchOptions *o)
{
  g_autoptr (JsonNode) root = json_node_new (JSON_NODE_OBJECT);
  json_node_set_object (root, res);
  g_autofree char *text = json_to_string (root, !o->json);
  printf ("%s\n", text);
  return 0;
}

/* State-space decoders (ssm/mamba.h): decode --new-tokens greedy steps (one submission each, the
 * conv + SSM states carried, the logits read back and argmax'd on the host as generation does)
 * after a --seq-len prompt; prefill: --batch rows of --seq-len tokens in one forward. */
static gboolean
bench_mamba (HnMamba *m, const BenchOptions *o, gboolean decode, JsonObject *res, GError **error)
{
  const HnMambaHParams *hp = hn_mamba_get_hparams (m);
  int P = o->seq_len > 0 ? o->seq_len : decode ? 128 : 512, NT = o->new_tokens > 0 ? o->new_tokens : 128;
  int B = MAX (o->batch, 1), iters = o->iterations > 0 ? o->iterations : 5;
  if (decode && B != 1)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "the decode workload runs batch 1 (got --batch %d)", B);
      return FALSE;
    }
  g_autoptr (HnMambaSession) s = hn_mamba_session_new (m, B, P, error);
  if (!s)
    return FALSE;
  const HnLmOps *ops = hn_mamba_session_lm_ops ();
  g_autofree int32_t *ids = g_new (int32_t, P);
  g_autofree float *logits = g_new (float, (gsize) B * hp->vocab);
  for (int i = 0; i < P; i++)
    ids[i] = (i * 7919 + 11) % hp->vocab;
  json_object_set_int_member (res, "state_bytes_per_sequence", (gint64) hn_mamba_state_bytes_per_row (m));
  json_object_set_int_member (res, "weight_bytes", (gint64) hn_mamba_get_weight_bytes (m));
  if (!decode)
    {
      /* warm-up by time, as the prefill of the attention decoders */
      double warm = o->warmup_seconds > 0 ? o->warmup_seconds : 1.0;
      gint64 w0 = g_get_monotonic_time ();
      do
        for (int b = 0; b < B; b++)
          if (!ops->reset (s, B, error) || !ops->prefill (s, b, ids, P, logits, error))
            return FALSE;
      while ((g_get_monotonic_time () - w0) / 1e6 < warm);
      double best = 1e30, sum = 0;
      for (int it = 0; it < iters; it++)
        {
          if (!ops->reset (s, B, error))
            return FALSE;
          gint64 t0 = g_get_monotonic_time ();
          for (int b = 0; b < B; b++)
            if (!ops->prefill (s, b, ids, P, logits, error))
              return FALSE;
          double sec = (g_get_monotonic_time () - t0) / 1e6;
          best = MIN (best, sec);
          sum += sec;
        }
      json_object_set_int_member (res, "seq_len", P);
      set_d (res, "tokens_per_s", (double) B * P / (sum / iters));
      set_d (res, "best_tokens_per_s", (double) B * P / best);
      set_d (res, "ms_per_step", sum / iters * 1e3);
      return TRUE;
    }
  g_autofree int32_t *out = g_new (int32_t, NT);
  int32_t tok = 0;
  /* warm-up (pipelines), then the measured run from a fresh prompt */
  for (int pass = 0; pass < 2; pass++)
    {
      if (!ops->reset (s, 1, error) || !ops->prefill (s, 0, ids, P, logits, error))
        return FALSE;
      tok = hn_argmax (logits, hp->vocab);
      int row = 0, steps = pass ? NT : 4;
      gint64 t0 = g_get_monotonic_time ();
      for (int i = 0; i < steps; i++)
        {
          if (!ops->decode (s, 1, &row, &tok, logits, error))
            return FALSE;
          tok = hn_argmax (logits, hp->vocab);
          if (pass)
            out[i] = tok;
        }
      if (pass)
        {
          double sec = (g_get_monotonic_time () - t0) / 1e6;
          set_d (res, "tokens_per_s", NT / sec);
          set_d (res, "ms_per_token", sec / NT * 1e3);
          set_d (res, "weight_gb_per_s", hn_mamba_get_weight_bytes (m) / (sec / NT) / 1e9);
        }
    }
  json_object_set_int_member (res, "prompt_tokens", P);
  json_object_set_int_member (res, "new_tokens", NT);
  json_object_set_int_member (res, "first_token", out[0]);
  json_object_set_int_member (res, "last_token", out[NT - 1]);
  if (o->profile)
    {
      hn_mamba_session_set_profiling (s, TRUE);
      int row = 0;
      if (!ops->decode (s, 1, &row, &tok, logits, error))
        return FALSE;
      guint n = 0;
      double total = 0;
      const HnCmdProfileEntry *e = hn_mamba_session_get_profile (s, &n);
      JsonNode *prof = profile_entries_json (e, n, &total);
      set_d (res, "profiled_step_gpu_us", total);
      json_object_set_member (res, "profile", prof);
    }
  return TRUE;
}

static int
run_benchmark (const BenchOptions *o)
{
  g_autoptr (GError) error = NULL;
  HnStDtype dt;
  if (!parse_dtype (o->dtype, &dt, &error))
    return hn_cli_fail (g_steal_pointer (&error));
  if ((o->continuous_batching || o->requests || o->concurrency) &&
      (!o->continuous_batching || (o->workload && !g_str_equal (o->workload, "decode"))))
    {
      g_set_error (&error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--continuous-batching (with --requests and --concurrency) goes with --workload decode");
      return hn_cli_fail (g_steal_pointer (&error));
    }
  const char *wl = o->workload ? o->workload : "decode";
  if (!g_str_equal (wl, "decode") && !g_str_equal (wl, "prefill") && !g_str_equal (wl, "gemm") &&
      !g_str_equal (wl, "train") && !g_str_equal (wl, "lora") && !g_str_equal (wl, "mma-peak"))
    {
      g_set_error (&error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--workload %s: use decode, prefill, train, lora, gemm or mma-peak", wl);
      return hn_cli_fail (g_steal_pointer (&error));
    }
  gboolean training = g_str_equal (wl, "train") || g_str_equal (wl, "lora");
  if (o->device_indices && !training)
    {
      g_set_error (&error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--device-indices applies to --workload train and lora");
      return hn_cli_fail (g_steal_pointer (&error));
    }
  g_autoptr (HnVkContext) ctx = hn_vk_context_new_for_selector (o->device, &error);
  if (!ctx)
    return hn_cli_fail (g_steal_pointer (&error));
  const HnVkDeviceInfo *info = hn_vk_context_get_device_info (ctx);
  g_autoptr (JsonObject) res = json_object_new ();
  json_object_set_string_member (res, "workload", wl);
  json_object_set_string_member (res, "device", info->name);
  json_object_set_string_member (res, "dtype", hn_st_dtype_name (dt));
  json_object_set_boolean_member (res, "coopmat", hn_vk_context_has_coopmat (ctx));
  json_object_set_int_member (res, "batch", MAX (o->batch, 1));
  if (training)
    {
      /* what the row measured, so a raw line describes itself */
      json_object_set_string_member (res, "quantization", o->quantization ? o->quantization : "none");
      json_object_set_boolean_member (res, "gradient_checkpointing", o->checkpointing);
      if (g_str_equal (wl, "lora"))
        {
          json_object_set_int_member (res, "lora_r", o->lora_r > 0 ? o->lora_r : 8);
          json_object_set_string_member (res, "lora_target_modules",
                                         o->lora_targets ? o->lora_targets : "q_proj,k_proj,v_proj,o_proj");
        }
    }
  gboolean ok;
  if (g_str_equal (wl, "gemm"))
    ok = bench_gemm (ctx, o, dt, res, &error);
  else if (g_str_equal (wl, "mma-peak"))
    ok = bench_mma_peak (ctx, o, res, &error);
  else
    {
      g_autofree char *tmp = NULL;
      const char *dir = o->model_path;
      const SynthShape *sh = NULL;
      if (!dir)
        {
          const char *name = o->synthetic ? o->synthetic : "tiny";
          for (const SynthShape *s = synth_shapes; s->name; s++)
            if (g_str_equal (s->name, name))
              sh = s;
          if (!sh)
            {
              g_set_error (&error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "--synthetic %s: known shapes are llama-1b, llama3-8b, gpt2-124m, mamba-130m and tiny", name);
              return hn_cli_fail (g_steal_pointer (&error));
            }
          gint64 w0 = g_get_monotonic_time ();
          if (!(tmp = write_synthetic (sh, dt, &error)))
            return hn_cli_fail (g_steal_pointer (&error));
          set_d (res, "synthetic_write_s", (g_get_monotonic_time () - w0) / 1e6);
          dir = tmp;
        }
      json_object_set_string_member (res, "model", sh ? sh->name : o->model_path);
      if (training)
        {
          /* one replica per device: the --device one, or each of --device-indices */
          g_autoptr (GArray) devs = o->device_indices ? hn_parse_device_indices (o->device_indices, &error) : NULL;
          g_autoptr (GPtrArray) ctxs = devs ? hn_vk_contexts_new ((const int *) devs->data, devs->len, &error)
                                            : g_ptr_array_new_with_free_func ((GDestroyNotify) hn_vk_context_unref);
          if (ctxs && !devs)
            g_ptr_array_add (ctxs, hn_vk_context_ref (ctx));
          /* --quantization: nf4 (--double-quant: double-quantized scales) or int8, LoRA only */
          HnDType quant = HN_DTYPE_F32;
          const char *qs = o->quantization;
          if (qs && !hn_quant_dtype_from_string (qs, o->double_quant, &quant, &error))
            return hn_cli_fail (g_steal_pointer (&error));
          if (quant != HN_DTYPE_F32 && !g_str_equal (wl, "lora"))
            {
              g_set_error (&error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                           "--quantization is for --workload lora (full training trains the weights)");
              return hn_cli_fail (g_steal_pointer (&error));
            }
          gint64 l0 = g_get_monotonic_time ();
          g_autoptr (HnDataParallel) dp =
            ctxs ? hn_data_parallel_new_quantized ((HnVkContext *const *) ctxs->pdata, ctxs->len, dir, quant, &error)
                 : NULL;
          set_d (res, "load_s", (g_get_monotonic_time () - l0) / 1e6); /* read, quantize, upload */
          /* the memory estimate of one replica (its share of the batch), beside its measured peak */
          HnMemoryRequest req = { g_str_equal (wl, "lora") ? HN_MEMORY_LORA : HN_MEMORY_TRAIN,
                                  MAX (MAX (o->batch, 1) / (int) (ctxs ? ctxs->len : 1), 1),
                                  o->seq_len > 0 ? o->seq_len : 1024, o->lora_r > 0 ? o->lora_r : 8,
                                  o->lora_targets ? o->lora_targets : "q_proj,k_proj,v_proj,o_proj", 0, 0, FALSE,
                                  o->checkpointing, quant,
                                  o->precision && (g_str_equal (o->precision, "fp16") || g_str_equal (o->precision, "bf16")) };
          HnMemoryEstimate est;
          if (dp && hn_memory_estimate_model (dir, &req, &est, NULL))
            {
              json_object_set_int_member (res, "estimate_bytes", (gint64) est.total);
              hn_memory_estimate_clear (&est);
            }
          if (tmp)
            remove_dir (tmp);
          if (!dp)
            return hn_cli_fail (g_steal_pointer (&error));
          HnVkContext *c0 = hn_data_parallel_get_context (dp, 0);
          json_object_set_string_member (res, "device", hn_vk_context_get_device_info (c0)->name);
          json_object_set_int_member (res, "weight_bytes",
                                      (gint64) hn_transformer_get_weight_bytes (hn_data_parallel_get_model (dp, 0)));
          hn_vk_context_reset_peak (c0);
          ok = bench_train (dp, o, g_str_equal (wl, "lora"), res, &error);
          HnVkMemoryStats ms; /* replica 0 */
          hn_vk_context_get_memory_stats (c0, &ms);
          json_object_set_int_member (res, "peak_device_bytes", (gint64) ms.peak_reserved_bytes);
          json_object_set_int_member (res, "peak_allocated_bytes", (gint64) ms.peak_allocated_bytes);
          if (!ok)
            return hn_cli_fail (g_steal_pointer (&error));
          return print_result (res, o);
        }
      g_autoptr (HnModelConfig) mcfg = hn_model_config_load (dir, NULL);
      const HnArchInfo *march = mcfg ? hn_arch_lookup (mcfg->model_type, NULL) : NULL;
      if (march && hn_arch_is_ssm (march))
        {
          if (o->continuous_batching || !(g_str_equal (wl, "decode") || g_str_equal (wl, "prefill")))
            {
              if (tmp)
                remove_dir (tmp);
              g_set_error (&error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                           "model_type \"%s\" (state-space decoder): --workload %s%s is not supported (decode and "
                           "prefill are)", march->model_type, wl, o->continuous_batching ? " --continuous-batching" : "");
              return hn_cli_fail (g_steal_pointer (&error));
            }
          g_autoptr (HnMamba) mm = hn_mamba_load (ctx, dir, &error);
          if (tmp)
            remove_dir (tmp);
          if (!mm)
            return hn_cli_fail (g_steal_pointer (&error));
          hn_vk_context_reset_peak (ctx);
          ok = bench_mamba (mm, o, g_str_equal (wl, "decode"), res, &error);
          HnVkMemoryStats mms;
          hn_vk_context_get_memory_stats (ctx, &mms);
          json_object_set_int_member (res, "peak_device_bytes", (gint64) mms.peak_reserved_bytes);
          if (!ok)
            return hn_cli_fail (g_steal_pointer (&error));
          return print_result (res, o);
        }
      g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
      if (tmp)
        remove_dir (tmp);
      if (!m)
        return hn_cli_fail (g_steal_pointer (&error));
      const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
      guint64 wbytes = hn_transformer_get_weight_bytes (m);
      guint64 esz = dt == HN_ST_DTYPE_F32 ? 4 : 2;
      /* parameters that a token's matmuls touch: all but the input embedding
       * (tied models still read it once as the LM head) */
      guint64 n_params = wbytes / esz - (hp->tie_embeddings ? 0 : (guint64) hp->vocab * hp->hidden);
      json_object_set_int_member (res, "weight_bytes", (gint64) wbytes);
      hn_vk_context_reset_peak (ctx);
      if (g_str_equal (wl, "decode") && o->continuous_batching)
        ok = bench_decode_batched (m, o, res, &error);
      else if (g_str_equal (wl, "decode"))
        ok = bench_decode (m, o, res, &error);
      else
        ok = bench_prefill (m, o, n_params, res, &error);
    }
  HnVkMemoryStats ms;
  hn_vk_context_get_memory_stats (ctx, &ms);
  json_object_set_int_member (res, "peak_device_bytes", (gint64) ms.peak_reserved_bytes);
  json_object_set_int_member (res, "peak_allocated_bytes", (gint64) ms.peak_allocated_bytes);
  if (!ok)
    return hn_cli_fail (g_steal_pointer (&error));
  return print_result (res, o);
}

int hn_cmd_benchmark (int argc, char **argv);

int
hn_cmd_benchmark (int argc, char **argv)
{
  int status;
  g_autoptr (HnJobSpec) spec = hn_cli_parse_command ("benchmark", argc, argv, &status);
  if (!spec)
    return status;
  BenchOptions o = {
    .model_path = hn_job_spec_get_string (spec, "model-path"),
    .synthetic = hn_job_spec_get_string (spec, "synthetic"),
    .dtype = hn_job_spec_get_string (spec, "dtype"),
    .workload = hn_job_spec_get_string (spec, "workload"),
    .device = hn_job_spec_get_string (spec, "device"),
    .concurrency = hn_job_spec_get_string (spec, "concurrency"),
    .device_indices = hn_job_spec_get_string (spec, "device-indices"),
    .quantization = hn_job_spec_get_string (spec, "quantization"),
    .double_quant = hn_job_spec_get_bool (spec, "double-quant"),
    .lora_targets = hn_job_spec_get_string (spec, "lora-target-modules"),
    .batch = (int) hn_job_spec_get_int (spec, "batch-size"),
    .seq_len = (int) hn_job_spec_get_int (spec, "seq-len"),
    .new_tokens = (int) hn_job_spec_get_int (spec, "max-new-tokens"),
    .iterations = (int) hn_job_spec_get_int (spec, "iterations"),
    .warmup = (int) hn_job_spec_get_int (spec, "warmup"),
    .warmup_seconds = hn_job_spec_get_double (spec, "warmup-seconds"),
    .size = (int) hn_job_spec_get_int (spec, "size"),
    .gemm_shape = hn_job_spec_get_string (spec, "gemm-shape"),
    .gemm_bias = hn_job_spec_get_bool (spec, "gemm-bias"),
    .requests = (int) hn_job_spec_get_int (spec, "requests"),
    .lora_r = (int) hn_job_spec_get_int (spec, "lora-r"),
    .json = hn_job_spec_get_bool (spec, "json"),
    .profile = hn_job_spec_get_bool (spec, "profile"),
    .continuous_batching = hn_job_spec_get_bool (spec, "continuous-batching"),
    .checkpointing = hn_job_spec_get_bool (spec, "gradient-checkpointing"),
    .precision = hn_job_spec_get_string (spec, "precision"),
  };
  /* "none" is the table's word for no packing */
  if (o.quantization && g_str_equal (o.quantization, "none"))
    o.quantization = NULL;
  return run_benchmark (&o);
}
