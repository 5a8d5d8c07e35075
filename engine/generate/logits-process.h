/* Logits processors and warpers with transformers' exact semantics
 * (generation/logits_process.py), on one row of scores at a time.
 * Removed tokens become -INFINITY, as in transformers. */
#pragma once
#include "generate/generate.h"

G_BEGIN_DECLS

/* ids: the whole sequence so far (prompt + generated), n_ids long. */
void hn_logits_repetition_penalty (float *scores, int vocab, const int32_t *ids, int n_ids, double penalty);
void hn_logits_no_repeat_ngram (float *scores, int vocab, const int32_t *ids, int n_ids, int ngram);
/* bad_words: GArray(int32_t) sequences; single-token entries equal to an EOS are ignored, as in
 * transformers' NoBadWordsLogitsProcessor. */
void hn_logits_bad_words (float *scores, int vocab, const int32_t *ids, int n_ids, GPtrArray *bad_words,
                          GArray *eos);
void hn_logits_suppress (float *scores, int vocab, GArray *tokens);
void hn_logits_temperature (float *scores, int vocab, double temperature);
void hn_logits_top_k (float *scores, int vocab, int top_k, int min_tokens_to_keep);
void hn_logits_top_p (float *scores, int vocab, double top_p, int min_tokens_to_keep);
void hn_logits_min_p (float *scores, int vocab, double min_p, int min_tokens_to_keep);
void hn_logits_typical (float *scores, int vocab, double mass, int min_tokens_to_keep);
void hn_logits_epsilon (float *scores, int vocab, double epsilon, int min_tokens_to_keep);
void hn_logits_eta (float *scores, int vocab, double epsilon, int min_tokens_to_keep);
void hn_logits_log_softmax (float *scores, int vocab);

/* Applies every processor the options enable, in transformers' order
 * (_get_logits_processor): repetition penalty, no-repeat-ngram, bad words,
 * min length, min new tokens, suppress, begin-suppress; then, when sampling,
 * temperature, top-k, top-p, min-p, typical-p, epsilon, eta. */
void hn_logits_process (const HnGenerateOptions *opt, float *scores, int vocab, const int32_t *ids, int n_ids,
                        int prompt_len);
/* TRUE when greedy decoding with these options is plain argmax over the raw logits: no
 * processor above could change any step's pick (kept next to hn_logits_process so that a new
 * processor is added to both). */
gboolean hn_logits_greedy_is_argmax (const HnGenerateOptions *opt);

G_END_DECLS
