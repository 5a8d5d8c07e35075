/* Masked-LM training pieces: the masking collator's statistics (15 % chosen,
 * of those 80 % mask / 10 % random / 10 % unchanged, specials never chosen,
 * labels -100 elsewhere) and its determinism with a seed; gradient clipping
 * in the encoder trainer; and a trained encoder written as a Hugging Face
 * folder loads back with the trained logits. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "encdec/encoder.h"
#include "parity-util.h"
#include "train/checkpoint.h"
#include "train/mlm.h"

static HnVkContext *ctx;

enum { VOCAB = 64, MASK_ID = 4, N_SPECIAL = 5 };

static void
masking (HnMlmMasking *mm, guint8 *special)
{
  memset (special, 0, VOCAB);
  memset (special, 1, N_SPECIAL);
  *mm = (HnMlmMasking) { 0.15, MASK_ID, VOCAB, special };
}

/* n ids, one in ten special, the rest ordinary */
static int32_t *
some_ids (gsize n, guint64 seed)
{
  HnRng r;
  hn_rng_seed (&r, seed);
  int32_t *ids = g_new (int32_t, n);
  for (gsize i = 0; i < n; i++)
    ids[i] = i % 10 == 0 ? (int32_t) (hn_rng_next (&r) % N_SPECIAL)
                         : N_SPECIAL + (int32_t) (hn_rng_next (&r) % (VOCAB - N_SPECIAL));
  return ids;
}

static void
test_mask_statistics (void)
{
  guint8 special[VOCAB];
  HnMlmMasking mm;
  masking (&mm, special);
  const gsize n = 400000;
  g_autofree int32_t *orig = some_ids (n, 1), *ids = g_memdup2 (orig, n * sizeof (int32_t));
  g_autofree int32_t *labels = g_new (int32_t, n);
  HnRng rng;
  hn_rng_seed (&rng, 42);
  gsize chosen = hn_mlm_mask (&mm, &rng, ids, labels, n);
  gsize eligible = 0, n_mask = 0, n_same = 0, n_other = 0, counted = 0;
  for (gsize i = 0; i < n; i++)
    {
      gboolean sp = special[orig[i]];
      eligible += !sp;
      if (labels[i] == -100)
        {
          g_assert_cmpint (ids[i], ==, orig[i]); /* not chosen: untouched */
          continue;
        }
      g_assert_false (sp);                       /* specials are never chosen */
      g_assert_cmpint (labels[i], ==, orig[i]); /* the label is the original token */
      counted++;
      if (ids[i] == MASK_ID)
        n_mask++;
      else if (ids[i] == orig[i])
        n_same++;
      else
        n_other++;
      g_assert_cmpint (ids[i], >=, 0);
      g_assert_cmpint (ids[i], <, VOCAB);
    }
  g_assert_cmpuint (chosen, ==, counted);
  double p = (double) chosen / eligible, pm = (double) n_mask / chosen;
  /* a random replacement lands on the original id 1/VOCAB of the time and counts as unchanged */
  double pr = (double) n_other / chosen, ps = (double) n_same / chosen;
  g_test_message ("chosen %.4f, mask %.4f, random %.4f, unchanged %.4f", p, pm, pr, ps);
  g_assert_cmpfloat (fabs (p - 0.15), <, 0.003);
  g_assert_cmpfloat (fabs (pm - 0.80), <, 0.01);
  g_assert_cmpfloat (fabs (pr - 0.10 * (1 - 1.0 / VOCAB)), <, 0.01);
  g_assert_cmpfloat (fabs (ps - 0.10 - 0.10 / VOCAB), <, 0.01);
}

static void
test_mask_seeded (void)
{
  guint8 special[VOCAB];
  HnMlmMasking mm;
  masking (&mm, special);
  const gsize n = 4096;
  g_autofree int32_t *orig = some_ids (n, 7);
  int32_t *ids[3], *labels[3];
  guint64 seeds[3] = { 5, 5, 6 };
  for (int k = 0; k < 3; k++)
    {
      HnRng rng;
      hn_rng_seed (&rng, seeds[k]);
      ids[k] = g_memdup2 (orig, n * sizeof (int32_t));
      labels[k] = g_new (int32_t, n);
      hn_mlm_mask (&mm, &rng, ids[k], labels[k], n);
    }
  g_assert_cmpmem (ids[0], n * sizeof (int32_t), ids[1], n * sizeof (int32_t));
  g_assert_cmpmem (labels[0], n * sizeof (int32_t), labels[1], n * sizeof (int32_t));
  g_assert_true (memcmp (labels[0], labels[2], n * sizeof (int32_t)) != 0);
  for (int k = 0; k < 3; k++)
    {
      g_free (ids[k]);
      g_free (labels[k]);
    }
}

/* A few masked-LM steps on the bert fixture (clipping at 1.0, then none); the folder
 * hn_checkpoint_write_named makes loads back with the same logits. */
static void
test_train_save_reload (void)
{
  GError *error = NULL;
  g_autofree char *dir = parity_fixture_dir ("bert");
  g_autoptr (HnEncoder) enc = hn_encoder_load (ctx, dir, &error);
  g_assert_no_error (error);
  enum { B = 2, T = 8, V = 128 };
  g_autoptr (HnEncoderTrainer) tr = hn_encoder_trainer_new (enc, B, T, &error);
  g_assert_no_error (error);
  guint8 special[V] = { 1, 1, 1, 1, 1 };
  HnMlmMasking mm = { 0.3, MASK_ID, V, special };
  HnRng rng;
  hn_rng_seed (&rng, 11);
  int32_t probe[T] = { 2, 9, 17, 33, 40, 71, 100, 3 };
  float before[T * V], after[T * V], reloaded[T * V];
  g_assert_true (hn_encoder_logits (enc, probe, NULL, T, before, &error));
  for (int s = 0; s < 3; s++)
    {
      int32_t ids[B * T], labels[B * T];
      for (int i = 0; i < B * T; i++)
        ids[i] = N_SPECIAL + (int32_t) (hn_rng_next (&rng) % (V - N_SPECIAL));
      ids[0] = MASK_ID; /* at least one target */
      hn_mlm_mask (&mm, &rng, ids, labels, B * T);
      labels[0] = 9;
      /* clipped at 1.0, the last step unclipped: the norm is measured either way */
      HnEncoderTrainStep st = { s + 1, 1e-2, 0.9, 0.999, 1e-8, 0, s < 2 ? 1.0 : 0.0 };
      double loss = 0;
      g_assert_true (hn_encoder_trainer_step (tr, ids, NULL, labels, &st, &loss, &error));
      g_assert_no_error (error);
      double norm = hn_encoder_trainer_get_grad_norm (tr);
      g_test_message ("step %d: loss %.4f grad norm %.4f", s + 1, loss, norm);
      g_assert_true (isfinite (loss) && isfinite (norm) && norm > 0);
    }
  g_assert_true (hn_encoder_logits (enc, probe, NULL, T, after, &error));
  g_autofree char *tmp = g_dir_make_tmp ("hn-mlm-XXXXXX", NULL);
  guint n = 0;
  HnTensor *const *w = hn_encoder_get_weights (enc, &n);
  g_assert_true (hn_checkpoint_write_named (dir, w, n, tmp, &error));
  g_assert_no_error (error);
  {
    g_autoptr (HnEncoder) back = hn_encoder_load (ctx, tmp, &error);
    g_assert_no_error (error);
    g_assert_true (hn_encoder_logits (back, probe, NULL, T, reloaded, &error));
  }
  double moved = 0;
  for (int i = 0; i < T * V; i++)
    {
      moved = MAX (moved, fabs (after[i] - before[i]));
      g_assert_cmpfloat (fabs (reloaded[i] - after[i]), <=, 1e-5);
    }
  g_assert_cmpfloat (moved, >, 1e-2); /* the saved model is the trained one, not the original */
  const char *files[] = { "model.safetensors", "config.json" };
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *p = g_build_filename (tmp, files[i], NULL);
      g_assert_cmpint (g_unlink (p), ==, 0);
    }
  g_assert_cmpint (g_rmdir (tmp), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  GError *error = NULL;
  ctx = hn_vk_context_new (-1, &error);
  g_assert_no_error (error);
  g_test_add_func ("/mlm/mask-statistics", test_mask_statistics);
  g_test_add_func ("/mlm/mask-seeded", test_mask_seeded);
  g_test_add_func ("/mlm/train-save-reload", test_train_save_reload);
  int rc = g_test_run ();
  hn_vk_context_unref (ctx);
  return rc;
}
