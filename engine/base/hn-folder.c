/* Folders a job writes (hn-folder.h). */
#include "base/hn-folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "base/hn-error.h"
#include "base/hn-util.h"

/* ---- removal and atomic publishing ---- */

/* Removes `name` under the folder parent_fd. A folder is opened with
 * O_NOFOLLOW, so a symbolic link (to a folder or not) is never followed: the
 * link itself is removed and what it points at is left alone. */
static void
remove_at (int parent_fd, const char *name)
{
  int fd = openat (parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    {
      unlinkat (parent_fd, name, 0); /* a file or a link */
      return;
    }
  DIR *d = fdopendir (fd);
  if (!d)
    {
      close (fd);
      return;
    }
  struct dirent *e;
  while ((e = readdir (d)))
    if (strcmp (e->d_name, ".") != 0 && strcmp (e->d_name, "..") != 0)
      remove_at (dirfd (d), e->d_name);
  closedir (d);
  unlinkat (parent_fd, name, AT_REMOVEDIR);
}

void
hn_folder_remove_tree (const char *dir)
{
  remove_at (AT_FDCWD, dir);
}

guint
hn_folder_clean_stale (const char *dir, const char *base_glob, GPtrArray *removed)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  if (!d)
    return 0;
  g_autofree char *tmp_glob = g_strdup_printf (".%s.tmp-*", base_glob);
  g_autofree char *old_glob = g_strdup_printf (".%s.old-*", base_glob);
  g_autoptr (GPatternSpec) tmp_pat = g_pattern_spec_new (tmp_glob);
  g_autoptr (GPatternSpec) old_pat = g_pattern_spec_new (old_glob);
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  const char *name;
  while ((name = g_dir_read_name (d)))
    if (g_pattern_spec_match_string (tmp_pat, name) || g_pattern_spec_match_string (old_pat, name))
      g_ptr_array_add (names, g_build_filename (dir, name, NULL));
  for (guint i = 0; i < names->len; i++)
    {
      hn_folder_remove_tree (names->pdata[i]);
      if (removed)
        g_ptr_array_add (removed, g_strdup (names->pdata[i]));
    }
  return names->len;
}

char *
hn_folder_begin (const char *final_dir, GError **error)
{
  g_autofree char *parent = g_path_get_dirname (final_dir);
  g_autofree char *base = g_path_get_basename (final_dir);
  if (!hn_mkdir_p (parent, error))
    return NULL;
  /* what a killed earlier write of this folder left behind */
  hn_folder_clean_stale (parent, base, NULL);
  g_autofree char *tmpl = g_strdup_printf ("%s/.%s.tmp-XXXXXX", parent, base);
  /* the folder is renamed into place as it is: the mode of a normal folder
   * (0777 less the umask), not mkdtemp's 0700 */
  if (!g_mkdtemp_full (tmpl, 0777))
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot create a folder next to %s: %s", final_dir, g_strerror (e));
      return NULL;
    }
  return g_steal_pointer (&tmpl);
}

gboolean
hn_folder_commit (const char *tmp_dir, const char *final_dir, gboolean *replaced, GError **error)
{
  g_autofree char *old = NULL;
  GStatBuf st;
  if (replaced)
    *replaced = FALSE;
  /* lstat: a link under the final name is itself what is replaced */
  if (g_lstat (final_dir, &st) == 0)
    {
      g_autofree char *parent = g_path_get_dirname (final_dir);
      g_autofree char *base = g_path_get_basename (final_dir);
      old = g_strdup_printf ("%s/.%s.old-%d", parent, base, (int) getpid ());
      if (g_rename (final_dir, old) != 0)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot move the old %s aside: %s", final_dir, g_strerror (e));
          return FALSE;
        }
    }
  if (g_rename (tmp_dir, final_dir) != 0)
    {
      int e = errno;
      if (old)
        g_rename (old, final_dir);
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot rename %s to %s: %s", tmp_dir, final_dir, g_strerror (e));
      return FALSE;
    }
  if (old)
    hn_folder_remove_tree (old);
  if (replaced)
    *replaced = old != NULL;
  return TRUE;
}

/* ---- output-folder checks ---- */

char *
hn_output_canonical_path (const char *path)
{
  g_autofree char *abs = g_canonicalize_filename (path, NULL);
  g_autofree char *rest = NULL;
  char *cur = g_strdup (abs);
  for (;;)
    {
      char *real = realpath (cur, NULL);
      if (real)
        {
          char *out = rest ? g_build_filename (real, rest, NULL) : g_strdup (real);
          free (real);
          g_free (cur);
          return out;
        }
      char *parent = g_path_get_dirname (cur);
      if (g_str_equal (parent, cur))
        {
          g_free (parent);
          g_free (cur);
          return g_strdup (abs);
        }
      char *base = g_path_get_basename (cur);
      char *r = rest ? g_build_filename (base, rest, NULL) : g_strdup (base);
      g_free (base);
      g_free (rest);
      rest = r;
      g_free (cur);
      cur = parent;
    }
}

/* a is b or lies inside it (both canonical) */
static gboolean
is_within (const char *a, const char *b)
{
  gsize n = strlen (b);
  if (n > 0 && b[n - 1] == '/')
    return g_str_has_prefix (a, b);
  return g_str_has_prefix (a, b) && (a[n] == '\0' || a[n] == '/');
}

static int
cmp_names (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

/* "a, b, c and 4 more" */
static char *
list_entries (const char *dir, guint *n_out)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  const char *name;
  while (d && (name = g_dir_read_name (d)))
    g_ptr_array_add (names, g_strdup (name));
  *n_out = names->len;
  if (!names->len)
    return NULL;
  g_ptr_array_sort (names, cmp_names);
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < names->len && i < 5; i++)
    g_string_append_printf (s, "%s%s", i ? ", " : "", (char *) names->pdata[i]);
  if (names->len > 5)
    g_string_append_printf (s, " and %u more", names->len - 5);
  return g_string_free (s, FALSE);
}

gboolean
hn_output_dir_check (const char *out_dir, const HnOutputInput *inputs, guint n_inputs, const char *resume,
                     gboolean overwrite, HnOutputMode mode, GPtrArray *notes, GError **error)
{
  g_autofree char *out = hn_output_canonical_path (out_dir);
  for (guint i = 0; i < n_inputs; i++)
    {
      if (!inputs[i].path)
        continue;
      g_autofree char *in = hn_output_canonical_path (inputs[i].path);
      if (is_within (in, out))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       g_str_equal (in, out) ? "--out-dir %s is the %s folder %s: the output would replace what the job "
                                               "reads; choose another output folder"
                                             : "--out-dir %s holds %s %s: the output would replace what the job "
                                               "reads; choose another output folder",
                       out_dir, inputs[i].what, inputs[i].path);
          return FALSE;
        }
    }
  /* a checkpoint inside the output folder continues a run there; the
   * checkpoint folder itself must not be the output */
  gboolean resuming = FALSE;
  if (resume)
    {
      g_autofree char *r = hn_output_canonical_path (resume);
      if (g_str_equal (r, out))
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "--out-dir %s is the checkpoint --resume-from-checkpoint reads: give the run's output folder "
                       "(the checkpoint's parent) instead", out_dir);
          return FALSE;
        }
      resuming = is_within (r, out);
    }

  GStatBuf st;
  if (g_lstat (out_dir, &st) != 0)
    {
      int e = errno;
      if (e == ENOENT)
        return TRUE;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "--out-dir %s: %s", out_dir, g_strerror (e));
      return FALSE;
    }
  if (S_ISLNK (st.st_mode) && mode == HN_OUTPUT_REPLACE)
    {
      /* the folder is replaced by renaming: the link goes, its target stays */
      if (!overwrite)
        {
          g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                       "--out-dir %s is a symbolic link to %s, which this job did not make: choose a new folder, or "
                       "pass --overwrite-output-dir to replace the link (its target is left as it is)", out_dir, out);
          return FALSE;
        }
      if (notes)
        g_ptr_array_add (notes, g_strdup_printf ("--overwrite-output-dir: replacing the symbolic link %s (its target %s "
                                                 "is left as it is)", out_dir, out));
      return TRUE;
    }
  if (!g_file_test (out_dir, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT, "--out-dir %s exists and is not a folder", out_dir);
      return FALSE;
    }
  g_autoptr (GPtrArray) removed = g_ptr_array_new_with_free_func (g_free);
  hn_folder_clean_stale (out_dir, "checkpoint-*", removed);
  for (guint i = 0; notes && i < removed->len; i++)
    g_ptr_array_add (notes, g_strdup_printf ("removed %s, a temporary folder an interrupted run left",
                                             (char *) removed->pdata[i]));
  guint n = 0;
  g_autofree char *names = list_entries (out_dir, &n);
  if (!n || resuming)
    return TRUE;
  if (!overwrite)
    {
      g_set_error (error, HN_ERROR, HN_ERROR_INVALID_ARGUMENT,
                   "--out-dir %s already holds %u %s this job did not write (%s): choose a new or empty folder, "
                   "resume with --resume-from-checkpoint, or pass --overwrite-output-dir to replace them",
                   out_dir, n, n == 1 ? "entry" : "entries", names);
      return FALSE;
    }
  if (notes)
    g_ptr_array_add (notes, g_strdup_printf (mode == HN_OUTPUT_REPLACE
                                               ? "--overwrite-output-dir: replacing %s and the %u %s it holds (%s)"
                                               : "--overwrite-output-dir: %s holds %u %s (%s); those of the names "
                                                 "this job writes are replaced",
                                             out_dir, n, n == 1 ? "entry" : "entries", names));
  return TRUE;
}
