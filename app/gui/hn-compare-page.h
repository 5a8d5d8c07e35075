/* HnComparePage: the base model and the fine-tuned one (a LoRA adapter on
 * the base, or a trained model folder) answer the same message side by
 * side. Each message runs one transformer-generate job per side (the same
 * job the Generate page runs), so a reply continues that message; the
 * conversation is not carried from turn to turn. */
#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_TYPE_COMPARE_PAGE (hn_compare_page_get_type ())
G_DECLARE_FINAL_TYPE (HnComparePage, hn_compare_page, HN, COMPARE_PAGE, AdwBin)

/* `tuned`: an adapter folder (adapter_config.json) applied to `base`, or a model folder. */
void hn_compare_page_set_models (HnComparePage *self, const char *base, const char *tuned);
/* Sends `text` to both sides (what the Send button does). FALSE with a reason when it cannot. */
gboolean hn_compare_page_send (HnComparePage *self, const char *text, GError **error);
gboolean hn_compare_page_get_running (HnComparePage *self);
/* The last reply of side 0 (base) or 1 (fine-tuned). */
const char *hn_compare_page_get_reply (HnComparePage *self, guint side);

G_END_DECLS
