/* Hierarchos coherent-v9: contract, init, ROSA, CPU runtime, state files. */
#include "hierarchos/hierarchos-private.h"
#include "base/hn-error.h"
#include "hier-test-util.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* sha256 of the default contract (V 50257, C 448), computed by Python json.dumps. */
#define HIER_DEFAULT_SHA "a50ed901be04ba96592bd485103e75382095a658955f4299b62828d8d3c0a7dc"
#include <stdio.h>
#include <string.h>

static void
tiny_config (HnHierConfig *c)
{
  hier_test_tiny_config (c, 40, 16);
  hn_hier_config_derive (c);
}

static HnHierModel *
tiny_model (guint64 seed)
{
  HnHierConfig c;
  hier_test_tiny_config (&c, 40, 16);
  return hier_test_model (&c, seed);
}

/* ---- contract ---- */

static void
test_python_repr (void)
{
  const struct { double v; const char *s; } cases[] = {
    { 0.9, "0.9" }, { 1e-4, "0.0001" }, { 1e-5, "1e-05" }, { 50.0, "50.0" }, { 0.1 / 448.0, "0.00022321428571428573" },
    { 0.0, "0.0" }, { 1e16, "1e+16" }, { 123456.5, "123456.5" }, { 0.05, "0.05" }, { 2.5e-7, "2.5e-07" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *r = hn_hier_python_float_repr (cases[i].v);
      g_assert_cmpstr (r, ==, cases[i].s);
    }
}

static void
test_contract (void)
{
  HnHierConfig c;
  hn_hier_config_init_defaults (&c, 50257, 448);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_hier_config_validate (&c, &error));
  g_autofree char *canon = hn_hier_config_canonical_json (&c);
  /* Python: json.dumps(contract, sort_keys=True, separators=(",", ":")) */
  g_assert_true (g_str_has_prefix (canon, "{\"act_depth_temperature\":0.05,\"activation_clamp\":100.0,"));
  g_assert_nonnull (strstr (canon, "\"commitment_threshold\":0.00022321428571428573,"));
  g_assert_nonnull (strstr (canon, "\"l_conv_atol\":0.0001,"));
  g_autofree char *sha = hn_hier_config_sha256 (&c);
  g_assert_cmpstr (sha, ==, HIER_DEFAULT_SHA);

  /* save/load round trip; a tampered file fails. */
  g_autofree char *dir = g_dir_make_tmp ("hier-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "config.json", NULL);
  g_assert_true (hn_hier_config_save (&c, path, &error));
  HnHierConfig d;
  g_assert_true (hn_hier_config_load (&d, path, &error));
  g_autofree char *sha2 = hn_hier_config_sha256 (&d);
  g_assert_cmpstr (sha, ==, sha2);
  hn_hier_config_clear (&d);

  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_autofree char *bad = NULL;
  {
    g_auto (GStrv) parts = g_strsplit (text, "\"h_stride\":4,", 2);
    g_assert_cmpint (g_strv_length (parts), ==, 2);
    bad = g_strjoin ("\"h_stride\":5,", parts[0], parts[1], NULL);
  }
  g_assert_true (g_file_set_contents (path, bad, -1, NULL));
  g_assert_false (hn_hier_config_load (&d, path, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_nonnull (strstr (error->message, "sha256"));
  g_clear_error (&error);

  /* an unimplemented contract is refused, naming the field */
  HnHierConfig e;
  hn_hier_config_copy (&e, &c);
  g_assert_true (hn_hier_config_set (&e, "ltm_training_mode", "inner-update", &error));
  g_assert_true (hn_hier_config_save (&e, path, &error));
  g_assert_false (hn_hier_config_load (&d, path, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "ltm_training_mode"));
  g_clear_error (&error);
  g_assert_false (hn_hier_config_set (&e, "no-such-field", "1", &error));
  g_clear_error (&error);
  hn_hier_config_clear (&e);
  hn_hier_config_clear (&c);
  g_unlink (path);
  g_rmdir (dir);
}

/* ---- ROSA against the O(n^2) longest-suffix-match reference ---- */

static void
rosa_reference (const guint32 *tok, int n, int maxc, gint64 *out)
{
  int start = 0;
  for (int t = 0; t < n; t++)
    {
      if (t - start >= maxc)
        start = t;
      int cur = t - start;
      const guint32 *h = tok + start;
      int best_len = 0, best_next = -1;
      for (int e = 0; e < cur; e++)
        {
          int l = 0;
          while (l <= e && h[e - l] == h[cur - l])
            l++;
          if (l > best_len || (l == best_len && l > 0 && e + 1 > best_next))
            {
              best_len = l;
              best_next = e + 1;
            }
        }
      out[t] = best_len > 0 ? (gint64) h[best_next] : -1;
    }
}

static void
test_rosa (void)
{
  guint32 tok[600];
  guint32 lcg = 0x20260814u;
  const guint32 head[] = { 1, 2, 1, 2, 1, 3, 1, 2, 1, 2, 4, 4, 4, 4 };
  for (int i = 0; i < 600; i++)
    {
      lcg = lcg * 1664525u + 1013904223u;
      tok[i] = i < 14 ? head[i] : 1 + ((lcg >> 16) % 11);
    }
  for (int maxc = 1; maxc <= 40; maxc += 3)
    {
      gint64 want[600];
      rosa_reference (tok, 600, maxc, want);
      HnHierRosa r;
      hn_hier_rosa_init (&r);
      for (int i = 0; i < 600; i++)
        g_assert_cmpint (hn_hier_rosa_predict_and_push (&r, tok[i], (gsize) maxc), ==, want[i]);
      hn_hier_rosa_clear (&r);
    }
  HnHierRosa r;
  hn_hier_rosa_init (&r);
  const guint32 seq[] = { 1, 2, 1, 2, 1 };
  const gint64 exp[] = { -1, -1, 2, 1, 2 };
  for (int i = 0; i < 5; i++)
    g_assert_cmpint (hn_hier_rosa_predict_and_push (&r, seq[i], 0), ==, exp[i]);
  hn_hier_rosa_clear (&r);
}

/* ---- runtime ---- */

static void
run_tokens (HnHierModel *m, HnHierState *s, const guint32 *tok, int n, float *last_logits)
{
  g_autoptr (HnHierRunner) r = hn_hier_runner_new (m);
  g_autoptr (GError) error = NULL;
  for (int i = 0; i < n; i++)
    g_assert_true (hn_hier_runner_step (r, s, tok[i], last_logits, &error));
}

static void
test_runtime_deterministic (void)
{
  g_autoptr (HnHierModel) m = tiny_model (7);
  hier_test_perturb (m, 3, 0.05f);
  g_autoptr (HnHierState) s1 = hn_hier_state_new (m);
  g_autoptr (HnHierState) s2 = hn_hier_state_new (m);
  guint32 tok[40];
  for (int i = 0; i < 40; i++)
    tok[i] = (guint32) ((i * 7 + i / 5) % 40);
  float l1[40], l2[40];
  run_tokens (m, s1, tok, 40, l1);
  run_tokens (m, s2, tok, 20, l2);
  /* a copied state continues identically */
  g_autoptr (HnHierState) s3 = hn_hier_state_new (m);
  hn_hier_state_copy (m, s3, s2);
  float l3[40];
  run_tokens (m, s2, tok + 20, 20, l2);
  run_tokens (m, s3, tok + 20, 20, l3);
  g_assert_cmpmem (l1, sizeof l1, l2, sizeof l2);
  g_assert_cmpmem (l1, sizeof l1, l3, sizeof l3);
  g_assert_cmpint (s1->position, ==, 40);
  for (int i = 0; i < 40; i++)
    g_assert_true (isfinite (l1[i]));
  /* an out-of-vocabulary token is an error and leaves the state alone */
  g_autoptr (HnHierRunner) r = hn_hier_runner_new (m);
  g_autoptr (GError) error = NULL;
  g_assert_false (hn_hier_runner_step (r, s1, 40, l1, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_assert_cmpint (s1->position, ==, 40);
}

static void
test_save_load (void)
{
  g_autoptr (HnHierModel) m = tiny_model (11);
  g_autofree char *dir = g_dir_make_tmp ("hier-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_hier_model_save (m, dir, &error));
  g_autoptr (HnHierModel) m2 = hn_hier_model_load (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (m2->n_params, ==, m->n_params);
  g_assert_cmpmem (m->params, m->n_params * 4, m2->params, m2->n_params * 4);
  /* same seed, same weights; another seed differs */
  g_autoptr (HnHierModel) m3 = tiny_model (11);
  g_assert_cmpmem (m->params, m->n_params * 4, m3->params, m3->n_params * 4);
  g_autoptr (HnHierModel) m4 = tiny_model (12);
  g_assert_true (memcmp (m->params, m4->params, m->n_params * 4) != 0);
  /* documented init values */
  g_assert_cmpfloat (hn_hier_model_data (m, "rosa_gate_logit")[0], ==, -1.0f);
  g_assert_cmpfloat (hn_hier_model_data (m, "ltm_gate_logit")[0], ==, -2.0f);
  g_assert_cmpfloat_with_epsilon (hn_hier_model_data (m, "h_halt_proj.bias")[0], -logf (2.0f), 1e-6);
  g_assert_cmpfloat (hn_hier_model_data (m, "h_deepembed_adapter.bias")[0], ==, 1.0f);
  g_assert_cmpfloat (hn_hier_model_data (m, "h_rnn.k_a")[3], ==, 1.02f);
  /* w2 orthogonal with gain 0.1: rows of [8, 16] are orthogonal, norm 0.1 */
  const float *w2 = hn_hier_model_data (m, "h_rnn.w2");
  for (int a = 0; a < 8; a++)
    for (int b = 0; b < 8; b++)
      {
        double d = 0;
        for (int k = 0; k < 16; k++)
          d += (double) w2[a * 16 + k] * w2[b * 16 + k];
        g_assert_cmpfloat_with_epsilon (d, a == b ? 0.01 : 0.0, 1e-6);
      }
  /* a truncated weights file is a clear error */
  g_autofree char *wp = g_build_filename (dir, "model.safetensors", NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (wp, &data, &len, NULL));
  g_assert_true (g_file_set_contents (wp, data, (gssize) (len - 16), NULL));
  g_autoptr (HnHierModel) bad = hn_hier_model_load (dir, &error);
  g_assert_null (bad);
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_clear_error (&error);
  g_autofree char *cp = g_build_filename (dir, "config.json", NULL);
  g_unlink (wp);
  g_unlink (cp);
  g_rmdir (dir);
}

static void
test_state_file (void)
{
  g_autoptr (HnHierModel) m = tiny_model (41);
  hier_test_perturb (m, 5, 0.05f);
  guint32 tok[60];
  for (int i = 0; i < 60; i++)
    tok[i] = (guint32) ((i * 5 + (i / 7) * 3) % 40);
  g_autoptr (HnHierState) a = hn_hier_state_new (m);
  float la[40], lb[40];
  run_tokens (m, a, tok, 30, la);
  g_autofree char *dir = g_dir_make_tmp ("hier-state-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "state.json", NULL);
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_hier_state_save (m, a, path, &error));
  g_autoptr (HnHierState) b = hn_hier_state_new (m);
  g_assert_true (hn_hier_state_load (m, b, path, &error));
  g_assert_no_error (error);
  g_assert_cmpint (b->position, ==, 30);
  run_tokens (m, a, tok + 30, 30, la);
  run_tokens (m, b, tok + 30, 30, lb);
  g_assert_cmpmem (la, sizeof la, lb, sizeof lb);
  /* another model's state is refused */
  HnHierConfig c;
  tiny_config (&c);
  c.h_stride = 3;
  g_autoptr (HnHierModel) other = hn_hier_model_new (&c, &error);
  hn_hier_config_clear (&c);
  g_assert_false (hn_hier_state_load (other, b, path, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* a shape that only matches modulo 2^32 is named as the shape, not as a
   * hidden-size mismatch of two equal numbers */
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  {
    char *sp = strstr (text, "\"shape\":[1,");
    g_assert_nonnull (sp);
    int w = 0, ss = 0;
    g_assert_cmpint (sscanf (sp, "\"shape\":[1,%d,%d]", &w, &ss), ==, 2);
    g_autofree char *from = g_strdup_printf ("\"shape\":[1,%d,", w);
    g_autofree char *to = g_strdup_printf ("\"shape\":[1,%" G_GINT64_FORMAT ",", (gint64) w + ((gint64) 1 << 32));
    g_auto (GStrv) parts = g_strsplit (text, from, 2);
    g_autofree char *bad = g_strjoinv (to, parts);
    g_assert_true (g_file_set_contents (path, bad, -1, NULL));
    g_assert_false (hn_hier_state_load (m, b, path, &error));
    g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
    g_autofree char *want = g_strdup_printf ("'shape' must be [1, %d, %d]", w, ss);
    g_assert_nonnull (strstr (error->message, want));
    g_assert_null (strstr (error->message, "hidden="));
    g_clear_error (&error);
    g_assert_true (g_file_set_contents (path, text, -1, NULL));
  }
  /* a damaged automaton is refused and leaves the state alone */
  char *lp = strstr (text, "\"last_state\":");
  g_assert_nonnull (lp);
  lp[13] = lp[13] == '1' ? '2' : '1';
  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  g_assert_false (hn_hier_state_load (m, b, path, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CORRUPT);
  g_assert_cmpint (b->position, ==, 60);
  g_unlink (path);
  g_rmdir (dir);
}

/* ---- gradient checks: tape backward against central differences ---- */

static const guint32 gc_tokens[12] = { 3, 5, 7, 3, 5, 7, 3, 5, 9, 3, 5, 11 };

static double
gc_loss (HnHierModel *m, HnHTape *t, float *grads)
{
  g_autoptr (HnHierState) s = hn_hier_state_new (m);
  gint32 labels[11];
  for (int i = 0; i < 11; i++)
    labels[i] = (gint32) gc_tokens[i + 1];
  HnHierLoss l;
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_hier_chunk_loss (t, m, grads, 1.0f, s, gc_tokens, labels, NULL, 11, HN_HIER_LOSS_SOFT_PONDER, &l,
                                     &error));
  return l.total;
}

static void
gradcheck (const char *const *names)
{
  HnHierConfig c;
  tiny_config (&c);
  c.detach_every_n_steps = 0; /* full BPTT inside the chunk */
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierModel) m = hn_hier_model_new (&c, &error);
  hn_hier_config_clear (&c);
  hn_hier_model_init_weights (m, 5);
  hier_test_perturb (m, 9, 0.1f);
  /* Faster decays (w near 0) so the decay path carries gradients well above
   * the finite-difference noise of a float loss. */
  for (int cell = 0; cell < 2; cell++)
    {
      float *w0 = hn_hier_model_data (m, cell ? "l_rnn.w0" : "h_rnn.w0");
      for (int i = 0; i < 16; i++)
        w0[i] = -0.5f + 0.07f * (float) i;
    }
  HnHTape *t = hn_htape_new ();
  float *grads = g_new0 (float, m->n_params);
  double base = gc_loss (m, t, grads);
  g_assert_true (isfinite (base));
  HnRng rng;
  hn_rng_seed (&rng, 77);
  int checked = 0;
  for (int k = 0; names[k]; k++)
    {
      HnHierParam *p = hn_hier_model_param (m, names[k]);
      g_assert_nonnull (p);
      /* the 3 largest analytic gradients and 3 random elements */
      gsize pick[6];
      for (int j = 0; j < 3; j++)
        {
          gsize best = 0;
          float bv = -1;
          for (gsize e = 0; e < p->numel; e++)
            {
              gboolean used = FALSE;
              for (int q = 0; q < j; q++)
                used |= pick[q] == e;
              float a = fabsf (grads[p->offset + e]);
              if (!used && a > bv)
                {
                  bv = a;
                  best = e;
                }
            }
          pick[j] = best;
        }
      for (int j = 3; j < 6; j++)
        pick[j] = (gsize) (hn_rng_uniform (&rng) * (double) p->numel);
      double maxg = 0;
      for (int j = 0; j < 6; j++)
        maxg = MAX (maxg, fabs (grads[p->offset + pick[j]]));
      g_assert_cmpfloat (maxg, >, 1e-6); /* the component is reached at all */
      if (g_getenv ("HIER_GC_DEBUG"))
        g_printerr ("%s: max |grad| %.3g\n", names[k], maxg);
      for (int j = 0; j < 6; j++)
        {
          /* Central differences at three step sizes: the loss is piecewise
           * smooth (hard top-k, halting and refinement stops, clamps), so a
           * step may straddle a kink; a correct gradient matches at one. */
          float *w = m->params + p->offset + pick[j];
          float keep = *w;
          double an = grads[p->offset + pick[j]], fd = 0;
          gboolean match = FALSE;
          for (int si = 0; si < 3 && !match; si++)
            {
              float eps = (si == 0 ? 1e-2f : si == 1 ? 3e-3f : 1e-3f) * MAX (1.0f, fabsf (keep));
              *w = keep + eps;
              double lp = gc_loss (m, t, NULL);
              *w = keep - eps;
              double lm = gc_loss (m, t, NULL);
              *w = keep;
              fd = (lp - lm) / (2.0 * eps);
              double tol = 0.03 * MAX (fabs (fd), fabs (an)) + 1e-4;
              match = fabs (fd - an) <= tol;
            }
          if (!match && g_getenv ("HIER_GC_DEBUG"))
            for (float e2 = 3e-3f; e2 > 1e-6f; e2 /= 3)
              {
                *w = keep + e2;
                double a1 = gc_loss (m, t, NULL);
                *w = keep - e2;
                double a2 = gc_loss (m, t, NULL);
                *w = keep;
                g_printerr ("  eps %g: fd %.6g\n", e2, (a1 - a2) / (2.0 * e2));
              }
          if (!match)
            g_error ("%s[%zu]: analytic %.6g vs finite difference %.6g", names[k], pick[j], an, fd);
          checked++;
        }
    }
  g_assert_cmpint (checked, >, 0);
  g_free (grads);
  hn_htape_free (t);
}

static void
test_grad_cell (void)
{
  const char *const names[] = { "h_rnn.receptance.weight", "h_rnn.key.weight", "h_rnn.value.weight", "h_rnn.output.weight",
                                "h_rnn.w1", "h_rnn.w2", "h_rnn.w0", "h_rnn.a1", "h_rnn.a2", "h_rnn.g1", "h_rnn.g2",
                                "h_rnn.k_k", "h_rnn.k_a", "h_rnn.r_k", "h_rnn.x_r", "h_rnn.x_w", "h_rnn.x_k", "h_rnn.x_g",
                                "h_rnn.ln1.weight", "h_rnn.ln_x.weight", "h_rnn.key_cm.weight", "h_rnn.value_cm.weight",
                                "h_rnn.x_k_cm", "l_rnn.receptance.weight", "l_rnn.value.weight", "l_rnn.a2",
                                "l_rnn.ln2.bias", "h_deepembed_adapter.up.weight", "l_deepembed_adapter.down.weight",
                                "lm_head.weight", "out_norm.weight", NULL };
  gradcheck (names);
}

static void
test_grad_halting (void)
{
  const char *const names[] = { "h_halt_proj.weight", "h_halt_proj.bias", "h_to_context.weight", "h_to_context.bias", NULL };
  gradcheck (names);
}

static void
test_grad_drift (void)
{
  const char *const names[] = { "context_drift_proj.weight", "l_input_proj.weight", "l_input_proj.bias",
                                "l_feedback_proj.weight", "l_to_out.weight", NULL };
  gradcheck (names);
}

static void
test_grad_ltm (void)
{
  const char *const names[] = { "ltm.vals", "ltm_gate_logit", "ltm_router.weight", "ltm_router.bias", "in_proj.weight",
                                "persistent", NULL };
  gradcheck (names);
}

static void
test_grad_rosa (void)
{
  const char *const names[] = { "rosa_gate_logit", "rosa_router.weight", "rosa_router.bias", "rosa_adapter.down.weight",
                                "rosa_adapter.up.weight", "rosa_adapter.bias", NULL };
  gradcheck (names);
}

/* ---- training ---- */

static guint32 *
toy_corpus (gsize n)
{
  /* a noisy repeating pattern: learnable in a few steps */
  guint32 *tok = g_new (guint32, n);
  guint32 lcg = 12345;
  const guint32 pat[] = { 1, 4, 9, 16, 25, 36, 2, 3, 5, 7, 11, 13 };
  for (gsize i = 0; i < n; i++)
    {
      lcg = lcg * 1664525u + 1013904223u;
      tok[i] = (lcg >> 28) == 0 ? (lcg >> 8) % 40 : pat[i % G_N_ELEMENTS (pat)];
    }
  return tok;
}

typedef struct {
  GArray *losses;
} Metrics;

static void
on_metric (const char *line, gpointer data)
{
  Metrics *mt = data;
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, line, -1, NULL));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  const char *keys[] = { "step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s" };
  for (gsize i = 0; i < G_N_ELEMENTS (keys); i++)
    g_assert_true (json_object_has_member (o, keys[i]));
  double l = json_object_get_double_member (o, "loss");
  g_array_append_val (mt->losses, l);
}

static void
train_opts (HnHierTrainOptions *o, const char *out, guint32 *tok, gsize n)
{
  hn_hier_train_options_defaults (o);
  o->out_dir = out;
  o->tokens = tok;
  o->n_tokens = n;
  o->batch_size = 2;
  o->accumulation_steps = 2;
  o->chunk_size = 8;
  o->max_length = 16;
  o->lr = 3e-3;
  o->min_lr = 1e-4;
  o->warmup_steps = 2;
  o->seed = 99;
  o->threads = 2;
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *f;
      while (d && (f = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, f, NULL);
          rm_rf (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

static void
test_train_loss_falls (void)
{
  g_autoptr (HnHierModel) m = tiny_model (21);
  gsize n = 16 * 24 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autofree char *dir = g_dir_make_tmp ("hier-train-XXXXXX", NULL);
  HnHierTrainOptions o;
  train_opts (&o, dir, tok, n);
  o.max_steps = 30;
  Metrics mt = { g_array_new (FALSE, FALSE, sizeof (double)) };
  o.on_metric = on_metric;
  o.on_metric_data = &mt;
  g_autoptr (GError) error = NULL;
  double final = 0;
  g_assert_true (hn_hier_train (m, &o, &final, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (mt.losses->len, ==, 30);
  double first = (g_array_index (mt.losses, double, 0) + g_array_index (mt.losses, double, 1)) / 2;
  double last = (g_array_index (mt.losses, double, 28) + g_array_index (mt.losses, double, 29)) / 2;
  g_test_message ("loss %.4f -> %.4f", first, last);
  g_assert_cmpfloat (last, <, first * 0.7);
  /* the output folder is a loadable model */
  g_autoptr (HnHierModel) m2 = hn_hier_model_load (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (m->params, m->n_params * 4, m2->params, m2->n_params * 4);
  g_array_unref (mt.losses);
  rm_rf (dir);
}

typedef struct {
  GCancellable *c;
  int stop, n;
} StopAt;

static void
stop_at_metric (const char *line, gpointer data)
{
  StopAt *s = data;
  if (++s->n == s->stop)
    g_cancellable_cancel (s->c);
}

static void
test_train_resume_exact (void)
{
  gsize n = 16 * 12 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autofree char *d1 = g_dir_make_tmp ("hier-a-XXXXXX", NULL);
  g_autofree char *d2 = g_dir_make_tmp ("hier-b-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  /* 7 steps straight (crossing the 3-step epoch boundary twice) */
  g_autoptr (HnHierModel) a = tiny_model (31);
  HnHierTrainOptions o;
  train_opts (&o, d1, tok, n);
  o.max_steps = 7;
  g_assert_true (hn_hier_train (a, &o, NULL, &error));
  g_assert_no_error (error);
  /* the same run interrupted after the checkpoint at step 4 ... */
  g_autoptr (HnHierModel) b = tiny_model (31);
  train_opts (&o, d2, tok, n);
  o.max_steps = 7;
  o.save_steps = 4;
  o.threads = 1; /* the thread count does not change results */
  StopAt stop = { g_cancellable_new (), 4, 0 };
  o.cancellable = stop.c;
  o.on_metric = stop_at_metric;
  o.on_metric_data = &stop;
  g_assert_false (hn_hier_train (b, &o, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_CANCELLED);
  g_clear_error (&error);
  g_object_unref (stop.c);
  g_autofree char *ck = g_build_filename (d2, "checkpoint-epoch-1-step-4", NULL);
  g_assert_true (g_file_test (ck, G_FILE_TEST_IS_DIR));
  /* ... resumed from it: bit-exact with the straight run */
  g_autoptr (HnHierModel) c = hn_hier_model_load (ck, &error);
  g_assert_no_error (error);
  g_autofree char *d3 = g_dir_make_tmp ("hier-c-XXXXXX", NULL);
  train_opts (&o, d3, tok, n);
  o.max_steps = 7;
  o.resume_from = ck;
  hn_hier_train (c, &o, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (a->params, a->n_params * 4, c->params, c->n_params * 4);
  /* resuming with other data is refused */
  g_autoptr (HnHierModel) e = hn_hier_model_load (ck, &error);
  tok[5] ^= 1;
  g_assert_false (hn_hier_train (e, &o, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT);
  rm_rf (d1);
  rm_rf (d2);
  rm_rf (d3);
}

static gboolean
stop_requested (gpointer data)
{
  StopAt *s = data;
  return s->n >= s->stop;
}

static void
count_metric (const char *line, gpointer data)
{
  ((StopAt *) data)->n++;
}

/* "Stop and save": a checkpoint of the step reached that resumes bit-exact. */
static void
test_train_stop_and_save (void)
{
  gsize n = 16 * 12 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autofree char *d1 = g_dir_make_tmp ("hier-a-XXXXXX", NULL);
  g_autofree char *d2 = g_dir_make_tmp ("hier-b-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierModel) a = tiny_model (33);
  HnHierTrainOptions o;
  train_opts (&o, d1, tok, n);
  o.max_steps = 7;
  g_assert_true (hn_hier_train (a, &o, NULL, &error));
  g_assert_no_error (error);
  /* stopped after step 5 (no --save-steps checkpoint there) */
  g_autoptr (HnHierModel) b = tiny_model (33);
  train_opts (&o, d2, tok, n);
  o.max_steps = 7;
  o.save_steps = 2;
  StopAt stop = { NULL, 5, 0 };
  g_autofree char *at = NULL;
  o.on_metric = count_metric;
  o.on_metric_data = &stop;
  o.stop_requested = stop_requested;
  o.stop_data = &stop;
  o.stopped_at = &at;
  g_assert_true (hn_hier_train (b, &o, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (stop.n, ==, 5);
  g_autofree char *ck = g_build_filename (d2, "checkpoint-epoch-1-step-5", NULL);
  g_assert_cmpstr (at, ==, ck);
  g_assert_true (g_file_test (ck, G_FILE_TEST_IS_DIR));
  /* a stopped run does not write the final model */
  g_autofree char *final = g_build_filename (d2, "model.safetensors", NULL);
  g_assert_false (g_file_test (final, G_FILE_TEST_EXISTS));
  /* resumed and stopped again at once: nothing new, the same checkpoint */
  g_autoptr (HnHierModel) c = hn_hier_model_load (ck, &error);
  g_assert_no_error (error);
  g_autofree char *at2 = NULL;
  o.resume_from = ck;
  o.stopped_at = &at2;
  g_assert_true (hn_hier_train (c, &o, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (at2, ==, ck);
  g_assert_false (g_file_test (final, G_FILE_TEST_EXISTS));
  /* stopped at step 6, where --save-steps already wrote the checkpoint */
  g_autofree char *at3 = NULL;
  stop = (StopAt) { NULL, 1, 0 };
  o.stopped_at = &at3;
  g_assert_true (hn_hier_train (c, &o, NULL, &error));
  g_assert_no_error (error);
  g_autofree char *ck6 = g_build_filename (d2, "checkpoint-epoch-1-step-6", NULL);
  g_assert_cmpstr (at3, ==, ck6);
  /* resumed to the end: bit-exact with the straight run */
  g_autoptr (HnHierModel) e = hn_hier_model_load (ck6, &error);
  g_assert_no_error (error);
  o.resume_from = ck6;
  o.stop_requested = NULL;
  g_assert_true (hn_hier_train (e, &o, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (a->params, a->n_params * 4, e->params, e->n_params * 4);
  g_assert_true (g_file_test (final, G_FILE_TEST_EXISTS));
  rm_rf (d1);
  rm_rf (d2);
}

typedef struct {
  gsize base, peak;
} HeapPeak;

/* Bytes the allocator hands out (heap + mmapped), glibc only. */
static gsize
heap_bytes (void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2 ();
  return mi.uordblks + mi.hblkhd;
#else
  return 0;
#endif
}

static void
heap_at_metric (const char *line, gpointer data)
{
  HeapPeak *h = data;
  h->peak = MAX (h->peak, heap_bytes ());
}

/* The memory estimate of the CPU trainer against what a run holds: its own
 * counters and, on glibc, the allocator's bytes in use during the steps. */
static void
test_train_memory_estimate (void)
{
  HnHierConfig c;
  tiny_config (&c);
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierModel) m = hn_hier_model_new (&c, &error);
  g_assert_no_error (error);
  hn_hier_config_clear (&c);
  hn_hier_model_init_weights (m, 5);
  gsize n = 64 * 24 + 1;
  g_autofree guint32 *tok = toy_corpus (n);
  g_autofree char *d = g_dir_make_tmp ("hier-mem-XXXXXX", NULL);
  HnHierTrainOptions o;
  train_opts (&o, d, tok, n);
  o.chunk_size = 64;
  o.max_length = 64;
  o.batch_size = 4;
  o.max_steps = 2;
  o.threads = 1; /* every allocation on this thread's arena */
  HnHierTrainMemory est, got;
  g_assert_true (hn_hier_train_memory (m, &o, &est, &error));
  g_assert_no_error (error);
  HeapPeak h = { heap_bytes (), 0 };
  o.on_metric = heap_at_metric;
  o.on_metric_data = &h;
  o.measured = &got;
  g_assert_true (hn_hier_train (m, &o, NULL, &error));
  g_assert_no_error (error);
  guint64 te = est.params + est.grads + est.optimizer + est.tapes;
  guint64 tg = got.params + got.grads + got.optimizer + got.tapes;
  g_test_message ("estimate %" G_GUINT64_FORMAT " (tape %" G_GUINT64_FORMAT "), trainer %" G_GUINT64_FORMAT
                  " (tape %" G_GUINT64_FORMAT "), allocator %zu", te, est.tapes, tg, got.tapes, h.peak - h.base);
  g_assert_cmpint (est.threads, ==, 1);
  g_assert_cmpfloat (fabs ((double) est.tapes - (double) got.tapes), <=, 0.2 * (double) got.tapes);
  g_assert_cmpfloat (fabs ((double) te - (double) tg), <=, 0.2 * (double) tg);
  if (h.base)
    g_assert_cmpfloat (fabs ((double) te - (double) (h.peak - h.base)), <=, 0.2 * (double) (h.peak - h.base));
  rm_rf (d);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hierarchos/python-repr", test_python_repr);
  g_test_add_func ("/hierarchos/contract", test_contract);
  g_test_add_func ("/hierarchos/rosa", test_rosa);
  g_test_add_func ("/hierarchos/runtime-deterministic", test_runtime_deterministic);
  g_test_add_func ("/hierarchos/save-load", test_save_load);
  g_test_add_func ("/hierarchos/state-file", test_state_file);
  g_test_add_func ("/hierarchos/grad/cell", test_grad_cell);
  g_test_add_func ("/hierarchos/grad/halting", test_grad_halting);
  g_test_add_func ("/hierarchos/grad/drift", test_grad_drift);
  g_test_add_func ("/hierarchos/grad/ltm-read", test_grad_ltm);
  g_test_add_func ("/hierarchos/grad/rosa-gate", test_grad_rosa);
  g_test_add_func ("/hierarchos/train/loss-falls", test_train_loss_falls);
  g_test_add_func ("/hierarchos/train/resume-exact", test_train_resume_exact);
  g_test_add_func ("/hierarchos/train/stop-and-save", test_train_stop_and_save);
  g_test_add_func ("/hierarchos/train/memory-estimate", test_train_memory_estimate);
  return g_test_run ();
}
