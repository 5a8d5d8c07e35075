/* Helpers the workflow pages share: the bundled demo files, GSettings
 * defaults, the one-line reason why Start is disabled, and reading a
 * hub-search job's page of results. */
#pragma once
#include <adwaita.h>
#include <json-glib/json-glib.h>

#include "hn-job-controller.h"
#include "jobs/job-spec.h"

G_BEGIN_DECLS

/* data/demo/<name> from the install (pkgdatadir) or, when run from the build
 * tree, the source tree; NULL when missing. HN_DATA_DIR overrides both. */
char *hn_demo_path (const char *name);

/* The app's GSettings, or NULL when the schema is not installed (tests that
 * run without it, or a broken install: the app then keeps no state). */
GSettings *hn_app_settings (void);

/* Fills model, dataset and output from the last used paths, else the demo
 * model and dataset, so a first start can run with one click. */
void hn_page_apply_defaults (HnJobSpec *spec);
/* When out-dir is one of the page's default names (KIND, KIND-N) and an
 * earlier run filled it, moves on to the next free KIND-N: a new run never
 * writes over another (the job refuses a folder of files without
 * --overwrite-output-dir). Resumes and overwrites keep their folder. */
void hn_page_fresh_out_dir (HnJobSpec *spec);
/* Remembers the paths the user chose (called when a job starts). */
void hn_page_remember (HnJobSpec *spec);

/* Why a job of `spec` cannot start, in words for the GUI, or NULL when it can.
 * `groups` is a NULL-terminated array of HnOptionGroup* whose inline
 * problems count too. */
char *hn_page_start_problem (HnJobSpec *spec, GtkWidget **groups);

/* A chat bubble (the user's on the right, the model's on the left) appended
 * to `list`; returns its label, to stream a reply into. */
GtkWidget *hn_page_add_bubble (GtkListBox *list, gboolean from_user, const char *text);

/* A hub-search job run from a page (the Models page, the dataset picker):
 * hn_page_start_search sets spec's cursor (NULL: the first page), empties
 * `out` (the job's output, which the page collects from its token events
 * with hn_page_collect_output), shows the search's CLI line in `command` and
 * "Searching…" in `status`, or why the job could not start. */
void hn_page_start_search (HnJobController *ctl, HnJobSpec *spec, const char *cursor, GString *out,
                           GtkWidget *command, GtkWidget *status);
void hn_page_collect_output (const HnJobEvent *e, GString *out);
/* When the job ends: on success calls add(o, id, data) for each result of
 * the page in `out` (an object with a string "id"), sets *next_cursor (g_free the old one first; NULL on the
 * last page) and returns TRUE; else shows why in `status` (the job's message,
 * or that it printed no results) and returns FALSE. */
typedef void (*HnPageResultFunc) (JsonObject *o, const char *id, gpointer data);
gboolean hn_page_finish_search (gboolean ok, const char *message, const char *out, char **next_cursor,
                                HnPageResultFunc add, gpointer data, GtkWidget *status);
/* A member of a search result: an integer (-1 when absent or not one), a
 * string (NULL likewise). */
gint64 hn_page_json_int (JsonObject *o, const char *name);
const char *hn_page_json_string (JsonObject *o, const char *name);

/* Shows a toast in the window that holds `widget`. */
void hn_page_toast (GtkWidget *widget, const char *message);

G_END_DECLS
