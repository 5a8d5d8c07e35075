/* Layer-split (pipeline) inference on two or three logical devices (several
 * VkDevice on one GPU, or lavapipe in CI): greedy and beam-search tokens
 * identical to the whole model on one device, over families that differ in
 * what sits at the stage boundaries (tied head, learned positions, fused
 * gate_up, MoE, sandwich norms); the memory plan; the paths that refuse a
 * split model; the job's --device-indices. */
#include <string.h>

#include <glib/gstdio.h>

#include "base/hn-error.h"
#include "generate/generate.h"
#include "jobs/job.h"
#include "test-device.h"
#include "transformer/transformer.h"
#include "train/train-graph.h"

static char *
fixture (const char *name)
{
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", name, NULL);
}

static char *
stories (void)
{
  return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
}

static HnVkContext *
open_best (void)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *c = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  return c;
}

static HnGenerateResult *
generate (HnTransformer *m, int num_beams)
{
  g_autoptr (GError) error = NULL;
  HnGenerateOptions opt;
  hn_generate_options_init (&opt);
  opt.max_new_tokens = 12;
  opt.num_beams = num_beams;
  opt.num_return_sequences = num_beams;
  const int32_t prompt[] = { 1, 5, 9, 3, 17, 4 };
  HnGenerateResult *r = hn_transformer_generate (m, HN_KV_CACHE_CONTIGUOUS, &opt, prompt, G_N_ELEMENTS (prompt), NULL,
                                                 NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  hn_generate_options_clear (&opt);
  return r;
}

static void
assert_same (HnGenerateResult *a, HnGenerateResult *b)
{
  g_assert_cmpint (a->n_sequences, ==, b->n_sequences);
  for (int i = 0; i < a->n_sequences; i++)
    {
      GArray *x = g_ptr_array_index (a->sequences, i), *y = g_ptr_array_index (b->sequences, i);
      g_assert_cmpuint (x->len, ==, y->len);
      g_assert_cmpmem (x->data, x->len * sizeof (int32_t), y->data, y->len * sizeof (int32_t));
    }
}

/* The whole model on one device against a split over n devices. */
static void
check_split (const char *dir, guint n)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnVkContext) one = open_best ();
  g_autoptr (HnTransformer) whole = hn_transformer_load (one, dir, &error);
  g_assert_no_error (error);
  HnVkContext *ctxs[3] = { open_best (), open_best (), open_best () };
  g_autoptr (HnTransformer) split = hn_transformer_load_split (ctxs, n, dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (hn_transformer_get_n_stages (split), ==, n);
  int prev = 0;
  for (guint i = 0; i < n; i++)
    {
      int l0, l1;
      HnTransformer *st = hn_transformer_get_stage (split, i, &l0, &l1);
      g_assert_true (hn_transformer_get_context (st) == ctxs[i]);
      g_assert_cmpint (l0, ==, prev);
      g_assert_cmpint (l1, >, l0);
      prev = l1;
    }
  g_assert_cmpint (prev, ==, hn_transformer_get_hparams (whole)->n_layer);
  /* every checkpoint tensor is on exactly one stage (a tied embedding twice) */
  g_assert_cmpuint (hn_transformer_get_weight_bytes (split), >=, hn_transformer_get_weight_bytes (whole));

  g_autoptr (HnGenerateResult) g1 = generate (whole, 1);
  g_autoptr (HnGenerateResult) g2 = generate (split, 1);
  g_test_message ("%s over %u devices: %u tokens", dir, n, ((GArray *) g_ptr_array_index (g1->sequences, 0))->len);
  assert_same (g1, g2);
  g_autoptr (HnGenerateResult) b1 = generate (whole, 2); /* beams reorder the caches of every stage */
  g_autoptr (HnGenerateResult) b2 = generate (split, 2);
  assert_same (b1, b2);

  /* the paged cache serves one device */
  g_assert_null (hn_transformer_session_new (split, HN_KV_CACHE_PAGED, 1, 16, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  /* training and full logits run on one device only */
  g_assert_null (hn_train_graph_new (split, 1, 4, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  float lg[128];
  g_assert_false (hn_transformer_logits (split, (const int32_t[]) { 1 }, 1, lg, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_pointer (&split, hn_transformer_free);
  for (int i = 0; i < 3; i++)
    hn_vk_context_unref (ctxs[i]);
}

static void
test_families (void)
{
  /* gpt2: tied head (the embedding on both ends), learned positions, Conv1D;
   * phi3: fused gate_up; mixtral: MoE; gemma2: sandwich norms, soft-caps;
   * deepseek_v3: MLA (own v head dim), dense first layers; gpt_oss: attention sinks, expert biases */
  const char *names[] = { "gpt2", "llama", "phi3", "mixtral", "gemma2", "deepseek_v3", "gpt_oss", NULL };
  for (int i = 0; names[i]; i++)
    {
      g_autofree char *dir = fixture (names[i]);
      check_split (dir, 2);
    }
}

static void
test_stories_three (void)
{
  g_autofree char *dir = stories ();
  check_split (dir, 2);
  check_split (dir, 3);
}

static void
test_plan (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = stories (); /* 5 layers */
  int first[4];
  guint64 bytes[3];
  guint64 even[2] = { 1ull << 40, 1ull << 40 };
  g_assert_true (hn_transformer_plan_split (dir, even, 2, first, bytes, &error));
  g_assert_no_error (error);
  g_assert_cmpint (first[0], ==, 0);
  g_assert_cmpint (first[2], ==, 5);
  int even_split = first[1];
  /* a device with three times the memory takes more layers */
  guint64 big_first[2] = { 3ull << 40, 1ull << 40 };
  g_assert_true (hn_transformer_plan_split (dir, big_first, 2, first, bytes, &error));
  g_assert_cmpint (first[1], >, even_split);
  g_assert_cmpuint (bytes[0], >, bytes[1]);
  /* too little memory: the error names the layers and the device */
  guint64 tiny[2] = { 1000, 1000 };
  g_assert_false (hn_transformer_plan_split (dir, tiny, 2, first, bytes, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_OUT_OF_MEMORY);
  g_assert_nonnull (strstr (error->message, "layers"));
  g_clear_error (&error);
  /* more devices than layers */
  guint64 many[6] = { 1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40 };
  int f7[7];
  guint64 b6[6];
  g_assert_false (hn_transformer_plan_split (dir, many, 6, f7, b6, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
}

static char *
run_generate (const char *flag, const char *devices, const char *out)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = stories ();
  const char *argv[] = { "transformer-generate", "--model-path", dir, "--prompt", "Once upon a time",
                         "--max-new-tokens", "16", "--output-json", out, flag, devices, NULL };
  g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (G_N_ELEMENTS (argv) - 1, argv, &error);
  g_assert_no_error (error);
  g_assert_true (hn_job_spec_validate (spec, &error));
  g_autoptr (HnJob) job = hn_job_new (spec);
  g_assert_true (hn_job_run_sync (job, &error));
  g_assert_no_error (error);
  /* the tokens and texts (the file also has timings) */
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_file (p, out, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  g_autofree char *seqs = json_to_string (json_object_get_member (o, "sequences"), FALSE);
  g_autofree char *texts = json_to_string (json_object_get_member (o, "texts"), FALSE);
  return g_strconcat (seqs, texts, NULL);
}

static void
test_job (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *tmp = g_dir_make_tmp ("hn-pipeline-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *o1 = g_build_filename (tmp, "one.json", NULL), *o2 = g_build_filename (tmp, "two.json", NULL);
  g_autofree char *one = run_generate ("--device-index", "0", o1);
  g_autofree char *two = run_generate ("--device-indices", "0,0", o2);
  g_assert_cmpstr (one, ==, two);
  g_remove (o1);
  g_remove (o2);
  g_rmdir (tmp);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  if (!hn_test_have_vulkan ())
    return 77;
  g_test_add_func ("/pipeline/families", test_families);
  g_test_add_func ("/pipeline/stories-2-and-3", test_stories_three);
  g_test_add_func ("/pipeline/plan", test_plan);
  g_test_add_func ("/pipeline/job", test_job);
  return g_test_run ();
}
