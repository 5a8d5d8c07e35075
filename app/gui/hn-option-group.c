#include "hn-option-group.h"
#include "hn-device-list-row.h"
#include "hn-device-row.h"
#include "jobs/model-library.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

typedef struct {
  char *name;              /* canonical option name */
  const HnOptionInfo *info;
  GtkWidget *row;
  GtkWidget *editor;
  char *problem;           /* inline problem of this row, or NULL */
} Row;

struct _HnOptionGroup
{
  AdwPreferencesGroup parent_instance;
  char *options;
  HnJobSpec *spec;
  gulong changed_id;
  GPtrArray *rows;         /* Row* */
  GtkWidget *expander;     /* "More options" */
  GPtrArray *added;        /* widgets we added to the group */
  gboolean updating;       /* writing spec -> widgets: ignore widget signals */
};

enum { PROP_0, PROP_OPTIONS, PROP_SPEC, N_PROPS };
static GParamSpec *properties[N_PROPS];
enum { PROBLEMS_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (HnOptionGroup, hn_option_group, ADW_TYPE_PREFERENCES_GROUP)

static void
row_free (Row *r)
{
  g_free (r->name);
  g_free (r->problem);
  g_free (r);
}

static Row *
find_row (HnOptionGroup *self, const char *name)
{
  for (guint i = 0; i < self->rows->len; i++)
    {
      Row *r = g_ptr_array_index (self->rows, i);
      if (strcmp (r->name, name) == 0)
        return r;
    }
  return NULL;
}

static void
set_problem (HnOptionGroup *self, Row *r, const char *problem)
{
  if (g_strcmp0 (r->problem, problem) == 0)
    return;
  g_free (r->problem);
  r->problem = g_strdup (problem);
  GtkWidget *target = r->editor && GTK_IS_ENTRY (r->editor) ? r->editor : r->row;
  if (problem)
    {
      gtk_widget_add_css_class (target, "error");
      gtk_widget_set_tooltip_text (target, problem);
    }
  else
    {
      gtk_widget_remove_css_class (target, "error");
      gtk_widget_set_tooltip_text (target, gettext (r->info->help));
    }
  g_signal_emit (self, signals[PROBLEMS_CHANGED], 0);
}

/* The spec's check, reworded with the row's label for the GUI. */
static void
check_spec_value (HnOptionGroup *self, Row *r)
{
  g_autoptr (GError) error = NULL;
  if (!hn_job_spec_check_option (self->spec, r->name, &error))
    {
      g_autofree char *msg = g_strdup_printf ("%s: %s", gettext (r->info->label), error->message);
      set_problem (self, r, msg);
    }
  else
    set_problem (self, r, NULL);
}

static gboolean
valid_hub_id (const char *s)
{
  /* org/name or name: letters, digits, '-', '_', '.'; no "..", no leading '/' */
  if (!*s || strstr (s, "..") || s[0] == '/' || s[0] == '.')
    return FALSE;
  int slashes = 0;
  for (const char *p = s; *p; p++)
    {
      if (*p == '/')
        slashes++;
      else if (!g_ascii_isalnum (*p) && !strchr ("-_.", *p))
        return FALSE;
    }
  return slashes <= 1 && s[strlen (s) - 1] != '/';
}

static void
check_path (HnOptionGroup *self, Row *r, const char *value)
{
  g_autofree char *msg = NULL;
  const char *label = gettext (r->info->label);
  if (value && *value)
    {
      switch (r->info->hint)
        {
        case HN_OPTION_HINT_FILE:
          if (!g_file_test (value, G_FILE_TEST_IS_REGULAR))
            msg = g_strdup_printf (_("%s: there is no file %s"), label, value);
          break;
        case HN_OPTION_HINT_FOLDER:
          if (!g_file_test (value, G_FILE_TEST_IS_DIR))
            msg = g_strdup_printf (_("%s: there is no folder %s"), label, value);
          break;
        case HN_OPTION_HINT_SAVE_FILE:
          {
            g_autofree char *dir = g_path_get_dirname (value);
            if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
              msg = g_strdup_printf (_("%s: the folder %s does not exist"), label, dir);
            else if (g_file_test (value, G_FILE_TEST_IS_DIR))
              msg = g_strdup_printf (_("%s: %s is a folder"), label, value);
          }
          break;
        case HN_OPTION_HINT_SAVE_FOLDER:
          if (g_file_test (value, G_FILE_TEST_EXISTS) && !g_file_test (value, G_FILE_TEST_IS_DIR))
            msg = g_strdup_printf (_("%s: %s is a file, not a folder"), label, value);
          break;
        case HN_OPTION_HINT_HUB_ID:
          if (!valid_hub_id (value))
            msg = g_strdup_printf (_("%s: '%s' is not a Hub id like org/name"), label, value);
          break;
        default:
          break;
        }
    }
  set_problem (self, r, msg);
}

/* ---- widgets -> spec ---------------------------------------------------- */

static void
on_spin_changed (GtkSpinButton *spin, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (spin), "hn-group");
  if (self->updating)
    return;
  hn_job_spec_set_int (self->spec, r->name, (gint64) llround (gtk_spin_button_get_value (spin)));
  check_spec_value (self, r);
}

static void
on_number_changed (GtkEditable *editable, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (editable), "hn-group");
  if (self->updating)
    return;
  const char *text = gtk_editable_get_text (editable);
  g_autofree char *trimmed = g_strstrip (g_strdup (text));
  char *end = NULL;
  double v = g_ascii_strtod (trimmed, &end);
  if (!*trimmed || *end || !isfinite (v))
    {
      g_autofree char *msg = g_strdup_printf (_("%s: '%s' is not a number"), gettext (r->info->label), trimmed);
      set_problem (self, r, msg);
      return;
    }
  hn_job_spec_set_double (self->spec, r->name, v);
  check_spec_value (self, r);
}

static void
on_switch_active (GtkSwitch *sw, GParamSpec *pspec, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (sw), "hn-group");
  if (self->updating)
    return;
  hn_job_spec_set_bool (self->spec, r->name, gtk_switch_get_active (sw));
}

/* Choice rows: item 0 is "Model default" when the option has no default. */
static void
on_combo_selected (AdwComboRow *combo, GParamSpec *pspec, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (combo), "hn-group");
  if (self->updating)
    return;
  guint sel = adw_combo_row_get_selected (combo);
  if (strcmp (r->name, "cache-implementation") == 0)
    {
      /* Model default / Contiguous / Paged / Disabled: two flags in one row */
      static const char *const impl[] = { NULL, "contiguous", "paged", NULL };
      if (sel > 3)
        return;
      hn_job_spec_set_string (self->spec, "cache-implementation", impl[sel]);
      if (hn_job_spec_lookup (self->spec, "no-use-cache"))
        hn_job_spec_set_bool (self->spec, "no-use-cache", sel == 3);
      return;
    }
  g_auto (GStrv) choices = g_strsplit (r->info->choices, " ", -1);
  guint offset = r->info->default_value ? 0 : 1;
  if (sel < offset)
    hn_job_spec_set_string (self->spec, r->name, NULL);
  else if (sel - offset < g_strv_length (choices))
    hn_job_spec_set_string (self->spec, r->name, choices[sel - offset]);
}

/* A list option's items in one text field: ", " between them, or "; " where
 * each item is itself a comma-separated list (token ids). */
static const char *
list_sep (const Row *r)
{
  return r->info->hint == HN_OPTION_HINT_ID_LISTS ? ";" : ",";
}

static void
on_text_changed (GtkEditable *editable, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (editable), "hn-group");
  if (self->updating)
    return;
  g_autofree char *text = g_strstrip (g_strdup (gtk_editable_get_text (editable)));
  if (r->info->type == HN_OPTION_STRINGV)
    {
      g_auto (GStrv) parts = g_strsplit (text, list_sep (r), -1);
      GPtrArray *v = g_ptr_array_new ();
      for (char **p = parts; *p; p++)
        {
          g_strstrip (*p);
          if (**p)
            g_ptr_array_add (v, *p);
        }
      g_ptr_array_add (v, NULL);
      hn_job_spec_set_strv (self->spec, r->name, (const char *const *) v->pdata);
      g_ptr_array_free (v, TRUE);
      return;
    }
  hn_job_spec_set_string (self->spec, r->name, *text ? text : NULL);
  check_path (self, r, text);
}

static void
on_device_changed (HnDeviceRow *row, GParamSpec *pspec, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (row), "hn-group");
  if (self->updating)
    return;
  int idx = hn_device_row_get_device_index (row);
  hn_job_spec_set_int (self->spec, r->name, idx);
  /* one device or several: picking one here clears the several */
  if (idx >= 0 && hn_job_spec_lookup (self->spec, "device-indices"))
    hn_job_spec_unset (self->spec, "device-indices");
}

static void
on_device_list_changed (HnDeviceListRow *row, GParamSpec *pspec, Row *r)
{
  HnOptionGroup *self = g_object_get_data (G_OBJECT (row), "hn-group");
  if (self->updating)
    return;
  const char *v = hn_device_list_row_get_device_indices (row);
  hn_job_spec_set_string (self->spec, r->name, v);
  if (v && hn_job_spec_lookup (self->spec, "device-index")) /* --device-indices replaces --device-index */
    hn_job_spec_unset (self->spec, "device-index");
}

/* ---- file chooser ------------------------------------------------------- */

static void
on_chooser_response (GtkNativeDialog *dialog, int response, gpointer user_data)
{
  GtkEditable *entry = user_data;
  if (response == GTK_RESPONSE_ACCEPT)
    {
      g_autoptr (GFile) file = gtk_file_chooser_get_file (GTK_FILE_CHOOSER (dialog));
      g_autofree char *path = file ? g_file_get_path (file) : NULL;
      if (path)
        gtk_editable_set_text (entry, path);
    }
  gtk_native_dialog_destroy (dialog);
  g_object_unref (dialog);
  g_object_unref (entry);
}

static void
on_browse (GtkButton *button, Row *r)
{
  GtkEditable *entry = GTK_EDITABLE (r->editor);
  GtkRoot *root = gtk_widget_get_root (GTK_WIDGET (button));
  GtkFileChooserAction action = GTK_FILE_CHOOSER_ACTION_OPEN;
  const char *accept = _("_Open");
  switch (r->info->hint)
    {
    case HN_OPTION_HINT_FOLDER:
    case HN_OPTION_HINT_SAVE_FOLDER:
      action = GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER;
      accept = _("_Select");
      break;
    case HN_OPTION_HINT_SAVE_FILE:
      action = GTK_FILE_CHOOSER_ACTION_SAVE;
      accept = _("_Save");
      break;
    default:
      break;
    }
  g_autofree char *title = g_strdup_printf (_("Choose %s"), gettext (r->info->label));
  GtkFileChooserNative *dialog = gtk_file_chooser_native_new (title, GTK_IS_WINDOW (root) ? GTK_WINDOW (root) : NULL,
                                                              action, accept, _("_Cancel"));
  gtk_native_dialog_set_modal (GTK_NATIVE_DIALOG (dialog), TRUE);
  const char *cur = gtk_editable_get_text (entry);
  if (cur && *cur)
    {
      g_autoptr (GFile) f = g_file_new_for_path (cur);
      if (action == GTK_FILE_CHOOSER_ACTION_OPEN && g_file_query_exists (f, NULL))
        gtk_file_chooser_set_file (GTK_FILE_CHOOSER (dialog), f, NULL);
      else if (g_file_query_file_type (f, 0, NULL) == G_FILE_TYPE_DIRECTORY)
        gtk_file_chooser_set_current_folder (GTK_FILE_CHOOSER (dialog), f, NULL);
    }
  g_signal_connect (dialog, "response", G_CALLBACK (on_chooser_response), g_object_ref (entry));
  gtk_native_dialog_show (GTK_NATIVE_DIALOG (dialog));
}

/* ---- spec -> widgets ---------------------------------------------------- */

static void
load_row (HnOptionGroup *self, Row *r)
{
  HnJobSpec *spec = self->spec;
  self->updating = TRUE;
  switch (r->info->type)
    {
    case HN_OPTION_INT:
      if (HN_IS_DEVICE_ROW (r->editor))
        hn_device_row_set_device_index (HN_DEVICE_ROW (r->editor), (int) hn_job_spec_get_int (spec, r->name));
      else
        gtk_spin_button_set_value (GTK_SPIN_BUTTON (r->editor), (double) hn_job_spec_get_int (spec, r->name));
      check_spec_value (self, r);
      break;
    case HN_OPTION_DOUBLE:
      {
        g_autofree char *t = hn_job_spec_value_to_string (spec, r->name);
        /* do not rewrite what the user is typing ("1e-" -> "0.1") */
        const char *cur = gtk_editable_get_text (GTK_EDITABLE (r->editor));
        char *end = NULL;
        double v = g_ascii_strtod (cur, &end);
        if (!(*cur && !*end && v == hn_job_spec_get_double (spec, r->name)))
          gtk_editable_set_text (GTK_EDITABLE (r->editor), t);
        check_spec_value (self, r);
      }
      break;
    case HN_OPTION_BOOL:
      gtk_switch_set_active (GTK_SWITCH (r->editor), hn_job_spec_get_bool (spec, r->name));
      break;
    case HN_OPTION_CHOICE:
      {
        const char *v = hn_job_spec_get_string (spec, r->name);
        guint sel = 0;
        if (strcmp (r->name, "cache-implementation") == 0)
          {
            gboolean off = hn_job_spec_lookup (spec, "no-use-cache") && hn_job_spec_get_bool (spec, "no-use-cache");
            sel = off ? 3 : g_strcmp0 (v, "contiguous") == 0 ? 1 : g_strcmp0 (v, "paged") == 0 ? 2 : 0;
          }
        else
          {
            g_auto (GStrv) choices = g_strsplit (r->info->choices, " ", -1);
            guint offset = r->info->default_value ? 0 : 1;
            for (guint i = 0; choices[i]; i++)
              if (g_strcmp0 (choices[i], v) == 0)
                sel = i + offset;
          }
        adw_combo_row_set_selected (ADW_COMBO_ROW (r->editor), sel);
      }
      break;
    case HN_OPTION_STRING:
      if (HN_IS_DEVICE_LIST_ROW (r->editor))
        {
          hn_device_list_row_set_device_indices (HN_DEVICE_LIST_ROW (r->editor), hn_job_spec_get_string (spec, r->name));
          check_spec_value (self, r);
          break;
        }
      {
        const char *v = hn_job_spec_get_string (spec, r->name);
        g_autofree char *cur = g_strstrip (g_strdup (gtk_editable_get_text (GTK_EDITABLE (r->editor))));
        if (g_strcmp0 (cur, v ? v : "") != 0)
          gtk_editable_set_text (GTK_EDITABLE (r->editor), v ? v : "");
        check_path (self, r, v);
      }
      break;
    case HN_OPTION_STRINGV:
      {
        g_autofree char *sep = g_strconcat (list_sep (r), " ", NULL);
        g_autofree char *joined = g_strjoinv (sep, (char **) hn_job_spec_get_strv (spec, r->name));
        g_autofree char *cur = g_strdup (gtk_editable_get_text (GTK_EDITABLE (r->editor)));
        /* compare as lists, so typing ", " is not undone */
        g_auto (GStrv) a = g_strsplit (cur, list_sep (r), -1);
        GString *norm = g_string_new (NULL);
        for (char **p = a; *p; p++)
          {
            g_strstrip (*p);
            if (**p)
              g_string_append_printf (norm, "%s%s", norm->len ? sep : "", *p);
          }
        if (strcmp (norm->str, joined) != 0)
          gtk_editable_set_text (GTK_EDITABLE (r->editor), joined);
        g_string_free (norm, TRUE);
      }
      break;
    }
  self->updating = FALSE;
}

#define KV_ROW_SUBTITLE N_("How keys and values of earlier tokens are kept while generating")

/* The KV-cache row follows the chosen model: a state-space model keeps a recurrent state per layer
 * instead (the row does not apply and is set back to the default), a hybrid keeps both and runs on
 * the contiguous cache only (paged KV fails closed for its state layers). */
static void
update_cache_row (HnOptionGroup *self)
{
  Row *r = find_row (self, "cache-implementation");
  if (!r || !hn_job_spec_lookup (self->spec, "model-path"))
    return;
  HnCacheKind kind = hn_local_model_cache_kind (hn_job_spec_get_string (self->spec, "model-path"));
  const char *subtitle = kind == HN_CACHE_STATE ? _("This model keeps a recurrent state per layer, not a KV cache")
                         : kind == HN_CACHE_KV_AND_STATE
                           ? _("A KV cache for the attention layers and a recurrent state for the others "
                               "(contiguous only: paged KV is not built for state layers)")
                           : gettext (KV_ROW_SUBTITLE);
  adw_action_row_set_subtitle (ADW_ACTION_ROW (r->row), subtitle);
  gtk_widget_set_sensitive (r->row, kind != HN_CACHE_STATE);
  if (kind != HN_CACHE_KV && g_strcmp0 (hn_job_spec_get_string (self->spec, "cache-implementation"), "paged") == 0)
    hn_job_spec_set_string (self->spec, "cache-implementation", NULL);
  if (kind == HN_CACHE_STATE && hn_job_spec_lookup (self->spec, "no-use-cache") &&
      hn_job_spec_get_bool (self->spec, "no-use-cache"))
    hn_job_spec_set_bool (self->spec, "no-use-cache", FALSE);
}

static void
on_spec_changed (HnJobSpec *spec, const char *name, HnOptionGroup *self)
{
  if (strcmp (name, "model-path") == 0)
    update_cache_row (self);
  Row *r = find_row (self, name);
  if (!r && strcmp (name, "no-use-cache") == 0)
    r = find_row (self, "cache-implementation");
  if (r)
    load_row (self, r);
}

static GtkWidget *
make_row (HnOptionGroup *self, Row *r)
{
  const HnOptionInfo *o = r->info;
  const char *label = gettext (o->label);
  const char *help = gettext (o->help);
  GtkWidget *row = NULL;

  if (o->hint == HN_OPTION_HINT_DEVICE)
    {
      row = hn_device_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), label);
      r->editor = row;
      g_object_set_data (G_OBJECT (row), "hn-group", self);
      g_signal_connect (row, "notify::device-index", G_CALLBACK (on_device_changed), r);
    }
  else if (o->hint == HN_OPTION_HINT_DEVICES)
    {
      row = hn_device_list_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), label);
      r->editor = row;
      g_object_set_data (G_OBJECT (row), "hn-group", self);
      g_signal_connect (row, "notify::device-indices", G_CALLBACK (on_device_list_changed), r);
    }
  else if (o->type == HN_OPTION_INT || o->type == HN_OPTION_DOUBLE || o->type == HN_OPTION_BOOL)
    {
      row = adw_action_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), label);
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), help);
      adw_action_row_set_subtitle_lines (ADW_ACTION_ROW (row), 2);
      GtkWidget *ed;
      if (o->type == HN_OPTION_INT)
        {
          double lo = o->min <= o->max ? o->min : -1e9, hi = o->min <= o->max ? MIN (o->max, 1e12) : 1e9;
          ed = gtk_spin_button_new_with_range (lo, hi, 1);
          gtk_spin_button_set_numeric (GTK_SPIN_BUTTON (ed), TRUE);
          g_signal_connect (ed, "value-changed", G_CALLBACK (on_spin_changed), r);
        }
      else if (o->type == HN_OPTION_DOUBLE)
        {
          ed = gtk_entry_new ();
          gtk_editable_set_width_chars (GTK_EDITABLE (ed), 9);
          gtk_editable_set_max_width_chars (GTK_EDITABLE (ed), 9);
          gtk_entry_set_input_purpose (GTK_ENTRY (ed), GTK_INPUT_PURPOSE_NUMBER);
          gtk_editable_set_alignment (GTK_EDITABLE (ed), 1.0);
          g_signal_connect (ed, "changed", G_CALLBACK (on_number_changed), r);
        }
      else
        {
          ed = gtk_switch_new ();
          g_signal_connect (ed, "notify::active", G_CALLBACK (on_switch_active), r);
          adw_action_row_set_activatable_widget (ADW_ACTION_ROW (row), ed);
        }
      gtk_widget_set_valign (ed, GTK_ALIGN_CENTER);
      gtk_accessible_update_property (GTK_ACCESSIBLE (ed), GTK_ACCESSIBLE_PROPERTY_LABEL, label, -1);
      adw_action_row_add_suffix (ADW_ACTION_ROW (row), ed);
      r->editor = ed;
      g_object_set_data (G_OBJECT (ed), "hn-group", self);
    }
  else if (o->type == HN_OPTION_CHOICE)
    {
      row = adw_combo_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), label);
      adw_action_row_set_subtitle (ADW_ACTION_ROW (row), help);
      GtkStringList *list = gtk_string_list_new (NULL);
      if (strcmp (o->name, "cache-implementation") == 0)
        {
          gtk_string_list_append (list, _("Model default"));
          gtk_string_list_append (list, _("Contiguous (native)"));
          gtk_string_list_append (list, _("Paged (Vulkan)"));
          if (hn_job_spec_lookup (self->spec, "no-use-cache"))
            gtk_string_list_append (list, _("Disabled (full prefix)"));
          adw_action_row_set_subtitle (ADW_ACTION_ROW (row), gettext (KV_ROW_SUBTITLE));
        }
      else
        {
          if (!o->default_value)
            gtk_string_list_append (list, _("Model default"));
          g_auto (GStrv) choices = g_strsplit (o->choices, " ", -1);
          for (char **c = choices; *c; c++)
            gtk_string_list_append (list, *c);
        }
      adw_combo_row_set_model (ADW_COMBO_ROW (row), G_LIST_MODEL (list));
      g_object_unref (list);
      r->editor = row;
      g_object_set_data (G_OBJECT (row), "hn-group", self);
      g_signal_connect (row, "notify::selected", G_CALLBACK (on_combo_selected), r);
    }
  else
    {
      row = adw_entry_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), label);
      r->editor = row;
      g_object_set_data (G_OBJECT (row), "hn-group", self);
      g_signal_connect (row, "changed", G_CALLBACK (on_text_changed), r);
      if (o->hint == HN_OPTION_HINT_FILE || o->hint == HN_OPTION_HINT_FOLDER ||
          o->hint == HN_OPTION_HINT_SAVE_FILE || o->hint == HN_OPTION_HINT_SAVE_FOLDER)
        {
          gboolean folder = o->hint == HN_OPTION_HINT_FOLDER || o->hint == HN_OPTION_HINT_SAVE_FOLDER;
          GtkWidget *b = gtk_button_new_from_icon_name (folder ? "folder-open-symbolic" : "document-open-symbolic");
          gtk_widget_set_valign (b, GTK_ALIGN_CENTER);
          gtk_widget_add_css_class (b, "flat");
          gtk_widget_set_tooltip_text (b, folder ? _("Choose a folder") : _("Choose a file"));
          gtk_accessible_update_property (GTK_ACCESSIBLE (b), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                          folder ? _("Choose a folder") : _("Choose a file"), -1);
          g_signal_connect (b, "clicked", G_CALLBACK (on_browse), r);
          adw_entry_row_add_suffix (ADW_ENTRY_ROW (row), b);
        }
      if (o->flags & HN_OPTION_SECRET)
        gtk_editable_set_enable_undo (GTK_EDITABLE (row), FALSE);
    }
  gtk_widget_set_tooltip_text (row, help);
  return row;
}

static void
clear_rows (HnOptionGroup *self)
{
  for (guint i = 0; i < self->added->len; i++)
    adw_preferences_group_remove (ADW_PREFERENCES_GROUP (self), g_ptr_array_index (self->added, i));
  g_ptr_array_set_size (self->added, 0);
  g_ptr_array_set_size (self->rows, 0);
  self->expander = NULL;
}

static void
rebuild (HnOptionGroup *self)
{
  clear_rows (self);
  if (!self->spec || !self->options)
    {
      gtk_widget_set_visible (GTK_WIDGET (self), FALSE);
      return;
    }
  g_auto (GStrv) names = g_strsplit_set (self->options, " \n\t", -1);
  gboolean has_kv = hn_job_spec_lookup (self->spec, "cache-implementation") != NULL;
  for (char **n = names; *n; n++)
    {
      if (!**n)
        continue;
      const HnOptionInfo *o = hn_job_spec_lookup (self->spec, *n);
      if (!o || o->hint == HN_OPTION_HINT_MULTILINE)
        continue;
      if (strcmp (o->name, "no-use-cache") == 0 && has_kv && strstr (self->options, "cache-implementation"))
        continue; /* part of the KV-cache row */
      Row *r = g_new0 (Row, 1);
      r->name = g_strdup (o->name);
      r->info = o;
      g_ptr_array_add (self->rows, r);
      r->row = make_row (self, r);
      if (o->flags & HN_OPTION_ADVANCED)
        {
          if (!self->expander)
            {
              self->expander = adw_expander_row_new ();
              adw_preferences_row_set_title (ADW_PREFERENCES_ROW (self->expander), _("More options"));
            }
          adw_expander_row_add_row (ADW_EXPANDER_ROW (self->expander), r->row);
        }
      else
        {
          adw_preferences_group_add (ADW_PREFERENCES_GROUP (self), r->row);
          g_ptr_array_add (self->added, r->row);
        }
      load_row (self, r);
    }
  if (self->expander)
    {
      adw_preferences_group_add (ADW_PREFERENCES_GROUP (self), self->expander);
      g_ptr_array_add (self->added, self->expander);
    }
  update_cache_row (self);
  gtk_widget_set_visible (GTK_WIDGET (self), self->rows->len > 0);
  g_signal_emit (self, signals[PROBLEMS_CHANGED], 0);
}

void
hn_option_group_set_spec (HnOptionGroup *self, HnJobSpec *spec)
{
  g_return_if_fail (HN_IS_OPTION_GROUP (self));
  if (self->spec == spec)
    return;
  if (self->spec)
    g_clear_signal_handler (&self->changed_id, self->spec);
  g_set_object (&self->spec, spec);
  if (spec)
    self->changed_id = g_signal_connect (spec, "changed", G_CALLBACK (on_spec_changed), self);
  rebuild (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SPEC]);
}

HnJobSpec *
hn_option_group_get_spec (HnOptionGroup *self)
{
  return self->spec;
}

char *
hn_option_group_dup_problem (HnOptionGroup *self)
{
  g_return_val_if_fail (HN_IS_OPTION_GROUP (self), NULL);
  for (guint i = 0; i < self->rows->len; i++)
    {
      Row *r = g_ptr_array_index (self->rows, i);
      if (r->problem)
        return g_strdup (r->problem);
    }
  return NULL;
}

GtkWidget *
hn_option_group_get_row (HnOptionGroup *self, const char *name)
{
  Row *r = find_row (self, name);
  return r ? r->row : NULL;
}

GtkWidget *
hn_option_group_get_editor (HnOptionGroup *self, const char *name)
{
  Row *r = find_row (self, name);
  return r ? r->editor : NULL;
}

static void
hn_option_group_dispose (GObject *object)
{
  HnOptionGroup *self = HN_OPTION_GROUP (object);
  if (self->spec)
    g_clear_signal_handler (&self->changed_id, self->spec);
  g_clear_object (&self->spec);
  G_OBJECT_CLASS (hn_option_group_parent_class)->dispose (object);
}

static void
hn_option_group_finalize (GObject *object)
{
  HnOptionGroup *self = HN_OPTION_GROUP (object);
  g_ptr_array_unref (self->rows);
  g_ptr_array_unref (self->added);
  g_free (self->options);
  G_OBJECT_CLASS (hn_option_group_parent_class)->finalize (object);
}

static void
hn_option_group_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  HnOptionGroup *self = HN_OPTION_GROUP (object);
  switch (prop_id)
    {
    case PROP_OPTIONS: g_value_set_string (value, self->options); break;
    case PROP_SPEC: g_value_set_object (value, self->spec); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_option_group_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  HnOptionGroup *self = HN_OPTION_GROUP (object);
  switch (prop_id)
    {
    case PROP_OPTIONS:
      g_free (self->options);
      self->options = g_value_dup_string (value);
      rebuild (self);
      break;
    case PROP_SPEC:
      hn_option_group_set_spec (self, g_value_get_object (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_option_group_class_init (HnOptionGroupClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->dispose = hn_option_group_dispose;
  object_class->finalize = hn_option_group_finalize;
  object_class->get_property = hn_option_group_get_property;
  object_class->set_property = hn_option_group_set_property;
  properties[PROP_OPTIONS] = g_param_spec_string ("options", NULL, NULL, NULL,
                                                  G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  properties[PROP_SPEC] = g_param_spec_object ("spec", NULL, NULL, HN_TYPE_JOB_SPEC,
                                               G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
  signals[PROBLEMS_CHANGED] = g_signal_new ("problems-changed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                            0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
hn_option_group_init (HnOptionGroup *self)
{
  self->rows = g_ptr_array_new_with_free_func ((GDestroyNotify) row_free);
  self->added = g_ptr_array_new ();
}
