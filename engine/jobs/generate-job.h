/* The "transformer-generate" job kind (registered in engine/jobs/job-builtin.c). */
#pragma once
#include "generate/generate.h"
#include "template/chat-template.h"
#include "formats/gen-config.h"
#include "formats/model-config.h"
#include "tokenizer/tokenizer.h"
#include "transformer/transformer.h"
#include "jobs/job.h"

G_BEGIN_DECLS

/* The generation policy flags of transformer-generate and chat, read once
 * from the spec: they go over the model's defaults and its
 * generation_config.json (model < file < flags). Strings belong to the spec. */
typedef struct {
  HnGenerateOptions value; /* the scalar flags' values (their defaults when not given); only
                              scalar fields are filled, so it needs no clearing */
  guint32 given;           /* bit i: scalar flag i (generate-job.c's table) was given */
  gboolean max_new_tokens_given, min_p_given, do_sample_given, early_stopping_given;
  const char *suppress_tokens, *eos_token_id, *bad_words_ids; /* id lists as given, parsed when applied */
  const char *const *stop;
  const char *generation_config, *cache_implementation; /* NULL: not given */
  gboolean no_use_cache, continuous_batching;
} HnGeneratePolicy;

/* Everything else transformer-generate reads. */
typedef struct {
  HnGeneratePolicy policy;
  const char *tokenizer_path, *adapter_path, *output_json, *prompt_file;
  const char *const *input_ids; /* --input-ids, repeatable: one request each */
  const char *const *prompts;
  gboolean json;
  int batch_max_requests; /* --continuous-batch-max-requests */
  gboolean batch_max_requests_given;
  gboolean device_indices_given;
  GArray *devices;        /* int: the layers split across these */
} HnGenerateJobOptions;

/* Reads the policy flags of a transformer-generate or chat spec. */
void hn_generate_policy_read (HnJobSpec *spec, HnGeneratePolicy *p);
/* Reads every option of a transformer-generate spec (no file is opened).
 * Fails only on a device list that cannot be parsed. */
gboolean hn_generate_job_options_read (HnJobSpec *spec, HnGenerateJobOptions *o, GError **error);
void hn_generate_job_options_clear (HnGenerateJobOptions *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (HnGenerateJobOptions, hn_generate_job_options_clear)

/* Reads the job's spec (model-path, prompts, policy flags, cache choice, output-json), generates
 * every prompt, streams TOKEN and PROGRESS events and writes {"sequences", "texts"}. */
gboolean hn_transformer_generate_job_run (HnJob *job, GError **error);

/* Copies the fields `cfg` sets (generation_config.json semantics) into `opt`. */
void hn_generate_options_from_config (HnGenerateOptions *opt, const HnGenerationConfig *cfg);

/* What transformer-generate and chat share: the policy of the job's spec (model defaults <
 * generation_config.json < flags) and its KV cache mode; continuous batching is refused. */
gboolean hn_generate_job_policy (HnJob *job, const HnGeneratePolicy *p, const char *model_dir, HnModelConfig *mc,
                                 HnGenerateOptions *opt, HnKvCacheMode *mode, GError **error);
/* Loads the adapter folder and attaches it to `model` in device memory. */
gboolean hn_generate_job_attach_adapter (HnJob *job, HnTransformer *model, const char *adapter_dir, GError **error);

/* A numeric error of generation ("NaN logits") names no file: this adds the
 * first tensor of model_dir's weights that holds NaN or Inf, or says the
 * weights are finite (the values overflowed in the computation). Other
 * errors are left as they are. */
void hn_generate_job_explain_numeric (GError **error, const char *model_dir);

/* The "chat" job kind: Hierarchos model folders go to hn_hier_chat_job_run; Transformer
 * decoders chat through their chat template (chat-job.c). */
gboolean hn_chat_job_run (HnJob *job, GError **error);

/* The prompt ids of a conversation: `messages` (a JSON array of {role, content}) rendered with
 * `tmpl` and add_generation_prompt, then tokenized without adding special tokens, as
 * transformers' apply_chat_template(tokenize=True) does. */
gboolean hn_chat_render_ids (HnChatTemplate *tmpl, HnTokenizer *tok, JsonNode *messages, GArray *ids, GError **error);

G_END_DECLS
