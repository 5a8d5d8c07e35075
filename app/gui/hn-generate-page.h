/* HnGeneratePage: generate text with a Transformer model; the output streams
 * into the view token by token. */
#pragma once
#include <adwaita.h>

#include "hn-job-controller.h"
#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_GENERATE_PAGE (hn_generate_page_get_type ())
G_DECLARE_FINAL_TYPE (HnGeneratePage, hn_generate_page, HN, GENERATE_PAGE, AdwBin)

GtkWidget *hn_generate_page_new (void);
HnJobSpec *hn_generate_page_get_spec (HnGeneratePage *self);
HnJobController *hn_generate_page_get_controller (HnGeneratePage *self);
void hn_generate_page_set_prompt (HnGeneratePage *self, const char *prompt);
/* The extra prompts served with continuous batching, one per line. */
void hn_generate_page_set_extra_prompts (HnGeneratePage *self, const char *prompts);
char *hn_generate_page_dup_output (HnGeneratePage *self);
const char *hn_generate_page_get_command_text (HnGeneratePage *self);
const char *hn_generate_page_get_start_problem (HnGeneratePage *self);
/* The memory estimate row (an HnMemoryRow). */
GtkWidget *hn_generate_page_get_memory_row (HnGeneratePage *self);

G_END_DECLS
