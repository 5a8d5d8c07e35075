/* The pieces of the generation loops that the batch scheduler shares. */
#pragma once
#include "generate/generate.h"
#include "generate/sampler.h"

G_BEGIN_DECLS

HnGenerateResult *hn_generate_result_new (int n_prompt);
gboolean hn_generate_is_eos (const HnGenerateOptions *opt, int32_t t);
gboolean hn_generate_hits_stop_string (const HnGenerateModel *m, const HnGenerateOptions *opt, const int32_t *gen,
                                       int n_gen);
gboolean hn_generate_check_cancel (GCancellable *c, GError **error);
/* One step of transformers' _sample for one sequence: logits processors on `logits` [vocab], the
 * pick (argmax, or a draw from rng), the token appended to ids (prompt + generated). Returns
 * "" while the sequence goes on, the stop reason ("eos", "max_length", "stop_string") when it
 * ends, NULL on error. */
const char *hn_generate_sample_step (const HnGenerateModel *m, const HnGenerateOptions *opt, HnRng *rng, GArray *ids,
                                     int n_prompt, int max_length, float *logits, int32_t *next, GError **error);
/* hn_generate_run's checks of the options and one prompt; the total length limit, or -1. */
int hn_generate_check_prompt (const HnGenerateModel *model, const HnGenerateOptions *opt, const int32_t *prompt,
                              int n_prompt, GError **error);

G_END_DECLS
