/* Training checkpoint sidecars: trainer_state.json NUL optimizer.safetensors,
 * resumed by the Hierarchos CPU trainer on a tiny model (one step at most).
 * HN_FUZZ_MAKE_SEED=FILE writes a valid pair (a real checkpoint) there. */
#include "fuzz-hier-common.h"

#include <string.h>

static HnHierModel *model;
static guint32 tokens[64];

static void
options (HnHierTrainOptions *o, const char *out)
{
  hn_hier_train_options_defaults (o);
  o->out_dir = out;
  o->tokens = tokens;
  o->n_tokens = G_N_ELEMENTS (tokens);
  o->batch_size = 1;
  o->accumulation_steps = 1;
  o->chunk_size = 8;
  o->max_length = 8;
  o->max_steps = 1;
  o->lr = 1e-3;
  o->min_lr = 0;
  o->seed = 3;
  o->threads = 1;
  o->quiet = TRUE;
}

static void
make_seed (const char *seed)
{
  g_autofree char *out = g_build_filename (fuzz_tmp_dir (), "seed-run", NULL);
  HnHierTrainOptions o;
  options (&o, out);
  o.save_steps = 1;
  o.max_steps = 2; /* the last step saves the final model, not a checkpoint */
  g_autoptr (GError) e = NULL;
  if (!hn_hier_train (model, &o, NULL, &e))
    g_error ("%s", e->message);
  g_autofree char *ck = g_build_filename (out, "checkpoint-epoch-0-step-1", NULL);
  g_autofree char *sp = g_build_filename (ck, "trainer_state.json", NULL);
  g_autofree char *op = g_build_filename (ck, "optimizer.safetensors", NULL);
  g_autofree char *s = NULL, *opt = NULL;
  gsize sl, ol;
  if (!g_file_get_contents (sp, &s, &sl, &e) || !g_file_get_contents (op, &opt, &ol, &e))
    g_error ("%s", e->message);
  g_autoptr (GByteArray) b = g_byte_array_new ();
  g_byte_array_append (b, (const guint8 *) s, sl);
  g_byte_array_append (b, (const guint8 *) "", 1);
  g_byte_array_append (b, (const guint8 *) opt, ol);
  if (!g_file_set_contents (seed, (const char *) b->data, b->len, &e))
    g_error ("%s", e->message);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (!model)
    {
      model = fuzz_hier_tiny_model ();
      for (gsize i = 0; i < G_N_ELEMENTS (tokens); i++)
        tokens[i] = (guint32) ((i * 13 + 1) % (gsize) model->V);
      if (g_getenv ("HN_FUZZ_MAKE_SEED"))
        make_seed (g_getenv ("HN_FUZZ_MAKE_SEED"));
    }
  const uint8_t *parts[2];
  size_t lens[2];
  guint n = fuzz_split (data, size, parts, lens, 2);
  g_autofree char *ck = g_build_filename (fuzz_tmp_dir (), "ck", NULL);
  g_autofree char *out = g_build_filename (fuzz_tmp_dir (), "out", NULL);
  g_mkdir_with_parents (ck, 0755);
  g_autofree char *sp = g_build_filename (ck, "trainer_state.json", NULL);
  g_autofree char *op = g_build_filename (ck, "optimizer.safetensors", NULL);
  if (!g_file_set_contents (sp, (const char *) parts[0], (gssize) lens[0], NULL))
    g_error ("cannot write %s", sp);
  if (n > 1)
    g_file_set_contents (op, (const char *) parts[1], (gssize) lens[1], NULL);
  else
    g_unlink (op);
  HnHierTrainOptions o;
  options (&o, out);
  o.resume_from = ck;
  g_autoptr (GError) error = NULL;
  /* A resumed run needs the same weights: train a copy-free fresh init. */
  hn_hier_model_init_weights (model, 5);
  hn_hier_train (model, &o, NULL, &error);
  return 0;
}
