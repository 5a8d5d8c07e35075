/* Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without
 * libFuzzer: every file named on the command line, or found in a folder named
 * there. A crash, a sanitizer report or a fatal critical fails the test. */
#include "fuzz-common.h"

#include <stdio.h>

static guint n_inputs;

static void
replay_file (const char *path)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  g_autoptr (GError) error = NULL;
  if (!g_file_get_contents (path, &data, &len, &error))
    g_error ("%s", error->message);
  if (g_getenv ("HN_FUZZ_VERBOSE"))
    fprintf (stderr, "replay %s\n", path);
  LLVMFuzzerTestOneInput ((const uint8_t *) data, len);
  n_inputs++;
}

static void
replay (const char *path)
{
  if (!g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      if (g_file_test (path, G_FILE_TEST_EXISTS))
        replay_file (path);
      return;
    }
  g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  const char *n;
  while (d && (n = g_dir_read_name (d)))
    g_ptr_array_add (names, g_build_filename (path, n, NULL));
  g_ptr_array_sort (names, (GCompareFunc) g_strcmp0);
  for (guint i = 0; i < names->len; i++)
    replay (g_ptr_array_index (names, i));
}

int
main (int argc, char **argv)
{
  fuzz_tmp_dir ();
  for (int i = 1; i < argc; i++)
    replay (argv[i]);
  printf ("%s: %u inputs replayed\n", argv[0], n_inputs);
  return n_inputs > 0 ? 0 : 1;
}
