/* HnCommandView: the live `hierarchos-native-cli ...` line for a spec
 * (secrets masked), with a copy button. */
#pragma once
#include <gtk/gtk.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_COMMAND_VIEW (hn_command_view_get_type ())
G_DECLARE_FINAL_TYPE (HnCommandView, hn_command_view, HN, COMMAND_VIEW, GtkWidget)

void hn_command_view_set_spec (HnCommandView *self, HnJobSpec *spec);
const char *hn_command_view_get_text (HnCommandView *self);

G_END_DECLS
