/* Small helpers shared by the engine: atomic file writes and path helpers. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

/* Writes `len` bytes to `path` through a temporary file in the same folder,
 * fsyncs it and renames it into place, so a crash leaves either the old or
 * the new file, never a torn one. */
gboolean hn_write_file_atomic (const char *path, const void *data, gsize len, GError **error);
/* write(2) all of data to fd (EINTR retried, at most 1 GiB a call); errors name path. */
gboolean hn_fd_write_all (int fd, const void *data, gsize len, const char *path, GError **error);
/* Begins an atomic write of path: creates a temporary file next to it and
 * returns its fd (*tmp its name, to g_free), or -1 with error set. */
int hn_fd_begin_tmp (const char *path, char **tmp, GError **error);
/* Ends an atomic write begun in tmp: when ok, fsync and rename tmp onto path;
 * fd is closed either way and tmp removed on any failure. Returns the outcome. */
gboolean hn_fd_commit_tmp (int fd, gboolean ok, const char *tmp, const char *path, GError **error);
/* The same; without `sync` no fsync (a scratch file that need not survive a crash). */
gboolean hn_fd_commit_tmp_full (int fd, gboolean ok, gboolean sync, const char *tmp, const char *path, GError **error);

/* Size caps of hn_file_read_bounded, per kind of file read whole. */
#define HN_MAX_CONFIG_BYTES (64u << 20)     /* config.json, generation/tokenizer/adapter configs, states */
#define HN_MAX_TOKENIZER_BYTES (512u << 20) /* tokenizer.json, vocab/merges files, SentencePiece models */
#define HN_MAX_TEMPLATE_BYTES (16u << 20)   /* chat template files */
#define HN_MAX_TEXT_BYTES (256u << 20)      /* prompt files, text datasets, evaluation text */

/* Reads a whole regular file of at most `max_bytes` (NUL-terminated, like
 * g_file_get_contents). A FIFO, device or folder (which read without end or
 * block) is refused, and so is a bigger file: "<path>: <what> is N bytes, over
 * the limit of M". A missing file is HN_ERROR_NOT_FOUND, others HN_ERROR_IO. */
gboolean hn_file_read_bounded (const char *path, gsize max_bytes, const char *what, char **contents,
                               gsize *len, GError **error);

/* Creates `path` and its parents (mode 0755). */
gboolean hn_mkdir_p (const char *path, GError **error);

/* What keeps data[0..len) from being UTF-8 text, or NULL when nothing does:
 * "a NUL byte" or "invalid UTF-8", at byte *at. (GLib's validation calls
 * a NUL byte invalid UTF-8, which misleads: the text is UTF-8, with a NUL.) */
const char *hn_utf8_problem (const char *data, gsize len, gsize *at);

/* Folder under the user cache dir (created), e.g. ~/.cache/hierarchos-native/<sub>. */
char *hn_user_cache_dir (const char *sub);

/* Fault injection for the reliability tests (tests/engine/test-faults.c);
 * inert unless set. HN_FAULT_WRITE_BUDGET=N in the environment (or
 * hn_fault_set_write_budget): writes through hn_fault_write fail with ENOSPC
 * once N bytes in all were written, as on a full disk. HN_FAULT_VK_ALLOC=N
 * (or hn_fault_set_vk_alloc): the Nth Vulkan memory allocation from now fails
 * as VK_ERROR_OUT_OF_DEVICE_MEMORY. */
gssize hn_fault_write (int fd, const void *buf, gsize len);
gboolean hn_fault_vk_alloc_fails (void);
void hn_fault_set_write_budget (gint64 bytes);  /* < 0: unlimited */
void hn_fault_set_vk_alloc (gint64 nth);        /* 0: never */

G_END_DECLS
