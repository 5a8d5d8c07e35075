/* Generation policies on a CPU fake model: every logits processor against
 * values worked out from transformers' definitions, the greedy/sampling loop
 * with its stopping criteria, and beam search. */
#include "generate/generate.h"
#include "generate/logits-process.h"
#include "generate/sampler.h"
#include "base/hn-error.h"

#include <math.h>
#include <string.h>

static void
logs_of (float *s, const double *p, int n)
{
  for (int i = 0; i < n; i++)
    s[i] = (float) log (p[i]);
}

static void
assert_removed (const float *s, int n, const int *removed)
{
  for (int i = 0; i < n; i++)
    {
      if (removed[i])
        g_assert_true (isinf (s[i]) && s[i] < 0);
      else
        g_assert_true (isfinite (s[i]));
    }
}

static const double P4[4] = { 0.5, 0.3, 0.15, 0.05 };

static void
test_repetition_penalty (void)
{
  float s[4] = { 2, -2, 1, 3 };
  int32_t ids[] = { 0, 1, 1 };
  hn_logits_repetition_penalty (s, 4, ids, 3, 2.0);
  g_assert_cmpfloat (s[0], ==, 1.0f);
  g_assert_cmpfloat (s[1], ==, -4.0f); /* once, although 1 appears twice */
  g_assert_cmpfloat (s[2], ==, 1.0f);
  g_assert_cmpfloat (s[3], ==, 3.0f);
}

static void
test_no_repeat_ngram (void)
{
  float s[5] = { 0, 0, 0, 0, 0 };
  int32_t ids[] = { 1, 2, 3, 1 };
  hn_logits_no_repeat_ngram (s, 5, ids, 4, 2);
  int rm[5] = { 0, 0, 1, 0, 0 };
  assert_removed (s, 5, rm);
  /* 3-grams: prefix (3,1) never seen before */
  float t[5] = { 0 };
  hn_logits_no_repeat_ngram (t, 5, ids, 4, 3);
  int none[5] = { 0 };
  assert_removed (t, 5, none);
  /* too short to form an n-gram: nothing banned */
  float u[5] = { 0 };
  hn_logits_no_repeat_ngram (u, 5, ids, 2, 4);
  assert_removed (u, 5, none);
}

static GArray *
ids_of (int n, const int32_t *v)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (a, v, (guint) n);
  return a;
}

static void
test_bad_words (void)
{
  g_autoptr (GPtrArray) bad = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_ptr_array_add (bad, ids_of (1, (int32_t[]) { 3 }));        /* an EOS: ignored */
  g_ptr_array_add (bad, ids_of (1, (int32_t[]) { 4 }));        /* always banned */
  g_ptr_array_add (bad, ids_of (2, (int32_t[]) { 1, 2 }));     /* banned after 1 */
  g_ptr_array_add (bad, ids_of (3, (int32_t[]) { 0, 0, 0 }));  /* longer than the input: skipped */
  g_autoptr (GArray) eos = ids_of (1, (int32_t[]) { 3 });
  float s[5] = { 0 };
  int32_t ids[] = { 0, 1 };
  hn_logits_bad_words (s, 5, ids, 2, bad, eos);
  int rm[5] = { 0, 0, 1, 0, 1 };
  assert_removed (s, 5, rm);
  float t[5] = { 0 };
  int32_t ids2[] = { 1, 0 };
  hn_logits_bad_words (t, 5, ids2, 2, bad, eos);
  int rm2[5] = { 0, 0, 0, 0, 1 };
  assert_removed (t, 5, rm2);
}

static void
test_top_k (void)
{
  float s[5] = { 1, 3, 2, 3, 0 };
  hn_logits_top_k (s, 5, 2, 1);
  int rm[5] = { 1, 0, 1, 0, 1 }; /* ties at the threshold stay */
  assert_removed (s, 5, rm);
  float t[5] = { 1, 3, 2, 3, 0 };
  hn_logits_top_k (t, 5, 1, 3); /* min_tokens_to_keep wins */
  int rm2[5] = { 1, 0, 0, 0, 1 };
  assert_removed (t, 5, rm2);
}

static void
test_top_p (void)
{
  float s[4];
  logs_of (s, P4, 4);
  hn_logits_top_p (s, 4, 0.75, 1); /* ascending cumsum .05 .2 .5 1: remove <= .25 */
  int rm[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm);
  logs_of (s, P4, 4);
  hn_logits_top_p (s, 4, 0.1, 1); /* only the top survives */
  int rm2[4] = { 0, 1, 1, 1 };
  assert_removed (s, 4, rm2);
  logs_of (s, P4, 4);
  hn_logits_top_p (s, 4, 0.1, 2);
  int rm3[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm3);
}

static void
test_min_p (void)
{
  float s[4];
  logs_of (s, P4, 4);
  hn_logits_min_p (s, 4, 0.2, 1); /* threshold 0.1 */
  int rm[4] = { 0, 0, 0, 1 };
  assert_removed (s, 4, rm);
  logs_of (s, P4, 4);
  hn_logits_min_p (s, 4, 0.9, 2);
  int rm2[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm2);
}

static void
test_typical (void)
{
  /* entropy 1.1422; |−log p − H| = .449 .062 .755 1.854; sorted cumsum .3 .8 .95 1 */
  float s[4];
  logs_of (s, P4, 4);
  hn_logits_typical (s, 4, 0.9, 1);
  int rm[4] = { 0, 0, 0, 1 };
  assert_removed (s, 4, rm);
  logs_of (s, P4, 4);
  hn_logits_typical (s, 4, 0.5, 1);
  int rm2[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm2);
}

static void
test_epsilon_eta (void)
{
  float s[4];
  logs_of (s, P4, 4);
  hn_logits_epsilon (s, 4, 0.2, 1);
  int rm[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm);
  /* eta = min(0.2, sqrt(0.2) * exp(-1.1422)) = 0.1427: only 0.05 goes */
  logs_of (s, P4, 4);
  hn_logits_eta (s, 4, 0.2, 1);
  int rm2[4] = { 0, 0, 0, 1 };
  assert_removed (s, 4, rm2);
  /* everything below epsilon: the top min_tokens_to_keep survive */
  logs_of (s, P4, 4);
  hn_logits_epsilon (s, 4, 0.9, 2);
  int rm3[4] = { 0, 0, 1, 1 };
  assert_removed (s, 4, rm3);
}

static void
test_process_order (void)
{
  /* greedy: warpers are not applied even when set */
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.top_k = 1;
  o.temperature = 0.5;
  float s[4];
  logs_of (s, P4, 4);
  int32_t ids[] = { 0 };
  hn_logits_process (&o, s, 4, ids, 1, 1);
  g_assert_cmpfloat_with_epsilon (s[1], (float) log (0.3), 1e-6);
  /* sampling: temperature then top-k */
  o.do_sample = TRUE;
  logs_of (s, P4, 4);
  hn_logits_process (&o, s, 4, ids, 1, 1);
  g_assert_cmpfloat_with_epsilon (s[0], (float) log (0.5) / 0.5f, 1e-5);
  g_assert_true (isinf (s[1]));
  /* min_new_tokens masks EOS until enough tokens exist */
  hn_generate_options_clear (&o);
  hn_generate_options_init (&o);
  g_array_append_val (o.eos_token_ids, (int32_t) { 2 });
  o.min_new_tokens = 2;
  logs_of (s, P4, 4);
  int32_t ids3[] = { 0, 1, 1 };
  hn_logits_process (&o, s, 4, ids3, 2, 1); /* one new token so far */
  g_assert_true (isinf (s[2]));
  logs_of (s, P4, 4);
  hn_logits_process (&o, s, 4, ids3, 3, 1);
  g_assert_true (isfinite (s[2]));
  hn_generate_options_clear (&o);
}

static void
test_rng (void)
{
  HnRng a, b;
  hn_rng_seed (&a, 42);
  hn_rng_seed (&b, 42);
  for (int i = 0; i < 100; i++)
    g_assert_cmpuint (hn_rng_next (&a), ==, hn_rng_next (&b));
  hn_rng_seed (&b, 43);
  g_assert_cmpuint (hn_rng_next (&a), !=, hn_rng_next (&b));
  /* frequencies follow softmax */
  float s[3];
  logs_of (s, (double[]) { 0.5, 0.3, 0.2 }, 3);
  int counts[3] = { 0 };
  for (int i = 0; i < 20000; i++)
    counts[hn_sample_categorical (&a, s, 3)]++;
  g_assert_cmpfloat (fabs (counts[0] / 20000.0 - 0.5), <, 0.02);
  g_assert_cmpfloat (fabs (counts[1] / 20000.0 - 0.3), <, 0.02);
  g_assert_cmpfloat (fabs (counts[2] / 20000.0 - 0.2), <, 0.02);
  /* -inf never drawn, without replacement yields distinct indices */
  float t[4] = { 0, -INFINITY, 0, 0 };
  int out[4];
  int got = hn_sample_without_replacement (&a, t, 4, 4, out);
  g_assert_cmpint (got, ==, 3);
  g_assert_true (out[0] != 1 && out[1] != 1 && out[2] != 1);
  g_assert_true (out[0] != out[1] && out[1] != out[2] && out[0] != out[2]);
}

/* A Markov fake model: next-token probabilities depend on the last token only. */
#define FV 4 /* 0 = EOS, 1 = "a", 2 = "b", 3 = "c" */
typedef struct {
  double table[FV][FV];
  int n_rows;
  int32_t last[8];
  int calls;
} Fake;

static void
fake_logits (Fake *f, int32_t last, float *out)
{
  for (int t = 0; t < FV; t++)
    out[t] = (float) log (f->table[last][t]);
}

static gboolean
fake_reset (gpointer self, int n_rows, GError **error)
{
  Fake *f = self;
  f->n_rows = n_rows;
  for (int i = 0; i < n_rows; i++)
    f->last[i] = -1;
  return TRUE;
}

static gboolean
fake_prefill (gpointer self, int row, const int32_t *ids, int n, float *logits, GError **error)
{
  Fake *f = self;
  f->last[row] = ids[n - 1];
  f->calls++;
  fake_logits (f, ids[n - 1], logits);
  return TRUE;
}

static gboolean
fake_decode (gpointer self, int n, const int *rows, const int32_t *tokens, float *logits, GError **error)
{
  Fake *f = self;
  for (int i = 0; i < n; i++)
    {
      f->last[rows[i]] = tokens[i];
      fake_logits (f, tokens[i], logits + (gsize) i * FV);
    }
  f->calls++;
  return TRUE;
}

static gboolean
fake_reorder (gpointer self, int n_rows, const int *src, GError **error)
{
  Fake *f = self;
  int32_t tmp[8];
  for (int i = 0; i < n_rows; i++)
    tmp[i] = f->last[src[i]];
  memcpy (f->last, tmp, sizeof (int32_t) * (gsize) n_rows);
  return TRUE;
}

static const HnLmOps fake_ops = { fake_reset, fake_prefill, fake_decode, fake_reorder };

static char *
fake_decode_text (gpointer data, const int32_t *ids, int n)
{
  GString *s = g_string_new (NULL);
  for (int i = 0; i < n; i++)
    g_string_append (s, (const char *[]) { "</s>", "a", "b", "c" }[ids[i]]);
  return g_string_free (s, FALSE);
}

static void
collect_token (gpointer data, int32_t t)
{
  g_array_append_val ((GArray *) data, t);
}

static void
fake_init (Fake *f)
{
  memset (f, 0, sizeof *f);
  /* from "c" (the prompt): a .5, b .4, EOS .1; after a: EOS .4, a .3, b .3;
   * after b: EOS .9; greedy takes a (then EOS), beam search finds b EOS. */
  double t[FV][FV] = {
    { 0.97, 0.01, 0.01, 0.01 },
    { 0.4, 0.3, 0.29, 0.01 },
    { 0.9, 0.04, 0.03, 0.03 },
    { 0.1, 0.5, 0.3999, 0.0001 },
  };
  memcpy (f->table, t, sizeof t);
}

static void
assert_seq (GArray *a, int n, const int32_t *want)
{
  g_assert_cmpint ((int) a->len, ==, n);
  for (int i = 0; i < n; i++)
    g_assert_cmpint (g_array_index (a, int32_t, i), ==, want[i]);
}

static void
test_greedy_loop (void)
{
  Fake f;
  fake_init (&f);
  g_autoptr (GArray) streamed = g_array_new (FALSE, FALSE, sizeof (int32_t));
  HnGenerateModel m = { &fake_ops, &f, FV, fake_decode_text, NULL, collect_token, streamed };
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  g_array_append_val (o.eos_token_ids, (int32_t) { 0 });
  int32_t prompt[] = { 3 };
  GError *error = NULL;
  g_autoptr (HnGenerateResult) r = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  assert_seq (g_ptr_array_index (r->sequences, 0), 2, (int32_t[]) { 1, 0 });
  assert_seq (streamed, 2, (int32_t[]) { 1, 0 });
  g_assert_cmpstr (r->stop_reason, ==, "eos");

  /* min_new_tokens pushes EOS out; max_new_tokens stops at 3 */
  o.min_new_tokens = 3;
  o.max_new_tokens = 3;
  g_autoptr (HnGenerateResult) r2 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  assert_seq (g_ptr_array_index (r2->sequences, 0), 3, (int32_t[]) { 1, 1, 1 });
  g_assert_cmpstr (r2->stop_reason, ==, "max_length");

  /* repetition penalty 3: a->a (.3) falls below a->b (.29); after b, c is penalised as a prompt token */
  o.repetition_penalty = 3.0;
  g_autoptr (HnGenerateResult) r3 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  assert_seq (g_ptr_array_index (r3->sequences, 0), 3, (int32_t[]) { 1, 2, 1 });

  /* a stop string completed by the last token */
  o.repetition_penalty = 1.0;
  o.stop_strings = g_strsplit ("aa", ",", -1);
  g_autoptr (HnGenerateResult) r4 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  assert_seq (g_ptr_array_index (r4->sequences, 0), 2, (int32_t[]) { 1, 1 });
  g_assert_cmpstr (r4->stop_reason, ==, "stop_string");

  /* the default max_length (20, prompt included) without EOS */
  hn_generate_options_clear (&o);
  hn_generate_options_init (&o);
  g_autoptr (HnGenerateResult) r5 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint ((int) ((GArray *) g_ptr_array_index (r5->sequences, 0))->len, ==, 19);
  hn_generate_options_clear (&o);
}

static void
test_sampling_seeded (void)
{
  Fake f;
  fake_init (&f);
  HnGenerateModel m = { &fake_ops, &f, FV, NULL, NULL, NULL, NULL };
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.do_sample = TRUE;
  o.max_new_tokens = 12;
  o.seed = 1234;
  int32_t prompt[] = { 3 };
  GError *error = NULL;
  g_autoptr (HnGenerateResult) a = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  g_autoptr (HnGenerateResult) b = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  GArray *sa = g_ptr_array_index (a->sequences, 0), *sb = g_ptr_array_index (b->sequences, 0);
  g_assert_cmpint (sa->len, ==, 12);
  g_assert_cmpmem (sa->data, sa->len * 4, sb->data, sb->len * 4);
  /* different seeds give different streams somewhere among a few tries */
  gboolean differs = FALSE;
  for (guint64 seed = 1; seed < 6 && !differs; seed++)
    {
      o.seed = seed;
      g_autoptr (HnGenerateResult) c = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
      g_assert_no_error (error);
      GArray *sc = g_ptr_array_index (c->sequences, 0);
      differs = sc->len != sa->len || memcmp (sc->data, sa->data, sa->len * 4) != 0;
    }
  g_assert_true (differs);
  /* top_k 1 sampling equals greedy */
  o.top_k = 1;
  o.max_new_tokens = 5;
  g_autoptr (HnGenerateResult) d = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  assert_seq (g_ptr_array_index (d->sequences, 0), 5, (int32_t[]) { 1, 0, 0, 0, 0 });
  hn_generate_options_clear (&o);
}

static void
test_beam (void)
{
  Fake f;
  fake_init (&f);
  HnGenerateModel m = { &fake_ops, &f, FV, NULL, NULL, NULL, NULL };
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  g_array_append_val (o.eos_token_ids, (int32_t) { 0 });
  o.num_beams = 2;
  o.num_return_sequences = 2;
  o.max_new_tokens = 6;
  int32_t prompt[] = { 3 };
  GError *error = NULL;
  g_autoptr (HnGenerateResult) r = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpint (r->n_sequences, ==, 2);
  /* b EOS: (log .4 + log .9) / 2 = -0.5108; a EOS: (log .5 + log .4) / 2 = -0.8047 */
  assert_seq (g_ptr_array_index (r->sequences, 0), 2, (int32_t[]) { 2, 0 });
  assert_seq (g_ptr_array_index (r->sequences, 1), 2, (int32_t[]) { 1, 0 });
  g_assert_cmpfloat_with_epsilon (g_array_index (r->scores, double, 0), (log (0.3999) + log (0.9)) / 2, 1e-5);
  g_assert_cmpfloat_with_epsilon (g_array_index (r->scores, double, 1), (log (0.5) + log (0.4)) / 2, 1e-5);

  /* length_penalty 0: raw sums; same order here */
  o.length_penalty = 0.0;
  o.num_return_sequences = 1;
  g_autoptr (HnGenerateResult) r2 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat_with_epsilon (g_array_index (r2->scores, double, 0), log (0.3999) + log (0.9), 1e-5);

  /* no EOS and max_new_tokens 2: the best two-token continuation by total log-prob */
  hn_generate_options_clear (&o);
  hn_generate_options_init (&o);
  o.num_beams = 3;
  o.max_new_tokens = 2;
  g_autoptr (HnGenerateResult) r3 = hn_generate_run (&m, &o, prompt, 1, NULL, &error);
  g_assert_no_error (error);
  /* candidates: b,EOS .36; a,EOS .2; c,EOS ~0; a,a .15 -> b then token 0 */
  assert_seq (g_ptr_array_index (r3->sequences, 0), 2, (int32_t[]) { 2, 0 });
  hn_generate_options_clear (&o);
}

static void
test_validate (void)
{
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  GError *error = NULL;
  g_assert_true (hn_generate_options_validate (&o, 10, &error));
  o.num_return_sequences = 2;
  g_assert_false (hn_generate_options_validate (&o, 10, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  o.num_return_sequences = 1;
  o.top_p = 1.5;
  g_assert_false (hn_generate_options_validate (&o, 10, &error));
  g_assert_nonnull (strstr (error->message, "top_p"));
  g_clear_error (&error);
  o.top_p = 1.0;
  g_array_append_val (o.eos_token_ids, (int32_t) { 10 });
  g_assert_false (hn_generate_options_validate (&o, 10, &error));
  g_assert_nonnull (strstr (error->message, "eos_token_id"));
  g_clear_error (&error);
  HnGenerateOptions c;
  hn_generate_options_copy (&c, &o);
  g_assert_cmpuint (c.eos_token_ids->len, ==, 1);
  hn_generate_options_clear (&c);
  hn_generate_options_clear (&o);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/generate/repetition-penalty", test_repetition_penalty);
  g_test_add_func ("/generate/no-repeat-ngram", test_no_repeat_ngram);
  g_test_add_func ("/generate/bad-words", test_bad_words);
  g_test_add_func ("/generate/top-k", test_top_k);
  g_test_add_func ("/generate/top-p", test_top_p);
  g_test_add_func ("/generate/min-p", test_min_p);
  g_test_add_func ("/generate/typical", test_typical);
  g_test_add_func ("/generate/epsilon-eta", test_epsilon_eta);
  g_test_add_func ("/generate/process-order", test_process_order);
  g_test_add_func ("/generate/rng", test_rng);
  g_test_add_func ("/generate/greedy-loop", test_greedy_loop);
  g_test_add_func ("/generate/sampling-seeded", test_sampling_seeded);
  g_test_add_func ("/generate/beam", test_beam);
  g_test_add_func ("/generate/validate", test_validate);
  return g_test_run ();
}
