/* Folders a job writes: link-safe removal, atomic publishing and the checks
 * that keep an output off its inputs and off files the job did not write.
 *
 * A folder is published atomically: written into a hidden temporary folder
 * next to its final name, then renamed into place, so a job killed mid-write
 * leaves the previous folder intact and no half-written one under the final
 * name. Removal never follows a symbolic link: a link is removed itself and
 * what it points at is left alone.
 *
 * A job's output folder may not be one of the folders it reads (the model,
 * tokenizer or adapter) nor a folder that holds one: the writes would replace
 * what is being read. An existing folder with files in it is refused as well,
 * as transformers' Trainer refuses a non-empty output_dir, unless the user
 * passes --overwrite-output-dir; the notes then say what is replaced. A run
 * that resumes from a checkpoint inside the output folder continues there,
 * so the folder may hold files then. Temporary folders that a killed job
 * left (".checkpoint-*.tmp-*") are removed first. */
#pragma once
#include <glib.h>

G_BEGIN_DECLS

/* A fresh hidden temp folder next to `final_dir` (stale ones of the same
 * name that a killed job left are removed first). */
char *hn_folder_begin (const char *final_dir, GError **error);
/* Renames the finished tmp_dir into place. Whatever held the final name
 * before (a folder, a file or a symbolic link: the link itself, never what
 * it points at) is moved aside and removed; *replaced (may be NULL) says
 * whether there was one, so that the caller can log it. */
gboolean hn_folder_commit (const char *tmp_dir, const char *final_dir, gboolean *replaced, GError **error);
/* Removes a folder tree without following symbolic links: a link (at the
 * top or inside) is removed itself and its target is left alone. */
void hn_folder_remove_tree (const char *dir);
/* Removes the temporary folders ".BASE.tmp-*" and ".BASE.old-*" under dir
 * that an interrupted hn_folder_begin/commit of a folder named BASE left
 * (base_glob may hold wildcards: "checkpoint-*"); appends each removed path
 * to `removed` when it is not NULL. Returns how many were removed. */
guint hn_folder_clean_stale (const char *dir, const char *base_glob, GPtrArray *removed);

typedef enum {
  HN_OUTPUT_WRITE_INTO, /* the job writes files into the folder (training); a link to a folder is followed */
  HN_OUTPUT_REPLACE,    /* the folder is replaced as a whole (merge-lora); a link there is replaced itself */
} HnOutputMode;

typedef struct {
  const char *what; /* the option that named it: "--model-path" */
  const char *path; /* NULL: not given */
} HnOutputInput;

/* Checks `out_dir` before a job writes there. `resume`: a checkpoint folder
 * the job continues from (may be NULL). `notes` (may be NULL) gets lines for
 * the log: the stale temporary folders removed and, with `overwrite`, what
 * the job will replace. */
gboolean hn_output_dir_check (const char *out_dir, const HnOutputInput *inputs, guint n_inputs, const char *resume,
                              gboolean overwrite, HnOutputMode mode, GPtrArray *notes, GError **error);

/* `path` made absolute with its links resolved as far as it exists (the
 * rest appended as written); the form the checks compare. */
char *hn_output_canonical_path (const char *path);

G_END_DECLS
