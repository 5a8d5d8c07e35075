#pragma once
#include <adwaita.h>

G_BEGIN_DECLS

#define HN_APP_ID "io.github.hierarchos.Native"
#define HN_TYPE_APPLICATION (hn_application_get_type ())
G_DECLARE_FINAL_TYPE (HnApplication, hn_application, HN, APPLICATION, AdwApplication)

HnApplication *hn_application_new (void);

/* gettext set-up shared by main() and the tests. */
void hn_gui_i18n_init (void);

G_END_DECLS
