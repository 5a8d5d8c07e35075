/* Parity with transformers 5.17: every decoder family's fixture
 * (tests/fixtures/parity/<case>) gives the same logits at atol/rtol 1e-4 in
 * f32, the same greedy ids with and without the KV cache, and the same beam;
 * the real stories260K model generates expected-greedy-ids.txt from BOS. */
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "transformer/transformer.h"
#include "parity-util.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static HnVkContext *ctx;

/* stories260K's greedy story from BOS, as transformers generates it (81 ids). */
static GArray *
story_ids (const char *dir)
{
  g_autofree char *ids_path = g_build_filename (dir, "expected-greedy-ids.txt", NULL);
  g_autofree char *text = NULL;
  GError *error = NULL;
  g_assert_true (g_file_get_contents (ids_path, &text, NULL, &error));
  g_assert_no_error (error);
  g_auto (GStrv) parts = g_strsplit_set (g_strstrip (text), " \n\t", -1);
  GArray *want = g_array_new (FALSE, FALSE, sizeof (int32_t));
  for (char **p = parts; *p; p++)
    if (**p)
      {
        int32_t v = (int32_t) g_ascii_strtoll (*p, NULL, 10);
        g_array_append_val (want, v);
      }
  return want;
}

static void
test_case (gconstpointer data)
{
  const char *name = data;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autofree char *exp_path = g_build_filename (dir, "expected.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *exp = parity_load_json (parser, exp_path);
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);

  /* logits of the 11 input ids */
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  g_autofree float *logits = g_new (float, (gsize) ids->len * hp->vocab);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (name, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * hp->vocab);

  /* greedy, with and without the KV cache */
  JsonObject *gr = json_object_get_object_member (exp, "greedy");
  g_autoptr (GArray) prompt = parity_int_array (gr, "prompt_ids");
  g_autoptr (GArray) want = parity_int_array (gr, "new_ids");
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = (int) json_object_get_int_member (gr, "max_new_tokens");
  o.min_new_tokens = (int) json_object_get_int_member (gr, "min_new_tokens");
  static const HnKvCacheMode modes[] = { HN_KV_CACHE_CONTIGUOUS, HN_KV_CACHE_NONE, HN_KV_CACHE_PAGED };
  for (gsize mode = 0; mode < G_N_ELEMENTS (modes); mode++)
    {
      HnKvCacheMode cm = modes[mode];
      g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, cm, &o, (const int32_t *) prompt->data,
                                                                (int) prompt->len, NULL, NULL, NULL, NULL, NULL, &error);
      if (cm == HN_KV_CACHE_PAGED && (hp->alibi || hp->layer_mixer))
        {
          /* ALiBi has no paged kernel, a hybrid's recurrent state no pages: they fail closed, naming the reason */
          g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
          g_assert_nonnull (strstr (error->message, hp->alibi ? "ALiBi" : "recurrent state"));
          g_clear_error (&error);
          continue;
        }
      g_assert_no_error (error);
      parity_assert_ids (hn_kv_cache_mode_name (cm), g_ptr_array_index (r->sequences, 0), want);
      /* plain greedy with the contiguous cache runs on the device, only ids coming back */
      g_assert_cmpint (r->device_greedy, ==, cm == HN_KV_CACHE_CONTIGUOUS);
    }
  hn_generate_options_clear (&o);

  /* beam search */
  if (json_object_has_member (exp, "beam"))
    {
      JsonObject *b = json_object_get_object_member (exp, "beam");
      g_autoptr (GArray) bp = parity_int_array (b, "prompt_ids");
      g_autoptr (GArray) bw = parity_int_array (b, "new_ids");
      parity_beam_options (b, &o);
      g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, HN_KV_CACHE_CONTIGUOUS, &o, (const int32_t *) bp->data,
                                                                (int) bp->len, NULL, NULL, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      parity_assert_ids ("beam", g_ptr_array_index (r->sequences, 0), bw);
      g_assert_cmpfloat_with_epsilon (g_array_index (r->scores, double, 0),
                                      json_object_get_double_member (b, "sequence_score"), 1e-4);
      hn_generate_options_clear (&o);
    }
}

static void
test_stories (void)
{
  const char *shared = g_getenv ("HN_SHARED_DIR");
  g_autofree char *dir = g_build_filename (shared, "models", "stories260K", NULL);
  GError *error = NULL;
  g_autoptr (GArray) want = story_ids (dir);
  g_assert_cmpuint (want->len, ==, 81);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);

  /* logits of the first 8 positions against transformers */
  g_autofree char *lp = parity_fixture_dir ("stories260K_logits.json");
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *exp = parity_load_json (parser, lp);
  g_autoptr (GArray) in = parity_int_array (exp, "input_ids");
  g_autofree float *logits = g_new (float, (gsize) in->len * 512);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) in->data, (int) in->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits ("stories260K", logits, json_object_get_array_member (exp, "logits"), (gsize) in->len * 512);

  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = 80;
  g_autoptr (GArray) rest = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (rest, (int32_t *) want->data + 1, 80);
  static const HnKvCacheMode modes[] = { HN_KV_CACHE_CONTIGUOUS, HN_KV_CACHE_NONE, HN_KV_CACHE_PAGED };
  for (gsize mode = 0; mode < G_N_ELEMENTS (modes); mode++)
    {
      HnKvCacheMode cm = modes[mode];
      g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, cm, &o, (const int32_t *) want->data, 1, NULL, NULL,
                                                                NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      parity_assert_ids (hn_kv_cache_mode_name (cm), g_ptr_array_index (r->sequences, 0), rest);
      g_assert_cmpint (r->device_greedy, ==, cm == HN_KV_CACHE_CONTIGUOUS);
      g_test_message ("stories260K %s: %d tokens in %.3f s (%.1f tokens/s)", hn_kv_cache_mode_name (cm),
                      r->n_generated, r->seconds, r->n_generated / MAX (r->seconds, 1e-9));
    }
  hn_generate_options_clear (&o);

  /* greedy on the device (recorded step replayed, only ids downloaded), after a prompt of 3 */
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 1, 80, &error);
  g_assert_no_error (error);
  const HnLmOps *ops = hn_transformer_session_lm_ops ();
  g_autofree float *lg = g_new (float, 512);
  int32_t picks[77];
  g_assert_true (ops->reset (s, 1, &error) && ops->prefill (s, 0, (const int32_t *) want->data, 3, lg, &error));
  g_assert_no_error (error);
  g_assert_true (hn_transformer_session_decode_greedy (s, g_array_index (want, int32_t, 3), 40, picks, &error));
  g_assert_no_error (error);
  g_assert_true (hn_transformer_session_decode_greedy (s, picks[39], 37, picks + 40, &error));
  g_assert_no_error (error);
  for (int i = 0; i < 77; i++)
    g_assert_cmpint (picks[i], ==, g_array_index (want, int32_t, 4 + i));
  /* the context is full: one more step fails closed */
  g_assert_false (hn_transformer_session_decode_greedy (s, picks[76], 1, picks, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
}

static void
collect_token (gpointer data, int32_t token)
{
  g_array_append_val ((GArray *) data, token);
}

/* Greedy generation through the device loop (contiguous cache) and the host loop (paged cache,
 * and a no-op repetition penalty that still keeps the host path): same ids, same streamed
 * tokens, same stop reason. */
static void
check_device_greedy (HnTransformer *m, const HnGenerateOptions *o, const int32_t *prompt, int n_prompt, GArray *want,
                     const char *reason)
{
  GError *error = NULL;
  static const HnKvCacheMode modes[] = { HN_KV_CACHE_CONTIGUOUS, HN_KV_CACHE_PAGED, HN_KV_CACHE_CONTIGUOUS };
  for (gsize i = 0; i < G_N_ELEMENTS (modes); i++)
    {
      HnGenerateOptions oi;
      hn_generate_options_copy (&oi, o);
      if (i == 2)
        oi.repetition_penalty = 1.0 + 1e-9; /* any processor keeps the host path */
      g_autoptr (GArray) streamed = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, modes[i], &oi, prompt, n_prompt, NULL, NULL,
                                                                collect_token, streamed, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpint (r->device_greedy, ==, i == 0);
      parity_assert_ids ("device greedy", g_ptr_array_index (r->sequences, 0), want);
      parity_assert_ids ("streamed", streamed, want);
      g_assert_cmpint (r->n_generated, ==, (int) want->len);
      g_assert_cmpstr (r->stop_reason, ==, reason);
      hn_generate_options_clear (&oi);
    }
}

/* The device-greedy loop of hn_generate_run stops exactly where the host loop does: an EOS in
 * the middle of a chunk, max_new_tokens that is not a multiple of the chunk. */
static void
test_device_greedy_stops (void)
{
  g_autofree char *dir = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  g_autoptr (GArray) story = story_ids (dir);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const int32_t *ids = (const int32_t *) story->data;
  HnGenerateOptions o;
  hn_generate_options_init (&o);

  /* 37 new tokens from a prompt of 2: one host step, a chunk of 32, then 4 */
  o.max_new_tokens = 37;
  g_autoptr (GArray) want = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (want, ids + 2, 37);
  check_device_greedy (m, &o, ids, 2, want, "max_length");

  /* EOS: the token at new position 45; it first comes at new position 39, inside the second chunk */
  int32_t eos = ids[2 + 45];
  int stop = 0;
  while (ids[2 + stop] != eos)
    stop++;
  g_assert_cmpint (stop, >, 33); /* past the first chunk, inside the second */
  g_assert_cmpint (stop % 32, !=, 0);
  o.max_new_tokens = 70;
  o.eos_token_ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_val (o.eos_token_ids, eos);
  g_array_set_size (want, 0);
  g_array_append_vals (want, ids + 2, (guint) stop + 1);
  check_device_greedy (m, &o, ids, 2, want, "eos");

  /* min_new_tokens past that EOS suppresses it: the host path, which then runs on */
  o.min_new_tokens = stop + 2;
  g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, HN_KV_CACHE_CONTIGUOUS, &o, ids, 2, NULL, NULL, NULL,
                                                            NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_false (r->device_greedy);
  g_assert_cmpint (r->n_generated, >, stop + 1);
  hn_generate_options_clear (&o);
}

/* A prompt longer than the prefill chunk runs in several forwards with the same result. */
static void
test_chunked_prefill (void)
{
  g_autofree char *dir = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  g_autoptr (GArray) want = story_ids (dir);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = 10;
  static const HnKvCacheMode modes[] = { HN_KV_CACHE_CONTIGUOUS, HN_KV_CACHE_NONE, HN_KV_CACHE_PAGED };
  for (gsize mode = 0; mode < G_N_ELEMENTS (modes); mode++)
    {
      HnKvCacheMode cm = modes[mode];
      g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, cm, 1, 40, &error);
      g_assert_no_error (error);
      g_assert_true (hn_transformer_session_set_prefill_chunk (s, 7, &error));
      HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, 512, NULL, NULL, NULL, NULL };
      g_autoptr (HnGenerateResult) r = hn_generate_run (&gm, &o, (const int32_t *) want->data, 23, NULL, &error);
      g_assert_no_error (error);
      g_autoptr (GArray) rest = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_array_append_vals (rest, (int32_t *) want->data + 23, 10);
      parity_assert_ids ("chunked", g_ptr_array_index (r->sequences, 0), rest);
      g_assert_false (hn_transformer_session_set_prefill_chunk (s, 0, &error));
      g_clear_error (&error);
    }
  hn_generate_options_clear (&o);
}

typedef struct {
  int n_done;
  int order[8];
} Finished;

static void
on_finished (gpointer data, int request, const HnGenerateResult *r)
{
  Finished *f = data;
  f->order[f->n_done++] = request;
}

/* Continuous batching over the paged cache: each request's ids equal its own run on the
 * contiguous cache, for prompts of different lengths that finish at different times (EOS is a
 * token the greedy story repeats), with a pool too small for every request at once (the queue
 * waits for pages) and with sampling. */
static void
test_continuous_batching (void)
{
  g_autofree char *dir = g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  GError *error = NULL;
  g_autoptr (GArray) want = story_ids (dir);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  static const int lens[] = { 1, 20, 8, 33, 3, 14 };
  g_autoptr (GPtrArray) prompts = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (gsize i = 0; i < G_N_ELEMENTS (lens); i++)
    {
      GArray *p = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_array_append_vals (p, want->data, (guint) lens[i]);
      g_ptr_array_add (prompts, p);
    }
  for (int sample = 0; sample < 2; sample++)
    {
      HnGenerateOptions o;
      hn_generate_options_init (&o);
      o.max_new_tokens = 40;
      int32_t eos = 426;
      g_array_append_val (o.eos_token_ids, eos);
      o.do_sample = sample;
      o.temperature = 1.3;
      o.seed = 7;
      /* 3 requests at once in 8 pages: requests of 3-5 pages each wait for one another */
      g_autoptr (HnTransformerSession) s = hn_transformer_session_new_paged (m, 3, 80, 8, &error);
      g_assert_no_error (error);
      HnGenerateModel gm = { hn_transformer_session_lm_ops (), s, 512, NULL, NULL, NULL, NULL };
      HnBatchOptions bo = { 3, hn_transformer_session_get_n_pages (s), HN_KV_PAGE_SIZE, 0 };
      HnBatchStats st;
      Finished fin = { 0 };
      g_autoptr (GPtrArray) res = hn_generate_batch_run (&gm, &o, &bo, prompts, on_finished, &fin, &st, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (res->len, ==, prompts->len);
      g_assert_cmpint (fin.n_done, ==, (int) prompts->len);
      g_assert_cmpint (hn_transformer_session_get_free_pages (s), ==, 8); /* every page came back */
      g_test_message ("%s: %d rounds for %" G_GINT64_FORMAT " tokens, up to %d active, %d waits for pages, finish order "
                      "%d %d %d %d %d %d", sample ? "sampling" : "greedy", st.rounds, st.n_generated, st.max_active,
                      st.page_waits, fin.order[0], fin.order[1], fin.order[2], fin.order[3], fin.order[4], fin.order[5]);
      g_assert_cmpint (st.page_waits, >, 0);
      g_assert_cmpint (st.max_active, >=, 2);
      g_assert_cmpint (st.rounds, <, st.n_generated - (gint64) prompts->len);
      gboolean in_order = TRUE;
      for (int i = 0; i < fin.n_done; i++)
        in_order = in_order && fin.order[i] == i;
      g_assert_false (in_order); /* shorter continuations overtake earlier requests */
      for (guint i = 0; i < prompts->len; i++)
        {
          HnGenerateResult *r = g_ptr_array_index (res, i);
          g_autoptr (GArray) expect = g_array_new (FALSE, FALSE, sizeof (int32_t));
          if (!sample)
            {
              /* greedy: the contiguous cache continues a prefix of the greedy story with the story
               * itself (test_stories), up to the next EOS */
              for (guint j = (guint) lens[i]; j < want->len && expect->len < 40; j++)
                {
                  g_array_append_val (expect, g_array_index (want, int32_t, j));
                  if (g_array_index (want, int32_t, j) == eos)
                    break;
                }
            }
          else
            {
              GArray *p = g_ptr_array_index (prompts, i);
              g_autoptr (HnGenerateResult) one = hn_transformer_generate (m, HN_KV_CACHE_CONTIGUOUS, &o,
                                                                          (const int32_t *) p->data, (int) p->len,
                                                                          NULL, NULL, NULL, NULL, NULL, &error);
              g_assert_no_error (error);
              GArray *seq = g_ptr_array_index (one->sequences, 0);
              g_array_append_vals (expect, seq->data, seq->len);
            }
          parity_assert_ids ("continuous batching", g_ptr_array_index (r->sequences, 0), expect);
        }
      /* beams and several returned sequences per request fail closed */
      o.num_beams = 2;
      g_assert_null (hn_generate_batch_run (&gm, &o, &bo, prompts, NULL, NULL, NULL, NULL, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_clear_error (&error);
      hn_generate_options_clear (&o);
    }
}

static void
test_fail_closed (void)
{
  GError *error = NULL;
  /* a paged session needs pages, and beam search reorders rows, which the paged cache does not */
  g_autofree char *dir = parity_fixture_dir ("llama");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_assert_null (hn_transformer_session_new_paged (m, 1, 16, 0, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.num_beams = 2;
  o.max_new_tokens = 3;
  g_assert_null (hn_transformer_generate (m, HN_KV_CACHE_PAGED, &o, (const int32_t[]) { 1, 2 }, 2, NULL, NULL, NULL,
                                          NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "beam"));
  g_clear_error (&error);
  hn_generate_options_clear (&o);
  /* an architecture without a graph here names itself */
  g_autofree char *moe = parity_fixture_dir ("mamba-does-not-exist");
  g_assert_null (hn_transformer_load (ctx, moe, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  /* configurations without a graph here: phimoe's sparsemixer picks exactly 2 experts; dbrx's router
   * is built for the 1-norm only */
  g_autofree char *tmp = g_dir_make_tmp ("hn-parity-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *cfg = g_build_filename (tmp, "config.json", NULL);
  static const char *const configs[][2] = {
    { "{\"model_type\":\"phimoe\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":1,"
      "\"num_attention_heads\":2,\"num_local_experts\":4,\"num_experts_per_tok\":3}",
      "num_experts_per_tok other than 2" },
    { "{\"model_type\":\"dbrx\",\"vocab_size\":16,\"d_model\":8,\"n_layers\":1,\"n_heads\":2,\"ffn_config\":"
      "{\"ffn_hidden_size\":8,\"moe_num_experts\":4,\"moe_top_k\":2,\"moe_normalize_expert_weights\":2.0}}",
      "moe_normalize_expert_weights other than 1" },
    /* issue 25: differential attention pairs whole KV heads; jetmoe's heads are KV heads x experts per
     * token; modernbert-decoder's global/local pattern comes from layer_types */
    { "{\"model_type\":\"diffllama\",\"vocab_size\":16,\"hidden_size\":24,\"num_hidden_layers\":1,"
      "\"num_attention_heads\":6,\"num_key_value_heads\":3}",
      "an odd KV head count" },
    { "{\"model_type\":\"jetmoe\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":1,"
      "\"num_attention_heads\":2,\"num_key_value_heads\":2,\"kv_channels\":4,\"num_local_experts\":4,"
      "\"num_experts_per_tok\":2}",
      "num_key_value_heads * num_experts_per_tok" },
    { "{\"model_type\":\"modernbert-decoder\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":1,"
      "\"num_attention_heads\":2}",
      "without layer_types" },
    /* Glm4vTextAttention's heads are hidden / heads while its rotary reads head_dim */
    { "{\"model_type\":\"glm4v_text\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":1,"
      "\"num_attention_heads\":2,\"head_dim\":8}",
      "head_dim other than hidden_size / num_attention_heads" },
    /* gemma4_unified_text: K/V sharing across layers, values from k_proj and bidirectional attention
     * are not built (the gemma4_unified_text fixture runs the rest) */
    { "{\"model_type\":\"gemma4_unified_text\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":2,"
      "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"num_kv_shared_layers\":1}",
      "num_kv_shared_layers" },
    { "{\"model_type\":\"gemma4_unified_text\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":2,"
      "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"attention_k_eq_v\":true}",
      "attention_k_eq_v" },
    { "{\"model_type\":\"gemma4_unified_text\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":2,"
      "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,"
      "\"use_bidirectional_attention\":\"all\"}",
      "use_bidirectional_attention" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (configs); i++)
    {
      g_assert_true (g_file_set_contents (cfg, configs[i][0], -1, &error));
      g_assert_null (hn_transformer_load (ctx, tmp, &error));
      g_assert_nonnull (error);
      g_test_message ("%s", error->message);
      g_assert_nonnull (strstr (error->message, configs[i][1]));
      g_clear_error (&error);
    }
  g_assert_cmpint (g_remove (cfg), ==, 0);
  g_assert_cmpint (g_rmdir (tmp), ==, 0);
  HnKvCacheMode mode;
  g_assert_false (hn_kv_cache_mode_from_string ("quantized", &mode, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
}

/* Sparse experts: one token reads only the k experts it routes to. Each expert of each layer is
 * poisoned with NaN in turn; the logits change (to NaN) for exactly k experts per layer and stay
 * bit-identical for the rest, which the dense path (0 · NaN) could not do. */
static void
test_moe_sparse (void)
{
  GError *error = NULL;
  g_autofree char *dir = parity_fixture_dir ("mixtral");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  const HnTransformerWeights *W = hn_transformer_get_weights (m);
  int32_t id = 5;
  g_autofree float *want = g_new (float, hp->vocab), *got = g_new (float, hp->vocab);
  g_assert_true (hn_transformer_logits (m, &id, 1, want, &error));
  for (int il = 0; il < hp->n_layer; il++)
    {
      g_assert_nonnull (W->layers[il].expert_stack[0]); /* the stacked weights the sparse path reads */
      int changed = 0;
      for (int e = 0; e < hp->n_experts; e++)
        {
          HnTensor *gate = W->layers[il].experts[3 * e];
          gsize n = (gsize) gate->n;
          g_autofree float *keep = g_new (float, n), *nan = g_new (float, n);
          g_assert_true (hn_tensor_download_f32 (gate, keep, n, &error));
          for (gsize i = 0; i < n; i++)
            nan[i] = NAN;
          g_assert_true (hn_tensor_upload_raw (gate, nan, sizeof (float) * n, &error));
          g_assert_true (hn_transformer_logits (m, &id, 1, got, &error));
          g_assert_true (hn_tensor_upload_raw (gate, keep, sizeof (float) * n, &error));
          g_assert_no_error (error);
          if (memcmp (got, want, sizeof (float) * hp->vocab) != 0)
            {
              changed++;
              for (int v = 0; v < hp->vocab; v++)
                g_assert_true (isnan (got[v]));
            }
        }
      g_assert_cmpint (changed, ==, hp->n_experts_used);
    }
}

typedef void (*ConfigEdit) (JsonObject *cfg);

/* Fixture `name`'s config as `edit` leaves it, in a temporary folder beside a link to its weights
 * (or, with `weights`, beside those written there). */
static char *
config_variant (const char *name, ConfigEdit edit, HnSafetensorsWriter *weights)
{
  GError *error = NULL;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree char *st = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *o = parity_load_json (p, cfg);
  edit (o);
  char *tmp = g_dir_make_tmp ("hn-variant-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *out_cfg = g_build_filename (tmp, "config.json", NULL);
  g_autofree char *out_st = g_build_filename (tmp, "model.safetensors", NULL);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, json_parser_get_root (p));
  g_assert_true (json_generator_to_file (gen, out_cfg, &error));
  if (weights)
    g_assert_true (hn_safetensors_writer_write_file (weights, out_st, &error));
  else
    g_assert_cmpint (symlink (st, out_st), ==, 0);
  g_assert_no_error (error);
  return tmp;
}

/* rope_parameters replaced by yarn (factor 4, mscale_all_dim 1) */
static void
yarn_edit (JsonObject *o)
{
  JsonObject *rp = json_object_new ();
  json_object_set_string_member (rp, "rope_type", "yarn");
  json_object_set_double_member (rp, "rope_theta", 10000.0);
  json_object_set_double_member (rp, "factor", 4.0);
  json_object_set_double_member (rp, "mscale", 1.0);
  json_object_set_double_member (rp, "mscale_all_dim", 1.0);
  json_object_set_int_member (rp, "original_max_position_embeddings", 16);
  json_object_set_object_member (o, "rope_parameters", rp);
}

static char *
yarn_variant (const char *name)
{
  return config_variant (name, yarn_edit, NULL);
}

static void
remove_variant (char *tmp)
{
  g_autofree char *a = g_build_filename (tmp, "config.json", NULL), *b = g_build_filename (tmp, "model.safetensors", NULL);
  g_unlink (a);
  g_unlink (b);
  g_rmdir (tmp);
  g_free (tmp);
}

/* DeepSeek-V3's yarn: the softmax scale gains yarn_get_mscale(factor, mscale_all_dim)^2 (there is no
 * transformers fixture for it; the value is DeepseekV3Attention's formula), the logits stay finite;
 * deepseek_v2 with a scaled rope is refused by name. */
static void
test_deepseek_yarn (void)
{
  GError *error = NULL;
  char *v3 = yarn_variant ("deepseek_v3");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, v3, &error);
  g_assert_no_error (error);
  double ms = 0.1 * log (4.0) + 1.0;
  g_assert_cmpfloat_with_epsilon (hn_transformer_get_hparams (m)->attn_scale, 0.25 * ms * ms, 1e-6);
  int32_t ids[3] = { 3, 9, 27 };
  g_autofree float *lg = g_new (float, 3 * 128);
  g_assert_true (hn_transformer_logits (m, ids, 3, lg, &error));
  for (int i = 0; i < 3 * 128; i++)
    g_assert_true (isfinite (lg[i]));
  remove_variant (v3);
  char *v2 = yarn_variant ("deepseek_v2");
  g_assert_null (hn_transformer_load (ctx, v2, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "rope scaling"));
  g_clear_error (&error);
  remove_variant (v2);
}

static JsonArray *
int_array (int n, const int *v)
{
  JsonArray *a = json_array_new ();
  for (int i = 0; i < n; i++)
    json_array_add_int_element (a, v[i]);
  return a;
}

/* Qwen2-VL's 4.x spelling: rope_scaling {"type": "mrope", mrope_section}, rope_theta beside it */
static void
mrope_legacy_edit (JsonObject *o)
{
  json_object_remove_member (o, "rope_parameters");
  JsonObject *rs = json_object_new ();
  json_object_set_string_member (rs, "type", "mrope");
  json_object_set_array_member (rs, "mrope_section", int_array (3, (const int[]) { 1, 1, 2 }));
  json_object_set_object_member (o, "rope_scaling", rs);
  json_object_set_double_member (o, "rope_theta", 10000.0);
}

/* sections covering 3 of head_dim 8's 4 frequency pairs: cos.split(mrope_section * 2) fails */
static void
mrope_short_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_array_member (rp, "mrope_section", int_array (3, (const int[]) { 1, 1, 1 }));
}

static void
keep_config (JsonObject *o)
{
  (void) o;
}

static void
assert_fixture_logits (const char *what, const char *fixture, const char *dir)
{
  GError *error = NULL;
  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *exp = parity_load_expected (p, fixture);
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  int vocab = hn_transformer_get_hparams (m)->vocab;
  g_autofree float *logits = g_new (float, (gsize) ids->len * vocab);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (what, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * vocab);
}

/* The Qwen vision-language text models off their fixtures: Qwen2-VL's legacy "mrope" rope type is the
 * default rotation; mrope sections that do not cover the rotary dims are refused; qwen3_vl_moe's
 * experts stored as its checkpoints hold them (gate_up_proj [E, C, 2F], transposed; the fixture's
 * down_proj is square, [E, C, F] either way, so it stays) give the fixture's logits. */
static void
test_vl_text_variants (void)
{
  GError *error = NULL;
  char *legacy = config_variant ("qwen2_vl_text", mrope_legacy_edit, NULL);
  assert_fixture_logits ("qwen2_vl_text (rope_scaling type mrope)", "qwen2_vl_text", legacy);
  remove_variant (legacy);

  char *bad = config_variant ("qwen2_vl_text", mrope_short_edit, NULL);
  g_assert_null (hn_transformer_load (ctx, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "mrope_section"));
  g_clear_error (&error);
  remove_variant (bad);

  g_autofree char *dir = parity_fixture_dir ("qwen3_vl_moe_text");
  g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  guint n_transposed = 0;
  for (guint i = 0; i < hn_safetensors_get_n_tensors (st); i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_get_nth (st, i);
      if (!g_str_has_suffix (t->name, "mlp.experts.gate_up_proj"))
        {
          g_assert_true (hn_safetensors_writer_add (w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, FALSE,
                                                    &error));
          continue;
        }
      g_assert_cmpint (t->dtype, ==, HN_ST_DTYPE_F32);
      gint64 E = t->shape[0], a = t->shape[1], b = t->shape[2];
      g_assert_cmpint (a, !=, b);
      const float *src = t->data;
      g_autofree float *tr = g_new (float, (gsize) (E * a * b));
      for (gint64 e = 0; e < E; e++)
        for (gint64 r = 0; r < a; r++)
          for (gint64 c = 0; c < b; c++)
            tr[(e * b + c) * a + r] = src[(e * a + r) * b + c];
      g_assert_true (hn_safetensors_writer_add (w, t->name, t->dtype, 3, (gint64[]) { E, b, a }, tr,
                                                sizeof (float) * (gsize) (E * a * b), TRUE, &error));
      n_transposed++;
    }
  g_assert_no_error (error);
  g_assert_cmpuint (n_transposed, ==, 2);
  char *hub = config_variant ("qwen3_vl_moe_text", keep_config, w);
  assert_fixture_logits ("qwen3_vl_moe_text (gate_up_proj [E, C, 2F])", "qwen3_vl_moe_text", hub);
  remove_variant (hub);
}

/* HunYuan-VL's text model: use_qk_norm false (a key its config class does not define) leaves the
 * q/k norms, which HunYuanVLDenseV1Attention always builds; three axes [2, 1, 1] (the 3-axis layout)
 * turn text alone as the fixture's four did; the old xdrope_section name is read as mrope_section;
 * sections not covering half the head and the "xdrope" rope type (dynamic NTK-alpha) are refused. */
static void
hy_qk_off_edit (JsonObject *o)
{
  json_object_set_boolean_member (o, "use_qk_norm", FALSE);
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_array_member (rp, "mrope_section", int_array (3, (const int[]) { 2, 1, 1 }));
}

static void
hy_xdrope_section_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_remove_member (rp, "mrope_section");
  json_object_set_array_member (rp, "xdrope_section", int_array (4, (const int[]) { 1, 1, 1, 1 }));
}

static void
hy_short_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_array_member (rp, "mrope_section", int_array (4, (const int[]) { 1, 1, 1, 0 }));
}

static void
hy_xdrope_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_string_member (rp, "rope_type", "xdrope");
  json_object_set_double_member (rp, "alpha", 1000.0);
}

static void
test_hunyuan_vl_text_variants (void)
{
  GError *error = NULL;
  char *off = config_variant ("hunyuan_vl_text", hy_qk_off_edit, NULL);
  assert_fixture_logits ("hunyuan_vl_text (use_qk_norm false, 3 axes)", "hunyuan_vl_text", off);
  remove_variant (off);
  char *old = config_variant ("hunyuan_vl_text", hy_xdrope_section_edit, NULL);
  assert_fixture_logits ("hunyuan_vl_text (xdrope_section)", "hunyuan_vl_text", old);
  remove_variant (old);

  char *bad = config_variant ("hunyuan_vl_text", hy_short_edit, NULL);
  g_assert_null (hn_transformer_load (ctx, bad, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "mrope_section"));
  g_clear_error (&error);
  remove_variant (bad);

  char *xd = config_variant ("hunyuan_vl_text", hy_xdrope_edit, NULL);
  g_assert_null (hn_transformer_load (ctx, xd, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "xdrope"));
  g_clear_error (&error);
  remove_variant (xd);
}

/* Variants beyond each registered architecture's own fixture. */
static const char *const extra_cases[] = { "llama_rope_llama3", "falcon_mq", "nemotron_h_moe" };

/* ministral3 scales its queries past original_max_position_embeddings (16384 in the fixture):
 * a session that long fails closed by name; one within it runs. */
static void
test_ministral3_limit (void)
{
  g_autofree char *dir = parity_fixture_dir ("ministral3");
  GError *error = NULL;
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_transformer_get_hparams (m)->ctx_limit, ==, 16384);
  g_autoptr (HnTransformerSession) s = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 1, 16385, &error);
  g_assert_null (s);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "llama_4_scaling_beta"));
  g_clear_error (&error);
  g_autoptr (HnTransformerSession) ok = hn_transformer_session_new (m, HN_KV_CACHE_CONTIGUOUS, 1, 64, &error);
  g_assert_no_error (error);
  g_assert_nonnull (ok);
}

/* glm4v_moe_text's experts as the hub's checkpoints keep them, one gate/up/down_proj per expert (the
 * fixture has them stacked as transformers 5 saves them: gate_up_proj [E, 2F, C], down_proj [E, C, F]):
 * the same logits; qwen3_omni_moe_text's and deepseek_ocr2_text's likewise (Qwen3-Omni's and
 * DeepSeek-OCR-2's hub checkpoints keep them per expert). */
static void
moe_per_expert (const char *fixture)
{
  GError *error = NULL;
  g_autofree char *dir = parity_fixture_dir (fixture);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (dir, &error);
  g_assert_no_error (error);
  g_autofree char *tmp = g_dir_make_tmp ("hn-glmv-XXXXXX", &error);
  g_assert_no_error (error);
  g_autoptr (HnSafetensorsWriter) w = hn_safetensors_writer_new ();
  guint n_split = 0;
  for (guint t = 0; t < hn_safetensors_get_n_tensors (st); t++)
    {
      const HnSafetensorInfo *ti = hn_safetensors_get_nth (st, t);
      const char *at = strstr (ti->name, "mlp.experts.");
      if (!at)
        {
          g_assert_true (hn_safetensors_writer_add (w, ti->name, ti->dtype, ti->ndim, ti->shape, ti->data, ti->nbytes,
                                                    FALSE, &error));
          continue;
        }
      g_assert_cmpint (ti->dtype, ==, HN_ST_DTYPE_F32);
      g_assert_cmpuint (ti->ndim, ==, 3);
      gboolean gu = g_str_has_suffix (ti->name, "gate_up_proj");
      g_assert_true (gu || g_str_has_suffix (ti->name, "down_proj"));
      g_autofree char *pfx = g_strndup (ti->name, (gsize) (at - ti->name) + strlen ("mlp.experts."));
      gint64 E = ti->shape[0], R = ti->shape[1], C = ti->shape[2];
      const float *x = ti->data;
      for (gint64 e = 0; e < E; e++)
        for (int part = 0; part < (gu ? 2 : 1); part++)
          {
            /* gate_up_proj: the first half of an expert's rows gate, the second up */
            gint64 rows = gu ? R / 2 : R;
            g_autofree char *name = g_strdup_printf ("%s%" G_GINT64_FORMAT ".%s.weight", pfx, e,
                                                     !gu ? "down_proj" : part ? "up_proj" : "gate_proj");
            const float *src = x + (e * R + part * rows) * C;
            g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, 2, (gint64[]) { rows, C }, src,
                                                      (gsize) (rows * C) * sizeof (float), TRUE, &error));
          }
      n_split++;
    }
  g_assert_cmpuint (n_split, >=, 2);
  g_autofree char *out_st = g_build_filename (tmp, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, out_st, &error));
  g_assert_no_error (error);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree char *out_cfg = g_build_filename (tmp, "config.json", NULL);
  g_assert_cmpint (symlink (cfg, out_cfg), ==, 0);

  g_autoptr (JsonParser) p = json_parser_new ();
  JsonObject *exp = parity_load_expected (p, fixture);
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  HnTransformer *m = hn_transformer_load (ctx, tmp, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  g_autofree float *logits = g_new (float, (gsize) ids->len * hp->vocab);
  g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
  g_assert_no_error (error);
  g_autofree char *what = g_strdup_printf ("%s (experts per expert)", fixture);
  parity_compare_logits (what, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * hp->vocab);
  hn_transformer_free (m);
  g_assert_cmpint (g_unlink (out_st), ==, 0);
  g_assert_cmpint (g_unlink (out_cfg), ==, 0);
  g_assert_cmpint (g_rmdir (tmp), ==, 0);
}

static void
test_glm4v_moe_per_expert (void)
{
  moe_per_expert ("glm4v_moe_text");
  moe_per_expert ("qwen3_omni_moe_text");
  moe_per_expert ("deepseek_ocr2_text");
}

/* The options of the issue-25 package text models that the graph does not build fail closed by name. */
static void
rope_linear_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_string_member (rp, "rope_type", "linear");
  json_object_set_double_member (rp, "factor", 2.0);
}

static void
ernie_hw_edit (JsonObject *o)
{
  JsonObject *rp = json_object_get_object_member (o, "rope_parameters");
  json_object_set_array_member (rp, "mrope_section", int_array (3, (const int[]) { 2, 0, 2 }));
}

static void
ernie_int_ffn_edit (JsonObject *o)
{
  json_object_set_int_member (o, "moe_intermediate_size", 32);
}

static void
no_mlp_layer_types_edit (JsonObject *o)
{
  json_object_remove_member (o, "mlp_layer_types");
}

static void
group_limited_edit (JsonObject *o)
{
  json_object_set_string_member (o, "topk_method", "group_limited_greedy");
}

static void
mlp_only_edit (JsonObject *o)
{
  json_object_set_array_member (o, "mlp_only_layers", int_array (1, (const int[]) { 0 }));
}

static void
test_package_text_fail_closed (void)
{
  static const struct {
    const char *fixture;
    ConfigEdit edit;
    const char *needle;
  } cases[] = {
    { "cosmos3_edge_text", rope_linear_edit, "rope type \"linear\"" },
    { "ernie4_5_vl_moe_text", rope_linear_edit, "rope type \"linear\"" },
    { "ernie4_5_vl_moe_text", ernie_hw_edit, "(h, w)" },
    { "ernie4_5_vl_moe_text", ernie_int_ffn_edit, "[text, vision]" },
    { "deepseek_ocr2_text", no_mlp_layer_types_edit, "mlp_layer_types" },
    { "deepseek_ocr2_text", group_limited_edit, "group_limited_greedy" },
    { "qwen3_omni_moe_text", mlp_only_edit, "mlp_only_layers" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      GError *error = NULL;
      char *dir = config_variant (cases[i].fixture, cases[i].edit, NULL);
      g_assert_null (hn_transformer_load (ctx, dir, &error));
      g_assert_nonnull (error);
      if (!strstr (error->message, cases[i].needle))
        g_error ("%s: \"%s\" does not name %s", cases[i].fixture, error->message, cases[i].needle);
      g_clear_error (&error);
      remove_variant (dir);
    }
}

/* Glm4Config and Glm4MoeConfig default partial_rotary_factor to 0.5: each fixture (made with 0.5) gives
 * its logits with the fraction taken out of config.json. */
static void
test_glm_half_rotary_default (void)
{
  static const char *const cases[] = { "glm4", "glm4_moe", "glm4v_moe_text" };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      GError *error = NULL;
      g_autofree char *dir = parity_fixture_dir (cases[i]);
      g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
      g_autofree char *st = g_build_filename (dir, "model.safetensors", NULL);
      g_autoptr (JsonParser) cp = json_parser_new ();
      JsonObject *o = parity_load_json (cp, cfg);
      g_assert_true (json_object_has_member (o, "rope_parameters"));
      json_object_remove_member (o, "partial_rotary_factor");
      json_object_remove_member (json_object_get_object_member (o, "rope_parameters"), "partial_rotary_factor");
      char *tmp = g_dir_make_tmp ("hn-glm-rotary-XXXXXX", &error);
      g_assert_no_error (error);
      g_autofree char *out_cfg = g_build_filename (tmp, "config.json", NULL);
      g_autofree char *out_st = g_build_filename (tmp, "model.safetensors", NULL);
      g_autoptr (JsonGenerator) gen = json_generator_new ();
      json_generator_set_root (gen, json_parser_get_root (cp));
      g_assert_true (json_generator_to_file (gen, out_cfg, &error));
      g_assert_cmpint (symlink (st, out_st), ==, 0);

      g_autoptr (JsonParser) p = json_parser_new ();
      JsonObject *exp = parity_load_expected (p, cases[i]);
      g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
      HnTransformer *m = hn_transformer_load (ctx, tmp, &error);
      g_assert_no_error (error);
      const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
      g_assert_cmpint (hp->rot_dims, ==, hp->head_dim / 2);
      g_autofree float *logits = g_new (float, (gsize) ids->len * hp->vocab);
      g_assert_true (hn_transformer_logits (m, (const int32_t *) ids->data, (int) ids->len, logits, &error));
      g_assert_no_error (error);
      g_autofree char *what = g_strdup_printf ("%s (default partial_rotary_factor)", cases[i]);
      parity_compare_logits (what, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * hp->vocab);
      hn_transformer_free (m);
      remove_variant (tmp);
    }
}

/* A batched prefill (B rows of T tokens in one forward, each row's cache its own, as
 * `benchmark --workload prefill --batch B` records it: the new K/V of every row written by one
 * rope_kv dispatch, the rows' last hidden states gathered into one head pass) gives each row's
 * last logits as that row's prompt alone does. */
static void
test_batched_prefill (gconstpointer data)
{
  const char *name = data;
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  const HnTransformerHParams *hp = hn_transformer_get_hparams (m);
  const int B = 3, T = 9, V = hp->vocab, off = hp->learned_pos ? hp->pos_offset : 0;
  int32_t ids[3 * 9], pos[3 * 9];
  for (int i = 0; i < B * T; i++)
    {
      ids[i] = (i * 37 + 5 * (i / T) + 1) % V;
      pos[i] = i % T + off;
    }
  g_autoptr (HnTransformerActs) a = hn_transformer_acts_new (m, B * T, B, &error);
  g_assert_no_error (error);
  g_autoptr (GPtrArray) keep = g_ptr_array_new_with_free_func ((GDestroyNotify) hn_tensor_unref);
  g_autofree HnLayerKv *kv = g_new0 (HnLayerKv, hp->n_layer);
  for (int il = 0; il < hp->n_layer; il++)
    {
      gint64 kvh = hp->n_kv_head; /* these fixtures' layers are alike */
      kv[il].k = hn_tensor_new (ctx, HN_DTYPE_F32, 4,
                                (gint64[]) { B, T + 3, kvh, hn_transformer_layer_head_dim (hp, il) }, &error);
      kv[il].v = hn_tensor_new (ctx, HN_DTYPE_F32, 4,
                                (gint64[]) { B, T + 3, kvh, hn_transformer_layer_v_head_dim (hp, il) }, &error);
      g_assert_no_error (error);
      g_ptr_array_add (keep, kv[il].k);
      g_ptr_array_add (keep, kv[il].v);
    }
  g_autoptr (HnTensor) idv = hn_tensor_view_rows (a->ids, 0, B * T, &error);
  g_autoptr (HnTensor) pv = hn_tensor_view_rows (a->pos, 0, B * T, &error);
  g_assert_true (hn_tensor_upload_i32 (idv, ids, B * T, &error) && hn_tensor_upload_i32 (pv, pos, B * T, &error));
  g_autoptr (HnCmd) cmd = hn_cmd_new (ctx, &error);
  g_assert_true (hn_transformer_record_embed (m, cmd, a, B * T, &error));
  for (int il = 0; il < hp->n_layer; il++)
    g_assert_true (hn_transformer_record_layer (m, cmd, a, il, &kv[il], B, T, 0, &error));
  for (int r = 0; r < B; r++)
    {
      g_autoptr (HnTensor) src = hn_tensor_view_rows (a->x, (gint64) r * T + T - 1, 1, &error);
      g_autoptr (HnTensor) dst = hn_tensor_view_rows (a->x, r, 1, &error);
      g_assert_true (hn_op_copy (cmd, dst, src, &error));
    }
  g_assert_true (hn_transformer_record_head (m, cmd, a, 0, B, &error));
  g_assert_true (hn_cmd_submit_wait (cmd, &error));
  g_assert_no_error (error);
  hn_transformer_acts_drop_views (a);
  g_autofree float *got = g_new (float, (gsize) B * V), *alone = g_new (float, (gsize) T * V);
  g_autoptr (HnTensor) lg = hn_tensor_view_rows (a->logits, 0, B, &error);
  g_assert_true (hn_tensor_download_f32 (lg, got, (gsize) B * V, &error));
  for (int r = 0; r < B; r++)
    {
      g_assert_true (hn_transformer_logits (m, ids + r * T, T, alone, &error));
      g_assert_no_error (error);
      const float *want = alone + (gsize) (T - 1) * V;
      for (int i = 0; i < V; i++)
        if (fabsf (got[(gsize) r * V + i] - want[i]) > 1e-4f + 1e-4f * fabsf (want[i]))
          g_error ("%s: batched row %d logit %d is %.7g, alone %.7g", name, r, i, got[(gsize) r * V + i], want[i]);
    }
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
  const char *only = g_getenv ("HN_PARITY_ONLY"); /* e.g. "llama,gpt2" while working on a family */
  g_auto (GStrv) only_v = only ? g_strsplit (only, ",", -1) : NULL;
  /* Every architecture the registry says runs logits must pass its fixture here, so
   * `architectures` cannot claim support that no test proves. */
  g_autoptr (GPtrArray) cases = g_ptr_array_new ();
  gsize n_arch;
  const HnArchInfo *arch = hn_arch_list (&n_arch);
  for (gsize i = 0; i < n_arch; i++)
    if ((arch[i].tasks & HN_TASK_LOGITS) && !hn_arch_is_encoder (&arch[i]) && !hn_arch_is_seq2seq (&arch[i]) &&
        !hn_arch_is_ssm (&arch[i]))
      { /* encoders and encoder-decoders: test-encdec-parity.c; state-space decoders: test-ssm-parity.c */
        g_assert_nonnull (arch[i].fixture);
        g_ptr_array_add (cases, (gpointer) arch[i].fixture);
      }
  for (gsize i = 0; i < G_N_ELEMENTS (extra_cases); i++)
    g_ptr_array_add (cases, (gpointer) extra_cases[i]);
  for (guint i = 0; i < cases->len; i++)
    {
      const char *c = g_ptr_array_index (cases, i);
      if (only_v && !g_strv_contains ((const char *const *) only_v, c))
        continue;
      g_autofree char *path = g_strdup_printf ("/transformer/parity/%s", c);
      g_test_add_data_func (path, c, test_case);
    }
  g_test_add_func ("/transformer/stories260K", test_stories);
  g_test_add_func ("/transformer/device-greedy-stops", test_device_greedy_stops);
  g_test_add_func ("/transformer/chunked-prefill", test_chunked_prefill);
  static const char *const batched[] = { "llama", "gpt2", "qwen3", "gpt_neox" };
  for (gsize i = 0; i < G_N_ELEMENTS (batched); i++)
    {
      g_autofree char *path = g_strdup_printf ("/transformer/batched-prefill/%s", batched[i]);
      g_test_add_data_func (path, batched[i], test_batched_prefill);
    }
  g_test_add_func ("/transformer/continuous-batching", test_continuous_batching);
  g_test_add_func ("/transformer/fail-closed", test_fail_closed);
  g_test_add_func ("/transformer/ministral3-limit", test_ministral3_limit);
  g_test_add_func ("/transformer/moe-sparse", test_moe_sparse);
  g_test_add_func ("/transformer/deepseek-yarn", test_deepseek_yarn);
  g_test_add_func ("/transformer/vl-text-variants", test_vl_text_variants);
  g_test_add_func ("/transformer/hunyuan-vl-text-variants", test_hunyuan_vl_text_variants);
  g_test_add_func ("/transformer/glm4v-moe-per-expert", test_glm4v_moe_per_expert);
  g_test_add_func ("/transformer/glm-half-rotary-default", test_glm_half_rotary_default);
  g_test_add_func ("/transformer/package-text-fail-closed", test_package_text_fail_closed);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
