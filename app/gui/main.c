#include "hn-application.h"

int
main (int argc, char **argv)
{
  hn_gui_i18n_init ();
  g_autoptr (HnApplication) app = hn_application_new ();
  return g_application_run (G_APPLICATION (app), argc, argv);
}
