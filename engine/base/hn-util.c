#include "base/hn-util.h"
#include "base/hn-error.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
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
hn_file_read_bounded (const char *path, gsize max_bytes, const char *what, char **contents, gsize *len,
                      GError **error)
{
  /* O_NONBLOCK: opening a FIFO without a writer would wait forever. */
  int fd = g_open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, e == ENOENT ? HN_ERROR_NOT_FOUND : HN_ERROR_IO, "%s: cannot open the %s: %s",
                   path, what, g_strerror (e));
      return FALSE;
    }
  struct stat st;
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "%s: the %s is not a regular file", path, what);
      close (fd);
      return FALSE;
    }
  if ((guint64) st.st_size > max_bytes)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "%s: the %s is %" G_GUINT64_FORMAT " bytes, over the limit of %"
                   G_GSIZE_FORMAT " bytes", path, what, (guint64) st.st_size, max_bytes);
      close (fd);
      return FALSE;
    }
  /* Read to the end with the cap, not st_size: the file may grow meanwhile. */
  gsize cap = (gsize) st.st_size + 1, n = 0;
  char *buf = g_malloc (cap + 1);
  for (;;)
    {
      if (n == cap)
        {
          if (cap > max_bytes)
            {
              g_set_error (error, HN_ERROR, HN_ERROR_IO, "%s: the %s grew over the limit of %" G_GSIZE_FORMAT
                           " bytes while it was read", path, what, max_bytes);
              g_free (buf);
              close (fd);
              return FALSE;
            }
          cap = MIN (cap * 2, max_bytes + 1);
          buf = g_realloc (buf, cap + 1);
        }
      gssize r = read (fd, buf + n, cap - n);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "%s: cannot read the %s: %s", path, what, g_strerror (e));
          g_free (buf);
          close (fd);
          return FALSE;
        }
      if (r == 0)
        break;
      n += (gsize) r;
    }
  close (fd);
  buf[n] = '\0';
  *contents = buf;
  if (len)
    *len = n;
  return TRUE;
}

const char *
hn_utf8_problem (const char *data, gsize len, gsize *at)
{
  const char *nul = memchr (data, '\0', len);
  const char *bad = NULL;
  /* the first problem wins: invalid bytes before the NUL are reported as such */
  if (!g_utf8_validate_len (data, nul ? (gsize) (nul - data) : len, &bad))
    {
      *at = (gsize) (bad - data);
      return "invalid UTF-8";
    }
  if (nul)
    {
      *at = (gsize) (nul - data);
      return "a NUL byte";
    }
  return NULL;
}

/* ---- fault injection (see hn-util.h) ---- */

static gint64 fault_write_budget = -1, fault_vk_alloc = 0;
static GMutex fault_lock;

static void
fault_init (void)
{
  static gsize done;
  if (g_once_init_enter (&done))
    {
      const char *w = g_getenv ("HN_FAULT_WRITE_BUDGET");
      const char *v = g_getenv ("HN_FAULT_VK_ALLOC");
      if (w && *w)
        fault_write_budget = g_ascii_strtoll (w, NULL, 10);
      if (v && *v)
        fault_vk_alloc = g_ascii_strtoll (v, NULL, 10);
      g_once_init_leave (&done, 1);
    }
}

void
hn_fault_set_write_budget (gint64 bytes)
{
  fault_init ();
  g_mutex_lock (&fault_lock);
  fault_write_budget = bytes;
  g_mutex_unlock (&fault_lock);
}

void
hn_fault_set_vk_alloc (gint64 nth)
{
  fault_init ();
  g_mutex_lock (&fault_lock);
  fault_vk_alloc = nth;
  g_mutex_unlock (&fault_lock);
}

gssize
hn_fault_write (int fd, const void *buf, gsize len)
{
  fault_init ();
  g_mutex_lock (&fault_lock);
  if (fault_write_budget >= 0)
    {
      if (fault_write_budget == 0)
        {
          g_mutex_unlock (&fault_lock);
          errno = ENOSPC;
          return -1;
        }
      /* A short write first, as a filling disk gives. */
      len = MIN (len, (gsize) fault_write_budget);
      fault_write_budget -= (gint64) len;
    }
  g_mutex_unlock (&fault_lock);
  return write (fd, buf, len);
}

gboolean
hn_fault_vk_alloc_fails (void)
{
  fault_init ();
  g_mutex_lock (&fault_lock);
  gboolean fail = fault_vk_alloc > 0 && --fault_vk_alloc == 0;
  g_mutex_unlock (&fault_lock);
  return fail;
}

gboolean
hn_fd_write_all (int fd, const void *data, gsize len, const char *path, GError **error)
{
  const char *p = data;
  while (len > 0)
    {
      ssize_t n = hn_fault_write (fd, p, MIN (len, (gsize) 1 << 30));
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", path, g_strerror (e));
          return FALSE;
        }
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
}

int
hn_fd_begin_tmp (const char *path, char **tmp, GError **error)
{
  *tmp = g_strdup_printf ("%s.tmp-XXXXXX", path);
  int fd = g_mkstemp_full (*tmp, O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create %s: %s", *tmp, g_strerror (e));
      g_clear_pointer (tmp, g_free);
    }
  return fd;
}

gboolean
hn_fd_commit_tmp (int fd, gboolean ok, const char *tmp, const char *path, GError **error)
{
  return hn_fd_commit_tmp_full (fd, ok, TRUE, tmp, path, error);
}

gboolean
hn_fd_commit_tmp_full (int fd, gboolean ok, gboolean sync, const char *tmp, const char *path, GError **error)
{
  if (ok && sync && fsync (fd) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", path, g_strerror (e));
      ok = FALSE;
    }
  if (close (fd) != 0 && ok)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot write %s: %s", path, g_strerror (e));
      ok = FALSE;
    }
  if (ok && g_rename (tmp, path) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot rename %s into place: %s", path, g_strerror (e));
      ok = FALSE;
    }
  if (!ok)
    g_unlink (tmp);
  return ok;
}

gboolean
hn_write_file_atomic (const char *path, const void *data, gsize len, GError **error)
{
  g_autofree char *tmp = NULL;
  int fd = hn_fd_begin_tmp (path, &tmp, error);
  if (fd < 0)
    return FALSE;
  gboolean ok = hn_fd_write_all (fd, data, len, path, error);
  return hn_fd_commit_tmp (fd, ok, tmp, path, error);
}

char *
hn_user_cache_dir (const char *sub)
{
  char *dir = g_build_filename (g_get_user_cache_dir (), "hierarchos-native", sub, NULL);
  g_mkdir_with_parents (dir, 0755);
  return dir;
}
