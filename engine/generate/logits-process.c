/* Logits processors and warpers: ports of transformers' generation/logits_process.py
 * for one row. Softmax and cumulative sums run in float like torch's float32
 * tensors, so thresholds fall on the same side as there. */
#include "generate/logits-process.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
softmax_into (const float *scores, int n, float *probs)
{
  float mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (scores[i] > mx)
      mx = scores[i];
  double sum = 0.0;
  for (int i = 0; i < n; i++)
    {
      float e = (mx == -INFINITY) ? 0.0f : expf (scores[i] - mx);
      probs[i] = e;
      sum += e;
    }
  float inv = sum > 0.0 ? (float) (1.0 / sum) : 0.0f;
  for (int i = 0; i < n; i++)
    probs[i] *= inv;
}

void
hn_logits_log_softmax (float *scores, int vocab)
{
  float mx = -INFINITY;
  for (int i = 0; i < vocab; i++)
    if (scores[i] > mx)
      mx = scores[i];
  if (mx == -INFINITY)
    return;
  double sum = 0.0;
  for (int i = 0; i < vocab; i++)
    sum += exp ((double) scores[i] - mx);
  float lse = (float) (mx + log (sum));
  for (int i = 0; i < vocab; i++)
    scores[i] = scores[i] - lse;
}

void
hn_logits_repetition_penalty (float *scores, int vocab, const int32_t *ids, int n_ids, double penalty)
{
  /* gather-then-scatter: each distinct token is penalised once, from its original score */
  g_autofree guint8 *seen = g_malloc0 ((gsize) vocab);
  float p = (float) penalty;
  for (int i = 0; i < n_ids; i++)
    {
      int32_t t = ids[i];
      if (t < 0 || t >= vocab || seen[t])
        continue;
      seen[t] = 1;
      scores[t] = scores[t] < 0 ? scores[t] * p : scores[t] / p;
    }
}

void
hn_logits_no_repeat_ngram (float *scores, int vocab, const int32_t *ids, int n_ids, int n)
{
  if (n <= 0 || n_ids + 1 < n)
    return;
  /* the last n-1 tokens form the prefix; every earlier n-gram with that prefix bans its last token */
  const int32_t *prefix = ids + n_ids - (n - 1);
  for (int i = 0; i + n <= n_ids; i++)
    {
      if (memcmp (ids + i, prefix, sizeof (int32_t) * (gsize) (n - 1)) != 0)
        continue;
      int32_t t = ids[i + n - 1];
      if (t >= 0 && t < vocab)
        scores[t] = -INFINITY;
    }
}

static gboolean
array_has (GArray *a, int32_t v)
{
  for (guint i = 0; a && i < a->len; i++)
    if (g_array_index (a, int32_t, i) == v)
      return TRUE;
  return FALSE;
}

void
hn_logits_bad_words (float *scores, int vocab, const int32_t *ids, int n_ids, GPtrArray *bad_words, GArray *eos)
{
  for (guint w = 0; bad_words && w < bad_words->len; w++)
    {
      GArray *seq = g_ptr_array_index (bad_words, w);
      int len = (int) seq->len;
      if (len == 0)
        continue;
      const int32_t *s = (const int32_t *) seq->data;
      int32_t last = s[len - 1];
      if (last < 0 || last >= vocab)
        continue;
      if (len == 1)
        {
          if (!array_has (eos, last))
            scores[last] = -INFINITY;
          continue;
        }
      /* SequenceBiasLogitsProcessor skips sequences longer than the input */
      if (len > n_ids)
        continue;
      if (memcmp (ids + n_ids - (len - 1), s, sizeof (int32_t) * (gsize) (len - 1)) == 0)
        scores[last] = -INFINITY;
    }
}

void
hn_logits_suppress (float *scores, int vocab, GArray *tokens)
{
  for (guint i = 0; tokens && i < tokens->len; i++)
    {
      int32_t t = g_array_index (tokens, int32_t, i);
      if (t >= 0 && t < vocab)
        scores[t] = -INFINITY;
    }
}

void
hn_logits_temperature (float *scores, int vocab, double temperature)
{
  float t = (float) temperature;
  for (int i = 0; i < vocab; i++)
    scores[i] = scores[i] / t;
}

static int
cmp_float_desc (const void *a, const void *b)
{
  float x = *(const float *) a, y = *(const float *) b;
  return (x < y) - (x > y);
}

/* The k-th largest value (k >= 1). */
static float
kth_largest (const float *scores, int n, int k)
{
  g_autofree float *tmp = g_memdup2 (scores, sizeof (float) * (gsize) n);
  /* quickselect on descending order */
  int lo = 0, hi = n - 1, want = k - 1;
  while (hi > lo)
    {
      if (hi - lo < 16)
        {
          qsort (tmp + lo, (gsize) (hi - lo + 1), sizeof (float), cmp_float_desc);
          break;
        }
      float pivot = tmp[lo + (hi - lo) / 2];
      int i = lo, j = hi;
      while (i <= j)
        {
          while (tmp[i] > pivot)
            i++;
          while (tmp[j] < pivot)
            j--;
          if (i <= j)
            {
              float t = tmp[i];
              tmp[i] = tmp[j];
              tmp[j] = t;
              i++;
              j--;
            }
        }
      if (want <= j)
        hi = j;
      else if (want >= i)
        lo = i;
      else
        break;
    }
  return tmp[want];
}

void
hn_logits_top_k (float *scores, int vocab, int top_k, int min_tokens_to_keep)
{
  int k = MIN (MAX (top_k, min_tokens_to_keep), vocab);
  if (k <= 0)
    return;
  float thr = kth_largest (scores, vocab, k);
  for (int i = 0; i < vocab; i++)
    if (scores[i] < thr)
      scores[i] = -INFINITY;
}

typedef struct {
  float v;
  int i;
} Pair;

static int
cmp_pair_asc (const void *a, const void *b)
{
  const Pair *x = a, *y = b;
  if (x->v < y->v)
    return -1;
  if (x->v > y->v)
    return 1;
  return (x->i > y->i) - (x->i < y->i);
}

static int
cmp_pair_desc (const void *a, const void *b)
{
  const Pair *x = a, *y = b;
  if (x->v > y->v)
    return -1;
  if (x->v < y->v)
    return 1;
  return (x->i > y->i) - (x->i < y->i);
}

static Pair *
sorted_pairs (const float *v, int n, gboolean descending)
{
  Pair *p = g_new (Pair, n);
  for (int i = 0; i < n; i++)
    p[i] = (Pair) { v[i], i };
  qsort (p, (gsize) n, sizeof (Pair), descending ? cmp_pair_desc : cmp_pair_asc);
  return p;
}

void
hn_logits_top_p (float *scores, int vocab, double top_p, int min_tokens_to_keep)
{
  g_autofree Pair *p = sorted_pairs (scores, vocab, FALSE); /* ascending */
  g_autofree float *sorted = g_new (float, vocab);
  g_autofree float *probs = g_new (float, vocab);
  for (int i = 0; i < vocab; i++)
    sorted[i] = p[i].v;
  softmax_into (sorted, vocab, probs);
  float cum = 0.0f;
  float limit = (float) (1.0 - top_p);
  g_autofree guint8 *remove = g_malloc0 ((gsize) vocab);
  for (int i = 0; i < vocab; i++)
    {
      cum += probs[i];
      remove[i] = cum <= limit;
    }
  for (int i = MAX (0, vocab - min_tokens_to_keep); i < vocab; i++)
    remove[i] = 0;
  for (int i = 0; i < vocab; i++)
    if (remove[i])
      scores[p[i].i] = -INFINITY;
}

void
hn_logits_min_p (float *scores, int vocab, double min_p, int min_tokens_to_keep)
{
  g_autofree float *probs = g_new (float, vocab);
  softmax_into (scores, vocab, probs);
  float top = 0.0f;
  for (int i = 0; i < vocab; i++)
    top = MAX (top, probs[i]);
  float thr = (float) min_p * top;
  g_autofree Pair *p = sorted_pairs (scores, vocab, TRUE);
  for (int r = MIN (min_tokens_to_keep, vocab); r < vocab; r++)
    if (probs[p[r].i] < thr)
      scores[p[r].i] = -INFINITY;
}

void
hn_logits_typical (float *scores, int vocab, double mass, int min_tokens_to_keep)
{
  g_autofree float *norm = g_memdup2 (scores, sizeof (float) * (gsize) vocab);
  hn_logits_log_softmax (norm, vocab);
  float ent = 0.0f;
  for (int i = 0; i < vocab; i++)
    {
      float pr = expf (norm[i]);
      float t = norm[i] * pr;
      if (!isnan (t)) /* nansum: -inf * 0 */
        ent -= t;
    }
  g_autofree float *shifted = g_new (float, vocab);
  for (int i = 0; i < vocab; i++)
    shifted[i] = fabsf (-norm[i] - ent);
  g_autofree Pair *p = sorted_pairs (shifted, vocab, FALSE);
  g_autofree float *sl = g_new (float, vocab);
  g_autofree float *probs = g_new (float, vocab);
  for (int i = 0; i < vocab; i++)
    sl[i] = scores[p[i].i];
  softmax_into (sl, vocab, probs);
  float cum = 0.0f;
  int last_ind = 0;
  for (int i = 0; i < vocab; i++)
    {
      cum += probs[i];
      if (cum < (float) mass)
        last_ind++;
    }
  last_ind = MIN (last_ind, vocab - 1);
  float lim = p[last_ind].v;
  for (int r = MIN (min_tokens_to_keep, vocab); r < vocab; r++)
    if (p[r].v > lim)
      scores[p[r].i] = -INFINITY;
}

static void
cutoff (float *scores, int vocab, float thr, int min_tokens_to_keep)
{
  g_autofree float *probs = g_new (float, vocab);
  softmax_into (scores, vocab, probs);
  float kth = kth_largest (scores, vocab, MAX (1, MIN (min_tokens_to_keep, vocab)));
  for (int i = 0; i < vocab; i++)
    if (probs[i] < thr && scores[i] < kth)
      scores[i] = -INFINITY;
}

void
hn_logits_epsilon (float *scores, int vocab, double epsilon, int min_tokens_to_keep)
{
  cutoff (scores, vocab, (float) epsilon, min_tokens_to_keep);
}

void
hn_logits_eta (float *scores, int vocab, double epsilon, int min_tokens_to_keep)
{
  g_autofree float *logp = g_memdup2 (scores, sizeof (float) * (gsize) vocab);
  hn_logits_log_softmax (logp, vocab);
  double ent = 0.0;
  for (int i = 0; i < vocab; i++)
    {
      double pr = exp (logp[i]);
      if (pr > 0.0)
        ent -= pr * logp[i];
    }
  double eta = MIN (epsilon, sqrt (epsilon) * exp (-ent));
  cutoff (scores, vocab, (float) eta, min_tokens_to_keep);
}

void
hn_logits_process (const HnGenerateOptions *opt, float *scores, int vocab, const int32_t *ids, int n_ids,
                   int prompt_len)
{
  if (opt->repetition_penalty != 1.0)
    hn_logits_repetition_penalty (scores, vocab, ids, n_ids, opt->repetition_penalty);
  if (opt->no_repeat_ngram_size > 0)
    hn_logits_no_repeat_ngram (scores, vocab, ids, n_ids, opt->no_repeat_ngram_size);
  if (opt->bad_words_ids)
    hn_logits_bad_words (scores, vocab, ids, n_ids, opt->bad_words_ids, opt->eos_token_ids);
  gboolean have_eos = opt->eos_token_ids && opt->eos_token_ids->len > 0;
  if (have_eos && opt->min_length > 0 && n_ids < opt->min_length)
    hn_logits_suppress (scores, vocab, opt->eos_token_ids);
  if (have_eos && opt->min_new_tokens > 0 && n_ids - prompt_len < opt->min_new_tokens)
    hn_logits_suppress (scores, vocab, opt->eos_token_ids);
  if (opt->suppress_tokens)
    hn_logits_suppress (scores, vocab, opt->suppress_tokens);
  if (opt->begin_suppress_tokens && n_ids == prompt_len)
    hn_logits_suppress (scores, vocab, opt->begin_suppress_tokens);
  if (!opt->do_sample)
    return;
  int keep = 1;
  if (opt->num_beams > 1)
    keep = have_eos ? (int) opt->eos_token_ids->len + 1 : 2;
  if (opt->temperature != 1.0)
    hn_logits_temperature (scores, vocab, opt->temperature);
  if (opt->top_k != 0)
    hn_logits_top_k (scores, vocab, opt->top_k, keep);
  if (opt->top_p < 1.0)
    hn_logits_top_p (scores, vocab, opt->top_p, keep);
  if (!isnan (opt->min_p))
    hn_logits_min_p (scores, vocab, opt->min_p, keep);
  if (opt->typical_p < 1.0)
    hn_logits_typical (scores, vocab, opt->typical_p, keep);
  if (opt->epsilon_cutoff > 0.0 && opt->epsilon_cutoff < 1.0)
    hn_logits_epsilon (scores, vocab, opt->epsilon_cutoff, keep);
  if (opt->eta_cutoff > 0.0 && opt->eta_cutoff < 1.0)
    hn_logits_eta (scores, vocab, opt->eta_cutoff, keep);
}

static gboolean
has_ids (const GArray *a)
{
  return a && a->len > 0;
}

gboolean
hn_logits_greedy_is_argmax (const HnGenerateOptions *opt)
{
  /* min_length / min_new_tokens only suppress EOS, so they matter only when there is one */
  gboolean have_eos = has_ids (opt->eos_token_ids);
  return !opt->do_sample && opt->num_beams == 1 && opt->repetition_penalty == 1.0 && opt->no_repeat_ngram_size <= 0 &&
         !(opt->bad_words_ids && opt->bad_words_ids->len > 0) && !(have_eos && opt->min_length > 0) &&
         !(have_eos && opt->min_new_tokens > 0) && !has_ids (opt->suppress_tokens) &&
         !has_ids (opt->begin_suppress_tokens);
}
