/* The generation loops: transformers' _sample (greedy and sampling) and the
 * vectorised _beam_search (transformers >= 4.50), ported for one prompt with
 * the same stopping criteria, scores in float32 and the same -1e9 masking. */
#include "generate/generate-private.h"
#include "generate/logits-process.h"
#include "generate/sampler.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

void
hn_generate_options_init (HnGenerateOptions *opt)
{
  memset (opt, 0, sizeof *opt);
  opt->max_length = 20;
  opt->max_new_tokens = -1;
  opt->min_length = 0;
  opt->min_new_tokens = 0;
  opt->do_sample = FALSE;
  opt->num_beams = 1;
  opt->num_return_sequences = 1;
  opt->length_penalty = 1.0;
  opt->early_stopping = HN_EARLY_STOP_FALSE;
  opt->repetition_penalty = 1.0;
  opt->temperature = 1.0;
  opt->top_k = 50;
  opt->top_p = 1.0;
  opt->min_p = NAN;
  opt->typical_p = 1.0;
  opt->eos_token_ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  opt->pad_token_id = -1;
  opt->seed = 0;
}

void
hn_generate_options_clear (HnGenerateOptions *opt)
{
  g_clear_pointer (&opt->bad_words_ids, g_ptr_array_unref);
  g_clear_pointer (&opt->suppress_tokens, g_array_unref);
  g_clear_pointer (&opt->begin_suppress_tokens, g_array_unref);
  g_clear_pointer (&opt->eos_token_ids, g_array_unref);
  g_clear_pointer (&opt->stop_strings, g_strfreev);
}

static GArray *
dup_ids (GArray *a)
{
  if (!a)
    return NULL;
  GArray *b = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), a->len);
  g_array_append_vals (b, a->data, a->len);
  return b;
}

void
hn_generate_options_copy (HnGenerateOptions *dst, const HnGenerateOptions *src)
{
  *dst = *src;
  dst->suppress_tokens = dup_ids (src->suppress_tokens);
  dst->begin_suppress_tokens = dup_ids (src->begin_suppress_tokens);
  dst->eos_token_ids = src->eos_token_ids ? dup_ids (src->eos_token_ids)
                                          : g_array_new (FALSE, FALSE, sizeof (int32_t));
  dst->stop_strings = g_strdupv (src->stop_strings);
  dst->bad_words_ids = NULL;
  if (src->bad_words_ids)
    {
      dst->bad_words_ids = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
      for (guint i = 0; i < src->bad_words_ids->len; i++)
        g_ptr_array_add (dst->bad_words_ids, dup_ids (g_ptr_array_index (src->bad_words_ids, i)));
    }
}

static gboolean
check_ids (GArray *a, const char *what, int vocab, GError **error)
{
  for (guint i = 0; a && i < a->len; i++)
    {
      int32_t t = g_array_index (a, int32_t, i);
      if (t < 0 || (vocab > 0 && t >= vocab))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "%s: token id %d is outside the vocabulary (0..%d)",
                       what, t, vocab - 1);
          return FALSE;
        }
    }
  return TRUE;
}

char *
hn_generate_options_drop_outside_vocab (HnGenerateOptions *opt, int vocab)
{
  if (vocab <= 0)
    return NULL;
  g_autoptr (GString) dropped = g_string_new (NULL);
  for (guint i = 0; opt->eos_token_ids && i < opt->eos_token_ids->len;)
    {
      int32_t t = g_array_index (opt->eos_token_ids, int32_t, i);
      if (t >= 0 && t < vocab)
        {
          i++;
          continue;
        }
      g_string_append_printf (dropped, "%seos_token_id %d", dropped->len ? ", " : "", t);
      g_array_remove_index (opt->eos_token_ids, i);
    }
  if (opt->pad_token_id >= vocab || opt->pad_token_id < -1)
    {
      g_string_append_printf (dropped, "%spad_token_id %d", dropped->len ? ", " : "", opt->pad_token_id);
      opt->pad_token_id = -1;
    }
  if (!dropped->len)
    return NULL;
  return g_strdup_printf ("%s outside the vocabulary (0..%d): ignored, as transformers does (generation never stops "
                          "on an id it cannot produce)", dropped->str, vocab - 1);
}

gboolean
hn_generate_options_validate (const HnGenerateOptions *opt, int vocab, GError **error)
{
#define BAD(...)                                                                                                       \
  do                                                                                                                   \
    {                                                                                                                  \
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, __VA_ARGS__);                                            \
      return FALSE;                                                                                                    \
    }                                                                                                                  \
  while (0)
  if (opt->max_new_tokens == 0 || opt->max_new_tokens < -1)
    BAD ("max_new_tokens must be greater than 0, but is %d", opt->max_new_tokens);
  if (opt->max_new_tokens < 0 && opt->max_length <= 0)
    BAD ("max_length must be greater than 0, but is %d", opt->max_length);
  if (opt->min_length < 0 || opt->min_new_tokens < 0)
    BAD ("min_length and min_new_tokens must not be negative");
  if (opt->num_beams < 1)
    BAD ("num_beams must be at least 1, but is %d", opt->num_beams);
  if (opt->num_return_sequences < 1)
    BAD ("num_return_sequences must be at least 1, but is %d", opt->num_return_sequences);
  if (opt->num_beams == 1 && opt->num_return_sequences > 1 && !opt->do_sample)
    BAD ("greedy decoding (no do_sample, num_beams 1) cannot return %d sequences", opt->num_return_sequences);
  if (opt->num_beams > 1 && opt->num_return_sequences > opt->num_beams)
    BAD ("num_return_sequences (%d) has to be smaller or equal to num_beams (%d)", opt->num_return_sequences,
         opt->num_beams);
  if (!(opt->temperature > 0.0) || !isfinite (opt->temperature))
    BAD ("temperature must be a strictly positive float, but is %g", opt->temperature);
  if (opt->top_k < 0)
    BAD ("top_k must be a non-negative integer, but is %d", opt->top_k);
  if (!(opt->top_p >= 0.0 && opt->top_p <= 1.0))
    BAD ("top_p must be a float in [0, 1], but is %g", opt->top_p);
  if (!isnan (opt->min_p) && !(opt->min_p >= 0.0 && opt->min_p <= 1.0))
    BAD ("min_p must be a float in [0, 1], but is %g", opt->min_p);
  if (!(opt->typical_p > 0.0 && opt->typical_p <= 1.0))
    BAD ("typical_p must be a float in (0, 1], but is %g", opt->typical_p);
  if (!(opt->epsilon_cutoff >= 0.0 && opt->epsilon_cutoff < 1.0))
    BAD ("epsilon_cutoff must be a float in [0, 1), but is %g", opt->epsilon_cutoff);
  if (!(opt->eta_cutoff >= 0.0 && opt->eta_cutoff < 1.0))
    BAD ("eta_cutoff must be a float in [0, 1), but is %g", opt->eta_cutoff);
  if (!(opt->repetition_penalty > 0.0) || !isfinite (opt->repetition_penalty))
    BAD ("repetition_penalty must be a strictly positive float, but is %g", opt->repetition_penalty);
  if (opt->no_repeat_ngram_size < 0)
    BAD ("no_repeat_ngram_size must not be negative, but is %d", opt->no_repeat_ngram_size);
  if (!isfinite (opt->length_penalty))
    BAD ("length_penalty must be finite");
  if (opt->pad_token_id >= 0 && vocab > 0 && opt->pad_token_id >= vocab)
    BAD ("pad_token_id %d is outside the vocabulary (0..%d)", opt->pad_token_id, vocab - 1);
#undef BAD
  if (!check_ids (opt->eos_token_ids, "eos_token_id", vocab, error) ||
      !check_ids (opt->suppress_tokens, "suppress_tokens", vocab, error) ||
      !check_ids (opt->begin_suppress_tokens, "begin_suppress_tokens", vocab, error))
    return FALSE;
  for (guint i = 0; opt->bad_words_ids && i < opt->bad_words_ids->len; i++)
    {
      GArray *w = g_ptr_array_index (opt->bad_words_ids, i);
      if (w->len == 0)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "bad_words_ids entry %u is empty", i);
          return FALSE;
        }
      if (!check_ids (w, "bad_words_ids", vocab, error))
        return FALSE;
    }
  for (char **s = opt->stop_strings; s && *s; s++)
    if (**s == '\0')
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "stop strings must not be empty");
        return FALSE;
      }
  return TRUE;
}

int
hn_generate_options_max_length (const HnGenerateOptions *opt, int prompt_len)
{
  return opt->max_new_tokens >= 0 ? prompt_len + opt->max_new_tokens : opt->max_length;
}

void
hn_generate_result_free (HnGenerateResult *res)
{
  if (!res)
    return;
  g_clear_pointer (&res->sequences, g_ptr_array_unref);
  g_clear_pointer (&res->scores, g_array_unref);
  g_free (res->stop_reason);
  g_free (res);
}

gboolean
hn_generate_is_eos (const HnGenerateOptions *opt, int32_t t)
{
  for (guint i = 0; opt->eos_token_ids && i < opt->eos_token_ids->len; i++)
    if (g_array_index (opt->eos_token_ids, int32_t, i) == t)
      return TRUE;
  return FALSE;
}

/* StopStringCriteria: a stop string counts when the last token completes it
 * (it may overhang past the string's end). Checked on the decoded generated
 * text: an occurrence must end after the text decoded before the last token. */
gboolean
hn_generate_hits_stop_string (const HnGenerateModel *m, const HnGenerateOptions *opt, const int32_t *gen, int n_gen)
{
  if (!opt->stop_strings || !opt->stop_strings[0] || n_gen <= 0)
    return FALSE;
  g_autofree char *all = m->decode (m->decode_data, gen, n_gen);
  g_autofree char *prev = n_gen > 1 ? m->decode (m->decode_data, gen, n_gen - 1) : g_strdup ("");
  if (!all)
    return FALSE;
  gsize prev_len = prev ? strlen (prev) : 0;
  for (char **s = opt->stop_strings; *s; s++)
    {
      gsize sl = strlen (*s);
      for (const char *p = strstr (all, *s); p; p = strstr (p + 1, *s))
        if ((gsize) (p - all) + sl > prev_len)
          return TRUE;
    }
  return FALSE;
}

HnGenerateResult *
hn_generate_result_new (int n_prompt)
{
  HnGenerateResult *r = g_new0 (HnGenerateResult, 1);
  r->sequences = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  r->scores = g_array_new (FALSE, FALSE, sizeof (double));
  r->n_prompt = n_prompt;
  return r;
}

gboolean
hn_generate_check_cancel (GCancellable *c, GError **error)
{
  if (c && g_cancellable_is_cancelled (c))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_CANCELLED, "generation was cancelled");
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_finite_logits (const float *logits, int n, GError **error)
{
  for (int i = 0; i < n; i++)
    if (isnan (logits[i]))
      {
        g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC, "the model produced NaN logits (token index %d)", i);
        return FALSE;
      }
  return TRUE;
}

const char *
hn_generate_sample_step (const HnGenerateModel *m, const HnGenerateOptions *opt, HnRng *rng, GArray *ids,
                         int n_prompt, int max_length, float *logits, int32_t *next, GError **error)
{
  int V = m->vocab_size;
  *next = -1;
  if (!check_finite_logits (logits, V, error))
    return NULL;
  hn_logits_process (opt, logits, V, (const int32_t *) ids->data, (int) ids->len, n_prompt);
  int32_t t = opt->do_sample ? hn_sample_categorical (rng, logits, V) : hn_argmax (logits, V);
  if (t < 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                   "every token was removed by the logits processors at position %u", ids->len);
      return NULL;
    }
  g_array_append_val (ids, t);
  *next = t;
  int cur_len = (int) ids->len;
  if (hn_generate_is_eos (opt, t))
    return "eos";
  if (cur_len >= max_length)
    return "max_length";
  if (hn_generate_hits_stop_string (m, opt, (const int32_t *) ids->data + n_prompt, cur_len - n_prompt))
    return "stop_string";
  return "";
}

/* Steps per HnLmOps.decode_greedy call: the tokens of one chunk are streamed together. */
#define GREEDY_CHUNK 32

/* Greedy generation can run on the model's side when no logits processor could change an
 * argmax and no stop string needs the decoded text after every token. */
static gboolean
use_device_greedy (const HnGenerateModel *m, const HnGenerateOptions *opt)
{
  return m->ops->decode_greedy && m->ops->can_decode_greedy && hn_logits_greedy_is_argmax (opt) &&
         !(opt->stop_strings && opt->stop_strings[0]) && m->ops->can_decode_greedy (m->lm);
}

/* The greedy steps after the first, GREEDY_CHUNK at a time on the model's side, stopping as
 * hn_generate_sample_step does (EOS, then max_length; stop strings never come here). Picks past
 * the stop within a chunk are dropped. The stop reason, NULL on error. */
static const char *
run_device_greedy (const HnGenerateModel *m, const HnGenerateOptions *opt, GArray *ids, int max_length,
                   gboolean stream, int *n_generated, GCancellable *cancellable, GError **error)
{
  int32_t out[GREEDY_CHUNK];
  for (;;)
    {
      int32_t last = g_array_index (ids, int32_t, ids->len - 1);
      int n = MIN (GREEDY_CHUNK, max_length - (int) ids->len);
      if (!hn_generate_check_cancel (cancellable, error) || !m->ops->decode_greedy (m->lm, last, n, out, error))
        return NULL;
      for (int i = 0; i < n; i++)
        {
          g_array_append_val (ids, out[i]);
          (*n_generated)++;
          if (stream)
            m->on_token (m->token_data, out[i]);
          if (hn_generate_is_eos (opt, out[i]))
            return "eos";
          if ((int) ids->len >= max_length)
            return "max_length";
        }
    }
}

/* transformers' _sample: greedy (argmax) or multinomial sampling. */
static HnGenerateResult *
run_sample (const HnGenerateModel *m, const HnGenerateOptions *opt, const int32_t *prompt, int n_prompt,
            int max_length, GCancellable *cancellable, GError **error)
{
  int V = m->vocab_size;
  g_autoptr (HnGenerateResult) res = hn_generate_result_new (n_prompt);
  g_autofree float *logits = g_new (float, V);
  HnRng rng;
  hn_rng_seed (&rng, opt->seed);
  gint64 t0 = g_get_monotonic_time ();
  for (int r = 0; r < opt->num_return_sequences; r++)
    {
      /* one row at a time keeps the cache small; each return sequence samples on */
      GArray *ids = g_array_sized_new (FALSE, FALSE, sizeof (int32_t), (guint) max_length);
      g_ptr_array_add (res->sequences, ids);
      double zero = 0.0;
      g_array_append_val (res->scores, zero);
      g_array_append_vals (ids, prompt, (guint) n_prompt);
      if (!m->ops->reset (m->lm, 1, error))
        return NULL;
      if (!m->ops->prefill (m->lm, 0, prompt, n_prompt, logits, error))
        return NULL;
      if (r == 0)
        res->prefill_seconds = (g_get_monotonic_time () - t0) / 1e6;
      const char *reason;
      for (;;)
        {
          int32_t next;
          if (!hn_generate_check_cancel (cancellable, error) ||
              !(reason = hn_generate_sample_step (m, opt, &rng, ids, n_prompt, max_length, logits, &next, error)))
            return NULL;
          res->n_generated++;
          if (m->on_token && r == 0)
            m->on_token (m->token_data, next);
          if (*reason)
            break;
          if (use_device_greedy (m, opt))
            {
              g_debug ("greedy decoding on the device, %d steps per chunk", GREEDY_CHUNK);
              res->device_greedy = TRUE;
              if (!(reason = run_device_greedy (m, opt, ids, max_length, m->on_token && r == 0, &res->n_generated,
                                                cancellable, error)))
                return NULL;
              break;
            }
          int row = 0;
          if (!m->ops->decode (m->lm, 1, &row, &next, logits, error))
            return NULL;
        }
      if (r == 0)
        res->stop_reason = g_strdup (reason);
      g_array_remove_range (ids, 0, (guint) n_prompt);
    }
  res->n_sequences = (int) res->sequences->len;
  res->seconds = (g_get_monotonic_time () - t0) / 1e6;
  return g_steal_pointer (&res);
}

typedef struct {
  float v;
  int i;
} Cand;

/* Indices of the k largest values (descending; lower index first on ties). */
static void
top_k_indices (const float *v, int n, int k, int *out)
{
  /* k is small (<= a few beams): insertion into a sorted list */
  int have = 0;
  for (int i = 0; i < n; i++)
    {
      if (have == k && !(v[i] > v[out[k - 1]]))
        continue;
      int pos = have < k ? have++ : k - 1;
      while (pos > 0 && v[i] > v[out[pos - 1]])
        {
          out[pos] = out[pos - 1];
          pos--;
        }
      out[pos] = i;
    }
}

/* transformers' _beam_search for batch size 1. Rows of the model are the beams. */
static HnGenerateResult *
run_beam (const HnGenerateModel *m, const HnGenerateOptions *opt, const int32_t *prompt, int n_prompt,
          int max_length, GCancellable *cancellable, GError **error)
{
  int V = m->vocab_size, B = opt->num_beams;
  int n_eos = opt->eos_token_ids ? (int) opt->eos_token_ids->len : 0;
  int K = MAX (2, 1 + n_eos) * B;
  int L = max_length;
  int32_t fill = opt->pad_token_id >= 0 ? opt->pad_token_id : (n_eos > 0 ? g_array_index (opt->eos_token_ids, int32_t, 0) : -1);
  g_autoptr (HnGenerateResult) res = hn_generate_result_new (n_prompt);
  gint64 t0 = g_get_monotonic_time ();

  g_autofree int32_t *run_seq = g_new (int32_t, (gsize) B * L);  /* [B, L] */
  g_autofree int32_t *fin_seq = g_new (int32_t, (gsize) B * L);  /* [B, L] */
  g_autofree int32_t *topk_seq = g_new (int32_t, (gsize) K * L); /* [K, L] */
  g_autofree int32_t *merged_seq = g_new (int32_t, (gsize) (B + K) * L);
  g_autofree int *fin_len = g_new0 (int, B);
  g_autofree int *merged_len = g_new0 (int, B + K);
  g_autofree float *run_score = g_new (float, B);
  g_autofree float *fin_score = g_new (float, B);
  g_autofree gboolean *fin_done = g_new0 (gboolean, B);
  g_autofree float *logits = g_new (float, (gsize) B * V); /* [B, V] */
  g_autofree float *acc = g_new (float, (gsize) B * V);
  g_autofree float *topk_lp = g_new (float, K);
  g_autofree int *topk_src = g_new (int, K);
  g_autofree gboolean *hits = g_new0 (gboolean, K);
  g_autofree float *tmp = g_new (float, B + K);
  g_autofree int *idx = g_new (int, B + K);
  g_autofree int *src = g_new (int, B);
  g_autofree int *rows = g_new (int, B);
  g_autofree int32_t *toks = g_new (int32_t, B);
  HnRng rng;
  hn_rng_seed (&rng, opt->seed);

  for (int b = 0; b < B; b++)
    {
      for (int j = 0; j < L; j++)
        run_seq[b * L + j] = j < n_prompt ? prompt[j] : fill;
      run_score[b] = b == 0 ? 0.0f : -1e9f;
      fin_score[b] = -1e9f;
      rows[b] = b;
    }
  memcpy (fin_seq, run_seq, sizeof (int32_t) * (gsize) B * L);

  if (!m->ops->reset (m->lm, B, error) || !m->ops->prefill (m->lm, 0, prompt, n_prompt, logits, error))
    return NULL;
  for (int b = 0; b < B; b++)
    src[b] = 0;
  if (!m->ops->reorder (m->lm, B, src, error))
    return NULL;
  for (int b = 1; b < B; b++)
    memcpy (logits + (gsize) b * V, logits, sizeof (float) * V);
  res->prefill_seconds = (g_get_monotonic_time () - t0) / 1e6;

  gboolean early_unsat = TRUE;
  int cur_len = n_prompt;
  gboolean all_hit = FALSE;
  for (;;)
    {
      if (!hn_generate_check_cancel (cancellable, error) || !check_finite_logits (logits, B * V, error))
        return NULL;
      /* b. log-softmax, processors on each beam's sequence, add running scores */
      for (int b = 0; b < B; b++)
        {
          float *row = logits + (gsize) b * V;
          hn_logits_log_softmax (row, V);
          hn_logits_process (opt, row, V, run_seq + (gsize) b * L, cur_len, n_prompt);
          for (int t = 0; t < V; t++)
            acc[(gsize) b * V + t] = row[t] + run_score[b];
        }
      /* c. top-K continuations over all beams */
      g_autofree int *sel = g_new (int, K);
      int got;
      if (opt->do_sample)
        got = hn_sample_without_replacement (&rng, acc, B * V, K, sel);
      else
        {
          top_k_indices (acc, B * V, K, sel);
          got = K;
        }
      if (got < K)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_NUMERIC,
                       "beam search needs %d candidate tokens but only %d have non-zero probability", K, got);
          return NULL;
        }
      for (int k = 0; k < K; k++)
        {
          int b = sel[k] / V;
          int32_t t = sel[k] % V;
          topk_lp[k] = acc[sel[k]];
          topk_src[k] = b;
          memcpy (topk_seq + (gsize) k * L, run_seq + (gsize) b * L, sizeof (int32_t) * L);
          topk_seq[(gsize) k * L + cur_len] = t;
        }
      /* d. stopping criteria on each candidate */
      all_hit = TRUE;
      for (int k = 0; k < K; k++)
        {
          int32_t t = topk_seq[(gsize) k * L + cur_len];
          hits[k] = cur_len + 1 >= max_length || hn_generate_is_eos (opt, t) ||
                    hn_generate_hits_stop_string (m, opt, topk_seq + (gsize) k * L + n_prompt, cur_len + 1 - n_prompt);
          all_hit = all_hit && hits[k];
        }
      /* e. the best B unfinished candidates keep running */
      for (int k = 0; k < K; k++)
        tmp[k] = topk_lp[k] + (hits[k] ? -1.0e9f : 0.0f);
      top_k_indices (tmp, K, B, idx);
      for (int b = 0; b < B; b++)
        {
          int k = idx[b];
          memcpy (run_seq + (gsize) b * L, topk_seq + (gsize) k * L, sizeof (int32_t) * L);
          run_score[b] = tmp[k];
          src[b] = topk_src[k];
        }
      /* f. merge newly finished top-B candidates into the finished set */
      gboolean all_fin = TRUE;
      for (int b = 0; b < B; b++)
        all_fin = all_fin && fin_done[b];
      float denom = powf ((float) (cur_len + 1 - n_prompt), (float) opt->length_penalty);
      for (int b = 0; b < B; b++)
        {
          tmp[b] = fin_score[b];
          memcpy (merged_seq + (gsize) b * L, fin_seq + (gsize) b * L, sizeof (int32_t) * L);
          merged_len[b] = fin_len[b];
        }
      g_autofree gboolean *merged_done = g_new (gboolean, B + K);
      for (int b = 0; b < B; b++)
        merged_done[b] = fin_done[b];
      for (int k = 0; k < K; k++)
        {
          gboolean just = hits[k] && k < B;
          float s = topk_lp[k] / denom;
          if (all_fin && opt->early_stopping == HN_EARLY_STOP_TRUE)
            s += -1.0e9f;
          if (!early_unsat)
            s += -1.0e9f;
          if (!just)
            s += -1.0e9f;
          tmp[B + k] = s;
          merged_done[B + k] = just;
          merged_len[B + k] = cur_len + 1;
          memcpy (merged_seq + (gsize) (B + k) * L, topk_seq + (gsize) k * L, sizeof (int32_t) * L);
        }
      top_k_indices (tmp, B + K, B, idx);
      for (int b = 0; b < B; b++)
        {
          int j = idx[b];
          fin_score[b] = tmp[j];
          fin_done[b] = merged_done[j];
          fin_len[b] = merged_len[j];
          memcpy (fin_seq + (gsize) b * L, merged_seq + (gsize) j * L, sizeof (int32_t) * L);
        }
      /* g. stopping condition of the whole search */
      cur_len++;
      res->n_generated += B;
      {
        int best_len = (opt->early_stopping == HN_EARLY_STOP_NEVER && opt->length_penalty > 0.0)
                           ? max_length - n_prompt
                           : cur_len - n_prompt;
        float best_possible = run_score[0] / powf ((float) best_len, (float) opt->length_penalty);
        float mn = fin_score[0];
        for (int b = 1; b < B; b++)
          mn = MIN (mn, fin_score[b]);
        gboolean any = FALSE;
        for (int b = 0; b < B; b++)
          any = any || best_possible > (fin_done[b] ? mn : -1.0e9f);
        early_unsat = early_unsat && any;
      }
      all_fin = TRUE;
      for (int b = 0; b < B; b++)
        all_fin = all_fin && fin_done[b];
      gboolean go_on = early_unsat && !(all_fin && opt->early_stopping == HN_EARLY_STOP_TRUE) && !all_hit;
      if (!go_on)
        break;
      if (cur_len >= max_length)
        break;
      /* reorder the model's rows to the surviving beams, then feed their new tokens */
      if (!m->ops->reorder (m->lm, B, src, error))
        return NULL;
      for (int b = 0; b < B; b++)
        toks[b] = run_seq[(gsize) b * L + cur_len - 1];
      if (!m->ops->decode (m->lm, B, rows, toks, logits, error))
        return NULL;
    }

  for (int r = 0; r < opt->num_return_sequences; r++)
    {
      int len = fin_len[r] > 0 ? fin_len[r] : cur_len;
      GArray *ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_array_append_vals (ids, fin_seq + (gsize) r * L + n_prompt, (guint) MAX (0, len - n_prompt));
      g_ptr_array_add (res->sequences, ids);
      double s = fin_score[r];
      g_array_append_val (res->scores, s);
    }
  res->n_sequences = (int) res->sequences->len;
  res->stop_reason = g_strdup (all_hit || cur_len >= max_length ? "max_length" : "eos");
  res->seconds = (g_get_monotonic_time () - t0) / 1e6;
  return g_steal_pointer (&res);
}

int
hn_generate_check_prompt (const HnGenerateModel *model, const HnGenerateOptions *opt, const int32_t *prompt,
                          int n_prompt, GError **error)
{
  if (!hn_generate_options_validate (opt, model->vocab_size, error))
    return -1;
  if (n_prompt <= 0)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "the prompt is empty: generation needs at least one token");
      return -1;
    }
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= model->vocab_size)
      {
        g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                     "prompt token %d at position %d is outside the vocabulary (0..%d)", prompt[i], i,
                     model->vocab_size - 1);
        return -1;
      }
  if (opt->stop_strings && opt->stop_strings[0] && !model->decode)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "stop strings need a tokenizer to decode tokens");
      return -1;
    }
  int max_length = hn_generate_options_max_length (opt, n_prompt);
  if (n_prompt >= max_length)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "the prompt has %d tokens but max_length is %d: raise max_length or set max_new_tokens", n_prompt,
                   max_length);
      return -1;
    }
  return max_length;
}

HnGenerateResult *
hn_generate_run (const HnGenerateModel *model, const HnGenerateOptions *opt, const int32_t *prompt, int n_prompt,
                 GCancellable *cancellable, GError **error)
{
  int max_length = hn_generate_check_prompt (model, opt, prompt, n_prompt, error);
  if (max_length < 0)
    return NULL;
  if (opt->num_beams > 1)
    return run_beam (model, opt, prompt, n_prompt, max_length, cancellable, error);
  return run_sample (model, opt, prompt, n_prompt, max_length, cancellable, error);
}
