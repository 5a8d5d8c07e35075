/* RWKV-4 (engine/ssm/mamba.c with recurrent/rwkv-mixer.c) on synthetic models written here with
 * random weights, against a whole-model CPU reference of transformers' RwkvForCausalLM in eval mode
 * (written from modeling_rwkv.py: pre_ln, token shift, the WKV recurrence, squared-ReLU channel
 * mix, the rescale_every halving with divided output / value weights, ln_out at 1e-5): logits of
 * every position; a session (chunked prefill, one token at a time, beams reordering rows) against
 * recomputing from scratch; training fails closed by name. Parity with transformers itself is
 * ssm-parity's (the rwkv fixture). */
#include "base/hn-error.h"
#include "formats/safetensors.h"
#include "jobs/job.h"
#include "ssm/mamba.h"
#include "recurrent/ops-ssm.h"
#include "transformer/transformer.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static HnVkContext *ctx;

enum { V = 40, C = 16, A = 12, F = 24, L = 3 };

typedef struct {
  float *embed, *pre_w, *pre_b, *out_w, *out_b, *head;
  struct {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b, *amk, *amv, *amr, *td, *tf, *wk, *wv, *wr, *wo, *fmk, *fmr, *fk, *fr, *fv;
  } b[L];
  int rescale;
  float eps;
} Ref;

static float *
add (HnSafetensorsWriter *w, GRand *rng, GPtrArray *keep, const char *name, int ndim, const gint64 *shape, float lo,
     float hi)
{
  gint64 n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  float *v = g_new (float, n);
  for (gint64 i = 0; i < n; i++)
    v[i] = (float) g_rand_double_range (rng, lo, hi);
  GError *error = NULL;
  g_assert_true (hn_safetensors_writer_add (w, name, HN_ST_DTYPE_F32, (guint) ndim, shape, v, sizeof (float) * (gsize) n,
                                            TRUE, &error));
  g_assert_no_error (error);
  g_ptr_array_add (keep, v);
  return v;
}

static char *
write_model (Ref *r, GPtrArray *keep, int rescale, gboolean tied, guint32 seed)
{
  GError *error = NULL;
  char *dir = g_dir_make_tmp ("hn-rwkv-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *cfg = g_strdup_printf (
    "{\"model_type\": \"rwkv\", \"architectures\": [\"RwkvForCausalLM\"], \"vocab_size\": %d, \"hidden_size\": %d,"
    " \"attention_hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"context_length\": 64,"
    " \"layer_norm_epsilon\": 1e-6, \"rescale_every\": %d, \"tie_word_embeddings\": %s, \"bos_token_id\": 1,"
    " \"eos_token_id\": 2, \"pad_token_id\": 0}",
    V, C, A, F, L, rescale, tied ? "true" : "false");
  g_autofree char *cp = g_build_filename (dir, "config.json", NULL);
  g_assert_true (g_file_set_contents (cp, cfg, -1, &error));
  g_autoptr (GRand) rng = g_rand_new_with_seed (seed);
  HnSafetensorsWriter *w = hn_safetensors_writer_new ();
  r->rescale = rescale;
  r->eps = 1e-6f;
  r->embed = add (w, rng, keep, "rwkv.embeddings.weight", 2, (gint64[]) { V, C }, -1, 1);
  r->pre_w = add (w, rng, keep, "rwkv.blocks.0.pre_ln.weight", 1, (gint64[]) { C }, 0.8f, 1.2f);
  r->pre_b = add (w, rng, keep, "rwkv.blocks.0.pre_ln.bias", 1, (gint64[]) { C }, -0.1f, 0.1f);
  for (int l = 0; l < L; l++)
    {
      char nm[128];
#define NM(s) (g_snprintf (nm, sizeof nm, "rwkv.blocks.%d.%s", l, s), nm)
      r->b[l].ln1_w = add (w, rng, keep, NM ("ln1.weight"), 1, (gint64[]) { C }, 0.8f, 1.2f);
      r->b[l].ln1_b = add (w, rng, keep, NM ("ln1.bias"), 1, (gint64[]) { C }, -0.1f, 0.1f);
      r->b[l].ln2_w = add (w, rng, keep, NM ("ln2.weight"), 1, (gint64[]) { C }, 0.8f, 1.2f);
      r->b[l].ln2_b = add (w, rng, keep, NM ("ln2.bias"), 1, (gint64[]) { C }, -0.1f, 0.1f);
      r->b[l].amk = add (w, rng, keep, NM ("attention.time_mix_key"), 3, (gint64[]) { 1, 1, C }, 0, 1);
      r->b[l].amv = add (w, rng, keep, NM ("attention.time_mix_value"), 3, (gint64[]) { 1, 1, C }, 0, 1);
      r->b[l].amr = add (w, rng, keep, NM ("attention.time_mix_receptance"), 3, (gint64[]) { 1, 1, C }, 0, 1);
      r->b[l].td = add (w, rng, keep, NM ("attention.time_decay"), 1, (gint64[]) { A }, -2, 1.5f);
      r->b[l].tf = add (w, rng, keep, NM ("attention.time_first"), 1, (gint64[]) { A }, -1, 1);
      r->b[l].wk = add (w, rng, keep, NM ("attention.key.weight"), 2, (gint64[]) { A, C }, -0.5f, 0.5f);
      r->b[l].wv = add (w, rng, keep, NM ("attention.value.weight"), 2, (gint64[]) { A, C }, -0.5f, 0.5f);
      r->b[l].wr = add (w, rng, keep, NM ("attention.receptance.weight"), 2, (gint64[]) { A, C }, -0.5f, 0.5f);
      r->b[l].wo = add (w, rng, keep, NM ("attention.output.weight"), 2, (gint64[]) { C, A }, -0.5f, 0.5f);
      r->b[l].fmk = add (w, rng, keep, NM ("feed_forward.time_mix_key"), 3, (gint64[]) { 1, 1, C }, 0, 1);
      r->b[l].fmr = add (w, rng, keep, NM ("feed_forward.time_mix_receptance"), 3, (gint64[]) { 1, 1, C }, 0, 1);
      r->b[l].fk = add (w, rng, keep, NM ("feed_forward.key.weight"), 2, (gint64[]) { F, C }, -0.5f, 0.5f);
      r->b[l].fr = add (w, rng, keep, NM ("feed_forward.receptance.weight"), 2, (gint64[]) { C, C }, -0.5f, 0.5f);
      r->b[l].fv = add (w, rng, keep, NM ("feed_forward.value.weight"), 2, (gint64[]) { C, F }, -0.5f, 0.5f);
#undef NM
    }
  r->out_w = add (w, rng, keep, "rwkv.ln_out.weight", 1, (gint64[]) { C }, 0.8f, 1.2f);
  r->out_b = add (w, rng, keep, "rwkv.ln_out.bias", 1, (gint64[]) { C }, -0.1f, 0.1f);
  r->head = tied ? r->embed : add (w, rng, keep, "head.weight", 2, (gint64[]) { V, C }, -0.5f, 0.5f);
  g_autofree char *sp = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (hn_safetensors_writer_write_file (w, sp, &error));
  g_assert_no_error (error);
  hn_safetensors_writer_free (w);
  return dir;
}

static void
remove_model (char *dir)
{
  const char *files[] = { "config.json", "model.safetensors" };
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *p = g_build_filename (dir, files[i], NULL);
      g_remove (p);
    }
  g_rmdir (dir);
  g_free (dir);
}

static void
layernorm (double *out, const double *x, const float *w, const float *b, double eps)
{
  double mean = 0, var = 0;
  for (int c = 0; c < C; c++)
    mean += x[c];
  mean /= C;
  for (int c = 0; c < C; c++)
    var += (x[c] - mean) * (x[c] - mean);
  var /= C;
  for (int c = 0; c < C; c++)
    out[c] = (x[c] - mean) / sqrt (var + eps) * w[c] + b[c];
}

/* y[rows] = W[rows, cols] · x / div */
static void
linear (double *y, const float *W, const double *x, int rows, int cols, double div)
{
  for (int i = 0; i < rows; i++)
    {
      double s = 0;
      for (int j = 0; j < cols; j++)
        s += (double) W[i * cols + j] * x[j];
      y[i] = s / div;
    }
}

static double
sigm (double x)
{
  return 1.0 / (1.0 + exp (-x));
}

/* transformers' eval forward over n tokens from a fresh state: logits [n, V]. */
static void
ref_logits (const Ref *r, const int32_t *ids, int n, float *logits)
{
  g_autofree double *x = g_new (double, (gsize) n * C), *nn = g_new (double, (gsize) n * C);
  g_autofree float *k = g_new (float, (gsize) n * A), *v = g_new (float, (gsize) n * A), *y = g_new (float, (gsize) n * A);
  g_autofree double *rr = g_new (double, (gsize) n * A);
  double t0[C], t1[C], t2[C], kk[F], a1[A], a2[A];
  for (int t = 0; t < n; t++)
    {
      for (int c = 0; c < C; c++)
        t0[c] = r->embed[ids[t] * C + c];
      layernorm (x + t * C, t0, r->pre_w, r->pre_b, r->eps);
    }
  for (int l = 0; l < L; l++)
    {
      double div = r->rescale > 0 ? ldexp (1.0, l / r->rescale) : 1.0;
      for (int t = 0; t < n; t++)
        layernorm (nn + t * C, x + t * C, r->b[l].ln1_w, r->b[l].ln1_b, r->eps);
      for (int t = 0; t < n; t++)
        {
          const double *cur = nn + t * C;
          for (int c = 0; c < C; c++)
            {
              double prev = t ? nn[(t - 1) * C + c] : 0.0;
              t0[c] = cur[c] * r->b[l].amk[c] + prev * (1 - r->b[l].amk[c]);
              t1[c] = cur[c] * r->b[l].amv[c] + prev * (1 - r->b[l].amv[c]);
              t2[c] = cur[c] * r->b[l].amr[c] + prev * (1 - r->b[l].amr[c]);
            }
          linear (a1, r->b[l].wk, t0, A, C, 1);
          linear (a2, r->b[l].wv, t1, A, C, 1);
          for (int i = 0; i < A; i++)
            k[t * A + i] = (float) a1[i], v[t * A + i] = (float) a2[i];
          linear (rr + t * A, r->b[l].wr, t2, A, C, 1);
        }
      hn_ref_wkv4 (y, k, v, r->b[l].td, r->b[l].tf, NULL, 1, n, A);
      for (int t = 0; t < n; t++)
        {
          for (int i = 0; i < A; i++)
            a1[i] = sigm (rr[t * A + i]) * y[t * A + i];
          linear (t0, r->b[l].wo, a1, C, A, div);
          for (int c = 0; c < C; c++)
            x[t * C + c] += t0[c];
        }
      for (int t = 0; t < n; t++)
        layernorm (nn + t * C, x + t * C, r->b[l].ln2_w, r->b[l].ln2_b, r->eps);
      g_autofree double *add = g_new (double, (gsize) n * C);
      for (int t = 0; t < n; t++)
        {
          const double *cur = nn + t * C;
          for (int c = 0; c < C; c++)
            {
              double prev = t ? nn[(t - 1) * C + c] : 0.0;
              t0[c] = cur[c] * r->b[l].fmk[c] + prev * (1 - r->b[l].fmk[c]);
              t1[c] = cur[c] * r->b[l].fmr[c] + prev * (1 - r->b[l].fmr[c]);
            }
          linear (kk, r->b[l].fk, t0, F, C, 1);
          for (int i = 0; i < F; i++)
            kk[i] = kk[i] > 0 ? kk[i] * kk[i] : 0.0;
          linear (t2, r->b[l].fv, kk, C, F, div);
          linear (t0, r->b[l].fr, t1, C, C, 1);
          for (int c = 0; c < C; c++)
            add[t * C + c] = sigm (t0[c]) * t2[c];
        }
      for (int i = 0; i < n * C; i++)
        x[i] += add[i];
      if (r->rescale > 0 && (l + 1) % r->rescale == 0)
        for (int i = 0; i < n * C; i++)
          x[i] /= 2;
    }
  for (int t = 0; t < n; t++)
    {
      layernorm (t0, x + t * C, r->out_w, r->out_b, 1e-5);
      for (int o = 0; o < V; o++)
        {
          double s = 0;
          for (int c = 0; c < C; c++)
            s += (double) r->head[o * C + c] * t0[c];
          logits[t * V + o] = (float) s;
        }
    }
}

static const int32_t ids[] = { 3, 17, 5, 39, 0, 22, 8, 8, 31, 12, 4 };
enum { NID = G_N_ELEMENTS (ids) };

static void
check_case (int rescale, gboolean tied)
{
  Ref r = { 0 };
  g_autoptr (GPtrArray) keep = g_ptr_array_new_with_free_func (g_free);
  char *dir = write_model (&r, keep, rescale, tied, 1234u + (guint32) rescale);
  GError *error = NULL;
  g_autoptr (HnMamba) m = hn_mamba_load (ctx, dir, &error);
  g_assert_no_error (error);
  g_assert_true (hn_mamba_get_hparams (m)->rwkv);
  g_autofree float *want = g_new (float, NID * V), *got = g_new (float, NID * V);
  ref_logits (&r, ids, NID, want);
  g_assert_true (hn_mamba_logits (m, ids, NID, got, &error));
  g_assert_no_error (error);
  double worst = 0;
  for (int i = 0; i < NID * V; i++)
    worst = MAX (worst, fabs ((double) got[i] - want[i]));
  g_test_message ("rwkv rescale_every %d tied %d: max |logit diff| %.3g", rescale, tied, worst);
  g_assert_cmpfloat (worst, <, 1e-4);

  /* a session: prefill in chunks of 4 then one token at a time equals the full forward's last rows */
  g_autoptr (HnMambaSession) s = hn_mamba_session_new (m, 3, 4, &error);
  g_assert_no_error (error);
  const HnLmOps *ops = hn_mamba_session_lm_ops ();
  g_assert_true (ops->reset (s, 3, &error));
  g_assert_no_error (error);
  float lg[V];
  g_assert_true (ops->prefill (s, 1, ids, 6, lg, &error));
  g_assert_no_error (error);
  for (int o = 0; o < V; o++)
    g_assert_cmpfloat (fabs (lg[o] - want[5 * V + o]), <, 1e-4);
  for (int t = 6; t < NID; t++)
    {
      int row = 1;
      g_assert_true (ops->decode (s, 1, &row, &ids[t], lg, &error));
      g_assert_no_error (error);
      for (int o = 0; o < V; o++)
        g_assert_cmpfloat (fabs (lg[o] - want[t * V + o]), <, 1e-4);
    }
  /* row 1 copied to rows 0 and 2 (beam reorder), then the next token on all three rows at once */
  int src[3] = { 1, 1, 1 };
  g_assert_true (ops->reorder (s, 3, src, &error));
  g_assert_no_error (error);
  int rows[3] = { 0, 1, 2 };
  int32_t nxt[3] = { 7, 7, 7 };
  float lg3[3 * V];
  g_assert_true (ops->decode (s, 3, rows, nxt, lg3, &error));
  g_assert_no_error (error);
  int32_t ext[NID + 1];
  memcpy (ext, ids, sizeof ids);
  ext[NID] = 7;
  g_autofree float *want2 = g_new (float, (NID + 1) * V);
  ref_logits (&r, ext, NID + 1, want2);
  for (int b = 0; b < 3; b++)
    for (int o = 0; o < V; o++)
      g_assert_cmpfloat (fabs (lg3[b * V + o] - want2[NID * V + o]), <, 1e-4);
  /* reset: a fresh state again */
  g_assert_true (ops->reset (s, 3, &error));
  g_assert_true (ops->prefill (s, 2, ids, 3, lg, &error));
  g_assert_no_error (error);
  for (int o = 0; o < V; o++)
    g_assert_cmpfloat (fabs (lg[o] - want[2 * V + o]), <, 1e-4);

  /* greedy generation with the carried state equals the argmax of the reference, step by step */
  HnGenerateOptions go;
  hn_generate_options_init (&go);
  go.max_new_tokens = go.min_new_tokens = 6;
  g_autoptr (HnGenerateResult) gr = hn_mamba_generate (m, &go, ids, 5, NULL, NULL, NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (gr);
  int32_t seq[5 + 6];
  memcpy (seq, ids, sizeof (int32_t) * 5);
  for (int i = 0; i < 6; i++)
    {
      g_autofree float *lr = g_new (float, (gsize) (5 + i) * V);
      ref_logits (&r, seq, 5 + i, lr);
      const float *last = lr + (gsize) (4 + i) * V;
      int best = 0;
      for (int o = 1; o < V; o++)
        if (last[o] > last[best])
          best = o;
      seq[5 + i] = best;
    }
  GArray *gids = g_ptr_array_index (gr->sequences, 0);
  g_assert_cmpuint (gids->len, ==, 6);
  for (int i = 0; i < 6; i++)
    g_assert_cmpint (g_array_index (gids, int32_t, i), ==, seq[5 + i]);
  hn_generate_options_clear (&go);
  remove_model (dir);
}

static void
test_logits (void)
{
  check_case (2, FALSE); /* block 2's weights / 2, x halved after block 1 */
  check_case (1, TRUE);  /* every block: / 1, 2, 4 and a halving after each */
  check_case (0, FALSE); /* no rescale */
}

/* What does not apply to a recurrent decoder fails closed by name. */
static void
test_fail_closed (void)
{
  Ref r = { 0 };
  g_autoptr (GPtrArray) keep = g_ptr_array_new_with_free_func (g_free);
  char *dir = write_model (&r, keep, 2, FALSE, 7);
  GError *error = NULL;
  g_autoptr (HnTransformer) t = hn_transformer_load (ctx, dir, &error);
  g_assert_null (t);
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "state-space"));
  g_clear_error (&error);
  const HnArchInfo *a = hn_arch_lookup ("rwkv", &error);
  g_assert_no_error (error);
  g_assert_true (hn_arch_is_ssm (a));
  g_assert_cmpint (hn_arch_cache_kind (a), ==, HN_CACHE_STATE);
  g_assert_false (hn_arch_require_task (a, HN_TASK_TRAIN, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  g_assert_false (hn_arch_require_task (a, HN_TASK_LORA, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_clear_error (&error);
  /* the generate job: the state-space path runs it; KV-cache modes and continuous batching fail closed */
  const char *extra[][2] = { { "--cache-implementation", "paged" }, { "--no-use-cache", NULL },
                             { "--continuous-batching", NULL }, { NULL, NULL } };
  for (guint i = 0; i < G_N_ELEMENTS (extra); i++)
    {
      const char *argv[] = { "generate", "--model-path", dir, "--input-ids", "5,6", "--max-new-tokens", "3",
                             extra[i][0], extra[i][1], NULL };
      int argc = 7 + (extra[i][0] != NULL) + (extra[i][1] != NULL);
      g_autoptr (HnJobSpec) spec = hn_job_spec_new_from_argv (argc, argv, &error);
      g_assert_no_error (error);
      g_assert_true (hn_job_spec_validate (spec, &error));
      g_assert_no_error (error);
      g_autoptr (HnJob) job = hn_job_new (spec);
      gboolean ok = hn_job_run_sync (job, &error);
      if (!extra[i][0])
        {
          g_assert_no_error (error);
          g_assert_true (ok);
          continue;
        }
      g_assert_false (ok);
      g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
      g_assert_nonnull (strstr (error->message, "state-space"));
      g_clear_error (&error);
    }
  remove_model (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  hn_job_register_builtin_kinds ();
  GError *error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  if (!ctx)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      g_clear_error (&error);
      return 1;
    }
  g_test_add_func ("/rwkv/logits", test_logits);
  g_test_add_func ("/rwkv/fail-closed", test_fail_closed);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
