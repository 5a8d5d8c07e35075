/* The cache side of the model library (hub-library.h): which snapshot a
 * cached repo offers, its partial downloads, removing it. */
#include "hub/hub-library.h"
#include "base/hn-error.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

static guint64
blob_bytes (const char *repo_path, guint64 *incomplete)
{
  guint64 total = 0;
  if (incomplete)
    *incomplete = 0;
  g_autofree char *blobs = g_build_filename (repo_path, "blobs", NULL);
  g_autoptr (GDir) d = g_dir_open (blobs, 0, NULL);
  const char *n;
  while (d && (n = g_dir_read_name (d)))
    {
      g_autofree char *p = g_build_filename (blobs, n, NULL);
      GStatBuf sb;
      if (g_lstat (p, &sb) != 0 || !S_ISREG (sb.st_mode))
        continue;
      total += (guint64) sb.st_size;
      if (incomplete && g_str_has_suffix (n, ".incomplete"))
        *incomplete += (guint64) sb.st_size;
    }
  return total;
}

guint64
hn_hub_cached_repo_incomplete_bytes (const HnHubCachedRepo *r)
{
  guint64 inc = 0;
  blob_bytes (r->path, &inc);
  return inc;
}

static gboolean
dir_has_entries (const char *dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  return d && g_dir_read_name (d) != NULL;
}

char *
hn_hub_cached_repo_pick_snapshot (const HnHubCachedRepo *r, char **commit_out)
{
  const char *want = NULL;
  for (char **ref = r->refs; *ref; ref++)
    if (g_str_has_prefix (*ref, "main="))
      want = *ref + 5;
  for (int pass = 0; pass < 2; pass++)
    for (guint i = g_strv_length (r->snapshots); i-- > 0;)
      {
        if (pass == 0 && g_strcmp0 (r->snapshots[i], want) != 0)
          continue;
        char *snap = g_build_filename (r->path, "snapshots", r->snapshots[i], NULL);
        if (dir_has_entries (snap))
          {
            *commit_out = g_strdup (r->snapshots[i]);
            return snap;
          }
        g_free (snap);
      }
  return NULL;
}

static char *
repo_folder (const char *cache_dir, HnHubRepoType type, const char *repo_id)
{
  g_autoptr (HnHub) hub = hn_hub_new ();
  hn_hub_set_cache_dir (hub, cache_dir);
  return hn_hub_repo_cache_dir (hub, type, repo_id);
}

guint64
hn_hub_cached_repo_size (const char *cache_dir, HnHubRepoType type, const char *repo_id)
{
  if (!hn_hub_validate_repo_id (repo_id, NULL))
    return 0;
  g_autofree char *path = repo_folder (cache_dir, type, repo_id);
  return blob_bytes (path, NULL);
}

/* Removes a tree without following symlinks (snapshots are links into blobs). */
static gboolean
remove_tree (const char *path, GError **error)
{
  GStatBuf sb;
  if (g_lstat (path, &sb) != 0)
    return errno == ENOENT ? TRUE : (g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot remove %s: %s", path,
                                                   g_strerror (errno)), FALSE);
  if (S_ISDIR (sb.st_mode))
    {
      g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
      const char *n;
      while (d && (n = g_dir_read_name (d)))
        {
          g_autofree char *p = g_build_filename (path, n, NULL);
          if (!remove_tree (p, error))
            return FALSE;
        }
      if (g_rmdir (path) != 0)
        {
          int e = errno;
          g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot remove %s: %s", path, g_strerror (e));
          return FALSE;
        }
      return TRUE;
    }
  if (g_unlink (path) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot remove %s: %s", path, g_strerror (e));
      return FALSE;
    }
  return TRUE;
}

gboolean
hn_hub_remove_cached_repo (const char *cache_dir, HnHubRepoType type, const char *repo_id, guint64 *freed,
                           GError **error)
{
  if (freed)
    *freed = 0;
  if (!hn_hub_validate_repo_id (repo_id, error))
    return FALSE;
  g_autofree char *path = repo_folder (cache_dir, type, repo_id);
  if (!g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, HN_ERROR, HN_ERROR_NOT_FOUND, "%s is not in the cache (%s)", repo_id, path);
      return FALSE;
    }
  guint64 bytes = blob_bytes (path, NULL);
  /* aside first: ".trash-" is not a repo folder name, so scans skip it */
  g_autofree char *dir = g_path_get_dirname (path);
  g_autofree char *base = g_path_get_basename (path);
  g_autofree char *aside_name = g_strdup_printf (".trash-%s-%d", base, (int) getpid ());
  g_autofree char *aside = g_build_filename (dir, aside_name, NULL);
  if (g_rename (path, aside) != 0)
    {
      int e = errno;
      g_set_error (error, HN_ERROR, HN_ERROR_IO, "cannot remove %s: %s", path, g_strerror (e));
      return FALSE;
    }
  if (!remove_tree (aside, error))
    return FALSE;
  g_autofree char *locks = g_build_filename (dir, ".locks", base, NULL);
  remove_tree (locks, NULL); /* stale locks only; a failure here frees nothing more */
  if (freed)
    *freed = bytes;
  return TRUE;
}
