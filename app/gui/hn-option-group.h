/* HnOptionGroup: an AdwPreferencesGroup whose rows edit options of an
 * HnJobSpec, built from the option table (label, help, type, range, hint):
 * spin buttons for integers, validated entries for numbers, switches, combo
 * rows for choices, entry rows with a file chooser for paths. Options the
 * spec's kind does not take are left out (a group with none hides itself), so
 * one template serves several kinds. Options marked advanced go into a
 * "More options" expander.
 *
 * In a template:
 *   <object class="HnOptionGroup" id="optimizer_group">
 *     <property name="title" translatable="yes">Optimizer</property>
 *     <property name="options">lr lr-scheduler warmup-steps weight-decay</property>
 *   </object>
 * and in code: hn_option_group_set_spec (group, spec). */
#pragma once
#include <adwaita.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_OPTION_GROUP (hn_option_group_get_type ())
G_DECLARE_FINAL_TYPE (HnOptionGroup, hn_option_group, HN, OPTION_GROUP, AdwPreferencesGroup)

void hn_option_group_set_spec (HnOptionGroup *self, HnJobSpec *spec);
HnJobSpec *hn_option_group_get_spec (HnOptionGroup *self);
/* The first inline problem (bad number, missing file...) as a sentence, or
 * NULL. "problems-changed" is emitted when it may have changed. */
char *hn_option_group_dup_problem (HnOptionGroup *self);
/* The row that edits `name`, or NULL (tests). */
GtkWidget *hn_option_group_get_row (HnOptionGroup *self, const char *name);
/* The editing widget in that row (GtkSpinButton, GtkEntry, GtkSwitch,
 * AdwComboRow or AdwEntryRow) (tests). */
GtkWidget *hn_option_group_get_editor (HnOptionGroup *self, const char *name);

G_END_DECLS
