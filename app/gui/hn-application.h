#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_APP_ID "io.github.hierarchos.Native"
#define HN_TYPE_APPLICATION (hn_application_get_type ())
G_DECLARE_FINAL_TYPE (HnApplication, hn_application, HN, APPLICATION, AdwApplication)

HnApplication *hn_application_new (void);

/* At exit (the app's shutdown, the GUI tests' teardown): cancels every job
 * still running and waits, HN_END_JOBS_TIMEOUT_MS at most, for their worker
 * threads to let go (hn_job_wait_all). A window closed with chat jobs open
 * cancels them, but their threads were still freeing the model and the
 * Vulkan device while exit ran the libraries' destructors: a crash at exit. */
#define HN_END_JOBS_TIMEOUT_MS 10000
void hn_application_end_jobs (void);

/* gettext set-up shared by main() and the tests. */
void hn_gui_i18n_init (void);

G_END_DECLS
