/* HnProgressView: a progress bar with "1,200 of 5,000 steps — about 14
 * minutes left · 1,234 tokens/s · 1.2 GB on the device", fed by a
 * controller's events. */
#pragma once
#include <gtk/gtk.h>

#include "hn-job-controller.h"

G_BEGIN_DECLS

#define HN_TYPE_PROGRESS_VIEW (hn_progress_view_get_type ())
G_DECLARE_FINAL_TYPE (HnProgressView, hn_progress_view, HN, PROGRESS_VIEW, GtkWidget)

void hn_progress_view_set_controller (HnProgressView *self, HnJobController *controller);
/* The text under the bar (tests). */
const char *hn_progress_view_get_text (HnProgressView *self);

G_END_DECLS
