/* HnExportDialog: Export from the Models page. A GGUF file for llama.cpp /
 * Ollama (an export-gguf job: weight type, output file, an optional LoRA
 * adapter merged in or written alone) or, with an adapter, the merged model
 * as a normal safetensors folder (a merge-lora job). Both are edited as job
 * specs through option rows from the option table, with their CLI line;
 * "export" (the response) means: start hn_export_dialog_get_spec (). */
#pragma once
#include <adwaita.h>

#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_EXPORT_DIALOG (hn_export_dialog_get_type ())
G_DECLARE_FINAL_TYPE (HnExportDialog, hn_export_dialog, HN, EXPORT_DIALOG, AdwMessageDialog)

/* `model_dir`: the model folder; `name`: for the default file names;
 * `adapter` (may be NULL): the adapter preselected (the newest one made from
 * this model); `out_folder`: where the outputs go by default. */
GtkWidget *hn_export_dialog_new (GtkWindow *parent, const char *model_dir, const char *name, const char *adapter,
                                 const char *out_folder);
/* FALSE: a GGUF file; TRUE: a merged safetensors folder. */
void hn_export_dialog_set_merged (HnExportDialog *self, gboolean merged);
gboolean hn_export_dialog_get_merged (HnExportDialog *self);
/* The spec "export" starts (export-gguf or merge-lora). */
HnJobSpec *hn_export_dialog_get_spec (HnExportDialog *self);
/* Why Export is disabled (bad path, merged without an adapter), or NULL. */
char *hn_export_dialog_dup_problem (HnExportDialog *self);
const char *hn_export_dialog_get_command_text (HnExportDialog *self);
/* The estimated GGUF size shown ("Estimated size: about …"), or "". */
const char *hn_export_dialog_get_size_text (HnExportDialog *self);

G_END_DECLS
