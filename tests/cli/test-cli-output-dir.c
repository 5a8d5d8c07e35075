/* Outputs never land on inputs, on another run's files or through a link
 * (issue 20, "Data loss"): the folder-replace step never deletes through a
 * symbolic link; merge-lora, transformer-train/-finetune and hierarchos-init
 * refuse an output folder that is an input's or holds files they did not
 * write, unless --overwrite-output-dir; stale temporary folders of a killed
 * run are removed. Runs the real CLI on the stories260K demo model. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli-util.h"
#include "base/hn-folder.h"

static char *root;  /* the test's temporary folder */
static char *model; /* data/demo/stories260K */
static char *data;  /* data/demo/tinyshakespeare-small.txt */

static char *
path (const char *name)
{
  return g_build_filename (root, name, NULL);
}

static void
put_file (const char *p, const char *text)
{
  g_autoptr (GError) error = NULL;
  g_assert_true (g_file_set_contents (p, text, -1, &error));
  g_assert_no_error (error);
}

/* A folder with a file and a sub-folder with a file: what must survive. */
static char *
make_victim (const char *name)
{
  char *v = path (name);
  g_autofree char *sub = g_build_filename (v, "sub", NULL);
  g_assert_cmpint (g_mkdir_with_parents (sub, 0755), ==, 0);
  g_autofree char *a = g_build_filename (v, "keep.txt", NULL);
  g_autofree char *b = g_build_filename (sub, "keep-too.txt", NULL);
  put_file (a, "mine");
  put_file (b, "mine too");
  return v;
}

static void
assert_victim_intact (const char *v)
{
  g_autofree char *a = g_build_filename (v, "keep.txt", NULL);
  g_autofree char *b = g_build_filename (v, "sub", "keep-too.txt", NULL);
  g_assert_true (g_file_test (a, G_FILE_TEST_IS_REGULAR));
  g_assert_true (g_file_test (b, G_FILE_TEST_IS_REGULAR));
}

static void
assert_real_dir (const char *p)
{
  GStatBuf st;
  g_assert_cmpint (g_lstat (p, &st), ==, 0);
  g_assert_true (S_ISDIR (st.st_mode));
}

static char *
file_sha (const char *p)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (p, &text, &len, NULL));
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) text, len);
}

#define EXIT_OK(status) (WIFEXITED (status) && WEXITSTATUS (status) == 0)

/* A short LoRA run: a checkpoint every 2 steps. Returns stderr. */
static char *
finetune (const char *out, int *status, const char *max_steps, const char *extra1, const char *extra2,
          const char *extra3)
{
  char *err = NULL;
  g_autofree char *o = cli_run (status, &err, "transformer-finetune", "--model-path", model, "--train", data,
                                "--out-dir", out, "--max-steps", max_steps, "--save-steps", "2", "--batch-size", "1",
                                "--seq-len", "16", "--lora-r", "2", extra1, extra2, extra3, NULL);
  return err;
}

/* The adapter merge-lora merges, from one fine-tune. */
static const char *
adapter (void)
{
  static char *dir;
  if (!dir)
    {
      dir = path ("adapter");
      int status = 0;
      g_autofree char *err = finetune (dir, &status, "2", NULL, NULL, NULL);
      if (!EXIT_OK (status))
        g_error ("fine-tune failed: %s", err);
    }
  return dir;
}

/* ---- the folder-replace step itself ---- */

static void
test_remove_tree_links (void)
{
  g_autofree char *victim = make_victim ("rt-victim");
  g_autofree char *vfile = path ("rt-victim-file");
  put_file (vfile, "mine");
  /* a link at the top */
  g_autofree char *link = path ("rt-link");
  g_assert_cmpint (symlink (victim, link), ==, 0);
  hn_folder_remove_tree (link);
  GStatBuf st;
  g_assert_cmpint (g_lstat (link, &st), !=, 0);
  assert_victim_intact (victim);
  /* links inside a tree being removed */
  g_autofree char *tree = path ("rt-tree");
  g_autofree char *deep = g_build_filename (tree, "a", "b", NULL);
  g_assert_cmpint (g_mkdir_with_parents (deep, 0755), ==, 0);
  g_autofree char *l1 = g_build_filename (tree, "to-dir", NULL);
  g_autofree char *l2 = g_build_filename (deep, "to-file", NULL);
  g_assert_cmpint (symlink (victim, l1), ==, 0);
  g_assert_cmpint (symlink (vfile, l2), ==, 0);
  hn_folder_remove_tree (tree);
  g_assert_false (g_file_test (tree, G_FILE_TEST_EXISTS));
  assert_victim_intact (victim);
  g_assert_true (g_file_test (vfile, G_FILE_TEST_IS_REGULAR));
}

static void
test_commit_over_link (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *victim = make_victim ("commit-victim");
  g_autofree char *final = path ("commit-final");
  g_assert_cmpint (symlink (victim, final), ==, 0);
  g_autofree char *tmp = hn_folder_begin (final, &error);
  g_assert_no_error (error);
  g_autofree char *f = g_build_filename (tmp, "new.txt", NULL);
  put_file (f, "new");
  gboolean replaced = FALSE;
  g_assert_true (hn_folder_commit (tmp, final, &replaced, &error));
  g_assert_no_error (error);
  g_assert_true (replaced);
  assert_real_dir (final);
  assert_victim_intact (victim);
}

/* A copy of the demo model (a folder the test may lose), with one file of
 * the user's beside it. */
static char *
copy_model (const char *name)
{
  char *base = path (name);
  g_assert_cmpint (g_mkdir (base, 0755), ==, 0);
  g_autoptr (GDir) d = g_dir_open (model, 0, NULL);
  for (const char *n; (n = g_dir_read_name (d));)
    {
      g_autofree char *src = g_build_filename (model, n, NULL), *dst = g_build_filename (base, n, NULL);
      g_autofree char *text = NULL;
      gsize len = 0;
      g_assert_true (g_file_get_contents (src, &text, &len, NULL));
      g_assert_true (g_file_set_contents (dst, text, (gssize) len, NULL));
    }
  g_autofree char *other = g_build_filename (base, "notes.txt", NULL);
  put_file (other, "mine");
  return base;
}

/* ---- merge-lora ---- */

static void
test_merge_lora_link (void)
{
  g_autofree char *victim = make_victim ("merge-victim");
  g_autofree char *link = path ("merge-link");
  g_assert_cmpint (symlink (victim, link), ==, 0);
  int status = 0;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "merge-lora", "--model-path", model, "--lora-adapter-path",
                                  adapter (), "--out-dir", link, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "symbolic link"));
  assert_victim_intact (victim);
  g_free (err);
  g_free (out);
  out = cli_run (&status, &err, "merge-lora", "--model-path", model, "--lora-adapter-path", adapter (), "--out-dir",
                 link, "--overwrite-output-dir", NULL);
  g_assert_true (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "replacing the symbolic link"));
  assert_victim_intact (victim);
  assert_real_dir (link);
  g_autofree char *st = g_build_filename (link, "model.safetensors", NULL);
  g_assert_true (g_file_test (st, G_FILE_TEST_IS_REGULAR));
}

static void
test_merge_lora_onto_inputs (void)
{
  /* a copy of the model: the folder merge-lora must not replace */
  g_autofree char *base = copy_model ("merge-base");
  g_autofree char *other = g_build_filename (base, "notes.txt", NULL);
  g_autofree char *weights = g_build_filename (base, "model.safetensors", NULL);
  g_autofree char *sha = file_sha (weights);
  const char *outs[] = { base, root };
  for (int i = 0; i < 2; i++)
    {
      int status = 0;
      g_autofree char *err = NULL;
      g_autofree char *out = cli_run (&status, &err, "merge-lora", "--model-path", base, "--lora-adapter-path",
                                      adapter (), "--out-dir", outs[i], "--overwrite-output-dir", NULL);
      g_assert_false (EXIT_OK (status));
      g_assert_nonnull (strstr (err, i == 0 ? "is the --model-path folder" : "holds --model-path"));
    }
  /* nor onto the adapter */
  int status = 0;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "merge-lora", "--model-path", base, "--lora-adapter-path",
                                  adapter (), "--out-dir", adapter (), "--overwrite-output-dir", NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "--lora-adapter-path"));
  g_assert_true (g_file_test (other, G_FILE_TEST_IS_REGULAR));
  g_autofree char *sha2 = file_sha (weights);
  g_assert_cmpstr (sha, ==, sha2);
  GStatBuf st;
  g_assert_cmpint (g_stat (base, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 0777, ==, 0755);
}

static void
test_merge_lora_fresh (void)
{
  g_autofree char *out_dir = path ("merged");
  int status = 0;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "merge-lora", "--model-path", model, "--lora-adapter-path",
                                  adapter (), "--out-dir", out_dir, NULL);
  g_assert_true (EXIT_OK (status));
  /* a normal folder's mode (umask 022), not the temporary folder's 0700 */
  GStatBuf st;
  g_assert_cmpint (g_stat (out_dir, &st), ==, 0);
  g_assert_cmpint (st.st_mode & 0777, ==, 0755);
  /* a second merge onto it is refused: it is a folder of files now */
  g_free (err);
  g_free (out);
  out = cli_run (&status, &err, "merge-lora", "--model-path", model, "--lora-adapter-path", adapter (), "--out-dir",
                 out_dir, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "--overwrite-output-dir"));
}

/* ---- training jobs ---- */

static void
test_finetune_checkpoint_link (void)
{
  g_autofree char *victim = make_victim ("ck-victim");
  g_autofree char *out = path ("ck-out");
  g_assert_cmpint (g_mkdir (out, 0755), ==, 0);
  g_autofree char *ck = g_build_filename (out, "checkpoint-step-2", NULL);
  g_assert_cmpint (symlink (victim, ck), ==, 0);
  int status = 0;
  g_autofree char *err = finetune (out, &status, "2", NULL, NULL, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "already holds 1 entry"));
  assert_victim_intact (victim);
  g_free (err);
  err = finetune (out, &status, "2", "--overwrite-output-dir", NULL, NULL);
  g_assert_true (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "replaced the existing"));
  assert_victim_intact (victim);
  assert_real_dir (ck);
  g_autofree char *ad = g_build_filename (ck, "adapter_model.safetensors", NULL);
  g_assert_true (g_file_test (ad, G_FILE_TEST_IS_REGULAR));
}

static void
test_finetune_rerun (void)
{
  g_autofree char *out = path ("rerun-out");
  int status = 0;
  g_autofree char *err = finetune (out, &status, "2", NULL, NULL, NULL);
  g_assert_true (EXIT_OK (status));
  g_autofree char *ck2 = g_build_filename (out, "checkpoint-step-2", NULL);
  g_autofree char *state = g_build_filename (ck2, "trainer_state.json", NULL);
  g_autofree char *sha = file_sha (state);
  /* the same command again: refused, the older checkpoint kept as it was */
  g_free (err);
  err = finetune (out, &status, "2", NULL, NULL, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "this job did not write"));
  g_autofree char *sha2 = file_sha (state);
  g_assert_cmpstr (sha, ==, sha2);
  /* resuming continues the run there; a stale temporary folder of a killed
   * checkpoint write is removed and the log says so */
  g_autofree char *stale = g_build_filename (out, ".checkpoint-step-4.tmp-Ab12Cd", "x", NULL);
  g_assert_cmpint (g_mkdir_with_parents (stale, 0755), ==, 0);
  g_free (err);
  err = finetune (out, &status, "4", "--resume-from-checkpoint", ck2, NULL);
  g_assert_true (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "a temporary folder an interrupted run left"));
  g_autofree char *stale_dir = g_path_get_dirname (stale);
  g_assert_false (g_file_test (stale_dir, G_FILE_TEST_EXISTS));
  g_autofree char *ck4 = g_build_filename (out, "checkpoint-step-4", NULL);
  assert_real_dir (ck4);
  g_autofree char *sha3 = file_sha (state);
  g_assert_cmpstr (sha, ==, sha3);
  /* the checkpoint being read is no output folder */
  g_free (err);
  err = finetune (ck2, &status, "4", "--resume-from-checkpoint", ck2, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "is the checkpoint --resume-from-checkpoint reads"));
}

static void
test_train_onto_model (void)
{
  g_autofree char *base = copy_model ("train-base");
  g_autofree char *weights = g_build_filename (base, "model.safetensors", NULL);
  g_autofree char *sha = file_sha (weights);
  int status = 0;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run (&status, &err, "transformer-train", "--model-path", base, "--train", data,
                                  "--out-dir", base, "--max-steps", "1", "--batch-size", "1", "--seq-len", "16",
                                  "--overwrite-output-dir", NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "is the --model-path folder"));
  g_autofree char *sha2 = file_sha (weights);
  g_assert_cmpstr (sha, ==, sha2);
}

static char *
hier_init_from (const char *tok, const char *out, int *status, const char *extra)
{
  char *err = NULL;
  g_autofree char *o = cli_run (status, &err, "hierarchos-init", "--tokenizer-path", tok, "--out-dir", out,
                                "--context-dim", "16", "--ltm-slots", "16", "--persistent-dim", "8", "--ltm-key-dim",
                                "8", "--ltm-val-dim", "8", "--rwkv-head-size", "8", extra, NULL);
  return err;
}

static char *
hier_init (const char *out, int *status, const char *extra)
{
  return hier_init_from (model, out, status, extra);
}

static void
test_hierarchos_init_onto_model (void)
{
  g_autofree char *out = path ("hier");
  int status = 0;
  g_autofree char *err = hier_init (out, &status, NULL);
  g_assert_true (EXIT_OK (status));
  g_autofree char *weights = g_build_filename (out, "model.safetensors", NULL);
  g_autofree char *sha = file_sha (weights);
  g_free (err);
  err = hier_init (out, &status, NULL);
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "--overwrite-output-dir"));
  g_autofree char *sha2 = file_sha (weights);
  g_assert_cmpstr (sha, ==, sha2);
  g_free (err);
  err = hier_init (out, &status, "--overwrite-output-dir");
  g_assert_true (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "--overwrite-output-dir: "));
  /* never onto the tokenizer's own folder */
  g_autofree char *tok = copy_model ("hier-tok");
  g_free (err);
  err = hier_init_from (tok, tok, &status, "--overwrite-output-dir");
  g_assert_false (EXIT_OK (status));
  g_assert_nonnull (strstr (err, "is the --tokenizer-path folder"));
}

static void
rm_rf (const char *dir)
{
  hn_folder_remove_tree (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  umask (022);
  g_autoptr (GError) error = NULL;
  root = g_dir_make_tmp ("hn-output-dir-XXXXXX", &error);
  g_assert_no_error (error);
  model = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "stories260K", NULL);
  data = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "data", "demo", "tinyshakespeare-small.txt", NULL);
  g_test_add_func ("/output-dir/remove-tree-links", test_remove_tree_links);
  g_test_add_func ("/output-dir/commit-over-link", test_commit_over_link);
  g_test_add_func ("/output-dir/merge-lora-link", test_merge_lora_link);
  g_test_add_func ("/output-dir/merge-lora-onto-inputs", test_merge_lora_onto_inputs);
  g_test_add_func ("/output-dir/merge-lora-fresh", test_merge_lora_fresh);
  g_test_add_func ("/output-dir/finetune-checkpoint-link", test_finetune_checkpoint_link);
  g_test_add_func ("/output-dir/finetune-rerun", test_finetune_rerun);
  g_test_add_func ("/output-dir/train-onto-model", test_train_onto_model);
  g_test_add_func ("/output-dir/hierarchos-init-onto-model", test_hierarchos_init_onto_model);
  int rc = g_test_run ();
  rm_rf (root);
  g_free (root);
  g_free (model);
  g_free (data);
  return rc;
}
