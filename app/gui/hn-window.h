/* HnWindow: header bar with a view switcher over the workflow pages
 * (Generate, Fine-tune, Train, Hierarchos, Chat, Models, Side by side,
 * Jobs), toasts, and a banner
 * when only a software Vulkan device exists. */
#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_TYPE_WINDOW (hn_window_get_type ())
G_DECLARE_FINAL_TYPE (HnWindow, hn_window, HN, WINDOW, AdwApplicationWindow)

HnWindow *hn_window_new (GtkApplication *app);
/* "generate", "finetune", "train", "hierarchos", "chat", "models", "compare",
 * "jobs" */
GtkWidget *hn_window_get_page (HnWindow *self, const char *name);
void hn_window_show_page (HnWindow *self, const char *name);
void hn_window_toast (HnWindow *self, const char *message);
gboolean hn_window_get_banner_revealed (HnWindow *self);
/* TRUE while a page runs a job (a chat waiting for input does not count). */
gboolean hn_window_has_running_jobs (HnWindow *self);
/* "Stop and save" on every page that runs a job (training saves a
 * checkpoint; other jobs are cancelled): what Quit does first. */
void hn_window_save_and_stop_jobs (HnWindow *self);
/* The next close really closes (the app's quit action). */
void hn_window_set_quitting (HnWindow *self);
/* Text for a bug report: versions, devices, the last error. */
char *hn_window_dup_diagnostics (HnWindow *self);

G_END_DECLS
