/* HnModelsPage: the model library. Left: the models in the Hugging Face
 * cache and the folders and GGUF files the user added (architecture,
 * parameters, dtype or quantization, size, parity-verified, the runs and
 * adapters made from it, a fit badge for this device), Hub search with paged results (a hub-search job),
 * the access token (kept in the keyring). Right: the chosen model's card,
 * files and fit badge; Download (a pull job: progress, speed, ETA, cancel,
 * resume from the partial file; of a GGUF-only repo the one .gguf chosen), Chat / Generate / Fine-tune / Train with
 * it, Export (a GGUF file or a merged folder, as a job: hn-export-dialog.h),
 * Remove (asks first, says what it frees). */
#pragma once
#include <adwaita.h>

#include "hn-job-controller.h"
#include "jobs/model-library.h"

G_BEGIN_DECLS

#define HN_TYPE_MODELS_PAGE (hn_models_page_get_type ())
G_DECLARE_FINAL_TYPE (HnModelsPage, hn_models_page, HN, MODELS_PAGE, AdwBin)

GtkWidget *hn_models_page_new (void);
HnJobController *hn_models_page_get_search_controller (HnModelsPage *self);
HnJobController *hn_models_page_get_pull_controller (HnModelsPage *self);
/* The hub-search job's spec (its --limit is the page size). */
HnJobSpec *hn_models_page_get_search_spec (HnModelsPage *self);

/* For tests and the first-run flow. */
void hn_models_page_search (HnModelsPage *self, const char *text);
void hn_models_page_refresh_local (HnModelsPage *self);
/* TRUE while the local list, a search or a model's details load. */
gboolean hn_models_page_is_loading (HnModelsPage *self);
guint hn_models_page_get_n_results (HnModelsPage *self);
guint hn_models_page_get_n_local (HnModelsPage *self);
const char *hn_models_page_get_search_status (HnModelsPage *self);
/* Shows a model's details: a search result (local FALSE) or a cached model. */
gboolean hn_models_page_select (HnModelsPage *self, const char *id, gboolean local);
const char *hn_models_page_get_fit_text (HnModelsPage *self);
/* The fit badge of a search row ("Checking fit…" until its config.json
 * came), or NULL; *fit (may be NULL) gets its estimates when it has them. */
const char *hn_models_page_get_result_fit (HnModelsPage *self, const char *id, HnModelFit *fit);
/* The device the badges are for, instead of asking the default device
 * (tests; a device picker). Every badge is re-judged. */
void hn_models_page_set_device_memory (HnModelsPage *self, guint64 free_bytes, const char *name);
/* A model folder or .gguf file listed beside the cache from now on (kept in
 * hn_model_library_get_paths' list, which `hub-search --local` reads; its
 * id is its absolute path). FALSE with a reason when it
 * is neither. */
/* Export (the dialog of models.export) for a finished training or fine-tune
 * run's output: a LoRA adapter folder (adapter_config.json) over its
 * base_model, or a model folder on its own. FALSE with error when there is
 * no such folder or an export runs. */
gboolean hn_models_page_export_run (HnModelsPage *self, const char *base_model, const char *output, GError **error);
gboolean hn_models_page_add_local (HnModelsPage *self, const char *path, GError **error);
/* Stops listing an added path (its files stay); FALSE when it was not listed. */
gboolean hn_models_page_forget_local (HnModelsPage *self, const char *path);
/* The subtitle of a local row (architecture, size, runs, path), or NULL. */
const char *hn_models_page_get_local_subtitle (HnModelsPage *self, const char *id);
/* The chosen model's trainings, fine-tunes and exports (the Runs tab). */
guint hn_models_page_get_n_runs (HnModelsPage *self);
/* The badge of a cached model's row, or NULL. */
const char *hn_models_page_get_local_fit (HnModelsPage *self, const char *id);
char *hn_models_page_dup_card_text (HnModelsPage *self);
guint hn_models_page_get_n_files (HnModelsPage *self);
const char *hn_models_page_get_command_text (HnModelsPage *self);
/* A Hub repo with .gguf files and no safetensors weights: its .gguf files,
 * of which Download pulls the chosen one (the CLI's --hf-file), else NULL. */
const char *const *hn_models_page_get_gguf_files (HnModelsPage *self);
/* Picks the file Download pulls; FALSE when it is not one of them. */
gboolean hn_models_page_choose_gguf (HnModelsPage *self, const char *file);
const char *hn_models_page_get_chosen_gguf (HnModelsPage *self);
/* The Export dialog (HnExportDialog) while it is open, else NULL; its
 * "export" response starts the job on the export controller. */
GtkWidget *hn_models_page_get_export_dialog (HnModelsPage *self);
HnJobController *hn_models_page_get_export_controller (HnModelsPage *self);
/* The "Remove?" dialog while it is open, else NULL. */
GtkWidget *hn_models_page_get_remove_dialog (HnModelsPage *self);
void hn_models_page_set_token_text (HnModelsPage *self, const char *text);
const char *hn_models_page_get_token_status (HnModelsPage *self);

G_END_DECLS
