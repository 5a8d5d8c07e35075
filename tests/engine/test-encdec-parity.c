/* Parity with transformers 5.17 for encoders (masked-LM logits, token types
 * where the fixture has them) and encoder-decoders (logits given decoder
 * input ids, greedy ids, beam search where the fixture has one): every
 * registry row of those kinds runs its fixture in tests/fixtures/parity. */
#include "base/hn-error.h"
#include "encdec/encoder.h"
#include "encdec/seq2seq.h"
#include "formats/safetensors.h"
#include "transformer/transformer.h"
#include "parity-util.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;

static void
test_encoder (gconstpointer data)
{
  const char *name = data;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *exp = parity_load_expected (parser, name);
  GError *error = NULL;
  g_autoptr (HnEncoder) m = hn_encoder_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  g_autoptr (GArray) tt = json_object_has_member (exp, "token_type_ids") ? parity_int_array (exp, "token_type_ids") : NULL;
  int V = hn_encoder_get_vocab (m);
  g_autofree float *logits = g_new (float, (gsize) ids->len * V);
  g_assert_true (hn_encoder_logits (m, (const int32_t *) ids->data, tt ? (const int32_t *) tt->data : NULL,
                                    (int) ids->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (name, logits, json_object_get_array_member (exp, "logits"), (gsize) ids->len * V);
}

static void
test_seq2seq (gconstpointer data)
{
  const char *name = data;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *exp = parity_load_expected (parser, name);
  GError *error = NULL;
  g_autoptr (HnSeq2Seq) m = hn_seq2seq_load (ctx, dir, &error);
  g_assert_no_error (error);
  int V = hn_seq2seq_get_vocab (m);

  /* logits of the decoder input ids given the 11 encoder ids */
  g_autoptr (GArray) ids = parity_int_array (exp, "input_ids");
  g_autoptr (GArray) dec = parity_int_array (exp, "decoder_input_ids");
  g_assert_cmpint (hn_seq2seq_get_decoder_start (m), ==, g_array_index (dec, int32_t, 0));
  g_autofree float *logits = g_new (float, (gsize) dec->len * V);
  g_assert_true (hn_seq2seq_logits (m, (const int32_t *) ids->data, (int) ids->len, (const int32_t *) dec->data,
                                    (int) dec->len, logits, &error));
  g_assert_no_error (error);
  parity_compare_logits (name, logits, json_object_get_array_member (exp, "logits"), (gsize) dec->len * V);

  /* greedy: the encoder once, then the decoder with its caches */
  JsonObject *gr = json_object_get_object_member (exp, "greedy");
  g_autoptr (GArray) prompt = parity_int_array (gr, "prompt_ids");
  g_autoptr (GArray) want = parity_int_array (gr, "new_ids");
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = (int) json_object_get_int_member (gr, "max_new_tokens");
  o.min_new_tokens = (int) json_object_get_int_member (gr, "min_new_tokens");
  g_autoptr (HnGenerateResult) r = hn_seq2seq_generate (m, &o, (const int32_t *) prompt->data, (int) prompt->len, NULL,
                                                        NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  parity_assert_ids ("greedy", g_ptr_array_index (r->sequences, 0), want);
  hn_generate_options_clear (&o);

  if (json_object_has_member (exp, "beam"))
    {
      JsonObject *b = json_object_get_object_member (exp, "beam");
      g_autoptr (GArray) bp = parity_int_array (b, "prompt_ids");
      g_autoptr (GArray) bw = parity_int_array (b, "new_ids");
      parity_beam_options (b, &o);
      g_autoptr (HnGenerateResult) br = hn_seq2seq_generate (m, &o, (const int32_t *) bp->data, (int) bp->len, NULL,
                                                             NULL, NULL, NULL, NULL, &error);
      g_assert_no_error (error);
      parity_assert_ids ("beam", g_ptr_array_index (br->sequences, 0), bw);
      g_assert_cmpfloat_with_epsilon (g_array_index (br->scores, double, 0),
                                      json_object_get_double_member (b, "sequence_score"), 1e-4);
      hn_generate_options_clear (&o);
    }
}

/* The fixture's 2 x 12 training batch: input ids and labels, row-major. */
static void
train_batch (JsonObject *train, int *B, int *T, int32_t **ids, int32_t **labels)
{
  JsonArray *rows = json_object_get_array_member (train, "input_ids");
  JsonArray *lrows = json_object_get_array_member (train, "labels");
  *B = (int) json_array_get_length (rows);
  *T = (int) json_array_get_length (json_array_get_array_element (rows, 0));
  *ids = g_new (int32_t, *B * *T);
  *labels = g_new (int32_t, *B * *T);
  for (int b = 0; b < *B; b++)
    for (int t = 0; t < *T; t++)
      {
        (*ids)[b * *T + t] = (int32_t) json_array_get_int_element (json_array_get_array_element (rows, b), t);
        (*labels)[b * *T + t] = (int32_t) json_array_get_int_element (json_array_get_array_element (lrows, b), t);
      }
}

/* Each trained tensor within 1e-4 of the tensor of its name in PyTorch's trained.safetensors. The
 * key bias has no gradient in exact arithmetic and AdamW turns both sides' rounding noise into
 * steps of up to lr (as in test-train-parity): it is held to 4 lr. */
static void
compare_trained (const char *name, HnTensor *const *w, guint n, double lr)
{
  GError *error = NULL;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autofree char *path = g_build_filename (dir, "trained.safetensors", NULL);
  g_autoptr (HnSafetensors) st = hn_safetensors_open (path, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < n; i++)
    {
      const HnSafetensorInfo *t = hn_safetensors_lookup (st, w[i]->name);
      if (!t)
        g_error ("%s: %s is not in trained.safetensors", name, w[i]->name);
      g_assert_cmpint (t->n_elements, ==, w[i]->n);
      g_autofree float *want = hn_safetensor_info_dup_f32 (t, &error), *got = g_new (float, w[i]->n);
      g_assert_true (hn_tensor_download_f32 (w[i], got, w[i]->n, &error));
      double worst = 0;
      for (gint64 j = 0; j < w[i]->n; j++)
        worst = MAX (worst, fabs ((double) got[j] - want[j]));
      double tol = g_str_has_suffix (w[i]->name, "self.key.bias") ? 4 * lr : 1e-4;
      if (worst > tol)
        g_error ("%s: %s differs from PyTorch's trained weight by %.3g", name, w[i]->name, worst);
    }
}

/* 4 AdamW steps on the fixture's batch give PyTorch's losses (2e-3) and its trained weights (1e-4). */
static void
test_train (gconstpointer data)
{
  const char *name = data;
  g_autofree char *dir = parity_fixture_dir (name);
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *train = json_object_get_object_member (parity_load_expected (parser, name), "train");
  int B, T;
  g_autofree int32_t *ids = NULL, *labels = NULL;
  train_batch (train, &B, &T, &ids, &labels);
  JsonArray *losses = json_object_get_array_member (train, "losses");
  JsonObject *oo = json_object_get_object_member (train, "optimizer");
  JsonArray *betas = json_object_get_array_member (oo, "betas");
  double lr = json_object_get_double_member (train, "lr"), b1 = json_array_get_double_element (betas, 0);
  double b2 = json_array_get_double_element (betas, 1), eps = json_object_get_double_member (oo, "eps");
  double wd = json_object_get_double_member (oo, "weight_decay");
  GError *error = NULL;
  g_autoptr (HnEncoder) enc = NULL;
  g_autoptr (HnEncoderTrainer) etr = NULL;
  g_autoptr (HnSeq2Seq) s2s = NULL;
  g_autoptr (HnSeq2SeqTrainer) str = NULL;
  if (!(enc = hn_encoder_load (ctx, dir, NULL)))
    {
      s2s = hn_seq2seq_load (ctx, dir, &error);
      g_assert_no_error (error);
      str = hn_seq2seq_trainer_new (s2s, B, T, T, &error);
    }
  else
    etr = hn_encoder_trainer_new (enc, B, T, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < json_array_get_length (losses); i++)
    {
      double loss = 0, want = json_array_get_double_element (losses, i);
      HnEncoderTrainStep es = { i + 1, lr, b1, b2, eps, wd, 0 };
      HnSeq2SeqTrainStep ss = { i + 1, lr, b1, b2, eps, wd, 0 };
      gboolean ok = etr ? hn_encoder_trainer_step (etr, ids, NULL, labels, &es, &loss, &error)
                        : hn_seq2seq_trainer_step (str, ids, labels, &ss, &loss, &error);
      g_assert_no_error (error);
      g_assert_true (ok);
      g_test_message ("%s step %u: loss %.6f (torch %.6f)", name, i, loss, want);
      g_assert_cmpfloat_with_epsilon (loss, want, 2e-3);
    }
  guint n;
  HnTensor *const *w = etr ? hn_encoder_get_weights (enc, &n) : hn_seq2seq_get_weights (s2s, &n);
  compare_trained (name, w, n, lr);
  if (str)
    {
      HnTensor *tables[] = { hn_seq2seq_trainer_get_bias_table (str, FALSE), hn_seq2seq_trainer_get_bias_table (str, TRUE) };
      compare_trained (name, tables, 2, lr);
    }
}

/* Bad input fails with a message naming the problem. */
static void
test_fail_closed (void)
{
  GError *error = NULL;
  g_autofree char *bert = parity_fixture_dir ("bert");
  g_autoptr (HnEncoder) m = hn_encoder_load (ctx, bert, &error);
  g_assert_no_error (error);
  int32_t ids[2] = { 5, 500 }, tt[2] = { 0, 7 };
  float lg[2 * 128];
  g_assert_false (hn_encoder_logits (m, ids, NULL, 2, lg, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  ids[1] = 6;
  g_assert_false (hn_encoder_logits (m, ids, tt, 2, lg, &error));
  g_assert_nonnull (strstr (error->message, "type_vocab_size"));
  g_clear_error (&error);
  /* an encoder is not an encoder-decoder, and the other way round */
  g_assert_null (hn_seq2seq_load (ctx, bert, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_autofree char *t5 = parity_fixture_dir ("t5");
  g_assert_null (hn_encoder_load (ctx, t5, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  /* the decoder-only graph names what these are */
  g_assert_null (hn_transformer_load (ctx, bert, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "encoder (masked LM)"));
  g_clear_error (&error);
  g_assert_null (hn_transformer_load (ctx, t5, &error));
  g_assert_nonnull (strstr (error->message, "encoder-decoder"));
  g_clear_error (&error);
  /* training what is not implemented fails closed */
  g_autofree char *mb = parity_fixture_dir ("modernbert");
  g_autoptr (HnEncoder) mbm = hn_encoder_load (ctx, mb, &error);
  g_assert_no_error (error);
  g_assert_null (hn_encoder_trainer_new (mbm, 1, 4, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_autofree char *bart = parity_fixture_dir ("bart");
  g_autoptr (HnSeq2Seq) bm = hn_seq2seq_load (ctx, bart, &error);
  g_assert_no_error (error);
  g_assert_null (hn_seq2seq_trainer_new (bm, 1, 4, 4, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  /* nor the experts and long-input encoders, by name */
  static const char *const no_train[] = { "switch_transformers", "led", "longt5", "pegasus_x" };
  for (gsize i = 0; i < G_N_ELEMENTS (no_train); i++)
    {
      g_autofree char *dir = parity_fixture_dir (no_train[i]);
      g_autoptr (HnSeq2Seq) nm = hn_seq2seq_load (ctx, dir, &error);
      g_assert_no_error (error);
      g_assert_null (hn_seq2seq_trainer_new (nm, 1, 4, 4, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, no_train[i]));
      g_clear_error (&error);
    }
  /* a decoder id outside the vocabulary */
  g_autoptr (HnSeq2Seq) s = hn_seq2seq_load (ctx, t5, &error);
  g_assert_no_error (error);
  int32_t dec[2] = { 0, 4096 };
  g_assert_false (hn_seq2seq_logits (s, ids, 1, dec, 2, lg, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
}

/* big_bird's block-sparse attention runs as full attention (as transformers does) only up to
 * (5 + 2 * num_random_blocks) * block_size tokens; a longer input fails closed by name. */
static void
test_big_bird_sparse (void)
{
  g_autofree char *src = parity_fixture_dir ("big_bird");
  g_autofree char *dir = g_dir_make_tmp ("hn-bigbird-XXXXXX", NULL);
  g_autofree char *cfgp = g_build_filename (src, "config.json", NULL), *text = NULL;
  g_assert_true (g_file_get_contents (cfgp, &text, NULL, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, text, -1, NULL));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  json_object_set_string_member (o, "attention_type", "block_sparse");
  json_object_set_int_member (o, "block_size", 2);
  json_object_set_int_member (o, "num_random_blocks", 0);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_root (gen, json_parser_get_root (p));
  g_autofree char *out_cfg = g_build_filename (dir, "config.json", NULL);
  g_assert_true (json_generator_to_file (gen, out_cfg, NULL));
  g_autofree char *st_src = g_build_filename (src, "model.safetensors", NULL);
  g_autofree char *st_dst = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (st_src, &data, &len, NULL) && g_file_set_contents (st_dst, data, (gssize) len, NULL));
  GError *error = NULL;
  g_autoptr (HnEncoder) m = hn_encoder_load (ctx, dir, &error);
  g_assert_no_error (error);
  int32_t ids[11] = { 47, 50, 120, 67, 70, 126, 70, 106, 12, 86, 24 };
  g_autofree float *lg = g_new (float, 11 * hn_encoder_get_vocab (m));
  g_assert_true (hn_encoder_logits (m, ids, NULL, 10, lg, &error)); /* 10 = (5 + 0) * 2 tokens: full attention */
  g_assert_no_error (error);
  g_assert_false (hn_encoder_logits (m, ids, NULL, 11, lg, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "block-sparse"));
  g_clear_error (&error);
  g_remove (out_cfg);
  g_remove (st_dst);
  g_rmdir (dir);
}

/* mobilebert and deberta are built for one set of switches each: another fails closed naming the
 * switch at load, and training them is refused. */
static void
test_switch_refusals (void)
{
  static const struct {
    const char *fixture, *key, *string; /* string NULL: the boolean `flag` */
    gboolean flag;
  } cases[] = {
    { "mobilebert", "normalization_type", "layer_norm", FALSE },
    { "mobilebert", "use_bottleneck_attention", NULL, TRUE },
    { "deberta-v2", "share_att_key", NULL, TRUE },
    { "deberta-v2", "norm_rel_ebd", "layer_norm", FALSE },
    { "deberta", "position_biased_input", NULL, FALSE },
    { "deberta", "talking_head", NULL, TRUE },
  };
  GError *error = NULL;
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *src = parity_fixture_dir (cases[i].fixture);
      if (i == 0 || strcmp (cases[i].fixture, cases[i - 1].fixture) != 0)
        {
          g_autoptr (HnEncoder) m = hn_encoder_load (ctx, src, &error);
          g_assert_no_error (error);
          g_assert_null (hn_encoder_trainer_new (m, 1, 4, &error));
          g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
          g_clear_error (&error);
        }
      g_autofree char *dir = g_dir_make_tmp ("hn-switch-XXXXXX", NULL);
      g_autofree char *cfgp = g_build_filename (src, "config.json", NULL), *text = NULL;
      g_assert_true (g_file_get_contents (cfgp, &text, NULL, NULL));
      g_autoptr (JsonParser) p = json_parser_new ();
      g_assert_true (json_parser_load_from_data (p, text, -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (p));
      if (cases[i].string)
        json_object_set_string_member (o, cases[i].key, cases[i].string);
      else
        json_object_set_boolean_member (o, cases[i].key, cases[i].flag);
      g_autoptr (JsonGenerator) gen = json_generator_new ();
      json_generator_set_root (gen, json_parser_get_root (p));
      g_autofree char *out_cfg = g_build_filename (dir, "config.json", NULL);
      g_assert_true (json_generator_to_file (gen, out_cfg, NULL));
      g_autofree char *st_src = g_build_filename (src, "model.safetensors", NULL);
      g_autofree char *st_dst = g_build_filename (dir, "model.safetensors", NULL);
      g_autofree char *data = NULL;
      gsize len = 0;
      g_assert_true (g_file_get_contents (st_src, &data, &len, NULL) &&
                     g_file_set_contents (st_dst, data, (gssize) len, NULL));
      g_assert_null (hn_encoder_load (ctx, dir, &error));
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_test_message ("%s %s: %s", cases[i].fixture, cases[i].key, error->message);
      g_assert_nonnull (strstr (error->message, cases[i].key));
      g_clear_error (&error);
      g_remove (out_cfg);
      g_remove (st_dst);
      g_rmdir (dir);
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
  const char *only = g_getenv ("HN_PARITY_ONLY");
  g_auto (GStrv) only_v = only ? g_strsplit (only, ",", -1) : NULL;
  gsize n_arch;
  const HnArchInfo *arch = hn_arch_list (&n_arch);
  for (gsize i = 0; i < n_arch; i++)
    {
      gboolean enc = hn_arch_is_encoder (&arch[i]), s2s = hn_arch_is_seq2seq (&arch[i]);
      if (!(arch[i].tasks & HN_TASK_LOGITS) || !(enc || s2s))
        continue;
      g_assert_nonnull (arch[i].fixture);
      if (only_v && !g_strv_contains ((const char *const *) only_v, arch[i].fixture))
        continue;
      g_autofree char *path = g_strdup_printf ("/encdec/parity/%s", arch[i].fixture);
      g_test_add_data_func (path, arch[i].fixture, enc ? test_encoder : test_seq2seq);
      if (arch[i].tasks & HN_TASK_TRAIN)
        {
          g_autofree char *tp = g_strdup_printf ("/encdec/train/%s", arch[i].fixture);
          g_test_add_data_func (tp, arch[i].fixture, test_train);
        }
    }
  g_test_add_func ("/encdec/fail-closed", test_fail_closed);
  g_test_add_func ("/encdec/big-bird-sparse", test_big_bird_sparse);
  g_test_add_func ("/encdec/switch-refusals", test_switch_refusals);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
