/* Hierarchos training on the Vulkan runner: the training program's
 * gradients (through the CPU references of every backward op) against the
 * CPU tape's, the device's against the references', and AdamW losses of the
 * Vulkan trainer against the CPU trainer. */
#include "hierarchos/hierarchos-vk-private.h"
#include "base/hn-error.h"
#include "base/hn-folder.h"
#include "hier-test-util.h"
#include "train/checkpoint.h"

#include <math.h>
#include <string.h>

#define N_TOK 24
#define CHUNK 12
#define ROWS 3

/* Early halting and early convergence both happen on these settings: the
 * test counts them. */
static HnHierModel *
model_for (guint64 seed)
{
  HnHierConfig c;
  hier_test_tiny_config (&c, 40, 16);
  c.h_halt_thresh = 0.6;
  c.l_conv_atol = 0.05;
  c.detach_every_n_steps = 5;
  HnHierModel *m = hier_test_model (&c, seed);
  hier_test_perturb (m, seed + 1, 0.05f);
  return m;
}

/* Row k's tokens (N_TOK + 1): repeats, so ROSA predicts in some rows and
 * positions and not in others. */
static void
row_tokens (int k, guint32 *tok)
{
  const guint32 pat[] = { 3, 7, 1, 3, 7, 2, 9, 3, 7, 1 };
  guint32 lcg = 777u + (guint32) k * 31u;
  for (int i = 0; i <= N_TOK; i++)
    {
      lcg = lcg * 1664525u + 1013904223u;
      tok[i] = k == 1 ? (lcg >> 8) % 40 : pat[(i + k) % G_N_ELEMENTS (pat)] + (guint32) ((lcg >> 29) == 0 ? 20 : 0);
    }
}

typedef struct {
  float *grads; /* the rows' sum */
  HnHierLoss loss[ROWS];
  int early_halt, early_conv; /* tokens that halted / converged before the maximum */
} RunOut;

static void
run_out_clear (RunOut *o)
{
  g_free (o->grads);
}

/* The CPU tape: each row from a zero state, chunk by chunk. */
static void
run_tape (HnHierModel *m, RunOut *o)
{
  g_autoptr (GError) error = NULL;
  HnHTape *t = hn_htape_new ();
  g_autoptr (HnHierState) s = hn_hier_state_new (m);
  float scale = 1.0f / (ROWS * (N_TOK / CHUNK));
  o->grads = g_new0 (float, m->n_params);
  for (int k = 0; k < ROWS; k++)
    {
      guint32 tok[N_TOK + 1];
      row_tokens (k, tok);
      hn_hier_state_reset (m, s);
      memset (&o->loss[k], 0, sizeof o->loss[k]);
      for (int c = 0; c < N_TOK; c += CHUNK)
        {
          HnHierLoss l;
          gint32 lab[CHUNK];
          for (int i = 0; i < CHUNK; i++)
            lab[i] = (gint32) tok[c + i + 1];
          g_assert_true (hn_hier_chunk_loss (t, m, o->grads, scale, s, tok + c, lab, NULL, CHUNK, 0, &l, &error));
          g_assert_no_error (error);
          o->loss[k].total += l.total;
          o->loss[k].ponder += l.ponder;
          o->loss[k].commit += l.commit;
        }
    }
  hn_htape_free (t);
}

/* The Vulkan trainer (ctx NULL: its programs through the CPU references). */
static void
run_vk (HnHierModel *m, HnVkContext *ctx, RunOut *o)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (HnHierVkRunner) r = hn_hier_vk_trainer_new (m, ctx, ROWS, CHUNK, &error);
  g_assert_no_error (error);
  HnHierState *s[ROWS];
  guint32 tok[ROWS][N_TOK + 1];
  float scale = 1.0f / (ROWS * (N_TOK / CHUNK));
  for (int k = 0; k < ROWS; k++)
    {
      s[k] = hn_hier_state_new (m);
      row_tokens (k, tok[k]);
      memset (&o->loss[k], 0, sizeof o->loss[k]);
    }
  o->grads = g_new0 (float, m->n_params);
  int max_h = (int) m->cfg.max_h_steps, max_l = (int) m->cfg.max_l_steps;
  for (int c = 0; c < N_TOK; c += CHUNK)
    {
      const guint32 *in[ROWS];
      const gint32 *lab[ROWS];
      gint32 labs[ROWS][CHUNK];
      for (int k = 0; k < ROWS; k++)
        {
          in[k] = tok[k] + c;
          for (int i = 0; i < CHUNK; i++)
            labs[k][i] = (gint32) tok[k][c + i + 1];
          lab[k] = labs[k];
        }
      HnHierLoss l[ROWS];
      g_assert_true (hn_hier_vk_train_chunk (r, s, ROWS, in, lab, NULL, CHUNK, scale, l, &error));
      g_assert_no_error (error);
      for (int k = 0; k < ROWS; k++)
        {
          o->loss[k].total += l[k].total;
          o->loss[k].ponder += l[k].ponder;
          o->loss[k].commit += l[k].commit;
          for (int i = 0; i < CHUNK; i++)
            {
              float w[3], f[HN_HIER_MAX_STEPS];
              gsize base = (gsize) k * r->rs;
              if (r->to[i].pondered)
                {
                  g_assert_true (hn_hier_vk_wk_download (r, base + r->to[i].ctl, w, 3, &error));
                  o->early_halt += w[2] < (float) max_h;
                }
              g_assert_true (hn_hier_vk_wk_download (r, base + r->to[i].flags, f, (gsize) max_l + 1, &error));
              o->early_conv += f[max_l - 1] == 0.0f;
            }
        }
    }
  g_assert_true (hn_hier_vk_train_take_grads (r, ROWS, o->grads, &error));
  g_assert_no_error (error);
  for (int k = 0; k < ROWS; k++)
    hn_hier_state_free (s[k]);
}

/* Every parameter's gradient (the rows' sum) within tol of the reference,
 * relative to the largest gradient of its tensor (tensors with no gradient
 * must match at 0); every row's loss within 1e-4. */
static void
compare_grads (HnHierModel *m, const RunOut *want, const RunOut *got, double tol, const char *what)
{
  double worst = 0;
  for (int k = 0; k < ROWS; k++)
    g_assert_cmpfloat (fabs (got->loss[k].total - want->loss[k].total), <, 1e-4 * (1 + fabs (want->loss[k].total)));
  for (guint i = 0; i < m->param_list->len; i++)
    {
      HnHierParam *p = m->param_list->pdata[i];
      double gmax = 0;
      for (gsize j = 0; j < p->numel; j++)
        gmax = MAX (gmax, fabs (want->grads[p->offset + j]));
      for (gsize j = 0; j < p->numel; j++)
        {
          double d = fabs ((double) got->grads[p->offset + j] - want->grads[p->offset + j]);
          double rel = gmax < 1e-12 ? d : d / gmax;
          worst = MAX (worst, rel);
          if (rel > tol)
            g_error ("%s: %s[%zu]: %.8g, reference %.8g (largest |grad| %.3g)", what, p->name, j,
                     got->grads[p->offset + j], want->grads[p->offset + j], gmax);
        }
    }
  g_test_message ("%s: worst gradient difference %.3g of its tensor's largest", what, worst);
}

static void
test_program_gradients (void)
{
  g_autoptr (HnHierModel) m = model_for (5);
  RunOut tape = { 0 }, ref = { 0 };
  run_tape (m, &tape);
  run_vk (m, NULL, &ref);
  g_test_message ("%d pondering tokens halted early, %d tokens converged early", ref.early_halt, ref.early_conv);
  g_assert_cmpint (ref.early_halt, >, 0);
  g_assert_cmpint (ref.early_conv, >, 0);
  compare_grads (m, &tape, &ref, 1e-4, "training program (CPU references) vs tape");
  run_out_clear (&tape);
  run_out_clear (&ref);
}

/* The default device, or NULL with the test marked skipped. */
static HnVkContext *
device_or_skip (void)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *ctx = hn_vk_context_get_default (&error);
  if (!ctx)
    g_test_skip_printf ("no Vulkan device: %s", error->message);
  return ctx;
}

static void
test_device_gradients (void)
{
  g_autoptr (HnVkContext) ctx = device_or_skip ();
  if (!ctx)
    return;
  g_autoptr (HnHierModel) m = model_for (5);
  RunOut ref = { 0 }, dev = { 0 };
  run_vk (m, NULL, &ref);
  run_vk (m, ctx, &dev);
  compare_grads (m, &ref, &dev, 1e-4, "training program on the device vs CPU references");
  run_out_clear (&ref);
  run_out_clear (&dev);
}

/* ---- AdamW steps: the Vulkan trainer against the CPU trainer ---- */

static guint32 *
corpus (gsize n)
{
  guint32 *tok = g_new (guint32, n);
  guint32 lcg = 4242;
  const guint32 pat[] = { 1, 4, 9, 16, 25, 36, 2, 3, 5, 7, 11, 13 };
  for (gsize i = 0; i < n; i++)
    {
      lcg = lcg * 1664525u + 1013904223u;
      tok[i] = (lcg >> 28) == 0 ? (lcg >> 8) % 40 : pat[i % G_N_ELEMENTS (pat)];
    }
  return tok;
}

static void
collect_loss (const char *line, gpointer data)
{
  const char *at = strstr (line, "\"loss\":");
  g_assert_nonnull (at);
  double l = g_ascii_strtod (at + 7, NULL);
  g_array_append_val ((GArray *) data, l);
}

/* Four AdamW steps; masked: separate rows of 17 tokens with the dataset
 * layer's labels and weights (a 6-token prompt without loss, weights 0.5
 * and 1, every fourth row without any labelled position). */
static GArray *
train_losses (HnVkContext *ctx, int vk_rows, gboolean masked, const char *out)
{
  g_autoptr (HnHierModel) m = model_for (9);
  gsize n = 17 * 36;
  g_autofree guint32 *tok = corpus (n);
  g_autofree gint32 *labels = g_new (gint32, n);
  g_autofree float *weights = g_new (float, n);
  for (gsize i = 0; i < n; i++)
    {
      gboolean off = (i % 17) < 6 || (i / 17) % 4 == 0;
      labels[i] = off ? -100 : (gint32) tok[i];
      weights[i] = off ? 0.0f : (i % 3 ? 1.0f : 0.5f);
    }
  HnHierTrainOptions o;
  hn_hier_train_options_defaults (&o);
  o.out_dir = out;
  o.tokens = tok;
  o.n_tokens = n;
  if (masked)
    {
      o.separate_rows = TRUE;
      o.token_labels = labels;
      o.token_weights = weights;
    }
  o.batch_size = 3;
  o.accumulation_steps = 1;
  o.chunk_size = 8;
  o.max_length = 16;
  o.max_steps = 4;
  o.lr = 3e-3;
  o.min_lr = 1e-4;
  o.seed = 7;
  o.vk_ctx = ctx;
  o.vk_rows = vk_rows;
  GArray *losses = g_array_new (FALSE, FALSE, sizeof (double));
  o.on_metric = collect_loss;
  o.on_metric_data = losses;
  g_autoptr (GError) error = NULL;
  double final = 0;
  g_assert_true (hn_hier_train (m, &o, &final, &error));
  g_assert_no_error (error);
  return losses;
}

/* Four AdamW steps on the CPU trainer, on the Vulkan trainer, and on it in
 * two row groups; with data: the dataset layer's prompt masking and loss
 * weights on the device's cross-entropy. */
static void
test_adamw_losses (gconstpointer data)
{
  gboolean masked = GPOINTER_TO_INT (data);
  g_autoptr (HnVkContext) ctx = device_or_skip ();
  if (!ctx)
    return;
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("hn-hier-vk-train-XXXXXX", &error);
  g_assert_no_error (error);
  g_autofree char *a = g_build_filename (dir, "cpu", NULL);
  g_autofree char *b = g_build_filename (dir, "vk", NULL);
  g_autofree char *c = g_build_filename (dir, "vk2", NULL);
  g_autoptr (GArray) cpu = train_losses (NULL, 0, masked, a);
  g_autoptr (GArray) vk = train_losses (ctx, 0, masked, b);
  g_autoptr (GArray) vk2 = train_losses (ctx, 2, masked, c);
  g_assert_cmpuint (cpu->len, ==, 4);
  g_assert_cmpuint (vk->len, ==, 4);
  for (guint i = 0; i < cpu->len; i++)
    {
      double x = g_array_index (cpu, double, i), y = g_array_index (vk, double, i), z = g_array_index (vk2, double, i);
      g_test_message ("%sstep %u: CPU %.6f, Vulkan %.6f, Vulkan in 2-row groups %.6f", masked ? "masked " : "", i + 1,
                      x, y, z);
      g_assert_cmpfloat (fabs (x - y), <, 2e-3);
      g_assert_cmpfloat (fabs (y - z), <, 1e-5);
    }
  hn_folder_remove_tree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/hierarchos-vk-train/program-gradients", test_program_gradients);
  g_test_add_func ("/hierarchos-vk-train/device-gradients", test_device_gradients);
  g_test_add_data_func ("/hierarchos-vk-train/adamw-losses", GINT_TO_POINTER (FALSE), test_adamw_losses);
  g_test_add_data_func ("/hierarchos-vk-train/adamw-losses-masked", GINT_TO_POINTER (TRUE), test_adamw_losses);
  return g_test_run ();
}
