/* Tokenizers: Hugging Face tokenizer.json (BPE, WordPiece, Unigram with their
 * normalizers, pre-tokenizers, post-processors and decoders), and the slow
 * formats (SentencePiece tokenizer.model, GPT-2 vocab.json + merges.txt,
 * BERT vocab.txt), plus tokenizer_config.json (special tokens, add_bos/eos,
 * chat template, model_max_length).
 *
 * An HnTokenizer is immutable after loading and reference counted; encode and
 * decode may be called from several threads at once. */
#pragma once
#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef struct _HnTokenizer HnTokenizer;

/* `path` is a file (tokenizer.json, tokenizer.model, vocab.json, vocab.txt) or
 * a folder. In a folder the first of tokenizer.json, tokenizer.model,
 * vocab.json + merges.txt, vocab.txt is used; tokenizer_config.json next to
 * the file, when present, adds special tokens, add_bos_token/add_eos_token,
 * chat_template and model_max_length. Errors: HN_ERROR_NOT_FOUND, HN_ERROR_IO,
 * HN_ERROR_CORRUPT (malformed file, message names file and problem),
 * HN_ERROR_UNSUPPORTED (a component type we do not implement). */
HnTokenizer *hn_tokenizer_load (const char *path, GError **error);

HnTokenizer *hn_tokenizer_ref (HnTokenizer *tok);
void hn_tokenizer_unref (HnTokenizer *tok);

/* Appends the ids (int32_t) of `text` (UTF-8, `len` bytes or -1 for
 * NUL-terminated) to `ids_out`. Added/special tokens in the text are matched
 * first. With `add_special_tokens` the post-processor adds BOS/CLS/SEP/EOS as
 * the tokenizer specifies (tokenizer.json post_processor, else
 * add_bos_token/add_eos_token). Fails with HN_ERROR_INVALID_ARGUMENT on
 * invalid UTF-8. */
gboolean hn_tokenizer_encode (HnTokenizer *tok, const char *text, gssize len,
                              gboolean add_special_tokens, GArray *ids_out, GError **error);

/* A long text is encoded in chunks of about `bytes` (default 1 MiB), each
 * ending after a newline where the cut changes no id (checked on the bytes
 * around it), so that the work of one chunk is alive at a time; 0 encodes
 * every text whole. For tests: call it before the tokenizer is shared. */
void hn_tokenizer_set_encode_chunk (HnTokenizer *tok, gsize bytes);

/* Decodes ids to UTF-8 text (invalid byte sequences become U+FFFD). Ids past
 * the vocabulary (a model's padded embedding rows) have no text and are
 * skipped, as tokenizers does; a negative id is HN_ERROR_INVALID_ARGUMENT. */
char *hn_tokenizer_decode (HnTokenizer *tok, const int32_t *ids, gsize n_ids,
                           gboolean skip_special_tokens, GError **error);

int32_t hn_tokenizer_get_vocab_size (HnTokenizer *tok);   /* highest id + 1, added tokens included */
/* Special token ids, -1 when the tokenizer has none. */
int32_t hn_tokenizer_get_bos_id (HnTokenizer *tok);
int32_t hn_tokenizer_get_eos_id (HnTokenizer *tok);
int32_t hn_tokenizer_get_pad_id (HnTokenizer *tok);
int32_t hn_tokenizer_get_unk_id (HnTokenizer *tok);
/* All ids that end generation: eos_token plus, for chat models, the
 * end-of-turn tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>,
 * <|endoftext|>) present in the vocabulary. Never NULL; `n_out` may be 0. */
const int32_t *hn_tokenizer_get_eos_ids (HnTokenizer *tok, gsize *n_out);
gboolean hn_tokenizer_is_eos (HnTokenizer *tok, int32_t id);
/* Token strings of the special tokens (as written in the config), or NULL. */
const char *hn_tokenizer_get_bos_token (HnTokenizer *tok);
const char *hn_tokenizer_get_eos_token (HnTokenizer *tok);
const char *hn_tokenizer_get_pad_token (HnTokenizer *tok);
const char *hn_tokenizer_get_unk_token (HnTokenizer *tok);

/* -1 when unknown. Looks at added tokens and the model vocabulary. */
int32_t hn_tokenizer_token_to_id (HnTokenizer *tok, const char *token);
/* The vocabulary string (e.g. "Ġthe", "▁the", "<0x0A>"), NULL when out of range. */
const char *hn_tokenizer_id_to_token (HnTokenizer *tok, int32_t id);
gboolean hn_tokenizer_is_special (HnTokenizer *tok, int32_t id);

/* tokenizer_config.json's chat_template (the "default" one when it is a
 * list of named templates), or NULL. */
const char *hn_tokenizer_get_chat_template (HnTokenizer *tok);
/* Whether encode(add_special_tokens=TRUE) starts with BOS / ends with EOS. */
gboolean hn_tokenizer_get_add_bos (HnTokenizer *tok);
gboolean hn_tokenizer_get_add_eos (HnTokenizer *tok);
/* model_max_length from tokenizer_config.json, 0 when absent or absurd (> 2^40). */
guint64 hn_tokenizer_get_model_max_length (HnTokenizer *tok);
/* The file actually loaded (tokenizer.json, tokenizer.model, ...). */
const char *hn_tokenizer_get_path (HnTokenizer *tok);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTokenizer, hn_tokenizer_unref)

/* GGUF (tokenizer-gguf.c): a tokenizer from a .gguf's tokenizer.ggml.*
 * metadata (hn_tokenizer_load does this for a .gguf path), and the same
 * keys written for `tok` with the token list padded to n_vocab entries. */
typedef struct _HnGgufWriter HnGgufWriter;
HnTokenizer *hn_tokenizer_load_gguf (const char *gguf_path, GError **error);
gboolean hn_tokenizer_write_gguf (HnTokenizer *tok, HnGgufWriter *w, int32_t n_vocab, GError **error);

/* Streaming decode for token-by-token output. Feeding ids one at a time and
 * concatenating the returned strings gives the same text as decoding all ids
 * at once: bytes of an incomplete UTF-8 character (byte fallback, byte-level
 * BPE) are held back until the character is complete, and leading-space
 * rules (Metaspace, SentencePiece) are applied only at the real start. */
typedef struct _HnTokenDecoder HnTokenDecoder;

HnTokenDecoder *hn_token_decoder_new (HnTokenizer *tok, gboolean skip_special_tokens);
void hn_token_decoder_free (HnTokenDecoder *dec);
/* Returns the newly completed text (possibly ""), never NULL unless `error` is set. */
char *hn_token_decoder_push (HnTokenDecoder *dec, int32_t id, GError **error);
/* Returns what is still held back (incomplete bytes as U+FFFD) and resets. */
char *hn_token_decoder_flush (HnTokenDecoder *dec);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnTokenDecoder, hn_token_decoder_free)

G_END_DECLS
