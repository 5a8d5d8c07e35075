/* Small helpers shared by the job-level engine tests (header only, so each
 * test executable needs no extra source file). */
#pragma once
#include <glib.h>

#include "vk/hn-vk.h"

/* TRUE when a Vulkan device opens; otherwise says why on stderr (the caller
 * returns 77, meson's "skipped"). The probe context is closed again. */
static inline gboolean
hn_test_have_vulkan (void)
{
  g_autoptr (GError) error = NULL;
  HnVkContext *probe = hn_vk_context_new (-1, &error);
  if (!probe)
    {
      g_printerr ("no Vulkan device: %s\n", error->message);
      return FALSE;
    }
  hn_vk_context_unref (probe);
  return TRUE;
}

/* Writes the first `n` bytes of the shared tinyshakespeare text to DIR/text.txt
 * (a small text: every step of a short run sees different windows). */
static inline char *
hn_test_write_text_head (const char *dir, gsize n)
{
  g_autofree char *src = g_build_filename (g_getenv ("HN_SHARED_DIR"), "datasets", "tinyshakespeare.txt", NULL);
  g_autofree char *all = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (src, &all, &len, NULL));
  char *path = g_build_filename (dir, "text.txt", NULL);
  g_assert_true (g_file_set_contents (path, all, MIN (len, n), NULL));
  return path;
}
