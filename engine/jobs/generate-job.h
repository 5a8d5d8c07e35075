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

/* Reads the job's spec (model-path, prompts, policy flags, cache choice, output-json), generates
 * every prompt, streams TOKEN and PROGRESS events and writes {"sequences", "texts"}. */
gboolean hn_transformer_generate_job_run (HnJob *job, GError **error);

/* Copies the fields `cfg` sets (generation_config.json semantics) into `opt`. */
void hn_generate_options_from_config (HnGenerateOptions *opt, const HnGenerationConfig *cfg);

/* What transformer-generate and chat share: the policy of the job's spec (model defaults <
 * generation_config.json < flags) and its KV cache mode; continuous batching is refused. */
gboolean hn_generate_job_policy (HnJob *job, const char *model_dir, HnModelConfig *mc, HnGenerateOptions *opt,
                                 HnKvCacheMode *mode, GError **error);
/* Loads the adapter folder and attaches it to `model` in device memory. */
gboolean hn_generate_job_attach_adapter (HnJob *job, HnTransformer *model, const char *adapter_dir, GError **error);

/* The "chat" job kind: Hierarchos model folders go to hn_hier_chat_job_run; Transformer
 * decoders chat through their chat template (chat-job.c). */
gboolean hn_chat_job_run (HnJob *job, GError **error);

/* The prompt ids of a conversation: `messages` (a JSON array of {role, content}) rendered with
 * `tmpl` and add_generation_prompt, then tokenized without adding special tokens, as
 * transformers' apply_chat_template(tokenize=True) does. */
gboolean hn_chat_render_ids (HnChatTemplate *tmpl, HnTokenizer *tok, JsonNode *messages, GArray *ids, GError **error);

G_END_DECLS
