/* The state-space decoders (engine/ssm) against transformers' slow path on
 * the tiny random fixtures of tests/fixtures/parity (made by
 * tests/fixtures/make_fixtures.py): logits of every position within 1e-4,
 * greedy ids identical, generation carrying each layer's conv and SSM state
 * (and beams reordering them) against recomputing from scratch. Every
 * registry row of an SSM family runs here. */
#include <math.h>
#include <string.h>

#include "base/hn-error.h"
#include "parity-util.h"
#include "ssm/mamba.h"
#include "transformer/transformer.h"

static HnVkContext *ctx;

/* Greedy by recomputing the whole sequence each step (no carried state). */
static GArray *
greedy_nocache (HnMamba *m, GArray *prompt, int n_new)
{
  int V = hn_mamba_get_hparams (m)->vocab;
  g_autoptr (GArray) seq = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (seq, prompt->data, prompt->len);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (int i = 0; i < n_new; i++)
    {
      g_autofree float *lg = g_new (float, (gsize) seq->len * V);
      GError *error = NULL;
      g_assert_true (hn_mamba_logits (m, (const int32_t *) seq->data, (int) seq->len, lg, &error));
      g_assert_no_error (error);
      const float *last = lg + (gsize) (seq->len - 1) * V;
      int32_t best = 0;
      for (int v = 1; v < V; v++)
        if (last[v] > last[best])
          best = v;
      g_array_append_val (seq, best);
      g_array_append_val (out, best);
    }
  return out;
}

static void
test_case (gconstpointer data)
{
  const char *name = data;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autofree char *exp_path = g_build_filename (dir, "expected.json", NULL);
  JsonObject *ex = parity_load_json (parser, exp_path);
  GError *error = NULL;
  g_autoptr (HnMamba) m = hn_mamba_load (ctx, dir, &error);
  g_assert_no_error (error);
  int V = hn_mamba_get_hparams (m)->vocab;

  g_autoptr (GArray) ids = parity_int_array (ex, "input_ids");
  g_autofree float *logits = g_new (float, (gsize) ids->len * V);
  g_assert_true (hn_mamba_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (name, logits, json_object_get_array_member (ex, "logits"), (gsize) ids->len * V);

  JsonObject *gr = json_object_get_object_member (ex, "greedy");
  g_autoptr (GArray) prompt = parity_int_array (gr, "prompt_ids");
  g_autoptr (GArray) want = parity_int_array (gr, "new_ids");
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = (int) json_object_get_int_member (gr, "max_new_tokens");
  o.min_new_tokens = (int) json_object_get_int_member (gr, "min_new_tokens");
  g_autoptr (HnGenerateResult) r =
    hn_mamba_generate (m, &o, (const int32_t *) prompt->data, (int) prompt->len, NULL, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  parity_assert_ids ("greedy with the carried state", g_ptr_array_index (r->sequences, 0), want);
  g_autoptr (GArray) nc = greedy_nocache (m, prompt, o.max_new_tokens);
  parity_assert_ids ("greedy recomputing the sequence", nc, want);

  /* beams: every row carries its own state and reordering copies the states; the best beam's score
   * must be what a recomputation of its whole sequence gives */
  o.num_beams = 3;
  o.max_new_tokens = o.min_new_tokens = 6;
  g_autoptr (HnGenerateResult) rb =
    hn_mamba_generate (m, &o, (const int32_t *) prompt->data, (int) prompt->len, NULL, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  GArray *best = g_ptr_array_index (rb->sequences, 0);
  g_assert_cmpuint (best->len, ==, 6);
  /* its score: the sum of its tokens' log-probabilities / the new length (length_penalty 1) */
  g_autoptr (GArray) seq = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (seq, prompt->data, prompt->len);
  g_array_append_vals (seq, best->data, best->len);
  g_autofree float *lg = g_new (float, (gsize) seq->len * V);
  g_assert_true (hn_mamba_logits (m, (const int32_t *) seq->data, (int) seq->len, lg, &error));
  double sum = 0;
  for (guint t = 0; t < best->len; t++)
    {
      const float *row = lg + (gsize) (prompt->len - 1 + t) * V;
      double mx = row[0], z = 0;
      for (int v = 1; v < V; v++)
        mx = MAX (mx, row[v]);
      for (int v = 0; v < V; v++)
        z += exp (row[v] - mx);
      sum += row[g_array_index (best, int32_t, t)] - mx - log (z);
    }
  double want_score = sum / best->len;
  g_assert_cmpfloat_with_epsilon (g_array_index (rb->scores, double, 0), want_score, 1e-4);
  hn_generate_options_clear (&o);
}

/* What does not apply to a state-space model fails closed by name. */
static void
test_fail_closed (void)
{
  g_autofree char *dir = parity_fixture_dir ("mamba");
  GError *error = NULL;
  g_autoptr (HnTransformer) t = hn_transformer_load (ctx, dir, &error);
  g_assert_null (t);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "state-space"));
  g_clear_error (&error);
  const HnArchInfo *a = hn_arch_lookup ("mamba", &error);
  g_assert_no_error (error);
  g_assert_true (hn_arch_is_ssm (a));
  g_assert_false (hn_arch_require_task (a, HN_TASK_TRAIN, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_null (hn_arch_lookup ("zamba", &error)); /* its shared attention block: not built */
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "zamba"));
  g_clear_error (&error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  GError *error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      g_clear_error (&error);
      return 1;
    }
  gsize n_arch;
  const HnArchInfo *arch = hn_arch_list (&n_arch);
  for (gsize i = 0; i < n_arch; i++)
    if ((arch[i].tasks & HN_TASK_LOGITS) && hn_arch_is_ssm (&arch[i]))
      {
        g_assert_nonnull (arch[i].fixture);
        g_autofree char *path = g_strdup_printf ("/ssm/parity/%s", arch[i].fixture);
        g_test_add_data_func (path, arch[i].fixture, test_case);
      }
  g_test_add_func ("/ssm/fail-closed", test_fail_closed);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
