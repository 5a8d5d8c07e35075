/* transformer-train on encoders: masked-LM training of the bert family
 * through HnEncoderTrainer, with the job's flags, metrics and checkpoints.
 *
 * Data as transformers' run_mlm.py (without --line_by_line): the text rows
 * are tokenized and concatenated (the dataset layer's packing) and cut into
 * blocks of --seq-len tokens, the short remainder dropped, so no block holds
 * padding (the trainer attends to every position). Each batch is masked by
 * DataCollatorForLanguageModeling's rule (mlm.h) from a generator seeded by
 * --seed. Output folders are Hugging Face packages written atomically, as
 * the decoder trainer writes them. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "base/hn-util.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "encdec/encoder.h"
#include "train/checkpoint.h"
#include "train/mlm.h"
#include "jobs/train-job-private.h"

/* Options the engine trainers do not implement, refused by name. */
static gboolean
check_options (const HnTrainJobOptions *o, const char *what, GError **error)
{
  const char *bad = NULL;
  if (o->lora)
    bad = "LoRA (transformer-finetune) is not implemented for them; use transformer-train";
  else if (o->resume)
    bad = "--resume-from-checkpoint is not implemented for them (a checkpoint folder is a model: start a new run "
          "from it with --model-path)";
  else if (o->accum > 1)
    bad = "--grad-accum above 1 is not implemented for them";
  else if (o->oc.kind != HN_OPTIM_ADAMW)
    bad = "only --optimizer adamw is implemented for them";
  else if (o->oc.weight_decay > 0)
    bad = "--weight-decay above 0 is not implemented for them (the trainer would decay biases and norms too, "
          "which transformers does not)";
  else if (o->devices->len > 1)
    bad = "data parallel training (several --device-indices) is not implemented for them";
  else if (o->checkpointing)
    bad = "--gradient-checkpointing is not implemented for them (only the decoder training graph recomputes layers)";
  else if (o->fp16)
    bad = "--precision fp16 (and bf16) is not implemented for them (only the decoder training graph has the fp16 "
          "autocast path); use --precision fp32";
  else if (o->eval_file || o->eval_split > 0 || o->patience > 0)
    bad = "evaluation (--eval-file, --eval-split, --early-stopping-patience) is not implemented for them";
  if (bad)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED, "training %s: %s", what, bad);
      return FALSE;
    }
  return TRUE;
}

typedef struct {
  HnTrainJobOptions *o;
  HnEncoder *model;
  HnJob *job;
} Run;

/* The trained weights under the checkpoint's names, config.json and the tokenizer files. */
static gboolean
write_files (Run *r, const char *dir, GError **error)
{
  guint n = 0;
  HnTensor *const *w = hn_encoder_get_weights (r->model, &n);
  return hn_checkpoint_write_named (r->o->model_dir, w, n, dir, error) &&
         (g_str_equal (r->o->tok_path, r->o->model_dir) || hn_train_copy_tokenizer_files (r->o->tok_path, dir, error));
}

static gboolean
save_checkpoint (Run *r, const char *final_dir, GError **error)
{
  g_autofree char *tmp = hn_folder_begin (final_dir, error);
  if (!tmp)
    return FALSE;
  gboolean replaced = FALSE;
  if (!write_files (r, tmp, error) || !hn_folder_commit (tmp, final_dir, &replaced, error))
    {
      hn_folder_remove_tree (tmp);
      return FALSE;
    }
  hn_train_log_replaced (r->job, final_dir, replaced);
  return TRUE;
}

/* Blocks of exactly T tokens: the packed examples that are full (the last one may be short). */
static GArray *
full_blocks (HnDataset *ds, guint T)
{
  GArray *blocks = g_array_new (FALSE, FALSE, sizeof (guint));
  for (guint i = 0; i < hn_dataset_get_n_examples (ds); i++)
    {
      HnExample ex;
      hn_dataset_get_example (ds, i, &ex);
      if (ex.n_tokens >= T)
        g_array_append_val (blocks, i);
    }
  return blocks;
}

/* The order of one epoch's blocks: Fisher-Yates from (seed, epoch), or file order. */
static void
epoch_order (guint *order, guint n, gboolean shuffle, guint64 seed, guint64 epoch)
{
  for (guint i = 0; i < n; i++)
    order[i] = i;
  if (!shuffle)
    return;
  HnRng rng;
  hn_rng_seed (&rng, seed + epoch * 0x9E3779B97F4A7C15ull);
  for (guint i = n - 1; i > 0; i--)
    {
      guint j = (guint) (hn_rng_next (&rng) % (i + 1));
      guint t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
}

gboolean
hn_train_encdec_job_run (HnJob *job, HnTrainJobOptions *o, gboolean seq2seq, GError **error)
{
  if (seq2seq)
    {
      /* HnSeq2SeqTrainer takes no attention mask: prompts of different lengths cannot share a batch
       * the way transformers pads and masks them, so this fails closed rather than train on padding. */
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: training encoder-decoders (t5, mt5) through transformer-train is not implemented yet "
                   "(the engine trainer takes no attention mask for padded prompts)", o->model_dir);
      return FALSE;
    }
  if (!check_options (o, "encoders", error))
    return FALSE;
  gboolean ok = FALSE;
  FILE *mf = NULL;
  HnMlmMasking mm = { 0 };
  g_autoptr (HnVkContext) ctx = NULL;
  g_autoptr (HnTokenizer) tok = NULL;
  g_autoptr (HnDataset) ds = NULL;
  g_autoptr (HnEncoder) model = NULL;
  g_autoptr (HnEncoderTrainer) tr = NULL;
  g_autoptr (GArray) blocks = NULL;
  g_autofree guint *order = NULL;
  g_autofree int32_t *ids = NULL, *labels = NULL, *plain = NULL;
  guint B = (guint) o->batch, T = (guint) o->seq_len;

  if (!(ctx = hn_vk_context_new (g_array_index (o->devices, int, 0), error)))
    goto out;
  hn_job_log (job, HN_LOG_INFO, "device: %s", hn_vk_context_get_device_info (ctx)->name);
  if (!(model = hn_encoder_load (ctx, o->model_dir, error)) || !(tok = hn_tokenizer_load (o->tok_path, error)) ||
      !hn_mlm_masking_init (&mm, tok, hn_encoder_get_vocab (model), o->mlm_probability, error))
    goto out;
  HnDatasetOptions dopts;
  hn_dataset_options_init (&dopts);
  dopts.seq_len = T;
  if (!(ds = hn_dataset_load (o->data_path, tok, &dopts, error)))
    goto out;
  const HnDatasetStats *dst = hn_dataset_get_stats (ds);
  if (dst->shape != HN_DATASET_SHAPE_TEXT)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED,
                   "%s: masked-LM training reads text ({\"text\": ...} rows or a .txt file); this file has %s rows",
                   o->data_path, hn_dataset_shape_to_string (dst->shape));
      goto out;
    }
  blocks = full_blocks (ds, T);
  if (blocks->len == 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "%s: %" G_GUINT64_FORMAT " tokens do not fill one block of --seq-len %u (masked-LM blocks are "
                   "never padded)", o->data_path, dst->n_tokens, T);
      goto out;
    }
  hn_job_log (job, HN_LOG_INFO, "data: %u blocks of %u tokens (%" G_GUINT64_FORMAT " tokens of text), masking %g",
              blocks->len, T, dst->n_tokens, o->mlm_probability);
  if (!(tr = hn_encoder_trainer_new (model, (int) B, (int) T, error)))
    goto out;
  if (o->metrics_file && !(mf = fopen (o->metrics_file, "w")))
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "--metrics-file %s: %s", o->metrics_file, g_strerror (e));
      goto out;
    }
  if (!hn_mkdir_p (o->out_dir, error))
    goto out;

  Run r = { o, model, job };
  gint64 steps_per_epoch = (blocks->len + B - 1) / B;
  gint64 total = o->max_steps > 0 ? o->max_steps : o->epochs * steps_per_epoch;
  o->sched.total_steps = total;
  order = g_new (guint, blocks->len);
  guint64 epoch = 0;
  guint next = 0;
  epoch_order (order, blocks->len, o->shuffle, o->seed, epoch);
  HnRng mrng; /* the masks' own stream, so the data order does not shift them */
  hn_rng_seed (&mrng, o->seed ^ 0x6D6C6D5F6D61736Bull);
  ids = g_new (int32_t, B * T);
  labels = g_new (int32_t, B * T);
  plain = g_new (int32_t, B * T);
  double t0 = g_get_monotonic_time () / 1e6;
  for (gint64 step = 0; step < total; step++)
    {
      if (!hn_job_check_cancelled (job, error))
        goto out;
      if (hn_job_save_and_stop_requested (job))
        {
          g_autofree char *name = g_strdup_printf ("checkpoint-step-%" G_GINT64_FORMAT, step);
          g_autofree char *dir = g_build_filename (o->out_dir, name, NULL);
          if (step > 0)
            {
              if (!save_checkpoint (&r, dir, error))
                goto out;
              hn_job_set_output_path (job, dir);
            }
          hn_job_log (job, HN_LOG_INFO, "stopped at step %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT "%s%s", step,
                      total, step > 0 ? "; the model so far is in " : " (nothing to save)", step > 0 ? dir : "");
          ok = TRUE;
          goto out;
        }
      /* B blocks, running into the next epoch's order as the dataset iterator does */
      for (guint b = 0; b < B; b++)
        {
          if (next == blocks->len)
            {
              next = 0;
              epoch_order (order, blocks->len, o->shuffle, o->seed, ++epoch);
            }
          HnExample ex;
          hn_dataset_get_example (ds, g_array_index (blocks, guint, order[next++]), &ex);
          memcpy (plain + b * T, ex.ids, sizeof (int32_t) * T);
        }
      /* a batch that drew no masked token is drawn again (transformers would report a NaN loss) */
      gsize chosen = 0;
      for (int tries = 0; tries < 64 && !chosen; tries++)
        {
          memcpy (ids, plain, sizeof (int32_t) * B * T);
          chosen = hn_mlm_mask (&mm, &mrng, ids, labels, (gsize) B * T);
        }
      if (!chosen)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "step %" G_GINT64_FORMAT ": no token of the batch can be masked (all special, or "
                       "--mlm-probability %g too small)", step + 1, o->mlm_probability);
          goto out;
        }
      double lr = o->oc.lr * hn_lr_schedule_factor (&o->sched, step);
      HnEncoderTrainStep st = { step + 1, lr, o->oc.beta1, o->oc.beta2, o->oc.eps, o->oc.weight_decay,
                                o->oc.max_grad_norm };
      double loss = 0;
      if (!hn_encoder_trainer_step (tr, ids, NULL, labels, &st, &loss, error))
        {
          g_prefix_error (error, "step %" G_GINT64_FORMAT ": ", step + 1);
          goto out;
        }
      if (!isfinite (loss))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "step %" G_GINT64_FORMAT ": the loss is not finite", step + 1);
          goto out;
        }
      double now = g_get_monotonic_time () / 1e6 - t0;
      HnJobMetric m;
      hn_job_metric_init (&m);
      m.step = step + 1;
      m.epoch = (double) (step + 1) / (double) steps_per_epoch;
      m.loss = loss;
      m.lr = lr;
      m.grad_norm = hn_encoder_trainer_get_grad_norm (tr);
      m.tokens_per_s = now > 0 ? (double) (step + 1) * B * T / now : NAN;
      m.elapsed_s = now;
      gboolean stop = o->stop_at_loss > 0 && loss <= o->stop_at_loss;
      if (stop)
        hn_job_log (job, HN_LOG_INFO, "stopping at step %" G_GINT64_FORMAT ": the training loss %.4f reached "
                    "--stop-at-loss %g", step + 1, loss, o->stop_at_loss);
      hn_job_emit_metric (job, &m);
      if (mf)
        hn_train_metric_line (mf, &m);
      hn_job_emit_progress (job, HN_PROGRESS_STEPS, step + 1, total, (step + 1) * B * T);
      if (o->save_steps > 0 && (step + 1) % o->save_steps == 0)
        {
          g_autofree char *name = g_strdup_printf ("checkpoint-step-%" G_GINT64_FORMAT, step + 1);
          g_autofree char *dir = g_build_filename (o->out_dir, name, NULL);
          if (!save_checkpoint (&r, dir, error))
            goto out;
          hn_job_log (job, HN_LOG_INFO, "saved %s", dir);
        }
      if (stop)
        break;
    }
  /* the final model goes into OUT itself, file by file, each atomically */
  if (!write_files (&r, o->out_dir, error))
    goto out;
  hn_job_set_output_path (job, o->out_dir);
  ok = TRUE;
out:
  if (mf)
    fclose (mf);
  hn_mlm_masking_clear (&mm);
  return ok;
}
