/* GGUF models end to end: export a model folder (export-gguf's code), load
 * the .gguf back as a model and compare its logits with the folder's.
 * f32 is the same model (bit-identical logits where no value is changed on
 * the way; gemma's norm +1 and Llama 3's rope factors allow a rounding);
 * the other types are held to the error their rounding allows, stated per
 * type below. The tokenizer round trip keeps every id. */
#include "base/hn-error.h"
#include "formats/gguf-hf.h"
#include "train/gguf-export.h"
#include "train/lora.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "transformer/transformer.h"
#include "generate/generate.h"
#include "jobs/memory-estimate.h"
#include "tensor/quant.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;
static char *tmp_dir;

static char *
fixture (const char *name)
{
  if (g_str_equal (name, "stories260K"))
    return g_build_filename (g_getenv ("HN_SHARED_DIR"), "models", "stories260K", NULL);
  return g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", name, NULL);
}

/* max |a - b| / max |b| over the logits of a fixed id sequence */
static double
logits_error (HnTransformer *a, HnTransformer *b, gboolean *identical)
{
  int V = hn_transformer_get_hparams (b)->vocab;
  g_assert_cmpint (hn_transformer_get_hparams (a)->vocab, ==, V);
  int32_t ids[] = { 1, 5, 17, 3, 9, 30, 2, 11, 7 };
  int n = G_N_ELEMENTS (ids);
  for (int i = 0; i < n; i++)
    ids[i] %= V;
  g_autofree float *la = g_new (float, (gsize) n * V);
  g_autofree float *lb = g_new (float, (gsize) n * V);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_transformer_logits (a, ids, n, la, &error));
  g_assert_true (hn_transformer_logits (b, ids, n, lb, &error));
  g_assert_no_error (error);
  double max_err = 0, max_ref = 0;
  *identical = memcmp (la, lb, sizeof (float) * (gsize) n * V) == 0;
  for (int i = 0; i < n * V; i++)
    {
      max_err = MAX (max_err, fabs ((double) la[i] - lb[i]));
      max_ref = MAX (max_ref, fabs ((double) lb[i]));
    }
  return max_err / MAX (max_ref, 1e-12);
}

/* Removes FILE.gguf and the FILE.Modelfile beside it. */
static void
unlink_export (const char *out)
{
  g_autofree char *mf = g_strdup_printf ("%.*s.Modelfile", (int) (strlen (out) - 5), out);
  g_unlink (mf);
  g_unlink (out);
}

static void
round_trip (const char *name, HnGgufOutType type, double tol, gboolean want_identical)
{
  g_autofree char *dir = fixture (name);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("fixture missing");
      return;
    }
  g_autofree char *base = g_strdup_printf ("%s-%s.gguf", name, hn_gguf_outtype_name (type));
  g_autofree char *out = g_build_filename (tmp_dir, base, NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export (dir, NULL, type, out, &error));
  g_assert_no_error (error);
  g_autoptr (HnTransformer) ref = hn_transformer_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, out, &error);
  g_assert_no_error (error);
  gboolean identical = FALSE;
  double err = logits_error (m, ref, &identical);
  g_test_message ("%s %s: relative logits error %.3g%s", name, hn_gguf_outtype_name (type), err,
                  identical ? " (bit-identical)" : "");
  if (err > tol || (want_identical && !identical))
    g_error ("%s %s: relative logits error %.3g (allowed %.3g%s)", name, hn_gguf_outtype_name (type), err, tol,
             want_identical ? ", bit-identical required" : "");
  unlink_export (out);
}

/* f32: the same numbers. */
static void
test_f32 (void)
{
  const char *same[] = { "stories260K", "llama", "mistral", "qwen2", "qwen3", "phi3" };
  for (guint i = 0; i < G_N_ELEMENTS (same); i++)
    round_trip (same[i], HN_GGUF_OUT_F32, 0, TRUE);
  /* (w + 1) - 1 and the rope factors round once */
  const char *near[] = { "gemma", "gemma2", "gemma3_text", "llama_rope_llama3" };
  for (guint i = 0; i < G_N_ELEMENTS (near); i++)
    round_trip (near[i], HN_GGUF_OUT_F32, 1e-5, FALSE);
}

/* The other types: errors measured on these models (the rounding of each
 * type), with headroom. 16-bit floats keep ~3 (bf16 2) significant digits;
 * Q8_0 keeps 8 bits per weight, Q6_K 6, Q4 4 (dims under 256 fall back to
 * Q8_0/F16 as llama.cpp's converter does). */
static void
test_types (void)
{
  const struct { HnGgufOutType t; double tol; } types[] = {
    { HN_GGUF_OUT_F16, 2e-3 }, { HN_GGUF_OUT_BF16, 2e-2 }, { HN_GGUF_OUT_Q8_0, 2e-2 },
    { HN_GGUF_OUT_Q6_K, 2e-2 }, { HN_GGUF_OUT_Q4_K_M, 2e-2 }, { HN_GGUF_OUT_Q4_0, 0.3 },
  };
  const char *models[] = { "stories260K", "llama", "qwen2", "gemma" };
  for (guint m = 0; m < G_N_ELEMENTS (models); m++)
    for (guint i = 0; i < G_N_ELEMENTS (types); i++)
      round_trip (models[m], types[i].t, types[i].tol, FALSE);
}

/* The tokenizer read back from the export encodes and decodes as the source. */
/* The size Export shows before it runs is near what the export writes (the metadata and
 * tokenizer are the difference). */
static void
test_estimate (void)
{
  g_autofree char *dir = fixture ("stories260K");
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("stories260K missing");
      return;
    }
  HnGgufOutType types[] = { HN_GGUF_OUT_F32, HN_GGUF_OUT_F16 };
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autoptr (GError) error = NULL;
      g_autofree char *out = g_build_filename (tmp_dir, "estimate.gguf", NULL);
      g_assert_true (hn_gguf_export (dir, NULL, types[i], out, &error));
      g_assert_no_error (error);
      GStatBuf sb;
      g_assert_cmpint (g_stat (out, &sb), ==, 0);
      gint64 est = hn_gguf_export_estimate (dir, types[i], &error);
      g_assert_no_error (error);
      g_test_message ("%s: estimate %" G_GINT64_FORMAT ", file %" G_GINT64_FORMAT, hn_gguf_outtype_name (types[i]), est,
                      (gint64) sb.st_size);
      g_assert_cmpfloat (fabs ((double) est - (double) sb.st_size), <, 0.1 * (double) sb.st_size);
      g_unlink (out);
    }
  g_autoptr (GError) error = NULL;
  g_assert_cmpint (hn_gguf_export_estimate ("/nonexistent", HN_GGUF_OUT_F16, &error), ==, -1);
  g_assert_nonnull (error);
}

static void
test_tokenizer (void)
{
  g_autofree char *dir = fixture ("stories260K");
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("stories260K missing");
      return;
    }
  g_autofree char *out = g_build_filename (tmp_dir, "tok.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export (dir, NULL, HN_GGUF_OUT_Q8_0, out, &error));
  g_autoptr (HnTokenizer) a = hn_tokenizer_load (dir, &error);
  g_assert_no_error (error);
  g_autoptr (HnTokenizer) b = hn_tokenizer_load (out, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_tokenizer_get_bos_id (b), ==, hn_tokenizer_get_bos_id (a));
  g_assert_cmpint (hn_tokenizer_get_eos_id (b), ==, hn_tokenizer_get_eos_id (a));
  g_assert_cmpint (hn_tokenizer_get_vocab_size (b), ==, hn_tokenizer_get_vocab_size (a));
  /* (runs of spaces and leading spaces differ on purpose: the GGUF reads as
   * llama.cpp tokenizes, which keeps them, where this tokenizer.json strips
   * and collapses them) */
  const char *texts[] = { "Once upon a time", "Lily and Tom went to the park. They saw a big dog!",
                          "x y\ttabs\nnew line, 123 numbers; ünïcödé 🙂", "" };
  for (guint i = 0; i < G_N_ELEMENTS (texts); i++)
    {
      g_autoptr (GArray) ia = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_autoptr (GArray) ib = g_array_new (FALSE, FALSE, sizeof (int32_t));
      g_assert_true (hn_tokenizer_encode (a, texts[i], -1, TRUE, ia, &error));
      g_assert_true (hn_tokenizer_encode (b, texts[i], -1, TRUE, ib, &error));
      g_assert_cmpuint (ib->len, ==, ia->len);
      g_assert_cmpmem (ib->data, ib->len * 4, ia->data, ia->len * 4);
      g_autofree char *da = hn_tokenizer_decode (a, (int32_t *) ia->data, ia->len, TRUE, &error);
      g_autofree char *db = hn_tokenizer_decode (b, (int32_t *) ib->data, ib->len, TRUE, &error);
      g_assert_cmpstr (db, ==, da);
    }
  unlink_export (out);
}

/* With --lora-adapter-path the export is the merged model: the logits of
 * the merged folder (merge-lora), bit for bit in f32. */
static void
test_lora_merged (void)
{
  g_autofree char *base = fixture ("llama");
  g_autofree char *adapter = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "llama_lora",
                                               "adapter_final", NULL);
  g_autofree char *merged = g_build_filename (tmp_dir, "merged", NULL);
  g_autofree char *out = g_build_filename (tmp_dir, "lora.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_lora_merge_model (base, adapter, merged, &error));
  g_assert_no_error (error);
  g_assert_true (hn_gguf_export (base, adapter, HN_GGUF_OUT_F32, out, &error));
  g_assert_no_error (error);
  g_autoptr (HnTransformer) ref = hn_transformer_load (ctx, merged, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, out, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) plain = hn_transformer_load (ctx, base, &error);
  g_assert_no_error (error);
  gboolean identical = FALSE;
  g_assert_cmpfloat (logits_error (m, ref, &identical), ==, 0);
  g_assert_true (identical);
  /* and the adapter changed something */
  g_assert_cmpfloat (logits_error (m, plain, &identical), >, 1e-4);
  /* an adapter trained on a GGUF base merges into it the same way */
  g_autofree char *base_gguf = g_build_filename (tmp_dir, "base.gguf", NULL);
  g_autofree char *out2 = g_build_filename (tmp_dir, "lora2.gguf", NULL);
  g_assert_true (hn_gguf_export (base, NULL, HN_GGUF_OUT_F32, base_gguf, &error));
  g_assert_true (hn_gguf_export (base_gguf, adapter, HN_GGUF_OUT_F32, out2, &error));
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m2 = hn_transformer_load (ctx, out2, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (logits_error (m2, ref, &identical), ==, 0);
  unlink_export (base_gguf);
  unlink_export (out2);
  /* no scratch folder left beside the output */
  g_autoptr (GDir) d = g_dir_open (tmp_dir, 0, NULL);
  const char *n;
  while ((n = g_dir_read_name (d)))
    g_assert_false (g_str_has_prefix (n, ".hn-merge-"));
  unlink_export (out);
  const char *files[] = { "model.safetensors", "config.json", "generation_config.json", NULL };
  for (const char **f = files; *f; f++)
    {
      g_autofree char *p = g_build_filename (merged, *f, NULL);
      g_unlink (p);
    }
  g_rmdir (merged);
}

/* The adapter alone, as llama.cpp's adapter GGUF: W + (alpha / r) B A from
 * its tensors (B's rows permuted back) is the merged weight. */
static void
test_lora_adapter (void)
{
  g_autofree char *base = fixture ("llama");
  g_autofree char *adapter = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "parity", "llama_lora",
                                               "adapter_final", NULL);
  g_autofree char *out = g_build_filename (tmp_dir, "adapter.gguf", NULL);
  g_autofree char *merged = g_build_filename (tmp_dir, "merged2", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export_lora (base, adapter, out, &error));
  g_assert_no_error (error);
  g_assert_true (hn_lora_merge_model (base, adapter, merged, &error));
  g_autoptr (HnGguf) g = hn_gguf_open (out, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (hn_gguf_get_string (g, "general.type", &error), ==, "adapter");
  g_assert_cmpstr (hn_gguf_get_string (g, "adapter.type", &error), ==, "lora");
  double alpha = 0;
  g_assert_true (hn_gguf_get_float (g, "adapter.lora.alpha", &alpha, &error));
  g_autoptr (HnSafetensors) bst = hn_safetensors_open (base, &error);
  g_autoptr (HnSafetensors) mst = hn_safetensors_open (merged, &error);
  g_assert_no_error (error);
  const char *hf[] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj" };
  const char *gg[] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
  guint checked = 0;
  for (int layer = 0; layer < 2; layer++)
    for (guint k = 0; k < G_N_ELEMENTS (hf); k++)
      {
        g_autofree char *na = g_strdup_printf ("blk.%d.%s.weight.lora_a", layer, gg[k]);
        g_autofree char *nb = g_strdup_printf ("blk.%d.%s.weight.lora_b", layer, gg[k]);
        const HnGgufTensor *ta = hn_gguf_find_tensor (g, na), *tb = hn_gguf_find_tensor (g, nb);
        if (!ta)
          continue;
        g_assert_nonnull (tb);
        int r = (int) ta->ne[1], in = (int) ta->ne[0], outd = (int) tb->ne[1];
        g_assert_cmpint (tb->ne[0], ==, r);
        g_autofree float *A = g_new (float, (gsize) r * in);
        g_autofree float *B = g_new (float, (gsize) outd * r);
        g_assert_true (hn_gguf_tensor_to_f32 (g, ta, A, &error));
        g_assert_true (hn_gguf_tensor_to_f32 (g, tb, B, &error));
        if (k < 2)
          hn_gguf_permute_qk_rows (B, outd, r, k == 0 ? 4 : 2, FALSE);
        g_autofree char *wn = g_strdup_printf ("model.layers.%d.%s.weight", layer, hf[k]);
        g_autofree float *W = hn_safetensor_info_dup_f32 (hn_safetensors_lookup (bst, wn), &error);
        g_autofree float *M = hn_safetensor_info_dup_f32 (hn_safetensors_lookup (mst, wn), &error);
        g_assert_no_error (error);
        for (int o = 0; o < outd; o++)
          for (int i = 0; i < in; i++)
            {
              double d = 0;
              for (int j = 0; j < r; j++)
                d += (double) B[(gsize) o * r + j] * A[(gsize) j * in + i];
              float w = W[(gsize) o * in + i] + (float) (alpha / r * d);
              g_assert_cmpfloat (fabsf (w - M[(gsize) o * in + i]), <=, 1e-6f);
            }
        checked++;
      }
  g_assert_cmpuint (checked, >, 0);
  g_unlink (out);
  const char *files[] = { "model.safetensors", "config.json", "generation_config.json", NULL };
  for (const char **f = files; *f; f++)
    {
      g_autofree char *p = g_build_filename (merged, *f, NULL);
      g_unlink (p);
    }
  g_rmdir (merged);
}

/* The greedy text (40 tokens after "Once upon a time", through the uncached
 * logits) of the GGUF at path equals what llama-simple printed for it on the
 * device: the line after "== LABEL\n<s> " in tests/fixtures/gguf/EXPECT. */
static void
assert_llama_simple_text (const char *path, const char *expect_name, const char *label)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTokenizer) tok = hn_tokenizer_load (path, &error);
  g_assert_no_error (error);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, path, &error);
  g_assert_no_error (error);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_assert_true (hn_tokenizer_encode (tok, "Once upon a time", -1, TRUE, ids, &error));
  int V = hn_transformer_get_hparams (m)->vocab;
  guint n_prompt = ids->len;
  for (int step = 0; step < 40; step++)
    {
      g_autofree float *logits = g_new (float, (gsize) ids->len * V);
      g_assert_true (hn_transformer_logits (m, (int32_t *) ids->data, (int) ids->len, logits, &error));
      const float *last = logits + (gsize) (ids->len - 1) * V;
      int32_t best = 0;
      for (int v = 1; v < V; v++)
        if (last[v] > last[best])
          best = v;
      g_array_append_val (ids, best);
    }
  g_autofree char *text = hn_tokenizer_decode (tok, (int32_t *) ids->data + n_prompt, ids->len - n_prompt, TRUE, &error);
  g_assert_no_error (error);
  g_autofree char *full = g_strconcat ("Once upon a time", text, NULL);
  /* llama-simple prints "<s> " + prompt + continuation */
  g_autofree char *expect_file = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                                   expect_name, NULL);
  g_autofree char *expect = NULL;
  g_assert_true (g_file_get_contents (expect_file, &expect, NULL, NULL));
  g_autofree char *head = g_strdup_printf ("== %s\n<s> ", label);
  const char *mark = strstr (expect, head);
  g_assert_nonnull (mark);
  g_autofree char *line = g_strndup (mark + strlen (head), strcspn (mark + strlen (head), "\n"));
  g_assert_cmpstr (full, ==, line);
}

/* A GGUF made by llama.cpp's llama-quantize (Q4_K_M of stories260K, which
 * falls back to Q5_0 and F16 at these widths) greedy-generates here what
 * llama-simple generated from the same file on the device
 * (tests/fixtures/gguf/llama-simple-output.txt). */
static void
test_llamacpp_file (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                            "stories260K-llamacpp-q4_k_m.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (hn_gguf_find_tensor (g, "blk.0.attn_q.weight"));
  g_assert_cmpint (hn_gguf_find_tensor (g, "blk.0.attn_q.weight")->type, ==, HN_GGML_Q5_0);
  assert_llama_simple_text (path, "llama-simple-output.txt", "lc-q4_k_m.gguf ngl=0");
}

/* The same with llama-quantize's Q8_0 (ffn_down, 172 wide, kept F16 by --tensor-type: Q8_0 needs
 * rows of 32), and llama-simple's text from it (made on the development machine's CPU with the
 * anchor's binaries: tests/fixtures/gguf/README.md). */
static void
test_llamacpp_file_q8_0 (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                            "stories260K-llamacpp-q8_0.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGguf) g = hn_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_gguf_find_tensor (g, "blk.0.attn_q.weight")->type, ==, HN_GGML_Q8_0);
  g_assert_cmpint (hn_gguf_find_tensor (g, "blk.0.ffn_gate.weight")->type, ==, HN_GGML_Q8_0);
  g_assert_cmpint (hn_gguf_find_tensor (g, "blk.0.ffn_down.weight")->type, ==, HN_GGML_F16);
  assert_llama_simple_text (path, "llama-simple-output.txt", "lc-q8_0.gguf ngl=0");
}

/* A LoRA fine-tune of the demo model (tests/fixtures/gguf/stories260K-lora, 12 steps on
 * tinyshakespeare) exported merged in f16 generates here what llama-simple generated from the same
 * export on the device, on its CPU and Vulkan backends (llama-simple-lora-output.txt; made by
 * build-aux/perf/gguf-q8-ab.sh, in git history); the adapter changes the text. */
static void
test_lora_export_llamacpp (void)
{
  g_autofree char *base = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  g_autofree char *adapter = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                               "stories260K-lora", NULL);
  g_autofree char *out = g_build_filename (tmp_dir, "lora-f16.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export (base, adapter, HN_GGUF_OUT_F16, out, &error));
  g_assert_no_error (error);
  assert_llama_simple_text (out, "llama-simple-lora-output.txt", "lora-f16.gguf ngl=0");
  assert_llama_simple_text (out, "llama-simple-lora-output.txt", "lora-f16.gguf ngl=99");
  unlink_export (out);
}

/* A folder holding one .gguf (and no config.json) is that model; the
 * errors of a bad file name it. */
/* Greedy tokens through the decode path (KV cache, matrix-vector kernels). */
static GArray *
greedy (HnTransformer *m, const int32_t *prompt, int n_prompt, int n_new)
{
  HnGenerateOptions o;
  hn_generate_options_init (&o);
  o.max_new_tokens = n_new;
  g_autoptr (GError) error = NULL;
  g_autoptr (HnGenerateResult) r = hn_transformer_generate (m, HN_KV_CACHE_CONTIGUOUS, &o, prompt, n_prompt, NULL, NULL,
                                                            NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  hn_generate_options_clear (&o);
  GArray *seq = g_ptr_array_index (r->sequences, 0);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (int32_t));
  g_array_append_vals (out, seq->data, seq->len);
  return out;
}

/* A quantized GGUF keeps its blocks on the device (the dtype of the layer
 * weights) and generates, in prefill (tiled kernel) and decode (matrix-vector
 * kernels), the same greedy tokens as the same file dequantized to f32 at load
 * (HN_GGUF_DEQUANTIZE=1): llama.cpp's Q4_K_M file of stories260K (Q5_0 at
 * its width) and our Q8_0 and Q4_0 exports. */
static void
check_kept_quantized (const char *path, HnDType want)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnTransformer) q = hn_transformer_load (ctx, path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (hn_transformer_get_weights (q)->layers[0].wq->dtype, ==, want);
  g_assert_cmpint (hn_transformer_get_weights (q)->layers[0].w_gate->dtype, ==, want);
  g_setenv ("HN_GGUF_DEQUANTIZE", "1", TRUE);
  g_autoptr (HnTransformer) f = hn_transformer_load (ctx, path, &error);
  g_unsetenv ("HN_GGUF_DEQUANTIZE");
  g_assert_no_error (error);
  g_assert_cmpint (hn_transformer_get_weights (f)->layers[0].wq->dtype, ==, HN_DTYPE_F32);
  g_assert_cmpuint (hn_transformer_get_weight_bytes (q), <, hn_transformer_get_weight_bytes (f));
  int32_t prompt[] = { 1, 403, 407, 261, 378 }; /* "<s> Once upon a time" */
  g_autoptr (GArray) a = greedy (q, prompt, G_N_ELEMENTS (prompt), 40);
  g_autoptr (GArray) b = greedy (f, prompt, G_N_ELEMENTS (prompt), 40);
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpmem (a->data, a->len * sizeof (int32_t), b->data, b->len * sizeof (int32_t));
  gboolean identical;
  /* the f32 kernels: the same weights, summed in another order */
  g_setenv ("HN_MATMUL_EXACT", "1", TRUE);
  double err = logits_error (q, f, &identical);
  g_unsetenv ("HN_MATMUL_EXACT");
  /* the default path: on a tensor-core device the quantized prefill
   * (matmul_gguf_cm2.comp) rounds its operands to f16 */
  double err_tc = logits_error (q, f, &identical);
  gboolean tc = hn_quant_matmul_tensor_cores (ctx, want, 9, 256, 0);
  g_test_message ("%s: %u greedy tokens equal; prefill logits relative difference %.3g (f32 kernels), %.3g%s", path,
                  a->len, err, err_tc, tc ? " (tensor cores)" : "");
  g_assert_cmpfloat (err, <, 1e-4);
  g_assert_cmpfloat (err_tc, <, tc ? 2e-3 : 1e-4);
}

static void
test_kept_quantized (void)
{
  g_autofree char *lc = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "tests", "fixtures", "gguf",
                                          "stories260K-llamacpp-q4_k_m.gguf", NULL);
  check_kept_quantized (lc, HN_DTYPE_GGML_Q5_0);
  g_autofree char *dir = fixture ("stories260K");
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    return;
  static const struct { HnGgufOutType t; HnDType dt; } types[] = {
    { HN_GGUF_OUT_Q8_0, HN_DTYPE_GGML_Q8_0 }, { HN_GGUF_OUT_Q4_0, HN_DTYPE_GGML_Q4_0 } };
  for (gsize i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autofree char *base = g_strdup_printf ("kept-%s.gguf", hn_gguf_outtype_name (types[i].t));
      g_autofree char *out = g_build_filename (tmp_dir, base, NULL);
      g_autoptr (GError) error = NULL;
      g_assert_true (hn_gguf_export (dir, NULL, types[i].t, out, &error));
      g_assert_no_error (error);
      check_kept_quantized (out, types[i].dt);
      unlink_export (out);
    }
}

/* Q8_K (ggml's 8-bit K type, 256 values a block): no converter writes it and
 * the fixtures are narrower than its block, so a random llama of width 256
 * (2 layers, 4 heads / 2 KV heads, FFN 512, vocab 512, tied LM head) is
 * written with every matrix in Q8_K blocks by ggml's reference quantizer:
 * the embedding, the LM head and every Linear weight stay in them, and the
 * memory estimate counts them at their block sizes (with the f16 ring of
 * the largest, 512 x 256). */
static void
test_kept_quantized_q8_k (void)
{
  const gint64 C = 256, F = 512, V = 512, KV = 128;
  g_autoptr (HnGgufWriter) w = hn_gguf_writer_new ();
  hn_gguf_writer_set_string (w, "general.architecture", "llama");
  hn_gguf_writer_set_string (w, "general.type", "model");
  hn_gguf_writer_set_u32 (w, "llama.context_length", 128);
  hn_gguf_writer_set_u32 (w, "llama.embedding_length", (guint32) C);
  hn_gguf_writer_set_u32 (w, "llama.block_count", 2);
  hn_gguf_writer_set_u32 (w, "llama.feed_forward_length", (guint32) F);
  hn_gguf_writer_set_u32 (w, "llama.attention.head_count", 4);
  hn_gguf_writer_set_u32 (w, "llama.attention.head_count_kv", 2);
  hn_gguf_writer_set_u32 (w, "llama.rope.dimension_count", 64);
  hn_gguf_writer_set_f32 (w, "llama.rope.freq_base", 10000.0f);
  hn_gguf_writer_set_f32 (w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  hn_gguf_writer_set_string (w, "tokenizer.ggml.model", "none");
  g_autoptr (GRand) rng = g_rand_new_with_seed (8);
  g_autoptr (GError) error = NULL;
  guint64 bytes = 0; /* the weights as the loader keeps them */
  struct { const char *name; gint64 rows, cols; } mats[] = {
    { "attn_q", C, C }, { "attn_k", KV, C }, { "attn_v", KV, C }, { "attn_output", C, C },
    { "ffn_gate", F, C }, { "ffn_up", F, C }, { "ffn_down", C, F } };
  for (int il = -1; il < 2; il++)
    for (guint i = 0; i < (il < 0 ? 1 : G_N_ELEMENTS (mats)); i++)
      {
        gint64 rows = il < 0 ? V : mats[i].rows, cols = il < 0 ? C : mats[i].cols;
        double a = il < 0 ? 1.0 : sqrt (3.0 / (double) cols); /* unit variance out of a Linear */
        g_autofree float *f = g_new (float, rows * cols);
        for (gint64 k = 0; k < rows * cols; k++)
          f[k] = (float) g_rand_double_range (rng, -a, a);
        gsize nb = hn_ggml_row_size (HN_GGML_Q8_K, cols) * (gsize) rows;
        void *q = g_malloc (nb);
        g_assert_true (hn_ggml_quantize (HN_GGML_Q8_K, f, q, rows * cols, &error));
        bytes += nb;
        g_autofree char *name = il < 0 ? g_strdup ("token_embd.weight")
                                       : g_strdup_printf ("blk.%d.%s.weight", il, mats[i].name);
        g_assert_true (hn_gguf_writer_add_tensor_take (w, name, HN_GGML_Q8_K, 2, (gint64[]) { cols, rows }, q, nb,
                                                       &error));
      }
  const char *norms[] = { "output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight",
                          "blk.1.attn_norm.weight", "blk.1.ffn_norm.weight" };
  for (guint i = 0; i < G_N_ELEMENTS (norms); i++)
    {
      float *g = g_new (float, C);
      for (gint64 k = 0; k < C; k++)
        g[k] = (float) g_rand_double_range (rng, 0.8, 1.2);
      bytes += (guint64) C * 4;
      g_assert_true (hn_gguf_writer_add_tensor_take (w, norms[i], HN_GGML_F32, 1, (gint64[]) { C }, g,
                                                     (gsize) C * 4, &error));
    }
  g_autofree char *out = g_build_filename (tmp_dir, "kept-q8_k.gguf", NULL);
  g_assert_true (hn_gguf_writer_write (w, out, &error));
  g_assert_no_error (error);
  check_kept_quantized (out, HN_DTYPE_GGML_Q8_K);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, out, &error);
  g_assert_no_error (error);
  const HnTransformerWeights *W = hn_transformer_get_weights (m);
  g_assert_cmpint (W->tok_embed->dtype, ==, HN_DTYPE_GGML_Q8_K);
  g_assert_cmpint (W->lm_head->dtype, ==, HN_DTYPE_GGML_Q8_K);
  g_assert_cmpint (W->layers[1].w_down->dtype, ==, HN_DTYPE_GGML_Q8_K);
  HnMemoryRequest req = { HN_MEMORY_GENERATE, 0, 0, 0, NULL, 1, 128, FALSE, FALSE, 0 };
  HnMemoryEstimate e;
  g_assert_true (hn_memory_estimate_model (out, &req, &e, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (e.weights, ==, bytes);
  g_assert_cmpuint (e.f16_weight_ring, ==, HN_WEIGHT_SCRATCH_SLOTS * 2 * V * C);
  hn_memory_estimate_clear (&e);
  g_unlink (out);
}

static void
test_paths (void)
{
  g_autofree char *dir = fixture ("llama");
  g_autofree char *sub = g_build_filename (tmp_dir, "folder", NULL);
  g_mkdir (sub, 0755);
  g_autofree char *out = g_build_filename (sub, "m.gguf", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_gguf_export (dir, NULL, HN_GGUF_OUT_F16, out, &error));
  g_autofree char *resolved = hn_gguf_resolve_path (sub);
  g_assert_cmpstr (resolved, ==, out);
  g_autoptr (HnTransformer) m = hn_transformer_load (ctx, sub, &error);
  g_assert_no_error (error);
  g_autofree char *bad = g_build_filename (sub, "bad.gguf", NULL);
  g_assert_true (g_file_set_contents (bad, "GGUF\3\0\0\0", 8, NULL));
  g_autoptr (HnTransformer) m2 = hn_transformer_load (ctx, bad, &error);
  g_assert_null (m2);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "bad.gguf"));
  g_clear_error (&error);
  /* two .gguf files: the folder is ambiguous */
  g_autoptr (HnTransformer) m3 = hn_transformer_load (ctx, sub, &error);
  g_assert_null (m3);
  g_assert_nonnull (error);
  g_unlink (bad);
  unlink_export (out);
  g_rmdir (sub);
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
      return 1;
    }
  tmp_dir = g_dir_make_tmp ("hn-gguf-model-XXXXXX", NULL);
  g_test_add_func ("/gguf-model/f32", test_f32);
  g_test_add_func ("/gguf-model/types", test_types);
  g_test_add_func ("/gguf-model/tokenizer", test_tokenizer);
  g_test_add_func ("/gguf-model/paths", test_paths);
  g_test_add_func ("/gguf-model/estimate", test_estimate);
  g_test_add_func ("/gguf-model/llamacpp-file", test_llamacpp_file);
  g_test_add_func ("/gguf-model/llamacpp-file-q8_0", test_llamacpp_file_q8_0);
  g_test_add_func ("/gguf-model/lora-export-llamacpp", test_lora_export_llamacpp);
  g_test_add_func ("/gguf-model/kept-quantized", test_kept_quantized);
  g_test_add_func ("/gguf-model/kept-quantized-q8_k", test_kept_quantized_q8_k);
  g_test_add_func ("/gguf-model/lora-merged", test_lora_merged);
  g_test_add_func ("/gguf-model/lora-adapter", test_lora_adapter);
  int rc = g_test_run ();
  g_rmdir (tmp_dir);
  g_free (tmp_dir);
  hn_vk_context_unref (ctx);
  return rc;
}
