/* QLoRA against the fixture tests/fixtures/parity/qlora_llama (made by
 * tests/fixtures/make_qlora_fixture.py: the tiny llama's Linear weights
 * NF4-quantized in numpy by bitsandbytes' rule, the dequantized f32 model
 * LoRA-trained with peft, r 4 on all-linear, 4 AdamW steps):
 * - the loader's NF4 packing dequantizes to exactly the fixture's weights;
 * - training on the packed base (the quantized matmul kernel) gives peft's
 *   losses within 2e-3 and its final adapter within 1e-4, with and without
 *   gradient checkpointing (the f32 kernel; the tensor-core one, with f16
 *   operands, its losses within 1e-3 where a device has it);
 * - peft's final adapter on the dequantized base gives peft's greedy tokens;
 * - the options resolve (--load-in-4bit, --load-in-8bit, --double-quant,
 *   --quantization q4_k) and what is not built (DoRA) is refused by name;
 * - q4_k: LoRA over layer weights packed into ggml's Q4_K blocks gives the
 *   losses of LoRA over an f32 model of the values those blocks hold. */
#include <math.h>
#include <string.h>

#include <json-glib/json-glib.h>

#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "formats/safetensors.h"
#include "jobs/job.h"
#include "tensor/quant.h"
#include "train/checkpoint.h"
#include "train/train-graph.h"
#include "jobs/train-job.h"

static HnVkContext *ctx;

static char *
fixture (const char *rel)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", rel, NULL);
}

static JsonObject *
expected (JsonParser *p)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *path = fixture ("qlora_llama/expected.json");
  g_assert_true (json_parser_load_from_file (p, path, &error));
  return json_node_get_object (json_parser_get_root (p));
}

static void
test_packing (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *base = fixture ("llama"), *deq = fixture ("qlora_llama/dequantized");
  g_autoptr (HnTransformer) plain = hn_transformer_load (ctx, base, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load_quantized (ctx, base, HN_DTYPE_NF4, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (deq, &error);
  g_assert_no_error (error);
  const HnTransformerWeights *W = hn_transformer_get_weights (m);
  static const char *const parts[] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj" };
  guint n_checked = 0;
  for (int il = 0; il < hn_transformer_get_hparams (m)->n_layer; il++)
    {
      const HnLayerWeights *lw = &W->layers[il];
      HnTensor *ws[] = { lw->wq, lw->wk, lw->wv, lw->wo, lw->w_gate, lw->w_up, lw->w_down };
      for (gsize i = 0; i < G_N_ELEMENTS (ws); i++)
        {
          HnTensor *t = ws[i];
          g_assert_cmpint (t->dtype, ==, HN_DTYPE_NF4);
          gint64 rows = t->shape[0], cols = t->shape[1];
          g_autofree guint8 *q = g_malloc (hn_tensor_nbytes (t));
          g_assert_true (hn_tensor_download_raw (t, q, hn_tensor_nbytes (t), &error));
          g_autofree float *mine = g_new (float, rows * cols);
          hn_quant_unpack_rows (HN_DTYPE_NF4, q, rows, cols, 0, rows, mine);
          g_autofree char *name = g_strdup_printf ("model.layers.%d.%s.weight", il, parts[i]);
          const HnSafetensorInfo *ref = hn_safetensors_lookup (st, name);
          g_assert_nonnull (ref);
          g_assert_cmpint (ref->n_elements, ==, rows * cols);
          g_autofree float *want = g_memdup2 (ref->data, ref->nbytes); /* the mapping may be unaligned */
          for (gint64 k = 0; k < rows * cols; k++)
            if (mine[k] != want[k])
              g_error ("%s element %" G_GINT64_FORMAT ": NF4 gives %.9g, the fixture's numpy quantizer %.9g", name, k,
                       mine[k], want[k]);
          n_checked++;
        }
    }
  g_assert_cmpuint (n_checked, ==, 14);
  /* the embeddings and the head stay f32 */
  g_assert_cmpint (W->tok_embed->dtype, ==, HN_DTYPE_F32);
  g_assert_cmpint (W->lm_head->dtype, ==, HN_DTYPE_F32);
  g_test_message ("weights on the device: %" G_GUINT64_FORMAT " bytes with NF4, %" G_GUINT64_FORMAT " as stored",
                  hn_transformer_get_weight_bytes (m), hn_transformer_get_weight_bytes (plain));
  g_assert_cmpuint (hn_transformer_get_weight_bytes (m), <, hn_transformer_get_weight_bytes (plain));
}

static void
read_batch (JsonObject *train, gint32 *inputs, gint32 *targets)
{
  JsonArray *ids = json_object_get_array_member (train, "input_ids");
  JsonArray *labels = json_object_get_array_member (train, "labels");
  for (int b = 0; b < 2; b++)
    {
      JsonArray *ri = json_array_get_array_element (ids, b), *rl = json_array_get_array_element (labels, b);
      for (int t = 0; t < 12; t++)
        {
          inputs[b * 12 + t] = (gint32) json_array_get_int_element (ri, t);
          targets[b * 12 + t] = t + 1 < 12 ? (gint32) json_array_get_int_element (rl, t + 1) : -100;
        }
    }
}

/* tensor_cores FALSE: HN_MATMUL_EXACT, the f32 kernel (peft's losses within
 * 2e-3, its adapter within 1e-4); TRUE: the tensor-core kernel with its f16
 * operands, where a device has it: the losses within 1e-3 (the H200: 5e-5).
 * Its adapter is only reported: AdamW moves an entry whose gradient is near
 * zero by up to lr a step whatever the gradient's last digits, so f16
 * rounding alone puts entries 0.02 apart after 4 steps at lr 1e-2. */
static void
run_qlora (gboolean checkpointing, gboolean tensor_cores)
{
  double loss_tol = tensor_cores ? 1e-3 : 2e-3, adapter_tol = 1e-4;
  if (!tensor_cores)
    g_setenv ("HN_MATMUL_EXACT", "1", TRUE);
  g_autoptr (GError) error = NULL;
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *exp = expected (p);
  JsonObject *train = json_object_get_object_member (exp, "train");
  JsonArray *losses = json_object_get_array_member (train, "losses");
  double lr = json_object_get_double_member (train, "lr");
  gint32 inputs[24], targets[24];
  read_batch (train, inputs, targets);
  g_autofree char *base = fixture ("llama"), *init = fixture ("qlora_llama/adapter_init");
  g_autofree char *final = fixture ("qlora_llama/adapter_final");
  g_autoptr (HnTransformer) m = hn_transformer_load_quantized (ctx, base, HN_DTYPE_NF4, &error);
  g_assert_no_error (error);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (init, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ad->modules->len, ==, 14);
  HnTrainGraphOptions opts = { checkpointing };
  g_autoptr (HnTrainGraph) g = hn_train_graph_new_full (m, 2, 12, ad, &opts, &error);
  g_assert_no_error (error);
  double w_total = 0;
  for (int i = 0; i < 24; i++)
    w_total += targets[i] != -100;
  HnOptimConfig oc;
  hn_optim_config_init (&oc, HN_OPTIM_ADAMW);
  oc.lr = lr;
  for (int step = 0; step < 4; step++)
    {
      double loss = 0;
      g_assert_true (hn_train_graph_zero_grads (g, &error));
      g_assert_true (hn_train_graph_micro_step (g, inputs, targets, NULL, w_total, &loss, &error));
      g_assert_no_error (error);
      double want = json_array_get_double_element (losses, step);
      g_test_message ("QLoRA%s%s step %d: loss %.6f, peft on the dequantized base %.6f (difference %.2g)",
                      checkpointing ? " (checkpointing)" : "",
                      g_getenv ("HN_QUANT_F16") ? " (W's f16 form)" : tensor_cores ? " (tensor cores)" : "", step, loss, want,
                      fabs (loss - want));
      if (fabs (loss - want) > loss_tol)
        g_error ("QLoRA loss of step %d is %.6f, peft's %.6f", step, loss, want);
      g_assert_true (hn_train_graph_optimizer_step (g, &oc, step + 1, lr, 1.0f, &error));
    }
  g_assert_true (hn_train_graph_sync_adapter (g, &error));
  g_autoptr (HnLoraAdapter) want = hn_lora_adapter_load (final, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (want->modules->len, ==, ad->modules->len);
  double worst = 0;
  for (guint i = 0; i < ad->modules->len; i++)
    {
      HnLoraModule *a = ad->modules->pdata[i], *b = want->modules->pdata[i];
      g_assert_cmpstr (a->module, ==, b->module);
      for (int k = 0; k < a->r * a->in; k++)
        worst = MAX (worst, fabs (a->a[k] - b->a[k]));
      for (int k = 0; k < a->out * a->r; k++)
        worst = MAX (worst, fabs (a->b[k] - b->b[k]));
    }
  g_test_message ("trained adapter within %.3g of peft's", worst);
  if (!tensor_cores)
    g_assert_cmpfloat (worst, <=, adapter_tol);
  g_unsetenv ("HN_MATMUL_EXACT");
}

static void
test_train (void)
{
  run_qlora (FALSE, FALSE);
}

static void
test_train_checkpointing (void)
{
  run_qlora (TRUE, FALSE);
}

/* W's f16 form (quant_to_f16, then the 16-bit weights' matmul), which the
 * tensor cores take from 64 rows: forced for this batch of 24, and on every
 * device (elsewhere the scalar kernel multiplies by W's f16 values) */
static void
test_train_f16_form (void)
{
  g_setenv ("HN_QUANT_F16", "1", TRUE);
  run_qlora (FALSE, TRUE);
  run_qlora (TRUE, TRUE);
  g_unsetenv ("HN_QUANT_F16");
}

static void
test_train_tensor_cores (void)
{
  if (!hn_quant_matmul_tensor_cores (ctx, HN_DTYPE_NF4, 24, 64, 0))
    {
      g_test_skip ("no tensor-core quantized matmul on this device");
      return;
    }
  run_qlora (FALSE, TRUE);
  run_qlora (TRUE, TRUE);
}

/* The LM head in row chunks (hn_train_graph_head_rows: the logits of 5 rows
 * at a time, the last chunk of 4): the same losses and adapter as peft's,
 * with and without checkpointing, and with the gradient in f16. A chunk's
 * gradient taken from the wrong rows, or lost, moves the adapter past its bound. */
static void
test_train_head_chunks (void)
{
  g_assert_cmpint (hn_train_graph_head_rows (24, 512, TRUE), ==, 24);
  g_assert_cmpint (hn_train_graph_head_rows (2048, 128256, TRUE), ==, 256);
  g_assert_cmpint (hn_train_graph_head_rows (2048, 128256, FALSE), ==, 2048);
  g_setenv ("HN_TRAIN_HEAD_ROWS", "5", TRUE);
  run_qlora (FALSE, FALSE);
  run_qlora (TRUE, FALSE);
  /* the chunks' logits gradient written as f16 (as matmul_cm2 reads it), here widened again */
  g_setenv ("HN_CE_F16", "1", TRUE);
  run_qlora (FALSE, FALSE);
  g_unsetenv ("HN_CE_F16");
  g_unsetenv ("HN_TRAIN_HEAD_ROWS");
}

/* peft's adapter_final on the dequantized base, greedy, with this project's forward. */
static void
test_greedy (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *gr = json_object_get_object_member (expected (p), "greedy");
  JsonArray *prompt = json_object_get_array_member (gr, "prompt"), *tokens = json_object_get_array_member (gr, "tokens");
  g_autofree char *deq = fixture ("qlora_llama/dequantized"), *final = fixture ("qlora_llama/adapter_final");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, deq, &error);
  g_assert_no_error (error);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (final, &error);
  g_assert_no_error (error);
  g_assert_true (hn_lora_attach (m, ad, &error));
  g_assert_no_error (error);
  int V = hn_transformer_get_hparams (m)->vocab, n_new = (int) json_array_get_length (tokens);
  int n = (int) json_array_get_length (prompt);
  g_autofree gint32 *ids = g_new (gint32, n + n_new);
  for (int i = 0; i < n; i++)
    ids[i] = (gint32) json_array_get_int_element (prompt, i);
  g_autofree float *logits = g_new (float, (gsize) (n + n_new) * V);
  for (int s = 0; s < n_new; s++, n++)
    {
      g_assert_true (hn_transformer_logits (m, ids, n, logits, &error));
      const float *last = logits + (gsize) (n - 1) * V;
      int best = 0;
      for (int v = 1; v < V; v++)
        if (last[v] > last[best])
          best = v;
      ids[n] = best;
      g_assert_cmpint (best, ==, json_array_get_int_element (tokens, s));
    }
}

static void
test_options (void)
{
  static const struct {
    const char *quantization;
    gboolean b4, b8, dq;
    HnDType want;     /* F32 with `refused` set: an error */
    const char *refused;
  } cases[] = {
    { "none", FALSE, FALSE, FALSE, HN_DTYPE_F32, NULL },
    { "nf4", FALSE, FALSE, FALSE, HN_DTYPE_NF4, NULL },
    { "nf4", FALSE, FALSE, TRUE, HN_DTYPE_NF4_DQ, NULL },
    { "none", TRUE, FALSE, FALSE, HN_DTYPE_NF4, NULL },
    { "none", TRUE, FALSE, TRUE, HN_DTYPE_NF4_DQ, NULL },
    { "none", FALSE, TRUE, FALSE, HN_DTYPE_Q8, NULL },
    { "int8", FALSE, FALSE, FALSE, HN_DTYPE_Q8, NULL },
    { "q4_k", FALSE, FALSE, FALSE, HN_DTYPE_GGML_Q4_K, NULL },
    { "q4_k", FALSE, FALSE, TRUE, HN_DTYPE_F32, "--double-quant" },
    { "int8", FALSE, FALSE, TRUE, HN_DTYPE_F32, "--double-quant" },
    { "none", TRUE, TRUE, FALSE, HN_DTYPE_F32, "one quantization" },
    { "int8", TRUE, FALSE, FALSE, HN_DTYPE_F32, "one quantization" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-finetune", &error);
      g_assert_no_error (error);
      hn_job_spec_set_string (spec, "quantization", cases[i].quantization);
      hn_job_spec_set_bool (spec, "load-in-4bit", cases[i].b4);
      hn_job_spec_set_bool (spec, "load-in-8bit", cases[i].b8);
      hn_job_spec_set_bool (spec, "double-quant", cases[i].dq);
      HnDType got = HN_DTYPE_I32;
      gboolean ok = hn_train_quant_read (spec, &got, &error);
      if (cases[i].refused)
        {
          g_assert_false (ok);
          g_assert_nonnull (strstr (error->message, cases[i].refused));
        }
      else
        {
          g_assert_no_error (error);
          g_assert_cmpint (got, ==, cases[i].want);
        }
    }
  /* full training has no quantization option: its weights are the trained parameters */
  g_autoptr (HnJobSpec) full = hn_job_spec_new ("transformer-train", NULL);
  g_assert_null (hn_job_spec_lookup (full, "quantization"));
}

static void
on_metric (HnJob *job, const HnJobEvent *e, gpointer data)
{
  if (e->type == HN_JOB_EVENT_METRIC)
    g_array_append_val ((GArray *) data, e->metric.loss);
}

/* The whole job: transformer-finetune with transformers' spelling
 * (--load-in-4bit), double quantization, checkpointing and all-linear on
 * the demo model writes a PEFT adapter that loads back; its first loss is
 * near (quantization changes the base a little) but not equal to that of the
 * same run on the unquantized base. Its checkpoints record the quantization
 * (trainer_state.json), and resuming one on another base is refused. */
static gboolean
run_job_full (const char *out, gboolean qlora, const char *resume, GArray *losses, GError **error)
{
  const char *src = g_getenv ("HN_SOURCE_DIR");
  g_autofree char *model = g_build_filename (src, "data", "demo", "stories260K", NULL);
  g_autofree char *data = g_build_filename (src, "data", "demo", "tinyshakespeare-small.txt", NULL);
  const char *argv[] = { "transformer-finetune", "--model-path", model, "--train", data, "--out-dir", out,
                         "--batch-size", "2", "--seq-len", "32", "--max-steps", "2", "--lr", "3e-3",
                         "--lora-target-modules", "all-linear", "--lora-r", "4",
                         "--save-steps", "1", "--load-in-4bit", "--double-quant", "--gradient-checkpointing", NULL };
  int argc = G_N_ELEMENTS (argv) - 1 - (qlora ? 0 : 3);
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (argc, argv, error);
  g_assert_nonnull (spec);
  if (resume)
    hn_job_spec_set_string (spec, "resume-from-checkpoint", resume);
  g_autoptr (HnJob) job = hn_job_new (spec);
  hn_job_set_event_func (job, on_metric, losses, NULL);
  return hn_job_run_sync (job, error);
}

static void
run_job (const char *out, gboolean qlora, GArray *losses)
{
  g_autoptr (GError) error = NULL;
  g_assert_true (run_job_full (out, qlora, NULL, losses, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (losses->len, ==, 2);
}

static void
test_job (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *tmp = g_dir_make_tmp ("hn-qlora-XXXXXX", NULL);
  g_autofree char *out_q = g_build_filename (tmp, "qlora", NULL), *out_p = g_build_filename (tmp, "lora", NULL);
  g_autoptr (GArray) lq = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GArray) lp = g_array_new (FALSE, FALSE, sizeof (double));
  run_job (out_q, TRUE, lq);
  run_job (out_p, FALSE, lp);
  double q0 = g_array_index (lq, double, 0), p0 = g_array_index (lp, double, 0);
  g_test_message ("first loss: QLoRA (nf4, double quantization) %.5f, LoRA on the f32 base %.5f", q0, p0);
  g_assert_true (isfinite (q0) && isfinite (g_array_index (lq, double, 1)));
  g_assert_cmpfloat (fabs (q0 - p0), <, 0.1);
  g_assert_cmpfloat (q0, !=, p0);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (out_q, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ad->modules->len, ==, 5 * 7); /* stories260K: 5 layers of 7 Linears */
  /* the checkpoints record the base's quantization, and a resume on another base is refused */
  g_autofree char *ck_q = g_build_filename (out_q, "checkpoint-step-1", NULL);
  g_autofree char *ck_p = g_build_filename (out_p, "checkpoint-step-1", NULL);
  HnTrainerState st;
  g_assert_true (hn_trainer_state_read (&st, ck_q, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (st.quantization, ==, "nf4-dq");
  hn_trainer_state_clear (&st);
  g_assert_true (hn_trainer_state_read (&st, ck_p, &error));
  g_assert_cmpstr (st.quantization, ==, "none");
  hn_trainer_state_clear (&st);
  g_autofree char *out_r = g_build_filename (tmp, "resumed", NULL);
  g_autoptr (GArray) lr = g_array_new (FALSE, FALSE, sizeof (double));
  g_assert_false (run_job_full (out_r, FALSE, ck_q, lr, &error));
  if (!error || !strstr (error->message, "quantized as nf4-dq"))
    g_error ("resume of a QLoRA checkpoint without quantization: %s", error ? error->message : "accepted");
  g_clear_error (&error);
  g_assert_false (run_job_full (out_r, TRUE, ck_p, lr, &error));
  g_assert_nonnull (strstr (error->message, "quantized as none"));
  g_clear_error (&error);
  /* the same quantization resumes */
  g_assert_true (run_job_full (out_r, TRUE, ck_q, lr, &error));
  g_assert_no_error (error);
  hn_folder_remove_tree (tmp);
}

/* A random llama of hidden 256 (rows of whole Q4_K blocks) in dir; with
 * q4_k_values, its layers' Linear weights hold what their Q4_K blocks
 * dequantize to (ggml's reference quantizer, as the loader packs them). */
static void
write_llama256 (const char *dir, gboolean q4_k_values)
{
  g_autoptr (GError) error = NULL;
  const int C = 256, F = 512, V = 320, KV = 128, L = 2;
  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (cfg,
                                      "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], "
                                      "\"hidden_size\": 256, \"intermediate_size\": 512, \"num_hidden_layers\": 2, "
                                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 320, "
                                      "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
                                      "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false}",
                                      -1, &error));
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  GRand *rng = g_rand_new_with_seed (24);
  struct { const char *name; int rows, cols; } mats[] = {
    { "self_attn.q_proj", C, C }, { "self_attn.k_proj", KV, C }, { "self_attn.v_proj", KV, C },
    { "self_attn.o_proj", C, C }, { "mlp.gate_proj", F, C }, { "mlp.up_proj", F, C }, { "mlp.down_proj", C, F }
  };
  g_autofree float *ones = g_new (float, C);
  for (int i = 0; i < C; i++)
    ones[i] = 1.0f;
  for (int t = -1; t < L * (int) G_N_ELEMENTS (mats); t++)
    {
      gboolean emb = t < 0;
      int rows = emb ? V : mats[t % G_N_ELEMENTS (mats)].rows, cols = emb ? C : mats[t % G_N_ELEMENTS (mats)].cols;
      float *v = g_new (float, (gsize) rows * cols);
      for (gsize i = 0; i < (gsize) rows * cols; i++)
        v[i] = (float) g_rand_double_range (rng, -0.08, 0.08);
      if (!emb && q4_k_values)
        {
          g_autofree guint8 *q = g_malloc (hn_quant_nbytes (HN_DTYPE_GGML_Q4_K, rows, cols));
          hn_quant_pack (HN_DTYPE_GGML_Q4_K, v, HN_DTYPE_F32, rows, cols, q);
          hn_quant_unpack_rows (HN_DTYPE_GGML_Q4_K, q, rows, cols, 0, rows, v);
        }
      g_autofree char *name = emb ? g_strdup ("model.embed_tokens.weight")
                                  : g_strdup_printf ("model.layers.%d.%s.weight", t / (int) G_N_ELEMENTS (mats),
                                                     mats[t % G_N_ELEMENTS (mats)].name);
      g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, 2, (gint64[]) { rows, cols }, v,
                                                sizeof (float) * (gsize) rows * cols, TRUE, &error));
      if (emb) /* the head: the same values again, its own tensor */
        g_assert_true (hn_safetensors_writer_add (w, "lm_head.weight", HN_ST_DTYPE_F32, 2, (gint64[]) { V, C }, v,
                                                  sizeof (float) * (gsize) V * C, TRUE, &error));
      g_free (v);
    }
  g_rand_free (rng);
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 2; k++)
      {
        g_autofree char *name = g_strdup_printf ("model.layers.%d.%s.weight", l, k ? "post_attention_layernorm" : "input_layernorm");
        g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, 1, (gint64[]) { C }, ones, sizeof (float) * C,
                                                  TRUE, &error));
      }
  g_assert_true (hn_safetensors_writer_add (w, "model.norm.weight", HN_ST_DTYPE_F32, 1, (gint64[]) { C }, ones,
                                            sizeof (float) * C, TRUE, &error));
  g_assert_true (hn_safetensors_writer_write_dir (w, dir, "model", 0, &error));
  g_assert_no_error (error);
}

/* 4 AdamW steps of r 4 all-linear LoRA on a batch of 2 x 16; the losses. */
static void
lora_losses (HnTransformer *m, double *losses)
{
  g_autoptr (GError) error = NULL;
  HnLoraConfig cfg;
  hn_lora_config_init (&cfg);
  cfg.r = 4;
  cfg.alpha = 8;
  g_assert_true (hn_lora_config_set_targets (&cfg, "all-linear", &error));
  GArray *cands = hn_train_graph_lora_candidates (m, &cfg, &error);
  g_assert_no_error (error);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_new (&cfg);
  for (guint i = 0; i < cands->len; i++)
    {
      HnLoraCandidate *lc = &g_array_index (cands, HnLoraCandidate, i);
      HnLoraModule *mod = hn_lora_adapter_add (ad, lc->path, lc->in, lc->out, 1 + i);
      for (int k = 0; k < mod->out * mod->r; k++) /* B nonzero: A's gradient counts from the first step */
        mod->b[k] = 0.01f * (float) ((k * 7 + (int) i) % 11 - 5);
    }
  g_assert_cmpuint (cands->len, ==, 14);
  hn_lora_candidates_free (cands);
  hn_lora_config_clear (&cfg);
  g_autoptr (HnTrainGraph) g = hn_train_graph_new (m, 2, 16, ad, &error);
  g_assert_no_error (error);
  gint32 inputs[32], targets[32];
  for (int i = 0; i < 32; i++)
    {
      inputs[i] = (i * 37 + 11) % 320;
      targets[i] = i % 16 == 15 ? -100 : (i * 53 + 5) % 320;
    }
  HnOptimConfig oc;
  hn_optim_config_init (&oc, HN_OPTIM_ADAMW);
  oc.lr = 1e-2;
  for (int step = 0; step < 4; step++)
    {
      g_assert_true (hn_train_graph_zero_grads (g, &error));
      g_assert_true (hn_train_graph_micro_step (g, inputs, targets, NULL, 30, &losses[step], &error));
      g_assert_true (hn_train_graph_optimizer_step (g, &oc, step + 1, oc.lr, 1.0f, &error));
      g_assert_no_error (error);
    }
}

/* --quantization q4_k on a safetensors model: the layers' Linear weights
 * packed into ggml's Q4_K blocks at load (frozen in them; the GGUF matmul
 * kernels read them) give the losses of LoRA over an f32 model of the
 * values those blocks hold; rows that are not whole 256-element blocks are
 * refused naming the tensor. */
static void
test_q4_k (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *tmp = g_dir_make_tmp ("hn-q4k-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *d_orig = g_build_filename (tmp, "orig", NULL), *d_deq = g_build_filename (tmp, "deq", NULL);
  write_llama256 (d_orig, FALSE);
  write_llama256 (d_deq, TRUE);
  g_setenv ("HN_MATMUL_EXACT", "1", TRUE);
  double lq[4], lf[4];
  {
    g_autoptr (HnTransformer) m = hn_transformer_load_quantized (ctx, d_orig, HN_DTYPE_GGML_Q4_K, &error);
    g_assert_no_error (error);
    const HnTransformerWeights *W = hn_transformer_get_weights (m);
    g_assert_cmpint (W->layers[0].wq->dtype, ==, HN_DTYPE_GGML_Q4_K);
    g_assert_cmpint (W->layers[1].w_down->dtype, ==, HN_DTYPE_GGML_Q4_K);
    g_assert_cmpint (W->lm_head->dtype, ==, HN_DTYPE_F32);
    lora_losses (m, lq);
  }
  {
    g_autoptr (HnTransformer) m = hn_transformer_load (ctx, d_deq, &error);
    g_assert_no_error (error);
    lora_losses (m, lf);
  }
  double lo[4]; /* the unquantized model: the blocks do change the losses */
  {
    g_autoptr (HnTransformer) m = hn_transformer_load (ctx, d_orig, &error);
    g_assert_no_error (error);
    lora_losses (m, lo);
  }
  g_unsetenv ("HN_MATMUL_EXACT");
  g_test_message ("step 0 unquantized: %.6f", lo[0]);
  g_assert_cmpfloat (fabs (lo[0] - lq[0]), >, 1e-5);
  for (int s = 0; s < 4; s++)
    {
      g_test_message ("q4_k LoRA step %d: loss %.6f, on the f32 values of its blocks %.6f (difference %.2g)", s, lq[s],
                      lf[s], fabs (lq[s] - lf[s]));
      if (!(fabs (lq[s] - lf[s]) <= 2e-3))
        g_error ("q4_k LoRA loss of step %d is %.6f, %.6f over the f32 values", s, lq[s], lf[s]);
    }
  g_assert_cmpfloat (lq[3], <, lq[0]); /* it trains */
  g_autofree char *base = fixture ("llama");
  g_autoptr (HnTransformer) bad = hn_transformer_load_quantized (ctx, base, HN_DTYPE_GGML_Q4_K, &error);
  g_assert_null (bad);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  if (!strstr (error->message, "q4_k") || !strstr (error->message, "256"))
    g_error ("q4_k on rows of 64: %s", error->message);
  hn_folder_remove_tree (tmp);
}

/* Layers past the first share what the backward never reads
 * (hn_train_graph_shares): with a q_proj,v_proj adapter on the 2-layer
 * fixture, layer 1 saves no q/k before rope, MLP activation or MLP input,
 * which is exactly that many fewer bytes allocated, and the same losses as
 * with every layer's own (HN_TRAIN_NO_SHARE=1). */
static void
test_shared_activations (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *base = fixture ("llama"), *init = fixture ("llama_lora/adapter_init");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, base, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_assert_cmpint (hp->n_layer, ==, 2);
  g_autoptr (HnLoraAdapter) ad = hn_lora_adapter_load (init, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_train_graph_shares (hp, ad, 1), ==, HN_TRAIN_SHARE_QK | HN_TRAIN_SHARE_ACT | HN_TRAIN_SHARE_H2);
  g_assert_cmpuint (hn_train_graph_shares (hp, NULL, 1), ==, HN_TRAIN_SHARE_QK);
  gint32 inputs[24], targets[24];
  for (int i = 0; i < 24; i++)
    {
      inputs[i] = (i * 29 + 3) % hp->vocab;
      targets[i] = (i * 13 + 7) % hp->vocab;
    }
  double loss[2];
  guint64 bytes[2];
  for (int k = 0; k < 2; k++)
    {
      if (k)
        g_setenv ("HN_TRAIN_NO_SHARE", "1", TRUE);
      HnVkMemoryStats a, b;
      hn_vk_context_get_memory_stats (ctx, &a);
      g_autoptr (HnTrainGraph) g = hn_train_graph_new (m, 2, 12, ad, &error);
      g_assert_no_error (error);
      hn_vk_context_get_memory_stats (ctx, &b);
      bytes[k] = b.allocated_bytes - a.allocated_bytes;
      g_assert_true (hn_train_graph_micro_step (g, inputs, targets, NULL, 24, &loss[k], &error));
      g_assert_no_error (error);
      g_unsetenv ("HN_TRAIN_NO_SHARE");
    }
  gint64 qd = (gint64) hp->n_head * hp->head_dim, kvd = (gint64) hp->n_kv_head * hp->head_dim;
  guint64 want = 4 * (guint64) (24 * (qd + kvd + hp->ffn + hp->hidden));
  g_test_message ("graph bytes %" G_GUINT64_FORMAT " shared, %" G_GUINT64_FORMAT " unshared (want %" G_GUINT64_FORMAT
                  " less); losses %.9g, %.9g", bytes[0], bytes[1], want, loss[0], loss[1]);
  g_assert_cmpuint (bytes[1] - bytes[0], >=, want);
  g_assert_cmpfloat (loss[0], ==, loss[1]);
}

/* DoRA is refused by name when a fine-tune starts (before any data or model is read). */
static void
test_dora_refused (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *base = fixture ("llama");
  g_autoptr (HnJobSpec) spec = hn_job_spec_new ("transformer-finetune", &error);
  hn_job_spec_set_string (spec, "model-path", base);
  g_autofree char *data = g_build_filename (base, "config.json", NULL);
  hn_job_spec_set_string (spec, "train", data); /* not read: the options fail first */
  hn_job_spec_set_string (spec, "out-dir", "/nonexistent/out");
  hn_job_spec_set_bool (spec, "use-dora", TRUE);
  g_autoptr (HnJob) job = hn_job_new (spec);
  g_assert_false (hn_job_run_sync (job, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  if (!strstr (error->message, "--use-dora"))
    g_error ("DoRA: %s", error->message);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      return 77;
    }
  hn_job_register_builtin_kinds ();
  g_test_add_func ("/qlora/packing", test_packing);
  g_test_add_func ("/qlora/train", test_train);
  g_test_add_func ("/qlora/train-checkpointing", test_train_checkpointing);
  g_test_add_func ("/qlora/train-tensor-cores", test_train_tensor_cores);
  g_test_add_func ("/qlora/train-f16-form", test_train_f16_form);
  g_test_add_func ("/qlora/train-head-chunks", test_train_head_chunks);
  g_test_add_func ("/qlora/greedy", test_greedy);
  g_test_add_func ("/qlora/options", test_options);
  g_test_add_func ("/qlora/job", test_job);
  g_test_add_func ("/qlora/dora-refused", test_dora_refused);
  g_test_add_func ("/qlora/q4-k", test_q4_k);
  g_test_add_func ("/qlora/shared-activations", test_shared_activations);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
