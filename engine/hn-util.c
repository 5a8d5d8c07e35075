#include "hn-util.h"
#include "hn-error.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

gboolean
hn_mkdir_p (const char *path, GError **error)
{
  if (g_mkdir_with_parents (path, 0755) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create folder %s: %s", path, g_strerror (e));
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_write_file_atomic (const char *path, const void *data, gsize len, GError **error)
{
  g_autofree char *tmp = g_strdup_printf ("%s.tmp-XXXXXX", path);
  int fd = g_mkstemp_full (tmp, O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create %s: %s", tmp, g_strerror (e));
      return FALSE;
    }
  const char *p = data;
  gsize left = len;
  while (left > 0)
    {
      ssize_t n = write (fd, p, left);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int e = errno;
          close (fd);
          g_unlink (tmp);
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", path, g_strerror (e));
          return FALSE;
        }
      p += n;
      left -= (gsize) n;
    }
  if (fsync (fd) != 0 || close (fd) != 0)
    {
      int e = errno;
      g_unlink (tmp);
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", path, g_strerror (e));
      return FALSE;
    }
  if (g_rename (tmp, path) != 0)
    {
      int e = errno;
      g_unlink (tmp);
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot rename %s into place: %s", path, g_strerror (e));
      return FALSE;
    }
  return TRUE;
}

char *
hn_user_cache_dir (const char *sub)
{
  char *dir = g_build_filename (g_get_user_cache_dir (), "hierarchos-native", sub, NULL);
  g_mkdir_with_parents (dir, 0755);
  return dir;
}
