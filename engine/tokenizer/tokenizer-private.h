/* Internals shared by the tokenizer files: the pipeline pieces (normalizer,
 * pre-tokenizer, model, post-processor, decoder) as plain tagged structs. */
#pragma once
#include "tokenizer.h"
#include "base/hn-error.h"
#include "base/hn-util.h"
#include "base/json-util.h"
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* ---- normalizers (tokenizer-normalize.c) ---- */
typedef enum {
  HN_NORM_SEQUENCE, HN_NORM_NFC, HN_NORM_NFD, HN_NORM_NFKC, HN_NORM_NFKD,
  HN_NORM_LOWERCASE, HN_NORM_STRIP_ACCENTS, HN_NORM_REPLACE, HN_NORM_PREPEND,
  HN_NORM_STRIP, HN_NORM_BERT, HN_NORM_PRECOMPILED, HN_NORM_NMT,
  HN_NORM_SPM, /* SentencePiece normalizer_spec: charsmap + whitespace rules */
} HnNormType;

typedef struct {
  guint32 *units;  /* darts-clone double array */
  gsize n_units;
  char *normalized; /* NUL-separated replacement strings */
  gsize normalized_len;
} HnCharsMap;

typedef struct _HnNormalizer HnNormalizer;
struct _HnNormalizer {
  HnNormType type;
  GPtrArray *children;      /* HnNormalizer*, for SEQUENCE */
  char *pattern;            /* REPLACE with a literal pattern */
  GRegex *regex;            /* REPLACE with a regex */
  char *content;            /* REPLACE content, PREPEND text */
  gboolean left, right;     /* STRIP */
  gboolean clean_text, chinese_chars, strip_accents, lowercase; /* BERT */
  HnCharsMap *charsmap;     /* PRECOMPILED, SPM (may be NULL for identity) */
  gboolean add_dummy_prefix, remove_extra_ws, escape_ws; /* SPM */
  gboolean dummy_prefix_first_only; /* SPM with legacy=false: only at the start of the input */
};

HnNormalizer *hn_normalizer_from_json (JsonNode *node, const char *file, GError **error);
void hn_normalizer_free (HnNormalizer *n);
char *hn_normalizer_apply (const HnNormalizer *n, const char *s, GError **error);
/* `at_start`: s begins the whole input (SentencePiece legacy=false prefix). */
char *hn_normalizer_apply_at (const HnNormalizer *n, const char *s, gboolean at_start, GError **error);
/* Parses a precompiled_charsmap blob (SentencePiece / tokenizer.json). */
HnCharsMap *hn_charsmap_new (const guint8 *data, gsize len, const char *file, GError **error);
void hn_charsmap_free (HnCharsMap *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnNormalizer, hn_normalizer_free)

/* ---- pre-tokenizers (tokenizer-pretok.c) ---- */
typedef enum {
  HN_PRETOK_SEQUENCE, HN_PRETOK_BYTE_LEVEL, HN_PRETOK_SPLIT, HN_PRETOK_METASPACE,
  HN_PRETOK_WHITESPACE, HN_PRETOK_WHITESPACE_SPLIT, HN_PRETOK_BERT, HN_PRETOK_DIGITS,
  HN_PRETOK_PUNCTUATION, HN_PRETOK_CHAR_DELIMITER,
} HnPretokType;

typedef enum {
  HN_SPLIT_REMOVED, HN_SPLIT_ISOLATED, HN_SPLIT_MERGED_WITH_PREVIOUS,
  HN_SPLIT_MERGED_WITH_NEXT, HN_SPLIT_CONTIGUOUS,
} HnSplitBehavior;

typedef enum { HN_PREPEND_ALWAYS, HN_PREPEND_FIRST, HN_PREPEND_NEVER } HnPrependScheme;

typedef struct _HnPretok HnPretok;
struct _HnPretok {
  HnPretokType type;
  GPtrArray *children;
  GRegex *regex;              /* SPLIT, BYTE_LEVEL (use_regex), WHITESPACE */
  HnSplitBehavior behavior;
  gboolean invert;
  gboolean add_prefix_space;  /* BYTE_LEVEL */
  gboolean use_regex;         /* BYTE_LEVEL */
  char *replacement;          /* METASPACE */
  HnPrependScheme prepend_scheme;
  gboolean split;             /* METASPACE */
  gboolean individual_digits; /* DIGITS */
  gunichar delimiter;         /* CHAR_DELIMITER */
};

HnPretok *hn_pretok_from_json (JsonNode *node, const char *file, GError **error);
HnPretok *hn_pretok_new_byte_level (gboolean add_prefix_space, gboolean use_regex);
HnPretok *hn_pretok_new_bert (void);
void hn_pretok_free (HnPretok *p);
/* Splits every piece of `pieces` (char*, owned) in place. `at_start` says the
 * first piece begins the whole input (Metaspace prepend_scheme "first"). */
gboolean hn_pretok_apply (const HnPretok *p, GPtrArray *pieces, gboolean at_start, GError **error);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnPretok, hn_pretok_free)

/* GPT-2's byte <-> printable code point table. */
gunichar hn_byte_level_char (guint8 b);
int hn_byte_level_byte (gunichar c); /* -1 when c is not in the table */

/* ---- models (tokenizer-bpe.c, -wordpiece.c, -unigram.c) ---- */
typedef enum { HN_MODEL_BPE, HN_MODEL_SPM_BPE, HN_MODEL_WORDPIECE, HN_MODEL_UNIGRAM, HN_MODEL_WORDLEVEL } HnModelType;

typedef struct _HnMergeTable HnMergeTable;

typedef struct {
  HnModelType type;
  GPtrArray *vocab;          /* id -> char* (NULL for holes) */
  GHashTable *token_to_id;   /* char* (borrowed from vocab) -> id + 1 */
  int32_t unk_id;            /* -1 when none */
  /* BPE */
  HnMergeTable *merges;
  gboolean byte_fallback, fuse_unk, ignore_merges;
  char *cont_prefix, *eow_suffix; /* NULL when unset */
  int32_t byte_ids[256];     /* <0xXX> pieces, -1 when absent */
  /* SPM BPE and Unigram */
  float *scores;             /* [vocab->len] */
  guint8 *piece_types;       /* [vocab->len] SentencePiece types, 0 when unknown */
  float min_score;
  int max_piece_bytes;
  /* WordPiece */
  char *wp_prefix;
  int max_input_chars;
  /* Bytes no vocabulary token spans (only a token of exactly that byte, or
   * byte fallback): a long word can be cut there without changing the
   * result, which keeps SentencePiece-style BPE (no pre-tokenizer) fast. */
  gsize split_once;
  gboolean split_byte[256];
  gboolean any_split;
  /* word -> ids cache (pre-tokenized words repeat a lot) */
  GHashTable *cache;         /* char* -> GArray* of int32 */
  GMutex cache_lock;
} HnModel;

HnModel *hn_model_new (HnModelType type);
void hn_model_free (HnModel *m);
/* Adds vocab[id] = token; fails on duplicates or negative ids. */
gboolean hn_model_add_token (HnModel *m, const char *token, int32_t id, const char *file, GError **error);
int32_t hn_model_lookup (const HnModel *m, const char *token);
/* Fills byte_ids from the <0xXX> pieces. */
void hn_model_index_bytes (HnModel *m);
/* Adds a merge "a b" -> ranked by insertion order. */
gboolean hn_model_add_merge (HnModel *m, const char *a, const char *b, const char *file, GError **error);
/* The merges in rank order (a + b -> merged, all vocabulary ids). */
typedef struct {
  int32_t a, b, merged;
} HnMerge;
GArray *hn_model_dup_merges (const HnModel *m);
/* tokenizer-json.c: the big values of tokenizer.json, scanned directly. */
typedef struct {
  const char *data;
  gsize len;
} HnTokJsonSpan;
JsonNode *hn_tok_json_load_split (const char *file, const char *data, gsize len, JsonParser **parser_out,
                                  HnTokJsonSpan big[2], GError **error);
gboolean hn_tok_json_read_vocab (HnModel *m, const char *file, const char *data, gsize len, GError **error);
gboolean hn_tok_json_read_merges (HnModel *m, const char *file, const char *data, gsize len, GError **error);
gboolean hn_tok_json_read_unigram_vocab (HnModel *m, const char *file, const char *data, gsize len, GError **error);
/* `big`: model.vocab and model.merges cut out of the document (may be NULL). */
HnModel *hn_model_from_json (JsonObject *obj, const HnTokJsonSpan *big, const char *file, GError **error);
/* Appends ids of one pre-tokenized word. */
void hn_model_tokenize (HnModel *m, const char *word, gsize len, GArray *out);
void hn_bpe_tokenize (HnModel *m, const char *word, gsize len, GArray *out);
void hn_wordpiece_tokenize (HnModel *m, const char *word, gsize len, GArray *out);
void hn_unigram_tokenize (HnModel *m, const char *word, gsize len, GArray *out);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnModel, hn_model_free)

/* ---- decoders (tokenizer-decode.c) ---- */
typedef enum {
  HN_DEC_SEQUENCE, HN_DEC_BYTE_LEVEL, HN_DEC_METASPACE, HN_DEC_WORDPIECE,
  HN_DEC_BYTE_FALLBACK, HN_DEC_FUSE, HN_DEC_STRIP, HN_DEC_REPLACE, HN_DEC_BPE,
} HnDecType;

typedef struct _HnDecoder HnDecoder;
struct _HnDecoder {
  HnDecType type;
  GPtrArray *children;
  char *replacement;        /* METASPACE */
  HnPrependScheme prepend_scheme;
  char *prefix;             /* WORDPIECE */
  gboolean cleanup;         /* WORDPIECE */
  char *pattern, *content;  /* REPLACE (literal), STRIP content */
  GRegex *regex;            /* REPLACE (regex) */
  int start, stop;          /* STRIP */
  char *suffix;             /* BPE */
};

HnDecoder *hn_decoder_from_json (JsonNode *node, const char *file, GError **error);
HnDecoder *hn_decoder_new (HnDecType type);
void hn_decoder_free (HnDecoder *d);
/* Transforms the token strings (GByteArray*, raw bytes) in place. Fails only
 * when a Replace regex stops at PCRE2's match limit (the error names it). */
gboolean hn_decoder_apply (const HnDecoder *d, GPtrArray *tokens, GError **error);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (HnDecoder, hn_decoder_free)

/* ---- SentencePiece model proto (tokenizer-spm.c) ---- */
HnTokenizer *hn_tokenizer_load_spm (const char *file, GError **error);
/* ---- slow formats (tokenizer-slow.c) ---- */
HnTokenizer *hn_tokenizer_load_gpt2 (const char *vocab_json, const char *merges_txt, GError **error);
HnTokenizer *hn_tokenizer_load_vocab_txt (const char *vocab_txt, GError **error);

/* ---- the tokenizer (tokenizer.c) ---- */
typedef struct {
  char *content;
  int32_t id;
  gboolean special, lstrip, rstrip, single_word, normalized;
} HnAddedToken;

typedef enum { HN_POST_NONE, HN_POST_TEMPLATE } HnPostType;

struct _HnTokenizer {
  gint ref_count;
  char *path;
  gsize encode_chunk;         /* long texts are encoded in chunks of about this many bytes; 0: whole */
  HnModel *model;
  HnNormalizer *normalizer;   /* may be NULL */
  HnPretok *pretok;           /* may be NULL */
  HnDecoder *decoder;         /* may be NULL: tokens joined with spaces */
  GPtrArray *added;           /* HnAddedToken* */
  GHashTable *added_by_content; /* char* -> HnAddedToken* */
  GHashTable *added_by_id;    /* GINT_TO_POINTER(id) -> HnAddedToken* */
  GPtrArray *added_by_first_byte[256]; /* matcher index, longest first */
  gboolean has_normalized_added;
  /* post-processing for a single sequence: ids before and after */
  gboolean has_post;          /* FALSE: fall back to add_bos/add_eos */
  GArray *post_prefix, *post_suffix; /* int32 */
  /* tokenizer_config.json */
  char *bos_token, *eos_token, *pad_token, *unk_token;
  int32_t bos_id, eos_id, pad_id, unk_id;
  GArray *eos_ids;
  gboolean add_bos, add_eos, add_bos_set, add_eos_set;
  char *chat_template;
  guint64 model_max_length;
  gboolean slow_gpt2;          /* loaded from vocab.json + merges.txt */
  gboolean from_tokenizer_json;
  gboolean clean_up_spaces;    /* tokenizer_config clean_up_tokenization_spaces: true */
};

HnTokenizer *hn_tokenizer_new_empty (const char *path);
/* Registers an added token (special or not); replaces one with the same content. */
void hn_tokenizer_add_token (HnTokenizer *tok, const char *content, int32_t id, gboolean special,
                             gboolean lstrip, gboolean rstrip, gboolean single_word, gboolean normalized);
/* Shared JSON helpers. */
JsonNode *hn_tok_parse_json_file (const char *file, JsonParser **parser_out, GError **error);
const char *hn_tok_json_str (JsonObject *o, const char *member); /* NULL when absent/null/not a string */
gboolean hn_tok_json_bool (JsonObject *o, const char *member, gboolean dflt);
/* A number member as int64 / double, `dflt` when absent, null or not a number. */
gint64 hn_tok_json_int (JsonObject *o, const char *member, gint64 dflt);
double hn_tok_json_double (JsonObject *o, const char *member, double dflt);
/* An int64 array element, -1 when it is not an integer. */
gint64 hn_tok_json_array_int (JsonArray *a, guint i);
/* Compiles with G_REGEX_OPTIMIZE; `what` names the file/component for errors. */
GRegex *hn_tok_regex_new (const char *pattern, const char *what, GError **error);

G_END_DECLS
