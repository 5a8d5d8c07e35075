/* What every GUI test executable shares: the set-up (translations, GTK and
 * libadwaita, the job kinds, the app's CSS, a private data folder so the job
 * history of one executable never meets another's), one main window, main
 * loop helpers that wait for a condition rather than a time, screenshots of
 * the window, and the option editors of a page. */
#pragma once
#include "hn-job-controller.h"
#include "hn-option-group.h"
#include "hn-train-page.h"
#include "hn-window.h"

G_BEGIN_DECLS

/* Before anything else in main(): NAME names the executable's own folders
 * (<build>/tests/out/NAME for runs, a private XDG_DATA_HOME). */
void gui_test_init (int *argc, char ***argv, const char *name);
/* The main window (1280×820, shown), made on first use. */
HnWindow *gui_test_window (void);
/* g_test_run (), then the window and the rest torn down. */
int gui_test_run (void);

/* Runs the main loop for `ms` milliseconds (lets widgets draw). */
void gui_test_spin (guint ms);
/* Runs the main loop until cond (data) holds; FALSE after timeout_ms. */
gboolean gui_test_wait (gboolean (*cond) (gpointer), gpointer data, guint timeout_ms);
/* cond for gui_test_wait: the HnJobController `data` runs no job. */
gboolean gui_test_not_running (gpointer controller);

/* <build>/tests/out/NAME/RUN: a folder for job outputs, empty at the start
 * of the executable (jobs refuse an output folder an earlier run filled). */
char *gui_test_run_dir (const char *run);
/* Saves the window as <build>/tests/out/NAME.png. */
void gui_test_screenshot (const char *name);
/* The same of another shown toplevel (a dialog). */
void gui_test_screenshot_of (GtkWidget *toplevel, const char *name);

/* The HnOptionGroup inside `root` that edits `option`, or NULL. */
HnOptionGroup *gui_test_find_group (GtkWidget *root, const char *option);
/* Its editor widget (asserted to exist). */
GtkWidget *gui_test_editor (GtkWidget *page, const char *option);
/* The preview parses back through the CLI parser into the same spec. */
void gui_test_check_round_trip (const char *cmd, HnJobSpec *spec);

/* The Fine-tune page, shown, with the preselected demo model and dataset
 * and a short run into gui_test_run_dir (RUN); NULL (the test skipped)
 * when this build lacks the kind. */
HnJobSpec *gui_test_finetune_setup (HnTrainPage **page_out, const char *run, gint64 steps, gint64 batch,
                                    gint64 seq_len);
/* Starts the page's run, holds it at step 2 (on the worker thread) until
 * "Stop and save" of every page (what Quit does first) was asked for, so it
 * stops there however loaded the machine is: a resumable run in the
 * history. Resume continues it from that checkpoint, on the same page, to
 * step `steps`; both ends are checked. */
void gui_test_stop_save_resume (HnTrainPage *page, gint64 steps);

/* Holds a job on its worker thread at the first event `at` accepts, until
 * released: the test acts at that exact point however loaded the machine
 * is (a run cannot end before its stop or cancel arrives). */
typedef struct {
  GMutex lock;
  GCond cond;
  gboolean (*at) (const HnJobEvent *e, gpointer data);
  gpointer data;
  gboolean held, released;
  HnJobController *controller;
} GuiTestHold;
/* Taps `c` (set before its job starts). */
void gui_test_hold_start (GuiTestHold *h, HnJobController *c, gboolean (*at) (const HnJobEvent *e, gpointer data),
                          gpointer data);
/* Runs the main loop until the job is held; FALSE after timeout_ms. */
gboolean gui_test_hold_wait (GuiTestHold *h, guint timeout_ms);
/* Lets the job go on and removes the tap. */
void gui_test_hold_release (GuiTestHold *h);

/* A private, empty Hugging Face cache for the fake Hub: HF_HUB_CACHE and
 * HF_HOME set to a new temporary folder (returned), no token or proxy from
 * the environment. Before gui_test_init. */
char *gui_test_private_hub_cache (void);

/* Follows a chat job's events: "event" handler data for gui_test_chat_event. */
typedef struct {
  gboolean turn_end;
  int tokens; /* streamed TOKEN events with an id */
} GuiTestChat;
void gui_test_chat_event (HnJobController *c, const HnJobEvent *e, GuiTestChat *seen);
/* cond for gui_test_wait: the GuiTestChat saw a turn end. */
gboolean gui_test_chat_turn_done (gpointer seen);

G_END_DECLS
