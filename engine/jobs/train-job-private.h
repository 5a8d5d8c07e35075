/* What the training jobs share: reading their options, the metrics line and
 * the tokenizer files copied into every output folder. train-job.c runs decoders; train-encdec-job.c runs
 * encoders (masked LM) and encoder-decoders. */
#pragma once
#include <stdio.h>

#include "jobs/train-job.h"

G_BEGIN_DECLS


/* Reads the spec (hn_train_job_options_read), then resolves --hf-model,
 * --hf-tokenizer and --hf-dataset into local paths (downloading them). */
gboolean hn_train_options_read (HnJob *job, HnTrainJobOptions *o, GError **error);
/* Refuses an output folder that is an input or holds files of another run
 * (base/hn-folder.h) and logs what --overwrite-output-dir replaces. */
gboolean hn_train_check_out_dir (HnJob *job, const HnTrainJobOptions *o, GError **error);
/* Logs that a checkpoint folder of an earlier run was replaced. */
void hn_train_log_replaced (HnJob *job, const char *dir, gboolean replaced);
/* One JSON line of metrics (--metrics-file). */
void hn_train_metric_line (FILE *f, const HnJobMetric *m);
/* The tokenizer files of src_dir that exist, written atomically into dst_dir. */
gboolean hn_train_copy_tokenizer_files (const char *src_dir, const char *dst_dir, GError **error);
/* transformer-train on an encoder (bert family, masked LM) or an encoder-decoder (t5). */
gboolean hn_train_encdec_job_run (HnJob *job, HnTrainJobOptions *o, gboolean seq2seq, GError **error);

G_END_DECLS
