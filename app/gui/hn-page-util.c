#include "hn-page-util.h"
#include "base/json-util.h"
#include "hn-command-view.h"
#include "hn-option-group.h"
#include "jobs/job.h"

#include <glib/gi18n.h>
#include <string.h>

#define HN_SCHEMA_ID "io.github.hierarchos.Native"

char *
hn_demo_path (const char *name)
{
  const char *env = g_getenv ("HN_DATA_DIR");
  const char *dirs[] = { env, HN_PKGDATADIR, HN_SOURCE_DATADIR };
  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      if (!dirs[i] || !*dirs[i])
        continue;
      g_autofree char *p = g_build_filename (dirs[i], "demo", name, NULL);
      if (g_file_test (p, G_FILE_TEST_EXISTS))
        return g_steal_pointer (&p);
    }
  return NULL;
}

GSettings *
hn_app_settings (void)
{
  static GSettings *settings;
  static gboolean looked;
  if (!looked)
    {
      looked = TRUE;
      GSettingsSchemaSource *src = g_settings_schema_source_get_default ();
      g_autoptr (GSettingsSchema) schema = src ? g_settings_schema_source_lookup (src, HN_SCHEMA_ID, TRUE) : NULL;
      if (schema)
        settings = g_settings_new_full (schema, NULL, NULL);
      else
        g_warning ("GSettings schema %s is not installed; settings will not be kept", HN_SCHEMA_ID);
    }
  return settings;
}

static void
default_path (HnJobSpec *spec, const char *option, const char *key, const char *demo, GFileTest test)
{
  if (!hn_job_spec_lookup (spec, option) || hn_job_spec_is_set (spec, option))
    return;
  GSettings *s = hn_app_settings ();
  g_autofree char *last = s && key ? g_settings_get_string (s, key) : NULL;
  if (last && *last && g_file_test (last, test))
    {
      hn_job_spec_set_string (spec, option, last);
      return;
    }
  g_autofree char *d = demo ? hn_demo_path (demo) : NULL;
  if (d)
    hn_job_spec_set_string (spec, option, d);
}

static gboolean
is_empty_or_missing (const char *dir)
{
  if (!g_file_test (dir, G_FILE_TEST_EXISTS))
    return TRUE;
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  return d && !g_dir_read_name (d);
}

void
hn_page_fresh_out_dir (HnJobSpec *spec)
{
  if (!hn_job_spec_lookup (spec, "out-dir") || !hn_job_spec_is_set (spec, "out-dir") ||
      (hn_job_spec_lookup (spec, "resume-from-checkpoint") && hn_job_spec_is_set (spec, "resume-from-checkpoint")) ||
      (hn_job_spec_lookup (spec, "overwrite-output-dir") && hn_job_spec_get_bool (spec, "overwrite-output-dir")))
    return;
  const char *out = hn_job_spec_get_string (spec, "out-dir");
  if (is_empty_or_missing (out))
    return;
  /* only the page's own names, KIND or KIND-N: a folder the user chose is left to the job's check */
  const char *kind = hn_job_spec_get_kind (spec);
  g_autofree char *base = g_path_get_basename (out);
  gsize kl = strlen (kind);
  if (strncmp (base, kind, kl) != 0 ||
      (base[kl] && (base[kl] != '-' || !base[kl + 1] || strspn (base + kl + 1, "0123456789") != strlen (base + kl + 1))))
    return;
  g_autofree char *parent = g_path_get_dirname (out);
  for (int n = 2; n < 10000; n++)
    {
      g_autofree char *name = g_strdup_printf ("%s-%d", kind, n);
      g_autofree char *next = g_build_filename (parent, name, NULL);
      if (is_empty_or_missing (next))
        {
          hn_job_spec_set_string (spec, "out-dir", next);
          return;
        }
    }
}

void
hn_page_apply_defaults (HnJobSpec *spec)
{
  const char *kind = hn_job_spec_get_kind (spec);
  gboolean hier = g_str_has_prefix (kind, "hierarchos-");
  if (g_str_equal (kind, "hierarchos-train"))
    default_path (spec, "tokenizer-path", NULL, "stories260K", G_FILE_TEST_IS_DIR);
  else if (!hier)
    default_path (spec, "model-path", "last-model-path", "stories260K", G_FILE_TEST_IS_DIR);
  default_path (spec, "train", "last-dataset-path", "tinyshakespeare-small.txt", G_FILE_TEST_IS_REGULAR);
  if (hn_job_spec_lookup (spec, "out-dir") && !hn_job_spec_is_set (spec, "out-dir"))
    {
      GSettings *s = hn_app_settings ();
      g_autofree char *base = s ? g_settings_get_string (s, "last-output-dir") : NULL;
      if (!base || !*base)
        {
          g_free (base);
          base = g_build_filename (g_get_user_data_dir (), "hierarchos-native", "runs", NULL);
        }
      g_autofree char *out = g_build_filename (base, kind, NULL);
      hn_job_spec_set_string (spec, "out-dir", out);
      /* an earlier run's folder is never reused by default: the job refuses it */
      hn_page_fresh_out_dir (spec);
    }
  GSettings *s = hn_app_settings ();
  if (s && hn_job_spec_lookup (spec, "device-index"))
    {
      int dev = g_settings_get_int (s, "last-device");
      if (dev >= 0)
        hn_job_spec_set_int (spec, "device-index", dev);
    }
}

void
hn_page_remember (HnJobSpec *spec)
{
  GSettings *s = hn_app_settings ();
  if (!s)
    return;
  const char *kind = hn_job_spec_get_kind (spec);
  if (!g_str_has_prefix (kind, "hierarchos-") && hn_job_spec_lookup (spec, "model-path") &&
      hn_job_spec_is_set (spec, "model-path"))
    g_settings_set_string (s, "last-model-path", hn_job_spec_get_string (spec, "model-path"));
  if (hn_job_spec_lookup (spec, "train") && hn_job_spec_is_set (spec, "train"))
    g_settings_set_string (s, "last-dataset-path", hn_job_spec_get_string (spec, "train"));
  if (hn_job_spec_lookup (spec, "out-dir") && hn_job_spec_is_set (spec, "out-dir"))
    {
      g_autofree char *parent = g_path_get_dirname (hn_job_spec_get_string (spec, "out-dir"));
      g_settings_set_string (s, "last-output-dir", parent);
    }
  if (hn_job_spec_lookup (spec, "device-index"))
    g_settings_set_int (s, "last-device", (int) hn_job_spec_get_int (spec, "device-index"));
}

char *
hn_page_start_problem (HnJobSpec *spec, GtkWidget **groups)
{
  for (GtkWidget **g = groups; g && *g; g++)
    {
      char *p = gtk_widget_get_visible (*g) ? hn_option_group_dup_problem (HN_OPTION_GROUP (*g)) : NULL;
      if (p)
        return p;
    }
  const HnJobKindInfo *kind = hn_job_spec_get_kind_info (spec);
  /* the "exactly one of" groups, in the GUI's words */
  g_auto (GStrv) one_of = g_strsplit (kind->one_of ? kind->one_of : "", ";", -1);
  for (char **grp = one_of; *grp; grp++)
    {
      if (!**grp)
        continue;
      g_auto (GStrv) names = g_strsplit (*grp, "|", -1);
      guint n_set = 0;
      GString *labels = g_string_new (NULL);
      for (guint i = 0; names[i]; i++)
        {
          if (hn_job_spec_is_set (spec, names[i]))
            n_set++;
          const HnOptionInfo *o = hn_job_spec_lookup (spec, names[i]);
          if (i > 0)
            g_string_append (labels, names[i + 1] ? ", " : _(" or "));
          g_string_append (labels, gettext (o->label));
        }
      char *msg = NULL;
      if (n_set == 0)
        msg = g_strdup_printf (_("Set the %s"), labels->str);
      else if (n_set > 1)
        msg = g_strdup_printf (_("Use only one of: %s"), labels->str);
      g_string_free (labels, TRUE);
      if (msg)
        return msg;
    }
  g_autoptr (GError) error = NULL;
  if (!hn_job_spec_validate (spec, &error))
    return g_strdup (error->message);
  if (!hn_job_kind_is_registered (kind->name))
    return g_strdup_printf (_("%s is not available in this build yet"), gettext (kind->title));
  return NULL;
}

void
hn_page_toast (GtkWidget *widget, const char *message)
{
  gtk_widget_activate_action (widget, "win.show-toast", "s", message);
}

GtkWidget *
hn_page_add_bubble (GtkListBox *list, gboolean from_user, const char *text)
{
  GtkWidget *label = gtk_label_new (text);
  gtk_label_set_wrap (GTK_LABEL (label), TRUE);
  gtk_label_set_wrap_mode (GTK_LABEL (label), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_selectable (GTK_LABEL (label), TRUE);
  gtk_label_set_xalign (GTK_LABEL (label), 0);
  gtk_label_set_max_width_chars (GTK_LABEL (label), 60);
  gtk_widget_add_css_class (label, "bubble");
  gtk_widget_add_css_class (label, from_user ? "user" : "assistant");
  gtk_widget_set_halign (label, from_user ? GTK_ALIGN_END : GTK_ALIGN_START);
  gtk_widget_set_margin_start (label, from_user ? 60 : 8);
  gtk_widget_set_margin_end (label, from_user ? 8 : 60);
  gtk_widget_set_margin_top (label, 4);
  gtk_widget_set_margin_bottom (label, 4);
  gtk_accessible_update_property (GTK_ACCESSIBLE (label), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  from_user ? _("You said") : _("The model said"), -1);
  gtk_list_box_append (list, label);
  gtk_list_box_row_set_activatable (GTK_LIST_BOX_ROW (gtk_widget_get_parent (label)), FALSE);
  return label;
}

gint64
hn_page_json_int (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64 ? json_node_get_int (n) : -1;
}

const char *
hn_page_json_string (JsonObject *o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);
  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_STRING ? json_node_get_string (n)
                                                                                          : NULL;
}

/* The results of a hub-search job's output (one JSON page), owned by
 * `parser`, or NULL when it holds none; *next_cursor the next page's cursor. */
static JsonArray *
search_results (JsonParser *parser, const char *output, char **next_cursor)
{
  *next_cursor = NULL;
  if (!hn_json_parser_load (parser, output, -1, "search reply", NULL))
    return NULL;
  JsonNode *root = json_parser_get_root (parser);
  JsonObject *o = root && JSON_NODE_HOLDS_OBJECT (root) ? json_node_get_object (root) : NULL;
  JsonNode *rn = o ? json_object_get_member (o, "results") : NULL;
  if (!rn || !JSON_NODE_HOLDS_ARRAY (rn))
    return NULL;
  const char *next = hn_page_json_string (o, "next_cursor");
  *next_cursor = next ? g_strdup (next) : NULL;
  return json_node_get_array (rn);
}

void
hn_page_start_search (HnJobController *ctl, HnJobSpec *spec, const char *cursor, GString *out, GtkWidget *command,
                      GtkWidget *status)
{
  g_autoptr (GError) error = NULL;
  hn_job_spec_set_string (spec, "cursor", cursor);
  g_string_truncate (out, 0);
  hn_command_view_set_spec (HN_COMMAND_VIEW (command), spec);
  gtk_label_set_text (GTK_LABEL (status), _("Searching…"));
  if (!hn_job_controller_start (ctl, spec, &error))
    gtk_label_set_text (GTK_LABEL (status), error->message);
}

void
hn_page_collect_output (const HnJobEvent *e, GString *out)
{
  if (e->type == HN_JOB_EVENT_TOKEN)
    g_string_append (out, e->token.text);
}

gboolean
hn_page_finish_search (gboolean ok, const char *message, const char *out, char **next_cursor, HnPageResultFunc add,
                       gpointer data, GtkWidget *status)
{
  if (!ok)
    {
      gtk_label_set_text (GTK_LABEL (status), message ? message : _("The search failed"));
      return FALSE;
    }
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonArray *a = search_results (parser, out, next_cursor);
  if (!a)
    {
      gtk_label_set_text (GTK_LABEL (status), _("The search job printed no results"));
      return FALSE;
    }
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      JsonNode *en = json_array_get_element (a, i);
      JsonObject *o = JSON_NODE_HOLDS_OBJECT (en) ? json_node_get_object (en) : NULL;
      const char *id = o ? hn_page_json_string (o, "id") : NULL;
      if (id)
        add (o, id, data);
    }
  return TRUE;
}
