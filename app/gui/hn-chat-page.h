/* HnChatPage: a conversation with a model. One chat job runs per
 * conversation; each message is pushed into its input queue and the reply
 * streams into an assistant bubble. */
#pragma once
#include <adwaita.h>

#include "hn-job-controller.h"
#include "jobs/job-spec.h"

G_BEGIN_DECLS

#define HN_TYPE_CHAT_PAGE (hn_chat_page_get_type ())
G_DECLARE_FINAL_TYPE (HnChatPage, hn_chat_page, HN, CHAT_PAGE, AdwBin)

GtkWidget *hn_chat_page_new (void);
HnJobSpec *hn_chat_page_get_spec (HnChatPage *self);
HnJobController *hn_chat_page_get_controller (HnChatPage *self);
/* Adds a bubble (tests and screenshots). */
void hn_chat_page_add_message (HnChatPage *self, gboolean from_user, const char *text);
const char *hn_chat_page_get_start_problem (HnChatPage *self);
/* Sends a message as if typed and sent (starts the conversation's job if needed). */
void hn_chat_page_send (HnChatPage *self, const char *text);
/* The text of the latest reply so far (valid UTF-8). */
char *hn_chat_page_dup_last_reply (HnChatPage *self);

G_END_DECLS
