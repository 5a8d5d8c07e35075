/* Runs `hierarchos-native-cli doctor` and `devices` as a user would. */
#include "cli-util.h"
#include <glib.h>
#include <json-glib/json-glib.h>
#include <string.h>

static void
test_doctor_json (void)
{
  int status;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run_env (&status, &err, NULL, "doctor", "--json", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_assert_true (json_parser_load_from_data (p, out, -1, &error));
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  g_assert_cmpstr (json_object_get_string_member (o, "compute_check"), ==, "ok");
  JsonArray *devs = json_object_get_array_member (o, "devices");
  g_assert_cmpuint (json_array_get_length (devs), >, 0);
  JsonObject *d = json_array_get_object_element (devs, 0);
  g_assert_nonnull (json_object_get_string_member (d, "name"));
  g_assert_cmpint (json_object_get_int_member (d, "subgroup_size"), >, 0);
  g_assert_true (json_object_has_member (d, "cooperative_matrix_khr"));
  g_assert_true (json_object_get_boolean_member (json_object_get_object_member (o, "cache_dir"), "writable"));
  /* the shader list names the core ops */
  JsonArray *sh = json_object_get_array_member (o, "shaders");
  gboolean has_matmul = FALSE;
  for (guint i = 0; i < json_array_get_length (sh); i++)
    if (g_str_equal (json_array_get_string_element (sh, i), "matmul"))
      has_matmul = TRUE;
  g_assert_true (has_matmul);
}

static void
test_doctor_text_and_devices (void)
{
  int status;
  g_autofree char *err = NULL, *err2 = NULL, *err3 = NULL;
  g_autofree char *out = cli_run_env (&status, &err, NULL, "doctor", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (out, "compute check: ok"));
  g_autofree char *dev = cli_run_env (&status, &err2, NULL, "devices", "--json", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_autoptr (JsonParser) p = json_parser_new ();
  g_assert_true (json_parser_load_from_data (p, dev, -1, NULL));
  g_assert_cmpuint (json_array_get_length (json_node_get_array (json_parser_get_root (p))), >, 0);
  g_autofree char *help = cli_run_env (&status, &err3, NULL, "doctor", "--help", NULL);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (help, "--json"));
}

static void
test_no_device (void)
{
  /* A loader that finds no driver: doctor and devices fail with a clear message. */
  g_auto (GStrv) env = g_get_environ ();
  env = g_environ_setenv (env, "VK_ICD_FILENAMES", "/nonexistent/icd.json", TRUE);
  env = g_environ_setenv (env, "VK_DRIVER_FILES", "/nonexistent/icd.json", TRUE);
  int status;
  g_autofree char *err = NULL, *err2 = NULL;
  g_autofree char *out = cli_run_env (&status, &err, (const char *const *) env, "doctor", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "Vulkan"));
  g_autofree char *out2 = cli_run_env (&status, &err2, (const char *const *) env, "devices", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_true (g_str_has_prefix (err2, "error: "));
}

static void
test_bad_device (void)
{
  int status;
  g_autofree char *err = NULL;
  g_autofree char *out = cli_run_env (&status, &err, NULL, "doctor", "--device", "no-such-gpu-xyz", NULL);
  g_assert_false (g_spawn_check_wait_status (status, NULL));
  g_assert_nonnull (strstr (err, "no-such-gpu-xyz"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cli/doctor/json", test_doctor_json);
  g_test_add_func ("/cli/doctor/text-devices", test_doctor_text_and_devices);
  g_test_add_func ("/cli/doctor/no-device", test_no_device);
  g_test_add_func ("/cli/doctor/bad-device", test_bad_device);
  return g_test_run ();
}
