#include "hn-device-list-row.h"
#include "hn-devices.h"
#include "jobs/job-spec.h"

#include <glib/gi18n.h>

struct _HnDeviceListRow
{
  AdwExpanderRow parent_instance;
  HnDevices *devices;
  GPtrArray *rows;     /* the AdwActionRow of each device, in list order */
  GPtrArray *checks;   /* GtkCheckButton per device */
  GArray *indices;     /* engine device index per check */
  char *selection;     /* "0,1" or NULL */
  gboolean updating;
};

enum { PROP_0, PROP_DEVICE_INDICES, N_PROPS };
static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (HnDeviceListRow, hn_device_list_row, ADW_TYPE_EXPANDER_ROW)

static void
update_subtitle (HnDeviceListRow *self)
{
  g_autofree char *s = self->selection ? g_strdup_printf (_("Devices %s: one replica of the model on each, the batch split across them"),
                                                          self->selection)
                                       : g_strdup (_("Check two or more devices to train on all of them at once"));
  adw_expander_row_set_subtitle (ADW_EXPANDER_ROW (self), s);
}

/* selection -> checks */
static void
sync_checks (HnDeviceListRow *self)
{
  g_autoptr (GArray) want = self->selection ? hn_parse_device_indices (self->selection, NULL) : NULL;
  self->updating = TRUE;
  for (guint i = 0; i < self->checks->len; i++)
    {
      gboolean on = FALSE;
      for (guint k = 0; want && k < want->len; k++)
        on = on || g_array_index (want, int, k) == g_array_index (self->indices, int, i);
      gtk_check_button_set_active (g_ptr_array_index (self->checks, i), on);
    }
  self->updating = FALSE;
  update_subtitle (self);
}

static void
on_toggled (GtkCheckButton *check, HnDeviceListRow *self)
{
  if (self->updating)
    return;
  g_autoptr (GString) s = g_string_new (NULL);
  for (guint i = 0; i < self->checks->len; i++)
    if (gtk_check_button_get_active (g_ptr_array_index (self->checks, i)))
      g_string_append_printf (s, "%s%d", s->len ? "," : "", g_array_index (self->indices, int, i));
  const char *text = s->len ? s->str : NULL;
  if (g_strcmp0 (text, self->selection) == 0)
    return;
  g_free (self->selection);
  self->selection = g_strdup (text);
  update_subtitle (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DEVICE_INDICES]);
}

static void
refill (HnDeviceListRow *self)
{
  for (guint i = 0; i < self->rows->len; i++)
    adw_expander_row_remove (ADW_EXPANDER_ROW (self), g_ptr_array_index (self->rows, i));
  g_ptr_array_set_size (self->rows, 0);
  g_ptr_array_set_size (self->checks, 0);
  g_array_set_size (self->indices, 0);
  GPtrArray *entries = hn_devices_is_ready (self->devices) ? hn_devices_get_entries (self->devices) : NULL;
  for (guint i = 0; entries && i < entries->len; i++)
    {
      const HnDeviceEntry *e = g_ptr_array_index (entries, i);
      g_autofree char *title = hn_device_entry_describe (e);
      GtkWidget *row = adw_action_row_new ();
      adw_preferences_row_set_title (ADW_PREFERENCES_ROW (row), title);
      GtkWidget *check = gtk_check_button_new ();
      gtk_widget_set_valign (check, GTK_ALIGN_CENTER);
      adw_action_row_add_prefix (ADW_ACTION_ROW (row), check);
      adw_action_row_set_activatable_widget (ADW_ACTION_ROW (row), check);
      g_signal_connect (check, "toggled", G_CALLBACK (on_toggled), self);
      adw_expander_row_add_row (ADW_EXPANDER_ROW (self), row);
      g_ptr_array_add (self->rows, row);
      g_ptr_array_add (self->checks, check);
      g_array_append_val (self->indices, e->index);
    }
  sync_checks (self);
}

static void
on_ready (HnDevices *devices, GParamSpec *pspec, HnDeviceListRow *self)
{
  refill (self);
}

const char *
hn_device_list_row_get_device_indices (HnDeviceListRow *self)
{
  return self->selection;
}

void
hn_device_list_row_set_device_indices (HnDeviceListRow *self, const char *indices)
{
  if (indices && !*indices)
    indices = NULL;
  if (g_strcmp0 (indices, self->selection) == 0)
    return;
  g_free (self->selection);
  self->selection = g_strdup (indices);
  sync_checks (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_DEVICE_INDICES]);
}

GtkCheckButton *
hn_device_list_row_get_check (HnDeviceListRow *self, int index)
{
  for (guint i = 0; i < self->checks->len; i++)
    if (g_array_index (self->indices, int, i) == index)
      return g_ptr_array_index (self->checks, i);
  return NULL;
}

static void
hn_device_list_row_dispose (GObject *object)
{
  HnDeviceListRow *self = HN_DEVICE_LIST_ROW (object);
  if (self->devices)
    g_signal_handlers_disconnect_by_data (self->devices, self);
  g_clear_object (&self->devices);
  G_OBJECT_CLASS (hn_device_list_row_parent_class)->dispose (object);
}

static void
hn_device_list_row_finalize (GObject *object)
{
  HnDeviceListRow *self = HN_DEVICE_LIST_ROW (object);
  g_ptr_array_unref (self->rows);
  g_ptr_array_unref (self->checks);
  g_array_unref (self->indices);
  g_free (self->selection);
  G_OBJECT_CLASS (hn_device_list_row_parent_class)->finalize (object);
}

static void
hn_device_list_row_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_DEVICE_INDICES: g_value_set_string (value, HN_DEVICE_LIST_ROW (object)->selection); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_device_list_row_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  switch (prop_id)
    {
    case PROP_DEVICE_INDICES:
      hn_device_list_row_set_device_indices (HN_DEVICE_LIST_ROW (object), g_value_get_string (value));
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
hn_device_list_row_class_init (HnDeviceListRowClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  object_class->dispose = hn_device_list_row_dispose;
  object_class->finalize = hn_device_list_row_finalize;
  object_class->get_property = hn_device_list_row_get_property;
  object_class->set_property = hn_device_list_row_set_property;
  properties[PROP_DEVICE_INDICES] = g_param_spec_string ("device-indices", NULL, NULL, NULL,
                                                         G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
hn_device_list_row_init (HnDeviceListRow *self)
{
  self->rows = g_ptr_array_new ();
  self->checks = g_ptr_array_new ();
  self->indices = g_array_new (FALSE, FALSE, sizeof (int));
  self->devices = g_object_ref (hn_devices_get_default ());
  g_signal_connect (self->devices, "notify::ready", G_CALLBACK (on_ready), self);
  refill (self);
}

GtkWidget *
hn_device_list_row_new (void)
{
  return g_object_new (HN_TYPE_DEVICE_LIST_ROW, NULL);
}
