/* The "evaluate" job kind (evaluate-job.c; registered in job-builtin.c). */
#pragma once
#include "jobs/job.h"

G_BEGIN_DECLS

/* --model-path or --hf-model, [--lora-adapter-path], exactly one of
 * --text-file and --eval-file, [--seq-len N] (unset: the model's context),
 * [--device-index], [--json]: prints perplexity, mean_nll and tokens. */
gboolean hn_evaluate_job_run (HnJob *job, GError **error);

G_END_DECLS
