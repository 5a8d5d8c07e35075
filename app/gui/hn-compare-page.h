/* HnComparePage: the base model and the fine-tuned one (a LoRA adapter on
 * the base, or a trained model folder) answer the same message side by
 * side. Each side runs one chat job (the Chat page's kind) that keeps its
 * conversation across turns; choosing other models starts new ones. Models
 * without a chat template chat in raw text. */
#pragma once
#include <adwaita.h>
#include "hn-job-controller.h"
#include "jobs/job.h"

G_BEGIN_DECLS

#define HN_TYPE_COMPARE_PAGE (hn_compare_page_get_type ())
G_DECLARE_FINAL_TYPE (HnComparePage, hn_compare_page, HN, COMPARE_PAGE, AdwBin)

/* `tuned`: an adapter folder (adapter_config.json) applied to `base`, or a model folder. */
void hn_compare_page_set_models (HnComparePage *self, const char *base, const char *tuned);
/* Sends `text` to both sides (what the Send button does). FALSE with a reason when it cannot. */
gboolean hn_compare_page_send (HnComparePage *self, const char *text, GError **error);
gboolean hn_compare_page_get_running (HnComparePage *self);
/* The chat job of side 0 (base) or 1 (fine-tuned), or NULL before the first message. */
HnJob *hn_compare_page_get_job (HnComparePage *self, guint side);
/* The controller that runs side 0's or 1's chat jobs. */
HnJobController *hn_compare_page_get_controller (HnComparePage *self, guint side);
/* The last reply of side 0 (base) or 1 (fine-tuned). */
const char *hn_compare_page_get_reply (HnComparePage *self, guint side);

G_END_DECLS
