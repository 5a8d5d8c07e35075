/* HnDataPreview: the first rows of a page's training data as the trainer
 * will see them (engine/data/dataset.h hn_dataset_preview): the text after
 * templating with the loss-masked part set apart (dim, on a grey ground),
 * token counts, and rows truncated, dropped or malformed with the reason.
 * A Hub dataset (--hf-dataset and its split or file) is previewed from the
 * cache once downloaded (its first file). Recomputed when the data,
 * tokenizer, model or sequence length change. */
#pragma once
#include <gtk/gtk.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_DATA_PREVIEW (hn_data_preview_get_type ())
G_DECLARE_FINAL_TYPE (HnDataPreview, hn_data_preview, HN, DATA_PREVIEW, GtkBox)

void hn_data_preview_set_spec (HnDataPreview *self, HnJobSpec *spec);
void hn_data_preview_refresh (HnDataPreview *self);
/* The summary line ("3 rows · shape instruction · 120 tokens, 48 trained"), or the error. */
const char *hn_data_preview_get_summary (HnDataPreview *self);
guint hn_data_preview_get_n_rows (HnDataPreview *self);
/* The markup of row i (masked spans carry the "masked" colours). */
const char *hn_data_preview_get_row_markup (HnDataPreview *self, guint i);

G_END_DECLS
