/* The "transformer-generate" job kind (registered in engine/jobs/job-builtin.c). */
#pragma once
#include "generate/generate.h"
#include "io/gen-config.h"
#include "jobs/job.h"

G_BEGIN_DECLS

/* Reads the job's spec (model-path, prompts, policy flags, cache choice, output-json), generates
 * every prompt, streams TOKEN and PROGRESS events and writes {"sequences", "texts"}. */
gboolean hn_transformer_generate_job_run (HnJob *job, GError **error);

/* Copies the fields `cfg` sets (generation_config.json semantics) into `opt`. */
void hn_generate_options_from_config (HnGenerateOptions *opt, const HnGenerationConfig *cfg);

G_END_DECLS
