/* The Flatpak manifest parses and asks for what the app needs: the GNOME
 * runtime, GPU access, network for Hub downloads, and a meson build of this
 * project as the last module. (flatpak-builder is not on Debian 12 by
 * default, so the JSON is checked here with json-glib.) */
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

static gboolean
array_has (JsonArray *a, const char *s)
{
  for (guint i = 0; a && i < json_array_get_length (a); i++)
    if (g_strcmp0 (json_array_get_string_element (a, i), s) == 0)
      return TRUE;
  return FALSE;
}

static void
test_manifest (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("HN_SOURCE_DIR"), "flatpak", "io.github.hierarchos.Native.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_file (parser, path, &error));
  g_assert_no_error (error);
  JsonObject *root = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpstr (json_object_get_string_member (root, "id"), ==, "io.github.hierarchos.Native");
  g_assert_cmpstr (json_object_get_string_member (root, "runtime"), ==, "org.gnome.Platform");
  g_assert_cmpstr (json_object_get_string_member (root, "sdk"), ==, "org.gnome.Sdk");
  int version = atoi (json_object_get_string_member (root, "runtime-version"));
  g_assert_cmpint (version, >=, 47);
  g_assert_cmpstr (json_object_get_string_member (root, "command"), ==, "hierarchos-native");
  JsonArray *finish = json_object_get_array_member (root, "finish-args");
  g_assert_true (array_has (finish, "--device=dri"));
  g_assert_true (array_has (finish, "--share=network"));
  g_assert_true (array_has (finish, "--socket=wayland"));
  g_assert_true (array_has (finish, "--socket=fallback-x11"));
  JsonArray *modules = json_object_get_array_member (root, "modules");
  g_assert_cmpuint (json_array_get_length (modules), >=, 1);
  for (guint i = 0; i < json_array_get_length (modules); i++)
    {
      JsonObject *m = json_array_get_object_element (modules, i);
      g_assert_true (json_object_has_member (m, "name"));
      g_assert_true (json_object_has_member (m, "buildsystem"));
      JsonArray *sources = json_object_get_array_member (m, "sources");
      g_assert_cmpuint (json_array_get_length (sources), >=, 1);
      for (guint k = 0; k < json_array_get_length (sources); k++)
        {
          JsonObject *s = json_array_get_object_element (sources, k);
          const char *type = json_object_get_string_member (s, "type");
          /* remote sources are pinned */
          if (g_strcmp0 (type, "archive") == 0)
            g_assert_true (json_object_has_member (s, "sha256"));
          if (g_strcmp0 (type, "git") == 0)
            g_assert_true (json_object_has_member (s, "tag") || json_object_has_member (s, "commit"));
        }
    }
  JsonObject *last = json_array_get_object_element (modules, json_array_get_length (modules) - 1);
  g_assert_cmpstr (json_object_get_string_member (last, "name"), ==, "hierarchos-native");
  g_assert_cmpstr (json_object_get_string_member (last, "buildsystem"), ==, "meson");
  JsonArray *config = json_object_get_array_member (last, "config-opts");
  g_assert_true (array_has (config, "-Dgui=enabled"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/flatpak/manifest", test_manifest);
  return g_test_run ();
}
