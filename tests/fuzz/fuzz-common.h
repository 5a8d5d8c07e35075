/* Shared by the fuzz targets: each target defines LLVMFuzzerTestOneInput()
 * and is linked either with libFuzzer (meson -Dfuzzing=true, clang) or with
 * replay-main.c, which feeds it every file of its corpus and regression
 * folders (the 'fuzz' test suite, any compiler). */
#pragma once
#include <glib.h>
#include <glib/gstdio.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static inline void
fuzz_rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (path, G_FILE_TEST_IS_SYMLINK))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *n;
      while (d && (n = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, n, NULL);
          fuzz_rm_rf (p);
        }
      g_rmdir (path);
    }
  else
    g_unlink (path);
}

static char *fuzz_dir_;

/* GLib stops on a fatal critical with a breakpoint (SIGTRAP), which libFuzzer
 * does not catch: turn it into an abort so the input is saved. */
static inline void
fuzz_on_trap (int sig)
{
  abort ();
}

static inline void
fuzz_cleanup (void)
{
  if (fuzz_dir_)
    fuzz_rm_rf (fuzz_dir_);
}

/* A private folder for this process (removed at exit). */
static inline const char *
fuzz_tmp_dir (void)
{
  if (!fuzz_dir_)
    {
      fuzz_dir_ = g_dir_make_tmp ("hn-fuzz-XXXXXX", NULL);
      g_assert (fuzz_dir_);
      atexit (fuzz_cleanup);
      /* Criticals are bugs the fuzzer must see (as G_DEBUG=fatal-criticals). */
      g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
      signal (SIGTRAP, fuzz_on_trap);
    }
  return fuzz_dir_;
}

/* Writes the input to fuzz_tmp_dir()/name and returns the path (owned by the
 * caller). */
static inline char *
fuzz_write (const char *name, const void *data, size_t size)
{
  char *path = g_build_filename (fuzz_tmp_dir (), name, NULL);
  g_autoptr (GError) error = NULL;
  if (!g_file_set_contents (path, data, (gssize) size, &error))
    g_error ("fuzz: cannot write %s: %s", path, error->message);
  return path;
}

/* The shared material (tests/fixtures and ../shared), for targets that need a
 * real tokenizer. */
static inline char *
fuzz_shared_path (const char *rel)
{
  const char *d = g_getenv ("HN_SHARED_DIR");
  return g_build_filename (d && *d ? d : HN_FUZZ_SHARED_DIR, rel, NULL);
}

/* Splits the input at NUL bytes into at most `max` parts (a multi-file
 * input: e.g. tokenizer.json, then tokenizer_config.json). Returns the count;
 * parts[i] point into data. */
static inline guint
fuzz_split (const uint8_t *data, size_t size, const uint8_t **parts, size_t *lens, guint max)
{
  guint n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && n < max; i++)
    if (i == size || (data[i] == 0 && n + 1 < max))
      {
        parts[n] = data + start;
        lens[n] = i - start;
        n++;
        start = i + 1;
      }
  return n;
}

/* Writes part i to `name`, or removes `name` when the input has no part i. */
static inline void
fuzz_write_part (const char *name, guint i, guint n, const uint8_t **parts, const size_t *lens)
{
  if (i < n)
    g_free (fuzz_write (name, parts[i], lens[i]));
  else
    {
      g_autofree char *p = g_build_filename (fuzz_tmp_dir (), name, NULL);
      g_unlink (p);
    }
}
