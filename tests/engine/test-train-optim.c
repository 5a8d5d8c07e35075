/* AdamW, SGD, clipping, LR schedules, the decay set and the dropout RNG. */
#include <math.h>
#include <string.h>

#include "tensor/optim.h"

static void
test_adamw_first_steps (void)
{
  /* Step 1 from zero state moves every weight by lr·g/(|g| + eps): sign steps. */
  float p[4] = { 1.0f, -2.0f, 0.5f, 0.0f };
  float g[4] = { 0.3f, -4.0f, 1e-3f, -0.7f };
  float m[4] = { 0 }, v[4] = { 0 };
  hn_adamw_step_cpu (p, g, m, v, 4, 1, 0.01, 0.9, 0.999, 1e-8, 0.0);
  g_assert_cmpfloat_with_epsilon (p[0], 1.0f - 0.01f, 1e-6);
  g_assert_cmpfloat_with_epsilon (p[1], -2.0f + 0.01f, 1e-6);
  g_assert_cmpfloat_with_epsilon (p[2], 0.5f - 0.01f, 1e-5);
  g_assert_cmpfloat_with_epsilon (p[3], 0.01f, 1e-6);
  /* Step 2 by hand in double: m = .9·m + .1·g, v = .999·v + .001·g² */
  double m1 = 0.1 * 0.3, v1 = 0.001 * 0.09;
  double g2 = -0.5, m2 = 0.9 * m1 + 0.1 * g2, v2 = 0.999 * v1 + 0.001 * g2 * g2;
  double expect = (1.0 - 0.01) - 0.01 / (1 - 0.81) * m2 / (sqrt (v2) / sqrt (1 - 0.999 * 0.999) + 1e-8);
  float g2f[4] = { -0.5f, 0, 0, 0 };
  hn_adamw_step_cpu (p, g2f, m, v, 1, 2, 0.01, 0.9, 0.999, 1e-8, 0.0);
  g_assert_cmpfloat_with_epsilon (p[0], expect, 1e-6);
}

static void
test_adamw_weight_decay (void)
{
  /* With a zero gradient the only change is the decoupled decay p·(1 - lr·wd). */
  float p[1] = { 2.0f }, g[1] = { 0 }, m[1] = { 0 }, v[1] = { 0 };
  hn_adamw_step_cpu (p, g, m, v, 1, 1, 0.1, 0.9, 0.999, 1e-8, 0.5);
  g_assert_cmpfloat_with_epsilon (p[0], 2.0f * 0.95f, 1e-6);
}

static void
test_sgd (void)
{
  float p[2] = { 1.0f, 1.0f }, g[2] = { 0.5f, -1.0f }, buf[2] = { 0 };
  hn_sgd_step_cpu (p, g, buf, 2, TRUE, 0.1, 0.9, 0.0);
  g_assert_cmpfloat_with_epsilon (p[0], 0.95f, 1e-6);
  hn_sgd_step_cpu (p, g, buf, 2, FALSE, 0.1, 0.9, 0.0);
  /* buf = 0.9·0.5 + 0.5 = 0.95 */
  g_assert_cmpfloat_with_epsilon (p[0], 0.95f - 0.095f, 1e-6);
  float q[1] = { 2.0f }, z[1] = { 0 };
  hn_sgd_step_cpu (q, z, NULL, 1, TRUE, 0.1, 0.0, 0.5);
  g_assert_cmpfloat_with_epsilon (q[0], 2.0f - 0.1f, 1e-6);
}

static void
test_clip (void)
{
  g_assert_cmpfloat (hn_clip_coef (0.5, 1.0), ==, 1.0f);
  g_assert_cmpfloat_with_epsilon (hn_clip_coef (4.0, 1.0), 0.25f, 1e-6);
  g_assert_cmpfloat (hn_clip_coef (100.0, 0.0), ==, 1.0f);
}

static void
test_decay_set (void)
{
  g_assert_true (hn_param_wants_decay ("model.layers.0.self_attn.q_proj.weight"));
  g_assert_true (hn_param_wants_decay ("model.embed_tokens.weight"));
  g_assert_true (hn_param_wants_decay ("transformer.h.0.attn.c_attn.weight"));
  g_assert_false (hn_param_wants_decay ("transformer.h.0.attn.c_attn.bias"));
  g_assert_false (hn_param_wants_decay ("model.layers.0.input_layernorm.weight"));
  g_assert_false (hn_param_wants_decay ("model.norm.weight"));
  g_assert_false (hn_param_wants_decay ("model.layers.1.self_attn.q_norm.weight"));
  g_assert_false (hn_param_wants_decay ("transformer.h.0.ln_1.weight"));
  g_assert_false (hn_param_wants_decay ("transformer.ln_f.weight"));
}

static void
test_schedules (void)
{
  HnLrSchedule s = { HN_LR_LINEAR, 2, 10 };
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 0), ==, 0.0);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 1), ==, 0.5);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 2), ==, 1.0);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 6), ==, 0.5);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 10), ==, 0.0);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 12), ==, 0.0);
  s.kind = HN_LR_COSINE;
  g_assert_cmpfloat_with_epsilon (hn_lr_schedule_factor (&s, 6), 0.5, 1e-12);
  g_assert_cmpfloat_with_epsilon (hn_lr_schedule_factor (&s, 2), 1.0, 1e-12);
  g_assert_cmpfloat_with_epsilon (hn_lr_schedule_factor (&s, 4), 0.5 * (1 + cos (G_PI * 0.25)), 1e-12);
  s.kind = HN_LR_CONSTANT;
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 1), ==, 0.5);
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 9), ==, 1.0);
  s.warmup_steps = 0;
  g_assert_cmpfloat (hn_lr_schedule_factor (&s, 0), ==, 1.0);

  HnLrScheduleKind k;
  g_autoptr (GError) error = NULL;
  g_assert_true (hn_lr_schedule_kind_from_string ("cosine", &k, &error) && k == HN_LR_COSINE);
  g_assert_false (hn_lr_schedule_kind_from_string ("polynomial", &k, &error));
  g_assert_nonnull (strstr (error->message, "polynomial"));
}

static void
test_dropout_rng (void)
{
  /* Deterministic, and the keep rate is about 1 - p. */
  guint32 stream = hn_dropout_stream (7, 0, 3);
  g_assert_cmpuint (stream, ==, hn_dropout_stream (7, 0, 3));
  g_assert_cmpuint (stream, !=, hn_dropout_stream (8, 0, 3));
  int kept = 0;
  for (guint32 i = 0; i < 100000; i++)
    kept += hn_dropout_keep (42, stream, i, 0.1f);
  g_assert_cmpint (kept, >, 89500);
  g_assert_cmpint (kept, <, 90500);
  g_assert_cmpuint (hn_rng_u32 (1, 2, 3), ==, hn_rng_u32 (1, 2, 3));
  g_assert_cmpuint (hn_rng_u32 (1, 2, 3), !=, hn_rng_u32 (2, 2, 3));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/train/optim/adamw", test_adamw_first_steps);
  g_test_add_func ("/train/optim/adamw-weight-decay", test_adamw_weight_decay);
  g_test_add_func ("/train/optim/sgd", test_sgd);
  g_test_add_func ("/train/optim/clip", test_clip);
  g_test_add_func ("/train/optim/decay-set", test_decay_set);
  g_test_add_func ("/train/optim/schedules", test_schedules);
  g_test_add_func ("/train/optim/dropout-rng", test_dropout_rng);
  return g_test_run ();
}
