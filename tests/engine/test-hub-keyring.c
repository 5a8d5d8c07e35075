/* The Hub token in a real Secret Service: a private D-Bus session bus with
 * its own gnome-keyring-daemon (login keyring unlocked with a throwaway
 * password, in a temporary HOME), so the user's keyring is never touched.
 * libsecret saves, finds and forgets the token; a gated repo on the fake Hub
 * is refused without it and downloaded with it; the token is never printed.
 * Skipped where dbus-daemon or gnome-keyring-daemon is missing (the same
 * path runs through an injected store in test-hub-library). */
#include "fake-hub.h"
#include "hub/hub.h"
#include "hub/hub-token.h"
#include "base/hn-error.h"

#include <string.h>

static GSubprocess *bus, *keyring;
static char *home;

static gboolean
secrets_ready (void)
{
  g_autoptr (GDBusConnection) c = g_bus_get_sync (G_BUS_TYPE_SESSION, NULL, NULL);
  if (!c)
    return FALSE;
  g_autoptr (GVariant) r = g_dbus_connection_call_sync (c, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                        "org.freedesktop.DBus", "NameHasOwner",
                                                        g_variant_new ("(s)", "org.freedesktop.secrets"),
                                                        G_VARIANT_TYPE ("(b)"), G_DBUS_CALL_FLAGS_NONE, 2000, NULL,
                                                        NULL);
  gboolean owned = FALSE;
  if (r)
    g_variant_get (r, "(b)", &owned);
  return owned;
}

/* Starts the private bus and the keyring; FALSE (with *why) when this
 * machine has neither. */
static gboolean
start_keyring (char **why)
{
  g_autofree char *dbus = g_find_program_in_path ("dbus-daemon");
  g_autofree char *gkd = g_find_program_in_path ("gnome-keyring-daemon");
  if (!dbus || !gkd)
    {
      *why = g_strdup_printf ("%s not installed", !dbus ? "dbus-daemon" : "gnome-keyring-daemon");
      return FALSE;
    }
  g_autoptr (GError) error = NULL;
  bus = g_subprocess_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, dbus, "--session", "--nofork", "--print-address=1",
                          NULL);
  g_assert_no_error (error);
  g_autoptr (GDataInputStream) in = g_data_input_stream_new (g_subprocess_get_stdout_pipe (bus));
  g_autofree char *addr = g_data_input_stream_read_line (in, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (addr);
  g_setenv ("DBUS_SESSION_BUS_ADDRESS", g_strstrip (addr), TRUE);

  home = g_dir_make_tmp ("hn-keyring-XXXXXX", NULL);
  g_autofree char *run = g_build_filename (home, "run", NULL);
  g_mkdir_with_parents (run, 0700);
  g_autoptr (GSubprocessLauncher) l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDIN_PIPE);
  g_subprocess_launcher_setenv (l, "HOME", home, TRUE);
  g_autofree char *data = g_build_filename (home, "data", NULL);
  g_autofree char *cfg = g_build_filename (home, "config", NULL);
  g_subprocess_launcher_setenv (l, "XDG_DATA_HOME", data, TRUE);
  g_subprocess_launcher_setenv (l, "XDG_CONFIG_HOME", cfg, TRUE);
  g_subprocess_launcher_setenv (l, "XDG_RUNTIME_DIR", run, TRUE);
  keyring = g_subprocess_launcher_spawn (l, &error, gkd, "--foreground", "--unlock", "--components=secrets", NULL);
  g_assert_no_error (error);
  /* --unlock reads the login keyring's password from stdin, then EOF */
  GOutputStream *pw = g_subprocess_get_stdin_pipe (keyring);
  g_output_stream_write_all (pw, "throwaway", 9, NULL, NULL, NULL);
  g_output_stream_close (pw, NULL, NULL);
  for (int i = 0; i < 100 && !secrets_ready (); i++)
    g_usleep (50000);
  if (!secrets_ready ())
    {
      *why = g_strdup ("gnome-keyring-daemon did not start on the private bus");
      return FALSE;
    }
  return TRUE;
}

static void
stop_keyring (void)
{
  if (keyring)
    {
      g_subprocess_force_exit (keyring);
      g_subprocess_wait (keyring, NULL, NULL);
      g_clear_object (&keyring);
    }
  if (bus)
    {
      g_subprocess_force_exit (bus);
      g_subprocess_wait (bus, NULL, NULL);
      g_clear_object (&bus);
    }
  if (home)
    rm_rf (home);
  g_clear_pointer (&home, g_free);
}

static gboolean have_keyring;
static char *no_keyring_why;

static void
test_keyring (void)
{
  if (!have_keyring)
    {
      g_test_skip (no_keyring_why);
      return;
    }
  g_autoptr (GError) error = NULL;
  g_autofree char *cache = g_dir_make_tmp ("hn-keyring-cache-XXXXXX", NULL);

  /* empty keyring: no token, and the gated repo is refused */
  g_autofree char *none = hn_hub_token_lookup (hub_srv.base, &error);
  g_assert_no_error (error);
  g_assert_null (none);
  g_autoptr (HnHub) anon = hn_hub_new ();
  hn_hub_set_endpoint (anon, hub_srv.base);
  hn_hub_set_cache_dir (anon, cache);
  g_assert_null (hn_hub_snapshot_download (anon, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error));
  g_assert_error (error, HN_ERROR, HN_ERROR_AUTH);
  g_clear_error (&error);

  /* saved through libsecret, found again (another endpoint has none) */
  g_assert_true (hn_hub_token_save (hub_srv.base, "good-token", &error));
  g_assert_no_error (error);
  g_autofree char *back = hn_hub_token_lookup (hub_srv.base, &error);
  g_assert_cmpstr (back, ==, "good-token");
  g_autofree char *other = hn_hub_token_lookup ("https://example.invalid", &error);
  g_assert_no_error (error);
  g_assert_null (other);

  /* a fresh hub finds it when the Hub asks for it */
  g_autoptr (HnHub) hub = hn_hub_new ();
  hn_hub_set_endpoint (hub, hub_srv.base);
  hn_hub_set_cache_dir (hub, cache);
  g_autofree char *snap = hn_hub_snapshot_download (hub, HN_HUB_REPO_MODEL, "org/gated", NULL, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (snap);

  /* the CLI on the same bus finds the same entry; nothing it prints holds the token */
  const char *build = g_getenv ("HN_BUILD_DIR");
  g_autofree char *cli = g_build_filename (build ? build : ".", "app", "cli", "hierarchos-native-cli", NULL);
  if (g_file_test (cli, G_FILE_TEST_IS_EXECUTABLE))
    {
      g_autofree char *cache2 = g_dir_make_tmp ("hn-keyring-cache-XXXXXX", NULL);
      g_autoptr (GSubprocess) p = g_subprocess_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
                                                    &error, cli, "pull", "--repo", "org/gated", "--hf-cache-dir",
                                                    cache2, "--json-events", NULL);
      g_assert_no_error (error);
      g_autofree char *out = NULL, *err = NULL;
      g_assert_true (g_subprocess_communicate_utf8 (p, NULL, NULL, &out, &err, &error));
      if (g_subprocess_get_exit_status (p) != 0)
        g_error ("pull with the keyring token failed: %s", err);
      g_assert_null (strstr (out, "good-token"));
      g_assert_null (strstr (err, "good-token"));
      rm_rf (cache2);
    }

  g_assert_true (hn_hub_token_forget (hub_srv.base, &error));
  g_autofree char *gone = hn_hub_token_lookup (hub_srv.base, &error);
  g_assert_no_error (error);
  g_assert_null (gone);
  rm_rf (cache);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_unsetenv ("HF_TOKEN");
  g_unsetenv ("HUGGING_FACE_HUB_TOKEN");
  g_unsetenv ("HF_HUB_OFFLINE");
  g_unsetenv ("http_proxy");
  g_unsetenv ("https_proxy");
  g_autofree char *hf_home = g_dir_make_tmp ("hn-keyring-hf-XXXXXX", NULL);
  g_setenv ("HF_HOME", hf_home, TRUE);
  have_keyring = start_keyring (&no_keyring_why);
  start_server ();
  g_test_add_func ("/hub-keyring/libsecret", test_keyring);
  int rc = g_test_run ();
  stop_server ();
  stop_keyring ();
  rm_rf (hf_home);
  g_free (no_keyring_why);
  return rc;
}
