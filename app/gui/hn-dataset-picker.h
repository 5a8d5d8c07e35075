/* HnDatasetPicker: Hub datasets on a training page. Search (a hub-search
 * job with --repo-type dataset, paged), pick a dataset to see its splits
 * and data files (JSONL / JSON / Parquet, as hn_hub_dataset_pick_files
 * chooses them), pick a split or one file: the page's spec then trains on
 * --hf-dataset with --hf-dataset-split or --hf-dataset-file (its --train
 * unset), and the page's data preview shows it once it is downloaded.
 * Download posts a pull job (--repo-type dataset, the picked files) with
 * its CLI line, progress and cancel. */
#pragma once
#include <adwaita.h>

#include "hn-job-controller.h"

G_BEGIN_DECLS

#define HN_TYPE_DATASET_PICKER (hn_dataset_picker_get_type ())
G_DECLARE_FINAL_TYPE (HnDatasetPicker, hn_dataset_picker, HN, DATASET_PICKER, AdwPreferencesGroup)

/* The spec the picks are written to (the page's). */
void hn_dataset_picker_set_spec (HnDatasetPicker *self, HnJobSpec *spec);
void hn_dataset_picker_search (HnDatasetPicker *self, const char *text);
/* The next page of results (FALSE on the last page). */
gboolean hn_dataset_picker_more (HnDatasetPicker *self);
/* Shows a dataset's splits and files (loads in the background). */
void hn_dataset_picker_select (HnDatasetPicker *self, const char *id);
/* Picks a split ("train", "validation", "test") or a file of the selected
 * dataset: writes the spec. FALSE when the dataset has no such split/file. */
gboolean hn_dataset_picker_pick_split (HnDatasetPicker *self, const char *split);
gboolean hn_dataset_picker_pick_file (HnDatasetPicker *self, const char *path);
/* Downloads what is picked (a pull job). */
gboolean hn_dataset_picker_download (HnDatasetPicker *self, GError **error);

/* For tests. */
gboolean hn_dataset_picker_is_loading (HnDatasetPicker *self);
HnJobController *hn_dataset_picker_get_pull_controller (HnDatasetPicker *self);
HnJobSpec *hn_dataset_picker_get_search_spec (HnDatasetPicker *self);
guint hn_dataset_picker_get_n_results (HnDatasetPicker *self);
/* The selected dataset's splits (NULL-terminated, owned by the picker) and data files. */
const char *const *hn_dataset_picker_get_splits (HnDatasetPicker *self);
guint hn_dataset_picker_get_n_files (HnDatasetPicker *self);
const char *hn_dataset_picker_get_status (HnDatasetPicker *self);
const char *hn_dataset_picker_get_command_text (HnDatasetPicker *self);

G_END_DECLS
