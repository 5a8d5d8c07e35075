/* The memory estimate against the measured peak (the context's
 * high-water mark of live allocations) for several configurations: full
 * training and LoRA on llama (stories260K) and gpt2, generation with one
 * and several beams. Each must be within 20 %. Also: the CLI's --dry-run
 * prints the same figures, and a device limit makes it say "does not fit". */
#include "train/lora.h"
#include "transformer/transformer.h"
#include "jobs/memory-estimate.h"
#include "jobs/train-job.h"
#include "jobs/hierarchos-job.h"
#include "train/train-graph.h"
#include "base/hn-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;

static char *
model_path (const char *which)
{
  if (g_str_equal (which, "stories"))
    return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", which, NULL);
}

typedef struct {
  const char *model;
  HnMemoryWorkload workload;
  int batch, seq_len, r;
  const char *targets;
  int rows, context;
  gboolean checkpointing;
  HnDType quant; /* QLoRA: F32 (0) = none */
} Case;

/* Runs the case for real and returns the peak of allocated device bytes. */
static guint64
measure (const Case *c)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = model_path (c->model);
  HnVkMemoryStats ms;
  hn_vk_context_get_memory_stats (ctx, &ms);
  g_assert_cmpuint (ms.allocated_bytes, ==, 0);
  hn_vk_context_reset_peak (ctx);
  {
    g_autoptr (HnTransformer) m = hn_transformer_load_quantized (ctx, dir, c->quant, &error);
    g_assert_no_error (error);
    if (c->workload == HN_MEMORY_GENERATE)
      {
        g_autoptr (HnTransformerSession) s =
          hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, c->rows, c->context, &error);
        g_assert_no_error (error);
      }
    else
      {
        g_autoptr (HnLoraAdapter) ad = NULL;
        if (c->workload == HN_MEMORY_LORA)
          {
            HnLoraConfig cfg;
            hn_lora_config_init (&cfg);
            cfg.r = c->r;
            g_assert_true (hn_lora_config_set_targets (&cfg, c->targets, &error));
            GArray *cands = hn_train_graph_lora_candidates (m, &cfg, &error);
            g_assert_no_error (error);
            ad = hn_lora_adapter_new (&cfg);
            for (guint i = 0; i < cands->len; i++)
              {
                HnLoraCandidate *lc = &g_array_index (cands, HnLoraCandidate, i);
                hn_lora_adapter_add (ad, lc->path, lc->in, lc->out, 1 + i);
              }
            hn_lora_candidates_free (cands);
            hn_lora_config_clear (&cfg);
          }
        HnTrainGraphOptions opts = { c->checkpointing };
        g_autoptr (HnTrainGraph) g = hn_train_graph_new_full (m, c->batch, c->seq_len, ad, &opts, &error);
        g_assert_no_error (error);
        int N = c->batch * c->seq_len, V = hn_transformer_get_hparams (m)->vocab;
        g_autofree gint32 *in = g_new (gint32, N), *tg = g_new (gint32, N);
        for (int i = 0; i < N; i++)
          in[i] = (i * 31 + 3) % V, tg[i] = (i * 31 + 34) % V;
        HnOptimConfig oc;
        hn_optim_config_init (&oc, HN_OPTIM_ADAMW);
        double loss = 0, norm = 0;
        g_assert_true (hn_train_graph_zero_grads (g, &error) &&
                       hn_train_graph_micro_step (g, in, tg, NULL, N, &loss, &error) &&
                       hn_train_graph_grad_norm (g, &norm, &error) &&
                       hn_train_graph_optimizer_step (g, &oc, 1, 1e-3, 1.0f, &error));
        g_assert_no_error (error);
        g_assert_true (isfinite (loss));
      }
  }
  hn_vk_context_get_memory_stats (ctx, &ms);
  return ms.peak_allocated_bytes;
}

static void
test_within_20_percent (void)
{
  static const Case cases[] = {
    { "stories", HN_MEMORY_TRAIN, 2, 32, 0, NULL, 0, 0 },
    { "stories", HN_MEMORY_TRAIN, 3, 48, 0, NULL, 0, 0 },
    { "stories", HN_MEMORY_LORA, 2, 64, 8, "q_proj,k_proj,v_proj,o_proj", 0, 0 },
    { "stories", HN_MEMORY_LORA, 2, 96, 16, "all-linear", 0, 0 },
    { "gpt2", HN_MEMORY_TRAIN, 2, 32, 0, NULL, 0, 0 },
    { "gpt2", HN_MEMORY_LORA, 4, 64, 4, "c_attn,c_proj", 0, 0 },
    { "qwen3", HN_MEMORY_TRAIN, 2, 32, 0, NULL, 0, 0 },
    { "stories", HN_MEMORY_TRAIN, 3, 48, 0, NULL, 0, 0, TRUE },
    { "stories", HN_MEMORY_LORA, 2, 96, 16, "all-linear", 0, 0, TRUE },
    { "gpt2", HN_MEMORY_TRAIN, 2, 32, 0, NULL, 0, 0, TRUE },
    { "stories", HN_MEMORY_LORA, 2, 96, 16, "all-linear", 0, 0, TRUE, HN_DTYPE_NF4 },
    { "stories", HN_MEMORY_LORA, 2, 64, 8, "q_proj,k_proj,v_proj,o_proj", 0, 0, FALSE, HN_DTYPE_NF4_DQ },
    { "stories", HN_MEMORY_LORA, 2, 64, 8, "all-linear", 0, 0, FALSE, HN_DTYPE_Q8 },
    { "stories", HN_MEMORY_GENERATE, 0, 0, 0, NULL, 1, 300 },
    { "stories", HN_MEMORY_GENERATE, 0, 0, 0, NULL, 4, 512 },
    { NULL },
  };
  for (const Case *c = cases; c->model; c++)
    {
      g_autoptr (GError) error = NULL;
      g_autofree char *dir = model_path (c->model);
      HnMemoryRequest req = { c->workload, c->batch, c->seq_len, c->r, c->targets, c->rows, c->context, FALSE,
                              c->checkpointing, c->quant };
      HnMemoryEstimate e;
      g_assert_true (hn_memory_estimate_model (dir, &req, &e, &error));
      g_assert_no_error (error);
      guint64 peak = measure (c);
      double ratio = (double) e.total / (double) peak;
      g_test_message ("%s workload %d%s%s b%d x %d r%d rows %d ctx %d: estimate %" G_GUINT64_FORMAT " peak %" G_GUINT64_FORMAT
                      " ratio %.3f", c->model, c->workload, c->checkpointing ? " (checkpointing)" : "", c->quant ? " (quantized)" : "", c->batch, c->seq_len, c->r, c->rows, c->context, e.total,
                      peak, ratio);
      g_assert_cmpfloat (ratio, >=, 0.8);
      g_assert_cmpfloat (ratio, <=, 1.2);
      hn_memory_estimate_clear (&e);
    }
}

/* The estimate counts what it should: doubling the batch doubles the
 * activations, LoRA has far fewer trainable parameters, a device limit
 * turns "fits" into a warning with advice. */
/* A GGUF model counts its weights at their block sizes and, on a device with
 * tensor-core matmuls, the ring of f16 forms prefill reads (3 x the largest
 * matrix in f16); a device without them (lavapipe) drops the ring. */
static void
test_gguf_ring (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                            "stories260K-llamacpp-q4_k_m.gguf", NULL);
  HnMemoryRequest g = { HN_MEMORY_GENERATE, 0, 0, 0, NULL, 1, 256, FALSE, FALSE, 0 };
  HnMemoryEstimate e;
  g_assert_true (hn_memory_estimate_model (path, &g, &e, &error));
  g_assert_no_error (error);
  /* stories260K: the largest matrix is the 512 x 64 embedding (ffn 172 x 64 is smaller) */
  g_assert_cmpuint (e.f16_weight_ring, ==, HN_WEIGHT_SCRATCH_SLOTS * 2 * 512 * 64);
  g_assert_cmpuint (e.weights, <, 4 * 300000);
  guint64 act = e.activations, total = e.total;
  hn_memory_estimate_set_device (&e, ctx);
  if (hn_vk_context_has_coopmat2 (ctx, NULL))
    g_assert_cmpuint (e.total, ==, total);
  else
    {
      g_assert_cmpuint (e.f16_weight_ring, ==, 0);
      g_assert_cmpuint (e.activations, ==, act - HN_WEIGHT_SCRATCH_SLOTS * 2 * 512 * 64);
      g_assert_cmpuint (e.total, ==, total - HN_WEIGHT_SCRATCH_SLOTS * 2 * 512 * 64);
    }
  hn_memory_estimate_clear (&e);
}

/* A state-space decoder's generation holds a fixed-size recurrent state per row (no KV cache that
 * grows with the context): mamba's fixture, 2 layers of (K - 1) · I conv + I · N SSM values. */
static void
test_state_space (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = model_path ("mamba");
  HnMemoryRequest g1 = { HN_MEMORY_GENERATE, 0, 0, 0, NULL, 1, 100, FALSE, FALSE, 0 }, g2 = g1, g3 = g1;
  g2.context = 10000;
  g3.rows = 3;
  HnMemoryEstimate e1, e2, e3;
  g_assert_true (hn_memory_estimate_model (dir, &g1, &e1, &error));
  g_assert_true (hn_memory_estimate_model (dir, &g2, &e2, &error));
  g_assert_true (hn_memory_estimate_model (dir, &g3, &e3, &error));
  g_assert_no_error (error);
  g_assert_true (e1.recurrent_state);
  g_assert_cmpuint (e1.kv_cache, ==, 4 * 2 * (3 * 64 + 64 * 8));
  g_assert_cmpuint (e2.kv_cache, ==, e1.kv_cache);
  g_assert_cmpuint (e3.kv_cache, ==, 3 * 2 * e1.kv_cache); /* beams: a second copy to reorder */
  g_autofree char *text = hn_memory_estimate_to_text (&e1);
  g_assert_nonnull (strstr (text, "recurrent state"));
  HnMemoryRequest t = { HN_MEMORY_TRAIN, 2, 64, 0, NULL, 0, 0, FALSE, FALSE, 0 };
  HnMemoryEstimate et;
  g_assert_false (hn_memory_estimate_model (dir, &t, &et, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "state-space"));
  hn_memory_estimate_clear (&e1);
  hn_memory_estimate_clear (&e2);
  hn_memory_estimate_clear (&e3);
}

static void
test_parts_and_device (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = model_path ("stories");
  HnMemoryRequest a = { HN_MEMORY_TRAIN, 2, 64, 0, NULL, 0, 0, FALSE }, b = a;
  b.batch = 4;
  HnMemoryEstimate ea, eb;
  g_assert_true (hn_memory_estimate_model (dir, &a, &ea, &error));
  g_assert_true (hn_memory_estimate_model (dir, &b, &eb, &error));
  g_assert_cmpuint (eb.activations, ==, 2 * ea.activations);
  g_assert_cmpuint (eb.weights, ==, ea.weights);
  g_assert_cmpuint (ea.optimizer, ==, 2 * ea.gradients);
  g_assert_cmpstr (ea.weights_dtype, ==, "f32");
  HnMemoryRequest l = { HN_MEMORY_LORA, 2, 64, 8, "q_proj,v_proj", 0, 0, FALSE };
  HnMemoryEstimate el;
  g_assert_true (hn_memory_estimate_model (dir, &l, &el, &error));
  g_assert_cmpint (el.n_trainable, <, ea.n_trainable / 10);
  /* 5 layers x (q: 8*(64+64) + v: 8*(64+32)) */
  g_assert_cmpint (el.n_trainable, ==, 5 * (8 * (64 + 64) + 8 * (64 + 32)));
  /* checkpointing keeps one set of layer activations instead of one per layer */
  HnMemoryRequest ck = a;
  ck.checkpointing = TRUE;
  HnMemoryEstimate eck;
  g_assert_true (hn_memory_estimate_model (dir, &ck, &eck, &error));
  g_assert_cmpuint (eck.activations, <, ea.activations);
  g_assert_cmpuint (eck.weights + eck.gradients + eck.optimizer, ==, ea.weights + ea.gradients + ea.optimizer);
  hn_memory_estimate_clear (&eck);

  hn_vk_context_set_memory_limit (ctx, ea.total / 2);
  hn_memory_estimate_set_device (&ea, ctx);
  g_assert_true (hn_memory_estimate_exceeds (&ea));
  g_autofree char *text = hn_memory_estimate_to_text (&ea);
  g_test_message ("%s", text);
  g_assert_nonnull (strstr (text, "does not fit"));
  g_assert_nonnull (strstr (text, "--batch-size"));
  hn_vk_context_set_memory_limit (ctx, 0);
  hn_memory_estimate_set_device (&ea, ctx);
  g_assert_false (hn_memory_estimate_exceeds (&ea));
  hn_memory_estimate_clear (&ea);
  hn_memory_estimate_clear (&eb);
  hn_memory_estimate_clear (&el);

  /* an adapter to continue brings its own rank and targets (not --lora-r) */
  g_autofree char *llama = model_path ("llama");
  g_autofree char *adapter = model_path ("llama_lora/adapter_init");
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-finetune", &error);
  hn_job_spec_set_string (spec, "model-path", llama);
  hn_job_spec_set_string (spec, "lora-adapter-path", adapter);
  hn_job_spec_set_int (spec, "lora-r", 64);
  HnMemoryEstimate es;
  g_assert_true (hn_memory_estimate_for_spec (spec, NULL, &es, &error));
  g_assert_no_error (error);
  HnLoraConfig acfg;
  hn_lora_config_init (&acfg);
  g_assert_true (hn_lora_config_load (&acfg, adapter, &error));
  g_autofree char *targets = g_strjoinv (",", acfg.target_modules);
  HnMemoryRequest ar = { HN_MEMORY_LORA, 4, 256, acfg.r, targets, 0, 0, FALSE };
  HnMemoryEstimate ea2;
  g_assert_true (hn_memory_estimate_model (llama, &ar, &ea2, &error));
  g_assert_cmpint (es.n_trainable, ==, ea2.n_trainable);
  g_assert_cmpint (acfg.r, !=, 64);
  hn_lora_config_clear (&acfg);
  hn_memory_estimate_clear (&es);
  hn_memory_estimate_clear (&ea2);

  /* a folder that is not a model: the error names it */
  HnMemoryEstimate bad;
  g_assert_false (hn_memory_estimate_model ("/nonexistent-model", &a, &bad, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "/nonexistent-model"));
}

/* --dry-run --json through the CLI: the same total as the engine call, and
 * nothing written. */
static void
test_cli_dry_run (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *cli = g_build_filename (g_getenv ("HN_BUILD_DIR"), "app", "cli", "hierarchos-native-cli", NULL);
  g_autofree char *dir = model_path ("stories");
  g_autofree char *tmp = g_dir_make_tmp ("hn-dry-XXXXXX", &error);
  g_autofree char *out = g_build_filename (tmp, "out", NULL);
  g_autofree char *data = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  const char *argv[] = { cli, "transformer-finetune", "--model-path", dir, "--train", data, "--out-dir", out,
                         "--batch-size", "3", "--seq-len", "40", "--lora-r", "4", "--dry-run", "--json", NULL };
  g_autofree char *so = NULL, *se = NULL;
  int status = 0;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &so, &se, &status, &error));
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, so, -1, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  HnMemoryRequest req = { HN_MEMORY_LORA, 3, 40, 4, "q_proj,v_proj", 0, 0, FALSE };
  HnMemoryEstimate e;
  g_assert_true (hn_memory_estimate_model (dir, &req, &e, &error));
  g_assert_cmpint (json_object_get_int_member (o, "total_bytes"), ==, (gint64) e.total);
  g_assert_cmpstr (json_object_get_string_member (o, "workload"), ==, "lora");
  g_assert_true (json_object_has_member (o, "fits"));
  g_assert_false (g_file_test (out, G_FILE_TEST_EXISTS));
  hn_memory_estimate_clear (&e);

  /* a device limit below the estimate: the text says it does not fit and what to change, exit 0 (a warning) */
  const char *envp_add = "HN_VK_MEMORY_LIMIT=4M";
  g_auto (GStrv) env = g_get_environ ();
  env = g_environ_setenv (env, "HN_VK_MEMORY_LIMIT", envp_add + strlen ("HN_VK_MEMORY_LIMIT="), TRUE);
  const char *argv2[] = { cli, "transformer-train", "--model-path", dir, "--train", data, "--out-dir", out,
                          "--batch-size", "8", "--seq-len", "256", "--dry-run", NULL };
  g_clear_pointer (&so, g_free);
  g_clear_pointer (&se, g_free);
  g_assert_true (g_spawn_sync (NULL, (char **) argv2, env, G_SPAWN_DEFAULT, NULL, NULL, &so, &se, &status, &error));
  g_test_message ("%s", so);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (so, "does not fit"));
  g_assert_nonnull (strstr (so, "LoRA"));
  g_rmdir (tmp);
}

/* The estimate of a training spec is built from the options the run reads
 * (hn_train_job_options_read), not from a second reading of the spec: the
 * batch splits over --device-indices, LoRA takes --lora-r and the targets. */
static void
test_from_job_options (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = model_path ("stories");
  const char *argv[] = { "transformer-finetune", "--model-path", dir, "--train", "x.jsonl", "--out-dir", "out",
                         "--batch-size", "8", "--seq-len", "64", "--lora-r", "4",
                         "--lora-target-modules", "q_proj,v_proj", "--device-indices", "0,0", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  g_auto (HnTrainJobOptions) o = { 0 };
  g_assert_true (hn_train_job_options_read (spec, &o, &error));
  g_assert_no_error (error);
  g_assert_true (o.lora);
  g_assert_cmpint (o.batch, ==, 8);
  g_assert_cmpuint (o.devices->len, ==, 2);
  HnMemoryRequest req;
  g_autofree char *owned = NULL;
  g_assert_true (hn_train_job_memory_request (&o, &req, &owned, &error));
  g_assert_cmpint (req.workload, ==, HN_MEMORY_LORA);
  g_assert_cmpint (req.batch, ==, 4); /* each replica holds half of the batch */
  g_assert_cmpint (req.seq_len, ==, 64);
  g_assert_cmpint (req.lora_r, ==, 4);
  g_assert_cmpstr (req.lora_targets, ==, "q_proj,v_proj");
  HnMemoryEstimate a = { 0 }, b = { 0 };
  hn_memory_estimate_model (dir, &req, &a, &error);
  g_assert_no_error (error);
  g_assert_true (hn_memory_estimate_for_spec (spec, NULL, &b, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (a.total, ==, b.total);
  g_assert_cmpuint (a.activations, ==, b.activations);
  hn_memory_estimate_clear (&a);
  hn_memory_estimate_clear (&b);
}

/* The same for Hierarchos on the CPU tape: the estimate is what
 * hn_hier_train_memory says for the trainer options the run reads. */
static void
test_hierarchos_from_job_options (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *tok = model_path ("stories");
  const char *argv[] = { "hierarchos-train", "--tokenizer-path", tok, "--train", "x.txt", "--out-dir", "out",
                         "--runtime", "cpu", "--batch-size", "2", "--grad-accum", "3", "--training-chunk-size", "16",
                         "--seq-len", "32", "--context-dim", "32", NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  HnHierJobOptions jo;
  g_assert_true (hn_hier_job_options_read (spec, &jo, &error));
  g_assert_true (jo.cpu);
  g_assert_cmpint (jo.train.batch_size, ==, 2);
  g_assert_cmpint (jo.train.accumulation_steps, ==, 3);
  g_assert_cmpint (jo.train.chunk_size, ==, 16);
  g_assert_cmpint (jo.train.max_length, ==, 32);
  g_assert_cmpint (jo.context_dim, ==, 32);
  g_autoptr (HnHierModel) m = hn_hier_fresh_model (&jo, tok, &error);
  g_assert_no_error (error);
  HnHierTrainMemory hm;
  g_assert_true (hn_hier_train_memory (m, &jo.train, &hm, &error));
  HnMemoryEstimate e = { 0 };
  g_assert_true (hn_memory_estimate_for_spec (spec, NULL, &e, &error));
  g_assert_no_error (error);
  g_assert_true (e.host);
  g_assert_cmpuint (e.total, ==, hm.params + hm.grads + hm.optimizer + hm.tapes);
  hn_memory_estimate_clear (&e);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_test_message ("no Vulkan device: %s", error->message);
      return 77;
    }
  g_test_add_func ("/memory-estimate/within-20-percent", test_within_20_percent);
  g_test_add_func ("/memory-estimate/parts-and-device", test_parts_and_device);
  g_test_add_func ("/memory-estimate/cli-dry-run", test_cli_dry_run);
  g_test_add_func ("/memory-estimate/state-space", test_state_space);
  g_test_add_func ("/memory-estimate/gguf-ring", test_gguf_ring);
  g_test_add_func ("/memory-estimate/from-job-options", test_from_job_options);
  g_test_add_func ("/memory-estimate/hierarchos-from-job-options", test_hierarchos_from_job_options);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
