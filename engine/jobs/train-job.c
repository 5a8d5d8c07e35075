/* The training loop and its job (train-job.h). */
#include "jobs/train-job.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "base/hn-util.h"
#include "data/dataset.h"
#include "jobs/hub-job.h"
#include "formats/model-config.h"
#include "tokenizer/tokenizer.h"
#include "train/lora.h"
#include "tensor/quant.h"
#include "train/checkpoint.h"
#include "jobs/memory-estimate.h"
#include "train/data-parallel.h"
#include "tensor/optim.h"
#include "train/train-graph.h"
#include "jobs/train-job-private.h"


void
hn_train_job_options_clear (HnTrainJobOptions *o)
{
  g_free (o->model_dir);
  g_free (o->tok_path);
  g_free (o->data_path);
  g_free (o->out_dir);
  g_free (o->resume);
  g_free (o->metrics_file);
  g_free (o->adapter_path);
  g_free (o->eval_file);
  g_free (o->lora_targets);
  g_free (o->precision);
  g_clear_pointer (&o->devices, g_array_unref);
  hn_lora_config_clear (&o->lcfg);
}

gboolean
hn_train_quant_read (HnJobSpec *spec, HnDType *quant, GError **error)
{
  const char *q = hn_job_spec_get_string (spec, "quantization");
  gboolean b4 = hn_job_spec_get_bool (spec, "load-in-4bit"), b8 = hn_job_spec_get_bool (spec, "load-in-8bit");
  if ((b4 && b8) || ((b4 || b8) && g_strcmp0 (q, "none") != 0 && g_strcmp0 (q, b4 ? "nf4" : "int8") != 0))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "give one quantization: --load-in-4bit (nf4), --load-in-8bit (int8) or --quantization%s%s",
                   q ? " " : "", q ? q : "");
      return FALSE;
    }
  if (b4)
    q = "nf4";
  else if (b8)
    q = "int8";
  return hn_quant_dtype_from_string (q, hn_job_spec_get_bool (spec, "double-quant"), quant, error);
}

gboolean
hn_train_job_options_read (HnJobSpec *spec, HnTrainJobOptions *o, GError **error)
{
  memset (o, 0, sizeof *o);
  o->lora = g_str_equal (hn_job_spec_get_kind (spec), "transformer-finetune");
  hn_lora_config_init (&o->lcfg);
  o->quant = HN_DTYPE_F32;
  o->out_dir = g_strdup (hn_job_spec_get_string (spec, "out-dir"));
  o->overwrite = hn_job_spec_get_bool (spec, "overwrite-output-dir");
  o->resume = g_strdup (hn_job_spec_get_string (spec, "resume-from-checkpoint"));
  o->metrics_file = g_strdup (hn_job_spec_get_string (spec, "metrics-file"));
  o->epochs = hn_job_spec_get_int (spec, "epochs");
  o->max_steps = hn_job_spec_get_int (spec, "max-steps");
  o->batch = hn_job_spec_get_int (spec, "batch-size");
  o->seq_len = hn_job_spec_get_int (spec, "seq-len");
  o->accum = hn_job_spec_get_int (spec, "grad-accum");
  o->save_steps = hn_job_spec_get_int (spec, "save-steps");
  if (!(o->devices = hn_job_spec_get_devices (spec, error)))
    return FALSE;
  o->seed = (guint64) hn_job_spec_get_int (spec, "seed");
  o->shuffle = !hn_job_spec_get_bool (spec, "no-shuffle");
  o->no_dropout = hn_job_spec_get_bool (spec, "no-dropout");
  o->checkpointing = hn_job_spec_get_bool (spec, "gradient-checkpointing");
  if (!hn_optim_kind_from_string (hn_job_spec_get_string (spec, "optimizer"), &o->oc.kind, error))
    return FALSE;
  hn_optim_config_init (&o->oc, o->oc.kind);
  o->oc.lr = hn_job_spec_get_double (spec, "lr");
  o->oc.weight_decay = hn_job_spec_get_double (spec, "weight-decay");
  o->oc.beta1 = hn_job_spec_get_double (spec, "beta1");
  o->oc.beta2 = hn_job_spec_get_double (spec, "beta2");
  o->oc.eps = hn_job_spec_get_double (spec, "eps");
  o->oc.max_grad_norm = hn_job_spec_get_double (spec, "max-grad-norm");
  if (!hn_lr_schedule_kind_from_string (hn_job_spec_get_string (spec, "lr-scheduler"), &o->sched.kind, error))
    return FALSE;
  o->sched.warmup_steps = hn_job_spec_get_int (spec, "warmup-steps");
  o->precision = g_strdup (hn_job_spec_get_string (spec, "precision"));
  o->fp16 = g_strcmp0 (o->precision, "fp16") == 0 || g_strcmp0 (o->precision, "bf16") == 0;
  o->eval_file = g_strdup (hn_job_spec_get_string (spec, "eval-file"));
  o->eval_split = hn_job_spec_get_double (spec, "eval-split");
  o->eval_steps = hn_job_spec_get_int (spec, "eval-steps");
  o->patience = hn_job_spec_get_int (spec, "early-stopping-patience");
  o->stop_at_loss = hn_job_spec_get_double (spec, "stop-at-loss");
  if (!o->lora) /* transformer-finetune has no masked-LM option */
    o->mlm_probability = hn_job_spec_get_double (spec, "mlm-probability");
  if (o->lora)
    {
      o->adapter_path = g_strdup (hn_job_spec_get_string (spec, "lora-adapter-path"));
      o->lcfg.r = (int) hn_job_spec_get_int (spec, "lora-r");
      o->lcfg.alpha = hn_job_spec_get_double (spec, "lora-alpha");
      o->lcfg.dropout = hn_job_spec_get_double (spec, "lora-dropout");
      o->lcfg.use_rslora = hn_job_spec_get_bool (spec, "use-rslora");
      if (hn_job_spec_get_bool (spec, "use-dora"))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "--use-dora: DoRA (weight-decomposed LoRA, PEFT's use_dora) is not implemented; train plain "
                       "LoRA or rsLoRA (--use-rslora)");
          return FALSE;
        }
      if (!hn_train_quant_read (spec, &o->quant, error))
        return FALSE;
      o->lora_targets = g_strdup (hn_job_spec_get_string (spec, "lora-target-modules"));
      if (!hn_lora_config_set_targets (&o->lcfg, o->lora_targets, error))
        return FALSE;
    }
  return TRUE;
}

gboolean
hn_train_job_options_check (const HnTrainJobOptions *o, GError **error)
{
  if (!o->fp16 && g_strcmp0 (o->precision, "fp32") != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--precision %s: give fp32, fp16 or bf16",
                   o->precision);
      return FALSE;
    }
  if (o->eval_file && o->eval_split > 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "give --eval-file or --eval-split, not both (--eval-split %g holds out part of --train)", o->eval_split);
      return FALSE;
    }
  if (o->patience > 0 && !o->eval_file && o->eval_split <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--early-stopping-patience watches the evaluation loss: add --eval-split FRACTION or --eval-file FILE");
      return FALSE;
    }
  if (o->lora && o->lcfg.dropout > 0 && !o->no_dropout)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "--lora-dropout %g: dropout is not implemented in training yet (use 0, or --no-dropout)",
                   o->lcfg.dropout);
      return FALSE;
    }
  if (!o->out_dir)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--out-dir is required");
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_train_job_memory_request (const HnTrainJobOptions *o, HnMemoryRequest *req, char **owned_targets, GError **error)
{
  memset (req, 0, sizeof *req);
  req->workload = o->lora ? HN_MEMORY_LORA : HN_MEMORY_TRAIN;
  guint replicas = o->devices && o->devices->len > 0 ? o->devices->len : 1;
  req->batch = (int) MAX (1, o->batch / (gint64) replicas);
  req->seq_len = (int) o->seq_len;
  req->checkpointing = o->checkpointing;
  req->quant = o->quant;
  req->fp16 = o->fp16;
  if (!o->lora)
    return TRUE;
  req->lora_r = o->lcfg.r;
  req->lora_targets = o->lora_targets;
  const char *adapter_dir = o->resume ? o->resume : o->adapter_path;
  return !adapter_dir || hn_memory_request_use_adapter (req, adapter_dir, owned_targets, error);
}

gboolean
hn_train_check_out_dir (HnJob *job, const HnTrainJobOptions *o, GError **error)
{
  const HnOutputInput inputs[] = {
    { "--model-path", o->model_dir }, { "--tokenizer-path", o->tok_path }, { "--lora-adapter-path", o->adapter_path },
  };
  g_autoptr (GPtrArray) notes = g_ptr_array_new_with_free_func (g_free);
  if (!hn_output_dir_check (o->out_dir, inputs, G_N_ELEMENTS (inputs), o->resume, o->overwrite, HN_OUTPUT_WRITE_INTO,
                            notes, error))
    return FALSE;
  for (guint i = 0; i < notes->len; i++)
    hn_job_log (job, HN_LOG_WARNING, "%s", (char *) notes->pdata[i]);
  return TRUE;
}

void
hn_train_log_replaced (HnJob *job, const char *dir, gboolean replaced)
{
  if (replaced)
    hn_job_log (job, HN_LOG_WARNING, "replaced the existing %s", dir);
}

gboolean
hn_train_options_read (HnJob *job, HnTrainJobOptions *o, GError **error)
{
  /* the Hub first: model, tokenizer and data are what a user sees fail first */
  g_autofree char *model_dir = hn_hub_job_model_dir (job, error);
  if (!model_dir)
    return FALSE;
  g_autoptr (GError) tok_err = NULL;
  g_autofree char *tok_path = hn_hub_job_tokenizer_path (job, &tok_err);
  if (tok_err)
    {
      g_propagate_error (error, g_steal_pointer (&tok_err));
      return FALSE;
    }
  g_auto (GStrv) files = hn_hub_job_dataset_files (job, error);
  if (!files)
    {
      if (error && !*error)
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "no training data: pass --train FILE");
      return FALSE;
    }
  if (!files[0] || files[1])
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training reads one data file; %u were given",
                   g_strv_length (files));
      return FALSE;
    }
  if (!hn_train_job_options_read (hn_job_get_spec (job), o, error) || !hn_train_job_options_check (o, error))
    return FALSE;
  o->model_dir = g_steal_pointer (&model_dir);
  o->tok_from_model = !tok_path;
  o->tok_path = tok_path ? g_steal_pointer (&tok_path) : g_strdup (o->model_dir);
  o->data_path = g_strdup (files[0]);
  return TRUE;
}

/* Decoders run the training graph here; encoders and encoder-decoders run in train-encdec-job.c. */
static gboolean
model_kind (const char *model_dir, gboolean *encdec, gboolean *seq2seq, GError **error)
{
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  const HnArchInfo *arch = cfg ? hn_arch_lookup (cfg->model_type, error) : NULL;
  if (!arch)
    return FALSE;
  if (hn_arch_is_ssm (arch))
    {
      /* the conv1d and scan ops have their backward (recurrent/ops-ssm.h); the model's training graph is not built */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: model_type \"%s\" is a state-space decoder: its training and LoRA are not built yet",
                   model_dir, arch->model_type);
      return FALSE;
    }
  if (hn_arch_is_hybrid (arch))
    {
      /* the Mamba, short-convolution and gated DeltaNet layers' backward is not recorded by the transformer's
       * training graph */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: model_type \"%s\" is a hybrid (attention + Mamba, short-convolution or linear-attention "
                   "layers): its training and LoRA are not built yet", model_dir, arch->model_type);
      return FALSE;
    }
  *seq2seq = hn_arch_is_seq2seq (arch);
  *encdec = *seq2seq || hn_arch_is_encoder (arch);
  return TRUE;
}

/* Dropout the config asks for: not implemented, so refuse unless --no-dropout. */
static gboolean
check_dropout (const HnTrainJobOptions *o, const char *model_dir, GError **error)
{
  if (o->no_dropout)
    return TRUE;
  g_autoptr (HnModelConfig) cfg = hn_model_config_load (model_dir, error);
  if (!cfg)
    return FALSE;
  JsonObject *raw = hn_model_config_get_raw (cfg);
  g_autoptr (GList) keys = json_object_get_members (raw);
  for (GList *l = keys; l; l = l->next)
    {
      const char *k = l->data;
      if (!strstr (k, "dropout") && !strstr (k, "pdrop"))
        continue;
      JsonNode *n = json_object_get_member (raw, k);
      if (JSON_NODE_HOLDS_VALUE (n) && (json_node_get_value_type (n) == G_TYPE_DOUBLE ||
                                        json_node_get_value_type (n) == G_TYPE_INT64) &&
          json_node_get_double (n) > 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                       "config.json sets %s = %g; dropout in training is not implemented yet: pass --no-dropout to train without it",
                       k, json_node_get_double (n));
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
hn_train_copy_tokenizer_files (const char *src_dir, const char *dst_dir, GError **error)
{
  static const char *const files[] = { "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model",
                                       "added_tokens.json", "chat_template.jinja", NULL };
  for (int i = 0; files[i]; i++)
    {
      g_autofree char *src = g_build_filename (src_dir, files[i], NULL);
      if (!g_file_test (src, G_FILE_TEST_IS_REGULAR))
        continue;
      g_autofree char *data = NULL;
      gsize len = 0;
      if (!g_file_get_contents (src, &data, &len, error))
        return FALSE;
      g_autofree char *dst = g_build_filename (dst_dir, files[i], NULL);
      if (!hn_write_file_atomic (dst, data, len, error))
        return FALSE;
    }
  return TRUE;
}

typedef struct {
  HnTrainJobOptions *o;
  HnJob *job;
  HnTransformer *model;
  HnTrainGraph *graph;
  HnLoraAdapter *adapter;
  HnTrainerState st;
} Run;

/* Writes the trained model or adapter, the trainer state and (for a
 * checkpoint) the optimizer sidecar into `dir`. Every file is written
 * atomically. */
static gboolean
write_files (Run *r, const char *tmp, gboolean sidecars, GError **error)
{
  gboolean ok;
  if (r->adapter)
    ok = hn_train_graph_sync_adapter (r->graph, error) && hn_lora_adapter_save (r->adapter, tmp, error) &&
         hn_train_copy_tokenizer_files (r->o->tok_path, tmp, error);
  else
    ok = hn_checkpoint_write_model (r->model, tmp, error) &&
         (g_str_equal (r->o->tok_path, hn_transformer_get_dir (r->model)) || hn_train_copy_tokenizer_files (r->o->tok_path, tmp, error));
  ok = ok && hn_trainer_state_write (&r->st, tmp, error);
  return ok && (!sidecars || hn_checkpoint_write_optimizer (r->graph, tmp, error));
}

/* A checkpoint folder appears whole or not at all: written into a temporary
 * folder next to it, then renamed. */
static gboolean
save_checkpoint (Run *r, const char *final_dir, GError **error)
{
  g_autofree char *tmp = hn_folder_begin (final_dir, error);
  if (!tmp)
    return FALSE;
  gboolean replaced = FALSE;
  if (!write_files (r, tmp, TRUE, error) || !hn_folder_commit (tmp, final_dir, &replaced, error))
    {
      hn_folder_remove_tree (tmp);
      return FALSE;
    }
  hn_train_log_replaced (r->job, final_dir, replaced);
  return TRUE;
}

void
hn_train_metric_line (FILE *f, const HnJobMetric *m)
{
  char a[G_ASCII_DTOSTR_BUF_SIZE], b[G_ASCII_DTOSTR_BUF_SIZE], c[G_ASCII_DTOSTR_BUF_SIZE];
  char d[G_ASCII_DTOSTR_BUF_SIZE], e[G_ASCII_DTOSTR_BUF_SIZE], g[G_ASCII_DTOSTR_BUF_SIZE];
  fprintf (f, "{\"step\": %" G_GINT64_FORMAT ", \"epoch\": %s, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
              "\"tokens_per_s\": %s, \"elapsed_s\": %s",
           m->step, g_ascii_dtostr (a, sizeof a, m->epoch), g_ascii_dtostr (b, sizeof b, m->loss),
           g_ascii_dtostr (c, sizeof c, m->lr), isfinite (m->grad_norm) ? g_ascii_dtostr (d, sizeof d, m->grad_norm) : "null",
           g_ascii_dtostr (e, sizeof e, m->tokens_per_s), g_ascii_dtostr (g, sizeof g, m->elapsed_s));
  if (isfinite (m->loss_scale))
    fprintf (f, ", \"loss_scale\": %s", g_ascii_dtostr (a, sizeof a, m->loss_scale));
  if (isfinite (m->eval_loss))
    fprintf (f, ", \"eval_loss\": %s", g_ascii_dtostr (a, sizeof a, m->eval_loss));
  fputs ("}\n", f);
  fflush (f);
}

static gboolean
check_resume_state (const HnTrainJobOptions *o, const HnTrainerState *st, GError **error)
{
  if (st->lora != o->lora || st->batch_size != o->batch || st->seq_len != o->seq_len || st->grad_accum != o->accum)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--resume-from-checkpoint %s was made with %s, batch %" G_GINT64_FORMAT ", seq-len %" G_GINT64_FORMAT
                   ", grad-accum %" G_GINT64_FORMAT "; this run asks for %s, %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                   ", %" G_GINT64_FORMAT " (an exact resume needs the same)",
                   o->resume, st->lora ? "LoRA" : "full training", st->batch_size, st->seq_len, st->grad_accum,
                   o->lora ? "LoRA" : "full training", o->batch, o->seq_len, o->accum);
      return FALSE;
    }
  const char *q = hn_quant_dtype_name (o->quant);
  if (g_strcmp0 (st->quantization ? st->quantization : "none", q) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--resume-from-checkpoint %s was trained on a base quantized as %s, this run asks for %s "
                   "(the adapter and its optimizer state belong to that base: resume with the same --quantization)",
                   o->resume, st->quantization ? st->quantization : "none", q);
      return FALSE;
    }
  const char *prec = st->precision ? st->precision : "fp32", *want = o->fp16 ? "fp16" : "fp32";
  if (g_strcmp0 (prec, want) != 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--resume-from-checkpoint %s was trained with --precision %s; this run asks for %s (an exact resume "
                   "needs the same)", o->resume, prec, o->precision);
      return FALSE;
    }
  if (st->seed != o->seed)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--resume-from-checkpoint: the checkpoint used --seed %" G_GUINT64_FORMAT ", this run %" G_GUINT64_FORMAT,
                   st->seed, o->seed);
      return FALSE;
    }
  return TRUE;
}

/* Mean loss per target token over every example of `eval` once, in file
 * order, without gradients, `rows` (the graph's batch: one replica's share)
 * at a time. The last batch is filled up by the iterator with
 * examples from the next pass; their targets are not counted. */
static gboolean
evaluate (HnTrainGraph *graph, HnDataset *eval, gint64 rows, const HnTrainJobOptions *o, gint32 pad, double *loss, GError **error)
{
  g_autoptr (HnDatasetIter) it = hn_dataset_iter_new (eval, (guint) rows, FALSE, 0, pad, error);
  if (!it)
    return FALSE;
  gint64 n = (gint64) hn_dataset_get_n_examples (eval), N = rows * o->seq_len;
  g_autofree gint32 *targets = g_new (gint32, N);
  double sum = 0, wsum = 0;
  for (gint64 done = 0; done < n; done += rows)
    {
      const HnBatch *b = hn_dataset_iter_next (it);
      memcpy (targets, b->targets, sizeof (gint32) * N);
      for (gint64 row = n - done; row < rows; row++)
        for (gint64 t = 0; t < o->seq_len; t++)
          targets[row * o->seq_len + t] = -100;
      double s_part = 0, w_part = 0;
      if (!hn_train_graph_eval_loss (graph, b->inputs, targets, b->weights, &s_part, &w_part, error))
        return FALSE;
      sum += s_part;
      wsum += w_part;
    }
  if (wsum <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the evaluation data has no tokens to score");
      return FALSE;
    }
  *loss = sum / wsum;
  return TRUE;
}

static void
log_devices (HnJob *job, HnDataParallel *dp, const HnTrainJobOptions *o)
{
  guint n = hn_data_parallel_get_n_replicas (dp);
  /* Transformers train on Vulkan only (no CPU trainer to fall back to): say
   * when that device is a software rasterizer, so a slow run is no mystery. */
  for (guint r = 0; r < n; r++)
    {
      const HnVkDeviceInfo *info = hn_vk_context_get_device_info (hn_data_parallel_get_context (dp, r));
      if (g_strcmp0 (info->type, "cpu") == 0)
        hn_job_log (job, HN_LOG_WARNING, "%s is a CPU-type (software) Vulkan device: training is exact but many times "
                    "slower than on a GPU (Transformers have no separate CPU trainer)", info->name);
    }
  if (n == 1)
    {
      hn_job_log (job, HN_LOG_INFO, "device: %s", hn_vk_context_get_device_info (hn_data_parallel_get_context (dp, 0))->name);
      return;
    }
  g_autoptr (GString) names = g_string_new (NULL);
  for (guint r = 0; r < n; r++)
    g_string_append_printf (names, "%s%d %s", r ? ", " : "", g_array_index (o->devices, int, r),
                            hn_vk_context_get_device_info (hn_data_parallel_get_context (dp, r))->name);
  hn_job_log (job, HN_LOG_INFO, "data parallel: %u replicas on devices %s; %" G_GINT64_FORMAT " rows per replica",
              n, names->str, o->batch / n);
  for (guint r = 1; r < n; r++)
    for (guint k = 0; k < r; k++)
      if (g_array_index (o->devices, int, r) == g_array_index (o->devices, int, k))
        {
          hn_job_log (job, HN_LOG_WARNING,
                      "device %d is listed twice: two logical devices share one GPU (correct, for testing; not faster)",
                      g_array_index (o->devices, int, r));
          return;
        }
}

gboolean
hn_train_job_run (HnJob *job, GError **error)
{
  HnTrainJobOptions o = { 0 };
  Run r = { 0 };
  gboolean ok = FALSE;
  g_autoptr (HnTokenizer) tok = NULL;
  g_autoptr (HnModelConfig) mcfg = NULL;
  g_autoptr (HnDataset) ds = NULL;
  g_autoptr (HnDataset) eval_ds = NULL;
  g_autoptr (HnDatasetIter) it = NULL;
  g_autoptr (HnLoraAdapter) adapter = NULL;
  g_autoptr (GPtrArray) ctxs = NULL;  /* one per replica */
  g_autoptr (HnDataParallel) dp = NULL;
  FILE *mf = NULL;
  GArray *cands = NULL;
  gint32 *inputs = NULL, *targets = NULL;
  float *weights = NULL;
  HnMemoryEstimate est = { 0 };
  gboolean have_estimate = FALSE;
  g_autofree char *adapter_targets = NULL; /* declared before any goto out: freed on every path */
  r.o = &o;
  r.job = job;

  if (!hn_train_options_read (job, &o, error) || !hn_train_check_out_dir (job, &o, error))
    goto out;
  if (o.resume && !g_file_test (o.resume, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "--resume-from-checkpoint %s is not a folder", o.resume);
      goto out;
    }
  const char *weights_dir = (o.resume && !o.lora) ? o.resume : o.model_dir;
  gboolean encdec = FALSE, seq2seq = FALSE;
  if (!model_kind (weights_dir, &encdec, &seq2seq, error) || !check_dropout (&o, weights_dir, error))
    goto out;
  if (encdec)
    {
      ok = hn_train_encdec_job_run (job, &o, seq2seq, error);
      hn_train_job_options_clear (&o);
      return ok;
    }
  if (!(ctxs = hn_vk_contexts_new ((const int *) o.devices->data, o.devices->len, error)))
    goto out;
  HnVkContext *ctx = ctxs->pdata[0];
  /* Warn, never block: the estimate may be wrong, and a run that would fit must start. Each
   * replica holds the whole model and its share of the batch: replica 0 stands for all. */
  HnMemoryRequest mreq;
  have_estimate = hn_train_job_memory_request (&o, &mreq, &adapter_targets, NULL) &&
                  hn_memory_estimate_model (weights_dir, &mreq, &est, NULL);
  if (have_estimate)
    {
      hn_memory_estimate_set_device (&est, ctx);
      g_autofree char *summary = hn_memory_estimate_summary (&est);
      if (hn_memory_estimate_exceeds (&est))
        hn_job_log (job, HN_LOG_WARNING, "%s: it may not fit; to fit: %s. Starting anyway.", summary,
                    hn_memory_estimate_advice (mreq.workload));
      else
        hn_job_log (job, HN_LOG_INFO, "%s", summary);
    }
  /* A model folder without tokenizer files trains on token-id rows, as
   * transformers' Trainer does; the dataset refuses text rows then. */
  if (!(mcfg = hn_model_config_load (weights_dir, error)))
    goto out;
  GError *tok_error = NULL;
  if (!(tok = hn_tokenizer_load (o.tok_path, &tok_error)))
    {
      if (!o.tok_from_model || !g_error_matches (tok_error, HN_ERROR, HN_ERROR_NOT_FOUND))
        {
          g_propagate_error (error, tok_error);
          goto out;
        }
      g_clear_error (&tok_error);
      hn_job_log (job, HN_LOG_INFO, "%s has no tokenizer files: training on token-id rows (input_ids) without one; "
                  "the output gets no tokenizer files", o.tok_path);
    }
  HnDatasetOptions dopts;
  hn_dataset_options_init (&dopts);
  dopts.seq_len = (guint) o.seq_len;
  dopts.vocab_size = (gint32) CLAMP (mcfg->vocab_size, 0, G_MAXINT32);
  if (!(ds = hn_dataset_load (o.data_path, tok, &dopts, error)))
    goto out;
  const HnDatasetStats *dst = hn_dataset_get_stats (ds);
  hn_job_log (job, HN_LOG_INFO, "data: %" G_GUINT64_FORMAT " examples, %" G_GUINT64_FORMAT " tokens (%s)",
              dst->n_examples, dst->n_tokens, hn_dataset_shape_to_string (dst->shape));
  if (o.eval_split > 0)
    {
      HnDataset *train_part = NULL, *eval_part = NULL;
      if (!hn_dataset_split (ds, o.eval_split, o.seed, &train_part, &eval_part, error))
        goto out;
      hn_dataset_free (ds);
      ds = train_part;
      eval_ds = eval_part;
    }
  else if (o.eval_file && !(eval_ds = hn_dataset_load (o.eval_file, tok, &dopts, error)))
    {
      g_prefix_error (error, "--eval-file: ");
      goto out;
    }
  if (eval_ds)
    hn_job_log (job, HN_LOG_INFO, "evaluation: %" G_GSIZE_FORMAT " examples held out from training%s",
                hn_dataset_get_n_examples (eval_ds), o.eval_file ? " (from --eval-file)" : "");
  /* the padding id only fills positions without loss; without a tokenizer
   * it comes from config.json, as transformers' collators take it */
  gint64 pad = tok ? hn_tokenizer_get_pad_id (tok) : mcfg->pad_token_id;
  if (pad < 0)
    pad = tok ? hn_tokenizer_get_eos_id (tok) : mcfg->n_eos_token_ids ? mcfg->eos_token_ids[0] : -1;
  if (pad < 0 || (mcfg->vocab_size > 0 && pad >= mcfg->vocab_size))
    pad = 0;
  if (!(it = hn_dataset_iter_new (ds, (guint) o.batch, o.shuffle, o.seed, (gint32) pad, error)))
    goto out;
  if (!(dp = hn_data_parallel_new_quantized ((HnVkContext *const *) ctxs->pdata, ctxs->len, weights_dir, o.quant, error)))
    goto out;
  log_devices (job, dp, &o);
  HnTransformer *model = hn_data_parallel_get_model (dp, 0);
  if (o.lora)
    {
      const char *from = o.resume ? o.resume : o.adapter_path;
      if (from)
        {
          if (!(adapter = hn_lora_adapter_load (from, error)))
            goto out;
        }
      else
        {
          g_free (o.lcfg.base_model_name_or_path);
          o.lcfg.base_model_name_or_path = g_strdup (o.model_dir);
          adapter = hn_lora_adapter_new (&o.lcfg);
          if (!(cands = hn_train_graph_lora_candidates (model, &o.lcfg, error)))
            goto out;
          for (guint i = 0; i < cands->len; i++)
            {
              HnLoraCandidate *c = &g_array_index (cands, HnLoraCandidate, i);
              hn_lora_adapter_add (adapter, c->path, c->in, c->out, o.seed);
            }
        }
    }
  HnTrainGraphOptions gopts = { o.checkpointing, o.fp16 };
  if (o.fp16)
    hn_job_log (job, HN_LOG_INFO,
                "precision %s: %smatmuls as PyTorch's fp16 autocast (f16 operands and results, f32 accumulation) on %s, "
                "attention on the tensor cores where the device has flash attention (else f32); norms, softmax, the "
                "loss and AdamW in f32 with f32 master weights; dynamic loss scaling from 65536", o.precision,
                g_strcmp0 (o.precision, "bf16") == 0 ? "runs as fp16 (bf16 tensor-core operands need GL_EXT_bfloat16, "
                                                       "which this build's shader compiler lacks): " : "",
                hn_vk_context_has_coopmat (ctx) ? "the tensor cores" : "the scalar kernel (no cooperative matrices)");
  hn_data_parallel_set_graph_options (dp, &gopts);
  if (!hn_data_parallel_setup (dp, (int) o.batch, (int) o.seq_len, adapter, error))
    goto out;
  /* checkpoints and the final model come from replica 0 (every replica holds the same weights) */
  HnTrainGraph *graph = hn_data_parallel_get_graph (dp, 0);
  r.model = model;
  r.graph = graph;
  r.adapter = adapter;
  hn_job_log (job, HN_LOG_INFO, "trainable parameters: %" G_GINT64_FORMAT, hn_train_graph_get_n_trainable (graph));

  gint64 n_ex = (gint64) hn_dataset_get_n_examples (ds);
  gint64 batches_per_epoch = (n_ex + o.batch - 1) / o.batch;
  gint64 steps_per_epoch = MAX (1, batches_per_epoch / o.accum);
  gint64 total = o.max_steps > 0 ? o.max_steps : o.epochs * steps_per_epoch;
  o.sched.total_steps = total;
  /* evaluate every --eval-steps steps (else once per epoch) and after the last step */
  gint64 eval_every = o.eval_steps > 0 ? o.eval_steps : steps_per_epoch;

  r.st.seed = o.seed;
  r.st.total_steps = total;
  r.st.warmup_steps = o.sched.warmup_steps;
  r.st.lr_scheduler = g_strdup (hn_lr_schedule_kind_name (o.sched.kind));
  r.st.optimizer = g_strdup (hn_optim_kind_name (o.oc.kind));
  r.st.lr = o.oc.lr;
  r.st.weight_decay = o.oc.weight_decay;
  r.st.beta1 = o.oc.beta1;
  r.st.beta2 = o.oc.beta2;
  r.st.eps = o.oc.eps;
  r.st.max_grad_norm = o.oc.max_grad_norm;
  r.st.batch_size = o.batch;
  r.st.seq_len = o.seq_len;
  r.st.grad_accum = o.accum;
  r.st.lora = o.lora;
  r.st.quantization = g_strdup (hn_quant_dtype_name (o.quant));
  r.st.best_eval_loss = NAN;
  gint64 start = 0;
  double elapsed_before = 0, tokens_before = 0;
  HnLossScaler scaler;
  hn_loss_scaler_init (&scaler);
  /* HN_LOSS_SCALE_INIT: another first scale (GradScaler's init_scale), for
   * tests that make the first steps overflow */
  const char *scale_env = g_getenv ("HN_LOSS_SCALE_INIT");
  if (o.fp16 && scale_env && g_ascii_strtod (scale_env, NULL) > 0)
    scaler.scale = g_ascii_strtod (scale_env, NULL);
  r.st.precision = g_strdup (o.fp16 ? "fp16" : "fp32");
  if (o.resume)
    {
      HnTrainerState prev = { 0 };
      gboolean rok = hn_trainer_state_read (&prev, o.resume, error) && check_resume_state (&o, &prev, error) &&
                     hn_dataset_iter_set_cursor (it, &prev.cursor, error) &&
                     hn_data_parallel_read_optimizer (dp, o.resume, error);
      start = prev.global_step;
      r.st.optimizer_steps = prev.optimizer_steps;
      if (o.fp16 && prev.loss_scale > 0)
        {
          scaler.scale = prev.loss_scale;
          scaler.growth_tracker = prev.loss_scale_growth_tracker;
        }
      r.st.best_eval_loss = prev.best_eval_loss;
      r.st.evals_since_best = prev.evals_since_best;
      elapsed_before = prev.elapsed_s;
      tokens_before = prev.tokens_seen;
      hn_trainer_state_clear (&prev);
      if (!rok)
        goto out;
      hn_job_log (job, HN_LOG_INFO, "resuming at step %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT, start, total);
    }
  if (o.metrics_file)
    {
      mf = fopen (o.metrics_file, o.resume ? "a" : "w");
      if (!mf)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "--metrics-file %s: %s", o.metrics_file, g_strerror (e));
          goto out;
        }
    }
  if (!hn_mkdir_p (o.out_dir, error))
    goto out;

  gint64 N = o.batch * o.seq_len;
  inputs = g_new (gint32, N * o.accum);
  targets = g_new (gint32, N * o.accum);
  weights = g_new (float, N * o.accum);
  double t0 = g_get_monotonic_time () / 1e6;
  double tokens_session = 0;
  for (gint64 step = start; step < total; step++)
    {
      if (!hn_job_check_cancelled (job, error))
        goto out;
      if (hn_job_save_and_stop_requested (job))
        {
          /* "Stop and save": a checkpoint of this step (resumable exactly), then a clean end */
          g_autofree char *name = g_strdup_printf ("checkpoint-step-%" G_GINT64_FORMAT, step);
          g_autofree char *dir = g_build_filename (o.out_dir, name, NULL);
          if (step > start && !save_checkpoint (&r, dir, error))
            goto out;
          const char *from = step > start ? dir : o.resume;
          if (from)
            {
              hn_job_set_resume_path (job, from);
              hn_job_set_output_path (job, from);
              hn_job_log (job, HN_LOG_INFO, "stopped at step %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                          "; continue with --resume-from-checkpoint %s", step, total, from);
            }
          else
            hn_job_log (job, HN_LOG_INFO, "stopped before the first step: nothing to save");
          ok = TRUE;
          goto out;
        }
      double w_total = 0, real_tokens = 0;
      for (gint64 mb = 0; mb < o.accum; mb++)
        {
          const HnBatch *b = hn_dataset_iter_next (it);
          memcpy (inputs + mb * N, b->inputs, sizeof (gint32) * N);
          memcpy (targets + mb * N, b->targets, sizeof (gint32) * N);
          memcpy (weights + mb * N, b->weights, sizeof (float) * N);
          for (gint64 i = 0; i < N; i++)
            {
              if (b->targets[i] != -100)
                w_total += b->weights[i];
              real_tokens += b->attention_mask[i] != 0;
            }
        }
      double loss = 0, scale = o.fp16 ? scaler.scale : 1.0;
      hn_data_parallel_set_loss_scale (dp, scale);
      if (!hn_data_parallel_gradients (dp, inputs, targets, weights, (int) o.accum, w_total, &loss, error))
        goto out;
      double norm = 0;
      if (!hn_data_parallel_grad_norm (dp, &norm, error))
        goto out;
      /* GradScaler: an Inf or NaN in the scaled gradients skips the update
       * (no Adam step, no scheduler step) and halves the scale */
      gboolean found_inf = !isfinite (norm);
      if (found_inf && !o.fp16)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "step %" G_GINT64_FORMAT ": the gradient norm is not finite",
                       step + 1);
          goto out;
        }
      norm /= scale;
      double lr = o.oc.lr * hn_lr_schedule_factor (&o.sched, r.st.optimizer_steps);
      if (!o.fp16 || hn_loss_scaler_update (&scaler, found_inf))
        {
          /* unscaling folded into the clip factor (the scale is a power of two: exact) */
          float clip = (float) (hn_clip_coef (norm, o.oc.max_grad_norm) / scale);
          if (!hn_data_parallel_optimizer_step (dp, &o.oc, ++r.st.optimizer_steps, lr, clip, error))
            goto out;
        }
      else
        hn_job_log (job, HN_LOG_INFO,
                    "step %" G_GINT64_FORMAT ": Inf/NaN in the fp16 gradients at loss scale %g: update skipped, "
                    "scale now %g", step + 1, scale, scaler.scale);
      tokens_session += real_tokens;
      double now = g_get_monotonic_time () / 1e6 - t0;
      HnJobMetric m;
      hn_job_metric_init (&m);
      m.step = step + 1;
      m.epoch = (double) (step + 1) / (double) steps_per_epoch;
      m.loss = loss;
      m.lr = lr;
      m.grad_norm = norm;
      if (o.fp16)
        m.loss_scale = scale;
      m.tokens_per_s = now > 0 ? tokens_session / now : NAN;
      m.elapsed_s = elapsed_before + now;
      gboolean stop = FALSE;
      if (eval_ds && ((step + 1) % eval_every == 0 || step + 1 == total))
        {
          if (!evaluate (graph, eval_ds, o.batch / hn_data_parallel_get_n_replicas (dp), &o, pad, &m.eval_loss, error))
            goto out;
          if (!isfinite (r.st.best_eval_loss) || m.eval_loss < r.st.best_eval_loss)
            {
              r.st.best_eval_loss = m.eval_loss;
              r.st.evals_since_best = 0;
            }
          else if (o.patience > 0 && ++r.st.evals_since_best >= o.patience)
            {
              hn_job_log (job, HN_LOG_INFO,
                          "early stopping at step %" G_GINT64_FORMAT ": the evaluation loss has not improved for %"
                          G_GINT64_FORMAT " evaluations (best %.4f)", step + 1, r.st.evals_since_best,
                          r.st.best_eval_loss);
              stop = TRUE;
            }
        }
      /* --stop-at-loss watches the evaluation loss when there is one */
      double watched = eval_ds ? m.eval_loss : m.loss;
      if (o.stop_at_loss > 0 && isfinite (watched) && watched <= o.stop_at_loss)
        {
          hn_job_log (job, HN_LOG_INFO, "stopping at step %" G_GINT64_FORMAT ": the %s loss %.4f reached --stop-at-loss %g",
                      step + 1, eval_ds ? "evaluation" : "training", watched, o.stop_at_loss);
          stop = TRUE;
        }
      hn_job_emit_metric (job, &m);
      if (mf)
        hn_train_metric_line (mf, &m);
      hn_job_emit_progress (job, HN_PROGRESS_STEPS, step + 1, total, (gint64) tokens_session);
      r.st.global_step = step + 1;
      r.st.loss_scale = o.fp16 ? scaler.scale : 0;
      r.st.loss_scale_growth_tracker = o.fp16 ? scaler.growth_tracker : 0;
      hn_dataset_iter_get_cursor (it, &r.st.cursor);
      r.st.elapsed_s = elapsed_before + now;
      r.st.tokens_seen = tokens_before + tokens_session;
      if (o.save_steps > 0 && (step + 1) % o.save_steps == 0)
        {
          g_autofree char *name = g_strdup_printf ("checkpoint-step-%" G_GINT64_FORMAT, step + 1);
          g_autofree char *dir = g_build_filename (o.out_dir, name, NULL);
          if (!save_checkpoint (&r, dir, error))
            goto out;
          hn_job_log (job, HN_LOG_INFO, "saved %s", dir);
        }
      if (stop)
        break;
    }
  /* The final model goes into OUT itself (next to the checkpoints), file by file. */
  if (!write_files (&r, o.out_dir, FALSE, error))
    goto out;
  hn_job_set_output_path (job, o.out_dir);
  ok = TRUE;
out:
  if (!ok)
    {
      g_autofree char *what = g_strdup_printf ("batch %" G_GINT64_FORMAT " x %" G_GINT64_FORMAT " tokens", o.batch,
                                               o.seq_len);
      hn_memory_estimate_explain_oom (error, o.lora ? HN_MEMORY_LORA : HN_MEMORY_TRAIN, have_estimate ? &est : NULL,
                                      what);
    }
  hn_memory_estimate_clear (&est);
  if (mf)
    fclose (mf);
  hn_lora_candidates_free (cands);
  g_free (inputs);
  g_free (targets);
  g_free (weights);
  hn_trainer_state_clear (&r.st);
  hn_train_job_options_clear (&o);
  return ok;
}

gboolean
hn_merge_lora_run (const char *model_dir, const char *adapter_dir, const char *out_dir, gboolean overwrite,
                   GPtrArray *notes, GError **error)
{
  /* the merged folder replaces out_dir as a whole: never the base model's
   * or the adapter's folder, never a folder of other files unless asked */
  const HnOutputInput inputs[] = { { "--model-path", model_dir }, { "--lora-adapter-path", adapter_dir } };
  if (!hn_output_dir_check (out_dir, inputs, G_N_ELEMENTS (inputs), NULL, overwrite, HN_OUTPUT_REPLACE, notes, error))
    return FALSE;
  g_autofree char *tmp = hn_folder_begin (out_dir, error);
  if (!tmp)
    return FALSE;
  if (!hn_lora_merge_model (model_dir, adapter_dir, tmp, error) || !hn_folder_commit (tmp, out_dir, NULL, error))
    {
      hn_folder_remove_tree (tmp);
      return FALSE;
    }
  return TRUE;
}
