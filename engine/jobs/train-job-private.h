/* What the training jobs share: the options of transformer-train and
 * transformer-finetune, the metrics line and the tokenizer files copied into
 * every output folder. train-job.c runs decoders; train-encdec-job.c runs
 * encoders (masked LM) and encoder-decoders. */
#pragma once
#include <stdio.h>

#include "jobs/job.h"
#include "transformer/lora.h"
#include "tensor/optim.h"

G_BEGIN_DECLS

typedef struct {
  HnJob *job;
  gboolean lora;
  char *model_dir, *tok_path, *data_path, *out_dir, *resume, *metrics_file, *adapter_path, *eval_file;
  gint64 epochs, max_steps, batch, seq_len, accum, save_steps;
  GArray *devices;     /* int: one replica per entry */
  double eval_split, stop_at_loss, mlm_probability;
  gint64 eval_steps, patience;
  guint64 seed;
  gboolean shuffle, no_dropout, checkpointing;
  gboolean tok_from_model; /* tok_path is the model folder (no --tokenizer-path given) */
  HnOptimConfig oc;
  HnLrSchedule sched;
  HnLoraConfig lcfg;
} Options;

gboolean hn_train_options_read (HnJob *job, Options *o, GError **error);
void hn_train_options_clear (Options *o);
/* One JSON line of metrics (--metrics-file). */
void hn_train_metric_line (FILE *f, const HnJobMetric *m);
/* The tokenizer files of src_dir that exist, written atomically into dst_dir. */
gboolean hn_train_copy_tokenizer_files (const char *src_dir, const char *dst_dir, GError **error);
/* transformer-train on an encoder (bert family, masked LM) or an encoder-decoder (t5). */
gboolean hn_train_encdec_job_run (HnJob *job, Options *o, gboolean seq2seq, GError **error);

G_END_DECLS
