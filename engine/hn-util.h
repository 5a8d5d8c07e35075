/* Small helpers shared by the engine: atomic file writes and path helpers. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

/* Writes `len` bytes to `path` through a temporary file in the same folder,
 * fsyncs it and renames it into place, so a crash leaves either the old or
 * the new file, never a torn one. */
gboolean hn_write_file_atomic (const char *path, const void *data, gsize len, GError **error);

/* Creates `path` and its parents (mode 0755). */
gboolean hn_mkdir_p (const char *path, GError **error);

/* Folder under the user cache dir (created), e.g. ~/.cache/hierarchos-native/<sub>. */
char *hn_user_cache_dir (const char *sub);

G_END_DECLS
