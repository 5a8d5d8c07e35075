/* HnMemoryRow: the memory estimate of a page's job (jobs/memory-estimate.h),
 * recomputed as the settings change, against the device's free memory.
 * When it does not fit, it says so with what to change, and a "Start anyway"
 * check lets the user go on: a warning, never a hard block. */
#pragma once
#include <gtk/gtk.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_MEMORY_ROW (hn_memory_row_get_type ())
G_DECLARE_FINAL_TYPE (HnMemoryRow, hn_memory_row, HN, MEMORY_ROW, GtkBox)

GtkWidget *hn_memory_row_new (void);
/* Follows `spec` (NULL: none); the estimate is redone shortly after each change. */
void hn_memory_row_set_spec (HnMemoryRow *self, HnJobSpec *spec);
/* Recomputes now (tests; the row also does it by itself). */
void hn_memory_row_refresh (HnMemoryRow *self);
/* The text shown ("" when there is no estimate, e.g. no model chosen). */
const char *hn_memory_row_get_text (HnMemoryRow *self);
/* TRUE when the estimate exceeds the free memory. */
gboolean hn_memory_row_get_exceeds (HnMemoryRow *self);
/* TRUE when it exceeds and the user has not ticked "Start anyway". The row
 * emits "changed" when this or the text changes. */
gboolean hn_memory_row_get_needs_override (HnMemoryRow *self);
void hn_memory_row_set_override (HnMemoryRow *self, gboolean start_anyway);
/* Why Start waits (for the page's reason line), or NULL. */
char *hn_memory_row_dup_problem (HnMemoryRow *self);

G_END_DECLS
