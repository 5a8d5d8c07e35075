/* HnTrainPage: the training pages (Transformer training, LoRA fine-tuning,
 * Hierarchos train/fine-tune): options on the left, the live loss chart,
 * progress, command preview and Start/Stop on the right. One template serves
 * every training kind: option groups show only the options of the kind. */
#pragma once
#include <adwaita.h>

#include "hn-job-controller.h"
#include "hn-loss-chart.h"
#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_TRAIN_PAGE (hn_train_page_get_type ())
G_DECLARE_FINAL_TYPE (HnTrainPage, hn_train_page, HN, TRAIN_PAGE, AdwBin)

/* kind: the job kind; alt_kind: a second kind behind a mode switch (NULL for none). */
GtkWidget *hn_train_page_new (const char *kind, const char *alt_kind);
HnJobSpec *hn_train_page_get_spec (HnTrainPage *self);
HnJobController *hn_train_page_get_controller (HnTrainPage *self);
HnLossChart *hn_train_page_get_chart (HnTrainPage *self);
const char *hn_train_page_get_command_text (HnTrainPage *self);
/* Why Start is disabled, or NULL. */
const char *hn_train_page_get_start_problem (HnTrainPage *self);
/* The memory estimate row (an HnMemoryRow). */
GtkWidget *hn_train_page_get_memory_row (HnTrainPage *self);
/* The data preview (an HnDataPreview, in the "Data preview" expander). */
/* The Hub dataset search and picker (HnDatasetPicker). */
GtkWidget *hn_train_page_get_dataset_picker (HnTrainPage *self);
GtkWidget *hn_train_page_get_data_preview (HnTrainPage *self);
void hn_train_page_set_preview_expanded (HnTrainPage *self, gboolean expanded);
/* Starts `from`'s settings again from `checkpoint` (the Jobs page's Resume):
 * picks the page mode of from's kind, copies its options, sets
 * --resume-from-checkpoint and starts. */
gboolean hn_train_page_resume (HnTrainPage *self, HnJobSpec *from, const char *checkpoint, GError **error);
/* Switches to the alternative kind (TRUE) or back. */
void hn_train_page_set_alt_mode (HnTrainPage *self, gboolean alt);

G_END_DECLS
